//! The routes of the built-in dashboard ([`crate::dashboard`]) on the
//! operations listener: `GET /dashboard` and its assets, `GET /api/summary`
//! and `GET /api/denials`.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, web};

use super::State;
use super::only;
use super::status::status_response;
use crate::dashboard::summary::{PlanSummary, Snapshot, summarize};
use crate::dashboard::{CONTENT_SECURITY_POLICY, PAGE_HTML, SCRIPT_JS, STYLE_CSS};

/// Registers the dashboard page, its assets, `/api/summary` and
/// `/api/denials` (GET) on `cfg`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(only("GET", "/dashboard", web::get().to(page)))
        .service(only(
            "GET",
            "/dashboard/dashboard.js",
            web::get().to(script),
        ))
        .service(only(
            "GET",
            "/dashboard/dashboard.css",
            web::get().to(style),
        ))
        .service(only("GET", "/api/summary", web::get().to(summary)))
        .service(only("GET", "/api/denials", web::get().to(denials)));
}

fn asset(content_type: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        // The assets change only with the binary; a short cache still lets an
        // upgrade show within a minute.
        .insert_header((header::CACHE_CONTROL, "max-age=60"))
        .body(body)
}

async fn page() -> HttpResponse {
    asset("text/html; charset=utf-8", PAGE_HTML)
}

async fn script() -> HttpResponse {
    asset("text/javascript; charset=utf-8", SCRIPT_JS)
}

async fn style() -> HttpResponse {
    asset("text/css; charset=utf-8", STYLE_CSS)
}

/// How long an `/api/summary` or `/api/denials` answer is reused. The
/// dashboard polls every few seconds; reusing the answer keeps a flood of
/// these requests from making the one operations worker render them again
/// and again while `/healthz` waits behind it (1,960 `/api/summary`
/// requests in 5 s held `/healthz` for 38 s).
pub const ANSWER_MAX_AGE: Duration = Duration::from_secs(1);

/// The last answer of each dashboard API, and when it was rendered.
#[derive(Debug, Default)]
pub struct RecentAnswers {
    summary: Mutex<Option<(Instant, web::Bytes)>>,
    denials: Mutex<Option<(Instant, web::Bytes)>>,
    metrics: Mutex<MetricsRenders>,
}

/// Fresh `/metrics` renderings a burst may have, and how many more a second
/// lets it have: a scraper, a person or a test reading the counters after
/// each step always sees them as they are. Past these, the last rendering
/// is answered: clients sending `/metrics` without reading the answer, once
/// reviews had grown it to 800 KB (15 ms to render), kept the operations
/// worker rendering and failed 9 of 10 `/healthz` probes.
const METRICS_BURST: u32 = 5;
/// See [`METRICS_BURST`].
const METRICS_PER_SECOND: u32 = 2;
/// The header saying how many milliseconds ago a `/metrics` answer was
/// rendered: 0 only for a page rendered for this request, so a client that
/// sees 0 knows the page counts everything answered before it asked.
pub const METRICS_AGE_HEADER: &str = "kadmit-metrics-age-ms";

/// The last `/metrics` rendering, and the fresh ones left
/// ([`METRICS_BURST`]).
#[derive(Debug)]
struct MetricsRenders {
    last: Option<(Instant, web::Bytes)>,
    left: u32,
    refilled: Instant,
}

impl Default for MetricsRenders {
    fn default() -> Self {
        MetricsRenders {
            last: None,
            left: METRICS_BURST,
            refilled: Instant::now(),
        }
    }
}

impl MetricsRenders {
    /// Whether a fresh rendering may be made at `now`, taking it.
    fn take(&mut self, now: Instant) -> bool {
        let earned = now.saturating_duration_since(self.refilled).as_millis()
            * u128::from(METRICS_PER_SECOND)
            / 1000;
        if earned > 0 {
            let earned = u32::try_from(earned).unwrap_or(u32::MAX);
            self.left = self.left.saturating_add(earned).min(METRICS_BURST);
            self.refilled = now;
        }
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        true
    }
}

impl RecentAnswers {
    /// The Prometheus exposition `render` gives, or the last one past
    /// [`METRICS_BURST`] (unread answers then share one body), with its age
    /// in milliseconds in the header [`METRICS_AGE_HEADER`].
    pub fn metrics(&self, render: impl FnOnce() -> String) -> HttpResponse {
        let (age_ms, body) = {
            let mut renders = self.metrics.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            let fresh = renders.last.is_none() || renders.take(now);
            match &renders.last {
                Some((rendered, body)) if !fresh => {
                    (reused_age_ms(rendered.elapsed()), body.clone())
                }
                _ => {
                    let body = web::Bytes::from(render());
                    renders.last = Some((now, body.clone()));
                    (0, body)
                }
            }
        };
        HttpResponse::Ok()
            .content_type("text/plain; version=0.0.4")
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .insert_header((METRICS_AGE_HEADER, age_ms.to_string()))
            .body(body)
    }
}

