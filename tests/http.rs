//! `mcp-terminal http` at the HTTP level (SPEC §11): the token file rules, bearer auth,
//! Host and Origin checks, the body limit, the MCP session cap and expiry, requests in
//! flight, the connection cap and timeouts, the live view and its one-time sign-in, logs at
//! every level, and shutdown, through a real HTTP client (or raw sockets, or raw JSON lines
//! for `stdio`) against the real binary. The token never appears on stderr.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

mod support;

use support::config::config_with;
use support::http_server::{BIN, HttpServer as Server, initialize};
use support::stderr::{PATIENCE, Stderr, stderr_of};
use support::view::{
    Chromium, LIVE_TEXT, SIGN_IN, browser, code_of, recording_config, sign_in, sign_in_url, view,
    view_place,
};

/// Every server here logs at trace level: the most a log could give away.
const LOG: &str = "trace";

/// Run `http` to its exit and return (exit code, stderr).
fn run_to_exit(token_file: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args(["http", "--token-file"])
        .arg(token_file)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.stdout.is_empty(), "nothing on stdout");
    (out.status.code(), stderr_of(&out))
}

fn write_token(path: &PathBuf, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn an_absent_token_file_is_created_private_and_only_its_path_is_printed() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_in(dir, &["--listen", "127.0.0.1:0"], LOG);
    let token_file = server.dir.path().join("token");
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(server.token.len(), 64);
    assert!(server.token.bytes().all(|b| b.is_ascii_hexdigit()));
    let created = server.stderr.line("mcp-terminal: created a new token in ");
    assert!(
        created.contains(&token_file.display().to_string()),
        "{created}"
    );
    server.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(server.wait_exit().code(), Some(0));
    assert!(
        !server.stderr().contains(&server.token),
        "{}",
        server.stderr()
    );
}

