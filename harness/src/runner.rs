//! Running one scenario: a fresh root and config, a fresh server, the steps under the
//! scenario's time bound, then cleanup checks that hold whether the steps passed or not.
//!
//! Flow at a glance: `run_scenario` takes the serial lock and a runtime → `prepare_config`
//! (make-config + merge) → `McpServer::start` → steps (`steps.rs`) → server shutdown →
//! every `process_id` seen must be gone → verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{PoisonError, RwLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::client::{McpServer, Transport};
use crate::evidence::{
    Assertion, Exchange, ScenarioEvidence, StepEvidence, Verdict, abbreviate, stderr_tail,
    without_repeated_text,
};
use crate::procfs::Seen;
use crate::scenario::{Scenario, ServerSetup};
use crate::vars::Vars;

/// `serial` scenarios take the write side; all others share the read side.
static SERIAL: RwLock<()> = RwLock::new(());

/// How long leftover session processes may take to disappear after the server exits.
const LEFTOVER_GRACE: Duration = Duration::from_secs(5);
/// Bound on `make-config`.
const MAKE_CONFIG_TIMEOUT: Duration = Duration::from_secs(30);

/// Which server binary to test, and over which transport; `demo-process` is its sibling.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    pub server: PathBuf,
    pub demo: PathBuf,
    pub transport: Transport,
}

impl ServerSpec {
    pub fn beside(server: PathBuf) -> Self {
        let demo = server.with_file_name("demo-process");
        ServerSpec {
            server,
            demo,
            transport: Transport::Stdio,
        }
    }

    pub fn over(mut self, transport: Transport) -> Self {
        self.transport = transport;
        self
    }
}

/// Run one scenario to a verdict; never panics on server misbehaviour.
pub fn run_scenario(scenario: &Scenario, spec: &ServerSpec) -> ScenarioEvidence {
    let serial = scenario.is_serial();
    let _exclusive = serial.then(|| SERIAL.write().unwrap_or_else(PoisonError::into_inner));
    let _shared = (!serial).then(|| SERIAL.read().unwrap_or_else(PoisonError::into_inner));
    let began = Instant::now();
    let mut ev = ScenarioEvidence::new(&scenario.name, &scenario.description, &scenario.tags);
    if let Some(why) = scenario.missing_requirement() {
        ev.verdict = Verdict::Skipped;
        ev.failure = Some(why);
        return ev;
    }
    if spec.transport != Transport::Stdio && scenario.is_stdio_only() {
        ev.verdict = Verdict::Skipped;
        ev.failure = Some(format!(
            "tagged stdio-only: not run over {}",
            spec.transport.name()
        ));
        return ev;
    }
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(execute(scenario, spec, &mut ev)),
        Err(e) => ev.failure = Some(format!("cannot build a runtime: {e}")),
    }
    ev.duration_ms = began.elapsed().as_millis() as u64;
    ev.verdict = if ev.failure.is_none() && ev.final_checks.iter().all(|c| c.ok) {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    if ev.failure.is_none()
        && let Some(check) = ev.final_checks.iter().find(|c| !c.ok)
    {
        ev.failure = Some(format!(
            "{}: {}",
            check.what,
            check.detail.clone().unwrap_or_default()
        ));
    }
    ev
}

/// A fresh allowed root for the server, and a separate directory for its config.
pub fn root_and_config_dirs(prefix: &str) -> Option<(tempfile::TempDir, tempfile::TempDir)> {
    let dir = |kind: &str| {
        tempfile::Builder::new()
            .prefix(&format!("{prefix}-{kind}-"))
            .tempdir()
            .ok()
    };
    Some((dir("root")?, dir("config")?))
}

