//! Requests in flight over HTTP: at most `MAX_IN_FLIGHT` for the whole server, the bound a
//! stdio server keeps, and at most `MCP_SESSION_MAX_IN_FLIGHT` for one MCP session, so that
//! one session cannot take every place. A JSON-RPC request holds its place until its answer
//! has gone out (the end of its response body); a request past either cap gets 429 at once.
//! Notifications and responses (a cancellation among them) take no place and are never
//! refused here. A request whose id one of its MCP session's requests in flight already
//! has is answered with a JSON-RPC error, as on stdio: its answer could not be told from
//! the other's.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::limits::{HTTP_MAX_BODY_BYTES, MAX_IN_FLIGHT, MCP_SESSION_MAX_IN_FLIGHT};

#[derive(Default)]
pub struct InFlight {
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    server: usize,
    /// By `Mcp-Session-Id`, the ids (as JSON text) of its requests in flight; a session
    /// with none in flight has no entry.
    sessions: HashMap<String, HashSet<String>>,
}

/// A place taken, given back when dropped.
struct Place {
    in_flight: Arc<InFlight>,
    /// The MCP session and the request's id.
    session: Option<(String, String)>,
}

/// Why a request gets no place.
#[derive(Debug)]
enum Refusal {
    /// 429: a cap is reached.
    Full(String),
    /// A JSON-RPC error: a request of the same session with this id is in flight.
    IdInFlight,
}

impl InFlight {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for the request `id` (as JSON text) of `session`, or why there is none.
    fn take(self: &Arc<Self>, session: Option<&str>, id: &str) -> Result<Place, Refusal> {
        let mut counts = self.counts();
        if counts.server >= MAX_IN_FLIGHT {
            return Err(Refusal::Full(format!(
                "{MAX_IN_FLIGHT} requests are in flight on this server, the most it serves at \
                 once"
            )));
        }
        if let Some(session) = session {
            let of_session = counts.sessions.entry(session.to_owned()).or_default();
            if of_session.contains(id) {
                return Err(Refusal::IdInFlight);
            }
            if of_session.len() >= MCP_SESSION_MAX_IN_FLIGHT {
                return Err(Refusal::Full(format!(
                    "{MCP_SESSION_MAX_IN_FLIGHT} requests of this MCP session are in flight, \
                     the most one session may have"
                )));
            }
            of_session.insert(id.to_owned());
        }
        counts.server += 1;
        Ok(Place {
            in_flight: self.clone(),
            session: session.map(|session| (session.to_owned(), id.to_owned())),
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut counts = self.in_flight.counts();
        counts.server -= 1;
        if let Some((session, id)) = &self.session
            && let Some(ids) = counts.sessions.get_mut(session)
        {
            ids.remove(id);
            if ids.is_empty() {
                counts.sessions.remove(session);
            }
        }
    }
}

/// What tells a JSON-RPC request from a notification or a response.
#[derive(Deserialize)]
struct Kind {
    id: Option<serde_json::Value>,
    method: Option<IgnoredAny>,
}

/// How the MCP service tells request ids apart: a number by its integer value (`7`,
/// `7.0` and `70e-1` are one id), a string by its text, apart from numbers.
fn id_key(id: &serde_json::Value) -> String {
    match id {
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => format!("n{i}"),
            None => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.3e18 => format!("n{}", f as i64),
                _ => format!("n{n}"),
            },
        },
        serde_json::Value::String(text) => format!("s{text}"),
        other => other.to_string(),
    }
}

/// `/mcp`: a POST carrying a request takes a place for as long as its answer streams, or
/// gets 429 Too Many Requests.
pub async fn cap(State(in_flight): State<Arc<InFlight>>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, HTTP_MAX_BODY_BYTES).await else {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("Payload Too Large: a request body is at most {HTTP_MAX_BODY_BYTES} bytes.\n"),
        )
            .into_response();
    };
    let id = serde_json::from_slice::<Kind>(&bytes)
        .ok()
        .filter(|kind| kind.method.is_some())
        .and_then(|kind| kind.id);
    let session = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let request = Request::from_parts(parts, Body::from(bytes));
    let Some(id) = id else {
        return next.run(request).await;
    };
    let place = match in_flight.take(session.as_deref(), &id_key(&id)) {
        Ok(place) => place,
        Err(Refusal::IdInFlight) => {
            tracing::warn!("refused a request whose id is already in flight");
            let why = format!(
                "Invalid Request: id {id} belongs to a request not yet answered; give each \
                 request in flight its own id"
            );
            let error = serde_json::json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {"code": -32600, "message": why},
            });
            return (
                [(header::CONTENT_TYPE, "application/json")],
                error.to_string(),
            )
                .into_response();
        }
        Err(Refusal::Full(why)) => {
            tracing::warn!("refused a request: {why}");
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, "1")],
                format!("Too Many Requests: {why}; wait for answers before sending more.\n"),
            )
                .into_response();
        }
    };
    let response = next.run(request).await;
    // The place goes with the body: when the answer has gone out, or the client left.
    response.map(|body| {
        Body::from_stream(body.into_data_stream().map(move |chunk| {
            let _held = &place;
            chunk
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_takes_at_most_its_share_and_the_server_at_most_its_whole() {
        let in_flight = Arc::new(InFlight::default());
        let full = |refusal: Option<Refusal>| match refusal {
            Some(Refusal::Full(why)) => why,
            _ => panic!("not refused as full"),
        };
        let first: Vec<Place> = (0..MCP_SESSION_MAX_IN_FLIGHT)
            .map(|i| in_flight.take(Some("a"), &i.to_string()).unwrap())
            .collect();
        let refused = full(in_flight.take(Some("a"), "\"x\"").err());
        assert!(refused.contains("of this MCP session"), "{refused}");
        let mut others: Vec<Place> = (MCP_SESSION_MAX_IN_FLIGHT..MAX_IN_FLIGHT)
            .map(|i| in_flight.take(Some(&format!("s{i}")), "1").unwrap())
            .collect();
        let refused = full(in_flight.take(None, "1").err());
        assert!(refused.contains("on this server"), "{refused}");
        others.pop();
        assert!(
            in_flight.take(None, "1").is_ok(),
            "a place given back is free"
        );
        drop((first, others));
        let counts = in_flight.counts();
        assert_eq!(counts.server, 0);
        assert!(counts.sessions.is_empty(), "no entry outlives its requests");
    }

    #[test]
    fn an_id_in_flight_in_a_session_is_refused_until_answered() {
        let in_flight = Arc::new(InFlight::default());
        let first = in_flight.take(Some("a"), "7").unwrap();
        assert!(matches!(
            in_flight.take(Some("a"), "7").err(),
            Some(Refusal::IdInFlight)
        ));
        assert!(
            in_flight.take(Some("b"), "7").is_ok(),
            "another session's id 7"
        );
        assert!(
            in_flight.take(Some("a"), "\"7\"").is_ok(),
            "the string \"7\""
        );
        let key = |text: &str| id_key(&serde_json::from_str(text).unwrap());
        assert_eq!(key("7"), key("7.0"));
        assert_eq!(key("7"), key("70e-1"));
        assert_ne!(key("7"), key("\"7\""));
        assert_ne!(key("7"), key("7.5"));
        drop(first);
        assert!(in_flight.take(Some("a"), "7").is_ok(), "free once answered");
    }
}
