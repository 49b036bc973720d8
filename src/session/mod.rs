//! Sessions: one started process, its output and its lifecycle.
//!
//! Flow at a glance: `Sessions::start` spawns the profile's argv and `launch` creates a
//! `Session`; a reader task per stream (`ingest`) decodes the child's output, takes out the
//! shell integration's marks, redacts secrets and delivers the text to the buffer, to the
//! capture of a running command and to the sink thread (`sink`: emulator and recording); a
//! supervisor task waits for the exit (or a timeout), kills what is left of the process
//! group, drains the pipes within a deadline and marks the output complete or incomplete.
//! Every state change wakes waiters through one watch channel, so reads that wait are woken
//! by events, never by polling.
//!
//! Where things live: `state` (what the lock guards, and its operations), `ingest` (the
//! readers), `input` (writes), `io` (reads by cursor), `wait` (`terminal_wait`), `shell`
//! (the persistent shell and `terminal_exec`), `run` (`terminal_run`), `capture` (a
//! command's output as it arrives), `terminal` (screen, resize, signals), `view` (what the
//! live view reads), `lifecycle` (start, supervise, terminate), `manager` (the table).

mod capture;
mod gone;
mod ingest;
mod input;
mod io;
mod lifecycle;
mod manager;
mod pages;
mod recording;
mod run;
mod shell;
mod sink;
mod state;
mod terminal;
mod view;
mod wait;
mod waiting;

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use io::ReadFrom;
pub use manager::{Sessions, StartRequest};
pub use run::RunResult;
pub use shell::{Command, ExecRequest, ExecResult, OnTimeout};
pub use state::{Reason, Snapshot, Status, timestamp};
pub use terminal::Target;
pub use wait::{Streams, WaitRequest};
pub use waiting::{Foreground, Waiting};

use crate::config::Mode;
use crate::heap;
use crate::output::{Redactor, Screen};
use crate::process::waiting::InputFile;
use crate::process::{PtyMaster, SessionGroups, procfs};
use capture::Captures;
use ingest::ReaderLink;
use recording::Recording;
use sink::Sink;
use state::State;

pub struct Session {
    pub id: String,
    pub command_id: String,
    pub mode: Mode,
    pub pid: i32,
    created_at: SystemTime,
    origin: Origin,
    /// The session's state. The rule of this lock: only `State`'s own operations run under
    /// it (each O(1) or bounded by one read's text; no I/O, no emulator, no scan of the
    /// buffer), and only through `inspect` (look) and `update` (change, then wake every
    /// waiter). Nothing else can reach the state, so nothing else can forget to wake.
    state: Mutex<State>,
    changed: watch::Sender<()>,
    /// Held through a write: writes to one session are serialised.
    writing: tokio::sync::Mutex<()>,
    /// The terminal of a PTY session, until the program ends (its readers hold it while
    /// they drain it): an ended session holds no descriptor.
    terminal: Mutex<Option<Arc<PtyMaster>>>,
    /// What the session's programs read as their input, as `/proc/PID/fd` names it.
    input_file: Option<InputFile>,
    /// The leader's `/proc` files that tell whether it waits for input, held while it
    /// runs.
    leader_files: procfs::Held,
    /// A PTY session's emulator, fed by the sink thread (its own lock: `terminal_screen`
    /// never waits for the state, nor the state for the emulator).
    screen: Option<Arc<Mutex<Screen>>>,
    readers: Mutex<Vec<JoinHandle<()>>>,
    /// A pipe shell's marks reader.
    marks_reader: Mutex<Option<ingest::MarksReader>>,
    /// The reader of each stream: its requests, and whether it has anything in hand.
    links: [Option<ReaderLink>; 2],
    /// What the running command (or a one-shot run) printed, kept as it arrives.
    captures: Mutex<Captures>,
    /// The emulator and the recording, fed off the async thread.
    sink: Option<Sink>,
    /// How much of a typed command's echo the terminal has shown (characters, tabs not
    /// counted): typing into a line-discipline shell waits for it, so the terminal's echo
    /// never overflows.
    echo_seen: std::sync::atomic::AtomicUsize,
    /// Held by a running `terminal_exec` call: one at a time per shell.
    exec: tokio::sync::Mutex<shell::Calls>,
    /// When a tool call last named this session (for `idle_timeout_ms`).
    named_at: Mutex<Instant>,
    /// Calls naming this session that have not answered yet (a wait, a read that waits,
    /// a run): while one is open, the session is named.
    naming_calls: std::sync::atomic::AtomicUsize,
    /// The asciicast recording, when the owner records this profile.
    recording: Option<Arc<Recording>>,
    /// The secrets the profile allows, to keep out of what is kept of typed text (command
    /// lines in the history and the audit log), as the output keeps them out.
    typed: Option<Redactor>,
    /// A terminal shell's own process group, as its integration found it in the foreground
    /// (the session's program may have started the shell: `sh -c 'bash -i'`, `su`).
    shell_group: std::sync::OnceLock<i32>,
    /// On pipes: the last process ID the system gave out when the running command was
    /// submitted (0 when unknown): what its shell's session holds above it is the
    /// command's, what lies below an earlier command left behind.
    pids_before_command: AtomicI32,
    /// The process groups to signal, found once when termination first needs them.
    groups: tokio::sync::OnceCell<SessionGroups>,
    /// Declared last, so dropped after everything above.
    _returns_memory: ReturnMemory,
}

