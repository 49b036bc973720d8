//! Where the last N lines of the output begin, found a bounded step at a time, so the
//! caller can let go of the buffer between steps (a tail of a 16 MiB buffer with no line
//! end in it must not hold the session for the whole scan).
//!
//! A line ends after `\n`; a final `\n` ends the last line rather than starting an empty
//! one (as `tail -n` counts). Lines are counted in the output as it was when the search
//! began; output evicted meanwhile was not retained, so the answer is then at most
//! `base` (fewer lines are retained than asked for).

use std::collections::VecDeque;

use super::{AnsiStripper, OutputBuffer, Page, before_char, count_chars, stripper_pair};

/// Counts line ends back from the end, in the raw text.
pub struct TailSearch {
    lines: usize,
    end: u64,
    found: usize,
    at: u64,
}

impl TailSearch {
    pub fn new(buffer: &OutputBuffer, lines: usize) -> Self {
        TailSearch {
            lines,
            end: buffer.end(),
            found: 0,
            at: buffer.end(),
        }
    }

    /// Scan at most `max_bytes` more: the cursor where the lines begin, once known.
    pub fn step(&mut self, buffer: &OutputBuffer, max_bytes: usize) -> Option<u64> {
        if self.lines == 0 {
            return Some(self.end);
        }
        let scan = (self.end, self.lines);
        match buffer.scan_back_for_lines(self.at, scan, &mut self.found, max_bytes) {
            Ok(cursor) => Some(cursor),
            Err(at) => {
                self.at = at;
                None
            }
        }
    }
}

/// Counts line ends in the text without escape sequences: a sequence (an OSC title) may
/// hold a `\n`, and only a scan from the start knows where sequences are, so this one
/// goes forward over pages the caller reads (one stripper per stream, from `base`).
pub struct StrippedTailSearch {
    lines: usize,
    end: u64,
    strippers: [AnsiStripper; 2],
    /// Starts of the last `lines` lines after the first; a line starts after a kept
    /// `\n` once kept text follows it.
    starts: VecDeque<u64>,
    pending: Option<u64>,
    next: u64,
}

impl StrippedTailSearch {
    pub fn new(buffer: &OutputBuffer, lines: usize) -> Self {
        StrippedTailSearch {
            lines,
            end: buffer.end(),
            strippers: stripper_pair(),
            starts: VecDeque::with_capacity(lines.min(1024)),
            pending: None,
            next: buffer.base(),
        }
    }

    /// The cursor of the next page to read, or `None` once every page was fed.
    pub fn next_page(&self) -> Option<u64> {
        (self.lines > 0 && self.next < self.end).then_some(self.next)
    }

    /// The records before `base` were evicted before this search read them.
    pub fn evicted(&mut self, base: u64) {
        self.starts.retain(|&start| start >= base);
        self.pending = self.pending.filter(|&start| start >= base);
        self.next = self.next.max(base);
    }

    /// Count the line ends of the page read at `next_page`.
    pub fn feed(&mut self, page: &Page) {
        for entry in &page.entries {
            if entry.cursor >= self.end {
                break;
            }
            // Only what was written before the search began counts.
            let text = before_char(&entry.text, self.end - entry.cursor);
            let Self {
                lines,
                starts,
                pending,
                ..
            } = self;
            let mut push = |start| {
                if starts.len() == *lines {
                    starts.pop_front();
                }
                starts.push_back(start);
            };
            // The cursor of `text[counted..]`.
            let (mut at, mut counted) = (entry.cursor, 0);
            self.strippers[entry.stream as usize].runs(text, |run| {
                // Kept text follows the last kept `\n`: a line starts there.
                if let Some(start) = pending.take() {
                    push(start);
                }
                for newline in memchr::memchr_iter(b'\n', &text.as_bytes()[run.clone()]) {
                    let newline = run.start + newline;
                    at += count_chars(&text.as_bytes()[counted..newline]);
                    counted = newline + 1;
                    at += 1;
                    if newline + 1 < run.end {
                        push(at);
                    } else {
                        *pending = Some(at);
                    }
                }
            });
        }
        self.next = if page.has_more {
            page.next_cursor
        } else {
            self.end
        };
    }

