//! Removal of terminal escape sequences from returned text (`strip_ansi`): CSI (`ESC [` and
//! 8-bit `0x9B`), OSC (titles, hyperlinks; ended by BEL or `ESC \`), DCS/SOS/PM/APC strings
//! (ended by `ESC \`), charset designations (`ESC ( B`) and other two-byte escapes.
//! A sequence cut off by the end of the text is dropped to its end; the streaming
//! `AnsiStripper` carries an unfinished sequence over to the next piece.

/// A streaming stripper: feed code points in order, across any number of pieces.
#[derive(Debug, Default, Clone, Copy)]
pub struct AnsiStripper {
    state: State,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    #[default]
    Text,
    /// After ESC.
    Escape,
    /// Inside a CSI: parameters and intermediates until a final byte in `@`..=`~`.
    Csi,
    /// Inside an OSC/DCS/SOS/PM/APC string, until BEL, ST or `ESC \`.
    String,
    /// After ESC inside a string.
    StringEscape,
    /// After `ESC (` and friends: one designator character follows.
    Designator,
}

impl AnsiStripper {
    /// Whether `c` is text to keep (true) or part of an escape sequence (false).
    pub fn keep(&mut self, c: char) -> bool {
        let (next, keep) = match (self.state, c) {
            (State::Text, '\u{1b}') => (State::Escape, false),
            (State::Text, '\u{9b}') => (State::Csi, false),
            (State::Text, '\u{9d}' | '\u{90}') => (State::String, false),
            (State::Text, _) => (State::Text, true),
            (State::Escape, '[') => (State::Csi, false),
            (State::Escape, ']' | 'P' | 'X' | '^' | '_') => (State::String, false),
            (State::Escape, '(' | ')' | '*' | '+' | '-' | '.' | '/' | '#' | '%' | ' ') => {
                (State::Designator, false)
            }
            (State::Escape | State::Designator, _) => (State::Text, false),
            (State::Csi, '@'..='~') => (State::Text, false),
            (State::Csi, _) => (State::Csi, false),
            (State::String, '\u{7}' | '\u{9c}') => (State::Text, false),
            (State::String, '\u{1b}') => (State::StringEscape, false),
            (State::String, _) => (State::String, false),
            (State::StringEscape, '\\') => (State::Text, false),
            (State::StringEscape, _) => (State::String, false),
        };
        self.state = next;
        keep
    }
}

#[cfg(test)]
mod tests {
    use super::AnsiStripper;

    fn strip_ansi(text: &str) -> String {
        let mut stripper = AnsiStripper::default();
        text.chars().filter(|c| stripper.keep(*c)).collect()
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
            ("\u{9b}32mgreen", "green"),
            ("日本\u{1b}[Kok\r\n", "日本ok\r\n"),
            ("cut \u{1b}[12", "cut "),
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
}
