//! The rendered screen of a PTY session: a vt100 emulator fed every byte the terminal
//! produced (so it is right even after the output buffer evicted those bytes), plus the
//! answers to the program's terminal queries (cursor position, device attributes, status).

use std::num::NonZeroU16;

use serde::Serialize;

use super::drawing::Scan;
use crate::limits::{SCROLLBACK_CELLS, SCROLLBACK_MAX_LINES, TITLE_MAX_BYTES};

/// Answer to "what terminal are you" (`ESC [ c`): a VT102-class terminal.
const DEVICE_ATTRIBUTES: &[u8] = b"\x1b[?6c";

#[derive(Default)]
struct Events {
    title: String,
    /// Bytes to write back to the program (answers to its queries), in order.
    replies: Vec<u8>,
    /// What escapes vt100 leaves out do, as the controls they amount to: index (`ESC D`)
    /// is a line feed, next line (`ESC E`) a carriage return and a line feed.
    owed: Vec<u8>,
}

impl vt100::Callbacks for Events {
    fn set_window_title(&mut self, _: &mut vt100::Screen, title: &[u8]) {
        let mut title = String::from_utf8_lossy(title).into_owned();
        let mut end = title.len().min(TITLE_MAX_BYTES);
        while !title.is_char_boundary(end) {
            end -= 1;
        }
        title.truncate(end);
        self.title = title;
    }

    fn unhandled_escape(&mut self, _: &mut vt100::Screen, i1: Option<u8>, _: Option<u8>, b: u8) {
        match (i1, b) {
            (None, b'D') => self.owed.push(b'\n'),
            (None, b'E') => self.owed.extend_from_slice(b"\r\n"),
            _ => {}
        }
    }

    fn unhandled_csi(
        &mut self,
        screen: &mut vt100::Screen,
        i1: Option<u8>,
        _i2: Option<u8>,
        params: &[&[u16]],
        c: char,
    ) {
        let first = params.first().and_then(|p| p.first()).copied().unwrap_or(0);
        match (i1, c, first) {
            // Cursor position report, 1-based.
            (None, 'n', 6) => {
                let (row, col) = cursor_on_screen(screen);
                self.replies
                    .extend_from_slice(format!("\x1b[{};{}R", row + 1, col + 1).as_bytes());
            }
            // Device status: OK.
            (None, 'n', 5) => self.replies.extend_from_slice(b"\x1b[0n"),
            (None, 'c', 0) => self.replies.extend_from_slice(DEVICE_ATTRIBUTES),
            _ => {}
        }
    }
}

/// Give `bytes` to the emulator, with index and next line applied where they end: the bytes
/// are given up to each `D` or `E` that may end an `ESC D` or `ESC E` (right after the ESC,
/// or after controls, which act within an escape, and DEL, which it ignores; or such a
/// letter that may end an escape the last bytes began), then the controls the escapes
/// amount to, if they were ones.
fn emulate(parser: &mut vt100::Parser<Events>, bytes: &[u8]) {
    // Bytes an escape goes on after: C0 controls but CAN, SUB and ESC, and DEL.
    let within = |b: &u8| matches!(b, 0x00..=0x17 | 0x19 | 0x1c..=0x1f | 0x7f);
    let letter_after = |from: usize| {
        let at = from + bytes[from..].iter().take_while(|b| within(b)).count();
        matches!(bytes.get(at), Some(b'D' | b'E')).then_some(at + 1)
    };
    let first = letter_after(0);
    let ends = memchr::memchr_iter(0x1b, bytes).filter_map(|at| letter_after(at + 1));
    let mut from = 0;
    for end in first.into_iter().chain(ends).chain([bytes.len()]) {
        parser.process(&bytes[from..end]);
        from = end;
        let owed = std::mem::take(&mut parser.callbacks_mut().owed);
        if !owed.is_empty() {
            parser.process(&owed);
        }
    }
}

/// The cursor's row and column (0-based), on the screen as a terminal shows it. After a
/// character is written in the last column, vt100 reports the column past it (the pending
/// wrap a terminal keeps until the next character), which is no cell; a terminal shows
/// its cursor on the last column then, and reports that column when asked.
pub fn cursor_on_screen(screen: &vt100::Screen) -> (u16, u16) {
    let (rows, cols) = screen.size();
    let (row, col) = screen.cursor_position();
    (row.min(rows.get() - 1), col.min(cols.get() - 1))
}

