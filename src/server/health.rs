//! The operations listener's routes: liveness (`/healthz`), readiness
//! (`/readyz`), the Prometheus exposition (`/metrics`), the reload status
//! (`/status`), and the dashboard with its JSON (see [`crate::dashboard`]).
//!
//! These stay off the webhook listener so that the webhook port serves only
//! reviews, and so that the operations port can be plain HTTP (the default)
//! or HTTPS with a token or client certificate (`--ops-tls`, see
//! [`super::access`]) independently of the webhook's client CA.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};

use super::status::{Rejection, status_response};
use super::{State, not_found, only};

/// Registers `/healthz`, `/readyz`, `/metrics`, `/status` and the
/// dashboard routes (GET) on `cfg`; any other path is a 404 `Status`.
pub fn routes(cfg: &mut web::ServiceConfig, state: &web::Data<State>) {
    cfg.app_data(state.clone())
        .service(only("GET", "/healthz", web::get().to(healthz)))
        .service(only("GET", "/readyz", web::get().to(readyz)))
        .service(only("GET", "/metrics", web::get().to(metrics)))
        .service(only("GET", "/status", web::get().to(reload_state)));
    super::dashboard_routes::routes(cfg);
    cfg.default_service(web::to(not_found));
}

/// Alive as long as the process answers: a failed rule reload must not get
/// the pod restarted, only reported.
async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

/// Ready once a plan is loaded, and until shutdown begins.
async fn readyz(state: web::Data<State>) -> HttpResponse {
    if state.is_shutting_down() {
        return status_response(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "shutting down",
        );
    }
    match state.store().load() {
        Some(plan) => HttpResponse::Ok()
            .content_type("application/json")
            .body(format!(
                "{{\"ready\":true,\"generation\":{}}}",
                plan.generation()
            )),
        None => status_response(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            &Rejection::NotReady.to_string(),
        ),
    }
}

/// The Prometheus text exposition of every registered metric, rendered
/// afresh as [`super::dashboard_routes::RecentAnswers::metrics`] allows.
async fn metrics(state: web::Data<State>) -> HttpResponse {
    match &state.metrics {
        Some(handle) => state.answers.metrics(|| handle.render()),
        None => status_response(
            StatusCode::NOT_FOUND,
            "NotFound",
            "no metrics recorder is installed",
        ),
    }
}

/// The reload status: generation, loaded rule sets with their rule counts and
/// file hashes, the times of the last successful and failed reloads, and the
/// last error.
async fn reload_state(state: web::Data<State>) -> HttpResponse {
    let status = state.reload_state();
    match serde_json::to_vec(&status) {
        Ok(body) => HttpResponse::Ok()
            .content_type("application/json")
            .body(body),
        Err(error) => status_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            &format!("cannot encode the status: {error}"),
        ),
    }
}
