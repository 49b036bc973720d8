//! One session's retained output: a sequence of records (code points tagged with their
//! stream) addressed by absolute cursor.
//!
//! Storage is three flat rings, so its real memory follows the retained text whatever the
//! pattern of the output: the UTF-8 text itself, one bit per text byte saying which stream
//! wrote it, and a sparse index of the byte offset of every `MARK_CHARS`-th cursor. A run
//! of one stream costs nothing of its own, so output that alternates stdout and stderr a
//! code point at a time takes the same memory as one stream (about 1.13 bytes per
//! retained byte, see `heap_bytes`).
//!
//! Flow at a glance: readers `append` decoded text; when the retained bytes or records
//! exceed the limits the oldest records are evicted (`base` advances, `truncated` is set);
//! clients `read` pages from any cursor in `base..=end` without consuming anything. With
//! `append_within` nothing at or after a given cursor is evicted: it takes only the text
//! that fits, and the caller holds the rest (`on_full: "pause"`).

use std::collections::VecDeque;

use serde::Serialize;

/// Cursors that are multiples of this have their byte offset indexed: bounds the scan
/// that maps a cursor to a byte offset (to 4 × this many bytes).
const MARK_CHARS: u64 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub cursor: u64,
    pub stream: Stream,
    pub text: String,
}

