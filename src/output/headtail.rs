//! The head and tail of a long output, kept as it arrives. An output that fits the budget is
//! kept whole. Once it outgrows it, its first lines that fit a quarter of the budget are the
//! head (or, when its first line alone is longer, that line's first pieces), its last lines
//! that fit the rest are the tail (a long line among them may be cut between its pieces),
//! and what lies between is counted (bytes, lines, and the cursor range that holds exactly
//! it). Text comes in pieces: lines, and lines longer than `piece_bytes` cut into pieces of
//! that size, each with the cursor of its first code point; only whole pieces are left out,
//! so the range holds the output the omitted pieces were shaped from. (Rendered output is
//! the exception: a row a program went back up to and changed holds its last state, which
//! may have been written after the range.) Memory stays within the budget whatever the
//! output, and a flood cannot evict the head.

use std::collections::VecDeque;

use serde::Serialize;

/// Where the buffer no longer holds the start of an omitted range, the range named begins
/// this many code points past the oldest it holds: the output that follows the command at
/// once (a terminal shell's prompt) evicts as much again from a full buffer.
const EVICTION_ROOM: u64 = 512;

/// What was left out between the head and the tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Omitted {
    pub bytes: u64,
    pub lines: u64,
    /// The omitted text lies in the session's output from here...
    pub start_cursor: u64,
    /// ...to here (where the tail begins).
    pub end_cursor: u64,
}

impl Omitted {
    /// How much was left out, in words: its lines, or, when it lies within one line (a
    /// long line cut between its pieces), what part of a line.
    fn amount(&self) -> String {
        match self.lines {
            0 => format!("{} bytes of a line", self.bytes),
            1 => format!("1 line ({} bytes)", self.bytes),
            n => format!("{n} lines ({} bytes)", self.bytes),
        }
    }
}

#[derive(Debug, Clone)]
pub struct HeadTail {
    max_bytes: usize,
    head_max: usize,
    tail_max: usize,
    head: String,
    /// The output outgrew the budget and its head is taken: everything from then on goes to
    /// the tail.
    head_closed: bool,
    /// The tail's text is `tail_text[tail_from..]`; its pieces in `tail`. Dropping a piece
    /// from the front only moves `tail_from` (the text is compacted once half of it is
    /// dropped), so a flood of short lines costs no allocation per line. Until the head is
    /// taken, the tail holds the whole output.
    tail_text: String,
    tail_from: usize,
    tail: VecDeque<Piece>,
    omitted: Option<Omitted>,
}

/// A piece of the tail: where it begins in the output, and its length in bytes.
#[derive(Debug, Clone, Copy)]
struct Piece {
    cursor: u64,
    len: usize,
}

/// The text kept, and what was left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub text: String,
    pub omitted: Option<Omitted>,
}

/// The longest piece (in bytes, or a rendered line's code points) a line should come in for
/// a budget of `max_bytes`: an eighth of it. A first line longer than the head still fills
/// it (two pieces), and a piece of four-byte characters still fits the tail. (Rendered rows
/// are cut only once no program can reach them, so a line redrawn in place comes in pieces
/// of its last state.)
pub fn piece_bytes(max_bytes: usize) -> usize {
    (max_bytes / 8).max(1)
}

impl HeadTail {
    /// Keep at most `max_bytes` bytes of text: all of it when it fits, else a quarter as the
    /// head and the rest as the tail.
    pub fn new(max_bytes: usize) -> Self {
        let head_max = max_bytes / 4;
        HeadTail {
            max_bytes,
            head_max,
            tail_max: max_bytes - head_max,
            head: String::new(),
            head_closed: false,
            tail_text: String::new(),
            tail_from: 0,
            tail: VecDeque::new(),
            omitted: None,
        }
    }

    fn tail_bytes(&self) -> usize {
        self.tail_text.len() - self.tail_from
    }

    fn ends_line(&self, from: usize, piece: &Piece) -> bool {
        self.tail_text.as_bytes()[from + piece.len - 1] == b'\n'
    }

