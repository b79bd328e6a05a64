//! Who may use the operations listener: an optional bearer token read from
//! a file (`--ops-token-file`) and an optional client certificate
//! (`--ops-client-ca`), checked before every route but the probes and the
//! dashboard's static page.
//!
//! # What stays open
//!
//! `/healthz` and `/readyz`, so that kubelet probes work without
//! credentials; and `/dashboard` with its script and stylesheet, which are
//! constants compiled into the binary, the same for everyone and free of
//! data. Everything that carries data (`/metrics`, `/status`, `/api/*`) and
//! every unknown path needs credentials. A browser cannot add a bearer
//! header to a page load, but the dashboard's own `fetch` calls can: the
//! page asks for the token, keeps it in the tab's `sessionStorage` and sends
//! it as `Authorization: Bearer`. No cookie (nothing for another site to
//! make the browser send) and no token in a URL (nothing in histories,
//! proxy logs or `Referer`).
//!
//! # The token file
//!
//! Read whole at startup, at most [`MAX_TOKEN_FILE_BYTES`]; surrounding
//! whitespace (the newline of `echo token > file`) is not part of the token.
//! A missing, unreadable, oversize or empty file, or one holding a byte a
//! bearer token cannot carry, is a startup error: it never means "no
//! authentication". Like the serving certificate ([`super::tls::FileCert`]),
//! the file's metadata is compared with what was loaded last at each request
//! that needs the token, and the file is read again when it changed (a
//! Secret update swaps the kubelet's `..data` symlink). A changed file that
//! cannot be used is logged once and the previous token stays in force.
//! Only the SHA-256 digest of the token is kept, and a presented token is
//! compared digest to digest in constant time, so neither the time taken
//! nor the length of a guess tells anything about the token. The token is
//! never logged.
//!
//! # Both configured
//!
//! With a token file and a client CA, either credential is enough: a
//! verified client certificate, or the token. A client certificate that does
//! not verify fails the TLS handshake, whatever the path.

use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpRequest, HttpResponse, web};
use arc_swap::ArcSwap;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use super::status::status_response;
use super::tls::{DisplayChain, FileStamp};
use crate::metrics;

/// Largest token file accepted. Real tokens are 32 to a few hundred bytes;
/// the bound keeps a wrong path (a log file, `/dev/zero`) from being read
/// into memory.
pub const MAX_TOKEN_FILE_BYTES: usize = 4096;

/// Paths answered without credentials: the probes and the dashboard's
/// static page (see the [module documentation](self)).
const OPEN_PATHS: [&str; 5] = [
    "/healthz",
    "/readyz",
    "/dashboard",
    "/dashboard/dashboard.js",
    "/dashboard/dashboard.css",
];

/// The `WWW-Authenticate` challenge of a request without a token (RFC 6750).
const CHALLENGE: &str = "Bearer realm=\"kadmit\"";

/// The challenge of a request with a wrong token.
const CHALLENGE_INVALID: &str = "Bearer realm=\"kadmit\", error=\"invalid_token\"";

/// Why a token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file cannot be opened or read.
    #[error("cannot read the token file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is over [`MAX_TOKEN_FILE_BYTES`].
    #[error("the token file {path} is larger than {max} bytes; is it the right file?")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The bound.
        max: usize,
    },
    /// The file holds only whitespace.
    #[error("the token file {path} is empty; an empty token would let anyone in")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The token holds a byte outside visible ASCII.
    #[error(
        "the token file {path} holds a byte a bearer token cannot carry at offset {offset} \
         (only visible ASCII; generate one with `head -c 32 /dev/urandom | base64`)"
    )]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Offset of the first bad byte in the file.
        offset: usize,
    },
}

/// The SHA-256 digest of a token.
type TokenDigest = [u8; 32];

fn digest(token: &[u8]) -> TokenDigest {
    Sha256::digest(token).into()
}

/// A bearer token in a file, read again when the file changes.
pub struct TokenFile {
    path: PathBuf,
    current: ArcSwap<TokenDigest>,
    /// Metadata of the file last loaded (or last found unusable).
    seen: Mutex<Option<FileStamp>>,
}

