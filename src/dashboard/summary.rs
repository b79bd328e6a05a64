//! What the built-in dashboard shows, computed on the server from kadmit's own
//! Prometheus exposition: totals and per-rule counters, request rate, latency
//! quantiles from the histogram, a short history for the charts, and the
//! plan's reload state. Served as JSON by `GET /api/summary`.
//!
//! Why from the exposition text, and why on the server:
//! - The dashboard then shows exactly what Prometheus scrapes: the same
//!   names from [`crate::metrics`], the same counters, no second set of
//!   counters to keep in step on the request path.
//! - Quantiles, rates and the "top rules" ranking are computed once, in
//!   tested Rust, instead of in the page's JavaScript; the page only draws.
//!
//! The history is a ring of snapshots taken every [`SAMPLE_INTERVAL`] by the
//! metrics upkeep thread (and by each `/api/summary` call when one is due),
//! so charts have data from the moment the page opens. Nothing here runs on
//! the review path.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::metrics;
use crate::reload::{ReloadHistory, ReloadState};

/// Time between two history snapshots.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(10);

/// Snapshots kept: one hour at [`SAMPLE_INTERVAL`].
pub const HISTORY_CAPACITY: usize = 360;

/// Window of the rates and latency quantiles shown as current values.
pub const RATE_WINDOW: Duration = Duration::from_secs(60);

/// Rules drawn separately in the rejections chart; the rest are summed.
pub const CHART_RULES: usize = 6;

/// One sample line of the text exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name, with its `_bucket`, `_sum` or `_count` suffix.
    pub name: String,
    /// Label pairs in the order written.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

impl Sample {
    /// The value of label `name`, or `""`.
    pub fn label(&self, name: &str) -> &str {
        self.labels
            .iter()
            .find(|(key, _)| key == name)
            .map_or("", |(_, value)| value.as_str())
    }
}

/// Parses the Prometheus text exposition format (version 0.0.4): comments
/// and blank lines are skipped, and so is any line that does not parse.
pub fn parse_exposition(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        rest = after_brace;
        loop {
            rest = rest.trim_start_matches([',', ' ']);
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = rest.find('=')?;
            let key = rest[..eq].trim().to_owned();
            rest = rest[eq + 1..].strip_prefix('"')?;
            let mut value = String::new();
            let mut chars = rest.char_indices();
            let end = loop {
                let (index, c) = chars.next()?;
                match c {
                    '"' => break index,
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    c => value.push(c),
                }
            };
            rest = &rest[end + 1..];
            labels.push((key, value));
        }
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().ok()?,
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Cumulative histogram buckets summed over every label set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Buckets {
    /// `(upper bound, cumulative count)`, by upper bound, `+Inf` last.
    pub bounds: Vec<(f64, f64)>,
}

impl Buckets {
    fn add(&mut self, le: f64, count: f64) {
        match self.bounds.iter_mut().find(|(bound, _)| *bound == le) {
            Some((_, total)) => *total += count,
            None => {
                self.bounds.push((le, count));
                self.bounds.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
        }
    }

    /// Observations counted.
    pub fn count(&self) -> f64 {
        self.bounds.last().map_or(0.0, |(_, count)| *count)
    }

    /// The increase from `earlier` to `self` (both of the same histogram).
    pub fn since(&self, earlier: &Buckets) -> Buckets {
        let bounds = self
            .bounds
            .iter()
            .map(|(le, count)| {
                let before = earlier
                    .bounds
                    .iter()
                    .find(|(bound, _)| bound == le)
                    .map_or(0.0, |(_, c)| *c);
                (*le, (count - before).max(0.0))
            })
            .collect();
        Buckets { bounds }
    }

    /// The `q` quantile (0..=1), estimated as Prometheus' `histogram_quantile`
    /// does: linear interpolation inside the bucket holding the rank, the
    /// highest finite bound when the rank falls in `+Inf`. `None` without
    /// observations.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total <= 0.0 || !(0.0..=1.0).contains(&q) {
            return None;
        }
        let rank = q * total;
        let mut lower_bound = 0.0;
        let mut lower_count = 0.0;
        for &(bound, count) in &self.bounds {
            if count >= rank && count > lower_count {
                if bound.is_infinite() {
                    return Some(lower_bound);
                }
                let fraction = (rank - lower_count) / (count - lower_count);
                return Some(lower_bound + (bound - lower_bound) * fraction);
            }
            if bound.is_finite() {
                lower_bound = bound;
            }
            lower_count = count;
        }
        Some(lower_bound)
    }
}

