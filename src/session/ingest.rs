//! Reading a session's output: one task per stream decodes what the child writes, takes out
//! the shell integration's marks (recording where each one was), redacts secret values, and
//! delivers the text to the buffer and the sink (emulator and recording) at once, then to
//! the capture of a running command.
//!
//! Held back, and released by one rule: what may still become a mark (an escape sequence cut
//! by the end of a read) and, in a session whose profile allows secrets, the trailing
//! partial line. Either is released when more output decides it, when no more came for
//! `REDACT_HOLD_QUIET`, or `REDACT_HOLD_MAX` after the hold began (the redactor then keeps
//! what may begin a value, by its size alone, for a new hold, when more keeps coming).
//! While a terminal shell's integration is being installed, its output is held and then
//! dropped (the shell's start, with the installing line, is not shown), or released if the
//! integration does not answer in time.
//!
//! A reader also takes requests from `terminal_exec` between reads: `Drain` (deliver what
//! the pipe holds now and everything held back, so a command's stderr is complete; not
//! asked for when the pipe holds nothing and the reader has nothing in hand); for a
//! shell that reads lines from the terminal's line discipline, `Expect` (drain, then mark a
//! command's start where the terminal's echo of it ends: every character of the echo, in
//! order, whatever other output comes between) and `Inject` (with the terminal's echo off:
//! drain, then write the echo into the output where the terminal would have shown it, and
//! mark the start after it).

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::input::is_shell;
use super::shell::scan::{Mark, Piece, Scanner};
use super::shell::{CaptureChange, Typing};
use super::{Session, sleep_until};
use crate::heap;
use crate::limits::{
    INSTALL_HELD_MAX_BYTES, READ_CHUNK_BYTES, READ_FIRST_BYTES, REDACT_HOLD_MAX, REDACT_HOLD_QUIET,
};
use crate::output::{Flush, Redactor, Stream, Utf8Decoder};
use crate::process::{PtyMaster, procfs, unread};

/// Where a reader reads from.
pub enum Source {
    Pipe(Arc<pipe::Receiver>),
    Pty(Arc<PtyMaster>),
}

impl Source {
    /// Read; `idle` is cleared right before each read that may take bytes, and set back
    /// when it took none.
    async fn read(&self, buf: &mut [u8], idle: &AtomicBool) -> std::io::Result<usize> {
        match self {
            Source::Pipe(pipe) => loop {
                pipe.readable().await?;
                let was = idle.swap(false, Ordering::SeqCst);
                match pipe.try_read(buf) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        idle.store(was, Ordering::SeqCst);
                    }
                    read => return read,
                }
            },
            Source::Pty(master) => master.read(buf, idle).await,
        }
    }

    /// Bytes waiting to be read now.
    fn pending(&self) -> usize {
        match self {
            Source::Pipe(pipe) => unread(pipe.as_fd()),
            Source::Pty(master) => master.unread(),
        }
    }

    fn downgrade(&self) -> WeakSource {
        match self {
            Source::Pipe(pipe) => WeakSource::Pipe(Arc::downgrade(pipe)),
            Source::Pty(master) => WeakSource::Pty(Arc::downgrade(master)),
        }
    }
}

/// A reader's source as the session sees it: gone once the reader ended.
enum WeakSource {
    Pipe(Weak<pipe::Receiver>),
    Pty(Weak<PtyMaster>),
}

/// What a session keeps of the reader of one stream: where to send it requests, and what
/// tells that a drain would find nothing to do.
pub struct ReaderLink {
    controls: mpsc::UnboundedSender<Control>,
    source: WeakSource,
    /// Set by the reader while it has nothing in hand: no read being taken in, no text held
    /// back. Cleared before each read that may take bytes.
    idle: Arc<AtomicBool>,
}

impl ReaderLink {
    /// A link to a reader of `source`, and the reader's ends of it.
    pub fn new(
        source: &Source,
    ) -> (
        ReaderLink,
        mpsc::UnboundedReceiver<Control>,
        Arc<AtomicBool>,
    ) {
        let (controls, requests) = mpsc::unbounded_channel();
        let idle = Arc::new(AtomicBool::new(true));
        let link = ReaderLink {
            controls,
            source: source.downgrade(),
            idle: idle.clone(),
        };
        (link, requests, idle)
    }