impl fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the token, not even its digest.
        f.debug_struct("TokenFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl TokenFile {
    /// Reads the token now; fails when the file cannot be used, so a bad
    /// file is reported at startup rather than by every scrape.
    pub fn load(path: impl Into<PathBuf>) -> Result<Self, TokenError> {
        let path = path.into();
        // The stamp before the read: a change in between is seen next time.
        let stamp = FileStamp::of(&path);
        let token = read_token(&path)?;
        Ok(TokenFile {
            path,
            current: ArcSwap::from_pointee(token),
            seen: Mutex::new(stamp),
        })
    }

    /// Whether `presented` is the current token (after reading the file
    /// again if it changed). Constant time in the content of both.
    pub fn accepts(&self, presented: &[u8]) -> bool {
        self.refresh();
        if presented.len() > MAX_TOKEN_FILE_BYTES {
            // Longer than any token the file can hold: no need to hash it.
            return false;
        }
        let expected = self.current.load();
        digest(presented).ct_eq(&expected[..]).into()
    }

    fn refresh(&self) {
        let stamp = FileStamp::of(&self.path);
        // A poisoned lock only means another request panicked mid-reload;
        // the stamp it guards is still a valid value.
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if *seen == stamp {
            return;
        }
        *seen = stamp;
        match read_token(&self.path) {
            Ok(token) => {
                self.current.store(Arc::new(token));
                tracing::info!(
                    token_file = %self.path.display(),
                    "Loaded the changed operations token"
                );
            }
            Err(error) => tracing::warn!(
                error = %DisplayChain(&error),
                token_file = %self.path.display(),
                "Kept the previous operations token: the changed file cannot be used"
            ),
        }
    }
}

fn read_token(path: &Path) -> Result<TokenDigest, TokenError> {
    let read_error = |source| TokenError::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut bytes = Vec::new();
    // One byte past the bound tells "too large" from "exactly the bound".
    file.take(MAX_TOKEN_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() > MAX_TOKEN_FILE_BYTES {
        return Err(TokenError::TooLarge {
            path: path.to_owned(),
            max: MAX_TOKEN_FILE_BYTES,
        });
    }
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let token = bytes[start..].trim_ascii_end();
    if token.is_empty() {
        return Err(TokenError::Empty {
            path: path.to_owned(),
        });
    }
    if let Some(offset) = token.iter().position(|b| !b.is_ascii_graphic()) {
        return Err(TokenError::Invalid {
            path: path.to_owned(),
            offset: start + offset,
        });
    }
    let digest = digest(token);
    // The token's bytes are not needed any more; do not leave them around.
    bytes.fill(0);
    Ok(digest)
}

/// Marks a connection whose client presented a certificate that the
/// operations client CA verified (set by the listener's `on_connect`).
#[derive(Debug, Clone, Copy)]
pub struct VerifiedClient;

/// Who may use the operations listener.
#[derive(Debug, Default)]
pub struct OpsAccess {
    token: Option<TokenFile>,
    client_certificate: bool,
}

/// Why a request was refused, with its `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    MissingToken,
    InvalidToken,
    MissingClientCertificate,
}

impl Refusal {
    fn code(self) -> &'static str {
        match self {
            Refusal::MissingToken => "missing_token",
            Refusal::InvalidToken => "invalid_token",
            Refusal::MissingClientCertificate => "missing_client_certificate",
        }
    }

    fn respond(self, with_client_ca: bool) -> HttpResponse {
        let alternative = if with_client_ca {
            ", or a client certificate signed by --ops-client-ca"
        } else {
            ""
        };
        let (status, reason, message, challenge) = match self {
            Refusal::MissingToken => (
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                format!(
                    "this path needs the --ops-token-file token as `Authorization: Bearer <token>`{alternative}"
                ),
                Some(CHALLENGE),
            ),
            Refusal::InvalidToken => (
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                format!("the bearer token is not the --ops-token-file token{alternative}"),
                Some(CHALLENGE_INVALID),
            ),
            Refusal::MissingClientCertificate => (
                StatusCode::FORBIDDEN,
                "Forbidden",
                "this path needs a client certificate signed by --ops-client-ca".to_owned(),
                None,
            ),
        };
        let mut response = status_response(status, reason, &message);
        if let Some(challenge) = challenge {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
        }
        response
    }
}

impl OpsAccess {
    /// Everyone may use every path (no `--ops-token-file`, no
    /// `--ops-client-ca`).
    pub fn open() -> Self {
        OpsAccess::default()
    }

    /// Requests need `token` or, with `client_certificate`, a verified
    /// client certificate; both `None`/`false` is [`OpsAccess::open`].
    pub fn new(token: Option<TokenFile>, client_certificate: bool) -> Self {
        OpsAccess {
            token,
            client_certificate,
        }
    }

    /// Whether no credential is asked for.
    pub fn is_open(&self) -> bool {
        self.token.is_none() && !self.client_certificate
    }

