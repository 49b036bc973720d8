//! Waiting for a program to ask for input: how soon `terminal_wait` with `until_input`
//! answers after a prompt appears, beside the `idle_ms` approach (no output for 300 ms),
//! and the server's CPU while such a wait polls a session that asks nothing.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::calls::{call, field_u64, sh, start};
use super::report::{Metric, ms};
use super::workload::{Servers, Setup, Workload};
use crate::client::McpServer;

pub const INPUT_WAIT: Workload = Workload {
    name: "input_wait",
    about: "a `/bin/sh` loop on pipes that, for each line it reads, sleeps 50 ms and prints a \
         prompt stamped with the time it printed it, then reads again: from that stamp to \
         the answer of terminal_wait with `until_input` (`until_input_ms`), and with \
         `idle_ms` 300 (`idle_300_ms`); and the server's CPU, in percent of one core, while \
         a 5 s `until_input` wait polls a session that never reads (`sleep`)",
};

/// The asker's prompt: `T=<nanoseconds since the epoch>> `.
const ASKER: &str = "while read -r line; do sleep 0.05; printf 'T=%s> ' \"$(date +%s%N)\"; done";

/// Prompts answered, then a quiet session polled.
pub async fn input_wait(servers: &Servers, n: usize) -> Result<Vec<Metric>, String> {
    let setup = Setup {
        name: "input_wait",
        limits: json!({}),
        profiles: json!({"asker": {"argv": sh(ASKER)},
                         "quiet": {"argv": ["/bin/sleep", "600"]}}),
    };
    servers
        .with(&setup, async |mcp| {
            let sid = start(mcp, "asker").await?;
            let mut cursor = 0;
            let mut until_input = Vec::new();
            let mut idle = Vec::new();
            for i in 0..n * 2 {
                let wait = if i % 2 == 0 {
                    json!({"until_input": true})
                } else {
                    json!({"idle_ms": 300})
                };
                let (latency, next) = prompt_to_answer(mcp, &sid, cursor, wait).await?;
                cursor = next;
                if i % 2 == 0 {
                    until_input.push(latency);
                } else {
                    idle.push(latency);
                }
            }
            let quiet = start(mcp, "quiet").await?;
            let before = mcp.cpu_ticks()?;
            let began = Instant::now();
            let answer = call(
                mcp,
                "terminal_wait",
                json!({"session_id": quiet, "until_input": true, "timeout_ms": 5000}),
            )
            .await?;
            if answer.get("outcome").and_then(Value::as_str) != Some("timeout") {
                return Err(format!("a wait on `sleep` did not time out: {answer}"));
            }
            let ticks = mcp.cpu_ticks()?.saturating_sub(before);
            let cpu_percent = ticks as f64 * 10.0 / ms(began.elapsed()) * 100.0;
            Ok(vec![
                Metric::distribution("until_input_ms", "ms", &until_input),
                Metric::distribution("idle_300_ms", "ms", &idle),
                Metric::value("polling_cpu", "%", cpu_percent),
            ])
        })
        .await
}

/// Send the asker a line and wait as `wait` says; from the stamp of the prompt it printed
/// to the wait's answer, and the cursor after the prompt.
async fn prompt_to_answer(
    mcp: &McpServer,
    sid: &str,
    cursor: u64,
    wait: Value,
) -> Result<(f64, u64), String> {
    call(
        mcp,
        "terminal_write",
        json!({"session_id": sid, "text": "\n"}),
    )
    .await?;
    let mut args = json!({"session_id": sid, "cursor": cursor, "timeout_ms": 10_000});
    for (key, value) in wait.as_object().into_iter().flatten() {
        args[key] = value.clone();
    }
    let answer = call(mcp, "terminal_wait", args).await?;
    let answered = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?;
    let outcome = answer.get("outcome").and_then(Value::as_str);
    if !matches!(outcome, Some("awaiting_input" | "idle")) {
        return Err(format!("a wait for the prompt answered {answer}"));
    }
    let page = call(
        mcp,
        "terminal_read",
        json!({"session_id": sid, "cursor": cursor}),
    )
    .await?;
    let text: String = page
        .get("records")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("text").and_then(Value::as_str))
        .collect();
    let stamp = text
        .rsplit("T=")
        .next()
        .and_then(|rest| rest.strip_suffix("> "))
        .and_then(|n| n.parse::<u128>().ok())
        .ok_or_else(|| format!("no prompt stamp in {text:?} ({answer})"))?;
    let latency = answered.as_nanos().saturating_sub(stamp) as f64 / 1e6;
    Ok((latency, field_u64(&page, "next_cursor")?))
}

/// A PTY session flooding: `terminal_status` on it and waits that time out must stay
/// prompt while its output is ingested and fed to the terminal emulator.
pub const PTY_FLOOD: Workload = Workload {
    name: "pty_flood",
    about: "a terminal session running `yes` with a 60-byte line (as fast as the terminal \
         takes it): `terminal_status` on it every 5 ms for 3 s, and three terminal_waits \
         for a pattern that never comes with timeout_ms 2000, timed from the call to the \
         answer (`wait_overrun` is the answer's lateness past the timeout; where the output from \
         a wait's cursor was evicted before its search reached it, the client notes the gap \
         and waits again from the newest output, and only the wait that timed out is timed)",
};

pub async fn pty_flood(servers: &Servers) -> Result<Vec<Metric>, String> {
    let setup = Setup {
        name: "pty_flood",
        // Room for the flood between a status call and the wait that starts at its cursor,
        // on a loaded machine.
        limits: json!({"max_sessions": 2, "max_records": 2, "buffer_bytes": 16_777_216}),
        profiles: json!({"flood": {"argv": ["/usr/bin/yes", "012345678901234567890123456789012345678901234567890123456789"],
                                   "mode": "pty"}}),
    };
    servers
        .with(&setup, async |mcp| {
            let sid = start(mcp, "flood").await?;
            let mut status = Vec::new();
            let began = Instant::now();
            while began.elapsed() < Duration::from_secs(3) {
                let t = Instant::now();
                call(mcp, "terminal_status", json!({"session_id": sid})).await?;
                status.push(ms(t.elapsed()));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let mut overrun = Vec::new();
            for _ in 0..3 {
                let now = call(mcp, "terminal_status", json!({"session_id": sid})).await?;
                let mut cursor = field_u64(&now, "next_cursor")?;
                // As a client does in a flood: where the output from its cursor was evicted
                // before the search reached it (the flood outran it), it notes the gap and
                // waits again from the newest output; each wait is timed from its own call.
                let mut tries = 0;
                let (answer, took) = loop {
                    tries += 1;
                    let args = json!({"session_id": sid, "cursor": cursor,
                                      "pattern": "never-in-the-flood", "timeout_ms": 2000});
                    let t = Instant::now();
                    let answer = mcp.call_structured("terminal_wait", &args).await?;
                    let took = t.elapsed();
                    match answer.pointer("/error/code").and_then(Value::as_str) {
                        Some("CURSOR_EXPIRED") if tries < 100 => {
                            cursor = field_u64(&answer["error"], "next_cursor")?;
                        }
                        _ => break (answer, took),
                    }
                };
                if answer.get("outcome").and_then(Value::as_str) != Some("timeout") {
                    return Err(format!("a wait in the flood answered {answer}"));
                }
                overrun.push(ms(took) - 2000.0);
            }
            Ok(vec![
                Metric::distribution("status_in_flood", "ms", &status),
                Metric::distribution("wait_overrun", "ms", &overrun),
            ])
        })
        .await
}
