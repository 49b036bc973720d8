//! A running `mcp-terminal http`: started in a directory of its own, which is also its
//! HOME (so no test reads the owner's config), with a token file there, and its stderr
//! collected as it comes.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::stderr::Stderr;

pub const BIN: &str = env!("CARGO_BIN_EXE_mcp-terminal");
/// The line the server names its URL with.
const LISTENING: &str = "mcp-terminal: listening on ";

pub struct HttpServer {
    pub child: Child,
    pub stderr: Stderr,
    /// `http://ADDRESS`, where `/mcp` is served.
    pub base: String,
    pub token: String,
    pub dir: tempfile::TempDir,
}

impl HttpServer {
    /// `mcp-terminal http --token-file DIR/token ARGS` in a fresh directory, logging at
    /// `log`; returned once it listens.
    pub fn start(args: &[&str], log: &str) -> HttpServer {
        HttpServer::start_in(tempfile::tempdir().unwrap(), args, log)
    }

    /// The same in `dir`, where a token file may already be.
    pub fn start_in(dir: tempfile::TempDir, args: &[&str], log: &str) -> HttpServer {
        let token_file = dir.path().join("token");
        let mut command = Command::new(BIN);
        hangup_as_default(&mut command);
        let mut child = command
            .args(["http", "--token-file"])
            .arg(&token_file)
            .args(args)
            .current_dir(dir.path())
            .env("HOME", dir.path())
            .env_remove("XDG_CONFIG_HOME")
            .env("MCP_TERMINAL_LOG", log)
            // Its open descriptors are counted: a server of another user than root is kept
            // dumpable, so that /proc lists them (it makes itself not dumpable otherwise).
            .env("MCP_TERMINAL_DUMPABLE", dumpable_unless_root())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Stderr::of(&mut child);
        let line = stderr.line(&format!("{LISTENING}http://"));
        let base = line[LISTENING.len()..].trim_end_matches("/mcp").to_string();
        let token = std::fs::read_to_string(&token_file)
            .unwrap()
            .trim()
            .to_string();
        HttpServer {
            child,
            stderr,
            base,
            token,
            dir,
        }
    }

    pub fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.base.trim_start_matches("http://").parse().unwrap()
    }

    pub fn stderr(&self) -> String {
        self.stderr.text()
    }

    /// Its stderr once `done` holds of it (within `PATIENCE`).
    pub fn stderr_until(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        self.stderr.until(what, done)
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    /// Its exit status, once it has exited (within `PATIENCE`).
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        super::stderr::wait_exit(&mut self.child)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl HttpServer {
    pub fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        reqwest::Client::new()
            .post(self.url())
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(body.to_string())
    }

    pub fn authed(&self, body: &Value) -> reqwest::RequestBuilder {
        self.post(body).bearer_auth(&self.token)
    }

    /// Open an MCP session (legacy revision) and return its id.
    pub async fn open_session(&self) -> Result<String, (StatusCode, String)> {
        let response = self.authed(&initialize(1)).send().await.unwrap();
        let status = response.status();
        let id = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_string());
        let body = response.text().await.unwrap();
        match id {
            Some(id) if status == StatusCode::OK => {
                let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
                let sent = self
                    .authed(&initialized)
                    .header("Mcp-Session-Id", &id)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(sent.status(), StatusCode::ACCEPTED);
                Ok(id)
            }
            _ => Err((status, body)),
        }
    }

    /// A terminal_start in MCP session `id`: the terminal session's id, and the result.
    pub async fn start_terminal(&self, id: &str, arguments: Value) -> (String, Value) {
        let started = self.call(id, "terminal_start", arguments).await;
        let sid = started["structuredContent"]["session_id"]
            .as_str()
            .unwrap_or_else(|| panic!("nothing started: {started}"))
            .to_string();
        (sid, started)
    }

    /// terminal_write of `text` to terminal session `sid`, in MCP session `id`: accepted.
    pub async fn write(&self, id: &str, sid: &str, text: &str) {
        let args = json!({"session_id": sid, "text": text});
        self.call_ok(id, "terminal_write", args).await;
    }

    /// A tools/call in session `id` that must succeed (`ok: true`); its result.
    pub async fn call_ok(&self, id: &str, tool: &str, arguments: Value) -> Value {
        let result = self.call(id, tool, arguments).await;
        assert_eq!(result["structuredContent"]["ok"], json!(true), "{result}");
        result
    }

    /// A tools/call in session `id`; the JSON-RPC result from the SSE answer.
    pub async fn call(&self, id: &str, tool: &str, arguments: Value) -> Value {
        let request = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        let response = self
            .authed(&request)
            .header("Mcp-Session-Id", id)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let text = response.text().await.unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find(|m| m.get("id") == Some(&json!(7)))
            .unwrap_or_else(|| panic!("no answer in {text}"))["result"]
            .clone()
    }
}

pub fn initialize(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "http-test", "version": "1"}}})
}

/// `MCP_TERMINAL_DUMPABLE` for a server whose /proc entries a test reads: `1` unless the
/// tests run as root, who may read them anyway (so the server runs as its users run it).
pub fn dumpable_unless_root() -> &'static str {
    if nix::unistd::geteuid().is_root() {
        "0"
    } else {
        "1"
    }
}

/// Give the server SIGHUP's default disposition whatever the test runner's is: a runner
/// started under `nohup` ignores SIGHUP, which its children inherit, and a server started
/// with SIGHUP ignored keeps it ignored.
pub fn hangup_as_default(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only `signal`, which is async-signal-safe, is called.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
}
