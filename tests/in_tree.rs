//! The in-tree policies `kadmit policies` writes decide as kadmit does.
//!
//! Every rule of the bundled rules and of the CEL example that translates
//! is checked on every real API server review in
//! `tests/fixtures/admission-reviews/`, every case of the suites in
//! `tests/suites/`, and every Pod of Kubernetes' Pod Security Admission
//! fixtures (beside the repository, see `tests/conformance`), as a Pod and
//! in each workload kind, with the CEL crate kadmit uses:
//!
//! - a ValidatingAdmissionPolicy's match conditions and validations are
//!   evaluated, and the policy must find a violation exactly when kadmit's
//!   rule does;
//! - the MutatingAdmissionPolicies are applied as the API server applies
//!   them (match conditions, then each `JSONPatch` mutation on the object
//!   the last one left, every policy once more when one changed the
//!   object), in kadmit's order and in the reverse order, and must leave
//!   the object kadmit's patch makes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use kadmit::cel::Expression;
use kadmit::eval::Outcome;
use kadmit::eval::budget::{Budget, Limits};
use kadmit::in_tree::{self, GENERATED_BOUNDS, Policies};
use kadmit::plan::{Mode, Plan, RequestKey, compile};
use kadmit::review::Request;
use serde_json::{Value, json};

use crate::engine::evaluate;

fn plan_of(dir: &str) -> Plan {
    let loaded = kadmit::rules::load_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join(dir))
        .expect("rules directory");
    compile(&loaded).unwrap_or_else(|d| panic!("{d}"))
}

/// Every request to compare on, with a label.
fn inputs() -> Vec<(String, Request)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let fixtures = root.join("tests/fixtures/admission-reviews");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&fixtures)
        .expect("fixtures")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    for path in files {
        let body = std::fs::read(&path).expect("fixture");
        let review = kadmit::review::decode(&body).expect("a review");
        out.push((path.display().to_string(), review.request));
    }
    let mut suites: Vec<PathBuf> = std::fs::read_dir(root.join("tests/suites"))
        .expect("suites")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.to_string_lossy().ends_with(".suite.yaml"))
        .collect();
    suites.sort();
    for path in suites {
        let suite = kadmit::suite::load(&path).unwrap_or_else(|d| panic!("{d}"));
        for case in suite.cases {
            out.push((format!("{}::{}", suite.name, case.name), case.request));
        }
    }
    if let Some(dir) = crate::conformance::fixtures_dir() {
        for fixture in crate::conformance::fixtures(&dir) {
            out.push((
                fixture.label(),
                crate::conformance::create(fixture.pod.clone()),
            ));
            // One workload kind per place a pod spec can be.
            for (kind, workload) in crate::conformance::workloads(&fixture.pod)
                .into_iter()
                .filter(|(kind, _)| {
                    matches!(kind.as_str(), "Deployment" | "CronJob" | "PodTemplate")
                })
            {
                out.push((
                    format!("{} as {kind}", fixture.label()),
                    crate::conformance::create(workload),
                ));
            }
        }
    }
    out
}

/// The request as a policy's `request` variable sees it.
fn request_value(request: &Request) -> Value {
    let mut value = serde_json::to_value(request).expect("request");
    if let Some(map) = value.as_object_mut() {
        map.remove("object");
        map.remove("oldObject");
    }
    value
}

fn document(embedded: Option<&kadmit::review::Embedded>) -> Value {
    embedded
        .map(|e| e.to_value().expect("an object"))
        .unwrap_or(Value::Null)
}

/// Compiled expressions, and their results on the input at hand (rules of
/// one set share their set's guards).
#[derive(Default)]
pub(crate) struct Evaluator {
    compiled: HashMap<String, Result<Expression, String>>,
    results: HashMap<String, Result<bool, String>>,
    /// Per rule, how many inputs it was compared on and how many of them
    /// kadmit found a violation in, over every [`compare_with`] call.
    pub(crate) tally: HashMap<String, (usize, usize)>,
}

