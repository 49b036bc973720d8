//! Reading an asciicast v2 recording the way its players do: the header, every event, its
//! permission bits (`mode`, octal), and what a player prints of it (`cat`: the `o` events'
//! text in order). The file is always checked by this reader; where the reference
//! implementation (`python3 -m asciinema`) is installed, its `asciinema cat` must print the
//! same text. It is optional unless `MCP_TERMINAL_REQUIRE_ASCIINEMA=1` (as in CI, which
//! installs it).

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
    let cat: String = events
        .iter()
        .filter(|e| e[1] == "o")
        .filter_map(|e| e[2].as_str())
        .collect();
    if let Some(reference) = asciinema_cat(path).await?
        && reference != cat
    {
        return Err(format!(
            "asciinema cat prints {reference:?}, but the recording's output events hold {cat:?}"
        ));
    }
    Ok(json!({"header": header, "events": events, "kinds": kinds, "cat": cat, "mode": mode}))
}

/// Whether the reference implementation is installed; when it is not and the environment
/// requires it, an error saying how to install it.
fn asciinema_installed() -> Result<bool, String> {
    static INSTALLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let installed = *INSTALLED.get_or_init(|| {
        let probe = std::process::Command::new("python3")
            .args(["-m", "asciinema", "--version"])
            .stdin(Stdio::null())
            .output();
        let found = probe.is_ok_and(|o| o.status.success());
        if !found {
            eprintln!(
                "note: asciinema is not installed, so recordings are checked by the harness's \
                 own asciicast reader only (python3 -m pip install asciinema==2.4.0 adds \
                 `asciinema cat` as a second check)"
            );
        }
        found
    });
    let required = std::env::var("MCP_TERMINAL_REQUIRE_ASCIINEMA").is_ok_and(|v| v == "1");
    if !installed && required {
        return Err(
            "asciinema is required (MCP_TERMINAL_REQUIRE_ASCIINEMA=1) but `python3 -m \
                    asciinema` is missing: python3 -m pip install asciinema==2.4.0"
                .into(),
        );
    }
    Ok(installed)
}

/// What `asciinema cat FILE` prints (it plays only the `o` events, in order), or `None`
/// when asciinema is not installed (and not required).
async fn asciinema_cat(path: &Path) -> Result<Option<String>, String> {
    if !asciinema_installed()? {
        return Ok(None);
    }
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
    String::from_utf8(out.stdout)
        .map(Some)
        .map_err(|_| "asciinema cat printed invalid UTF-8".into())
}
