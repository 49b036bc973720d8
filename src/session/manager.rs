//! The table of retained sessions: starting under the owner's policy and limits, lookup,
//! retention, and ending every session at shutdown.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::gone::{Gone, Why};
use super::lifecycle::{NewSession, RecordTo, Spawned, launch};
use super::state::Reason;
use super::{Origin, Session, Snapshot};
use crate::config::{Config, Mode, OnFull, Shell};
use crate::errors::{ErrorCode, ToolError};
use crate::limits::{
    MAX_CLIENT_ENV, MAX_ENV_ENTRY_BYTES, RECORD_LIMIT_ENDED_SHOWN, SHUTDOWN_GRACE, SPAWN_DEADLINE,
};
use crate::output::{OutputBuffer, Shape};
use crate::policy::{BASE_ENV, TAG_VAR, denied_env_name, resolve_cwd};
use crate::process::{Reaper, SpawnError, SpawnSpec, session_tag, spawn_pipes, spawn_pty};

/// The terminal type PTY children are told they run on.
const TERM: &str = "xterm-256color";
/// What a recording of a pipe session tells players its terminal was: none.
const PIPE_TERM: &str = "dumb";

pub struct StartRequest {
    pub command_id: String,
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    pub timeout_ms: Option<u64>,
    /// Capture each stream whole as it arrives, shaped so, within this many bytes each
    /// (`terminal_run`).
    pub capture: Option<(Shape, usize)>,
}

pub struct Sessions {
    pub config: Arc<Config>,
    reaper: Arc<Reaper>,
    /// This server's instance: the first part of the tag every session's processes carry.
    instance: String,
    /// In creation order.
    table: Mutex<Vec<Arc<Session>>>,
    /// The latest sessions let go of.
    gone: Gone,
    /// Serialises limit checks with the spawn they admit.
    starting: tokio::sync::Mutex<()>,
    /// Starts admitted and still spawning: they count against the limits.
    starting_now: AtomicUsize,
    shutting_down: AtomicBool,
    /// What replaces every configured secret's value by its marker (secrets are fixed for
    /// the server's life), built once: it is used on every audited call and tool error.
    any_secret: Option<crate::output::Redactor>,
}

impl Sessions {
    pub fn new(config: Arc<Config>, reaper: Arc<Reaper>, instance: String) -> Self {
        let any_secret = crate::output::Redactor::new(&every_secret(&config));
        Sessions {
            any_secret,
            config,
            reaper,
            instance,
            table: Mutex::new(Vec::new()),
            gone: Gone::new(),
            starting: tokio::sync::Mutex::new(()),
            starting_now: AtomicUsize::new(0),
            shutting_down: AtomicBool::new(false),
        }
    }

    /// Every retained session, oldest first, after dropping those past retention.
    pub fn retained(&self) -> Vec<Arc<Session>> {
        let retention = Duration::from_secs(self.config.limits.retention_seconds);
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        table.retain(|s| {
            let expired = s.expired(retention);
            if expired {
                s.discard();
                let ended = s.inspect(|state| state.ended_at());
                let at = ended.map_or_else(SystemTime::now, |ended| ended + retention);
                self.gone.record(&s.id, Why::Expired, at);
            }
            !expired
        });
        table.clone()
    }

    /// The session a tool call names; naming it resets its idle time.
    pub fn get(&self, session_id: &str) -> Result<Arc<Session>, ToolError> {
        let session = self
            .retained()
            .into_iter()
            .find(|s| s.id == session_id)
            .ok_or_else(|| {
                let retention = self.config.limits.retention_seconds;
                self.gone.not_found(session_id, retention)
            })?;
        session.touch();
        Ok(session)
    }

    /// What replaces the value of every configured secret by its marker; none when no
    /// secret is configured.
    pub fn any_secret_redactor(&self) -> Option<&crate::output::Redactor> {
        self.any_secret.as_ref()
    }

    /// The command id of a retained session, without naming it (no idle-time reset).
    pub fn command_of(&self, session_id: &str) -> Option<String> {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        table
            .iter()
            .find(|s| s.id == session_id)
            .map(|s| s.command_id.clone())
    }

