//! Conformance scenarios: one test per `scenarios/*.yaml` and transport, run by the harness
//! against the `mcp-terminal` binary built for this test: `NAME` over stdio, `http::NAME`
//! over Streamable HTTP (ignored for scenarios tagged `stdio-only`). Evidence of each run is
//! written to `<target tmp dir>/scenario-evidence/<name>[.http].json`.

use std::path::{Path, PathBuf};

use harness::client::Transport;
use harness::libtest_mimic::{self, Arguments, Completion, Failed, Trial};
use harness::{ServerSpec, load_scenarios, run_scenario};

fn main() {
    let args = Arguments::from_args();
    let spec = ServerSpec::beside(PathBuf::from(env!("CARGO_BIN_EXE_mcp-terminal")));
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios"));
    let evidence_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("scenario-evidence");
    let loaded = load_scenarios(dir).expect("the scenarios directory is readable");
    let trials = [Transport::Stdio, Transport::Http]
        .into_iter()
        .flat_map(|transport| loaded.iter().map(move |item| (transport, item)))
        .map(|(transport, item)| {
            let item = item.clone();
            let spec = spec.clone().over(transport);
            let (trial_name, file_name) = match transport {
                Transport::Stdio => (item.name.clone(), item.name.clone()),
                Transport::Http => (
                    format!("http::{}", item.name),
                    format!("{}.http", item.name),
                ),
            };
            let evidence_dir = evidence_dir.clone();
            let kind = match &item.scenario {
                Ok(s) => s.tags.first().cloned().unwrap_or_default(),
                Err(_) => String::new(),
            };
            // A scenario whose `requires` are missing is reported as ignored, with the reason.
            Trial::ignorable_test(trial_name, move || {
                let scenario = item.scenario.map_err(Failed::from)?;
                let ev = run_scenario(&scenario, &spec);
                if let Some(why) = ev.skip_reason() {
                    return Ok(Completion::ignored_with(why));
                }
                let path = evidence_dir.join(format!("{file_name}.json"));
                let saved = std::fs::create_dir_all(&evidence_dir)
                    .and_then(|()| {
                        std::fs::write(&path, serde_json::to_string_pretty(&ev).unwrap_or_default())
                    })
                    .is_ok();
                if ev.passed() {
                    Ok(Completion::Completed)
                } else if saved {
                    Err(format!("{}\nevidence: {}", ev.summary(), path.display()).into())
                } else {
                    Err(ev.summary().into())
                }
            })
            .with_kind(kind)
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
