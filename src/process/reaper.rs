//! The one place that waits for children. The server is a child subreaper, so descendants
//! orphaned when a session's leader dies are re-parented to it; the reaper collects every
//! exit with `waitpid(-1)`, hands a session leader's status to whoever registered for it,
//! and discards the orphans' so none lingers as a zombie.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(nix::sys::signal::Signal),
}

#[derive(Default)]
pub struct Reaper {
    waiting: Mutex<HashMap<i32, oneshot::Sender<Exit>>>,
}

impl Reaper {
    /// Become a subreaper and start collecting exits on SIGCHLD.
    pub fn start() -> std::io::Result<Arc<Reaper>> {
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag and no pointers.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        if rc != 0 {
            tracing::warn!(
                "cannot become a child subreaper; orphaned descendants are reaped by init"
            );
        }
        let mut sigchld = signal(SignalKind::child())?;
        let reaper = Arc::new(Reaper::default());
        let weak = Arc::downgrade(&reaper);
        tokio::spawn(async move {
            while sigchld.recv().await.is_some() {
                match weak.upgrade() {
                    Some(reaper) => reaper.reap_all(),
                    None => return,
                }
            }
        });
        Ok(reaper)
    }

    /// Run `spawn` and register its PID while holding the table, so an exit collected
    /// meanwhile cannot miss its receiver.
    pub fn spawn_registered<T>(
        &self,
        spawn: impl FnOnce() -> std::io::Result<(T, i32)>,
    ) -> std::io::Result<(T, i32, oneshot::Receiver<Exit>)> {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let (value, pid) = spawn()?;
        let (tx, rx) = oneshot::channel();
        waiting.insert(pid, tx);
        Ok((value, pid, rx))
    }

    /// Holds the table throughout: `std::process::Command::spawn` itself waits for a child
    /// whose exec failed, and must not find it already reaped here.
    fn reap_all(&self) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let exit = match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid, Exit::Code(code)),
                Ok(WaitStatus::Signaled(pid, signal, _)) => (pid, Exit::Signal(signal)),
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return,
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(e) => {
                    tracing::warn!("waitpid failed: {e}");
                    return;
                }
            };
            let (pid, status) = exit;
            if let Some(tx) = waiting.remove(&pid.as_raw()) {
                let _ = tx.send(status);
            }
        }
    }
}
