//! The mutating in-tree policies leave the object kadmit's patch leaves, on
//! generated objects: small JSON trees whose keys come from a few names
//! (some needing JSON Pointer escaping), so that the rules' paths meet maps,
//! lists, scalars and nulls in every combination. The policies are applied
//! as `in_tree::compare_mutations` applies them (match conditions, each
//! `JSONPatch` mutation in turn, reinvocation, in both orders). And the
//! validating policies find a violation exactly when kadmit does, as
//! `in_tree::compare` evaluates them, on objects whose leaves are quantity
//! strings, numbers of each JSON kind, bools and nulls. A failing
//! object is shrunk, and its seed kept in
//! `in_tree_properties.proptest-regressions`, tried first on every run.

use std::cell::{Cell, RefCell};
use std::sync::OnceLock;

use kadmit::in_tree::{self, Policies};
use kadmit::plan::{Plan, compile};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};

use crate::in_tree::{EDGE_RULES, Evaluator, Mutator, compare_mutations_with, compare_with};

/// Generated objects per rule set.
const CASES: u32 = 256;

/// Keys of the generated maps: few, so the rules' paths find them often.
const KEYS: &[&str] = &["a", "b", "c", "x/y", "t~1"];

/// Every edit kind on paths made of [`KEYS`]: wildcards over maps and
/// lists, negative indices, unions, list positions in the written tail,
/// copied values, conditions (a CEL one among them), keys needing escaping,
/// a union that selects one list element twice (`[0,-1]` on a list of
/// one). One rule, so its edits
/// apply in one order whichever order the policies run in; every edit
/// reads only what the edits before it write, so kadmit settles in the two
/// passes it allows one rule.
const PATH_RULES: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: paths}
spec:
  rules:
    - name: paths
      match: {resources: [configmaps]}
      mutate:
        - setIfAbsent: {path: $.object.a.b, value: 1}
        - setIfAbsent: {path: "$.object['t~1'].b", value: 3}
          when:
            - cel: "has(object.a) && type(object.a) == list"
        - set: {path: "$.object['x/y']['t~1']", value: [1, "a"]}
        - mergeIfAbsent: {path: $.object.a, value: {b: {c: 1, a: [1]}, "x/y": true, c: null}}
        - mergeIfAbsent: {path: "$.object.b[*]", value: {a: {b: null, "t~1": s}}}
        - setIfAbsent: {path: "$.object.b[*].c", value: {a: x}}
        - setIfAbsent: {path: "$.object['a','b'][0].a", valueFrom: {path: "$.object['t~1']"}}
        - set: {path: "$.object.b[-1]['x/y']", value: 2.5}
          when:
            - {path: $.object.a.c, exists: true}
        - set: {path: "$.object.a.a[1]", value: false}
        - injectIfMissing: {path: "$.object['x/y'].a", key: b, value: {b: 1, c: 2}}
        - injectIfMissing: {path: "$.object[*][0,-1]", key: [a, c], value: {a: x, c: null}}
        - setIfAbsent: {path: "$.object[*][*]", value: filled}
"#;

/// Nested `forEach`es over a wildcard, a union and a union that selects
/// one element twice (`[0,-1]` of one), with a rule condition, conditions
/// on entries, a condition on a `forEach` of several entries (reading only
/// the request: it is looked at again between them) and one on a `forEach`
/// of one entry (reading what the entries before it wrote), and copies that
/// read the element. Every edit reads only what the edits before it write
/// (kadmit's two passes for one rule).
const FOR_EACH_RULES: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: each}
spec:
  rules:
    - name: each
      match: {resources: [configmaps]}
      when:
        - not: {path: "$.object.a[*]", equals: 0}
      mutate:
        - forEach: "$.object.c[*]"
          mutate:
            - setIfAbsent: {path: $.a, valueFrom: {path: "$['x/y']"}}
            - set: {path: "$['t~1']", value: z}
              when:
                - {path: $.b, equals: 1}
            # Looked at before each of several entries: only the request.
            - forEach: "$['a','b']"
              when:
                - {path: $$.request.operation, equals: CREATE}
              mutate:
                - setIfAbsent: {path: $.c, value: 1}
                - injectIfMissing: {path: "$['x/y']", key: a, value: {a: 1}}
                - forEach: "$[0,-1]"
                  mutate:
                    - mergeIfAbsent: {path: $.a, value: {b: 2, c: {a: null}}}
                    - set: {path: "$['t~1']", valueFrom: {path: $.b}}
                    - injectIfMissing: {path: $.l, key: [a, c], value: {a: x, c: null}}
            # Before a single entry, reading what the entries above wrote.
            - forEach: "$['b']"
              when:
                - {path: $.a.c, absent: true}
              mutate:
                - setIfAbsent: {path: $.d, value: 2}
            - mergeIfAbsent: {path: $.c, value: {a: 1, b: {c: [2]}}}
