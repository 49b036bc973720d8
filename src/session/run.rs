//! The end of a one-shot run (`terminal_run`): feed stdin and close it, wait for the final
//! state, and return the head and tail of each stream, captured as they arrived (so the
//! buffer may evict freely, and `on_full: "pause"` never holds a run).

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Session;
use super::state::{Reason, Snapshot, State};
use crate::limits::{DRAIN_DEADLINE, GRACE_DEFAULT_MS, KILL_CONFIRM};
use crate::output::{Omitted, Stream};

#[derive(Debug, Serialize)]
pub struct RunResult {
    pub exit_code: Option<i32>,
    /// The signal that ended the program, when one did.
    pub signal: Option<&'static str>,
    pub stdout: String,
    pub stderr: String,
    /// Part of the stream was left out between its head and its tail.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub stdout_omitted: Option<Omitted>,
    pub stderr_omitted: Option<Omitted>,
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
        cancel: &CancellationToken,
    ) -> RunResult {
        // A program that exits without reading its input is not an error of the run; what
        // happened shows in the result.
        let _ = self.send(stdin.as_bytes(), true, cancel).await;
        // The timeout's termination: grace, kill confirmation and the drain deadline.
        let bound =
            timeout + Duration::from_millis(GRACE_DEFAULT_MS) + KILL_CONFIRM + DRAIN_DEADLINE * 2;
        tokio::select! {
            _ = self.wait_until(Instant::now() + bound, State::settled) => {}
            () = cancel.cancelled() => {
                self.terminate(Reason::User, GRACE_DEFAULT_MS).await;
            }
        }
        let (stdout, stderr) = {
            let mut captures = self.captures();
            (captures.kept(Stream::Stdout), captures.kept(Stream::Stderr))
        };
        self.acknowledge(self.inspect(|s| s.output().end()));
        let session = self.snapshot();
        RunResult {
            exit_code: session.exit_code,
            signal: session.exit_signal,
            stdout_truncated: stdout.omitted.is_some(),
            stderr_truncated: stderr.omitted.is_some(),
            stdout_omitted: stdout.omitted,
            stderr_omitted: stderr.omitted,
            stdout: stdout.text,
            stderr: stderr.text,
            session,
        }
    }
}
