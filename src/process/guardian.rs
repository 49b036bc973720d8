//! Nothing of a session outlives the server, however the server ends.
//!
//! Every process of a session carries an environment tag, `MCP_TERMINAL_SESSION=<server
//! instance>-<session id>`, inherited by whatever it starts, so it can be found wherever it
//! was reparented and whatever group or POSIX session it moved to. Before the first process
//! of a session is spawned, the server re-executes its own binary as a small guardian in a
//! POSIX session of its own (so signals to the server's group or terminal miss it), joined to
//! the server by a socket pair. A server that never starts a session never starts one: it is
//! not on the way to the server's first answer. The guardian blocks on its end; when the
//! server is gone (a clean exit, a crash, `kill -9`, the OOM killer) the kernel closes the
//! server's end, and the guardian kills every process carrying this server's tag, then exits. A clean shutdown
//! sweeps in the server too and waits for the guardian to finish, so none is left behind.
//! The server watches its end in turn: a guardian that dies first is replaced.
//!
//! A process is only ever signalled through a pidfd opened before its tag is checked, so a
//! PID reused meanwhile is never mistaken for a session's process; the instance is random
//! per server, so two servers never touch each other's sessions.

use std::collections::HashSet;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::policy::TAG_VAR;

/// The guardian's end of the socket pair, in the guardian process.
const WATCH_FD: RawFd = 3;
/// Hex digits of a server instance (a random u64).
const INSTANCE_DIGITS: usize = 16;
/// A sweep stops when two passes in a row find nothing, or after this long (a fork bomb
/// must not keep the guardian alive forever).
const SWEEP_BOUND: Duration = Duration::from_secs(5);
/// Pause between sweep passes while killed processes finish dying.
const SWEEP_PAUSE: Duration = Duration::from_millis(2);
/// How long a clean shutdown waits for the guardian to exit.
const GUARDIAN_EXIT_WAIT: Duration = Duration::from_secs(3);
/// Before a dead guardian is replaced.
const GUARDIAN_RESTART_PAUSE: Duration = Duration::from_millis(100);

/// A new random server instance: the first part of every tag this server sets.
pub fn new_instance() -> String {
    format!(
        "{:0width$x}",
        rand::random::<u64>(),
        width = INSTANCE_DIGITS
    )
}

/// The tag value of one session of `instance`.
pub fn session_tag(instance: &str, session_id: &str) -> String {
    format!("{instance}-{session_id}")
}

/// The server's handle on its guardian.
pub struct Guardian {
    watch: UnixStream,
    pid: i32,
}

impl Guardian {
    /// Start the guardian of `instance` by re-executing this binary.
    ///
    /// With `posix_spawn`, not `fork`: the child shares the parent's memory until its
    /// `exec` (no page tables copied; safe from any thread), it is put in a POSIX session
    /// of its own before the `exec` (`POSIX_SPAWN_SETSID`) with no signal blocked, and the
    /// caller waits for no more than that.
    pub fn start(instance: &str) -> io::Result<Guardian> {
        use std::ffi::CString;

        use nix::fcntl::OFlag;
        use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags, posix_spawn};
        use nix::sys::stat::Mode;