    /// A session whose profile is a POSIX shell, for `terminal_exec`.
    pub fn shell(&self, session_id: &str) -> Result<Arc<Session>, ToolError> {
        let session = self.get(session_id)?;
        let profile = self.config.commands.get(&session.command_id);
        match profile.and_then(|p| p.shell) {
            Some(Shell::Posix) => Ok(session),
            None => {
                let shells: Vec<&str> = self
                    .config
                    .commands
                    .iter()
                    .filter(|(_, p)| p.shell.is_some())
                    .map(|(id, _)| id.as_str())
                    .collect();
                Err(ToolError::new(
                    ErrorCode::NotAShell,
                    format!(
                        "session {session_id} runs `{}`, which the owner did not approve as a \
                         shell; start a shell profile ({}) for terminal_exec, or use \
                         terminal_write and terminal_wait with this session",
                        session.command_id,
                        shells.join(", ")
                    ),
                ))
            }
        }
    }

    /// Drop a final session now, freeing its place under `max_records`.
    pub fn forget(&self, session_id: &str) -> Result<Snapshot, ToolError> {
        let session = self.get(session_id)?;
        if !session.status().is_final() {
            return Err(ToolError::new(
                ErrorCode::SessionRunning,
                "the session is still running; terminate it first (terminal_terminate), then \
                 forget it",
            ));
        }
        let snapshot = session.snapshot();
        session.discard();
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        table.retain(|s| s.id != session_id);
        // Under the table's lock, so a call looking for it meanwhile finds it in one or
        // the other.
        self.gone
            .record(session_id, Why::Forgotten, SystemTime::now());
        Ok(snapshot)
    }

