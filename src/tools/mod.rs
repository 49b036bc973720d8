//! The MCP surface: the tool catalog (`catalog.rs`), argument decoding (`params.rs`), one
//! function per tool mapping a call to the session layer (`calls.rs`), and the answer:
//! `{"ok": true, ...}` or `{"ok": false, "error": ...}`, each call written to the audit log.

mod calls;
mod catalog;
pub mod keys;
mod params;

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    self, CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams,
    CompleteResult, ConstString, ContentBlock, ErrorCode, GetPromptRequestParams,
    GetPromptResponse, Implementation, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::audit::{AuditLine, AuditLog, By};
use crate::errors::ToolError;
use crate::session::Sessions;
use catalog::{ToolSpec, catalog};
use params::Args;

#[derive(Clone)]
pub struct TerminalServer {
    sessions: Arc<Sessions>,
    catalog: Arc<Vec<ToolSpec>>,
    audit: Option<Arc<AuditLog>>,
    /// What the transport adds to each audit line (HTTP: MCP session id, client address).
    audit_fields: fn(&RequestContext<RoleServer>) -> Map<String, Value>,
}

impl TerminalServer {
    pub fn new(sessions: Arc<Sessions>) -> Self {
        let catalog = Arc::new(catalog(&sessions.config));
        TerminalServer {
            sessions,
            catalog,
            audit: None,
            audit_fields: |_| Map::new(),
        }
    }

    /// Record every call in `audit`.
    pub fn with_audit(mut self, audit: Option<Arc<AuditLog>>) -> Self {
        self.audit = audit;
        self
    }

    /// Add `fields` of each request to its audit line.
    pub fn with_audit_fields(
        mut self,
        fields: fn(&RequestContext<RoleServer>) -> Map<String, Value>,
    ) -> Self {
        self.audit_fields = fields;
        self
    }

    /// Write the audit line of one call: what it named and asked for, never written text
    /// or secret values.
    async fn audit(
        &self,
        tool: &str,
        arguments: &Map<String, Value>,
        outcome: &Result<Value, ToolError>,
        duration: Duration,
        context: &RequestContext<RoleServer>,
    ) {
        let Some(audit) = &self.audit else {
            return;
        };
        // Whatever the client wrote is logged less any configured secret's value: an agent
        // told a password may pass it where a secret's name, a session or a command id
        // belongs, and the refusal's line would hold it.
        let redactor = self.sessions.any_secret_redactor();
        let clean = |text: &str| match &redactor {
            Some(redactor) => redactor.replaced(text).into_owned(),
            None => text.to_owned(),
        };
        let raw = |key: &str| arguments.get(key).and_then(Value::as_str);
        let text = |key: &str| raw(key).map(clean);
        let answered = outcome.as_ref().ok();
        let session_id = text("session_id").or_else(|| {
            let found = answered.and_then(|v| {
                v.get("session_id")
                    .or_else(|| v.get("session").and_then(|s| s.get("session_id")))
            });
            found.and_then(Value::as_str).map(str::to_owned)
        });
        let command_id = text("command_id").or_else(|| {
            session_id
                .as_deref()
                .and_then(|id| self.sessions.command_of(id))
        });
        let mut details = Map::new();
        match tool {
            "terminal_exec" => {
                if let Some(command) = text("command") {
                    details.insert("command".into(), command.into());
                }
            }
            "terminal_write" => {
                if let Some(written) = raw("text") {
                    details.insert("bytes".into(), written.len().into());
                }
                if let Some(name) = text("secret") {
                    details.insert("secret".into(), name.into());
                }
            }
            "terminal_run" => {
                details.insert(
                    "stdin_bytes".into(),
                    raw("stdin").map_or(0, str::len).into(),
                );
            }
            "terminal_keys" => {
                let keys = arguments.get("keys").and_then(Value::as_array);
                details.insert("keys".into(), keys.map_or(0, Vec::len).into());
            }
            "terminal_signal" => {
                if let Some(signal) = text("signal") {
                    details.insert("signal".into(), signal.into());
                }
            }
            _ => {}
        }
        // How a command ended, for the owner reading what ran: exec's outcome as `result`,
        // the exit status, and the signal that ended a run.
        if matches!(tool, "terminal_exec" | "terminal_run")
            && let Some(answer) = answered
        {
            if let Some(result) = answer.get("outcome").filter(|v| v.is_string()) {
                details.insert("result".into(), result.clone());
            }
            if let Some(code) = answer.get("exit_code") {
                details.insert("exit_code".into(), code.clone());
            }
            if let Some(signal) = answer.get("signal").filter(|v| !v.is_null()) {
                details.insert("signal".into(), signal.clone());
            }
        }
        let written = audit.record(AuditLine {
            by: By::Agent,
            tool: tool.to_owned(),
            session_id,
            command_id,
            // The client cancelled the request: its answer went nowhere (a wait given up, a
            // command interrupted, a run terminated), and no fault of anyone's.
            outcome: match outcome {
                _ if context.ct.is_cancelled() => "cancelled".to_owned(),
                Ok(_) => "ok".to_owned(),
                Err(e) => e.code.as_str().to_owned(),
            },
            duration,
            details,
            extra: (self.audit_fields)(context),
        });
        written.settled(audit).await;
    }
}

