//! Running the real `kadmit serve` binary on ephemeral ports and talking to it
//! over TLS: process lifecycle, the parseable stdout lines, captured JSON
//! logs, certificates made with rcgen, and HTTPS clients.
//!
//! Nothing here sleeps to wait: the server's own `listening ...` line says
//! when it is bound, log lines are waited for on a condition variable, and
//! every wait has a deadline so a broken server fails the test instead of
//! hanging it.

use std::ffi::OsString;
use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, Once};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;

/// How long any single wait on the server may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// The real API-server fixtures, kept in the repository.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/admission-reviews")
}

/// Every fixture body, in file-name order, as `(file name, bytes as captured)`.
pub fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = fixtures_dir();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no fixtures in {}", dir.display());
    paths
        .into_iter()
        .map(|path| {
            let name = path
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default();
            let bytes = std::fs::read(&path).expect("read fixture");
            (name, bytes)
        })
        .collect()
}

/// One fixture's bytes.
pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixtures_dir().join(name)).unwrap_or_else(|error| panic!("{name}: {error}"))
}

/// The rules directory of the repository (what `serve` loads by default).
pub fn bundled_rules() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("rules")
}

/// A temporary rules directory holding `files` (name, contents).
pub fn rules_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, contents) in files {
        std::fs::write(dir.path().join(name), contents).expect("write rule file");
    }
    dir
}

/// Stderr of the server, one JSON object per line, as it arrives.
#[derive(Default)]
pub struct Logs {
    lines: Mutex<Vec<Value>>,
    changed: Condvar,
}

impl Logs {
    fn push(&self, line: &str) {
        // Non-JSON lines (a panic message) are kept as strings so that
        // assertions on them still see them.
        let value = serde_json::from_str(line).unwrap_or_else(|_| Value::String(line.to_owned()));
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(value);
        self.changed.notify_all();
    }

