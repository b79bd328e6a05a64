//! SIGHUP and `--watch=false` through the binary, and the watcher's quiet
//! when nothing changes.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::support::{
    FLIP_FILE, RELOAD_DEADLINE, StatusClient, assert_serves, flip_rules, generation_of, hash_of,
    plan_of, rules_dir, start,
};
use crate::server::harness::DEADLINE;

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

/// A child process killed and reaped when dropped, whatever path the test
/// takes.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `kadmit serve` on `rules` (itself, not through the harness) and
/// sends SIGHUP the instant the listening line is read, through a shell
/// started beforehand (the harness's `kill` command takes too long to start
/// to land that early). Returns whether the server reloaded, or how it ended.
fn sighup_at_the_listening_line(rules: &Path) -> Result<(), String> {
    let self_signed = tempfile::tempdir().expect("tempdir");
    let mut killer = Reaped(
        Command::new("sh")
            .args(["-c", "read pid; kill -HUP \"$pid\""])
            .stdin(Stdio::piped())
            .spawn()
            .expect("start sh"),
    );
    let mut server = Reaped(
        Command::new(env!("CARGO_BIN_EXE_kadmit"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--plain-listen",
                "127.0.0.1:0",
            ])
            .args(["--watch=false", "--reload-interval-secs", "0"])
            .arg("--rules")
            .arg(rules)
            .arg("--self-signed-dir")
            .arg(self_signed.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start kadmit"),
    );
    let stdout = server.0.stdout.take().expect("piped stdout");
    let (lines_tx, lines_rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let plain = loop {
        let line = lines_rx
            .recv_timeout(DEADLINE)
            .map_err(|error| format!("no listening line: {error}"))?;
        if let Some(rest) = line.strip_prefix("listening ") {
            let plain = rest
                .split_whitespace()
                .find_map(|part| part.strip_prefix("plain="))
                .expect("plain address")
                .to_owned();
            break plain;
        }
    };
    let mut to_killer = killer.0.stdin.take().expect("piped stdin");
    writeln!(to_killer, "{}", server.0.id()).expect("hand the pid over");
    drop(to_killer);
    assert!(killer.0.wait().expect("sh").success(), "kill -HUP failed");

    let client = reqwest::blocking::Client::builder()
        .timeout(RELOAD_DEADLINE)
        .build()
        .expect("client");
    let started = Instant::now();
    loop {
        let generation = client
            .get(format!("http://{plain}/status"))
            .send()
            .and_then(reqwest::blocking::Response::json::<Value>)
            .map(|status| generation_of(&status));
        match (generation, server.0.try_wait()) {
            (Ok(2), _) => return Ok(()),
            (_, Ok(Some(exit))) => return Err(format!("SIGHUP ended the server: {exit}")),
            _ if started.elapsed() > RELOAD_DEADLINE => {
                return Err("SIGHUP did not reload within the deadline".to_owned());
            }
            _ => thread::sleep(Duration::from_millis(5)),
        }
    }
}

#[test]
fn sighup_right_after_the_listening_line_reloads() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FLIP_FILE), flip_rules('A')).expect("write A");
    // Even a plain-HTTP reqwest client needs the process's TLS provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The window is short; several tries make missing it unlikely.
    for round in 1..=8 {
        if let Err(error) = sighup_at_the_listening_line(&dir) {
            panic!("round {round}: {error}");
        }
    }
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
