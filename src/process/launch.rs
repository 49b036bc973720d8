//! Starting a session's program without copying the server.
//!
//! A `fork` of the server copies its page tables and leaves every later write of the
//! server's threads a copy-on-write fault, all for a child that execs at once. `posix_spawn`
//! avoids that with a `clone(CLONE_VM | CLONE_VFORK)`: the child borrows the server's memory,
//! on a stack of its own, until its `execve`, while the thread that spawned it waits. It
//! cannot take the steps a session's child needs before its exec (`PR_SET_PDEATHSIG`, its
//! PID reported before anything in it can block), so this module makes the same clone and
//! runs those steps itself, as system calls only, on data prepared before the clone: the
//! child touches no allocator and no lock; of the server's memory it writes only its error
//! slot and the spawner thread's `errno` (the child shares that thread's TLS), while the
//! spawner is suspended.
//!
//! Flow at a glance: `Launch::new` (on a spawner thread, once the cwd is open) prepares the
//! program, argv and environment as C strings and holds the descriptors the child gets;
//! `Launch::start` (on the same thread) blocks every signal, clones, and returns once the
//! child has reached its `execve` (its PID) or failed before it (the errno of its failing
//! step; the child is reaped here). A child killed inside a stuck `execve` counts as started: its end comes as
//! any leader's, and a start that gave up kills what it started (`Reaper::spawn_prepared`).

use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

use nix::fcntl::OFlag;

use super::spawn::{MARKS_FD, STDERR_COPY_FD, STDOUT_COPY_FD};

/// Where a program's stdio and a pipe shell's marks pipe come from.
pub(super) struct Stdio {
    /// What the child gets as stdin, stdout and stderr.
    pub std: [OwnedFd; 3],
    /// A pipe shell's marks pipe (its write end): the child gets it at `MARKS_FD`, and
    /// copies of its first stdout and stderr at `STDOUT_COPY_FD` and `STDERR_COPY_FD`.
    pub marks: Option<OwnedFd>,
    /// The child's stdin is a terminal, to become its controlling terminal.
    pub terminal: bool,
}

/// A program ready to start: everything the child reads, prepared and owned here, so that
/// it outlives the child's use of it whatever the caller does meanwhile.
pub(super) struct Launch {
    /// The program's path first.
    argv: Vec<CString>,
    env: Vec<CString>,
    cwd: OwnedFd,
    /// Where the child writes its PID first thing.
    report: OwnedFd,
    stdio: Stdio,
    /// The server's PID: a child whose parent is no longer it was orphaned before its
    /// parent-death signal was set.
    server: libc::pid_t,
    /// Tests only: after its `setsid`, the child writes its PID to the descriptor and opens
    /// the path for reading, which blocks on a FIFO without a writer (a hung file system).
    #[cfg(test)]
    pub(super) hang: Option<(OwnedFd, CString)>,
}

/// The pipe a started child writes its PID to first thing: the read end, for the start
/// to kill the child should it get stuck, and the write end, for `Launch::new`.
pub(super) fn report_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?)
}

impl Launch {
    /// `argv[0]` with `argv` and `env`, in `cwd`, with `stdio`, reporting its PID to
    /// `report`. `InvalidInput` when an argument or a variable holds a NUL byte.
    pub fn new(
        argv: &[String],
        env: &[(String, String)],
        cwd: OwnedFd,
        stdio: Stdio,
        report: OwnedFd,
    ) -> io::Result<Launch> {
        let c_string =
            |s: String| CString::new(s).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
        let argv = (argv.iter().cloned().map(c_string)).collect::<io::Result<Vec<_>>>()?;
        let env = env.iter().map(|(k, v)| c_string(format!("{k}={v}")));
        let env = env.collect::<io::Result<Vec<_>>>()?;
        let [stdin, stdout, stderr] = stdio.std;
        // Every descriptor the child uses must survive its dup2 onto 0, 1 and 2.
        let stdio = Stdio {
            std: [
                above_stdio(stdin)?,
                above_stdio(stdout)?,
                above_stdio(stderr)?,
            ],
            marks: stdio.marks.map(above_stdio).transpose()?,
            terminal: stdio.terminal,
        };
        Ok(Launch {
            argv,
            env,
            cwd: above_stdio(cwd)?,
            report: above_stdio(report)?,
            stdio,
            server: std::process::id() as libc::pid_t,
            #[cfg(test)]
            hang: None,
        })
    }

