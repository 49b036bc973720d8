//! `collect`: page `terminal_read` from a cursor to the end of a session's output, checking
//! every page against SPEC §5 on the way. This module is pure; the runner does the calls.

use serde_json::{Value, json};

/// SPEC §5: a page holds at most this many entries.
const MAX_PAGE_ENTRIES: usize = 1024;

const FINAL_STATES: [&str; 3] = ["EXITED", "TERMINATED", "FAILED"];

#[derive(Debug, Clone)]
pub struct Collector {
    cursor: u64,
    max_bytes: u64,
    strip_ansi: bool,
    pages: u64,
    text: String,
    stdout: String,
    stderr: String,
    gaps: Vec<Value>,
    expired: u64,
    truncated: bool,
    last: Value,
}

impl Collector {
    pub fn new(from: u64, max_bytes: u64, strip_ansi: bool) -> Self {
        Collector {
            cursor: from,
            max_bytes,
            strip_ansi,
            pages: 0,
            text: String::new(),
            stdout: String::new(),
            stderr: String::new(),
            gaps: Vec::new(),
            expired: 0,
            truncated: false,
            last: Value::Null,
        }
    }

    /// The cursor the next read must ask for.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Feed one `terminal_read` result (its structuredContent). Returns whether collection is
    /// complete; an error is a broken page rule or an unexpected error result.
    pub fn accept(&mut self, result: &Value) -> Result<bool, String> {
        if result.get("ok") != Some(&Value::Bool(true)) {
            return self.accept_error(result).map(|()| false);
        }
        self.check_page(result)?;
        self.last = result.clone();
        Ok(is_done(result))
    }

    fn accept_error(&mut self, result: &Value) -> Result<(), String> {
        let error = result.get("error").unwrap_or(&Value::Null);
        let code = error.get("code").and_then(Value::as_str).unwrap_or("");
        if code != "CURSOR_EXPIRED" {
            return Err(format!(
                "terminal_read at cursor {} failed: {result}",
                self.cursor
            ));
        }
        let base = error
            .get("base_cursor")
            .and_then(Value::as_u64)
            .ok_or_else(|| {
                format!("CURSOR_EXPIRED without an integer error.base_cursor: {result}")
            })?;
        if base <= self.cursor {
            return Err(format!(
                "CURSOR_EXPIRED at cursor {} but error.base_cursor {base} is not above it",
                self.cursor
            ));
        }
        self.gaps.push(json!({"from": self.cursor, "to": base}));
        self.expired += 1;
        self.truncated = true;
        self.cursor = base;
        Ok(())
    }