        let c_string = |bytes: &[u8]| {
            CString::new(bytes).map_err(|_| io::Error::other("a NUL byte in an argument"))
        };
        let (ours, theirs) = UnixStream::pair()?;
        // `dup2` onto its own number would keep close-on-exec set: move it off first.
        let theirs: OwnedFd = if theirs.as_raw_fd() == WATCH_FD {
            OwnedFd::from(theirs).try_clone()?
        } else {
            theirs.into()
        };
        let mut actions = PosixSpawnFileActions::init()?;
        actions.add_open(0, c"/dev/null", OFlag::O_RDONLY, Mode::empty())?;
        actions.add_open(1, c"/dev/null", OFlag::O_WRONLY, Mode::empty())?;
        actions.add_dup2(theirs.as_raw_fd(), WATCH_FD)?;
        let mut attr = PosixSpawnAttr::init()?;
        let setsid = PosixSpawnFlags::from_bits_retain(libc::c_int::from(libc::POSIX_SPAWN_SETSID));
        attr.set_flags(setsid | PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK)?;
        attr.set_sigmask(&nix::sys::signal::SigSet::empty())?;
        let args = [
            c"mcp-terminal".to_owned(),
            c"guardian".to_owned(),
            c"--instance".to_owned(),
            c_string(instance.as_bytes())?,
        ];
        // Nothing of the server's environment: the guardian needs none of it, and whatever
        // is in it (an owner's secret set for another purpose) would show in its
        // /proc/PID/environ for as long as the server runs.
        let env: [CString; 0] = [];
        // Collected by the reaper, or by `finish`.
        let pid = posix_spawn(c"/proc/self/exe", &actions, &attr, &args, &env)?.as_raw();
        drop(theirs);
        Ok(Guardian { watch: ours, pid })
    }

    /// After a clean shutdown: end what is left of `instance`'s sessions here, then let the
    /// guardian make its own pass and wait until it has exited.
    pub fn finish(&self, instance: &str) {
        let mut ended = sweep(instance);
        let _ = self.watch.shutdown(std::net::Shutdown::Write);
        let _ = self.watch.set_read_timeout(Some(GUARDIAN_EXIT_WAIT));
        let mut watch = &self.watch;
        let mut buf = [0u8; 16];
        while matches!(watch.read(&mut buf), Ok(n) if n > 0) {}
        ended.insert(self.pid);
        reap_children(&ended, GUARDIAN_EXIT_WAIT);
    }
}

/// The guardian of a server instance, started when it is first needed (`ensure`, before
/// each spawn of a session's process) and then kept: a thread watches its end of the
/// socket pair, and when the guardian dies (killed, or by the OOM killer) while the
/// server lives, it says so and starts a new one, which covers every session as the first
/// did (they are found by the instance's tag).
pub struct LazyGuardian {
    shared: Arc<Shared>,
}

struct Shared {
    instance: String,
    current: Mutex<Option<Guardian>>,
    /// Set by a clean shutdown: the guardian's exit that follows is not a death.
    finishing: AtomicBool,
}

impl LazyGuardian {
    pub fn new(instance: String) -> LazyGuardian {
        LazyGuardian {
            shared: Arc::new(Shared {
                instance,
                current: Mutex::new(None),
                finishing: AtomicBool::new(false),
            }),
        }
    }

    /// Start the guardian unless one runs (if it cannot start, that is logged and the
    /// server serves on without one; the next spawn tries again). Blocks until it has
    /// started, and so do concurrent callers: should the exec of this binary hang (its
    /// file system stopped answering), every spawn waits and fails at its deadline rather
    /// than run unguarded.
    pub fn ensure(&self) {
        let mut current = self.shared.lock();
        if current.is_none() {
            *current = self.shared.start();
        }
    }

