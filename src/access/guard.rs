//! Who may talk to the HTTP server: the browser rules (a loopback `Host` against DNS
//! rebinding, a loopback or owner-allowed `Origin` against cross-site requests) for every
//! route, and the bearer token for `/mcp`. Refusals say what is wrong but never echo the
//! `Authorization` header.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Token;
use super::refusals::{Refusals, unlogged};

pub struct Access {
    pub token: Token,
    pub allow_remote: bool,
    /// `--allow-origin` values, lowercased, without a trailing slash.
    pub allowed_origins: Vec<String>,
}

impl Access {
    pub fn new(token: Token, allow_remote: bool, allowed_origins: &[String]) -> Self {
        Access {
            token,
            allow_remote,
            allowed_origins: allowed_origins
                .iter()
                .map(|o| normalise_origin(o))
                .collect(),
        }
    }

    /// Why the request's `Host` or `Origin` is refused, if it is, and with what status.
    /// `target` is the authority of a request target in absolute form
    /// (`POST http://host/mcp`), which names the host in place of `Host` (RFC 9112 §3.2.2).
    /// Two `Host` lines are a bad request (RFC 9112 §3.2), two `Origin` lines a foreign
    /// origin: a check of one of them would pass what the other names.
    fn browser_refusal(
        &self,
        headers: &HeaderMap,
        target: Option<&str>,
    ) -> Option<(StatusCode, &'static str)> {
        let mut hosts = headers.get_all(header::HOST).iter();
        let host = hosts.next().and_then(|h| h.to_str().ok());
        if hosts.next().is_some() {
            return Some((
                StatusCode::BAD_REQUEST,
                "the request has more than one Host header",
            ));
        }
        let host = target.or(host);
        if !self.allow_remote && !host.is_some_and(is_loopback_authority) {
            return Some((
                StatusCode::FORBIDDEN,
                "the Host header does not name a loopback address",
            ));
        }
        let mut origins = headers.get_all(header::ORIGIN).iter();
        let origin = origins.next()?;
        if origins.next().is_some() {
            return Some((
                StatusCode::FORBIDDEN,
                "the request has more than one Origin header",
            ));
        }
        let origin = normalise_origin(origin.to_str().unwrap_or("?"));
        let loopback = origin
            .strip_prefix("http://")
            .is_some_and(|authority| !authority.contains('/') && is_loopback_authority(authority));
        if loopback || self.allowed_origins.contains(&origin) {
            None
        } else {
            Some((
                StatusCode::FORBIDDEN,
                "the Origin header is neither a loopback origin nor one given with --allow-origin",
            ))
        }
    }

    /// True when the request carries `Authorization: Bearer <the token>`.
    pub fn bearer_ok(&self, headers: &HeaderMap) -> bool {
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .is_some_and(|(scheme, presented)| {
                scheme.eq_ignore_ascii_case("bearer") && self.token.matches(presented.trim())
            })
    }
}

fn normalise_origin(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}

