//! Waiting on a session: until a pattern matches its output from a cursor, until it is
//! final, or until a timeout. Each code point is searched once, as it arrives.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use regex::Regex;
use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Session;
use super::io::read_error;
use super::state::{Snapshot, State};
use crate::errors::{ErrorCode, ToolError};
use crate::limits::PAGE_MAX_ENTRIES;
use crate::output::{AnsiStripper, Entry, Page, Search, Stream};

/// Text taken from the buffer per step of the search.
const SEARCH_STEP_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streams {
    Any,
    Only(Stream),
}

impl Streams {
    fn accepts(self, stream: Stream) -> bool {
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
            strippers: [AnsiStripper::default(); 2],
        }
    }

    /// Calls `keep(cursor, char)` for every code point of `entries` that is searched.
    fn each(&mut self, entries: &[Entry], mut keep: impl FnMut(u64, char)) {
        for entry in entries.iter().filter(|e| self.streams.accepts(e.stream)) {
            let stripper = &mut self.strippers[entry.stream as usize];
            for (cursor, c) in (entry.cursor..).zip(entry.text.chars()) {
                if !self.strip || stripper.keep(c) {
                    keep(cursor, c);
                }
            }
        }
    }
}

fn page_at(s: &State, cursor: u64) -> Result<Page, ToolError> {
    s.output
        .read(cursor, SEARCH_STEP_BYTES, PAGE_MAX_ENTRIES)
        .map_err(|e| read_error(e, cursor, s.output.end()))
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
        let deadline = Instant::now() + request.timeout;
        let mut changes = self.changed.subscribe();
        let mut filter = Filter::new(request.streams, request.strip_ansi);
        let mut scan = request.cursor;
        loop {
            // One step of the search, under the lock; at most SEARCH_STEP_BYTES of text.
            let (page, end, done) = self.inspect(|s| {
                let page = page_at(s, scan)?;
                let done = s.status.is_final() && (s.output_complete || s.output_incomplete);
                Ok::<_, ToolError>((page, s.output.end(), done))
            })?;
            if let Some(search) = request.search.as_mut() {
                let mut text = String::new();
                filter.each(&page.entries, |_, c| text.push(c));
                scan = page.next_cursor;
                searched.store(scan - request.cursor, Ordering::Relaxed);
                if search.feed(&text)
                    && let Some(found) = self.find(
                        request.cursor,
                        search.regex(),
                        request.streams,
                        request.strip_ansi,
                    )?
                {
                    return Ok(WaitResult {
                        outcome: "matched",
                        next_cursor: found.end_cursor,
                        found: Some(found),
                        session: self.snapshot(),
                    });
                }
                if page.has_more {
                    continue;
                }
            } else {
                scan = end;
            }
            if done {
                return Ok(self.finish_wait("exited", end));
            }
            tokio::select! {
                _ = changes.changed() => {}
                () = tokio::time::sleep_until(deadline) => return Ok(self.finish_wait("timeout", scan)),
                () = cancel.cancelled() => {
                    return Err(ToolError::new(ErrorCode::Internal, "the client cancelled this wait"));
                }
            }
        }
    }

    fn finish_wait(&self, outcome: &'static str, next_cursor: u64) -> WaitResult {
        WaitResult {
            outcome,
            found: None,
            next_cursor,
            session: self.snapshot(),
        }
    }

    /// The leftmost match in the retained output from `from`, searched as the wait searches.
    fn find(
        &self,
        from: u64,
        regex: &Regex,
        streams: Streams,
        strip: bool,
    ) -> Result<Option<Match>, ToolError> {
        let mut filter = Filter::new(streams, strip);
        let mut text = String::new();
        // (byte offset in `text`, cursor) wherever the searched text skips records.
        let mut marks: Vec<(usize, u64)> = Vec::new();
        let mut next_expected = None;
        self.inspect(|s| {
            let mut cursor = from.max(s.output.base());
            loop {
                let page = page_at(s, cursor)?;
                filter.each(&page.entries, |at, c| {
                    if next_expected != Some(at) {
                        marks.push((text.len(), at));
                    }
                    text.push(c);
                    next_expected = Some(at + 1);
                });
                if !page.has_more {
                    return Ok::<_, ToolError>(());
                }
                cursor = page.next_cursor;
            }
        })?;
        let Some(captures) = regex.captures(&text) else {
            return Ok(None);
        };
        let whole = captures.get(0).expect("group 0 always takes part");
        let cursor_at = |offset: usize| {
            let mark = marks
                .partition_point(|(o, _)| *o <= offset)
                .saturating_sub(1);
            let (start, cursor) = marks.get(mark).copied().unwrap_or((0, from));
            cursor + text[start..offset].chars().count() as u64
        };
        let start_cursor = cursor_at(whole.start());
        let end_cursor = match whole.as_str().chars().next_back() {
            Some(last) => cursor_at(whole.end() - last.len_utf8()) + 1,
            None => start_cursor,
        };
        Ok(Some(Match {
            text: whole.as_str().to_owned(),
            start_cursor,
            end_cursor,
            groups: captures
                .iter()
                .skip(1)
                .map(|g| g.map(|m| m.as_str().to_owned()))
                .collect(),
        }))
    }
}
