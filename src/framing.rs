//! The guard on stdin: what reaches the MCP service, and what is answered here.
//!
//! Each line is parsed once, straight into the service's message type. Lines over
//! `MAX_FRAME_BYTES` are discarded as they stream in (never buffered whole) and answered
//! with a JSON-RPC "Invalid Request" error; lines that are not JSON (or not UTF-8) with a
//! "Parse error"; a request with a readable id that is not a valid MCP request with
//! "Invalid Request" and its id; other JSON the service cannot read with "Invalid Request"
//! and `id: null`, except a notification, which is never answered. The server keeps
//! serving. At most `REPLY_QUEUE_MAX` such answers wait for stdout: while they do, input
//! is not read, so a client that writes garbage and never reads cannot grow the server.
//! Each POST body over HTTP is read the same way (`read`), so both transports answer a
//! message alike.
//!
//! At most `MAX_IN_FLIGHT` requests are with the service unanswered (`InFlight`): beyond
//! that, requests read are held here (up to `MAX_HELD` of them, `MAX_HELD_BYTES` in all)
//! until an answer has been written to stdout, while input is still read, so that a
//! cancellation of a request in flight (or of one held, which is then dropped) still gets
//! through; past that no more input is read. A client that writes requests and never
//! reads the answers therefore meets a full pipe instead of a growing server. A request whose id is already in flight is answered here with "Invalid
//! Request": its answer could not be told apart from the first one's.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcMessage,
    RequestId,
};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::errors::method_not_found;
use crate::limits::{MAX_FRAME_BYTES, MAX_HELD, MAX_HELD_BYTES, MAX_IN_FLIGHT};

/// The reading half of the stdio transport. `next` is cancel-safe: the service's loop
/// drops it whenever something else is ready, so everything between two messages (the
/// line read so far, a request waiting for a place, an answer waiting for room) is kept
/// here, never in the future.
pub struct Guard<R> {
    reader: BufReader<R>,
    line: Vec<u8>,
    discarding: bool,
    /// Requests read, waiting in order for a place in flight: each as its line (read again
    /// when it passes), which takes a fraction of what its parsed form would.
    held: VecDeque<(RequestId, Vec<u8>)>,
    held_bytes: usize,
    /// Stdin ended: what is held is still passed on.
    ended: bool,
    /// An answer of the guard's, waiting for room in `replies`.
    refusal: Option<Vec<u8>>,
    replies: mpsc::Sender<Vec<u8>>,
    in_flight: Arc<InFlight>,
    eof: Option<oneshot::Sender<()>>,
}

/// What the guard does with a line.
#[derive(Debug)]
enum Verdict {
    /// Pass to the service as it is: notifications and answers.
    Deliver(ClientJsonRpcMessage),
    /// A request: it passes once it has a place in flight.
    Admit(RequestId, ClientJsonRpcMessage),
    /// Answer here, in the service's place.
    Answer(Vec<u8>),
    /// A notification the service cannot read: JSON-RPC answers no notification.
    Ignore,
}

impl<R: AsyncRead + Unpin> Guard<R> {
    /// `eof` fires when stdin ends (so shutdown need not wait for the service to drain the
    /// requests still in flight).
    pub fn new(
        stdin: R,
        replies: mpsc::Sender<Vec<u8>>,
        in_flight: Arc<InFlight>,
        eof: oneshot::Sender<()>,
    ) -> Self {
        Guard {
            reader: BufReader::with_capacity(64 * 1024, stdin),
            line: Vec::new(),
            discarding: false,
            held: VecDeque::new(),
            held_bytes: 0,
            ended: false,
            refusal: None,
            replies,
            in_flight,
            eof: Some(eof),
        }
    }

    /// The next message for the service; `None` once stdin has ended (or stdout is gone).
    pub async fn next(&mut self) -> Option<ClientJsonRpcMessage> {
        let message = self.next_message().await;
        if message.is_none()
            && let Some(eof) = self.eof.take()
        {
            let _ = eof.send(());
        }
        message
    }

