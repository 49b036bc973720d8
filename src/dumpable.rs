//! Keeping the server's memory its own. Secret values, the bearer token, the view's
//! credential and the owner key live in it, and any process of the same user may read the
//! memory of a dumpable process (`/proc/PID/mem`, ptrace): a session's shell among them.
//! So the server makes itself not dumpable, as ssh-agent does, which also refuses it core
//! dumps and same-user debuggers; programs it starts are dumpable again once they exec.
//! `MCP_TERMINAL_DUMPABLE=1` keeps it dumpable: for debugging it, and for tests that
//! inspect it as an unprivileged user (its open descriptors).

/// The variable that keeps the server dumpable when it is `1`.
pub const KEEP_DUMPABLE: &str = "MCP_TERMINAL_DUMPABLE";

/// Make this process not dumpable, unless `KEEP_DUMPABLE` asks otherwise; a failure is
/// said on stderr (the server still serves).
pub fn keep_memory_private() {
    if std::env::var_os(KEEP_DUMPABLE).is_some_and(|v| v == "1") {
        return;
    }
    if let Err(e) = make_undumpable() {
        crate::say!(
            "mcp-terminal: warning: cannot make the server's memory unreadable to other \
             processes of its user ({e})"
        );
    }
}

fn make_undumpable() -> nix::Result<()> {
    nix::sys::prctl::set_dumpable(false)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_process_is_no_longer_dumpable() {
        // The environment is left alone: other tests read it from other threads.
        super::make_undumpable().unwrap();
        assert_eq!(nix::sys::prctl::get_dumpable(), Ok(false));
        nix::sys::prctl::set_dumpable(true).unwrap();
    }
}
