//! Any request body through what the server does with it: decode the
//! AdmissionReview, evaluate it against the bundled rules in both modes, and
//! encode the answer. Nothing a client sends may panic, hang or grow memory
//! without bound (libFuzzer's `-timeout` and `-rss_limit_mb` catch the last
//! two).
#![no_main]

use std::sync::LazyLock;

use kadmit::eval::{Ask, EvalOptions};
use kadmit::plan::Mode;
use kadmit::plan::Plan;
use libfuzzer_sys::fuzz_target;

static PLAN: LazyLock<Plan> = LazyLock::new(|| {
    let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../rules"));
    let loaded = kadmit::rules::load_dir(dir).expect("the bundled rules load");
    kadmit::plan::compile(&loaded).expect("the bundled rules compile")
});

fuzz_target!(|body: &[u8]| {
    let options = EvalOptions {
        verify_patches: true,
        ..EvalOptions::default()
    };
    for mode in [Mode::Mutate, Mode::Validate] {
        if let Ok((review, verdict)) =
            kadmit::server::decide(&PLAN, body, Ask::new(mode).options(options))
        {
            let _ = kadmit::review::encode(
                review.version,
                &review.request.uid,
                &verdict.response(mode),
            );
        }
    }
});
