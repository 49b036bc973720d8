//! `harness bench`: speed and memory of the server, measured through the same MCP client the
//! scenarios use (rmcp over the server's stdio), against the demo profiles.
//!
//! Every benchmark is bounded in samples and in time and stops by itself. A benchmark whose
//! data is wrong (a read that does not return exactly what `flood` wrote, an echo that does
//! not arrive) fails; the report is written either way. Latencies are client-observed: from
//! sending the request to receiving its result, so they include JSON-RPC framing, rmcp on
//! both sides and the pipe hops.
//!
//! Every workload has one shape (`workload`): a `Workload` names it and says what it
//! measures, a `Setup` says what server it runs on, and `measure` runs it into a
//! `Benchmark`; its floor is measured beside it, and `targets` makes the report row of the
//! two. The workloads live in modules named for what they measure: `latency`, `exec`,
//! `throughput`, `floors`, `storm`, `lock_hold`, `input_wait`, `progress`, `memory`,
//! `live_view`, `terminal_capture`; `calls` holds the tool calls they share, `report` the
//! report and how it is written.
//!
//! Flow at a glance: `run` → `run_all`, which runs the workloads in a fixed order: the
//! latency workloads on one server on the `make-config` defaults, the throughput workloads
//! on one with the largest per-session buffer the config allows (16 MiB and 1,048,576
//! records; `max_sessions` 1 and `max_records` 2 to stay under the global caps), probing the
//! memory of both in between, then the rest, each on a server of its own → `targets`.

use std::path::Path;

use serde::Serialize;
use serde_json::json;

use crate::evidence;

mod calls;
mod exec;
mod floors;
mod input_wait;
mod latency;
mod live_view;
mod lock_hold;
mod memory;
mod progress;
mod report;
mod storm;
mod targets;
mod terminal_capture;
mod throughput;
mod workload;

pub use report::{
    BenchReport, Benchmark, Environment, Metric, Stats, Status, cpu_model, markdown, parse_loadavg,
    percentile, status_kib, table,
};
pub use targets::Comparison;

use workload::{Servers, Setup, Workload, failed, measure};

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
        loadavg_start: report::loadavg(),
        loadavg_end: None,
    };
    let sizes = Sizes::new(quick);
    let mut report = BenchReport {
        quick,
        runs: 1,
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
    report.comparisons = targets::comparisons(&report.benchmarks);
    report.environment.finished_at = evidence::now_rfc3339();
    report.environment.loadavg_end = report::loadavg();
    report.passed =
        !report.benchmarks.is_empty() && report.benchmarks.iter().all(|b| b.status == Status::Ok);
    report
}

/// Run the whole bench `runs` times in a row (at least once): one report whose rows are
/// the medians of the runs' (`targets::combine`), with the first run's results in full.
pub fn run_repeated(server: &Path, workspace: &Path, quick: bool, runs: usize) -> BenchReport {
    let mut reports: Vec<BenchReport> = (0..runs.max(1))
        .map(|_| run(server, workspace, quick))
        .collect();
    let mut report = reports.remove(0);
    if reports.is_empty() {
        return report;
    }
    let mut per_run = vec![report.comparisons.clone()];
    for (n, other) in reports.iter().enumerate() {
        per_run.push(other.comparisons.clone());
        report.passed &= other.passed;
        let run = n + 2;
        report
            .notes
            .extend(other.notes.iter().map(|note| format!("run {run}: {note}")));
        for failed in other.benchmarks.iter().filter(|b| b.status != Status::Ok) {
            let why = failed.failure.as_deref().unwrap_or("no reason given");
            report
                .notes
                .push(format!("run {run}: `{}` failed: {why}", failed.name));
        }
    }
    if let Some(last) = reports.last() {
        report.environment.finished_at = last.environment.finished_at.clone();
        report.environment.loadavg_end = last.environment.loadavg_end;
    }
    report.comparisons = targets::combine(&per_run);
    report.runs = per_run.len();
    report
}

