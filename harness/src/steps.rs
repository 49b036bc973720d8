//! What each kind of step does. Every step records its exchanges and assertions on the
//! running step's evidence and returns an error that says what failed.

use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use regex::Regex;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::client::Transport;
use crate::collect::Collector;
use crate::matcher;
use crate::procfs::{self, Seen};
use crate::raw::{LINE_TIMEOUT, RawServer};
use crate::runner::{Run, wait_gone};
use crate::scenario::{
    Action, AwaitStep, CallStep, CastStep, CollectStep, FsStep, Matcher, ProcState, ProcessStep,
    RawAction, RepeatSpec, SaveRegexes, Saves, ServerFdsSpec, ServerRssSpec, ServerStep,
    SignalName, Step, StringArgumentsSpec, TextAssert, UntilStep,
};
use crate::vars::lookup_path;

/// A call sent with `background`: its tool, arguments, when it was sent, and its answer.
pub type Background = (
    String,
    Value,
    Instant,
    tokio::task::JoinHandle<Result<crate::client::ToolResult, String>>,
);

/// Pause between repeated calls of an `until` step; the server-side `wait_ms` does the rest.
const POLL_PAUSE: Duration = Duration::from_millis(10);

/// What a server count step counts.
#[derive(Clone, Copy)]
enum Count {
    Fds,
    Threads,
    Zombies,
}

/// A tool result split into the parts assertions look at.
struct Reply {
    structured: Value,
    is_error: bool,
}

