//! Shadowing a new plan before it serves: the server keeps the last reviews
//! it answered ([`RecentReviews`], memory only, bounded in count and bytes,
//! redacted like a recording, a share for each endpoint, operation and
//! resource so that a flood of one resource cannot push the others out),
//! and a reload evaluates them against the plan
//! serving and the new one ([`compare`]) before it swaps, off the request
//! path. The [`ShadowReport`] says how many decisions would change, with up
//! to [`MAX_EXAMPLES`] examples; it is logged, counted, shown on `/status`
//! and the dashboard, and may hold the new plan back
//! (`--reload-max-new-denials`, see `reload::Reloader`).
//!
//! A handler only hands the body it already holds to a bounded queue; a
//! thread of its own parses, redacts and keeps it. At most
//! `--shadow-reviews-per-second` reviews a second ([`DEFAULT_PER_SECOND`]) are offered, so under heavy
//! traffic the ring holds a sample of the last seconds and the redaction
//! costs a bounded share of a CPU, whatever the rate. When the queue holds
//! [`MAX_QUEUED_BYTES`], reviews are not kept, and are counted
//! (`kadmit_shadow_reviews_total{result="dropped"}`).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use crate::eval::{self, Ask, EvalOptions, Outcome, Selection, Verdict};
use crate::excerpt;
use crate::metrics;
use crate::plan::{Mode, Plan, RuleSetId, RuleSets};
use crate::review::{self, Embedded};
use crate::webhook;

/// Reviews kept by default.
pub const DEFAULT_REVIEWS: usize = 1_000;
/// Bytes of kept reviews, by default.
pub const DEFAULT_MAX_BYTES: usize = 16 << 20;
/// The most reviews `--shadow-reviews` may keep.
pub const MAX_REVIEWS: usize = 100_000;
/// The most bytes `--shadow-max-bytes` may keep.
pub const MAX_MAX_BYTES: usize = 1 << 30;
/// Bytes of bodies waiting to be redacted and kept, at most.
pub const MAX_QUEUED_BYTES: usize = 32 << 20;
/// Reviews waiting to be redacted and kept, at most, however small.
pub const MAX_QUEUED_REVIEWS: usize = 4096;
/// Reviews offered to the ring per second, by default: one every 5 ms.
pub const DEFAULT_PER_SECOND: u64 = 200;
/// The most `--shadow-reviews-per-second` may offer.
pub const MAX_PER_SECOND: u64 = 1_000_000;
/// Reviews offered, at the offered rate, while the shadow thread pauses
/// after taking one: it then takes them all in one go.
pub const KEEP_BATCH: u64 = 10;
/// The longest the shadow thread pauses: what a review waits at most
/// before it is kept.
pub const MAX_KEEP_PAUSE: Duration = Duration::from_millis(50);
/// Changed decisions a report shows.
pub const MAX_EXAMPLES: usize = 10;
/// The longest a comparison may take: a guard, not a target (a thousand
/// reviews take milliseconds); the reviews left are not compared, and the
/// report says so.
pub const MAX_COMPARE_TIME: Duration = Duration::from_secs(30);

/// One review kept for shadowing: redacted, with the endpoint and the rule
/// set that answered it.
#[derive(Debug)]
pub struct Kept {
    /// The redacted AdmissionReview.
    pub body: Vec<u8>,
    /// `/validate` or `/mutate`.
    pub mode: Mode,
    /// The rule set the path named, if any.
    pub rule_set: Option<String>,
}

#[derive(Debug)]
struct Offered {
    body: Bytes,
    mode: Mode,
    rule_set: Option<String>,
}

/// The last reviews the server answered, at most `capacity` of them in
/// `max_bytes`, dropped by stratum (see [`Ring`]).
#[derive(Debug)]
pub struct RecentReviews {
    queue: Option<SyncSender<Offered>>,
    queued_bytes: Arc<AtomicUsize>,
    kept: Arc<Mutex<Ring>>,
    /// When the ring was started; the sampling clock counts from it.
    started: Instant,
    /// Nanoseconds after `started` before which no review is offered.
    next_offer: AtomicU64,
    /// Nanoseconds between two reviews offered.
    interval: u64,
}

/// The kept reviews, in strata: one per endpoint, operation and resource
/// (`/validate` `CREATE` `apps/deployments`, ...), so that the reviews of
/// one resource cannot push out every review of the others.
///
/// A single queue, oldest dropped, let anyone who may create a ConfigMap
/// replace every kept review with 1,400 harmless ConfigMap CREATEs, after
/// which `--reload-max-new-denials` compared a rule denying every workload
/// against ConfigMaps only, and let it through. Here, when the ring is over
/// its count (or its bytes), the oldest review of the stratum holding the
/// most reviews (or bytes) is dropped: a flood of one resource only ever
/// replaces its own reviews once it holds more than any other, and each
/// stratum keeps at least an equal share of the ring. With one stratum, or
/// with every stratum holding one review, that is the oldest review, as
/// before.
#[derive(Debug, Default)]
struct Ring {
    /// Each stratum's reviews, oldest first, by the hash of its name.
    strata: HashMap<u64, Stratum>,
    /// Every stratum as `(reviews, Reverse(oldest arrival), key)`: the last
    /// holds the most reviews, the oldest review among equals.
    by_count: BTreeSet<(usize, Reverse<u64>, u64)>,
    /// The same by bytes held.
    by_bytes: BTreeSet<(usize, Reverse<u64>, u64)>,
    /// Reviews kept, in all strata.
    reviews: usize,
    bytes: usize,
    capacity: usize,
    max_bytes: usize,
    /// Reviews pushed so far: each review's arrival number, so that a
    /// snapshot lists them in the order they came.
    arrivals: u64,
    /// Keys strata by a hash seeded per process: a client naming resources
    /// of its own cannot aim at another's stratum, and a stratum costs a
    /// few words however long the names it was told by.
    hasher: RandomState,
}

/// The reviews of one stratum, oldest first, with their arrival numbers.
#[derive(Debug, Default)]
struct Stratum {
    reviews: VecDeque<(u64, Arc<Kept>)>,
    bytes: usize,
}

impl Stratum {
    fn oldest(&self) -> u64 {
        self.reviews
            .front()
            .map_or(u64::MAX, |(arrival, _)| *arrival)
    }
}

/// What a review's stratum is told by: the endpoint, and the operation,
/// group, resource and subresource of its request.
#[derive(Debug, Default, Hash, PartialEq, Eq)]
struct StratumName {
    mode: &'static str,
    operation: String,
    group: String,
    resource: String,
    sub_resource: String,
}

impl StratumName {
    fn of(review: &Value, mode: Mode) -> Self {
        let request = &review["request"];
        let text = |value: &Value| value.as_str().unwrap_or("").to_owned();
        StratumName {
            mode: mode.as_str(),
            operation: text(&request["operation"]),
            group: text(&request["resource"]["group"]),
            resource: text(&request["resource"]["resource"]),
            sub_resource: text(&request["subResource"]),
        }
    }
}

