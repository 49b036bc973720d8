//! Named keys for `terminal_keys`, as the byte sequences an xterm sends (normal cursor-key
//! mode). `C-a`…`C-z` are the control characters; `M-x` is ESC followed by the key.

/// Every accepted name, for error messages and the tool description.
pub const KEY_NAMES: &str = "Enter Tab Escape Backspace Delete Up Down Left Right Home End \
     PageUp PageDown Insert Space F1…F12, C-a…C-z (also C-@ C-[ C-\\ C-] C-^ C-_ C-?), any \
     single printable character (x, 7, é), and M- before any of these (M-x, M-Enter)";

fn named(name: &str) -> Option<&'static [u8]> {
    Some(match name {
        "Enter" => b"\r",
        "Tab" => b"\t",
        "Escape" => b"\x1b",
        "Backspace" => b"\x7f",
        "Delete" => b"\x1b[3~",
        "Up" => b"\x1b[A",
        "Down" => b"\x1b[B",
        "Right" => b"\x1b[C",
        "Left" => b"\x1b[D",
        "Home" => b"\x1b[H",
        "End" => b"\x1b[F",
        "PageUp" => b"\x1b[5~",
        "PageDown" => b"\x1b[6~",
        "Insert" => b"\x1b[2~",
        "Space" => b" ",
        "F1" => b"\x1bOP",
        "F2" => b"\x1bOQ",
        "F3" => b"\x1bOR",
        "F4" => b"\x1bOS",
        "F5" => b"\x1b[15~",
        "F6" => b"\x1b[17~",
        "F7" => b"\x1b[18~",
        "F8" => b"\x1b[19~",
        "F9" => b"\x1b[20~",
        "F10" => b"\x1b[21~",
        "F11" => b"\x1b[23~",
        "F12" => b"\x1b[24~",
        _ => return None,
    })
}

/// The bytes of one key name, or `None` if the name is not a key. `M-` means ESC first,
/// and may stand once before a key.
pub fn key_bytes(name: &str) -> Option<Vec<u8>> {
    match name.strip_prefix("M-") {
        Some(key) => Some([b"\x1b".as_slice(), &plain_key(key)?].concat()),
        None => plain_key(name),
    }
}

fn plain_key(name: &str) -> Option<Vec<u8>> {
    if let Some(bytes) = named(name) {
        return Some(bytes.to_vec());
    }
    let mut chars = name.chars();
    if let (Some(c), None) = (chars.next(), chars.next())
        && !c.is_control()
    {
        return Some(c.to_string().into_bytes());
    }
    if let Some(rest) = name.strip_prefix("C-") {
        let mut chars = rest.chars();
        let (Some(c), None) = (chars.next(), chars.next()) else {
            return None;
        };
        return match c.to_ascii_lowercase() {
            'a'..='z' => Some(vec![c.to_ascii_lowercase() as u8 - b'a' + 1]),
            '@' | ' ' => Some(vec![0]),
            '[' => Some(vec![0x1b]),
            '\\' => Some(vec![0x1c]),
            ']' => Some(vec![0x1d]),
            '^' => Some(vec![0x1e]),
            '_' => Some(vec![0x1f]),
            '?' => Some(vec![0x7f]),
            _ => None,
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::key_bytes;

    #[test]
    fn keys_map_to_xterm_sequences() {
        let cases: &[(&str, &[u8])] = &[
            ("Enter", b"\r"),
            ("C-c", b"\x03"),
            ("C-d", b"\x04"),
            ("C-A", b"\x01"),
            ("C-z", b"\x1a"),
            ("C-[", b"\x1b"),
            ("Up", b"\x1b[A"),
            ("F1", b"\x1bOP"),
            ("F12", b"\x1b[24~"),
            ("M-x", b"\x1bx"),
            ("M-Enter", b"\x1b\r"),
            ("M-C-c", b"\x1b\x03"),
            ("M--", b"\x1b-"),
            ("Space", b" "),
            ("x", b"x"),
            ("é", "é".as_bytes()),
            ("+", b"+"),
        ];
        for (name, bytes) in cases {
            assert_eq!(key_bytes(name).as_deref(), Some(*bytes), "{name}");
        }
        let deep = "M-".repeat(60_000) + "x";
        for bad in [
            "enter", "C-", "C-ab", "M-", "M-M-x", "F13", "\n", "xy", "", &deep,
        ] {
            assert_eq!(key_bytes(bad), None, "{bad}");
        }
    }
}
