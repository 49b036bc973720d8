//! Sessions: one started process, its output and its lifecycle.
//!
//! Flow at a glance: `Sessions::start` spawns the profile's argv and creates a `Session`;
//! two reader tasks decode the child's stdout/stderr into the output buffer; a supervisor
//! task waits for the exit (or the session timeout), kills what is left of the process
//! group, drains the pipes within a deadline and marks the output complete or incomplete.
//! Every state change wakes waiters through one watch channel, so reads that wait are
//! woken by events, never by polling.

mod exec;
mod input;
mod io;
mod lifecycle;
mod manager;
mod recording;
mod run;
mod state;
mod terminal;
mod view;
mod wait;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use io::ReadFrom;
pub use manager::{Sessions, StartRequest};
pub use state::{Reason, Snapshot, Status};
pub use terminal::Target;
pub use wait::{Streams, WaitRequest};

use crate::config::Mode;
use crate::process::{PtyMaster, SessionGroups};
use state::{Identity, State};

pub struct Session {
    pub id: String,
    pub command_id: String,
    pub mode: Mode,
    pub pid: i32,
    created_at: SystemTime,
    state: Mutex<State>,
    changed: watch::Sender<()>,
    /// Held through a write: writes to one session are serialised.
    writing: tokio::sync::Mutex<()>,
    /// The terminal of a PTY session (for resizing).
    terminal: Option<Arc<PtyMaster>>,
    readers: Mutex<Vec<JoinHandle<()>>>,
    /// Held by a running `terminal_exec`: one command at a time per shell.
    shell: tokio::sync::Mutex<exec::ShellState>,
    /// When a tool call last named this session (for `idle_timeout_ms`).
    named_at: Mutex<Instant>,
    /// The asciicast recording, when the owner records this profile.
    recording: Option<Arc<recording::Recording>>,
    /// The process groups to signal, found once when termination first needs them.
    groups: tokio::sync::OnceCell<SessionGroups>,
    /// Declared last, so dropped after everything above.
    _returns_memory: ReturnMemory,
}

/// How long session state locks were held, over every session of this server: each step
/// taken under the lock is bounded (a page, a search step), and this is how the bound is
/// checked on a real run (the shutdown log line reports it). Both the time that passed
/// (which on a loaded machine includes the holder being preempted) and the CPU time the
/// holder spent (the work done under the lock).
pub struct LockHolds {
    longest_ns: AtomicU64,
    longest_cpu_ns: AtomicU64,
    over_a_millisecond: AtomicU64,
}

pub static LOCK_HOLDS: LockHolds = LockHolds {
    longest_ns: AtomicU64::new(0),
    longest_cpu_ns: AtomicU64::new(0),
    over_a_millisecond: AtomicU64::new(0),
};

/// Summary of the lock holds so far.
pub struct LockSummary {
    pub longest: Duration,
    pub longest_cpu: Duration,
    /// Holds that took more than 1 ms of time (not of CPU).
    pub over_a_millisecond: u64,
}

impl LockHolds {
    fn note(&self, held: Duration, cpu: Duration) {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.longest_ns.fetch_max(ns(held), Ordering::Relaxed);
        self.longest_cpu_ns.fetch_max(ns(cpu), Ordering::Relaxed);
        if held > Duration::from_millis(1) {
            self.over_a_millisecond.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn summary(&self) -> LockSummary {
        let load = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
        LockSummary {
            longest: load(&self.longest_ns),
            longest_cpu: load(&self.longest_cpu_ns),
            over_a_millisecond: self.over_a_millisecond.load(Ordering::Relaxed),
        }
    }
}

/// CPU time of the calling thread.
fn thread_cpu_time() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map_or(Duration::ZERO, Duration::from)
}

/// Dropped after the rest of a session (its output buffer, screen): returns the freed heap.
struct ReturnMemory;

impl Drop for ReturnMemory {
    fn drop(&mut self) {
        return_memory();
    }
}

/// Hand the allocator's free memory back to the OS. glibc keeps what its per-thread arenas
/// freed, so without this the server would stay at its peak long after sessions are gone.
fn return_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl Session {
    /// A session over `state`, its readers and supervisor not yet started.
    fn new(
        id: String,
        command_id: String,
        (mode, pid, created_at): (Mode, i32, SystemTime),
        state: State,
        terminal: Option<Arc<PtyMaster>>,
        recording: Option<Arc<recording::Recording>>,
    ) -> Self {
        Session {
            id,
            command_id,
            mode,
            pid,
            created_at,
            state: Mutex::new(state),
            changed: watch::Sender::new(()),
            writing: tokio::sync::Mutex::new(()),
            terminal,
            readers: Mutex::new(Vec::new()),
            shell: tokio::sync::Mutex::default(),
            named_at: Mutex::new(Instant::now()),
            recording,
            groups: tokio::sync::OnceCell::new(),
            _returns_memory: ReturnMemory,
        }
    }

    /// Apply a change to the state and wake every waiter.
    fn update<R>(&self, change: impl FnOnce(&mut State) -> R) -> R {
        let result = self.locked(change);
        self.changed.send_replace(());
        result
    }

    /// Look at the state without waking anyone.
    fn inspect<R>(&self, look: impl FnOnce(&State) -> R) -> R {
        self.locked(|s| look(s))
    }

    /// Run `work` under the state lock, noting how long the lock was held.
    fn locked<R>(&self, work: impl FnOnce(&mut State) -> R) -> R {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (began, cpu_began) = (std::time::Instant::now(), thread_cpu_time());
        let result = work(&mut state);
        let (held, cpu) = (began.elapsed(), thread_cpu_time().saturating_sub(cpu_began));
        drop(state);
        LOCK_HOLDS.note(held, cpu);
        result
    }

    pub fn snapshot(&self) -> Snapshot {
        let hidden = self.terminal.as_ref().is_some_and(|t| t.input_hidden());
        self.inspect(|s| {
            let mut snapshot = state::snapshot(&self.identity(), s);
            snapshot.input_hidden = hidden && !s.status.is_final();
            snapshot.recording = self.recording.as_ref().map(|r| r.name().to_owned());
            snapshot
        })
    }

    fn identity(&self) -> Identity<'_> {
        Identity {
            session_id: &self.id,
            command_id: &self.command_id,
            mode: self.mode,
            pid: self.pid,
            created_at: self.created_at,
        }
    }

    pub fn status(&self) -> Status {
        self.inspect(|s| s.status)
    }

    /// Wait until `done` holds or `deadline` passes; true if it holds.
    async fn wait_until(&self, deadline: Instant, done: impl Fn(&State) -> bool) -> bool {
        let mut changes = self.changed.subscribe();
        loop {
            if self.inspect(&done) {
                return true;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return self.inspect(&done),
            }
        }
    }

    /// Wait until `done` holds, however long that takes.
    async fn wait_for(&self, done: impl Fn(&State) -> bool) {
        let mut changes = self.changed.subscribe();
        while !self.inspect(&done) {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    async fn wait_final(&self, within: Duration) -> bool {
        self.wait_until(Instant::now() + within, |s| s.status.is_final())
            .await
    }

    /// A tool call named this session: its idle time starts again.
    pub fn touch(&self) {
        *self.named_at.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn named_at(&self) -> Instant {
        *self.named_at.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Final and past its retention period.
    fn expired(&self, retention: Duration) -> bool {
        self.inspect(|s| s.final_at.is_some_and(|at| at.elapsed() >= retention))
    }
}
