//! The reload pieces in-process, without the binary: the kubelet writer's
//! layout, `Reloader` + `Store` step by step, and `watcher::spawn` driving a
//! `Reloader` on real directory changes.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use kadmit::reload::{ReloadResult, Reloader, Store, Trigger, watcher};

use super::kubelet::{AtomicWriter, DATA_LINK, DATA_TMP_LINK};
use super::support::{
    BROKEN_FLIP, BROKEN_FLIP_AT, EXTRA_FILE, EXTRA_RULES, FLIP_FILE, RELOAD_DEADLINE, flip_rules,
    hash_of, rules_dir,
};

/// Debounce of the in-process watchers: short, the tests wait by polling.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// Polls `done` until it holds; fails after [`RELOAD_DEADLINE`].
fn wait_until(what: &str, done: impl Fn() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < RELOAD_DEADLINE,
            "not within {RELOAD_DEADLINE:?}: {what}"
        );
        thread::sleep(Duration::from_millis(2));
    }
    started.elapsed()
}

/// The (name, file hash) of every rule set the store serves.
fn served(store: &Store) -> Vec<(String, String)> {
    let plan = store.load_full().expect("a plan serves");
    plan.rule_sets()
        .iter()
        .map(|info| (info.name.to_string(), info.file_hash.clone()))
        .collect()
}

/// Names in `dir` starting with `..2` (timestamped data directories).
fn timestamped_dirs(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read volume")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.starts_with("..2"))
        .collect();
    names.sort();
    names
}

fn is_timestamp_dir_name(name: &str) -> bool {
    // ..YYYY_MM_DD_HH_MM_SS.NNNNNNNNN
    let Some(rest) = name.strip_prefix("..") else {
        return false;
    };
    let Some((stamp, nanos)) = rest.split_once('.') else {
        return false;
    };
    let fields: Vec<&str> = stamp.split('_').collect();
    let widths = [4, 2, 2, 2, 2, 2];
    fields.len() == widths.len()
        && fields
            .iter()
            .zip(widths)
            .all(|(field, width)| field.len() == width && field.bytes().all(|b| b.is_ascii_digit()))
        && nanos.len() == 9
        && nanos.bytes().all(|b| b.is_ascii_digit())
}

#[test]
fn the_atomic_writer_lays_out_a_volume_like_the_kubelet() {
    let (_parent, dir) = rules_dir();
    let writer = AtomicWriter::new(&dir).expect("writer");
    let a = flip_rules('A');
    assert!(writer.write_str(&[(FLIP_FILE, &a)]).expect("first write"));

    let first = writer.current_dir_name().expect("..data is a link");
    assert!(is_timestamp_dir_name(&first), "{first}");
    assert_eq!(timestamped_dirs(&dir), vec![first.clone()]);
    let visible = dir.join(FLIP_FILE);
    assert_eq!(
        std::fs::read_link(&visible).expect("visible file is a link"),
        Path::new(DATA_LINK).join(FLIP_FILE)
    );
    assert_eq!(std::fs::read_to_string(&visible).expect("read"), a);

    // The same payload again changes nothing, as in the kubelet.
    assert!(!writer.write_str(&[(FLIP_FILE, &a)]).expect("same write"));
    assert_eq!(writer.current_dir_name().as_deref(), Some(first.as_str()));

    // A new payload: new data directory, old one gone, links added and
    // removed, no `..data_tmp` left behind.
    assert!(
        writer
            .write_str(&[(EXTRA_FILE, EXTRA_RULES)])
            .expect("second write")
    );
    let second = writer.current_dir_name().expect("..data is a link");
    assert_ne!(second, first);
    assert_eq!(timestamped_dirs(&dir), vec![second]);
    assert!(
        std::fs::symlink_metadata(&visible).is_err(),
        "{FLIP_FILE} is still there"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join(EXTRA_FILE)).expect("read"),
        EXTRA_RULES
    );
    assert!(std::fs::symlink_metadata(dir.join(DATA_TMP_LINK)).is_err());
}

/// A reloader of `dir` into a new store, after its startup reload stored the
/// first plan.
fn started(dir: &Path) -> (Arc<Store>, Reloader) {
    let store = Arc::new(Store::new());
    let reloader = Reloader::new(dir.to_owned(), store.clone());
    assert_eq!(
        reloader.reload(Trigger::Startup),
        ReloadResult::Stored { generation: 1 }
    );
    (store, reloader)
}

