//! The guard between the real stdin/stdout and the MCP service.
//!
//! Incoming lines over `MAX_FRAME_BYTES` are discarded as they stream in (never buffered
//! whole) and answered with a JSON-RPC "Invalid Request" error; lines that are not JSON
//! (or not UTF-8) are answered with a "Parse error". Both answers have `id: null`, and the
//! server keeps serving. Everything else passes through unchanged. The service's output is
//! copied to stdout line by line, so an injected answer never splits one of its messages.

use std::collections::VecDeque;

use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
};
use tokio::sync::{mpsc, oneshot};

use crate::limits::MAX_FRAME_BYTES;

const PIPE_CAPACITY: usize = 2 * MAX_FRAME_BYTES;

/// Start the pumps; returns the reader and writer the MCP service should use, and a
/// receiver that fires when stdin reaches EOF (so shutdown need not wait for the service
/// to drain requests still in flight).
pub fn guard<R, W>(stdin: R, stdout: W) -> (DuplexStream, DuplexStream, oneshot::Receiver<()>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (service_in, pump_in) = tokio::io::duplex(PIPE_CAPACITY);
    let (service_out, pump_out) = tokio::io::duplex(PIPE_CAPACITY);
    let (replies_tx, replies_rx) = mpsc::unbounded_channel();
    let (eof_tx, eof_rx) = oneshot::channel();
    tokio::spawn(async move {
        pump_input(stdin, pump_in, replies_tx).await;
        let _ = eof_tx.send(());
    });
    tokio::spawn(pump_output(pump_out, stdout, replies_rx));
    (service_in, service_out, eof_rx)
}

fn error_frame(code: i64, message: &str) -> Vec<u8> {
    let frame = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": code, "message": message},
    });
    let mut bytes = frame.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

async fn pump_input<R: AsyncRead + Unpin>(
    stdin: R,
    mut service: DuplexStream,
    replies: mpsc::UnboundedSender<Vec<u8>>,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdin);
    let mut line: Vec<u8> = Vec::new();
    let mut discarding = false;
    loop {
        let available = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(available) => available,
        };
        let newline = available.iter().position(|b| *b == b'\n');
        let take = newline.map_or(available.len(), |i| i + 1);
        if !discarding {
            if line.len() + take > MAX_FRAME_BYTES {
                line.clear();
                discarding = true;
            } else {
                line.extend_from_slice(&available[..take]);
            }
        }
        reader.consume(take);
        if newline.is_none() {
            continue;
        }
        if std::mem::take(&mut discarding) {
            tracing::warn!("refused a message over {MAX_FRAME_BYTES} bytes");
            let message = format!(
                "Invalid Request: the message exceeds {MAX_FRAME_BYTES} bytes (newline \
                 included) and was discarded unread"
            );
            let _ = replies.send(error_frame(-32600, &message));
            continue;
        }
        let frame = std::mem::take(&mut line);
        let body = frame.trim_ascii();
        if body.is_empty() {
            continue;
        }
        let is_json = std::str::from_utf8(body)
            .is_ok_and(|text| serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok());
        if !is_json {
            tracing::warn!("refused a message that is not valid JSON");
            let _ = replies.send(error_frame(
                -32700,
                "Parse error: the message is not valid UTF-8 JSON",
            ));
            continue;
        }
        if service.write_all(&frame).await.is_err() {
            break;
        }
    }
    // Dropping the service's input tells it stdin reached EOF.
}

async fn pump_output<W: AsyncWrite + Unpin>(
    mut service: DuplexStream,
    mut stdout: W,
    mut replies: mpsc::UnboundedReceiver<Vec<u8>>,
) {
    let mut chunk = vec![0u8; 64 * 1024];
    // Bytes of a service message not yet ended by its newline.
    let mut partial: Vec<u8> = Vec::new();
    let mut queued: VecDeque<Vec<u8>> = VecDeque::new();
    loop {
        tokio::select! {
            read = service.read(&mut chunk) => {
                let n = match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                partial.extend_from_slice(&chunk[..n]);
                if let Some(end) = partial.iter().rposition(|b| *b == b'\n') {
                    let whole: Vec<u8> = partial.drain(..=end).collect();
                    if stdout.write_all(&whole).await.is_err() {
                        return;
                    }
                }
            }
            Some(reply) = replies.recv() => queued.push_back(reply),
        }
        if partial.is_empty() {
            while let Some(reply) = queued.pop_front() {
                if stdout.write_all(&reply).await.is_err() {
                    return;
                }
            }
        }
        if stdout.flush().await.is_err() {
            return;
        }
    }
    let _ = stdout.flush().await;
}
