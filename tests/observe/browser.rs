//! The built-in dashboard in headless Chromium, driven through chromedriver's
//! WebDriver HTTP API: after denied, warned, audited, mutated and allowed
//! reviews, and a failed reload, the page must have fetched and rendered the
//! rule names, their counts, the recent denials, the plan generation and the
//! reload error, and must fit a laptop screen. Screenshots go to
//! `target/test-artifacts/`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use super::{
    OPS_TOKEN, Ops, RULE_SET, Traffic, artifacts_dir, free_port, in_both_setups, policy_dir,
    send_traffic, tool, wait_until,
};

/// Deadline of each wait on the browser.
const DEADLINE: Duration = Duration::from_secs(30);

/// Deadline of a new session, which starts Chromium: under a whole test run
/// on two cores, that has taken longer than [`DEADLINE`].
const SESSION_START: Duration = Duration::from_secs(120);

/// A chromedriver process on a local port, killed when dropped.
struct ChromeDriver {
    child: Child,
    base: String,
    http: reqwest::blocking::Client,
}

impl ChromeDriver {
    fn start(chromedriver: &Path) -> Self {
        let port = free_port();
        let child = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let driver = ChromeDriver {
            child,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::blocking::Client::builder()
                .timeout(DEADLINE)
                .build()
                .expect("HTTP client"),
        };
        wait_until("chromedriver to be ready", DEADLINE, || {
            let status = driver
                .http
                .get(format!("{}/status", driver.base))
                .send()
                .and_then(|response| response.json::<Value>())
                .map_err(|error| error.to_string())?;
            if status["value"]["ready"] == true {
                Ok(())
            } else {
                Err(status.to_string())
            }
        });
        driver
    }

    /// Sends a WebDriver command and returns its `value`.
    fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        self.command_within(method, path, body, DEADLINE)
    }

    /// [`ChromeDriver::command`], answered within `deadline`.
    fn command_within(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        deadline: Duration,
    ) -> Value {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method, &url).timeout(deadline);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            // Debug: with the cause (a timeout, a reset) that Display leaves out.
            .unwrap_or_else(|error| panic!("WebDriver {path}: {error:?}"));
        let status = response.status();
        let value: Value = response
            .json()
            .unwrap_or_else(|error| panic!("WebDriver {path}: {error}"));
        assert!(status.is_success(), "WebDriver {path}: {status}: {value}");
        value["value"].clone()
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A browser session, closed when dropped.
struct Session<'a> {
    driver: &'a ChromeDriver,
    id: String,
    _profile: tempfile::TempDir,
}

impl<'a> Session<'a> {
    /// A session; with `trust_any_certificate`, Chromium accepts the test
    /// server's self-signed certificate (the page is the same either way).
    fn new(driver: &'a ChromeDriver, chromium: &Path, trust_any_certificate: bool) -> Self {
        let profile = tempfile::tempdir().expect("profile dir");
        let mut args = vec![
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--hide-scrollbars".to_owned(),
            format!("--user-data-dir={}", profile.path().display()),
            "--window-size=1366,768".to_owned(),
        ];
        if trust_any_certificate {
            args.push("--ignore-certificate-errors".to_owned());
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
        }}});
        let created = driver.command_within(
            reqwest::Method::POST,
            "/session",
            Some(capabilities),
            SESSION_START,
        );
        let id = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session id in {created}"))
            .to_owned();
        Session {
            driver,
            id,
            _profile: profile,
        }
    }

    fn post(&self, path: &str, body: Value) -> Value {
        self.driver.command(
            reqwest::Method::POST,
            &format!("/session/{}{path}", self.id),
            Some(body),
        )
    }

    fn navigate(&self, url: &str) {
        self.post("/url", json!({"url": url}));
    }

    fn execute(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": []}))
    }

    /// Sizes the viewport (not the window) to `width` x `height`.
    fn set_viewport(&self, width: u32, height: u32) {
        self.post("/window/rect", json!({"width": width, "height": height}));
        // Headless windows usually have no frame, but size the window by the
        // difference if this one has.
        let inner = self.execute("return [window.innerWidth, window.innerHeight];");
        let dw = i64::from(width) - inner[0].as_i64().unwrap_or(i64::from(width));
        let dh = i64::from(height) - inner[1].as_i64().unwrap_or(i64::from(height));
        if dw != 0 || dh != 0 {
            self.post(
                "/window/rect",
                json!({"width": i64::from(width) + dw, "height": i64::from(height) + dh}),
            );
        }
    }

    fn screenshot(&self, name: &str) -> std::path::PathBuf {
        let encoded = self.driver.command(
            reqwest::Method::GET,
            &format!("/session/{}/screenshot", self.id),
            None,
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().expect("base64 screenshot"))
            .expect("valid base64");
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        let path = artifacts_dir().join(name);
        std::fs::write(&path, png).expect("write the screenshot");
        eprintln!("screenshot: {}", path.display());
        path
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let _ = self
            .driver
            .http
            .delete(format!("{}/session/{}", self.driver.base, self.id))
            .send();
    }
}

