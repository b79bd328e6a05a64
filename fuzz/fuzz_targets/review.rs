//! Any request body through what the server does with it: decode the
//! AdmissionReview (directly from its text, which must decode what
//! serde_json alone decodes), evaluate it against the bundled rules in both modes, and
//! encode the answer, which must be the answer decided on the whole objects. Nothing a client sends may panic, hang or grow memory
//! without bound (libFuzzer's `-timeout` and `-rss_limit_mb` catch the last
//! two).
#![no_main]

use std::sync::LazyLock;

use kadmit::eval::{Ask, EvalOptions};
use kadmit::plan::Mode;
use kadmit::plan::Plan;
use kadmit::review::{ObjectParse, Request, decode_with, decode_with_serde_json};
use libfuzzer_sys::fuzz_target;

static PLAN: LazyLock<Plan> = LazyLock::new(|| {
    let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../rules"));
    let loaded = kadmit::rules::load_dir(dir).expect("the bundled rules load");
    kadmit::plan::compile(&loaded).expect("the bundled rules compile")
});

fuzz_target!(|body: &[u8]| {
    // The direct reading of a body decodes exactly what serde_json alone
    // decodes, or leaves the body to it.
    for mode in [Mode::Mutate, Mode::Validate] {
        let mut ask = |request: &Request| ObjectParse::Projected(PLAN.projections(mode, &request.kind.kind));
        let direct = decode_with(body, &mut ask);
        let serde = decode_with_serde_json(body, &mut ask);
        assert_eq!(format!("{direct:?}"), format!("{serde:?}"), "{mode:?}");
    }
    for parse in [ObjectParse::Raw, ObjectParse::Full] {
        let direct = decode_with(body, &mut |_| parse);
        let serde = decode_with_serde_json(body, &mut |_| parse);
        assert_eq!(format!("{direct:?}"), format!("{serde:?}"));
    }
    let options = EvalOptions {
        verify_patches: true,
        ..EvalOptions::default()
    };
    for mode in [Mode::Mutate, Mode::Validate] {
        let ask = Ask::new(mode).options(options);
        let answer = |(review, verdict): (kadmit::review::Review, kadmit::eval::Verdict)| {
            let over_budget = verdict.over_budget.is_some();
            let bytes = kadmit::review::encode(
                review.version,
                &review.request.uid,
                &verdict.response(mode),
            );
            (bytes, over_budget)
        };
        let projected = kadmit::server::decide(&PLAN, body, ask).map(answer);
        // The server parses only what the rules can read of the objects;
        // wherever the whole objects decode and stay within the budget,
        // that must answer exactly as deciding on the whole objects does.
        // (Only the parts skipped may be deeper or hold numbers that a
        // whole parse refuses.)
        if let (Ok((projected, false)), Ok((whole, false))) = (
            projected,
            kadmit::server::decide_on_whole_objects(&PLAN, body, ask).map(answer),
        ) {
            assert_eq!(
                String::from_utf8_lossy(&projected),
                String::from_utf8_lossy(&whole),
                "{mode:?}"
            );
        }
    }
});
