//! What `/mcp` reads before rmcp does: a request body is taken whole (at most
//! `HTTP_MAX_BODY_BYTES`, counted as it streams in: 413 past it) and read as the stdio guard
//! reads a line (`framing::read`), so that what rmcp would answer wrongly is answered here as
//! on stdio, in JSON. What the service cannot read (rmcp answered it 415, "Unsupported Media
//! Type", in plain text) gets the guard's "Parse error" or "Invalid Request": with the
//! request's id when one can be read, else with `id: null`. A request of a method MCP
//! defines whose params are not as it defines them gets "Invalid params" (rmcp's service
//! answered "method not found") — unless it names an MCP session that is not open, which
//! rmcp answers 404 (the client must initialize again). A notification the service cannot
//! read, which JSON-RPC gives no answer (nor does stdio), gets 400 with an error of
//! `id: null`, as MCP asks of a notification a server does not accept. Anything else goes
//! on to rmcp as it came.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::SessionManager;

use super::mcp_sessions::CappedSessions;
use crate::framing;
use crate::limits::HTTP_MAX_BODY_BYTES;

pub async fn answer_unreadable(
    State(sessions): State<Arc<CappedSessions>>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, HTTP_MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(e) if too_long(&e) => {
            let why = format!(
                "Payload Too Large: a request body holds at most {HTTP_MAX_BODY_BYTES} bytes.\n"
            );
            return (StatusCode::PAYLOAD_TOO_LARGE, why).into_response();
        }
        Err(e) => {
            let why = format!("Bad Request: the body could not be read ({e}).\n");
            return (StatusCode::BAD_REQUEST, why).into_response();
        }
    };
    match framing::read(&bytes) {
        Ok(message) => {
            if let Some(frame) = framing::invalid_params(&message)
                && session_open(&sessions, &parts.headers).await
            {
                return json(StatusCode::OK, frame);
            }
        }
        Err(framing::Unreadable {
            answer: Some(answer),
            ..
        }) => return json(status_of(&answer), answer.frame),
        // rmcp would answer it 415 in plain text; MCP asks for an HTTP error, its body a
        // JSON-RPC error without an id.
        Err(_) => {
            return json(StatusCode::BAD_REQUEST, framing::unreadable_notification());
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Whether the request names no MCP session, or one that is open.
async fn session_open(sessions: &CappedSessions, headers: &HeaderMap) -> bool {
    match headers.get("mcp-session-id").and_then(|v| v.to_str().ok()) {
        None => true,
        Some(id) => sessions
            .has_session(&id.to_owned().into())
            .await
            .unwrap_or(false),
    }
}

/// Whether reading the body stopped at its length limit (not on a broken stream).
fn too_long(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// An answer with the request's id answers it as any other answer does: 200, as "Invalid
/// params" and an id in flight are. One with `id: null` answers no request: the body was
/// refused, 400, as a body that is not JSON always was.
fn status_of(answer: &framing::Answer) -> StatusCode {
    if answer.id.is_null() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    }
}

fn json(status: StatusCode, frame: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], frame).into_response()
}
