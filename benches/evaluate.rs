//! What one admission review costs minus the transport: `server::decide`
//! (decoding the body, parsing the object in the same pass when a rule will
//! read it, evaluating against a plan) and `review::encode` of the answer.
//!
//! Cases (criterion ids; results under `target/criterion/<group>/<id>/`):
//!
//! - `review/{validate,mutate}/bundled`: a real pod CREATE review against the
//!   bundled rules in `rules/`.
//! - `review/{validate,mutate}/{100,1000}`: the same review against synthetic
//!   rule sets spread over 200 resources, 5 % of the rules matching pods, to
//!   show that cost follows the rules that match, not the rules that exist.
//! - `review/validate/no-match`: a ConfigMap review against the 1,000 rules,
//!   none of which match it: the index skip path, where the object is never
//!   parsed.
//! - `compile/1000-rules`: `rules::load_str` + `plan::compile` of the 1,000
//!   synthetic rules, what a reload costs.
//! - `parts/...`: the bundled pod case split into its steps (decode, parsing
//!   the object, copying it, request matching of the index candidates,
//!   evaluate, patch verification, encode), to see where the time goes.
//! - `image/{short,hub-alias,long-digest,invalid}`: parsing and normalising
//!   one image reference, what an `image:` condition adds per container.
//!
//! Run with `cargo bench --bench evaluate -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use kadmit::eval::{Ask, EvalOptions, Verdict, select};
use kadmit::plan::{Mode, Plan, RequestKey, compile};
use kadmit::review::{Embedded, ObjectParse, Request, decode, decode_with, encode};
use kadmit::rules::{Loaded, load_dir, load_str};

// The server runs on mimalloc: glibc malloc made the same code 1.7-1.8x slower
// in some builds (fastbin consolidation after each request's many small
// frees), so measure what production runs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/synthetic.rs"]
mod synthetic;

/// A pod CREATE review recorded from a real kube-apiserver.
const CREATE_POD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/admission-reviews/create-pod.json"
);

/// A ConfigMap CREATE review recorded from a real kube-apiserver.
const CREATE_CONFIGMAP: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/admission-reviews/create-configmap.json"
);

/// The bundled rules, as shipped.
const BUNDLED_RULES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/rules");

