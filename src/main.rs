//! `mcp-terminal`: a local MCP server that starts and drives real OS processes under an
//! owner-approved command policy. This file holds the command line and the stdio serving
//! loop with its shutdown; everything else lives in the library (`src/lib.rs`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use rmcp::ServiceExt;
use tokio::signal::unix::{SignalKind, signal};

use mcp_terminal::{
    access, audit, config, dumpable, hangup, heap, http, limits, log_lines, process, session,
    stdio, tools, web,
};

use config::Config;
use process::{LazyGuardian, Reaper};
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
    /// Serve MCP over stdio. Without --config: the owner's default config file when it
    /// exists, else the built-in demo profiles with the current directory as the only
    /// allowed root and default cwd.
    Stdio {
        /// Owner config (JSON); see `make-config`.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Also serve the live view of the sessions on this loopback address (default: the
        /// config's web_listen, else 127.0.0.1:8766, or the next free port); the sign-in URL
        /// is printed on stderr and written to `web-url` beside the config.
        #[arg(long, value_name = "ADDR", num_args = 0..=1)]
        web: Option<Option<String>>,
        /// The token file of the live view (default as for `http`).
        #[arg(long, requires = "web")]
        token_file: Option<PathBuf>,
        /// Let the owner type into PTY sessions and end sessions from the live view
        /// (recorded in the audit log as the owner's); read-only without it.
        #[arg(long, requires = "web")]
        web_control: bool,
    },
    /// Serve MCP over Streamable HTTP at /mcp, for clients that send the bearer token.
    Http {
        /// Owner config (JSON); see `make-config`.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Address to listen on (port 0 picks a free port).
        #[arg(long, default_value = limits::HTTP_DEFAULT_LISTEN)]
        listen: String,
        /// The bearer token file (default: $XDG_CONFIG_HOME/mcp-terminal/token, else
        /// ~/.config/mcp-terminal/token); created with a random token when absent.
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// Accept a non-loopback listen address and any Host header.
        #[arg(long)]
        allow_remote: bool,
        /// A browser origin (besides loopback ones) allowed to send requests.
        #[arg(long = "allow-origin", value_name = "ORIGIN", value_parser = origin_arg)]
        allow_origins: Vec<String>,
        /// Also serve the read-only live view of the sessions under /ui/; the sign-in URL
        /// is printed on stderr.
        #[arg(long)]
        web: bool,
        /// Let the owner type into PTY sessions and end sessions from the live view
        /// (recorded in the audit log as the owner's); read-only without it.
        #[arg(long, requires = "web")]
        web_control: bool,
        /// Milliseconds an MCP session may go without a request before it is closed.
        #[arg(long, hide = true, default_value_t = limits::MCP_SESSION_IDLE.as_millis() as u64)]
        mcp_session_idle_ms: u64,
        /// Milliseconds a client may take to send a request head.
        #[arg(long, hide = true, default_value_t = limits::HTTP_HEADER_READ_TIMEOUT.as_millis() as u64)]
        header_read_timeout_ms: u64,
        /// Milliseconds a connection may move no byte before it is closed.
        #[arg(long, hide = true, default_value_t = limits::HTTP_IDLE_TIMEOUT.as_millis() as u64)]
        connection_idle_ms: u64,
    },
    /// Print a fresh one-time sign-in URL of the running server's live view (its address
    /// and owner key from `web-url` beside the config).
    WebUrl {
        /// The config the server runs with (default: the owner's default config file).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Write an owner config with every field at its default, all paths absolute.
    MakeConfig {
        /// Where to write it (parent directories are created). Default: the owner's default
        /// config file ($XDG_CONFIG_HOME/mcp-terminal/config.json, else
        /// ~/.config/mcp-terminal/config.json), which is never overwritten.
        #[arg(long)]
        output: Option<PathBuf>,
        /// The allowed root and default cwd (default: the current directory).
        #[arg(long)]
        root: Option<PathBuf>,
        /// Also approve POSIX shells (`sh`, and `bash` when it exists).
        #[arg(long)]
        shells: bool,
    },
    /// Validate a config (default: the owner's default config file) and print a summary;
    /// exit 2 with the first error.
    CheckConfig {
        /// The config file to check (default: the owner's default config file).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Approve, list and withdraw commands in the config without editing JSON.
    Profile {
        #[command(subcommand)]
        action: ProfileAction,
    },
    /// Internal: the process `stdio` starts to end its sessions' processes if it is killed.
    #[command(hide = true)]
    Guardian {
        #[arg(long)]
        instance: String,
    },
}

#[derive(Subcommand)]
enum ProfileAction {
    /// Approve PROGRAM (resolved through PATH to an absolute path) with fixed ARGS as ID.
    Add {
        /// The command id clients will name.
        id: String,
        /// Run it on a pseudo-terminal instead of pipes.
        #[arg(long)]
        pty: bool,
        /// Terminal rows (PTY profiles).
        #[arg(long, requires = "pty")]
        rows: Option<u64>,
        /// Terminal columns (PTY profiles).
        #[arg(long, requires = "pty")]
        cols: Option<u64>,
        /// The program is a POSIX shell: clients may run any command line in it with
        /// terminal_exec.
        #[arg(long)]
        shell: bool,
        /// An environment variable the client may set (repeatable).
        #[arg(long = "allow-env", value_name = "NAME")]
        allow_env: Vec<String>,
        /// A variable the profile sets, NAME=VALUE (repeatable); any name, as in the
        /// profile's `env`.
        #[arg(long = "env", value_name = "NAME=VALUE", value_parser = env_pair)]
        env: Vec<(String, String)>,
        /// Add this directory to the allowed roots, so the command can be run there
        /// (repeatable).
        #[arg(long = "cwd-root", value_name = "DIR")]
        cwd_root: Vec<PathBuf>,
        /// Shown to clients in terminal_start's description.
        #[arg(long)]
        description: Option<String>,
        /// The config file to change (default: the owner's default config file).
        #[arg(long)]
        config: Option<PathBuf>,
        /// PROGRAM and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "PROGRAM ARGS")]
        argv: Vec<String>,
    },
    /// List the approved commands.
    List {
        /// The config file to read (default: the owner's default config file).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Withdraw a command.
    Remove {
        /// The command id to withdraw.
        id: String,
        /// The config file to change (default: the owner's default config file).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// Exit status for usage and config errors.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    process::cloexec_inherited_fds();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Stdio {
            config,
            web,
            token_file,
            web_control,
        } => {
            let url_file = web::url_file(config.as_deref());
            load_config(config.as_deref())
                .and_then(|loaded| {
                    let beside = match web {
                        Some(listen) => Some(web::prepare_beside(
                            listen.as_deref(),
                            loaded.web_listen,
                            token_file,
                            url_file,
                        )?),
                        None => None,
                    };
                    Ok((loaded, beside))
                })
                .and_then(|(config, beside)| serve(config, Serve::Stdio(beside, web_control)))
        }
        Command::Http {
            config,
            listen,
            token_file,
            allow_remote,
            allow_origins,
            web,
            web_control,
            mcp_session_idle_ms,
            header_read_timeout_ms,
            connection_idle_ms,
        } => {
            let millis = std::time::Duration::from_millis;
            let options = http::Options {
                listen,
                token_file,
                allow_remote,
                allow_origins,
                mcp_idle: millis(mcp_session_idle_ms),
                web,
                web_control,
                web_url_file: web::url_file(config.as_deref()),
                connections: access::listener::Limits {
                    connections: limits::HTTP_MAX_CONNECTIONS,
                    header_read: millis(header_read_timeout_ms),
                    idle: millis(connection_idle_ms),
                },
            };
            load_config(config.as_deref())
                .and_then(|config| Ok((config, http::prepare(options)?)))
                .and_then(|(config, prepared)| serve(config, Serve::Http(prepared)))
        }
        Command::MakeConfig {
            output,
            root,
            shells,
        } => make_config(output.as_deref(), root.as_deref(), shells),
        Command::CheckConfig { config } => existing_config(config.as_deref())
            .and_then(|path| Config::load_as(&path, config::EnvSecrets::Elsewhere))
            .and_then(|c| {
                c.audit_log
                    .as_deref()
                    .map_or(Ok(()), audit::check)
                    .map(|()| c)
            })
            .map(|c| print!("{}", c.summary())),
        Command::Profile { action } => profile(action),
        Command::Guardian { instance } => process::run_guardian(&instance),
        Command::WebUrl { config } => web::url_file(config.as_deref())
            .ok_or_else(|| {
                "no default config path (neither XDG_CONFIG_HOME nor HOME is set); pass \
                 --config"
                    .to_owned()
            })
            .and_then(|file| web::fetch_sign_in_url(&file))
            .map(|url| println!("{url}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            mcp_terminal::say!("mcp-terminal: {message}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn current_dir() -> Result<PathBuf, String> {
    std::env::current_dir()
        .and_then(|d| d.canonicalize())
        .map_err(|e| format!("cannot resolve the current directory: {e}"))
}

/// The config a serving command uses: `--config`, else the owner's default file when it
/// exists, else the built-in demo defaults.
fn load_config(given: Option<&Path>) -> Result<Config, String> {
    match config::config_path(given) {
        Some(path) => Config::load(&path),
        None => Ok(config::default_config(&current_dir()?)),
    }
}

/// The config file a command that edits or checks one works on.
/// `--env NAME=VALUE`.
fn env_pair(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("`{text}` is not NAME=VALUE")),
    }
}

fn existing_config(given: Option<&Path>) -> Result<PathBuf, String> {
    config::config_path(given).ok_or_else(|| match config::default_config_path() {
        Some(path) => format!(
            "no config at `{}`; write one with `mcp-terminal make-config`, or pass --config",
            path.display()
        ),
        None => {
            "no default config path (neither XDG_CONFIG_HOME nor HOME is set); pass --config".into()
        }
    })
}

fn profile(action: ProfileAction) -> Result<(), String> {
    match action {
        ProfileAction::Add {
            id,
            pty,
            rows,
            cols,
            shell,
            allow_env,
            env,
            cwd_root,
            description,
            config,
            argv,
        } => {
            let path = existing_config(config.as_deref())?;
            let path_var = std::env::var("PATH").ok();
            let program = config::resolve_program(&argv[0], path_var.as_deref())?;
            let mut fixed = vec![program.display().to_string()];
            fixed.extend(argv[1..].iter().cloned());
            let mut profile = serde_json::json!({
                "argv": fixed,
                "mode": if pty { "pty" } else { "pipe" },
                "allowed_env": allow_env,
            });
            if !env.is_empty() {
                let env: serde_json::Map<_, _> =
                    env.into_iter().map(|(k, v)| (k, v.into())).collect();
                profile["env"] = env.into();
            }
            let optional = [
                ("rows", rows.map(Into::into)),
                ("cols", cols.map(Into::into)),
                ("shell", shell.then(|| "posix".into())),
                ("description", description.map(Into::into)),
            ];
            for (key, value) in optional {
                if let Some(value) = value {
                    profile[key] = value;
                }
            }
            let mut file = config::ConfigFile::open(&path)?;
            file.add(&id, profile)?;
            for dir in &cwd_root {
                let dir = std::fs::canonicalize(dir)
                    .map_err(|e| format!("--cwd-root `{}`: {e}", dir.display()))?;
                file.add_root(&dir)?;
            }
            file.save()?;
            println!(
                "approved `{id}`: {} (in {})",
                config::shown_argv(&fixed),
                path.display()
            );
            if let Some(n) = file.demo_written() {
                println!(
                    "the config had no `commands`, which approves the {n} demo profiles: they \
                     are now written out in it beside `{id}` (withdraw any with \
                     `mcp-terminal profile remove ID`)"
                );
            }
            if shell {
                println!(
                    "`{id}` is a shell: a client may run any command line in it with terminal_exec"
                );
            }
            println!("{APPLIES_AT_START}");
            Ok(())
        }
        ProfileAction::List { config } => {
            let path = existing_config(config.as_deref())?;
            let loaded = config::ConfigFile::open(&path)?.validate()?;
            for (id, p) in &loaded.commands {
                let shell = if p.shell.is_some() { " shell" } else { "" };
                let argv = config::shown_argv(&p.argv);
                println!("{id}\t{}{shell}\t{argv}", p.mode.as_str());
            }
            Ok(())
        }
        ProfileAction::Remove { id, config } => {
            let path = existing_config(config.as_deref())?;
            let mut file = config::ConfigFile::open(&path)?;
            file.remove(&id)?;
            file.save()?;
            println!("withdrew `{id}` (from {})", path.display());
            println!("{APPLIES_AT_START}");
            if let Some(n) = file.demo_written() {
                println!(
                    "the config had no `commands`, which approves the {n} demo profiles: the \
                     others are now written out in it"
                );
            }
            Ok(())
        }
    }
}

/// An `--allow-origin` value as a browser sends its Origin: `http` or `https`, `://`, a
/// host with an optional port (1–65535), and nothing after (a trailing `/` is dropped).
/// It is kept as a browser writes it: scheme and host in lower case, and no port where it
/// is the scheme's own (a browser sends `https://app.example.com`, never `…:443`).
/// Anything else could never match a request, so it is refused rather than kept.
fn origin_arg(value: &str) -> Result<String, String> {
    let refused = || {
        format!(
            "`{value}` is not an origin: give scheme://host[:port], such as \
             https://app.example.com"
        )
    };
    let trimmed = value.strip_suffix('/').unwrap_or(value);
    let (scheme, authority) = trimmed.split_once("://").ok_or_else(refused)?;
    let scheme = scheme.to_ascii_lowercase();
    let own_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return Err(refused()),
    };
    if authority.contains(['/', '?', '#', '@', ' ']) {
        return Err(refused());
    }
    // A port follows the last `:`, unless that is inside an IPv6 address's brackets.
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => {
            let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(refused)?;
            (host, Some(port).filter(|p| *p != own_port))
        }
        _ => (authority, None),
    };
    if host.is_empty() {
        return Err(refused());
    }
    let host = host.to_ascii_lowercase();
    Ok(match port {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    })
}

fn make_config(output: Option<&Path>, root: Option<&Path>, shells: bool) -> Result<(), String> {
    let output = match output {
        Some(path) => path.to_path_buf(),
        None => config::default_config_path().ok_or(
            "no default config path (neither XDG_CONFIG_HOME nor HOME is set); pass --output",
        )?,
    };
    // An owner's config holds their approvals: never replaced by the defaults.
    if std::fs::symlink_metadata(&output).is_ok() {
        return Err(format!(
            "`{}` already exists and is not overwritten; edit it with `mcp-terminal profile`, \
             remove it, or name another --output",
            output.display()
        ));
    }
    let output = output.as_path();
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
    // Made new, so a file that appeared since the look above is not overwritten either.
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(output)
        .and_then(|mut file| std::io::Write::write_all(&mut file, text.as_bytes()));
    written.map_err(|e| format!("cannot write `{}`: {e}", output.display()))?;
    mcp_terminal::say!("wrote {}", output.display());
    Ok(())
}

/// Which transport MCP is served on.
enum Serve {
    /// With the live view beside it, when asked for (and whether the owner controls it).
    Stdio(Option<web::Beside>, bool),
    Http(http::Prepared),
}

fn serve(config: Config, transport: Serve) -> Result<(), String> {
    // SAFETY: no thread but this one exists yet: the runtime, the log's writer and the
    // guardian all start below.
    unsafe { config::remove_from_environment(&config.secrets) };
    dumpable::keep_memory_private();
    heap::keep_answer_buffers();
    let log = init_logging();
    // A log that cannot be opened is a config error, reported before anything starts.
    let audit = open_audit(&config)?;
    let instance = process::new_instance();
    // Started before the first spawn of a session's process, not here: off the way to the
    // first answer.
    let guardian = Arc::new(LazyGuardian::new(instance.clone()));
    // Every task on this one thread. The server waits on pipes, terminals and its client
    // far more than it computes, and what computes at length (a terminal's emulator,
    // building a search, writing a recording, spawning) has a thread of its own. With
    // workers beside the thread serving MCP, each request crossed to a worker and its
    // answer back, and the task a pipe or a child's exit woke was often taken by another
    // worker: more cross-thread wake-ups on every call's way, and on a machine of few
    // cores less of them left to the child processes and the client.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // Its blocking threads write recordings, read casts: the main thread takes signals.
        .on_thread_start(process::leave_signals_to_main)
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let served = runtime.block_on(async {
        let reaper = Reaper::start().map_err(|e| format!("cannot watch child processes: {e}"))?;
        reaper.guard_spawns(guardian.clone());
        // The one set of terminal sessions every MCP session of this server shares.
        let sessions = Arc::new(Sessions::new(Arc::new(config), reaper, instance.clone()));
        match transport {
            Serve::Stdio(beside, control) => {
                if let Some(beside) = beside {
                    let settings = web::Settings {
                        control,
                        audit: audit.clone(),
                    };
                    web::serve_beside(sessions.clone(), beside, settings)?;
                }
                run(sessions, audit).await
            }
            Serve::Http(prepared) => http::serve(sessions, audit, prepared).await,
        }
    });
    if served.is_ok() {
        // Descendants that left their session's group (escaped daemons) end here too.
        guardian.finish();
    }
    // The last lines (the shutdown's) reach stderr where they can.
    log.finish(limits::LOG_FLUSH_AT_EXIT);
    served?;
    // Pending blocking reads of stdin, or HTTP connections that outlived the shutdown
    // flush, must not hold the process open.
    std::process::exit(0);
}

fn open_audit(config: &Config) -> Result<Option<Arc<audit::AuditLog>>, String> {
    match &config.audit_log {
        Some(path) => Ok(Some(Arc::new(audit::AuditLog::open(path)?))),
        None => Ok(None),
    }
}

async fn run(sessions: Arc<Sessions>, audit: Option<Arc<audit::AuditLog>>) -> Result<(), String> {
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    // A terminal that was closed: the server run in it shuts down as on SIGTERM.
    let mut sighup = hangup::terminal_closed()?;
    stdio::widen_stdout();
    let (stdin, stdout) = rmcp::transport::io::stdio_pipes();
    let (transport, stdin_closed) = stdio::Stdio::new(stdin, stdout);
    let in_flight = transport.in_flight();
    let server = TerminalServer::new(sessions.clone()).with_audit(audit);
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "serving MCP on stdio");

    let serving = async {
        match server.serve(transport).await {
            Ok(service) => {
                let _ = service.waiting().await;
            }
            Err(e) => tracing::warn!(
                "the client did not complete the handshake: {}",
                handshake_failure(&e)
            ),
        }
    };
    tokio::pin!(serving);
    // `served`: nothing is left to flush (the service ended, or stdout is gone). The service
    // ends by closing its transport, which writes its last answers and the guard's own.
    let (why, served) = tokio::select! {
        () = &mut serving => ("the client closed the connection", true),
        _ = stdin_closed => ("stdin closed", false),
        // Nothing in flight could be delivered any more: no flush.
        () = hangup::stdout_closed() => ("the client closed stdout", true),
        _ = sigterm.recv() => ("SIGTERM", false),
        _ = sigint.recv() => ("SIGINT", false),
        () = hangup::next_hangup(&mut sighup) => ("SIGHUP", false),
    };
    tracing::info!("shutting down ({why})");
    sessions
        .shutdown(limits::SHUTDOWN_GRACE.as_millis() as u64)
        .await;
    // Requests still in flight (a wait on a session that just ended) can answer now; with
    // none left, there is nothing to wait for.
    if !served {
        let flushed = async {
            tokio::select! {
                () = &mut serving => {}
                () = in_flight.all_answered() => {}
            }
        };
        let _ = tokio::time::timeout(limits::SHUTDOWN_FLUSH, flushed).await;
    }
    tracing::info!("shutdown complete");
    Ok(())
}