#[test]
fn token_files_others_can_read_or_too_short_are_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    let secret = "s3cr3t-".repeat(6);
    for mode in [0o644, 0o640, 0o604] {
        write_token(&path, &secret, mode);
        let (code, stderr) = run_to_exit(&path, &["--listen", "127.0.0.1:0"]);
        assert_eq!(code, Some(2), "mode {mode:o}: {stderr}");
        assert!(stderr.contains("chmod 600"), "{stderr}");
        assert!(!stderr.contains(&secret), "{stderr}");
    }
    write_token(&path, "\n  short-token  \n", 0o600);
    let (code, stderr) = run_to_exit(&path, &["--listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("at least 32"), "{stderr}");
    assert!(!stderr.contains("short-token"), "{stderr}");
}

/// A token file is used only when it is a regular file of the server's user: a symlink, a
/// FIFO (which would block the open forever) or another user's file is refused, exit 2.
#[test]
fn token_files_that_are_links_fifos_or_another_users_are_refused_before_reading() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "s3cr3t-".repeat(6);
    let real = dir.path().join("real");
    write_token(&real, &secret, 0o600);
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut cases = vec![
        (link, "is a symbolic link"),
        (fifo, "is not a regular file"),
    ];
    if nix::unistd::geteuid().is_root() {
        let theirs = dir.path().join("theirs");
        write_token(&theirs, &secret, 0o600);
        std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
        cases.push((theirs, "belongs to user 65534"));
    }
    for (path, why) in cases {
        let mut child = Command::new(BIN)
            .args(["http", "--listen", "127.0.0.1:0", "--token-file"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Stderr::of(&mut child);
        // A server hung at start-up (a FIFO read) fails here, within PATIENCE.
        let status = support::stderr::wait_exit(&mut child);
        stderr.line("mcp-terminal: the token file");
        let stderr = stderr.text();
        assert_eq!(status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(why), "{stderr}");
        assert!(!stderr.contains(&secret), "{stderr}");
    }
}

#[tokio::test]
async fn a_token_file_with_surrounding_whitespace_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "0123456789abcdef0123456789abcdef";
    write_token(
        &dir.path().join("token"),
        &format!("\n\t {secret} \n"),
        0o600,
    );
    let server = Server::start_in(dir, &["--listen", "127.0.0.1:0"], LOG);
    assert_eq!(server.token, secret);
    assert!(server.open_session().await.is_ok());
    assert!(!server.stderr().contains("created a new token"));
}

#[test]
fn a_non_loopback_address_needs_allow_remote_which_warns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    let (code, stderr) = run_to_exit(&path, &["--listen", "0.0.0.0:0"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--allow-remote"), "{stderr}");
    let (code, stderr) = run_to_exit(&path, &["--listen", "not an address"]);
    assert_eq!(code, Some(2), "{stderr}");
    let server = Server::start(&["--listen", "0.0.0.0:0", "--allow-remote"], LOG);
    let warning = server.stderr.line("mcp-terminal: warning: --allow-remote");
    assert!(warning.contains("other machines"), "{warning}");
}

#[tokio::test]
async fn mcp_needs_the_bearer_token_and_the_refusal_does_not_echo_it() {
    let server = Server::start(&["--listen", "127.0.0.1:0"], LOG);
    let wrong = format!("{}x", server.token);
    for request in [
        server.post(&initialize(1)),
        server.post(&initialize(1)).bearer_auth(&wrong),
        server.post(&initialize(1)).bearer_auth(&server.token[1..]),
        server
            .post(&initialize(1))
            .header("Authorization", format!("Basic {}", server.token)),
        reqwest::Client::new().get(server.url()),
        reqwest::Client::new().delete(server.url()),
    ] {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        let body = response.text().await.unwrap();
        assert!(body.contains("Authorization: Bearer"), "{body}");
        assert!(!body.contains(&server.token[..16]), "{body}");
    }
    let id = server
        .open_session()
        .await
        .expect("the right token opens a session");
    let listed = server.call(&id, "terminal_list", json!({})).await;
    assert_eq!(listed["structuredContent"]["ok"], json!(true));
    assert!(
        !server.stderr().contains(&server.token[..16]),
        "{}",
        server.stderr()
    );
}

/// A page of an allowed origin may call /mcp from a browser: its preflight is answered
/// without the token, and the answers let that origin read them and the session id. No
/// other origin is told anything.
#[tokio::test]
async fn an_allowed_origin_gets_cors_and_no_other_does() {
    let server = Server::start(
        &[
            "--listen",
            "127.0.0.1:0",
            "--allow-origin",
            "https://app.example",
        ],
        LOG,
    );
    let preflight = |origin: &str| {
        reqwest::Client::new()
            .request(reqwest::Method::OPTIONS, server.url())
            .header("Origin", origin)
            .header("Access-Control-Request-Method", "POST")
            .header(
                "Access-Control-Request-Headers",
                "authorization,content-type,mcp-protocol-version",
            )
            .send()
    };
    let allowed = preflight("https://app.example").await.unwrap();
    assert!(allowed.status().is_success(), "{}", allowed.status());
    let headers = allowed.headers();
    assert_eq!(
        headers["access-control-allow-origin"],
        "https://app.example"
    );
    let asked = headers["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for name in ["authorization", "content-type", "mcp-protocol-version"] {
        assert!(asked.contains(name), "{asked}");
    }
    assert!(
        headers["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .contains("POST")
    );
    let answered = server
        .authed(&initialize(1))
        .header("Origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), StatusCode::OK);
    assert_eq!(
        answered.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let exposed = answered.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(exposed.contains("mcp-session-id"), "{exposed}");
    // The token is still needed for everything but the preflight.
    let tokenless = server
        .post(&initialize(1))
        .header("Origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(tokenless.status(), StatusCode::UNAUTHORIZED);

    let foreign = preflight("https://evil.example").await.unwrap();
    assert_eq!(foreign.status(), StatusCode::FORBIDDEN);
    assert!(
        foreign
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    let local = preflight("http://localhost:1234").await.unwrap();
    assert!(local.headers().get("access-control-allow-origin").is_none());
}

/// The same in a real browser: a page of an allowed origin initializes an MCP session over
/// `fetch` and reads its `Mcp-Session-Id`.
#[tokio::test(flavor = "multi_thread")]
async fn a_browser_page_of_an_allowed_origin_calls_mcp() {
    use std::io::{BufRead, BufReader, Write};
    let Some(mut chromium) = Chromium::launch() else {
        return;
    };
    let pages = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let origin = format!("http://127.0.0.1:{}", pages.local_addr().unwrap().port());
    let server = Server::start(&["--listen", "127.0.0.1:0", "--allow-origin", &origin], LOG);
    let script = format!(
        "fetch({url}, {{method: 'POST', body: {body}, headers: {{\
         'Authorization': 'Bearer ' + {token}, 'Content-Type': 'application/json', \
         'Accept': 'application/json, text/event-stream'}}}})\
         .then(r => {{ document.title = r.status + ' ' + \
         (r.headers.get('mcp-session-id') ? 'with a session id' : 'without'); }})\
         .catch(e => {{ document.title = 'failed: ' + e; }});",
        url = json!(server.url()),
        body = json!(initialize(1).to_string()),
        token = json!(server.token),
    );
    std::thread::spawn(move || {
        for stream in pages.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let body = format!("<!doctype html><title>loading</title><script>{script}</script>");
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let page = chromium.open(&format!("{origin}/"));
    chromium.until(
        &page,
        "document.title !== 'loading' && document.title !== ''",
        "document.title",
    );
    assert_eq!(
        chromium.eval(&page, "document.title"),
        json!("200 with a session id")
    );
}

#[tokio::test]
async fn foreign_origins_and_hosts_are_refused_with_403() {
    let server = Server::start(
        &[
            "--listen",
            "127.0.0.1:0",
            "--allow-origin",
            "https://app.example",
            // As a browser sends it: the scheme's own port is never written, and the host
            // is in lower case.
            "--allow-origin",
            "HTTPS://Other.Example:443",
            "--allow-origin",
            "http://[::1]:8080",
        ],
        LOG,
    );
    for origin in [
        "http://evil.example",
        "null",
        "http://127.0.0.1.evil.example:80",
    ] {
        let response = server
            .authed(&initialize(1))
            .header("Origin", origin)
            .send()
            .await;
        assert_eq!(
            response.unwrap().status(),
            StatusCode::FORBIDDEN,
            "{origin}"
        );
    }
    // Refused before the token is looked at: an attacker's page learns nothing else.
    let response = server
        .post(&initialize(1))
        .header("Origin", "http://evil.example");
    assert_eq!(
        response.send().await.unwrap().status(),
        StatusCode::FORBIDDEN
    );
    for origin in [
        &server.base,
        "http://localhost:1234",
        "https://app.example",
        "https://other.example",
    ] {
        let response = server
            .authed(&initialize(1))
            .header("Origin", origin)
            .send()
            .await;
        assert_eq!(response.unwrap().status(), StatusCode::OK, "{origin}");
    }
    for host in ["evil.example", "evil.example:8765", "192.168.1.1"] {
        let response = server
            .authed(&initialize(1))
            .header("Host", host)
            .send()
            .await;
        assert_eq!(response.unwrap().status(), StatusCode::FORBIDDEN, "{host}");
    }
    let remote = Server::start(&["--listen", "127.0.0.1:0", "--allow-remote"], LOG);
    // Said at start: the rebinding check is off, on a loopback address too.
    let warning = remote.stderr.line("mcp-terminal: warning: --allow-remote");
    assert!(warning.contains("any Host header is accepted"), "{warning}");
    let response = remote
        .authed(&initialize(1))
        .header("Host", "evil.example")
        .send()
        .await;
    assert_eq!(response.unwrap().status(), StatusCode::OK);
}

/// The checks read what a request names, not its first line of each: two `Host` lines are
/// a bad request, two `Origin` lines a foreign origin, a target in absolute form names the
/// host itself; and a request head not finished within 32 KiB is refused.
#[test]
fn two_hosts_two_origins_a_foreign_target_and_long_heads_are_refused() {
    let server = Server::start(&["--listen", "127.0.0.1:0"], LOG);
    let address = address(&server.base);
    let ask = |request: String| {
        let mut socket = std::net::TcpStream::connect(&address).unwrap();
        exchange(&mut socket, &request)
    };
    let local = format!("Host: {address}\r\n");
    let tail = "Content-Length: 0\r\nConnection: close\r\n\r\n";
    for (head, status) in [
        (
            format!("POST /mcp HTTP/1.1\r\n{local}Host: evil.example\r\n"),
            " 400 ",
        ),
        (
            format!("POST /mcp HTTP/1.1\r\nHost: evil.example\r\n{local}"),
            " 400 ",
        ),
        (
            format!(
                "POST /mcp HTTP/1.1\r\n{local}Origin: http://localhost\r\n\
                 Origin: http://evil.example\r\n"
            ),
            " 403 ",
        ),
        (
            format!("POST http://evil.example/mcp HTTP/1.1\r\n{local}"),
            " 403 ",
        ),
        // The same target naming this server: on to the token, which is missing.
        (
            format!("POST http://{address}/mcp HTTP/1.1\r\n{local}"),
            " 401 ",
        ),
    ] {
        let answer = ask(format!("{head}{tail}"));
        assert!(answer.contains(status), "{head}: {answer}");
    }
    // Never finished: what a client that means to hold memory sends.
    let pad = format!("X-Pad: {}\r\n", "p".repeat(1000)).repeat(40);
    let status = ask(format!("GET /mcp HTTP/1.1\r\n{local}{pad}"));
    assert!(status.contains(" 431 "), "{status}");
    let pad = format!("X-Pad: {}\r\n", "p".repeat(1000)).repeat(20);
    let status = ask(format!("POST /mcp HTTP/1.1\r\n{local}{pad}{tail}"));
    assert!(status.contains(" 401 "), "a 20 KiB head is read: {status}");
}

/// What the service cannot read is answered as on stdio: a body that is not JSON with 400
/// and a JSON-RPC "Parse error" (not 415 to `application/json`), params of a known method
/// that are not as MCP defines them with "Invalid params" naming why.
#[tokio::test]
async fn unreadable_bodies_are_answered_as_on_stdio() {
    let server = Server::start(&["--listen", "127.0.0.1:0"], LOG);
    let id = server.open_session().await.unwrap();
    let garbage = post_in_session(&server, &id, "{not json").await;
    assert_eq!(garbage.status(), StatusCode::BAD_REQUEST);
    let answer: Value = garbage.json().await.unwrap();
    assert_eq!(answer["error"]["code"], json!(-32700), "{answer}");
    assert_eq!(answer["id"], Value::Null, "{answer}");
    let mistyped = server
        .authed(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "terminal_list", "arguments": "x"}}))
        .header("Mcp-Session-Id", &id)
        .send()
        .await
        .unwrap();
    assert_eq!(mistyped.status(), StatusCode::OK);
    let answer: Value = mistyped.json().await.unwrap();
    assert_eq!(answer["id"], json!(7), "{answer}");
    assert_eq!(answer["error"]["code"], json!(-32602), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("`arguments` an object"), "{message}");
    // A session that is not open is the client's to open again: 404, as for any request.
    let stale = server
        .authed(&json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
            "params": {"name": "terminal_list", "arguments": "x"}}))
        .header("Mcp-Session-Id", "no-such-session")
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), StatusCode::NOT_FOUND);
    // Without the token nothing is read.
    let tokenless = server
        .post(&json!({}))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(tokenless.status(), StatusCode::UNAUTHORIZED);
}

/// JSON that is no valid JSON-RPC request gets the answer stdio gives the same line (code,
/// message, id), as JSON, never rmcp's 415 in plain text: "Invalid Request" with the id when
/// one can be read (200, as any answer to a request), else with `id: null` and 400, as a
/// body that is not JSON.
/// POST `body` as it is, with the token, in MCP session `session`.
async fn post_in_session(
    server: &Server,
    session: &str,
    body: impl Into<reqwest::Body>,
) -> reqwest::Response {
    server
        .post(&json!({}))
        .bearer_auth(&server.token)
        .header("Mcp-Session-Id", session)
        .body(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn bodies_that_are_no_valid_request_are_answered_as_on_stdio() {
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":12,"method":"tools/list","params":{{"a":{}{}}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let bodies: [(&[u8], StatusCode, i64, Value); 7] = [
        (
            br#"[{"jsonrpc":"2.0","id":5,"method":"tools/list"}]"#,
            StatusCode::BAD_REQUEST,
            -32600,
            Value::Null,
        ),
        (
            br#"{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}"#,
            StatusCode::BAD_REQUEST,
            -32600,
            Value::Null,
        ),
        (
            br#"{"jsonrpc":"2.0","id":13,"id":14,"method":"tools/list"}"#,
            StatusCode::BAD_REQUEST,
            -32600,
            Value::Null,
        ),
        (
            br#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":"x"}"#,
            StatusCode::OK,
            -32600,
            json!(10),
        ),
        (
            br#"{"id":7,"method":"tools/list"}"#,
            StatusCode::OK,
            -32600,
            json!(7),
        ),
        (
            deep.as_bytes(),
            StatusCode::BAD_REQUEST,
            -32700,
            Value::Null,
        ),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":15,\"method\":\"tools/list\",\"params\":{\"x\":\"\xff\"}}",
            StatusCode::BAD_REQUEST,
            -32700,
            Value::Null,
        ),
    ];
    let server = Server::start(&["--listen", "127.0.0.1:0"], LOG);
    let session = server.open_session().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut stdio = StdioServer::start(dir.path(), &[]);
    for (body, status, code, id) in bodies {
        let shown = String::from_utf8_lossy(body);
        let response = post_in_session(&server, &session, body.to_vec()).await;
        assert_eq!(response.status(), status, "{shown}");
        let kind = response.headers()[reqwest::header::CONTENT_TYPE].clone();
        assert_eq!(kind, "application/json", "{shown}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["code"], json!(code), "{shown}: {answer}");
        assert_eq!(answer["id"], id, "{shown}: {answer}");
        assert_eq!(answer, stdio.answer_line(body), "{shown}");
    }
    stdio.finish();
    // A notification the server cannot read gets no answer on stdio; over HTTP, 400 and an
    // error without an id.
    let response = post_in_session(
        &server,
        &session,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#,
    )
    .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["code"], json!(-32600), "{answer}");
    assert_eq!(answer["id"], Value::Null, "{answer}");
}

#[tokio::test]
async fn request_bodies_over_1_mib_get_413() {
    let server = Server::start(&["--listen", "127.0.0.1:0"], LOG);
    // Only just over the limit, so the client has sent everything when the answer comes
    // (a server that answers early and closes could otherwise break the client's write).
    let padding = "x".repeat(1024 * 1024 - 40);
    let big =
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": {"pad": padding}}});
    let response = server.authed(&big).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // Streamed without a Content-Length, it is cut off as it arrives.
    let mut chunks: Vec<Result<String, std::io::Error>> =
        (0..16).map(|_| Ok("y".repeat(64 * 1024))).collect();
    chunks.push(Ok("y".into()));
    let streamed = server
        .post(&json!({}))
        .bearer_auth(&server.token)
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // Without the token the size is no one's business.
    let response = server.post(&big).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(
        server.open_session().await.is_ok(),
        "the server keeps serving"
    );
}

#[tokio::test]
async fn at_most_64_mcp_sessions_are_open_and_closing_one_answers_200_and_frees_a_place_once() {
    let server = Server::start(&["--listen", "127.0.0.1:0"], LOG);
    let mut ids = Vec::new();
    for _ in 0..64 {
        ids.push(server.open_session().await.expect("under the cap"));
    }
    let (status, body) = server
        .open_session()
        .await
        .expect_err("the 65th is refused");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("64 MCP sessions are open"), "{body}");
    let closed = reqwest::Client::new()
        .delete(server.url())
        .bearer_auth(&server.token)
        .header("Mcp-Session-Id", &ids[0])
        .send()
        .await
        .unwrap();
    // 200, not 202: the session is closed by the time of the answer, and clients (the
    // Python SDK) take anything but 200 or 204 for a failed termination.
    assert_eq!(closed.status(), StatusCode::OK);
    assert!(server.open_session().await.is_ok(), "a place was freed");
    // Closed, it is no longer there: a second DELETE, like one of an id never issued, is
    // answered 404 Not Found, as the protocol answers any request naming such a session.
    for id in [ids[0].as_str(), "never-issued"] {
        let again = reqwest::Client::new()
            .delete(server.url())
            .bearer_auth(&server.token)
            .header("Mcp-Session-Id", id)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), StatusCode::NOT_FOUND, "{id}");
    }
}

