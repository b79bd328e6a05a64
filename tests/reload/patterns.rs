//! End to end through the binary: every way a rules directory gets changed,
//! and what the server serves before, during and after. Each change is waited
//! for through `/status` with a 10 s deadline; reviews then prove which plan
//! answers (the `plan-generation` annotation and the whole response).

use std::path::Path;

use serde_json::Value;

use super::kubelet::AtomicWriter;
use super::support::{
    BROKEN_FLIP, BROKEN_FLIP_AT, EXTRA_FILE, EXTRA_RULES, FLIP_FILE, StatusClient, assert_serves,
    flip_rules, generation_of, hash_of, plan_of, rule_set_names, rules_dir, send, start,
};
use crate::server::harness::{Kadmit, assert_status_body, fixture, post_json};

/// Writes a plain file the way editors that save safely do: a hidden
/// temporary file beside it, renamed over it.
fn write_and_rename(dir: &Path, name: &str, text: &str) {
    let temp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&temp, text).expect("write temp");
    std::fs::rename(&temp, dir.join(name)).expect("rename over");
}

fn file_hashes(status: &Value) -> Vec<(String, String)> {
    status["ruleSets"]
        .as_array()
        .expect("ruleSets")
        .iter()
        .map(|set| {
            (
                set["name"].as_str().unwrap_or_default().to_owned(),
                set["fileHash"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_kubelet_configmap_update_is_served() {
    let (_parent, dir) = rules_dir();
    let writer = AtomicWriter::new(&dir).expect("writer");
    let (a, b) = (flip_rules('A'), flip_rules('B'));
    writer.write_str(&[(FLIP_FILE, &a)]).expect("write A");
    let kadmit = start(&dir, &[]);
    let status = StatusClient::new(&kadmit);
    let client = kadmit.client();

    let first = status.get();
    assert_eq!(generation_of(&first), 1, "{first}");
    assert_eq!(file_hashes(&first), vec![("flip".to_owned(), hash_of(&a))]);
    assert_serves(&client, &kadmit, 1, &plan_of(&[(FLIP_FILE, &a)]), "A");

    writer.write_str(&[(FLIP_FILE, &b)]).expect("write B");
    let now = status.wait_past(1);
    assert_eq!(generation_of(&now), 2, "one update, one plan: {now}");
    assert_eq!(file_hashes(&now), vec![("flip".to_owned(), hash_of(&b))]);
    assert!(now.get("lastError").is_none(), "{now}");
    assert_serves(&client, &kadmit, 2, &plan_of(&[(FLIP_FILE, &b)]), "B");

    // And back: the data directory of A was removed, so nothing is reused.
    writer.write_str(&[(FLIP_FILE, &a)]).expect("write A again");
    let now = status.wait_past(2);
    assert_eq!(file_hashes(&now), vec![("flip".to_owned(), hash_of(&a))]);
    assert_serves(&client, &kadmit, 3, &plan_of(&[(FLIP_FILE, &a)]), "A again");
    kadmit.assert_no_panic();
}

#[test]
fn an_editor_writing_a_temporary_file_and_renaming_it_is_served() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FLIP_FILE), flip_rules('A')).expect("write A");
    let kadmit = start(&dir, &[]);
    let status = StatusClient::new(&kadmit);
    let client = kadmit.client();

    let b = flip_rules('B');
    write_and_rename(&dir, FLIP_FILE, &b);
    let now = status.wait_past(1);
    assert_eq!(file_hashes(&now), vec![("flip".to_owned(), hash_of(&b))]);
    assert_serves(&client, &kadmit, 2, &plan_of(&[(FLIP_FILE, &b)]), "B");
}

#[test]
fn between_truncate_and_write_the_old_plan_serves() {
    let (_parent, dir) = rules_dir();
    let file = dir.join(FLIP_FILE);
    let a = flip_rules('A');
    std::fs::write(&file, &a).expect("write A");
    let kadmit = start(&dir, &[]);
    let status = StatusClient::new(&kadmit);
    let client = kadmit.client();

    // `> flip.yaml`, and the writer is slow to follow.
    std::fs::File::create(&file).expect("truncate");
    let now = status.wait_failure(0);
    let error = now["lastError"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("{FLIP_FILE}:1:1: file is empty")),
        "{now:#}"
    );
    assert_eq!(generation_of(&now), 1, "{now}");
    assert_eq!(file_hashes(&now), vec![("flip".to_owned(), hash_of(&a))]);
    assert_serves(&client, &kadmit, 1, &plan_of(&[(FLIP_FILE, &a)]), "A kept");

    // The write lands.
    let b = flip_rules('B');
    std::fs::write(&file, &b).expect("write B");
    let now = status.wait_past(1);
    assert!(now.get("lastError").is_none(), "{now}");
    assert_eq!(file_hashes(&now), vec![("flip".to_owned(), hash_of(&b))]);
    assert_serves(&client, &kadmit, 2, &plan_of(&[(FLIP_FILE, &b)]), "B");
}

/// `/validate/extra` for the deployment: the extra rule set's own verdict.
fn validate_extra(kadmit: &Kadmit, client: &reqwest::blocking::Client) -> (u16, Value) {
    let (code, _, body) = post_json(
        client,
        &kadmit.url("/validate/extra"),
        fixture("create-deployment.json"),
    );
    (code.as_u16(), body)
}

#[test]
fn files_added_and_removed_are_served_and_dropped() {
    let (_parent, dir) = rules_dir();
    let a = flip_rules('A');
    std::fs::write(dir.join(FLIP_FILE), &a).expect("write A");
    let kadmit = start(&dir, &[]);
    let status = StatusClient::new(&kadmit);
    let client = kadmit.client();
    let (code, body) = validate_extra(&kadmit, &client);
    assert_eq!(code, 404, "{body}");

    std::fs::write(dir.join(EXTRA_FILE), EXTRA_RULES).expect("add extra");
    let now = status.wait_past(1);
    assert_eq!(rule_set_names(&now), ["extra", "flip"], "{now}");
    let both = plan_of(&[(EXTRA_FILE, EXTRA_RULES), (FLIP_FILE, &a)]);
    assert_serves(&client, &kadmit, 2, &both, "A and extra");
    let (code, body) = validate_extra(&kadmit, &client);
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["response"]["allowed"], false, "{body}");
    assert!(body.to_string().contains("extra denies app=web"), "{body}");

    std::fs::remove_file(dir.join(EXTRA_FILE)).expect("remove extra");
    let now = status.wait_past(2);
    assert_eq!(rule_set_names(&now), ["flip"], "{now}");
    assert_serves(&client, &kadmit, 3, &plan_of(&[(FLIP_FILE, &a)]), "A alone");
    let (code, body) = validate_extra(&kadmit, &client);
    assert_eq!(code, 404, "{body}");
    assert_status_body(&body, 404, "extra");
}

