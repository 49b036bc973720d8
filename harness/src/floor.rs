//! The floors the benchmarks compare against, measured in the same run: a minimal rmcp
//! stdio server with one no-op tool (`harness floor-server`), and what the OS itself costs
//! for a spawn and for reading a pipe, measured in-process.

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

struct FloorServer;

impl ServerHandler for FloorServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object", "properties": {}, "additionalProperties": false});
        let schema = match schema {
            serde_json::Value::Object(map) => Arc::new(map),
            _ => Arc::default(),
        };
        let tool = Tool::new(NOOP_TOOL, "does nothing", schema);
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResult::structured(json!({"ok": true})).into())
    }
}

/// Serve the floor server on stdio until the client closes it.
pub fn serve() -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let service = FloorServer
            .serve(rmcp::transport::io::stdio())
            .await
            .map_err(|e| e.to_string())?;
        let _ = service.waiting().await;
        Ok(())
    })
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