/// The JSON an entry serializes to, with its text moved instead of copied (a page's text
/// is up to 64 KiB; `serde_json::to_value` would copy it).
impl From<Entry> for serde_json::Value {
    fn from(entry: Entry) -> Self {
        let mut fields = serde_json::Map::new();
        fields.insert("cursor".into(), entry.cursor.into());
        fields.insert("stream".into(), serde_json::json!(entry.stream));
        fields.insert("text".into(), serde_json::Value::String(entry.text));
        serde_json::Value::Object(fields)
    }
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

/// The byte offset (counted from the first byte ever appended) of a cursor.
#[derive(Debug, Clone, Copy)]
struct Mark {
    cursor: u64,
    byte: u64,
}

/// A UTF-8 lead byte (or ASCII): where a code point starts.
fn starts_char(b: u8) -> bool {
    (b as i8) >= -0x40
}

/// Where in `bytes` the code point `*left` code points on starts; when `bytes` ends
/// first, none, and `*left` less the code points it holds. Whole blocks before it are
/// counted with SIMD (`count_chars`), the last bytes one at a time: a page of CJK text
/// looked at a byte at a time from its mark cost as much as writing it out.
fn char_start(bytes: &[u8], left: &mut u64) -> Option<usize> {
    const BLOCK: usize = 512;
    let mut at = 0;
    while let Some(block) = bytes.get(at..at + BLOCK) {
        let chars = count_chars(block);
        if chars > *left {
            break;
        }
        *left -= chars;
        at += BLOCK;
    }
    for (i, &byte) in bytes[at..].iter().enumerate() {
        if starts_char(byte) {
            if *left == 0 {
                return Some(at + i);
            }
            *left -= 1;
        }
    }
    None
}

/// Code points in `bytes`: its bytes less its continuation bytes, counted with SIMD
/// (`bytecount`). A byte-wise count was the largest cost of reading a page, and a tenth of
/// a wait's look for where its match begins.
pub fn count_chars(bytes: &[u8]) -> u64 {
    bytecount::num_chars(bytes) as u64
}

/// `text` up to its `n`-th code point (all of it when it holds no more). Text of no more
/// bytes than `n` cannot reach it, so is kept without a walk.
pub fn before_char(text: &str, n: u64) -> &str {
    match usize::try_from(n) {
        Ok(n) if n < text.len() => match text.char_indices().nth(n) {
            Some((cut, _)) => &text[..cut],
            None => text,
        },
        _ => text,
    }
}

/// Bytes cut from the ring as text. Runs start and end on code point boundaries of the
/// decoder's text, so they are UTF-8; that is checked (with SIMD, `simdutf8`: the standard
/// library's check cost a third of a page of CJK text), and anything else is kept lossily.
fn into_text(bytes: Vec<u8>) -> String {
    if simdutf8::basic::from_utf8(&bytes).is_ok() {
        // SAFETY: `bytes` was just checked to be valid UTF-8.
        unsafe { String::from_utf8_unchecked(bytes) }
    } else {
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[derive(Debug)]
pub struct OutputBuffer {
    /// Retained text: the bytes at offsets `first_byte..first_byte + text.len()`.
    text: VecDeque<u8>,
    first_byte: u64,
    /// Bit `o % 64` of word `o / 64 - first_word` is set when the byte at offset `o` is
    /// stderr. Words past its end are all stdout: it reaches only as far as the last
    /// stderr byte, so output that is all stdout (and every terminal's) costs nothing here.
    stderr_bits: VecDeque<u64>,
    first_word: u64,
    /// Offsets of the retained cursors that are multiples of `MARK_CHARS`, ascending.
    marks: VecDeque<Mark>,
    base: u64,
    end: u64,
    max_bytes: usize,
    max_records: usize,
    truncated: bool,
}

impl OutputBuffer {
    pub fn new(max_bytes: usize, max_records: usize) -> Self {
        OutputBuffer {
            text: VecDeque::new(),
            first_byte: 0,
            stderr_bits: VecDeque::new(),
            first_word: 0,
            marks: VecDeque::new(),
            base: 0,
            end: 0,
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
    /// UTF-8 bytes of the retained records.
    pub fn retained_bytes(&self) -> usize {
        self.text.len()
    }

    /// Heap memory the buffer holds. At most `max_bytes × 9/8` plus 16 bytes per
    /// `MARK_CHARS` retained records plus a few words: text capacity never exceeds
    /// `max_bytes`, and the stream bits are one per byte of it.
    pub fn heap_bytes(&self) -> usize {
        self.text.capacity()
            + self.stderr_bits.capacity() * size_of::<u64>()
            + self.marks.capacity() * size_of::<Mark>()
    }

    fn end_byte(&self) -> u64 {
        self.first_byte + self.text.len() as u64
    }

    /// Append all of `text`, evicting the oldest records as the limits require.
    pub fn append(&mut self, stream: Stream, text: &str) {
        let chars = text.chars().count() as u64;
        let over_records = chars.saturating_sub(self.max_records as u64);
        if over_records == 0 && text.len() <= self.max_bytes {
            self.evict_for(text.len(), chars);
            self.push(stream, text, chars);
            return;
        }
        // The text alone is over a limit: everything retained goes, and so does the head
        // of the text, which is never stored.
        let mut skip = text
            .char_indices()
            .nth(over_records as usize)
            .map_or(text.len(), |(i, _)| i);
        let mut skipped = over_records;
        while text.len() - skip > self.max_bytes {
            skip += text[skip..].chars().next().map_or(1, char::len_utf8);
            skipped += 1;
        }
        self.drop_front(self.end_byte(), self.end);
        self.truncated = true;
        self.first_byte += skip as u64;
        self.end += skipped;
        self.base = self.end;
        self.stderr_bits.clear();
        self.first_word = self.first_byte / 64;
        self.marks.clear();
        self.push(stream, &text[skip..], chars - skipped);
    }

    /// Append the longest prefix of `text` (whole code points) that fits without evicting
    /// any record at or after `keep_from`, evicting older records as needed; returns the
    /// prefix's length in bytes.
    pub fn append_within(&mut self, stream: Stream, text: &str, keep_from: u64) -> usize {
        let keep_from = keep_from.clamp(self.base, self.end);
        let kept_bytes = (self.end_byte() - self.byte_at(keep_from)) as usize;
        let room_bytes = self.max_bytes.saturating_sub(kept_bytes);
        let room_records = (self.max_records as u64).saturating_sub(self.end - keep_from);
        let (take, chars) = if text.len() <= room_bytes && text.len() as u64 <= room_records {
            (text.len(), text.chars().count() as u64)
        } else {
            let mut take = 0;
            let mut chars = 0;
            for (i, c) in text.char_indices() {
                if chars == room_records || i + c.len_utf8() > room_bytes {
                    break;
                }
                take = i + c.len_utf8();
                chars += 1;
            }
            (take, chars)
        };
        self.evict_for(take, chars);
        self.push(stream, &text[..take], chars);
        take
    }

    /// Evict the oldest records until `bytes` more bytes and `records` more records fit.
    fn evict_for(&mut self, bytes: usize, records: u64) {
        let need_bytes = (self.text.len() + bytes).saturating_sub(self.max_bytes);
        let need_records = (self.end - self.base + records).saturating_sub(self.max_records as u64);
        if need_bytes == 0 && need_records == 0 {
            return;
        }
        if need_bytes >= self.text.len() || need_records >= self.end - self.base {
            self.drop_front(self.end_byte(), self.end);
            return;
        }
        let mut cursor = self.base + need_records;
        let mut cut = self.byte_at(cursor);
        let wanted = self.first_byte + need_bytes as u64;
        if cut < wanted {
            cut = wanted;
            while cut < self.end_byte() && !starts_char(self.byte(cut)) {
                cut += 1;
            }
            cursor = self.cursor_of(cut);
        }
        self.drop_front(cut, cursor);
    }

    /// Forget everything before byte offset `cut`, the offset of `cursor`.
    fn drop_front(&mut self, cut: u64, cursor: u64) {
        if cursor == self.base {
            return;
        }
        self.truncated = true;
        self.text.drain(..(cut - self.first_byte) as usize);
        self.first_byte = cut;
        self.base = cursor;
        let words = (cut / 64 - self.first_word) as usize;
        self.stderr_bits.drain(..words.min(self.stderr_bits.len()));
        self.first_word = cut / 64;
        while self.marks.front().is_some_and(|m| m.cursor < cursor) {
            self.marks.pop_front();
        }
    }

    /// The most text retention can ever hold: `max_bytes`, or `max_records` code points of
    /// 4 bytes each when that is less. No room is made past it: a ring's whole capacity is
    /// touched as text flows through it, so room it can never fill would still cost memory.
    fn most_bytes(&self) -> usize {
        self.max_bytes.min(self.max_records.saturating_mul(4))
    }

    fn push(&mut self, stream: Stream, text: &str, chars: u64) {
        if text.is_empty() {
            return;
        }
        let start = self.end_byte();
        let mut mark = self.end.next_multiple_of(MARK_CHARS);
        if text.len() as u64 == chars {
            while mark < self.end + chars {
                let byte = start + (mark - self.end);
                self.marks.push_back(Mark { cursor: mark, byte });
                mark += MARK_CHARS;
            }
        } else {
            let mut indices = text.char_indices();
            let mut at = self.end;
            while mark < self.end + chars {
                let (i, _) = indices
                    .nth((mark - at) as usize)
                    .expect("the mark is within the text");
                self.marks.push_back(Mark {
                    cursor: mark,
                    byte: start + i as u64,
                });
                at = mark + 1;
                mark += MARK_CHARS;
            }
        }
        let most_bytes = self.most_bytes();
        grow_exact(&mut self.text, text.len(), most_bytes);
        self.text.extend(text.as_bytes());
        if stream == Stream::Stderr {
            let last_word = (self.end_byte() - 1) / 64;
            let words = (last_word + 1 - self.first_word) as usize;
            if words > self.stderr_bits.len() {
                let extra = words - self.stderr_bits.len();
                grow_exact(&mut self.stderr_bits, extra, most_bytes / 64 + 2);
                self.stderr_bits.resize(words, 0);
            }
            self.set_stderr(start, self.end_byte());
        }
        self.end += chars;
    }

    /// Mark the bytes at offsets `from..to` as stderr.
    fn set_stderr(&mut self, from: u64, to: u64) {
        let mut at = from;
        while at < to {
            let word = at / 64;
            let low = at % 64;
            let high = (to - word * 64).min(64);
            let upto = if high == 64 { !0 } else { (1u64 << high) - 1 };
            self.stderr_bits[(word - self.first_word) as usize] |= upto & !((1u64 << low) - 1);
            at = word * 64 + high;
        }
    }

    fn byte(&self, offset: u64) -> u8 {
        self.text[(offset - self.first_byte) as usize]
    }

    /// The stream bits of the word holding offsets `word * 64..`: zero past the bitmap.
    fn bits(&self, word: u64) -> Option<u64> {
        self.stderr_bits
            .get((word - self.first_word) as usize)
            .copied()
    }

    fn stream_at(&self, offset: u64) -> Stream {
        let word = self.bits(offset / 64).unwrap_or(0);
        if (word >> (offset % 64)) & 1 == 1 {
            Stream::Stderr
        } else {
            Stream::Stdout
        }
    }

    /// The first offset in `from..limit` whose stream differs from that at `from`, or
    /// `limit`.
    fn run_end(&self, from: u64, limit: u64) -> u64 {
        let flip = match self.stream_at(from) {
            Stream::Stdout => 0,
            Stream::Stderr => !0,
        };
        let mut at = from;
        while at < limit {
            let word = match self.bits(at / 64) {
                Some(word) => word ^ flip,
                // Past the bitmap everything is stdout.
                None if flip == 0 => return limit,
                None => !0,
            };
            let rest = word >> (at % 64);
            if rest != 0 {
                return (at + u64::from(rest.trailing_zeros())).min(limit);
            }
            at = (at / 64 + 1) * 64;
        }
        limit
    }

    /// The retained bytes at offsets `from..to`, as the ring's two slices.
    fn slices(&self, from: u64, to: u64) -> (&[u8], &[u8]) {
        let (a, b) = self.text.as_slices();
        let i = (from - self.first_byte) as usize;
        let j = (to - self.first_byte) as usize;
        if j <= a.len() {
            (&a[i..j], &[])
        } else if i >= a.len() {
            (&b[i - a.len()..j - a.len()], &[])
        } else {
            (&a[i..], &b[..j - a.len()])
        }
    }

    fn count_between(&self, from: u64, to: u64) -> u64 {
        let (a, b) = self.slices(from, to);
        count_chars(a) + count_chars(b)
    }

    /// Byte offset of a retained cursor (`base..=end`).
    fn byte_at(&self, cursor: u64) -> u64 {
        let i = self.marks.partition_point(|m| m.cursor <= cursor);
        let from = match i {
            0 => Mark {
                cursor: self.base,
                byte: self.first_byte,
            },
            _ => self.marks[i - 1],
        };
        let (to_cursor, to_byte) = self
            .marks
            .get(i)
            .map_or((self.end, self.end_byte()), |m| (m.cursor, m.byte));
        if to_byte - from.byte == to_cursor - from.cursor {
            return from.byte + (cursor - from.cursor); // all ASCII
        }
        let mut left = cursor - from.cursor;
        let mut offset = from.byte;
        let (a, b) = self.slices(from.byte, to_byte);
        for part in [a, b] {
            if let Some(at) = char_start(part, &mut left) {
                return offset + at as u64;
            }
            offset += part.len() as u64;
        }
        to_byte
    }

    /// The earliest cursor from which the records up to `cursor` fit in half the
    /// buffer's limits: what a search that reached `cursor` keeps unacknowledged, so the
    /// start of a match it is about to find cannot be evicted under it.
    pub fn keep_back(&self, cursor: u64) -> u64 {
        let cursor = cursor.clamp(self.base, self.end);
        let from = cursor
            .saturating_sub(self.max_records as u64 / 2)
            .max(self.base);
        let (start, to) = (self.byte_at(from), self.byte_at(cursor));
        let half = self.max_bytes as u64 / 2;
        if to - start <= half {
            return from;
        }
        let mut at = to - half;
        while !starts_char(self.byte(at)) {
            at += 1;
        }
        self.cursor_of(at)
    }

    /// Cursor of the code point that starts at a retained byte offset: from the nearest
    /// mark at or before it, so at most `4 × MARK_CHARS` bytes are counted.
    fn cursor_of(&self, offset: u64) -> u64 {
        let i = self.marks.partition_point(|m| m.byte <= offset);
        let from = match i {
            0 => Mark {
                cursor: self.base,
                byte: self.first_byte,
            },
            _ => self.marks[i - 1],
        };
        from.cursor + self.count_between(from.byte, offset)
    }

    /// Scan back from cursor `at` over at most `max_bytes` bytes for the line ends of a
    /// tail of `lines` lines of the output up to `end` (`TailSearch` keeps the count in
    /// `found`): `Ok(cursor)` where the lines begin once found (or `base` once everything
    /// retained was scanned), else `Err(cursor)` to go on from.
    pub(super) fn scan_back_for_lines(
        &self,
        at: u64,
        (end, lines): (u64, usize),
        found: &mut usize,
        max_bytes: usize,
    ) -> Result<u64, u64> {
        if at <= self.base {
            return Ok(self.base);
        }
        let to = self.byte_at(at.min(self.end));
        // At least one code point's worth, so every step moves back.
        let from = to
            .saturating_sub(max_bytes.max(4) as u64)
            .max(self.first_byte);
        let (a, b) = self.slices(from, to);
        let mut cursor = at;
        for &byte in b.iter().rev().chain(a.iter().rev()) {
            if !starts_char(byte) {
                continue;
            }
            cursor -= 1;
            if byte == b'\n' && cursor + 1 < end {
                *found += 1;
                if *found == lines {
                    return Ok(cursor + 1);
                }
            }
        }
        if from == self.first_byte {
            Ok(self.base)
        } else {
            // A code point cut at `from` is scanned whole by the next step.
            Err(cursor)
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
        let start = self.byte_at(cursor);
        let end = self.end_byte();
        let mut limit = (start + max_bytes as u64).min(end);
        while limit < end && !starts_char(self.byte(limit)) {
            limit -= 1;
        }
        if limit == start && start < end {
            limit += 1;
            while limit < end && !starts_char(self.byte(limit)) {
                limit += 1;
            }
        }
        let mut entries: Vec<Entry> = Vec::new();
        let mut at = start;
        let mut next = cursor;
        while at < limit && entries.len() < max_entries {
            let stream = self.stream_at(at);
            let to = self.run_end(at, limit);
            let (a, b) = self.slices(at, to);
            let mut bytes = Vec::with_capacity(a.len() + b.len());
            bytes.extend_from_slice(a);
            bytes.extend_from_slice(b);
            let chars = count_chars(&bytes);
            let text = into_text(bytes);
            entries.push(Entry {
                cursor: next,
                stream,
                text,
            });
            next += chars;
            at = to;
        }
        Ok(Page {
            entries,
            next_cursor: next,
            has_more: next < self.end,
        })
    }
}

/// Make room for `extra` more items, growing geometrically but never past `limit` items
/// ahead of need (a deque's own growth would double past it).
fn grow_exact<T>(deque: &mut VecDeque<T>, extra: usize, limit: usize) {
    let need = deque.len() + extra;
    if need > deque.capacity() {
        let target = (deque.capacity() * 2).min(limit).max(need);
        deque.reserve_exact(target - deque.len());
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_entry_moves_into_the_json_it_serializes_to() {
        for stream in [Stream::Stdout, Stream::Stderr] {
            let entry = Entry {
                cursor: 7,
                stream,
                text: "a\"b\n".into(),
            };
            let serialized = serde_json::to_value(&entry).unwrap();
            assert_eq!(serde_json::Value::from(entry), serialized);
        }
    }

    /// With `max_records` binding before `max_bytes`, doubling went past what retention can
    /// ever hold (up to twice it), and a ring's whole room is touched as text flows through.
    #[test]
    fn the_ring_never_grows_past_what_retention_can_hold() {
        let records = 65_536;
        for piece in [40_000, 65_536, 4_096, 1] {
            let mut b = OutputBuffer::new(1 << 20, records);
            let text = "😀".repeat(piece / 4 + 1);
            while b.end() < 2 * records as u64 {
                b.append(Stream::Stdout, &text);
            }
            assert_eq!(b.end() - b.base(), records as u64);
            assert!(
                b.text.capacity() <= 4 * records,
                "pieces of {piece} bytes: room for {} bytes",
                b.text.capacity()
            );
        }
    }

    #[test]
    fn the_stream_bitmap_reaches_only_as_far_as_the_last_stderr_byte() {
        let mut b = OutputBuffer::new(1 << 20, 1 << 20);
        b.append(Stream::Stdout, &"out\n".repeat(10_000));
        assert_eq!(b.stderr_bits.capacity(), 0, "all stdout needs no bits");
        b.append(Stream::Stderr, "err\n");
        let words = b.stderr_bits.len();
        assert_eq!(words as u64, (b.end_byte() - 1) / 64 + 1);
        b.append(Stream::Stdout, &"out\n".repeat(10_000));
        assert_eq!(b.stderr_bits.len(), words, "stdout after it adds no words");
        let page = b.read(39_998, 1 << 20, 16).unwrap();
        let runs: Vec<_> = page
            .entries
            .iter()
            .map(|e| (e.stream, e.text.len()))
            .collect();
        assert_eq!(
            runs,
            [
                (Stream::Stdout, 2),
                (Stream::Stderr, 4),
                (Stream::Stdout, 40_000)
            ]
        );
    }

    proptest! {
        #[test]
        fn code_points_are_counted_as_the_standard_library_counts_them(text in ".{0,700}") {
            prop_assert_eq!(count_chars(text.as_bytes()), text.chars().count() as u64);
        }

        #[test]
        fn the_text_before_a_code_point_holds_that_many(text in ".{0,40}", n in 0u64..60) {
            let kept: String = text.chars().take(n as usize).collect();
            prop_assert_eq!(before_char(&text, n), kept.as_str());
        }
    }

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

    /// Output that alternates streams a code point at a time costs no more memory than one
    /// stream: the bound of `heap_bytes` holds whatever the runs look like.
    #[test]
    fn memory_follows_the_text_not_the_runs() {
        let limit = 1 << 20;
        let mut b = OutputBuffer::new(limit, 1 << 20);
        for _ in 0..400_000 {
            b.append(Stream::Stdout, "o");
            b.append(Stream::Stderr, "e");
        }
        assert_eq!(b.retained_bytes(), 800_000);
        assert!(
            b.heap_bytes() <= heap_bound(limit, 1 << 20),
            "{}",
            b.heap_bytes()
        );
        let page = b.read(0, 65536, 1024).unwrap();
        assert_eq!(page.entries.len(), 1024);
        assert_eq!(page.entries[1].stream, Stream::Stderr);
        for _ in 0..400_000 {
            b.append(Stream::Stdout, "中");
            b.append(Stream::Stderr, "😀");
        }
        assert!(b.retained_bytes() <= limit);
        assert!(
            b.heap_bytes() <= heap_bound(limit, 1 << 20),
            "{}",
            b.heap_bytes()
        );
    }

    fn heap_bound(max_bytes: usize, max_records: usize) -> usize {
        max_bytes + max_bytes / 8 + 16 * (max_records / MARK_CHARS as usize + 8) + 64
    }

    #[test]
    fn append_within_keeps_what_was_not_acknowledged() {
        let mut b = OutputBuffer::new(8, 100);
        assert_eq!(b.append_within(Stream::Stdout, "abcdef", 0), 6);
        assert_eq!(
            b.append_within(Stream::Stdout, "ghijk", 0),
            2,
            "room for 2 bytes"
        );
        assert_eq!((b.base(), b.end()), (0, 8));
        assert_eq!(b.append_within(Stream::Stdout, "ijk", 3), 3, "0..3 may go");
        assert_eq!((b.base(), b.end()), (3, 11));
        assert_eq!(b.append_within(Stream::Stdout, "é", 11), 2);
        assert_eq!(b.base(), 5);
        assert_eq!(
            b.append_within(Stream::Stdout, "😀", 7),
            0,
            "a code point is never split"
        );
        let mut b = OutputBuffer::new(100, 3);
        assert_eq!(
            b.append_within(Stream::Stderr, "xyzw", 0),
            3,
            "by records too"
        );
    }

    /// Short texts of ASCII, newlines and 2-, 3- and 4-byte code points.
    pub(crate) fn text_strategy() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![Just('a'), Just('\n'), Just('é'), Just('中'), Just('😀')],
            0..40,
        )
        .prop_map(|cs| cs.into_iter().collect())
    }

    proptest! {
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
                prop_assert!(b.heap_bytes() <= heap_bound(max_bytes, max_records));
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

    proptest! {
        /// `char_start` finds the code point a scan of every byte finds, across its
        /// blocks' edges, and when the bytes end first says how many are left.
        #[test]
        fn char_start_finds_what_a_scan_finds(
            text in text_strategy(),
            times in 1usize..60,
            n in 0u64..3000,
        ) {
            let text = text.repeat(times);
            let starts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
            let mut left = n;
            let found = char_start(text.as_bytes(), &mut left);
            match starts.get(n as usize) {
                Some(&at) => prop_assert_eq!(found, Some(at)),
                None => {
                    prop_assert_eq!(found, None);
                    prop_assert_eq!(left, n - starts.len() as u64);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Long runs cross the cursor index marks: pages from any retained cursor, of any
        /// size, return the records at exactly the cursors the model says; and appends that
        /// may not evict unacknowledged records never do, and take what fits.
        #[test]
        fn long_runs_read_back_from_any_cursor(
            appends in proptest::collection::vec(
                (any::<bool>(), text_strategy(), 1usize..400, any::<bool>()), 1..12),
            max_bytes in 4usize..40_000,
            page_bytes in 4usize..70_000,
            probes in proptest::collection::vec(any::<prop::sample::Index>(), 4),
        ) {
            let mut b = OutputBuffer::new(max_bytes, 1 << 20);
            let mut model: Vec<(Stream, char)> = Vec::new();
            let mut acked = 0u64;
            for (is_err, text, times, pause) in &appends {
                let stream = if *is_err { Stream::Stderr } else { Stream::Stdout };
                let text = text.repeat(*times);
                let taken = if *pause {
                    let base = b.base();
                    let taken = b.append_within(stream, &text, acked);
                    prop_assert!(b.base() <= acked.max(base));
                    let rest = &text[taken..];
                    if let Some(c) = rest.chars().next() {
                        // What was left would not have fitted.
                        let kept: usize = model[acked.max(base) as usize..]
                            .iter().map(|(_, c)| c.len_utf8()).sum::<usize>() + taken;
                        prop_assert!(kept + c.len_utf8() > max_bytes);
                    }
                    taken
                } else {
                    b.append(stream, &text);
                    text.len()
                };
                model.extend(text[..taken].chars().map(|c| (stream, c)));
                prop_assert_eq!(b.end(), model.len() as u64);
                prop_assert!(b.retained_bytes() <= max_bytes);
                prop_assert!(b.heap_bytes() <= heap_bound(max_bytes, 1 << 20));
                acked = (acked + b.end()) / 2;
            }
            for probe in &probes {
                let span = (b.end() - b.base() + 1) as usize;
                let from = b.base() + probe.index(span) as u64;
                let got = read_all(&b, from, page_bytes);
                let expected: Vec<_> = model[from as usize..]
                    .iter()
                    .enumerate()
                    .map(|(i, (s, c))| (from + i as u64, *s, *c))
                    .collect();
                prop_assert_eq!(got, expected);
            }
        }
    }
}
