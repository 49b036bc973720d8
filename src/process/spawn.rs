//! Spawning a child with piped stdio in a new session (setsid), so that it leads its own
//! process group and has no controlling terminal of the server's.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use tokio::net::unix::pipe;

use super::{ExitReceiver, Reaper};
use crate::limits::SPAWN_DEADLINE;

pub struct SpawnSpec {
    pub argv: Vec<String>,
    /// The complete environment; nothing is inherited.
    pub env: Vec<(String, String)>,
    /// The working directory, opened (the child `fchdir`s into it).
    pub cwd: OwnedFd,
    /// Pipes only: give the child a pipe at `MARKS_FD` too (its read end is
    /// `PipeChild::marks`), for a shell's integration to write to, and copies of its
    /// stdout and stderr at `STDOUT_COPY_FD` and `STDERR_COPY_FD`, which stay on the
    /// session's pipes whatever the shell later does with its stdout and stderr.
    pub marks: bool,
}

/// Where a shell on pipes finds the pipe for its integration's marks, and its first
/// stdout and stderr.
pub const MARKS_FD: i32 = 9;
pub const STDOUT_COPY_FD: i32 = 8;
pub const STDERR_COPY_FD: i32 = 7;

pub struct PipeChild {
    pub pid: i32,
    pub stdin: pipe::Sender,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
    /// The read end of the marks pipe, when the spec asked for one.
    pub marks: Option<pipe::Receiver>,
    pub exit: ExitReceiver,
}

/// Why a spawn failed, in words for the client (never raw OS text).
#[derive(Debug)]
pub enum SpawnError {
    /// The working directory cannot be entered.
    Cwd(String),
    /// The program could not be started, or its stdio set up.
    Program(String),
    /// The server (or the system) has no file descriptor to spare.
    OutOfFiles,
}

/// Whether the server (and so a child, which has its credentials) may enter `dir`: looking
/// up `.` in it needs the same search permission as `fchdir`. `Err` when that cannot be
/// known: the server is out of descriptors.
pub fn can_enter(dir: &impl AsFd) -> Result<bool, SpawnError> {
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    match nix::fcntl::openat(dir, ".", flags, Mode::empty()) {
        Ok(_) => Ok(true),
        Err(e) if super::is_out_of_files(e as i32) => Err(SpawnError::OutOfFiles),
        Err(_) => Ok(false),
    }
}

/// In the child between fork and exec: signal dispositions and the mask start at their
/// defaults, whatever the server inherited (`nohup` ignores SIGHUP, and an ignored signal
/// stays ignored across exec), so the owner's programs can be signalled as usual. Raw
/// system calls, because the C library refuses to touch the signals it reserves.
fn reset_signals() {
    // An all-zero kernel sigaction is SIG_DFL with no flags and an empty mask, whatever
    // the architecture's field order; the kernel's signal sets are 64 bits.
    let default = [0u64; 4];
    let empty = 0u64;
    // SAFETY: rt_sigaction and rt_sigprocmask are async-signal-safe and only read the
    // buffers above; numbers that are not signals, or cannot be changed, just fail.
    unsafe {
        for signal in 1..=64 {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                default.as_ptr(),
                std::ptr::null_mut::<u64>(),
                8,
            );
        }
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &empty,
            std::ptr::null_mut::<u64>(),
            8,
        );
    }
}

/// The spec's argv, with exactly its environment and working directory, and where the
/// forked child reports its PID first thing (for `Reaper::spawn_registered`).
pub(super) fn command(spec: &SpawnSpec) -> std::io::Result<(Command, OwnedFd)> {
    let (forked, report) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    let mut command = Command::new(&spec.argv[0]);
    // SAFETY: getpid and write are async-signal-safe; a PID fits an empty pipe at once.
    // First, before anything in the child that can block on a file system (`fchdir`, exec).
    unsafe {
        command.pre_exec(move || {
            let pid = libc::getpid();
            let size = std::mem::size_of::<libc::pid_t>();
            libc::write(report.as_raw_fd(), (&raw const pid).cast(), size);
            Ok(())
        });
    }
    command
        .args(&spec.argv[1..])
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)));
    let cwd = spec.cwd.as_raw_fd();
    let server = std::process::id() as libc::pid_t;
    // SAFETY: fchdir, prctl, getppid and close_range are async-signal-safe (so is
    // `reset_signals`); the descriptor outlives the spawn (the spec owns it) and is closed
    // in the child at exec (CLOEXEC).
    unsafe {
        command.pre_exec(move || {
            reset_signals();
            if libc::fchdir(cwd) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // The leader dies with the server. The kernel sends this when the *thread* that
            // forked ends, so spawns run on the reaper's spawner thread, which lives as long
            // as the server (never a blocking-pool thread, which ends when idle).
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) == -1
            {
                return Err(std::io::Error::last_os_error());
            }
            // The server died before the line above: nobody would send the signal.
            if libc::getppid() != server {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            // Only the stdio it was given reaches the program: a descriptor another thread
            // had just opened and not yet marked close-on-exec (a terminal's two ends, in
            // the moment between `openpty` and `set_cloexec`) is closed at the exec.
            libc::close_range(3, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC as _);
            Ok(())
        });
    }
    Ok((command, forked))
}