impl Evaluator {
    /// Whether `source` holds with these variables; an error is a failure
    /// of the test (the generated expressions guard every step).
    fn holds(
        &mut self,
        source: &str,
        object: &Value,
        old: &Value,
        request: &Value,
    ) -> Result<bool, String> {
        if let Some(result) = self.results.get(source) {
            return result.clone();
        }
        let expression = self.compiled.entry(source.to_owned()).or_insert_with(|| {
            Expression::compile_within(source, &[], GENERATED_BOUNDS)
                .map_err(|e| format!("does not compile: {e}"))
        });
        let result = match expression {
            Err(e) => Err(e.clone()),
            Ok(expression) => {
                let budget = Budget::new(Limits {
                    max_steps: u64::MAX / 4,
                    ..Limits::DEFAULT
                });
                expression
                    .holds(
                        |variable| match variable {
                            kadmit::cel::Variable::Object => Some(object),
                            kadmit::cel::Variable::OldObject => Some(old),
                            kadmit::cel::Variable::Request => Some(request),
                            _ => None,
                        },
                        &budget,
                    )
                    .map_err(|failure| format!("{failure:?}"))
            }
        };
        self.results.insert(source.to_owned(), result.clone());
        result
    }
}

/// Compares every translated rule of `plan` on every input; returns how
/// many (rule, input) pairs were compared, in how many of them kadmit found
/// a violation, and every disagreement.
fn compare(
    plan: &Plan,
    policies: &Policies,
    inputs: &[(String, Request)],
) -> (usize, usize, Vec<String>) {
    compare_with(&mut Evaluator::default(), plan, policies, inputs)
}

/// [`compare`] with `evaluator`'s compiled expressions (which it keeps for
/// the next call), adding to its tally.
pub(crate) fn compare_with(
    evaluator: &mut Evaluator,
    plan: &Plan,
    policies: &Policies,
    inputs: &[(String, Request)],
) -> (usize, usize, Vec<String>) {
    let mut compared = 0;
    let mut violations = 0;
    let mut disagreements = Vec::new();
    for (label, request) in inputs {
        evaluator.results.clear();
        let object = document(request.object.as_ref());
        let old = document(request.old_object.as_ref());
        let request_doc = request_value(request);
        let verdict = evaluate(plan, request, Mode::Validate, None).expect("a verdict");
        for policy in &policies.policies {
            let Some(rule) = plan
                .rules()
                .iter()
                .find(|r| r.rule_set_name == policy.rule_set && r.name == policy.rule)
            else {
                continue;
            };
            if !rule.matcher.match_resource(&RequestKey::of(request))
                || rule.matcher.match_objects(&object, &old).is_err()
            {
                continue;
            }
            let Some(validating) = &policy.validating else {
                continue;
            };
            compared += 1;
            let kadmit_violated = verdict.findings.iter().any(|f| {
                f.rule_set == policy.rule_set
                    && f.rule == policy.rule
                    && f.outcome != Outcome::Mutated
            });
            violations += usize::from(kadmit_violated);
            let tally = evaluator.tally.entry(policy.rule.to_string()).or_default();
            tally.0 += 1;
            tally.1 += usize::from(kadmit_violated);
            let spec = validating.policy.spec.as_ref().expect("spec");
            let mut policy_violated = Ok(true);
            for condition in spec.match_conditions.iter().flatten() {
                match evaluator.holds(&condition.expression, &object, &old, &request_doc) {
                    Ok(true) => {}
                    Ok(false) => {
                        policy_violated = Ok(false);
                        break;
                    }
                    Err(e) => {
                        policy_violated = Err(format!("match condition {}: {e}", condition.name));
                        break;
                    }
                }
            }
            if policy_violated == Ok(true) {
                policy_violated = Ok(false);
                for validation in spec.validations.iter().flatten() {
                    match evaluator.holds(&validation.expression, &object, &old, &request_doc) {
                        Ok(true) => {}
                        Ok(false) => policy_violated = Ok(true),
                        Err(e) => policy_violated = Err(format!("validation: {e}")),
                    }
                }
            }
            if policy_violated != Ok(kadmit_violated) {
                disagreements.push(format!(
                    "{label}: {}/{}: kadmit violated={kadmit_violated}, policy {:?}",
                    policy.rule_set, policy.rule, policy_violated
                ));
            }
        }
    }
    (compared, violations, disagreements)
}

