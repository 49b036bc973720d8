//! The MCP service's transport over stdin/stdout: messages are read through the guard
//! (`framing`), and written with the fast JSON writer (`json`), which writes the same bytes
//! as serde_json in a fraction of the time for a page of output.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, JsonRpcMessage, JsonRpcResponse, ServerResult};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::framing::{self, Guard, InFlight};
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

/// The MCP service's transport on stdio: requests come through the guard (`framing`),
/// answers go straight to stdout, each whole under one lock, and settle their request's
/// place in flight once written.
pub struct Stdio<R, W> {
    /// Dropped at `close`, which ends the writer of the guard's own answers.
    guard: Option<Guard<R>>,
    out: Arc<Out<W>>,
    /// Writes the guard's answers to stdout, in order, between the service's messages.
    replies: Option<JoinHandle<()>>,
    /// The length of the last message sent: room made for the next one, so a page of
    /// output (answers of similar size, one after another) is written without the copies
    /// of a growing buffer.
    last_len: Arc<AtomicUsize>,
}

struct Out<W> {
    stdout: Mutex<W>,
    in_flight: Arc<InFlight>,
}

impl<W: AsyncWrite + Unpin> Out<W> {
    /// One message, whole: nothing else reaches stdout between its bytes.
    async fn write(&self, line: &[u8]) -> io::Result<()> {
        let mut stdout = self.stdout.lock().await;
        stdout.write_all(line).await?;
        stdout.flush().await
    }
}

impl<R, W> Stdio<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// The transport, and what fires when stdin ends.
    pub fn new(stdin: R, stdout: W) -> (Self, oneshot::Receiver<()>) {
        let in_flight = Arc::new(InFlight::default());
        let out = Arc::new(Out {
            stdout: Mutex::new(stdout),
            in_flight: in_flight.clone(),
        });
        let (lines, mut queued) = mpsc::channel::<Vec<u8>>(REPLY_QUEUE_MAX);
        let writer = out.clone();
        let replies = tokio::spawn(async move {
            while let Some(line) = queued.recv().await {
                let written = writer.write(&line).await;
                writer.in_flight.reply_written();
                if written.is_err() {
                    return;
                }
            }
        });
        let (eof, stdin_closed) = oneshot::channel();
        let stdio = Stdio {
            guard: Some(Guard::new(stdin, lines, in_flight, eof)),
            out,
            replies: Some(replies),
            last_len: Arc::default(),
        };
        (stdio, stdin_closed)
    }

    /// The requests passed on and not answered yet.
    pub fn in_flight(&self) -> Arc<InFlight> {
        self.out.in_flight.clone()
    }
}

impl<R, W> Transport<RoleServer> for Stdio<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), io::Error>> + Send + 'static {
        let (out, last_len) = (self.out.clone(), self.last_len.clone());
        async move {
            let answers = match &item {
                JsonRpcMessage::Response(response) => Some(&response.id),
                JsonRpcMessage::Error(error) => error.id.as_ref(),
                _ => None,
            };
            let answers = answers.map(framing::id_text);
            let mut line = String::with_capacity(last_len.load(Ordering::Relaxed) + 1);
            write_message(item, &mut line).map_err(io::Error::other)?;
            line.push('\n');
            last_len.store(line.len(), Ordering::Relaxed);
            out.write(&framing::with_null_id(line.into_bytes())).await?;
            if let Some(id) = answers {
                out.in_flight.settle(&id);
            }
            Ok(())
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        self.guard.as_mut()?.next().await
    }

    /// Everything the service and the guard had to say is on stdout when this returns (or
    /// stdout failed).
    async fn close(&mut self) -> Result<(), io::Error> {
        self.guard = None;
        if let Some(replies) = self.replies.take() {
            let _ = replies.await;
        }
        self.out.stdout.lock().await.flush().await
    }
}

