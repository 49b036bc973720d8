//! `harness verify` runs scenarios against the server and writes evidence;
//! `harness report` turns evidence into the acceptance report;
//! `harness bench` measures the server's speed and memory;
//! `harness soak` runs a mixed workload for minutes and reports its figures.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;

use clap::{Parser, Subcommand};
use harness::bench;
use harness::client::Transport;
use harness::evidence::{self, RunSummary, ScenarioEvidence};
use harness::{RunEvidence, ServerSpec, load_scenarios, report, run_scenario};

const DEFAULT_SCENARIOS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios");
const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

#[derive(Parser)]
#[command(version, about = "Conformance harness for mcp-terminal")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run scenarios against the server; write a summary (a line of facts per scenario) and
    /// the full run (every step, exchange and assertion) as JSON.
    Verify {
        /// The summary: what is committed, and what `report` reads.
        #[arg(long)]
        output: PathBuf,
        /// The full run; default: `evidence/<output's stem>.full.json` in the target
        /// directory this harness was built in, out of the repository.
        #[arg(long)]
        full_output: Option<PathBuf>,
        /// Run only these scenarios (by name); all by default.
        #[arg(long = "scenario")]
        scenarios: Vec<String>,
        /// The mcp-terminal binary; default: beside this harness, built if absent.
        #[arg(long)]
        server: Option<PathBuf>,
        #[arg(long = "scenarios", default_value = DEFAULT_SCENARIOS)]
        scenarios_dir: PathBuf,
        /// Scenarios run at once (serial ones run alone); default: the number of CPUs.
        #[arg(long)]
        jobs: Option<usize>,
        /// `stdio`, or `http` (`mcp-terminal http` with a bearer token; scenarios tagged
        /// `stdio-only` are skipped).
        #[arg(long, default_value = "stdio")]
        transport: String,
    },
    /// Measure the server's speed and memory; write JSON (and optionally Markdown).
    Bench {
        #[arg(long)]
        output: PathBuf,
        #[arg(long)]
        markdown: Option<PathBuf>,
        /// Few samples each: a smoke check, not a measurement.
        #[arg(long)]
        quick: bool,
        /// Run the whole bench this many times in a row and report each row's median
        /// over the runs (each ratio taken within its run).
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// The mcp-terminal binary; default: beside this harness, built if absent.
        #[arg(long)]
        server: Option<PathBuf>,
    },
    /// The benchmarks' floor: a minimal MCP server on stdio with a no-op tool and a page
    /// tool; with `--canned`, no MCP server at all, just prebuilt answers.
    #[command(hide = true)]
    FloorServer {
        #[arg(long)]
        canned: bool,
    },
    /// Run a bounded mixed workload for some minutes; write its figures as JSON. Fails if
    /// any error no step expected occurred, or the server did not shut down cleanly.
    Soak {
        #[arg(long)]
        minutes: f64,
        #[arg(long, default_value = "evidence/soak.json")]
        output: PathBuf,
        /// Seed of the action sequence.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The mcp-terminal binary; default: beside this harness, built if absent.
        #[arg(long)]
        server: Option<PathBuf>,
    },
    /// Generate the acceptance report from an evidence file.
    Report {
        #[arg(long)]
        evidence: PathBuf,
        #[arg(long)]
        output: PathBuf,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Verify {
            output,
            full_output,
            scenarios,
            server,
            scenarios_dir,
            jobs,
            transport,
        } => Transport::parse(&transport).and_then(|t| {
            let full_output = match full_output {
                Some(path) => path,
                None => full_output_beside_target(&output)?,
            };
            let outputs = (output.as_path(), full_output.as_path());
            verify(outputs, &scenarios, server, &scenarios_dir, jobs, t)
        }),
        Command::Report { evidence, output } => write_report(&evidence, &output),
        Command::FloorServer { canned } => if canned {
            harness::floor::serve_canned()
        } else {
            harness::floor::serve()
        }
        .map(|()| ExitCode::SUCCESS),
        Command::Soak {
            minutes,
            output,
            seed,
            server,
        } => soak(minutes, &output, seed, server),
        Command::Bench {
            output,
            markdown,
            quick,
            runs,
            server,
        } => bench(&output, markdown.as_deref(), quick, runs, server),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("harness: {e}");
            ExitCode::from(2)
        }
    }
}

