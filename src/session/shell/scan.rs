//! Finding the shell integration's marks in a shell session's output as it is read, before
//! anything is stored: a mark is an OSC sequence `ESC ] 6973 ; NONCE ; KIND [; DATA] BEL`
//! carrying the session's random nonce, taken out of the text (no buffer, screen or
//! recording ever holds one). Output that imitates a mark without the nonce is left as
//! text. On a readline shell, bracketed paste switched on (`ESC [ ? 2004 h`, which readline
//! writes when it starts reading a line, the terminal set up for it) marks that it reads,
//! and switched off (`ESC [ ? 2004 l`, written when it has read the line) where the typed
//! line's echo ends; both stay in the text.
//!
//! A read may end inside a mark: the part that could still become one is held (at most
//! a mark's length) and decided by the next piece, or given up as text by `flush`.

use memchr::memchr_iter;

/// What a mark says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// The integration is installed: how commands are typed into this shell, and the
    /// shell's process id (`$$`), where the mark says it.
    Installed {
        typing: super::Typing,
        shell: Option<i32>,
    },
    /// A command line was read and is about to run (bash's `PS0`).
    Start,
    /// Readline reads a line (the terminal is set up for it).
    InputReady,
    /// Readline has read a line: its echo ends here.
    InputEnd,
    /// The shell is back at its prompt; the status of the command that ran, if one did.
    End(Option<i32>),
    /// A shell reading lines from the terminal asks for another line of the command it is
    /// reading (its `PS2`): what it read so far is no whole command.
    Continued,
    /// A shell on pipes ran the line sent to see whether it reads commands (after text
    /// written to it some other way, which may have left a command line unfinished).
    Probed,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    Text(&'a str),
    Mark(Mark),
}

const PREFIX: &str = "\u{1b}]6973;";
const BEL: char = '\u{7}';
const PASTE_END: &str = "\u{1b}[?2004l";
const PASTE_ON: &str = "\u{1b}[?2004h";
/// The most bytes of kind and data a mark carries after the nonce (`;I;canonical`, `;D;255`).
const BODY_MAX: usize = 24;

pub struct Scanner {
    nonce: String,
    /// Whether `ESC [ ? 2004 l` marks the end of a typed line's echo.
    paste_ends: bool,
    /// The start of a possible mark, held from the last piece.
    carry: String,
}

/// How the text at an escape character continues.
enum At {
    /// A mark of `len` bytes (and what it says, for ours).
    Mark(usize, Option<Mark>),
    /// Bracketed paste switched on or off: the sequence (`len` bytes) is text, the mark
    /// follows it.
    Paste(usize, Mark),
    /// Could become one of the above once more text comes.
    Undecided,
    Text,
}

impl Scanner {
    pub fn new(nonce: &str) -> Self {
        Scanner {
            nonce: nonce.to_owned(),
            paste_ends: false,
            carry: String::new(),
        }
    }

    /// From now on, bracketed paste switched on and off marks where readline reads and
    /// where a typed line's echo ends.
    pub fn watch_paste_ends(&mut self) {
        self.paste_ends = true;
    }

    pub fn holding(&self) -> bool {
        !self.carry.is_empty()
    }

    /// Split `text` (after whatever was held) into text and marks, calling `piece` for each
    /// in order; a possible mark at the end is held.
    pub fn scan(&mut self, text: &str, mut piece: impl FnMut(Piece)) {
        let joined;
        let text = if self.carry.is_empty() {
            text
        } else {
            joined = std::mem::take(&mut self.carry) + text;
            joined.as_str()
        };
        let mut from = 0;
        for at in memchr_iter(0x1b, text.as_bytes()) {
            if at < from {
                continue;
            }
            match self.at(&text[at..]) {
                At::Text => {}
                At::Undecided => {
                    if from < at {
                        piece(Piece::Text(&text[from..at]));
                    }
                    self.carry.push_str(&text[at..]);
                    return;
                }
                At::Paste(len, mark) => {
                    piece(Piece::Text(&text[from..at + len]));
                    piece(Piece::Mark(mark));
                    from = at + len;
                }
                At::Mark(len, mark) => {
                    if from < at {
                        piece(Piece::Text(&text[from..at]));
                    }
                    if let Some(mark) = mark {
                        // The text after it in this very read (the first prompt) is
                        // readline's already.
                        if matches!(
                            mark,
                            Mark::Installed {
                                typing: super::Typing::Readline,
                                ..
                            }
                        ) {
                            self.paste_ends = true;
                        }
                        piece(Piece::Mark(mark));
                    }
                    from = at + len;
                }
            }
        }
        if from < text.len() {
            piece(Piece::Text(&text[from..]));
        }
    }

    /// Give up waiting: what is held is text.
    pub fn flush(&mut self, mut piece: impl FnMut(Piece)) {
        if !self.carry.is_empty() {
            let carry = std::mem::take(&mut self.carry);
            piece(Piece::Text(&carry));
        }
    }

    fn at(&self, text: &str) -> At {
        if self.paste_ends {
            for (sequence, mark) in [(PASTE_END, Mark::InputEnd), (PASTE_ON, Mark::InputReady)] {
                if text.starts_with(sequence) {
                    return At::Paste(sequence.len(), mark);
                }
                if sequence.starts_with(text) {
                    return At::Undecided;
                }
            }
        }
        let Some(rest) = text.strip_prefix(PREFIX) else {
            return if PREFIX.starts_with(text) {
                At::Undecided
            } else {
                At::Text
            };
        };
        let Some(body) = rest.strip_prefix(self.nonce.as_str()) else {
            let seen = rest.len().min(self.nonce.len());
            return if self.nonce.as_bytes()[..seen] == rest.as_bytes()[..seen] {
                At::Undecided
            } else {
                At::Text
            };
        };
        let Some(body) = body.strip_prefix(';') else {
            return if body.is_empty() {
                At::Undecided
            } else {
                At::Text
            };
        };
        match body.bytes().take(BODY_MAX).position(|b| b == BEL as u8) {
            Some(end) => {
                let len = PREFIX.len() + self.nonce.len() + 1 + end + 1;
                At::Mark(len, parse(&body[..end]))
            }
            None if body.len() < BODY_MAX => At::Undecided,
            None => At::Text,
        }
    }
}

