//! The mutating in-tree policies leave the object kadmit's patch leaves, on
//! generated objects: small JSON trees whose keys come from a few names
//! (some needing JSON Pointer escaping), so that the rules' paths meet maps,
//! lists, scalars and nulls in every combination. The policies are applied
//! as `in_tree::compare_mutations` applies them (match conditions, each
//! `JSONPatch` mutation in turn, reinvocation, in both orders). A failing
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

use crate::in_tree::{EDGE_RULES, Mutator, compare_mutations_with};

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

fn translated(name: &str, text: &str) -> Translated {
    let plan = plan_of(name, text);
    let policies = in_tree::policies(&plan);
    assert!(
        policies.untranslated.is_empty(),
        "{name}: {:?}",
        policies.untranslated
    );
    assert!(
        policies.policies.iter().all(|p| p.mutating.is_some()),
        "{name}: every rule mutates"
    );
    Translated { plan, policies }
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