#[tokio::test]
async fn an_idle_mcp_session_expires() {
    let server = Server::start(
        &["--listen", "127.0.0.1:0", "--mcp-session-idle-ms", "200"],
        LOG,
    );
    let id = server.open_session().await.unwrap();
    let deadline = Instant::now() + PATIENCE;
    loop {
        // Each probe is a request that keeps the session alive, so probes are spaced wider
        // than the idle time: the timer is what is waited for.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
        let response = server
            .authed(&ping)
            .header("Mcp-Session-Id", &id)
            .send()
            .await;
        if response.unwrap().status() == StatusCode::NOT_FOUND {
            break;
        }
        assert!(Instant::now() < deadline, "the idle session never expired");
    }
    // The default, 30 minutes, is the same code path with a longer timer: a session in use
    // is kept.
    let kept = Server::start(&["--listen", "127.0.0.1:0"], LOG);
    let id = kept.open_session().await.unwrap();
    let listed = kept.call(&id, "terminal_list", json!({})).await;
    assert_eq!(listed["structuredContent"]["ok"], json!(true));
}

#[tokio::test]
async fn sigterm_ends_every_terminal_session_and_exits_0() {
    shutdown_by(nix::sys::signal::Signal::SIGTERM).await;
}

/// A server run in a terminal that is closed gets SIGHUP: it shuts down as on SIGTERM.
#[tokio::test]
async fn sighup_ends_every_terminal_session_and_exits_0() {
    shutdown_by(nix::sys::signal::Signal::SIGHUP).await;
}

async fn shutdown_by(signal: nix::sys::signal::Signal) {
    let mut server = Server::start(&["--listen", "127.0.0.1:0"], LOG);
    let first = server.open_session().await.unwrap();
    let second = server.open_session().await.unwrap();
    let (session, started) = server
        .start_terminal(&first, json!({"command_id": "long"}))
        .await;
    let pid = started["structuredContent"]["process_id"].as_i64().unwrap() as i32;
    // All MCP sessions share one set of terminal sessions.
    let seen = server
        .call(&second, "terminal_status", json!({"session_id": session}))
        .await;
    assert_eq!(seen["structuredContent"]["status"], json!("RUNNING"));
    server.signal(signal);
    assert_eq!(server.wait_exit().code(), Some(0));
    let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err();
    assert!(gone, "the session's process {pid} outlived the server");
    let stderr = server.stderr_until("line of the session's end", |text| {
        text.contains("session ended by server shutdown")
    });
    assert!(!stderr.contains(&server.token[..16]), "{stderr}");
}

/// A server of the demo profiles that writes an audit log: the server, and the log's path.
fn audited_server() -> (Server, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().canonicalize().unwrap().join("audit.jsonl");
    let config = config_with(dir.path(), false, |c| c["audit_log"] = json!(log));
    let config = config.display().to_string();
    let server = Server::start_in(dir, &["--listen", "127.0.0.1:0", "--config", &config], LOG);
    (server, log)
}

#[tokio::test]
async fn audit_lines_over_http_carry_the_mcp_session_and_the_client_address() {
    let (server, log) = audited_server();
    let id = server.open_session().await.unwrap();
    let listed = server.call(&id, "terminal_list", json!({})).await;
    assert_eq!(listed["structuredContent"]["ok"], json!(true));
    let text = std::fs::read_to_string(&log).unwrap();
    let line: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(line["tool"], json!("terminal_list"), "{line}");
    assert_eq!(line["mcp_session_id"], json!(id), "{line}");
    let client = line["client"].as_str().unwrap_or_default();
    assert!(client.starts_with("127.0.0.1:"), "{line}");
    assert!(!text.contains(&server.token[..16]), "{text}");
}

/// Started with SIGHUP ignored (`nohup`), the server keeps it ignored: closing the terminal
/// it was started from must not end it.
#[test]
fn a_server_started_with_sighup_ignored_keeps_running_on_sighup() {
    let home = tempfile::tempdir().unwrap();
    let ignoring = "trap '' HUP; exec \"$0\" \"$@\"";
    let (mut child, stderr) = http_with_default_config(home.path(), &["/bin/sh", "-c", ignoring]);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let text = stderr.until("the shutdown line", |t| t.contains("shutting down"));
    assert!(text.contains("shutting down (SIGTERM)"), "{text}");
}

