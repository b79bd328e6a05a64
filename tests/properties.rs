//! Property tests: mutation is idempotent and its patch reproduces it, for
//! every mutation kind and every bundled rule set, over generated pods and
//! arbitrary JSON objects; and evaluation never panics on any object.

use std::path::Path;
use std::sync::OnceLock;

use crate::engine::evaluate;
use kadmit::plan::Mode;
use kadmit::plan::{Plan, compile};
use kadmit::review::{Embedded, Operation, Request};
use kadmit::rules::{load_dir, load_str};
use kadmit::simulate::{ObjectOptions, request_for_object};
use proptest::prelude::*;
use serde_json::{Value, json};

fn bundled_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/rules"))
}

/// The bundled rules, all together and one file at a time.
fn bundled_plans() -> &'static Vec<(String, Plan)> {
    static PLANS: OnceLock<Vec<(String, Plan)>> = OnceLock::new();
    PLANS.get_or_init(|| {
        let mut plans = vec![(
            "all".to_owned(),
            compile(&load_dir(bundled_dir()).unwrap()).unwrap(),
        )];
        let mut files: Vec<_> = std::fs::read_dir(bundled_dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for path in files {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            let plan = compile_text(&name, &text);
            plans.push((name, plan));
        }
        plans
    })
}

/// The rule file `text`, compiled; panics with the diagnostics when it does not.
fn compile_text(name: &str, text: &str) -> Plan {
    compile(&load_str(name, text)).unwrap_or_else(|d| panic!("{name}: {d}"))
}

/// One rule per mutation kind, written so any object can be its target.
fn mutation_kinds_plan() -> &'static Plan {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    PLAN.get_or_init(|| {
        let text = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: kinds}
spec:
  rules:
    - name: set-if-absent
      match: {resources: ["*"]}
      mutate:
        - setIfAbsent: {path: "$.object.metadata.labels['a/b~c']", value: x}
        - setIfAbsent: {path: "$.object.spec.items[*].flag", value: true}
    - name: set
      match: {resources: ["*"]}
      mutate: [{set: {path: $.object.metadata.annotations.fixed, value: {n: 1}}}]
    - name: merge-if-absent
      match: {resources: ["*"]}
      mutate: [{mergeIfAbsent: {path: $.object.spec.defaults, value: {a: 1, b: {c: 2, d: [3]}}}}]
    - name: inject-if-missing
      match: {resources: ["*"]}
      mutate: [{injectIfMissing: {path: $.object.spec.items, key: [k, e], value: {k: injected, e: 1}}}]
    - name: for-each-copy
      match: {resources: ["*"]}
      mutate:
        - forEach: "$.object.spec.items[*]"
          mutate:
            - setIfAbsent: {path: $.copy, valueFrom: {path: $.k}}
"#;
        compile_text("kinds.yaml", text)
    })
}

/// Rules that read what later rules write, without `set`: the mutations
/// settle in one pass only when no later write reached an earlier read, which
/// the engine decides from what each pass read.
fn dependent_rules_plan() -> &'static Plan {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    PLAN.get_or_init(|| {
        let text = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: dependent}
spec:
  rules:
    - name: copy-early
      match: {resources: ["*"]}
      mutate:
        - setIfAbsent: {path: $.object.spec.copied, valueFrom: {path: $.object.spec.defaults.a}}
        - forEach: "$.object.spec.items[*]"
          mutate:
            - setIfAbsent: {path: $.copy, valueFrom: {path: $.k}}
            - setIfAbsent: {path: $.flag, value: true}
              when: [{path: $.copy, exists: true}]
    - name: selected
      match:
        resources: ["*"]
        objectSelector: {matchExpressions: [{key: tier, operator: Exists}]}
      when: [{path: $.object.spec.copied, exists: true}]
      mutate:
        - mergeIfAbsent: {path: $.object.metadata.annotations, value: {selected: "yes"}}
    - name: defaults
      match: {resources: ["*"]}
      mutate:
        - mergeIfAbsent: {path: $.object.spec.defaults, value: {a: 1, b: {c: 2}}}
    - name: inject
      match: {resources: ["*"]}
      mutate:
        - injectIfMissing: {path: $.object.spec.items, key: k, value: {k: injected}}
    - name: label
      match: {resources: ["*"]}
      when: [{path: "$.object.metadata.annotations.selected", absent: true}]
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.tier, value: web}
"#;
        compile_text("dependent.yaml", text)
    })
}

