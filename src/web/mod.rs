//! The live view (`--web`): web pages of the sessions for the person who owns the machine,
//! under `/ui/` beside `/mcp` (`http --web`) or on its own loopback address beside stdio
//! (`stdio --web`), with the same token and the same Host/Origin rules.
//!
//! Flow at a glance: `auth` signs a browser in with the one-time code of a printed URL and
//! guards every route; `address` picks where the view beside stdio listens and publishes the
//! sign-in URL (`mcp-terminal web-url` asks for a fresh one); `pages` renders the session
//! list and a session's page (its PTY screen in colour, or its pipe output tail by stream)
//! from the same state the tools read, and `history` what ran and how the session started
//! and ended; `live` streams fresh renderings as Server-Sent Events; `replay` plays a
//! recording through the server's emulator and `player` streams its frames the same way;
//! `assets` is the one style sheet, script and icon. Read-only by default: every route is
//! GET, and only with `--web-control` does `control` take the owner's keys and terminations
//! (POST, same origin, a page token).

mod address;
mod assets;
mod auth;
mod control;
mod history;
mod live;
mod pages;
mod player;
mod replay;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{from_fn, from_fn_with_state};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{any, get, post};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

pub use address::{Beside, fetch_sign_in_url, prepare_beside, publish, url_file};

use crate::access::{Access, guard, listener};
use crate::audit::AuditLog;
use crate::limits::{
    HTTP_HEADER_READ_TIMEOUT, HTTP_IDLE_TIMEOUT, HTTP_MAX_CONNECTIONS, RECORDING_MAX_BYTES,
    WEB_MAX_WATCHERS,
};
use crate::session::Sessions;

/// How the owner set up the view.
#[derive(Default)]
pub struct Settings {
    /// `--web-control`: the owner may type into PTY sessions and end sessions.
    pub control: bool,
    /// Where the owner's actions are recorded, beside the agent's tool calls.
    pub audit: Option<Arc<AuditLog>>,
}

/// What every route of the view shares.
pub struct View {
    sessions: Arc<Sessions>,
    access: Arc<Access>,
    sign_in: auth::SignIn,
    watchers: Arc<Semaphore>,
    settings: Settings,
    page_tokens: control::PageTokens,
    players: Arc<Semaphore>,
}

impl View {
    pub fn new(sessions: Arc<Sessions>, access: Arc<Access>, settings: Settings) -> Arc<View> {
        Arc::new(View {
            sessions,
            access,
            sign_in: auth::SignIn::new(),
            watchers: Arc::new(Semaphore::new(WEB_MAX_WATCHERS)),
            settings,
            page_tokens: control::PageTokens::default(),
            players: Arc::new(Semaphore::new(crate::limits::WEB_MAX_PLAYERS)),
        })
    }

    /// The key `mcp-terminal web-url` asks for a sign-in URL with (see `publish`).
    pub fn owner_key(&self) -> &str {
        self.sign_in.owner_key()
    }

    /// The view's own path, `/ui/PLACE/`: where browsers are sent, and what every page's
    /// links are relative to.
    pub fn base(&self) -> String {
        self.sign_in.base()
    }

    /// Where the recording `name` is, if it is one the server made for a retained session
    /// (no other name reaches the file system).
    fn recording_path(&self, name: &str) -> Option<std::path::PathBuf> {
        let known = self
            .sessions
            .retained()
            .iter()
            .any(|s| s.snapshot().recording.as_deref() == Some(name));
        let dir = self.sessions.config.recordings_dir.as_ref()?;
        known.then(|| dir.join(name))
    }

