//! The JSON text of a tool result, byte for byte what `serde_json` writes compactly, with
//! a string escaper that skips over plain text eight bytes at a time.
//!
//! A page of output is one string of up to 64 KiB, and its JSON text is carried as the
//! result's text content beside the structured content; `serde_json` looks at every byte
//! of a string through a table, one at a time, which made escaping the largest cost of a
//! page. Here only the bytes that need an escape (`"`, `\` and control characters) stop
//! the copy.

use serde_json::Value;

/// The compact JSON text of `value`, as `serde_json::to_string` writes it.
pub fn to_string(value: &Value) -> String {
    let mut out = Vec::with_capacity(text_size_hint(value));
    write_value(&mut out, value);
    // Only valid UTF-8 (the strings' own bytes and ASCII) was written.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// A guess of the text's length that is exact for text without escapes: saves the
/// reallocations of a large page.
fn text_size_hint(value: &Value) -> usize {
    match value {
        Value::String(s) => s.len() + 2,
        Value::Array(items) => items.iter().map(text_size_hint).sum::<usize>() + items.len() + 2,
        Value::Object(map) => {
            map.iter()
                .map(|(k, v)| k.len() + 4 + text_size_hint(v))
                .sum::<usize>()
                + 2
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => 8,
    }
}

fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        // Numbers are few and short: serde_json's own formatting keeps them identical.
        Value::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, key);
                out.push(b':');
                write_value(out, item);
            }
            out.push(b'}');
        }
    }
}

const LOW: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Whether any of the eight bytes of `word` needs an escape: is below 0x20, or is `"` or
/// `\` (the classic "has a zero byte" test, exact as a yes/no answer).
fn needs_escape(word: u64) -> bool {
    let below_space = word.wrapping_sub(LOW * 0x20) & !word;
    let quote = word ^ (LOW * u64::from(b'"'));
    let backslash = word ^ (LOW * u64::from(b'\\'));
    let has_zero = |x: u64| x.wrapping_sub(LOW) & !x;
    (below_space | has_zero(quote) | has_zero(backslash)) & HIGH != 0
}

fn escape_of(byte: u8) -> Option<&'static [u8]> {
    Some(match byte {
        b'"' => b"\\\"",
        b'\\' => b"\\\\",
        b'\n' => b"\\n",
        b'\r' => b"\\r",
        b'\t' => b"\\t",
        0x08 => b"\\b",
        0x0c => b"\\f",
        0..0x20 => b"\\u00",
        _ => return None,
    })
}

/// `s` as a JSON string, escaped exactly as serde_json escapes it.
fn write_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut run = 0; // start of the bytes not yet copied
    let mut at = 0;
    while at < bytes.len() {
        if let Some(chunk) = bytes.get(at..at + 8) {
            let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
            if !needs_escape(word) {
                at += 8;
                continue;
            }
        }
        let byte = bytes[at];
        if let Some(escape) = escape_of(byte) {
            out.extend_from_slice(&bytes[run..at]);
            out.extend_from_slice(escape);
            if escape == b"\\u00" {
                out.extend_from_slice(&[HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 15)]]);
            }
            run = at + 1;
        }
        at += 1;
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text_strategy() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just('a'),
                Just('"'),
                Just('\\'),
                Just('\n'),
                Just('\u{0}'),
                Just('\u{1f}'),
                Just('\u{7f}'),
                Just('\u{8}'),
                Just('\u{c}'),
                Just('é'),
                Just('中'),
                Just('😀'),
                Just('/'),
                any::<char>(),
            ],
            0..80,
        )
        .prop_map(|cs| cs.into_iter().collect())
    }

    fn value_strategy() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            text_strategy().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                proptest::collection::btree_map(text_strategy(), inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Byte for byte what serde_json writes, for any value.
        #[test]
        fn writes_what_serde_json_writes(value in value_strategy()) {
            prop_assert_eq!(to_string(&value), serde_json::to_string(&value).unwrap());
        }
    }

    #[test]
    fn escapes_at_every_position_of_a_word() {
        for len in 0..20 {
            for at in 0..len {
                for special in ['"', '\\', '\n', '\u{1}', '\u{1f}'] {
                    let mut s: String = "x".repeat(len);
                    s.replace_range(at..at + 1, &special.to_string());
                    let value = Value::String(s);
                    assert_eq!(to_string(&value), serde_json::to_string(&value).unwrap());
                }
            }
        }
    }
}
