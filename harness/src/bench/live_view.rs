//! The live view's cost to the agent: `terminal_read` paging a session while it floods, with
//! 8 live-view pages (Server-Sent Event streams, as a browser tab opens them) watching that
//! session, against the same reads with none. The passes alternate, so both see the same
//! machine; the ratio of the medians is what the target (at most 1.2) is about.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use super::calls::{Paging, call, read_pages, start};
use super::report::{Metric, median, ms};
use super::workload::{Servers, Workload, untapped};
use crate::client::{McpServer, Transport};

/// Live-view pages watching the flooding session.
const WATCHERS: usize = 8;
/// Lines of 100 bytes the flooding session writes per pass (5 MB, read as it comes).
const LINES: u64 = 50_000;
const PROFILE: &str = "flood-5m";
const SIGN_IN: &str = "mcp-terminal: live view: ";

pub const LIVE_VIEW: Workload = Workload {
    name: "live_view_watchers",
    about: "terminal_read paging a session while it writes 5 MB (50,000 lines), from cursor 0 to \
     the end of its complete output (`on_full: pause`, so the flood goes on as the reads acknowledge it), with 8 live-view update streams (SSE, as 8 browser tabs) \
     watching that session, against the same passes with none, alternating",
};

/// `passes` flood-and-read passes without watchers and as many with them.
pub async fn watchers(servers: &Servers, passes: usize) -> Result<Vec<Metric>, String> {
    let demo = servers.demo().display().to_string();
    let limits = json!({
        "max_sessions": 1,
        "max_records": 2,
        "buffer_bytes": 16_777_216,
        "buffer_records": 1_048_576,
    });
    let profiles = json!({ PROFILE: {
        "argv": [demo, "flood", LINES.to_string()],
        "description": "flood with 50,000 lines",
        // More than the buffer holds: paused rather than evicted, so the reads go on
        // while the session floods, and nothing is lost.
        "on_full": "pause",
    }});
    let config = servers.config_path("live-view");
    servers.write_config(&config, &limits, &profiles).await?;
    let token_file = servers.config_dir.join("live-view-token");
    let token: String = (0..32)
        .map(|i| format!("{:02x}", (i * 37 + 11) as u8))
        .collect();
    write_private(&token_file, &token)?;
    let args = [
        "--config".to_string(),
        config.display().to_string(),
        "--web".to_string(),
        "127.0.0.1:0".to_string(),
        "--token-file".to_string(),
        token_file.display().to_string(),
    ];
    let mut mcp = McpServer::start_with(
        Transport::Stdio,
        &servers.server,
        &args,
        &servers.root,
        &untapped(),
    )
    .await?;
    let result = async {
        let address = view_address(&mcp).await?;
        let mut alone = Vec::new();
        let mut watched = Vec::new();
        let mut alone_pages = Vec::new();
        let mut watched_pages = Vec::new();
        let mut events = Vec::new();
        for _ in 0..passes {
            alone.push(pass(&mcp, None, &mut alone_pages).await?.0);
            let (elapsed, received) =
                pass(&mcp, Some((&address, &token)), &mut watched_pages).await?;
            watched.push(elapsed);
            events.extend(received);
        }
        let fewest = events.iter().copied().min().unwrap_or(0);
        if fewest == 0 {
            return Err("a watcher received no update".to_string());
        }
        Ok(vec![
            Metric::distribution("read_pass_alone", "ms", &alone),
            Metric::distribution("read_pass_watched", "ms", &watched),
            Metric::value(
                "read_pass_ratio",
                "ratio",
                median(&watched) / median(&alone),
            ),
            Metric::distribution("terminal_read_page_alone", "ms", &alone_pages),
            Metric::distribution("terminal_read_page_watched", "ms", &watched_pages),
            Metric::value("watchers", "pages", WATCHERS as f64),
            Metric::value("fewest_updates_per_watcher", "events", fewest as f64),
        ])
    }
    .await;
    mcp.shutdown().await;
    result
}

fn write_private(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// `127.0.0.1:PORT` of the live view, from the sign-in line the server printed.
async fn view_address(mcp: &McpServer) -> Result<String, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stderr = mcp.stderr();
        if let Some(line) = stderr.lines().find(|l| l.starts_with(SIGN_IN)) {
            let url = &line[SIGN_IN.len()..];
            let address = url
                .strip_prefix("http://")
                .and_then(|rest| rest.split('/').next())
                .ok_or_else(|| format!("an unexpected sign-in line: {line}"))?;
            return Ok(address.to_string());
        }
        if Instant::now() > deadline {
            return Err(format!("no live view line on stderr:\n{stderr}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Start the flood, open the watchers (if any), page `terminal_read` from 0 until the
/// output is complete and read to its end; the time that took and each watcher's updates.
async fn pass(
    mcp: &McpServer,
    view: Option<(&str, &str)>,
    page_ms: &mut Vec<f64>,
) -> Result<(f64, Vec<usize>), String> {
    let sid = start(mcp, PROFILE).await?;
    let mut watchers = Vec::new();
    if let Some((address, token)) = view {
        for _ in 0..WATCHERS {
            watchers.push(watch(address, token, &sid).await?);
        }
    }
    let began = Instant::now();
    let paging = Paging {
        wait_ms: Some(1000),
        page_ms: Some(page_ms),
        ..Paging::default()
    };
    let cursor = read_pages(mcp, &sid, 0, paging).await?.code_points;
    let elapsed = ms(began.elapsed());
    let expected = LINES * 100;
    if cursor < expected {
        return Err(format!("read {cursor} code points of at least {expected}"));
    }
    let mut received = Vec::new();
    for (task, events) in watchers {
        task.abort();
        received.push(events.load(Ordering::Relaxed));
    }
    let _ = call(mcp, "terminal_forget", json!({"session_id": sid})).await?;
    Ok((elapsed, received))
}

/// One live-view page's update stream of session `sid`, read until aborted; the events
/// received so far.
async fn watch(
    address: &str,
    token: &str,
    sid: &str,
) -> Result<(JoinHandle<()>, Arc<AtomicUsize>), String> {
    let mut stream = TcpStream::connect(address)
        .await
        .map_err(|e| format!("cannot connect to the live view at {address}: {e}"))?;
    let request = format!(
        "GET /ui/sessions/{sid}/events HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer \
         {token}\r\nAccept: text/event-stream\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("cannot ask for the update stream: {e}"))?;
    let mut head = vec![0u8; 4096];
    let n = stream
        .read(&mut head)
        .await
        .map_err(|e| format!("no answer from the live view: {e}"))?;
    let head = String::from_utf8_lossy(&head[..n]).into_owned();
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("the live view answered: {head}"));
    }
    let events = Arc::new(AtomicUsize::new(head.matches("\n\n").count()));
    let counted = events.clone();
    let task = tokio::spawn(async move {
        let mut chunk = vec![0u8; 65_536];
        let mut last = 0u8;
        while let Ok(n) = stream.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            let bytes = &chunk[..n];
            let ends = bytes.windows(2).filter(|w| w == b"\n\n").count()
                + usize::from(last == b'\n' && bytes[0] == b'\n');
            counted.fetch_add(ends, Ordering::Relaxed);
            last = bytes[n - 1];
        }
    });
    Ok((task, events))
}
