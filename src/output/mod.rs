//! Output of a session: incremental UTF-8 decoding per stream, the chunked record buffer
//! addressed by cursor, and escape-sequence stripping for returned text. Pure data
//! structures: no I/O, no locking.

mod ansi;
mod buffer;
mod decoder;

pub use ansi::strip_ansi;
pub use buffer::{Entry, OutputBuffer, ReadError, Stream};
pub use decoder::Utf8Decoder;