    /// The program's path, as given.
    pub fn program(&self) -> &str {
        self.argv
            .first()
            .and_then(|p| p.to_str().ok())
            .unwrap_or_default()
    }

    /// The directory the child starts in.
    pub fn cwd(&self) -> &OwnedFd {
        &self.cwd
    }

    /// Start the program; on a spawner thread (its parent-death signal follows this thread),
    /// which waits here until the child has exec'd or ended. The child's PID, or why it did
    /// not start.
    pub fn start(&self) -> io::Result<i32> {
        let argv = pointers(&self.argv);
        let program = self
            .argv
            .first()
            .ok_or(io::ErrorKind::InvalidInput)?
            .as_ptr();
        let env = pointers(&self.env);
        // For a file the kernel does not know how to run, what `execvp` does: `/bin/sh` runs it.
        let mut script = vec![c"/bin/sh".as_ptr(), program];
        script.extend_from_slice(&argv[1..]);
        let child = Child {
            launch: self,
            program,
            argv,
            env,
            script,
            error: AtomicI32::new(NOT_EXECUTED),
        };
        let pid = STACK.with_borrow_mut(|stack| {
            let top = match stack {
                Some(stack) => stack.top(),
                None => stack.insert(Stack::new()?).top(),
            };
            let mut before = 0u64;
            // SAFETY: rt_sigprocmask only reads and writes the two 64-bit sets here. The child
            // runs `run` on a stack of its own that nothing else uses (the spawner holds it,
            // borrowed here, until the clone returns) and reads `child`, which lives until
            // then: CLONE_VFORK suspends this thread until the child execs or exits. Every
            // signal is blocked across the clone, with the raw system call (the C library's
            // mask leaves its own two signals open), so no handler of the server runs on the
            // child's stack; the child sets them to their defaults before unblocking.
            unsafe {
                let mask = |set: &u64, old: *mut u64| {
                    libc::syscall(libc::SYS_rt_sigprocmask, libc::SIG_SETMASK, set, old, 8)
                };
                mask(&u64::MAX, &raw mut before);
                let pid = libc::clone(
                    run,
                    top,
                    libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                    (&raw const child).cast_mut().cast(),
                );
                let cloned = if pid == -1 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(pid)
                };
                mask(&before, std::ptr::null_mut());
                cloned
            }
        })?;
        match child.error.load(Ordering::SeqCst) {
            0 => Ok(pid),
            error => {
                // It ended before its exec; nobody else reaps it (see `Reaper::spawn_prepared`).
                while let Err(nix::errno::Errno::EINTR) =
                    nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None)
                {}
                Err(match error {
                    NOT_EXECUTED => io::Error::other("the child was killed before its exec"),
                    errno => io::Error::from_raw_os_error(errno),
                })
            }
        }
    }
}

/// What the child reads: its launch, and the argument and environment arrays of `execve`.
struct Child<'a> {
    launch: &'a Launch,
    program: *const c_char,
    argv: Vec<*const c_char>,
    env: Vec<*const c_char>,
    script: Vec<*const c_char>,
    /// The errno of the child's failing step; 0 once it reached its `execve`, which returns
    /// only on failure; `NOT_EXECUTED` if it ended (was killed) before reaching it.
    error: AtomicI32,
}

const NOT_EXECUTED: i32 = -1;

/// A NULL-terminated array of the strings' pointers.
fn pointers(strings: &[CString]) -> Vec<*const c_char> {
    let mut pointers: Vec<_> = strings.iter().map(|s| s.as_ptr()).collect();
    pointers.push(std::ptr::null());
    pointers
}

/// `fd`, moved above stderr if it is one of 0, 1 and 2 (the server's own stdio was closed).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    Ok(
        nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3)).map(|raw| {
            // SAFETY: F_DUPFD_CLOEXEC returned a new descriptor owned by nothing else.
            unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) }
        })?,
    )
}

