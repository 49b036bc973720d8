//! The live view as a browser sees it: signing in with the printed URL, plain requests
//! with the view's cookie, and headless Chromium driven over the DevTools protocol.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::config::config_with;
use super::stderr::{PATIENCE, Stderr};

pub const SIGN_IN: &str = "mcp-terminal: live view: ";

/// A client like a browser that has not signed in: it follows no redirect and keeps no
/// cookie, so each step shows what the server answered.
pub fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The sign-in URL a server printed, and where its live view lives.
pub fn sign_in_url(stderr: &Stderr) -> (String, String) {
    let url = stderr.line(SIGN_IN).trim_start_matches(SIGN_IN).to_string();
    let base = url.split("/ui/").next().unwrap().to_string();
    (url, base)
}

/// Visit the sign-in URL; the `name=value` of the cookie it sets.
pub async fn sign_in(url: &str) -> String {
    let response = browser().get(url).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let cookie = response.headers()["set-cookie"].to_str().unwrap();
    cookie.split(';').next().unwrap().to_string()
}

/// The owner signs in again as `mcp-terminal web-url` does (a fresh code asked for with
/// the owner key of the address file in `dir`), in a browser: the cookie it gets.
pub async fn owner_cookie(base: &str, dir: &std::path::Path) -> String {
    let file = std::fs::read_to_string(dir.join("web-url")).unwrap();
    let key = file.lines().nth(1).unwrap().trim().to_string();
    let fresh = browser()
        .get(format!("{base}/ui/sign-in-url"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(fresh.status(), StatusCode::OK);
    sign_in(fresh.text().await.unwrap().trim()).await
}

/// GET `path` of the view with `cookie`: status, headers and body.
pub async fn view(
    base: &str,
    path: &str,
    cookie: &str,
) -> (StatusCode, reqwest::header::HeaderMap, String) {
    let response = browser()
        .get(format!("{base}{path}"))
        .header("Cookie", cookie)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

/// A config with the shells approved and recordings on, in `dir`.
pub fn recording_config(dir: &Path) -> String {
    let recordings = dir.canonicalize().unwrap().join("casts");
    std::fs::create_dir(&recordings).unwrap();
    let config = config_with(dir, true, |c| c["recordings_dir"] = json!(recordings));
    config.display().to_string()
}

/// The code of a sign-in URL: 32 hex digits.
pub fn code_of(url: &str) -> String {
    let code = url.rsplit_once("?code=").expect("a sign-in code").1;
    assert_eq!(code.len(), 32, "{url}");
    assert!(code.bytes().all(|b| b.is_ascii_hexdigit()), "{url}");
    code.to_string()
}

/// Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
/// commands on its fd 3, answers and events on its fd 4, each message a JSON text ended by
/// NUL), so the test waits for conditions in the real DOM rather than for a time budget.
pub struct Chromium {
    child: Child,
    commands: std::fs::File,
    answers: std::io::BufReader<std::fs::File>,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Chromium {
    /// Chromium, or `None` (skipped, with the reason printed) when it is not installed,
    /// unless `MCP_TERMINAL_REQUIRE_CHROMIUM=1` (as in CI, which installs it).
    pub fn launch() -> Option<Chromium> {
        use std::os::fd::{AsRawFd, OwnedFd};
        use std::os::unix::process::CommandExt;
        let binary = super::extras::chromium();
        if !binary.exists() {
            super::extras::missing(
                "MCP_TERMINAL_REQUIRE_CHROMIUM",
                &format!("Chromium ({})", binary.display()),
                "apt-get install chromium",
            );
            return None;
        }
        let (to_browser, commands): (OwnedFd, OwnedFd) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let (answers, from_browser): (OwnedFd, OwnedFd) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let (read_end, write_end) = (to_browser.as_raw_fd(), from_browser.as_raw_fd());
        let profile = tempfile::tempdir().unwrap();
        let mut command = Command::new(binary);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--window-size=1200,800",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls between fork and exec. Both ends are first
        // moved above 10 so that placing one at 3 cannot close the other.
        unsafe {
            command.pre_exec(move || {
                let high_read = libc::fcntl(read_end, libc::F_DUPFD, 10);
                let high_write = libc::fcntl(write_end, libc::F_DUPFD, 10);
                if high_read < 0
                    || high_write < 0
                    || libc::dup2(high_read, 3) < 0
                    || libc::dup2(high_write, 4) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        drop((to_browser, from_browser));
        Some(Chromium {
            child,
            commands: std::fs::File::from(commands),
            answers: std::io::BufReader::new(std::fs::File::from(answers)),
            next_id: 0,
            _profile: profile,
        })
    }

    /// Send a command (to a page when `session` is given) and return its result.
    pub fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        use std::io::{BufRead, Write};
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        self.commands.write_all(&bytes).unwrap();
        loop {
            let mut raw = Vec::new();
            let n = self.answers.read_until(0, &mut raw).unwrap();
            assert!(n > 0, "Chromium closed the DevTools pipe");
            raw.pop();
            let answer: Value = serde_json::from_slice(&raw).unwrap();
            if answer["id"] == json!(id) {
                assert!(answer.get("error").is_none(), "{method}: {answer}");
                return answer["result"].clone();
            }
        }
    }

    /// Open `url` in a new tab; the DevTools session of that page.
    pub fn open(&mut self, url: &str) -> String {
        let target = self.send(None, "Target.createTarget", json!({"url": url}));
        let attached = self.send(
            None,
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        attached["sessionId"].as_str().unwrap().to_string()
    }

    /// The value of a JavaScript expression in the page.
    pub fn eval(&mut self, page: &str, expression: &str) -> Value {
        let result = self.send(
            Some(page),
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
        );
        result["result"]["value"].clone()
    }

    /// Look at `expression` in the page until it is true; the last text of `show` for the
    /// failure message.
    pub fn until(&mut self, page: &str, expression: &str, show: &str) {
        let deadline = Instant::now() + PATIENCE;
        while self.eval(page, expression) != json!(true) {
            let shown = self.eval(page, show);
            assert!(
                Instant::now() < deadline,
                "`{expression}` never held; the page shows:\n{shown}"
            );
            // A look at the DOM every 50 ms: the page updates itself from its own events.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn screenshot(&mut self, page: &str) -> Vec<u8> {
        use base64::Engine;
        let shot = self.send(
            Some(page),
            "Page.captureScreenshot",
            json!({"format": "png"}),
        );
        base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap()
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The view's own place, `/ui/PLACE/`, from a signed-in page's address.
pub fn view_place(chromium: &mut Chromium, page: &str) -> String {
    let place = chromium.eval(
        page,
        "location.pathname.split('/').slice(0, 3).join('/') + '/'",
    );
    let place = place.as_str().unwrap().to_string();
    assert!(place.starts_with("/ui/") && place.len() == 37, "{place}");
    place
}

/// The text of the live part of the page.
pub const LIVE_TEXT: &str = "document.getElementById('live').textContent";