/// The age a reused `/metrics` page is given: its age in milliseconds,
/// rounded up and at least 1, so that 0 always means rendered for this
/// request (a page rendered half a millisecond before a client asked, then
/// slow to reach it, once passed a client's own "rendered after I asked"
/// test).
fn reused_age_ms(age: Duration) -> u128 {
    age.as_micros().div_ceil(1000).max(1)
}

/// The answer in `slot` when it is younger than [`ANSWER_MAX_AGE`], else
/// `render`'s, kept in `slot`.
fn reused(
    slot: &Mutex<Option<(Instant, web::Bytes)>>,
    render: impl FnOnce() -> serde_json::Result<Vec<u8>>,
) -> HttpResponse {
    let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
    let body = match &*slot {
        Some((at, body)) if at.elapsed() < ANSWER_MAX_AGE => body.clone(),
        _ => match render() {
            Ok(body) => {
                let body = web::Bytes::from(body);
                *slot = Some((Instant::now(), body.clone()));
                body
            }
            Err(error) => {
                return status_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    &format!("cannot encode the response: {error}"),
                );
            }
        },
    };
    HttpResponse::Ok()
        .content_type("application/json")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(body)
}

/// Totals, rates, latency quantiles, per-rule counters, chart series and the
/// plan's reload state. The current snapshot also goes into the history when
/// one is due, so the charts fill even if the upkeep thread is not running.
async fn summary(state: web::Data<State>) -> HttpResponse {
    let Some(handle) = &state.metrics else {
        return status_response(
            StatusCode::NOT_FOUND,
            "NotFound",
            "no metrics recorder is installed",
        );
    };
    reused(&state.answers.summary, || {
        let now = Snapshot::from_exposition(&handle.render(), SystemTime::now());
        state.history.offer(now.clone());
        let plan = PlanSummary::from(&state.reload_state());
        serde_json::to_vec(&summarize(&state.history.snapshots(), &now, plan))
    })
}