/// Every workload, in the order of the report.
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
    let servers = Servers {
        server: server.to_path_buf(),
        root,
        config_dir: config_dir.path().to_path_buf(),
    };
    let quick = sizes.read_passes == 1;
    let out = &mut report.benchmarks;
    let mut memory = memory::Probes::new(server, report.environment.server_binary_bytes);

    // Latency and concurrency, on the default limits.
    let defaults = Setup {
        name: "default",
        limits: json!({}),
        profiles: exec::exec_profiles(),
    };
    let on_defaults = [
        &latency::START_TO_EXIT,
        &latency::TOOL_ROUNDTRIP,
        &latency::WRITE_ECHO,
        &exec::EXEC_ROUNDTRIP,
        &exec::RUN_ROUNDTRIP,
        &exec::SHELL_FLOORS,
        &latency::TOOLS_LIST,
        &latency::PTY_KEYS,
    ];
    match servers.start(&defaults).await {
        Err(e) => fail_all(out, &on_defaults, &e, &mut memory),
        Ok(mut mcp) => {
            memory.probe(&mcp, "idle");
            memory.take(memory::concurrent_long(&mcp).await);
            let n = sizes.start_to_exit;
            out.push(measure(&latency::START_TO_EXIT, latency::start_to_exit(&mcp, n)).await);
            let n = sizes.tool_roundtrip;
            out.push(measure(&latency::TOOL_ROUNDTRIP, latency::tool_roundtrip(&mcp, n)).await);
            let n = sizes.write_echo;
            out.push(measure(&latency::WRITE_ECHO, latency::write_echo(&mcp, n)).await);
            out.push(measure(&exec::EXEC_ROUNDTRIP, exec::exec_roundtrip(&mcp, n)).await);
            out.push(measure(&exec::RUN_ROUNDTRIP, exec::run_roundtrip(&mcp, n)).await);
            out.push(measure(&exec::SHELL_FLOORS, exec::shell_floors(n)).await);
            out.push(measure(&latency::TOOLS_LIST, latency::tools_list(&mcp)).await);
            let n = sizes.pty_keys;
            out.push(measure(&latency::PTY_KEYS, latency::pty_keys(&mcp, n)).await);
            memory.probe(&mcp, "after_latency");
            report.notes.extend(mcp.shutdown().await);
        }
    }

    // Throughput, with a buffer that keeps the whole flood.
    let on_flood = [&throughput::READ_THROUGHPUT, &throughput::WAIT_SEARCH];
    match servers
        .start(&throughput::flood_setup(&servers.demo()))
        .await
    {
        Err(e) => fail_all(out, &on_flood, &e, &mut memory),
        Ok(mut mcp) => {
            memory.probe(&mcp, "throughput_idle");
            match throughput::flood_sessions(&mcp, sizes.read_passes).await {
                Err(e) => fail_all(
                    out,
                    &on_flood,
                    &format!("the flood session: {e}"),
                    &mut memory,
                ),
                Ok((sid, runs)) => {
                    memory.probe(&mcp, "flood_exited");
                    let passes = sizes.read_passes;
                    let reads = throughput::read_throughput(&mcp, &sid, runs, passes);
                    out.push(measure(&throughput::READ_THROUGHPUT, reads).await);
                    let search = throughput::wait_search(&mcp, &sid, sizes.wait_passes);
                    out.push(measure(&throughput::WAIT_SEARCH, search).await);
                    memory.probe(&mcp, "flood_retained");
                }
            }
            report.notes.extend(mcp.shutdown().await);
            let decode = throughput::client_decode(&servers, sizes.wait_passes * 10);
            out.push(measure(&throughput::CLIENT_DECODE, decode).await);
        }
    }

    let watched = live_view::watchers(&servers, sizes.read_passes);
    out.push(measure(&live_view::LIVE_VIEW, watched).await);

    // Beside the floors, each on a server of its own (or none).
    let n = if quick { 5 } else { 50 };
    out.push(measure(&latency::COLD_START, latency::cold_start(&servers, n)).await);
    out.push(measure(&floors::FLOOR_SERVER, floors::floor_server(n * 4)).await);
    let passes = if quick { 2 } else { 5 };
    out.push(measure(&floors::FLOOR_PAGES, floors::floor_pages(passes)).await);
    let on_echo = [&latency::FIRST_OUTPUT, &latency::PTY_ECHO];
    match servers.start(&latency::echo_setup(&servers.demo())).await {
        Err(e) => on_echo
            .iter()
            .for_each(|w| out.push(failed(w, e.clone(), 0))),
        Ok(mut mcp) => {
            out.push(measure(&latency::FIRST_OUTPUT, latency::first_output(&mcp, n)).await);
            out.push(measure(&latency::PTY_ECHO, latency::pty_echo(&mcp, n * 2)).await);
            mcp.shutdown().await;
        }
    }
    let demo = servers.demo();
    out.push(measure(&floors::DIRECT_PIPE, floors::direct_pipe(&demo, passes)).await);
    out.push(measure(&throughput::CJK_READ, throughput::cjk_read(&servers)).await);
    out.push(measure(&storm::STORM, storm::storm(&servers)).await);
    out.push(measure(&lock_hold::LOCK_HOLD, lock_hold::lock_hold(&servers)).await);
    out.push(measure(&input_wait::PTY_FLOOD, input_wait::pty_flood(&servers)).await);
    out.push(
        measure(
            &terminal_capture::TERMINAL_CAPTURE,
            terminal_capture::terminal_capture(&servers, passes),
        )
        .await,
    );
    let asks = if quick { 5 } else { 20 };
    out.push(
        measure(
            &input_wait::INPUT_WAIT,
            input_wait::input_wait(&servers, asks),
        )
        .await,
    );
    out.push(measure(&progress::PROGRESS_BAR, progress::progress_bar(&servers)).await);
    out.push(measure(&memory::MEMORY_AT_REST, memory::memory_at_rest(&servers)).await);
    out.push(measure(&memory::MEMORY_OSC_FLOOD, memory::osc_flood(&servers)).await);
    out.push(
        measure(
            &memory::MEMORY_TERMINALS_ENDED,
            memory::terminals_ended(&servers),
        )
        .await,
    );
    out.push(measure(&memory::MEMORY_RESIZE, memory::resize(&servers)).await);
    out.push(measure(&memory::MEMORY_ALTERNATING, memory::alternating(&servers)).await);

    out.push(memory.benchmark());
    drop(root_dir);
}

/// The workloads of a server that did not start, or of a session they all needed, fail
/// with `why`, and the memory probes they came with are missing for it.
fn fail_all(
    out: &mut Vec<Benchmark>,
    workloads: &[&Workload],
    why: &str,
    memory: &mut memory::Probes,
) {
    for workload in workloads {
        out.push(failed(workload, why.to_string(), 0));
    }
    memory.take(Err(why.to_string()));
}
