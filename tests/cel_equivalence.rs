//! kadmit rewrites every CEL expression before running it (`src/cel.rs`:
//! its own comprehension macros, `replace`, `indexOf`, `lastIndexOf`,
//! `split`, `join`, `format`, `strings.quote`, `matches`, `+` as
//! `@kadmit_add`, each call's result through `@kadmit_made`, each
//! non-constant literal element through `@kadmit_copy`) to charge its cost
//! to the review's budget. Those rewrites may change the cost, never the
//! result. This differential test runs each expression twice on the same
//! variables: with kadmit (`Expression::compile` and `evaluate`, under a
//! budget nothing here reaches), and with plain cel-rust as the CEL
//! specification defines it (`Env::stdlib()`, its standard macros, the
//! strings extension, the crate's own serde conversion of the JSON
//! variables), and requires both to yield equal values (same type, doubles
//! bit for bit) or both to fail.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

use ::cel::{Context, Env, Value as CelValue};
use kadmit::cel::{Expression, Failure, Variable};
use kadmit::eval::budget::{Budget, Limits};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestError, TestRunner};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Value, json};

/// The variables: a realistic Pod (the `request.object` of
/// `create-pod.json`) with labels, annotations, three containers, numbers,
/// booleans, a null, an empty list, nested and empty maps and unicode text;
/// the previous version of it; and the admission request without its
/// objects.
struct Variables {
    object: Value,
    old_object: Value,
    request: Value,
}

static VARIABLES: LazyLock<Variables> = LazyLock::new(|| {
    let review: Value =
        serde_json::from_str(include_str!("fixtures/admission-reviews/create-pod.json"))
            .expect("the fixture is JSON");
    let mut request = review["request"].clone();
    let mut object = request["object"].take();
    request["oldObject"].take();
    let metadata = &mut object["metadata"];
    metadata["labels"] = json!({
        "app": "demo",
        "tier": "backend",
        "team": "Ωmega",
        "env": "prod",
    });
    metadata["annotations"] = json!({
        "note": "héllo wörld ☃ 日本語",
        "empty": "",
        "path": "a/b/c",
        "csv": "a,b,,c",
        "quote": "say \"hi\"\n\ttab\\ bell\u{7}",
        "padded": "  spaced out \t",
    });
    let spec = &mut object["spec"];
    spec["containers"] = json!([
        {
            "name": "app",
            "image": "registry.example/app:1.2.3",
            "ports": [{"containerPort": 8080, "protocol": "TCP"}, {"containerPort": 9090, "protocol": "UDP"}],
            "env": [{"name": "MODE", "value": "fast"}, {"name": "LANG", "value": "ja_JP.UTF-8"}],
            "resources": {},
        },
        {
            "name": "sidecar",
            "image": "registry.example/proxy@sha256:abcdef",
            "ports": [{"containerPort": 15001}],
            "env": [],
            "securityContext": {"privileged": false, "runAsUser": 1000},
        },
        {
            "name": "logger-ü",
            "image": "busybox",
            "ports": [],
            "env": [{"name": "MODE", "value": "slow"}],
        },
    ]);
    spec["priority"] = json!(1000);
    spec["offset"] = json!(-5);
    spec["ratio"] = json!(0.75);
    spec["big"] = json!(u64::MAX);
    spec["zero"] = json!(0);
    spec["whole"] = json!(2.0);
    spec["tiny"] = json!(1e-300);
    spec["lowest"] = json!(i64::MIN);
    spec["hostNetwork"] = json!(false);
    spec["nodeName"] = Value::Null;
    spec["volumes"] = json!([]);
    spec["nodeSelector"] = json!({});
    spec["extra"] = json!({"a": {"b": {"c": [1, 2, 3]}}, "list": [[1, 2], [], ["x"]]});
    let mut old_object = object.clone();
    old_object["metadata"]["labels"]["app"] = json!("old");
    old_object["spec"]["containers"]
        .as_array_mut()
        .expect("a list")
        .pop();
    Variables {
        object,
        old_object,
        request,
    }
});

/// A JSON value serialized with its integers as `int` when they fit, as
/// kadmit and Kubernetes' CEL read them: serde_json serializes every
/// non-negative integer as a `u64`, which cel's serializer makes a `uint`
/// (see [`plain_serde_conversion_makes_json_integers_uint`]). Everything
/// else goes through cel's own serializer.
struct IntsFirst<'a>(&'a Value);

impl Serialize for IntsFirst<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => serializer.serialize_i64(i),
                (None, Some(u)) => serializer.serialize_u64(u),
                (None, None) => serializer.serialize_f64(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::Array(list) => {
                let mut seq = serializer.serialize_seq(Some(list.len()))?;
                for item in list {
                    seq.serialize_element(&IntsFirst(item))?;
                }
                seq.end()
            }
            Value::Object(map) => {
                let mut out = serializer.serialize_map(Some(map.len()))?;
                for (key, item) in map {
                    out.serialize_entry(key, &IntsFirst(item))?;
                }
                out.end()
            }
            other => other.serialize(serializer),
        }
    }
}

/// What one side made of an expression (messages are only shown).
#[derive(Debug)]
#[allow(dead_code)]
enum Outcome {
    Value(CelValue),
    Error(String),
    NotCompiled(String),
    OverBudget,
    Panicked,
}

impl Outcome {
    fn failed(&self) -> bool {
        matches!(
            self,
            Outcome::Error(_) | Outcome::NotCompiled(_) | Outcome::Panicked
        )
    }
}

/// Whether both outcomes are equal values or both failures. CEL leaves the
/// order in which a comprehension visits a map's keys unspecified (cel-rust
/// iterates a `HashMap`, in an order of its own for each map), so when
/// `order_free` (the expression iterates a map) lists compare as multisets.
fn agree(kadmit: &Outcome, reference: &Outcome, order_free: bool) -> bool {
    match (kadmit, reference) {
        (Outcome::Value(a), Outcome::Value(b)) => {
            same(a, b) || (order_free && same_unordered(a, b))
        }
        (a, b) => a.failed() && b.failed(),
    }
}

/// [`same`], but with lists at any depth compared as multisets.
fn same_unordered(a: &CelValue, b: &CelValue) -> bool {
    use CelValue as V;
    match (a, b) {
        (V::List(x), V::List(y)) => {
            let mut unmatched: Vec<&CelValue> = y.iter().collect();
            x.len() == y.len()
                && x.iter().all(
                    |a| match unmatched.iter().position(|b| same_unordered(a, b)) {
                        Some(at) => {
                            unmatched.swap_remove(at);
                            true
                        }
                        None => false,
                    },
                )
        }
        (V::Map(x), V::Map(y)) => {
            x.map.len() == y.map.len()
                && x.map
                    .iter()
                    .all(|(key, a)| y.map.get(key).is_some_and(|b| same_unordered(a, b)))
        }
        _ => same(a, b),
    }
}

/// Whether `source` runs a comprehension over a map (one of [`MAPS`] or
/// another map the corpus writes), whose visiting order is unspecified.
fn iterates_a_map(source: &str) -> bool {
    MAPS.iter()
        .chain(&["{}", "{'a': 1, 'b': 2}", "object.spec.containers[0]"])
        .any(|map| {
            [".map(", ".filter("]
                .iter()
                .any(|call| source.contains(&format!("{map}{call}")))
        })
}

/// Strict equality: the same type (an `int` is not a `uint` or a
/// `double`), doubles bit for bit or both NaN, maps with the same keys.
fn same(a: &CelValue, b: &CelValue) -> bool {
    use CelValue as V;
    match (a, b) {
        (V::List(x), V::List(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(a, b)| same(a, b))
        }
        (V::Map(x), V::Map(y)) => {
            x.map.len() == y.map.len()
                && x.map
                    .iter()
                    .all(|(key, a)| y.map.get(key).is_some_and(|b| same(a, b)))
        }
        (V::Int(x), V::Int(y)) => x == y,
        (V::UInt(x), V::UInt(y)) => x == y,
        (V::Float(x), V::Float(y)) => x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
        (V::String(x), V::String(y)) => x == y,
        (V::Bytes(x), V::Bytes(y)) => x == y,
        (V::Bool(x), V::Bool(y)) => x == y,
        (V::Null, V::Null) => true,
        _ => {
            std::mem::discriminant(a) == std::mem::discriminant(b)
                && a == b
                && format!("{a:?}") == format!("{b:?}")
        }
    }
}