/// What the body of one of our marks (`KIND[;DATA]`) says; `None` for one we do not know.
fn parse(body: &str) -> Option<Mark> {
    let (kind, data) = body.split_once(';').unwrap_or((body, ""));
    match kind {
        "I" => {
            let (typing, shell) = data.split_once(';').unwrap_or((data, ""));
            let typing = match typing {
                "readline" => super::Typing::Readline,
                "canonical" => super::Typing::Canonical,
                _ => return None,
            };
            let shell = shell.parse().ok().filter(|pid| *pid > 0);
            Some(Mark::Installed { typing, shell })
        }
        "C" => Some(Mark::Start),
        "P" => Some(Mark::Continued),
        "R" => Some(Mark::Probed),
        // A prompt printed by hand (`echo "$PS1"` in dash) shows `$?` unexpanded: not a mark.
        "D" => data.parse().ok().map(|status| Mark::End(Some(status))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NONCE: &str = "0123456789abcdef0123456789abcdef";

    fn mark(kind: &str) -> String {
        format!("{PREFIX}{NONCE};{kind}{BEL}")
    }

    #[derive(Debug, PartialEq, Eq)]
    enum Owned {
        Text(String),
        Mark(Mark),
    }

    fn scanned(scanner: &mut Scanner, pieces: &[&str]) -> Vec<Owned> {
        let mut out: Vec<Owned> = Vec::new();
        let mut push = |p: Piece| match (p, out.last_mut()) {
            (Piece::Text(t), Some(Owned::Text(last))) => last.push_str(t),
            (Piece::Text(t), _) => out.push(Owned::Text(t.to_owned())),
            (Piece::Mark(m), _) => out.push(Owned::Mark(m)),
        };
        for p in pieces {
            scanner.scan(p, &mut push);
        }
        scanner.flush(&mut push);
        out
    }

    #[test]
    fn marks_are_taken_out_and_read() {
        let text = format!("a{}b{}c", mark("C"), mark("D;130"));
        assert_eq!(
            scanned(&mut Scanner::new(NONCE), &[&text]),
            [
                Owned::Text("a".into()),
                Owned::Mark(Mark::Start),
                Owned::Text("b".into()),
                Owned::Mark(Mark::End(Some(130))),
                Owned::Text("c".into()),
            ]
        );
    }

    #[test]
    fn an_imitation_without_the_nonce_stays_text() {
        let fake = format!("{PREFIX}{};D;0{BEL}", "f".repeat(32));
        let other = "\u{1b}]0;title\u{7}\u{1b}[31m";
        let text = format!("{fake}{other}");
        assert_eq!(
            scanned(&mut Scanner::new(NONCE), &[&text]),
            [Owned::Text(text.clone())]
        );
    }

    #[test]
    fn paste_ends_are_marked_after_the_sequence_once_watched() {
        let text = "echo hi\r\n\u{1b}[?2004l\rhi\u{1b}[?2004h$ ";
        let mut scanner = Scanner::new(NONCE);
        assert_eq!(scanned(&mut scanner, &[text]), [Owned::Text(text.into())]);
        scanner.watch_paste_ends();
        assert_eq!(
            scanned(&mut scanner, &[text]),
            [
                Owned::Text("echo hi\r\n\u{1b}[?2004l".into()),
                Owned::Mark(Mark::InputEnd),
                Owned::Text("\rhi\u{1b}[?2004h".into()),
                Owned::Mark(Mark::InputReady),
                Owned::Text("$ ".into())
            ]
        );
    }

    #[test]
    fn a_readline_shell_reads_from_the_prompt_that_follows_its_installation() {
        let text = format!("{}{}{PASTE_ON}$ ", mark("I;readline;42"), mark("D;0"));
        assert_eq!(
            scanned(&mut Scanner::new(NONCE), &[&text]),
            [
                Owned::Mark(Mark::Installed {
                    typing: super::super::Typing::Readline,
                    shell: Some(42)
                }),
                Owned::Mark(Mark::End(Some(0))),
                Owned::Text("\u{1b}[?2004h".into()),
                Owned::Mark(Mark::InputReady),
                Owned::Text("$ ".into()),
            ]
        );
    }

    proptest! {
        /// However the text is cut into reads, the same marks come out at the same places.
        #[test]
        fn any_cut_gives_the_same_result(cuts in proptest::collection::vec(0usize..200, 0..8)) {
            let text = format!(
                "x{}\u{1b}[?2004ly{}\u{1b}]6973;zz\u{7}{}\u{1b}",
                mark("C"), mark("D;2"), mark("I;readline")
            );
            let mut whole = Scanner::new(NONCE);
            whole.watch_paste_ends();
            let expected = scanned(&mut whole, &[&text]);
            let pieces = crate::output::cut_at(&text, &cuts);
            let mut cut = Scanner::new(NONCE);
            cut.watch_paste_ends();
            prop_assert_eq!(scanned(&mut cut, &pieces), expected);
        }
    }
}
