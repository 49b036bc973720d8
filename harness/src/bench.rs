//! `harness bench`: speed and memory of the server, measured through the same MCP client the
//! scenarios use (rmcp over the server's stdio), against the demo profiles.
//!
//! Every benchmark is bounded in samples and in time and stops by itself. A benchmark whose
//! data is wrong (a read that does not return exactly what `flood` wrote, an echo that does
//! not arrive) fails; the report is written either way. Latencies are client-observed: from
//! sending the request to receiving its result, so they include JSON-RPC framing, rmcp on
//! both sides and the pipe hops.
//!
//! Two servers are used: one on the `make-config` defaults for the latency and
//! concurrency benchmarks, and one with the largest per-session buffer the config allows
//! (16 MiB and 1,048,576 records; `max_sessions` 1 and `max_records` 2 to stay under the
//! global caps) for the throughput benchmarks. The default `flood` writes 2,000,033 code
//! points, more than any session may retain, so the throughput benchmarks run `flood` with
//! 10,000 lines (1,000,033 code points) as the extra profile `flood-1m`, which stays whole.

use std::fmt::Write as _;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use crate::client::{McpServer, Transport};
use crate::evidence;
use crate::raw::RawServer;
use crate::scenario::Launch;

mod suite;
mod web;

/// The throughput profile: `flood` with this many lines of `FLOOD_LINE_WIDTH` bytes, then
/// its summary line; the whole output fits the largest allowed buffer (1,048,576 records).
const FLOOD_PROFILE: &str = "flood-1m";
const FLOOD_LINES: u64 = 10_000;
const FLOOD_LINE_WIDTH: usize = 100;
/// Code points `flood` writes before its summary line.
const FLOOD_TOTAL: u64 = FLOOD_LINES * FLOOD_LINE_WIDTH as u64;
/// Largest page `terminal_read` allows.
const PAGE_BYTES: u64 = 65_536;
/// Concurrent `long` sessions for the memory measurement (the default `max_sessions`).
const CONCURRENT_LONG: usize = 8;
/// Bound on any one benchmark.
const BENCH_BOUND: Duration = Duration::from_secs(180);
/// Bound on one poll loop inside a sample (a screen that never shows the counter).
const POLL_BOUND: Duration = Duration::from_secs(10);
/// Bound on `make-config`.
const MAKE_CONFIG_TIMEOUT: Duration = Duration::from_secs(30);

/// Sample counts: the full run, or a smoke check with `--quick`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sizes {
    pub start_to_exit: usize,
    pub tool_roundtrip: usize,
    pub read_passes: usize,
    pub wait_passes: usize,
    pub write_echo: usize,
    pub pty_keys: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Self {
        if quick {
            Sizes {
                start_to_exit: 10,
                tool_roundtrip: 50,
                read_passes: 1,
                wait_passes: 2,
                write_echo: 10,
                pty_keys: 5,
            }
        } else {
            Sizes {
                start_to_exit: 200,
                tool_roundtrip: 1000,
                read_passes: 5,
                wait_passes: 20,
                write_echo: 200,
                pty_keys: 50,
            }
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub quick: bool,
    pub passed: bool,
    pub environment: Environment,
    pub sizes: Sizes,
    pub benchmarks: Vec<Benchmark>,
    /// Workloads beside their floors from this run, with their targets.
    pub comparisons: Vec<suite::Comparison>,
    /// Anything odd seen while shutting the servers down.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    pub harness_version: String,
    pub server_path: String,
    pub server_version: String,
    pub server_binary_bytes: Option<u64>,
    pub git_commit: Option<String>,
    pub os: String,
    pub cpu_model: String,
    pub nproc: usize,
    pub started_at: String,
    pub finished_at: String,
    /// /proc/loadavg (1, 5, 15 minutes) before and after: was the machine otherwise busy.
    pub loadavg_start: Option<[f64; 3]>,
    pub loadavg_end: Option<[f64; 3]>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Failed,
}

#[derive(Debug, Clone, Serialize)]
pub struct Benchmark {
    pub name: String,
    pub description: String,
    pub status: Status,
    pub failure: Option<String>,
    pub duration_ms: u64,
    pub metrics: Vec<Metric>,
}

/// One measured quantity: a single value or a distribution of samples.
#[derive(Debug, Clone, Serialize)]
pub struct Metric {
    pub name: String,
    pub unit: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Stats>,
}

impl Metric {
    fn value(name: &str, unit: &str, value: f64) -> Self {
        Metric {
            name: name.into(),
            unit: unit.into(),
            value: Some(round3(value)),
            stats: None,
        }
    }

    fn distribution(name: &str, unit: &str, samples: &[f64]) -> Self {
        Metric {
            name: name.into(),
            unit: unit.into(),
            value: None,
            stats: Stats::of(samples),
        }
    }
}

/// Summary of a sample set; percentiles by the nearest-rank method.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stats {
    pub samples: usize,
    pub min: f64,
    pub median: f64,
    pub p95: f64,
    pub max: f64,
    pub mean: f64,
}

impl Stats {
    pub fn of(samples: &[f64]) -> Option<Stats> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
        Some(Stats {
            samples: sorted.len(),
            min: round3(sorted[0]),
            median: round3(percentile(&sorted, 50.0)),
            p95: round3(percentile(&sorted, 95.0)),
            max: round3(sorted[sorted.len() - 1]),
            mean: round3(mean),
        })
    }
}

/// The nearest-rank percentile of ascending `sorted` (non-empty): the smallest sample with at
/// least `p` percent of the samples at or below it.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Megabytes (10^6 bytes) a second.
fn mb_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9)
}

/// A `kB` field (e.g. `VmRSS`) of a /proc/<pid>/status text, in KiB.
pub fn status_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        if name != field {
            return None;
        }
        let mut parts = rest.split_whitespace();
        let value = parts.next()?.parse().ok()?;
        (parts.next() == Some("kB")).then_some(value)
    })
}

/// The three load averages of a /proc/loadavg text.
pub fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut fields = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([fields.next()??, fields.next()??, fields.next()??])
}

fn loadavg() -> Option<[f64; 3]> {
    parse_loadavg(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// The first `model name` of a /proc/cpuinfo text.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name.trim() == "model name").then(|| value.trim().to_string())
    })
}

/// The server's resident set now and at its peak, as metrics named `<phase>_vm_rss` and
/// `<phase>_vm_hwm`.
fn memory_metrics(pid: u32, phase: &str) -> Result<Vec<Metric>, String> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let field =
        |name: &str| status_kib(&status, name).ok_or_else(|| format!("{path} has no {name} in kB"));
    Ok(vec![
        Metric::value(&format!("{phase}_vm_rss"), "KiB", field("VmRSS")? as f64),
        Metric::value(&format!("{phase}_vm_hwm"), "KiB", field("VmHWM")? as f64),
    ])
}

/// Exactly what `flood` writes.
pub(crate) fn expected_flood() -> String {
    let mut text = String::with_capacity(FLOOD_TOTAL as usize + 64);
    for i in 1..=FLOOD_LINES {
        let head = format!("flood {i:08} ");
        let pad = FLOOD_LINE_WIDTH - head.len() - 1;
        text.push_str(&head);
        text.extend(std::iter::repeat_n('x', pad));
        text.push('\n');
    }
    let _ = writeln!(text, "flood total: {FLOOD_TOTAL} code points");
    text
}

