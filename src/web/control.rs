//! Owner control (`--web-control`, off by default): the machine's owner types into a PTY
//! session and ends sessions from their pages. Every action is a POST that must come from
//! the view's own origin (`Origin` equal to the `Host` it was sent to), carry the token of
//! a page rendered for that session (`X-CSRF-Token`), and the view's cookie, which is
//! `SameSite=Strict`. The bearer token alone is refused: it is the MCP client's, and the
//! log would call the agent's keys the owner's. An action is written to the audit log as
//! the owner's (`"by": "owner"`), and the agent sees it: the snapshot's `owner_input_at`,
//! and the output the keys caused.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use subtle::ConstantTimeEq;

use super::View;
use crate::access::random_hex;
use crate::access::refusals::{Refusals, unlogged};
use crate::audit::{AuditLine, By};
use crate::config::Mode;
use crate::errors::ToolError;
use crate::limits::WEB_PAGE_TOKENS_MAX;
use crate::session::Session;
use crate::tools::keys::key_bytes;

/// The tokens of the session pages rendered so far, each valid for its session only.
#[derive(Default)]
pub struct PageTokens {
    issued: Mutex<VecDeque<(String, String)>>,
}

impl PageTokens {
    /// A fresh token for a page of session `session_id`.
    pub fn issue(&self, session_id: &str) -> String {
        let token = random_hex(16);
        let mut issued = self.issued.lock().unwrap_or_else(|e| e.into_inner());
        if issued.len() >= WEB_PAGE_TOKENS_MAX {
            issued.pop_front();
        }
        issued.push_back((session_id.to_owned(), token.clone()));
        token
    }

    /// Whether `presented` was issued for a page of `session_id`; every token is compared.
    fn valid(&self, session_id: &str, presented: &str) -> bool {
        let issued = self.issued.lock().unwrap_or_else(|e| e.into_inner());
        issued.iter().fold(false, |found, (session, token)| {
            let same = bool::from(token.as_bytes().ct_eq(presented.as_bytes()));
            found | (same && session == session_id)
        })
    }
}

fn refused(status: StatusCode, code: &str, message: &str) -> Response {
    let body = json!({"ok": false, "error": {"code": code, "message": message}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn tool_error(status: StatusCode, error: &ToolError) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        error.to_json().to_string(),
    )
        .into_response()
}

/// The request comes from a page of this view: its `Origin` is `http://` and the `Host`
/// it was sent to (a page elsewhere, even on this machine, has another origin).
fn same_origin(headers: &HeaderMap) -> bool {
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    matches!((origin, host), (Some(origin), Some(host)) if origin == format!("http://{host}"))
}

/// The session an owner action is for, once its origin and page token are checked; else
/// the refusal to answer with.
fn permitted(view: &View, id: &str, headers: &HeaderMap) -> Result<Arc<Session>, Box<Response>> {
    if !same_origin(headers) {
        static LOGGED: Refusals = Refusals::new();
        LOGGED.log(|more| {
            let more = unlogged(more);
            tracing::info!(session = %id, "refused an owner action from another origin{more}");
        });
        return Err(Box::new(refused(
            StatusCode::FORBIDDEN,
            "FORBIDDEN",
            "owner actions are taken only from this view's own pages (the Origin header must \
             name this server)",
        )));
    }
    if !view.sign_in.cookie_ok(headers) {
        return Err(Box::new(refused(
            StatusCode::FORBIDDEN,
            "FORBIDDEN",
            "owner actions are taken only by a browser the owner signed in (the view's \
             cookie): the bearer token is the MCP client's, and what it does is the agent's",
        )));
    }
    let token = headers
        .get("x-csrf-token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !view.page_tokens.valid(id, token) {
        return Err(Box::new(refused(
            StatusCode::FORBIDDEN,
            "FORBIDDEN",
            "the page token is missing, or is not one of this session's pages: reload the \
             session's page and try again",
        )));
    }
    view.sessions.find(id).ok_or_else(|| {
        Box::new(refused(
            StatusCode::NOT_FOUND,
            "SESSION_NOT_FOUND",
            "no such session",
        ))
    })
}

/// What the owner typed: `{"text": "…"}` or `{"keys": ["Enter", "C-c"]}`.
fn typed(body: &[u8]) -> Result<(Vec<u8>, Map<String, Value>), String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let object = value.as_object().ok_or("the body is not a JSON object")?;
    let mut details = Map::new();
    match (object.get("text"), object.get("keys")) {
        (Some(Value::String(text)), None) => {
            details.insert("bytes".into(), text.len().into());
            Ok((text.clone().into_bytes(), details))
        }
        (None, Some(Value::Array(keys))) => {
            let mut bytes = Vec::new();
            for key in keys {
                let name = key
                    .as_str()
                    .ok_or("`keys` holds something that is not a string")?;
                bytes.extend(key_bytes(name).ok_or_else(|| format!("`{name}` is not a key"))?);
            }
            details.insert("keys".into(), keys.len().into());
            Ok((bytes, details))
        }
        _ => Err("send exactly one of `text` (a string) and `keys` (key names)".into()),
    }
}