/// Evaluates `source` with kadmit.
fn kadmit(source: &str) -> Outcome {
    let expression = match Expression::compile(source, &[]) {
        Ok(expression) => expression,
        Err(error) => return Outcome::NotCompiled(error.message),
    };
    let budget = Budget::new(Limits {
        max_steps: 1 << 50,
        ..Limits::DEFAULT
    });
    let variables = &*VARIABLES;
    let result = expression.evaluate(
        |variable| match variable {
            Variable::Object => Some(&variables.object),
            Variable::OldObject => Some(&variables.old_object),
            Variable::Request => Some(&variables.request),
            _ => None,
        },
        &budget,
    );
    match result {
        Ok(value) => Outcome::Value(value),
        Err(Failure::Error(message)) => Outcome::Error(message),
        Err(Failure::OverBudget) => Outcome::OverBudget,
    }
}

/// The reference: cel-rust's standard library, macros and strings
/// extension, without kadmit's macros and overloads.
static REFERENCE_ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    env.add_extension(::cel::extensions::strings)
        .expect("the strings extension registers");
    Arc::new(env)
});

thread_local! {
    /// The variables as the reference's values, converted once per thread.
    static REFERENCE_VARIABLES: [(&'static str, CelValue); 3] = {
        let v = &*VARIABLES;
        let convert = |value: &Value| ::cel::to_value(IntsFirst(value)).expect("converts");
        [
            ("object", convert(&v.object)),
            ("oldObject", convert(&v.old_object)),
            ("request", convert(&v.request)),
        ]
    };
}

/// Evaluates `source` with the reference.
fn reference(source: &str) -> Outcome {
    REFERENCE_VARIABLES.with(|variables| reference_with(source, variables))
}

fn reference_with(source: &str, variables: &[(&'static str, CelValue)]) -> Outcome {
    let env = &*REFERENCE_ENV;
    let program = match env.compile(source) {
        Ok(program) => program,
        Err(errors) => return Outcome::NotCompiled(format!("{errors:?}")),
    };
    let mut context = Context::with_env(Arc::clone(env));
    for (name, value) in variables {
        if source.contains(name) {
            context.add_variable_from_value(*name, value.clone());
        }
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| program.execute(&context))) {
        Ok(Ok(value)) => Outcome::Value(value),
        Ok(Err(error)) => Outcome::Error(error.to_string()),
        Err(_) => Outcome::Panicked,
    }
}

/// Runs `f` on a thread with a large stack: the reference parses on the
/// caller's stack, which the parser's recursion can outgrow in a debug
/// build.
fn on_large_stack(f: impl FnOnce() + Send + 'static) {
    let thread = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(f)
        .expect("spawns");
    if let Err(panic) = thread.join() {
        std::panic::resume_unwind(panic);
    }
}

/// `template` with each `{x}` replaced by `value`.
fn fill(template: &str, placeholder: &str, value: &str) -> String {
    template.replace(placeholder, value)
}

/// Strings: from the object (unicode, empty, quotes and control
/// characters, commas), the request, and literals.
const STRINGS: &[&str] = &[
    "object.metadata.name",
    "object.metadata.annotations.note",
    "object.metadata.labels.team",
    "object.spec.containers[1].image",
    "object.metadata.annotations.empty",
    "object.metadata.annotations.csv",
    "object.metadata.annotations.quote",
    "object.metadata.annotations.padded",
    "request.userInfo.username",
    "'héllo, wörld'",
    "oldObject.metadata.labels.app",
];

const STRING_OPS: &[&str] = &[
    "{s}.charAt(0)",
    "{s}.charAt(2)",
    "{s}.charAt(size({s}))",
    "{s}.charAt(-1)",
    "{s}.charAt(1000)",
    "{s}.indexOf('o')",
    "{s}.indexOf('')",
    "{s}.indexOf('ö')",
    "{s}.indexOf('o', 3)",
    "{s}.indexOf('', 1000)",
    "{s}.indexOf('', 2)",
    "{s}.indexOf('a', -1)",
    "{s}.indexOf(',', 1)",
    "{s}.indexOf('o', size({s}))",
    "{s}.lastIndexOf('o')",
    "{s}.lastIndexOf('')",
    "{s}.lastIndexOf(',', 3)",
    "{s}.lastIndexOf('', 2)",
    "{s}.lastIndexOf('ö', 100)",
    "{s}.lastIndexOf('lo', 4)",
    "{s}.lastIndexOf('a', -1)",
    "{s}.lastIndexOf({s})",
    "{s}.lastIndexOf({s}, 0)",
    "{s}.indexOf({s}, 0)",
    "{s}.lowerAscii()",
    "{s}.upperAscii()",
    "{s}.trim()",
    "('  ' + {s} + '\\t\\n').trim()",
    "{s}.reverse()",
    "{s}.replace('o', '0')",
    "{s}.replace('', '-')",
    "{s}.replace('o', '0', 1)",
    "{s}.replace('o', 'OO', -1)",
    "{s}.replace('o', '0', 0)",
    "{s}.replace(',', '')",
    "{s}.replace({s}, 'x', 2)",
    "{s}.split(',')",
    "{s}.split('')",
    "{s}.split(',', 2)",
    "{s}.split('', 3)",
    "{s}.split(',', 0)",
    "{s}.split(',', -1)",
    "{s}.split('o', 1)",
    "{s}.split({s})",
    "{s}.substring(1)",
    "{s}.substring(0, 2)",
    "{s}.substring(2, 2)",
    "{s}.substring(3, 1)",
    "{s}.substring(-1)",
    "{s}.substring(0, 1000)",
    "{s}.substring(size({s}))",
    "{s}.split(',').join()",
    "{s}.split('').join('·')",
    "{s}.split('').join({s})",
    "size({s})",
    "{s}.size()",
    "{s}.contains('o')",
    "{s}.contains('')",
    "{s}.startsWith('p')",
    "{s}.endsWith('1')",
    "{s}.matches('^[a-z0-9-]+$')",
    "{s}.matches('o.')",
    "{s}.matches('ö|Ω|☃')",
    "matches({s}, '[[:alpha:]]')",
    "{s}.matches('(')",
    "{s}.matches({s})",
    "strings.quote({s})",
    "strings.quote(strings.quote({s}))",
    "'%s|%d|%x'.format([{s}, size({s}), {s}])",
    "'[%s]'.format([{s}.split(',')])",
    "{s}.format([])",
    "{s} + '!'",
    "{s} + {s}",
    "{s} in ['pod1', 'admin', {s}]",
    "{s} in object.metadata.labels",
    "string({s}) == {s}",
    "bytes({s})",
    "size(bytes({s}))",
    "{s} < 'm'",
    "{s} >= ''",
    "{s} == {s}.reverse().reverse()",
    "type({s}) == string",
    "dyn({s})",
    "int({s})",
    "double({s})",
    "bool({s})",
    "{s}.lowerAscii().upperAscii().reverse()",
    "[{s}, {s}.upperAscii()]",
    "{{s}: 1}",
    "{s}.exists(c, true)",
];

/// Lists of strings, numbers, maps, lists and mixed ones.
const LISTS: &[&str] = &[
    "object.spec.containers",
    "object.spec.containers.map(c, c.name)",
    "object.spec.volumes",
    "[1, 2, 3]",
    "object.spec.extra.a.b.c",
    "request.userInfo.groups",
    "[object.metadata.name, 'x', object.spec.priority, null]",
    "object.spec.tolerations",
    "[1.5, -0.0, 2u]",
    "oldObject.spec.containers.map(c, c.image)",
    "object.spec.extra.list",
];

const LIST_OPS: &[&str] = &[
    "size({l})",
    "{l}.size()",
    "{l}[0]",
    "{l}[1]",
    "{l}[100]",
    "{l}[-1]",
    "{l}[1u]",
    "{l}[1.0]",
    "{l}.all(x, x != null)",
    "{l}.all(x, x == x)",
    "{l}.exists(x, x == 'x')",
    "{l}.exists(x, x == 2)",
    "{l}.exists_one(x, true)",
    "{l}.exists_one(x, x == 1)",
    "{l}.existsOne(x, x != 1)",
    "{l}.map(x, [x])",
    "{l}.map(x, x)",
    "{l}.filter(x, x != 1)",
    "{l}.filter(x, type(x) == string)",
    "{l}.map(x, type(x) == map, x)",
    "{l}.map(x, true, size({l}))",
    "{l}.map(x, x == null, 1 / 0)",
    "{l} + {l}",
    "{l} + [null]",
    "[] + {l}",
    "1 in {l}",
    "'x' in {l}",
    "{l} == {l}",
    "{l} != []",
    "{l}.join()",
    "{l}.join(', ')",
    "{l}.map(x, string(x))",
    "{l}.map(x, string(x)).join('/')",
    "{l}.all(x, {l}.exists(y, y == x))",
    "{l}.map(x, {l}.filter(y, y == x).size())",
    "{l}.exists(x, x.name == 'app')",
    "{l}.all(x, x.name != '')",
    "{l}.filter(x, type(x) == map && has(x.name))",
    "{l}.exists(x, has(x.name))",
    "{l}[0] == {l}[0]",
    "dyn({l})",
    "type({l}) == list",
    "[{l}, {l}]",
    "{'k': {l}}",
    "{l}.map(x, {l}.map(y, [x, y])).size()",
    "{l}.map(x, x).map(x, x) == {l}",
    "{l} < {l}",
    "{l}.exists(x, x == 1 / 0)",
    "{l}.all(x, x == 1 / 0)",
    "{l}.exists(x, 1 / 0 == 1 || true)",
];

/// Maps with string, number and bool keys, and the object itself.
const MAPS: &[&str] = &[
    "object.metadata.labels",
    "object.metadata.annotations",
    "object.spec.nodeSelector",
    "object.spec.extra",
    "{'a': 1, 'b': 2}",
    "{1: 'x', 2u: 'y', true: 'z'}",
    "object",
    "request.userInfo",
    "oldObject.metadata.labels",
];

const MAP_OPS: &[&str] = &[
    "size({m})",
    "{m}.size()",
    "{m}.all(k, k != '')",
    "{m}.all(k, type(k) == string)",
    "{m}.exists(k, k.startsWith('a'))",
    "{m}.exists(k, k == 1)",
    "{m}.map(k, {m}[k])",
    "{m}.map(k, k)",
    "{m}.filter(k, size(string(k)) > 2)",
    "{m}.exists_one(k, true)",
    "{m}.map(k, k != 'app', [k, {m}[k]])",
    "'app' in {m}",
    "1 in {m}",
    "1u in {m}",
    "1.0 in {m}",
    "{m}['app']",
    "{m}[1]",
    "{m}[1.0]",
    "{m}.app",
    "has({m}.app)",
    "has({m}.missing)",
    "{m}.?app",
    "{m}.?app.orValue('none')",
    "{m}[?'app'].hasValue()",
    "{m}[?'app'].value()",
    "{m}.?missing.orValue(0)",
    "{m} + {m}",
    "{m} == {m}",
    "{m} != {}",
    "[{m}]",
    "{'inner': {m}}",
    "{m}.map(k, {m}.filter(j, j == k).size())",
    "dyn({m}).size()",
    "type({m}) == map",
    "{m}.all(k, {m}[k] != null)",
];

/// Numbers of every kind, from the object and literals, with the edges.
const NUMBERS: &[&str] = &[
    "object.spec.priority",
    "object.spec.offset",
    "object.spec.ratio",
    "object.spec.big",
    "object.spec.zero",
    "0",
    "7",
    "-3",
    "2u",
    "2.5",
    "-0.0",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615u",
    "1e308",
];

const NUMBER_OPS: &[&str] = &[
    "{a} + {b}",
    "{a} - {b}",
    "{a} * {b}",
    "{a} / {b}",
    "{a} % {b}",
    "{a} < {b}",
    "{a} <= {b}",
    "{a} == {b}",
    "{a} != {b}",
    "{a} > {b}",
    "{a} >= {b}",
];

const NUMBER_UNARY_OPS: &[&str] = &[
    "int({n})",
    "uint({n})",
    "double({n})",
    "string({n})",
    "-{n}",
    "type({n})",
    "type({n}) == int",
    "dyn({n}) == {n}",
    "bool({n})",
    "bytes({n})",
    "{n} in [1, 2u, 2.5]",
    "[{n}][0]",
    "{{n}: 1}",
    "'%d'.format([{n}])",
    "'%f'.format([{n}])",
    "'%.3e'.format([{n}])",
    "'%x'.format([{n}])",
    "'%s'.format([{n}])",
    "'%b'.format([{n}])",
    "'%o'.format([{n}])",
];

/// Everything else, written out.
const HAND_WRITTEN: &[&str] = &[
    // The `optional` functions (`optional.of(…)` is a call on the name
    // `optional`, not on a variable).
    "[?optional.none(), ?optional.of(2)]",
    "optional.of(1).value()",
    "optional.none().orValue(2)",
    "optional.of(1).or(optional.none()).value()",
    "optional.none().or(optional.of(3)).value()",
    "optional.ofNonZeroValue(0).hasValue()",
    "optional.ofNonZeroValue('x').value()",
    "optional.of(object.metadata.name).hasValue()",
    "object.?metadata.?labels.?app.or(optional.of('z')).value()",
    "optional.of(1) == optional.of(1)",
    // Literals of every type.
    "null",
    "true",
    "false",
    "0",
    "-1",
    "0x1F",
    "-0x10",
    "42u",
    "0x2Au",
    "1.5",
    "1e3",
    "-1.5e-3",
    ".5",
    "'single'",
    "\"double\"",
    "'''triple ' quoted'''",
    "r'raw\\n'",
    "'\\u00e9\\U0001F600\\x41\\101'",
    "'\\a\\b\\f\\n\\r\\t\\v\\\\\\'\\\"'",
    "b'abc'",
    "b'\\xff\\x00'",
    "b'ÿ'",
    "[]",
    "{}",
    "[1, 'a', 2u, 2.5, true, null, b'x', [], {}]",
    "{'a': 1, 2: 'b', true: [null]}",
    "int",
    "type(1)",
    "type(type(1)) == type",
    "type(null) == null_type",
    "type(b'') == bytes",
    "type(1u) == uint",
    "type(1.0) == double",
    "type([]) == list",
    "type({}) == map",
    "type(true) == bool",
    "type(object) == map",
    "type(object.spec.nodeName) == null_type",
    "type(object.spec.big) == uint",
    "type(object.spec.ratio) == double",
    "type(object.spec.priority) == int",
    "type(object.spec.whole) == double",
    "object.spec.whole == 2",
    "object.spec.whole + 1",
    "object.spec.tiny * 1e-300",
    "string(object.spec.tiny)",
    "object.spec.lowest - 1",
    "object.spec.lowest / -1",
    "type(object.spec.lowest) == int",
    "object.spec",
    // Conversions.
    "int('42')",
    "int('-9223372036854775809')",
    "int(' 1')",
    "uint('-1')",
    "uint('18446744073709551615')",
    "double('1e3')",
    "double('NaN')",
    "double('inf')",
    "double('-Infinity')",
    "bool('true')",
    "bool('TRUE')",
    "bool('t')",
    "bool('0')",
    "bool('yes')",
    "string(b'abc')",
    "string(b'\\xff')",
    "bytes('é')",
    "string(true)",
    "string(1.5)",
    "string(-0.0)",
    "string(1e21)",
    "string(0.1)",
    "string(double('NaN'))",
    "int(1e19)",
    "int(-1.5)",
    "int(2.5)",
    "int(-9223372036854775808.0)",
    "uint(-1)",
    "uint(1.9)",
    "double(18446744073709551615u)",
    "int(18446744073709551615u)",
    "uint(9223372036854775807)",
    "string(type(1))",
    "dyn(1) == 1.0",
    "dyn(1u) < 2",
    "dyn([1]) + [2.0]",
    "bool(true)",
    "bytes(b'x')",
    "string('x')",
    "int(1)",
    "double(1.0)",
    // Durations and timestamps: kadmit's CEL has none (no `chrono`).
    "duration('1s')",
    "timestamp('2020-01-01T00:00:00Z')",
    "duration('1s') + duration('2s')",
    "timestamp('2020-01-01T00:00:00Z') + duration('1h')",
    // Arithmetic edges.
    "9223372036854775807 + 1",
    "-9223372036854775808 - 1",
    "-(-9223372036854775808)",
    "9223372036854775807 * 2",
    "-9223372036854775808 / -1",
    "-9223372036854775808 % -1",
    "18446744073709551615u + 1u",
    "0u - 1u",
    "1 / 0",
    "1 % 0",
    "1u / 0u",
    "1u % 0u",
    "1.0 / 0.0",
    "-1.0 / 0.0",
    "0.0 / 0.0",
    "1.5 % 1.0",
    "7 / -2",
    "-7 % 3",
    "1 + 1u",
    "1 + 1.0",
    "1u + 1.0",
    "1 == 1u",
    "1 == 1.0",
    "1u == 1.0",
    "1 < 1.5",
    "2u > 1",
    "-1 < 1u",
    "1.0 < 2u",
    "double('NaN') == double('NaN')",
    "double('NaN') < 1",
    "[double('NaN')] == [double('NaN')]",
    "1 == 'a'",
    "null == null",
    "null == 0",
    "[1, 2] == [1, 2.0]",
    "{'a': 1} == {'a': 1u}",
    "{1: 'a'} == {1u: 'a'}",
    "{1: 'a'}[1u]",
    "{1: 'a'}[1.0]",
    "{1u: 'a'}[1]",
    "[1, 2, 3][1u]",
    "'a' < 'b'",
    "'a' < 'B'",
    "b'a' < b'b'",
    "false < true",
    "null < null",
    "[1] < [2]",
    // `+` on strings, bytes, lists, maps.
    "'a' + 'b'",
    "'é' + '☃'",
    "b'a' + b'b'",
    "[1] + [2]",
    "[1] + ['a']",
    "[] + []",
    "{'a': 1} + {'b': 2}",
    "'a' + 1",
    "1 + 'a'",
    "null + null",
    "[1] + 1",
    "object.metadata.name + '-' + object.metadata.namespace",
    "object.spec.containers + oldObject.spec.containers",
    "object.spec.containers.map(c, c.name) + request.userInfo.groups",
    "object.spec.priority + object.spec.offset",
    "object.spec.priority + object.spec.ratio",
    "object.spec.big + 1u",
    "object.spec.big + 1",
    "(object.metadata.name + object.metadata.name).size()",
    // `&&`, `||`, `!`, `?:` and the errors they absorb.
    "false && (1 / 0 == 1)",
    "(1 / 0 == 1) && false",
    "true && (1 / 0 == 1)",
    "(1 / 0 == 1) && true",
    "true || (1 / 0 == 1)",
    "(1 / 0 == 1) || true",
    "false || (1 / 0 == 1)",
    "(1 / 0 == 1) || false",
    "(1 / 0 == 1) || (2 / 0 == 1)",
    "object.missing || true",
    "object.missing && false",
    "object.missing.x || object.spec.enableServiceLinks",
    "'a' || true",
    "true || 'a'",
    "1 && false",
    "!true",
    "!object.spec.hostNetwork",
    "!1",
    "!!false",
    "true ? 1 : 1 / 0",
    "false ? 1 / 0 : 2",
    "object.spec.hostNetwork ? object.missing : object.metadata.name",
    "object.missing ? 1 : 2",
    "1 ? 2 : 3",
    "null ? 1 : 2",
    "object.spec.enableServiceLinks ? [object.metadata.name] : []",
    "(true ? object.metadata.labels : {}).app",
    "[1 / 0, 1].size()",
    "[1, 2].exists(x, x == 2 || 1 / 0 == 1)",
    "[1, 2].all(x, x == 3 && 1 / 0 == 1)",
    "[0, 1].all(x, 1 / x > 0)",
    "[0, 1].exists(x, 1 / x > 0)",
    "[1, 0].exists(x, 1 / x > 0)",
    "[0, 1].exists_one(x, 1 / x > 0)",
    "[0, 1].map(x, 1 / x)",
    "[0, 1].filter(x, 1 / x > 0)",
    "[1, 2].all(x, x)",
    "[true, 'a'].exists(x, x)",
    "['a', true].exists(x, x)",
    "[false, 'a'].all(x, x)",
    // Indexing and selection.
    "object.metadata.labels.missing",
    "object.metadata.labels['missing']",
    "object.spec.containers[3]",
    "object.spec.containers[-1]",
    "object.spec.containers[0].ports[0].containerPort",
    "object.spec.containers[2].ports[0]",
    "object.spec.extra.a.b.c[2]",
    "object.spec.extra['a']['b']['c'][0]",
    "object.spec.nodeName",
    "object.spec.nodeName.x",
    "object.spec.volumes[0]",
    "object.spec.priority.x",
    "object.metadata.name[0]",
    "object.metadata.name.size",
    "request.userInfo.groups[1]",
    "request.operation == 'CREATE'",
    "request.name",
    "request.dryRun",
    "request.missing",
    "oldObject.metadata.labels.app",
    "oldObject.spec.containers.size()",
    "object.metadata.labels != oldObject.metadata.labels",
    "object.metadata.annotations['note']",
    "object.spec.containers[0]['name']",
    "object.spec.containers[0].securityContext.privileged",
    "object.spec.containers[1].securityContext.privileged",
    "{'a': {'b': 1}}.a.b",
    "{'a': 1}.b",
    "[[1, 2], [3]][1][0]",
    "'abc'[0]",
    // has().
    "has(object.metadata)",
    "has(object.metadata.labels)",
    "has(object.metadata.labels.app)",
    "has(object.metadata.labels.missing)",
    "has(object.spec.nodeName)",
    "has(object.spec.volumes)",
    "has(object.missing.x)",
    "has(object.metadata.name.x)",
    "has(object.spec.containers[0].ports)",
    "has(object.spec.containers[1].securityContext.runAsUser)",
    "has(request.userInfo.username)",
    "has({'a': 1}.a)",
    "has({'a': 1}.b)",
    "has(object.spec.containers.x)",
    "object.spec.containers.filter(c, has(c.securityContext)).map(c, c.name)",
    // Optionals.
    "object.?metadata.?name.orValue('x')",
    "object.?spec.?nodeName.hasValue()",
    "object.?spec.?nodeName.value()",
    "object.?missing.?x.orValue(1)",
    "object.?missing.x",
    "object.?metadata.name",
    "has(object.?missing.x)",
    "[?object.?missing, 1]",
    "[?object.?metadata.?name, 1]",
    "[?optional.none(), ?optional.of(2)]",
    "{?'a': object.?missing, 'b': 2}",
    "{?'a': object.?metadata.?name, 'b': 2}",
    "object.metadata.labels[?'app'].value()",
    "object.metadata.labels[?'nope'].orValue('default')",
    "object.spec.containers[?5].hasValue()",
    "object.spec.containers[?0].?name.value()",
    "object.spec.containers[?1].?ports[?0].?containerPort.orValue(0)",
    "optional.of(1).value()",
    "optional.none().orValue(2)",
    "optional.of(1).or(optional.none()).value()",
    "optional.none().or(optional.of(3)).value()",
    "optional.ofNonZeroValue(0).hasValue()",
    "optional.ofNonZeroValue('x').value()",
    "optional.of(object.metadata.name).hasValue()",
    "object.?metadata.?labels.?app.or(optional.of('z')).value()",
    "object.spec.?containers.orValue([]).size()",
    "object.?spec.?containers.value().map(c, c.name)",
    "[object.?metadata.?name].size()",
    "object.?metadata == object.?metadata",
    "optional.of(1) == optional.of(1)",
    // Comprehensions: nested, over maps, every macro.
    "object.spec.containers.all(c, c.ports.all(p, p.containerPort > 0))",
    "object.spec.containers.exists(c, c.env.exists(e, e.name == 'MODE'))",
    "object.spec.containers.map(c, c.env.map(e, e.name + '=' + e.value))",
    "object.spec.containers.map(c, c.ports.map(p, p.containerPort))",
    "object.spec.containers.map(c, c.ports.filter(p, has(p.protocol)).map(p, p.protocol))",
    "object.spec.containers.exists_one(c, c.name == 'app')",
    "object.spec.containers.exists_one(c, c.env.exists(e, e.name == 'MODE'))",
    "object.spec.containers.existsOne(c, c.image.contains('registry'))",
    "object.spec.containers.filter(c, c.image.contains(':')).map(c, c.name)",
    "object.spec.containers.map(c, c.name.startsWith('a'), c.image)",
    "object.spec.containers.map(c, c.env.size() > 0, c.env.map(e, e.value))",
    "object.spec.containers.all(c, object.spec.containers.exists(d, d.name == c.name))",
    "object.spec.containers.map(c, object.spec.containers.filter(d, d.name < c.name).size())",
    "object.spec.containers.map(c, c.ports.map(p, c.env.map(e, [c.name, p.containerPort, e.name])))",
    "object.metadata.labels.map(k, object.metadata.labels[k]).filter(v, v != '')",
    "object.metadata.labels.all(k, object.metadata.labels[k].size() > 0)",
    "object.metadata.labels.exists(k, k == 'app' && object.metadata.labels[k] == 'demo')",
    "object.metadata.labels.filter(k, k in oldObject.metadata.labels && object.metadata.labels[k] != oldObject.metadata.labels[k])",
    "object.metadata.annotations.map(k, k.size() > 3, strings.quote(object.metadata.annotations[k]))",
    "object.spec.extra.list.map(l, l.map(x, [x, x]))",
    "object.spec.extra.list.filter(l, l.size() > 0).map(l, l[0])",
    "object.spec.extra.list.exists(l, l.exists(x, x == 'x'))",
    "object.spec.extra.list.all(l, l.all(x, type(x) == int))",
    "[1, 2, 3].map(x, [4, 5].map(y, x * y))",
    "[1, 2, 3].map(x, [4, 5].map(y, [6].map(z, x + y + z)))",
    "[1, 2, 3].filter(x, x % 2 == 1).map(x, x * 10)",
    "[1, 2, 3].exists_one(x, x > 1)",
    "[1, 2, 3].exists_one(x, x > 2)",
    "[].all(x, false)",
    "[].exists(x, true)",
    "[].exists_one(x, true)",
    "[].map(x, x)",
    "{}.map(k, k)",
    "{'a': 1, 'b': 2}.map(k, k + k)",
    "{'a': 1, 'b': 2}.filter(k, k > 'a')",
    "{'a': 1, 'b': 2}.all(k, {'a': 1, 'b': 2}[k] > 0)",
    "[[1, 2], [3]].map(l, l.map(x, x + 1))",
    "[1, 2].map(x, x).map(y, y + 1).filter(z, z > 2)",
    "[1, 2].map(x, [1, 2].exists(y, y == x))",
    "['a', 'b'].map(x, ['c'].map(x, x))",
    "[1, 2].map(x, x, x)",
    "[1, 2].all(x, x > 0, x)",
    "1.all(x, true)",
    "'abc'.map(x, x)",
    "null.exists(x, true)",
    "[1, 2].map(x.y, x)",
    // List and map literals with variables and calls.
    "[object.metadata.labels, object.spec.containers[0]]",
    "[object, oldObject].map(o, o.metadata.labels.app)",
    "[object.metadata.name.upperAscii(), size(object.spec.containers), object.spec.ratio * 2.0]",
    "{'a': object.metadata.labels, object.metadata.name: [1, object.spec.priority]}",
    "{object.metadata.name: 1, 'pod1': 2}",
    "{'a': 1, 'a': 2}",
    "{1: 'a', 1u: 'b'}",
    "{1: 'a', 1.0: 'b'}",
    "{object.spec.priority: 'a', 1000u: 'b'}",
    "{object.metadata.labels.app: object.metadata.labels, 'k': [object.spec.nodeName]}",
    "{[1]: 2}",
    "{1.5: 2}",
    "{null: 1}",
    "[[object.spec.priority], {'x': object.spec.ratio}][1].x",
    "{'k': object.spec.containers.map(c, {c.name: c.image})}",
    "object.spec.containers.map(c, {c.name: c.ports.size()})",
    "[object.spec.containers.map(c, c.name).join(','), request.userInfo.groups.join(' ')]",
    "[1, 2, 3].map(x, {'v': x, 'sq': x * x})",
    "{'n': object.metadata.name}.n + '!'",
    // Strings with unicode and escapes.
    "'日本語'.size()",
    "'日本語'.charAt(1)",
    "'日本語'.indexOf('語')",
    "'日本語'.lastIndexOf('本', 1)",
    "'日本語日本語'.lastIndexOf('本', 3)",
    "'日本語日本語'.indexOf('本', 2)",
    "'ab日本語'.substring(1, 4)",
    "'ÀÉÎ'.lowerAscii()",
    "'àéî'.upperAscii()",
    "'\\u00e9' == 'é'",
    "'e\\u0301' == 'é'",
    "'☃☃☃'.replace('☃', '⛄', 2)",
    "'a☃b☃c'.split('☃')",
    "'a☃b☃c'.split('', 2)",
    "' \\u00a0x\\u2003 '.trim()",
    "'\\u2028x'.trim()",
    "'résumé'.reverse()",
    "strings.quote('\\a\\b\\f\\n\\r\\t\\v\\\\\"é☃\\x00\\x7f')",
    "strings.quote('')",
    "'%s and %s'.format(['a', 'b'])",
    "'%s'.format([[1, 'a', 2.5, true, null, b'x']])",
    "'%s'.format([{'a': 1}])",
    "'%d%%'.format([50])",
    "'%5d'.format([1])",
    "'%.2f'.format([3.14159])",
    "'%.2f'.format([double('NaN')])",
    "'%f'.format([double('inf')])",
    "'%e'.format([1234.5])",
    "'%x'.format(['hi'])",
    "'%X'.format([255])",
    "'%x'.format([b'hi'])",
    "'%o'.format([8u])",
    "'%b'.format([true])",
    "'%s'.format([type(1)])",
    "'%s'.format([1u])",
    "'%d'.format(['a'])",
    "'%s %s'.format(['a'])",
    "'%s'.format(['a', 'b'])",
    "'%z'.format([1])",
    "'%'.format([1])",
    "'x'.format([])",
    "'%s'.format({'a': 1})",
    "'%s'.format('a')",
    "1.format([])",
    "'%s'.format([object.spec.containers.map(c, c.name)])",
    "'%s/%s'.format([object.metadata.namespace, object.metadata.name])",
    "'%.100f'.format([1e300]).size()",
    "'%.101f'.format([1.0])",
    "['a', 'b'].join(1)",
    "[1, 2].join()",
    "[].join()",
    "[].join('-')",
    "['x'].join('-')",
    "{'a': 1}.join()",
    "{'a': 'b'}.join(',')",
    "'abc'.join()",
    "'a'.replace('a', 1)",
    "'a'.replace('a', 'b', 'c')",
    "'a'.split(1)",
    "'a'.split(',', 'x')",
    "'a'.indexOf(1)",
    "'a'.indexOf('a', 'b')",
    "'a'.lastIndexOf('a', 1u)",
    "1.indexOf('a')",
    "1.replace('a', 'b')",
    "1.split(',')",
    "strings.quote(1)",
    "'a'.matches(1)",
    "1.matches('a')",
    "'a'.contains(1)",
    "'abc'.matches('^abc$') && 'abc'.matches('b') && !'abc'.matches('^b')",
    "'line1\\nline2'.matches('^line2$')",
    "'line1\\nline2'.matches('(?m)^line2$')",
    "'ABC'.matches('(?i)abc')",
    "'a.b'.matches('a\\\\.b')",
    "'日本'.matches('^..$')",
    "'x'.matches('')",
    "''.matches('^$')",
    "'aaa'.matches('a{2,}')",
    "'ab'.matches('\\\\w+')",
    "'a'.matches('[')",
    "'a'.matches('(?P<n>a)')",
    "'a'.matches('\\\\p{L}')",
    "object.spec.containers.all(c, c.image.matches('^[a-z./]+(:[0-9.]+|@sha256:[a-f0-9]+)?$'))",
    "object.spec.containers.map(c, c.name.matches('^[a-z]+$'))",
    "''.split('')",
    "''.split(',')",
    "''.split(',', 0)",
    "','.split(',')",
    "'a,b'.split(',', 1)",
    "'a,b,c'.split(',', 2)",
    "'abc'.split('', -1)",
    "'abc'.split('', 1)",
    "'abc'.split('', 2)",
    "'abc'.split('', 10)",
    "''.replace('', 'x')",
    "'abc'.replace('', '.', 2)",
    "'aaa'.replace('a', 'b', 2)",
    "'aaa'.replace('aa', 'b')",
    "'abc'.replace('b', '')",
    "''.indexOf('')",
    "''.indexOf('', 0)",
    "''.indexOf('a', 0)",
    "''.lastIndexOf('')",
    "''.lastIndexOf('', 0)",
    "''.lastIndexOf('a')",
    "'aaa'.lastIndexOf('aa')",
    "'aaa'.lastIndexOf('aa', 0)",
    "'aaa'.lastIndexOf('aa', 2)",
    "'aaa'.indexOf('aa', 2)",
    "'abcabc'.lastIndexOf('abc', 2)",
    "'abcabc'.lastIndexOf('abc', 3)",
    "'ab'.lastIndexOf('abc', 1)",
    "''.charAt(0)",
    "''.charAt(1)",
    "''.substring(0)",
    "''.substring(0, 0)",
    "''.reverse()",
    "''.trim()",
    "size('')",
    "size(b'\\xff\\x00')",
    "size([1, [2, 3]])",
    "size({'a': 1})",
    "size(1)",
    "size(null)",
    "[1, 2, 3].size() == size([1, 2, 3])",
    "1 in [1u]",
    "1 in [1.0]",
    "2.0 in [2]",
    "'a' in {'a': 1}",
    "1 in 1",
    "'a' in 'abc'",
    "null in [null]",
    "[1] in [[1]]",
    "{'a': 1} in [{'a': 1}]",
    // Loop variables shadowing variables and names, nested rewrites.
    "[1, 2].map(object, object * 2)",
    "object.spec.containers.map(object, object.name)",
    "[1].map(request, request + 1)",
    "[{'a': 1}, {}].map(m, has(m.a))",
    "[1].map(int, int + 1)",
    "['a'].map(strings, strings.quote('x'))",
    "['a'].map(strings, strings + 'b')",
    "'%s'.format(['%s'.format(['x'])])",
    "('%s' + '%s').format(['a', 'b'])",
    "'%s'.format([1]).format([])",
    "[1, 2].map(x, '%d'.format([x]))",
    "[1, 2].map(x, [x].map(y, '%d-%d'.format([x, y])))",
    "['a,b', 'c'].map(s, s.split(',').join('+').replace('+', '-', 1))",
    "['ab', 'b'].map(s, s.indexOf('b') + s.lastIndexOf('b'))",
    "['x'].map(s, strings.quote(s + s)).join()",
    "['a'].map(s, s.matches('^a$'))",
    "[object.metadata.name, object.metadata.name].map(n, n + '-' + n)",
    "[[1, 2]].map(l, l + l)[0]",
    "[1, 2, 3].map(x, x + 1).filter(x, x > 2).map(x, x + 0.5)",
    "[1, 2, 3].exists_one(x, x + 1 == 3)",
    "[1, 2, 3].map(x, x > 1, x + x)",
    "[[1], [2, 3]].map(l, l.exists_one(x, x > 1))",
    "{'k': [1, 2].map(x, x + 1)}.k",
    "[1, 2].map(x, {'v': [x, x + 1]})",
    "[object.spec.containers.map(c, c.name + ':' + c.image)]",
    // Unknown names and functions.
    "missing",
    "missing.x",
    "object.metadata.name.noSuchFunction()",
    "noSuchFunction(1)",
    "math.greatest(1, 2)",
    "base64.encode(b'a')",
    "[1].sort()",
    "lists.range(3)",
    "element",
    "object.spec.containers.map(c, d)",
];

/// The corpus: the hand-written expressions and the families generated
/// from the receivers above, without duplicates, in a stable order.
fn corpus() -> Vec<String> {
    let mut corpus: Vec<String> = Vec::new();
    corpus.extend(HAND_WRITTEN.iter().map(|s| (*s).to_owned()));
    for s in STRINGS {
        for op in STRING_OPS {
            corpus.push(fill(op, "{s}", s));
        }
    }
    for l in LISTS {
        for op in LIST_OPS {
            corpus.push(fill(op, "{l}", l));
        }
    }
    for m in MAPS {
        for op in MAP_OPS {
            corpus.push(fill(op, "{m}", m));
        }
    }
    for a in NUMBERS {
        for op in NUMBER_UNARY_OPS {
            corpus.push(fill(op, "{n}", a));
        }
        for b in NUMBERS {
            for op in NUMBER_OPS {
                corpus.push(fill(&fill(op, "{a}", a), "{b}", b));
            }
        }
    }
    let mut seen = BTreeSet::new();
    corpus.retain(|source| seen.insert(source.clone()));
    corpus
}

/// Both outcomes of `source`.
fn compare(source: &str) -> (Outcome, Outcome) {
    (kadmit(source), reference(source))
}

fn shown(source: &str, kadmit: &Outcome, reference: &Outcome) -> String {
    format!("{source}\n    kadmit:    {kadmit:?}\n    reference: {reference:?}")
}

#[test]
fn kadmit_rewrites_keep_cel_results() {
    on_large_stack(|| {
        let corpus = corpus();
        assert!(corpus.len() >= 300, "{}", corpus.len());
        let (mut mismatches, mut values, mut errors) = (Vec::new(), 0usize, 0usize);
        for source in &corpus {
            let (kadmit, reference) = compare(source);
            if std::env::var_os("CEL_EQUIVALENCE_DUMP").is_some() {
                eprintln!("{}", shown(source, &kadmit, &reference));
            }
            if !agree(&kadmit, &reference, iterates_a_map(source)) {
                mismatches.push(shown(source, &kadmit, &reference));
            } else if matches!(kadmit, Outcome::Value(_)) {
                values += 1;
            } else {
                errors += 1;
            }
            // The reference must not panic where kadmit gives a value.
            assert!(
                !matches!(reference, Outcome::Panicked) || kadmit.failed(),
                "{source}"
            );
        }
        assert!(
            mismatches.is_empty(),
            "{} of {} expressions mismatch:\n{}",
            mismatches.len(),
            corpus.len(),
            mismatches.join("\n")
        );
        // Most of the corpus yields values, so that it tests results and
        // not only that both sides fail.
        assert!(
            values >= 2 * errors,
            "{values} values and {errors} errors of {}",
            corpus.len()
        );
    });
}

/// The comparison tells types and doubles apart, and lists by order
/// unless the expression iterates a map.
#[test]
fn the_comparison_is_strict() {
    let value = |v: CelValue| Outcome::Value(v);
    assert!(!agree(&value(1.into()), &value(1u64.into()), false));
    assert!(!agree(&value(1.into()), &value(1.0.into()), false));
    assert!(!agree(&value(0.0.into()), &value((-0.0).into()), false));
    assert!(agree(
        &value(f64::NAN.into()),
        &value(f64::NAN.into()),
        false
    ));
    let (ab, ba) = (
        CelValue::from(vec![CelValue::from("a"), CelValue::from("b")]),
        CelValue::from(vec![CelValue::from("b"), CelValue::from("a")]),
    );
    assert!(!agree(&value(ab.clone()), &value(ba.clone()), false));
    assert!(agree(&value(ab.clone()), &value(ba), true));
    assert!(!agree(&value(ab), &Outcome::Error(String::new()), true));
    assert!(agree(
        &Outcome::NotCompiled(String::new()),
        &Outcome::Error(String::new()),
        false
    ));
    assert!(!agree(
        &Outcome::OverBudget,
        &Outcome::Error(String::new()),
        false
    ));
}

#[test]
fn plain_serde_conversion_makes_json_integers_uint() {
    on_large_stack(|| {
        let v = &*VARIABLES;
        let plain = [("object", ::cel::to_value(&v.object).expect("converts"))];
        let source = "type(object.spec.priority) == int";
        let kadmit = kadmit(source);
        assert!(
            matches!(kadmit, Outcome::Value(CelValue::Bool(true))),
            "{kadmit:?}"
        );
        let plain = reference_with(source, &plain);
        assert!(
            matches!(plain, Outcome::Value(CelValue::Bool(false))),
            "{plain:?}"
        );
        assert!(matches!(
            reference(source),
            Outcome::Value(CelValue::Bool(true))
        ));
        // Negative integers, doubles, and integers past i64 agree.
        for source in [
            "type(object.spec.offset) == int",
            "type(object.spec.ratio) == double",
            "type(object.spec.big) == uint",
        ] {
            let (kadmit, reference) = compare(source);
            assert!(
                agree(&kadmit, &reference, false),
                "{}",
                shown(source, &kadmit, &reference)
            );
        }
    });
}

// Generated expressions: a small typed grammar over the same building
// blocks, drawn from a stream of choices so that proptest's shrinking of
// the stream (fewer, smaller choices) gives simpler expressions (choice 0
// is always the simplest).

/// The kinds of expression the generator draws.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Str,
    Int,
    Bool,
    StrList,
    StrMap,
}

/// The leaves of [`Generator::string`].
const STRING_LEAVES: &[&str] = &[
    "'a'",
    "''",
    "object.metadata.name",
    "'héllo, wörld'",
    "object.metadata.labels.team",
    "object.metadata.annotations.note",
    "object.metadata.annotations.csv",
    "object.spec.containers[0].image",
    "request.userInfo.username",
    "'a,b'",
    "' x '",
    "'Ωm'",
    "'o'",
    "','",
    "object.metadata.annotations.quote",
];

/// The leaves of [`Generator::int`].
const INT_LEAVES: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "-1",
    "10",
    "object.spec.priority",
    "object.spec.offset",
    "object.spec.terminationGracePeriodSeconds",
    "object.spec.zero",
];

