//! `serve --record DIR`: the reviews kadmit answers, written as JSON lines
//! for `kadmit replay`, off the request path.
//!
//! Each line is the AdmissionReview as the API server sent it, with the
//! response kadmit gave, so `kadmit replay --rules NEW DIR` compares a new
//! rule version with what was answered. Before it is written:
//!
//! - `metadata.managedFields` is dropped from `object` and `oldObject`;
//! - a Secret's `data` and `stringData` keep their keys, each value
//!   replaced by `""`, and its `kubectl.kubernetes.io/last-applied-configuration`
//!   annotation (the whole manifest `kubectl apply` applied) is dropped. A
//!   review is of a Secret when the request's kind or resource, or the
//!   object's kind, says so.
//!
//! Everything else is kept: names, namespaces, labels, the requesting user
//! and groups. The directory holds `reviews.jsonl` and at most
//! [`ROTATED_FILES`] older files (`reviews.jsonl.1` is the newest); a file is
//! rotated once it holds a quarter of `--record-max-bytes`, so the directory
//! stays within that bound plus, in each file, the line that crossed it.
//!
//! A handler only hands the body and the answer (both already in memory) to
//! a bounded queue; a thread of its own parses, redacts and writes. When the
//! queue holds [`MAX_QUEUED_BYTES`], further reviews are not recorded and
//! are counted (`kadmit_recorded_reviews_total{result="dropped"}`): a slow
//! disk never slows a review.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};

use actix_web::web::Bytes;
use serde_json::Value;

use crate::log_throttle::LogThrottle;
use crate::metrics;

/// Bytes of bodies and answers waiting to be written, at most.
pub const MAX_QUEUED_BYTES: usize = 32 << 20;
/// Reviews waiting to be written, at most, however small.
pub const MAX_QUEUED_REVIEWS: usize = 4096;
/// Older files kept beside the one being written.
pub const ROTATED_FILES: usize = 3;
/// The file being written.
pub const FILE_NAME: &str = "reviews.jsonl";
/// Least time between two log lines of reviews not recorded: a full disk
/// fails every review, and a line for each would flood the log the
/// operator reads to find out why. The metric counts every one.
pub const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Hands answered reviews to the recording thread.
#[derive(Debug, Clone)]
pub struct Recorder {
    queue: SyncSender<Entry>,
    queued_bytes: Arc<AtomicUsize>,
}

#[derive(Debug)]
struct Entry {
    body: Bytes,
    answer: Bytes,
    endpoint: &'static str,
    rule_set: Option<String>,
}

impl Recorder {
    /// Starts recording into `dir` (created if missing), keeping at most
    /// `max_bytes` there.
    pub fn start(dir: &Path, max_bytes: u64) -> io::Result<Recorder> {
        // Only kadmit's user reads what it records (names, users, labels).
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        builder.mode(0o700);
        builder.create(dir)?;
        #[cfg(unix)]
        if let Some(mode) = open_to_others(dir)? {
            // The operator chose the directory, and may share it on
            // purpose (a group that collects recordings): say so, but do
            // not change its permissions behind their back.
            tracing::warn!(
                dir = %dir.display(),
                mode = format!("{mode:03o}"),
                "The --record directory lets users other than kadmit's list or enter it: it \
                 existed already and keeps its permissions (a directory kadmit creates is 700). \
                 The recordings hold names, users and labels; chmod 700 it unless it is shared \
                 on purpose"
            );
        }
        let files = Files::open(dir, (max_bytes / (ROTATED_FILES as u64 + 1)).max(1))?;
        let (recorder, entries) = Recorder::queued();
        let writer_queued = recorder.queued_bytes.clone();
        std::thread::Builder::new()
            .name("kadmit-record".to_owned())
            .spawn(move || write_all(entries, files, &writer_queued))?;
        Ok(recorder)
    }

    /// A recorder and the receiving end of its queue, which nothing takes
    /// from yet: [`Recorder::start`] hands it to the recording thread, a
    /// test holds it to fill the queue.
    fn queued() -> (Recorder, Receiver<Entry>) {
        let (queue, entries) = sync_channel(MAX_QUEUED_REVIEWS);
        let recorder = Recorder {
            queue,
            queued_bytes: Arc::new(AtomicUsize::new(0)),
        };
        (recorder, entries)
    }

