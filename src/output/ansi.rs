//! Removal of terminal escape sequences from returned text (`strip_ansi`): CSI (`ESC [` and
//! 8-bit `0x9B`), OSC (titles, hyperlinks; ended by BEL or `ESC \`), DCS/SOS/PM/APC strings
//! (ended by `ESC \`), charset designations (`ESC ( B`) and other two-byte escapes.
//! A sequence cut off by the end of the text is dropped to its end.

pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.next() {
                Some('[') => skip_csi(&mut chars),
                Some(']') | Some('P') | Some('X') | Some('^') | Some('_') => {
                    skip_string(&mut chars)
                }
                Some('(' | ')' | '*' | '+' | '-' | '.' | '/' | '#' | '%' | ' ') => {
                    chars.next();
                }
                _ => {}
            },
            '\u{9b}' => skip_csi(&mut chars),
            '\u{9d}' | '\u{90}' => skip_string(&mut chars),
            _ => out.push(c),
        }
    }
    out
}

/// Parameters and intermediates, then one final byte in `@`..=`~`.
fn skip_csi(chars: &mut impl Iterator<Item = char>) {
    for c in chars.by_ref() {
        if ('@'..='~').contains(&c) {
            return;
        }
    }
}

/// Up to BEL, `ESC \` or the 8-bit ST.
fn skip_string(chars: &mut std::iter::Peekable<impl Iterator<Item = char>>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{7}' | '\u{9c}' => return,
            '\u{1b}' if chars.peek() == Some(&'\\') => {
                chars.next();
                return;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::strip_ansi;

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
}
