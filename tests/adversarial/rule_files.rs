//! Rule files that would exhaust a replica, and rule-file entries that
//! cannot be read (issue 11): each is a diagnostic that fails `kadmit
//! check` and a reload, never a crash, a stall, or a silent skip.

use std::os::unix::fs::symlink;

use super::support::{
    PEAK_RSS_LIMIT_KIB, check, deep_flow_nesting, long_flow_list, memory, one_anchor_many_aliases,
};
use crate::reload::support::{
    EXTRA_FILE, EXTRA_RULES, FLIP_FILE, StatusClient, flip_rules, generation_of, rule_set_names,
    rules_dir, start,
};
use crate::server::harness::{fixture, post_json};

#[test]
fn issue_11_check_rejects_alias_expansion_within_bounded_memory() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join("laughs.yaml"), one_anchor_many_aliases()).expect("write");
    // 285 MB before the bound.
    check(&dir).assert_rejected_within_memory(
        "laughs.yaml:11:413: the file expands to more than 100000 nodes (",
    );
}

#[test]
fn issue_11_check_rejects_a_long_flow_list_within_bounded_memory() {
    let (_parent, dir) = rules_dir();
    let text = long_flow_list();
    assert!(text.len() <= 1 << 20, "{} bytes", text.len());
    std::fs::write(dir.join("long.yaml"), text).expect("write");
    // 260 MB before the bound, more than the Deployment's 256 MiB.
    check(&dir).assert_rejected_within_memory(
        "long.yaml:13:65551: a flow collection ([…] or {…}), a single value or a comment holds more than 32768 indicators",
    );
}

#[test]
fn issue_11_check_reads_a_long_key_above_a_long_list_within_bounded_memory() {
    // Within every bound of the file's structure; indexing where each
    // node is by its full path took 600 KB for each of 95,000 items (over
    // 4 GB) before the index became a tree.
    let (_parent, dir) = rules_dir();
    let text = format!("? {}\n:\n{}", "k".repeat(600_000), "- 0\n".repeat(95_000));
    std::fs::write(dir.join("key.yaml"), text).expect("write");
    let checked = check(&dir);
    checked.assert_rejected_within_memory("key.yaml:1:3: kkkk");
    // The diagnostic quotes the key, cut: the line stays short.
    let longest = checked.stdout.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 4096, "a line of {longest} bytes");
}

#[test]
fn issue_11_check_rejects_deep_flow_nesting_within_the_deadline() {
    // Before the depth bound, this file took minutes; `check` kills the
    // child at the harness deadline.
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join("deep.yaml"), deep_flow_nesting()).expect("write");
    check(&dir).assert_rejected_within_memory(
        "deep.yaml:8:269: collections nested deeper than 64 levels (",
    );
}

#[test]
fn issue_11_check_fails_on_a_rule_file_link_that_points_nowhere() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FLIP_FILE), flip_rules('A')).expect("write");
    symlink(
        "..data/10-pod-security.yaml",
        dir.join("10-pod-security.yaml"),
    )
    .expect("link");
    let checked = check(&dir);
    assert_eq!(
        checked.code,
        Some(1),
        "{}{}",
        checked.stdout,
        checked.stderr
    );
    assert_eq!(
        checked.stdout,
        format!(
            "{}:1:1: symbolic link to ..data/10-pod-security.yaml which does not exist \
             (fix or remove it: every *.yaml and *.yml entry must be a rule file)\n",
            dir.join("10-pod-security.yaml").display()
        )
    );
    assert!(
        checked.stderr.contains("1 problem(s)"),
        "{}",
        checked.stderr
    );
}

/// `/validate/extra` for the deployment, which the `extra` rule set denies.
fn extra_denies(kadmit: &crate::server::harness::Kadmit) -> bool {
    let (code, _, body) = post_json(
        &kadmit.client(),
        &kadmit.url("/validate/extra"),
        fixture("create-deployment.json"),
    );
    assert_eq!(code, 200, "{body}");
    body["response"]["allowed"] == false
}