/// What the page shows, read from the DOM in one go; `loaded: false` while
/// the document is not the dashboard yet (after the token is entered, the
/// page loads again, and a slow machine may read it in between).
const READ_PAGE: &str = r##"
if (!document.getElementById("reload-error")) {
  return {loaded: false, url: location.href, title: document.title};
}
const rows = (id) => [...document.querySelectorAll(`#${id} tbody tr`)];
const text = (node, selector) => (node.querySelector(selector) || {}).textContent || "";
return {
  loaded: document.body.dataset.loaded === "true",
  generation: document.getElementById("plan-generation").textContent,
  planState: document.getElementById("plan-state").textContent,
  reloadError: document.getElementById("reload-error").hidden
    ? null : document.getElementById("reload-error-text").textContent,
  reviews: document.getElementById("stat-reviews").textContent,
  p99: document.getElementById("stat-p99").textContent,
  topRules: rows("top-rules").map((tr) => [tr.dataset.rule, text(tr, ".count")]),
  otherRules: rows("other-rules").map((tr) =>
    [tr.dataset.rule, text(tr, ".warned"), text(tr, ".audited"), text(tr, ".mutated")]),
  denials: rows("denials").map((tr) => tr.textContent),
  chartBars: document.querySelectorAll("#rejections-chart rect").length,
  legend: document.getElementById("rejections-legend").textContent,
  overflowX: document.documentElement.scrollWidth - window.innerWidth,
  pageHeight: document.documentElement.scrollHeight,
};
"##;

fn rule(name: &str) -> String {
    format!("{RULE_SET}/{name}")
}

/// Checks the page state against what the test sent; `Err` says what is
/// still missing.
fn check(page: &Value, traffic: Traffic) -> Result<(), String> {
    let fail = |what: &str| Err(format!("{what}: {page}"));
    if page["loaded"] != true {
        return fail("not loaded");
    }
    let top = json!([
        [rule("no-forbidden-label"), traffic.forbidden.to_string()],
        [
            rule("no-password-in-configmaps"),
            traffic.password.to_string()
        ],
    ]);
    if page["topRules"] != top {
        return fail("top rules");
    }
    let warned = json!([
        rule("team-label-recommended"),
        traffic.warned.to_string(),
        "0",
        "0"
    ]);
    if page["otherRules"].as_array().and_then(|rows| rows.first()) != Some(&warned) {
        return fail("warnings table");
    }
    if page["reviews"].as_str() != Some(traffic.reviews().to_string().as_str()) {
        return fail("reviews tile");
    }
    let denials = page["denials"].as_array().map_or(0, Vec::len);
    if denials != traffic.forbidden + traffic.password {
        return fail("denials table");
    }
    let newest = page["denials"][0].as_str().unwrap_or("");
    for needle in [
        "no-password-in-configmaps",
        "payments/db-settings",
        "system:serviceaccount:payments:deployer",
        "holds a password",
    ] {
        if !newest.contains(needle) {
            return fail(&format!("newest denial lacks {needle:?}"));
        }
    }
    if page["generation"] != "1" {
        return fail("generation");
    }
    if !page["reloadError"]
        .as_str()
        .is_some_and(|error| error.contains("broken.yaml"))
    {
        return fail("reload error banner");
    }
    if page["chartBars"].as_u64().unwrap_or(0) == 0 {
        return fail("no bars in the rejections chart");
    }
    if !page["legend"]
        .as_str()
        .is_some_and(|legend| legend.contains("no-forbidden-label"))
    {
        return fail("chart legend");
    }
    if !page["p99"].as_str().is_some_and(|p99| p99.ends_with('s')) {
        return fail("latency tile");
    }
    Ok(())
}

