//! Rendered output as a terminal's screen keeps it: the last rows written, which a program
//! may still move back to and change (a progress display of several lines redrawn with
//! cursor-up, a line cleared and written again), each a row of cells as wide as the
//! terminal, with the cursor on one. A line wider than the terminal wraps onto the next row,
//! as on the screen (so a program that counts the rows its lines took moves up over the
//! right ones), and comes out as one line. A row leaves once more rows than the terminal has
//! were written after it: no program can reach it from then on, and it is a finished line of
//! the output. What is applied: carriage returns, backspaces, tabs, moves within a line
//! (stopping at its last column), erase-in-line, erasing, deleting and inserting
//! characters, moves up and down a row (down as far as the last row written), the next and
//! previous line, index and reverse index, erase below, save and restore of the cursor.
//! Moves to an absolute row and clearing the whole screen are not: where the output began on
//! the screen is unknown, and clearing would drop output an agent has yet to read.

use std::collections::VecDeque;

/// Tab stops of a rendered line.
const TAB: usize = 8;
/// A cell that is not text: one a tab printed at the end of a line moves over (the tab
/// itself is kept as text, its cell holds `\t`), or the right half of a wide character.
const FILL: char = '\0';
/// A cell nothing was written to, or erased: a blank in the text, but no text for the
/// terminal's wrapping (a written space is).
const BLANK: char = '\u{1}';
/// Rows kept at most, whatever the terminal's height.
pub const MAX_ROWS: usize = 500;

/// One row of cells, as on a terminal: a wide character (CJK, most emoji) takes two cells,
/// as the terminal's screen has it, and any other code point one.
#[derive(Default)]
struct Row {
    cells: Vec<char>,
    /// The cursor of the first code point fed while the cursor was on this row.
    start: Option<u64>,
    /// A newline moved the cursor off it: it is a line of the output, blank or not.
    ended: bool,
    /// Its text went on in the next row (the terminal wrapped it at its width): the two are
    /// one line of the output.
    wrapped: bool,
    /// When rows come out in pieces narrower than the terminal: the cursor of the code
    /// point that last wrote each cell, so each piece begins where its text was written.
    written: Option<Vec<u64>>,
}

impl Row {
    /// The row's text: its cells less those that are not text, blank ones as spaces.
    fn text(&self) -> String {
        let mut text = String::with_capacity(self.cells.len() + 1);
        text.extend(self.cells.iter().filter(|c| **c != FILL).map(|c| shown(*c)));
        text
    }

    /// Put `c`, `width` columns wide, at column `col`; the column after it.
    fn put(&mut self, col: usize, c: char, width: usize) -> usize {
        let (from, to) = (col, col + width);
        if self.cells.len() < to {
            self.cells.resize(to, BLANK);
        }
        // A tab written over is blanks from then on, as the screen shows it.
        for cell in from..to {
            self.expand_tab(cell);
        }
        // A wide character partly overwritten is gone whole, as on a terminal: its other
        // half, outside what is written now, becomes a blank.
        if from > 0 && wide(self.cells[from - 1]) {
            self.cells[from - 1] = BLANK;
        }
        if wide(self.cells[to - 1]) && self.cells.get(to) == Some(&FILL) {
            self.cells[to] = BLANK;
        }
        self.cells[from] = c;
        if width == 2 {
            self.cells[from + 1] = FILL;
        }
        to
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
        self.cells[start..end].fill(BLANK);
    }

    /// Every tab kept as text becomes the blanks it moved over (before cells shift, which
    /// would move its stop).
    fn expand_tabs(&mut self) {
        while let Some(at) = self.cells.iter().position(|c| *c == '\t') {
            self.expand_tab(at);
        }
    }

    /// A tab at column `col`, on a terminal `cols` wide, fed at `at`: kept as text where it
    /// moves over nothing; the column of its stop (the last column at most).
    fn tab(&mut self, col: usize, cols: usize, at: u64) -> usize {
        let stop = ((col / TAB + 1) * TAB).min(cols.saturating_sub(1));
        if stop <= col {
            return col;
        }
        if col >= self.cells.len() {
            self.cells.resize(col, BLANK);
            self.cells.push('\t');
            self.cells.resize(stop, FILL);
            self.track(at);
        }
        stop
    }

