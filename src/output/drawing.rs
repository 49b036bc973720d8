//! What a piece of terminal output does to the screen, as the emulator takes it: where the
//! text it shows ends, and whether what follows that text still changes the screen (a
//! scroll or an erasure, as on a full-screen program's way out). Parsed by vte's state
//! machine, the emulator's own parser, carried over from one piece to the next.

use super::ansi::Vte;

/// A scanner of one terminal's output, piece after piece.
#[derive(Default)]
pub struct Drawing {
    vte: Vte,
}

/// What the parser did with one code point.
#[derive(Default)]
struct Did {
    /// It put a character on the screen.
    shown: bool,
    /// It changed the screen without showing a character.
    changed: bool,
}

impl vte::Perform for Did {
    fn print(&mut self, _: char) {
        self.shown = true;
    }

    fn execute(&mut self, byte: u8) {
        // LF, VT and FF scroll at the last line.
        if matches!(byte, 0x0a..=0x0c) {
            self.changed = true;
        }
    }

    fn csi_dispatch(&mut self, params: &vte::Params, _: &[u8], _: bool, action: char) {
        match action {
            // REP repeats the last character shown.
            'b' => self.shown = true,
            // Insert, erase, delete and scroll.
            '@' | 'J' | 'K' | 'L' | 'M' | 'P' | 'S' | 'T' | 'X' => self.changed = true,
            // Entering the alternate screen again clears it.
            'h' if params
                .iter()
                .any(|p| matches!(p.first(), Some(1049 | 1047 | 47))) =>
            {
                self.changed = true;
            }
            _ => {}
        }
    }

    fn esc_dispatch(&mut self, intermediates: &[u8], _: bool, byte: u8) {
        // Reverse index (scrolls down at the top line) and reset.
        if intermediates.is_empty() && matches!(byte, b'M' | b'c') {
            self.changed = true;
        }
    }
}

impl Drawing {
    /// Where the text `piece` shows ends (just past its last character shown; 0 if it shows
    /// none), and whether what follows may change the screen.
    pub fn scan(&mut self, piece: &[u8]) -> (usize, bool) {
        let (mut end, mut changes) = (0, false);
        let mut at = 0;
        let mut take = |c: char, to: usize, vte: &mut Vte| {
            let mut did = Did::default();
            vte.advance(&mut did, c);
            if did.shown {
                (end, changes) = (to, false);
            }
            changes |= did.changed;
        };
        for chunk in piece.utf8_chunks() {
            for (i, c) in chunk.valid().char_indices() {
                take(c, at + i + c.len_utf8(), &mut self.vte);
            }
            at += chunk.valid().len();
            // The emulator shows what is not UTF-8 as U+FFFD (or holds a code point cut
            // off by the piece's end until the next, to show it then).
            if !chunk.invalid().is_empty() {
                at += chunk.invalid().len();
                take('\u{fffd}', at, &mut self.vte);
            }
        }
        (end, changes)
    }
}

#[cfg(test)]
mod tests {
    use super::Drawing;

    fn scan(piece: &[u8]) -> (usize, bool) {
        Drawing::default().scan(piece)
    }

    #[test]
    fn finds_the_end_of_the_text_and_what_changes_the_screen_after_it() {
        assert_eq!(scan(b""), (0, false));
        assert_eq!(scan(b"\x1b[5;1H\r\n"), (0, true));
        assert_eq!(scan(b"\x1b[?25h\x1b[12;5H"), (0, false));
        assert_eq!(scan(b"top\x1b[K"), (3, true));
        assert_eq!(scan(b"\r\nbye"), (5, false));
        assert_eq!(scan("é\x1b[2J\x1b[H".as_bytes()), (2, true));
        assert_eq!(scan(b"a\x1b[S"), (1, true));
        assert_eq!(scan(b"a\x1bM"), (1, true));
        assert_eq!(scan(b"a\x1b]0;title\x07\x1b[m"), (1, false));
        assert_eq!(scan(b"a\x1b[3b"), (5, false));
        assert_eq!(scan(b"ab\xff\x1b[H"), (3, false));
    }

    #[test]
    fn a_sequence_cut_by_the_end_of_a_piece_goes_on_in_the_next() {
        let mut drawing = Drawing::default();
        assert_eq!(drawing.scan(b"text\x1b["), (4, false));
        assert_eq!(drawing.scan(b"2J"), (0, true));
        assert_eq!(drawing.scan(b"\x1b]0;a ti"), (0, false));
        assert_eq!(drawing.scan(b"tle\x07"), (0, false));
    }
}
