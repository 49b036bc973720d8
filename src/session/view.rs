//! What the live view reads of a session: the same state the tools read, looked at without
//! touching it. Nothing here names the session (its idle time runs on) or acknowledges a
//! cursor (a paused session stays paused). The owner's own actions (`owner_send`,
//! `owner_terminate`, only with `--web-control`) are the one way the view changes a session,
//! and each leaves its mark where the agent sees it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::pages::Evicted;
use super::{Command, Origin, Reason, Session, Sessions, Snapshot, lock_screen};
use crate::errors::ToolError;
use crate::limits::GRACE_DEFAULT_MS;
use crate::output::{Entry, StyledScreen, before_char, strip_entries};

/// How a final session ended, beyond its snapshot.
pub struct Ending {
    pub at: SystemTime,
    /// Why the controller ended it, in words, when it said.
    pub why: Option<String>,
}

impl Sessions {
    /// A retained session, looked up without naming it (its idle time runs on).
    pub fn find(&self, session_id: &str) -> Option<Arc<Session>> {
        self.retained().into_iter().find(|s| s.id == session_id)
    }
}

impl Session {
    /// Fires on every change of the session (output, status); ends when the session is gone.
    pub fn changes(&self) -> watch::Receiver<()> {
        self.changed.subscribe()
    }

    /// How the session was started.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The commands `terminal_exec` ran in a shell session, oldest first.
    pub fn history(&self) -> Vec<Command> {
        self.inspect(|s| {
            s.shell()
                .map(|t| t.history().cloned().collect())
                .unwrap_or_default()
        })
    }

    /// When and why the session ended; `None` while it runs.
    pub fn ending_facts(&self) -> Option<Ending> {
        self.inspect(|s| {
            Some(Ending {
                at: s.ended_at()?,
                why: s.why().map(str::to_owned),
            })
        })
    }

    /// When the session started.
    pub fn started_at(&self) -> SystemTime {
        self.created_at
    }

    /// The output between two cursors (what is still held), without escape sequences.
    pub fn output_range(&self, from: u64, to: u64) -> Vec<Entry> {
        let mut entries: Vec<Entry> = Vec::new();
        for page in self.pages(from, Evicted::Skip).map_while(Result::ok) {
            let past = page.entries.last().is_some_and(|e| e.cursor >= to);
            for mut entry in page.entries.into_iter().filter(|e| e.cursor < to) {
                // An entry that runs past `to` is cut there (cursors count characters).
                let kept = before_char(&entry.text, to - entry.cursor).len();
                entry.text.truncate(kept);
                entries.push(entry);
            }
            if past {
                break;
            }
        }
        strip_entries(&mut entries);
        entries
    }

    /// The owner typed `bytes` from the live view: marked in the snapshot
    /// (`owner_input_at`) before they are written, so anything they cause comes after it.
    pub async fn owner_send(&self, bytes: &[u8]) -> Result<(), ToolError> {
        self.check_writable()?;
        self.update(|s| s.owner_wrote());
        let never = tokio_util::sync::CancellationToken::new();
        self.send(bytes, false, &never).await.map(|_| ())
    }

    /// The owner ended the session from the live view.
    pub async fn owner_terminate(&self) -> Snapshot {
        let why = "the machine's owner ended it from the live view".to_owned();
        self.end(Reason::User, Some(why), GRACE_DEFAULT_MS).await
    }

    /// How long ago the session started.
    pub fn age(&self) -> Duration {
        self.created_at.elapsed().unwrap_or_default()
    }

    /// A PTY session's screen with colours and cursor; `None` on pipes.
    pub fn styled_screen(&self) -> Option<StyledScreen> {
        let screen = self.screen.as_ref()?;
        Some(lock_screen(screen).styled())
    }

    /// A PTY session's last full screen: the alternate screen as the program left it
    /// (leaving wipes it), while the main screen is shown; `None` otherwise.
    pub fn last_full_screen(&self) -> Option<StyledScreen> {
        let screen = self.screen.as_ref()?;
        let mut screen = lock_screen(screen);
        if screen.on_alternate_screen() {
            return None;
        }
        screen.last_full_screen().cloned()
    }

    /// The newest output (at most `chars` characters of it, then its last `lines` lines),
    /// without escape sequences, each stream's runs told apart. The buffer holds output after
    /// redaction, so no secret is here.
    pub fn output_tail(&self, chars: u64, lines: usize) -> Vec<Entry> {
        let start = self.inspect(|s| s.output().end().saturating_sub(chars));
        let mut entries: Vec<Entry> = self
            .pages(start, Evicted::Skip)
            .map_while(Result::ok)
            .flat_map(|page| page.entries)
            .collect();
        strip_entries(&mut entries);
        keep_last_lines(&mut entries, lines);
        entries
    }
}

/// Cut the front of `entries` so at most `lines` lines are left (a final `\n` ends the
/// last line rather than starting another).
fn keep_last_lines(entries: &mut Vec<Entry>, lines: usize) {
    let mut seen = 0;
    for i in (0..entries.len()).rev() {
        let text = &entries[i].text;
        let is_last = i + 1 == entries.len();
        for (at, _) in text.rmatch_indices('\n') {
            if is_last && at + 1 == text.len() {
                continue;
            }
            seen += 1;
            if seen == lines {
                entries[i].text.drain(..=at);
                entries.drain(..i);
                entries.retain(|e| !e.text.is_empty());
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Stream;

    fn entry(stream: Stream, text: &str) -> Entry {
        Entry {
            cursor: 0,
            stream,
            text: text.into(),
        }
    }

    #[test]
    fn keeps_the_last_lines_across_streams() {
        let mut e = vec![
            entry(Stream::Stdout, "a\nb\n"),
            entry(Stream::Stderr, "c\n"),
            entry(Stream::Stdout, "d\n"),
        ];
        keep_last_lines(&mut e, 2);
        assert_eq!(
            e,
            [entry(Stream::Stderr, "c\n"), entry(Stream::Stdout, "d\n")]
        );
        let mut e = vec![entry(Stream::Stdout, "a\nb\nc")];
        keep_last_lines(&mut e, 2);
        assert_eq!(e, [entry(Stream::Stdout, "b\nc")]);
        let mut e = vec![entry(Stream::Stdout, "one line")];
        keep_last_lines(&mut e, 2);
        assert_eq!(e, [entry(Stream::Stdout, "one line")]);
    }
}