    /// Queues one answered review (and which endpoint answered it, for
    /// which rule set) and returns true, or counts it as dropped and returns
    /// false when the queue is full. Never blocks.
    pub fn offer(
        &self,
        body: &Bytes,
        answer: Bytes,
        endpoint: &'static str,
        rule_set: Option<&str>,
    ) -> bool {
        let size = body.len() + answer.len();
        let queued = self.queued_bytes.fetch_add(size, Ordering::SeqCst);
        if queued + size > MAX_QUEUED_BYTES {
            self.queued_bytes.fetch_sub(size, Ordering::SeqCst);
            metrics::record_recorded_review(metrics::RECORD_DROPPED);
            return false;
        }
        let entry = Entry {
            // A copy: the body may share the connection's read buffer,
            // which a slice kept here would pin beyond what is counted.
            body: Bytes::copy_from_slice(body),
            answer,
            endpoint,
            rule_set: rule_set.map(str::to_owned),
        };
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.queue.try_send(entry)
        {
            self.queued_bytes.fetch_sub(size, Ordering::SeqCst);
            metrics::record_recorded_review(metrics::RECORD_DROPPED);
            return false;
        }
        true
    }
}

/// The recording thread: until every sender is gone.
fn write_all(entries: Receiver<Entry>, mut files: Files, queued_bytes: &AtomicUsize) {
    let failures = LogThrottle::new(1, FAILURE_LOG_INTERVAL);
    for entry in entries {
        let size = entry.body.len() + entry.answer.len();
        let line = recordable(&entry);
        queued_bytes.fetch_sub(size, Ordering::SeqCst);
        let result = line.and_then(|line| files.write_line(&line));
        match result {
            Ok(()) => metrics::record_recorded_review(metrics::RECORD_WRITTEN),
            Err(error) => {
                metrics::record_recorded_review(metrics::RECORD_FAILED);
                if let Some(unlogged) = failures.admit(Instant::now()) {
                    tracing::warn!(
                        %error,
                        not_logged_before = unlogged,
                        "Cannot record a review (logged at most every 10 s; \
                         kadmit_recorded_reviews_total{{result=\"failed\"}} counts each)"
                    );
                }
            }
        }
    }
}

/// The line of `entry`, or why it is not recorded.
fn recordable(entry: &Entry) -> io::Result<Vec<u8>> {
    if crate::review::may_parse_over(&entry.body, crate::review::MAX_KEPT_PARSED_BYTES) {
        return Err(io::Error::other(format!(
            "the review would take more than {} bytes to parse",
            crate::review::MAX_KEPT_PARSED_BYTES
        )));
    }
    let line =
        line(entry).ok_or_else(|| io::Error::other("the review or its answer is not JSON"))?;
    // `kadmit replay` reads values of at most 16 MiB: a longer line (a uid
    // of megabytes, echoed in the answer) would stop it there.
    if line.len() as u64 > crate::audit::MAX_OBJECT_BYTES {
        return Err(io::Error::other(format!(
            "the review and its answer are {} bytes, over the {} a replay reads",
            line.len(),
            crate::audit::MAX_OBJECT_BYTES
        )));
    }
    Ok(line)
}

/// One line: the review with its answer's `response`, redacted, and under
/// `kadmit` the endpoint (`validate`, `mutate`) and rule set that answered.
fn line(entry: &Entry) -> Option<Vec<u8>> {
    let mut review: Value = serde_json::from_slice(&entry.body).ok()?;
    let answer: Value = serde_json::from_slice(&entry.answer).ok()?;
    crate::review::redact(&mut review);
    let response = answer.get("response")?.clone();
    let fields = review.as_object_mut()?;
    fields.insert("response".to_owned(), response);
    fields.insert(
        "kadmit".to_owned(),
        serde_json::json!({ "endpoint": entry.endpoint, "ruleSet": entry.rule_set }),
    );
    let mut line = serde_json::to_vec(&review).ok()?;
    line.push(b'\n');
    Some(line)
}

/// The permission bits of `dir` when they give its group or other users
/// any access to it.
#[cfg(unix)]
fn open_to_others(dir: &Path) -> io::Result<Option<u32>> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
    Ok((mode & 0o077 != 0).then_some(mode))
}

/// Opens a recording to append to: readable by kadmit's user only, never
/// through a symbolic link planted in its place, and a regular file: a FIFO
/// planted there blocked the open, at startup before the server listened,
/// and for good on the recording thread. The open does not block, and
/// what it opened is checked.
fn append(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    options
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY);
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    Ok(file)
}

