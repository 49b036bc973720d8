//! The live view's HTML. Everything a session produced (output, titles, command ids) is
//! hostile text: it reaches the page only through `escape`, and the script only ever puts
//! these server-rendered fragments into the page, so one escaping function guards it all.

use std::fmt::Write;
use std::time::Duration;

use crate::output::{Colour, Entry, Span, Stream, Style, StyledScreen};
use crate::session::{Reason, Session, Snapshot};

/// `text` safe as HTML text and inside a double-quoted attribute.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Controls other than newline and tab would be invisible or break the layout.
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// A whole page: `live` is replaced by each update from `events`; `after` follows it and
/// is never replaced (the owner's controls keep what is typed in them). Links are relative
/// to `base`, the view's own path (`View::base`): the style sheet, script and icon, which
/// anyone may fetch, are the only absolute ones.
fn page(base: &str, title: &str, events: Option<&str>, live: &str) -> String {
    page_with(base, title, events, live, "", "")
}

fn page_with(
    base: &str,
    title: &str,
    events: Option<&str>,
    live: &str,
    body_data: &str,
    after: &str,
) -> String {
    let events = events
        .map(|url| format!(" data-events=\"{}\"", escape(url)))
        .unwrap_or_default();
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>{}</title><base href=\"{}\">\
         <link rel=\"icon\" href=\"/favicon.ico\" type=\"image/svg+xml\">\
         <link rel=\"stylesheet\" href=\"/ui/style.css\"></head>\
         <body{events}{body_data}><header><a href=\"./\">mcp-terminal</a> · live view \
         <span id=\"state\" class=\"state\"></span></header>\
         <main><div id=\"live\">{live}</div>{after}</main>\
         <script src=\"/ui/app.js\"></script></body></html>\n",
        escape(title),
        escape(base)
    )
}

/// The 401 page; `spent_code` when the request presented a code that is spent, expired or
/// unknown.
pub fn sign_in_needed(spent_code: bool) -> axum::response::Html<String> {
    let minutes = crate::limits::WEB_SIGN_IN_CODE_TTL.as_secs() / 60;
    let spent = if spent_code {
        format!(
            "<p>The sign-in code of this address was already used, has expired, or is not \
             one this server issued: a code signs in one browser once, within {minutes} \
             minutes of being printed.</p>"
        )
    } else {
        String::new()
    };
    axum::response::Html(page(
        "/ui/",
        "mcp-terminal: sign in",
        None,
        &format!(
            "<div class=\"signin\"><h1>Sign in to the live view</h1>{spent}<p>This is the \
             live view of mcp-terminal, for the person who owns this machine. To sign in, \
             open a sign-in address of the running server:</p><ol><li>Run \
             <code>mcp-terminal web-url</code> (with <code>--config PATH</code> if the server \
             runs with one): it prints a fresh one.</li><li>Or open the one in the file \
             <code>web-url</code> beside the server's config, or the one it printed on its \
             standard error (<code>mcp-terminal: live view: \
             http://127.0.0.1:PORT/ui/?code=…</code>), within {minutes} minutes of its \
             start.</li></ol><p>A code works once: it signs this browser in with a cookie that \
             lasts until the server stops, and sends it to the view's own address: \
             <code>/ui/</code> and a random part, which is in your browser's history. Scripts may send <code>Authorization: Bearer \
             &lt;token&gt;</code> instead, with the token from the server's token file.</p>\
             </div>"
        ),
    ))
}

pub fn not_found(base: &str, what: &str) -> axum::response::Html<String> {
    refusal(base, "Not found", what)
}

/// A page saying why a request was refused (`heading`, then `what` in words).
pub fn refusal(base: &str, heading: &str, what: &str) -> axum::response::Html<String> {
    axum::response::Html(page(
        base,
        &format!("mcp-terminal: {}", heading.to_lowercase()),
        None,
        &format!(
            "<h1>{}</h1><p>{}</p><p><a href=\"./\">All sessions</a></p>",
            escape(heading),
            escape(what)
        ),
    ))
}

