//! Debian's Prometheus scrapes two real kadmit servers (one serving, one that
//! never got a plan) every second; after traffic, failed and successful
//! reloads, every query of every panel of the Grafana dashboard must return
//! data through Prometheus' HTTP API.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::grafana::{dashboard, queries, substitute};
use super::{
    ConfigMap, OPS_TOKEN, Ops, Traffic, free_port, in_both_setups, policy_dir, send_traffic, tool,
    wait_until,
};
use crate::server::harness::{Kadmit, TestCa, post_json, rules_dir};

/// Deadline of each wait on Prometheus or kadmit.
const DEADLINE: Duration = Duration::from_secs(60);

/// A Prometheus server with its own config and storage, killed when dropped.
struct Prometheus {
    child: Child,
    base: String,
    http: reqwest::blocking::Client,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Prometheus scraping `targets`; with `ca_pem`, over HTTPS trusting
    /// that CA and sending [`OPS_TOKEN`] from a file, as
    /// docs/observability.md shows.
    fn start(binary: &Path, targets: &[String], ca_pem: Option<&str>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let protection = match ca_pem {
            Some(pem) => {
                let ca_file = dir.path().join("kadmit-ca.pem");
                let token_file = dir.path().join("kadmit-token");
                std::fs::write(&ca_file, pem).expect("write the CA");
                std::fs::write(&token_file, format!("{OPS_TOKEN}\n")).expect("write the token");
                format!(
                    "    scheme: https\n    tls_config:\n      ca_file: {}\n\
                     \x20   authorization:\n      credentials_file: {}\n",
                    ca_file.display(),
                    token_file.display()
                )
            }
            None => String::new(),
        };
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: kadmit\n{protection}    static_configs:\n      - targets: [{}]\n",
            targets
                .iter()
                .map(|target| format!("\"{target}\""))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).expect("write the config");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
        let port = free_port();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let prometheus = Prometheus {
            child,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::blocking::Client::builder()
                .timeout(DEADLINE)
                .build()
                .expect("HTTP client"),
            dir,
        };
        wait_until("Prometheus to be ready", DEADLINE, || {
            let response = prometheus
                .http
                .get(format!("{}/-/ready", prometheus.base))
                .send()
                .map_err(|error| format!("{error}; log: {}", prometheus.log()))?;
            if response.status().is_success() {
                Ok(())
            } else {
                Err(format!("HTTP {}", response.status()))
            }
        });
        prometheus
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// The result vector of an instant query at the current time.
    fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let url = format!("{}/api/v1/query?query={}", self.base, url_encode(expr));
        let body: Value = self
            .http
            .get(&url)
            .send()
            .and_then(|response| response.json())
            .map_err(|error| error.to_string())?;
        if body["status"] != "success" {
            // A query Prometheus refuses never starts working: fail now.
            panic!("Prometheus refused {expr}: {body}");
        }
        Ok(body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// The value of a single-sample query.
    fn scalar(&self, expr: &str) -> Result<f64, String> {
        let result = self.query(expr)?;
        result
            .first()
            .and_then(sample_value)
            .ok_or_else(|| format!("{expr}: {result:?}"))
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of one vector sample (`"value": [time, "1.5"]`).
fn sample_value(sample: &Value) -> Option<f64> {
    sample["value"][1]
        .as_str()
        .and_then(|text| text.parse().ok())
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn url_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

fn plain_target(kadmit: &Kadmit) -> String {
    kadmit.plain_addr().to_string()
}

/// Waits until `/status` of `kadmit` satisfies `check`.
fn wait_status(kadmit: &Kadmit, what: &str, check: impl Fn(&Value) -> bool) {
    wait_until(what, DEADLINE, || {
        let (_, body) = kadmit.get_plain("/status");
        let status: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        if check(&status) { Ok(()) } else { Err(body) }
    });
}

/// What goes to the server without a plan and as bad input to the serving
/// one, so that the error panels have series.
fn send_errors(serving: &Kadmit, unready: &Kadmit) {
    let review = ConfigMap::clean("x").review("error-path");
    let (status, _, body) = post_json(&unready.client(), &unready.url("/validate"), review);
    assert_eq!(status, 503, "{body}");
    let (status, _, body) = post_json(
        &serving.client(),
        &serving.url("/validate"),
        b"{not json".to_vec(),
    );
    assert_eq!(status, 400, "{body}");
}

fn every_grafana_query_returns_data_from_a_real_prometheus(ops: Ops) {
    let Some(binary) = tool("/usr/bin/prometheus", "prometheus") else {
        return;
    };
    let rules = policy_dir();
    let broken = rules_dir(&[("broken.yaml", "spec: [unclosed\n")]);
    // One scrape configuration for both servers: with TLS, one CA.
    let ca = TestCa::new("observe");
    let server = |rules: &Path| match ops {
        Ops::Plain => ops.server(rules),
        Ops::Protected => ops.server(rules).certificate(&ca),
    };
    let serving = server(rules.path()).start();
    let unready = server(broken.path()).start();
    let ca_pem = (ops == Ops::Protected).then_some(ca.pem.as_str());
    let prometheus = Prometheus::start(
        &binary,
        &[plain_target(&serving), plain_target(&unready)],
        ca_pem,
    );

    wait_until(
        "both kadmit targets to be up",
        DEADLINE,
        || match prometheus.scalar(r#"count(up{job="kadmit"} == 1)"#) {
            Ok(2.0) => Ok(()),
            other => Err(format!("{other:?}; log: {}", prometheus.log())),
        },
    );

    // First batch: the series appear. Prometheus must see them before the
    // second batch, or rate() has no earlier sample to measure an increase
    // from.
    let traffic = Traffic::MIX;
    send_traffic(&serving, traffic);
    send_errors(&serving, &unready);
    let first_batch = (traffic.forbidden + traffic.password) as f64;
    wait_until(
        "the first batch to be scraped",
        DEADLINE,
        || match prometheus.scalar("sum(kadmit_rejections_total)") {
            Ok(value) if value >= first_batch => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );

    // A rule update that fails, then one that works: generation 2.
    std::fs::write(rules.path().join("broken.yaml"), "spec: [unclosed\n").expect("write");
    wait_status(&serving, "the failed reload", |s| {
        s["lastError"].is_string()
    });
    std::fs::remove_file(rules.path().join("broken.yaml")).expect("remove");
    wait_status(&serving, "generation 2", |s| s["generation"] == 2);

    send_traffic(&serving, traffic);
    send_errors(&serving, &unready);

    let queries = queries(&dashboard());
    assert!(queries.len() >= 15, "only {} queries", queries.len());
    for (title, expr) in &queries {
        let expr = substitute(expr);
        let result = wait_until(&format!("data for {title:?}: {expr}"), DEADLINE, || {
            let result = prometheus.query(&expr)?;
            if result.iter().filter_map(sample_value).any(f64::is_finite) {
                Ok(result)
            } else {
                Err(format!("{result:?}"))
            }
        });
        eprintln!("{title}: {expr} -> {} series", result.len());
    }

    // And the data is right: both deny rules appear, by name, with their
    // rejections of the second batch.
    let by_rule = wait_until("both rules in the rejections panel", DEADLINE, || {
        let result = prometheus.query("sum by (rule) (increase(kadmit_rejections_total[5m]))")?;
        let positive = |rule: &str| {
            result.iter().any(|sample| {
                sample["metric"]["rule"] == rule && sample_value(sample).is_some_and(|v| v > 0.0)
            })
        };
        if positive("no-forbidden-label") && positive("no-password-in-configmaps") {
            Ok(result)
        } else {
            Err(format!("{result:?}"))
        }
    });
    assert_eq!(by_rule.len(), 2, "{by_rule:?}");
    wait_until("generation 2 and the failed reloads", DEADLINE, || {
        let generation = prometheus.scalar("max(kadmit_plan_generation)")?;
        // One on the serving server, at least one (the periodic re-read
        // retries) on the one that never loaded.
        let failures = prometheus.scalar(r#"sum(kadmit_reloads_total{result="failure"})"#)?;
        if generation == 2.0 && failures >= 2.0 {
            Ok(())
        } else {
            Err(format!("generation {generation}, failures {failures}"))
        }
    });
}

in_both_setups!(every_grafana_query_returns_data_from_a_real_prometheus,);
