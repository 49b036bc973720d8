//! `mcp-terminal http`: MCP over Streamable HTTP at `/mcp` (rmcp's server, mounted in an
//! axum router), behind the browser rules and the bearer token of `access`.
//!
//! Flow at a glance: `prepare` checks the listen address and loads the token file before
//! anything is served (a refusal exits 2); `serve` binds, prints the real URL, serves every
//! MCP session from one shared `Sessions`, and on SIGTERM/SIGINT ends every terminal
//! session (reason `shutdown`), then every MCP session, and returns.

mod answers;
mod bodies;
mod in_flight;
mod mcp_sessions;

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::middleware::from_fn_with_state;
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Map, Value};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::access::{Access, guard, listener, load_token};
use crate::audit::AuditLog;
use crate::limits::{HTTP_MAX_BODY_BYTES, SHUTDOWN_FLUSH, SHUTDOWN_GRACE};
use crate::session::Sessions;
use crate::tools::TerminalServer;
use mcp_sessions::CappedSessions;

/// The command line of `mcp-terminal http`.
pub struct Options {
    pub listen: String,
    pub token_file: Option<PathBuf>,
    pub allow_remote: bool,
    pub allow_origins: Vec<String>,
    /// How long an MCP session may go without a request before it is closed.
    pub mcp_idle: Duration,
    /// Also serve the live view under `/ui/`.
    pub web: bool,
    /// Let the owner type into sessions and end them from the live view.
    pub web_control: bool,
    /// Where the live view's sign-in URL is written (beside the config).
    pub web_url_file: Option<PathBuf>,
    pub connections: listener::Limits,
}

/// Everything checked before serving: the address to bind and who may connect.
pub struct Prepared {
    address: SocketAddr,
    access: Arc<Access>,
    mcp_idle: Duration,
    web: bool,
    web_control: bool,
    web_url_file: Option<PathBuf>,
    connections: listener::Limits,
    /// The `--allow-origin` values: pages there may call /mcp from a browser (CORS).
    allow_origins: Vec<String>,
}

/// Check the address and load (or create) the token; errors are usage errors (exit 2).
pub fn prepare(options: Options) -> Result<Prepared, String> {
    let address = listen_address(&options.listen, options.allow_remote)?;
    let token = load_token(options.token_file)?;
    let access = Access::new(token, options.allow_remote, &options.allow_origins);
    Ok(Prepared {
        address,
        access: Arc::new(access),
        mcp_idle: options.mcp_idle,
        web: options.web,
        web_control: options.web_control,
        web_url_file: options.web_url_file,
        connections: options.connections,
        allow_origins: options.allow_origins,
    })
}

fn listen_address(listen: &str, allow_remote: bool) -> Result<SocketAddr, String> {
    let addresses: Vec<SocketAddr> = listen
        .to_socket_addrs()
        .map_err(|_| format!("--listen `{listen}` is not an address of the form IP:PORT"))?
        .collect();
    let address = *addresses
        .first()
        .ok_or_else(|| format!("--listen `{listen}` resolves to no address"))?;
    if addresses.iter().all(|a| a.ip().is_loopback()) {
        if allow_remote {
            // A reverse proxy or tunnel on this machine may forward its own Host.
            crate::say!(
                "mcp-terminal: warning: --allow-remote: any Host header is accepted, so the \
                 check against DNS rebinding is off (the Origin check still holds); on a \
                 loopback address it is only needed behind a proxy that forwards its own Host"
            );
        }
        return Ok(address);
    }
    if !allow_remote {
        return Err(format!(
            "--listen `{listen}` is not a loopback address; pass --allow-remote to accept \
             connections from other machines"
        ));
    }
    crate::say!(
        "mcp-terminal: warning: --allow-remote: listening on {address}, reachable from other \
         machines; anyone who can reach it and holds the token can run every approved command, \
         and the traffic (token included) is not encrypted"
    );
    Ok(address)
}