/// What applying the mutating policies gives, as the API server applies
/// them.
pub(crate) struct Mutator<'p> {
    plan: &'p Plan,
    policies: Vec<&'p in_tree::Policy>,
    compiled: HashMap<String, Result<Expression, String>>,
    /// Leave out each policy's last mutation (to show the comparison can
    /// fail).
    pub(crate) drop_last: bool,
}

impl<'p> Mutator<'p> {
    pub(crate) fn new(plan: &'p Plan, policies: &'p Policies) -> Self {
        Mutator {
            plan,
            policies: policies
                .policies
                .iter()
                .filter(|p| p.mutating.is_some())
                .collect(),
            compiled: HashMap::new(),
            drop_last: false,
        }
    }

    fn evaluate(
        &mut self,
        source: &str,
        patch: bool,
        object: &Value,
        old: &Value,
        request: &Value,
    ) -> Result<Value, String> {
        let expression = self.compiled.entry(source.to_owned()).or_insert_with(|| {
            let compiled = if patch {
                Expression::compile_patch(source, GENERATED_BOUNDS)
            } else {
                Expression::compile_within(source, &[], GENERATED_BOUNDS)
            };
            compiled.map_err(|e| format!("does not compile: {e}"))
        });
        let expression = expression.as_ref().map_err(Clone::clone)?;
        let budget = Budget::new(Limits {
            max_steps: u64::MAX / 4,
            ..Limits::DEFAULT
        });
        let value_of = |variable| match variable {
            kadmit::cel::Variable::Object => Some(object),
            kadmit::cel::Variable::OldObject => Some(old),
            kadmit::cel::Variable::Request => Some(request),
            _ => None,
        };
        if patch {
            expression
                .patch_operations(value_of, &budget)
                .map_err(|f| format!("{f:?}"))
        } else {
            expression
                .holds(value_of, &budget)
                .map(Value::Bool)
                .map_err(|f| format!("{f:?}"))
        }
    }

    /// The object after the policies, in `order`, and once more each when
    /// one changed it; an error when yet another round would change it.
    fn apply(
        &mut self,
        request: &Request,
        object: &Value,
        old: &Value,
        request_doc: &Value,
        reversed: bool,
    ) -> Result<Value, String> {
        let mut order = self.policies.clone();
        if reversed {
            order.reverse();
        }
        let mut current = object.clone();
        // The first invocation, the reinvocation, and one more that must
        // change nothing (the mutations are idempotent).
        for invocation in 0..3 {
            let before = current.clone();
            for policy in &order {
                let rule = self
                    .plan
                    .rules()
                    .iter()
                    .find(|r| r.rule_set_name == policy.rule_set && r.name == policy.rule)
                    .expect("the policy's rule");
                let Some(mutating) = &policy.mutating else {
                    continue;
                };
                let spec = &mutating.policy.spec;
                let operation = request.operation.as_str();
                let operations_match = spec
                    .match_constraints
                    .resource_rules
                    .iter()
                    .flatten()
                    .any(|r| r.operations.iter().flatten().any(|o| o == operation));
                if !operations_match
                    || !rule.matcher.match_resource(&RequestKey::of(request))
                    || rule.matcher.match_objects(&current, old).is_err()
                {
                    continue;
                }
                let mut applies = true;
                for condition in &spec.match_conditions {
                    let holds = self
                        .evaluate(&condition.expression, false, &current, old, request_doc)
                        .map_err(|e| {
                            format!("{}: match condition {}: {e}", policy.rule, condition.name)
                        })?;
                    if holds == Value::Bool(false) {
                        applies = false;
                        break;
                    }
                }
                if !applies {
                    continue;
                }
                let mut mutations: Vec<&str> = spec
                    .mutations
                    .iter()
                    .map(|m| m.json_patch.expression.as_str())
                    .collect();
                if self.drop_last {
                    mutations.pop();
                }
                for source in mutations {
                    let operations = self
                        .evaluate(source, true, &current, old, request_doc)
                        .map_err(|e| format!("{}: mutation: {e}", policy.rule))?;
                    let patch: json_patch::Patch = serde_json::from_value(operations.clone())
                        .map_err(|e| {
                            format!("{}: not a JSON Patch ({e}): {operations}", policy.rule)
                        })?;
                    json_patch::patch(&mut current, &patch)
                        .map_err(|e| format!("{}: {e}: {operations}", policy.rule))?;
                }
            }
            if current == before {
                return Ok(current);
            }
            if invocation == 2 {
                return Err(format!(
                    "a third invocation changed the object again: {}",
                    excerpt(&current)
                ));
            }
        }
        Ok(current)
    }
}

