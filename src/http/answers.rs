//! Answers kept for a client whose connection dropped before its answer reached it.
//!
//! A request's answer goes out on the SSE stream of the POST that carried it, each event
//! with an id (`<index>/<stream>`, the first a priming event with no message). A client
//! whose connection dropped reconnects with a GET and `Last-Event-ID`, and should get what
//! it missed. rmcp replays a stream while its request runs; once the answer went out
//! into a dropped connection it forgets the stream, and the reconnect gets an empty one.
//!
//! So every answer the server sends is kept here for `KEPT_ANSWER_FOR` (at most
//! `KEPT_ANSWERS` for an MCP session, and `KEPT_ANSWER_BYTES` of text in all, the
//! oldest let go first):
//! an answer seen leaving on its stream may still have been lost (written into a
//! connection the client had already closed). Each stream's request is noted from its first event. A reconnect that
//! rmcp cannot serve gets the kept answer of the request its stream carried, as one event
//! after the last one the client saw.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use futures::{Stream, StreamExt};
use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, JsonRpcMessage, JsonRpcResponse, RequestId, ServerJsonRpcMessage,
    ServerResult,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};

use crate::json;
use crate::limits::{KEPT_ANSWER_BYTES, KEPT_ANSWER_FOR, KEPT_ANSWERS, KEPT_STREAMS};

#[derive(Default)]
pub struct Answers {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The last answer sent to each request id of a session.
    answers: HashMap<(SessionId, RequestId), Kept>,
    /// The text every kept answer holds, in bytes (`held_bytes`).
    bytes: usize,
    /// A clock of sends and new streams, to tell which stream an answer was for.
    clock: u64,
    /// The request each stream of a session carries, by the stream's number.
    streams: HashMap<(SessionId, u64), Noted>,
}

struct Kept {
    message: Arc<ServerJsonRpcMessage>,
    /// The text it holds, in bytes.
    bytes: usize,
    at: Instant,
    /// When it was sent, on `State::clock`.
    sent: u64,
}

struct Noted {
    request: RequestId,
    /// When the request came, on `State::clock`: an answer sent before it was another's.
    since: u64,
    at: Instant,
    /// The index of the event its answer left in, if it did.
    answered: Option<usize>,
}

/// The id of the request `message` answers, if it is an answer.
fn answered(message: &ServerJsonRpcMessage) -> Option<&RequestId> {
    match message {
        JsonRpcMessage::Response(response) => Some(&response.id),
        JsonRpcMessage::Error(error) => error.id.as_ref(),
        _ => None,
    }
}

