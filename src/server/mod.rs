//! The HTTP side of kadmit: the routes of the webhook (TLS) and operations
//! (plain HTTP) listeners, their thin handlers, and running both servers until
//! a shutdown signal ([`shutdown`]: drain, close, answer what was read, exit).
//!
//! A review goes through `review`: content type and encoding, body (bounded
//! in size and time), the current plan from the [`Store`], the rule set named
//! in the URL, then [`decide`] (decode → select → evaluate: the rules are
//! selected once, when [`review::decode_with`] reaches the objects, which are
//! parsed in the same pass only when a rule stands), [`review::encode`] of
//! the verdict's response, and `observe` (log line, metrics, denials ring,
//! recording); an HTTP/2 answer goes out in pieces h2 buffers (`body.rs`).
//! Every failure along the way is a [`Rejection`] answered with a Kubernetes
//! `Status` body by [`Rejection::respond`]; every review that could be read
//! is answered with HTTP 200, whatever the verdict. Request fields that reach
//! a log line or a `Status` message are cut first ([`excerpt`]); what actix
//! answers before a handler runs is
//! counted by [`early`]. `docs/server-limits.md` lists every bound.
//!
//! The TLS listener's connections are kadmit's own (`accept.rs`): bounded TLS
//! handshakes and connection count, then HTTP/1.1 through actix's dispatcher
//! or HTTP/2 under stream and header limits (`http2.rs`), both into the same
//! routes. Bodies being read share one byte budget ([`budget`]).
//!
//! | path | listener | what |
//! |---|---|---|
//! | `POST /validate`, `POST /validate/{ruleset}` | TLS | deny, warn, audit; never a patch |
//! | `POST /mutate`, `POST /mutate/{ruleset}` | TLS | mutations only |
//! | `GET /healthz`, `/readyz`, `/metrics`, `/status` | operations | see [`health`] |
//! | `GET /dashboard`, `/api/summary`, `/api/denials` | operations | see [`crate::dashboard`] |
//!
//! The operations listener (`--plain-listen`) is plain HTTP unless
//! `--ops-tls` is on; [`access`] decides who may use which of its paths. Its
//! connections are kadmit's own too (`operations.rs`): a new connection
//! beyond the cap closes the oldest, and a client that does not read its
//! answer is reset, so that the kubelet's probes always get through.

mod accept;
pub mod access;
mod body;
pub mod budget;
pub mod client_ca;
pub mod connections;
mod dashboard_routes;
pub mod early;
mod eviction;
mod handshake;
pub mod health;
mod http2;
mod observe;
mod open_streams;
mod operations;
pub mod record;
pub mod selfsigned;
pub mod shutdown;
pub mod status;
pub mod tls;
pub mod validity;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::metrics::SharedString;
use actix_web::dev::Server;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use metrics_exporter_prometheus::PrometheusHandle;

use crate::dashboard::denials::Denials;
use crate::dashboard::summary::History;
use crate::eval::{self, Ask, Verdict};
use crate::excerpt;
use crate::metrics;
use crate::plan::{Mode, Plan, RuleSetId, RuleSets};
use crate::reload::Reloader;
use crate::reload::store::Store;
use crate::review::{self, ObjectParse};
use crate::shadow::RecentReviews;
pub use accept::Connections;
use budget::{BodyBudget, Reservation};
pub use operations::OPS_MAX_CONNECTIONS;
use shutdown::{Phase, Shutdown};
pub use status::Rejection;

/// How long an idle keep-alive connection stays open. Longer than Go's
/// default idle-connection timeout (90 s), so the API server, not kadmit,
/// closes idle connections: a POST on a connection the server is closing at
/// that moment fails instead of being retried.
const KEEP_ALIVE: Duration = Duration::from_secs(120);

/// How long to wait for a client to acknowledge the close of its connection.
const CLIENT_DISCONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Limits applied to every review request.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest accepted body; larger ones get 413.
    pub max_body_bytes: usize,
    /// Time allowed to receive the request head and, separately, the body.
    pub request_timeout: Duration,
}

/// What the handlers share: the plan store and the server's settings.
#[derive(Debug)]
pub struct State {
    store: Arc<Store>,
    limits: Limits,
    metrics: Option<PrometheusHandle>,
    shutdown: Arc<Shutdown>,
    reloader: Option<Arc<Reloader>>,
    denials: Arc<Denials>,
    history: Arc<History>,
    eval_options: eval::EvalOptions,
    body_budget: Arc<BodyBudget>,
    recorder: Option<record::Recorder>,
    recent: Arc<RecentReviews>,
    answers: dashboard_routes::RecentAnswers,
}

impl State {
    /// Handler state over `store`, rendering `/metrics` from `metrics` when
    /// a recorder is installed.
    pub fn new(store: Arc<Store>, limits: Limits, metrics: Option<PrometheusHandle>) -> Self {
        State {
            store,
            limits,
            metrics,
            shutdown: Arc::new(Shutdown::default()),
            reloader: None,
            eval_options: eval::EvalOptions {
                verify_patches: false,
                limits: eval::budget::Limits::DEFAULT,
                answer: true,
            },
            denials: Arc::new(Denials::default()),
            history: Arc::new(History::default()),
            body_budget: BodyBudget::new(usize::MAX),
            recorder: None,
            recent: Arc::new(RecentReviews::off()),
            answers: dashboard_routes::RecentAnswers::default(),
        }
    }

    /// The same state, letting the review bodies being read or evaluated
    /// hold at most `bytes` together (see [`budget`]).
    pub fn with_body_budget(mut self, bytes: usize) -> Self {
        self.body_budget = BodyBudget::new(bytes);
        self
    }

    /// The same state, recording every answered review with `recorder`
    /// (`serve --record`).
    pub fn with_recorder(mut self, recorder: record::Recorder) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// The same state, keeping the answered reviews in `recent` for the
    /// next reload to be shadowed with (see [`crate::shadow`]).
    pub fn with_recent_reviews(mut self, recent: Arc<RecentReviews>) -> Self {
        self.recent = recent;
        self
    }

    /// The same state, evaluating with `options`.
    pub fn with_eval_options(mut self, options: eval::EvalOptions) -> Self {
        self.eval_options = options;
        self
    }

    /// The same state, keeping the last `capacity` denials for
    /// `/api/denials` (0 keeps none).
    pub fn with_denials_capacity(mut self, capacity: usize) -> Self {
        self.denials = Arc::new(Denials::new(capacity));
        self
    }

    /// The same state, keeping the last `capacity` denials in at most
    /// `max_bytes` for `/api/denials` (0 for either keeps none).
    pub fn with_denials_limits(mut self, capacity: usize, max_bytes: usize) -> Self {
        self.denials = Arc::new(Denials::with_limits(capacity, max_bytes));
        self
    }

    /// The same state, drawing the dashboard's charts from `history`.
    pub fn with_history(mut self, history: Arc<History>) -> Self {
        self.history = history;
        self
    }

    /// The recent-denials ring.
    pub fn denials(&self) -> &Arc<Denials> {
        &self.denials
    }

    /// The metric snapshots behind the dashboard's charts.
    pub fn history(&self) -> &Arc<History> {
        &self.history
    }

    /// The same state, reporting reloads of `reloader` on `/status`.
    pub fn with_reloader(mut self, reloader: Arc<Reloader>) -> Self {
        self.reloader = Some(reloader);
        self
    }

    /// The reloader, when the rules are reloaded from a directory.
    pub fn reloader(&self) -> Option<&Arc<Reloader>> {
        self.reloader.as_ref()
    }

