//! What only some sessions can do: resize and render a terminal; and signals, which every
//! session takes.

use std::sync::atomic::Ordering;

use nix::sys::signal::Signal;
use tokio::time::Instant;

use super::sink::Feed;
use super::{Session, lock_screen};
use crate::config::Mode;
use crate::errors::{ErrorCode, ToolError};
use crate::limits::{
    AWAIT_POLL, CAP_TOTAL_EMULATOR_CELLS, EXEC_INTERRUPT_SETTLE, SCREEN_CATCH_UP, SHELL_START_GRACE,
};
use crate::output::{Screen, ScreenView};
use crate::process::{procfs, signal_group, signal_process, waiting};

/// Who receives a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Group,
    Leader,
    /// In a shell session: the command's processes, never the shell (on a terminal its
    /// foreground group; on pipes the processes of its session started since the command
    /// began).
    Command,
}

impl Session {
    fn not_a_pty(&self) -> ToolError {
        ToolError::new(
            ErrorCode::NotAPty,
            format!(
                "session {} runs on pipes, not a terminal; only profiles with mode \"pty\" \
                 have a screen and a size. Use terminal_read for its output",
                self.id
            ),
        )
    }

    /// Set the window size of the terminal and of its emulator; the program gets SIGWINCH.
    pub async fn resize(&self, rows: u16, cols: u16) -> Result<(), ToolError> {
        let Some(screen) = &self.screen else {
            return Err(self.not_a_pty());
        };
        if self.status().is_final() {
            return Err(self.not_running());
        }
        let budget = lock_screen(screen).budget();
        if !Screen::fits(rows, cols, budget) {
            let most = budget / 2;
            return Err(ToolError::invalid_argument(
                "rows",
                format!(
                    "× cols is {} cells, over the limit of {most} for this server: a session's \
                     emulator holds at most {budget} cells (1/max_records of {}), and the \
                     screen and the alternate screen each take rows × cols; choose a smaller \
                     size",
                    usize::from(rows) * usize::from(cols),
                    CAP_TOTAL_EMULATOR_CELLS
                ),
            )
            .with("max_cells", most));
        }
        // The emulator takes the new size before the program can learn it (SIGWINCH): the
        // redraw it answers with comes after it in the sink's queue.
        if let Some(sink) = &self.sink {
            sink.send(Feed::Resize { rows, cols }).await;
        }
        // Gone if the program ended meanwhile.
        let terminal = self.terminal().ok_or_else(|| self.not_running())?;
        terminal
            .resize(rows, cols)
            .map_err(|_| ToolError::internal("the terminal refused the new size"))
    }

    /// The screen as the emulator renders it, once it has taken every output stored so
    /// far (it runs on the sink thread, a little behind the buffer).
    pub async fn screen(&self, scrollback: usize) -> Result<ScreenView, ToolError> {
        let screen = self.screen.as_ref().ok_or_else(|| self.not_a_pty())?;
        self.screen_caught_up().await;
        Ok(lock_screen(screen).view(scrollback))
    }

    /// Wait until a terminal's emulator has taken every output stored so far, so that
    /// whoever saw that output (a wait that matched it) finds it on the screen too: at most
    /// `SCREEN_CATCH_UP` while the session runs, and without a bound once its output is
    /// settled (what is left to draw is at most the emulator's queue, and a session seen to
    /// end shows the screen it ended on).
    pub async fn screen_caught_up(&self) {
        if let (Some(_), Some(sink)) = (&self.screen, &self.sink) {
            let (end, settled) = self.inspect(|s| (s.output().end(), s.settled()));
            sink.fed_to(end, (!settled).then_some(SCREEN_CATCH_UP))
                .await;
        }
    }

    /// Deliver a signal; the lifecycle follows from what the process does with it.
    pub async fn signal(&self, signal: Signal, target: Target) -> Result<(), ToolError> {
        if self.status().is_final() {
            return Err(self.not_running());
        }
        // SIGINT for a shell on pipes, to its group or to itself.
        let pipe_shell_sigint = signal == Signal::SIGINT
            && self.mode == Mode::Pipe
            && target != Target::Command
            && self.inspect(|s| s.shell().is_some());
        if pipe_shell_sigint && self.interrupted_command().await {
            return Ok(());
        }
        if pipe_shell_sigint {
            self.until_shell_traps_sigint().await;
        }
        // A shell running a loop of its own (neither waiting for a program nor reading its
        // input, as looked at before the signal) has no program to take the SIGINT, and
        // its trap leaves a loop only for a program that died of it: its SIGWINCH trap
        // leaves it, as Ctrl-C would at a terminal.
        let shell = self.shell_group();
        let own_loop = pipe_shell_sigint
            && !waiting::waits_for_a_child(shell)
            && self.shell_input_wait().is_none();
        match target {
            Target::Group => signal_group(self.pid, signal),
            Target::Leader => signal_process(self.pid, signal),
            Target::Command => self.signal_command(signal).await?,
        }
        if own_loop {
            signal_process(shell, Signal::SIGWINCH);
        }
        Ok(())
    }

    /// A shell on pipes sets its trap for SIGINT with the first line it reads
    /// (`pipe_prepare`, written as it started), and a SIGINT before it ran that line ends
    /// it: this waits, at most `SHELL_START_GRACE`, until it has. It has once it ran a
    /// command of terminal_exec, reads its input (all that was written before, that line
    /// first, is read), or waits for a program (a line after that one started it).
    async fn until_shell_traps_sigint(&self) {
        let shell = self.shell_group();
        let until = Instant::now() + SHELL_START_GRACE;
        loop {
            let trapped = self.inspect(|s| s.shell().is_some_and(|t| !t.first_command()))
                || self.shell_reads_its_input()
                || waiting::waits_for_a_child(shell);
            if trapped || self.status().is_final() || Instant::now() >= until {
                return;
            }
            tokio::time::sleep(AWAIT_POLL).await;
        }
    }

