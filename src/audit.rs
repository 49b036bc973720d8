//! The audit log (SPEC §9): one JSON line per tool call, appended to an owner-chosen file.
//!
//! Each line holds the time, who acted (`by`: `agent`, or `owner` for what the machine's
//! owner did from the live view), tool, session id, command id, outcome (`ok`, the error
//! code, or `cancelled` for a call the client cancelled before its answer) and duration;
//! `terminal_exec` command lines in full; written text only as a byte count, and a secret
//! only by its name, since either may hold what must not be logged.
//! The file is opened once with `O_APPEND` (mode 0600, never through a symlink, see
//! `private_file`) and each line goes out in one unbuffered write, so lines never
//! interleave and nothing waits in a buffer. The writes are made by a thread of the log's
//! own, never by the async thread: a slow or hung disk holds up no other call. A call's
//! answer waits for its line (up to `AUDIT_WAIT`), so a line is in the file once its call
//! is answered; when the disk is that slow the wait is given up, and calls are answered
//! without waiting until the writer has caught up. A failing write (disk full) is reported
//! once on stderr; the call is answered regardless.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};
use tokio::sync::oneshot;

use crate::private_file;

/// How long a call's answer waits for its audit line to be written.
const AUDIT_WAIT: Duration = Duration::from_secs(1);
/// Lines waiting for the writer, at most; past it (a disk hung for a long time) lines are
/// dropped, and that is reported once.
const MAX_BACKLOG: usize = 100_000;

pub struct AuditLog {
    path: PathBuf,
    lines: mpsc::Sender<Pending>,
    shared: Arc<Shared>,
}

/// A line for the writer, and whom to tell once it is written.
struct Pending {
    text: String,
    written: oneshot::Sender<()>,
}

/// What the callers and the writer thread both see.
struct Shared {
    /// Lines sent and not yet written.
    backlog: AtomicUsize,
    /// A wait for a line timed out, and the writer has not caught up since.
    stalled: AtomicBool,
    /// A failure (a write, or lines dropped) was reported.
    failed: AtomicBool,
}

impl Shared {
    fn report(&self, path: &Path, what: &str) {
        if !self.failed.swap(true, Ordering::SeqCst) {
            tracing::error!(
                "audit log `{}`: {what}; calls are still answered, and further failures are \
                 not reported",
                path.display()
            );
        }
    }
}

/// A line on its way to the file.
#[must_use = "a call's answer waits for its audit line"]
pub struct Written(Option<oneshot::Receiver<()>>);

impl Written {
    /// Wait until the line is written (or could not be), `AUDIT_WAIT` at most.
    pub async fn settled(self, log: &AuditLog) {
        let Some(written) = self.0 else {
            return;
        };
        if tokio::time::timeout(AUDIT_WAIT, written).await.is_err() {
            log.shared.stalled.store(true, Ordering::SeqCst);
        }
    }
}

/// The writer thread: each line in one write, in the order sent, until the log is dropped.
fn write_lines(path: PathBuf, mut file: File, lines: mpsc::Receiver<Pending>, shared: Arc<Shared>) {
    for pending in lines {
        if let Err(e) = file.write_all(pending.text.as_bytes()) {
            shared.report(&path, &format!("a line could not be written ({e})"));
        }
        let _ = pending.written.send(());
        if shared.backlog.fetch_sub(1, Ordering::SeqCst) == 1 {
            shared.stalled.store(false, Ordering::SeqCst);
        }
    }
}

/// Who acted: the agent through a tool call, or the machine's owner from the live view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    Agent,
    Owner,
}

/// One call as the audit log records it.
pub struct AuditLine {
    pub by: By,
    pub tool: String,
    pub session_id: Option<String>,
    pub command_id: Option<String>,
    /// `ok`, or the error code.
    pub outcome: String,
    pub duration: Duration,
    /// What the tool was asked to do, safe to log (a command line, a byte count, a name).
    pub details: Map<String, Value>,
    /// Fields a transport adds, such as the MCP session id and the client's address.
    pub extra: Map<String, Value>,
}