    /// With cursors kept: as many as there are cells, those of new cells `at`.
    fn track(&mut self, at: u64) {
        if let Some(written) = &mut self.written {
            written.resize(self.cells.len(), at);
        }
    }

    /// A wide character across the boundary before column `at` (its halves on either
    /// side) is gone whole, as when part of it is written over.
    fn split_wide(&mut self, at: usize) {
        if at > 0 && self.cells.get(at - 1).is_some_and(|c| wide(*c)) {
            self.cells[at - 1] = BLANK;
            if let Some(half) = self.cells.get_mut(at).filter(|c| **c == FILL) {
                *half = BLANK;
            }
        }
    }

    /// Erase in line from column `col`: to its end (0), to its start (1), all of it. A tab
    /// or a wide character cut by the erasure becomes blanks first.
    fn erase(&mut self, col: usize, mode: usize) {
        if col < self.cells.len() {
            self.expand_tab(col);
        }
        self.split_wide(if mode == 1 { col + 1 } else { col });
        match mode {
            // At the row's end (a wrap pending), nothing is erased.
            0 if col >= self.cells.len() => return,
            0 => self.cells.truncate(col),
            1 => {
                let end = (col + 1).min(self.cells.len());
                self.cells[..end].fill(BLANK);
                if end < self.cells.len() {
                    return;
                }
            }
            _ => self.cells.clear(),
        }
        // Its end erased, the row no longer runs on into the next.
        self.wrapped = false;
    }

    /// Blank `n` cells from column `col` on.
    fn erase_chars(&mut self, col: usize, n: usize) {
        let end = (col + n).min(self.cells.len());
        if col < end {
            self.expand_tab(col);
            self.expand_tab(end - 1);
            self.split_wide(col);
            self.split_wide(end);
            self.cells[col..end].fill(BLANK);
            if end == self.cells.len() {
                self.wrapped = false;
            }
        }
    }

    /// Delete `n` cells at column `col`, the rest of the row moving left.
    fn delete_chars(&mut self, col: usize, n: usize) {
        // The row's end moves: it no longer runs on into the next.
        self.wrapped = false;
        if col < self.cells.len() {
            self.expand_tabs();
            let end = (col + n).min(self.cells.len());
            self.split_wide(col);
            self.split_wide(end);
            self.cells.drain(col..end);
            if let Some(written) = &mut self.written {
                written.drain(col..end.min(written.len()));
            }
        }
    }

    /// Insert `n` blanks at column `col`, the rest of the row moving right; what goes past
    /// the row's last column (`cols` wide) is gone.
    fn insert_chars(&mut self, col: usize, n: usize, cols: usize, at: u64) {
        self.wrapped = false;
        if col < self.cells.len() {
            self.expand_tabs();
            let n = n.min(self.cells.len() - col);
            self.cells.splice(col..col, std::iter::repeat_n(BLANK, n));
            if let Some(written) = self.written.as_mut().filter(|w| col <= w.len()) {
                written.splice(col..col, std::iter::repeat_n(at, n));
            }
            self.cells.truncate(cols);
            self.split_wide(cols.saturating_sub(1) + 1);
            if self.cells.last().is_some_and(|c| wide(*c)) {
                self.cells.pop();
                self.cells.push(BLANK);
            }
        }
    }

    /// Its text as a line of the output: ended by a newline unless it goes on in the next.
    fn line(&self, newline: bool) -> String {
        let mut text = self.text();
        if newline && !self.wrapped {
            text.push('\n');
        }
        text
    }

    /// Its line (as `line`) in pieces of at most `max` code points, the last with the
    /// newline, into `out`: the first with the row's cursor, each other with the earliest
    /// cursor that last wrote a cell of it or after it, `next` (where the next row begins)
    /// at most. So cursors grow along the rows, as the rows' own do, and text written in
    /// order gets its own.
    fn pieces(&self, newline: bool, max: usize, next: u64, out: &mut Vec<(u64, String)>) {
        let start = self.start.unwrap_or(next);
        let (Some(written), true) = (&self.written, self.cells.len() > max) else {
            out.push((start, self.line(newline)));
            return;
        };
        // The earliest cursor of each cell and those after it.
        let mut earliest = vec![start; self.cells.len()];
        let mut least = next.max(start);
        for i in (0..self.cells.len()).rev() {
            least = least.min(written.get(i).copied().unwrap_or(start).max(start));
            earliest[i] = least;
        }
        let mut piece = (start, String::new());
        let mut count = 0;
        for (i, c) in self.cells.iter().enumerate().filter(|(_, c)| **c != FILL) {
            if count == max {
                out.push(std::mem::replace(&mut piece, (earliest[i], String::new())));
                count = 0;
            }
            piece.1.push(shown(*c));
            count += 1;
        }
        if newline && !self.wrapped {
            piece.1.push('\n');
        }
        out.push(piece);
    }
}