    /// What `GET /status` and the dashboard report about reloading.
    pub fn reload_state(&self) -> crate::reload::ReloadState {
        match self.reloader() {
            Some(reloader) => reloader.state(),
            // Without a reloader (tests that store a plan directly), what the
            // store says.
            None => crate::reload::ReloadState {
                generation: self.store.generation(),
                ready: self.store.is_ready(),
                ..crate::reload::ReloadState::default()
            },
        }
    }

    /// The plan store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// True once shutdown has begun: `/readyz` reports not ready so that
    /// endpoints stop sending new reviews while in-flight ones finish.
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.has_begun()
    }

    /// The shutdown phase and the webhook listener's open connections.
    pub fn shutdown(&self) -> &Arc<Shutdown> {
        &self.shutdown
    }
}

/// Registers the webhook routes (the TLS listener's app) on `cfg`.
///
/// Also installs the state and the payload limit. The handlers read the body
/// and the path themselves, so no actix extractor can refuse a request with
/// an error body of its own.
pub fn routes(cfg: &mut web::ServiceConfig, state: &web::Data<State>) {
    cfg.app_data(state.clone())
        .app_data(web::PayloadConfig::new(state.limits.max_body_bytes))
        // The plain paths first: the router tries each resource in turn,
        // and a `{ruleset}` path is matched with a regular expression
        // (1,400 instructions a `/mutate` review spent on
        // `/validate/{ruleset}`). No two paths overlap, so the order
        // decides nothing else.
        .service(only("POST", "/validate", web::post().to(validate)))
        .service(only("POST", "/mutate", web::post().to(mutate)))
        .service(only(
            "POST",
            "/validate/{ruleset}",
            web::post().to(validate),
        ))
        .service(only("POST", "/mutate/{ruleset}", web::post().to(mutate)))
        .default_service(web::to(not_found));
}

/// A resource at `path` answering `route`, and a 405 `Status` naming
/// `allowed` for every other method.
fn only(allowed: &'static str, path: &str, route: actix_web::Route) -> actix_web::Resource {
    web::resource(path).route(route).default_service(web::to(
        move |request: HttpRequest| async move {
            Rejection::MethodNotAllowed {
                method: excerpt::field(request.method().as_str()),
                path: excerpt::field(request.path()),
                allowed,
            }
            .respond(&request)
        },
    ))
}

/// The 404 `Status` for a path no route has (both listeners).
pub(crate) async fn not_found(request: HttpRequest) -> HttpResponse {
    Rejection::NotFound(excerpt::field(request.path())).respond(&request)
}

async fn validate(
    request: HttpRequest,
    body: web::Payload,
    state: web::Data<State>,
) -> HttpResponse {
    answer(&state, &request, body, Mode::Validate).await
}

async fn mutate(request: HttpRequest, body: web::Payload, state: web::Data<State>) -> HttpResponse {
    answer(&state, &request, body, Mode::Mutate).await
}

/// Answers one review request: the AdmissionReview response, or the `Status`
/// of whatever went wrong. The rule set is the `{ruleset}` of the path, all
/// of them when the path has none.
async fn answer(
    state: &State,
    request: &HttpRequest,
    body: web::Payload,
    mode: Mode,
) -> HttpResponse {
    let rule_set = request.match_info().get("ruleset").map(str::to_owned);
    match review(state, request, body, mode, rule_set).await {
        Ok(response) => response,
        Err(rejection) => rejection.respond(request),
    }
}

/// One review: read the body, then decode → select → evaluate
/// ([`decide`]), respond ([`review::encode`]) and observe (the log, the
/// metrics, the denials ring and the recording, [`observe`]).
async fn review(
    state: &State,
    request: &HttpRequest,
    body: web::Payload,
    mode: Mode,
    rule_set: Option<String>,
) -> Result<HttpResponse, Rejection> {
    check_content_type(request)?;
    check_content_encoding(request)?;
    // Held until the review is answered, then, at the answer's size, until
    // the connection has taken the answer (see [`budget`]).
    let (body, mut held) = read_body(request, body, state.limits, &state.body_budget).await?;
    let started = Instant::now();

    // The guard is taken after the last await and dropped before returning:
    // it pins the plan for exactly one review.
    let plan = state.store.load().ok_or(Rejection::NotReady)?;
    let ids = rule_set
        .as_deref()
        .map(|segment| rule_set_ids(&plan, segment))
        .transpose()?;
    let ask = Ask::new(mode)
        .rule_sets(ids.as_deref().map_or(RuleSets::All, RuleSets::from))
        .options(state.eval_options);
    let (review, mut verdict) = decide(&plan, &body, ask)?;
    // Counted per rule set, under the plan's names (never text taken from
    // the URL as such): a grouped entry's call counts once for each of its
    // rule sets, as one entry per rule set would.
    let rule_set_labels: Vec<SharedString> = match &ids {
        None => vec![SharedString::const_str(metrics::ALL_RULE_SETS)],
        Some(ids) => ids
            .iter()
            .filter_map(|&id| plan.rule_set_name(id))
            .map(|name| SharedString::from(name.to_string()))
            .collect(),
    };
    let mut bytes = review::encode(review.version, &review.request.uid, &verdict.response(mode));
    // An answer the whole budget cannot hold would be refused as busy at
    // every retry: it is a denial instead, as any review over a limit is.
    if bytes.len() > held.limit() {
        verdict = crate::eval::answer_too_large(&plan, held.limit());
        bytes = review::encode(review.version, &review.request.uid, &verdict.response(mode));
    }
    let response = verdict.response(mode);
    // The answer is held until the client takes it, charged to the budget
    // as the body was: a `/mutate` answer can be several times its review
    // (a 4 MB patch for a 560 KB Pod), and answers no client read, counted
    // at their reviews' size, took the process to 561 MB.
    if bytes.len() > held.bytes() && !held.grow(bytes.len() - held.bytes()) {
        return Err(Rejection::Busy {
            budget: held.limit(),
        });
    }
    observe::Answered {
        plan: &plan,
        review: &review,
        verdict: &verdict,
        response: &response,
        mode,
        path_rule_sets: rule_set.as_deref(),
        rule_set_labels,
        elapsed: started.elapsed(),
    }
    .observe(state, &body, &bytes);
    drop(plan);
    drop(body);
    held.keep_at_most(bytes.len());
    let mut answer = HttpResponse::Ok();
    answer.content_type("application/json");
    Ok(if request.version() == actix_web::http::Version::HTTP_2 {
        answer.body(body::Buffered::review(bytes).holding(held))
    } else if bytes.len() > body::SHARED_PIECE {
        // HTTP/2 bounds the whole answer's time itself (`http2::send`).
        answer.body(
            body::Buffered::shared(bytes.into())
                .holding(held)
                .taken_within(connections::WRITE_STALL_TIMEOUT),
        )
    } else {
        // One piece, copied into the write buffer at once: nothing is left
        // to hold.
        answer.body(bytes)
    })
}

/// Decodes a review body and evaluates it against `plan`: all a review costs
/// apart from the transport, the metrics and the response (what
/// `benches/evaluate.rs` measures).
///
/// The rules are selected once, when the decoder reaches the objects: it
/// parses them in the same pass only when a selected rule will read them,
/// and then only the parts the mode's rules can read
/// ([`Plan::projections`]); it only skips them otherwise.
pub fn decide(
    plan: &Plan,
    body: &[u8],
    ask: Ask<'_>,
) -> Result<(review::Review, Verdict), Rejection> {
    decide_parsing(plan, body, ask, Objects::Projected)
}