#[test]
fn without_token_file_the_token_lives_beside_the_default_config() {
    let home = tempfile::tempdir().unwrap();
    let (mut child, stderr) = http_with_default_config(home.path(), &[]);
    let path = home.path().join("mcp-terminal/token");
    let created = stderr.line("mcp-terminal: created a new token in ");
    assert!(created.contains(&path.display().to_string()), "{created}");
    assert_eq!(std::fs::read_to_string(&path).unwrap().trim().len(), 64);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// `mcp-terminal http` on a free port, with `home` as its config home and no flags, run
/// through `wrapper` (a program and its first arguments, the server's path after them),
/// once it listens.
fn http_with_default_config(
    home: &std::path::Path,
    wrapper: &[&str],
) -> (std::process::Child, Stderr) {
    let mut argv: Vec<&str> = wrapper.to_vec();
    argv.extend([BIN, "http", "--listen", "127.0.0.1:0"]);
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .current_dir(home)
        .env("XDG_CONFIG_HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = Stderr::of(&mut child);
    stderr.line("mcp-terminal: listening on http://127.0.0.1:");
    (child, stderr)
}

// The live view (`--web`, SPEC §11).

#[tokio::test]
async fn live_view_sign_in_is_a_one_time_code_that_buys_a_cookie_not_the_token() {
    let server = Server::start(&["--listen", "127.0.0.1:0", "--web"], LOG);
    let (url, base) = sign_in_url(&server.stderr);
    assert_eq!(url, format!("{}/ui/?code={}", server.base, code_of(&url)));
    assert!(!url.contains(&server.token), "{url}");

    let response = browser().get(&url).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    // The view's own place: a random path, the cookie's, which another port's page cannot
    // name (a browser sends a host's cookies to all its ports).
    let place = response.headers()["location"].to_str().unwrap().to_string();
    let segment = place
        .strip_prefix("/ui/")
        .and_then(|p| p.strip_suffix('/'))
        .unwrap_or_default();
    assert_eq!(segment.len(), 32, "{place}");
    assert!(segment.bytes().all(|b| b.is_ascii_hexdigit()), "{place}");
    let set_cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_string();
    let attributes: Vec<&str> = set_cookie.split(';').map(str::trim).collect();
    let path = format!("Path={place}");
    for attribute in ["HttpOnly", "SameSite=Strict", &path] {
        assert!(attributes.contains(&attribute), "{set_cookie}");
    }
    assert!(!set_cookie.contains(&server.token[..16]), "{set_cookie}");
    assert!(!set_cookie.contains(&code_of(&url)), "{set_cookie}");
    let cookie = attributes[0].to_string();

    let (status, headers, body) = view(&base, &place, &cookie).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("<h1>Sessions</h1>"), "{body}");
    assert!(body.contains(&format!("<base href=\"{place}\">")), "{body}");
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(policy.starts_with("default-src 'self'"), "{policy}");
    assert_eq!(headers["x-content-type-options"], "nosniff");

    // The code is spent: the same address (a browser's history) signs nobody in again.
    let again = browser().get(&url).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::UNAUTHORIZED);
    assert!(again.headers().get("set-cookie").is_none());
    let body = again.text().await.unwrap();
    assert!(body.contains("already used, has expired"), "{body}");

    // Without a valid cookie or bearer token: 401 and a page that says how to sign in.
    for cookie in [
        "",
        "mcp_terminal_view=forged",
        &format!("mcp_terminal_view={}", server.token),
    ] {
        let (status, headers, body) = view(&base, "/ui/", cookie).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{cookie}");
        assert_eq!(headers["www-authenticate"], "Bearer");
        assert!(body.contains("Sign in to the live view"), "{body}");
        assert!(body.contains("/ui/?code="), "{body}");
    }
    // The token in the query signs nobody in, nor does a code the server never issued.
    for query in [
        format!("token={}", server.token),
        format!("code={}", "0".repeat(32)),
    ] {
        let response = browser()
            .get(format!("{base}/ui/?{query}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{query}");
        assert!(response.headers().get("set-cookie").is_none(), "{query}");
    }
    let bearer = browser()
        .get(format!("{base}/ui/"))
        .bearer_auth(&server.token)
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), StatusCode::OK);
    // Neither the cookie nor the code opens the MCP endpoint.
    for credential in [cookie.clone(), format!("Bearer {}", code_of(&url))] {
        let mut request = server.post(&initialize(1));
        request = if credential.starts_with("Bearer") {
            request.header("Authorization", &credential)
        } else {
            request.header("Cookie", &credential)
        };
        let mcp = request.send().await.unwrap();
        assert_eq!(mcp.status(), StatusCode::UNAUTHORIZED, "{credential}");
    }

    let stderr = server.stderr();
    assert!(!stderr.contains(&server.token), "{stderr}");
    assert_eq!(stderr.matches(&code_of(&url)).count(), 1, "{stderr}");
    assert!(stderr.lines().any(|l| l.starts_with(SIGN_IN)), "{stderr}");
}

#[tokio::test]
async fn live_view_is_read_only_and_answers_unknown_pages_with_404() {
    let server = Server::start(&["--listen", "127.0.0.1:0", "--web"], LOG);
    let (url, base) = sign_in_url(&server.stderr);
    let cookie = sign_in(&url).await;
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        for path in [
            "/ui/",
            "/ui/events",
            "/ui/sessions/x",
            "/ui/sessions/x/events",
            "/ui/other",
        ] {
            let response = browser()
                .request(method.parse().unwrap(), format!("{base}{path}"))
                .header("Cookie", &cookie)
                .body("{}")
                .send()
                .await
                .unwrap();
            assert_eq!(
                response.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}"
            );
            assert_eq!(response.headers()["allow"], "GET, HEAD");
        }
    }
    let head = browser()
        .head(format!("{base}/ui/"))
        .header("Cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), StatusCode::OK);

    let (status, _, body) = view(
        &base,
        "/ui/sessions/%3Cscript%3Ealert(1)%3C%2Fscript%3E",
        &cookie,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body.contains("No session &lt;script&gt;alert(1)&lt;/script&gt;"),
        "{body}"
    );
    assert!(!body.contains("<script>alert"), "{body}");
    let (status, _, body) = view(&base, "/ui/nothing/here", &cookie).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("Not found"), "{body}");
    let (status, _, _) = view(&base, "/ui/recordings/..%2F..%2Fetc%2Fpasswd", &cookie).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The listener's root, as a browser opens it: where things are, not the view's place.
    for path in ["/", "/index.html"] {
        let (status, _, body) = view(&base, path, "").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(
            body.contains("MCP at /mcp") && body.contains("web-url"),
            "{body}"
        );
        assert!(!body.contains("/ui/"), "{body}");
    }

    // Without --web there is no view at all.
    let plain = Server::start(&["--listen", "127.0.0.1:0"], LOG);
    let (status, _, _) = view(&plain.base, "/ui/", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(!plain.stderr().contains(SIGN_IN));
}

