//! The consumers of a session's output that take time: the terminal emulator behind
//! `terminal_screen` and the live view, and the recording file. Each runs on a thread of the
//! session's own (a lane), fed through a queue in the buffer's order, so the state lock is
//! never held while they work and the async thread never waits on them. A reader queues each
//! piece as it stores it in the buffer, and once a lane is `SINK_QUEUE_BYTES` behind it then
//! waits until the lane has room for the piece again (and the child for its reader); input
//! and resizes wait for room before they are queued. So a queue holds at most that much
//! besides one piece for each reader.
//!
//! When the session ends, the recording is closed and waited for: its last output and its
//! closing marker are in the file before the session's output is settled. The emulator is
//! not waited for: what is left in its queue is drawn meanwhile, and `terminal_screen`
//! waits for it (`fed_to`), as it does for a running session's output.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{Semaphore, SemaphorePermit, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::lock_screen;
use super::recording::Recording;
use crate::limits::{RECORDING_FLUSH_EVERY, SINK_QUEUE_BYTES};
use crate::output::Screen;
use crate::process::PtyMaster;

#[derive(Clone)]
pub enum Feed {
    /// Output as stored; the buffer's end cursor after it.
    Output {
        text: Arc<str>,
        end: u64,
    },
    /// Typed input, as the recording shows it.
    Input(String),
    /// A secret was typed (its name stands in for the value).
    Secret(String),
    Resize {
        rows: u16,
        cols: u16,
    },
    /// The session ended: close the recording with this marker; nothing follows.
    Close(String),
}

/// What a queued feed holds besides its text: its slot in the queue and its text's
/// allocation. Charged to each feed, so a program that writes a byte at a time cannot
/// queue a million feeds in the room of a megabyte.
const FEED_OVERHEAD: usize = 64;

impl Feed {
    /// What the feed takes of a queue's room: its text and what holding it costs.
    fn size(&self) -> u32 {
        let bytes = match self {
            Feed::Output { text, .. } => text.len(),
            Feed::Input(text) | Feed::Secret(text) => text.len(),
            Feed::Resize { .. } => 0,
            // Queued without room (`Sink::close`): nothing is given back for it.
            Feed::Close(_) => return 0,
        };
        // A feed larger than the whole room takes all of it.
        u32::try_from((bytes + FEED_OVERHEAD).min(SINK_QUEUE_BYTES)).unwrap_or(u32::MAX)
    }
}

pub struct Sink {
    screen: Option<Lane>,
    recording: Option<Lane>,
    /// Held while a feed is queued on both lanes.
    queueing: Mutex<()>,
    /// The recording's thread, waited for when the session ends.
    recording_thread: Mutex<Option<JoinHandle<()>>>,
    /// The buffer cursor up to which output has been fed to the emulator.
    fed: watch::Receiver<u64>,
}

/// The queue of a consumer's thread.
struct Lane {
    tx: mpsc::UnboundedSender<Feed>,
    room: Arc<Room>,
}

/// A queue's room, in bytes: taken for each feed queued but the end marker, given back once
/// it is consumed.
struct Room {
    free: Semaphore,
    /// Room that senders who gave up waiting for it did not take: kept back from what is
    /// given back.
    owed: AtomicUsize,
}

/// What a lane's thread feeds.
enum Consumer {
    Screen {
        screen: Arc<Mutex<Screen>>,
        /// Where the emulator's answers to the program's queries go, while the program
        /// runs (the session's readers hold the terminal until they have drained it; an
        /// emulator still drawing what an ended program left has no one to answer).
        master: Option<Weak<PtyMaster>>,
        fed: watch::Sender<u64>,
    },
    Recording(Arc<Recording>),
}

impl Sink {
    /// A sink for a session with a screen or a recording; `None` when it has neither.
    pub fn start(
        screen: Option<Arc<Mutex<Screen>>>,
        recording: Option<Arc<Recording>>,
        master: Option<&Arc<PtyMaster>>,
    ) -> Option<Sink> {
        if screen.is_none() && recording.is_none() {
            return None;
        }
        let (fed_tx, fed) = watch::channel(0);
        // The emulator's thread is never waited for: it ends once it has drawn up to the
        // end marker, or at the first feed after the session is dropped.
        let screen = screen.map(|screen| {
            Lane::start(Consumer::Screen {
                screen,
                master: master.map(Arc::downgrade),
                fed: fed_tx,
            })
            .0
        });
        let (recording, recording_thread) = match recording {
            Some(r) => {
                let (lane, thread) = Lane::start(Consumer::Recording(r));
                (Some(lane), Some(thread))
            }
            None => (None, None),
        };
        Some(Sink {
            screen,
            recording,
            queueing: Mutex::new(()),
            recording_thread: Mutex::new(recording_thread),
            fed,
        })
    }

