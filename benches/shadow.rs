//! What shadowing costs: on the request path, handing an answered review to
//! the shadow ring (`shadow/offer`); at a reload, comparing the new plan
//! with the one serving on 1,000 kept reviews (`shadow/compare/...`), which
//! is what a swap waits for.
//!
//! Cases (criterion ids):
//!
//! - `shadow/offer`: one `RecentReviews::offer` of the pod CREATE fixture;
//!   nearly all are passed over by the rate sample (a clock read and a
//!   compare), as under heavy traffic.
//! - `shadow/compare/1000-reviews-1000-rules`: `shadow::compare` of 1,000
//!   kept reviews (pod CREATEs, half `/validate`, half `/mutate`) against
//!   two versions of 1,000 synthetic rules. The reviews are redacted as the
//!   ring keeps them: without `managedFields`, which is 40 % of the pod
//!   fixture's object, so the bench parses what a reload would.
//!
//! Run with `cargo bench --bench shadow -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use kadmit::eval::EvalOptions;
use kadmit::plan::{Mode, Plan, compile};
use kadmit::rules::load_str;
use kadmit::shadow::{self, Kept, RecentReviews};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/synthetic.rs"]
mod synthetic;

const CREATE_POD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/admission-reviews/create-pod.json"
);

/// 1,000 synthetic rules whose messages start with `tag`.
fn plan(tag: &str) -> Plan {
    compile(&load_str("synthetic.yaml", &synthetic::rules(1000, tag)))
        .unwrap_or_else(|d| panic!("{d}"))
}

fn bench(c: &mut Criterion) {
    let body = std::fs::read(CREATE_POD).expect("fixture");
    let mut group = c.benchmark_group("shadow");

    let recent = RecentReviews::start(
        shadow::DEFAULT_REVIEWS,
        shadow::DEFAULT_MAX_BYTES,
        shadow::DEFAULT_PER_SECOND,
    )
    .expect("start the shadow thread");
    let shared = Bytes::from(body.clone());
    group.bench_function("offer", |b| {
        b.iter(|| recent.offer(black_box(&shared), Mode::Validate, None, || true))
    });

    // As the shadow thread keeps it (`shadow::keep_all`).
    let mut review: serde_json::Value = serde_json::from_slice(&body).expect("fixture JSON");
    kadmit::review::redact(&mut review);
    let redacted = serde_json::to_vec(&review).expect("redacted JSON");
    let serving = plan("a: ");
    let new = plan("b: ");
    let kept: Vec<Arc<Kept>> = (0..1000)
        .map(|i| {
            Arc::new(Kept {
                body: redacted.clone(),
                mode: if i % 2 == 0 {
                    Mode::Validate
                } else {
                    Mode::Mutate
                },
                rule_set: None,
            })
        })
        .collect();
    let options = EvalOptions {
        verify_patches: false,
        ..EvalOptions::default()
    };
    let report = shadow::compare(&kept, &serving, &new, options);
    eprintln!(
        "shadow/compare: {} reviews compared, {} changed, {} ms",
        report.reviews, report.changed, report.milliseconds
    );
    group.sample_size(10);
    group.bench_function("compare/1000-reviews-1000-rules", |b| {
        b.iter(|| shadow::compare(black_box(&kept), &serving, &new, options))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
