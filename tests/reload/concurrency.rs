//! Reviews served while the rules flip: four clients (two over h2, two over
//! http/1.1) send reviews without pause while a kubelet atomic writer swaps
//! the `flip` rule set between versions A and B fifty times. Every answer
//! must be exactly what A or what B gives that review, never a mix, and
//! must come from the version its `plan-generation` was built from; no
//! request may fail.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::kubelet::AtomicWriter;
use super::support::{
    FLIP_FILE, RELOAD_DEADLINE, REVIEWS, StatusClient, expected, flip_rules, generation_of,
    hash_of, plan_of, rules_dir, start, without_generation,
};
use crate::server::harness::{Alpn, DEADLINE, client, fixture, roots_from_pem};

/// Swaps of the rules.
const FLIPS: u64 = 50;
/// Most reviews one client sends, whatever happens.
const MAX_REVIEWS_PER_CLIENT: usize = 50_000;
/// Longest the whole run may take.
const RUN_DEADLINE: Duration = Duration::from_secs(120);

/// What the clients saw of one generation: the version its answers matched
/// and how many there were.
type Seen = BTreeMap<u64, (char, usize)>;

/// Records that `generation` answered like `version`; a generation that
/// answered like both versions is a mix, and fails.
fn record(seen: &Mutex<Seen>, generation: u64, version: char) -> Result<(), String> {
    let mut seen = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let entry = seen.entry(generation).or_insert((version, 0));
    if entry.0 != version {
        return Err(format!(
            "generation {generation} answered like version {} and like version {version}",
            entry.0
        ));
    }
    entry.1 += 1;
    Ok(())
}