    async fn next_message(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            if self.refusal.is_some() {
                let permit = self.replies.reserve().await.ok()?;
                self.in_flight.reply_queued();
                permit.send(self.refusal.take().expect("checked above"));
            }
            if let Some((id, _)) = self.held.front() {
                match self.in_flight.try_admit(id_text(id)) {
                    Admission::Admitted => {
                        let (id, line) = self.held.pop_front().expect("checked above");
                        self.held_bytes -= line.len();
                        // It was read as a valid request once, and reads so again.
                        match read(line.trim_ascii()) {
                            Ok(message) => return Some(message),
                            Err(_) => {
                                self.in_flight.settle(&id_text(&id));
                                continue;
                            }
                        }
                    }
                    Admission::Duplicate => {
                        let (id, line) = self.held.pop_front().expect("checked above");
                        self.held_bytes -= line.len();
                        self.refuse_duplicate(&id);
                        continue;
                    }
                    Admission::Full if self.ended || self.held_full() => {
                        self.in_flight.room().await;
                        continue;
                    }
                    // Input is still read meanwhile: a cancellation may free a place.
                    Admission::Full => {
                        let in_flight = self.in_flight.clone();
                        tokio::select! {
                            () = in_flight.room() => continue,
                            frame = self.frame() => match frame {
                                Some(frame) => match self.take(frame) {
                                    Some(message) => return Some(message),
                                    None => continue,
                                },
                                None => {
                                    self.ended = true;
                                    continue;
                                }
                            },
                        }
                    }
                }
            }
            if self.ended {
                return None;
            }
            let frame = self.frame().await?;
            if let Some(message) = self.take(frame) {
                return Some(message);
            }
        }
    }

    /// Whether no more requests are held until a place in flight comes free.
    fn held_full(&self) -> bool {
        self.held.len() >= MAX_HELD || self.held_bytes >= MAX_HELD_BYTES
    }

    /// What comes of a line read: a message to pass on now, or nothing (a request held, an
    /// answer of the guard's pending).
    fn take(&mut self, frame: Result<Vec<u8>, ()>) -> Option<ClientJsonRpcMessage> {
        let Ok(frame) = frame else {
            tracing::warn!("refused a message over {MAX_FRAME_BYTES} bytes");
            let why = format!(
                "Invalid Request: the message exceeds {MAX_FRAME_BYTES} bytes (newline \
                 included) and was discarded unread"
            );
            self.refusal = Some(error_frame(serde_json::Value::Null, -32600, &why));
            return None;
        };
        match self.judge(frame.trim_ascii()) {
            Verdict::Deliver(message) => Some(message),
            Verdict::Admit(id, message) => {
                // Behind none held, it passes at once if it may.
                if self.held.is_empty() {
                    match self.in_flight.try_admit(id_text(&id)) {
                        Admission::Admitted => return Some(message),
                        Admission::Duplicate => {
                            self.refuse_duplicate(&id);
                            return None;
                        }
                        Admission::Full => {}
                    }
                }
                self.held_bytes += frame.len();
                self.held.push_back((id, frame));
                None
            }
            Verdict::Answer(answer) => {
                self.refusal = Some(answer);
                None
            }
            Verdict::Ignore => None,
        }
    }

    /// Request `id` (as JSON text) was cancelled: its place in flight is free, or, held
    /// here, it is dropped unsent (a cancelled request is not answered).
    fn cancelled(&mut self, id: &str) {
        self.in_flight.settle(id);
        if let Some(at) = self.held.iter().position(|(held, _)| id_text(held) == id) {
            let (_, line) = self.held.remove(at).expect("found above");
            self.held_bytes -= line.len();
        }
    }

    /// Answer a request whose id is in flight already.
    fn refuse_duplicate(&mut self, id: &RequestId) {
        tracing::warn!("refused a request whose id is already in flight");
        let why = format!(
            "Invalid Request: id {id} belongs to a request not yet answered; give each \
             request in flight its own id"
        );
        self.refusal = Some(error_frame(id_value(id), -32600, &why));
    }

    /// The next line that is not blank, newline included; `Err` for one over
    /// `MAX_FRAME_BYTES`, read to its end and discarded; `None` at the end of stdin.
    async fn frame(&mut self) -> Option<Result<Vec<u8>, ()>> {
        loop {
            let available = match self.reader.fill_buf().await {
                Ok([]) | Err(_) => return None,
                Ok(available) => available,
            };
            let newline = memchr::memchr(b'\n', available);
            let take = newline.map_or(available.len(), |i| i + 1);
            if !self.discarding {
                if self.line.len() + take > MAX_FRAME_BYTES {
                    self.line.clear();
                    self.discarding = true;
                } else {
                    self.line.extend_from_slice(&available[..take]);
                }
            }
            self.reader.consume(take);
            if newline.is_none() {
                continue;
            }
            if std::mem::take(&mut self.discarding) {
                return Some(Err(()));
            }
            let frame = std::mem::take(&mut self.line);
            if !frame.trim_ascii().is_empty() {
                return Some(Ok(frame));
            }
        }
    }

    /// What `read` makes of it, with the places in flight kept: a request waits for one, a
    /// cancellation (readable or not) frees its request's.
    fn judge(&mut self, body: &[u8]) -> Verdict {
        match read(body) {
            Ok(JsonRpcMessage::Request(request)) => {
                let id = request.id.clone();
                let message = JsonRpcMessage::Request(request);
                match invalid_params(&message) {
                    Some(answer) => Verdict::Answer(answer),
                    None => Verdict::Admit(id, message),
                }
            }
            Ok(message) => {
                if let JsonRpcMessage::Notification(notification) = &message
                    && let ClientNotification::CancelledNotification(cancel) =
                        &notification.notification
                    && let Some(id) = &cancel.params.request_id
                {
                    self.cancelled(&id_text(id));
                }
                Verdict::Deliver(message)
            }
            Err(unreadable) => {
                if let Some(id) = &unreadable.cancelled {
                    self.cancelled(id);
                }
                unreadable
                    .answer
                    .map_or(Verdict::Ignore, |answer| Verdict::Answer(answer.frame))
            }
        }
    }
}