/// The emulator, and what bounds its memory: `budget` cells for the screen, the alternate
/// screen and the scrollback. vt100 keeps a row's cells when the terminal narrows and a
/// scrollback row's width as it was, so the cells it holds are bounded by the largest rows
/// and columns since it was built (`reach`), not by the current size.
pub struct Screen {
    parser: vt100::Parser<Events>,
    budget: usize,
    reach: (usize, usize),
    /// The alternate screen as it was when the program last left it (a full-screen
    /// program's last screen, which leaving wipes), for the live view.
    last_full: Option<super::StyledScreen>,
    /// The alternate screen as the program's drawing left it, taken when what came after
    /// changed the screen without drawing (a scroll, a clear: a way out).
    shown: Option<super::StyledScreen>,
    drawing: super::drawing::Drawing,
    /// Output after the program's drawing that changed the screen without drawing (a line
    /// feed, a scroll, a clear), not yet given to the emulator: whether it is a way out
    /// shows in what comes next. Given to it at the next piece, after the screen is taken
    /// if that piece draws nothing, or once the screen is looked at. So a program that
    /// streams lines on the alternate screen does not have its screen taken at every one.
    held: Vec<u8>,
    /// The escape the output so far leaves open: while there is one, it may become an
    /// entry into the alternate screen, and every piece is scanned.
    escape: Escape,
}

/// The most output held back (`Screen::held`); a longer change is given at once, after the
/// screen is taken.
const HELD_MAX_BYTES: usize = 4096;

/// Where an escape stands, as vte reads it, for what may enter the alternate screen (a
/// control sequence with the `?` mark that sets modes).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
enum Escape {
    /// None begun.
    #[default]
    None,
    /// After ESC: controls, DEL and bytes past ASCII leave it there.
    Begun,
    /// After ESC and an intermediate byte.
    Intermediate,
    /// Within `ESC [`, and whether a `?` came in it.
    Csi { marked: bool },
}

/// How an escape goes on in some bytes.
#[derive(Debug, PartialEq)]
enum Walk {
    /// It ends, having set modes with the `?` mark.
    Sets,
    /// It ends otherwise, or another ESC, or CAN or SUB, cuts it off.
    Ends,
    /// It is still open where the bytes end.
    Open(Escape),
}

/// Walk the escape at `state` through `bytes`, to its end or theirs.
fn walk(mut state: Escape, bytes: &[u8]) -> Walk {
    for &b in bytes {
        state = match (state, b) {
            (Escape::None, _) => return Walk::Ends,
            (_, 0x1b | 0x18 | 0x1a) => return Walk::Ends,
            (Escape::Begun, b'[') => Escape::Csi { marked: false },
            (Escape::Begun | Escape::Intermediate, 0x20..=0x2f) => Escape::Intermediate,
            (Escape::Begun | Escape::Intermediate, 0x30..=0x7e) => return Walk::Ends,
            (Escape::Csi { marked: true }, b'h') => return Walk::Sets,
            (Escape::Csi { .. }, 0x40..=0x7e) => return Walk::Ends,
            (Escape::Csi { .. }, b'?') => Escape::Csi { marked: true },
            // Parameters, intermediates; controls, which act within an escape; DEL and
            // bytes past ASCII, which it ignores.
            (state, _) => state,
        };
    }
    Walk::Open(state)
}

/// Whether a piece on the main screen, which is not scanned, may enter the alternate
/// screen: an escape in it that sets modes with the `?` mark (which modes, and whether vt100
/// takes it so, is the scan's to say), or one left open at its end, which the next piece
/// may complete. A search that errs towards "may", which costs only a scan. Each walk
/// stops at the next ESC at the latest.
fn may_enter(bytes: &[u8]) -> bool {
    memchr::memchr_iter(0x1b, bytes).any(|at| walk(Escape::Begun, &bytes[at + 1..]) != Walk::Ends)
}

/// Where the escape open at `state` stands after `bytes`: each ESC begins one anew.
fn after(state: Escape, bytes: &[u8]) -> Escape {
    let (state, rest) = match memchr::memrchr(0x1b, bytes) {
        Some(at) => (Escape::Begun, &bytes[at + 1..]),
        None => (state, bytes),
    };
    match walk(state, rest) {
        Walk::Open(state) => state,
        Walk::Sets | Walk::Ends => Escape::None,
    }
}

#[derive(Debug, Serialize)]
pub struct Cursor {
    pub row: u16,
    pub col: u16,
}

#[derive(Debug, Serialize)]
pub struct ScreenView {
    pub lines: Vec<String>,
    pub rows: u16,
    pub cols: u16,
    pub cursor: Cursor,
    pub alternate_screen: bool,
    pub title: String,
    /// Lines that scrolled off the top, oldest first (only as many as asked for).
    pub scrollback: Vec<String>,
}

fn size(n: u16) -> NonZeroU16 {
    NonZeroU16::new(n).unwrap_or(NonZeroU16::MIN)
}