/// Applies every mutating policy to every input in both orders; returns
/// how many (input, order) pairs were compared, in how many kadmit changed
/// the object, and every disagreement.
pub(crate) fn compare_mutations(
    plan: &Plan,
    policies: &Policies,
    inputs: &[(String, Request)],
    drop_last: bool,
) -> (usize, usize, Vec<String>) {
    let mut mutator = Mutator::new(plan, policies);
    mutator.drop_last = drop_last;
    compare_mutations_with(&mut mutator, inputs)
}

/// [`compare_mutations`] with `mutator`'s plan and policies (whose compiled
/// expressions it keeps for the next call).
pub(crate) fn compare_mutations_with(
    mutator: &mut Mutator<'_>,
    inputs: &[(String, Request)],
) -> (usize, usize, Vec<String>) {
    let plan = mutator.plan;
    let (mut compared, mut changed, mut disagreements) = (0, 0, Vec::new());
    for (label, request) in inputs {
        let object = document(request.object.as_ref());
        if !object.is_object() {
            continue;
        }
        let old = document(request.old_object.as_ref());
        let request_doc = request_value(request);
        let verdict = evaluate(plan, request, Mode::Mutate, None).expect("a verdict");
        let mut expected = object.clone();
        if let Some(patch) = &verdict.patch {
            json_patch::patch(
                &mut expected,
                &patch.to_json_patch().expect("kadmit's patch reads back"),
            )
            .expect("kadmit's patch applies");
        }
        for reversed in [false, true] {
            compared += 1;
            changed += usize::from(expected != object);
            match mutator.apply(request, &object, &old, &request_doc, reversed) {
                Ok(result) if result == expected => {}
                Ok(result) => disagreements.push(format!(
                    "{label} (reversed: {reversed}): kadmit gives\n{}\nthe policies give\n{}",
                    excerpt(&expected),
                    excerpt(&result)
                )),
                Err(e) => disagreements.push(format!("{label} (reversed: {reversed}): {e}")),
            }
        }
    }
    (compared, changed, disagreements)
}

fn excerpt(value: &Value) -> String {
    let text = value.to_string();
    text.chars().take(1500).collect()
}

#[test]
fn the_bundled_mutations_as_in_tree_policies_leave_the_object_kadmit_does() {
    let inputs = inputs();
    let plan = plan_of("rules");
    let policies = in_tree::policies(&plan);
    let mutating: Vec<&str> = policies
        .policies
        .iter()
        .filter(|p| p.mutating.is_some())
        .map(|p| &*p.rule)
        .collect();
    assert_eq!(
        mutating,
        [
            "default-security-context",
            "default-resources",
            "inject-sidecar",
            "default-team-label"
        ],
        "every bundled mutating rule translates: {:?}",
        policies.untranslated
    );
    let (compared, changed, disagreements) = compare_mutations(&plan, &policies, &inputs, false);
    eprintln!("rules: {compared} mutation comparisons, kadmit changed the object in {changed}");
    assert!(
        compared >= 20 && changed >= 10 && compared - changed >= 5,
        "{compared} comparisons, {changed} of them changed"
    );
    assert!(
        disagreements.is_empty(),
        "{} disagreements of {compared}:\n{}",
        disagreements.len(),
        disagreements[..disagreements.len().min(5)].join("\n")
    );
    // The comparison sees a missing edit.
    let (_, _, without_last) = compare_mutations(&plan, &policies, &inputs, true);
    eprintln!(
        "without each policy's last mutation: {} disagreements",
        without_last.len()
    );
    assert!(without_last.len() >= 10, "{}", without_last.len());
}

