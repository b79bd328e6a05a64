//! Every way a request can fail short of a verdict, and the Kubernetes
//! `Status` body each failure is answered with.
//!
//! kube-apiserver shows an error's message to the user only when the body is a
//! `Status` object (`{"kind":"Status","apiVersion":"v1","status":"Failure",
//! "message":...,"reason":...,"code":...}`); any other body becomes "unknown
//! reason". So every error response kadmit sends, including actix's own
//! (unknown path, wrong method, extractor errors), is built here, as
//! k8s-openapi's `meta/v1` `Status`.

use std::time::{Duration, Instant};

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse};

use crate::eval::EvalError;
use crate::excerpt::{self, MAX_FIELD_BYTES, MAX_MESSAGE_BYTES};
use crate::log_throttle::LogThrottle;
use crate::metrics;
use crate::review::DecodeError;

/// Log lines of refused requests (4xx): any client can send a thousand bad
/// requests a second, and a line for each would turn them into log volume
/// and bury the lines that matter. The metric counts every one.
pub static BAD_REQUEST_LOG: LogThrottle = LogThrottle::new(100, Duration::from_secs(10));

/// Log lines of requests kadmit could not answer (5xx), bounded as
/// [`BAD_REQUEST_LOG`] is: a flood of bodies can make every one a 503.
pub static ERROR_LOG: LogThrottle = LogThrottle::new(100, Duration::from_secs(10));

