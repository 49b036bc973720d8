//! What a child writes on stderr, collected as it comes, and the output of a finished
//! command as text.

use std::io::Read;
use std::process::{Child, ExitStatus, Output};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a child may take to print what a test waits for. Generous: the test binaries
/// and every build on the machine share its cores.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Everything a child wrote on stderr so far; a reader thread appends as it comes.
#[derive(Clone)]
pub struct Stderr(Arc<(Mutex<String>, Condvar)>);

impl Stderr {
    /// Take `child`'s stderr (it must be piped) and collect it until EOF.
    pub fn of(child: &mut Child) -> Stderr {
        let stderr = Stderr(Arc::default());
        let mut pipe = child.stderr.take().expect("stderr is piped");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                let (text, grown) = &*sink.0;
                text.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk[..n]));
                grown.notify_all();
            }
        });
        stderr
    }

    pub fn text(&self) -> String {
        self.0.0.lock().unwrap().clone()
    }

    /// The first complete line starting with `prefix`, without its newline, once it is
    /// written (within `PATIENCE`).
    pub fn line(&self, prefix: &str) -> String {
        let text = self.until(&format!("a `{prefix}` line"), |text| {
            text.split_inclusive('\n')
                .any(|l| l.starts_with(prefix) && l.ends_with('\n'))
        });
        let line = text
            .split_inclusive('\n')
            .find(|l| l.starts_with(prefix) && l.ends_with('\n'));
        line.unwrap_or_default().trim_end().to_string()
    }

    /// Everything written so far, once `done` holds of it (within `PATIENCE`; `what` names
    /// it in the failure). The writer's lines reach the collector when its thread reads
    /// them, which on a loaded machine may be well after the server wrote them.
    pub fn until(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        let (text, grown) = &*self.0;
        let mut text = text.lock().unwrap();
        loop {
            if done(&text) {
                return text.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no {what} in:\n{text}");
            text = grown.wait_timeout(text, left).unwrap().0;
        }
    }
}

/// `child`'s exit status once it has exited, within `PATIENCE`: woken by its pidfd.
pub fn wait_exit(child: &mut Child) -> ExitStatus {
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};

    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

    // SAFETY: pidfd_open takes a PID and flags and returns a new descriptor or -1. The
    // child is not reaped before `wait` below, so its PID is still its own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id(), 0) };
    assert!(fd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
    // SAFETY: the descriptor was just returned and is owned by nothing else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    let within = PollTimeout::try_from(PATIENCE).unwrap();
    let ready = poll(&mut fds, within).unwrap();
    assert!(ready > 0, "the child did not exit within {PATIENCE:?}");
    child.wait().unwrap()
}

/// A finished command's stdout as text.
pub fn stdout_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A finished command's stderr as text.
pub fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