impl Ring {
    fn push(&mut self, stratum: &StratumName, kept: Kept) {
        // What the body holds, not its length: serde_json's buffer grows
        // by doubling, and unshrunk held twice what was counted.
        let size = kept.body.capacity();
        if size > self.max_bytes || self.capacity == 0 {
            return;
        }
        let key = self.hasher.hash_one(stratum);
        let arrival = self.arrivals;
        self.arrivals += 1;
        self.unindex(key);
        let joined = self.strata.entry(key).or_default();
        joined.reviews.push_back((arrival, Arc::new(kept)));
        joined.bytes += size;
        self.reviews += 1;
        self.bytes += size;
        self.index(key);
        // The new review counts too: when its own stratum holds the most,
        // its oldest goes, which with a single stratum is plain FIFO.
        while self.reviews > self.capacity {
            let Some(&(_, _, fullest)) = self.by_count.last() else {
                break;
            };
            self.drop_oldest(fullest);
        }
        while self.bytes > self.max_bytes {
            let Some(&(_, _, fullest)) = self.by_bytes.last() else {
                break;
            };
            self.drop_oldest(fullest);
        }
    }

    /// Drops the oldest review of the stratum `key`, and the stratum once
    /// it holds none.
    fn drop_oldest(&mut self, key: u64) {
        self.unindex(key);
        let Some(stratum) = self.strata.get_mut(&key) else {
            return;
        };
        if let Some((_, oldest)) = stratum.reviews.pop_front() {
            let size = oldest.body.capacity();
            stratum.bytes -= size;
            self.bytes -= size;
            self.reviews -= 1;
        }
        if stratum.reviews.is_empty() {
            self.strata.remove(&key);
        } else {
            self.index(key);
        }
    }

    /// Lists the stratum `key` in the orders eviction looks it up by.
    fn index(&mut self, key: u64) {
        if let Some(stratum) = self.strata.get(&key) {
            let oldest = Reverse(stratum.oldest());
            self.by_count.insert((stratum.reviews.len(), oldest, key));
            self.by_bytes.insert((stratum.bytes, oldest, key));
        }
    }

    /// Takes the stratum `key` out of those orders, before it changes.
    fn unindex(&mut self, key: u64) {
        if let Some(stratum) = self.strata.get(&key) {
            let oldest = Reverse(stratum.oldest());
            self.by_count.remove(&(stratum.reviews.len(), oldest, key));
            self.by_bytes.remove(&(stratum.bytes, oldest, key));
        }
    }

    /// Every review kept, oldest first.
    fn snapshot(&self) -> Vec<Arc<Kept>> {
        let mut all: Vec<&(u64, Arc<Kept>)> = self
            .strata
            .values()
            .flat_map(|stratum| stratum.reviews.iter())
            .collect();
        all.sort_unstable_by_key(|(arrival, _)| *arrival);
        all.into_iter().map(|(_, kept)| kept.clone()).collect()
    }
}

impl RecentReviews {
    /// Keeps nothing: shadowing is off.
    pub fn off() -> Self {
        RecentReviews {
            queue: None,
            queued_bytes: Arc::new(AtomicUsize::new(0)),
            kept: Arc::new(Mutex::new(Ring::default())),
            started: Instant::now(),
            next_offer: AtomicU64::new(0),
            interval: 0,
        }
    }

    /// Keeps the last `capacity` reviews within `max_bytes`, at most
    /// `per_second` of them a second, redacted on a thread of its own. Zero
    /// for any keeps nothing.
    pub fn start(capacity: usize, max_bytes: usize, per_second: u64) -> std::io::Result<Self> {
        if capacity == 0 || max_bytes == 0 || per_second == 0 {
            return Ok(RecentReviews::off());
        }
        let (recent, offered) = RecentReviews::queued(capacity, max_bytes, per_second);
        let ring = recent.kept.clone();
        let queued = recent.queued_bytes.clone();
        std::thread::Builder::new()
            .name("kadmit-shadow".to_owned())
            .spawn(move || keep_all(offered, &ring, &queued, keep_pause(per_second)))?;
        Ok(recent)
    }

    /// The ring and the receiving end of its queue, which nothing takes from
    /// yet: [`RecentReviews::start`] hands it to the shadow thread, a test
    /// holds it to fill the queue. All of `capacity`, `max_bytes` and
    /// `per_second` are above zero.
    fn queued(capacity: usize, max_bytes: usize, per_second: u64) -> (Self, Receiver<Offered>) {
        let (queue, offered) = sync_channel(MAX_QUEUED_REVIEWS);
        let recent = RecentReviews {
            queue: Some(queue),
            queued_bytes: Arc::new(AtomicUsize::new(0)),
            kept: Arc::new(Mutex::new(Ring {
                capacity,
                max_bytes,
                ..Ring::default()
            })),
            started: Instant::now(),
            next_offer: AtomicU64::new(0),
            interval: offer_interval_nanos(per_second),
        };
        (recent, offered)
    }

    /// Offers an answered review; true when it was queued. Never blocks.
    /// Sooner than one interval (a second over `per_second`) after the last
    /// review queued, the review is passed over (false), and so is one that
    /// `judged` says no rule of the plan serving applies to: the API server
    /// sends only what the webhook configurations made from the rules name,
    /// and anyone reaching the port without a certificate could otherwise
    /// fill the ring with reviews of made-up resources (1,300 in 7 s pushed
    /// out every real one, and a plan denying every Deployment passed
    /// `--reload-max-new-denials 0`).
    pub fn offer(
        &self,
        body: &Bytes,
        mode: Mode,
        rule_set: Option<&str>,
        judged: impl FnOnce() -> bool,
    ) -> bool {
        let Some(queue) = &self.queue else {
            return false;
        };
        let now = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let next = self.next_offer.load(Ordering::Relaxed);
        if now < next
            || self
                .next_offer
                .compare_exchange(
                    next,
                    now.saturating_add(self.interval),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return false;
        }
        if !judged() {
            // The turn goes to the next review.
            self.next_offer.store(next, Ordering::Relaxed);
            return false;
        }
        let size = body.len();
        let queued = self.queued_bytes.fetch_add(size, Ordering::SeqCst);
        // A copy, made only once the body fits the byte bound: the body may
        // share the connection's read buffer, which a slice kept here would
        // pin beyond what is counted.
        let sent = queued + size <= MAX_QUEUED_BYTES
            && match queue.try_send(Offered {
                body: Bytes::copy_from_slice(body),
                mode,
                rule_set: rule_set.map(str::to_owned),
            }) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            };
        if !sent {
            self.queued_bytes.fetch_sub(size, Ordering::SeqCst);
            metrics::record_shadow_review(metrics::SHADOW_DROPPED);
        }
        sent
    }

    /// The reviews kept now, oldest first.
    pub fn snapshot(&self) -> Vec<Arc<Kept>> {
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .snapshot()
    }
}