/// Write the owner's action to the audit log; the answer waits for the line, as a tool
/// call's does.
async fn record(view: &View, tool: &str, id: &str, command_id: &str, outcome: Outcome<'_>) {
    let Some(audit) = &view.settings.audit else {
        return;
    };
    // The browser's address, as an agent's line over HTTP carries its client's.
    let mut extra = Map::new();
    if let Some(client) = outcome.client {
        extra.insert("client".into(), client.to_string().into());
    }
    let written = audit.record(AuditLine {
        by: By::Owner,
        tool: tool.to_owned(),
        session_id: Some(id.to_owned()),
        command_id: Some(command_id.to_owned()),
        outcome: outcome.result.to_owned(),
        duration: outcome.began.elapsed(),
        details: outcome.details,
        extra,
    });
    written.settled(audit).await;
}

struct Outcome<'a> {
    result: &'a str,
    began: Instant,
    details: Map<String, Value>,
    client: Option<SocketAddr>,
}

/// `POST /ui/sessions/{id}/input`: keys or text into a PTY session.
pub async fn input(
    State(view): State<Arc<View>>,
    Path(id): Path<String>,
    client: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let began = Instant::now();
    let session = match permitted(&view, &id, &headers) {
        Ok(session) => session,
        Err(refusal) => return *refusal,
    };
    if session.mode != Mode::Pty {
        return refused(
            StatusCode::CONFLICT,
            "NOT_A_PTY",
            "the owner types only into sessions on a terminal (mode \"pty\")",
        );
    }
    let (bytes, details) = match typed(&body) {
        Ok(typed) => typed,
        Err(why) => return refused(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", &why),
    };
    let most = view.sessions.config.limits.max_input_bytes;
    if bytes.len() > most {
        let why = format!("{} bytes, over the limit of {most} per write", bytes.len());
        return refused(StatusCode::PAYLOAD_TOO_LARGE, "INPUT_TOO_LARGE", &why);
    }
    let tool = if details.contains_key("keys") {
        "terminal_keys"
    } else {
        "terminal_write"
    };
    let sent = session.owner_send(&bytes).await;
    let result = match &sent {
        Ok(()) => "ok",
        Err(e) => e.code.as_str(),
    };
    let outcome = Outcome {
        result,
        began,
        details,
        client: client.map(|Extension(ConnectInfo(address))| address),
    };
    record(&view, tool, &id, &session.command_id, outcome).await;
    match sent {
        Ok(()) => (
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"ok":true}"#,
        )
            .into_response(),
        Err(e) => tool_error(StatusCode::CONFLICT, &e),
    }
}

/// `POST /ui/sessions/{id}/terminate`: end a session as `terminal_terminate` does.
pub async fn terminate(
    State(view): State<Arc<View>>,
    Path(id): Path<String>,
    client: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
) -> Response {
    let began = Instant::now();
    let session = match permitted(&view, &id, &headers) {
        Ok(session) => session,
        Err(refusal) => return *refusal,
    };
    let snapshot = session.owner_terminate().await;
    let outcome = Outcome {
        result: "ok",
        began,
        details: Map::new(),
        client: client.map(|Extension(ConnectInfo(address))| address),
    };
    record(
        &view,
        "terminal_terminate",
        &id,
        &session.command_id,
        outcome,
    )
    .await;
    let body = json!({"ok": true, "status": snapshot.status});
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn a_page_token_acts_only_on_its_own_session() {
        let tokens = PageTokens::default();
        let token = tokens.issue("a");
        assert!(tokens.valid("a", &token));
        assert!(!tokens.valid("b", &token));
        assert!(!tokens.valid("a", ""));
        for _ in 0..WEB_PAGE_TOKENS_MAX {
            tokens.issue("c");
        }
        assert!(
            !tokens.valid("a", &token),
            "the oldest is void past the cap"
        );
    }

    #[test]
    fn only_the_views_own_origin_may_act() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8766"));
        assert!(!same_origin(&headers), "no Origin");
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:9"),
        );
        assert!(!same_origin(&headers));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8766"),
        );
        assert!(same_origin(&headers));
    }

    #[test]
    fn typed_input_is_text_or_named_keys() {
        assert_eq!(typed(br#"{"text":"hi"}"#).unwrap().0, b"hi");
        assert_eq!(typed(br#"{"keys":["C-c","Enter"]}"#).unwrap().0, b"\x03\r");
        assert!(
            typed(br#"{"keys":["Nope"]}"#)
                .unwrap_err()
                .contains("`Nope`")
        );
        assert!(typed(br#"{"text":"a","keys":[]}"#).is_err());
        assert!(typed(b"not json").is_err());
    }
}
