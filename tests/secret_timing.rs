//! The redaction hold-back tells nothing about a secret: the attack that recovered a value
//! through it, tried over a whole alphabet. An agent allowed a secret but not its value
//! types candidate prefixes into a terminal `cat` (the terminal's echo is enough) and looks
//! at once whether the text is readable: if a possible start of the value were held back
//! while other text was released, the one candidate held would be the next character of the
//! value. Every candidate must look alike.
//!
//! A candidate can turn readable by time alone (its partial line released after the quiet
//! period) when this machine stalls between the write and the look; so a candidate seen
//! readable is probed again, and the test asks that each one is unreadable at least once.
//! A hold-back that depended on the text would show every wrong candidate readable each time.

mod support;

use std::collections::BTreeMap;

use harness::client::{McpServer, Transport};
use harness::scenario::Launch;
use serde_json::{Value, json};

const VALUE: &str = "hunter2secret";
/// Attempts per candidate.
const ATTEMPTS: usize = 3;

async fn call(server: &McpServer, tool: &str, args: Value) -> Value {
    let answer = server.call_structured(tool, &args).await.unwrap();
    assert_eq!(answer["ok"], json!(true), "{tool} {args}: {answer}");
    answer
}

#[tokio::test(flavor = "multi_thread")]
async fn the_hold_back_gives_no_candidate_away() {
    let dir = tempfile::tempdir().unwrap();
    let config = support::config::config_with(dir.path(), false, |c| {
        c["secrets"] = json!({"probe": {"env": "MCPT_TIMING_PROBE"}});
        c["commands"]["tty-cat"] = json!({
            "argv": ["/bin/cat"],
            "mode": "pty",
            "allowed_secrets": ["probe"],
        });
    });
    let launch = Launch {
        env: BTreeMap::from([("MCPT_TIMING_PROBE".to_owned(), VALUE.to_owned())]),
        ..Launch::default()
    };
    let args = ["--config".to_owned(), config.display().to_string()];
    let server = McpServer::start_with(
        Transport::Stdio,
        std::path::Path::new(support::http_server::BIN),
        &args,
        dir.path(),
        &launch,
    )
    .await
    .unwrap();
    let started = call(&server, "terminal_start", json!({"command_id": "tty-cat"})).await;
    let sid = started["session_id"].as_str().unwrap().to_owned();

    let mut readable = BTreeMap::new();
    let mut cursor = 0;
    for c in ('a'..='z').chain('0'..='9') {
        let candidate = format!("h{c}");
        let mut seen = 0;
        for _ in 0..ATTEMPTS {
            call(
                &server,
                "terminal_write",
                json!({"session_id": sid, "text": candidate}),
            )
            .await;
            // A short look: readable now, or not.
            let look = call(
                &server,
                "terminal_wait",
                json!({"session_id": sid, "cursor": cursor, "pattern": candidate, "timeout_ms": 20}),
            )
            .await;
            if look["outcome"] == "matched" {
                seen += 1;
            }
            // End the line: the echo and cat's copy of it come out, whatever it held.
            call(
                &server,
                "terminal_write",
                json!({"session_id": sid, "text": "\r"}),
            )
            .await;
            let line = call(
                &server,
                "terminal_wait",
                json!({
                    "session_id": sid,
                    "cursor": cursor,
                    "pattern": format!("{candidate}\\r\\n{candidate}\\r\\n"),
                    "timeout_ms": 30000,
                }),
            )
            .await;
            assert_eq!(line["outcome"], "matched", "{line}");
            cursor = line["next_cursor"].as_u64().unwrap();
            if seen == 0 {
                break;
            }
        }
        readable.insert(candidate, seen);
    }
    let always: Vec<&String> = readable
        .iter()
        .filter(|(_, seen)| **seen == ATTEMPTS)
        .map(|(candidate, _)| candidate)
        .collect();
    assert!(
        always.is_empty(),
        "readable at once on every attempt: {always:?} (a hold-back that depends on the text \
         tells which candidate is the value's start); all: {readable:?}"
    );
}
