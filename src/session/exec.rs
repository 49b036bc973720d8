//! Running one command line in a session's POSIX shell (`terminal_exec`): exactly the
//! command's output, separately its stderr on pipes, and its real exit status.
//!
//! Flow at a glance: the command goes to the shell as one shell command that prints a start
//! marker, runs the command text with `command eval`, and prints an end marker carrying
//! `$?` (on pipes a second pair marks stderr). The command's output is what lies between
//! the markers; echoed input, prompts and output of background jobs between calls lie
//! outside them and stay in the session's buffer only. On timeout a terminal's foreground
//! job gets Ctrl-C and a probe proves the shell answers again; a pipe shell, which cannot
//! tell its jobs from itself, is terminated.
//!
//! Why output cannot fool it:
//! - Each call's markers carry a fresh 128-bit nonce, and the shell is given the nonce in
//!   two halves (`printf '…%s%s…' HALF HALF`): the whole marker never appears in the input,
//!   so it is never found in a terminal's echo or the shell's history, and output that
//!   imitates a marker lacks the nonce.
//! - The command text travels as printf escapes inside double quotes: only printable ASCII
//!   other than `$ ` \ " ! %` is sent as is, so nothing in it can end the quoting, expand,
//!   trigger history expansion or line editing (Tab, control keys). `command eval` keeps a
//!   syntax error in the command from ending a non-interactive shell. Lines are cut short
//!   (backslash-newline inside double quotes) so a terminal's canonical line limit never
//!   truncates them.
//! - Markers are OSC escape sequences: a terminal and the rendered screen ignore them and
//!   `strip_ansi` removes them from reads.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::input::Typed;
use super::state::{Reason, Snapshot};
use super::wait::Match;
use super::{Session, Streams, WaitRequest};
use crate::config::Mode;
use crate::errors::{ErrorCode, ToolError};
use crate::limits::{EXEC_INTERRUPT_SETTLE, EXEC_LINE_BYTES, GRACE_DEFAULT_MS, PAGE_MAX_ENTRIES};
use crate::output::{Search, Stream};

/// What the shell of a session has been set up for.
#[derive(Default)]
pub struct ShellState {
    /// The first call enabled aliases in a non-interactive bash (dash always has them).
    prepared: bool,
}

#[derive(Debug, Serialize)]
pub struct ExecResult {
    /// `completed`, `timeout` or `exited`.
    pub outcome: &'static str,
    pub output: String,
    /// Pipe sessions: the command's stderr. On a terminal it is part of `output`.
    pub stderr: Option<String>,
    /// The buffer evicted part of the command's output: `output` is the retained tail.
    pub truncated: bool,
    pub exit_code: Option<i32>,
    /// After a timeout: `interrupted` (Ctrl-C, the shell answers again) or `terminated`.
    pub timeout_action: Option<&'static str>,
    /// Where the command's output begins, and the cursor just after the call's output.
    pub start_cursor: u64,
    pub end_cursor: u64,
    pub session: Snapshot,
}

/// The OSC sequence that frames every marker: `ESC ] 6973 ; KIND NONCE … BEL`.
const OSC: &str = "\u{1b}]6973;";
const BEL: &str = "\u{7}";
/// The same two delimiters as printf escapes.
const OSC_ESCAPED: &str = "\\033]6973;";
const BEL_ESCAPED: &str = "\\007";

struct Markers {
    nonce: String,
}

impl Markers {
    fn new() -> Self {
        Markers {
            nonce: format!("{:032x}", rand::random::<u128>()),
        }
    }

    /// `command printf` printing the marker of `kind`, with `extra` format text and
    /// arguments, the nonce given in two halves.
    fn printf(&self, kind: char, extra_format: &str, extra_args: &str) -> String {
        let (a, b) = self.nonce.split_at(16);
        format!(
            "command printf '{OSC_ESCAPED}{kind}%s%s{extra_format}{BEL_ESCAPED}' {a} {b}{extra_args}"
        )
    }

    fn pattern(&self, kind: char, extra: &str) -> String {
        format!(
            "{}{extra}{}",
            regex::escape(&format!("{OSC}{kind}{}", self.nonce)),
            regex::escape(BEL)
        )
    }