/// Run every benchmark against `server` (its `demo-process` sibling provides the profiles).
pub fn run(server: &Path, workspace: &Path, quick: bool) -> BenchReport {
    let env = evidence::environment(server, workspace);
    let environment = Environment {
        harness_version: env.harness_version,
        server_path: env.server_path,
        server_version: env.server_version,
        server_binary_bytes: std::fs::metadata(server).ok().map(|m| m.len()),
        git_commit: env.git_commit,
        os: env.os,
        cpu_model: std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| cpu_model(&t))
            .unwrap_or_else(|| "unknown".into()),
        nproc: std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(1),
        started_at: env.started_at,
        finished_at: String::new(),
        loadavg_start: loadavg(),
        loadavg_end: None,
    };
    let sizes = Sizes::new(quick);
    let mut report = BenchReport {
        quick,
        passed: false,
        environment,
        sizes,
        benchmarks: Vec::new(),
        comparisons: Vec::new(),
        notes: Vec::new(),
    };
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(run_all(server, sizes, &mut report)),
        Err(e) => report.notes.push(format!("cannot build a runtime: {e}")),
    }
    report.comparisons = suite::comparisons(&report.benchmarks);
    report.environment.finished_at = evidence::now_rfc3339();
    report.environment.loadavg_end = loadavg();
    report.passed =
        !report.benchmarks.is_empty() && report.benchmarks.iter().all(|b| b.status == Status::Ok);
    report
}

/// What each benchmark is, in the order they run.
const DESCRIPTIONS: &[(&str, &str)] = &[
    (
        "start_to_exit_ms",
        "terminal_start of `empty`, then terminal_wait without a pattern until outcome \
         `exited`; the session is forgotten after each sample",
    ),
    (
        "tool_roundtrip_ms",
        "calls with small answers on a running `long` session, N of each in turn: \
         terminal_status; terminal_read from 0 (its one line); terminal_wait from 0 for \
         `running`, which is already there",
    ),
    (
        "write_echo_latency_ms",
        "`interactive`: terminal_write `line N\\n`, then terminal_wait for `echo: line N` from \
         the previous next_cursor; `write_to_echo_wait_in_flight` sends both calls at once \
         (the wait first) on a second `interactive`, from sending them to the match",
    ),
    (
        "exec_roundtrip_ms",
        "terminal_exec of `true` and of `echo hi` (output checked) in a persistent shell: \
         `/bin/sh` on pipes and `bash -i` on a terminal, beside the write→echo floor above",
    ),
    (
        "pty_keys_to_screen_ms",
        "`pty-tui`: terminal_keys [Up], then terminal_screen polled until `counter: k` shows",
    ),
    (
        "read_throughput",
        "`flood-1m` (`demo-process flood 10000`: 1,000,000 code points and a summary line, \
         retained whole), after it exited: terminal_read from 0 with max_bytes 65536 to the \
         end, checked against exactly what flood writes; capture (`flood_ingest_rate`) is \
         terminal_start to the exited wait of as many flood runs as there are read passes, \
         the earlier ones forgotten",
    ),
    (
        "wait_search_throughput",
        "the same exited `flood-1m`: terminal_wait from cursor 0 for `flood total: \\d+`, \
         which matches only in the summary line after the 1,000,000 code points",
    ),
    (
        "client_decode",
        "answers as the server wrote them (read on raw pipes from a server on the \
         throughput config): terminal_read of `flood-1m` from cursor 0 with max_bytes 65536, \
         and tools/list; each decoded in-process as the rmcp client's stdio codec decodes \
         every message (the newline search, a UTF-8 check, then serde_json into \
         `ServerJsonRpcMessage`): the part of a page's time, and of cold start, that is the \
         client's own work",
    ),
    (
        "memory",
        "server VmRSS/VmHWM from /proc/<pid>/status: idle after initialize, with 8 \
         concurrent `long` sessions, after the latency benchmarks; on the throughput server \
         idle, once `flood-1m` exited (its output retained) and after the read and wait \
         benchmarks (still retained); and the server binary's size",
    ),
    (
        "cold_start",
        "spawn of the server to `initialize` and `tools/list` answered, beside the same for \
         the floor server (`harness floor-server`: rmcp on stdio with one no-op tool)",
    ),
    (
        "floor_server",
        "a no-op tools/call on the floor server: the round-trip floor",
    ),
    (
        "floor_pages",
        "full pages from the floor server's `page` tool (`line` repeated to 65,536 bytes, as \
         one record of terminal_read's answer, built once and then only serialized by rmcp), \
         read as the read benchmarks read: as many pages of a flood line as a `flood-1m` \
         pass takes, and of the CJK line as a `cjk_read` pass; what a minimal rmcp server \
         doing no work delivers",
    ),
    (
        "canned_pages",
        "the same pages with no MCP server at all (`harness floor-server --canned`: each \
         request line answered with bytes prebuilt once, in one write to a widened pipe): \
         the most the rmcp client takes in through stdio on this machine, the floor of any \
         page read",
    ),
    (
        "first_output",
        "`terminal_start` of `/bin/echo hello` to its output returned by `terminal_read`, \
         beside spawning `/bin/echo hello` in-process and reading its first byte",
    ),
    (
        "pty_echo",
        "`terminal_write` of a line to `demo-process interactive` on a PTY until \
         `terminal_wait` matched its echo; `write_to_echo_wait_in_flight` as on pipes",
    ),
    (
        "direct_pipe_floor",
        "`demo-process flood 10000` (1,000,033 bytes) read straight from its pipe in-process: \
         the floor of reads and capture",
    ),
    (
        "cjk_read",
        "70,000 lines of 3-byte CJK text (2,590,000 bytes) read from cursor 0 in full pages, \
         three passes",
    ),
    (
        "storm",
        "64 `on_full: pause` sessions of `demo-process flood 2000` at once (buffer 32,768 \
         records each) read to the end by 8 client tasks, while one more task calls \
         `terminal_status` every 5 ms",
    ),
    (
        "lock_hold",
        "one line of 1,048,576 4-byte code points (4 MiB, no line end, as many code points \
         as a buffer may hold) retained whole, then terminal_read with tail_lines 1, raw and \
         with strip_ansi, and terminal_wait from 0 for a pattern that matches only at its \
         end; the longest the server held any session's state lock meanwhile is its own \
         figure, logged when it shuts down",
    ),
    (
        "memory_at_rest",
        "server VmRSS idle and with 64 idle `long` sessions; then, on a second server \
         (max_records 32, buffer_records 65,536, retention 1 s), idle, with 32 buffers each \
         full of 65,536 4-byte code points (256 KiB: the most text the global cap of \
         2,097,152 retained code points lets 32 sessions hold), and after every session \
         expired, against that server's own idle",
    ),
    (
        "memory_osc_flood",
        "server VmRSS after a PTY child wrote an unterminated OSC title of 50,000,000 bytes",
    ),
    (
        "memory_resize",
        "server VmRSS with 8 `cat` PTY sessions resized to 1000×1000 (or the largest square \
         the emulator budget grants, in steps of 50), each in the alternate screen",
    ),
    (
        "memory_alternating",
        "server VmRSS with one session whose child alternated stdout and stderr 4 bytes at a \
         time for 800,000 bytes, all retained",
    ),
];

