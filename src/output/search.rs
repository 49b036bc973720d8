//! Incremental regex search over output as it arrives, in time linear in the output.
//!
//! A lazy DFA (the `regex` crate's engine, `regex-automata`) is fed each new piece of
//! text once, keeping its state between pieces, so nothing is rescanned however small the
//! pieces are. It only answers "has a match ended yet"; once it has, the caller runs the
//! full `Regex` once over the searched region to get the leftmost match and its groups:
//! over the text fed, ending where it ended when the match was seen to end there, so the
//! match is always found by that one look. The output so far is searched as if it ended
//! where it ends now, so `$` and `\b` can match at the current end; a search never starts
//! over, so `^` and `\b` never see a start of text that is not one.
//!
//! Where every match begins with one of a few literals (`ready`, `flood total: \d+`), a
//! SIMD literal search (the crate's prefilter) skips the text in which no match can
//! begin, as the crate's own searches do; the DFA steps only from where a literal starts.
//! A pattern that is plain text (`ready`, `echo: line 7`: one literal, no group) needs
//! no automaton at all: it is searched for as bytes, across the cuts between pieces, and
//! costs a few microseconds to start where the automata cost tens.
//!
//! Memory is bounded: each automaton compiled from a pattern is at most `PATTERN_NFA_BYTES`,
//! each lazy DFA's cache `PATTERN_DFA_CACHE_BYTES` (cleared and refilled past it), a
//! pattern's whole search at most `PATTERN_MAX_BYTES`, and the searches of client patterns
//! held at once at most `PATTERNS_TOTAL_BYTES` together (each is charged when compiled and
//! gives its charge back when dropped). The automata of the patterns used last are kept
//! for the next search of the same pattern, at most `RECENT_PATTERNS` of them and
//! `RECENT_PATTERNS_BYTES` together.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use regex_automata::hybrid::LazyStateID;
use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::meta;
use regex_automata::nfa::thompson;
use regex_automata::util::prefilter::Prefilter;
use regex_automata::util::syntax;
use regex_automata::{Input, MatchKind, Span};
use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Hir, HirKind};

use crate::errors::ToolError;
use crate::limits::{
    PATTERN_COMPILES_AT_ONCE, PATTERN_DFA_CACHE_BYTES, PATTERN_MAX_BYTES, PATTERN_NFA_BYTES,
    PATTERNS_TOTAL_BYTES, QUICK_PATTERN_MAX_BYTES, RECENT_PATTERNS, RECENT_PATTERNS_BYTES,
};

/// Bytes charged by the searches of client patterns alive now.
static PATTERNS_HELD: AtomicUsize = AtomicUsize::new(0);

/// Why a client's pattern cannot be searched.
#[derive(Debug)]
pub enum PatternError {
    /// Not a regex this search can run.
    Unusable(String),
    /// Its search would hold more than `PATTERN_MAX_BYTES`.
    TooLarge,
    /// The searches of other patterns in flight hold the budget.
    Busy { held: usize },
}

impl From<PatternError> for ToolError {
    fn from(error: PatternError) -> ToolError {
        let why = match error {
            PatternError::Unusable(why) => format!("is not a usable regex: {why}"),
            PatternError::TooLarge => format!(
                "compiles to a search larger than the {} KiB one pattern may hold (a large \
                 repetition of a Unicode class such as \\w{{100}} does); repeat less, or use \
                 ASCII classes such as (?-u:\\w)",
                PATTERN_MAX_BYTES / 1024
            ),
            PatternError::Busy { held } => format!(
                "cannot be searched now: the patterns of the waits in flight hold {} KiB of the \
                 {} KiB the server gives all patterns together; wait until some have answered, \
                 or use a smaller pattern",
                held / 1024,
                PATTERNS_TOTAL_BYTES / 1024
            ),
        };
        ToolError::invalid_argument("pattern", why)
    }
}

/// Client patterns compiled at once: compiling a large one takes a while and, until a limit
/// stops it, memory; more at once would only share the same cores.
static COMPILING: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(PATTERN_COMPILES_AT_ONCE);

/// What a pattern compiles to, shared by every search of it (each has its own caches).
#[derive(Clone)]
struct Automata {
    regex: meta::Regex,
    dfa: DFA,
    universal_start: bool,
}

impl Automata {
    fn bytes(&self) -> usize {
        let prefilter = self.dfa.get_config().get_prefilter();
        self.regex.memory_usage()
            + self.dfa.memory_usage()
            + self.dfa.get_nfa().memory_usage()
            + prefilter.map_or(0, Prefilter::memory_usage)
    }
}

