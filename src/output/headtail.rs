//! The head and tail of a long output, kept as it arrives: the first quarter of the budget
//! is its head, the rest its tail, both cut at line boundaries, with a count of what lies
//! between (bytes, lines and the cursor range that holds them). Memory stays within the
//! budget whatever the output, and a flood cannot evict the head.

use std::collections::VecDeque;

use serde::Serialize;

/// What was left out between the head and the tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Omitted {
    pub bytes: u64,
    pub lines: u64,
    /// The omitted lines lie in the session's output from here...
    pub start_cursor: u64,
    /// ...to here (where the tail begins).
    pub end_cursor: u64,
}

#[derive(Debug, Clone)]
pub struct HeadTail {
    head_max: usize,
    tail_max: usize,
    head: String,
    /// A line did not fit the head: everything from then on goes to the tail.
    head_closed: bool,
    /// The tail's text is `tail_text[tail_from..]`; its lines, each as (cursor, bytes), in
    /// `tail_lines`. Dropping a line from the front only moves `tail_from` (the text is
    /// compacted once half of it is dropped), so a flood of short lines costs no allocation
    /// per line.
    tail_text: String,
    tail_from: usize,
    tail_lines: VecDeque<(u64, usize)>,
    omitted: Option<Omitted>,
}

/// The text kept, and what was left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub text: String,
    pub omitted: Option<Omitted>,
}

impl HeadTail {
    /// Keep at most `max_bytes` bytes of text: a quarter as the head, the rest as the tail.
    pub fn new(max_bytes: usize) -> Self {
        let head_max = max_bytes / 4;
        HeadTail {
            head_max,
            tail_max: max_bytes - head_max,
            head: String::new(),
            head_closed: false,
            tail_text: String::new(),
            tail_from: 0,
            tail_lines: VecDeque::new(),
            omitted: None,
        }
    }

    fn tail_bytes(&self) -> usize {
        self.tail_text.len() - self.tail_from
    }

    /// Add a line (with its `\n`; or a piece of a line too long to wait for its end, or the
    /// last, unterminated one) that began at `cursor`.
    pub fn push(&mut self, cursor: u64, line: &str) {
        if !self.head_closed {
            if self.head.len() + line.len() <= self.head_max {
                self.head.push_str(line);
                return;
            }
            self.head_closed = true;
        }
        self.tail_text.push_str(line);
        self.tail_lines.push_back((cursor, line.len()));
        while self.tail_bytes() > self.tail_max {
            if self.tail_lines.len() > 1 {
                let (at, len) = self.tail_lines.pop_front().expect("more than one line");
                let dropped = &self.tail_text[self.tail_from..self.tail_from + len];
                let lines = u64::from(dropped.ends_with('\n'));
                self.tail_from += len;
                let next = self.tail_lines.front().map_or(at, |(c, _)| *c);
                self.omit(at, next, len as u64, lines);
            } else {
                // One line longer than the tail: its end is kept.
                let (at, len) = self.tail_lines.front_mut().expect("one line");
                let mut cut = self.tail_from + (*len - self.tail_max);
                while !self.tail_text.is_char_boundary(cut) {
                    cut += 1;
                }
                let dropped = cut - self.tail_from;
                *len -= dropped;
                self.tail_from = cut;
                let at = *at;
                self.omit(at, at, dropped as u64, 0);
            }
        }
        if self.tail_from > self.tail_text.len() / 2 {
            self.tail_text.drain(..self.tail_from);
            self.tail_from = 0;
        }
    }

    fn omit(&mut self, from: u64, to: u64, bytes: u64, lines: u64) {
        let omitted = self.omitted.get_or_insert(Omitted {
            bytes: 0,
            lines: 0,
            start_cursor: from,
            end_cursor: to,
        });
        omitted.bytes += bytes;
        omitted.lines += lines;
        omitted.end_cursor = omitted.end_cursor.max(to);
    }

    /// The text so far: the head, one line naming what was omitted (if anything), the tail.
    pub fn kept(&self) -> Kept {
        let mut text = String::with_capacity(self.head.len() + self.tail_bytes() + 100);
        text.push_str(&self.head);
        if let Some(o) = &self.omitted {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!(
                "[... {} lines ({} bytes) omitted: terminal_read from cursor {} to {} ...]\n",
                o.lines, o.bytes, o.start_cursor, o.end_cursor
            ));
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

    fn keep(max: usize, lines: &[&str]) -> Kept {
        let mut kept = HeadTail::new(max);
        let mut cursor = 0;
        for line in lines {
            kept.push(cursor, line);
            cursor += line.chars().count() as u64;
        }
        kept.kept()
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
    fn an_endless_line_keeps_its_end_within_the_budget() {
        let mut kept = HeadTail::new(40);
        for i in 0..1000u64 {
            kept.push(i * 4, "€€€€");
        }
        let k = kept.kept();
        assert!(k.text.ends_with("€€€€"));
        let omitted = k.omitted.unwrap();
        assert_eq!(omitted.lines, 0);
        assert_eq!(omitted.bytes, 998 * 12);
        // One piece longer than the whole tail keeps its end.
        let mut kept = HeadTail::new(8);
        kept.push(0, &"ab€".repeat(10));
        let k = kept.kept();
        assert!(k.text.ends_with("b€"), "{}", k.text);
        assert!(k.text.len() < 8 + 100);
    }
}