/// A cell of text as the screen shows it: a blank one as a space.
fn shown(c: char) -> char {
    if c == BLANK { ' ' } else { c }
}

fn wide(c: char) -> bool {
    use unicode_width::UnicodeWidthChar;
    !c.is_ascii() && c.width() == Some(2)
}

fn param(params: &vte::Params, default: usize) -> usize {
    match params.iter().next().and_then(|p| p.first()).copied() {
        Some(0) | None => default,
        Some(n) => usize::from(n),
    }
}

/// The rows rendered output may still change, and the lines that left them.
pub struct Rows {
    rows: VecDeque<Row>,
    /// The cursor: its row in `rows`, its column.
    row: usize,
    pub col: usize,
    /// How many rows are kept (the terminal's height), and how wide they are.
    height: usize,
    cols: usize,
    /// Rows that have left, so a saved cursor names its row whatever left since.
    gone: u64,
    saved: Option<(u64, usize)>,
    /// Lines that left, with the cursor where each began, in pieces of at most `piece`
    /// code points.
    pub done: Vec<(u64, String)>,
    piece: usize,
    /// The cursor of the code point being fed.
    at: u64,
}

impl Rows {
    /// The rows of a terminal `height` rows high and `cols` wide, whose lines come out in
    /// pieces of at most `piece` code points.
    pub fn new(height: usize, cols: usize, piece: usize) -> Self {
        let mut rows = Rows {
            rows: VecDeque::new(),
            row: 0,
            col: 0,
            height: height.clamp(1, MAX_ROWS),
            cols: cols.max(2),
            gone: 0,
            saved: None,
            done: Vec::new(),
            piece: piece.max(1),
            at: 0,
        };
        rows.rows.push_back(rows.fresh(Vec::new()));
        rows
    }

    /// A new row, with the room of `cells`.
    fn fresh(&self, mut cells: Vec<char>) -> Row {
        cells.clear();
        Row {
            cells,
            // A row may be cut into pieces only when they are narrower than it.
            written: (self.piece < self.cols).then(Vec::new),
            ..Row::default()
        }
    }

    #[cfg(test)]
    pub fn height(&self) -> usize {
        self.height
    }

    /// The code point at `at` is about to be fed.
    pub fn feeding(&mut self, at: u64) {
        self.at = at;
        self.rows[self.row].start.get_or_insert(at);
    }

    /// Whether rows wrap at a terminal's width (else one row of unbounded width).
    pub fn wraps(&self) -> bool {
        self.cols != usize::MAX
    }

    /// Cells on the cursor's row.
    pub fn width(&self) -> usize {
        self.rows[self.row].cells.len()
    }

    /// The cursor's row is as long as a line may be: every row up to it leaves, that row
    /// as a piece of a line (no newline, unless rows below it leave too), and the rest of
    /// the line goes on in a fresh row.
    pub fn cut(&mut self) {
        let lines = self.lines_as(Some(self.row));
        self.done.extend(lines);
        self.gone += self.rows.len() as u64;
        self.rows.clear();
        self.rows.push_back(self.fresh(Vec::new()));
        self.row = 0;
        self.col = 0;
        self.saved = None;
    }

    /// The lines the rows hold now, with the cursor where each began: every row up to the
    /// last that is a line (one a newline ended, or one with text), each ended by a newline
    /// but the last (unless a newline ended it too) and those the terminal wrapped.
    pub fn lines(&self) -> Vec<(u64, String)> {
        self.lines_as(None)
    }