/// Counters of one rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct RuleCounts {
    /// Reviews it denied.
    pub rejections: f64,
    /// Reviews it warned about.
    pub warnings: f64,
    /// Reviews it audited.
    pub audits: f64,
    /// Objects it changed.
    pub mutations: f64,
}

/// Reviews of one operation on one resource.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ResourceCounts {
    /// Reviews answered.
    pub reviews: f64,
    /// Of those, denied.
    pub denied: f64,
}

/// kadmit's counters at one moment, summed over the labels the dashboard
/// does not show separately.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// When it was taken, in Unix seconds.
    pub at: f64,
    /// Reviews answered.
    pub reviews: f64,
    /// Reviews by decision (`allowed`, `denied`, `patched`).
    pub decisions: BTreeMap<String, f64>,
    /// Reviews by (operation, resource).
    pub targets: BTreeMap<(String, String), ResourceCounts>,
    /// Counters by (rule set, rule).
    pub rules: BTreeMap<(String, String), RuleCounts>,
    /// The review duration histogram over both endpoints.
    pub latency: Buckets,
    /// Requests refused as bad input.
    pub bad_requests: f64,
    /// Reviews kadmit could not answer.
    pub review_errors: f64,
}

impl Snapshot {
    /// The snapshot of an exposition text taken at `at`.
    pub fn from_exposition(text: &str, at: SystemTime) -> Self {
        let mut snapshot = Snapshot {
            at: unix_seconds(at),
            ..Snapshot::default()
        };
        let bucket_name = format!("{}_bucket", metrics::REVIEW_DURATION_SECONDS);
        for sample in parse_exposition(text) {
            let value = sample.value;
            let rule_key = || {
                (
                    sample.label(metrics::LABEL_RULE_SET).to_owned(),
                    sample.label(metrics::LABEL_RULE).to_owned(),
                )
            };
            match sample.name.as_str() {
                metrics::REVIEWS_TOTAL => {
                    snapshot.reviews += value;
                    let decision = sample.label(metrics::LABEL_DECISION);
                    *snapshot.decisions.entry(decision.to_owned()).or_default() += value;
                    let target = snapshot
                        .targets
                        .entry((
                            sample.label(metrics::LABEL_OPERATION).to_owned(),
                            sample.label(metrics::LABEL_RESOURCE).to_owned(),
                        ))
                        .or_default();
                    target.reviews += value;
                    if decision == metrics::Decision::Denied.as_str() {
                        target.denied += value;
                    }
                }
                metrics::REJECTIONS_TOTAL => {
                    snapshot.rules.entry(rule_key()).or_default().rejections += value;
                }
                metrics::WARNINGS_TOTAL => {
                    snapshot.rules.entry(rule_key()).or_default().warnings += value;
                }
                metrics::AUDITS_TOTAL => {
                    snapshot.rules.entry(rule_key()).or_default().audits += value;
                }
                metrics::MUTATIONS_TOTAL => {
                    snapshot.rules.entry(rule_key()).or_default().mutations += value;
                }
                metrics::BAD_REQUESTS_TOTAL => snapshot.bad_requests += value,
                metrics::REVIEW_ERRORS_TOTAL => snapshot.review_errors += value,
                name if name == bucket_name => {
                    let le = match sample.label("le") {
                        "+Inf" => f64::INFINITY,
                        other => match other.parse() {
                            Ok(le) => le,
                            Err(_) => continue,
                        },
                    };
                    snapshot.latency.add(le, value);
                }
                _ => {}
            }
        }
        snapshot
    }

    fn rule_total(&self, pick: fn(&RuleCounts) -> f64) -> f64 {
        self.rules.values().map(pick).sum()
    }

    fn rejections_of(&self, key: &(String, String)) -> f64 {
        self.rules.get(key).map_or(0.0, |counts| counts.rejections)
    }
}

fn unix_seconds(time: SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0.0, |elapsed| elapsed.as_secs_f64())
}

/// The last [`HISTORY_CAPACITY`] snapshots, oldest first.
#[derive(Debug)]
pub struct History {
    capacity: usize,
    interval: Duration,
    snapshots: Mutex<VecDeque<Arc<Snapshot>>>,
}

