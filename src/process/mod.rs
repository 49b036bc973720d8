//! OS processes: spawning a profile's argv in its own session and process group, the
//! reaper that collects exits, and signals to a leader or its group. The only module that
//! touches raw file descriptors; nothing here knows about sessions or MCP.

mod guardian;
mod pty;
mod reaper;
mod spawn;

pub use guardian::{Guardian, new_instance, run_guardian, session_tag, sweep};
pub use pty::{LineControls, PtyChild, PtyMaster, spawn_pty};
pub use reaper::{Exit, ExitReceiver, Reaper};
pub use spawn::{PipeChild, SpawnError, SpawnSpec, can_enter, spawn_pipes};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Mark every descriptor above stderr close-on-exec: whatever started the server may have
/// left some open, and children must get only the stdio they are given.
pub fn cloexec_inherited_fds() {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets flags on descriptors.
    let rc = unsafe { libc::close_range(3, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC as _) };
    if rc == 0 {
        return;
    }
    // Kernels before 5.11: set the flag one descriptor at a time.
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        tracing::warn!("cannot list open descriptors; inherited ones may reach children");
        return;
    };
    let fds: Vec<i32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: F_SETFD on a descriptor number touches no memory; a closed one fails.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
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

/// Signal one process. A process that no longer exists is fine.
pub fn signal_process(pid: i32, signal: Signal) {
    let _ = nix::sys::signal::kill(Pid::from_raw(pid), signal);
}

/// Signal every process group of the session led by `sid`: the leader's group, and the
/// groups a job-control shell made for its jobs inside that session.
/// The groups are read from /proc once for all of `signals`, sent in order to each group.
pub fn signal_session(sid: i32, signals: &[Signal]) {
    let groups = session_groups(sid);
    for signal in signals {
        signal_group(sid, *signal);
        for group in &groups {
            signal_group(*group, *signal);
        }
    }
}

/// Process groups other than `sid` with a member in the session `sid`, from /proc.
fn session_groups(sid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut groups = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the parenthesised command name: state ppid pgrp session ...
        let Some((_, fields)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = fields
            .split_whitespace()
            .skip(2)
            .map(|f| f.parse::<i32>().ok());
        if let (Some(Some(group)), Some(Some(session))) = (fields.next(), fields.next())
            && session == sid
            && group != sid
            && !groups.contains(&group)
        {
            groups.push(group);
        }
    }
    groups
}

/// Signal the whole process group led by `pgid`. A group that no longer exists is fine.
pub fn signal_group(pgid: i32, signal: Signal) {
    let _ = killpg(Pid::from_raw(pgid), signal);
}