    /// `lines`, with row `piece` (cut at the line's bound) ended only by the rows after it.
    fn lines_as(&self, piece: Option<usize>) -> Vec<(u64, String)> {
        // Above the cursor, a row a newline ended is a line even when blank; from the
        // cursor's row down, only a row with text is (a blank one there is where the next
        // output goes).
        let is_line = |(i, r): (usize, &Row)| !r.cells.is_empty() || (r.ended && i < self.row);
        let Some(last) = self.rows.iter().enumerate().rposition(is_line).max(piece) else {
            return Vec::new();
        };
        let mut lines = Vec::with_capacity(last + 1);
        for (i, r) in self.rows.iter().take(last + 1).enumerate() {
            let newline = i < last || (r.ended && piece != Some(i));
            r.pieces(newline, self.piece, self.start_of(i + 1), &mut lines);
        }
        lines
    }

    /// Where row `i` begins: the cursor of the first code point fed on it (the one being fed,
    /// for a row nothing was fed on yet, or none).
    fn start_of(&self, i: usize) -> u64 {
        self.rows.get(i).and_then(|r| r.start).unwrap_or(self.at)
    }

    /// The lines the rows hold (as `lines`), which leave them: the rows start afresh.
    pub fn take_lines(&mut self) -> Vec<(u64, String)> {
        let lines = self.lines();
        *self = Rows::new(self.height, self.cols, self.piece);
        lines
    }

    /// A newline: the cursor to the start of the next row, a new one at the bottom.
    fn newline(&mut self) {
        self.col = 0;
        self.rows[self.row].ended = true;
        self.index();
    }

    /// The cursor a row down, at its column; below the last row, a new one, and past the
    /// terminal's height the top one leaves.
    fn index(&mut self) {
        self.row += 1;
        if self.row < self.rows.len() {
            return;
        }
        let mut cells = Vec::new();
        if self.rows.len() == self.height {
            let top = self.rows.pop_front().unwrap_or_default();
            top.pieces(true, self.piece, self.start_of(0), &mut self.done);
            self.row -= 1;
            self.gone += 1;
            // The new row takes the old one's room.
            cells = top.cells;
        }
        let row = self.fresh(cells);
        self.rows.push_back(row);
    }

    /// The cursor `n` rows down, as far as the last row: a terminal's cursor stops at its
    /// bottom row, and below the last row written the screen's blank rows are out of the
    /// output's reach.
    fn down(&mut self, n: usize) {
        self.row = (self.row + n).min(self.rows.len() - 1);
    }

    fn up(&mut self, n: usize) {
        self.row = self.row.saturating_sub(n);
    }

    /// Erase from the cursor to the end of the screen: the rest of its row, and the rows
    /// below, which are no lines any more.
    fn erase_below(&mut self) {
        let col = self.col;
        self.rows[self.row].erase(col, 0);
        for row in self.rows.iter_mut().skip(self.row + 1) {
            row.cells.clear();
            row.track(0);
            row.ended = false;
            row.wrapped = false;
        }
    }

    fn save(&mut self) {
        self.saved = Some((self.gone + self.row as u64, self.col));
    }

    fn restore(&mut self) {
        if let Some((row, col)) = self.saved {
            let row = row.saturating_sub(self.gone);
            self.row =
                usize::try_from(row).map_or(self.rows.len() - 1, |r| r.min(self.rows.len() - 1));
            self.col = col;
        }
    }
}

