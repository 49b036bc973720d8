//! The report rows: each workload beside its floor from the same run, as a ratio, and
//! whether it meets its target.

use super::report::{Benchmark, Stats, Status, num, round3};

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
    /// With several runs (`--runs`): each run's value and ratio, of which `value` and
    /// `ratio` are the medians.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values_per_run: Vec<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ratios_per_run: Vec<f64>,
    #[serde(skip)]
    target_kind: Target,
}

/// A figure of a metric of a benchmark that succeeded: `stat` of its samples, or its value.
fn metric(
    benchmarks: &[Benchmark],
    bench: &str,
    name: &str,
    stat: fn(&Stats) -> f64,
) -> Option<f64> {
    let b = benchmarks
        .iter()
        .find(|b| b.name == bench && b.status == Status::Ok)?;
    let m = b.metrics.iter().find(|m| m.name == name)?;
    m.stats.as_ref().map(stat).or(m.value)
}

/// A workload's name, unit, value, floor and target.
type Row<'a> = (&'a str, &'a str, Option<f64>, Option<f64>, Target);

#[derive(Debug, Clone, Copy)]
enum Target {
    RatioAtMost(f64),
    RatioAtLeast(f64),
    OverFloorAtMost(f64),
    AtMost(f64),
    AtLeast(f64),
}

pub(super) fn comparisons(benchmarks: &[Benchmark]) -> Vec<Comparison> {
    let get = |bench: &str, name: &str| metric(benchmarks, bench, name, |s| s.median);
    let p95 = |bench: &str, name: &str| metric(benchmarks, bench, name, |s| s.p95);
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
            Target::RatioAtMost(1.3),
        ),
        (
            "tools/list result",
            "bytes",
            get("tools_list", "result_bytes"),
            None,
            // 20 KB, read as 20,000 bytes rather than 20 KiB.
            Target::AtMost(20000.0),
        ),
        (
            "small call (terminal_status)",
            "ms",
            get("tool_roundtrip_ms", "terminal_status"),
            noop,
            Target::RatioAtMost(1.3),
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
            "terminal_exec `true`, pipes (sh)",
            "ms",
            get("exec_roundtrip_ms", "pipe_true"),
            get("shell_floors", "exec_true"),
            Target::RatioAtMost(2.0),
        ),
        (
            "terminal_exec `echo hi`, pipes (sh)",
            "ms",
            get("exec_roundtrip_ms", "pipe_echo_hi"),
            get("shell_floors", "exec_echo_hi"),
            Target::RatioAtMost(2.0),
        ),
        (
            "terminal_exec `true`, pipes (bash)",
            "ms",
            get("exec_roundtrip_ms", "bash_pipe_true"),
            get("shell_floors", "bash_exec_true"),
            Target::RatioAtMost(2.0),
        ),
        (
            "terminal_exec `echo hi`, pipes (bash)",
            "ms",
            get("exec_roundtrip_ms", "bash_pipe_echo_hi"),
            get("shell_floors", "bash_exec_echo_hi"),
            Target::RatioAtMost(2.0),
        ),
        (
            "terminal_exec `true`, PTY (bash -i)",
            "ms",
            get("exec_roundtrip_ms", "pty_true"),
            get("shell_floors", "exec_true"),
            Target::RatioAtMost(3.0),
        ),
        (
            "terminal_run `/bin/sh -c true`",
            "ms",
            get("run_roundtrip_ms", "run_true"),
            get("shell_floors", "run_true"),
            Target::RatioAtMost(1.5),
        ),
        (
            "terminal_run `/bin/sh -c 'echo hi'`",
            "ms",
            get("run_roundtrip_ms", "run_echo_hi"),
            get("shell_floors", "run_echo_hi"),
            Target::RatioAtMost(1.5),
        ),
        (
            "full-page reads, ASCII, against prebuilt answers",
            "MB/s",
            get("read_throughput", "read_rate"),
            get("read_throughput", "canned_read_rate"),
            Target::RatioAtLeast(0.9),
        ),
        (
            "full-page reads, 3-byte CJK, against prebuilt answers",
            "MB/s",
            get("cjk_read", "read_rate"),
            get("cjk_read", "canned_read_rate"),
            Target::RatioAtLeast(0.9),
        ),
        (
            "ceiling of ASCII page reads against prebuilt answers, set by a small call's cost",
            "×",
            get("read_throughput", "read_ceiling"),
            None,
            Target::AtLeast(0.9),
        ),
        (
            "ceiling of CJK page reads against prebuilt answers, set by a small call's cost",
            "×",
            get("cjk_read", "read_ceiling"),
            None,
            Target::AtLeast(0.9),
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
            get("read_throughput", "canned_read_rate"),
            None,
            Target::AtLeast(200.0),
        ),
        (
            "the same CJK pages, prebuilt answers (no server)",
            "MB/s",
            get("cjk_read", "canned_read_rate"),
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
            "capture of a flooding child on a terminal",
            "MB/s",
            get("terminal_capture", "capture_rate"),
            get("terminal_capture", "direct_rate"),
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
            p95("storm", "status_during_storm"),
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
            "flooding terminal session: terminal_status p95",
            "ms",
            p95("pty_flood", "status_in_flood"),
            None,
            Target::AtMost(20.0),
        ),
        (
            "flooding terminal session: a wait's lateness past its timeout",
            "ms",
            metric(benchmarks, "pty_flood", "wait_overrun", |s| s.max),
            None,
            Target::AtMost(1000.0),
        ),
        (
            "until_input: prompt to answer, p95",
            "ms",
            p95("input_wait", "until_input_ms"),
            get("input_wait", "idle_300_ms"),
            Target::RatioAtMost(0.5),
        ),
        (
            "server CPU while an until_input wait polls",
            "%",
            get("input_wait", "polling_cpu"),
            None,
            Target::AtMost(5.0),
        ),
        (
            "progress bar redrawn 20,000 times: bytes returned",
            "bytes",
            get("progress_bar", "rendered_bytes"),
            get("progress_bar", "raw_bytes"),
            Target::RatioAtMost(0.01),
        ),
        (
            "longest session lock hold",
            "ms",
            get("lock_hold", "longest_lock_hold"),
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
        (
            "RSS after 8 terminal sessions printed 3 MB each and were forgotten",
            "KiB",
            get("memory_terminals_ended", "after_terminals_rss"),
            get("memory_terminals_ended", "idle_rss"),
            Target::OverFloorAtMost(4096.0),
        ),
    ];
    rows.into_iter()
        .filter_map(|(name, unit, value, floor, target)| {
            let value = value?;
            let ratio = floor.filter(|f| *f > 0.0).map(|f| round3(value / f));
            Some(evaluate(name, unit, value, floor, ratio, target))
        })
        .collect()
}

