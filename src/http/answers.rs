//! Answers kept for a client whose connection dropped before its answer reached it.
//!
//! A request's answer goes out on the SSE stream of the POST that carried it, each event
//! with an id (`<index>/<stream>`, the first a priming event with no message). A client
//! whose connection dropped reconnects with a GET and `Last-Event-ID`, and should get what
//! it missed. rmcp replays a stream while its request runs; once the answer went out
//! into a dropped connection it forgets the stream, and the reconnect gets an empty one.
//!
//! So every answer the server sends is kept here for `KEPT_ANSWER_FOR` (at most
//! `KEPT_ANSWERS`, and `KEPT_ANSWER_BYTES` of JSON text, in all, the oldest let go first):
//! an answer seen leaving on its stream may still have been lost (written into a
//! connection the client had already closed). Each stream's request is noted from its first event. A reconnect that
//! rmcp cannot serve gets the kept answer of the request its stream carried, as one event
//! after the last one the client saw.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use futures::{Stream, StreamExt};
use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, RequestId, ServerJsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};

use crate::limits::{KEPT_ANSWER_BYTES, KEPT_ANSWER_FOR, KEPT_ANSWERS, KEPT_STREAMS};

#[derive(Default)]
pub struct Answers {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    answers: HashMap<(SessionId, RequestId), Kept>,
    /// The JSON text of every kept answer, in bytes.
    bytes: usize,
    /// The next answer's place.
    next_seq: u64,
    /// The request each stream of a session carries, by the stream's number.
    streams: HashMap<(SessionId, u64), Noted>,
}

struct Kept {
    message: Arc<ServerJsonRpcMessage>,
    /// Its JSON text's length.
    bytes: usize,
    at: Instant,
    /// Its place in the order answers were kept.
    seq: u64,
}

struct Noted {
    request: RequestId,
    /// When it was noted.
    at: Instant,
    /// When its answer left on it.
    answered: Option<Instant>,
}

/// The id of the request `message` answers, if it is an answer.
fn answered(message: &ServerJsonRpcMessage) -> Option<&RequestId> {
    match message {
        JsonRpcMessage::Response(response) => Some(&response.id),
        JsonRpcMessage::Error(error) => error.id.as_ref(),
        _ => None,
    }
}

/// The id of the request `message` is, if it is one.
pub fn request_id(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        JsonRpcMessage::Request(request) => Some(request.id.clone()),
        _ => None,
    }
}

/// An event id's index and stream number (`<index>/<stream>`).
fn parse_event_id(event_id: &str) -> Option<(usize, u64)> {
    let (index, stream) = event_id.split_once('/')?;
    Some((index.parse().ok()?, stream.parse().ok()?))
}

impl Answers {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The server is sending `message` in MCP session `session`: an answer is kept.
    pub fn sending(&self, session: &SessionId, message: &ServerJsonRpcMessage) {
        let Some(id) = answered(message) else {
            return;
        };
        // Its length, written as rmcp writes it (one more copy of the serializer would
        // cost the binary a hundred kilobytes).
        let Ok(bytes) = serde_json::to_string(message).map(|text| text.len()) else {
            return;
        };
        if bytes > KEPT_ANSWER_BYTES {
            return;
        }
        let mut state = self.state();
        state.prune();
        while state.answers.len() >= KEPT_ANSWERS || state.bytes + bytes > KEPT_ANSWER_BYTES {
            let Some(oldest) = state
                .answers
                .iter()
                .min_by_key(|(_, kept)| kept.seq)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            state.forget(&oldest);
        }
        state.bytes += bytes;
        state.next_seq += 1;
        let kept = Kept {
            message: Arc::new(message.clone()),
            bytes,
            at: Instant::now(),
            seq: state.next_seq,
        };
        if let Some(old) = state.answers.insert((session.clone(), id.clone()), kept) {
            state.bytes -= old.bytes;
        }
    }

    /// `event` leaves on a stream of `session` that carries request `request`: the stream
    /// is noted from its first event, and when its answer left.
    pub fn leaving(&self, session: &SessionId, request: &RequestId, event: &ServerSseMessage) {
        let Some((_, stream)) = event.event_id.as_deref().and_then(parse_event_id) else {
            return;
        };
        let answer = event
            .message
            .as_deref()
            .and_then(answered)
            .is_some_and(|id| id == request);
        let mut state = self.state();
        let key = (session.clone(), stream);
        if let Some(noted) = state.streams.get_mut(&key) {
            if answer {
                noted.answered = Some(Instant::now());
            }
            return;
        }
        state.prune();
        if state.streams.len() >= KEPT_STREAMS
            && let Some(oldest) = state
                .streams
                .iter()
                .min_by_key(|(_, noted)| noted.at)
                .map(|(key, _)| key.clone())
        {
            state.streams.remove(&oldest);
        }
        let now = Instant::now();
        let noted = Noted {
            request: request.clone(),
            at: now,
            answered: answer.then_some(now),
        };
        state.streams.insert(key, noted);
    }

    /// The request the stream of `session` that `last_event_id` names carries.
    pub fn request_of(&self, session: &SessionId, last_event_id: &str) -> Option<RequestId> {
        let (_, stream) = parse_event_id(last_event_id)?;
        let state = self.state();
        state
            .streams
            .get(&(session.clone(), stream))
            .map(|noted| noted.request.clone())
    }