/// [`decide`] with the objects parsed whole, not only the parts the rules
/// can read: the tests and the review fuzz target check that both answer
/// alike.
pub fn decide_on_whole_objects(
    plan: &Plan,
    body: &[u8],
    ask: Ask<'_>,
) -> Result<(review::Review, Verdict), Rejection> {
    decide_parsing(plan, body, ask, Objects::Whole)
}

/// How [`decide_parsing`] parses the objects a selected rule will read.
#[derive(Clone, Copy)]
enum Objects {
    Projected,
    Whole,
}

fn decide_parsing(
    plan: &Plan,
    body: &[u8],
    ask: Ask<'_>,
    objects: Objects,
) -> Result<(review::Review, Verdict), Rejection> {
    if review::may_parse_over(body, review::MAX_PARSED_BYTES) {
        return too_large_to_parse(plan, body, ask);
    }
    let mut selection = None;
    let projections = plan.projections_of(ask.mode, ask.rule_sets);
    let decoded = review::decode_with(body, &mut |request| {
        let selected = eval::select(plan, request, ask);
        let parse = match objects {
            _ if !selected.reads_object() => ObjectParse::Raw,
            Objects::Projected => ObjectParse::Projected(projections.of_kind(&request.kind.kind)),
            Objects::Whole => ObjectParse::Full,
        };
        selection = Some(selected);
        parse
    });
    let mut review = match decoded {
        Ok(review) => review,
        // The request was read up to its objects: one of them failed.
        Err(error) if selection.is_some() => return unreadable_object(plan, body, error),
        Err(error) => return Err(error.into()),
    };
    // Selected again only when there was no object to reach, or when the
    // objects came before a field the criteria read (kube-apiserver never
    // writes that order): the verdict never depends on the field order.
    let selection = match selection {
        Some(selection) if !review.objects_came_early => selection,
        _ => eval::select(plan, &review.request, ask),
    };
    let verdict = judge(selection, &mut review, ask.mode)?;
    Ok((review, verdict))
}

/// The verdict of the `selection`'s rules on `review`.
fn judge(
    selection: eval::Selection<'_, '_>,
    review: &mut review::Review,
    mode: Mode,
) -> Result<Verdict, Rejection> {
    Ok(match mode {
        // The mutating rules work on the decoded object itself.
        Mode::Mutate => {
            let object = review.request.object.take();
            selection.taking_object(object).evaluate(&review.request)?
        }
        // Kept in the request: a denial's record names the object.
        Mode::Validate => selection.evaluate(&review.request)?,
    })
}

/// What a review that did not decode is answered: when it decodes with its
/// objects kept raw, what failed was parsing an object a selected rule
/// reads (nested deeper than serde_json allows there), and the review is
/// denied ([`eval::unreadable_object`]) rather than refused with a 400,
/// which the API server would answer by the webhook's `failurePolicy`
/// (admitting it under `Ignore`). Anything else is refused as it was.
#[cold]
#[inline(never)]
fn unreadable_object(
    plan: &Plan,
    body: &[u8],
    error: review::DecodeError,
) -> Result<(review::Review, Verdict), Rejection> {
    match review::decode_with(body, &mut |_| ObjectParse::Raw) {
        Ok(review) => {
            let verdict = eval::unreadable_object(plan, &error.to_string());
            Ok((review, verdict))
        }
        Err(_) => Err(error.into()),
    }
}

/// What a review whose objects could take more than
/// [`review::MAX_PARSED_BYTES`] to parse is answered. Read with its objects
/// kept raw (nothing of them is built), it is denied
/// ([`eval::too_large_to_parse`]) when a rule that can deny applies,
/// rather than refused with a 413, which the API server would answer by
/// the webhook's `failurePolicy` (admitting it under `Ignore`); allowed with
/// a warning ([`eval::too_large_to_warn`]) when only Warn and Audit rules
/// that cannot fail apply; and decided as usual when none does. A body whose part outside
/// the objects is itself past the bound, or that does not decode even so,
/// is refused as before.
#[cold]
#[inline(never)]
fn too_large_to_parse(
    plan: &Plan,
    body: &[u8],
    ask: Ask<'_>,
) -> Result<(review::Review, Verdict), Rejection> {
    let limit = review::MAX_PARSED_BYTES;
    // What decoding builds besides the objects (a user's groups and extra)
    // is bounded as the whole was: past it, refused as before.
    if review::parsed_size_estimate_outside_objects(body).is_none_or(|rest| rest > limit) {
        return Err(Rejection::TooLargeParsed { limit });
    }
    let Ok(mut review) = review::decode_with(body, &mut |_| ObjectParse::Raw) else {
        return Err(Rejection::TooLargeParsed { limit });
    };
    let selection = eval::select(plan, &review.request, ask);
    if selection.can_deny() {
        return Ok((review, eval::too_large_to_parse(plan, limit)));
    }
    if selection.reads_object() {
        return Ok((review, eval::too_large_to_warn(plan, limit)));
    }
    let verdict = judge(selection, &mut review, ask.mode)?;
    Ok((review, verdict))
}

/// The rule sets a webhook path's last segment names (`images` or
/// `images.services`, see [`crate::webhook::rule_set_names`]), in plan
/// order: a 404 names the first unknown one, a 400 a malformed segment.
fn rule_set_ids(plan: &Plan, segment: &str) -> Result<Vec<RuleSetId>, Rejection> {
    crate::webhook::rule_set_ids(plan, segment).map_err(|error| match error {
        crate::webhook::RuleSetsError::Path(error) => Rejection::RuleSetPath {
            segment: excerpt::field(segment),
            reason: error.to_string(),
        },
        crate::webhook::RuleSetsError::Unknown(name) => Rejection::UnknownRuleSet {
            name: excerpt::field(&name),
            known: known_rule_sets(plan),
        },
    })
}

/// The rule-set names of `plan`, for the 404 message (cut, like every part
/// of a Status message, when there are very many).
fn known_rule_sets(plan: &Plan) -> String {
    let names: Vec<&str> = plan.rule_sets().iter().map(|info| &*info.name).collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        excerpt::cut(&names.join(", "), excerpt::MAX_MESSAGE_BYTES / 2).into_owned()
    }
}

/// Accepts `application/json`, with or without parameters such as `charset`.
fn check_content_type(request: &HttpRequest) -> Result<(), Rejection> {
    let Some(value) = request.headers().get(header::CONTENT_TYPE) else {
        return Err(Rejection::MissingContentType);
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let essence = text.split(';').next().unwrap_or_default().trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(Rejection::ContentType(excerpt::field(&text)))
    }
}

/// Accepts a body with no `Content-Encoding`, or only `identity`. Anything
/// else (gzip, br, ...) is refused rather than read as if it were plain JSON:
/// kadmit does not decompress, and the API server never compresses webhook
/// requests.
fn check_content_encoding(request: &HttpRequest) -> Result<(), Rejection> {
    for value in request.headers().get_all(header::CONTENT_ENCODING) {
        let text = String::from_utf8_lossy(value.as_bytes());
        let encoded = text
            .split(',')
            .map(str::trim)
            .any(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case("identity"));
        if encoded {
            return Err(Rejection::ContentEncoding(excerpt::field(&text)));
        }
    }
    Ok(())
}