/// The token form's state; while the document is not the dashboard (still
/// loading, or an error page), where the browser is instead.
const READ_TOKEN_FORM: &str = "const form = document.getElementById('token-form'); \
     if (!form) { return {shown: false, url: location.href, title: document.title}; } \
     return {shown: !form.hidden, error: document.getElementById('token-error').textContent};";

/// Waits for the page to ask for the operations token, then types `token`
/// and submits, as a person would.
fn enter_token(session: &Session<'_>, token: &str) {
    wait_until("the page to ask for the token", DEADLINE, || {
        let state = session.execute(READ_TOKEN_FORM);
        if state["shown"] == true {
            Ok(())
        } else {
            Err(state.to_string())
        }
    });
    let script = format!(
        "document.getElementById('token-input').value = {}; \
         document.getElementById('token-form').requestSubmit(); return true;",
        Value::from(token)
    );
    session.execute(&script);
}

fn the_dashboard_renders_rules_counts_denials_and_reload_errors(ops: Ops) {
    let (Some(chromium), Some(chromedriver)) = (
        tool("/usr/bin/chromium", "chromium"),
        tool("/usr/bin/chromedriver", "chromium-driver"),
    ) else {
        return;
    };
    let rules = policy_dir();
    let kadmit = ops.server(rules.path()).start();
    let traffic = Traffic::MIX;
    send_traffic(&kadmit, traffic);

    // A rule update that does not compile: the dashboard must say so while
    // generation 1 keeps serving.
    std::fs::write(rules.path().join("broken.yaml"), "spec: [unclosed\n").expect("write");
    wait_until("the failed reload on /status", DEADLINE, || {
        let (_, body) = kadmit.get_plain("/status");
        let status: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        if status["lastError"].is_string() {
            Ok(())
        } else {
            Err(body)
        }
    });

    let driver = ChromeDriver::start(&chromedriver);
    let session = Session::new(&driver, &chromium, kadmit.ops_tls());
    session.set_viewport(1366, 768);
    session.navigate(&kadmit.plain_url("/dashboard"));
    if ops == Ops::Protected {
        enter_token(&session, "not-the-token");
        wait_until("the page to refuse a wrong token", DEADLINE, || {
            let state = session.execute(READ_TOKEN_FORM);
            if state["shown"] == true && state["error"] == "kadmit refused that token." {
                Ok(())
            } else {
                Err(state.to_string())
            }
        });
        enter_token(&session, OPS_TOKEN);
    }
    let page = wait_until("the dashboard to render the traffic", DEADLINE, || {
        let page = session.execute(READ_PAGE);
        check(&page, traffic).map(|()| page)
    });
    assert!(
        page["overflowX"]
            .as_i64()
            .is_some_and(|overflow| overflow <= 0),
        "the page scrolls sideways at 1366x768: {page}"
    );
    // One set of screenshots per setup.
    let suffix = if ops == Ops::Protected {
        "-protected"
    } else {
        ""
    };
    session.screenshot(&format!("dashboard{suffix}.png"));

    session.set_viewport(1920, 1080);
    let wide = session.execute(READ_PAGE);
    assert!(
        wide["overflowX"]
            .as_i64()
            .is_some_and(|overflow| overflow <= 0),
        "the page scrolls sideways at 1920x1080: {wide}"
    );
    session.screenshot(&format!("dashboard-1920{suffix}.png"));

    // The whole page at laptop width, denials table included.
    let height = page["pageHeight"].as_u64().unwrap_or(768).clamp(768, 4000);
    session.set_viewport(1366, u32::try_from(height).unwrap_or(768));
    session.screenshot(&format!("dashboard-1366-full{suffix}.png"));
    kadmit.assert_no_panic();
}

in_both_setups!(the_dashboard_renders_rules_counts_denials_and_reload_errors,);
