//! The guard between the real stdin/stdout and the MCP service.
//!
//! Incoming lines over `MAX_FRAME_BYTES` are discarded as they stream in (never buffered
//! whole) and answered with a JSON-RPC "Invalid Request" error; lines that are not JSON
//! (or not UTF-8) are answered with a "Parse error". Both answers have `id: null`, and the
//! server keeps serving. Everything else passes through unchanged. The service's output is
//! copied to stdout line by line, so an injected answer never splits one of its messages.
//! At most `REPLY_QUEUE_MAX` such answers wait for stdout: while they do, input is not read,
//! so a client that writes garbage and never reads cannot grow the server.

use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
};
use tokio::sync::{mpsc, oneshot};

use crate::limits::{MAX_FRAME_BYTES, REPLY_QUEUE_MAX};

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
    let (replies_tx, replies_rx) = mpsc::channel(REPLY_QUEUE_MAX);
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
    replies: mpsc::Sender<Vec<u8>>,
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
            if replies.send(error_frame(-32600, &message)).await.is_err() {
                break;
            }
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
            let reply = error_frame(-32700, "Parse error: the message is not valid UTF-8 JSON");
            if replies.send(reply).await.is_err() {
                break;
            }
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
    mut replies: mpsc::Receiver<Vec<u8>>,
) {
    let mut chunk = vec![0u8; 64 * 1024];
    // Bytes of a service message not yet ended by its newline.
    let mut partial: Vec<u8> = Vec::new();
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
            // A reply waits in the channel (bounded) until no service message is half
            // written, then goes out at once.
            Some(reply) = replies.recv(), if partial.is_empty() => {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncWriteExt;

    use super::*;

    /// A client that writes garbage and never reads: once the bounded replies wait for
    /// stdout, the guard stops reading, so the client's writes stall.
    #[tokio::test]
    async fn stops_reading_while_error_replies_wait() {
        let (mut client_in, stdin) = tokio::io::duplex(4096);
        let (stdout, _client_out_unread) = tokio::io::duplex(4096);
        let (_service_in, _service_out, _eof) = guard(stdin, stdout);
        let garbage = b"not json at all\n";
        let mut accepted = 0usize;
        for _ in 0..100_000 {
            let write = client_in.write_all(garbage);
            match tokio::time::timeout(Duration::from_secs(2), write).await {
                Ok(Ok(())) => accepted += 1,
                Ok(Err(e)) => panic!("the guard closed its input: {e}"),
                Err(_stalled) => break,
            }
        }
        // Replies waiting in stdout's pipe and the queue, plus the lines buffered on the
        // way in (the duplex and the 64 KiB reader).
        let bound = 4096 / 80 + REPLY_QUEUE_MAX + (4096 + 65_536) / garbage.len() + 8;
        assert!(
            accepted < bound,
            "{accepted} garbage lines read, bound {bound}"
        );
    }
}