"#;

fn plan_of(name: &str, text: &str) -> Plan {
    compile(&kadmit::rules::load_str(name, text)).unwrap_or_else(|d| panic!("{name}: {d}"))
}

/// A plan and its policies, every rule translated.
struct Translated {
    plan: Plan,
    policies: Policies,
}

/// Which kind of policy every rule of a set must have.
#[derive(Clone, Copy)]
enum Kind {
    Mutating,
    Validating,
}

fn translated_as(name: &str, text: &str, kind: Kind) -> Translated {
    let plan = plan_of(name, text);
    let policies = in_tree::policies(&plan);
    assert!(
        policies.untranslated.is_empty(),
        "{name}: {:?}",
        policies.untranslated
    );
    assert!(
        policies.policies.iter().all(|p| match kind {
            Kind::Mutating => p.mutating.is_some(),
            Kind::Validating => p.validating.is_some(),
        }),
        "{name}: every rule has its policy"
    );
    Translated { plan, policies }
}

fn translated(name: &str, text: &str) -> Translated {
    translated_as(name, text, Kind::Mutating)
}

fn path_rules() -> &'static Translated {
    static PLAN: OnceLock<Translated> = OnceLock::new();
    PLAN.get_or_init(|| translated("paths.yaml", PATH_RULES))
}

fn for_each_rules() -> &'static Translated {
    static PLAN: OnceLock<Translated> = OnceLock::new();
    PLAN.get_or_init(|| translated("each.yaml", FOR_EACH_RULES))
}

fn edge_rules() -> &'static Translated {
    static PLAN: OnceLock<Translated> = OnceLock::new();
    PLAN.get_or_init(|| translated("edges.yaml", EDGE_RULES))
}

/// Leaves, among them the values the rules write and test for. No float
/// with an integral value: the API server sends `1.0` as `1` (Go's JSON
/// encoding), so neither kadmit nor a policy meets one, and CEL's `[1] ==
/// [1.0]` holds where JSON values differ.
fn arb_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-2i64..4).prop_map(|n| json!(n)),
        prop_oneof![Just(2.5), Just(-0.5), Just(1e300)].prop_map(|f| json!(f)),
        prop_oneof![
            Just(""),
            Just("x"),
            Just("a"),
            Just("s"),
            Just("z"),
            Just("filled"),
            Just("platform"),
            Just("app"),
            Just("added"),
        ]
        .prop_map(|s| json!(s)),
    ]
}

/// JSON trees up to `depth` containers deep, their maps keyed from `keys`.
fn arb_tree(depth: u32, keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
    arb_scalar().prop_recursive(depth, 24, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(prop::sample::select(keys), inner, 0..4)
                .prop_map(|m| json!(m)),
        ]
    })
}

/// Maps keyed from `keys`, their values trees up to `depth` deep.
fn arb_map(depth: u32, keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
    prop::collection::btree_map(prop::sample::select(keys), arb_tree(depth, keys), 0..5)
        .prop_map(|m| json!(m))
}

