//! Incremental UTF-8 decoding of one stream: a code point split across reads is joined,
//! invalid bytes become U+FFFD (one per maximal invalid subpart, as the WHATWG and Unicode
//! recommend), and an incomplete sequence at EOF becomes one U+FFFD.

#[derive(Debug, Default)]
pub struct Utf8Decoder {
    /// The start of a code point whose remaining bytes have not arrived yet (at most 3).
    carry: Vec<u8>,
}

impl Utf8Decoder {
    /// Decode `input`, appending complete text to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut String) {
        let joined;
        let mut bytes = if self.carry.is_empty() {
            input
        } else {
            joined = [self.carry.as_slice(), input].concat();
            joined.as_slice()
        };
        self.carry.clear();
        loop {
            // simdutf8: the standard library's check is a byte at a time outside ASCII.
            match simdutf8::compat::from_utf8(bytes) {
                Ok(text) => {
                    out.push_str(text);
                    return;
                }
                Err(e) => {
                    let (valid, rest) = bytes.split_at(e.valid_up_to());
                    // `valid_up_to` guarantees this prefix is UTF-8.
                    out.push_str(simdutf8::basic::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(invalid) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            bytes = &rest[invalid..];
                        }
                        None => {
                            self.carry.extend_from_slice(rest);
                            return;
                        }
                    }
                }
            }
        }
    }

    /// It holds the start of a code point whose remaining bytes have not arrived yet.
    pub fn holding(&self) -> bool {
        !self.carry.is_empty()
    }

    /// End of stream: an incomplete trailing sequence becomes U+FFFD.
    pub fn finish(&mut self, out: &mut String) {
        if !self.carry.is_empty() {
            self.carry.clear();
            out.push(char::REPLACEMENT_CHARACTER);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_in_pieces(bytes: &[u8], cuts: &[usize]) -> String {
        let mut d = Utf8Decoder::default();
        let mut out = String::new();
        let mut at = 0;
        for &cut in cuts {
            let cut = cut.clamp(at, bytes.len());
            d.push(&bytes[at..cut], &mut out);
            at = cut;
        }
        d.push(&bytes[at..], &mut out);
        d.finish(&mut out);
        out
    }

    #[test]
    fn split_code_points_are_joined() {
        let text = "é€😀中";
        let bytes = text.as_bytes();
        let cuts: Vec<usize> = (1..bytes.len()).collect();
        assert_eq!(decode_in_pieces(bytes, &cuts), text);
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        assert_eq!(decode_in_pieces(b"a\xff\xfeb", &[]), "a\u{FFFD}\u{FFFD}b");
        assert_eq!(decode_in_pieces(b"\xc3\x28", &[]), "\u{FFFD}(");
        assert_eq!(decode_in_pieces(b"tail \xe2\x82", &[]), "tail \u{FFFD}");
        assert_eq!(decode_in_pieces(b"tail \xe2\x82", &[6]), "tail \u{FFFD}");
    }

    proptest! {
        /// However the bytes are cut into reads, the result equals a one-shot lossy decode.
        #[test]
        fn pieces_decode_like_the_whole(bytes in proptest::collection::vec(any::<u8>(), 0..64),
                                        mut cuts in proptest::collection::vec(0usize..64, 0..8)) {
            cuts.sort_unstable();
            prop_assert_eq!(decode_in_pieces(&bytes, &cuts), String::from_utf8_lossy(&bytes));
        }
    }
}
