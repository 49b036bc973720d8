//! OS processes: spawning a profile's argv in its own session and process group, the
//! reaper that collects exits, and signals to a leader or its group. The only module that
//! touches raw file descriptors; nothing here knows about sessions or MCP.

mod guardian;
mod launch;
pub mod procfs;
mod pty;
mod reaper;
mod spawn;
pub mod waiting;

pub use guardian::{Guardian, LazyGuardian, new_instance, run_guardian, session_tag, sweep};
pub use pty::{LineControls, PtyChild, PtyMaster, WholeLine, spawn_pty};
pub use reaper::{Exit, ExitReceiver, Reaper};
pub use spawn::{
    MARKS_FD, OpenCwd, PipeChild, STDERR_COPY_FD, STDOUT_COPY_FD, SpawnError, SpawnSpec, can_enter,
    spawn_pipes,
};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::limits::INLINE_SCAN_MAX;

/// Block, in the calling thread, every signal but those its own faults raise, so that the
/// kernel gives the process's signals (a child's SIGCHLD, SIGTERM) to the main thread,
/// which waits for them in user space. The kernel gives a child's SIGCHLD to the thread
/// that started it, or any other that takes signals; one stuck in the kernel (a spawner
/// opening a cwd on a file system that does not answer, a write to a log there) would hold
/// it unhandled, and every exit after it. Every thread but the main one calls this as it
/// starts; a child starts with an empty mask (`Launch::start`, the guardian's spawn).
pub fn leave_signals_to_main() {
    use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
    let mut set = SigSet::all();
    for fault in [
        Signal::SIGSEGV,
        Signal::SIGBUS,
        Signal::SIGFPE,
        Signal::SIGILL,
        Signal::SIGTRAP,
        Signal::SIGSYS,
    ] {
        set.remove(fault);
    }
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None);
}

/// Mark every descriptor above stderr close-on-exec: whatever started the server may have
/// left some open, and children must get only the stdio they are given.
pub fn cloexec_inherited_fds() {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets flags on descriptors.
    let rc = unsafe { libc::close_range(3, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC as _) };
    if rc == 0 {
        return;
    }
    // Kernels before 5.11: set the flag one descriptor at a time.
    let Some(fds) = open_fds_above(2) else {
        tracing::warn!("cannot list open descriptors; inherited ones may reach children");
        return;
    };
    for fd in fds {
        // SAFETY: F_SETFD on a descriptor number touches no memory; a closed one fails.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// This process's open descriptors above `fd`, from `/proc/self/fd` (for kernels without
/// `close_range`); the listing's own descriptor is among them, closed by the time they are
/// returned. `None` when they cannot be listed.
fn open_fds_above(fd: i32) -> Option<Vec<i32>> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    Some(
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter(|open| *open > fd)
            .collect(),
    )
}

/// Whether our child `pid` has already ended (a zombie, or already reaped), without
/// reaping it: the reaper still collects its status.
pub fn has_exited(pid: i32) -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    loop {
        return match waitid(Id::Pid(Pid::from_raw(pid)), flags) {
            Ok(WaitStatus::StillAlive) => false,
            Ok(_) | Err(nix::errno::Errno::ECHILD) => true,
            Err(nix::errno::Errno::EINTR) => continue,
            // Unknown: treat it as running, so it is still signalled.
            Err(_) => false,
        };
    }
}

/// Bytes waiting to be read from `fd` (a pipe or a terminal); 0 when it cannot say.
pub fn unread(fd: std::os::fd::BorrowedFd<'_>) -> usize {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which outlives the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) };
    if rc == -1 { 0 } else { n.max(0) as usize }
}

/// Whether an OS error number says there is no file descriptor to spare: EMFILE (this
/// process is at its limit) or ENFILE (the system is).
pub fn is_out_of_files(errno: i32) -> bool {
    matches!(errno, libc::EMFILE | libc::ENFILE)
}

/// Signal one process. A process that no longer exists is fine.
pub fn signal_process(pid: i32, signal: Signal) {
    let _ = nix::sys::signal::kill(Pid::from_raw(pid), signal);
}

