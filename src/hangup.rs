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