fn request(object: Value, operation: Operation) -> Request {
    let options = ObjectOptions {
        operation,
        ..ObjectOptions::default()
    };
    request_for_object(object, &options).unwrap()
}

fn with_object(mut request: Request, object: &Value) -> Request {
    request.object = Some(Embedded::Raw(
        serde_json::value::to_raw_value(object).unwrap(),
    ));
    request
}

/// Mutating the output again gives no patch, and the patch turns the input
/// into the output.
fn check_idempotent(plan: &Plan, name: &str, input: &Request) -> Result<(), TestCaseError> {
    let verdict = match evaluate(plan, input, Mode::Mutate, None) {
        Ok(verdict) => verdict,
        Err(error) => return Err(TestCaseError::fail(format!("{name}: {error}"))),
    };
    let Some(patch) = &verdict.patch else {
        prop_assert!(verdict.mutated.is_none());
        return Ok(());
    };
    let original: Value = input.object.as_ref().unwrap().to_value().unwrap();
    let mutated = verdict.mutated.clone().unwrap();
    let mut patched = original.clone();
    let patch = patch
        .to_json_patch()
        .map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
    json_patch::patch(&mut patched, &patch)
        .map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
    prop_assert_eq!(
        &patched,
        &mutated,
        "{}: patch does not reproduce the output",
        name
    );
    let again = evaluate(
        plan,
        &with_object(input.clone(), &mutated),
        Mode::Mutate,
        None,
    )
    .map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
    prop_assert!(
        again.patch.is_none(),
        "{}: second run patched {:?}",
        name,
        again.patch
    );
    Ok(())
}

fn arb_json(depth: u32) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[a-z0-9/~.:@ -]{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("500m"),
            Just("1Gi"),
            Just("latest"),
            Just("nginx:latest"),
            Just("true")
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(depth, 64, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    "[a-z]{1,8}".boxed(),
                    prop_oneof![
                        Just("metadata"),
                        Just("labels"),
                        Just("spec"),
                        Just("containers"),
                        Just("items"),
                        Just("securityContext"),
                        Just("resources"),
                        Just("image"),
                        Just("name"),
                        Just("ports"),
                        Just("hostPort"),
                        Just("volumes"),
                        Just("k"),
                    ]
                    .prop_map(str::to_owned)
                    .boxed(),
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arb_quantity() -> impl Strategy<Value = Value> {
    prop_oneof![
        (1u32..4000).prop_map(|n| json!(format!("{n}m"))),
        (1u32..64).prop_map(|n| json!(format!("{n}Gi"))),
        (1u32..2048).prop_map(|n| json!(format!("{n}Mi"))),
        (1u32..8).prop_map(|n| json!(n)),
    ]
}

fn arb_resources() -> impl Strategy<Value = Value> {
    let pair = || {
        (
            prop::option::of(arb_quantity()),
            prop::option::of(arb_quantity()),
        )
    };
    (prop::option::of(pair()), prop::option::of(pair())).prop_map(|(limits, requests)| {
        let mut resources = serde_json::Map::new();
        for (name, part) in [("limits", limits), ("requests", requests)] {
            if let Some((cpu, memory)) = part {
                let mut map = serde_json::Map::new();
                if let Some(cpu) = cpu {
                    map.insert("cpu".into(), cpu);
                }
                if let Some(memory) = memory {
                    map.insert("memory".into(), memory);
                }
                resources.insert(name.into(), Value::Object(map));
            }
        }
        Value::Object(resources)
    })
}

fn arb_container() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            Just("app"),
            Just("log-shipper"),
            Just("sidecar"),
            "[a-z]{1,6}".prop_map(|s| Box::leak(s.into_boxed_str()) as &str)
        ],
        prop_oneof![
            Just("nginx"),
            Just("nginx:latest"),
            Just("registry.example/app:1.0"),
            Just("ghcr.io/o/app@sha256:abc"),
            Just("localhost:5000/x:2")
        ],
        prop::option::of(arb_resources()),
        prop::option::of((any::<bool>(), prop::option::of(any::<bool>()))),
        prop::collection::vec((1u16..65535, prop::option::of(0u16..65535)), 0..3),
    )
        .prop_map(|(name, image, resources, security, ports)| {
            let mut container = json!({"name": name, "image": image});
            if let Some(resources) = resources {
                container["resources"] = resources;
            }
            if let Some((privileged, escalation)) = security {
                container["securityContext"] = json!({"privileged": privileged});
                if let Some(escalation) = escalation {
                    container["securityContext"]["allowPrivilegeEscalation"] = json!(escalation);
                }
            }
            if !ports.is_empty() {
                container["ports"] = ports
                    .into_iter()
                    .map(|(port, host)| match host {
                        Some(host) => json!({"containerPort": port, "hostPort": host}),
                        None => json!({"containerPort": port}),
                    })
                    .collect();
            }
            container
        })
}

