//! Shaping output into the lines an agent reads: as it was written (`Raw`), without escape
//! sequences (`Strip`), or as a terminal leaves each line (`Render`: carriage returns,
//! backspaces, tabs, cursor moves within the line and erase-in-line applied; colours and every
//! other escape sequence removed). A progress bar redrawn 20,000 times on one line renders as
//! its final state, once.
//!
//! Text is fed in pieces, each with the cursor of its first code point; complete lines come
//! out with the cursor where they began, and `finish` gives the last, unterminated one. A
//! line longer than `max_line` bytes comes out in pieces of that size, so memory stays
//! bounded whatever the output.

use super::ansi::{AnsiStripper, Vte};
use super::buffer::count_chars;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Raw,
    Strip,
    Render,
}

/// Tab stops of a rendered line.
const TAB: usize = 8;
/// A cell that is not text: one a tab printed at the end of a line moves over (the tab
/// itself is kept as text, its cell holds `\t`), or the right half of a wide character.
const FILL: char = '\0';

pub struct Shaper {
    shape: Shape,
    max_line: usize,
    stripper: AnsiStripper,
    parser: Vte,
    line: Line,
    /// Cursor of the first code point of the line being built, once it has one.
    line_start: Option<u64>,
}

/// The line being built. Raw and stripped lines are text; a rendered line is a row of cells
/// with a column, as on a terminal: a wide character (CJK, most emoji) takes two cells, as
/// the terminal's screen has it, and any other code point one.
#[derive(Default)]
struct Line {
    text: String,
    cells: Vec<char>,
    col: usize,
    /// Lines completed by the last piece, with the cursor where each began.
    done: Vec<(u64, String)>,
    /// The cursor of the code point being fed, and where the line it ends began.
    at: u64,
    start: Option<u64>,
}

impl Line {
    /// The row's text, emptying it: its cells less those that are not text.
    fn take_text(&mut self) -> String {
        self.cells.drain(..).filter(|c| *c != FILL).collect()
    }

    fn end_rendered(&mut self) {
        let mut text = self.take_text();
        text.push('\n');
        self.done.push((self.start.take().unwrap_or(self.at), text));
        self.col = 0;
    }

    fn put(&mut self, c: char) {
        use unicode_width::UnicodeWidthChar;
        let width = if c.width() == Some(2) { 2 } else { 1 };
        let (from, to) = (self.col, self.col + width);
        if self.cells.len() < to {
            self.cells.resize(to, ' ');
        }
        // A tab written over is blanks from then on, as the screen shows it.
        for cell in from..to {
            self.expand_tab(cell);
        }
        // A wide character partly overwritten is gone whole, as on a terminal: its other
        // half, outside what is written now, becomes a blank.
        if from > 0 && self.cells[from] == FILL && Line::wide(self.cells[from - 1]) {
            self.cells[from - 1] = ' ';
        }
        if Line::wide(self.cells[to - 1]) && self.cells.get(to) == Some(&FILL) {
            self.cells[to] = ' ';
        }
        self.cells[from] = c;
        if width == 2 {
            self.cells[from + 1] = FILL;
        }
        self.col = to;
    }

    /// When cell `at` belongs to a tab kept as text (its `\t` and the fill up to its stop),
    /// that tab becomes the blanks it moved over.
    fn expand_tab(&mut self, at: usize) {
        let start = self.cells[..=at].iter().rposition(|c| *c != FILL);
        let Some(start) = start.filter(|&i| self.cells[i] == '\t') else {
            return;
        };
        let end = self.cells[start + 1..]
            .iter()
            .position(|c| *c != FILL)
            .map_or(self.cells.len(), |n| start + 1 + n);
        self.cells[start..end].fill(' ');
    }

    fn wide(c: char) -> bool {
        use unicode_width::UnicodeWidthChar;
        c.width() == Some(2)
    }

    fn param(params: &vte::Params, default: usize) -> usize {
        match params.iter().next().and_then(|p| p.first()).copied() {
            Some(0) | None => default,
            Some(n) => usize::from(n),
        }
    }
}