/// The leaves of [`Generator::boolean`].
const BOOLEAN_LEAVES: &[&str] = &[
    "true",
    "false",
    "object.spec.enableServiceLinks",
    "object.spec.hostNetwork",
    "has(object.metadata.labels.app)",
    "has(object.metadata.labels.missing)",
];

/// The leaves of [`Generator::number`].
const NUMBER_LEAVES: &[&str] = &[
    "1",
    "2u",
    "2.5",
    "-0.0",
    "object.spec.ratio",
    "object.spec.big",
    "object.spec.priority",
    "9223372036854775807",
    "0u",
    "0.0",
    "1e308",
    "-1",
];

/// The leaves of [`Generator::list`].
const LIST_LEAVES: &[&str] = &[
    "[]",
    "['a', 'b']",
    "request.userInfo.groups",
    "object.spec.containers.map(c, c.name)",
    "object.metadata.annotations.csv.split(',')",
    "[object.metadata.name]",
];

/// The leaves of [`Generator::map`].
const MAP_LEAVES: &[&str] = &[
    "object.metadata.labels",
    "object.metadata.annotations",
    "{'app': 'x', 'k': ''}",
    "{}",
    "oldObject.metadata.labels",
    "object.spec.nodeSelector",
];

struct Generator<'c> {
    choices: &'c [u8],
    at: usize,
    /// Names in scope, with their kinds: loop variables and the fields of
    /// the container a loop over `object.spec.containers` is at.
    scope: Vec<(String, Kind)>,
    /// Comprehensions the expression is inside (kadmit allows three).
    loops: usize,
    fresh: usize,
}

