//! Any rule file through `kadmit check`: load (YAML, positions, every
//! diagnostic) and compile. Nothing an operator writes may panic, hang or
//! exhaust memory (libFuzzer's `-timeout` and `-rss_limit_mb` catch the last
//! two).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let loaded = kadmit::rules::load_str("fuzz.yaml", text);
    let _ = kadmit::plan::compile(&loaded);
});