/// Append the JSON text of `item` to `line`. A tool's result carries its structured
/// content twice, as the value and as that value's JSON text in its one text block
/// (`tools::structured` makes the text from the value with this same writer): the value is
/// written as that text, copied, not serialized again. For a page of output that is one
/// pass of escaping over its 64 KiB less. Only the order of the result's keys differs from
/// writing the value: `structuredContent` comes last.
fn write_message(
    mut item: TxJsonRpcMessage<RoleServer>,
    line: &mut String,
) -> Result<(), json::Error> {
    let value = match &mut item {
        JsonRpcMessage::Response(JsonRpcResponse {
            result: ServerResult::CallToolResult(result),
            ..
        }) if text_block(result).is_some_and(is_object_text)
            && result
                .structured_content
                .as_ref()
                .is_some_and(Value::is_object) =>
        {
            result.structured_content.take()
        }
        _ => None,
    };
    json::write(&item, line)?;
    let Some(value) = value else {
        return Ok(());
    };
    let text = match &item {
        JsonRpcMessage::Response(JsonRpcResponse {
            result: ServerResult::CallToolResult(result),
            ..
        }) => text_block(result),
        _ => None,
    };
    // The answer ends with its result's closing brace and its own; the result holds its
    // content before them, so a comma goes first.
    let (Some(text), Some(end)) = (text, line.strip_suffix("}}").map(str::len)) else {
        return Err(serde::ser::Error::custom(
            "a tool's result could not be written",
        ));
    };
    debug_assert_eq!(
        json::to_string(&value, text.len()).ok().as_deref(),
        Some(text),
        "a tool result's text block is not its structured content's JSON text"
    );
    line.truncate(end);
    line.reserve(text.len() + 24);
    line.push_str(",\"structuredContent\":");
    line.push_str(text);
    line.push_str("}}");
    Ok(())
}

/// Whether `text` has the shape of a JSON object's text, a cheap guard beside the debug
/// assertion that it is exactly the structured content's: a text of any other shape is
/// never spliced into an answer.
fn is_object_text(text: &str) -> bool {
    text.starts_with('{') && text.ends_with('}')
}