    /// Whether the reader has taken in everything its source holds for it: the source has
    /// nothing unread, then (in that order) the reader has nothing in hand. Bytes in the
    /// source before the call are either still there, or were taken by a read that cleared
    /// `idle` first, which is set again only once they were delivered. (On a pipe that is
    /// every byte written before the call; a terminal's output may reach its queue a moment
    /// after the program's write, for this look and for the reader's own drain alike.)
    fn drained(&self) -> bool {
        let pending = match &self.source {
            WeakSource::Pipe(pipe) => pipe.upgrade().map(|p| unread(p.as_fd())),
            WeakSource::Pty(master) => master.upgrade().map(|m| m.unread()),
        };
        pending == Some(0) && self.idle.load(Ordering::SeqCst)
    }
}

/// A reader's buffer: small at first (most programs print little, and a terminal gives at
/// most 4 KiB a read), grown to `READ_CHUNK_BYTES` once a read fills it (a pipe holds up
/// to 64 KiB). Counted as freed heap when it goes (`heap::freed`).
struct ReadBuffer(Vec<u8>);

impl Drop for ReadBuffer {
    fn drop(&mut self) {
        heap::freed(self.0.capacity());
    }
}

/// A request to a reader, answered once done.
pub enum Control {
    /// Deliver what the source holds now and everything held back.
    Drain(oneshot::Sender<()>),
    /// Drain, an incomplete character included (as U+FFFD): the command that wrote it has
    /// ended, and what comes next is another's.
    DrainAll(oneshot::Sender<()>),
    /// Drain, then mark a command's start once this echo has gone by.
    Expect(String, oneshot::Sender<()>),
    /// Drain, then deliver this text as output and mark a command's start after it.
    Inject(String, oneshot::Sender<()>),
}

/// The echo of a command typed into a line-discipline shell: the start mark goes where its
/// last character is read.
#[derive(Default)]
struct Echo {
    want: Vec<char>,
    seen: usize,
    /// Text other than the echo came after a whole line of it: the shell printed something
    /// while the command was typed (a syntax error in that line, which ends the command
    /// before the rest is typed; or a background job's output).
    interrupted: bool,
    /// Once interrupted, the rest of the echo is looked for whole lines at a time (text the
    /// shell printed may hold its characters): `seen` where its current line begins,
    /// whether the output is at a line's start, and whether a run of it matches so far.
    line: usize,
    at_line_start: bool,
    matching: bool,
}

impl Echo {
    fn new(want: Vec<char>) -> Self {
        Echo {
            want,
            ..Echo::default()
        }
    }

    /// Split `text` where the echo ends (the start mark there), into `out`; true once the
    /// whole echo went by. Text that is not the echo after a whole line of it is marked as
    /// where the command's output begins for now (`InputEnd`): should the command end
    /// before the rest of its echo, that text is its output; else the start mark, where
    /// the echo ends, takes its place.
    fn split(&mut self, text: &str, out: &mut Vec<Owned>) -> bool {
        let mut from = 0;
        for (i, c) in text.char_indices() {
            let wanted = self.want.get(self.seen) == Some(&c);
            // A terminal may echo a tab as spaces (the echo looked for has no tabs).
            let blank = c == ' ' || c == '\t';
            if !self.interrupted {
                if wanted {
                    self.seen += 1;
                } else if !blank && self.seen > 0 && self.want[self.seen - 1] == '\n' {
                    self.interrupted = true;
                    self.line = self.seen;
                    out.push(Owned::Text(text[..i].to_owned()));
                    out.push(Owned::Mark(Mark::InputEnd));
                    from = i;
                }
            } else if wanted && (self.matching || self.at_line_start) {
                self.seen += 1;
                self.matching = c != '\n';
                if c == '\n' {
                    self.line = self.seen;
                }
            } else if self.matching && !blank {
                // Not the echo after all.
                self.seen = self.line;
                self.matching = false;
            }
            self.at_line_start = c == '\n' || (self.at_line_start && blank);
            if self.seen == self.want.len() {
                let end = i + c.len_utf8();
                out.push(Owned::Text(text[from..end].to_owned()));
                out.push(Owned::Mark(Mark::Start));
                if end < text.len() {
                    out.push(Owned::Text(text[end..].to_owned()));
                }
                return true;
            }
        }
        out.push(Owned::Text(text[from..].to_owned()));
        false
    }
}

/// A terminal shell's output while its integration is installed.
struct Installing {
    until: Instant,
    held: String,
}

