//! The MCP surface: the tool catalog, argument decoding, and the mapping of every call to
//! the session layer and back to `{"ok": true, ...}` or `{"ok": false, "error": ...}`.
//! Every tool is dispatched in `TerminalServer::dispatch`.

mod catalog;
mod params;

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::errors::ToolError;
use crate::session::{Reason, Sessions, StartRequest};
use catalog::{ToolSpec, catalog};
use params::Args;

#[derive(Clone)]
pub struct TerminalServer {
    sessions: Arc<Sessions>,
    catalog: Arc<Vec<ToolSpec>>,
}

impl TerminalServer {
    pub fn new(sessions: Arc<Sessions>) -> Self {
        let catalog = Arc::new(catalog(&sessions.config));
        TerminalServer { sessions, catalog }
    }

    async fn dispatch(
        &self,
        tool: &str,
        args: &Args,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError> {
        let sessions = &self.sessions;
        let session = || sessions.get(args.str("session_id").unwrap_or_default());
        match tool {
            "terminal_start" => {
                let request = StartRequest {
                    command_id: args.str("command_id").unwrap_or_default().to_owned(),
                    cwd: args.str("cwd").map(str::to_owned),
                    env: args.str_map("env"),
                    timeout_ms: args.opt_int("timeout_ms"),
                };
                ok(sessions.start(request).await?.snapshot())
            }
            "terminal_read" => {
                let result = session()?
                    .read(
                        args.int("cursor"),
                        args.int("max_bytes") as usize,
                        Duration::from_millis(args.int("wait_ms")),
                        args.bool("strip_ansi"),
                    )
                    .await?;
                ok(result)
            }
            "terminal_write" => {
                let (accepted_bytes, stdin_closed) = session()?
                    .write(
                        args.str("text").unwrap_or_default(),
                        args.bool("close_stdin"),
                        sessions.config.limits.max_input_bytes,
                        cancel,
                    )
                    .await?;
                ok(serde_json::json!({
                    "accepted_bytes": accepted_bytes,
                    "stdin_closed": stdin_closed,
                }))
            }
            "terminal_status" => ok(session()?.snapshot()),
            "terminal_terminate" => ok(session()?
                .terminate(Reason::User, args.int("grace_ms"))
                .await),
            other => Err(ToolError::internal(format!("tool {other} has no handler"))),
        }
    }
}

/// `{"ok": true}` merged with the fields of `value`.
fn ok(value: impl Serialize) -> Result<Value, ToolError> {
    let mut fields = match serde_json::to_value(value) {
        Ok(Value::Object(map)) => map,
        Ok(_) | Err(_) => return Err(ToolError::internal("a result could not be encoded")),
    };
    let mut out = Map::new();
    out.insert("ok".into(), Value::Bool(true));
    out.append(&mut fields);
    Ok(Value::Object(out))
}

impl ServerHandler for TerminalServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "mcp-terminal",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "Start owner-approved commands as sessions (terminal_start), read their output \
                 by cursor (terminal_read), write their stdin (terminal_write), check them \
                 (terminal_status) and end their whole process group (terminal_terminate).",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.catalog.iter().map(ToolSpec::tool).collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.catalog
            .iter()
            .find(|t| t.name == name)
            .map(ToolSpec::tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(spec) = self.catalog.iter().find(|t| t.name == request.name) else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool `{}`; call tools/list", request.name),
                None,
            ));
        };
        let outcome = match Args::decode(&spec.params, request.arguments) {
            Ok(args) => self.dispatch(spec.name, &args, &context.ct).await,
            Err(error) => Err(error),
        };
        let result = match outcome {
            Ok(value) => CallToolResult::structured(value),
            Err(error) => {
                tracing::debug!(tool = spec.name, %error, "tool error");
                CallToolResult::structured_error(error.to_json())
            }
        };
        Ok(result.into())
    }
}