    /// For a reconnect to `session` after `last_event_id`: the kept answer of the request
    /// that stream carried, as the event after it.
    pub fn resume(&self, session: &SessionId, last_event_id: &str) -> Option<ServerSseMessage> {
        let (index, stream) = parse_event_id(last_event_id)?;
        let mut state = self.state();
        state.prune();
        let noted = state.streams.get(&(session.clone(), stream))?;
        let kept = state
            .answers
            .get(&(session.clone(), noted.request.clone()))?;
        // An event with the next id and the kept answer (the struct is not built directly).
        let mut event =
            ServerSseMessage::priming(format!("{}/{stream}", index + 1), KEPT_ANSWER_FOR);
        event.message = Some(kept.message.clone());
        event.retry = None;
        Some(event)
    }

    /// MCP session `session` was closed: nothing of it is kept.
    pub fn closed(&self, session: &SessionId) {
        let mut state = self.state();
        let gone: Vec<_> = state
            .answers
            .keys()
            .filter(|(s, _)| s == session)
            .cloned()
            .collect();
        for key in gone {
            state.forget(&key);
        }
        state.streams.retain(|(s, _), _| s != session);
    }
}

impl State {
    fn forget(&mut self, key: &(SessionId, RequestId)) {
        if let Some(kept) = self.answers.remove(key) {
            self.bytes -= kept.bytes;
        }
    }

    /// Let go of answers kept for `KEPT_ANSWER_FOR`, and of streams answered that long ago. A
    /// stream not answered yet is noted as long as its request may run (a build may take
    /// an hour): until its MCP session closes, or it is the oldest of `KEPT_STREAMS`.
    fn prune(&mut self) {
        let now = Instant::now();
        let old: Vec<_> = self
            .answers
            .iter()
            .filter(|(_, kept)| now.duration_since(kept.at) >= KEPT_ANSWER_FOR)
            .map(|(key, _)| key.clone())
            .collect();
        for key in old {
            self.forget(&key);
        }
        self.streams.retain(|_, noted| {
            noted
                .answered
                .is_none_or(|at| now.duration_since(at) < KEPT_ANSWER_FOR)
        });
    }
}

/// rmcp's transport of an MCP session, keeping every answer it sends.
pub struct Keeping<T> {
    pub inner: T,
    pub session: SessionId,
    pub answers: Arc<Answers>,
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for Keeping<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.answers.sending(&self.session, &item);
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// `stream`, a stream of MCP session `session` that carries request `request`, each event
/// noted as it leaves (`Answers::leaving`).
pub fn watched(
    stream: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
    answers: Arc<Answers>,
    session: SessionId,
    request: Option<RequestId>,
) -> impl Stream<Item = ServerSseMessage> + Send + Sync + 'static {
    stream.inspect(move |event| {
        if let Some(request) = &request {
            answers.leaving(&session, request, event);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{NumberOrString, ServerResult};

    fn session(name: &str) -> SessionId {
        Arc::from(name)
    }

    fn answer(id: i64) -> ServerJsonRpcMessage {
        ServerJsonRpcMessage::response(ServerResult::empty(()), NumberOrString::Number(id))
    }

    fn event(id: &str, message: Option<ServerJsonRpcMessage>) -> ServerSseMessage {
        match message {
            Some(message) => ServerSseMessage::new(id, message),
            None => ServerSseMessage::priming(id, std::time::Duration::from_secs(3)),
        }
    }

    #[test]
    fn a_reconnect_gets_the_answer_its_stream_carried_after_the_last_event_seen() {
        let answers = Answers::default();
        let (a, b) = (session("a"), session("b"));
        let request = NumberOrString::Number(21);
        answers.leaving(&a, &request, &event("0/5", None));
        answers.sending(&a, &answer(21));
        answers.leaving(&a, &request, &event("1/5", Some(answer(21))));
        let resumed = answers.resume(&a, "0/5").expect("the answer");
        assert_eq!(resumed.event_id.as_deref(), Some("1/5"));
        let text = |m: &ServerJsonRpcMessage| serde_json::to_string(m).unwrap();
        assert_eq!(
            resumed.message.as_deref().map(text),
            Some(text(&answer(21)))
        );
        // Another session's stream of that number, or a stream never seen, has nothing.
        assert!(answers.resume(&b, "0/5").is_none());
        assert!(answers.resume(&a, "0/6").is_none());
        assert!(answers.resume(&a, "nonsense").is_none());
        answers.closed(&a);
        assert!(answers.resume(&a, "0/5").is_none());
        assert_eq!(answers.state().bytes, 0);
    }

    #[test]
    fn at_most_the_newest_answers_are_kept() {
        let answers = Answers::default();
        let a = session("a");
        for n in 0..(KEPT_ANSWERS as i64 + 10) {
            let request = NumberOrString::Number(n);
            answers.leaving(&a, &request, &event(&format!("0/{n}"), None));
            answers.sending(&a, &answer(n));
        }
        let state = answers.state();
        assert_eq!(state.answers.len(), KEPT_ANSWERS);
        let bytes: usize = state.answers.values().map(|k| k.bytes).sum();
        assert_eq!(state.bytes, bytes);
        drop(state);
        assert!(answers.resume(&a, "0/0").is_none());
        assert!(
            answers
                .resume(&a, &format!("0/{}", KEPT_ANSWERS + 9))
                .is_some()
        );
    }
}
