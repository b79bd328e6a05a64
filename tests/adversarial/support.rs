//! What the adversarial tests share: hostile rule files, running
//! `kadmit check` with its peak memory, and reading a server's.

use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::server::harness::{DEADLINE, Kadmit, fixture, post_json, roots_from_pem};

/// Peak memory any kadmit process may reach on these files: generous (an
/// idle debug-build server stays near 20 MB), and far below the hundreds of
/// megabytes the files below took before they were bounded.
pub const PEAK_RSS_LIMIT_KIB: u64 = 100 * 1024;

/// The header of a rule set named `name`, up to `spec.rules:`.
fn header(name: &str) -> String {
    format!(
        "apiVersion: kadmit.dev/v1alpha1\nkind: RuleSet\nmetadata:\n  name: {name}\nspec:\n  rules:\n"
    )
}

/// One anchored list of 1,000 scalars referenced 2,700 times from a rule:
/// 15 KB that expanded to 2.7 million nodes (285 MB in `kadmit check`).
pub fn one_anchor_many_aliases() -> String {
    let list = vec!["lol"; 1000].join(",");
    let refs = vec!["*a"; 2700].join(", ");
    format!(
        "{}    - name: x\n      match: {{resources: [pods]}}\n      x-shared: &a [{list}]\n      deny:\n        - message: [{refs}]\n",
        header("laughs")
    )
}

/// A rule file whose `match` is nested 100,000 flow sequences deep (200 KB):
/// the deserializer's parser takes minutes over it.
pub fn deep_flow_nesting() -> String {
    format!(
        "{}    - name: x\n      match: {}{}\n",
        header("deep"),
        "[".repeat(100_000),
        "]".repeat(100_000)
    )
}

/// A 1 MiB rule file whose one rule denies values in a flow list of half
/// a million zeros on a line of its own: the YAML parser held every token
/// of it (260 MB in `kadmit check`) before reporting anything.
pub fn long_flow_list() -> String {
    let head = format!(
        "{}    - name: x\n      match: {{resources: [pods]}}\n      deny:\n        - path: $.object.a\n          message: m\n          in:\n            [",
        header("long")
    );
    let items = (1 << 20) / 2 - head.len();
    let mut text = head;
    text.push_str(&vec!["0"; items].join(","));
    text.push_str("]\n");
    text
}

/// What a finished `kadmit check` gave.
pub struct Checked {
    /// Its exit code.
    pub code: Option<i32>,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
    /// Its peak resident memory, in KiB.
    pub peak_rss_kib: u64,
}

impl Checked {
    /// Asserts that `check` found problems (exit 1), printed `needle`, and
    /// stayed under [`PEAK_RSS_LIMIT_KIB`].
    pub fn assert_rejected_within_memory(&self, needle: &str) {
        assert_eq!(self.code, Some(1), "{}{}", self.stdout, self.stderr);
        assert!(self.stdout.contains(needle), "{}", self.stdout);
        assert!(
            self.peak_rss_kib < PEAK_RSS_LIMIT_KIB,
            "kadmit check peaked at {} KiB",
            self.peak_rss_kib
        );
    }
}

/// Runs `kadmit check dir` and measures its peak memory exactly: the child
/// is reaped with `wait4`, whose resource usage is that child's alone
/// (other tests' processes do not count). Killed at the deadline.
pub fn check(dir: &Path) -> Checked {
    measured(&["check".as_ref(), dir.as_os_str()], None, DEADLINE)
}

