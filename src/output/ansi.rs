//! Removal of terminal escape sequences from returned text (`strip_ansi`), parsed as a
//! terminal parses them: vte's VT500-series state machine, the parser under the vt100
//! emulator that renders `terminal_screen`. What the terminal prints or executes as a C0
//! control (`\n`, `\r`, `\t`, BEL, BS) is kept; CSI, OSC (ended by BEL, ST, or any ESC),
//! DCS/SOS/PM/APC strings and other escapes are dropped, CAN and SUB abort a sequence, and
//! C0 controls inside a CSI still act (so are kept). A sequence cut off by the end of the
//! text is dropped to its end; the streaming `AnsiStripper` carries an unfinished sequence
//! over to the next piece.

use std::ops::Range;

/// vte's parser, fed one code point at a time, and skipped where what it does is known:
/// in its ground state (it printed since its last escape) it prints or executes every code
/// point but ESC, and stays there.
#[derive(Default)]
pub struct Vte {
    /// No OSC bytes are kept: neither the stripper nor the rendered lines need any.
    parser: vte::Parser<0>,
    ground: bool,
}

impl Vte {
    /// Feed `c` to `perform` as the parser would.
    #[inline]
    pub fn advance(&mut self, perform: &mut impl vte::Perform, c: char) {
        if self.ground && c != '\x1b' {
            match c {
                '\x00'..='\x1f' | '\u{80}'..='\u{9f}' => perform.execute(c as u8),
                _ => perform.print(c),
            }
        } else {
            self.parse(perform, c);
        }
    }

    /// `c` taken through the parser, whatever its state.
    pub fn parse(&mut self, perform: &mut impl vte::Perform, c: char) {
        let mut noted = NotePrint {
            perform,
            printed: false,
        };
        let mut utf8 = [0u8; 4];
        self.parser
            .advance(&mut noted, c.encode_utf8(&mut utf8).as_bytes());
        // vte prints only in its ground state.
        self.ground = noted.printed;
    }

    /// Whether the parser is known to be in its ground state.
    pub fn ground(&self) -> bool {
        self.ground
    }
}

/// A `Perform` passed on, noting whether the parser printed.
struct NotePrint<'a, P> {
    perform: &'a mut P,
    printed: bool,
}

impl<P: vte::Perform> vte::Perform for NotePrint<'_, P> {
    fn print(&mut self, c: char) {
        self.printed = true;
        self.perform.print(c);
    }

    fn execute(&mut self, byte: u8) {
        self.perform.execute(byte);
    }

    fn hook(&mut self, params: &vte::Params, intermediates: &[u8], ignore: bool, action: char) {
        self.perform.hook(params, intermediates, ignore, action);
    }

    fn put(&mut self, byte: u8) {
        self.perform.put(byte);
    }

    fn unhook(&mut self) {
        self.perform.unhook();
    }

    fn osc_dispatch(&mut self, params: &[&[u8]], bell_terminated: bool) {
        self.perform.osc_dispatch(params, bell_terminated);
    }

    fn csi_dispatch(
        &mut self,
        params: &vte::Params,
        intermediates: &[u8],
        ignore: bool,
        action: char,
    ) {
        self.perform
            .csi_dispatch(params, intermediates, ignore, action);
    }

    fn esc_dispatch(&mut self, intermediates: &[u8], ignore: bool, byte: u8) {
        self.perform.esc_dispatch(intermediates, ignore, byte);
    }
}

/// A streaming stripper: feed code points in order, across any number of pieces.
#[derive(Default)]
pub struct AnsiStripper {
    vte: Vte,
}

/// Records whether the character just fed was printed or acted on as text.
struct Keep(bool);

impl vte::Perform for Keep {
    fn print(&mut self, _: char) {
        self.0 = true;
    }

    fn execute(&mut self, byte: u8) {
        // CAN and SUB only cancel a sequence; C1 controls (U+0080..U+009F) are not text.
        if byte < 0x20 && byte != 0x18 && byte != 0x1a {
            self.0 = true;
        }
    }
}

