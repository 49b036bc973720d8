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
    #[serde(default = "default_max_calls")]
    pub max_calls: u64,
    #[serde(default = "default_until_within")]
    pub within_ms: u64,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}
fn default_max_calls() -> u64 {
    200
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
    /// A process group id: no live process may be in it (for `gone`).
    pub group: Option<Value>,
    pub state: ProcState,
    #[serde(default = "default_process_within")]
    pub within_ms: u64,
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
    ExpectExit(i32),
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
    expect_exit: Option<i32>,
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
        if let Some(code) = f.expect_exit {
            found.push(RawAction::ExpectExit(code));
        }
        match found.len() {
            1 => Ok(found.remove(0)),
            n => Err(format!(
                "a raw action needs exactly one of send, send_bytes_hex, send_oversized, \
                 initialize, expect, expect_silence_ms, close_stdin, expect_exit (found {n})"
            )),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectOnly {
    pub expect: Matcher,
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
        ];
        flags.iter().filter(|(_, p)| *p).map(|(k, _)| *k).collect()
    }
}

const KINDS: [&str; 10] = [
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
            ],
            "until" => &["until", "save", "save_regex"],
            "collect" => &["collect", "expect", "assert", "save", "save_regex"],
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
                if p.pids.is_none() && p.group.is_none() {
                    return Err("a process step needs `pids` or `group`".into());
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
            "raw" => Action::Raw(f.raw.expect("kind key present")),
            "list_tools" => Action::ListTools(f.list_tools.expect("kind key present").expect),
            "server_info" => Action::ServerInfo(f.server_info.expect("kind key present").expect),
            "fs" => {
                let fs = f.fs.expect("kind key present");
                let n = [fs.symlink.is_some(), fs.mkdir.is_some(), fs.write.is_some()]
                    .iter()
                    .filter(|p| **p)
                    .count();
                if n != 1 {
                    return Err("an fs step needs exactly one of symlink, mkdir, write".into());
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
    fn step_needs_one_kind() {
        let err = load("name: demo\nsteps:\n  - name: nothing\n").unwrap_err();
        assert!(err.contains("exactly one of"), "{err}");
    }
}
