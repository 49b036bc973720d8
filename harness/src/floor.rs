//! The floors the benchmarks compare against, measured in the same run: a minimal rmcp
//! stdio server (`harness floor-server`) with a no-op tool and a tool that answers a page of
//! output without reading any, and what the OS itself costs for a spawn and for reading a
//! pipe, measured in-process.

use std::io::Read;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::json;

/// The no-op tool of the floor server.
pub const NOOP_TOOL: &str = "noop";
/// The floor server's tool answering `{"line": L}` with a page of `terminal_read`'s shape
/// whose text is `L` repeated to `PAGE_TEXT_BYTES`: what a page costs the client and rmcp
/// when the server does no work to find it.
pub const PAGE_TOOL: &str = "page";
/// The text bytes of a full page (`terminal_read`'s largest `max_bytes`).
pub const PAGE_TEXT_BYTES: usize = 65_536;

/// The page of `line`, built on the first call asking for it and answered as it is after.
#[derive(Default)]
struct FloorServer {
    page: std::sync::Mutex<Option<(String, serde_json::Value)>>,
}

/// `line` repeated to at most `PAGE_TEXT_BYTES` (cut at a code point), as one record of
/// `terminal_read`'s answer.
pub fn page_of(line: &str) -> serde_json::Value {
    let mut text = String::with_capacity(PAGE_TEXT_BYTES);
    for c in line.chars().cycle() {
        if text.len() + c.len_utf8() > PAGE_TEXT_BYTES {
            break;
        }
        text.push(c);
    }
    let chars = text.chars().count();
    json!({"ok": true, "base_cursor": 0, "has_more": true, "next_cursor": chars,
           "output_complete": true, "output_incomplete": false, "status": "EXITED",
           "truncated": false, "records": [{"cursor": 0, "stream": "stdout", "text": text}]})
}

impl ServerHandler for FloorServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let object = |schema: serde_json::Value| match schema {
            serde_json::Value::Object(map) => Arc::new(map),
            _ => Arc::default(),
        };
        let schema = object(json!({"type": "object", "properties": {},
                                   "additionalProperties": false}));
        let page_schema = object(json!({"type": "object",
                                        "properties": {"line": {"type": "string"}},
                                        "required": ["line"], "additionalProperties": false}));
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(NOOP_TOOL, "does nothing", schema),
            Tool::new(PAGE_TOOL, "answers a page of `line` repeated", page_schema),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != PAGE_TOOL {
            return Ok(CallToolResult::structured(json!({"ok": true})).into());
        }
        let line = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("line"))
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| ErrorData::invalid_params("`line` (a string) is required", None))?;
        let mut cached = self.page.lock().unwrap_or_else(|e| e.into_inner());
        if cached.as_ref().is_none_or(|(l, _)| l != line) {
            *cached = Some((line.to_owned(), page_of(line)));
        }
        let page = cached.as_ref().map(|(_, p)| p.clone()).unwrap_or_default();
        Ok(CallToolResult::structured(page).into())
    }
}

/// Serve the floor server on stdio until the client closes it.
pub fn serve() -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let service = FloorServer::default()
            .serve(rmcp::transport::io::stdio())
            .await
            .map_err(|e| e.to_string())?;
        let _ = service.waiting().await;
        Ok(())
    })
}

