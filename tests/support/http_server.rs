//! A running `mcp-terminal http`: started in a directory of its own, which is also its
//! HOME (so no test reads the owner's config), with a token file there, and its stderr
//! collected as it comes.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use super::stderr::Stderr;

pub const BIN: &str = env!("CARGO_BIN_EXE_mcp-terminal");
/// The line the server names its URL with.
const LISTENING: &str = "mcp-terminal: listening on ";

pub struct HttpServer {
    pub child: Child,
    pub stderr: Stderr,
    /// `http://ADDRESS`, where `/mcp` is served.
    pub base: String,
    pub token: String,
    pub dir: tempfile::TempDir,
}

impl HttpServer {
    /// `mcp-terminal http --token-file DIR/token ARGS` in a fresh directory, logging at
    /// `log`; returned once it listens.
    pub fn start(args: &[&str], log: &str) -> HttpServer {
        HttpServer::start_in(tempfile::tempdir().unwrap(), args, log)
    }

    /// The same in `dir`, where a token file may already be.
    pub fn start_in(dir: tempfile::TempDir, args: &[&str], log: &str) -> HttpServer {
        let token_file = dir.path().join("token");
        let mut child = Command::new(BIN)
            .args(["http", "--token-file"])
            .arg(&token_file)
            .args(args)
            .current_dir(dir.path())
            .env("HOME", dir.path())
            .env_remove("XDG_CONFIG_HOME")
            .env("MCP_TERMINAL_LOG", log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Stderr::of(&mut child);
        let line = stderr.line(&format!("{LISTENING}http://"));
        let base = line[LISTENING.len()..].trim_end_matches("/mcp").to_string();
        let token = std::fs::read_to_string(&token_file)
            .unwrap()
            .trim()
            .to_string();
        HttpServer {
            child,
            stderr,
            base,
            token,
            dir,
        }
    }

    pub fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.base.trim_start_matches("http://").parse().unwrap()
    }

    pub fn stderr(&self) -> String {
        self.stderr.text()
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    /// Its exit status, once it has exited (within `PATIENCE`).
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        super::stderr::wait_exit(&mut self.child)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
