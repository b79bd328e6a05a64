//! `kadmit serve`: load the rules, set up TLS, and run the webhook and
//! operations listeners until SIGTERM or SIGINT.
//!
//! Every flag can also be set through its `KADMIT_...` environment variable,
//! the usual way to configure a container.

use std::io::Write;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::output::Output;
use crate::dashboard::summary::{History, Snapshot};
use crate::metrics;
use crate::reload::store::Store;
use crate::reload::{self, Reloader, Reloads, Trigger, watcher};
use crate::server::{self, Limits, client_ca, selfsigned, tls};
use crate::shadow::{self, RecentReviews};
use anyhow::Context as _;

/// How often the Prometheus recorder's histograms are maintained.
const METRICS_UPKEEP: Duration = Duration::from_secs(5);

/// Largest `--shutdown-delay-secs` and `--shutdown-timeout-secs`: an hour,
/// far beyond any pod's termination grace period, so a typo cannot keep a
/// terminating process around for days.
const MAX_SHUTDOWN_SECS: u64 = 3600;

/// Flags of `kadmit serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address of the HTTPS webhook listener (/validate, /mutate).
    #[arg(long, env = "KADMIT_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,

    /// Address of the operations listener (/metrics, /healthz, /readyz,
    /// /status, /dashboard, /api/*): plain HTTP, or HTTPS with --ops-tls.
    #[arg(
        long,
        visible_alias = "ops-listen",
        env = "KADMIT_PLAIN_LISTEN",
        default_value = "0.0.0.0:8080"
    )]
    pub plain_listen: SocketAddr,

    /// Serve the operations listener over HTTPS with the webhook's
    /// certificate (--tls-cert/--tls-key, or the self-signed one), followed
    /// on disk the same way. Probes then need `scheme: HTTPS`.
    #[arg(long, env = "KADMIT_OPS_TLS", default_value_t = false, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub ops_tls: bool,

    /// Require `Authorization: Bearer <token>` on the operations listener
    /// (all but /healthz, /readyz and the dashboard's static page), the
    /// token being this file's content (at most 4 KiB, surrounding
    /// whitespace ignored); read again when the file changes. Needs
    /// --ops-tls: a token sent in clear text is no protection.
    #[arg(long, env = "KADMIT_OPS_TOKEN_FILE", requires = "ops_tls")]
    pub ops_token_file: Option<PathBuf>,

    /// Require a client certificate signed by a CA in this PEM file on the
    /// operations listener (the same paths as --ops-token-file; with both,
    /// either is enough). Needs --ops-tls.
    #[arg(long, env = "KADMIT_OPS_CLIENT_CA", requires = "ops_tls")]
    pub ops_client_ca: Option<PathBuf>,

    /// Directory of rule files (*.yaml, *.yml).
    #[arg(long, env = "KADMIT_RULES", default_value = "rules")]
    pub rules: PathBuf,

    /// Server certificate chain (PEM); reloaded when the file changes.
    /// Without --tls-cert and --tls-key a self-signed development certificate
    /// is generated.
    #[arg(long, env = "KADMIT_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// Server private key (PEM); reloaded when the file changes.
    #[arg(long, env = "KADMIT_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Require client certificates signed by a CA in this PEM file.
    #[arg(long, env = "KADMIT_CLIENT_CA")]
    pub client_ca: Option<PathBuf>,

    /// Where the self-signed CA (ca.pem) and a sample review are written
    /// [default: $TMPDIR/kadmit-PID].
    #[arg(long, env = "KADMIT_SELF_SIGNED_DIR", conflicts_with = "tls_cert")]
    pub self_signed_dir: Option<PathBuf>,

    /// Largest accepted request body in bytes; larger ones get 413.
    #[arg(long, env = "KADMIT_MAX_BODY_BYTES", default_value_t = 16 << 20)]
    pub max_body_bytes: usize,

    /// Seconds allowed to receive a request's head, and again its body
    /// (1 to 3600: 0 would answer 408 to any body not read at once).
    #[arg(long, env = "KADMIT_REQUEST_TIMEOUT_SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub request_timeout_secs: u64,

    /// Request-body bytes all reviews being read or evaluated may hold
    /// together, answers not yet taken by their connection included; a body
    /// that would exceed it gets 503 at once. The default keeps each flood
    /// of docs/server-limits.md under the shipped 256 MiB memory limit.
    #[arg(long, env = "KADMIT_MAX_BUFFERED_BODY_BYTES", default_value_t = 32 << 20)]
    pub max_buffered_body_bytes: usize,

    /// Open HTTPS connections (handshakes included); beyond it new ones wait
    /// in the listen backlog.
    #[arg(long, env = "KADMIT_MAX_CONNECTIONS", default_value_t = server::Connections::default().max_connections)]
    pub max_connections: usize,

    /// Open connections of the operations listener (--plain-listen); a new
    /// connection beyond it closes the oldest (after its answer in
    /// progress), so the kubelet's probes never wait for room.
    #[arg(long, env = "KADMIT_OPS_MAX_CONNECTIONS", default_value_t = server::OPS_MAX_CONNECTIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(4..=65_536))]
    pub ops_max_connections: usize,

    /// TLS handshakes in progress at once; a new connection beyond it closes
    /// the oldest pending handshake.
    #[arg(long, env = "KADMIT_MAX_TLS_HANDSHAKES", default_value_t = server::Connections::default().max_handshakes)]
    pub max_tls_handshakes: usize,

    /// Milliseconds allowed for a TLS handshake (500 to 60,000: a few
    /// milliseconds would end every handshake while /readyz says ready).
    #[arg(long, env = "KADMIT_TLS_HANDSHAKE_TIMEOUT_MS", default_value_t = 2000,
          value_parser = clap::value_parser!(u64).range(500..=60_000))]
    pub tls_handshake_timeout_ms: u64,

    /// HTTP/2 streams one connection may have open at once (advertised to
    /// the client; more are refused).
    #[arg(long, env = "KADMIT_H2_MAX_CONCURRENT_STREAMS", default_value_t = server::Connections::default().max_concurrent_streams)]
    pub h2_max_concurrent_streams: u32,

    /// HTTP/2 streams open at once on all connections together; a new
    /// stream beyond it ends the oldest open one that waits for its client
    /// (for its body, or for window for its answer), and is refused when
    /// none waits.
    #[arg(long, env = "KADMIT_H2_MAX_OPEN_STREAMS", default_value_t = server::Connections::default().max_open_streams,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_048_576))]
    pub h2_max_open_streams: usize,

    /// Seconds between SIGTERM and closing the HTTPS listener: /readyz
    /// answers 503 at once, but new connections are still served, because
    /// kube-proxy and load balancers go on sending them to a terminating pod
    /// for a few seconds. SIGINT skips it.
    #[arg(long, env = "KADMIT_SHUTDOWN_DELAY_SECS", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(..=MAX_SHUTDOWN_SECS))]
    pub shutdown_delay_secs: u64,

    /// Seconds given to the reviews already read once the HTTPS listener is
    /// closed; the process exits as soon as they are answered, and at the
    /// latest after this, closing whatever is still open (exit status 2).
    #[arg(long, env = "KADMIT_SHUTDOWN_TIMEOUT_SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(..=MAX_SHUTDOWN_SECS))]
    pub shutdown_timeout_secs: u64,

    /// Worker threads of the HTTPS listener [default: one per CPU].
    #[arg(long, env = "KADMIT_WORKERS")]
    pub workers: Option<NonZeroUsize>,

    /// Watch the rules directory and reload when it changes (a ConfigMap
    /// update, an edit). SIGHUP reloads in any case.
    #[arg(long, env = "KADMIT_WATCH", default_value_t = true, action = clap::ArgAction::Set)]
    pub watch: bool,

    /// Quiet time after the last file event before reloading, so a burst of
    /// events gives one rebuild. Changed files are then read a second time
    /// this long after the first, and served only when both reads agree, so
    /// a file written in pieces is not served half-written. 10 to 5,000:
    /// the first load waits for it too, before any listener opens.
    #[arg(long, env = "KADMIT_WATCH_DEBOUNCE_MS", default_value_t = 200,
          value_parser = clap::value_parser!(u64).range(10..=5_000))]
    pub watch_debounce_ms: u64,

    /// Re-read the rules this often even without events (a backstop for
    /// missed events; unchanged files are not rebuilt). 0 turns it off.
    #[arg(long, env = "KADMIT_RELOAD_INTERVAL_SECS", default_value_t = 60)]
    pub reload_interval_secs: u64,

    /// Denials kept in memory for /api/denials and the dashboard (rule,
    /// object, user, message); 0 keeps none.
    #[arg(long, env = "KADMIT_DENIALS_CAPACITY", default_value_t = crate::dashboard::denials::DEFAULT_CAPACITY)]
    pub denials_capacity: usize,

    /// Bytes the denials kept for /api/denials may take in all, each
    /// character counted as its JSON writes it; the oldest are dropped to
    /// stay within it. Every field of an entry is cut to a fixed length, so
    /// an entry takes at most about 16 KiB (a few hundred bytes for real
    /// names; control characters take six bytes each as JSON).
    #[arg(long, env = "KADMIT_DENIALS_MAX_BYTES", default_value_t = crate::dashboard::denials::DEFAULT_MAX_BYTES)]
    pub denials_max_bytes: usize,

    /// Check every JSON Patch against the mutated object before answering
    /// (about 4 µs per patched review; property tests check the same).
    #[arg(long, env = "KADMIT_VERIFY_PATCHES", default_value_t = false, action = clap::ArgAction::Set)]
    pub verify_patches: bool,

    /// Evaluation steps one review may take (values selected by paths,
    /// forEach elements visited, rules run per mutation pass); a review that
    /// needs more is denied with a message naming this limit.
    #[arg(long, env = "KADMIT_MAX_EVALUATION_STEPS", default_value_t = crate::eval::budget::DEFAULT_MAX_STEPS)]
    pub max_evaluation_steps: u64,

    /// Record every answered review, with its response, as JSON lines in
    /// this directory, for `kadmit replay` (Secret values and managedFields
    /// dropped; see docs/testing-rules.md). Created readable by kadmit's
    /// user only; an existing directory keeps its permissions (a warning
    /// says when others may enter it). Off by default.
    #[arg(long, env = "KADMIT_RECORD")]
    pub record: Option<PathBuf>,

    /// Bytes the --record directory may hold; the oldest of its four files
    /// is dropped to stay within it.
    #[arg(long, env = "KADMIT_RECORD_MAX_BYTES", default_value_t = 256 << 20,
          value_parser = clap::value_parser!(u64).range(4096..=1 << 40))]
    pub record_max_bytes: u64,

    /// Bytes (of JSON text) the mutating rules may add to one object; a
    /// review whose mutations would add more is denied.
    #[arg(long, env = "KADMIT_MAX_MUTATION_BYTES", default_value_t = crate::eval::budget::DEFAULT_MAX_ADDED_BYTES)]
    pub max_mutation_bytes: usize,

    /// Answered reviews kept in memory (redacted like --record) to compare
    /// each new rule version with the one serving before it is swapped in;
    /// when full, the oldest of the endpoint, operation and resource
    /// holding the most is dropped, so no one resource crowds out the
    /// others. 0 turns shadowing off.
    #[arg(long, env = "KADMIT_SHADOW_REVIEWS", default_value_t = shadow::DEFAULT_REVIEWS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=shadow::MAX_REVIEWS as u64))]
    pub shadow_reviews: usize,

    /// Bytes the reviews kept for shadowing may take in all; the oldest are
    /// dropped to stay within it.
    #[arg(long, env = "KADMIT_SHADOW_MAX_BYTES", default_value_t = shadow::DEFAULT_MAX_BYTES,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=shadow::MAX_MAX_BYTES as u64))]
    pub shadow_max_bytes: usize,

    /// Answered reviews offered to the shadow ring per second, at most: under
    /// heavier traffic it keeps a sample, and redacting costs a bounded
    /// share of a CPU.
    #[arg(long, env = "KADMIT_SHADOW_REVIEWS_PER_SECOND", default_value_t = shadow::DEFAULT_PER_SECOND,
          value_parser = clap::value_parser!(u64).range(1..=shadow::MAX_PER_SECOND))]
    pub shadow_reviews_per_second: u64,

    /// Keep the rules serving when a new version would deny more than this
    /// many of the kept reviews that were admitted; reported like a rule
    /// error until the files change again, or SIGHUP loads them anyway.
    /// Off by default.
    #[arg(long, env = "KADMIT_RELOAD_MAX_NEW_DENIALS")]
    pub reload_max_new_denials: Option<u64>,
}