/// The rows of several runs of the whole bench as one: each row's median value, floor and
/// ratio (each ratio taken within its run, never across runs), judged against its target,
/// with every run's value and ratio beside it.
pub(super) fn combine(runs: &[Vec<Comparison>]) -> Vec<Comparison> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first
        .iter()
        .map(|row| {
            let same: Vec<&Comparison> = runs
                .iter()
                .filter_map(|run| run.iter().find(|c| c.name == row.name))
                .collect();
            let values: Vec<f64> = same.iter().map(|c| c.value).collect();
            let floors: Vec<f64> = same.iter().filter_map(|c| c.floor).collect();
            let ratios: Vec<f64> = same.iter().filter_map(|c| c.ratio).collect();
            let floor = (!floors.is_empty()).then(|| median(&floors));
            let ratio = (!ratios.is_empty()).then(|| round3(median(&ratios)));
            let mut combined = evaluate(
                &row.name,
                &row.unit,
                median(&values),
                floor,
                ratio,
                row.target_kind,
            );
            combined.values_per_run = values;
            combined.ratios_per_run = ratios;
            combined
        })
        .collect()
}

fn median(xs: &[f64]) -> f64 {
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// A workload's figures judged against its target.
fn evaluate(
    name: &str,
    unit: &str,
    value: f64,
    floor: Option<f64>,
    ratio: Option<f64>,
    target: Target,
) -> Comparison {
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
            floor.map(|f| format!("{} {unit} over", num((value - f).abs() - d))),
        ),
        Target::AtMost(x) => (
            format!("≤ {} {unit}", num(x)),
            value <= x,
            Some(format!(
                "{} {unit} ({}) over",
                num(value - x),
                pct(value / x.max(1e-9) - 1.0)
            )),
        ),
        Target::AtLeast(x) => (
            format!("≥ {} {unit}", num(x)),
            value >= x,
            Some(format!(
                "{} {unit} ({}) short",
                num(x - value),
                pct(1.0 - value / x)
            )),
        ),
    };
    Comparison {
        name: name.into(),
        unit: unit.into(),
        value,
        floor,
        ratio,
        target: text,
        met,
        missed_by: if met { None } else { by },
        values_per_run: Vec::new(),
        ratios_per_run: Vec::new(),
        target_kind: target,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(value: f64, floor: f64) -> Comparison {
        let ratio = Some(round3(value / floor));
        evaluate(
            "call",
            "ms",
            value,
            Some(floor),
            ratio,
            Target::RatioAtMost(1.3),
        )
    }

    /// Each ratio is taken within its run and the median of those is judged: a run whose
    /// floor was slow does not lend its ratio to another run's value.
    #[test]
    fn runs_combine_into_median_ratios_judged_against_the_target() {
        let runs = vec![
            vec![row(1.2, 1.0)],
            vec![row(3.0, 2.0)],
            vec![row(1.0, 1.0)],
        ];
        let [combined] = combine(&runs).try_into().unwrap();
        assert_eq!(combined.ratios_per_run, vec![1.2, 1.5, 1.0]);
        assert_eq!(combined.values_per_run, vec![1.2, 3.0, 1.0]);
        assert_eq!(combined.ratio, Some(1.2));
        assert_eq!(combined.value, 1.2);
        assert_eq!(combined.floor, Some(1.0));
        assert!(combined.met, "{combined:?}");
        let slow = vec![vec![row(1.4, 1.0)], vec![row(1.5, 1.0)]];
        let [missed] = combine(&slow).try_into().unwrap();
        assert_eq!(missed.ratio, Some(1.45));
        assert!(!missed.met);
        assert!(combine(&[]).is_empty());
    }
}