async fn execute(scenario: &Scenario, spec: &ServerSpec, ev: &mut ScenarioEvidence) {
    let Some((root_dir, config_dir)) = root_and_config_dirs("mcp-terminal") else {
        ev.failure = Some("cannot create temporary directories".into());
        return;
    };
    // /tmp may be a symlink; the server reports canonical paths.
    let root = match root_dir.path().canonicalize() {
        Ok(root) => root,
        Err(e) => {
            ev.failure = Some(format!("cannot canonicalize the root: {e}"));
            return;
        }
    };
    ev.root = root.display().to_string();
    let mut vars = Vars::default();
    vars.set("root", Value::String(root.display().to_string()));
    vars.set("demo", Value::String(spec.demo.display().to_string()));
    let config_path = config_dir.path().canonicalize().unwrap_or_default();
    vars.set(
        "config_dir",
        Value::String(config_path.display().to_string()),
    );
    if let Err(e) = write_files(&scenario.server, &config_path, &vars) {
        ev.failure = Some(e);
        return;
    }
    let (server_args, config) =
        match prepare_config(&scenario.server, spec, &root, config_dir.path(), &vars).await {
            Ok(prepared) => prepared,
            Err(e) => {
                ev.failure = Some(e);
                return;
            }
        };
    ev.config = config.clone();
    let mut run = Run {
        scenario,
        spec,
        ev,
        started: Instant::now(),
        root,
        config_dir: config_path,
        server_args,
        config,
        vars,
        server: None,
        seen_pids: BTreeMap::new(),
        watched_pids: BTreeMap::new(),
        impostors: BTreeSet::new(),
        background: BTreeMap::new(),
        hung: Vec::new(),
    };
    let bound = Duration::from_millis(scenario.timeout_ms);
    match tokio::time::timeout(bound, run.start_and_run_steps()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => run.ev.failure = Some(e),
        Err(_) => {
            let msg = format!("scenario exceeded its timeout_ms {}", scenario.timeout_ms);
            if let Some(step) = run.ev.steps.last_mut()
                && step.verdict == Verdict::Fail
                && step.error.is_none()
            {
                step.error = Some(msg.clone());
            }
            run.ev.failure = Some(msg);
        }
    }
    run.finish().await;
    drop(root_dir);
}

/// Write the scenario's config: the `make-config` output with the scenario's overrides.
/// Returns the server's arguments and the config written (null without a config).
async fn prepare_config(
    setup: &ServerSetup,
    spec: &ServerSpec,
    root: &Path,
    config_dir: &Path,
    vars: &Vars,
) -> Result<(Vec<String>, Value), String> {
    let mut args = Vec::new();
    if setup.no_config {
        args.extend(setup.args.iter().cloned());
        return Ok((args, Value::Null));
    }
    let path = config_dir.join("config.json");
    let mut config = make_config(&spec.server, &path, root, setup.shells).await?;
    let overrides = vars.subst(&Value::Object(setup.config.clone()))?;
    let profiles = vars.subst(&Value::Object(setup.profiles.clone()))?;
    merge_config(&mut config, &overrides, &profiles)?;
    let pretty = serde_json::to_string_pretty(&config).map_err(|e| e.to_string())?;
    std::fs::write(&path, pretty).map_err(|e| format!("cannot write the config: {e}"))?;
    args.extend(["--config".to_string(), path.display().to_string()]);
    args.extend(setup.args.iter().cloned());
    Ok((args, config))
}