#[tokio::test]
async fn live_view_shows_hostile_output_as_text_with_stderr_apart_and_the_recording() {
    let dir = tempfile::tempdir().unwrap();
    let config = recording_config(dir.path());
    let server = Server::start_in(
        dir,
        &["--listen", "127.0.0.1:0", "--web", "--config", &config],
        LOG,
    );
    let (url, base) = sign_in_url(&server.stderr);
    let cookie = sign_in(&url).await;
    let id = server.open_session().await.unwrap();
    let (sid, started) = server
        .start_terminal(&id, json!({"command_id": "sh"}))
        .await;
    let script = "printf '<script>alert(1)</script>\\n'; printf 'warn<b>\\n' >&2\n";
    server.write(&id, &sid, script).await;
    let waited = server
        .call(
            &id,
            "terminal_wait",
            json!({"session_id": sid, "pattern": "warn<b>"}),
        )
        .await;
    assert_eq!(
        waited["structuredContent"]["outcome"],
        json!("matched"),
        "{waited}"
    );

    let (status, headers, page) = view(&base, &format!("/ui/sessions/{sid}"), &cookie).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(
        page.contains("<span class=\"stdout\">&lt;script&gt;alert(1)&lt;/script&gt;\n"),
        "{page}"
    );
    assert!(
        page.contains("<span class=\"stderr\">warn&lt;b&gt;\n"),
        "{page}"
    );
    assert!(!page.contains("<script>alert"), "{page}");
    assert!(!page.contains("warn<b>"), "{page}");

    let (_, _, list) = view(&base, "/ui/", &cookie).await;
    assert!(list.contains(&format!("href=\"sessions/{sid}\"")), "{list}");
    assert!(list.contains("RUNNING"), "{list}");

    let name = started["structuredContent"]["recording"].as_str().unwrap();
    assert!(
        page.contains(&format!("href=\"recordings/{name}\"")),
        "{page}"
    );
    let (status, headers, cast) = view(&base, &format!("/ui/recordings/{name}"), &cookie).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "application/x-asciicast");
    let header: Value = serde_json::from_str(cast.lines().next().unwrap()).unwrap();
    assert_eq!(header["version"], json!(2), "{cast}");
    let (status, _, _) = view(&base, &format!("/ui/recordings/{name}"), "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // A PTY session's page is its emulator's screen: colours and the cursor as classes.
    let (pty, _) = server
        .start_terminal(&id, json!({"command_id": "bash"}))
        .await;
    let text = "printf '\\033[31;1mRED\\033[0m<i>\\n'\n";
    server
        .call(
            &id,
            "terminal_write",
            json!({"session_id": pty, "text": text}),
        )
        .await;
    let waited = server
        .call(
            &id,
            "terminal_wait",
            json!({"session_id": pty, "pattern": "RED\\S*<i>\\r?\\n", "strip_ansi": true}),
        )
        .await;
    assert_eq!(
        waited["structuredContent"]["outcome"],
        json!("matched"),
        "{waited}"
    );
    let (_, _, page) = view(&base, &format!("/ui/sessions/{pty}"), &cookie).await;
    assert!(
        page.contains("<span class=\"f1 bold\">RED</span>&lt;i&gt;"),
        "{page}"
    );
    assert_eq!(page.matches("cursor\"").count(), 1, "{page}");
}

