//! The accept loop both HTTP listeners (`http`, `stdio --web`) serve with, so that nobody
//! who can connect, signed in or not, can hold the server's descriptors by connecting:
//! - at most `Limits::connections` connections at once. When all are taken, a new one takes
//!   the place of the oldest that has made no authenticated request yet (a client that
//!   connected and sent nothing useful); when every one has, the new one is refused at
//!   once with a 503;
//! - a request head must arrive within `Limits::header_read` of the connection's start or
//!   of the end of the previous answer (hyper's header timer, which runs only with a timer);
//! - a connection on which no byte moved either way for `Limits::idle` is closed (event
//!   streams send a keep-alive comment well within it);
//! - a request head over `HTTP_MAX_HEAD_BYTES` is refused (431) and ends the connection, so
//!   connections that send a long head and never finish it hold little (hyper's default,
//!   about 400 KiB each, let 128 of them hold 50 MB, kept by the allocator after they went);
//! - a refused request (401, 403) ends a connection that never made an authenticated one;
//! - out of descriptors, accepting pauses instead of spinning, and says so once.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::limits::{HTTP_ACCEPT_PAUSE, HTTP_EVICTION_WAIT, HTTP_MAX_HEAD_BYTES};
use crate::process::is_out_of_files;

/// The bounds of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub connections: usize,
    pub header_read: Duration,
    pub idle: Duration,
}

/// A connection as the requests on it see it (a request extension): the guards mark it
/// once a request on it was authenticated, and then it is never displaced.
#[derive(Clone)]
pub struct Connection(Arc<Held>);

struct Held {
    proven: AtomicBool,
    closed: AtomicBool,
    /// Fired to make room for a newer connection.
    displaced: CancellationToken,
}

impl Connection {
    /// A request on this connection passed the token, a cookie or a sign-in code.
    pub fn prove(&self) {
        self.0.proven.store(true, Ordering::Relaxed);
    }

    fn proven(&self) -> bool {
        self.0.proven.load(Ordering::Relaxed)
    }
}

/// Mark the connection a request came on as authenticated (a no-op for a request that did
/// not come through `serve`).
pub fn prove<B>(request: &Request<B>) {
    if let Some(connection) = request.extensions().get::<Connection>() {
        connection.prove();
    }
}

/// The connections being served, and which one makes room for a newcomer.
struct Admission {
    permits: Arc<Semaphore>,
    /// Connections with no authenticated request yet, oldest first; those that closed or
    /// were proved since are dropped from it as they are met.
    unproven: Mutex<VecDeque<Arc<Held>>>,
}

impl Admission {
    fn new(connections: usize) -> Self {
        Admission {
            permits: Arc::new(Semaphore::new(connections)),
            unproven: Mutex::new(VecDeque::new()),
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Held>>> {
        let mut queue = self.unproven.lock().unwrap_or_else(|e| e.into_inner());
        queue.retain(|held| {
            !held.closed.load(Ordering::Relaxed) && !held.proven.load(Ordering::Relaxed)
        });
        queue
    }

    /// A place for a new connection, displacing the oldest unproven one if need be; `None`
    /// when every place is held by a connection that was authenticated.
    async fn admit(&self) -> Option<(OwnedSemaphorePermit, Arc<Held>)> {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                let oldest = self.queue().pop_front()?;
                oldest.displaced.cancel();
                // Its task drops the connection, and its place, when next polled.
                let freed =
                    tokio::time::timeout(HTTP_EVICTION_WAIT, self.permits.clone().acquire_owned());
                freed.await.ok()?.ok()?
            }
        };
        let held = Arc::new(Held {
            proven: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            displaced: CancellationToken::new(),
        });
        self.queue().push_back(held.clone());
        Some((permit, held))
    }
}

/// Serve `app` on `listener` until `stop`, then let every connection finish its answer in
/// progress and return once all have closed (the caller bounds that wait).
pub async fn serve(listener: TcpListener, app: Router, limits: Limits, stop: CancellationToken) {
    let admission = Admission::new(limits.connections);
    let mut out_of_files = false;
    let mut refusing = false;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if e.raw_os_error().is_some_and(is_out_of_files) => {
                if !out_of_files {
                    tracing::warn!(
                        "the server is out of file descriptors: new connections wait until \
                         some close"
                    );
                }
                out_of_files = true;
                tokio::time::sleep(HTTP_ACCEPT_PAUSE).await;
                continue;
            }
            // That client is gone already (ECONNABORTED and the like).
            Err(_) => continue,
        };
        out_of_files = false;
        match admission.admit().await {
            Some((permit, held)) => {
                refusing = false;
                let (app, stop) = (app.clone(), stop.clone());
                tokio::spawn(async move {
                    serve_connection(stream, peer, app, limits, &held, stop).await;
                    held.closed.store(true, Ordering::Relaxed);
                    drop(permit);
                });
            }
            None => {
                if !refusing {
                    tracing::warn!(
                        "{} connections are open, every one authenticated: refusing new ones",
                        limits.connections
                    );
                }
                refusing = true;
                refuse(&stream, limits.connections);
            }
        }
    }
    let _ = admission
        .permits
        .acquire_many(limits.connections as u32)
        .await;
}

/// Say why, if the socket takes it at once, and close.
fn refuse(stream: &TcpStream, connections: usize) {
    let body = format!(
        "Service Unavailable: {connections} connections are open, the most this server \
         serves at once; try again when one has closed.\n"
    );
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(response.as_bytes());
}

/// Serve one connection until it closes, is displaced, goes idle or `stop`.
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: Limits,
    held: &Arc<Held>,
    stop: CancellationToken,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: activity.clone(),
    });
    let connection = Connection(held.clone());
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        request.extensions_mut().insert(connection.clone());
        let (app, connection) = (app.clone(), connection.clone());
        async move {
            let Ok(mut response) = app.oneshot(request).await;
            let refused = matches!(
                response.status(),
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
            );
            if refused && !connection.proven() {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, Infallible>(response)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .max_buf_size(HTTP_MAX_HEAD_BYTES);
    let served = builder.serve_connection(io, service);
    tokio::pin!(served);
    loop {
        let quiet_until = activity.last() + limits.idle;
        tokio::select! {
            _ = served.as_mut() => return,
            () = held.displaced.cancelled() => return,
            () = tokio::time::sleep_until(quiet_until) => {
                if activity.last() + limits.idle <= Instant::now() {
                    return;
                }
            }
            () = stop.cancelled() => {
                served.as_mut().graceful_shutdown();
                let _ = served.as_mut().await;
                return;
            }
        }
    }
}

/// When a byte last moved on a connection, either way.
struct Activity {
    since: Instant,
    /// Milliseconds from `since`.
    last: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            since: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let now = self.since.elapsed().as_millis() as u64;
        self.last.store(now, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.since + Duration::from_millis(self.last.load(Ordering::Relaxed))
    }
}

/// A socket that notes in `activity` every read or write that moved bytes.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.touch();
        }
        polled
    }
}

impl Watched {
    fn moved(&self, polled: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.moved(polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.moved(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
