//! The persistent shell of a `shell: "posix"` session: how it is integrated, what it is
//! doing, and how `terminal_exec` types a command into it and collects the result.
//!
//! Responsibilities:
//! - `install`: the integration typed once when a terminal shell starts (a random nonce,
//!   prompt hooks that print invisible marks), and the wrapper used where a shell has no
//!   hooks (pipes, and a terminal shell that did not take the integration).
//! - `scan`: finding the marks in the output as it is read, before anything is stored, so
//!   output can neither evict, delay nor forge the end of a command.
//! - `Track` (here): what the marks said, under the session's state lock: whether the shell
//!   is at its prompt, the command `terminal_exec` typed and where its output begins and
//!   ends, and a short history of the commands run.
//! - `exec`: the tool call: type a command, wait for its end or its timeout, interrupt or
//!   keep it, and return its output (head and tail, shaped) and exit status.

mod exec;
mod install;
pub mod scan;

use std::collections::VecDeque;
use std::time::SystemTime;

use serde::Serialize;

pub use exec::{Calls, ExecRequest, ExecResult, OnTimeout};
pub(super) use install::{install_line, new_nonce, pipe_prepare};
use scan::Mark;

/// How a command line reaches the shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Typing {
    /// A readline shell (interactive bash): the command is pasted (bracketed paste) and
    /// readline echoes it.
    Readline,
    /// A shell that reads lines from the terminal's line discipline (dash): the command is
    /// typed with the terminal's echo off and its echo written into the output in its place.
    Canonical,
    /// Pipes, or a shell that did not take the integration: the command runs inside a
    /// wrapper that prints the marks.
    Wrapper,
}

/// Commands remembered for the owner's view, and the bytes of each one's text kept once it
/// is no longer the current command.
const HISTORY: usize = 100;
const HISTORY_TEXT_BYTES: usize = 1024;

/// A command `terminal_exec` typed.
#[derive(Debug, Clone, Serialize)]
pub struct Command {
    pub seq: u64,
    pub text: String,
    /// The output's end when it was typed.
    pub submitted: u64,
    /// Where its output begins, once the shell started it.
    pub started: Option<u64>,
    /// `started` is where readline's echo ended; the shell's own start mark, which follows
    /// it (after readline's last carriage return), moves it.
    #[serde(skip)]
    started_at_echo_end: bool,
    /// On pipes: where its stderr begins (its start mark there), which may come before
    /// `started` in the session's output.
    #[serde(skip)]
    pub stderr_started: Option<u64>,
    /// A shell reading lines from the terminal asked for another line of it this many
    /// times (its `PS2`).
    #[serde(skip)]
    pub continued: usize,
    /// Where the shell first asked for another line of it.
    #[serde(skip)]
    pub continued_at: Option<u64>,
    pub ended: Option<Ended>,
    #[serde(serialize_with = "super::state::serialize_time")]
    pub began_at: SystemTime,
    /// An exec call returned its complete result.
    #[serde(skip)]
    pub collected: bool,
}

impl Command {
    /// The shell began to run it (its start mark came): it read the whole command line.
    pub fn run_by_shell(&self) -> bool {
        self.started.is_some() && !self.started_at_echo_end
    }

