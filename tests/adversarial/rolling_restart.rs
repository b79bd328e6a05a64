//! A rolling restart behind a real TCP load balancer loses no review (issue
//! 11, item 9): two kadmit instances behind HAProxy (Debian's, started here,
//! health-checking `/readyz` as a Service's endpoints follow readiness), with
//! continuous HTTP/2 and HTTP/1.1 review traffic over keep-alive connections;
//! each instance is sent SIGTERM, waited for and started again on its
//! addresses, one after the other.
//!
//! HAProxy does not retry a failed connection here (`retries 0`), so a
//! refused or reset connection would be a failed review, as it would be for
//! the API server behind kube-proxy.

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::observe::{free_port, tool, wait_until};
use crate::server::harness::{Alpn, Kadmit, TestCa, bundled_rules, client, fixture};

/// The drain delay the instances run with: longer than HAProxy needs to see
/// `/readyz` fail (one check every 100 ms).
const DRAIN_SECS: u64 = 2;
/// Deadline of each wait on HAProxy or on traffic.
const DEADLINE: Duration = Duration::from_secs(60);

/// HAProxy in TCP mode in front of `servers` (TLS address, plain address),
/// killed when dropped.
struct Haproxy {
    child: Child,
    port: u16,
    stats: PathBuf,
    dir: tempfile::TempDir,
}

impl Haproxy {
    fn start(binary: &Path, servers: &[(&str, SocketAddr, SocketAddr)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let stats = dir.path().join("stats.sock");
        let mut config = format!(
            "global\n  maxconn 512\n  stats socket {} mode 600 level admin\n\
             defaults\n  mode tcp\n  retries 0\n  timeout connect 2s\n  timeout client 60s\n  timeout server 60s\n\
             frontend webhook\n  bind 127.0.0.1:{port}\n  default_backend kadmit\n\
             backend kadmit\n  balance roundrobin\n  option httpchk\n\
             \x20 http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host localhost\n\
             \x20 http-check expect status 200\n  default-server inter 100ms fall 1 rise 1\n",
            stats.display()
        );
        for (name, tls, plain) in servers {
            config.push_str(&format!(
                "  server {name} {tls} check port {}\n",
                plain.port()
            ));
        }
        let config_path = dir.path().join("haproxy.cfg");
        std::fs::write(&config_path, config).expect("write the config");
        let log = std::fs::File::create(dir.path().join("haproxy.log")).expect("log file");
        let child = Command::new(binary)
            .arg("-db")
            .arg("-f")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("start haproxy");
        let haproxy = Haproxy {
            child,
            port,
            stats,
            dir,
        };
        for (name, _, _) in servers {
            haproxy.wait_up(name);
        }
        haproxy
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("haproxy.log")).unwrap_or_default()
    }

    /// The `status` HAProxy reports for server `name` (`UP`, `DOWN`, ...).
    fn status(&self, name: &str) -> Result<String, String> {
        let mut socket = UnixStream::connect(&self.stats)
            .map_err(|error| format!("stats socket: {error}; log: {}", self.log()))?;
        socket
            .write_all(b"show stat\n")
            .map_err(|error| error.to_string())?;
        let mut csv = String::new();
        socket
            .read_to_string(&mut csv)
            .map_err(|error| error.to_string())?;
        let mut lines = csv.lines();
        let header: Vec<&str> = lines
            .next()
            .and_then(|line| line.strip_prefix("# "))
            .ok_or_else(|| format!("no header in {csv:?}"))?
            .split(',')
            .collect();
        let column = |field: &str| header.iter().position(|name| *name == field);
        let (Some(proxy), Some(server), Some(status)) =
            (column("pxname"), column("svname"), column("status"))
        else {
            return Err(format!("unexpected header {header:?}"));
        };
        lines
            .map(|line| line.split(',').collect::<Vec<_>>())
            .find(|row| row.get(proxy) == Some(&"kadmit") && row.get(server) == Some(&name))
            .and_then(|row| row.get(status).map(|status| (*status).to_owned()))
            .ok_or_else(|| format!("no server {name} in {csv:?}"))
    }

    /// Waits until HAProxy sends connections to server `name` again.
    fn wait_up(&self, name: &str) {
        wait_until(
            &format!("HAProxy to mark {name} up"),
            DEADLINE,
            || match self.status(name)? {
                status if status == "UP" => Ok(()),
                status => Err(status),
            },
        );
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one client thread saw.
struct Tally {
    protocol: &'static str,
    answered: u64,
    failures: Vec<String>,
}

/// Review traffic through the load balancer until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    threads: Vec<JoinHandle<Tally>>,
}

impl Load {
    /// Two threads share one HTTP/2 connection (the API server's way); two
    /// more have an HTTP/1.1 keep-alive connection each.
    fn start(roots: &rustls::RootCertStore, port: u16) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let h2 = client(roots, None, Alpn::H2AndHttp1);
        let clients = [
            ("h2", h2.clone()),
            ("h2", h2),
            ("http/1.1", client(roots, None, Alpn::Http1)),
            ("http/1.1", client(roots, None, Alpn::Http1)),
        ];
        let threads = clients
            .into_iter()
            .enumerate()
            .map(|(index, (protocol, client))| {
                let stop = stop.clone();
                let answered = answered.clone();
                thread::spawn(move || {
                    let body = fixture("create-pod.json");
                    let uid =
                        serde_json::from_slice::<Value>(&body).expect("JSON")["request"]["uid"]
                            .as_str()
                            .expect("uid")
                            .to_owned();
                    let mut tally = Tally {
                        protocol,
                        answered: 0,
                        failures: Vec::new(),
                    };
                    let mut sent = index;
                    while !stop.load(Ordering::SeqCst) {
                        let endpoint = if sent % 2 == 0 { "validate" } else { "mutate" };
                        sent += 1;
                        let url = format!("https://127.0.0.1:{port}/{endpoint}?timeout=10s");
                        match review(&client, &url, &body, &uid) {
                            Ok(()) => {
                                tally.answered += 1;
                                answered.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(failure) => tally.failures.push(format!("{protocol} {failure}")),
                        }
                    }
                    tally
                })
            })
            .collect();
        Load {
            stop,
            answered,
            threads,
        }
    }

