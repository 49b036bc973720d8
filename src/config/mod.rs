//! The owner's config: which commands a client may start, where, with what limits.
//!
//! Responsibilities: the validated in-memory form (`Config`), loading and validating the
//! JSON file rule by rule (`parse`), the built-in demo profiles and the defaults
//! (`defaults`), and writing a config back out with every field present (`to_json`).
//! Nothing here starts processes or knows about MCP.

mod defaults;
mod edit;
mod parse;
mod secrets;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

pub use defaults::{default_config, shell_profiles};
pub use edit::{ConfigFile, config_path, default_config_path, resolve_program};
pub use parse::{parse_config, parse_config_as};
pub use secrets::{EnvSecrets, Secret, remove_from_environment};

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Canonical (symlink-free) absolute directories.
    pub allowed_roots: Vec<PathBuf>,
    /// Canonical, inside an allowed root.
    pub default_cwd: PathBuf,
    pub commands: BTreeMap<String, Profile>,
    pub limits: Limits,
    pub audit_log: Option<PathBuf>,
    /// Name → secret, values read at start-up.
    pub secrets: BTreeMap<String, Secret>,
    /// Canonical directory for asciicast recordings.
    pub recordings_dir: Option<PathBuf>,
    /// Where `stdio --web` serves the live view (a loopback `IP:PORT`; the next free port
    /// when it is taken).
    pub web_listen: Option<std::net::SocketAddr>,
}

/// The owner-tunable limits (SPEC §3), already checked against their ranges and each other.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub max_sessions: usize,
    pub max_records: usize,
    pub buffer_bytes: usize,
    pub buffer_records: usize,
    pub default_timeout_ms: u64,
    pub max_timeout_ms: u64,
    pub retention_seconds: u64,
    pub max_input_bytes: usize,
    pub max_wait_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_sessions: 8,
            max_records: 32,
            buffer_bytes: 1_048_576,
            buffer_records: 65_536,
            default_timeout_ms: 30_000,
            max_timeout_ms: 300_000,
            retention_seconds: 300,
            max_input_bytes: 65_536,
            max_wait_ms: 60_000,
        }
    }
}

