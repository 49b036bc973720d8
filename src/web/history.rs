//! What a session page says of what ran: how the session was started (argv, cwd, the names
//! of the variables the client set, never their values), when it started and ended and
//! why, and in a shell session each command `terminal_exec` typed, with its exit status,
//! duration and a link to its output.

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use super::pages::escape;
use crate::session::{Command, Session, Snapshot, timestamp};

/// `1.2 s`, `340 ms`, `2m 05s`.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0..1000 => format!("{ms} ms"),
        1000..60_000 => format!("{:.1} s", d.as_secs_f64()),
        _ => super::pages::age(d),
    }
}

fn between(from: SystemTime, to: SystemTime) -> Duration {
    to.duration_since(from).unwrap_or_default()
}

/// The facts of how the session was started and ended, as a definition list.
pub fn origin_html(session: &Session, s: &Snapshot, out: &mut String) {
    let origin = session.origin();
    let argv: Vec<String> = origin
        .argv
        .iter()
        .map(|a| format!("<code>{}</code>", escape(a)))
        .collect();
    let env = if origin.env_names.is_empty() {
        "<span class=\"none\">none</span>".to_owned()
    } else {
        origin
            .env_names
            .iter()
            .map(|n| format!("<code>{}</code>", escape(n)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let started = session.started_at();
    let (ended, took) = match session.ending_facts() {
        Some(end) => {
            let took = duration(between(started, end.at));
            (escape(&timestamp(end.at)), format!("(ran {took})"))
        }
        None => (
            "<span class=\"none\">not yet</span>".to_owned(),
            format!("(running for {})", duration(session.age())),
        ),
    };
    let _ = write!(
        out,
        "<dl class=\"origin\"><dt>argv</dt><dd class=\"argv\">{argv}</dd>\
         <dt>cwd</dt><dd><code>{cwd}</code></dd>\
         <dt>env set by the client</dt><dd class=\"env\">{env}</dd>\
         <dt>started</dt><dd>{started}</dd><dt>ended</dt><dd class=\"ended\">{ended} \
         <span class=\"took\">{took}</span></dd>\
         <dt>termination</dt><dd class=\"reason\">{reason}</dd></dl>",
        argv = argv.join(" "),
        cwd = escape(&origin.cwd),
        started = escape(&timestamp(started)),
        reason = escape(&termination(session, s)),
    );
}

/// Why the session ended, in words: the reason, and what the controller said of it.
fn termination(session: &Session, s: &Snapshot) -> String {
    let Some(reason) = s.termination_reason else {
        return "—".to_owned();
    };
    match session.ending_facts().and_then(|e| e.why) {
        Some(why) => format!("{} ({why})", reason.as_str()),
        None => reason.as_str().to_owned(),
    }
}

/// The commands typed into a shell session, oldest first.
pub fn history_html(session: &Session, out: &mut String) {
    let history = session.history();
    if history.is_empty() {
        return;
    }
    out.push_str(
        "<h2>Commands</h2><table class=\"history\"><thead><tr><th>#</th><th>command</th>\
         <th>exit</th><th>duration</th><th>output</th></tr></thead><tbody>",
    );
    for (i, command) in history.iter().enumerate() {
        // A command's output runs until the next command was typed: on pipes what it wrote
        // on stderr may be read after its end mark on stdout.
        let until = history.get(i + 1).map(|next| next.submitted);
        row(session, command, until, out);
    }
    out.push_str("</tbody></table>");
}

fn row(session: &Session, c: &Command, until: Option<u64>, out: &mut String) {
    let (status, took) = match &c.ended {
        Some(end) => (
            match end.status {
                Some(code) => format!("<span class=\"exit{}\">{code}</span>", (code != 0) as u8),
                None => "<span class=\"none\">unknown</span>".to_owned(),
            },
            duration(between(c.began_at, end.at)),
        ),
        None => (
            "<span class=\"status RUNNING\">running</span>".to_owned(),
            duration(between(c.began_at, SystemTime::now())),
        ),
    };
    // From where it was typed: on pipes its stderr may be read before its start mark.
    let from = c.submitted;
    let output = match until {
        Some(to) => format!(
            "<a class=\"range\" href=\"sessions/{id}/output?from={from}&amp;to={to}\">\
             chars {from}–{to}</a>",
            id = escape(&session.id),
        ),
        None => format!(
            "<a class=\"range\" href=\"sessions/{id}/output?from={from}\">from char {from}</a>",
            id = escape(&session.id),
        ),
    };
    let _ = write!(
        out,
        "<tr data-seq=\"{seq}\"><td>{seq}</td><td class=\"command\">{text}</td>\
         <td class=\"exit\">{status}</td><td>{took}</td><td>{output}</td></tr>",
        seq = c.seq,
        text = format_args!("<code>{}</code>", escape(&c.text)),
    );
}
