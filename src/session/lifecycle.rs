//! Starting the tasks behind a session, watching its exit, ending it on request.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::time::Instant;

use super::input::Input;
use super::recording::{Header, Recording};
use super::state::{Reason, State, Status};
use super::{Session, Snapshot, return_memory};
use crate::config::Mode;
use crate::limits::{DRAIN_DEADLINE, KILL_CONFIRM, READ_CHUNK_BYTES, REDACT_HOLD_MAX};
use crate::output::{OutputBuffer, Redactor, Screen, Stream, Utf8Decoder};
use crate::process::{
    Exit, ExitReceiver, PipeChild, PtyChild, PtyMaster, SessionGroups, has_exited,
};

pub struct NewSession {
    pub id: String,
    pub command_id: String,
    pub buffer: OutputBuffer,
    /// `on_full: "pause"` rather than eviction of unread output.
    pub pause: bool,
    pub timeout: Duration,
    /// End the session when no tool call named it for this long.
    pub idle_timeout: Option<Duration>,
    /// `(name, value)` of every secret the profile allows: redacted from the output.
    pub redact: Vec<(String, String)>,
    /// Record the session as an asciicast file.
    pub record: Option<RecordTo>,
}

/// Where and how a session is recorded.
pub struct RecordTo {
    pub dir: PathBuf,
    pub argv: Vec<String>,
    /// `TERM` as the recording's header tells players.
    pub term: &'static str,
}

/// A spawned child, on pipes or on a terminal of `rows`×`cols`.
pub enum Spawned {
    Pipes(PipeChild),
    Pty {
        child: PtyChild,
        rows: u16,
        cols: u16,
        /// The cells its emulator may hold.
        emulator_cells: usize,
    },
}

/// Where a reader task reads from.
enum Source {
    Pipe(pipe::Receiver),
    Pty(Arc<PtyMaster>),
}

impl Source {
    async fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Source::Pipe(pipe) => pipe.read(buf).await,
            Source::Pty(master) => master.read(buf).await,
        }
    }
}

/// Wrap a spawned child in a session and start its readers and supervisor.
pub fn launch(new: NewSession, spawned: Spawned) -> Arc<Session> {
    let created_at = SystemTime::now();
    // Pipe sessions are recorded as an 80×24 terminal.
    let (rows, cols) = match &spawned {
        Spawned::Pty { rows, cols, .. } => (*rows, *cols),
        Spawned::Pipes(_) => (24, 80),
    };
    let recording = new.record.as_ref().and_then(|to| {
        Recording::create(
            &to.dir,
            &Header {
                command_id: &new.command_id,
                session_id: &new.id,
                argv: &to.argv,
                created_at,
                cols,
                rows,
                term: to.term,
            },
        )
    });
    let (pid, exit, mode, input, terminal, screen, sources) = match spawned {
        Spawned::Pipes(child) => (
            child.pid,
            child.exit,
            Mode::Pipe,
            Input::Pipe(Arc::new(child.stdin)),
            None,
            None,
            vec![
                (Source::Pipe(child.stdout), Stream::Stdout),
                (Source::Pipe(child.stderr), Stream::Stderr),
            ],
        ),
        Spawned::Pty {
            child,
            rows,
            cols,
            emulator_cells,
        } => {
            let master = Arc::new(child.master);
            (
                child.pid,
                child.exit,
                Mode::Pty,
                Input::pty(master.clone()),
                Some(master.clone()),
                Some(Screen::new(rows, cols, emulator_cells)),
                vec![(Source::Pty(master), Stream::Stdout)],
            )
        }
    };
    let mut state = State::new(input, new.buffer, sources.len() as u8);
    state.screen = screen;
    state.pause = new.pause;
    let session = Arc::new(Session::new(
        new.id,
        new.command_id,
        (mode, pid, created_at),
        state,
        terminal,
        recording,
    ));
    let readers = sources
        .into_iter()
        .map(|(source, stream)| {
            let redactor = Redactor::new(&new.redact);
            tokio::spawn(read_output(session.clone(), source, stream, redactor))
        })
        .collect();
    *session.readers.lock().unwrap_or_else(|e| e.into_inner()) = readers;
    tokio::spawn(supervise(
        session.clone(),
        exit,
        new.timeout,
        new.idle_timeout,
    ));
    session
}

