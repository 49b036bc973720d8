//! A session's mutable state, the named operations that change it, and the snapshot clients
//! see of it.
//!
//! Everything here runs under the session's state lock (`Session::update`/`inspect`), so
//! every operation is small: O(1), or bounded by what one output read brings (`store`
//! copies a read's text into the buffer). No I/O, no emulator, no scan of the buffer.

use std::time::{Instant, SystemTime};

use serde::Serialize;

use super::input::Input;
use super::shell::Track;
use super::shell::scan::Mark;
use crate::config::Mode;
use crate::output::{OutputBuffer, Stream};
use crate::process::Exit;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    Running,
    Terminating,
    Exited,
    Terminated,
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "RUNNING",
            Status::Terminating => "TERMINATING",
            Status::Exited => "EXITED",
            Status::Terminated => "TERMINATED",
            Status::Failed => "FAILED",
        }
    }

    pub fn is_final(self) -> bool {
        match self {
            Status::Running | Status::Terminating => false,
            Status::Exited | Status::Terminated | Status::Failed => true,
        }
    }
}

/// Why a session ended (or is ending).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    Natural,
    User,
    Timeout,
    Shutdown,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Natural => "natural",
            Reason::User => "user",
            Reason::Timeout => "timeout",
            Reason::Shutdown => "shutdown",
        }
    }
}

/// What storing a piece of output did.
pub struct Stored {
    /// The cursor of its first code point.
    pub start: u64,
    /// Bytes taken (all of them, unless `on_full: "pause"` holds the rest).
    pub taken: usize,
}

pub struct State {
    status: Status,
    exit: Option<Exit>,
    /// Set when the controller starts ending the session; `Natural` when it ended alone.
    reason: Option<Reason>,
    /// Why the controller ended it, in words, for errors about the final session.
    why: Option<String>,
    /// When the session became final; its retention period counts from here.
    final_at: Option<(Instant, SystemTime)>,
    /// Changed only by the write operations in `input.rs`.
    pub(super) input: Input,
    output: OutputBuffer,
    /// Output streams whose reader has not reached EOF yet.
    open_streams: u8,
    output_complete: bool,
    output_incomplete: bool,
    last_activity: SystemTime,
    /// When output last entered the buffer (or the session started): idle waits count
    /// from here.
    last_output: Instant,
    /// When input was last written to the program.
    last_input: Instant,
    /// `on_full: "pause"`: output at or after `acknowledged` is never evicted; a reader
    /// holds what does not fit (and stops reading the child) until a client reads on.
    pause: bool,
    /// The highest `next_cursor` a read or wait returned (the cursors a client has seen).
    acknowledged: u64,
    /// Per stream: its reader holds output that does not fit, so the child is held in its
    /// `write`.
    holding: [bool; 2],
    /// The record is gone (forgotten or expired): held output is dropped.
    discarded: bool,
    /// A shell profile's shell.
    shell: Option<Track>,
    /// When the machine's owner last typed into the session from the live view.
    owner_input_at: Option<SystemTime>,
}

impl State {
    pub fn new(input: Input, output: OutputBuffer, open_streams: u8) -> Self {
        State {
            status: Status::Running,
            exit: None,
            reason: None,
            why: None,
            final_at: None,
            input,
            output,
            open_streams,
            output_complete: false,
            output_incomplete: false,
            last_activity: SystemTime::now(),
            last_output: Instant::now(),
            last_input: Instant::now(),
            pause: false,
            acknowledged: 0,
            holding: [false; 2],
            discarded: false,
            shell: None,
            owner_input_at: None,
        }
    }

    pub fn with_pause(mut self, pause: bool) -> Self {
        self.pause = pause;
        self
    }

    pub fn with_shell(mut self, shell: Option<Track>) -> Self {
        self.shell = shell;
        self
    }

    // What may be looked at.

    pub fn status(&self) -> Status {
        self.status
    }

    pub fn output(&self) -> &OutputBuffer {
        &self.output
    }

    pub fn input(&self) -> &Input {
        &self.input
    }

    pub fn shell(&self) -> Option<&Track> {
        self.shell.as_ref()
    }

    pub fn open_streams(&self) -> u8 {
        self.open_streams
    }

    /// Final, and its output complete or declared incomplete: nothing will change.
    pub fn settled(&self) -> bool {
        self.status.is_final() && (self.output_complete || self.output_incomplete)
    }

    /// `(output_complete, output_incomplete)`.
    pub fn settled_flags(&self) -> (bool, bool) {
        (self.output_complete, self.output_incomplete)
    }

    /// Its output is complete or declared incomplete.
    pub fn output_ended(&self) -> bool {
        self.output_complete || self.output_incomplete
    }

    pub fn last_output(&self) -> Instant {
        self.last_output
    }

    /// When output or input last went by: a program that was just answered, or is still
    /// answering, is not waiting yet.
    pub fn last_traffic(&self) -> Instant {
        self.last_output.max(self.last_input)
    }