impl vte::Perform for Line {
    fn print(&mut self, c: char) {
        self.put(c);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' => self.end_rendered(),
            b'\r' => self.col = 0,
            0x08 => self.col = self.col.saturating_sub(1),
            b'\t' => {
                let stop = (self.col / TAB + 1) * TAB;
                if self.col >= self.cells.len() {
                    self.cells.resize(self.col, ' ');
                    self.cells.push('\t');
                    self.cells.resize(stop, FILL);
                }
                self.col = stop;
            }
            _ => {}
        }
    }

    fn csi_dispatch(&mut self, params: &vte::Params, intermediates: &[u8], _: bool, action: char) {
        if !intermediates.is_empty() {
            return;
        }
        match action {
            // Erase in line: to its end, to its start, all of it.
            'K' => match Line::param(params, 0) {
                0 => self.cells.truncate(self.col),
                1 => {
                    let end = (self.col + 1).min(self.cells.len());
                    self.cells[..end].fill(' ');
                }
                _ => self.cells.clear(),
            },
            // Erase characters from the cursor on.
            'X' => {
                let end = (self.col + Line::param(params, 1)).min(self.cells.len());
                if self.col < end {
                    self.cells[self.col..end].fill(' ');
                }
            }
            'C' => self.col += Line::param(params, 1),
            'D' => self.col = self.col.saturating_sub(Line::param(params, 1)),
            'G' => self.col = Line::param(params, 1) - 1,
            _ => {}
        }
    }
}

impl Shaper {
    pub fn new(shape: Shape, max_line: usize) -> Self {
        Shaper {
            shape,
            max_line: max_line.max(4),
            stripper: AnsiStripper::default(),
            parser: Vte::default(),
            line: Line::default(),
            line_start: None,
        }
    }

    /// Feed `text`, whose first code point is at `cursor`; `line(start, text)` is called for
    /// every line it completes (text with its `\n`).
    pub fn feed(&mut self, text: &str, cursor: u64, mut line: impl FnMut(u64, &str)) {
        match self.shape {
            Shape::Raw => self.feed_raw(text, cursor, &mut line),
            Shape::Strip => self.feed_stripped(text, cursor, &mut line),
            Shape::Render => {
                for (at, c) in (cursor..).zip(text.chars()) {
                    self.line.at = at;
                    self.line.start.get_or_insert(at);
                    self.parser.advance(&mut self.line, c);
                    // A cursor moved far right stops at the line's limit, as at a
                    // terminal's margin: what it would write lies no further.
                    self.line.col = self.line.col.min(self.max_line);
                    if self.line.cells.len() >= self.max_line {
                        let text = self.line.take_text();
                        self.line.col = 0;
                        let start = self.line.start.take().unwrap_or(at);
                        self.line.done.push((start, text));
                    }
                    for (start, text) in self.line.done.drain(..) {
                        line(start, &text);
                    }
                }
            }
        }
    }

    /// Text without escape sequences: the stripper's kept runs, cut into lines with a byte
    /// search; a line's start is its first kept code point.
    fn feed_stripped(&mut self, text: &str, cursor: u64, line: &mut impl FnMut(u64, &str)) {
        let Shaper {
            max_line,
            stripper,
            line: built,
            line_start,
            ..
        } = self;
        // The cursor of `text[counted..]`.
        let (mut at, mut counted) = (cursor, 0);
        stripper.runs(text, |run| {
            at += count_chars(&text.as_bytes()[counted..run.start]);
            let mut rest = &text[run.clone()];
            counted = run.end;
            while !rest.is_empty() {
                let start = *line_start.get_or_insert(at);
                // Up to its `\n`, or to the first code point that fills the line.
                let mut end = max_line.saturating_sub(built.text.len()).max(1);
                while end < rest.len() && !rest.is_char_boundary(end) {
                    end += 1;
                }
                let newline = memchr::memchr(b'\n', &rest.as_bytes()[..end.min(rest.len())]);
                let ends_line = newline.is_some() || end <= rest.len();
                let end = newline.map_or(end.min(rest.len()), |i| i + 1);
                let (piece, after) = rest.split_at(end);
                built.text.push_str(piece);
                at += count_chars(piece.as_bytes());
                if ends_line {
                    line(start, &built.text);
                    *line_start = None;
                    built.text.clear();
                }
                rest = after;
            }
        });
    }