impl Run<'_> {
    pub(crate) async fn step(&mut self, step: &Step) -> Result<(), String> {
        match &step.action {
            Action::Call(c) => self.call_step(c).await,
            Action::Until(u) => self.until_step(u).await,
            Action::Collect(c) => self.collect_step(c).await,
            Action::Process(p) => self.process_step(p).await,
            Action::Server(s) => self.server_step(s).await,
            Action::Raw(actions) => self.raw_step(actions).await,
            Action::ListTools(m) => {
                let began = Instant::now();
                let tools = self.connected()?.list_tools().await;
                let response = tools.clone().unwrap_or_else(|e| json!({"error": e}));
                self.record(json!({"method": "tools/list"}), &response, began);
                let expected = self.vars.subst(&m.0)?;
                self.matches("tools/list matches", &expected, &tools?)
            }
            Action::ServerInfo(m) => {
                let info = self.connected()?.server_info()?;
                self.record(json!({"method": "initialize"}), &info, Instant::now());
                let expected = self.vars.subst(&m.0)?;
                self.matches("initialize result matches", &expected, &info)
            }
            Action::Fs(fs) => self.fs_step(fs),
            Action::Cast(c) => self.cast_step(c).await,
            Action::ServerFds(spec) => self.server_count_step(Count::Fds, spec).await,
            Action::ServerThreads(spec) => self.server_count_step(Count::Threads, spec).await,
            Action::ServerZombies(spec) => self.server_count_step(Count::Zombies, spec).await,
            Action::ServerRss(spec) => self.server_rss_step(spec).await,
            Action::Repeat(r) => self.repeat_step(r).await,
            Action::StringArguments(spec) => self.string_arguments_step(spec).await,
            Action::Await(a) => self.await_step(a).await,
            Action::Impostor(i) => {
                let pid = pid_of(&self.vars.subst(&i.pid)?)?;
                let began = Instant::now();
                let result = procfs::spawn_at_pid(pid);
                self.record(
                    json!({"impostor_at": pid}),
                    &json!(result.as_ref().map_err(String::clone)),
                    began,
                );
                let impostor = result?;
                self.seen_pids.remove(&impostor);
                self.impostors.insert(impostor);
                self.watched_pids.insert(impostor, Seen::now(impostor));
                self.check(format!("saved ${{{}}} = {impostor}", i.save), Ok(()))?;
                self.vars.set(&i.save, json!(impostor));
                Ok(())
            }
            Action::Let(l) => {
                let value = match (&l.value, &l.repeat, l.times) {
                    (Some(v), _, _) => self.vars.subst(v)?,
                    (None, Some(text), Some(times)) => {
                        Value::String(self.vars.subst_text(text)?.repeat(times as usize))
                    }
                    _ => return Err("a let step needs `value`, or `repeat` with `times`".into()),
                };
                self.check(format!("${{{}}} is set", l.var), Ok(()))?;
                self.vars.set(&l.var, value);
                Ok(())
            }
        }
    }

    /// `pids` as first seen, for the checks that they are gone and the kill at the end.
    fn watch(&mut self, pids: &[u32]) -> Vec<Seen> {
        pids.iter()
            .map(|&pid| {
                *self
                    .watched_pids
                    .entry(pid)
                    .or_insert_with(|| Seen::now(pid))
            })
            .collect()
    }

    fn connected(&self) -> Result<&crate::client::McpServer, String> {
        self.server
            .as_ref()
            .filter(|s| s.is_connected())
            .ok_or_else(|| "the server was stopped by an earlier server step".to_string())
    }

    /// Call a tool, record the exchange, and check that the text content is the same JSON as
    /// structuredContent (SPEC §4).
    async fn tool(&mut self, tool: &str, args: &Value) -> Result<Reply, String> {
        let began = Instant::now();
        let result = self.connected()?.call(tool, args).await;
        let response = match &result {
            Ok(v) => v.clone(),
            Err(e) => json!({"protocol_error": e}),
        };
        self.record(json!({"tool": tool, "arguments": args}), &response, began);
        self.reply(tool, result?)
    }

    /// Like `tool`, also returning the notifications/progress received for the request and
    /// how long the answer took.
    async fn tool_with_progress(
        &mut self,
        tool: &str,
        args: &Value,
    ) -> Result<(Reply, Vec<Value>, Duration), String> {
        let began = Instant::now();
        let result = self.connected()?.call_with_progress(tool, args).await;
        // The client waits briefly after the answer for late-dispatched notifications.
        let took = began
            .elapsed()
            .saturating_sub(crate::client::NOTIFICATION_SETTLE);
        let response = match &result {
            Ok((v, progress)) => json!({"result": v, "progress": progress}),
            Err(e) => json!({"protocol_error": e}),
        };
        self.record(
            json!({"tool": tool, "arguments": args, "progress_token": true}),
            &response,
            began,
        );
        let (raw, progress) = result?;
        Ok((self.reply(tool, raw)?, progress, took))
    }

    fn reply(&mut self, tool: &str, raw: Value) -> Result<Reply, String> {
        let reply = Reply {
            structured: raw.get("structuredContent").cloned().unwrap_or(Value::Null),
            is_error: raw.get("isError") == Some(&Value::Bool(true)),
        };
        self.note_pids(&reply.structured);
        if let Err(e) = text_content_matches(&raw) {
            let what = format!("{tool}: text content equals structuredContent");
            return self.check(what, Err(e)).map(|()| reply);
        }
        Ok(reply)
    }

    fn matches(&mut self, what: &str, expected: &Value, actual: &Value) -> Result<(), String> {
        let result =
            matcher::check(expected, actual).map_err(|m| matcher::explain(expected, actual, &m));
        self.check(what, result)
    }

    fn save(&mut self, saves: &Saves, from: &Value) -> Result<(), String> {
        for (var, path) in saves {
            let value = lookup_path(from, path)
                .ok_or_else(|| format!("save {var}: no `{path}` in {from}"))?
                .clone();
            self.check(format!("saved ${{{var}}} = {value}"), Ok(()))?;
            self.vars.set(var, value);
        }
        Ok(())
    }

    /// What a call's answer must match.
    fn expected(&self, expect: Option<&Matcher>, error: Option<&String>) -> Result<Value, String> {
        Ok(match (expect, error) {
            (_, Some(code)) => json!({"ok": false, "error": {"code": self.vars.subst_text(code)?}}),
            (Some(m), None) => self.vars.subst(&m.0)?,
            // A call with no expectation must at least succeed.
            (None, None) => json!({"ok": true}),
        })
    }

    async fn call_step(&mut self, c: &CallStep) -> Result<(), String> {
        let args = self.vars.subst(&c.args)?;
        if let Some(ms) = c.cancel_after_ms {
            return self.cancelled_call(c, &args, ms).await;
        }
        if let Some(name) = &c.background {
            let task = self.connected()?.call_in_background(&c.tool, &args)?;
            self.check(
                format!("{} sent in the background as `{name}`", c.tool),
                Ok(()),
            )?;
            self.background
                .insert(name.clone(), (c.tool.clone(), args, Instant::now(), task));
            return Ok(());
        }
        let expected = self.expected(c.expect.as_ref(), c.expect_error.as_ref())?;
        let (reply, progress, took) = if c.progress.is_some() {
            self.tool_with_progress(&c.tool, &args).await?
        } else {
            let began = Instant::now();
            let reply = self.tool(&c.tool, &args).await?;
            (reply, Vec::new(), began.elapsed())
        };
        if let Some(ms) = c.within_ms {
            let result = if took <= Duration::from_millis(ms) {
                Ok(())
            } else {
                Err(format!("it took {} ms", took.as_millis()))
            };
            self.check(format!("{} answers within {ms} ms", c.tool), result)?;
        }
        if let Some(m) = &c.progress {
            let expected = self.vars.subst(&m.0)?;
            let what = format!("{} progress notifications match", c.tool);
            self.matches(&what, &expected, &Value::Array(progress))?;
        }
        self.judge(&c.tool, &expected, &reply)?;
        self.save(&c.save, &reply.structured)?;
        self.save_regexes(&c.save_regex, &reply.structured)
    }

    /// The answer to a call sent with `background`, checked like a call's.
    async fn await_step(&mut self, a: &AwaitStep) -> Result<(), String> {
        let (tool, args, began, task) = self
            .background
            .remove(&a.name)
            .ok_or_else(|| format!("no background call `{}` is pending", a.name))?;
        let result = task
            .await
            .unwrap_or_else(|e| Err(format!("the background call failed: {e}")));
        let response = match &result {
            Ok(v) => v.clone(),
            Err(e) => json!({"protocol_error": e}),
        };
        self.record(json!({"tool": tool, "arguments": args}), &response, began);
        let reply = self.reply(&tool, result?)?;
        let expected = self.expected(a.expect.as_ref(), a.expect_error.as_ref())?;
        self.judge(&tool, &expected, &reply)?;
        self.save(&a.save, &reply.structured)
    }

    /// Check a call's answer against what it must match.
    fn judge(&mut self, tool: &str, expected: &Value, reply: &Reply) -> Result<(), String> {
        if let Some(ok) = expected.get("ok").and_then(Value::as_bool) {
            let want_error = !ok;
            let result = if reply.is_error == want_error {
                Ok(())
            } else {
                Err(format!(
                    "isError is {}, expected {want_error}: {}",
                    reply.is_error, reply.structured
                ))
            };
            self.check(format!("isError is {want_error}"), result)?;
        }
        self.matches(
            &format!("{tool} result matches"),
            expected,
            &reply.structured,
        )
    }

    async fn cancelled_call(&mut self, c: &CallStep, args: &Value, ms: u64) -> Result<(), String> {
        let tool = c.tool.as_str();
        let began = Instant::now();
        let outcome = self
            .connected()?
            .call_then_cancel(tool, args, Duration::from_millis(ms))
            .await;
        let response = match &outcome {
            Ok(sent) => match &sent.result {
                None => json!({"cancelled_after_ms": ms}),
                Some(result) => result.clone(),
            },
            Err(e) => json!({"protocol_error": e}),
        };
        self.record(
            json!({"tool": tool, "arguments": args, "cancel_after_ms": ms}),
            &response,
            began,
        );
        let sent = outcome?;
        let result = match &sent.result {
            None => Ok(()),
            Some(result) => {
                if let Some(s) = result.get("structuredContent") {
                    self.note_pids(&s.clone());
                }
                Err(format!(
                    "the call completed before the cancellation: {result}"
                ))
            }
        };
        self.check(
            format!("{tool} is still running after {ms} ms and is cancelled"),
            result,
        )?;
        let cancelled_at = sent.cancelled_at.unwrap_or_else(Instant::now);
        if let Some(m) = &c.progress {
            let before: Vec<Value> = self
                .connected()?
                .progress_for(&sent.token)
                .into_iter()
                .filter(|p| p.at <= cancelled_at)
                .map(|p| p.value)
                .collect();
            let expected = self.vars.subst(&m.0)?;
            let what = format!("{tool} progress notifications before the cancellation match");
            self.matches(&what, &expected, &Value::Array(before))?;
        }
        if let Some(quiet) = c.cancel_quiet_ms {
            let quiet = Duration::from_millis(quiet);
            // What the server sent before it read the cancellation may still be on its way,
            // however long a loaded machine took to deliver the cancellation: the quiet
            // period starts once the server has read it (it answers a ping sent after it
            // only then), and allows a moment for what came before to be dispatched.
            self.connected()?.ping().await?;
            let read_at = Instant::now();
            let grace = read_at + crate::client::NOTIFICATION_SETTLE;
            tokio::time::sleep_until((read_at + quiet).into()).await;
            let late: Vec<Value> = self
                .connected()?
                .progress_for(&sent.token)
                .into_iter()
                .filter(|p| p.at > grace)
                .map(|p| p.value)
                .collect();
            self.record(
                json!({"observe_after_cancel_ms": quiet.as_millis() as u64}),
                &json!({"late_progress": late}),
                read_at,
            );
            let result = if late.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "progress still arrived after the cancellation: {late:?}"
                ))
            };
            self.check(
                format!(
                    "no progress for the cancelled {tool} in the {} ms after the server read the cancellation",
                    quiet.as_millis()
                ),
                result,
            )?;
        }
        Ok(())
    }

    async fn server_count_step(&mut self, what: Count, spec: &ServerFdsSpec) -> Result<(), String> {
        let began = Instant::now();
        let within = Duration::from_millis(spec.within_ms);
        let (key, noun) = match what {
            Count::Fds => ("server_fds", "open fds"),
            Count::Threads => ("server_threads", "threads"),
            Count::Zombies => ("server_zombies", "zombie children"),
        };
        let mut reads = Vec::new();
        loop {
            let server = self.connected()?;
            let pid = server.pid;
            let count = match what {
                Count::Fds if server.transport == Transport::Http => {
                    procfs::open_fds_but_sockets(pid)?
                }
                Count::Fds => procfs::open_fds(pid)?,
                Count::Threads => procfs::threads(pid)?,
                Count::Zombies => procfs::zombie_children(pid),
            };
            reads.push(count);
            let done = match (&spec.save, &spec.matches) {
                (Some(var), _) => {
                    self.record(json!({key: "read"}), &json!(count), began);
                    self.check(format!("saved ${{{var}}} = {count} {noun}"), Ok(()))?;
                    self.vars.set(var, Value::from(count));
                    return Ok(());
                }
                (None, Some(m)) => {
                    let expected = self.vars.subst(&m.0)?;
                    match matcher::check(&expected, &Value::from(count)) {
                        Ok(()) => Ok(()),
                        Err(_) if began.elapsed() < within => {
                            tokio::time::sleep(POLL_PAUSE * 5).await;
                            continue;
                        }
                        Err(mm) => Err(matcher::explain(&expected, &Value::from(count), &mm)),
                    }
                }
                (None, None) => Err(format!("a {key} step needs save or matches")),
            };
            let last = reads.len().saturating_sub(10);
            self.record(
                json!({key: "poll", "within_ms": spec.within_ms}),
                &json!({"reads": reads.len(), "last_counts": &reads[last..]}),
                began,
            );
            return self.check(
                format!(
                    "the server's {noun} count matches within {} ms",
                    spec.within_ms
                ),
                done,
            );
        }
    }

    async fn server_rss_step(&mut self, spec: &ServerRssSpec) -> Result<(), String> {
        let began = Instant::now();
        let read = |server: &crate::client::McpServer| match spec.peak {
            true => server.peak_rss_kib(),
            false => server.rss_kib(),
        };
        let kib = read(self.connected()?)?;
        if let Some(var) = &spec.save {
            self.record(json!({"server_rss": "read"}), &json!({"kib": kib}), began);
            self.vars.set(var, Value::from(kib));
            return self.check(format!("saved ${{{var}}} = {kib} KiB resident"), Ok(()));
        }
        let base = match &spec.above {
            Some(var) => self
                .vars
                .subst(&Value::String(format!("${{{var}}}")))?
                .as_u64()
                .ok_or_else(|| format!("${{{var}}} is not a saved KiB count"))?,
            None => 0,
        };
        let expected = match &spec.matches {
            Some(m) => self.vars.subst(&m.0)?,
            None => return Err("a server_rss step needs save or matches".into()),
        };
        let within = Duration::from_millis(spec.within_ms);
        let mut reads = vec![kib];
        let verdict = loop {
            let value = Value::from(reads[reads.len() - 1].saturating_sub(base));
            match matcher::check(&expected, &value) {
                Ok(()) => break Ok(()),
                Err(_) if began.elapsed() < within => {
                    tokio::time::sleep(POLL_PAUSE * 5).await;
                    reads.push(read(self.connected()?)?);
                }
                Err(mm) => break Err(matcher::explain(&expected, &value, &mm)),
            }
        };
        let last = reads.len().saturating_sub(10);
        self.record(
            json!({"server_rss": "poll", "peak": spec.peak, "above_kib": base, "within_ms": spec.within_ms}),
            &json!({"reads": reads.len(), "last_kib": &reads[last..]}),
            began,
        );
        let resident = if spec.peak {
            "peak resident"
        } else {
            "resident"
        };
        let what = match &spec.above {
            Some(var) => format!("{resident} KiB above ${{{var}}} ({base})"),
            None => format!("{resident} KiB"),
        };
        self.check(format!("the server's {what} matches"), verdict)
    }

    async fn string_arguments_step(&mut self, spec: &StringArgumentsSpec) -> Result<(), String> {
        let value = self.vars.subst(&spec.value)?;
        let size = value
            .as_str()
            .ok_or("string_arguments.value must be a string")?
            .len();
        let listed = self.connected()?.list_tools().await?;
        let tools = listed["tools"].as_array().cloned().unwrap_or_default();
        for tool in spec.valid_for.keys() {
            if !tools.iter().any(|t| t["name"] == json!(tool)) {
                return Err(format!(
                    "valid_for names `{tool}`, which tools/list does not"
                ));
            }
        }
        let mut covered = Vec::new();
        for tool in &tools {
            let name = tool["name"].as_str().ok_or("a tool without a name")?;
            let schema = &tool["inputSchema"];
            let required: Vec<&str> = schema["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let properties = schema["properties"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            for (argument, property) in &properties {
                let carried = match property["type"].as_str() {
                    Some("string") => value.clone(),
                    Some("array") if property["items"]["type"] == json!("string") => {
                        json!([value])
                    }
                    Some("object")
                        if property["additionalProperties"]["type"] == json!("string") =>
                    {
                        json!({ "MCP_TERMINAL_HUGE": value })
                    }
                    _ => continue,
                };
                let mut args = serde_json::Map::new();
                for other in required.iter().filter(|r| **r != argument) {
                    let valid = spec
                        .valid_for
                        .get(name)
                        .and_then(|v| v.get(*other))
                        .or_else(|| spec.valid.get(*other))
                        .ok_or_else(|| {
                            format!(
                                "no valid value for `{other}`, which `{name}` requires: add it \
                                 to valid (or valid_for.{name})"
                            )
                        })?;
                    args.insert((*other).to_owned(), self.vars.subst(valid)?);
                }
                args.insert(argument.clone(), carried);
                let key = format!("{name}.{argument}");
                let expected = self
                    .vars
                    .subst(&spec.expect_for.get(&key).unwrap_or(&spec.expect).0)?;
                let began = Instant::now();
                let result = self.connected()?.call(name, &Value::Object(args)).await;
                let actual = match &result {
                    Ok(raw) => raw.get("structuredContent").cloned().unwrap_or(Value::Null),
                    Err(e) => json!({ "protocol_error": e }),
                };
                let shown =
                    json!({"tool": name, "arguments": {argument: format!("<{size} bytes>")}});
                self.record(shown, &actual, began);
                if let Ok(raw) = result {
                    self.reply(name, raw)?;
                }
                self.matches(
                    &format!("{key} with {size} bytes: the answer matches"),
                    &expected,
                    &actual,
                )?;
                let next = self.connected()?.list_tools().await.map(|_| ());
                self.check(format!("after {key}: the next request is served"), next)?;
                covered.push(key);
            }
        }
        if let Some(stale) = spec.expect_for.keys().find(|k| !covered.contains(k)) {
            return Err(format!(
                "expect_for names `{stale}`, which is not a string argument"
            ));
        }
        self.check(
            format!(
                "{} string arguments carried {size} bytes: {}",
                covered.len(),
                covered.join(", ")
            ),
            Ok(()),
        )
    }

    async fn repeat_step(&mut self, r: &RepeatSpec) -> Result<(), String> {
        for i in 0..r.times {
            self.vars.set(&r.var, Value::from(i));
            for (index, inner) in r.steps.iter().enumerate() {
                if let Err(e) = Box::pin(self.step(inner)).await {
                    let label = inner.label(index);
                    return Err(format!("iteration {}={i}, step {label}: {e}", r.var));
                }
            }
        }
        self.check(
            format!("{} iterations of {} steps ran", r.times, r.steps.len()),
            Ok(()),
        )
    }

    async fn until_step(&mut self, u: &UntilStep) -> Result<(), String> {
        let spec = &u.spec;
        let began = Instant::now();
        let within = Duration::from_millis(spec.within_ms);
        let mut calls = 0;
        loop {
            let args = self.vars.subst(&spec.args)?;
            let expected = self.vars.subst(&spec.matches.0)?;
            let reply = self.tool(&spec.call, &args).await?;
            calls += 1;
            match matcher::check(&expected, &reply.structured) {
                Ok(()) => {
                    self.check(format!("{} matched after {calls} calls", spec.call), Ok(()))?;
                    self.save(&u.save, &reply.structured)?;
                    return self.save_regexes(&u.save_regex, &reply.structured);
                }
                Err(m)
                    if spec.max_calls.is_some_and(|max| calls >= max)
                        || began.elapsed() >= within =>
                {
                    let detail = format!(
                        "not matched after {calls} calls in {} ms; last result:\n{}",
                        began.elapsed().as_millis(),
                        matcher::explain(&expected, &reply.structured, &m)
                    );
                    return self.check(format!("until {} matches", spec.call), Err(detail));
                }
                Err(_) => tokio::time::sleep(POLL_PAUSE).await,
            }
        }
    }

    async fn collect_step(&mut self, c: &CollectStep) -> Result<(), String> {
        let spec = &c.spec;
        let session = self.vars.subst_text(&spec.session)?;
        let from = self
            .vars
            .subst(&spec.from)?
            .as_u64()
            .ok_or("collect `from` must be a non-negative integer")?;
        let mut collector = Collector::new(from, spec.max_bytes, spec.strip_ansi);
        let began = Instant::now();
        let within = Duration::from_millis(spec.within_ms);
        loop {
            let args = json!({
                "session_id": session, "cursor": collector.cursor(), "max_bytes": spec.max_bytes,
                "wait_ms": spec.wait_ms, "strip_ansi": spec.strip_ansi,
            });
            let reply = self.tool("terminal_read", &args).await?;
            let done = collector.accept(&reply.structured);
            if reply.is_error != (reply.structured.get("ok") != Some(&Value::Bool(true))) {
                return self.check(
                    "terminal_read: isError agrees with ok",
                    Err(format!(
                        "isError {} for {}",
                        reply.is_error, reply.structured
                    )),
                );
            }
            if self.check_page(done, &collector)? {
                break;
            }
            if collector.pages() >= spec.max_pages || began.elapsed() >= within {
                return self.check(
                    "collect reaches the end of output",
                    Err(format!(
                        "not complete after {} pages in {} ms; so far: {}",
                        collector.pages(),
                        began.elapsed().as_millis(),
                        collector.result()
                    )),
                );
            }
        }
        let result = collector.result();
        self.check(
            format!(
                "collected {} pages to cursor {}",
                collector.pages(),
                collector.cursor()
            ),
            Ok(()),
        )?;
        if let Some(m) = &c.expect {
            let expected = self.vars.subst(&m.0)?;
            self.matches("collected output matches", &expected, &result)?;
        }
        for a in &c.assert {
            let outcome = self.text_assert(a, &result);
            self.check(describe_assert(a), outcome)?;
        }
        self.save(&c.save, &result)?;
        self.save_regexes(&c.save_regex, &result)
    }

    /// Save capture group 1 of each regex over a text field of `from` (a dot path).
    fn save_regexes(&mut self, saves: &SaveRegexes, from: &Value) -> Result<(), String> {
        for (var, s) in saves {
            // A field that is not a string (a list of records) is searched as its JSON text.
            let text = match lookup_path(from, &s.field) {
                Some(Value::String(text)) => text.clone(),
                Some(other) => other.to_string(),
                None => return Err(format!("save_regex {var}: no `{}`", s.field)),
            };
            let text = text.as_str();
            let re = Regex::new(&s.regex).map_err(|e| format!("save_regex {var}: {e}"))?;
            let mut captured = Vec::new();
            for group in re.captures_iter(text).filter_map(|c| c.get(1)) {
                let group = group.as_str();
                captured.push(match s.integer {
                    false => Value::String(group.into()),
                    true => group
                        .parse::<u64>()
                        .map(Value::from)
                        .map_err(|_| format!("save_regex {var}: `{group}` is not an integer"))?,
                });
            }
            let value = match (s.all, captured.first()) {
                (true, _) => Value::Array(captured.clone()),
                (false, Some(first)) => first.clone(),
                (false, None) => {
                    return Err(format!("save_regex {var}: /{}/ does not match", s.regex));
                }
            };
            self.check(format!("saved ${{{var}}} = {value}"), Ok(()))?;
            self.vars.set(var, value);
        }
        Ok(())
    }

    /// Record a failed page rule; pass through whether collection is done.
    fn check_page(&mut self, done: Result<bool, String>, c: &Collector) -> Result<bool, String> {
        match done {
            Ok(done) => Ok(done),
            Err(e) => {
                let what = format!("page {} follows the paging rules", c.pages() + 1);
                self.check(what, Err(e)).map(|()| false)
            }
        }
    }

    fn text_assert(&self, a: &TextAssert, result: &Value) -> Result<(), String> {
        let text = result
            .get(&a.field)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("no text field `{}` in the collected result", a.field))?;
        let shown = || {
            let head: String = text.chars().take(400).collect();
            format!("{head:?}{}", if head.len() < text.len() { "…" } else { "" })
        };
        if let Some(sub) = &a.contains {
            let sub = self.vars.subst_text(sub)?;
            if !text.contains(&sub) {
                return Err(format!("{} does not contain {sub:?}", shown()));
            }
        }
        if let Some(re) = &a.regex {
            let re = Regex::new(&self.vars.subst_text(re)?).map_err(|e| e.to_string())?;
            if !re.is_match(text) {
                return Err(format!("{} does not match /{re}/", shown()));
            }
        }
        if let Some(len) = a.length {
            let got = text.chars().count() as u64;
            if got != len {
                return Err(format!("length {got} code points, expected {len}"));
            }
        }
        if let Some(want) = &a.sha256 {
            let got = sha256_hex(text.as_bytes());
            if !got.eq_ignore_ascii_case(want) {
                return Err(format!("sha256 {got}, expected {want}"));
            }
        }
        if let Some(want) = &a.equals {
            let want = self.vars.subst_text(want)?;
            if text != want {
                let diff = similar::TextDiff::from_lines(&want, text)
                    .unified_diff()
                    .header("expected", "actual")
                    .to_string();
                return Err(format!("text differs:\n{diff}"));
            }
        }
        Ok(())
    }

    async fn process_step(&mut self, p: &ProcessStep) -> Result<(), String> {
        let mut pids = match &p.pids {
            Some(v) => pid_list(&self.vars.subst(v)?)?,
            None => Vec::new(),
        };
        if let (Some(parent), Some(arg)) = (&p.children_of, &p.with_arg) {
            let parent = pid_of(&self.vars.subst(parent)?)?;
            let arg = self.vars.subst_text(arg)?;
            let mut children = procfs::children_with_arg(parent, &arg);
            // Children that must be alive may not have been started yet: look again.
            let began = Instant::now();
            while children.is_empty()
                && p.state == ProcState::Alive
                && began.elapsed() < Duration::from_millis(p.within_ms)
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
                children = procfs::children_with_arg(parent, &arg);
            }
            self.record(
                json!({"children_of": parent, "with_arg": arg}),
                &json!(children),
                Instant::now(),
            );
            if let Some(var) = &p.save {
                self.check(format!("saved ${{{var}}} = {children:?}"), Ok(()))?;
                self.vars.set(var, json!(children));
            }
            pids.extend(children);
        }
        if let Some(var) = &p.save_tag {
            let first = *pids.first().ok_or("save_tag needs a PID")?;
            let instance = procfs::server_instance(first)
                .ok_or_else(|| format!("process {first} carries no {}", procfs::TAG_VAR))?;
            self.check(format!("saved ${{{var}}} = {instance}"), Ok(()))?;
            self.vars.set(var, Value::String(instance));
        }
        let tagged = match &p.tagged {
            Some(t) => Some(self.vars.subst_text(t)?),
            None => None,
        };
        let seen = self.watch(&pids);
        if let Some(name) = p.signal {
            let sig = signal_of(name);
            let began = Instant::now();
            let mut sent = Vec::new();
            for s in &seen {
                // Only a live process that is not the server itself.
                if s.is_alive() && Some(s.pid) != self.server.as_ref().map(|s| s.pid) {
                    let r = nix::sys::signal::kill(nix::unistd::Pid::from_raw(s.pid as i32), sig);
                    sent.push(json!({"pid": s.pid, "result": r.map_err(|e| e.to_string()).err()}));
                }
            }
            self.record(
                json!({"signal": sig.as_str(), "pids": pids}),
                &json!(sent),
                began,
            );
        }
        let group = match &p.group {
            Some(v) => Some(pid_of(&self.vars.subst(v)?)?),
            None => None,
        };
        let began = Instant::now();
        let within = Duration::from_millis(p.within_ms);
        let state = |seen: &[Seen]| {
            let alive: Vec<u32> = seen
                .iter()
                .filter(|s| s.is_alive())
                .map(|s| s.pid)
                .collect();
            let members = group.map(procfs::group_members).unwrap_or_default();
            let carrying = tagged.as_deref().map(procfs::tagged_by).unwrap_or_default();
            (alive, members, carrying)
        };
        loop {
            let (alive, members, carrying) = state(&seen);
            let holds = match p.state {
                ProcState::Gone => alive.is_empty() && members.is_empty() && carrying.is_empty(),
                ProcState::Alive => {
                    alive.len() == pids.len()
                        && (p.children_of.is_none() || !pids.is_empty())
                        && (group.is_none() || !members.is_empty())
                        && (tagged.is_none() || !carrying.is_empty())
                }
            };
            if holds || began.elapsed() >= within {
                let what = format!(
                    "processes {pids:?}{}{} are {:?} within {} ms",
                    group.map(|g| format!(" and group {g}")).unwrap_or_default(),
                    tagged
                        .as_deref()
                        .map(|t| format!(" and those tagged by server {t}"))
                        .unwrap_or_default(),
                    p.state,
                    p.within_ms
                );
                let detail =
                    format!("alive: {alive:?}, group members: {members:?}, tagged: {carrying:?}");
                let result = if holds { Ok(()) } else { Err(detail) };
                return self.check(what, result);
            }
            tokio::time::sleep(POLL_PAUSE).await;
        }
    }

    async fn server_step(&mut self, s: &ServerStep) -> Result<(), String> {
        let within = Duration::from_millis(s.within_ms);
        let extra_pids = match &s.pids {
            Some(v) => pid_list(&self.vars.subst(v)?)?,
            None => Vec::new(),
        };
        let extra_pids = self.watch(&extra_pids);
        self.connected()?;
        let server = self.server.as_mut().expect("connected");
        let began = Instant::now();
        if let Some(name) = s.signal {
            server.signal(signal_of(name))?;
        }
        if s.close_stdin && server.transport != Transport::Stdio {
            // HTTP has no stdin: its clean end is SIGTERM.
            server.signal(Signal::SIGTERM)?;
        } else if s.close_stdin {
            server.close_stdin().await;
        }
        let exit = server.wait_exit(within).await;
        server.close().await;
        server.finish_stderr(Duration::from_secs(2)).await;
        let (signals, killed) = server.transport_signals();
        let stderr = server.stderr();
        let pid = server.pid;
        self.record(
            json!({"server": {"pid": pid, "signal": s.signal.map(|n| format!("{n:?}")), "close_stdin": s.close_stdin}}),
            &json!({"exit": exit.map(|e| e.describe()), "transport_signals": signals, "stderr": stderr}),
            began,
        );
        let exit = match exit {
            Some(exit) => exit,
            None => {
                return self.check(
                    format!("server exits within {} ms", s.within_ms),
                    Err("it did not exit".into()),
                );
            }
        };
        let took = exit.at.saturating_duration_since(began);
        let prompt = if s.close_stdin && (!signals.is_empty() || killed) {
            Err(format!(
                "it did not exit on stdin EOF; the client transport had to send signals {signals:?}"
            ))
        } else if took > within {
            Err(format!("it took {} ms", took.as_millis()))
        } else {
            Ok(())
        };
        self.check(format!("server exits within {} ms", s.within_ms), prompt)?;
        if let Some(code) = s.expect_exit {
            let result = if exit.code == Some(code) {
                Ok(())
            } else {
                Err(exit.describe())
            };
            self.check(format!("server exit code is {code}"), result)?;
        }
        if let Some(m) = &s.stderr {
            let expected = self.vars.subst(&m.0)?;
            self.matches("server stderr matches", &expected, &Value::String(stderr))?;
        }
        let mut pids: Vec<Seen> = self.seen_pids.values().copied().collect();
        pids.extend(extra_pids);
        // Within `within_ms` of the signal or the close, not of the exit.
        let left = wait_gone(&pids, within.saturating_sub(began.elapsed())).await;
        let result = if left.is_empty() {
            Ok(())
        } else {
            Err(format!("still alive: {left:?}"))
        };
        self.check(
            format!("all {} session processes are gone", pids.len()),
            result,
        )
    }

    async fn raw_step(&mut self, actions: &[RawAction]) -> Result<(), String> {
        let mut raw = RawServer::spawn(
            &self.spec.server,
            &self.server_args,
            &self.root,
            &self.scenario.server.launch.env,
        )?;
        let began = Instant::now();
        self.record(
            json!({"raw": "spawn", "args": self.server_args}),
            &json!({"pid": raw.pid()}),
            began,
        );
        let mut outcome = Ok(());
        let mut last = Value::Null;
        for (index, action) in actions.iter().enumerate() {
            let began = Instant::now();
            let (request, result) = self.raw_action(&mut raw, action, &mut last).await;
            let response = match &result {
                Ok(v) => v.clone(),
                Err(e) => json!({"error": e}),
            };
            if let Err(e) = result {
                outcome = Err(format!("raw action #{index} {request}: {e}"));
                self.record(request, &response, began);
                break;
            }
            self.record(request, &response, began);
        }
        let began = Instant::now();
        let (stderr, stdout_check) = raw.finish().await;
        self.record(json!({"raw": "finish"}), &json!({"stderr": stderr}), began);
        outcome?;
        self.check("raw stdout carries only JSON lines", stdout_check)
    }

    async fn raw_action(
        &mut self,
        raw: &mut RawServer,
        action: &RawAction,
        last: &mut Value,
    ) -> (Value, Result<Value, String>) {
        match action {
            RawAction::Send(line) => match self.vars.subst_text(line) {
                Ok(line) => {
                    let r = raw.send_line(&line).await.map(|()| json!("sent"));
                    (json!({"send": line}), r)
                }
                Err(e) => (json!({"send": line}), Err(e)),
            },
            RawAction::SendBytesHex(hex) => {
                let r = raw.send_hex(hex).await.map(|n| json!({"sent_bytes": n}));
                (json!({"send_bytes_hex": hex}), r)
            }
            RawAction::SendOversized(bytes) => {
                let r = raw.send_oversized(*bytes).await.map(|()| json!("sent"));
                (json!({"send_oversized": {"bytes": bytes}}), r)
            }
            RawAction::Initialize => (json!({"initialize": true}), raw.initialize().await),
            RawAction::Expect(m) => {
                let request = json!({"expect": m.0});
                let line = match raw.read_json(LINE_TIMEOUT).await {
                    Ok(line) => line,
                    Err(e) => return (request, Err(e)),
                };
                let result = self.vars.subst(&m.0).and_then(|expected| {
                    matcher::check(&expected, &line)
                        .map_err(|mm| matcher::explain(&expected, &line, &mm))
                });
                let result = self
                    .check("raw reply matches", result)
                    .map(|()| line.clone());
                *last = line.clone();
                (request, result.map_err(|e| format!("{e}\nline: {line}")))
            }
            RawAction::Save(saves) => {
                let request = json!({"save": saves});
                let saved = self.save(saves, last).map(|()| json!("saved"));
                (request, saved)
            }
            RawAction::Flood(flood) => {
                let request = json!({"flood": {"line": flood.line, "times": flood.times}});
                let line = match self.vars.subst_text(&flood.line) {
                    Ok(line) => line,
                    Err(e) => return (request, Err(e)),
                };
                let last = r#"{"jsonrpc":"2.0","id":"last","method":"ping"}"#;
                let settle = Duration::from_millis(flood.settle_ms);
                let (grown, answers, last_answer) =
                    match raw.flood_unread(&line, flood.times, last, settle).await {
                        Ok(outcome) => outcome,
                        Err(e) => return (request, Err(e)),
                    };
                let response =
                    json!({"rss_growth_kib": grown, "answers": answers, "last": last_answer});
                let bounded = if grown <= flood.max_growth_kib {
                    Ok(())
                } else {
                    Err(format!("it grew by {grown} KiB"))
                };
                let result = self
                    .check(
                        format!(
                            "resident memory grew by at most {} KiB while nothing was read",
                            flood.max_growth_kib
                        ),
                        bounded,
                    )
                    .and_then(|()| {
                        let all = if answers == flood.times {
                            Ok(())
                        } else {
                            Err(format!("{answers} answers"))
                        };
                        self.check(format!("{} answers, one per request", flood.times), all)
                    })
                    .and_then(|()| {
                        let served = match last_answer.get("result") {
                            Some(_) => Ok(()),
                            None => Err(format!("{last_answer}")),
                        };
                        self.check("the next request is served", served)
                    });
                (request, result.map(|()| response))
            }
            RawAction::Signal(name) => {
                let sig = signal_of(*name);
                (
                    json!({"signal": sig.as_str()}),
                    raw.signal(sig).map(|()| json!("sent")),
                )
            }
            RawAction::ExpectSilenceMs(ms) => {
                let r = raw
                    .silence(Duration::from_millis(*ms))
                    .await
                    .map(|()| json!("silent"));
                (json!({"expect_silence_ms": ms}), r)
            }
            RawAction::CloseStdin => {
                raw.close_stdin();
                (json!({"close_stdin": true}), Ok(json!("closed")))
            }
            RawAction::CloseStdout => {
                raw.close_stdout();
                (json!({"close_stdout": true}), Ok(json!("closed")))
            }
            RawAction::ExpectExit(code) => {
                let r = match raw.wait_exit(LINE_TIMEOUT).await {
                    Ok(got) if got == Some(*code) => Ok(json!({"exit_code": got})),
                    Ok(got) => Err(format!("exit code {got:?}, expected {code}")),
                    Err(e) => Err(e),
                };
                (json!({"expect_exit": code}), r)
            }
        }
    }

    fn fs_step(&mut self, fs: &FsStep) -> Result<(), String> {
        let began = Instant::now();
        if let Some(r) = &fs.read {
            use std::os::unix::fs::PermissionsExt;
            let path = self.inside_root(&r.path)?;
            let read = std::fs::read_to_string(&path).and_then(|text| {
                let mode = std::fs::metadata(&path)?.permissions().mode() & 0o7777;
                Ok((text, mode))
            });
            let found = match &read {
                Ok((text, mode)) => {
                    let lines: Vec<Value> = text
                        .lines()
                        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| json!(l)))
                        .collect();
                    json!({"text": text, "lines": lines, "mode": format!("{mode:o}")})
                }
                Err(e) => json!({"error": e.to_string()}),
            };
            self.record(json!({"read": path}), &found, began);
            read.map_err(|e| format!("fs read failed: {e}"))?;
            let expected = self.vars.subst(&r.expect.0)?;
            return self.matches("file matches", &expected, &found);
        }
        let (request, result) = if let Some(link) = &fs.symlink {
            let path = self.inside_root(&link.path)?;
            let target = self.vars.subst_text(&link.target)?;
            (
                json!({"symlink": {"path": path, "target": target}}),
                std::os::unix::fs::symlink(&target, &path),
            )
        } else if let Some(dir) = &fs.mkdir {
            let path = self.inside_root(dir)?;
            (json!({"mkdir": path}), std::fs::create_dir_all(&path))
        } else if let Some(w) = &fs.write {
            let path = self.inside_root(&w.path)?;
            let text = self.vars.subst_text(&w.text)?;
            (
                json!({"write": path, "bytes": text.len()}),
                std::fs::write(&path, text),
            )
        } else if let Some(c) = &fs.chmod {
            use std::os::unix::fs::PermissionsExt;
            let path = self.inside_root(&c.path)?;
            let mode = u32::from_str_radix(&c.mode, 8)
                .map_err(|_| format!("fs.chmod.mode `{}` is not octal", c.mode))?;
            (
                json!({"chmod": path, "mode": c.mode}),
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)),
            )
        } else if let Some(path) = &fs.hang {
            let path = self.inside_root(path)?;
            let mounted = crate::hung::HungMount::mount(&path).map(|m| self.hung.push(m));
            (
                json!({"hang": path}),
                mounted.map_err(std::io::Error::other),
            )
        } else {
            return Err("an fs step needs symlink, mkdir, write, chmod, read or hang".into());
        };
        let response = match &result {
            Ok(()) => json!("done"),
            Err(e) => json!({"error": e.to_string()}),
        };
        self.record(request, &response, began);
        result.map_err(|e| format!("fs step failed: {e}"))
    }

    async fn cast_step(&mut self, c: &CastStep) -> Result<(), String> {
        let path = PathBuf::from(self.vars.subst_text(&c.spec.file)?);
        let expected = match &c.expect {
            Some(m) => Some(self.vars.subst(&m.0)?),
            None => None,
        };
        let began = Instant::now();
        let within = Duration::from_millis(c.spec.within_ms);
        let mut read = crate::cast::read_cast(&path).await;
        while began.elapsed() < within
            && !matches!((&read, &expected), (Ok(cast), Some(e)) if matcher::check(e, cast).is_ok())
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
            read = crate::cast::read_cast(&path).await;
        }
        let response = read.clone().unwrap_or_else(|e| json!({"error": e}));
        self.record(json!({"cast": path}), &response, began);
        let cast = self
            .check("the recording is a valid asciicast v2 file", read.map(drop))
            .map(|()| response)?;
        if let Some(expected) = &expected {
            self.matches("the recording matches", expected, &cast)?;
        }
        self.save(&c.save, &cast)
    }

    /// Scenario files may only touch their own root.
    fn inside_root(&self, path: &str) -> Result<PathBuf, String> {
        let path = PathBuf::from(self.vars.subst_text(path)?);
        let escapes = path.components().any(|c| c == Component::ParentDir);
        if !path.starts_with(&self.root) || escapes || path == Path::new(&self.root) {
            return Err(format!(
                "fs paths must be inside ${{root}} ({}): {}",
                self.root.display(),
                path.display()
            ));
        }
        Ok(path)
    }
}

