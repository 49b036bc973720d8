//! Spawning a child on a new pseudo-terminal: the child gets the slave as stdin, stdout and
//! stderr and as its controlling terminal (setsid + TIOCSCTTY); the server keeps the master,
//! non-blocking and registered with the reactor, so no thread per session blocks on it.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use nix::pty::{Winsize, openpty};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::launch::Stdio;
use super::spawn::{SpawnError, SpawnSpec, start};
use super::{ExitReceiver, Reaper};

/// The characters a terminal's line discipline edits the typed line with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineControls {
    /// Sends the line typed so far; at the start of a line, end of input.
    pub eof: u8,
    /// Erases the last character.
    pub erase: u8,
    /// Erases the line.
    pub kill: u8,
    /// Interrupt, quit and suspend: they signal the job and discard the line.
    pub flushing: [u8; 3],
}

/// How to type a line whole (`PtyMaster::whole_line`): `clear` before it, `enter` after.
pub struct WholeLine {
    pub clear: Vec<u8>,
    pub enter: &'static str,
    /// The terminal reads lines, so the line must fit `TERMINAL_LINE_MAX_BYTES`.
    pub canonical: bool,
}

/// The server's end of a session's terminal.
pub struct PtyMaster {
    fd: AsyncFd<OwnedFd>,
    /// The terminal's path (`/dev/pts/N`), as `/proc/PID/fd` names it in its programs.
    path: Option<String>,
}

pub struct PtyChild {
    pub pid: i32,
    pub master: PtyMaster,
    pub exit: ExitReceiver,
}

fn winsize(rows: u16, cols: u16) -> Winsize {
    Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

/// A line-editing character's default, as `stty sane` sets it (Ctrl-C, Ctrl-\\, Ctrl-Z,
/// Ctrl-D, Ctrl-U, DEL).
fn default_control(role: nix::sys::termios::SpecialCharacterIndices) -> u8 {
    use nix::sys::termios::SpecialCharacterIndices as C;
    match role {
        C::VINTR => 0x03,
        C::VQUIT => 0x1c,
        C::VSUSP => 0x1a,
        C::VEOF => 0x04,
        C::VKILL => 0x15,
        _ => 0x7f,
    }
}

fn set_cloexec(fd: &OwnedFd) -> io::Result<()> {
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    Ok(())
}

/// The line discipline as a modern terminal emulator sets it: UTF-8 aware erase (IUTF8, so
/// Backspace removes a whole character, not its last byte), and no XON/XOFF flow control
/// (an agent that sends C-s would freeze the output with nothing to send C-q).
fn set_modes(slave: &OwnedFd) -> io::Result<()> {
    use nix::sys::termios::{InputFlags, SetArg, tcgetattr, tcsetattr};
    let mut modes = tcgetattr(slave)?;
    modes.input_flags |= InputFlags::IUTF8;
    modes.input_flags &= !(InputFlags::IXON | InputFlags::IXOFF | InputFlags::IXANY);
    tcsetattr(slave, SetArg::TCSANOW, &modes)?;
    Ok(())
}

pub async fn spawn_pty(
    spec: SpawnSpec,
    rows: u16,
    cols: u16,
    reaper: &Reaper,
) -> Result<PtyChild, SpawnError> {
    let program = spec.argv.first().cloned().unwrap_or_default();
    let setup_failed = |e: io::Error| {
        if e.raw_os_error().is_some_and(super::is_out_of_files) {
            return SpawnError::OutOfFiles;
        }
        SpawnError::Program(format!("cannot open a terminal for `{program}`; try again"))
    };
    let pty = openpty(&winsize(rows, cols), None).map_err(|e| setup_failed(io::Error::from(e)))?;
    // Other children must not inherit either end (a stray slave would keep EOF away).
    set_cloexec(&pty.master).map_err(setup_failed)?;
    set_cloexec(&pty.slave).map_err(setup_failed)?;
    set_modes(&pty.slave).map_err(setup_failed)?;
    let path = std::fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd()))
        .ok()
        .map(|p| p.display().to_string());
    let slave = || pty.slave.try_clone().map_err(setup_failed);
    let stdio = Stdio {
        std: [slave()?, slave()?, slave()?],
        marks: None,
        terminal: true,
    };
    // The parent's copies of the slave must go, or the master never sees EOF: the
    // launch's go with it once it ran.
    drop(pty.slave);
    let (pid, exit) = start(spec.argv, spec.env, spec.cwd, stdio, reaper).await?;
    let flags = fcntl(&pty.master, FcntlArg::F_GETFL)
        .map(OFlag::from_bits_truncate)
        .and_then(|flags| fcntl(&pty.master, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK)));
    // Registered for reading only: a terminal's master is writable again after every byte
    // its program reads, and each of those edges would wake the reactor (a typed command
    // of n bytes, n wake-ups). A write that finds the terminal full waits on a copy
    // registered for writing while it waits (`PtyMaster::write`).
    // SAFETY: the fd is an open, non-blocking pty master owned here and by nothing else.
    let registered = flags.map_err(io::Error::from).and_then(|_| {
        unsafe { AsyncFd::register_with_interest(pty.master, Interest::READABLE) }
            .map_err(|_| io::Error::other("registration with the reactor failed"))
    });
    match registered {
        Ok(fd) => Ok(PtyChild {
            pid,
            master: PtyMaster { fd, path },
            exit,
        }),
        Err(_) => {
            super::signal_group(pid, nix::sys::signal::Signal::SIGKILL);
            Err(SpawnError::Program(format!(
                "`{program}` started but its terminal could not be set up; it was killed"
            )))
        }
    }
}