    fn check_page(&mut self, page: &Value) -> Result<(), String> {
        let at = self.cursor;
        let records = page
            .get("records")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("page at {at} has no records array"))?;
        if records.len() > MAX_PAGE_ENTRIES {
            return Err(format!(
                "page at {at} has {} entries (max {MAX_PAGE_ENTRIES})",
                records.len()
            ));
        }
        let mut expected = at;
        let mut bytes = 0u64;
        let mut prev_stream: Option<&str> = None;
        let mut page_text = Vec::new();
        for (i, entry) in records.iter().enumerate() {
            let cursor = entry.get("cursor").and_then(Value::as_u64);
            let stream = entry.get("stream").and_then(Value::as_str);
            let text = entry.get("text").and_then(Value::as_str);
            let (Some(cursor), Some(stream), Some(text)) = (cursor, stream, text) else {
                return Err(format!(
                    "page at {at}: entry {i} lacks cursor/stream/text: {entry}"
                ));
            };
            let contiguous = if self.strip_ansi {
                // Stripped text is shorter than the raw code points the cursors count.
                cursor >= expected && (i > 0 || cursor == at)
            } else {
                cursor == expected
            };
            if !contiguous {
                return Err(format!(
                    "page at {at}: entry {i} has cursor {cursor}, expected {expected}"
                ));
            }
            if stream != "stdout" && stream != "stderr" {
                return Err(format!("page at {at}: entry {i} has stream {stream:?}"));
            }
            if text.is_empty() && !self.strip_ansi {
                return Err(format!("page at {at}: entry {i} has empty text"));
            }
            if prev_stream == Some(stream) {
                return Err(format!(
                    "page at {at}: entries {} and {i} are both {stream} (not coalesced)",
                    i - 1
                ));
            }
            prev_stream = Some(stream);
            expected = cursor + text.chars().count() as u64;
            bytes += text.len() as u64;
            page_text.push((stream, text));
        }
        if bytes > self.max_bytes {
            return Err(format!(
                "page at {at} holds {bytes} text bytes, over max_bytes {}",
                self.max_bytes
            ));
        }
        let next = page
            .get("next_cursor")
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("page at {at} has no integer next_cursor"))?;
        let next_ok = if self.strip_ansi {
            next >= expected
        } else {
            next == expected
        };
        if !next_ok {
            return Err(format!(
                "page at {at}: next_cursor {next}, but its entries end at {expected}"
            ));
        }
        if let (Some(base), false) = (
            page.get("base_cursor").and_then(Value::as_u64),
            records.is_empty(),
        ) && base > at
        {
            return Err(format!(
                "page at {at} returned records below its base_cursor {base} (expected CURSOR_EXPIRED)"
            ));
        }
        for (stream, text) in page_text {
            self.text.push_str(text);
            match stream {
                "stdout" => self.stdout.push_str(text),
                _ => self.stderr.push_str(text),
            }
        }
        self.pages += 1;
        self.truncated |= page.get("truncated") == Some(&Value::Bool(true));
        self.cursor = next;
        Ok(())
    }

    /// The collected result scenarios match against.
    pub fn result(&self) -> Value {
        let field = |k: &str| self.last.get(k).cloned().unwrap_or(Value::Null);
        json!({
            "text": self.text,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "stdout_checksum": fnv1a64(self.stdout.as_bytes()),
            "pages": self.pages,
            "gaps": self.gaps,
            "expired": self.expired,
            "next_cursor": self.cursor,
            "truncated": self.truncated,
            "status": field("status"),
            "output_complete": field("output_complete"),
            "output_incomplete": field("output_incomplete"),
            "base_cursor": field("base_cursor"),
        })
    }
}

