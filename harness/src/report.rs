//! The acceptance report: Markdown generated from a run's summary.

use std::fmt::Write;

use crate::evidence::{RunSummary, ScenarioSummary, Verdict};

pub fn render(ev: &RunSummary) -> String {
    let mut out = String::new();
    let verdict = if ev.counts.failed == 0 && ev.counts.total > 0 {
        "ACCEPTED"
    } else {
        "NOT ACCEPTED"
    };
    let _ = writeln!(out, "# mcp-terminal acceptance report\n");
    let _ = writeln!(
        out,
        "**{verdict}**: {} of {} scenarios passed, {} failed, {} skipped.\n",
        ev.counts.passed, ev.counts.total, ev.counts.failed, ev.counts.skipped
    );
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(out, "| date | {} – {} |", ev.started_at, ev.finished_at);
    let _ = writeln!(
        out,
        "| commit | {} |",
        ev.git_commit.as_deref().unwrap_or("unknown")
    );
    let _ = writeln!(
        out,
        "| server | `{}` ({}) |",
        ev.server_path, ev.server_version
    );
    let _ = writeln!(out, "| harness | {} |", ev.harness_version);
    let _ = writeln!(out, "| environment | {} |\n", ev.os);

    let _ = writeln!(out, "## Scenarios\n");
    let _ = writeln!(out, "| scenario | tags | verdict | duration | steps |");
    let _ = writeln!(out, "|---|---|---|---:|---:|");
    for s in &ev.scenarios {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {}/{} |",
            s.name,
            s.tags.join(", "),
            verdict_text(s.verdict),
            duration(s.duration_ms),
            s.steps_passed,
            s.steps
        );
    }
    let failed: Vec<&ScenarioSummary> = ev
        .scenarios
        .iter()
        .filter(|s| s.verdict == Verdict::Fail)
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(out, "\n## Failures\n");
        for s in failed {
            let _ = writeln!(out, "### {}\n", s.name);
            if !s.description.is_empty() {
                let _ = writeln!(out, "{}\n", s.description.trim());
            }
            let why = s.failure.as_deref().unwrap_or_default();
            let _ = writeln!(out, "```text\n{}\n```\n", fence_safe(why));
        }
    }
    let skipped: Vec<(&str, &str)> = ev
        .scenarios
        .iter()
        .filter(|s| s.verdict == Verdict::Skipped)
        .map(|s| (s.name.as_str(), s.failure.as_deref().unwrap_or("skipped")))
        .collect();
    if !skipped.is_empty() {
        let _ = writeln!(out, "\n## Skipped\n");
        for (name, why) in skipped {
            let _ = writeln!(out, "- {name}: {why}");
        }
    }
    let _ = writeln!(out, "\n## Scenario descriptions\n");
    for s in &ev.scenarios {
        let _ = writeln!(
            out,
            "- **{}**: {}",
            s.name,
            s.description.trim().replace('\n', " ")
        );
    }
    out
}

fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

fn verdict_text(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Fail => "**FAIL**",
        Verdict::Skipped => "skipped",
    }
}

/// Keep a code block closed whatever the failure text holds.
fn fence_safe(text: &str) -> String {
    text.replace("```", "'''")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::{RunEvidence, ScenarioEvidence};

    #[test]
    fn renders_table_and_failures() {
        let mut pass = ScenarioEvidence::new("a", "first", &["reference".into()]);
        pass.verdict = Verdict::Pass;
        pass.duration_ms = 1500;
        assert_eq!(duration(24), "24 ms");
        let mut fail = ScenarioEvidence::new("b", "second", &[]);
        fail.failure = Some("boom".into());
        let mut run = RunEvidence {
            scenarios: vec![pass, fail],
            git_commit: Some("abc123".into()),
            ..RunEvidence::default()
        };
        run.count();
        let md = render(&run.summary(None));
        assert!(md.contains("**NOT ACCEPTED**: 1 of 2"), "{md}");
        assert!(
            md.contains("| a | reference | pass | 1.5 s | 0/0 |"),
            "{md}"
        );
        assert!(md.contains("| b |  | **FAIL** |"), "{md}");
        assert!(md.contains("### b"), "{md}");
        assert!(md.contains("boom"), "{md}");
        assert!(md.contains("abc123"), "{md}");
    }
}