/// The one text block of a tool's result.
fn text_block(result: &CallToolResult) -> Option<&str> {
    match result.content.as_slice() {
        [block] => Some(block.as_text()?.text.as_str()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

    use super::*;
    use crate::limits::MAX_IN_FLIGHT;

    /// A tool's answer with one text block and `value` as its structured content; the
    /// line `write_message` makes of it, and the whole message as serde_json sees it.
    fn written(text: &str, value: serde_json::Value) -> (String, serde_json::Value) {
        let mut result = CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)]);
        result.structured_content = Some(value);
        result.is_error = Some(false);
        let item = TxJsonRpcMessage::<RoleServer>::response(
            ServerResult::CallToolResult(result),
            rmcp::model::RequestId::Number(7),
        );
        let whole = serde_json::to_value(&item).unwrap();
        let mut line = String::new();
        write_message(item, &mut line).unwrap();
        (line, whole)
    }

    /// A tool result is written with its structured content copied from its text block:
    /// the same JSON as the whole message serialized, `structuredContent` last.
    #[test]
    fn a_tool_result_is_written_with_its_text_as_its_structured_content() {
        let value = json!({"ok": true, "text": "a \"quoted\" line\n\u{1b}[1m bold", "n": 3});
        let text = json::to_string(&value, 0).unwrap();
        let (line, whole) = written(&text, value);
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(parsed, whole);
        assert!(
            line.ends_with(&format!(",\"structuredContent\":{text}}}}}")),
            "{line}"
        );

        // A text of another shape is never spliced in: the value is written itself.
        let (line, whole) = written("plain", json!({"ok": true}));
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(parsed, whole);

        // Any other message is written as it is.
        let item = TxJsonRpcMessage::<RoleServer>::response(
            ServerResult::empty(()),
            rmcp::model::RequestId::Number(8),
        );
        let mut line = String::new();
        write_message(item, &mut line).unwrap();
        assert_eq!(line, r#"{"jsonrpc":"2.0","id":8,"result":{}}"#);
    }

    /// A client that writes garbage and never reads: once the bounded answers wait for
    /// stdout, the guard stops reading, so the client's writes stall.
    #[tokio::test]
    async fn stops_reading_while_error_answers_wait() {
        let (mut client_in, stdin) = tokio::io::duplex(4096);
        let (stdout, _client_out_unread) = tokio::io::duplex(4096);
        let (mut stdio, _) = Stdio::new(stdin, stdout);
        let _service = tokio::spawn(async move { while stdio.receive().await.is_some() {} });
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
        // Answers waiting in stdout's pipe and the queue, plus the lines buffered on the
        // way in (the duplex and the 64 KiB reader).
        let bound = 4096 / 80 + REPLY_QUEUE_MAX + (4096 + 65_536) / garbage.len() + 8;
        assert!(
            accepted < bound,
            "{accepted} garbage lines read, bound {bound}"
        );
    }

    /// Answers to requests the service cannot read come with their ids however many come
    /// unread, and hold no place in flight.
    #[tokio::test]
    async fn requests_the_service_cannot_read_do_not_stop_the_input() {
        let (mut client_in, stdin) = tokio::io::duplex(1 << 20);
        let (stdout, client_out) = tokio::io::duplex(1 << 20);
        let (mut stdio, _) = Stdio::new(stdin, stdout);
        let _service = tokio::spawn(async move { while stdio.receive().await.is_some() {} });
        let count = MAX_IN_FLIGHT * 2;
        for n in 0..count {
            let line =
                format!("{{\"jsonrpc\":\"2.0\",\"id\":{n},\"method\":\"ping\",\"params\":5}}\n");
            client_in.write_all(line.as_bytes()).await.unwrap();
        }
        let mut lines = tokio::io::BufReader::new(client_out).lines();
        for n in 0..count {
            let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
                .await
                .expect("an answer within 30 s")
                .unwrap()
                .unwrap();
            let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(answer["id"], json!(n), "{line}");
            assert_eq!(answer["error"]["code"], json!(-32600), "{line}");
        }
    }

    /// An answer written frees its request's place, and its id can be used again; the
    /// guard's answers still queued when the service closes reach stdout before `close`
    /// returns.
    #[tokio::test]
    async fn answers_free_their_place_and_close_flushes_the_guards_answers() {
        let (mut client_in, stdin) = tokio::io::duplex(1 << 16);
        let (stdout, client_out) = tokio::io::duplex(1 << 16);
        let (mut stdio, stdin_closed) = Stdio::new(stdin, stdout);
        let mut lines = tokio::io::BufReader::new(client_out).lines();
        let request = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n";
        client_in.write_all(request.as_bytes()).await.unwrap();
        let JsonRpcMessage::Request(first) = stdio.receive().await.unwrap() else {
            panic!("not a request");
        };
        let answer = TxJsonRpcMessage::<RoleServer>::response(
            rmcp::model::ServerResult::empty(()),
            first.id,
        );
        stdio.send(answer).await.unwrap();
        let line = lines.next_line().await.unwrap().unwrap();
        assert_eq!(line, r#"{"jsonrpc":"2.0","id":2,"result":{}}"#);
        client_in.write_all(request.as_bytes()).await.unwrap();
        client_in.write_all(b"not json\n").await.unwrap();
        drop(client_in);
        assert!(matches!(
            stdio.receive().await,
            Some(JsonRpcMessage::Request(_))
        ));
        assert!(stdio.receive().await.is_none());
        stdin_closed.await.expect("told");
        stdio.close().await.unwrap();
        drop(stdio);
        let refusal = lines.next_line().await.unwrap().unwrap();
        let refusal: serde_json::Value = serde_json::from_str(&refusal).unwrap();
        assert_eq!(refusal["error"]["code"], json!(-32700), "{refusal}");
        assert_eq!(lines.next_line().await.unwrap(), None);
    }
}
