//! Reading an asciicast v2 recording the way its players do: the header, every event, and
//! its permission bits (`mode`, octal), and what `asciinema cat` (the reference implementation, `python3 -m asciinema`) prints of it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

/// Bound on one `asciinema cat`.
const CAT_TIMEOUT: Duration = Duration::from_secs(60);

/// `{header, events, kinds, cat, mode}` of the file at `path`; an error when a line is not JSON,
/// an event is not `[seconds, kind, text]`, or times go backwards.
pub async fn read_cast(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the recording {}: {e}", path.display()))?;
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().unwrap_or_default())
        .map_err(|e| format!("the header line is not JSON: {e}"))?;
    let mut events = Vec::new();
    let mut last = 0.0;
    for (i, line) in lines.enumerate() {
        let event: Value = serde_json::from_str(line)
            .map_err(|e| format!("event line {} is not JSON: {e}", i + 2))?;
        let (Some(t), Some(_), Some(_)) = (
            event.get(0).and_then(Value::as_f64),
            event.get(1).and_then(Value::as_str),
            event.get(2).and_then(Value::as_str),
        ) else {
            return Err(format!(
                "event line {} is not [seconds, kind, text]: {line}",
                i + 2
            ));
        };
        if t < last {
            return Err(format!(
                "event line {}: time {t} goes back from {last}",
                i + 2
            ));
        }
        last = t;
        events.push(event);
    }
    if !text.ends_with('\n') {
        return Err("the last line is not complete".into());
    }
    let kinds: Vec<Value> = events.iter().map(|e| e[1].clone()).collect();
    let mode = std::fs::metadata(path)
        .map(|m| format!("{:o}", m.permissions().mode() & 0o777))
        .unwrap_or_default();
    let cat = asciinema_cat(path).await?;
    Ok(json!({"header": header, "events": events, "kinds": kinds, "cat": cat, "mode": mode}))
}

/// What `asciinema cat FILE` prints (it plays only the `o` events, in order).
async fn asciinema_cat(path: &Path) -> Result<String, String> {
    let mut cmd = tokio::process::Command::new("python3");
    cmd.args(["-m", "asciinema", "cat"])
        .arg(path)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    // Without a controlling terminal, asciinema cannot put the tester's terminal in raw mode.
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    let out = tokio::time::timeout(CAT_TIMEOUT, cmd.output())
        .await
        .map_err(|_| "asciinema cat timed out".to_string())?
        .map_err(|e| format!("cannot run python3 -m asciinema: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "asciinema cat failed ({}): {} (is asciinema==2.4.0 installed? .ci/run installs it)",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    String::from_utf8(out.stdout).map_err(|_| "asciinema cat printed invalid UTF-8".into())
}