    /// After a clean shutdown: `Guardian::finish` if a guardian runs, else the sweep alone.
    pub fn finish(&self) {
        self.shared.finishing.store(true, Ordering::SeqCst);
        let current = self.shared.lock().take();
        match current {
            Some(guardian) => guardian.finish(&self.shared.instance),
            None => drop(sweep(&self.shared.instance)),
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Guardian>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new guardian, and the thread that watches it; `None` (logged) if it cannot start.
    fn start(self: &Arc<Self>) -> Option<Guardian> {
        let started = Guardian::start(&self.instance).and_then(|guardian| {
            let watch = guardian.watch.try_clone()?;
            let shared = self.clone();
            let pid = guardian.pid;
            std::thread::Builder::new()
                .name("guardian-watch".into())
                .spawn(move || shared.watch(watch, pid))?;
            Ok(guardian)
        });
        match started {
            Ok(guardian) => Some(guardian),
            Err(e) => {
                tracing::warn!(
                    "cannot start the guardian ({e}); if this server is killed, processes that \
                     left their session's group may outlive it"
                );
                None
            }
        }
    }

    /// Block until guardian `pid` has closed its end (it exited); unless the server is
    /// shutting down, start another.
    fn watch(self: Arc<Self>, watch: UnixStream, pid: i32) {
        let mut watch = &watch;
        let mut buf = [0u8; 16];
        loop {
            match watch.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        if self.finishing.load(Ordering::SeqCst) {
            return;
        }
        tracing::warn!("the guardian (PID {pid}) has ended; starting a new one");
        let mut current = self.lock();
        if self.finishing.load(Ordering::SeqCst) {
            return;
        }
        // A guardian that died at once must not make this a busy loop.
        std::thread::sleep(GUARDIAN_RESTART_PAUSE);
        *current = self.start();
    }
}

/// Collect the guardian and the processes the sweep killed that are our children, then
/// every other child that has exited, so not even a zombie is handed to init, which may
/// not reap it promptly. Children still running are not waited for: a spawn stuck on a
/// file system that does not answer may sit in the kernel, unkillable, for good.
fn reap_children(ended: &HashSet<i32>, within: Duration) {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let deadline = Instant::now() + within;
    let reap = |pid: i32| loop {
        match waitpid(nix::unistd::Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return false,
            Ok(_) if pid == -1 => continue,
            Ok(_) => return true,
            Err(nix::errno::Errno::EINTR) => continue,
            // Not our child, or already collected.
            Err(_) => return true,
        }
    };
    for &pid in ended {
        while !reap(pid) && Instant::now() < deadline {
            std::thread::sleep(SWEEP_PAUSE);
        }
    }
    reap(-1);
}

/// The guardian process: wait until the server is gone, end what remains of its sessions,
/// exit. Returns why it cannot serve as a guardian, if it cannot.
pub fn run_guardian(instance: &str) -> Result<(), String> {
    if instance.len() != INSTANCE_DIGITS || !instance.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "guardian: `{instance}` is not a server instance ({INSTANCE_DIGITS} hex digits)"
        ));
    }
    close_above_watch();
    // SAFETY: fstat writes one stat struct to the pointer, which outlives the call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::fstat(WATCH_FD, &mut st) };
    if rc != 0 || st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err("guardian: internal to `mcp-terminal stdio`, not for direct use".into());
    }
    // SAFETY: the server handed us this descriptor and nothing else in this process owns it.
    let mut watch = UnixStream::from(unsafe { OwnedFd::from_raw_fd(WATCH_FD) });
    let mut buf = [0u8; 16];
    loop {
        match watch.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let ended = sweep(instance).len();
    if ended > 0 {
        crate::say!(
            "mcp-terminal guardian: the server is gone; ended {ended} remaining session process(es)"
        );
    }
    Ok(())
}

/// Close every descriptor above the watch socket. The server spawns the guardian from a
/// spawner thread while other threads run, so it may inherit a descriptor another thread
/// has not marked close-on-exec yet (a terminal just opened), and must not hold it open
/// for the server's whole life.
fn close_above_watch() {
    let first = WATCH_FD as libc::c_uint + 1;
    // SAFETY: close_range takes integers and touches no memory.
    if unsafe { libc::close_range(first, libc::c_uint::MAX, 0) } == 0 {
        return;
    }
    // Kernels before 5.9: one descriptor at a time.
    for fd in super::open_fds_above(WATCH_FD).unwrap_or_default() {
        // SAFETY: closing a descriptor number touches no memory; nothing in this process
        // owns these (the directory's own is closed already, and fails harmlessly).
        unsafe { libc::close(fd) };
    }
}

