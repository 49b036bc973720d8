//! Output of a session: incremental UTF-8 decoding per stream, the chunked record buffer
//! addressed by cursor, escape-sequence stripping, incremental regex search, the start of the last lines,
//! redaction of secret values, and the rendered screen of a terminal. Pure data structures: no I/O, no locking.

mod ansi;
mod buffer;
mod decoder;
mod drawing;
mod headtail;
mod redact;
mod rows;
mod screen;
mod search;
mod shape;
mod styled;
mod tail;

pub use ansi::{
    AnsiStripper, strip_entries, strip_entries_after, stripper_pair, unfinished_sequence,
};
pub use buffer::{Entry, OutputBuffer, Page, ReadError, Stream, before_char, count_chars};
pub use decoder::Utf8Decoder;
pub use headtail::{HeadTail, Kept, Omitted, piece_bytes};
pub use redact::{Flush, Redactor};
pub use screen::{Screen, ScreenView};
pub use search::{Leftmost, Search};
pub use shape::{Shape, Shaper};
pub use styled::{Colour, Span, Style, StyledScreen};
pub use tail::{StrippedTailSearch, TailSearch};

/// `text` cut into pieces at the character boundaries among `cuts` (each taken modulo the
/// text's length), for tests that feed a stream in arbitrary reads.
#[cfg(test)]
pub(crate) fn cut_at<'a>(text: &'a str, cuts: &[usize]) -> Vec<&'a str> {
    let mut bounds: Vec<usize> = cuts
        .iter()
        .map(|c| c % (text.len() + 1))
        .filter(|c| text.is_char_boundary(*c))
        .collect();
    bounds.sort_unstable();
    bounds.dedup();
    let mut pieces = Vec::new();
    let mut at = 0;
    for b in bounds {
        pieces.push(&text[at..b]);
        at = b;
    }
    pieces.push(&text[at..]);
    pieces
}
