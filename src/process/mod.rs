//! OS processes: spawning a profile's argv in its own session and process group, the
//! reaper that collects exits, and signals to a leader or its group. The only module that
//! touches raw file descriptors; nothing here knows about sessions or MCP.

mod pty;
mod reaper;
mod spawn;

pub use pty::{PtyChild, PtyMaster, spawn_pty};
pub use reaper::{Exit, Reaper};
pub use spawn::{PipeChild, SpawnSpec, spawn_pipes};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Signal one process. A process that no longer exists is fine.
pub fn signal_process(pid: i32, signal: Signal) {
    let _ = nix::sys::signal::kill(Pid::from_raw(pid), signal);
}

/// Signal the whole process group led by `pgid`. A group that no longer exists is fine.
pub fn signal_group(pgid: i32, signal: Signal) {
    let _ = killpg(Pid::from_raw(pgid), signal);
}