fn signal_of(name: SignalName) -> Signal {
    match name {
        SignalName::Term => Signal::SIGTERM,
        SignalName::Int => Signal::SIGINT,
        SignalName::Kill => Signal::SIGKILL,
    }
}

fn describe_assert(a: &TextAssert) -> String {
    let (op, arg) = if let Some(s) = &a.contains {
        ("contains", format!("{s:?}"))
    } else if let Some(s) = &a.regex {
        ("matches", format!("/{s}/"))
    } else if let Some(n) = a.length {
        ("has length", n.to_string())
    } else if let Some(s) = &a.sha256 {
        ("has sha256", s.clone())
    } else if let Some(s) = &a.equals {
        ("equals", format!("{s:?}"))
    } else {
        ("?", String::new())
    };
    format!("{} {op} {arg}", a.field)
}

/// SPEC §4: the text content is the same JSON as structuredContent.
fn text_content_matches(raw: &Value) -> Result<(), String> {
    let structured = raw
        .get("structuredContent")
        .ok_or("the result has no structuredContent")?;
    let text = raw
        .pointer("/content/0/text")
        .and_then(Value::as_str)
        .ok_or("content[0] is not text")?;
    let parsed: Value =
        serde_json::from_str(text).map_err(|e| format!("content[0].text is not JSON: {e}"))?;
    if &parsed == structured {
        Ok(())
    } else {
        Err(format!(
            "content[0].text {parsed} differs from structuredContent {structured}"
        ))
    }
}