/// A piece of scanned output, owned.
enum Owned {
    Text(String),
    Mark(Mark),
}

pub struct Reader {
    session: Arc<Session>,
    source: Source,
    stream: Stream,
    decoder: Utf8Decoder,
    scanner: Option<Scanner>,
    redactor: Option<Redactor>,
    installing: Option<Installing>,
    echo: Option<Echo>,
    /// Since when text is held back, and when the last piece came.
    held: Option<(Instant, Instant)>,
    controls: mpsc::UnboundedReceiver<Control>,
    /// Shared with the session's link: nothing in hand (see `ReaderLink::drained`).
    idle: Arc<AtomicBool>,
}

impl Reader {
    pub fn new(
        session: Arc<Session>,
        (source, stream): (Source, Stream),
        redactor: Option<Redactor>,
        (controls, idle): (mpsc::UnboundedReceiver<Control>, Arc<AtomicBool>),
    ) -> Self {
        Reader {
            session,
            source,
            stream,
            decoder: Utf8Decoder::default(),
            scanner: None,
            redactor,
            installing: None,
            echo: None,
            held: None,
            controls,
            idle,
        }
    }

    /// Look for the marks of the shell integration keyed by `nonce`.
    pub fn with_marks(mut self, nonce: &str) -> Self {
        self.scanner = Some(Scanner::new(nonce));
        self
    }

    /// Hold the output until the integration answers, at most until `until`.
    pub fn installing(mut self, until: Instant) -> Self {
        self.installing = Some(Installing {
            until,
            held: String::new(),
        });
        self
    }

