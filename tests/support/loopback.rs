//! The server in-process, behind the same framing guard and MCP service `mcp-terminal stdio`
//! serves with, joined to a client by in-memory pipes, with real sessions and processes.
//! The dispatch property test (`tests/dispatch.rs`) and the fuzz targets (`fuzz/`) write
//! arbitrary input through it and check the contract every client relies on: whatever the
//! input, the server never panics and every request gets exactly one well-formed answer
//! with its id, and the next well-formed request is served.
//!
//! Which lines are answered, and how (the framing guard's and the service's rules, stated
//! independently of their code):
//! - an object with a string `method` and an `id` that is a string or an integer, no key
//!   named twice: exactly one answer with that id (without `"jsonrpc": "2.0"` too: its
//!   sender still waits for that id);
//! - a line that is not UTF-8 or not JSON, over the frame limit, or JSON that is not an
//!   object: exactly one answer with `id: null`;
//! - any other object (a notification, an answer, a request with an id of another type):
//!   no answer, or one with `id: null`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mcp_terminal::config::{self, Config, Profile, Shell};
use mcp_terminal::limits::MAX_FRAME_BYTES;
use mcp_terminal::process::{Reaper, new_instance};
use mcp_terminal::session::Sessions;
use mcp_terminal::stdio::Stdio;
use mcp_terminal::tools::TerminalServer;
use rmcp::ServiceExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Generous: the fuzzer and six builds may share two cores.
const PATIENCE: Duration = Duration::from_secs(60);
/// The id of the ping written after the input: served means the server still serves.
const LAST_ID: &str = "loopback-last";

/// What a client may expect of one input line.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Due {
    Nothing,
    /// An answer with this line's id.
    Id,
    Null,
    /// No answer, or one with `id: null`.
    MaybeNull,
    /// One answer, with this line's id or with `id: null`.
    IdOrNull,
}

fn due(line: &[u8]) -> (Due, Option<Value>) {
    let body = line.trim_ascii();
    if body.is_empty() {
        return (Due::Nothing, None);
    }
    if line.len() + 1 > MAX_FRAME_BYTES {
        return (Due::Null, None);
    }
    let Some(message) = std::str::from_utf8(body)
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
    else {
        return (Due::Null, None);
    };
    let Some(object) = message.as_object() else {
        return (Due::Null, None);
    };
    let id = object
        .get("id")
        .filter(|id| id.is_string() || id.is_i64() || id.is_u64());
    let request = object.get("method").is_some_and(Value::is_string);
    match id {
        Some(id) if request && repeats_a_key(body) => (Due::IdOrNull, Some(id.clone())),
        Some(id) if request => (Due::Id, Some(id.clone())),
        _ => (Due::MaybeNull, None),
    }
}

/// Whether the top-level object names a key twice (checked by counting keys as written
/// against the keys kept).
fn repeats_a_key(body: &[u8]) -> bool {
    struct Count(usize);
    impl<'de> serde::de::Visitor<'de> for Count {
        type Value = usize;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            mut self,
            mut map: A,
        ) -> Result<usize, A::Error> {
            while map
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {
                self.0 += 1;
            }
            Ok(self.0)
        }
    }
    use serde::Deserializer as _;
    let written = serde_json::Deserializer::from_slice(body).deserialize_map(Count(0));
    let kept = serde_json::from_slice::<serde_json::Map<String, Value>>(body).map(|m| m.len());
    !matches!((written, kept), (Ok(w), Ok(k)) if w == k)
}

/// Whether `answer` is a well-formed JSON-RPC 2.0 answer: an id, and a result or an error
/// with an integer code and a message.
fn well_formed(answer: &Value) -> Result<(), String> {
    let object = answer.as_object().ok_or("not an object")?;
    if object.get("jsonrpc") != Some(&json!("2.0")) {
        return Err("no `jsonrpc: \"2.0\"`".into());
    }
    let id = object.get("id").ok_or("no id")?;
    if !(id.is_null() || id.is_string() || id.is_i64() || id.is_u64()) {
        return Err("an id of the wrong type".into());
    }
    match (object.get("result"), object.get("error")) {
        (Some(_), None) => Ok(()),
        (None, Some(error)) => {
            let code = error.get("code").is_some_and(|c| c.is_i64());
            let message = error.get("message").is_some_and(Value::is_string);
            (code && message)
                .then_some(())
                .ok_or_else(|| "an error without an integer code and a message".into())
        }
        _ => Err("not exactly one of result and error".into()),
    }
}

