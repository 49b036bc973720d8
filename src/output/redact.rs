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
//!
//! A partial line longer than a bound is released but for its last bytes, as many as the
//! longest value has less one (so a value that begins in the part released ends in the
//! text seen, and is replaced whole): that rule too looks only at sizes, and a value cut
//! by it cannot escape.
//!
//! A partial line released before its end (it waited too long, or a shell's mark came
//! after it) may end with the beginning of a value: the end of what was released is kept,
//! and when the rest of the value follows it is replaced by the value's marker. No value
//! is ever whole in the output, whenever its pieces came; what may show is a beginning of
//! one, never more (and only when its pieces came further apart than the hold allows).

use aho_corasick::{AhoCorasick, MatchKind};

use crate::limits::REDACT_HOLD_MAX_BYTES;

/// How much of what is held back to release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    No,
    /// All but what may begin a value (`Redactor::release_all_but_tail`).
    AllButTail,
    All,
}

pub struct Redactor {
    automaton: AhoCorasick,
    markers: Vec<String>,
    /// The partial line held back.
    pending: String,
    /// A carriage return ends a line too (typed input, where Enter is `\r`): values hold
    /// none either.
    cr_ends_lines: bool,
    /// The most of a partial line held back (`REDACT_HOLD_MAX_BYTES`).
    hold_max: usize,
    /// The longest value's length in bytes.
    longest: usize,
    /// Text of a partial line was released (at its newline or by the bound) since
    /// `take_released` was last asked: what is held now began then.
    released: bool,
    /// The end of the line released so far, when it did not end (released by `flush` or
    /// the bound), at most the longest value less one byte: a value that began in it and
    /// ends in what comes next has its rest replaced by its marker, so no value is ever
    /// whole in the output, however its pieces were timed.
    carry: String,
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
            hold_max: REDACT_HOLD_MAX_BYTES,
            longest: secrets.iter().map(|(_, value)| value.len()).max()?,
            released: false,
            carry: String::new(),
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

    /// Whether held text was released before its time ran out (a line's end, the bound)
    /// since this was last asked: the hold of what is held now began then.
    pub fn take_released(&mut self) -> bool {
        std::mem::take(&mut self.released)
    }

    /// Redact the next piece of the stream, appending every complete line to `out`. Of a
    /// partial line longer than `REDACT_HOLD_MAX_BYTES`, all but its last bytes are
    /// released too (a bound on memory that, like the rest, looks only at sizes).
    pub fn push(&mut self, text: &str, out: &mut String) {
        if text.is_empty() {
            return;
        }
        self.pending.push_str(text);
        let line_end = if self.cr_ends_lines {
            text.rfind(['\n', '\r'])
        } else {
            text.rfind('\n')
        };
        if let Some(newline) = line_end {
            let decided = self.pending.len() - (text.len() - newline - 1);
            let pending = std::mem::take(&mut self.pending);
            self.emit(&pending[..decided], out);
            self.pending = pending;
            self.pending.drain(..decided);
            self.released = true;
        }
        if self.pending.len() > self.hold_max {
            self.release_to_tail(out);
        }
    }

    /// Release held text as `flush` says.
    pub fn release(&mut self, flush: Flush, out: &mut String) {
        match flush {
            Flush::No => {}
            Flush::AllButTail => self.release_all_but_tail(out),
            Flush::All => self.flush(out),
        }
    }

    /// The partial line was held as long as a hold lasts, while more of it kept coming:
    /// release it but for what may begin a value (its last bytes, by size alone), which
    /// is held on, so a value whose pieces straddle that moment is still replaced whole.
    fn release_all_but_tail(&mut self, out: &mut String) {
        if self.pending.len() >= self.longest {
            self.release_to_tail(out);
        }
    }

    /// Release the partial line but its last `longest - 1` bytes (to a code point's
    /// start). A value that begins before them ends within the line: the values found in
    /// the whole line that begin there are final, and the release goes on to the end of
    /// one that crosses into them.
    fn release_to_tail(&mut self, out: &mut String) {
        let mut cut = self.pending.len().saturating_sub(self.longest - 1);
        while !self.pending.is_char_boundary(cut) {
            cut -= 1;
        }
        let from = out.len();
        let skip = self.rest_of_carried(&self.pending, out);
        let mut at = skip;
        for found in self.automaton.find_iter(&self.pending[skip..]) {
            let (start, end) = (skip + found.start(), skip + found.end());
            if start >= cut {
                break;
            }
            out.push_str(&self.pending[at..start]);
            out.push_str(&self.markers[found.pattern().as_usize()]);
            at = end;
        }
        let end = cut.max(at);
        out.push_str(&self.pending[at..end]);
        self.pending.drain(..end);
        self.released = true;
        self.carry_on(from, out);
    }

    /// Give up waiting: release the partial line, with the whole values in it replaced.
    pub fn flush(&mut self, out: &mut String) {
        let pending = std::mem::take(&mut self.pending);
        self.emit(&pending, out);
    }

    /// Release `text`, what follows the output released so far: a value begun in the
    /// carried end of that output and ending in `text` has its rest replaced by its
    /// marker, then every value in the rest of `text` is.
    fn emit(&mut self, text: &str, out: &mut String) {
        let from = out.len();
        let skip = self.rest_of_carried(text, out);
        self.replace(&text[skip..], out);
        self.carry_on(from, out);
    }