    /// Every line so far.
    pub fn snapshot(&self) -> Vec<Value> {
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Waits until at least `count` lines satisfy `matches`, and returns
    /// them; fails the test at the deadline.
    pub fn wait_for(&self, count: usize, matches: impl Fn(&Value) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + DEADLINE;
        let mut lines = self
            .lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            let found: Vec<Value> = lines.iter().filter(|l| matches(l)).cloned().collect();
            if found.len() >= count {
                return found;
            }
            let now = Instant::now();
            assert!(
                now < deadline,
                "timed out waiting for {count} matching log lines; have:\n{}",
                render(&lines)
            );
            lines = self
                .changed
                .wait_timeout(lines, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

fn render(lines: &[Value]) -> String {
    lines
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// A log line's `message`.
pub fn message(line: &Value) -> &str {
    line.get("message").and_then(Value::as_str).unwrap_or("")
}

/// Builds the command line of a server.
pub struct Builder {
    args: Vec<OsString>,
    self_signed: bool,
    listen: Option<(SocketAddr, SocketAddr)>,
    ops_token: Option<(tempfile::TempDir, String)>,
    /// A certificate issued by a test CA: its directory and the CA's PEM.
    certificate: Option<(tempfile::TempDir, String)>,
}

impl Builder {
    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        for arg in args {
            let arg = arg.into();
            if arg == "--tls-cert" {
                self.self_signed = false;
            }
            self.args.push(arg);
        }
        self
    }

    /// Protects the operations listener: `--ops-tls` with the server's
    /// certificate and `--ops-token-file` holding `token` (written with a
    /// trailing newline, as `echo` does). [`Kadmit::get_plain`] and
    /// [`Kadmit::ops_client`] then speak HTTPS and send the token.
    pub fn ops_token(mut self, token: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        std::fs::write(&path, format!("{token}\n")).expect("write the token file");
        self.args.push("--ops-tls".into());
        self.args.push("--ops-token-file".into());
        self.args.push(path.into_os_string());
        self.ops_token = Some((dir, token.to_owned()));
        self
    }

    /// Serves a certificate for 127.0.0.1 and localhost issued by `ca`
    /// instead of a self-signed one; [`Kadmit::ca_pem`] is then `ca`'s.
    pub fn certificate(mut self, ca: &TestCa) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = ca.server_cert();
        let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert_path, cert).expect("write the certificate");
        std::fs::write(&key_path, key).expect("write the key");
        self = self.args([
            OsString::from("--tls-cert"),
            cert_path.into_os_string(),
            OsString::from("--tls-key"),
            key_path.into_os_string(),
        ]);
        self.certificate = Some((dir, ca.pem.clone()));
        self
    }

    /// Listens on these addresses (TLS, plain) instead of free ports.
    pub fn listen(mut self, tls: SocketAddr, plain: SocketAddr) -> Self {
        self.listen = Some((tls, plain));
        self
    }

    /// Starts the server and waits until it is listening.
    pub fn start(self) -> Kadmit {
        let self_signed_dir = tempfile::tempdir().expect("tempdir");
        let mut command = Command::new(env!("CARGO_BIN_EXE_kadmit"));
        command
            .arg("serve")
            .arg("--listen")
            .arg(
                self.listen
                    .map_or("127.0.0.1:0".to_owned(), |(tls, _)| tls.to_string()),
            )
            .arg("--plain-listen")
            .arg(
                self.listen
                    .map_or("127.0.0.1:0".to_owned(), |(_, plain)| plain.to_string()),
            )
            .args(["--log-format", "json", "--workers", "1"])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if self.self_signed {
            command.arg("--self-signed-dir").arg(self_signed_dir.path());
        }
        command.args(&self.args);
        let mut child = command.spawn().expect("start kadmit");

        let logs = Arc::new(Logs::default());
        let stderr = child.stderr.take().expect("piped stderr");
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                match line {
                    Ok(line) => sink.push(&line),
                    Err(_) => break,
                }
            }
        });
        let stdout = child.stdout.take().expect("piped stdout");
        let (lines_tx, lines_rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });

        let (ops_token_dir, ops_token) = match self.ops_token {
            Some((dir, token)) => (Some(dir), Some(token)),
            None => (None, None),
        };
        let (certificate_dir, ca_pem) = match self.certificate {
            Some((dir, pem)) => (Some(dir), Some(pem)),
            None => (None, None),
        };
        let mut kadmit = Kadmit {
            child: Some(child),
            tls: None,
            plain: None,
            ops_tls: false,
            ops_token,
            ops_token_dir,
            ca_pem,
            _certificate_dir: certificate_dir,
            logs,
            stdout: Vec::new(),
            _self_signed_dir: self_signed_dir,
        };
        let deadline = Instant::now() + DEADLINE;
        while kadmit.tls.is_none() {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let line = match lines_rx.recv_timeout(remaining) {
                Ok(line) => line,
                Err(error) => panic!(
                    "kadmit did not print its listening line ({error}); stdout: {:?}; logs:\n{}",
                    kadmit.stdout,
                    render(&kadmit.logs.snapshot())
                ),
            };
            kadmit.parse_stdout_line(&line);
            kadmit.stdout.push(line);
        }
        kadmit
    }
}

/// A running `kadmit serve`, killed when dropped.
pub struct Kadmit {
    /// `None` once [`Kadmit::wait_exit`] has taken it.
    child: Option<Child>,
    tls: Option<SocketAddr>,
    plain: Option<SocketAddr>,
    /// Whether the operations listener announced itself as HTTPS.
    ops_tls: bool,
    /// The token sent to the operations listener, when it asks for one.
    ops_token: Option<String>,
    /// Holds the token file.
    ops_token_dir: Option<tempfile::TempDir>,
    ca_pem: Option<String>,
    _certificate_dir: Option<tempfile::TempDir>,
    /// Captured stderr.
    pub logs: Arc<Logs>,
    /// Lines read from stdout up to the listening line.
    pub stdout: Vec<String>,
    _self_signed_dir: tempfile::TempDir,
}