#[tokio::test]
async fn live_view_streams_new_output_to_an_open_page() {
    let server = Server::start(&["--listen", "127.0.0.1:0", "--web"], LOG);
    let (url, base) = sign_in_url(&server.stderr);
    let cookie = sign_in(&url).await;
    let id = server.open_session().await.unwrap();
    let (sid, _) = server
        .start_terminal(&id, json!({"command_id": "interactive"}))
        .await;
    let mut events = browser()
        .get(format!("{base}/ui/sessions/{sid}/events"))
        .header("Cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), StatusCode::OK);
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    let mut seen = String::new();
    let mut until = async |text: &str| {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !seen.contains(text) {
            let chunk = tokio::time::timeout_at(deadline, events.chunk())
                .await
                .unwrap_or_else(|_| panic!("no `{text}` in the events:\n{seen}"))
                .unwrap()
                .expect("the event stream ended");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    until("ready\n").await;
    server.write(&id, &sid, "hello <i>\n").await;
    until("echo: hello &lt;i&gt;").await;
}

#[test]
fn stdio_web_serves_the_view_beside_stdio_on_loopback_only() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    let mut child = Command::new(BIN)
        .args(["stdio", "--web", "--token-file"])
        .arg(&token_file)
        .current_dir(dir.path())
        // Its own HOME: the sign-in URL file goes beside a config of this test's.
        .env("HOME", dir.path())
        .env_remove("XDG_CONFIG_HOME")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = Stderr::of(&mut child);
    let (url, base) = sign_in_url(&stderr);
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let token = std::fs::read_to_string(&token_file).unwrap();
    code_of(&url);
    assert!(!url.contains(token.trim()), "{url}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let cookie = sign_in(&url).await;
        let (status, _, body) = view(&base, "/ui/", &cookie).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let foreign = browser()
            .get(format!("{base}/ui/"))
            .header("Cookie", &cookie)
            .header("Origin", "http://evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(foreign.status(), StatusCode::FORBIDDEN);
        let (status, _, body) = view(&base, "/", "").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(
            body.contains("live view") && body.contains("web-url"),
            "{body}"
        );
        assert!(!body.contains("/ui/"), "{body}");
    });
    drop(child.stdin.take());
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let printed = stderr.text();
    assert!(!printed.contains(token.trim()), "{printed}");

    let out = Command::new(BIN)
        .args(["stdio", "--web", "0.0.0.0:0", "--token-file"])
        .arg(&token_file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let message = stderr_of(&out);
    assert!(message.contains("not a loopback address"), "{message}");
    assert!(!message.contains(token.trim()), "{message}");
}

#[tokio::test(flavor = "multi_thread")]
async fn live_view_in_chromium_follows_a_pty_screen_and_pipe_output() {
    let Some(mut chromium) = Chromium::launch() else {
        return;
    };
    let server = Server::start(&["--listen", "127.0.0.1:0", "--web"], LOG);
    let (url, _) = sign_in_url(&server.stderr);
    let id = server.open_session().await.unwrap();
    // Chromium's start and first page can take most of the default 30 s session lifetime
    // on a loaded machine; the sessions outlive any wait of this test instead.
    let (tui, _) = server
        .start_terminal(&id, json!({"command_id": "pty-tui", "timeout_ms": 300_000}))
        .await;

    // Signing in at the session page: the cookie is set and the page loads without the token.
    let page = chromium.open(&url.replace("/ui/?", &format!("/ui/sessions/{tui}?")));
    chromium.until(
        &page,
        "document.getElementById('state').textContent === 'live' \
         && document.querySelector('#live pre.screen').textContent.includes('counter: 0')",
        LIVE_TEXT,
    );
    let place = view_place(&mut chromium, &page);
    assert_eq!(
        chromium.eval(&page, "location.pathname + location.search"),
        json!(format!("{place}sessions/{tui}"))
    );
    // pty-tui hides its cursor (`ESC [?25l`), and so does the page.
    assert_eq!(
        chromium.eval(&page, "document.querySelectorAll('#live .cursor').length"),
        json!(0)
    );
    // Marks this document: still there after the update, so no reload brought it.
    chromium.eval(&page, "window.stillTheSamePage = true");
    let keys = json!({"session_id": tui, "keys": ["Up", "Up", "Up"]});
    server.call_ok(&id, "terminal_keys", keys).await;
    chromium.until(
        &page,
        "document.querySelector('#live pre.screen').textContent.includes('counter: 3') \
         && window.stillTheSamePage === true",
        LIVE_TEXT,
    );
    let png = chromium.screenshot(&page);
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let shot = std::env::var_os("MCP_TERMINAL_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("live-view.png"));
    std::fs::write(&shot, &png).unwrap();

    // The list shows a session started after it was opened, then its page the output.
    let list = chromium.open(&format!("{}{place}", server.base));
    chromium.until(
        &list,
        "document.getElementById('state').textContent === 'live'",
        LIVE_TEXT,
    );
    let (stream, _) = server
        .start_terminal(&id, json!({"command_id": "stream", "timeout_ms": 300_000}))
        .await;
    chromium.until(
        &list,
        &format!("document.querySelector('tr[data-session=\"{stream}\"]') !== null"),
        LIVE_TEXT,
    );
    let page = chromium.open(&format!("{}{place}sessions/{stream}", server.base));
    chromium.until(
        &page,
        "[...document.querySelectorAll('#live .stdout')].some(e => e.textContent.includes('5')) \
         && document.querySelectorAll('#live .stderr').length > 0 \
         && document.querySelector('#live .status').textContent === 'EXITED'",
        LIVE_TEXT,
    );
}

// Connections: the cap, the header and idle timeouts, and running out of descriptors
// (SPEC §11: "Header-read and idle timeouts and a connection cap apply to every listener").

/// The `host:port` of a server's base URL.
fn address(base: &str) -> String {
    base.trim_start_matches("http://").to_string()
}

/// Open descriptors of process `pid`.
fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Whether the server has closed `socket` (end of file or reset), without waiting.
fn is_closed(socket: &std::net::TcpStream) -> bool {
    socket.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match (&*socket).read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
            Err(_) => break true,
        }
    };
    socket.set_nonblocking(false).unwrap();
    closed
}

/// Wait until the server has closed `socket`; how long that took.
fn closed_after(socket: &std::net::TcpStream, since: Instant) -> Duration {
    while !is_closed(socket) {
        assert!(since.elapsed() < PATIENCE, "the server kept the connection");
        std::thread::sleep(Duration::from_millis(10));
    }
    since.elapsed()
}

/// Send `request` on `socket` and read one whole answer (head and a Content-Length body):
/// its status line.
fn exchange(socket: &mut std::net::TcpStream, request: &str) -> String {
    use std::io::Write;
    socket.write_all(request.as_bytes()).unwrap();
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        assert_eq!(socket.read(&mut byte).unwrap(), 1, "closed mid-answer");
        answer.push(byte[0]);
    }
    let head = String::from_utf8(answer).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    socket.read_exact(&mut body).unwrap();
    head.lines().next().unwrap().to_string()
}

/// A server with the view whose request-head timeout is far beyond a test: what frees
/// places is the connection cap, not a timer.
fn held_open_server() -> Server {
    Server::start(
        &[
            "--listen",
            "127.0.0.1:0",
            "--web",
            "--header-read-timeout-ms",
            "600000",
        ],
        LOG,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn half_open_connections_neither_hold_more_than_the_cap_nor_keep_a_client_out() {
    let server = held_open_server();
    let pid = server.child.id();
    let before = fd_count(pid);
    let opened = 300;
    let cap = 128;
    let mut half_open = Vec::new();
    for _ in 0..opened {
        use std::io::Write;
        let mut socket = std::net::TcpStream::connect(address(&server.base)).unwrap();
        socket
            .write_all(b"GET /ui/ HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .unwrap();
        half_open.push(socket);
    }
    // The oldest make way for the newest: all but the cap are closed by the server, and
    // promptly (the bound is generous for a loaded machine; without the cap they would be
    // held for the whole header timeout).
    let since = Instant::now();
    for socket in &half_open[..opened - cap] {
        closed_after(socket, since);
    }
    assert!(
        half_open[opened - cap..].iter().all(|s| !is_closed(s)),
        "the newest are served"
    );
    let held = fd_count(pid);
    assert!(held <= before + cap + 4, "{before} → {held} descriptors");

    // A real client is served, through the view and through /mcp, while they are held.
    let page = browser()
        .get(format!("{}/ui/", server.base))
        .bearer_auth(&server.token)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let id = server.open_session().await.expect("an MCP session opens");
    let listed = server.call(&id, "terminal_list", json!({})).await;
    assert_eq!(listed["structuredContent"]["ok"], json!(true), "{listed}");
}

#[test]
fn with_every_place_signed_in_a_new_connection_gets_503_at_once() {
    let server = held_open_server();
    let request = format!(
        "GET /ui/style.css HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\r\n",
        server.token
    );
    let mut signed_in: Vec<std::net::TcpStream> = (0..128)
        .map(|_| {
            let mut socket = std::net::TcpStream::connect(address(&server.base)).unwrap();
            assert_eq!(exchange(&mut socket, &request), "HTTP/1.1 200 OK");
            socket
        })
        .collect();
    let mut late = std::net::TcpStream::connect(address(&server.base)).unwrap();
    late.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut answer = String::new();
    late.read_to_string(&mut answer).ok();
    assert!(
        answer.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
        "{answer}"
    );
    assert!(answer.contains("128 connections are open"), "{answer}");
    // A place freed is a place taken.
    drop(signed_in.pop());
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut socket = std::net::TcpStream::connect(address(&server.base)).unwrap();
        use std::io::Write;
        if socket.write_all(request.as_bytes()).is_ok() {
            let mut head = [0u8; 12];
            if socket.read_exact(&mut head).is_ok() && &head == b"HTTP/1.1 200" {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the freed place was never taken");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn silent_slow_and_stalled_connections_are_closed_by_the_timeouts() {
    use std::io::Write;
    let server = Server::start(
        &[
            "--listen",
            "127.0.0.1:0",
            "--header-read-timeout-ms",
            "300",
            "--connection-idle-ms",
            "1000",
        ],
        LOG,
    );
    let connect = || std::net::TcpStream::connect(address(&server.base)).unwrap();

    // Each `since` is taken before the server can have started the timer it measures.
    let since = Instant::now();
    let silent = connect();
    assert!(closed_after(&silent, since) >= Duration::from_millis(300));

    let since = Instant::now();
    let mut slow = connect();
    slow.write_all(b"GET /mcp HTTP/1.1\r\nHost: 127.0").unwrap();
    assert!(closed_after(&slow, since) >= Duration::from_millis(300));

    // Between requests the same timer runs: a kept-alive connection must ask again in time.
    let mut kept = connect();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let refused = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nAuthorization: Bearer {}\r\n\r\n{ping}",
        ping.len(),
        server.token
    );
    let since = Instant::now();
    let status = exchange(&mut kept, &refused);
    assert!(status.starts_with("HTTP/1.1 "), "{status}");
    assert!(closed_after(&kept, since) >= Duration::from_millis(300));

    // A signed-in request whose body stalls: no byte moves, so the idle timeout ends it.
    let since = Instant::now();
    let mut stalled = connect();
    write!(
        stalled,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\
         Authorization: Bearer {}\r\n\r\n{{\"jsonrpc\"",
        server.token
    )
    .unwrap();
    assert!(closed_after(&stalled, since) >= Duration::from_millis(1000));

    // And a client that behaves is served as before.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let id = server.open_session().await.expect("an MCP session opens");
        let listed = server.call(&id, "terminal_list", json!({})).await;
        assert_eq!(listed["structuredContent"]["ok"], json!(true), "{listed}");
    });
}

#[test]
fn out_of_descriptors_a_start_says_so_not_that_the_cwd_is_wrong() {
    use std::io::{BufRead, Write};
    use std::os::unix::process::CommandExt;
    const LIMIT: u64 = 64;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    let mut command = Command::new(BIN);
    command
        .args(["stdio", "--web", "127.0.0.1:0", "--token-file"])
        .arg(&token_file)
        .env(
            "MCP_TERMINAL_DUMPABLE",
            support::http_server::dumpable_unless_root(),
        )
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe and only reads the struct.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: LIMIT,
                rlim_max: LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    let stderr = Stderr::of(&mut child);
    let (_, base) = sign_in_url(&stderr);
    let token = std::fs::read_to_string(&token_file).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    writeln!(stdin, "{}\n{initialized}", initialize(1)).unwrap();
    let mut ask = |request: Value| -> Value {
        writeln!(stdin, "{request}").unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let answer: Value = serde_json::from_str(&line).unwrap();
        if answer["id"] == json!(1) {
            line.clear();
            stdout.read_line(&mut line).unwrap();
            return serde_json::from_str(&line).unwrap();
        }
        answer
    };

    // Live-view event streams, signed in, until every descriptor the server may open is
    // taken (the ones it cannot accept wait in the listen queue).
    let request = format!(
        "GET /ui/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\r\n",
        token.trim()
    );
    let mut streams = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while fd_count(child.id()) < LIMIT as usize {
        let mut socket = std::net::TcpStream::connect(address(&base)).unwrap();
        socket.write_all(request.as_bytes()).unwrap();
        streams.push(socket);
        assert!(Instant::now() < deadline, "the server never ran out");
        std::thread::sleep(Duration::from_millis(5));
    }

    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "terminal_start", "arguments": {"command_id": "long"}}});
    let answer = ask(call);
    let error = &answer["result"]["structuredContent"]["error"];
    assert_eq!(error["code"], json!("INTERNAL"), "{answer}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("out of file descriptors"), "{message}");

    // Once connections close, starts work again.
    drop(streams);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "terminal_start", "arguments": {"command_id": "long"}}});
        let answer = ask(call);
        if answer["result"]["structuredContent"]["ok"] == json!(true) {
            break;
        }
        assert!(Instant::now() < deadline, "{answer}");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(stdin);
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

// Logs (SPEC §12: no log at any level holds what a client writes or a session prints).

/// `mcp-terminal stdio` driven by raw JSON lines.
struct StdioServer {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    stderr: Stderr,
    next_id: u64,
    early: std::collections::HashMap<u64, Value>,
}

impl StdioServer {
    fn start(dir: &Path, env: &[(&str, &str)]) -> StdioServer {
        use std::io::Write;
        let mut child = Command::new(BIN)
            .arg("stdio")
            .current_dir(dir)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Stderr::of(&mut child);
        let mut stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        writeln!(stdin, "{}\n{initialized}", initialize(0)).unwrap();
        let mut server = StdioServer {
            child,
            stdin,
            stdout,
            stderr,
            next_id: 0,
            early: std::collections::HashMap::new(),
        };
        server.answer(0);
        server
    }

    /// The answer with `id`; answers to other requests that come first are kept for later.
    fn answer(&mut self, id: u64) -> Value {
        use std::io::BufRead;
        if let Some(answer) = self.early.remove(&id) {
            return answer;
        }
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "stdout closed"
            );
            let message: Value = serde_json::from_str(&line).unwrap();
            match message["id"].as_u64() {
                Some(got) if got == id => return message,
                Some(other) => {
                    self.early.insert(other, message);
                }
                None => {}
            }
        }
    }

    /// Send `line` as it is and read the next line written: its answer, when nothing else
    /// is outstanding.
    fn answer_line(&mut self, line: &[u8]) -> Value {
        use std::io::{BufRead, Write};
        self.stdin.write_all(line).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        let mut answer = String::new();
        assert!(
            self.stdout.read_line(&mut answer).unwrap() > 0,
            "stdout closed"
        );
        serde_json::from_str(&answer).unwrap()
    }

    /// Send `line` as it is, which is answered by nothing (a notification).
    fn send_line(&mut self, line: &[u8]) {
        use std::io::Write;
        self.stdin.write_all(line).unwrap();
        self.stdin.write_all(b"\n").unwrap();
    }

    /// Send a tools/call without waiting for its answer: its id.
    fn send(&mut self, tool: &str, arguments: Value) -> u64 {
        use std::io::Write;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        writeln!(self.stdin, "{request}").unwrap();
        self.next_id
    }

    /// A tools/call: its structured content.
    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let id = self.send(tool, arguments);
        self.answer(id)["result"]["structuredContent"].clone()
    }

    /// Close stdin and wait for the exit: everything it wrote on stderr.
    fn finish(mut self) -> String {
        drop(self.stdin);
        assert_eq!(self.child.wait().unwrap().code(), Some(0));
        self.stderr.text()
    }
}

