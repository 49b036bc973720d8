//! The MCP surface: the tool catalog, argument decoding, and the mapping of every call to
//! the session layer and back to `{"ok": true, ...}` or `{"ok": false, "error": ...}`.
//! Every tool is dispatched in `TerminalServer::dispatch`.

mod catalog;
mod keys;
mod params;

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Serialize;
use serde_json::{Map, Value};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::signal::Signal;
use rmcp::model::ProgressNotificationParam;

use crate::audit::{AuditLine, AuditLog};
use crate::errors::{ErrorCode, ToolError};
use crate::limits::{IDLE_MAX_MS, IDLE_MIN_MS, WAIT_PROGRESS_EVERY};
use crate::output::{Search, Shape, Stream};
use crate::session::{
    ExecRequest, OnTimeout, ReadFrom, Reason, Sessions, StartRequest, Streams, Target, WaitRequest,
};
use catalog::{ToolSpec, catalog};
use keys::{KEY_NAMES, key_bytes};
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
    fn audit(
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
        let text = |key: &str| arguments.get(key).and_then(Value::as_str);
        let answered = outcome.as_ref().ok();
        let session_id = text("session_id").map(str::to_owned).or_else(|| {
            let found = answered.and_then(|v| {
                v.get("session_id")
                    .or_else(|| v.get("session").and_then(|s| s.get("session_id")))
            });
            found.and_then(Value::as_str).map(str::to_owned)
        });
        let command_id = text("command_id").map(str::to_owned).or_else(|| {
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
                if let Some(written) = text("text") {
                    details.insert("bytes".into(), written.len().into());
                }
                if let Some(name) = text("secret") {
                    details.insert("secret".into(), name.into());
                }
            }
            "terminal_run" => {
                details.insert(
                    "stdin_bytes".into(),
                    text("stdin").map_or(0, str::len).into(),
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
        audit.record(AuditLine {
            tool: tool.to_owned(),
            session_id,
            command_id,
            outcome: match outcome {
                Ok(_) => "ok".to_owned(),
                Err(e) => e.code.as_str().to_owned(),
            },
            duration,
            details,
            extra: (self.audit_fields)(context),
        });
    }

    async fn dispatch(
        &self,
        tool: &str,
        args: &Args,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ToolError> {
        let cancel = &context.ct;
        let sessions = &self.sessions;
        let session = || sessions.get(args.str("session_id").unwrap_or_default());
        match tool {
            "terminal_start" => {
                let request = StartRequest {
                    command_id: args.str("command_id").unwrap_or_default().to_owned(),
                    cwd: args.str("cwd").map(str::to_owned),
                    env: args.str_map("env"),
                    timeout_ms: args.opt_int("timeout_ms"),
                    capture: None,
                };
                ok(sessions.start(request).await?.snapshot())
            }
            "terminal_run" => {
                let stdin = args.str("stdin").unwrap_or_default();
                let limit = sessions.config.limits.max_input_bytes;
                if stdin.len() > limit {
                    return Err(ToolError::new(
                        ErrorCode::InputTooLarge,
                        format!(
                            "stdin is {} bytes, over the limit of {limit}; nothing was started: \
                             put the input in a file the command reads instead",
                            stdin.len()
                        ),
                    ));
                }
                let timeout_ms = args.int("timeout_ms");
                let shape = if args.bool("strip_ansi") {
                    Shape::Strip
                } else {
                    Shape::Raw
                };
                let request = StartRequest {
                    command_id: args.str("command_id").unwrap_or_default().to_owned(),
                    cwd: args.str("cwd").map(str::to_owned),
                    env: args.str_map("env"),
                    timeout_ms: Some(timeout_ms),
                    capture: Some((shape, args.int("max_bytes") as usize)),
                };
                let session = sessions.start(request).await?;
                let result = session
                    .run_to_end(stdin, Duration::from_millis(timeout_ms), cancel)
                    .await;
                ok(result)
            }
            "terminal_read" => {
                let from = match args.opt_int("tail_lines") {
                    Some(_) if args.has("cursor") => {
                        return Err(ToolError::invalid_argument(
                            "tail_lines",
                            "cannot be combined with cursor; pass one of the two",
                        ));
                    }
                    Some(lines) => ReadFrom::Tail(lines as usize),
                    None => ReadFrom::Cursor(args.int("cursor")),
                };
                let mut result = session()?
                    .read(
                        from,
                        args.int("max_bytes") as usize,
                        Duration::from_millis(args.int("wait_ms")),
                        args.bool("strip_ansi"),
                    )
                    .await?;
                let records = std::mem::take(&mut result.records);
                let mut value = ok(result)?;
                if let Value::Object(fields) = &mut value {
                    // Moved in, not copied as `ok` would copy them.
                    let records = records.into_iter().map(Value::from).collect();
                    fields.insert("records".into(), Value::Array(records));
                }
                Ok(value)
            }
            "terminal_write" => {
                let close = args.bool("close_stdin");
                let limit = sessions.config.limits.max_input_bytes;
                let session = session()?;
                let (accepted_bytes, stdin_closed) = match (args.str("text"), args.str("secret")) {
                    (Some(text), None) => session.write(text, close, limit, cancel).await?,
                    (None, Some(name)) => {
                        let value = self.allowed_secret(&session.command_id, name)?;
                        session
                            .write_secret(name, value, close, limit, cancel)
                            .await?
                    }
                    (Some(_), Some(_)) | (None, None) => {
                        return Err(ToolError::invalid_argument(
                            "text",
                            "and `secret`: pass exactly one of the two (text to type, or the \
                             name of an owner-held secret)",
                        ));
                    }
                };
                ok(serde_json::json!({
                    "accepted_bytes": accepted_bytes,
                    "stdin_closed": stdin_closed,
                }))
            }
            "terminal_status" => ok(session()?.snapshot()),
            "terminal_terminate" => ok(session()?
                .terminate(Reason::User, args.int("grace_ms"))
                .await),
            "terminal_list" => {
                let snapshots: Vec<_> = sessions.retained().iter().map(|s| s.snapshot()).collect();
                let running = snapshots.iter().filter(|s| !s.status.is_final()).count();
                ok(serde_json::json!({
                    "running": running,
                    "retained": snapshots.len(),
                    "max_sessions": sessions.config.limits.max_sessions,
                    "max_records": sessions.config.limits.max_records,
                    "sessions": snapshots,
                }))
            }
            "terminal_forget" => {
                let id = args.str("session_id").unwrap_or_default();
                sessions.forget(id)?;
                ok(serde_json::json!({ "forgotten": id }))
            }
            "terminal_wait" => self.wait(args, context).await,
            "terminal_signal" => {
                let name = args.choice("signal");
                let signal = Signal::from_str(name)
                    .map_err(|_| ToolError::invalid_argument("signal", "is not a signal"))?;
                let target = match args.choice("target") {
                    "leader" => Target::Leader,
                    _ => Target::Group,
                };
                let session = session()?;
                session.signal(signal, target)?;
                ok(session.snapshot())
            }
            "terminal_keys" => {
                let mut bytes = Vec::new();
                for name in args.str_list("keys") {
                    let key = key_bytes(name).ok_or_else(|| {
                        ToolError::invalid_argument(
                            "keys",
                            format!(
                                "holds `{name}`, which is not a key name; valid names: {KEY_NAMES}"
                            ),
                        )
                    })?;
                    bytes.extend(key);
                }
                let limit = sessions.config.limits.max_input_bytes;
                if bytes.len() > limit {
                    return Err(ToolError::new(
                        ErrorCode::InputTooLarge,
                        format!(
                            "the keys make {} bytes, over the limit of {limit}; nothing was \
                             sent: send fewer keys per call",
                            bytes.len()
                        ),
                    ));
                }
                let stdin_closed = session()?.send(&bytes, false, cancel).await?;
                ok(serde_json::json!({
                    "accepted_bytes": bytes.len(),
                    "stdin_closed": stdin_closed,
                }))
            }
            "terminal_resize" => {
                let (rows, cols) = (args.int("rows") as u16, args.int("cols") as u16);
                session()?.resize(rows, cols).await?;
                ok(serde_json::json!({ "rows": rows, "cols": cols }))
            }
            "terminal_screen" => ok(session()?.screen(args.int("scrollback") as usize).await?),
            "terminal_exec" => {
                let session = sessions.shell(args.str("session_id").unwrap_or_default())?;
                let request = exec_request(args)?;
                let result = session
                    .exec(&request, sessions.config.limits.max_input_bytes, cancel)
                    .await;
                session.touch();
                ok(result?)
            }
            other => Err(ToolError::internal(format!("tool {other} has no handler"))),
        }
    }
}

impl TerminalServer {
    /// The value of secret `name` if the session's profile allows it; the error lists the
    /// names that are allowed, never a value.
    fn allowed_secret(&self, command_id: &str, name: &str) -> Result<&str, ToolError> {
        let config = &self.sessions.config;
        let allowed: &[String] = config
            .commands
            .get(command_id)
            .map_or(&[], |p| p.allowed_secrets.as_slice());
        match config.secrets.get(name) {
            Some(secret) if allowed.iter().any(|a| a == name) => Ok(secret.value.expose()),
            _ => Err(ToolError::new(
                ErrorCode::SecretNotAllowed,
                format!(
                    "secret `{name}` is not one the owner allows for `{command_id}`; allowed: {}",
                    if allowed.is_empty() {
                        "none (the owner lists them in the profile's allowed_secrets)".to_owned()
                    } else {
                        allowed.join(", ")
                    }
                ),
            )
            .with("allowed", allowed.to_vec())),
        }
    }

    /// `terminal_wait`, reporting progress while it waits when the request asked for it.
    async fn wait(
        &self,
        args: &Args,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ToolError> {
        let session = self
            .sessions
            .get(args.str("session_id").unwrap_or_default())?;
        let search = match args.str("pattern") {
            Some(pattern) => Some(Search::compile_for_client(pattern).await?),
            None => None,
        };
        let streams = match args.choice("stream") {
            "stdout" => Streams::Only(Stream::Stdout),
            "stderr" => Streams::Only(Stream::Stderr),
            _ => Streams::Any,
        };
        let timeout_ms = args.int("timeout_ms");
        let idle_ms = args.int("idle_ms");
        if (1..IDLE_MIN_MS).contains(&idle_ms) {
            return Err(ToolError::invalid_argument(
                "idle_ms",
                format!("must be 0 (off) or from {IDLE_MIN_MS} to {IDLE_MAX_MS}, got {idle_ms}"),
            ));
        }
        let request = WaitRequest {
            idle: (idle_ms > 0).then(|| Duration::from_millis(idle_ms)),
            cursor: args.int("cursor"),
            search,
            streams,
            timeout: Duration::from_millis(timeout_ms),
            strip_ansi: args.bool("strip_ansi"),
            until_input: args.bool("until_input"),
        };
        let searched = AtomicU64::new(0);
        let waiting = session.wait(request, &searched, &context.ct);
        let Some(token) = context.meta.get_progress_token() else {
            return ok(waiting.await?);
        };
        tokio::pin!(waiting);
        let started = tokio::time::Instant::now();
        // The first report is due one period from now (awaiting an immediate first tick
        // would cost a timer turn on every wait).
        let mut ticks =
            tokio::time::interval_at(started + WAIT_PROGRESS_EVERY, WAIT_PROGRESS_EVERY);
        loop {
            tokio::select! {
                result = &mut waiting => return ok(result?),
                _ = ticks.tick() => {
                    let elapsed = (started.elapsed().as_millis() as u64).min(timeout_ms) as f64;
                    let message = format!(
                        "waiting; {} code points searched",
                        searched.load(Ordering::Relaxed)
                    );
                    let progress = ProgressNotificationParam::new(token.clone(), elapsed)
                        .with_total(timeout_ms as f64)
                        .with_message(message);
                    let _ = context.peer.notify_progress(progress).await;
                }
            }
        }
    }
}

/// What a `terminal_exec` call asks for: a command, or `continue` (whose output options were
/// set by the call that started the command).
fn exec_request(args: &Args) -> Result<ExecRequest, ToolError> {
    let resume = args.bool("continue");
    let command = match (args.str("command"), resume) {
        (Some(command), false) => Some(command.to_owned()),
        (None, true) => None,
        (Some(_), true) | (None, false) => {
            return Err(ToolError::invalid_argument(
                "command",
                "and `continue`: pass exactly one (a command line to run, or continue: true \
                 to wait for the command still running)",
            ));
        }
    };
    if resume {
        for name in ["max_bytes", "strip_ansi", "raw"] {
            if args.has(name) {
                return Err(ToolError::invalid_argument(
                    name,
                    "cannot be combined with continue: the call that started the command \
                     chose how its output is returned",
                ));
            }
        }
    }
    let on_timeout = match (args.has("on_timeout"), args.choice("on_timeout"), resume) {
        (true, "keep", _) | (false, _, true) => OnTimeout::Keep,
        _ => OnTimeout::Interrupt,
    };
    Ok(ExecRequest {
        command,
        timeout: Duration::from_millis(args.int("timeout_ms")),
        on_timeout,
        max_bytes: args.int("max_bytes") as usize,
        strip_ansi: args.bool("strip_ansi"),
        raw: args.bool("raw"),
    })
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
/// `CallToolResult::structured` makes, with the text written by the fast writer).
fn structured(value: Value, is_error: bool) -> CallToolResult {
    let text =
        crate::json::to_string(&value, size_hint(&value)).unwrap_or_else(|_| value.to_string());
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result.is_error = Some(is_error);
    result
}

/// About the length of `value`'s JSON text, from its strings' lengths and a few bytes for
/// everything else, without looking at the text: room for a page's text made at once.
fn size_hint(value: &Value) -> usize {
    match value {
        Value::String(s) => s.len() + 2,
        Value::Array(items) => items.iter().map(size_hint).sum::<usize>() + items.len() + 2,
        Value::Object(fields) => {
            fields
                .iter()
                .map(|(key, value)| key.len() + 4 + size_hint(value))
                .sum::<usize>()
                + 2
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => 20,
    }
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
            return Err(ErrorData::invalid_params(
                format!("unknown tool `{}`; call tools/list", request.name),
                None,
            ));
        };
        let began = std::time::Instant::now();
        let arguments = request.arguments.clone().unwrap_or_default();
        let outcome = match Args::decode(&spec.params, request.arguments) {
            Ok(args) => self.dispatch(spec.name, &args, &context).await,
            Err(error) => Err(error),
        };
        self.audit(spec.name, &arguments, &outcome, began.elapsed(), &context);
        let result = match outcome {
            Ok(value) => structured(value, false),
            Err(error) => {
                tracing::debug!(tool = spec.name, %error, "tool error");
                structured(error.to_json(), true)
            }
        };
        Ok(result.into())
    }
}
