//! A session's asciicast v2 recording (SPEC §13): a header line, then one JSON array per
//! event — `[seconds, "o", text]` output (already redacted), `"i"` input, `"r"` a resize,
//! `"m"` a marker (a secret's name in place of its value, the end of the session).
//!
//! Input is redacted here, as output is before it is stored: a value typed as text (by the
//! owner from the live view, or in a command line) is recorded as `[secret:NAME]`, also when
//! it arrives in pieces. Input is held until Enter (or the end), whatever it holds, and
//! recorded a line at a time.
//!
//! Events are buffered; the session's sink thread (`sink.rs`), which writes them, flushes at
//! most `RECORDING_FLUSH_EVERY` after the first unflushed one and at the end, so a killed
//! server leaves a valid file up to its last flush. A file is capped at
//! `RECORDING_MAX_BYTES`: a `recording truncated` marker ends it and the session goes on
//! unrecorded. A write failure (a full disk) is reported once on stderr and stops only the
//! recording, whose file is cut back to its last whole line written (a file whose header
//! could not be written is removed).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::limits::RECORDING_MAX_BYTES;
use crate::output::Redactor;

/// What the header says of the session.
pub struct Header<'a> {
    pub command_id: &'a str,
    pub session_id: &'a str,
    pub argv: &'a [String],
    pub created_at: SystemTime,
    pub cols: u16,
    pub rows: u16,
    pub term: &'a str,
}

pub struct Recording {
    name: String,
    path: PathBuf,
    started: Instant,
    file: Mutex<Writer>,
    /// The secrets to keep out of the input events, with the input line held back.
    typed: Mutex<Option<Redactor>>,
}

struct Writer {
    /// `None` once the recording ended, was truncated or failed.
    out: Option<BufWriter<File>>,
    bytes: u64,
    /// Bytes in the file at the last flush that succeeded: whole lines.
    flushed: u64,
    dirty: bool,
}

/// The marker that ends a file at its cap; room for it is kept.
const TRUNCATED: &str = "recording truncated";
const MARKER_RESERVE: u64 = 64;

/// Where the last whole line of `file` ends (after its newline), looking back from its end
/// no further than `known`, a length that ends a line.
fn last_line_end(file: &File, known: u64) -> u64 {
    use std::os::unix::fs::FileExt;
    let Ok(len) = file.metadata().map(|m| m.len()) else {
        return known;
    };
    let mut end = len;
    let mut chunk = vec![0u8; 64 * 1024];
    while end > known {
        let from = end.saturating_sub(chunk.len() as u64).max(known);
        let part = &mut chunk[..(end - from) as usize];
        if file.read_exact_at(part, from).is_err() {
            return known;
        }
        if let Some(at) = memchr::memrchr(b'\n', part) {
            return from + at as u64 + 1;
        }
        end = from;
    }
    known
}

/// `20261201T100708Z` from a time.
fn compact_utc(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t)
        .to_string()
        .replace(['-', ':'], "")
}