    fn check(&self, request: &HttpRequest) -> Result<(), Refusal> {
        if self.is_open() || OPEN_PATHS.contains(&request.path()) {
            return Ok(());
        }
        if self.client_certificate && request.conn_data::<VerifiedClient>().is_some() {
            return Ok(());
        }
        let Some(token) = &self.token else {
            return Err(Refusal::MissingClientCertificate);
        };
        // actix bounds the whole request head (128 KiB, 431 beyond), and
        // `accepts` refuses anything longer than a token file can hold
        // before hashing it.
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| bearer(value.as_bytes()))
            .ok_or(Refusal::MissingToken)?;
        if token.accepts(presented) {
            Ok(())
        } else {
            Err(Refusal::InvalidToken)
        }
    }
}

/// The credentials of an `Authorization: Bearer <token>` value; `None` for
/// another scheme or no credentials (the scheme is case-insensitive).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let space = value.iter().position(|b| *b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// The operations listener's middleware: answers a request without the
/// credentials [`OpsAccess`] asks for with 401 (`WWW-Authenticate: Bearer`)
/// or 403, a `Status` body like the listener's other errors, and a count
/// under `kadmit_ops_requests_refused_total{reason}`.
///
/// Without an [`OpsAccess`] in the app data it refuses everything but the
/// open paths: a wiring mistake must not open the port.
pub async fn guard(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody + 'static>>, actix_web::Error> {
    let checked = match request.app_data::<web::Data<OpsAccess>>() {
        Some(access) => access
            .check(request.request())
            .map_err(|refusal| (refusal, access.client_certificate)),
        None if OPEN_PATHS.contains(&request.path()) => Ok(()),
        None => Err((Refusal::MissingToken, false)),
    };
    match checked {
        Ok(()) => Ok(next.call(request).await?.map_into_left_body()),
        Err((refusal, with_client_ca)) => {
            metrics::record_ops_refusal(refusal.code());
            tracing::debug!(
                reason = refusal.code(),
                path = %crate::excerpt::field(request.path()),
                "Refused an operations request without valid credentials"
            );
            let response = refusal.respond(with_client_ca);
            Ok(request.into_response(response).map_into_right_body())
        }
    }
}

#[cfg(test)]
mod tests {
    use actix_web::test::{TestRequest, call_service, init_service, read_body};
    use actix_web::{App, middleware};

    use super::*;

    fn token_file(dir: &Path, contents: &[u8]) -> PathBuf {
        let path = dir.join("token");
        std::fs::write(&path, contents).expect("write token");
        path
    }

    /// Replaces the file by rename, as the kubelet's symlink swap and
    /// atomic writers do: a new inode.
    fn replace(path: &Path, contents: &[u8]) {
        let next = path.with_extension("next");
        std::fs::write(&next, contents).expect("write");
        std::fs::rename(&next, path).expect("rename");
    }