#[test]
fn the_reloader_skips_unchanged_files_unless_signalled() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FLIP_FILE), flip_rules('A')).expect("write");
    let (store, reloader) = started(&dir);
    assert_eq!(reloader.reload(Trigger::Watch), ReloadResult::Unchanged);
    assert_eq!(reloader.reload(Trigger::Interval), ReloadResult::Unchanged);
    assert_eq!(store.generation(), 1);
    // SIGHUP rebuilds what is there, changed or not.
    assert_eq!(
        reloader.reload(Trigger::Signal),
        ReloadResult::Stored { generation: 2 }
    );
    let status = reloader.state();
    assert_eq!(status.generation, 2);
    assert_eq!(status.history.successful_reloads, 2);
    assert_eq!(status.history.failed_reloads, 0);
    assert_eq!(status.rule_sets.len(), 1);
    assert_eq!(status.rule_sets[0].file_hash, hash_of(&flip_rules('A')));
}

#[test]
fn the_reloader_keeps_the_plan_while_a_file_is_empty_or_broken() {
    let (_parent, dir) = rules_dir();
    let file = dir.join(FLIP_FILE);
    std::fs::write(&file, flip_rules('A')).expect("write");
    let (store, reloader) = started(&dir);
    let before = served(&store);

    // Between an editor's truncate and its write.
    std::fs::write(&file, "").expect("truncate");
    match reloader.reload(Trigger::Watch) {
        ReloadResult::Failed { error } => assert!(
            error.contains(&format!("{FLIP_FILE}:1:1: file is empty")),
            "{error}"
        ),
        other => panic!("an empty file must fail the reload, got {other:?}"),
    }
    assert_eq!(store.generation(), 1);
    assert_eq!(served(&store), before);

    std::fs::write(&file, BROKEN_FLIP).expect("write broken");
    match reloader.reload(Trigger::Watch) {
        ReloadResult::Failed { error } => assert!(error.contains(BROKEN_FLIP_AT), "{error}"),
        other => panic!("a broken file must fail the reload, got {other:?}"),
    }
    assert_eq!(served(&store), before);
    let status = reloader.state();
    assert_eq!((status.generation, status.history.failed_reloads), (1, 2));
    assert!(
        status
            .history
            .last_error
            .as_deref()
            .is_some_and(|error| error.contains(BROKEN_FLIP_AT)),
        "{status:?}"
    );
    assert!(status.history.last_failure.is_some());

    std::fs::write(&file, flip_rules('B')).expect("write B");
    assert_eq!(
        reloader.reload(Trigger::Watch),
        ReloadResult::Stored { generation: 2 }
    );
    assert_eq!(
        served(&store),
        vec![("flip".to_owned(), hash_of(&flip_rules('B')))]
    );
    let status = reloader.state();
    assert_eq!(
        status.history.last_error, None,
        "a success clears the error"
    );
    assert_eq!(
        (
            status.history.successful_reloads,
            status.history.failed_reloads
        ),
        (2, 2)
    );
}

#[test]
fn a_rule_that_could_never_match_fails_the_reload_and_keeps_the_plan() {
    let (_parent, dir) = rules_dir();
    let file = dir.join(FLIP_FILE);
    std::fs::write(&file, flip_rules('A')).expect("write");
    let (store, reloader) = started(&dir);
    let before = served(&store);
    for (broken, expected) in [
        (
            flip_rules('B').replace("[pods, deployments]", "[pods, apps/deployments]"),
            "(write resource.group: deployments.apps)",
        ),
        (
            flip_rules('B').replace("labels.flip", "labels.flip-flop"),
            "$.object.metadata.labels['flip-flop']",
        ),
    ] {
        std::fs::write(&file, &broken).expect("write broken");
        match reloader.reload(Trigger::Watch) {
            ReloadResult::Failed { error } => assert!(error.contains(expected), "{error}"),
            other => panic!("a rule that never matches must fail the reload, got {other:?}"),
        }
        assert_eq!(store.generation(), 1);
        assert_eq!(served(&store), before);
    }
}

/// A store and reloader on `dir`, with a watcher reloading on every change
/// and counting the calls.
struct Watched {
    store: Arc<Store>,
    calls: Arc<AtomicUsize>,
    _watch: watcher::WatchHandle,
}

