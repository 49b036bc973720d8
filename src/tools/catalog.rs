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
    /// Creates or feeds something: neither.
    Act,
}

fn spec(
    name: &'static str,
    description: String,
    params: Vec<Param>,
    output: Map<String, Value>,
    effect: Effect,
) -> ToolSpec {
    let (read_only, destructive, idempotent) = match effect {
        Effect::Read => (true, false, true),
        Effect::End => (false, true, true),
        Effect::Act => (false, false, false),
    };
    let annotations = ToolAnnotations::new()
        .read_only(read_only)
        .destructive(destructive)
        .idempotent(idempotent)
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
    Param::new(
        "session_id",
        Kind::SessionId,
        "The session_id terminal_start returned.",
    )
    .required()
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
            "Id of an approved command profile.",
        )
        .required(),
        Param::new(
            "cwd",
            Kind::Str {
                min: 1,
                max: CWD_MAX_CHARS,
            },
            "Working directory: absolute, or relative to the default; must be inside the \
             owner's allowed roots. Default: the owner's default_cwd.",
        ),
        Param::new(
            "env",
            Kind::StrMap,
            "Extra environment variables (at most 32), each named in the profile's allowed_env.",
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
    let mut params = start_params(
        limits.max_wait_ms,
        limits.default_timeout_ms.min(limits.max_wait_ms),
        "The run is terminated (reason `timeout`) after this long.",
    );
    params.push(Param::new(
        "stdin",
        Kind::Text,
        format!(
            "Text written to the program's stdin before it is closed (at most {} bytes); \
             default none, stdin is closed at once.",
            limits.max_input_bytes
        ),
    ));
    params.push(max_bytes_param(RUN_MIN_BYTES));
    params.push(strip_ansi_param());
    spec(
        "terminal_run",
        format!(
            "Run an approved command to its end in one call: start it, write stdin and close \
             it, wait until it exits (at most timeout_ms, itself at most {} ms; then it is \
             terminated with reason timeout) and return exit_code, signal, stdout and \
             stderr with the final snapshot as session. Use it for commands that need no \
             conversation; the session stays readable with terminal_read until its \
             retention ends.",
            limits.max_wait_ms
        ),
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
            "session": {"type": "object", "properties": snapshot_properties()},
        })),
        Effect::Act,
    )
}

/// `max_bytes` of `terminal_run` and `terminal_exec`: the head and tail returned.
fn max_bytes_param(min: u64) -> Param {
    Param::new(
        "max_bytes",
        Kind::Int {
            min,
            max: RUN_MAX_BYTES,
            default: RUN_DEFAULT_BYTES,
        },
        "Bytes of output returned per stream. Longer output is its first quarter and its \
         last lines, cut at line ends and joined by one line naming what was left out; \
         `omitted` says how much and the cursor range that holds it (terminal_read).",
    )
}

fn strip_ansi_param() -> Param {
    Param::new(
        "strip_ansi",
        Kind::Bool,
        "Remove terminal escape sequences from the text returned.",
    )
}