    /// Where its output begins in the session's output: on pipes, on whichever stream began
    /// first.
    pub fn output_start(&self) -> u64 {
        let started = self.started.unwrap_or(self.submitted);
        self.stderr_started.map_or(started, |at| at.min(started))
    }
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Ended {
    /// Where its output ends.
    pub cursor: u64,
    /// Its exit status, when the shell reported one.
    pub status: Option<i32>,
    #[serde(serialize_with = "super::state::serialize_time")]
    pub at: SystemTime,
}

/// What the session knows of its shell.
pub struct Track {
    pub nonce: String,
    /// `None` while the integration is being installed.
    typing: Option<Typing>,
    at_prompt: bool,
    /// End marks seen (one comes with every prompt).
    ends: u64,
    /// The shell has shown a prompt since it was integrated (before that it is starting).
    prompted: bool,
    /// A readline shell reads a line, its terminal set up for it (raw): typing before that
    /// meets the terminal's line discipline, which cuts a long line.
    reading: bool,
    /// A line was typed some other way (`terminal_write` with Enter) since the last command
    /// was submitted: one typed ahead may be the shell's next even after a prompt came.
    typed_since_submit: bool,
    /// On pipes: text was written to the shell some other way (`terminal_write`) since its
    /// last command was sent; it may have left a command line unfinished.
    written_since_submit: bool,
    /// On pipes: answers to the line that sees whether the shell reads commands.
    probes: u64,
    /// On pipes: text was written since the last probe line that keeps `$?` was sent.
    written_since_probe: bool,
    /// A line typed some other way left the command line unfinished: the shell shows its
    /// continuation prompt and reads the rest, until the next line is typed, the command
    /// starts or a prompt comes.
    continuing: bool,
    /// Continuation prompts seen for lines typed some other way.
    continuations: u64,
    /// Oldest first; the last one is the current command.
    commands: VecDeque<Command>,
    next_seq: u64,
}

/// What a mark changes in the capture of the current command's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureChange {
    Start,
    /// Start again from here (what was taken since the echo ended is not the command's).
    Restart,
    End,
}

/// Why a new command cannot be typed now.
pub enum Busy {
    /// The integration is still being installed (or the shell has not shown its first
    /// prompt since).
    Installing,
    /// The last command typed has not ended.
    Command(u64),
    /// A program started some other way (`terminal_write`) runs in the foreground.
    Foreground,
    /// A line typed some other way left the command line unfinished: the shell reads the
    /// rest of it at its continuation prompt, so a command typed now would be that rest.
    Continuing,
}

impl Track {
    /// A terminal shell, its integration about to be installed.
    pub fn installing(nonce: String) -> Self {
        Track {
            nonce,
            typing: None,
            at_prompt: false,
            ends: 0,
            prompted: false,
            reading: false,
            typed_since_submit: false,
            written_since_submit: false,
            written_since_probe: false,
            probes: 0,
            continuing: false,
            continuations: 0,
            commands: VecDeque::new(),
            next_seq: 1,
        }
    }

    /// A shell on pipes: always wrapped, and ready at once.
    pub fn wrapped(nonce: String) -> Self {
        Track {
            typing: Some(Typing::Wrapper),
            at_prompt: true,
            prompted: true,
            ..Track::installing(nonce)
        }
    }

    pub fn typing(&self) -> Option<Typing> {
        self.typing
    }

    /// Whether a command can be typed now without meeting a terminal set up for something
    /// else: a readline shell must be reading.
    pub fn ready_to_type(&self) -> bool {
        self.typing != Some(Typing::Readline) || self.reading
    }

    /// The integration was not installed in time: commands are wrapped from now on.
    pub fn give_up_install(&mut self) {
        if self.typing.is_none() {
            self.typing = Some(Typing::Wrapper);
            self.at_prompt = true;
            self.prompted = true;
        }
    }

    pub fn current(&self) -> Option<&Command> {
        self.commands.back()
    }

    /// The current command while it runs (its end not seen yet).
    pub fn running(&self) -> Option<&Command> {
        self.current().filter(|c| c.ended.is_none())
    }

    pub fn history(&self) -> impl Iterator<Item = &Command> {
        self.commands.iter()
    }

    /// Whether the shell itself reads what is typed now as its command line: at its
    /// prompt, or at the continuation prompt of a line typed some other way.
    pub fn reads_command_line(&self) -> bool {
        matches!(self.busy(), None | Some(Busy::Continuing))
    }

    /// Whether a new command can be typed now.
    pub fn busy(&self) -> Option<Busy> {
        if self.typing.is_none() || !self.prompted {
            return Some(Busy::Installing);
        }
        if let Some(c) = self.running() {
            return Some(Busy::Command(c.seq));
        }
        if self.continuing {
            return Some(Busy::Continuing);
        }
        (!self.at_prompt).then_some(Busy::Foreground)
    }

