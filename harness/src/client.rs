//! The server under test behind a real MCP client: rmcp over the child's stdio, or over
//! Streamable HTTP to `mcp-terminal http` with its bearer token.
//!
//! On stdio the child is spawned through rmcp's `TokioChildProcess`, wrapped so the harness
//! can see its exit status and whether the transport had to signal it: rmcp reaps the child
//! itself when the connection ends, so the status would otherwise be lost. Over HTTP the
//! harness owns the child, learns the URL from its stderr line, and ends it with SIGTERM.

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use process_wrap::tokio::{ChildWrapper, CommandWrap, CommandWrapper};
use rmcp::handler::client::ClientHandler;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, ProgressNotificationParam,
    ProgressToken, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestHandle, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::procfs;
use crate::scenario::Launch;

/// How long the final cleanup waits for the server to exit after stdin closes (over HTTP:
/// after SIGTERM) before killing it. Generous: a clean exit terminates sessions and waits
/// for the guardian, which a loaded machine slows down; a server that ignores the end of its
/// input is caught all the same.
const EXIT_GRACE: Duration = Duration::from_secs(30);
/// How long `mcp-terminal http` may take to print the URL it listens on.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(30);
/// The stderr line `mcp-terminal http` names its URL with.
const LISTENING: &str = "mcp-terminal: listening on ";

/// The transport the client speaks to the server over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    #[default]
    Stdio,
    Http,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
    }

    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "stdio" => Ok(Transport::Stdio),
            "http" => Ok(Transport::Http),
            other => Err(format!("unknown transport `{other}`; use stdio or http")),
        }
    }
}

/// How the server process ended, from the reaped status or its zombie's /proc entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub at: Instant,
}

impl Exit {
    fn from_status(status: ExitStatus, at: Instant) -> Self {
        use std::os::unix::process::ExitStatusExt;
        Exit {
            code: status.code(),
            signal: status.signal(),
            at,
        }
    }

    pub fn describe(&self) -> String {
        match (self.code, self.signal) {
            (Some(c), _) => format!("exit code {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            (None, None) => "unknown status".into(),
        }
    }
}

/// What happened to the server child, as seen through the wrapper.
#[derive(Debug, Default)]
pub struct ChildLog {
    pub exit: Option<Exit>,
    /// Signals the transport itself sent (it escalates when the server ignores stdin EOF).
    pub signals: Vec<i32>,
    pub killed: bool,
}

type SharedLog = Arc<Mutex<ChildLog>>;

fn lock(log: &SharedLog) -> std::sync::MutexGuard<'_, ChildLog> {
    log.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every byte the server wrote to its stdout, in order.
type Received = Arc<Mutex<Vec<u8>>>;

/// Records the server's exit; unless untapped, tees its stdout into `received` and puts a
/// gate in front of its stdin.
#[derive(Debug)]
struct Observer {
    log: SharedLog,
    received: Option<Received>,
    stdin_gate: Option<oneshot::Receiver<()>>,
}

impl CommandWrapper for Observer {
    fn wrap_child(
        &mut self,
        mut child: Box<dyn ChildWrapper>,
        _core: &CommandWrap,
    ) -> io::Result<Box<dyn ChildWrapper>> {
        if let Some(received) = &self.received
            && let Some(stdout) = child.stdout().take()
        {
            *child.stdout() = Some(tee(stdout, received.clone())?);
        }
        if let Some(gate) = self.stdin_gate.take()
            && let Some(stdin) = child.stdin().take()
        {
            *child.stdin() = Some(gated(stdin, gate)?);
        }
        Ok(Box::new(Observed {
            inner: child,
            log: self.log.clone(),
        }))
    }
}

/// Pass what the client writes on to the server's stdin through a pipe, until the client
/// closes its end or `gate` fires (or is dropped): then the server's stdin is closed. So the
/// harness ends a server by EOF and waits for it as long as it chooses, where the client's
/// own close signals a server still running 3 s after it closed stdin, which a loaded
/// machine can make a clean exit take.
fn gated(
    mut stdin: tokio::process::ChildStdin,
    mut gate: oneshot::Receiver<()>,
) -> io::Result<tokio::process::ChildStdin> {
    use tokio::io::AsyncWriteExt;
    let (sender, mut receiver) = tokio::net::unix::pipe::pipe()?;
    let write_end = sender.into_blocking_fd()?;
    tokio::spawn(async move {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = tokio::select! {
                biased;
                read = receiver.read(&mut chunk) => match read {
                    Ok(n) if n > 0 => n,
                    _ => break,
                },
                _ = &mut gate => break,
            };
            if stdin.write_all(&chunk[..n]).await.is_err() {
                break;
            }
        }
    });
    tokio::process::ChildStdin::from_std(std::process::ChildStdin::from(write_end))
}