/// Run `server make-config` writing `path` for `root` (with `--shells` if asked), and read
/// what it wrote.
pub(crate) async fn make_config(
    server: &Path,
    path: &Path,
    root: &Path,
    shells: bool,
) -> Result<Value, String> {
    // make-config never overwrites a config: a path written before is written afresh.
    let _ = std::fs::remove_file(path);
    let mut cmd = tokio::process::Command::new(server);
    cmd.arg("make-config")
        .arg("--output")
        .arg(path)
        .arg("--root")
        .arg(root)
        .kill_on_drop(true);
    if shells {
        cmd.arg("--shells");
    }
    let out = tokio::time::timeout(MAKE_CONFIG_TIMEOUT, cmd.output())
        .await
        .map_err(|_| "make-config timed out".to_string())?
        .map_err(|e| format!("cannot run {} make-config: {e}", server.display()))?;
    if !out.status.success() {
        return Err(format!(
            "make-config failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("make-config wrote no readable {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("make-config output is not JSON: {e}"))
}

/// The scenario's `server.files`, written into the config directory with their modes.
fn write_files(setup: &ServerSetup, dir: &Path, vars: &Vars) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    for (name, file) in &setup.files {
        if name.contains('/') || name.starts_with('.') {
            return Err(format!("server.files: `{name}` must be a plain file name"));
        }
        let mode = u32::from_str_radix(&file.mode, 8)
            .map_err(|_| format!("server.files.{name}.mode: `{}` is not octal", file.mode))?;
        let path = dir.join(name);
        std::fs::write(&path, vars.subst_text(&file.text)?)
            .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Top-level keys replace; `commands` entries merge by id, key by key; profiles are added.
fn merge_config(config: &mut Value, overrides: &Value, profiles: &Value) -> Result<(), String> {
    let top = config
        .as_object_mut()
        .ok_or("make-config output is not a JSON object")?;
    for (key, value) in overrides.as_object().into_iter().flatten() {
        match (key.as_str(), top.get_mut(key), value) {
            ("commands", Some(Value::Object(commands)), Value::Object(updates)) => {
                for (id, update) in updates {
                    match (commands.get_mut(id), update) {
                        (Some(Value::Object(profile)), Value::Object(fields)) => {
                            profile.extend(fields.clone());
                        }
                        _ => {
                            commands.insert(id.clone(), update.clone());
                        }
                    }
                }
            }
            _ => {
                top.insert(key.clone(), value.clone());
            }
        }
    }
    if let Some(extra) = profiles.as_object().filter(|p| !p.is_empty()) {
        let commands = top
            .entry("commands")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or("config `commands` is not an object")?;
        commands.extend(extra.clone());
    }
    Ok(())
}

/// One scenario in progress.
pub(crate) struct Run<'a> {
    pub scenario: &'a Scenario,
    pub spec: &'a ServerSpec,
    pub ev: &'a mut ScenarioEvidence,
    pub started: Instant,
    pub root: PathBuf,
    pub config_dir: PathBuf,
    pub server_args: Vec<String>,
    pub config: Value,
    pub vars: Vars,
    pub server: Option<McpServer>,
    /// Every `process_id` any result reported, by PID: all must be gone at the end.
    pub seen_pids: BTreeMap<u32, Seen>,
    /// Other PIDs the scenario named (descendants); killed at the end if still alive.
    pub watched_pids: BTreeMap<u32, Seen>,
    /// PIDs an `impostor` step now holds: no longer a session's, so not `seen_pids`.
    pub impostors: BTreeSet<u32>,
    /// Calls sent with `background`, by name, until their `await` step.
    pub background: BTreeMap<String, crate::steps::Background>,
    /// File systems that never answer (`fs: {hang}`), released once the server is down.
    pub hung: Vec<crate::hung::HungMount>,
}

impl Run<'_> {
    async fn start_and_run_steps(&mut self) -> Result<(), String> {
        let server = McpServer::start_with(
            self.spec.transport,
            &self.spec.server,
            &self.server_args,
            &self.root,
            &self.scenario.server.launch,
        )
        .await?;
        self.vars.set("server_pid", Value::from(server.pid));
        self.server = Some(server);
        let steps = &self.scenario.steps;
        for (index, step) in steps.iter().enumerate() {
            self.ev.steps.push(StepEvidence::new(
                index,
                step.label(index),
                step.action.kind(),
                step.note.clone(),
            ));
            let began = Instant::now();
            let result = self.step(step).await;
            let evidence = self.ev.steps.last_mut().expect("pushed above");
            evidence.duration_ms = began.elapsed().as_millis() as u64;
            match result {
                Ok(()) => evidence.verdict = Verdict::Pass,
                Err(e) => {
                    evidence.error = Some(e.clone());
                    for (later, rest) in steps.iter().enumerate().skip(index + 1) {
                        let mut skipped = StepEvidence::new(
                            later,
                            rest.label(later),
                            rest.action.kind(),
                            rest.note.clone(),
                        );
                        skipped.verdict = Verdict::Skipped;
                        self.ev.steps.push(skipped);
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Cleanup checks, run after the steps whatever their outcome.
    async fn finish(&mut self) {
        if let Some(server) = self.server.as_mut() {
            for note in server.shutdown().await {
                self.ev.final_checks.push(Assertion {
                    what: "server shuts down cleanly".into(),
                    ok: false,
                    detail: Some(note),
                });
            }
            self.ev.server_stderr = stderr_tail(&server.stderr());
        }
        // Before anything walks the root: a walk into a hung mount would block.
        self.hung.clear();
        self.check_never_printed();
        let pids: Vec<Seen> = self.seen_pids.values().copied().collect();
        let left = wait_gone(&pids, LEFTOVER_GRACE).await;
        self.ev.final_checks.push(Assertion {
            what: format!("no session process is left alive ({} seen)", pids.len()),
            ok: left.is_empty(),
            detail: (!left.is_empty()).then(|| format!("still alive: {left:?}")),
        });
        self.kill_leftovers();
    }

    /// `server.never_prints`: no such text in any byte the client received, in the
    /// server's stderr, or in a file under the root or the config directory.
    fn check_never_printed(&mut self) {
        let Some(server) = self.server.as_ref() else {
            return;
        };
        let mut places = vec![
            ("what the client received".to_string(), server.received()),
            (
                "the server's stderr".to_string(),
                server.stderr().into_bytes(),
            ),
        ];
        let declared: Vec<PathBuf> = self
            .scenario
            .server
            .files
            .keys()
            .map(|n| self.config_dir.join(n))
            .collect();
        for dir in [&self.root, &self.config_dir] {
            for path in files_under(dir) {
                if !declared.contains(&path) {
                    let bytes = std::fs::read(&path).unwrap_or_default();
                    places.push((path.display().to_string(), bytes));
                }
            }
        }
        for text in &self.scenario.server.never_prints {
            let text = match self.vars.subst_text(text) {
                Ok(t) => t,
                Err(e) => {
                    self.ev.final_checks.push(Assertion {
                        what: "never_prints".into(),
                        ok: false,
                        detail: Some(e),
                    });
                    continue;
                }
            };
            let found: Vec<&str> = places
                .iter()
                .filter(|(_, bytes)| contains(bytes, text.as_bytes()))
                .map(|(place, _)| place.as_str())
                .collect();
            let searched: usize = places.iter().map(|(_, b)| b.len()).sum();
            self.ev.final_checks.push(Assertion {
                what: format!(
                    "a never_prints text ({} bytes) is in none of {} places ({searched} bytes)",
                    text.len(),
                    places.len()
                ),
                ok: found.is_empty() && !text.is_empty(),
                detail: (!found.is_empty()).then(|| format!("found in {}", found.join(", "))),
            });
        }
    }

    /// Keep the machine clean after a failing server: kill leftover session groups that run
    /// a program this scenario's config names, and the descendants the scenario named.
    fn kill_leftovers(&self) {
        let programs = self.programs();
        let kill = nix::sys::signal::Signal::SIGKILL;
        for seen in self.seen_pids.values() {
            if seen.is_alive() && runs_one_of(seen.pid, &programs) {
                let target = nix::unistd::Pid::from_raw(seen.pid as i32);
                let _ = nix::sys::signal::killpg(target, kill);
                let _ = nix::sys::signal::kill(target, kill);
            }
        }
        for seen in self.watched_pids.values() {
            if seen.is_alive() && Some(seen.pid) != self.server_pid() {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(seen.pid as i32), kill);
            }
        }
    }

    fn server_pid(&self) -> Option<u32> {
        self.server.as_ref().map(|s| s.pid)
    }

    fn programs(&self) -> Vec<String> {
        let mut programs = vec![self.spec.demo.display().to_string()];
        if let Some(commands) = self.config.get("commands").and_then(Value::as_object) {
            programs.extend(
                commands
                    .values()
                    .filter_map(|p| p.pointer("/argv/0")?.as_str().map(str::to_string)),
            );
        }
        programs
    }

    fn step_evidence(&mut self) -> &mut StepEvidence {
        self.ev.steps.last_mut().expect("a step is running")
    }

    /// Record one request/response pair on the running step.
    pub fn record(&mut self, request: Value, response: &Value, began: Instant) {
        let at_ms = began.duration_since(self.started).as_millis() as u64;
        let exchange = Exchange {
            at_ms,
            duration_ms: began.elapsed().as_millis() as u64,
            request: abbreviate(&request),
            response: abbreviate(&without_repeated_text(response)),
        };
        self.step_evidence().record(exchange);
    }

    /// Record an assertion on the running step and pass its result through.
    pub fn check(
        &mut self,
        what: impl Into<String>,
        result: Result<(), String>,
    ) -> Result<(), String> {
        let what = what.into();
        let assertion = Assertion {
            what: what.clone(),
            ok: result.is_ok(),
            detail: result.as_ref().err().cloned(),
        };
        self.step_evidence().assert(assertion);
        result.map_err(|e| format!("{what}: {e}"))
    }

    /// Note every `process_id` in a result, for the final leftover check.
    pub fn note_pids(&mut self, value: &Value) {
        match value {
            Value::Object(map) => {
                for (key, v) in map {
                    if key == "process_id"
                        && let Some(pid) = v.as_u64()
                        && !self.impostors.contains(&(pid as u32))
                    {
                        // First seen now: the session's process started before its PID
                        // was reported.
                        let pid = pid as u32;
                        self.seen_pids.entry(pid).or_insert_with(|| Seen::now(pid));
                    }
                    self.note_pids(v);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| self.note_pids(v)),
            _ => {}
        }
    }
}

/// Wait until none of `pids` is alive; returns those still alive at the deadline.
pub(crate) async fn wait_gone(pids: &[Seen], within: Duration) -> Vec<u32> {
    let deadline = Instant::now() + within;
    loop {
        let alive: Vec<u32> = pids
            .iter()
            .filter(|p| p.is_alive())
            .map(|p| p.pid)
            .collect();
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Every regular file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => dirs.push(entry.path()),
                Ok(t) if t.is_file() => files.push(entry.path()),
                _ => {}
            }
        }
    }
    files
}

fn runs_one_of(pid: u32, programs: &[String]) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    let argv0 = String::from_utf8_lossy(argv0);
    programs.iter().any(|p| *p == argv0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_top_level_commands_and_profiles() {
        let mut config = json!({
            "max_sessions": 8,
            "commands": {"stream": {"argv": ["/d", "stream"], "mode": "pipe", "allowed_env": []}},
        });
        let overrides = json!({
            "max_sessions": 1,
            "commands": {"stream": {"allowed_env": ["FOO"]}, "new": {"argv": ["/x"]}},
        });
        let profiles = json!({"sh": {"argv": ["/bin/sh", "-c", "echo hi"]}});
        merge_config(&mut config, &overrides, &profiles).unwrap();
        assert_eq!(config["max_sessions"], 1);
        assert_eq!(
            config["commands"]["stream"],
            json!({"argv": ["/d", "stream"], "mode": "pipe", "allowed_env": ["FOO"]})
        );
        assert_eq!(config["commands"]["new"], json!({"argv": ["/x"]}));
        assert_eq!(config["commands"]["sh"]["argv"][2], "echo hi");
    }
}
