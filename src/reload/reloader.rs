//! The reload loop: one thread that, when asked (by the watcher, SIGHUP or
//! the interval timer), reads the rules directory, compiles, and stores the
//! new plan in one swap, or keeps the old plan and reports why.
//!
//! Nothing else reloads, and nothing waits for a reload: asking is a send on
//! a channel (requests made meanwhile merge into one reload), and the
//! status is what the loop publishes after each reload (the plan it left
//! serving and how reloads went, in one swap), so `/healthz`, `/status` and
//! the dashboard answer while a reload runs, however long it takes.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use serde::Serialize;

use super::store::Store;
use crate::eval::EvalOptions;
use crate::plan::{Plan, compile};
use crate::rules::{Diagnostics, DirRead, FileCache, LoadError, read_dir};
use crate::shadow::{self, RecentReviews, ShadowReport};

/// What started a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The server is starting.
    Startup,
    /// The watcher saw the directory change.
    Watch,
    /// SIGHUP: rebuild even when the files look unchanged.
    Signal,
    /// The periodic re-read.
    Interval,
}

impl Trigger {
    /// Lowercase name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Startup => "startup",
            Trigger::Watch => "watch",
            Trigger::Signal => "signal",
            Trigger::Interval => "interval",
        }
    }
}

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadResult {
    /// A new plan serves.
    Stored {
        /// Its generation.
        generation: u64,
    },
    /// The files are the ones last read: nothing was rebuilt.
    Unchanged,
    /// The files did not compile (or could not be read); the old plan serves.
    Failed {
        /// Every problem, one per line.
        error: String,
    },
}

impl ReloadResult {
    /// `success`, `unchanged` or `failure`, for metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            ReloadResult::Stored { .. } => "success",
            ReloadResult::Unchanged => "unchanged",
            ReloadResult::Failed { .. } => "failure",
        }
    }
}

/// A loaded rule set, as `/status` shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RuleSetState {
    /// Name.
    pub name: String,
    /// File it came from.
    pub file: String,
    /// Number of rules.
    pub rules: usize,
    /// Content hash of the file.
    pub file_hash: String,
}

/// The state of reloading, served by `GET /status`.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadState {
    /// The rules directory.
    pub rules_dir: String,
    /// Generation of the plan serving; 0 before the first.
    pub generation: u64,
    /// True once a plan serves.
    pub ready: bool,
    /// The rule sets of the plan serving.
    pub rule_sets: Vec<RuleSetState>,
    /// How reloads went.
    #[serde(flatten)]
    pub history: ReloadHistory,
    /// When the reload in progress started (RFC 3339), if one is: a reload
    /// that never ends (a file system that stops answering) shows here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reloading_since: Option<String>,
}

/// Shadowing new plans before they serve (see [`crate::shadow`]).
#[derive(Debug, Clone)]
pub struct Shadowing {
    /// The recent reviews to compare on.
    pub recent: Arc<RecentReviews>,
    /// Keep the serving plan when the new one would deny more than this many
    /// recent reviews that were admitted (`--reload-max-new-denials`);
    /// SIGHUP stores it anyway.
    pub max_new_denials: Option<u64>,
    /// How the reviews are evaluated (each within its budget).
    pub options: EvalOptions,
}

/// How reloads went since start (part of `GET /status` and the dashboard).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadHistory {
    /// When a plan was last stored (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_success: Option<String>,
    /// When a reload last failed (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// The error of the last failed reload, while it is newer than the last success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Successful reloads since start.
    pub successful_reloads: u64,
    /// Failed reloads since start.
    pub failed_reloads: u64,
    /// What the last plan compared on the recent reviews would have decided
    /// differently from the plan then serving.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_shadow: Option<ShadowReport>,
}

impl ReloadHistory {
    /// Records a successful reload now.
    fn succeeded(&mut self) {
        self.last_success = Some(now_rfc3339());
        self.last_error = None;
        self.successful_reloads += 1;
    }

    fn failed(&mut self, error: &str) {
        self.last_failure = Some(now_rfc3339());
        self.last_error = Some(error.to_owned());
        self.failed_reloads += 1;
    }
}