/// Workloads of their own files.
const MORE_DESCRIPTIONS: &[(&str, &str)] = &[(
    "live_view_watchers",
    "terminal_read paging a session while it writes 5 MB (50,000 lines), from cursor 0 to \
     the end of its complete output (`on_full: pause`, so the flood goes on as the reads acknowledge it), with 8 live-view update streams (SSE, as 8 browser tabs) \
     watching that session, against the same passes with none, alternating",
)];

fn describe(name: &str) -> String {
    DESCRIPTIONS
        .iter()
        .chain(MORE_DESCRIPTIONS)
        .find(|(n, _)| *n == name)
        .map(|(_, d)| d.to_string())
        .unwrap_or_default()
}

/// Run `fut` under the benchmark bound and record it.
async fn measure(name: &str, fut: impl Future<Output = Result<Vec<Metric>, String>>) -> Benchmark {
    eprintln!("bench: {name} …");
    let began = Instant::now();
    let result = match tokio::time::timeout(BENCH_BOUND, fut).await {
        Ok(result) => result,
        Err(_) => Err(format!("did not finish within {} s", BENCH_BOUND.as_secs())),
    };
    let duration_ms = began.elapsed().as_millis() as u64;
    match result {
        Ok(metrics) => Benchmark {
            name: name.into(),
            description: describe(name),
            status: Status::Ok,
            failure: None,
            duration_ms,
            metrics,
        },
        Err(e) => {
            eprintln!("bench: {name} FAILED: {e}");
            failed(name, e, duration_ms)
        }
    }
}

fn failed(name: &str, why: String, duration_ms: u64) -> Benchmark {
    Benchmark {
        name: name.into(),
        description: describe(name),
        status: Status::Failed,
        failure: Some(why),
        duration_ms,
        metrics: Vec::new(),
    }
}

async fn run_all(server: &Path, sizes: Sizes, report: &mut BenchReport) {
    let Some((root_dir, config_dir)) = crate::runner::root_and_config_dirs("mcp-terminal-bench")
    else {
        report
            .notes
            .push("cannot create temporary directories".into());
        return;
    };
    let root = match root_dir.path().canonicalize() {
        Ok(root) => root,
        Err(e) => {
            report
                .notes
                .push(format!("cannot canonicalize the root: {e}"));
            return;
        }
    };
    let mut memory: Vec<Metric> = Vec::new();
    let mut memory_failures: Vec<String> = Vec::new();
    if let Some(bytes) = report.environment.server_binary_bytes {
        memory.push(Metric::value("server_binary_size", "bytes", bytes as f64));
    } else {
        memory_failures.push(format!("cannot stat {}", server.display()));
    }

    // Latency and concurrency, on the default limits.
    let latency = [
        "start_to_exit_ms",
        "tool_roundtrip_ms",
        "write_echo_latency_ms",
        "exec_roundtrip_ms",
        "pty_keys_to_screen_ms",
    ];
    match start_server(
        server,
        &root,
        config_dir.path(),
        "default",
        json!({}),
        exec_profiles(),
    )
    .await
    {
        Err(e) => {
            for name in latency {
                report.benchmarks.push(failed(name, e.clone(), 0));
            }
            memory_failures.push(e);
        }
        Ok(mut mcp) => {
            collect_memory(
                &mut memory,
                &mut memory_failures,
                memory_metrics(mcp.pid, "idle"),
            );
            let eight = concurrent_long(&mcp).await;
            collect_memory(&mut memory, &mut memory_failures, eight);
            let b = measure(latency[0], start_to_exit(&mcp, sizes.start_to_exit)).await;
            report.benchmarks.push(b);
            let b = measure(latency[1], tool_roundtrip(&mcp, sizes.tool_roundtrip)).await;
            report.benchmarks.push(b);
            let b = measure(latency[2], write_echo(&mcp, sizes.write_echo)).await;
            report.benchmarks.push(b);
            let b = measure(latency[3], exec_roundtrip(&mcp, sizes.write_echo)).await;
            report.benchmarks.push(b);
            let b = measure(latency[4], pty_keys(&mcp, sizes.pty_keys)).await;
            report.benchmarks.push(b);
            collect_memory(
                &mut memory,
                &mut memory_failures,
                memory_metrics(mcp.pid, "after_latency"),
            );
            report.notes.extend(mcp.shutdown().await);
        }
    }

    // Throughput, with a buffer that keeps the whole flood.
    let limits = json!({
        "max_sessions": 1,
        "max_records": 2,
        "buffer_bytes": 16_777_216,
        "buffer_records": 1_048_576,
    });
    let demo = server.with_file_name("demo-process").display().to_string();
    let profile = json!({
        "argv": [demo, "flood", FLOOD_LINES.to_string()],
        "description": "flood with 10,000 lines: 1,000,000 code points and a summary line",
    });
    let profiles = json!({ FLOOD_PROFILE: profile });
    match start_server(server, &root, config_dir.path(), "flood", limits, profiles).await {
        Err(e) => {
            for name in ["read_throughput", "wait_search_throughput"] {
                report.benchmarks.push(failed(name, e.clone(), 0));
            }
            memory_failures.push(e);
        }
        Ok(mut mcp) => {
            collect_memory(
                &mut memory,
                &mut memory_failures,
                memory_metrics(mcp.pid, "throughput_idle"),
            );
            let flooded = flood_sessions(&mcp, sizes.read_passes).await;
            if flooded.is_ok() {
                collect_memory(
                    &mut memory,
                    &mut memory_failures,
                    memory_metrics(mcp.pid, "flood_exited"),
                );
            }
            match flooded {
                Err(e) => {
                    let why = format!("the flood session: {e}");
                    for name in ["read_throughput", "wait_search_throughput"] {
                        report.benchmarks.push(failed(name, why.clone(), 0));
                    }
                    memory_failures.push(why);
                }
                Ok((sid, run)) => {
                    let b = measure(
                        "read_throughput",
                        read_throughput(&mcp, &sid, run, sizes.read_passes),
                    )
                    .await;
                    report.benchmarks.push(b);
                    let b = measure(
                        "wait_search_throughput",
                        wait_search(&mcp, &sid, sizes.wait_passes),
                    )
                    .await;
                    report.benchmarks.push(b);
                    collect_memory(
                        &mut memory,
                        &mut memory_failures,
                        memory_metrics(mcp.pid, "flood_retained"),
                    );
                }
            }
            report.notes.extend(mcp.shutdown().await);
            let config = config_path(config_dir.path(), "flood");
            let samples = sizes.wait_passes * 10;
            let b = measure(
                "client_decode",
                client_decode(server, &root, &config, samples),
            )
            .await;
            report.benchmarks.push(b);
        }
    }

    let b = measure(
        "live_view_watchers",
        web::watchers(server, &root, config_dir.path(), sizes.read_passes),
    )
    .await;
    report.benchmarks.push(b);

    suite::run_suite(
        server,
        &root,
        config_dir.path(),
        sizes.read_passes == 1,
        &mut report.benchmarks,
    )
    .await;

    report.benchmarks.push(Benchmark {
        name: "memory".into(),
        description: describe("memory"),
        status: if memory_failures.is_empty() {
            Status::Ok
        } else {
            Status::Failed
        },
        failure: (!memory_failures.is_empty()).then(|| memory_failures.join("; ")),
        duration_ms: 0,
        metrics: memory,
    });
    drop(root_dir);
}

