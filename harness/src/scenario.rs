//! The scenario language: the types a `scenarios/*.yaml` file deserializes into.
//!
//! Every struct denies unknown keys, so a typo is a load error that names file:line. A step is
//! one flat mapping (`call:` beside `args:` and `expect:`), so it is read into [`StepFields`]
//! and then checked inside the map visitor: errors raised there carry the step's location.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::matcher;

/// Default whole-scenario bound.
const DEFAULT_SCENARIO_TIMEOUT_MS: u64 = 60_000;
/// Upper bound on `repeat.times`, so a typo cannot make a scenario run for hours.
pub const MAX_REPEAT_TIMES: u64 = 1_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default = "default_scenario_timeout")]
    pub timeout_ms: u64,
    #[serde(default)]
    pub server: ServerSetup,
    /// Absolute paths that must exist for the scenario to run (e.g. `/usr/bin/python3`); when
    /// one is missing the scenario is skipped with the reason, never passed.
    #[serde(default)]
    pub requires: Vec<String>,
    pub steps: Vec<Step>,
}

fn default_scenario_timeout() -> u64 {
    DEFAULT_SCENARIO_TIMEOUT_MS
}

impl Scenario {
    /// Parse one scenario file; errors read `path:line:column: message`.
    pub fn from_yaml(path: &Path, text: &str) -> Result<Scenario, String> {
        let scenario: Scenario = yaml_serde::from_str(text).map_err(|e| match e.location() {
            Some(loc) => format!("{}:{}:{}: {e}", path.display(), loc.line(), loc.column()),
            None => format!("{}: {e}", path.display()),
        })?;
        if let Some(bad) = scenario.requires.iter().find(|p| !p.starts_with('/')) {
            return Err(format!(
                "{}: requires: `{bad}` must be an absolute path",
                path.display()
            ));
        }
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if scenario.name != stem {
            return Err(format!(
                "{}:1: name `{}` must equal the file stem `{stem}`",
                path.display(),
                scenario.name
            ));
        }
        Ok(scenario)
    }

    pub fn is_serial(&self) -> bool {
        self.tags.iter().any(|t| t == "serial")
    }

    /// Tagged `stdio-only`: it checks stdio itself (framing, stdin EOF), so other transports
    /// skip it.
    pub fn is_stdio_only(&self) -> bool {
        self.tags.iter().any(|t| t == "stdio-only")
    }

    /// Why the scenario cannot run here: the first required path that does not exist.
    pub fn missing_requirement(&self) -> Option<String> {
        self.requires
            .iter()
            .find(|p| !Path::new(p).exists())
            .map(|p| format!("requires {p}, which does not exist on this machine"))
    }
}

/// How the server under test is configured for one scenario.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSetup {
    /// Merged over the `make-config` output; `commands` entries merge by id.
    #[serde(default)]
    pub config: serde_json::Map<String, Value>,
    /// Extra command profiles added to `commands`.
    #[serde(default)]
    pub profiles: serde_json::Map<String, Value>,
    #[serde(default)]
    pub shells: bool,
    /// Serve with built-in defaults (no `--config`), cwd = the scenario root.
    #[serde(default)]
    pub no_config: bool,
    #[serde(default)]
    pub args: Vec<String>,
    /// What the server process inherits from whoever starts it.
    #[serde(default)]
    pub launch: Launch,
    /// Files written into `${config_dir}` before the server starts: name → content and mode.
    #[serde(default)]
    pub files: BTreeMap<String, FileSpec>,
    /// Texts that must never reach the client, the server's stderr, or any file under
    /// `${root}` and `${config_dir}` (other than `files`): checked after shutdown.
    #[serde(default)]
    pub never_prints: Vec<String>,
}

/// How the server process itself is started, to check it does not pass on what it inherited.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    /// Descriptor numbers left open on /dev/null (not close-on-exec) in the server.
    #[serde(default)]
    pub open_fds: Vec<i32>,
    /// Signals the server starts with ignored, as under `nohup` (`SIGHUP`).
    #[serde(default)]
    pub ignore_signals: Vec<String>,
    /// Start the server with an empty capability bounding set, so that even as root it
    /// obeys file permissions.
    #[serde(default)]
    pub no_capabilities: bool,
    /// Variables added to the server's own environment (e.g. secrets it reads).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The client keeps no copy of the bytes it receives (`received` stays empty), so the
    /// server's output reaches the client without the extra pipe and copy of the tee: the
    /// benchmarks measure the server, not the scenarios' instrument. Not for scenarios.
    #[serde(skip)]
    pub untapped: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    pub text: String,
    /// Permission bits in octal, e.g. "600".
    pub mode: String,
}

/// A JSON matcher (see `matcher.rs`); its operators are checked when the file loads.
#[derive(Debug, Clone)]
pub struct Matcher(pub Value);

impl<'de> Deserialize<'de> for Matcher {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MatcherVisitor)
    }
}

/// Validates inside the visitor, so an unknown operator is located at the matcher's line.
struct MatcherVisitor;

