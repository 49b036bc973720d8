//! A server on raw pipes (no MCP client), for framing checks: oversized lines, bytes that are
//! not JSON or not UTF-8, and what comes back on stdout.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// How long `expect` waits for a stdout line (and `expect_exit` for the exit): a bound on a
/// server that never answers, generous since a loaded machine can take seconds to answer.
pub const LINE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes written per chunk of an oversized frame; the frame is never built whole.
const OVERSIZED_CHUNK: usize = 64 * 1024;
/// Bound on writing a whole frame: a server that stops reading stdin must not hang the run.
const WRITE_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on reading back every answer to a flood.
const FLOOD_DRAIN: Duration = Duration::from_secs(120);
/// Protocol version the raw handshake announces (the one rmcp clients use by default).
const PROTOCOL_VERSION: &str = "2025-11-25";

pub struct RawServer {
    child: Child,
    stdin: Option<ChildStdin>,
    /// `None` once the harness closed its reading end (`close_stdout`).
    stdout: Option<BufReader<ChildStdout>>,
    stderr: tokio::task::JoinHandle<Vec<u8>>,
    next_id: u64,
}

impl RawServer {
    /// `env`: variables added to the server's own environment, as a scenario's `launch`
    /// gives them to its server (a secret it reads).
    pub fn spawn(
        program: &Path,
        args: &[String],
        cwd: &Path,
        env: &std::collections::BTreeMap<String, String>,
    ) -> Result<Self, String> {
        let mut child = tokio::process::Command::new(program)
            .arg("stdio")
            .args(args)
            .current_dir(cwd)
            .envs(env)
            .env("HOME", cwd)
            .env("XDG_CONFIG_HOME", cwd.join(".config"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot spawn {}: {e}", program.display()))?;
        let stdin = child.stdin.take();
        let stdout = Some(BufReader::new(child.stdout.take().ok_or("no stdout pipe")?));
        let mut err_pipe = child.stderr.take().ok_or("no stderr pipe")?;
        let stderr = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = err_pipe.read_to_end(&mut buf).await;
            buf
        });
        Ok(RawServer {
            child,
            stdin,
            stdout,
            stderr,
            next_id: 1000,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("stdin is already closed")?;
        tokio::time::timeout(WRITE_TIMEOUT, stdin.write_all(bytes))
            .await
            .map_err(|_| "writing to the server's stdin timed out".to_string())?
            .map_err(|e| format!("writing to the server's stdin failed: {e}"))?;
        stdin.flush().await.map_err(|e| e.to_string())
    }

    pub async fn send_line(&mut self, line: &str) -> Result<(), String> {
        let mut bytes = line.as_bytes().to_vec();
        bytes.push(b'\n');
        self.write(&bytes).await
    }

    pub async fn send_hex(&mut self, hex: &str) -> Result<usize, String> {
        let bytes = parse_hex(hex)?;
        self.write(&bytes).await?;
        Ok(bytes.len())
    }

    /// One JSON-RPC request line of exactly `total` bytes before its newline, streamed in
    /// chunks so neither side needs it whole.
    pub async fn send_oversized(&mut self, total: u64) -> Result<(), String> {
        let head = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"ping","params":{{"pad":""#,
            self.next_id
        );
        self.next_id += 1;
        let tail = "\"}}";
        let fixed = (head.len() + tail.len()) as u64;
        if total < fixed {
            return Err(format!("send_oversized needs at least {fixed} bytes"));
        }
        self.write(head.as_bytes()).await?;
        let mut pad = total - fixed;
        let chunk = vec![b'x'; OVERSIZED_CHUNK];
        while pad > 0 {
            let n = pad.min(OVERSIZED_CHUNK as u64) as usize;
            self.write(&chunk[..n]).await?;
            pad -= n as u64;
        }
        self.write(format!("{tail}\n").as_bytes()).await
    }

    /// Read the next stdout line as JSON, within `within`.
    pub async fn read_json(&mut self, within: Duration) -> Result<Value, String> {
        let line = self.read_line(within).await?;
        serde_json::from_str(&line)
            .map_err(|e| format!("stdout carried a line that is not JSON ({e}): {line:?}"))
    }

    /// Read the next stdout line as the server wrote it (without its line end), within
    /// `within`.
    pub async fn read_line(&mut self, within: Duration) -> Result<String, String> {
        let mut line = String::new();
        let stdout = self.stdout.as_mut().ok_or("stdout is already closed")?;
        match tokio::time::timeout(within, stdout.read_line(&mut line)).await {
            Err(_) => Err(format!("no stdout line within {} ms", within.as_millis())),
            Ok(Err(e)) => Err(format!("reading stdout failed: {e}")),
            Ok(Ok(0)) => Err("stdout closed".into()),
            Ok(Ok(_)) => Ok(line.trim_end_matches(['\n', '\r']).to_owned()),
        }
    }

    /// True if no stdout line arrives within `within`; the line otherwise.
    pub async fn silence(&mut self, within: Duration) -> Result<(), String> {
        let mut line = String::new();
        let stdout = self.stdout.as_mut().ok_or("stdout is already closed")?;
        match tokio::time::timeout(within, stdout.read_line(&mut line)).await {
            Err(_) => Ok(()),
            Ok(Ok(0)) => Ok(()),
            Ok(Ok(_)) => Err(format!("expected silence, got {line:?}")),
            Ok(Err(e)) => Err(format!("reading stdout failed: {e}")),
        }
    }

    /// initialize + notifications/initialized; returns the initialize reply.
    pub async fn initialize(&mut self) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({
            "jsonrpc": "2.0", "id": id, "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "mcp-terminal-harness", "version": env!("CARGO_PKG_VERSION")},
            },
        });
        self.send_line(&request.to_string()).await?;
        let reply = self.read_json(LINE_TIMEOUT).await?;
        if reply.get("id") != Some(&json!(id)) || reply.pointer("/result/protocolVersion").is_none()
        {
            return Err(format!("initialize got an unexpected reply: {reply}"));
        }
        self.send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await?;
        Ok(reply)
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) -> Result<(), String> {
        let pid = self.pid().ok_or("the raw server has already been reaped")?;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig)
            .map_err(|e| format!("kill({pid}, {sig}) failed: {e}"))
    }