/// What a log must never hold: the text written, as the client sent it and as the session
/// printed it back (`interactive` echoes each line). The wait's pattern and the read name
/// it only by a class, so a request logged whole would show the marker only through the
/// write or an answer.
const LOG_MARKER: &str = "log-probe-1f2e";
const LOG_MARKER_PATTERN: &str = "echo: log-probe-[0-9a-f]{4}";

/// Whether the server logged the tool error below at debug level.
fn logged_at_debug(stderr: &str) -> bool {
    stderr
        .lines()
        .any(|l| l.contains(" DEBUG ") && l.contains("mcp_terminal::tools: tool error"))
}

#[tokio::test]
async fn no_log_level_holds_written_text_or_output_over_http() {
    // The server runs at MCP_TERMINAL_LOG=trace: every target at every level asked.
    let server = Server::start(&["--listen", "127.0.0.1:0"], "trace");
    let id = server.open_session().await.unwrap();
    let started = server
        .call(&id, "terminal_start", json!({"command_id": "interactive"}))
        .await;
    let sid = started["structuredContent"]["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let text = format!("{LOG_MARKER}\n");
    server.write(&id, &sid, &text).await;
    let waited = server
        .call(
            &id,
            "terminal_wait",
            json!({"session_id": sid, "pattern": LOG_MARKER_PATTERN}),
        )
        .await;
    assert_eq!(waited["structuredContent"]["outcome"], json!("matched"));
    let read = server
        .call(&id, "terminal_read", json!({"session_id": sid}))
        .await;
    assert!(read.to_string().contains(LOG_MARKER), "{read}");
    // A tool error, which this crate logs at debug: proof that debug lines are written.
    server
        .call(
            &id,
            "terminal_status",
            json!({"session_id": "0".repeat(32)}),
        )
        .await;
    let stderr = server.stderr_until("debug line of the tool error", logged_at_debug);
    assert!(!stderr.contains(LOG_MARKER), "{stderr}");
}

#[test]
fn no_log_level_holds_written_text_or_output_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    // Asking each library for its every line by name changes nothing either.
    let levels = "trace,rmcp=trace,hyper=trace,axum=trace,tower=trace,mcp_terminal=trace";
    let mut server = StdioServer::start(dir.path(), &[("MCP_TERMINAL_LOG", levels)]);
    let started = server.call("terminal_start", json!({"command_id": "interactive"}));
    let sid = started["session_id"].as_str().unwrap().to_string();
    let written = server.call(
        "terminal_write",
        json!({"session_id": sid, "text": format!("{LOG_MARKER}\n")}),
    );
    assert_eq!(written["ok"], json!(true), "{written}");
    let waited = server.call(
        "terminal_wait",
        json!({"session_id": sid, "pattern": LOG_MARKER_PATTERN}),
    );
    assert_eq!(waited["outcome"], json!("matched"), "{waited}");
    let read = server.call("terminal_read", json!({"session_id": sid}));
    assert!(read.to_string().contains(LOG_MARKER), "{read}");
    server.call("terminal_status", json!({"session_id": "0".repeat(32)}));
    // Errors answered by rmcp itself carry what the client sent (a method or tool name, up
    // to a whole request line of it, and an id), and rmcp logs each such answer at warn; a
    // tool's error message may quote an argument.
    for request in [
        json!({"jsonrpc": "2.0", "id": 90, "method": format!("no/such/{LOG_MARKER}")}),
        json!({"jsonrpc": "2.0", "id": format!("id-{LOG_MARKER}"), "method": "no/such"}),
        json!({"jsonrpc": "2.0", "id": 91, "method": "tools/call",
            "params": {"name": format!("tool_{LOG_MARKER}"), "arguments": {}}}),
        json!({"jsonrpc": "2.0", "id": 92, "method": "tools/call",
            "params": {"name": "terminal_wait", "arguments":
                {"session_id": sid, "pattern": format!("({LOG_MARKER}")}}}),
        // Refused before rmcp, its serde error quoting the value.
        json!({"jsonrpc": "2.0", "id": 94, "method": "tools/call",
            "params": {"name": "terminal_list", "arguments": LOG_MARKER}}),
    ] {
        let answer = server.answer_line(request.to_string().as_bytes());
        assert!(answer.to_string().contains(LOG_MARKER), "{answer}");
    }
    // rmcp logs a notification whole at info, and a cancellation's reason.
    for notification in [
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 93, "reason": LOG_MARKER}}),
        json!({"jsonrpc": "2.0", "method": format!("notifications/{LOG_MARKER}")}),
    ] {
        server.send_line(notification.to_string().as_bytes());
    }
    // Answered after the notifications: they were read.
    server.call("terminal_list", json!({}));
    let stderr = server.finish();
    assert!(logged_at_debug(&stderr), "{stderr}");
    assert!(!stderr.contains(LOG_MARKER), "{stderr}");
}

#[test]
fn a_handshake_that_fails_is_logged_without_what_the_client_sent() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .arg("stdio")
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A first message that is not initialize: rmcp's error holds it whole.
    let first = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 1, "reason": LOG_MARKER}});
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{first}").unwrap();
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("did not complete the handshake: its first message was not initialize"),
        "{stderr}"
    );
    assert!(!stderr.contains(LOG_MARKER), "{stderr}");
}

// Requests in flight and the memory of patterns (SPEC §11 limits; README "Limits").

impl Server {
    /// Send a tools/call in session `id` and return once the answer's headers came (the
    /// answer itself streams later): the request is then in flight.
    async fn send_call(&self, id: &str, tool: &str, arguments: Value) -> reqwest::Response {
        // Each request in flight has an id of its own.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1000);
        let request_id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.send_call_as(id, request_id, tool, arguments).await
    }

    /// The arguments of a terminal_wait that outlasts a test, on a `long` session started
    /// in MCP session `id`.
    async fn endless_wait(&self, id: &str) -> Value {
        let started = self
            .call(id, "terminal_start", json!({"command_id": "long"}))
            .await;
        let sid = started["structuredContent"]["session_id"].as_str().unwrap();
        json!({"session_id": sid, "pattern": "never printed by the long demo", "timeout_ms": 60_000})
    }