/// What the `forEach` rules iterate: a list or map of elements, mostly
/// maps whose values are often lists of maps, so that every level of the
/// nested `forEach`es finds elements.
fn arb_elements() -> impl Strategy<Value = Value> {
    let value = prop_oneof![
        2 => arb_tree(3, KEYS),
        1 => prop::collection::vec(arb_map(2, KEYS), 0..3).prop_map(Value::Array),
    ];
    let element = prop_oneof![
        3 => prop::collection::btree_map(prop::sample::select(KEYS), value, 0..5)
            .prop_map(|m| json!(m)),
        1 => arb_tree(2, KEYS),
    ];
    prop_oneof![
        3 => prop::collection::vec(element.clone(), 0..4).prop_map(Value::Array),
        2 => prop::collection::btree_map(prop::sample::select(KEYS), element, 0..4)
            .prop_map(|m| json!(m)),
        1 => arb_scalar(),
    ]
}

/// A ConfigMap with `fields` beside its `apiVersion`, `kind` and
/// `metadata`, which holds `extra` beside its name.
fn config_map(fields: Vec<(&str, Value)>, extra: Vec<(&str, Value)>) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!("generated"));
    for (key, value) in extra {
        metadata.insert(key.to_owned(), value);
    }
    let mut object = Map::new();
    object.insert("apiVersion".into(), json!("v1"));
    object.insert("kind".into(), json!("ConfigMap"));
    object.insert("metadata".into(), Value::Object(metadata));
    for (key, value) in fields {
        object.insert(key.to_owned(), value);
    }
    Value::Object(object)
}

/// Top-level fields named from `top`, each a tree keyed from `keys`.
fn arb_fields(
    top: &'static [&'static str],
    keys: &'static [&'static str],
) -> impl Strategy<Value = Vec<(&'static str, Value)>> {
    prop::collection::btree_map(prop::sample::select(top), arb_tree(3, keys), 0..=top.len())
        .prop_map(|m| m.into_iter().collect())
}

/// The policies of `rules` leave each of [`CASES`] generated objects as
/// kadmit's patch does (the first one that they do not is shrunk and
/// reported), and kadmit changed at least `min_changed` of them: the rules
/// meet the objects. And the comparison sees a missing edit: without each
/// policy's last mutation, some of 64 objects come out otherwise.
fn differential(
    name: &str,
    rules: &Translated,
    objects: impl Strategy<Value = Value>,
    min_changed: u32,
) {
    let mutator = RefCell::new(Mutator::new(&rules.plan, &rules.policies));
    let changed = Cell::new(0);
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        source_file: Some(file!()),
        ..Config::default()
    });
    let result = runner.run(&objects, |object| {
        let input = vec![(
            "generated".to_owned(),
            crate::conformance::create(object.clone()),
        )];
        let (compared, kadmit_changed, disagreements) =
            compare_mutations_with(&mut mutator.borrow_mut(), &input);
        prop_assert_eq!(compared, 2, "both orders compared");
        prop_assert!(
            disagreements.is_empty(),
            "{}: on {}:\n{}",
            name,
            object,
            disagreements.join("\n")
        );
        changed.set(changed.get() + u32::from(kadmit_changed > 0));
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{name}: {failure}");
    }
    eprintln!(
        "{name}: kadmit changed {} of {CASES} objects",
        changed.get()
    );
    assert!(
        changed.get() >= min_changed,
        "{name}: kadmit changed only {} of {CASES} objects",
        changed.get()
    );
    let mut without_last = Mutator::new(&rules.plan, &rules.policies);
    without_last.drop_last = true;
    let mut sample = TestRunner::deterministic();
    let mut differ = 0;
    for _ in 0..64 {
        let object = objects.new_tree(&mut sample).expect("an object").current();
        let input = vec![("sample".to_owned(), crate::conformance::create(object))];
        differ += usize::from(
            !compare_mutations_with(&mut without_last, &input)
                .2
                .is_empty(),
        );
    }
    eprintln!("{name}: without the last mutations, {differ} of 64 objects differ");
    assert!(differ >= 8, "{name}: {differ} of 64");
}