/// About the bytes of text a kept `message` holds, without writing it out: a tool's
/// result by its text blocks and structured content (a page of output is in each; writing
/// the answer out to count it cost as much as rmcp's own writing of it), anything else
/// (small) by its JSON text.
fn held_bytes(message: &ServerJsonRpcMessage) -> Option<usize> {
    match message {
        JsonRpcMessage::Response(JsonRpcResponse {
            result: ServerResult::CallToolResult(result),
            ..
        }) => {
            let text: usize = result
                .content
                .iter()
                .filter_map(|block| block.as_text())
                .map(|block| block.text.len())
                .sum();
            let value = result
                .structured_content
                .as_ref()
                .map_or(0, json::size_hint);
            Some(text + value + 64)
        }
        other => serde_json::to_string(other).ok().map(|text| text.len()),
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

    /// Request `request` of MCP session `session` is about to be handed to the server: the
    /// time on the clock an answer to it must come after. A stream of an earlier request
    /// with its id (whose client went away) is no longer noted: an answer to that id may
    /// now be either's, and none is given to a reconnect rather than the wrong one.
    pub fn request_coming(&self, session: &SessionId, request: &RequestId) -> u64 {
        let mut state = self.state();
        state
            .streams
            .retain(|(s, _), noted| !(s == session && noted.request == *request));
        state.clock += 1;
        state.clock
    }

    /// The server is sending `message` in MCP session `session`: an answer is kept.
    pub fn sending(&self, session: &SessionId, message: &ServerJsonRpcMessage) {
        let Some(id) = answered(message) else {
            return;
        };
        let Some(bytes) = held_bytes(message) else {
            return;
        };
        let message = Arc::new(message.clone());
        let key = (session.clone(), id.clone());
        let mut state = self.state();
        state.prune();
        state.forget(&key);
        if bytes > KEPT_ANSWER_BYTES {
            return;
        }
        // A session's own answers make room for it; the bytes, anyone's.
        while state.answers.keys().filter(|(s, _)| s == session).count() >= KEPT_ANSWERS {
            let Some(oldest) = state.oldest(|s| s == session) else {
                break;
            };
            state.forget(&oldest);
        }
        while state.bytes + bytes > KEPT_ANSWER_BYTES {
            let Some(oldest) = state.oldest(|_| true) else {
                break;
            };
            state.forget(&oldest);
        }
        state.clock += 1;
        let kept = Kept {
            message,
            bytes,
            at: Instant::now(),
            sent: state.clock,
        };
        state.bytes += bytes;
        state.answers.insert(key, kept);
    }

    /// `event` leaves on a stream of `session` that carries request `request`, which came
    /// at `since` (`request_coming`): a new stream is noted from its first event (`first`),
    /// and the event its answer left in. A stream resumed, or one whose note a later
    /// request with its id removed, is not noted again.
    pub fn leaving(
        &self,
        session: &SessionId,
        (request, since): (&RequestId, u64),
        event: &ServerSseMessage,
        first: bool,
    ) {
        let Some((index, stream)) = event.event_id.as_deref().and_then(parse_event_id) else {
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
                noted.answered = Some(index);
            }
            return;
        }
        if !first {
            return;
        }
        state.prune();
        // A session's own streams make room: those answered first, then the oldest.
        let mine = |(s, _): &(SessionId, u64)| s == session;
        if state.streams.keys().filter(|k| mine(k)).count() >= KEPT_STREAMS
            && let Some(oldest) = state
                .streams
                .iter()
                .filter(|(k, _)| mine(k))
                .min_by_key(|(_, noted)| (noted.answered.is_none(), noted.at))
                .map(|(key, _)| key.clone())
        {
            state.streams.remove(&oldest);
        }
        let noted = Noted {
            request: request.clone(),
            since,
            at: Instant::now(),
            answered: answer.then_some(index),
        };
        state.streams.insert(key, noted);
    }

    /// The request the stream of `session` that `last_event_id` names carries, and when it
    /// came.
    pub fn request_of(&self, session: &SessionId, last_event_id: &str) -> Option<(RequestId, u64)> {
        let (_, stream) = parse_event_id(last_event_id)?;
        let state = self.state();
        state
            .streams
            .get(&(session.clone(), stream))
            .map(|noted| (noted.request.clone(), noted.since))
    }

    /// For a reconnect to `session` after `last_event_id`: the kept answer of the request
    /// that stream carried, as the event after it, unless the client saw it already. An
    /// answer is that request's only if it was sent after the request came (and no later
    /// request of the session has its id: the stream would no longer be noted).
    pub fn resume(&self, session: &SessionId, last_event_id: &str) -> Option<ServerSseMessage> {
        let (index, stream) = parse_event_id(last_event_id)?;
        let mut state = self.state();
        state.prune();
        let noted = state.streams.get(&(session.clone(), stream))?;
        if noted.answered.is_some_and(|at| index >= at) {
            return None;
        }
        let kept = state
            .answers
            .get(&(session.clone(), noted.request.clone()))
            .filter(|kept| noted.since < kept.sent)?;
        // An event with the next id and the kept answer (the struct is not built directly).
        let mut event = ServerSseMessage::priming(
            format!("{}/{stream}", index.checked_add(1)?),
            KEPT_ANSWER_FOR,
        );
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

    /// Let go of what is past keeping, also when no call comes.
    pub fn prune(&self) {
        self.state().prune();
    }
}

impl State {
    fn forget(&mut self, key: &(SessionId, RequestId)) {
        if let Some(kept) = self.answers.remove(key) {
            self.bytes -= kept.bytes;
        }
    }

    /// The oldest answer of the sessions `whose` accepts.
    fn oldest(&self, whose: impl Fn(&SessionId) -> bool) -> Option<(SessionId, RequestId)> {
        self.answers
            .iter()
            .filter(|((s, _), _)| whose(s))
            .min_by_key(|(_, kept)| kept.sent)
            .map(|(key, _)| key.clone())
    }

    /// Let go of answers kept for `KEPT_ANSWER_FOR`, and of the streams they answered. A
    /// stream not answered yet is noted as long as its request may run (a build may take
    /// an hour): until its MCP session closes, or room is made among the session's streams.
    fn prune(&mut self) {
        let now = Instant::now();
        let old: Vec<_> = self
            .answers
            .iter()
            .filter(|(_, kept)| now.duration_since(kept.at) >= KEPT_ANSWER_FOR)
            .map(|(key, kept)| (key.clone(), kept.sent))
            .collect();
        for ((session, request), sent) in old {
            self.forget(&(session.clone(), request.clone()));
            self.streams.retain(|(s, _), noted| {
                !(*s == session && noted.request == request && noted.since < sent)
            });
        }
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

/// `stream`, a stream of MCP session `session` that carries `request` (its id, and when it
/// came), each event noted as it leaves (`Answers::leaving`); `fresh` for a new stream,
/// which its first event notes.
pub fn watched(
    stream: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
    answers: Arc<Answers>,
    session: SessionId,
    request: Option<(RequestId, u64)>,
    mut fresh: bool,
) -> impl Stream<Item = ServerSseMessage> + Send + Sync + 'static {
    stream.inspect(move |event| {
        let first = std::mem::replace(&mut fresh, false);
        if let Some((id, since)) = &request {
            answers.leaving(&session, (id, *since), event, first);
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
        let since = answers.request_coming(&a, &request);
        answers.leaving(&a, (&request, since), &event("0/5", None), true);
        answers.sending(&a, &answer(21));
        answers.leaving(
            &a,
            (&request, since),
            &event("1/5", Some(answer(21))),
            false,
        );
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
        // A client that saw the answer has nothing more to get.
        assert!(answers.resume(&a, "1/5").is_none());
        assert!(answers.resume(&a, &format!("{}/5", usize::MAX)).is_none());
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
            let since = answers.request_coming(&a, &request);
            answers.leaving(&a, (&request, since), &event(&format!("0/{n}"), None), true);
            answers.sending(&a, &answer(n));
        }
        // Another session's answers take none of its places.
        let b = session("b");
        for n in 0..10 {
            answers.sending(&b, &answer(n));
        }
        let state = answers.state();
        assert_eq!(state.answers.len(), KEPT_ANSWERS + 10);
        let bytes: usize = state.answers.values().map(|k| k.bytes).sum();
        assert_eq!(state.bytes, bytes);
        drop(state);
        assert!(answers.resume(&a, "0/0").is_none());
        assert!(answers.resume(&a, "0/10").is_some());
        assert!(
            answers
                .resume(&a, &format!("0/{}", KEPT_ANSWERS + 9))
                .is_some()
        );
    }

    #[test]
    fn an_answer_goes_to_the_stream_of_its_request_not_to_an_earlier_one_with_its_id() {
        let answers = Answers::default();
        let a = session("a");
        let seven = NumberOrString::Number(7);
        // The first request's client went away; a second reuses its id and is answered.
        let first = answers.request_coming(&a, &seven);
        answers.leaving(&a, (&seven, first), &event("0/1", None), true);
        let second = answers.request_coming(&a, &seven);
        answers.leaving(&a, (&seven, second), &event("0/3", None), true);
        answers.sending(&a, &answer(7));
        // The first stream is no longer noted, whatever happens to the second's note.
        assert!(answers.state().streams.len() == 1);
        assert!(answers.resume(&a, "0/1").is_none());
        assert!(answers.resume(&a, "0/3").is_some());
        // Nor does a resumed stream of the first request note it again.
        answers.leaving(&a, (&seven, first), &event("1/1", None), false);
        assert!(answers.resume(&a, "0/1").is_none());
        // An answer sent before a request came is not its answer.
        let third = answers.request_coming(&a, &seven);
        answers.leaving(&a, (&seven, third), &event("0/4", None), true);
        assert!(answers.resume(&a, "0/4").is_none());
    }
}