/// The patterns used last and their automata, the last used first. An agent waits on
/// the same few patterns again and again (its prompt, `\d+ passed`), and compiling one with
/// a Unicode class (`\d`, `\w`) costs more than the rest of a short wait: each of its three
/// automata fills a 10,000-entry table. At most `RECENT_PATTERNS` are kept, holding at most
/// `RECENT_PATTERNS_BYTES` together (the patterns' own text counted), so what stays once
/// the waits are over is bounded.
static RECENT: Mutex<Recent> = Mutex::new(Recent(VecDeque::new()));

fn recent() -> std::sync::MutexGuard<'static, Recent> {
    RECENT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// (pattern, its automata, their bytes), the last used first.
struct Recent(VecDeque<(Box<str>, Automata, usize)>);

impl Recent {
    /// The automata of `pattern` when it was compiled lately; it becomes the last used.
    fn recall(&mut self, pattern: &str) -> Option<Automata> {
        let at = self.0.iter().position(|(p, ..)| &**p == pattern)?;
        let entry = self.0.remove(at)?;
        let automata = entry.1.clone();
        self.0.push_front(entry);
        Some(automata)
    }

    /// Keep `pattern`'s automata, forgetting the least lately used past the bounds.
    fn remember(&mut self, pattern: &str, automata: &Automata) {
        let bytes = pattern.len() + automata.bytes();
        if bytes > RECENT_PATTERNS_BYTES {
            return;
        }
        self.0.retain(|(p, ..)| &**p != pattern);
        self.0.push_front((pattern.into(), automata.clone(), bytes));
        self.0.truncate(RECENT_PATTERNS);
        while self.0.iter().map(|(.., bytes)| bytes).sum::<usize>() > RECENT_PATTERNS_BYTES {
            self.0.pop_back();
        }
    }
}

/// A search's share of the budget, given back when it is dropped.
struct Charge(usize);

impl Drop for Charge {
    fn drop(&mut self) {
        PATTERNS_HELD.fetch_sub(self.0, Ordering::SeqCst);
    }
}

/// A match, as byte ranges of the searched text.
#[derive(Debug, PartialEq)]
pub struct Leftmost {
    pub whole: Range<usize>,
    /// Groups 1.., none where a group took no part.
    pub groups: Vec<Option<Range<usize>>>,
}

pub struct Search {
    engine: Engine,
    /// What a client's pattern holds of the budget.
    _charge: Option<Charge>,
}

// One per wait or command in flight, never in a collection: a box would only add an
// allocation to every search with automata.
#[allow(clippy::large_enum_variant)]
enum Engine {
    Text(Text),
    Automata(Stepper),
}

/// A pattern that is plain text, searched for as bytes.
struct Text {
    finder: memchr::memmem::Finder<'static>,
    /// The end of the text fed, at most one byte shorter than the pattern: where a match
    /// that the next piece completes may begin.
    tail: Vec<u8>,
}

impl Text {
    /// The search of `hir` when it is one literal (no class, repetition, look-around or
    /// group); its matches are exactly where its bytes occur.
    fn of(hir: &Hir) -> Option<Text> {
        match hir.kind() {
            HirKind::Literal(literal) => Text::new(&literal.0),
            _ => None,
        }
    }

    /// The search of `pattern` when no character of it means anything to a regex (so it
    /// parses to itself as one literal), found without parsing it.
    fn plain(pattern: &str) -> Option<Text> {
        let plain = !pattern.chars().any(regex_syntax::is_meta_character);
        plain.then(|| Text::new(pattern.as_bytes())).flatten()
    }

    fn new(literal: &[u8]) -> Option<Text> {
        (!literal.is_empty()).then(|| Text {
            finder: memchr::memmem::Finder::new(literal).into_owned(),
            // Never more: the tail, and at most as many bytes of a piece after it.
            tail: Vec::with_capacity(2 * (literal.len() - 1)),
        })
    }

