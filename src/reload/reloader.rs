//! The reload loop's one step: read the rules directory, compile, and store
//! the new plan in one swap, or keep the old plan and report why.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use serde::Serialize;

use super::store::Store;
use crate::plan::compile;
use crate::rules::{FNV_OFFSET, LoadError, Loaded, fnv1a, load_dir};

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
pub enum Outcome {
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

impl Outcome {
    /// `success`, `unchanged` or `failure`, for metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Stored { .. } => "success",
            Outcome::Unchanged => "unchanged",
            Outcome::Failed { .. } => "failure",
        }
    }
}

/// A loaded rule set, as `/status` shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RuleSetStatus {
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
pub struct ReloadStatus {
    /// The rules directory.
    pub rules_dir: String,
    /// Generation of the plan serving; 0 before the first.
    pub generation: u64,
    /// True once a plan serves.
    pub ready: bool,
    /// The rule sets of the plan serving.
    pub rule_sets: Vec<RuleSetStatus>,
    /// How reloads went.
    #[serde(flatten)]
    pub history: ReloadHistory,
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
}

impl ReloadHistory {
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

#[derive(Debug)]
struct State {
    /// Hash of the files last read, whether they compiled or not.
    last_hash: Option<u64>,
    status: ReloadStatus,
}

/// Rebuilds the plan from a directory into a store.
#[derive(Debug)]
pub struct Reloader {
    dir: PathBuf,
    store: Arc<Store>,
    state: Mutex<State>,
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

fn files_hash(loaded: &Loaded) -> u64 {
    // Each name and text ends in a 0 byte, so moving bytes from one file's
    // end to the next one's name changes the hash.
    loaded.files.iter().fold(FNV_OFFSET, |hash, file| {
        let hash = fnv1a(fnv1a(hash, file.name.as_bytes()), &[0]);
        fnv1a(fnv1a(hash, file.text.as_bytes()), &[0])
    })
}

/// How many times a read is started before giving up on a `..data` link that
/// keeps moving.
const CONSISTENT_READ_TRIES: usize = 3;

/// Reads the directory so that all files come from one kubelet update: if the
/// `..data` link moved while reading, read again, whatever the read gave (a
/// mix of two versions, or an error from a data directory removed under it).
/// If it moves during every try, fail rather than return a read that may mix
/// versions: the old plan keeps serving, and the events of the moves start
/// another reload.
fn load_consistent(dir: &Path) -> Result<Loaded, LoadError> {
    let data_link = dir.join("..data");
    for _ in 0..CONSISTENT_READ_TRIES {
        let before = std::fs::read_link(&data_link).ok();
        let loaded = load_dir(dir);
        if std::fs::read_link(&data_link).ok() == before {
            return loaded;
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

impl Reloader {
    /// A reloader of `dir` into `store`.
    pub fn new(dir: PathBuf, store: Arc<Store>) -> Self {
        let status = ReloadStatus {
            rules_dir: dir.display().to_string(),
            ..ReloadStatus::default()
        };
        Reloader {
            dir,
            store,
            state: Mutex::new(State {
                last_hash: None,
                status,
            }),
        }
    }

    /// The store it fills.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The current status.
    pub fn status(&self) -> ReloadStatus {
        let state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut status = state.status.clone();
        status.generation = self.store.generation();
        status.ready = self.store.is_ready();
        status
    }

    /// Reads, compiles and stores. Reloads are serialised; a failure leaves
    /// the plan that serves untouched.
    pub fn reload(&self, trigger: Trigger) -> Outcome {
        let started = Instant::now();
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let outcome = match load_consistent(&self.dir) {
            Err(error) => {
                let mut message = error.to_string();
                if let Some(source) = std::error::Error::source(&error) {
                    message = format!("{message}: {source}");
                }
                state.last_hash = None;
                Outcome::Failed { error: message }
            }
            Ok(loaded) => {
                let hash = files_hash(&loaded);
                if trigger != Trigger::Signal && state.last_hash == Some(hash) {
                    Outcome::Unchanged
                } else if loaded.files.is_empty() && !state.status.rule_sets.is_empty() {
                    // Seen between `rm -rf dir; mkdir dir` and the new files,
                    // or a volume not mounted yet: never drop every rule that
                    // serves for that.
                    state.last_hash = Some(hash);
                    Outcome::Failed {
                        error: format!(
                            "{}: no rule files; the rules that serve stay (to remove every rule, delete the webhook configurations)",
                            self.dir.display()
                        ),
                    }
                } else {
                    state.last_hash = Some(hash);
                    match compile(&loaded) {
                        Ok(plan) => {
                            let rule_sets = plan
                                .rule_sets()
                                .iter()
                                .map(|info| RuleSetStatus {
                                    name: info.name.to_string(),
                                    file: info.file.to_string(),
                                    rules: info.rule_count,
                                    file_hash: info.file_hash.clone(),
                                })
                                .collect();
                            let generation = self.store.store(plan);
                            state.status.rule_sets = rule_sets;
                            Outcome::Stored { generation }
                        }
                        Err(diagnostics) => Outcome::Failed {
                            error: diagnostics.to_string(),
                        },
                    }
                }
            }
        };
        let seconds = started.elapsed().as_secs_f64();
        match &outcome {
            Outcome::Stored { generation } => {
                state.status.history.succeeded();
                let rules: usize = state.status.rule_sets.iter().map(|r| r.rules).sum();
                tracing::info!(
                    generation,
                    trigger = trigger.as_str(),
                    rule_sets = state.status.rule_sets.len(),
                    rules,
                    seconds,
                    "Loaded a new rule plan"
                );
            }
            Outcome::Unchanged => {
                tracing::debug!(trigger = trigger.as_str(), "Rule files unchanged");
            }
            Outcome::Failed { error } => {
                state.status.history.failed(error);
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
        crate::metrics::record_reload(
            outcome.as_str(),
            seconds,
            self.store.generation(),
            &state.status,
        );
        outcome
    }
}