    /// One of the `WEB_MAX_PLAYERS` slots for reading a recording (to play or download
    /// it); `None` when all are taken (answer `recordings_busy`).
    fn recording_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.players.clone().try_acquire_owned().ok()
    }

    /// The bytes of the recording `name`, if it is one of a retained session's and still the
    /// regular file the server wrote: a session's own shell may replace it, and the view
    /// never follows a link put there (to `/dev/zero`, say) nor reads more than the server
    /// ever writes to a recording, however large the file has grown. Read with `slot`
    /// held, and handed back with it: a client gone meanwhile frees it once the read ends.
    async fn recording_bytes(
        &self,
        name: &str,
        slot: OwnedSemaphorePermit,
    ) -> Result<(Vec<u8>, OwnedSemaphorePermit), RecordingUnread> {
        let path = self.recording_path(name).ok_or(RecordingUnread::Unknown)?;
        let (read, slot) = tokio::task::spawn_blocking(move || (read_recording(&path), slot))
            .await
            .map_err(|_| RecordingUnread::Unreadable("the read failed".into()))?;
        Ok((read.map_err(RecordingUnread::Unreadable)?, slot))
    }

    /// The page saying why the recording `name` is not served.
    fn recording_unread(&self, name: &str, unread: RecordingUnread) -> Html<String> {
        let what = match unread {
            RecordingUnread::Unknown => format!("No recording {name} of a retained session."),
            RecordingUnread::Unreadable(why) => {
                format!("The recording {name} cannot be read: {why}.")
            }
        };
        pages::not_found(&self.base(), &what)
    }
    /// A sign-in URL with a fresh one-time code, for a server bound to `bound` (an
    /// unspecified address is reached on loopback).
    pub fn sign_in_url(&self, bound: SocketAddr) -> String {
        let host = match bound.ip() {
            ip if ip.is_unspecified() => "127.0.0.1".to_owned(),
            ip if ip.is_ipv6() => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        format!(
            "http://{host}:{}/ui/?code={}",
            bound.port(),
            self.sign_in.issue()
        )
    }
}

/// Why a recording is not served.
enum RecordingUnread {
    /// No retained session has a recording of that name.
    Unknown,
    /// It cannot be read as the server wrote it; in words for the owner.
    Unreadable(String),
}

/// Read a recording the server wrote: a regular file, not a link, of at most
/// `RECORDING_MAX_BYTES`.
fn read_recording(path: &std::path::Path) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => "it was replaced by a link".to_owned(),
            _ => e.to_string(),
        })?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("it is no longer a regular file".into());
    }
    if meta.len() > RECORDING_MAX_BYTES {
        return Err(format!(
            "it holds {} bytes, more than the {RECORDING_MAX_BYTES} the server writes to one",
            meta.len()
        ));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(RECORDING_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > RECORDING_MAX_BYTES {
        return Err(format!(
            "it holds more than the {RECORDING_MAX_BYTES} bytes the server writes to one"
        ));
    }
    Ok(bytes)
}

/// The `/ui/` routes, guarded (GET/HEAD, and the owner's POSTs only with control on; a
/// signed-in viewer; the page headers); the caller adds the Host/Origin rules around them.
pub fn router(view: Arc<View>) -> Router {
    // What the sign-in page itself needs, served to anyone: nothing in it is the owner's.
    let public = Router::new()
        .route("/ui/style.css", get(style))
        .route("/ui/app.js", get(script))
        .route("/favicon.ico", get(favicon))
        .route_layer(from_fn_with_state(view.clone(), auth::note_viewer))
        .route_layer(from_fn(auth::page_headers))
        .with_state(view.clone());
    // Browsers are sent to the view's own place (see `auth`); scripts with the bearer token
    // may use `/ui/` itself.
    let base = view.base();
    let guarded = pages(&base)
        .merge(pages("/ui/"))
        .route(base.trim_end_matches('/'), get(in_place))
        .route("/ui", get(in_place))
        // Route layers: paths outside `/ui` (the MCP endpoint's fallback) are not touched.
        .route_layer(from_fn_with_state(view.clone(), auth::require_viewer))
        .route_layer(from_fn_with_state(view.clone(), auth::only_reads))
        .route_layer(from_fn(auth::page_headers))
        .with_state(view.clone());
    // Asked for with the owner key, which no viewer holds.
    let owner = Router::new()
        .route("/ui/sign-in-url", get(fresh_sign_in_url))
        .route_layer(from_fn_with_state(view.clone(), auth::only_reads))
        .route_layer(from_fn(auth::page_headers))
        .with_state(view);
    guarded.merge(owner).merge(public)
}

/// The view's pages under `prefix` (ending in `/`).
fn pages(prefix: &str) -> Router<Arc<View>> {
    let at = |path: &str| format!("{prefix}{path}");
    Router::new()
        .route(&at(""), get(index))
        .route(&at("events"), get(live::list_events))
        .route(&at("sessions/{id}"), get(session))
        .route(&at("sessions/{id}/events"), get(live::session_events))
        .route(&at("sessions/{id}/output"), get(output))
        .route(&at("sessions/{id}/input"), post(control::input))
        .route(&at("sessions/{id}/terminate"), post(control::terminate))
        .route(&at("recordings/{name}"), get(recording))
        .route(&at("recordings/{name}/play"), get(player::page))
        .route(&at("recordings/{name}/frames"), get(player::frames))
        .route(&at("{*rest}"), any(unknown))
}

/// The answer at an address outside every route (a browser opening the listener's root):
/// where the server's things are, without the view's own place, which is the owner's.
pub fn not_served(mcp: bool) -> Response {
    let what = if mcp {
        "mcp-terminal serves MCP at /mcp (a POST with the bearer token) and, when it was \
         started with --web, the live view at the address `mcp-terminal web-url` prints"
    } else {
        "this is mcp-terminal's live view: open the address `mcp-terminal web-url` prints (or \
         the one the server printed when it started)"
    };
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("Nothing is served here: {what}.\n"),
    )
        .into_response()
}