    fn feed(&mut self, piece: &[u8]) -> bool {
        let keep = self.finder.needle().len() - 1;
        if !self.tail.is_empty() {
            // A match across the cut lies within the tail and the piece's first bytes.
            let tail = self.tail.len();
            self.tail.extend_from_slice(&piece[..piece.len().min(keep)]);
            if self.finder.find(&self.tail).is_some() {
                self.tail.clear();
                return true;
            }
            self.tail.truncate(tail);
        }
        if self.finder.find(piece).is_some() {
            self.tail.clear();
            return true;
        }
        if piece.len() >= keep {
            self.tail.clear();
        } else {
            let over = (self.tail.len() + piece.len()).saturating_sub(keep);
            self.tail.drain(..over);
        }
        self.tail
            .extend_from_slice(&piece[piece.len().saturating_sub(keep)..]);
        false
    }

    /// The text, and its tail: twice its length, which it holds while a cut is looked across.
    fn bytes(&self) -> usize {
        3 * self.finder.needle().len() + std::mem::size_of::<Text>()
    }
}

/// A pattern's automata, stepped through the text fed.
struct Stepper {
    /// For the leftmost match and its groups, once the DFA saw a match end.
    regex: meta::Regex,
    dfa: DFA,
    cache: Cache,
    state: LazyStateID,
    /// The start state does not depend on the text before it (no look-behind at the
    /// pattern's start), so a skip need not compute a new one.
    universal_start: bool,
    /// Bytes the DFA stepped through; the rest of what was fed was skipped.
    stepped: u64,
}

impl Search {
    /// The pattern is parsed once, and its literal prefixes extracted once, for both the
    /// DFA and the full regex. Both are built without the `regex` crate's costlier parts
    /// (a fully compiled DFA, its own literal extraction): a wait or a command's markers
    /// pay tens of microseconds to start instead of hundreds.
    pub fn new(pattern: &str) -> Result<Search, String> {
        Search::build(pattern).map_err(|e| match e {
            PatternError::Unusable(why) => why,
            other => ToolError::from(other).message,
        })
    }

    /// A client's pattern: built as `new` builds, refused when its search would hold more
    /// than `PATTERN_MAX_BYTES`, and charged against `PATTERNS_TOTAL_BYTES` for as long as
    /// it lives. Compiling a large pattern takes a while: see `compile_for_client`.
    pub fn for_client(pattern: &str) -> Result<Search, PatternError> {
        Search::build(pattern)?.charged()
    }

