//! What `/mcp` reads before rmcp does: a request body is taken whole (at most
//! `HTTP_MAX_BODY_BYTES`, counted as it streams in: 413 past it) and answered here when rmcp
//! would answer it wrongly, as the stdio guard answers it (`framing`): a body that is not
//! JSON gets 400 with a JSON-RPC "Parse error" (rmcp answered 415, "Unsupported Media
//! Type", to `application/json`), and a request of a method MCP defines whose params are
//! not as it defines them gets "Invalid params" (rmcp's service answered "method not
//! found"). Anything else goes on to rmcp as it came.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::ClientJsonRpcMessage;

use crate::framing;
use crate::limits::HTTP_MAX_BODY_BYTES;

pub async fn answer_unreadable(request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, HTTP_MAX_BODY_BYTES).await else {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "Payload Too Large: a request body holds at most {HTTP_MAX_BODY_BYTES} bytes.\n"
            ),
        )
            .into_response();
    };
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
        let frame = framing::parse_error(&format!("the body is not valid JSON ({e})"));
        return json(StatusCode::BAD_REQUEST, frame);
    }
    if let Ok(message) = serde_json::from_slice::<ClientJsonRpcMessage>(&bytes)
        && let Some(frame) = framing::invalid_params(&message)
    {
        return json(StatusCode::OK, frame);
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn json(status: StatusCode, frame: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], frame).into_response()
}