/// Pass the server's stdout on to the client through a pipe, keeping a copy of every byte
/// (so a scenario can search all the client received, before any parsing).
fn tee(
    mut stdout: tokio::process::ChildStdout,
    copy: Received,
) -> io::Result<tokio::process::ChildStdout> {
    use tokio::io::AsyncWriteExt;
    let (mut sender, receiver) = tokio::net::unix::pipe::pipe()?;
    let read_end = receiver.into_blocking_fd()?;
    tokio::spawn(async move {
        let mut chunk = vec![0u8; 64 * 1024];
        while let Ok(n) = stdout.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            copy.lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(&chunk[..n]);
            if sender.write_all(&chunk[..n]).await.is_err() {
                break;
            }
        }
    });
    tokio::process::ChildStdout::from_std(std::process::ChildStdout::from(read_end))
}

#[derive(Debug)]
struct Observed {
    inner: Box<dyn ChildWrapper>,
    log: SharedLog,
}

impl Observed {
    fn record(log: &SharedLog, status: &io::Result<ExitStatus>) {
        if let Ok(status) = status {
            let mut log = lock(log);
            if log.exit.is_none() {
                log.exit = Some(Exit::from_status(*status, Instant::now()));
            }
        }
    }
}

impl ChildWrapper for Observed {
    fn inner(&self) -> &dyn ChildWrapper {
        self.inner.as_ref()
    }

    fn inner_mut(&mut self) -> &mut dyn ChildWrapper {
        self.inner.as_mut()
    }

    fn into_inner(self: Box<Self>) -> Box<dyn ChildWrapper> {
        self.inner
    }

    fn start_kill(&mut self) -> io::Result<()> {
        lock(&self.log).killed = true;
        self.inner.start_kill()
    }

    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        let result = self.inner.try_wait();
        if let Ok(Some(status)) = &result {
            Self::record(&self.log, &Ok(*status));
        }
        result
    }

    fn wait(&mut self) -> Pin<Box<dyn Future<Output = io::Result<ExitStatus>> + Send + '_>> {
        let log = self.log.clone();
        let wait = self.inner.wait();
        Box::pin(async move {
            let result = wait.await;
            Self::record(&log, &result);
            result
        })
    }

    fn signal(&self, sig: i32) -> io::Result<()> {
        lock(&self.log).signals.push(sig);
        self.inner.signal(sig)
    }
}

/// One notifications/progress the client received, with when it arrived.
#[derive(Debug, Clone)]
pub struct Progress {
    pub token: ProgressToken,
    pub at: Instant,
    /// `{progress, total, message}` as sent (absent fields omitted).
    pub value: Value,
}

/// The client side of the connection: a plain client that keeps every progress notification.
/// rmcp attaches a progress token to every request it sends, so a server that reports
/// progress does so for any call; steps pick out the notifications of their own request.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    progress: Arc<Mutex<Vec<Progress>>>,
}

impl Recorder {
    /// Notifications received so far for `token`, oldest first.
    pub fn progress_for(&self, token: &ProgressToken) -> Vec<Progress> {
        self.progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|p| &p.token == token)
            .cloned()
            .collect()
    }
}

impl ClientHandler for Recorder {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let mut value = json!({"progress": params.progress});
        if let Some(total) = params.total {
            value["total"] = json!(total);
        }
        if let Some(message) = &params.message {
            value["message"] = json!(message);
        }
        self.progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Progress {
                token: params.progress_token,
                at: Instant::now(),
                value,
            });
    }
}

/// How long after a response the notifications sent before it are given to be recorded: the
/// client dispatches notifications on their own tasks, so one may be handled just after the
/// response that followed it on the wire.
pub const NOTIFICATION_SETTLE: Duration = Duration::from_millis(100);