fn collect_memory(
    memory: &mut Vec<Metric>,
    failures: &mut Vec<String>,
    result: Result<Vec<Metric>, String>,
) {
    match result {
        Ok(metrics) => memory.extend(metrics),
        Err(e) => failures.push(e),
    }
}

/// Write a config (`make-config` output with `limits` over it and `profiles` added) and start
/// the server on it.
async fn start_server(
    server: &Path,
    root: &Path,
    config_dir: &Path,
    name: &str,
    limits: Value,
    profiles: Value,
) -> Result<McpServer, String> {
    let path = config_path(config_dir, name);
    write_config(server, root, &path, &limits, &profiles).await?;
    let args = ["--config".to_string(), path.display().to_string()];
    McpServer::start_with(Transport::Stdio, server, &args, root, &untapped()).await
}

/// Where the config of the server named `name` is written.
fn config_path(config_dir: &Path, name: &str) -> PathBuf {
    config_dir.join(format!("{name}.json"))
}

/// How every benchmarked server (and the floor server) is started: without the scenarios'
/// tee of the client's input.
fn untapped() -> Launch {
    Launch {
        untapped: true,
        ..Launch::default()
    }
}

async fn write_config(
    server: &Path,
    root: &Path,
    path: &PathBuf,
    limits: &Value,
    profiles: &Value,
) -> Result<(), String> {
    let mut cmd = tokio::process::Command::new(server);
    cmd.arg("make-config")
        .arg("--output")
        .arg(path)
        .arg("--root")
        .arg(root)
        .kill_on_drop(true);
    let out = tokio::time::timeout(MAKE_CONFIG_TIMEOUT, cmd.output())
        .await
        .map_err(|_| "make-config timed out".to_string())?
        .map_err(|e| format!("cannot run {} make-config: {e}", server.display()))?;
    if !out.status.success() {
        return Err(format!(
            "make-config failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut config: Value =
        serde_json::from_str(&text).map_err(|e| format!("make-config output is not JSON: {e}"))?;
    let top = config
        .as_object_mut()
        .ok_or("make-config output is not a JSON object")?;
    for (key, value) in limits.as_object().into_iter().flatten() {
        top.insert(key.clone(), value.clone());
    }
    let commands = top
        .get_mut("commands")
        .and_then(Value::as_object_mut)
        .ok_or("make-config output has no `commands` object")?;
    for (id, profile) in profiles.as_object().into_iter().flatten() {
        commands.insert(id.clone(), profile.clone());
    }
    let pretty = serde_json::to_string_pretty(&config).map_err(|e| e.to_string())?;
    std::fs::write(path, pretty).map_err(|e| format!("{}: {e}", path.display()))
}

/// Call a tool that must succeed; its structuredContent.
async fn call(mcp: &McpServer, tool: &str, args: Value) -> Result<Value, String> {
    let content = mcp.call_structured(tool, &args).await?;
    if content.get("ok") != Some(&Value::Bool(true)) {
        return Err(format!("{tool} {args} did not succeed: {content}"));
    }
    Ok(content)
}

fn field_str<'a>(v: &'a Value, key: &str) -> Result<&'a str, String> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("no string `{key}` in {v}"))
}

fn field_u64(v: &Value, key: &str) -> Result<u64, String> {
    v.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("no integer `{key}` in {v}"))
}

async fn start(mcp: &McpServer, command_id: &str) -> Result<String, String> {
    let started = call(mcp, "terminal_start", json!({"command_id": command_id})).await?;
    Ok(field_str(&started, "session_id")?.to_string())
}

/// Wait for `pattern` from `cursor`; the result must be `matched`.
async fn wait_for(
    mcp: &McpServer,
    sid: &str,
    cursor: u64,
    pattern: &str,
    strip_ansi: bool,
) -> Result<Value, String> {
    let result = call(
        mcp,
        "terminal_wait",
        json!({"session_id": sid, "cursor": cursor, "pattern": pattern,
               "strip_ansi": strip_ansi, "timeout_ms": 10_000}),
    )
    .await?;
    if result.get("outcome").and_then(Value::as_str) != Some("matched") {
        return Err(format!("waiting for `{pattern}`: {result}"));
    }
    Ok(result)
}

/// Wait for the session to end; the outcome must be `exited`.
async fn wait_exit(mcp: &McpServer, sid: &str, timeout_ms: u64) -> Result<Value, String> {
    let result = call(
        mcp,
        "terminal_wait",
        json!({"session_id": sid, "timeout_ms": timeout_ms}),
    )
    .await?;
    if result.get("outcome").and_then(Value::as_str) != Some("exited") {
        return Err(format!("waiting for the exit: {result}"));
    }
    Ok(result)
}

async fn end(mcp: &McpServer, sid: &str) -> Result<(), String> {
    call(
        mcp,
        "terminal_terminate",
        json!({"session_id": sid, "grace_ms": 0}),
    )
    .await?;
    call(mcp, "terminal_forget", json!({"session_id": sid})).await?;
    Ok(())
}

