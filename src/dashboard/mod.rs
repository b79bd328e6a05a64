//! The built-in dashboard: one page (its script and stylesheet compiled into
//! the binary), the metric history its charts read ([`summary`]) and the
//! ring of recent denials it lists ([`denials`]).
//!
//! The page loads nothing from elsewhere, so it works in a cluster without
//! internet access, through `kubectl port-forward` or the API server's
//! service proxy (every URL it uses is relative); [`CONTENT_SECURITY_POLICY`]
//! holds it to that. The operations listener mounts it (`GET /dashboard`,
//! `/api/summary`, `/api/denials`; `src/server/dashboard_routes.rs`); the
//! request path feeds the denials ring.

pub mod denials;
pub mod summary;

/// The page.
pub const PAGE_HTML: &str = include_str!("assets/index.html");
/// Its script.
pub const SCRIPT_JS: &str = include_str!("assets/dashboard.js");
/// Its stylesheet.
pub const STYLE_CSS: &str = include_str!("assets/dashboard.css");

/// What the page may load: only this origin, no CDN, no inline script, no
/// external fonts.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";