/// A call sent with `call_then_cancel`: its result if it came first, and its progress token.
#[derive(Debug)]
pub struct Cancelled {
    pub result: Option<ToolResult>,
    pub token: ProgressToken,
    /// When notifications/cancelled went out (None if the result came first).
    pub cancelled_at: Option<Instant>,
}

pub struct McpServer {
    client: Option<RunningService<RoleClient, Recorder>>,
    recorder: Recorder,
    pub pid: u32,
    pub transport: Transport,
    log: SharedLog,
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_task: Option<JoinHandle<()>>,
    received: Received,
    /// Stdio: fired to close the server's stdin (see `gated`); none when untapped.
    stdin_gate: Option<oneshot::Sender<()>>,
    /// HTTP: the directory of the token file, removed with the server.
    _token_dir: Option<tempfile::TempDir>,
}

/// Arrange what the server inherits: open descriptors, ignored signals, no capabilities.
/// Returns the descriptor the server's copies are made from, to keep open until the spawn.
fn inherit(
    cmd: &mut tokio::process::Command,
    launch: &Launch,
) -> Result<Option<std::os::fd::OwnedFd>, String> {
    use std::os::fd::{AsRawFd, OwnedFd};
    let ignored = launch
        .ignore_signals
        .iter()
        .map(|name| {
            name.parse::<nix::sys::signal::Signal>()
                .map(|s| s as i32)
                .map_err(|_| format!("launch.ignore_signals: unknown signal `{name}`"))
        })
        .collect::<Result<Vec<i32>, String>>()?;
    let null: Option<OwnedFd> = if launch.open_fds.is_empty() {
        None
    } else {
        let file = std::fs::File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"))?;
        Some(file.into())
    };
    let null_fd = null.as_ref().map(|f| f.as_raw_fd());
    let open_fds = launch.open_fds.clone();
    let no_capabilities = launch.no_capabilities;
    // SAFETY: dup2, signal, and prctl are async-signal-safe and use no memory of the parent
    // beyond the moved vectors, which are only read.
    unsafe {
        cmd.pre_exec(move || {
            use nix::libc;
            if let Some(null) = null_fd {
                for fd in &open_fds {
                    // dup2 onto itself would keep close-on-exec set.
                    let rc = if null == *fd {
                        libc::fcntl(null, libc::F_SETFD, 0)
                    } else {
                        libc::dup2(null, *fd)
                    };
                    if rc == -1 {
                        return Err(io::Error::last_os_error());
                    }
                }
            }
            for signal in &ignored {
                libc::signal(*signal, libc::SIG_IGN);
            }
            if no_capabilities {
                for cap in 0..=63 {
                    libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
                }
            }
            Ok(())
        });
    }
    Ok(null)
}

/// A tools/call result as JSON (`content`, `structuredContent`, `isError`).
pub type ToolResult = Value;

impl McpServer {
    /// Spawn the server (`stdio` or `http` followed by `args`) and complete the MCP handshake.
    pub async fn start(
        transport: Transport,
        program: &Path,
        args: &[String],
        cwd: &Path,
    ) -> Result<Self, String> {
        Self::start_with(transport, program, args, cwd, &Launch::default()).await
    }

    /// Spawn the server with what `launch` says it inherits, and complete the handshake.
    pub async fn start_with(
        transport: Transport,
        program: &Path,
        args: &[String],
        cwd: &Path,
        launch: &Launch,
    ) -> Result<Self, String> {
        match transport {
            Transport::Stdio => Self::start_stdio(program, args, cwd, launch).await,
            Transport::Http => Self::start_http(program, args, cwd, launch).await,
        }
    }

    async fn start_stdio(
        program: &Path,
        args: &[String],
        cwd: &Path,
        launch: &Launch,
    ) -> Result<Self, String> {
        let mut full = vec!["stdio".to_string()];
        full.extend_from_slice(args);
        Self::start_exact(program, &full, cwd, launch).await
    }

