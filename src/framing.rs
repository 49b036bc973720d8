//! The guard between the real stdin/stdout and the MCP service.
//!
//! Incoming lines over `MAX_FRAME_BYTES` are discarded as they stream in (never buffered
//! whole) and answered with a JSON-RPC "Invalid Request" error; lines that are not JSON
//! (or not UTF-8) are answered with a "Parse error". Both answers have `id: null`, and the
//! server keeps serving. Everything else passes through unchanged. The service's output is
//! copied to stdout line by line, so an injected answer never splits one of its messages.
//! At most `REPLY_QUEUE_MAX` such answers wait for stdout: while they do, input is not read,
//! so a client that writes garbage and never reads cannot grow the server.
//!
//! At most `MAX_IN_FLIGHT` requests are with the service unanswered: beyond that no more
//! input is read until an answer has been written to stdout. A client that writes requests
//! and never reads the answers therefore meets a full pipe instead of a growing server.
//! A request whose id is already in flight is answered here with "Invalid Request": its
//! answer could not be told apart from the first one's.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::limits::{MAX_FRAME_BYTES, MAX_IN_FLIGHT, REPLY_QUEUE_MAX};

const PIPE_CAPACITY: usize = 2 * MAX_FRAME_BYTES;
/// Room made for each read of the service's output.
const READ_BYTES: usize = 64 * 1024;

/// The guarded ends of stdio, as the MCP service and the serving loop use them.
pub struct Guarded {
    /// What the service reads and writes.
    pub service_in: DuplexStream,
    pub service_out: DuplexStream,
    /// Fires when stdin reaches EOF (so shutdown need not wait for the service to drain
    /// requests still in flight).
    pub stdin_closed: oneshot::Receiver<()>,
    /// Fires when everything the service and the guard had to say is on stdout (or stdout
    /// failed): the process may exit without losing an answer.
    pub stdout_done: oneshot::Receiver<()>,
}

/// Start the pumps between `stdin`/`stdout` and the service.
pub fn guard<R, W>(stdin: R, stdout: W) -> Guarded
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (service_in, pump_in) = tokio::io::duplex(PIPE_CAPACITY);
    let (service_out, pump_out) = tokio::io::duplex(PIPE_CAPACITY);
    let (replies_tx, replies_rx) = mpsc::channel(REPLY_QUEUE_MAX);
    let (eof_tx, stdin_closed) = oneshot::channel();
    let (done_tx, stdout_done) = oneshot::channel();
    let in_flight = Arc::new(InFlight::default());
    let answered = in_flight.clone();
    tokio::spawn(async move {
        pump_input(stdin, pump_in, replies_tx, in_flight).await;
        let _ = eof_tx.send(());
    });
    tokio::spawn(async move {
        pump_output(pump_out, stdout, replies_rx, answered).await;
        let _ = done_tx.send(());
    });
    Guarded {
        service_in,
        service_out,
        stdin_closed,
        stdout_done,
    }
}

/// The ids (as JSON text) of requests passed to the service and not yet answered on stdout.
#[derive(Default)]
struct InFlight {
    ids: Mutex<HashSet<String>>,
    answered: Notify,
}