/// The recent denials, newest first.
async fn denials(state: web::Data<State>) -> HttpResponse {
    reused(&state.answers.denials, || {
        serde_json::to_vec(&state.denials.snapshot())
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use actix_web::test::{TestRequest, call_service, init_service, read_body};
    use actix_web::{App, web};

    use super::*;
    use crate::reload::store::Store;
    use crate::server::{Limits, health};

    fn state() -> web::Data<State> {
        let limits = Limits {
            max_body_bytes: 1 << 20,
            request_timeout: Duration::from_secs(5),
        };
        web::Data::new(State::new(Arc::new(Store::new()), limits, None))
    }

    async fn get(path: &str) -> (u16, Vec<(String, String)>, String) {
        let state = state();
        let app = init_service(App::new().configure(|cfg| health::routes(cfg, &state))).await;
        let response = call_service(&app, TestRequest::get().uri(path).to_request()).await;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        let body = read_body(response).await;
        (status, headers, String::from_utf8_lossy(&body).into_owned())
    }

    fn header<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    }

    #[actix_web::test]
    async fn the_page_and_its_assets_come_from_the_binary() {
        let (status, headers, body) = get("/dashboard").await;
        assert_eq!(status, 200);
        assert!(header(&headers, "content-type").starts_with("text/html"));
        assert!(header(&headers, "content-security-policy").contains("script-src 'self'"));
        assert!(body.contains("dashboard/dashboard.js"), "{body}");
        for (path, kind) in [
            ("/dashboard/dashboard.js", "text/javascript"),
            ("/dashboard/dashboard.css", "text/css"),
        ] {
            let (status, headers, body) = get(path).await;
            assert_eq!(status, 200, "{path}");
            assert!(header(&headers, "content-type").starts_with(kind), "{path}");
            assert!(!body.is_empty(), "{path}");
        }
    }

    #[actix_web::test]
    async fn nothing_is_loaded_from_another_origin() {
        for asset in [PAGE_HTML, SCRIPT_JS, STYLE_CSS] {
            for needle in ["http://", "https://", "//cdn", "@import", "url("] {
                // The SVG namespace is an identifier, not a fetched URL.
                let without_svg_ns = asset.replace("http://www.w3.org/2000/svg", "");
                assert!(
                    !without_svg_ns.contains(needle),
                    "an asset contains {needle:?}"
                );
            }
        }
    }

    #[actix_web::test]
    async fn denials_are_json_even_when_empty() {
        let (status, _, body) = get("/api/denials").await;
        assert_eq!(status, 200);
        let value: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(value["capacity"], 200);
        assert_eq!(value["denials"], serde_json::json!([]));
    }

    /// A flood of dashboard requests is answered from the last rendering
    /// for up to [`ANSWER_MAX_AGE`], so the operations worker that also
    /// answers `/healthz` does not render each one again.
    #[actix_web::test]
    async fn dashboard_answers_are_reused_for_a_second() {
        let state = state();
        let app = init_service(App::new().configure(|cfg| health::routes(cfg, &state))).await;
        let denials = || async {
            let response =
                call_service(&app, TestRequest::get().uri("/api/denials").to_request()).await;
            let body = read_body(response).await;
            serde_json::from_slice::<serde_json::Value>(&body).expect("JSON")["recorded"].clone()
        };
        assert_eq!(denials().await, 0);
        let review = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/admission-reviews/create-pod.json"
        ))
        .expect("fixture");
        let request = crate::review::decode(&review).expect("review").request;
        let verdict = crate::eval::Verdict {
            allowed: false,
            findings: vec![crate::eval::Finding {
                rule_set: Arc::from("security"),
                rule: Arc::from("no-pods"),
                outcome: crate::eval::Outcome::Denied,
                messages: vec!["no pods".to_owned()],
                more_messages: 0,
                code: Some(403),
            }],
            ..crate::eval::Verdict::default()
        };
        state.denials.record(&request, &verdict);
        // Within the second: the answer rendered before the denial.
        assert_eq!(denials().await, 0);
        // Once it is older than that, it is rendered again.
        if let Some((at, _)) = state.answers.denials.lock().unwrap().as_mut() {
            *at = Instant::now()
                .checked_sub(ANSWER_MAX_AGE)
                .expect("a second after boot");
        }
        assert_eq!(denials().await, 1);
    }

    #[actix_web::test]
    async fn summary_needs_a_recorder() {
        let (status, _, body) = get("/api/summary").await;
        assert_eq!(status, 404, "{body}");
    }

    #[test]
    fn metrics_are_rendered_afresh_for_a_burst_and_then_twice_a_second() {
        let mut renders = MetricsRenders::default();
        let start = renders.refilled;
        let taken = (0..100).filter(|_| renders.take(start)).count();
        assert_eq!(taken, METRICS_BURST as usize);
        assert!(!renders.take(start + Duration::from_millis(499)));
        assert!(renders.take(start + Duration::from_millis(500)));
        assert!(!renders.take(start + Duration::from_millis(900)));
        // A quiet while fills the burst again, not more.
        let later = start + Duration::from_secs(60);
        let taken = (0..100).filter(|_| renders.take(later)).count();
        assert_eq!(taken, METRICS_BURST as usize);
    }

    /// Only a page rendered for the request says age 0: a reused page says
    /// at least 1 however young it is, so a client never takes a page
    /// rendered before it asked for a fresh one.
    #[actix_web::test]
    async fn only_a_page_rendered_for_the_request_has_age_zero() {
        let recent = RecentAnswers::default();
        let mut renders = 0;
        let mut ages = Vec::new();
        for _ in 0..METRICS_BURST + 3 {
            let answer = recent.metrics(|| {
                renders += 1;
                format!("page {renders}")
            });
            let age = answer
                .headers()
                .get(METRICS_AGE_HEADER)
                .and_then(|age| age.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let body = actix_web::body::to_bytes(answer.into_body())
                .await
                .unwrap_or_default();
            ages.push((age, String::from_utf8_lossy(&body).into_owned()));
        }
        // The first page takes nothing from the burst.
        let burst = METRICS_BURST as usize + 1;
        for (n, (age, body)) in ages[..burst].iter().enumerate() {
            assert_eq!(
                (age.as_str(), body.clone()),
                ("0", format!("page {}", n + 1))
            );
        }
        for (age, body) in &ages[burst..] {
            assert_eq!(body, &format!("page {burst}"), "{ages:?}");
            assert!(age.parse::<u64>().is_ok_and(|age| age >= 1), "{ages:?}");
        }
        assert_eq!(reused_age_ms(Duration::ZERO), 1);
        assert_eq!(reused_age_ms(Duration::from_micros(1_001)), 2);
    }
}