    /// Spawn `program` with exactly `args` (no subcommand added) and speak MCP on its stdio.
    pub async fn start_exact(
        program: &Path,
        args: &[String],
        cwd: &Path,
        launch: &Launch,
    ) -> Result<Self, String> {
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args).current_dir(cwd).envs(&launch.env);
        inspectable(&mut cmd);
        // Held open until the server is spawned.
        let _inherited = inherit(&mut cmd, launch)?;
        let log = SharedLog::default();
        let received = Received::default();
        let (stdin_gate, gate) = match launch.untapped {
            true => (None, None),
            false => {
                let (fire, gate) = oneshot::channel();
                (Some(fire), Some(gate))
            }
        };
        let mut wrapped = CommandWrap::from(cmd);
        wrapped.wrap(Observer {
            log: log.clone(),
            received: (!launch.untapped).then(|| received.clone()),
            stdin_gate: gate,
        });
        let (transport, stderr) = TokioChildProcess::builder(wrapped)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot spawn {}: {e}", program.display()))?;
        let pid = transport.id().ok_or("spawned server has no pid")?;
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let stderr_task = stderr.map(|pipe| collect_stderr(pipe, buffer.clone()));
        let recorder = Recorder::default();
        let mut server = McpServer {
            client: None,
            recorder: recorder.clone(),
            pid,
            transport: Transport::Stdio,
            log,
            stderr: buffer,
            stderr_task,
            received,
            stdin_gate,
            _token_dir: None,
        };
        match recorder.serve(transport).await {
            Ok(client) => {
                server.client = Some(client);
                Ok(server)
            }
            Err(e) => {
                server.kill();
                Err(format!("MCP handshake failed: {e}"))
            }
        }
    }

    async fn start_http(
        program: &Path,
        args: &[String],
        cwd: &Path,
        launch: &Launch,
    ) -> Result<Self, String> {
        let token_dir = tempfile::Builder::new()
            .prefix("mcp-terminal-token-")
            .tempdir()
            .map_err(|e| format!("cannot create a token directory: {e}"))?;
        let token_file = token_dir.path().join("token");
        let mut cmd = tokio::process::Command::new(program);
        cmd.arg("http")
            .args(args)
            .args(["--listen", "127.0.0.1:0", "--token-file"])
            .arg(&token_file)
            .current_dir(cwd)
            .envs(&launch.env)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        inspectable(&mut cmd);
        let inherited = inherit(&mut cmd, launch)?;
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot spawn {}: {e}", program.display()))?;
        drop(inherited);
        let pid = child.id().ok_or("spawned server has no pid")?;
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let stderr_task = child
            .stderr
            .take()
            .map(|pipe| collect_stderr(pipe, buffer.clone()));
        let log = SharedLog::default();
        let exit_log = log.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            Observed::record(&exit_log, &status);
        });
        let recorder = Recorder::default();
        let mut server = McpServer {
            client: None,
            recorder: recorder.clone(),
            pid,
            transport: Transport::Http,
            log,
            stderr: buffer,
            stderr_task,
            received: Received::default(),
            stdin_gate: None,
            _token_dir: Some(token_dir),
        };
        let connected = async {
            let url = server.listening_url().await?;
            let token = std::fs::read_to_string(&token_file)
                .map_err(|e| format!("the server wrote no readable token file: {e}"))?;
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .auth_header(token.trim());
            let transport = StreamableHttpClientTransport::from_config(config);
            recorder
                .clone()
                .serve(transport)
                .await
                .map_err(|e| format!("MCP handshake over HTTP with {url} failed: {e}"))
        };
        match connected.await {
            Ok(client) => {
                server.client = Some(client);
                Ok(server)
            }
            Err(e) => {
                server.kill();
                Err(format!("{e}; server stderr:\n{}", server.stderr()))
            }
        }
    }

    /// The URL from the server's `listening on` line, once it is printed.
    async fn listening_url(&self) -> Result<String, String> {
        let deadline = Instant::now() + LISTEN_TIMEOUT;
        loop {
            let stderr = self.stderr();
            if let Some(line) = stderr.lines().find(|l| l.starts_with(LISTENING))
                && stderr.contains(&format!("{line}\n"))
            {
                return Ok(line[LISTENING.len()..].trim().to_string());
            }
            if let Some(exit) = self.exit() {
                return Err(format!(
                    "the server exited ({}) before listening",
                    exit.describe()
                ));
            }
            if Instant::now() >= deadline {
                return Err("the server printed no `listening on` line".into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn client(&self) -> Result<&RunningService<RoleClient, Recorder>, String> {
        self.client
            .as_ref()
            .ok_or_else(|| "the server connection is closed".to_string())
    }

    pub fn is_connected(&self) -> bool {
        self.client.is_some()
    }

    pub async fn call(&self, tool: &str, args: &Value) -> Result<ToolResult, String> {
        let value =
            serde_json::to_value(self.call_result(tool, args).await?).map_err(|e| e.to_string())?;
        self.saw(&value);
        Ok(value)
    }

    async fn call_result(
        &self,
        tool: &str,
        args: &Value,
    ) -> Result<rmcp::model::CallToolResult, String> {
        self.client()?
            .call_tool(params(tool, args))
            .await
            .map_err(|e| format!("tools/call {tool} failed at the protocol level: {e}"))
    }

    /// Call a tool and take its structured content (`Null` when it has none) out of the
    /// result, without the copies of a page's text that `call` makes.
    pub async fn call_structured(&self, tool: &str, args: &Value) -> Result<Value, String> {
        let mut result = self.call_result(tool, args).await?;
        if self.transport == Transport::Http {
            self.saw(&serde_json::to_value(&result).map_err(|e| e.to_string())?);
        }
        Ok(result.structured_content.take().unwrap_or(Value::Null))
    }

    /// Over HTTP the client's bytes are not teed: keep every result as JSON instead, so a
    /// `never_prints` check still covers all that tools returned.
    fn saw(&self, value: &Value) {
        if self.transport == Transport::Http {
            let mut received = self.received.lock().unwrap_or_else(|e| e.into_inner());
            received.extend(value.to_string().into_bytes());
            received.push(b'\n');
        }
    }

    /// Send a call without waiting for its answer; the task yields it.
    pub fn call_in_background(
        &self,
        tool: &str,
        args: &Value,
    ) -> Result<JoinHandle<Result<ToolResult, String>>, String> {
        let peer = self.client()?.peer().clone();
        let (tool, params) = (tool.to_owned(), params(tool, args));
        Ok(tokio::spawn(async move {
            let result = peer
                .call_tool(params)
                .await
                .map_err(|e| format!("tools/call {tool} failed at the protocol level: {e}"))?;
            serde_json::to_value(result).map_err(|e| e.to_string())
        }))
    }

    /// Send a call, returning the handle (which knows the request's progress token).
    async fn send_call(
        &self,
        tool: &str,
        args: &Value,
    ) -> Result<RequestHandle<RoleClient>, String> {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params(tool, args)));
        self.client()?
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| format!("cannot send tools/call {tool}: {e}"))
    }

    /// Call a tool and return its result with the notifications/progress received for the
    /// request (each `{progress, total, message}`).
    pub async fn call_with_progress(
        &self,
        tool: &str,
        args: &Value,
    ) -> Result<(ToolResult, Vec<Value>), String> {
        let handle = self.send_call(tool, args).await?;
        let token = handle.progress_token.clone();
        let response = handle
            .await_response()
            .await
            .map_err(|e| format!("tools/call {tool} failed at the protocol level: {e}"))?;
        let result = tool_result(response)?;
        self.saw(&result);
        tokio::time::sleep(NOTIFICATION_SETTLE).await;
        let progress = self.progress_for(&token);
        Ok((result, progress.into_iter().map(|p| p.value).collect()))
    }

    /// A ping, answered: the server has read every message the client sent before it.
    pub async fn ping(&self) -> Result<(), String> {
        let ping = ClientRequest::PingRequest(rmcp::model::PingRequest::default());
        self.client()?
            .send_request(ping)
            .await
            .map(drop)
            .map_err(|e| format!("ping failed: {e}"))
    }

    /// Progress notifications received so far for one request.
    pub fn progress_for(&self, token: &ProgressToken) -> Vec<Progress> {
        self.recorder.progress_for(token)
    }

    /// Send a call and cancel it with notifications/cancelled after `after`. Returns the
    /// result if it arrived before the cancellation.
    pub async fn call_then_cancel(
        &self,
        tool: &str,
        args: &Value,
        after: Duration,
    ) -> Result<Cancelled, String> {
        let mut handle = self.send_call(tool, args).await?;
        let token = handle.progress_token.clone();
        tokio::select! {
            response = &mut handle.rx => {
                let result = response
                    .map_err(|_| "connection closed".to_string())?
                    .map_err(|e| format!("tools/call {tool} failed: {e}"))?;
                let result = tool_result(result)?;
                self.saw(&result);
                Ok(Cancelled { result: Some(result), token, cancelled_at: None })
            }
            () = tokio::time::sleep(after) => {
                handle
                    .cancel(Some("cancelled by the scenario".into()))
                    .await
                    .map_err(|e| format!("cannot send notifications/cancelled: {e}"))?;
                Ok(Cancelled { result: None, token, cancelled_at: Some(Instant::now()) })
            }
        }
    }

    /// The number of open file descriptors of the server process.
    pub fn open_fds(&self) -> Result<u64, String> {
        procfs::open_fds(self.pid)
    }

    /// The CPU time the server process has used, in clock ticks.
    pub fn cpu_ticks(&self) -> Result<u64, String> {
        procfs::cpu_ticks(self.pid)
    }

    /// The resident memory of the server process, in KiB.
    pub fn rss_kib(&self) -> Result<u64, String> {
        procfs::rss_kib(self.pid)
    }

    /// The peak resident memory of the server process so far, in KiB.
    pub fn peak_rss_kib(&self) -> Result<u64, String> {
        procfs::peak_rss_kib(self.pid)
    }

    pub async fn list_tools(&self) -> Result<Value, String> {
        Ok(json!({ "tools": self.tools().await? }))
    }

    async fn tools(&self) -> Result<Vec<rmcp::model::Tool>, String> {
        self.client()?
            .list_all_tools()
            .await
            .map_err(|e| format!("tools/list failed: {e}"))
    }

    /// How many tools `tools/list` answered, as the client took them in (no copy as JSON):
    /// what a client starting up pays for the list.
    pub async fn count_tools(&self) -> Result<usize, String> {
        Ok(self.tools().await?.len())
    }

    /// The InitializeResult the client received.
    pub fn server_info(&self) -> Result<Value, String> {
        let info = self
            .client()?
            .peer_info()
            .ok_or("no server info received")?;
        serde_json::to_value(&*info).map_err(|e| e.to_string())
    }

    /// Every byte the client received from the server so far.
    pub fn received(&self) -> Vec<u8> {
        self.received
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// Wait (bounded) until the server's stderr reaches EOF, so it is complete.
    pub async fn finish_stderr(&mut self, within: Duration) {
        if let Some(task) = self.stderr_task.take() {
            let _ = tokio::time::timeout(within, task).await;
        }
    }

    /// The exit, if the server has exited (reaped by the transport, or a zombie not yet reaped).
    pub fn exit(&self) -> Option<Exit> {
        let mut log = lock(&self.log);
        if log.exit.is_none() {
            // Remembered once seen: the zombie may be reaped, and its /proc entry gone,
            // before whoever reaps it records the status.
            log.exit = procfs::zombie_status(self.pid).map(|(code, signal)| Exit {
                code,
                signal,
                at: Instant::now(),
            });
        }
        log.exit
    }

    /// Signals the transport sent on its own because the server outlived stdin EOF.
    pub fn transport_signals(&self) -> (Vec<i32>, bool) {
        let log = lock(&self.log);
        (log.signals.clone(), log.killed)
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) -> Result<(), String> {
        if self.exit().is_some() {
            return Err("the server has already exited".into());
        }
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid as i32), sig)
            .map_err(|e| format!("kill({}, {sig}) failed: {e}", self.pid))
    }

    /// Close the server's stdin, the client still connected, so it ends as it does at the
    /// end of its input; `wait_exit` sees it go. Without a gate (untapped), the client closes.
    pub async fn close_stdin(&mut self) {
        match self.stdin_gate.take() {
            Some(gate) => drop(gate.send(())),
            None => self.close().await,
        }
    }

    /// Close the client side: the transport closes the server's stdin and waits for it to
    /// exit (escalating to SIGTERM and SIGKILL after a few seconds each).
    pub async fn close(&mut self) {
        if let Some(mut client) = self.client.take() {
            let _ = client.close().await;
        }
    }

    /// Wait until the server has exited, up to `within`.
    pub async fn wait_exit(&self, within: Duration) -> Option<Exit> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(exit) = self.exit() {
                return Some(exit);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// End of scenario: close stdin (HTTP: close the MCP session and send SIGTERM), wait for
    /// exit, kill if it does not come. Returns notes about anything other than a clean exit.
    pub async fn shutdown(&mut self) -> Vec<String> {
        if self.transport == Transport::Http {
            return self.shutdown_http().await;
        }
        let mut notes = Vec::new();
        self.close_stdin().await;
        if self.wait_exit(EXIT_GRACE).await.is_none() {
            notes.push(format!("server pid {} did not exit; killed", self.pid));
            self.kill();
        }
        // The server is gone: the client's close has nothing left to wait for.
        if tokio::time::timeout(EXIT_GRACE, self.close())
            .await
            .is_err()
        {
            notes.push("closing the MCP client timed out".to_string());
        }
        let (signals, killed) = self.transport_signals();
        if !signals.is_empty() || killed {
            notes.push(format!(
                "server did not exit on stdin EOF; the transport sent signals {signals:?}{}",
                if killed { " and SIGKILL" } else { "" }
            ));
        }
        self.finish_stderr(Duration::from_secs(2)).await;
        notes
    }

    async fn shutdown_http(&mut self) -> Vec<String> {
        let mut notes = Vec::new();
        if tokio::time::timeout(EXIT_GRACE * 3, self.close())
            .await
            .is_err()
        {
            notes.push("closing the MCP client timed out".to_string());
        }
        if self.exit().is_some() {
            // A step already ended it, and checked how.
            self.finish_stderr(Duration::from_secs(2)).await;
            return notes;
        }
        if let Err(e) = self.signal(nix::sys::signal::Signal::SIGTERM) {
            notes.push(e);
        }
        match self.wait_exit(EXIT_GRACE).await {
            Some(exit) if exit.code == Some(0) => {}
            Some(exit) => notes.push(format!("server ended with {} on SIGTERM", exit.describe())),
            None => {
                notes.push(format!(
                    "server pid {} did not exit on SIGTERM; killed",
                    self.pid
                ));
                self.kill();
            }
        }
        self.finish_stderr(Duration::from_secs(2)).await;
        notes
    }

    fn kill(&self) {
        if lock(&self.log).exit.is_none() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Append everything the server writes on stderr to `buffer`, until EOF.
fn collect_stderr(
    mut pipe: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    buffer: Arc<Mutex<Vec<u8>>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut chunk = [0u8; 8192];
        while let Ok(n) = pipe.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            buffer
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(&chunk[..n]);
        }
    })
}

