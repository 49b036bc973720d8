//! What a run found and how it is written: the report (`bench.json`), its benchmarks and
//! their metrics (a value, or the statistics of a sample set), the environment it ran in, and
//! the plain-text table and Markdown document made from it.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::Sizes;
use super::targets::Comparison;

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub quick: bool,
    /// Runs of the whole bench this report stands for (`--runs`): the comparisons are
    /// medians over them, the results those of the first.
    pub runs: usize,
    pub passed: bool,
    pub environment: Environment,
    pub sizes: Sizes,
    pub benchmarks: Vec<Benchmark>,
    /// Workloads beside their floors from this run, with their targets.
    pub comparisons: Vec<Comparison>,
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
    pub fn value(name: &str, unit: &str, value: f64) -> Self {
        Metric {
            name: name.into(),
            unit: unit.into(),
            value: Some(round3(value)),
            stats: None,
        }
    }

    pub fn distribution(name: &str, unit: &str, samples: &[f64]) -> Self {
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

pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The median of `samples` as `Stats` takes it; NaN for none.
pub fn median(samples: &[f64]) -> f64 {
    Stats::of(samples).map_or(f64::NAN, |s| s.median)
}

/// Megabytes (10^6 bytes) a second.
pub fn mb_per_s(bytes: u64, d: Duration) -> f64 {
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

pub fn loadavg() -> Option<[f64; 3]> {
    parse_loadavg(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// The first `model name` of a /proc/cpuinfo text.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name.trim() == "model name").then(|| value.trim().to_string())
    })
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

pub fn num(x: f64) -> String {
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

/// The comparisons as a Markdown table, or as plain columns.
fn comparison_rows(report: &BenchReport, markdown: bool) -> String {
    let mut out = String::new();
    let per_run = report.runs > 1;
    if markdown && per_run {
        out.push_str("| workload | unit | value | floor | ratio | per run | target | met |\n");
        out.push_str("|---|---|--:|--:|--:|--:|---|---|\n");
    } else if markdown {
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
        let runs = if c.ratios_per_run.is_empty() {
            &c.values_per_run
        } else {
            &c.ratios_per_run
        };
        let runs = runs.iter().map(|x| num(*x)).collect::<Vec<_>>().join(", ");
        if markdown && per_run {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {floor} | {ratio} | {runs} | {} | {met} |",
                c.name,
                c.unit,
                num(c.value),
                c.target
            );
        } else if markdown {
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

/// The results as a Markdown document.
pub fn markdown(report: &BenchReport) -> String {
    let env = &report.environment;
    let mut out = String::from("# mcp-terminal benchmarks\n\n");
    let _ = writeln!(
        out,
        "Generated by `cargo run --release -p harness -- bench{}{}` ({} sample counts). \
         Verdict: **{}**.\n",
        if report.quick { " --quick" } else { "" },
        if report.runs > 1 {
            format!(" --runs {}", report.runs)
        } else {
            String::new()
        },
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
         reading a pipe or a terminal in-process; for terminal_exec a persistent \
         `/bin/sh` on pipes driven in-process with a marker line after each command (bash \
         so driven for the rows of bash on pipes), and \
         for terminal_run \
         `/bin/sh -c LINE` spawned in-process, neither with any MCP), as a ratio, and its \
         target. Page reads are also shown \
         against the same pages from that floor server (`floor_pages`: built once, only \
         serialized) and as prebuilt answer bytes with no MCP server at all \
         (`canned_read_rate`, a pass of it before each pass of the server's, so both see \
         the machine alike): the most the rmcp client takes in on this machine, so a read \
         target above that floor is beyond any server here. The read ceilings split a \
         page's cost in two: each is the ratio to those prebuilt pages that a server would \
         reach if a page cost it only what a small call (terminal_status) costs over the \
         prebuilt answer to a no-op call of the same shape, measured alternating with it; \
         what a page read falls short of its ceiling is the server's work on the page's \
         bytes. Absolute numbers on a shared machine move by tens of percent between runs; \
         the ratios much less.\n\n",
    );
    if report.runs > 1 {
        let _ = writeln!(
            out,
            "The whole bench ran {} times in a row. Each ratio is taken within its run; the \
             table gives the median of the runs' values and of their ratios, judged against \
             the target, and each run's ratio (or value, for a row without a floor).\n",
            report.runs
        );
    }
    out.push_str(&comparison_rows(report, true));
    out.push_str("\n## Results\n\n");
    if report.runs > 1 {
        out.push_str("The first of the runs, in full.\n\n");
    }
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
}
