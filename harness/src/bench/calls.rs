//! The tool calls the workloads share: a call that must succeed, starting and ending
//! sessions, waits, status polls, reading a session page by page, and the server's memory.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::report::{Metric, ms, status_kib};
use crate::client::McpServer;

/// Largest page `terminal_read` allows.
pub const PAGE_BYTES: u64 = 65_536;

/// A profile's argv running `script` in `/bin/sh`.
pub fn sh(script: &str) -> Value {
    json!(["/bin/sh", "-c", script])
}

/// Call a tool that must succeed; its structuredContent.
pub async fn call(mcp: &McpServer, tool: &str, args: Value) -> Result<Value, String> {
    let content = mcp.call_structured(tool, &args).await?;
    if content.get("ok") != Some(&Value::Bool(true)) {
        return Err(format!("{tool} {args} did not succeed: {content}"));
    }
    Ok(content)
}

pub fn field_str<'a>(v: &'a Value, key: &str) -> Result<&'a str, String> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("no string `{key}` in {v}"))
}

pub fn field_u64(v: &Value, key: &str) -> Result<u64, String> {
    v.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("no integer `{key}` in {v}"))
}

/// Start a session of `command_id`; its id.
pub async fn start(mcp: &McpServer, command_id: &str) -> Result<String, String> {
    let started = call(mcp, "terminal_start", json!({"command_id": command_id})).await?;
    Ok(field_str(&started, "session_id")?.to_string())
}

/// Terminate a session at once and forget it.
pub async fn end(mcp: &McpServer, sid: &str) -> Result<(), String> {
    call(
        mcp,
        "terminal_terminate",
        json!({"session_id": sid, "grace_ms": 0}),
    )
    .await?;
    call(mcp, "terminal_forget", json!({"session_id": sid})).await?;
    Ok(())
}

/// Wait for `pattern` from `cursor`; the result must be `matched`.
pub async fn wait_for(
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
pub async fn wait_exit(mcp: &McpServer, sid: &str, timeout_ms: u64) -> Result<Value, String> {
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

pub async fn status(mcp: &McpServer, sid: &str) -> Result<Value, String> {
    call(mcp, "terminal_status", json!({"session_id": sid})).await
}

/// Poll `terminal_status` until `done` holds of it, for at most `within`.
pub async fn poll(
    mcp: &McpServer,
    sid: &str,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Result<Value, String> {
    let began = Instant::now();
    loop {
        let s = status(mcp, sid).await?;
        if done(&s) {
            return Ok(s);
        }
        if began.elapsed() > within {
            return Err(format!("not done within {} ms: {s}", within.as_millis()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A status or page whose session's output is complete.
pub fn complete(s: &Value) -> bool {
    s.get("output_complete") == Some(&Value::Bool(true))
}

/// How `read_pages` reads: each read's `wait_ms` for output (none: the server's default),
/// whether the text is kept, and where each call's time goes.
#[derive(Default)]
pub struct Paging<'a> {
    pub wait_ms: Option<u64>,
    pub keep_text: bool,
    pub page_ms: Option<&'a mut Vec<f64>>,
}

impl Paging<'_> {
    /// Reads that wait up to `wait_ms` for output still coming.
    pub fn waiting(wait_ms: u64) -> Self {
        Paging {
            wait_ms: Some(wait_ms),
            ..Paging::default()
        }
    }
}

/// How long a read waits for output still coming, where a workload reads while it comes.
pub const READ_WAIT_MS: u64 = 200;

/// What `read_pages` read.
#[derive(Debug, Default)]
pub struct Read {
    /// The text, when kept.
    pub text: String,
    pub bytes: u64,
    pub code_points: u64,
    pub pages: u64,
    pub records: u64,
}

/// Page `terminal_read` (full pages) from `from` until the output is complete and read to
/// its end, checking that every record starts where the one before it ended and that each
/// page's `next_cursor` is where its records end.
pub async fn read_pages(
    mcp: &McpServer,
    sid: &str,
    from: u64,
    mut paging: Paging<'_>,
) -> Result<Read, String> {
    let mut read = Read::default();
    let mut cursor = from;
    loop {
        let mut args = json!({"session_id": sid, "cursor": cursor, "max_bytes": PAGE_BYTES});
        if let Some(wait_ms) = paging.wait_ms {
            args["wait_ms"] = json!(wait_ms);
        }
        let began = Instant::now();
        let page = call(mcp, "terminal_read", args).await?;
        if let Some(page_ms) = paging.page_ms.as_deref_mut() {
            page_ms.push(ms(began.elapsed()));
        }
        read.pages += 1;
        let records = page
            .get("records")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("page at {cursor} has no records"))?;
        for record in records {
            if field_u64(record, "cursor")? != cursor {
                return Err(format!("a gap at cursor {cursor}: {record}"));
            }
            let text = field_str(record, "text")?;
            read.bytes += text.len() as u64;
            cursor += text.chars().count() as u64;
            if paging.keep_text {
                read.text.push_str(text);
            }
        }
        read.records += records.len() as u64;
        if field_u64(&page, "next_cursor")? != cursor {
            return Err(format!("page ending at {cursor} has next_cursor {page}"));
        }
        let more = page.get("has_more") == Some(&Value::Bool(true));
        if !more && complete(&page) {
            read.code_points = cursor - from;
            return Ok(read);
        }
        if more && records.is_empty() {
            return Err(format!("empty page at {cursor} with has_more"));
        }
    }
}

/// The server's resident memory, in KiB.
pub fn rss_kib(mcp: &McpServer) -> Result<f64, String> {
    mcp.rss_kib().map(|k| k as f64)
}

/// How long after the last of a session's memory was freed the server has handed it back
/// to the system, at the latest: it waits for frees to pause, 1 s at most (`RETURN_LATEST`
/// in the server's `heap.rs`; change both together).
const HAND_BACK: Duration = Duration::from_millis(1500);

/// The server's resident set once it has handed back what ended sessions freed: a step
/// of the server's that no call shows, so read when it is due.
pub async fn settled_rss_kib(mcp: &McpServer) -> Result<f64, String> {
    tokio::time::sleep(HAND_BACK).await;
    rss_kib(mcp)
}

/// The server's resident set now and at its peak, as metrics named `<phase>_vm_rss` and
/// `<phase>_vm_hwm`.
pub fn memory_metrics(pid: u32, phase: &str) -> Result<Vec<Metric>, String> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let field =
        |name: &str| status_kib(&status, name).ok_or_else(|| format!("{path} has no {name} in kB"));
    Ok(vec![
        Metric::value(&format!("{phase}_vm_rss"), "KiB", field("VmRSS")? as f64),
        Metric::value(&format!("{phase}_vm_hwm"), "KiB", field("VmHWM")? as f64),
    ])
}