    /// `send_call` with the JSON-RPC id `request_id`.
    async fn send_call_as(
        &self,
        id: &str,
        request_id: u64,
        tool: &str,
        arguments: Value,
    ) -> reqwest::Response {
        let request = json!({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        self.authed(&request)
            .header("Mcp-Session-Id", id)
            .send()
            .await
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_in_flight_are_capped_per_mcp_session_and_for_the_server() {
    let server = Server::start(&["--listen", "127.0.0.1:0"], LOG);
    let (a, b, c) = (
        server.open_session().await.unwrap(),
        server.open_session().await.unwrap(),
        server.open_session().await.unwrap(),
    );
    // Waits that outlast the test: each holds its place until the server is dropped.
    let wait = server.endless_wait(&a).await;
    let mut in_flight = Vec::new();
    for _ in 0..32 {
        let response = server.send_call(&a, "terminal_wait", wait.clone()).await;
        assert_eq!(response.status(), StatusCode::OK);
        in_flight.push(response);
    }
    let refused = server.send_call(&a, "terminal_wait", wait.clone()).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body = refused.text().await.unwrap();
    assert!(body.contains("32 requests of this MCP session"), "{body}");

    // Another session has places of its own, up to the server's 64.
    for _ in 0..32 {
        let response = server.send_call(&b, "terminal_wait", wait.clone()).await;
        assert_eq!(response.status(), StatusCode::OK);
        in_flight.push(response);
    }
    let refused = server.send_call(&c, "terminal_list", json!({})).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let body = refused.text().await.unwrap();
    assert!(
        body.contains("64 requests are in flight on this server"),
        "{body}"
    );
    // A notification takes no place: a client at the cap can still cancel.
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 9}});
    let sent = server
        .authed(&cancel)
        .header("Mcp-Session-Id", &c)
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), StatusCode::ACCEPTED);

    // An answer that has gone out gives its place back.
    drop(in_flight.pop());
    let deadline = Instant::now() + PATIENCE;
    loop {
        let response = server.send_call(&c, "terminal_list", json!({})).await;
        if response.status() == StatusCode::OK {
            break;
        }
        assert!(Instant::now() < deadline, "the place was never given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_whose_id_is_in_flight_in_its_session_is_answered_with_an_error() {
    let server = Server::start(&["--listen", "127.0.0.1:0"], LOG);
    let (a, b) = (
        server.open_session().await.unwrap(),
        server.open_session().await.unwrap(),
    );
    let wait = server.endless_wait(&a).await;
    let first = server
        .send_call_as(&a, 7, "terminal_wait", wait.clone())
        .await;
    assert_eq!(first.status(), StatusCode::OK);
    // As on stdio: a JSON-RPC error naming the id, at once, not an answer that never comes
    // (or comes on the other request's stream).
    let again = server.send_call_as(&a, 7, "terminal_list", json!({})).await;
    assert_eq!(again.status(), StatusCode::OK);
    let body: Value = again.json().await.unwrap();
    assert_eq!(body["id"], json!(7), "{body}");
    assert_eq!(body["error"]["code"], json!(-32600), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("id 7 belongs to a request not yet answered"),
        "{message}"
    );
    // Another session's requests have ids of their own.
    let other = server.send_call_as(&b, 7, "terminal_list", json!({})).await;
    assert_eq!(other.status(), StatusCode::OK);
    let text = other.text().await.unwrap();
    assert!(text.contains("\"sessions\""), "{text}");
    drop(first);
}

/// A client whose connection dropped before its answer came gets that answer when it
/// reconnects with `Last-Event-ID`, also once the request was answered (into the dropped
/// connection), where rmcp alone replays only a stream whose request still runs.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_lost_with_its_connection_is_given_to_the_reconnect() {
    let (server, log) = audited_server();
    let id = server.open_session().await.unwrap();
    let (sid, _) = server
        .start_terminal(&id, json!({"command_id": "interactive"}))
        .await;
    let wait = json!({"session_id": sid, "pattern": "echo: go", "timeout_ms": 30_000});
    let mut response = server.send_call_as(&id, 21, "terminal_wait", wait).await;
    assert_eq!(response.status(), StatusCode::OK);
    // The stream's first event (its priming event) has an id; then the connection drops.
    let mut seen = String::new();
    let last_event_id = loop {
        let chunk = response.chunk().await.unwrap();
        let chunk = chunk.unwrap_or_else(|| panic!("the stream ended after {seen:?}"));
        seen.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(id) = seen.lines().find_map(|l| l.strip_prefix("id: ")) {
            break id.trim().to_string();
        }
    };
    drop(response);
    server.write(&id, &sid, "go\n").await;
    // The wait is answered once its audit line is written.
    let deadline = Instant::now() + PATIENCE;
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("\"terminal_wait\"")
    {
        assert!(Instant::now() < deadline, "the wait never ended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let resumed = reqwest::Client::new()
        .get(server.url())
        .bearer_auth(&server.token)
        .header("Accept", "text/event-stream")
        .header("Mcp-Session-Id", &id)
        .header("Last-Event-ID", &last_event_id)
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), StatusCode::OK);
    let text = resumed.text().await.unwrap();
    let answer = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|m| m.get("id") == Some(&json!(21)))
        .unwrap_or_else(|| panic!("no answer after {last_event_id} in {text:?}"));
    let result = &answer["result"]["structuredContent"];
    assert_eq!(result["outcome"], json!("matched"), "{answer}");
}

/// The most resident memory process `pid` has had, in KiB (VmHWM).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn pathological_patterns_are_refused_and_concurrent_waits_keep_memory_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(dir.path(), &[]);
    let started = server.call("terminal_start", json!({"command_id": "long"}));
    let sid = started["session_id"].as_str().unwrap().to_string();
    let pid = server.child.id();
    let before = peak_rss_kib(pid);

    // 64 waits at once (every place stdio has) with a pattern whose search would hold
    // about 17 MB: each is refused at once, saying why.
    let ids: Vec<u64> = (0..64)
        .map(|_| {
            server.send(
                "terminal_wait",
                json!({"session_id": sid, "pattern": r"\w{100}\W{100}", "timeout_ms": 2000}),
            )
        })
        .collect();
    for id in ids {
        let answer = server.answer(id)["result"]["structuredContent"].clone();
        assert_eq!(
            answer["error"]["code"],
            json!("INVALID_ARGUMENT"),
            "{answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("larger than the 4096 KiB"), "{message}");
        assert_eq!(answer["error"]["parameter"], json!("pattern"));
    }
    let refused = peak_rss_kib(pid);
    // Generous against allocator noise; without the bounds it was over 1 GB.
    assert!(
        refused - before < 64 * 1024,
        "peak {before} → {refused} KiB"
    );

    // 64 waits at once with a pattern that is allowed but large (about 3 MiB each): as
    // many wait as the patterns' budget holds, the others are told to wait. The session
    // is ended once the first refusal has freed a place for the request that ends it.
    let ids: Vec<u64> = (0..64)
        .map(|_| {
            server.send(
                "terminal_wait",
                json!({"session_id": sid, "pattern": r"\w{20}zzz", "timeout_ms": 60_000}),
            )
        })
        .collect();
    let ended = server.send(
        "terminal_terminate",
        json!({"session_id": sid, "grace_ms": 0}),
    );
    let (mut waited, mut busy) = (0, 0);
    for id in ids {
        let answer = server.answer(id)["result"]["structuredContent"].clone();
        if answer["ok"] == json!(true) {
            assert_eq!(answer["outcome"], json!("exited"), "{answer}");
            waited += 1;
        } else {
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.contains("cannot be searched now"), "{message}");
            busy += 1;
        }
    }
    assert!(waited >= 16 && busy >= 1, "{waited} waited, {busy} refused");
    assert_eq!(
        server.answer(ended)["result"]["structuredContent"]["ok"],
        json!(true)
    );
    let after = peak_rss_kib(pid);
    // The budget is 64 MiB; its searches never grew their caches here.
    assert!(after - before < 128 * 1024, "peak {before} → {after} KiB");
    server.finish();
}