/// Mutations of every kind on objects of unusual shapes: nulls where maps
/// are written through, values of another type, wildcards over maps, keys
/// that need escaping, list positions in and after the matched path.
pub(crate) const EDGE_RULES: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: edges}
spec:
  rules:
    - name: labels
      match: {resources: [configmaps, pods]}
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.team, value: platform}
        - setIfAbsent: {path: $.object.metadata.labels.named, valueFrom: {path: $.object.metadata.name}}
        - set: {path: "$.object.metadata.annotations['example.com/a~b']", value: "1"}
          when:
            - {path: $.object.metadata.labels.team, equals: platform}
    - name: data
      match: {resources: [configmaps]}
      mutate:
        - setIfAbsent: {path: "$.object.data[*].seen", value: true}
        - mergeIfAbsent: {path: $.object.extra.merged, value: {a: 1, b: {c: 2.5, d: [1, "x"]}, n: null}}
        - injectIfMissing: {path: $.object.extra.list, key: name, value: {name: added, v: 1}}
        - setIfAbsent: {path: "$.object.items[-1].last", value: {k: v}}
        - set: {path: "$.object.items[0]", value: first}
    - name: containers
      match: {resources: [pods]}
      mutate:
        - forEach: "$.podSpec['containers','initContainers'][*]"
          mutate:
            - setIfAbsent: {path: $.resources.requests.cpu, valueFrom: {path: $.resources.limits.cpu}}
            - set: {path: "$.env[0].value", value: replaced}
              when:
                - {path: $.name, startsWith: [app]}
            - forEach: "$.ports[*]"
              mutate:
                - setIfAbsent: {path: $.protocol, value: TCP}
"#;

fn edge_inputs() -> Vec<(String, Request)> {
    let objects = [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "nulls", "labels": null, "annotations": null},
               "data": {"a": null, "b": {"seen": false}, "c": "text", "d/e~f": {}}, "extra": null, "items": null}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shapes", "labels": "not a map", "annotations": {"example.com/a~b": "1"}},
               "data": ["a", "list"], "extra": {"merged": {"a": 7, "b": {"c": null}, "n": 1}, "list": [{"name": "added", "v": 9}, 3]},
               "items": [{"x": 1}, null, {"last": 0}]}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "more", "labels": {"team": "other"}},
               "extra": {"merged": "a string", "list": "not a list"}, "items": [null]}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "lists"},
               "extra": {"merged": {"b": "x"}, "list": [{"name": "other"}, {"v": 1}]}, "items": [[1], {"a": 1}]}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod"},
               "spec": {"containers": [
                   {"name": "app", "resources": {"limits": {"cpu": "1"}}, "env": [{"name": "A", "value": "a"}], "ports": [{"containerPort": 80}, null, {"protocol": "UDP"}]},
                   null,
                   {"name": "side", "resources": null, "env": [], "ports": "none"},
                   {"name": "app2", "resources": {"requests": null, "limits": {"cpu": 2}}, "env": [null]}],
                   "initContainers": {"not": "a list"}}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod2"}, "spec": null}),
    ];
    objects
        .into_iter()
        .map(|object| {
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or("?")
                .to_owned();
            (name, crate::conformance::create(object))
        })
        .collect()
}

/// The plan of a rule file and its policies, every rule of it translated.
fn all_translated(name: &str, rules: &str) -> (Plan, Policies) {
    let loaded = kadmit::rules::load_str(name, rules);
    let plan = compile(&loaded).unwrap_or_else(|d| panic!("{d}"));
    let policies = in_tree::policies(&plan);
    assert!(
        policies.untranslated.is_empty(),
        "{:?}",
        policies.untranslated
    );
    (plan, policies)
}