fn pid_of(v: &Value) -> Result<u32, String> {
    match v {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|pid| *pid > 1)
    .ok_or_else(|| format!("not a PID: {v}"))
}

/// A PID, or a list of PIDs and lists (saved lists can be combined: `["${a}", "${kids}"]`).
fn pid_list(v: &Value) -> Result<Vec<u32>, String> {
    match v {
        Value::Array(items) => items.iter().try_fold(Vec::new(), |mut all, item| {
            all.extend(pid_list(item)?);
            Ok(all)
        }),
        single => pid_of(single).map(|p| vec![p]),
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_content_must_equal_structured() {
        let ok = json!({"content": [{"type": "text", "text": "{\"ok\":true}"}], "structuredContent": {"ok": true}});
        assert!(text_content_matches(&ok).is_ok());
        let differs = json!({"content": [{"type": "text", "text": "{\"ok\":false}"}], "structuredContent": {"ok": true}});
        assert!(text_content_matches(&differs).is_err());
        let missing = json!({"content": [{"type": "text", "text": "hi"}]});
        assert!(text_content_matches(&missing).is_err());
    }

    #[test]
    fn pids_from_numbers_and_strings() {
        assert_eq!(pid_list(&json!([12, "34"])).unwrap(), vec![12, 34]);
        assert_eq!(pid_list(&json!("56")).unwrap(), vec![56]);
        assert_eq!(pid_list(&json!([7, [8, "9"]])).unwrap(), vec![7, 8, 9]);
        assert!(pid_list(&json!([true])).is_err());
        assert!(pid_list(&json!([1])).is_err());
    }

    #[test]
    fn sha256_of_empty() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