/// A message the service cannot read, and how it is answered in the service's place.
#[derive(Debug)]
pub struct Unreadable {
    /// `None` for a notification: JSON-RPC answers no notification.
    pub answer: Option<Answer>,
    /// The request (its id as JSON text) given up on, when this is a cancellation.
    cancelled: Option<String>,
}

/// A JSON-RPC error answer, newline included.
#[derive(Debug)]
pub struct Answer {
    /// The id it carries: the request's, or null when none could be read.
    pub id: serde_json::Value,
    pub frame: Vec<u8>,
}

impl Answer {
    fn new(id: serde_json::Value, code: i64, message: &str) -> Answer {
        let frame = error_frame(id.clone(), code, message);
        Answer { id, frame }
    }
}

/// One message (a line of stdin, a body over HTTP) parsed once, straight into the service's
/// message type; only what that parse refuses is looked at again, to answer it. Both
/// transports read with this, so a message is answered alike over either.
pub fn read(body: &[u8]) -> Result<ClientJsonRpcMessage, Unreadable> {
    let Ok(text) = std::str::from_utf8(body) else {
        return Err(unparsed("the message is not valid UTF-8"));
    };
    let error = match serde_json::from_str::<ClientJsonRpcMessage>(text) {
        Ok(message) => return Ok(message),
        Err(e) => e,
    };
    // Parsed as the service would parse it, so what it would drop unanswered (nesting
    // past serde_json's depth limit, a number out of range) is answered here.
    let message = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(message) => message,
        Err(e) => {
            return Err(half_a_character(text, &e)
                .unwrap_or_else(|| unparsed(&format!("the message is not valid JSON ({e})"))));
        }
    };
    let answer = match (request_id(&message), method_with_array_params(&message)) {
        // Params JSON-RPC allows but MCP does not (an array): "Invalid params", as for
        // params of the wrong shape inside an object (`invalid_params`); for a method MCP
        // does not define, "method not found", as with params it could read.
        (Some(id), Some(method)) if !repeats_a_key(text) => {
            if !MCP_METHODS.contains(&method) {
                return Err(Unreadable {
                    answer: Some(Answer::new(id.clone(), -32601, &method_not_found(method))),
                    cancelled: None,
                });
            }
            tracing::warn!("refused a request: the params of `{method}` are an array");
            let why = format!(
                "Invalid params: the params of `{method}` are an object in MCP, not an array"
            );
            Some(Answer::new(id.clone(), -32602, &why))
        }
        // Answered with its id: the service would answer it with `id: null`.
        (Some(id), None) if !repeats_a_key(text) => {
            tracing::warn!("refused a request that is not a valid MCP request");
            let why = match message.get("params") {
                Some(params) if !params.is_object() && !params.is_array() => {
                    "Invalid Request: `params` must be an object".to_owned()
                }
                _ => format!("Invalid Request: not a valid MCP request ({error})"),
            };
            Some(Answer::new(id.clone(), -32600, &why))
        }
        _ if message.get("method").is_some() && message.get("id").is_none() => None,
        // No id that can be read (none, or of the wrong type, or two of them).
        _ => Some(Answer::new(
            serde_json::Value::Null,
            -32600,
            "Invalid request",
        )),
    };
    Err(Unreadable {
        answer,
        cancelled: cancelled_id(&message),
    })
}

