//! What terminal output does to a full-screen program's screen, as the emulator takes it:
//! where the program's drawing ends (the characters it shows, and the erasures within a
//! line that go with them), and whether it then changed the screen without drawing (a
//! scroll, a clear: the way out of a program that leaves), and where it leaves the
//! alternate screen. Parsed by vte's state machine, the emulator's own parser, carried over
//! from one piece to the next, so a sequence split across pieces is seen whole.

use super::ansi::Vte;

/// What a piece does: where the program's drawing in it ends (0 if it draws nothing),
/// whether the screen changed since the drawing without its drawing again (in this piece
/// or before it), and whether it asks the terminal anything (which wants an answer now).
/// When the piece leaves the alternate screen, the scan stops there: `leaves` is where the
/// byte that leaves is, and the rest describes only what comes before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scan {
    pub end: usize,
    pub changed: bool,
    pub asks: bool,
    pub leaves: Option<usize>,
}

/// A scanner of one terminal's output on the alternate screen, piece after piece.
#[derive(Default)]
pub struct Drawing {
    vte: Vte,
    /// The screen changed since the program last drew.
    changed: bool,
    /// The cursor was sent home (to the first row and column), and has not moved since:
    /// erasing from there on clears the screen.
    home: bool,
    /// It scanned something since it was made.
    used: bool,
}

/// What the parser did with one code point.
#[derive(Default)]
struct Did {
    /// The cursor was at home before it (see `Drawing::home`).
    home: bool,
    /// It sent the cursor home.
    homed: bool,
    /// It may have moved the cursor elsewhere.
    moved: bool,
    /// It put a character on the screen.
    shown: bool,
    /// It erased, inserted or deleted within a line, or erased from the cursor on: how a
    /// program draws over what was there.
    edited: bool,
    /// It moved or wiped whole rows: a scroll, a clear, a reset.
    changed: bool,
    /// It asked the terminal something (a position, a status, what terminal it is).
    asked: bool,
    /// It left the alternate screen, as the emulator takes it: mode 1049 or 47 reset, or
    /// the terminal reset.
    left: bool,
}

/// Whether a sequence with these marks and `params` sets or resets the alternate screen's
/// modes, as vt100 reads it (the `?` mark first; vt100 has no mode 1047).
fn alternate(marks: &[u8], params: &vte::Params) -> bool {
    marks.first() == Some(&b'?') && params.iter().any(|p| matches!(p, [1049] | [47]))
}

impl vte::Perform for Did {
    fn print(&mut self, c: char) {
        // vt100 shows neither U+FFFD nor a C1 control.
        if c != '\u{fffd}' && !('\u{80}'..'\u{a0}').contains(&c) {
            self.shown = true;
        }
    }

    fn execute(&mut self, byte: u8) {
        self.moved = true;
        // LF, VT and FF scroll at the last line.
        if matches!(byte, 0x0a..=0x0c) {
            self.changed = true;
        }
    }

    fn csi_dispatch(&mut self, params: &vte::Params, marks: &[u8], _: bool, action: char) {
        let first = params.iter().next().and_then(|p| p.first()).copied();
        match action {
            'H' | 'f' if params.iter().all(|p| p.first().copied().unwrap_or(0) <= 1) => {
                self.homed = true;
            }
            // Attributes and modes leave the cursor where it is.
            'm' | 'h' | 'l' => {}
            _ => self.moved = true,
        }
        match action {
            // REP repeats the last character shown.
            'b' => self.shown = true,
            'K' | 'X' | 'P' | '@' => self.edited = true,
            'J' => match first.unwrap_or(0) {
                // From home on: the whole screen.
                0 if self.home => self.changed = true,
                0 | 1 => self.edited = true,
                2 => self.changed = true,
                // 3 erases the scrollback, which the alternate screen has none of.
                _ => {}
            },
            'S' | 'T' | 'L' | 'M' => self.changed = true,
            'n' | 'c' => self.asked = true,
            // Entering the alternate screen again clears it.
            'h' if alternate(marks, params) => self.changed = true,
            'l' if alternate(marks, params) => self.left = true,
            _ => {}
        }
    }

    fn esc_dispatch(&mut self, intermediates: &[u8], _: bool, byte: u8) {
        self.moved = true;
        // Index and next line (scroll up at the last line, as a line feed does), reverse
        // index (scrolls down at the top line) and reset, which leaves the alternate screen.
        if intermediates.is_empty() && matches!(byte, b'D' | b'E' | b'M' | b'c') {
            self.changed = true;
            self.left = byte == b'c';
        }
    }
}

impl Drawing {
    /// What `piece` does, up to where it leaves the alternate screen. An erasure within a
    /// line is drawing when it follows drawing, and part of a way out once the screen
    /// changed. After a way out the scanner starts afresh, as the program does.
    pub fn scan(&mut self, piece: &[u8]) -> Scan {
        self.used = true;
        let mut scan = Scan {
            end: 0,
            changed: false,
            asks: false,
            leaves: None,
        };
        let mut at = 0;
        for chunk in piece.utf8_chunks() {
            for (i, c) in chunk.valid().char_indices() {
                if self.take(c, at + i + c.len_utf8(), &mut scan) {
                    // What leaves is a single byte: the final one of its sequence.
                    scan.leaves = Some(at + i);
                    scan.changed = self.changed;
                    *self = Drawing::default();
                    return scan;
                }
            }
            at += chunk.valid().len();
            // What is not UTF-8 is U+FFFD to the parser, which shows nothing.
            if !chunk.invalid().is_empty() {
                at += chunk.invalid().len();
                self.take('\u{fffd}', at, &mut scan);
            }
        }
        scan.changed = self.changed;
        scan
    }

