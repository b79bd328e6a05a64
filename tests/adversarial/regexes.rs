//! Regexes in rule files matched against text from the request: the memory
//! a match may take and the time it may run are bounded by the size the
//! regex was compiled within.

use super::support::{assert_validate_denied_over_budget, memory, mib};
use crate::server::harness::{Kadmit, fixture, post_json, rules_dir};

/// `n` letters from `a` to `d`, in an order no regex can predict: the
/// states of a lazy DFA for `[a-d]*a[a-d]{k}…` that this text visits are
/// about as many as the text is long.
fn scrambled_letters(n: usize) -> String {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(b'a' + (state % 4) as u8)
        })
        .collect()
}

/// The real Pod CREATE with `text` as the annotation `text`.
fn pod_annotated(text: &str) -> Vec<u8> {
    let mut review: serde_json::Value =
        serde_json::from_slice(&fixture("create-pod.json")).expect("fixture");
    review["request"]["object"]["metadata"]["annotations"] = serde_json::json!({ "text": text });
    serde_json::to_vec(&review).expect("serialize")
}

/// The start of a rule set named `name`, up to its list of rules.
fn rule_set_header(name: &str) -> String {
    format!(
        "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata:\n  name: {name}\nspec:\n  rules:\n"
    )
}

/// A rule set that denies a Pod whose annotation `text` matches any of
/// `patterns`.
fn rules_matching(patterns: &[String]) -> String {
    let mut rules = rule_set_header("patterns");
    rules.push_str(
        "    - name: annotation-patterns
      match: {resources: [pods]}
      deny:
",
    );
    for pattern in patterns {
        rules.push_str(&format!(
            "        - {{path: $.object.metadata.annotations.text, matches: '{pattern}', message: matched}}\n"
        ));
    }
    rules
}

#[test]
fn regexes_whose_lazy_dfa_never_settles_take_bounded_memory_matching() {
    // Each pattern's lazy DFA meets a new state at almost every byte of
    // the text. The regex crate's default cache grows to 2 MiB per regex
    // and thread: these 60 took 60 MB after one review (a few hundred
    // such patterns would take a replica past its 256 MiB). Each cache is
    // now the regex's size tier, 16 KiB for these.
    let patterns: Vec<String> = (0..60)
        .map(|i| {
            let last = char::from(b'e' + (i / 5) as u8);
            format!("[a-d]*a[a-d]{{{}}}[e-{last}]", 10 + i % 5)
        })
        .collect();
    let rules = rules_matching(&patterns);
    let dir = rules_dir(&[("patterns.yaml", rules.as_str())]);
    let kadmit = Kadmit::with_rules(dir.path()).start();
    let client = kadmit.client();
    // One review first, so that what the server allocates for any review
    // is not counted.
    let (status, _, response) = post_json(&client, &kadmit.url("/validate"), pod_annotated("a"));
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["response"]["allowed"], true, "{response}");
    let before = memory(kadmit.pid()).rss;
    let (status, _, response) = post_json(
        &client,
        &kadmit.url("/validate"),
        pod_annotated(&scrambled_letters(40_000)),
    );
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["response"]["allowed"], true, "{response}");
    let grown = memory(kadmit.pid()).rss.saturating_sub(before);
    assert!(
        grown < 16 << 20,
        "matching grew the server by {:.1} MiB",
        mib(grown)
    );
    kadmit.assert_no_panic();
}

#[test]
fn a_match_is_charged_for_the_text_times_the_size_of_its_regex() {
    // A regex of 1,000 repeats compiles within 256 KiB, and its lazy DFA
    // never settles on this text: 300 KB took 0.84 s to match in a release
    // build, and a few such conditions over a large object stalled the
    // worker. A match is now charged per byte of text, 128 steps for a
    // regex of this size, so the review is denied at the budget before
    // the regex runs.
    let patterns = ["[a-d]*a[a-d]{1000}[e-z]".to_owned()];
    let rules = rules_matching(&patterns);
    let dir = rules_dir(&[("patterns.yaml", rules.as_str())]);
    let kadmit = Kadmit::with_rules(dir.path()).start();
    let client = kadmit.client();
    assert_validate_denied_over_budget(
        &kadmit,
        &client,
        pod_annotated(&scrambled_letters(300_000)),
    );
    // A short text is matched as before.
    let (status, _, response) = post_json(
        &client,
        &kadmit.url("/validate"),
        pod_annotated(&format!("{}e", "a".repeat(1_001))),
    );
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["response"]["allowed"], false, "{response}");
    assert_eq!(response["response"]["status"]["code"], 403, "{response}");
    kadmit.assert_no_panic();
}

#[test]
fn globs_are_charged_for_the_request_fields_they_match() {
    // A glob with an inner `*` is a regex matched against the username,
    // each group and the namespace, which a client without a certificate
    // may make as long as the body allows. Uncharged, a 15 MB username took
    // 3 s of server CPU against 100 rules whose `excludeUsers` held such a
    // glob (release build), at every review. Each match is now charged
    // like any regex match, so the review is denied at the budget.
    let mut rules = rule_set_header("users");
    for i in 0..20 {
        rules.push_str(&format!(
            "    - name: host-network-{i}
      match: {{resources: [pods], excludeUsers: ['system:*:admin-{i}?']}}
      deny: [{{path: $.podSpec.hostNetwork, equals: true, message: no host network}}]
"
        ));
    }
    let dir = rules_dir(&[("users.yaml", rules.as_str())]);
    let kadmit = Kadmit::with_rules(dir.path()).start();
    let client = kadmit.client();
    let review = |username: &str| {
        let mut review: serde_json::Value =
            serde_json::from_slice(&fixture("create-pod.json")).expect("fixture");
        review["request"]["userInfo"]["username"] = serde_json::json!(username);
        review["request"]["object"]["spec"]["hostNetwork"] = serde_json::json!(true);
        serde_json::to_vec(&review).expect("serialize")
    };
    let long = format!("system:{}", "x".repeat(15 << 20));
    assert_validate_denied_over_budget(&kadmit, &client, review(&long));
    // Ordinary names are matched as before: every rule but the excluded
    // user's denies.
    for (username, denials) in [("system:ci:admin-3x", 19), ("alice", 20)] {
        let (status, _, response) = post_json(&client, &kadmit.url("/validate"), review(username));
        assert_eq!(status, 200, "{response}");
        let answer = &response["response"];
        assert_eq!(answer["allowed"], false, "{response}");
        assert_eq!(answer["status"]["code"], 403, "{response}");
        let message = answer["status"]["message"].as_str().unwrap_or_default();
        assert_eq!(
            message.matches("no host network").count(),
            denials,
            "{username}: {message}"
        );
    }
    kadmit.assert_no_panic();
}