/// How a session was started, as the live view shows it (never an environment value).
#[derive(Debug, Clone, Default)]
pub struct Origin {
    pub argv: Vec<String>,
    pub cwd: String,
    /// Names of the variables the client set.
    pub env_names: Vec<String>,
}

/// Who a new session is.
struct Identity {
    id: String,
    command_id: String,
    mode: Mode,
    pid: i32,
    created_at: SystemTime,
    origin: Origin,
}

/// What a new session is made of, besides its state.
struct Parts {
    input_file: Option<InputFile>,
    terminal: Option<Arc<PtyMaster>>,
    screen: Option<Arc<Mutex<Screen>>>,
    recording: Option<Arc<Recording>>,
    sink: Option<Sink>,
    links: [Option<ReaderLink>; 2],
    typed: Option<Redactor>,
}

/// How long session state locks were held, over every session of this server: each step
/// taken under the lock is bounded, and this is how the bound is checked on a real run (the
/// shutdown log line reports it). On a loaded machine it includes the holder being
/// preempted.
pub struct LockHolds {
    longest_ns: AtomicU64,
    over_a_millisecond: AtomicU64,
}

pub static LOCK_HOLDS: LockHolds = LockHolds {
    longest_ns: AtomicU64::new(0),
    over_a_millisecond: AtomicU64::new(0),
};

/// Summary of the lock holds so far.
pub struct LockSummary {
    pub longest: Duration,
    /// Holds that took more than 1 ms.
    pub over_a_millisecond: u64,
}