impl Kadmit {
    /// A server with the given rules directory; more flags via the builder.
    pub fn with_rules(rules: &Path) -> Builder {
        Builder {
            args: vec!["--rules".into(), rules.as_os_str().to_owned()],
            self_signed: true,
            listen: None,
            ops_token: None,
            certificate: None,
        }
    }

    fn parse_stdout_line(&mut self, line: &str) {
        if let Some(rest) = line.strip_prefix("self-signed ca=") {
            let path = rest.split(" (").next().unwrap_or(rest);
            self.ca_pem = Some(std::fs::read_to_string(path).expect("read the printed CA"));
        } else if let Some(rest) = line.strip_prefix("listening ") {
            for part in rest.split_whitespace() {
                if let Some(addr) = part.strip_prefix("tls=") {
                    self.tls = Some(addr.parse().expect("tls address"));
                } else if let Some(addr) = part.strip_prefix("plain=") {
                    self.plain = Some(addr.parse().expect("plain address"));
                } else if let Some(addr) = part.strip_prefix("ops_tls=") {
                    self.plain = Some(addr.parse().expect("operations address"));
                    self.ops_tls = true;
                }
            }
            assert!(self.plain.is_some(), "no plain address in {line:?}");
        }
    }

    /// The TLS listener's address.
    pub fn tls_addr(&self) -> SocketAddr {
        self.tls.expect("started")
    }

    /// `https://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.tls_addr())
    }

    /// The plain listener's address.
    pub fn plain_addr(&self) -> SocketAddr {
        self.plain.expect("started")
    }

    /// `http://127.0.0.1:PORT{path}` on the operations listener
    /// (`https://` with `--ops-tls`).
    pub fn plain_url(&self, path: &str) -> String {
        let scheme = if self.ops_tls { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.plain.expect("started"))
    }

    /// Whether the operations listener speaks HTTPS.
    pub fn ops_tls(&self) -> bool {
        self.ops_tls
    }

    /// The token file, when the listener asks for a token.
    pub fn ops_token_file(&self) -> Option<PathBuf> {
        self.ops_token_dir
            .as_ref()
            .map(|dir| dir.path().join("token"))
    }

    /// A client for the operations listener without credentials: plain, or
    /// HTTPS trusting the server's CA.
    pub fn ops_client(&self) -> reqwest::blocking::Client {
        install_provider();
        if self.ops_tls {
            client(&roots_from_pem(self.ca_pem()), None, Alpn::H2AndHttp1)
        } else {
            reqwest::blocking::Client::builder()
                .timeout(DEADLINE)
                .build()
                .expect("build client")
        }
    }

    /// `GET path` on the operations listener with `authorization` as the
    /// `Authorization` header (none for `None`): status, headers, body.
    pub fn get_ops(
        &self,
        path: &str,
        authorization: Option<&str>,
    ) -> (u16, reqwest::header::HeaderMap, String) {
        let mut request = self.ops_client().get(self.plain_url(path));
        if let Some(value) = authorization {
            request = request.header("Authorization", value);
        }
        let response = request
            .send()
            .unwrap_or_else(|error| panic!("GET {path}: {error}"));
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (status, headers, response.text().expect("body"))
    }

    /// The generated CA, when the server made its own certificate.
    pub fn ca_pem(&self) -> &str {
        self.ca_pem
            .as_deref()
            .expect("the server printed a self-signed CA")
    }

    /// An h2-capable client trusting the server's generated CA.
    pub fn client(&self) -> reqwest::blocking::Client {
        client(&roots_from_pem(self.ca_pem()), None, Alpn::H2AndHttp1)
    }

    /// The body of `GET path` on the operations listener, with its status,
    /// sending the operations token when the listener asks for one.
    pub fn get_plain(&self, path: &str) -> (u16, String) {
        let authorization = self
            .ops_token
            .as_ref()
            .map(|token| format!("Bearer {token}"));
        let (status, _, body) = self.get_ops(path, authorization.as_deref());
        (status, body)
    }

    /// A `/metrics` page rendered for this call: the server answers its last
    /// rendering to a burst of requests, with its age, 0 only for a page
    /// rendered for the request, and one rendered before is asked for again.
    /// (Comparing the age with the time since asking is not enough: the
    /// answer may take longer to arrive than the page had been old.)
    pub fn metrics_page(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        let authorization = self
            .ops_token
            .as_ref()
            .map(|token| format!("Bearer {token}"));
        loop {
            let (status, headers, text) = self.get_ops("/metrics", authorization.as_deref());
            assert_eq!(status, 200, "{text}");
            let age = headers
                .get("kadmit-metrics-age-ms")
                .and_then(|age| age.to_str().ok()?.parse::<u64>().ok())
                .expect("the page's age");
            if age == 0 {
                return text;
            }
            assert!(Instant::now() < deadline, "no fresh /metrics page in 10 s");
            std::thread::park_timeout(Duration::from_millis(50));
        }
    }

    /// The value of one Prometheus sample line `name{labels}`, 0 when absent.
    pub fn metric(&self, sample: &str) -> f64 {
        let text = self.metrics_page();
        text.lines()
            .find_map(|line| {
                line.strip_prefix(sample)
                    .and_then(|rest| rest.strip_prefix(' '))
            })
            .map_or(0.0, |value| value.trim().parse().expect("sample value"))
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Sends a signal to the server (`TERM`, `INT`).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.as_ref().expect("running").id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Waits for the process to exit, failing the test at the deadline.
    pub fn wait_exit(mut self) -> ExitStatus {
        let deadline = Instant::now() + DEADLINE;
        let mut child = self.child.take().expect("running");
        let pid = child.id().to_string();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(status) => status.expect("wait for kadmit"),
            Err(_) => {
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
                panic!("kadmit did not exit in time");
            }
        }
    }

    /// The lines the server has logged so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.logs
            .snapshot()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Fails if the server logged a panic.
    pub fn assert_no_panic(&self) {
        for line in self.logs.snapshot() {
            let text = line.to_string();
            assert!(!text.contains("panicked"), "kadmit panicked: {text}");
        }
    }
}

