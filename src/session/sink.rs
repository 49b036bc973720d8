//! The consumers of a session's output that take time: the terminal emulator behind
//! `terminal_screen` and the live view, and the recording file. Each runs on a thread of the
//! session's own (a lane), fed through a queue in the buffer's order, so the state lock is
//! never held while they work and no async worker waits on them. A reader that outpaces a
//! lane by `SINK_QUEUE_BYTES` waits for room (and the child for its reader), so memory stays
//! bounded.
//!
//! When the session ends, the recording is closed and waited for: its last output and its
//! closing marker are in the file before the session's output is settled. The emulator is
//! not waited for: what is left in its queue is drawn meanwhile, and `terminal_screen`
//! waits for it (`fed_to`), as it does for a running session's output.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

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

impl Feed {
    /// What the feed takes of a queue's room: its text, and at least one byte.
    fn size(&self) -> u32 {
        let bytes = match self {
            Feed::Output { text, .. } => text.len(),
            Feed::Input(text) | Feed::Secret(text) | Feed::Close(text) => text.len(),
            Feed::Resize { .. } => 0,
        };
        // A feed larger than the whole room takes all of it.
        u32::try_from(bytes.clamp(1, SINK_QUEUE_BYTES)).unwrap_or(u32::MAX)
    }
}

pub struct Sink {
    screen: Option<Lane>,
    recording: Option<Lane>,
    /// The buffer cursor up to which output has been fed to the emulator.
    fed: watch::Receiver<u64>,
}

/// A consumer's thread and its queue.
struct Lane {
    tx: mpsc::UnboundedSender<Feed>,
    /// The queue's room, in bytes: taken by each feed sent, given back once it is consumed.
    room: Arc<Semaphore>,
    /// Set when the session is dropped.
    dropped: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// What a lane's thread feeds.
enum Consumer {
    Screen {
        screen: Arc<Mutex<Screen>>,
        /// Where the emulator's answers to the program's queries go.
        master: Option<Arc<PtyMaster>>,
        fed: watch::Sender<u64>,
    },
    Recording(Arc<Recording>),
}

impl Sink {
    /// A sink for a session with a screen or a recording; `None` when it has neither.
    pub fn start(
        screen: Option<Arc<Mutex<Screen>>>,
        recording: Option<Arc<Recording>>,
        master: Option<Arc<PtyMaster>>,
    ) -> Option<Sink> {
        if screen.is_none() && recording.is_none() {
            return None;
        }
        let (fed_tx, fed) = watch::channel(0);
        let screen = screen.map(|screen| {
            Lane::start(Consumer::Screen {
                screen,
                master,
                fed: fed_tx,
            })
        });
        let recording = recording.map(|r| Lane::start(Consumer::Recording(r)));
        Some(Sink {
            screen,
            recording,
            fed,
        })
    }

    /// Queue `feed` for the consumers it concerns, waiting for room.
    pub async fn send(&self, feed: Feed) {
        let to_screen = matches!(feed, Feed::Output { .. } | Feed::Resize { .. });
        match (&self.screen, &self.recording) {
            (Some(screen), Some(recording)) => {
                if to_screen {
                    screen.send(feed.clone()).await;
                }
                recording.send(feed).await;
            }
            (Some(screen), None) if to_screen => screen.send(feed).await,
            (None, Some(recording)) => recording.send(feed).await,
            _ => {}
        }
    }

    /// Wait (at most `within`) until output up to `cursor` has been fed to the emulator.
    pub async fn fed_to(&self, cursor: u64, within: Duration) {
        let mut fed = self.fed.clone();
        let _ = tokio::time::timeout(within, fed.wait_for(|at| *at >= cursor)).await;
    }

    /// The session ended: close the recording with `marker` after everything queued, and
    /// wait for it; the emulator ends once it has drawn what is queued, unwaited.
    pub async fn close(&self, marker: String) {
        if let Some(screen) = &self.screen {
            screen.send(Feed::Close(String::new())).await;
        }
        if let Some(recording) = &self.recording {
            recording.send(Feed::Close(marker)).await;
            let thread = recording
                .thread
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(thread) = thread {
                let _ = thread.await;
            }
        }
    }
}

impl Lane {
    fn start(consumer: Consumer) -> Lane {
        let (tx, rx) = mpsc::unbounded_channel();
        let room = Arc::new(Semaphore::new(SINK_QUEUE_BYTES));
        let dropped = Arc::new(AtomicBool::new(false));
        let fed = Fed {
            consumer,
            room: room.clone(),
            dropped: dropped.clone(),
        };
        let handle = Handle::current();
        let thread = tokio::task::spawn_blocking(move || fed.run(rx, &handle));
        Lane {
            tx,
            room,
            dropped,
            thread: Mutex::new(Some(thread)),
        }
    }

    async fn send(&self, feed: Feed) {
        // The thread gives the room back, and closes it when it ends: nothing queued after
        // that would be read.
        if let Ok(taken) = self.room.acquire_many(feed.size()).await {
            taken.forget();
            let _ = self.tx.send(feed);
        }
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::Relaxed);
    }
}

/// A lane's thread: its consumer and the queue's room.
struct Fed {
    consumer: Consumer,
    room: Arc<Semaphore>,
    dropped: Arc<AtomicBool>,
}

/// However the thread ends, no reader waits for room it would never give back.
impl Drop for Fed {
    fn drop(&mut self) {
        self.room.close();
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
            // Once the session is gone, nobody will look at its screen; its recording
            // still gets all of its output.
            let screen = matches!(self.consumer, Consumer::Screen { .. });
            if screen && self.dropped.load(Ordering::Relaxed) {
                break;
            }
            let size = feed.size();
            let closed = self.consumer.take(feed);
            self.room.add_permits(size as usize);
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
                let replies = screen
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .feed(text.as_bytes());
                if let (Some(master), false) = (master, replies.is_empty()) {
                    master.try_write(&replies);
                }
                fed.send_replace(end);
            }
            (Consumer::Screen { screen, .. }, Feed::Resize { rows, cols }) => screen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .resize(rows, cols),
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
