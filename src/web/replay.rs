//! A recording replayed through the server's own terminal emulator: the asciicast v2 file
//! parsed into its events, and a replay that feeds them to an emulator (the one PTY
//! sessions use) up to a point in time, so the player's frames are rendered exactly as a
//! live session's screen is.

use crate::output::{Screen, StyledScreen};

/// The largest terminal a recording may say it had (rows × columns, for either screen).
const MAX_CELLS: usize = 1_000_000;

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Output(String),
    Resize { rows: u16, cols: u16 },
}

#[derive(Debug, Clone, PartialEq)]
struct Event {
    at: f64,
    kind: Kind,
}

/// A parsed recording.
#[derive(Debug)]
pub struct Cast {
    rows: u16,
    cols: u16,
    /// Recorded from pipes (`TERM` "dumb"): lines end with `\n` alone.
    lines: bool,
    events: Vec<Event>,
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
    /// Parse an asciicast v2 text; events the player does not show (input, markers) and
    /// lines it cannot read are skipped, an unreadable header is an error.
    pub fn parse(text: &str) -> Result<Cast, String> {
        let mut lines = text.lines();
        let header: serde_json::Value = lines
            .next()
            .and_then(|l| serde_json::from_str(l).ok())
            .ok_or("the recording has no asciicast header")?;
        if header["version"] != 2 {
            return Err("the recording is not asciicast version 2".into());
        }
        let (rows, cols) = (
            size(&header["height"], "height")?,
            size(&header["width"], "width")?,
        );
        let mut events = Vec::new();
        for line in lines {
            let Ok(serde_json::Value::Array(fields)) = serde_json::from_str(line) else {
                continue;
            };
            let (Some(at), Some(kind), Some(data)) = (
                fields.first().and_then(serde_json::Value::as_f64),
                fields.get(1).and_then(serde_json::Value::as_str),
                fields.get(2).and_then(serde_json::Value::as_str),
            ) else {
                continue;
            };
            let kind = match kind {
                "o" => Kind::Output(data.to_owned()),
                "r" => match resize(data) {
                    Some((rows, cols)) if rows > 0 && cols > 0 => Kind::Resize { rows, cols },
                    _ => continue,
                },
                _ => continue,
            };
            events.push(Event {
                at: at.max(0.0),
                kind,
            });
        }
        let cast = Cast {
            rows,
            cols,
            lines: header["env"]["TERM"] == "dumb",
            events,
        };
        let (most_rows, most_cols) = cast.most();
        if usize::from(most_rows) * usize::from(most_cols) > MAX_CELLS {
            return Err(format!(
                "the recording's terminal ({most_rows} rows × {most_cols} columns) is larger \
                 than the player shows"
            ));
        }
        Ok(cast)
    }

    /// Seconds from the start to the last event.
    pub fn duration(&self) -> f64 {
        self.events.last().map_or(0.0, |e| e.at)
    }

    /// The largest size the terminal had, so one emulator budget holds every resize.
    fn most(&self) -> (u16, u16) {
        self.events
            .iter()
            .fold((self.rows, self.cols), |(r, c), e| match e.kind {
                Kind::Resize { rows, cols } => (r.max(rows), c.max(cols)),
                Kind::Output(_) => (r, c),
            })
    }
}

/// A recording being replayed: an emulator fed its events in order.
pub struct Replay {
    cast: Cast,
    screen: Screen,
    next: usize,
}

impl Replay {
    pub fn new(cast: Cast) -> Replay {
        let (rows, cols) = cast.most();
        // Both screens at the largest size, no scrollback: the player shows the screen.
        let budget = 2 * usize::from(rows) * usize::from(cols);
        let screen = Screen::new(cast.rows, cast.cols, budget);
        Replay {
            cast,
            screen,
            next: 0,
        }
    }

    pub fn duration(&self) -> f64 {
        self.cast.duration()
    }

    /// When the next event happens, if any is left.
    pub fn next_at(&self) -> Option<f64> {
        self.cast.events.get(self.next).map(|e| e.at)
    }

    /// Feed every event up to `at` (seconds from the start).
    pub fn advance_to(&mut self, at: f64) {
        while let Some(event) = self.cast.events.get(self.next).filter(|e| e.at <= at) {
            match &event.kind {
                Kind::Output(text) if self.cast.lines => {
                    self.screen.feed(text.replace('\n', "\r\n").as_bytes());
                }
                Kind::Output(text) => {
                    self.screen.feed(text.as_bytes());
                }
                Kind::Resize { rows, cols } => self.screen.resize(*rows, *cols),
            }
            self.next += 1;
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
        let cast = Cast::parse(CAST).unwrap();
        assert_eq!(cast.events.len(), 3);
        assert!((cast.duration() - 2.0).abs() < 1e-9);
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
        let mut replay = Replay::new(Cast::parse(pipe).unwrap());
        replay.advance_to(1.0);
        assert_eq!(text(&replay.frame())[..2], ["ab", "cd"]);
        assert!(Cast::parse("").is_err());
        assert!(Cast::parse("{\"version\":1,\"width\":1,\"height\":1}").is_err());
        assert!(Cast::parse("{\"version\":2,\"width\":0,\"height\":1}").is_err());
        let huge = "{\"version\":2,\"width\":10,\"height\":3}\n[0.1,\"r\",\"60000x60000\"]\n";
        assert!(Cast::parse(huge).unwrap_err().contains("larger"));
    }
}