impl InFlight {
    fn ids(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait for room, then note `id` as in flight. False, at once, when a request with the
    /// same id is still unanswered: the service keys its answers by id, so the two would
    /// share one answer and the other would never come.
    async fn admit(&self, id: String) -> bool {
        loop {
            let answered = self.answered.notified();
            {
                let mut ids = self.ids();
                if ids.contains(&id) {
                    return false;
                }
                if ids.len() < MAX_IN_FLIGHT {
                    ids.insert(id);
                    return true;
                }
            }
            answered.await;
        }
    }

    fn settle(&self, id: &str) {
        if self.ids().remove(id) {
            self.answered.notify_waiters();
        }
    }

    /// Settle the requests answered by these whole lines of service output. A cancelled
    /// request may never be answered; its cancellation settles it on the input side.
    fn settle_answers(&self, lines: &[u8]) {
        for line in lines_of(lines) {
            if let Some(rest) = line.strip_prefix(ANSWER_PREFIX)
                && let Some(Ok(id)) = serde_json::Deserializer::from_slice(rest)
                    .into_iter::<serde_json::Value>()
                    .next()
            {
                self.settle(&id.to_string());
            }
        }
    }
}

/// How every answer of the service begins (it sends no requests of its own).
const ANSWER_PREFIX: &[u8] = br#"{"jsonrpc":"2.0","id":"#;

/// What the guard does with a message that is JSON.
#[derive(Debug, PartialEq)]
enum Admission {
    /// A request the service will answer with this id: it holds a place.
    Request(serde_json::Value),
    /// A request with a readable id that the service cannot read as an MCP message (`params`
    /// of the wrong type, say): the service would answer it with `id: null`, which frees no
    /// place, so the guard answers it with its id instead and the service never sees it.
    Refuse(serde_json::Value, String),
    /// Everything else passes unchanged: notifications, answers, and what the service
    /// refuses with `id: null` on its own (an id that is not a string or an integer, no
    /// `jsonrpc: "2.0"`, a repeated key), which must not hold a place that nothing frees.
    Pass,
}

fn admission(message: &serde_json::Value, text: &str) -> Admission {
    let Some(id) = request_id(message) else {
        return Admission::Pass;
    };
    if repeats_a_key(text) {
        return Admission::Pass;
    }
    // Read exactly as the service reads it.
    match serde_json::from_str::<rmcp::model::ClientJsonRpcMessage>(text) {
        Ok(rmcp::model::JsonRpcMessage::Request(_)) => Admission::Request(id.clone()),
        Ok(_) => Admission::Pass,
        Err(e) => Admission::Refuse(id.clone(), e.to_string()),
    }
}

/// The id of what has the shape of a request: `jsonrpc: "2.0"`, a method name, and an id
/// that is a string or an integer.
fn request_id(message: &serde_json::Value) -> Option<&serde_json::Value> {
    let object = message.as_object()?;
    object.get("method")?.as_str()?;
    if object.get("jsonrpc")?.as_str()? != "2.0" {
        return None;
    }
    let id = object.get("id")?;
    (id.is_string() || id.is_i64() || id.is_u64()).then_some(id)
}

/// Whether the top-level object names a key twice (the parsed value keeps only the last).
fn repeats_a_key(text: &str) -> bool {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = bool;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
            let mut seen = HashSet::new();
            let mut repeated = false;
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<IgnoredAny>()?;
                repeated |= !seen.insert(key);
            }
            Ok(repeated)
        }
    }
    serde_json::Deserializer::from_str(text)
        .deserialize_map(Keys)
        .unwrap_or(true)
}

/// The request a `notifications/cancelled` gives up on.
fn cancelled_id(message: &serde_json::Value) -> Option<String> {
    if message.get("method")?.as_str()? != "notifications/cancelled" {
        return None;
    }
    message
        .pointer("/params/requestId")
        .map(serde_json::Value::to_string)
}

/// How the service begins an error answer that has no `id`: its answer to a request whose id
/// it could not read (an id of the wrong type, duplicate keys).
const ERROR_WITHOUT_ID: &[u8] = br#"{"jsonrpc":"2.0","error":"#;
const ERROR_WITH_NULL_ID: &[u8] = br#"{"jsonrpc":"2.0","id":null,"error":"#;

/// JSON-RPC requires `"id": null` on the answer to a request whose id could not be read.
fn with_null_ids(lines: Vec<u8>) -> Vec<u8> {
    if !lines_of(&lines).any(|line| line.starts_with(ERROR_WITHOUT_ID)) {
        return lines;
    }
    let mut fixed = Vec::with_capacity(lines.len() + 16);
    for line in lines_of(&lines) {
        match line.strip_prefix(ERROR_WITHOUT_ID) {
            Some(rest) => {
                fixed.extend_from_slice(ERROR_WITH_NULL_ID);
                fixed.extend_from_slice(rest);
            }
            None => fixed.extend_from_slice(line),
        }
    }
    fixed
}

/// The lines of `bytes`, each with its newline (the last one without, if unterminated).
/// Found with `memchr`: a page of output is one line of hundreds of kilobytes, and only
/// where lines begin matters here.
fn lines_of(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    let ends = memchr::memchr_iter(b'\n', bytes).map(|at| at + 1);
    ends.chain(std::iter::once(bytes.len()))
        .filter_map(move |end| {
            let line = &bytes[start..end];
            start = end;
            (!line.is_empty()).then_some(line)
        })
}