fn watched(dir: &Path) -> Watched {
    let (store, reloader) = started(dir);
    let reloader = Arc::new(reloader);
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let watch = watcher::spawn(dir.to_owned(), DEBOUNCE, move || {
        counter.fetch_add(1, Ordering::SeqCst);
        reloader.reload(Trigger::Watch);
    })
    .expect("watch");
    Watched {
        store,
        calls,
        _watch: watch,
    }
}

impl Watched {
    /// Waits until a generation above `generation` serves, and returns it.
    fn wait_past(&self, generation: u64, what: &str) -> u64 {
        wait_until(what, || self.store.generation() > generation);
        self.store.generation()
    }
}

#[test]
fn the_watcher_reloads_on_every_kubelet_swap() {
    let (_parent, dir) = rules_dir();
    let writer = AtomicWriter::new(&dir).expect("writer");
    writer
        .write_str(&[(FLIP_FILE, &flip_rules('A'))])
        .expect("write A");
    let watched = watched(&dir);
    let mut generation = 1;
    for swap in 1..=10 {
        let version = if swap % 2 == 1 { 'B' } else { 'A' };
        let text = flip_rules(version);
        writer.write_str(&[(FLIP_FILE, &text)]).expect("swap");
        let now = watched.wait_past(generation, &format!("swap {swap} to {version}"));
        assert_eq!(now, generation + 1, "one swap, one new plan");
        assert_eq!(
            served(&watched.store),
            vec![("flip".to_owned(), hash_of(&text))]
        );
        generation = now;
    }
    assert!(
        watched.calls.load(Ordering::SeqCst) >= 10,
        "one call per swap at least"
    );
}

#[test]
fn the_watcher_follows_a_directory_removed_and_created_again() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FLIP_FILE), flip_rules('A')).expect("write");
    let watched = watched(&dir);
    let mut generation = 1;
    for round in 1..=3 {
        // rm -rf; mkdir; write. The new directory often gets the inode
        // number of the old one back.
        std::fs::remove_dir_all(&dir).expect("rm -rf");
        std::fs::create_dir(&dir).expect("mkdir");
        let text = flip_rules(if round % 2 == 1 { 'B' } else { 'A' });
        std::fs::write(dir.join(FLIP_FILE), &text).expect("write");
        generation = watched.wait_past(generation, &format!("round {round}: replaced"));
        assert_eq!(served(&watched.store)[0].1, hash_of(&text));

        // An edit inside the new directory is seen too: it is watched.
        std::fs::write(dir.join(EXTRA_FILE), EXTRA_RULES).expect("add extra");
        generation = watched.wait_past(generation, &format!("round {round}: edit after"));
        assert_eq!(served(&watched.store).len(), 2);
        std::fs::remove_file(dir.join(EXTRA_FILE)).expect("remove extra");
        generation = watched.wait_past(generation, &format!("round {round}: removal after"));
        assert_eq!(served(&watched.store).len(), 1);
    }
}

#[test]
fn the_watcher_does_not_trigger_itself_by_reading() {
    let (_parent, dir) = rules_dir();
    std::fs::write(dir.join(FLIP_FILE), flip_rules('A')).expect("write");
    let watched = watched(&dir);
    std::fs::write(dir.join(FLIP_FILE), flip_rules('B')).expect("write B");
    watched.wait_past(1, "the edit");
    let calls = watched.calls.load(Ordering::SeqCst);
    assert!(calls >= 1);

    // The reload read the directory and its files. Reading must not count
    // as a change: over 20 debounce periods, no further call. (This waits
    // for something not to happen, so it has to wait the whole window.)
    let window = DEBOUNCE * 20;
    let started = Instant::now();
    while started.elapsed() < window {
        // Reads of our own, as a reload or `kubectl cp` would do.
        let _ = std::fs::read_dir(&dir).map(|entries| entries.count());
        let _ = std::fs::read_to_string(dir.join(FLIP_FILE));
        thread::sleep(DEBOUNCE / 2);
    }
    assert_eq!(
        watched.calls.load(Ordering::SeqCst),
        calls,
        "reads of the rules directory started reloads"
    );
    assert_eq!(watched.store.generation(), 2);
}

/// The hashes of each version's two files, as [`served`] lists them.
fn hashes_of(files: &[(String, String)]) -> Vec<(String, String)> {
    let mut hashes: Vec<(String, String)> = files
        .iter()
        .map(|(name, text)| (name.trim_end_matches(".yaml").to_owned(), hash_of(text)))
        .collect();
    hashes.sort();
    hashes
}