async fn in_place(State(view): State<Arc<View>>) -> Redirect {
    Redirect::to(&view.base())
}

async fn index(State(view): State<Arc<View>>) -> Html<String> {
    Html(pages::list_page(&view.base(), &view.sessions.retained()))
}

async fn session(State(view): State<Arc<View>>, Path(id): Path<String>) -> Response {
    match view.sessions.find(&id) {
        Some(session) => {
            // The page shows the screen as the tools do: with every output stored so far.
            session.screen_caught_up().await;
            let token = view
                .settings
                .control
                .then(|| view.page_tokens.issue(&session.id));
            Html(pages::session_page(
                &view.base(),
                &session,
                token.as_deref(),
            ))
            .into_response()
        }
        None => (
            StatusCode::NOT_FOUND,
            pages::not_found(&view.base(), &format!("No session {id} is retained.")),
        )
            .into_response(),
    }
}

/// A range of a session's output (`?from=CURSOR&to=CURSOR`, `to` open when absent): what a
/// command of its history printed.
async fn output(
    State(view): State<Arc<View>>,
    Path(id): Path<String>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let cursor = |name: &str| query.get(name).map(|v| v.parse::<u64>());
    let (from, to) = match (cursor("from"), cursor("to")) {
        (Some(Ok(from)), None) => (from, u64::MAX),
        (Some(Ok(from)), Some(Ok(to))) if to >= from => (from, to),
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                pages::refusal(
                    &view.base(),
                    "Bad request",
                    "The output range needs `from` (a cursor) and optionally `to` (a cursor \
                     not before it).",
                ),
            )
                .into_response();
        }
    };
    match view.sessions.find(&id) {
        Some(session) => Html(pages::output_page(&view.base(), &session, from, to)).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            pages::not_found(&view.base(), &format!("No session {id} is retained.")),
        )
            .into_response(),
    }
}

/// A retained session's asciicast file; only names the server gave its own recordings.
async fn recording(State(view): State<Arc<View>>, Path(name): Path<String>) -> Response {
    let Some(slot) = view.recording_slot() else {
        return recordings_busy();
    };
    match view.recording_bytes(&name, slot).await {
        Ok((bytes, slot)) => {
            let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
                .unwrap_or(HeaderValue::from_static("attachment"));
            (
                [
                    (
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/x-asciicast"),
                    ),
                    (header::CONTENT_DISPOSITION, disposition),
                ],
                body_holding(bytes, slot),
            )
                .into_response()
        }
        Err(unread) => {
            (StatusCode::NOT_FOUND, view.recording_unread(&name, unread)).into_response()
        }
    }
}

