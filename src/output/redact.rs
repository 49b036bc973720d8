//! Redaction of secret values from a stream of output text (SPEC §12): every occurrence of
//! a value becomes `[secret:NAME]` before the text reaches the buffer, the screen or a
//! recording, also when a value arrives split across reads.
//!
//! Matching is one Aho–Corasick automaton over all values (leftmost-longest, so of two
//! values that overlap the one starting first wins, and of two starting together the
//! longer), in time linear in the text.
//!
//! What is held back does not depend on the text: values never hold a newline, so every
//! complete line is decided and released at once, and the trailing partial line — whatever
//! it holds — waits until its newline comes or the caller gives up waiting (`flush`). A
//! hold-back that depended on whether the text could begin a value would tell anyone who
//! times the output which prefixes are right.

use aho_corasick::{AhoCorasick, MatchKind};

use crate::limits::REDACT_HOLD_MAX_BYTES;

pub struct Redactor {
    automaton: AhoCorasick,
    markers: Vec<String>,
    /// The partial line held back.
    pending: String,
    /// A carriage return ends a line too (typed input, where Enter is `\r`): values hold
    /// none either.
    cr_ends_lines: bool,
}

impl Redactor {
    /// A redactor for `(name, value)` pairs; `None` when there is nothing to redact.
    /// Values are non-empty and hold no newline (the config guarantees both).
    pub fn new(secrets: &[(String, String)]) -> Option<Redactor> {
        if secrets.is_empty() {
            return None;
        }
        let automaton = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(secrets.iter().map(|(_, value)| value))
            .ok()?;
        Some(Redactor {
            automaton,
            markers: secrets
                .iter()
                .map(|(name, _)| format!("[secret:{name}]"))
                .collect(),
            pending: String::new(),
            cr_ends_lines: false,
        })
    }

    /// A redactor of typed input (what a recording shows of it): a line ends at `\r` or
    /// `\n`, as Enter types either.
    pub fn for_input(secrets: &[(String, String)]) -> Option<Redactor> {
        Redactor::new(secrets).map(|r| Redactor {
            cr_ends_lines: true,
            ..r
        })
    }

    /// `text`, whole, with every value replaced by its marker.
    pub fn replaced<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        if self.automaton.find(text).is_none() {
            return std::borrow::Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        self.replace(text, &mut out);
        std::borrow::Cow::Owned(out)
    }