/// Tells the clients to stop when dropped: at the end, and when the test
/// fails on the main thread.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn reviews_during_fifty_kubelet_swaps_each_match_exactly_one_version() {
    let (_parent, dir) = rules_dir();
    let writer = AtomicWriter::new(&dir).expect("writer");
    let texts = [('A', flip_rules('A')), ('B', flip_rules('B'))];
    writer
        .write_str(&[(FLIP_FILE, &texts[0].1)])
        .expect("write A");

    // What each version answers to each review, computed in-process.
    let bodies: Vec<Vec<u8>> = REVIEWS.iter().map(|(name, ..)| fixture(name)).collect();
    let mut answers: Vec<[(char, Value); 2]> = Vec::new();
    for (i, (name, path, mode, rule_set)) in REVIEWS.iter().enumerate() {
        let [a, b] = texts.clone().map(|(version, text)| {
            let plan = plan_of(&[(FLIP_FILE, &text)]);
            (version, expected(&plan, &bodies[i], *mode, *rule_set))
        });
        assert_ne!(a.1, b.1, "A and B must answer {path} {name} differently");
        answers.push([a, b]);
    }
    let answers = Arc::new(answers);
    let bodies = Arc::new(bodies);

    let kadmit = Arc::new(start(&dir, &["--watch-debounce-ms", "50"]));
    let status = StatusClient::new(&kadmit);
    assert_eq!(generation_of(&status.get()), 1);

    let seen: Arc<Mutex<Seen>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let roots = roots_from_pem(kadmit.ca_pem());
    let mut clients = Vec::new();
    for (n, alpn, expected_version) in [
        (0, Alpn::H2AndHttp1, reqwest::Version::HTTP_2),
        (1, Alpn::H2AndHttp1, reqwest::Version::HTTP_2),
        (2, Alpn::Http1, reqwest::Version::HTTP_11),
        (3, Alpn::Http1, reqwest::Version::HTTP_11),
    ] {
        let http = client(&roots, None, alpn);
        let (kadmit, answers, bodies, seen, stop) = (
            kadmit.clone(),
            answers.clone(),
            bodies.clone(),
            seen.clone(),
            stop.clone(),
        );
        clients.push(thread::spawn(move || -> Result<usize, String> {
            let mut sent = 0;
            while !stop.load(Ordering::SeqCst) && sent < MAX_REVIEWS_PER_CLIENT {
                // Each client starts at a different review.
                let i = (sent + n) % REVIEWS.len();
                let (name, path, ..) = REVIEWS[i];
                let result = http
                    .post(kadmit.url(path))
                    .header("Content-Type", "application/json")
                    .body(bodies[i].clone())
                    .send();
                let response = result.map_err(|error| format!("{path} {name}: {error}"))?;
                let (code, version) = (response.status(), response.version());
                let body: Value = response
                    .json()
                    .map_err(|error| format!("{path} {name}: body: {error}"))?;
                if code != 200 || version != expected_version {
                    return Err(format!("{path} {name}: {code} over {version:?}: {body}"));
                }
                let (generation, rest) = without_generation(&body);
                let Some((matched, _)) = answers[i].iter().find(|(_, answer)| *answer == rest)
                else {
                    return Err(format!(
                        "{path} {name}: generation {generation} answered neither like A nor \
                         like B: {rest}"
                    ));
                };
                record(&seen, generation, *matched)?;
                sent += 1;
            }
            Ok(sent)
        }));
    }
    let _stop_clients = StopOnDrop(stop.clone());

    // Waits until a client was answered by `generation`; false if a client
    // stopped meanwhile (its result says why).
    let clients_meet = |generation: u64, deadline: Duration| -> bool {
        let started = Instant::now();
        while !seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(&generation)
        {
            if clients.iter().any(|c| c.is_finished()) {
                return false;
            }
            if started.elapsed() > deadline {
                panic!("no client was answered by generation {generation}");
            }
            thread::sleep(Duration::from_millis(1));
        }
        true
    };

    // Generation -> version, from /status after each swap.
    let mut versions: BTreeMap<u64, char> = BTreeMap::from([(1, 'A')]);
    let run_started = Instant::now();
    let mut flip_waits = Vec::new();
    let mut generation = 1;
    // The clients connect (allowing for a slow start) before the first swap,
    // so generation 1 answers some of them too.
    let all_running = clients_meet(generation, DEADLINE);
    for flip in (1..=FLIPS).take_while(|_| all_running) {
        // Odd flips to B, even ones back to A.
        let (version, text) = &texts[usize::from(flip % 2 == 1)];
        writer.write_str(&[(FLIP_FILE, text)]).expect("swap");
        let (now, waited) = status.wait(&format!("flip {flip} to {version}"), |status| {
            generation_of(status) > generation
        });
        flip_waits.push(waited);
        let served = generation_of(&now);
        if served != generation + 1 {
            panic!(
                "flip {flip}: one swap made {} plans: {now}",
                served - generation
            );
        }
        if now["ruleSets"][0]["fileHash"] != hash_of(text) {
            panic!("flip {flip}: /status shows another file: {now}");
        }
        versions.insert(served, *version);
        generation = served;

        // Let the clients meet this generation before the next swap.
        if !clients_meet(served, RELOAD_DEADLINE) {
            break;
        }
        if run_started.elapsed() > RUN_DEADLINE || clients.iter().any(|c| c.is_finished()) {
            break;
        }
    }
    stop.store(true, Ordering::SeqCst);

    let mut total = 0;
    for (n, client) in clients.into_iter().enumerate() {
        match client.join() {
            Ok(Ok(sent)) => {
                assert!(sent > 0, "client {n} sent nothing");
                total += sent;
            }
            Ok(Err(error)) => panic!("client {n}: {error}"),
            Err(_) => panic!("client {n} panicked"),
        }
    }
    assert_eq!(generation, FLIPS + 1, "not every flip was made in time");

    let seen = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for (generation, (version, count)) in seen.iter() {
        assert_eq!(
            versions.get(generation),
            Some(version),
            "generation {generation} answered {count} reviews like version {version}; \
             /status said it was {:?}",
            versions.get(generation)
        );
    }
    assert_eq!(
        seen.len() as u64,
        FLIPS + 1,
        "every generation answered some review"
    );
    flip_waits.sort();
    eprintln!(
        "{total} reviews over {} generations; change to served: p50 {:?}, max {:?}",
        seen.len(),
        flip_waits[flip_waits.len() / 2],
        flip_waits.last().copied().unwrap_or_default()
    );
    kadmit.assert_no_panic();
}