/// Runs `kadmit ARGS` (standard input from `stdin`, if given) and measures
/// its peak memory the same way as [`check`]. Killed after `deadline`.
// The child is reaped by `wait4`, which the lint does not know.
#[allow(clippy::zombie_processes)]
pub fn measured(args: &[&std::ffi::OsStr], stdin: Option<&Path>, deadline: Duration) -> Checked {
    let input = match stdin {
        Some(path) => Stdio::from(std::fs::File::open(path).expect("open the input")),
        None => Stdio::null(),
    };
    let what = args
        .iter()
        .map(|arg| arg.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kadmit"))
        .args(args)
        .stdin(input)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kadmit check");
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped stderr")));
    let pid = libc::pid_t::try_from(child.id()).expect("pid fits");
    // The child's `ru_maxrss` starts from this process's peak at the fork
    // (Linux counts the pre-exec memory, which is ours), so it only tells
    // the child's own peak when it is above ours. Below that, the peak is
    // taken from the child's own `VmHWM`, read while it runs.
    let parent_peak_kib = memory(std::process::id()).peak / 1024;
    let mut polled_peak_kib = 0;
    let limit = deadline;
    let deadline = Instant::now() + limit;
    let (status, usage) = loop {
        if let Some(peak) = own_peak_kib(child.id()) {
            polled_peak_kib = polled_peak_kib.max(peak);
        }
        let mut status: libc::c_int = 0;
        // SAFETY: an all-zero `rusage` is a valid value of this plain C
        // struct, and both pointers are to live locals for the call.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(reaped >= 0, "wait4: {}", std::io::Error::last_os_error());
        if reaped == pid {
            break (status, usage);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("kadmit {what} did not finish within {limit:?}");
        }
        thread::sleep(Duration::from_millis(2));
    };
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    // Linux reports kilobytes.
    let reported_kib = u64::try_from(usage.ru_maxrss).unwrap_or(u64::MAX);
    Checked {
        code,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
        peak_rss_kib: if reported_kib > parent_peak_kib {
            reported_kib
        } else {
            polled_peak_kib
        },
    }
}

/// `VmHWM` of a running process in KiB; `None` once it has exited.
fn own_peak_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// What `/proc/<pid>/status` says about a process's memory, in bytes.
pub struct Memory {
    /// Resident set size now (`VmRSS`).
    pub rss: u64,
    /// The largest resident set size so far (`VmHWM`).
    pub peak: u64,
}

/// The memory of process `pid`.
pub fn memory(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|error| panic!("/proc/{pid}/status: {error}"));
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    Memory {
        rss: field("VmRSS:"),
        peak: field("VmHWM:"),
    }
}

/// CPU time (user + system) process `pid` has used, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|error| panic!("/proc/{pid}/stat: {error}"));
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    let clock_ticks_per_second = 100.0;
    (ticks(11) + ticks(12)) as f64 / clock_ticks_per_second
}

/// Mebibytes, for messages.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// Fails the test once `deadline` has passed; for loops bounded in time.
pub fn before(deadline: Instant, what: &str) {
    assert!(Instant::now() < deadline, "{what} took longer than allowed");
}

/// The shipped Deployment's memory limit (docker/k8s/base/deployment.yaml).
pub const SHIPPED_MEMORY_LIMIT: u64 = 256 << 20;
/// `--max-buffered-body-bytes` by default.
pub const DEFAULT_BODY_BUDGET: u64 = 32 << 20;

/// Checks that a flood sent enough to matter (twice the default body
/// budget) and kept the server under the shipped memory limit.
pub fn assert_flood_held(flood: &str, pushed: u64, peak: u64) {
    assert!(
        pushed > 2 * DEFAULT_BODY_BUDGET,
        "the {flood} pushed only {:.1} MiB, twice the body budget is needed",
        mib(pushed)
    );
    assert!(
        peak < SHIPPED_MEMORY_LIMIT,
        "the {flood} took the server to {:.1} MiB",
        mib(peak)
    );
}

/// The longest a review may wait for its answer beside a flood, and the
/// slack allowed past a timeout: far above an answer's time on an idle
/// server (about a millisecond), far below the API server's default
/// webhook timeout (10 s).
pub const PROMPT: Duration = Duration::from_secs(2);

/// Checks that a review sent on a new connection is answered, within
/// [`PROMPT`].
pub fn assert_answered_promptly(kadmit: &Kadmit) {
    let started = Instant::now();
    let (status, _, answer) = post_json(
        &kadmit.client(),
        &kadmit.url("/validate"),
        fixture("create-pod.json"),
    );
    assert_eq!(status, 200, "{answer}");
    assert!(
        started.elapsed() < PROMPT,
        "answered after {:?}",
        started.elapsed()
    );
}