#[test]
fn path_mutations_as_in_tree_policies_leave_the_object_kadmit_does() {
    differential(
        "paths",
        path_rules(),
        arb_fields(KEYS, KEYS).prop_map(|fields| config_map(fields, Vec::new())),
        CASES / 2,
    );
}

#[test]
fn for_each_mutations_as_in_tree_policies_leave_the_object_kadmit_does() {
    let objects = (arb_elements(), arb_fields(&["a", "x/y"], KEYS)).prop_map(|(c, mut fields)| {
        fields.push(("c", c));
        config_map(fields, Vec::new())
    });
    differential("forEach", for_each_rules(), objects, CASES / 4);
}

#[test]
fn edge_mutations_as_in_tree_policies_leave_the_object_kadmit_does() {
    let metadata_map = |keys: &'static [&'static str]| {
        prop_oneof![
            arb_scalar(),
            prop::collection::btree_map(prop::sample::select(keys), arb_scalar(), 0..3)
                .prop_map(|m| json!(m)),
        ]
    };
    let objects = (
        arb_fields(
            &["data", "extra", "items"],
            &[
                "a", "b", "c", "n", "name", "v", "x/y", "merged", "list", "last", "seen",
            ],
        ),
        prop::option::of(metadata_map(&["team", "named", "a"])),
        prop::option::of(metadata_map(&["example.com/a~b", "a"])),
    )
        .prop_map(|(fields, labels, annotations)| {
            let mut metadata = Vec::new();
            metadata.extend(labels.map(|labels| ("labels", labels)));
            metadata.extend(annotations.map(|annotations| ("annotations", annotations)));
            config_map(fields, metadata)
        });
    differential("edges", edge_rules(), objects, CASES / 2);
}