/// The method of a request `message` whose params are an array.
fn method_with_array_params(message: &serde_json::Value) -> Option<&str> {
    let method = message.get("method")?.as_str()?;
    message.get("params")?.is_array().then_some(method)
}

/// The requests MCP defines that a client sends this server.
const MCP_METHODS: [&str; 13] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
];

/// The answer to a request of a method MCP defines whose params are not as it defines them
/// (`tools/call` with `arguments` that is not an object): rmcp reads it as a request of a
/// method of its own, which the service answers "method not found" with the method as
/// its message. It is "Invalid params", saying why. A method nobody defines is "method not
/// found" here too, saying what to do. Both transports ask this.
pub fn invalid_params(message: &ClientJsonRpcMessage) -> Option<Vec<u8>> {
    let JsonRpcMessage::Request(request) = message else {
        return None;
    };
    let ClientRequest::CustomRequest(custom) = &request.request else {
        return None;
    };
    let method = custom.method.as_str();
    if !MCP_METHODS.contains(&method) {
        // The service would answer with the method alone as the message.
        let message = method_not_found(method);
        return Some(error_frame(id_value(&request.id), -32601, &message));
    }
    let params = custom.params.clone().unwrap_or_default();
    let why = match method {
        "tools/call" => serde_json::from_value::<CallToolRequestParams>(params)
            .err()
            .map(|e| format!(" ({e}; `name` is a string and `arguments` an object)")),
        _ => None,
    };
    let message = format!(
        "Invalid params: the params of `{method}` are not as MCP defines them{}",
        why.unwrap_or_default()
    );
    tracing::warn!("refused a request: the params of `{method}` are not as MCP defines them");
    Some(error_frame(id_value(&request.id), -32602, &message))
}

/// Over HTTP, where every body gets an answer: a notification the service cannot read
/// (JSON-RPC answers no notification, and stdio gives it none), refused with `id: null`.
pub fn unreadable_notification() -> Vec<u8> {
    error_frame(
        serde_json::Value::Null,
        -32600,
        "Invalid Request: a notification the server cannot read",
    )
}

/// A message that is not JSON: answered "Parse error", saying why, with `id: null`.
fn unparsed(why: &str) -> Unreadable {
    tracing::warn!("refused a message that is not valid JSON text");
    let answer = Answer::new(
        serde_json::Value::Null,
        -32700,
        &format!("Parse error: {why}"),
    );
    Unreadable {
        answer: Some(answer),
        cancelled: None,
    }
}

/// A request that is JSON but for a lone UTF-16 surrogate escape (`"\ud83d"`: half of a
/// character, as JavaScript writes text cut in the middle of an emoji, or Python text
/// decoded with `surrogateescape`), which no JSON parser here takes as a character:
/// answered "Parse error" with its id, so its client is not left waiting, saying what to
/// fix. `None` for any other message.
fn half_a_character(text: &str, error: &serde_json::Error) -> Option<Unreadable> {
    let mended = lone_surrogates_replaced(text);
    if mended == text {
        return None;
    }
    let mended = serde_json::from_str::<serde_json::Value>(&mended).ok()?;
    let id = request_id(&mended)?;
    tracing::warn!("refused a request holding half of a UTF-16 surrogate pair");
    let answer = Answer::new(
        id.clone(),
        -32700,
        &format!(
            "Parse error: the message holds a lone UTF-16 surrogate escape, half of a \
             character ({error}), as text cut in the middle of an emoji or decoded with \
             surrogateescape leaves; it is no character, and nothing was done: send whole \
             characters"
        ),
    );
    Some(Unreadable {
        answer: Some(answer),
        cancelled: None,
    })
}