    /// End marks and continuation prompts seen so far: taken before a write, for
    /// `typed_line`.
    pub fn seen(&self) -> (u64, u64) {
        (self.ends, self.continuations)
    }

    /// A line was typed into a terminal shell some other way (`terminal_write` with Enter),
    /// `ends_before` end marks having been seen when the write began: at its prompt, the
    /// shell now runs it (or answers it with a new prompt). A prompt that came meanwhile (the
    /// line went to a program that has since ended, or was run at once) already says where
    /// the shell is.
    pub fn typed_line(&mut self, (ends_before, continuations_before): (u64, u64)) {
        if matches!(self.typing, Some(Typing::Readline | Typing::Canonical)) {
            self.typed_since_submit = true;
            // The line may end what was continued (dash marks no start): the shell says so
            // with its next continuation prompt if it still reads the command line, unless
            // that came already.
            if self.continuations == continuations_before {
                self.continuing = false;
            }
            if self.ends == ends_before {
                self.at_prompt = false;
            }
        }
    }

    /// Text was written to the shell some other way (`terminal_write`).
    pub fn wrote(&mut self) {
        if self.typing == Some(Typing::Wrapper) {
            self.written_since_submit = true;
            self.written_since_probe = true;
        }
    }

    /// A probe line is being sent: whether it is to keep `$?` (text was written since the
    /// last one that did; see `probe_line`).
    pub fn probing(&mut self) -> bool {
        std::mem::take(&mut self.written_since_probe)
    }

    /// Whether text was written to a shell on pipes since the last command was submitted.
    pub fn written_since_submit(&self) -> bool {
        self.written_since_submit
    }

    /// Whether no command was submitted yet.
    pub fn first_command(&self) -> bool {
        self.next_seq == 1
    }

    /// Answers to the probe line so far.
    pub fn probes(&self) -> u64 {
        self.probes
    }

    /// Whether a line was typed some other way since the last command was submitted.
    pub fn typed_since_submit(&self) -> bool {
        self.typed_since_submit
    }