    pub fn acknowledged(&self) -> u64 {
        self.acknowledged
    }

    pub fn pause(&self) -> bool {
        self.pause
    }

    pub fn discarded(&self) -> bool {
        self.discarded
    }

    /// Some reader holds output back (`on_full: "pause"`).
    pub fn paused(&self) -> bool {
        self.holding.contains(&true)
    }

    pub fn final_since(&self) -> Option<Instant> {
        self.final_at.map(|(at, _)| at)
    }

    /// When the session became final, by the clock.
    pub fn ended_at(&self) -> Option<SystemTime> {
        self.final_at.map(|(_, at)| at)
    }

    /// Why the controller ended the session, in words, when it said.
    pub fn why(&self) -> Option<&str> {
        self.why.as_deref()
    }

    /// Why and when the session ended (or that it is ending), for errors about it.
    pub fn ending(&self) -> String {
        let how = match self.exit {
            Some(Exit::Code(code)) => format!("exit status {code}"),
            Some(Exit::Signal(signal)) => format!("signal {}", signal.as_str()),
            None => "no exit status".to_owned(),
        };
        let why = match (self.reason, &self.why) {
            (Some(reason), Some(why)) => format!("reason {}: {why}", reason.as_str()),
            (Some(reason), None) => format!("reason {}", reason.as_str()),
            (None, _) => "the controller lost track of it".to_owned(),
        };
        match self.final_at {
            Some((_, at)) => format!(
                "it ended at {} ({}; {why}, {how})",
                timestamp(at),
                self.status.as_str()
            ),
            None => format!("it is ending ({why})"),
        }
    }

    // The operations.

    /// Put a reader's decoded `text` into the buffer: all of it (evicting the oldest
    /// output), or with `pause` the part that fits without evicting unacknowledged output.
    /// `consumed`: the text counts as read at once (a capture takes it).
    pub fn store(&mut self, stream: Stream, text: &str, consumed: bool) -> Stored {
        let start = self.output.end();
        let taken = if self.pause {
            self.output.append_within(stream, text, self.acknowledged)
        } else {
            self.output.append(stream, text);
            text.len()
        };
        if consumed {
            self.acknowledged = self.acknowledged.max(self.output.end());
        }
        self.holding[stream as usize] = taken < text.len();
        self.last_activity = SystemTime::now();
        if taken > 0 {
            self.last_output = Instant::now();
        }
        Stored { start, taken }
    }

    /// Records below `cursor` have been seen by a client.
    pub fn acknowledge(&mut self, cursor: u64) {
        self.acknowledged = self.acknowledged.max(cursor);
    }

    /// The record is gone: a reader holding output drops it.
    pub fn discard(&mut self) {
        self.discarded = true;
    }

    /// A reader dropped what it held (the record was discarded).
    pub fn stop_holding(&mut self, stream: Stream) {
        self.holding[stream as usize] = false;
    }

    /// A reader reached EOF.
    pub fn reader_ended(&mut self) {
        self.open_streams = self.open_streams.saturating_sub(1);
    }

    /// The output is settled: complete, or incomplete after the drain deadline.
    pub fn output_settled(&mut self, complete: bool) {
        self.output_complete = complete;
        self.output_incomplete = !complete;
    }

    /// Stdin is closed (by the end of the session).
    pub fn close_input(&mut self) {
        self.input.close();
    }

    /// A tool call used the session.
    pub fn touched(&mut self) {
        self.last_activity = SystemTime::now();
    }

    /// Input was written to the program.
    pub fn wrote(&mut self) {
        self.touched();
        self.last_input = Instant::now();
    }

    /// The owner typed into the program from the live view.
    pub fn owner_wrote(&mut self) {
        self.wrote();
        self.owner_input_at = Some(SystemTime::now());
    }

    /// The controller starts ending a running session, for `reason` (and `why`, in words);
    /// false if it is already ending or final.
    pub fn begin_ending(&mut self, reason: Reason, why: Option<String>) -> bool {
        if self.status != Status::Running {
            return false;
        }
        self.status = Status::Terminating;
        self.reason = Some(reason);
        self.why = why;
        true
    }

    /// The leader ended with `exit`: final, `TERMINATED` when the controller ended it.
    pub fn exited(&mut self, exit: Exit) {
        self.exit = Some(exit);
        let status = if self.reason.is_some() {
            Status::Terminated
        } else {
            Status::Exited
        };
        self.finish(status);
    }

    /// Enter a final status (once; later calls keep the first).
    pub fn finish(&mut self, status: Status) {
        if self.status.is_final() {
            return;
        }
        self.status = status;
        if status != Status::Failed {
            self.reason.get_or_insert(Reason::Natural);
        }
        let now = SystemTime::now();
        self.final_at = Some((Instant::now(), now));
        self.last_activity = now;
    }

