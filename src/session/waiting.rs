//! Whether a session waits for input, and which program is in its foreground: read from
//! `/proc` each time it is asked (see `process::waiting`), never cached.
//!
//! A session is awaiting input when its foreground process group (a terminal's, from
//! `tcgetpgrp`; on pipes the session leader's) has no process runnable and one blocked
//! reading the session's terminal or stdin pipe, and no output came in the last
//! `AWAIT_QUIET` and no input was written then (output still arriving means the program is
//! not done answering; input just written, that it has not read it yet).

use std::time::Instant;

use serde::Serialize;

use super::Session;
use crate::config::Mode;
use crate::limits::AWAIT_QUIET;
use crate::output::Stream;
use crate::process::waiting::{
    InputFile, InputWait, awaiting, group_members, input_wait, reading, reads_blocks,
};
use crate::process::{procfs, unread};

/// The program in a session's foreground.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Foreground {
    pub pid: i32,
    pub name: Option<String>,
}

/// What `waiting` found.
pub struct Waiting {
    /// `None`: it cannot be known here.
    pub awaiting_input: Option<bool>,
    pub foreground: Option<Foreground>,
}

/// Whether `input` holds bytes nobody read yet: a terminal's input queue (looked at
/// through a descriptor opened for the moment, which does not make it anyone's controlling
/// terminal), or a pipe's contents.
fn pending_input(input: &InputFile) -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::OpenOptionsExt;
    let path = match input {
        InputFile::Terminal(path) => path.clone(),
        InputFile::Pipe(_) => return false,
    };
    let Ok(tty) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(path)
    else {
        return false;
    };
    unread(tty.as_fd()) > 0
}

impl Session {
    /// The foreground group's leader (its ID), or the session leader on pipes.
    fn foreground_group(&self) -> Option<i32> {
        match self.mode {
            Mode::Pty => self.terminal()?.foreground(),
            Mode::Pipe => Some(self.pid),
        }
    }

    /// On a terminal whose shell is at its prompt: why a command typed now would not be
    /// the next thing the shell runs. Input typed with terminal_write and not read yet goes
    /// first (type-ahead, or an answer's extra line), and a program in the foreground (a
    /// line the shell read that way) runs before the shell reads again; the command's
    /// result would then be theirs.
    pub fn shell_elsewhere(&self) -> Option<String> {
        if self.mode != Mode::Pty {
            return None;
        }
        if self.input_file.as_ref().is_some_and(pending_input) {
            return Some(
                "input typed with terminal_write or terminal_keys waits in the terminal, and \
                 the shell reads it before any new command"
                    .to_owned(),
            );
        }
        // The group alone is looked at; its program's name is read only to say why.
        let shell = self.shell_group();
        (self.foreground_group()? != shell).then(|| {
            let name = self
                .foreground()
                .and_then(|f| f.name)
                .map_or_else(String::new, |name| format!(" (`{name}`)"));
            format!(
                "a program started with terminal_write or terminal_keys runs in the shell's \
                 foreground{name}"
            )
        })
    }

    /// On a terminal: the shell itself is in the foreground, and its stderr, where a shell
    /// prints its prompt, no longer goes to the terminal (a command sent it elsewhere:
    /// `exec 2>/dev/null`, or closed it). dash prints the end of each command with its prompt.
    pub fn shell_stderr_elsewhere(&self) -> bool {
        let shell = self.shell_group();
        let foreground = self
            .terminal()
            .is_some_and(|t| t.foreground() == Some(shell));
        match &self.input_file {
            Some(input @ InputFile::Terminal(_)) if foreground => {
                // Closed (`exec 2>&-`) is elsewhere too.
                procfs::descriptor(shell, 2).is_none_or(|stderr| !input.is(&stderr))
            }
            _ => false,
        }
    }

    /// The shell itself reads its own input, the terminal, a block at a time: at its prompt
    /// or a continuation line (a `read` builtin asks for a byte at a time; a command
    /// substitution reads a pipe, `. FILE` a file).
    pub fn shell_reads_its_input(&self) -> bool {
        self.input_file
            .as_ref()
            .is_some_and(|input| reads_blocks(self.shell_group(), input))
    }

