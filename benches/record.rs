//! What observing one review costs on the request path: the metrics recorded
//! per review (`metrics::ReviewLabels::of`, `count_review`, `record_review_duration`,
//! `record_findings`) and
//! the recent-denials ring, with the real Prometheus recorder installed and
//! a registry already holding a realistic number of series.
//!
//! Cases (criterion ids):
//!
//! - `observe/allowed`: labels + review counter + latency histogram, no
//!   finding: what every allowed review pays.
//! - `observe/denied-and-warned`: the same plus one rejection and one warning
//!   counter.
//! - `observe/denials-ring`: pushing one denial into the ring (only denied
//!   reviews pay it).
//!
//! Run with `cargo bench --bench record -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use kadmit::dashboard::denials::Denials;
use kadmit::eval::{Finding, Outcome, Verdict};
use kadmit::metrics::{self, Decision, ReviewLabels};
use kadmit::review::decode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CREATE_POD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/admission-reviews/create-pod.json"
);

fn finding(rule: &str, outcome: Outcome) -> Finding {
    Finding {
        rule_set: Arc::from("pod-security"),
        rule: Arc::from(rule),
        outcome,
        messages: vec!["container app runs privileged".to_owned()],
        more_messages: 0,
        code: (outcome == Outcome::Denied).then_some(403),
    }
}

fn bench(c: &mut Criterion) {
    let handle = metrics::install().expect("install the recorder");
    let body = std::fs::read(CREATE_POD).expect("fixture");
    let request = decode(&body).expect("a valid review").request;

    // A registry like a busy server's: 40 rules over a few resources.
    for n in 0..40 {
        let name = format!("rule-{n}");
        let labels = ReviewLabels {
            operation: request.operation,
            resource: metrics::resource_label(["pods", "deployments", "configmaps"][n % 3], ""),
        };
        metrics::record_findings(&[finding(&name, Outcome::Denied)], &labels);
        metrics::record_findings(&[finding(&name, Outcome::Warned)], &labels);
    }

    let findings = vec![
        finding("rule-7", Outcome::Denied),
        finding("rule-8", Outcome::Warned),
    ];
    let mut group = c.benchmark_group("observe");
    group.bench_function("allowed", |b| {
        b.iter(|| {
            let labels = ReviewLabels::of(black_box(&request), || true);
            metrics::count_review(
                "validate",
                metrics::ALL_RULE_SETS,
                &labels,
                Decision::Allowed,
            );
            metrics::record_review_duration("validate", 0.0001);
            metrics::record_findings(black_box(&[]), &labels);
        })
    });
    group.bench_function("denied-and-warned", |b| {
        b.iter(|| {
            let labels = ReviewLabels::of(black_box(&request), || true);
            metrics::count_review(
                "validate",
                metrics::ALL_RULE_SETS,
                &labels,
                Decision::Denied,
            );
            metrics::record_review_duration("validate", 0.0001);
            metrics::record_findings(black_box(&findings), &labels);
        })
    });
    let denials = Denials::new(200);
    let verdict = Verdict {
        allowed: false,
        findings: findings.clone(),
        ..Verdict::default()
    };
    group.bench_function("denials-ring", |b| {
        b.iter(|| denials.record(black_box(&request), black_box(&verdict)))
    });
    group.finish();
    // Keep the exposition honest: everything recorded is rendered.
    assert!(handle.render().contains("kadmit_rejections_total"));
}

criterion_group!(benches, bench);
criterion_main!(benches);