fn arb_pod() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(arb_container(), 0..4),
        prop::collection::vec(arb_container(), 0..2),
        prop::collection::btree_map(
            prop_oneof![
                Just("team"),
                Just("app"),
                Just("kadmit.dev/inject-log-shipper")
            ],
            prop_oneof![Just("true"), Just("payments"), Just("unassigned")],
            0..3,
        ),
        prop::option::of(any::<bool>()),
        any::<bool>(),
        prop::option::of(prop::collection::vec(
            prop_oneof![Just("app-logs"), Just("data")],
            0..3,
        )),
    )
        .prop_map(
            |(containers, init, labels, run_as_non_root, host_network, volumes)| {
                let mut pod = json!({
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "p", "labels": labels},
                    "spec": {"containers": containers, "hostNetwork": host_network},
                });
                if !init.is_empty() {
                    pod["spec"]["initContainers"] = json!(init);
                }
                if let Some(flag) = run_as_non_root {
                    pod["spec"]["securityContext"] = json!({"runAsNonRoot": flag});
                }
                if let Some(volumes) = volumes {
                    pod["spec"]["volumes"] = volumes
                        .into_iter()
                        .map(|name| json!({"name": name, "emptyDir": {}}))
                        .collect();
                }
                pod
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn bundled_rules_mutate_generated_pods_idempotently(pod in arb_pod()) {
        for (name, plan) in bundled_plans() {
            let input = request(pod.clone(), Operation::Create);
            check_idempotent(plan, name, &input)?;
            prop_assert!(evaluate(plan, &input, Mode::Validate, None).is_ok());
        }
    }

    #[test]
    fn bundled_rules_handle_arbitrary_objects(spec in arb_json(4), labels in arb_json(2), kind in prop_oneof![Just("Pod"), Just("Deployment"), Just("CronJob"), Just("Service"), Just("ConfigMap")]) {
        let api_version = match kind { "Deployment" => "apps/v1", "CronJob" => "batch/v1", _ => "v1" };
        let object = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "labels": labels}, "spec": spec});
        for (name, plan) in bundled_plans() {
            for operation in [Operation::Create, Operation::Update, Operation::Delete] {
                let mut input = request(object.clone(), operation);
                if operation == Operation::Update {
                    input.old_object = input.object.clone();
                }
                check_idempotent(plan, name, &input)?;
                let _ = evaluate(plan, &input, Mode::Validate, None);
            }
        }
    }

    #[test]
    fn every_mutation_kind_is_idempotent_on_arbitrary_objects(object in arb_json(5)) {
        let object = match object {
            Value::Object(mut map) => {
                map.insert("apiVersion".into(), json!("v1"));
                map.insert("kind".into(), json!("ConfigMap"));
                Value::Object(map)
            }
            other => json!({"apiVersion": "v1", "kind": "ConfigMap", "spec": {"items": [other]}}),
        };
        check_idempotent(mutation_kinds_plan(), "kinds", &request(object, Operation::Create))?;
    }

    #[test]
    fn rules_reading_what_later_rules_write_reach_the_fixpoint(spec in arb_json(4), labels in arb_json(2), annotations in arb_json(1)) {
        let object = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "x", "labels": labels, "annotations": annotations},
            "spec": spec,
        });
        check_idempotent(dependent_rules_plan(), "dependent", &request(object, Operation::Create))?;
    }
}
