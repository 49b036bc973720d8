//! The owner's secrets (SPEC §12): named values read once at start-up from the server's
//! environment or from a file only its owner can read, held in memory only. Nothing here
//! ever formats a value: errors name the secret, and `Debug` prints a placeholder.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value, json};

use crate::limits::{SECRET_MAX_BYTES, SECRET_MIN_BYTES, SECRET_NAME_MAX_CHARS};
use crate::private_file::{self, Refusal};
use crate::strict::{Fields, type_name};

/// Where the owner keeps a secret's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A variable of the server's own environment.
    Env(String),
    /// An absolute path readable by its owner only.
    File(PathBuf),
}

/// A secret's value. Never printed: `Debug` shows a placeholder.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[value withheld]")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secret {
    pub source: Source,
    pub value: SecretValue,
    /// False only when the owner's commands read the config (`EnvSecrets::Elsewhere`) and
    /// the variable is not set here: the value is then empty, and never used.
    pub here: bool,
}

/// Whether an `env` secret's variable must be in this process's environment: the server's
/// (`Required`), or the owner's commands, run from a shell where it is usually not set, as
/// it belongs where the MCP client starts the server (`Elsewhere`: absent is no error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvSecrets {
    Required,
    Elsewhere,
}

impl Secret {
    pub fn to_json(&self) -> Value {
        match &self.source {
            Source::Env(var) => json!({ "env": var }),
            Source::File(path) => json!({ "file": path }),
        }
    }

    pub fn describe(&self) -> String {
        match &self.source {
            Source::Env(var) if !self.here => format!(
                "environment variable {var} (not set here: set it where the MCP client starts \
                 the server)"
            ),
            Source::Env(var) => format!("environment variable {var}"),
            Source::File(path) => format!("file {}", path.display()),
        }
    }
}

/// Whether `name` is a valid secret name; the rule otherwise.
pub fn check_secret_name(name: &str) -> Result<(), String> {
    let len = name.chars().count();
    let valid = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if (1..=SECRET_NAME_MAX_CHARS).contains(&len) && valid {
        Ok(())
    } else {
        Err(format!(
            "a secret name is 1–{SECRET_NAME_MAX_CHARS} characters of [A-Za-z0-9._-]"
        ))
    }
}

/// Parse and read every secret of the `secrets` object.
pub fn parse_secrets(
    map: &Map<String, Value>,
    env: EnvSecrets,
) -> Result<BTreeMap<String, Secret>, String> {
    map.iter()
        .map(|(name, spec)| {
            let base = format!("secrets.{name}");
            check_secret_name(name).map_err(|rule| format!("`{base}`: {rule}"))?;
            let source = parse_source(spec, &base)?;
            let elsewhere = match &source {
                Source::Env(var) => env == EnvSecrets::Elsewhere && std::env::var_os(var).is_none(),
                Source::File(_) => false,
            };
            let value = if elsewhere {
                SecretValue(String::new())
            } else {
                read_value(&source).map_err(|why| format!("`{base}`: {why}"))?
            };
            let here = !elsewhere;
            Ok((
                name.clone(),
                Secret {
                    source,
                    value,
                    here,
                },
            ))
        })
        .collect()
}

fn parse_source(spec: &Value, base: &str) -> Result<Source, String> {
    let mut f = Fields::new(spec, base)?;
    let env = f.string("env")?;
    let file = f.get("file");
    f.finish()?;
    match (env, file) {
        (Some(var), None) if !var.is_empty() && !var.contains(['=', '\0']) => {
            Ok(Source::Env(var.to_owned()))
        }
        (Some(_), None) => Err(format!("`{base}.env`: must be a variable name")),
        (None, Some(Value::String(path))) if path.starts_with('/') && !path.contains('\0') => {
            Ok(Source::File(PathBuf::from(path)))
        }
        (None, Some(Value::String(path))) => Err(format!(
            "`{base}.file`: must be an absolute path, got `{path}`"
        )),
        (None, Some(other)) => Err(format!(
            "`{base}.file`: must be an absolute path string, got {}",
            type_name(other)
        )),
        (Some(_), Some(_)) | (None, None) => Err(format!(
            "`{base}`: must be {{\"env\": \"VARIABLE\"}} or {{\"file\": \"/absolute/path\"}}"
        )),
    }
}

/// Read a value from its source and check it. The errors never contain the value.
fn read_value(source: &Source) -> Result<SecretValue, String> {
    let raw = match source {
        Source::Env(var) => std::env::var_os(var)
            .ok_or_else(|| format!("the server's environment has no variable {var}"))?
            .into_encoded_bytes(),
        Source::File(path) => {
            let shown = path.display();
            // The value and a line ending: more is refused unread.
            let mut bytes = match private_file::read(path, SECRET_MAX_BYTES + 2) {
                Ok(bytes) => bytes,
                Err(Refusal::Missing | Refusal::Unopenable(_) | Refusal::Unreadable(_)) => {
                    return Err(format!(
                        "cannot read the file {shown} (missing or not allowed)"
                    ));
                }
                Err(Refusal::Shared { mode }) => {
                    return Err(format!(
                        "{shown} is readable or writable by group or others (mode {mode:o}); \
                         chmod 600 it, as ssh requires of keys"
                    ));
                }
                Err(Refusal::TooLarge { .. }) => return Err(value_length()),
                Err(refusal) => return Err(refusal.describe(path)),
            };
            if bytes.ends_with(b"\n") {
                bytes.pop();
                if bytes.ends_with(b"\r") {
                    bytes.pop();
                }
            }
            bytes
        }
    };
    if !(SECRET_MIN_BYTES..=SECRET_MAX_BYTES).contains(&raw.len()) {
        return Err(value_length());
    }
    if raw.contains(&0) || raw.contains(&b'\n') || raw.contains(&b'\r') {
        return Err("the value must not contain NUL or a line break".into());
    }
    // Redaction compares decoded output text, so the value must be text too.
    String::from_utf8(raw)
        .map(SecretValue)
        .map_err(|_| "the value must be UTF-8 text".into())
}