/// What `AuditLog::open` would say of `path`, checked without creating or changing it
/// (`check-config`).
pub fn check(path: &Path) -> Result<(), String> {
    private_file::check_append(path).map_err(|refusal| {
        format!(
            "`audit_log`: cannot open it for appending: {}",
            refusal.describe(path)
        )
    })
}

impl AuditLog {
    /// Open (or create, mode 0600) the log for appending: never through a symlink, only a
    /// regular file of the server's user, made private (0600) if group or others had any
    /// access. Failing is a config error.
    pub fn open(path: &Path) -> Result<AuditLog, String> {
        let file = private_file::open_append(path).map_err(|refusal| {
            format!(
                "`audit_log`: cannot open it for appending: {}",
                refusal.describe(path)
            )
        })?;
        let shared = Arc::new(Shared {
            backlog: AtomicUsize::new(0),
            stalled: AtomicBool::new(false),
            failed: AtomicBool::new(false),
        });
        let (lines, receiver) = mpsc::channel();
        let writer = {
            let (path, shared) = (path.to_path_buf(), Arc::clone(&shared));
            move || {
                // A log on a file system that does not answer sticks its writer.
                crate::process::leave_signals_to_main();
                write_lines(path, file, receiver, shared)
            }
        };
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(writer)
            .map_err(|e| format!("`audit_log`: cannot start its writer thread: {e}"))?;
        Ok(AuditLog {
            path: path.to_path_buf(),
            lines,
            shared,
        })
    }

    /// Hand one call's line to the writer; the answer to the call awaits what this returns.
    pub fn record(&self, line: AuditLine) -> Written {
        let mut fields = Map::new();
        fields.insert(
            "time".into(),
            humantime::format_rfc3339_millis(SystemTime::now())
                .to_string()
                .into(),
        );
        let by = match line.by {
            By::Agent => "agent",
            By::Owner => "owner",
        };
        fields.insert("by".into(), by.into());
        fields.insert("tool".into(), line.tool.into());
        fields.insert("session_id".into(), line.session_id.into());
        fields.insert("command_id".into(), line.command_id.into());
        fields.insert("outcome".into(), line.outcome.into());
        // Milliseconds to the microsecond.
        let micros = line.duration.as_micros() as f64;
        fields.insert("duration_ms".into(), (micros / 1000.0).into());
        fields.extend(line.details);
        fields.extend(line.extra);
        let mut text = escape_display_controls(Value::Object(fields).to_string());
        text.push('\n');
        if self.shared.backlog.fetch_add(1, Ordering::SeqCst) >= MAX_BACKLOG {
            self.shared.backlog.fetch_sub(1, Ordering::SeqCst);
            self.shared
                .report(&self.path, "the disk is so slow that lines were dropped");
            return Written(None);
        }
        let (written, receiver) = oneshot::channel();
        if self.lines.send(Pending { text, written }).is_err() {
            self.shared.backlog.fetch_sub(1, Ordering::SeqCst);
            return Written(None);
        }
        if self.shared.stalled.load(Ordering::SeqCst) {
            return Written(None);
        }
        Written(Some(receiver))
    }
}

/// Whether `c` changes how the text around it is shown without being shown itself: C1
/// controls, the line and paragraph separators (which some viewers break lines at), and
/// the bidirectional marks, embeddings, overrides and isolates (which reorder what follows:
/// a logged command could read as another in `less` or an editor).
fn moves_text(c: char) -> bool {
    matches!(c, '\u{80}'..='\u{9f}' | '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}'
        | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{061c}')
}

/// A line of JSON text with every character that `moves_text` written as its `\uXXXX`
/// escape: the same JSON value (such characters occur only inside strings).
fn escape_display_controls(text: String) -> String {
    use std::fmt::Write as _;
    if !text.chars().any(moves_text) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if moves_text(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_that_move_text_are_escaped_and_the_value_kept() {
        let value = serde_json::json!({"command": "echo \u{202e}txt.exe\u{2028}\u{85}x é 漢"});
        let text = escape_display_controls(value.to_string());
        assert!(!text.chars().any(moves_text), "{text}");
        assert!(text.contains("\\u202e") && text.contains("\\u2028") && text.contains("\\u0085"));
        assert!(text.contains("é 漢"));
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }
}