#[test]
fn mutations_on_unusual_shapes_as_in_tree_policies_leave_the_object_kadmit_does() {
    let (plan, policies) = all_translated("edges.yaml", EDGE_RULES);
    let inputs = edge_inputs();
    let (compared, changed, disagreements) = compare_mutations(&plan, &policies, &inputs, false);
    assert_eq!(compared, 2 * inputs.len());
    assert!(changed >= compared - 2, "{changed} of {compared} changed");
    assert!(
        disagreements.is_empty(),
        "{} disagreements of {compared}:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
}

#[test]
fn the_bundled_rules_as_in_tree_policies_decide_as_kadmit_does() {
    let inputs = inputs();
    for dir in ["rules", "docs/examples/cel"] {
        let plan = plan_of(dir);
        let policies = in_tree::policies(&plan);
        assert!(
            !policies.policies.is_empty(),
            "{dir}: nothing translated: {:?}",
            policies.untranslated
        );
        let (compared, violations, disagreements) = compare(&plan, &policies, &inputs);
        eprintln!("{dir}: {compared} comparisons, {violations} of them violations");
        // Both answers must occur, or agreeing would prove little.
        assert!(
            compared >= 20 && violations >= 5 && compared - violations >= 5,
            "{dir}: {compared} comparisons, {violations} of them violations"
        );
        assert!(
            disagreements.is_empty(),
            "{dir}: {} disagreements of {compared}:\n{}",
            disagreements.len(),
            disagreements[..disagreements.len().min(20)].join("\n")
        );
    }
}

/// CEL that a translation pasting it into larger CEL could misread: line
/// comments (which once swallowed the parenthesis closing them, and with a
/// crafted string turned a rule into one that admits everything), and
/// bindings inside nested `forEach` entries.
const COMMENTED_RULES: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: commented}
spec:
  rules:
    - name: no-host-network
      match: {resources: [pods]}
      deny:
        - all:
            - cel: "has(object.spec.hostNetwork) && object.spec.hostNetwork // host networking"
            - cel: "'''\n) && false && ('' == '' // ''' != ''\n"
          message: host network
    - name: app-port
      match: {resources: [pods]}
      deny:
        - forEach: "$.object.spec.containers[*]"
          as: container
          deny:
            - forEach: "$.ports[*]"
              deny:
                - cel: "has(element.containerPort) && container.name == 'app' // the app's ports"
                  message: app port
"#;

#[test]
fn rule_cel_with_comments_and_bindings_as_in_tree_policies_decides_as_kadmit_does() {
    let (plan, policies) = all_translated("commented.yaml", COMMENTED_RULES);
    let pod = |name: &str, spec: Value| {
        (
            name.to_owned(),
            crate::conformance::create(
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}),
            ),
        )
    };
    let inputs = [
        pod(
            "host",
            json!({"hostNetwork": true, "containers": [{"name": "app"}]}),
        ),
        pod(
            "plain",
            json!({"hostNetwork": false, "containers": [{"name": "web"}]}),
        ),
        pod(
            "app",
            json!({"containers": [{"name": "app", "ports": [{"containerPort": 80}]}]}),
        ),
        pod(
            "web",
            json!({"containers": [{"name": "web", "ports": [{"containerPort": 80}]}, {"name": "app"}]}),
        ),
    ];
    let (compared, violations, disagreements) = compare(&plan, &policies, &inputs);
    assert_eq!(compared, 2 * inputs.len());
    assert_eq!(violations, 2, "host and app each break one rule");
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

/// Path-to-path equality compares numbers by value, as kadmit does: an
/// `int` and a `double` of one value are equal (an object's `number` field
/// is a double to the API server's CEL, an `integer` one an int), in lists
/// too; a string and a number of one value are not.
const NUMBER_RULES: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: numbers}
spec:
  rules:
    - name: equal
      match: {resources: [configmaps]}
      deny:
        - {path: $.object.data.a, equals: {path: $.object.data.b}, message: equal}
    - name: not-equal
      match: {resources: [configmaps]}
      deny:
        - {path: $.object.data.a, notEquals: {path: $.object.data.b}, message: different}
"#;

#[test]
fn numbers_of_different_types_compare_by_value_as_kadmit_compares_them() {
    let (plan, policies) = all_translated("numbers.yaml", NUMBER_RULES);
    let inputs: Vec<(String, Request)> = [
        json!({"a": 1, "b": 1.0}),
        json!({"a": -2.0, "b": -2}),
        json!({"a": 1, "b": 2.0}),
        json!({"a": u64::MAX, "b": 18_446_744_073_709_551_615.0}),
        json!({"a": 9_223_372_036_854_775_808u64, "b": 9_223_372_036_854_775_807i64}),
        json!({"a": [1, 2], "b": [1.0, 2.0]}),
        json!({"a": {"x": 0}, "b": {"x": 0.0}}),
        json!({"a": "1", "b": 1}),
        json!({"a": 1.5, "b": 1.5}),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, data)| {
        (
            format!("{i}: {data}"),
            crate::conformance::create(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("n{i}")}, "data": data,
            })),
        )
    })
    .collect();
    let (compared, violations, disagreements) = compare(&plan, &policies, &inputs);
    assert_eq!(compared, 2 * inputs.len());
    // Each input breaks exactly one of the two rules.
    assert_eq!(violations, inputs.len());
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

