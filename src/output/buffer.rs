//! One session's retained output: a sequence of records (code points tagged with their
//! stream) addressed by absolute cursor, stored as chunks of same-stream text.
//!
//! Flow at a glance: readers `append` decoded text; when the retained bytes or records
//! exceed the limits the oldest records are evicted (`base` advances, `truncated` is set);
//! clients `read` pages from any cursor in `base..=end` without consuming anything.

use std::collections::VecDeque;

use serde::Serialize;

use super::AnsiStripper;

/// Code points per chunk at most: bounds the scan that maps a cursor to a byte offset.
const CHUNK_MAX_CHARS: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Debug)]
struct Chunk {
    stream: Stream,
    /// Cursor of the first code point.
    start: u64,
    text: String,
    chars: usize,
}

impl Chunk {
    fn end(&self) -> u64 {
        self.start + self.chars as u64
    }

    /// Byte offset of the `n`th code point (n ≤ chars).
    fn byte_offset(&self, n: usize) -> usize {
        if self.text.len() == self.chars {
            return n; // all ASCII
        }
        self.text
            .char_indices()
            .nth(n)
            .map_or(self.text.len(), |(i, _)| i)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub cursor: u64,
    pub stream: Stream,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub entries: Vec<Entry>,
    /// Where the next read continues.
    pub next_cursor: u64,
    /// Retained output exists after this page.
    pub has_more: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    /// The cursor's records were evicted; resume at `base`.
    Expired { base: u64 },
    /// The cursor is past the end of the sequence.
    Invalid { end: u64 },
}

#[derive(Debug)]
pub struct OutputBuffer {
    chunks: VecDeque<Chunk>,
    base: u64,
    end: u64,
    bytes: usize,
    max_bytes: usize,
    max_records: usize,
    truncated: bool,
}

impl OutputBuffer {
    pub fn new(max_bytes: usize, max_records: usize) -> Self {
        OutputBuffer {
            chunks: VecDeque::new(),
            base: 0,
            end: 0,
            bytes: 0,
            max_bytes,
            max_records,
            truncated: false,
        }
    }

    /// Cursor of the oldest retained record.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Cursor one past the newest record.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Some record was ever evicted.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    #[cfg(test)]
    pub fn retained_bytes(&self) -> usize {
        self.bytes
    }

    pub fn append(&mut self, stream: Stream, mut text: &str) {
        while !text.is_empty() {
            let room = match self.chunks.back() {
                Some(last) if last.stream == stream && last.chars < CHUNK_MAX_CHARS => {
                    CHUNK_MAX_CHARS - last.chars
                }
                _ => {
                    self.chunks.push_back(Chunk {
                        stream,
                        start: self.end,
                        text: String::new(),
                        chars: 0,
                    });
                    CHUNK_MAX_CHARS
                }
            };
            let split = text.char_indices().nth(room).map_or(text.len(), |(i, _)| i);
            let (head, rest) = text.split_at(split);
            let chars = head.chars().count();
            let last = self.chunks.back_mut().expect("a chunk was just ensured");
            last.text.push_str(head);
            last.chars += chars;
            self.end += chars as u64;
            self.bytes += head.len();
            text = rest;
        }
        self.evict();
    }

    fn records(&self) -> u64 {
        self.end - self.base
    }

    fn evict(&mut self) {
        while self.bytes > self.max_bytes || self.records() > self.max_records as u64 {
            let over_records = self.records().saturating_sub(self.max_records as u64);
            let over_bytes = self.bytes.saturating_sub(self.max_bytes);
            let front = self
                .chunks
                .front_mut()
                .expect("over a limit means not empty");
            // Drop whole chunks when they are within what must go, else a prefix.
            let drop_chars = if over_records >= front.chars as u64 || over_bytes >= front.text.len()
            {
                front.chars
            } else {
                let mut chars = over_records as usize;
                let mut bytes = front.byte_offset(chars);
                for c in front.text[bytes..].chars() {
                    if bytes >= over_bytes {
                        break;
                    }
                    bytes += c.len_utf8();
                    chars += 1;
                }
                chars.max(1)
            };
            self.truncated = true;
            if drop_chars == front.chars {
                let chunk = self.chunks.pop_front().expect("front exists");
                self.bytes -= chunk.text.len();
                self.base = chunk.end();
            } else {
                let cut = front.byte_offset(drop_chars);
                front.text.drain(..cut);
                front.chars -= drop_chars;
                front.start += drop_chars as u64;
                self.bytes -= cut;
                self.base = front.start;
            }
        }
    }

    /// Cursor where the `lines`-th last retained line begins, or `base` when fewer lines
    /// are retained. A line ends after `\n`; a final `\n` ends the last line rather than
    /// starting an empty one (as `tail -n` counts). With `strip`, lines are counted in the
    /// text without escape sequences (one stripper per stream, from `base`).
    pub fn tail_start(&self, lines: usize, strip: bool) -> u64 {
        if lines == 0 {
            return self.end;
        }
        if strip {
            return self.tail_start_stripped(lines);
        }
        let mut found = 0;
        let mut cursor = self.end;
        for chunk in self.chunks.iter().rev() {
            for c in chunk.text.chars().rev() {
                cursor -= 1;
                if c == '\n' && cursor + 1 < self.end {
                    found += 1;
                    if found == lines {
                        return cursor + 1;
                    }
                }
            }
        }
        self.base
    }