    /// Add a piece of text that began at `cursor`: a line with its `\n`, a piece of a long
    /// line (at most about `piece_bytes` of the budget), or the last, unterminated line.
    pub fn push(&mut self, cursor: u64, text: &str) {
        if text.is_empty() {
            return;
        }
        self.tail_text.push_str(text);
        self.tail.push_back(Piece {
            cursor,
            len: text.len(),
        });
        if !self.head_closed {
            if self.tail_bytes() <= self.max_bytes {
                return;
            }
            self.take_head();
        }
        self.trim();
        if self.tail_from > self.tail_text.len() / 2 {
            self.tail_text.drain(..self.tail_from);
            self.tail_from = 0;
        }
    }

    /// The output just outgrew the budget: its first whole lines that fit the head's share
    /// become the head, or, when not even its first line fits, that line's first pieces.
    fn take_head(&mut self) {
        self.head_closed = true;
        let (mut fit, mut whole, mut bytes, mut from) = (0, 0, 0, self.tail_from);
        for piece in &self.tail {
            if bytes + piece.len > self.head_max {
                break;
            }
            bytes += piece.len;
            fit += 1;
            if self.ends_line(from, piece) {
                whole = fit;
            }
            from += piece.len;
        }
        let take = if whole > 0 { whole } else { fit };
        for piece in self.tail.drain(..take) {
            let from = self.tail_from;
            self.head.push_str(&self.tail_text[from..from + piece.len]);
            self.tail_from += piece.len;
        }
    }

    /// Leave out pieces from the front of the tail until it fits its share. Its last piece
    /// stays, so the range always ends where a kept piece begins: pieces of
    /// `piece_bytes(max_bytes)` fit the share (for any budget a caller allows).
    fn trim(&mut self) {
        while self.tail_bytes() > self.tail_max && self.tail.len() > 1 {
            self.drop_front();
        }
    }

    /// Leave out the tail's first piece (its caller keeps one after it).
    fn drop_front(&mut self) {
        let Some(piece) = self.tail.pop_front() else {
            return;
        };
        let lines = u64::from(self.ends_line(self.tail_from, &piece));
        self.tail_from += piece.len;
        let next = self.tail.front().map_or(piece.cursor, |p| p.cursor);
        let omitted = self.omitted.get_or_insert(Omitted {
            bytes: 0,
            lines: 0,
            start_cursor: piece.cursor,
            end_cursor: next,
        });
        omitted.bytes += piece.len as u64;
        omitted.lines += lines;
        omitted.end_cursor = next;
    }

