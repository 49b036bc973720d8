//! `terminal_exec`: type one command line into the session's shell, wait for its end, and
//! return what it printed and its exit status.
//!
//! Flow at a glance: the command is typed as the shell's integration says (`Typing`), its
//! output captured from its start mark to its end mark (`capture.rs`: head and tail,
//! shaped), and the call waits for the end mark, which the reader records as it reads
//! (`ingest.rs`), so no amount of output can evict or delay it. On pipes the command's
//! stderr is complete once its reader drained what the pipe held at the end mark.
//!
//! A timeout never ends the shell. `interrupt` sends Ctrl-C to the terminal (SIGINT to its
//! foreground group where the terminal makes no signal of Ctrl-C and the group is not
//! reading it; pipes: SIGINT to the processes the command started, a job an earlier one
//! left in the background spared, and to the shell a signal whose trap then ends the
//! command line, as Ctrl-C ends a terminal shell's: SIGURG when it waits for a program (the
//! line ends if the program died of the SIGINT), else SIGWINCH (at once); see
//! `interrupt_command`) and waits a moment for the prompt:
//! then the outcome is `timeout` with the status; if the program
//! keeps the terminal (less, vim, a REPL), it is `timeout` with `still_running`, the
//! foreground program and the screen. `keep` leaves the command running (`running`);
//! `continue: true` collects it later, however long it runs, across calls.

use std::sync::atomic::Ordering;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::install::{canonical_text, pipe_wrapper, probe_line, readline_text, terminal_wrapper};
use super::{Busy, Ended, Typing};
use crate::config::Mode;
use crate::errors::{ErrorCode, ToolError};
use crate::limits::{
    AWAIT_POLL, DRAIN_DEADLINE, EXEC_END_GRACE, EXEC_INTERRUPT_SETTLE, EXEC_PROMPT_GRACE,
    INTERRUPT_FOLLOW_EVERY, TERMINAL_INTERRUPTS,
};
use crate::output::{Kept, Omitted, Shape, Stream};
use crate::process::waiting::{self, InputWait};
use crate::process::{procfs, signal_group, signal_process};
use crate::session::Foreground;
use crate::session::Session;
use crate::session::capture::NO_SCREEN;
use crate::session::ingest::Control;
use crate::session::input::Typed;
use crate::session::state::{Snapshot, State};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTimeout {
    Interrupt,
    Keep,
}

pub struct ExecRequest {
    /// The command line, or `None` to go on waiting for the last one (`continue`).
    pub command: Option<String>,
    pub timeout: Duration,
    pub on_timeout: OnTimeout,
    /// Bytes of output returned: a quarter head, the rest tail.
    pub max_bytes: usize,
    pub strip_ansi: bool,
    /// On a terminal: the bytes as written rather than as a terminal leaves each line.
    pub raw: bool,
}

#[derive(Debug, Serialize)]
pub struct ExecResult {
    /// `completed`, `timeout`, `exited` (the shell ended), `running` (kept) or
    /// `awaiting_input` (on a terminal, the command's program waits for input).
    pub outcome: &'static str,
    pub output: String,
    /// Pipe sessions: the command's stderr. On a terminal it is part of `output`.
    pub stderr: Option<String>,
    /// What was left out between the head and the tail of `output` (and of `stderr`).
    pub omitted: Option<Omitted>,
    pub stderr_omitted: Option<Omitted>,
    /// Part of what was left out is no longer retained by the buffer either.
    pub truncated: bool,
    pub exit_code: Option<i32>,
    /// The command has not ended (a kept command, or a program that kept the terminal
    /// after the interrupt): collect it with `continue: true`.
    pub still_running: bool,
    /// The terminal's foreground program, while the command still runs.
    pub foreground: Option<Foreground>,
    /// The rendered screen, while the command still runs on a terminal.
    pub screen: Option<Vec<String>>,
    /// Where the command's output begins in the session's output, and where the call's
    /// output ends.
    pub start_cursor: u64,
    pub end_cursor: u64,
    pub session: Snapshot,
}

/// Bytes typed into a line-discipline shell before waiting for their echo (far below the
/// terminal's echo buffer).
const CANONICAL_PIECE_BYTES: usize = 512;

/// `text` in pieces of at most `max` bytes, cut at character boundaries.
fn pieces(text: &str, max: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = max.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (piece, tail) = rest.split_at(end.max(1));
        rest = tail;
        Some(piece)
    })
}

/// What the exec calls of one session keep between them.
#[derive(Default)]
pub struct Calls {
    /// The last call returned command `.0` waiting for input, its output and input as of
    /// `.1` (its last traffic): `continue` waits for something to happen after that.
    answered_waiting: Option<(u64, std::time::Instant)>,
}

/// How waiting for a command ended.
enum Waited {
    Ended,
    ShellEnded,
    /// On a terminal: the command's program waits for input.
    AwaitingInput,
    TimedOut,
}

/// The error for a command line typed while the last command, which a call left running
/// (`keep`, or a program waiting for input), has ended with no call having returned its
/// result: a new command would take its place, and its status would be lost.
fn uncollected(last: &super::Command) -> Option<ToolError> {
    let ended = last.ended.filter(|_| !last.collected)?;
    let mut text = last.text.replace('\n', " ");
    if text.chars().count() > 60 {
        text = text.chars().take(60).chain(['…']).collect();
    }
    let status = ended
        .status
        .map_or_else(|| "ended".to_owned(), |s| format!("ended with status {s}"));
    Some(ToolError::new(
        ErrorCode::SessionBusy,
        format!(
            "command {} (`{text}`) {status} after the call that started it returned, and its \
             result is not collected yet: nothing was run. Collect its output and status with \
             terminal_exec `continue: true`, then run this command",
            last.seq
        ),
    ))
}

/// Clock ticks a program has run for, at least, to be taken to have got a SIGINT sent to
/// it (see `interrupt_programs`).
const SETTLED_TICKS: u64 = 3;

/// On a terminal, clock ticks (50 ms) a program has run for, at least, to be taken to
/// have got a Ctrl-C and dealt with it as it meant to, ending well or not (see
/// `follow_terminal_interrupt`): a short program of a loop on a loaded machine can live
/// longer than `SETTLED_TICKS` and still lose a Ctrl-C that comes as it exits.
const TERMINAL_SETTLED_TICKS: u64 = 5;