/// Memory with `CONCURRENT_LONG` running `long` sessions; they are ended after.
async fn concurrent_long(mcp: &McpServer) -> Result<Vec<Metric>, String> {
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

async fn start_to_exit(mcp: &McpServer, n: usize) -> Result<Vec<Metric>, String> {
    let mut total = Vec::with_capacity(n);
    let mut start_call = Vec::with_capacity(n);
    for i in 0..n {
        let began = Instant::now();
        let sid = start(mcp, "empty").await?;
        let started = began.elapsed();
        let result = wait_exit(mcp, &sid, 10_000).await?;
        let elapsed = began.elapsed();
        let session = result.get("session").unwrap_or(&result);
        if session.get("exit_code") != Some(&json!(0)) {
            return Err(format!("sample {i}: `empty` did not exit 0: {result}"));
        }
        call(mcp, "terminal_forget", json!({"session_id": sid}))
            .await
            .map_err(|e| format!("sample {i}: {e}"))?;
        total.push(ms(elapsed));
        start_call.push(ms(started));
    }
    Ok(vec![
        Metric::distribution("start_to_exit", "ms", &total),
        Metric::distribution("terminal_start_call", "ms", &start_call),
    ])
}

async fn tool_roundtrip(mcp: &McpServer, n: usize) -> Result<Vec<Metric>, String> {
    let sid = start(mcp, "long").await?;
    let result = roundtrip_samples(mcp, &sid, n).await;
    let ended = end(mcp, &sid).await;
    let [status, read, wait] = result?;
    ended?;
    Ok(vec![
        Metric::distribution("terminal_status", "ms", &status),
        Metric::distribution("terminal_read_small", "ms", &read),
        Metric::distribution("terminal_wait_already_matched", "ms", &wait),
    ])
}

/// Round trips of calls with small answers on a running `long` session: terminal_status,
/// terminal_read of its one line, terminal_wait for text already there (no waiting).
async fn roundtrip_samples(mcp: &McpServer, sid: &str, n: usize) -> Result<[Vec<f64>; 3], String> {
    wait_for(mcp, sid, 0, "running", false).await?;
    let mut samples: [Vec<f64>; 3] = Default::default();
    for _ in 0..n {
        let began = Instant::now();
        let status = call(mcp, "terminal_status", json!({"session_id": sid})).await?;
        samples[0].push(ms(began.elapsed()));
        if status.get("status") != Some(&json!("RUNNING")) {
            return Err(format!("`long` is not RUNNING: {status}"));
        }
    }
    for _ in 0..n {
        let began = Instant::now();
        let page = call(
            mcp,
            "terminal_read",
            json!({"session_id": sid, "cursor": 0}),
        )
        .await?;
        samples[1].push(ms(began.elapsed()));
        if page.pointer("/records/0/text") != Some(&json!("running\n")) {
            return Err(format!("`long` output is not `running`: {page}"));
        }
    }
    for _ in 0..n {
        let began = Instant::now();
        wait_for(mcp, sid, 0, "running", false).await?;
        samples[2].push(ms(began.elapsed()));
    }
    Ok(samples)
}

async fn write_echo(mcp: &McpServer, n: usize) -> Result<Vec<Metric>, String> {
    let sid = start(mcp, "interactive").await?;
    let result = echo_samples(mcp, &sid, n).await;
    let ended = end(mcp, &sid).await;
    let samples = result?;
    ended?;
    let sid = start(mcp, "interactive").await?;
    let in_flight = echo_in_flight_samples(mcp, &sid, n).await;
    end(mcp, &sid).await?;
    Ok(vec![
        Metric::distribution("write_to_echo", "ms", &samples.total),
        Metric::distribution("write_to_echo_wait_in_flight", "ms", &in_flight?),
        Metric::distribution("terminal_write_call", "ms", &samples.write),
        Metric::distribution("terminal_wait_call", "ms", &samples.wait),
    ])
}

/// The shells `exec_roundtrip_ms` runs commands in: sh on pipes, bash on a terminal.
fn exec_profiles() -> Value {
    json!({
        "bench-sh": {"argv": ["/bin/sh"], "shell": "posix"},
        "bench-bash": {
            "argv": ["/bin/bash", "--noprofile", "--norc", "-i"],
            "mode": "pty",
            "shell": "posix",
        },
    })
}

/// terminal_exec round trips of `true` and `echo hi`, on pipes and on a terminal.
async fn exec_roundtrip(mcp: &McpServer, n: usize) -> Result<Vec<Metric>, String> {
    let mut metrics = Vec::new();
    for (mode, command_id) in [("pipe", "bench-sh"), ("pty", "bench-bash")] {
        let sid = start(mcp, command_id).await?;
        let result = exec_samples(mcp, &sid, n).await;
        let ended = end(mcp, &sid).await;
        let [true_ms, echo_ms] = result?;
        ended?;
        metrics.push(Metric::distribution(
            &format!("{mode}_true"),
            "ms",
            &true_ms,
        ));
        metrics.push(Metric::distribution(
            &format!("{mode}_echo_hi"),
            "ms",
            &echo_ms,
        ));
    }
    Ok(metrics)
}

async fn exec_samples(mcp: &McpServer, sid: &str, n: usize) -> Result<[Vec<f64>; 2], String> {
    let commands = [("true", ""), ("echo hi", "hi\n")];
    // The first call also sets the shell up; it is not a sample.
    exec_checked(mcp, sid, commands[0]).await?;
    let mut samples = [Vec::new(), Vec::new()];
    for _ in 0..n {
        for (sample, command) in samples.iter_mut().zip(commands) {
            let began = Instant::now();
            exec_checked(mcp, sid, command).await?;
            sample.push(ms(began.elapsed()));
        }
    }
    Ok(samples)
}

async fn exec_checked(
    mcp: &McpServer,
    sid: &str,
    (command, want): (&str, &str),
) -> Result<(), String> {
    let r = call(
        mcp,
        "terminal_exec",
        json!({"session_id": sid, "command": command}),
    )
    .await?;
    if r["outcome"] == "completed" && r["exit_code"] == 0 && r["output"] == want {
        Ok(())
    } else {
        Err(format!("terminal_exec `{command}` answered {r}"))
    }
}

/// Echo round trips: the whole sample and its two calls.
#[derive(Debug, Default)]
struct EchoSamples {
    total: Vec<f64>,
    write: Vec<f64>,
    wait: Vec<f64>,
}

async fn echo_samples(mcp: &McpServer, sid: &str, n: usize) -> Result<EchoSamples, String> {
    let ready = wait_for(mcp, sid, 0, "ready", false).await?;
    let mut cursor = field_u64(&ready, "next_cursor")?;
    let mut samples = EchoSamples::default();
    for i in 1..=n {
        let began = Instant::now();
        call(
            mcp,
            "terminal_write",
            json!({"session_id": sid, "text": format!("line {i}\n")}),
        )
        .await?;
        let written = began.elapsed();
        let matched = wait_for(mcp, sid, cursor, &format!("echo: line {i}"), false).await?;
        let total = began.elapsed();
        let text = matched.pointer("/match/text").and_then(Value::as_str);
        if text != Some(format!("echo: line {i}").as_str()) {
            return Err(format!("line {i}: unexpected match {matched}"));
        }
        samples.total.push(ms(total));
        samples.write.push(ms(written));
        samples.wait.push(ms(total - written));
        cursor = field_u64(&matched, "next_cursor")?;
    }
    Ok(samples)
}

/// The same round trip with both calls sent at once: `terminal_wait` for the echo from the
/// last `next_cursor`, and the `terminal_write` of its line; each sample from sending the
/// pair to the match. A client that waits while it writes sees this latency.
async fn echo_in_flight_samples(mcp: &McpServer, sid: &str, n: usize) -> Result<Vec<f64>, String> {
    let ready = wait_for(mcp, sid, 0, "ready", false).await?;
    let mut cursor = field_u64(&ready, "next_cursor")?;
    let mut samples = Vec::with_capacity(n);
    for i in 1..=n {
        let want = format!("echo: line {i}");
        let began = Instant::now();
        let waiting = mcp.call_in_background(
            "terminal_wait",
            &json!({"session_id": sid, "cursor": cursor, "pattern": want, "timeout_ms": 10_000}),
        )?;
        call(
            mcp,
            "terminal_write",
            json!({"session_id": sid, "text": format!("line {i}\n")}),
        )
        .await?;
        let answer = waiting.await.map_err(|e| e.to_string())??;
        samples.push(ms(began.elapsed()));
        let matched = answer
            .get("structuredContent")
            .ok_or_else(|| format!("line {i}: no structured content in {answer}"))?;
        if matched.pointer("/match/text") != Some(&json!(want)) {
            return Err(format!("line {i}: unexpected answer {matched}"));
        }
        cursor = field_u64(matched, "next_cursor")?;
    }
    Ok(samples)
}

async fn pty_keys(mcp: &McpServer, n: usize) -> Result<Vec<Metric>, String> {
    let sid = start(mcp, "pty-tui").await?;
    let result = key_samples(mcp, &sid, n).await;
    let ended = end(mcp, &sid).await;
    let (samples, polls) = result?;
    ended?;
    Ok(vec![
        Metric::distribution("keys_to_screen", "ms", &samples),
        Metric::distribution("terminal_screen_calls_per_sample", "calls", &polls),
    ])
}

/// Poll terminal_screen until a line reads `want`; the number of calls it took.
async fn poll_screen(mcp: &McpServer, sid: &str, want: &str) -> Result<usize, String> {
    let began = Instant::now();
    let mut calls = 0;
    loop {
        let screen = call(mcp, "terminal_screen", json!({"session_id": sid})).await?;
        calls += 1;
        let lines = screen.get("lines").and_then(Value::as_array);
        let shown = lines.is_some_and(|lines| {
            lines
                .iter()
                .any(|l| l.as_str().map(str::trim_end) == Some(want))
        });
        if shown {
            return Ok(calls);
        }
        if began.elapsed() > POLL_BOUND {
            return Err(format!(
                "`{want}` not on the screen after {} s: {screen}",
                POLL_BOUND.as_secs()
            ));
        }
    }
}

async fn key_samples(mcp: &McpServer, sid: &str, n: usize) -> Result<(Vec<f64>, Vec<f64>), String> {
    poll_screen(mcp, sid, "counter: 0").await?;
    let mut samples = Vec::with_capacity(n);
    let mut polls = Vec::with_capacity(n);
    for k in 1..=n {
        let began = Instant::now();
        call(
            mcp,
            "terminal_keys",
            json!({"session_id": sid, "keys": ["Up"]}),
        )
        .await?;
        let calls = poll_screen(mcp, sid, &format!("counter: {k}")).await?;
        samples.push(ms(began.elapsed()));
        polls.push(calls as f64);
    }
    Ok((samples, polls))
}

/// How the flood runs went: time from terminal_start to the exited wait result, a run each.
#[derive(Debug, Clone)]
struct FloodRuns {
    start_to_exit: Vec<Duration>,
}

/// Run `flood` `runs` times (at least once), each until it has exited with all its output
/// retained: as many samples of capture as the direct-pipe floor takes. Every run but the
/// last is forgotten; the last one's session is returned for reading.
async fn flood_sessions(mcp: &McpServer, runs: usize) -> Result<(String, FloodRuns), String> {
    let mut start_to_exit = Vec::new();
    loop {
        let (sid, took) = flood_session(mcp).await?;
        start_to_exit.push(took);
        if start_to_exit.len() >= runs.max(1) {
            return Ok((sid, FloodRuns { start_to_exit }));
        }
        call(mcp, "terminal_forget", json!({"session_id": sid})).await?;
    }
}

/// Start `flood` and wait until it has exited with all its output retained.
async fn flood_session(mcp: &McpServer) -> Result<(String, Duration), String> {
    let began = Instant::now();
    let sid = start(mcp, FLOOD_PROFILE).await?;
    let result = wait_exit(mcp, &sid, 60_000).await?;
    let start_to_exit = began.elapsed();
    let session = result.get("session").unwrap_or(&result);
    if session.get("exit_code") != Some(&json!(0)) {
        return Err(format!("flood did not exit 0: {result}"));
    }
    // A wait without a pattern returns once the output has settled too.
    let status = call(mcp, "terminal_status", json!({"session_id": sid})).await?;
    if status.get("output_complete") != Some(&Value::Bool(true)) {
        return Err(format!("output is not complete after the wait: {status}"));
    }
    if field_u64(&status, "base_cursor")? != 0 {
        return Err(format!("the flood was truncated: {status}"));
    }
    Ok((sid, start_to_exit))
}

/// A real page answer of `flood-1m` and a real tools/list answer, taken on raw pipes from
/// a server on `config`, each decoded `samples` times as rmcp's stdio codec decodes a line.
async fn client_decode(
    server: &Path,
    root: &Path,
    config: &Path,
    samples: usize,
) -> Result<Vec<Metric>, String> {
    let args = ["--config".to_string(), config.display().to_string()];
    let mut raw = RawServer::spawn(server, &args, root)?;
    raw.initialize().await?;
    let call = |id: u64, name: &str, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": name, "arguments": arguments}})
        .to_string()
    };
    raw.send_line(&call(
        1,
        "terminal_start",
        json!({"command_id": FLOOD_PROFILE}),
    ))
    .await?;
    let started = raw.read_json(Duration::from_secs(30)).await?;
    let sid = started
        .pointer("/result/structuredContent/session_id")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("terminal_start failed: {started}"))?
        .to_owned();
    let wait = json!({"session_id": sid, "timeout_ms": 30_000});
    raw.send_line(&call(2, "terminal_wait", wait)).await?;
    let waited = raw.read_json(Duration::from_secs(40)).await?;
    if waited.pointer("/result/structuredContent/outcome") != Some(&json!("exited")) {
        return Err(format!("the flood did not exit: {waited}"));
    }
    let read = json!({"session_id": sid, "cursor": 0, "max_bytes": 65_536});
    raw.send_line(&call(3, "terminal_read", read)).await?;
    let page = raw.read_line(Duration::from_secs(30)).await?;
    raw.send_line(r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#)
        .await?;
    let tools = raw.read_line(Duration::from_secs(30)).await?;
    let page_ms = decode_times(&page, samples)?;
    let tools_ms = decode_times(&tools, samples)?;
    Ok(vec![
        Metric::value("page_answer_bytes", "bytes", page.len() as f64),
        Metric::distribution("page_answer_decode", "ms", &page_ms),
        Metric::value("tools_list_answer_bytes", "bytes", tools.len() as f64),
        Metric::distribution("tools_list_answer_decode", "ms", &tools_ms),
    ])
}

