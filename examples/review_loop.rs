//! One review, many times: `server::decide` + `review::encode` of a review
//! body against a rules directory, in a plain loop, for instruction-count
//! profiles (`valgrind --tool=callgrind`), where criterion's timing loop
//! would only add noise.
//!
//! ```text
//! cargo build --release --example review_loop
//! valgrind --tool=callgrind target/release/examples/review_loop mutate 2000
//! callgrind_annotate --inclusive=yes callgrind.out.<pid> | head -60
//! ```
//!
//! Arguments: `MODE` (`validate`, `mutate`, or `floor` for what the transport
//! floor's handler does, `examples/floor.rs`), `ITERATIONS`, and optionally
//! `RULES_DIR` (default `rules/`) and `BODY` (default the create-pod fixture).
//! Prints the response size, so the loop cannot be optimised away.

use std::path::PathBuf;

use kadmit::eval::{Ask, EvalOptions};
use kadmit::plan::Mode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mode = match args.next().as_deref() {
        Some("validate") => Some(Mode::Validate),
        Some("mutate") | None => Some(Mode::Mutate),
        Some("floor") => None,
        Some(other) => return Err(format!("mode is validate or mutate, not {other}").into()),
    };
    let iterations: u64 = args.next().as_deref().unwrap_or("1000").parse()?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let rules = args
        .next()
        .map_or_else(|| root.join("rules"), PathBuf::from);
    let body = args.next().map_or_else(
        || root.join("tests/fixtures/admission-reviews/create-pod.json"),
        PathBuf::from,
    );
    let body = std::fs::read(&body)?;
    let plan = kadmit::plan::compile(&kadmit::rules::load_dir(&rules)?)
        .map_err(|diagnostics| format!("rules do not compile:\n{diagnostics}"))?;
    let options = EvalOptions {
        verify_patches: false,
        limits: kadmit::eval::budget::Limits::DEFAULT,
        answer: true,
    };
    let mut bytes = 0usize;
    let Some(mode) = mode else {
        for _ in 0..iterations {
            bytes += floor(std::hint::black_box(&body)).len();
        }
        println!("{iterations} reviews, {bytes} response bytes");
        return Ok(());
    };
    for _ in 0..iterations {
        let ask = Ask::new(mode).options(options);
        let (review, verdict) = kadmit::server::decide(&plan, std::hint::black_box(&body), ask)
            .map_err(|e| format!("review refused: {e}"))?;
        let response = verdict.response(mode);
        bytes += kadmit::review::encode(review.version, &review.request.uid, &response).len();
    }
    println!("{iterations} reviews, {bytes} response bytes");
    Ok(())
}

/// The transport floor's handler (`examples/floor.rs`): parse, copy the uid,
/// answer allowed.
fn floor(body: &[u8]) -> Vec<u8> {
    let Ok(review) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Vec::new();
    };
    let response = serde_json::json!({
        "apiVersion": review["apiVersion"],
        "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": true},
    });
    serde_json::to_vec(&response).unwrap_or_default()
}