    /// The text so far: the head, one line naming what was omitted (if anything) and where
    /// to read it, the tail. The session's buffer holds output from cursor `held_from` on:
    /// the line names only what it still holds of the omitted range, from `EVICTION_ROOM`
    /// code points on.
    pub fn kept(&self, held_from: u64) -> Kept {
        let mut text = String::with_capacity(self.head.len() + self.tail_bytes() + 100);
        text.push_str(&self.head);
        if let Some(o) = &self.omitted {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            let amount = o.amount();
            let (from, to) = (o.start_cursor, o.end_cursor);
            // Past the output that follows at once (a terminal shell's prompt), which
            // evicts as much again from a full buffer.
            let still = held_from.saturating_add(EVICTION_ROOM);
            text.push_str(&if held_from <= from {
                format!("[... {amount} omitted: terminal_read from cursor {from} to {to} ...]\n")
            } else if still < to {
                format!(
                    "[... {amount} omitted; the buffer no longer holds its start: \
                     terminal_read from cursor {still} to {to} ...]\n"
                )
            } else {
                format!("[... {amount} omitted; the buffer no longer holds it ...]\n")
            });
        }
        text.push_str(&self.tail_text[self.tail_from..]);
        Kept {
            text,
            omitted: self.omitted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{Shape, Shaper};

    fn keep(max: usize, lines: &[&str]) -> Kept {
        let mut kept = HeadTail::new(max);
        let mut cursor = 0;
        for line in lines {
            kept.push(cursor, line);
            cursor += line.chars().count() as u64;
        }
        kept.kept(0)
    }

    #[test]
    fn short_output_is_kept_whole() {
        let kept = keep(64, &["a\n", "b\n", "c"]);
        assert_eq!(kept.text, "a\nb\nc");
        assert_eq!(kept.omitted, None);
    }

    #[test]
    fn long_output_keeps_whole_lines_of_head_and_tail() {
        let lines: Vec<String> = (0..100).map(|i| format!("line {i:02}\n")).collect();
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        // Lines are 8 bytes: a head of 20 bytes holds 2, a tail of 60 bytes holds 7.
        let kept = keep(80, &refs);
        let omitted = kept.omitted.unwrap();
        assert_eq!(omitted.lines, 91);
        assert_eq!(omitted.bytes, 91 * 8);
        assert_eq!(
            (omitted.start_cursor, omitted.end_cursor),
            (16, 16 + 91 * 8)
        );
        assert_eq!(
            kept.text,
            format!(
                "line 00\nline 01\n[... 91 lines (728 bytes) omitted: terminal_read from \
                 cursor 16 to 744 ...]\n{}",
                lines[93..].concat()
            )
        );
    }

    #[test]
    fn the_marker_names_only_what_the_buffer_still_holds_of_the_omitted_range() {
        let lines: Vec<String> = (0..100).map(|i| format!("line {i:02}\n")).collect();
        let mut kept = HeadTail::new(80);
        for (i, line) in lines.iter().enumerate() {
            kept.push(i as u64 * 8, line);
        }
        // 91 lines are omitted, cursors 16 to 744.
        let marker = |held_from| {
            let text = kept.kept(held_from).text;
            text.lines().nth(2).unwrap().to_owned()
        };
        assert_eq!(
            marker(16),
            "[... 91 lines (728 bytes) omitted: terminal_read from cursor 16 to 744 ...]"
        );
        assert_eq!(
            marker(100),
            "[... 91 lines (728 bytes) omitted; the buffer no longer holds its start: \
             terminal_read from cursor 612 to 744 ...]"
        );
        // What is left of it would be gone by the time it is read.
        assert_eq!(
            marker(400),
            "[... 91 lines (728 bytes) omitted; the buffer no longer holds it ...]"
        );
    }

    #[test]
    fn output_that_fits_is_kept_whole() {
        let kept = keep(4, &["abcd"]);
        assert_eq!((kept.text.as_str(), kept.omitted), ("abcd", None));
        // Lines longer than the head's share, in an output that fits the whole budget.
        let kept = keep(64, &[&"a".repeat(30), "\n", &"b".repeat(33)]);
        assert_eq!(kept.text.len(), 64);
        assert_eq!(kept.omitted, None);
    }

    /// `text` fed as a raw capture of budget `max` would feed it, in `chunks` bytes.
    fn captured(max: usize, text: &str, chunk: usize) -> Kept {
        captured_by(Shaper::new(Shape::Raw, piece_bytes(max)), max, text, chunk)
    }

    fn captured_by(mut shaper: Shaper, max: usize, text: &str, chunk: usize) -> Kept {
        let mut kept = HeadTail::new(max);
        let (mut cursor, mut rest) = (0, text);
        while !rest.is_empty() {
            let mut end = chunk.min(rest.len());
            while !rest.is_char_boundary(end) {
                end += 1;
            }
            let (piece, after) = rest.split_at(end);
            shaper.feed(piece, cursor, |at, line| kept.push(at, line));
            cursor += piece.chars().count() as u64;
            rest = after;
        }
        for (at, line) in shaper.finish() {
            kept.push(at, &line);
        }
        kept.kept(0)
    }

    #[test]
    fn one_long_line_keeps_its_first_and_last_pieces() {
        let text = "a".repeat(70_000);
        let kept = captured(65_536, &text, 65_536);
        let omitted = kept.omitted.unwrap();
        let shown = kept.text.len() - kept.text.find(']').unwrap();
        assert!(
            kept.text.starts_with(&"a".repeat(16_384)),
            "{}",
            &kept.text[..100]
        );
        assert!(shown > 49_152 - 4096, "{shown}");
        assert_eq!(omitted.bytes, omitted.end_cursor - omitted.start_cursor);
        assert_eq!(omitted.lines, 0);
        let marker = format!(
            "[... {} bytes of a line omitted: terminal_read from cursor {} to {} ...]\n",
            omitted.bytes, omitted.start_cursor, omitted.end_cursor
        );
        assert!(
            kept.text.contains(&marker),
            "{}",
            &kept.text[16_380..16_500]
        );
    }

    #[test]
    fn a_long_line_before_the_last_ones_fills_the_tail_with_its_end() {
        // Whatever the long line's length, the tail is its end and the short line after it.
        for long in [63, 64, 65, 200] {
            let text = format!("{}\nok\n", "x".repeat(long));
            let kept = captured(64, &text, 64);
            let (_, tail) = parts(&kept);
            assert!(tail.ends_with("x\nok\n"), "{long}: {tail:?}");
            assert!(tail.len() > 48 - piece_bytes(64), "{long}: {tail:?}");
        }
    }

    #[test]
    fn a_rendered_cursor_move_cannot_outgrow_the_budget() {
        // Twenty moves of 65,535 columns to the right, then one letter: 160 bytes.
        let text = format!("{}x", "\x1b[65535C".repeat(20));
        let mut shaper = Shaper::new(Shape::Render, piece_bytes(64));
        let mut kept = HeadTail::new(64);
        shaper.feed(&text, 0, |at, line| kept.push(at, line));
        for (at, line) in shaper.finish() {
            kept.push(at, &line);
        }
        let kept = kept.kept(0);
        // The cursor stops at the line's limit, as at a terminal's margin.
        assert_eq!(kept.text.trim_start(), "x");
        assert!(kept.text.len() <= 64, "{} bytes", kept.text.len());
    }

    /// The head, the omitted text and the tail of `kept`, with the marker taken out.
    fn parts(kept: &Kept) -> (&str, &str) {
        let marker = kept.text.find("[... ").unwrap();
        let tail = kept.text[marker..].split_once("...]\n").unwrap().1;
        (&kept.text[..marker], tail)
    }

    proptest::proptest! {
        #[test]
        fn what_is_left_out_is_exactly_the_range_it_names(
            text in "(([ab€]{0,30}(\t[ab€]{0,10})?|[ab€]{40,90})\n){0,30}",
            max in 64usize..400,
            chunk in 1usize..64,
            rendered in proptest::bool::ANY,
        ) {
            // Rendered on a terminal 40 columns wide, text written once in order (a tab that
            // moves over nothing, short of the last column, in a line; lines that wrap) is
            // the same text, its rows cut into pieces as they leave.
            let shaper = if rendered {
                Shaper::new(Shape::Render, piece_bytes(max)).on_screen(3, 40)
            } else {
                Shaper::new(Shape::Raw, piece_bytes(max))
            };
            let kept = captured_by(shaper, max, &text, chunk);
            let Some(omitted) = kept.omitted else {
                proptest::prop_assert_eq!(&kept.text, &text);
                return Ok(());
            };
            proptest::prop_assert!(text.len() > max);
            let (head, tail) = parts(&kept);
            let chars: Vec<char> = text.chars().collect();
            let left_out: String = chars
                [omitted.start_cursor as usize..omitted.end_cursor as usize]
                .iter()
                .collect();
            // The head may end inside a line, and then gained a line end before the marker.
            let head = if format!("{head}{left_out}{tail}") == text {
                head
            } else {
                head.strip_suffix('\n').unwrap()
            };
            proptest::prop_assert_eq!(format!("{head}{left_out}{tail}"), text.clone());
            proptest::prop_assert_eq!(omitted.bytes, left_out.len() as u64);
            proptest::prop_assert_eq!(omitted.lines, left_out.matches('\n').count() as u64);
            proptest::prop_assert!(head.len() <= max / 4);
            proptest::prop_assert!(tail.len() <= max - max / 4);
        }

        /// Rendered output a program redraws (moves, erasures, insertions, tabs) keeps its
        /// budget, and names a range that can be read: it never ends before it begins.
        #[test]
        fn a_rendered_range_never_ends_before_it_begins(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    "ab", "€", "日", "0123456789", "\t", "\n", "\r", "\x08", "\x1b[A",
                    "\x1b[3C", "\x1b[20G", "\x1b[K", "\x1b[1K", "\x1b[2@", "\x1b[3P",
                    "\x1b[2X", "\x1b[J", "\x1b7", "\x1b8",
                ]),
                0..200,
            ),
            max in 64usize..400,
        ) {
            let text = pieces.concat();
            let shaper = Shaper::new(Shape::Render, piece_bytes(max)).on_screen(3, 40);
            let kept = captured_by(shaper, max, &text, 7);
            if let Some(omitted) = kept.omitted {
                proptest::prop_assert!(omitted.start_cursor <= omitted.end_cursor, "{:?}", omitted);
                let (head, tail) = parts(&kept);
                proptest::prop_assert!(head.len() <= max / 4 + 1);
                proptest::prop_assert!(tail.len() <= max - max / 4);
            }
        }
    }
}
