//! Every application error code the tools return, and the error value that carries one.
//!
//! A `ToolError` becomes an MCP tool result with `isError: true` and structured content
//! `{"ok": false, "error": {"code", "message", ...extra}}`. Messages say what to do next and
//! never carry raw OS error text.

use serde_json::{Map, Value, json};

/// JSON-RPC's "Method not found" message for `method`, saying what to do.
pub fn method_not_found(method: &str) -> String {
    let hint = if method.starts_with("notifications/") {
        "it is a notification: send it without an id"
    } else {
        "this server answers initialize, ping, tools/list and tools/call"
    };
    format!("Method not found: `{method}`; {hint}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidArgument,
    UnknownCommand,
    CwdNotAllowed,
    EnvNotAllowed,
    SpawnFailed,
    SessionLimit,
    RecordLimit,
    SessionNotFound,
    SessionNotRunning,
    SessionRunning,
    SessionBusy,
    StdinClosed,
    InputTooLarge,
    InputBackpressure,
    InputUncertain,
    CursorExpired,
    InvalidCursor,
    NotAPty,
    NotAShell,
    SecretNotAllowed,
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            ErrorCode::UnknownCommand => "UNKNOWN_COMMAND",
            ErrorCode::CwdNotAllowed => "CWD_NOT_ALLOWED",
            ErrorCode::EnvNotAllowed => "ENV_NOT_ALLOWED",
            ErrorCode::SpawnFailed => "SPAWN_FAILED",
            ErrorCode::SessionLimit => "SESSION_LIMIT",
            ErrorCode::RecordLimit => "RECORD_LIMIT",
            ErrorCode::SessionNotFound => "SESSION_NOT_FOUND",
            ErrorCode::SessionNotRunning => "SESSION_NOT_RUNNING",
            ErrorCode::SessionRunning => "SESSION_RUNNING",
            ErrorCode::SessionBusy => "SESSION_BUSY",
            ErrorCode::StdinClosed => "STDIN_CLOSED",
            ErrorCode::InputTooLarge => "INPUT_TOO_LARGE",
            ErrorCode::InputBackpressure => "INPUT_BACKPRESSURE",
            ErrorCode::InputUncertain => "INPUT_UNCERTAIN",
            ErrorCode::CursorExpired => "CURSOR_EXPIRED",
            ErrorCode::InvalidCursor => "INVALID_CURSOR",
            ErrorCode::NotAPty => "NOT_A_PTY",
            ErrorCode::NotAShell => "NOT_A_SHELL",
            ErrorCode::SecretNotAllowed => "SECRET_NOT_ALLOWED",
            ErrorCode::Internal => "INTERNAL",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    pub code: ErrorCode,
    pub message: String,
    /// Extra fields placed inside `error` next to `code` and `message`.
    pub extra: Map<String, Value>,
}

impl ToolError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ToolError {
            code,
            message: message.into(),
            extra: Map::new(),
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }

    pub fn invalid_argument(param: &str, rule: impl std::fmt::Display) -> Self {
        ToolError::new(
            ErrorCode::InvalidArgument,
            format!("argument `{param}` {rule}; fix it and call again"),
        )
        .with("parameter", param)
    }

    pub fn internal(what: impl std::fmt::Display) -> Self {
        ToolError::new(
            ErrorCode::Internal,
            format!("internal error: {what}; the session state is unchanged, try again"),
        )
    }

    /// The server (or the system) has no file descriptor to spare, so nothing was done.
    pub fn out_of_files() -> Self {
        ToolError::new(
            ErrorCode::Internal,
            "the server is out of file descriptors (too many open connections, sessions or \
             files), so nothing was started; end sessions you no longer need \
             (terminal_terminate, terminal_forget) or ask the owner to raise the server's \
             open-file limit, then try again",
        )
    }

    /// The structured content of the error result.
    pub fn to_json(&self) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), self.code.as_str().into());
        error.insert("message".into(), self.message.clone().into());
        error.extend(self.extra.clone());
        json!({ "ok": false, "error": error })
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for ToolError {}
