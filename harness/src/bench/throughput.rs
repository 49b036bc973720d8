//! Throughput: how fast output gets in (a flooding child's capture) and out (full-page
//! reads of ASCII and of 3-byte CJK text, a `terminal_wait` search through a whole buffer),
//! and the client's own share of a page (decoding it as rmcp does).

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::calls::{
    Paging, READ_WAIT_MS, call, complete, field_u64, poll, read_pages, sh, start, wait_exit,
};
use super::floors::{Canned, Page};
use super::report::{Metric, mb_per_s, ms};
use super::workload::{Servers, Setup, Workload};
use crate::client::McpServer;
use crate::raw::RawServer;

/// The throughput profile: `flood` with this many lines of `FLOOD_LINE_WIDTH` bytes, then
/// its summary line; the whole output fits the largest allowed buffer (1,048,576 records).
pub const FLOOD_PROFILE: &str = "flood-1m";
pub const FLOOD_LINES: u64 = 10_000;
const FLOOD_LINE_WIDTH: usize = 100;
/// Code points `flood` writes before its summary line.
const FLOOD_TOTAL: u64 = FLOOD_LINES * FLOOD_LINE_WIDTH as u64;
/// The name of the flood server's config.
const FLOOD_CONFIG: &str = "flood";
/// Lines of 3-byte CJK text the CJK read benchmark reads (13 code points, 37 bytes each).
pub const CJK_LINES: u64 = 70_000;
pub const CJK_LINE: &str = "中文字符测试中文字符测试\n";
/// The limits of a server whose one session keeps a whole `flood-1m` (the largest buffer
/// the config allows; `max_sessions` 1 and `max_records` 2 stay under the global caps).
fn whole_flood_limits() -> Value {
    json!({
        "max_sessions": 1,
        "max_records": 2,
        "buffer_bytes": 16_777_216,
        "buffer_records": 1_048_576,
    })
}

pub const READ_THROUGHPUT: Workload = Workload {
    name: "read_throughput",
    about: "`flood-1m` (`demo-process flood 10000`: 1,000,000 code points and a summary line, \
         retained whole), after it exited: terminal_read from 0 with max_bytes 65536 to the \
         end, checked against exactly what flood writes; capture (`flood_ingest_rate`) is \
         terminal_start to the exited wait of as many flood runs as there are read passes, \
         the earlier ones forgotten; before each pass, the same pages as prebuilt answers \
         (`canned_read_rate`, see `floor_pages`); then small calls, terminal_status of the \
         session each after a no-op call of the same shape answered with prebuilt bytes, \
         and `read_ceiling`: the ratio to the prebuilt pages that a server spending on a \
         page only the time its small call takes over theirs would reach",
};

pub const WAIT_SEARCH: Workload = Workload {
    name: "wait_search_throughput",
    about: "the same exited `flood-1m`: terminal_wait from cursor 0 for `flood total: \\d+`, \
         which matches only in the summary line after the 1,000,000 code points",
};

pub const CLIENT_DECODE: Workload = Workload {
    name: "client_decode",
    about: "answers as the server wrote them (read on raw pipes from a server on the \
         throughput config): terminal_read of `flood-1m` from cursor 0 with max_bytes 65536, \
         and tools/list; each decoded in-process as the rmcp client's stdio codec decodes \
         every message (the newline search, a UTF-8 check, then serde_json into \
         `ServerJsonRpcMessage`): the part of a page's time, and of cold start, that is the \
         client's own work",
};

pub const CJK_READ: Workload = Workload {
    name: "cjk_read",
    about: "70,000 lines of 3-byte CJK text (2,590,000 bytes) read from cursor 0 in full pages, \
         three passes, each after a pass of the same pages as prebuilt answers \
         (`canned_read_rate`); then small calls and `read_ceiling`, as in `read_throughput`",
};

/// The server the flood workloads run on: `flood-1m` retained whole.
pub fn flood_setup(demo: &Path) -> Setup {
    Setup {
        name: FLOOD_CONFIG,
        limits: whole_flood_limits(),
        profiles: json!({ FLOOD_PROFILE: {
            "argv": [demo.display().to_string(), "flood", FLOOD_LINES.to_string()],
            "description": "flood with 10,000 lines: 1,000,000 code points and a summary line",
        }}),
    }
}