/// Serve, on stdio, a floor below any MCP server: no rmcp and no work, each request read
/// as a line and answered with bytes made once. `initialize` gets a fixed answer, a call of
/// `page` the page of its `line` as `CallToolResult::structured` would put it (the same
/// JSON as structured content and as text), any other tool call the floor server's no-op
/// answer, anything else with an id an empty result.
/// Stdout is widened (to 1 MiB where allowed) so a page leaves in one write, as it does
/// from mcp-terminal.
pub fn serve_canned() -> Result<(), String> {
    use std::io::{BufRead, Write};
    widen_stdout();
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    // The line last asked for, and its answer after the id.
    let mut page: Option<(String, Vec<u8>)> = None;
    let noop = serde_json::to_string(&CallToolResult::structured(json!({"ok": true})))
        .map_err(|e| e.to_string())?;
    let noop = format!(r#","result":{noop}}}"#);
    let mut out = Vec::new();
    for line in stdin.lines() {
        let line = line.map_err(|e| e.to_string())?;
        let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let Some(id) = message.get("id") else {
            continue; // a notification
        };
        let method = message.get("method").and_then(serde_json::Value::as_str);
        let asked = message
            .pointer("/params/arguments/line")
            .and_then(serde_json::Value::as_str);
        out.clear();
        out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
        out.extend_from_slice(id.to_string().as_bytes());
        match (method, asked) {
            (Some("initialize"), _) => {
                let version = message
                    .pointer("/params/protocolVersion")
                    .cloned()
                    .unwrap_or(json!("2025-06-18"));
                let result = json!({"protocolVersion": version,
                                    "capabilities": {"tools": {}},
                                    "serverInfo": {"name": "floor", "version": "0"}});
                out.extend_from_slice(format!(r#","result":{result}}}"#).as_bytes());
            }
            (Some("tools/call"), Some(asked)) => {
                if page.as_ref().is_none_or(|(l, _)| l != asked) {
                    let result = serde_json::to_string(&CallToolResult::structured(page_of(asked)))
                        .map_err(|e| e.to_string())?;
                    page = Some((asked.to_owned(), format!(r#","result":{result}}}"#).into()));
                }
                if let Some((_, answer)) = &page {
                    out.extend_from_slice(answer);
                }
            }
            (Some("tools/call"), None) => out.extend_from_slice(noop.as_bytes()),
            _ => out.extend_from_slice(br#","result":{}}"#),
        }
        out.push(b'\n');
        stdout.write_all(&out).map_err(|e| e.to_string())?;
        stdout.flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Ask for a megabyte of room in stdout where it is a pipe, halving while refused.
fn widen_stdout() {
    use nix::fcntl::{FcntlArg, fcntl};
    let stdout = std::io::stdout();
    let mut size = 1 << 20;
    while size > 65_536 && fcntl(&stdout, FcntlArg::F_SETPIPE_SZ(size)).is_err() {
        size /= 2;
    }
}

/// Spawn `program args` with only its stdout on a pipe; the child and that pipe.
fn spawn_piped(program: &Path, args: &[&str]) -> Result<(Child, ChildStdout), String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot spawn {}: {e}", program.display()))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    Ok((child, stdout))
}

/// `program args` with its stdio on a terminal of `rows` × `cols`, read straight from the
/// terminal's master in-process until the program has closed it; the bytes the terminal
/// gave (its line discipline makes each `\n` a `\r\n`) and the time from the spawn.
pub fn direct_pty_read(
    program: &Path,
    args: &[&str],
    (rows, cols): (u16, u16),
) -> Result<(u64, Duration), String> {
    let began = Instant::now();
    let size = nix::pty::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(&size, None).map_err(|e| format!("openpty: {e}"))?;
    // Neither end may reach a program spawned meanwhile: a stray slave keeps the end away.
    for fd in [&pty.master, &pty.slave] {
        nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )
        .map_err(|e| format!("close-on-exec: {e}"))?;
    }
    let slave = |fd: &std::os::fd::OwnedFd| fd.try_clone().map(Stdio::from);
    let mut child = Command::new(program)
        .args(args)
        .stdin(slave(&pty.slave).map_err(|e| e.to_string())?)
        .stdout(slave(&pty.slave).map_err(|e| e.to_string())?)
        .stderr(Stdio::from(pty.slave))
        .spawn()
        .map_err(|e| format!("cannot spawn {}: {e}", program.display()))?;
    let mut master = std::fs::File::from(pty.master);
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    let read = loop {
        match master.read(&mut buf) {
            // Every copy of the slave is closed: the program is done with the terminal.
            Ok(0) => break Ok(()),
            Err(e) if e.raw_os_error() == Some(nix::libc::EIO) => break Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Ok(n) => total += n as u64,
            Err(e) => {
                let _ = child.kill();
                break Err(e.to_string());
            }
        }
    };
    child.wait().map_err(|e| e.to_string())?;
    read.map(|()| (total, began.elapsed()))
}

/// Spawn `program args`, and time until its first byte of stdout and until it exited.
pub fn spawn_to_first_output(
    program: &Path,
    args: &[&str],
) -> Result<(Duration, Duration), String> {
    let began = Instant::now();
    let (mut child, mut stdout) = spawn_piped(program, args)?;
    let mut byte = [0u8; 1];
    let n = stdout.read(&mut byte).map_err(|e| e.to_string())?;
    let first = began.elapsed();
    if n == 0 {
        return Err(format!("{} wrote nothing", program.display()));
    }
    std::io::copy(&mut stdout, &mut std::io::sink()).map_err(|e| e.to_string())?;
    child.wait().map_err(|e| e.to_string())?;
    Ok((first, began.elapsed()))
}

/// Run `program args` with stdout on a pipe read straight into nothing (as `> /dev/null`
/// through a pipe would); the bytes read and the time from spawn to exit.
pub fn direct_pipe_read(program: &Path, args: &[&str]) -> Result<(u64, Duration), String> {
    let began = Instant::now();
    let (mut child, mut stdout) = spawn_piped(program, args)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        match stdout.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(e) => return Err(e.to_string()),
        }
    }
    child.wait().map_err(|e| e.to_string())?;
    Ok((total, began.elapsed()))
}

/// The exec floor: a persistent shell on pipes (`/bin/sh`, or bash) driven directly, no MCP
/// at all. Each command is written with a marker line after it (`printf '\036%s\n' "$?"`),
/// and its output is read up to the marker, which carries its exit status.
pub struct ShellFloor {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: ChildStdout,
    buf: Vec<u8>,
}

/// bash as the exec floor runs it: on pipes, without start-up files.
pub const BASH_FLOOR: &[&str] = &["/bin/bash", "--noprofile", "--norc"];

impl ShellFloor {
    /// `shell` (a program and its arguments) on pipes.
    pub fn start(shell: &[&str]) -> Result<ShellFloor, String> {
        let (program, args) = shell.split_first().ok_or("no shell")?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot spawn {program}: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        Ok(ShellFloor {
            child,
            stdin,
            stdout,
            buf: Vec::with_capacity(4096),
        })
    }

    /// Run `command`; what it printed and its exit status.
    pub fn exec(&mut self, command: &str) -> Result<(String, i32), String> {
        use std::io::Write;
        let line = format!("{command}\nprintf '\\036%s\\n' \"$?\"\n");
        self.stdin
            .write_all(line.as_bytes())
            .map_err(|e| e.to_string())?;
        self.buf.clear();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(at) = self.buf.iter().position(|b| *b == 0x1e)
                && self.buf[at..].ends_with(b"\n")
            {
                let status = std::str::from_utf8(&self.buf[at + 1..self.buf.len() - 1])
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or("a marker without a status")?;
                let output = String::from_utf8_lossy(&self.buf[..at]).into_owned();
                return Ok((output, status));
            }
            match self.stdout.read(&mut chunk) {
                Ok(0) => return Err("the shell ended".into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}

impl Drop for ShellFloor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The run floor: `/bin/sh -c LINE` spawned directly, stdout and stderr read to their end
/// and the exit awaited; what it printed and its exit status.
pub fn sh_c(line: &str) -> Result<(String, i32), String> {
    let out = Command::new("/bin/sh")
        .args(["-c", line])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot spawn /bin/sh: {e}"))?;
    let status = out.status.code().ok_or("/bin/sh was killed")?;
    Ok((String::from_utf8_lossy(&out.stdout).into_owned(), status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_floors_run_commands() {
        for shell in [&["/bin/sh"][..], BASH_FLOOR] {
            let mut sh = ShellFloor::start(shell).expect("the shell starts");
            assert_eq!(sh.exec("true").unwrap(), (String::new(), 0));
            assert_eq!(sh.exec("echo hi").unwrap(), ("hi\n".to_string(), 0));
            assert_eq!(sh.exec("printf x; false").unwrap(), ("x".to_string(), 1));
        }
        assert_eq!(sh_c("echo hi").unwrap(), ("hi\n".to_string(), 0));
    }

    #[test]
    fn a_page_is_its_line_repeated_to_whole_code_points() {
        let line = "中文字符测试中文字符测试\n";
        let page = page_of(line);
        let text = page.pointer("/records/0/text").and_then(|t| t.as_str());
        let text = text.expect("a page has one record of text");
        assert!(text.len() <= PAGE_TEXT_BYTES);
        assert!(
            text.len() + 3 > PAGE_TEXT_BYTES,
            "full to the last code point"
        );
        assert!(line.repeat(2000).starts_with(text));
        assert_eq!(page["next_cursor"], json!(text.chars().count()));
        assert_eq!(page["has_more"], json!(true));
        let ascii = page_of("flood 00000001 xxxx\n");
        assert_eq!(
            ascii["records"][0]["text"].as_str().map(str::len),
            Some(PAGE_TEXT_BYTES)
        );
    }
}