/// Cells of a screen and its alternate screen.
fn screen_cells(rows: u16, cols: u16) -> usize {
    2 * usize::from(rows.max(1)) * usize::from(cols.max(1))
}

impl Screen {
    /// An emulator of `rows`×`cols` holding at most `budget` cells; the size must `fit`.
    pub fn new(rows: u16, cols: u16, budget: usize) -> Self {
        Screen {
            parser: Self::parser(rows, cols, budget, Events::default()),
            budget,
            reach: (usize::from(rows), usize::from(cols)),
            last_full: None,
            shown: None,
            drawing: Default::default(),
            held: Vec::new(),
            escape: Escape::None,
        }
    }

    /// Whether a terminal of `rows`×`cols` fits a budget of `budget` cells.
    pub fn fits(rows: u16, cols: u16, budget: usize) -> bool {
        screen_cells(rows, cols) <= budget
    }

    /// The cells this emulator may hold.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Scrollback lines: what is left of the budget after both screens, within the caps.
    fn parser(rows: u16, cols: u16, budget: usize, events: Events) -> vt100::Parser<Events> {
        let cells = budget
            .saturating_sub(screen_cells(rows, cols))
            .min(SCROLLBACK_CELLS);
        let scrollback = (cells / usize::from(cols.max(1))).min(SCROLLBACK_MAX_LINES);
        vt100::Parser::new_with_callbacks(size(rows), size(cols), scrollback, events)
    }