/// `kadmit policies --output-dir` removes the `*.kadmit.dev.yaml` files it
/// did not write this time (a rule that no longer translates, or is gone,
/// would otherwise go on being enforced from the API server's
/// `staticManifestsDir`), says so, and leaves every other file alone.
#[test]
fn output_dir_keeps_only_the_policies_of_this_run() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    let rule = |name: &str, pattern: &str| {
        format!(
            "    - name: {name}\n      match: {{resources: [configmaps]}}\n      deny:\n        - {{path: $.object.metadata.name, matches: '{pattern}', message: m}}\n"
        )
    };
    let write_rules = |rules_text: &str| {
        std::fs::write(
            rules.join("rules.yaml"),
            format!(
                "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: t}}\nspec:\n  rules:\n{rules_text}"
            ),
        )
        .unwrap();
    };
    let out = dir.path().join("static");
    let run = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_kadmit"))
            .arg("policies")
            .arg(&rules)
            .arg("--partial")
            .arg("--output-dir")
            .arg(&out)
            .output()
            .expect("kadmit runs")
    };
    write_rules(
        &[
            rule("kept", "^a"),
            rule("changed", "^b"),
            rule("deleted", "^c"),
        ]
        .concat(),
    );
    let first = run();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let names = |dir: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names(&out),
        [
            "t.changed.kadmit.dev.yaml",
            "t.deleted.kadmit.dev.yaml",
            "t.kept.kadmit.dev.yaml"
        ]
    );
    // Files of others, and a directory of the pattern's name, stay.
    std::fs::write(out.join("other-policy.yaml"), "kind: x\n").unwrap();
    std::fs::write(out.join("notes.kadmit.dev.yaml.bak"), "x\n").unwrap();
    std::fs::create_dir(out.join("dir.kadmit.dev.yaml")).unwrap();
    // `changed` no longer translates (`\b` reads otherwise in RE2),
    // `deleted` is gone.
    write_rules(&[rule("kept", "^a"), rule("changed", "\\bb")].concat());
    let second = run();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    assert_eq!(
        names(&out),
        [
            "dir.kadmit.dev.yaml",
            "notes.kadmit.dev.yaml.bak",
            "other-policy.yaml",
            "t.kept.kadmit.dev.yaml"
        ]
    );
    for gone in ["t.changed.kadmit.dev.yaml", "t.deleted.kadmit.dev.yaml"] {
        assert!(
            stderr.contains(&format!("removed {}", out.join(gone).display())),
            "{gone}: {stderr}"
        );
    }
    assert!(stderr.contains("t/changed: not translated"), "{stderr}");
}

const CHAIN_RULES: &str = "apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: chain}
spec:
  rules:
    - name: r1
      match: {resources: [configmaps]}
      when: [{path: $.object.metadata.labels.b, exists: true}]
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.a, value: \"set\"}
    - name: r2
      match: {resources: [configmaps]}
      when: [{path: $.object.metadata.labels.c, exists: true}]
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.b, value: \"set\"}
    - name: r3
      match: {resources: [configmaps]}
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.c, value: \"set\"}
";

const ORDER_RULES: &str = "apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: t}
spec:
  rules:
    - name: zz-default-team
      match: {resources: [configmaps]}
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.team, value: platform}
    - name: aa-fallback-team
      match: {resources: [configmaps]}
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.team, value: unassigned}
";

/// The notes on mutating policies the API server's order and single
/// reinvocation can change (chains, order-dependent writes).
fn order_notes(policies: &Policies) -> Vec<String> {
    policies
        .policies
        .iter()
        .flat_map(|policy| {
            policy
                .differences
                .iter()
                .filter(|d| {
                    d.contains("a chain of three mutating rules")
                        || d.contains("depends on which runs first")
                })
                .map(move |d| format!("{}/{}: {d}", policy.rule_set, policy.rule))
        })
        .collect()
}