/// Nanoseconds between two reviews offered at `per_second`.
fn offer_interval_nanos(per_second: u64) -> u64 {
    1_000_000_000 / per_second.clamp(1, MAX_PER_SECOND)
}

/// The shadow thread's pause after it wakes: [`KEEP_BATCH`] offers at
/// `per_second`, at most [`MAX_KEEP_PAUSE`]. At the default rate, 50 ms.
fn keep_pause(per_second: u64) -> Duration {
    Duration::from_nanos(offer_interval_nanos(per_second).saturating_mul(KEEP_BATCH))
        .min(MAX_KEEP_PAUSE)
}

/// The shadow thread: until every sender is gone, waits for a review,
/// pauses for `pause`, then keeps all that came. Woken for every review,
/// it cost the server's worker a wake-up, often a lock contended with the
/// thread going back to sleep, and a context switch on the worker's CPU,
/// 200 times a second at the default rate; now about 20 (ten reviews a
/// wake-up). The queue's bounds are unchanged: what does not fit while
/// the thread pauses is dropped and counted, as before.
fn keep_all(
    offered: Receiver<Offered>,
    ring: &Mutex<Ring>,
    queued_bytes: &AtomicUsize,
    pause: Duration,
) {
    while let Ok(first) = offered.recv() {
        keep(first, ring, queued_bytes);
        std::thread::sleep(pause);
        for entry in offered.try_iter() {
            keep(entry, ring, queued_bytes);
        }
    }
}

/// Takes one review off the queue (its bytes no longer count against
/// [`MAX_QUEUED_BYTES`]), and keeps it redacted when it parses.
fn keep(entry: Offered, ring: &Mutex<Ring>, queued_bytes: &AtomicUsize) {
    queued_bytes.fetch_sub(entry.body.len(), Ordering::SeqCst);
    let Some((body, stratum)) = redacted(&entry.body, entry.mode) else {
        metrics::record_shadow_review(metrics::SHADOW_DROPPED);
        return;
    };
    ring.lock().unwrap_or_else(PoisonError::into_inner).push(
        &stratum,
        Kept {
            body,
            mode: entry.mode,
            rule_set: entry.rule_set,
        },
    );
    metrics::record_shadow_review(metrics::SHADOW_KEPT);
}

/// The redacted body of a review answered at `mode`'s endpoint, and its
/// stratum.
fn redacted(body: &[u8], mode: Mode) -> Option<(Vec<u8>, StratumName)> {
    if review::may_parse_over(body, review::MAX_KEPT_PARSED_BYTES) {
        return None;
    }
    let mut review: Value = serde_json::from_slice(body).ok()?;
    review::redact(&mut review);
    let mut kept = serde_json::to_vec(&review).ok()?;
    kept.shrink_to_fit();
    Some((kept, StratumName::of(&review, mode)))
}

/// What a new plan would decide differently on the recent reviews.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowReport {
    /// The generation serving when the comparison ran.
    pub serving_generation: u64,
    /// Reviews compared.
    pub reviews: u64,
    /// Distinct resources (group, resource and subresource) among the
    /// reviews compared: how broad the sample was.
    pub resources: u64,
    /// Reviews whose decision would change.
    pub changed: u64,
    /// Reviews admitted by the plan serving and denied by the new one.
    pub newly_denied: u64,
    /// Reviews denied by the plan serving and admitted by the new one.
    pub newly_admitted: u64,
    /// Up to [`MAX_EXAMPLES`] changed decisions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<ChangedDecision>,
    /// How long the comparison took.
    pub milliseconds: u64,
    /// Reviews not compared because the comparison reached
    /// [`MAX_COMPARE_TIME`].
    #[serde(skip_serializing_if = "is_zero")]
    pub not_compared: u64,
    /// Reviews not compared because either plan reads what a kept review
    /// leaves out ([`review::redacted_places`]): judged on it, they could
    /// show changes that are none, or hide ones that are.
    #[serde(skip_serializing_if = "is_zero")]
    pub redacted: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One review the new plan would decide differently.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangedDecision {
    /// The review's uid, cut and escaped ([`excerpt::printable`]).
    pub uid: String,
    /// `validate` or `mutate`.
    pub endpoint: &'static str,
    /// `OPERATION resource namespace/name`, cut and escaped: a held-back
    /// reload's error quotes it, and is logged a line per line it holds.
    pub request: String,
    /// What changes: `admitted → denied`, `other rules`, `other patch`, ...
    pub change: Vec<&'static str>,
    /// The decision of the plan serving.
    pub before: String,
    /// The decision of the new plan.
    pub after: String,
}

/// A decision in the terms a change is told in.
#[derive(Debug, PartialEq)]
struct Decision {
    allowed: bool,
    rules: BTreeSet<(String, &'static str)>,
    patch: Option<crate::patch::Patch>,
    error: Option<String>,
}

impl Decision {
    fn of(result: Result<Verdict, String>, mode: Mode) -> Self {
        match result {
            Ok(verdict) => Decision {
                allowed: verdict.allowed,
                rules: verdict
                    .findings
                    .iter()
                    .map(|f| (format!("{}/{}", f.rule_set, f.rule), f.outcome.as_str()))
                    .collect(),
                patch: verdict.patch.filter(|_| mode == Mode::Mutate),
                error: None,
            },
            Err(error) => Decision {
                allowed: false,
                rules: BTreeSet::new(),
                patch: None,
                error: Some(error),
            },
        }
    }