/// Take the variable of every `env` secret out of this process's environment: out of the
/// environment list (so nothing in the server, and no process it starts, reads it again), and
/// out of the memory `/proc/PID/environ` shows, the block the kernel laid out at exec, which
/// taking a variable out of the list leaves as it was: the entry's bytes there become NULs.
///
/// # Safety
/// No other thread may exist yet: the environment changes here without the lock that other
/// threads' reads of it would take.
pub unsafe fn remove_from_environment(secrets: &BTreeMap<String, Secret>) {
    let block = exec_environment_block();
    for secret in secrets.values() {
        let Source::Env(var) = &secret.source else {
            continue;
        };
        let prefix = [var.as_bytes(), b"="].concat();
        let mut entries = Vec::new();
        // SAFETY: `environ` is a NULL-terminated array of NUL-terminated strings, and no
        // other thread can change it (the caller's promise).
        unsafe {
            let mut at = libc::environ;
            while !at.is_null() && !(*at).is_null() {
                let entry = std::ffi::CStr::from_ptr(*at);
                if entry.to_bytes().starts_with(&prefix) {
                    entries.push((*at, entry.to_bytes().len()));
                }
                at = at.add(1);
            }
            std::env::remove_var(var);
        }
        for (entry, len) in entries {
            let address = entry as usize;
            if block
                .as_ref()
                .is_some_and(|range| range.contains(&address) && address + len < range.end)
            {
                // SAFETY: the entry lies in the exec block, writable stack memory of this
                // process that nothing points into any more (it left the list above).
                unsafe { std::ptr::write_bytes(entry, 0, len) };
            }
        }
    }
}

/// Where the environment the kernel laid out at exec lies: `env_start` and `env_end`, the
/// 50th and 51st fields of `/proc/self/stat`.
fn exec_environment_block() -> Option<std::ops::Range<usize>> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (_, fields) = stat.rsplit_once(')')?;
    // After the command name: field 3 (state) is the first.
    let mut fields = fields.split_whitespace().skip(50 - 3);
    let start = fields.next()?.parse().ok()?;
    let end = fields.next()?.parse().ok()?;
    Some(start..end)
}

fn value_length() -> String {
    format!("the value must be {SECRET_MIN_BYTES} to {SECRET_MAX_BYTES} bytes long")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn parse(spec: Value) -> Result<BTreeMap<String, Secret>, String> {
        parse_secrets(spec.as_object().unwrap(), EnvSecrets::Required)
    }

    fn file_with(text: &str, mode: u32) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pass");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, path)
    }

    #[test]
    fn file_secrets_lose_the_trailing_newline() {
        let (_dir, path) = file_with("correct horse\n", 0o600);
        let s = parse(json!({"db": {"file": path}})).unwrap();
        assert_eq!(s["db"].value.expose(), "correct horse");
        assert_eq!(
            format!("{:?}", s["db"]),
            format!("Secret {{ source: File({path:?}), value: [value withheld], here: true }}")
        );
    }

    #[test]
    fn errors_name_the_secret_and_never_the_value() {
        let value = "TopSecretValue42";
        let (_d1, loose) = file_with(value, 0o640);
        let (_d2, short) = file_with("abc\n", 0o600);
        let (_d3, two_lines) = file_with(&format!("{value}\nmore"), 0o600);
        let cases = [
            (
                json!({"a": {"file": loose}}),
                "`secrets.a`: ",
                "group or others",
            ),
            (
                json!({"a": {"file": short}}),
                "`secrets.a`: ",
                "4 to 4096 bytes",
            ),
            (
                json!({"a": {"file": two_lines}}),
                "`secrets.a`: ",
                "line break",
            ),
            (
                json!({"a": {"file": "/no/such/file"}}),
                "`secrets.a`: ",
                "cannot read",
            ),
            (
                json!({"a": {"file": "relative"}}),
                "`secrets.a.file`: ",
                "absolute",
            ),
            (
                json!({"a": {"env": "MCP_TERMINAL_UNSET_TEST_VAR"}}),
                "`secrets.a`: ",
                "no variable MCP_TERMINAL_UNSET_TEST_VAR",
            ),
            (json!({"a": {}}), "`secrets.a`: ", "\"env\""),
            (
                json!({"a": {"env": "X", "file": "/x"}}),
                "`secrets.a`: ",
                "\"file\"",
            ),
            (
                json!({"a": {"path": "/x"}}),
                "`secrets.a.path`: ",
                "unknown field",
            ),
            (
                json!({"bad name": {"env": "X"}}),
                "`secrets.bad name`: ",
                "1–64",
            ),
        ];
        for (spec, prefix, rule) in cases {
            let e = parse(spec.clone()).unwrap_err();
            assert!(e.starts_with(prefix) && e.contains(rule), "{spec}: {e}");
            assert!(!e.contains(value), "{e}");
        }
    }
}