/// One server process's shared parts: the runtime and the reaper (one per process).
pub struct Loopback {
    runtime: tokio::runtime::Runtime,
    reaper: Arc<Reaper>,
    config: Arc<Config>,
}

impl Default for Loopback {
    fn default() -> Self {
        Self::new()
    }
}

impl Loopback {
    /// A config with a pipe command that ends at stdin EOF (`cat`), and `cat` again as a
    /// "shell" (so the catalog holds every tool, and no input is ever run as a command
    /// line), with short timeouts so no input can hold an exchange long.
    pub fn new() -> Loopback {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let reaper = runtime
            .block_on(async { Reaper::start() })
            .expect("the reaper");
        let root = std::env::temp_dir().canonicalize().expect("a temp dir");
        let mut config = config::default_config(&root);
        let cat = Profile::new(vec!["/bin/cat".to_owned()], "copies stdin to stdout");
        let mut shell = cat.clone();
        shell.shell = Some(Shell::Posix);
        config.commands = BTreeMap::from([("cat".to_owned(), cat), ("sh".to_owned(), shell)]);
        config.limits.default_timeout_ms = 1_000;
        config.limits.max_timeout_ms = 2_000;
        config.limits.max_wait_ms = 1_000;
        Loopback {
            runtime,
            reaper,
            config: Arc::new(config),
        }
    }

    /// Serve `input` (JSON-RPC lines, any bytes) after the MCP handshake, then a ping; check
    /// every answer against the rules above. Returns the answers (the handshake's and the
    /// ping's included), or what broke the contract.
    pub fn exchange(&self, input: &[u8]) -> Result<Vec<Value>, String> {
        self.runtime.block_on(self.serve(input))
    }

    /// Every tool's name and argument names, from the server's own tools/list.
    pub fn tools(&self) -> Vec<(String, Vec<String>)> {
        let list = r#"{"jsonrpc":"2.0","id":"tools","method":"tools/list"}"#;
        let answers = self.exchange(list.as_bytes()).expect("tools/list");
        let listed = answers
            .iter()
            .find(|a| a["id"] == json!("tools"))
            .expect("the tools/list answer");
        listed["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|tool| {
                let properties = tool["inputSchema"]["properties"].as_object();
                let names = properties.map_or(Vec::new(), |p| p.keys().cloned().collect());
                (tool["name"].as_str().expect("a name").to_owned(), names)
            })
            .collect()
    }

    async fn serve(&self, input: &[u8]) -> Result<Vec<Value>, String> {
        let sessions = Arc::new(Sessions::new(
            self.config.clone(),
            self.reaper.clone(),
            new_instance(),
        ));
        let (mut client_in, stdin) = tokio::io::duplex(64 * 1024);
        let (stdout, client_out) = tokio::io::duplex(64 * 1024);
        let (transport, _stdin_closed) = Stdio::new(stdin, stdout);
        let server = TerminalServer::new(sessions.clone());
        let serving = tokio::spawn(async move {
            if let Ok(service) = server.serve(transport).await {
                let _ = service.waiting().await;
            }
        });

        let mut frames = handshake();
        frames.extend_from_slice(input);
        frames.push(b'\n');
        frames.extend_from_slice(format!("{}\n", ping(LAST_ID)).as_bytes());
        let mut tally = Tally::default();
        for line in frames.split(|b| *b == b'\n') {
            tally.expect(line);
        }
        let writer = tokio::spawn(async move {
            let written = client_in.write_all(&frames).await;
            (client_in, written)
        });

        let mut lines = BufReader::new(client_out).lines();
        while !tally.all_answered() {
            match tokio::time::timeout(PATIENCE, lines.next_line()).await {
                Ok(Ok(Some(text))) => tally.take(&text)?,
                Ok(Ok(None)) => return Err(tally.unanswered("the server closed stdout")),
                Ok(Err(e)) => return Err(format!("reading stdout failed: {e}")),
                Err(_) => return Err(tally.unanswered("no answer in time")),
            }
        }
        // Everything is answered: end the input, and read what is left up to the end.
        let (client_in, written) = writer.await.map_err(|e| e.to_string())?;
        written.map_err(|e| format!("the server stopped reading its input: {e}"))?;
        drop(client_in);
        loop {
            match tokio::time::timeout(PATIENCE, lines.next_line()).await {
                Ok(Ok(Some(text))) => tally.take(&text)?,
                Ok(Ok(None)) => break,
                Ok(Err(e)) => return Err(format!("reading stdout failed: {e}")),
                Err(_) => return Err("stdout did not end after stdin did".into()),
            }
        }
        tally.check_nulls()?;
        sessions.shutdown(0).await;
        let _ = tokio::time::timeout(PATIENCE, serving).await;
        Ok(tally.answers)
    }
}

