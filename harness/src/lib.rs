//! Conformance harness for mcp-terminal: a YAML scenario language and a runner that drives
//! the real server through a real MCP client (rmcp) and records evidence. The language is
//! described in `harness/README.md`.
//!
//! Responsibilities:
//! - `scenario`: the language types (unknown keys are errors that name file:line);
//! - `matcher`, `vars`, `collect`: pure logic, unit-tested;
//! - `client`, `raw`, `procfs`: the server under test and the processes it starts;
//! - `hung`: a file system that never answers (a FUSE mount nobody serves);
//! - `runner`, `steps`: one scenario from fresh root to verdict;
//! - `evidence`, `report`: the JSON record of a run and the Markdown acceptance report;
//! - `bench`: speed and memory of the server through the same client;
//! - `soak`: a bounded mixed workload for minutes, with its drift figures.

pub mod bench;
pub mod cast;
pub mod client;
pub mod collect;
pub mod evidence;
pub mod floor;
pub mod hung;
pub mod matcher;
pub mod procfs;
pub mod raw;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod soak;
mod steps;
pub mod vars;

use std::path::{Path, PathBuf};

pub use evidence::{RunEvidence, ScenarioEvidence};
/// Re-exported so a test target can run scenarios as trials with only `harness` as a
/// dev-dependency.
pub use libtest_mimic;
pub use runner::{ServerSpec, run_scenario};
pub use scenario::Scenario;

/// One scenario file: its stem, and the scenario or why it did not load.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub name: String,
    pub path: PathBuf,
    pub scenario: Result<Scenario, String>,
}

/// Load every `*.yaml` in `dir`, sorted by name. A file that fails to load is still listed,
/// so a test runner can report it as a failing scenario.
pub fn load_scenarios(dir: &Path) -> std::io::Result<Vec<Loaded>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    paths.sort();
    Ok(paths
        .into_iter()
        .map(|path| {
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let scenario = std::fs::read_to_string(&path)
                .map_err(|e| format!("{}: {e}", path.display()))
                .and_then(|text| Scenario::from_yaml(&path, &text));
            Loaded {
                name,
                path,
                scenario,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_file_loads() {
        let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios"));
        let loaded = load_scenarios(dir).unwrap();
        assert!(!loaded.is_empty());
        for item in loaded {
            if let Err(e) = item.scenario {
                panic!("{e}");
            }
        }
    }
}
