//! Reviews whose cost is out of proportion: a Pod with 20,000 containers
//! through the bundled mutating rules, rules whose copies grow the object,
//! a rule (or a CEL expression) whose work is the square of the object.

use std::time::Instant;

use super::support::{
    QUADRATIC_RULES, assert_validate_denied_over_budget, cpu_seconds, memory, mib,
    pod_with_containers,
};
use crate::server::harness::{Kadmit, bundled_rules, fixture, post_json, rules_dir};

#[test]
fn a_pod_with_twenty_thousand_containers_is_mutated_in_linear_time() {
    // Each write of a pass was compared with every read: this pod (630 KB)
    // took 21 s of CPU in a release build, minutes in a debug one.
    let kadmit = Kadmit::with_rules(&bundled_rules()).start();
    let client = kadmit.client();
    let body = pod_with_containers(20_000);
    let cpu_before = cpu_seconds(kadmit.pid());
    let started = Instant::now();
    let (status, _, response) = post_json(&client, &kadmit.url("/mutate"), body);
    let elapsed = started.elapsed();
    let cpu = cpu_seconds(kadmit.pid()) - cpu_before;
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["response"]["allowed"], true, "{response}");
    assert!(response["response"]["patch"].is_string(), "no patch");
    // Generous: a debug build under a loaded machine takes a few seconds.
    assert!(
        cpu < 30.0,
        "the review took {cpu:.1} s of server CPU ({elapsed:?})"
    );
    let (status, _) = kadmit.get_plain("/healthz");
    assert_eq!(status, 200);
    kadmit.assert_no_panic();
}

#[test]
fn copies_that_double_the_object_are_denied_at_the_size_limit() {
    // Four copies of a parent of their own target (through a descendant
    // path the compiler cannot place) once made one Pod CREATE abort the
    // process; each pass doubles the object.
    let copy = |name: &str| {
        format!(
            "    - name: {name}
      match: {{resources: [pods]}}
      mutate:
        - set: {{path: $.object.metadata.annotations.{name}, valueFrom: {{path: \"$.object..metadata\"}}}}
"
        )
    };
    let rules = format!(
        "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata:\n  name: growing\nspec:\n  rules:\n{}",
        ["a", "b", "c", "d"].map(copy).concat()
    );
    let dir = rules_dir(&[("growing.yaml", &rules)]);
    let kadmit = Kadmit::with_rules(dir.path()).start();
    let client = kadmit.client();
    for _ in 0..3 {
        let (status, _, response) =
            post_json(&client, &kadmit.url("/mutate"), fixture("create-pod.json"));
        assert_eq!(status, 200, "{response}");
        let answer = &response["response"];
        assert_eq!(answer["allowed"], false, "{response}");
        assert_eq!(answer["status"]["code"], 413, "{response}");
        let message = answer["status"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("--max-mutation-bytes"), "{message}");
        assert_eq!(
            answer["auditAnnotations"]["evaluation-limit"], "mutation_bytes",
            "{response}"
        );
    }
    assert_eq!(
        kadmit.metric("kadmit_reviews_over_budget_total{limit=\"mutation_bytes\"}"),
        3.0
    );
    // 2 MiB of additions, the copy and the patch: far below the 256 MiB
    // the shipped Deployment allows.
    let peak = memory(kadmit.pid()).peak;
    assert!(peak < 200 << 20, "peak RSS {:.0} MiB", mib(peak));
    kadmit.assert_no_panic();
}

/// Sends a Pod with 20,000 containers (400 million comparisons for rules
/// that compare every container with every other) to kadmit serving
/// `rules`, and checks the review is denied at the step budget, not
/// stalled; an ordinary Pod is still judged.
fn assert_denied_at_the_step_budget(rules: &str) {
    let dir = rules_dir(&[("quadratic.yaml", rules)]);
    let kadmit = Kadmit::with_rules(dir.path()).start();
    let client = kadmit.client();
    assert_validate_denied_over_budget(&kadmit, &client, pod_with_containers(20_000));
    let (status, _, response) = post_json(
        &client,
        &kadmit.url("/validate"),
        fixture("create-pod.json"),
    );
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["response"]["allowed"], true, "{response}");
    let (status, _) = kadmit.get_plain("/healthz");
    assert_eq!(status, 200);
    kadmit.assert_no_panic();
}

#[test]
fn a_rule_whose_work_is_the_square_of_the_object_is_denied_not_stalled() {
    assert_denied_at_the_step_budget(QUADRATIC_RULES);
}

#[test]
fn a_cel_expression_whose_work_is_the_square_of_the_object_is_denied_not_stalled() {
    assert_denied_at_the_step_budget(
        "apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: quadratic-cel
spec:
  rules:
    - name: unique-names
      match: {resources: [pods]}
      deny:
        - cel: \"object.spec.containers.exists(a, object.spec.containers.exists(b, a.name == b.name && a != b))\"
          message: two containers share a name
",
    );
}
