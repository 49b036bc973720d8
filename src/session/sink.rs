//! The consumers of a session's output that take time: the terminal emulator behind
//! `terminal_screen` and the live view, and the recording file. They run on a thread of the
//! session's own, fed through a bounded queue in the buffer's order, so the state lock is
//! never held while they work and no async worker waits on them; a reader that outpaces
//! them waits for room (and the child for its reader), so memory stays bounded.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::recording::Recording;
use crate::limits::{RECORDING_FLUSH_EVERY, SINK_QUEUE};
use crate::output::Screen;
use crate::process::PtyMaster;

pub enum Feed {
    /// Output as stored; the buffer's end cursor after it.
    Output {
        text: String,
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

pub struct Sink {
    tx: mpsc::Sender<Feed>,
    /// The buffer cursor up to which output has been fed.
    fed: watch::Receiver<u64>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// What the thread feeds.
struct Consumers {
    screen: Option<Arc<Mutex<Screen>>>,
    recording: Option<Arc<Recording>>,
    /// Where the emulator's answers to the program's queries go.
    master: Option<Arc<PtyMaster>>,
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
        let (tx, rx) = mpsc::channel(SINK_QUEUE);
        let (fed_tx, fed) = watch::channel(0);
        let consumers = Consumers {
            screen,
            recording,
            master,
        };
        let handle = Handle::current();
        let thread = tokio::task::spawn_blocking(move || consumers.run(rx, &fed_tx, &handle));
        Some(Sink {
            tx,
            fed,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queue `feed`, waiting for room.
    pub async fn send(&self, feed: Feed) {
        // The thread ends only when the queue closes.
        let _ = self.tx.send(feed).await;
    }

    /// Wait (at most `within`) until output up to `cursor` has been fed.
    pub async fn fed_to(&self, cursor: u64, within: Duration) {
        let mut fed = self.fed.clone();
        let _ = tokio::time::timeout(within, fed.wait_for(|at| *at >= cursor)).await;
    }

    /// Close the recording with `marker` after everything queued, and wait for the thread
    /// to end.
    pub async fn close(&self, marker: String) {
        self.send(Feed::Close(marker)).await;
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = thread {
            let _ = thread.await;
        }
    }
}

impl Consumers {
    fn run(self, mut rx: mpsc::Receiver<Feed>, fed: &watch::Sender<u64>, handle: &Handle) {
        let mut dirty_since: Option<Instant> = None;
        loop {
            let next = match dirty_since {
                Some(since) => {
                    let due = since + RECORDING_FLUSH_EVERY;
                    match handle.block_on(tokio::time::timeout_at(due, rx.recv())) {
                        Ok(next) => next,
                        Err(_flush_due) => {
                            self.flush();
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
            if self.take(feed, fed) {
                break;
            }
            if dirty_since.is_none() && self.recording.as_ref().is_some_and(|r| r.dirty()) {
                dirty_since = Some(Instant::now());
            }
        }
        self.flush();
    }

    /// Consume one feed; true when it closed the recording (the end).
    fn take(&self, feed: Feed, fed: &watch::Sender<u64>) -> bool {
        match feed {
            Feed::Output { text, end } => {
                if let Some(screen) = &self.screen {
                    let replies = screen
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .feed(text.as_bytes());
                    if let (Some(master), false) = (&self.master, replies.is_empty()) {
                        master.try_write(&replies);
                    }
                }
                if let Some(r) = &self.recording {
                    r.output(&text);
                }
                fed.send_replace(end);
            }
            Feed::Input(text) => {
                if let (Some(r), false) = (&self.recording, text.is_empty()) {
                    r.input(text.as_bytes());
                }
            }
            Feed::Secret(name) => {
                if let Some(r) = &self.recording {
                    r.secret(&name);
                }
            }
            Feed::Close(marker) => {
                if let Some(r) = &self.recording {
                    r.close(&marker);
                }
                return true;
            }
            Feed::Resize { rows, cols } => {
                if let Some(screen) = &self.screen {
                    screen
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .resize(rows, cols);
                }
                if let Some(r) = &self.recording {
                    r.resize(rows, cols);
                }
            }
        }
        false
    }

    fn flush(&self) {
        if let Some(r) = &self.recording {
            r.flush();
        }
    }
}