/// Run the ignored test `name` alone, in a process of its own (the test binary again): a
/// reaper takes every child of its process, so a test that starts one cannot share it.
#[cfg(test)]
pub fn alone(name: &str) {
    let run = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--ignored"])
        .args(["--test-threads", "1"])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

/// Full scans of /proc made so far, for the test that a termination makes one.
#[cfg(test)]
static SCANS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[cfg(test)]
pub fn scans() -> usize {
    SCANS.load(std::sync::atomic::Ordering::SeqCst)
}

/// Lookups of a leader's groups handed to a blocking thread (too many processes to read in
/// place), for the test of both ways.
#[cfg(test)]
static SCANS_ON_A_THREAD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[cfg(test)]
pub fn scans_on_a_thread() -> usize {
    SCANS_ON_A_THREAD.load(std::sync::atomic::Ordering::SeqCst)
}

/// The process groups of the POSIX session led by `sid`: the leader's, and the groups a
/// job-control shell made for its jobs inside that session. Found by a scan of /proc when
/// a termination first signals (SIGTERM, or the kill after the leader's exit), and by one
/// more just before its SIGKILL, so a job the shell started during the grace period is
/// killed too; every other signal reuses what the scans found.
///
/// What the scans cannot see later is covered where it can be: a process forked into a
/// known group afterwards is reached by that group's signal; the leader's group keeps its
/// ID while the leader is held unreaped. A group made after the last scan is not signalled
/// by this session's termination; its processes still carry the session's tag, so they do
/// not outlive the server.
#[derive(Debug)]
pub struct SessionGroups {
    sid: i32,
    /// Groups other than the leader's with a member in the session when it was scanned.
    others: std::sync::Mutex<Vec<i32>>,
}

impl SessionGroups {
    /// Scan /proc for the session's groups. Reads a file per process: call it off the
    /// async thread.
    pub fn scan(sid: i32) -> SessionGroups {
        SessionGroups {
            sid,
            others: std::sync::Mutex::new(other_groups(sid)),
        }
    }

    /// The session's groups, found here while the leader's tree and the processes this
    /// one adopted number at most `INLINE_SCAN_MAX` (a few small reads), else by `scan` on
    /// a blocking thread. `leader_ended`: its end was waited for (see
    /// `procfs::session_tree`).
    pub async fn find(sid: i32, leader_ended: bool) -> SessionGroups {
        if let Some(few) = procfs::session_tree(sid, INLINE_SCAN_MAX, leader_ended) {
            return SessionGroups {
                sid,
                others: std::sync::Mutex::new(groups_among(sid, few)),
            };
        }
        #[cfg(test)]
        SCANS_ON_A_THREAD.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::task::spawn_blocking(move || SessionGroups::scan(sid))
            .await
            .unwrap_or_else(|_| SessionGroups::leader_only(sid))
    }

    /// Only the leader's group, when /proc cannot be read.
    pub fn leader_only(sid: i32) -> SessionGroups {
        SessionGroups {
            sid,
            others: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Scan again (off the async thread) and SIGKILL every group, those made since the
    /// first scan included.
    pub async fn kill(&self) {
        let sid = self.sid;
        if let Ok(found) = tokio::task::spawn_blocking(move || other_groups(sid)).await {
            let mut others = self.others.lock().unwrap_or_else(|e| e.into_inner());
            for group in found {
                if !others.contains(&group) {
                    others.push(group);
                }
            }
        }
        self.signal(&[Signal::SIGKILL]);
    }

    /// Send each of `signals`, in order, to every group. A found group is signalled only
    /// while its ID is still this session's: a group ID stays reserved while any member
    /// lives, and a group never spans POSIX sessions, so a process of that PID in another
    /// session means the group is gone and its ID reused; it is skipped. One stat read per
    /// group, not a scan.
    pub fn signal(&self, signals: &[Signal]) {
        self.signal_holding(signals, None);
    }

    /// `signal`, but the group `held` (one stopped on purpose) is sent no SIGCONT.
    pub fn signal_holding(&self, signals: &[Signal], held: Option<i32>) {
        let ours = self.ours();
        for &signal in signals {
            for group in std::iter::once(self.sid).chain(ours.iter().copied()) {
                if !(signal == Signal::SIGCONT && Some(group) == held) {
                    signal_group(group, signal);
                }
            }
        }
    }

    /// Whether a process of the session other than `held` runs: is neither gone, nor a
    /// zombie a stopped parent has not reaped, nor stopped (a background job stops again
    /// at its first touch of the terminal, and would wait out the grace). Reads a file per
    /// process: the session's tree, where it can be listed, else every process.
    pub fn others_run(&self, held: i32) -> bool {
        procfs::session_tree(self.sid, usize::MAX, false)
            .unwrap_or_else(procfs::pids)
            .into_iter()
            .filter(|pid| *pid != held)
            .filter_map(procfs::stat)
            .any(|s| s.session == self.sid && !matches!(s.state, 'Z' | 'X' | 'T' | 't'))
    }

    /// The found groups still this session's (see `signal`).
    fn ours(&self) -> Vec<i32> {
        self.others
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .filter(|group| group_and_session(*group).is_none_or(|(_, s)| s == self.sid))
            .collect()
    }
}

/// The groups other than `sid`'s own with a member in POSIX session `sid`, by one scan of
/// /proc (none when it cannot be read). Every member of a session descends from its leader,
/// which this process started; as a child subreaper it inherits every orphan among them,
/// so only the leader's tree and the processes it adopted are read where they can be
/// listed (`procfs::session_tree`), not every process of the machine.
fn other_groups(sid: i32) -> Vec<i32> {
    groups_among(
        sid,
        procfs::session_tree(sid, usize::MAX, false).unwrap_or_else(procfs::pids),
    )
}

/// The groups other than `sid`'s own with a member in POSIX session `sid` among `pids`.
fn groups_among(sid: i32, pids: Vec<i32>) -> Vec<i32> {
    #[cfg(test)]
    SCANS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let mut others = Vec::new();
    // The leader's group is the session's ID: a session leader cannot leave its group.
    for pid in pids.into_iter().filter(|pid| *pid != sid) {
        if let Some((group, session)) = group_and_session(pid)
            && session == sid
            && group != sid
            && !others.contains(&group)
        {
            others.push(group);
        }
    }
    others
}

/// The process group and POSIX session of `pid`, from /proc; None if it does not exist.
fn group_and_session(pid: i32) -> Option<(i32, i32)> {
    procfs::stat(pid).map(|s| (s.pgrp, s.session))
}

/// Signal the whole process group led by `pgid`. A group that no longer exists is fine.
pub fn signal_group(pgid: i32, signal: Signal) {
    let _ = killpg(Pid::from_raw(pgid), signal);
}