impl Generator<'_> {
    fn pick(&mut self, n: usize) -> usize {
        let choice = self.choices.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        usize::from(choice) % n
    }

    fn one_of(&mut self, options: &[&str]) -> String {
        options[self.pick(options.len())].to_owned()
    }

    fn fresh(&mut self) -> String {
        self.fresh += 1;
        format!("v{}", self.fresh)
    }

    /// A name in scope of `kind`, if any is and the stream picks one.
    fn in_scope(&mut self, kind: Kind) -> Option<String> {
        let names: Vec<String> = self
            .scope
            .iter()
            .filter(|(_, k)| *k == kind)
            .map(|(name, _)| name.clone())
            .collect();
        if names.is_empty() || self.pick(2) == 0 {
            return None;
        }
        Some(names[self.pick(names.len())].clone())
    }

    /// At depth 0, and one time in three above it, a leaf: a name in scope
    /// of `kind` when the stream picks one, else one of `leaves`.
    fn leaf(&mut self, depth: usize, kind: Option<Kind>, leaves: &[&str]) -> Option<String> {
        if depth > 0 && self.pick(3) != 0 {
            return None;
        }
        Some(
            kind.and_then(|kind| self.in_scope(kind))
                .unwrap_or_else(|| self.one_of(leaves)),
        )
    }

    fn expr(&mut self, kind: Kind, depth: usize) -> String {
        match kind {
            Kind::Str => self.string(depth),
            Kind::Int => self.int(depth),
            Kind::Bool => self.boolean(depth),
            Kind::StrList => self.list(depth),
            Kind::StrMap => self.map(depth),
        }
    }

    /// `range.macro(v, body)` with `v` of kind `element` in scope for the
    /// body, unless loops nest as deep as kadmit allows.
    fn with_loop_variable(
        &mut self,
        element: Kind,
        body: impl FnOnce(&mut Self, &str) -> String,
    ) -> Option<String> {
        if self.loops >= 3 {
            return None;
        }
        let name = self.fresh();
        self.scope.push((name.clone(), element));
        self.loops += 1;
        let made = body(self, &name);
        self.loops -= 1;
        self.scope.pop();
        Some(made)
    }

    /// A loop over the containers, with `c.name` and `c.image` in scope.
    fn over_containers(&mut self, body: impl FnOnce(&mut Self, &str) -> String) -> Option<String> {
        if self.loops >= 3 {
            return None;
        }
        let name = self.fresh();
        self.scope.push((format!("{name}.name"), Kind::Str));
        self.scope.push((format!("{name}.image"), Kind::Str));
        self.loops += 1;
        let made = body(self, &name);
        self.loops -= 1;
        self.scope.pop();
        self.scope.pop();
        Some(made)
    }

    fn string(&mut self, depth: usize) -> String {
        if let Some(leaf) = self.leaf(depth, Some(Kind::Str), STRING_LEAVES) {
            return leaf;
        }
        let d = depth - 1;
        match self.pick(24) {
            0 => format!("{} + {}", self.string(d), self.string(d)),
            1 => format!("{}.lowerAscii()", self.string(d)),
            2 => format!("{}.upperAscii()", self.string(d)),
            3 => format!("{}.trim()", self.string(d)),
            4 => format!("{}.reverse()", self.string(d)),
            5 => format!(
                "{}.replace({}, {})",
                self.string(d),
                self.string(d),
                self.string(d)
            ),
            6 => format!(
                "{}.replace({}, {}, {})",
                self.string(d),
                self.string(d),
                self.string(d),
                self.int(d)
            ),
            7 => format!("{}.substring({})", self.string(d), self.int(d)),
            8 => format!(
                "{}.substring({}, {})",
                self.string(d),
                self.int(d),
                self.int(d)
            ),
            9 => format!("{}.charAt({})", self.string(d), self.int(d)),
            10 => format!("strings.quote({})", self.string(d)),
            11 => format!("{}.join()", self.list(d)),
            12 => format!("{}.join({})", self.list(d), self.string(d)),
            13 => format!("'%s-%d'.format([{}, {}])", self.string(d), self.int(d)),
            14 => format!(
                "({} ? {} : {})",
                self.boolean(d),
                self.string(d),
                self.string(d)
            ),
            15 => format!("string({})", self.int(d)),
            16 => format!("{}[{}]", self.list(d), self.int(d)),
            17 => format!("{}[{}]", self.map(d), self.string(d)),
            18 => {
                let field = self.one_of(&["app", "tier", "team", "missing"]);
                format!("{}.?{field}.orValue({})", self.map(d), self.string(d))
            }
            19 => format!(
                "{}[?{}].orValue({})",
                self.map(d),
                self.string(d),
                self.string(d)
            ),
            20 => format!(
                "{}.split({}).join({})",
                self.string(d),
                self.string(d),
                self.string(d)
            ),
            21 => format!("'[%s]'.format([{}])", self.list(d)),
            22 => format!("string({})", self.number(d)),
            _ => format!("'%s|%d'.format([{}, {}])", self.number(d), self.int(d)),
        }
    }

    fn int(&mut self, depth: usize) -> String {
        if let Some(leaf) = self.leaf(depth, Some(Kind::Int), INT_LEAVES) {
            return leaf;
        }
        let d = depth - 1;
        match self.pick(17) {
            0 => format!("{} + {}", self.int(d), self.int(d)),
            1 => format!("{} - {}", self.int(d), self.int(d)),
            2 => format!("{} * {}", self.int(d), self.int(d)),
            3 => format!("{} / {}", self.int(d), self.int(d)),
            4 => format!("{} % {}", self.int(d), self.int(d)),
            5 => format!("-{}", self.int(d)),
            6 => format!("size({})", self.string(d)),
            7 => format!("{}.indexOf({})", self.string(d), self.string(d)),
            8 => format!(
                "{}.indexOf({}, {})",
                self.string(d),
                self.string(d),
                self.int(d)
            ),
            9 => format!("{}.lastIndexOf({})", self.string(d), self.string(d)),
            10 => format!(
                "{}.lastIndexOf({}, {})",
                self.string(d),
                self.string(d),
                self.int(d)
            ),
            11 => format!("size({})", self.list(d)),
            12 => format!("({} ? {} : {})", self.boolean(d), self.int(d), self.int(d)),
            13 => format!("int({})", self.string(d)),
            14 => format!("{}.size()", self.map(d)),
            15 => {
                let map = self.map(d);
                self.with_loop_variable(Kind::Str, |g, k| {
                    format!("size({map}.filter({k}, {}))", g.boolean(d))
                })
                .unwrap_or_else(|| format!("size({map})"))
            }
            _ => {
                let (list, index) = (self.list(d), self.int(d));
                self.with_loop_variable(Kind::Str, |_, v| {
                    format!("{list}.map({v}, size({v}))[{index}]")
                })
                .unwrap_or_else(|| format!("size({list})"))
            }
        }
    }

    fn boolean(&mut self, depth: usize) -> String {
        if let Some(leaf) = self.leaf(depth, Some(Kind::Bool), BOOLEAN_LEAVES) {
            return leaf;
        }
        let d = depth - 1;
        match self.pick(28) {
            0 => format!("{} == {}", self.string(d), self.string(d)),
            1 => format!("{} != {}", self.string(d), self.string(d)),
            2 => format!("{} < {}", self.int(d), self.int(d)),
            3 => format!("{} >= {}", self.int(d), self.int(d)),
            4 => format!("{} < {}", self.string(d), self.string(d)),
            5 => format!("{}.contains({})", self.string(d), self.string(d)),
            6 => format!("{}.startsWith({})", self.string(d), self.string(d)),
            7 => format!("{}.endsWith({})", self.string(d), self.string(d)),
            8 => {
                let re = self.one_of(&["'^[a-z]+$'", "'o'", "'[0-9]'", "'^$'", "'.*'", "'é|Ω'"]);
                format!("{}.matches({re})", self.string(d))
            }
            9 => format!("({} && {})", self.boolean(d), self.boolean(d)),
            10 => format!("({} || {})", self.boolean(d), self.boolean(d)),
            11 => format!("!{}", self.boolean(d)),
            12..=14 => {
                let list = self.list(d);
                let name = ["all", "exists", "exists_one"][self.pick(3)];
                self.with_loop_variable(Kind::Str, |g, v| {
                    format!("{list}.{name}({v}, {})", g.boolean(d))
                })
                .unwrap_or_else(|| format!("{list}.size() > 0"))
            }
            15 => format!("{} in {}", self.string(d), self.list(d)),
            16 => format!("{} in {}", self.string(d), self.map(d)),
            17 => format!("{}.size() > {}", self.list(d), self.int(d)),
            18 => {
                let map = self.map(d);
                self.with_loop_variable(Kind::Str, |g, k| {
                    format!("{map}.exists({k}, {})", g.boolean(d))
                })
                .unwrap_or_else(|| format!("{map}.size() == 0"))
            }
            19 => {
                let field = self.one_of(&["app", "tier", "missing"]);
                format!("{}.?{field}.hasValue()", self.map(d))
            }
            20 => {
                let name = ["all", "exists", "exists_one"][self.pick(3)];
                self.over_containers(|g, c| {
                    format!("object.spec.containers.{name}({c}, {})", g.boolean(d))
                })
                .unwrap_or_else(|| "object.spec.containers.size() == 3".to_owned())
            }
            21 => format!("{} == {}", self.list(d), self.list(d)),
            22 => format!(
                "({} ? {} : {})",
                self.boolean(d),
                self.boolean(d),
                self.boolean(d)
            ),
            23 => {
                let (text, map) = (self.string(d), self.map(d));
                self.with_loop_variable(Kind::Str, |g, k| {
                    format!("{text} in {map}.map({k}, {}, {map}[{k}])", g.boolean(d))
                })
                .unwrap_or_else(|| format!("{text} in {map}"))
            }
            24 => format!("{} < {}", self.number(d), self.number(d)),
            25 => format!("{} == {}", self.number(d), self.number(d)),
            26 => format!(
                "{} in [{}, {}]",
                self.number(d),
                self.number(d),
                self.number(d)
            ),
            _ => format!("{} == {}", self.int(d), self.int(d)),
        }
    }

    /// Numbers of the three kinds, mixed: `int`, `uint` and `double`.
    fn number(&mut self, depth: usize) -> String {
        if let Some(leaf) = self.leaf(depth, None, NUMBER_LEAVES) {
            return leaf;
        }
        let d = depth - 1;
        match self.pick(11) {
            0 => format!("{} + {}", self.number(d), self.number(d)),
            1 => format!("{} - {}", self.number(d), self.number(d)),
            2 => format!("{} * {}", self.number(d), self.number(d)),
            3 => format!("{} / {}", self.number(d), self.number(d)),
            4 => format!("{} % {}", self.number(d), self.number(d)),
            5 => format!("int({})", self.number(d)),
            6 => format!("uint({})", self.number(d)),
            7 => format!("double({})", self.number(d)),
            8 => format!(
                "({} ? {} : {})",
                self.boolean(d),
                self.number(d),
                self.number(d)
            ),
            9 => format!("-{}", self.number(d)),
            _ => format!("dyn({})", self.int(d)),
        }
    }

    fn list(&mut self, depth: usize) -> String {
        if let Some(leaf) = self.leaf(depth, Some(Kind::StrList), LIST_LEAVES) {
            return leaf;
        }
        let d = depth - 1;
        match self.pick(11) {
            0 => format!("{}.split({})", self.string(d), self.string(d)),
            1 => format!(
                "{}.split({}, {})",
                self.string(d),
                self.string(d),
                self.int(d)
            ),
            2 => format!("{} + {}", self.list(d), self.list(d)),
            3 => {
                let list = self.list(d);
                self.with_loop_variable(Kind::Str, |g, v| {
                    format!("{list}.map({v}, {})", g.string(d))
                })
                .unwrap_or(list)
            }
            4 => {
                let list = self.list(d);
                self.with_loop_variable(Kind::Str, |g, v| {
                    format!("{list}.filter({v}, {})", g.boolean(d))
                })
                .unwrap_or(list)
            }
            5 => {
                let list = self.list(d);
                self.with_loop_variable(Kind::Str, |g, v| {
                    format!("{list}.map({v}, {}, {})", g.boolean(d), g.string(d))
                })
                .unwrap_or(list)
            }
            6 => format!("[{}, {}]", self.string(d), self.string(d)),
            7 => self
                .over_containers(|g, c| {
                    format!(
                        "object.spec.containers.filter({c}, {}).map({c}, {c}.image)",
                        g.boolean(d)
                    )
                })
                .unwrap_or_else(|| "['x']".to_owned()),
            8 => format!("[{}]", self.string(d)),
            9 => self
                .over_containers(|g, c| format!("object.spec.containers.map({c}, {})", g.string(d)))
                .unwrap_or_else(|| "request.userInfo.groups".to_owned()),
            _ => format!("[?{}.?app, {}]", self.map(d), self.string(d)),
        }
    }

    fn map(&mut self, depth: usize) -> String {
        if let Some(leaf) = self.leaf(depth, None, MAP_LEAVES) {
            return leaf;
        }
        let d = depth - 1;
        match self.pick(3) {
            0 => format!("{{{}: {}}}", self.string(d), self.string(d)),
            1 => format!("{{'a': {}, 'app': {}}}", self.string(d), self.string(d)),
            _ => format!("{{?'app': {}.?app, 'z': {}}}", self.map(d), self.string(d)),
        }
    }
}