impl Default for History {
    fn default() -> Self {
        History::new(HISTORY_CAPACITY, SAMPLE_INTERVAL)
    }
}

impl History {
    /// A history of `capacity` snapshots at least `interval` apart.
    pub fn new(capacity: usize, interval: Duration) -> Self {
        History {
            capacity: capacity.max(1),
            interval,
            snapshots: Mutex::new(VecDeque::with_capacity(capacity)),
        }
    }

    /// Keeps `snapshot` if the newest one is at least an interval older (or
    /// there is none). Returns whether it was kept.
    pub fn offer(&self, snapshot: Snapshot) -> bool {
        let mut snapshots = self
            .snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Slack of a tenth of the interval, so a timer firing a little early
        // does not skip a whole interval.
        let due = self.interval.as_secs_f64() * 0.9;
        if snapshots
            .back()
            .is_some_and(|newest| snapshot.at - newest.at < due)
        {
            return false;
        }
        if snapshots.len() == self.capacity {
            snapshots.pop_front();
        }
        snapshots.push_back(Arc::new(snapshot));
        true
    }

    /// Every snapshot, oldest first.
    pub fn snapshots(&self) -> Vec<Arc<Snapshot>> {
        self.snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }
}

/// What `GET /api/summary` returns.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// When it was computed (RFC 3339).
    pub time: String,
    /// The plan serving and the last reloads.
    pub plan: PlanSummary,
    /// Counters since start.
    pub totals: Totals,
    /// Rates and latency over the last [`RATE_WINDOW`] (less right after
    /// start).
    pub current: Current,
    /// Every rule that fired, most rejections first.
    pub rules: Vec<RuleRow>,
    /// Reviews by operation and resource, most first.
    pub targets: Vec<ResourceRow>,
    /// Per-interval history for the charts.
    pub series: Series,
}

/// The plan part of [`Summary`].
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanSummary {
    /// Generation serving; 0 before the first plan.
    pub generation: u64,
    /// True once a plan serves.
    pub ready: bool,
    /// Rule sets serving.
    pub rule_sets: usize,
    /// Rules serving.
    pub rules: usize,
    /// How reloads went.
    #[serde(flatten)]
    pub history: ReloadHistory,
}

impl From<&ReloadState> for PlanSummary {
    fn from(status: &ReloadState) -> Self {
        PlanSummary {
            generation: status.generation,
            ready: status.ready,
            rule_sets: status.rule_sets.len(),
            rules: status.rule_sets.iter().map(|set| set.rules).sum(),
            history: status.history.clone(),
        }
    }
}

/// Counters since start.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    /// Reviews answered.
    pub reviews: f64,
    /// Reviews allowed unchanged.
    pub allowed: f64,
    /// Reviews denied.
    pub denied: f64,
    /// Reviews allowed with a patch.
    pub patched: f64,
    /// Deny rules that fired.
    pub rejections: f64,
    /// Warn rules that fired.
    pub warnings: f64,
    /// Audit rules that fired.
    pub audits: f64,
    /// Mutating rules that changed an object.
    pub mutations: f64,
    /// Requests refused as bad input.
    pub bad_requests: f64,
    /// Reviews kadmit could not answer.
    pub review_errors: f64,
}

/// Rates and latency over a recent window.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Current {
    /// Length of the window in seconds; `None` when there is no earlier
    /// snapshot to compare with.
    pub window_seconds: Option<f64>,
    /// Reviews per second over the window.
    pub reviews_per_second: Option<f64>,
    /// Rejections per second over the window.
    pub rejections_per_second: Option<f64>,
    /// Latency quantiles over the window, or since start when the window
    /// holds no review.
    pub latency: Latency,
}

/// Latency quantiles in seconds.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Latency {
    /// True when computed over every review since start.
    pub since_start: bool,
    /// Reviews the quantiles are computed from.
    pub reviews: f64,
    /// Median.
    pub p50: Option<f64>,
    /// 90th percentile.
    pub p90: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
}

impl Latency {
    fn of(buckets: &Buckets, since_start: bool) -> Self {
        Latency {
            since_start,
            reviews: buckets.count(),
            p50: buckets.quantile(0.5),
            p90: buckets.quantile(0.9),
            p99: buckets.quantile(0.99),
        }
    }
}

