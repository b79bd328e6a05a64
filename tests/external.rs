//! Things some tests need from outside the repository (system tools, data
//! beside the checkout). On a developer machine a missing one skips the test
//! with the reason; under `CI=true` it fails it: CI must run them all.

/// Says why a test cannot run. Panics under `CI=true`; otherwise prints
/// `skipping: {message}` so the skip shows in `cargo test -- --nocapture`.
pub(crate) fn missing(message: &str) {
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!("{message}");
    }
    eprintln!("skipping: {message}");
}