    /// Note that `text` is being typed at cursor `at`; returns its sequence number.
    pub fn submit(&mut self, text: &str, at: u64) -> u64 {
        if let Some(last) = self.commands.back_mut() {
            shorten(&mut last.text);
        }
        if self.commands.len() == HISTORY {
            self.commands.pop_front();
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.reading = false;
        self.typed_since_submit = false;
        self.written_since_submit = false;
        self.written_since_probe = false;
        self.continuing = false;
        self.commands.push_back(Command {
            seq,
            text: text.to_owned(),
            submitted: at,
            started: None,
            started_at_echo_end: false,
            stderr_started: None,
            continued: 0,
            continued_at: None,
            ended: None,
            began_at: SystemTime::now(),
            collected: false,
        });
        self.at_prompt = false;
        seq
    }

    /// Command `seq` was not typed whole: it will never end by itself.
    pub fn abandon(&mut self, seq: u64, at: u64) {
        if let Some(c) = self.commands.back_mut().filter(|c| c.seq == seq) {
            c.ended.get_or_insert(Ended {
                cursor: at,
                status: None,
                at: SystemTime::now(),
            });
            c.collected = true;
        }
        self.at_prompt = true;
        // What was typed of it may be in the shell's input, a line left open.
        self.wrote();
    }

    /// The current command's complete result was returned.
    pub fn collected(&mut self, seq: u64) {
        if let Some(c) = self.commands.back_mut().filter(|c| c.seq == seq) {
            c.collected = true;
        }
    }

    /// The command waiting for its start or end mark, if any.
    fn open(&mut self) -> Option<&mut Command> {
        self.commands.back_mut().filter(|c| c.ended.is_none())
    }

    /// What `mark` would change in the current command's capture (decided before the mark
    /// is applied, so the capture is complete before anyone sees the command end).
    pub fn capture_change(&self, mark: &Mark) -> Option<CaptureChange> {
        let open = self.running()?;
        match mark {
            Mark::Start | Mark::InputEnd if open.started.is_none() => Some(CaptureChange::Start),
            Mark::Start if open.started_at_echo_end => Some(CaptureChange::Restart),
            Mark::End(_) => Some(CaptureChange::End),
            Mark::Start
            | Mark::InputEnd
            | Mark::InputReady
            | Mark::Installed { .. }
            | Mark::Continued
            | Mark::Probed => None,
        }
    }

    /// The open command's output begins where readline's echo of it ended: the shell
    /// printed something of its own there (a syntax error in an earlier line of it) before
    /// its start mark, which then moves nothing.
    pub fn keep_start(&mut self) {
        if let Some(command) = self.open() {
            command.started_at_echo_end = false;
        }
    }

    /// A pipe shell's start mark on stderr, found at cursor `at`.
    pub fn stderr_start(&mut self, at: u64) {
        if let Some(command) = self.open() {
            command.stderr_started.get_or_insert(at);
        }
    }

    /// Apply a mark found at cursor `at`.
    pub fn mark(&mut self, mark: &Mark, at: u64) {
        // readline prints its continuation prompt after it began reading.
        if *mark != Mark::Continued {
            self.reading = *mark == Mark::InputReady;
        }
        match mark {
            Mark::InputReady => {}
            Mark::Probed => self.probes += 1,
            Mark::Continued => match self.open() {
                Some(command) => {
                    command.continued += 1;
                    command.continued_at.get_or_insert(at);
                }
                None => {
                    self.continuing = true;
                    self.continuations += 1;
                }
            },
            // The prompt comes with the end mark that follows.
            Mark::Installed { typing, .. } => self.typing = Some(*typing),
            Mark::Start | Mark::InputEnd => match self.open() {
                Some(command) if command.started.is_none() => {
                    command.started = Some(at);
                    command.started_at_echo_end = *mark == Mark::InputEnd;
                }
                Some(command) if *mark == Mark::Start && command.started_at_echo_end => {
                    command.started = Some(at);
                    command.started_at_echo_end = false;
                }
                Some(_) => {}
                // A command line typed some other way started.
                None if *mark == Mark::Start => {
                    self.at_prompt = false;
                    self.continuing = false;
                }
                None => {}
            },
            Mark::End(status) => {
                if let Some(command) = self.open() {
                    command.started.get_or_insert(at);
                    command.ended = Some(Ended {
                        cursor: at,
                        status: *status,
                        at: SystemTime::now(),
                    });
                }
                self.at_prompt = true;
                self.continuing = false;
                self.ends += 1;
                self.prompted |= self.typing.is_some();
            }
        }
    }
}

/// Keep the start of a history entry's text.
fn shorten(text: &mut String) {
    if text.len() > HISTORY_TEXT_BYTES {
        let mut end = HISTORY_TEXT_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_runs_from_its_start_mark_to_its_end_mark() {
        let mut track = Track::installing("n".into());
        assert!(matches!(track.busy(), Some(Busy::Installing)));
        track.mark(
            &Mark::Installed {
                typing: Typing::Readline,
                shell: None,
            },
            0,
        );
        assert!(matches!(track.busy(), Some(Busy::Installing)));
        track.mark(&Mark::End(Some(0)), 0);
        assert!(track.busy().is_none());
        let seq = track.submit("echo hi", 10);
        assert!(matches!(track.busy(), Some(Busy::Command(s)) if s == seq));
        assert_eq!(
            track.capture_change(&Mark::InputEnd),
            Some(CaptureChange::Start)
        );
        track.mark(&Mark::InputEnd, 20);
        assert_eq!(
            track.capture_change(&Mark::Start),
            Some(CaptureChange::Restart)
        );
        track.mark(&Mark::Start, 22);
        assert_eq!(track.capture_change(&Mark::Start), None);
        assert_eq!(
            track.capture_change(&Mark::End(Some(3))),
            Some(CaptureChange::End)
        );
        track.mark(&Mark::End(Some(3)), 30);
        let command = track.current().unwrap();
        assert_eq!(command.started, Some(22));
        let ended = command.ended.unwrap();
        assert_eq!((ended.cursor, ended.status), (30, Some(3)));
        assert!(track.busy().is_none());
    }

    #[test]
    fn a_program_started_by_typing_keeps_the_shell_busy_until_the_prompt() {
        let mut track = Track::wrapped("n".into());
        track.mark(&Mark::Start, 5);
        assert!(matches!(track.busy(), Some(Busy::Foreground)));
        assert_eq!(track.capture_change(&Mark::End(Some(0))), None);
        track.mark(&Mark::End(Some(0)), 9);
        assert!(track.busy().is_none());
        assert!(track.current().is_none());
    }

    /// A terminal shell integrated with `typing`, at its first prompt.
    fn prompted(typing: Typing) -> Track {
        let mut track = Track::installing("n".into());
        track.mark(
            &Mark::Installed {
                typing,
                shell: None,
            },
            0,
        );
        track.mark(&Mark::End(Some(0)), 0);
        track
    }

    #[test]
    fn a_typed_line_left_open_reads_the_command_line_until_the_next_line_or_prompt() {
        let mut track = prompted(Typing::Canonical);
        // `if true; then` typed: the shell runs nothing yet and shows its `> ` prompt.
        let before = track.seen();
        track.typed_line(before);
        assert!(!track.reads_command_line());
        track.mark(&Mark::Continued, 3);
        assert!(track.reads_command_line());
        assert!(matches!(track.busy(), Some(Busy::Continuing)));
        // `read v; fi` typed: the command runs (dash marks no start), its `read` asks.
        let before = track.seen();
        track.typed_line(before);
        assert!(!track.reads_command_line());
        // A line whose continuation prompt was seen before the write was noted still
        // leaves the shell reading its command line.
        track.mark(&Mark::End(Some(0)), 9);
        let before = track.seen();
        track.mark(&Mark::Continued, 12);
        track.typed_line(before);
        assert!(track.reads_command_line());
        // Its prompt ends it.
        track.mark(&Mark::End(Some(0)), 15);
        assert!(track.busy().is_none());
        let before = track.seen();
        track.typed_line(before);
        assert!(!track.reads_command_line());
    }

    #[test]
    fn a_line_typed_before_the_prompt_it_caused_leaves_the_shell_at_its_prompt() {
        let mut track = prompted(Typing::Readline);
        // A line is typed at the prompt; the shell's next prompt is seen before the write
        // is noted (a command that ran at once): the shell is at its prompt.
        let before = track.seen();
        track.mark(&Mark::End(Some(0)), 5);
        track.typed_line(before);
        assert!(track.busy().is_none());
        // Noted before any prompt came: the shell runs the line until its next prompt.
        let before = track.seen();
        track.typed_line(before);
        assert!(matches!(track.busy(), Some(Busy::Foreground)));
        track.mark(&Mark::End(Some(0)), 9);
        assert!(track.busy().is_none());
        // Either way a line was typed since the last command: until the next one.
        assert!(track.typed_since_submit());
        track.submit("true", 10);
        assert!(!track.typed_since_submit());
    }

    #[test]
    fn history_is_bounded_and_older_texts_are_shortened() {
        let mut track = Track::wrapped("n".into());
        let long = "x".repeat(5000);
        for i in 0..(HISTORY as u64 + 5) {
            track.submit(&long, i);
            track.mark(&Mark::End(Some(0)), i);
        }
        assert_eq!(track.history().count(), HISTORY);
        assert_eq!(track.current().unwrap().text.len(), 5000);
        assert!(track.history().next().unwrap().text.len() < 1100);
    }
}