    fn describe(&self) -> String {
        let mut text = if self.allowed { "admitted" } else { "denied" }.to_owned();
        if let Some(error) = &self.error {
            // An evaluation error may quote the review (a field it could
            // not decode).
            text.push_str(&format!(
                " ({})",
                excerpt::printable(error, excerpt::MAX_FIELD_BYTES)
            ));
        }
        let fired: Vec<String> = self
            .rules
            .iter()
            .filter(|(_, outcome)| *outcome != Outcome::Mutated.as_str())
            .map(|(rule, outcome)| format!("{rule} {outcome}"))
            .collect();
        if !fired.is_empty() {
            text.push_str(": ");
            text.push_str(&fired.join(", "));
        }
        if let Some(patch) = &self.patch {
            text.push_str(&format!(", {} patch operations", patch.len()));
        }
        excerpt::cut(&text, excerpt::MAX_MESSAGE_BYTES).into_owned()
    }
}

/// Evaluates `reviews` against `serving` and `new`, each as the endpoint
/// that answered it did, and reports what changes. Runs on the reload
/// thread; each evaluation is bounded by `options`' budget.
///
/// A swap waits for this, so each review is decoded once for both plans:
/// its objects are parsed once when either plan's rules read them, and both
/// plans evaluate the same decoded request. Only the mutating rules need an
/// object of their own: the plan serving works on a copy, the new plan on
/// the decoded object itself.
pub fn compare(
    reviews: &[Arc<Kept>],
    serving: &Plan,
    new: &Plan,
    options: EvalOptions,
) -> ShadowReport {
    let started = Instant::now();
    compare_within(
        reviews,
        serving,
        new,
        options,
        MAX_COMPARE_TIME,
        &mut || started.elapsed(),
    )
}

/// [`compare`], newest review first, stopping before the first review at
/// which `elapsed` (the time since the comparison started, read once before
/// each review and once at the end) has reached `limit`: a comparison cut
/// short has judged the traffic most like what comes next, and its
/// examples are the latest. The clock is a parameter so that a test
/// reaches the limit in as many reviews as it likes, without waiting.
fn compare_within(
    reviews: &[Arc<Kept>],
    serving: &Plan,
    new: &Plan,
    options: EvalOptions,
    limit: Duration,
    elapsed: &mut dyn FnMut() -> Duration,
) -> ShadowReport {
    let mut report = ShadowReport {
        serving_generation: serving.generation(),
        ..ShadowReport::default()
    };
    let mut resources = HashSet::new();
    for (i, kept) in reviews.iter().rev().enumerate() {
        if elapsed() >= limit {
            report.not_compared = u64::try_from(reviews.len() - i).unwrap_or(u64::MAX);
            break;
        }
        let Some(decided) = decide_both(kept, serving, new, options) else {
            continue;
        };
        let Some((request, before, after)) = decided else {
            report.redacted += 1;
            continue;
        };
        report.reviews += 1;
        resources.insert(resource_of(&request));
        let change = changes(&before, &after);
        if change.is_empty() {
            continue;
        }
        report.changed += 1;
        match (before.allowed, after.allowed) {
            (true, false) => report.newly_denied += 1,
            (false, true) => report.newly_admitted += 1,
            _ => {}
        }
        if report.examples.len() < MAX_EXAMPLES {
            report.examples.push(ChangedDecision {
                uid: excerpt::printable(&request.uid, excerpt::MAX_FIELD_BYTES),
                endpoint: kept.mode.as_str(),
                request: excerpt::printable(&describe_request(&request), excerpt::MAX_FIELD_BYTES),
                change,
                before: before.describe(),
                after: after.describe(),
            });
        }
    }
    report.resources = u64::try_from(resources.len()).unwrap_or(u64::MAX);
    report.milliseconds = u64::try_from(elapsed().as_millis()).unwrap_or(u64::MAX);
    report
}

/// The group, resource and subresource of `request`.
fn resource_of(request: &review::Request) -> (String, String, String) {
    (
        request.resource.group.clone(),
        request.resource.resource.clone(),
        request.sub_resource().to_owned(),
    )
}

/// The rule sets `kept`'s path named, as `plan` numbers them: `None` for
/// every rule set, an error when `plan` has no rule set of that name.
fn rule_set_ids(plan: &Plan, kept: &Kept) -> Result<Option<Vec<RuleSetId>>, String> {
    kept.rule_set
        .as_deref()
        .map(|segment| webhook::rule_set_ids(plan, segment).map_err(|e| e.to_string()))
        .transpose()
}

/// The rules of `plan` standing for `request`, or why there are none to ask.
fn select<'p, 's>(
    plan: &'p Plan,
    ids: &'s Result<Option<Vec<RuleSetId>>, String>,
    request: &review::Request,
    mode: Mode,
    options: EvalOptions,
) -> Result<Selection<'p, 's>, String> {
    let ids = ids.as_ref().map_err(Clone::clone)?;
    let rule_sets = ids.as_deref().map_or(RuleSets::All, RuleSets::from);
    let ask = Ask::new(mode).rule_sets(rule_sets).options(options);
    Ok(eval::select(plan, request, ask))
}

/// Decodes `kept` once and decides it with `serving`, then with `new`; `None`
/// when it no longer decodes, `Some(None)` when either plan reads what
/// the kept review leaves out.
fn decide_both(
    kept: &Kept,
    serving: &Plan,
    new: &Plan,
    options: EvalOptions,
) -> Option<Option<(review::Request, Decision, Decision)>> {
    let mode = kept.mode;
    let mut request = review::decode(&kept.body).ok()?.request;
    let serving_ids = rule_set_ids(serving, kept);
    let new_ids = rule_set_ids(new, kept);
    let before = select(serving, &serving_ids, &request, mode, options);
    let after = select(new, &new_ids, &request, mode, options);
    let places = review::redacted_places(&request);
    let reads_left_out = |selection: &Result<Selection<'_, '_>, String>| {
        selection
            .as_ref()
            .is_ok_and(|s| s.reads_any_of(&request.kind.kind, &places).is_some())
    };
    if reads_left_out(&before) || reads_left_out(&after) {
        return Some(None);
    }
    let reads = |selection: &Result<Selection<'_, '_>, String>| {
        selection.as_ref().is_ok_and(Selection::reads_object)
    };
    if reads(&before) || reads(&after) {
        parse_objects(&mut request);
    }
    let evaluate = |selection: Result<Selection<'_, '_>, String>, request: &review::Request| {
        selection.and_then(|selection| {
            selection
                .evaluate(request)
                .map_err(|error| error.to_string())
        })
    };
    let before = Decision::of(evaluate(before, &request), mode);
    let after = match mode {
        // The plan serving has its verdict, so the new plan's mutating
        // rules may work on the decoded object itself rather than a copy.
        Mode::Mutate => {
            let object = request.object.take();
            evaluate(after.map(|s| s.taking_object(object)), &request)
        }
        Mode::Validate => evaluate(after, &request),
    };
    Some(Some((request, before, Decision::of(after, mode))))
}

/// Parses the objects of `request` that were kept raw, once for both plans.
///
/// Not in the decoder's pass, as `server::decide` does: a kept body was
/// redacted through a `Value`, whose keys are sorted, so `object` comes
/// before `operation` and the decoder keeps it raw without asking. One that
/// does not parse stays raw, and each evaluation reports it as before.
fn parse_objects(request: &mut review::Request) {
    for embedded in [&mut request.object, &mut request.old_object]
        .into_iter()
        .flatten()
    {
        if let Embedded::Raw(raw) = embedded
            && let Ok(value) = serde_json::from_str(raw.get())
        {
            *embedded = Embedded::Parsed(value);
        }
    }
}

fn describe_request(request: &review::Request) -> String {
    let mut text = format!("{} {}", request.operation, request.resource_label());
    match (&request.namespace, &request.name) {
        (Some(namespace), Some(name)) => text.push_str(&format!(" {namespace}/{name}")),
        (None, Some(name)) => text.push_str(&format!(" {name}")),
        _ => {}
    }
    text
}

/// How two decisions differ in their verdict and in whether they could be
/// evaluated (`admitted → denied`, `now fails to evaluate`, ...), the first
/// words of every comparison of decisions (here and `kadmit replay`).
pub fn verdict_changes(
    (allowed_before, failed_before): (bool, bool),
    (allowed_after, failed_after): (bool, bool),
) -> Vec<&'static str> {
    let mut changes = Vec::new();
    match (allowed_before, allowed_after) {
        (true, false) => changes.push("admitted → denied"),
        (false, true) => changes.push("denied → admitted"),
        _ => {}
    }
    match (failed_before, failed_after) {
        (false, true) => changes.push("now fails to evaluate"),
        (true, false) => changes.push("no longer fails to evaluate"),
        _ => {}
    }
    changes
}