/// Reads the whole body, refusing it as soon as it is known to exceed the
/// limit or the process-wide body budget, and giving up when it does not
/// arrive within the request timeout (so a client trickling bytes cannot hold
/// a connection slot forever). The reservation holds the body's bytes in the
/// budget until it is dropped.
async fn read_body(
    request: &HttpRequest,
    body: web::Payload,
    limits: Limits,
    budget: &Arc<BodyBudget>,
) -> Result<(web::Bytes, Reservation), Rejection> {
    // Refuse a declared oversize body before reading a byte of it.
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limits.max_body_bytes as u64) {
        return Err(Rejection::TooLarge {
            limit: limits.max_body_bytes,
        });
    }
    let mut held = budget.reservation();
    let read = collect_body(body, limits.max_body_bytes, declared, &mut held);
    match actix_web::rt::time::timeout(limits.request_timeout, read).await {
        Err(_elapsed) => Err(Rejection::BodyTimeout {
            secs: limits.request_timeout.as_secs(),
        }),
        Ok(Err(rejection)) => Err(rejection),
        Ok(Ok(bytes)) => Ok((bytes, held)),
    }
}

/// The first buffer of a body, so small bodies do not grow it several times.
const FIRST_BODY_BUFFER: usize = 8 * 1024;

/// Collects `body` into one buffer whose capacity is reserved in `held`
/// before it is allocated. The buffer doubles as bytes arrive (never past the
/// declared length or `max`), so a client holds at most twice what it has
/// sent, three times while the buffer grows: a declared length alone
/// reserves nothing.
///
/// A body that came in one piece whose end is already known (the API
/// server's reviews up to 16 KiB, in one DATA frame or one read) is used as
/// it came, not copied. Such a piece may share the connection's read
/// buffer, so it is never held across a wait: a piece that more may follow
/// is copied into the buffer before the next is awaited.
async fn collect_body(
    mut body: web::Payload,
    max: usize,
    declared: Option<u64>,
    held: &mut Reservation,
) -> Result<web::Bytes, Rejection> {
    use futures_core::Stream as _;
    use std::task::Poll;
    let ceiling = declared.map_or(max, |length| (length as usize).min(max));
    let mut buffer: Vec<u8> = Vec::new();
    let mut next = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_next(cx)).await;
    if let Some(chunk) = next {
        let first = chunk.map_err(|error| Rejection::Payload(error.to_string()))?;
        if first.len() > max {
            return Err(Rejection::TooLarge { limit: max });
        }
        if !held.grow(first.len()) {
            return Err(Rejection::Busy {
                budget: held.limit(),
            });
        }
        // Asked once, without waiting: is that all?
        match std::future::poll_fn(|cx| Poll::Ready(std::pin::Pin::new(&mut body).poll_next(cx)))
            .await
        {
            Poll::Ready(None) => return Ok(first),
            Poll::Ready(Some(chunk)) => next = Some(chunk),
            Poll::Pending => next = None,
        }
        append(&mut buffer, &first, max, ceiling, held)?;
        drop(first);
        if let Some(chunk) = next.take() {
            let chunk = chunk.map_err(|error| Rejection::Payload(error.to_string()))?;
            append(&mut buffer, &chunk, max, ceiling, held)?;
        }
        while let Some(chunk) =
            std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_next(cx)).await
        {
            let chunk = chunk.map_err(|error| Rejection::Payload(error.to_string()))?;
            append(&mut buffer, &chunk, max, ceiling, held)?;
        }
    }
    Ok(web::Bytes::from(buffer))
}

/// Appends `chunk` to a body's `buffer`, growing it (and what `held`
/// reserves) by doubling, within `ceiling` and never past `max`.
fn append(
    buffer: &mut Vec<u8>,
    chunk: &[u8],
    max: usize,
    ceiling: usize,
    held: &mut Reservation,
) -> Result<(), Rejection> {
    let needed = buffer.len() + chunk.len();
    if needed > max {
        return Err(Rejection::TooLarge { limit: max });
    }
    if needed > buffer.capacity() {
        let capacity = needed
            .max(buffer.capacity().saturating_mul(2))
            .max(FIRST_BODY_BUFFER)
            .min(ceiling.max(needed));
        // While the bytes move, the old buffer (or, the first time, the
        // piece the body began with, which `held` already holds) and the new
        // one are both allocated: the budget holds both until the old one
        // is freed.
        let moving = held.bytes().max(buffer.capacity()).saturating_add(capacity);
        if !held.grow(moving.saturating_sub(held.bytes())) {
            return Err(Rejection::Busy {
                budget: held.limit(),
            });
        }
        buffer.reserve_exact(capacity - buffer.len());
        held.keep_at_most(capacity);
    }
    buffer.extend_from_slice(chunk);
    Ok(())
}

/// Where and how to listen.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address of the TLS webhook listener.
    pub tls_listen: SocketAddr,
    /// Address of the plain-HTTP operations listener.
    pub plain_listen: SocketAddr,
    /// Worker threads of the TLS listener; `None` for one per CPU.
    pub workers: Option<usize>,
    /// Time between SIGTERM and closing the listener, while `/readyz`
    /// already answers 503 ([`shutdown`]).
    pub shutdown_delay: Duration,
    /// Time given to the reviews already read once the listener is closed.
    pub shutdown_timeout: Duration,
    /// Bounds on the TLS listener's connections.
    pub connections: Connections,
    /// TLS and access control of the operations listener.
    pub ops: OpsListener,
}

/// How the operations listener (`--plain-listen`) is protected.
#[derive(Debug, Clone)]
pub struct OpsListener {
    /// The rustls configuration with `--ops-tls`; plain HTTP without.
    pub tls: Option<rustls::ServerConfig>,
    /// Who may use it ([`access`]).
    pub access: Arc<access::OpsAccess>,
    /// Open connections at most ([`operations`]).
    pub max_connections: usize,
}

impl Default for OpsListener {
    fn default() -> Self {
        OpsListener {
            tls: None,
            access: Arc::default(),
            max_connections: OPS_MAX_CONNECTIONS,
        }
    }
}

/// Why the servers could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A listener could not bind its address.
    #[error("cannot listen on {addr} ({listener} listener)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// `tls` or `operations`.
        listener: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Installing the signal handlers failed.
    #[error("cannot install the shutdown signal handlers")]
    Signals(#[source] io::Error),
    /// The shutdown timeout ended with connections still open.
    #[error(
        "stopped with {open_connections} connection(s) still open after --shutdown-timeout-secs; \
         their reviews were not answered"
    )]
    Unfinished {
        /// Connections open when the server stopped.
        open_connections: usize,
    },
    /// A server stopped with an error.
    #[error("the {listener} listener failed")]
    Run {
        /// `tls` or `plain`.
        listener: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Both listeners, bound and ready to run.
pub struct Bound {
    tls: Server,
    /// The webhook listener's socket, to close it at shutdown.
    tls_listener: std::net::TcpListener,
    /// The webhook listener's open connections.
    connections: Arc<connections::Registry>,
    plain: Server,
    shutdown_delay: Duration,
    shutdown_timeout: Duration,
    tls_addr: SocketAddr,
    plain_addr: SocketAddr,
    /// Whether the operations listener speaks TLS (`--ops-tls`).
    plain_tls: bool,
    state: web::Data<State>,
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound")
            .field("tls_addr", &self.tls_addr)
            .field("plain_addr", &self.plain_addr)
            .finish_non_exhaustive()
    }
}

/// Binds the TLS webhook listener and the plain operations listener.
///
/// Must be called inside an actix system (`actix_web::rt::System`). Binding
/// `:0` picks free ports; [`Bound::tls_addr`] and [`Bound::plain_addr`] tell
/// which.
pub fn bind(
    config: &Config,
    tls: rustls::ServerConfig,
    state: web::Data<State>,
) -> Result<Bound, ServeError> {
    let accept::Listener {
        server: tls_server,
        socket: tls_listener,
        addr: tls_addr,
        connections,
    } = accept::listen(config, tls, state.clone())?;

    let operations::Listener {
        server: plain_server,
        addr: plain_addr,
    } = operations::listen(config, state.clone())?;
    Ok(Bound {
        tls: tls_server,
        tls_listener,
        connections,
        plain: plain_server,
        shutdown_delay: config.shutdown_delay,
        shutdown_timeout: config.shutdown_timeout,
        tls_addr,
        plain_addr,
        plain_tls: config.ops.tls.is_some(),
        state,
    })
}