/// `localhost`, a loopback IPv4 address or `[::1]`, with or without a port.
fn is_loopback_authority(authority: &str) -> bool {
    let host = if let Some(rest) = authority.strip_prefix('[') {
        match rest.split_once(']') {
            Some((host, port)) if port.is_empty() || is_port(port) => host,
            _ => return false,
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) if is_port(port) => host,
            Some(_) => return false,
            None => authority,
        }
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn is_port(text: &str) -> bool {
    text.strip_prefix(':')
        .unwrap_or(text)
        .parse::<u16>()
        .is_ok()
}

/// Every route: 403 for a foreign `Host` (unless `--allow-remote`) or `Origin`.
pub async fn browser_rules(
    State(access): State<Arc<Access>>,
    request: Request,
    next: Next,
) -> Response {
    let target = request.uri().authority().map(|a| a.as_str());
    if let Some((status, why)) = access.browser_refusal(request.headers(), target) {
        static LOGGED: Refusals = Refusals::new();
        LOGGED.log(|more| {
            let (method, path) = (request.method(), request.uri().path());
            tracing::warn!("refused a {method} {path}: {why}{}", unlogged(more));
        });
        let reason = status.canonical_reason().unwrap_or("Refused");
        return (status, format!("{reason}: {why}.\n")).into_response();
    }
    next.run(request).await
}

/// `/mcp`: 401 with `WWW-Authenticate: Bearer` without the token. A request that passes
/// goes on without its `Authorization` header, so no layer below (rmcp's request logging,
/// the request parts handed to tools) ever holds the token.
pub async fn require_bearer(
    State(access): State<Arc<Access>>,
    mut request: Request,
    next: Next,
) -> Response {
    if access.bearer_ok(request.headers()) {
        request.headers_mut().remove(header::AUTHORIZATION);
        super::listener::prove(&request);
        return next.run(request).await;
    }
    static LOGGED: Refusals = Refusals::new();
    LOGGED.log(|more| {
        tracing::info!(
            "refused a request to /mcp without a valid bearer token{}",
            unlogged(more)
        );
    });
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "Unauthorized: send `Authorization: Bearer <token>` with the token from the \
         server's token file.\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn access(allow_remote: bool) -> Access {
        let dir = tempfile::tempdir().unwrap();
        let (token, _) = Token::load_or_create(&dir.path().join("t")).unwrap();
        Access::new(
            token,
            allow_remote,
            &["https://App.example:8443/".to_string()],
        )
    }

    fn headers(host: Option<&str>, origin: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(host) = host {
            h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        }
        if let Some(origin) = origin {
            h.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
        }
        h
    }

    #[test]
    fn loopback_hosts_pass_and_others_are_refused_unless_remote_is_allowed() {
        let local = access(false);
        for host in [
            "127.0.0.1:8765",
            "localhost",
            "LOCALHOST:1",
            "[::1]:80",
            "127.1.2.3",
        ] {
            assert_eq!(
                local.browser_refusal(&headers(Some(host), None), None),
                None,
                "{host}"
            );
        }
        for host in [
            "evil.example",
            "evil.example:8765",
            "10.0.0.1:80",
            "[::2]:1",
            "127.0.0.1:x",
        ] {
            assert!(
                local
                    .browser_refusal(&headers(Some(host), None), None)
                    .is_some(),
                "{host}"
            );
        }
        assert!(local.browser_refusal(&headers(None, None), None).is_some());
        assert_eq!(
            access(true).browser_refusal(&headers(Some("evil.example"), None), None),
            None
        );
    }

    #[test]
    fn a_second_host_or_origin_and_a_foreign_target_are_refused() {
        let local = access(false);
        let mut two = headers(Some("127.0.0.1:8765"), None);
        two.append(header::HOST, HeaderValue::from_static("evil.example"));
        assert_eq!(
            local.browser_refusal(&two, None).map(|(status, _)| status),
            Some(StatusCode::BAD_REQUEST)
        );
        let mut two = headers(Some("127.0.0.1:8765"), Some("http://localhost"));
        two.append(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert_eq!(
            local.browser_refusal(&two, None).map(|(status, _)| status),
            Some(StatusCode::FORBIDDEN)
        );
        let loopback = headers(Some("127.0.0.1:8765"), None);
        assert!(
            local
                .browser_refusal(&loopback, Some("evil.example"))
                .is_some()
        );
        assert_eq!(
            local.browser_refusal(&loopback, Some("localhost:8765")),
            None
        );
        let foreign = headers(Some("evil.example"), None);
        assert_eq!(local.browser_refusal(&foreign, Some("[::1]:8765")), None);
    }

    #[test]
    fn only_loopback_and_allowed_origins_pass() {
        let a = access(false);
        let host = Some("127.0.0.1:8765");
        for origin in [
            "http://127.0.0.1:8765",
            "http://localhost",
            "http://[::1]:3000",
            "https://app.example:8443",
        ] {
            assert_eq!(
                a.browser_refusal(&headers(host, Some(origin)), None),
                None,
                "{origin}"
            );
        }
        for origin in [
            "http://evil.example",
            "null",
            "https://127.0.0.1",
            "http://127.0.0.1.evil.example",
            "https://app.example:8444",
        ] {
            assert!(
                a.browser_refusal(&headers(host, Some(origin)), None)
                    .is_some(),
                "{origin}"
            );
        }
    }
}