impl Drop for Kadmit {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Which protocols a client offers in ALPN.
#[derive(Debug, Clone, Copy)]
pub enum Alpn {
    /// `h2,http/1.1`, as kube-apiserver does.
    H2AndHttp1,
    /// `http/1.1` only.
    Http1,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// reqwest takes its provider from the process default when it needs one:
/// the same ring as the server.
pub fn install_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Trust anchors from a PEM file's certificates.
pub fn roots_from_pem(pem: &str) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        roots
            .add(cert.expect("PEM certificate"))
            .expect("trust anchor");
    }
    assert!(!roots.is_empty(), "no certificate in the CA PEM");
    roots
}

/// A client certificate and its key.
pub struct Identity {
    /// Certificate chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// Private key.
    pub key: PrivateKeyDer<'static>,
}

/// A blocking HTTPS client with these trust anchors, optional client
/// certificate, and ALPN offer; it reports the peer certificate (TlsInfo).
pub fn client(
    roots: &rustls::RootCertStore,
    identity: Option<Identity>,
    alpn: Alpn,
) -> reqwest::blocking::Client {
    install_provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots.clone());
    let mut config = match identity {
        Some(identity) => builder
            .with_client_auth_cert(identity.chain, identity.key)
            .expect("client certificate"),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = match alpn {
        Alpn::H2AndHttp1 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        Alpn::Http1 => vec![b"http/1.1".to_vec()],
    };
    let builder = reqwest::blocking::Client::builder()
        .tls_backend_preconfigured(config)
        .tls_info(true)
        .timeout(DEADLINE);
    let builder = match alpn {
        Alpn::H2AndHttp1 => builder,
        Alpn::Http1 => builder.http1_only(),
    };
    builder.build().expect("build client")
}