/// One rule per kind of deny test, on paths made of a few keys
/// (wildcards over maps and lists, unions, negative indices, `forEach`
/// with `as` and `entries`), the literals among the values the objects are
/// made of ([`arb_leaf`]), so that each rule finds a violation in some
/// objects and none in others.
const DENY_RULES: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: checks}
spec:
  rules:
    - name: equals
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object[*]", equals: 1, message: m}
        - {path: "$.object[*][-1]", equals: "1Gi", message: m}
        - {path: "$.object['a','c'][0,-1]", equals: null, message: m}
        - {path: "$.object[*][*]", equals: 2.5, message: m}
        - {path: $.object.b.c, equals: false, message: m}
        - {path: "$.object[*][*][*]", equals: "500m", message: m}
        - {path: "$.object[*][*]", equals: true, message: m}
    - name: equals-negative
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object[*][*]", equals: -1, message: m}
        - {path: "$.object[*]", equals: -0.5, message: m}
        - {path: "$.object.d[*]", equals: -2, message: m}
        - {path: "$.object[*][*][*]", equals: -1, message: m}
    - name: not-equals
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object.a[0]", notEquals: "1Gi", message: m}
        - {path: $.object.c.a, notEquals: 1, message: m}
    - name: equals-path
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object.c[0]", equals: {path: "$.object.c[-1]"}, message: m}
        - {path: "$.object.a[*]", equals: {path: "$.object.a[-1]"}, message: m}
        - {path: "$.object.b[*]", equals: {path: "$.object.d[0]"}, message: m}
        - {path: "$.object[*]", equals: {path: "$.object.a[0]"}, message: m}
        - {path: "$.object[*][*]", equals: {path: $.object.b}, message: m}
        - {path: "$.object['a','d'][*][*]", equals: {path: "$.object.c[0]"}, message: m}
    - name: not-equals-path
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object.a[-1]", notEquals: {path: "$.object.b[-1]"}, message: m}
        - {path: "$.object.d", notEquals: {path: "$.object.d[0]"}, message: m}
    - name: in
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object[*][*]", in: [1, "500m", null, true, 2.5, -2], message: m}
        - {path: "$.object['a','d']", in: ["", 0, "1e3", -1], message: m}
    - name: not-in
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object['b','d'][*]", notIn: ["", 0, false, 1e300, "abc", 3], message: m}
    - name: matches
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object[*][*]", matches: "^[0-9]+[KMG]i$", message: m}
        - {path: "$.object[*]", matches: "e|^$", message: m}
        - {path: "$.object[*][*][-1]", matches: "^\\+|[.]", message: m}
    - name: not-matches
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object.a[*]", notMatches: "^ap", message: m}
        - {path: "$.object['c','d'][0,-1]", notMatches: "[0-9]", message: m}
        - {path: "$.object[*][*][*]", notMatches: "^[a-z]*$", message: m}
    - name: starts-with
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object[*][*]", startsWith: [app, "+"], message: m}
        - {path: "$.object[*]", startsWith: ["1", "-"], message: m}
    - name: not-starts-with
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object['a','b'][*]", notStartsWith: ["1", ap], message: m}
        - {path: "$.object[*][-2]", notStartsWith: ["1", ap], message: m}
        - {path: "$.object[*][*][0]", notStartsWith: ["-", "+", "."], message: m}
    - name: contains
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object[*]", contains: "500m", message: m}
        - {path: "$.object[*][*]", contains: 2, message: m}
        - {path: "$.object['a','c']", contains: null, message: m}
        - {path: "$.object.d", contains: true, message: m}
    - name: contains-any
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object[*]", containsAny: [false, "abc", 3, null, "1Gi"], message: m}
    - name: subset-of
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object['c','d'][*]", subsetOf: [1, "1Gi", false, null, "app", 2.5], message: m}
    - name: exists
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object[*][-2].b", exists: true, message: m}
        - {path: "$.object.a[1,-3]", exists: true, message: m}
        - {path: "$.object.c.d", exists: true, message: m}
    - name: absent
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object['b','c'][0]", absent: true, message: m}
    - name: greater-than
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object[*]", greaterThan: 1Gi, message: m}
        - {path: "$.object.d[*]", greaterThan: "-1Ki", message: m}
    - name: less-than
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object[*][*]", lessThan: 500m, message: m}
        - {path: $.object.c, lessThan: "-0.5", message: m}
    - name: greater-or-equal
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object[*][*]", greaterOrEqual: 1024Mi, message: m}
        - {path: "$.object['a','b']", greaterOrEqual: "1e-2", message: m}
    - name: less-or-equal
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object[*][0,-1]", lessOrEqual: "0.5", message: m}
        - {path: "$.object[*]", lessOrEqual: "-1", message: m}
    - name: compare-path
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object[*]", greaterThan: {path: $.object.b}, message: m}
        - {path: "$.object[*][*]", lessOrEqual: {path: "$.object.d[-1]"}, message: m}
        - {path: "$.object.a[*]", greaterOrEqual: {path: "$.object.c[1]"}, message: m}
        - {path: "$.object[*][*][*]", lessThan: {path: "$.object.d"}, message: m}
        - {path: "$.object[*][*]", greaterThan: {path: "$.object.a[0]"}, message: m}
        - {path: "$.object.c[*]", greaterOrEqual: {path: "$.object.c[-1]"}, message: m}
    - name: logic
      match: {resources: [configmaps]}
      when:
        - not: {path: "$.object.d[*]", equals: "abc"}
      deny:
        - any:
            - all:
                - {path: $.object.a, exists: true}
                - not: {path: "$.object.a[*]", exists: true}
            - not:
                any:
                  - {path: "$.object.b[*]", exists: true}
                  - {path: $.object.c, in: [1, "1Gi", null, true]}
          message: m
    - name: for-each
      match: {resources: [configmaps]}
      deny:
        - forEach: "$.object[*]"
          as: top
          deny:
            - forEach: "$[*]"
              deny:
                - {path: $, greaterThan: {path: "$top[0]"}, message: m}
                - {path: "$top[*]", lessThan: {path: $}, message: m}
                - {path: $.a, equals: {path: "$$.object.d"}, message: m}
                - all:
                    - {path: $, startsWith: [ap, "1"]}
                    - {path: "$top[-1]", exists: true}
                  message: m
    - name: for-each-entries
      match: {resources: [configmaps]}
      deny:
        - forEach: "$.object['a','c']"
          entries: true
          deny:
            - all:
                - {path: $.key, in: [a, b]}
                - {path: $.value, greaterOrEqual: "1"}
              message: m
        - forEach: "$.object[*][*]"
          as: inner
          deny:
            - forEach: $inner
              entries: true
              deny:
                - {path: $.value, equals: {path: "$$.object.a"}, message: m}
                - all:
                    - {path: $.key, equals: d}
                    - {path: $.value, notIn: [null]}
                  message: m
                - all:
                    - {path: $.key, in: [b, c]}
                    - {path: "$.value[*]", lessThan: {path: "$inner.a"}}
                  message: m
    - name: cel
      match: {resources: [configmaps]}
      deny:
        - cel: "has(object.a) && type(object.a) == string && isQuantity(object.a) && quantity(object.a).isGreaterThan(quantity('1'))"
          message: m
        - forEach: "$.object[*]"
          as: el
          deny:
            - forEach: "$[*]"
              deny:
                - cel: "type(el) == list && type(element) == int && element > 1"
                  message: m
                - cel: "type(element) == string && element.startsWith('a') || type(element) == double"
                  message: m
    # Literals past `i64` (a `uint` in CEL), at every depth: a `uint` equals
    # them by value (once written as a `double` only).
    - name: uint-literals
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object[*]", equals: 18446744073709551615, message: m}
        - {path: "$.object[*][*]", equals: 18446744073709551615, message: m}
        - {path: "$.object[*][*][*]", in: [9223372036854775808, "abc"], message: m}
        - {path: "$.object[*][*][*]", equals: 18446744073709551615, message: m}
    # `notEquals: null` (once written `!type(x) == null_type`, which fails).
    - name: not-equals-null
      match: {resources: [configmaps]}
      deny:
        - {path: "$.object['a','b'][*]", notEquals: null, message: m}