/// Exactly what `flood` writes.
pub fn expected_flood() -> String {
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

/// How the flood runs went: time from terminal_start to the exited wait result, a run each.
#[derive(Debug, Clone)]
pub struct FloodRuns {
    start_to_exit: Vec<Duration>,
}

/// Run `flood` `runs` times (at least once), each until it has exited with all its output
/// retained: as many samples of capture as the direct-pipe floor takes. Every run but the
/// last is forgotten; the last one's session is returned for reading.
pub async fn flood_sessions(mcp: &McpServer, runs: usize) -> Result<(String, FloodRuns), String> {
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
/// a server on the config of `flood_setup` (written when that server started), each decoded
/// `samples` times as rmcp's stdio codec decodes a line.
pub async fn client_decode(servers: &Servers, samples: usize) -> Result<Vec<Metric>, String> {
    let config = servers.config_path(FLOOD_CONFIG);
    let args = ["--config".to_string(), config.display().to_string()];
    let mut raw = RawServer::spawn(&servers.server, &args, &servers.root, &Default::default())?;
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

pub async fn read_throughput(
    mcp: &McpServer,
    sid: &str,
    runs: FloodRuns,
    passes: usize,
) -> Result<Vec<Metric>, String> {
    let expected = expected_flood();
    let canned = Canned::start().await?;
    let (floor, mut floor_rates) = (Page::ascii(), Vec::with_capacity(passes));
    let mut pass_ms = Vec::with_capacity(passes);
    let mut rates = Vec::with_capacity(passes);
    let mut page_ms = Vec::new();
    let mut pages = 0;
    for pass in 0..passes {
        floor_rates.push(canned.pass(&floor).await?);
        let began = Instant::now();
        let paging = Paging {
            keep_text: true,
            page_ms: Some(&mut page_ms),
            ..Paging::default()
        };
        let read = read_pages(mcp, sid, 0, paging)
            .await
            .map_err(|e| format!("pass {pass}: {e}"))?;
        let elapsed = began.elapsed();
        let (text, pass_pages) = (read.text, read.pages);
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
    let server = (mcp, sid, pages);
    let calls = passes * SMALL_CALLS_PER_PASS;
    let ceiling = canned
        .read_ceiling(&floor, &floor_rates, server, calls)
        .await;
    canned.shutdown().await;
    let mut metrics = vec![
        Metric::value("bytes_read_per_pass", "bytes", total as f64),
        Metric::value("pages_per_pass", "pages", pages as f64),
        Metric::distribution("read_pass", "ms", &pass_ms),
        Metric::distribution("read_rate", "MB/s", &rates),
        Metric::distribution("canned_read_rate", "MB/s", &floor_rates),
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
    ];
    metrics.extend(ceiling?);
    Ok(metrics)
}

/// Small calls measured for the read ceiling (`Canned::read_ceiling`), per read pass.
const SMALL_CALLS_PER_PASS: usize = 40;

pub async fn wait_search(mcp: &McpServer, sid: &str, passes: usize) -> Result<Vec<Metric>, String> {
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

/// Full pages of 3-byte text, read through the client.
pub async fn cjk_read(servers: &Servers) -> Result<Vec<Metric>, String> {
    let script = format!("yes {} | head -n {CJK_LINES}", CJK_LINE.trim_end());
    let setup = Setup {
        name: "cjk",
        limits: whole_flood_limits(),
        profiles: json!({"cjk": {"argv": sh(&script)}}),
    };
    servers
        .with(&setup, async |mcp| {
            let sid = start(mcp, "cjk").await?;
            poll(mcp, &sid, Duration::from_secs(60), complete).await?;
            let canned = Canned::start().await?;
            let (floor, mut floor_rates) = (Page::cjk(), Vec::new());
            let (mut rates, mut pages) = (Vec::new(), 0);
            for _ in 0..3 {
                floor_rates.push(canned.pass(&floor).await?);
                let began = Instant::now();
                let read = read_pages(mcp, &sid, 0, Paging::waiting(READ_WAIT_MS)).await?;
                let (bytes, chars) = (read.bytes, read.code_points);
                if chars != CJK_LINES * 13 || bytes != CJK_LINES * CJK_LINE.len() as u64 {
                    return Err(format!("read {chars} code points in {bytes} bytes"));
                }
                rates.push(mb_per_s(bytes, began.elapsed()));
                pages = read.pages;
            }
            let server = (mcp, sid.as_str(), pages);
            let calls = 3 * SMALL_CALLS_PER_PASS;
            let ceiling = canned
                .read_ceiling(&floor, &floor_rates, server, calls)
                .await;
            canned.shutdown().await;
            let mut metrics = vec![
                Metric::distribution("read_rate", "MB/s", &rates),
                Metric::distribution("canned_read_rate", "MB/s", &floor_rates),
            ];
            metrics.extend(ceiling?);
            Ok(metrics)
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

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