pub fn list_page(base: &str, sessions: &[std::sync::Arc<Session>]) -> String {
    page(
        base,
        "mcp-terminal: sessions",
        Some("events"),
        &list(sessions),
    )
}

/// A session's page; `control` is the page's token when the owner may act on it.
pub fn session_page(base: &str, session: &Session, control: Option<&str>) -> String {
    let (data, after) = match control {
        Some(token) => (
            format!(" data-csrf=\"{}\"", escape(token)),
            controls(session),
        ),
        None => (String::new(), String::new()),
    };
    page_with(
        base,
        &format!("mcp-terminal: {} {}", session.command_id, session.id),
        Some(&format!("sessions/{}/events", session.id)),
        &session_view(session),
        &format!(" data-session=\"{}\"{data}", escape(&session.id)),
        &after,
    )
}

/// The owner's controls (`--web-control`): typing and keys for a terminal, and ending the
/// session. The script posts them with the page's token.
fn controls(session: &Session) -> String {
    let typing = if session.mode == crate::config::Mode::Pty {
        let keys = [
            "Enter",
            "Tab",
            "Escape",
            "Backspace",
            "Up",
            "Down",
            "Left",
            "Right",
            "C-c",
            "C-d",
        ]
        .iter()
        .map(|k| format!("<button type=\"button\" class=\"key\" data-key=\"{k}\">{k}</button>"))
        .collect::<String>();
        format!(
            "<form id=\"type\" autocomplete=\"off\"><label>Type into the terminal \
             <input id=\"text\" name=\"text\" size=\"40\"></label> \
             <button type=\"submit\">Send</button> <label><input type=\"checkbox\" \
             id=\"enter\" checked> with Enter</label></form><p class=\"keys\">{keys}</p>"
        )
    } else {
        String::new()
    };
    format!(
        "<section id=\"control\" class=\"control\"><h2>Owner control</h2>{typing}\
         <p><button type=\"button\" id=\"terminate\">Terminate the session</button> \
         <span id=\"control-result\" class=\"none\"></span></p></section>"
    )
}

pub fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
    }
}

/// How it ended: the exit code or the signal, and beside it the reason when the
/// controller ended it (`SIGTERM (timeout)`).
fn ending(s: &Snapshot) -> String {
    let how = match (s.exit_code, s.exit_signal) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => signal.to_owned(),
        (None, None) => String::new(),
    };
    match s.termination_reason {
        Some(reason) if reason != Reason::Natural && !how.is_empty() => {
            format!("{how} ({})", reason.as_str())
        }
        _ => how,
    }
}

/// A badge when the session's program waits for input (`awaiting_input`, read from the
/// kernel when the snapshot is taken), naming the program in the foreground.
fn waiting_badge(s: &Snapshot) -> String {
    if s.awaiting_input != Some(true) || s.status.is_final() {
        return String::new();
    }
    let program = s.foreground.as_ref().and_then(|f| f.name.as_deref());
    format!(
        "<span class=\"badge waiting\" title=\"the program in the foreground is blocked \
         reading the session's input\">waiting for input{}</span> ",
        program.map_or(String::new(), |name| format!(": {}", escape(name)))
    )
}

fn recording_link(s: &Snapshot) -> String {
    match &s.recording {
        Some(name) => format!(
            "<a class=\"play\" href=\"recordings/{0}/play\">▶ play</a> \
             <a class=\"recording\" href=\"recordings/{0}\">{0}</a>",
            escape(name)
        ),
        None => String::new(),
    }
}

/// The player of recording `name`: its first frame, the controls, and the download.
pub fn player_page(base: &str, name: &str, duration: f64, first: &StyledScreen) -> String {
    let name = escape(name);
    let mut screen = String::new();
    screen_fragment(first, &mut screen);
    let after = format!(
        "<div class=\"player\"><button type=\"button\" id=\"play\">Play</button> \
         <input type=\"range\" id=\"seek\" min=\"0\" max=\"{duration:.3}\" step=\"0.01\" \
         value=\"0\"> <span id=\"time\">0.0</span> / {duration:.1} s \
         <label>speed <select id=\"speed\"><option>0.5</option><option selected>1</option>\
         <option>2</option><option>4</option><option>8</option></select></label> \
         <a href=\"recordings/{name}\" download>download .cast</a></div>"
    );
    let live = format!(
        "<h1>Recording <span class=\"id\">{name}</span></h1><div id=\"frame\">{screen}</div>"
    );
    page_with(
        base,
        &format!("mcp-terminal: recording {name}"),
        None,
        &live,
        &format!(" data-player=\"recordings/{name}/frames\" data-duration=\"{duration:.3}\""),
        &after,
    )
}

