//! `mcp-terminal`: a local MCP server that starts and drives real OS processes under an
//! owner-approved command policy. This file holds the command line and the stdio serving
//! loop with its shutdown; everything else lives in the modules below.

mod config;
mod errors;
mod framing;
mod hangup;
mod limits;
mod output;
mod policy;
mod process;
mod session;
mod strict;
mod tools;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use rmcp::ServiceExt;
use tokio::signal::unix::{SignalKind, signal};

use config::Config;
use process::{Guardian, Reaper};
use session::Sessions;
use tools::TerminalServer;

/// A local MCP server that starts and drives real OS processes under an owner-approved
/// command policy.
#[derive(Parser)]
#[command(name = "mcp-terminal", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over stdio. Without --config: the built-in demo profiles, with the current
    /// directory as the only allowed root and default cwd.
    Stdio {
        /// Owner config (JSON); see `make-config`.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Write an owner config with every field at its default, all paths absolute.
    MakeConfig {
        /// Where to write it (parent directories are created).
        #[arg(long)]
        output: PathBuf,
        /// The allowed root and default cwd (default: the current directory).
        #[arg(long)]
        root: Option<PathBuf>,
        /// Also approve POSIX shells (`sh`, and `bash` when it exists).
        #[arg(long)]
        shells: bool,
    },
    /// Validate a config and print a summary; exit 2 with the first error.
    CheckConfig {
        #[arg(long)]
        config: PathBuf,
    },
    /// Internal: the process `stdio` starts to end its sessions' processes if it is killed.
    #[command(hide = true)]
    Guardian {
        #[arg(long)]
        instance: String,
    },
}

/// Exit status for usage and config errors.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    process::cloexec_inherited_fds();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Stdio { config } => load_config(config.as_deref()).and_then(serve_stdio),
        Command::MakeConfig {
            output,
            root,
            shells,
        } => make_config(&output, root.as_deref(), shells),
        Command::CheckConfig { config } => Config::load(&config).map(|c| print!("{}", c.summary())),
        Command::Guardian { instance } => process::run_guardian(&instance),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("mcp-terminal: {message}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn current_dir() -> Result<PathBuf, String> {
    std::env::current_dir()
        .and_then(|d| d.canonicalize())
        .map_err(|e| format!("cannot resolve the current directory: {e}"))
}

fn load_config(path: Option<&Path>) -> Result<Config, String> {
    match path {
        Some(path) => Config::load(path),
        None => Ok(config::default_config(&current_dir()?)),
    }
}

fn make_config(output: &Path, root: Option<&Path>, shells: bool) -> Result<(), String> {
    let root = match root {
        Some(root) => root
            .canonicalize()
            .map_err(|_| format!("--root `{}` does not exist", root.display()))?,
        None => current_dir()?,
    };
    if !root.is_dir() {
        return Err(format!("--root `{}` is not a directory", root.display()));
    }
    let mut config = config::default_config(&root);
    if shells {
        config.commands.extend(config::shell_profiles());
    }
    let mut text = serde_json::to_string_pretty(&config.to_json())
        .map_err(|e| format!("cannot encode the config: {e}"))?;
    text.push('\n');
    if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create `{}`: {e}", parent.display()))?;
    }
    std::fs::write(output, text)
        .map_err(|e| format!("cannot write `{}`: {e}", output.display()))?;
    eprintln!("wrote {}", output.display());
    Ok(())
}

fn serve_stdio(config: Config) -> Result<(), String> {
    init_logging();
    // Before the runtime: the guardian is started while this process has one thread.
    let instance = process::new_instance();
    let guardian = match Guardian::start(&instance) {
        Ok(guardian) => Some(guardian),
        Err(e) => {
            tracing::warn!(
                "cannot start the guardian ({e}); if this server is killed, processes that \
                 left their session's group may outlive it"
            );
            None
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(run(config, instance.clone()))?;
    // Descendants that left their session's group (escaped daemons) end here too.
    match guardian {
        Some(guardian) => guardian.finish(&instance),
        None => drop(process::sweep(&instance)),
    }
    // Pending blocking reads of stdin must not hold the process open.
    std::process::exit(0);
}

async fn run(config: Config, instance: String) -> Result<(), String> {
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let reaper = Reaper::start().map_err(|e| format!("cannot watch child processes: {e}"))?;
    let sessions = Arc::new(Sessions::new(Arc::new(config), reaper, instance));
    let (stdin, stdout) = rmcp::transport::io::stdio_pipes();
    let (service_in, service_out, stdin_closed) = framing::guard(stdin, stdout);
    let server = TerminalServer::new(sessions.clone());
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "serving MCP on stdio");

    let serving = async {
        match server.serve((service_in, service_out)).await {
            Ok(service) => {
                let _ = service.waiting().await;
            }
            Err(e) => tracing::warn!("the client did not complete the handshake: {e}"),
        }
    };
    tokio::pin!(serving);
    let (why, served) = tokio::select! {
        () = &mut serving => ("the client closed the connection", true),
        _ = stdin_closed => ("stdin closed", false),
        // Nothing in flight could be delivered any more: no flush.
        () = hangup::stdout_closed() => ("the client closed stdout", true),
        _ = sigterm.recv() => ("SIGTERM", false),
        _ = sigint.recv() => ("SIGINT", false),
    };
    tracing::info!("shutting down ({why})");
    sessions
        .shutdown(limits::SHUTDOWN_GRACE.as_millis() as u64)
        .await;
    if !served {
        // Requests still in flight (a wait on a session that just ended) can answer now.
        let _ = tokio::time::timeout(limits::SHUTDOWN_FLUSH, serving).await;
    }
    tracing::info!("shutdown complete");
    Ok(())
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MCP_TERMINAL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}
