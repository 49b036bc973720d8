//! A recording replayed through the server's own terminal emulator: the asciicast v2 file
//! read once for its size and length, and a replay that reads its events as it feeds them to
//! an emulator (the one PTY sessions use) up to a point in time, so the player's frames are
//! rendered exactly as a live session's screen is.
//!
//! The events stay in the file's text until they are fed: a recording of millions of tiny
//! events held as parsed events took six times the file's size (a 64 MiB file, 420 MB), where
//! its text is held once.

use std::borrow::Cow;

use serde::Deserialize;

use crate::output::{Screen, StyledScreen};

/// The largest terminal a recording may say it had (rows × columns, for either screen).
const MAX_CELLS: usize = 1_000_000;

#[derive(Debug, Clone, PartialEq)]
enum Kind<'a> {
    Output(Cow<'a, str>),
    Resize { rows: u16, cols: u16 },
}

#[derive(Debug, Clone, PartialEq)]
struct Event<'a> {
    at: f64,
    kind: Kind<'a>,
}

/// An event line as asciicast v2 writes it: `[time, code, data]`, anything after the data
/// ignored.
struct Line<'a>(f64, Cow<'a, str>, Cow<'a, str>);

/// A string of an event line, borrowed from it unless it holds an escape.
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

impl<'de> Deserialize<'de> for Line<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = Line<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an event: [time, code, data]")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Line<'de>, A::Error> {
                let missing = |n| serde::de::Error::invalid_length(n, &"three fields");
                let at = seq.next_element::<f64>()?.ok_or_else(|| missing(0))?;
                let Text(code) = seq.next_element()?.ok_or_else(|| missing(1))?;
                let Text(data) = seq.next_element()?.ok_or_else(|| missing(2))?;
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Line(at, code, data))
            }
        }
        deserializer.deserialize_seq(Fields)
    }
}

/// The event of one line of a recording, if it is one the player shows (output, resize).
fn event(line: &str) -> Option<Event<'_>> {
    let Line(at, code, data) = serde_json::from_str(line).ok()?;
    let kind = match &*code {
        "o" => Kind::Output(data),
        "r" => match resize(&data) {
            Some((rows, cols)) if rows > 0 && cols > 0 => Kind::Resize { rows, cols },
            _ => return None,
        },
        _ => return None,
    };
    Some(Event {
        at: at.max(0.0),
        kind,
    })
}

/// The events of `text` from byte `from` on, each with where its line begins.
fn events(text: &str, from: usize) -> impl Iterator<Item = (Event<'_>, usize)> {
    let mut end = from;
    text[from..].split_inclusive('\n').filter_map(move |line| {
        let begins = end;
        end += line.len();
        Some((event(line)?, begins))
    })
}

/// A parsed recording.
#[derive(Debug)]
pub struct Cast {
    rows: u16,
    cols: u16,
    /// Recorded from pipes (`TERM` "dumb"): lines end with `\n` alone.
    lines: bool,
    /// The file's text, its events read from `first` on as they are replayed.
    text: String,
    first: usize,
    /// The largest size the terminal had, so one emulator budget holds every resize.
    most: (u16, u16),
    /// Seconds from the start to the latest event.
    duration: f64,
}

fn size(value: &serde_json::Value, what: &str) -> Result<u16, String> {
    value
        .as_u64()
        .and_then(|n| u16::try_from(n).ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("the header's {what} is not a terminal size"))
}

/// `COLSxROWS` of a resize event.
fn resize(data: &str) -> Option<(u16, u16)> {
    let (cols, rows) = data.split_once('x')?;
    Some((rows.parse().ok()?, cols.parse().ok()?))
}

impl Cast {
    /// Parse an asciicast v2 file: its header now (an unreadable one is an error), its
    /// events when they are replayed (events the player does not show, input and markers,
    /// and lines it cannot read are skipped). Invalid UTF-8 is read as U+FFFD.
    pub fn parse(bytes: Vec<u8>) -> Result<Cast, String> {
        let text = String::from_utf8(bytes)
            .unwrap_or_else(|bad| String::from_utf8_lossy(bad.as_bytes()).into_owned());
        let first = text.find('\n').map_or(text.len(), |end| end + 1);
        let header: serde_json::Value = serde_json::from_str(&text[..first])
            .map_err(|_| "the recording has no asciicast header")?;
        if header["version"] != 2 {
            return Err("the recording is not asciicast version 2".into());
        }
        let (rows, cols) = (
            size(&header["height"], "height")?,
            size(&header["width"], "width")?,
        );
        let (mut most, mut duration) = ((rows, cols), 0.0_f64);
        for (event, _) in events(&text, first) {
            // Events are played in the file's order: the last is played once the latest
            // time has come, wherever it stands.
            duration = duration.max(event.at);
            if let Kind::Resize { rows, cols } = event.kind {
                most = (most.0.max(rows), most.1.max(cols));
            }
        }
        if usize::from(most.0) * usize::from(most.1) > MAX_CELLS {
            return Err(format!(
                "the recording's terminal ({} rows × {} columns) is larger than the player \
                 shows",
                most.0, most.1
            ));
        }
        Ok(Cast {
            rows,
            cols,
            lines: header["env"]["TERM"] == "dumb",
            first,
            most,
            duration,
            text,
        })
    }
}

/// A recording being replayed: an emulator fed its events in order.
pub struct Replay {
    cast: Cast,
    screen: Screen,
    /// The next event: when it happens and where its line begins (None after the last).
    next: Option<(f64, usize)>,
}

