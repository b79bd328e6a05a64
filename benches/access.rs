//! What the operations listener's token check costs per request
//! (`server::access::TokenFile::accepts`): a `stat` of the token file to see
//! whether it changed, a SHA-256 of the presented token and a constant-time
//! comparison of the digests.
//!
//! Cases (criterion ids):
//!
//! - `ops-token/right`: the right 44-byte token (32 random bytes, base64).
//! - `ops-token/wrong`: a wrong token of the same length; must cost the same.
//! - `ops-token/wrong-4KiB`: a wrong token of the largest accepted length.
//!
//! Run with `cargo bench --bench access -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kadmit::server::access::{MAX_TOKEN_FILE_BYTES, TokenFile};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TOKEN: &str = "q8Yb0x2m9cJ4cQmS1Vb7b3wJv0a6k5y1Zr2pT9sXw4E=";

fn token(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("token");
    std::fs::write(&path, format!("{TOKEN}\n")).expect("write the token");
    let file = TokenFile::load(&path).expect("load the token");
    let wrong = TOKEN.replace('q', "r");
    let long = "x".repeat(MAX_TOKEN_FILE_BYTES);
    assert!(file.accepts(TOKEN.as_bytes()));
    assert!(!file.accepts(wrong.as_bytes()));

    let mut group = c.benchmark_group("ops-token");
    group.bench_function("right", |b| {
        b.iter(|| black_box(file.accepts(black_box(TOKEN.as_bytes()))))
    });
    group.bench_function("wrong", |b| {
        b.iter(|| black_box(file.accepts(black_box(wrong.as_bytes()))))
    });
    group.bench_function("wrong-4KiB", |b| {
        b.iter(|| black_box(file.accepts(black_box(long.as_bytes()))))
    });
    group.finish();
}

criterion_group!(benches, token);
criterion_main!(benches);