    pub async fn start(&self, request: StartRequest) -> Result<Arc<Session>, ToolError> {
        let config = &self.config;
        let profile = config.commands.get(&request.command_id).ok_or_else(|| {
            let known: Vec<&str> = config.commands.keys().map(String::as_str).collect();
            ToolError::new(
                ErrorCode::UnknownCommand,
                format!(
                    "no profile `{}` in the owner's config; use one of: {}",
                    request.command_id,
                    known.join(", ")
                ),
            )
        })?;
        let mut env: BTreeMap<String, String> = BASE_ENV
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        if profile.mode == Mode::Pty {
            env.insert("TERM".into(), TERM.into());
        }
        env.extend(profile.env.clone());
        env.extend(client_env(&request.env, &profile.allowed_env)?);
        let id = new_session_id();
        // Last, so neither the profile nor the client can change it.
        env.insert(TAG_VAR.into(), session_tag(&self.instance, &id));
        // A shell lives as long as it is used (its idle timeout ends it); anything else
        // for the default timeout unless the client asks otherwise.
        let timeout_ms = match (request.timeout_ms, profile.shell) {
            (Some(ms), _) => Some(ms),
            (None, Some(Shell::Posix)) => None,
            (None, None) => Some(config.limits.default_timeout_ms),
        };
        // The limits are checked and a place reserved under the admission lock; the spawn,
        // which may block, runs after it is released.
        let reserved = {
            let _admission = self.starting.lock().await;
            if self.shutting_down.load(Ordering::SeqCst) {
                return Err(shutting_down());
            }
            self.check_limits()?;
            Reservation::new(&self.starting_now)
        };
        // The cwd is resolved on the spawner thread, right before the spawn (`OpenCwd`);
        // what it found comes back here.
        let requested = request.cwd.as_deref().unwrap_or(".");
        let found = Arc::new(Mutex::new(None));
        let open_cwd = {
            let (requested, config, found) = (requested.to_owned(), config.clone(), found.clone());
            move || {
                let resolved = resolve_cwd(&requested, &config.default_cwd, &config.allowed_roots);
                let mut found = found.lock().unwrap_or_else(|e| e.into_inner());
                match resolved {
                    Ok(cwd) => {
                        *found = Some(Ok(cwd.path));
                        Ok(cwd.dir)
                    }
                    Err(refusal) => {
                        *found = Some(Err(refusal));
                        Err(SpawnError::Refused)
                    }
                }
            }
        };
        // A one-shot run (`capture`) of a shell profile is the program as it is: no command
        // is typed into it, so no integration is installed (typed into a terminal, it would
        // meet the run's input).
        let integrated = profile.shell.is_some() && request.capture.is_none();
        let spec = SpawnSpec {
            marks: integrated && profile.mode == Mode::Pipe,
            argv: profile.argv.clone(),
            env: env.into_iter().collect(),
            cwd: Box::new(open_cwd),
        };
        let spawned = match profile.mode {
            Mode::Pipe => spawn_pipes(spec, &self.reaper).await.map(Spawned::Pipes),
            Mode::Pty => spawn_pty(spec, profile.rows, profile.cols, &self.reaper)
                .await
                .map(|child| Spawned::Pty {
                    child,
                    rows: profile.rows,
                    cols: profile.cols,
                    emulator_cells: config.limits.emulator_cells(),
                }),
        };
        let cwd_path = match found.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(Err(refusal)) => return Err(refusal),
            Some(Ok(path)) => Some(path),
            // Not opened: the start failed before, or the opening did not finish.
            None => None,
        };
        let shown = || match &cwd_path {
            Some(path) => path.display().to_string(),
            None => requested.to_owned(),
        };
        let spawned = spawned.map_err(|e| match e {
            // Shutdown kills the children of spawns in flight: no fault of the profile's.
            _ if self.shutting_down.load(Ordering::SeqCst) => shutting_down(),
            SpawnError::CwdStuck => ToolError::new(
                ErrorCode::CwdNotAllowed,
                format!(
                    "cwd `{}` did not resolve within {} s: it is on a file system that does \
                     not answer; pick another directory",
                    shown(),
                    SPAWN_DEADLINE.as_secs()
                ),
            ),
            SpawnError::Cwd(why) => ToolError::new(
                ErrorCode::CwdNotAllowed,
                format!(
                    "cwd `{}` {why}; pick a directory the server can enter",
                    shown()
                ),
            ),
            SpawnError::Program(why) => ToolError::new(ErrorCode::SpawnFailed, why),
            SpawnError::OutOfFiles => ToolError::out_of_files(),
            // The opener kept its reason, returned above.
            SpawnError::Refused => ToolError::internal("resolving the cwd stopped"),
        })?;
        // A spawn is made only in a directory that was opened.
        let cwd_path = cwd_path.ok_or_else(|| ToolError::internal("resolving the cwd stopped"))?;
        let origin = Origin {
            argv: profile.argv.clone(),
            cwd: cwd_path.display().to_string(),
            env_names: request.env.keys().cloned().collect(),
        };
        let session = launch(
            NewSession {
                id,
                command_id: request.command_id.clone(),
                buffer: OutputBuffer::new(config.limits.buffer_bytes, config.limits.buffer_records),
                pause: profile.on_full == OnFull::Pause,
                timeout: timeout_ms.map(Duration::from_millis),
                idle_timeout: profile.idle_timeout_ms.map(Duration::from_millis),
                shell: integrated,
                capture: request.capture,
                origin,
                redact: profile
                    .allowed_secrets
                    .iter()
                    .filter_map(|name| {
                        let secret = config.secrets.get(name)?;
                        Some((name.clone(), secret.value.expose().to_owned()))
                    })
                    .collect(),
                redact_typed: every_secret(config),
                record: config
                    .recordings_dir
                    .as_ref()
                    .filter(|_| profile.record)
                    .map(|dir| RecordTo {
                        dir: dir.clone(),
                        argv: profile.argv.clone(),
                        term: match profile.mode {
                            Mode::Pty => TERM,
                            Mode::Pipe => PIPE_TERM,
                        },
                    }),
            },
            spawned,
        );
        // Every start and end: at debug, as the audit log is what records what ran, and a
        // stderr an MCP client keeps would get two lines per one-shot run.
        tracing::debug!(
            session = %session.id,
            pid = session.pid,
            command = %request.command_id,
            cwd = %cwd_path.display(),
            "started"
        );
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(session.clone());
        drop(reserved);
        if self.shutting_down.load(Ordering::SeqCst) {
            // Shutdown began during the spawn and did not see this session.
            session
                .terminate(Reason::Shutdown, SHUTDOWN_GRACE.as_millis() as u64)
                .await;
            return Err(shutting_down());
        }
        Ok(session)
    }

    fn check_limits(&self) -> Result<(), ToolError> {
        let limits = &self.config.limits;
        let retained = self.retained();
        let spawning = self.starting_now.load(Ordering::SeqCst);
        let running = retained.iter().filter(|s| !s.status().is_final()).count() + spawning;
        if running >= limits.max_sessions {
            return Err(ToolError::new(
                ErrorCode::SessionLimit,
                format!(
                    "{running} sessions are running, the owner's limit (max_sessions); \
                     terminate one or wait for one to exit"
                ),
            )
            .with("max_sessions", limits.max_sessions));
        }
        if retained.len() + spawning >= limits.max_records {
            return Err(ToolError::new(
                ErrorCode::RecordLimit,
                format!(
                    "{} sessions are retained, the owner's limit (max_records); finished \
                     sessions stay readable for {} s after they end: free a place now with \
                     terminal_forget on an ended one you have read (error.ended lists them, \
                     longest ended first), or terminate a running one and forget it",
                    retained.len(),
                    self.config.limits.retention_seconds
                ),
            )
            .with("max_records", limits.max_records)
            .with("ended", ended_first(&retained)));
        }
        Ok(())
    }

    /// Refuse new sessions and end every running one with reason `shutdown`.
    pub async fn shutdown(&self, grace_ms: u64) {
        self.shutting_down.store(true, Ordering::SeqCst);
        let _admission = self.starting.lock().await;
        self.reaper.abandon_spawns();
        let mut ending = tokio::task::JoinSet::new();
        for session in self.retained() {
            if !session.status().is_final() {
                ending.spawn(async move {
                    let snapshot = session.terminate(Reason::Shutdown, grace_ms).await;
                    tracing::info!(
                        session = %snapshot.session_id,
                        pid = snapshot.process_id,
                        status = snapshot.status.as_str(),
                        "session ended by server shutdown"
                    );
                });
            }
        }
        while ending.join_next().await.is_some() {}
        let locks = super::LOCK_HOLDS.summary();
        let us = |d: std::time::Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        tracing::info!(
            longest_lock_hold_us = us(locks.longest),
            lock_holds_over_1ms = locks.over_a_millisecond,
            "session state locks"
        );
    }
}