impl Replay {
    pub fn new(cast: Cast) -> Replay {
        let (rows, cols) = cast.most;
        // Both screens at the largest size, no scrollback: the player shows the screen.
        let budget = 2 * usize::from(rows) * usize::from(cols);
        let screen = Screen::new(cast.rows, cast.cols, budget);
        let next = events(&cast.text, cast.first)
            .next()
            .map(|(event, begins)| (event.at, begins));
        Replay { cast, screen, next }
    }

    pub fn duration(&self) -> f64 {
        self.cast.duration
    }

    /// When the next event happens, if any is left.
    pub fn next_at(&self) -> Option<f64> {
        self.next.map(|(at, _)| at)
    }

    /// Feed every event up to `at` (seconds from the start), each line read once: the
    /// first one after `at` is the next.
    pub fn advance_to(&mut self, at: f64) {
        let Some((_, from)) = self.next.filter(|(next, _)| *next <= at) else {
            return;
        };
        self.next = None;
        for (event, begins) in events(&self.cast.text, from) {
            if event.at > at {
                self.next = Some((event.at, begins));
                break;
            }
            match event.kind {
                Kind::Output(output) if self.cast.lines => {
                    self.screen.feed(output.replace('\n', "\r\n").as_bytes());
                }
                Kind::Output(output) => {
                    self.screen.feed(output.as_bytes());
                }
                Kind::Resize { rows, cols } => self.screen.resize(rows, cols),
            }
        }
    }

    pub fn frame(&mut self) -> StyledScreen {
        self.screen.styled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(screen: &StyledScreen) -> Vec<String> {
        screen
            .rows
            .iter()
            .map(|row| row.iter().map(|s| s.text.as_str()).collect::<String>())
            .collect()
    }

    const CAST: &str = "{\"version\":2,\"width\":20,\"height\":4,\"env\":{\"TERM\":\"xterm-256color\"}}\n\
        [0.5,\"o\",\"one\\r\\n\"]\n\
        [0.7,\"i\",\"typed\"]\n\
        not json\n\
        [1.5,\"r\",\"30x5\"]\n\
        [2.0,\"o\",\"\\u001b[31mtwo\"]\n\
        [2.1,\"m\",\"exit 0\"]\n";

    #[test]
    fn replays_output_and_resizes_up_to_a_time() {
        let cast = Cast::parse(CAST.into()).unwrap();
        assert!((cast.duration - 2.0).abs() < 1e-9);
        let mut replay = Replay::new(cast);
        replay.advance_to(0.4);
        assert!(text(&replay.frame())[0].trim().is_empty());
        assert_eq!(replay.next_at(), Some(0.5));
        replay.advance_to(1.0);
        assert_eq!(text(&replay.frame())[0].trim_end(), "one");
        replay.advance_to(2.0);
        let frame = replay.frame();
        assert_eq!(frame.cols, 30);
        assert_eq!(frame.rows.len(), 5);
        assert!(text(&frame)[1].starts_with("two"));
        assert_eq!(replay.next_at(), None);
    }

    #[test]
    fn pipe_recordings_are_lines_and_bad_headers_are_refused() {
        let pipe = "{\"version\":2,\"width\":10,\"height\":3,\"env\":{\"TERM\":\"dumb\"}}\n\
            [0.1,\"o\",\"ab\\ncd\\n\"]\n";
        let mut replay = Replay::new(Cast::parse(pipe.into()).unwrap());
        replay.advance_to(1.0);
        assert_eq!(text(&replay.frame())[..2], ["ab", "cd"]);
        assert!(Cast::parse(Vec::new()).is_err());
        assert!(Cast::parse("{\"version\":1,\"width\":1,\"height\":1}".into()).is_err());
        assert!(Cast::parse("{\"version\":2,\"width\":0,\"height\":1}".into()).is_err());
        let huge = "{\"version\":2,\"width\":10,\"height\":3}\n[0.1,\"r\",\"60000x60000\"]\n";
        assert!(Cast::parse(huge.into()).unwrap_err().contains("larger"));
    }

    #[test]
    fn events_are_read_in_file_order_from_any_text() {
        // Invalid UTF-8, a header alone without its newline, a line without one at the end,
        // times out of order and far away.
        let mut bytes = b"{\"version\":2,\"width\":10,\"height\":3}\n[1,\"o\",\"a\"]\n".to_vec();
        bytes.extend_from_slice(b"\xff\n[0.5,\"o\",\"b\"]\n[1e20,\"o\",\"c\"]");
        let cast = Cast::parse(bytes).unwrap();
        assert_eq!(cast.duration, 1e20);
        let mut replay = Replay::new(cast);
        assert_eq!(replay.next_at(), Some(1.0));
        replay.advance_to(1.0);
        assert_eq!(text(&replay.frame())[0].trim_end(), "ab");
        assert_eq!(replay.next_at(), Some(1e20));
        replay.advance_to(f64::MAX);
        assert_eq!(text(&replay.frame())[0].trim_end(), "abc");
        assert_eq!(replay.next_at(), None);
        // The latest first: the end is its time, where every event has been played.
        let backwards = b"{\"version\":2,\"width\":10,\"height\":3}\n[0.5,\"o\",\"A\",\"more\"]\n[0.2,\"o\",\"B\"]\n";
        let cast = Cast::parse(backwards.to_vec()).unwrap();
        assert_eq!(cast.duration, 0.5);
        let mut replay = Replay::new(cast);
        replay.advance_to(replay.duration());
        assert_eq!(text(&replay.frame())[0].trim_end(), "AB");
        assert_eq!(replay.next_at(), None);
        let header_only = Cast::parse(b"{\"version\":2,\"width\":10,\"height\":3}".to_vec());
        assert_eq!(Replay::new(header_only.unwrap()).next_at(), None);
    }
}
