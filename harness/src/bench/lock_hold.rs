//! Lock holds: the longest the server held a session's state lock (its own figure, logged
//! at shutdown) while reads and waits worked through the worst buffer for it.

use std::time::{Duration, Instant};

use serde_json::json;

use super::calls::{call, complete, field_u64, poll, sh, start};
use super::report::{Metric, ms};
use super::workload::{Servers, Setup, Workload};

/// Bytes of the one line (of 4-byte code points) the lock-hold benchmark retains: as many
/// code points as a buffer may hold.
const LOCK_HOLD_BYTES: u64 = 4 * 1_048_576;

pub const LOCK_HOLD: Workload = Workload {
    name: "lock_hold",
    about: "one line of 1,048,576 4-byte code points (4 MiB, no line end, as many code points \
         as a buffer may hold) retained whole, then terminal_read with tail_lines 1, raw and \
         with strip_ansi, and terminal_wait from 0 for a pattern that matches only at its \
         end; the longest the server held any session's state lock meanwhile is its own \
         figure, logged when it shuts down",
};

/// The longest the server held a session's state lock (its own figure, logged at
/// shutdown) while reads and waits worked through a buffer full of text with no line end:
/// a raw and a stripped `tail_lines`, and a wait whose pattern matches only at the end.
pub async fn lock_hold(servers: &Servers) -> Result<Vec<Metric>, String> {
    let script = format!("yes 😀😀😀😀😀😀😀😀 | tr -d '\\n' | head -c {LOCK_HOLD_BYTES}");
    let setup = Setup {
        name: "lock",
        limits: json!({"max_sessions": 1, "max_records": 2, "buffer_bytes": 16_777_216,
                       "buffer_records": 1_048_576}),
        profiles: json!({"one-line": {"argv": sh(&script)}}),
    };
    let mut mcp = servers.start(&setup).await?;
    let calls = async {
        let sid = start(&mcp, "one-line").await?;
        let s = poll(&mcp, &sid, Duration::from_secs(60), complete).await?;
        if field_u64(&s, "next_cursor")? != LOCK_HOLD_BYTES / 4
            || field_u64(&s, "base_cursor")? != 0
        {
            return Err(format!("the line was not retained whole: {s}"));
        }
        let mut timed = Vec::new();
        for (name, tool, args) in [
            ("tail_raw_call", "terminal_read", json!({"tail_lines": 1})),
            (
                "tail_stripped_call",
                "terminal_read",
                json!({"tail_lines": 1, "strip_ansi": true}),
            ),
            (
                "wait_end_match_call",
                "terminal_wait",
                json!({"cursor": 0, "pattern": "😀{8}$"}),
            ),
        ] {
            let mut args = args;
            args["session_id"] = json!(sid);
            let began = Instant::now();
            call(&mcp, tool, args).await?;
            timed.push(Metric::value(name, "ms", ms(began.elapsed())));
        }
        Ok::<_, String>(timed)
    }
    .await;
    mcp.shutdown().await;
    mcp.finish_stderr(Duration::from_secs(5)).await;
    let mut metrics = calls?;
    let log = mcp.stderr();
    let field = |name: &str| {
        log.lines()
            .filter(|l| l.contains("session state locks"))
            .find_map(|l| {
                l.split_once(&format!("{name}="))?
                    .1
                    .split(' ')
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
            .ok_or_else(|| format!("the server logged no `{name}` at shutdown"))
    };
    metrics.push(Metric::value(
        "longest_lock_hold",
        "ms",
        field("longest_lock_hold_us")? / 1000.0,
    ));
    metrics.push(Metric::value(
        "lock_holds_over_1ms",
        "holds",
        field("lock_holds_over_1ms")?,
    ));
    Ok(metrics)
}
