//! Memory: the server's resident set idle, with sessions running, with buffers full and
//! after they expired (probes between the other workloads, and workloads of their own), and
//! what a child or a client could make it hold: an unterminated OSC title on a PTY,
//! emulators resized to their largest, streams that alternate every few bytes.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::calls::{
    Paging, READ_WAIT_MS, call, complete, end, field_u64, memory_metrics, poll, read_pages,
    rss_kib, settled_rss_kib, sh, start, wait_for,
};
use super::report::{Benchmark, Metric, Status};
use super::workload::{Servers, Setup, Workload};
use crate::client::McpServer;

/// Concurrent `long` sessions for the memory measurement (the default `max_sessions`).
const CONCURRENT_LONG: usize = 8;
/// Full buffers of the memory benchmark, and the 4-byte text that fills them.
const FULL_BUFFERS: usize = 32;
/// The server's global cap on retained code points (`max_records × buffer_records`).
const CAP_TOTAL_RECORDS: u64 = 2_097_152;
/// Bytes of the unterminated OSC title a PTY child writes.
const OSC_BYTES: u64 = 50_000_000;

pub const MEMORY: Workload = Workload {
    name: "memory",
    about: "server VmRSS/VmHWM from /proc/<pid>/status: idle after initialize, with 8 \
         concurrent `long` sessions, after the latency benchmarks; on the throughput server \
         idle, once `flood-1m` exited (its output retained) and after the read and wait \
         benchmarks (still retained); and the server binary's size",
};

pub const MEMORY_AT_REST: Workload = Workload {
    name: "memory_at_rest",
    about: "server VmRSS idle and with 64 idle `long` sessions; then, on a second server \
         (max_records 32, buffer_records 65,536, retention 1 s), idle, with 32 buffers each \
         full of 65,536 4-byte code points (256 KiB: the most text the global cap of \
         2,097,152 retained code points lets 32 sessions hold), and after every session \
         expired (read 1.5 s later, once the server has handed back what they freed), against \
         that server's own idle",
};

pub const MEMORY_OSC_FLOOD: Workload = Workload {
    name: "memory_osc_flood",
    about: "server VmRSS after a PTY child wrote an unterminated OSC title of 50,000,000 bytes",
};

pub const MEMORY_TERMINALS_ENDED: Workload = Workload {
    name: "memory_terminals_ended",
    about: "server VmRSS idle, then after 8 PTY sessions at once each printed 3,000,000 bytes \
         in lines of 100 (their emulators drawing it) and exited, and all were forgotten \
         (read 1.5 s later, once the server has handed back what they freed)",
};

pub const MEMORY_RESIZE: Workload = Workload {
    name: "memory_resize",
    about: "server VmRSS with 8 `cat` PTY sessions resized to 1000×1000 (or the largest square \
         the emulator budget grants, in steps of 50), each in the alternate screen",
};

pub const MEMORY_ALTERNATING: Workload = Workload {
    name: "memory_alternating",
    about: "server VmRSS with one session whose child alternated stdout and stderr 4 bytes at a \
         time for 800,000 bytes, all retained",
};

/// The `memory` benchmark: the resident set of the latency and throughput servers, probed
/// between their workloads, and the size of the server binary.
pub struct Probes {
    metrics: Vec<Metric>,
    failures: Vec<String>,
}

impl Probes {
    pub fn new(server: &Path, binary_bytes: Option<u64>) -> Self {
        let mut probes = Probes {
            metrics: Vec::new(),
            failures: Vec::new(),
        };
        match binary_bytes {
            Some(bytes) => {
                probes
                    .metrics
                    .push(Metric::value("server_binary_size", "bytes", bytes as f64))
            }
            None => probes
                .failures
                .push(format!("cannot stat {}", server.display())),
        }
        probes
    }