impl AnsiStripper {
    /// Whether `c` is text to keep (true) or part of an escape sequence (false).
    pub fn keep(&mut self, c: char) -> bool {
        let mut keep = Keep(false);
        self.vte.advance(&mut keep, c);
        keep.0
    }

    /// Whether `c` is kept, taken through the parser whatever its state.
    #[cfg(test)]
    pub(super) fn parse(&mut self, c: char) -> bool {
        let mut keep = Keep(false);
        self.vte.parse(&mut keep, c);
        keep.0
    }

    /// Calls `run(range)` for each run of `text` kept, as byte ranges in order: what `keep`
    /// keeps of its code points. In the parser's ground state, text up to the next ESC,
    /// CAN, SUB or C1 control is kept whole without looking at its code points (the parser
    /// would print or execute each, and keep them), so plain text costs a byte compare.
    pub fn runs(&mut self, text: &str, mut run: impl FnMut(Range<usize>)) {
        let bytes = text.as_bytes();
        let mut start = None;
        let mut at = 0;
        while let Some(c) = text[at..].chars().next() {
            if self.vte.ground() {
                // 0xC2 leads every C1 control (U+0080..U+009F) and never continues a code
                // point, so the run ends on a code point's boundary.
                let rest = &bytes[at..];
                let plain = memchr::memchr3(0x1b, 0x18, 0x1a, rest).unwrap_or(rest.len());
                let plain = memchr::memchr(0xc2, &rest[..plain]).unwrap_or(plain);
                if plain > 0 {
                    start.get_or_insert(at);
                    at += plain;
                    continue;
                }
            }
            if self.keep(c) {
                start.get_or_insert(at);
            } else if let Some(from) = start.take() {
                run(from..at);
            }
            at += c.len_utf8();
        }
        if let Some(from) = start {
            run(from..text.len());
        }
    }
}

/// Notes whether a sequence fed to it ended: dispatched, printed after, or cancelled.
#[derive(Default)]
struct Ended(bool);

impl vte::Perform for Ended {
    fn print(&mut self, _: char) {
        self.0 = true;
    }

    fn execute(&mut self, byte: u8) {
        // CAN and SUB cancel a sequence; other controls act inside one, which goes on.
        if byte == 0x18 || byte == 0x1a {
            self.0 = true;
        }
    }

    fn unhook(&mut self) {
        self.0 = true;
    }

    fn osc_dispatch(&mut self, _: &[&[u8]], _: bool) {
        self.0 = true;
    }

    fn csi_dispatch(&mut self, _: &vte::Params, _: &[u8], _: bool, _: char) {
        self.0 = true;
    }

    fn esc_dispatch(&mut self, _: &[u8], _: bool, _: u8) {
        self.0 = true;
    }
}

/// Where the escape sequence that `pieces` (one stream's text, in order) end inside
/// begins, as (piece, byte offset), if they end inside one: the last ESC, when what
/// follows it to the end is no whole sequence (vte takes C1 controls as controls, never
/// as the start of a sequence). A page cut there leaves the sequence whole for the next
/// page to strip.
pub fn unfinished_sequence(pieces: &[&str]) -> Option<(usize, usize)> {
    let (piece, at) = pieces
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, text)| memchr::memrchr(0x1b, text.as_bytes()).map(|at| (i, at)))?;
    let mut parser = vte::Parser::<0>::default();
    let mut ended = Ended::default();
    let mut utf8 = [0u8; 4];
    let rest = std::iter::once(&pieces[piece][at..]).chain(pieces[piece + 1..].iter().copied());
    for c in rest.flat_map(str::chars) {
        parser.advance(&mut ended, c.encode_utf8(&mut utf8).as_bytes());
        if ended.0 {
            return None;
        }
    }
    Some((piece, at))
}

/// A pair of strippers, one per output stream (their sequences interleave independently).
pub fn stripper_pair() -> [AnsiStripper; 2] {
    [AnsiStripper::default(), AnsiStripper::default()]
}

/// Remove escape sequences from the text of `entries` (one stripper per stream, so a
/// sequence split by the other stream's output is still one sequence), dropping entries
/// left empty.
pub fn strip_entries(entries: &mut Vec<super::Entry>) {
    strip_entries_after(&[], entries);
}