/// A screen as the player shows each frame: the same rendering as a live session's.
pub fn screen_fragment(screen: &StyledScreen, out: &mut String) {
    screen_html(screen, "screen", true, out);
}

/// The session table, newest first.
pub fn list(sessions: &[std::sync::Arc<Session>]) -> String {
    let mut out = String::from(
        "<h1>Sessions</h1><table class=\"sessions\"><thead><tr><th>session</th><th>command</th>\
         <th>mode</th><th>status</th><th>ended</th><th>age</th><th>output</th>\
         <th>recording</th></tr></thead><tbody>",
    );
    for session in sessions.iter().rev() {
        let s = session.snapshot();
        let _ = write!(
            out,
            "<tr data-session=\"{id}\"><td><a href=\"sessions/{id}\">{id}</a></td>\
             <td>{command}</td><td>{mode}</td><td><span class=\"status {status}\">{status}</span>\
             {waiting}</td><td>{ending}</td><td>{age}</td><td>{output} chars</td>\
             <td>{recording}</td></tr>",
            id = escape(&s.session_id),
            command = escape(&s.command_id),
            mode = s.mode,
            status = s.status.as_str(),
            waiting = waiting_badge(&s),
            ending = escape(&ending(&s)),
            age = age(session.age()),
            output = s.next_cursor,
            recording = recording_link(&s),
        );
    }
    if sessions.is_empty() {
        out.push_str("<tr><td colspan=\"8\" class=\"none\">No sessions yet.</td></tr>");
    }
    out.push_str("</tbody></table>");
    out
}

/// A session's header and its screen (PTY) or output tail (pipes).
pub fn session_view(session: &Session) -> String {
    let s = session.snapshot();
    let mut out = format!(
        "<h1>{command} <span class=\"id\">{id}</span></h1><p class=\"facts\">\
         <span>{mode}</span> <span class=\"status {status}\">{status}</span> {waiting}\
         <span>{ending}</span> <span>age {age}</span> <span>{output} chars</span> {recording}</p>",
        command = escape(&s.command_id),
        id = escape(&s.session_id),
        mode = s.mode,
        status = s.status.as_str(),
        waiting = waiting_badge(&s),
        ending = escape(&ending(&s)),
        age = age(session.age()),
        output = s.next_cursor,
        recording = recording_link(&s),
    );
    super::history::origin_html(session, &s, &mut out);
    super::history::history_html(session, &mut out);
    match session.styled_screen() {
        Some(screen) => {
            let ended = s.status.is_final();
            // A full-screen program that ended (vim after `:wq`) wiped its screen on the
            // way out: show what it showed last, then the terminal as it was left.
            if let Some(last) = session.last_full_screen().filter(|_| ended) {
                out.push_str(
                    "<h2>Last full screen</h2><p class=\"note\">What the program showed last, \
                     before it left its full screen at the end.</p>",
                );
                screen_html(&last, "screen last", false, &mut out);
                out.push_str("<h2>The terminal as it was left</h2>");
            }
            screen_html(&screen, "screen", !ended, &mut out);
        }
        None => tail_html(
            &session.output_tail(crate::limits::WEB_TAIL_CHARS, crate::limits::WEB_TAIL_LINES),
            &mut out,
        ),
    }
    out
}