    fn tail_start_stripped(&self, lines: usize) -> u64 {
        let mut strippers = [AnsiStripper::default(); 2];
        // Starts of the last `lines` lines after the first; a line starts after a kept
        // `\n` once kept text follows it.
        let mut starts: VecDeque<u64> = VecDeque::with_capacity(lines.min(1024));
        let mut pending = None;
        for chunk in &self.chunks {
            let stripper = &mut strippers[chunk.stream as usize];
            for (cursor, c) in (chunk.start..).zip(chunk.text.chars()) {
                if !stripper.keep(c) {
                    continue;
                }
                if let Some(start) = pending.take() {
                    if starts.len() == lines {
                        starts.pop_front();
                    }
                    starts.push_back(start);
                }
                if c == '\n' {
                    pending = Some(cursor + 1);
                }
            }
        }
        if starts.len() == lines {
            starts.front().copied().unwrap_or(self.base)
        } else {
            self.base
        }
    }

    /// A page of at most `max_entries` entries and `max_bytes` bytes of text from `cursor`;
    /// at least one code point whenever any is available there.
    pub fn read(
        &self,
        cursor: u64,
        max_bytes: usize,
        max_entries: usize,
    ) -> Result<Page, ReadError> {
        if cursor < self.base {
            return Err(ReadError::Expired { base: self.base });
        }
        if cursor > self.end {
            return Err(ReadError::Invalid { end: self.end });
        }
        let mut entries: Vec<Entry> = Vec::new();
        let mut bytes = 0;
        let mut next = cursor;
        let first = self.chunks.partition_point(|c| c.end() <= cursor);
        'chunks: for chunk in self.chunks.range(first..) {
            let skip = (next - chunk.start) as usize;
            let from = chunk.byte_offset(skip);
            for c in chunk.text[from..].chars() {
                let len = c.len_utf8();
                if next > cursor && bytes + len > max_bytes {
                    break 'chunks;
                }
                let continues = entries.last().is_some_and(|e| e.stream == chunk.stream);
                if continues {
                    entries.last_mut().expect("checked").text.push(c);
                } else if entries.len() == max_entries {
                    break 'chunks;
                } else {
                    entries.push(Entry {
                        cursor: next,
                        stream: chunk.stream,
                        text: c.to_string(),
                    });
                }
                bytes += len;
                next += 1;
            }
        }
        Ok(Page {
            entries,
            next_cursor: next,
            has_more: next < self.end,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read_all(b: &OutputBuffer, from: u64, max_bytes: usize) -> Vec<(u64, Stream, char)> {
        let mut out = Vec::new();
        let mut cursor = from;
        loop {
            let page = b.read(cursor, max_bytes, 1024).unwrap();
            for e in &page.entries {
                for (i, c) in e.text.chars().enumerate() {
                    out.push((e.cursor + i as u64, e.stream, c));
                }
            }
            if !page.has_more {
                return out;
            }
            assert!(page.next_cursor > cursor, "a read always progresses");
            cursor = page.next_cursor;
        }
    }

    #[test]
    fn pages_coalesce_by_stream_and_respect_max_bytes() {
        let mut b = OutputBuffer::new(1 << 20, 1 << 20);
        b.append(Stream::Stdout, "ab");
        b.append(Stream::Stdout, "c");
        b.append(Stream::Stderr, "XY");
        b.append(Stream::Stdout, "d");
        let page = b.read(0, 65536, 1024).unwrap();
        let texts: Vec<_> = page
            .entries
            .iter()
            .map(|e| (e.cursor, e.stream, e.text.as_str()))
            .collect();
        assert_eq!(
            texts,
            vec![
                (0, Stream::Stdout, "abc"),
                (3, Stream::Stderr, "XY"),
                (5, Stream::Stdout, "d")
            ]
        );
        let page = b.read(1, 3, 1024).unwrap();
        assert_eq!(page.entries.len(), 2);
        assert_eq!(page.next_cursor, 4);
        assert!(page.has_more);
        assert_eq!(b.read(6, 4, 1024).unwrap().entries, vec![]);
        assert_eq!(b.read(7, 4, 1024), Err(ReadError::Invalid { end: 6 }));
    }

    #[test]
    fn a_read_never_splits_a_code_point_and_always_progresses() {
        let mut b = OutputBuffer::new(1 << 20, 1 << 20);
        b.append(Stream::Stdout, "😀é");
        let page = b.read(0, 4, 1024).unwrap();
        assert_eq!(page.entries[0].text, "😀");
        let page = b.read(0, 1, 1024).unwrap();
        assert_eq!(page.entries[0].text, "😀", "at least one code point");
        assert_eq!(page.next_cursor, 1);
    }

    #[test]
    fn entries_per_page_are_bounded() {
        let mut b = OutputBuffer::new(1 << 20, 1 << 20);
        for _ in 0..3000 {
            b.append(Stream::Stdout, "o");
            b.append(Stream::Stderr, "e");
        }
        let page = b.read(0, 65536, 1024).unwrap();
        assert_eq!(page.entries.len(), 1024);
        assert_eq!(page.next_cursor, 1024);
    }

    #[test]
    fn eviction_by_bytes_and_by_records() {
        let mut b = OutputBuffer::new(10, 1000);
        b.append(Stream::Stdout, "0123456789abc");
        assert_eq!((b.base(), b.end(), b.retained_bytes()), (3, 13, 10));
        assert!(b.truncated());
        assert_eq!(b.read(0, 100, 1024), Err(ReadError::Expired { base: 3 }));
        let mut b = OutputBuffer::new(1000, 4);
        b.append(Stream::Stdout, "ééééé");
        assert_eq!((b.base(), b.end(), b.retained_bytes()), (1, 5, 8));
        let mut b = OutputBuffer::new(4, 100);
        b.append(Stream::Stdout, "a😀");
        assert_eq!(b.read(b.base(), 100, 1024).unwrap().entries[0].text, "😀");
    }

    #[test]
    fn tail_start_counts_lines_like_tail() {
        let mut b = OutputBuffer::new(1 << 20, 1 << 20);
        assert_eq!(b.tail_start(3, false), 0, "empty");
        b.append(Stream::Stdout, "a\nb\n");
        b.append(Stream::Stderr, "c\n");
        assert_eq!(b.tail_start(1, false), 4);
        assert_eq!(b.tail_start(2, false), 2);
        assert_eq!(b.tail_start(3, false), 0);
        assert_eq!(b.tail_start(9, false), 0);
        b.append(Stream::Stdout, "partial");
        assert_eq!(b.tail_start(1, false), 6);
        assert_eq!(b.tail_start(2, false), 4);
        let mut b = OutputBuffer::new(6, 1 << 20);
        b.append(Stream::Stdout, "one\ntwo\nthree\n");
        assert_eq!(b.tail_start(5, false), b.base(), "fewer retained: the base");
    }

    #[test]
    fn stripped_tail_ignores_newlines_inside_escape_sequences() {
        let mut b = OutputBuffer::new(1 << 20, 1 << 20);
        b.append(Stream::Stdout, "x\n\u{1b}]0;a\nb\u{7}y\n\u{1b}[0m");
        assert_eq!(
            b.tail_start(1, false),
            12,
            "raw: the trailing escape is a line"
        );
        assert_eq!(
            b.tail_start(2, false),
            8,
            "raw: the newline inside the OSC counts"
        );
        assert_eq!(b.tail_start(1, true), 2, "stripped: only x and y lines");
        assert_eq!(b.tail_start(2, true), 0);
    }

    fn text_strategy() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![Just('a'), Just('\n'), Just('é'), Just('中'), Just('😀')],
            0..40,
        )
        .prop_map(|cs| cs.into_iter().collect())
    }

