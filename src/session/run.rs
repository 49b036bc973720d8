//! The end of a one-shot run (`terminal_run`): feed stdin and close it, wait for the final
//! state, and return the tail of each stream.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Session;
use super::state::{Reason, Snapshot, State};
use crate::limits::{DRAIN_DEADLINE, GRACE_DEFAULT_MS, KILL_CONFIRM, PAGE_MAX_ENTRIES};
use crate::output::Stream;

#[derive(Debug, Serialize)]
pub struct RunResult {
    /// The last `max_bytes` bytes of each stream.
    pub stdout: String,
    pub stderr: String,
    /// Output of the stream was cut to `max_bytes`, or evicted from the buffer.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub session: Snapshot,
}

impl Session {
    /// Write `stdin` and end the input, then wait for the final state: the session's own
    /// timeout (`timeout`) terminates it with reason `timeout`. A cancelled request
    /// terminates it (reason `user`).
    pub async fn run_to_end(
        &self,
        stdin: &str,
        timeout: Duration,
        max_bytes: usize,
        cancel: &CancellationToken,
    ) -> RunResult {
        // A program that exits without reading its input is not an error of the run; what
        // happened shows in the result.
        let _ = self.send(stdin.as_bytes(), true, cancel).await;
        let settled = |s: &State| s.status.is_final() && (s.output_complete || s.output_incomplete);
        // The timeout's termination: grace, kill confirmation and the drain deadline.
        let bound =
            timeout + Duration::from_millis(GRACE_DEFAULT_MS) + KILL_CONFIRM + DRAIN_DEADLINE * 2;
        tokio::select! {
            _ = self.wait_until(Instant::now() + bound, settled) => {}
            () = cancel.cancelled() => {
                self.terminate(Reason::User, GRACE_DEFAULT_MS).await;
            }
        }
        let (stdout, stderr) = self.tails(max_bytes);
        self.acknowledge(self.inspect(|s| s.output.end()));
        RunResult {
            stdout_truncated: stdout.1,
            stderr_truncated: stderr.1,
            stdout: stdout.0,
            stderr: stderr.0,
            session: self.snapshot(),
        }
    }
}

impl Session {
    /// The last `max_bytes` bytes (whole code points) of stdout and of stderr, each with
    /// whether anything before it is missing; read a page per lock.
    fn tails(&self, max_bytes: usize) -> ((String, bool), (String, bool)) {
        let mut texts = [String::new(), String::new()];
        let mut cut = [false, false];
        let mut cursor = self.inspect(|s| s.output.base());
        loop {
            let page = self.inspect(|s| {
                // Evicted meanwhile: go on from what is retained.
                let from = cursor.max(s.output.base());
                s.output.read(from, 64 * 1024, PAGE_MAX_ENTRIES)
            });
            let Ok(page) = page else {
                break;
            };
            for entry in &page.entries {
                let i = match entry.stream {
                    Stream::Stdout => 0,
                    Stream::Stderr => 1,
                };
                texts[i].push_str(&entry.text);
                // Keep memory near twice the tail, whatever the output.
                if texts[i].len() > 2 * max_bytes {
                    keep_tail(&mut texts[i], max_bytes);
                    cut[i] = true;
                }
            }
            if !page.has_more || page.next_cursor <= cursor {
                break;
            }
            cursor = page.next_cursor;
        }
        let evicted = self.inspect(|s| s.output.truncated());
        let [mut out, mut err] = texts;
        let out_cut = keep_tail(&mut out, max_bytes) || cut[0];
        let err_cut = keep_tail(&mut err, max_bytes) || cut[1];
        ((out, out_cut || evicted), (err, err_cut || evicted))
    }
}

/// Drop the front of `text` so at most `max_bytes` remain, at a code point boundary;
/// true if anything was dropped.
fn keep_tail(text: &mut String, max_bytes: usize) -> bool {
    if text.len() <= max_bytes {
        return false;
    }
    let mut start = text.len() - max_bytes;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text.drain(..start);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_keep_whole_code_points() {
        let mut text = "ab€cd".to_owned();
        assert!(keep_tail(&mut text, 4));
        assert_eq!(text, "cd");
        let mut text = "ab€cd".to_owned();
        assert!(keep_tail(&mut text, 5));
        assert_eq!(text, "€cd");
        let mut short = "abc".to_owned();
        assert!(!keep_tail(&mut short, 5));
    }
}