/// `strip_entries`, the parsers first fed `context`, the output right before `entries`: a
/// page that begins inside a sequence is stripped as the whole output would be.
pub fn strip_entries_after(context: &[super::Entry], entries: &mut Vec<super::Entry>) {
    let mut strippers = stripper_pair();
    for e in context {
        strippers[e.stream as usize].runs(&e.text, |_| {});
    }
    entries.retain_mut(|e| {
        let stripper = &mut strippers[e.stream as usize];
        let (mut kept, mut whole) = (String::new(), false);
        stripper.runs(&e.text, |range| {
            if range == (0..e.text.len()) {
                whole = true;
            } else {
                kept.push_str(&e.text[range]);
            }
        });
        if !whole {
            e.text = kept;
        }
        !e.text.is_empty()
    });
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{AnsiStripper, unfinished_sequence};

    #[test]
    fn finds_where_an_unfinished_sequence_begins() {
        type Case<'a> = (&'a [&'a str], Option<(usize, usize)>);
        let cases: &[Case] = &[
            (&["plain text"], None),
            (&["a\x1b[31mb"], None),
            (&["a\x1b[31"], Some((0, 1))),
            (&["ab\x1b]0;title"], Some((0, 2))),
            (&["x\x1b]0;t\x07y"], None),
            (&["x\x1b]0;t\x1b\\"], None),
            (&["\x1b[1", "2;3"], Some((0, 0))),
            (&["\x1b[1", "2m"], None),
            (&["a", "\u{9b}3"], None),
            (&["\x1b[1\x18x"], None),
            (&["é\x1bP1;2"], Some((0, 2))),
        ];
        for (pieces, expected) in cases {
            assert_eq!(unfinished_sequence(pieces), *expected, "{pieces:?}");
        }
    }

    fn strip_ansi(text: &str) -> String {
        let mut stripper = AnsiStripper::default();
        text.chars().filter(|c| stripper.keep(*c)).collect()
    }

    /// What the parser keeps, every code point taken through it.
    fn parsed(text: &str) -> String {
        let mut stripper = AnsiStripper::default();
        text.chars().filter(|c| stripper.parse(*c)).collect()
    }

    #[test]
    fn strips_every_kind_of_sequence() {
        let cases = [
            ("\u{1b}[1;31mred\u{1b}[0m", "red"),
            ("\u{1b}[?1049h\u{1b}[2J\u{1b}[Hscreen", "screen"),
            ("\u{1b}]0;title\u{7}text", "text"),
            (
                "\u{1b}]8;;https://example.com\u{1b}\\link\u{1b}]8;;\u{1b}\\",
                "link",
            ),
            ("\u{1b}P1$r0m\u{1b}\\after", "after"),
            ("\u{1b}(Bplain\u{1b}=\u{1b}>", "plain"),
            ("日本\u{1b}[Kok\r\n", "日本ok\r\n"),
            ("cut \u{1b}[12", "cut "),
        ];
        for (input, expected) in cases {
            assert_eq!(strip_ansi(input), expected, "{input:?}");
        }
    }

    #[test]
    fn sequences_end_where_a_terminal_ends_them() {
        let cases = [
            // ESC inside an OSC ends it and starts the next sequence.
            ("\u{1b}]0;title\u{1b}[1mhello\n", "hello\n"),
            ("\u{1b}P1;2|data\u{1b}[0mafter", "after"),
            // CAN and SUB abort a sequence.
            ("\u{1b}[12\u{18}abc", "abc"),
            ("\u{1b}]0;t\u{1a}abc", "abc"),
            // C0 controls inside a CSI act, and the CSI goes on.
            ("\u{1b}[1\n;31mred", "\nred"),
            // SOS/PM/APC are not ended by BEL.
            ("\u{1b}_app\u{7}still\u{1b}\\after", "after"),
            // An 8-bit C1 control in UTF-8 text is not a sequence introducer.
            ("\u{9b}32mgreen", "32mgreen"),
        ];
        for (input, expected) in cases {
            assert_eq!(strip_ansi(input), expected, "{input:?}");
        }
    }

    #[test]
    fn streaming_carries_a_sequence_across_pieces() {
        let mut s = AnsiStripper::default();
        let mut out = String::new();
        for piece in ["a\u{1b}", "[3", "1m", "b\u{1b}]0;t", "itle\u{1b}", "\\c"] {
            out.extend(piece.chars().filter(|c| s.keep(*c)));
        }
        assert_eq!(out, "abc");
    }

    /// Pieces of terminal output: text, line ends, and sequences that neither move the
    /// cursor nor print (SGR, OSC, DCS, APC, mode changes), strings possibly left open (the
    /// next piece's ESC ends them) and escapes cut by CAN or SUB (a cut escape followed by
    /// a letter would be another, cursor-moving, sequence).
    fn piece() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9 .,é日\t\u{7f}\u{85}\u{9b}\u{a7}]{1,8}",
            Just("\r\n".to_owned()),
            "\u{1b}\\[[0-9;]{0,6}m",
            "\u{1b}\\[[0-9]{0,3}[\u{18}\u{1a}]",
            "\u{1b}\\[\\?(1|25|1000|1006|2004)[hl]",
            "\u{1b}\\][0-9]{1,2};[a-z é]{0,10}(\u{7}|\u{1b}\\\\)?",
            "\u{1b}P[0-9;]{0,4}[a-z|$\u{9c}\u{71c}]{0,6}(\u{1b}\\\\)?",
            "\u{1b}_[a-z\u{7}]{0,6}(\u{1b}\\\\)?",
            "\u{1b}[\u{18}\u{1a}]",
            Just("\u{18}".to_owned()),
            Just("\u{1a}".to_owned()),
            Just("\u{7}".to_owned()),
        ]
    }

    fn rendered(text: &str) -> String {
        let mut parser = vt100::Parser::new(
            std::num::NonZeroU16::new(40).unwrap(),
            std::num::NonZeroU16::new(200).unwrap(),
            0,
        );
        parser.process(text.as_bytes());
        parser.screen().contents()
    }

    proptest! {
        /// The stripped text renders as the original does: nothing printed was dropped,
        /// nothing kept is part of a sequence.
        #[test]
        fn stripped_text_renders_like_the_original(pieces in prop::collection::vec(piece(), 0..24)) {
            let text: String = pieces.concat();
            let stripped = strip_ansi(&text);
            prop_assert!(!stripped.contains('\x1b'), "{:?}", stripped);
            prop_assert_eq!(rendered(&stripped), rendered(&text), "{:?} → {:?}", text, stripped);
        }

        /// Runs keep what `keep` keeps, code point by code point, and what the parser keeps,
        /// however the text is cut into pieces (the plain text taken without parsing
        /// included).
        #[test]
        fn runs_keep_what_keep_keeps(
            pieces in prop::collection::vec(piece(), 0..16),
            cut in 0usize..64,
        ) {
            let text: String = pieces.concat();
            let cut = text.char_indices().nth(cut).map_or(text.len(), |(i, _)| i);
            let mut s = AnsiStripper::default();
            let mut out = String::new();
            for part in [&text[..cut], &text[cut..]] {
                s.runs(part, |range| {
                    assert!(!range.is_empty());
                    out.push_str(&part[range]);
                });
            }
            prop_assert_eq!(&out, &strip_ansi(&text));
            prop_assert_eq!(out, parsed(&text));
        }

        /// Fed in any pieces, the stripper keeps what it keeps from the whole text.
        #[test]
        fn streaming_is_independent_of_the_split(
            pieces in prop::collection::vec(piece(), 0..16),
            cut in 0usize..64,
        ) {
            let text: String = pieces.concat();
            let chars: Vec<char> = text.chars().collect();
            let cut = cut.min(chars.len());
            let mut s = AnsiStripper::default();
            let mut out: String = chars[..cut].iter().filter(|c| s.keep(**c)).collect();
            out.extend(chars[cut..].iter().filter(|c| s.keep(**c)));
            prop_assert_eq!(&out, &strip_ansi(&text));
            prop_assert_eq!(out, parsed(&text));
        }
    }
}