/// Every string in `value` with each secret's value replaced by its marker.
fn redact_strings(value: &mut Value, redactor: &crate::output::Redactor) {
    match value {
        Value::String(text) => {
            if let std::borrow::Cow::Owned(clean) = redactor.replaced(text) {
                *text = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redact_strings(v, redactor)),
        Value::Object(fields) => fields
            .values_mut()
            .for_each(|v| redact_strings(v, redactor)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
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

/// The result carrying `value` both as structured content and as its JSON text (what
/// `CallToolResult::structured` makes, with the text written by the fast writer). The
/// only maker of a result with structured content: the stdio transport writes the value
/// as this text (`stdio::write_message`), so the text must stay exactly the value's JSON.
fn structured(value: Value, is_error: bool) -> CallToolResult {
    let mut text = crate::json::to_string(&value, crate::json::size_hint(&value))
        .unwrap_or_else(|_| value.to_string());
    // The escaper makes room for the worst case, six bytes a byte: a page's text would
    // hold that for as long as its answer is kept (over HTTP, rmcp keeps it a while).
    text.shrink_to_fit();
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result.is_error = Some(is_error);
    result
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
                 by cursor (terminal_read) or wait for a pattern (terminal_wait), write their \
                 stdin (terminal_write) or send keys (terminal_keys), look at a terminal's \
                 screen (terminal_screen), check them (terminal_status, terminal_list) and end \
                 their whole process group (terminal_terminate). Run a command to its end in \
                 one call with terminal_run; when the owner approved a shell, run command \
                 lines in it with terminal_exec and get their output and exit code.",
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
            let name = match self.sessions.any_secret_redactor() {
                Some(redactor) => redactor.replaced(&request.name).into_owned(),
                None => request.name.to_string(),
            };
            return Err(ErrorData::invalid_params(
                format!("unknown tool `{name}`; call tools/list"),
                None,
            ));
        };
        let began = std::time::Instant::now();
        // Kept for the audit line only: the call consumes its own copy.
        let arguments = match &self.audit {
            Some(_) => request.arguments.clone().unwrap_or_default(),
            None => Map::new(),
        };
        let outcome = match Args::decode(&spec.params, request.arguments) {
            Ok(args) => self.dispatch(spec.name, &args, &context).await,
            Err(error) => Err(error),
        };
        self.audit(spec.name, &arguments, &outcome, began.elapsed(), &context)
            .await;
        let result = match outcome {
            Ok(value) => structured(value, false),
            Err(error) => {
                // The code only: a message may quote what the client sent (a pattern, a cwd).
                tracing::debug!(tool = spec.name, code = error.code.as_str(), "tool error");
                let mut answer = error.to_json();
                // Which may be a secret's value, passed where a name belongs: no answer to
                // a tool call holds one.
                if let Some(redactor) = self.sessions.any_secret_redactor() {
                    redact_strings(&mut answer, redactor);
                }
                structured(answer, true)
            }
        };
        Ok(result.into())
    }

    // The MCP requests this server does not offer: rmcp answers them with a message that
    // is the method's name alone; these say what this server answers, as the answer to a
    // method MCP does not define does.

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Err(not_offered::<model::ListResourcesRequestMethod>())
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Err(not_offered::<model::ListResourceTemplatesRequestMethod>())
    }

    async fn read_resource(
        &self,
        _request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        Err(not_offered::<model::ReadResourceRequestMethod>())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Err(not_offered::<model::ListPromptsRequestMethod>())
    }

    async fn get_prompt(
        &self,
        _request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        Err(not_offered::<model::GetPromptRequestMethod>())
    }

    async fn complete(
        &self,
        _request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        Err(not_offered::<model::CompleteRequestMethod>())
    }

    // Logging and resource subscriptions are deprecated in MCP; clients still send them.
    #[allow(deprecated)]
    async fn subscribe(
        &self,
        _request: model::SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Err(not_offered::<model::SubscribeRequestMethod>())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        _request: model::UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Err(not_offered::<model::UnsubscribeRequestMethod>())
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        _request: model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Err(not_offered::<model::SetLevelRequestMethod>())
    }
}

/// "Method not found" for an MCP request this server does not offer, `M` its method.
fn not_offered<M: ConstString>() -> ErrorData {
    ErrorData::new(
        ErrorCode::METHOD_NOT_FOUND,
        crate::errors::method_not_found(M::VALUE),
        None,
    )
}
