//! Who may see the live view, and the rules every page follows.
//!
//! Sign-in: the server prints `/ui/?token=…` once; a request with the right `token` gets a
//! cookie and a 303 to the same path without the query, so the token leaves the address
//! bar and the history at once. The cookie value is not the token: it is a random value made
//! when the server starts (compared in constant time), so a cookie that leaks gives no
//! access to `/mcp`, and every cookie ends with the server. A bearer token works too (for
//! scripts). Anything else gets a 401 page saying how to sign in; the token is never
//! logged or echoed.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::View;
use super::pages;
use crate::access::random_hex;

const COOKIE: &str = "mcp_terminal_view";

/// The value of the sign-in cookie of this server run.
pub struct SignIn(String);

impl SignIn {
    pub fn new() -> Self {
        SignIn(random_hex(32))
    }

    fn cookie_ok(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(name, value)| {
                name == COOKIE && bool::from(value.as_bytes().ct_eq(self.0.as_bytes()))
            })
    }

    fn set_cookie(&self) -> String {
        format!("{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/ui", self.0)
    }
}

/// The `token` parameter of a query string, if there is one, percent-decoded.
fn token_parameter(query: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| *name == "token")
        .map(|(_, value)| percent_decode(value))
}

/// Every byte outside the URL-safe set as `%XX` (a token is printable ASCII).
pub fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every `/ui/` route: sign-in by `?token=`, else a valid cookie or bearer token, else 401.
pub async fn require_viewer(
    State(view): State<Arc<View>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(presented) = request.uri().query().and_then(token_parameter) {
        if !view.access.token.matches(&presented) {
            tracing::info!("refused a live view sign-in with a wrong token");
            return unauthorized();
        }
        let path = request.uri().path();
        let location = HeaderValue::from_str(path).unwrap_or(HeaderValue::from_static("/ui/"));
        return (
            StatusCode::SEE_OTHER,
            [
                (header::LOCATION, location),
                (
                    header::SET_COOKIE,
                    HeaderValue::from_str(&view.sign_in.set_cookie())
                        .unwrap_or(HeaderValue::from_static("")),
                ),
            ],
        )
            .into_response();
    }
    let headers = request.headers();
    if view.sign_in.cookie_ok(headers) || view.access.bearer_ok(headers) {
        return next.run(request).await;
    }
    unauthorized()
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        pages::sign_in_needed(),
    )
        .into_response()
}

/// Read-only by construction: nothing under `/ui/` takes any method but GET and HEAD.
pub async fn only_reads(request: Request, next: Next) -> Response {
    if request.method() == Method::GET || request.method() == Method::HEAD {
        return next.run(request).await;
    }
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "GET, HEAD")],
        "Method Not Allowed: the live view is read-only.\n",
    )
        .into_response()
}

/// Headers on every `/ui/` response: nothing from another origin, no inline script or
/// style, no sniffing, no framing, no referrer, no caching of what a session printed.
pub async fn page_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let fixed = [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_runs_cookie_passes() {
        let sign_in = SignIn::new();
        let mut headers = HeaderMap::new();
        assert!(!sign_in.cookie_ok(&headers));
        let good = format!("other=1; {COOKIE}={}", sign_in.0);
        headers.insert(header::COOKIE, HeaderValue::from_str(&good).unwrap());
        assert!(sign_in.cookie_ok(&headers));
        let other = SignIn::new();
        assert!(!other.cookie_ok(&headers));
        let cookie = sign_in.set_cookie();
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    }

    #[test]
    fn the_token_parameter_is_found_among_others() {
        assert_eq!(token_parameter("a=1&token=xyz").as_deref(), Some("xyz"));
        assert_eq!(token_parameter("tokens=1"), None);
        assert_eq!(token_parameter(""), None);
        let token = "a%b&c=d+e/f~g";
        let query = format!("token={}", percent_encode(token));
        assert_eq!(token_parameter(&query).as_deref(), Some(token));
    }
}