/// What a timeout's interrupt on pipes has done so far (see `interrupt_programs`).
#[derive(Default)]
struct Interrupting {
    begun: bool,
    /// The processes sent SIGINT.
    signalled: Vec<i32>,
    /// Looks in a row that found the shell waiting for no program.
    unwaited: u8,
    /// The shell got SIGWINCH.
    winched: bool,
    /// A process still running was sent SIGINT: it took the interrupt, and what it then
    /// does (dies of it, or handles it and runs on) decides the line, as at a terminal.
    delivered: bool,
}

/// How a pipe shell's running command is collected or stopped.
const PIPE_BUSY: &str = "collect its result with terminal_exec `continue: true`; to stop \
    it, `continue: true` with `on_timeout: \"interrupt\"` interrupts it when that call times \
    out (SIGINT to its processes, and the shell ends the command line there, a loop it runs \
    itself included). Should it run on (a program that ignores SIGINT), terminal_signal \
    SIGTERM (or SIGKILL) with target \"command\" ends what the command started and spares \
    the shell. A command that removed the shell's WINCH and URG traps cannot be interrupted as a \
    whole: terminal_terminate ends it with the shell (then start a new session)";

/// A terminal shell whose stderr a command sent elsewhere.
const STDERR_AWAY: &str = "the shell's stderr no longer goes to the terminal (a command \
     sent it elsewhere: `exec 2>/dev/null`, `exec &>file`), and this shell prints its \
     prompt there, with the end of each command";
const PUT_STDERR_BACK: &str = "Put it back: terminal_write `exec 2>/dev/tty` and a newline, \
     then terminal_exec with `continue: true` (the command ends there); to keep a command's \
     errors out, redirect them in that command (`cmd 2>/dev/null`)";

