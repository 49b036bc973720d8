//! What some tests need beyond the Rust toolchain and python3 (the Python SDK, Chromium,
//! the MCP conformance suite): where it is absent the test is skipped, saying what is
//! missing and how to install it, unless its `MCP_TERMINAL_REQUIRE_*` variable is `1` (as
//! CI sets them, after installing everything), which makes the absence a failure.

use std::io::Write;

/// `what` is absent: fail when `require_var` is `1`, else say that the test is skipped.
/// The note goes straight to stderr, past the test harness's capture, so that
/// `cargo test` shows it.
pub fn missing(require_var: &str, what: &str, install: &str) {
    let required = std::env::var(require_var).is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{what} is required ({require_var}=1) but missing; install it: {install}"
    );
    let _ = writeln!(
        std::io::stderr(),
        "skipped: {what} is not installed (install it: {install})"
    );
}

/// The Chromium binary the browser tests drive: `MCP_TERMINAL_CHROMIUM`, else
/// `/usr/bin/chromium` (Debian's package).
pub fn chromium() -> std::path::PathBuf {
    std::env::var_os("MCP_TERMINAL_CHROMIUM")
        .map_or_else(|| "/usr/bin/chromium".into(), std::path::PathBuf::from)
}