/// The child, between the clone and its exec: it records why it failed and exits.
extern "C" fn run(child: *mut c_void) -> c_int {
    // SAFETY: the parent passed a `Child` that outlives the child's use of it (see `start`).
    let child = unsafe { &*child.cast::<Child>() };
    // SAFETY: `steps` makes only system calls, on descriptors and strings `child` owns.
    let errno = unsafe { steps(child) };
    child.error.store(errno, Ordering::SeqCst);
    // SAFETY: _exit ends this process (not the server: no CLONE_THREAD) without running
    // anything of the server's.
    unsafe { libc::_exit(127) }
}

/// The child's steps, in order; returns only on failure, with the errno of the failing step.
unsafe fn steps(child: &Child) -> i32 {
    let launch = child.launch;
    let failed = || unsafe { *libc::__errno_location() };
    unsafe {
        reset_signals();
        // First, before anything that can block on a file system (`fchdir`, exec): the PID,
        // so that a spawn stuck here can be ended (`Reaper::spawn_prepared`).
        let pid = libc::getpid();
        let size = std::mem::size_of::<libc::pid_t>();
        // The raw call: the C library's `write` is a cancellation point, which would touch
        // the spawner thread's cancellation state.
        let report = launch.report.as_raw_fd();
        libc::syscall(libc::SYS_write, report, &raw const pid, size);
        for (fd, source) in launch.stdio.std.iter().enumerate() {
            if !install(source.as_raw_fd(), fd as c_int) {
                return failed();
            }
        }
        if libc::fchdir(launch.cwd.as_raw_fd()) == -1 {
            return failed();
        }
        // The leader dies with the server. The kernel sends this when the *thread* that
        // started it ends, so starts run on the reaper's spawner threads, which live as long
        // as the server (never a blocking-pool thread, which ends when idle).
        let kill = libc::SIGKILL as libc::c_ulong;
        if libc::prctl(libc::PR_SET_PDEATHSIG, kill, 0, 0, 0) == -1 {
            return failed();
        }
        // The server died before the line above: nobody would send the signal.
        if libc::getppid() != launch.server {
            return libc::ESRCH;
        }
        // A process group and POSIX session of its own, with no controlling terminal of the
        // server's.
        if libc::setsid() == -1 {
            return failed();
        }
        #[cfg(test)]
        if let Some((to_test, path)) = &launch.hang {
            libc::syscall(libc::SYS_write, to_test.as_raw_fd(), &raw const pid, size);
            libc::syscall(
                libc::SYS_openat,
                libc::AT_FDCWD,
                path.as_ptr(),
                libc::O_RDONLY,
            );
        }
        if launch.stdio.terminal && libc::ioctl(0, libc::TIOCSCTTY as _, 0) == -1 {
            return failed();
        }
        // Only the stdio it was given reaches the program: a descriptor another thread had
        // just opened and not yet marked close-on-exec (a terminal's two ends, in the moment
        // between `openpty` and `set_cloexec`) is closed at the exec.
        libc::close_range(3, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC as _);
        if let Some(marks) = &launch.stdio.marks {
            let copies = [
                (marks.as_raw_fd(), MARKS_FD),
                (1, STDOUT_COPY_FD),
                (2, STDERR_COPY_FD),
            ];
            for (source, target) in copies {
                if !install(source, target) {
                    return failed();
                }
            }
        }
        child.error.store(0, Ordering::SeqCst);
        let env = child.env.as_ptr();
        libc::execve(child.program, child.argv.as_ptr(), env);
        let errno = failed();
        if errno == libc::ENOEXEC {
            libc::execve(c"/bin/sh".as_ptr(), child.script.as_ptr(), env);
        }
        errno
    }
}

/// `source` at `target`, open across the exec: a `dup2`, or, when `source` is already there
/// (the marks pipe's write end may be descriptor 9 itself), its close-on-exec flag cleared,
/// which `dup2` onto itself would leave set.
unsafe fn install(source: c_int, target: c_int) -> bool {
    // SAFETY: dup2 and fcntl(F_SETFD) only change the descriptor table.
    unsafe {
        if source == target {
            libc::fcntl(target, libc::F_SETFD, 0) != -1
        } else {
            libc::dup2(source, target) != -1
        }
    }
}