/// `samples` times: what rmcp's `JsonRpcMessageCodec::decode` does with a buffer holding
/// `line` and its newline.
fn decode_times(line: &str, samples: usize) -> Result<Vec<f64>, String> {
    let mut bytes = line.as_bytes().to_vec();
    bytes.push(b'\n');
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let began = Instant::now();
        let end = bytes
            .iter()
            .position(|b| *b == b'\n')
            .unwrap_or(bytes.len());
        let body = &bytes[..end];
        std::str::from_utf8(body).map_err(|e| e.to_string())?;
        let message: rmcp::model::ServerJsonRpcMessage =
            serde_json::from_slice(body).map_err(|e| format!("rmcp cannot decode it: {e}"))?;
        times.push(ms(began.elapsed()));
        drop(std::hint::black_box(message));
    }
    Ok(times)
}

async fn read_throughput(
    mcp: &McpServer,
    sid: &str,
    runs: FloodRuns,
    passes: usize,
) -> Result<Vec<Metric>, String> {
    let expected = expected_flood();
    let mut pass_ms = Vec::with_capacity(passes);
    let mut rates = Vec::with_capacity(passes);
    let mut page_ms = Vec::new();
    let mut pages = 0;
    for pass in 0..passes {
        let began = Instant::now();
        let (text, pass_pages) = read_all(mcp, sid, &mut page_ms)
            .await
            .map_err(|e| format!("pass {pass}: {e}"))?;
        let elapsed = began.elapsed();
        if text != expected {
            let at = text
                .chars()
                .zip(expected.chars())
                .take_while(|(a, b)| a == b)
                .count();
            return Err(format!(
                "pass {pass}: read {} code points, flood wrote {}; they differ from code point {at}",
                text.chars().count(),
                expected.chars().count()
            ));
        }
        pages = pass_pages;
        pass_ms.push(ms(elapsed));
        rates.push(mb_per_s(text.len() as u64, elapsed));
    }
    let total = expected.len() as u64;
    Ok(vec![
        Metric::value("bytes_read_per_pass", "bytes", total as f64),
        Metric::value("pages_per_pass", "pages", pages as f64),
        Metric::distribution("read_pass", "ms", &pass_ms),
        Metric::distribution("read_rate", "MB/s", &rates),
        Metric::distribution("terminal_read_page", "ms", &page_ms),
        Metric::distribution(
            "flood_start_to_exit",
            "ms",
            &runs
                .start_to_exit
                .iter()
                .map(|d| ms(*d))
                .collect::<Vec<_>>(),
        ),
        Metric::distribution(
            "flood_ingest_rate",
            "MB/s",
            &runs
                .start_to_exit
                .iter()
                .map(|d| mb_per_s(total, *d))
                .collect::<Vec<_>>(),
        ),
    ])
}

