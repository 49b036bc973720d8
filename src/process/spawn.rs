//! Spawning a child with piped stdio in a new session (setsid), so that it leads its own
//! process group and has no controlling terminal of the server's.

use std::os::fd::{AsFd, OwnedFd};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use tokio::net::unix::pipe;

use super::launch::{Launch, Stdio};
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

pub async fn spawn_pipes(spec: &SpawnSpec, reaper: &Reaper) -> Result<PipeChild, SpawnError> {
    let program = &spec.argv[0];
    let failed = |e: std::io::Error| describe(spec, &e);
    let pipe = || nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| failed(e.into()));
    let (stdin, to_stdin) = pipe()?;
    let (from_stdout, stdout) = pipe()?;
    let (from_stderr, stderr) = pipe()?;
    let (marks, marks_write) = if spec.marks { Some(pipe()?) } else { None }.unzip();
    let stdio = Stdio {
        std: [stdin, stdout, stderr],
        marks: marks_write,
        terminal: false,
    };
    let (launch, forked) = Launch::new(spec, stdio).map_err(failed)?;
    // The launch holds the child's ends, closed here once it ran: the parent's copies
    // would keep the child's stdin open and its output from ever ending.
    let spawned = reaper
        .spawn_registered(move || Ok(((), launch.start()?)), forked)
        .await;
    let ((), pid, exit) = spawned.map_err(failed)?;
    let pipes = (|| -> std::io::Result<_> {
        let stdin = pipe::Sender::from_owned_fd(to_stdin)?;
        let stdout = pipe::Receiver::from_owned_fd(from_stdout)?;
        let stderr = pipe::Receiver::from_owned_fd(from_stderr)?;
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