    /// Queue output for the emulator and the recording now, and hand back the wait for the
    /// room it takes in each. A reader calls this under the lock it stores the piece in the
    /// buffer under: whoever sees the piece sees it queued, and what they type in answer is
    /// queued after it. Dropped before it is done (a reader is only aborted, at the
    /// session's end), the wait leaves the room it had yet to take owed.
    pub fn queue_output(&self, text: Arc<str>, end: u64) -> impl Future<Output = ()> + Send + '_ {
        let feed = Feed::Output { text, end };
        let size = feed.size();
        let (recording, screen) = self.lanes(&feed);
        self.queue(feed, recording, screen);
        let (recording, screen) = (
            recording.map(|lane| lane.owe(size)),
            screen.map(|lane| lane.owe(size)),
        );
        async move {
            tokio::join!(Owed::pay(recording), Owed::pay(screen));
        }
    }

    /// Wait for room for `feed` (input, a secret's name, a resize) in each lane it
    /// concerns, then queue it. A caller that gives up queues nothing and takes no room.
    pub async fn send(&self, feed: Feed) {
        let size = feed.size();
        let (recording, screen) = self.lanes(&feed);
        let (recording_room, screen_room) =
            tokio::join!(Lane::room(recording, size), Lane::room(screen, size));
        self.queue(feed, recording, screen);
        // Taken until the lanes have consumed the feed: they give it back then.
        for taken in [recording_room, screen_room].into_iter().flatten() {
            taken.forget();
        }
    }

    /// The lanes `feed` concerns: the recording's, and the emulator's.
    fn lanes(&self, feed: &Feed) -> (Option<&Lane>, Option<&Lane>) {
        let to_screen = matches!(feed, Feed::Output { .. } | Feed::Resize { .. });
        let screen = self.screen.as_ref().filter(|_| to_screen);
        (self.recording.as_ref(), screen)
    }

    /// Queue `feed` on the lanes, both under one lock so that both keep one order.
    fn queue(&self, feed: Feed, recording: Option<&Lane>, screen: Option<&Lane>) {
        let _queueing = self.queueing.lock().unwrap_or_else(|e| e.into_inner());
        match (recording, screen) {
            (Some(recording), Some(screen)) => {
                recording.queue(feed.clone());
                screen.queue(feed);
            }
            (Some(lane), None) | (None, Some(lane)) => lane.queue(feed),
            (None, None) => {}
        }
    }

    /// Wait until output up to `cursor` has been fed to the emulator: at most `within`, or,
    /// with none, until it has (the emulator of an ended session has at most its queue
    /// left to draw, and once it ends this returns at once).
    pub async fn fed_to(&self, cursor: u64, within: Option<Duration>) {
        let mut fed = self.fed.clone();
        let caught_up = fed.wait_for(|at| *at >= cursor);
        match within {
            Some(within) => drop(tokio::time::timeout(within, caught_up).await),
            None => drop(caught_up.await),
        }
    }

    /// The session ended: close the recording with `marker` after everything queued, and
    /// wait for it; the emulator ends once it has drawn what is queued, unwaited.
    pub async fn close(&self, marker: String) {
        // The last feeds take no room: the end does not wait for the emulator's.
        {
            let _queueing = self.queueing.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(screen) = &self.screen {
                screen.queue(Feed::Close(String::new()));
            }
            if let Some(recording) = &self.recording {
                recording.queue(Feed::Close(marker));
            }
        }
        let thread = self
            .recording_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(thread) = thread {
            let _ = thread.await;
        }
    }
}

impl Lane {
    /// A lane and its thread, started on `consumer`.
    fn start(consumer: Consumer) -> (Lane, JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let room = Arc::new(Room {
            free: Semaphore::new(SINK_QUEUE_BYTES),
            owed: AtomicUsize::new(0),
        });
        let fed = Fed {
            consumer,
            room: room.clone(),
        };
        let handle = Handle::current();
        let thread = tokio::task::spawn_blocking(move || {
            let screen = matches!(fed.consumer, Consumer::Screen { .. });
            fed.run(rx, &handle);
            // The emulator goes with its session, freed by whichever of the two lets go of
            // it last: hand back what they free once they are done.
            if screen {
                crate::heap::return_soon();
            }
        });
        (Lane { tx, room }, thread)
    }