/// FNV-1a (64 bit) of `bytes` in 16 hex digits, as `demo-process flood-checksum` prints it.
pub fn fnv1a64(bytes: &[u8]) -> String {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// Complete when all output is read: `output_complete` and nothing more, or a final session
/// whose output is known to be incomplete.
fn is_done(page: &Value) -> bool {
    let flag = |k: &str| page.get(k) == Some(&Value::Bool(true));
    let final_state = page
        .get("status")
        .and_then(Value::as_str)
        .is_some_and(|s| FINAL_STATES.contains(&s));
    !flag("has_more") && (flag("output_complete") || (final_state && flag("output_incomplete")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(records: Value, next: u64, more: bool, complete: bool) -> Value {
        json!({
            "ok": true, "records": records, "base_cursor": 0, "next_cursor": next,
            "truncated": false, "has_more": more, "status": if complete { "EXITED" } else { "RUNNING" },
            "output_complete": complete, "output_incomplete": false,
        })
    }

    #[test]
    fn checksum_is_fnv1a64() {
        assert_eq!(fnv1a64(b""), "cbf29ce484222325");
        assert_eq!(fnv1a64(b"a"), "af63dc4c8601ec8c");
    }

    #[test]
    fn collects_contiguous_pages() {
        let mut c = Collector::new(0, 16, false);
        let p1 = page(
            json!([{"cursor": 0, "stream": "stdout", "text": "ab"}, {"cursor": 2, "stream": "stderr", "text": "é"}]),
            3,
            true,
            false,
        );
        assert!(!c.accept(&p1).unwrap());
        let p2 = page(
            json!([{"cursor": 3, "stream": "stdout", "text": "c\n"}]),
            5,
            false,
            true,
        );
        assert!(c.accept(&p2).unwrap());
        let r = c.result();
        assert_eq!(r["text"], "abéc\n");
        assert_eq!(r["stdout"], "abc\n");
        assert_eq!(r["stderr"], "é");
        assert_eq!(r["pages"], 2);
        assert_eq!(r["next_cursor"], 5);
    }

    #[test]
    fn empty_page_while_running_continues() {
        let mut c = Collector::new(7, 16, false);
        assert!(!c.accept(&page(json!([]), 7, false, false)).unwrap());
        assert_eq!(c.cursor(), 7);
    }

    #[test]
    fn rejects_gap_inside_page() {
        let mut c = Collector::new(0, 64, false);
        let p = page(
            json!([{"cursor": 0, "stream": "stdout", "text": "ab"}, {"cursor": 3, "stream": "stderr", "text": "c"}]),
            4,
            false,
            true,
        );
        assert!(c.accept(&p).unwrap_err().contains("expected 2"));
    }

    #[test]
    fn rejects_page_not_starting_at_cursor() {
        let mut c = Collector::new(5, 64, false);
        let p = page(
            json!([{"cursor": 6, "stream": "stdout", "text": "a"}]),
            7,
            false,
            true,
        );
        assert!(c.accept(&p).is_err());
    }

    #[test]
    fn rejects_wrong_next_cursor() {
        let mut c = Collector::new(0, 64, false);
        let p = page(
            json!([{"cursor": 0, "stream": "stdout", "text": "日本"}]),
            6,
            false,
            true,
        );
        assert!(c.accept(&p).unwrap_err().contains("next_cursor 6"));
    }

    #[test]
    fn rejects_uncoalesced_and_empty_entries() {
        let mut c = Collector::new(0, 64, false);
        let p = page(
            json!([{"cursor": 0, "stream": "stdout", "text": "a"}, {"cursor": 1, "stream": "stdout", "text": "b"}]),
            2,
            false,
            true,
        );
        assert!(c.accept(&p).unwrap_err().contains("coalesced"));
        let mut c = Collector::new(0, 64, false);
        let p = page(
            json!([{"cursor": 0, "stream": "stdout", "text": ""}]),
            0,
            false,
            true,
        );
        assert!(c.accept(&p).unwrap_err().contains("empty"));
    }

    #[test]
    fn rejects_oversized_pages() {
        let mut c = Collector::new(0, 4, false);
        let p = page(
            json!([{"cursor": 0, "stream": "stdout", "text": "abcde"}]),
            5,
            false,
            true,
        );
        assert!(c.accept(&p).unwrap_err().contains("max_bytes"));
        let many: Vec<Value> = (0..1025)
            .map(|i| json!({"cursor": i, "stream": if i % 2 == 0 { "stdout" } else { "stderr" }, "text": "x"}))
            .collect();
        let mut c = Collector::new(0, 1 << 20, false);
        let p = page(Value::Array(many), 1025, false, true);
        assert!(c.accept(&p).unwrap_err().contains("entries"));
    }

    #[test]
    fn expired_cursor_records_a_gap_and_resumes() {
        let mut c = Collector::new(0, 64, false);
        let err = json!({"ok": false, "error": {"code": "CURSOR_EXPIRED", "message": "m", "base_cursor": 10}});
        assert!(!c.accept(&err).unwrap());
        assert_eq!(c.cursor(), 10);
        let p = page(
            json!([{"cursor": 10, "stream": "stdout", "text": "z"}]),
            11,
            false,
            true,
        );
        assert!(c.accept(&p).unwrap());
        let r = c.result();
        assert_eq!(r["gaps"], json!([{"from": 0, "to": 10}]));
        assert_eq!(r["expired"], 1);
        assert_eq!(r["truncated"], true);
    }

    #[test]
    fn other_errors_fail() {
        let mut c = Collector::new(0, 64, false);
        let err = json!({"ok": false, "error": {"code": "SESSION_NOT_FOUND", "message": "m"}});
        assert!(c.accept(&err).is_err());
        let bad = json!({"ok": false, "error": {"code": "CURSOR_EXPIRED", "message": "m", "base_cursor": 0}});
        assert!(c.accept(&bad).is_err());
    }

    #[test]
    fn final_incomplete_output_ends_collection() {
        let mut c = Collector::new(0, 64, false);
        let mut p = page(json!([]), 0, false, false);
        p["status"] = json!("TERMINATED");
        p["output_incomplete"] = json!(true);
        assert!(c.accept(&p).unwrap());
    }

    #[test]
    fn has_more_keeps_collecting() {
        let mut c = Collector::new(0, 64, false);
        let p = page(
            json!([{"cursor": 0, "stream": "stdout", "text": "a"}]),
            1,
            true,
            true,
        );
        assert!(!c.accept(&p).unwrap());
    }
}