    /// Where `text` goes on after the rest of a value begun in the carried output (its
    /// marker then written to `out`); 0 when none ends in it.
    fn rest_of_carried(&self, text: &str, out: &mut String) -> usize {
        if self.carry.is_empty() || text.is_empty() {
            return 0;
        }
        // The rest of a value is shorter than the value.
        let mut head = text.len().min(self.longest);
        while !text.is_char_boundary(head) {
            head -= 1;
        }
        let joined = format!("{}{}", self.carry, &text[..head]);
        let carried = self.carry.len();
        let crossing = self
            .automaton
            .find_iter(&joined)
            .find(|found| found.end() > carried)
            .filter(|found| found.start() < carried);
        match crossing {
            Some(found) => {
                out.push_str(&self.markers[found.pattern().as_usize()]);
                found.end() - carried
            }
            None => 0,
        }
    }

    /// `out[from..]` was just released: the carried end of the line goes on with it, or
    /// starts again after a line's end in it.
    fn carry_on(&mut self, from: usize, out: &str) {
        let released = &out[from..];
        let ends = |c: char| c == '\n' || (self.cr_ends_lines && c == '\r');
        match released.rfind(ends) {
            Some(end) => {
                self.carry.clear();
                self.carry.push_str(&released[end + 1..]);
            }
            None => self.carry.push_str(released),
        }
        let max = self.longest - 1;
        if self.carry.len() > max {
            let mut cut = self.carry.len() - max;
            while !self.carry.is_char_boundary(cut) {
                cut += 1;
            }
            self.carry.drain(..cut);
        }
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
        streamed_within(secrets, pieces, REDACT_HOLD_MAX_BYTES)
    }

    /// Streamed, with a partial line held back up to `hold_max` bytes.
    fn streamed_within(secrets: &[(String, String)], pieces: &[&str], hold_max: usize) -> String {
        let mut r = Redactor::new(secrets).unwrap();
        r.hold_max = hold_max;
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
    fn a_partial_line_over_the_bound_is_released_but_for_what_may_begin_a_value() {
        let s = secrets(&["hunter2"]);
        let mut r = Redactor::new(&s).unwrap();
        let mut out = String::new();
        r.push(&"x".repeat(REDACT_HOLD_MAX_BYTES), &mut out);
        assert!(out.is_empty());
        r.push("yhunt", &mut out);
        assert_eq!(
            out.len(),
            REDACT_HOLD_MAX_BYTES - 1,
            "the last 6 bytes are held"
        );
        assert!(r.holding());
        r.push("er2\n", &mut out);
        assert!(out.ends_with("xy[secret:S0]\n"));
        assert!(!r.holding());
        // A value that straddles the bound, in one piece or cut anywhere, is replaced.
        let line = format!(
            "{}token=hunter2{}\n",
            "a".repeat(REDACT_HOLD_MAX_BYTES - 9),
            "b".repeat(5000)
        );
        let want = line.replace("hunter2", "[secret:S0]");
        for cut in [
            0,
            REDACT_HOLD_MAX_BYTES - 5,
            REDACT_HOLD_MAX_BYTES - 1,
            REDACT_HOLD_MAX_BYTES + 2,
        ] {
            assert_eq!(streamed(&s, &[&line[..cut], &line[cut..]]), want, "{cut}");
        }
    }

    #[test]
    fn a_hold_that_ran_out_while_the_line_streams_keeps_what_may_begin_a_value() {
        let s = secrets(&["hunter2hunter2"]);
        let mut r = Redactor::new(&s).unwrap();
        let mut out = String::new();
        r.push("...", &mut out);
        r.release(Flush::AllButTail, &mut out);
        assert_eq!(out, "", "shorter than a value: all held on");
        r.push("......hunter2", &mut out);
        r.release(Flush::AllButTail, &mut out);
        assert_eq!(
            out, "...",
            "the last 13 bytes are held on, whatever they are"
        );
        assert!(r.holding());
        r.push("hunter2\n", &mut out);
        assert_eq!(out, ".........[secret:S0]\n");
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
            out, "abc secret[secret:S0]\n",
            "the rest of a value cut by a flush is replaced: the value is never whole"
        );
        // Cut anywhere, by any number of flushes, and beside other text.
        let s = secrets(&["hunter2hunter2"]);
        for cut in 1..14 {
            let value = "hunter2hunter2";
            let mut r = Redactor::new(&s).unwrap();
            let mut out = String::new();
            r.push(&format!("....{}", &value[..cut]), &mut out);
            r.flush(&mut out);
            r.push(&value[cut..], &mut out);
            r.flush(&mut out);
            r.push(" hunter2 done\nhunter2", &mut out);
            r.flush(&mut out);
            r.push("hunter2\n", &mut out);
            assert!(!out.contains(value), "{cut}: {out:?}");
            assert_eq!(
                out,
                format!(
                    "....{}[secret:S0] hunter2 done\nhunter2[secret:S0]\n",
                    &value[..cut]
                ),
                "{cut}"
            );
        }
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
            hold_max in 1usize..40,
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
            // Also when partial lines outgrow a bound (here a small one).
            let got = streamed_within(&s, &pieces, hold_max);
            prop_assert_eq!(&got, &reference(&s, &text));
            for v in &values {
                prop_assert!(!got.contains(v.as_str()), "{got:?} contains {v:?}");
            }
            // Released after every piece (each came too late, or a mark came between):
            // a value whose pieces were released apart is never whole in the output.
            let mut r = Redactor::new(&s).unwrap();
            let mut got = String::new();
            for piece in &pieces {
                r.push(piece, &mut got);
                r.flush(&mut got);
            }
            for v in &values {
                prop_assert!(!got.contains(v.as_str()), "{got:?} contains {v:?}");
            }
        }
    }
}