    /// Raw text: lines are found with a byte search, and passed on from `text` itself
    /// unless a line began in an earlier piece.
    fn feed_raw(&mut self, text: &str, cursor: u64, line: &mut impl FnMut(u64, &str)) {
        let mut rest = text;
        let mut at = cursor;
        loop {
            let room = self.max_line.saturating_sub(self.line.text.len()).max(1);
            let newline = memchr::memchr(b'\n', rest.as_bytes()).map(|i| i + 1);
            let end = match newline {
                Some(end) if end <= room => end,
                _ if rest.len() >= room => {
                    // A piece of a line too long to wait for its end.
                    let mut end = room;
                    while !rest.is_char_boundary(end) {
                        end += 1;
                    }
                    end
                }
                _ => {
                    if !rest.is_empty() {
                        self.line_start.get_or_insert(at);
                        self.line.text.push_str(rest);
                    }
                    return;
                }
            };
            let piece = &rest[..end];
            let start = self.line_start.take().unwrap_or(at);
            if self.line.text.is_empty() {
                line(start, piece);
            } else {
                self.line.text.push_str(piece);
                line(start, &self.line.text);
                self.line.text.clear();
            }
            at += count_chars(piece.as_bytes());
            rest = &rest[end..];
        }
    }

    /// The line being built (empty when there is none) and where it began, left in place.
    pub fn peek(&self) -> Option<(u64, String)> {
        match self.shape {
            Shape::Raw | Shape::Strip => Some((self.line_start?, self.line.text.clone())),
            Shape::Render => {
                let text: String = self.line.cells.iter().filter(|c| **c != FILL).collect();
                Some((self.line.start?, text)).filter(|(_, t)| !t.is_empty())
            }
        }
    }

