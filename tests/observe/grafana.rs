//! The Grafana dashboard (`docker/grafana/kadmit-dashboard.json`) as a
//! document: a Prometheus datasource variable used by every panel, only
//! metric names kadmit exports, and the panels issue 5 asks for. Whether the
//! queries return data is `prometheus.rs`' part.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use kadmit::metrics;

/// The dashboard JSON.
pub(crate) fn dashboard() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docker/grafana/kadmit-dashboard.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// Every panel, rows' nested panels included.
pub(crate) fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(panels: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in panels.as_array().into_iter().flatten() {
            out.push(panel);
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// `(panel title, expr)` of every query target.
pub(crate) fn queries(dashboard: &Value) -> Vec<(String, String)> {
    panels(dashboard)
        .into_iter()
        .flat_map(|panel| {
            let title = panel["title"].as_str().unwrap_or("?").to_owned();
            panel["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(move |target| {
                    target["expr"]
                        .as_str()
                        .map(|expr| (title.clone(), expr.to_owned()))
                })
        })
        .collect()
}

/// `expr` with Grafana's built-in variables replaced by fixed values, as
/// Grafana would for a 5-minute range at 15 s resolution.
pub(crate) fn substitute(expr: &str) -> String {
    let mut expr = expr.to_owned();
    for (variable, value) in [
        ("$__rate_interval", "1m"),
        ("$__interval", "15s"),
        ("$__range", "5m"),
    ] {
        let braced = format!("${{{}}}", &variable[1..]);
        expr = expr.replace(&braced, value).replace(variable, value);
    }
    assert!(!expr.contains('$'), "unknown variable left in {expr}");
    expr
}

/// Names kadmit exports, with the series suffixes of its histograms.
fn exported_names() -> BTreeSet<String> {
    let mut names: BTreeSet<String> = [
        metrics::REVIEWS_TOTAL,
        metrics::REJECTIONS_TOTAL,
        metrics::WARNINGS_TOTAL,
        metrics::AUDITS_TOTAL,
        metrics::MUTATIONS_TOTAL,
        metrics::BAD_REQUESTS_TOTAL,
        metrics::REVIEW_ERRORS_TOTAL,
        metrics::RELOADS_TOTAL,
        metrics::PLAN_GENERATION,
        metrics::RULE_SETS_LOADED,
        metrics::RULES_LOADED,
        metrics::LAST_RELOAD_SUCCESS_SECONDS,
        metrics::TLS_CERTIFICATE_EXPIRY_SECONDS,
        metrics::TLS_CERTIFICATE_NOT_BEFORE_SECONDS,
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    for histogram in [
        metrics::REVIEW_DURATION_SECONDS,
        metrics::RELOAD_DURATION_SECONDS,
    ] {
        for suffix in ["_bucket", "_sum", "_count"] {
            names.insert(format!("{histogram}{suffix}"));
        }
    }
    names
}

fn metric_names(expr: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(start) = rest.find("kadmit_") {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(&tail[..end]);
        rest = &tail[end..];
    }
    names
}

#[test]
fn every_panel_queries_the_prometheus_datasource_variable() {
    let dashboard = dashboard();
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating list");
    let datasource = variables
        .iter()
        .find(|variable| variable["type"] == "datasource")
        .expect("a datasource variable");
    assert_eq!(datasource["name"], "DS_PROMETHEUS");
    assert_eq!(datasource["query"], "prometheus");

    let expected = serde_json::json!({"type": "prometheus", "uid": "${DS_PROMETHEUS}"});
    let mut ids = BTreeSet::new();
    for panel in panels(&dashboard) {
        let title = &panel["title"];
        assert!(
            ids.insert(panel["id"].as_u64().expect("numeric id")),
            "duplicate id: {title}"
        );
        let grid = &panel["gridPos"];
        let (x, w) = (grid["x"].as_u64(), grid["w"].as_u64());
        assert!(
            x.zip(w).is_some_and(|(x, w)| w > 0 && x + w <= 24),
            "{title}: {grid}"
        );
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"], expected, "{title}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title} has no query");
        for target in targets {
            assert_eq!(target["datasource"], expected, "{title}");
        }
    }
}

#[test]
fn queries_use_only_names_kadmit_exports() {
    let exported = exported_names();
    let queries = queries(&dashboard());
    let mut used = BTreeSet::new();
    for (title, expr) in &queries {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{title}: {expr} names no kadmit metric");
        for name in names {
            assert!(exported.contains(name), "{title}: {name} is not exported");
            used.insert(name.to_owned());
        }
        let _ = substitute(expr);
    }
    // Every counter and histogram kadmit exports is on the dashboard.
    for name in [
        metrics::REJECTIONS_TOTAL,
        metrics::WARNINGS_TOTAL,
        metrics::AUDITS_TOTAL,
        metrics::MUTATIONS_TOTAL,
        metrics::REVIEWS_TOTAL,
        metrics::BAD_REQUESTS_TOTAL,
        metrics::REVIEW_ERRORS_TOTAL,
        metrics::RELOADS_TOTAL,
    ] {
        assert!(used.contains(name), "no panel shows {name}");
    }
}

#[test]
fn the_panels_issue_5_asks_for_are_there() {
    let queries = queries(&dashboard());
    let has = |needles: &[&str]| {
        queries
            .iter()
            .any(|(_, expr)| needles.iter().all(|needle| expr.contains(needle)))
    };
    let wanted: [(&str, &[&str]); 7] = [
        (
            "rejections by rule over time",
            &["by (rule_set, rule)", "rate(kadmit_rejections_total"],
        ),
        ("top rules", &["topk(", "kadmit_rejections_total"]),
        (
            "rate by operation and resource",
            &["by (operation, resource)", "rate(kadmit_reviews_total"],
        ),
        (
            "latency p50",
            &[
                "histogram_quantile(0.5",
                "kadmit_review_duration_seconds_bucket",
            ],
        ),
        (
            "latency p99",
            &[
                "histogram_quantile(0.99",
                "kadmit_review_duration_seconds_bucket",
            ],
        ),
        ("reloads and errors", &["kadmit_reloads_total", "result"]),
        (
            "warnings",
            &["by (rule_set, rule)", "kadmit_warnings_total"],
        ),
    ];
    for (what, needles) in wanted {
        assert!(has(needles), "no query for {what} ({needles:?})");
    }
}
