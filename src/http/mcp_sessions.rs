//! MCP sessions of the HTTP transport (the `Mcp-Session-Id` of protocol revisions before
//! 2026-07-28): rmcp's in-memory session manager, with at most `MAX_MCP_SESSIONS` open
//! and each closed after `idle` without a request. Terminal sessions are not tied to MCP
//! sessions: every MCP session sees the one shared set.
//!
//! rmcp answers every session-manager error with 500; a refusal for the cap is not a fault
//! of the server but a full house, so `full_is_503` turns exactly that refusal into 503.
//! rmcp answers a session's `DELETE` with 202 Accepted although the session is closed by
//! then; clients expect 200 (the Python SDK logs a 202 as a failed termination), so
//! `closed_is_200` says what happened. rmcp answers 202 too for a session that is no
//! longer open (closed, expired, never opened), where the protocol answers 404 Not Found;
//! `closed_is_200` answers that. Every answer sent is kept a while (`answers`) for a
//! client that reconnects after its connection dropped, which rmcp alone serves only while
//! the request runs.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::Stream;
use futures::future::Either;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};

use super::answers::{Answers, Keeping, request_id, watched};
use crate::limits::{KEPT_ANSWER_FOR, MAX_MCP_SESSIONS};

tokio::task_local! {
    /// Whether `create_session` refused a session for the cap while serving this request.
    /// rmcp awaits `create_session` inside the request's own future, so the flag set there
    /// is the one `full_is_503` reads: no other request's refusal can be mistaken for it.
    static REFUSED_FULL: Cell<bool>;
    /// Whether the session a `DELETE` named was not open.
    static NOT_OPEN: Cell<bool>;
}

/// `/mcp`: the request whose new MCP session was refused for the cap gets 503 Service
/// Unavailable (the client may retry once a session closes or expires), not rmcp's 500.
pub async fn full_is_503(request: Request, next: Next) -> Response {
    let (response, refused) = REFUSED_FULL
        .scope(Cell::new(false), async {
            let response = next.run(request).await;
            (response, REFUSED_FULL.with(Cell::get))
        })
        .await;
    if !refused {
        return response;
    }
    let why = McpSessionError::Full;
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("Service Unavailable: {why}.\n"),
    )
        .into_response()
}

/// `DELETE /mcp`: the session is closed when rmcp answers, so 202 Accepted becomes 200 OK;
/// or it was not open, and the answer is 404 Not Found.
pub async fn closed_is_200(request: Request, next: Next) -> Response {
    if request.method() != Method::DELETE {
        return next.run(request).await;
    }
    let (mut response, not_open) = NOT_OPEN
        .scope(Cell::new(false), async {
            let response = next.run(request).await;
            (response, NOT_OPEN.with(Cell::get))
        })
        .await;
    if response.status() == StatusCode::ACCEPTED {
        if not_open {
            return (
                StatusCode::NOT_FOUND,
                "Not Found: no MCP session with this Mcp-Session-Id is open (it was closed, \
                 expired, or never opened).\n",
            )
                .into_response();
        }
        *response.status_mut() = StatusCode::OK;
    }
    response
}

pub struct CappedSessions {
    inner: LocalSessionManager,
    /// Held from counting to inserting, so two handshakes cannot both take the last place.
    creating: tokio::sync::Mutex<()>,
    /// Answers kept for a client that reconnects after its connection dropped.
    answers: Arc<Answers>,
}

#[derive(Debug)]
pub enum McpSessionError {
    Full,
    Inner(LocalSessionManagerError),
}

impl std::fmt::Display for McpSessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpSessionError::Full => write!(
                f,
                "{MAX_MCP_SESSIONS} MCP sessions are open, the most this server keeps: close \
                 one (DELETE /mcp with its Mcp-Session-Id) or wait until an idle one expires"
            ),
            McpSessionError::Inner(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for McpSessionError {}

impl From<LocalSessionManagerError> for McpSessionError {
    fn from(e: LocalSessionManagerError) -> Self {
        McpSessionError::Inner(e)
    }
}

impl CappedSessions {
    pub fn new(idle: Duration) -> Self {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = Some(idle);
        let answers: Arc<Answers> = Arc::default();
        // Kept answers go once past keeping, also on a server no call comes to.
        let kept = Arc::downgrade(&answers);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(KEPT_ANSWER_FOR / 4);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(answers) = kept.upgrade() else {
                    return;
                };
                answers.prune();
            }
        });
        CappedSessions {
            inner,
            creating: tokio::sync::Mutex::new(()),
            answers,
        }
    }
}

impl SessionManager for CappedSessions {
    type Error = McpSessionError;
    type Transport = Keeping<WorkerTransport<LocalSessionWorker>>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let _creating = self.creating.lock().await;
        if self.inner.sessions.read().await.len() >= MAX_MCP_SESSIONS {
            tracing::warn!("refused a new MCP session: {MAX_MCP_SESSIONS} are open");
            // Outside a request (never in the server) there is no answer to correct.
            let _ = REFUSED_FULL.try_with(|refused| refused.set(true));
            return Err(McpSessionError::Full);
        }
        let (session, inner) = self.inner.create_session().await?;
        let transport = Keeping {
            inner,
            session: session.clone(),
            answers: self.answers.clone(),
        };
        Ok((session, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        if !self.inner.has_session(id).await? {
            // Outside a `DELETE` (rmcp's own cleanup) there is no answer to correct.
            let _ = NOT_OPEN.try_with(|not_open| not_open.set(true));
            return Ok(());
        }
        self.answers.closed(id);
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let request = request_id(&message).map(|r| {
            let since = self.answers.request_coming(id, &r);
            (r, since)
        });
        let stream = self.inner.create_stream(id, message).await?;
        Ok(watched(
            stream,
            self.answers.clone(),
            id.clone(),
            request,
            true,
        ))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        // rmcp replays a stream whose request still runs; one whose answer went out into a
        // dropped connection it no longer has: that answer was kept.
        let request = self.answers.request_of(id, &last_event_id);
        match self.inner.resume(id, last_event_id.clone()).await {
            Ok(stream) => Ok(Either::Left(watched(
                stream,
                self.answers.clone(),
                id.clone(),
                request,
                false,
            ))),
            Err(e) => match self.answers.resume(id, &last_event_id) {
                Some(answer) => Ok(Either::Right(futures::stream::iter([answer]))),
                None => Err(e.into()),
            },
        }
    }
}
