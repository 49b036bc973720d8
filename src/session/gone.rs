//! Sessions the server has let go of: the IDs of the latest, with when and why, so a call
//! naming one is told what became of it; and what an ID it never gave most likely is (one
//! from an earlier run of the server: an agent holding IDs across a restart of its server).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use super::state::timestamp;
use crate::errors::{ErrorCode, ToolError};

/// Sessions let go of whose IDs are kept (48 bytes each).
const KEPT: usize = 4096;

/// Why a session was let go of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// `terminal_forget`.
    Forgotten,
    /// Its retention period after it ended passed.
    Expired,
}

pub struct Gone {
    /// When this server started.
    started: SystemTime,
    /// The latest sessions let go of, oldest first: ID, when, why.
    latest: Mutex<VecDeque<(u128, SystemTime, Why)>>,
    /// Some were let go of before the latest `KEPT`: an ID not among them may be theirs.
    older: AtomicBool,
}

impl Gone {
    pub fn new() -> Self {
        Gone {
            started: SystemTime::now(),
            latest: Mutex::new(VecDeque::new()),
            older: AtomicBool::new(false),
        }
    }

    /// Session `id` was let go of, for `why`, `at` that time (a session past its retention
    /// period is let go of lazily: at when that period ended).
    pub fn record(&self, id: &str, why: Why, at: SystemTime) {
        let Some(id) = parse(id) else {
            return;
        };
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        if latest.len() == KEPT {
            latest.pop_front();
            self.older.store(true, Ordering::Relaxed);
        }
        latest.push_back((id, at, why));
    }

    /// The error for a call naming session `id`, which the server does not hold;
    /// `retention_seconds` is the owner's retention period.
    pub fn not_found(&self, id: &str, retention_seconds: u64) -> ToolError {
        let found = parse(id).and_then(|wanted| {
            let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
            latest
                .iter()
                .rev()
                .find(|(id, _, _)| *id == wanted)
                .map(|&(_, at, why)| (at, why))
        });
        let started = timestamp(self.started);
        let what = match found {
            Some((at, Why::Forgotten)) => format!(
                "terminal_forget forgot it at {}; terminal_list shows the sessions retained",
                timestamp(at)
            ),
            Some((at, Why::Expired)) => format!(
                "it was discarded once it had ended retention_seconds ({retention_seconds} s) \
                 before, at {}; terminal_list shows the sessions retained",
                timestamp(at)
            ),
            None if !self.older.load(Ordering::Relaxed) => format!(
                "this server, started at {started}, never had it. An ID from an earlier run \
                 of the server (a client that restarted it) names a session that ended with \
                 that run: start a new one; terminal_list shows this server's"
            ),
            None => format!(
                "this server (started at {started}) forgot it, discarded it after its \
                 retention period, or never had it (an ID from an earlier run of the server \
                 names a session that ended with that run); terminal_list shows the \
                 sessions retained"
            ),
        };
        ToolError::new(
            ErrorCode::SessionNotFound,
            format!("no session {id}: {what}"),
        )
    }
}

/// A session ID as the server gives them (32 lowercase hex digits, as the tools' schemas
/// require), as a number.
fn parse(id: &str) -> Option<u128> {
    let shaped = id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    shaped.then(|| u128::from_str_radix(id, 16).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(gone: &Gone, id: &str) -> String {
        gone.not_found(id, 300).message
    }

    #[test]
    fn each_id_says_what_became_of_it() {
        let gone = Gone::new();
        let forgotten = "0123456789abcdef0123456789abcdef";
        let expired = "fedcba9876543210fedcba9876543210";
        let never = "00000000000000000000000000000001";
        gone.record(forgotten, Why::Forgotten, SystemTime::now());
        gone.record(expired, Why::Expired, SystemTime::now());
        assert!(message(&gone, forgotten).contains(": terminal_forget forgot it at 20"));
        assert!(message(&gone, expired).contains("retention_seconds (300 s) before, at 20"));
        assert!(message(&gone, never).contains("never had it. An ID from an earlier run"));
    }

    #[test]
    fn past_the_ids_kept_an_unknown_id_may_be_an_older_one() {
        let gone = Gone::new();
        for n in 0..=KEPT as u128 {
            gone.record(&format!("{n:032x}"), Why::Forgotten, SystemTime::now());
        }
        assert!(message(&gone, &format!("{:032x}", 1)).contains("forgot it at"));
        let first = message(&gone, &format!("{:032x}", 0));
        assert!(first.contains("forgot it, discarded it after its retention period, or never"));
        assert_eq!(gone.latest.lock().unwrap().len(), KEPT);
    }
}
