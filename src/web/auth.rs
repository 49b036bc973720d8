//! Who may see the live view, and the rules every page follows.
//!
//! Sign-in: the server prints `/ui/?code=…` with a one-time code (spent by its first use,
//! void after `WEB_SIGN_IN_CODE_TTL`). A request presenting a live code gets a cookie and a
//! 303 to the same page in the view's own place, `/ui/PLACE/`, without the query.
//!
//! The place is a random path segment made when the server starts, and the cookie's
//! `Path`: a browser sends a cookie to every port of its host, so a page served on another
//! port of this machine could have the browser send it `/ui/` cookies, but it cannot name a
//! place it does not know. (Two views on one machine keep their own cookies the same way.) The code opens only the view, never `/mcp`; the
//! cookie it buys holds the view credential, a random value made when the server starts
//! (compared in constant time), so neither a code left in a browser's history nor a cookie
//! that leaks gives access to `/mcp`, and every cookie ends with the server. A bearer token
//! works too, for reading (scripts): owner actions take the cookie, and a fresh code the
//! owner key of the address file. A `token` in the query signs nobody in. Anything else gets a 401
//! page saying how to sign in; no code or token is ever logged or echoed.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::View;
use super::pages;
use crate::access::random_hex;
use crate::access::refusals::{Refusals, unlogged};
use crate::limits::{WEB_SIGN_IN_CODE_TTL, WEB_SIGN_IN_CODES_MAX};

const COOKIE: &str = "mcp_terminal_view";

/// The view credential of this server run (the cookie's value), the one-time codes that
/// buy it, and the owner key that asks for a code.
pub struct SignIn {
    credential: String,
    /// What `mcp-terminal web-url` presents for a fresh code: written only to the address
    /// file beside the config (mode 0600), never the bearer token, which is the MCP
    /// client's; so a client holding the token alone cannot sign in as the owner.
    owner_key: String,
    /// The path segment the view lives under, `/ui/PLACE/`, for browsers.
    place: String,
    codes: Mutex<Vec<Code>>,
}

struct Code {
    value: String,
    expires: Instant,
}

fn same(a: &str, b: &str) -> bool {
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

impl SignIn {
    pub fn new() -> Self {
        SignIn {
            credential: random_hex(32),
            owner_key: random_hex(32),
            place: random_hex(16),
            codes: Mutex::new(Vec::new()),
        }
    }

    /// A fresh one-time code. Past `WEB_SIGN_IN_CODES_MAX` unspent codes the oldest is void.
    pub fn issue(&self) -> String {
        self.issue_at(Instant::now())
    }

    fn issue_at(&self, now: Instant) -> String {
        let value = random_hex(16);
        let mut codes = self.codes.lock().unwrap_or_else(|e| e.into_inner());
        codes.retain(|c| c.expires > now);
        if codes.len() >= WEB_SIGN_IN_CODES_MAX {
            codes.remove(0);
        }
        codes.push(Code {
            value: value.clone(),
            expires: now + WEB_SIGN_IN_CODE_TTL,
        });
        value
    }

    /// Whether `presented` is a live code; a live code is spent here.
    fn redeem(&self, presented: &str, now: Instant) -> bool {
        let mut codes = self.codes.lock().unwrap_or_else(|e| e.into_inner());
        codes.retain(|c| c.expires > now);
        // Every code is compared, so the time taken says nothing about which one matched.
        let found = codes.iter().enumerate().fold(None, |found, (i, c)| {
            if same(&c.value, presented) {
                Some(i)
            } else {
                found
            }
        });
        found.map(|i| codes.remove(i)).is_some()
    }

    /// The key `mcp-terminal web-url` asks for a sign-in code with.
    pub fn owner_key(&self) -> &str {
        &self.owner_key
    }

    /// Whether the request carries `Authorization: Bearer <the owner key>`.
    pub fn owner_key_ok(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(header::AUTHORIZATION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(|v| v.split_once(' '))
            .any(|(scheme, presented)| {
                scheme.eq_ignore_ascii_case("bearer") && same(presented.trim(), &self.owner_key)
            })
    }

    /// Whether the request carries the view's cookie: a browser the owner signed in.
    pub fn cookie_ok(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(name, value)| name == COOKIE && same(value, &self.credential))
    }

    fn set_cookie(&self) -> String {
        format!(
            "{COOKIE}={}; HttpOnly; SameSite=Strict; Path={}",
            self.credential,
            self.base()
        )
    }

    /// The view's own path, `/ui/PLACE/`: every page a browser is sent to is under it.
    pub fn base(&self) -> String {
        format!("/ui/{}/", self.place)
    }

    /// `path` (under `/ui`) in the view's place: `/ui/sessions/x` is `/ui/PLACE/sessions/x`.
    fn placed(&self, path: &str) -> String {
        let rest = path.strip_prefix("/ui").unwrap_or_default();
        let rest = rest.strip_prefix('/').unwrap_or(rest);
        let rest = rest
            .strip_prefix(self.place.as_str())
            .filter(|r| r.is_empty() || r.starts_with('/'))
            .map_or(rest, |r| r.trim_start_matches('/'));
        format!("{}{rest}", self.base())
    }
}

/// The `code` parameter of a query string, if there is one, percent-decoded.
fn code_parameter(query: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| *name == "code")
        .map(|(_, value)| percent_decode(value))
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

/// Every `/ui/` route: sign-in by `?code=`, else a valid cookie or bearer token, else 401.
pub async fn require_viewer(
    State(view): State<Arc<View>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(presented) = request.uri().query().and_then(code_parameter) {
        if !view.sign_in.redeem(&presented, Instant::now()) {
            static LOGGED: Refusals = Refusals::new();
            LOGGED.log(|more| {
                tracing::info!(
                    "refused a live view sign-in with a spent, expired or unknown code{}",
                    unlogged(more)
                );
            });
            return unauthorized(true);
        }
        crate::access::listener::prove(&request);
        let placed = view.sign_in.placed(request.uri().path());
        let location = HeaderValue::from_str(&placed).unwrap_or(HeaderValue::from_static("/ui/"));
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
        crate::access::listener::prove(&request);
        return next.run(request).await;
    }
    unauthorized(false)
}

/// What anyone may fetch (the style sheet, script and icon of the sign-in page): served
/// regardless, but a request that carries the view's cookie or the token still marks its
/// connection as a signed-in one, as every other route does.
pub async fn note_viewer(State(view): State<Arc<View>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if view.sign_in.cookie_ok(headers) || view.access.bearer_ok(headers) {
        crate::access::listener::prove(&request);
    }
    next.run(request).await
}

fn unauthorized(spent_code: bool) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        pages::sign_in_needed(spent_code),
    )
        .into_response()
}