/// How two decisions differ; empty when they agree.
fn changes(before: &Decision, after: &Decision) -> Vec<&'static str> {
    let mut changes = verdict_changes(
        (before.allowed, before.error.is_some()),
        (after.allowed, after.error.is_some()),
    );
    if before.rules != after.rules {
        changes.push("other rules");
    }
    if before.patch != after.patch {
        changes.push("other patch");
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::test_plan;

    fn fixtures() -> Vec<(String, Vec<u8>)> {
        crate::review::fixture_bodies()
    }

    fn kept(body: &[u8], mode: Mode, rule_set: Option<&str>) -> Arc<Kept> {
        Arc::new(Kept {
            body: redacted(body, mode).unwrap().0,
            mode,
            rule_set: rule_set.map(str::to_owned),
        })
    }

    const LABELS: &str = "    - name: warn-unlabelled
      match: {resources: [configmaps]}
      action: Warn
      deny:
        - path: $.object.metadata.labels.team
          exists: false
          message: no team label
";

    const NO_CONFIGMAPS: &str = "    - name: no-configmaps
      match: {resources: [configmaps], operations: [CREATE]}
      deny:
        - message: configmaps are off
";

    #[test]
    fn reviews_whose_left_out_parts_a_plan_reads_are_not_compared() {
        // The kept reviews have no managedFields: judged on that, a rule
        // reading them would deny none, and hide what it changes.
        let managers = "    - name: no-kubectl-edit
      match: {resources: [configmaps]}
      deny:
        - path: $.object.metadata.managedFields[*].manager
          in: [kubectl-edit]
          message: no kubectl edit
";
        let reviews: Vec<_> = fixtures()
            .iter()
            .map(|(_, body)| kept(body, Mode::Validate, None))
            .collect();
        let serving = test_plan(LABELS);
        let report = compare(
            &reviews,
            &serving,
            &test_plan(managers),
            EvalOptions::default(),
        );
        assert!(report.redacted > 0, "{report:?}");
        assert_eq!(report.reviews + report.redacted, reviews.len() as u64);
        assert_eq!(report.changed, 0, "{report:?}");
        let shown = serde_json::to_value(&report).unwrap();
        assert_eq!(shown["redacted"], report.redacted, "{shown}");
        // Rules that read none of it compare every review; so do CEL
        // rules, which read their whole documents but name nothing (counted,
        // they would take every review they judge out of the comparison).
        let cel = "    - name: no-x
      match: {resources: [configmaps]}
      deny:
        - {cel: \"object.metadata.name == 'cfg1'\", message: no cfg1}
";
        for new in [NO_CONFIGMAPS, cel] {
            let report = compare(&reviews, &serving, &test_plan(new), EvalOptions::default());
            assert_eq!(
                (report.reviews, report.redacted),
                (reviews.len() as u64, 0),
                "{new}"
            );
            assert!(report.newly_denied > 0, "{new}: {report:?}");
        }
    }

    #[test]
    fn a_new_deny_rule_changes_exactly_the_reviews_it_denies() {
        let serving = test_plan(LABELS);
        let new = test_plan(&format!("{LABELS}{NO_CONFIGMAPS}"));
        let reviews: Vec<_> = fixtures()
            .iter()
            .map(|(_, body)| kept(body, Mode::Validate, None))
            .collect();
        let creates = fixtures()
            .iter()
            .filter(|(name, _)| name.starts_with("create-configmap"))
            .count() as u64;
        assert!(creates >= 5, "{creates}");
        let report = compare(&reviews, &serving, &new, EvalOptions::default());
        assert_eq!(report.reviews, reviews.len() as u64);
        assert_eq!(report.changed, creates);
        assert_eq!(report.newly_denied, creates);
        assert_eq!(report.newly_admitted, 0);
        assert_eq!(
            report.examples.len(),
            creates.min(MAX_EXAMPLES as u64) as usize
        );
        let example = &report.examples[0];
        assert_eq!(example.change, ["admitted → denied", "other rules"]);
        assert!(
            example.request.starts_with("CREATE configmaps"),
            "{example:?}"
        );
        assert!(
            example.after.contains("t/no-configmaps denied"),
            "{example:?}"
        );
        // And back: the same reviews are newly admitted.
        let back = compare(&reviews, &new, &serving, EvalOptions::default());
        assert_eq!((back.changed, back.newly_admitted), (creates, creates));
        // The same rules change nothing.
        let same = compare(&reviews, &serving, &serving, EvalOptions::default());
        assert_eq!((same.reviews, same.changed), (reviews.len() as u64, 0));
    }

    #[test]
    fn a_review_keeps_its_endpoint_and_rule_set() {
        let serving = test_plan(LABELS);
        let new = test_plan(NO_CONFIGMAPS);
        let configmap = &fixtures()
            .into_iter()
            .find(|(name, _)| name == "create-configmap.json")
            .unwrap()
            .1;
        // /mutate runs no deny rule: nothing changes there.
        let mutate = compare(
            &[kept(configmap, Mode::Mutate, None)],
            &serving,
            &new,
            EvalOptions::default(),
        );
        assert_eq!(mutate.changed, 0);
        // A rule set that no longer exists is a change, not a silent pass.
        let gone = compare(
            &[kept(configmap, Mode::Validate, Some("elsewhere"))],
            &serving,
            &new,
            EvalOptions::default(),
        );
        assert_eq!(gone.changed, 0, "missing on both sides: the same decision");
        let renamed = compare(
            &[kept(configmap, Mode::Validate, Some("t"))],
            &serving,
            &crate::plan::compile(&crate::rules::load_str(
                "other.yaml",
                &crate::plan::test_rule_set(NO_CONFIGMAPS).replace("name: t\n", "name: other\n"),
            ))
            .unwrap(),
            EvalOptions::default(),
        );
        assert_eq!(renamed.changed, 1);
        assert!(renamed.examples[0].after.contains("no rule set named"));
    }

    /// A mutation on every configmap setting a label to `value`.
    fn tier(value: &str) -> String {
        format!(
            "    - name: tier
      match: {{resources: [configmaps]}}
      mutate:
        - set: {{path: \"$.object.metadata.labels['shadow.example.com/tier']\", value: {value}}}
"
        )
    }

    #[test]
    fn both_plans_mutate_their_own_copy_of_the_one_decoded_object() {
        let configmap = &fixtures()
            .into_iter()
            .find(|(name, _)| name == "create-configmap.json")
            .unwrap()
            .1;
        let reviews = [
            kept(configmap, Mode::Mutate, None),
            kept(configmap, Mode::Validate, None),
        ];
        let (gold, silver) = (test_plan(&tier("gold")), test_plan(&tier("silver")));
        // Had the plan serving mutated the object the new plan then reads,
        // the new plan would find its label set and patch nothing: the
        // same plan twice must agree.
        for plan in [&gold, &silver] {
            let same = compare(&reviews, plan, plan, EvalOptions::default());
            assert_eq!((same.reviews, same.changed), (2, 0), "{same:?}");
        }
        let report = compare(&reviews, &gold, &silver, EvalOptions::default());
        assert_eq!((report.reviews, report.changed), (2, 1), "{report:?}");
        let example = &report.examples[0];
        assert_eq!(example.endpoint, "mutate");
        assert_eq!(example.change, ["other patch"]);
        assert_eq!(
            (example.before.as_str(), example.after.as_str()),
            (
                "admitted, 1 patch operations",
                "admitted, 1 patch operations"
            )
        );
    }

    #[test]
    fn a_comparison_stops_at_its_time_limit_and_says_so() {
        let serving = test_plan(LABELS);
        let new = test_plan(&format!("{LABELS}{NO_CONFIGMAPS}"));
        let configmap = &fixtures()
            .into_iter()
            .find(|(name, _)| name == "create-configmap.json")
            .unwrap()
            .1;
        // Oldest first, as the ring keeps them, each with its own uid.
        let reviews: Vec<_> = (0..100)
            .map(|i| {
                let mut review: serde_json::Value = serde_json::from_slice(configmap).unwrap();
                review["request"]["uid"] = format!("review-{i}").into();
                kept(&serde_json::to_vec(&review).unwrap(), Mode::Validate, None)
            })
            .collect();
        // A clock that moves a second each time it is read: the limit is
        // reached at the 31st read, whatever the machine's speed.
        let mut seconds = 0;
        let mut clock = || {
            seconds += 1;
            Duration::from_secs(seconds - 1)
        };
        let cut = compare_within(
            &reviews,
            &serving,
            &new,
            EvalOptions::default(),
            MAX_COMPARE_TIME,
            &mut clock,
        );
        assert_eq!((cut.reviews, cut.not_compared), (30, 70), "{cut:?}");
        assert_eq!((cut.changed, cut.newly_denied), (30, 30), "{cut:?}");
        assert!(cut.milliseconds >= 30_000, "{cut:?}");
        // The newest were compared: the examples are the last ten kept.
        let uids: Vec<&str> = cut.examples.iter().map(|e| e.uid.as_str()).collect();
        let newest: Vec<String> = (90..100).rev().map(|i| format!("review-{i}")).collect();
        assert_eq!(uids, newest, "{cut:?}");
        let shown = serde_json::to_value(&cut).unwrap();
        assert_eq!(shown["notCompared"], 70, "{shown}");
        assert_eq!(shown["reviews"], 30, "{shown}");

        // Short of the limit, every review is compared and the report
        // does not mention the limit.
        let mut still = || Duration::from_secs(29);
        let whole = compare_within(
            &reviews,
            &serving,
            &new,
            EvalOptions::default(),
            MAX_COMPARE_TIME,
            &mut still,
        );
        assert_eq!((whole.reviews, whole.not_compared), (100, 0), "{whole:?}");
        let shown = serde_json::to_value(&whole).unwrap();
        assert!(shown.get("notCompared").is_none(), "{shown}");
    }

    #[test]
    fn the_thread_pauses_for_a_batch_of_offers_at_most_fifty_milliseconds() {
        // The default rate offers one every 5 ms: ten take 50 ms.
        assert_eq!(keep_pause(DEFAULT_PER_SECOND), Duration::from_millis(50));
        assert_eq!(keep_pause(1_000), Duration::from_millis(10));
        assert_eq!(keep_pause(MAX_PER_SECOND), Duration::from_micros(10));
        // A slow rate does not make a review wait longer.
        assert_eq!(keep_pause(1), MAX_KEEP_PAUSE);
    }

    #[test]
    fn the_thread_keeps_every_review_queued_and_ends_with_its_senders() {
        let (recent, offered) = RecentReviews::queued(10, 1 << 20, MAX_PER_SECOND);
        let RecentReviews {
            queue,
            kept,
            queued_bytes,
            ..
        } = recent;
        let queue = queue.expect("a queue");
        let send = |queue: &SyncSender<Offered>, uid: &str| {
            let body = Bytes::from(format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"{uid}"}}}}"#
            ));
            queued_bytes.fetch_add(body.len(), Ordering::SeqCst);
            queue
                .try_send(Offered {
                    body,
                    mode: Mode::Mutate,
                    rule_set: None,
                })
                .expect("room");
        };
        let kept_uids = || -> Vec<String> {
            let ring = kept.lock().unwrap();
            ring.snapshot()
                .iter()
                .map(|kept| {
                    let review: Value = serde_json::from_slice(&kept.body).unwrap();
                    review["request"]["uid"].as_str().unwrap().to_owned()
                })
                .collect()
        };
        std::thread::scope(|scope| {
            let keeper = {
                let (kept, queued_bytes) = (&kept, &queued_bytes);
                scope.spawn(move || keep_all(offered, kept, queued_bytes, Duration::ZERO))
            };
            // A first review, kept while nothing else waits...
            send(&queue, "a");
            let deadline = Instant::now() + Duration::from_secs(10);
            while kept_uids().is_empty() {
                assert!(Instant::now() < deadline, "the first review was not kept");
                std::thread::yield_now();
            }
            // ...and reviews offered after the thread went back to waiting.
            send(&queue, "b");
            send(&queue, "c");
            // With every sender gone, the thread's loop returns once the
            // queue is empty.
            drop(queue);
            keeper.join().expect("the thread ends");
        });
        assert_eq!(kept_uids(), ["a", "b", "c"]);
        assert_eq!(queued_bytes.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn offers_beyond_the_queue_bound_are_dropped_and_counted() {
        let (mut recent, offered) = RecentReviews::queued(10, 1 << 20, MAX_PER_SECOND);
        // Every offer reaches the queue: no sampling.
        recent.interval = 0;
        let body = Bytes::from(vec![b' '; 1 << 20]);
        let fit = MAX_QUEUED_BYTES / body.len();
        // Far fewer than the channel's MAX_QUEUED_REVIEWS slots: only the
        // byte bound can refuse them.
        let extra = 8;
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let queued = ::metrics::with_local_recorder(&recorder, || {
            (0..fit + extra)
                .filter(|_| recent.offer(&body, Mode::Validate, None, || true))
                .count()
        });
        assert_eq!(queued, fit);
        assert_eq!(recent.queued_bytes.load(Ordering::SeqCst), MAX_QUEUED_BYTES);
        let dropped = format!(
            "{}{{{}=\"{}\"}} {extra}",
            metrics::SHADOW_REVIEWS_TOTAL,
            metrics::LABEL_RESULT,
            metrics::SHADOW_DROPPED
        );
        let rendered = recorder.handle().render();
        assert!(rendered.contains(&dropped), "{dropped} in {rendered}");

        // Once the thread takes one, there is room for one more.
        let first = offered.try_recv().unwrap();
        keep(first, &recent.kept, &recent.queued_bytes);
        assert_eq!(
            recent.queued_bytes.load(Ordering::SeqCst),
            MAX_QUEUED_BYTES - body.len()
        );
        assert!(recent.offer(&body, Mode::Validate, None, || true));
        assert!(!recent.offer(&body, Mode::Validate, None, || true));
        assert_eq!(offered.try_iter().count(), fit);
    }

    #[test]
    fn a_review_no_rule_judges_is_passed_over_and_leaves_its_turn() {
        let (recent, offered) = RecentReviews::queued(10, 1 << 20, 1);
        let body = Bytes::from_static(br#"{"request":{"uid":"u"}}"#);
        assert!(!recent.offer(&body, Mode::Validate, None, || false));
        // One review a second: the turn passed over is the next one's.
        assert!(recent.offer(&body, Mode::Validate, None, || true));
        assert!(!recent.offer(&body, Mode::Validate, None, || true));
        assert_eq!(offered.try_iter().count(), 1);
    }

    #[test]
    fn offers_beyond_the_queue_s_review_count_are_dropped_however_small() {
        let (mut recent, offered) = RecentReviews::queued(10, 1 << 20, MAX_PER_SECOND);
        recent.interval = 0;
        let body = Bytes::from_static(br#"{"request":{"uid":"u"}}"#);
        let queued = (0..MAX_QUEUED_REVIEWS + 3)
            .filter(|_| recent.offer(&body, Mode::Validate, None, || true))
            .count();
        assert_eq!(queued, MAX_QUEUED_REVIEWS);
        assert_eq!(
            recent.queued_bytes.load(Ordering::SeqCst),
            MAX_QUEUED_REVIEWS * body.len(),
            "the dropped offers' bytes are given back"
        );
        // Once the thread takes one, there is room for one more.
        let first = offered.try_recv().unwrap();
        keep(first, &recent.kept, &recent.queued_bytes);
        assert!(recent.offer(&body, Mode::Validate, None, || true));
        assert!(!recent.offer(&body, Mode::Validate, None, || true));
    }

    #[test]
    fn a_kept_review_is_parsed_after_decoding_once_for_both_plans() {
        let configmap = &fixtures()
            .into_iter()
            .find(|(name, _)| name == "create-configmap.json")
            .unwrap()
            .1;
        let kept = kept(configmap, Mode::Validate, None);
        // Redacted through a `Value`, the body has sorted keys: the decoder
        // reaches `object` before `operation`, cannot ask whether to parse
        // it, and keeps it raw.
        let mut asked = false;
        let decoded = review::decode_with(&kept.body, &mut |_| {
            asked = true;
            review::ObjectParse::Full
        })
        .unwrap();
        assert!(!asked && decoded.objects_came_early);
        let mut request = decoded.request;
        let Some(Embedded::Raw(raw)) = &request.object else {
            panic!("not raw: {:?}", request.object);
        };
        let expected: Value = serde_json::from_str(raw.get()).unwrap();
        parse_objects(&mut request);
        assert!(
            matches!(&request.object, Some(Embedded::Parsed(object)) if *object == expected),
            "{:?}",
            request.object
        );
    }

    #[test]
    fn the_ring_is_bounded_in_count_and_bytes() {
        let mut ring = Ring {
            capacity: 3,
            max_bytes: 100,
            ..Ring::default()
        };
        let entry = |size: usize| Kept {
            body: vec![b' '; size],
            mode: Mode::Validate,
            rule_set: None,
        };
        let one = StratumName::default();
        for _ in 0..5 {
            ring.push(&one, entry(10));
        }
        assert_eq!((ring.reviews, ring.bytes), (3, 30));
        ring.push(&one, entry(90));
        assert_eq!((ring.reviews, ring.bytes), (2, 100));
        // Larger than the whole bound: not kept, nothing dropped for it.
        ring.push(&one, entry(101));
        assert_eq!((ring.reviews, ring.bytes), (2, 100));
        // What a body holds is counted, not its length.
        let mut roomy = entry(10);
        roomy.body.reserve_exact(90);
        ring.push(&one, roomy);
        let snapshot = ring.snapshot();
        assert_eq!(
            ring.bytes,
            snapshot.iter().map(|k| k.body.capacity()).sum::<usize>()
        );
        assert!(
            ring.bytes <= 100 && ring.reviews == 1 && snapshot.len() == 1,
            "{}",
            ring.bytes
        );
        // And a redacted body holds no more than its length.
        let (kept, _) = redacted(&fixtures()[0].1, Mode::Validate).unwrap();
        assert_eq!(kept.capacity(), kept.len());
    }

    /// `fixture` redacted as the shadow thread keeps it, with `uid`, and
    /// its stratum.
    fn redacted_with_uid(fixture: &str, uid: &str) -> (StratumName, Kept) {
        let body = &fixtures()
            .into_iter()
            .find(|(name, _)| name == fixture)
            .unwrap()
            .1;
        let mut review: Value = serde_json::from_slice(body).unwrap();
        review["request"]["uid"] = uid.into();
        let (body, stratum) =
            redacted(&serde_json::to_vec(&review).unwrap(), Mode::Validate).unwrap();
        let kept = Kept {
            body,
            mode: Mode::Validate,
            rule_set: None,
        };
        (stratum, kept)
    }

    fn uids(reviews: &[Arc<Kept>]) -> Vec<String> {
        reviews
            .iter()
            .map(|kept| {
                let review: Value = serde_json::from_slice(&kept.body).unwrap();
                review["request"]["uid"].as_str().unwrap().to_owned()
            })
            .collect()
    }

    #[test]
    fn a_flood_of_one_resource_does_not_push_out_the_reviews_of_another() {
        // The default bounds; five Deployment CREATEs, then 1,400 ConfigMap
        // CREATEs from anyone who may create one.
        let mut ring = Ring {
            capacity: DEFAULT_REVIEWS,
            max_bytes: DEFAULT_MAX_BYTES,
            ..Ring::default()
        };
        for i in 0..5 {
            let (stratum, kept) = redacted_with_uid("create-deployment.json", &format!("d{i}"));
            ring.push(&stratum, kept);
        }
        for i in 0..1_400 {
            let (stratum, kept) = redacted_with_uid("create-configmap.json", &format!("c{i}"));
            ring.push(&stratum, kept);
        }
        let reviews = ring.snapshot();
        assert_eq!(
            (ring.reviews, reviews.len()),
            (DEFAULT_REVIEWS, DEFAULT_REVIEWS)
        );
        let kept = uids(&reviews);
        // Oldest first: the Deployments, then the newest ConfigMaps.
        let mut expected: Vec<String> = (0..5).map(|i| format!("d{i}")).collect();
        expected.extend((405..1_400).map(|i| format!("c{i}")));
        assert_eq!(kept, expected);

        // So the guard still sees that a rule denying every Deployment
        // denies them, and says how broad its sample was.
        let serving = test_plan(LABELS);
        let new = test_plan(&format!(
            "{LABELS}    - name: no-deployments
      match: {{resources: [deployments]}}
      deny:
        - message: deployments are off
"
        ));
        let report = compare(&reviews, &serving, &new, EvalOptions::default());
        assert_eq!(
            (report.reviews, report.newly_denied, report.resources),
            (1_000, 5, 2),
            "{report:?}"
        );
        assert_eq!(serde_json::to_value(&report).unwrap()["resources"], 2);

        // The byte bound is shared the same way: a flood within it by
        // bytes drops its own reviews, not the Deployments.
        let deployment_bytes = ring.strata.values().map(|s| s.bytes).min().unwrap();
        let mut by_bytes = Ring {
            capacity: DEFAULT_REVIEWS,
            max_bytes: deployment_bytes * 4,
            ..Ring::default()
        };
        for i in 0..5 {
            let (stratum, kept) = redacted_with_uid("create-deployment.json", &format!("d{i}"));
            by_bytes.push(&stratum, kept);
        }
        for i in 0..1_000 {
            let (stratum, kept) = redacted_with_uid("create-configmap.json", &format!("c{i}"));
            by_bytes.push(&stratum, kept);
        }
        assert!(by_bytes.bytes <= by_bytes.max_bytes);
        let kept = uids(&by_bytes.snapshot());
        let deployments = kept.iter().filter(|uid| uid.starts_with('d')).count();
        assert_eq!(deployments, 5, "{kept:?}");
        assert_eq!(kept.last().map(String::as_str), Some("c999"), "{kept:?}");
    }

    #[test]
    fn strata_share_the_ring_and_the_fullest_drops_its_oldest() {
        let mut ring = Ring {
            capacity: 10,
            max_bytes: DEFAULT_MAX_BYTES,
            ..Ring::default()
        };
        for i in 0..10 {
            let (stratum, kept) = redacted_with_uid("create-configmap.json", &format!("c{i}"));
            ring.push(&stratum, kept);
        }
        // Each Deployment takes a ConfigMap's place until both hold half,
        // then its own oldest.
        for i in 0..20 {
            let (stratum, kept) = redacted_with_uid("create-deployment.json", &format!("d{i}"));
            ring.push(&stratum, kept);
        }
        let expected: Vec<String> = (5..10)
            .map(|i| format!("c{i}"))
            .chain((15..20).map(|i| format!("d{i}")))
            .collect();
        assert_eq!(uids(&ring.snapshot()), expected);
        assert_eq!((ring.reviews, ring.strata.len()), (10, 2));
        assert_eq!((ring.by_count.len(), ring.by_bytes.len()), (2, 2));
    }

    #[test]
    fn a_changed_decision_shows_the_request_escaped() {
        // A name holding a whole forged problem line: the held-back
        // reload's error quotes the example and is logged a line per line.
        let forged =
            "web\n/etc/kadmit/rules/10-pod-security.yaml:1:1: error: FORGED \u{1b}[2J\u{202e}";
        let configmap = &fixtures()
            .into_iter()
            .find(|(name, _)| name == "create-configmap.json")
            .unwrap()
            .1;
        let mut review: Value = serde_json::from_slice(configmap).unwrap();
        review["request"]["name"] = forged.into();
        review["request"]["uid"] = "uid\r\u{2028}x".into();
        let reviews = [kept(
            &serde_json::to_vec(&review).unwrap(),
            Mode::Validate,
            None,
        )];
        let serving = test_plan(LABELS);
        let new = test_plan(&format!("{LABELS}{NO_CONFIGMAPS}"));
        let report = compare(&reviews, &serving, &new, EvalOptions::default());
        let example = &report.examples[0];
        for shown in [
            &example.request,
            &example.uid,
            &example.before,
            &example.after,
        ] {
            assert!(!shown.chars().any(excerpt::is_unprintable), "{shown:?}");
        }
        assert!(
            example
                .request
                .ends_with("default/web\\u{a}/etc/kadmit/rules/10-pod-security.yaml:1:1: error: FORGED \\u{1b}[2J\\u{202e}"),
            "{}",
            example.request
        );
        assert_eq!(example.uid, "uid\\u{d}\\u{2028}x");
    }

    #[test]
    fn kept_reviews_are_redacted_and_offers_never_block() {
        let recent = RecentReviews::start(10, 1 << 20, DEFAULT_PER_SECOND).unwrap();
        let secret = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": "CREATE",
                "kind": {"group": "", "version": "v1", "kind": "Secret"},
                "resource": {"group": "", "version": "v1", "resource": "secrets"},
                "object": {"kind": "Secret", "metadata": {"name": "s", "managedFields": [{}]},
                           "data": {"password": "c2VjcmV0"}}}
        });
        let body = Bytes::from(serde_json::to_vec(&secret).unwrap());
        assert!(recent.offer(&body, Mode::Validate, None, || true));
        // The thread keeps it; wait for it by polling the ring, bounded.
        let deadline = Instant::now() + Duration::from_secs(10);
        let kept = loop {
            if let Some(kept) = recent.snapshot().pop() {
                break kept;
            }
            assert!(Instant::now() < deadline, "the review was not kept");
            std::thread::yield_now();
        };
        let text = String::from_utf8(kept.body.clone()).unwrap();
        assert!(
            !text.contains("c2VjcmV0") && !text.contains("managedFields"),
            "{text}"
        );
        assert!(text.contains("password"), "{text}");
        // Off: nothing is queued.
        assert!(!RecentReviews::off().offer(&body, Mode::Validate, None, || true));
    }

    #[test]
    fn offers_are_sampled_to_a_bounded_rate() {
        let recent = RecentReviews::start(1000, 1 << 20, DEFAULT_PER_SECOND).unwrap();
        let body = Bytes::from_static(b"{}");
        let started = Instant::now();
        let queued = (0..10_000)
            .filter(|_| recent.offer(&body, Mode::Validate, None, || true))
            .count() as u64;
        // However fast the loop, no more than one offer per interval since
        // the start (plus the first).
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let most = 1 + (elapsed_ms + 1) * DEFAULT_PER_SECOND / 1000 + 1;
        assert!(
            queued >= 1 && queued <= most,
            "{queued} queued in {elapsed_ms} ms"
        );
    }
}
