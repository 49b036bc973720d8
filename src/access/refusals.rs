//! Logging refusals that anyone who can reach the port causes as fast as they like (no
//! token, a foreign `Host` or `Origin`, a spent sign-in code): each kind is logged at most
//! once per `REFUSAL_LOG_EVERY`, its next line saying how many went unlogged in between, so
//! a flood of them cannot fill the server's stderr (under `stdio --web`, the MCP client's
//! log files).

use std::sync::Mutex;
use std::time::Instant;

use crate::limits::REFUSAL_LOG_EVERY;

/// One kind of refusal's log throttle.
pub struct Refusals {
    /// When a line was last logged, and how many refusals went unlogged since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl Default for Refusals {
    fn default() -> Self {
        Self::new()
    }
}

impl Refusals {
    /// Nothing logged yet (const: each kind is a `static`).
    pub const fn new() -> Self {
        Refusals {
            state: Mutex::new((None, 0)),
        }
    }

    /// Log this refusal through `log` (given how many were not logged before it), unless a
    /// line of this kind was logged within `REFUSAL_LOG_EVERY`.
    pub fn log(&self, log: impl FnOnce(u64)) {
        self.log_at(Instant::now(), log);
    }

    fn log_at(&self, now: Instant, log: impl FnOnce(u64)) {
        let unlogged = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let (last, unlogged) = &mut *state;
            if last.is_some_and(|at| now.saturating_duration_since(at) < REFUSAL_LOG_EVERY) {
                *unlogged += 1;
                return;
            }
            *last = Some(now);
            std::mem::take(unlogged)
        };
        log(unlogged);
    }
}

/// The words a throttled line ends with: how many refusals of its kind went unlogged.
pub fn unlogged(count: u64) -> String {
    match count {
        0 => String::new(),
        1 => " (1 more like it since the last line)".to_owned(),
        n => format!(" ({n} more like it since the last line)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period_with_the_count_of_the_rest() {
        let refusals = Refusals::new();
        let start = Instant::now();
        let mut lines = Vec::new();
        for n in 0..1000u32 {
            let at = start + REFUSAL_LOG_EVERY / 100 * n;
            refusals.log_at(at, |unlogged| lines.push(unlogged));
        }
        // 1000 refusals over ten periods: one line per period.
        assert_eq!(lines.len(), 10, "{lines:?}");
        assert_eq!(lines[0], 0);
        assert!(lines[1..].iter().all(|&n| n == 99), "{lines:?}");
    }
}