/// A CA made with rcgen, able to sign server and client certificates.
pub struct TestCa {
    params: CertificateParams,
    key: KeyPair,
    /// The CA certificate, PEM.
    pub pem: String,
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).expect("CA certificate");
        TestCa {
            pem: cert.pem(),
            params,
            key,
        }
    }

    /// Trust anchors holding this CA.
    pub fn roots(&self) -> rustls::RootCertStore {
        roots_from_pem(&self.pem)
    }

    fn issue(&self, names: &[&str], usage: ExtendedKeyUsagePurpose) -> (String, String) {
        self.issue_with(names, usage, |_| {})
    }

    fn issue_with(
        &self,
        names: &[&str],
        usage: ExtendedKeyUsagePurpose,
        adjust: impl FnOnce(&mut CertificateParams),
    ) -> (String, String) {
        let key = KeyPair::generate().expect("leaf key");
        let mut params = CertificateParams::new(
            names
                .iter()
                .map(|name| (*name).to_owned())
                .collect::<Vec<_>>(),
        )
        .expect("leaf params");
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().copied().unwrap_or("client"),
        );
        params.extended_key_usages = vec![usage];
        adjust(&mut params);
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).expect("sign leaf");
        (cert.pem(), key.serialize_pem())
    }

    /// A server certificate for 127.0.0.1 and localhost: (cert PEM, key PEM).
    pub fn server_cert(&self) -> (String, String) {
        self.issue(
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A server certificate like [`TestCa::server_cert`], valid only from
    /// `not_before` to `not_after` (year, month, day, UTC midnight).
    pub fn server_cert_valid(
        &self,
        not_before: (i32, u8, u8),
        not_after: (i32, u8, u8),
    ) -> (String, String) {
        self.issue_with(
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
            |params| {
                params.not_before = rcgen::date_time_ymd(not_before.0, not_before.1, not_before.2);
                params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
            },
        )
    }

    /// A client certificate.
    pub fn client_identity(&self, name: &str) -> Identity {
        let (cert, key) = self.issue(&[name], ExtendedKeyUsagePurpose::ClientAuth);
        Identity {
            chain: vec![CertificateDer::from_pem_slice(cert.as_bytes()).expect("cert")],
            key: PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key"),
        }
    }
}

/// The DER of the first certificate in a PEM text.
pub fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("PEM certificate")
        .as_ref()
        .to_vec()
}

/// The DER leaf certificate the server presented for this response.
pub fn peer_certificate(response: &reqwest::blocking::Response) -> Vec<u8> {
    response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .expect("TLS info with the peer certificate")
        .to_vec()
}

/// POSTs `body` as JSON and returns status and parsed JSON body.
pub fn post_json(
    client: &reqwest::blocking::Client,
    url: &str,
    body: Vec<u8>,
) -> (reqwest::StatusCode, reqwest::Version, Value) {
    let response = client
        .post(url)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .unwrap_or_else(|error| panic!("POST {url}: {error}"));
    let status = response.status();
    let version = response.version();
    let bytes = response.bytes().expect("response body");
    let value = serde_json::from_slice(&bytes).unwrap_or_else(|error| {
        panic!(
            "POST {url}: body is not JSON ({error}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (status, version, value)
}

/// Asserts that `body` is a Kubernetes `Status` failure with `code` and a
/// one-line message containing `needle`.
pub fn assert_status_body(body: &Value, code: u16, needle: &str) {
    assert_eq!(body["kind"], "Status", "{body}");
    assert_eq!(body["apiVersion"], "v1", "{body}");
    assert_eq!(body["status"], "Failure", "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert!(
        body["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{body}"
    );
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        !message.is_empty() && !message.chars().any(char::is_control),
        "message must be one non-empty line: {body}"
    );
    assert!(
        message.contains(needle),
        "message {message:?} lacks {needle:?}"
    );
}