/// Why a reload kept the old plan.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The directory could not be listed, or the kubelet's `..data` link
    /// kept moving.
    #[error(transparent)]
    Read(#[from] LoadError),
    /// The files changed between every two reads [`SETTLE_TRIES`] times.
    #[error(
        "{dir}: the rule files changed during each of {tries} reads {settle_ms} ms apart; \
         keeping the previous plan until they settle"
    )]
    Unsettled {
        /// The rules directory.
        dir: String,
        /// Reads compared.
        tries: usize,
        /// The interval between two reads.
        settle_ms: u128,
    },
    /// Reading or compiling the rules panicked: a bug in kadmit.
    #[error(
        "the reload failed unexpectedly (a bug in kadmit; please report it); the plan serving \
         stays, and the next change of the files or SIGHUP tries again"
    )]
    Panicked,
    /// The directory holds no rule files while rules serve.
    #[error(
        "{dir}: no rule files; the rules that serve stay (to remove every rule, \
         delete the webhook configurations)"
    )]
    Emptied {
        /// The rules directory.
        dir: String,
    },
    /// The rules have problems, one per line.
    #[error("{0}")]
    Rules(Diagnostics),
    /// The new plan would deny more recent reviews than allowed.
    #[error(
        "the new rules would deny {newly_denied} reviews that the rules serving admitted (of \
         the last {reviews} answered), more than --reload-max-new-denials {max}; the previous \
         plan stays (send SIGHUP to load the new rules anyway). First changes: {examples}"
    )]
    HeldBack {
        /// Reviews admitted now that the new plan denies.
        newly_denied: u64,
        /// Reviews compared.
        reviews: u64,
        /// The limit.
        max: u64,
        /// The first changed decisions, in words.
        examples: String,
    },
    /// The comparison stopped at its time bound, so
    /// `--reload-max-new-denials` could not be checked.
    #[error(
        "comparing the new rules with the last {reviews} reviews answered stopped after {secs} s \
         with {not_compared} of them not compared, so --reload-max-new-denials {max} cannot be \
         checked; the previous plan stays (send SIGHUP to load the new rules anyway)",
        secs = shadow::MAX_COMPARE_TIME.as_secs()
    )]
    NotCompared {
        /// Reviews left when the comparison stopped.
        not_compared: u64,
        /// Reviews kept.
        reviews: u64,
        /// The limit.
        max: u64,
    },
}

impl ReloadError {
    /// The error with its causes, one problem per line.
    fn report(&self) -> String {
        let mut message = self.to_string();
        if let ReloadError::Read(error) = self
            && let Some(source) = std::error::Error::source(error)
        {
            message = format!("{message}: {source}");
        }
        message
    }
}

/// What only the reload in progress touches.
#[derive(Debug, Default)]
struct State {
    /// Hash of the files last read, whether they compiled or not.
    last_hash: Option<[u8; 32]>,
    /// Where the kubelet's `..data` link pointed at that read.
    last_data: Option<PathBuf>,
    /// A rule file of the data directory found without its link, which
    /// one, and since when ([`UNLINKED_PATIENCE`]).
    unlinked: Option<(PathBuf, String, Instant)>,
    /// The files parsed by earlier reloads.
    cache: FileCache,
    /// The comparison of the last plan built, to publish with the history.
    last_shadow: Option<ShadowReport>,
    /// Panic once the next build has read the files, as a bug would.
    #[cfg(test)]
    panic_once: bool,
}

/// Rebuilds the plan from a directory into a store.
///
/// [`Reloader::reload`] is one step of the reload loop ([`spawn_loop`]);
/// [`Reloader::state`] never waits for it: it reads what the last reload
/// published.
#[derive(Debug)]
pub struct Reloader {
    dir: PathBuf,
    store: Arc<Store>,
    settle: Duration,
    /// Published after each reload, read without locking.
    published: ArcSwap<Published>,
    /// Serialises reloads; `status` never takes it.
    state: Mutex<State>,
    shadowing: Option<Shadowing>,
    /// When the reload in progress started, published for `/status`.
    reloading_since: ArcSwap<Option<String>>,
}

