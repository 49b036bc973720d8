//! The workloads measured beside a floor from the same run: cold start against a minimal
//! rmcp server, first output and capture against the OS doing the same in-process, round
//! trips against a no-op tool call, a storm of paused floods, and memory at rest, full and
//! after expiry; plus the memory a child or client could make the server hold (an
//! unterminated OSC on a PTY, emulators resized to their largest, alternating streams).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{
    Benchmark, Metric, call, echo_samples, end, failed, field_str, field_u64, mb_per_s, measure,
    ms, start, start_server, untapped, write_config,
};
use crate::client::McpServer;
use crate::floor;

/// Sessions of the storm, and the client tasks reading them.
const STORM_SESSIONS: usize = 64;
const STORM_READERS: usize = 8;
/// Lines of `flood` each storm session writes (100 bytes each, plus the summary line).
const STORM_LINES: u64 = 2_000;
/// Full buffers of the memory benchmark, and the 4-byte text that fills them.
const FULL_BUFFERS: usize = 32;
/// The server's global cap on retained code points (`max_records × buffer_records`).
const CAP_TOTAL_RECORDS: u64 = 2_097_152;
/// Lines of 3-byte CJK text the CJK read benchmark reads (13 code points, 37 bytes each).
const CJK_LINES: u64 = 70_000;
const CJK_LINE: &str = "中文字符测试中文字符测试\n";
/// Bytes of the one line (of 4-byte code points) the lock-hold benchmark retains: as many
/// code points as a buffer may hold.
const LOCK_HOLD_BYTES: u64 = 4 * 1_048_576;
/// Bytes of the unterminated OSC title a PTY child writes.
const OSC_BYTES: u64 = 50_000_000;

fn sh(script: &str) -> Value {
    json!(["/bin/sh", "-c", script])
}

async fn status(mcp: &McpServer, sid: &str) -> Result<Value, String> {
    call(mcp, "terminal_status", json!({"session_id": sid})).await
}