    /// Waits until `count` more reviews have been answered.
    fn wait_for_answers(&self, count: u64) {
        let target = self.answered.load(Ordering::SeqCst) + count;
        wait_until(&format!("{count} more answered reviews"), DEADLINE, || {
            let now = self.answered.load(Ordering::SeqCst);
            if now >= target {
                Ok(())
            } else {
                Err(format!("{now} of {target}"))
            }
        });
    }

    fn stop(self) -> Vec<Tally> {
        self.stop.store(true, Ordering::SeqCst);
        self.threads
            .into_iter()
            .map(|thread| thread.join().expect("client thread"))
            .collect()
    }
}

/// One review: an answer with HTTP 200 and this review's uid, or why not.
fn review(
    client: &reqwest::blocking::Client,
    url: &str,
    body: &[u8],
    uid: &str,
) -> Result<(), String> {
    let response = client
        .post(url)
        .header("Content-Type", "application/json")
        .body(body.to_vec())
        .send()
        .map_err(|error| format!("{url}: {error:?}"))?;
    let status = response.status();
    let text = response
        .text()
        .map_err(|error| format!("{url}: body: {error:?}"))?;
    let answer: Value =
        serde_json::from_str(&text).map_err(|error| format!("{url}: {error}: {text}"))?;
    if status != 200 || answer["response"]["uid"] != uid {
        return Err(format!("{url}: HTTP {status}: {text}"));
    }
    Ok(())
}

#[test]
fn a_rolling_restart_behind_a_load_balancer_fails_no_review() {
    let Some(haproxy_binary) = tool("/usr/sbin/haproxy", "haproxy") else {
        return;
    };
    let ca = TestCa::new("rolling restart CA");
    let (cert, key) = ca.server_cert();
    let tls_dir = tempfile::tempdir().expect("tempdir");
    let (cert_path, key_path) = (
        tls_dir.path().join("tls.crt"),
        tls_dir.path().join("tls.key"),
    );
    std::fs::write(&cert_path, cert).expect("write the certificate");
    std::fs::write(&key_path, key).expect("write the key");
    let start = |listen: Option<(SocketAddr, SocketAddr)>| {
        let builder = Kadmit::with_rules(&bundled_rules())
            .args(["--tls-cert".as_ref(), cert_path.as_os_str()])
            .args(["--tls-key".as_ref(), key_path.as_os_str()])
            .args(["--shutdown-delay-secs", &DRAIN_SECS.to_string()])
            .args(["--shutdown-timeout-secs", "20"]);
        match listen {
            Some((tls, plain)) => builder.listen(tls, plain),
            None => builder,
        }
        .start()
    };
    let mut instances = vec![("a", start(None)), ("b", start(None))];
    let servers: Vec<_> = instances
        .iter()
        .map(|(name, kadmit)| (*name, kadmit.tls_addr(), kadmit.plain_addr()))
        .collect();
    let haproxy = Haproxy::start(&haproxy_binary, &servers);

    let load = Load::start(&ca.roots(), haproxy.port);
    load.wait_for_answers(200);
    for index in 0..instances.len() {
        let (name, kadmit) = instances.remove(index);
        let addresses = (kadmit.tls_addr(), kadmit.plain_addr());
        let signalled = Instant::now();
        kadmit.signal("TERM");
        let status = kadmit.wait_exit();
        let took = signalled.elapsed();
        assert!(status.success(), "{name} exited with {status}");
        // The drain, then only the reviews in flight: no idle connection
        // holds the process until the timeout.
        assert!(
            took < Duration::from_secs(DRAIN_SECS + 5),
            "{name} took {took:?} to stop"
        );
        instances.insert(index, (name, start(Some(addresses))));
        haproxy.wait_up(name);
        load.wait_for_answers(200);
    }

    let tallies = load.stop();
    let failures: Vec<&String> = tallies.iter().flat_map(|tally| &tally.failures).collect();
    assert!(
        failures.is_empty(),
        "{} failed reviews, the first: {:#?}\nHAProxy log:\n{}",
        failures.len(),
        failures.iter().take(5).collect::<Vec<_>>(),
        haproxy.log()
    );
    for protocol in ["h2", "http/1.1"] {
        let answered: u64 = tallies
            .iter()
            .filter(|tally| tally.protocol == protocol)
            .map(|tally| tally.answered)
            .sum();
        assert!(answered > 0, "no {protocol} review was answered");
        eprintln!("{protocol}: {answered} reviews answered through two restarts, none failed");
    }
    for (name, kadmit) in &instances {
        kadmit.assert_no_panic();
        let (status, body) = kadmit.get_plain("/readyz");
        assert_eq!(status, 200, "{name}: {body}");
    }
}
