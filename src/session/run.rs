//! The end of a one-shot run (`terminal_run`): feed stdin and close it, wait for the final
//! state, and return the head and tail of each stream, captured as they arrived (so the
//! buffer may evict freely, and `on_full: "pause"` never holds a run).
//!
//! On a terminal, input is typed when the program reads: a program sets its terminal up
//! as it starts (a REPL's line editing, a shell's readline), which can drop what was typed
//! before or read it otherwise (an end of input typed to the line discipline reaches a
//! program that then turned it off as a NUL). So stdin is typed once the program waits for
//! input, and the end of input (Ctrl-D) once it waits again.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Session;
use super::input::Typed;
use super::state::{Reason, Snapshot, State};
use crate::config::Mode;
use crate::limits::{AWAIT_POLL, DRAIN_DEADLINE, GRACE_DEFAULT_MS, KILL_CONFIRM, RUN_TYPE_QUIET};
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
        // happened shows in the result. One that reads it late (it starts slowly) has the
        // run's whole time to take it.
        let deadline = Instant::now() + timeout;
        let typed = Typed::Run(deadline);
        if self.mode == Mode::Pty {
            if !stdin.is_empty() && self.until_reading(deadline, cancel).await {
                let _ = self.send_as(stdin.as_bytes(), false, cancel, typed).await;
            }
            if self.until_reading(deadline, cancel).await {
                let _ = self.send_as(b"", true, cancel, typed).await;
            }
        } else {
            // Given up once the program has ended: a process it left behind may hold its
            // stdin without ever reading it.
            let stop = cancel.child_token();
            let write = self.send_as(stdin.as_bytes(), true, &stop, typed);
            let ended = async {
                self.wait_until(deadline, |s| s.status().is_final()).await;
                stop.cancel();
                std::future::pending::<()>().await
            };
            tokio::select! {
                _ = write => {}
                () = ended => {}
            }
        }
        // The timeout's termination: grace, kill confirmation and the drain deadline.
        let bound =
            timeout + Duration::from_millis(GRACE_DEFAULT_MS) + KILL_CONFIRM + DRAIN_DEADLINE * 2;
        tokio::select! {
            _ = self.wait_until(Instant::now() + bound, State::settled) => {}
            () = cancel.cancelled() => {
                self.terminate(Reason::User, GRACE_DEFAULT_MS).await;
            }
        }
        let base = self.inspect(|s| s.output().base());
        let (stdout, stderr) = {
            let mut captures = self.captures();
            (
                captures.kept(Stream::Stdout, base),
                captures.kept(Stream::Stderr, base),
            )
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

    /// On a terminal: wait until its program reads it (awaiting input, confirmed), or,
    /// after `RUN_TYPE_QUIET` of quiet, until a thread of it is blocked reading it while
    /// another is busy. Never before it reads: a program that starts slowly and then sets
    /// its terminal up (a password prompt flushes what was typed) would lose it, or show
    /// it. Whether to type now: false once the run ended, the deadline passed or the call
    /// was cancelled; true too when it cannot be known here.
    async fn until_reading(&self, deadline: Instant, cancel: &CancellationToken) -> bool {
        loop {
            if self.status().is_final() || Instant::now() >= deadline || cancel.is_cancelled() {
                return false;
            }
            let quiet = Instant::from_std(self.quiet_at());
            let look_at = if Instant::now() < quiet {
                quiet
            } else {
                match self.awaiting_confirmed().await {
                    Some(true) | None => return true,
                    Some(false)
                        if self.inspect(|s| s.last_traffic()).elapsed() >= RUN_TYPE_QUIET
                            && self.reading_input() != Some(false) =>
                    {
                        return true;
                    }
                    Some(false) => Instant::now() + AWAIT_POLL,
                }
            };
            tokio::select! {
                () = tokio::time::sleep_until(look_at.min(deadline)) => {}
                () = cancel.cancelled() => return false,
            }
        }
    }
}
