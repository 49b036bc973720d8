//! The one shape of a workload: a `Workload` names it and says what it measures (as the
//! report shows it), a `Setup` says what server it runs on (limits and extra profiles over
//! the `make-config` defaults), and `measure` runs it under the benchmark bound into a
//! `Benchmark`. Its floor is measured beside it (in the same workload or one of its own),
//! and `targets` makes the report row of the two.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::report::{Benchmark, Metric, Status};
use crate::client::{McpServer, Transport};
use crate::scenario::Launch;

/// Bound on any one benchmark.
const BENCH_BOUND: Duration = Duration::from_secs(180);

/// A workload as the report shows it: its name (its key in `bench.json`) and what it
/// measures.
pub struct Workload {
    pub name: &'static str,
    pub about: &'static str,
}

/// What a server is started with: `limits` over the `make-config` defaults and `profiles`
/// added to its commands; its config is written as `<name>.json`.
pub struct Setup {
    pub name: &'static str,
    pub limits: Value,
    pub profiles: Value,
}

/// Where the servers of a run come from: the server binary (its `demo-process` sibling
/// provides the profiles), the allowed root, and the directory configs are written to.
pub struct Servers {
    pub server: PathBuf,
    pub root: PathBuf,
    pub config_dir: PathBuf,
}

impl Servers {
    /// The `demo-process` beside the server.
    pub fn demo(&self) -> PathBuf {
        self.server.with_file_name("demo-process")
    }

    /// Where the config of `setup` is written.
    pub fn config_path(&self, name: &str) -> PathBuf {
        self.config_dir.join(format!("{name}.json"))
    }

    /// Write the config of `setup` and start a server on it.
    pub async fn start(&self, setup: &Setup) -> Result<McpServer, String> {
        let path = self.config_path(setup.name);
        self.write_config(&path, &setup.limits, &setup.profiles)
            .await?;
        let args = ["--config".to_string(), path.display().to_string()];
        McpServer::start_with(
            Transport::Stdio,
            &self.server,
            &args,
            &self.root,
            &untapped(),
        )
        .await
    }

    /// Run `work` on a server of its own; the server is shut down whatever `work` returned.
    pub async fn with(
        &self,
        setup: &Setup,
        work: impl AsyncFnOnce(&McpServer) -> Result<Vec<Metric>, String>,
    ) -> Result<Vec<Metric>, String> {
        let mut mcp = self.start(setup).await?;
        let result = work(&mcp).await;
        mcp.shutdown().await;
        result
    }

    /// Write `path`: the `make-config` output with `limits` over it and `profiles` added.
    pub async fn write_config(
        &self,
        path: &Path,
        limits: &Value,
        profiles: &Value,
    ) -> Result<(), String> {
        let mut config = crate::runner::make_config(&self.server, path, &self.root, false).await?;
        let top = config
            .as_object_mut()
            .ok_or("make-config output is not a JSON object")?;
        for (key, value) in limits.as_object().into_iter().flatten() {
            top.insert(key.clone(), value.clone());
        }
        let commands = top
            .get_mut("commands")
            .and_then(Value::as_object_mut)
            .ok_or("make-config output has no `commands` object")?;
        for (id, profile) in profiles.as_object().into_iter().flatten() {
            commands.insert(id.clone(), profile.clone());
        }
        let pretty = serde_json::to_string_pretty(&config).map_err(|e| e.to_string())?;
        std::fs::write(path, pretty).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// How every benchmarked server (and the floor server) is started: without the scenarios'
/// tee of the client's input.
pub fn untapped() -> Launch {
    Launch {
        untapped: true,
        ..Launch::default()
    }
}

/// Run `work` under the benchmark bound and record it.
pub async fn measure(
    workload: &Workload,
    work: impl Future<Output = Result<Vec<Metric>, String>>,
) -> Benchmark {
    let name = workload.name;
    eprintln!("bench: {name} …");
    let began = Instant::now();
    let result = match tokio::time::timeout(BENCH_BOUND, work).await {
        Ok(result) => result,
        Err(_) => Err(format!("did not finish within {} s", BENCH_BOUND.as_secs())),
    };
    let duration_ms = began.elapsed().as_millis() as u64;
    match result {
        Ok(metrics) => Benchmark {
            name: name.into(),
            description: workload.about.into(),
            status: Status::Ok,
            failure: None,
            duration_ms,
            metrics,
        },
        Err(e) => {
            eprintln!("bench: {name} FAILED: {e}");
            failed(workload, e, duration_ms)
        }
    }
}

/// The benchmark of a workload that failed (or could not run) for `why`.
pub fn failed(workload: &Workload, why: String, duration_ms: u64) -> Benchmark {
    Benchmark {
        name: workload.name.into(),
        description: workload.about.into(),
        status: Status::Failed,
        failure: Some(why),
        duration_ms,
        metrics: Vec::new(),
    }
}

/// How long `work` took, in ms, and what it returned.
pub async fn timed<T>(work: impl Future<Output = Result<T, String>>) -> Result<(T, f64), String> {
    let began = Instant::now();
    let value = work.await?;
    Ok((value, super::report::ms(began.elapsed())))
}