#[test]
fn a_rule_set_deleted_from_the_configmap_is_no_longer_served() {
    let (_parent, dir) = rules_dir();
    let writer = AtomicWriter::new(&dir).expect("writer");
    let a = flip_rules('A');
    writer
        .write_str(&[(FLIP_FILE, &a), (EXTRA_FILE, EXTRA_RULES)])
        .expect("write both");
    let kadmit = start(&dir, &[]);
    let status = StatusClient::new(&kadmit);
    let client = kadmit.client();
    assert_eq!(rule_set_names(&status.get()), ["extra", "flip"]);
    let (code, body) = validate_extra(&kadmit, &client);
    assert_eq!(
        (code, &body["response"]["allowed"]),
        (200, &Value::Bool(false))
    );

    // The key is deleted from the ConfigMap: the kubelet swaps `..data` and
    // then removes the dangling `extra.yaml` link.
    writer
        .write_str(&[(FLIP_FILE, &a)])
        .expect("write flip only");
    let now = status
        .wait("the extra rule set to be gone from /status", |status| {
            rule_set_names(status) == ["flip"]
        })
        .0;
    assert!(now.get("lastError").is_none(), "{now}");
    let generation = generation_of(&now);
    assert_serves(
        &client,
        &kadmit,
        generation,
        &plan_of(&[(FLIP_FILE, &a)]),
        "A alone",
    );
    let (code, body) = validate_extra(&kadmit, &client);
    assert_eq!(code, 404, "{body}");
    assert_status_body(&body, 404, "extra");
}