/// The file being written and its rotation.
struct Files {
    dir: PathBuf,
    file: File,
    written: u64,
    max_file_bytes: u64,
}

impl Files {
    fn open(dir: &Path, max_file_bytes: u64) -> io::Result<Self> {
        let path = dir.join(FILE_NAME);
        let file = append(&path)?;
        let written = file.metadata()?.len();
        Ok(Files {
            dir: dir.to_owned(),
            file,
            written,
            max_file_bytes,
        })
    }

    fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        self.reopen_if_replaced()?;
        if self.written > 0 && self.written + line.len() as u64 > self.max_file_bytes {
            self.rotate()?;
        }
        // One write of the whole line, unbuffered: it is on disk before the
        // next review is taken. When it fails part way (a full disk), what
        // reached the file is cut off again, so the next line starts a
        // line of its own and a reader never meets half a review.
        if let Err(error) = self.file.write_all(line) {
            let _ = self.file.set_len(self.written);
            return Err(error);
        }
        self.written += line.len() as u64;
        Ok(())
    }

    /// Opens `reviews.jsonl` again when what its name holds is no longer
    /// the file kadmit writes: someone deleted or moved it (a clean-up job,
    /// an operator taking a copy with `mv`) or put another file there.
    /// Lines written to a file no name leads to are lost, and rotating
    /// would find no file to move; so the name is looked up before each
    /// line (two `stat` calls, on the recording thread).
    fn reopen_if_replaced(&mut self) -> io::Result<()> {
        let path = self.dir.join(FILE_NAME);
        let current = match std::fs::symlink_metadata(&path) {
            Ok(named) => same_file(&self.file.metadata()?, &named),
            Err(error) if error.kind() == io::ErrorKind::NotFound => false,
            Err(error) => return Err(error),
        };
        if !current {
            self.reopen()?;
        }
        Ok(())
    }

    /// Opens `reviews.jsonl` anew (created `0600` when missing, refused
    /// when a symbolic link stands there) and appends to it from its end.
    fn reopen(&mut self) -> io::Result<()> {
        let file = append(&self.dir.join(FILE_NAME))?;
        self.written = file.metadata()?.len();
        self.file = file;
        Ok(())
    }

    /// `reviews.jsonl` → `.1` → … → `.N`, the oldest dropped.
    ///
    /// `reviews.jsonl` is moved aside (to `.0`) first, and the older files
    /// shift only once it has: when it cannot be moved, they stay as they
    /// are. Shifting first lost them all when the file had been deleted:
    /// each review shifted again, deleting the oldest, and then failed.
    fn rotate(&mut self) -> io::Result<()> {
        let staged = self.rotated(0);
        // A rotation that stopped after moving the file aside (a rename
        // that failed) left it there: finish that one first, so that this
        // one does not replace it.
        if std::fs::symlink_metadata(&staged).is_ok() {
            self.shift()?;
        }
        std::fs::rename(self.dir.join(FILE_NAME), &staged)?;
        self.shift()?;
        self.reopen()
    }

    /// `.N` dropped, then `.N-1` → `.N`, …, `.0` → `.1`; a missing one
    /// skipped.
    fn shift(&self) -> io::Result<()> {
        match std::fs::remove_file(self.rotated(ROTATED_FILES)) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
            _ => {}
        }
        for n in (0..ROTATED_FILES).rev() {
            match std::fs::rename(self.rotated(n), self.rotated(n + 1)) {
                Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
                _ => {}
            }
        }
        Ok(())
    }

    /// `reviews.jsonl.n`.
    fn rotated(&self, n: usize) -> PathBuf {
        self.dir.join(format!("{FILE_NAME}.{n}"))
    }
}

/// Whether `open` (of a file kadmit holds open) and `named` (of what a
/// name leads to, the link itself for a link) are of one file.
#[cfg(unix)]
fn same_file(open: &std::fs::Metadata, named: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    open.dev() == named.dev() && open.ino() == named.ino()
}