/// Page terminal_read from 0 to the end; the text, checked for contiguous cursors, and the
/// number of pages.
async fn read_all(
    mcp: &McpServer,
    sid: &str,
    page_ms: &mut Vec<f64>,
) -> Result<(String, usize), String> {
    let mut text = String::with_capacity(FLOOD_TOTAL as usize + 64);
    let mut cursor = 0u64;
    let mut pages = 0usize;
    loop {
        let began = Instant::now();
        let page = call(
            mcp,
            "terminal_read",
            json!({"session_id": sid, "cursor": cursor, "max_bytes": PAGE_BYTES}),
        )
        .await?;
        page_ms.push(ms(began.elapsed()));
        pages += 1;
        let records = page
            .get("records")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("page at {cursor} has no records"))?;
        for record in records {
            if field_u64(record, "cursor")? != cursor {
                return Err(format!("record at {cursor} says {record}"));
            }
            let chunk = field_str(record, "text")?;
            cursor += chunk.chars().count() as u64;
            text.push_str(chunk);
        }
        if field_u64(&page, "next_cursor")? != cursor {
            return Err(format!("page ending at {cursor} has next_cursor {page}"));
        }
        if page.get("has_more") != Some(&Value::Bool(true)) {
            return Ok((text, pages));
        }
        if records.is_empty() {
            return Err(format!("empty page at {cursor} with has_more"));
        }
    }
}

async fn wait_search(mcp: &McpServer, sid: &str, passes: usize) -> Result<Vec<Metric>, String> {
    let mut samples = Vec::with_capacity(passes);
    let mut rates = Vec::with_capacity(passes);
    let want = format!("flood total: {FLOOD_TOTAL}");
    for pass in 0..passes {
        let began = Instant::now();
        let result = call(
            mcp,
            "terminal_wait",
            json!({"session_id": sid, "cursor": 0, "pattern": r"flood total: \d+",
                   "timeout_ms": 60_000}),
        )
        .await?;
        let elapsed = began.elapsed();
        let text = result.pointer("/match/text").and_then(Value::as_str);
        let start = result
            .pointer("/match/start_cursor")
            .and_then(Value::as_u64);
        if result.get("outcome") != Some(&json!("matched"))
            || text != Some(want.as_str())
            || start != Some(FLOOD_TOTAL)
        {
            return Err(format!("pass {pass}: unexpected result {result}"));
        }
        samples.push(ms(elapsed));
        rates.push(mb_per_s(FLOOD_TOTAL, elapsed));
    }
    Ok(vec![
        Metric::value("bytes_searched", "bytes", FLOOD_TOTAL as f64),
        Metric::distribution("wait_to_match", "ms", &samples),
        Metric::distribution("search_rate", "MB/s", &rates),
    ])
}

/// The results as a plain-text table.
pub fn table(report: &BenchReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<24} {:<34} {:<6} {:>5} {:>11} {:>11} {:>11} {:>11}",
        "benchmark", "metric", "unit", "n", "min", "median", "p95", "max"
    );
    for b in &report.benchmarks {
        if let Some(why) = &b.failure {
            let _ = writeln!(out, "{:<24} FAILED: {why}", b.name);
        }
        for m in &b.metrics {
            match (&m.stats, m.value) {
                (Some(s), _) => {
                    let _ = writeln!(
                        out,
                        "{:<24} {:<34} {:<6} {:>5} {:>11} {:>11} {:>11} {:>11}",
                        b.name,
                        m.name,
                        m.unit,
                        s.samples,
                        num(s.min),
                        num(s.median),
                        num(s.p95),
                        num(s.max)
                    );
                }
                (None, Some(v)) => {
                    let _ = writeln!(
                        out,
                        "{:<24} {:<34} {:<6} {:>5} {:>11}",
                        b.name,
                        m.name,
                        m.unit,
                        "",
                        num(v)
                    );
                }
                (None, None) => {}
            }
        }
    }
    out.push('\n');
    out.push_str(&comparison_rows(report, false));
    let env = &report.environment;
    let _ = writeln!(
        out,
        "\n{} on {} ({} CPUs, {}); load {} → {}; {}",
        env.server_version,
        env.cpu_model,
        env.nproc,
        env.os,
        load(env.loadavg_start),
        load(env.loadavg_end),
        if report.passed {
            "all passed"
        } else {
            "FAILED"
        }
    );
    out
}

fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x:.3}")
    }
}

fn load(l: Option<[f64; 3]>) -> String {
    l.map(|[a, b, c]| format!("{a:.2}/{b:.2}/{c:.2}"))
        .unwrap_or_else(|| "unknown".into())
}

/// The results as a Markdown document.
/// The comparisons as a Markdown table, or as plain columns.
fn comparison_rows(report: &BenchReport, markdown: bool) -> String {
    let mut out = String::new();
    if markdown {
        out.push_str("| workload | unit | value | floor | ratio | target | met |\n");
        out.push_str("|---|---|--:|--:|--:|---|---|\n");
    } else {
        let _ = writeln!(
            out,
            "{:<36} {:<6} {:>11} {:>11} {:>8}  target",
            "workload", "unit", "value", "floor", "ratio"
        );
    }
    for c in &report.comparisons {
        let floor = c.floor.map(num).unwrap_or_else(|| "–".into());
        let ratio = c.ratio.map(num).unwrap_or_else(|| "–".into());
        let met = match &c.missed_by {
            None => "yes".to_owned(),
            Some(by) => format!("**no**: {by}"),
        };
        if markdown {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {floor} | {ratio} | {} | {met} |",
                c.name,
                c.unit,
                num(c.value),
                c.target
            );
        } else {
            let _ = writeln!(
                out,
                "{:<36} {:<6} {:>11} {floor:>11} {ratio:>8}  {} {}",
                c.name,
                c.unit,
                num(c.value),
                c.target,
                if c.met { "" } else { "(missed)" }
            );
        }
    }
    out
}