/// `text` (JSON) with each `\uXXXX` escape of a lone UTF-16 surrogate in its strings
/// replaced by `\ufffd`; a pair's two halves stay.
fn lone_surrogates_replaced(text: &str) -> String {
    let escape_at = |rest: &str| -> Option<u32> {
        let hex = rest.strip_prefix("\\u")?.get(..4)?;
        u32::from_str_radix(hex, 16).ok()
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut in_string = false;
    while let Some(c) = rest.chars().next() {
        match c {
            '"' => in_string = !in_string,
            '\\' if in_string => {
                match escape_at(rest) {
                    Some(0xd800..=0xdbff)
                        if escape_at(&rest[6..])
                            .is_some_and(|low| (0xdc00..=0xdfff).contains(&low)) =>
                    {
                        out.push_str(&rest[..12]);
                        rest = &rest[12..];
                    }
                    Some(0xd800..=0xdfff) => {
                        out.push_str("\\ufffd");
                        rest = &rest[6..];
                    }
                    // Any other escape: itself and the character it escapes.
                    _ => {
                        let escaped = rest[1..].chars().next().map_or(0, char::len_utf8);
                        out.push_str(&rest[..1 + escaped]);
                        rest = &rest[1 + escaped..];
                    }
                }
                continue;
            }
            _ => {}
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// A request id as JSON text: how `InFlight` knows it.
pub fn id_text(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

fn id_value(id: &RequestId) -> serde_json::Value {
    serde_json::to_value(id).unwrap_or_default()
}

/// Whether a request may go in flight now.
enum Admission {
    Admitted,
    /// A request with its id is in flight.
    Duplicate,
    /// `MAX_IN_FLIGHT` are.
    Full,
}

/// The ids (as JSON text) of requests passed to the service and not yet answered on stdout.
#[derive(Default)]
pub struct InFlight {
    ids: Mutex<HashSet<String>>,
    /// The guard's own answers queued for stdout and not yet written.
    replies: std::sync::atomic::AtomicUsize,
    answered: Notify,
}

impl InFlight {
    fn ids(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Note `id` as in flight if there is room. Refused when a request with the same id is
    /// still unanswered: the service keys its answers by id, so the two would share one
    /// answer and the other would never come.
    fn try_admit(&self, id: String) -> Admission {
        let mut ids = self.ids();
        if ids.contains(&id) {
            Admission::Duplicate
        } else if ids.len() < MAX_IN_FLIGHT {
            ids.insert(id);
            Admission::Admitted
        } else {
            Admission::Full
        }
    }

    /// Once there is room for another request in flight.
    async fn room(&self) {
        loop {
            let answered = self.answered.notified();
            if self.ids().len() < MAX_IN_FLIGHT {
                return;
            }
            answered.await;
        }
    }

    /// Once no request is in flight and none of the guard's answers waits: every request
    /// passed on was answered or cancelled, and every one refused here was told so.
    pub async fn all_answered(&self) {
        use std::sync::atomic::Ordering;
        loop {
            let answered = self.answered.notified();
            if self.ids().is_empty() && self.replies.load(Ordering::SeqCst) == 0 {
                return;
            }
            answered.await;
        }
    }

    /// One of the guard's answers was queued for stdout.
    fn reply_queued(&self) {
        self.replies
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// One of the guard's answers was written (or could not be: stdout is gone).
    pub fn reply_written(&self) {
        self.replies
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.answered.notify_waiters();
    }

    /// The request `id` was answered (its answer is on stdout) or cancelled. A cancelled
    /// request may never be answered; its cancellation settles it on the input side.
    pub fn settle(&self, id: &str) {
        if self.ids().remove(id) {
            self.answered.notify_waiters();
        }
    }
}

/// The id of what has the shape of a request: a method name and an id that is a string or
/// an integer. A `jsonrpc` member missing or wrong does not hide the id: its sender still
/// waits for the answer with that id.
fn request_id(message: &serde_json::Value) -> Option<&serde_json::Value> {
    let object = message.as_object()?;
    object.get("method")?.as_str()?;
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

/// How an error answer with no `id` begins (rmcp leaves out an id it does not have).
const ERROR_WITHOUT_ID: &[u8] = br#"{"jsonrpc":"2.0","error":"#;
const ERROR_WITH_NULL_ID: &[u8] = br#"{"jsonrpc":"2.0","id":null,"error":"#;

/// JSON-RPC requires `"id": null` on the answer to a request whose id could not be read.
pub fn with_null_id(line: Vec<u8>) -> Vec<u8> {
    match line.strip_prefix(ERROR_WITHOUT_ID) {
        None => line,
        Some(rest) => [ERROR_WITH_NULL_ID, rest].concat(),
    }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use tokio::io::{AsyncWriteExt, DuplexStream};

    use super::*;

    /// A guard on a pipe the test writes to, and the answers it gives itself.
    fn guard() -> (
        DuplexStream,
        Guard<DuplexStream>,
        mpsc::Receiver<Vec<u8>>,
        oneshot::Receiver<()>,
    ) {
        let (client, stdin) = tokio::io::duplex(1 << 20);
        let (replies, answers) = mpsc::channel(crate::limits::REPLY_QUEUE_MAX);
        let (eof, closed) = oneshot::channel();
        let guard = Guard::new(stdin, replies, Arc::default(), eof);
        (client, guard, answers, closed)
    }

    fn answer(bytes: Vec<u8>) -> serde_json::Value {
        assert_eq!(bytes.last(), Some(&b'\n'));
        serde_json::from_slice(&bytes).unwrap()
    }

    fn judged(text: &str) -> Verdict {
        let (_, mut guard, _, _) = guard();
        guard.judge(text.as_bytes())
    }

    #[test]
    fn half_a_character_is_answered_with_its_request_id() {
        let line = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"terminal_write","arguments":{"session_id":"x","text":"cut \ud83d"}}}"#;
        let Err(unreadable) = read(line.as_bytes()) else {
            panic!("read");
        };
        let answer = unreadable.answer.expect("an answer");
        assert_eq!(answer.id, json!(7));
        let frame: serde_json::Value = serde_json::from_slice(&answer.frame).unwrap();
        assert_eq!(frame["error"]["code"], json!(-32700));
        let message = frame["error"]["message"].as_str().unwrap();
        assert!(message.contains("lone UTF-16 surrogate"), "{message}");
        // A whole pair is a character; an escaped backslash before `u` is no escape.
        assert!(
            read(
                r#"{"jsonrpc":"2.0","id":8,"method":"ping","params":{"x":"\ud83d\ude00 \\ud83d"}}"#
                    .as_bytes()
            )
            .is_ok()
        );
    }

    #[test]
    fn odd_escapes_are_copied_as_they_are() {
        for text in [
            "\"\\",
            "\"\\u",
            "\"\\ud8",
            "\"\\ud83d\\u",
            "\"\\é\"",
            "\"\\ud83d\\uzzzz\"",
            "\\ud83d",
        ] {
            // Nothing to replace but where a whole `\uD8xx` stands alone.
            let replaced = lone_surrogates_replaced(text);
            assert_eq!(replaced == text, !text.contains("\\ud83d\\u"), "{text}");
        }
        assert_eq!(lone_surrogates_replaced("\"\\u00\""), "\"\\u00\"");
        assert_eq!(lone_surrogates_replaced("\"\\ud83d\\u\""), "\"\\ufffd\\u\"");
    }

    #[test]
    fn only_lone_surrogates_are_replaced() {
        let text = r#"["\ud83d\ude00", "\ud83d", "\ude00x", "\\ud83d", "\u00e9", "€\"\ud800"]"#;
        assert_eq!(
            lone_surrogates_replaced(text),
            r#"["\ud83d\ude00", "\ufffd", "\ufffdx", "\\ud83d", "\u00e9", "€\"\ufffd"]"#
        );
    }

    #[test]
    fn requests_hold_a_place_by_their_id() {
        for (text, id) in [
            (r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#, "7"),
            (r#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#, "\"a\""),
            (
                r#"{"jsonrpc":"2.0","id":9223372036854775807,"method":"ping"}"#,
                "9223372036854775807",
            ),
        ] {
            match judged(text) {
                Verdict::Admit(admitted, _) => assert_eq!(id_text(&admitted), id, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        for passed in [
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        ] {
            assert!(matches!(judged(passed), Verdict::Deliver(_)), "{passed}");
        }
    }

    /// A request of a method MCP defines with params that are not as it defines them is
    /// "Invalid params" with its id, not the service's "method not found"; a method of
    /// nobody's is still the service's to answer.
    #[test]
    fn mistyped_params_of_a_known_method_are_invalid_params() {
        for (text, says) in [
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"terminal_list","arguments":"x"}}"#,
                "`arguments` an object",
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":3}}"#,
                "`name` is a string",
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{}}"#,
                "the params of `resources/read`",
            ),
        ] {
            let Verdict::Answer(bytes) = judged(text) else {
                panic!("{text}: not answered here");
            };
            let refusal = answer(bytes);
            assert_eq!(refusal["id"], json!(7), "{refusal}");
            assert_eq!(refusal["error"]["code"], json!(-32602), "{refusal}");
            let message = refusal["error"]["message"].as_str().unwrap();
            assert!(message.contains(says), "{message}");
        }
        for (text, code, says) in [
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"no/such","params":{"a":1}}"#,
                -32601,
                "Method not found: `no/such`; this server answers",
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"notifications/initialized"}"#,
                -32601,
                "send it without an id",
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":[]}"#,
                -32602,
                "the params of `tools/call` are an object in MCP, not an array",
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":5}"#,
                -32600,
                "`params` must be an object",
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"no/such","params":[1]}"#,
                -32601,
                "Method not found: `no/such`",
            ),
        ] {
            let Verdict::Answer(bytes) = judged(text) else {
                panic!("{text}: not answered here");
            };
            let refusal = answer(bytes);
            assert_eq!(refusal["id"], json!(7), "{refusal}");
            assert_eq!(refusal["error"]["code"], json!(code), "{refusal}");
            let message = refusal["error"]["message"].as_str().unwrap();
            assert!(message.contains(says), "{message}");
        }
    }

    /// What the service cannot read is answered here: with its id when one can be read
    /// (the service would answer `id: null`, which frees no place), else with `id: null`;
    /// never a notification.
    #[test]
    fn what_the_service_cannot_read_is_answered_here() {
        let with_id = [
            (
                r#"{"jsonrpc":"2.0","id":4,"method":"ping","params":5}"#,
                json!(4),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"t","method":"tools/call","params":"x"}"#,
                json!("t"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"x","_meta":5}}"#,
                json!(5),
            ),
            // Without `jsonrpc` (or with another version) the id is still there to answer.
            (r#"{"id":1,"method":"ping"}"#, json!(1)),
            (r#"{"jsonrpc":"1.0","id":"v","method":"ping"}"#, json!("v")),
        ];
        let without_id = [
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","id":2}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
        ];
        let unparsed = [r#"{"jsonrpc":"2.0","id":1,"method":"#, "[[[1e400]]]"];
        let cases = (with_id.into_iter().map(|(text, id)| (text, id, -32600)))
            .chain(
                without_id
                    .into_iter()
                    .map(|text| (text, json!(null), -32600)),
            )
            .chain(unparsed.into_iter().map(|text| (text, json!(null), -32700)));
        for (text, id, code) in cases {
            match judged(text) {
                Verdict::Answer(bytes) => {
                    let answer = answer(bytes);
                    assert_eq!(answer["id"], id, "{text}: {answer}");
                    assert_eq!(answer["error"]["code"], json!(code), "{text}: {answer}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        let notification = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#;
        assert!(matches!(judged(notification), Verdict::Ignore));
        let utf8 = judged_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"\xff\"}");
        assert!(matches!(utf8, Verdict::Answer(_)));
    }

    fn judged_bytes(bytes: &[u8]) -> Verdict {
        let (_, mut guard, _, _) = guard();
        guard.judge(bytes)
    }

    /// Two requests in flight with one id would share the service's one answer, and the
    /// other would never be answered: the second is refused here, with that id, and the id
    /// is free again once its request is answered.
    #[tokio::test]
    async fn a_second_request_with_an_id_in_flight_is_refused() {
        let (mut client, mut guard, mut answers, _) = guard();
        let request = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n";
        let other = "{\"jsonrpc\":\"2.0\",\"id\":\"2\",\"method\":\"ping\"}\n";
        for line in [request, request, other] {
            client.write_all(line.as_bytes()).await.unwrap();
        }
        let first = guard.next().await.unwrap();
        assert!(matches!(first, JsonRpcMessage::Request(r) if id_text(&r.id) == "2"));
        // The one whose id is the string "2" passes; the repeat was refused on the way.
        let second = guard.next().await.unwrap();
        assert!(matches!(second, JsonRpcMessage::Request(r) if id_text(&r.id) == "\"2\""));
        let refusal = answer(answers.recv().await.unwrap());
        assert_eq!(refusal["id"], json!(2), "{refusal}");
        assert_eq!(refusal["error"]["code"], json!(-32600), "{refusal}");
        let why = refusal["error"]["message"].as_str().unwrap();
        assert!(why.contains("own id"), "{why}");
        guard.in_flight.settle("2");
        client.write_all(request.as_bytes()).await.unwrap();
        let again = guard.next().await.unwrap();
        assert!(matches!(again, JsonRpcMessage::Request(r) if id_text(&r.id) == "2"));
    }

    /// At most `MAX_IN_FLIGHT` requests pass unanswered; an answer (or a cancellation)
    /// lets the next one through.
    #[tokio::test]
    async fn requests_wait_for_a_place_and_a_cancellation_frees_one() {
        let (mut client, mut guard, _answers, _) = guard();
        let request =
            |n: usize| format!("{{\"jsonrpc\":\"2.0\",\"id\":{n},\"method\":\"ping\"}}\n");
        let passed = |message: ClientJsonRpcMessage, n: usize| matches!(message, JsonRpcMessage::Request(r) if id_text(&r.id) == n.to_string());
        for n in 0..=MAX_IN_FLIGHT {
            client.write_all(request(n).as_bytes()).await.unwrap();
        }
        for _ in 0..MAX_IN_FLIGHT {
            guard.next().await.unwrap();
        }
        // That nothing passes can only be looked for, for a while.
        let held = tokio::time::timeout(Duration::from_millis(200), guard.next()).await;
        assert!(held.is_err(), "a request passed beyond the limit");
        // An answer written (as the transport settles it) lets the waiting one through.
        guard.in_flight.settle("3");
        assert!(passed(guard.next().await.unwrap(), MAX_IN_FLIGHT));
        // Full again: a cancellation read before the next request frees a place for it.
        let cancel =
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}"#;
        client
            .write_all(format!("{cancel}\n").as_bytes())
            .await
            .unwrap();
        client
            .write_all(request(MAX_IN_FLIGHT + 1).as_bytes())
            .await
            .unwrap();
        let cancelled = guard.next().await.unwrap();
        assert!(matches!(cancelled, JsonRpcMessage::Notification(_)));
        let next = tokio::time::timeout(Duration::from_secs(30), guard.next()).await;
        let next = next.expect("the cancellation freed a place").unwrap();
        assert!(passed(next, MAX_IN_FLIGHT + 1));
    }

    /// Full, with requests held behind the limit: input is still read, so a cancellation
    /// that comes after them reaches the service (and frees a place), and a held request
    /// that is cancelled is dropped, never passed on.
    #[tokio::test]
    async fn cancellations_get_past_requests_held_at_the_limit() {
        let (mut client, mut guard, _answers, _) = guard();
        let request =
            |n: usize| format!("{{\"jsonrpc\":\"2.0\",\"id\":{n},\"method\":\"ping\"}}\n");
        let cancel = |n: usize| {
            format!(
                "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{{\"requestId\":{n}}}}}\n"
            )
        };
        for n in 0..MAX_IN_FLIGHT {
            client.write_all(request(n).as_bytes()).await.unwrap();
            guard.next().await.unwrap();
        }
        let held = [MAX_IN_FLIGHT, MAX_IN_FLIGHT + 1, MAX_IN_FLIGHT + 2];
        for n in held {
            client.write_all(request(n).as_bytes()).await.unwrap();
        }
        // Held: the second is cancelled; then one in flight is.
        for n in [MAX_IN_FLIGHT + 1, 7] {
            client.write_all(cancel(n).as_bytes()).await.unwrap();
        }
        let is_cancel =
            |message: &ClientJsonRpcMessage| matches!(message, JsonRpcMessage::Notification(_));
        let first = tokio::time::timeout(Duration::from_secs(30), guard.next()).await;
        let first = first
            .expect("input is read past the held requests")
            .unwrap();
        assert!(is_cancel(&first), "{first:?}");
        let second = guard.next().await.unwrap();
        assert!(is_cancel(&second), "{second:?}");
        // The cancellation of 7 freed a place: the first held request passes.
        let next = guard.next().await.unwrap();
        assert!(
            matches!(&next, JsonRpcMessage::Request(r) if id_text(&r.id) == held[0].to_string())
        );
        // Full again; an answer frees a place for the last, the cancelled one skipped.
        guard.in_flight.settle("3");
        let last = guard.next().await.unwrap();
        assert!(
            matches!(&last, JsonRpcMessage::Request(r) if id_text(&r.id) == held[2].to_string())
        );
    }

    /// A line over the limit is discarded as it streams in and answered; the next is read.
    #[tokio::test]
    async fn an_oversized_line_is_answered_and_the_next_read() {
        let (mut client, mut guard, mut answers, mut closed) = guard();
        let writer = tokio::spawn(async move {
            let big = vec![b'x'; MAX_FRAME_BYTES + 10];
            client.write_all(&big).await.unwrap();
            client
                .write_all(b"\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
                .await
                .unwrap();
        });
        let next = guard.next().await.unwrap();
        assert!(matches!(next, JsonRpcMessage::Request(_)));
        let refusal = answer(answers.recv().await.unwrap());
        assert_eq!(refusal["id"], json!(null));
        assert!(
            refusal["error"]["message"]
                .as_str()
                .unwrap()
                .contains("exceeds")
        );
        writer.await.unwrap();
        assert!(closed.try_recv().is_err());
        assert!(guard.next().await.is_none(), "stdin ended");
        closed.await.expect("its end is told");
    }

    #[test]
    fn an_error_without_id_gets_a_null_id_and_nothing_else_changes() {
        let fixed = with_null_id(b"{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32600}}\n".to_vec());
        assert_eq!(
            fixed,
            b"{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600}}\n"
        );
        let untouched = b"{\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{}}\n".to_vec();
        assert_eq!(with_null_id(untouched.clone()), untouched);
    }
}