    proptest! {
        /// The tail starts where a line-splitting model says the N-th last line begins.
        #[test]
        fn tail_start_matches_a_model(text in text_strategy(), lines in 1usize..6) {
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
            prop_assert_eq!(b.tail_start(lines, false), expected);
            prop_assert_eq!(b.tail_start(lines, true), expected);
        }

        /// Any sequence of appends and evictions: reading from `base` in pages of any size
        /// yields exactly the retained suffix of what was appended, at the cursors claimed.
        #[test]
        fn reads_return_exactly_the_appended_records(
            appends in proptest::collection::vec((any::<bool>(), text_strategy()), 1..40),
            max_bytes in 4usize..200,
            max_records in 1usize..100,
            page_bytes in 4usize..64,
        ) {
            let mut b = OutputBuffer::new(max_bytes, max_records);
            let mut model: Vec<(Stream, char)> = Vec::new();
            for (is_err, text) in &appends {
                let stream = if *is_err { Stream::Stderr } else { Stream::Stdout };
                b.append(stream, text);
                model.extend(text.chars().map(|c| (stream, c)));
                prop_assert_eq!(b.end(), model.len() as u64);
                prop_assert!(b.retained_bytes() <= max_bytes);
                prop_assert!(b.end() - b.base() <= max_records as u64);
                let got = read_all(&b, b.base(), page_bytes);
                let expected: Vec<_> = model[b.base() as usize..]
                    .iter()
                    .enumerate()
                    .map(|(i, (s, c))| (b.base() + i as u64, *s, *c))
                    .collect();
                prop_assert_eq!(got, expected);
                let retained: usize = model[b.base() as usize..].iter().map(|(_, c)| c.len_utf8()).sum();
                prop_assert_eq!(retained, b.retained_bytes());
                // Eviction removes only what the limits require.
                if b.base() > 0 {
                    let (_, prev) = model[b.base() as usize - 1];
                    prop_assert!(retained + prev.len_utf8() > max_bytes
                        || (b.end() - b.base()) as usize + 1 > max_records);
                }
            }
        }
    }
}