impl Bound {
    /// The address the TLS listener is bound to.
    pub fn tls_addr(&self) -> SocketAddr {
        self.tls_addr
    }

    /// The address the operations listener is bound to.
    pub fn plain_addr(&self) -> SocketAddr {
        self.plain_addr
    }

    /// Whether the operations listener speaks TLS.
    pub fn plain_tls(&self) -> bool {
        self.plain_tls
    }

    /// Serves until SIGTERM or SIGINT, then shuts down as [`shutdown`]
    /// describes: drain (SIGTERM only), close, answer what was read, exit.
    pub async fn run(self) -> Result<(), ServeError> {
        let Bound {
            tls,
            plain,
            tls_listener,
            connections,
            state,
            shutdown_delay,
            shutdown_timeout,
            ..
        } = self;
        let tls_handle = tls.handle();
        let plain_handle = plain.handle();
        let mut tls_task = actix_web::rt::spawn(tls);
        let mut plain_task = actix_web::rt::spawn(plain);
        let mut signals = Signals::install()?;
        let shutdown = state.shutdown().clone();

        let first = tokio::select! {
            signal = signals.next() => signal,
            result = &mut tls_task => {
                plain_handle.stop(false).await;
                return stopped("tls", result);
            }
            result = &mut plain_task => {
                tls_handle.stop(false).await;
                return stopped("plain", result);
            }
        };
        // Not ready first, then the log line: whoever sees the line also
        // sees /readyz fail.
        shutdown.advance(Phase::Draining);
        let started = Instant::now();
        let drain = if first == "SIGTERM" {
            shutdown_delay
        } else {
            Duration::ZERO
        };
        tracing::info!(
            signal = first,
            drain_secs = drain.as_secs_f64(),
            open_connections = connections.open_connections(),
            "Shutting down: not ready; accepting until the drain delay ends"
        );
        let mut interrupted = false;
        if !drain.is_zero() {
            tokio::select! {
                () = tokio::time::sleep(drain) => {}
                signal = signals.next() => {
                    tracing::warn!(signal, "Second signal: stopping at once");
                    interrupted = true;
                }
            }
        }

        if !interrupted {
            tls_handle.pause().await;
            refuse_new_connections(&tls_listener);
            shutdown.advance(Phase::Closing);
            tracing::info!(
                open_connections = connections.open_connections(),
                timeout_secs = shutdown_timeout.as_secs(),
                "Stopped accepting; answering the reviews already read"
            );
            tokio::select! {
                () = connections.all_closed() => {}
                () = tokio::time::sleep(shutdown_timeout) => {}
                signal = signals.next() => {
                    tracing::warn!(signal, "Second signal: stopping at once");
                }
            }
        }
        let unfinished = connections.open_connections();
        // Nothing is left to wait for (or nothing more will be waited for):
        // stop both servers without actix's own grace period. A worker
        // busy with a review cannot take the stop message, so the wait for
        // it is bounded too.
        for handle in [&tls_handle, &plain_handle] {
            let _ = tokio::time::timeout(FORCED_STOP, handle.stop(false)).await;
        }
        if unfinished > 0 {
            tracing::error!(
                open_connections = unfinished,
                elapsed_secs = started.elapsed().as_secs_f64(),
                "Stopped with connections still open; their reviews were not answered"
            );
            return Err(ServeError::Unfinished {
                open_connections: unfinished,
            });
        }
        tracing::info!(elapsed_secs = started.elapsed().as_secs_f64(), "Stopped");
        Ok(())
    }
}

/// How long a forced stop of a server may take before kadmit exits anyway.
const FORCED_STOP: Duration = Duration::from_secs(1);

/// Closes the listening socket so that new connections are refused at once
/// instead of waiting in the backlog for an accept that will not come.
fn refuse_new_connections(listener: &std::net::TcpListener) {
    if let Err(error) = socket2::SockRef::from(listener).shutdown(std::net::Shutdown::Both) {
        tracing::warn!(%error, "Cannot close the webhook listener; new connections wait until exit");
    }
}

fn stopped(
    listener: &'static str,
    result: Result<io::Result<()>, actix_web::rt::task::JoinError>,
) -> Result<(), ServeError> {
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(ServeError::Run { listener, source }),
        Err(join) => Err(ServeError::Run {
            listener,
            source: io::Error::other(join.to_string()),
        }),
    }
}

/// SIGTERM and SIGINT, each received as often as it is sent.
struct Signals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    #[cfg(unix)]
    fn install() -> Result<Self, ServeError> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            terminate: signal(SignalKind::terminate()).map_err(ServeError::Signals)?,
            interrupt: signal(SignalKind::interrupt()).map_err(ServeError::Signals)?,
        })
    }

    #[cfg(not(unix))]
    fn install() -> Result<Self, ServeError> {
        Ok(Signals {})
    }

    /// The name of the next signal.
    #[cfg(unix)]
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }

    /// Resolves at the next Ctrl-C.
    #[cfg(not(unix))]
    async fn next(&mut self) -> &'static str {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

#[cfg(test)]
mod tests {
    use actix_web::App;
    use actix_web::test::{TestRequest, call_service, init_service, read_body_json};
    use serde_json::Value;

    use super::*;

    const DENY_LABELLED: &str = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: labelled
spec:
  rules:
    - name: deny-labelled
      match: {operations: [CREATE], resources: ["configmaps"]}
      when:
        - path: $.object.metadata.labels.deny
          exists: true
      deny:
        - message: "labelled for denial"
"#;

