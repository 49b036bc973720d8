//! `harness soak`: a bounded mixed workload against one server for a given time, through the
//! same MCP client as the scenarios, on stdio only. Every tool is used, on pipes and PTYs:
//! conversations, floods read by cursor, waits, signals, timeouts, terminations, forgets,
//! shell commands, and calls that must fail with a known code. It stops itself, shuts the
//! server down cleanly and reports calls, sessions, bytes, errors by code (an error no step
//! expected is counted apart and must be 0), and the drift of the server's memory, open fds
//! and threads from just after a warm-up to the end.
//!
//! The workload is a deterministic sequence (a seeded generator picks the next action), so a
//! failing run can be repeated with the same seed.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use crate::client::McpServer;
use crate::procfs;
use crate::scenario::Launch;

/// Actions between two samples of the server's memory, fds and threads.
const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Rounds of every action before the baseline is taken.
const WARM_UP_ROUNDS: usize = 3;
/// Lines the flood action asks for (100 bytes each: more than the buffer keeps).
const FLOOD_LINES: u64 = 30_000;
/// Bound on one wait for a session's end.
const END_WAIT_MS: u64 = 20_000;
/// Pages one read to the end may take before the soak calls it stuck.
const MAX_PAGES: usize = 10_000;
/// Unexpected errors kept verbatim in the report.
const KEEP_UNEXPECTED: usize = 20;

#[derive(Debug, Serialize)]
pub struct SoakReport {
    pub minutes: f64,
    pub seed: u64,
    pub server: String,
    pub duration_s: f64,
    pub calls: u64,
    pub calls_by_tool: BTreeMap<String, u64>,
    pub sessions: u64,
    pub actions: BTreeMap<String, u64>,
    pub output_bytes_read: u64,
    pub input_bytes_written: u64,
    pub errors_by_code: BTreeMap<String, u64>,
    pub unexpected_errors: u64,
    pub unexpected_samples: Vec<String>,
    pub baseline: Sample,
    pub end: Sample,
    pub drift: Drift,
    pub samples: Vec<Sample>,
    pub clean_shutdown: bool,
    pub leftover_processes: Vec<u32>,
    pub shutdown_notes: Vec<String>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    pub at_s: f64,
    pub rss_kib: u64,
    pub fds: u64,
    pub threads: u64,
}

#[derive(Debug, Serialize)]
pub struct Drift {
    pub rss_kib: i64,
    pub fds: i64,
    pub threads: i64,
}

/// A small deterministic generator (xorshift64*): the workload needs variety, not quality.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

const ACTIONS: [&str; 11] = [
    "pipe-conversation",
    "pty-conversation",
    "flood",
    "signal",
    "timeout",
    "expected-errors",
    "run",
    "shell",
    "backpressure",
    "concurrent",
    "list",
];

struct Soak<'a> {
    mcp: &'a McpServer,
    report: SoakReport,
}