    /// This search, charged against `PATTERNS_TOTAL_BYTES` for as long as it lives.
    fn charged(mut self) -> Result<Search, PatternError> {
        let charge = self.bytes();
        if charge > PATTERN_MAX_BYTES {
            return Err(PatternError::TooLarge);
        }
        let taken = PATTERNS_HELD.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| {
            (held + charge <= PATTERNS_TOTAL_BYTES).then_some(held + charge)
        });
        match taken {
            Ok(_) => {
                self._charge = Some(Charge(charge));
                Ok(self)
            }
            Err(held) => Err(PatternError::Busy { held }),
        }
    }

    /// `for_client`, off the async thread and at most `PATTERN_COMPILES_AT_ONCE` at a time;
    /// a short pattern of plain text (`builds_quickly`), or one compiled lately, where it is.
    pub async fn compile_for_client(pattern: &str) -> Result<Search, ToolError> {
        if let Some(text) = Text::plain(pattern) {
            return Search::text(text).charged().map_err(ToolError::from);
        }
        let recalled = recent().recall(pattern);
        if let Some(automata) = recalled {
            let search = Search::with(automata).and_then(Search::charged);
            return search.map_err(ToolError::from);
        }
        // Not recalled: compiled anew, without looking among the recent ones again.
        if builds_quickly(pattern) {
            return Search::anew_for_client(pattern).map_err(ToolError::from);
        }
        let stopped = || ToolError::internal("compiling the pattern stopped");
        let _turn = COMPILING.acquire().await.map_err(|_| stopped())?;
        let pattern = pattern.to_owned();
        tokio::task::spawn_blocking(move || Search::anew_for_client(&pattern))
            .await
            .map_err(|_| stopped())?
            .map_err(ToolError::from)
    }

    /// What the search may come to hold: for plain text, the text and the tail it keeps;
    /// else its automata, the full regex's caches (its pike VM and backtracker, measured at
    /// most about its own size again), and both lazy DFA caches at their capacity.
    fn bytes(&self) -> usize {
        match &self.engine {
            Engine::Text(text) => text.bytes(),
            Engine::Automata(automata) => {
                2 * automata.regex.memory_usage()
                    + automata.dfa.memory_usage()
                    + automata.dfa.get_nfa().memory_usage()
                    + 2 * PATTERN_DFA_CACHE_BYTES
            }
        }
    }

    /// `for_client` compiled now, not looked for among the recent ones.
    fn anew_for_client(pattern: &str) -> Result<Search, PatternError> {
        Search::build_anew(pattern)?.charged()
    }

    /// The search of `pattern`, with the automata it compiled to lately if it did.
    fn build(pattern: &str) -> Result<Search, PatternError> {
        let recalled = recent().recall(pattern);
        match recalled {
            Some(automata) => Search::with(automata),
            None => Search::build_anew(pattern),
        }
    }

    /// The search of `pattern` compiled now; its automata are kept for the next search.
    fn build_anew(pattern: &str) -> Result<Search, PatternError> {
        if let Some(text) = Text::plain(pattern) {
            return Ok(Search::text(text));
        }
        let hir = syntax::parse(pattern).map_err(|e| PatternError::Unusable(e.to_string()))?;
        if let Some(text) = Text::of(&hir) {
            return Ok(Search::text(text));
        }
        let automata = Search::compile(pattern, &hir)?;
        let search = Search::with(automata.clone())?;
        recent().remember(pattern, &automata);
        Ok(search)
    }

    fn text(text: Text) -> Search {
        Search {
            engine: Engine::Text(text),
            _charge: None,
        }
    }

    fn compile(pattern: &str, hir: &Hir) -> Result<Automata, PatternError> {
        let unusable = |e: &dyn std::fmt::Display| PatternError::Unusable(e.to_string());
        let (prefilter, only_literals) = prefix_prefilter(hir);
        let config = meta::Config::new()
            .nfa_size_limit(Some(PATTERN_NFA_BYTES))
            .hybrid_cache_capacity(PATTERN_DFA_CACHE_BYTES)
            .dfa(false);
        // A pattern that is only literals is left to the regex's own literal search,
        // which needs no automaton at all; any other is given the prefilter made here.
        let config = if only_literals {
            config
        } else {
            config.auto_prefilter(false).prefilter(prefilter.clone())
        };
        let regex = meta::Regex::builder()
            .configure(config)
            .build_from_hir(hir)
            .map_err(|e| match e.size_limit() {
                Some(_) => PatternError::TooLarge,
                None => unusable(&e),
            })?;
        let nfa = thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .nfa_size_limit(Some(PATTERN_NFA_BYTES))
                    .which_captures(thompson::WhichCaptures::None),
            )
            .build_from_hir(hir)
            .map_err(|e| match e.size_limit() {
                Some(_) => PatternError::TooLarge,
                None => unusable(&e),
            })?;
        let dfa = DFA::builder()
            .configure(
                DFA::config()
                    .prefilter(prefilter)
                    .cache_capacity(PATTERN_DFA_CACHE_BYTES),
            )
            .build_from_nfa(nfa)
            .map_err(|_| dfa_error(pattern))?;
        let universal_start = dfa.get_nfa().look_set_prefix_any().is_empty();
        Ok(Automata {
            regex,
            dfa,
            universal_start,
        })
    }

    fn with(automata: Automata) -> Result<Search, PatternError> {
        let Automata {
            regex,
            dfa,
            universal_start,
        } = automata;
        let mut cache = dfa.create_cache();
        let state = dfa
            .start_state_forward(&mut cache, &Input::new(""))
            .map_err(|e| PatternError::Unusable(e.to_string()))?;
        Ok(Search {
            engine: Engine::Automata(Stepper {
                regex,
                dfa,
                cache,
                state,
                universal_start,
                stepped: 0,
            }),
            _charge: None,
        })
    }

    /// The leftmost-first match in `text`.
    pub fn leftmost(&self, text: &str) -> Option<Leftmost> {
        match &self.engine {
            Engine::Text(plain) => {
                let at = plain.finder.find(text.as_bytes())?;
                Some(Leftmost {
                    whole: at..at + plain.finder.needle().len(),
                    groups: Vec::new(),
                })
            }
            Engine::Automata(automata) => automata.leftmost(text),
        }
    }

    #[cfg(test)]
    pub fn stepped(&self) -> u64 {
        match &self.engine {
            Engine::Text(_) => 0,
            Engine::Automata(automata) => automata.stepped,
        }
    }

    /// Feed the next piece of text; true once a match has ended within what was fed.
    /// `at_end`: nothing follows this piece yet, so a match may end exactly at its end.
    pub fn feed(&mut self, text: &str, at_end: bool) -> bool {
        match &mut self.engine {
            Engine::Text(plain) => plain.feed(text.as_bytes()),
            Engine::Automata(automata) => automata.feed(text, at_end),
        }
    }
}