impl vte::Perform for Rows {
    fn print(&mut self, c: char) {
        let width = if wide(c) { 2 } else { 1 };
        if self.col + width > self.cols {
            // No room left in the row: the terminal goes on in the next, the two one line
            // when the row's last column holds text (as the emulator has it). A wide
            // character that does not fit beside the last column leaves that column blank,
            // which is no text of the line: the program wrote one line (vt100 makes it two).
            let row = &mut self.rows[self.row];
            if self.col < self.cols {
                row.wrapped = true;
                if row.cells.len() > self.col && row.cells.last() == Some(&BLANK) {
                    row.cells.pop();
                    row.track(self.at);
                }
            } else {
                row.wrapped = row.cells.get(self.cols - 1).is_some_and(|c| *c != BLANK);
            }
            self.col = 0;
            self.index();
            // The row the line goes on in begins with this code point.
            self.rows[self.row].start.get_or_insert(self.at);
        }
        let (col, at) = (self.col, self.at);
        let row = &mut self.rows[self.row];
        self.col = row.put(col, c, width);
        row.track(at);
        if let Some(written) = &mut row.written {
            written[col..self.col].fill(at);
        }
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' | 0x0b | 0x0c => self.newline(),
            b'\r' => self.col = 0,
            0x08 => self.col = self.col.saturating_sub(1),
            b'\t' => {
                let col = self.col;
                self.col = self.rows[self.row].tab(col, self.cols, self.at);
            }
            _ => {}
        }
    }

    fn esc_dispatch(&mut self, intermediates: &[u8], _: bool, byte: u8) {
        if !intermediates.is_empty() {
            return;
        }
        match byte {
            b'7' => self.save(),
            b'8' => self.restore(),
            // Reverse index: a row up (at the top a terminal scrolls down, which moves no
            // text of the output).
            b'M' => self.up(1),
            // Index and next line: a row down, at the column, or at the line's start.
            b'D' => self.index(),
            b'E' => self.newline(),
            _ => {}
        }
    }

    fn csi_dispatch(&mut self, params: &vte::Params, intermediates: &[u8], _: bool, action: char) {
        if !intermediates.is_empty() {
            return;
        }
        let row = &mut self.rows[self.row];
        let last = self.cols - 1;
        match action {
            'K' => row.erase(self.col, param(params, 0)),
            'X' => row.erase_chars(self.col, param(params, 1)),
            'P' => row.delete_chars(self.col, param(params, 1)),
            '@' => row.insert_chars(self.col, param(params, 1), self.cols, self.at),
            'C' => self.col = (self.col + param(params, 1)).min(last),
            'D' => self.col = self.col.saturating_sub(param(params, 1)),
            'G' => self.col = (param(params, 1) - 1).min(last),
            'A' => self.up(param(params, 1)),
            'B' => self.down(param(params, 1)),
            'E' => {
                self.down(param(params, 1));
                self.col = 0;
            }
            'F' => {
                self.up(param(params, 1));
                self.col = 0;
            }
            'J' if param(params, 0) == 0 => self.erase_below(),
            's' if params.is_empty() => self.save(),
            'u' if params.is_empty() => self.restore(),
            _ => {}
        }
        let at = self.at;
        self.rows[self.row].track(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of `text` rendered on a terminal `height` rows high and `cols` wide.
    fn rendered(height: usize, cols: usize, text: &str) -> Vec<String> {
        let mut rows = Rows::new(height, cols, usize::MAX);
        let mut parser = vte::Parser::<0>::default();
        for (at, c) in (0..).zip(text.chars()) {
            rows.feeding(at);
            let mut utf8 = [0u8; 4];
            parser.advance(&mut rows, c.encode_utf8(&mut utf8).as_bytes());
        }
        let mut lines: Vec<String> = rows.done.drain(..).map(|(_, t)| t).collect();
        lines.extend(rows.take_lines().into_iter().map(|(_, t)| t));
        lines
    }

    #[test]
    fn a_line_wider_than_the_terminal_wraps_and_comes_out_whole() {
        // Two rows of 10 for the long line: moving up three erases it and the one before.
        let text = format!(
            "keep\nabove\n{}\nstatus\r\x1b[2K\x1b[1A\x1b[2K\x1b[1A\x1b[2K\x1b[1A\x1b[2Kfinal\n",
            "x".repeat(15)
        );
        assert_eq!(rendered(24, 10, &text), ["keep\n", "final\n"]);
        assert_eq!(rendered(24, 10, &"y".repeat(25)).concat(), "y".repeat(25));
        // A wide character that does not fit the last column goes to the next row whole,
        // the line unbroken.
        assert_eq!(rendered(24, 5, "abcd日\n"), ["abcd", "日\n"]);
        assert_eq!(rendered(24, 6, "x日日日\n").concat(), "x日日日\n");
        // A space written in the last column is text: the row runs on into the next.
        assert_eq!(rendered(24, 4, "abc def\n").concat(), "abc def\n");
        // A newline right after the last column ends the row without a blank one.
        assert_eq!(rendered(24, 4, "abcd\nef\n"), ["abcd\n", "ef\n"]);
    }

    #[test]
    fn moves_stop_where_the_terminal_stops_them() {
        // Down stops at the last row written; right at the last column.
        let seq: String = (1..=30).map(|n| format!("{n}\n")).collect();
        let lines = rendered(24, 80, &format!("{seq}\x1b[99A\x1b[99BX\n"));
        assert_eq!(lines.last().map(String::as_str), Some("X\n"));
        assert_eq!(lines.len(), 31);
        let lines = rendered(24, 20, "left\x1b[999C\x1b[5Dright\n");
        assert_eq!(lines, [format!("left{}right\n", " ".repeat(10))]);
    }

    #[test]
    fn erasing_deleting_and_inserting_within_a_row() {
        assert_eq!(
            rendered(24, 80, "a\tb\tc\r\x1b[12C\x1b[KEND\n"),
            ["a\tb   END\n"]
        );
        assert_eq!(
            rendered(24, 80, "abcdef\r\x1b[2P\n123456\r\x1b[2@\n"),
            ["cdef\n", "  123456\n"]
        );
    }

    #[test]
    fn a_cut_row_with_rows_below_is_a_line_of_its_own() {
        let mut rows = Rows::new(5, 80, usize::MAX);
        let mut parser = vte::Parser::<0>::default();
        let mut lines = Vec::new();
        for (at, c) in (0..).zip("a\nb\n\x1b[2A\rXXXXXXXXXYZ\n".chars()) {
            rows.feeding(at);
            let mut utf8 = [0u8; 4];
            parser.advance(&mut rows, c.encode_utf8(&mut utf8).as_bytes());
            if rows.width() >= 8 {
                rows.cut();
            }
            lines.extend(rows.done.drain(..).map(|(_, t)| t));
        }
        lines.extend(rows.take_lines().into_iter().map(|(_, t)| t));
        assert_eq!(lines, ["XXXXXXXX\n", "b\n", "XYZ\n"]);
    }

    /// The screen a real emulator (vt100) shows for `text` (a program's `\n` reaching it as
    /// CR LF, as a terminal's output processing sends it): its rows, those it wrapped joined,
    /// trailing blanks and blank rows at the end left out.
    fn emulated(height: usize, cols: usize, text: &str) -> Vec<String> {
        let mut parser = vte_reference(height, cols);
        parser.process(text.replace('\n', "\r\n").as_bytes());
        let screen = parser.screen();
        let mut lines: Vec<String> = Vec::new();
        let mut joined = String::new();
        for (i, row) in screen.rows(0, cols as u16).enumerate() {
            joined.push_str(&row);
            if !screen.row_wrapped(i as u16) {
                lines.push(std::mem::take(&mut joined));
            }
        }
        lines.push(joined);
        trimmed(lines)
    }

    fn vte_reference(height: usize, cols: usize) -> vt100::Parser {
        let size = |n: usize| std::num::NonZeroU16::new(n as u16).unwrap();
        vt100::Parser::new(size(height), size(cols), 0)
    }

    fn trimmed(mut lines: Vec<String>) -> Vec<String> {
        for line in &mut lines {
            let end = line.trim_end_matches([' ', '\n']).len();
            line.truncate(end);
        }
        while lines.last().is_some_and(String::is_empty) {
            lines.pop();
        }
        lines
    }

    proptest::proptest! {
        /// Output that stays on one screen renders as the emulator shows it: text, line
        /// ends, returns, backspaces, moves up, left and right, erasures, deletions and
        /// insertions within a row and below, wrapping at the terminal's width. (Wide
        /// characters are left out: where a program edits inside one, emulators differ, and
        /// vt100 keeps what a terminal like xterm erases.)
        #[test]
        fn rendered_rows_are_what_an_emulator_shows(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    "a", "bc", " ", "\n", "\r", "\x08", "\x1b[A", "\x1b[2A", "\x1b[C",
                    "\x1b[3C", "\x1b[D", "\x1b[K", "\x1b[1K", "\x1b[2K", "\x1b[J", "\x1b[P",
                    "\x1b[@", "\x1b[X", "\x1b7", "\x1b8", "\x1b[F",
                ]),
                0..40,
            ),
        ) {
            // A restore with nothing saved goes to the screen's top, which is unknown here.
            let text = format!("\x1b7{}", pieces.concat());
            let ours = rendered(60, 8, &text).concat();
            let ours = trimmed(ours.split('\n').map(str::to_owned).collect());
            proptest::prop_assert_eq!(ours, emulated(60, 8, &text), "{:?}", text);
        }
    }
}