/// One rule in [`Summary::rules`].
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleRow {
    /// Rule set.
    pub rule_set: String,
    /// Rule.
    pub rule: String,
    /// Counters since start.
    #[serde(flatten)]
    pub counts: RuleCounts,
}

/// One operation and resource in [`Summary::targets`].
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRow {
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub operation: String,
    /// Resource label.
    pub resource: String,
    /// Counters since start.
    #[serde(flatten)]
    pub counts: ResourceCounts,
}

/// Per-interval values between consecutive snapshots (the last interval
/// ends now).
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Series {
    /// Start of the first interval, Unix seconds; each later interval starts
    /// where the one before it ended.
    pub start: Option<f64>,
    /// End of each interval, Unix seconds.
    pub times: Vec<f64>,
    /// Reviews per second in each interval.
    pub reviews_per_second: Vec<f64>,
    /// Median latency in each interval; `None` without reviews.
    pub latency_p50: Vec<Option<f64>>,
    /// 99th percentile latency in each interval; `None` without reviews.
    pub latency_p99: Vec<Option<f64>>,
    /// Rejections in each interval of the [`CHART_RULES`] rules that
    /// rejected most over the whole history, then one row summing the rest
    /// (rule set `""`, rule `"other rules"`) if any.
    pub rejections: Vec<RuleSeries>,
}

/// One rule's row of [`Series::rejections`].
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleSeries {
    /// Rule set.
    pub rule_set: String,
    /// Rule.
    pub rule: String,
    /// Rejections per interval.
    pub counts: Vec<f64>,
}

/// The summary at `now`, from the history and the current snapshot.
pub fn summarize(history: &[Arc<Snapshot>], now: &Snapshot, plan: PlanSummary) -> Summary {
    let total = |pick: fn(&RuleCounts) -> f64| now.rule_total(pick);
    let decision = |name: metrics::Decision| {
        now.decisions
            .get(name.as_str())
            .copied()
            .unwrap_or_default()
    };
    let totals = Totals {
        reviews: now.reviews,
        allowed: decision(metrics::Decision::Allowed),
        denied: decision(metrics::Decision::Denied),
        patched: decision(metrics::Decision::Patched),
        rejections: total(|c| c.rejections),
        warnings: total(|c| c.warnings),
        audits: total(|c| c.audits),
        mutations: total(|c| c.mutations),
        bad_requests: now.bad_requests,
        review_errors: now.review_errors,
    };

    let mut rules: Vec<RuleRow> = now
        .rules
        .iter()
        .map(|((rule_set, rule), counts)| RuleRow {
            rule_set: rule_set.clone(),
            rule: rule.clone(),
            counts: *counts,
        })
        .collect();
    rules.sort_by(|a, b| {
        b.counts
            .rejections
            .total_cmp(&a.counts.rejections)
            .then(b.counts.warnings.total_cmp(&a.counts.warnings))
            .then_with(|| (&a.rule_set, &a.rule).cmp(&(&b.rule_set, &b.rule)))
    });
    let mut targets: Vec<ResourceRow> = now
        .targets
        .iter()
        .map(|((operation, resource), counts)| ResourceRow {
            operation: operation.clone(),
            resource: resource.clone(),
            counts: *counts,
        })
        .collect();
    targets.sort_by(|a, b| {
        b.counts
            .reviews
            .total_cmp(&a.counts.reviews)
            .then_with(|| (&a.operation, &a.resource).cmp(&(&b.operation, &b.resource)))
    });

    Summary {
        time: humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_secs_f64(now.at))
            .to_string(),
        plan,
        totals,
        current: current(history, now),
        rules,
        targets,
        series: series(history, now),
    }
}

/// Rates and latency from the newest snapshot at least [`RATE_WINDOW`] old
/// (or the oldest one, right after start) to `now`.
fn current(history: &[Arc<Snapshot>], now: &Snapshot) -> Current {
    let window_start = now.at - RATE_WINDOW.as_secs_f64();
    let base = history
        .iter()
        .rev()
        .find(|snapshot| snapshot.at <= window_start)
        .or_else(|| history.first())
        .filter(|base| now.at - base.at > 0.0);
    let Some(base) = base else {
        return Current {
            window_seconds: None,
            reviews_per_second: None,
            rejections_per_second: None,
            latency: Latency::of(&now.latency, true),
        };
    };
    let seconds = now.at - base.at;
    let recent = now.latency.since(&base.latency);
    let latency = if recent.count() > 0.0 {
        Latency::of(&recent, false)
    } else {
        Latency::of(&now.latency, true)
    };
    let rejections = now.rule_total(|c| c.rejections) - base.rule_total(|c| c.rejections);
    Current {
        window_seconds: Some(seconds),
        reviews_per_second: Some(((now.reviews - base.reviews) / seconds).max(0.0)),
        rejections_per_second: Some((rejections / seconds).max(0.0)),
        latency,
    }
}