/// Read-only unless the owner turned control on: without `--web-control` nothing under
/// `/ui/` takes any method but GET and HEAD.
pub async fn only_reads(State(view): State<Arc<View>>, request: Request, next: Next) -> Response {
    let method = request.method();
    if method == Method::GET
        || method == Method::HEAD
        || (method == Method::POST && view.settings.control)
    {
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
            "default-src 'self'; base-uri 'self'; form-action 'none'; frame-ancestors 'none'",
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
        let good = format!("other=1; {COOKIE}={}", sign_in.credential);
        headers.insert(header::COOKIE, HeaderValue::from_str(&good).unwrap());
        assert!(sign_in.cookie_ok(&headers));
        let other = SignIn::new();
        assert!(!other.cookie_ok(&headers));
        let cookie = sign_in.set_cookie();
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
        assert!(
            cookie.ends_with(&format!("; Path=/ui/{}/", sign_in.place)),
            "{cookie}"
        );
        assert_eq!(sign_in.place.len(), 32);
        assert_ne!(sign_in.place, other.place, "each run has its own place");
    }

    #[test]
    fn a_signed_in_page_is_the_same_page_in_the_place() {
        let sign_in = SignIn::new();
        let base = sign_in.base();
        for (path, rest) in [
            ("/ui/", ""),
            ("/ui", ""),
            ("/ui/sessions/x", "sessions/x"),
            ("/ui/sessions/x/", "sessions/x/"),
        ] {
            assert_eq!(sign_in.placed(path), format!("{base}{rest}"), "{path}");
            let in_place = format!("{base}{rest}");
            assert_eq!(sign_in.placed(&in_place), in_place, "{in_place}");
        }
        let near = format!("/ui/{}x/y", sign_in.place);
        assert_eq!(sign_in.placed(&near), format!("{base}{}x/y", sign_in.place));
    }

    #[test]
    fn a_code_signs_in_once_and_only_before_it_expires() {
        let sign_in = SignIn::new();
        let now = Instant::now();
        let code = sign_in.issue_at(now);
        assert_eq!(code.len(), 32);
        assert!(!sign_in.redeem("0".repeat(32).as_str(), now));
        assert!(sign_in.redeem(&code, now), "a fresh code");
        assert!(!sign_in.redeem(&code, now), "spent by its first use");

        let code = sign_in.issue_at(now);
        let late = now + WEB_SIGN_IN_CODE_TTL;
        assert!(!sign_in.redeem(&code, late), "void once its time is up");
        let code = sign_in.issue_at(now);
        let almost = late - std::time::Duration::from_millis(1);
        assert!(sign_in.redeem(&code, almost));
    }

    #[test]
    fn past_the_cap_the_oldest_unspent_code_is_void() {
        let sign_in = SignIn::new();
        let now = Instant::now();
        let codes: Vec<String> = (0..=WEB_SIGN_IN_CODES_MAX)
            .map(|_| sign_in.issue_at(now))
            .collect();
        assert!(!sign_in.redeem(&codes[0], now));
        assert!(codes[1..].iter().all(|code| sign_in.redeem(code, now)));
    }

    #[test]
    fn the_code_parameter_is_found_among_others() {
        assert_eq!(code_parameter("a=1&code=xyz").as_deref(), Some("xyz"));
        assert_eq!(code_parameter("codes=1"), None);
        assert_eq!(code_parameter("token=abc"), None);
        assert_eq!(code_parameter(""), None);
        let query = "code=a%25b%26c%3Dd+e%2Ff~g";
        assert_eq!(code_parameter(query).as_deref(), Some("a%b&c=d e/f~g"));
    }
}
