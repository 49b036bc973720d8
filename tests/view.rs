//! The owner's live view in a real browser (headless Chromium over the DevTools protocol)
//! against the real binary: what ran and how each session started and ended, following
//! the newest output, the last screen of an ended terminal program, owner control and its
//! refusals, the stable address, readability, the recording player and the badge of a
//! program waiting for input. Each test that needs
//! Chromium is skipped, saying so, when it is absent.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use reqwest::StatusCode;
use serde_json::{Value, json};

mod support;

use support::config::config_with;
use support::http_server::{BIN, HttpServer as Server};
use support::stderr::{PATIENCE, Stderr};
use support::view::{Chromium, LIVE_TEXT, browser, owner_cookie, sign_in_url, view_place};

const LOG: &str = "info";

/// Where a screenshot named `name` goes: `MCP_TERMINAL_SCREENSHOTS` (a directory, as the
/// evidence is made), else the test's scratch directory.
fn screenshot_path(name: &str) -> PathBuf {
    std::env::var_os("MCP_TERMINAL_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).to_path_buf())
        .join(name)
}

fn save_screenshot(chromium: &mut Chromium, page: &str, name: &str) {
    let png = chromium.screenshot(page);
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    std::fs::write(screenshot_path(name), &png).unwrap();
}

/// An `http --web` server in a fresh directory with `config` changed by `change` (shells
/// approved, the audit log at `DIR/audit.jsonl`), with `extra` arguments.
fn server(extra: &[&str], change: impl FnOnce(&mut Value, &Path)) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let config = config_with(&root, true, |c| {
        c["audit_log"] = json!(root.join("audit.jsonl"));
        change(c, &root);
    });
    let config = config.display().to_string();
    let mut args = vec!["--listen", "127.0.0.1:0", "--web", "--config", &config];
    args.extend_from_slice(extra);
    Server::start_in(dir, &args, LOG)
}

