//! SIGHUP and `--watch=false` through the binary, and the watcher's quiet
//! when nothing changes.

use std::time::{Duration, Instant};

use super::support::{
    FLIP_FILE, StatusClient, assert_serves, flip_rules, generation_of, hash_of, plan_of, rules_dir,
    start,
};

/// Asserts that `/status` keeps `generation` for all of `window`: for the
/// tests of what must *not* happen, which have to watch for a while.
fn assert_stays(status: &StatusClient, generation: u64, window: Duration, why: &str) {
    let started = Instant::now();
    while started.elapsed() < window {
        let now = status.get();
        assert_eq!(generation_of(&now), generation, "{why}: {now}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sighup_rebuilds_even_unchanged_files() {
    let (_parent, dir) = rules_dir();
    let a = flip_rules('A');
    std::fs::write(dir.join(FLIP_FILE), &a).expect("write A");
    let kadmit = start(&dir, &[]);
    // Right after the listening line: the server must already handle
    // SIGHUP rather than die of it.
    kadmit.signal("HUP");
    let status = StatusClient::new(&kadmit);
    let now = status.wait_past(1);
    assert_eq!(generation_of(&now), 2, "{now}");
    assert_eq!(now["successfulReloads"], 2, "{now}");
    assert_eq!(now["ruleSets"][0]["fileHash"], hash_of(&a), "{now}");
    let client = kadmit.client();
    assert_serves(
        &client,
        &kadmit,
        2,
        &plan_of(&[(FLIP_FILE, &a)]),
        "A rebuilt",
    );

    kadmit.signal("HUP");
    status.wait_past(2);
    kadmit.assert_no_panic();
}

#[test]
fn without_watching_a_change_waits_for_sighup() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FLIP_FILE), flip_rules('A')).expect("write A");
    let kadmit = start(&dir, &["--watch=false"]);
    let status = StatusClient::new(&kadmit);

    let b = flip_rules('B');
    std::fs::write(dir.join(FLIP_FILE), &b).expect("write B");
    // A watching server reloads within the debounce (200 ms); this one must
    // not, for five times that.
    assert_stays(
        &status,
        1,
        Duration::from_secs(1),
        "--watch=false reloaded on a change",
    );

    kadmit.signal("HUP");
    let now = status.wait_past(1);
    assert_eq!(now["ruleSets"][0]["fileHash"], hash_of(&b), "{now}");
    let client = kadmit.client();
    assert_serves(&client, &kadmit, 2, &plan_of(&[(FLIP_FILE, &b)]), "B");
}

/// `kadmit_reloads_total{result="unchanged"}`.
const UNCHANGED: &str = "kadmit_reloads_total{result=\"unchanged\"}";

#[test]
fn once_a_change_is_served_the_watcher_stays_quiet() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FLIP_FILE), flip_rules('A')).expect("write A");
    let kadmit = start(&dir, &["--watch-debounce-ms", "50"]);
    let status = StatusClient::new(&kadmit);

    std::fs::write(dir.join(FLIP_FILE), flip_rules('B')).expect("write B");
    status.wait_past(1);
    // The reload read the files; reading is not a change. Over 20 debounce
    // periods no reload may run (each would count as "unchanged").
    let before = kadmit.metric(UNCHANGED);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(1) {
        let now = kadmit.metric(UNCHANGED);
        assert!(
            now <= before,
            "the watcher reloads on its own reads: {before} -> {now} unchanged reloads \
             within {:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