/// Checks that `what`, ended after `took`, ended at `timeout`: not before
/// it, and within [`PROMPT`] after it.
pub fn assert_ended_at_timeout(what: &str, took: Duration, timeout: Duration) {
    assert!(
        took >= timeout && took < timeout + PROMPT,
        "{what} ended after {took:?}, its timeout is {timeout:?}"
    );
}

/// Time allowed for a whole test's traffic.
pub const TRAFFIC_DEADLINE: Duration = Duration::from_secs(120);

/// An async TLS connection to the server trusting its generated CA and
/// offering `alpn`, handshake completed.
pub async fn tls_connect(
    kadmit: &Kadmit,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let tcp = tokio::net::TcpStream::connect(kadmit.tls_addr())
        .await
        .expect("connect");
    tls_connect_over(kadmit, alpn, tcp).await
}

/// [`tls_connect`] over `tcp`, a connection to the server's TLS address.
pub async fn tls_connect_over(
    kadmit: &Kadmit,
    alpn: &[u8],
    tcp: tokio::net::TcpStream,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots_from_pem(kadmit.ca_pem()))
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let name = rustls::pki_types::ServerName::IpAddress(kadmit.tls_addr().ip().into());
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("TLS handshake")
}

/// A single-threaded runtime for one test's clients.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Resident memory of the server process now.
pub fn rss_bytes(kadmit: &Kadmit) -> u64 {
    memory(kadmit.pid()).rss
}

/// Every container's image compared with every container's: the work of a
/// review is the square of its containers.
pub const QUADRATIC_RULES: &str = "apiVersion: kadmit.dev/v1alpha1
kind: RuleSet
metadata:
  name: quadratic
spec:
  rules:
    - name: every-container-against-every-container
      match: {resources: [pods]}
      deny:
        - forEach: \"$.podSpec.containers[*]\"
          deny:
            - path: \"$$.podSpec.containers[*].image\"
              equals: forbidden
              message: no
";

/// The real Pod CREATE with `n` minimal containers.
pub fn pod_with_containers(n: usize) -> Vec<u8> {
    let mut review: serde_json::Value =
        serde_json::from_slice(&crate::server::harness::fixture("create-pod.json"))
            .expect("fixture");
    review["request"]["object"]["spec"]["containers"] = (0..n)
        .map(|i| serde_json::json!({"name": format!("c{i}"), "image": "registry.example/app:1"}))
        .collect();
    serde_json::to_vec(&review).expect("serialize")
}

/// Posts `body` to `/validate` and checks that the review is denied at the
/// step budget (413, naming the flag, counted once) within generous CPU
/// time, not stalled.
pub fn assert_validate_denied_over_budget(
    kadmit: &crate::server::harness::Kadmit,
    client: &reqwest::blocking::Client,
    body: Vec<u8>,
) {
    let cpu_before = cpu_seconds(kadmit.pid());
    let (status, _, response) =
        crate::server::harness::post_json(client, &kadmit.url("/validate"), body);
    let cpu = cpu_seconds(kadmit.pid()) - cpu_before;
    assert_eq!(status, 200, "{response}");
    let answer = &response["response"];
    assert_eq!(answer["allowed"], false, "{response}");
    assert_eq!(answer["status"]["code"], 413, "{response}");
    let message = answer["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("--max-evaluation-steps"), "{message}");
    assert_eq!(
        answer["auditAnnotations"]["evaluation-limit"], "evaluation_steps",
        "{response}"
    );
    // Generous: a debug build on a loaded machine takes a few seconds.
    assert!(cpu < 30.0, "the review took {cpu:.1} s of server CPU");
    assert_eq!(
        kadmit.metric("kadmit_reviews_over_budget_total{limit=\"evaluation_steps\"}"),
        1.0
    );
}