/// A chain of three rules and two rules whose order decides the value are
/// named on stderr and in the output's header; the command still succeeds.
#[test]
fn chains_and_order_dependent_writes_are_noted_on_stderr_and_in_the_header() {
    for (rules_text, rule, said) in [
        (
            CHAIN_RULES,
            "chain/r1",
            "a chain of three mutating rules: it reads $.object.metadata.labels.b where \
             chain/r2 writes $.object.metadata.labels.b, and chain/r2 reads \
             $.object.metadata.labels.c where chain/r3 writes $.object.metadata.labels.c",
        ),
        (
            ORDER_RULES,
            "t/aa-fallback-team",
            "it writes $.object.metadata.labels.team (setIfAbsent \"unassigned\") and \
             t/zz-default-team writes $.object.metadata.labels.team (setIfAbsent \"platform\"), \
             at overlapping locations, with a result that depends on which runs first",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rules.yaml"), rules_text).unwrap();
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_kadmit"))
            .arg("policies")
            .arg(dir.path())
            .output()
            .expect("kadmit runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(
            lines[0].starts_with(&format!(
                "{rule}: translated, but differs from the webhook: {said}"
            )),
            "{stderr}"
        );
        assert!(
            stdout.contains(&format!(
                "# translated, but differs from the webhook: {rule}: {said}"
            )),
            "{stdout}"
        );
    }
}

/// A label set, then an annotation when it is set (as the bundled
/// `ownership` rules do, in two rules): one reinvocation settles it.
#[test]
fn a_chain_of_two_is_not_noted() {
    let (_, policies) = all_translated(
        "two.yaml",
        "apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: two}
spec:
  rules:
    - name: note-default
      match: {resources: [pods]}
      when: [{path: $.object.metadata.labels.team, equals: unassigned}]
      mutate:
        - setIfAbsent: {path: \"$.object.metadata.annotations['kadmit.dev/team-defaulted']\", value: \"true\"}
    - name: default-team
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: $.object.metadata.labels.team, value: unassigned}
",
    );
    assert_eq!(order_notes(&policies), Vec::<String>::new());
}

/// The bundled rules have dependencies of two (the defaults that go
/// through `$.podSpec.containers[*]` read what the log shipper injects),
/// but no chain of three and no two literal writes of one location; a rule
/// setting the label the log shipper's object selector reads makes chains
/// of three of them.
#[test]
fn the_bundled_rules_have_no_chain_nor_order_dependent_writes() {
    for dir in ["rules", "docs/examples/cel"] {
        let policies = in_tree::policies(&plan_of(dir));
        assert_eq!(order_notes(&policies), Vec::<String>::new(), "{dir}");
    }
    let dir = tempfile::tempdir().unwrap();
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("rules");
    for entry in std::fs::read_dir(&bundled).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "yaml") {
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(
        dir.path().join("90-ship-logs.yaml"),
        "apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: ship-logs}
spec:
  rules:
    - name: everywhere
      match: {resources: [pods]}
      mutate:
        - setIfAbsent: {path: \"$.object.metadata.labels['kadmit.dev/inject-log-shipper']\", value: \"true\"}
",
    )
    .unwrap();
    let loaded = kadmit::rules::load_dir(dir.path()).expect("rules directory");
    let plan = compile(&loaded).unwrap_or_else(|d| panic!("{d}"));
    let notes = order_notes(&in_tree::policies(&plan));
    let heads: Vec<&str> = notes
        .iter()
        .map(|note| note.split(':').next().unwrap_or_default())
        .collect();
    assert_eq!(
        heads,
        [
            "pod-defaults/default-security-context",
            "pod-defaults/default-resources"
        ],
        "{notes:#?}"
    );
    assert!(
        notes.iter().all(|note| note.contains(
            "log-shipper/inject-sidecar writes $.podSpec.containers, and \
             log-shipper/inject-sidecar reads the objectSelector's label \
             \"kadmit.dev/inject-log-shipper\" where ship-logs/everywhere writes"
        )),
        "{notes:#?}"
    );
}