/// The output of a session between two cursors, on a page of its own.
pub fn output_page(base: &str, session: &Session, from: u64, to: u64) -> String {
    let held_from = session.snapshot().base_cursor;
    let entries = session.output_range(from, to);
    let shown = if to == u64::MAX {
        format!("from char {from}")
    } else {
        format!("chars {from}–{to}")
    };
    let mut live = format!(
        "<h1>{command} <span class=\"id\">{id}</span></h1><p class=\"facts\">Output {shown}. \
         <a href=\"sessions/{id}\">Back to the session</a></p>",
        command = escape(&session.command_id),
        id = escape(&session.id),
    );
    if from < held_from {
        let _ = write!(
            live,
            "<p class=\"note\">The output before char {held_from} was evicted from the buffer; \
             what is still held is shown.</p>"
        );
    }
    tail_html(&entries, &mut live);
    page(
        base,
        &format!("mcp-terminal: {} output", session.id),
        None,
        &live,
    )
}

/// A screen in a box of class `class`; `cursor`: show the cursor (not once it ended).
fn screen_html(screen: &StyledScreen, class: &str, cursor: bool, out: &mut String) {
    if !screen.title.is_empty() {
        let _ = write!(out, "<p class=\"title\">{}</p>", escape(&screen.title));
    }
    let _ = write!(out, "<pre class=\"{class}\" data-cols=\"{}\">", screen.cols);
    for (i, row) in screen.rows.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        for span in row {
            if cursor || !span.style.cursor {
                span_html(span, out);
            } else {
                let style = Style {
                    cursor: false,
                    ..span.style
                };
                span_html(
                    &Span {
                        text: span.text.clone(),
                        style,
                    },
                    out,
                );
            }
        }
        // The box is as wide as the terminal: pad the trimmed row to its columns.
        let used: usize = row.iter().map(|s| cells(&s.text)).sum();
        let cols = usize::from(screen.cols);
        out.extend(std::iter::repeat_n(' ', cols.saturating_sub(used)));
    }
    out.push_str("</pre>");
}

fn span_html(span: &Span, out: &mut String) {
    let classes = classes(&span.style);
    if classes.is_empty() {
        cells_html(&span.text, out);
    } else {
        let _ = write!(out, "<span class=\"{}\">", classes.join(" "));
        cells_html(&span.text, out);
        out.push_str("</span>");
    }
}

/// Screen text as a grid of cells whatever the font: ASCII is as wide as the monospace
/// font's cell, and every other character (with the combining marks after it) gets a
/// box of exactly one or two cells (`w1`, `w2`), as wide as the emulator counts it.
fn cells_html(text: &str, out: &mut String) {
    use unicode_width::UnicodeWidthChar;
    let mut chars = text.chars().peekable();
    let mut buffer = [0u8; 4];
    while let Some(c) = chars.next() {
        // A mark that combines with what comes before it takes no cell of its own.
        if c.is_ascii() || c.width() == Some(0) {
            out.push_str(&escape(c.encode_utf8(&mut buffer)));
            continue;
        }
        let mut cluster = String::from(c);
        while let Some(&mark) = chars
            .peek()
            .filter(|m| !m.is_ascii() && m.width() == Some(0))
        {
            cluster.push(mark);
            chars.next();
        }
        let width = c.width().unwrap_or(1).clamp(1, 2);
        let _ = write!(out, "<span class=\"w{width}\">{}</span>", escape(&cluster));
    }
}

/// How many cells `text` takes on the screen.
fn cells(text: &str) -> usize {
    use unicode_width::UnicodeWidthChar;
    text.chars().map(|c| c.width().unwrap_or(0)).sum()
}

/// CSS classes of a style: `fN`/`bN` palette colours, `fd`/`bd` the page's default colours
/// swapped in by inverse video, and one class per attribute.
fn classes(style: &Style) -> Vec<String> {
    let (fg, bg) = if style.inverse {
        (
            match style.bg {
                Colour::Default => Some("fbd".to_owned()),
                Colour::Indexed(i) => Some(format!("f{i}")),
            },
            match style.fg {
                Colour::Default => Some("bfd".to_owned()),
                Colour::Indexed(i) => Some(format!("b{i}")),
            },
        )
    } else {
        (
            match style.fg {
                Colour::Default => None,
                Colour::Indexed(i) => Some(format!("f{i}")),
            },
            match style.bg {
                Colour::Default => None,
                Colour::Indexed(i) => Some(format!("b{i}")),
            },
        )
    };
    let flags = [
        (style.bold, "bold"),
        (style.dim, "dim"),
        (style.italic, "italic"),
        (style.underline, "underline"),
        (style.cursor, "cursor"),
    ];
    fg.into_iter()
        .chain(bg)
        .chain(
            flags
                .iter()
                .filter(|(on, _)| *on)
                .map(|(_, c)| (*c).to_owned()),
        )
        .collect()
}

