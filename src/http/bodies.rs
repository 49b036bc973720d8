//! What `/mcp` reads before rmcp does: a request body is taken whole (at most
//! `HTTP_MAX_BODY_BYTES`, counted as it streams in: 413 past it) and answered here when rmcp
//! would answer it wrongly, as the stdio guard answers it (`framing`): a body that is not
//! JSON gets 400 with a JSON-RPC "Parse error" (rmcp answered 415, "Unsupported Media
//! Type", to `application/json`), and a request of a method MCP defines whose params are
//! not as it defines them gets "Invalid params" (rmcp's service answered "method not
//! found") — unless it names an MCP session that is not open, which rmcp answers 404 (the
//! client must initialize again). Anything else goes on to rmcp as it came.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::ClientJsonRpcMessage;
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
    // Parsed once as rmcp will parse it; only a body it cannot read is looked at again, to
    // tell JSON that is no MCP message (rmcp's to answer) from text that is no JSON.
    match serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) {
        Ok(message) => {
            if let Some(frame) = framing::invalid_params(&message)
                && session_open(&sessions, &parts.headers).await
            {
                return json(StatusCode::OK, frame);
            }
        }
        Err(_) => {
            if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
                let frame = framing::parse_error(&format!("the body is not valid JSON ({e})"));
                return json(StatusCode::BAD_REQUEST, frame);
            }
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

fn json(status: StatusCode, frame: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], frame).into_response()
}
