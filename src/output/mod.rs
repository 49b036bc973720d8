//! Output of a session: incremental UTF-8 decoding per stream, the chunked record buffer
//! addressed by cursor, escape-sequence stripping, incremental regex search, the start of the last lines,
//! redaction of secret values, and the rendered screen of a terminal. Pure data structures: no I/O, no locking.

mod ansi;
mod buffer;
mod decoder;
mod headtail;
mod redact;
mod screen;
mod search;
mod shape;
mod styled;
mod tail;

pub use ansi::{AnsiStripper, strip_entries, stripper_pair};
pub use buffer::{Entry, OutputBuffer, Page, ReadError, Stream};
pub use decoder::Utf8Decoder;
pub use headtail::{HeadTail, Kept, Omitted};
pub use redact::Redactor;
pub use screen::{Screen, ScreenView};
pub use search::{Leftmost, Search};
pub use shape::{Shape, Shaper};
pub use styled::{Colour, Span, Style, StyledScreen};
pub use tail::{StrippedTailSearch, TailSearch};