    /// Read until EOF (or a read error, which ends the source like EOF) or until the
    /// record is discarded.
    pub async fn run(mut self) {
        let mut buffer = ReadBuffer(vec![0u8; READ_FIRST_BYTES]);
        let bytes = &mut buffer.0;
        loop {
            let release_at = self.release_at();
            let live = tokio::select! {
                biased;
                Some(control) = self.controls.recv() => self.control(control, bytes).await,
                read = self.source.read(bytes, &self.idle) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let live = self.take(&bytes[..n]).await;
                        if n == bytes.len() && n < READ_CHUNK_BYTES {
                            bytes.resize(READ_CHUNK_BYTES, 0);
                        }
                        // A flooding child keeps every read ready at once: after each one,
                        // the calls waiting for a worker (an exec's timeout, a status) run.
                        tokio::task::yield_now().await;
                        live
                    }
                },
                () = sleep_until(release_at) => self.release().await,
            };
            if !live {
                return;
            }
            let idle = self.held.is_none() && !self.decoder.holding();
            self.idle.store(idle, Ordering::SeqCst);
        }
        self.idle.store(false, Ordering::SeqCst);
        let mut decoded = String::new();
        self.decoder.finish(&mut decoded);
        if self.process(&decoded, Flush::All).await {
            self.give_up_install().await;
            self.session.captures().end(self.stream);
            self.session.update(|s| s.reader_ended());
        }
    }

    /// When held-back text (or the install's wait) must be released.
    fn release_at(&self) -> Option<Instant> {
        let held = self
            .held
            .map(|(first, last)| (last + REDACT_HOLD_QUIET).min(first + REDACT_HOLD_MAX));
        let install = self.installing.as_ref().map(|i| i.until);
        held.into_iter().chain(install).min()
    }

    /// Decode and deliver a read; false once the record is discarded.
    async fn take(&mut self, bytes: &[u8]) -> bool {
        let mut decoded = String::new();
        self.decoder.push(bytes, &mut decoded);
        let live = self.process(&decoded, Flush::No).await;
        let holding = self.scanner.as_ref().is_some_and(Scanner::holding)
            || self.redactor.as_ref().is_some_and(Redactor::holding);
        let now = Instant::now();
        // What the redactor held before was released (its line ended, or the bound cut
        // it): what it holds now began now, as a line that streams on for more than the
        // hold's whole time is held and released a bound's length at a time.
        let renewed = self.redactor.as_mut().is_some_and(Redactor::take_released);
        let first = match self.held {
            Some((first, _)) if !renewed => first,
            _ => now,
        };
        self.held = holding.then_some((first, now));
        live
    }

    /// Nothing decided the held-back text in time: it is output as it is. When the hold's
    /// whole time ran out while more of the line kept coming, the redactor keeps the end
    /// that may begin a value (by its size alone) for a new hold.
    async fn release(&mut self) -> bool {
        let now = Instant::now();
        let streaming = self
            .held
            .take()
            .filter(|(_, last)| now < *last + REDACT_HOLD_QUIET)
            .map(|(_, last)| last);
        let live = match streaming {
            Some(last) if self.redactor.is_some() => {
                let live = self.process("", Flush::AllButTail).await;
                if self.redactor.as_ref().is_some_and(Redactor::holding) {
                    self.held = Some((now, last));
                }
                live
            }
            _ => self.process("", Flush::All).await,
        };
        if self
            .installing
            .as_ref()
            .is_some_and(|i| Instant::now() >= i.until)
        {
            self.give_up_install().await;
        }
        live
    }

    /// Take out the marks, redact, deliver; with `Flush::All`, nothing stays held back.
    async fn process(&mut self, text: &str, flush: Flush) -> bool {
        let mut out = String::new();
        if self.scanner.is_none() {
            let text = self.redacted(text, flush, &mut out);
            return self.deliver(text).await;
        }
        for piece in self.pieces(text, flush != Flush::No) {
            match piece {
                Owned::Text(t) => {
                    if let Some(r) = self.redactor.as_mut() {
                        r.push(&t, &mut out);
                    } else {
                        out.push_str(&t);
                    }
                }
                Owned::Mark(mark) => {
                    // A mark decides what is held back before it: it is ours, not text.
                    if let Some(r) = self.redactor.as_mut() {
                        r.flush(&mut out);
                    }
                    if !self.deliver(&out).await {
                        return false;
                    }
                    out.clear();
                    self.apply(mark).await;
                }
            }
        }
        if let Some(r) = self.redactor.as_mut() {
            r.release(flush, &mut out);
        }
        self.deliver(&out).await
    }

    /// `text` as text and marks: the integration's, and the start of a command where its
    /// echo ends.
    fn pieces(&mut self, text: &str, flush: bool) -> Vec<Owned> {
        let mut pieces = Vec::new();
        if let Some(scanner) = self.scanner.as_mut() {
            let mut push = |piece: Piece| {
                pieces.push(match piece {
                    Piece::Text(t) => Owned::Text(t.to_owned()),
                    Piece::Mark(m) => Owned::Mark(m),
                })
            };
            scanner.scan(text, &mut push);
            if flush {
                scanner.flush(&mut push);
            }
        }
        let Some(echo) = self.echo.as_mut() else {
            return pieces;
        };
        let seen_before = echo.seen;
        let mut split = Vec::with_capacity(pieces.len() + 2);
        let mut done = false;
        for piece in pieces {
            match piece {
                Owned::Text(t) if !done => done = echo.split(&t, &mut split),
                // The command ended before its echo was seen whole (the terminal's echo
                // was turned off): nothing is expected any more.
                Owned::Mark(Mark::End(status)) => {
                    done = true;
                    split.push(Owned::Mark(Mark::End(status)));
                }
                other => split.push(other),
            }
        }
        if echo.seen != seen_before {
            // Before the text is delivered: the store that follows wakes whoever waits.
            self.session.echo_seen.store(echo.seen, Ordering::SeqCst);
        }
        if done {
            self.echo = None;
        }
        split
    }

    /// `text` redacted (into `out`), or `text` itself when there is nothing to redact.
    fn redacted<'a>(&mut self, text: &'a str, flush: Flush, out: &'a mut String) -> &'a str {
        match self.redactor.as_mut() {
            Some(r) => {
                r.push(text, out);
                r.release(flush, out);
                out
            }
            None => text,
        }
    }

    async fn deliver(&mut self, text: &str) -> bool {
        if text.is_empty() {
            return true;
        }
        if let Some(installing) = self.installing.as_mut() {
            installing.held.push_str(text);
            if installing.held.len() > INSTALL_HELD_MAX_BYTES {
                self.give_up_install().await;
            }
            return true;
        }
        self.session.deliver(self.stream, text).await
    }

    /// The integration did not answer: what the shell printed is shown after all, and
    /// commands are wrapped.
    async fn give_up_install(&mut self) {
        if let Some(installing) = self.installing.take() {
            tracing::warn!(session = %self.session.id, "the shell did not take its integration; terminal_exec wraps commands");
            self.session.update(|s| s.shell_give_up_install());
            self.session.deliver(self.stream, &installing.held).await;
        }
    }

    async fn apply(&mut self, mark: Mark) {
        if let Mark::Installed { typing, .. } = mark {
            // The shell's start and the installing line are not shown.
            self.installing = None;
            if typing == Typing::Readline
                && let Some(scanner) = self.scanner.as_mut()
            {
                scanner.watch_paste_ends();
            }
        }
        self.session.mark(self.stream, &mark);
    }

    async fn control(&mut self, control: Control, bytes: &mut [u8]) -> bool {
        let (inject, expect, all, done) = match control {
            Control::Drain(done) => (None, None, false, done),
            Control::DrainAll(done) => (None, None, true, done),
            Control::Expect(text, done) => (None, Some(text), false, done),
            Control::Inject(text, done) => (Some(text), None, false, done),
        };
        let mut left = self.source.pending();
        while left > 0 {
            let want = left.min(bytes.len());
            let n = match self.source.read(&mut bytes[..want], &self.idle).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            left = left.saturating_sub(n);
            if !self.take(&bytes[..n]).await {
                return false;
            }
        }
        self.held = None;
        let mut incomplete = String::new();
        if all {
            self.decoder.finish(&mut incomplete);
        }
        if !self.process(&incomplete, Flush::All).await {
            return false;
        }
        if let Some(echo) = inject {
            let mut out = String::new();
            let echo = self.redacted(&echo, Flush::All, &mut out).to_owned();
            if !self.deliver(&echo).await {
                return false;
            }
            self.apply(Mark::Start).await;
        }
        if let Some(echo) = expect {
            self.session.echo_seen.store(0, Ordering::SeqCst);
            // A terminal may echo a tab as spaces; the rest of the echo places the mark.
            self.echo = Some(Echo::new(echo.chars().filter(|c| *c != '\t').collect()));
        }
        let _ = done.send(());
        true
    }
}