fn soak(
    minutes: f64,
    output: &Path,
    seed: u64,
    server: Option<PathBuf>,
) -> Result<ExitCode, String> {
    if !(minutes > 0.0 && minutes <= 24.0 * 60.0) {
        return Err("--minutes must be more than 0 and at most a day".into());
    }
    let server = resolve_server(server)?;
    let (root, config) = harness::runner::root_and_config_dirs("mcp-terminal-soak")
        .ok_or("cannot create temporary directories")?;
    let root_path = root.path().canonicalize().map_err(|e| e.to_string())?;
    let config_path = config.path().join("config.json");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot build a runtime: {e}"))?;
    let report = runtime.block_on(harness::soak::run(
        &server,
        &root_path,
        &config_path,
        minutes,
        seed,
    ))?;
    let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(output, text + "\n").map_err(|e| format!("{}: {e}", output.display()))?;
    eprintln!(
        "soak: {} calls, {} sessions, {} unexpected errors, drift rss {} KiB fds {} threads {}; {}",
        report.calls,
        report.sessions,
        report.unexpected_errors,
        report.drift.rss_kib,
        report.drift.fds,
        report.drift.threads,
        output.display()
    );
    let ok = report.unexpected_errors == 0
        && report.clean_shutdown
        && report.leftover_processes.is_empty();
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The server to run: the given path, or the one built beside this harness; canonical.
fn resolve_server(server: Option<PathBuf>) -> Result<PathBuf, String> {
    let server = match server {
        Some(path) => path,
        None => default_server()?,
    };
    server
        .canonicalize()
        .map_err(|e| format!("server {}: {e}", server.display()))
}

fn verify(
    (output, full_output): (&Path, &Path),
    only: &[String],
    server: Option<PathBuf>,
    dir: &Path,
    jobs: Option<usize>,
    transport: Transport,
) -> Result<ExitCode, String> {
    let server = resolve_server(server)?;
    let spec = ServerSpec::beside(server.clone()).over(transport);
    let mut loaded = load_scenarios(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !only.is_empty() {
        if let Some(missing) = only.iter().find(|n| !loaded.iter().any(|l| &l.name == *n)) {
            return Err(format!("no scenario named {missing} in {}", dir.display()));
        }
        loaded.retain(|l| only.contains(&l.name));
    }
    let mut run = evidence::environment(&server, Path::new(WORKSPACE));
    run.transport = transport.name().to_string();
    let jobs = jobs
        .or_else(|| std::thread::available_parallelism().ok().map(usize::from))
        .unwrap_or(1)
        .max(1);
    // Popped from the back: reversed so scenarios start in name order.
    let queue = Mutex::new(loaded.into_iter().enumerate().rev().collect::<Vec<_>>());
    let results = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop();
                    let Some((index, item)) = next else { break };
                    let ev = match &item.scenario {
                        Ok(scenario) => run_scenario(scenario, &spec),
                        Err(e) => {
                            let mut ev = ScenarioEvidence::new(&item.name, "", &[]);
                            ev.failure = Some(e.clone());
                            ev
                        }
                    };
                    let verdict = match ev.skip_reason() {
                        Some(why) => format!("skipped: {why}"),
                        None if ev.passed() => "ok".into(),
                        None => "FAILED".into(),
                    };
                    eprintln!("{:<32} {verdict} ({} ms)", ev.name, ev.duration_ms);
                    results
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((index, ev));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by_key(|(i, _)| *i);
    run.scenarios = results.into_iter().map(|(_, ev)| ev).collect();
    run.finished_at = evidence::now_rfc3339();
    run.count();
    write_evidence(output, full_output, &run)?;
    eprintln!(
        "{} passed, {} failed, {} skipped of {}; evidence in {} (the full run in {})",
        run.counts.passed,
        run.counts.failed,
        run.counts.skipped,
        run.counts.total,
        output.display(),
        full_output.display()
    );
    Ok(if run.counts.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn bench(
    output: &Path,
    markdown: Option<&Path>,
    quick: bool,
    runs: usize,
    server: Option<PathBuf>,
) -> Result<ExitCode, String> {
    let server = resolve_server(server)?;
    if !server.parent().is_some_and(|d| d.ends_with("release")) {
        eprintln!(
            "harness: warning: {} is not a release build; measure with --release",
            server.display()
        );
    }
    let report = bench::run_repeated(&server, Path::new(WORKSPACE), quick, runs);
    write_file(
        output,
        &serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?,
    )?;
    print!("{}", bench::table(&report));
    if let Some(path) = markdown {
        write_file(path, &bench::markdown(&report))?;
    }
    eprintln!("benchmark results in {}", output.display());
    Ok(if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn write_file(path: &Path, text: &str) -> Result<(), String> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The full run to `full_output`, its summary (which names where the full run is) to
/// `output`.
fn write_evidence(output: &Path, full_output: &Path, run: &RunEvidence) -> Result<(), String> {
    let full = serde_json::to_string_pretty(run).map_err(|e| e.to_string())?;
    write_file(full_output, &full)?;
    let summary = run.summary(Some(full_output.display().to_string()));
    write_file(
        output,
        &serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?,
    )
}

/// `evidence/<output's stem>.full.json` in the target directory this harness runs from.
fn full_output_beside_target(output: &Path) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let target = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("the harness executable is not in a target directory")?;
    let stem = output
        .file_stem()
        .ok_or_else(|| format!("{} names no file", output.display()))?;
    let mut name = stem.to_os_string();
    name.push(".full.json");
    Ok(target.join("evidence").join(name))
}

/// `mcp-terminal` beside this executable (same profile directory), built first if absent.
fn default_server() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe
        .parent()
        .ok_or("the harness executable has no directory")?;
    let server = dir.join("mcp-terminal");
    if !server.exists() {
        let mut cargo = std::process::Command::new(env!("CARGO"));
        cargo
            .args(["build", "--bins", "-p", "mcp-terminal"])
            .current_dir(WORKSPACE);
        if dir.file_name().is_some_and(|n| n == "release") {
            cargo.arg("--release");
        }
        eprintln!("harness: building the server: {cargo:?}");
        let status = cargo
            .status()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        if !status.success() || !server.exists() {
            return Err(format!("cargo build did not produce {}", server.display()));
        }
    }
    Ok(server)
}

fn write_report(evidence: &Path, output: &Path) -> Result<ExitCode, String> {
    let text =
        std::fs::read_to_string(evidence).map_err(|e| format!("{}: {e}", evidence.display()))?;
    // A summary, as `verify --output` writes it; a full run is summarised first.
    let summary = serde_json::from_str::<RunSummary>(&text).or_else(|summary_error| {
        serde_json::from_str::<RunEvidence>(&text)
            .map(|run| run.summary(Some(evidence.display().to_string())))
            .map_err(|_| format!("{}: {summary_error}", evidence.display()))
    })?;
    std::fs::write(output, report::render(&summary))
        .map_err(|e| format!("{}: {e}", output.display()))?;
    eprintln!("report written to {}", output.display());
    Ok(ExitCode::SUCCESS)
}