/// Signal dispositions and the mask start at their defaults, whatever the server inherited
/// (`nohup` ignores SIGHUP, and an ignored signal stays ignored across exec), so the owner's
/// programs can be signalled as usual. Raw system calls, because the C library refuses to
/// touch the signals it reserves.
unsafe fn reset_signals() {
    // An all-zero kernel sigaction is SIG_DFL with no flags and an empty mask, whatever
    // the architecture's field order; the kernel's signal sets are 64 bits.
    let default = [0u64; 4];
    let empty = 0u64;
    // SAFETY: rt_sigaction and rt_sigprocmask only read the buffers above; numbers that
    // are not signals, or cannot be changed, just fail.
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

/// The stack a child runs on until its exec, one per spawner thread, mapped once: with a
/// guard page below it, so an overflow faults instead of writing over the server's memory.
struct Stack {
    base: *mut c_void,
}

const STACK_BYTES: usize = 256 * 1024;
const GUARD_BYTES: usize = 4096;

thread_local! {
    static STACK: RefCell<Option<Stack>> = const { RefCell::new(None) };
}

impl Stack {
    fn new() -> io::Result<Stack> {
        let len = GUARD_BYTES + STACK_BYTES;
        let protection = libc::PROT_READ | libc::PROT_WRITE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK;
        // SAFETY: a new anonymous mapping, owned by the returned `Stack` alone.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), len, protection, flags, -1, 0) };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base };
        // SAFETY: the guard is the mapping's first page.
        if unsafe { libc::mprotect(base, GUARD_BYTES, libc::PROT_NONE) } == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// Its highest address (the stack grows down), 16-byte aligned as the ABI wants.
    fn top(&self) -> *mut c_void {
        // SAFETY: one past the end of the mapping, which is page-aligned.
        unsafe { self.base.byte_add(GUARD_BYTES + STACK_BYTES) }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping is this `Stack`'s, and no child runs on it (a start holds it
        // borrowed until its child has exec'd or exited).
        unsafe { libc::munmap(self.base, GUARD_BYTES + STACK_BYTES) };
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::FromRawFd;

    use nix::sys::stat::Mode;

    use super::*;
    use crate::process::alone;

    #[test]
    fn a_marks_pipe_already_at_its_place_reaches_the_program() {
        alone("process::launch::tests::marks_at_their_place");
    }

    /// The marks pipe's write end is descriptor 9, where the child must find it: it stays
    /// open across the exec (a `dup2` onto itself would leave it close-on-exec).
    #[test]
    #[ignore = "run alone by a_marks_pipe_already_at_its_place_reaches_the_program"]
    fn marks_at_their_place() {
        let (marks, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        // SAFETY: dup3 onto 9 (free in this process of its own) returns a new descriptor.
        let at_nine = unsafe { libc::dup3(write.as_raw_fd(), MARKS_FD, libc::O_CLOEXEC) };
        assert_eq!(at_nine, MARKS_FD);
        drop(write);
        // SAFETY: descriptor 9 was just made here and is owned by nothing else.
        let at_nine = unsafe { OwnedFd::from_raw_fd(at_nine) };
        let null = || {
            let flags = OFlag::O_RDWR | OFlag::O_CLOEXEC;
            nix::fcntl::open("/dev/null", flags, Mode::empty()).unwrap()
        };
        let argv = ["/bin/sh", "-c", "echo mark >&9"].map(String::from);
        let cwd = nix::fcntl::open("/", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).unwrap();
        let stdio = Stdio {
            std: [null(), null(), null()],
            marks: Some(at_nine),
            terminal: false,
        };
        let (_forked, report) = report_pipe().unwrap();
        let launch = Launch::new(&argv, &[], cwd, stdio, report).unwrap();
        let pid = launch.start().unwrap();
        drop(launch);
        let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
        assert_eq!(
            status,
            nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 0)
        );
        let mut read = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(marks), &mut read).unwrap();
        assert_eq!(read, "mark\n");
    }
}
