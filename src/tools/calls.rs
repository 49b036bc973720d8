//! One function per tool: what each call takes from its arguments, checks beyond their
//! schema, asks of the session layer and answers. `dispatch` names them; the schemas are in
//! `catalog.rs`, the decoding in `params.rs`.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::sys::signal::Signal;
use rmcp::RoleServer;
use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::keys::{KEY_NAMES, key_bytes};
use super::params::Args;
use super::{TerminalServer, ok};
use crate::config::Mode;
use crate::errors::{ErrorCode, ToolError};
use crate::limits::{IDLE_MAX_MS, IDLE_MIN_MS, PROGRESS_EVERY, TERMINAL_LINE_MAX_BYTES};
use crate::output::{Search, Shape, Stream};
use crate::session::{
    ExecRequest, OnTimeout, ReadFrom, Reason, Session, StartRequest, Streams, Target, WaitRequest,
};

impl TerminalServer {
    /// Answer one call of `tool` with arguments already decoded against its schema.
    pub(super) async fn dispatch(
        &self,
        tool: &str,
        args: &Args,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ToolError> {
        let cancel = &context.ct;
        match tool {
            "terminal_start" => self.start(args).await,
            "terminal_run" => self.run(args, context).await,
            "terminal_read" => self.read(args).await,
            "terminal_write" => self.write(args, cancel).await,
            "terminal_status" => ok(self.session(args)?.snapshot()),
            "terminal_terminate" => ok(self
                .session(args)?
                .terminate(Reason::User, args.int("grace_ms"))
                .await),
            "terminal_list" => self.list(),
            "terminal_forget" => self.forget(args),
            "terminal_wait" => self.wait(args, context).await,
            "terminal_signal" => self.signal(args).await,
            "terminal_keys" => self.keys(args, cancel).await,
            "terminal_resize" => self.resize(args).await,
            "terminal_screen" => ok(self
                .session(args)?
                .screen(args.int("scrollback") as usize)
                .await?),
            "terminal_exec" => self.exec(args, context).await,
            other => Err(ToolError::internal(format!("tool {other} has no handler"))),
        }
    }

    /// The session the call names (naming it restarts its idle time).
    fn session(&self, args: &Args) -> Result<Arc<Session>, ToolError> {
        self.sessions
            .get(args.str("session_id").unwrap_or_default())
    }

    fn max_input_bytes(&self) -> usize {
        self.sessions.config.limits.max_input_bytes
    }

    async fn start(&self, args: &Args) -> Result<Value, ToolError> {
        let request = StartRequest {
            command_id: args.str("command_id").unwrap_or_default().to_owned(),
            cwd: args.str("cwd").map(str::to_owned),
            env: args.str_map("env"),
            timeout_ms: args.opt_int("timeout_ms"),
            capture: None,
        };
        ok(self.sessions.start(request).await?.snapshot())
    }

    async fn run(
        &self,
        args: &Args,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ToolError> {
        let stdin = args.str("stdin").unwrap_or_default();
        let limit = self.max_input_bytes();
        if stdin.len() > limit {
            return Err(ToolError::new(
                ErrorCode::InputTooLarge,
                format!(
                    "stdin is {} bytes, over the limit of {limit}; nothing was started: put \
                     the input in a file the command reads instead",
                    stdin.len()
                ),
            ));
        }
        let command_id = args.str("command_id").unwrap_or_default();
        let on_terminal = self
            .sessions
            .config
            .commands
            .get(command_id)
            .is_some_and(|profile| profile.mode == Mode::Pty);
        // A terminal reading lines drops what is typed past this much of a line.
        let longest = stdin.split(['\n', '\r']).map(str::len).max().unwrap_or(0);
        if on_terminal && longest >= TERMINAL_LINE_MAX_BYTES {
            return Err(ToolError::new(
                ErrorCode::InputTooLarge,
                format!(
                    "stdin has a line of {longest} bytes, and a terminal reading lines keeps \
                     at most {} of a line (the rest is dropped); nothing was started: split \
                     the line, put the input in a file, or use a profile on pipes",
                    TERMINAL_LINE_MAX_BYTES - 1
                ),
            ));
        }
        let timeout_ms = args.int("timeout_ms");
        let shape = if args.bool("strip_ansi") {
            Shape::Strip
        } else {
            Shape::Raw
        };
        let request = StartRequest {
            command_id: args.str("command_id").unwrap_or_default().to_owned(),
            cwd: args.str("cwd").map(str::to_owned),
            env: args.str_map("env"),
            timeout_ms: Some(timeout_ms),
            capture: Some((shape, args.int("max_bytes") as usize)),
        };
        let session = self.sessions.start(request).await?;
        let _naming = session.naming_call();
        let running = session.run_to_end(stdin, Duration::from_millis(timeout_ms), &context.ct);
        ok(with_progress(running, context, timeout_ms, || "running".to_owned()).await)
    }

    async fn read(&self, args: &Args) -> Result<Value, ToolError> {
        let from = match args.opt_int("tail_lines") {
            Some(_) if args.has("cursor") => {
                return Err(ToolError::invalid_argument(
                    "tail_lines",
                    "cannot be combined with cursor; pass one of the two",
                ));
            }
            Some(lines) => ReadFrom::Tail(lines as usize),
            None => ReadFrom::Cursor(args.int("cursor")),
        };
        let session = self.session(args)?;
        let _naming = session.naming_call();
        let mut result = session
            .read(
                from,
                args.int("max_bytes") as usize,
                Duration::from_millis(args.int("wait_ms")),
                args.bool("strip_ansi"),
            )
            .await?;
        let records = std::mem::take(&mut result.records);
        let mut value = ok(result)?;
        if let Value::Object(fields) = &mut value {
            // Moved in, not copied as `ok` would copy them.
            let records = records.into_iter().map(Value::from).collect();
            fields.insert("records".into(), Value::Array(records));
        }
        Ok(value)
    }

    async fn write(&self, args: &Args, cancel: &CancellationToken) -> Result<Value, ToolError> {
        let close = args.bool("close_stdin");
        let limit = self.max_input_bytes();
        let session = self.session(args)?;
        let (accepted_bytes, stdin_closed) = match (args.str("text"), args.str("secret")) {
            (Some(text), None) => session.write(text, close, limit, cancel).await?,
            (None, Some(name)) => {
                let value = self.allowed_secret(&session.command_id, name)?;
                session
                    .write_secret(name, value, close, limit, cancel)
                    .await?
            }
            (Some(_), Some(_)) | (None, None) => {
                return Err(ToolError::invalid_argument(
                    "text",
                    "and `secret`: pass exactly one of the two (text to type, or the name of \
                     an owner-held secret)",
                ));
            }
        };
        ok(json!({"accepted_bytes": accepted_bytes, "stdin_closed": stdin_closed}))
    }

    fn list(&self) -> Result<Value, ToolError> {
        let sessions = &self.sessions;
        let snapshots: Vec<_> = sessions.retained().iter().map(|s| s.snapshot()).collect();
        let running = snapshots.iter().filter(|s| !s.status.is_final()).count();
        ok(json!({
            "running": running,
            "retained": snapshots.len(),
            "max_sessions": sessions.config.limits.max_sessions,
            "max_records": sessions.config.limits.max_records,
            "sessions": snapshots,
        }))
    }

    fn forget(&self, args: &Args) -> Result<Value, ToolError> {
        let id = args.str("session_id").unwrap_or_default();
        self.sessions.forget(id)?;
        ok(json!({ "forgotten": id }))
    }

    async fn signal(&self, args: &Args) -> Result<Value, ToolError> {
        let signal = Signal::from_str(args.choice("signal"))
            .map_err(|_| ToolError::invalid_argument("signal", "is not a signal"))?;
        let target = match args.choice("target") {
            "leader" => Target::Leader,
            "command" => Target::Command,
            _ => Target::Group,
        };
        let session = self.session(args)?;
        session.signal(signal, target).await?;
        ok(session.snapshot())
    }

    async fn keys(&self, args: &Args, cancel: &CancellationToken) -> Result<Value, ToolError> {
        let mut bytes = Vec::new();
        for name in args.str_list("keys") {
            let key = key_bytes(name).ok_or_else(|| {
                ToolError::invalid_argument(
                    "keys",
                    format!("holds `{name}`, which is not a key name; valid names: {KEY_NAMES}"),
                )
            })?;
            bytes.extend(key);
        }
        let limit = self.max_input_bytes();
        if bytes.len() > limit {
            return Err(ToolError::new(
                ErrorCode::InputTooLarge,
                format!(
                    "the keys make {} bytes, over the limit of {limit}; nothing was sent: send \
                     fewer keys per call",
                    bytes.len()
                ),
            ));
        }
        let session = self.session(args)?;
        session.check_keys(&bytes)?;
        let stdin_closed = session.send(&bytes, false, cancel).await?;
        ok(json!({"accepted_bytes": bytes.len(), "stdin_closed": stdin_closed}))
    }

    async fn resize(&self, args: &Args) -> Result<Value, ToolError> {
        let (rows, cols) = (args.int("rows") as u16, args.int("cols") as u16);
        self.session(args)?.resize(rows, cols).await?;
        ok(json!({ "rows": rows, "cols": cols }))
    }

    async fn exec(
        &self,
        args: &Args,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ToolError> {
        let session = self
            .sessions
            .shell(args.str("session_id").unwrap_or_default())?;
        let request = exec_request(args)?;
        let executing = session.exec(&request, self.max_input_bytes(), &context.ct);
        let total_ms = request.timeout.as_millis() as u64;
        let result = with_progress(executing, context, total_ms, || "running".to_owned()).await;
        session.touch();
        ok(result?)
    }

    /// The value of secret `name` if the session's profile allows it; the error lists the
    /// names that are allowed, never a value.
    fn allowed_secret(&self, command_id: &str, name: &str) -> Result<&str, ToolError> {
        let config = &self.sessions.config;
        let allowed: &[String] = config
            .commands
            .get(command_id)
            .map_or(&[], |p| p.allowed_secrets.as_slice());
        match config.secrets.get(name) {
            Some(secret) if allowed.iter().any(|a| a == name) => Ok(secret.value.expose()),
            _ => Err(ToolError::new(
                ErrorCode::SecretNotAllowed,
                format!(
                    "secret `{name}` is not one the owner allows for `{command_id}`; allowed: {}",
                    if allowed.is_empty() {
                        "none (the owner lists them in the profile's allowed_secrets)".to_owned()
                    } else {
                        allowed.join(", ")
                    }
                ),
            )
            .with("allowed", allowed.to_vec())),
        }
    }

    /// `terminal_wait`, reporting progress while it waits when the request asked for it.
    async fn wait(
        &self,
        args: &Args,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ToolError> {
        let session = self
            .sessions
            .get(args.str("session_id").unwrap_or_default())?;
        let _naming = session.naming_call();
        let search = match args.str("pattern") {
            Some(pattern) => Some(Search::compile_for_client(pattern).await?),
            None => None,
        };
        let streams = match args.choice("stream") {
            "stdout" => Streams::Only(Stream::Stdout),
            "stderr" => Streams::Only(Stream::Stderr),
            _ => Streams::Any,
        };
        let timeout_ms = args.int("timeout_ms");
        let idle_ms = args.int("idle_ms");
        if (1..IDLE_MIN_MS).contains(&idle_ms) {
            return Err(ToolError::invalid_argument(
                "idle_ms",
                format!("must be 0 (off) or from {IDLE_MIN_MS} to {IDLE_MAX_MS}, got {idle_ms}"),
            ));
        }
        let request = WaitRequest {
            idle: (idle_ms > 0).then(|| Duration::from_millis(idle_ms)),
            cursor: args.int("cursor"),
            search,
            streams,
            timeout: Duration::from_millis(timeout_ms),
            strip_ansi: args.bool("strip_ansi"),
            until_input: args.bool("until_input"),
        };
        let searched = AtomicU64::new(0);
        // On the heap: a wait's state (its search, timers and snapshot) is several KiB, and
        // every tool call's future is as large as its largest tool's, moved whole into the
        // task that runs it.
        let waiting = Box::pin(session.wait(request, &searched, &context.ct));
        let message = || {
            let searched = searched.load(Ordering::Relaxed);
            format!("waiting; {searched} code points searched")
        };
        ok(with_progress(waiting, context, timeout_ms, message).await?)
    }
}

/// `work`, reporting progress while it runs when the request asked for it (it carries a
/// progress token): every `PROGRESS_EVERY`, the milliseconds so far out of
/// `total_ms`, and `message`. A client that gives up on a call it hears nothing from hears
/// that it still runs.
async fn with_progress<T>(
    work: impl Future<Output = T>,
    context: &RequestContext<RoleServer>,
    total_ms: u64,
    message: impl Fn() -> String,
) -> T {
    let Some(token) = context.meta.get_progress_token() else {
        return work.await;
    };
    let mut work = std::pin::pin!(work);
    let started = tokio::time::Instant::now();
    // The first report is due one period from now (awaiting an immediate first tick
    // would cost a timer turn on every call).
    let mut ticks = tokio::time::interval_at(started + PROGRESS_EVERY, PROGRESS_EVERY);
    // Progress only ever grows: once it reached the total (the call goes on past its
    // timeout while what it stopped settles), it is not reported again.
    let mut reported = None;
    loop {
        tokio::select! {
            result = &mut work => return result,
            _ = ticks.tick() => {
                let elapsed = (started.elapsed().as_millis() as u64).min(total_ms);
                if reported.is_some_and(|last| elapsed <= last) {
                    continue;
                }
                reported = Some(elapsed);
                let progress = ProgressNotificationParam::new(token.clone(), elapsed as f64)
                    .with_total(total_ms as f64)
                    .with_message(message());
                let _ = context.peer.notify_progress(progress).await;
            }
        }
    }
}

/// What a `terminal_exec` call asks for: a command, or `continue` (whose output options were
/// set by the call that started the command).
fn exec_request(args: &Args) -> Result<ExecRequest, ToolError> {
    let resume = args.bool("continue");
    let command = match (args.str("command"), resume) {
        (Some(command), false) => Some(command.to_owned()),
        (None, true) => None,
        (Some(_), true) | (None, false) => {
            return Err(ToolError::invalid_argument(
                "command",
                "and `continue`: pass exactly one (a command line to run, or continue: true \
                 to wait for the command still running)",
            ));
        }
    };
    if resume {
        for name in ["max_bytes", "strip_ansi", "raw"] {
            if args.has(name) {
                return Err(ToolError::invalid_argument(
                    name,
                    "cannot be combined with continue: the call that started the command \
                     chose how its output is returned",
                ));
            }
        }
    }
    let on_timeout = match (args.has("on_timeout"), args.choice("on_timeout"), resume) {
        (true, "keep", _) | (false, _, true) => OnTimeout::Keep,
        _ => OnTimeout::Interrupt,
    };
    Ok(ExecRequest {
        command,
        timeout: Duration::from_millis(args.int("timeout_ms")),
        on_timeout,
        max_bytes: args.int("max_bytes") as usize,
        strip_ansi: args.bool("strip_ansi"),
        raw: args.bool("raw"),
    })
}