impl Stepper {
    fn leftmost(&self, text: &str) -> Option<Leftmost> {
        let mut captures = self.regex.create_captures();
        self.regex.search_captures(&Input::new(text), &mut captures);
        let whole = captures.get_match()?.range();
        let groups = (1..captures.group_len())
            .map(|group| captures.get_group(group).map(|span| span.range()))
            .collect();
        Some(Leftmost { whole, groups })
    }

    fn feed(&mut self, text: &str, at_end: bool) -> bool {
        let hay = text.as_bytes();
        let mut at = 0;
        while at < hay.len() {
            // In the start state no match is under way: skip to where one may begin.
            if self.state.is_start()
                && let Some(skip_to) = self.next_candidate(hay, at)
            {
                at = skip_to;
                if !self.universal_start {
                    match self
                        .dfa
                        .start_state_forward(&mut self.cache, &Input::new(hay).range(at..))
                    {
                        Ok(state) => self.state = state,
                        Err(_) => return true,
                    }
                }
                continue;
            }
            let byte = hay[at];
            // A tagged state (start, match, dead), or a transition not computed yet, takes
            // the checked path that computes it.
            let known = (!self.state.is_tagged())
                .then(|| self.dfa.next_state_untagged(&self.cache, self.state, byte))
                .filter(|next| !next.is_unknown());
            let next = match known {
                Some(next) => next,
                None => match self.dfa.next_state(&mut self.cache, self.state, byte) {
                    Ok(next) => next,
                    // Without quit bytes and with no give-up threshold this does not
                    // happen; should it, let the full regex decide.
                    Err(_) => return true,
                },
            };
            self.state = next;
            at += 1;
            self.stepped += 1;
            // Match states are reported one byte late: a match ended before `byte`.
            if next.is_match() {
                return true;
            }
        }
        at_end
            && self
                .dfa
                .next_eoi_state(&mut self.cache, self.state)
                .is_ok_and(|state| state.is_match())
    }

    /// Where the prefilter says a match may begin next, when that is past `at`. Without a
    /// candidate in the piece, the end of it that could hold the beginning of a literal cut
    /// by the piece's end is still stepped through.
    fn next_candidate(&self, hay: &[u8], at: usize) -> Option<usize> {
        let prefilter = self.dfa.get_config().get_prefilter()?;
        let to = match prefilter.find(hay, Span::from(at..hay.len())) {
            Some(span) => span.start,
            None => hay
                .len()
                .saturating_sub(prefilter.max_needle_len().saturating_sub(1)),
        };
        (to > at).then_some(to)
    }
}

/// Whether `pattern` is plain text (searched for as bytes, built in microseconds however
/// long), or short plain text with at most anchors, groups, alternation and `*+?` (`\$ $`,
/// `(yes|no)`): nothing whose automaton grows with a Unicode class (`.`, `[…]`, `\w`,
/// `\p{…}`), a counted repetition (`{n}`) or a flag (`(?i)`), so that its search builds in
/// at most about a tenth of a millisecond (`QUICK_PATTERN_MAX_BYTES`).
fn builds_quickly(pattern: &str) -> bool {
    if pattern.contains("(?") {
        return false;
    }
    let mut plain = true;
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '.' | '[' | '{' => return false,
            // An escaped punctuation character is itself; a letter names a class, a
            // boundary or a code point.
            '\\' if !chars.next().is_some_and(|c| c.is_ascii_punctuation()) => return false,
            '(' | ')' | '|' | '*' | '+' | '?' | '^' | '$' => plain = false,
            _ => {}
        }
    }
    plain || pattern.len() <= QUICK_PATTERN_MAX_BYTES
}

/// The literals a match must begin with, searched for where no match is under way, when
/// a search for them is fast. As the `regex` crate extracts them, but giving up sooner on
/// a cross product of classes (a marker's digits would make a thousand literals, cut back
/// to the same prefix at ten times the cost). Also whether every match is one of those
/// literals.
fn prefix_prefilter(hir: &Hir) -> (Option<Prefilter>, bool) {
    let mut prefixes = Extractor::new()
        .kind(ExtractKind::Prefix)
        .limit_total(64)
        .extract(hir);
    let only_literals = prefixes.is_finite() && prefixes.is_exact();
    prefixes.optimize_for_prefix_by_preference();
    let prefilter = prefixes
        .literals()
        .and_then(|literals| Prefilter::new(MatchKind::LeftmostFirst, literals))
        .filter(Prefilter::is_fast);
    (prefilter, only_literals)
}