/// The ids of the ended sessions among `retained`, longest ended first, at most
/// `RECORD_LIMIT_ENDED_SHOWN`: what an agent that ran many one-shot commands forgets to
/// start again, without a `terminal_list` of every snapshot first.
fn ended_first(retained: &[Arc<Session>]) -> Vec<String> {
    let mut ended: Vec<(Instant, &str)> = retained
        .iter()
        .filter_map(|s| Some((s.inspect(|state| state.final_since())?, s.id.as_str())))
        .collect();
    ended.sort();
    ended
        .into_iter()
        .take(RECORD_LIMIT_ENDED_SHOWN)
        .map(|(_, id)| id.to_owned())
        .collect()
}

/// The client's variables, each allowed by the profile and by the deny rules.
fn client_env(
    requested: &BTreeMap<String, String>,
    allowed: &[String],
) -> Result<BTreeMap<String, String>, ToolError> {
    if requested.len() > MAX_CLIENT_ENV {
        return Err(ToolError::invalid_argument(
            "env",
            format!(
                "may hold at most {MAX_CLIENT_ENV} variables, got {}",
                requested.len()
            ),
        ));
    }
    for (name, value) in requested {
        let refusal = if let Some(why) = denied_env_name(name) {
            Some(why)
        } else if !allowed.contains(name) {
            Some(format!(
                "`{name}` is not in this profile's allowed_env ({})",
                if allowed.is_empty() {
                    "it allows none".to_owned()
                } else {
                    allowed.join(", ")
                }
            ))
        } else {
            None
        };
        if let Some(why) = refusal {
            return Err(ToolError::new(
                ErrorCode::EnvNotAllowed,
                format!("env {why}; leave it out"),
            )
            .with("name", name.as_str()));
        }
        if value.contains('\0') {
            return Err(ToolError::invalid_argument(
                "env",
                format!("value of `{name}` contains NUL"),
            ));
        }
        // Beyond this the kernel refuses the whole exec (E2BIG), which would read as a
        // broken profile.
        let entry = name.len() + 1 + value.len();
        if entry > MAX_ENV_ENTRY_BYTES {
            return Err(ToolError::invalid_argument(
                "env",
                format!(
                    "`{name}=` and its value make {entry} bytes, over the {MAX_ENV_ENTRY_BYTES} \
                     a process may be given per variable; pass a large value in a file instead"
                ),
            ));
        }
    }
    Ok(requested.clone())
}

/// A place under the limits held by a start until its session is in the table.
struct Reservation<'a>(&'a AtomicUsize);

impl<'a> Reservation<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Reservation(count)
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn shutting_down() -> ToolError {
    ToolError::new(
        ErrorCode::SessionLimit,
        "the server is shutting down and starts no new sessions",
    )
}

/// `(name, value)` of every configured secret.
fn every_secret(config: &Config) -> Vec<(String, String)> {
    config
        .secrets
        .iter()
        .map(|(name, secret)| (name.clone(), secret.value.expose().to_owned()))
        .collect()
}

fn new_session_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}