/// The answers due and the answers received.
#[derive(Default)]
struct Tally {
    /// Id (as JSON text) → answers still due.
    due: BTreeMap<String, usize>,
    /// Id → answers that may come instead of one with `id: null` (a request that names a
    /// key twice: the service may read it or refuse it).
    optional: BTreeMap<String, usize>,
    optional_total: usize,
    nulls_min: usize,
    nulls_max: usize,
    nulls: usize,
    answers: Vec<Value>,
}

impl Tally {
    fn expect(&mut self, line: &[u8]) {
        match due(line) {
            (Due::Id, Some(id)) => *self.due.entry(id.to_string()).or_default() += 1,
            (Due::IdOrNull, Some(id)) => {
                *self.optional.entry(id.to_string()).or_default() += 1;
                self.optional_total += 1;
                self.nulls_max += 1;
            }
            (Due::Null, _) => {
                self.nulls_min += 1;
                self.nulls_max += 1;
            }
            (Due::MaybeNull, _) => self.nulls_max += 1,
            _ => {}
        }
    }

    fn take(&mut self, text: &str) -> Result<(), String> {
        let answer: Value = serde_json::from_str(text)
            .map_err(|e| format!("an answer that is not JSON ({e}): {text}"))?;
        if answer.get("method").is_some() && answer.get("id").is_none() {
            // A notification of the server's own (progress): not an answer.
            return Ok(());
        }
        well_formed(&answer).map_err(|why| format!("a malformed answer ({why}): {text}"))?;
        let id = &answer["id"];
        if id.is_null() {
            self.nulls += 1;
        } else {
            let key = id.to_string();
            let left = match self.due.get_mut(&key).filter(|n| **n > 0) {
                Some(left) => left,
                None => self
                    .optional
                    .get_mut(&key)
                    .filter(|n| **n > 0)
                    .ok_or_else(|| format!("an answer to no request, or a second one: {text}"))?,
            };
            *left -= 1;
        }
        self.answers.push(answer);
        Ok(())
    }

    fn all_answered(&self) -> bool {
        self.due.values().all(|n| *n == 0)
    }

    /// Every line that could only be answered with `id: null` was, once at most; each
    /// request answered with its id or `id: null` was answered one way.
    fn check_nulls(&self) -> Result<(), String> {
        let not_by_id: usize = self.optional.values().sum();
        let by_id = self.optional_total - not_by_id;
        let (min, max) = (self.nulls_min + not_by_id, self.nulls_max - by_id);
        if (min..=max).contains(&self.nulls) {
            Ok(())
        } else {
            Err(format!(
                "{} answers with id null, expected {min} to {max}",
                self.nulls
            ))
        }
    }

    fn unanswered(&self, why: &str) -> String {
        let ids: Vec<&str> = self
            .due
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(id, _)| id.as_str())
            .collect();
        format!("{why}; unanswered: {}", ids.join(", "))
    }
}

fn ping(id: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
}

/// `initialize` (id `loopback-init`) and `notifications/initialized`, one line each.
fn handshake() -> Vec<u8> {
    let initialize = json!({
        "jsonrpc": "2.0",
        "id": "loopback-init",
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "loopback", "version": "1"},
        },
    });
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    format!("{initialize}\n{initialized}\n").into_bytes()
}

/// A `tools/call` request line.
pub fn call(id: u64, tool: &str, arguments: Value) -> String {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    })
    .to_string()
}