    /// Start afresh, where the output was not all scanned.
    pub fn forget(&mut self) {
        if self.used {
            *self = Drawing::default();
        }
    }

    /// Take `c`, which ends at `to` in the piece; whether it left the alternate screen.
    fn take(&mut self, c: char, to: usize, scan: &mut Scan) -> bool {
        let mut did = Did {
            home: self.home,
            ..Did::default()
        };
        self.vte.advance(&mut did, c);
        if did.left {
            return true;
        }
        self.home = did.homed || (self.home && !did.moved && !did.shown);
        if did.shown || (did.edited && !self.changed) {
            (scan.end, self.changed) = (to, false);
        }
        self.changed |= did.changed;
        scan.asks |= did.asked;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::Drawing;

    /// Where the drawing ends, and whether the screen changed since.
    fn scan(piece: &[u8]) -> (usize, bool) {
        let scan = Drawing::default().scan(piece);
        (scan.end, scan.changed)
    }

    #[test]
    fn finds_where_the_drawing_ends_and_whether_the_screen_changed_after_it() {
        let cases: [(&[u8], (usize, bool)); 23] = [
            (b"", (0, false)),
            (b"\x1b[5;1H\r\n", (0, true)),
            (b"\x1b[?25h\x1b[12;5H", (0, false)),
            // Erasing the rest of a line or of the screen after text is drawing.
            (b"top\x1b[K\x1b[1;1H", (6, false)),
            (b"top\x1b[J", (6, false)),
            (b"\r\nbye", (5, false)),
            ("é\x1b[2J\x1b[H".as_bytes(), (2, true)),
            (b"a\x1b[S", (1, true)),
            (b"a\x1bM", (1, true)),
            (b"a\x1b]0;title\x07\x1b[m", (1, false)),
            (b"a\x1b[3b", (5, false)),
            // What the emulator does not show is not drawing.
            (b"ab\xff\x1b[H", (2, false)),
            ("ab\u{fffd}\u{85}".as_bytes(), (2, false)),
            (b"ab\r\x1b[H", (2, false)),
            // Erasing from home on clears the screen.
            (b"top\x1b[H\x1b[J", (3, true)),
            (b"top\x1b[1;1H\x1b[0m\x1b[0J", (3, true)),
            (b"top\x1b[2;1H\x1b[J", (12, false)),
            (b"top\x1b[Hx\x1b[J", (10, false)),
            (b"a\x1b[2L", (1, true)),
            (b"a\x1b[M", (1, true)),
            (b"a\x1b[T", (1, true)),
            (b"a\x1b[?1049h", (1, true)),
            (b"a\x1b[1J\x1b[2X\x1b[P\x1b[@", (15, false)),
        ];
        for (piece, want) in cases {
            assert_eq!(scan(piece), want, "{piece:?}");
        }
        assert!(Drawing::default().scan(b"a\r\n\x1b[6n").asks);
        assert!(!Drawing::default().scan(b"a\r\n\x1b[6m").asks);
    }

    #[test]
    fn what_came_before_carries_over_to_the_next_piece() {
        let mut drawing = Drawing::default();
        let mut scan = |piece: &[u8]| {
            let scan = drawing.scan(piece);
            (scan.end, scan.changed)
        };
        // A sequence cut by the end of a piece goes on in the next.
        assert_eq!(scan(b"text\x1b["), (4, false));
        assert_eq!(scan(b"2J"), (0, true));
        // Once the screen changed, erasing a line is part of the way out, not drawing.
        assert_eq!(scan(b"\x1b[K\x1b]0;a ti"), (0, true));
        assert_eq!(scan(b"tle\x07"), (0, true));
        assert_eq!(scan(b"x\x1b[K"), (4, false));
    }

    #[test]
    fn stops_where_the_alternate_screen_is_left() {
        let leaves = |pieces: &[&[u8]]| {
            let mut drawing = Drawing::default();
            pieces.iter().map(|p| drawing.scan(p)).collect::<Vec<_>>()
        };
        let last = |pieces: &[&[u8]]| {
            let scan = *leaves(pieces).last().unwrap();
            (scan.end, scan.changed, scan.leaves)
        };
        // The byte that leaves, and what came before it.
        assert_eq!(last(&[b"ab\x1b[?1049lzz"]), (2, false, Some(9)));
        assert_eq!(last(&[b"ab\r\n\x1b[?1049l"]), (2, true, Some(11)));
        assert_eq!(last(&[b"\x1b[?25;1049lzz"]), (0, false, Some(10)));
        assert_eq!(last(&[b"\x1b[?1049;25l"]), (0, false, Some(10)));
        assert_eq!(last(&[b"ab\x1b[?47l"]), (2, false, Some(7)));
        assert_eq!(last(&[b"ab\x1bc"]), (2, false, Some(3)));
        // However it is split.
        assert_eq!(last(&[b"ab\r\n\x1b[?10", b"49l"]), (0, true, Some(2)));
        assert_eq!(
            last(&[b"ab\x1b", b"[", b"?1049", b"l"]),
            (0, false, Some(0))
        );
        // Not a way out: other modes, without the mark, 1047, a set, a subparameter.
        for piece in [
            &b"\x1b[?25l"[..],
            b"\x1b[1049l",
            b"\x1b[?1047l",
            b"\x1b[?1049h",
            b"\x1b[?1049:1l",
            b"\x1b[>1049l",
        ] {
            assert_eq!(last(&[piece]).2, None, "{piece:?}");
        }
        // The scan starts afresh after a way out.
        // (Had the line feed's change carried over, the erasure would not be drawing.)
        let scans = leaves(&[b"ab\r\n\x1b[?1049l", b"\x1b[K"]);
        assert_eq!(scans[0].leaves, Some(11));
        assert_eq!((scans[1].end, scans[1].changed), (3, false), "{scans:?}");
    }
}
