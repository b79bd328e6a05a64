//! Reload figures (docs/reload.md), driven by `scripts/reload-bench.sh`.
//!
//! ```text
//! reload_bench generate DIR
//!     1,000 synthetic rules (10 files of 100, over 200 custom resources and
//!     pods) written into DIR as a kubelet ConfigMap volume.
//! reload_bench latency DIR PLAIN_ADDR SWAPS
//!     SWAPS kubelet swaps of DIR between two versions of those rules; for
//!     each, the time from just before the swap until GET /status on
//!     PLAIN_ADDR shows a new generation. Prints every time, then p50/max.
//! reload_bench swap-loop DIR PLAIN_ADDR EVERY_MS SECONDS
//!     A kubelet swap every EVERY_MS for SECONDS (at most 60 s and 1,000
//!     swaps), then how many new generations were served meanwhile.
//! ```
//!
//! Swaps use the kubelet's atomic writer from the tests
//! (`tests/reload/kubelet.rs`): a new timestamped directory, `..data`
//! renamed over, the old directory removed.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "../tests/reload/kubelet.rs"]
mod kubelet;
#[path = "../benches/support/synthetic.rs"]
mod synthetic;

use kubelet::AtomicWriter;

/// Synthetic rules in all.
const RULES: usize = 1_000;
/// Longest wait for one swap to be served.
const SWAP_DEADLINE: Duration = Duration::from_secs(10);

/// The rule files of `version`: (name, text). The versions differ only in
/// their messages, so both cost the same to compile and to evaluate.
fn files(version: usize) -> Vec<(String, String)> {
    (0..RULES.div_ceil(synthetic::RULES_PER_SET))
        .map(|set| {
            let text = synthetic::rule_set(set, RULES, &format!("v{version}: "));
            (format!("synthetic-{set:02}.yaml"), text)
        })
        .collect()
}

fn write(writer: &AtomicWriter, version: usize) -> Result<(), String> {
    let files = files(version);
    let payload: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(name, text)| (name.as_str(), text.as_bytes()))
        .collect();
    match writer.write(&payload) {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("version {version} is already there")),
        Err(error) => Err(format!("kubelet write: {error}")),
    }
}

/// The version the volume holds now (0 or 1), from a file's messages.
fn current_version(dir: &Path) -> Result<usize, String> {
    let text = std::fs::read_to_string(dir.join("synthetic-00.yaml"))
        .map_err(|error| format!("read {}: {error}", dir.display()))?;
    Ok(usize::from(text.contains("'v1: ")))
}

struct Status {
    client: reqwest::blocking::Client,
    url: String,
}

impl Status {
    fn new(plain: &str) -> Result<Self, String> {
        // Even a plain-HTTP reqwest client builds a rustls configuration.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::blocking::Client::builder()
            .timeout(SWAP_DEADLINE)
            .build()
            .map_err(|error| format!("client: {error}"))?;
        Ok(Status {
            client,
            url: format!("http://{plain}/status"),
        })
    }

    fn generation(&self) -> Result<u64, String> {
        let status: serde_json::Value = self
            .client
            .get(&self.url)
            .send()
            .and_then(reqwest::blocking::Response::json)
            .map_err(|error| format!("GET {}: {error}", self.url))?;
        status["generation"]
            .as_u64()
            .ok_or_else(|| format!("no generation in {status}"))
    }

    /// Polls until the generation exceeds `generation`; the new one.
    fn wait_past(&self, generation: u64, started: Instant) -> Result<u64, String> {
        loop {
            let now = self.generation()?;
            if now > generation {
                return Ok(now);
            }
            if started.elapsed() > SWAP_DEADLINE {
                return Err(format!("generation {generation} still serves"));
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

fn ms(duration: Duration) -> String {
    format!("{:.1}", duration.as_secs_f64() * 1000.0)
}

fn latency(dir: &str, plain: &str, swaps: usize) -> Result<String, String> {
    let writer = AtomicWriter::new(dir).map_err(|error| error.to_string())?;
    let status = Status::new(plain)?;
    let mut version = current_version(Path::new(dir))?;
    let mut times = Vec::with_capacity(swaps);
    let mut out = String::new();
    for swap in 1..=swaps {
        version = 1 - version;
        let generation = status.generation()?;
        let started = Instant::now();
        write(&writer, version)?;
        let written = started.elapsed();
        let now = status.wait_past(generation, started)?;
        let served = started.elapsed();
        times.push(served);
        let _ = writeln!(
            out,
            "swap {swap:2}: written in {} ms, generation {generation} -> {now} served after {} ms",
            ms(written),
            ms(served)
        );
        // Let the watcher go quiet before the next swap.
        std::thread::sleep(Duration::from_millis(300));
    }
    times.sort();
    let _ = writeln!(
        out,
        "{swaps} swaps of {RULES} rules: change to served p50 {} ms, max {} ms (min {} ms)",
        ms(times[times.len() / 2]),
        ms(times[times.len() - 1]),
        ms(times[0])
    );
    Ok(out)
}

fn swap_loop(dir: &str, plain: &str, every_ms: u64, seconds: u64) -> Result<String, String> {
    let seconds = seconds.min(60);
    let every = Duration::from_millis(every_ms.max(1));
    let writer = AtomicWriter::new(dir).map_err(|error| error.to_string())?;
    let status = Status::new(plain)?;
    let mut version = current_version(Path::new(dir))?;
    let first = status.generation()?;
    let started = Instant::now();
    let mut swaps = 0;
    while started.elapsed() < Duration::from_secs(seconds) && swaps < 1_000 {
        let next = started + every * (swaps + 1);
        version = 1 - version;
        write(&writer, version)?;
        swaps += 1;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    let elapsed = started.elapsed();
    // The last swap is served too before counting.
    let last = status.wait_past(first, Instant::now())?;
    Ok(format!(
        "{swaps} swaps in {:.1} s (one per {} ms); generations {first} -> {last}: {} new plans served",
        elapsed.as_secs_f64(),
        every_ms,
        last - first
    ))
}

fn run(args: &[String]) -> Result<String, String> {
    let parse = |text: &String| {
        text.parse::<u64>()
            .map_err(|error| format!("{text}: {error}"))
    };
    match args {
        [mode, dir] if mode == "generate" => {
            std::fs::create_dir_all(dir).map_err(|error| format!("mkdir {dir}: {error}"))?;
            let writer = AtomicWriter::new(dir).map_err(|error| error.to_string())?;
            write(&writer, 0)?;
            Ok(format!("{RULES} rules in {dir}"))
        }
        [mode, dir, plain, swaps] if mode == "latency" => {
            let swaps = usize::try_from(parse(swaps)?.clamp(1, 200)).unwrap_or(20);
            latency(dir, plain, swaps)
        }
        [mode, dir, plain, every_ms, seconds] if mode == "swap-loop" => {
            swap_loop(dir, plain, parse(every_ms)?, parse(seconds)?)
        }
        _ => Err(
            "usage: reload_bench generate DIR | latency DIR PLAIN_ADDR SWAPS | \
                  swap-loop DIR PLAIN_ADDR EVERY_MS SECONDS"
                .to_owned(),
        ),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(out) => {
            println!("{}", out.trim_end());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("reload_bench: {error}");
            ExitCode::FAILURE
        }
    }
}