    fn start(&self) -> String {
        self.pattern('s', "")
    }

    /// The end marker on the command's main stream; group 1 is the exit status.
    fn end(&self) -> String {
        self.pattern('e', ";([0-9]{3})")
    }

    /// The end marker on a pipe session's stderr.
    fn end_of_stderr(&self) -> String {
        self.pattern('e', "")
    }

    fn probe(&self) -> String {
        self.pattern('r', "")
    }
}

/// The command as a printf format inside double quotes (see the module comment).
fn encode(command: &str) -> String {
    let mut out = String::with_capacity(command.len() + 16);
    let mut line = 0;
    for byte in command.bytes() {
        let literal = (0x20..0x7f).contains(&byte) && !b"$`\\\"!%".contains(&byte);
        if line >= EXEC_LINE_BYTES {
            out.push_str("\\\n");
            line = 0;
        }
        if literal {
            out.push(byte as char);
            line += 1;
        } else {
            out.push_str(&format!("\\{byte:03o}"));
            line += 4;
        }
    }
    out
}

/// The shell command that runs `command` between markers.
fn wrapper(command: &str, markers: &Markers, mode: Mode, prepare: bool) -> String {
    let mut text = String::new();
    if prepare {
        // A non-interactive bash expands aliases only when asked; guarded for dash.
        text.push_str("[ -n \"${BASH_VERSION-}\" ] && shopt -s expand_aliases; ");
    }
    let eval = format!("command eval \"$(command printf \"{}\")\"", encode(command));
    match mode {
        Mode::Pipe => {
            // stdin from /dev/null: a command that reads stdin must not eat the shell's input.
            text.push_str(&format!(
                "{start}; {start} >&2; {eval} </dev/null; {end}; {end_err} >&2\n",
                start = markers.printf('s', "", ""),
                end = markers.printf('e', ";%03d", " \"$?\""),
                end_err = markers.printf('e', "", ""),
            ));
        }
        Mode::Pty => {
            text.push_str(&format!(
                "{start}; {eval}; {end}\n",
                start = markers.printf('s', "", ""),
                end = markers.printf('e', ";%03d", " \"$?\""),
            ));
        }
    }
    text
}

/// How the search for one marker ended.
enum Found {
    Marker(Match),
    Exited,
    Timeout,
}

/// The part of one stream that belongs to the command.
struct Window {
    streams: Streams,
    /// Just after the start marker, once seen.
    start: Option<u64>,
    /// At the end marker, or where the output stopped.
    end: u64,
    /// Just after the end marker, once seen.
    after: Option<u64>,
}

impl Session {
    /// Run `command` in this session's shell and wait up to `timeout` for it to finish.
    pub async fn exec(
        &self,
        command: &str,
        max_input_bytes: usize,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<ExecResult, ToolError> {
        let Ok(mut shell) = self.shell.try_lock() else {
            return Err(ToolError::new(
                ErrorCode::SessionBusy,
                format!(
                    "session {} is running another terminal_exec; wait for its answer, or \
                     start another shell session to run commands in parallel",
                    self.id
                ),
            ));
        };
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
        let markers = Markers::new();
        let text = wrapper(command, &markers, self.mode, !shell.prepared);
        let from = self.inspect(|s| s.output.end());
        self.send_as(text.as_bytes(), false, cancel, Typed::Command(command))
            .await?;
        shell.prepared = true;
        let deadline = Instant::now() + timeout;

        let (main, side) = match self.mode {
            Mode::Pipe => (
                Streams::Only(Stream::Stdout),
                Some(Streams::Only(Stream::Stderr)),
            ),
            Mode::Pty => (Streams::Any, None),
        };
        // Both streams are searched as their output arrives, so a flood on one cannot evict
        // the other's start marker before it was seen.
        let side_stop = cancel.child_token();
        let main_search = async {
            let searched = self
                .window(
                    from,
                    main,
                    (&markers.start(), &markers.end()),
                    deadline,
                    cancel,
                )
                .await;
            match &searched {
                // The shell prints the stderr end marker right after the main one.
                Ok((_, Found::Marker(_))) => {
                    let stop = side_stop.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(EXEC_INTERRUPT_SETTLE).await;
                        stop.cancel();
                    });
                }
                Ok(_) | Err(_) => side_stop.cancel(),
            }
            searched
        };
        let side_search = async {
            match side {
                Some(streams) => Some(
                    self.window(
                        from,
                        streams,
                        (&markers.start(), &markers.end_of_stderr()),
                        deadline,
                        &side_stop,
                    )
                    .await,
                ),
                None => None,
            }
        };
        let (main_searched, side_searched) = tokio::join!(main_search, side_search);
        let (mut window, found) = main_searched?;
        let mut side_window = side_searched.transpose()?.map(|(w, _)| w);
        let exit_code = match &found {
            Found::Marker(end) => end
                .groups
                .first()
                .cloned()
                .flatten()
                .and_then(|s| s.parse().ok()),
            Found::Exited => self.snapshot().exit_code,
            Found::Timeout => None,
        };
        if matches!(found, Found::Timeout) {
            // The output so far ends where it ends now.
            let end = self.inspect(|s| s.output.end());
            window.end = end;
            if let Some(w) = side_window.as_mut().filter(|w| w.after.is_none()) {
                w.end = end;
            }
        }

