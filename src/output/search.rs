//! Incremental regex search over output as it arrives, in time linear in the output.
//!
//! A lazy DFA (the `regex` crate's engine, `regex-automata`) is fed each new piece of
//! text once, keeping its state between pieces, so nothing is rescanned however small the
//! pieces are. It only answers "has a match ended yet"; once it has, the caller runs the
//! full `Regex` once over the searched region to get the leftmost match and its groups.
//! The output so far is searched as if it ended where it ends now, so `$` and `\b` can
//! match at the current end.

use regex::Regex;
use regex_automata::Input;
use regex_automata::hybrid::LazyStateID;
use regex_automata::hybrid::dfa::{Cache, DFA};

pub struct Search {
    regex: Regex,
    dfa: DFA,
    cache: Cache,
    state: LazyStateID,
    scanned: u64,
}

impl Search {
    pub fn new(pattern: &str) -> Result<Search, String> {
        let regex = Regex::new(pattern).map_err(|e| e.to_string())?;
        let dfa = DFA::new(pattern).map_err(|e| {
            if regex.as_str().contains("\\b") || regex.as_str().contains("\\B") {
                "uses a Unicode word boundary (\\b or \\B), which incremental search cannot \
                 follow; use the ASCII form (?-u:\\b)"
                    .to_owned()
            } else {
                e.to_string()
            }
        })?;
        let mut cache = dfa.create_cache();
        let state = dfa
            .start_state_forward(&mut cache, &Input::new(""))
            .map_err(|e| e.to_string())?;
        Ok(Search {
            regex,
            dfa,
            cache,
            state,
            scanned: 0,
        })
    }

    pub fn regex(&self) -> &Regex {
        &self.regex
    }

    /// Bytes fed so far; each byte of output is fed at most once.
    #[cfg(test)]
    pub fn scanned(&self) -> u64 {
        self.scanned
    }

    /// Feed the next piece of text; true once a match has ended within what was fed.
    /// `at_end`: nothing follows this piece yet, so a match may end exactly at its end.
    pub fn feed(&mut self, text: &str, at_end: bool) -> bool {
        for &byte in text.as_bytes() {
            self.scanned += 1;
            match self.dfa.next_state(&mut self.cache, self.state, byte) {
                Ok(state) => self.state = state,
                // Without quit bytes and with no give-up threshold this does not happen;
                // should it, let the full regex decide.
                Err(_) => return true,
            }
            // Match states are reported one byte late: a match ended before `byte`.
            if self.state.is_match() {
                return true;
            }
        }
        at_end
            && self
                .dfa
                .next_eoi_state(&mut self.cache, self.state)
                .is_ok_and(|state| state.is_match())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(pattern: &str, pieces: &[&str]) -> Option<usize> {
        let mut s = Search::new(pattern).unwrap();
        pieces.iter().position(|p| s.feed(p, true))
    }

    #[test]
    fn finds_matches_split_across_pieces() {
        assert_eq!(feed_all("ready", &["re", "a", "dy\n"]), Some(2));
        assert_eq!(feed_all(">>> $", &["Python\n", ">>", "> "]), Some(2));
        assert_eq!(feed_all(r"exit=(\d+)", &["exit", "=", "4", "2"]), Some(2));
        assert_eq!(feed_all("never", &["nev", "e", "r-not"]), Some(2));
        assert_eq!(feed_all("nope", &["no", "pe"]), Some(1));
        assert_eq!(feed_all("x{3}", &["xx", "yx", "x"]), None);
        assert_eq!(feed_all("(?m)^done$", &["not done yet\n", "done"]), Some(1));
        assert_eq!(feed_all("日本", &["\u{65e5}", "\u{672c}"]), Some(1));
    }

    #[test]
    fn the_end_counts_only_where_nothing_follows_yet() {
        let mut s = Search::new("x$").unwrap();
        assert!(!s.feed("ax", false), "more text follows this piece");
        assert!(!s.feed("b", true));
        assert!(s.feed("x", true));
    }

    #[test]
    fn unicode_word_boundaries_are_refused_with_advice() {
        let e = Search::new(r"\bword\b").err().unwrap();
        assert!(e.contains("(?-u:\\b)"), "{e}");
        assert!(Search::new(r"(?-u:\b)word(?-u:\b)").is_ok());
        assert!(Search::new("(unclosed").is_err());
    }

    /// Work is linear: a flood fed one byte at a time scans each byte exactly once.
    #[test]
    fn each_byte_is_scanned_once_however_small_the_pieces() {
        let mut s = Search::new("needle").unwrap();
        let hay = "hay ".repeat(25_000);
        for c in hay.chars() {
            assert!(!s.feed(c.encode_utf8(&mut [0; 4]), true));
        }
        assert_eq!(s.scanned(), hay.len() as u64);
        assert!(s.feed("needle", true));
        assert_eq!(s.scanned(), hay.len() as u64 + 6);
    }
}
