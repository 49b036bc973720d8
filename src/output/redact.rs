//! Redaction of secret values from a stream of output text (SPEC §12): every occurrence of
//! a value becomes `[secret:NAME]` before the text reaches the buffer, the screen or a
//! recording, also when a value arrives split across reads.
//!
//! Matching is one Aho–Corasick automaton over all values (leftmost-longest, so of two
//! values that overlap the one starting first wins, and of two starting together the longer),
//! in time linear in the text. What may still become a value — the longest end of the text
//! that is a proper prefix of some value, tracked per value with a KMP automaton so it too
//! costs constant time per byte — is held back until the next piece decides it, or until
//! `flush` gives up waiting (the caller flushes after at most 50 ms).

use aho_corasick::{AhoCorasick, MatchKind};

pub struct Redactor {
    automaton: AhoCorasick,
    markers: Vec<String>,
    prefixes: Vec<Prefix>,
    /// Text held back: it may be the start of a value.
    pending: String,
}

/// The longest end of the text seen so far that is a proper prefix of one value (KMP).
struct Prefix {
    value: Vec<u8>,
    /// `failure[i]`: length of the longest proper border of `value[..=i]`.
    failure: Vec<usize>,
    matched: usize,
}

impl Prefix {
    fn new(value: &str) -> Self {
        let value = value.as_bytes().to_vec();
        let mut failure = vec![0; value.len()];
        let mut k = 0;
        for i in 1..value.len() {
            while k > 0 && value[i] != value[k] {
                k = failure[k - 1];
            }
            if value[i] == value[k] {
                k += 1;
            }
            failure[i] = k;
        }
        Prefix {
            value,
            failure,
            matched: 0,
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            while self.matched > 0 && self.value[self.matched] != b {
                self.matched = self.failure[self.matched - 1];
            }
            if self.value[self.matched] == b {
                self.matched += 1;
            }
            // A whole value is not a prefix still waiting to be decided.
            if self.matched == self.value.len() {
                self.matched = self.failure[self.matched - 1];
            }
        }
    }
}

impl Redactor {
    /// A redactor for `(name, value)` pairs; `None` when there is nothing to redact.
    /// Values are non-empty (the config guarantees at least 4 bytes).
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
            prefixes: secrets
                .iter()
                .map(|(_, value)| Prefix::new(value))
                .collect(),
            pending: String::new(),
        })
    }

    /// Whether text is held back, waiting to be decided.
    pub fn holding(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Redact the next piece of the stream, appending what is decided to `out`.
    pub fn push(&mut self, text: &str, out: &mut String) {
        if text.is_empty() {
            return;
        }
        for prefix in &mut self.prefixes {
            prefix.feed(text.as_bytes());
        }
        let mut buffer = std::mem::take(&mut self.pending);
        buffer.push_str(text);
        let held = self
            .prefixes
            .iter()
            .map(|p| p.matched)
            .max()
            .unwrap_or(0)
            .min(buffer.len());
        // A value that may continue past the end starts at `undecided` or later (it is a
        // char boundary: values are UTF-8 and begin with a leading byte); every match
        // starting before it is final.
        let undecided = buffer.len() - held;
        let rest = self.replace(&buffer, undecided, out);
        self.pending = buffer[rest..].to_owned();
    }

    /// Give up waiting: emit what is held back, replacing only whole values in it.
    pub fn flush(&mut self, out: &mut String) {
        let buffer = std::mem::take(&mut self.pending);
        let rest = self.replace(&buffer, buffer.len(), out);
        out.push_str(&buffer[rest..]);
        for prefix in &mut self.prefixes {
            prefix.matched = 0;
        }
    }

    /// Replace the matches in `text` that start before `decided`, appending the text
    /// before `decided` (or the end of the last match) to `out`; returns where the
    /// undecided rest begins.
    fn replace(&self, text: &str, decided: usize, out: &mut String) -> usize {
        let mut at = 0;
        for found in self.automaton.find_iter(text) {
            if found.start() >= decided {
                break;
            }
            out.push_str(&text[at..found.start()]);
            out.push_str(&self.markers[found.pattern().as_usize()]);
            at = found.end();
        }
        let rest = decided.max(at);
        out.push_str(&text[at..rest]);
        rest
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
        r.push("say hun", &mut out);
        assert_eq!(out, "say ", "a possible prefix is held back");
        assert!(r.holding());
        r.push("gry", &mut out);
        assert_eq!(out, "say hungry", "and released once it cannot be a value");
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
        r.push("value", &mut out);
        assert_eq!(
            out, "abc secretvalue",
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
            let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (text.len() + 1)).filter(|c| text.is_char_boundary(*c)).collect();
            bounds.sort_unstable();
            bounds.dedup();
            let mut pieces = Vec::new();
            let mut at = 0;
            for b in bounds {
                pieces.push(&text[at..b]);
                at = b;
            }
            pieces.push(&text[at..]);
            let got = streamed(&s, &pieces);
            prop_assert_eq!(&got, &reference(&s, &text));
            for v in &values {
                prop_assert!(!got.contains(v.as_str()), "{got:?} contains {v:?}");
            }
        }
    }
}