    #[test]
    fn the_token_is_trimmed_and_compared_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = TokenFile::load(token_file(dir.path(), b"  s3cret-token\n")).expect("load");
        assert!(file.accepts(b"s3cret-token"));
        for wrong in [&b"s3cret-toke"[..], b"s3cret-token2", b"", b"S3CRET-TOKEN"] {
            assert!(!file.accepts(wrong), "{:?}", String::from_utf8_lossy(wrong));
        }
        assert!(!file.accepts(&[b'a'; MAX_TOKEN_FILE_BYTES + 1]));
    }

    #[test]
    fn an_unusable_file_is_an_error_at_startup() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cases: [(&[u8], &str); 4] = [
            (b"", "is empty"),
            (b" \n\t\n", "is empty"),
            (b"two words", "at offset 3"),
            (&[b'x'; MAX_TOKEN_FILE_BYTES + 1], "larger than 4096 bytes"),
        ];
        for (contents, needle) in cases {
            let error = TokenFile::load(token_file(dir.path(), contents)).expect_err("refused");
            let text = error.to_string();
            assert!(text.contains(needle), "{text}");
            assert!(text.contains("token"), "{text}");
        }
        // Exactly the bound is still a token.
        let at_bound = TokenFile::load(token_file(dir.path(), &[b'x'; MAX_TOKEN_FILE_BYTES]))
            .expect("at the bound");
        assert!(at_bound.accepts(&[b'x'; MAX_TOKEN_FILE_BYTES]));
        let missing = TokenFile::load(dir.path().join("none")).expect_err("missing");
        assert!(matches!(missing, TokenError::Read { .. }), "{missing}");
    }

    #[test]
    fn a_replaced_file_is_followed_and_a_bad_one_keeps_the_old_token() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = token_file(dir.path(), b"first\n");
        let file = TokenFile::load(&path).expect("load");
        assert!(file.accepts(b"first"));

        replace(&path, b"second\n");
        assert!(file.accepts(b"second"));
        assert!(!file.accepts(b"first"));

        replace(&path, b"");
        assert!(file.accepts(b"second"), "an empty file keeps the token");
        replace(&path, b"third");
        assert!(file.accepts(b"third"));
    }

    #[test]
    fn the_debug_form_holds_no_token() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = TokenFile::load(token_file(dir.path(), b"do-not-print")).expect("load");
        let debug = format!("{file:?}");
        assert!(!debug.contains("do-not-print"), "{debug}");
    }

    #[test]
    fn bearer_credentials_are_parsed_case_insensitively() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"BEARER abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer"), None);
        assert_eq!(bearer(b"Bearer   "), None);
        assert_eq!(bearer(b"Bearerabc"), None);
    }

    async fn call(
        access: Option<OpsAccess>,
        path: &str,
        authorization: Option<&str>,
    ) -> (u16, String, String) {
        let mut app = App::new();
        if let Some(access) = access {
            app = app.app_data(web::Data::new(access));
        }
        let app = init_service(
            app.wrap(middleware::from_fn(guard))
                .default_service(web::to(|| async { HttpResponse::Ok().body("served") })),
        )
        .await;
        let mut request = TestRequest::get().uri(path);
        if let Some(value) = authorization {
            request = request.insert_header((header::AUTHORIZATION, value));
        }
        let response = call_service(&app, request.to_request()).await;
        let status = response.status().as_u16();
        let challenge = response
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let body = String::from_utf8_lossy(&read_body(response).await).into_owned();
        (status, challenge, body)
    }

    fn with_token(dir: &Path) -> OpsAccess {
        OpsAccess::new(
            Some(TokenFile::load(token_file(dir, b"tok\n")).expect("load")),
            false,
        )
    }

    #[actix_web::test]
    async fn data_paths_need_the_token_and_probes_do_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        for path in [
            "/metrics",
            "/status",
            "/api/denials",
            "/api/summary",
            "/nope",
        ] {
            let (status, challenge, body) = call(Some(with_token(dir.path())), path, None).await;
            assert_eq!(status, 401, "{path}");
            assert_eq!(challenge, CHALLENGE, "{path}");
            let status_body: serde_json::Value = serde_json::from_str(&body).expect("JSON");
            assert_eq!(status_body["kind"], "Status", "{body}");
            assert_eq!(status_body["code"], 401, "{body}");

            let (status, challenge, _) =
                call(Some(with_token(dir.path())), path, Some("Bearer nope")).await;
            assert_eq!(status, 401, "{path}");
            assert!(challenge.contains("invalid_token"), "{challenge}");

            let (status, _, body) =
                call(Some(with_token(dir.path())), path, Some("Bearer tok")).await;
            assert_eq!((status, body.as_str()), (200, "served"), "{path}");
        }
        for path in OPEN_PATHS {
            let (status, _, body) = call(Some(with_token(dir.path())), path, None).await;
            assert_eq!((status, body.as_str()), (200, "served"), "{path}");
        }
    }

    #[actix_web::test]
    async fn another_scheme_is_no_token() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (status, challenge, _) = call(
            Some(with_token(dir.path())),
            "/metrics",
            Some("Basic dG9rOnRvaw=="),
        )
        .await;
        assert_eq!(status, 401);
        assert_eq!(challenge, CHALLENGE);
    }

    #[actix_web::test]
    async fn a_client_ca_alone_answers_403_without_a_certificate() {
        let (status, challenge, body) = call(
            Some(OpsAccess::new(None, true)),
            "/metrics",
            Some("Bearer tok"),
        )
        .await;
        assert_eq!(status, 403, "{body}");
        assert!(challenge.is_empty());
        assert!(body.contains("--ops-client-ca"), "{body}");
    }

    #[actix_web::test]
    async fn open_access_serves_everything_and_missing_wiring_serves_nothing() {
        let (status, _, _) = call(Some(OpsAccess::open()), "/metrics", None).await;
        assert_eq!(status, 200);
        let (status, _, _) = call(None, "/metrics", None).await;
        assert_eq!(status, 401);
        let (status, _, _) = call(None, "/healthz", None).await;
        assert_eq!(status, 200);
    }
}
