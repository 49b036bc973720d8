//! A session's input side: one state says whether it takes input (open, closed, uncertain)
//! and where written bytes go (a pipe or a terminal), and the write that keeps it true.
//!
//! Semantics of a failed write:
//! - pipe, not drained within `WRITE_DRAIN_TIMEOUT`: stdin is closed, `INPUT_BACKPRESSURE`;
//! - terminal, not taken within that time: that write fails with `INPUT_BACKPRESSURE` (what
//!   was taken stays typed) and the terminal stays open, so keys such as `C-c` still work;
//! - cancelled by the client after the first byte went out: stdin is closed and uncertain;
//!   cancelled before: nothing happened, the input is as it was;
//! - the pipe or terminal refused the bytes (the reader is gone): stdin is closed.

use std::sync::Arc;

use tokio::net::unix::pipe;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Session;
use super::shell::{Busy, Typing};
use super::sink::Feed;
use crate::config::Mode;
use crate::errors::{ErrorCode, ToolError};
use crate::limits::{EXEC_TYPING_TIMEOUT, TERMINAL_LINE_MAX_BYTES, WRITE_DRAIN_TIMEOUT};
use crate::process::{LineControls, PtyMaster, WholeLine};

/// Whether a session takes input, and where it goes. `partial_line`: what was written ends
/// in the middle of a line (on a terminal: its line discipline may hold typed text not yet
/// sent to the program, and ending input then takes two EOF characters).
pub enum Input {
    Pipe {
        pipe: Arc<pipe::Sender>,
        partial_line: bool,
    },
    Pty {
        master: Arc<PtyMaster>,
        partial_line: bool,
    },
    /// By `close_stdin` on a pipe, the process closing its end, a failed write, or the end
    /// of the session.
    Closed,
    /// A write was cancelled after it began: what the process received is unknown, and
    /// stdin is closed.
    Uncertain,
}

impl Input {
    pub fn pipe(pipe: Arc<pipe::Sender>) -> Self {
        Input::Pipe {
            pipe,
            partial_line: false,
        }
    }

    pub fn pty(master: Arc<PtyMaster>) -> Self {
        Input::Pty {
            master,
            partial_line: false,
        }
    }

    pub fn is_closed(&self) -> bool {
        match self {
            Input::Pipe { .. } | Input::Pty { .. } => false,
            Input::Closed | Input::Uncertain => true,
        }
    }

    /// What was written ends in the middle of a line.
    pub fn partial_line(&self) -> bool {
        match self {
            Input::Pipe { partial_line, .. } | Input::Pty { partial_line, .. } => *partial_line,
            Input::Closed | Input::Uncertain => false,
        }
    }

    pub fn is_uncertain(&self) -> bool {
        matches!(self, Input::Uncertain)
    }

    /// Close it (an uncertain input stays uncertain).
    pub fn close(&mut self) {
        if !self.is_uncertain() {
            *self = Input::Closed;
        }
    }

    fn check(&self) -> Result<(), ToolError> {
        match self {
            Input::Pipe { .. } | Input::Pty { .. } => Ok(()),
            Input::Closed => Err(stdin_closed()),
            Input::Uncertain => Err(uncertain()),
        }
    }
}

/// What a write types, as its recording shows it.
#[derive(Clone, Copy)]
pub(super) enum Typed<'a> {
    /// Text or keys: recorded as they are.
    Input,
    /// What `terminal_exec` types for this command line: recorded as the command line and
    /// Enter, as a person would have typed it. The shell takes it at once, so it may take
    /// longer than other input to drain.
    Command(&'a str),
    /// The value of this secret: recorded by name only.
    Secret(&'a str),
    /// Not recorded: the shell integration (the session shows nothing of it), or a piece
    /// of a command recorded whole once it is typed (`record_command`).
    Unrecorded,
    /// A one-shot run's stdin: recorded as text or keys are; the program has until this
    /// deadline (the run's own) to take it, since a program may read its input only once
    /// it has started up.
    Run(Instant),
}

/// Where one write goes, taken out of the state so that no lock is held while it waits.
enum Sink {
    Pipe(Arc<pipe::Sender>),
    Pty(Arc<PtyMaster>),
}

impl Sink {
    /// Write some of `bytes`, waiting until the other end takes input.
    async fn write(&self, bytes: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Pipe(pipe) => loop {
                pipe.writable().await?;
                match pipe.try_write(bytes) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    result => return result,
                }
            },
            Sink::Pty(master) => master.write(bytes).await,
        }
    }

    /// Write all of `bytes`, counting in `written` what went out so far.
    async fn write_all(&self, bytes: &[u8], written: &mut usize) -> std::io::Result<()> {
        while *written < bytes.len() {
            *written += self.write(&bytes[*written..]).await?;
        }
        Ok(())
    }
}