#[test]
fn issue_11_a_rule_file_link_broken_at_runtime_keeps_the_last_good_plan() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FLIP_FILE), flip_rules('A')).expect("write");
    // As in a ConfigMap volume: the visible name is a link to the data.
    let target = dir.join("extra.data");
    std::fs::write(&target, EXTRA_RULES).expect("write");
    symlink("extra.data", dir.join(EXTRA_FILE)).expect("link");
    let kadmit = start(&dir, &["--watch-debounce-ms", "50"]);
    let status = StatusClient::new(&kadmit);
    assert_eq!(rule_set_names(&status.get()), ["extra", "flip"]);
    assert!(extra_denies(&kadmit));

    std::fs::remove_file(&target).expect("break the link");
    let now = status.wait_failure(0);
    let error = now["lastError"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!(
            "{EXTRA_FILE}:1:1: symbolic link to extra.data which does not exist"
        )),
        "{now:#}"
    );
    assert_eq!(generation_of(&now), 1, "{now}");
    assert_eq!(rule_set_names(&now), ["extra", "flip"], "{now}");
    assert!(extra_denies(&kadmit), "the extra rule set stopped serving");
    assert_eq!(kadmit.get_plain("/readyz").0, 200);

    // Fixed: served again, and the error is gone.
    std::fs::write(&target, EXTRA_RULES).expect("restore");
    let now = status.wait_past(1);
    assert!(now.get("lastError").is_none(), "{now}");
    kadmit.assert_no_panic();
}

#[test]
fn issue_11_a_broken_rule_file_link_at_startup_is_not_ready() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FLIP_FILE), flip_rules('A')).expect("write");
    symlink("10-pod-security.yaml", dir.join("10-pod-security.yaml")).expect("loop");
    let kadmit = start(&dir, &[]);
    let (code, body) = kadmit.get_plain("/readyz");
    assert_eq!(code, 503, "{body}");
    let status = StatusClient::new(&kadmit).get();
    assert_eq!(generation_of(&status), 0, "{status}");
    let error = status["lastError"].as_str().unwrap_or_default();
    assert!(
        error.contains("10-pod-security.yaml:1:1: symbolic link to 10-pod-security.yaml which cannot be followed"),
        "{status:#}"
    );
}

#[test]
fn issue_11_a_reload_of_alias_bombs_keeps_the_plan_and_bounded_memory() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FLIP_FILE), flip_rules('A')).expect("write");
    let kadmit = start(&dir, &["--watch-debounce-ms", "50"]);
    let status = StatusClient::new(&kadmit);
    std::fs::write(dir.join("laughs.yaml"), one_anchor_many_aliases()).expect("write");
    let now = status.wait_failure(0);
    assert!(
        now["lastError"]
            .as_str()
            .is_some_and(|error| error.contains("expands to more than 100000 nodes")),
        "{now:#}"
    );
    assert_eq!(generation_of(&now), 1);
    // SIGHUP forces another reload of the same files; memory must stay
    // bounded through both.
    kadmit.signal("HUP");
    status.wait_failure(1);
    let peak = memory(kadmit.pid()).peak / 1024;
    assert!(peak < PEAK_RSS_LIMIT_KIB, "the server peaked at {peak} KiB");
    kadmit.assert_no_panic();
}

#[test]
fn check_of_a_file_of_long_unknown_field_names_ends_in_time() {
    // Each unknown field is compared with the fields of every matched kind
    // for a "did you mean"; measured in full, that cost the product of the
    // lengths: 10 names of 5,300 characters took 8.8 s, this file minutes.
    let (_parent, dir) = rules_dir();
    let kinds = "[pods, deployments, statefulsets, daemonsets, replicasets, jobs, cronjobs]";
    let mut text = format!(
        "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata:\n  name: long\nspec:\n  rules:\n    - name: long-names\n      match:\n        resources: {kinds}\n      deny:\n"
    );
    let paths = 180;
    for i in 0..paths {
        let name = format!("field{i}{}", "x".repeat(5_500));
        text.push_str(&format!(
            "        - {{path: $.podSpec.{name}, exists: true, message: m}}\n"
        ));
    }
    assert!(text.len() <= 1 << 20, "{} bytes", text.len());
    std::fs::write(dir.join("long.yaml"), text).expect("write");
    let checked = check(&dir);
    assert_eq!(
        checked.code,
        Some(0),
        "{}{}",
        checked.stdout,
        checked.stderr
    );
    assert!(
        checked.stdout.contains(&format!("{paths} warning(s)")),
        "{}",
        checked.stdout
    );
    let longest = checked.stdout.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 4096, "a line of {longest} bytes");
}

#[test]
fn check_refuses_a_write_path_deeper_than_any_review_within_bounded_memory() {
    // 40 KB of `.a`: comparing it with the other writes built a location
    // for each of its 20,000 ancestors, 3 GB and 30 s.
    let (_parent, dir) = rules_dir();
    let path = format!("$.object.metadata{}", ".a".repeat(20_000));
    let text = format!(
        "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata:\n  name: deep\nspec:\n  rules:\n    - name: deep\n      match:\n        resources: ['*']\n      mutate:\n        - set: {{path: \"{path}\", value: x}}\n"
    );
    std::fs::write(dir.join("deep.yaml"), text).expect("write");
    check(&dir).assert_rejected_within_memory("levels a review can nest");
}