/// What `profile add` and `profile remove` say after their change: a server reads its
/// config once, as it starts.
const APPLIES_AT_START: &str = "a server already running keeps the profiles it started with: \
    restart it (or the MCP client that starts it) to apply this";

/// What went wrong in a handshake, without what the client sent: rmcp's own text of it
/// holds the client's message whole.
fn handshake_failure(error: &rmcp::service::ServerInitializeError) -> String {
    use rmcp::service::ServerInitializeError as E;
    match error {
        E::ExpectedInitializeRequest(Some(_)) => "its first message was not initialize".into(),
        E::ExpectedInitializeRequest(None) => "it sent nothing".into(),
        E::ConnectionClosed(_) => "the connection closed".into(),
        E::UnexpectedInitializeResponse(_) => "the answer to initialize was unexpected".into(),
        E::InitializeFailed(e) => format!("initialize failed ({})", e.code.0),
        E::TransportError { context, .. } => format!("the transport failed when {context}"),
        E::Cancelled => "it was cancelled".into(),
        _ => "an error rmcp does not name".into(),
    }
}

/// Logs go to stderr at the levels `MCP_TERMINAL_LOG` asks for, under one ceiling it cannot
/// lift: below info only this crate logs, and of rmcp only errors. Libraries log what passes
/// through them at debug and trace (rmcp every request and answer, so the text a client
/// writes and the output it reads; hyper a connection's bytes), rmcp some of it up to warn,
/// and no log may hold either: this crate logs byte counts, names and codes, never text.
fn init_logging() -> log_lines::LogLines {
    use tracing_subscriber::filter::{FilterExt, filter_fn};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer};
    let asked =
        EnvFilter::try_from_env("MCP_TERMINAL_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let ceiling = filter_fn(|event| {
        // rmcp puts what the peer sent in lines up to warn: each error it answers (the method
        // or tool name the client sent, up to a whole request line), a request's id, a
        // notification, a cancellation's reason, the client's info. Its errors are the
        // transport's.
        let level = *event.level();
        if event.target().starts_with("mcp_terminal") {
            true
        } else if event.target().starts_with("rmcp") {
            level == tracing::Level::ERROR
        } else {
            level <= tracing::Level::INFO
        }
    });
    // Written by a thread of its own, which takes no signal (the main thread takes them).
    let lines = log_lines::start(std::io::stderr(), |run| {
        let _ = std::thread::Builder::new()
            .name("log".into())
            .spawn(move || {
                process::leave_signals_to_main();
                run();
            });
    });
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(lines.clone())
        .with_ansi(false)
        .with_filter(asked.and(ceiling));
    tracing_subscriber::registry().with(stderr).init();
    lines
}
