//! Waiting on a session: until a pattern matches its output from a cursor, until it is
//! final, or until a timeout. Each code point is searched once, as it arrives.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::io::read_error;
use super::pages::Evicted;
use super::state::{Snapshot, State};
use super::{Session, sleep_until};
use crate::errors::{ErrorCode, ToolError};
use crate::limits::{AWAIT_POLL, PAGE_MAX_ENTRIES, SEARCH_STEP_BYTES};
use crate::output::{
    AnsiStripper, Entry, Leftmost, Page, ReadError, Search, Stream, before_char, count_chars,
    stripper_pair,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streams {
    Any,
    Only(Stream),
}

impl Streams {
    pub(super) fn accepts(self, stream: Stream) -> bool {
        match self {
            Streams::Any => true,
            Streams::Only(only) => only == stream,
        }
    }
}

pub struct WaitRequest {
    pub cursor: u64,
    pub search: Option<Search>,
    pub streams: Streams,
    pub timeout: Duration,
    pub strip_ansi: bool,
    /// Answer `idle` once no output arrived for this long.
    pub idle: Option<Duration>,
    /// Answer `awaiting_input` once the session waits for input.
    pub until_input: bool,
}

#[derive(Debug, Serialize)]
pub struct Match {
    pub text: String,
    pub start_cursor: u64,
    /// Just after the last matched code point.
    pub end_cursor: u64,
    /// Capture groups 1.., null where a group did not take part.
    pub groups: Vec<Option<String>>,
}

#[derive(Debug, Serialize)]
pub struct WaitResult {
    pub outcome: &'static str,
    #[serde(rename = "match")]
    pub found: Option<Match>,
    pub next_cursor: u64,
    pub session: Snapshot,
}

/// Filters text the way a wait searches it: by stream, and without escape sequences when
/// asked. Keeps one stripper per stream, as their sequences interleave independently.
struct Filter {
    streams: Streams,
    strip: bool,
    strippers: [AnsiStripper; 2],
}

impl Filter {
    fn new(streams: Streams, strip: bool) -> Self {
        Filter {
            streams,
            strip,
            strippers: stripper_pair(),
        }
    }

    /// Calls `run(cursor, text)` for every run of consecutive searched code points in
    /// `entries`, `cursor` being that of the run's first code point.
    fn runs(&mut self, entries: &[Entry], mut run: impl FnMut(u64, &str)) {
        for entry in entries.iter().filter(|e| self.streams.accepts(e.stream)) {
            if !self.strip {
                run(entry.cursor, &entry.text);
                continue;
            }
            let stripper = &mut self.strippers[entry.stream as usize];
            // (byte offset, its cursor), moved on to each run's start.
            let (mut byte, mut cursor) = (0, entry.cursor);
            stripper.runs(&entry.text, |range| {
                cursor += count_chars(&entry.text.as_bytes()[byte..range.start]);
                byte = range.start;
                run(cursor, &entry.text[range]);
            });
        }
    }
}

fn page_at(s: &State, cursor: u64) -> Result<Page, ToolError> {
    s.output()
        .read(cursor, SEARCH_STEP_BYTES, PAGE_MAX_ENTRIES)
        .map_err(|e| read_error(e, cursor, s.output().end()))
}

impl Session {
    /// Wait as `request` says. `searched` counts the code points searched so far (for
    /// progress reports); `cancel` ends the wait early.
    pub async fn wait(
        &self,
        mut request: WaitRequest,
        searched: &AtomicU64,
        cancel: &CancellationToken,
    ) -> Result<WaitResult, ToolError> {
        let started = Instant::now();
        let deadline = started + request.timeout;
        let mut changes = self.changed.subscribe();
        let mut filter = Filter::new(request.streams, request.strip_ansi);
        let mut joined = String::new();
        let mut scan = request.cursor;
        loop {
            // One step: at most SEARCH_STEP_BYTES of new text, copied under the lock and
            // searched outside it (a lazy DFA meeting new states is slow at first).
            let (page, done, end) = self.inspect(|s| {
                let end = s.output().end();
                let done = s.settled();
                if request.search.is_none() {
                    if request.cursor > end {
                        return Err(read_error(ReadError::Invalid { end }, request.cursor, end));
                    }
                    return Ok((None, done, end));
                }
                Ok((Some(page_at(s, scan)?), done, end))
            })?;
            let step = match (page, request.search.as_mut()) {
                (Some(page), Some(search)) => {
                    // A page of one run is searched where it lies. Runs are joined first
                    // otherwise: fed one by one, short runs (between escape sequences, or
                    // of interleaved streams) would keep the literal search from skipping.
                    let ended = match (&page.entries[..], request.strip_ansi) {
                        ([entry], false) => {
                            request.streams.accepts(entry.stream) && search.feed(&entry.text, false)
                        }
                        _ => {
                            joined.clear();
                            filter.runs(&page.entries, |_, run| joined.push_str(run));
                            search.feed(&joined, false)
                        }
                    };
                    scan = page.next_cursor;
                    let more = page.has_more;
                    if ended || search.feed("", !more) {
                        Step::Ended { more, done, end }
                    } else if more {
                        Step::More
                    } else {
                        Step::Idle { done, end }
                    }
                }
                _ => {
                    scan = end;
                    Step::Idle { done, end }
                }
            };
            let step = match (step, request.search.as_mut()) {
                // A match ended in this step: find it, a page at a time under the lock. When
                // nothing followed the searched text, the match may end at its very end
                // (`$`, `\b`), so it is looked for in that text: what arrived since cannot
                // undo it, and it is found by this one look.
                (Step::Ended { more, done, end }, Some(search)) => {
                    let streams = (request.streams, request.strip_ansi);
                    let until = (!more).then_some(scan);
                    let found = self
                        .find(request.cursor, until, search, streams)
                        .map_err(|e| {
                            let end = self.inspect(|s| s.output().end());
                            read_error(e, request.cursor, end)
                        })?;
                    match found {
                        Some(found) => Step::Matched(found),
                        // Only where the text the search saw was evicted meanwhile, and
                        // `find` told that already.
                        None if more => Step::More,
                        None => Step::Idle { done, end },
                    }
                }
                (step, _) => step,
            };
            searched.store(scan - request.cursor, Ordering::Relaxed);
            if request.search.is_some() {
                // What was searched is acknowledged (so a paused flood goes on), except
                // the tail a match found next may start in.
                self.acknowledge(self.inspect(|s| s.output().keep_back(scan)));
            }
            match step {
                Step::Matched(found) => {
                    self.acknowledge(found.end_cursor);
                    return Ok(WaitResult {
                        outcome: "matched",
                        next_cursor: found.end_cursor,
                        found: Some(found),
                        session: self.snapshot(),
                    });
                }
                // (`Ended` became `Matched`, `More` or `Idle` above.)
                Step::More | Step::Ended { .. } => {
                    // A large backlog is searched step by step: between steps other tasks
                    // run, and the timeout and a cancellation are heard.
                    if cancel.is_cancelled() {
                        return Err(cancelled());
                    }
                    if Instant::now() >= deadline {
                        return Ok(self.finish_wait("timeout", scan));
                    }
                    tokio::task::yield_now().await;
                    continue;
                }
                Step::Idle { done: true, end } => return Ok(self.finish_wait("exited", end)),
                Step::Idle { done: false, .. } => {}
            }
            // Quiet since the later of the request's start and the last output; every
            // change re-arms this timer, so output resets it without any polling.
            let quiet_at = |s: &State| {
                request
                    .idle
                    .map(|idle| Instant::from_std(s.last_output()).max(started) + idle)
            };
            let idle_at = self.inspect(quiet_at);
            // Looked at once the output is quiet, then at most every AWAIT_POLL while it
            // stays quiet; output arriving re-arms it through `changes`.
            let look_at = match request.until_input {
                true => match self.input_look(scan).await? {
                    Ok(result) => return Ok(result),
                    Err(at) => Some(at),
                },
                false => None,
            };
            tokio::select! {
                _ = changes.changed() => {}
                () = sleep_until(look_at) => {}
                () = sleep_until(idle_at) => {
                    // Output that arrived as the timer fired re-arms it instead.
                    if self.inspect(quiet_at) == idle_at {
                        return Ok(self.finish_wait("idle", scan));
                    }
                }
                () = tokio::time::sleep_until(deadline) => return Ok(self.finish_wait("timeout", scan)),
                () = cancel.cancelled() => return Err(cancelled()),
            }
        }
    }

    /// For `until_input`: the result once the session awaits input, else when to look
    /// again; an error when it cannot be known.
    async fn input_look(&self, scan: u64) -> Result<Result<WaitResult, Instant>, ToolError> {
        let quiet = Instant::from_std(self.quiet_at());
        if Instant::now() < quiet {
            return Ok(Err(quiet));
        }
        match self.awaiting_confirmed().await {
            Some(true) => Ok(Ok(self.finish_wait("awaiting_input", scan))),
            Some(false) => Ok(Err(Instant::now() + AWAIT_POLL)),
            None => Err(ToolError::invalid_argument(
                "until_input",
                "cannot be answered for this session: what its programs are doing cannot be \
                 read from /proc here (a program that changed user, or a kernel that does not \
                 allow it); wait for a pattern or with idle_ms instead",
            )),
        }
    }

    fn finish_wait(&self, outcome: &'static str, next_cursor: u64) -> WaitResult {
        self.acknowledge(next_cursor);
        WaitResult {
            outcome,
            found: None,
            next_cursor,
            session: self.snapshot(),
        }
    }
}

fn cancelled() -> ToolError {
    ToolError::new(ErrorCode::Internal, "the client cancelled this wait")
}

/// One step of a wait.
enum Step {
    /// A match ended in the text searched so far (`more`: retained output follows;
    /// `done` and `end` as for `Idle`).
    Ended {
        more: bool,
        done: bool,
        end: u64,
    },
    Matched(Match),
    /// More retained output waits to be searched now.
    More,
    /// Everything available was searched; `done` once the session is final and drained.
    Idle {
        done: bool,
        end: u64,
    },
}

impl Session {
    /// The leftmost match in the retained output from `from` (up to `until`, as if the
    /// output ended there, when given), searched as the wait searches (`streams`: which
    /// streams, and whether escape sequences are stripped). The text is copied out a page
    /// per lock and matched outside the lock; a record evicted before it was copied makes
    /// the match's start unknowable (expired output). So does finding nothing once `from`
    /// itself was evicted: the match the DFA saw began there.
    fn find(
        &self,
        from: u64,
        until: Option<u64>,
        search: &Search,
        streams: (Streams, bool),
    ) -> Result<Option<Match>, ReadError> {
        let base = self.inspect(|s| s.output().base());
        let mut pages = self.pages(from.max(base), Evicted::Fail);
        let found = find_in(&mut pages, from, until, search, streams)?;
        if found.is_none() && from < base {
            return Err(ReadError::Expired {
                base: self.inspect(|s| s.output().base()),
            });
        }
        Ok(found)
    }
}

/// The leftmost match in the text of `pages` (read on until one has no more after it, or
/// up to the cursor `until`, where the text then ends).
fn find_in(
    pages: &mut impl Iterator<Item = Result<Page, ReadError>>,
    from: u64,
    until: Option<u64>,
    search: &Search,
    (streams, strip): (Streams, bool),
) -> Result<Option<Match>, ReadError> {
    let until = until.unwrap_or(u64::MAX);
    let mut filter = Filter::new(streams, strip);
    let mut text = String::new();
    // (byte offset in `text`, cursor) wherever the searched text skips records.
    let mut marks: Vec<(usize, u64)> = Vec::new();
    let mut next_expected = None;
    for page in pages {
        let page = page?;
        filter.runs(&page.entries, |at, run| {
            if at >= until {
                return;
            }
            let run = before_char(run, until - at);
            if next_expected != Some(at) {
                marks.push((text.len(), at));
            }
            text.push_str(run);
            next_expected = Some(at + count_chars(run.as_bytes()));
        });
        if !page.has_more || page.next_cursor >= until {
            break;
        }
    }

    let Some(Leftmost { whole, groups }) = search.leftmost(&text) else {
        return Ok(None);
    };
    let cursor_at = |offset: usize| {
        let mark = marks
            .partition_point(|(o, _)| *o <= offset)
            .saturating_sub(1);
        let (start, cursor) = marks.get(mark).copied().unwrap_or((0, from));
        cursor + count_chars(&text.as_bytes()[start..offset])
    };
    let start_cursor = cursor_at(whole.start);
    let end_cursor = match text[whole.clone()].chars().next_back() {
        Some(last) => cursor_at(whole.end - last.len_utf8()) + 1,
        None => start_cursor,
    };
    Ok(Some(Match {
        text: text[whole].to_owned(),
        start_cursor,
        end_cursor,
        groups: groups
            .into_iter()
            .map(|g| g.map(|range| text[range].to_owned()))
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::output::OutputBuffer;
    use crate::session::input::Input;

    /// A wait over a large backlog gives the runtime back between steps, so its timeout
    /// and a cancellation are heard before the whole backlog is searched.
    #[test]
    fn a_long_search_yields_between_steps_and_hears_cancellation() {
        let backlog = 64 * SEARCH_STEP_BYTES;
        let mut output = OutputBuffer::new(backlog, backlog);
        output.append(Stream::Stdout, &"a".repeat(backlog));
        let session = Session::bare(State::new(Input::Closed, output, 1));
        let request = WaitRequest {
            cursor: 0,
            search: Some(Search::new("b").unwrap()),
            streams: Streams::Any,
            timeout: Duration::from_secs(60),
            strip_ansi: false,
            idle: None,
            until_input: false,
        };
        let searched = AtomicU64::new(0);
        let cancel = CancellationToken::new();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let mut wait = std::pin::pin!(session.wait(request, &searched, &cancel));
        let mut cx = Context::from_waker(Waker::noop());
        if let Poll::Ready(r) = wait.as_mut().poll(&mut cx) {
            panic!("answered at once: {:?}", r.map(|w| w.outcome));
        }
        let after_one_poll = searched.load(Ordering::Relaxed);
        assert!(
            after_one_poll < backlog as u64,
            "one poll searched all {after_one_poll} code points"
        );
        cancel.cancel();
        match wait.as_mut().poll(&mut cx) {
            Poll::Ready(Err(e)) => assert_eq!(e.code, ErrorCode::Internal),
            other => panic!("not cancelled: {:?}", other.map(|r| r.map(|w| w.outcome))),
        }
        assert!(searched.load(Ordering::Relaxed) < backlog as u64);
    }

    /// A match whose start was evicted between the search that saw it end and the look
    /// for where it begins is reported as expired output, not as no match (the search
    /// that saw it would wait on for nothing).
    #[test]
    fn a_match_evicted_before_it_was_found_is_expired_output() {
        let mut output = OutputBuffer::new(16, 16);
        output.append(Stream::Stdout, &format!("ab{}", "x".repeat(20)));
        assert!(output.base() > 0);
        let session = Session::bare(State::new(Input::Closed, output, 1));
        let search = Search::new("ab").unwrap();
        match session.find(0, None, &search, (Streams::Any, false)) {
            Err(e) => assert_eq!(e, ReadError::Expired { base: 6 }),
            Ok(found) => panic!("expected expired output, got {found:?}"),
        }
        // From the retained output on, there is simply nothing to find.
        assert!(matches!(
            session.find(6, None, &search, (Streams::Any, false)),
            Ok(None)
        ));
    }

    /// With escape sequences stripped, the searched text reaches the search in pieces (the
    /// runs between sequences), and a match spanning them is found, with raw cursors; one
    /// that ends where the text ends (`$` after a last sequence) is found too.
    #[test]
    fn a_stripped_wait_matches_across_escape_sequences_and_at_the_end() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        for (pattern, text, start, end) in [
            ("abcd", "ab\u{1b}[31mc\u{1b}[0md\n", 0, 13),
            ("b$", "ab\u{1b}[0m", 1, 2),
        ] {
            let session = empty_session();
            session.update(|s| s.store(Stream::Stdout, text, false));
            let mut request = wait_for(pattern, Duration::from_millis(50));
            request.strip_ansi = true;
            let answer = runtime.block_on(async {
                let cancel = CancellationToken::new();
                session.wait(request, &AtomicU64::new(0), &cancel).await
            });
            let found = answer.unwrap().found;
            let found = found.unwrap_or_else(|| panic!("{pattern:?} in {text:?}: no match"));
            assert_eq!(
                (found.start_cursor, found.end_cursor),
                (start, end),
                "{pattern:?}"
            );
        }
    }

    /// A session with room for all the output a test appends, none yet.
    fn empty_session() -> std::sync::Arc<Session> {
        let output = OutputBuffer::new(1 << 20, 1 << 20);
        std::sync::Arc::new(Session::bare(State::new(Input::Closed, output, 1)))
    }

    fn wait_for(pattern: &str, timeout: Duration) -> WaitRequest {
        WaitRequest {
            cursor: 0,
            search: Some(Search::new(pattern).unwrap()),
            streams: Streams::Any,
            timeout,
            strip_ansi: false,
            idle: None,
            until_input: false,
        }
    }

    /// What a whole-text search says a wait over `chunks` must answer: the match in the
    /// output as it stood when a match first existed in it (the end of a chunk, where
    /// nothing followed yet), as (text, start cursor, groups).
    fn whole_text_answer(
        pattern: &str,
        chunks: &[String],
    ) -> Option<(String, u64, Vec<Option<String>>)> {
        let regex = regex::Regex::new(pattern).unwrap();
        let mut text = String::new();
        for chunk in chunks {
            text.push_str(chunk);
            if let Some(c) = regex.captures(&text) {
                let whole = c.get(0).unwrap();
                let groups = c.iter().skip(1).map(|g| g.map(|m| m.as_str().to_owned()));
                let start = text[..whole.start()].chars().count() as u64;
                return Some((whole.as_str().to_owned(), start, groups.collect()));
            }
        }
        None
    }

    /// Patterns whose match at a chunk's end a later chunk undoes while a longer one goes
    /// on through it, with look-behind at a chunk's start that is no text's start, groups,
    /// and plain ones.
    const CHUNKED: &[&str] = &[
        "x$|xy+z",
        "(x)$|(x)(y+)z",
        r"^y|(?-u:\b)zy",
        "(?m)^y+$",
        r"x\d+",
        "yz|x",
        "日本$|本x",
    ];

    proptest::proptest! {
        /// However the output arrives, a wait answers what the whole-text search of the
        /// output as it stood finds: never a miss, never a match that was not there.
        #[test]
        fn a_wait_answers_what_a_whole_text_search_finds_however_the_output_arrives(
            pattern in proptest::sample::select(CHUNKED),
            chunks in proptest::collection::vec("[xyz1日本\n ]{1,12}", 1..12),
        ) {
            let expected = whole_text_answer(pattern, &chunks);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            let got = runtime.block_on(async {
                let session = empty_session();
                let searched = std::sync::Arc::new(AtomicU64::new(0));
                let cancel = CancellationToken::new();
                let waiting = tokio::spawn({
                    let (session, searched, cancel) =
                        (session.clone(), searched.clone(), cancel.clone());
                    let request = wait_for(pattern, Duration::from_secs(600));
                    async move { session.wait(request, &searched, &cancel).await }
                });
                let mut total = 0;
                for chunk in &chunks {
                    // One thread: the wait runs only while this task awaits, so once it
                    // has searched everything it is waiting for more (or has answered),
                    // and each chunk's end is an end of the output it searches.
                    while searched.load(Ordering::Relaxed) < total && !waiting.is_finished() {
                        tokio::task::yield_now().await;
                    }
                    session.update(|s| s.store(Stream::Stdout, chunk, false));
                    total += chunk.chars().count() as u64;
                }
                while searched.load(Ordering::Relaxed) < total && !waiting.is_finished() {
                    tokio::task::yield_now().await;
                }
                cancel.cancel();
                waiting.await.unwrap()
            });
            let got = got.ok().and_then(|answer| answer.found).map(|m| {
                (m.text, m.start_cursor, m.groups)
            });
            proptest::prop_assert_eq!(got, expected, "chunks {:?}", chunks);
        }
    }

    /// The same while the output arrives from another thread at any moment, also between
    /// the look at a chunk and the look for where its match begins: a match at the end of
    /// `...x` that `yy` undoes is not lost, and neither is `xyyz` when `z` follows.
    #[test]
    fn a_wait_never_misses_a_match_while_output_arrives_meanwhile() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        // Long enough that searching it takes a while: output arrives as it is searched.
        let filler = "xa".repeat(20_000);
        for round in 0..40u64 {
            let session = empty_session();
            let appender = std::thread::spawn({
                let (session, filler) = (session.clone(), filler.clone());
                move || {
                    let append =
                        |text: &str| session.update(|s| s.store(Stream::Stdout, text, false));
                    append(&format!("{filler}x"));
                    // `yy` at a moment spread over the rounds, so that in some it lands while
                    // the chunk before is searched; `z` well after.
                    std::thread::sleep(Duration::from_micros(round * 250));
                    append("yy");
                    std::thread::sleep(Duration::from_millis(30));
                    append("z");
                }
            });
            let answer = runtime.block_on(async {
                let cancel = CancellationToken::new();
                let request = wait_for("x$|xy+z", Duration::from_secs(10));
                session.wait(request, &AtomicU64::new(0), &cancel).await
            });
            appender.join().unwrap();
            let found = answer.unwrap().found.expect("a match, not a timeout");
            assert!(
                found.text == "x" || found.text == "xyyz",
                "round {round}: {found:?}"
            );
        }
    }

    fn entry(cursor: u64, stream: Stream, text: &str) -> Entry {
        Entry {
            cursor,
            stream,
            text: text.to_owned(),
        }
    }

    fn runs(streams: Streams, strip: bool, entries: &[Entry]) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        Filter::new(streams, strip).runs(entries, |at, run| out.push((at, run.to_owned())));
        out
    }

    #[test]
    fn runs_follow_streams_and_skip_escape_sequences() {
        let entries = [
            entry(0, Stream::Stdout, "a\u{1b}[31mbc"),
            entry(8, Stream::Stderr, "X\u{1b}"),
            entry(10, Stream::Stdout, "d\u{1b}[0m"),
            entry(15, Stream::Stderr, "]0;t\u{7}Y"),
        ];
        assert_eq!(
            runs(Streams::Any, true, &entries),
            [(0, "a"), (6, "bc"), (8, "X"), (10, "d"), (20, "Y")].map(|(c, t)| (c, t.to_owned()))
        );
        assert_eq!(
            runs(Streams::Only(Stream::Stdout), false, &entries),
            [(0, "a\u{1b}[31mbc"), (10, "d\u{1b}[0m")].map(|(c, t)| (c, t.to_owned()))
        );
    }
}