    /// SIGINT to a shell on pipes while a command of terminal_exec runs is Ctrl-C, as a
    /// terminal gives it: the command is interrupted as its timeout does it (its line
    /// ended, its status 130), and the shell lives on with its state. With no such command,
    /// the signal goes where the target says: the shell is in the group its programs run
    /// in, and its trap for SIGINT (`pipe_prepare`) keeps it alive. True when it was sent
    /// as Ctrl-C.
    async fn interrupted_command(&self) -> bool {
        let Some(seq) = self.running_command() else {
            return false;
        };
        self.interrupt_command(seq, Instant::now() + EXEC_INTERRUPT_SETTLE)
            .await;
        true
    }

    /// A signal for what a shell runs, the shell spared: a program that ignores Ctrl-C
    /// (SIGINT) gets SIGTERM or SIGKILL, and the shell's state stays. SIGINT ends the
    /// command line too, on pipes as on a terminal; another signal ends only the programs
    /// it kills, and the line goes on, as in a terminal shell.
    async fn signal_command(&self, signal: Signal) -> Result<(), ToolError> {
        if self.inspect(|s| s.shell().is_none()) {
            return Err(ToolError::invalid_argument(
                "target",
                "`command` is for a shell session (one that runs terminal_exec); use \
                 `group` or `leader`",
            ));
        }
        let shell = self.shell_group();
        let running = self.running_command();
        let nothing = || {
            let why = match (running.is_some(), self.mode) {
                (false, _) => {
                    "no terminal_exec command runs in the shell now (a program a line of \
                     terminal_write started is no command: target `group` reaches it)"
                }
                (true, Mode::Pty) => {
                    "the shell itself runs the command (a loop or a builtin of its own, \
                     in its foreground): end it with terminal_keys [\"C-c\"]"
                }
                (true, Mode::Pipe) => {
                    "the shell itself runs the command (a loop or a builtin of its own): \
                     SIGINT ends the command line"
                }
            };
            ToolError::invalid_argument(
                "target",
                format!("`command` found nothing to signal: {why}"),
            )
        };
        match self.mode {
            Mode::Pty => match self.terminal().and_then(|t| t.foreground()) {
                Some(group) if group != shell => signal_group(group, signal),
                _ => return Err(nothing()),
            },
            // Ctrl-C ends the command line, as at a terminal: the timeout's interrupt.
            Mode::Pipe if signal == Signal::SIGINT => {
                let Some(seq) = running else {
                    return Err(nothing());
                };
                self.interrupt_command(seq, Instant::now() + EXEC_INTERRUPT_SETTLE)
                    .await;
            }
            Mode::Pipe => {
                // A job an earlier command left in the background (`server &`) is in the
                // shell's session too: only what started since this command began is its.
                let Some(start) = self.command_start() else {
                    return Err(nothing());
                };
                let members = tokio::task::spawn_blocking(move || start.members(shell))
                    .await
                    .unwrap_or_default();
                // Another signal ends only the programs it kills, and the line goes on.
                if members.is_empty() {
                    return Err(nothing());
                }
                for pid in members {
                    signal_process(pid, signal);
                }
            }
        }
        Ok(())
    }

    pub(super) fn not_running(&self) -> ToolError {
        let ending = self.inspect(|s| s.ending());
        ToolError::new(
            ErrorCode::SessionNotRunning,
            format!(
                "session {} is not running: {ending}; read its output, or start a new \
                 session",
                self.id
            ),
        )
    }
}

/// When the command running in a pipe shell began, to tell the processes it started from
/// a job an earlier command left in the background (`server &`), which is in the shell's
/// session too.
pub(crate) struct CommandStart {
    began: std::time::SystemTime,
    /// The last process ID given out before the command was typed.
    before: i32,
}

impl Session {
    /// The sequence number of the shell's command running now, if one runs.
    pub(crate) fn running_command(&self) -> Option<u64> {
        self.inspect(|s| s.shell()?.running().map(|c| c.seq))
    }

    /// The running command's start; `None` when no command runs.
    pub(crate) fn command_start(&self) -> Option<CommandStart> {
        let began = self.inspect(|s| s.shell()?.running().map(|c| c.began_at))?;
        Some(CommandStart {
            began,
            before: self.pids_before_command.load(Ordering::Relaxed),
        })
    }
}

impl CommandStart {
    /// The processes of `shell`'s session but the shell that started since the command
    /// began (reads /proc: off the async thread): told by start time (to the clock tick)
    /// and, unless the IDs wrapped around since, by process ID (given out in order), which
    /// tells apart what started in the same tick.
    pub(crate) fn members(&self, shell: i32) -> Vec<i32> {
        let before = self.before;
        let ago = self.began.elapsed().unwrap_or_default();
        let by_id = before > 0 && procfs::last_pid().is_some_and(|now| now >= before);
        let since = procfs::ticks_since_boot(ago);
        // Both where both can be told: an ID given out before the IDs last wrapped around
        // may be above `before`. The start time is told to a tick, less one: the command's
        // clock and the kernel's count of ticks round the same moment apart, and a program
        // the command started in its first tick is its.
        let new = |pid: i32| {
            if by_id && pid <= before {
                return false;
            }
            let started = procfs::stat(pid).map(|s| s.started);
            since.is_none_or(|since| started.is_some_and(|at| at + 1 >= since))
        };
        procfs::session_members(shell)
            .into_iter()
            .filter(|pid| *pid != shell && new(*pid))
            .collect()
    }
}
