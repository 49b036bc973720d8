//! Starting the tasks behind a session, watching its exit, ending it on request.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;
use tokio::time::Instant;

use super::capture::NO_SCREEN;
use super::ingest::{MarksReader, Reader, ReaderLink, Source};
use super::input::{Input, Typed, is_shell};
use super::recording::{Header, Recording};
use super::shell::{Track, install_line, new_nonce, pipe_prepare};
use super::sink::Sink;
use super::state::{Reason, State, Status};
use super::{Identity, Origin, Parts, Session, Snapshot};
use crate::config::Mode;
use crate::limits::{
    DRAIN_DEADLINE, HELD_SHELL_POLL, INSTALL_WITHIN, KILL_CONFIRM, SINK_CLOSE_AFTER_WRITE,
};
use crate::output::{OutputBuffer, Redactor, Screen, Shape, Stream};
use crate::process::waiting::InputFile;
use crate::process::{
    Exit, ExitReceiver, PipeChild, PtyChild, SessionGroups, has_exited, procfs, signal_process,
};

pub struct NewSession {
    pub id: String,
    pub command_id: String,
    pub buffer: OutputBuffer,
    /// `on_full: "pause"` rather than eviction of unread output.
    pub pause: bool,
    /// How long the session may run at most (`None`: as long as it is used).
    pub timeout: Option<Duration>,
    /// End the session when no tool call named it for this long.
    pub idle_timeout: Option<Duration>,
    /// `(name, value)` of every secret the profile allows: redacted from the output.
    pub redact: Vec<(String, String)>,
    /// `(name, value)` of every configured secret: redacted from what is kept of the
    /// input (the recording's input events, the command history, the audit log), which
    /// no timing of output depends on.
    pub redact_typed: Vec<(String, String)>,
    /// Record the session as an asciicast file.
    pub record: Option<RecordTo>,
    /// The profile is a POSIX shell (`terminal_exec` runs commands in it).
    pub shell: bool,
    /// Capture each stream whole, from the start (`terminal_run`).
    pub capture: Option<(Shape, usize)>,
    /// What the live view shows of how it was started.
    pub origin: Origin,
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

/// Wrap a spawned child in a session and start its readers, its sink and its supervisor.
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
    if let Some(recording) = &recording {
        recording.redact_input(&new.redact_typed);
    }
    let mut marks = None;
    let (pid, exit, mode, input, terminal, screen, sources) = match spawned {
        Spawned::Pipes(child) => {
            marks = child.marks;
            (
                child.pid,
                child.exit,
                Mode::Pipe,
                Input::pipe(Arc::new(child.stdin)),
                None,
                None,
                vec![
                    (Source::Pipe(Arc::new(child.stdout)), Stream::Stdout),
                    (Source::Pipe(Arc::new(child.stderr)), Stream::Stderr),
                ],
            )
        }
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
                Some(Arc::new(Mutex::new(Screen::new(
                    rows,
                    cols,
                    emulator_cells,
                )))),
                vec![(Source::Pty(master), Stream::Stdout)],
            )
        }
    };
    let input_file = match (&terminal, &input) {
        (Some(master), _) => master.path().map(|p| InputFile::Terminal(p.to_owned())),
        (None, Input::Pipe { pipe, .. }) => nix::sys::stat::fstat(pipe.as_ref())
            .ok()
            .map(|stat| InputFile::Pipe(stat.st_ino)),
        (None, _) => None,
    };
    let nonce = new.shell.then(new_nonce);
    // A shell on pipes reads what its commands' wrapper needs before anything else: written
    // now, whole (under PIPE_BUF) and at once (the pipe is non-blocking), into the pipe
    // nothing has written to yet.
    if let (Some(nonce), Input::Pipe { pipe, .. }) = (&nonce, &input)
        && let Err(e) = nix::unistd::write(pipe.as_fd(), pipe_prepare(nonce).as_bytes())
    {
        // The shell already ended (its stdin closed): its session says so.
        tracing::debug!("the shell's preparation was not written: {e}");
    }
    let track = nonce.clone().map(|nonce| match mode {
        Mode::Pipe => Track::wrapped(nonce),
        Mode::Pty => Track::installing(nonce),
    });
    let state = State::new(input, new.buffer, sources.len() as u8)
        .with_pause(new.pause)
        .with_shell(track);
    let sink = Sink::start(screen.clone(), recording.clone(), terminal.as_ref());
    let mut links = [None, None];
    let mut receivers = Vec::new();
    for (source, stream) in &sources {
        let (link, requests, idle) = ReaderLink::new(source);
        links[*stream as usize] = Some(link);
        receivers.push((requests, idle));
    }
    let session = Arc::new(Session::new(
        Identity {
            id: new.id,
            command_id: new.command_id,
            mode,
            pid,
            created_at,
            origin: new.origin,
        },
        state,
        Parts {
            input_file,
            terminal,
            screen,
            recording,
            sink,
            links,
            typed: Redactor::new(&new.redact_typed),
        },
    ));
    if let Some((shape, max_bytes)) = new.capture {
        let mut captures = session.captures();
        captures.arm(Stream::Stdout, (shape, NO_SCREEN), max_bytes, true);
        captures.arm(Stream::Stderr, (shape, NO_SCREEN), max_bytes, true);
    }
    let install_until = Instant::now() + INSTALL_WITHIN;
    let readers = sources
        .into_iter()
        .zip(receivers)
        .map(|((source, stream), controls)| {
            let mut reader = Reader::new(
                session.clone(),
                (source, stream),
                Redactor::new(&new.redact),
                controls,
            );
            if let Some(nonce) = &nonce {
                reader = reader.with_marks(nonce);
                if mode == Mode::Pty {
                    reader = reader.installing(install_until);
                }
            }
            tokio::spawn(reader.run())
        })
        .collect();
    *session.readers.lock().unwrap_or_else(|e| e.into_inner()) = readers;
    if let (Some(pipe), Some(nonce)) = (marks, &nonce) {
        let marks = MarksReader::start(session.clone(), pipe, nonce);
        *session
            .marks_reader
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(marks);
    }
    if let (Some(nonce), Mode::Pty) = (&nonce, mode) {
        let installer = session.clone();
        let line = format!("{}\n", install_line(nonce));
        tokio::spawn(async move {
            let never = tokio_util::sync::CancellationToken::new();
            let typed = Typed::Unrecorded;
            let _ = installer
                .send_as(line.as_bytes(), false, &never, typed)
                .await;
        });
    }
    tokio::spawn(supervise(
        session.clone(),
        exit,
        new.timeout,
        new.idle_timeout,
    ));
    session
}