impl Limits {
    /// The cells one session's terminal emulator may hold: its share of the server-wide cap.
    pub fn emulator_cells(&self) -> usize {
        crate::limits::CAP_TOTAL_EMULATOR_CELLS / self.max_records.max(1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pipe,
    Pty,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Pipe => "pipe",
            Mode::Pty => "pty",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    Posix,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFull {
    Evict,
    Pause,
}

impl OnFull {
    pub fn as_str(self) -> &'static str {
        match self {
            OnFull::Evict => "evict",
            OnFull::Pause => "pause",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub argv: Vec<String>,
    /// Fixed variables applied over the base environment.
    pub env: BTreeMap<String, String>,
    /// Names the client may set.
    pub allowed_env: Vec<String>,
    pub mode: Mode,
    pub rows: u16,
    pub cols: u16,
    pub shell: Option<Shell>,
    pub on_full: OnFull,
    pub description: Option<String>,
    /// A session no tool call has named for this long is terminated (reason `timeout`).
    pub idle_timeout_ms: Option<u64>,
    /// Names from `secrets` the client may send to this profile.
    pub allowed_secrets: Vec<String>,
    /// Record this profile's sessions when `recordings_dir` is set.
    pub record: bool,
}

impl Profile {
    pub fn new(argv: Vec<String>, description: &str) -> Self {
        Profile {
            argv,
            env: BTreeMap::new(),
            allowed_env: Vec::new(),
            mode: Mode::Pipe,
            rows: 24,
            cols: 80,
            shell: None,
            on_full: OnFull::Evict,
            description: Some(description.to_owned()),
            idle_timeout_ms: None,
            allowed_secrets: Vec::new(),
            record: true,
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "argv": self.argv,
            "env": self.env,
            "allowed_env": self.allowed_env,
            "mode": self.mode.as_str(),
            "rows": self.rows,
            "cols": self.cols,
            "shell": self.shell.map(|Shell::Posix| "posix"),
            "on_full": self.on_full.as_str(),
            "description": self.description,
            "idle_timeout_ms": self.idle_timeout_ms,
            "allowed_secrets": self.allowed_secrets,
            "record": self.record,
        })
    }
}

/// A command line as a shell would read it back: `echo 'a b' c`, not `echo a b c`.
pub fn shown_argv<S: AsRef<str>>(argv: &[S]) -> String {
    // Only NUL cannot be quoted, and no argv holds one (the config refuses it).
    shlex::try_join(argv.iter().map(AsRef::as_ref))
        .unwrap_or_else(|_| argv.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(" "))
}

impl Config {
    /// The config as the owner would write it, every field present.
    pub fn to_json(&self) -> Value {
        let l = &self.limits;
        let commands: serde_json::Map<String, Value> = self
            .commands
            .iter()
            .map(|(id, p)| (id.clone(), p.to_json()))
            .collect();
        json!({
            "allowed_roots": self.allowed_roots,
            "default_cwd": self.default_cwd,
            "commands": commands,
            "max_sessions": l.max_sessions,
            "max_records": l.max_records,
            "buffer_bytes": l.buffer_bytes,
            "buffer_records": l.buffer_records,
            "default_timeout_ms": l.default_timeout_ms,
            "max_timeout_ms": l.max_timeout_ms,
            "retention_seconds": l.retention_seconds,
            "max_input_bytes": l.max_input_bytes,
            "max_wait_ms": l.max_wait_ms,
            "audit_log": self.audit_log,
            "secrets": self
                .secrets
                .iter()
                .map(|(name, s)| (name.clone(), s.to_json()))
                .collect::<serde_json::Map<String, Value>>(),
            "recordings_dir": self.recordings_dir,
            "web_listen": self.web_listen.map(|a| a.to_string()),
        })
    }

    /// Load and validate a config file; the error names the field and the rule.
    pub fn load(path: &Path) -> Result<Config, String> {
        Config::load_as(path, EnvSecrets::Required)
    }

    /// `load`, reading `env` secrets as `env` says.
    pub fn load_as(path: &Path, env: EnvSecrets) -> Result<Config, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config `{}`: {e}", path.display()))?;
        let value = crate::strict::parse_unique(&text)
            .map_err(|e| format!("config `{}` is not valid JSON: {e}", path.display()))?;
        let cwd = std::env::current_dir()
            .map_err(|e| format!("cannot read the current directory: {e}"))?;
        parse_config_as(&value, &cwd, env)
    }

    /// A one-screen summary for `check-config`.
    pub fn summary(&self) -> String {
        let l = &self.limits;
        let mut out = String::new();
        let roots: Vec<String> = self
            .allowed_roots
            .iter()
            .map(|r| r.display().to_string())
            .collect();
        out.push_str(&format!("allowed_roots: {}\n", roots.join(", ")));
        out.push_str(&format!("default_cwd:   {}\n", self.default_cwd.display()));
        out.push_str(&format!(
            "sessions: {} running, {} retained for {} s; buffer {} bytes / {} records each\n",
            l.max_sessions, l.max_records, l.retention_seconds, l.buffer_bytes, l.buffer_records
        ));
        out.push_str(&format!(
            "timeouts: default {} ms, max {} ms; waits up to {} ms; input up to {} bytes\n",
            l.default_timeout_ms, l.max_timeout_ms, l.max_wait_ms, l.max_input_bytes
        ));
        if let Some(audit) = &self.audit_log {
            out.push_str(&format!("audit_log: {}\n", audit.display()));
        }
        if let Some(dir) = &self.recordings_dir {
            out.push_str(&format!("recordings_dir: {}\n", dir.display()));
        }
        for (name, secret) in &self.secrets {
            out.push_str(&format!("secret {name}: from the {}\n", secret.describe()));
        }
        out.push_str(&format!("commands ({}):\n", self.commands.len()));
        for (id, p) in &self.commands {
            let env = if p.allowed_env.is_empty() {
                String::new()
            } else {
                format!(" env:{}", p.allowed_env.join(","))
            };
            let secrets = if p.allowed_secrets.is_empty() {
                String::new()
            } else {
                format!(" secrets:{}", p.allowed_secrets.join(","))
            };
            // As `profile list` shows it: a shell runs any command line a client sends.
            let kind = match p.shell {
                Some(_) => format!("{} shell", p.mode.as_str()),
                None => p.mode.as_str().to_owned(),
            };
            out.push_str(&format!(
                "  {id:<16} {kind:<10} {}{env}{secrets}\n",
                shown_argv(&p.argv)
            ));
            // Not an error: the config may be made for another machine, or the program
            // installed later. But an owner checking it here should know.
            if !runnable(Path::new(&p.argv[0])) {
                out.push_str(&format!(
                    "    note: `{}` is not an executable file here; starting `{id}` fails \
                     with SPAWN_FAILED\n",
                    p.argv[0]
                ));
            }
        }
        out
    }
}

/// Whether `program` is a regular file this user may execute.
fn runnable(program: &Path) -> bool {
    use nix::unistd::{AccessFlags, access};
    std::fs::metadata(program).is_ok_and(|m| m.is_file())
        && access(program, AccessFlags::X_OK).is_ok()
}
