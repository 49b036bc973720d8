//! Requests in flight over HTTP: at most `MAX_IN_FLIGHT` for the whole server, the bound a
//! stdio server keeps, and at most `MCP_SESSION_MAX_IN_FLIGHT` for one MCP session, so that
//! one session cannot take every place. A JSON-RPC request holds its place until its answer
//! has gone out (the end of its response body); a request past either cap gets 429 at once.
//! Notifications and responses (a cancellation among them) take no place and are never
//! refused here.

use std::collections::HashMap;
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
    /// By `Mcp-Session-Id`; a session with none in flight has no entry.
    sessions: HashMap<String, usize>,
}

/// A place taken, given back when dropped.
struct Place {
    in_flight: Arc<InFlight>,
    session: Option<String>,
}

impl InFlight {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a request of `session`, or why there is none.
    fn take(self: &Arc<Self>, session: Option<&str>) -> Result<Place, String> {
        let mut counts = self.counts();
        if counts.server >= MAX_IN_FLIGHT {
            return Err(format!(
                "{MAX_IN_FLIGHT} requests are in flight on this server, the most it serves at \
                 once"
            ));
        }
        if let Some(session) = session {
            let of_session = counts.sessions.entry(session.to_owned()).or_default();
            if *of_session >= MCP_SESSION_MAX_IN_FLIGHT {
                return Err(format!(
                    "{MCP_SESSION_MAX_IN_FLIGHT} requests of this MCP session are in flight, \
                     the most one session may have"
                ));
            }
            *of_session += 1;
        }
        counts.server += 1;
        Ok(Place {
            in_flight: self.clone(),
            session: session.map(str::to_owned),
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut counts = self.in_flight.counts();
        counts.server -= 1;
        if let Some(session) = &self.session
            && let Some(count) = counts.sessions.get_mut(session)
        {
            *count -= 1;
            if *count == 0 {
                counts.sessions.remove(session);
            }
        }
    }
}

/// What tells a JSON-RPC request from a notification or a response.
#[derive(Deserialize)]
struct Kind {
    id: Option<IgnoredAny>,
    method: Option<IgnoredAny>,
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
    let is_request = serde_json::from_slice::<Kind>(&bytes)
        .is_ok_and(|kind| kind.id.is_some() && kind.method.is_some());
    let session = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let request = Request::from_parts(parts, Body::from(bytes));
    if !is_request {
        return next.run(request).await;
    }
    let place = match in_flight.take(session.as_deref()) {
        Ok(place) => place,
        Err(why) => {
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
        let first: Vec<Place> = (0..MCP_SESSION_MAX_IN_FLIGHT)
            .map(|_| in_flight.take(Some("a")).unwrap())
            .collect();
        let refused = in_flight.take(Some("a")).err().unwrap();
        assert!(refused.contains("of this MCP session"), "{refused}");
        let mut others: Vec<Place> = (MCP_SESSION_MAX_IN_FLIGHT..MAX_IN_FLIGHT)
            .map(|i| in_flight.take(Some(&format!("s{i}"))).unwrap())
            .collect();
        let refused = in_flight.take(None).err().unwrap();
        assert!(refused.contains("on this server"), "{refused}");
        others.pop();
        assert!(in_flight.take(None).is_ok(), "a place given back is free");
        drop((first, others));
        let counts = in_flight.counts();
        assert_eq!(counts.server, 0);
        assert!(counts.sessions.is_empty(), "no entry outlives its requests");
    }
}
