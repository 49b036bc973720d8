//! Noticing that the client closed the server's stdout. A server whose answers can no longer
//! be read must shut down (ending every session) rather than keep sessions running for
//! nobody; it would otherwise only notice at its next write, and not even then.

use std::os::fd::{AsFd, OwnedFd};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// Resolves once stdout is a pipe or socket whose reading end is closed; never for stdout
/// that cannot report that (a terminal, a file).
pub async fn stdout_closed() {
    let Some(watch) = watch_stdout() else {
        return std::future::pending().await;
    };
    loop {
        match watch.ready(Interest::ERROR).await {
            Ok(mut guard) => {
                if guard.ready().is_error() {
                    return;
                }
                guard.clear_ready();
            }
            Err(_) => return std::future::pending().await,
        }
    }
}

fn watch_stdout() -> Option<AsyncFd<OwnedFd>> {
    // A duplicate, so the watch never owns or closes the real stdout.
    let fd = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
    // SAFETY: the descriptor is owned by the AsyncFd alone and stays open as long as it.
    unsafe { AsyncFd::register_with_interest(fd, Interest::ERROR) }.ok()
}

/// SIGHUP, the terminal the server runs in closed, as a shutdown: `None` when the server
/// was started with SIGHUP ignored (`nohup`), which then stays ignored.
pub fn terminal_closed() -> Result<Option<tokio::signal::unix::Signal>, String> {
    if ignored_at_start(libc::SIGHUP) {
        return Ok(None);
    }
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Resolves at the next SIGHUP `terminal_closed` gave; never without one.
pub async fn next_hangup(hangups: &mut Option<tokio::signal::unix::Signal>) {
    match hangups {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// Whether `signal` is ignored in this process (its `SigIgn` mask), as it was inherited
/// until a handler is installed.
fn ignored_at_start(signal: libc::c_int) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let mask = status.lines().find_map(|l| l.strip_prefix("SigIgn:"))?;
            u64::from_str_radix(mask.trim(), 16).ok()
        })
        .is_some_and(|mask| mask & (1 << (signal - 1)) != 0)
}