/// Without inode numbers, a file found under the name is taken for the one
/// open.
#[cfg(not(unix))]
fn same_file(_open: &std::fs::Metadata, named: &std::fs::Metadata) -> bool {
    named.is_file()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn secrets_keep_their_keys_and_lose_their_values_and_managed_fields_go() {
        let mut review = json!({"request": {
            "object": {"kind": "Secret", "metadata": {"name": "s", "managedFields": [{}]},
                       "data": {"password": "c2VjcmV0"}, "stringData": {"token": "t"}},
            "oldObject": {"kind": "ConfigMap", "metadata": {"managedFields": [{}]},
                          "data": {"kept": "yes"}}
        }});
        crate::review::redact(&mut review);
        let object = &review["request"]["object"];
        assert_eq!(object["data"], json!({"password": ""}));
        assert_eq!(object["stringData"], json!({"token": ""}));
        assert!(object["metadata"].get("managedFields").is_none());
        let old = &review["request"]["oldObject"];
        assert_eq!(old["data"]["kept"], "yes", "only Secrets lose values");
        assert!(old["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn a_secret_loses_the_manifest_kubectl_apply_kept_of_it() {
        let applied =
            r#"{"apiVersion":"v1","data":{"password":"U1VQRVJTRUNSRVQ="},"kind":"Secret"}"#;
        let annotations = json!({
            "kubectl.kubernetes.io/last-applied-configuration": applied,
            "team": "a"
        });
        // Named a Secret by the object, or only by the request (an object
        // without kind).
        for review in [
            json!({"request": {"object": {"kind": "Secret", "metadata": {"annotations": annotations},
                                          "data": {"password": "U1VQRVJTRUNSRVQ="}}}}),
            json!({"request": {"kind": {"group": "", "version": "v1", "kind": "Secret"},
                               "object": {"metadata": {"annotations": annotations},
                                          "data": {"password": "U1VQRVJTRUNSRVQ="}}}}),
            json!({"request": {"resource": {"group": "", "version": "v1", "resource": "secrets"},
                               "oldObject": {"metadata": {"annotations": annotations},
                                             "stringData": {"password": "x"}}}}),
        ] {
            let mut review = review;
            crate::review::redact(&mut review);
            let text = review.to_string();
            assert!(
                !text.contains("U1VQRVJTRUNSRVQ") && !text.contains(r#""x""#),
                "{text}"
            );
            assert!(
                text.contains(r#""team":"a""#),
                "other annotations stay: {text}"
            );
        }
        // Another kind keeps the annotation: it is the manifest applied.
        let mut config = json!({"request": {"object": {"kind": "ConfigMap",
            "metadata": {"annotations": annotations}}}});
        crate::review::redact(&mut config);
        assert!(config.to_string().contains("last-applied-configuration"));
    }

    #[test]
    fn a_line_is_the_review_with_its_response() {
        let entry = |body: &'static [u8]| {
            Entry {
            body: Bytes::from_static(body),
            answer: Bytes::from_static(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":false}}"#),
            endpoint: "validate",
            rule_set: Some("pods".to_owned()),
        }
        };
        let written = line(&entry(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}"#)).expect("a line");
        assert_eq!(written.last(), Some(&b'\n'));
        let value: Value = serde_json::from_slice(&written).expect("JSON");
        assert_eq!(value["request"]["uid"], "u");
        assert_eq!(value["response"]["allowed"], false);
        assert_eq!(value["kadmit"]["endpoint"], "validate");
        assert_eq!(value["kadmit"]["ruleSet"], "pods");
        assert!(line(&entry(b"not json")).is_none());
    }

    #[cfg(unix)]
    #[test]
    fn recordings_are_private_and_never_written_through_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().expect("tempdir");
        let dir = parent.path().join("recordings");
        let recorder = Recorder::start(&dir, 1 << 20).expect("start");
        drop(recorder);
        let mode = |path: &Path| {
            std::fs::metadata(path)
                .expect("metadata")
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join(FILE_NAME)), 0o600);

        // A link planted where the file goes is refused, not followed.
        let planted = tempfile::tempdir().expect("tempdir");
        let target = planted.path().join("elsewhere");
        std::fs::write(&target, "").expect("write");
        std::os::unix::fs::symlink(&target, planted.path().join(FILE_NAME)).expect("symlink");
        assert!(Files::open(planted.path(), 1 << 20).is_err());
        // So is a FIFO, without blocking (a plain open waits for a reader
        // for good, so it runs on a thread with a deadline).
        let fifo = tempfile::tempdir().expect("tempdir");
        let made = std::process::Command::new("mkfifo")
            .arg(fifo.path().join(FILE_NAME))
            .status()
            .expect("run mkfifo");
        assert!(made.success(), "mkfifo failed");
        let (sender, receiver) = std::sync::mpsc::channel();
        let dir = fifo.path().to_owned();
        std::thread::spawn(move || {
            let _ = sender.send(Files::open(&dir, 1 << 20).is_err());
        });
        let refused = receiver
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("the open blocked");
        assert!(refused, "a FIFO was opened as a recording");
        assert_eq!(std::fs::read(&target).expect("read").len(), 0);
    }

    #[test]
    fn a_line_replay_could_not_read_is_not_recorded() {
        let uid = "u".repeat(9 << 20);
        let entry = Entry {
            body: Bytes::from(format!(r#"{{"request":{{"uid":"{uid}"}}}}"#)),
            answer: Bytes::from(format!(
                r#"{{"response":{{"uid":"{uid}","allowed":true}}}}"#
            )),
            endpoint: "validate",
            rule_set: None,
        };
        let error = recordable(&entry).expect_err("over 16 MiB");
        assert!(
            error
                .to_string()
                .contains("over the 16777216 a replay reads"),
            "{error}"
        );
        let small = Entry {
            body: Bytes::from_static(br#"{"request":{"uid":"u"}}"#),
            answer: Bytes::from_static(br#"{"response":{"uid":"u","allowed":true}}"#),
            endpoint: "validate",
            rule_set: None,
        };
        assert!(recordable(&small).is_ok());
    }

    #[test]
    fn a_review_beyond_the_queue_bound_is_dropped_not_queued() {
        let dir = tempfile::tempdir().expect("tempdir");
        let recorder = Recorder::start(dir.path(), 1 << 20).expect("start");
        let answer = Bytes::from_static(b"{}");
        let too_big = Bytes::from(vec![b' '; MAX_QUEUED_BYTES]);
        assert!(!recorder.offer(&too_big, answer.clone(), "validate", None));
        assert_eq!(
            recorder.queued_bytes.load(Ordering::SeqCst),
            0,
            "nothing held"
        );
        let small = Bytes::from_static(br#"{"request":{"uid":"u"}}"#);
        assert!(recorder.offer(&small, answer, "validate", None));
    }

    #[test]
    fn reviews_beyond_the_queue_s_count_are_dropped_however_small() {
        let (recorder, entries) = Recorder::queued();
        let body = Bytes::from_static(br#"{"request":{"uid":"u"}}"#);
        let answer = Bytes::from_static(b"{}");
        let queued = (0..MAX_QUEUED_REVIEWS + 3)
            .filter(|_| recorder.offer(&body, answer.clone(), "validate", None))
            .count();
        assert_eq!(queued, MAX_QUEUED_REVIEWS);
        let held = recorder.queued_bytes.load(Ordering::SeqCst);
        assert_eq!(
            held,
            MAX_QUEUED_REVIEWS * (body.len() + answer.len()),
            "the dropped reviews' bytes are given back"
        );
        assert_eq!(entries.try_iter().count(), MAX_QUEUED_REVIEWS);
    }

    #[test]
    fn files_rotate_and_the_directory_stays_within_its_bound() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut files = Files::open(dir.path(), 1000).expect("open");
        let line = [b'x'; 99]
            .iter()
            .copied()
            .chain([b'\n'])
            .collect::<Vec<u8>>();
        for _ in 0..100 {
            files.write_line(&line).expect("write");
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "reviews.jsonl",
                "reviews.jsonl.1",
                "reviews.jsonl.2",
                "reviews.jsonl.3"
            ]
        );
        let total: u64 = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|entry| entry.expect("entry").metadata().expect("size").len())
            .sum();
        assert!(total <= 4 * 1000, "{total} bytes");
    }

    /// The lines of `path`, empty when it is missing.
    fn lines_of(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// A line of 100 bytes with `text` at its start.
    fn line_of(text: &str) -> Vec<u8> {
        format!("{text:-<99}\n").into_bytes()
    }

    /// A directory holding `reviews.jsonl` and its three older files, and
    /// the files open on it, 1,000 bytes each.
    fn rotated_files() -> (tempfile::TempDir, Files) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut files = Files::open(dir.path(), 1000).expect("open");
        for i in 0..45 {
            files
                .write_line(&line_of(&format!("old-{i}")))
                .expect("write");
        }
        (dir, files)
    }

    /// The contents of `reviews.jsonl.1` … `.3`.
    fn older(dir: &Path) -> Vec<Vec<String>> {
        (1..=ROTATED_FILES)
            .map(|n| lines_of(&dir.join(format!("{FILE_NAME}.{n}"))))
            .collect()
    }

    #[test]
    fn a_deleted_or_moved_file_is_opened_anew_and_the_older_files_stay() {
        let (dir, mut files) = rotated_files();
        let kept = older(dir.path());
        assert!(kept.iter().all(|lines| lines.len() == 10), "{kept:?}");
        let current = dir.path().join(FILE_NAME);

        // Deleted by someone else: the next lines go to a new file, and
        // nothing older is rotated away, however many come.
        std::fs::remove_file(&current).expect("delete");
        for i in 0..3 {
            files
                .write_line(&line_of(&format!("new-{i}")))
                .expect("write");
        }
        assert_eq!(older(dir.path()), kept);
        let new: Vec<String> = (0..3)
            .map(|i| String::from_utf8(line_of(&format!("new-{i}"))).expect("UTF-8"))
            .map(|line| line.trim_end().to_owned())
            .collect();
        assert_eq!(lines_of(&current), new);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&current)
                .expect("metadata")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }

        // Moved away: the moved file gets no more lines, a new one does,
        // and the files rotate as before once it is full.
        let moved = dir.path().join("taken.jsonl");
        std::fs::rename(&current, &moved).expect("move");
        files.write_line(&line_of("after-move")).expect("write");
        assert_eq!(lines_of(&moved), new);
        assert_eq!(lines_of(&current).len(), 1);
        for i in 0..10 {
            files
                .write_line(&line_of(&format!("more-{i}")))
                .expect("write");
        }
        let shifted = older(dir.path());
        assert_eq!(shifted[1], kept[0], "rotated once: .1 became .2");
        assert!(shifted[0][0].starts_with("after-move"), "{shifted:?}");
    }

    #[test]
    fn rotating_a_file_that_is_gone_leaves_the_older_files_as_they_are() {
        let (dir, mut files) = rotated_files();
        let kept = older(dir.path());
        std::fs::remove_file(dir.path().join(FILE_NAME)).expect("delete");
        // Shifting first dropped `.3` at each attempt, then failed.
        for _ in 0..ROTATED_FILES + 1 {
            assert!(files.rotate().is_err());
        }
        assert_eq!(older(dir.path()), kept);
    }

    #[test]
    fn a_rotation_left_half_done_is_finished_before_the_next() {
        let (dir, mut files) = rotated_files();
        let kept = older(dir.path());
        let current = lines_of(&dir.path().join(FILE_NAME));
        // The file moved aside by a rotation whose renames then failed.
        let staged = dir.path().join(format!("{FILE_NAME}.0"));
        std::fs::write(&staged, "staged\n").expect("write");
        files.rotate().expect("rotate");
        assert!(!staged.exists());
        assert_eq!(
            older(dir.path()),
            [current, vec!["staged".to_owned()], kept[0].clone()]
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_link_put_in_the_file_s_place_is_not_written_through() {
        let (dir, mut files) = rotated_files();
        let planted = tempfile::tempdir().expect("tempdir");
        let target = planted.path().join("elsewhere");
        std::fs::write(&target, "").expect("write");
        let current = dir.path().join(FILE_NAME);
        std::fs::remove_file(&current).expect("delete");
        std::os::unix::fs::symlink(&target, &current).expect("symlink");
        assert!(files.write_line(&line_of("refused")).is_err());
        assert_eq!(std::fs::read(&target).expect("read").len(), 0);
    }

    #[cfg(unix)]
    #[test]
    fn an_existing_directory_open_to_others_is_noticed_and_left_as_it_is() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().expect("tempdir");
        let made = parent.path().join("made");
        drop(Recorder::start(&made, 1 << 20).expect("start"));
        assert_eq!(open_to_others(&made).expect("mode"), None);

        let shared = parent.path().join("shared");
        std::fs::create_dir(&shared).expect("mkdir");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o750)).expect("chmod");
        assert_eq!(open_to_others(&shared).expect("mode"), Some(0o750));
        drop(Recorder::start(&shared, 1 << 20).expect("start"));
        let mode = std::fs::metadata(&shared)
            .expect("metadata")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o750, "not changed");
    }
}
