//! A rule file written in two pieces is never served half-written (issue
//! 11): a reload serves changed files only once two reads a debounce apart
//! agree.

use std::io::Write as _;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::reload::support::{FLIP_FILE, StatusClient, flip_rules, hash_of, rules_dir, start};
use crate::server::harness::{DEADLINE, message};

/// Five pod-security rules; the first piece written holds only the first.
fn pod_security() -> (String, usize) {
    let mut text = String::from(
        "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata:\n  name: pod-security\nspec:\n  rules:\n",
    );
    let mut first_piece = 0;
    for (i, (name, field)) in [
        ("privileged", "containers[0].securityContext.privileged"),
        ("host-network", "hostNetwork"),
        ("host-pid", "hostPID"),
        ("host-ipc", "hostIPC"),
        ("host-users", "hostUsers"),
    ]
    .iter()
    .enumerate()
    {
        text.push_str(&format!(
            "    - name: no-{name}\n      match: {{resources: [pods]}}\n      deny:\n        \
             - path: $.object.spec.{field}\n          equals: true\n          message: no {field}\n"
        ));
        if i == 0 {
            first_piece = text.len();
        }
    }
    (text, first_piece)
}

#[test]
fn issue_11_a_file_written_in_two_pieces_is_served_only_whole() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FLIP_FILE), flip_rules('A')).expect("write");
    // The debounce is the margin the test's second write has.
    let kadmit = start(&dir, &["--watch-debounce-ms", "1000"]);
    let status = StatusClient::new(&kadmit);
    let settling =
        |line: &Value| message(line).starts_with("Rule files changed; reading them again");
    let loaded = |line: &Value| message(line) == "Loaded a new rule plan";
    kadmit.logs.wait_for(1, settling);

    let (whole, cut) = pod_security();
    let mut file = std::fs::File::create(dir.join("pod-security.yaml")).expect("create");
    file.write_all(&whole.as_bytes()[..cut])
        .expect("first piece");
    // The first piece alone compiles (one rule). Once a reload has read it,
    // the rest arrives.
    kadmit.logs.wait_for(2, settling);
    file.write_all(&whole.as_bytes()[cut..])
        .expect("second piece");
    drop(file);

    let started = Instant::now();
    let now = loop {
        let now = status.get();
        if now["generation"].as_u64() > Some(1) {
            break now;
        }
        assert!(started.elapsed() < DEADLINE, "not served: {now:#}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let pod_security = now["ruleSets"]
        .as_array()
        .and_then(|sets| sets.iter().find(|set| set["name"] == "pod-security"))
        .unwrap_or_else(|| panic!("pod-security not served: {now:#}"));
    assert_eq!(pod_security["rules"], 5, "{now:#}");
    assert_eq!(pod_security["fileHash"], hash_of(&whole), "{now:#}");
    assert_eq!(
        now["generation"], 2,
        "a half-written plan was served first: {now:#}"
    );
    // The server publishes a plan on /status before it logs it (and the
    // test reads its log through a pipe): wait for the line.
    let plans = kadmit.logs.wait_for(2, loaded);
    assert_eq!(
        plans.len(),
        2,
        "startup and the whole file only: {plans:#?}"
    );
}