/// Call a tool until `done` holds for its structured result (within `PATIENCE`).
async fn call_until(
    server: &Server,
    id: &str,
    tool: &str,
    arguments: Value,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let result = server.call(id, tool, arguments.clone()).await["structuredContent"].clone();
        if done(&result) {
            return result;
        }
        assert!(
            Instant::now() < deadline,
            "{tool} never gave what was awaited: {result}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn records_text(read: &Value) -> String {
    read["records"]
        .as_array()
        .map(|records| {
            records
                .iter()
                .filter_map(|r| r["text"].as_str())
                .collect::<String>()
        })
        .unwrap_or_default()
}

fn audit_lines(server: &Server) -> Vec<Value> {
    let text = std::fs::read_to_string(server.dir.path().join("audit.jsonl")).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The audit log once it holds `n` lines of the owner's (written as each action is
/// answered, which may be after its effect is seen).
fn audit_with_owner_lines(server: &Server, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let lines = audit_lines(server);
        if lines.iter().filter(|l| l["by"] == json!("owner")).count() >= n {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "never {n} owner lines: {lines:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn owner_control_types_into_a_pty_session_and_the_agent_and_audit_log_see_it() {
    let Some(mut chromium) = Chromium::launch() else {
        return;
    };
    let server = server(&["--web-control"], |c, _| {
        c["commands"]["pty-cat"] = json!({"argv": ["/bin/cat"], "mode": "pty",
            "description": "cat on a terminal"});
    });
    let (url, _) = sign_in_url(&server.stderr);
    let id = server.open_session().await.unwrap();
    let (sid, _) = server
        .start_terminal(&id, json!({"command_id": "pty-cat", "timeout_ms": 300_000}))
        .await;

    let page = chromium.open(&url.replace("/ui/?", &format!("/ui/sessions/{sid}?")));
    chromium.until(
        &page,
        "document.getElementById('state').textContent === 'live' \
         && document.getElementById('text') !== null",
        "document.body.innerHTML",
    );
    chromium.eval(
        &page,
        "document.getElementById('text').value = 'typed-by-the-owner'; \
         document.getElementById('type').requestSubmit(); true",
    );
    chromium.until(
        &page,
        "document.getElementById('control-result').textContent === 'done (1)'",
        "document.getElementById('control-result').textContent",
    );
    // cat echoes the line (the terminal's echo, then cat's copy): ordinary output.
    let read = call_until(
        &server,
        &id,
        "terminal_read",
        json!({"session_id": sid, "cursor": 0}),
        |r| records_text(r).matches("typed-by-the-owner").count() >= 2,
    )
    .await;
    assert_eq!(read["ok"], json!(true), "{read}");
    let status = server
        .call(&id, "terminal_status", json!({"session_id": sid}))
        .await["structuredContent"]
        .clone();
    assert!(status["owner_input_at"].is_string(), "{status}");
    // The page follows: the screen shows what the owner's keys caused.
    chromium.until(
        &page,
        "document.querySelector('#live pre.screen').textContent.includes('typed-by-the-owner')",
        LIVE_TEXT,
    );

    // Text without Enter, then the page's Enter key: cat gets the line when Enter comes.
    chromium.eval(
        &page,
        "document.getElementById('enter').checked = false; \
         document.getElementById('text').value = 'second-line'; \
         document.getElementById('type').requestSubmit(); true",
    );
    chromium.until(
        &page,
        "document.getElementById('control-result').textContent === 'done (2)'",
        "document.getElementById('control-result').textContent",
    );
    chromium.eval(
        &page,
        "document.querySelector('button.key[data-key=\"Enter\"]').click(); true",
    );
    call_until(
        &server,
        &id,
        "terminal_read",
        json!({"session_id": sid, "cursor": 0}),
        |r| records_text(r).matches("second-line").count() >= 2,
    )
    .await;

    let lines = audit_with_owner_lines(&server, 3);
    let owner: Vec<&Value> = lines.iter().filter(|l| l["by"] == json!("owner")).collect();
    assert_eq!(owner.len(), 3, "{lines:?}");
    assert_eq!(owner[2]["tool"], json!("terminal_keys"));
    assert_eq!(owner[2]["keys"], json!(1));
    assert_eq!(owner[0]["tool"], json!("terminal_write"));
    assert_eq!(owner[0]["session_id"], json!(sid));
    assert_eq!(owner[0]["outcome"], json!("ok"));
    // The browser's address, as an agent's line over HTTP carries its client's.
    let client = owner[0]["client"].as_str().unwrap_or_default();
    assert!(client.starts_with("127.0.0.1:"), "{:?}", owner[0]);
    assert_eq!(owner[0]["bytes"], json!("typed-by-the-owner\r".len()));
    assert!(
        !owner[0].to_string().contains("typed-by-the-owner"),
        "text is never logged"
    );
    let start = lines
        .iter()
        .find(|l| l["tool"] == json!("terminal_start"))
        .unwrap();
    assert_eq!(start["by"], json!("agent"));

    // A POST from anywhere but the view's own page is refused: another origin (even on
    // loopback), or no page token. The same request from the view's origin passes.
    let token = chromium.eval(&page, "document.body.dataset.csrf");
    let token = token.as_str().unwrap().to_string();
    let cookie = owner_cookie(&server.base, server.dir.path()).await;
    let post = |origin: &str, token: &str| {
        browser()
            .post(format!("{}/ui/sessions/{sid}/input", server.base))
            .header("Cookie", &cookie)
            .header("Origin", origin)
            .header("X-CSRF-Token", token)
            .header("Content-Type", "application/json")
            .body(r#"{"keys":["Enter"]}"#)
            .send()
    };
    let foreign = post("http://127.0.0.1:1", &token).await.unwrap();
    assert_eq!(foreign.status(), StatusCode::FORBIDDEN);
    let evil = post("http://evil.example", &token).await.unwrap();
    assert_eq!(evil.status(), StatusCode::FORBIDDEN);
    let tokenless = post(&server.base, "").await.unwrap();
    assert_eq!(tokenless.status(), StatusCode::FORBIDDEN);
    let body = tokenless.text().await.unwrap();
    assert!(body.contains("page token"), "{body}");
    let own = post(&server.base, &token).await.unwrap();
    assert_eq!(own.status(), StatusCode::OK);
    // The bearer token is the MCP client's: with it, the agent could have its keys logged
    // as the owner's. It takes no owner action, and gets no sign-in code either.
    let by_token = browser()
        .post(format!("{}/ui/sessions/{sid}/input", server.base))
        .bearer_auth(&server.token)
        .header("Origin", &server.base)
        .header("X-CSRF-Token", &token)
        .body(r#"{"text":"echo by-the-agent"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(by_token.status(), StatusCode::FORBIDDEN);
    let body = by_token.text().await.unwrap();
    assert!(
        body.contains("the bearer token is the MCP client's"),
        "{body}"
    );
    let code_by_token = browser()
        .get(format!("{}/ui/sign-in-url", server.base))
        .bearer_auth(&server.token)
        .send()
        .await
        .unwrap();
    assert_eq!(code_by_token.status(), StatusCode::FORBIDDEN);
    let unknown_key = browser()
        .post(format!("{}/ui/sessions/{sid}/input", server.base))
        .header("Cookie", &cookie)
        .header("Origin", &server.base)
        .header("X-CSRF-Token", &token)
        .body(r#"{"keys":["NoSuchKey"]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown_key.status(), StatusCode::BAD_REQUEST);
    assert!(
        unknown_key
            .text()
            .await
            .unwrap()
            .contains("`NoSuchKey` is not a key")
    );

    // Terminate from the page: two clicks (the first arms the button).
    chromium.eval(
        &page,
        "document.getElementById('terminate').click(); \
         document.getElementById('terminate').click(); true",
    );
    chromium.until(
        &page,
        "document.querySelector('#live .status').textContent === 'TERMINATED' \
         && document.querySelector('#live .reason').textContent.includes('owner')",
        LIVE_TEXT,
    );
    // Two more owner lines since: the Enter posted from this test, and the termination.
    let lines = audit_with_owner_lines(&server, 5);
    assert!(
        lines.iter().any(|l| l["by"] == json!("owner")
            && l["tool"] == json!("terminal_terminate")
            && l["session_id"] == json!(sid)),
        "{lines:?}"
    );
}

#[tokio::test]
async fn without_web_control_every_post_is_405_and_pages_have_no_controls() {
    let server = server(&[], |_, _| {});
    let id = server.open_session().await.unwrap();
    let (sid, _) = server
        .start_terminal(&id, json!({"command_id": "pty-tui", "timeout_ms": 300_000}))
        .await;
    for action in ["input", "terminate"] {
        let response = browser()
            .post(format!("{}/ui/sessions/{sid}/{action}", server.base))
            .bearer_auth(&server.token)
            .header("Origin", &server.base)
            .body(r#"{"keys":["q"]}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::METHOD_NOT_ALLOWED,
            "{action}"
        );
    }
    let page = browser()
        .get(format!("{}/ui/sessions/{sid}", server.base))
        .bearer_auth(&server.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        !page.contains("data-csrf") && !page.contains("id=\"control\""),
        "{page}"
    );
    let status = server
        .call(&id, "terminal_status", json!({"session_id": sid}))
        .await["structuredContent"]
        .clone();
    assert_eq!(status["owner_input_at"], Value::Null, "{status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shell_page_lists_what_ran_and_every_page_how_its_session_started_and_ended() {
    let Some(mut chromium) = Chromium::launch() else {
        return;
    };
    let server = server(&[], |c, _| {
        c["commands"]["sh"]["allowed_env"] = json!(["VIEW_TEST_VAR"]);
    });
    let (url, _) = sign_in_url(&server.stderr);
    let id = server.open_session().await.unwrap();
    let (sid, _) = server
        .start_terminal(
            &id,
            json!({"command_id": "sh", "env": {"VIEW_TEST_VAR": "value-never-shown"}}),
        )
        .await;
    // The second prints line ends as a terminal does, and a line drawn again after `\r`.
    for command in [
        "echo history-one",
        "printf 'history-two\\r\\n50%%\\rdone\\n' >&2; (exit 3)",
    ] {
        let args = json!({"session_id": sid, "command": command});
        server.call_ok(&id, "terminal_exec", args).await;
    }
    // A session the controller ends: the list shows the reason beside the signal.
    let (long, _) = server
        .start_terminal(&id, json!({"command_id": "long", "timeout_ms": 300}))
        .await;

    let page = chromium.open(&url.replace("/ui/?", &format!("/ui/sessions/{sid}?")));
    chromium.until(
        &page,
        "document.querySelectorAll('#live table.history tbody tr').length === 2",
        LIVE_TEXT,
    );
    let rows = chromium.eval(
        &page,
        "[...document.querySelectorAll('#live table.history tbody tr')].map(r => \
         [...r.cells].map(c => c.textContent))",
    );
    assert_eq!(rows[0][1], json!("echo history-one"), "{rows}");
    assert_eq!(rows[0][2], json!("0"), "{rows}");
    assert_eq!(rows[1][2], json!("3"), "{rows}");
    assert!(
        rows[1][3].as_str().unwrap().ends_with('s'),
        "a duration: {rows}"
    );
    let facts = chromium.eval(
        &page,
        "document.querySelector('#live dl.origin').textContent",
    );
    let facts = facts.as_str().unwrap();
    assert!(
        facts.contains("/bin/sh") && facts.contains("VIEW_TEST_VAR"),
        "{facts}"
    );
    assert!(
        facts.contains(
            &server
                .dir
                .path()
                .canonicalize()
                .unwrap()
                .display()
                .to_string()
        )
    );
    let html = chromium.eval(&page, "document.documentElement.outerHTML");
    assert!(
        !html.as_str().unwrap().contains("value-never-shown"),
        "no env value"
    );
    save_screenshot(&mut chromium, &page, "live-view-shell-history.png");

    // The output link of the second command opens what it printed.
    let href = chromium.eval(
        &page,
        "document.querySelectorAll('#live table.history a.range')[1].href",
    );
    let output = chromium.open(href.as_str().unwrap());
    chromium.until(
        &output,
        "document.querySelector('pre.tail') !== null \
         && document.querySelector('pre.tail').textContent.includes('history-two\\n50%\\ndone') \
         && !document.querySelector('pre.tail').textContent.includes('\\uFFFD') \
         && !document.querySelector('pre.tail').textContent.includes('history-one')",
        "document.body.textContent",
    );

    // A range that is not one is refused, saying what a range is.
    for query in ["from=x", "from=9&to=3", ""] {
        let refused = browser()
            .get(format!("{}/ui/sessions/{sid}/output?{query}", server.base))
            .bearer_auth(&server.token)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "{query}");
        assert!(refused.text().await.unwrap().contains("needs `from`"));
    }

    let place = view_place(&mut chromium, &page);
    let list = chromium.open(&format!("{}{place}", server.base));
    chromium.until(
        &list,
        &format!(
            "(document.querySelector('tr[data-session=\"{long}\"]') || {{textContent: ''}})\
             .textContent.includes('SIGTERM (timeout)')"
        ),
        LIVE_TEXT,
    );
    save_screenshot(&mut chromium, &list, "live-view-list.png");
    let ended = chromium.open(&format!("{}{place}sessions/{long}", server.base));
    chromium.until(
        &ended,
        "document.querySelector('#live .reason').textContent.startsWith('timeout') \
         && /\\d{4}-\\d\\d-\\d\\dT/.test(document.querySelector('#live dd.ended').textContent)",
        LIVE_TEXT,
    );
}

/// `mcp-terminal stdio --web` with `config` and `extra` arguments, in `dir`; its stdin is
/// kept open (the server runs until it is dropped).
fn stdio_with_web(dir: &Path, config: &Path, extra: &[&str]) -> (std::process::Child, Stderr) {
    let mut child = std::process::Command::new(BIN)
        .args(["stdio", "--config"])
        .arg(config)
        .arg("--token-file")
        .arg(dir.join("token"))
        .args(extra)
        .current_dir(dir)
        .env("HOME", dir)
        .env_remove("XDG_CONFIG_HOME")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = Stderr::of(&mut child);
    (child, stderr)
}

fn web_url(dir: &Path, config: &Path) -> std::process::Output {
    std::process::Command::new(BIN)
        .args(["web-url", "--config"])
        .arg(config)
        .env("HOME", dir)
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_view_keeps_its_configured_address_moves_on_when_taken_and_web_url_signs_in_again() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    // A port that is taken: the configured address, held by this test.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let config = config_with(&root, false, |c| {
        c["web_listen"] = json!(format!("127.0.0.1:{port}"));
    });
    let (mut child, stderr) = stdio_with_web(&root, &config, &["--web"]);
    let (url, base) = sign_in_url(&stderr);
    let warning = stderr.line("mcp-terminal: warning:");
    assert!(
        warning.contains(&format!("127.0.0.1:{port} is taken"))
            && warning.contains("--web IP:PORT"),
        "{warning}"
    );
    let moved: u16 = base.rsplit(':').next().unwrap().parse().unwrap();
    assert!(moved > port && moved < port + 20, "{base}");

    // The URL is also in a file beside the config, readable by its owner only.
    let file = root.join("web-url");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // The URL, and the owner key `web-url` asks with: not the bearer token, which the MCP
    // client holds.
    let published = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = published.lines().collect();
    assert_eq!(lines[0], url);
    assert!(lines[1].len() == 64 && lines[1].bytes().all(|b| b.is_ascii_hexdigit()));
    let token = std::fs::read_to_string(root.join("token")).unwrap();
    assert_ne!(lines[1], token.trim());

    // `web-url` asks the running server for a fresh one-time URL on the same address.
    let fresh = web_url(&root, &config);
    assert!(fresh.status.success(), "{fresh:?}");
    let fresh = String::from_utf8(fresh.stdout).unwrap().trim().to_string();
    assert!(fresh.starts_with(&format!("{base}/ui/?code=")), "{fresh}");
    assert_ne!(fresh, url);
    assert!(!fresh.contains(token.trim()) && !fresh.contains(lines[1]));
    // The bearer token gets none.
    let by_token = browser()
        .get(format!("{base}/ui/sign-in-url"))
        .bearer_auth(token.trim())
        .send()
        .await
        .unwrap();
    assert_eq!(by_token.status(), StatusCode::FORBIDDEN);
    // A browser's cookie is not the token: it gets no sign-in URL.
    let response = browser().get(&url).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let cookie = response.headers()["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_string();
    let by_cookie = browser()
        .get(format!("{base}/ui/sign-in-url"))
        .header("Cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(by_cookie.status(), StatusCode::FORBIDDEN);

    if let Some(mut chromium) = Chromium::launch() {
        let page = chromium.open(&fresh);
        chromium.until(
            &page,
            "document.getElementById('state').textContent === 'live' \
             && /^\\/ui\\/[0-9a-f]{32}\\/$/.test(location.pathname)",
            "document.body.textContent",
        );
    }
    drop(child.stdin.take());
    assert_eq!(child.wait().unwrap().code(), Some(0));

    // With no server running, web-url says so.
    drop(taken);
    let none = web_url(&root, &config);
    assert_eq!(none.status.code(), Some(2));
    let message = String::from_utf8_lossy(&none.stderr);
    assert!(message.contains("does not answer"), "{message}");

    // The file outlives the server: another user listening on its port now is not sent the
    // token. (Listening as another user needs root; elsewhere this part is skipped.)
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: a listener of another user needs root");
        return;
    }
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let mut other = std::process::Command::new("python3")
        .args([
            "-c",
            "import socket, sys\n\
             s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n\
             print(s.getsockname()[1], flush=True); sys.stdin.read()",
        ])
        .uid(65534)
        .gid(65534)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut port = String::new();
    std::io::BufReader::new(other.stdout.take().unwrap())
        .read_line(&mut port)
        .unwrap();
    std::fs::write(
        &file,
        format!(
            "http://127.0.0.1:{}/ui/?code=spent\n{}\n",
            port.trim(),
            "ab".repeat(32)
        ),
    )
    .unwrap();
    let stale = web_url(&root, &config);
    drop(other.stdin.take());
    other.wait().unwrap();
    assert_eq!(stale.status.code(), Some(2));
    let message = String::from_utf8_lossy(&stale.stderr);
    assert!(
        message.contains("another user's program (uid 65534)") && message.contains("not sent"),
        "{message}"
    );
}

/// A FIFO (or another user's file) put where the address goes gets neither the sign-in
/// code nor a server stuck opening it.
#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_at_the_address_file_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let file = root.join("web-url");
    nix::unistd::mkfifo(&file, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    let config = config_with(&root, false, |_| {});
    let (mut child, stderr) = stdio_with_web(&root, &config, &["--web"]);
    let (url, _) = sign_in_url(&stderr);
    let warning = stderr.line("mcp-terminal: warning:");
    assert!(warning.contains("is not a regular file"), "{warning}");
    assert!(!warning.contains(&url), "{warning}");
    drop(child.stdin.take());
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let none = web_url(&root, &config);
    assert_eq!(none.status.code(), Some(2));
    let message = String::from_utf8_lossy(&none.stderr);
    assert!(message.contains("is not a regular file"), "{message}");
}

#[test]
fn web_listen_outside_loopback_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let config = config_with(&root, false, |c| c["web_listen"] = json!("0.0.0.0:8766"));
    let out = std::process::Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a loopback address"));
}

/// The output box of a pipe page is scrolled to its end.
const AT_END: &str = "(b => b !== null && b.scrollHeight > b.clientHeight \
     && b.scrollHeight - b.scrollTop - b.clientHeight < 8)(document.querySelector('#live pre.tail'))";

#[tokio::test(flavor = "multi_thread")]
async fn a_pipe_page_follows_its_newest_output_unless_the_owner_scrolled_up() {
    let Some(mut chromium) = Chromium::launch() else {
        return;
    };
    let server = server(&[], |_, _| {});
    let (url, _) = sign_in_url(&server.stderr);
    let id = server.open_session().await.unwrap();
    // A flood: the page opens at its end, the last line in view.
    let (flood, _) = server
        .start_terminal(&id, json!({"command_id": "flood", "timeout_ms": 300_000}))
        .await;
    let page = chromium.open(&url.replace("/ui/?", &format!("/ui/sessions/{flood}?")));
    chromium.until(
        &page,
        &format!(
            "{AT_END} && document.querySelector('#live pre.tail').textContent\
             .includes('flood total')"
        ),
        LIVE_TEXT,
    );

    let (sh, _) = server
        .start_terminal(&id, json!({"command_id": "sh"}))
        .await;
    let exec = |command: &'static str| {
        let (server, id, sh) = (&server, &id, &sh);
        async move {
            let args = json!({"session_id": sh, "command": command});
            server.call_ok(id, "terminal_exec", args).await;
        }
    };
    exec("seq 1 300").await;
    let place = view_place(&mut chromium, &page);
    let page = chromium.open(&format!("{}{place}sessions/{sh}", server.base));
    let last_text = "document.querySelector('#live pre.tail').textContent";
    chromium.until(
        &page,
        &format!("{AT_END} && {last_text}.includes('300')"),
        LIVE_TEXT,
    );
    // New output arrives at the end, and the page follows it.
    exec("seq 1000 1300").await;
    chromium.until(
        &page,
        &format!("{AT_END} && {last_text}.includes('1300')"),
        LIVE_TEXT,
    );
    // The owner scrolls up: new output does not pull the page back down.
    chromium.eval(
        &page,
        "document.querySelector('#live pre.tail').scrollTop = 0; true",
    );
    chromium.until(
        &page,
        "document.getElementById('live').dataset.following === 'no'",
        LIVE_TEXT,
    );
    exec("seq 2000 2300").await;
    chromium.until(&page, &format!("{last_text}.includes('2300')"), LIVE_TEXT);
    assert_eq!(
        chromium.eval(
            &page,
            "document.querySelector('#live pre.tail').scrollTop < 50"
        ),
        json!(true)
    );
    // Back at the end, it follows again.
    chromium.eval(
        &page,
        "(b => { b.scrollTop = b.scrollHeight; })(document.querySelector('#live pre.tail')); true",
    );
    chromium.until(
        &page,
        "document.getElementById('live').dataset.following === 'yes'",
        LIVE_TEXT,
    );
    exec("seq 3000 3300").await;
    chromium.until(
        &page,
        &format!("{AT_END} && {last_text}.includes('3300')"),
        LIVE_TEXT,
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ended_full_screen_program_shows_its_last_screen() {
    let Some(mut chromium) = Chromium::launch() else {
        return;
    };
    let Some(vim) = ["/usr/bin/vim", "/bin/vim", "/usr/bin/vi"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
    else {
        support::extras::missing("MCP_TERMINAL_REQUIRE_VIM", "vim", "apt-get install vim");
        return;
    };
    let server = server(&[], |c, root| {
        let file = root.join("notes.txt");
        c["commands"]["vim"] = json!({"argv": [vim, "-u", "NONE", "-N", "-n", file],
            "mode": "pty", "description": "vim on a file"});
    });
    let (url, _) = sign_in_url(&server.stderr);
    let id = server.open_session().await.unwrap();
    let (sid, _) = server
        .start_terminal(&id, json!({"command_id": "vim", "timeout_ms": 300_000}))
        .await;
    let wait = |pattern: &'static str| {
        let (server, id, sid) = (&server, &id, &sid);
        async move {
            let screen = call_until(
                server,
                id,
                "terminal_screen",
                json!({"session_id": sid}),
                |s| s["lines"].to_string().contains(pattern),
            )
            .await;
            assert_eq!(screen["ok"], json!(true));
        }
    };
    wait("~").await;
    server.write(&id, &sid, "iwritten in vim").await;
    wait("written in vim").await;
    let quit = json!({"session_id": sid, "keys": ["Escape", ":", "w", "q", "Enter"]});
    server.call_ok(&id, "terminal_keys", quit).await;
    call_until(
        &server,
        &id,
        "terminal_status",
        json!({"session_id": sid}),
        |s| s["status"] == json!("EXITED"),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(server.dir.path().join("notes.txt")).unwrap(),
        "written in vim\n"
    );

    let page = chromium.open(&url.replace("/ui/?", &format!("/ui/sessions/{sid}?")));
    chromium.until(
        &page,
        "document.querySelector('#live .status').textContent === 'EXITED' \
         && document.querySelector('#live pre.screen.last').textContent.includes('written in vim')",
        LIVE_TEXT,
    );
    // No cursor blinks on a session that ended.
    assert_eq!(
        chromium.eval(&page, "document.querySelectorAll('#live .cursor').length"),
        json!(0)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn wide_characters_keep_the_grid_and_the_sign_in_page_is_styled_with_an_icon() {
    let Some(mut chromium) = Chromium::launch() else {
        return;
    };
    let server = server(&[], |c, _| {
        c["commands"]["wide"] = json!({
            "argv": ["/bin/sh", "-c", "printf 'ab漢字cd😀ef|\\r\\nabcdefghijkl|\\r\\n'; sleep 300"],
            "mode": "pty", "description": "prints wide characters"});
    });
    // Before signing in: a styled page that says how to sign in, and the icon.
    let page = chromium.open(&format!("{}/ui/", server.base));
    chromium.until(
        &page,
        "document.querySelector('.signin') !== null \
         && getComputedStyle(document.body).backgroundColor === 'rgb(17, 17, 17)' \
         && getComputedStyle(document.querySelector('.signin')).borderRadius === '8px'",
        "document.body.textContent",
    );
    let text = chromium.eval(&page, "document.body.textContent");
    assert!(
        text.as_str().unwrap().contains("mcp-terminal web-url"),
        "{text}"
    );
    save_screenshot(&mut chromium, &page, "live-view-sign-in.png");
    let icon = browser()
        .get(format!("{}/favicon.ico", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(icon.status(), StatusCode::OK);
    assert_eq!(icon.headers()["content-type"], "image/svg+xml");
    assert!(icon.text().await.unwrap().starts_with("<svg"));

    let (url, _) = sign_in_url(&server.stderr);
    let id = server.open_session().await.unwrap();
    let (sid, _) = server
        .start_terminal(&id, json!({"command_id": "wide", "timeout_ms": 300_000}))
        .await;
    let page = chromium.open(&url.replace("/ui/?", &format!("/ui/sessions/{sid}?")));
    chromium.until(
        &page,
        "document.querySelector('#live pre.screen') !== null \
         && document.querySelector('#live pre.screen').textContent.includes('abcdefghijkl|')",
        LIVE_TEXT,
    );
    // Whatever the font does with 漢, 字 and 😀, each takes exactly two cells, so the bars
    // of both rows line up.
    let measured = chromium.eval(
        &page,
        "(() => { const pre = document.querySelector('#live pre.screen'); \
           const probe = document.createElement('span'); probe.textContent = '0000000000'; \
           pre.appendChild(probe); const cell = probe.getBoundingClientRect().width / 10; \
           probe.remove(); \
           const wide = [...pre.querySelectorAll('.w2')].map(e => e.getBoundingClientRect().width / cell); \
           const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT); const bars = []; \
           while (walker.nextNode()) { const n = walker.currentNode; \
             for (let i = n.textContent.indexOf('|'); i >= 0; i = n.textContent.indexOf('|', i + 1)) { \
               const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1); \
               bars.push(r.getBoundingClientRect().left); } } \
           return {wide, bars}; })()",
    );
    let wide = measured["wide"].as_array().unwrap();
    assert_eq!(wide.len(), 3, "{measured}");
    for w in wide {
        assert!((w.as_f64().unwrap() - 2.0).abs() < 0.05, "{measured}");
    }
    let bars = measured["bars"].as_array().unwrap();
    assert_eq!(bars.len(), 2, "{measured}");
    let (a, b) = (bars[0].as_f64().unwrap(), bars[1].as_f64().unwrap());
    assert!((a - b).abs() < 0.5, "the bars line up: {measured}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_recording_plays_in_the_page_through_the_servers_emulator() {
    let Some(mut chromium) = Chromium::launch() else {
        return;
    };
    let server = server(&[], |c, root| {
        let casts = root.join("casts");
        std::fs::create_dir(&casts).unwrap();
        c["recordings_dir"] = json!(casts);
    });
    let (url, _) = sign_in_url(&server.stderr);
    let id = server.open_session().await.unwrap();
    let (sid, _) = server
        .start_terminal(&id, json!({"command_id": "sh"}))
        .await;
    let command = "echo rec-one; sleep 3; echo rec-two";
    let exec = json!({"session_id": sid, "command": command});
    server.call_ok(&id, "terminal_exec", exec).await;
    let ended = server
        .call(&id, "terminal_terminate", json!({"session_id": sid}))
        .await;
    let name = ended["structuredContent"]["recording"]
        .as_str()
        .unwrap_or_else(|| panic!("no recording: {ended}"))
        .to_string();

    // From the session page's link to the player.
    let page = chromium.open(&url.replace("/ui/?", &format!("/ui/sessions/{sid}?")));
    chromium.until(
        &page,
        "document.querySelector('#live a.play') !== null",
        LIVE_TEXT,
    );
    let href = chromium.eval(&page, "document.querySelector('#live a.play').href");
    assert!(href.as_str().unwrap().ends_with(&format!(
        "{}recordings/{name}/play",
        view_place(&mut chromium, &page)
    )));
    let player = chromium.open(href.as_str().unwrap());
    chromium.until(
        &player,
        "document.getElementById('play') !== null \
         && document.getElementById('state').textContent === 'paused'",
        "document.body.textContent",
    );
    let duration: f64 = chromium
        .eval(&player, "parseFloat(document.body.dataset.duration)")
        .as_f64()
        .unwrap();
    assert!(
        duration >= 3.0,
        "the recording lasts past the sleep: {duration}"
    );
    const SCREEN: &str = "document.querySelector('#frame pre.screen').textContent";
    const TIME: &str = "parseFloat(document.getElementById('time').textContent)";
    chromium.eval(&player, "document.getElementById('play').click(); true");
    chromium.until(
        &player,
        &format!(
            "{SCREEN}.includes('rec-one') && !{SCREEN}.includes('rec-two') && {TIME} > 0 \
             && document.getElementById('state').textContent === 'playing'"
        ),
        "document.body.textContent",
    );
    save_screenshot(&mut chromium, &player, "live-view-recording.png");
    // Pause, then play on from there four times as fast.
    chromium.eval(&player, "document.getElementById('play').click(); true");
    chromium.until(
        &player,
        "document.getElementById('state').textContent === 'paused' \
         && document.getElementById('play').textContent === 'Play'",
        "document.body.textContent",
    );
    chromium.eval(
        &player,
        "(s => { s.value = '4'; s.dispatchEvent(new Event('change')); })\
         (document.getElementById('speed')); document.getElementById('play').click(); true",
    );
    chromium.until(
        &player,
        &format!(
            "{SCREEN}.includes('rec-two') && document.getElementById('state').textContent \
             === 'ended' && {TIME} >= {:.1}",
            duration - 0.05
        ),
        "document.body.textContent",
    );
    // Seeking while paused shows the screen at that time.
    chromium.eval(
        &player,
        &format!(
            "(s => {{ s.value = '{:.3}'; s.dispatchEvent(new Event('change')); }})\
             (document.getElementById('seek')); true",
            duration - 0.5
        ),
    );
    chromium.until(
        &player,
        &format!("{SCREEN}.includes('rec-one') && !{SCREEN}.includes('rec-two')"),
        "document.body.textContent",
    );
    // The download stays.
    let cast = browser()
        .get(format!("{}/ui/recordings/{name}", server.base))
        .bearer_auth(&server.token)
        .send()
        .await
        .unwrap();
    assert_eq!(cast.status(), StatusCode::OK);
    assert!(cast.text().await.unwrap().contains("rec-two"));
    // Bad player arguments get a clear refusal.
    let bad = browser()
        .get(format!(
            "{}/ui/recordings/{name}/frames?speed=100",
            server.base
        ))
        .bearer_auth(&server.token)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert!(bad.text().await.unwrap().contains("`speed`"));
}

/// A recording is a file of the server's user, so a session's own shell can rewrite it: the
/// player plays what it finds, and an event put past anything a duration holds leaves it
/// waiting its longest between frames (it panicked converting the wait, cutting the stream).
#[tokio::test]
async fn a_rewritten_recording_with_an_event_past_any_duration_plays_on() {
    let mut casts = PathBuf::new();
    let server = server(&[], |c, root| {
        casts = root.join("casts");
        std::fs::create_dir(&casts).unwrap();
        c["recordings_dir"] = json!(casts);
    });
    let id = server.open_session().await.unwrap();
    let (sid, started) = server
        .start_terminal(&id, json!({"command_id": "sh"}))
        .await;
    let name = started["structuredContent"]["recording"]
        .as_str()
        .unwrap_or_else(|| panic!("no recording: {started}"))
        .to_string();
    let path = casts.join(&name).display().to_string();
    let command = format!(
        "printf '%s\\n' '{{\"version\":2,\"width\":20,\"height\":4}}' \
         '[0,\"o\",\"first\"]' '[1e20,\"o\",\"never\"]' > '{path}.new' && mv '{path}.new' '{path}'"
    );
    let exec = server
        .call(
            &id,
            "terminal_exec",
            json!({"session_id": sid, "command": command}),
        )
        .await;
    assert_eq!(exec["structuredContent"]["exit_code"], json!(0), "{exec}");
    let mut frames = browser()
        .get(format!("{}/ui/recordings/{name}/frames", server.base))
        .bearer_auth(&server.token)
        .send()
        .await
        .unwrap();
    assert_eq!(frames.status(), StatusCode::OK);
    // The first frame at once, the next when the player's clock moved on.
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while seen.matches("event: frame").count() < 2 {
        let chunk = tokio::time::timeout_at(deadline, frames.chunk())
            .await
            .unwrap_or_else(|_| panic!("no second frame:\n{seen}"))
            .unwrap()
            .unwrap_or_else(|| panic!("the frames ended:\n{seen}\n{}", server.stderr()));
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("first"), "{seen}");
    assert!(!seen.contains("never"), "{seen}");
    assert!(!server.stderr().contains("panicked"), "{}", server.stderr());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_program_waiting_for_input_has_a_badge_on_the_list_and_its_page() {
    let Some(mut chromium) = Chromium::launch() else {
        return;
    };
    let server = server(&[], |c, _| {
        c["commands"]["asker"] = json!({
            "argv": ["/bin/sh", "-c", "echo asking; read -r answer; echo \"got $answer\"; exec sleep 600"],
            "mode": "pty", "description": "asks once, then sleeps"});
    });
    let (url, _) = sign_in_url(&server.stderr);
    let id = server.open_session().await.unwrap();
    let (sid, _) = server
        .start_terminal(&id, json!({"command_id": "asker"}))
        .await;
    let asked = server
        .call(
            &id,
            "terminal_wait",
            json!({"session_id": sid, "until_input": true, "timeout_ms": 30_000}),
        )
        .await;
    assert_eq!(
        asked["structuredContent"]["outcome"],
        json!("awaiting_input"),
        "{asked}"
    );

    let list = chromium.open(&url);
    let badge = format!(
        "(document.querySelector('#live tr[data-session=\"{sid}\"] .badge.waiting') || {{}}).textContent"
    );
    chromium.until(
        &list,
        &format!("{badge} === 'waiting for input: sh'"),
        LIVE_TEXT,
    );
    // Signed in by the list: the session page opens on the browser's cookie.
    let base = url.split("/ui/?").next().unwrap();
    let place = view_place(&mut chromium, &list);
    let page = chromium.open(&format!("{base}{place}sessions/{sid}"));
    let on_page = "(document.querySelector('#live .facts .badge.waiting') || {}).textContent";
    chromium.until(
        &page,
        &format!("{on_page} === 'waiting for input: sh'"),
        LIVE_TEXT,
    );

    // Answered, the program runs on (`sleep`, reading nothing): the badges go.
    server.write(&id, &sid, "yes\n").await;
    chromium.until(
        &page,
        &format!("document.querySelector('#live').textContent.includes('got yes') && {on_page} === undefined"),
        LIVE_TEXT,
    );
    chromium.until(&list, &format!("{badge} === undefined"), LIVE_TEXT);
}

/// A page served on another port of this machine (anyone may listen on one) that has the
/// browser fetch `/ui/…` from it: a browser sends a host's cookies to all its ports, so a
/// cookie scoped to `/ui` went with that fetch, and the cookie opened the view (and with
/// `--web-control`, a shell). The cookie's path is the view's random place now: the fetch
/// carries no cookie. Two views signed in in one browser keep their own cookies too.
#[tokio::test(flavor = "multi_thread")]
async fn the_view_cookie_goes_to_no_other_port_and_two_views_keep_their_own() {
    use std::io::{BufRead, BufReader, Write};
    let Some(mut chromium) = Chromium::launch() else {
        return;
    };
    let (first, second) = (server(&[], |_, _| {}), server(&[], |_, _| {}));
    let mut places = Vec::new();
    for server in [&first, &second] {
        let (url, _) = sign_in_url(&server.stderr);
        let page = chromium.open(&url);
        chromium.until(
            &page,
            "document.getElementById('state').textContent === 'live'",
            "document.body.textContent",
        );
        places.push(view_place(&mut chromium, &page));
    }
    assert_ne!(places[0], places[1]);
    // The first view, opened again after the second sign-in, is still signed in.
    let again = chromium.open(&format!("{}{}", first.base, places[0]));
    chromium.until(
        &again,
        "document.getElementById('state').textContent === 'live'",
        "document.body.textContent",
    );

    // The other port: its page fetches `/ui/x` from itself; each request's head is kept.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = other.local_addr().unwrap().port();
    let (heads, seen) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for stream in other.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut head = String::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            while reader.read_line(&mut head).is_ok_and(|n| n > 2) {}
            let body = "<!doctype html><script>fetch('/ui/x', {credentials: 'include'})</script>";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            if heads.send(head).is_err() {
                return;
            }
        }
    });
    chromium.open(&format!("http://127.0.0.1:{port}/"));
    let deadline = Instant::now() + PATIENCE;
    let fetched = loop {
        let head = seen
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the other port's page fetched /ui/x");
        if head.starts_with("GET /ui/x ") {
            break head;
        }
    };
    assert!(
        !fetched.to_ascii_lowercase().contains("\ncookie:"),
        "the view's cookie went to another port:\n{fetched}"
    );
}