"#;

fn deny_rules() -> &'static Translated {
    static PLAN: OnceLock<Translated> = OnceLock::new();
    PLAN.get_or_init(|| translated_as("checks.yaml", DENY_RULES, Kind::Validating))
}

/// Leaves that meet the deny tests at their edges: quantity strings,
/// valid and not (surrounding spaces, exponents, signs, an exponent past
/// `i32`), strings with and without the rules' prefixes, ints, uints past
/// `i64`, negative numbers, floats (integral ones among them, which equal
/// the ints of the same value), bools and nulls.
fn arb_leaf() -> impl Strategy<Value = Value> {
    let strings = prop::sample::select(vec![
        "1Gi",
        "1024Mi",
        "500m",
        "0.5",
        " 1",
        "1e3",
        "1E-2",
        ".5",
        "+1",
        "-1Ki",
        "1e2147483647",
        "abc",
        "",
        "app",
        "ap",
    ])
    .prop_map(|s| json!(s));
    let numbers = prop::sample::select(vec![
        json!(-2),
        json!(-1),
        json!(0),
        json!(1),
        json!(2),
        json!(1024),
        json!(i64::MIN),
        json!(9_223_372_036_854_775_808u64),
        json!(u64::MAX),
        json!(2.5),
        json!(-0.5),
        json!(1e300),
        // Integral floats, equal by value to the ints above (an object's
        // `number` field is a double to the API server's CEL).
        json!(1.0),
        json!(-2.0),
        json!(1024.0),
    ]);
    prop_oneof![
        4 => strings,
        4 => numbers,
        1 => any::<bool>().prop_map(Value::Bool),
        1 => Just(Value::Null),
    ]
}

/// Trees up to `depth` containers deep, a third of their values
/// leaves ([`arb_leaf`]), their maps keyed from `a` to `d`.
fn arb_checked_value(depth: u32) -> BoxedStrategy<Value> {
    const NAMES: &[&str] = &["a", "b", "c", "d"];
    if depth == 0 {
        return arb_leaf().boxed();
    }
    let inner = arb_checked_value(depth - 1);
    prop_oneof![
        2 => arb_leaf(),
        2 => prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
        2 => prop::collection::btree_map(prop::sample::select(NAMES), inner, 0..5)
            .prop_map(|m| json!(m)),
    ]
    .boxed()
}

