//! The MCP service's transport over the guarded stdin/stdout (see `framing`): messages are
//! read as rmcp reads them, and written with the fast JSON writer (`json`), which writes
//! the same bytes as serde_json in a fraction of the time for a page of output.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};

use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::PollSender;

use crate::json;
use crate::limits::{REPLY_QUEUE_MAX, STDOUT_PIPE_BYTES};

/// Ask for `STDOUT_PIPE_BYTES` of room in stdout, where it is a pipe with less, halving
/// the request while the system refuses it: a page's answer then goes out in one write.
/// Nothing changes for a terminal or a file, or where the system allows no more. (Stdin
/// carries requests, which are small.)
pub fn widen_stdout() {
    use nix::fcntl::{FcntlArg, fcntl};
    use std::os::fd::AsFd;
    let fd = io::stdout();
    let Ok(now) = fcntl(fd.as_fd(), FcntlArg::F_GETPIPE_SZ) else {
        return; // not a pipe
    };
    let mut size = STDOUT_PIPE_BYTES;
    while size > now as usize && fcntl(fd.as_fd(), FcntlArg::F_SETPIPE_SZ(size as i32)).is_err() {
        size /= 2;
    }
}

pub struct Stdio {
    /// rmcp's reader; what it answers by itself (a message of the wrong shape) goes
    /// through `Answers` to the same output.
    read: AsyncRwTransport<RoleServer, DuplexStream, Answers>,
    write: Arc<Mutex<DuplexStream>>,
    /// The length of the last message sent: room made for the next one, so a page of
    /// output (answers of similar size, one after another) is written without the copies
    /// of a growing buffer.
    last_len: Arc<AtomicUsize>,
}

impl Stdio {
    pub fn new(service_in: DuplexStream, service_out: DuplexStream) -> Self {
        let write = Arc::new(Mutex::new(service_out));
        let (lines, mut queued) = mpsc::channel::<Vec<u8>>(REPLY_QUEUE_MAX);
        let out = write.clone();
        // Whole lines, written under the same lock as every message: never interleaved.
        tokio::spawn(async move {
            while let Some(line) = queued.recv().await {
                if out.lock().await.write_all(&line).await.is_err() {
                    return;
                }
            }
        });
        let answers = Answers {
            lines: PollSender::new(lines),
            partial: Vec::new(),
        };
        Stdio {
            read: AsyncRwTransport::new(service_in, answers),
            write,
            last_len: Arc::default(),
        }
    }
}

impl Transport<RoleServer> for Stdio {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), io::Error>> + Send + 'static {
        let (write, last_len) = (self.write.clone(), self.last_len.clone());
        async move {
            let mut line = String::with_capacity(last_len.load(Ordering::Relaxed) + 1);
            json::write(&item, &mut line).map_err(io::Error::other)?;
            line.push('\n');
            last_len.store(line.len(), Ordering::Relaxed);
            write.lock().await.write_all(line.as_bytes()).await
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.read.receive()
    }

    async fn close(&mut self) -> Result<(), io::Error> {
        Transport::<RoleServer>::close(&mut self.read).await?;
        self.write.lock().await.shutdown().await
    }
}

/// Takes the bytes rmcp's reader writes and queues them as whole lines; a full queue
/// holds the writer (and so the reading of more input) until the lines went out.
struct Answers {
    lines: PollSender<Vec<u8>>,
    partial: Vec<u8>,
}

impl AsyncWrite for Answers {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let closed = |_| io::Error::from(io::ErrorKind::BrokenPipe);
        ready!(self.lines.poll_reserve(cx)).map_err(closed)?;
        self.partial.extend_from_slice(buf);
        match memchr::memrchr(b'\n', &self.partial) {
            Some(at) => {
                let rest = self.partial.split_off(at + 1);
                let whole = std::mem::replace(&mut self.partial, rest);
                self.lines.send_item(whole).map_err(closed)?;
            }
            None => {
                self.lines.abort_send();
            }
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
