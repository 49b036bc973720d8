//! A session's mutable state and the snapshot clients see of it.

use std::time::{Instant, SystemTime};

use serde::Serialize;

use super::input::Input;
use crate::config::Mode;
use crate::output::{OutputBuffer, Screen, Stream};
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

pub struct State {
    pub status: Status,
    pub exit: Option<Exit>,
    /// Set when the controller starts ending the session; `Natural` when it ended alone.
    pub reason: Option<Reason>,
    pub input: Input,
    pub output: OutputBuffer,
    /// Output streams whose reader has not reached EOF yet.
    pub open_streams: u8,
    pub output_complete: bool,
    pub output_incomplete: bool,
    pub last_activity: SystemTime,
    /// When output last entered the buffer (or the session started): idle waits count
    /// from here.
    pub last_output: Instant,
    /// When the session became final; its retention period counts from here.
    pub final_at: Option<Instant>,
    /// The rendered terminal of a PTY session.
    pub screen: Option<Screen>,
    /// `on_full: "pause"`: output at or after `acknowledged` is never evicted; a reader
    /// holds what does not fit (and stops reading the child) until a client reads on.
    pub pause: bool,
    /// The highest `next_cursor` a read or wait returned (the cursors a client has seen).
    pub acknowledged: u64,
    /// Per stream: its reader holds output that does not fit, so the child is held in its
    /// `write`.
    pub holding: [bool; 2],
    /// The record is gone (forgotten or expired): held output is dropped.
    pub discarded: bool,
}

impl State {
    pub fn new(input: Input, output: OutputBuffer, open_streams: u8) -> Self {
        State {
            status: Status::Running,
            exit: None,
            reason: None,
            input,
            output,
            open_streams,
            output_complete: false,
            output_incomplete: false,
            last_activity: SystemTime::now(),
            last_output: Instant::now(),
            final_at: None,
            screen: None,
            pause: false,
            acknowledged: 0,
            holding: [false; 2],
            discarded: false,
        }
    }

    /// Put a reader's decoded `text` into the buffer: all of it (evicting the oldest
    /// output), or with `pause` the part that fits without evicting unacknowledged output.
    /// Returns the bytes taken.
    pub fn store(&mut self, stream: Stream, text: &str) -> usize {
        let taken = if self.pause {
            self.output.append_within(stream, text, self.acknowledged)
        } else {
            self.output.append(stream, text);
            text.len()
        };
        self.holding[stream as usize] = taken < text.len();
        self.last_activity = SystemTime::now();
        if taken > 0 {
            self.last_output = Instant::now();
        }
        taken
    }

    /// Some reader holds output back (`on_full: "pause"`).
    pub fn paused(&self) -> bool {
        self.holding.contains(&true)
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
        self.final_at = Some(Instant::now());
        self.last_activity = SystemTime::now();
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
}

pub struct Identity<'a> {
    pub session_id: &'a str,
    pub command_id: &'a str,
    pub mode: Mode,
    pub pid: i32,
    pub created_at: SystemTime,
}

pub fn snapshot(id: &Identity, s: &State) -> Snapshot {
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
    }
}

/// RFC 3339, UTC, milliseconds.
pub fn timestamp(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}