/// Whether the line discipline holds part of a line after `bytes` were typed, starting
/// from `partial`. Counts the characters of the line being typed; erring towards "partial"
/// where the discipline's editing cannot be followed (word erase), because an extra EOF at
/// the start of a line is harmless after the input ended, and a missing one is not.
fn typed_partial_line(partial: bool, bytes: &[u8], controls: &LineControls) -> bool {
    let mut pending = usize::from(partial);
    for &b in bytes {
        let ends_line = [b'\n', b'\r', controls.eof, controls.kill].contains(&b);
        if ends_line || controls.flushing.contains(&b) {
            pending = 0;
        } else if b == controls.erase {
            pending = pending.saturating_sub(1);
        } else if b & 0xc0 != 0x80 {
            // Each character once: UTF-8 continuation bytes do not start one (IUTF8).
            pending += 1;
        }
    }
    pending > 0
}

impl Session {
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
        // A terminal reading lines drops what is typed past this much of a line: the
        // program would read a cut line, and nothing would say so.
        let longest = text.split(['\n', '\r']).map(str::len).max().unwrap_or(0);
        if longest >= TERMINAL_LINE_MAX_BYTES && self.terminal().is_some_and(|t| t.reads_lines()) {
            return Err(ToolError::new(
                ErrorCode::InputTooLarge,
                format!(
                    "text has a line of {longest} bytes, and the terminal reads lines now \
                     (canonical mode), keeping at most {} bytes of a line (however many writes \
                     it is typed in): the rest would be dropped; nothing was written. Send \
                     the data in lines of that size at most, write it to a file some other \
                     way (a command that creates it), or run the program in a profile on \
                     pipes",
                    TERMINAL_LINE_MAX_BYTES - 1
                ),
            ));
        }
        let closed = self.send(text.as_bytes(), close, cancel).await?;
        Ok((text.len(), closed))
    }

    /// Write the value of the secret `name` followed by Enter (`\n` on pipes, `\r` on a
    /// terminal). No message names the value or its size; it goes nowhere but into the
    /// program's input.
    pub async fn write_secret(
        &self,
        name: &str,
        value: &str,
        close: bool,
        max_input_bytes: usize,
        cancel: &CancellationToken,
    ) -> Result<(usize, bool), ToolError> {
        self.check_writable()?;
        // A shell on pipes between commands reads its input for its next command line: it
        // would run the value. So it does when nothing was written to it since the last
        // command (which could have started a program that reads, or the shell's own
        // `read`; a command's own stdin is /dev/null), or when it is seen reading its input
        // a block at a time, as dash reads commands (bash reads a byte at a time, as its
        // `read` does, so then it cannot be told).
        let between = self.mode == Mode::Pipe
            && self
                .inspect(|s| {
                    s.shell()
                        .filter(|t| t.busy().is_none())
                        .map(|t| t.written_since_submit())
                })
                .is_some_and(|written| !written || self.shell_reads_its_input());
        if between {
            return Err(ToolError::new(
                ErrorCode::SecretNotAllowed,
                format!(
                    "the secret `{name}` would be read by the shell itself as a command line \
                     (between commands, it reads its own input); nothing was written. Start \
                     the program that asks for it with terminal_write, wait until it asks \
                     (terminal_wait with `until_input: true`), then write the secret"
                ),
            ));
        }
        if let Some(why) = self.terminal().and_then(|t| self.shell_would_read(&t)) {
            return Err(ToolError::new(
                ErrorCode::SecretNotAllowed,
                format!(
                    "the secret `{name}` would be read by a shell as a command line ({why}), \
                     shown and kept in its history; nothing was written. Start the program \
                     that asks for it, wait until it asks (terminal_wait with \
                     `until_input: true`), then write the secret"
                ),
            ));
        }
        // On a terminal the value must reach the program whole: a line the kernel cut
        // would be text no redaction knows (see `PtyMaster::whole_line`).
        let line = match (self.mode, self.terminal()) {
            (Mode::Pty, Some(terminal)) => terminal.whole_line(value).map_err(|why| {
                ToolError::new(
                    ErrorCode::SecretNotAllowed,
                    format!(
                        "the secret `{name}` cannot be typed into this terminal as the program \
                         has set it: {why}; nothing was written"
                    ),
                )
            })?,
            _ => WholeLine {
                clear: Vec::new(),
                enter: "\n",
                canonical: false,
            },
        };
        let typed = value.len() + line.enter.len();
        if line.canonical && typed > TERMINAL_LINE_MAX_BYTES {
            return Err(ToolError::new(
                ErrorCode::InputTooLarge,
                format!(
                    "the secret `{name}` with Enter is longer than the \
                     {TERMINAL_LINE_MAX_BYTES} bytes of a line a terminal keeps, so the \
                     terminal would cut it; nothing was written: the owner can shorten it, or \
                     run the program on pipes"
                ),
            ));
        }
        if typed > max_input_bytes {
            return Err(ToolError::new(
                ErrorCode::InputTooLarge,
                format!(
                    "the secret `{name}` with Enter is over the limit of {max_input_bytes} \
                     bytes per write; nothing was written: ask the owner to raise \
                     max_input_bytes"
                ),
            ));
        }
        let bytes = [&line.clear, value.as_bytes(), line.enter.as_bytes()].concat();
        let closed = self
            .send_as(&bytes, close, cancel, Typed::Secret(name))
            .await?;
        Ok((typed, closed))
    }

    /// On a terminal: why a secret typed now would be read by a shell as its next command
    /// line, if it would. A shell with the integration says when it is at its prompt (or at
    /// the continuation prompt of a line typed to it), whatever its terminal's settings
    /// (readline turns echo off to echo by itself; a shell reading lines with echo off looks
    /// like a password prompt); once a line typed to it runs, what runs (its own `read -s`,
    /// a program that kept its group) asks. Elsewhere (a shell started in the session, one
    /// without the integration) a shell in the foreground reading keys is its line editor.
    fn shell_would_read(&self, terminal: &PtyMaster) -> Option<&'static str> {
        let foreground = self.foreground()?;
        if foreground.pid == self.shell_group() {
            let at_prompt = self.inspect(|s| {
                s.shell()
                    .filter(|t| matches!(t.typing(), Some(Typing::Readline | Typing::Canonical)))
                    .map(|t| t.reads_command_line())
            });
            if let Some(at_prompt) = at_prompt {
                return at_prompt.then_some("the shell is at its prompt");
            }
        }
        let a_shell = foreground.name.as_deref().is_some_and(is_shell);
        (a_shell && !terminal.reads_lines())
            .then_some("a shell in the foreground reads the keys with its line editor")
    }

    /// Keys for a shell on pipes: there is no terminal to make Ctrl-C, Ctrl-\ or Ctrl-Z a
    /// signal, and the shell would read the byte as a command; refused, nothing written.
    pub fn check_keys(&self, bytes: &[u8]) -> Result<(), ToolError> {
        // While a command runs, the write is refused as typed ahead (`send`).
        let idle_shell = self.mode == Mode::Pipe
            && self.inspect(|s| {
                s.shell()
                    .is_some_and(|t| !matches!(t.busy(), Some(Busy::Command(_))))
            });
        if idle_shell && bytes.iter().any(|b| matches!(b, 0x03 | 0x1a | 0x1c)) {
            return Err(ToolError::new(
                ErrorCode::NotAPty,
                "this shell runs on pipes: no terminal turns C-c, C-\\ or C-z into a signal, \
                 and the shell would read the byte as a command; nothing was written. To stop \
                 a command, terminal_exec `continue: true` with `on_timeout: \"interrupt\"` \
                 sends SIGINT to its processes when that call times out",
            ));
        }
        Ok(())
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
        self.send_as(bytes, close, cancel, Typed::Input).await
    }

    /// `send`, recording what was typed as `typed` says.
    pub(super) async fn send_as(
        &self,
        bytes: &[u8],
        close: bool,
        cancel: &CancellationToken,
        typed: Typed<'_>,
    ) -> Result<bool, ToolError> {
        self.check_writable()?;
        let _writing = tokio::select! {
            writing = self.writing.lock() => writing,
            () = cancel.cancelled() => return Err(cancelled_unwritten()),
        };
        // Looked at once this write has its turn: a command typed meanwhile is running.
        // Closing stdin alone stays allowed: the shell then ends after the command.
        let typed_ahead = !bytes.is_empty() || !close;
        if self.mode == Mode::Pipe
            && matches!(typed, Typed::Input | Typed::Secret(_))
            && typed_ahead
        {
            let running = self.inspect(|s| match s.shell().and_then(|t| t.busy()) {
                Some(Busy::Command(seq)) => Some(seq),
                _ => None,
            });
            if let Some(seq) = running {
                return Err(Session::typed_ahead(seq));
            }
        }
        let seen_before = self.inspect(|s| s.shell_seen());
        // Another write, or the session's end, may have closed stdin meanwhile.
        let (sink, bytes) = self.inspect(|s| match &s.input {
            Input::Pipe { pipe, .. } => Ok((Sink::Pipe(pipe.clone()), bytes.to_vec())),
            Input::Pty {
                master,
                partial_line,
            } => {
                let mut bytes = bytes.to_vec();
                if close {
                    // The EOF character ends input only at the start of a line; after a
                    // partial line, the first one sends that line and a second is EOF.
                    let controls = master.line_controls();
                    bytes.push(controls.eof);
                    if typed_partial_line(*partial_line, &bytes[..bytes.len() - 1], &controls) {
                        bytes.push(controls.eof);
                    }
                }
                Ok((Sink::Pty(master.clone()), bytes))
            }
            Input::Closed => Err(stdin_closed()),
            Input::Uncertain => Err(uncertain()),
        })?;
        let mut written = 0;
        let bound = match typed {
            Typed::Command(_) | Typed::Unrecorded => EXEC_TYPING_TIMEOUT,
            Typed::Input | Typed::Secret(_) => WRITE_DRAIN_TIMEOUT,
            Typed::Run(deadline) => deadline.saturating_duration_since(Instant::now()),
        };
        let outcome = tokio::select! {
            done = tokio::time::timeout(bound, sink.write_all(&bytes, &mut written)) => Some(done),
            () = cancel.cancelled() => None,
        };
        let is_pty = matches!(sink, Sink::Pty(_));
        // Held no longer than the write: the session's end closes it.
        drop(sink);
        let sent = &bytes[..written];
        if let (Some(feed), false) = (&self.sink, sent.is_empty()) {
            let enter = if is_pty { "\r" } else { "\n" };
            let recorded = match typed {
                Typed::Input | Typed::Run(_) => {
                    Some(Feed::Input(String::from_utf8_lossy(sent).into_owned()))
                }
                Typed::Command(line) => Some(Feed::Input(format!("{line}{enter}"))),
                Typed::Secret(name) => Some(Feed::Secret(name.to_owned())),
                Typed::Unrecorded => None,
            };
            if let Some(recorded) = recorded {
                feed.send(recorded).await;
            }
        }
        // The session's end may have closed the input meanwhile: never reopen it.
        let line_typed = matches!(typed, Typed::Input | Typed::Secret(_) | Typed::Run(_))
            && sent.iter().any(|b| *b == b'\r' || *b == b'\n');
        self.update(|s| {
            if sent.is_empty() {
                s.touched();
            } else {
                s.wrote();
            }
            if line_typed {
                s.shell_typed_line(seen_before);
            }
            if !sent.is_empty() && matches!(typed, Typed::Input | Typed::Secret(_)) {
                s.shell_wrote();
            }
            let result = match outcome {
                Some(Ok(Ok(()))) if !is_pty && close => {
                    s.input.close();
                    Ok(())
                }
                Some(Ok(Ok(()))) => Ok(()),
                Some(Ok(Err(_))) => {
                    s.input.close();
                    Err(stdin_closed())
                }
                Some(Err(_elapsed)) if is_pty => Err(backpressure(false)),
                Some(Err(_elapsed)) => {
                    s.input.close();
                    Err(backpressure(true))
                }
                None if written == 0 => Err(cancelled_unwritten()),
                None => {
                    if !s.input.is_closed() {
                        s.input = Input::Uncertain;
                    }
                    Err(uncertain())
                }
            };
            match &mut s.input {
                Input::Pty {
                    master,
                    partial_line,
                } => {
                    *partial_line =
                        typed_partial_line(*partial_line, sent, &master.line_controls());
                }
                Input::Pipe { partial_line, .. } => {
                    if let Some(last) = sent.last() {
                        *partial_line = *last != b'\n';
                    }
                }
                Input::Closed | Input::Uncertain => {}
            }
            result.map(|()| s.input.is_closed())
        })
    }

    /// Record `command` as typed, with Enter (it was typed in unrecorded pieces).
    pub(super) async fn record_command(&self, command: &str) {
        if let Some(feed) = &self.sink {
            let enter = if self.mode == Mode::Pty { "\r" } else { "\n" };
            feed.send(Feed::Input(format!("{command}{enter}"))).await;
        }
    }

    pub(super) fn check_writable(&self) -> Result<(), ToolError> {
        if self.status().is_final() {
            return Err(self.not_running());
        }
        self.inspect(|s| s.input.check())
    }
}