/// A pipe shell's marks reader: it reads the marks pipe until the pipe closes, or, once
/// told the shell has ended, what is in it then.
pub struct MarksReader {
    task: JoinHandle<()>,
    ended: CancellationToken,
}

impl MarksReader {
    /// Read `pipe` for the marks of `session`'s shell, made with `nonce`.
    pub fn start(session: Arc<Session>, pipe: pipe::Receiver, nonce: &str) -> MarksReader {
        let ended = CancellationToken::new();
        let marks = Marks {
            scanner: Scanner::new(nonce),
            decoder: Utf8Decoder::default(),
        };
        let task = tokio::spawn(marks.read(session, pipe, ended.clone()));
        MarksReader { task, ended }
    }

    /// The shell has ended. The pipe closes with the last program of its session, within
    /// `within`; one that left the session may hold it open for good: then what is in the
    /// pipe (written before the end) is read, and the pipe is let go.
    pub async fn end(mut self, within: Duration) {
        if tokio::time::timeout(within, &mut self.task).await.is_err() {
            self.ended.cancel();
            let _ = self.task.await;
        }
    }
}

/// What reads a shell's marks.
struct Marks {
    scanner: Scanner,
    decoder: Utf8Decoder,
}

impl Marks {
    /// Read until the pipe closes, or until `ended`, and then only what is in it.
    async fn read(
        mut self,
        session: Arc<Session>,
        mut pipe: pipe::Receiver,
        ended: CancellationToken,
    ) {
        let mut bytes = [0u8; 1024];
        loop {
            let read = tokio::select! {
                read = pipe.read(&mut bytes) => read,
                () = ended.cancelled() => break,
            };
            match read {
                Ok(0) | Err(_) => return,
                Ok(n) => self.take(&session, &bytes[..n]).await,
            }
        }
        let mut left = unread(pipe.as_fd());
        while left > 0 {
            let want = left.min(bytes.len());
            match pipe.read(&mut bytes[..want]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    left = left.saturating_sub(n);
                    self.take(&session, &bytes[..n]).await;
                }
            }
        }
    }

    /// Apply the marks in `bytes`, each once the output before it is in.
    async fn take(&mut self, session: &Session, bytes: &[u8]) {
        let mut text = String::new();
        self.decoder.push(bytes, &mut text);
        let mut marks = Vec::new();
        self.scanner.scan(&text, |piece| {
            if let Piece::Mark(mark) = piece {
                marks.push(mark);
            }
        });
        for mark in marks {
            session.out_of_band(mark).await;
        }
    }
}