/// Serve until SIGTERM, SIGINT or SIGHUP, then shut down every session.
pub async fn serve(
    sessions: Arc<Sessions>,
    audit: Option<Arc<AuditLog>>,
    prepared: Prepared,
) -> Result<(), String> {
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    // A terminal that was closed: the server run in it shuts down as on SIGTERM.
    let mut sighup = crate::hangup::terminal_closed()?;
    let listener = TcpListener::bind(prepared.address)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(tokio::net::TcpListener::from_std)
        .map_err(|e| format!("cannot listen on {}: {e}", prepared.address))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;

    let stop_mcp = CancellationToken::new();
    let settings = crate::web::Settings {
        control: prepared.web_control,
        audit: audit.clone(),
    };
    let server = TerminalServer::new(sessions.clone())
        .with_audit(audit)
        .with_audit_fields(audit_fields);
    let view = prepared
        .web
        .then(|| crate::web::View::new(sessions.clone(), prepared.access.clone(), settings));
    let router = router(server, view.clone(), &prepared, stop_mcp.clone());
    let serving = tokio::spawn(listener::serve(
        listener,
        router,
        prepared.connections,
        stop_mcp.clone(),
    ));
    crate::say!("mcp-terminal: listening on http://{bound}/mcp");
    if let Some(view) = view {
        let url = view.sign_in_url(bound);
        if let Some(file) = &prepared.web_url_file {
            crate::web::publish(file, &url, view.owner_key());
        }
        crate::say!("mcp-terminal: live view: {url}");
    }
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "serving MCP over HTTP");

    let why = tokio::select! {
        _ = sigterm.recv() => "SIGTERM",
        _ = sigint.recv() => "SIGINT",
        () = crate::hangup::next_hangup(&mut sighup) => "SIGHUP",
    };
    tracing::info!("shutting down ({why})");
    sessions.shutdown(SHUTDOWN_GRACE.as_millis() as u64).await;
    stop_mcp.cancel();
    // Answers still in flight (a wait on a session that just ended) get a moment.
    let _ = tokio::time::timeout(SHUTDOWN_FLUSH, serving).await;
    tracing::info!("shutdown complete");
    Ok(())
}

/// The audit fields of a request over HTTP: its MCP session (absent for the stateless
/// revision 2026-07-28) and the client's address.
fn audit_fields(context: &RequestContext<RoleServer>) -> Map<String, Value> {
    let mut fields = Map::new();
    let Some(parts) = context.extensions.get::<axum::http::request::Parts>() else {
        return fields;
    };
    if let Some(id) = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    {
        fields.insert("mcp_session_id".into(), id.into());
    }
    if let Some(ConnectInfo(address)) = parts.extensions.get::<ConnectInfo<SocketAddr>>() {
        fields.insert("client".into(), address.to_string().into());
    }
    fields
}

/// CORS for the origins the owner allowed (`--allow-origin`), so that a page there (an MCP
/// client in a browser) may call `/mcp`: its preflight is answered without the token, and
/// answers say the origin may read them and the `Mcp-Session-Id` header. Any other origin
/// gets no CORS header (`guard::browser_rules` refuses it anyway).
fn cors(origins: &[String]) -> tower_http::cors::CorsLayer {
    use axum::http::{HeaderName, HeaderValue, Method, header};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let origins = origins.iter().filter_map(|o| HeaderValue::from_str(o).ok());
    CorsLayer::new()
        .allow_origin(AllowOrigin::list(origins))
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::ACCEPT,
            HeaderName::from_static("mcp-session-id"),
            HeaderName::from_static("mcp-protocol-version"),
            HeaderName::from_static("last-event-id"),
        ])
        .expose_headers([
            HeaderName::from_static("mcp-session-id"),
            header::WWW_AUTHENTICATE,
        ])
        .max_age(Duration::from_secs(600))
}

fn router(
    server: TerminalServer,
    view: Option<Arc<crate::web::View>>,
    prepared: &Prepared,
    stop_mcp: CancellationToken,
) -> Router {
    let config = StreamableHttpServerConfig::default()
        // `guard::browser_rules` checks Host (honouring --allow-remote) and Origin for
        // every route, the live view's too.
        .disable_allowed_hosts()
        .with_cancellation_token(stop_mcp)
        // Counted as the body streams in, with or without a Content-Length: 413 past it.
        .with_max_request_body_bytes(HTTP_MAX_BODY_BYTES);
    let sessions = Arc::new(CappedSessions::new(prepared.mcp_idle));
    let mcp = StreamableHttpService::new(move || Ok(server.clone()), sessions.clone(), config);
    let access = prepared.access.clone();
    let mut router = Router::new()
        .route_service("/mcp", mcp)
        .route_layer(from_fn_with_state(sessions, bodies::answer_unreadable))
        .route_layer(axum::middleware::from_fn(mcp_sessions::full_is_503))
        .route_layer(axum::middleware::from_fn(mcp_sessions::closed_is_200))
        .route_layer(from_fn_with_state(
            Arc::new(in_flight::InFlight::default()),
            in_flight::cap,
        ))
        // Outside the body limit: an unauthenticated client learns nothing, not even a 413.
        .route_layer(from_fn_with_state(access.clone(), guard::require_bearer))
        // Outside the token: a browser asks first (a preflight) without it.
        .route_layer(cors(&prepared.allow_origins));
    if let Some(view) = view {
        router = router.merge(crate::web::router(view));
    }
    router
        .fallback(|| async { crate::web::not_served(true) })
        .layer(from_fn_with_state(access, guard::browser_rules))
}
