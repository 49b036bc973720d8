//! The official Python MCP SDK (`mcp==2.3.0`) connects to the real binary through both of
//! its paths: `ClientSession.initialize()` and the high-level `mcp.Client`, which probes
//! `server/discover` first; over stdio and over Streamable HTTP (`streamable_http_client`
//! with the bearer token); and over HTTP, an answer lost with its connection reaches the
//! SDK when it reconnects. Skipped, with the reason printed, when python3 or the SDK is
//! missing, unless `MCP_TERMINAL_REQUIRE_PYTHON_SDK=1` (as in CI, which installs it).

use std::process::Command;

mod support;

#[test]
fn python_sdk_connects_by_initialize_and_by_discover() {
    run_sdk_client("stdio");
}

#[test]
fn python_sdk_connects_over_http_by_initialize_and_by_discover() {
    let Some(stdout) = run_sdk_client("http") else {
        return;
    };
    assert!(
        stdout.contains("ok: the token is on no stderr line"),
        "{stdout}"
    );
}

/// A connection dropped before its answer came: the SDK's reconnect gets the answer, which
/// came while no connection carried it.
#[test]
fn python_sdk_gets_an_answer_lost_with_its_connection_by_reconnecting() {
    let Some(stdout) = run_script("sdk_reconnect.py", &[]) else {
        return;
    };
    assert!(
        stdout.contains("ok: the answer came after the reconnect"),
        "{stdout}"
    );
}

/// Run the SDK client over `transport`, check both handshakes, and return its output;
/// `None` when the test is skipped.
fn run_sdk_client(transport: &str) -> Option<String> {
    let stdout = run_script("sdk_client.py", &[transport])?;
    assert!(
        stdout.contains("ok: mcp.Client: server is mcp-terminal"),
        "{stdout}"
    );
    assert!(
        stdout.contains("info: negotiated protocol 2026-07-28"),
        "{stdout}"
    );
    assert!(
        stdout.contains("info: negotiated protocol 2025-11-25"),
        "{stdout}"
    );
    Some(stdout)
}

/// Run `tests/python/SCRIPT BINARY ARGS` to a successful end and return its output; `None`
/// when the SDK is missing and the test is skipped.
fn run_script(script: &str, args: &[&str]) -> Option<String> {
    let probe = Command::new("python3")
        .args(["-c", "import mcp, mcp.client; from mcp import Client"])
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        support::extras::missing(
            "MCP_TERMINAL_REQUIRE_PYTHON_SDK",
            "the official Python MCP SDK",
            "python3 -m pip install mcp==2.3.0",
        );
        return None;
    }
    let script = format!("{}/tests/python/{script}", env!("CARGO_MANIFEST_DIR"));
    // The server must not find the owner's default config: HOME is a fresh directory.
    let home = tempfile::tempdir().expect("a temporary directory");
    let output = Command::new("python3")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_mcp-terminal"))
        .args(args)
        .env("MCP_TERMINAL_LOG", "warn")
        .env("HOME", home.path())
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{script} failed:\n{stdout}\n{stderr}"
    );
    Some(stdout)
}