impl Session {
    /// Output text (decoded, marks out, redacted) enters the buffer, the capture of a
    /// running command and the sink; with `on_full: "pause"` what does not fit waits until
    /// a client reads on (meanwhile the reader reads nothing, so the child blocks in its
    /// `write`). False when the record was discarded first (the rest is dropped).
    pub(super) async fn deliver(&self, stream: Stream, mut rest: &str) -> bool {
        while !rest.is_empty() {
            let consumed = self.captures().armed(stream);
            // Stored and acknowledged read under one lock: an acknowledgement that comes
            // after this store changes `acknowledged` from `seen`, so none is missed. The
            // piece is queued for the emulator and the recording under it too, so they take
            // the streams in the buffer's order, and whoever sees it in the buffer sees it
            // queued: input typed in answer is recorded after it.
            let stored = self.update(|s| {
                if s.discarded() {
                    s.stop_holding(stream);
                    return None;
                }
                let stored = s.store(stream, rest, consumed);
                let room = match (&self.sink, stored.taken) {
                    (Some(sink), 1..) => {
                        Some(sink.queue_output(rest[..stored.taken].into(), s.output().end()))
                    }
                    _ => None,
                };
                Some((stored, s.acknowledged(), room))
            });
            let Some((stored, seen, room)) = stored else {
                return false;
            };
            let piece = &rest[..stored.taken];
            if !piece.is_empty() {
                self.captures().take(stream, piece, stored.start);
            }
            if let Some(room) = room {
                room.await;
            }
            rest = &rest[stored.taken..];
            // What a capture takes counts as read as it is stored, so the rest finds room
            // at once (a piece larger than the whole buffer goes in a part at a time).
            if !rest.is_empty() && !consumed {
                self.wait_for(|s| s.acknowledged() != seen || s.discarded())
                    .await;
            }
        }
        true
    }

    /// A mark of the shell integration, found on `stream` where its output ends now. The
    /// capture of the current command changes first, so whoever sees the command end finds
    /// its output complete. On a pipe shell's stderr, only the start mark counts: the
    /// command's stderr begins there.
    fn mark(&self, stream: Stream, mark: &Mark) {
        if stream == Stream::Stderr {
            if *mark == Mark::Start {
                self.captures().start(stream);
                self.update(|s| {
                    let at = s.output().end();
                    s.shell_stderr_start(at);
                });
            }
            return;
        }
        let change = self.inspect(|s| s.shell().and_then(|shell| shell.capture_change(mark)));
        match change {
            Some(CaptureChange::Start) => self.captures().start(stream),
            Some(CaptureChange::Restart) => {
                // Readline's echo is followed by nothing of the shell's but its own line
                // ends; a line-discipline shell's echo of the whole command, by what it
                // printed while the command was typed, which is not the command's.
                let readline = self.inspect(|s| {
                    s.shell().and_then(|shell| shell.typing()) == Some(Typing::Readline)
                });
                let restarted = self.captures().restart(stream, readline);
                if !restarted {
                    // What it printed before its start mark is its output: it begins there.
                    self.update(|s| s.shell_keep_start());
                }
            }
            Some(CaptureChange::End) => {
                let mut captures = self.captures();
                captures.end(Stream::Stdout);
                captures.end(Stream::Stderr);
            }
            None => {}
        }
        self.update(|s| {
            let at = s.output().end();
            s.shell_mark(mark, at);
        });
        // Printed by the integration line, which the shell runs itself: the mark names the
        // shell (`$$`), whose group is its own. A line typed at once may already run in the
        // foreground as the shell's job, a child still named as the shell until its exec.
        if let Mark::Installed {
            shell: Some(pid), ..
        } = mark
            && let Some(stat) = procfs::stat(*pid)
            && stat.session == self.pid
        {
            let _ = self.shell_group.set(stat.pgrp);
        }
        // Without it, the foreground's group is the shell's, or a job's whose parent is the
        // shell.
        if let Mark::Installed { .. } = mark
            && self.shell_group.get().is_none()
            && let Some(group) = self.terminal().and_then(|t| t.foreground())
        {
            let a_shell = |pid: i32| procfs::name(pid).is_some_and(|name| is_shell(&name));
            let shell = if a_shell(group) {
                group
            } else {
                procfs::stat(group)
                    .map(|s| s.ppid)
                    .filter(|parent| a_shell(*parent))
                    .unwrap_or(self.pid)
            };
            let _ = self.shell_group.set(shell);
        }
    }

