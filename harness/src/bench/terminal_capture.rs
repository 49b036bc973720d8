//! Capture on a terminal: a flood of lines through a session on a pseudo-terminal, whose
//! output the server also feeds to the terminal emulator behind `terminal_screen`, beside
//! the same program on a terminal read in-process with no MCP.

use std::time::Instant;

use serde_json::json;

use super::calls::{call, start, wait_exit};
use super::report::{Metric, mb_per_s, ms};
use super::throughput::{FLOOD_LINES, expected_flood};
use super::workload::{Servers, Setup, Workload};
use crate::floor;

pub const TERMINAL_CAPTURE: Workload = Workload {
    name: "terminal_capture",
    about: "`demo-process flood 10000` (10,000 lines of 100 code points and a summary line) \
         on a terminal of 24 rows × 80 columns, where every line wraps and scrolls the \
         screen: terminal_start to the exited wait (`capture_rate`, over the bytes the \
         program writes), each session forgotten after; its floor (`direct_rate`) the same \
         program on a terminal of the same size opened and read in-process, no MCP, \
         alternating with it",
};

const SIZE: (u16, u16) = (24, 80);

pub async fn terminal_capture(servers: &Servers, passes: usize) -> Result<Vec<Metric>, String> {
    let demo = servers.demo();
    let setup = Setup {
        name: "terminal_capture",
        limits: json!({"max_sessions": 1, "max_records": 2, "buffer_bytes": 16_777_216}),
        profiles: json!({"flood-pty": {
            "argv": [demo.display().to_string(), "flood", FLOOD_LINES.to_string()],
            "mode": "pty",
            "rows": SIZE.0,
            "cols": SIZE.1,
        }}),
    };
    let written = expected_flood().len() as u64;
    servers
        .with(&setup, async |mcp| {
            let (mut capture, mut direct) = (Vec::new(), Vec::new());
            for _ in 0..passes.max(1) {
                let demo = demo.clone();
                let floor = tokio::task::spawn_blocking(move || {
                    floor::direct_pty_read(&demo, &["flood", &FLOOD_LINES.to_string()], SIZE)
                });
                let (read, took) = floor.await.map_err(|e| e.to_string())??;
                // The terminal makes each `\n` a `\r\n`: all of it came.
                if read < written {
                    return Err(format!("the floor read {read} bytes of {written}"));
                }
                direct.push(took);
                let began = Instant::now();
                let sid = start(mcp, "flood-pty").await?;
                let result = wait_exit(mcp, &sid, 60_000).await?;
                capture.push(began.elapsed());
                let session = result.get("session").unwrap_or(&result);
                if session.get("exit_code") != Some(&json!(0)) {
                    return Err(format!("flood on a terminal did not exit 0: {result}"));
                }
                call(mcp, "terminal_forget", json!({"session_id": sid})).await?;
            }
            let rates = |d: &[std::time::Duration]| -> Vec<f64> {
                d.iter().map(|d| mb_per_s(written, *d)).collect()
            };
            let times =
                |d: &[std::time::Duration]| -> Vec<f64> { d.iter().map(|d| ms(*d)).collect() };
            Ok(vec![
                Metric::distribution("capture_rate", "MB/s", &rates(&capture)),
                Metric::distribution("direct_rate", "MB/s", &rates(&direct)),
                Metric::distribution("capture_ms", "ms", &times(&capture)),
                Metric::distribution("direct_ms", "ms", &times(&direct)),
            ])
        })
        .await
}
