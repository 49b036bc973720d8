//! Reading a session's output by cursor.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::Session;
use super::state::Status;
use crate::errors::{ErrorCode, ToolError};
use crate::limits::{PAGE_MAX_ENTRIES, SEARCH_STEP_BYTES};
use crate::output::{Entry, ReadError, StrippedTailSearch, TailSearch, strip_entries};

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
        self.acknowledge(result.next_cursor);
        if strip {
            strip_entries(&mut result.records);
        }
        Ok(result)
    }
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