/// Why the DFA of a pattern the full regex accepts cannot be built: a Unicode word
/// boundary, which it cannot follow (with advice), or too little room in its cache.
fn dfa_error(pattern: &str) -> PatternError {
    if pattern.contains("\\b") || pattern.contains("\\B") {
        PatternError::Unusable(
            "uses a Unicode word boundary (\\b or \\B), which incremental search cannot \
             follow; use the ASCII form (?-u:\\b)"
                .to_owned(),
        )
    } else {
        PatternError::TooLarge
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use regex::Regex;

    #[test]
    fn plain_text_is_known_without_parsing_as_its_parse_would_say() {
        for pattern in ["echo: line 7", "漢字 ok", "a b\tc", "100%", "x"] {
            let text = Text::plain(pattern).expect(pattern);
            let hir = syntax::parse(pattern).unwrap();
            assert!(matches!(hir.kind(), HirKind::Literal(l) if &*l.0 == pattern.as_bytes()));
            assert_eq!(text.finder.needle(), pattern.as_bytes());
        }
        for pattern in [
            "", "a.b", "a|b", "(x)", r"\d", "a-b", "a#b", "x~", "[", "a&b",
        ] {
            assert!(Text::plain(pattern).is_none(), "{pattern}");
        }
    }

    proptest! {
        /// Whatever the text, a pattern taken as plain is exactly the literal its parse is.
        #[test]
        fn a_plain_pattern_parses_to_itself(pattern in "\\PC{1,12}") {
            if let Some(text) = Text::plain(&pattern) {
                let hir = syntax::parse(&pattern).unwrap();
                let same = matches!(hir.kind(), HirKind::Literal(l) if &*l.0 == pattern.as_bytes());
                prop_assert!(same, "{:?}", hir);
                prop_assert_eq!(text.finder.needle(), pattern.as_bytes());
            }
        }
    }

    /// Plain text is built where it is asked for; anything whose automaton may grow is
    /// handed to a thread.
    #[test]
    fn only_short_plain_patterns_build_on_the_worker() {
        let quick = [
            "ready",
            r"\$ $",
            "(yes|no)",
            "^echo: line 5$",
            "漢字",
            "a+b*c?",
            r"\.\{",
            // Plain text, however long.
            &"x".repeat(4 * QUICK_PATTERN_MAX_BYTES),
        ];
        for pattern in quick {
            assert!(builds_quickly(pattern), "{pattern}");
        }
        let long = "x|".repeat(QUICK_PATTERN_MAX_BYTES / 2 + 1);
        let slow = [
            ".",
            r"\w+",
            "[a-z]",
            "a{3}",
            "(?i)ready",
            r"\p{L}",
            r"\x41",
            r"\bword",
            &long,
        ];
        for pattern in slow {
            assert!(!builds_quickly(pattern), "{pattern}");
        }
    }

    /// A pattern compiled lately is not compiled again: its automata are recalled, the last
    /// used kept longest, none too large, and the search made from them finds what a fresh
    /// one finds.
    #[test]
    fn patterns_compiled_lately_are_recalled_within_bounds() {
        let mut recent = Recent(VecDeque::new());
        let compiled =
            |pattern: &str| Search::compile(pattern, &syntax::parse(pattern).unwrap()).unwrap();
        let typical = [r"flood total: \d+", r"(?i)error|warning", r"\$ $"];
        for pattern in typical {
            recent.remember(pattern, &compiled(pattern));
        }
        // The first one, used again, outlives the others.
        assert!(recent.recall(typical[0]).is_some());
        for n in 0..RECENT_PATTERNS - 1 {
            let pattern = format!("p{n}");
            recent.remember(&pattern, &compiled(&pattern));
        }
        assert_eq!(recent.0.len(), RECENT_PATTERNS);
        assert!(recent.recall(typical[0]).is_some());
        assert!(recent.recall(typical[1]).is_none());

        // Large automata push the least lately used out; too large ones are not kept.
        let words = compiled(r"\w+@\w+");
        let fit = RECENT_PATTERNS_BYTES / words.bytes();
        for n in 0..fit + 1 {
            recent.remember(
                &format!(r"\w+@\w+|{n}"),
                &compiled(&format!(r"\w+@\w+|{n}")),
            );
        }
        let held: usize = recent.0.iter().map(|(.., bytes)| bytes).sum();
        assert!(held <= RECENT_PATTERNS_BYTES, "{held}");
        assert!(recent.recall(typical[0]).is_none());
        assert!(recent.recall(&format!(r"\w+@\w+|{fit}")).is_some());
        let large = compiled(r"\w{20}");
        recent.remember(r"\w{20}", &large);
        assert!(
            recent.recall(r"\w{20}").is_none(),
            "{} bytes kept",
            large.bytes()
        );

        let text = "x flood total: 12 y flood total: 3";
        recent.remember(typical[0], &compiled(typical[0]));
        let mut again = Search::with(recent.recall(typical[0]).unwrap()).unwrap();
        let mut fresh = Search::with(compiled(typical[0])).unwrap();
        assert_eq!(again.leftmost(text), fresh.leftmost(text));
        assert_eq!(again.leftmost(text).unwrap().whole, 2..17);
        assert_eq!(again.feed(text, false), fresh.feed(text, false));
    }

    /// One test for all of the budget: it is shared by the whole process.
    #[test]
    fn client_patterns_are_bounded_each_and_together() {
        let refused = Search::for_client(r"\w{100}\W{100}").err().unwrap();
        assert!(matches!(refused, PatternError::TooLarge), "{refused:?}");
        let message = ToolError::from(refused).message;
        assert!(message.contains("(?-u:\\w)"), "{message}");
        assert!(matches!(
            Search::for_client("(unclosed"),
            Err(PatternError::Unusable(_))
        ));

        let large = Search::for_client(r"\w{20}").unwrap();
        let each = large.bytes();
        assert!((1 << 20..=PATTERN_MAX_BYTES).contains(&each), "{each}");
        let mut held = vec![large];
        let busy = loop {
            match Search::for_client(r"\w{20}") {
                Ok(search) => held.push(search),
                Err(e) => break e,
            }
            assert!(held.len() <= PATTERNS_TOTAL_BYTES / each, "never refused");
        };
        assert!(matches!(busy, PatternError::Busy { .. }), "{busy:?}");
        assert!(held.len() >= PATTERNS_TOTAL_BYTES / each - 1);
        // Patterns built for the server's own use are not charged.
        assert!(Search::new(r"\w{20}").is_ok());
        // A pattern compiled lately (here just now, uncharged) is charged when recalled.
        assert!(Search::new(r"\d+ charged").is_ok());
        let mut small = Vec::new();
        let busy = loop {
            match Search::for_client(r"\d+ charged") {
                Ok(search) => small.push(search),
                Err(e) => break e,
            }
            // Each is charged at least its two caches' room.
            let most = PATTERNS_TOTAL_BYTES / (2 * PATTERN_DFA_CACHE_BYTES);
            assert!(small.len() <= most, "never refused");
        };
        assert!(matches!(busy, PatternError::Busy { .. }), "{busy:?}");
        // So it is when a wait's compiling recalls it.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let busy = runtime
            .block_on(Search::compile_for_client(r"\d+ charged"))
            .err()
            .unwrap();
        assert!(busy.message.contains("cannot be searched now"), "{busy:?}");
        drop(small);
        held.pop();
        assert!(
            Search::for_client(r"\w{20}").is_ok(),
            "a freed share is free"
        );
        drop(held);
        assert_eq!(PATTERNS_HELD.load(Ordering::SeqCst), 0);
    }

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

    /// Work is linear: however small the pieces, no byte is stepped through twice; and
    /// where no match can begin, the literal search skips the text.
    #[test]
    fn no_byte_is_stepped_twice_and_text_without_a_match_start_is_skipped() {
        let hay = "hay ".repeat(25_000);
        let mut s = Search::new("needles?").unwrap();
        for c in hay.chars() {
            assert!(!s.feed(c.encode_utf8(&mut [0; 4]), true));
        }
        assert!(s.stepped() <= hay.len() as u64, "{}", s.stepped());
        assert!(s.feed("needle", true));

        let mut s = Search::new("needles?").unwrap();
        assert!(!s.feed(&hay, true));
        assert!(s.stepped() < 16, "stepped {} of {}", s.stepped(), hay.len());
        assert!(s.feed("needle", true));
    }

    /// Plain text needs no automaton; anything else, a group included, has one.
    #[test]
    fn plain_text_is_searched_for_as_bytes() {
        let text = |pattern: &str| matches!(Search::new(pattern).unwrap().engine, Engine::Text(_));
        for pattern in ["ready", "echo: line 7", "日本", r"\$ ", "(?m)done", "a"] {
            assert!(text(pattern), "{pattern}");
        }
        for pattern in ["(ready)", "ready$", "(?i)ready", "a|b", "", r"\d"] {
            assert!(!text(pattern), "{pattern}");
        }
        // A match cut anywhere, the pattern overlapping itself, pieces shorter than it.
        assert_eq!(feed_all("abab", &["xaba", "bab"]), Some(1));
        assert_eq!(feed_all("abab", &["a", "b", "a", "c", "abab"]), Some(4));
        assert_eq!(feed_all("abab", &["ab", "a", "", "b"]), Some(3));
        assert_eq!(feed_all("abcd", &["ab", "c", "xd", "abc"]), None);
        let s = Search::new("ab").unwrap();
        let found = s.leftmost("xxabab").unwrap();
        assert_eq!((found.whole, found.groups), (2..4, vec![]));
    }

    /// Patterns with and without a literal prefix (the prefilter's skips), with look-behind
    /// at their start (a skip must compute the start state anew), greedy tails and `$`.
    const PATTERNS: &[&str] = &[
        "ab+c",
        "(?m)^ab",
        "abc$",
        r"b\d+",
        "日本",
        "a|ca",
        r"(?-u:\b)cab",
        "[ab]c{2}",
        "xyz",
        // A match at the end of a piece that the next piece undoes, while a longer one
        // goes on through it; and look-behind at a piece's start that is no text's start.
        "x$|xy+z",
        r"^x|(?-u:\b)y",
        "(?m)^y+$",
        // Plain text, overlapping itself or one byte long.
        "abab",
        "aab",
        "c",
    ];

    /// Patterns with groups that may or may not take part, and alternations whose leftmost
    /// alternative is not the longest.
    const GROUPED: &[&str] = &[
        "(a)|(b)",
        "a(b)?c",
        "(a+)(b*)",
        "(?m)^(\\d)$",
        "(日)(本)?",
        "a|ab",
        "(?:ab|a)(c)?",
        "(\\d+) (\\w)",
        "x(y)z",
    ];

    proptest! {
        /// However the text is cut, a match is first reported in the piece where the
        /// shortest prefix of the text that holds a match ends.
        #[test]
        fn pieces_report_the_first_match_where_the_whole_text_has_it(
            pattern in proptest::sample::select(PATTERNS),
            text in "[abcxyz1日本\n ]{0,200}",
            cuts in proptest::collection::vec(0usize..120, 0..40),
        ) {
            let mut ends: Vec<usize> = cuts
                .into_iter()
                .map(|c| c.min(text.len()))
                .filter(|&c| text.is_char_boundary(c))
                .chain([text.len()])
                .collect();
            ends.sort_unstable();
            ends.dedup();
            let regex = Regex::new(pattern).unwrap();
            let expected = ends.iter().position(|&end| regex.is_match(&text[..end]));
            let mut search = Search::new(pattern).unwrap();
            let mut start = 0;
            let mut found = None;
            for (i, &end) in ends.iter().enumerate() {
                if search.feed(&text[start..end], true) {
                    found = Some(i);
                    break;
                }
                start = end;
            }
            prop_assert_eq!(found, expected, "pieces ending at {:?}", ends);
            // The caller finds it by one look at the text fed, ending where it ended: the
            // whole-text search of that prefix.
            if let Some(i) = found {
                let prefix = &text[..ends[i]];
                let located = search.leftmost(prefix).map(|m| m.whole);
                prop_assert_eq!(located, regex.find(prefix).map(|m| m.range()));
            }
        }

        /// The leftmost match and its groups are the `regex` crate's.
        #[test]
        fn the_leftmost_match_and_its_groups_are_the_regex_crates(
            pattern in proptest::sample::select(GROUPED),
            text in "[abc1日本\n ]{0,200}",
        ) {
            let regex = Regex::new(pattern).unwrap();
            let expected = regex.captures(&text).map(|c| {
                let groups = c.iter().skip(1).map(|g| g.map(|m| m.range())).collect::<Vec<_>>();
                Leftmost { whole: c.get(0).unwrap().range(), groups }
            });
            prop_assert_eq!(Search::new(pattern).unwrap().leftmost(&text), expected);
        }
    }
}