/// Wait for the leader's exit (ending the session at its timeout), then make it final:
/// kill what remains of its process group and drain the pipes.
async fn supervise(
    session: Arc<Session>,
    mut exit: ExitReceiver,
    timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
) {
    let exit = tokio::select! {
        exit = &mut exit => exit,
        why = expiry(&session, timeout, idle_timeout) => {
            tracing::info!(session = %session.id, "{why}");
            let ending = session.clone();
            tokio::spawn(async move {
                ending.end(Reason::Timeout, Some(why), crate::limits::GRACE_DEFAULT_MS).await;
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
            s.exited(exit);
            s.status()
        }),
        // The reaper is gone: nothing can tell us how the process ends.
        Err(_) => session.update(|s| {
            s.finish(Status::Failed);
            s.status()
        }),
    };
    // Descendants left in the session must not linger or hold the pipes.
    session
        .groups_once(leader.is_some())
        .await
        .signal(&[Signal::SIGKILL]);
    drop(leader);
    session.update(|s| s.close_input());
    // The readers hold the terminal while they drain it.
    session.close_files();
    tracing::debug!(session = %session.id, pid = session.pid, status = status.as_str(), "process ended");

    let (drained, ()) = tokio::join!(session.drain(), session.end_marks());
    let readers = std::mem::take(&mut *session.readers.lock().unwrap_or_else(|e| e.into_inner()));
    if !drained {
        for reader in &readers {
            reader.abort();
        }
        tracing::warn!(session = %session.id, "output incomplete: a pipe stayed open past the drain deadline");
    }
    // A reader lets go of its pipe or terminal last, just after its stream's end is in the
    // state: once it has, the session holds no descriptor, before anyone sees it settled.
    for reader in readers {
        let _ = reader.await;
    }
    if let Some(sink) = &session.sink {
        // A write that reached the program just before it ended (the `q` that quit it)
        // records its input once written: let it, so the recording shows the keys before
        // the end. Writes are bounded, and so is this wait.
        let _ = tokio::time::timeout(SINK_CLOSE_AFTER_WRITE, session.writing.lock()).await;
        sink.close(closing).await;
    }
    session.update(|s| s.output_settled(drained));
}

/// Completes when the session has run for `timeout`, or (with `idle_timeout`) when no
/// tool call has named it for that long; says which.
async fn expiry(
    session: &Session,
    timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
) -> String {
    let idle = async {
        let Some(idle) = idle_timeout else {
            return std::future::pending().await;
        };
        loop {
            let due = session.named_at() + idle;
            if Instant::now() < due {
                tokio::time::sleep_until(due).await;
                continue;
            }
            if session.named_now() {
                // A call waiting on it names it all along.
                session.touch();
                continue;
            }
            match session.commands_idle_since().await {
                // A command running in the shell is not idleness.
                None => session.touch(),
                Some(since) if since + idle > Instant::now() => {
                    tokio::time::sleep_until(since + idle).await;
                }
                // A call that named it while that was looked at (a wait on its input takes a
                // moment) keeps it.
                Some(_) if session.named_now() || Instant::now() < session.named_at() + idle => {}
                Some(_) => return,
            }
        }
    };
    let lifetime = async {
        match timeout {
            Some(timeout) => tokio::time::sleep(timeout).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = lifetime => format!(
            "its timeout_ms of {} ms passed",
            timeout.unwrap_or_default().as_millis()
        ),
        () = idle => format!(
            "no tool call named it for its idle_timeout_ms of {} ms",
            idle_timeout.unwrap_or_default().as_millis()
        ),
    }
}

impl Session {
    /// Wait for the readers to reach EOF after the process ended: true if they did within
    /// the drain deadline. Time a reader spends paused does not count: its output waits
    /// for the client, not for an escaped descendant.
    async fn drain(&self) -> bool {
        loop {
            let deadline = Instant::now() + DRAIN_DEADLINE;
            if !self
                .wait_until(deadline, |s| s.open_streams() == 0 || s.paused())
                .await
            {
                return false;
            }
            if self.inspect(|s| s.open_streams() == 0) {
                return true;
            }
            self.wait_for(|s| s.open_streams() == 0 || !s.paused())
                .await;
        }
    }

    /// Records below `cursor` have been seen by a client: with `on_full: "pause"` they may
    /// be evicted, and a reader holding output stores it and reads on. Every result that
    /// returns a `next_cursor` (or an end cursor) acknowledges it.
    pub fn acknowledge(&self, cursor: u64) {
        if self.inspect(|s| s.pause() && cursor > s.acknowledged()) {
            self.update(|s| s.acknowledge(cursor));
        }
    }

    /// A pipe shell's marks pipe is read to its end alongside the output's drain, with
    /// the same deadline.
    async fn end_marks(&self) {
        let marks = self
            .marks_reader
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(marks) = marks {
            marks.end(DRAIN_DEADLINE).await;
        }
    }

    /// The record is gone: readers holding output drop it and end.
    pub(super) fn discard(&self) {
        self.update(|s| s.discard());
    }

    /// End the session: SIGTERM to the group, `grace_ms`, SIGKILL, confirm. Idempotent:
    /// a final session is returned unchanged, and a second caller waits for the first.
    pub async fn terminate(&self, reason: Reason, grace_ms: u64) -> Snapshot {
        self.end(reason, None, grace_ms).await
    }

    /// `terminate`, saying why in words (kept for errors about the final session).
    pub(super) async fn end(&self, reason: Reason, why: Option<String>, grace_ms: u64) -> Snapshot {
        // A process that already ended on its own (not yet recorded by the supervisor)
        // ended without controller action: it stays EXITED, not TERMINATED.
        let exited = has_exited(self.pid);
        let first = !exited && self.update(|s| s.begin_ending(reason, why));
        let grace = Duration::from_millis(grace_ms);
        if !first {
            self.wait_final(grace + KILL_CONFIRM).await;
            return self.settled_snapshot().await;
        }
        tracing::info!(session = %self.id, pid = self.pid, ?reason, "terminating");
        // An interactive shell ignores SIGTERM (and may ignore SIGHUP): once the program it
        // waits for ended of the signal, it would run the rest of the command line. It is
        // stopped first (SIGSTOP, which nothing ignores) and kept stopped while its
        // programs get SIGTERM and their grace, then killed with them.
        let held = (self.mode == Mode::Pty && self.inspect(|s| s.shell().is_some()))
            .then(|| self.running_shell())
            .flatten();
        if let Some(shell) = held {
            signal_process(shell, Signal::SIGSTOP);
        }
        // A stopped group (SIGSTOP, SIGTSTP) only acts on SIGTERM once it runs again.
        self.groups()
            .await
            .signal_holding(&[Signal::SIGTERM, Signal::SIGCONT], held);
        if !self.wait_programs(grace, held).await {
            self.groups().await.kill().await;
            if !self.wait_final(KILL_CONFIRM).await {
                tracing::error!(session = %self.id, pid = self.pid, "process survived SIGKILL");
                self.update(|s| s.finish(Status::Failed));
            }
        }
        self.settled_snapshot().await
    }

    /// The shell process of this session, if one runs now: its own group's leader, still
    /// in this POSIX session and still a shell (not a program it `exec`'d, nor a process
    /// that took the ID of one that ended). Else the session's leader when that is a shell.
    fn running_shell(&self) -> Option<i32> {
        let shell = |pid: i32| {
            procfs::stat(pid).is_some_and(|s| s.session == self.pid && s.pgrp == pid)
                && procfs::name(pid).is_some_and(|name| is_shell(&name))
        };
        [self.shell_group(), self.pid]
            .into_iter()
            .find(|pid| shell(*pid))
    }

    /// Wait until the session is final, or `grace` passes; with a shell `held` stopped
    /// (its process, which leads its group), only until no other process of the session
    /// runs (false then: the shell is left to kill). Whether it is final.
    async fn wait_programs(&self, grace: Duration, held: Option<i32>) -> bool {
        let Some(shell) = held else {
            return self.wait_final(grace).await;
        };
        let until = Instant::now() + grace;
        loop {
            let look = until.min(Instant::now() + HELD_SHELL_POLL);
            if self.wait_final(look - Instant::now()).await {
                return true;
            }
            if Instant::now() >= until || !self.groups().await.others_run(shell) {
                return false;
            }
        }
    }

    /// The session's process groups, scanned for the first signal of its termination and
    /// reused by every later one (see `SessionGroups`): one /proc scan per termination,
    /// in place while the session's tree and the processes the server adopted are few, else
    /// on a blocking thread.
    async fn groups(&self) -> &SessionGroups {
        self.groups_once(false).await
    }

    /// `groups`, scanned the lighter way if the leader's end was waited for
    /// (`leader_ended`) and nothing scanned before.
    async fn groups_once(&self, leader_ended: bool) -> &SessionGroups {
        let sid = self.pid;
        let find = || SessionGroups::find(sid, leader_ended);
        self.groups.get_or_init(find).await
    }

    /// The snapshot once the output is settled too (complete, declared incomplete after
    /// the drain deadline, or held until a client reads on), so a final snapshot does not
    /// change afterwards unless a client reads held output.
    async fn settled_snapshot(&self) -> Snapshot {
        let settle = DRAIN_DEADLINE + DRAIN_DEADLINE;
        self.wait_until(Instant::now() + settle, |s| {
            !s.status().is_final() || s.output_ended() || s.paused()
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
    use crate::limits::INLINE_SCAN_MAX;
    use crate::output::Search;
    use crate::process::{Reaper, SpawnSpec, scans, scans_on_a_thread, spawn_pipes};
    use crate::session::{Streams, WaitRequest};

    /// The reaper takes every child of its process, so this runs alone (see `alone`).
    #[test]
    fn a_termination_scans_proc_once_per_signal_it_escalates_to() {
        crate::process::alone("session::lifecycle::tests::scans_per_termination");
    }

    /// A session whose leader runs `script` in bash with job control, so its background
    /// job gets a process group of its own inside the session.
    async fn start(reaper: &Reaper, script: &str) -> Arc<Session> {
        let spec = SpawnSpec {
            marks: false,
            argv: ["/bin/bash", "-c", &format!("set -m; {script}")]
                .map(str::to_owned)
                .to_vec(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: Box::new(|| {
                let flags = nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC;
                Ok(nix::fcntl::open("/", flags, nix::sys::stat::Mode::empty()).unwrap())
            }),
        };
        let child = spawn_pipes(spec, reaper).await.unwrap();
        let new = NewSession {
            id: "s".into(),
            command_id: "c".into(),
            buffer: OutputBuffer::new(1 << 16, 1024),
            pause: false,
            timeout: Some(Duration::from_secs(600)),
            idle_timeout: None,
            redact: Vec::new(),
            redact_typed: Vec::new(),
            record: None,
            shell: false,
            capture: None,
            origin: Origin::default(),
        };
        launch(new, Spawned::Pipes(child))
    }

    /// The PID the script printed as `job PID`.
    async fn job_pid(session: &Session) -> i32 {
        reported(session, "job (\\d+)\\n").await.parse().unwrap()
    }

    /// What the script printed in the first group of `pattern`.
    async fn reported(session: &Session, pattern: &str) -> String {
        let request = WaitRequest {
            cursor: 0,
            search: Some(Search::new(pattern).unwrap()),
            streams: Streams::Any,
            timeout: Duration::from_secs(60),
            strip_ansi: false,
            idle: None,
            until_input: false,
        };
        let (searched, cancel) = (AtomicU64::new(0), CancellationToken::new());
        let waited = session.wait(request, &searched, &cancel).await;
        let found = waited.unwrap().found.expect("the job reported");
        found.groups[0].as_deref().unwrap().to_owned()
    }

    /// Wait until `pid` has ended: it holds the session's pipes, so this follows soon
    /// after the output is complete.
    async fn ended(pid: i32) {
        let dead = || crate::process::procfs::stat(pid).is_none_or(|s| s.state == 'Z');
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            while !dead() {
                tokio::task::yield_now().await;
            }
        });
        waited.await.expect("the job was killed");
    }

    #[test]
    #[ignore = "run alone by a_termination_scans_proc_once_per_signal_it_escalates_to"]
    fn scans_per_termination() {
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
            let (before, on_a_thread) = (scans(), scans_on_a_thread());
            session.update(|s| s.close_input());
            let complete =
                session.wait_until(Instant::now() + Duration::from_secs(60), |s| s.settled());
            assert!(complete.await, "the leader ended on EOF");
            assert_eq!(session.snapshot().status, Status::Exited);
            assert_eq!(scans() - before, 1);
            assert_eq!(
                scans_on_a_thread(),
                on_a_thread,
                "two descendants: looked up in place"
            );
            ended(job).await;

            // More descendants than the exit looks at in place: the scan runs on a
            // blocking thread, and every job's group is still killed.
            let script = format!(
                "for i in $(seq {}); do sleep 1000 & jobs=\"$jobs $!\"; done; \
                 echo \"jobs$jobs\"; read line",
                INLINE_SCAN_MAX + 8
            );
            let session = start(&reaper, &script).await;
            let jobs = reported(&session, "jobs([ 0-9]+)\\n").await;
            let jobs: Vec<i32> = jobs
                .split_whitespace()
                .map(|j| j.parse().unwrap())
                .collect();
            assert_eq!(jobs.len(), INLINE_SCAN_MAX + 8);
            let (before, on_a_thread) = (scans(), scans_on_a_thread());
            session.update(|s| s.close_input());
            let complete =
                session.wait_until(Instant::now() + Duration::from_secs(60), |s| s.settled());
            assert!(complete.await, "the leader ended on EOF");
            assert_eq!(scans() - before, 1);
            assert_eq!(scans_on_a_thread() - on_a_thread, 1);
            for job in jobs {
                ended(job).await;
            }
        });
    }
}