    /// Write `times` copies of `line` (`{n}` replaced by 0, 1, …) and then `last`, without
    /// reading any answer; after `settle` (the writer blocked by then if the server applies
    /// backpressure) note the server's resident memory growth, then read every answer up to
    /// the one to `last` (id `"last"`). Returns (growth KiB, distinct ids answered besides
    /// `last`, the last answer).
    pub async fn flood_unread(
        &mut self,
        line: &str,
        times: u64,
        last: &str,
        settle: Duration,
    ) -> Result<(u64, u64, Value), String> {
        let pid = self.pid().ok_or("the raw server has exited")?;
        let before = crate::procfs::rss_kib(pid)?;
        let mut stdin = self.stdin.take().ok_or("stdin is already closed")?;
        let mut bytes = Vec::new();
        for n in 0..times {
            bytes.extend_from_slice(line.replace("{n}", &n.to_string()).as_bytes());
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(last.as_bytes());
        bytes.push(b'\n');
        let writer = tokio::spawn(async move {
            let written = stdin.write_all(&bytes).await.and(stdin.flush().await);
            (stdin, written)
        });
        tokio::time::sleep(settle).await;
        let grown = crate::procfs::rss_kib(pid)?.saturating_sub(before);
        // Requests run concurrently: the last answer may come before others.
        let mut answered = std::collections::HashSet::new();
        let mut last_answer = None;
        let deadline = tokio::time::Instant::now() + FLOOD_DRAIN;
        while last_answer.is_none() || (answered.len() as u64) < times {
            let within = deadline.saturating_duration_since(tokio::time::Instant::now());
            let answer = self.read_json(within.max(Duration::from_millis(1))).await?;
            match answer.get("id") {
                Some(id) if *id == json!("last") => last_answer = Some(answer),
                Some(id) => {
                    answered.insert(id.to_string());
                }
                None => return Err(format!("an answer without id: {answer}")),
            }
        }
        let answers = answered.len() as u64;
        let last_answer = last_answer.unwrap_or_default();
        let (stdin, written) = writer
            .await
            .map_err(|e| format!("the writer failed: {e}"))?;
        written.map_err(|e| format!("writing the flood failed: {e}"))?;
        self.stdin = Some(stdin);
        Ok((grown, answers, last_answer))
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Close the harness' reading end of the server's stdout (a client that goes away).
    pub fn close_stdout(&mut self) {
        self.stdout = None;
    }

    pub async fn wait_exit(&mut self, within: Duration) -> Result<Option<i32>, String> {
        match tokio::time::timeout(within, self.child.wait()).await {
            Err(_) => Err(format!(
                "the server did not exit within {} ms",
                within.as_millis()
            )),
            Ok(Err(e)) => Err(format!("waiting for the server failed: {e}")),
            Ok(Ok(status)) => Ok(status.code()),
        }
    }

    /// End the server (stdin EOF, then kill), check that anything left on stdout is JSON,
    /// and return its stderr.
    pub async fn finish(mut self) -> (String, Result<(), String>) {
        self.close_stdin();
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
        let mut rest = String::new();
        let read_rest = async {
            match self.stdout.as_mut() {
                Some(stdout) => stdout.read_to_string(&mut rest).await,
                None => Ok(0),
            }
        };
        let check = match tokio::time::timeout(Duration::from_secs(2), read_rest).await {
            Ok(Ok(_)) => rest
                .lines()
                .find(|l| serde_json::from_str::<Value>(l).is_err())
                .map_or(Ok(()), |l| {
                    Err(format!("stdout carried a line that is not JSON: {l:?}"))
                }),
            Ok(Err(e)) => Err(format!("stdout is not UTF-8 text: {e}")),
            Err(_) => Ok(()),
        };
        let stderr = tokio::time::timeout(Duration::from_secs(2), self.stderr)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        (String::from_utf8_lossy(&stderr).into_owned(), check)
    }
}

fn parse_hex(hex: &str) -> Result<Vec<u8>, String> {
    let digits: String = hex.chars().filter(|c| !c.is_whitespace()).collect();
    if !digits.len().is_multiple_of(2) {
        return Err(format!("odd number of hex digits in {hex:?}"));
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&digits[i..i + 2], 16).map_err(|e| format!("bad hex {hex:?}: {e}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_spaced_hex() {
        assert_eq!(parse_hex("ff fe 0a").unwrap(), vec![0xff, 0xfe, 0x0a]);
        assert_eq!(parse_hex("7b7d").unwrap(), b"{}".to_vec());
        assert!(parse_hex("f").is_err());
        assert!(parse_hex("zz").is_err());
    }
}
