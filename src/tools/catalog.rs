//! What the client sees of each tool: name, description (what it does, when to use it,
//! what to call next), parameters, output schema and annotations.

use rmcp::model::{Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

use super::keys::KEY_NAMES;
use super::params::{Kind, Param, input_schema};
use crate::config::Config;
use crate::limits::{
    COMMAND_ID_MAX_CHARS, CWD_MAX_CHARS, EXEC_DEFAULT_TIMEOUT_MS, EXEC_MIN_BYTES, GRACE_DEFAULT_MS,
    GRACE_MAX_MS, IDLE_MAX_MS, KEY_NAME_MAX_CHARS, MAX_CURSOR, MAX_KEYS, READ_MAX_BYTES,
    READ_MAX_WAIT_MS, READ_MIN_BYTES, RUN_DEFAULT_BYTES, RUN_MAX_BYTES, RUN_MIN_BYTES,
    SCREEN_MAX_SCROLLBACK, SECRET_NAME_MAX_CHARS, TAIL_MAX_LINES, TERMINAL_MAX_SIZE,
    WAIT_DEFAULT_MS, WAIT_PATTERN_MAX_CHARS,
};

pub struct ToolSpec {
    pub name: &'static str,
    pub params: Vec<Param>,
    tool: Tool,
}

impl ToolSpec {
    pub fn tool(&self) -> Tool {
        self.tool.clone()
    }
}

#[derive(Clone, Copy)]
enum Effect {
    /// Looks, changes nothing: readOnly + idempotent.
    Read,
    /// Ends something; calling again changes nothing more: destructive + idempotent.
    End,
    /// Runs a program, or feeds or signals one: destructive, since what runs is whatever
    /// the profile (a shell: whatever is typed) does, not idempotent.
    Run,
    /// Changes something in place, adding nothing that was not asked for: neither.
    Adjust,
}

fn spec(
    name: &'static str,
    description: String,
    params: Vec<Param>,
    output: Map<String, Value>,
    effect: Effect,
) -> ToolSpec {
    // Each hint is given where it means something: destructive only for a tool that is not
    // read-only, idempotent only when true (false is its default).
    let annotations = match effect {
        Effect::Read => ToolAnnotations::new().read_only(true).idempotent(true),
        Effect::End => ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .idempotent(true),
        Effect::Run => ToolAnnotations::new().read_only(false).destructive(true),
        Effect::Adjust => ToolAnnotations::new().read_only(false).destructive(false),
    }
    .open_world(false);
    let tool = Tool::new(name, description, input_schema(&params))
        .with_raw_output_schema(output.into())
        .with_annotations(annotations);
    ToolSpec { name, params, tool }
}

fn cursor(description: &str) -> Param {
    Param::new(
        "cursor",
        Kind::Int {
            min: 0,
            max: MAX_CURSOR,
            default: 0,
        },
        description,
    )
}

fn session_id() -> Param {
    Param::new("session_id", Kind::SessionId, "").required()
}

/// What starting a session takes (`terminal_start`, `terminal_run`).
fn start_params(timeout_max: u64, timeout_default: u64, timeout: &str) -> Vec<Param> {
    vec![
        Param::new(
            "command_id",
            Kind::Str {
                min: 1,
                max: COMMAND_ID_MAX_CHARS,
            },
            "An approved command (terminal_start lists them).",
        )
        .required(),
        Param::new(
            "cwd",
            Kind::Str {
                min: 1,
                max: CWD_MAX_CHARS,
            },
            "Working directory, absolute or relative to the owner's default_cwd (the \
             default); inside the allowed roots.",
        ),
        Param::new(
            "env",
            Kind::StrMap,
            "Extra environment variables (at most 32) the profile's allowed_env names.",
        ),
        Param::new(
            "timeout_ms",
            Kind::Int {
                min: 100,
                max: timeout_max,
                default: timeout_default,
            },
            timeout,
        ),
    ]
}

/// `terminal_run`: one-shot.
fn run_spec(config: &Config) -> ToolSpec {
    let limits = &config.limits;
    // What terminal_start's parameters say is said there (the bounds are in the schema).
    let mut params = start_params(
        limits.max_wait_ms,
        limits.default_timeout_ms.min(limits.max_wait_ms),
        AS_START,
    );
    for param in &mut params {
        param.description = AS_START.into();
    }
    params.push(Param::new(
        "stdin",
        Kind::Text,
        format!(
            "Written to stdin before it is closed (at most {} bytes); default none.",
            limits.max_input_bytes
        ),
    ));
    params.push(max_bytes_param(
        RUN_MIN_BYTES,
        "Bytes returned per stream; longer output is its head and its last lines, and \
         omitted ({bytes, lines, start_cursor, end_cursor}) says what was left out \
         (terminal_read).",
    ));
    params.push(strip_ansi_param(
        "Remove terminal escape sequences from the text returned.",
    ));
    spec(
        "terminal_run",
        "Start an approved command, write stdin and close it, wait for its exit; returns \
         exit_code, signal, stdout, stderr and the final snapshot. For commands that need no \
         conversation; terminal_read reads it until its retention ends."
            .into(),
        params,
        envelope(json!({
            "exit_code": {"type": ["integer", "null"]},
            "signal": {"type": ["string", "null"]},
            "stdout": {"type": "string"},
            "stderr": {"type": "string"},
            "stdout_truncated": {"type": "boolean"},
            "stderr_truncated": {"type": "boolean"},
            "stdout_omitted": omitted_schema(),
            "stderr_omitted": omitted_schema(),
            "session": snapshot_ref(),
        })),
        Effect::Run,
    )
}

/// The description of a parameter `terminal_run` shares with `terminal_start`, or
/// `terminal_exec` with `terminal_run`, which describes it: tools/list says each thing once.
const AS_START: &str = "As terminal_start.";
const AS_RUN: &str = "As terminal_run.";

/// `max_bytes` of `terminal_run` and `terminal_exec`: the head and tail returned.
fn max_bytes_param(min: u64, description: &str) -> Param {
    Param::new(
        "max_bytes",
        Kind::Int {
            min,
            max: RUN_MAX_BYTES,
            default: RUN_DEFAULT_BYTES,
        },
        description,
    )
}

/// `strip_ansi` of `terminal_run` and `terminal_exec`.
fn strip_ansi_param(description: &str) -> Param {
    Param::new("strip_ansi", Kind::Bool, description)
}

fn omitted_schema() -> Value {
    json!({"type": ["object", "null"]})
}

/// `terminal_exec`, offered only when some profile is a POSIX shell.
fn exec_spec(config: &Config) -> Option<ToolSpec> {
    let shells: Vec<&str> = config
        .commands
        .iter()
        .filter(|(_, p)| p.shell.is_some())
        .map(|(id, _)| id.as_str())
        .collect();
    if shells.is_empty() {
        return None;
    }
    let limits = &config.limits;
    Some(spec(
        "terminal_exec",
        format!(
            "Run a command line in a persistent shell session (profiles: {}); returns exactly \
             what it printed and its exit code. cwd, variables and functions persist. On pipes \
             stderr is apart and stdin is /dev/null; on a terminal stderr is in output, as \
             the terminal left it. outcome: completed; awaiting_input (on a terminal it \
             waits for input) or timeout (interrupted; a program that keeps the terminal \
             gives still_running, foreground and screen): answer with \
             terminal_keys/terminal_write, then continue; running (on_timeout keep: collect \
             with continue); exited (the shell ended). A timeout never ends the shell. One \
             command at a time (SESSION_BUSY).",
            shells.join(", ")
        ),
        vec![
            session_id(),
            Param::new(
                "command",
                Kind::Text,
                format!(
                    "The command line as you would type it (at most {} bytes, no NUL). \
                     Omit it with continue.",
                    limits.max_input_bytes
                ),
            ),
            Param::new(
                "continue",
                Kind::Bool,
                "Collect the running command: all it printed since it started.",
            ),
            Param::new(
                "timeout_ms",
                Kind::Int {
                    min: 100,
                    max: limits.max_wait_ms,
                    default: EXEC_DEFAULT_TIMEOUT_MS.min(limits.max_wait_ms),
                },
                "This call's wait.",
            ),
            Param::new(
                "on_timeout",
                Kind::OneOf(&["interrupt", "keep"]),
                "Interrupt (Ctrl-C) or keep running; with continue, keep.",
            ),
            max_bytes_param(EXEC_MIN_BYTES, AS_RUN),
            strip_ansi_param(AS_RUN),
            Param::new(
                "raw",
                Kind::Bool,
                "On a terminal: output as written, not as the terminal left it.",
            ),
        ],
        envelope(json!({
            "outcome": {"type": "string", "enum": ["completed", "timeout", "running", "exited", "awaiting_input"]},
            "output": {"type": "string"},
            "stderr": {"type": ["string", "null"]},
            "omitted": omitted_schema(),
            "stderr_omitted": omitted_schema(),
            "truncated": {"type": "boolean"},
            "exit_code": {"type": ["integer", "null"]},
            "still_running": {"type": "boolean"},
            "foreground": {"type": ["object", "null"]},
            "screen": {"type": ["array", "null"], "items": {"type": "string"}},
            "start_cursor": {"type": "integer"},
            "end_cursor": {"type": "integer"},
            "session": snapshot_ref(),
        })),
        Effect::Run,
    ))
}

pub fn catalog(config: &Config) -> Vec<ToolSpec> {
    let mut tools = base_catalog(config);
    tools.push(run_spec(config));
    tools.extend(exec_spec(config));
    tools
}

fn base_catalog(config: &Config) -> Vec<ToolSpec> {
    let limits = &config.limits;
    let profiles: Vec<String> = config
        .commands
        .iter()
        .map(|(id, p)| match &p.description {
            Some(d) => format!("- `{id}`: {d}"),
            None => format!("- `{id}`"),
        })
        .collect();
    vec![
        spec(
            "terminal_start",
            format!(
                "Start an approved command (the owner's config fixes program and arguments) as \
                 a new session in its own process group; returns its snapshot at once. Then \
                 terminal_read, terminal_write, terminal_terminate.\nApproved commands:\n{}",
                profiles.join("\n")
            ),
            start_params(
                limits.max_timeout_ms,
                limits.default_timeout_ms,
                "Then it is terminated (reason timeout).",
            ),
            envelope(started_properties()),
            Effect::Run,
        ),
        spec(
            "terminal_read",
            "Read a session's output from an absolute cursor without consuming it (the same \
             cursor gives the same records while retained). Records are runs of code points \
             tagged stdout or stderr; cursors count code points. Continue at next_cursor while \
             has_more or the session runs; output_complete: all the process wrote is here. \
             On CURSOR_EXPIRED resume at error.base_cursor (older output was evicted)."
                .into(),
            vec![
                session_id(),
                cursor("0 = the start of the output."),
                Param::new(
                    "tail_lines",
                    Kind::OptInt {
                        min: 1,
                        max: TAIL_MAX_LINES,
                    },
                    "Instead of cursor: from the N-th last retained line (counted after \
                     strip_ansi).",
                ),
                Param::new(
                    "max_bytes",
                    Kind::Int {
                        min: READ_MIN_BYTES,
                        max: READ_MAX_BYTES,
                        default: READ_MAX_BYTES,
                    },
                    "Most UTF-8 bytes of text to return (at least one code point when \
                     available).",
                ),
                Param::new(
                    "wait_ms",
                    Kind::Int {
                        min: 0,
                        max: READ_MAX_WAIT_MS,
                        default: 0,
                    },
                    "If nothing is at the cursor yet, wait this long for output or exit.",
                ),
                Param::new(
                    "strip_ansi",
                    Kind::Bool,
                    "Remove terminal escape sequences (cursors still count raw code \
                     points).",
                ),
            ],
            envelope(read_properties()),
            Effect::Read,
        ),
        spec(
            "terminal_write",
            format!(
                "Write text to a session's stdin as given (no newline added) once the pipe \
                 takes it; accepted_bytes counts what the pipe took. Then terminal_read or \
                 terminal_wait. Input not taken within 1 s closes stdin with \
                 INPUT_BACKPRESSURE: do not blindly retry. For a password prompt \
                 (input_hidden), use secret{}.",
                secret_names(config)
            ),
            vec![
                session_id(),
                Param::new(
                    "text",
                    Kind::Text,
                    format!(
                        "Exact UTF-8 text (at most {} bytes); may be empty (e.g. with \
                         close_stdin). This or secret.",
                        limits.max_input_bytes
                    ),
                ),
                Param::new(
                    "secret",
                    Kind::Str {
                        min: 1,
                        max: SECRET_NAME_MAX_CHARS,
                    },
                    "Instead of text: the name of an owner-held secret the profile allows, \
                     typed followed by Enter; you never see it (the output shows \
                     [secret:NAME]).",
                ),
                Param::new(
                    "close_stdin",
                    Kind::Bool,
                    "Close stdin after writing (EOF).",
                ),
            ],
            envelope(input_result()),
            Effect::Run,
        ),
        spec(
            "terminal_status",
            "A session's snapshot (status, exit, cursors, output completeness), without \
             reading output."
                .into(),
            vec![session_id()],
            envelope(snapshot_properties()),
            Effect::Read,
        ),
        spec(
            "terminal_terminate",
            format!(
                "End a session: SIGTERM to its process group, grace_ms, then SIGKILL; returns \
                 the final snapshot (unchanged if it had ended). Output stays readable for {} s.",
                limits.retention_seconds
            ),
            vec![
                session_id(),
                Param::new(
                    "grace_ms",
                    Kind::Int {
                        min: 0,
                        max: GRACE_MAX_MS,
                        default: GRACE_DEFAULT_MS,
                    },
                    "Wait after SIGTERM.",
                ),
            ],
            envelope(ended_properties()),
            Effect::End,
        ),
        spec(
            "terminal_list",
            "Every retained session's snapshot, how many run, and the limits: to find \
             session ids again."
                .into(),
            vec![],
            envelope(json!({
                "sessions": {"type": "array", "items": snapshot_ref()},
                "running": {"type": "integer"},
                "retained": {"type": "integer"},
                "max_sessions": {"type": "integer"},
                "max_records": {"type": "integer"},
            })),
            Effect::Read,
        ),
        spec(
            "terminal_forget",
            "Drop an ended session and its output now, freeing its place under the \
             retained-session limit. A running one is refused (SESSION_RUNNING)."
                .into(),
            vec![session_id()],
            envelope(json!({"forgotten": {"type": "string"}})),
            Effect::End,
        ),
        spec(
            "terminal_wait",
            "Wait until pattern matches the output from cursor on (matched), the session \
             ends (exited), until_input or idle_ms holds, or timeout_ms passes: for a prompt \
             after terminal_write or a server's ready line. Continue from next_cursor (after \
             the match, or the end of output). `$` matches at the current end."
                .into(),
            vec![
                session_id(),
                cursor(""),
                Param::new(
                    "pattern",
                    Kind::Str {
                        min: 1,
                        max: WAIT_PATTERN_MAX_CHARS,
                    },
                    "A regex (Rust `regex` syntax). Omit to wait for the end (or input, or \
                     quiet).",
                ),
                Param::new("stream", Kind::OneOf(&["any", "stdout", "stderr"]), ""),
                Param::new(
                    "timeout_ms",
                    Kind::Int {
                        min: 0,
                        max: limits.max_wait_ms,
                        default: WAIT_DEFAULT_MS.min(limits.max_wait_ms),
                    },
                    "",
                ),
                Param::new(
                    "strip_ansi",
                    Kind::Bool,
                    "Search the text without terminal escape sequences.",
                ),
                Param::new(
                    "idle_ms",
                    Kind::Int {
                        min: 0,
                        max: IDLE_MAX_MS,
                        default: 0,
                    },
                    "0 = off; else (at least 10) outcome idle once output was quiet this \
                     long.",
                ),
                Param::new(
                    "until_input",
                    Kind::Bool,
                    "Outcome awaiting_input once the foreground program blocks reading its \
                     input with output quiet 20 ms (a prompt, REPL, pager or editor is ready). \
                     An error where this cannot be known.",
                ),
            ],
            envelope(json!({
                "outcome": {"type": "string", "enum": ["matched", "exited", "awaiting_input", "idle", "timeout"]},
                "match": {
                    "type": ["object", "null"],
                    "properties": {
                        "text": {"type": "string"},
                        "start_cursor": {"type": "integer"},
                        "end_cursor": {"type": "integer"},
                        "groups": {"type": "array", "items": {"type": ["string", "null"]}},
                    },
                },
                "next_cursor": {"type": "integer"},
                "session": snapshot_ref(),
            })),
            Effect::Read,
        ),
        spec(
            "terminal_signal",
            "Send a signal to a session's process group or its leader (SIGINT is Ctrl-C on \
             pipes), or a shell's running command; to end a session for sure use \
             terminal_terminate."
                .into(),
            vec![
                session_id(),
                Param::new("signal", Kind::OneOf(SIGNALS), "").required(),
                Param::new("target", Kind::OneOf(&["group", "leader", "command"]), ""),
            ],
            envelope(ended_properties()),
            Effect::Run,
        ),
        spec(
            "terminal_keys",
            format!(
                "Send named keys as an xterm sends them: {KEY_NAMES}. On a PTY, C-c \
                 interrupts and C-d is EOF at a line's start. Then terminal_screen or \
                 terminal_read."
            ),
            vec![
                session_id(),
                Param::new(
                    "keys",
                    Kind::StrList {
                        min: 1,
                        max: MAX_KEYS,
                        max_chars: KEY_NAME_MAX_CHARS,
                    },
                    "Key names, sent in order.",
                )
                .required(),
            ],
            envelope(input_result()),
            Effect::Run,
        ),
        spec(
            "terminal_resize",
            "Set a PTY session's window size (the program gets SIGWINCH); NOT_A_PTY on \
             pipes. Then terminal_screen."
                .into(),
            vec![
                session_id(),
                Param::new(
                    "rows",
                    Kind::Int {
                        min: 1,
                        max: u64::from(TERMINAL_MAX_SIZE),
                        default: 24,
                    },
                    "",
                )
                .required(),
                Param::new(
                    "cols",
                    Kind::Int {
                        min: 1,
                        max: u64::from(TERMINAL_MAX_SIZE),
                        default: 80,
                    },
                    "",
                )
                .required(),
            ],
            envelope(json!({
                "rows": {"type": "integer"},
                "cols": {"type": "integer"},
            })),
            Effect::Adjust,
        ),
        spec(
            "terminal_screen",
            "A PTY session's screen as rendered now (lines, size, cursor, alternate screen, \
             title, optional scrollback), even after its output was evicted: for \
             full-screen programs. NOT_A_PTY on pipes."
                .into(),
            vec![
                session_id(),
                Param::new(
                    "scrollback",
                    Kind::Int {
                        min: 0,
                        max: SCREEN_MAX_SCROLLBACK,
                        default: 0,
                    },
                    "Lines from above the screen, most recent last.",
                ),
            ],
            envelope(json!({
                "lines": {"type": "array", "items": {"type": "string"}},
                "rows": {"type": "integer"},
                "cols": {"type": "integer"},
                "cursor": {
                    "type": "object",
                    "properties": {"row": {"type": "integer"}, "col": {"type": "integer"}},
                },
                "alternate_screen": {"type": "boolean"},
                "title": {"type": "string"},
                "scrollback": {"type": "array", "items": {"type": "string"}},
            })),
            Effect::Read,
        ),
    ]
}

/// The secrets some profile allows, as the write tool's description names them.
fn secret_names(config: &Config) -> String {
    let names: Vec<String> = config
        .commands
        .iter()
        .filter(|(_, p)| !p.allowed_secrets.is_empty())
        .map(|(id, p)| format!("{id}: {}", p.allowed_secrets.join(", ")))
        .collect();
    if names.is_empty() {
        String::new()
    } else {
        format!(" (allowed secrets by profile: {})", names.join("; "))
    }
}

/// Signals a client may send.
pub const SIGNALS: &[&str] = &[
    "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGKILL", "SIGUSR1", "SIGUSR2", "SIGCONT",
    "SIGSTOP", "SIGTSTP", "SIGWINCH",
];

/// Success fields plus the error object: every result, ok or not, fits this schema. Built
/// by moving values into maps: `json!` copies every value it is given through serde, which
/// made building the catalog a third of a millisecond on the way to the first answer.
fn envelope(success: Value) -> Map<String, Value> {
    let mut properties = match success {
        Value::Object(properties) => properties,
        _ => Map::new(),
    };
    properties.insert("ok".into(), json!({"type": "boolean"}));
    properties.insert(
        "error".into(),
        // Both strings; the codes an agent acts on are named in the descriptions.
        json!({"type": "object", "required": ["code", "message"]}),
    );
    let mut schema = Map::new();
    schema.insert("type".into(), "object".into());
    schema.insert("properties".into(), Value::Object(properties));
    schema.insert("required".into(), json!(["ok"]));
    schema
}

/// What writing input returns (terminal_write, terminal_keys).
fn input_result() -> Value {
    json!({
        "accepted_bytes": {"type": "integer"},
        "stdin_closed": {"type": "boolean"},
    })
}

/// A session's snapshot inside another result: its fields are stated once, in
/// terminal_status's (and terminal_start's) output schema.
fn snapshot_ref() -> Value {
    json!({"type": "object", "description": "As terminal_status."})
}

/// What terminal_start returns: the snapshot (as terminal_status), of which these fields
/// are what the next calls use.
fn started_properties() -> Value {
    json!({
        "session_id": {"type": "string"},
        "mode": {"type": "string", "enum": ["pipe", "pty"]},
        "status": {"type": "string"},
        "next_cursor": {"type": "integer"},
    })
}

/// What terminal_terminate and terminal_signal return: the snapshot (as terminal_status),
/// of which these fields say how the session ended.
fn ended_properties() -> Value {
    json!({
        "session_id": {"type": "string"},
        "status": {"type": "string"},
        "exit_code": {"type": ["integer", "null"]},
        "exit_signal": {"type": ["string", "null"]},
        "termination_reason": {"type": ["string", "null"]},
    })
}

fn snapshot_properties() -> Value {
    json!({
        "session_id": {"type": "string"},
        "command_id": {"type": "string"},
        "mode": {"type": "string", "enum": ["pipe", "pty"]},
        "process_id": {"type": "integer"},
        "status": {"type": "string", "enum": ["RUNNING", "TERMINATING", "EXITED", "TERMINATED", "FAILED"]},
        "exit_code": {"type": ["integer", "null"]},
        "exit_signal": {"type": ["string", "null"]},
        "termination_reason": {"type": ["string", "null"], "enum": ["natural", "user", "timeout", "shutdown", null]},
        "stdin_closed": {"type": "boolean"},
        "input_uncertain": {"type": "boolean"},
        "base_cursor": {"type": "integer"},
        "next_cursor": {"type": "integer"},
        "created_at": {"type": "string", "format": "date-time"},
        "last_activity_at": {"type": "string", "format": "date-time"},
        "output_complete": {"type": "boolean"},
        "output_incomplete": {"type": "boolean"},
        "paused": {"type": "boolean"},
        "input_hidden": {"type": "boolean"},
        "recording": {"type": ["string", "null"]},
        "awaiting_input": {"type": ["boolean", "null"]},
        "foreground": {"type": ["object", "null"], "properties": {"pid": {"type": "integer"}, "name": {"type": ["string", "null"]}}},
        "owner_input_at": {"type": ["string", "null"], "format": "date-time"},
    })
}

fn read_properties() -> Value {
    json!({
        "records": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "cursor": {"type": "integer"},
                    "stream": {"type": "string", "enum": ["stdout", "stderr"]},
                    "text": {"type": "string"},
                },
                "required": ["cursor", "stream", "text"],
            },
        },
        "base_cursor": {"type": "integer"},
        "next_cursor": {"type": "integer"},
        "truncated": {"type": "boolean"},
        "has_more": {"type": "boolean"},
        "status": {"type": "string"},
        "output_complete": {"type": "boolean"},
        "output_incomplete": {"type": "boolean"},
    })
}
