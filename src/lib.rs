//! kadmit: a Kubernetes admission webhook whose policy is plain YAML rule files.
//!
//! # The path of one request
//!
//! ```text
//! server (HTTPS, actix-web + rustls)  /mutate[/{ruleset}]  /validate[/{ruleset}]
//!   → review::decode          AdmissionReview v1/v1beta1 → Request (object kept raw)
//!   → reload::Store::load     the current Plan (one atomic load)
//!   → eval::evaluate          index lookup → match → conditions → deny / warn / audit,
//!                             or mutations → patch (JSON Patch built from the edits)
//!   → review::encode          Verdict → response in the caller's version
//! ```
//!
//! # The path of one rule change
//!
//! ```text
//! reload (watch the directory, debounce) → rules::load_dir (parse, positions)
//!   → plan::compile (paths, regexes, index; every diagnostic at once)
//!   → reload::Store::store (one atomic swap), or keep the old plan and report
//! ```
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
//! - [`webhook`]: Mutating/ValidatingWebhookConfigurations derived from rule sets.
//! - [`server`]: the HTTPS webhook and plain operations listeners, TLS, and
//!   the `Status` bodies of every error.
//! - [`reload`]: the store holding the plan being served.
//! - [`metrics`]: every metric name and the functions that record them.
//! - [`cli`]: the subcommands.

// `println!` and `eprintln!` panic when their stream is closed (`kadmit
// test ... | head -c1`); the subcommands write through `cli::output`.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod cli;
pub mod eval;
pub mod image;
pub mod metrics;
pub mod patch;
pub mod plan;
pub mod quantity;
pub mod reload;
pub mod review;
pub mod rules;
pub mod server;
pub mod simulate;
pub mod webhook;