/// Decode one source, redact it, and deliver it (`deliver`) until EOF. A read error ends
/// the source like EOF.
async fn read_output(
    session: Arc<Session>,
    mut source: Source,
    stream: Stream,
    mut redactor: Option<Redactor>,
) {
    let mut bytes = vec![0u8; READ_CHUNK_BYTES];
    let mut decoder = Utf8Decoder::default();
    let mut decoded = String::new();
    let mut text = String::new();
    // Since when the redactor holds back a possible start of a secret's value.
    let mut held_since: Option<Instant> = None;
    loop {
        let read = match held_since {
            Some(since) => tokio::select! {
                read = source.read(&mut bytes) => Some(read),
                () = tokio::time::sleep_until(since + REDACT_HOLD_MAX) => None,
            },
            None => Some(source.read(&mut bytes).await),
        };
        decoded.clear();
        text.clear();
        let out = match read {
            Some(Ok(0) | Err(_)) => break,
            Some(Ok(n)) => {
                decoder.push(&bytes[..n], &mut decoded);
                redacted(&mut redactor, &decoded, &mut text)
            }
            // Nothing decided the held-back text in time: it is output as it is.
            None => {
                if let Some(r) = redactor.as_mut() {
                    r.flush(&mut text);
                }
                &text
            }
        };
        held_since = match redactor.as_ref() {
            Some(r) if r.holding() => held_since.or_else(|| Some(Instant::now())),
            _ => None,
        };
        if !deliver(&session, &source, stream, out).await {
            return;
        }
    }
    decoded.clear();
    text.clear();
    decoder.finish(&mut decoded);
    let out = match redactor.as_mut() {
        // What the redactor still holds back ends here too.
        Some(r) => {
            r.push(&decoded, &mut text);
            r.flush(&mut text);
            &text
        }
        None => &decoded,
    };
    if deliver(&session, &source, stream, out).await {
        session.update(|s| s.open_streams -= 1);
    }
}

/// The redaction stage: `decoded` with every allowed secret's value replaced (in `out`),
/// or `decoded` itself when the session has no secrets to redact.
fn redacted<'a>(redactor: &mut Option<Redactor>, decoded: &'a str, out: &'a mut String) -> &'a str {
    match redactor.as_mut() {
        Some(r) => {
            r.push(decoded, out);
            out
        }
        None => decoded,
    }
}

/// Output text (already redacted) enters the screen, answering the program's terminal
/// queries, and the buffer; with `on_full: "pause"` what does not fit waits (`hold`).
/// False when the session was discarded meanwhile.
async fn deliver(session: &Session, source: &Source, stream: Stream, text: &str) -> bool {
    if text.is_empty() {
        return true;
    }
    let (replies, taken) = session.update(|s| {
        let replies = s.screen.as_mut().map(|screen| screen.feed(text.as_bytes()));
        // Under the state lock, so the recording keeps the buffer's order of the streams.
        if let Some(recording) = &session.recording {
            recording.output(text);
        }
        (replies.unwrap_or_default(), s.store(stream, text))
    });
    if let (Source::Pty(master), false) = (source, replies.is_empty()) {
        master.try_write(&replies);
    }
    session.hold(stream, &text[taken..]).await
}

/// Wait for the leader's exit (ending the session at its timeout), then make it final:
/// kill what remains of its process group and drain the pipes.
async fn supervise(
    session: Arc<Session>,
    mut exit: ExitReceiver,
    timeout: Duration,
    idle_timeout: Option<Duration>,
) {
    let exit = tokio::select! {
        exit = &mut exit => exit,
        why = expiry(&session, timeout, idle_timeout) => {
            tracing::info!(session = %session.id, "{why}");
            let ending = session.clone();
            tokio::spawn(async move {
                ending.terminate(Reason::Timeout, crate::limits::GRACE_DEFAULT_MS).await;
            });
            exit.await
        }
    };
    // The leader stays a zombie (its PID, group and session IDs reserved) until its
    // descendants are killed below.
    let (exit, leader) = match exit {
        Ok((exit, leader)) => (Ok(exit), Some(leader)),
        Err(e) => (Err(e), None),
    };
    let closing = match exit {
        Ok(Exit::Code(code)) => format!("exit {code}"),
        Ok(Exit::Signal(signal)) => format!("signal {}", signal.as_str()),
        Err(_) => "failed".to_owned(),
    };
    let status = match exit {
        Ok(exit) => session.update(|s| {
            s.exit = Some(exit);
            let status = if s.reason.is_some() {
                Status::Terminated
            } else {
                Status::Exited
            };
            s.finish(status);
            s.status
        }),
        // The reaper is gone: nothing can tell us how the process ends.
        Err(_) => session.update(|s| {
            s.finish(Status::Failed);
            s.status
        }),
    };
    // Descendants left in the session must not linger or hold the pipes open.
    session.groups().await.signal(&[Signal::SIGKILL]);
    drop(leader);
    session.update(|s| s.input.close());
    tracing::info!(session = %session.id, pid = session.pid, status = status.as_str(), "process ended");

    let drained = session.drain().await;
    if !drained {
        for reader in session
            .readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            reader.abort();
        }
        tracing::warn!(session = %session.id, "output incomplete: a pipe stayed open past the drain deadline");
    }
    session.update(|s| {
        s.output_complete = drained;
        s.output_incomplete = !drained;
    });
    if let Some(recording) = &session.recording {
        recording.close(&closing);
    }
    // The readers and their read buffers are gone.
    return_memory();
}