impl Session {
    /// Run `request` in this session's shell (a `shell: "posix"` profile).
    pub async fn exec(
        &self,
        request: &ExecRequest,
        max_input_bytes: usize,
        cancel: &CancellationToken,
    ) -> Result<ExecResult, ToolError> {
        let Ok(mut calls) = self.exec.try_lock() else {
            return Err(ToolError::new(
                ErrorCode::SessionBusy,
                format!(
                    "another terminal_exec call is waiting on session {}; wait for its \
                     answer, or start another shell session to run commands in parallel. \
                     A call whose client gave up on it (a timeout of the client's own) \
                     still waits until its command ends or its `timeout_ms` passes, or, \
                     cancelled, a moment more: call again after that",
                    self.id
                ),
            ));
        };
        let deadline = Instant::now() + request.timeout;
        let seq = match &request.command {
            Some(command) => {
                self.type_command(command, request, max_input_bytes, deadline)
                    .await?
            }
            None => self.to_continue()?,
        };
        let watch_input = self.mode == Mode::Pty;
        // A program still waiting as it was when the last call said so (nothing written to
        // it, nothing printed since) is no news: `continue` waits for some.
        let unchanged_since = calls
            .answered_waiting
            .take()
            .filter(|(waiting, _)| request.command.is_none() && *waiting == seq)
            .map(|(_, traffic)| traffic);
        let waited = tokio::select! {
            waited = self.wait_command(seq, deadline, watch_input, unchanged_since) => waited,
            () = cancel.cancelled() => Waited::TimedOut,
        };
        // A command that ended as its time ran out may have printed its end mark to a
        // terminal, or be about to (the shell, back in its foreground, runs its prompt
        // hook): a Ctrl-C then would land at the prompt, setting the next command's `$?` to
        // 130 or cutting into its typing. A loop the shell runs itself waits that moment.
        // On pipes the end mark comes through a pipe of its own: a shell reading its input
        // again (which it never does while a command runs: the command's stdin is
        // /dev/null) has printed it.
        let waited = match waited {
            Waited::TimedOut => {
                let ending = match self.mode {
                    Mode::Pty => {
                        self.drain_reader(Stream::Stdout).await;
                        self.foreground()
                            .is_some_and(|f| f.pid == self.shell_group())
                    }
                    Mode::Pipe => self.shell_input_wait().is_some(),
                };
                if ending {
                    let grace = Instant::now() + EXEC_END_GRACE;
                    self.wait_until(grace, |s| command_ended(s, seq)).await;
                }
                if self.inspect(|s| command_ended(s, seq)) {
                    Waited::Ended
                } else {
                    Waited::TimedOut
                }
            }
            waited => waited,
        };
        // `continue` asked to interrupt at its timeout (it keeps by default): a program
        // still waiting for input then is interrupted too, as one still running would be.
        let waited = match (waited, request.on_timeout) {
            (Waited::AwaitingInput, OnTimeout::Interrupt)
                if request.command.is_none() && Instant::now() >= deadline =>
            {
                Waited::TimedOut
            }
            (waited, _) => waited,
        };
        match (waited, request.on_timeout) {
            (Waited::Ended, _) => Ok(self.result(seq, "completed").await),
            (Waited::AwaitingInput, _) => match self.cancel_unfinished(seq, request).await {
                Some(unfinished) => Err(unfinished),
                None if self.prompt_sent_away() => Err(ToolError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "{STDERR_AWAY}: this command's end cannot be seen (nor whether it \
                         reads input of its own: answer that first), and later ones would \
                         wait to their timeout. {PUT_STDERR_BACK}"
                    ),
                )),
                None => {
                    calls.answered_waiting = Some((seq, self.inspect(|s| s.last_traffic())));
                    Ok(self.result(seq, "awaiting_input").await)
                }
            },
            (Waited::ShellEnded, _) => {
                // The readers end the captures at EOF.
                let settle = Instant::now() + DRAIN_DEADLINE * 2;
                self.wait_until(settle, State::settled).await;
                Ok(self.result(seq, "exited").await)
            }
            (Waited::TimedOut, OnTimeout::Keep) => Ok(self.result(seq, "running").await),
            (Waited::TimedOut, OnTimeout::Interrupt) => {
                let settle = Instant::now() + EXEC_INTERRUPT_SETTLE;
                let took = self.interrupt_command(seq, settle).await;
                self.wait_command(seq, settle, false, None).await;
                // On pipes a command that ended by itself as the interrupt came (no program
                // took it, and the shell's trap did not end the line: its status is not
                // 130) completed.
                let own_end = self
                    .inspect(|s| command_end(s, seq))
                    .is_some_and(|e| e.status != Some(130));
                let outcome = match self.mode {
                    Mode::Pipe if !took && own_end => "completed",
                    _ => "timeout",
                };
                Ok(self.result(seq, outcome).await)
            }
        }
    }

    /// Check that `command` can be typed now, arm the capture of its output and type it;
    /// its sequence number.
    async fn type_command(
        &self,
        command: &str,
        request: &ExecRequest,
        max_input_bytes: usize,
        deadline: Instant,
    ) -> Result<u64, ToolError> {
        if command.len() > max_input_bytes {
            return Err(ToolError::new(
                ErrorCode::InputTooLarge,
                format!(
                    "command is {} bytes, over the limit of {max_input_bytes}; nothing was \
                     run: write a script file and run that instead",
                    command.len()
                ),
            ));
        }
        if command.contains('\0') {
            return Err(ToolError::invalid_argument(
                "command",
                "must not contain NUL",
            ));
        }
        // A terminal shell answers its integration within moments of starting.
        self.wait_until(deadline, |s| {
            s.status().is_final()
                || !s
                    .shell()
                    .is_some_and(|t| matches!(t.busy(), Some(Busy::Installing)))
        })
        .await;
        if self.status().is_final() {
            return Err(self.not_running());
        }
        let shape = match (self.mode, request.raw, request.strip_ansi) {
            (Mode::Pty, false, _) => Shape::Render,
            (_, _, true) => Shape::Strip,
            (Mode::Pty, true, false) | (Mode::Pipe, _, false) => Shape::Raw,
        };
        let busy_now = |s: &State| s.shell().and_then(|t| t.busy());
        if matches!(self.inspect(busy_now), Some(Busy::Foreground))
            && self
                .foreground()
                .is_some_and(|f| f.pid == self.shell_group())
        {
            // The shell itself is in the foreground after a line typed some other way: its
            // next prompt's mark may still be on its way to the reader. Let it arrive.
            self.drain_reader(Stream::Stdout).await;
            let grace = deadline.min(Instant::now() + EXEC_PROMPT_GRACE);
            self.wait_until(grace, |s| !matches!(busy_now(s), Some(Busy::Foreground)))
                .await;
        }
        let typed_at_prompt = |s: &State| {
            s.shell().is_some_and(|t| {
                t.typed_since_submit() && matches!(t.busy(), None | Some(Busy::Continuing))
            })
        };
        if self.mode == Mode::Pty && self.inspect(typed_at_prompt) {
            // At a prompt after lines typed some other way, the shell may still be reading
            // the last of them (one left open shows its continuation prompt once read), or
            // taking a Ctrl-C that cancels a line left open. Once the shell waits for input,
            // it has printed its marks; let them arrive.
            let grace = deadline.min(Instant::now() + EXEC_PROMPT_GRACE);
            while self.waiting().awaiting_input == Some(false) && Instant::now() < grace {
                tokio::time::sleep(AWAIT_POLL).await;
            }
            self.drain_reader(Stream::Stdout).await;
        }
        let (busy, uncollected, typing, nonce) = self.inspect(|s| {
            let shell = s.shell();
            (
                busy_now(s),
                shell.and_then(|t| t.current()).and_then(uncollected),
                shell.and_then(|t| t.typing()),
                shell.map(|t| t.nonce.clone()).unwrap_or_default(),
            )
        });
        if let Some(busy) = busy {
            return Err(self.busy(busy));
        }
        if let Some(uncollected) = uncollected {
            return Err(uncollected);
        }
        let typing = typing.unwrap_or(Typing::Wrapper);
        // Rendered output wraps at the terminal's width, and may go back up its rows.
        let screen = self.terminal().map_or(NO_SCREEN, |t| {
            let (rows, cols) = t.size();
            (usize::from(rows), usize::from(cols))
        });
        // Armed before anything waits on the shell: what a capture is armed for counts as
        // read, so with `on_full: "pause"` output not yet read (a background job's) never
        // holds back the prompt, a mark or the command's start (output before the command
        // counts as read, as this call's `end_cursor` would count it).
        {
            let mut captures = self.captures();
            captures.arm(Stream::Stdout, (shape, screen), request.max_bytes, false);
            if self.mode == Mode::Pipe {
                captures.arm(Stream::Stderr, (shape, screen), request.max_bytes, false);
            }
        }
        if self.inspect(State::paused) {
            self.acknowledge(self.inspect(|s| s.output().end()));
        }
        if let Err(e) = self.until_ready(typing, &nonce, deadline).await {
            let mut captures = self.captures();
            captures.end(Stream::Stdout);
            captures.end(Stream::Stderr);
            return Err(e);
        }
        // The history (the live view, the snapshot) keeps no secret value.
        let kept = self.redact_typed(command);
        if self.mode == Mode::Pipe {
            let before = procfs::last_pid().unwrap_or(0);
            self.pids_before_command.store(before, Ordering::Relaxed);
        }
        // Text written to a shell on pipes since its last command may have replaced it
        // (`exec bash`): the wrapper then sets up the shell it finds, when it must. So
        // does the first, should the setup written as the shell started have gone astray.
        let written = self.inspect(|s| {
            s.shell()
                .is_some_and(|t| t.written_since_submit() || t.first_command())
        });
        let seq = self.update(|s| s.shell_submit(&kept));
        let typed = match (typing, self.mode) {
            (Typing::Readline, _) => {
                let text = readline_text(command);
                self.type_as(&text, command).await
            }
            (Typing::Canonical, _) => self.type_canonical(command, deadline).await,
            (Typing::Wrapper, Mode::Pipe) => {
                let mut text = String::new();
                // What was written before and not ended is a line of its own (it runs
                // before the command, outside its output).
                if self.inspect(|s| s.input().partial_line()) {
                    text.push('\n');
                }
                text.push_str(&pipe_wrapper(command, &nonce, written));
                self.type_as(text.as_bytes(), command).await
            }
            (Typing::Wrapper, Mode::Pty) => {
                let kill = self.terminal().map(|t| t.line_controls().kill);
                let mut text = Vec::from_iter(kill.filter(|_| self.partial_line()));
                text.extend_from_slice(terminal_wrapper(command, &nonce).as_bytes());
                self.type_as(&text, command).await
            }
        };
        if let Err(e) = typed {
            // Never typed whole: it will not end by itself.
            self.update(|s| s.shell_abandon(seq));
            // A shell that died as the command went in closed its input with it: that
            // is the answer, not the closed input.
            if e.code == ErrorCode::StdinClosed
                && self
                    .wait_final(
                        EXEC_PROMPT_GRACE.min(deadline.saturating_duration_since(Instant::now())),
                    )
                    .await
            {
                return Err(self.not_running());
            }
            return Err(e);
        }
        Ok(seq)
    }

    /// Wait until the shell reads commands, and check that nothing else would take the
    /// command.
    async fn until_ready(
        &self,
        typing: Typing,
        nonce: &str,
        deadline: Instant,
    ) -> Result<(), ToolError> {
        self.until_ready_to_type(deadline).await?;
        // A shell reading lines prints its prompt after the end mark (bash prints the mark
        // from its prompt hook, then its prompt): a command typed before would be echoed
        // before that prompt, which would land in its output. Typed once the shell reads.
        if typing == Typing::Canonical {
            let until = deadline.min(Instant::now() + EXEC_PROMPT_GRACE);
            while !self.shell_reads_its_input() && Instant::now() < until {
                tokio::time::sleep(AWAIT_POLL).await;
            }
        }
        // What runs right after the end mark (a program of the user's PROMPT_COMMAND) has a
        // moment to finish; a line typed ahead runs for longer.
        if let Some(why) = self
            .elsewhere_after(deadline.min(Instant::now() + EXEC_PROMPT_GRACE))
            .await
        {
            return Err(ToolError::new(
                ErrorCode::SessionBusy,
                format!(
                    "{why}: wait for its prompt (terminal_wait with `until_input: true`), or \
                     send C-c with terminal_keys, before running a command"
                ),
            ));
        }
        // Text written to a shell on pipes may have left a command line open (a quote, a
        // here-document): the wrapper would go into it, and pieces of it run as commands.
        // Sent only once the shell is seen to read commands.
        if self.mode == Mode::Pipe
            && self.inspect(|s| s.shell().is_some_and(|t| t.written_since_submit()))
        {
            self.probe(nonce, deadline).await?;
        }
        Ok(())
    }

    /// Between a command's end and its next prompt, readline has not set the terminal up
    /// for itself yet: a paste then would meet the line discipline's line limit, and a
    /// program of the prompt hook that reads the terminal would take it. Readline says it
    /// reads by switching bracketed paste on. One that no longer does (`TERM=dumb` set
    /// since, its variable turned off) is seen waiting for a key as readline waits (in
    /// `pselect6` without a timeout, where bash's `read` builtin reads, or selects with its
    /// `-t`), with the line discipline's line handling off, everything printed before
    /// taken: its paste key still works. Nothing is typed into a shell that does not come
    /// to that within the call's time (a hook still running, line editing turned off with
    /// `set +o emacs`, where a paste would run as garbled lines).
    async fn until_ready_to_type(&self, deadline: Instant) -> Result<(), ToolError> {
        let ready =
            |s: &State| s.status().is_final() || s.shell().is_none_or(|t| t.ready_to_type());
        let began = Instant::now();
        // Since when the shell was seen reading its terminal a line at a time.
        let mut reading_lines: Option<Instant> = None;
        loop {
            if self
                .wait_until(deadline.min(Instant::now() + AWAIT_POLL), ready)
                .await
            {
                return Ok(());
            }
            // A bash whose line editing was turned off reads whole lines from then on (as
            // does a hook's `read` that waits for ever): said at once, not at the timeout.
            let wait = self.shell_input_wait();
            let by_lines = wait == Some(InputWait::Otherwise)
                && self.terminal().is_some_and(|t| t.reads_whole_lines());
            reading_lines = reading_lines
                .filter(|_| by_lines)
                .or(by_lines.then(Instant::now));
            let stuck = reading_lines.is_some_and(|since| since.elapsed() >= EXEC_PROMPT_GRACE);
            if stuck || Instant::now() >= deadline {
                return Err(ToolError::new(
                    ErrorCode::SessionBusy,
                    format!(
                        "the shell did not come back to reading commands with its line editor \
                         {}, so the command was not typed: its prompt command may still be \
                         running or waiting (see terminal_screen), or line editing was turned \
                         off (`set +o emacs`), which commands cannot be typed into. Try again, \
                         or terminate the session and start a new shell",
                        if stuck {
                            "(it reads whole lines from its terminal)".to_owned()
                        } else {
                            format!("within this call's {} ms", (deadline - began).as_millis())
                        }
                    ),
                ));
            }
            if wait != Some(InputWait::ForAKey) {
                continue;
            }
            // Bounded: a reader held by unread output would answer only once read on.
            let _ = tokio::time::timeout_at(deadline, self.drain_reader(Stream::Stdout)).await;
            if self.inspect(ready) || self.terminal().is_some_and(|t| !t.reads_whole_lines()) {
                return Ok(());
            }
        }
    }

    fn partial_line(&self) -> bool {
        self.inspect(|s| s.input().partial_line())
    }

    /// Send the probe line, and wait a moment for the shell to run it.
    async fn probe(&self, nonce: &str, deadline: Instant) -> Result<(), ToolError> {
        let probes = |s: &State| s.shell().map_or(0, |t| t.probes());
        let before = self.inspect(probes);
        let never = CancellationToken::new();
        let capture = self.update(State::shell_probing);
        self.send_as(
            probe_line(nonce, capture).as_bytes(),
            false,
            &never,
            Typed::Unrecorded,
        )
        .await?;
        let until = deadline.min(Instant::now() + EXEC_PROMPT_GRACE);
        if self
            .wait_until(until, |s| probes(s) > before || s.status().is_final())
            .await
        {
            if self.inspect(|s| s.shell().is_some_and(|t| t.probes() > before)) {
                return Ok(());
            }
            // Where nothing but a pattern or a word may follow (`case x in`, `for i in a
            // b`), any line is a syntax error, which ends a shell on pipes.
            let ended = self.not_running();
            return Err(ToolError::new(
                ErrorCode::SessionNotRunning,
                format!(
                    "the shell ended after what was written to it with terminal_write: that \
                     text ended it, or left a command line unfinished where the next line, \
                     sent to see whether the shell reads commands, was a syntax error (after \
                     `case WORD in`, or `for NAME in WORDS` without its `do`), at which a \
                     shell on pipes ends. Nothing of this command ran. {}",
                    ended.message
                ),
            ));
        }
        Err(ToolError::new(
            ErrorCode::SessionBusy,
            "the shell has not run what was written to it with terminal_write: it still runs \
             it, or that text left a command line unfinished (an open quote or here-document, \
             a line ending in `|`, `&&` or `\\`, an `if` without its `fi`), and the shell waits \
             for its end. Nothing of this command ran. Wait and call again, or finish that \
             line with terminal_write (the closing quote or word and a newline), or end the \
             session with terminal_terminate",
        ))
    }

    async fn type_as(&self, bytes: &[u8], command: &str) -> Result<(), ToolError> {
        let never = CancellationToken::new();
        self.send_as(bytes, false, &never, Typed::Command(command))
            .await
            .map(drop)
    }

    /// Type into a shell that reads from the line discipline: the line being typed is
    /// killed, then the command goes in as typed. The command's output starts where the
    /// terminal's echo of it ends; with the echo off (a program turned it off), the echo
    /// the terminal would have shown is written into the output in its place. A terminal
    /// drops echo it has no room for, so a long command is typed a piece at a time, each
    /// once the terminal has echoed the one before.
    async fn type_canonical(&self, command: &str, deadline: Instant) -> Result<(), ToolError> {
        // The terminal is gone once the shell has ended. The shell reads lines through the
        // line discipline: what a crashed program left (raw mode) is set back first.
        let terminal = self.terminal().map(|t| {
            t.restore_line_handling();
            (t.line_controls().kill, t.echoes())
        });
        let Some((kill, echoes)) = terminal else {
            return Err(self.not_running());
        };
        let never = CancellationToken::new();
        if self.partial_line() {
            self.send(&[kill], false, &never).await?;
        }
        let text = canonical_text(command);
        let echo = text.replace('\n', "\r\n");
        if !echoes {
            if !self
                .ask_reader(Stream::Stdout, |done| Control::Inject(echo, done))
                .await
            {
                return Err(self.not_running());
            }
            return self.type_as(text.as_bytes(), command).await;
        }
        if !self
            .ask_reader(Stream::Stdout, |done| Control::Expect(echo, done))
            .await
        {
            return Err(self.not_running());
        }
        let ended = |s: &State| {
            s.status().is_final()
                || s.shell()
                    .and_then(|t| t.current())
                    .is_some_and(|c| c.ended.is_some())
        };
        let mut echoed = 0;
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        for (asked, line) in lines.iter().enumerate() {
            if asked > 0 {
                // The shell's prompt for the next line (its continuation mark), written
                // while the terminal still echoed it, could land inside the echo (between
                // the bytes of a character): the line is typed once the shell asked for
                // it, or a moment later should the line before have ended the command.
                let grace = deadline.min(Instant::now() + EXEC_PROMPT_GRACE);
                self.wait_until(grace, |s| {
                    ended(s)
                        || s.shell()
                            .and_then(|t| t.current())
                            .is_some_and(|c| c.continued >= asked)
                })
                .await;
                // Ended by a line before (a syntax error in it): the rest is not typed,
                // or the shell would run it as commands of their own.
                if self.inspect(ended) {
                    break;
                }
            }
            for piece in pieces(line, CANONICAL_PIECE_BYTES) {
                self.send_as(piece.as_bytes(), false, &never, Typed::Unrecorded)
                    .await?;
                echoed +=
                    piece.chars().filter(|c| *c != '\t').count() + piece.matches('\n').count();
                self.wait_until(deadline, |s| {
                    self.echo_seen.load(Ordering::SeqCst) >= echoed || ended(s)
                })
                .await;
            }
        }
        self.record_command(command).await;
        Ok(())
    }

    /// The command `continue: true` waits for; when its result was already returned, the
    /// error says how it ended and where its output is, for a client whose answer was lost
    /// (a connection that dropped as the command ran).
    fn to_continue(&self) -> Result<u64, ToolError> {
        let current = self.inspect(|s| {
            s.shell()
                .and_then(|t| t.current())
                .map(|c| (c.seq, c.collected, c.ended, c.output_start()))
        });
        match current {
            Some((seq, false, _, _)) => Ok(seq),
            // Why and when it ended, rather than advice to run a command it cannot run.
            _ if self.status().is_final() => Err(self.not_running()),
            Some((_, true, Some(ended), start)) => {
                let status = ended
                    .status
                    .map_or_else(|| "no status".to_owned(), |s| format!("exit code {s}"));
                let message = format!(
                    "has no command to wait for: the last command's result was already \
                     returned. It ended with {status}, its output from cursor {start} to {} \
                     (terminal_read from {start}, should that answer have been lost); pass \
                     `command` to run another",
                    ended.cursor
                );
                Err(ToolError::invalid_argument("continue", message)
                    .with("exit_code", ended.status)
                    .with("start_cursor", start)
                    .with("end_cursor", ended.cursor))
            }
            Some((_, true, None, _)) | None => Err(ToolError::invalid_argument(
                "continue",
                "has no command to wait for: the last command's result was already returned \
                 (or none was run); pass `command` to run one",
            )),
        }
    }

    /// Wait until command `seq` ended, the shell ended, or `deadline`; with `watch_input`,
    /// also until the command, once started, waits for input (looked at once the output is
    /// quiet, then at most every `AWAIT_POLL` while it stays quiet), but, with
    /// `unchanged_since`, not while no output or input went by since then: it waits as
    /// before until then, and says so at `deadline` if it still does.
    async fn wait_command(
        &self,
        seq: u64,
        deadline: Instant,
        watch_input: bool,
        unchanged_since: Option<std::time::Instant>,
    ) -> Waited {
        let mut changes = self.changed.subscribe();
        let unchanged =
            |s: &Self| unchanged_since.is_some_and(|at| s.inspect(|s| s.last_traffic()) <= at);
        loop {
            let (ended, started, shell_ended) = self.inspect(|s| {
                let command = s.shell().and_then(|t| t.current()).filter(|c| c.seq == seq);
                (
                    command_ended(s, seq),
                    command.is_some_and(|c| c.started.is_some()),
                    s.status().is_final(),
                )
            });
            if ended {
                return Waited::Ended;
            }
            if shell_ended {
                return Waited::ShellEnded;
            }
            let now = Instant::now();
            if now >= deadline {
                if watch_input && unchanged(self) && self.awaiting_confirmed().await == Some(true) {
                    return Waited::AwaitingInput;
                }
                return Waited::TimedOut;
            }
            let look_at = if watch_input && started {
                let quiet = Instant::from_std(self.quiet_at());
                if unchanged(self) {
                    // Output, input or the command's end wakes this; a program that stopped
                    // waiting in silence is looked at by the deadline.
                    None
                } else if now < quiet {
                    Some(quiet)
                } else if self.awaiting_confirmed().await == Some(true) {
                    // The shell back at its prompt reads the terminal too: the command may
                    // have ended meanwhile (its end mark taken by the confirming drain).
                    if self.inspect(|s| {
                        s.shell()
                            .and_then(|t| t.current())
                            .is_some_and(|c| c.seq == seq && c.ended.is_some())
                    }) {
                        return Waited::Ended;
                    }
                    return Waited::AwaitingInput;
                } else {
                    Some(now + AWAIT_POLL)
                }
            } else {
                None
            };
            tokio::select! {
                _ = changes.changed() => {}
                () = crate::session::sleep_until(look_at) => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// A terminal shell that waits, at its prompt for more, for the rest of the command line
    /// it was given (an unclosed quote, `if` without `fi`, a here-document without its end):
    /// bash with readline prints the start mark only once it has read a whole command, and
    /// its continuation mark only once it has run the whole commands of a pasted line and
    /// asks for more; a shell reading lines (dash) printed its continuation mark as many
    /// times as lines were typed (a whole command of N lines asks for N - 1 more). The line
    /// is cancelled with Ctrl-C, which takes the shell back to its prompt as it was, and the
    /// error says what to fix, and where the output of the lines bash ran before the
    /// unfinished one is. None when the shell runs the command (a `read`), or the line did
    /// not end at the interrupt (then the command waits for input as it is).
    async fn cancel_unfinished(&self, seq: u64, request: &ExecRequest) -> Option<ToolError> {
        let typed_lines = request
            .command
            .as_deref()
            .map(|c| canonical_text(c).matches('\n').count());
        // Whether some lines of it ran first (then where their output begins and ends).
        let ran_first = self.inspect(|s| {
            let shell = s.shell()?;
            let command = shell.current().filter(|c| c.seq == seq)?;
            match shell.typing()? {
                Typing::Readline if !command.run_by_shell() => Some(None),
                Typing::Readline => command
                    .continued_at
                    .map(|asked| Some((command.output_start(), asked))),
                Typing::Canonical if typed_lines.is_some_and(|n| command.continued >= n) => {
                    Some(None)
                }
                _ => None,
            }
        })?;
        let shell = self.shell_group();
        if self.terminal()?.foreground() != Some(shell) {
            return None;
        }
        self.interrupt().await;
        let settle = Instant::now() + EXEC_INTERRUPT_SETTLE;
        if !matches!(
            self.wait_command(seq, settle, false, None).await,
            Waited::Ended
        ) {
            return None;
        }
        // Its result is settled: nothing is left to collect.
        drop(self.result(seq, "completed").await);
        const CAUSES: &str = "a quote left open (an apostrophe inside '...' is written \
             '\\''), a `(`, `{`, `if`, `case`, `for` or `while` without its end, a \
             here-document without its end line, or a trailing `\\`";
        let Some((from, to)) = ran_first else {
            return Some(
                ToolError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "the shell read this command line as unfinished and waited for the \
                         rest of it, so it ran nothing: {CAUSES}. The line was cancelled \
                         with Ctrl-C, and the shell is back at its prompt, its state as it \
                         was: fix the command and run it again"
                    ),
                )
                .with("parameter", "command"),
            );
        };
        Some(
            ToolError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "the shell ran the first lines of this command, then read the rest as \
                     unfinished and waited for the rest of it: {CAUSES}. The wait was \
                     cancelled with Ctrl-C and the shell is back at its prompt, with what \
                     the lines that ran changed (cd, variables, files); their output is in \
                     terminal_read from cursor {from} to {to}. Fix the unfinished part and \
                     run only what has not run yet",
                ),
            )
            .with("parameter", "command")
            .with("start_cursor", from)
            .with("end_cursor", to),
        )
    }

    /// A shell that prints the end of each command with its prompt (dash: bash prints it
    /// from its prompt hook straight to the terminal, and puts its stderr back there), in
    /// the foreground, its stderr sent elsewhere, and reading its own input (a
    /// `read 2>/dev/null`, whose redirection dash applies to itself, is not that).
    fn prompt_sent_away(&self) -> bool {
        self.shell_stderr_elsewhere()
            && self.shell_reads_its_input()
            && !procfs::program(self.shell_group()).is_some_and(|name| name.starts_with("bash"))
    }

    /// Ctrl-C for the command: the terminal's interrupt character, or on pipes SIGINT to
    /// every process of the shell's session but the shell, which gets a signal first whose
    /// trap then ends the command line.
    async fn interrupt(&self) {
        match self.mode {
            Mode::Pty => {
                // The terminal is gone once the shell has ended.
                let Some(terminal) = self.terminal() else {
                    return;
                };
                // Where a program left the terminal without signal keys (stty raw, -isig,
                // intr undef), Ctrl-C is a plain byte: a program that is not reading the
                // terminal (the shell itself, running a loop of its own, included) would
                // never see it, so it gets the signal Ctrl-C sends.
                if !terminal.interrupts()
                    && let Some(group) = terminal.foreground()
                    && self.reading_input() == Some(false)
                {
                    signal_group(group, Signal::SIGINT);
                    return;
                }
                let interrupt = terminal.line_controls().flushing[0];
                let never = CancellationToken::new();
                let _ = self.send(&[interrupt], false, &never).await;
            }
            Mode::Pipe => {
                self.interrupt_programs(Interrupting::default()).await;
            }
        }
    }

    /// Ctrl-C for command `seq`, as `interrupt`; on pipes followed until the command ends
    /// or `settle` passes, while no program has taken the SIGINT: one that had ended by
    /// itself as it went out (the last of a loop of short programs) never got it, and the
    /// line's next program, which at a terminal would have been in the foreground group,
    /// is interrupted in its place.
    /// Whether it reached the command: on a terminal, always taken so; on pipes, whether a
    /// program of it that had been running took the SIGINT (a loop of the shell's own that
    /// SIGWINCH ended ends with 130, which says so).
    pub(in crate::session) async fn interrupt_command(&self, seq: u64, settle: Instant) -> bool {
        if self.mode == Mode::Pty {
            let first = self.terminal().and_then(|t| t.foreground());
            let took = first.is_some_and(|group| self.takes_interrupts(group));
            self.interrupt().await;
            if !took {
                self.follow_terminal_interrupt(seq, first, settle).await;
            }
            return true;
        }
        let mut interrupting = Interrupting::default();
        loop {
            interrupting = self.interrupt_programs(interrupting).await;
            let ended = self.inspect(|s| {
                s.shell()
                    .and_then(|t| t.current())
                    .is_none_or(|c| c.seq != seq || c.ended.is_some())
            });
            if ended || interrupting.delivered || Instant::now() + INTERRUPT_FOLLOW_EVERY >= settle
            {
                return interrupting.delivered;
            }
            tokio::time::sleep(INTERRUPT_FOLLOW_EVERY).await;
        }
    }

    /// On a terminal: Ctrl-C again whenever another program of command `seq` has taken the
    /// foreground since the last one, until one that has run 50 ms gets it, the command
    /// ends or `settle` passes. bash loses a Ctrl-C that comes as it starts a program (the
    /// new program still has the shell's handler, and then exits as if nothing came), or
    /// as a program exits, so a loop of short programs goes on with the next; the
    /// interrupt follows it, as a user presses Ctrl-C again. A program that has run 50 ms
    /// takes it, whatever it then does: one that catches it and ends well leaves the rest
    /// of the line to run, as after one Ctrl-C at a terminal (`pytest; cleanup`), and one
    /// that runs on (a REPL, a pager) keeps its group. The shell itself (which may be
    /// running its prompt hook) is never sent one again.
    async fn follow_terminal_interrupt(&self, seq: u64, mut last: Option<i32>, settle: Instant) {
        let shell = self.shell_group();
        let mut sent = 1;
        while sent < TERMINAL_INTERRUPTS {
            let until = settle.min(Instant::now() + INTERRUPT_FOLLOW_EVERY);
            let ended = |s: &State| {
                s.status().is_final()
                    || s.shell()
                        .and_then(|t| t.current())
                        .is_none_or(|c| c.seq != seq || c.ended.is_some())
            };
            if self.wait_until(until, ended).await || Instant::now() >= settle {
                return;
            }
            let Some(now) = self.terminal().and_then(|t| t.foreground()) else {
                return;
            };
            // Not while the new group's program is still the shell's child before its exec,
            // which would lose it as the first did: it is looked at again.
            if Some(now) != last && now != shell && self.programs(now, 0) {
                let took = self.takes_interrupts(now);
                self.interrupt().await;
                if took {
                    return;
                }
                last = Some(now);
                sent += 1;
            }
        }
    }

    /// Whether a program of process group `group` (not the shell's) takes a Ctrl-C sent
    /// now: one of its processes runs, has for `TERMINAL_SETTLED_TICKS`, and is a program of
    /// its own
    /// (a child the shell forked runs the shell's handler until its exec, and a loaded
    /// machine may keep it there that long). Any member counts: the first of a pipeline
    /// may have ended.
    fn takes_interrupts(&self, group: i32) -> bool {
        group != self.shell_group() && self.programs(group, TERMINAL_SETTLED_TICKS)
    }

    /// Whether a process of group `group` runs a program of its own (not the shell's child
    /// before its exec, which runs the shell's handler: its command line is still the
    /// shell's) and has for `ticks` at least.
    fn programs(&self, group: i32, ticks: u64) -> bool {
        let shell = procfs::cmdline(self.shell_group());
        let now = procfs::ticks_since_boot(Duration::ZERO).unwrap_or(0);
        waiting::group_members(&self.leader_files, group)
            .iter()
            .any(|member| {
                procfs::stat(member.pid)
                    .is_some_and(|s| !matches!(s.state, 'Z' | 'X') && s.started + ticks <= now)
                    && procfs::cmdline(member.pid).is_some_and(|line| Some(&line) != shell.as_ref())
            })
    }

    /// On pipes: SIGINT to the processes the running command started (a job an earlier
    /// command left in the background is spared, as by `terminal_signal`) not signalled
    /// yet, and first a signal to the shell whose trap ends the command line. Waiting for a
    /// program, the shell gets SIGURG, whose trap ends the line if the program died of the
    /// SIGINT, as a terminal shell does: one that survives it (or dies of another signal
    /// later) leaves the line running. Otherwise (a loop of its own, with no program to
    /// signal) SIGWINCH, whose trap ends it at once. A shell without the traps ignores
    /// both, where SIGINT would end it.
    ///
    /// Followed up (while no program has taken a SIGINT), the shell is signalled again
    /// only with a program not signalled yet, or, once, with SIGWINCH when twice in a row
    /// it waited for none: the line runs between its programs, where Ctrl-C at a terminal
    /// would have stopped the shell itself. (Once is not enough to tell: a shell that
    /// SIGURG woke from its wait is out of it a moment.)
    async fn interrupt_programs(&self, mut interrupting: Interrupting) -> Interrupting {
        let shell = self.pid;
        // Nothing once the command has ended: what runs in the session now is not its.
        let Some(start) = self.command_start() else {
            return interrupting;
        };
        tokio::task::spawn_blocking(move || {
            let first = !interrupting.begun;
            interrupting.begun = true;
            let fresh: Vec<i32> = start
                .members(shell)
                .into_iter()
                .filter(|pid| !interrupting.signalled.contains(pid))
                .collect();
            // The shell first, so its trap is pending when the program it waits for ends.
            let waits = waiting::waits_for_a_child(shell);
            interrupting.unwaited = if waits { 0 } else { interrupting.unwaited + 1 };
            let trap = if waits {
                Signal::SIGURG
            } else {
                Signal::SIGWINCH
            };
            let between = interrupting.unwaited >= 2 && !interrupting.winched;
            if first || (!fresh.is_empty() && waits) || between {
                signal_process(shell, trap);
                interrupting.winched |= trap == Signal::SIGWINCH;
            }
            // One that runs, and has for a few ticks, takes it (whatever it then does). One
            // that ended (a zombie, or gone) never will, nor, most likely, one started a
            // moment ago: a short program's whole life is a tick or two, and a SIGINT that
            // comes as it exits is lost.
            let now = procfs::ticks_since_boot(Duration::ZERO).unwrap_or(0);
            for pid in fresh {
                let took = procfs::stat(pid).is_some_and(|s| {
                    !matches!(s.state, 'Z' | 'X') && s.started + SETTLED_TICKS <= now
                });
                signal_process(pid, Signal::SIGINT);
                interrupting.delivered |= took;
                interrupting.signalled.push(pid);
            }
            interrupting
        })
        .await
        .unwrap_or_default()
    }

    /// The result for command `seq` as it stands.
    async fn result(&self, seq: u64, outcome: &'static str) -> ExecResult {
        let command = self.inspect(|s| {
            s.shell()
                .and_then(|t| t.current())
                .filter(|c| c.seq == seq)
                .cloned()
        });
        let ended = command.as_ref().and_then(|c| c.ended);
        if ended.is_some() && self.mode == Mode::Pipe {
            // What the command wrote to stderr is in its pipe by now.
            self.drain_reader(Stream::Stderr).await;
            self.captures().end(Stream::Stderr);
        } else if self.mode == Mode::Pipe {
            // Still running: what it has written so far is in its pipes, read first.
            self.drain_reader(Stream::Stdout).await;
            self.drain_reader(Stream::Stderr).await;
        }
        let base = self.inspect(|s| s.output().base());
        let (output, stderr) = {
            let mut captures = self.captures();
            let stderr = (self.mode == Mode::Pipe).then(|| captures.kept(Stream::Stderr, base));
            (captures.kept(Stream::Stdout, base), stderr)
        };
        let still_running = ended.is_none() && !self.status().is_final();
        let (foreground, screen) = if still_running {
            (self.foreground(), self.screen_lines().await)
        } else {
            (None, None)
        };
        let finished = ended.is_some() || !still_running;
        if finished {
            self.update(|s| s.shell_collected(seq));
        }
        let exit_code = match (ended, outcome) {
            (Some(ended), _) => ended.status,
            (None, "exited") => self.snapshot().exit_code,
            (None, _) => None,
        };
        let end = self.inspect(|s| s.output().end());
        let start_cursor = command.as_ref().map_or(end, |c| c.output_start());
        // On pipes the call's output ends after the stderr drained above.
        let end_cursor = match (ended, self.mode) {
            (Some(e), Mode::Pipe) => e.cursor.max(end),
            (Some(e), Mode::Pty) => e.cursor,
            (None, _) => end,
        };
        self.acknowledge(end_cursor);
        let lost = |kept: &Kept| kept.omitted.is_some_and(|o| o.start_cursor < base);
        ExecResult {
            outcome,
            truncated: lost(&output) || stderr.as_ref().is_some_and(lost),
            omitted: output.omitted,
            stderr_omitted: stderr.as_ref().and_then(|k| k.omitted),
            output: output.text,
            stderr: stderr.map(|k| k.text),
            exit_code,
            still_running,
            foreground,
            screen,
            start_cursor,
            end_cursor,
            session: self.snapshot(),
        }
    }

    /// The screen's lines, without the empty ones at its bottom.
    async fn screen_lines(&self) -> Option<Vec<String>> {
        let mut lines = self.screen(0).await.ok()?.lines;
        while lines.last().is_some_and(|l| l.trim().is_empty()) {
            lines.pop();
        }
        Some(lines)
    }

    /// The error for a pipe shell's client writing while a command runs: the command's
    /// stdin is /dev/null, so the shell would read what is written as its next command line.
    pub(in crate::session) fn typed_ahead(seq: u64) -> ToolError {
        ToolError::new(
            ErrorCode::SessionBusy,
            format!(
                "command {seq} is running in this shell with its stdin from /dev/null: \
                 nothing written now reaches it, and the shell would run it as its next \
                 command line, so nothing was written. {PIPE_BUSY}"
            ),
        )
    }

    /// Why the terminal shell is elsewhere (`shell_elsewhere`), still at `until`; looked at
    /// every `AWAIT_POLL` meanwhile (what it reads from is the kernel's, not an event).
    async fn elsewhere_after(&self, until: Instant) -> Option<String> {
        loop {
            let why = self
                .shell_elsewhere()
                .or_else(|| self.running_typed_line())?;
            if Instant::now() >= until || self.status().is_final() {
                return Some(why);
            }
            tokio::time::sleep(AWAIT_POLL).await;
        }
    }

    /// After a line was typed some other way since the last command (an answer with a
    /// line too many, a line typed ahead): unless the shell is blocked reading its terminal,
    /// it may have read that line and not yet started what it runs (so neither the
    /// terminal's queue nor its foreground shows it). Not known here: not held against it.
    fn running_typed_line(&self) -> Option<String> {
        let typed = self.inspect(|s| s.shell().is_some_and(|t| t.typed_since_submit()));
        (typed && self.waiting().awaiting_input == Some(false)).then(|| {
            "the shell is running a line typed with terminal_write or terminal_keys".to_owned()
        })
    }

    /// The error for a shell that cannot take a command now.
    fn busy(&self, busy: Busy) -> ToolError {
        let message = match busy {
            Busy::Installing => "the shell is still starting (its integration has not \
                                 answered yet); try again in a moment"
                .to_owned(),
            Busy::Command(seq) if self.mode == Mode::Pty => {
                // The shell itself waiting for input: a `read`, or its prompt after a
                // command that removed the integration, which no mark will ever end.
                let shell = self.shell_group();
                let hint = match self.foreground() {
                    Some(f) if f.pid == shell && self.prompt_sent_away() => {
                        &format!(". If the command ran, {STDERR_AWAY}. {PUT_STDERR_BACK}")
                    }
                    Some(f) if f.pid == shell && self.waiting().awaiting_input == Some(true) => {
                        ". If the screen shows the shell's prompt, the command removed the \
                         shell's integration (`unset PROMPT_COMMAND`, `exec bash`, dash's \
                         `PS1=`) and no command will end again: terminate the session and \
                         start a new shell"
                    }
                    _ => "",
                };
                format!(
                    "command {seq} is still running in this shell: collect its result with \
                     `continue: true`; answer it with terminal_keys or terminal_write, or \
                     interrupt it (terminal_keys [\"C-c\"]; a REPL or an editor takes that \
                     as a key: quit it as it is quit, such as C-d, `exit()` or `:q`), then \
                     collect it with `continue: true` before the next command{hint}"
                )
            }
            Busy::Command(seq) => {
                format!("command {seq} is still running in this shell: {PIPE_BUSY}")
            }
            Busy::Continuing => "a line typed with terminal_write or terminal_keys left a \
                                 command line unfinished (an open quote or here-document, a \
                                 line ending in `|`, `&&` or `\\`, an `if` without its `fi`): \
                                 the shell shows its continuation prompt and would read this \
                                 command as the rest of that line, so nothing of it was typed. \
                                 Finish that line with terminal_write (the closing quote or word \
                                 and a newline), or cancel it with terminal_keys [\"C-c\"], then \
                                 run the command again"
                .to_owned(),
            Busy::Foreground => {
                let program = self
                    .foreground()
                    .and_then(|f| f.name)
                    .map_or_else(String::new, |name| format!(" (`{name}`)"));
                format!(
                    "a program started with terminal_write or terminal_keys runs in the \
                     shell's foreground{program}; finish it (answer it, or send C-c with \
                     terminal_keys) before running a command"
                )
            }
        };
        ToolError::new(ErrorCode::SessionBusy, message)
    }
}
/// How command `seq` ended, if it is the shell's current one and has.
fn command_end(s: &State, seq: u64) -> Option<Ended> {
    s.shell()?.current().filter(|c| c.seq == seq)?.ended
}

/// Whether command `seq` is the shell's current one and has ended.
fn command_ended(s: &State, seq: u64) -> bool {
    command_end(s, seq).is_some()
}
