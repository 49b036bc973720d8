//! Evidence: what a run did and saw, written as one JSON file and read back by `report`.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Strings longer than this are shortened in recorded exchanges (a flood page is 64 KiB).
const MAX_RECORDED_STRING: usize = 1024;
/// Exchanges kept per step: the first and the latest half of these. A step that pages
/// through a 20 MiB flood makes hundreds; the evidence keeps its start and its end.
const MAX_RECORDED_EXCHANGES: usize = 8;
/// Passed assertions kept per step (a failed one is always kept): a loop of 1,000
/// sessions makes thousands.
const MAX_RECORDED_PASSES: usize = 8;
/// Lines of the server's stderr kept: the latest.
const MAX_RECORDED_STDERR_LINES: usize = 40;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    Skipped,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunEvidence {
    pub harness_version: String,
    pub server_path: String,
    pub server_version: String,
    pub git_commit: Option<String>,
    pub os: String,
    /// The transport the scenarios ran over (`stdio` or `http`).
    #[serde(default = "default_transport")]
    pub transport: String,
    pub started_at: String,
    pub finished_at: String,
    pub counts: Counts,
    pub scenarios: Vec<ScenarioEvidence>,
}

fn default_transport() -> String {
    "stdio".into()
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Counts {
    pub total: usize,
    pub passed: usize,
    pub failed: usize,
    /// Scenarios whose `requires` are missing here: neither passed nor failed.
    #[serde(default)]
    pub skipped: usize,
}

impl RunEvidence {
    pub fn count(&mut self) {
        self.counts = Counts {
            total: self.scenarios.len(),
            passed: self.scenarios.iter().filter(|s| s.passed()).count(),
            failed: self
                .scenarios
                .iter()
                .filter(|s| s.verdict == Verdict::Fail)
                .count(),
            skipped: self.skipped().count(),
        };
    }

    fn skipped(&self) -> impl Iterator<Item = &ScenarioEvidence> {
        self.scenarios.iter().filter(|s| s.skip_reason().is_some())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScenarioEvidence {
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
    pub verdict: Verdict,
    pub failure: Option<String>,
    pub started_at: String,
    pub duration_ms: u64,
    pub root: String,
    pub config: Value,
    pub steps: Vec<StepEvidence>,
    /// Checks made after the steps: server exit, leftover processes.
    pub final_checks: Vec<Assertion>,
    pub server_stderr: String,
}

impl ScenarioEvidence {
    pub fn new(name: &str, description: &str, tags: &[String]) -> Self {
        ScenarioEvidence {
            name: name.to_string(),
            description: description.to_string(),
            tags: tags.to_vec(),
            verdict: Verdict::Fail,
            failure: None,
            started_at: now_rfc3339(),
            duration_ms: 0,
            root: String::new(),
            config: Value::Null,
            steps: Vec::new(),
            final_checks: Vec::new(),
            server_stderr: String::new(),
        }
    }

    pub fn passed(&self) -> bool {
        self.verdict == Verdict::Pass
    }

    /// Why the scenario did not run (its `requires` are missing), when it was skipped.
    pub fn skip_reason(&self) -> Option<&str> {
        (self.verdict == Verdict::Skipped).then(|| self.failure.as_deref().unwrap_or("skipped"))
    }

    /// A failure message for a test runner: what failed and where.
    pub fn summary(&self) -> String {
        let mut out = self.failure.clone().unwrap_or_default();
        if let Some(step) = self.steps.iter().find(|s| s.verdict == Verdict::Fail) {
            out = format!("step {} failed:\n{}", step.label, out);
        }
        if !self.server_stderr.is_empty() {
            let tail: Vec<&str> = self.server_stderr.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            out.push_str("\n--- server stderr (last lines) ---\n");
            out.push_str(&tail.join("\n"));
        }
        out
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepEvidence {
    pub index: usize,
    pub label: String,
    pub kind: String,
    pub note: Option<String>,
    pub verdict: Verdict,
    pub duration_ms: u64,
    pub error: Option<String>,
    pub exchanges: Vec<Exchange>,
    /// Exchanges made but not kept (between the first and the latest ones kept).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub exchanges_not_recorded: u64,
    pub assertions: Vec<Assertion>,
    /// Passed assertions made but not kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub passes_not_recorded: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl StepEvidence {
    pub fn new(index: usize, label: String, kind: String, note: Option<String>) -> Self {
        StepEvidence {
            index,
            label,
            kind,
            note,
            verdict: Verdict::Fail,
            duration_ms: 0,
            error: None,
            exchanges: Vec::new(),
            exchanges_not_recorded: 0,
            assertions: Vec::new(),
            passes_not_recorded: 0,
        }
    }

    /// Keep `assertion`: every failure, and passes up to the limit.
    pub fn assert(&mut self, assertion: Assertion) {
        let passes = self.assertions.iter().filter(|a| a.ok).count();
        if assertion.ok && passes >= MAX_RECORDED_PASSES {
            self.passes_not_recorded += 1;
        } else {
            self.assertions.push(assertion);
        }
    }

    /// Keep `exchange`: every one up to the limit, then the first half and the latest.
    pub fn record(&mut self, exchange: Exchange) {
        if self.exchanges.len() == MAX_RECORDED_EXCHANGES {
            self.exchanges.remove(MAX_RECORDED_EXCHANGES / 2);
            self.exchanges_not_recorded += 1;
        }
        self.exchanges.push(exchange);
    }
}

/// One request and what came back, with times relative to the scenario start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Exchange {
    pub at_ms: u64,
    pub duration_ms: u64,
    pub request: Value,
    pub response: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Assertion {
    pub what: String,
    pub ok: bool,
    pub detail: Option<String>,
}

/// A run as committed evidence: the facts of the run and one line of facts per scenario.
/// The full run (every step, exchange and assertion) is written elsewhere, out of the
/// repository; `full_evidence` says where it was.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunSummary {
    pub harness_version: String,
    pub server_path: String,
    pub server_version: String,
    pub git_commit: Option<String>,
    pub os: String,
    pub started_at: String,
    pub finished_at: String,
    pub counts: Counts,
    pub full_evidence: Option<String>,
    pub scenarios: Vec<ScenarioSummary>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScenarioSummary {
    pub name: String,
    pub transport: String,
    pub verdict: Verdict,
    pub steps: usize,
    pub steps_passed: usize,
    pub duration_ms: u64,
    /// What failed and where (with the server's last stderr lines), or why it was skipped.
    pub failure: Option<String>,
    pub tags: Vec<String>,
    pub description: String,
}

impl RunEvidence {
    /// The run as committed evidence; the full run is at `full_evidence`, if written.
    pub fn summary(&self, full_evidence: Option<String>) -> RunSummary {
        let scenarios = self
            .scenarios
            .iter()
            .map(|s| ScenarioSummary {
                name: s.name.clone(),
                transport: self.transport.clone(),
                verdict: s.verdict,
                steps: s.steps.len(),
                steps_passed: s
                    .steps
                    .iter()
                    .filter(|st| st.verdict == Verdict::Pass)
                    .count(),
                duration_ms: s.duration_ms,
                failure: match s.verdict {
                    Verdict::Pass => None,
                    Verdict::Fail => Some(s.summary()),
                    Verdict::Skipped => s.skip_reason().map(str::to_owned),
                },
                tags: s.tags.clone(),
                description: s.description.clone(),
            })
            .collect();
        RunSummary {
            harness_version: self.harness_version.clone(),
            server_path: self.server_path.clone(),
            server_version: self.server_version.clone(),
            git_commit: self.git_commit.clone(),
            os: self.os.clone(),
            started_at: self.started_at.clone(),
            finished_at: self.finished_at.clone(),
            counts: self.counts.clone(),
            full_evidence,
            scenarios,
        }
    }
}

/// The latest lines of the server's stderr, with a count of the earlier ones left out.
pub fn stderr_tail(stderr: &str) -> String {
    last_lines(stderr, MAX_RECORDED_STDERR_LINES)
}

fn last_lines(text: &str, keep: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let skip = lines.len().saturating_sub(keep);
    if skip == 0 {
        return text.to_string();
    }
    format!(
        "[{skip} earlier lines not recorded]\n{}\n",
        lines[skip..].join("\n")
    )
}

/// A tool result's text content that only repeats its structured content (as every result
/// of this server does) is recorded as a note, not a second copy.
pub fn without_repeated_text(response: &Value) -> Value {
    let mut response = response.clone();
    let Some(structured) = response.get("structuredContent").cloned() else {
        return response;
    };
    if let Some(items) = response.get_mut("content").and_then(Value::as_array_mut) {
        for item in items {
            let repeats = item
                .get("text")
                .and_then(Value::as_str)
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                .is_some_and(|v| v == structured);
            if repeats {
                item["text"] = Value::String("(same as structuredContent)".into());
            }
        }
    }
    response
}

/// Shorten long strings so the evidence stays readable; the length is kept.
pub fn abbreviate(value: &Value) -> Value {
    match value {
        Value::String(s) if s.len() > MAX_RECORDED_STRING => {
            let mut end = MAX_RECORDED_STRING;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            Value::String(format!(
                "{}…[{} more bytes not recorded]",
                &s[..end],
                s.len() - end
            ))
        }
        Value::Array(items) => Value::Array(items.iter().map(abbreviate).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), abbreviate(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The environment part of the evidence: versions, commit, OS, start time.
pub fn environment(server: &std::path::Path, workspace: &std::path::Path) -> RunEvidence {
    RunEvidence {
        harness_version: env!("CARGO_PKG_VERSION").to_string(),
        server_path: server.display().to_string(),
        server_version: command_output(Command::new(server).arg("--version"))
            .unwrap_or_else(|| "unknown (--version failed)".into()),
        git_commit: command_output(
            Command::new("git")
                .args(["rev-parse", "HEAD"])
                .current_dir(workspace),
        ),
        os: command_output(Command::new("uname").arg("-srmo"))
            .unwrap_or_else(|| std::env::consts::OS.to_string()),
        started_at: now_rfc3339(),
        ..RunEvidence::default()
    }
}

fn command_output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// Current UTC time as RFC 3339 with milliseconds.
pub fn now_rfc3339() -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(since.as_secs(), since.subsec_millis())
}

fn rfc3339(secs: u64, millis: u32) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400 + 3661, 7), "2000-02-29T01:01:01.007Z");
        assert_eq!(rfc3339(1_767_225_599, 999), "2025-12-31T23:59:59.999Z");
    }

    #[test]
    fn abbreviates_long_strings_only() {
        let long = "é".repeat(3000);
        let v = abbreviate(&json!({"a": [long], "b": "short"}));
        let s = v["a"][0].as_str().unwrap();
        assert!(s.contains("more bytes not recorded"));
        assert_eq!(v["b"], "short");
    }

    #[test]
    fn a_step_keeps_its_first_and_latest_exchanges() {
        let mut step = StepEvidence::new(0, "#0".into(), "call".into(), None);
        for at_ms in 0..20 {
            step.record(Exchange {
                at_ms,
                duration_ms: 0,
                request: Value::Null,
                response: Value::Null,
            });
        }
        let kept: Vec<u64> = step.exchanges.iter().map(|e| e.at_ms).collect();
        assert_eq!(kept, [0, 1, 2, 3, 16, 17, 18, 19]);
        assert_eq!(step.exchanges_not_recorded, 12);
    }

    #[test]
    fn text_that_repeats_the_structured_content_is_not_kept_twice() {
        let structured = serde_json::json!({"ok": true, "n": 1});
        let response = serde_json::json!({
            "content": [{"type": "text", "text": structured.to_string()}, {"type": "text", "text": "other"}],
            "structuredContent": structured,
        });
        let kept = without_repeated_text(&response);
        assert_eq!(kept["content"][0]["text"], "(same as structuredContent)");
        assert_eq!(kept["content"][1]["text"], "other");
        assert_eq!(kept["structuredContent"], response["structuredContent"]);
    }

    #[test]
    fn failures_are_always_kept_and_passes_up_to_a_limit() {
        let mut step = StepEvidence::new(0, "#0".into(), "call".into(), None);
        for i in 0..40 {
            step.assert(Assertion {
                what: format!("{i}"),
                ok: i != 30,
                detail: None,
            });
        }
        assert_eq!(step.assertions.len(), MAX_RECORDED_PASSES + 1);
        assert!(step.assertions.iter().any(|a| !a.ok && a.what == "30"));
        assert_eq!(step.passes_not_recorded, 39 - MAX_RECORDED_PASSES as u64);
    }

    #[test]
    fn stderr_keeps_its_latest_lines() {
        let stderr: String = (0..150).map(|i| format!("line {i}\n")).collect();
        let tail = stderr_tail(&stderr);
        assert!(tail.starts_with("[110 earlier lines not recorded]\nline 110\n"));
        assert!(tail.ends_with("line 149\n"));
        assert_eq!(stderr_tail("a\nb\n"), "a\nb\n");
    }

    #[test]
    fn a_summary_has_a_line_of_facts_per_scenario_and_what_explains_a_failure() {
        let mut passed = StepEvidence::new(0, "#0".into(), "call".into(), None);
        passed.verdict = Verdict::Pass;
        let mut failed = StepEvidence::new(1, "#1 the wait".into(), "call".into(), None);
        failed.verdict = Verdict::Fail;
        let mut ok = ScenarioEvidence::new("ok", "first", &["wait".into()]);
        ok.verdict = Verdict::Pass;
        ok.duration_ms = 12;
        ok.steps.push(passed.clone());
        let mut bad = ScenarioEvidence::new("bad", "second", &[]);
        bad.steps = vec![passed, failed];
        bad.failure = Some("no match".into());
        bad.server_stderr = "the server said why\n".into();
        let mut skipped = ScenarioEvidence::new("skipped", "third", &[]);
        skipped.verdict = Verdict::Skipped;
        skipped.failure = Some("needs /dev/fuse".into());
        let mut run = RunEvidence {
            transport: "http".into(),
            scenarios: vec![ok, bad, skipped],
            ..RunEvidence::default()
        };
        run.count();
        let summary = run.summary(Some("target/evidence/run.full.json".into()));
        assert_eq!(summary.counts.failed, 1);
        assert_eq!(
            summary.full_evidence.as_deref(),
            Some("target/evidence/run.full.json")
        );
        let [ok, bad, skipped] = &summary.scenarios[..] else {
            panic!("{summary:?}");
        };
        assert_eq!(
            (
                ok.transport.as_str(),
                ok.verdict,
                ok.steps,
                ok.steps_passed,
                ok.duration_ms
            ),
            ("http", Verdict::Pass, 1, 1, 12)
        );
        assert_eq!(
            (ok.failure.as_ref(), ok.tags.as_slice()),
            (None, &["wait".to_string()][..])
        );
        assert_eq!((bad.steps, bad.steps_passed), (2, 1));
        let why = bad.failure.as_deref().unwrap();
        assert!(
            why.starts_with("step #1 the wait failed:\nno match"),
            "{why}"
        );
        assert!(why.contains("the server said why"), "{why}");
        assert_eq!(skipped.failure.as_deref(), Some("needs /dev/fuse"));
    }
}