fn backpressure(closed: bool) -> ToolError {
    let ms = WRITE_DRAIN_TIMEOUT.as_millis();
    ToolError::new(
        ErrorCode::InputBackpressure,
        if closed {
            format!(
                "the process did not take the input within {ms} ms, so stdin was closed; part \
                 of it may have been delivered: do not blindly retry"
            )
        } else {
            format!(
                "the terminal did not take the input within {ms} ms (the program is not \
                 reading: stopped or busy); part of it may have been typed: do not blindly \
                 retry. The terminal stays open: keys such as C-c still reach it"
            )
        },
    )
}

fn cancelled_unwritten() -> ToolError {
    ToolError::new(
        ErrorCode::Internal,
        "the client cancelled this write before any of it was written; the input is unchanged",
    )
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

/// Whether a program's name is a shell's, whose line editor runs what is typed at its prompt.
pub(super) fn is_shell(name: &str) -> bool {
    const SHELLS: &[&str] = &[
        "sh", "bash", "dash", "ash", "zsh", "ksh", "ksh93", "mksh", "yash", "posh", "fish", "csh",
        "tcsh", "busybox",
    ];
    SHELLS.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTROLS: LineControls = LineControls {
        eof: 0x04,
        erase: 0x7f,
        kill: 0x15,
        flushing: [0x03, 0x1c, 0x1a],
    };

    fn partial(start: bool, bytes: &[u8]) -> bool {
        typed_partial_line(start, bytes, &CONTROLS)
    }

    #[test]
    fn follows_the_line_being_typed() {
        assert!(!partial(false, b""));
        assert!(partial(true, b""));
        assert!(partial(false, b"abc"));
        assert!(!partial(false, b"abc\n"));
        assert!(!partial(false, b"abc\r"));
        assert!(partial(false, b"abc\ndef"));
        assert!(!partial(true, b"\x04"), "EOF sends the partial line");
        assert!(!partial(true, b"\x15"), "kill erases the line");
        assert!(!partial(true, b"\x03"), "interrupt discards it");
    }

    #[test]
    fn erase_removes_whole_characters() {
        assert!(!partial(false, b"ab\x7f\x7f"));
        assert!(partial(false, b"ab\x7f"));
        assert!(!partial(false, "é\x7f".as_bytes()));
        assert!(!partial(false, "日\x7f".as_bytes()));
        assert!(!partial(false, b"\x7f\x7f"));
        // Word erase cannot be followed: stay on the side of a second EOF.
        assert!(partial(false, b"word\x17"));
    }
}