    /// A mark of the shell integration was found at `at`.
    pub fn shell_mark(&mut self, mark: &Mark, at: u64) {
        if let Some(shell) = self.shell.as_mut() {
            shell.mark(mark, at);
        }
    }

    /// Text was written to the shell some other way (`terminal_write`).
    pub fn shell_wrote(&mut self) {
        if let Some(shell) = self.shell.as_mut() {
            shell.wrote();
        }
    }

    /// A probe line is being sent to a shell on pipes: whether it is to keep `$?`.
    pub fn shell_probing(&mut self) -> bool {
        self.shell.as_mut().is_some_and(|shell| shell.probing())
    }

    /// The open command's output begins where the shell's echo of it ended, not at its
    /// start mark.
    pub fn shell_keep_start(&mut self) {
        if let Some(shell) = self.shell.as_mut() {
            shell.keep_start();
        }
    }

    /// A pipe shell's start mark on stderr was found at `at`.
    pub fn shell_stderr_start(&mut self, at: u64) {
        if let Some(shell) = self.shell.as_mut() {
            shell.stderr_start(at);
        }
    }

    /// `terminal_exec` types `text` now; its sequence number.
    pub fn shell_submit(&mut self, text: &str) -> u64 {
        let at = self.output.end();
        self.shell
            .as_mut()
            .map_or(0, |shell| shell.submit(text, at))
    }

    pub fn shell_abandon(&mut self, seq: u64) {
        let at = self.output.end();
        if let Some(shell) = self.shell.as_mut() {
            shell.abandon(seq, at);
        }
    }

    pub fn shell_typed_line(&mut self, seen_before: (u64, u64)) {
        if let Some(shell) = self.shell.as_mut() {
            shell.typed_line(seen_before);
        }
    }

    /// The shell's end marks and continuation prompts seen so far (none for a session
    /// without a shell).
    pub fn shell_seen(&self) -> (u64, u64) {
        self.shell.as_ref().map_or((0, 0), |shell| shell.seen())
    }

    pub fn shell_collected(&mut self, seq: u64) {
        if let Some(shell) = self.shell.as_mut() {
            shell.collected(seq);
        }
    }

    pub fn shell_give_up_install(&mut self) {
        if let Some(shell) = self.shell.as_mut() {
            shell.give_up_install();
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    pub session_id: String,
    pub command_id: String,
    pub mode: &'static str,
    pub process_id: i32,
    pub status: Status,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<&'static str>,
    pub termination_reason: Option<Reason>,
    pub stdin_closed: bool,
    pub input_uncertain: bool,
    pub base_cursor: u64,
    pub next_cursor: u64,
    pub created_at: String,
    pub last_activity_at: String,
    pub output_complete: bool,
    pub output_incomplete: bool,
    pub paused: bool,
    /// PTY: canonical mode with echo off (a password prompt); always false on pipes.
    pub input_hidden: bool,
    /// File name of the session's asciicast recording in `recordings_dir`.
    pub recording: Option<String>,
    /// Its foreground program waits for input (null: it cannot be known here).
    pub awaiting_input: Option<bool>,
    /// The program in its foreground (a terminal's foreground group leader; on pipes the
    /// session's leader); null once it ended.
    pub foreground: Option<super::Foreground>,
    /// When the machine's owner last typed into the session from the live view (null:
    /// never); what the owner's keys caused is ordinary output.
    pub owner_input_at: Option<String>,
}

pub struct Names<'a> {
    pub session_id: &'a str,
    pub command_id: &'a str,
    pub mode: Mode,
    pub pid: i32,
    pub created_at: SystemTime,
}

pub fn snapshot(id: &Names, s: &State) -> Snapshot {
    let (exit_code, exit_signal) = match s.exit {
        Some(Exit::Code(code)) => (Some(code), None),
        Some(Exit::Signal(signal)) => (None, Some(signal.as_str())),
        None => (None, None),
    };
    Snapshot {
        session_id: id.session_id.to_owned(),
        command_id: id.command_id.to_owned(),
        mode: id.mode.as_str(),
        process_id: id.pid,
        status: s.status,
        exit_code,
        exit_signal,
        termination_reason: s.reason,
        stdin_closed: s.input.is_closed(),
        input_uncertain: s.input.is_uncertain(),
        base_cursor: s.output.base(),
        next_cursor: s.output.end(),
        created_at: timestamp(id.created_at),
        last_activity_at: timestamp(s.last_activity),
        output_complete: s.output_complete,
        output_incomplete: s.output_incomplete,
        paused: s.paused(),
        input_hidden: false,
        recording: None,
        awaiting_input: None,
        foreground: None,
        owner_input_at: s.owner_input_at.map(timestamp),
    }
}

/// RFC 3339, UTC, milliseconds.
pub fn timestamp(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// A time as `timestamp` writes it.
pub fn serialize_time<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&timestamp(*t))
}