    /// Metrics for the benchmark, or why they are missing.
    pub fn take(&mut self, result: Result<Vec<Metric>, String>) {
        match result {
            Ok(metrics) => self.metrics.extend(metrics),
            Err(e) => self.failures.push(e),
        }
    }

    /// The server's resident set now and at its peak, named for `phase`.
    pub fn probe(&mut self, mcp: &McpServer, phase: &str) {
        self.take(memory_metrics(mcp.pid, phase));
    }

    pub fn benchmark(self) -> Benchmark {
        Benchmark {
            name: MEMORY.name.into(),
            description: MEMORY.about.into(),
            status: if self.failures.is_empty() {
                Status::Ok
            } else {
                Status::Failed
            },
            failure: (!self.failures.is_empty()).then(|| self.failures.join("; ")),
            duration_ms: 0,
            metrics: self.metrics,
        }
    }
}

/// Memory with `CONCURRENT_LONG` running `long` sessions; they are ended after.
pub async fn concurrent_long(mcp: &McpServer) -> Result<Vec<Metric>, String> {
    let mut sids = Vec::new();
    let mut outcome = Ok(Vec::new());
    for _ in 0..CONCURRENT_LONG {
        match start(mcp, "long").await {
            Ok(sid) => sids.push(sid),
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }
    if outcome.is_ok() {
        for sid in &sids {
            if let Err(e) = wait_for(mcp, sid, 0, "running", false).await {
                outcome = Err(e);
                break;
            }
        }
    }
    if outcome.is_ok() {
        outcome = memory_metrics(mcp.pid, "eight_long");
    }
    for sid in &sids {
        let ended = end(mcp, sid).await;
        if outcome.is_ok()
            && let Err(e) = ended
        {
            outcome = Err(e);
        }
    }
    outcome.map_err(|e| format!("{CONCURRENT_LONG} concurrent long sessions: {e}"))
}

/// RSS idle and with 64 idle sessions; then, on a second server, idle, with 32 full
/// buffers, and after they all expired. Each buffer holds as many code points as the
/// global caps allow 32 retained sessions (2,097,152 / 32 = 65,536), all 4-byte, so the
/// most text 32 sessions can retain: a buffer of code points is full at 256 KiB of its
/// 1 MiB. The 64 idle sessions need `max_records` 64, which would halve that, hence two
/// servers.
pub async fn memory_at_rest(servers: &Servers) -> Result<Vec<Metric>, String> {
    // 64 retained sessions may hold 32,768 code points each under the global cap.
    let limits = json!({"max_sessions": 64, "max_records": 64,
                        "buffer_records": CAP_TOTAL_RECORDS / 64});
    let mut metrics = servers
        .with(
            &Setup {
                name: "memory",
                limits,
                profiles: json!({}),
            },
            async |mcp| {
                let idle = rss_kib(mcp)?;
                let mut sids = Vec::new();
                for _ in 0..64 {
                    sids.push(start(mcp, "long").await?);
                }
                let sixty_four = rss_kib(mcp)?;
                for sid in &sids {
                    end(mcp, sid).await?;
                }
                Ok(vec![
                    Metric::value("idle_rss", "KiB", idle),
                    Metric::value("sixty_four_idle_sessions_rss", "KiB", sixty_four),
                ])
            },
        )
        .await?;
    let records = CAP_TOTAL_RECORDS / FULL_BUFFERS as u64;
    let limits = json!({"max_sessions": FULL_BUFFERS, "max_records": FULL_BUFFERS,
                        "buffer_bytes": 1_048_576, "buffer_records": records,
                        "retention_seconds": 1});
    let profiles = json!({
        "emoji": {"argv": sh(&format!("yes 😀😀😀😀😀😀😀😀 | tr -d '\\n' | head -c {}", 8 * records))},
    });
    let full = servers
        .with(
            &Setup {
                name: "memory-full",
                limits,
                profiles,
            },
            async |mcp| {
                let idle = rss_kib(mcp)?;
                let mut sids = Vec::new();
                for _ in 0..FULL_BUFFERS {
                    sids.push(start(mcp, "emoji").await?);
                }
                let mut retained = 0;
                for sid in &sids {
                    let s = poll(mcp, sid, Duration::from_secs(30), complete).await?;
                    let from = field_u64(&s, "base_cursor")?;
                    let read = read_pages(mcp, sid, from, Paging::waiting(READ_WAIT_MS)).await?;
                    let (bytes, chars) = (read.bytes, read.code_points);
                    if chars != records {
                        return Err(format!("a buffer holds {chars} code points, not {records}"));
                    }
                    retained += bytes;
                }
                let full = rss_kib(mcp)?;
                // Retention is 1 s: measure once the server has forgotten every session.
                let began = Instant::now();
                loop {
                    let list = call(mcp, "terminal_list", json!({})).await?;
                    if field_u64(&list, "retained")? == 0 {
                        break;
                    }
                    if began.elapsed() > Duration::from_secs(10) {
                        return Err(format!("sessions outlived their retention: {list}"));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let expired = settled_rss_kib(mcp).await?;
                let retained_kib = retained as f64 / 1024.0;
                Ok(vec![
                    Metric::value("full_buffers_idle_rss", "KiB", idle),
                    Metric::value("full_buffers_rss", "KiB", full),
                    Metric::value("full_buffers_retained_text", "KiB", retained_kib),
                    Metric::value("full_buffers_overhead", "KiB", full - retained_kib),
                    Metric::value("after_expiry_rss", "KiB", expired),
                ])
            },
        )
        .await?;
    metrics.extend(full);
    Ok(metrics)
}

/// Terminal sessions printed at once.
const TERMINALS_ENDED: usize = 8;

/// RSS idle, and once `TERMINALS_ENDED` PTY sessions that printed 3 MB each, drawn by their
/// emulators at once, exited and were forgotten: what their emulators freed goes back.
pub async fn terminals_ended(servers: &Servers) -> Result<Vec<Metric>, String> {
    let profiles = json!({
        "print": {"argv": sh("head -c 3000000 /dev/zero | tr '\\0' c | fold -w 100"), "mode": "pty"},
    });
    servers
        .with(
            &Setup {
                name: "terminals-ended",
                limits: json!({}),
                profiles,
            },
            async |mcp| {
                let idle = rss_kib(mcp)?;
                let mut sids = Vec::new();
                for _ in 0..TERMINALS_ENDED {
                    sids.push(start(mcp, "print").await?);
                }
                for sid in &sids {
                    poll(mcp, sid, Duration::from_secs(120), complete).await?;
                    // The screen has drawn all of it.
                    call(mcp, "terminal_screen", json!({"session_id": sid})).await?;
                }
                for sid in &sids {
                    end(mcp, sid).await?;
                }
                let ended = settled_rss_kib(mcp).await?;
                Ok(vec![
                    Metric::value("idle_rss", "KiB", idle),
                    Metric::value("after_terminals_rss", "KiB", ended),
                ])
            },
        )
        .await
}

/// RSS while a PTY child writes an unterminated OSC title of 50 MB.
pub async fn osc_flood(servers: &Servers) -> Result<Vec<Metric>, String> {
    let script =
        format!("printf '\\033]0;'; head -c {OSC_BYTES} /dev/zero | tr '\\0' a; sleep 100");
    let profiles = json!({"osc": {"argv": sh(&script), "mode": "pty"}});
    servers
        .with(
            &Setup {
                name: "osc",
                limits: json!({}),
                profiles,
            },
            async |mcp| {
                let idle = rss_kib(mcp)?;
                let sid = start(mcp, "osc").await?;
                poll(mcp, &sid, Duration::from_secs(180), |s| {
                    s.get("next_cursor")
                        .and_then(Value::as_u64)
                        .is_some_and(|c| c >= OSC_BYTES)
                })
                .await?;
                let flooded = rss_kib(mcp)?;
                end(mcp, &sid).await?;
                Ok(vec![
                    Metric::value("idle_rss", "KiB", idle),
                    Metric::value("after_osc_rss", "KiB", flooded),
                    Metric::value("growth", "KiB", flooded - idle),
                ])
            },
        )
        .await
}

/// RSS of 8 `cat` PTY sessions asked for 1000×1000 (the largest the emulator budget
/// grants when refused), with the alternate screen in use too.
pub async fn resize(servers: &Servers) -> Result<Vec<Metric>, String> {
    let limits = json!({"max_sessions": 8, "max_records": 8});
    let profiles = json!({"cat": {"argv": ["/bin/cat"], "mode": "pty"}});
    servers
        .with(
            &Setup {
                name: "resize",
                limits,
                profiles,
            },
            async |mcp| {
                let idle = rss_kib(mcp)?;
                let mut refused = 0;
                let mut size = 1000u64;
                let mut sids = Vec::new();
                for _ in 0..8 {
                    let sid = start(mcp, "cat").await?;
                    loop {
                        let raw = mcp
                            .call(
                                "terminal_resize",
                                &json!({"session_id": sid, "rows": size, "cols": size}),
                            )
                            .await?;
                        if raw.pointer("/structuredContent/ok") == Some(&Value::Bool(true)) {
                            break;
                        }
                        refused += 1;
                        size -= 50;
                        if size == 0 {
                            return Err(format!("every size was refused: {raw}"));
                        }
                    }
                    call(
                        mcp,
                        "terminal_write",
                        json!({"session_id": sid, "text": "\u{1b}[?1049hx\n"}),
                    )
                    .await?;
                    sids.push(sid);
                }
                for sid in &sids {
                    poll(mcp, sid, Duration::from_secs(10), |s| {
                        s.get("next_cursor")
                            .and_then(Value::as_u64)
                            .is_some_and(|c| c > 0)
                    })
                    .await?;
                }
                let resized = rss_kib(mcp)?;
                for sid in &sids {
                    end(mcp, sid).await?;
                }
                Ok(vec![
                    Metric::value("granted_size", "cells", (size * size) as f64),
                    Metric::value("refused_requests", "calls", refused as f64),
                    Metric::value("idle_rss", "KiB", idle),
                    Metric::value("resized_rss", "KiB", resized),
                    Metric::value("growth", "KiB", resized - idle),
                ])
            },
        )
        .await
}

/// RSS of one session whose child alternates stdout and stderr 4 bytes at a time, 800 KB.
pub async fn alternating(servers: &Servers) -> Result<Vec<Metric>, String> {
    let limits = json!({"max_sessions": 1, "max_records": 1, "buffer_records": 1_048_576});
    let script =
        "import os\nfor i in range(100000):\n    os.write(1, b'oooo')\n    os.write(2, b'eeee')\n";
    let profiles = json!({"alternate": {"argv": ["/usr/bin/python3", "-c", script]}});
    servers
        .with(
            &Setup {
                name: "alternating",
                limits,
                profiles,
            },
            async |mcp| {
                let idle = rss_kib(mcp)?;
                let sid = start(mcp, "alternate").await?;
                let s = poll(mcp, &sid, Duration::from_secs(60), complete).await?;
                let full = rss_kib(mcp)?;
                let from = field_u64(&s, "base_cursor")?;
                let runs = read_pages(mcp, &sid, from, Paging::default())
                    .await?
                    .records;
                Ok(vec![
                    Metric::value(
                        "retained_records",
                        "records",
                        (field_u64(&s, "next_cursor")? - field_u64(&s, "base_cursor")?) as f64,
                    ),
                    Metric::value("same_stream_runs", "runs", runs as f64),
                    Metric::value("idle_rss", "KiB", idle),
                    Metric::value("retained_rss", "KiB", full),
                    Metric::value("growth", "KiB", full - idle),
                ])
            },
        )
        .await
}