/// Why a request got an error status instead of an AdmissionReview response.
///
/// The `Display` text is the one-line `message` of the `Status` body. Fields
/// taken from the request are cut with [`excerpt::field`] when the rejection
/// is built, and [`Rejection::respond`] cuts the whole message again (a
/// decode error can quote a field value), so neither the log line nor the
/// body grows with the request.
#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    /// The body is not declared as JSON.
    #[error("unsupported content type {0:?}: send Content-Type: application/json")]
    ContentType(String),
    /// No `Content-Type` header at all.
    #[error("missing content type: send Content-Type: application/json")]
    MissingContentType,
    /// The body is compressed or otherwise encoded; kadmit reads only plain
    /// JSON (the API server never encodes webhook requests).
    #[error(
        "unsupported content encoding {0:?}: send the body unencoded (Content-Encoding: identity)"
    )]
    ContentEncoding(String),
    /// The body is larger than `--max-body-bytes`.
    #[error("request body is larger than the limit of {limit} bytes (--max-body-bytes)")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The review would take more memory to parse than
    /// [`crate::review::MAX_PARSED_BYTES`].
    #[error(
        "the review would take more than {limit} bytes of memory to parse (its JSON holds that many \
         small maps and lists); kadmit does not parse it"
    )]
    TooLargeParsed {
        /// The limit in bytes.
        limit: usize,
    },
    /// The connection failed while the body was being read.
    #[error("cannot read the request body: {0}")]
    Payload(String),
    /// The body did not arrive within `--request-timeout-secs`.
    #[error("request body not received within {secs} s (--request-timeout-secs)")]
    BodyTimeout {
        /// The timeout in seconds.
        secs: u64,
    },
    /// The bodies being read already hold the process-wide budget.
    #[error(
        "kadmit is busy: request bodies in progress hold its budget of {budget} bytes (--max-buffered-body-bytes); retry"
    )]
    Busy {
        /// The budget in bytes.
        budget: usize,
    },
    /// The body is not a usable AdmissionReview.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// `/validate/{ruleset}` or `/mutate/{ruleset}` names no loaded rule set.
    #[error("unknown rule set {name:?}: the loaded rule sets are {known}")]
    UnknownRuleSet {
        /// The name in the URL.
        name: String,
        /// The loaded rule-set names, comma-separated.
        known: String,
    },
    /// `/validate/{rulesets}` or `/mutate/{rulesets}` cannot name rule sets
    /// (`a..b`, a name twice, longer than a path segment may be).
    #[error("the path segment {segment:?} names no rule sets: {reason}")]
    RuleSetPath {
        /// The segment in the URL.
        segment: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No plan has been loaded yet (the rules did not compile at startup).
    #[error("no rule plan is loaded yet: the rule files have not compiled")]
    NotReady,
    /// The engine could not evaluate the review.
    #[error("cannot evaluate the review: {0}")]
    Evaluate(#[from] EvalError),
    /// No route has this path.
    #[error("no such path {0:?}")]
    NotFound(String),
    /// The path exists but not for this method.
    #[error("method {method} is not allowed on {path:?}: use {allowed}")]
    MethodNotAllowed {
        /// The request method.
        method: String,
        /// The request path.
        path: String,
        /// The method the path accepts.
        allowed: &'static str,
    },
}

impl Rejection {
    /// The HTTP status of the response.
    pub fn status(&self) -> StatusCode {
        match self {
            Rejection::ContentType(_)
            | Rejection::MissingContentType
            | Rejection::ContentEncoding(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Rejection::TooLarge { .. } | Rejection::TooLargeParsed { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            Rejection::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Rejection::Payload(_) | Rejection::Decode(_) => StatusCode::BAD_REQUEST,
            // A review whose object kadmit cannot read is bad input, not a
            // failure of kadmit.
            Rejection::Evaluate(EvalError::Object { .. }) => StatusCode::BAD_REQUEST,
            Rejection::Evaluate(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Rejection::UnknownRuleSet { .. }
            | Rejection::RuleSetPath { .. }
            | Rejection::NotFound(_) => StatusCode::NOT_FOUND,
            Rejection::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Rejection::NotReady | Rejection::Busy { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The Kubernetes `StatusReason` matching [`Rejection::status`].
    pub fn k8s_reason(&self) -> &'static str {
        match self.status() {
            StatusCode::BAD_REQUEST => "BadRequest",
            StatusCode::NOT_FOUND => "NotFound",
            StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
            StatusCode::REQUEST_TIMEOUT => "Timeout",
            StatusCode::PAYLOAD_TOO_LARGE => "RequestEntityTooLarge",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "UnsupportedMediaType",
            StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailable",
            _ => "InternalError",
        }
    }

    /// A fixed code for logs and the `reason` metric label.
    pub fn code(&self) -> &'static str {
        match self {
            Rejection::ContentType(_) | Rejection::MissingContentType => "content_type",
            Rejection::ContentEncoding(_) => "content_encoding",
            Rejection::TooLarge { .. } => "too_large",
            Rejection::TooLargeParsed { .. } => "too_large_parsed",
            Rejection::Payload(_) => "payload",
            Rejection::BodyTimeout { .. } => "body_timeout",
            Rejection::Busy { .. } => "body_budget",
            Rejection::Decode(error) => error.reason_code(),
            // Both name no loaded rule sets: one reason, one series.
            Rejection::UnknownRuleSet { .. } | Rejection::RuleSetPath { .. } => "unknown_rule_set",
            Rejection::NotReady => "not_ready",
            Rejection::Evaluate(error) => error.reason_code(),
            Rejection::NotFound(_) => "not_found",
            Rejection::MethodNotAllowed { .. } => "method",
        }
    }

    /// Logs the rejection (see [`BAD_REQUEST_LOG`]), counts it, and builds
    /// its `Status` response.
    ///
    /// Client mistakes (4xx) are warnings counted as bad requests; kadmit's
    /// own failures (5xx) are errors counted as review errors, since the API
    /// server then applies the webhook's failure policy.
    pub fn respond(&self, request: &HttpRequest) -> HttpResponse {
        let status = self.status();
        let code = self.code();
        let text = self.to_string();
        let message = excerpt::cut(&text, MAX_MESSAGE_BYTES);
        let method = excerpt::cut(request.method().as_str(), MAX_FIELD_BYTES);
        let path = excerpt::cut(request.path(), MAX_FIELD_BYTES);
        if status.is_server_error() {
            metrics::record_review_error(code);
            if let Some(unlogged) = ERROR_LOG.admit(Instant::now()) {
                tracing::error!(
                    reason = code,
                    status = status.as_u16(),
                    method = &*method,
                    path = &*path,
                    error = &*message,
                    not_logged_before = unlogged,
                    "Could not answer a request"
                );
            }
        } else {
            metrics::record_bad_request(code);
            if let Some(unlogged) = BAD_REQUEST_LOG.admit(Instant::now()) {
                tracing::warn!(
                    reason = code,
                    status = status.as_u16(),
                    method = &*method,
                    path = &*path,
                    error = &*message,
                    not_logged_before = unlogged,
                    "Refused a bad request"
                );
            }
        }
        let mut response = status_response(status, self.k8s_reason(), &message);
        if let Rejection::MethodNotAllowed { allowed, .. } = self {
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allowed));
        }
        response
    }
}

/// A `Status` failure response with `message` flattened to one line and cut
/// to [`MAX_MESSAGE_BYTES`].
///
/// Control characters (newlines from multi-line error texts) become spaces:
/// the API server shows the message inline in `kubectl` output.
pub fn status_response(status: StatusCode, reason: &str, message: &str) -> HttpResponse {
    let body = k8s_openapi::apimachinery::pkg::apis::meta::v1::Status {
        code: Some(i32::from(status.as_u16())),
        message: Some(one_line(&excerpt::cut(message, MAX_MESSAGE_BYTES))),
        reason: Some(reason.to_owned()),
        status: Some("Failure".to_owned()),
        ..Default::default()
    };
    // A struct of strings and a number always serializes.
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    HttpResponse::build(status)
        .content_type("application/json")
        .body(bytes)
}

fn one_line(message: &str) -> String {
    message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::body::MessageBody as _;

    fn body_json(response: HttpResponse) -> serde_json::Value {
        let bytes = response
            .into_body()
            .try_into_bytes()
            .expect("status bodies are complete bytes");
        serde_json::from_slice(&bytes).expect("status bodies are JSON")
    }

    #[test]
    fn status_body_is_a_kubernetes_status_on_one_line() {
        let response = status_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "first line\nsecond\tline",
        );
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            body_json(response),
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": "first line second line",
                "reason": "BadRequest", "code": 400})
        );
    }

    #[test]
    fn statuses_and_reasons_match() {
        let cases = [
            (Rejection::MissingContentType, 415, "UnsupportedMediaType"),
            (
                Rejection::ContentEncoding("gzip".into()),
                415,
                "UnsupportedMediaType",
            ),
            (
                Rejection::TooLarge { limit: 1 },
                413,
                "RequestEntityTooLarge",
            ),
            (Rejection::Decode(DecodeError::EmptyUid), 400, "BadRequest"),
            (
                Rejection::UnknownRuleSet {
                    name: "x".into(),
                    known: "a, b".into(),
                },
                404,
                "NotFound",
            ),
            (
                Rejection::MethodNotAllowed {
                    method: "GET".into(),
                    path: "/validate".into(),
                    allowed: "POST",
                },
                405,
                "MethodNotAllowed",
            ),
            (Rejection::NotReady, 503, "ServiceUnavailable"),
            (Rejection::Busy { budget: 1 }, 503, "ServiceUnavailable"),
            (
                Rejection::Evaluate(EvalError::Object {
                    field: "object",
                    message: "not an object".into(),
                }),
                400,
                "BadRequest",
            ),
            (
                Rejection::Evaluate(EvalError::PatchCheck("x".into())),
                500,
                "InternalError",
            ),
        ];
        for (rejection, status, reason) in cases {
            assert_eq!(rejection.status().as_u16(), status, "{rejection}");
            assert_eq!(rejection.k8s_reason(), reason, "{rejection}");
        }
    }

    /// Issue 11: a decode error can quote a field of any length; the Status
    /// message stays bounded and says it was cut.
    #[test]
    fn messages_quoting_the_request_are_cut() {
        let huge = "v".repeat(1 << 20);
        // As long a path as a URI may hold.
        let path = format!("/validate/{}", "p".repeat(60_000));
        let request = actix_web::test::TestRequest::post()
            .uri(&path)
            .to_http_request();
        let response = Rejection::Decode(DecodeError::ApiVersion(huge)).respond(&request);
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let body = body_json(response);
        let message = body["message"].as_str().expect("message");
        assert!(message.len() <= MAX_MESSAGE_BYTES, "{}", message.len());
        assert!(
            message.starts_with("unsupported apiVersion \"vvv"),
            "{message}"
        );
        assert!(message.ends_with(" bytes]"), "{message}");
    }
}
