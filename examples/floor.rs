//! The transport floor: the least an admission webhook on this stack can do
//! per request, to measure kadmit against (`scripts/load.sh`).
//!
//! actix-web + rustls (ring, ALPN h2 and http/1.1, `tcp_nodelay`, mimalloc),
//! exactly as `kadmit serve` is set up; the handler parses the body into a
//! `serde_json::Value`, copies the uid and answers allowed. Nothing else: no
//! rules, no metrics, no error bodies.
//!
//! ```text
//! cargo run --release --example floor -- [LISTEN=127.0.0.1:9443] [WORKERS=1] [PATCH_BYTES=0]
//! ```
//! With `PATCH_BYTES` (at most 1 MiB), every answer also carries a `patch`
//! of that many bytes, as large as a mutating webhook's (kadmit's answer to
//! `create-pod.json` on `/mutate` holds about 1,000): what a larger answer
//! costs a webhook written the plain way. Over h2 that includes a write of
//! its own per answer, because h2 sends a DATA frame of 256 bytes or more
//! apart from the frames buffered with it; kadmit hands its answers over
//! in smaller pieces and does not pay it (`src/server/body.rs`).
//! It prints `listening tls=ADDR` and serves a self-signed certificate for
//! localhost/127.0.0.1 (clients use their insecure flag).

use std::net::SocketAddr;

use actix_web::{App, HttpResponse, HttpServer, web};
use anyhow::Context as _;
use serde_json::{Value, json};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

async fn review(body: web::Bytes) -> HttpResponse {
    match allowed(&body) {
        Some(response) => HttpResponse::Ok().json(response),
        None => HttpResponse::BadRequest().finish(),
    }
}

/// [`review`], answering with a `patch` too.
async fn review_with_patch(body: web::Bytes, patch: web::Data<Patch>) -> HttpResponse {
    let Some(mut response) = allowed(&body) else {
        return HttpResponse::BadRequest().finish();
    };
    response["response"]["patchType"] = json!("JSONPatch");
    response["response"]["patch"] = json!(patch.0);
    HttpResponse::Ok().json(response)
}

/// The review in `body` answered allowed; `None` when it is not JSON.
fn allowed(body: &[u8]) -> Option<Value> {
    let review = serde_json::from_slice::<Value>(body).ok()?;
    Some(json!({
        "apiVersion": review["apiVersion"],
        "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": true},
    }))
}

/// The `patch` of [`review_with_patch`]'s answers.
struct Patch(String);

/// The largest `PATCH_BYTES`: far above any webhook's patch, and still a
/// body every client reads.
const MAX_PATCH_BYTES: usize = 1 << 20;

fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut args = std::env::args().skip(1);
    let listen: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:9443".to_owned())
        .parse()
        .context("LISTEN, the first argument, is an address such as 127.0.0.1:9443")?;
    let workers: usize = args
        .next()
        .map_or(Ok(1), |w| w.parse())
        .context("WORKERS, the second argument, is a number")?;
    let patch_bytes: usize = args
        .next()
        .map_or(Ok(0), |n| n.parse())
        .context("PATCH_BYTES, the third argument, is a number of bytes")?;
    anyhow::ensure!(
        patch_bytes <= MAX_PATCH_BYTES,
        "PATCH_BYTES is at most {MAX_PATCH_BYTES}, got {patch_bytes}"
    );
    let patch = web::Data::new(Patch("A".repeat(patch_bytes)));

    let generated = kadmit::server::selfsigned::generate()?;
    let tls = kadmit::server::tls::server_config(
        std::sync::Arc::new(kadmit::server::tls::FixedCert::new(generated.server)),
        None,
    )?;

    actix_web::rt::System::new().block_on(async move {
        let server = HttpServer::new(move || {
            // The plain handler unless asked for a patch, so that the floor
            // itself is unchanged.
            let route = || match patch_bytes {
                0 => web::post().to(review),
                _ => web::post().to(review_with_patch),
            };
            App::new()
                .app_data(patch.clone())
                .app_data(web::PayloadConfig::new(16 << 20))
                .route("/validate", route())
                .route("/mutate", route())
        })
        .tcp_nodelay(true)
        .workers(workers)
        .bind_rustls_0_23(listen, tls)?;
        let addr = server.addrs().first().copied().unwrap_or(listen);
        println!("listening tls={addr}");
        server.run().await?;
        anyhow::Ok(())
    })
}