fn omitted_schema() -> Value {
    json!({
        "type": ["object", "null"],
        "properties": {
            "bytes": {"type": "integer", "minimum": 0},
            "lines": {"type": "integer", "minimum": 0},
            "start_cursor": {"type": "integer", "minimum": 0},
            "end_cursor": {"type": "integer", "minimum": 0},
        },
    })
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
            "Run one command line in a persistent shell session (shell profiles: {}) and \
             return exactly what it printed and its real exit code: no markers, echo or \
             prompts. cwd, variables, functions and aliases persist between calls; any \
             shell syntax works. On pipes stderr comes apart and the command's stdin is \
             /dev/null; on a terminal stderr is part of output, which by default is the \
             text as the terminal left it. outcome: completed; timeout (the command was \
             interrupted; if a program keeps the terminal, still_running with foreground \
             and screen: answer it with terminal_keys/terminal_write); running (on_timeout \
             keep: it runs on); exited (the shell ended). Collect a running command with \
             continue: true, across as many calls as it takes. A timeout never ends the \
             shell. One command at a time per session (SESSION_BUSY).",
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
                "Wait for the command still running (kept, or still running after a \
                 timeout) and return its result: all it printed since it started.",
            ),
            Param::new(
                "timeout_ms",
                Kind::Int {
                    min: 100,
                    max: limits.max_wait_ms,
                    default: EXEC_DEFAULT_TIMEOUT_MS.min(limits.max_wait_ms),
                },
                "How long this call waits for the command.",
            ),
            Param::new(
                "on_timeout",
                Kind::OneOf(&["interrupt", "keep"]),
                "At the timeout: interrupt the command (Ctrl-C), or keep it running. \
                 Default interrupt; with continue, keep.",
            ),
            max_bytes_param(EXEC_MIN_BYTES),
            strip_ansi_param(),
            Param::new(
                "raw",
                Kind::Bool,
                "On a terminal: return the output as written (carriage returns and escape \
                 sequences included) rather than as the terminal left it.",
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
            "foreground": {"type": ["object", "null"], "properties": {"pid": {"type": "integer"}, "name": {"type": ["string", "null"]}}},
        "owner_input_at": {"type": ["string", "null"], "format": "date-time"},
            "screen": {"type": ["array", "null"], "items": {"type": "string"}},
            "start_cursor": {"type": "integer", "minimum": 0},
            "end_cursor": {"type": "integer", "minimum": 0},
            "session": {"type": "object", "properties": snapshot_properties()},
        })),
        Effect::Act,
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
                "Start an owner-approved command as a new session (its own process group) and \
                 return its snapshot at once. You name a command_id; the owner's config fixes \
                 the program and its arguments. Then read its output with terminal_read, \
                 feed it with terminal_write, and end it with terminal_terminate.\n\
                 Approved commands:\n{}",
                profiles.join("\n")
            ),
            start_params(
                limits.max_timeout_ms,
                limits.default_timeout_ms,
                "The session is terminated (reason `timeout`) after this long.",
            ),
            envelope(snapshot_properties()),
            Effect::Act,
        ),
        spec(
            "terminal_read",
            "Read a session's output from an absolute cursor without consuming it: the same \
             cursor always returns the same records while they are retained. Records are \
             runs of code points tagged stdout or stderr; cursors count code points. Continue \
             at next_cursor while has_more is true or the session runs; with wait_ms the \
             call waits for new output or exit. output_complete means everything the process \
             wrote is here. On CURSOR_EXPIRED, resume at error.base_cursor (older output was \
             evicted). To see the last lines without cursor arithmetic, pass tail_lines \
             instead of cursor."
                .into(),
            vec![
                session_id(),
                cursor("Absolute cursor to read from (0 = the start of the output)."),
                Param::new(
                    "tail_lines",
                    Kind::OptInt {
                        min: 1,
                        max: TAIL_MAX_LINES,
                    },
                    "Instead of cursor: read the last N lines of the retained output (the \
                     page starts where the N-th last line begins, or at base_cursor if fewer \
                     are retained). Still bounded by max_bytes: continue at next_cursor \
                     while has_more. With strip_ansi, lines are counted in the stripped text.",
                ),
                Param::new(
                    "max_bytes",
                    Kind::Int {
                        min: READ_MIN_BYTES,
                        max: READ_MAX_BYTES,
                        default: READ_MAX_BYTES,
                    },
                    "Most UTF-8 bytes of text to return; at least one code point is always \
                     returned when available.",
                ),
                Param::new(
                    "wait_ms",
                    Kind::Int {
                        min: 0,
                        max: READ_MAX_WAIT_MS,
                        default: 0,
                    },
                    "If nothing is available at the cursor yet, wait this long for output, \
                     exit or completion.",
                ),
                Param::new(
                    "strip_ansi",
                    Kind::Bool,
                    "Remove terminal escape sequences from the returned text (cursors still \
                     count raw code points).",
                ),
            ],
            envelope(read_properties()),
            Effect::Read,
        ),
        spec(
            "terminal_write",
            format!(
                "Write text to a session's stdin exactly as given (no newline is added: end \
                 lines with \\n) and wait until the pipe accepted it; accepted_bytes counts \
                 bytes the pipe took, not bytes the program read. close_stdin sends EOF after \
                 the text. At most {} bytes per call. Then read the reply with terminal_read \
                 (wait_ms helps). If the program does not take input within 1 s, stdin is \
                 closed and INPUT_BACKPRESSURE is returned: do not blindly retry. To answer a \
                 password prompt (the snapshot's input_hidden is true), pass secret with a \
                 name the owner allows instead of text{}.",
                limits.max_input_bytes,
                secret_names(config)
            ),
            vec![
                session_id(),
                Param::new(
                    "text",
                    Kind::Text,
                    "Exact UTF-8 text to write; may be empty (e.g. with close_stdin). Give \
                     this or secret.",
                ),
                Param::new(
                    "secret",
                    Kind::Str {
                        min: 1,
                        max: SECRET_NAME_MAX_CHARS,
                    },
                    "Instead of text: the name of an owner-held secret (a password) the \
                     profile allows. Its value is typed followed by Enter; you never see it, \
                     and it is shown as [secret:NAME] in the output.",
                ),
                Param::new(
                    "close_stdin",
                    Kind::Bool,
                    "Close stdin after writing (EOF).",
                ),
            ],
            envelope(input_result()),
            Effect::Act,
        ),
        spec(
            "terminal_status",
            "A session's snapshot: status, exit code or signal, termination reason, cursors \
             and output completeness. Use it to check on a session without reading output."
                .into(),
            vec![session_id()],
            envelope(snapshot_properties()),
            Effect::Read,
        ),
        spec(
            "terminal_terminate",
            format!(
                "End a session: SIGTERM to its whole process group, wait grace_ms, then \
                 SIGKILL, and return the final snapshot. Idempotent: a session that already \
                 ended is returned unchanged. Its output stays readable for {} s.",
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
                    "How long to wait after SIGTERM before SIGKILL.",
                ),
            ],
            envelope(snapshot_properties()),
            Effect::End,
        ),
        spec(
            "terminal_list",
            "Every retained session (running, or ended within retention) with its snapshot, \
             plus how many run and the limits. Use it to find session ids again."
                .into(),
            vec![],
            envelope(json!({
                "sessions": {"type": "array", "items": {"type": "object", "properties": snapshot_properties()}},
                "running": {"type": "integer"},
                "retained": {"type": "integer"},
                "max_sessions": {"type": "integer"},
                "max_records": {"type": "integer"},
            })),
            Effect::Read,
        ),
        spec(
            "terminal_forget",
            "Drop an ended session's record and output now, freeing its place under the \
             retained-session limit without waiting for its retention period. A running \
             session is refused (SESSION_RUNNING): terminate it first."
                .into(),
            vec![session_id()],
            envelope(json!({"forgotten": {"type": "string"}})),
            Effect::End,
        ),
        spec(
            "terminal_wait",
            format!(
                "Wait until a regex pattern matches a session's output at or after cursor, or \
                 the session ends, or (with until_input) its program waits for input, or \
                 (with idle_ms) no output has arrived for idle_ms, or timeout_ms passes; \
                 outcome is matched, exited, awaiting_input, idle or timeout. Without a \
                 pattern, wait for the session to end (or for input, or quiet). Use \
                 until_input after terminal_write to know when a prompt, a REPL, a pager or \
                 an editor is ready for the next input, then look with terminal_screen or \
                 terminal_read. The match gives \
                 its text, groups and cursors; continue from next_cursor (just after the \
                 match, or the end of output). Output is searched once as it arrives, and as \
                 if it ended where it ends now (so `$` matches at the current end). Use it to \
                 wait for a prompt after terminal_write, or for a server's ready line. At \
                 most {} ms.",
                limits.max_wait_ms
            ),
            vec![
                session_id(),
                cursor("Search output from this cursor on."),
                Param::new(
                    "pattern",
                    Kind::Str {
                        min: 1,
                        max: WAIT_PATTERN_MAX_CHARS,
                    },
                    "A regex (Rust `regex` syntax). Omit to wait for the session to end.",
                ),
                Param::new(
                    "stream",
                    Kind::OneOf(&["any", "stdout", "stderr"]),
                    "Which output to search.",
                ),
                Param::new(
                    "timeout_ms",
                    Kind::Int {
                        min: 0,
                        max: limits.max_wait_ms,
                        default: WAIT_DEFAULT_MS.min(limits.max_wait_ms),
                    },
                    "How long to wait at most.",
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
                    "0 = off; else 10 to 60000: answer with outcome idle once no output has \
                     arrived for this long (counted from the later of this call and the last \
                     output).",
                ),
                Param::new(
                    "until_input",
                    Kind::Bool,
                    "Answer with outcome awaiting_input as soon as the session's foreground \
                     program is blocked reading its terminal (or stdin pipe) and output has \
                     been quiet for 20 ms. An error where this cannot be known.",
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
                "session": {"type": "object", "properties": snapshot_properties()},
            })),
            Effect::Read,
        ),
        spec(
            "terminal_signal",
            "Send a signal to a session's whole process group (default) or to its leader \
             only. SIGINT is Ctrl-C for pipe sessions. The lifecycle follows from what the \
             process does; to end a session for sure use terminal_terminate."
                .into(),
            vec![
                session_id(),
                Param::new("signal", Kind::OneOf(SIGNALS), "The signal to send.").required(),
                Param::new(
                    "target",
                    Kind::OneOf(&["group", "leader"]),
                    "The whole process group, or only the process that was started.",
                ),
            ],
            envelope(snapshot_properties()),
            Effect::Act,
        ),
        spec(
            "terminal_keys",
            format!(
                "Send named keys to a session's input as the byte sequences an xterm sends: \
                 {KEY_NAMES}. On a PTY, C-c interrupts the foreground job and C-d is EOF at \
                 the start of a line. Then read the effect with terminal_screen or \
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
            Effect::Act,
        ),
        spec(
            "terminal_resize",
            "Set a PTY session's window size; the program receives SIGWINCH and usually \
             redraws. NOT_A_PTY for pipe sessions. Check the result with terminal_screen."
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
                    "Rows.",
                )
                .required(),
                Param::new(
                    "cols",
                    Kind::Int {
                        min: 1,
                        max: u64::from(TERMINAL_MAX_SIZE),
                        default: 80,
                    },
                    "Columns.",
                )
                .required(),
            ],
            envelope(json!({
                "rows": {"type": "integer"},
                "cols": {"type": "integer"},
            })),
            Effect::Act,
        ),
        spec(
            "terminal_screen",
            "A PTY session's screen as a terminal emulator renders it now: its lines, size, \
             cursor, whether the alternate screen is on, the window title, and optionally \
             lines that scrolled off the top. Always current, even after old output was \
             evicted from the buffer. Use it for full-screen programs; NOT_A_PTY for pipe \
             sessions."
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
                    "Lines from above the screen to include, most recent last.",
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
        json!({
            "type": "object",
            "description": "Present when ok is false.",
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
            },
            "required": ["code", "message"],
        }),
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
        "accepted_bytes": {"type": "integer", "minimum": 0},
        "stdin_closed": {"type": "boolean"},
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
        "base_cursor": {"type": "integer", "minimum": 0},
        "next_cursor": {"type": "integer", "minimum": 0},
        "created_at": {"type": "string", "format": "date-time"},
        "last_activity_at": {"type": "string", "format": "date-time"},
        "output_complete": {"type": "boolean"},
        "output_incomplete": {"type": "boolean"},
        "paused": {"type": "boolean"},
        "input_hidden": {"type": "boolean"},
        "recording": {"type": ["string", "null"]},
        "awaiting_input": {"type": ["boolean", "null"]},
        "foreground": {"type": ["object", "null"], "properties": {"pid": {"type": "integer"}, "name": {"type": ["string", "null"]}}},
    })
}

fn read_properties() -> Value {
    json!({
        "records": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "cursor": {"type": "integer", "minimum": 0},
                    "stream": {"type": "string", "enum": ["stdout", "stderr"]},
                    "text": {"type": "string"},
                },
                "required": ["cursor", "stream", "text"],
            },
        },
        "base_cursor": {"type": "integer", "minimum": 0},
        "next_cursor": {"type": "integer", "minimum": 0},
        "truncated": {"type": "boolean"},
        "has_more": {"type": "boolean"},
        "status": {"type": "string"},
        "output_complete": {"type": "boolean"},
        "output_incomplete": {"type": "boolean"},
    })
}