    /// Feed terminal output; returns the answers owed to the program, if any.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        // Leaving the alternate screen wipes what the program showed there: keep it, as the
        // program's drawing left it. A program's way out often moves to the last line and
        // scrolls, or clears, before it leaves (vim), in the same write or the one before.
        // From the alternate screen on, every byte is scanned, so a way out is seen however
        // it is split into writes. Output on the main screen is scanned only where it may
        // enter.
        let open = std::mem::replace(&mut self.escape, Escape::None);
        self.escape = after(open, bytes);
        if self.held.is_empty()
            && open == Escape::None
            && !self.parser.screen().alternate_screen()
            && !may_enter(bytes)
        {
            emulate(&mut self.parser, bytes);
            // The scanner did not see this piece: it starts afresh when next needed. Both
            // entering and leaving begin with an ESC, which ends whatever this piece left
            // open (a string, a title).
            self.drawing.forget();
        } else {
            self.scan(bytes);
        }
        std::mem::take(&mut self.parser.callbacks_mut().replies)
    }

    /// Feed a piece through the scanner, to its end: taking the alternate screen where the
    /// piece leaves it.
    fn scan(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        loop {
            let scan = self.drawing.scan(rest);
            let Some(at) = scan.leaves else {
                self.draw(rest, scan);
                break;
            };
            self.draw(&rest[..at], scan);
            self.settle();
            if self.parser.screen().alternate_screen() {
                let shown = self.shown.take();
                self.last_full = Some(shown.unwrap_or_else(|| self.render()));
            }
            emulate(&mut self.parser, &rest[at..=at]);
            rest = &rest[at + 1..];
        }
    }

    /// Feed a piece, scanned as `scan`, that does not leave the alternate screen. On the
    /// alternate screen, the screen is taken as the program's drawing leaves it when what
    /// follows changes it (a render of the whole screen), unless what comes next shows
    /// that was no way out.
    fn draw(&mut self, piece: &[u8], scan: Scan) {
        if scan.end > 0 {
            // The program draws again: what was held back was no way out.
            self.apply_held();
            emulate(&mut self.parser, &piece[..scan.end]);
            self.shown = None;
        } else {
            self.settle();
        }
        let rest = &piece[scan.end..];
        if scan.changed && self.shown.is_none() && self.parser.screen().alternate_screen() {
            if !scan.asks && rest.len() <= HELD_MAX_BYTES {
                self.held = rest.to_vec();
                return;
            }
            self.shown = Some(self.render());
        }
        emulate(&mut self.parser, rest);
        if !self.parser.screen().alternate_screen() {
            self.shown = None;
        }
    }

    /// Give the emulator what is held back, the screen taken first (it may be a way out).
    fn settle(&mut self) {
        if self.held.is_empty() {
            return;
        }
        if self.shown.is_none() {
            self.shown = Some(self.render());
        }
        self.apply_held();
        if !self.parser.screen().alternate_screen() {
            self.shown = None;
        }
    }

    /// Give the emulator what is held back, as it is.
    fn apply_held(&mut self) {
        let held = std::mem::take(&mut self.held);
        emulate(&mut self.parser, &held);
    }

    /// The alternate screen as the program last left it, if it ever did.
    pub fn last_full_screen(&self) -> Option<&super::StyledScreen> {
        self.last_full.as_ref()
    }

    /// Whether the alternate screen is shown now.
    pub fn on_alternate_screen(&mut self) -> bool {
        self.settle();
        self.parser.screen().alternate_screen()
    }

    /// Resize to a size that `fits`. Scrollback is kept while the budget still holds what
    /// the emulator may have allocated; past that the emulator is rebuilt from the visible
    /// screen (contents, cursor, modes and title kept; the scrollback starts again).
    pub fn resize(&mut self, rows: u16, cols: u16) {
        self.apply_held();
        let capacity = self.parser.screen().scrollback_capacity();
        let reach = (
            self.reach.0.max(usize::from(rows)),
            self.reach.1.max(usize::from(cols)),
        );
        // A screen taken for a way out is of the old size: what the program draws next is
        // what it shows now.
        self.shown = None;
        if (2 * reach.0 + capacity) * reach.1 <= self.budget {
            self.parser.screen_mut().set_size(size(rows), size(cols));
            self.reach = reach;
            return;
        }
        let state = self.parser.screen().state_formatted();
        let events = Events {
            title: std::mem::take(&mut self.parser.callbacks_mut().title),
            ..Events::default()
        };
        // The old emulator goes first, so both never exist at once.
        self.parser = Self::parser(1, 1, 0, Events::default());
        let mut parser = Self::parser(rows, cols, self.budget, events);
        emulate(&mut parser, state.as_bytes());
        parser.callbacks_mut().replies.clear();
        self.parser = parser;
        self.reach = (usize::from(rows), usize::from(cols));
    }

    /// The visible screen with colours, attributes and the cursor (the live view's).
    pub fn styled(&mut self) -> super::StyledScreen {
        self.settle();
        self.render()
    }

    fn render(&self) -> super::StyledScreen {
        super::styled::render(self.parser.screen(), &self.parser.callbacks().title)
    }

    /// The screen as rendered now, with up to `scrollback` lines from above it.
    pub fn view(&mut self, scrollback: usize) -> ScreenView {
        self.settle();
        let (rows, cols) = self.parser.screen().size();
        let (rows, cols) = (rows.get(), cols.get());
        let lines: Vec<String> = self
            .parser
            .screen()
            .rows(0, cols)
            .map(|l| l.trim_end().to_owned())
            .collect();
        let (row, col) = cursor_on_screen(self.parser.screen());
        let history = self.scrollback(scrollback, rows, cols);
        let screen = self.parser.screen();
        ScreenView {
            lines,
            rows,
            cols,
            cursor: Cursor { row, col },
            alternate_screen: screen.alternate_screen(),
            title: self.parser.callbacks().title.clone(),
            scrollback: history,
        }
    }

    /// The last `wanted` lines above the screen, oldest first. vt100 exposes scrollback by
    /// shifting the visible window up, so collect it window by window, then reset the view.
    fn scrollback(&mut self, wanted: usize, rows: u16, cols: u16) -> Vec<String> {
        let screen = self.parser.screen_mut();
        screen.set_scrollback(usize::MAX);
        let available = screen.scrollback();
        let wanted = wanted.min(available);
        let mut lines = Vec::with_capacity(wanted);
        let mut offset = wanted;
        while offset > 0 {
            screen.set_scrollback(offset);
            let take = offset.min(usize::from(rows));
            lines.extend(
                screen
                    .rows(0, cols)
                    .take(take)
                    .map(|l| l.trim_end().to_owned()),
            );
            offset -= take;
        }
        screen.set_scrollback(0);
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The share of each session at the default `max_records` (32).
    const BUDGET: usize = crate::limits::CAP_TOTAL_EMULATOR_CELLS / 32;

    #[test]
    fn renders_text_cursor_title_and_alternate_screen() {
        let mut s = Screen::new(5, 20, BUDGET);
        s.feed(b"hello\r\nworld\x1b]0;my title\x07");
        let v = s.view(0);
        assert_eq!(v.lines[..2], ["hello", "world"]);
        assert_eq!((v.cursor.row, v.cursor.col), (1, 5));
        assert_eq!(v.title, "my title");
        assert!(!v.alternate_screen);
        s.feed(b"\x1b[?1049h\x1b[2J\x1b[3;4Hfull");
        let v = s.view(0);
        assert!(v.alternate_screen);
        assert_eq!(v.lines[2], "   full");
        s.feed(b"\x1b[?1049l");
        let last = s.last_full_screen().expect("the alternate screen it left");
        let text: String = last.rows[2].iter().map(|span| span.text.as_str()).collect();
        assert_eq!(text.trim_end(), "   full");
        assert_eq!(s.view(0).lines[0], "hello");
    }

    #[test]
    fn index_and_next_line_move_as_a_terminal_moves() {
        let mut s = Screen::new(4, 20, BUDGET);
        // Up two rows, index down onto `C` and write over it; next line, and write below.
        s.feed(b"A\r\nB\r\nC\r\n\x1bM\x1bM\x1bDx\x1bEy");
        assert_eq!(s.view(0).lines[..4], ["A", "B", "x", "y"]);
        // At the bottom, both scroll; split across two pieces, index still applies.
        s.feed(b"\x1b");
        s.feed(b"Dz\x1bE");
        let v = s.view(2);
        assert_eq!(v.lines[..4], ["x", "y", " z", ""]);
        assert_eq!(v.scrollback, ["A", "B"]);
        assert_eq!((v.cursor.row, v.cursor.col), (3, 0));
        // A `D` that ends an escape of another kind (a character set) moves nothing.
        s.feed(b"\x1b(DD");
        let v = s.view(0);
        assert_eq!(v.lines[2..4], [" z", "D"]);
        assert_eq!((v.cursor.row, v.cursor.col), (3, 1));
        // Controls within the escape act, and the index still applies where it ends.
        let mut s = Screen::new(4, 20, BUDGET);
        s.feed(b"a\x1b\x07Db\x1b\x00");
        s.feed(b"\x07Dc");
        assert_eq!(s.view(0).lines[..3], ["a", " b", "  c"]);
    }

    /// The text of `screen`'s row `row`, trailing blanks trimmed.
    fn row_text(screen: &crate::output::StyledScreen, row: usize) -> String {
        let text: String = screen.rows[row].iter().map(|s| s.text.as_str()).collect();
        text.trim_end().to_owned()
    }

    /// The screen kept when `pieces` are fed, one write each, after a full screen.
    fn kept(pieces: &[&[u8]]) -> crate::output::StyledScreen {
        let mut s = Screen::new(5, 20, BUDGET);
        s.feed(b"\x1b[?1049h\x1b[2J\x1b[1;1Htop line\x1b[5;1Hstatus");
        for piece in pieces {
            s.feed(piece);
        }
        assert!(!s.on_alternate_screen());
        s.last_full_screen()
            .expect("the alternate screen it left")
            .clone()
    }

    #[test]
    fn a_way_out_keeps_the_screen_as_the_drawing_left_it() {
        let leave = b"\x1b[?25h\x1b[?1049l\x1b[?1l";
        // vim's way out: to the last line and a line feed (which scrolls), then, in a
        // write of its own, the leaving; or both in one write.
        for pieces in [
            &[&b"\x1b[5;1H\r\n"[..], leave][..],
            &[b"\x1b[5;1H\r\n\x1b[?1049l"],
            // Scrolled by a sequence, in any number of writes.
            &[b"\x1b[5;1H", b"\x1b[2S", b"\x1b[K", leave],
            // Cleared, then left.
            &[b"\x1b[H\x1b[2J", leave],
            &[b"\x1b[H\x1b[2J\x1b[?1049l"],
            // The leaving split across writes, or with other modes beside it.
            &[b"\x1b[5;1H\r\n\x1b[?10", b"49l"],
            &[b"\x1b[5;1H\r\n", b"\x1b", b"[?1049l"],
            &[b"\x1b[5;1H\r\n", b"\x1b[?25;1049l"],
            &[b"\x1b[5;1H\r\n\x1b[?1049;1l"],
            // A reset, which leaves too.
            &[b"\x1b[5;1H\r\n", b"\x1bc"],
            // Index or next line at the last line, which scroll as a line feed does.
            &[b"\x1b[5;1H\x1bD", leave],
            &[b"\x1b[5;1H\x1bE\x1b[?1049l"],
        ] {
            let last = kept(pieces);
            assert_eq!(row_text(&last, 0), "top line", "{pieces:?}");
            assert_eq!(row_text(&last, 4), "status", "{pieces:?}");
        }
        // Text shown in the write that leaves, or after the way out began, is what the
        // program showed last.
        let last = kept(&[b"\x1b[5;1H\r\n", b"bye", leave]);
        assert_eq!(row_text(&last, 0), "");
        assert_eq!(row_text(&last, 4), "bye");
        let last = kept(&[b"\x1b[3;1Hlast frame\x1b[K\r\n\x1b[?1049l"]);
        assert_eq!(row_text(&last, 0), "top line");
        assert_eq!(row_text(&last, 2), "last frame");
        // Text drawn over longer text, the rest of its line erased, then a way out.
        let last = kept(&[b"\x1b[1;1Htop\x1b[K", b"\x1b[5;1H\r\n", leave]);
        assert_eq!(row_text(&last, 0), "top");
        assert_eq!(row_text(&last, 4), "status");
        let last = kept(&[b"\x1b[1;1Htop\x1b[K\x1b[5;1H\r\n\x1b[K", leave]);
        assert_eq!(row_text(&last, 0), "top");
        assert_eq!(row_text(&last, 4), "status");
        // A screen kept for a way out that never left is not kept for the next program.
        let mut s = Screen::new(5, 20, BUDGET);
        s.feed(b"\x1b[?1049hfirst\r\n\x1bc");
        s.feed(b"\x1b[?1049h\x1b[?1049l");
        let last = s.last_full_screen().expect("the second program's screen");
        assert_eq!(row_text(last, 0), "");
    }

    #[test]
    fn a_main_screen_piece_that_may_enter_is_scanned() {
        use super::{Escape, after, may_enter};
        for piece in [
            &b"\x1b[?1049h"[..],
            b"ab\x1b[?1;1049h",
            b"\x1b[?25l\x1b[?47h",
            // As vte takes them: an intermediate, controls within, leading zeros.
            b"\x1b[?1049 h",
            b"\x1b[?10\r49h",
            b"\x1b[\r?1049h",
            b"\x1b[?01049h",
            // Controls, DEL and bytes past ASCII between ESC and `[`, which vte skips.
            b"\x1b\r[?1049h",
            b"\x1b\x7f[?1049h",
            "\x1b\u{e9}[?1049h".as_bytes(),
            // Left open: the next piece may complete it.
            b"\x1b[?1049",
            b"ab\x1b[",
            b"ab\x1b",
            b"ab\x1b\r",
        ] {
            assert!(may_enter(piece), "{piece:?}");
        }
        for piece in [
            &b"plain text\r\n"[..],
            b"\x1b[?1049l",
            b"\x1b[31mred\x1b[m",
            b"\x1b[1049h",
            b"\x1b[?10\x1b[31m",
            b"\x1b]0;title\x07",
            b"\x1b(B",
        ] {
            assert!(!may_enter(piece), "{piece:?}");
        }
        let csi = Escape::Csi { marked: true };
        assert_eq!(after(Escape::None, b"ab\x1b[?10"), csi);
        assert_eq!(after(csi, b"4"), csi);
        assert_eq!(after(csi, b""), csi);
        assert_eq!(after(csi, b"9h"), Escape::None);
        assert_eq!(after(Escape::None, b"ab\x1b"), Escape::Begun);
        assert_eq!(after(Escape::Begun, b"\r"), Escape::Begun);
        assert_eq!(after(Escape::None, b"ab\x1b[?10h"), Escape::None);
        assert_eq!(after(Escape::None, b"ab\x1b]0;ti"), Escape::None);

        // Entered in any of those ways, the screen is kept when the program leaves.
        for pieces in [
            &[&b"\x1b[?1;1049h\x1b[5;1Hshown\r\n\x1b[?1049l"[..]][..],
            &[b"\x1b[?1049 h\x1b[5;1Hshown\r\n\x1b[?1049l"],
            &[b"\x1b[\r?1049h\x1b[5;1Hshown\r\n\x1b[?1049l"],
            &[b"\x1b[?1049", b"h\x1b[5;1Hshown\r\n\x1b[?1049l"],
            &[b"ab\x1b", b"[?1049h\x1b[5;1Hshown\r\n\x1b[?1049l"],
            &[b"ab\x1b", b"[?10", b"49h", b"\x1b[5;1Hshown\r\n\x1b[?1049l"],
            // After a title left open on the main screen.
            &[
                b"\x1b]0;ti",
                b"tle\x07\x1b[?1049h\x1b[5;1Hshown\r\n\x1b[?1049l",
            ],
            // Split three ways or more, or with an empty piece between.
            &[b"\x1b[?10", b"4", b"9h\x1b[5;1Hshown\r\n\x1b[?1049l"],
            &[b"\x1b[", b"?", b"1049", b"h\x1b[5;1Hshown\r\n\x1b[?1049l"],
            &[b"\x1b[?10", b"", b"49h\x1b[5;1Hshown\r\n\x1b[?1049l"],
            // A control between ESC and `[`.
            &[b"\x1b\r[?1049h\x1b[5;1Hshown\r\n\x1b[?1049l"],
            &[b"ab\x1b\r", b"[?1049h\x1b[5;1Hshown\r\n\x1b[?1049l"],
            // Many ways out on the main screen before the entry.
            &[
                &b"\x1bc".repeat(100),
                b"\x1b[?1049h\x1b[5;1Hshown\r\n\x1b[?1049l",
            ],
        ] {
            let mut s = Screen::new(5, 20, BUDGET);
            for piece in pieces {
                s.feed(piece);
            }
            let last = s.last_full_screen().expect("the screen it left");
            assert_eq!(row_text(last, 4), "shown", "{pieces:?}");
            assert!(!s.on_alternate_screen());
        }
    }

    /// A program streaming lines on the alternate screen does not have its screen taken at
    /// every line; the screen, looked at, is as the emulator drew every byte; a way out is
    /// kept as before.
    #[test]
    fn a_line_feed_after_drawing_is_held_until_the_next_piece_shows_what_it_was() {
        let mut s = Screen::new(3, 20, BUDGET);
        s.feed(b"\x1b[?1049h\x1b[3;1H");
        for i in 0..10 {
            s.feed(format!("line{i}\r\n").as_bytes());
            assert!(s.shown.is_none(), "no screen taken at line {i}");
            assert_eq!(s.held, b"\r\n");
        }
        assert_eq!(s.view(0).lines, ["line8", "line9", ""]);
        assert_eq!((s.view(0).cursor.row, s.view(0).cursor.col), (2, 0));
        // The view was looked at with the line feed held: the screen before it was taken.
        s.feed(b"\x1b[?1049l");
        let last = s.last_full_screen().unwrap();
        assert_eq!(row_text(last, 0), "line7");
        assert_eq!(row_text(last, 2), "line9");
        // Unlooked at, the same.
        let mut s = Screen::new(3, 20, BUDGET);
        s.feed(b"\x1b[?1049h\x1b[3;1H");
        for i in 0..10 {
            s.feed(format!("line{i}\r\n").as_bytes());
        }
        s.feed(b"\x1b[?25h");
        assert!(s.held.is_empty() && s.shown.is_some());
        s.feed(b"\x1b[?1049l");
        assert_eq!(row_text(s.last_full_screen().unwrap(), 0), "line7");
        assert_eq!(s.view(0).lines, ["", "", ""]);
        // A question after the line feed is answered at once, in its piece or the next.
        let mut s = Screen::new(3, 20, BUDGET);
        s.feed(b"\x1b[?1049h");
        assert_eq!(s.feed(b"ab\r\n\x1b[6n"), b"\x1b[2;1R");
        assert!(s.held.is_empty());
        assert_eq!(s.feed(b"cd\r\n"), b"");
        assert_eq!(s.feed(b"\x1b[6n"), b"\x1b[3;1R");
        // The live view, a title in what is held, and a resize see every byte.
        s.feed(b"ef\r\n\x1b]0;held title\x07");
        assert!(!s.held.is_empty());
        let styled = s.styled();
        assert_eq!(styled.title, "held title");
        assert_eq!(row_text(&styled, 1), "ef");
        s.feed(b"gh\r\n");
        assert!(s.on_alternate_screen() && s.held.is_empty());
        s.feed(b"ij\r\n");
        s.resize(4, 20);
        assert!(s.held.is_empty() && s.shown.is_none());
        assert_eq!(s.view(0).lines[..2], ["gh", "ij"]);
        // More than can be held is taken at once, the screen first.
        let mut s = Screen::new(3, 20, BUDGET);
        s.feed(b"\x1b[?1049hx");
        s.feed(&[b'\n'; HELD_MAX_BYTES + 1]);
        assert!(s.held.is_empty() && s.shown.is_some());
        // A way out that clears the screen from home on.
        let last = kept(&[b"\x1b[H\x1b[J", b"\x1b[?1049l"]);
        assert_eq!(row_text(&last, 0), "top line");
    }

    #[test]
    fn strings_and_titles_are_bounded() {
        let mut s = Screen::new(5, 20, BUDGET);
        let mut flood = b"\x1b]0;".to_vec();
        flood.extend(std::iter::repeat_n(b'a', 100_000));
        s.feed(&flood);
        s.feed("é".repeat(1000).as_bytes());
        s.feed(b"\x07after");
        let v = s.view(0);
        assert!(v.title.len() <= TITLE_MAX_BYTES, "{}", v.title.len());
        assert!(v.title.starts_with("aaa"));
        assert_eq!(v.lines[0], "after");
        s.feed(format!("\x1b]2;{}\x07", "é".repeat(600)).as_bytes());
        let title = s.view(0).title;
        assert!(title.len() <= TITLE_MAX_BYTES && title.chars().all(|c| c == 'é'));
    }

    #[test]
    fn answers_cursor_position_and_device_queries() {
        let mut s = Screen::new(24, 80, BUDGET);
        assert_eq!(s.feed(b"ab\x1b[6n"), b"\x1b[1;3R");
        assert_eq!(s.feed(b"\x1b[c"), DEVICE_ATTRIBUTES);
        assert_eq!(s.feed(b"\x1b[5n"), b"\x1b[0n");
        assert_eq!(s.feed(b"plain"), b"");
    }

    /// A full last line (what `top` draws) leaves the cursor on the screen's last cell, in
    /// the view, the live view's rendering and the position report alike.
    #[test]
    fn the_cursor_stays_on_the_screen_after_the_last_column_is_written() {
        let mut s = Screen::new(24, 80, BUDGET);
        s.feed(format!("\x1b[24;1H{}", "x".repeat(80)).as_bytes());
        let v = s.view(0);
        assert_eq!((v.cursor.row, v.cursor.col), (23, 79));
        let styled = s.styled();
        let on: Vec<_> = styled
            .rows
            .iter()
            .flatten()
            .filter(|span| span.style.cursor)
            .collect();
        assert_eq!(on.len(), 1, "one cell shows the cursor");
        assert_eq!(s.feed(b"\x1b[6n"), b"\x1b[24;80R");
        // The next character wraps as before.
        s.feed(b"y");
        assert_eq!(s.view(0).lines[23], "y");
    }

    #[test]
    fn scrollback_returns_lines_above_the_screen_oldest_first() {
        let mut s = Screen::new(3, 10, BUDGET);
        for i in 0..10 {
            s.feed(format!("line{i}\r\n").as_bytes());
        }
        let v = s.view(5);
        assert_eq!(v.lines, ["line8", "line9", ""]);
        assert_eq!(v.scrollback, ["line3", "line4", "line5", "line6", "line7"]);
        assert_eq!(s.view(100).scrollback.len(), 8);
        assert_eq!(s.view(0).lines, ["line8", "line9", ""]);
    }

    #[test]
    fn widening_past_the_scrollback_budget_keeps_the_screen() {
        let mut s = Screen::new(4, 80, BUDGET);
        for i in 0..100 {
            s.feed(format!("line{i}\r\n").as_bytes());
        }
        s.feed(b"\x1b]0;kept\x07tail");
        s.resize(4, 1000);
        let v = s.view(10);
        assert_eq!((v.rows, v.cols), (4, 1000));
        assert_eq!(v.lines, ["line97", "line98", "line99", "tail"]);
        assert_eq!((v.cursor.row, v.cursor.col), (3, 4));
        assert_eq!(v.title, "kept");
        assert!(v.scrollback.is_empty(), "the scrollback starts again");
        assert!((8 + s.parser.screen().scrollback_capacity()) * 1000 <= BUDGET);
    }

    #[test]
    fn sizes_fit_the_budget_with_both_screens() {
        assert!(Screen::fits(256, 512, BUDGET));
        assert!(!Screen::fits(257, 512, BUDGET));
        assert!(!Screen::fits(1000, 1000, BUDGET));
        let s = Screen::new(256, 512, BUDGET);
        assert_eq!(s.parser.screen().scrollback_capacity(), 0);
        let s = Screen::new(24, 80, BUDGET);
        assert_eq!(
            s.parser.screen().scrollback_capacity(),
            SCROLLBACK_CELLS / 80
        );
    }

    #[test]
    fn what_the_emulator_may_hold_stays_within_the_budget_across_resizes() {
        let sizes = [
            (24, 80),
            (256, 512),
            (512, 256),
            (24, 80),
            (1, 1000),
            (1000, 1),
            (60, 200),
        ];
        let mut s = Screen::new(24, 80, BUDGET);
        for (rows, cols) in sizes.iter().cycle().take(40) {
            assert!(Screen::fits(*rows, *cols, BUDGET));
            s.resize(*rows, *cols);
            s.feed(b"\x1b[?1049htext\x1b[?1049l\r\nmore\r\n");
            let capacity = s.parser.screen().scrollback_capacity();
            let (reach_rows, reach_cols) = s.reach;
            assert!(reach_rows >= usize::from(*rows) && reach_cols >= usize::from(*cols));
            assert!(
                (2 * reach_rows + capacity) * reach_cols <= BUDGET,
                "{rows}x{cols}"
            );
            assert_eq!(s.view(0).lines.len(), usize::from(*rows));
        }
    }

    #[test]
    fn resize_changes_the_rendered_size() {
        let mut s = Screen::new(24, 80, BUDGET);
        s.resize(10, 40);
        let v = s.view(0);
        assert_eq!((v.rows, v.cols, v.lines.len()), (10, 40, 10));
    }
}