    /// The last line, not ended by `\n` (empty when there is none), and where it began.
    pub fn finish(&mut self) -> Option<(u64, String)> {
        match self.shape {
            Shape::Raw | Shape::Strip => {
                let start = self.line_start.take()?;
                Some((start, std::mem::take(&mut self.line.text)))
            }
            Shape::Render => {
                let start = self.line.start.take()?;
                self.line.col = 0;
                let text = self.line.take_text();
                (!text.is_empty()).then_some((start, text))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shaped(shape: Shape, pieces: &[&str]) -> Vec<(u64, String)> {
        shaped_in(shape, 1 << 20, pieces)
    }

    /// The lines of `pieces` fed in turn to a shaper of lines up to `max_line` bytes.
    fn shaped_in(shape: Shape, max_line: usize, pieces: &[&str]) -> Vec<(u64, String)> {
        let mut shaper = Shaper::new(shape, max_line);
        let mut lines = Vec::new();
        let mut cursor = 0;
        for piece in pieces {
            shaper.feed(piece, cursor, |at, text| lines.push((at, text.to_owned())));
            cursor += piece.chars().count() as u64;
        }
        lines.extend(shaper.finish());
        lines
    }

    fn texts(lines: &[(u64, String)]) -> Vec<&str> {
        lines.iter().map(|(_, t)| t.as_str()).collect()
    }

    #[test]
    fn a_progress_line_renders_as_its_final_state() {
        let mut text = String::new();
        for i in 0..=20_000 {
            text.push_str(&format!(
                "\r[{:>5}/20000] \x1b[32m{}\x1b[0m",
                i,
                "#".repeat(i % 50)
            ));
        }
        text.push_str("\r\x1b[Kdone\r\n");
        let lines = shaped(Shape::Render, &[&text]);
        assert_eq!(texts(&lines), ["done\n"]);
        assert_eq!(lines[0].0, 0);
    }

    #[test]
    fn rendering_applies_overwrites_backspaces_tabs_and_erases() {
        let lines = shaped(
            Shape::Render,
            &[
                "abc\rX\r\n",
                "12345\x08\x08\x1b[K\n",
                "a\tb\n",
                "wor",
                "ld\x1b[1K!\n",
                "tail",
            ],
        );
        assert_eq!(
            texts(&lines),
            ["Xbc\n", "123\n", "a\tb\n", "     !\n", "tail"]
        );
        assert_eq!(
            lines.iter().map(|(at, _)| *at).collect::<Vec<_>>(),
            [0, 7, 18, 22, 33]
        );
    }

    #[test]
    fn a_tab_written_over_becomes_the_blanks_it_moved_over() {
        let lines = shaped(
            Shape::Render,
            &["\tX\rab\n", "\t\tZ\r\tA\n", "ab\tc\n", "x\t\x08y\n"],
        );
        assert_eq!(
            texts(&lines),
            ["ab      X\n", "\tA       Z\n", "ab\tc\n", "x      y\n"]
        );
    }

    #[test]
    fn a_wide_character_takes_two_cells_and_goes_whole_when_overwritten() {
        let lines = shaped(
            Shape::Render,
            &[
                "日本語\rab\n",
                "处理文件...\rdone\n",
                "😀😀\rX\n",
                "日本\r\x1b[1Cx\n",
                "ab\r日\n",
                "a😀b\x08\x08\x08c\n",
            ],
        );
        assert_eq!(
            texts(&lines),
            [
                "ab本語\n",
                "done文件...\n",
                "X 😀\n",
                " x本\n",
                "日\n",
                "ac b\n"
            ]
        );
    }

    #[test]
    fn stripping_keeps_text_and_line_starts_across_pieces() {
        let lines = shaped(
            Shape::Strip,
            &["\x1b[31mred\x1b", "[0m\nnext\n", "\x1b]0;t\x07x"],
        );
        assert_eq!(texts(&lines), ["red\n", "next\n", "x"]);
        assert_eq!(lines[0].0, 5);
        assert_eq!(lines[2].0, 24);
        let raw = shaped(Shape::Raw, &["a\r\nb", "c"]);
        assert_eq!(texts(&raw), ["a\r\n", "bc"]);
    }

    #[test]
    fn a_line_longer_than_the_bound_comes_out_in_pieces() {
        for shape in [Shape::Raw, Shape::Render] {
            let mut shaper = Shaper::new(shape, 8);
            let mut pieces = Vec::new();
            shaper.feed(&"x".repeat(20), 0, |at, t| pieces.push((at, t.to_owned())));
            pieces.extend(shaper.finish());
            assert_eq!(
                pieces,
                [(0, "x".repeat(8)), (8, "x".repeat(8)), (16, "x".repeat(4))],
                "{shape:?}"
            );
        }
    }

    /// Lines as shaping gave them when it fed every code point through the parser.
    fn one_by_one(shape: Shape, text: &str, max_line: usize) -> Vec<(u64, String)> {
        let mut lines = Vec::new();
        let (mut stripper, mut parser) = (AnsiStripper::default(), vte::Parser::<0>::default());
        let (mut built, mut start) = (Line::default(), None);
        let mut utf8 = [0u8; 4];
        for (at, c) in (0..).zip(text.chars()) {
            if shape == Shape::Strip {
                if stripper.parse(c) {
                    start.get_or_insert(at);
                    built.text.push(c);
                    if c == '\n' || built.text.len() >= max_line {
                        lines.push((start.take().unwrap(), std::mem::take(&mut built.text)));
                    }
                }
                continue;
            }
            built.at = at;
            built.start.get_or_insert(at);
            parser.advance(&mut built, c.encode_utf8(&mut utf8).as_bytes());
            built.col = built.col.min(max_line);
            if built.cells.len() >= max_line {
                let text = built.take_text();
                built.col = 0;
                built.done.push((built.start.take().unwrap_or(at), text));
            }
            lines.append(&mut built.done);
        }
        if shape == Shape::Strip {
            lines.extend(start.map(|start| (start, built.text)));
        } else {
            let text = built.take_text();
            lines.extend(
                built
                    .start
                    .filter(|_| !text.is_empty())
                    .map(|at| (at, text)),
            );
        }
        lines
    }

    proptest::proptest! {
        /// However the text is cut into pieces, the same lines come out, each starting at
        /// the same cursor; stripped and rendered, with plain text taken in bulk, they are
        /// what feeding every code point through the parser gives.
        #[test]
        fn any_cut_gives_the_lines_of_the_parser(
            text in "[ab \n\r\t\x07\x08\x18\x1a\x7f\u{85}\u{90}\u{9b}\u{9c}\u{9d}\u{a7}\u{71c}\u{f720}€日\x1b\\[\\]P;K0-9mX]{0,80}",
            cuts in proptest::collection::vec(0usize..80, 0..6),
            max_line in 4usize..24,
        ) {
            for shape in [Shape::Raw, Shape::Strip, Shape::Render] {
                let lines = shaped_in(shape, max_line, &super::super::cut_at(&text, &cuts));
                let whole = shaped_in(shape, max_line, &[text.as_str()]);
                proptest::prop_assert_eq!(&lines, &whole, "{:?}", shape);
                if shape != Shape::Raw {
                    proptest::prop_assert_eq!(lines, one_by_one(shape, &text, max_line), "{:?}", shape);
                }
            }
        }
    }

    #[test]
    fn nothing_after_the_last_newline_is_no_line() {
        assert!(shaped(Shape::Render, &["a\n"]).len() == 1);
        assert!(shaped(Shape::Raw, &[""]).is_empty());
        assert!(shaped(Shape::Render, &["\x1b[31m"]).is_empty());
    }
}