/// Runs the server until a shutdown signal.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let prometheus = metrics::install().context("cannot install the metrics recorder")?;
    let history = Arc::new(History::default());
    let upkeep = prometheus.clone();
    let sampled = history.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".to_owned())
        .spawn(move || {
            // The dashboard's charts start from this all-zero snapshot.
            sampled.offer(Snapshot::from_exposition(
                &upkeep.render(),
                SystemTime::now(),
            ));
            loop {
                std::thread::sleep(METRICS_UPKEEP);
                upkeep.run_upkeep();
                // Kept only when a sample interval has passed.
                sampled.offer(Snapshot::from_exposition(
                    &upkeep.render(),
                    SystemTime::now(),
                ));
            }
        })
        .context("cannot start the metrics upkeep thread")?;

    let store = Arc::new(Store::new());
    let debounce = Duration::from_millis(args.watch_debounce_ms);
    let eval_options = crate::eval::EvalOptions {
        verify_patches: args.verify_patches,
        limits: crate::eval::budget::Limits {
            max_steps: args.max_evaluation_steps,
            max_added_bytes: args.max_mutation_bytes,
        },
        answer: true,
    };
    let recent = Arc::new(
        RecentReviews::start(
            args.shadow_reviews,
            args.shadow_max_bytes,
            args.shadow_reviews_per_second,
        )
        .context("cannot start the shadow thread")?,
    );
    anyhow::ensure!(
        args.reload_max_new_denials.is_none() || args.shadow_reviews > 0,
        "--reload-max-new-denials needs --shadow-reviews above 0: it counts the kept reviews \
         a new rule version would deny"
    );
    if args.max_buffered_body_bytes / 2 < args.max_body_bytes {
        tracing::warn!(
            max_body_bytes = args.max_body_bytes,
            max_buffered_body_bytes = args.max_buffered_body_bytes,
            "--max-buffered-body-bytes is under twice --max-body-bytes: a body is read into a \
             buffer that doubles as it grows, so the largest bodies allowed could never be read \
             and would get 503 at every retry; give --max-buffered-body-bytes at least twice \
             --max-body-bytes"
        );
    }
    if args.reload_max_new_denials.is_some() && args.client_ca.is_none() {
        tracing::warn!(
            "--reload-max-new-denials judges new rules by the reviews kept, and without \
             --client-ca any client that reaches the webhook port can send them: one could \
             fill them with reviews a stricter rule would deny and hold it back (the held-back \
             reload is reported, and SIGHUP loads it anyway); give --client-ca the API \
             server's client CA to keep only its reviews"
        );
    }
    let reloader = Arc::new(
        Reloader::new(args.rules.clone(), store.clone())
            .with_settle(debounce)
            .with_shadowing(reload::Shadowing {
                recent: recent.clone(),
                max_new_denials: args.reload_max_new_denials,
                options: eval_options,
            }),
    );
    // On failure the server still starts, not ready (503 on /readyz and on
    // reviews), with every problem logged: the pod stays alive and visible
    // instead of crash-looping.
    reloader.reload(Trigger::Startup);
    // From here on only the reload loop reloads; the watcher, SIGHUP and the
    // timer ask it to.
    let reloads = reload::spawn_loop(reloader.clone()).context("cannot start the reload loop")?;
    let _watch = if args.watch {
        let on_change = reloads.clone();
        let handle = watcher::spawn(args.rules.clone(), debounce, move || {
            on_change.request(Trigger::Watch);
        })
        .with_context(|| format!("cannot watch {}", args.rules.display()))?;
        Some(handle)
    } else {
        None
    };
    if args.reload_interval_secs > 0 {
        let periodic = reloads.clone();
        let every = Duration::from_secs(args.reload_interval_secs);
        std::thread::Builder::new()
            .name("kadmit-reload-interval".to_owned())
            .spawn(move || {
                loop {
                    std::thread::sleep(every);
                    periodic.request(Trigger::Interval);
                }
            })
            .context("cannot start the periodic reload thread")?;
    }

    let (certs, self_signed): (Arc<dyn rustls::server::ResolvesServerCert>, _) =
        match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => (Arc::new(tls::FileCert::load(cert, key)?), None),
            _ => {
                let generated = selfsigned::generate()?;
                let dir = args
                    .self_signed_dir
                    .clone()
                    .unwrap_or_else(selfsigned::default_dir);
                let written = selfsigned::write(&generated, &dir)?;
                (
                    Arc::new(tls::FixedCert::new(generated.server)),
                    Some(written),
                )
            }
        };
    let clients = args
        .client_ca
        .as_deref()
        .map(|path| client_ca::verifier(path, true))
        .transpose()?;
    let tls_config = tls::server_config(certs.clone(), clients)?;
    let ops = ops_listener(&args, certs)?;

    let config = server::Config {
        tls_listen: args.listen,
        plain_listen: args.plain_listen,
        workers: args.workers.map(NonZeroUsize::get),
        shutdown_delay: Duration::from_secs(args.shutdown_delay_secs),
        shutdown_timeout: Duration::from_secs(args.shutdown_timeout_secs),
        connections: server::Connections {
            max_connections: args.max_connections,
            max_handshakes: args.max_tls_handshakes,
            handshake_timeout: Duration::from_millis(args.tls_handshake_timeout_ms),
            max_concurrent_streams: args.h2_max_concurrent_streams,
            max_open_streams: args.h2_max_open_streams,
        },
        ops,
    };
    let limits = Limits {
        max_body_bytes: args.max_body_bytes,
        request_timeout: Duration::from_secs(args.request_timeout_secs),
    };
    let mut state = server::State::new(store, limits, Some(prometheus))
        .with_reloader(reloader.clone())
        .with_eval_options(eval_options)
        .with_recent_reviews(recent)
        .with_denials_limits(args.denials_capacity, args.denials_max_bytes)
        .with_body_budget(args.max_buffered_body_bytes)
        .with_history(history);
    if let Some(dir) = &args.record {
        let recorder = server::record::Recorder::start(dir, args.record_max_bytes)
            .with_context(|| format!("cannot record reviews in {}", dir.display()))?;
        tracing::info!(
            dir = %dir.display(),
            max_bytes = args.record_max_bytes,
            "Recording answered reviews"
        );
        state = state.with_recorder(recorder);
    }
    let state = actix_web::web::Data::new(state);

    actix_web::rt::System::new().block_on(async move {
        reload_on_sighup(reloads);
        let bound = server::bind(&config, tls_config, state)?;
        announce(&bound, self_signed.as_ref(), args.client_ca.is_some());
        bound.run().await?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The operations listener's TLS and access control from the `--ops-*`
/// flags. A token file that cannot be used is an error here, at startup.
fn ops_listener(
    args: &Args,
    certs: Arc<dyn rustls::server::ResolvesServerCert>,
) -> anyhow::Result<server::OpsListener> {
    if !args.ops_tls {
        // clap's `requires` sees `--ops-tls=false` as given: refuse here too,
        // so a credential flag never quietly leaves the port open.
        anyhow::ensure!(
            args.ops_token_file.is_none() && args.ops_client_ca.is_none(),
            "--ops-token-file and --ops-client-ca need --ops-tls: a token sent in clear \
             text protects nothing"
        );
        return Ok(server::OpsListener {
            max_connections: args.ops_max_connections,
            ..server::OpsListener::default()
        });
    }
    let clients = args
        .ops_client_ca
        .as_deref()
        .map(|path| client_ca::verifier(path, false))
        .transpose()?;
    let tls = tls::server_config(certs, clients)?;
    let token = args
        .ops_token_file
        .as_ref()
        .map(server::access::TokenFile::load)
        .transpose()?;
    Ok(server::OpsListener {
        max_connections: args.ops_max_connections,
        tls: Some(tls),
        access: Arc::new(server::access::OpsAccess::new(
            token,
            args.ops_client_ca.is_some(),
        )),
    })
}

/// Makes SIGHUP ask the reload loop for a forced rebuild.
///
/// The handler is registered here, before the listening line is printed,
/// not inside the task: a spawned task first runs once the server is
/// awaited, after that line, and a SIGHUP arriving in between would end the
/// process (its default action) instead of reloading.
fn reload_on_sighup(reloads: Reloads) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = match signal(SignalKind::hangup()) {
            Ok(hangups) => hangups,
            Err(error) => {
                tracing::warn!(%error, "Cannot listen for SIGHUP; reloads come from the watcher only");
                return;
            }
        };
        actix_web::rt::spawn(async move {
            while hangups.recv().await.is_some() {
                reloads.request(Trigger::Signal);
            }
        });
    }
    #[cfg(not(unix))]
    let _ = reloads;
}