    #[test]
    fn a_path_naming_rule_sets_parses_only_what_their_rules_read() {
        // Set `a` reads spec.config; set `b` (failurePolicy Ignore) does
        // not. A config nested past what kadmit parses made the review of
        // /validate/b a 400, which the API server answers under Ignore by
        // admitting what b denies.
        let rules = r#"
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: a}
spec:
  rules:
    - name: audit-deep
      action: Audit
      match: {resources: ["widgets.example.com"], operations: [UPDATE]}
      deny: [{path: $.object.spec.config, exists: true, message: has config}]
---
apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata: {name: b}
spec:
  failurePolicy: Ignore
  rules:
    - name: no-evil
      match: {resources: ["widgets.example.com"]}
      deny: [{path: $.object.spec.evil, equals: true, message: evil}]
"#;
        let plan = crate::plan::compile(&crate::rules::load_str("sets.yaml", rules))
            .expect("the test rules compile");
        let config = format!("{}1{}", "[".repeat(130), "]".repeat(130));
        let body = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{
            "uid":"u","kind":{{"group":"example.com","version":"v1","kind":"Widget"}},
            "resource":{{"group":"example.com","version":"v1","resource":"widgets"}},
            "operation":"CREATE","namespace":"default","name":"w",
            "userInfo":{{"username":"alice"}},
            "object":{{"apiVersion":"example.com/v1","kind":"Widget","metadata":{{"name":"w"}},
            "spec":{{"evil":true,"config":{config}}}}}}}}}"#
        );
        let b = plan.rule_set_id("b").expect("set b");
        let ids = [b];
        for rule_sets in [RuleSets::One(b), RuleSets::Several(&ids)] {
            let ask = Ask::new(Mode::Validate).rule_sets(rule_sets);
            let (_, verdict) = decide(&plan, body.as_bytes(), ask)
                .unwrap_or_else(|rejection| panic!("{rule_sets:?}: {rejection}"));
            let denial = verdict.denial.expect("denied");
            assert!(denial.message.contains("evil"), "{}", denial.message);
        }
        // Every rule set: a's rules read the config, which is too deep to
        // parse: denied, not refused (which `Ignore` would admit).
        let (_, verdict) =
            decide(&plan, body.as_bytes(), Ask::new(Mode::Validate)).expect("answered");
        assert!(!verdict.allowed);
        assert_unreadable(&verdict);
    }

    /// The body a handler is given for `payload`, which the tests feed
    /// piece by piece, as a connection's reader feeds it.
    fn handed(payload: actix_http::h1::Payload) -> web::Payload {
        use actix_web::FromRequest as _;
        let mut payload = actix_http::Payload::from(payload);
        let request = TestRequest::default().to_http_request();
        web::Payload::from_request(&request, &mut payload)
            .into_inner()
            .expect("a payload")
    }

    /// Polls `future` once, with a waker that does nothing: the tests
    /// below decide themselves when more of the body arrives.
    fn poll_once<F: std::future::Future>(
        future: std::pin::Pin<&mut F>,
    ) -> std::task::Poll<F::Output> {
        future.poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    }

    /// [`collect_body`] of a body whose pieces have all been fed.
    fn collected(
        body: web::Payload,
        max: usize,
        held: &mut Reservation,
    ) -> Result<web::Bytes, Rejection> {
        match poll_once(std::pin::pin!(collect_body(body, max, None, held))) {
            std::task::Poll::Ready(read) => read,
            std::task::Poll::Pending => panic!("the whole body was fed, yet it is still awaited"),
        }
    }

    #[test]
    fn a_body_in_one_piece_is_used_as_it_came() {
        let budget = BodyBudget::new(1 << 20);
        let mut held = budget.reservation();
        let (mut sender, body) = actix_http::h1::Payload::create(false);
        let piece = web::Bytes::from(vec![b'x'; 3000]);
        sender.feed_data(piece.clone());
        sender.feed_eof();
        let read = collected(handed(body), 1 << 20, &mut held).expect("the body");
        // The same bytes, not a copy of them.
        assert_eq!(read.as_ptr(), piece.as_ptr());
        assert_eq!(read.len(), 3000);
        assert_eq!(held.bytes(), 3000, "its length is held");
    }

    #[test]
    fn a_piece_more_may_follow_is_copied_before_the_wait() {
        let budget = BodyBudget::new(1 << 20);
        let mut held = budget.reservation();
        let (mut sender, body) = actix_http::h1::Payload::create(false);
        let first = web::Bytes::from(b"{\"kind\":".to_vec());
        sender.feed_data(first.clone());
        let read = {
            let mut read = std::pin::pin!(collect_body(handed(body), 1 << 20, None, &mut held));
            assert!(
                poll_once(read.as_mut()).is_pending(),
                "the rest has not come"
            );
            // Kept as it came, the piece would have a holder besides this
            // test while the reader waits.
            assert!(
                first.is_unique(),
                "the first piece was copied before waiting for the rest, not held"
            );
            sender.feed_data(web::Bytes::from_static(b"\"AdmissionReview\"}"));
            sender.feed_eof();
            match poll_once(read.as_mut()) {
                std::task::Poll::Ready(read) => read.expect("the body"),
                std::task::Poll::Pending => panic!("the whole body has come"),
            }
        };
        assert_eq!(&read[..], b"{\"kind\":\"AdmissionReview\"}");
        assert!(held.bytes() >= read.len(), "the buffer is held");
    }

    #[test]
    fn a_body_in_pieces_that_are_all_there_is_joined_and_bounded() {
        let budget = BodyBudget::new(1 << 20);
        let (mut sender, body) = actix_http::h1::Payload::create(false);
        sender.feed_data(web::Bytes::from_static(b"abc"));
        sender.feed_data(web::Bytes::from_static(b"def"));
        sender.feed_eof();
        let read = collected(handed(body), 1 << 20, &mut budget.reservation());
        assert_eq!(&read.expect("the body")[..], b"abcdef");

        // One piece over the limit is refused, holding nothing.
        let (mut sender, body) = actix_http::h1::Payload::create(false);
        sender.feed_data(web::Bytes::from(vec![b'x'; 101]));
        sender.feed_eof();
        let mut held = budget.reservation();
        let read = collected(handed(body), 100, &mut held);
        assert!(
            matches!(read, Err(Rejection::TooLarge { limit: 100 })),
            "{read:?}"
        );
        assert_eq!(held.bytes(), 0);

        // And so is one piece over what the budget has left.
        let small = BodyBudget::new(10);
        let (mut sender, body) = actix_http::h1::Payload::create(false);
        sender.feed_data(web::Bytes::from(vec![b'x'; 11]));
        sender.feed_eof();
        let read = collected(handed(body), 100, &mut small.reservation());
        assert!(
            matches!(read, Err(Rejection::Busy { budget: 10 })),
            "{read:?}"
        );
        assert_eq!(small.used(), 0);
    }

    #[test]
    fn growing_a_body_buffer_holds_the_old_and_the_new_one_while_the_bytes_move() {
        // Two 8 KiB pieces: the first buffer (8 KiB) is full, and the second
        // piece moves both into one of 16 KiB, 24 KiB allocated together.
        let piece = web::Bytes::from(vec![b'x'; FIRST_BODY_BUFFER]);
        let collect = |budget: &Arc<BodyBudget>| {
            let (mut sender, body) = actix_http::h1::Payload::create(false);
            sender.feed_data(piece.clone());
            sender.feed_data(piece.clone());
            sender.feed_eof();
            let mut held = budget.reservation();
            let read = collected(handed(body), 1 << 20, &mut held);
            (read, held.bytes())
        };
        let short = BodyBudget::new(3 * FIRST_BODY_BUFFER - 1);
        let (read, _) = collect(&short);
        assert!(
            matches!(read, Err(Rejection::Busy { .. })),
            "a budget one byte short of both buffers: {:?}",
            read.map(|body| body.len())
        );
        assert_eq!(short.used(), 0);

        let enough = BodyBudget::new(3 * FIRST_BODY_BUFFER);
        let (read, held) = collect(&enough);
        assert_eq!(read.expect("the body").len(), 2 * FIRST_BODY_BUFFER);
        assert_eq!(
            held,
            2 * FIRST_BODY_BUFFER,
            "once moved, the new buffer only"
        );
    }

    #[test]
    fn deciding_on_the_parts_the_rules_read_answers_as_on_whole_objects() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut bodies = Vec::new();
        let fixtures = root.join("tests/fixtures/admission-reviews");
        for entry in std::fs::read_dir(&fixtures).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                bodies.push((path.display().to_string(), std::fs::read(&path).unwrap()));
            }
        }
        // The Pod as the mutating rules see more of it: the sidecar asked
        // for, and parts of the defaults already set.
        let mut pod: Value =
            serde_json::from_slice(&std::fs::read(fixtures.join("create-pod.json")).unwrap())
                .unwrap();
        let object = &mut pod["request"]["object"];
        object["metadata"]["labels"]["kadmit.dev/inject-log-shipper"] = "true".into();
        object["metadata"]["annotations"] = serde_json::json!({"a": "b"});
        object["spec"]["securityContext"] = serde_json::json!({"runAsNonRoot": false});
        object["spec"]["containers"][0]["resources"] =
            serde_json::json!({"limits": {"cpu": "1", "memory": "1Gi"}});
        bodies.push(("create-pod, varied".to_owned(), in_api_server_order(&pod)));
        let mut compared = 0;
        for rules in ["rules", "docs/examples/cel"] {
            let loaded = crate::rules::load_dir(&root.join(rules)).unwrap();
            let plan = crate::plan::compile(&loaded).unwrap();
            for (name, body) in &bodies {
                for mode in [Mode::Validate, Mode::Mutate] {
                    for verify_patches in [false, true] {
                        let options = eval::EvalOptions {
                            verify_patches,
                            ..eval::EvalOptions::default()
                        };
                        let ask = Ask::new(mode).options(options);
                        let answer = |(review, verdict): (review::Review, Verdict)| {
                            let response = verdict.response(mode);
                            review::encode(review.version, &review.request.uid, &response)
                        };
                        let projected = decide(&plan, body, ask)
                            .map(answer)
                            .map_err(|e| e.to_string());
                        let whole = decide_on_whole_objects(&plan, body, ask)
                            .map(answer)
                            .map_err(|e| e.to_string());
                        assert_eq!(
                            projected.as_deref().map(String::from_utf8_lossy),
                            whole.as_deref().map(String::from_utf8_lossy),
                            "{rules} {name} {mode:?}"
                        );
                        compared += usize::from(whole.is_ok());
                    }
                }
            }
        }
        assert!(compared > 100, "{compared}");
    }

    /// The body of `review` (a CREATE) with the request's fields in the API
    /// server's order, before the object: a body whose object comes first
    /// (as `serde_json` orders the keys) has its object parsed whole.
    fn in_api_server_order(review: &Value) -> Vec<u8> {
        let request = &review["request"];
        let field = |name: &str| serde_json::to_string(&request[name]).unwrap();
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":{},"kind":{},"resource":{},"namespace":{},"operation":{},"userInfo":{},"object":{}}}}}"#,
            field("uid"),
            field("kind"),
            field("resource"),
            field("namespace"),
            field("operation"),
            field("userInfo"),
            field("object"),
        )
        .into_bytes()
    }

    #[test]
    fn a_for_each_projected_to_what_it_reads_answers_as_on_whole_objects() {
        // Elements keep only what the edits and checks read of them: each
        // rule list is one way that could lose what one needs (the
        // elements' number, a key an injection compares, a value copied or
        // shown in a message, a nested element, a bound name, entries, a
        // filter that cannot be followed exactly).
        let rules = [
            // Edits that do not read the element still run once per member.
            "    - name: r\n      match: {resources: [pods]}\n      mutate:\n        - forEach: $.object.metadata.labels[*]\n          mutate:\n            - setIfAbsent: {path: $$.object.metadata.annotations.seen, value: 'yes'}\n",
            "    - name: r\n      match: {resources: [pods]}\n      mutate:\n        - forEach: $.podSpec.containers[*]\n          mutate:\n            - setIfAbsent: {path: $$.object.metadata.annotations.c, valueFrom: {path: $$.object.metadata.name}}\n",
            // A copy from the element, under a condition on it.
            "    - name: r\n      match: {resources: [pods]}\n      mutate:\n        - forEach: \"$.podSpec['containers','initContainers'][*]\"\n          mutate:\n            - setIfAbsent: {path: $.env, valueFrom: {path: $.ports}}\n              when:\n                - {path: $.image, matches: '^nginx'}\n",
            // A nested forEach, and an injection keyed by two fields.
            "    - name: r\n      match: {resources: [pods]}\n      mutate:\n        - forEach: $.podSpec.containers[*]\n          mutate:\n            - forEach: $.ports[*]\n              mutate:\n                - setIfAbsent: {path: $.protocol, value: TCP}\n            - injectIfMissing: {path: $.env, key: [name, value], value: {name: A, value: '1'}}\n",
            // A filter the projection cannot follow: the elements stay whole.
            "    - name: r\n      match: {resources: [pods]}\n      mutate:\n        - forEach: \"$.podSpec.containers[?@.name == 'web']\"\n          mutate:\n            - setIfAbsent: {path: $.resources.requests, valueFrom: {path: $.resources.limits}}\n",
            // A map merged into the element, a value replaced from it.
            "    - name: r\n      match: {resources: [pods]}\n      mutate:\n        - forEach: $.podSpec.containers[*]\n          mutate:\n            - mergeIfAbsent: {path: $.securityContext, value: {runAsUser: 1, capabilities: {drop: [ALL]}}}\n            - set: {path: $.tty, valueFrom: {path: $.stdin}}\n",
        ];
        // The same for checks, each of which denies the pod.
        let checks = [
            // A message reads what the condition does not.
            "    - name: r\n      match: {resources: [pods]}\n      deny:\n        - forEach: $.podSpec.containers[*]\n          deny:\n            - {path: $.stdin, equals: true, message: '{{ $.name }} {{ $.image }} in {{ $$.object.metadata.name }}'}\n",
            // The elements' number, nothing of them.
            "    - name: r\n      match: {resources: [pods]}\n      deny:\n        - forEach: $.object.metadata.labels[*]\n          deny:\n            - {path: $$.object.metadata.name, exists: true, message: m}\n",
            // A bound name read in a nested forEach.
            "    - name: r\n      match: {resources: [pods]}\n      deny:\n        - forEach: $.podSpec.containers[*]\n          as: c\n          deny:\n            - forEach: $.ports[*]\n              deny:\n                - {path: $.containerPort, equals: 81, message: '{{ $c.image }} {{ $.protocol }}'}\n",
            // Entries, whose `$` is not a place in the document.
            "    - name: r\n      match: {resources: [pods]}\n      deny:\n        - forEach: \"$.podSpec['containers','initContainers'][*]\"\n          deny:\n            - forEach: $.resources.limits\n              entries: true\n              deny:\n                - {path: $.key, equals: cpu, message: '{{ $.value }}'}\n",
        ];
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/admission-reviews/create-pod.json");
        let mut pod: Value = serde_json::from_slice(&std::fs::read(fixtures).unwrap()).unwrap();
        let object = &mut pod["request"]["object"];
        object["metadata"]["labels"] = serde_json::json!({"a": "1", "b": "2"});
        object["spec"]["containers"] = serde_json::json!([
            {"name": "web", "image": "nginx:1", "ports": [{"containerPort": 80}, {"containerPort": 81, "protocol": "UDP"}],
             "env": [{"name": "A", "value": "2"}], "resources": {"limits": {"cpu": "1"}}},
            {"name": "side", "image": "envoy", "stdin": true},
            {"name": "bare"}
        ]);
        object["spec"]["initContainers"] = serde_json::json!([{"name": "init", "image": "nginx:2", "ports": [{"containerPort": 1}]}]);
        let body = in_api_server_order(&pod);
        let rules = rules.iter().map(|rule| (Mode::Mutate, rule));
        for (mode, rule) in rules.chain(checks.iter().map(|rule| (Mode::Validate, rule))) {
            let plan = crate::plan::test_plan(rule);
            let ask = Ask::new(mode);
            let answer = |(review, verdict): (review::Review, Verdict)| {
                match mode {
                    Mode::Mutate => assert!(verdict.patch.is_some(), "{rule}: no patch"),
                    Mode::Validate => assert!(!verdict.allowed, "{rule}: allowed"),
                }
                let response = verdict.response(mode);
                review::encode(review.version, &review.request.uid, &response)
            };
            let (review, verdict) = decide(&plan, &body, ask).unwrap();
            assert!(!review.objects_came_early);
            let projected = answer((review, verdict));
            let whole = decide_on_whole_objects(&plan, &body, ask)
                .map(answer)
                .unwrap();
            assert_eq!(projected, whole, "{rule}");
        }
    }

    #[test]
    fn an_object_a_rule_reads_nested_past_what_kadmit_parses_is_denied() {
        // 200 levels under `data`: serde_json parses 128.
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let body = |object_data: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u-9","kind":{{"group":"","version":"v1","kind":"ConfigMap"}},"resource":{{"group":"","version":"v1","resource":"configmaps"}},"operation":"CREATE","userInfo":{{"username":"u"}},"object":{{"kind":"ConfigMap","metadata":{{"name":"c"}},"data":{{"x":{object_data}}}}}}}}}"#
            )
        };
        let denies = "    - name: r\n      match: {resources: [configmaps]}\n      deny:\n        - {path: '$.object.data..y', exists: true, message: m}\n";
        let mutates = "    - name: r\n      match: {resources: [configmaps]}\n      when: [{path: '$.object.data..y', absent: true}]\n      mutate:\n        - setIfAbsent: {path: $.object.metadata.labels.a, value: b}\n";
        for (mode, rules) in [(Mode::Validate, denies), (Mode::Mutate, mutates)] {
            let plan = crate::plan::test_plan(rules);
            let (review, verdict) =
                decide(&plan, body(&deep).as_bytes(), Ask::new(mode)).expect("answered");
            assert_eq!(review.request.uid, "u-9");
            assert!(!verdict.allowed, "{mode:?}");
            let denial = verdict.denial.as_ref().expect("denied");
            assert_eq!(denial.code, 400);
            assert!(
                denial
                    .message
                    .contains("cannot be parsed as far as the rule reads")
                    && denial.message.contains("recursion limit exceeded"),
                "{}",
                denial.message
            );
            assert_unreadable(&verdict);
        }
        // Objects before the fields that select the rules (kube-apiserver
        // never writes that order): kept raw, parsed when a rule reads
        // them, and denied the same way.
        let early = body(&deep).replacen(
            r#""uid":"u-9","#,
            &format!(r#""object":{{"kind":"ConfigMap","data":{{"x":{deep}}}}},"uid":"u-9","#),
            1,
        );
        let early = early.replacen(
            r#","object":{"kind":"ConfigMap","metadata""#,
            r#","name2":{"kind":"ConfigMap","metadata""#,
            1,
        );
        let plan = crate::plan::test_plan(denies);
        let (review, verdict) =
            decide(&plan, early.as_bytes(), Ask::new(Mode::Validate)).expect("answered");
        assert!(review.objects_came_early);
        assert!(!verdict.allowed);
        assert_unreadable(&verdict);
        // The same object under a rule that does not read it is skipped
        // whole, and allowed.
        let other = crate::plan::test_plan(
            "    - name: r\n      match: {resources: [pods]}\n      deny:\n        - {path: '$.object..y', exists: true, message: m}\n",
        );
        let (_, verdict) =
            decide(&other, body(&deep).as_bytes(), Ask::new(Mode::Validate)).expect("answered");
        assert!(verdict.allowed);
        // A body that is not JSON is still refused.
        let plan = crate::plan::test_plan(denies);
        let broken = body(&deep).replacen('{', "{{", 1);
        assert!(decide(&plan, broken.as_bytes(), Ask::new(Mode::Validate)).is_err());
    }

    /// `verdict` denies a review for an object it could not parse as far
    /// as a rule reads, as [`eval::unreadable_object`] answers it.
    fn assert_unreadable(verdict: &Verdict) {
        assert!(!verdict.allowed, "{verdict:?}");
        assert_eq!(
            verdict
                .audit_annotations
                .get("evaluation-limit")
                .map(String::as_str),
            Some("unreadable_object")
        );
    }

    fn review(labels: Value) -> Value {
        serde_json::json!({
            "apiVersion": "admission.k8s.io/v1beta1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "namespace": "default",
                "operation": "CREATE",
                "userInfo": {"username": "admin"},
                "object": {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "c", "labels": labels}},
                "oldObject": null,
                "options": null
            }
        })
    }

    fn state(with_plan: bool) -> web::Data<State> {
        let store = Arc::new(Store::new());
        if with_plan {
            let loaded = crate::rules::load_str("labelled.yaml", DENY_LABELLED);
            let plan = crate::plan::compile(&loaded).expect("the test rules compile");
            store.store(plan);
        }
        let limits = Limits {
            max_body_bytes: 1 << 20,
            request_timeout: Duration::from_secs(5),
        };
        web::Data::new(State::new(store, limits, None))
    }

    async fn post(
        state: web::Data<State>,
        path: &str,
        content_type: &str,
        body: &Value,
    ) -> (u16, Value) {
        let app = init_service(App::new().configure(|cfg| routes(cfg, &state))).await;
        let request = TestRequest::post()
            .uri(path)
            .insert_header((header::CONTENT_TYPE, content_type))
            .set_payload(serde_json::to_vec(body).expect("serialize"))
            .to_request();
        let response = call_service(&app, request).await;
        let status = response.status().as_u16();
        (status, read_body_json(response).await)
    }

    #[actix_web::test]
    async fn a_denial_is_http_200_in_the_callers_version() {
        let body = review(serde_json::json!({"deny": "yes"}));
        let (status, response) = post(
            state(true),
            "/validate/labelled?timeout=10s",
            "application/json",
            &body,
        )
        .await;
        assert_eq!(status, 200, "{response}");
        assert_eq!(response["apiVersion"], "admission.k8s.io/v1beta1");
        assert_eq!(response["response"]["uid"], "u-1");
        assert_eq!(response["response"]["allowed"], false, "{response}");
        let message = response["response"]["status"]["message"]
            .as_str()
            .unwrap_or("");
        assert!(message.contains("labelled for denial"), "{response}");
    }

    #[actix_web::test]
    async fn json_with_a_charset_is_json() {
        let body = review(serde_json::json!({}));
        let (status, response) = post(
            state(true),
            "/validate",
            "application/json; charset=utf-8",
            &body,
        )
        .await;
        assert_eq!(status, 200, "{response}");
        assert_eq!(response["response"]["allowed"], true, "{response}");
    }

    #[actix_web::test]
    async fn without_a_plan_reviews_get_503_status() {
        let body = review(serde_json::json!({}));
        let (status, response) = post(state(false), "/mutate", "application/json", &body).await;
        assert_eq!(status, 503, "{response}");
        assert_eq!(response["kind"], "Status");
        assert_eq!(response["reason"], "ServiceUnavailable");
    }

    /// Issue 11: a compressed body was decoded as if it were plain JSON.
    #[actix_web::test]
    async fn an_encoded_body_is_refused_with_415_naming_the_encoding() {
        let state = state(true);
        let app = init_service(App::new().configure(|cfg| routes(cfg, &state))).await;
        let body = serde_json::to_vec(&review(serde_json::json!({}))).expect("serialize");
        for (encoding, status) in [
            ("gzip", 415),
            ("identity, br", 415),
            ("identity", 200),
            ("", 200),
        ] {
            let request = TestRequest::post()
                .uri("/validate")
                .insert_header((header::CONTENT_TYPE, "application/json"))
                .insert_header((header::CONTENT_ENCODING, encoding))
                .set_payload(body.clone())
                .to_request();
            let response = call_service(&app, request).await;
            assert_eq!(response.status().as_u16(), status, "{encoding:?}");
            let answer: Value = read_body_json(response).await;
            if status == 415 {
                assert_eq!(answer["reason"], "UnsupportedMediaType", "{answer}");
                let message = answer["message"].as_str().unwrap_or_default();
                assert!(message.contains(&format!("{encoding:?}")), "{message}");
            }
        }
    }
}
