//! Conformance scenarios: one test per `scenarios/*.yaml`, run by the harness against the
//! `mcp-terminal` binary built for this test. Evidence of each run is written to
//! `<target tmp dir>/scenario-evidence/<name>.json`.

use std::path::{Path, PathBuf};

use harness::libtest_mimic::{self, Arguments, Completion, Failed, Trial};
use harness::{ServerSpec, load_scenarios, run_scenario};

fn main() {
    let args = Arguments::from_args();
    let spec = ServerSpec::beside(PathBuf::from(env!("CARGO_BIN_EXE_mcp-terminal")));
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios"));
    let evidence_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("scenario-evidence");
    let loaded = load_scenarios(dir).expect("the scenarios directory is readable");
    let trials = loaded
        .into_iter()
        .map(|item| {
            let spec = spec.clone();
            let evidence_dir = evidence_dir.clone();
            let kind = match &item.scenario {
                Ok(s) => s.tags.first().cloned().unwrap_or_default(),
                Err(_) => String::new(),
            };
            // A scenario whose `requires` are missing is reported as ignored, with the reason.
            Trial::ignorable_test(item.name.clone(), move || {
                let scenario = item.scenario.map_err(Failed::from)?;
                let ev = run_scenario(&scenario, &spec);
                if let Some(why) = ev.skip_reason() {
                    return Ok(Completion::ignored_with(why));
                }
                let path = evidence_dir.join(format!("{}.json", ev.name));
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