fn tool_result(result: ServerResult) -> Result<ToolResult, String> {
    match result {
        ServerResult::CallToolResult(r) => serde_json::to_value(r).map_err(|e| e.to_string()),
        other => Ok(json!({"unexpected": format!("{other:?}")})),
    }
}

fn params(tool: &str, args: &Value) -> CallToolRequestParams {
    let params = CallToolRequestParams::new(tool.to_string());
    match args {
        Value::Object(map) => params.with_arguments(map.clone()),
        _ => params,
    }
}

/// The server makes itself not dumpable, so a harness of another user than root could not
/// list its open descriptors (a scenario counts them): such a harness keeps it dumpable
/// (`MCP_TERMINAL_DUMPABLE=1`). Run as root, the server runs as it does for its users.
fn inspectable(cmd: &mut tokio::process::Command) {
    if !nix::unistd::geteuid().is_root() {
        cmd.env("MCP_TERMINAL_DUMPABLE", "1");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIGTERM: i32 = nix::sys::signal::Signal::SIGTERM as i32;

    #[tokio::test]
    async fn observer_records_signals_and_exit_status() {
        let log = SharedLog::default();
        let mut cmd = CommandWrap::from(tokio::process::Command::new("/bin/sleep"));
        cmd.command_mut().arg("30");
        cmd.wrap(Observer {
            log: log.clone(),
            received: Some(Received::default()),
            stdin_gate: None,
        });
        let mut child = cmd.spawn().unwrap();
        child.signal(SIGTERM).unwrap();
        let status = child.wait().await.unwrap();
        assert!(!status.success());
        let log = lock(&log);
        assert_eq!(log.signals, vec![SIGTERM]);
        let exit = log.exit.expect("exit recorded");
        assert_eq!((exit.code, exit.signal), (None, Some(SIGTERM)));
    }
}
