//! Rendered output as a terminal's screen keeps it: the last rows written, which a program
//! may still move back to and change (a progress display of several lines redrawn with
//! cursor-up, a line cleared and written again), each a row of cells with the cursor on one.
//! A row leaves once more rows than the terminal has were written after it: no program can
//! reach it from then on, and it is a finished line of the output. What is applied: carriage
//! returns, backspaces, tabs, moves within a line, erase-in-line, moves up and down a row,
//! the next and previous line, erase below, save and restore of the cursor. Moves to an
//! absolute row and clearing the whole screen are not: where the output began on the screen
//! is unknown, and clearing would drop output an agent has yet to read.

use std::collections::VecDeque;

/// Tab stops of a rendered line.
const TAB: usize = 8;
/// A cell that is not text: one a tab printed at the end of a line moves over (the tab
/// itself is kept as text, its cell holds `\t`), or the right half of a wide character.
const FILL: char = '\0';
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
}

impl Row {
    /// The row's text, emptying it: its cells less those that are not text.
    fn take_text(&mut self) -> String {
        self.cells.drain(..).filter(|c| *c != FILL).collect()
    }

    fn text(&self) -> String {
        self.cells.iter().filter(|c| **c != FILL).collect()
    }

    /// Put `c` at column `col`; the column after it.
    fn put(&mut self, col: usize, c: char) -> usize {
        use unicode_width::UnicodeWidthChar;
        let width = if c.width() == Some(2) { 2 } else { 1 };
        let (from, to) = (col, col + width);
        if self.cells.len() < to {
            self.cells.resize(to, ' ');
        }
        // A tab written over is blanks from then on, as the screen shows it.
        for cell in from..to {
            self.expand_tab(cell);
        }
        // A wide character partly overwritten is gone whole, as on a terminal: its other
        // half, outside what is written now, becomes a blank.
        if from > 0 && self.cells[from] == FILL && wide(self.cells[from - 1]) {
            self.cells[from - 1] = ' ';
        }
        if wide(self.cells[to - 1]) && self.cells.get(to) == Some(&FILL) {
            self.cells[to] = ' ';
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
        self.cells[start..end].fill(' ');
    }

    /// A tab at column `col`: kept as text where it moves over nothing; the column of its
    /// stop.
    fn tab(&mut self, col: usize) -> usize {
        let stop = (col / TAB + 1) * TAB;
        if col >= self.cells.len() {
            self.cells.resize(col, ' ');
            self.cells.push('\t');
            self.cells.resize(stop, FILL);
        }
        stop
    }

    /// Erase in line from column `col`: to its end (0), to its start (1), all of it.
    fn erase(&mut self, col: usize, mode: usize) {
        match mode {
            0 => self.cells.truncate(col),
            1 => {
                let end = (col + 1).min(self.cells.len());
                self.cells[..end].fill(' ');
            }
            _ => self.cells.clear(),
        }
    }
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

/// The rows rendered output may still change, and the lines that left them.
pub struct Rows {
    rows: VecDeque<Row>,
    /// The cursor: its row in `rows`, its column.
    row: usize,
    pub col: usize,
    /// How many rows are kept (the terminal's height).
    height: usize,
    /// Rows that have left, so a saved cursor names its row whatever left since.
    gone: u64,
    saved: Option<(u64, usize)>,
    /// Lines that left, with the cursor where each began.
    pub done: Vec<(u64, String)>,
    /// The cursor of the code point being fed.
    at: u64,
}

impl Rows {
    pub fn new(height: usize) -> Self {
        Rows {
            rows: VecDeque::from([Row::default()]),
            row: 0,
            col: 0,
            height: height.clamp(1, MAX_ROWS),
            gone: 0,
            saved: None,
            done: Vec::new(),
            at: 0,
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

    /// Cells on the cursor's row.
    pub fn width(&self) -> usize {
        self.rows[self.row].cells.len()
    }

    /// The cursor's row is as long as a line may be: every row up to it leaves, that row
    /// as a piece of a line (no newline), and the rest of the line goes on in a fresh row.
    /// Rows below the cursor leave after it.
    pub fn cut(&mut self) {
        let row = self.row;
        let at = self.at;
        let rows = std::mem::take(&mut self.rows);
        let count = rows.len() as u64;
        for (i, mut r) in rows.into_iter().enumerate() {
            let start = r.start.unwrap_or(at);
            if i < row {
                let mut text = r.take_text();
                text.push('\n');
                self.done.push((start, text));
            } else if i == row {
                self.done.push((start, r.take_text()));
            } else if r.ended || !r.cells.is_empty() {
                let mut text = r.take_text();
                text.push('\n');
                self.done.push((start, text));
            }
        }
        self.gone += count;
        self.rows.push_back(Row::default());
        self.row = 0;
        self.col = 0;
        self.saved = None;
    }

    /// The lines the rows hold now, with the cursor where each began: every row up to the
    /// last that is a line (one a newline ended, or one with text), each ended by a newline
    /// but the last, unless a newline ended it too.
    pub fn lines(&self) -> Vec<(u64, String)> {
        let Some(last) = self
            .rows
            .iter()
            .rposition(|r| r.ended || !r.cells.is_empty())
        else {
            return Vec::new();
        };
        self.rows
            .iter()
            .take(last + 1)
            .enumerate()
            .map(|(i, r)| {
                let mut text = r.text();
                if i < last || r.ended {
                    text.push('\n');
                }
                (r.start.unwrap_or(self.at), text)
            })
            .collect()
    }

    /// The lines the rows hold (as `lines`), which leave them: the rows start afresh.
    pub fn take_lines(&mut self) -> Vec<(u64, String)> {
        let lines = self.lines();
        *self = Rows::new(self.height);
        lines
    }

    /// A newline: the cursor to the start of the next row, a new one at the bottom.
    fn newline(&mut self) {
        self.col = 0;
        self.rows[self.row].ended = true;
        self.down(1);
    }

    /// The cursor `n` rows down; past the bottom, new rows, and the top ones leave. A new
    /// row the cursor passes over begins where the move is; the one it stops on, at the
    /// next code point fed.
    fn down(&mut self, n: usize) {
        for step in 1..=n {
            self.row += 1;
            if self.row == self.rows.len() {
                let start = (step < n).then_some(self.at);
                self.rows.push_back(Row {
                    start,
                    ..Row::default()
                });
                if self.rows.len() > self.height {
                    let mut top = self.rows.pop_front().unwrap_or_default();
                    let mut text = top.take_text();
                    text.push('\n');
                    self.done.push((top.start.unwrap_or(self.at), text));
                    self.row -= 1;
                    self.gone += 1;
                }
            }
        }
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
            row.ended = false;
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
        let col = self.col;
        self.col = self.rows[self.row].put(col, c);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' | 0x0b | 0x0c => self.newline(),
            b'\r' => self.col = 0,
            0x08 => self.col = self.col.saturating_sub(1),
            b'\t' => {
                let col = self.col;
                self.col = self.rows[self.row].tab(col);
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
            b'D' => self.down(1),
            b'E' => self.newline(),
            _ => {}
        }
    }

    fn csi_dispatch(&mut self, params: &vte::Params, intermediates: &[u8], _: bool, action: char) {
        if !intermediates.is_empty() {
            return;
        }
        let row = &mut self.rows[self.row];
        match action {
            'K' => row.erase(self.col, param(params, 0)),
            // Erase characters from the cursor on.
            'X' => {
                let end = (self.col + param(params, 1)).min(row.cells.len());
                if self.col < end {
                    row.cells[self.col..end].fill(' ');
                }
            }
            'C' => self.col += param(params, 1),
            'D' => self.col = self.col.saturating_sub(param(params, 1)),
            'G' => self.col = param(params, 1) - 1,
            'A' => self.up(param(params, 1)),
            'B' => self.down(param(params, 1).min(self.height)),
            'E' => {
                self.down(param(params, 1).min(self.height));
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
    }
}