    /// A mark that came on a pipe shell's marks pipe: everything the command wrote before
    /// it is in its stdout and stderr pipes by now, so those are read first, and the mark
    /// goes where they end.
    async fn out_of_band(&self, mark: Mark) {
        // What a command that ended wrote last is its output, a character it left
        // incomplete included (as at the end of a stream, one U+FFFD).
        let control = if matches!(mark, Mark::End(_)) {
            Control::DrainAll
        } else {
            Control::Drain
        };
        for stream in [Stream::Stdout, Stream::Stderr] {
            self.drain_reader_with(stream, control).await;
        }
        self.mark(Stream::Stdout, &mark);
    }

    /// Have the reader of `stream` deliver what its source holds now and everything it
    /// holds back; nothing to ask when it has (the usual case once output is quiet).
    pub(super) async fn drain_reader(&self, stream: Stream) {
        self.drain_reader_with(stream, Control::Drain).await;
    }

    /// `drain_reader`, asking the reader for `control` (`Control::Drain` or `DrainAll`).
    async fn drain_reader_with(&self, stream: Stream, control: fn(oneshot::Sender<()>) -> Control) {
        if !self.links[stream as usize]
            .as_ref()
            .is_some_and(ReaderLink::drained)
        {
            self.ask_reader(stream, control).await;
        }
    }

    /// Ask the reader of `stream` for `control` (made with the answer's sender), and wait
    /// until it did it; false when the reader is gone.
    pub(super) async fn ask_reader(
        &self,
        stream: Stream,
        control: impl FnOnce(oneshot::Sender<()>) -> Control,
    ) -> bool {
        let Some(link) = &self.links[stream as usize] else {
            return false;
        };
        let (done, answered) = oneshot::channel();
        link.controls.send(control(done)).is_ok() && answered.await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `split` makes of `pieces` of output for the echo `want`: the text, with `|`
    /// where the output's start is marked for now and `^` where the echo ends.
    fn split(want: &str, pieces: &[&str]) -> String {
        let mut echo = Echo::new(want.chars().collect());
        let mut shown = String::new();
        let mut done = false;
        for piece in pieces {
            if done {
                shown.push_str(piece);
                continue;
            }
            let mut out = Vec::new();
            done = echo.split(piece, &mut out);
            for owned in out {
                match owned {
                    Owned::Text(t) => shown.push_str(&t),
                    Owned::Mark(Mark::InputEnd) => shown.push('|'),
                    Owned::Mark(Mark::Start) => shown.push('^'),
                    Owned::Mark(_) => {}
                }
            }
        }
        shown
    }

    #[test]
    fn the_echo_ends_where_its_last_character_is_read() {
        let echo = "{\r\necho a\r\n}\r\n";
        assert_eq!(
            split(echo, &["{\r\n", "echo a\r\n}\r\na\r\n"]),
            "{\r\necho a\r\n}\r\n^a\r\n"
        );
    }

    #[test]
    fn text_after_a_whole_line_of_the_echo_marks_a_start_for_now() {
        let echo = "{\r\necho a\r\n)\r\n}\r\n";
        // A syntax error that holds the rest of the echo's characters ends no echo.
        let error = "dash: Syntax error: \")\" unexpected (expecting \"}\")\r\n";
        assert_eq!(
            split(echo, &["{\r\necho a\r\n)\r\n", error]),
            format!("{{\r\necho a\r\n)\r\n|{error}")
        );
        // A background job's line while the command is typed: the echo goes on after it.
        let echo = "{\r\necho\tb\r\n}\r\n";
        let want: String = echo.chars().filter(|c| *c != '\t').collect();
        assert_eq!(
            split(&want, &["{\r\n", "job }\r\n", "echo    b\r\n}\r\nb\r\n"]),
            "{\r\n|job }\r\necho    b\r\n}\r\n^b\r\n"
        );
        // Lines that begin with tabs, echoed as tabs or as spaces, are no interruption.
        let echo = "cat <<-E\r\n\tx\r\n\tE\r\n";
        let want: String = echo.chars().filter(|c| *c != '\t').collect();
        assert_eq!(split(&want, &[echo, "x\r\n"]), format!("{echo}^x\r\n"));
        let spaced = "cat <<-E\r\n        x\r\n        E\r\n";
        assert_eq!(split(&want, &[spaced, "x\r\n"]), format!("{spaced}^x\r\n"));
    }
}
