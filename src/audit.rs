//! The audit log (SPEC §9): one JSON line per tool call, appended to an owner-chosen file.
//!
//! Each line holds the time, who acted (`by`: `agent`, or `owner` for what the machine's
//! owner did from the live view), tool, session id, command id, outcome (`ok` or the error
//! code) and duration; `terminal_exec` command lines in full; written text only as a byte
//! count, and a secret only by its name, since either may hold what must not be logged.
//! The file is opened once with `O_APPEND` (mode 0600, never through a symlink, see
//! `private_file`) and each line goes out in one unbuffered write, so lines never
//! interleave and nothing waits in a buffer. A failing write (disk full) is reported once
//! on stderr; the call is answered regardless.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};

use crate::private_file;

pub struct AuditLog {
    path: PathBuf,
    file: Mutex<File>,
    failed: AtomicBool,
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
        Ok(AuditLog {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            failed: AtomicBool::new(false),
        })
    }

    pub fn record(&self, line: AuditLine) {
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
        let mut text = Value::Object(fields).to_string();
        text.push('\n');
        let written = self
            .file
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .write_all(text.as_bytes());
        if let Err(e) = written
            && !self.failed.swap(true, Ordering::SeqCst)
        {
            tracing::error!(
                "audit log `{}`: a line could not be written ({e}); calls are still answered, \
                 and further failures are not reported",
                self.path.display()
            );
        }
    }
}
