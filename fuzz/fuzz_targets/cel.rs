//! Any CEL expression a rule file can hold: compiled under the rule files'
//! bounds and, when it compiles, evaluated on a real Pod CREATE under the
//! review budget. Nothing may panic, overflow the stack or run past the
//! budget (libFuzzer's `-timeout` and `-rss_limit_mb` catch the last).
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

static POD: LazyLock<(Value, Value)> = LazyLock::new(|| {
    let body = include_bytes!("../../tests/fixtures/admission-reviews/create-pod.json");
    let review: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let mut request = review["request"].clone();
    let object = request["object"].take();
    (object, request)
});

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(expression) = kadmit::cel::Expression::compile(source, &[]) else {
        return;
    };
    let (object, request) = &*POD;
    let budget = kadmit::eval::budget::Budget::new(kadmit::eval::budget::Limits::DEFAULT);
    let _ = expression.evaluate(
        |variable| match variable {
            kadmit::cel::Variable::Object => Some(object),
            kadmit::cel::Variable::Request => Some(request),
            _ => None,
        },
        &budget,
    );
});