        let pty = self.mode == Mode::Pty;
        let (output, cut) = self.window_text(&window, pty);
        let side = side_window.as_ref().map(|w| self.window_text(w, pty));
        let truncated = cut || side.as_ref().is_some_and(|(_, cut)| *cut);
        let stderr = side.map(|(text, _)| text);
        let start_cursor = [Some(&window), side_window.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|w| w.start)
            .min()
            .unwrap_or(from);
        let end_cursor = [Some(&window), side_window.as_ref()]
            .into_iter()
            .flatten()
            .map(|w| w.after.unwrap_or(w.end))
            .max()
            .unwrap_or(from);
        // The call's output has been seen (with `on_full: "pause"` it may now be evicted).
        self.acknowledge(end_cursor);
        let (outcome, timeout_action) = match found {
            Found::Marker(_) => ("completed", None),
            Found::Exited => ("exited", None),
            Found::Timeout => ("timeout", Some(self.interrupt(&markers).await)),
        };
        Ok(ExecResult {
            outcome,
            output,
            stderr,
            truncated,
            exit_code,
            timeout_action,
            start_cursor,
            end_cursor,
            session: self.snapshot(),
        })
    }

    /// Find the command's window on `streams`: the start marker, then `end_pattern`.
    async fn window(
        &self,
        from: u64,
        streams: Streams,
        (start_pattern, end_pattern): (&str, &str),
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Result<(Window, Found), ToolError> {
        let mut window = Window {
            streams,
            start: None,
            end: from,
            after: None,
        };
        // Either marker may come first: under a flood the start marker can be evicted
        // before it was searched, and then the window began before the retained output.
        let either = format!("{start_pattern}|{end_pattern}");
        let first = self
            .find_marker(from, &either, streams, deadline, cancel)
            .await?;
        let found = match first {
            Found::Marker(m) if m.text.starts_with(&format!("{OSC}s")) => {
                window.start = Some(m.end_cursor);
                self.find_marker(m.end_cursor, end_pattern, streams, deadline, cancel)
                    .await?
            }
            Found::Marker(m) => {
                window.start = Some(from);
                Found::Marker(m)
            }
            other => other,
        };
        match &found {
            Found::Marker(m) => {
                window.end = m.start_cursor;
                window.after = Some(m.end_cursor);
            }
            Found::Exited | Found::Timeout => window.end = self.inspect(|s| s.output.end()),
        }
        Ok((window, found))
    }

    /// Wait for `pattern` on `streams` from `cursor`. Output evicted before it was searched
    /// is skipped (a marker cannot be recovered from it anyway).
    async fn find_marker(
        &self,
        mut cursor: u64,
        pattern: &str,
        streams: Streams,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Result<Found, ToolError> {
        loop {
            let search = Search::new(pattern).map_err(ToolError::internal)?;
            let request = WaitRequest {
                cursor,
                search: Some(search),
                streams,
                timeout: deadline.saturating_duration_since(Instant::now()),
                strip_ansi: false,
                idle: None,
            };
            match self.wait(request, &AtomicU64::new(0), cancel).await {
                Ok(result) => {
                    return Ok(match (result.found, result.session.status.is_final()) {
                        (Some(found), _) => Found::Marker(found),
                        (None, true) => Found::Exited,
                        (None, false) => Found::Timeout,
                    });
                }
                Err(_) if cancel.is_cancelled() => return Ok(Found::Timeout),
                Err(e) if e.code == ErrorCode::CursorExpired => {
                    cursor = e.extra["base_cursor"].as_u64().unwrap_or(cursor);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// After a timeout: Ctrl-C the terminal's foreground job and prove the shell answers a
    /// probe; a pipe shell, or a terminal that does not answer, is terminated.
    async fn interrupt(&self, markers: &Markers) -> &'static str {
        let never = CancellationToken::new();
        if let (Some(terminal), Mode::Pty) = (&self.terminal, self.mode) {
            let from = self.inspect(|s| s.output.end());
            let probe = format!("{}\n", markers.printf('r', "", ""));
            // The first of the flushing characters is the interrupt (Ctrl-C unless changed).
            let interrupt_char = terminal.line_controls().flushing[0];
            let sent = self.send(&[interrupt_char], false, &never).await.is_ok()
                && self.send(probe.as_bytes(), false, &never).await.is_ok();
            let settle = Instant::now() + EXEC_INTERRUPT_SETTLE;
            if sent
                && let Ok(Found::Marker(_)) = self
                    .find_marker(from, &markers.probe(), Streams::Any, settle, &never)
                    .await
            {
                return "interrupted";
            }
        }
        self.terminate(Reason::Timeout, GRACE_DEFAULT_MS).await;
        "terminated"
    }
}

impl Session {
    /// The text of `window` still retained, and whether part of it was evicted; read a
    /// page per lock. Terminal output has its line ends normalised (`\r\n` → `\n`).
    fn window_text(&self, window: &Window, pty: bool) -> (String, bool) {
        let Some(start) = window.start else {
            return (String::new(), false);
        };
        let mut truncated = false;
        let mut cursor = start;
        let mut text = String::new();
        while cursor < window.end {
            let page = self.inspect(|s| {
                let base = s.output.base();
                truncated |= cursor < base;
                s.output.read(cursor.max(base), 64 * 1024, PAGE_MAX_ENTRIES)
            });
            let Ok(page) = page else {
                break;
            };
            for entry in page
                .entries
                .iter()
                .filter(|e| window.streams.accepts(e.stream))
            {
                let room = window.end.saturating_sub(entry.cursor) as usize;
                text.extend(entry.text.chars().take(room));
            }
            if !page.has_more || page.next_cursor <= cursor {
                break;
            }
            cursor = page.next_cursor;
        }
        if pty {
            text = text.replace("\r\n", "\n");
        }
        (text, truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_keeps_only_inert_characters_literal_and_cuts_lines() {
        let encoded = encode("echo \"$HOME\" `x` \\ ! 100% it's\té\n");
        assert_eq!(
            encoded,
            "echo \\042\\044HOME\\042 \\140x\\140 \\134 \\041 100\\045 it's\\011\\303\\251\\012"
        );
        let long = encode(&"a".repeat(EXEC_LINE_BYTES * 2 + 1));
        let lines: Vec<&str> = long.split("\\\n").collect();
        assert_eq!(lines.len(), 3);
        assert!(lines.iter().all(|l| l.len() <= EXEC_LINE_BYTES));
    }

    #[test]
    fn the_whole_marker_never_appears_in_the_input() {
        let markers = Markers::new();
        for mode in [Mode::Pipe, Mode::Pty] {
            let text = wrapper("echo hi", &markers, mode, true);
            assert!(!text.contains(&markers.nonce), "{text}");
        }
        let end = markers.end();
        let output = format!("{OSC}e{};042{BEL}", markers.nonce);
        let found = regex::Regex::new(&end).unwrap().captures(&output).unwrap();
        assert_eq!(&found[1], "042");
    }
}