fn read(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

fn plan_of(loaded: &Loaded, what: &str) -> Plan {
    compile(loaded).unwrap_or_else(|diagnostics| panic!("{what} do not compile:\n{diagnostics}"))
}

/// The server's evaluation settings: patches are not re-verified at runtime
/// (`--verify-patches` turns that on; `parts/verify-patch` measures it).
const SERVER: EvalOptions = EvalOptions {
    verify_patches: false,
    limits: kadmit::eval::budget::Limits::DEFAULT,
    answer: true,
};

/// The full cost of one review: what a handler does with a body it has read
/// (`server::decide`, the server's own decoding and evaluation, then encoding).
fn review(plan: &Plan, body: &[u8], mode: Mode) -> Vec<u8> {
    let (review, verdict) = kadmit::server::decide(plan, body, Ask::new(mode).options(SERVER))
        .unwrap_or_else(|e| panic!("fixture is refused: {e}"));
    encode(review.version, &review.request.uid, &verdict.response(mode))
}

fn request_of(body: &[u8]) -> Request {
    decode(body)
        .unwrap_or_else(|e| panic!("fixture does not decode: {e}"))
        .request
}

fn verdict_of(plan: &Plan, request: &Request, mode: Mode) -> Verdict {
    select(plan, request, Ask::new(mode))
        .evaluate(request)
        .unwrap_or_else(|e| panic!("fixture does not evaluate: {e}"))
}

/// Says what a case measures (rules considered, outcome), so a figure can be
/// read next to the work behind it; printed once, outside the timing.
fn describe(name: &str, plan: &Plan, body: &[u8], mode: Mode) {
    let request = request_of(body);
    let verdict = verdict_of(plan, &request, mode);
    let patch_ops = verdict.patch.as_ref().map_or(0, |patch| patch.len());
    eprintln!(
        "{name}: {} rules in plan, {} candidates from the index, allowed={}, {} findings, {} warnings, {} patch operations, response {} bytes",
        plan.rules().len(),
        plan.candidates(mode, &RequestKey::of(&request)).len(),
        verdict.allowed,
        verdict.findings.len(),
        verdict.warnings.len(),
        patch_ops,
        review(plan, body, mode).len(),
    );
}

/// The CEL example: CEL conditions, a `forEach` with CEL, match conditions.
const CEL_RULES: &str = "docs/examples/cel";

fn reviews(c: &mut Criterion) {
    let pod = read(CREATE_POD);
    let configmap = read(CREATE_CONFIGMAP);
    let bundled = load_dir(Path::new(BUNDLED_RULES))
        .unwrap_or_else(|e| panic!("cannot read {BUNDLED_RULES}: {e}"));
    let bundled = plan_of(&bundled, "the bundled rules");
    let plans = [
        ("bundled", bundled),
        (
            "100",
            plan_of(
                &load_str("synthetic-100.yaml", &synthetic::rules(100, "")),
                "100 synthetic rules",
            ),
        ),
        (
            "1000",
            plan_of(
                &load_str("synthetic-1000.yaml", &synthetic::rules(1000, "")),
                "1000 synthetic rules",
            ),
        ),
        (
            "cel",
            plan_of(
                &load_dir(Path::new(CEL_RULES))
                    .unwrap_or_else(|e| panic!("cannot read {CEL_RULES}: {e}")),
                "the CEL example rules",
            ),
        ),
    ];

    let mut group = c.benchmark_group("review");
    for mode in [Mode::Validate, Mode::Mutate] {
        for (name, plan) in &plans {
            let id = format!("{}/{name}", mode.as_str());
            describe(&format!("review/{id}"), plan, &pod, mode);
            group.bench_function(&id, |b| b.iter(|| review(plan, black_box(&pod), mode)));
        }
    }
    let (_, thousand) = &plans[2];
    describe(
        "review/validate/no-match",
        thousand,
        &configmap,
        Mode::Validate,
    );
    group.bench_function("validate/no-match", |b| {
        b.iter(|| review(thousand, black_box(&configmap), Mode::Validate))
    });
    group.finish();

    // The bundled pod case, step by step.
    let (_, bundled) = &plans[0];
    let decoded = decode(&pod).unwrap_or_else(|e| panic!("fixture does not decode: {e}"));
    let (version, request) = (decoded.version, decoded.request);
    let Some(Embedded::Raw(object)) = &request.object else {
        panic!("{CREATE_POD}: decode keeps no raw object");
    };
    let mut group = c.benchmark_group("parts");
    // Decoding with the object skipped (a review no rule reads the object
    // of), and with the object parsed in the same pass (what the server does
    // when a rule will read it).
    group.bench_function("decode/create-pod", |b| {
        b.iter(|| decode(black_box(&pod)).map(|review| review.request.uid.len()))
    });
    group.bench_function("decode-parsing-object/create-pod", |b| {
        b.iter(|| {
            decode_with(black_box(&pod), &mut |_| ObjectParse::Full)
                .map(|review| review.request.uid.len())
        })
    });
    // The whole body as the transport floor parses it (a `Value`, dropped),
    // and indexed in one pass without building a value.
    group.bench_function("parse-body-value/create-pod", |b| {
        b.iter(|| {
            std::str::from_utf8(black_box(&pod))
                .ok()
                .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
                .is_some()
        })
    });
    group.bench_function("index-body/create-pod", |b| {
        b.iter(|| {
            std::str::from_utf8(black_box(&pod))
                .ok()
                .and_then(|text| kadmit::json::Doc::parse(text, 1 << 20).ok())
                .map(|doc| doc.len())
        })
    });
    // Parsing a skipped object afterwards (`kadmit test`, or a review decoded
    // before it was known that a rule reads the object).
    group.bench_function("parse-object/create-pod", |b| {
        b.iter(|| serde_json::from_str::<serde_json::Value>(black_box(object.get())).is_ok())
    });
    let parsed: serde_json::Value = serde_json::from_str(object.get())
        .unwrap_or_else(|e| panic!("{CREATE_POD}: object is not JSON: {e}"));
    // Evaluating a request's own object copies it to mutate it (the server hands
    // its object over instead), and `patch::verify` copies the original once
    // more to check the patch.
    group.bench_function("clone-object/create-pod", |b| {
        b.iter(|| black_box(&parsed).clone())
    });
    // The request-level matcher of every rule the index returns (operation,
    // resource, namespaces, users, groups), before any object is parsed.
    for (name, plan) in [&plans[0], &plans[2]] {
        let key = RequestKey::of(&request);
        let candidates = plan.candidates(Mode::Validate, &key);
        group.bench_function(format!("match-request/validate/{name}"), |b| {
            b.iter(|| {
                candidates
                    .iter()
                    .filter_map(|&i| plan.rules().get(usize::try_from(i).ok()?))
                    .filter(|rule| {
                        let mut charge = |_| true;
                        rule.matcher.match_request(black_box(&key), &mut charge) == Ok(Ok(()))
                    })
                    .count()
            })
        });
    }
    for mode in [Mode::Validate, Mode::Mutate] {
        group.bench_function(format!("evaluate/{}/bundled", mode.as_str()), |b| {
            b.iter(|| {
                let request = black_box(&request);
                select(bundled, request, Ask::new(mode).options(SERVER))
                    .evaluate(request)
                    .is_ok()
            })
        });
        let verdict = verdict_of(bundled, &request, mode);
        if let (Some(patch), Some(mutated)) = (&verdict.patch, &verdict.mutated) {
            // evaluate re-applies the patch it built to a copy of the original
            // and compares the result with the mutated object.
            group.bench_function(format!("verify-patch/{}/bundled", mode.as_str()), |b| {
                b.iter(|| kadmit::patch::verify(black_box(&parsed), patch, mutated).is_ok())
            });
        }
        group.bench_function(format!("encode/{}/bundled", mode.as_str()), |b| {
            b.iter(|| encode(version, &request.uid, black_box(&verdict.response(mode))))
        });
    }
    group.finish();
}

fn compiles(c: &mut Criterion) {
    let text = synthetic::rules(1000, "");
    let mut group = c.benchmark_group("compile");
    // Each iteration takes milliseconds: fewer samples keep the run short.
    group.sample_size(10);
    group.bench_function("1000-rules", |b| {
        b.iter(|| {
            compile(&load_str("synthetic-1000.yaml", black_box(&text)))
                .map(|plan| plan.rules().len())
        })
    });
    group.finish();
}

fn images(c: &mut Criterion) {
    let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
    let long = format!("registry.example:5000/team/sub/app:v1.2.3@{digest}");
    let cases = [
        ("short", "nginx:1.27".to_owned()),
        (
            "hub-alias",
            "Registry-1.Docker.IO:443/nginx:1.27".to_owned(),
        ),
        ("long-digest", long),
        ("invalid", "registry.example/App@sha256:abc".to_owned()),
    ];
    let mut group = c.benchmark_group("image");
    for (id, reference) in &cases {
        group.bench_function(*id, |b| {
            b.iter(|| kadmit::image::ImageRef::parse(black_box(reference)).is_ok())
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    // Short runs by default: the machine is shared. Command-line flags
    // (`--warm-up-time`, `--measurement-time`) override these.
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = reviews, compiles, images
}
criterion_main!(benches);