    fn queue(&self, feed: Feed) {
        let _ = self.tx.send(feed);
    }

    /// Room for a feed of `size` in `lane`'s queue, if there is one.
    async fn room(lane: Option<&Lane>, size: u32) -> Option<SemaphorePermit<'_>> {
        lane?.room.wait(size).await
    }

    /// The room a feed of `size` just queued has yet to take.
    fn owe(&self, size: u32) -> Owed<'_> {
        Owed {
            room: &self.room,
            size,
        }
    }
}

/// The room a queued feed has yet to take from its lane: owed when its sender gives up.
struct Owed<'a> {
    room: &'a Room,
    size: u32,
}

impl<'a> Owed<'a> {
    /// Wait until there is room, and take it for good (none to wait for, without a lane).
    async fn pay(owed: Option<Owed<'a>>) {
        let Some(owed) = owed else {
            return;
        };
        if let Some(taken) = owed.room.wait(owed.size).await {
            taken.forget();
        }
        std::mem::forget(owed);
    }
}

impl Drop for Owed<'_> {
    fn drop(&mut self) {
        // What is free now is taken at once; the rest is kept back from what is given back.
        let size = self.size as usize;
        let taken = self.room.free.forget_permits(size);
        if taken < size {
            self.room.owed.fetch_add(size - taken, Ordering::Relaxed);
        }
    }
}

impl Room {
    /// Wait for room for a feed of `size`. The thread gives the room back, and closes it
    /// when it ends: then nothing queued will be read, and there is nothing to wait for.
    async fn wait(&self, size: u32) -> Option<SemaphorePermit<'_>> {
        self.free.acquire_many(size).await.ok()
    }

    /// The room left: what is free, less what is owed.
    #[cfg(test)]
    fn left(&self) -> usize {
        let owed = self.owed.load(Ordering::Relaxed);
        self.free.available_permits().saturating_sub(owed)
    }

    /// A feed of `size` was consumed: its room is free again, less what is owed.
    fn give_back(&self, size: u32) {
        let size = size as usize;
        let mut kept = 0;
        if self.owed.load(Ordering::Relaxed) > 0 {
            let _ = self
                .owed
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |owed| {
                    kept = owed.min(size);
                    Some(owed - kept)
                });
        }
        self.free.add_permits(size - kept);
    }
}

/// A lane's thread: its consumer and the queue's room.
struct Fed {
    consumer: Consumer,
    room: Arc<Room>,
}

/// However the thread ends, no sender waits for room it would never give back.
impl Drop for Fed {
    fn drop(&mut self) {
        self.room.free.close();
    }
}

impl Fed {
    fn run(self, mut rx: mpsc::UnboundedReceiver<Feed>, handle: &Handle) {
        let mut dirty_since: Option<Instant> = None;
        loop {
            let next = match dirty_since {
                Some(since) => {
                    let due = since + RECORDING_FLUSH_EVERY;
                    match handle.block_on(tokio::time::timeout_at(due, rx.recv())) {
                        Ok(next) => next,
                        Err(_flush_due) => {
                            self.consumer.flush();
                            dirty_since = None;
                            continue;
                        }
                    }
                }
                None => rx.blocking_recv(),
            };
            let Some(feed) = next else {
                break;
            };
            // Once the session is gone (its sink, the queue's only sender, dropped), nobody
            // will look at its screen; its recording still gets all of its output.
            if rx.is_closed() && matches!(self.consumer, Consumer::Screen { .. }) {
                break;
            }
            let size = feed.size();
            let closed = self.consumer.take(feed);
            self.room.give_back(size);
            if closed {
                break;
            }
            if dirty_since.is_none() && self.consumer.dirty() {
                dirty_since = Some(Instant::now());
            }
        }
        self.consumer.flush();
    }
}