/// After the directory was replaced by one holding `b`: `b` serves, and an
/// edit inside the new directory is seen too (it is watched, not only the
/// one that was removed). `what` names the wait.
fn assert_replacement_served(
    dir: &Path,
    kadmit: &Kadmit,
    status: &StatusClient,
    client: &reqwest::blocking::Client,
    b: &str,
    what: &str,
) {
    let now = status
        .wait(what, |status| {
            file_hashes(status) == [("flip".to_owned(), hash_of(b))]
        })
        .0;
    assert_serves(
        client,
        kadmit,
        generation_of(&now),
        &plan_of(&[(FLIP_FILE, b)]),
        "B",
    );
    std::fs::write(dir.join(EXTRA_FILE), EXTRA_RULES).expect("add extra");
    let now = status.wait_past(generation_of(&now));
    assert_eq!(rule_set_names(&now), ["extra", "flip"], "{now}");
    let with_extra = plan_of(&[(EXTRA_FILE, EXTRA_RULES), (FLIP_FILE, b)]);
    assert_serves(
        client,
        kadmit,
        generation_of(&now),
        &with_extra,
        "B and extra",
    );
}

#[test]
fn a_directory_removed_and_created_again_is_served_and_still_watched() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FLIP_FILE), flip_rules('A')).expect("write A");
    let kadmit = start(&dir, &[]);
    let status = StatusClient::new(&kadmit);
    let client = kadmit.client();

    // rm -rf rules; mkdir rules; write the files.
    let b = flip_rules('B');
    std::fs::remove_dir_all(&dir).expect("rm -rf");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join(FLIP_FILE), &b).expect("write B");
    assert_replacement_served(
        &dir,
        &kadmit,
        &status,
        &client,
        &b,
        "the replaced directory's rules to serve",
    );
}

#[test]
fn a_directory_renamed_over_the_old_one_is_served_and_still_watched() {
    let (parent, dir) = rules_dir();
    std::fs::write(dir.join(FLIP_FILE), flip_rules('A')).expect("write A");
    let kadmit = start(&dir, &[]);
    let status = StatusClient::new(&kadmit);
    let client = kadmit.client();

    // A complete new directory beside it, then two renames (a non-empty
    // directory cannot be renamed over another), then the old one removed.
    let b = flip_rules('B');
    let staged = parent.path().join("rules.new");
    std::fs::create_dir(&staged).expect("mkdir rules.new");
    std::fs::write(staged.join(FLIP_FILE), &b).expect("write B");
    let old = parent.path().join("rules.old");
    std::fs::rename(&dir, &old).expect("rules -> rules.old");
    std::fs::rename(&staged, &dir).expect("rules.new -> rules");
    std::fs::remove_dir_all(&old).expect("rm -rf rules.old");
    assert_replacement_served(
        &dir,
        &kadmit,
        &status,
        &client,
        &b,
        "the renamed directory's rules to serve",
    );
}

#[test]
fn a_broken_file_keeps_the_old_plan_until_it_is_fixed() {
    let (_parent, dir) = rules_dir();
    let a = flip_rules('A');
    std::fs::write(dir.join(FLIP_FILE), &a).expect("write A");
    let kadmit = start(&dir, &[]);
    let status = StatusClient::new(&kadmit);
    let client = kadmit.client();
    let plan_a = plan_of(&[(FLIP_FILE, &a)]);

    write_and_rename(&dir, FLIP_FILE, BROKEN_FLIP);
    let now = status.wait_failure(0);
    let error = now["lastError"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("{}/{BROKEN_FLIP_AT}", dir.display())),
        "lastError must name the file and line: {now:#}"
    );
    assert!(now["lastFailure"].is_string(), "{now}");
    assert_eq!(generation_of(&now), 1, "{now}");
    assert_eq!(file_hashes(&now), vec![("flip".to_owned(), hash_of(&a))]);
    // Reviews still get A's verdict: the pod is denied.
    assert_serves(&client, &kadmit, 1, &plan_a, "A while broken");
    let (_, denied) = send(&client, &kadmit, "create-pod.json", "/validate");
    assert_eq!(denied["response"]["allowed"], false, "{denied}");
    assert!(kadmit.get_plain("/readyz").0 == 200, "still ready");

    let b = flip_rules('B');
    write_and_rename(&dir, FLIP_FILE, &b);
    let now = status.wait_past(1);
    assert!(now.get("lastError").is_none(), "{now}");
    assert_eq!(now["failedReloads"], 1, "{now}");
    assert_eq!(now["successfulReloads"], 2, "{now}");
    assert_serves(&client, &kadmit, 2, &plan_of(&[(FLIP_FILE, &b)]), "B");
}
