//! Shaping output into the lines an agent reads: as it was written (`Raw`), without escape
//! sequences (`Strip`), or as a terminal leaves each line (`Render`: carriage returns,
//! backspaces, tabs, cursor moves within the line and between the terminal's last rows,
//! erasures applied; colours and every other escape sequence removed, see `rows.rs`). A
//! progress bar redrawn 20,000 times on one line renders as its final state, once.
//!
//! Text is fed in pieces, each with the cursor of its first code point; complete lines come
//! out with the cursor where they began (rendered, once no program can reach them any
//! more), and `finish` gives the rest, the last one unterminated. A
//! line longer than `max_line` bytes comes out in pieces of that size, so memory stays
//! bounded whatever the output.

use super::ansi::{AnsiStripper, Vte};
use super::buffer::count_chars;
use super::rows::{MAX_ROWS, Rows};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Raw,
    Strip,
    Render,
}

/// Cells rendered rows may hold at most, together: a terminal's height of rows, fewer when
/// lines may be long.
const MAX_CELLS: usize = 1 << 20;

pub struct Shaper {
    shape: Shape,
    max_line: usize,
    stripper: AnsiStripper,
    parser: Vte,
    /// The raw or stripped line being built.
    text: String,
    /// Cursor of the first code point of the line being built, once it has one.
    line_start: Option<u64>,
    /// Rendered: the rows the output may still change. On a screen its width bounds every
    /// row, so a row is cut into pieces of `max_line` only as it leaves, in its last state;
    /// without one (a single row of unbounded width), the row is cut as it is written.
    rows: Rows,
}

impl Shaper {
    pub fn new(shape: Shape, max_line: usize) -> Self {
        Shaper {
            shape,
            max_line: max_line.max(4),
            stripper: AnsiStripper::default(),
            parser: Vte::default(),
            text: String::new(),
            line_start: None,
            rows: Rows::new(1, usize::MAX, usize::MAX),
        }
    }

    /// Rendered on a terminal of `rows` rows and `cols` columns: lines wrap at its width,
    /// and a program may move back up to the rows it wrote, and change them (without this,
    /// or with no width, one row of unbounded width).
    pub fn on_screen(mut self, rows: usize, cols: usize) -> Self {
        if cols > MAX_CELLS {
            return self;
        }
        // Rows cut into pieces narrower than them keep a cursor for each cell too.
        let cell = if self.max_line < cols { 3 } else { 1 };
        let fit = MAX_CELLS / (cols.max(1) * cell);
        self.rows = Rows::new(rows.min(fit).min(MAX_ROWS), cols, self.max_line);
        self
    }