    /// Whether a partial line is held back.
    pub fn holding(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Redact the next piece of the stream, appending every complete line to `out`. A
    /// partial line longer than `REDACT_HOLD_MAX_BYTES` is released too (a bound on memory
    /// that, like the rest, looks only at sizes).
    pub fn push(&mut self, text: &str, out: &mut String) {
        if text.is_empty() {
            return;
        }
        self.pending.push_str(text);
        if self.pending.len() > REDACT_HOLD_MAX_BYTES {
            self.flush(out);
            return;
        }
        let line_end = if self.cr_ends_lines {
            text.rfind(['\n', '\r'])
        } else {
            text.rfind('\n')
        };
        if let Some(newline) = line_end {
            let decided = self.pending.len() - (text.len() - newline - 1);
            self.replace(&self.pending[..decided], out);
            self.pending.drain(..decided);
        }
    }

    /// Give up waiting: release the partial line, with the whole values in it replaced.
    pub fn flush(&mut self, out: &mut String) {
        let pending = std::mem::take(&mut self.pending);
        self.replace(&pending, out);
    }

    /// Append `text` to `out` with every value replaced by its marker.
    fn replace(&self, text: &str, out: &mut String) {
        let mut at = 0;
        for found in self.automaton.find_iter(text) {
            out.push_str(&text[at..found.start()]);
            out.push_str(&self.markers[found.pattern().as_usize()]);
            at = found.end();
        }
        out.push_str(&text[at..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn secrets(values: &[&str]) -> Vec<(String, String)> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("S{i}"), (*v).to_owned()))
            .collect()
    }

    /// The reference: one leftmost-longest replacement over the whole text.
    fn reference(secrets: &[(String, String)], text: &str) -> String {
        let ac = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(secrets.iter().map(|(_, v)| v))
            .unwrap();
        let markers: Vec<String> = secrets
            .iter()
            .map(|(n, _)| format!("[secret:{n}]"))
            .collect();
        ac.replace_all(text, &markers)
    }

    fn streamed(secrets: &[(String, String)], pieces: &[&str]) -> String {
        let mut r = Redactor::new(secrets).unwrap();
        let mut out = String::new();
        for piece in pieces {
            r.push(piece, &mut out);
        }
        r.flush(&mut out);
        out
    }

    #[test]
    fn values_split_across_pieces_are_replaced() {
        let s = secrets(&["hunter2"]);
        assert_eq!(
            streamed(&s, &["pw: hun", "te", "r2 ok"]),
            "pw: [secret:S0] ok"
        );
        let mut r = Redactor::new(&s).unwrap();
        let mut out = String::new();
        r.push("a\nsay hun", &mut out);
        assert_eq!(out, "a\n", "the partial line is held back");
        assert!(r.holding());
        r.push("gry\nb", &mut out);
        assert_eq!(out, "a\nsay hungry\n", "and released with its newline");
        assert!(r.holding());
    }

    /// What is held back is the partial line, whatever it holds: a prefix of a value and
    /// text that could never be one wait alike.
    #[test]
    fn the_hold_back_does_not_depend_on_the_text() {
        let s = secrets(&["hunter2secret"]);
        for candidate in ["h", "hu", "x", "hunter2secre", "zzzz"] {
            let mut r = Redactor::new(&s).unwrap();
            let mut out = String::new();
            r.push(candidate, &mut out);
            assert_eq!(out, "", "{candidate}");
            assert!(r.holding(), "{candidate}");
        }
    }

    #[test]
    fn typed_input_ends_its_lines_at_enter_and_a_whole_text_is_replaced_at_once() {
        let s = secrets(&["hunter2"]);
        let mut r = Redactor::for_input(&s).unwrap();
        let mut out = String::new();
        r.push("hun", &mut out);
        assert_eq!(out, "");
        r.push("ter2\rls", &mut out);
        assert_eq!(out, "[secret:S0]\r", "released at Enter");
        r.push("\n", &mut out);
        assert_eq!(out, "[secret:S0]\rls\n");
        assert!(!r.holding());
        // Output keeps its lines: a carriage return alone releases nothing.
        let mut r = Redactor::new(&s).unwrap();
        let mut out = String::new();
        r.push("hunter2\r", &mut out);
        assert_eq!(out, "");
        assert_eq!(r.replaced("mysql -phunter2 db"), "mysql -p[secret:S0] db");
        assert!(matches!(
            r.replaced("plain"),
            std::borrow::Cow::Borrowed("plain")
        ));
    }

    #[test]
    fn a_partial_line_over_the_bound_is_released() {
        let s = secrets(&["hunter2"]);
        let mut r = Redactor::new(&s).unwrap();
        let mut out = String::new();
        r.push(&"x".repeat(REDACT_HOLD_MAX_BYTES), &mut out);
        assert!(out.is_empty());
        r.push("yhunter2", &mut out);
        assert!(out.ends_with("y[secret:S0]"));
        assert!(!r.holding());
    }

    #[test]
    fn overlapping_values_follow_leftmost_longest() {
        let s = secrets(&["abcd", "cdef", "ab"]);
        assert_eq!(streamed(&s, &["xabcdefx"]), "x[secret:S0]efx");
        assert_eq!(streamed(&s, &["xa", "b", "c", "x"]), "x[secret:S2]cx");
        assert_eq!(streamed(&s, &["zcdef"]), "z[secret:S1]");
    }

    #[test]
    fn flush_emits_a_prefix_that_never_completed() {
        let s = secrets(&["secretvalue"]);
        let mut r = Redactor::new(&s).unwrap();
        let mut out = String::new();
        r.push("abc secret", &mut out);
        r.flush(&mut out);
        assert_eq!(out, "abc secret");
        r.push("value\n", &mut out);
        assert_eq!(
            out, "abc secretvalue\n",
            "a value cut by a flush is not matched"
        );
    }

    fn value_strategy() -> impl Strategy<Value = String> {
        // Letters that no marker contains, so a replacement can never form a value.
        proptest::collection::vec(
            prop_oneof![Just('a'), Just('b'), Just('é'), Just('😀')],
            1..6,
        )
        .prop_map(|cs| cs.into_iter().collect())
    }

    proptest! {
        /// Random output with embedded values, cut at random points: the streamed redaction
        /// equals the reference replacement and contains no value.
        #[test]
        fn streaming_equals_the_reference(
            values in proptest::collection::vec(value_strategy(), 1..4),
            parts in proptest::collection::vec((0usize..4, proptest::collection::vec(prop_oneof![Just('a'), Just('b'), Just('x'), Just('\n'), Just('é')], 0..4)), 0..12),
            cuts in proptest::collection::vec(0usize..200, 0..10),
        ) {
            let s: Vec<(String, String)> = values.iter().enumerate().map(|(i, v)| (format!("S{i}"), v.clone())).collect();
            let mut text = String::new();
            for (which, filler) in &parts {
                text.extend(filler.iter());
                if let Some(v) = values.get(*which) {
                    text.push_str(v);
                }
            }
            let pieces = super::super::cut_at(&text, &cuts);
            let got = streamed(&s, &pieces);
            prop_assert_eq!(&got, &reference(&s, &text));
            for v in &values {
                prop_assert!(!got.contains(v.as_str()), "{got:?} contains {v:?}");
            }
        }
    }
}