impl LockHolds {
    fn note(&self, held: Duration) {
        let ns = u64::try_from(held.as_nanos()).unwrap_or(u64::MAX);
        self.longest_ns.fetch_max(ns, Ordering::Relaxed);
        if held > Duration::from_millis(1) {
            self.over_a_millisecond.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn summary(&self) -> LockSummary {
        LockSummary {
            longest: Duration::from_nanos(self.longest_ns.load(Ordering::Relaxed)),
            over_a_millisecond: self.over_a_millisecond.load(Ordering::Relaxed),
        }
    }
}

/// Sleep until `at`, or for ever when there is none: a `select!` arm that may be off.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Dropped after the rest of a session (its output buffer, screen): counts the heap the
/// session held as freed (`heap::freed`), which hands it back once enough is free; a
/// terminal's emulator, whose size is not counted, has it handed back in any case (the
/// thread that drew it may have ended long before, leaving the session the last to hold
/// it).
#[derive(Default)]
struct ReturnMemory {
    bytes: usize,
    screen: bool,
}

impl Drop for ReturnMemory {
    fn drop(&mut self) {
        heap::freed(self.bytes);
        if self.screen {
            heap::return_soon();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Its retained output (the most of what it holds), measured before it goes.
        self._returns_memory.bytes = self.inspect(|s| s.output().heap_bytes());
        self._returns_memory.screen = self.screen.is_some();
    }
}

/// A terminal's emulator, locked: one that panicked while drawing still holds the best view
/// of the screen there is.
fn lock_screen(screen: &Mutex<Screen>) -> MutexGuard<'_, Screen> {
    screen.lock().unwrap_or_else(|e| e.into_inner())
}

impl Session {
    /// A session over `state`, its readers and supervisor not yet started.
    fn new(identity: Identity, state: State, parts: Parts) -> Self {
        Session {
            id: identity.id,
            command_id: identity.command_id,
            mode: identity.mode,
            pid: identity.pid,
            created_at: identity.created_at,
            origin: identity.origin,
            state: Mutex::new(state),
            changed: watch::Sender::new(()),
            writing: tokio::sync::Mutex::new(()),
            input_file: parts.input_file,
            leader_files: procfs::Held::new(identity.pid),
            terminal: Mutex::new(parts.terminal),
            screen: parts.screen,
            readers: Mutex::new(Vec::new()),
            marks_reader: Mutex::new(None),
            links: parts.links,
            captures: Mutex::default(),
            sink: parts.sink,
            echo_seen: std::sync::atomic::AtomicUsize::new(0),
            exec: tokio::sync::Mutex::default(),
            named_at: Mutex::new(Instant::now()),
            naming_calls: std::sync::atomic::AtomicUsize::new(0),
            recording: parts.recording,
            typed: parts.typed,
            shell_group: std::sync::OnceLock::new(),
            pids_before_command: AtomicI32::new(0),
            groups: tokio::sync::OnceCell::new(),
            _returns_memory: ReturnMemory::default(),
        }
    }

    /// A session over `state` alone, with no process behind it (for tests of the parts
    /// that only look at the state).
    #[cfg(test)]
    fn bare(state: State) -> Self {
        let identity = Identity {
            id: "s".into(),
            command_id: "c".into(),
            mode: Mode::Pipe,
            pid: 1,
            created_at: SystemTime::now(),
            origin: Origin::default(),
        };
        let parts = Parts {
            input_file: None,
            terminal: None,
            screen: None,
            recording: None,
            sink: None,
            links: [None, None],
            typed: None,
        };
        Session::new(identity, state, parts)
    }

    /// Typed `text` as it may be kept: the value of every configured secret replaced by its
    /// marker.
    pub fn redact_typed<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        match &self.typed {
            Some(redactor) => redactor.replaced(text),
            None => std::borrow::Cow::Borrowed(text),
        }
    }

    /// Apply a change to the state and wake every waiter.
    fn update<R>(&self, change: impl FnOnce(&mut State) -> R) -> R {
        let began = std::time::Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let result = change(&mut state);
        drop(state);
        LOCK_HOLDS.note(began.elapsed());
        self.changed.send_replace(());
        result
    }

    /// The terminal of a PTY session whose program still runs.
    fn terminal(&self) -> Option<Arc<PtyMaster>> {
        self.terminal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The program ended: its terminal closes once the readers have drained it, and the
    /// leader's files close.
    fn close_files(&self) {
        self.leader_files.close();
        let terminal = self
            .terminal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(terminal);
    }

    /// Look at the state without waking anyone.
    fn inspect<R>(&self, look: impl FnOnce(&State) -> R) -> R {
        let began = std::time::Instant::now();
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let result = look(&state);
        drop(state);
        LOCK_HOLDS.note(began.elapsed());
        result
    }

    /// The captures of the running command's output (their own lock, taken by the readers
    /// for each piece they deliver).
    fn captures(&self) -> MutexGuard<'_, Captures> {
        self.captures.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn snapshot(&self) -> Snapshot {
        let hidden = self.terminal().is_some_and(|t| t.input_hidden());
        let waiting = self.waiting();
        self.inspect(|s| {
            let mut snapshot = state::snapshot(&self.names(), s);
            snapshot.input_hidden = hidden && !s.status().is_final();
            snapshot.recording = self.recording.as_ref().map(|r| r.name().to_owned());
            snapshot.awaiting_input = waiting.awaiting_input;
            snapshot.foreground = waiting.foreground;
            snapshot
        })
    }

    fn names(&self) -> state::Names<'_> {
        state::Names {
            session_id: &self.id,
            command_id: &self.command_id,
            mode: self.mode,
            pid: self.pid,
            created_at: self.created_at,
        }
    }

    pub fn status(&self) -> Status {
        self.inspect(|s| s.status())
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
        self.wait_until(Instant::now() + within, |s| s.status().is_final())
            .await
    }

    /// A tool call named this session: its idle time starts again.
    pub fn touch(&self) {
        *self.named_at.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn named_at(&self) -> Instant {
        *self.named_at.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A call naming this session until it answers (a wait, a read that waits, a run): no
    /// idle time passes while it is open, and it starts again when the call ends.
    pub fn naming_call(&self) -> NamingCall<'_> {
        self.naming_calls.fetch_add(1, Ordering::SeqCst);
        NamingCall(self)
    }

    /// Whether a call naming this session is open.
    fn named_now(&self) -> bool {
        self.naming_calls.load(Ordering::SeqCst) > 0
    }

    /// Final and past its retention period.
    fn expired(&self, retention: Duration) -> bool {
        self.inspect(|s| s.final_since().is_some_and(|at| at.elapsed() >= retention))
    }

    /// The shell's process group (its leader's ID): the group the integration saw in the
    /// foreground when it was installed, else the session's leader.
    fn shell_group(&self) -> i32 {
        self.shell_group.get().copied().unwrap_or(self.pid)
    }

    /// Since when the shell's commands leave it idle: `None` while a `terminal_exec` call
    /// waits on it or a command it typed runs; else the last command's end, or, for one
    /// that waits for input (a pager, a REPL, a prompt nobody answered), its last output
    /// or input.
    async fn commands_idle_since(&self) -> Option<Instant> {
        if self.exec.try_lock().is_ok() {
            let (open, ended) = self.inspect(|s| {
                let current = s.shell().and_then(|shell| shell.current());
                let ended = current.and_then(|c| c.ended).map(|e| e.at);
                (current.is_some_and(|c| c.ended.is_none()), ended)
            });
            if !open {
                let ended = ended
                    .and_then(|at| Instant::now().checked_sub(at.elapsed().unwrap_or_default()));
                return Some(ended.unwrap_or_else(|| self.named_at()));
            }
            if self.mode == Mode::Pty && self.awaiting_confirmed().await == Some(true) {
                return Some(Instant::from_std(self.inspect(|s| s.last_traffic())));
            }
        }
        None
    }
}

/// A call naming its session, open until dropped (see `Session::naming_call`).
pub struct NamingCall<'a>(&'a Session);

impl Drop for NamingCall<'_> {
    fn drop(&mut self) {
        self.0.touch();
        self.0.naming_calls.fetch_sub(1, Ordering::SeqCst);
    }
}
