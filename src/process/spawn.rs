//! Spawning a child with piped stdio in a new session (setsid), so that it leads its own
//! process group and has no controlling terminal of the server's.

use std::os::fd::{AsFd, OwnedFd};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use tokio::net::unix::pipe;

use super::launch::{self, Launch, Stdio};
use super::reaper::Failed;
use super::{ExitReceiver, Reaper};
use crate::limits::SPAWN_DEADLINE;

pub struct SpawnSpec {
    pub argv: Vec<String>,
    /// The complete environment; nothing is inherited.
    pub env: Vec<(String, String)>,
    /// Opens the working directory (the child `fchdir`s into it).
    pub cwd: OpenCwd,
    /// Pipes only: give the child a pipe at `MARKS_FD` too (its read end is
    /// `PipeChild::marks`), for a shell's integration to write to, and copies of its
    /// stdout and stderr at `STDOUT_COPY_FD` and `STDERR_COPY_FD`, which stay on the
    /// session's pipes whatever the shell later does with its stdout and stderr.
    pub marks: bool,
}

/// Opens a child's working directory, or refuses the start. Opening a path may block on a
/// file system that does not answer, so it runs on the spawner thread right before the
/// spawn, within the start's deadline (a stuck one fails the start with `CwdStuck`), not
/// on a thread of its own and back, which would cost every start two more wake-ups.
pub type OpenCwd = Box<dyn FnOnce() -> Result<OwnedFd, SpawnError> + Send>;

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
    /// The cwd's opener refused the start; it kept its reason for its caller.
    Refused,
    /// Opening the working directory did not finish within the spawn deadline.
    CwdStuck,
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

pub async fn spawn_pipes(spec: SpawnSpec, reaper: &Reaper) -> Result<PipeChild, SpawnError> {
    let SpawnSpec {
        argv,
        env,
        cwd,
        marks,
    } = spec;
    let program = argv.first().cloned().unwrap_or_default();
    let failed = |e: std::io::Error| set_up_failed(&program, &e);
    let pipe = || nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| failed(e.into()));
    let (stdin, to_stdin) = pipe()?;
    let (from_stdout, stdout) = pipe()?;
    let (from_stderr, stderr) = pipe()?;
    let (marks, marks_write) = if marks { Some(pipe()?) } else { None }.unzip();
    let stdio = Stdio {
        std: [stdin, stdout, stderr],
        marks: marks_write,
        terminal: false,
    };
    // The launch holds the child's ends, closed once it ran: the parent's copies would
    // keep the child's stdin open and its output from ever ending.
    let (pid, exit) = start(argv, env, cwd, stdio, reaper).await?;
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

/// Open the cwd, prepare the launch and start it, on a spawner thread; the child's PID and
/// where its end will come.
pub(super) async fn start(
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: OpenCwd,
    stdio: Stdio,
    reaper: &Reaper,
) -> Result<(i32, ExitReceiver), SpawnError> {
    let program = argv.first().cloned().unwrap_or_default();
    let (forked, report) = launch::report_pipe().map_err(|e| set_up_failed(&program, &e))?;
    let prepare = {
        let program = program.clone();
        move || {
            let cwd = cwd()?;
            Launch::new(&argv, &env, cwd, stdio, report).map_err(|e| set_up_failed(&program, &e))
        }
    };
    let spawn = |launch: Launch| match launch.start() {
        Ok(pid) => Ok(((), pid)),
        Err(e) => Err(describe(launch.program(), launch.cwd(), &e)),
    };
    let spawned = reaper.spawn_prepared(prepare, spawn, forked).await;
    let ((), pid, exit) = spawned.map_err(|failed| match failed {
        Failed::Said(e) => e,
        Failed::TimedOut { preparing: true } => SpawnError::CwdStuck,
        // Not `can_enter`: the cwd may be what does not answer.
        Failed::TimedOut { preparing: false } => SpawnError::Program(format!(
            "`{program}` did not start within {} s: its program or cwd is on a file system \
             that does not answer; it was killed; ask the owner to check that file system",
            SPAWN_DEADLINE.as_secs()
        )),
        Failed::Gone => SpawnError::Program(format!(
            "cannot start `{program}`: the server's spawner thread is gone; restart the server"
        )),
    })?;
    Ok((pid, exit))
}

/// Why the pipes, terminal or strings of `program`'s start could not be set up.
fn set_up_failed(program: &str, e: &std::io::Error) -> SpawnError {
    if e.raw_os_error().is_some_and(super::is_out_of_files) {
        return SpawnError::OutOfFiles;
    }
    SpawnError::Program(format!(
        "cannot start `{program}`: the system refused to start it; ask the owner to fix the \
         profile's argv"
    ))
}

/// Why `program` failed to start in `cwd`. The child's `fchdir` and `execve` both report
/// EACCES, so a failure is the cwd's when the directory cannot be entered now.
fn describe(program: &str, cwd: &impl AsFd, e: &std::io::Error) -> SpawnError {
    use std::io::ErrorKind;
    if e.raw_os_error().is_some_and(super::is_out_of_files) {
        return SpawnError::OutOfFiles;
    }
    match can_enter(cwd) {
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
        let root = nix::fcntl::open("/", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).unwrap();
        for errno in [libc::EMFILE, libc::ENFILE] {
            let error = std::io::Error::from_raw_os_error(errno);
            assert!(matches!(
                describe("/bin/true", &root, &error),
                SpawnError::OutOfFiles
            ));
            assert!(matches!(
                set_up_failed("/bin/true", &error),
                SpawnError::OutOfFiles
            ));
        }
        let missing = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert!(matches!(
            describe("/bin/true", &root, &missing),
            SpawnError::Program(_)
        ));
    }
}