fn error_frame(id: serde_json::Value, code: i64, message: &str) -> Vec<u8> {
    let frame = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
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
    in_flight: Arc<InFlight>,
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
            if !answer(&replies, serde_json::Value::Null, -32600, &message).await {
                break;
            }
            continue;
        }
        let frame = std::mem::take(&mut line);
        let body = frame.trim_ascii();
        if body.is_empty() {
            continue;
        }
        // Parsed as the service will parse it, so what it would drop unanswered (nesting past
        // serde_json's depth limit, a number out of range) is answered here.
        let parsed = match std::str::from_utf8(body) {
            Err(_) => Err("the message is not valid UTF-8".to_owned()),
            Ok(text) => serde_json::from_str::<serde_json::Value>(text)
                .map_err(|e| format!("the message is not valid JSON ({e})")),
        };
        let message = match parsed {
            Ok(message) => message,
            Err(why) => {
                tracing::warn!("refused a message: {why}");
                let message = format!("Parse error: {why}");
                if !answer(&replies, serde_json::Value::Null, -32700, &message).await {
                    break;
                }
                continue;
            }
        };
        if let Some(id) = cancelled_id(&message) {
            in_flight.settle(&id);
        }
        let text = std::str::from_utf8(body).unwrap_or_default();
        let refusal = match admission(&message, text) {
            Admission::Request(id) if !in_flight.admit(id.to_string()).await => {
                tracing::warn!("refused a request whose id {id} is already in flight");
                let message = format!(
                    "Invalid Request: id {id} belongs to a request not yet answered; \
                     give each request in flight its own id"
                );
                Some((id, message))
            }
            Admission::Refuse(id, why) => {
                tracing::warn!("refused a request: {why}");
                Some((
                    id,
                    format!("Invalid Request: not a valid MCP request ({why})"),
                ))
            }
            Admission::Request(_) | Admission::Pass => None,
        };
        if let Some((id, message)) = refusal {
            if !answer(&replies, id, -32600, &message).await {
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

/// Answer a message here, in the service's place; false once stdout is gone.
async fn answer(
    replies: &mpsc::Sender<Vec<u8>>,
    id: serde_json::Value,
    code: i64,
    message: &str,
) -> bool {
    replies.send(error_frame(id, code, message)).await.is_ok()
}

async fn pump_output<W: AsyncWrite + Unpin>(
    mut service: DuplexStream,
    mut stdout: W,
    mut replies: mpsc::Receiver<Vec<u8>>,
    in_flight: Arc<InFlight>,
) {
    // Bytes of a service message not yet ended by its newline; the service's output is
    // read straight into it.
    let mut partial: Vec<u8> = Vec::new();
    loop {
        let had = partial.len();
        partial.reserve(READ_BYTES);
        tokio::select! {
            read = service.read_buf(&mut partial) => {
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                // Only the new bytes can hold a new end of message; the whole messages
                // before the last newline leave in one piece, without a copy.
                if let Some(at) = memchr::memrchr(b'\n', &partial[had..]) {
                    let rest = partial.split_off(had + at + 1);
                    let whole = with_null_ids(std::mem::replace(&mut partial, rest));
                    if stdout.write_all(&whole).await.is_err() {
                        return;
                    }
                    in_flight.settle_answers(&whole);
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
    // The service has ended: the answers the guard still holds (to the last lines before
    // stdin's EOF) go out too, then no more are taken.
    replies.close();
    while let Some(reply) = replies.recv().await {
        if stdout.write_all(&reply).await.is_err() {
            return;
        }
    }
    let _ = stdout.flush().await;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

    use super::*;

    /// A client that writes garbage and never reads: once the bounded replies wait for
    /// stdout, the guard stops reading, so the client's writes stall.
    #[tokio::test]
    async fn stops_reading_while_error_replies_wait() {
        let (mut client_in, stdin) = tokio::io::duplex(4096);
        let (stdout, _client_out_unread) = tokio::io::duplex(4096);
        let _guarded = guard(stdin, stdout);
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

    /// An answer the guard holds back (a service message is half written) when the
    /// service ends still reaches stdout.
    #[tokio::test]
    async fn the_guards_answers_outlive_the_service() {
        let (mut client_in, stdin) = tokio::io::duplex(4096);
        let (stdout, client_out) = tokio::io::duplex(4096);
        let mut guarded = guard(stdin, stdout);
        // One whole answer and the start of the next, in one write: once the whole one is
        // on stdout, the guard holds the start.
        guarded
            .service_out
            .write_all(
                b"{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}\n{\"jsonrpc\":\"2.0\",\"id\":1",
            )
            .await
            .unwrap();
        let mut lines = tokio::io::BufReader::new(client_out).lines();
        let first = lines.next_line().await.unwrap().unwrap();
        assert_eq!(first, r#"{"jsonrpc":"2.0","id":0,"result":{}}"#);
        client_in.write_all(b"not json\n").await.unwrap();
        drop(client_in);
        guarded.stdin_closed.await.unwrap();
        guarded
            .service_out
            .write_all(b",\"result\":{}}\n")
            .await
            .unwrap();
        drop(guarded.service_out);
        drop(guarded.service_in);
        let mut answers = Vec::new();
        while let Some(line) = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("stdout ends")
            .unwrap()
        {
            answers.push(serde_json::from_str::<serde_json::Value>(&line).unwrap());
        }
        assert_eq!(answers.len(), 2, "{answers:?}");
        assert_eq!(answers[0]["id"], json!(1));
        assert_eq!(answers[1]["error"]["code"], json!(-32700));
    }

    fn id_of(text: &str) -> Option<String> {
        match admission(&serde_json::from_str(text).unwrap(), text) {
            Admission::Request(id) => Some(id.to_string()),
            _ => None,
        }
    }

    #[test]
    fn only_requests_answered_with_their_id_hold_a_place() {
        assert_eq!(
            id_of(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#).as_deref(),
            Some("7")
        );
        assert_eq!(
            id_of(r#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#).as_deref(),
            Some("\"a\"")
        );
        for refused in [
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}"#,
            r#"{"id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","id":2}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
        ] {
            assert_eq!(id_of(refused), None, "{refused}");
        }
    }

    /// The service answers a request it cannot read with `id: null`, which would hold its
    /// place for ever: 64 of them stopped the server reading input.
    #[test]
    fn a_request_the_service_cannot_read_is_answered_here_with_its_id() {
        for (text, id) in [
            (
                r#"{"jsonrpc":"2.0","id":4,"method":"ping","params":5}"#,
                json!(4),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"t","method":"tools/call","params":[1]}"#,
                json!("t"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"x","_meta":5}}"#,
                json!(5),
            ),
        ] {
            match admission(&serde_json::from_str(text).unwrap(), text) {
                Admission::Refuse(refused, why) => {
                    assert_eq!(refused, id, "{text}");
                    assert!(!why.is_empty());
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        let notification = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#;
        assert_eq!(
            admission(&serde_json::from_str(notification).unwrap(), notification),
            Admission::Pass
        );
    }

    /// Two requests in flight with one id would share the service's one answer, and the
    /// other would never be answered: the second is refused here, with that id, and the id
    /// is free again once its request is answered.
    #[tokio::test]
    async fn a_second_request_with_an_id_in_flight_is_refused() {
        let (mut client_in, stdin) = tokio::io::duplex(1 << 16);
        let (stdout, client_out) = tokio::io::duplex(1 << 16);
        let guarded = guard(stdin, stdout);
        let (service_in, mut service_out) = (guarded.service_in, guarded.service_out);
        let mut service_lines = tokio::io::BufReader::new(service_in).lines();
        let mut client_lines = tokio::io::BufReader::new(client_out).lines();
        let request = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n";
        client_in.write_all(request.as_bytes()).await.unwrap();
        client_in.write_all(request.as_bytes()).await.unwrap();
        let other = "{\"jsonrpc\":\"2.0\",\"id\":\"2\",\"method\":\"ping\"}\n";
        client_in.write_all(other.as_bytes()).await.unwrap();
        let refusal: serde_json::Value =
            serde_json::from_str(&client_lines.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(refusal["id"], json!(2), "{refusal}");
        assert_eq!(refusal["error"]["code"], json!(-32600), "{refusal}");
        assert!(
            refusal["error"]["message"]
                .as_str()
                .unwrap()
                .contains("own id")
        );
        // The service saw the first request and the one whose id is the string "2".
        let first = service_lines.next_line().await.unwrap().unwrap();
        assert_eq!(first, request.trim_end());
        let second = service_lines.next_line().await.unwrap().unwrap();
        assert_eq!(second, other.trim_end());
        service_out
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\n")
            .await
            .unwrap();
        let answer = client_lines.next_line().await.unwrap().unwrap();
        assert_eq!(answer, r#"{"jsonrpc":"2.0","id":2,"result":{}}"#);
        client_in.write_all(request.as_bytes()).await.unwrap();
        let again = service_lines.next_line().await.unwrap().unwrap();
        assert_eq!(again, request.trim_end());
    }

    #[tokio::test]
    async fn requests_the_service_cannot_read_do_not_stop_the_input() {
        let (mut client_in, stdin) = tokio::io::duplex(1 << 20);
        let (stdout, client_out) = tokio::io::duplex(1 << 20);
        let _guarded = guard(stdin, stdout);
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

    #[test]
    fn answers_and_cancellations_free_their_place() {
        let in_flight = InFlight::default();
        in_flight.ids().insert("7".into());
        in_flight.ids().insert("\"a\"".into());
        in_flight.settle_answers(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n");
        assert_eq!(in_flight.ids().len(), 1);
        let cancel: serde_json::Value = serde_json::from_str(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a"}}"#,
        )
        .unwrap();
        in_flight.settle(&cancelled_id(&cancel).unwrap());
        assert!(in_flight.ids().is_empty());
    }

    #[test]
    fn an_error_without_id_gets_a_null_id_and_nothing_else_changes() {
        let lines = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32600}}\n".to_vec();
        let fixed = with_null_ids(lines);
        assert_eq!(
            fixed,
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600}}\n"
        );
        let untouched = b"{\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{}}\n".to_vec();
        assert_eq!(with_null_ids(untouched.clone()), untouched);
    }
}