async fn poll(
    mcp: &McpServer,
    sid: &str,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Result<Value, String> {
    let began = Instant::now();
    loop {
        let s = status(mcp, sid).await?;
        if done(&s) {
            return Ok(s);
        }
        if began.elapsed() > within {
            return Err(format!("not done within {} ms: {s}", within.as_millis()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn complete(s: &Value) -> bool {
    s.get("output_complete") == Some(&Value::Bool(true))
}

/// Run `work` on a server of its own (config `name`); the server is shut down whatever
/// `work` returned.
async fn on_server(
    (server, root, config_dir): (&Path, &Path, &Path),
    name: &str,
    (limits, profiles): (Value, Value),
    work: impl AsyncFnOnce(&McpServer) -> Result<Vec<Metric>, String>,
) -> Result<Vec<Metric>, String> {
    let mut mcp = start_server(server, root, config_dir, name, limits, profiles).await?;
    let result = work(&mcp).await;
    mcp.shutdown().await;
    result
}

fn rss_kib(mcp: &McpServer) -> Result<f64, String> {
    mcp.rss_kib().map(|k| k as f64)
}

/// Read a session from `from` to its end: (text bytes, code points, pages).
async fn read_to_end(mcp: &McpServer, sid: &str, from: u64) -> Result<(u64, u64, u64), String> {
    let (mut bytes, mut pages, mut cursor) = (0u64, 0u64, from);
    loop {
        let page = call(
            mcp,
            "terminal_read",
            json!({"session_id": sid, "cursor": cursor, "max_bytes": 65536, "wait_ms": 200}),
        )
        .await?;
        pages += 1;
        for record in page
            .get("records")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let text = field_str(record, "text")?;
            if field_u64(record, "cursor")? != cursor {
                return Err(format!("a gap at cursor {cursor}: {record}"));
            }
            bytes += text.len() as u64;
            cursor += text.chars().count() as u64;
        }
        if page.get("has_more") != Some(&Value::Bool(true)) && complete(&page) {
            return Ok((bytes, cursor - from, pages));
        }
    }
}

pub(super) async fn run_suite(
    server: &Path,
    root: &Path,
    config_dir: &Path,
    quick: bool,
    benchmarks: &mut Vec<Benchmark>,
) {
    let n = if quick { 5 } else { 50 };
    benchmarks.push(measure("cold_start", cold_start(server, root, config_dir, n)).await);
    benchmarks.push(measure("floor_server", floor_server(n * 4)).await);
    let passes = if quick { 2 } else { 5 };
    benchmarks.push(measure("floor_pages", floor_pages(false, passes)).await);
    benchmarks.push(measure("canned_pages", floor_pages(true, passes)).await);
    let demo = server.with_file_name("demo-process").display().to_string();
    let profiles = json!({
        "echo": {"argv": ["/bin/echo", "hello"]},
        "interactive-pty": {"argv": [demo, "interactive"], "mode": "pty"},
    });
    match start_server(server, root, config_dir, "suite", json!({}), profiles).await {
        Err(e) => {
            for name in ["first_output", "pty_echo"] {
                benchmarks.push(failed(name, e.clone(), 0));
            }
        }
        Ok(mut mcp) => {
            benchmarks.push(measure("first_output", first_output(&mcp, n)).await);
            benchmarks.push(measure("pty_echo", pty_echo(&mcp, n * 2)).await);
            mcp.shutdown().await;
        }
    }
    let flood = server.with_file_name("demo-process");
    benchmarks.push(
        measure(
            "direct_pipe_floor",
            direct_pipe(&flood, if quick { 2 } else { 5 }),
        )
        .await,
    );
    benchmarks.push(measure("cjk_read", cjk_read(server, root, config_dir)).await);
    benchmarks.push(measure("storm", storm(server, root, config_dir)).await);
    benchmarks.push(measure("lock_hold", lock_hold(server, root, config_dir)).await);
    benchmarks.push(measure("memory_at_rest", memory_at_rest(server, root, config_dir)).await);
    benchmarks.push(measure("memory_osc_flood", osc_flood(server, root, config_dir)).await);
    benchmarks.push(measure("memory_resize", resize(server, root, config_dir)).await);
    benchmarks.push(measure("memory_alternating", alternating(server, root, config_dir)).await);
}

/// Spawn to `initialize` and `tools/list` answered, of mcp-terminal and of the floor.
async fn cold_start(
    server: &Path,
    root: &Path,
    config_dir: &Path,
    n: usize,
) -> Result<Vec<Metric>, String> {
    let config = config_dir.join("cold.json");
    write_config(server, root, &config, &json!({}), &json!({})).await?;
    let args = [
        "stdio".to_string(),
        "--config".to_string(),
        config.display().to_string(),
    ];
    let harness = std::env::current_exe().map_err(|e| e.to_string())?;
    let floor_args = ["floor-server".to_string()];
    let (mut own, mut base) = (Vec::new(), Vec::new());
    for _ in 0..n {
        for (program, args, samples) in [
            (server, &args[..], &mut own),
            (harness.as_path(), &floor_args[..], &mut base),
        ] {
            let began = Instant::now();
            let mut mcp = McpServer::start_exact(program, args, root, &untapped()).await?;
            if mcp.count_tools().await? == 0 {
                return Err(format!("{} listed no tools", program.display()));
            }
            samples.push(ms(began.elapsed()));
            mcp.shutdown().await;
        }
    }
    Ok(vec![
        Metric::distribution("server_ms", "ms", &own),
        Metric::distribution("floor_ms", "ms", &base),
    ])
}

/// A no-op tool call on the floor server.
async fn floor_server(n: usize) -> Result<Vec<Metric>, String> {
    let harness = std::env::current_exe().map_err(|e| e.to_string())?;
    let cwd = std::env::temp_dir();
    let mut mcp =
        McpServer::start_exact(&harness, &["floor-server".to_string()], &cwd, &untapped()).await?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let began = Instant::now();
        mcp.call(floor::NOOP_TOOL, &json!({})).await?;
        samples.push(ms(began.elapsed()));
    }
    mcp.shutdown().await;
    Ok(vec![Metric::distribution("noop_call", "ms", &samples)])
}

/// Full pages answered by the floor server (or, `canned`, by prebuilt bytes without any
/// MCP server), read as the read benchmarks read ours: as many pages of the flood's line as
/// a read pass of `flood-1m` takes, and of the CJK line as a pass of `cjk_read`, `passes`
/// times each.
async fn floor_pages(canned: bool, passes: usize) -> Result<Vec<Metric>, String> {
    let harness = std::env::current_exe().map_err(|e| e.to_string())?;
    let cwd = std::env::temp_dir();
    let mut args = vec!["floor-server".to_string()];
    if canned {
        args.push("--canned".into());
    }
    let mut mcp = McpServer::start_exact(&harness, &args, &cwd, &untapped()).await?;
    let flood = super::expected_flood();
    let ascii_line = flood
        .split_inclusive('\n')
        .next()
        .unwrap_or("x\n")
        .to_owned();
    let cjk_bytes = CJK_LINES * CJK_LINE.len() as u64;
    let mut metrics = Vec::new();
    for (name, line, bytes) in [
        ("ascii_read_rate", ascii_line.as_str(), flood.len() as u64),
        ("cjk_read_rate", CJK_LINE, cjk_bytes),
    ] {
        let pages = bytes.div_ceil(floor::PAGE_TEXT_BYTES as u64);
        let mut rates = Vec::with_capacity(passes);
        for _ in 0..passes {
            let began = Instant::now();
            let mut read = 0u64;
            let mut text = String::with_capacity(bytes as usize);
            for _ in 0..pages {
                let page = mcp
                    .call_structured(floor::PAGE_TOOL, &json!({ "line": line }))
                    .await?;
                let chunk = page
                    .pointer("/records/0/text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("the floor's page has no text: {page}"))?;
                if chunk.chars().count() as u64 != field_u64(&page, "next_cursor")? {
                    return Err("the floor's page miscounts its code points".into());
                }
                // Kept whole, as `read_all` keeps what it reads.
                read += chunk.len() as u64;
                text.push_str(chunk);
            }
            rates.push(mb_per_s(read, began.elapsed()));
        }
        metrics.push(Metric::distribution(name, "MB/s", &rates));
    }
    mcp.shutdown().await;
    Ok(metrics)
}

/// `terminal_start` of `/bin/echo hello` to its output read, against spawning it in-process
/// and reading its first byte.
async fn first_output(mcp: &McpServer, n: usize) -> Result<Vec<Metric>, String> {
    let (mut own, mut base) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let began = Instant::now();
        let sid = start(mcp, "echo").await?;
        loop {
            let page = call(
                mcp,
                "terminal_read",
                json!({"session_id": sid, "cursor": 0, "wait_ms": 2000}),
            )
            .await?;
            if page
                .get("records")
                .and_then(Value::as_array)
                .is_some_and(|r| !r.is_empty())
            {
                break;
            }
        }
        own.push(ms(began.elapsed()));
        poll(mcp, &sid, Duration::from_secs(10), complete).await?;
        call(mcp, "terminal_forget", json!({"session_id": sid})).await?;
        let (first, _) = floor::spawn_to_first_output(Path::new("/bin/echo"), &["hello"])?;
        base.push(ms(first));
    }
    Ok(vec![
        Metric::distribution("server_ms", "ms", &own),
        Metric::distribution("floor_ms", "ms", &base),
    ])
}

/// `terminal_write` of a line to its echo matched by `terminal_wait`, on a PTY.
async fn pty_echo(mcp: &McpServer, n: usize) -> Result<Vec<Metric>, String> {
    let sid = start(mcp, "interactive-pty").await?;
    let samples = echo_samples(mcp, &sid, n).await;
    end(mcp, &sid).await?;
    let sid = start(mcp, "interactive-pty").await?;
    let in_flight = super::echo_in_flight_samples(mcp, &sid, n).await;
    end(mcp, &sid).await?;
    Ok(vec![
        Metric::distribution("write_to_echo", "ms", &samples?.total),
        Metric::distribution("write_to_echo_wait_in_flight", "ms", &in_flight?),
    ])
}

/// `demo-process flood 10000` read straight from a pipe, in-process.
async fn direct_pipe(demo: &Path, passes: usize) -> Result<Vec<Metric>, String> {
    let mut rates = Vec::new();
    for _ in 0..passes {
        let (bytes, took) = floor::direct_pipe_read(demo, &["flood", "10000"])?;
        rates.push(mb_per_s(bytes, took));
    }
    Ok(vec![Metric::distribution("read_rate", "MB/s", &rates)])
}

/// Full pages of 3-byte text, read through the client.
async fn cjk_read(server: &Path, root: &Path, config_dir: &Path) -> Result<Vec<Metric>, String> {
    let limits = json!({"max_sessions": 1, "max_records": 2, "buffer_bytes": 16_777_216,
                        "buffer_records": 1_048_576});
    let script = format!("yes {} | head -n {CJK_LINES}", CJK_LINE.trim_end());
    let profiles = json!({"cjk": {"argv": sh(&script)}});
    on_server(
        (server, root, config_dir),
        "cjk",
        (limits, profiles),
        async |mcp| {
            let sid = start(mcp, "cjk").await?;
            poll(mcp, &sid, Duration::from_secs(60), complete).await?;
            let mut rates = Vec::new();
            for _ in 0..3 {
                let began = Instant::now();
                let (bytes, chars, _) = read_to_end(mcp, &sid, 0).await?;
                if chars != CJK_LINES * 13 || bytes != CJK_LINES * CJK_LINE.len() as u64 {
                    return Err(format!("read {chars} code points in {bytes} bytes"));
                }
                rates.push(mb_per_s(bytes, began.elapsed()));
            }
            Ok(vec![Metric::distribution("read_rate", "MB/s", &rates)])
        },
    )
    .await
}

/// 64 sessions flooding at once in pause mode while 8 client tasks read them; one more task
/// times `terminal_status` meanwhile.
async fn storm(server: &Path, root: &Path, config_dir: &Path) -> Result<Vec<Metric>, String> {
    let limits = json!({"max_sessions": STORM_SESSIONS, "max_records": STORM_SESSIONS,
                        "buffer_bytes": 1_048_576, "buffer_records": 32_768});
    let demo = server.with_file_name("demo-process").display().to_string();
    let profiles = json!({"storm": {"argv": [demo, "flood", STORM_LINES.to_string()],
                                    "on_full": "pause"}});
    on_server(
        (server, root, config_dir),
        "storm",
        (limits, profiles),
        async |mcp| {
            let mut sids = Vec::new();
            let began = Instant::now();
            for _ in 0..STORM_SESSIONS {
                sids.push(start(mcp, "storm").await?);
            }
            let done = AtomicBool::new(false);
            let reader = |k: usize| {
                let mine: Vec<&String> = sids.iter().skip(k).step_by(STORM_READERS).collect();
                async move {
                    let mut total = 0u64;
                    for sid in mine {
                        total += read_to_end(mcp, sid, 0).await?.0;
                    }
                    Ok::<u64, String>(total)
                }
            };
            let probe = async {
                let mut samples = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    let began = Instant::now();
                    status(mcp, &sids[0]).await?;
                    samples.push(ms(began.elapsed()));
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Ok::<Vec<f64>, String>(samples)
            };
            let readers = async {
                let r = tokio::join!(
                    reader(0),
                    reader(1),
                    reader(2),
                    reader(3),
                    reader(4),
                    reader(5),
                    reader(6),
                    reader(7)
                );
                done.store(true, Ordering::Relaxed);
                [r.0, r.1, r.2, r.3, r.4, r.5, r.6, r.7]
            };
            let (totals, probe) = tokio::join!(readers, probe);
            let elapsed = began.elapsed();
            let mut delivered = 0;
            for total in totals {
                delivered += total?;
            }
            let written = STORM_SESSIONS as u64
                * (STORM_LINES * 100
                    + format!("flood total: {} code points\n", STORM_LINES * 100).len() as u64);
            Ok(vec![
                Metric::value("delivered_bytes", "bytes", delivered as f64),
                Metric::value(
                    "lost_bytes",
                    "bytes",
                    written.saturating_sub(delivered) as f64,
                ),
                Metric::value("delivered_rate", "MB/s", mb_per_s(delivered, elapsed)),
                Metric::distribution("status_during_storm", "ms", &probe?),
            ])
        },
    )
    .await
}

/// RSS idle and with 64 idle sessions; then, on a second server, idle, with 32 full
/// buffers, and after they all expired. Each buffer holds as many code points as the
/// global caps allow 32 retained sessions (2,097,152 / 32 = 65,536), all 4-byte, so the
/// most text 32 sessions can retain: a buffer of code points is full at 256 KiB of its
/// 1 MiB. The 64 idle sessions need `max_records` 64, which would halve that, hence two
/// servers.
async fn memory_at_rest(
    server: &Path,
    root: &Path,
    config_dir: &Path,
) -> Result<Vec<Metric>, String> {
    // 64 retained sessions may hold 32,768 code points each under the global cap.
    let limits = json!({"max_sessions": 64, "max_records": 64,
                        "buffer_records": CAP_TOTAL_RECORDS / 64});
    let mut metrics = on_server(
        (server, root, config_dir),
        "memory",
        (limits, json!({})),
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
    let full = on_server(
        (server, root, config_dir),
        "memory-full",
        (limits, profiles),
        async |mcp| {
            let idle = rss_kib(mcp)?;
            let mut sids = Vec::new();
            for _ in 0..FULL_BUFFERS {
                sids.push(start(mcp, "emoji").await?);
            }
            let mut retained = 0;
            for sid in &sids {
                let s = poll(mcp, sid, Duration::from_secs(30), complete).await?;
                let (bytes, chars, _) =
                    read_to_end(mcp, sid, field_u64(&s, "base_cursor")?).await?;
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
            let expired = rss_kib(mcp)?;
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

/// The longest the server held a session's state lock (its own figure, logged at
/// shutdown) while reads and waits worked through a buffer full of text with no line end:
/// a raw and a stripped `tail_lines`, and a wait whose pattern matches only at the end.
async fn lock_hold(server: &Path, root: &Path, config_dir: &Path) -> Result<Vec<Metric>, String> {
    let limits = json!({"max_sessions": 1, "max_records": 2, "buffer_bytes": 16_777_216,
                        "buffer_records": 1_048_576});
    let script = format!("yes 😀😀😀😀😀😀😀😀 | tr -d '\\n' | head -c {LOCK_HOLD_BYTES}");
    let profiles = json!({"one-line": {"argv": sh(&script)}});
    let mut mcp = start_server(server, root, config_dir, "lock", limits, profiles).await?;
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
        "longest_lock_hold_cpu",
        "ms",
        field("longest_lock_hold_cpu_us")? / 1000.0,
    ));
    metrics.push(Metric::value(
        "lock_holds_over_1ms",
        "holds",
        field("lock_holds_over_1ms")?,
    ));
    Ok(metrics)
}

/// RSS while a PTY child writes an unterminated OSC title of 50 MB.
async fn osc_flood(server: &Path, root: &Path, config_dir: &Path) -> Result<Vec<Metric>, String> {
    let script =
        format!("printf '\\033]0;'; head -c {OSC_BYTES} /dev/zero | tr '\\0' a; sleep 100");
    let profiles = json!({"osc": {"argv": sh(&script), "mode": "pty"}});
    on_server(
        (server, root, config_dir),
        "osc",
        (json!({}), profiles),
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
async fn resize(server: &Path, root: &Path, config_dir: &Path) -> Result<Vec<Metric>, String> {
    let limits = json!({"max_sessions": 8, "max_records": 8});
    let profiles = json!({"cat": {"argv": ["/bin/cat"], "mode": "pty"}});
    on_server(
        (server, root, config_dir),
        "resize",
        (limits, profiles),
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
async fn alternating(server: &Path, root: &Path, config_dir: &Path) -> Result<Vec<Metric>, String> {
    let limits = json!({"max_sessions": 1, "max_records": 1, "buffer_records": 1_048_576});
    let script =
        "import os\nfor i in range(100000):\n    os.write(1, b'oooo')\n    os.write(2, b'eeee')\n";
    let profiles = json!({"alternate": {"argv": ["/usr/bin/python3", "-c", script]}});
    on_server(
        (server, root, config_dir),
        "alternating",
        (limits, profiles),
        async |mcp| {
            let idle = rss_kib(mcp)?;
            let sid = start(mcp, "alternate").await?;
            let s = poll(mcp, &sid, Duration::from_secs(60), complete).await?;
            let full = rss_kib(mcp)?;
            let runs = {
                let mut runs = 0u64;
                let mut cursor = field_u64(&s, "base_cursor")?;
                loop {
                    let page = call(
                        mcp,
                        "terminal_read",
                        json!({"session_id": sid, "cursor": cursor}),
                    )
                    .await?;
                    runs += page
                        .get("records")
                        .and_then(Value::as_array)
                        .map_or(0, |r| r.len() as u64);
                    cursor = field_u64(&page, "next_cursor")?;
                    if page.get("has_more") != Some(&Value::Bool(true)) {
                        break runs;
                    }
                }
            };
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

/// A workload beside its floor from the same run, and whether it meets its target.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Comparison {
    pub name: String,
    pub unit: String,
    pub value: f64,
    pub floor: Option<f64>,
    /// `value / floor`.
    pub ratio: Option<f64>,
    pub target: String,
    pub met: bool,
    /// How far from its target a missed workload is.
    pub missed_by: Option<String>,
}

/// The median (or the value) of a metric of a benchmark that succeeded.
fn metric(benchmarks: &[Benchmark], bench: &str, name: &str) -> Option<f64> {
    let b = benchmarks
        .iter()
        .find(|b| b.name == bench && b.status == super::Status::Ok)?;
    let m = b.metrics.iter().find(|m| m.name == name)?;
    m.stats.map(|s| s.median).or(m.value)
}

/// A workload's name, unit, value, floor and target.
type Row<'a> = (&'a str, &'a str, Option<f64>, Option<f64>, Target);

enum Target {
    RatioAtMost(f64),
    RatioAtLeast(f64),
    OverFloorAtMost(f64),
    AtMost(f64),
    AtLeast(f64),
}

pub(super) fn comparisons(benchmarks: &[Benchmark]) -> Vec<Comparison> {
    let get = |bench: &str, name: &str| metric(benchmarks, bench, name);
    let noop = get("floor_server", "noop_call");
    let pipe = get("direct_pipe_floor", "read_rate");
    let idle = get("memory_at_rest", "idle_rss");
    let idle_before_buffers = get("memory_at_rest", "full_buffers_idle_rss");
    let retained = get("memory_at_rest", "full_buffers_retained_text");
    let rows: Vec<Row> = vec![
        (
            "cold start to tools/list",
            "ms",
            get("cold_start", "server_ms"),
            get("cold_start", "floor_ms"),
            Target::RatioAtMost(1.5),
        ),
        (
            "start to first output (/bin/echo)",
            "ms",
            get("first_output", "server_ms"),
            get("first_output", "floor_ms"),
            Target::OverFloorAtMost(2.0),
        ),
        (
            "write→echo round trip, pipes",
            "ms",
            get("write_echo_latency_ms", "write_to_echo"),
            noop,
            Target::RatioAtMost(2.0),
        ),
        (
            "write→echo round trip, PTY",
            "ms",
            get("pty_echo", "write_to_echo"),
            noop,
            Target::RatioAtMost(3.0),
        ),
        (
            "write→echo round trip, pipes, wait sent with the write",
            "ms",
            get("write_echo_latency_ms", "write_to_echo_wait_in_flight"),
            noop,
            Target::RatioAtMost(2.0),
        ),
        (
            "write→echo round trip, PTY, wait sent with the write",
            "ms",
            get("pty_echo", "write_to_echo_wait_in_flight"),
            noop,
            Target::RatioAtMost(3.0),
        ),
        (
            "full-page reads, ASCII",
            "MB/s",
            get("read_throughput", "read_rate"),
            pipe,
            Target::AtLeast(200.0),
        ),
        (
            "full-page reads, 3-byte CJK",
            "MB/s",
            get("cjk_read", "read_rate"),
            pipe,
            Target::AtLeast(100.0),
        ),
        (
            "the same ASCII pages, prebuilt answers (no server)",
            "MB/s",
            get("canned_pages", "ascii_read_rate"),
            None,
            Target::AtLeast(200.0),
        ),
        (
            "the same CJK pages, prebuilt answers (no server)",
            "MB/s",
            get("canned_pages", "cjk_read_rate"),
            None,
            Target::AtLeast(100.0),
        ),
        (
            "the same ASCII pages, minimal rmcp server",
            "MB/s",
            get("floor_pages", "ascii_read_rate"),
            None,
            Target::AtLeast(200.0),
        ),
        (
            "the same CJK pages, minimal rmcp server",
            "MB/s",
            get("floor_pages", "cjk_read_rate"),
            None,
            Target::AtLeast(100.0),
        ),
        (
            "capture of a flooding child",
            "MB/s",
            get("read_throughput", "flood_ingest_rate"),
            pipe,
            Target::RatioAtLeast(0.5),
        ),
        (
            "terminal_wait search",
            "MB/s",
            get("wait_search_throughput", "search_rate"),
            pipe,
            Target::AtLeast(300.0),
        ),
        (
            "storm: terminal_status p95",
            "ms",
            benchmarks
                .iter()
                .find(|b| b.name == "storm" && b.status == super::Status::Ok)
                .and_then(|b| b.metrics.iter().find(|m| m.name == "status_during_storm"))
                .and_then(|m| m.stats.map(|s| s.p95)),
            None,
            Target::AtMost(20.0),
        ),
        (
            "storm: bytes lost",
            "bytes",
            get("storm", "lost_bytes"),
            None,
            Target::AtMost(0.0),
        ),
        (
            "terminal_read pass, 8 live-view pages watching",
            "ms",
            get("live_view_watchers", "read_pass_watched"),
            get("live_view_watchers", "read_pass_alone"),
            Target::RatioAtMost(1.2),
        ),
        (
            "longest session lock hold",
            "ms",
            get("lock_hold", "longest_lock_hold"),
            None,
            Target::AtMost(1.0),
        ),
        (
            "longest session lock hold, holder's CPU",
            "ms",
            get("lock_hold", "longest_lock_hold_cpu"),
            None,
            Target::AtMost(1.0),
        ),
        ("idle RSS", "KiB", idle, None, Target::AtMost(8192.0)),
        (
            "overhead of 32 full buffers",
            "KiB",
            get("memory_at_rest", "full_buffers_overhead"),
            None,
            Target::AtMost(retained.map_or(8192.0, |r| r * 0.2 + 8192.0)),
        ),
        (
            "RSS after every session expired",
            "KiB",
            get("memory_at_rest", "after_expiry_rss"),
            idle_before_buffers,
            Target::OverFloorAtMost(2048.0),
        ),
    ];
    rows.into_iter()
        .filter_map(|(name, unit, value, floor, target)| {
            let value = value?;
            let ratio = floor.filter(|f| *f > 0.0).map(|f| super::round3(value / f));
            let pct = |over: f64| format!("{:.0}%", over * 100.0);
            let (text, met, by) = match target {
                Target::RatioAtMost(r) => (
                    format!("≤ {r}× floor"),
                    ratio.is_some_and(|x| x <= r),
                    ratio.map(|x| format!("{} over the ratio", pct(x / r - 1.0))),
                ),
                Target::RatioAtLeast(r) => (
                    format!("≥ {r}× floor"),
                    ratio.is_some_and(|x| x >= r),
                    ratio.map(|x| format!("{} under the ratio", pct(1.0 - x / r))),
                ),
                Target::OverFloorAtMost(d) => (
                    format!("≤ floor + {d} {unit}"),
                    floor.is_some_and(|f| (value - f).abs() <= d || value <= f),
                    floor.map(|f| format!("{} {unit} over", super::num((value - f).abs() - d))),
                ),
                Target::AtMost(x) => (
                    format!("≤ {} {unit}", super::num(x)),
                    value <= x,
                    Some(format!(
                        "{} {unit} ({}) over",
                        super::num(value - x),
                        pct(value / x.max(1e-9) - 1.0)
                    )),
                ),
                Target::AtLeast(x) => (
                    format!("≥ {} {unit}", super::num(x)),
                    value >= x,
                    Some(format!(
                        "{} {unit} ({}) short",
                        super::num(x - value),
                        pct(1.0 - value / x)
                    )),
                ),
            };
            Some(Comparison {
                name: name.into(),
                unit: unit.into(),
                value,
                floor,
                ratio,
                target: text,
                met,
                missed_by: if met { None } else { by },
            })
        })
        .collect()
}
