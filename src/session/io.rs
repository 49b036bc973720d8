//! Reading a session's output by cursor and writing its stdin.

use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::state::{State, Status};
use super::{Input, Session};
use crate::errors::{ErrorCode, ToolError};
use crate::limits::{PAGE_MAX_ENTRIES, WRITE_DRAIN_TIMEOUT};
use crate::output::{AnsiStripper, Entry, ReadError};

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
        let start = |s: &State| match from {
            ReadFrom::Cursor(cursor) => cursor,
            ReadFrom::Tail(lines) => s.output.tail_start(lines, strip),
        };
        if !wait.is_zero() {
            // Anything but "exactly at the end of output that may still grow" answers now.
            let cursor = self.inspect(start);
            self.wait_until(deadline, |s| {
                s.output.end() != cursor || s.output_complete || s.output_incomplete
            })
            .await;
        }
        let mut result = self.inspect(|s| {
            let cursor = start(s);
            let page = s
                .output
                .read(cursor, max_bytes, PAGE_MAX_ENTRIES)
                .map_err(|e| read_error(e, cursor, s.output.end()))?;
            Ok::<_, ToolError>(ReadResult {
                records: page.entries,
                base_cursor: s.output.base(),
                next_cursor: page.next_cursor,
                truncated: s.output.truncated(),
                has_more: page.has_more,
                status: s.status,
                output_complete: s.output_complete,
                output_incomplete: s.output_incomplete,
            })
        })?;
        self.acknowledge(result.next_cursor);
        if strip {
            // One stripper per stream: a sequence split by the other stream's output is
            // still one sequence.
            let mut strippers = [AnsiStripper::default(); 2];
            result.records.retain_mut(|e| {
                let stripper = &mut strippers[e.stream as usize];
                e.text = e.text.chars().filter(|c| stripper.keep(*c)).collect();
                !e.text.is_empty()
            });
        }
        Ok(result)
    }

    /// Write `text` into stdin and wait until the pipe took all of it. Returns the bytes
    /// accepted and whether stdin is now closed.
    pub async fn write(
        &self,
        text: &str,
        close: bool,
        max_input_bytes: usize,
        cancel: &CancellationToken,
    ) -> Result<(usize, bool), ToolError> {
        self.check_writable()?;
        if text.len() > max_input_bytes {
            return Err(ToolError::new(
                ErrorCode::InputTooLarge,
                format!(
                    "text is {} bytes, over the limit of {max_input_bytes}; nothing was \
                     written: split it into smaller writes",
                    text.len()
                ),
            ));
        }
        let closed = self.send(text.as_bytes(), close, cancel).await?;
        Ok((text.len(), closed))
    }

    /// Send bytes to the program's input; with `close`, end the input after them: close
    /// the pipe, or on a terminal send its EOF character (Ctrl-D), leaving the terminal
    /// open for more keys. Returns whether stdin is now closed.
    pub async fn send(
        &self,
        bytes: &[u8],
        close: bool,
        cancel: &CancellationToken,
    ) -> Result<bool, ToolError> {
        self.check_writable()?;
        let mut input = self.input.lock().await;
        // Another write may have closed stdin while this one waited for the lock.
        self.check_writable()?;
        let Some(sink) = input.as_mut() else {
            return Err(stdin_closed());
        };
        let with_eof;
        let (bytes, closes_pipe) = match sink {
            Input::Pty(master) if close => {
                // The terminal's EOF character ends input only at the start of a line;
                // after a partial line, the first one sends that line and a second is EOF.
                let at_line_start =
                    bytes.is_empty() || bytes.ends_with(b"\n") || bytes.ends_with(b"\r");
                let eof = master.eof_char();
                let eofs: &[u8] = if at_line_start { &[eof] } else { &[eof, eof] };
                with_eof = [bytes, eofs].concat();
                (with_eof.as_slice(), false)
            }
            Input::Pty(_) => (bytes, false),
            Input::Pipe(_) => (bytes, close),
        };
        let outcome = tokio::select! {
            written = tokio::time::timeout(WRITE_DRAIN_TIMEOUT, sink.write_all(bytes)) => Some(written),
            () = cancel.cancelled() => None,
        };
        let failure = match outcome {
            Some(Ok(Ok(()))) => None,
            Some(Ok(Err(_))) => Some(stdin_closed()),
            Some(Err(_elapsed)) => Some(ToolError::new(
                ErrorCode::InputBackpressure,
                format!(
                    "the process did not take the input within {} ms, so stdin was closed; \
                     part of it may have been delivered: do not blindly retry",
                    WRITE_DRAIN_TIMEOUT.as_millis()
                ),
            )),
            None => {
                input.take();
                self.update(|s| {
                    s.stdin_closed = true;
                    s.input_uncertain = true;
                });
                return Err(uncertain());
            }
        };
        if failure.is_some() || closes_pipe {
            input.take();
        }
        let closed = input.is_none();
        self.update(|s| {
            s.stdin_closed = closed;
            s.last_activity = SystemTime::now();
        });
        match failure {
            Some(error) => Err(error),
            None => Ok(closed),
        }
    }

    fn check_writable(&self) -> Result<(), ToolError> {
        self.inspect(|s| {
            if s.status.is_final() {
                Err(ToolError::new(
                    ErrorCode::SessionNotRunning,
                    format!(
                        "the session is {}; it takes no input. Read its output, or start a \
                         new session",
                        s.status.as_str()
                    ),
                ))
            } else if s.input_uncertain {
                Err(uncertain())
            } else if s.stdin_closed {
                Err(stdin_closed())
            } else {
                Ok(())
            }
        })
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

fn stdin_closed() -> ToolError {
    ToolError::new(
        ErrorCode::StdinClosed,
        "stdin of this session is closed (by close_stdin, by the process, or after a failed \
         write); read the output or terminate the session",
    )
}

fn uncertain() -> ToolError {
    ToolError::new(
        ErrorCode::InputUncertain,
        "an earlier write was cancelled mid-way, so it is unknown what the process received; \
         stdin was closed. Read the output to see what happened, or start a new session",
    )
}