/// What a reload leaves: the plan serving and the history that led to it,
/// published together so that `/status` never pairs a new plan with the
/// history from before it (a generation stored, its success not yet
/// counted, the error it fixed still shown).
#[derive(Debug, Default)]
struct Published {
    plan: Option<Arc<Plan>>,
    history: ReloadHistory,
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// How many times a read is started before giving up on a `..data` link that
/// keeps moving.
const CONSISTENT_READ_TRIES: usize = 3;

/// How many times the directory is read again, [`Reloader::with_settle`]
/// apart, before a reload gives up on files that keep changing.
pub const SETTLE_TRIES: usize = 10;

/// The interval between the two reads that must agree, for a reloader made
/// with [`Reloader::new`]; `kadmit serve` uses its debounce interval.
pub const DEFAULT_SETTLE: Duration = Duration::from_millis(200);

/// Reads the directory so that all files come from one kubelet update: if the
/// `..data` link moved while reading, read again, whatever the read gave (a
/// mix of two versions, or an error from a data directory removed under it).
/// If it moves during every try, fail rather than return a read that may mix
/// versions: the old plan keeps serving, and the events of the moves start
/// another reload. Gives the read and where `..data` pointed during it.
fn read_consistent(dir: &Path) -> Result<(DirRead, Option<PathBuf>), LoadError> {
    let data_link = dir.join("..data");
    for _ in 0..CONSISTENT_READ_TRIES {
        let before = std::fs::read_link(&data_link).ok();
        let read = read_dir(dir);
        if std::fs::read_link(&data_link).ok() == before {
            return read.map(|read| (read, before));
        }
    }
    Err(LoadError::Io {
        path: data_link,
        source: std::io::Error::other(format!(
            "the link moved during each of {CONSISTENT_READ_TRIES} reads; \
             keeping the previous plan until the updates settle"
        )),
    })
}

/// Entries listed at most to tell a kubelet volume, past which a directory
/// counts as written in place (read twice, as any).
const VOLUME_ENTRIES: usize = 4 * crate::rules::limits::MAX_FILES;

/// How long a rule file of a kubelet volume's data directory may go without
/// its link, before the first plan serves, before it is read as it is (the
/// kubelet links it within milliseconds of the swap; one unlinked by hand
/// in a copy of a volume would otherwise keep the server unready). Once a
/// plan serves, such a file keeps it serving however long it lasts.
const UNLINKED_PATIENCE: Duration = Duration::from_secs(30);

/// Whether `dir` is laid out as a kubelet ConfigMap or Secret volume:
/// `..data` is a link and every rule file is a link `NAME -> ..data/NAME`.
/// The kubelet changes such files only by writing a complete new data
/// directory and swapping `..data` to it in one rename, so a read during
/// which `..data` did not move, and that moved it since the last read, is
/// complete. A `..data` link alone does not make one (a file written in
/// place beside it was served half-written), nor a layout whose link has
/// not moved (a copy of a volume, edited through its links).
fn is_kubelet_volume(dir: &Path) -> bool {
    let Some(visible) = rule_file_names(dir) else {
        return false;
    };
    visible.iter().all(|name| {
        std::fs::read_link(dir.join(name))
            .is_ok_and(|target| target == Path::new("..data").join(name))
    })
}

/// A rule file of the data directory `data` of the volume `dir` that
/// `read` (made while `..data` pointed there) does not hold: the kubelet
/// links a new key's file only after the swap, and a read in between
/// misses it. The names actually read count, not the links now: a link
/// made after the read listed the directory does not.
fn unread_in(dir: &Path, read: &DirRead, data: &Path) -> Option<String> {
    let inside = rule_file_names(&dir.join(data))?;
    let read_names: std::collections::BTreeSet<String> = read
        .files
        .iter()
        .map(|file| file.name.as_str())
        .chain(read.diagnostics.iter().map(|d| d.file.as_str()))
        .filter_map(|path| Path::new(path).file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .collect();
    inside.into_iter().find(|name| !read_names.contains(name))
}

/// The names of the rule files in `dir` as [`read_dir`] picks them; `None`
/// when it cannot be listed or holds more than [`VOLUME_ENTRIES`] entries.
fn rule_file_names(dir: &Path) -> Option<std::collections::BTreeSet<String>> {
    let mut names = std::collections::BTreeSet::new();
    for (i, entry) in std::fs::read_dir(dir).ok()?.enumerate() {
        if i >= VOLUME_ENTRIES {
            return None;
        }
        let name = entry.ok()?.file_name().to_string_lossy().into_owned();
        if crate::rules::is_rule_file(&name) {
            names.insert(name);
        }
    }
    Some(names)
}

impl Reloader {
    /// A reloader of `dir` into `store`, comparing reads [`DEFAULT_SETTLE`]
    /// apart.
    pub fn new(dir: PathBuf, store: Arc<Store>) -> Self {
        Reloader {
            dir,
            store,
            settle: DEFAULT_SETTLE,
            published: ArcSwap::from_pointee(Published::default()),
            state: Mutex::new(State::default()),
            shadowing: None,
            reloading_since: ArcSwap::from_pointee(None),
        }
    }

    /// The same reloader, comparing each new plan with the one serving on
    /// the recent reviews before storing it.
    pub fn with_shadowing(mut self, shadowing: Shadowing) -> Self {
        self.shadowing = Some(shadowing);
        self
    }

    /// The same reloader, comparing reads `settle` apart before serving
    /// changed files (see [`Reloader::reload`]).
    pub fn with_settle(mut self, settle: Duration) -> Self {
        self.settle = settle;
        self
    }

    /// The store it fills.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The state the last reload published: the plan it left serving and
    /// the history of reloads up to it. Never waits for a reload in
    /// progress; a plan that reload has just stored shows once it is done.
    pub fn state(&self) -> ReloadState {
        let published = self.published.load();
        let plan = &published.plan;
        ReloadState {
            rules_dir: self.dir.display().to_string(),
            generation: plan.as_ref().map_or(0, |plan| plan.generation()),
            ready: plan.is_some(),
            rule_sets: plan
                .as_ref()
                .map(|plan| {
                    plan.rule_sets()
                        .iter()
                        .map(|info| RuleSetState {
                            name: info.name.to_string(),
                            file: info.file.to_string(),
                            rules: info.rule_count,
                            file_hash: info.file_hash.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            history: published.history.clone(),
            reloading_since: (**self.reloading_since.load()).clone(),
        }
    }

    /// Reads the directory until two reads [`Reloader::with_settle`] apart
    /// agree, starting from `read`.
    ///
    /// A file written in pieces (an editor, `cp`, a script appending) can be
    /// read between two writes, and a prefix of a rule file often compiles:
    /// serving it would enforce only the rules written so far. A writer that
    /// pauses longer than the interval can still be read half-way; the
    /// interval is the debounce, the quiet time already awaited after the
    /// last event.
    fn settle(
        &self,
        mut read: DirRead,
        mut hash: [u8; 32],
        mut data: Option<PathBuf>,
    ) -> Result<(DirRead, [u8; 32], Option<PathBuf>), ReloadError> {
        for _ in 0..SETTLE_TRIES {
            tracing::info!(
                settle_ms = self.settle.as_millis() as u64,
                "Rule files changed; reading them again to check they are complete"
            );
            std::thread::sleep(self.settle);
            // Two reads through different data directories do not agree,
            // whatever they hold.
            let (again, again_data) = read_consistent(&self.dir)?;
            let again_hash = again.hash();
            if again_hash == hash && again_data == data {
                return Ok((read, hash, data));
            }
            (read, hash, data) = (again, again_hash, again_data);
        }
        Err(ReloadError::Unsettled {
            dir: self.dir.display().to_string(),
            tries: SETTLE_TRIES,
            settle_ms: self.settle.as_millis(),
        })
    }

    /// Reads, compiles and stores. Reloads are serialised; a failure leaves
    /// the plan that serves untouched.
    ///
    /// Files that differ from the last read are read again until two reads
    /// agree (see `settle`), except in a kubelet volume, whose updates are
    /// atomic. Files unchanged since the last read are not rebuilt unless
    /// `trigger` is [`Trigger::Signal`], and only changed files are parsed.
    pub fn reload(&self, trigger: Trigger) -> ReloadResult {
        let started = Instant::now();
        self.reloading_since.store(Arc::new(Some(now_rfc3339())));
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // A bug in a reload must not end reloading, nor pass for a reload
        // that had nothing to do: the files it read count as not read, and
        // the failure is published like any other.
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.build(trigger, &mut state)
        }));
        let result = built.unwrap_or(Err(ReloadError::Panicked));
        let seconds = started.elapsed().as_secs_f64();
        let mut history = self.published.load().history.clone();
        if let Some(report) = state.last_shadow.take() {
            history.last_shadow = Some(report);
        }
        let outcome = match result {
            Ok(Some(generation)) => {
                history.succeeded();
                ReloadResult::Stored { generation }
            }
            Ok(None) => ReloadResult::Unchanged,
            Err(error) => {
                if matches!(
                    error,
                    ReloadError::Read(_) | ReloadError::Unsettled { .. } | ReloadError::Panicked
                ) {
                    state.last_hash = None;
                }
                let error = error.report();
                history.failed(&error);
                ReloadResult::Failed { error }
            }
        };
        self.published.store(Arc::new(Published {
            plan: self.store.load_full(),
            history,
        }));
        self.reloading_since.store(Arc::new(None));
        let status = self.state();
        match &outcome {
            ReloadResult::Stored { generation } => {
                let rules: usize = status.rule_sets.iter().map(|r| r.rules).sum();
                tracing::info!(
                    generation,
                    trigger = trigger.as_str(),
                    rule_sets = status.rule_sets.len(),
                    rules,
                    seconds,
                    "Loaded a new rule plan"
                );
            }
            ReloadResult::Unchanged => {
                tracing::debug!(trigger = trigger.as_str(), "Rule files unchanged");
            }
            ReloadResult::Failed { error } => {
                tracing::error!(
                    trigger = trigger.as_str(),
                    serving_generation = self.store.generation(),
                    "The rules did not load; the plan serving, if any, stays"
                );
                for line in error.lines() {
                    tracing::error!(problem = line, "Rule file problem");
                }
            }
        }
        let loaded = crate::metrics::Loaded {
            rule_sets: status.rule_sets.len(),
            rules: status.rule_sets.iter().map(|r| r.rules).sum(),
        };
        crate::metrics::record_reload(outcome.as_str(), seconds, status.generation, loaded);
        outcome
    }

    /// The new plan's generation, `None` when the files are unchanged.
    fn build(&self, trigger: Trigger, state: &mut State) -> Result<Option<u64>, ReloadError> {
        let (mut read, mut data) = read_consistent(&self.dir)?;
        let mut hash = read.hash();
        if state.last_hash == Some(hash) {
            // The same files, perhaps through a new data directory (the
            // kubelet swaps one in when only another key changed): where
            // `..data` points is what the next read is compared with.
            state.last_data.clone_from(&data);
            if trigger != Trigger::Signal {
                return Ok(None);
            }
        } else {
            let swapped = data.is_some() && data != state.last_data && is_kubelet_volume(&self.dir);
            if !swapped && !self.settle.is_zero() {
                (read, hash, data) = self.settle(read, hash, data)?;
            }
            // Whichever way it was read, a volume's read holds every rule
            // file of the data directory it came from.
            let unread = data
                .as_deref()
                .filter(|_| is_kubelet_volume(&self.dir))
                .and_then(|data| Some((data.to_owned(), unread_in(&self.dir, &read, data)?)));
            match unread {
                Some((data, name)) => {
                    let since = match state.unlinked.take() {
                        Some((seen_data, seen_name, since))
                            if seen_data == data && seen_name == name =>
                        {
                            since
                        }
                        _ => Instant::now(),
                    };
                    // While a plan serves, never: the file may hold rules
                    // moved out of a key still read, and reading without
                    // it would drop them.
                    if since.elapsed() < UNLINKED_PATIENCE || self.store.is_ready() {
                        state.unlinked = Some((data, name.clone(), since));
                        // Not counted as read: the link's creation, or the
                        // timer, starts the reload again.
                        return Err(ReloadError::Read(LoadError::Io {
                            path: self.dir.join("..data"),
                            source: std::io::Error::other(format!(
                                "holds {name}, which has no link in the directory yet (an \
                                 update is in progress); keeping the previous plan until it \
                                 is linked"
                            )),
                        }));
                    }
                    tracing::warn!(
                        file = %name,
                        "A rule file of the data directory has had no link for 30 s; reading \
                         the directory as it is"
                    );
                }
                None => state.unlinked = None,
            }
        }
        state.last_hash = Some(hash);
        state.last_data = data;
        #[cfg(test)]
        if std::mem::take(&mut state.panic_once) {
            panic!("a bug while compiling");
        }
        let loaded = state.cache.load(read);
        // Warnings (a README beside the rule files) do not make the
        // directory any less empty.
        if loaded.files.is_empty() && !loaded.diagnostics.has_errors() && self.store.is_ready() {
            let serving = self
                .store
                .load_full()
                .is_some_and(|plan| !plan.rule_sets().is_empty());
            if serving {
                // Seen between `rm -rf dir; mkdir dir` and the new files, or
                // a volume not mounted yet: never drop every rule that
                // serves for that.
                return Err(ReloadError::Emptied {
                    dir: self.dir.display().to_string(),
                });
            }
        }
        let plan = compile(&loaded).map_err(ReloadError::Rules)?;
        // Warnings never keep a plan from serving; they are said once per
        // change of the files, like the problems that do.
        for warning in plan.warnings().iter() {
            tracing::warn!(warning = %warning, "Rule file warning");
        }
        self.shadow(&plan, trigger, state)?;
        Ok(Some(self.store.store(plan)))
    }

    /// Compares `plan` with the plan serving on the recent reviews, reports
    /// it, and holds `plan` back when it would deny more of them than
    /// allowed (unless SIGHUP asked for it).
    fn shadow(&self, plan: &Plan, trigger: Trigger, state: &mut State) -> Result<(), ReloadError> {
        let (Some(shadowing), Some(serving)) = (&self.shadowing, self.store.load_full()) else {
            return Ok(());
        };
        let reviews = shadowing.recent.snapshot();
        if reviews.is_empty() {
            return Ok(());
        }
        let report = shadow::compare(&reviews, &serving, plan, shadowing.options);
        let refusal = shadowing
            .max_new_denials
            .filter(|_| trigger != Trigger::Signal)
            .and_then(|max| held_back(max, &report));
        let held_back = refusal.is_some();
        crate::metrics::record_shadow(
            report.changed,
            report.newly_denied,
            report.newly_admitted,
            held_back,
        );
        tracing::info!(
            reviews = report.reviews,
            resources = report.resources,
            changed = report.changed,
            newly_denied = report.newly_denied,
            newly_admitted = report.newly_admitted,
            not_compared = report.not_compared,
            redacted = report.redacted,
            milliseconds = report.milliseconds,
            "Compared the new rules with the rules serving on the recent reviews"
        );
        for example in &report.examples {
            tracing::info!(
                uid = example.uid,
                endpoint = example.endpoint,
                request = example.request,
                change = example.change.join(", "),
                before = example.before,
                after = example.after,
                "A recent review the new rules decide differently"
            );
        }
        state.last_shadow = Some(report);
        refusal.map_or(Ok(()), Err)
    }
}

/// Why a new plan compared on the recent reviews is held back under
/// `--reload-max-new-denials max`: it denies more than `max` that the plan
/// serving admitted, or the comparison stopped at its time bound before
/// every review was compared (the newest are compared last, so the guard
/// could not say).
fn held_back(max: u64, report: &shadow::ShadowReport) -> Option<ReloadError> {
    if report.not_compared > 0 {
        return Some(ReloadError::NotCompared {
            not_compared: report.not_compared,
            reviews: report.reviews + report.not_compared,
            max,
        });
    }
    (report.newly_denied > max).then(|| ReloadError::HeldBack {
        newly_denied: report.newly_denied,
        reviews: report.reviews,
        max,
        examples: report
            .examples
            .iter()
            .filter(|example| example.change.contains(&"admitted → denied"))
            .take(3)
            .map(|example| format!("{} ({}): {}", example.request, example.uid, example.after))
            .collect::<Vec<_>>()
            .join("; "),
    })
}

/// Asks the reload loop for reloads; cloned into the watcher, the SIGHUP
/// handler and the interval timer. Asking never waits.
#[derive(Debug, Clone)]
pub struct Reloads {
    sender: mpsc::Sender<Trigger>,
}

impl Reloads {
    /// Asks for a reload; requests made while one runs are merged into the
    /// next one.
    pub fn request(&self, trigger: Trigger) {
        // The loop ends only with the process.
        let _ = self.sender.send(trigger);
    }
}

/// Merges `first` with every request already waiting: one reload serves
/// them all, and it is a forced rebuild if any of them was SIGHUP.
fn coalesce(first: Trigger, pending: &mpsc::Receiver<Trigger>) -> Trigger {
    pending.try_iter().fold(first, |merged, next| {
        if merged == Trigger::Signal || next == Trigger::Signal {
            Trigger::Signal
        } else {
            next
        }
    })
}

/// Starts the reload loop: the one thread that reloads, one request (or
/// burst of requests) at a time.
pub fn spawn_loop(reloader: Arc<Reloader>) -> std::io::Result<Reloads> {
    let (sender, receiver) = mpsc::channel();
    std::thread::Builder::new()
        .name("kadmit-reload".to_owned())
        .spawn(move || {
            while let Ok(first) = receiver.recv() {
                let trigger = coalesce(first, &receiver);
                // A bug in a reload must not end reloading for the life of
                // the process: log it, keep the plan, and serve the next
                // request.
                let reload = std::panic::AssertUnwindSafe(|| reloader.reload(trigger));
                if std::panic::catch_unwind(reload).is_err() {
                    tracing::error!(
                        trigger = trigger.as_str(),
                        "A reload panicked; the plan serving stays"
                    );
                }
            }
        })?;
    Ok(Reloads { sender })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A kubelet volume in a new directory: `..2026/FILE` for each of
    /// `files`, `..data -> ..2026`, and `FILE -> ..data/FILE` for each of
    /// `linked`.
    fn kubelet_volume(files: &[&str], linked: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("..2026");
        std::fs::create_dir(&data).expect("mkdir");
        for file in files {
            std::fs::write(
                data.join(file),
                format!(
                    "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: {}}}\n\
                     spec:\n  rules: []\n",
                    file.trim_end_matches(".yaml")
                ),
            )
            .expect("write");
        }
        symlink("..2026", dir.path().join("..data")).expect("link");
        for file in linked {
            symlink(Path::new("..data").join(file), dir.path().join(file)).expect("link");
        }
        dir
    }

    #[test]
    fn a_reload_that_panics_is_a_failure_and_the_same_files_are_read_again() {
        let dir = kubelet_volume(&["a.yaml"], &["a.yaml"]);
        let reloader = Reloader::new(dir.path().to_owned(), Arc::new(Store::new()));
        reloader
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .panic_once = true;
        match reloader.reload(Trigger::Watch) {
            ReloadResult::Failed { error } => {
                assert!(error.contains("failed unexpectedly"), "{error}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            reloader.state().history.failed_reloads,
            1,
            "the failure is published"
        );
        // The files did not change, and are built all the same.
        assert!(matches!(
            reloader.reload(Trigger::Watch),
            ReloadResult::Stored { generation: 1 }
        ));
    }

    #[test]
    fn status_shows_a_reload_in_progress() {
        let dir = kubelet_volume(&["a.yaml"], &["a.yaml"]);
        let reloader = Reloader::new(dir.path().to_owned(), Arc::new(Store::new()));
        assert_eq!(reloader.state().reloading_since, None);
        // A reload that cannot go on, as one stuck reading would.
        let held = reloader
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::thread::scope(|scope| {
            let reloading = scope.spawn(|| reloader.reload(Trigger::Watch));
            let deadline = Instant::now() + Duration::from_secs(20);
            while reloader.state().reloading_since.is_none() {
                assert!(Instant::now() < deadline, "the reload never showed");
                std::thread::yield_now();
            }
            drop(held);
            assert!(matches!(
                reloading.join().expect("reload"),
                ReloadResult::Stored { .. }
            ));
        });
        assert_eq!(reloader.state().reloading_since, None);
    }

    #[test]
    fn only_a_directory_of_links_through_data_is_a_kubelet_volume() {
        let both = ["a.yaml", "b.yaml"];
        assert!(is_kubelet_volume(kubelet_volume(&both, &both).path()));
        // A `..data` link beside a file written in place.
        let beside = kubelet_volume(&both, &both);
        std::fs::write(beside.path().join("c.yaml"), "").expect("write");
        assert!(!is_kubelet_volume(beside.path()));
        let wrong = kubelet_volume(&both, &["a.yaml"]);
        symlink("..2026/b.yaml", wrong.path().join("b.yaml")).expect("link");
        assert!(!is_kubelet_volume(wrong.path()));
        // Swapped, its new file not linked yet: what is visible is links.
        let unlinked = kubelet_volume(&both, &["a.yaml"]);
        assert!(is_kubelet_volume(unlinked.path()));
        let (read, data) = read_consistent(unlinked.path()).expect("read");
        let data = data.expect("..data");
        assert_eq!(
            unread_in(unlinked.path(), &read, &data),
            Some("b.yaml".to_owned())
        );
    }

    #[test]
    fn a_file_linked_after_the_read_listed_the_directory_is_missed_and_said() {
        let dir = kubelet_volume(&["a.yaml", "b.yaml"], &["a.yaml"]);
        let (read, data) = read_consistent(dir.path()).expect("read");
        // The kubelet links b.yaml once the read has listed the directory.
        symlink("..data/b.yaml", dir.path().join("b.yaml")).expect("link");
        let data = data.expect("..data");
        assert_eq!(
            unread_in(dir.path(), &read, &data),
            Some("b.yaml".to_owned())
        );
    }

    /// Swaps `..data` of `dir` to a new data directory `name` holding the
    /// rule sets `sets` (file, set name).
    fn swap(dir: &Path, name: &str, sets: &[(&str, &str)]) {
        let next = dir.join(name);
        std::fs::create_dir(&next).expect("mkdir");
        for (file, set) in sets {
            std::fs::write(
                next.join(file),
                format!(
                    "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {{name: {set}}}\n\
                     spec:\n  rules: []\n"
                ),
            )
            .expect("write");
        }
        symlink(name, dir.join("..data_tmp")).expect("link");
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap");
    }

    #[test]
    fn a_swap_to_the_same_files_is_where_the_next_read_is_compared_from() {
        let dir = kubelet_volume(&["a.yaml"], &["a.yaml"]);
        let reloader = Reloader::new(dir.path().to_owned(), Arc::new(Store::new()));
        assert!(matches!(
            reloader.reload(Trigger::Watch),
            ReloadResult::Stored { generation: 1 }
        ));
        // Only another key changed: the same rule files, a new directory.
        swap(dir.path(), "..2027", &[("a.yaml", "a")]);
        assert!(matches!(
            reloader.reload(Trigger::Watch),
            ReloadResult::Unchanged
        ));
        // A write through the links now is not a swap: read twice.
        let last = reloader
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .last_data
            .clone();
        assert_eq!(last, Some(PathBuf::from("..2027")));
    }

    /// As if the file the last reload found unlinked had been found so
    /// longer ago than [`UNLINKED_PATIENCE`].
    fn seen_unlinked_long_ago(reloader: &Reloader) {
        let mut state = reloader
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (data, name, _) = state.unlinked.take().expect("a file was seen unlinked");
        let long_ago = Instant::now()
            .checked_sub(UNLINKED_PATIENCE)
            .expect("the clock is past the patience");
        state.unlinked = Some((data, name, long_ago));
    }

    #[test]
    fn a_file_never_linked_is_read_as_it_is_after_a_while() {
        let dir = kubelet_volume(&["a.yaml", "b.yaml"], &["a.yaml"]);
        let reloader = Reloader::new(dir.path().to_owned(), Arc::new(Store::new()));
        assert!(matches!(
            reloader.reload(Trigger::Watch),
            ReloadResult::Failed { .. }
        ));
        // As if the first failure were long ago: b.yaml, unlinked by hand
        // in a copy of a volume, no longer keeps the server unready.
        seen_unlinked_long_ago(&reloader);
        assert!(matches!(
            reloader.reload(Trigger::Watch),
            ReloadResult::Stored { generation: 1 }
        ));
        assert_eq!(reloader.state().rule_sets.len(), 1);
    }

    #[test]
    fn a_reload_between_the_swap_and_a_new_files_link_keeps_the_plan() {
        let dir = kubelet_volume(&["a.yaml"], &["a.yaml"]);
        let reloader = Reloader::new(dir.path().to_owned(), Arc::new(Store::new()));
        assert!(matches!(
            reloader.reload(Trigger::Watch),
            ReloadResult::Stored { generation: 1 }
        ));
        // The kubelet's update changing a.yaml and adding b.yaml (a rule
        // set moved out of one key into another), up to the swap.
        swap(dir.path(), "..2027", &[("a.yaml", "a2"), ("b.yaml", "b")]);
        match reloader.reload(Trigger::Watch) {
            ReloadResult::Failed { error } => {
                assert!(
                    error.contains("b.yaml") && error.contains("keeping the previous plan"),
                    "{error}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(reloader.state().rule_sets[0].name, "a");
        // However long b.yaml goes without its link, the plan serving
        // stays: without b.yaml, a2 would enforce less than a did.
        seen_unlinked_long_ago(&reloader);
        assert!(matches!(
            reloader.reload(Trigger::Interval),
            ReloadResult::Failed { .. }
        ));
        assert_eq!(reloader.state().rule_sets[0].name, "a");
        symlink("..data/b.yaml", dir.path().join("b.yaml")).expect("link");
        assert!(matches!(
            reloader.reload(Trigger::Watch),
            ReloadResult::Stored { generation: 2 }
        ));
        let names: Vec<String> = reloader
            .state()
            .rule_sets
            .iter()
            .map(|set| set.name.clone())
            .collect();
        assert_eq!(names, ["a2", "b"]);
    }

    #[test]
    fn a_directory_with_only_warnings_left_does_not_drop_the_rules_serving() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rules = dir.path().join("a.yaml");
        std::fs::write(
            &rules,
            "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {name: a}\n\
             spec:\n  rules: []\n",
        )
        .expect("write");
        std::fs::write(dir.path().join("README"), "notes").expect("write");
        let reloader = Reloader::new(dir.path().to_owned(), Arc::new(Store::new()))
            .with_settle(Duration::ZERO);
        assert!(matches!(
            reloader.reload(Trigger::Watch),
            ReloadResult::Stored { .. }
        ));
        std::fs::remove_file(&rules).expect("rm");
        match reloader.reload(Trigger::Watch) {
            ReloadResult::Failed { error } => assert!(error.contains("no rule files"), "{error}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(reloader.state().rule_sets.len(), 1);
    }

    #[test]
    fn a_comparison_cut_short_holds_the_plan_back_like_too_many_denials() {
        let report = |newly_denied, not_compared| shadow::ShadowReport {
            reviews: 20 - not_compared,
            newly_denied,
            not_compared,
            ..shadow::ShadowReport::default()
        };
        assert!(held_back(2, &report(2, 0)).is_none());
        assert!(matches!(
            held_back(2, &report(3, 0)),
            Some(ReloadError::HeldBack {
                newly_denied: 3,
                ..
            })
        ));
        // Thirteen compared, none newly denied, four never looked at: the
        // plan once went live so.
        let cut = held_back(0, &report(0, 4)).expect("held back");
        assert!(matches!(
            cut,
            ReloadError::NotCompared {
                not_compared: 4,
                reviews: 20,
                max: 0
            }
        ));
        let message = cut.to_string();
        assert!(
            message.contains("4 of them not compared") && message.contains("SIGHUP"),
            "{message}"
        );
    }

    #[test]
    fn pending_requests_merge_into_one_and_sighup_wins() {
        let (sender, receiver) = mpsc::channel();
        for trigger in [Trigger::Watch, Trigger::Signal, Trigger::Interval] {
            sender.send(trigger).expect("send");
        }
        assert_eq!(coalesce(Trigger::Watch, &receiver), Trigger::Signal);
        assert!(receiver.try_recv().is_err(), "every request was taken");
        sender.send(Trigger::Interval).expect("send");
        assert_eq!(coalesce(Trigger::Watch, &receiver), Trigger::Interval);
        assert_eq!(coalesce(Trigger::Watch, &receiver), Trigger::Watch);
    }

    #[test]
    fn status_pairs_each_plan_with_the_reload_that_stored_it() {
        // Every reload here succeeds and stores a plan, so the generation
        // serving and the successful reloads counted must agree in every
        // status. Read from the store directly, the plan showed a reload
        // or so early: a generation whose success was not yet counted, next
        // to the error that reload had just fixed.
        const RELOADS: u64 = 300;
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("rules.yaml"),
            "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata: {name: r}\n\
             spec:\n  rules:\n    - name: deny-labelled\n      \
             match: {operations: [CREATE], resources: [configmaps]}\n      \
             when: [{path: $.object.metadata.labels.deny, exists: true}]\n      \
             deny: [{message: labelled}]\n",
        )
        .expect("write");
        let reloader = Reloader::new(dir.path().to_owned(), Arc::new(Store::new()))
            .with_settle(Duration::ZERO);
        let reloading = std::sync::atomic::AtomicBool::new(true);
        let mut statuses = 0_u64;
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for _ in 0..RELOADS {
                    let result = reloader.reload(Trigger::Signal);
                    assert!(matches!(result, ReloadResult::Stored { .. }), "{result:?}");
                }
                reloading.store(false, std::sync::atomic::Ordering::Release);
            });
            while reloading.load(std::sync::atomic::Ordering::Acquire) {
                let status = reloader.state();
                assert_eq!(
                    status.generation, status.history.successful_reloads,
                    "{status:?}"
                );
                assert_eq!(status.ready, status.generation > 0, "{status:?}");
                statuses += 1;
            }
        });
        let last = reloader.state();
        assert_eq!(last.generation, RELOADS);
        assert_eq!(last.history.successful_reloads, RELOADS);
        assert!(statuses > 0);
    }

    #[test]
    fn status_does_not_wait_for_a_reload_in_progress() {
        let dir = tempfile::tempdir().expect("tempdir");
        let reloader = Reloader::new(dir.path().to_owned(), Arc::new(Store::new()));
        // A reload in progress holds the state lock for its whole length.
        let _reloading = reloader.state.lock().expect("lock");
        let (sender, receiver) = mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let _ = sender.send(reloader.state().ready);
            });
            assert_eq!(
                receiver.recv_timeout(Duration::from_secs(10)),
                Ok(false),
                "status waited for the reload"
            );
        });
    }
}