#[test]
fn a_reload_during_kubelet_swaps_never_mixes_two_versions() {
    // Two files per version: a read that got one file of each version would
    // give a plan whose file hashes mix A and B.
    let (_parent, dir) = rules_dir();
    let writer = AtomicWriter::new(&dir).expect("writer");
    let versions: Vec<Vec<(String, String)>> = ['A', 'B']
        .iter()
        .map(|version| {
            let extra = EXTRA_RULES.replace("extra denies", &format!("{version} denies"));
            vec![
                (EXTRA_FILE.to_owned(), extra),
                (FLIP_FILE.to_owned(), flip_rules(*version)),
            ]
        })
        .collect();
    let consistent: Vec<Vec<(String, String)>> = versions.iter().map(|v| hashes_of(v)).collect();
    let write = |writer: &AtomicWriter, files: &[(String, String)]| {
        let files: Vec<(&str, &str)> = files
            .iter()
            .map(|(name, text)| (name.as_str(), text.as_str()))
            .collect();
        writer.write_str(&files).expect("kubelet write");
    };
    write(&writer, &versions[0]);
    let store = Arc::new(Store::new());
    let reloader = Reloader::new(dir.clone(), store.clone());
    assert!(matches!(
        reloader.reload(Trigger::Startup),
        ReloadResult::Stored { .. }
    ));

    // Swap without pause while reloading without pause, both bounded: most
    // reads overlap a swap, and many overlap one in each of their tries.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (writer, stop, versions) = (writer.clone(), stop.clone(), versions.clone());
        thread::spawn(move || {
            let mut swaps = 0;
            while !stop.load(Ordering::SeqCst) && swaps < 2_000 {
                write(&writer, &versions[(swaps + 1) % 2]);
                swaps += 1;
            }
            swaps
        })
    };
    let started = Instant::now();
    let (mut stored, mut gave_up) = (0, 0);
    let mut problems = Vec::new();
    while stored < 300 && started.elapsed() < Duration::from_secs(10) && problems.len() < 5 {
        match reloader.reload(Trigger::Signal) {
            ReloadResult::Stored { .. } => {
                stored += 1;
                let mut served = served(&store);
                served.sort();
                if !consistent.contains(&served) {
                    problems.push(format!("a plan mixing two versions: {served:?}"));
                }
            }
            // Allowed: the link moved during every try, and the old plan
            // was kept. Any other failure (a file of a data directory
            // removed mid-read) is a spurious error report.
            ReloadResult::Failed { error } if error.contains("the link moved during each") => {
                gave_up += 1;
            }
            ReloadResult::Failed { error } => problems.push(format!("a failed reload: {error}")),
            ReloadResult::Unchanged => problems.push("SIGHUP must always rebuild".to_owned()),
        }
    }
    stop.store(true, Ordering::SeqCst);
    let swaps = swapper.join().expect("swapper");
    let summary = format!("{swaps} swaps, {stored} plans stored, {gave_up} reads given up");
    eprintln!("{summary}");
    assert!(problems.is_empty(), "{summary}:\n{}", problems.join("\n"));
    assert!(swaps >= 20 && stored >= 20, "{summary}");
}

#[test]
fn an_emptied_directory_never_replaces_rules_that_serve() {
    let (_parent, dir) = rules_dir();
    let file = dir.join(FLIP_FILE);
    std::fs::write(&file, flip_rules('A')).expect("write");
    let (store, reloader) = started(&dir);
    let before = served(&store);

    // Between `rm -rf dir; mkdir dir` and the new files the directory is empty.
    std::fs::remove_file(&file).expect("remove");
    let outcome = reloader.reload(Trigger::Watch);
    assert!(
        matches!(&outcome, ReloadResult::Failed { error } if error.contains("no rule files")),
        "{outcome:?}"
    );
    assert_eq!(store.generation(), 1);
    assert_eq!(served(&store), before);

    std::fs::write(&file, flip_rules('B')).expect("write");
    assert_eq!(
        reloader.reload(Trigger::Watch),
        ReloadResult::Stored { generation: 2 }
    );

    // An empty directory at startup is a plan without rules: kadmit admits
    // everything until rules arrive.
    let (_other_parent, empty) = rules_dir();
    let fresh = Reloader::new(empty, Arc::new(Store::new()));
    assert_eq!(
        fresh.reload(Trigger::Startup),
        ReloadResult::Stored { generation: 1 }
    );
}