impl MatcherVisitor {
    fn checked<E: de::Error>(value: Value) -> Result<Matcher, E> {
        matcher::validate(&value).map_err(E::custom)?;
        Ok(Matcher(value))
    }
}

impl<'de> Visitor<'de> for MatcherVisitor {
    type Value = Matcher;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a matcher (any YAML value)")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Matcher, A::Error> {
        let value = Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Self::checked(value)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Matcher, A::Error> {
        let value = Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Self::checked(value)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Matcher, E> {
        Ok(Matcher(Value::Bool(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Matcher, E> {
        Ok(Matcher(Value::from(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Matcher, E> {
        Ok(Matcher(Value::from(v)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Matcher, E> {
        Ok(Matcher(Value::from(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Matcher, E> {
        Ok(Matcher(Value::String(v.to_string())))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Matcher, E> {
        Ok(Matcher(Value::Null))
    }

    fn visit_none<E: de::Error>(self) -> Result<Matcher, E> {
        Ok(Matcher(Value::Null))
    }
}

#[derive(Debug, Clone)]
pub struct Step {
    pub name: Option<String>,
    pub note: Option<String>,
    pub action: Action,
}

impl Step {
    /// A short label for reports: the step's name, or its kind.
    pub fn label(&self, index: usize) -> String {
        match &self.name {
            Some(name) => format!("#{index} {name}"),
            None => format!("#{index} {}", self.action.kind()),
        }
    }
}

#[derive(Debug, Clone)]
pub enum Action {
    Call(CallStep),
    Until(UntilStep),
    Collect(CollectStep),
    Process(ProcessStep),
    Server(ServerStep),
    Raw(Vec<RawAction>),
    ListTools(Matcher),
    ServerInfo(Matcher),
    Fs(FsStep),
    Let(LetStep),
    ServerFds(ServerFdsSpec),
    ServerThreads(ServerFdsSpec),
    ServerZombies(ServerFdsSpec),
    ServerRss(ServerRssSpec),
    Repeat(RepeatSpec),
    Impostor(ImpostorSpec),
    Await(AwaitStep),
    Cast(CastStep),
    StringArguments(StringArgumentsSpec),
}

impl Action {
    pub fn kind(&self) -> String {
        match self {
            Action::Call(c) => format!("call {}", c.tool),
            Action::Until(u) => format!("until {}", u.spec.call),
            Action::Collect(_) => "collect".into(),
            Action::Process(_) => "process".into(),
            Action::Server(_) => "server".into(),
            Action::Raw(_) => "raw".into(),
            Action::ListTools(_) => "list_tools".into(),
            Action::ServerInfo(_) => "server_info".into(),
            Action::Fs(_) => "fs".into(),
            Action::Let(l) => format!("let {}", l.var),
            Action::ServerFds(_) => "server_fds".into(),
            Action::ServerThreads(_) => "server_threads".into(),
            Action::ServerZombies(_) => "server_zombies".into(),
            Action::ServerRss(_) => "server_rss".into(),
            Action::Repeat(r) => format!("repeat {} times", r.times),
            Action::Impostor(_) => "impostor".into(),
            Action::Await(a) => format!("await {}", a.name),
            Action::Cast(_) => "cast".into(),
            Action::StringArguments(_) => "string_arguments".into(),
        }
    }
}

pub type Saves = BTreeMap<String, String>;
pub type SaveRegexes = BTreeMap<String, SaveRegex>;

#[derive(Debug, Clone)]
pub struct CallStep {
    pub tool: String,
    pub args: Value,
    pub expect: Option<Matcher>,
    pub expect_error: Option<String>,
    pub save: Saves,
    pub save_regex: SaveRegexes,
    pub cancel_after_ms: Option<u64>,
    /// Match the notifications/progress received for this request (a list of
    /// `{progress, total, message}`); for a cancelled call, those before the cancellation.
    pub progress: Option<Matcher>,
    /// The answer must arrive within this many ms of the request.
    pub within_ms: Option<u64>,
    /// After the cancellation, no progress notification for the request may arrive for this
    /// many ms: the server stopped working on it.
    pub cancel_quiet_ms: Option<u64>,
    /// Send the call and go on at once; an `await` step with this name checks the answer.
    pub background: Option<String>,
}

/// The answer to a call sent with `background`, checked like a call's.
#[derive(Debug, Clone)]
pub struct AwaitStep {
    pub name: String,
    pub expect: Option<Matcher>,
    pub expect_error: Option<String>,
    pub save: Saves,
}

/// Read the server's open file descriptor count: `save` it into a variable, or poll until it
/// `matches` (bounded by `within_ms`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerFdsSpec {
    pub save: Option<String>,
    pub matches: Option<Matcher>,
    #[serde(default = "default_process_within")]
    pub within_ms: u64,
}

/// Read the server's resident memory in KiB (VmRSS): `save` it into a variable, or check
/// it `matches` — less the saved value of `above`, when given — polling up to `within_ms`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerRssSpec {
    pub save: Option<String>,
    pub above: Option<String>,
    pub matches: Option<Matcher>,
    /// The peak so far (VmHWM) instead of the resident memory now.
    #[serde(default)]
    pub peak: bool,
    #[serde(default = "default_process_within")]
    pub within_ms: u64,
}

/// Start an unrelated process (`/bin/sleep`, in a POSIX session and group of its own) at
/// exactly `pid`, a PID that a session used and that is free again, and `save` it. Writes
/// /proc/sys/kernel/ns_last_pid, so it needs root. The process is killed at the end.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImpostorSpec {
    pub pid: Value,
    pub save: String,
}

/// Put `value` in every string argument of every tool tools/list names (a property of type
/// string, each string of an array of strings, each value of an object of strings), one
/// call per argument, the tool's other required arguments from `valid_for` (per tool) or
/// `valid` (by name); check each answer against `expect_for["tool.argument"]` or `expect`,
/// and after each that a well-formed request (tools/list) is served.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StringArgumentsSpec {
    pub value: Value,
    #[serde(default)]
    pub valid: BTreeMap<String, Value>,
    #[serde(default)]
    pub valid_for: BTreeMap<String, BTreeMap<String, Value>>,
    pub expect: Matcher,
    #[serde(default)]
    pub expect_for: BTreeMap<String, Matcher>,
}

/// Run `steps` `times` times; `${<var>}` holds the iteration index, from 0.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepeatSpec {
    pub times: u64,
    #[serde(default = "default_repeat_var")]
    pub var: String,
    pub steps: Vec<Step>,
}

fn default_repeat_var() -> String {
    "i".into()
}

#[derive(Debug, Clone)]
pub struct UntilStep {
    pub spec: UntilSpec,
    pub save: Saves,
    pub save_regex: SaveRegexes,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UntilSpec {
    pub call: String,
    #[serde(default = "empty_object")]
    pub args: Value,
    pub matches: Matcher,
    /// At most this many calls; by default only `within_ms` bounds the step, since calls
    /// that answer at once are no measure of time.
    pub max_calls: Option<u64>,
    #[serde(default = "default_until_within")]
    pub within_ms: u64,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}
fn default_until_within() -> u64 {
    10_000
}

#[derive(Debug, Clone)]
pub struct CollectStep {
    pub spec: CollectSpec,
    pub expect: Option<Matcher>,
    pub assert: Vec<TextAssert>,
    pub save: Saves,
    pub save_regex: SaveRegexes,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectSpec {
    pub session: String,
    #[serde(default = "zero")]
    pub from: Value,
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    #[serde(default = "default_collect_wait")]
    pub wait_ms: u64,
    #[serde(default)]
    pub strip_ansi: bool,
    #[serde(default = "default_max_pages")]
    pub max_pages: u64,
    #[serde(default = "default_collect_within")]
    pub within_ms: u64,
}

fn zero() -> Value {
    Value::from(0)
}
fn default_max_bytes() -> u64 {
    65_536
}
fn default_collect_wait() -> u64 {
    500
}
fn default_max_pages() -> u64 {
    100_000
}
fn default_collect_within() -> u64 {
    30_000
}

/// One string check on a collected field; exactly one check per entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextAssert {
    pub field: String,
    pub contains: Option<String>,
    pub regex: Option<String>,
    pub length: Option<u64>,
    pub sha256: Option<String>,
    pub equals: Option<String>,
}

/// Save capture group 1 of `regex` over a text field (a dot path into the result).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaveRegex {
    pub field: String,
    pub regex: String,
    #[serde(default)]
    pub all: bool,
    /// Save the group as an integer (a cursor, a count) rather than as text.
    #[serde(default)]
    pub integer: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcState {
    Gone,
    Alive,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessStep {
    /// A list of PIDs, or a variable holding one (numbers or numeric strings).
    pub pids: Option<Value>,
    /// Send this signal to `pids` first (e.g. to end a daemon the server cannot reach).
    pub signal: Option<SignalName>,
    /// A process group id: no live process may be in it (for `gone`).
    pub group: Option<Value>,
    pub state: ProcState,
    #[serde(default = "default_process_within")]
    pub within_ms: u64,
    /// Save the server instance from the first of `pids`' session tag into this variable.
    pub save_tag: Option<String>,
    /// Every process tagged by this server instance (see `save_tag`).
    pub tagged: Option<String>,
    /// The live children of this PID that have `with_arg` among their arguments.
    pub children_of: Option<Value>,
    pub with_arg: Option<String>,
    /// Save the PIDs `children_of` selected into this variable.
    pub save: Option<String>,
}

fn default_process_within() -> u64 {
    5_000
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum SignalName {
    #[serde(rename = "SIGTERM")]
    Term,
    #[serde(rename = "SIGINT")]
    Int,
    #[serde(rename = "SIGKILL")]
    Kill,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerStep {
    pub signal: Option<SignalName>,
    #[serde(default)]
    pub close_stdin: bool,
    pub expect_exit: Option<i32>,
    #[serde(default = "default_process_within")]
    pub within_ms: u64,
    pub stderr: Option<Matcher>,
    pub pids: Option<Value>,
}

#[derive(Debug, Clone)]
pub enum RawAction {
    Send(String),
    SendBytesHex(String),
    SendOversized(u64),
    Initialize,
    Expect(Matcher),
    ExpectSilenceMs(u64),
    CloseStdin,
    CloseStdout,
    ExpectExit(i32),
    /// Save fields of the last line `expect` matched (dot paths, as a call's `save`).
    Save(Saves),
    /// Send a signal to the raw server.
    Signal(SignalName),
    Flood(FloodSpec),
}

/// Write `times` requests (`line`, `{n}` numbering them) and a final `ping` with id "last"
/// without reading; after `settle_ms` the server's resident memory may have grown by at most
/// `max_growth_kib`; then every request must have had exactly one answer.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FloodSpec {
    pub line: String,
    pub times: u64,
    pub max_growth_kib: u64,
    #[serde(default = "default_flood_settle")]
    pub settle_ms: u64,
}

fn default_flood_settle() -> u64 {
    3_000
}

impl<'de> Deserialize<'de> for RawAction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(FieldsVisitor::<RawActionFields, RawAction>::new(
            "a raw action",
        ))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawActionFields {
    send: Option<String>,
    send_bytes_hex: Option<String>,
    send_oversized: Option<Oversized>,
    initialize: Option<bool>,
    expect: Option<Matcher>,
    expect_silence_ms: Option<u64>,
    close_stdin: Option<bool>,
    close_stdout: Option<bool>,
    expect_exit: Option<i32>,
    save: Option<Saves>,
    signal: Option<SignalName>,
    flood: Option<FloodSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Oversized {
    bytes: u64,
}

impl TryFrom<RawActionFields> for RawAction {
    type Error = String;
    fn try_from(f: RawActionFields) -> Result<Self, String> {
        let mut found = Vec::new();
        if let Some(s) = f.send {
            found.push(RawAction::Send(s));
        }
        if let Some(s) = f.send_bytes_hex {
            found.push(RawAction::SendBytesHex(s));
        }
        if let Some(o) = f.send_oversized {
            found.push(RawAction::SendOversized(o.bytes));
        }
        if let Some(true) = f.initialize {
            found.push(RawAction::Initialize);
        }
        if let Some(m) = f.expect {
            found.push(RawAction::Expect(m));
        }
        if let Some(ms) = f.expect_silence_ms {
            found.push(RawAction::ExpectSilenceMs(ms));
        }
        if let Some(true) = f.close_stdin {
            found.push(RawAction::CloseStdin);
        }
        if let Some(true) = f.close_stdout {
            found.push(RawAction::CloseStdout);
        }
        if let Some(code) = f.expect_exit {
            found.push(RawAction::ExpectExit(code));
        }
        if let Some(saves) = f.save {
            found.push(RawAction::Save(saves));
        }
        if let Some(signal) = f.signal {
            found.push(RawAction::Signal(signal));
        }
        if let Some(flood) = f.flood {
            found.push(RawAction::Flood(flood));
        }
        match found.len() {
            1 => Ok(found.remove(0)),
            n => Err(format!(
                "a raw action needs exactly one of send, send_bytes_hex, send_oversized, \
                 initialize, expect, expect_silence_ms, close_stdin, close_stdout, expect_exit, save, signal, flood \
                 (found {n})"
            )),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectOnly {
    pub expect: Matcher,
}

/// Read an asciicast recording (`file`) as `{header, events, kinds, cat}`, `cat` being what
/// `asciinema cat` prints; `expect` matches it, `save` keeps fields of it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CastSpec {
    pub file: String,
    /// Read again until `expect` matches, for up to this long (a recording is flushed on
    /// its own schedule); 0 reads once.
    #[serde(default)]
    pub within_ms: u64,
}

#[derive(Debug, Clone)]
pub struct CastStep {
    pub spec: CastSpec,
    pub expect: Option<Matcher>,
    pub save: Saves,
}

/// Define a variable: a literal `value`, or `repeat` text `times` times (large inputs).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LetStep {
    pub var: String,
    pub value: Option<Value>,
    pub repeat: Option<String>,
    pub times: Option<u64>,
}

/// Filesystem preparation inside the scenario root (the harness runs no shell steps).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FsStep {
    pub symlink: Option<FsLink>,
    pub mkdir: Option<String>,
    pub write: Option<FsWrite>,
    pub chmod: Option<FsChmod>,
    pub read: Option<FsRead>,
    /// Mount a file system that never answers here (see `hung`), until the server is shut
    /// down at the end of the scenario.
    pub hang: Option<String>,
}

/// Read a file and match `{text, lines, mode}`: `lines` holds each line parsed as JSON (or
/// as text when it is not JSON), `mode` the permission bits as octal text (`"600"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FsRead {
    pub path: String,
    pub expect: Matcher,
}

/// Set a path's permission bits; `mode` is octal text (`"000"`, `"755"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FsChmod {
    pub path: String,
    pub mode: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FsLink {
    pub path: String,
    pub target: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FsWrite {
    pub path: String,
    pub text: String,
}

impl<'de> Deserialize<'de> for Step {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(FieldsVisitor::<StepFields, Step>::new("a step"))
    }
}

/// Every key a step may hold; which ones apply depends on its kind key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepFields {
    name: Option<String>,
    note: Option<String>,
    call: Option<String>,
    args: Option<Value>,
    expect: Option<Matcher>,
    expect_error: Option<String>,
    save: Option<Saves>,
    cancel_after_ms: Option<u64>,
    until: Option<UntilSpec>,
    collect: Option<CollectSpec>,
    assert: Option<Vec<TextAssert>>,
    save_regex: Option<SaveRegexes>,
    process: Option<ProcessStep>,
    server: Option<ServerStep>,
    raw: Option<Vec<RawAction>>,
    list_tools: Option<ExpectOnly>,
    server_info: Option<ExpectOnly>,
    fs: Option<FsStep>,
    #[serde(rename = "let")]
    let_: Option<LetStep>,
    progress: Option<Matcher>,
    within_ms: Option<u64>,
    cancel_quiet_ms: Option<u64>,
    server_fds: Option<ServerFdsSpec>,
    server_threads: Option<ServerFdsSpec>,
    server_zombies: Option<ServerFdsSpec>,
    server_rss: Option<ServerRssSpec>,
    repeat: Option<RepeatSpec>,
    impostor: Option<ImpostorSpec>,
    background: Option<String>,
    #[serde(rename = "await")]
    await_: Option<String>,
    cast: Option<CastSpec>,
    string_arguments: Option<StringArgumentsSpec>,
}

impl StepFields {
    /// The keys present besides `name`/`note`, for the "does not apply" check.
    fn present(&self) -> Vec<&'static str> {
        let flags = [
            ("call", self.call.is_some()),
            ("args", self.args.is_some()),
            ("expect", self.expect.is_some()),
            ("expect_error", self.expect_error.is_some()),
            ("save", self.save.is_some()),
            ("cancel_after_ms", self.cancel_after_ms.is_some()),
            ("until", self.until.is_some()),
            ("collect", self.collect.is_some()),
            ("assert", self.assert.is_some()),
            ("save_regex", self.save_regex.is_some()),
            ("process", self.process.is_some()),
            ("server", self.server.is_some()),
            ("raw", self.raw.is_some()),
            ("list_tools", self.list_tools.is_some()),
            ("server_info", self.server_info.is_some()),
            ("fs", self.fs.is_some()),
            ("let", self.let_.is_some()),
            ("progress", self.progress.is_some()),
            ("within_ms", self.within_ms.is_some()),
            ("cancel_quiet_ms", self.cancel_quiet_ms.is_some()),
            ("server_fds", self.server_fds.is_some()),
            ("server_threads", self.server_threads.is_some()),
            ("server_zombies", self.server_zombies.is_some()),
            ("server_rss", self.server_rss.is_some()),
            ("repeat", self.repeat.is_some()),
            ("impostor", self.impostor.is_some()),
            ("background", self.background.is_some()),
            ("await", self.await_.is_some()),
            ("cast", self.cast.is_some()),
            ("string_arguments", self.string_arguments.is_some()),
        ];
        flags.iter().filter(|(_, p)| *p).map(|(k, _)| *k).collect()
    }
}

const KINDS: &[&str] = &[
    "call",
    "until",
    "collect",
    "process",
    "server",
    "raw",
    "list_tools",
    "server_info",
    "fs",
    "let",
    "server_fds",
    "server_threads",
    "server_zombies",
    "server_rss",
    "repeat",
    "impostor",
    "await",
    "cast",
    "string_arguments",
];

impl TryFrom<StepFields> for Step {
    type Error = String;
    fn try_from(f: StepFields) -> Result<Self, String> {
        let present = f.present();
        let kinds: Vec<&str> = present
            .iter()
            .copied()
            .filter(|k| KINDS.contains(k))
            .collect();
        let [kind] = kinds[..] else {
            return Err(format!(
                "a step needs exactly one of {} (found: {})",
                KINDS.join(", "),
                kinds.join(", ")
            ));
        };
        let allowed: &[&str] = match kind {
            "call" => &[
                "call",
                "args",
                "expect",
                "expect_error",
                "save",
                "save_regex",
                "cancel_after_ms",
                "progress",
                "within_ms",
                "cancel_quiet_ms",
                "background",
            ],
            "await" => &["await", "expect", "expect_error", "save"],
            "until" => &["until", "save", "save_regex"],
            "collect" => &["collect", "expect", "assert", "save", "save_regex"],
            "cast" => &["cast", "expect", "save"],
            other => &[other][..],
        };
        if let Some(extra) = present.iter().find(|k| !allowed.contains(k)) {
            return Err(format!("`{extra}` does not apply to a `{kind}` step"));
        }
        let action = match kind {
            "call" => {
                if f.expect.is_some() && f.expect_error.is_some() {
                    return Err("use either `expect` or `expect_error`, not both".into());
                }
                if f.cancel_after_ms.is_some()
                    && (f.expect.is_some()
                        || f.expect_error.is_some()
                        || f.save.is_some()
                        || f.save_regex.is_some())
                {
                    return Err("a cancelled call expects no result: drop expect/save".into());
                }
                if f.cancel_after_ms.is_some() && f.within_ms.is_some() {
                    return Err("a cancelled call has no answer to time: drop within_ms".into());
                }
                let plain = [
                    f.expect.is_some(),
                    f.expect_error.is_some(),
                    f.save.is_some(),
                ];
                if f.background.is_some()
                    && (plain.contains(&true)
                        || f.save_regex.is_some()
                        || f.cancel_after_ms.is_some()
                        || f.progress.is_some()
                        || f.within_ms.is_some())
                {
                    return Err(
                        "a background call is checked by its `await` step: move expect/save there"
                            .into(),
                    );
                }
                if f.cancel_quiet_ms.is_some() && f.cancel_after_ms.is_none() {
                    return Err("`cancel_quiet_ms` needs `cancel_after_ms`".into());
                }
                let args = f.args.unwrap_or_else(empty_object);
                if !args.is_object() {
                    return Err("`args` must be a mapping".into());
                }
                Action::Call(CallStep {
                    tool: f.call.unwrap_or_default(),
                    args,
                    expect: f.expect,
                    expect_error: f.expect_error,
                    save: f.save.unwrap_or_default(),
                    save_regex: f.save_regex.unwrap_or_default(),
                    cancel_after_ms: f.cancel_after_ms,
                    progress: f.progress,
                    within_ms: f.within_ms,
                    cancel_quiet_ms: f.cancel_quiet_ms,
                    background: f.background,
                })
            }
            "await" => {
                if f.expect.is_some() && f.expect_error.is_some() {
                    return Err("use either `expect` or `expect_error`, not both".into());
                }
                Action::Await(AwaitStep {
                    name: f.await_.expect("kind key present"),
                    expect: f.expect,
                    expect_error: f.expect_error,
                    save: f.save.unwrap_or_default(),
                })
            }
            "until" => Action::Until(UntilStep {
                spec: f.until.expect("kind key present"),
                save: f.save.unwrap_or_default(),
                save_regex: f.save_regex.unwrap_or_default(),
            }),
            "collect" => {
                let assert = f.assert.unwrap_or_default();
                for a in &assert {
                    let n = [
                        a.contains.is_some(),
                        a.regex.is_some(),
                        a.length.is_some(),
                        a.sha256.is_some(),
                        a.equals.is_some(),
                    ]
                    .iter()
                    .filter(|p| **p)
                    .count();
                    if n != 1 {
                        return Err(format!(
                            "an assert on `{}` needs exactly one of contains, regex, length, \
                             sha256, equals",
                            a.field
                        ));
                    }
                }
                Action::Collect(CollectStep {
                    spec: f.collect.expect("kind key present"),
                    expect: f.expect,
                    assert,
                    save: f.save.unwrap_or_default(),
                    save_regex: f.save_regex.unwrap_or_default(),
                })
            }
            "process" => {
                let p = f.process.expect("kind key present");
                if p.pids.is_none()
                    && p.group.is_none()
                    && p.tagged.is_none()
                    && p.children_of.is_none()
                {
                    return Err(
                        "a process step needs `pids`, `group`, `tagged` or `children_of`".into(),
                    );
                }
                if p.children_of.is_some() != p.with_arg.is_some() {
                    return Err("`children_of` and `with_arg` go together".into());
                }
                if p.save.is_some() && p.children_of.is_none() {
                    return Err("`save` keeps the PIDs `children_of` selected: name it".into());
                }
                if p.save_tag.is_some() && p.pids.is_none() {
                    return Err("`save_tag` reads the tag of the first of `pids`".into());
                }
                if p.signal.is_some() && p.pids.is_none() {
                    return Err("a process step's `signal` goes to `pids`: name them".into());
                }
                Action::Process(p)
            }
            "server" => {
                let s = f.server.expect("kind key present");
                if s.signal.is_none() && !s.close_stdin {
                    return Err("a server step needs `signal` or `close_stdin: true`".into());
                }
                Action::Server(s)
            }
            "cast" => Action::Cast(CastStep {
                spec: f.cast.expect("kind key present"),
                expect: f.expect,
                save: f.save.unwrap_or_default(),
            }),
            "raw" => Action::Raw(f.raw.expect("kind key present")),
            "list_tools" => Action::ListTools(f.list_tools.expect("kind key present").expect),
            "server_info" => Action::ServerInfo(f.server_info.expect("kind key present").expect),
            "fs" => {
                let fs = f.fs.expect("kind key present");
                let n = [
                    fs.symlink.is_some(),
                    fs.mkdir.is_some(),
                    fs.write.is_some(),
                    fs.chmod.is_some(),
                    fs.read.is_some(),
                    fs.hang.is_some(),
                ]
                .iter()
                .filter(|p| **p)
                .count();
                if n != 1 {
                    return Err(
                        "an fs step needs exactly one of symlink, mkdir, write, chmod, read, hang"
                            .into(),
                    );
                }
                Action::Fs(fs)
            }
            "let" => {
                let l = f.let_.expect("kind key present");
                let literal = l.value.is_some() && l.repeat.is_none() && l.times.is_none();
                let repeated = l.value.is_none() && l.repeat.is_some() && l.times.is_some();
                if !literal && !repeated {
                    return Err("a let step needs `value`, or `repeat` with `times`".into());
                }
                Action::Let(l)
            }
            "server_fds" | "server_threads" | "server_zombies" => {
                let spec = match kind {
                    "server_fds" => f.server_fds,
                    "server_threads" => f.server_threads,
                    _ => f.server_zombies,
                }
                .expect("kind key present");
                if spec.save.is_some() == spec.matches.is_some() {
                    return Err(format!("a {kind} step needs exactly one of save, matches"));
                }
                match kind {
                    "server_fds" => Action::ServerFds(spec),
                    "server_threads" => Action::ServerThreads(spec),
                    _ => Action::ServerZombies(spec),
                }
            }
            "server_rss" => {
                let spec = f.server_rss.expect("kind key present");
                let checks = spec.matches.is_some();
                if spec.save.is_some() == checks || (spec.above.is_some() && !checks) {
                    return Err(
                        "a server_rss step needs `save`, or `matches` (with `above`)".into(),
                    );
                }
                Action::ServerRss(spec)
            }
            "repeat" => {
                let r = f.repeat.expect("kind key present");
                if !(1..=MAX_REPEAT_TIMES).contains(&r.times) {
                    return Err(format!("repeat.times must be 1..={MAX_REPEAT_TIMES}"));
                }
                if r.steps.is_empty() {
                    return Err("repeat.steps must not be empty".into());
                }
                Action::Repeat(r)
            }
            "impostor" => Action::Impostor(f.impostor.expect("kind key present")),
            "string_arguments" => {
                Action::StringArguments(f.string_arguments.expect("kind key present"))
            }
            other => unreachable!("kind {other} is in KINDS"),
        };
        Ok(Step {
            name: f.name,
            note: f.note,
            action,
        })
    }
}

/// Reads a mapping into `F`, then converts it to the target type inside `visit_map`, so a
/// conversion error is located at the mapping (a `try_from` attribute would lose the line).
struct FieldsVisitor<F, T> {
    what: &'static str,
    types: std::marker::PhantomData<(F, T)>,
}

impl<F, T> FieldsVisitor<F, T> {
    fn new(what: &'static str) -> Self {
        FieldsVisitor {
            what,
            types: std::marker::PhantomData,
        }
    }
}

impl<'de, F, T> Visitor<'de> for FieldsVisitor<F, T>
where
    F: Deserialize<'de> + TryInto<T, Error = String>,
{
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{} (a mapping)", self.what)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        let fields = F::deserialize(de::value::MapAccessDeserializer::new(map))?;
        fields.try_into().map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Scenario, String> {
        Scenario::from_yaml(Path::new("scenarios/demo.yaml"), text)
    }

    #[test]
    fn parses_a_call_step() {
        let s = load(
            "name: demo\nsteps:\n  - call: terminal_start\n    args: {command_id: stream}\n    \
             save: {sid: session_id}\n",
        )
        .unwrap();
        assert_eq!(s.timeout_ms, DEFAULT_SCENARIO_TIMEOUT_MS);
        let Action::Call(c) = &s.steps[0].action else {
            panic!("not a call")
        };
        assert_eq!(c.tool, "terminal_start");
        assert_eq!(c.save["sid"], "session_id");
    }

    #[test]
    fn unknown_top_level_key_names_file_and_line() {
        let err = load("name: demo\nsteps: []\ntimeout: 5\n").unwrap_err();
        assert!(err.starts_with("scenarios/demo.yaml:3:"), "{err}");
        assert!(err.contains("timeout"), "{err}");
    }

    #[test]
    fn unknown_step_key_names_file_and_line() {
        let err = load(
            "name: demo\nsteps:\n  - call: terminal_status\n    args: {}\n  - call: x\n    \
             expct: {ok: true}\n",
        )
        .unwrap_err();
        assert!(err.starts_with("scenarios/demo.yaml:6:"), "{err}");
        assert!(err.contains("expct"), "{err}");
    }

    #[test]
    fn unknown_nested_key_names_file_and_line() {
        let err = load("name: demo\nsteps:\n  - collect:\n      session: x\n      max_byte: 4\n")
            .unwrap_err();
        assert!(err.starts_with("scenarios/demo.yaml:5:"), "{err}");
        let err = load("name: demo\nsteps:\n  - raw:\n      - initialize: true\n      - sned: x\n")
            .unwrap_err();
        assert!(err.starts_with("scenarios/demo.yaml:5:"), "{err}");
        let err =
            load("name: demo\nserver:\n  config: {}\n  shell: true\nsteps: []\n").unwrap_err();
        assert!(err.starts_with("scenarios/demo.yaml:4:"), "{err}");
    }

    #[test]
    fn misplaced_step_key_names_the_step_line() {
        let err = load(
            "name: demo\nsteps:\n  - call: a\n  - process: {pids: [1], state: gone}\n    \
             expect: {ok: true}\n",
        )
        .unwrap_err();
        assert!(err.starts_with("scenarios/demo.yaml:4:"), "{err}");
        assert!(err.contains("does not apply"), "{err}");
    }

    #[test]
    fn unknown_matcher_operator_names_file_and_line() {
        let err = load("name: demo\nsteps:\n  - call: a\n    expect:\n      ok: {$eqq: true}\n")
            .unwrap_err();
        assert!(err.starts_with("scenarios/demo.yaml:5:"), "{err}");
        assert!(err.contains("$eqq"), "{err}");
    }

    #[test]
    fn name_must_equal_stem() {
        let err = load("name: other\nsteps: []\n").unwrap_err();
        assert!(err.contains("file stem"), "{err}");
    }

    #[test]
    fn parses_progress_timing_and_cancel_options() {
        let s = load(
            "name: demo\nsteps:\n  - call: terminal_wait\n    args: {}\n    \
             progress: {$len: {$ge: 1}}\n    within_ms: 500\n  - call: terminal_wait\n    \
             cancel_after_ms: 300\n    cancel_quiet_ms: 1000\n    progress: {$any: true}\n",
        )
        .unwrap();
        let Action::Call(c) = &s.steps[0].action else {
            panic!("not a call")
        };
        assert!(c.progress.is_some());
        assert_eq!(c.within_ms, Some(500));
        let Action::Call(c) = &s.steps[1].action else {
            panic!("not a call")
        };
        assert_eq!(
            (c.cancel_after_ms, c.cancel_quiet_ms),
            (Some(300), Some(1000))
        );
        let err = load("name: demo\nsteps:\n  - call: x\n    cancel_quiet_ms: 5\n").unwrap_err();
        assert!(err.contains("needs `cancel_after_ms`"), "{err}");
        let err =
            load("name: demo\nsteps:\n  - call: x\n    cancel_after_ms: 5\n    within_ms: 5\n")
                .unwrap_err();
        assert!(err.contains("within_ms"), "{err}");
        let err = load("name: demo\nsteps:\n  - until: {call: x, matches: {}}\n    progress: []\n")
            .unwrap_err();
        assert!(err.contains("does not apply"), "{err}");
    }

    #[test]
    fn parses_server_fds() {
        let s = load(
            "name: demo\nsteps:\n  - server_fds: {save: before}\n  - server_fds: \
             {matches: \"${before}\", within_ms: 3000}\n",
        )
        .unwrap();
        let Action::ServerFds(f) = &s.steps[1].action else {
            panic!("not server_fds")
        };
        assert_eq!(f.within_ms, 3000);
        let err = load("name: demo\nsteps:\n  - server_fds: {}\n").unwrap_err();
        assert!(err.contains("exactly one of save, matches"), "{err}");
    }

    #[test]
    fn parses_nested_repeat_and_bounds_it() {
        let s = load(
            "name: demo\nsteps:\n  - repeat:\n      times: 3\n      steps:\n        - call: a\n",
        )
        .unwrap();
        let Action::Repeat(r) = &s.steps[0].action else {
            panic!("not a repeat")
        };
        assert_eq!((r.times, r.var.as_str(), r.steps.len()), (3, "i", 1));
        let err =
            load("name: demo\nsteps:\n  - repeat: {times: 0, steps: [{call: a}]}\n").unwrap_err();
        assert!(err.contains("repeat.times"), "{err}");
        let err = load("name: demo\nsteps:\n  - repeat: {times: 2000, steps: [{call: a}]}\n")
            .unwrap_err();
        assert!(err.contains("repeat.times"), "{err}");
        // A bad inner step is located at its own line.
        let err = load(
            "name: demo\nsteps:\n  - repeat:\n      times: 2\n      steps:\n        - call: a\n          \
             expct: 1\n",
        )
        .unwrap_err();
        assert!(err.starts_with("scenarios/demo.yaml:7:"), "{err}");
    }

    #[test]
    fn requires_paths_are_absolute_and_checked() {
        let s = load("name: demo\nrequires: [/nonexistent/tool, /bin]\nsteps: []\n").unwrap();
        let why = s.missing_requirement().unwrap();
        assert!(why.contains("/nonexistent/tool"), "{why}");
        let s = load("name: demo\nrequires: [/]\nsteps: []\n").unwrap();
        assert_eq!(s.missing_requirement(), None);
        let err = load("name: demo\nrequires: [python3]\nsteps: []\n").unwrap_err();
        assert!(err.contains("absolute"), "{err}");
    }

    #[test]
    fn process_signal_needs_pids() {
        let s =
            load("name: demo\nsteps:\n  - process: {pids: [5], signal: SIGKILL, state: gone}\n")
                .unwrap();
        let Action::Process(p) = &s.steps[0].action else {
            panic!("not a process step")
        };
        assert_eq!(p.signal, Some(SignalName::Kill));
        let err =
            load("name: demo\nsteps:\n  - process: {group: 5, signal: SIGKILL, state: gone}\n")
                .unwrap_err();
        assert!(err.contains("signal"), "{err}");
    }

    #[test]
    fn step_needs_one_kind() {
        let err = load("name: demo\nsteps:\n  - name: nothing\n").unwrap_err();
        assert!(err.contains("exactly one of"), "{err}");
    }
}