    /// Feed `text`, whose first code point is at `cursor`; `line(start, text)` is called for
    /// every line it completes (text with its `\n`).
    pub fn feed(&mut self, text: &str, cursor: u64, mut line: impl FnMut(u64, &str)) {
        match self.shape {
            Shape::Raw => self.feed_raw(text, cursor, &mut line),
            Shape::Strip => self.feed_stripped(text, cursor, &mut line),
            Shape::Render => {
                let max_line = self.max_line;
                for (at, c) in (cursor..).zip(text.chars()) {
                    self.rows.feeding(at);
                    self.parser.advance(&mut self.rows, c);
                    if !self.rows.wraps() {
                        // A cursor moved far right stops at the line's limit, as at a
                        // terminal's margin: what it would write lies no further.
                        self.rows.col = self.rows.col.min(max_line);
                        if self.rows.width() >= max_line {
                            self.rows.cut();
                        }
                    }
                    for (start, text) in self.rows.done.drain(..) {
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
            text: built,
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
                let mut end = max_line.saturating_sub(built.len()).max(1);
                while end < rest.len() && !rest.is_char_boundary(end) {
                    end += 1;
                }
                let newline = memchr::memchr(b'\n', &rest.as_bytes()[..end.min(rest.len())]);
                let ends_line = newline.is_some() || end <= rest.len();
                let end = newline.map_or(end.min(rest.len()), |i| i + 1);
                let (piece, after) = rest.split_at(end);
                built.push_str(piece);
                at += count_chars(piece.as_bytes());
                if ends_line {
                    line(start, built);
                    *line_start = None;
                    built.clear();
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
            let room = self.max_line.saturating_sub(self.text.len()).max(1);
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
                        self.text.push_str(rest);
                    }
                    return;
                }
            };
            let piece = &rest[..end];
            let start = self.line_start.take().unwrap_or(at);
            if self.text.is_empty() {
                line(start, piece);
            } else {
                self.text.push_str(piece);
                line(start, &self.text);
                self.text.clear();
            }
            at += count_chars(piece.as_bytes());
            rest = &rest[end..];
        }
    }

    /// The lines being built, each with where it began, left in place: the raw or stripped
    /// line not ended yet, or the rendered rows a program may still change (the last of
    /// them unended).
    pub fn peek(&self) -> Vec<(u64, String)> {
        match self.shape {
            Shape::Raw | Shape::Strip => self
                .line_start
                .map(|start| (start, self.text.clone()))
                .into_iter()
                .collect(),
            Shape::Render => self.rows.lines(),
        }
    }

    /// The lines being built (as `peek`), taken out: the output has ended.
    pub fn finish(&mut self) -> Vec<(u64, String)> {
        match self.shape {
            Shape::Raw | Shape::Strip => self
                .line_start
                .take()
                .map(|start| (start, std::mem::take(&mut self.text)))
                .into_iter()
                .collect(),
            Shape::Render => self.rows.take_lines(),
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
        shaped_on(shape, max_line, 1, pieces)
    }

    /// The same, rendered on a terminal of `rows` rows.
    fn shaped_on(
        shape: Shape,
        max_line: usize,
        rows: usize,
        pieces: &[&str],
    ) -> Vec<(u64, String)> {
        shaped_by(Shaper::new(shape, max_line).on_screen(rows, 80), pieces)
    }

    fn shaped_by(mut shaper: Shaper, pieces: &[&str]) -> Vec<(u64, String)> {
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
        let (mut built, mut start) = (String::new(), None);
        let mut rows = Rows::new(1, usize::MAX, usize::MAX);
        let mut utf8 = [0u8; 4];
        for (at, c) in (0..).zip(text.chars()) {
            if shape == Shape::Strip {
                if stripper.parse(c) {
                    start.get_or_insert(at);
                    built.push(c);
                    if c == '\n' || built.len() >= max_line {
                        lines.push((start.take().unwrap(), std::mem::take(&mut built)));
                    }
                }
                continue;
            }
            rows.feeding(at);
            parser.advance(&mut rows, c.encode_utf8(&mut utf8).as_bytes());
            rows.col = rows.col.min(max_line);
            if rows.width() >= max_line {
                rows.cut();
            }
            lines.append(&mut rows.done);
        }
        if shape == Shape::Strip {
            lines.extend(start.map(|start| (start, built)));
        } else {
            lines.extend(rows.take_lines());
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
                let pieces = super::super::cut_at(&text, &cuts);
                let lines = shaped_by(Shaper::new(shape, max_line), &pieces);
                let whole = shaped_by(Shaper::new(shape, max_line), &[text.as_str()]);
                proptest::prop_assert_eq!(&lines, &whole, "{:?}", shape);
                if shape != Shape::Raw {
                    proptest::prop_assert_eq!(lines, one_by_one(shape, &text, max_line), "{:?}", shape);
                }
            }
            // On a terminal of several rows too, however the text is cut; there the bound
            // only cuts the rows that leave into pieces, in their last state.
            let pieces = super::super::cut_at(&text, &cuts);
            let lines = shaped_on(Shape::Render, max_line, 3, &pieces);
            proptest::prop_assert_eq!(&lines, &shaped_on(Shape::Render, max_line, 3, &[text.as_str()]));
            let unbounded = shaped_on(Shape::Render, 1 << 20, 3, &[text.as_str()]);
            proptest::prop_assert_eq!(texts(&lines).concat(), texts(&unbounded).concat());
            for (_, piece) in &lines {
                proptest::prop_assert!(piece.trim_end_matches('\n').chars().count() <= max_line);
            }
        }
    }

    #[test]
    fn lines_redrawn_from_rows_above_render_as_the_screen_leaves_them() {
        // Three progress lines, each redrawn by moving up over them, then a summary.
        let mut text = String::from("a 0%\nb 0%\nc 0%\n");
        for p in [50, 100] {
            text.push_str(&format!(
                "\x1b[3A\ra {p}%\x1b[K\nb {p}%\x1b[K\nc {p}%\x1b[K\n"
            ));
        }
        text.push_str("done\n");
        let lines = shaped_on(Shape::Render, 4096, 24, &[&text]);
        assert_eq!(
            texts(&lines),
            ["a 100%\n", "b 100%\n", "c 100%\n", "done\n"]
        );
        assert_eq!(lines[0].0, 0);
        // Erased below and drawn again with fewer lines; a saved cursor; the next line.
        let lines = shaped_on(
            Shape::Render,
            4096,
            24,
            &[
                "x\ny\nz\n\x1b[3A\x1b[Jone\n",
                "two\x1b7\x1b[1Ethree\x1b8!\x1bE\x1bE\n",
            ],
        );
        assert_eq!(texts(&lines), ["one\n", "two!\n", "three\n", "\n"]);
        // On one row, moves between rows do nothing, as before.
        let lines = shaped_on(Shape::Render, 1 << 20, 1, &["a\nb\x1b[Ac\n"]);
        assert_eq!(texts(&lines), ["a\n", "bc\n"]);
    }

    #[test]
    fn a_row_leaves_once_the_terminal_has_no_room_for_it() {
        let mut shaper = Shaper::new(Shape::Render, 4096).on_screen(2, 80);
        let mut left = Vec::new();
        shaper.feed("1\n2\n", 0, |_, t| left.push(t.to_owned()));
        // Two rows: `2` and the one the cursor is on.
        assert_eq!(left, ["1\n"]);
        assert_eq!(texts(&shaper.peek()), ["2\n"]);
        // Up as far as the screen goes, onto `2`'s row, and a newline back down.
        shaper.feed("3\x1b[5A4\n", 4, |_, t| left.push(t.to_owned()));
        assert_eq!(left, ["1\n"]);
        assert_eq!(texts(&shaper.finish()), ["24\n", "3"]);
    }

    #[test]
    fn each_piece_begins_where_its_text_was_written() {
        let cursors = |lines: &[(u64, String)]| lines.iter().map(|(at, _)| *at).collect::<Vec<_>>();
        // A tab, whose cell is its own.
        let lines = shaped_on(Shape::Render, 8, 24, &["aaaaaaaaaaaaaaaa\tb\n"]);
        assert_eq!(texts(&lines), ["aaaaaaaa", "aaaaaaaa", "\tb\n"]);
        assert_eq!(cursors(&lines), [0, 8, 16]);
        // Blanks inserted before text move its cursors with it.
        let lines = shaped_on(Shape::Render, 4, 24, &["ABCDEFGHIJKLMNOP\r\x1b[4@\n"]);
        assert_eq!(texts(&lines), ["    ", "ABCD", "EFGH", "IJKL", "MNOP\n"]);
        assert_eq!(cursors(&lines), [0, 0, 4, 8, 12]);
        // A line wrapped onto a second row: that row begins with the code point wrapped.
        let mut shaper = Shaper::new(Shape::Render, 4).on_screen(24, 10);
        let mut lines = Vec::new();
        shaper.feed(&format!("{}\n", "x".repeat(20)), 0, |at, t| {
            lines.push((at, t.to_owned()))
        });
        lines.extend(shaper.finish());
        assert_eq!(cursors(&lines), [0, 4, 8, 10, 14, 18]);
        // Text written before the row's earlier cells: the cursors still grow along it.
        let lines = shaped_on(Shape::Render, 4, 24, &["\x1b[9Gbbbbbbbb\raaaaaaaa\n"]);
        assert_eq!(texts(&lines), ["aaaa", "aaaa", "bbbb", "bbbb\n"]);
        assert!(cursors(&lines).is_sorted(), "{lines:?}");
    }

    #[test]
    fn rendered_rows_hold_a_bounded_number_of_cells() {
        let shaper = Shaper::new(Shape::Render, 1 << 17).on_screen(500, 1 << 17);
        assert_eq!(shaper.rows.height(), MAX_CELLS >> 17);
        // Cut into narrower pieces, each cell's cursor is kept too.
        let shaper = Shaper::new(Shape::Render, 1 << 16).on_screen(500, 1 << 17);
        assert_eq!(shaper.rows.height(), MAX_CELLS / (3 << 17));
        // A terminal of no width is one row cut at the line's bound as it is written.
        let mut shaper = Shaper::new(Shape::Render, 64).on_screen(1, usize::MAX);
        shaper.feed(&format!("{}x", "\x1b[65535C".repeat(100)), 0, |_, _| {});
        assert!(!shaper.rows.wraps() && shaper.rows.width() <= 64);
    }

    #[test]
    fn a_row_redrawn_past_the_bound_comes_out_in_its_last_state() {
        // Rows wider than the bound are cut only as they leave: a progress line redrawn
        // in place is its last state, in pieces, and the next line comes whole.
        let mut text = String::new();
        for i in 0..=1300 {
            text.push_str(&format!("\rprogress {i}"));
        }
        let last = text.len() as u64 - 5;
        text.push_str("\nnext\n");
        let lines = shaped_on(Shape::Render, 8, 24, &[&text]);
        assert_eq!(texts(&lines), ["progress", " 1300\n", "next\n"]);
        // Each piece begins where its first cell was last written; the first, its row.
        assert_eq!((lines[0].0, lines[1].0), (0, last));
        // A row that leaves while the output goes on, cut the same way.
        let lines = shaped_on(Shape::Render, 4, 1, &["abcdefghij\rXY\nz"]);
        assert_eq!(
            lines,
            [(0, "XYcd"), (4, "efgh"), (8, "ij\n"), (14, "z")].map(|(at, t)| (at, t.to_owned()))
        );
    }

    #[test]
    fn nothing_after_the_last_newline_is_no_line() {
        assert!(shaped(Shape::Render, &["a\n"]).len() == 1);
        assert!(shaped(Shape::Raw, &[""]).is_empty());
        assert!(shaped(Shape::Render, &["\x1b[31m"]).is_empty());
    }
}