/// Run the workload for `minutes` against `server`; `root` becomes its only allowed root.
pub async fn run(
    server: &Path,
    root: &Path,
    config: &Path,
    minutes: f64,
    seed: u64,
) -> Result<SoakReport, String> {
    write_config(server, root, config).await?;
    let args = [
        "stdio".to_string(),
        "--config".to_string(),
        config.display().to_string(),
    ];
    let mut mcp = McpServer::start_exact(server, &args, root, &Launch::default()).await?;
    let began = Instant::now();
    let zero = Sample {
        at_s: 0.0,
        rss_kib: 0,
        fds: 0,
        threads: 0,
    };
    let mut soak = Soak {
        mcp: &mcp,
        report: SoakReport {
            minutes,
            seed,
            server: server.display().to_string(),
            duration_s: 0.0,
            calls: 0,
            calls_by_tool: BTreeMap::new(),
            sessions: 0,
            actions: BTreeMap::new(),
            output_bytes_read: 0,
            input_bytes_written: 0,
            errors_by_code: BTreeMap::new(),
            unexpected_errors: 0,
            unexpected_samples: Vec::new(),
            baseline: zero,
            end: zero,
            drift: Drift {
                rss_kib: 0,
                fds: 0,
                threads: 0,
            },
            samples: Vec::new(),
            clean_shutdown: false,
            leftover_processes: Vec::new(),
            shutdown_notes: Vec::new(),
        },
    };
    let instance = soak.instance().await?;
    for _ in 0..WARM_UP_ROUNDS {
        for action in ACTIONS {
            soak.action(action).await?;
        }
    }
    let baseline = sample(mcp.pid, began)?;
    soak.report.baseline = baseline;
    soak.report.samples.push(baseline);
    let deadline = began + Duration::from_secs_f64(minutes * 60.0);
    let mut rng = Rng(seed | 1);
    let mut next_sample = Instant::now() + SAMPLE_EVERY;
    while Instant::now() < deadline {
        let action = ACTIONS[rng.below(ACTIONS.len() as u64) as usize];
        soak.action(action).await?;
        if Instant::now() >= next_sample {
            soak.report.samples.push(sample(mcp.pid, began)?);
            next_sample += SAMPLE_EVERY;
        }
    }
    let end = sample(mcp.pid, began)?;
    let mut report = soak.report;
    report.end = end;
    report.samples.push(end);
    report.drift = Drift {
        rss_kib: end.rss_kib as i64 - baseline.rss_kib as i64,
        fds: end.fds as i64 - baseline.fds as i64,
        threads: end.threads as i64 - baseline.threads as i64,
    };
    report.duration_s = round1(began.elapsed().as_secs_f64());
    report.shutdown_notes = mcp.shutdown().await;
    report.clean_shutdown = report.shutdown_notes.is_empty();
    tokio::time::sleep(Duration::from_millis(500)).await;
    report.leftover_processes = procfs::tagged_by(&instance);
    Ok(report)
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn sample(pid: u32, began: Instant) -> Result<Sample, String> {
    Ok(Sample {
        at_s: round1(began.elapsed().as_secs_f64()),
        rss_kib: procfs::rss_kib(pid)?,
        fds: procfs::open_fds(pid)?,
        threads: procfs::threads(pid)?,
    })
}

impl Soak<'_> {
    /// Call a tool; an error result is counted by code, and must be one of `expected` (the
    /// codes this call may meet).
    async fn call(&mut self, tool: &str, args: Value, expected: &[&str]) -> Result<Value, String> {
        self.report.calls += 1;
        *self.report.calls_by_tool.entry(tool.into()).or_default() += 1;
        let raw = self.mcp.call(tool, &args).await?;
        let content = raw.get("structuredContent").cloned().unwrap_or(Value::Null);
        if raw.get("isError") == Some(&Value::Bool(true)) {
            let code = content
                .pointer("/error/code")
                .and_then(Value::as_str)
                .unwrap_or("(no code)")
                .to_string();
            *self.report.errors_by_code.entry(code.clone()).or_default() += 1;
            if !expected.contains(&code.as_str()) {
                self.report.unexpected_errors += 1;
                if self.report.unexpected_samples.len() < KEEP_UNEXPECTED {
                    let mut text = format!("{tool} {args}: {content}");
                    text.truncate(600);
                    self.report.unexpected_samples.push(text);
                }
            }
        }
        Ok(content)
    }

    async fn start(&mut self, command_id: &str, extra: Value) -> Result<String, String> {
        let mut args = json!({"command_id": command_id});
        if let (Some(args), Some(extra)) = (args.as_object_mut(), extra.as_object()) {
            args.extend(extra.clone());
        }
        let started = self.call("terminal_start", args, &[]).await?;
        self.report.sessions += 1;
        started
            .get("session_id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("terminal_start {command_id} returned no session: {started}"))
    }

    /// The server instance, from the tag of a session's process.
    async fn instance(&mut self) -> Result<String, String> {
        let sid = self.start("long", json!({})).await?;
        let status = self
            .call("terminal_status", json!({"session_id": sid}), &[])
            .await?;
        let pid = status
            .get("process_id")
            .and_then(Value::as_u64)
            .ok_or("no process_id")?;
        let instance = procfs::server_instance(pid as u32).ok_or("the session carries no tag")?;
        self.end(&sid).await?;
        Ok(instance)
    }

    async fn wait_end(&mut self, sid: &str) -> Result<Value, String> {
        self.call(
            "terminal_wait",
            json!({"session_id": sid, "timeout_ms": END_WAIT_MS}),
            &[],
        )
        .await
    }

    async fn forget(&mut self, sid: &str) -> Result<(), String> {
        self.call("terminal_forget", json!({"session_id": sid}), &[])
            .await
            .map(drop)
    }

    async fn end(&mut self, sid: &str) -> Result<(), String> {
        self.call(
            "terminal_terminate",
            json!({"session_id": sid, "grace_ms": 100}),
            &[],
        )
        .await?;
        self.forget(sid).await
    }

    /// Read from `cursor` to the session's end, page by page; returns the bytes read.
    async fn read_to_end(&mut self, sid: &str) -> Result<u64, String> {
        let mut cursor = 0u64;
        let mut bytes = 0u64;
        let mut pages = 0;
        loop {
            let page = self
                .call(
                    "terminal_read",
                    json!({"session_id": sid, "cursor": cursor, "wait_ms": 500}),
                    &["CURSOR_EXPIRED"],
                )
                .await?;
            if let Some(base) = page.pointer("/error/base_cursor").and_then(Value::as_u64) {
                cursor = base;
                continue;
            }
            for record in page
                .get("records")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                bytes += record
                    .get("text")
                    .and_then(Value::as_str)
                    .map_or(0, str::len) as u64;
            }
            let flag = |k: &str| page.get(k) == Some(&Value::Bool(true));
            let running = matches!(
                page.get("status").and_then(Value::as_str),
                Some("RUNNING" | "TERMINATING")
            );
            if !flag("has_more")
                && (flag("output_complete") || (!running && flag("output_incomplete")))
            {
                self.report.output_bytes_read += bytes;
                return Ok(bytes);
            }
            cursor = page
                .get("next_cursor")
                .and_then(Value::as_u64)
                .unwrap_or(cursor);
            pages += 1;
            if pages > MAX_PAGES {
                return Err(format!(
                    "{sid}: no end of output after {MAX_PAGES} pages: {page}"
                ));
            }
        }
    }

    async fn action(&mut self, name: &str) -> Result<(), String> {
        *self.report.actions.entry(name.into()).or_default() += 1;
        match name {
            "pipe-conversation" => self.pipe_conversation().await,
            "pty-conversation" => self.pty_conversation().await,
            "flood" => self.flood().await,
            "signal" => self.signal().await,
            "timeout" => self.timeout().await,
            "expected-errors" => self.expected_errors().await,
            "run" => self.run_to_end().await,
            "shell" => self.shell().await,
            "backpressure" => self.backpressure().await,
            "concurrent" => self.concurrent().await,
            "list" => self.list().await,
            other => Err(format!("no soak action {other}")),
        }
        .map_err(|e| format!("soak action {name}: {e}"))
    }

    async fn pipe_conversation(&mut self) -> Result<(), String> {
        let sid = self.start("interactive", json!({})).await?;
        let mut cursor = 0;
        for n in 0..5 {
            let text = format!("line {n}\n");
            self.report.input_bytes_written += text.len() as u64;
            self.call(
                "terminal_write",
                json!({"session_id": sid, "text": text}),
                &[],
            )
            .await?;
            let waited = self
                .call(
                    "terminal_wait",
                    json!({"session_id": sid, "cursor": cursor, "pattern": format!("line {n}\\n"), "stream": "stdout"}),
                    &[],
                )
                .await?;
            cursor = waited
                .get("next_cursor")
                .and_then(Value::as_u64)
                .unwrap_or(0);
        }
        self.call(
            "terminal_write",
            json!({"session_id": sid, "text": "", "close_stdin": true}),
            &[],
        )
        .await?;
        self.wait_end(&sid).await?;
        self.read_to_end(&sid).await?;
        self.forget(&sid).await
    }

    async fn pty_conversation(&mut self) -> Result<(), String> {
        let sid = self.start("pty-cat", json!({})).await?;
        self.call(
            "terminal_keys",
            json!({"session_id": sid, "keys": ["h", "i", "Enter"]}),
            &[],
        )
        .await?;
        self.call(
            "terminal_wait",
            json!({"session_id": sid, "pattern": "hi\\r?\\n.*hi", "strip_ansi": true}),
            &[],
        )
        .await?;
        self.call(
            "terminal_resize",
            json!({"session_id": sid, "rows": 30, "cols": 100}),
            &[],
        )
        .await?;
        self.call("terminal_screen", json!({"session_id": sid}), &[])
            .await?;
        self.report.input_bytes_written += 3;
        self.call(
            "terminal_signal",
            json!({"session_id": sid, "signal": "SIGINT"}),
            &[],
        )
        .await?;
        self.wait_end(&sid).await?;
        self.read_to_end(&sid).await?;
        self.forget(&sid).await
    }

    async fn flood(&mut self) -> Result<(), String> {
        let sid = self.start("flood-soak", json!({})).await?;
        self.read_to_end(&sid).await?;
        self.forget(&sid).await
    }

    async fn signal(&mut self) -> Result<(), String> {
        let sid = self.start("long", json!({})).await?;
        self.call(
            "terminal_signal",
            json!({"session_id": sid, "signal": "SIGTERM", "target": "group"}),
            &[],
        )
        .await?;
        self.wait_end(&sid).await?;
        self.call(
            "terminal_signal",
            json!({"session_id": sid, "signal": "SIGTERM"}),
            &["SESSION_NOT_RUNNING"],
        )
        .await?;
        self.forget(&sid).await
    }

    async fn timeout(&mut self) -> Result<(), String> {
        let sid = self.start("long", json!({"timeout_ms": 100})).await?;
        self.wait_end(&sid).await?;
        self.forget(&sid).await
    }

    async fn expected_errors(&mut self) -> Result<(), String> {
        self.call(
            "terminal_start",
            json!({"command_id": "missing"}),
            &["SPAWN_FAILED"],
        )
        .await?;
        self.call(
            "terminal_start",
            json!({"command_id": "no-such-profile"}),
            &["UNKNOWN_COMMAND"],
        )
        .await?;
        self.call(
            "terminal_read",
            json!({"session_id": "not an id"}),
            &["INVALID_ARGUMENT"],
        )
        .await?;
        self.call(
            "terminal_status",
            json!({"session_id": "0123456789abcdef0123456789abcdef"}),
            &["SESSION_NOT_FOUND"],
        )
        .await?;
        let sid = self.start("exit7", json!({})).await?;
        self.wait_end(&sid).await?;
        self.call(
            "terminal_write",
            json!({"session_id": sid, "text": "late"}),
            &["SESSION_NOT_RUNNING", "STDIN_CLOSED"],
        )
        .await?;
        self.call(
            "terminal_resize",
            json!({"session_id": sid, "rows": 10, "cols": 10}),
            &["NOT_A_PTY", "SESSION_NOT_RUNNING"],
        )
        .await?;
        self.forget(&sid).await
    }

    async fn run_to_end(&mut self) -> Result<(), String> {
        let result = self
            .call("terminal_run", json!({"command_id": "stream"}), &[])
            .await?;
        for stream in ["stdout", "stderr"] {
            self.report.output_bytes_read += result
                .get(stream)
                .and_then(Value::as_str)
                .map_or(0, str::len) as u64;
        }
        if let Some(sid) = result
            .pointer("/session/session_id")
            .and_then(Value::as_str)
        {
            self.report.sessions += 1;
            let sid = sid.to_string();
            self.forget(&sid).await?;
        }
        Ok(())
    }

    async fn shell(&mut self) -> Result<(), String> {
        let sid = self.start("sh", json!({})).await?;
        for n in 0..3 {
            let out = self
                .call(
                    "terminal_exec",
                    json!({"session_id": sid, "command": format!("echo $(( {n} + 1 )) | tr 0-9 a-j")}),
                    &[],
                )
                .await?;
            self.report.output_bytes_read += out
                .get("output")
                .and_then(Value::as_str)
                .map_or(0, str::len) as u64;
        }
        self.end(&sid).await
    }

    async fn backpressure(&mut self) -> Result<(), String> {
        let sid = self.start("long", json!({})).await?;
        let chunk = "z".repeat(65_536);
        for _ in 0..3 {
            self.report.input_bytes_written += chunk.len() as u64;
            self.call(
                "terminal_write",
                json!({"session_id": sid, "text": chunk}),
                &["INPUT_BACKPRESSURE", "STDIN_CLOSED"],
            )
            .await?;
        }
        self.end(&sid).await
    }

    async fn concurrent(&mut self) -> Result<(), String> {
        let mut sids = Vec::new();
        for _ in 0..4 {
            sids.push(self.start("stream", json!({})).await?);
        }
        let args: Vec<Value> = sids
            .iter()
            .map(|sid| json!({"session_id": sid, "timeout_ms": END_WAIT_MS}))
            .collect();
        let wait = |args| self.mcp.call("terminal_wait", args);
        // Concurrent waits over the one connection.
        let (a, b, c, d) = tokio::join!(
            wait(&args[0]),
            wait(&args[1]),
            wait(&args[2]),
            wait(&args[3])
        );
        let results = [a, b, c, d];
        self.report.calls += results.len() as u64;
        *self
            .report
            .calls_by_tool
            .entry("terminal_wait".into())
            .or_default() += results.len() as u64;
        for result in results {
            let raw = result?;
            if raw.get("isError") == Some(&Value::Bool(true)) {
                self.report.unexpected_errors += 1;
                if self.report.unexpected_samples.len() < KEEP_UNEXPECTED {
                    self.report
                        .unexpected_samples
                        .push(format!("terminal_wait: {raw}"));
                }
            }
        }
        for sid in sids {
            self.read_to_end(&sid).await?;
            self.forget(&sid).await?;
        }
        Ok(())
    }

    async fn list(&mut self) -> Result<(), String> {
        self.call("terminal_list", json!({}), &[]).await.map(drop)
    }
}

/// The soak's config: `make-config --shells`, plus the profiles the workload uses.
async fn write_config(server: &Path, root: &Path, path: &Path) -> Result<(), String> {
    let out = tokio::process::Command::new(server)
        .arg("make-config")
        .arg("--output")
        .arg(path)
        .arg("--root")
        .arg(root)
        .arg("--shells")
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run {} make-config: {e}", server.display()))?;
    if !out.status.success() {
        return Err(format!(
            "make-config failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut config: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let demo = server.with_file_name("demo-process").display().to_string();
    let commands = config
        .get_mut("commands")
        .and_then(Value::as_object_mut)
        .ok_or("make-config output has no commands")?;
    commands.insert(
        "pty-cat".into(),
        json!({"argv": ["/bin/cat"], "mode": "pty"}),
    );
    commands.insert(
        "flood-soak".into(),
        json!({"argv": [demo, "flood", FLOOD_LINES.to_string()]}),
    );
    commands.insert("missing".into(), json!({"argv": ["/nonexistent/program"]}));
    let pretty = serde_json::to_string_pretty(&config).map_err(|e| e.to_string())?;
    std::fs::write(path, pretty).map_err(|e| format!("{}: {e}", path.display()))
}