/// Prints the parseable lines (the self-signed CA, a curl line, the
/// addresses) to stdout and logs the addresses.
///
/// The stdout lines are informational: when stdout is closed or unwritable,
/// that is logged and the server serves anyway, since the log line carries
/// the addresses too.
fn announce(bound: &server::Bound, self_signed: Option<&selfsigned::Written>, client_ca: bool) {
    let mut out = Output::stdout();
    let printed = print_announcement(&mut out, bound, self_signed, client_ca);
    tracing::info!(
        tls = %bound.tls_addr(),
        plain = %bound.plain_addr(),
        ops_tls = bound.plain_tls(),
        "Listening"
    );
    if let Err(error) = printed {
        tracing::warn!(%error, "Cannot print the listening lines to stdout; serving anyway");
    } else if out.is_closed() {
        tracing::warn!("Stdout is closed; the listening lines are only in this log");
    }
}

fn print_announcement(
    out: &mut impl Write,
    bound: &server::Bound,
    self_signed: Option<&selfsigned::Written>,
    client_ca: bool,
) -> std::io::Result<()> {
    if let Some(written) = self_signed {
        writeln!(
            out,
            "self-signed ca={} (development certificate for {})",
            written.ca.display(),
            selfsigned::SERVER_NAMES.join(", ")
        )?;
        if !client_ca {
            writeln!(
                out,
                "try: {}",
                selfsigned::curl_line(&written.ca, bound.tls_addr(), &written.review)
            )?;
        }
    }
    // `plain=` names a plain-HTTP operations listener, `ops_tls=` an HTTPS
    // one, so that a script reading the line cannot take one for the other.
    let ops_key = if bound.plain_tls() {
        "ops_tls"
    } else {
        "plain"
    };
    writeln!(
        out,
        "listening tls={} {ops_key}={}",
        bound.tls_addr(),
        bound.plain_addr()
    )?;
    out.flush()
}