    /// How the shell itself waits to read its own input, if it does.
    pub fn shell_input_wait(&self) -> Option<InputWait> {
        self.input_file
            .as_ref()
            .and_then(|input| input_wait(self.shell_group(), input))
    }

    /// The program in the foreground.
    pub fn foreground(&self) -> Option<Foreground> {
        let pgid = self.foreground_group()?;
        let name = if pgid == self.pid {
            self.leader_files.name()
        } else {
            procfs::name(pgid)
        };
        let name = name.or_else(|| {
            let members = group_members(&self.leader_files, pgid);
            members.first().and_then(|m| procfs::name(m.pid))
        });
        Some(Foreground { pid: pgid, name })
    }

    /// Whether the session waits for input now, and its foreground program.
    pub fn waiting(&self) -> Waiting {
        let (done, closed, last_traffic) = self.inspect(|s| {
            (
                s.status().is_final(),
                s.input().is_closed(),
                s.last_traffic(),
            )
        });
        if done {
            return Waiting {
                awaiting_input: Some(false),
                foreground: None,
            };
        }
        let foreground = self.foreground();
        let awaiting_input = match (&self.input_file, &foreground) {
            _ if closed => Some(false),
            _ if last_traffic.elapsed() < AWAIT_QUIET => Some(false),
            // Input it has not read yet: it is about to take it, not waiting for more;
            // output not read yet: it has just written, and may not be done.
            (Some(input), _) if pending_input(input) => Some(false),
            _ if self.terminal().is_some_and(|t| t.unread() > 0) => Some(false),
            (Some(input), Some(fg)) => {
                let members = group_members(&self.leader_files, fg.pid);
                awaiting(&members, &self.leader_files, input, last_traffic.elapsed())
            }
            _ => None,
        };
        // A program writes its prompt and then blocks reading: found blocked, what it wrote
        // is already in the terminal. Looked at again now, so a prompt written between the
        // first look and the program's read is never missed.
        let awaiting_input = match awaiting_input {
            Some(true) if self.terminal().is_some_and(|t| t.unread() > 0) => Some(false),
            other => other,
        };
        Waiting {
            awaiting_input,
            foreground,
        }
    }

    /// Whether a thread of the foreground programs is blocked reading the session's input
    /// now, whatever their other threads do (`None`: it cannot be known here).
    pub(super) fn reading_input(&self) -> Option<bool> {
        let input = self.input_file.as_ref()?;
        let foreground = self.foreground_group()?;
        let members = group_members(&self.leader_files, foreground);
        reading(&members, &self.leader_files, input)
    }

    /// Whether the session awaits input, confirmed: a second look `AWAIT_QUIET` after the
    /// first must find the same (a prompt the program wrote just before it blocked may still
    /// be on its way through the terminal to the reader, and a program may pass through a
    /// read on its way elsewhere), what its reader has read is taken first, and any output
    /// or input since the first look means not yet. For a caller about to say so to a
    /// client, who may act on it at once.
    pub(super) async fn awaiting_confirmed(&self) -> Option<bool> {
        let before = self.inspect(|s| s.last_traffic());
        match self.waiting().awaiting_input {
            Some(true) => {}
            other => return other,
        }
        tokio::time::sleep(AWAIT_QUIET).await;
        self.drain_reader(Stream::Stdout).await;
        if self.inspect(|s| s.last_traffic()) != before {
            return Some(false);
        }
        let again = self.waiting().awaiting_input;
        let quiet = self.inspect(|s| s.last_traffic()) == before;
        again.map(|awaiting| awaiting && quiet)
    }

    /// When `waiting` may next answer differently as far as traffic goes: `AWAIT_QUIET`
    /// after the last output or input.
    pub(super) fn quiet_at(&self) -> Instant {
        self.inspect(|s| s.last_traffic()) + AWAIT_QUIET
    }
}