/// The expression the choices draw, of a kind the first picks, at most 4
/// deep. Its loops over maps only yield what does not depend on the order
/// they visit the keys in (a boolean, a size, a membership).
fn generated(choices: &[u8]) -> String {
    let mut generator = Generator {
        choices,
        at: 0,
        scope: Vec::new(),
        loops: 0,
        fresh: 0,
    };
    let kind = [
        Kind::Bool,
        Kind::Str,
        Kind::Int,
        Kind::StrList,
        Kind::StrMap,
    ][generator.pick(5)];
    generator.expr(kind, 4)
}

#[test]
fn generated_expressions_keep_cel_results() {
    on_large_stack(|| {
        let config = ProptestConfig {
            cases: 1500,
            failure_persistence: None,
            ..ProptestConfig::default()
        };
        let mut runner = TestRunner::new(config);
        let (values, failures) = (Cell::new(0usize), Cell::new(0usize));
        let result = runner.run(&prop::collection::vec(any::<u8>(), 0..160), |choices| {
            let source = generated(&choices);
            let (kadmit, reference) = compare(&source);
            if std::env::var_os("CEL_EQUIVALENCE_DUMP").is_some() {
                eprintln!("{}", shown(&source, &kadmit, &reference));
            }
            let counter = if kadmit.failed() { &failures } else { &values };
            counter.set(counter.get() + 1);
            // Bounds kadmit refuses on purpose (nesting, size) are not a
            // difference in meaning.
            if matches!(&kadmit, Outcome::NotCompiled(m) if m.contains("over the limit")) {
                return Ok(());
            }
            if agree(&kadmit, &reference, false) {
                Ok(())
            } else {
                Err(TestCaseError::fail(shown(&source, &kadmit, &reference)))
            }
        });
        match result {
            // Most generated expressions are well-typed and yield values
            // (the cases proptest ran while shrinking a failure included).
            Ok(()) => assert!(
                values.get() >= 2 * failures.get(),
                "{} values and {} failures",
                values.get(),
                failures.get()
            ),
            Err(TestError::Fail(reason, choices)) => {
                panic!(
                    "a generated expression mismatches (shrunk):\n{reason}\n  choices: {choices:?}\n  expression: {}",
                    generated(&choices)
                )
            }
            Err(other) => panic!("{other}"),
        }
    });
}