/// Completes when the session has run for `timeout`, or (with `idle_timeout`) when no
/// tool call has named it for that long; says which.
async fn expiry(session: &Session, timeout: Duration, idle_timeout: Option<Duration>) -> String {
    let idle = async {
        let Some(idle) = idle_timeout else {
            return std::future::pending().await;
        };
        loop {
            let due = session.named_at() + idle;
            if Instant::now() < due {
                tokio::time::sleep_until(due).await;
            } else if session.shell.try_lock().is_err() {
                // A command running in the shell is not idleness.
                session.touch();
            } else {
                return;
            }
        }
    };
    tokio::select! {
        () = tokio::time::sleep(timeout) => format!("timeout after {} ms", timeout.as_millis()),
        () = idle => format!(
            "idle timeout: no tool call named the session for {} ms",
            idle_timeout.unwrap_or_default().as_millis()
        ),
    }
}

impl Session {
    /// Wait until a reader can store `rest` (a client acknowledged output, making room),
    /// storing it as it fits; meanwhile the reader reads nothing, so the child blocks in
    /// its `write`. False when the record was discarded first (the rest is dropped).
    async fn hold(&self, stream: Stream, mut rest: &str) -> bool {
        while !rest.is_empty() {
            // Stored and acknowledged read under one lock: an acknowledgement that comes
            // after this store changes `acknowledged` from `seen`, so none is missed.
            let (taken, seen, discarded) = self.update(|s| {
                if s.discarded {
                    s.holding[stream as usize] = false;
                    (0, s.acknowledged, true)
                } else {
                    (s.store(stream, rest), s.acknowledged, false)
                }
            });
            if discarded {
                return false;
            }
            rest = &rest[taken..];
            if !rest.is_empty() {
                self.wait_for(|s| s.acknowledged != seen || s.discarded)
                    .await;
            }
        }
        true
    }

    /// Wait for the readers to reach EOF after the process ended: true if they did within
    /// the drain deadline. Time a reader spends paused does not count: its output waits
    /// for the client, not for an escaped descendant.
    async fn drain(&self) -> bool {
        loop {
            let deadline = Instant::now() + DRAIN_DEADLINE;
            if !self
                .wait_until(deadline, |s| s.open_streams == 0 || s.paused())
                .await
            {
                return false;
            }
            if self.inspect(|s| s.open_streams == 0) {
                return true;
            }
            self.wait_for(|s| s.open_streams == 0 || !s.paused()).await;
        }
    }

    /// Records below `cursor` have been seen by a client: with `on_full: "pause"` they may
    /// be evicted, and a reader holding output stores it and reads on. Every result that
    /// returns a `next_cursor` (or an end cursor) acknowledges it.
    pub fn acknowledge(&self, cursor: u64) {
        if self.inspect(|s| s.pause && cursor > s.acknowledged) {
            self.update(|s| s.acknowledged = s.acknowledged.max(cursor));
        }
    }

    /// The record is gone: readers holding output drop it and end.
    pub(super) fn discard(&self) {
        self.update(|s| s.discarded = true);
    }

    /// End the session: SIGTERM to the group, `grace_ms`, SIGKILL, confirm. Idempotent:
    /// a final session is returned unchanged, and a second caller waits for the first.
    pub async fn terminate(&self, reason: Reason, grace_ms: u64) -> Snapshot {
        // A process that already ended on its own (not yet recorded by the supervisor)
        // ended without controller action: it stays EXITED, not TERMINATED.
        let exited = has_exited(self.pid);
        let first = self.update(|s| match s.status {
            Status::Running if !exited => {
                s.status = Status::Terminating;
                s.reason = Some(reason);
                true
            }
            Status::Running
            | Status::Terminating
            | Status::Exited
            | Status::Terminated
            | Status::Failed => false,
        });
        let grace = Duration::from_millis(grace_ms);
        if !first {
            self.wait_final(grace + KILL_CONFIRM).await;
            return self.settled_snapshot().await;
        }
        tracing::info!(session = %self.id, pid = self.pid, ?reason, "terminating");
        // A stopped group (SIGSTOP, SIGTSTP) only acts on SIGTERM once it runs again.
        self.groups()
            .await
            .signal(&[Signal::SIGTERM, Signal::SIGCONT]);
        if !self.wait_final(grace).await {
            self.groups().await.kill().await;
            if !self.wait_final(KILL_CONFIRM).await {
                tracing::error!(session = %self.id, pid = self.pid, "process survived SIGKILL");
                self.update(|s| s.finish(Status::Failed));
            }
        }
        self.settled_snapshot().await
    }