pub async fn spawn_pipes(spec: &SpawnSpec, reaper: &Reaper) -> Result<PipeChild, SpawnError> {
    let program = &spec.argv[0];
    let (mut command, forked) = command(spec).map_err(|e| describe(spec, &e))?;
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let marks = if spec.marks {
        Some(nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| describe(spec, &e.into()))?)
    } else {
        None
    };
    let marks_write = marks.as_ref().map(|(_, write)| write.as_raw_fd());
    // SAFETY: setsid and dup2 are async-signal-safe and touch no memory of the parent; the
    // marks pipe outlives the spawn (it is dropped below, after it).
    unsafe {
        command.pre_exec(move || {
            nix::unistd::setsid()
                .map(drop)
                .map_err(std::io::Error::from)?;
            // dup2 leaves the copies open across exec.
            if let Some(write) = marks_write
                && (libc::dup2(write, MARKS_FD) == -1
                    || libc::dup2(1, STDOUT_COPY_FD) == -1
                    || libc::dup2(2, STDERR_COPY_FD) == -1)
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let spawned = reaper
        .spawn_registered(
            move || {
                let child = command.spawn()?;
                let pid = child.id() as i32;
                Ok((child, pid))
            },
            forked,
        )
        .await;
    let (mut child, pid, exit) = spawned.map_err(|e| describe(spec, &e))?;
    // The child has its copy: the write end must close here, or the marks pipe never ends.
    let marks = marks.map(|(read, _write)| read);
    let pipes = (|| -> std::io::Result<_> {
        let stdin = pipe::Sender::from_owned_fd(child.stdin.take().expect("piped").into())?;
        let stdout = pipe::Receiver::from_owned_fd(child.stdout.take().expect("piped").into())?;
        let stderr = pipe::Receiver::from_owned_fd(child.stderr.take().expect("piped").into())?;
        let marks = marks.map(pipe::Receiver::from_owned_fd).transpose()?;
        Ok((stdin, stdout, stderr, marks))
    })();
    match pipes {
        Ok((stdin, stdout, stderr, marks)) => Ok(PipeChild {
            pid,
            stdin,
            stdout,
            stderr,
            marks,
            exit,
        }),
        Err(_) => {
            super::signal_group(pid, nix::sys::signal::Signal::SIGKILL);
            Err(SpawnError::Program(format!(
                "`{program}` started but its pipes could not be set up; it was killed"
            )))
        }
    }
}

/// Why `spec` failed to start. The child's `fchdir` and `execve` both report EACCES, so a
/// failure is the cwd's when the directory cannot be entered now.
pub(super) fn describe(spec: &SpawnSpec, e: &std::io::Error) -> SpawnError {
    use std::io::ErrorKind;
    let program = &spec.argv[0];
    if e.raw_os_error().is_some_and(super::is_out_of_files) {
        return SpawnError::OutOfFiles;
    }
    if e.kind() == ErrorKind::TimedOut {
        // Not `can_enter`: the cwd may be what does not answer.
        return SpawnError::Program(format!(
            "`{program}` did not start within {} s: its program or cwd is on a file system \
             that does not answer; it was killed; ask the owner to check that file system",
            SPAWN_DEADLINE.as_secs()
        ));
    }
    match can_enter(&spec.cwd) {
        Ok(true) => {}
        Ok(false) => {
            return SpawnError::Cwd(
                "cannot be entered by the server (no search permission on the directory)".into(),
            );
        }
        Err(e) => return e,
    }
    let why = match e.kind() {
        ErrorKind::NotFound => "the executable does not exist",
        ErrorKind::PermissionDenied => "permission denied (not executable, or a directory)",
        _ if e.raw_os_error() == Some(libc::ENOEXEC) => "not an executable format",
        _ if e.raw_os_error() == Some(libc::ENOTDIR) => "a path component is not a directory",
        _ if e.raw_os_error() == Some(libc::EAGAIN) => "the system refused a new process",
        _ => "the system refused to start it",
    };
    SpawnError::Program(format!(
        "cannot start `{program}`: {why}; ask the owner to fix the profile's argv"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Out of descriptors, the cwd check itself cannot run: the failure is neither the
    /// cwd's nor the program's.
    #[test]
    fn running_out_of_descriptors_is_told_apart() {
        let spec = SpawnSpec {
            marks: false,
            argv: vec!["/bin/true".into()],
            env: Vec::new(),
            cwd: nix::fcntl::open("/", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).unwrap(),
        };
        for errno in [libc::EMFILE, libc::ENFILE] {
            let error = std::io::Error::from_raw_os_error(errno);
            assert!(matches!(describe(&spec, &error), SpawnError::OutOfFiles));
        }
        let missing = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert!(matches!(describe(&spec, &missing), SpawnError::Program(_)));
    }
}