/// A ConfigMap with some of the fields `a` to `d`, each a tree of
/// [`arb_checked_value`].
fn arb_checked() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        prop::sample::select(&["a", "b", "c", "d"][..]),
        arb_checked_value(2),
        1..=6,
    )
    .prop_map(|fields| config_map(fields.into_iter().collect(), Vec::new()))
}

/// Each rule's ValidatingAdmissionPolicy finds a violation in each of
/// [`CASES`] generated objects exactly when kadmit does (the first object
/// where it does not is shrunk and reported), and every rule finds one in
/// at least a twelfth of them and none in at least a twelfth. And the
/// comparison sees a wrong answer: each rule's policy compared with the
/// next rule's verdict disagrees on many of 64 objects.
fn deny_differential(name: &str, rules: &Translated) {
    let evaluator = RefCell::new(Evaluator::default());
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        source_file: Some(file!()),
        ..Config::default()
    });
    let objects = arb_checked();
    let result = runner.run(&objects, |object| {
        let input = vec![(
            "generated".to_owned(),
            crate::conformance::create(object.clone()),
        )];
        let (compared, _, disagreements) = compare_with(
            &mut evaluator.borrow_mut(),
            &rules.plan,
            &rules.policies,
            &input,
        );
        prop_assert_eq!(
            compared,
            rules.policies.policies.len(),
            "every rule compared"
        );
        prop_assert!(
            disagreements.is_empty(),
            "on {}:\n{}",
            object,
            disagreements.join("\n")
        );
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{name}: {failure}");
    }
    // How often each rule finds a violation is a property of the generator,
    // not of the code under test: it is counted on a fixed sample, so that
    // a rule near the bound cannot pass one run and fail the next.
    let mut sample = TestRunner::deterministic();
    let mut counted = Evaluator::default();
    for _ in 0..CASES {
        let object = objects.new_tree(&mut sample).expect("an object").current();
        let input = vec![("sample".to_owned(), crate::conformance::create(object))];
        let (_, _, disagreements) =
            compare_with(&mut counted, &rules.plan, &rules.policies, &input);
        assert!(disagreements.is_empty(), "{name}: {disagreements:?}");
    }
    let mut lopsided = Vec::new();
    for policy in &rules.policies.policies {
        let (compared, violated) = counted.tally[&*policy.rule];
        eprintln!("{name}: {}: {violated} of {compared} violated", policy.rule);
        let least = compared / 12;
        if violated < least || compared - violated < least {
            lopsided.push(format!("{}: {violated} of {compared}", policy.rule));
        }
    }
    assert!(
        lopsided.is_empty(),
        "{name}: rules that almost always or almost never find a violation: {lopsided:?}"
    );
    // Each policy named after the next rule: the comparison must fail.
    let mut shifted = rules.policies.clone();
    let names: Vec<_> = shifted.policies.iter().map(|p| p.rule.clone()).collect();
    for (i, policy) in shifted.policies.iter_mut().enumerate() {
        policy.rule = names[(i + 1) % names.len()].clone();
    }
    let mut sample = TestRunner::deterministic();
    let mut wrong = Evaluator::default();
    let mut differ = 0;
    for _ in 0..64 {
        let object = objects.new_tree(&mut sample).expect("an object").current();
        let input = vec![("sample".to_owned(), crate::conformance::create(object))];
        let (_, _, disagreements) = compare_with(&mut wrong, &rules.plan, &shifted, &input);
        differ += disagreements.len();
    }
    eprintln!("{name}: policies shifted by one rule: {differ} disagreements on 64 objects");
    assert!(differ >= 64, "{name}: {differ} disagreements");
}

#[test]
fn deny_rules_as_in_tree_policies_decide_as_kadmit_does() {
    deny_differential("checks", deny_rules());
}