/// The answer when every slot for reading a recording is taken.
fn recordings_busy() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "5")],
        "Service Unavailable: other recordings are being played or downloaded; stop one \
         and try again.\n",
    )
        .into_response()
}

/// `bytes` sent in pieces, `slot` held until the last is taken or the client is gone: a
/// client that reads slowly keeps its copy of a recording, and its slot, as long.
fn body_holding(bytes: Vec<u8>, slot: OwnedSemaphorePermit) -> Body {
    const PIECE: usize = 64 * 1024;
    let pieces = futures::stream::unfold((Bytes::from(bytes), slot), |(mut rest, slot)| async {
        if rest.is_empty() {
            return None;
        }
        let piece = rest.split_to(rest.len().min(PIECE));
        Some((Ok::<_, std::convert::Infallible>(piece), (rest, slot)))
    });
    Body::from_stream(pieces)
}

/// A fresh sign-in URL for `mcp-terminal web-url`: only for the owner key of the address
/// file (neither a browser's cookie nor the bearer token gets one), on the address the
/// request was sent to.
async fn fresh_sign_in_url(State(view): State<Arc<View>>, headers: HeaderMap) -> Response {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    match host {
        Some(host) if view.sign_in.owner_key_ok(&headers) => (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("http://{host}/ui/?code={}\n", view.sign_in.issue()),
        )
            .into_response(),
        _ => (
            StatusCode::FORBIDDEN,
            "Forbidden: a sign-in URL is issued only to the owner key in the server's address \
             file (mcp-terminal web-url).\n",
        )
            .into_response(),
    }
}

async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        assets::style_sheet(),
    )
}

async fn favicon() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "image/svg+xml")], assets::FAVICON)
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        assets::SCRIPT,
    )
}

async fn unknown(State(view): State<Arc<View>>) -> Response {
    (
        StatusCode::NOT_FOUND,
        pages::not_found(&view.base(), "There is no such page in the live view."),
    )
        .into_response()
}

/// Serve the view beside stdio until the process ends; prints the sign-in URL.
pub fn serve_beside(
    sessions: Arc<Sessions>,
    beside: Beside,
    settings: Settings,
) -> Result<(), String> {
    let listener = tokio::net::TcpListener::from_std(beside.listener)
        .map_err(|e| format!("cannot serve the live view: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    let view = View::new(sessions, beside.access.clone(), settings);
    let url = view.sign_in_url(bound);
    if let Some(file) = &beside.url_file {
        address::publish(file, &url, view.sign_in.owner_key());
    }
    let app = router(view)
        .fallback(|| async { not_served(false) })
        .layer(from_fn_with_state(beside.access, guard::browser_rules));
    let limits = listener::Limits {
        connections: HTTP_MAX_CONNECTIONS,
        header_read: HTTP_HEADER_READ_TIMEOUT,
        idle: HTTP_IDLE_TIMEOUT,
    };
    // Served until the process ends.
    tokio::spawn(listener::serve(
        listener,
        app,
        limits,
        CancellationToken::new(),
    ));
    crate::say!("mcp-terminal: live view: {url}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_is_read_only_as_the_regular_file_the_server_writes() {
        let dir = tempfile::tempdir().unwrap();
        let cast = dir.path().join("a.cast");
        std::fs::write(&cast, b"{\"version\": 2}\n").unwrap();
        assert_eq!(read_recording(&cast).unwrap(), b"{\"version\": 2}\n");
        // A link put in its place (to /dev/zero, say) is not followed.
        let linked = dir.path().join("b.cast");
        std::os::unix::fs::symlink("/dev/zero", &linked).unwrap();
        let why = read_recording(&linked).unwrap_err();
        assert!(why.contains("replaced by a link"), "{why}");
        // A file grown past the most the server writes is not read at all.
        let grown = dir.path().join("c.cast");
        let file = std::fs::File::create(&grown).unwrap();
        file.set_len(RECORDING_MAX_BYTES + 1).unwrap();
        let why = read_recording(&grown).unwrap_err();
        assert!(why.contains("more than the"), "{why}");
    }
}
