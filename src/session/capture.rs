//! Capturing the output of a command as it is read: for each stream, its lines shaped as
//! the caller asked and kept as a head and a tail within a byte budget, whatever the buffer
//! evicts meanwhile. `terminal_exec` captures one command (from its start mark to its end
//! mark), `terminal_run` a whole session. While a capture is armed the session's output
//! counts as read (`on_full: "pause"` never holds a captured command).

use crate::output::{HeadTail, Kept, Shape, Shaper, Stream, piece_bytes};

/// The screen of output that is not rendered: one row, no width.
pub const NO_SCREEN: (usize, usize) = (1, usize::MAX);

pub struct Capture {
    shape: Shape,
    max_bytes: usize,
    /// The terminal's size, rows and columns, for rendered output.
    screen: (usize, usize),
    shaper: Shaper,
    kept: HeadTail,
    /// Taking output now (between the command's start and end).
    active: bool,
    /// Shaped text ended: nothing more is taken.
    ended: bool,
}

impl Capture {
    fn new(shape: Shape, max_bytes: usize, screen: (usize, usize), active: bool) -> Self {
        Capture {
            shape,
            max_bytes,
            screen,
            // A long line comes in pieces, each with its cursor: the head and the tail
            // leave out whole pieces of it.
            shaper: Shaper::new(shape, piece_bytes(max_bytes)).on_screen(screen.0, screen.1),
            kept: HeadTail::new(max_bytes),
            active,
            ended: false,
        }
    }

    fn take(&mut self, text: &str, cursor: u64) {
        if self.active {
            let kept = &mut self.kept;
            self.shaper
                .feed(text, cursor, |at, line| kept.push(at, line));
        }
    }

    fn end(&mut self) {
        if !self.ended {
            self.active = false;
            self.ended = true;
            for (at, line) in self.shaper.finish() {
                self.kept.push(at, &line);
            }
        }
    }

    /// What it holds now: ended, or so far; the buffer holds output from `held_from` on.
    fn kept(&mut self, held_from: u64) -> Kept {
        if self.ended {
            return self.kept.kept(held_from);
        }
        // The lines being built are shown without being taken out of the shaper.
        let mut so_far = self.kept.clone();
        for (at, line) in self.shaper.peek() {
            so_far.push(at, &line);
        }
        so_far.kept(held_from)
    }
}

/// The captures of one session, one per stream.
#[derive(Default)]
pub struct Captures {
    streams: [Option<Capture>; 2],
}

impl Captures {
    /// Capture `stream` from now (`active`) or from the command's start mark; rendered
    /// output as on a terminal of `screen` rows and columns.
    pub fn arm(
        &mut self,
        stream: Stream,
        (shape, screen): (Shape, (usize, usize)),
        max_bytes: usize,
        active: bool,
    ) {
        self.streams[stream as usize] = Some(Capture::new(shape, max_bytes, screen, active));
    }

    /// Whether output of `stream` is captured (and so counts as read).
    pub fn armed(&self, stream: Stream) -> bool {
        self.streams[stream as usize]
            .as_ref()
            .is_some_and(|c| !c.ended)
    }

    pub fn take(&mut self, stream: Stream, text: &str, cursor: u64) {
        if let Some(c) = self.streams[stream as usize].as_mut() {
            c.take(text, cursor);
        }
    }

    pub fn start(&mut self, stream: Stream) {
        if let Some(c) = self.streams[stream as usize].as_mut().filter(|c| !c.ended) {
            c.active = true;
        }
    }

    /// Drop what was taken and take from here on; with `unless_shown`, not when what was
    /// taken shows as text (more than line ends): the shell's own words before the
    /// command's start, such as a syntax error in an earlier line of it. Whether it
    /// restarted.
    pub fn restart(&mut self, stream: Stream, unless_shown: bool) -> bool {
        let slot = &mut self.streams[stream as usize];
        let Some(c) = slot.as_mut().filter(|c| !c.ended) else {
            return false;
        };
        if unless_shown && !c.kept(0).text.trim().is_empty() {
            return false;
        }
        *slot = Some(Capture::new(c.shape, c.max_bytes, c.screen, true));
        true
    }

    pub fn end(&mut self, stream: Stream) {
        if let Some(c) = self.streams[stream as usize].as_mut() {
            c.end();
        }
    }

    /// What `stream`'s capture holds (empty when it has none); the session's buffer holds
    /// output from cursor `held_from` on.
    pub fn kept(&mut self, stream: Stream, held_from: u64) -> Kept {
        match self.streams[stream as usize].as_mut() {
            Some(c) => c.kept(held_from),
            None => Kept {
                text: String::new(),
                omitted: None,
            },
        }
    }
}