impl Consumer {
    /// Consume one feed; true when it was the last.
    fn take(&self, feed: Feed) -> bool {
        match (self, feed) {
            (_, Feed::Close(marker)) => {
                if let Consumer::Recording(r) = self {
                    r.close(&marker);
                }
                return true;
            }
            (
                Consumer::Screen {
                    screen,
                    master,
                    fed,
                },
                Feed::Output { text, end },
            ) => {
                let replies = lock_screen(screen).feed(text.as_bytes());
                if !replies.is_empty()
                    && let Some(master) = master.as_ref().and_then(Weak::upgrade)
                {
                    master.try_write(&replies);
                }
                fed.send_replace(end);
            }
            (Consumer::Screen { screen, .. }, Feed::Resize { rows, cols }) => {
                lock_screen(screen).resize(rows, cols)
            }
            (Consumer::Recording(r), Feed::Output { text, .. }) => r.output(&text),
            (Consumer::Recording(r), Feed::Input(text)) if !text.is_empty() => {
                r.input(text.as_bytes())
            }
            (Consumer::Recording(r), Feed::Secret(name)) => r.secret(&name),
            (Consumer::Recording(r), Feed::Resize { rows, cols }) => r.resize(rows, cols),
            _ => {}
        }
        false
    }

    fn dirty(&self) -> bool {
        matches!(self, Consumer::Recording(r) if r.dirty())
    }

