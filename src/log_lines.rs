//! Log lines reach stderr from a thread of their own, never from the thread that serves.
//! An MCP client that does not read the server's stderr lets its pipe fill (64 KiB: a few
//! hundred sessions' start and end lines), and a write to a full pipe waits for the reader:
//! on the runtime's one thread, that would stop every call. So each line is queued, at most
//! `LOG_LINES_QUEUED` of them; past that a line is dropped, and the next line queued says
//! how many were. Nothing here writes to stdout, which carries the protocol.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

use tracing_subscriber::fmt::MakeWriter;

use crate::limits::LOG_LINES_QUEUED;

/// What the formatter writes lines to: each event's text becomes one queued line.
#[derive(Clone)]
pub struct LogLines {
    queue: SyncSender<Vec<u8>>,
    counts: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    queued: AtomicU64,
    written: AtomicU64,
    dropped: AtomicU64,
}

/// Start the thread that writes queued lines to `out` (stderr); `spawn` starts it (with
/// the signal mask the caller wants it to have).
pub fn start<W: Write + Send + 'static>(
    out: W,
    spawn: impl FnOnce(Box<dyn FnOnce() + Send>),
) -> LogLines {
    let (queue, queued) = std::sync::mpsc::sync_channel::<Vec<u8>>(LOG_LINES_QUEUED);
    let counts = Arc::new(Counts::default());
    let written = counts.clone();
    spawn(Box::new(move || {
        let mut out = out;
        for line in queued {
            let _ = out.write_all(&line);
            written.written.fetch_add(1, Ordering::Release);
        }
    }));
    LogLines { queue, counts }
}

impl LogLines {
    /// Wait until every line queued so far is written, for at most `patience` (a stderr
    /// nobody reads may never take them): at exit, the shutdown's lines are kept where
    /// they can be. Whether they all were.
    pub fn finish(&self, patience: Duration) -> bool {
        let queued = self.counts.queued.load(Ordering::Acquire);
        let deadline = Instant::now() + patience;
        loop {
            if self.counts.written.load(Ordering::Acquire) >= queued {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// One event's text, queued as a line when the formatter lets it go.
pub struct Line {
    text: Vec<u8>,
    lines: LogLines,
}

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.text.is_empty() {
            return;
        }
        let counts = &self.lines.counts;
        let dropped = counts.dropped.swap(0, Ordering::Relaxed);
        let mut text = std::mem::take(&mut self.text);
        if dropped > 0 {
            let note = format!(
                "mcp-terminal: {dropped} log lines were dropped: the server's stderr was not \
                 read\n"
            );
            text.splice(0..0, note.into_bytes());
        }
        match self.lines.queue.try_send(text) {
            Ok(()) => {
                counts.queued.fetch_add(1, Ordering::Release);
            }
            Err(_) => {
                counts.dropped.fetch_add(dropped + 1, Ordering::Relaxed);
            }
        }
    }
}

impl<'a> MakeWriter<'a> for LogLines {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line {
            text: Vec::with_capacity(160),
            lines: self.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that holds every write until `open` is set: a stderr nobody reads.
    struct Held {
        open: Arc<std::sync::atomic::AtomicBool>,
        out: Arc<std::sync::Mutex<Vec<u8>>>,
    }

    impl Write for Held {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            while !self.open.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
            self.out.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stderr_nobody_reads_holds_up_no_line_and_the_dropped_are_counted() {
        let open = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let out = Arc::new(std::sync::Mutex::new(Vec::new()));
        let held = Held {
            open: open.clone(),
            out: out.clone(),
        };
        let lines = start(held, |run| {
            std::thread::spawn(run);
        });
        let began = Instant::now();
        for n in 0..LOG_LINES_QUEUED * 4 {
            let mut line = lines.make_writer();
            writeln!(line, "line {n}").unwrap();
        }
        // Never waited for the writer (generous bound for a loaded machine).
        assert!(began.elapsed() < Duration::from_secs(5));
        assert!(!lines.finish(Duration::from_millis(20)));
        open.store(true, Ordering::Release);
        assert!(lines.finish(Duration::from_secs(10)));
        let mut last = lines.make_writer();
        writeln!(last, "the last line").unwrap();
        drop(last);
        assert!(lines.finish(Duration::from_secs(10)));
        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        assert!(text.starts_with("line 0\n"), "{text}");
        assert!(
            text.contains(
                "log lines were dropped: the server's stderr was not read\nthe last line\n"
            )
        );
    }
}