/// Kill every live process tagged by `instance` (never this process), pass after pass
/// until two in a row find none; returns the distinct processes signalled. Two, because a
/// process in the middle of an exec shows no environment for a moment (the kernel sets the
/// new program's after it lets the old one's memory go), and a pass can fall into it.
pub fn sweep(instance: &str) -> HashSet<i32> {
    let needle = format!("{TAG_VAR}={instance}-").into_bytes();
    let me = std::process::id() as i32;
    let began = Instant::now();
    let mut ended = HashSet::new();
    let mut found_none = 0;
    loop {
        let found: Vec<i32> = tagged(&needle).into_iter().filter(|p| *p != me).collect();
        found_none = if found.is_empty() { found_none + 1 } else { 0 };
        if found_none == 2 || began.elapsed() > SWEEP_BOUND {
            return ended;
        }
        for pid in found {
            if kill_if_tagged(pid, &needle) {
                ended.insert(pid);
            }
        }
        std::thread::sleep(SWEEP_PAUSE);
    }
}

/// PIDs whose environment holds `needle` at the start of an entry. A zombie's environment
/// reads empty, so only live processes are found.
fn tagged(needle: &[u8]) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| has_tag(*pid, needle))
        .collect()
}

fn has_tag(pid: i32, needle: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
        env.split(|b| *b == 0)
            .any(|entry| entry.starts_with(needle))
    })
}

/// SIGKILL `pid` if it still carries the tag. The pidfd is opened first: if the PID was
/// reused between the check and the signal, the signal goes to the process checked (and
/// fails if that one is gone), never to the newcomer.
fn kill_if_tagged(pid: i32, needle: &[u8]) -> bool {
    // SAFETY: pidfd_open takes a PID and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        if io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) && has_tag(pid, needle) {
            // Kernels before 5.3: no pidfd; the check-then-kill race is accepted there.
            return nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .is_ok();
        }
        return false;
    }
    // SAFETY: a fresh descriptor owned here alone.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    if !has_tag(pid, needle) {
        return false;
    }
    // SAFETY: pidfd_send_signal with a null siginfo pointer and no flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A process carrying `tag`, once its environment can be read: the kernel lets the
    /// spawner go on before the new program's environment is in place, so the child says
    /// when it runs (and waits on its stdin, which the returned `Child` holds open).
    fn spawn_tagged(tag: &str) -> std::process::Child {
        use std::io::BufRead;
        let mut child = Command::new("/bin/sh")
            .args(["-c", "echo ready; read line"])
            .env(TAG_VAR, tag)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut said = String::new();
        let stdout = child.stdout.as_mut().unwrap();
        std::io::BufReader::new(stdout)
            .read_line(&mut said)
            .unwrap();
        assert_eq!(said, "ready\n");
        child
    }

    #[test]
    fn sweep_kills_only_its_own_instance() {
        let ours = new_instance();
        let theirs = new_instance();
        let mut mine = spawn_tagged(&session_tag(&ours, "a"));
        let mut other = spawn_tagged(&session_tag(&theirs, "b"));
        // Same digits as a prefix but a different instance must not match either.
        let mut longer = spawn_tagged(&format!("{ours}0-c"));
        assert!(!sweep(&ours).is_empty());
        assert!(mine.wait().unwrap().code().is_none(), "killed by a signal");
        assert!(
            other.try_wait().unwrap().is_none(),
            "another server's session survives"
        );
        assert!(longer.try_wait().unwrap().is_none());
        assert!(sweep(&ours).is_empty(), "nothing left to end");
        for child in [&mut other, &mut longer] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    #[test]
    fn guardian_refuses_a_bad_instance_or_no_socket() {
        assert!(run_guardian("").is_err());
        assert!(run_guardian("xyz").is_err());
    }

    #[test]
    fn instances_are_hex_of_fixed_width() {
        let instance = new_instance();
        assert_eq!(instance.len(), INSTANCE_DIGITS);
        assert!(instance.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(session_tag("ab", "cd"), "ab-cd");
    }
}