impl Recording {
    /// Create the file (mode 0600) in `dir` and write the header; `None` (reported on
    /// stderr) when that fails, and the session runs unrecorded.
    pub fn create(dir: &Path, header: &Header) -> Option<Arc<Recording>> {
        let name = format!(
            "{}-{}-{}.cast",
            compact_utc(header.created_at),
            header.command_id,
            header.session_id
        );
        let path = dir.join(&name);
        let timestamp = header
            .created_at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let line = json!({
            "version": 2,
            "width": header.cols,
            "height": header.rows,
            "timestamp": timestamp,
            "command": header.argv.join(" "),
            "title": header.command_id,
            "env": {"TERM": header.term},
        })
        .to_string();
        // A new file only (O_EXCL never follows a symlink, and O_NOFOLLOW says so), mode
        // 0600 from its creation.
        // Read too: after a failed write, the end of its last whole line is found.
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o600)
            .open(&path)
            .and_then(|file| {
                let mut out = BufWriter::new(file);
                let written = writeln!(out, "{line}").and_then(|()| out.flush());
                if let Err(e) = written {
                    // No file without its header (a full disk): none at all.
                    drop(out.into_parts());
                    let _ = std::fs::remove_file(&path);
                    return Err(e);
                }
                Ok(out)
            });
        let out = match opened {
            Ok(out) => out,
            Err(e) => {
                tracing::warn!(file = %path.display(), "cannot create the recording ({e}); the session runs unrecorded");
                return None;
            }
        };
        Some(Recording::writing(name, path, out, line.len() as u64 + 1))
    }

    /// A recording that goes on writing to `out` (`bytes` already written).
    fn writing(name: String, path: PathBuf, out: BufWriter<File>, bytes: u64) -> Arc<Recording> {
        Arc::new(Recording {
            name,
            path,
            started: Instant::now(),
            file: Mutex::new(Writer {
                out: Some(out),
                bytes,
                flushed: bytes,
                dirty: false,
            }),
            typed: Mutex::new(None),
        })
    }

    /// Keep these `(name, value)` secrets out of the input it records.
    pub fn redact_input(&self, secrets: &[(String, String)]) {
        *self.typed.lock().unwrap_or_else(|e| e.into_inner()) = Redactor::for_input(secrets);
    }

    /// The file name (in `recordings_dir`).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn output(&self, text: &str) {
        self.event("o", text);
    }

    pub fn input(&self, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let mut typed = self.typed.lock().unwrap_or_else(|e| e.into_inner());
        match typed.as_mut() {
            Some(redactor) => {
                let mut lines = String::new();
                redactor.push(&text, &mut lines);
                drop(typed);
                if !lines.is_empty() {
                    self.event("i", &lines);
                }
            }
            None => {
                drop(typed);
                self.event("i", &text);
            }
        }
    }

    /// A secret was typed: its name stands in for the value.
    pub fn secret(&self, name: &str) {
        self.release_input();
        self.event("m", &format!("secret {name}"));
    }

    pub fn resize(&self, rows: u16, cols: u16) {
        self.release_input();
        self.event("r", &format!("{cols}x{rows}"));
    }

    /// The closing marker (`exit 0`, `signal SIGKILL`); nothing is recorded after it.
    pub fn close(&self, marker: &str) {
        self.release_input();
        self.event("m", marker);
        let mut w = self.lock();
        if let Some(out) = w.out.take() {
            self.finish(out, w.flushed);
        }
    }

    /// Record the input held back for its Enter (what came before a secret, a resize or
    /// the end), with the whole values in it replaced.
    fn release_input(&self) {
        let mut held = String::new();
        if let Some(redactor) = self
            .typed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            redactor.flush(&mut held);
        }
        if !held.is_empty() {
            self.event("i", &held);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.file.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn event(&self, kind: &str, data: &str) {
        let seconds = self.started.elapsed().as_micros() as f64 / 1e6;
        let line = json!([seconds, kind, data]).to_string();
        let mut guard = self.lock();
        let w = &mut *guard;
        if w.out.is_none() {
            return;
        }
        if w.bytes + line.len() as u64 + 1 + MARKER_RESERVE > RECORDING_MAX_BYTES {
            let marker = json!([seconds, "m", TRUNCATED]).to_string();
            let mut out = w.out.take().expect("checked above");
            if writeln!(out, "{marker}").is_ok() {
                self.finish(out, w.flushed);
            } else {
                self.failed(out, w.flushed);
            }
            tracing::warn!(file = %self.path.display(), "recording reached {RECORDING_MAX_BYTES} bytes; the session goes on unrecorded");
            return;
        }
        let written = w
            .out
            .as_mut()
            .is_some_and(|out| writeln!(out, "{line}").is_ok());
        if !written {
            if let Some(out) = w.out.take() {
                self.failed(out, w.flushed);
            }
            return;
        }
        w.bytes += line.len() as u64 + 1;
        w.dirty = true;
    }

    /// Events were written since the last flush.
    pub fn dirty(&self) -> bool {
        self.lock().dirty
    }

    pub fn flush(&self) {
        let mut w = self.lock();
        w.dirty = false;
        let flushed = w.out.as_mut().map(BufWriter::flush);
        match flushed {
            Some(Ok(())) => w.flushed = w.bytes,
            Some(Err(_)) => {
                if let Some(out) = w.out.take() {
                    self.failed(out, w.flushed);
                }
            }
            None => {}
        }
    }

    /// Write out what is buffered and close the file.
    fn finish(&self, out: BufWriter<File>, flushed: u64) {
        if let Err(e) = out.into_inner() {
            self.failed(e.into_inner(), flushed);
        }
    }

    /// A write failed (a full disk): the file is cut back to the end of its last whole
    /// line (at least what the last flush wrote), so it stays a valid recording up to
    /// there, and nothing more is written.
    fn failed(&self, out: BufWriter<File>, flushed: u64) {
        let (file, _unwritten) = out.into_parts();
        let _ = file.set_len(last_line_end(&file, flushed));
        tracing::warn!(file = %self.path.display(), "writing the recording failed; it stops here and the session goes on");
    }

    #[cfg(test)]
    fn closed(&self) -> bool {
        self.lock().out.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_failed_write_is_cut_back_to_the_last_whole_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.cast");
        std::fs::write(&path, "{\"version\":2}\n[0.1,\"o\",\"a\"]\n[0.2,\"o\",\"b").unwrap();
        let file = File::open(&path).unwrap();
        assert_eq!(last_line_end(&file, 14), 28);
        assert_eq!(last_line_end(&file, 28), 28);
        std::fs::write(&path, "{\"version\":2}\n[0.1,\"o\",\"a").unwrap();
        let file = File::open(&path).unwrap();
        assert_eq!(
            last_line_end(&file, 14),
            14,
            "no whole line after the header"
        );
    }

    fn header<'a>(argv: &'a [String], created_at: SystemTime) -> Header<'a> {
        Header {
            command_id: "demo",
            session_id: "0123456789abcdef0123456789abcdef",
            argv,
            created_at,
            cols: 80,
            rows: 24,
            term: "dumb",
        }
    }

    fn lines(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn typed_values_are_recorded_as_markers_a_line_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let argv = vec!["/bin/sh".to_owned()];
        let r = Recording::create(dir.path(), &header(&argv, SystemTime::now())).unwrap();
        r.redact_input(&[("pw".to_owned(), "hunter2".to_owned())]);
        r.input(b"hun");
        r.input(b"ter2\r");
        r.input(b"export PW=");
        r.secret("pw");
        r.input(b"\r");
        r.input(b"say hunter2 and wait");
        r.close("exit 0");
        let events: Vec<_> = lines(&dir.path().join(r.name()))[1..]
            .iter()
            .map(|e| (e[1].clone(), e[2].clone()))
            .collect();
        assert_eq!(
            events,
            [
                ("i".into(), "[secret:pw]\r".into()),
                ("i".into(), "export PW=".into()),
                ("m".into(), "secret pw".into()),
                ("i".into(), "\r".into()),
                ("i".into(), "say [secret:pw] and wait".into()),
                ("m".into(), "exit 0".into()),
            ]
        );
    }

    #[test]
    fn events_follow_the_header_and_the_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let argv = vec!["/bin/prog".to_owned(), "arg".to_owned()];
        let at = UNIX_EPOCH + std::time::Duration::from_secs(1_764_583_628);
        let r = Recording::create(dir.path(), &header(&argv, at)).unwrap();
        assert_eq!(
            r.name(),
            "20251201T100708Z-demo-0123456789abcdef0123456789abcdef.cast"
        );
        r.output("out\r\n");
        r.input(b"in\n");
        r.secret("db");
        r.resize(30, 100);
        r.close("exit 0");
        r.output("after the end");
        let path = dir.path().join(r.name());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let lines = lines(&path);
        assert_eq!(
            lines[0],
            json!({"version": 2, "width": 80, "height": 24, "timestamp": 1_764_583_628u64,
                   "command": "/bin/prog arg", "title": "demo", "env": {"TERM": "dumb"}})
        );
        let events: Vec<(&str, &str)> = lines[1..]
            .iter()
            .map(|e| (e[1].as_str().unwrap(), e[2].as_str().unwrap()))
            .collect();
        assert_eq!(
            events,
            [
                ("o", "out\r\n"),
                ("i", "in\n"),
                ("m", "secret db"),
                ("r", "100x30"),
                ("m", "exit 0")
            ]
        );
        assert!(lines[1..].iter().all(|e| e[0].as_f64().is_some()));
    }

    #[test]
    fn a_file_at_its_cap_ends_with_a_marker_and_the_rest_is_not_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let argv = vec!["/bin/prog".to_owned()];
        let r = Recording::create(dir.path(), &header(&argv, SystemTime::now())).unwrap();
        let chunk = "x".repeat(1 << 20);
        for _ in 0..70 {
            r.output(&chunk);
        }
        r.close("exit 0");
        let path = dir.path().join(r.name());
        assert!(std::fs::metadata(&path).unwrap().len() <= RECORDING_MAX_BYTES);
        let lines = lines(&path);
        let last = lines.last().unwrap();
        assert_eq!(
            (last[1].as_str(), last[2].as_str()),
            (Some("m"), Some(TRUNCATED))
        );
        assert_eq!(
            lines.len(),
            1 + 63 + 1,
            "63 whole chunks fit beside the header"
        );
    }

    /// A full disk (`/dev/full` fails every write) ends the recording, not the caller.
    #[test]
    fn a_failing_disk_stops_only_the_recording() {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let r = Recording::writing(
            "full.cast".into(),
            "/dev/full".into(),
            BufWriter::new(full),
            0,
        );
        let chunk = "y".repeat(64 * 1024);
        r.output(&chunk);
        assert!(r.closed(), "the failed write ended the recording");
        r.output("more");
        r.input(b"typed");
        r.close("exit 0");
        assert!(r.closed());
    }

    #[test]
    fn a_recording_that_cannot_be_created_leaves_the_session_unrecorded() {
        let argv = vec!["/bin/prog".to_owned()];
        let missing = Path::new("/nonexistent/recordings");
        assert!(Recording::create(missing, &header(&argv, SystemTime::now())).is_none());
    }
}