/// Output text with its line ends as a page shows them: a terminal's `\r\n` is one line
/// end, and a carriage return alone (a progress line drawn again) starts a line of its own,
/// where a terminal would draw over the last one.
fn line_breaks(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\r') {
        text.replace("\r\n", "\n").replace('\r', "\n").into()
    } else {
        text.into()
    }
}

fn tail_html(entries: &[Entry], out: &mut String) {
    out.push_str("<pre class=\"tail\">");
    // A `\r\n` split between two reads is still one line end.
    let mut after_cr = false;
    for entry in entries {
        let text = match entry.text.strip_prefix('\n') {
            Some(rest) if after_cr => rest,
            _ => &entry.text,
        };
        after_cr = entry.text.ends_with('\r');
        let class = match entry.stream {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        };
        let _ = write!(
            out,
            "<span class=\"{class}\">{}</span>",
            escape(&line_breaks(text))
        );
    }
    out.push_str("</pre>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_stays_text() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(escape("a\u{1b}[31m\u{7}b\n"), "a\u{FFFD}[31m\u{FFFD}b\n");
    }

    #[test]
    fn carriage_returns_end_lines_in_output() {
        assert_eq!(line_breaks("a\r\nb\rc\n"), "a\nb\nc\n");
        let mut out = String::new();
        tail_html(
            &[Entry {
                cursor: 0,
                stream: Stream::Stdout,
                text: "one\r\n10%\r50%\r".into(),
            }],
            &mut out,
        );
        assert!(
            out.contains("one\n10%\n50%\n") && !out.contains('\u{FFFD}'),
            "{out}"
        );
        let mut split = String::new();
        let piece = |text: &str| Entry {
            cursor: 0,
            stream: Stream::Stdout,
            text: text.into(),
        };
        tail_html(&[piece("a\r"), piece("\nb")], &mut split);
        assert!(
            split.contains("a\n</span><span class=\"stdout\">b"),
            "{split}"
        );
    }

    #[test]
    fn styles_become_classes_and_inverse_swaps_colours() {
        let style = Style {
            fg: Colour::Indexed(1),
            bold: true,
            cursor: true,
            ..Style::default()
        };
        assert_eq!(classes(&style), ["f1", "bold", "cursor"]);
        let inverse = Style {
            fg: Colour::Indexed(2),
            inverse: true,
            ..Style::default()
        };
        assert_eq!(classes(&inverse), ["fbd", "b2"]);
        let mut out = String::new();
        span_html(
            &Span {
                text: "<b>".into(),
                style: Style::default(),
            },
            &mut out,
        );
        assert_eq!(out, "&lt;b&gt;");
    }

    #[test]
    fn wide_and_combined_characters_get_cells_of_their_width() {
        let mut out = String::new();
        cells_html("a漢e\u{301}ö\u{301}<", &mut out);
        assert_eq!(
            out,
            "a<span class=\"w2\">漢</span>e\u{301}<span class=\"w1\">ö\u{301}</span>&lt;"
        );
        assert_eq!(cells("a漢😀é"), 6);
    }

    #[test]
    fn pipe_output_keeps_its_streams_apart() {
        let mut out = String::new();
        let entries = [
            Entry {
                cursor: 0,
                stream: Stream::Stdout,
                text: "out\n".into(),
            },
            Entry {
                cursor: 4,
                stream: Stream::Stderr,
                text: "<err>".into(),
            },
        ];
        tail_html(&entries, &mut out);
        assert_eq!(
            out,
            "<pre class=\"tail\"><span class=\"stdout\">out\n</span>\
             <span class=\"stderr\">&lt;err&gt;</span></pre>"
        );
    }
}
