//! Counting the answers actix gives by itself, before a request reaches any
//! kadmit handler: HTTP/1.1 framing errors and slow request heads.
//!
//! actix-http's HTTP/1.1 dispatcher answers these on its own, with an empty
//! body, and no application code runs for them, so no `Status` body can be
//! sent (see `docs/server-limits.md`):
//!
//! | answer | when | `reason` |
//! |---|---|---|
//! | 408 | the request head did not arrive within `--request-timeout-secs` | `head_timeout` |
//! | 400 | the head (or a chunked body's framing) is not valid HTTP/1.1 | `malformed_http` |
//! | 431 | the head fills actix's 128 KiB buffer or has over 96 headers | `head_too_large` |
//!
//! The one trace of them is a `trace!` event the dispatcher emits just before
//! answering. [`EarlyAnswers`] is a tracing layer that enables exactly those
//! callsites (every other trace event stays disabled, at no cost) and counts
//! each under `kadmit_bad_requests_total{reason}`. The callsites are known by
//! their line in actix-http 3.20's `src/h1/dispatcher.rs`: an upgrade that
//! moves them stops the counting, never miscounts other events, and fails
//! the end-to-end tests in `tests/adversarial/edge.rs` that check each count.

use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Filter, Layer};

use crate::metrics;

const DISPATCHER_TARGET: &str = "actix_http::h1::dispatcher";
const DISPATCHER_FILE: &str = "dispatcher.rs";

/// Lines of the dispatcher's `trace!` before each answer, with the reason
/// each is counted under.
const ANSWERS: [(u32, &str); 3] = [
    (1023, metrics::BAD_REQUEST_HEAD_TOO_LARGE),
    (1043, "malformed_http"),
    (1074, "head_timeout"),
];

/// A tracing layer, and its own filter, counting actix's own answers.
///
/// Install it next to the log layer: `registry().with(logs).with(
/// EarlyAnswers.with_filter(EarlyAnswers))`.
#[derive(Debug, Clone, Copy, Default)]
pub struct EarlyAnswers;

/// The reason of an answering callsite, `None` for any other.
fn reason(metadata: &Metadata<'_>) -> Option<&'static str> {
    if metadata.target() != DISPATCHER_TARGET
        || *metadata.level() != Level::TRACE
        || !metadata.is_event()
        || !metadata
            .file()
            .is_some_and(|file| file.ends_with(DISPATCHER_FILE))
    {
        return None;
    }
    let line = metadata.line()?;
    ANSWERS
        .iter()
        .find(|(at, _)| *at == line)
        .map(|(_, reason)| *reason)
}

impl<S: Subscriber> Layer<S> for EarlyAnswers {
    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        if let Some(reason) = reason(event.metadata()) {
            metrics::record_bad_request(reason);
        }
    }
}

impl<S> Filter<S> for EarlyAnswers {
    fn enabled(&self, metadata: &Metadata<'_>, _context: &Context<'_, S>) -> bool {
        reason(metadata).is_some()
    }

    fn callsite_enabled(&self, metadata: &'static Metadata<'static>) -> Interest {
        if reason(metadata).is_some() {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::TRACE)
    }
}
