//! The in-tree policies `kadmit policies` writes decide as kadmit does.
//!
//! Every validating rule of the bundled rules and of the CEL example that
//! translates is checked on every real API server review in
//! `tests/fixtures/admission-reviews/`, every case of the suites in
//! `tests/suites/`, and every Pod of Kubernetes' Pod Security Admission
//! fixtures (beside the repository, see `tests/conformance`), as a Pod and
//! in each workload kind: its match conditions and validations are
//! evaluated with the CEL crate, and the policy must find a violation
//! exactly when kadmit's rule does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use kadmit::cel::Expression;
use kadmit::eval::Outcome;
use kadmit::eval::budget::{Budget, Limits};
use kadmit::in_tree::{self, GENERATED_BOUNDS, Policies};
use kadmit::plan::{Mode, Plan, compile};
use kadmit::review::Request;
use serde_json::Value;

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
struct Evaluator {
    compiled: HashMap<String, Result<Expression, String>>,
    results: HashMap<String, Result<bool, String>>,
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
/// many (rule, input) pairs were compared and every disagreement.
fn compare(
    plan: &Plan,
    policies: &Policies,
    inputs: &[(String, Request)],
) -> (usize, usize, Vec<String>) {
    let mut compared = 0;
    let mut violations = 0;
    let mut disagreements = Vec::new();
    let mut evaluator = Evaluator::default();
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
            if !rule.matcher.match_resource(request)
                || rule.matcher.match_objects(&object, &old).is_err()
            {
                continue;
            }
            compared += 1;
            let kadmit_violated = verdict.findings.iter().any(|f| {
                f.rule_set == policy.rule_set
                    && f.rule == policy.rule
                    && f.outcome != Outcome::Mutated
            });
            violations += usize::from(kadmit_violated);
            let spec = policy.policy.spec.as_ref().expect("spec");
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