pub fn markdown(report: &BenchReport) -> String {
    let env = &report.environment;
    let mut out = String::from("# mcp-terminal benchmarks\n\n");
    let _ = writeln!(
        out,
        "Generated by `cargo run --release -p harness -- bench{}` ({} sample counts). \
         Verdict: **{}**.\n",
        if report.quick { " --quick" } else { "" },
        if report.quick { "smoke-check" } else { "full" },
        if report.passed {
            "all passed"
        } else {
            "FAILED"
        }
    );
    out.push_str("## How measured\n\n");
    out.push_str(
        "The harness starts the release server (`mcp-terminal stdio`) and drives it through \
         the same rmcp MCP client the acceptance scenarios use, one request at a time. Every \
         latency is client-observed, from sending the request to receiving its result, so it \
         includes JSON-RPC framing and serialization on both sides and the stdio pipe hops. \
         Percentiles use the nearest-rank method. Latency and concurrency benchmarks run on \
         the `make-config` defaults; the throughput benchmarks run on a second server with \
         the largest per-session buffer the config allows (buffer_bytes 16777216, \
         buffer_records 1048576, max_sessions 1, max_records 2). A session can retain at most \
         1,048,576 code points, less than the default `flood` writes (2,000,033), so the \
         throughput benchmarks run `demo-process flood 10000` (1,000,000 code points plus \
         its summary line, all ASCII, so 1,000,033 bytes), which stays whole; the read is \
         compared with exactly what it writes. MB is 10^6 bytes. \
         Memory is VmRSS (resident now) and VmHWM (peak resident) of the server process from \
         `/proc/<pid>/status`, in KiB. Every benchmark is bounded in samples and time; these \
         are measurements, not pass/fail thresholds — a benchmark fails only when it cannot \
         finish or sees wrong data.\n\n",
    );
    out.push_str("## Environment\n\n| | |\n|---|---|\n");
    let rows = [
        ("git commit", env.git_commit.clone().unwrap_or_default()),
        ("server", env.server_version.clone()),
        (
            "server binary",
            env.server_binary_bytes
                .map(|b| format!("{b} bytes"))
                .unwrap_or_else(|| "unknown".into()),
        ),
        ("OS / kernel", env.os.clone()),
        ("CPU", env.cpu_model.clone()),
        ("nproc", env.nproc.to_string()),
        ("date", format!("{} – {}", env.started_at, env.finished_at)),
        (
            "load average (1/5/15 min) start → end",
            format!("{} → {}", load(env.loadavg_start), load(env.loadavg_end)),
        ),
    ];
    for (k, v) in rows {
        let _ = writeln!(out, "| {k} | {v} |");
    }
    out.push_str("\n## Against the floors\n\n");
    out.push_str(
        "Each workload beside its floor measured in the same run (a minimal rmcp stdio \
         server with a no-op tool, built in the harness; the OS spawning a program or \
         reading a pipe in-process), as a ratio, and its target. Page reads are also shown \
         against the same pages from that floor server (`floor_pages`: built once, only \
         serialized) and as prebuilt answer bytes with no MCP server at all \
         (`canned_pages`): the most the rmcp client takes in on this machine, so a read \
         target above that floor is beyond any server here. Absolute numbers on a shared \
         machine move by tens of percent between runs; the ratios much less.\n\n",
    );
    out.push_str(&comparison_rows(report, true));
    out.push_str("\n## Results\n\n");
    for b in &report.benchmarks {
        let _ = writeln!(out, "### `{}`\n\n{}\n", b.name, b.description);
        if let Some(why) = &b.failure {
            let _ = writeln!(out, "**FAILED**: {why}\n");
        }
        let dists: Vec<(&Metric, &Stats)> = b
            .metrics
            .iter()
            .filter_map(|m| m.stats.as_ref().map(|s| (m, s)))
            .collect();
        if !dists.is_empty() {
            out.push_str(
                "| metric | unit | n | min | median | p95 | max | mean |\n\
                 |---|---|--:|--:|--:|--:|--:|--:|\n",
            );
            for (m, s) in dists {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {} |",
                    m.name,
                    m.unit,
                    s.samples,
                    num(s.min),
                    num(s.median),
                    num(s.p95),
                    num(s.max),
                    num(s.mean)
                );
            }
            out.push('\n');
        }
        let values: Vec<&Metric> = b.metrics.iter().filter(|m| m.stats.is_none()).collect();
        if !values.is_empty() {
            out.push_str("| metric | unit | value |\n|---|---|--:|\n");
            for m in values {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} |",
                    m.name,
                    m.unit,
                    m.value.map(num).unwrap_or_default()
                );
            }
            out.push('\n');
        }
    }
    if !report.notes.is_empty() {
        out.push_str("## Notes\n\n");
        for note in &report.notes {
            let _ = writeln!(out, "- {note}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let sorted: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&sorted, 50.0), 10.0);
        assert_eq!(percentile(&sorted, 95.0), 19.0);
        assert_eq!(percentile(&sorted, 100.0), 20.0);
        assert_eq!(percentile(&sorted, 0.0), 1.0);
        assert_eq!(percentile(&[7.0], 95.0), 7.0);
        let s = Stats::of(&[3.0, 1.0, 2.0, 4.0]).unwrap();
        assert_eq!(
            (s.samples, s.min, s.median, s.p95, s.max, s.mean),
            (4, 1.0, 2.0, 4.0, 4.0, 2.5)
        );
        assert_eq!(Stats::of(&[]), None);
    }

    #[test]
    fn parses_proc_status_and_loadavg() {
        let status = "Name:\tmcp-terminal\nVmPeak:\t  123456 kB\nVmHWM:\t    9876 kB\n\
                      VmRSS:\t    5432 kB\nThreads:\t3\n";
        assert_eq!(status_kib(status, "VmRSS"), Some(5432));
        assert_eq!(status_kib(status, "VmHWM"), Some(9876));
        assert_eq!(status_kib(status, "Threads"), None);
        assert_eq!(status_kib(status, "VmSwap"), None);
        assert_eq!(
            parse_loadavg("0.05 0.87 1.22 1/84 23702\n"),
            Some([0.05, 0.87, 1.22])
        );
        assert_eq!(parse_loadavg("x"), None);
        assert_eq!(
            cpu_model("processor\t: 0\nmodel name\t: AMD EPYC\n").as_deref(),
            Some("AMD EPYC")
        );
        let own = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(status_kib(&own, "VmRSS").unwrap() > 0);
    }

    #[test]
    fn expected_flood_matches_its_summary() {
        let text = expected_flood();
        assert_eq!(text.chars().count() as u64, FLOOD_TOTAL + 33);
        assert!(text.starts_with("flood 00000001 x"));
        assert!(text.ends_with("\nflood total: 1000000 code points\n"));
        // The whole output fits the largest allowed buffer.
        assert!(text.chars().count() <= 1_048_576);
    }
}
