//! Live updates: one Server-Sent Events stream per open page, each event the page's
//! fragment rendered afresh. A session page is woken by the session's own change channel
//! (the one `terminal_wait` uses), renders at most once per `WEB_UPDATE_EVERY` however fast
//! the output comes, and skips updates that would not change the page; the list looks at the
//! table every `WEB_LIST_EVERY`. Streams are capped at `WEB_MAX_WATCHERS`; keep-alive
//! comments find closed pages so their place is freed.

use std::convert::Infallible;
use std::sync::{Arc, Weak};

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, Stream};
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::time::Instant;

use super::{View, pages};
use crate::limits::{WEB_LIST_EVERY, WEB_MAX_WATCHERS, WEB_UPDATE_EVERY};
use crate::session::Session;

/// How often an idle session's page is rendered anyway (its age goes on).
const IDLE_REFRESH: std::time::Duration = std::time::Duration::from_secs(1);

fn too_many() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "5")],
        format!(
            "Service Unavailable: {WEB_MAX_WATCHERS} live-view pages are open; close one and \
             reload.\n"
        ),
    )
        .into_response()
}

fn sse<S>(stream: S) -> Response
where
    S: Stream<Item = Result<Event, Infallible>> + Send + 'static,
{
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

pub async fn list_events(State(view): State<Arc<View>>) -> Response {
    let Ok(permit) = view.watchers.clone().try_acquire_owned() else {
        return too_many();
    };
    let start = (view, String::new(), permit);
    sse(stream::unfold(start, |(view, last, permit)| async move {
        loop {
            let html = pages::list(&view.sessions.retained());
            if html != last {
                let event = Event::default().data(html.as_str());
                return Some((Ok(event), (view, html, permit)));
            }
            tokio::time::sleep(WEB_LIST_EVERY).await;
        }
    }))
}

struct Watch {
    session: Weak<Session>,
    changes: watch::Receiver<()>,
    last: String,
    sent_at: Option<Instant>,
    gone: bool,
    _permit: OwnedSemaphorePermit,
}

pub async fn session_events(State(view): State<Arc<View>>, Path(id): Path<String>) -> Response {
    let Some(session) = view.sessions.find(&id) else {
        return (
            StatusCode::NOT_FOUND,
            pages::not_found(&view.base(), &format!("No session {id}.")),
        )
            .into_response();
    };
    let Ok(permit) = view.watchers.clone().try_acquire_owned() else {
        return too_many();
    };
    let watch = Watch {
        session: Arc::downgrade(&session),
        changes: session.changes(),
        last: String::new(),
        sent_at: None,
        gone: false,
        _permit: permit,
    };
    drop(session);
    sse(stream::unfold(watch, |mut w| async move {
        if w.gone {
            return None;
        }
        loop {
            if let Some(at) = w.sent_at {
                // Changed since the last look, or the idle refresh: either way render.
                let changed = tokio::time::timeout(IDLE_REFRESH, w.changes.changed()).await;
                if let Ok(Err(_)) = changed {
                    return Some((Ok(gone()), Watch { gone: true, ..w }));
                }
                tokio::time::sleep_until(at + WEB_UPDATE_EVERY).await;
            }
            w.changes.borrow_and_update();
            let Some(session) = w.session.upgrade() else {
                return Some((Ok(gone()), Watch { gone: true, ..w }));
            };
            // As the page and the tools show it: with every output stored so far.
            session.screen_caught_up().await;
            // Rendered on a blocking thread: a large screen takes a while, and the
            // runtime's one thread serves every call.
            let rendered = tokio::task::spawn_blocking(move || pages::session_view(&session));
            let Ok(html) = rendered.await else {
                return Some((Ok(gone()), Watch { gone: true, ..w }));
            };
            w.sent_at = Some(Instant::now());
            if html != w.last {
                let event = Event::default().data(html.as_str());
                w.last = html;
                return Some((Ok(event), w));
            }
        }
    }))
}

fn gone() -> Event {
    Event::default().event("gone").data(
        "<h1>Session gone</h1><p>The session was forgotten or its retention ended.</p>\
         <p><a href=\"./\">All sessions</a></p>",
    )
}
