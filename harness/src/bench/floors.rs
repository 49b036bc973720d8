//! The floors measured in the same run, that workloads are shown against: a no-op call on
//! the floor server (the round-trip floor), full pages from it and from prebuilt answer bytes
//! with no MCP server at all (the page floors; the prebuilt ones alternate with the
//! server's reads), and a pipe read in-process (the floor of reads and capture).

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

use super::calls::{call, field_u64};
use super::report::{Metric, mb_per_s, median};
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

/// Full pages answered by the floor server, read as the read benchmarks read ours: as many
/// pages of the flood's line as a read pass of `flood-1m` takes, and of the CJK line as a
/// pass of `cjk_read`, `passes` times each.
pub async fn floor_pages(passes: usize) -> Result<Vec<Metric>, String> {
    let mut mcp = pages_server(false).await?;
    let mut metrics = Vec::new();
    for (name, page) in [
        ("ascii_read_rate", Page::ascii()),
        ("cjk_read_rate", Page::cjk()),
    ] {
        let mut rates = Vec::with_capacity(passes);
        for _ in 0..passes {
            rates.push(page_pass(&mcp, &page).await?);
        }
        metrics.push(Metric::distribution(name, "MB/s", &rates));
    }
    mcp.shutdown().await;
    Ok(metrics)
}

/// The prebuilt-answer floor (`harness floor-server --canned`: each request line answered
/// with bytes prebuilt once, in one write to a widened pipe, no MCP server at all), held
/// open so that its passes alternate with the server's: the machine drifts between
/// measurements taken apart, and this floor is the one a read is judged against.
pub struct Canned {
    mcp: McpServer,
}

impl Canned {
    pub async fn start() -> Result<Canned, String> {
        Ok(Canned {
            mcp: pages_server(true).await?,
        })
    }

    /// One pass over `page`'s bytes, in MB/s.
    pub async fn pass(&self, page: &Page) -> Result<f64, String> {
        page_pass(&self.mcp, page).await
    }

    /// What a read of `page` can reach against this floor, whatever a server does with a
    /// page's bytes: `n` small calls of `sid`'s session on `mcp` (`terminal_status`), each
    /// after the floor's no-op call with an answer of the same shape; the medians'
    /// difference is what each of the server's `pages` costs over the floor before any of
    /// its bytes. `floor_rates` are this floor's passes of `page` (MB/s). The small calls
    /// of each side, and the ratio a server doing nothing per byte over its small call
    /// would read pages at.
    pub async fn read_ceiling(
        &self,
        page: &Page,
        floor_rates: &[f64],
        (mcp, sid, pages): (&McpServer, &str, u64),
        n: usize,
    ) -> Result<Vec<Metric>, String> {
        let (mut ours, mut canned) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let status = json!({ "session_id": sid });
        for _ in 0..n {
            canned.push(timed(self.mcp.call(floor::NOOP_TOOL, &json!({}))).await?.1);
            ours.push(timed(call(mcp, "terminal_status", status.clone())).await?.1);
        }
        let pass_ms = page.bytes as f64 / (median(floor_rates) * 1e3);
        let extra_ms = median(&ours) - median(&canned);
        Ok(vec![
            Metric::distribution("small_call", "ms", &ours),
            Metric::distribution("canned_small_call", "ms", &canned),
            Metric::value("read_ceiling", "×", ceiling(pass_ms, pages, extra_ms)),
        ])
    }

    pub async fn shutdown(mut self) {
        self.mcp.shutdown().await;
    }
}

/// The ratio to a floor that reads a pass in `pass_ms`, of a reader that pays `extra_ms`
/// more for each of the pass's `pages` and nothing else.
fn ceiling(pass_ms: f64, pages: u64, extra_ms: f64) -> f64 {
    pass_ms / (pass_ms + extra_ms.max(0.0) * pages as f64)
}

/// What a pass reads: `bytes` of `line` repeated, in pages of the floor's size.
pub struct Page {
    line: String,
    bytes: u64,
}

impl Page {
    /// The flood's line, as many bytes as `flood-1m` writes.
    pub fn ascii() -> Page {
        let flood = expected_flood();
        let line = flood
            .split_inclusive('\n')
            .next()
            .unwrap_or("x\n")
            .to_owned();
        Page {
            line,
            bytes: flood.len() as u64,
        }
    }

    /// The CJK line, as many bytes as `cjk_read` reads.
    pub fn cjk() -> Page {
        Page {
            line: CJK_LINE.to_owned(),
            bytes: CJK_LINES * CJK_LINE.len() as u64,
        }
    }
}

async fn pages_server(canned: bool) -> Result<McpServer, String> {
    let harness = std::env::current_exe().map_err(|e| e.to_string())?;
    let cwd = std::env::temp_dir();
    let mut args = vec!["floor-server".to_string()];
    if canned {
        args.push("--canned".into());
    }
    McpServer::start_exact(&harness, &args, &cwd, &untapped()).await
}

/// One pass of `page` from a floor, in MB/s, each page checked and kept as `read_all`
/// keeps what it reads.
async fn page_pass(mcp: &McpServer, page: &Page) -> Result<f64, String> {
    let pages = page.bytes.div_ceil(floor::PAGE_TEXT_BYTES as u64);
    let began = Instant::now();
    let mut read = 0u64;
    let mut text = String::with_capacity(page.bytes as usize);
    for _ in 0..pages {
        let answer = mcp
            .call_structured(floor::PAGE_TOOL, &json!({ "line": page.line }))
            .await?;
        let chunk = answer
            .pointer("/records/0/text")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("the floor's page has no text: {answer}"))?;
        if chunk.chars().count() as u64 != field_u64(&answer, "next_cursor")? {
            return Err("the floor's page miscounts its code points".into());
        }
        read += chunk.len() as u64;
        text.push_str(chunk);
    }
    Ok(mb_per_s(read, began.elapsed()))
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

#[cfg(test)]
mod tests {
    use super::ceiling;

    #[test]
    fn a_ceiling_is_what_the_extra_cost_of_each_page_leaves() {
        assert_eq!(ceiling(16.0, 16, 0.0), 1.0);
        // A ninth of a page's time more on every page: 0.9 of the floor's rate.
        assert!((ceiling(18.0, 16, 0.125) - 0.9).abs() < 1e-12);
        // A small call cheaper than the floor's leaves the floor itself as the ceiling.
        assert_eq!(ceiling(16.0, 16, -0.5), 1.0);
    }
}
