//! The floors measured in the same run, that workloads are shown against: a no-op call on
//! the floor server (the round-trip floor), full pages from it and from prebuilt answer bytes
//! with no MCP server at all (the page floors), and a pipe read in-process (the floor of
//! reads and capture).

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

use super::calls::field_u64;
use super::report::{Metric, mb_per_s};
use super::throughput::{CJK_LINE, CJK_LINES, expected_flood};
use super::workload::{Workload, timed, untapped};
use crate::client::McpServer;
use crate::floor;

pub const FLOOR_SERVER: Workload = Workload {
    name: "floor_server",
    about: "a no-op tools/call on the floor server: the round-trip floor",
};

pub const FLOOR_PAGES: Workload = Workload {
    name: "floor_pages",
    about: "full pages from the floor server's `page` tool (`line` repeated to 65,536 bytes, as \
         one record of terminal_read's answer, built once and then only serialized by rmcp), \
         read as the read benchmarks read: as many pages of a flood line as a `flood-1m` \
         pass takes, and of the CJK line as a `cjk_read` pass; what a minimal rmcp server \
         doing no work delivers",
};

pub const CANNED_PAGES: Workload = Workload {
    name: "canned_pages",
    about: "the same pages with no MCP server at all (`harness floor-server --canned`: each \
         request line answered with bytes prebuilt once, in one write to a widened pipe): \
         the most the rmcp client takes in through stdio on this machine, the floor of any \
         page read",
};

pub const DIRECT_PIPE: Workload = Workload {
    name: "direct_pipe_floor",
    about: "`demo-process flood 10000` (1,000,033 bytes) read straight from its pipe in-process: \
         the floor of reads and capture",
};

/// A no-op tool call on the floor server.
pub async fn floor_server(n: usize) -> Result<Vec<Metric>, String> {
    let harness = std::env::current_exe().map_err(|e| e.to_string())?;
    let cwd = std::env::temp_dir();
    let mut mcp =
        McpServer::start_exact(&harness, &["floor-server".to_string()], &cwd, &untapped()).await?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let (_, took) = timed(mcp.call(floor::NOOP_TOOL, &json!({}))).await?;
        samples.push(took);
    }
    mcp.shutdown().await;
    Ok(vec![Metric::distribution("noop_call", "ms", &samples)])
}

/// Full pages answered by the floor server (or, `canned`, by prebuilt bytes without any
/// MCP server), read as the read benchmarks read ours: as many pages of the flood's line as
/// a read pass of `flood-1m` takes, and of the CJK line as a pass of `cjk_read`, `passes`
/// times each.
pub async fn floor_pages(canned: bool, passes: usize) -> Result<Vec<Metric>, String> {
    let harness = std::env::current_exe().map_err(|e| e.to_string())?;
    let cwd = std::env::temp_dir();
    let mut args = vec!["floor-server".to_string()];
    if canned {
        args.push("--canned".into());
    }
    let mut mcp = McpServer::start_exact(&harness, &args, &cwd, &untapped()).await?;
    let flood = expected_flood();
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

/// `demo-process flood 10000` read straight from a pipe, in-process.
pub async fn direct_pipe(demo: &Path, passes: usize) -> Result<Vec<Metric>, String> {
    let mut rates = Vec::new();
    for _ in 0..passes {
        let (bytes, took) = floor::direct_pipe_read(demo, &["flood", "10000"])?;
        rates.push(mb_per_s(bytes, took));
    }
    Ok(vec![Metric::distribution("read_rate", "MB/s", &rates)])
}