    fn flush(&self) {
        if let Consumer::Recording(r) = self {
            r.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::Poll;
    use std::time::SystemTime;

    use super::super::recording::Header;
    use super::*;

    const LONG: Duration = Duration::from_secs(30);

    /// A sink with an emulator and a recording in `dir`, and the recording's path.
    fn sink(dir: &std::path::Path) -> (Sink, Arc<Mutex<Screen>>, std::path::PathBuf) {
        let argv = vec!["/bin/prog".to_owned()];
        let header = Header {
            command_id: "demo",
            session_id: "0123456789abcdef0123456789abcdef",
            argv: &argv,
            created_at: SystemTime::now(),
            cols: 80,
            rows: 24,
            term: "xterm-256color",
        };
        let recording = Recording::create(dir, &header).unwrap();
        let path = dir.join(recording.name());
        let screen = Arc::new(Mutex::new(Screen::new(24, 80, 1 << 20)));
        let sink = Sink::start(Some(screen.clone()), Some(recording), None).unwrap();
        (sink, screen, path)
    }

    /// The recording's events, as (kind, text).
    fn events(path: &std::path::Path) -> Vec<(String, String)> {
        let cast = std::fs::read_to_string(path).unwrap();
        cast.lines()
            .skip(1)
            .map(|l| {
                let e: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    e[1].as_str().unwrap().to_owned(),
                    e[2].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    // The emulator's lock is held across the sends on purpose: it is the stuck emulator.
    #[allow(clippy::await_holding_lock)]
    async fn the_end_waits_for_the_recording_and_not_for_the_emulator() {
        let dir = tempfile::tempdir().unwrap();
        let (sink, screen, path) = sink(dir.path());
        // The emulator is stuck behind its lock.
        let held = screen.lock().unwrap();
        let end = *hundred_lines(&sink).await.end();
        let closed = tokio::time::timeout(LONG, sink.close("exit 0".into())).await;
        assert!(closed.is_ok(), "the end waited for the emulator");
        let events = events(&path);
        assert_eq!(
            events.last().unwrap(),
            &("m".to_owned(), "exit 0".to_owned())
        );
        assert_eq!(events.iter().filter(|(kind, _)| kind == "o").count(), 100);
        // Once the emulator can draw, it catches up with all of it.
        drop(held);
        let fed = tokio::time::timeout(LONG, sink.fed_to(end, None)).await;
        assert!(fed.is_ok(), "the emulator never caught up");
        let view = screen.lock().unwrap().view(0);
        assert_eq!(view.lines[22], "line 99");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    // The emulator's lock is held across the sends on purpose: it is the stuck emulator.
    #[allow(clippy::await_holding_lock)]
    async fn a_dropped_sessions_emulator_stops_drawing() {
        let dir = tempfile::tempdir().unwrap();
        let (sink, screen, _path) = sink(dir.path());
        let stuck = screen.lock().unwrap();
        let first = *hundred_lines(&sink).await.start();
        let mut fed = sink.fed.clone();
        drop(sink);
        drop(stuck);
        // The emulator's thread ends, and with it what it tells of its progress.
        let ended = tokio::time::timeout(LONG, fed.wait_for(|_| false)).await;
        assert!(ended.unwrap().is_err(), "the emulator is still drawing");
        assert!(
            *fed.borrow() <= first,
            "the emulator drew past its first piece"
        );
    }

    /// `line 0` to `line 99` queued as output, one piece each: the cursors after the first
    /// and after the last.
    async fn hundred_lines(sink: &Sink) -> std::ops::RangeInclusive<u64> {
        let mut first = None;
        let mut end = 0;
        for i in 0..100 {
            let text = format!("line {i}\r\n");
            end += text.len() as u64;
            first.get_or_insert(end);
            sink.queue_output(text.into(), end).await;
        }
        first.unwrap_or(end)..=end
    }

    /// Whether `future`, polled once, waits.
    async fn waits(mut future: Pin<&mut impl Future>) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx).is_pending())).await
    }

    /// All but `left` bytes of `lane`'s room, held.
    async fn all_but(lane: &Option<Lane>, left: usize) -> SemaphorePermit<'_> {
        let room = &lane.as_ref().unwrap().room.free;
        room.acquire_many((SINK_QUEUE_BYTES - left) as u32)
            .await
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn input_is_recorded_after_output_that_waits_for_room() {
        let dir = tempfile::tempdir().unwrap();
        let (sink, _screen, path) = sink(dir.path());
        // The recording's room is all taken: whatever is sent now waits for it.
        let full = all_but(&sink.recording, 0).await;
        let mut prompt = std::pin::pin!(sink.queue_output("the prompt> ".into(), 1));
        // Its reader runs once (the recording may have taken the piece already and given
        // its room back).
        let prompt_waits = waits(prompt.as_mut()).await;
        // The answer is typed meanwhile, and its wait is awaited first.
        let mut answer = std::pin::pin!(sink.send(Feed::Input("yes\r".into())));
        assert!(waits(answer.as_mut()).await, "the answer did not wait");
        drop(full);
        tokio::time::timeout(LONG, answer).await.unwrap();
        if prompt_waits {
            tokio::time::timeout(LONG, prompt).await.unwrap();
        }
        tokio::time::timeout(LONG, sink.close("exit 0".into()))
            .await
            .unwrap();
        let events = events(&path);
        let at = |kind: &str, text: &str| events.iter().position(|e| e.0 == kind && e.1 == text);
        assert!(at("o", "the prompt> ").unwrap() < at("i", "yes\r").unwrap());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    // The emulator's lock is held across the sends on purpose: it is the stuck emulator.
    #[allow(clippy::await_holding_lock)]
    async fn sends_given_up_leave_the_room_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let (sink, screen, path) = sink(dir.path());
        // Both lanes have 10 bytes of room left, and the emulator takes nothing: the next
        // feed takes those and waits (the recording may give a piece's room back).
        let stuck = screen.lock().unwrap();
        let held = [
            all_but(&sink.recording, 10).await,
            all_but(&sink.screen, 10).await,
        ];
        {
            // A reader aborted: its piece is queued, its room owed.
            let mut output = std::pin::pin!(sink.queue_output("given up".into(), 1));
            assert!(waits(output.as_mut()).await, "the output did not wait");
            // A resize given up: nothing is queued.
            let mut resize = std::pin::pin!(sink.send(Feed::Resize {
                rows: 30,
                cols: 100
            }));
            assert!(waits(resize.as_mut()).await, "the resize did not wait");
        }
        drop(held);
        drop(stuck);
        let last = Feed::Output {
            text: "last".into(),
            end: 2,
        };
        let size = last.size() as usize;
        sink.queue_output("last".into(), 2).await;
        tokio::time::timeout(LONG, sink.fed_to(2, None))
            .await
            .unwrap();
        // Every piece before the last has given its room back; the last may have.
        let free = |lane: &Option<Lane>| lane.as_ref().unwrap().room.left();
        let left = free(&sink.screen);
        assert!(
            left == SINK_QUEUE_BYTES - size || left == SINK_QUEUE_BYTES,
            "{left} bytes of the emulator's room"
        );
        assert_eq!(screen.lock().unwrap().view(0).lines[0], "given uplast");
        // Once the recording has ended, it has given back all of it.
        tokio::time::timeout(LONG, sink.close("exit 0".into()))
            .await
            .unwrap();
        assert_eq!(
            free(&sink.recording),
            SINK_QUEUE_BYTES,
            "the recording's room"
        );
        let kinds: Vec<_> = events(&path).into_iter().map(|(kind, _)| kind).collect();
        assert_eq!(kinds, ["o", "o", "m"]);
    }
}
