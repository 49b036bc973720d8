//! Reading a session's output by cursor.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::Session;
use super::state::Status;
use crate::errors::{ErrorCode, ToolError};
use crate::limits::{PAGE_MAX_ENTRIES, SEARCH_STEP_BYTES, STRIP_CONTEXT_CHARS};
use crate::output::{
    Entry, ReadError, Stream, StrippedTailSearch, TailSearch, before_char, count_chars,
    strip_entries_after, unfinished_sequence,
};

#[derive(Debug, Serialize)]
pub struct ReadResult {
    pub records: Vec<Entry>,
    pub base_cursor: u64,
    pub next_cursor: u64,
    pub truncated: bool,
    pub has_more: bool,
    pub status: Status,
    pub output_complete: bool,
    pub output_incomplete: bool,
}

/// Where a read starts.
#[derive(Debug, Clone, Copy)]
pub enum ReadFrom {
    Cursor(u64),
    /// Where the given number of last retained lines begins.
    Tail(usize),
}

impl Session {
    /// A page from `from`. When nothing is there yet and more may come (the process is
    /// running, or final with its output not yet drained), wait up to `wait` for it.
    pub async fn read(
        &self,
        from: ReadFrom,
        max_bytes: usize,
        wait: Duration,
        strip: bool,
    ) -> Result<ReadResult, ToolError> {
        let deadline = Instant::now() + wait;
        if !wait.is_zero() {
            // Anything but "exactly at the end of output that may still grow" answers now.
            let cursor = self.read_start(from, strip).await;
            self.wait_until(deadline, |s| s.output().end() != cursor || s.output_ended())
                .await;
        }
        let start = self.read_start(from, strip).await;
        let mut context = Vec::new();
        let mut result = self.inspect(|s| {
            // A tail start evicted since it was found: the lines still retained.
            let output = s.output();
            let cursor = match from {
                ReadFrom::Cursor(cursor) => cursor,
                ReadFrom::Tail(_) => start.max(output.base()),
            };
            let page = output
                .read(cursor, max_bytes, PAGE_MAX_ENTRIES)
                .map_err(|e| read_error(e, cursor, output.end()))?;
            // What comes right before the page, for a sequence the page begins inside.
            let from = cursor
                .saturating_sub(STRIP_CONTEXT_CHARS)
                .max(output.base());
            if strip && from < cursor {
                let chars = usize::try_from(cursor - from).unwrap_or(usize::MAX);
                if let Ok(before) = output.read(from, chars.saturating_mul(4), PAGE_MAX_ENTRIES) {
                    context = before.entries;
                    context.retain_mut(|e| {
                        let keep = before_char(&e.text, cursor.saturating_sub(e.cursor)).len();
                        e.text.truncate(keep);
                        e.cursor < cursor
                    });
                }
            }
            let snapshot = s.settled_flags();
            Ok::<_, ToolError>(ReadResult {
                records: page.entries,
                base_cursor: output.base(),
                next_cursor: page.next_cursor,
                truncated: output.truncated(),
                has_more: page.has_more,
                status: s.status(),
                output_complete: snapshot.0,
                output_incomplete: snapshot.1,
            })
        })?;
        if strip {
            end_before_unfinished_sequence(&mut result);
        }
        self.acknowledge(result.next_cursor);
        if strip {
            strip_entries_after(&context, &mut result.records);
        }
        Ok(result)
    }
}

/// A page to be stripped that ends inside an escape sequence (cut by `max_bytes`, or by
/// the output so far) ends before the sequence instead, unless the sequence begins the
/// page: the next page, from there, strips it whole, where the rest of it would have
/// shown as text.
fn end_before_unfinished_sequence(result: &mut ReadResult) {
    let Some(first) = result.records.first().map(|e| e.cursor) else {
        return;
    };
    let mut cut: Option<u64> = None;
    for stream in [Stream::Stdout, Stream::Stderr] {
        let entries: Vec<&Entry> = result
            .records
            .iter()
            .filter(|e| e.stream == stream)
            .collect();
        let texts: Vec<&str> = entries.iter().map(|e| e.text.as_str()).collect();
        if let Some((i, at)) = unfinished_sequence(&texts) {
            let entry = entries[i];
            let at = entry.cursor + count_chars(&entry.text.as_bytes()[..at]);
            cut = Some(cut.map_or(at, |cut| cut.min(at)));
        }
    }
    let Some(cut) = cut.filter(|cut| *cut > first) else {
        return;
    };
    result.records.retain_mut(|e| {
        if e.cursor >= cut {
            return false;
        }
        let keep = before_char(&e.text, cut - e.cursor).len();
        e.text.truncate(keep);
        true
    });
    result.next_cursor = cut;
    result.has_more = true;
}

impl Session {
    /// The cursor a read from `from` starts at. A tail is found a bounded step at a time
    /// under the lock (a page for the stripped count, which is done outside it), yielding
    /// between steps, so no read holds the session for a scan of the whole buffer.
    async fn read_start(&self, from: ReadFrom, strip: bool) -> u64 {
        let lines = match from {
            ReadFrom::Cursor(cursor) => return cursor,
            ReadFrom::Tail(lines) => lines,
        };
        if strip {
            let mut search = self.inspect(|s| StrippedTailSearch::new(s.output(), lines));
            while let Some(cursor) = search.next_page() {
                let page =
                    self.inspect(|s| s.output().read(cursor, SEARCH_STEP_BYTES, PAGE_MAX_ENTRIES));
                match page {
                    Ok(page) => search.feed(&page),
                    Err(ReadError::Expired { base }) => search.evicted(base),
                    Err(ReadError::Invalid { .. }) => break,
                }
                tokio::task::yield_now().await;
            }
            return self.inspect(|s| search.start(s.output().base()));
        }
        let mut search = self.inspect(|s| TailSearch::new(s.output(), lines));
        loop {
            if let Some(cursor) = self.inspect(|s| search.step(s.output(), SEARCH_STEP_BYTES)) {
                return cursor;
            }
            tokio::task::yield_now().await;
        }
    }
}

/// The error for a cursor the buffer cannot read from.
pub(super) fn read_error(error: ReadError, cursor: u64, end: u64) -> ToolError {
    match error {
        ReadError::Expired { base } => ToolError::new(
            ErrorCode::CursorExpired,
            format!(
                "output before cursor {base} was evicted (the buffer keeps the newest output \
                 only); note the gap and resume at base_cursor {base}"
            ),
        )
        .with("base_cursor", base)
        .with("next_cursor", end),
        ReadError::Invalid { end } => ToolError::new(
            ErrorCode::InvalidCursor,
            format!(
                "cursor {cursor} is past the end of the output ({end}); use a next_cursor this \
                 server returned"
            ),
        )
        .with("next_cursor", end),
    }
}