    /// The session's process groups, scanned for the first signal of its termination and
    /// reused by every later one (see `SessionGroups`): one /proc scan per termination.
    /// The scan reads a file per process on the system, so it runs off the async workers.
    async fn groups(&self) -> &SessionGroups {
        let sid = self.pid;
        self.groups
            .get_or_init(|| async move {
                tokio::task::spawn_blocking(move || SessionGroups::scan(sid))
                    .await
                    .unwrap_or_else(|_| SessionGroups::leader_only(sid))
            })
            .await
    }

    /// The snapshot once the output is settled too (complete, declared incomplete after
    /// the drain deadline, or held until a client reads on), so a final snapshot does not
    /// change afterwards unless a client reads held output.
    async fn settled_snapshot(&self) -> Snapshot {
        let settle = DRAIN_DEADLINE + DRAIN_DEADLINE;
        self.wait_until(Instant::now() + settle, |s| {
            !s.status.is_final() || s.output_complete || s.output_incomplete || s.paused()
        })
        .await;
        self.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::output::Search;
    use crate::process::{Reaper, SpawnSpec, scans, spawn_pipes};
    use crate::session::{Streams, WaitRequest};

    /// The reaper takes every child of its process, so this runs alone in a process of its
    /// own: the test binary again, running only the test below.
    #[test]
    fn a_termination_scans_proc_once() {
        let run = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "session::lifecycle::tests::one_scan",
                "--ignored",
            ])
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

    /// A session whose leader runs `script` in bash with job control, so its background
    /// job gets a process group of its own inside the session.
    async fn start(reaper: &Reaper, script: &str) -> Arc<Session> {
        let spec = SpawnSpec {
            argv: ["/bin/bash", "-c", &format!("set -m; {script}")]
                .map(str::to_owned)
                .to_vec(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: nix::fcntl::open(
                "/",
                nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .unwrap(),
        };
        let child = spawn_pipes(&spec, reaper).await.unwrap();
        let new = NewSession {
            id: "s".into(),
            command_id: "c".into(),
            buffer: OutputBuffer::new(1 << 16, 1024),
            pause: false,
            timeout: Duration::from_secs(600),
            idle_timeout: None,
            redact: Vec::new(),
            record: None,
        };
        launch(new, Spawned::Pipes(child))
    }

    /// The PID the script printed as `job PID`.
    async fn job_pid(session: &Session) -> i32 {
        let request = WaitRequest {
            cursor: 0,
            search: Some(Search::new("job (\\d+)\\n").unwrap()),
            streams: Streams::Any,
            timeout: Duration::from_secs(60),
            strip_ansi: false,
            idle: None,
        };
        let (searched, cancel) = (AtomicU64::new(0), CancellationToken::new());
        let waited = session.wait(request, &searched, &cancel).await;
        let found = waited.unwrap().found.expect("the job reported");
        found.groups[0].as_deref().unwrap().parse().unwrap()
    }

    /// Wait until `pid` has ended: it holds the session's pipes, so this follows soon
    /// after the output is complete.
    async fn ended(pid: i32) {
        let dead = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
                stat.rsplit_once(')')
                    .is_some_and(|(_, s)| s.starts_with(" Z"))
            })
        };
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            while !dead() {
                tokio::task::yield_now().await;
            }
        });
        waited.await.expect("the job was killed");
    }

    #[test]
    #[ignore = "run alone by a_termination_scans_proc_once"]
    fn one_scan() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let reaper = Reaper::start().unwrap();

            // Terminate with escalation: SIGTERM is ignored by the leader and by the job
            // in its own group, so SIGKILL follows, then the kill after the leader's exit.
            let session = start(
                &reaper,
                "(trap '' TERM; exec sleep 1000) & trap '' TERM; echo \"job $!\"; exec sleep 1000",
            )
            .await;
            let job = job_pid(&session).await;
            let before = scans();
            let snapshot = session.terminate(Reason::User, 200).await;
            assert_eq!(snapshot.status, Status::Terminated);
            assert_eq!(snapshot.exit_signal, Some("SIGKILL"));
            assert!(snapshot.output_complete, "{snapshot:?}");
            assert_eq!(
                scans() - before,
                2,
                "one /proc scan at SIGTERM and one before SIGKILL, for the whole termination"
            );
            ended(job).await;

            // A natural exit: the job is killed after the leader ends, with one scan.
            let session = start(&reaper, "sleep 1000 & echo \"job $!\"; read line").await;
            let job = job_pid(&session).await;
            let before = scans();
            session.update(|s| s.input.close());
            let complete = session.wait_until(Instant::now() + Duration::from_secs(60), |s| {
                s.output_complete
            });
            assert!(complete.await, "the leader ended on EOF");
            assert_eq!(session.snapshot().status, Status::Exited);
            assert_eq!(scans() - before, 1);
            ended(job).await;
        });
    }
}