    /// Where the lines begin, once every page was fed; `base` when fewer are retained.
    pub fn start(&self, base: u64) -> u64 {
        if self.lines == 0 {
            return self.end;
        }
        match self.starts.front() {
            Some(&start) if self.starts.len() == self.lines => start.max(base),
            _ => base,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Stream;
    use proptest::prelude::*;

    use crate::output::buffer::tests::text_strategy;

    /// Both searches run to their end in steps (pages) of `step` bytes.
    fn tail_start(b: &OutputBuffer, lines: usize, strip: bool, step: usize) -> u64 {
        if strip {
            let mut search = StrippedTailSearch::new(b, lines);
            while let Some(cursor) = search.next_page() {
                search.feed(&b.read(cursor, step, usize::MAX).unwrap());
            }
            return search.start(b.base());
        }
        let mut search = TailSearch::new(b, lines);
        loop {
            if let Some(cursor) = search.step(b, step) {
                return cursor;
            }
        }
    }

    #[test]
    fn tail_start_counts_lines_like_tail() {
        let mut b = OutputBuffer::new(1 << 20, 1 << 20);
        assert_eq!(tail_start(&b, 3, false, 64), 0, "empty");
        b.append(Stream::Stdout, "a\nb\n");
        b.append(Stream::Stderr, "c\n");
        assert_eq!(tail_start(&b, 1, false, 64), 4);
        assert_eq!(tail_start(&b, 2, false, 64), 2);
        assert_eq!(tail_start(&b, 3, false, 64), 0);
        assert_eq!(tail_start(&b, 9, false, 64), 0);
        assert_eq!(tail_start(&b, 0, false, 64), 6);
        b.append(Stream::Stdout, "partial");
        assert_eq!(tail_start(&b, 1, false, 64), 6);
        assert_eq!(tail_start(&b, 2, false, 64), 4);
        let mut b = OutputBuffer::new(6, 1 << 20);
        b.append(Stream::Stdout, "one\ntwo\nthree\n");
        assert_eq!(
            tail_start(&b, 5, false, 64),
            b.base(),
            "fewer retained: the base"
        );
    }

    #[test]
    fn stripped_tail_ignores_newlines_inside_escape_sequences() {
        let mut b = OutputBuffer::new(1 << 20, 1 << 20);
        b.append(Stream::Stdout, "x\n\u{1b}]0;a\nb\u{7}y\n\u{1b}[0m");
        assert_eq!(
            tail_start(&b, 1, false, 64),
            12,
            "raw: the trailing escape is a line"
        );
        assert_eq!(
            tail_start(&b, 2, false, 64),
            8,
            "raw: the newline inside the OSC counts"
        );
        assert_eq!(
            tail_start(&b, 1, true, 64),
            2,
            "stripped: only x and y lines"
        );
        assert_eq!(tail_start(&b, 2, true, 64), 0);
    }

    /// Output appended after the search began is not counted, and output evicted
    /// meanwhile makes the answer the new base.
    #[test]
    fn a_search_counts_the_output_as_it_was_when_it_began() {
        let mut b = OutputBuffer::new(64, 1 << 20);
        b.append(Stream::Stdout, "a\nb\nc\n");
        let mut raw = TailSearch::new(&b, 2);
        let mut stripped = StrippedTailSearch::new(&b, 2);
        b.append(Stream::Stdout, "d\ne\n");
        assert_eq!(raw.step(&b, 1 << 16), Some(2));
        while let Some(cursor) = stripped.next_page() {
            stripped.feed(&b.read(cursor, 1 << 16, usize::MAX).unwrap());
        }
        assert_eq!(stripped.start(b.base()), 2);

        let mut raw = TailSearch::new(&b, 9);
        assert_eq!(raw.step(&b, 2), None);
        b.append(Stream::Stdout, &"z".repeat(60));
        assert_eq!(raw.step(&b, 2), Some(b.base()), "evicted: the base");
    }

    /// Text on a stream: plain, with line ends, controls, C1 controls, and the pieces of
    /// escape sequences.
    const TEXT: &str = "[ab\t\n\r\x07\x18\u{85}\u{9b}\u{9c}\u{a7}日\x1b\\[\\];P0-9m]{0,12}";

    proptest! {
        /// The tail starts where a line-splitting model says the N-th last line begins,
        /// whatever the size of the steps.
        #[test]
        fn tail_start_matches_a_model(
            text in text_strategy(),
            lines in 1usize..6,
            step in 1usize..20,
        ) {
            let mut b = OutputBuffer::new(1 << 20, 1 << 20);
            b.append(Stream::Stdout, &text);
            let chars: Vec<char> = text.chars().collect();
            let mut starts = vec![0u64];
            for (i, c) in chars.iter().enumerate() {
                if *c == '\n' && i + 1 < chars.len() {
                    starts.push(i as u64 + 1);
                }
            }
            let expected = if starts.len() >= lines { starts[starts.len() - lines] } else { 0 };
            prop_assert_eq!(tail_start(&b, lines, false, step), expected);
            prop_assert_eq!(tail_start(&b, lines, true, step), expected);
        }

        /// With escape sequences on both streams, the stripped tail starts where feeding
        /// every code point through its stream's stripper says, whatever the steps, and
        /// counts only what was written before the search began.
        #[test]
        fn stripped_tail_matches_the_stripper_code_point_by_code_point(
            pieces in proptest::collection::vec((TEXT, any::<bool>()), 0..8),
            later in proptest::collection::vec((TEXT, any::<bool>()), 0..3),
            lines in 1usize..6,
            step in 1usize..40,
        ) {
            let append = |b: &mut OutputBuffer, pieces: &[(String, bool)]| {
                for (text, stderr) in pieces {
                    b.append(if *stderr { Stream::Stderr } else { Stream::Stdout }, text);
                }
            };
            let mut b = OutputBuffer::new(1 << 20, 1 << 20);
            append(&mut b, &pieces);
            let end = b.end();
            let mut search = StrippedTailSearch::new(&b, lines);
            append(&mut b, &later);
            let mut strippers = stripper_pair();
            let mut starts = vec![0u64];
            let mut pending = None;
            for entry in b.read(0, usize::MAX, usize::MAX).unwrap().entries {
                let stripper = &mut strippers[entry.stream as usize];
                for (at, c) in (entry.cursor..end).zip(entry.text.chars()) {
                    if stripper.parse(c) {
                        starts.extend(pending.take());
                        if c == '\n' {
                            pending = Some(at + 1);
                        }
                    }
                }
            }
            while let Some(cursor) = search.next_page() {
                search.feed(&b.read(cursor, step, usize::MAX).unwrap());
            }
            let expected = starts[starts.len().saturating_sub(lines)];
            prop_assert_eq!(search.start(b.base()), expected);
        }
    }
}