impl std::os::fd::AsRawFd for PtyMaster {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.get_ref().as_raw_fd()
    }
}

impl PtyMaster {
    /// Read what the terminal produced; `Ok(0)` once every slave is closed (EIO).
    /// `idle` is cleared right before each read that may take bytes, and set back to what
    /// it was when the read took none.
    pub async fn read(&self, buf: &mut [u8], idle: &AtomicBool) -> io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            let was = idle.swap(false, Ordering::SeqCst);
            match guard.try_io(|fd| nix::unistd::read(fd.get_ref(), buf).map_err(io::Error::from)) {
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(result) => return result,
                Err(_would_block) => idle.store(was, Ordering::SeqCst),
            }
        }
    }

    /// Write some of `bytes` (at least one byte unless empty), waiting until the terminal
    /// takes input; returns how many it took.
    pub async fn write(&self, bytes: &[u8]) -> io::Result<usize> {
        if bytes.is_empty() {
            return Ok(0);
        }
        let mut watch = None;
        loop {
            match nix::unistd::write(self.fd.get_ref(), bytes) {
                Ok(written) => return Ok(written),
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => {
                    // The terminal's input is full until its program reads: wait for
                    // that on a copy of the master registered for writing (registering
                    // reports it at once if it came meanwhile).
                    let watch = match &mut watch {
                        Some(watch) => watch,
                        None => {
                            let copy = self.fd.get_ref().try_clone()?;
                            // SAFETY: the copy is open and owned by the AsyncFd alone.
                            let registered = unsafe {
                                AsyncFd::register_with_interest(copy, Interest::WRITABLE)
                            };
                            watch.insert(registered.map_err(|_| {
                                io::Error::other("registration with the reactor failed")
                            })?)
                        }
                    };
                    let mut ready = watch.writable().await?;
                    // Once no program holds the terminal, the master hangs up while its
                    // full input still refuses bytes (EAGAIN, not EIO): the hangup stays
                    // reported, so waiting again would return at once, for ever.
                    if ready.ready().is_write_closed() {
                        return Err(io::Error::from_raw_os_error(libc::EIO));
                    }
                    ready.clear_ready();
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Write without waiting; for short replies to the program's terminal queries.
    pub fn try_write(&self, bytes: &[u8]) {
        let _ = nix::unistd::write(self.fd.get_ref().as_fd(), bytes);
    }

    /// The line-editing characters as the program set them (the defaults where unset).
    pub fn line_controls(&self) -> LineControls {
        use nix::sys::termios::{SpecialCharacterIndices as I, tcgetattr};
        let chars = tcgetattr(self.fd.get_ref()).map(|t| t.control_chars).ok();
        let get = |index: I| {
            chars
                .map(|c| c[index as usize])
                .filter(|c| *c != 0)
                .unwrap_or_else(|| default_control(index))
        };
        LineControls {
            eof: get(I::VEOF),
            erase: get(I::VERASE),
            kill: get(I::VKILL),
            flushing: [get(I::VINTR), get(I::VQUIT), get(I::VSUSP)],
        }
    }

    /// Whether the terminal reads a line without echoing it (canonical mode, echo off):
    /// what `sudo`, `ssh` and `passwd` set at a password prompt.
    pub fn input_hidden(&self) -> bool {
        use nix::sys::termios::{LocalFlags, tcgetattr};
        tcgetattr(self.fd.get_ref()).is_ok_and(|t| {
            t.local_flags.contains(LocalFlags::ICANON) && !t.local_flags.contains(LocalFlags::ECHO)
        })
    }

    /// Whether the terminal reads lines (canonical mode), not keys.
    pub fn reads_lines(&self) -> bool {
        use nix::sys::termios::{LocalFlags, tcgetattr};
        tcgetattr(self.fd.get_ref()).is_ok_and(|t| t.local_flags.contains(LocalFlags::ICANON))
    }

    /// How to type `value` (a secret: redaction knows only the whole value) so that the
    /// program reads it whole and unchanged, as the terminal is set now; why not, else.
    ///
    /// Only where the terminal does not echo (a password prompt): an echo is output the
    /// kernel may split between a program's lines when input waits for room, or drop when
    /// output is stopped (Ctrl-S), and either leaves pieces of the value no redaction knows.
    /// Only with the terminal's special characters all control characters or disabled and
    /// its line handling standard, so that none of the value's bytes (never a control
    /// character) is acted on, the line's kill character only kills and its line end only
    /// ends it: the program may set any of them (stty), and each has been used to cut or
    /// edit a value. Reading lines (canonical mode), where the kernel keeps at most a line
    /// of `TERMINAL_LINE_MAX_BYTES` and drops what is typed past it, the line is first
    /// cleared with the kill character, twice (a first one taken literally after a pending
    /// Ctrl-V, the second clears), and ended with the byte the terminal takes as a line end,
    /// so the line is read at once and nothing typed later can edit it. Reading keys (raw
    /// mode), nothing is cut: no clearing, Enter as a keyboard sends it.
    pub fn whole_line(&self, value: &str) -> Result<WholeLine, &'static str> {
        use nix::sys::termios::{
            InputFlags, LocalFlags, OutputFlags, SpecialCharacterIndices as C, tcgetattr,
        };
        let Ok(t) = tcgetattr(self.fd.get_ref()) else {
            return Err("its terminal settings cannot be read");
        };
        let (input, local, output) = (t.input_flags, t.local_flags, t.output_flags);
        if local.contains(LocalFlags::ECHO) {
            return Err(
                "its terminal echoes what is typed (a secret is typed at a prompt that hides input: input_hidden true; run a program that asks with echo on through pipes)",
            );
        }
        if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return Err("the value holds a control character, which a terminal acts on");
        }
        let roles = [
            C::VINTR,
            C::VQUIT,
            C::VERASE,
            C::VKILL,
            C::VEOF,
            C::VEOL,
            C::VEOL2,
            C::VSTART,
            C::VSTOP,
            C::VSUSP,
            C::VREPRINT,
            C::VWERASE,
            C::VLNEXT,
        ];
        let chars: Vec<u8> = roles.iter().map(|c| t.control_chars[*c as usize]).collect();
        let kill = t.control_chars[C::VKILL as usize];
        let nonstandard = local.contains(LocalFlags::EXTPROC)
            || chars.iter().any(|b| *b != 0 && !b.is_ascii_control())
            || chars.iter().any(|b| *b == b'\r' || *b == b'\n')
            || (kill != 0 && chars.iter().filter(|b| **b == kill).count() > 1)
            || input.intersects(InputFlags::IGNCR | InputFlags::INLCR);
        if nonstandard {
            return Err(
                "the program set its terminal's special characters or line handling out of the ordinary (stty), and such settings have been used to cut or edit a value",
            );
        }
        let mapped = (input.contains(InputFlags::IUCLC) && value.chars().any(char::is_uppercase))
            || (input.contains(InputFlags::ISTRIP) && !value.is_ascii())
            || (output.contains(OutputFlags::OPOST | OutputFlags::OLCUC)
                && value.chars().any(char::is_lowercase))
            || (output.contains(OutputFlags::OPOST)
                && output & OutputFlags::TABDLY == OutputFlags::TAB3
                && value.contains('\t'));
        if mapped {
            return Err(
                "its terminal is set to change the case, the bits or the tabs of what is typed or printed",
            );
        }
        if !local.contains(LocalFlags::ICANON) {
            return Ok(WholeLine {
                clear: Vec::new(),
                enter: "\r",
                canonical: false,
            });
        }
        if kill == 0 {
            return Err(
                "its terminal has no line-kill character, so the line it would be typed on cannot be cleared first",
            );
        }
        let enter = if input.contains(InputFlags::ICRNL) {
            "\r"
        } else {
            "\n"
        };
        Ok(WholeLine {
            clear: vec![kill, kill],
            enter,
            canonical: true,
        })
    }

    /// Give the terminal back the line handling a shell that reads lines from it needs, as
    /// `stty sane` would, where a program changed it (a full-screen program that crashed
    /// leaves raw mode behind): lines read whole (`icanon`), the interrupt, quit and suspend
    /// characters sending their signals (`isig`), Enter read as a line end (`icrnl`, no
    /// `inlcr` or `igncr`), a newline written as CR LF (`opost onlcr`, no `ocrnl`), and the
    /// line's special characters that were turned off (`stty intr undef`) back at their
    /// defaults (one set to another key stays). Echo stays as it was set.
    pub fn restore_line_handling(&self) {
        use nix::sys::termios::{
            InputFlags, LocalFlags, OutputFlags, SetArg, SpecialCharacterIndices as C, tcgetattr,
            tcsetattr,
        };
        let Ok(mut t) = tcgetattr(self.fd.get_ref()) else {
            return;
        };
        let before = t.clone();
        t.local_flags |= LocalFlags::ICANON | LocalFlags::ISIG;
        t.input_flags |= InputFlags::ICRNL;
        t.input_flags &= !(InputFlags::INLCR | InputFlags::IGNCR);
        t.output_flags |= OutputFlags::OPOST | OutputFlags::ONLCR;
        t.output_flags &= !(OutputFlags::OCRNL | OutputFlags::ONLRET);
        for role in [C::VINTR, C::VQUIT, C::VSUSP, C::VEOF, C::VKILL, C::VERASE] {
            let c = &mut t.control_chars[role as usize];
            if *c == 0 {
                *c = default_control(role);
            }
        }
        let changed = t.local_flags != before.local_flags
            || t.input_flags != before.input_flags
            || t.output_flags != before.output_flags
            || t.control_chars != before.control_chars;
        if changed {
            let _ = tcsetattr(self.fd.get_ref(), SetArg::TCSANOW, &t);
        }
    }

    /// Whether the terminal turns its interrupt character into SIGINT (`isig` on, the
    /// character not turned off): a program that left raw mode behind makes it a plain byte.
    pub fn interrupts(&self) -> bool {
        use nix::sys::termios::{LocalFlags, SpecialCharacterIndices as C, tcgetattr};
        tcgetattr(self.fd.get_ref()).is_ok_and(|t| {
            t.local_flags.contains(LocalFlags::ISIG) && t.control_chars[C::VINTR as usize] != 0
        })
    }

    /// Whether the terminal hands its reader whole lines (`icanon`), as for a shell without
    /// a line editor; readline turns that off while it reads.
    pub fn reads_whole_lines(&self) -> bool {
        use nix::sys::termios::{LocalFlags, tcgetattr};
        tcgetattr(self.fd.get_ref()).is_ok_and(|t| t.local_flags.contains(LocalFlags::ICANON))
    }

    /// Whether the terminal echoes what is typed.
    pub fn echoes(&self) -> bool {
        use nix::sys::termios::{LocalFlags, tcgetattr};
        tcgetattr(self.fd.get_ref()).is_ok_and(|t| t.local_flags.contains(LocalFlags::ECHO))
    }

    /// Bytes the terminal's programs wrote that were not read yet.
    pub fn unread(&self) -> usize {
        super::unread(self.fd.get_ref().as_fd())
    }

    /// The terminal's path (`/dev/pts/N`), when it could be read.
    pub fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// The terminal's foreground process group.
    pub fn foreground(&self) -> Option<i32> {
        nix::unistd::tcgetpgrp(self.fd.get_ref())
            .ok()
            .map(|pgid| pgid.as_raw())
    }

    /// The terminal's size, rows and columns (24 × 80 when it cannot be read).
    pub fn size(&self) -> (u16, u16) {
        let mut size = winsize(24, 80);
        // SAFETY: TIOCGWINSZ writes one Winsize through the pointer, which outlives the call.
        let rc = unsafe { libc::ioctl(self.fd.get_ref().as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
        if rc == -1 {
            return (24, 80);
        }
        (size.ws_row, size.ws_col)
    }

    /// Set the window size; the kernel sends SIGWINCH to the terminal's foreground group.
    pub fn resize(&self, rows: u16, cols: u16) -> io::Result<()> {
        let size = winsize(rows, cols);
        // SAFETY: TIOCSWINSZ reads one Winsize from the pointer, which outlives the call.
        let rc = unsafe { libc::ioctl(self.fd.get_ref().as_raw_fd(), libc::TIOCSWINSZ, &size) };
        if rc == -1 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}
