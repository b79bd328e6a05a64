//! kadmit: a Kubernetes admission webhook whose policy is plain YAML rule files.
//!
//! # The path of one request
//!
//! ```text
//! server (HTTPS, actix-web + rustls)  /mutate[/{ruleset}]  /validate[/{ruleset}]
//!   → reload::Store::load     the current Plan (one atomic load)
//!   → server::decide
//!       review::decode_with   AdmissionReview v1/v1beta1 → Request; on reaching the
//!                             objects it asks:
//!       eval::select          index lookup → request-level match, once; the objects
//!                             are parsed in the same pass only when a rule stands
//!       Selection::evaluate   conditions → deny / warn / audit, or mutations → patch
//!                             (JSON Patch built from the edits) → Verdict
//!   → review::encode          Verdict::response → the answer in the caller's version
//!   → server::observe         log line, metrics, denials ring, recording
//! ```
//!
//! # The path of one rule change
//!
//! ```text
//! watcher (debounce) / SIGHUP / interval timer → reload::Reloads::request
//!   → the reload loop (one thread; requests made meanwhile merge into one)
//!   → rules::read_dir (every *.yaml entry readable, ≤ 1 MiB; read again
//!                      until two reads agree)
//!   → rules::limits::check (depth, aliases, expanded size; before parsing)
//!   → rules::FileCache::load (parse changed files only, positions)
//!   → plan::compile (paths, regexes, index; every diagnostic at once)
//!   → reload::Store::store (one atomic swap), or keep the old plan and report
//! ```
//!
//! `/status` reads the store and the history the loop publishes; nothing on
//! the operations listener waits for a reload.
//!
//! # Modules
//!
//! - [`rules`]: the rule-file language (serde types, schema) and loading with positions.
//! - [`plan`]: the immutable compiled form of the rules and its index.
//! - [`eval`]: evaluating a plan against a request, producing a [`eval::Verdict`].
//! - [`patch`]: idempotent edits of an object that record JSON Patch operations.
//! - [`review`]: the AdmissionReview wire format.
//! - [`quantity`], [`image`]: Kubernetes quantities and container image references.
//! - [`simulate`]: offline evaluation as the API server would call kadmit (`kadmit test`).
//! - [`suite`]: test suites of rules, their cases and expectations (`kadmit verify`).
//! - [`audit`]: judging existing objects read as a stream (`kadmit audit`).
//! - [`webhook`]: Mutating/ValidatingWebhookConfigurations derived from rule sets.
//! - [`server`]: the HTTPS webhook and plain operations listeners, TLS, and
//!   the `Status` bodies of every error.
//! - [`dashboard`]: the built-in dashboard: its page, the charts' metric
//!   history and the recent-denials ring (the server only mounts it).
//! - [`excerpt`]: cutting request fields before they reach a log line or a message.
//! - [`reload`]: the store holding the plan being served.
//! - [`shadow`]: the recent reviews a new plan is compared on before it serves.
//! - [`metrics`]: every metric name and the functions that record them.
//! - [`cli`]: the subcommands.

// `println!` and `eprintln!` panic when their stream is closed (`kadmit
// test ... | head -c1`); the subcommands write through `cli::output`.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod audit;
pub mod cel;
pub mod cli;
pub mod dashboard;
pub mod eval;
pub mod excerpt;
pub mod image;
pub mod in_tree;
pub mod json;
pub mod log_throttle;
pub mod metrics;
pub mod mutation_order;
pub mod patch;
pub mod plan;
pub mod quantity;
pub mod reload;
pub mod review;
pub mod rules;
pub mod server;
pub mod shadow;
pub mod simulate;
pub mod suite;
pub mod webhook;
