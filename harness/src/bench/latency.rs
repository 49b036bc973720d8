//! Latency: what one call, or one short exchange with a child, takes as the client sees
//! it: a start to the exit, calls with small answers, a write to its echo on pipes and on a
//! PTY, keys to the screen, a start to the first output, and a cold start to `tools/list`
//! (the last two beside their floors: the OS spawning a program in-process, and the floor
//! server).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::calls::{call, complete, end, field_u64, poll, start, wait_exit, wait_for};
use super::report::{Metric, ms};
use super::workload::{Servers, Setup, Workload, timed, untapped};
use crate::client::McpServer;
use crate::floor;

/// Bound on one poll loop inside a sample (a screen that never shows the counter).
const POLL_BOUND: Duration = Duration::from_secs(10);

pub const START_TO_EXIT: Workload = Workload {
    name: "start_to_exit_ms",
    about: "terminal_start of `empty`, then terminal_wait without a pattern until outcome \
         `exited`; the session is forgotten after each sample",
};

pub const TOOL_ROUNDTRIP: Workload = Workload {
    name: "tool_roundtrip_ms",
    about: "calls with small answers on a running `long` session, N of each in turn: \
         terminal_status; terminal_read from 0 (its one line); terminal_wait from 0 for \
         `running`, which is already there",
};

pub const WRITE_ECHO: Workload = Workload {
    name: "write_echo_latency_ms",
    about: "`interactive`: terminal_write `line N\\n`, then terminal_wait for `echo: line N` from \
         the previous next_cursor; `write_to_echo_wait_in_flight` sends both calls at once \
         (the wait first) on a second `interactive`, from sending them to the match",
};

pub const PTY_KEYS: Workload = Workload {
    name: "pty_keys_to_screen_ms",
    about: "`pty-tui`: terminal_keys [Up], then terminal_screen polled until `counter: k` shows",
};

pub const COLD_START: Workload = Workload {
    name: "cold_start",
    about: "spawn of the server to `initialize` and `tools/list` answered, beside the same for \
         the floor server (`harness floor-server`: rmcp on stdio with one no-op tool)",
};

pub const TOOLS_LIST: Workload = Workload {
    name: "tools_list",
    about: "the tools/list result of the server the latency workloads run on (the \
         `make-config` defaults with the bench's profiles: three shells, so terminal_exec \
         is offered, and two one-shot commands), as compact JSON: what every agent reads \
         before its first call",
};

pub const FIRST_OUTPUT: Workload = Workload {
    name: "first_output",
    about: "`terminal_start` of `/bin/echo hello` to its output returned by `terminal_read`, \
         beside spawning `/bin/echo hello` in-process and reading its first byte",
};

pub const PTY_ECHO: Workload = Workload {
    name: "pty_echo",
    about: "`terminal_write` of a line to `demo-process interactive` on a PTY until \
         `terminal_wait` matched its echo; `write_to_echo_wait_in_flight` as on pipes",
};

/// The server `first_output` and `pty_echo` run on: `/bin/echo hello`, and `interactive`
/// on a PTY.
pub fn echo_setup(demo: &Path) -> Setup {
    Setup {
        name: "suite",
        limits: json!({}),
        profiles: json!({
            "echo": {"argv": ["/bin/echo", "hello"]},
            "interactive-pty": {"argv": [demo.display().to_string(), "interactive"], "mode": "pty"},
        }),
    }
}

pub async fn start_to_exit(mcp: &McpServer, n: usize) -> Result<Vec<Metric>, String> {
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

pub async fn tools_list(mcp: &McpServer) -> Result<Vec<Metric>, String> {
    let list = mcp.list_tools().await?;
    let bytes = serde_json::to_string(&list)
        .map_err(|e| e.to_string())?
        .len();
    let tools = list["tools"].as_array().map_or(0, Vec::len);
    Ok(vec![
        Metric::value("result_bytes", "bytes", bytes as f64),
        Metric::value("tools", "tools", tools as f64),
    ])
}

pub async fn tool_roundtrip(mcp: &McpServer, n: usize) -> Result<Vec<Metric>, String> {
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
        let (status, took) =
            timed(call(mcp, "terminal_status", json!({"session_id": sid}))).await?;
        samples[0].push(took);
        if status.get("status") != Some(&json!("RUNNING")) {
            return Err(format!("`long` is not RUNNING: {status}"));
        }
    }
    for _ in 0..n {
        let read = call(
            mcp,
            "terminal_read",
            json!({"session_id": sid, "cursor": 0}),
        );
        let (page, took) = timed(read).await?;
        samples[1].push(took);
        if page.pointer("/records/0/text") != Some(&json!("running\n")) {
            return Err(format!("`long` output is not `running`: {page}"));
        }
    }
    for _ in 0..n {
        let (_, took) = timed(wait_for(mcp, sid, 0, "running", false)).await?;
        samples[2].push(took);
    }
    Ok(samples)
}

pub async fn write_echo(mcp: &McpServer, n: usize) -> Result<Vec<Metric>, String> {
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

/// Echo round trips: the whole sample and its two calls.
#[derive(Debug, Default)]
pub struct EchoSamples {
    total: Vec<f64>,
    write: Vec<f64>,
    wait: Vec<f64>,
}

pub async fn echo_samples(mcp: &McpServer, sid: &str, n: usize) -> Result<EchoSamples, String> {
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
pub async fn echo_in_flight_samples(
    mcp: &McpServer,
    sid: &str,
    n: usize,
) -> Result<Vec<f64>, String> {
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

pub async fn pty_keys(mcp: &McpServer, n: usize) -> Result<Vec<Metric>, String> {
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

/// Spawn to `initialize` and `tools/list` answered, of mcp-terminal and of the floor.
pub async fn cold_start(servers: &Servers, n: usize) -> Result<Vec<Metric>, String> {
    let config = servers.config_path("cold");
    servers
        .write_config(&config, &json!({}), &json!({}))
        .await?;
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
            (servers.server.as_path(), &args[..], &mut own),
            (harness.as_path(), &floor_args[..], &mut base),
        ] {
            let began = Instant::now();
            let mut mcp = McpServer::start_exact(program, args, &servers.root, &untapped()).await?;
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

/// `terminal_start` of `/bin/echo hello` to its output read, against spawning it in-process
/// and reading its first byte.
pub async fn first_output(mcp: &McpServer, n: usize) -> Result<Vec<Metric>, String> {
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
pub async fn pty_echo(mcp: &McpServer, n: usize) -> Result<Vec<Metric>, String> {
    let sid = start(mcp, "interactive-pty").await?;
    let samples = echo_samples(mcp, &sid, n).await;
    end(mcp, &sid).await?;
    let sid = start(mcp, "interactive-pty").await?;
    let in_flight = echo_in_flight_samples(mcp, &sid, n).await;
    end(mcp, &sid).await?;
    Ok(vec![
        Metric::distribution("write_to_echo", "ms", &samples?.total),
        Metric::distribution("write_to_echo_wait_in_flight", "ms", &in_flight?),
    ])
}