/// Shortest interval drawn: the current snapshot is only added to the
/// history's points when it is at least this much newer than the last one,
/// so the last point is not a rate over a few milliseconds.
const MIN_LIVE_INTERVAL_SECONDS: f64 = 1.0;

fn series(history: &[Arc<Snapshot>], now: &Snapshot) -> Series {
    let mut points: Vec<&Snapshot> = history.iter().map(|s| &**s).collect();
    if points
        .last()
        .is_none_or(|last| now.at - last.at >= MIN_LIVE_INTERVAL_SECONDS)
    {
        points.push(now);
    }
    let mut series = Series::default();
    if points.len() < 2 {
        return series;
    }
    let (first, last) = (points[0], points[points.len() - 1]);
    series.start = Some(first.at);
    let mut ranked: Vec<(&(String, String), f64)> = last
        .rules
        .iter()
        .map(|(key, counts)| (key, counts.rejections - first.rejections_of(key)))
        .filter(|(_, rejections)| *rejections > 0.0)
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let (shown, rest) = ranked.split_at(ranked.len().min(CHART_RULES));
    let mut rows: Vec<RuleSeries> = shown
        .iter()
        .map(|((rule_set, rule), _)| RuleSeries {
            rule_set: rule_set.clone(),
            rule: rule.clone(),
            counts: Vec::new(),
        })
        .collect();
    let other = !rest.is_empty();
    if other {
        rows.push(RuleSeries {
            rule_set: String::new(),
            rule: "other rules".to_owned(),
            counts: Vec::new(),
        });
    }

    for pair in points.windows(2) {
        let (before, after) = (pair[0], pair[1]);
        let seconds = after.at - before.at;
        if seconds <= 0.0 {
            continue;
        }
        series.times.push(after.at);
        series
            .reviews_per_second
            .push(((after.reviews - before.reviews) / seconds).max(0.0));
        let latency = after.latency.since(&before.latency);
        series.latency_p50.push(latency.quantile(0.5));
        series.latency_p99.push(latency.quantile(0.99));
        let delta = |key: &(String, String)| {
            (after.rejections_of(key) - before.rejections_of(key)).max(0.0)
        };
        for (row, (key, _)) in rows.iter_mut().zip(shown) {
            row.counts.push(delta(key));
        }
        if other && let Some(row) = rows.last_mut() {
            row.counts
                .push(rest.iter().map(|(key, _)| delta(key)).sum());
        }
    }
    series.rejections = rows;
    series
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPOSITION: &str = r#"# HELP kadmit_reviews_total Reviews.
# TYPE kadmit_reviews_total counter
kadmit_reviews_total{endpoint="validate",rule_set="*",operation="CREATE",resource="pods",decision="denied"} 3
kadmit_reviews_total{endpoint="validate",rule_set="*",operation="CREATE",resource="pods",decision="allowed"} 5
kadmit_reviews_total{endpoint="mutate",rule_set="*",operation="UPDATE",resource="deployments/scale",decision="patched"} 2
kadmit_rejections_total{rule_set="security",rule="no-root",operation="CREATE",resource="pods",code="403"} 2
kadmit_rejections_total{rule_set="security",rule="no-root",operation="UPDATE",resource="pods",code="403"} 1
kadmit_rejections_total{rule_set="images",rule="no-latest",operation="CREATE",resource="pods",code="403"} 1
kadmit_warnings_total{rule_set="labels",rule="team \"label\"\\x"} 4
kadmit_mutations_total{rule_set="defaults",rule="team"} 2
kadmit_bad_requests_total{reason="malformed"} 7
kadmit_review_duration_seconds_bucket{endpoint="validate",le="0.0001"} 4
kadmit_review_duration_seconds_bucket{endpoint="validate",le="0.001"} 8
kadmit_review_duration_seconds_bucket{endpoint="validate",le="+Inf"} 8
kadmit_review_duration_seconds_bucket{endpoint="mutate",le="0.0001"} 0
kadmit_review_duration_seconds_bucket{endpoint="mutate",le="0.001"} 2
kadmit_review_duration_seconds_bucket{endpoint="mutate",le="+Inf"} 2
kadmit_review_duration_seconds_sum{endpoint="validate"} 0.004
kadmit_plan_generation 3
"#;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000 + seconds)
    }

    #[test]
    fn parses_names_labels_escapes_and_values() {
        let samples = parse_exposition(EXPOSITION);
        assert_eq!(samples.len(), 17);
        let warning = samples
            .iter()
            .find(|s| s.name == "kadmit_warnings_total")
            .expect("warnings sample");
        assert_eq!(warning.label("rule"), "team \"label\"\\x");
        assert_eq!(warning.value, 4.0);
        let plain = samples.last().expect("last sample");
        assert_eq!(
            (plain.name.as_str(), plain.value),
            ("kadmit_plan_generation", 3.0)
        );
        assert!(plain.labels.is_empty());
        let inf = samples.iter().find(|s| s.label("le") == "+Inf");
        assert!(inf.is_some());
    }

    #[test]
    fn broken_lines_are_skipped() {
        let samples = parse_exposition("a{b=\"c} 1\nok 2\nx{y=\"z\"} notanumber\n");
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].name, "ok");
    }

    #[test]
    fn snapshot_sums_over_labels_it_does_not_show() {
        let snapshot = Snapshot::from_exposition(EXPOSITION, at(0));
        assert_eq!(snapshot.reviews, 10.0);
        assert_eq!(snapshot.decisions["denied"], 3.0);
        let pods = snapshot.targets[&("CREATE".to_owned(), "pods".to_owned())];
        assert_eq!((pods.reviews, pods.denied), (8.0, 3.0));
        let no_root = snapshot.rules[&("security".to_owned(), "no-root".to_owned())];
        assert_eq!(no_root.rejections, 3.0);
        assert_eq!(snapshot.bad_requests, 7.0);
        assert_eq!(
            snapshot.latency.bounds,
            vec![(0.0001, 4.0), (0.001, 10.0), (f64::INFINITY, 10.0)]
        );
    }

    #[test]
    fn quantiles_interpolate_like_prometheus() {
        let buckets = Buckets {
            bounds: vec![
                (0.1, 50.0),
                (0.2, 90.0),
                (0.4, 100.0),
                (f64::INFINITY, 100.0),
            ],
        };
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        // Rank 50 is the top of the first bucket, interpolated from 0.
        assert!(
            close(buckets.quantile(0.5), 0.1),
            "{:?}",
            buckets.quantile(0.5)
        );
        // Rank 70: half-way through (0.1, 0.2].
        assert!(close(buckets.quantile(0.7), 0.15));
        // Rank 99: 90 % through (0.2, 0.4].
        assert!(close(buckets.quantile(0.99), 0.38));
        // Observations past the last finite bound report that bound.
        let overflow = Buckets {
            bounds: vec![(1.0, 1.0), (f64::INFINITY, 10.0)],
        };
        assert!(close(overflow.quantile(0.99), 1.0));
        assert_eq!(Buckets::default().quantile(0.5), None);
    }

    #[test]
    fn history_keeps_one_snapshot_per_interval_up_to_capacity() {
        let history = History::new(2, Duration::from_secs(10));
        let snap = |s| Snapshot::from_exposition("", at(s));
        assert!(history.offer(snap(0)));
        assert!(!history.offer(snap(5)), "too soon");
        assert!(history.offer(snap(9)), "within the slack");
        assert!(history.offer(snap(20)));
        let kept: Vec<f64> = history.snapshots().iter().map(|s| s.at).collect();
        assert_eq!(kept, vec![unix_seconds(at(9)), unix_seconds(at(20))]);
    }

    fn reviews(count: u32, denied_by: &[(&str, u32)], fast: u32) -> String {
        let mut text = format!(
            "kadmit_reviews_total{{endpoint=\"validate\",rule_set=\"*\",operation=\"CREATE\",resource=\"pods\",decision=\"allowed\"}} {count}\n"
        );
        for (rule, n) in denied_by {
            text.push_str(&format!(
                "kadmit_rejections_total{{rule_set=\"s\",rule=\"{rule}\",operation=\"CREATE\",resource=\"pods\",code=\"403\"}} {n}\n"
            ));
        }
        text.push_str(&format!(
            "kadmit_review_duration_seconds_bucket{{endpoint=\"validate\",le=\"0.0001\"}} {fast}\n\
             kadmit_review_duration_seconds_bucket{{endpoint=\"validate\",le=\"0.001\"}} {count}\n\
             kadmit_review_duration_seconds_bucket{{endpoint=\"validate\",le=\"+Inf\"}} {count}\n"
        ));
        text
    }

    fn plan() -> PlanSummary {
        PlanSummary::from(&ReloadState::default())
    }

    #[test]
    fn summary_rates_window_and_series() {
        let history: Vec<Arc<Snapshot>> = vec![
            Arc::new(Snapshot::from_exposition(&reviews(0, &[], 0), at(0))),
            Arc::new(Snapshot::from_exposition(
                &reviews(100, &[("a", 10), ("b", 1)], 100),
                at(30),
            )),
            Arc::new(Snapshot::from_exposition(
                &reviews(130, &[("a", 10), ("b", 4)], 100),
                at(60),
            )),
        ];
        let now = Snapshot::from_exposition(&reviews(190, &[("a", 16), ("b", 4)], 100), at(90));
        let summary = summarize(&history, &now, plan());

        assert_eq!(summary.totals.reviews, 190.0);
        assert_eq!(summary.totals.rejections, 20.0);
        assert_eq!(summary.rules[0].rule, "a", "most rejections first");
        // The window starts at the newest snapshot 60 s old or older: t=30.
        assert_eq!(summary.current.window_seconds, Some(60.0));
        assert_eq!(summary.current.reviews_per_second, Some(90.0 / 60.0));
        assert_eq!(summary.current.rejections_per_second, Some(9.0 / 60.0));
        // The 90 reviews of the window were all slower than 100 µs.
        let latency = &summary.current.latency;
        assert!(!latency.since_start);
        assert_eq!(latency.reviews, 90.0);
        assert!(latency.p50.is_some_and(|p| p > 0.0001 && p <= 0.001));

        let series = &summary.series;
        assert_eq!(series.start, Some(unix_seconds(at(0))));
        assert_eq!(series.times.len(), 3);
        assert_eq!(series.reviews_per_second, vec![100.0 / 30.0, 1.0, 2.0]);
        let rows: Vec<(&str, &[f64])> = series
            .rejections
            .iter()
            .map(|row| (row.rule.as_str(), row.counts.as_slice()))
            .collect();
        assert_eq!(
            rows,
            vec![("a", &[10.0, 0.0, 6.0][..]), ("b", &[1.0, 3.0, 0.0][..])]
        );
        assert_eq!(series.latency_p50[0].map(|p| p <= 0.0001), Some(true));
    }

    #[test]
    fn rules_past_the_chart_limit_are_summed() {
        let many: Vec<(String, u32)> = (0..CHART_RULES + 2)
            .map(|n| (format!("r{n}"), 100 - n as u32))
            .collect();
        let borrowed: Vec<(&str, u32)> = many.iter().map(|(r, n)| (r.as_str(), *n)).collect();
        let history = vec![Arc::new(Snapshot::from_exposition(
            &reviews(0, &[], 0),
            at(0),
        ))];
        let now = Snapshot::from_exposition(&reviews(1000, &borrowed, 0), at(10));
        let summary = summarize(&history, &now, plan());
        let rows = &summary.series.rejections;
        assert_eq!(rows.len(), CHART_RULES + 1);
        let other = rows.last().expect("other row");
        assert_eq!(other.rule, "other rules");
        let expected: f64 = many[CHART_RULES..].iter().map(|(_, n)| f64::from(*n)).sum();
        assert_eq!(other.counts, vec![expected]);
    }

    #[test]
    fn without_history_there_are_no_rates_and_latency_is_since_start() {
        let now = Snapshot::from_exposition(&reviews(10, &[], 10), at(0));
        let summary = summarize(&[], &now, plan());
        assert_eq!(summary.current.window_seconds, None);
        assert!(summary.current.latency.since_start);
        assert_eq!(summary.current.latency.reviews, 10.0);
        assert!(summary.series.times.is_empty());
    }
}
