//! Validation of the owner's JSON config, rule by rule (SPEC §3). The first failure is
//! reported as `` `field.path`: rule ``.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::secrets::{EnvSecrets, check_secret_name, parse_secrets};
use super::{Config, Limits, Mode, OnFull, Profile, Shell};
use crate::limits::{
    CAP_TOTAL_BYTES, CAP_TOTAL_RECORDS, COMMAND_ID_MAX_CHARS, IDLE_TIMEOUT_MAX_MS,
    IDLE_TIMEOUT_MIN_MS, MAX_PROFILES, TERMINAL_MAX_SIZE,
};
use crate::policy::{denied_env_name, inside_roots, invalid_env_name};
use crate::strict::{Fields, type_name};

/// Validate a parsed config document. Missing `allowed_roots` default to `default_root`,
/// a missing `default_cwd` to the first allowed root.
pub fn parse_config(value: &Value, default_root: &Path) -> Result<Config, String> {
    parse_config_as(value, default_root, EnvSecrets::Required)
}

/// `parse_config`, reading `env` secrets as `env` says.
pub fn parse_config_as(
    value: &Value,
    default_root: &Path,
    env: EnvSecrets,
) -> Result<Config, String> {
    if !cfg!(unix) {
        return Err("mcp-terminal needs a POSIX system with process groups".into());
    }
    let mut f = Fields::new(value, "")?;
    let defaults = Limits::default();
    let limits = Limits {
        max_sessions: int(&mut f, "max_sessions", 1, 64, defaults.max_sessions as u64)? as usize,
        max_records: int(&mut f, "max_records", 1, 1024, defaults.max_records as u64)? as usize,
        buffer_bytes: int(
            &mut f,
            "buffer_bytes",
            4,
            16_777_216,
            defaults.buffer_bytes as u64,
        )? as usize,
        buffer_records: int(
            &mut f,
            "buffer_records",
            1,
            1_048_576,
            defaults.buffer_records as u64,
        )? as usize,
        default_timeout_ms: int(
            &mut f,
            "default_timeout_ms",
            100,
            3_600_000,
            defaults.default_timeout_ms,
        )?,
        max_timeout_ms: int(
            &mut f,
            "max_timeout_ms",
            100,
            3_600_000,
            defaults.max_timeout_ms,
        )?,
        retention_seconds: int(
            &mut f,
            "retention_seconds",
            1,
            86_400,
            defaults.retention_seconds,
        )?,
        max_input_bytes: int(
            &mut f,
            "max_input_bytes",
            1,
            1_048_576,
            defaults.max_input_bytes as u64,
        )? as usize,
        max_wait_ms: int(&mut f, "max_wait_ms", 100, 3_600_000, defaults.max_wait_ms)?,
    };
    check_limits(&limits)?;

    let allowed_roots = match f.array("allowed_roots")? {
        None => vec![canonical_dir(default_root, "allowed_roots")?],
        Some(items) if items.is_empty() => {
            return Err("`allowed_roots`: must list at least one directory".into());
        }
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let path = format!("allowed_roots[{i}]");
                canonical_dir(Path::new(absolute_str(item, &path)?), &path)
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    // Absent, the first allowed root: where the server was started from matters only when
    // the roots are absent too (then it is the one root).
    let default_cwd = match f.get("default_cwd") {
        None => allowed_roots[0].clone(),
        Some(v) => canonical_dir(Path::new(absolute_str(v, "default_cwd")?), "default_cwd")?,
    };
    if !inside_roots(&default_cwd, &allowed_roots) {
        return Err(format!(
            "`default_cwd`: `{}` is not inside any of allowed_roots",
            default_cwd.display()
        ));
    }

    let commands = match f.object("commands")? {
        None => super::default_config(&default_cwd).commands,
        Some(map) => parse_commands(map)?,
    };
    let secrets = match f.object("secrets")? {
        None => BTreeMap::new(),
        Some(map) => parse_secrets(map, env)?,
    };
    for (id, profile) in &commands {
        if let Some((i, name)) = profile
            .allowed_secrets
            .iter()
            .enumerate()
            .find(|(_, name)| !secrets.contains_key(*name))
        {
            return Err(format!(
                "`commands.{id}.allowed_secrets[{i}]`: `{name}` is not in `secrets`"
            ));
        }
    }
    let recordings_dir = match f.get("recordings_dir") {
        None => None,
        Some(v) => Some(canonical_dir(
            Path::new(absolute_str(v, "recordings_dir")?),
            "recordings_dir",
        )?),
    };

    check_terminal_sizes(&commands, &limits)?;

    let audit_log = match f.get("audit_log") {
        None => None,
        Some(v) => Some(audit_path(absolute_str(v, "audit_log")?)?),
    };
    let web_listen = f.string("web_listen")?.map(web_listen).transpose()?;
    f.finish()?;

    Ok(Config {
        allowed_roots,
        default_cwd,
        commands,
        limits,
        audit_log,
        secrets,
        recordings_dir,
        web_listen,
    })
}

/// `web_listen`: a loopback `IP:PORT`, or `localhost:PORT` for 127.0.0.1 (the live view
/// beside stdio serves this machine only).
fn web_listen(text: &str) -> Result<std::net::SocketAddr, String> {
    let address = match text.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}").parse(),
        None => text.parse(),
    };
    let address: std::net::SocketAddr = address.map_err(|_| {
        format!(
            "`web_listen`: `{text}` is not an address of the form IP:PORT or localhost:PORT \
             (127.0.0.1:8766)"
        )
    })?;
    if !address.ip().is_loopback() {
        return Err(format!(
            "`web_listen`: `{text}` is not a loopback address; the live view beside stdio \
             serves this machine only"
        ));
    }
    Ok(address)
}

fn int(f: &mut Fields, key: &'static str, min: u64, max: u64, default: u64) -> Result<u64, String> {
    Ok(f.uint(key, min, max)?.unwrap_or(default))
}

fn check_limits(l: &Limits) -> Result<(), String> {
    if l.max_records < l.max_sessions {
        return Err(format!(
            "`max_records`: must be at least max_sessions ({}), got {}",
            l.max_sessions, l.max_records
        ));
    }
    if l.default_timeout_ms > l.max_timeout_ms {
        return Err(format!(
            "`default_timeout_ms`: must not exceed max_timeout_ms ({}), got {}",
            l.max_timeout_ms, l.default_timeout_ms
        ));
    }
    within_total(
        "buffer_records",
        l.max_records,
        l.buffer_records,
        CAP_TOTAL_RECORDS,
    )?;
    within_total(
        "buffer_bytes",
        l.max_records,
        l.buffer_bytes,
        CAP_TOTAL_BYTES,
    )?;
    Ok(())
}

/// A per-session `field` times `max_records` must stay within the server-wide `cap`.
fn within_total(
    field: &str,
    max_records: usize,
    per_session: usize,
    cap: u64,
) -> Result<(), String> {
    let total = (max_records * per_session) as u64;
    if total > cap {
        return Err(format!(
            "`{field}`: max_records × {field} must be at most {cap}, \
             got {max_records} × {per_session} = {total}"
        ));
    }
    Ok(())
}

/// A PTY profile's screen and alternate screen must fit one session's emulator budget.
fn check_terminal_sizes(
    commands: &BTreeMap<String, Profile>,
    limits: &Limits,
) -> Result<(), String> {
    let budget = limits.emulator_cells();
    for (id, p) in commands.iter().filter(|(_, p)| p.mode == Mode::Pty) {
        let cells = usize::from(p.rows) * usize::from(p.cols);
        if 2 * cells > budget {
            return Err(format!(
                "`commands.{id}.rows`: rows × cols must be at most {} with max_records {} (a \
                 session's emulator holds {budget} cells, two screens of rows × cols), got {} \
                 × {} = {cells}",
                budget / 2,
                limits.max_records,
                p.rows,
                p.cols
            ));
        }
    }
    Ok(())
}

fn absolute_str<'a>(value: &'a Value, path: &str) -> Result<&'a str, String> {
    match value {
        Value::String(s) if s.starts_with('/') && !s.contains('\0') => Ok(s),
        Value::String(s) => Err(format!("`{path}`: must be an absolute path, got `{s}`")),
        other => Err(format!(
            "`{path}`: must be an absolute path string, got {}",
            type_name(other)
        )),
    }
}

fn canonical_dir(path: &Path, field: &str) -> Result<PathBuf, String> {
    let canonical = path
        .canonicalize()
        .map_err(|_| format!("`{field}`: `{}` does not exist", path.display()))?;
    if !canonical.is_dir() {
        return Err(format!(
            "`{field}`: `{}` is not a directory",
            path.display()
        ));
    }
    Ok(canonical)
}

fn audit_path(s: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    match path.parent() {
        Some(dir) if dir.is_dir() => Ok(path),
        _ => Err(format!("`audit_log`: the directory of `{s}` must exist")),
    }
}

fn parse_commands(map: &Map<String, Value>) -> Result<BTreeMap<String, Profile>, String> {
    if map.len() > MAX_PROFILES {
        return Err(format!(
            "`commands`: at most {MAX_PROFILES} profiles, got {}",
            map.len()
        ));
    }
    map.iter()
        .map(|(id, value)| {
            check_command_id(id)?;
            Ok((id.clone(), parse_profile(id, value)?))
        })
        .collect()
}

pub fn check_command_id(id: &str) -> Result<(), String> {
    let valid_chars = id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    let len = id.chars().count();
    if (1..=COMMAND_ID_MAX_CHARS).contains(&len) && valid_chars {
        Ok(())
    } else {
        Err(format!(
            "`commands.{id}`: a command id is 1–{COMMAND_ID_MAX_CHARS} characters of \
             [A-Za-z0-9._-]"
        ))
    }
}

/// Whether a shell's `argv` makes it interactive: `-i` among its options (alone or with
/// others, `-il`), which come before its first operand; the arguments of options that take
/// one (`-o vi`, `-O extglob`, `-ox pipefail`: one for each `o` or `O` in a cluster,
/// `--rcfile FILE`) are skipped, and so is `env` in front of the shell (with its options,
/// `-S` split into words, and `NAME=VALUE` words).
fn interactive_flag(argv: &[String]) -> bool {
    let words: Vec<&str> = argv.iter().map(String::as_str).collect();
    interactive_words(&words)
}

fn interactive_words(argv: &[&str]) -> bool {
    let Some((program, rest)) = argv.split_first() else {
        return false;
    };
    let mut args = rest.iter().copied();
    if program.rsplit('/').next() == Some("env") {
        let mut shell: Vec<&str> = Vec::new();
        while let Some(arg) = args.next() {
            match arg {
                "-u" | "-C" | "--unset" | "--chdir" => {
                    args.next();
                }
                "-S" | "--split-string" => {
                    shell.extend(args.next().unwrap_or_default().split_whitespace());
                }
                _ if arg.starts_with("-S") => shell.extend(arg[2..].split_whitespace()),
                _ if arg.starts_with('-') || arg.contains('=') => {}
                _ => {
                    shell.push(arg);
                    break;
                }
            }
        }
        shell.extend(args);
        return interactive_words(&shell);
    }
    while let Some(arg) = args.next() {
        match arg {
            "--" | "-" => return false,
            "--rcfile" | "--init-file" => {
                args.next();
            }
            _ if arg.starts_with("--") => {}
            _ if (arg.starts_with('-') || arg.starts_with('+')) && arg.len() > 1 => {
                let letters = &arg[1..];
                if !letters.chars().all(|c| c.is_ascii_alphabetic()) {
                    return false;
                }
                if arg.starts_with('-') && letters.contains('i') {
                    return true;
                }
                for _ in letters.matches(['o', 'O']) {
                    args.next();
                }
            }
            _ => return false,
        }
    }
    false
}

fn parse_profile(id: &str, value: &Value) -> Result<Profile, String> {
    let base = format!("commands.{id}");
    let mut f = Fields::new(value, &base)?;

    let argv = match f.array("argv")? {
        None => return Err(format!("`{base}.argv`: is required")),
        Some(items) if items.is_empty() => {
            return Err(format!("`{base}.argv`: must not be empty"));
        }
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) if s.contains('\0') => {
                    Err(format!("`{base}.argv[{i}]`: must not contain NUL"))
                }
                Value::String(s) => Ok(s.clone()),
                other => Err(format!(
                    "`{base}.argv[{i}]`: must be a string, got {}",
                    type_name(other)
                )),
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    if !argv[0].starts_with('/') {
        return Err(format!(
            "`{base}.argv[0]`: must be an absolute path, got `{}`",
            argv[0]
        ));
    }

    let mut env = BTreeMap::new();
    for (name, v) in f.object("env")?.into_iter().flatten() {
        if let Some(why) = invalid_env_name(name) {
            return Err(format!("`{base}.env`: variable name `{name}` {why}"));
        }
        match v {
            Value::String(s) if !s.contains('\0') => {
                env.insert(name.clone(), s.clone());
            }
            Value::String(_) => {
                return Err(format!("`{base}.env.{name}`: must not contain NUL"));
            }
            other => {
                return Err(format!(
                    "`{base}.env.{name}`: must be a string, got {}",
                    type_name(other)
                ));
            }
        }
    }

    let mut allowed_env = Vec::new();
    for (i, item) in f.array("allowed_env")?.into_iter().flatten().enumerate() {
        let name = item.as_str().ok_or_else(|| {
            format!(
                "`{base}.allowed_env[{i}]`: must be a string, got {}",
                type_name(item)
            )
        })?;
        if let Some(why) = invalid_env_name(name) {
            return Err(format!("`{base}.allowed_env[{i}]`: `{name}` {why}"));
        }
        if let Some(why) = denied_env_name(name) {
            return Err(format!(
                "`{base}.allowed_env[{i}]`: {why}; clients may never set it (set a fixed \
                 value in `env` instead)"
            ));
        }
        allowed_env.push(name.to_owned());
    }

    let mode = match f.string("mode")? {
        None | Some("pipe") => Mode::Pipe,
        Some("pty") => Mode::Pty,
        Some(other) => {
            return Err(format!(
                "`{base}.mode`: must be \"pipe\" or \"pty\", got \"{other}\""
            ));
        }
    };
    let max = u64::from(TERMINAL_MAX_SIZE);
    let rows = f.uint("rows", 1, max)?.unwrap_or(24) as u16;
    let cols = f.uint("cols", 1, max)?.unwrap_or(80) as u16;
    let shell = match f.string("shell")? {
        None => None,
        Some("posix") => Some(Shell::Posix),
        Some(other) => {
            return Err(format!(
                "`{base}.shell`: must be null or \"posix\", got \"{other}\""
            ));
        }
    };
    // A shell on pipes reads its commands as a script's lines. Told it is interactive, it
    // prints its prompt on stderr before each (into every command's stderr) and reaches
    // for job control on a terminal it does not have.
    if mode == Mode::Pipe && shell.is_some() && interactive_flag(&argv) {
        return Err(format!(
            "`{base}`: a shell on pipes with `-i` would print its prompt into every \
             command's stderr; drop `-i`, or run it on a terminal (`\"mode\": \"pty\"`)"
        ));
    }
    let on_full = match f.string("on_full")? {
        None | Some("evict") => OnFull::Evict,
        Some("pause") => OnFull::Pause,
        Some(other) => {
            return Err(format!(
                "`{base}.on_full`: must be \"evict\" or \"pause\", got \"{other}\""
            ));
        }
    };
    let description = f.string("description")?.map(str::to_owned);
    let idle_timeout_ms = f.uint("idle_timeout_ms", IDLE_TIMEOUT_MIN_MS, IDLE_TIMEOUT_MAX_MS)?;
    let mut allowed_secrets = Vec::new();
    for (i, item) in f
        .array("allowed_secrets")?
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = format!("{base}.allowed_secrets[{i}]");
        let name = item
            .as_str()
            .ok_or_else(|| format!("`{path}`: must be a string, got {}", type_name(item)))?;
        check_secret_name(name).map_err(|rule| format!("`{path}`: {rule}"))?;
        if !allowed_secrets.iter().any(|n| n == name) {
            allowed_secrets.push(name.to_owned());
        }
    }
    // A held reader leaves output in the terminal, where the kernel may throw away part of
    // it (Ctrl-C and Ctrl-Z flush it): a secret's echo cut there is text no redaction
    // knows.
    if mode == Mode::Pty && on_full == OnFull::Pause && !allowed_secrets.is_empty() {
        return Err(format!(
            "`{base}.allowed_secrets`: a terminal profile with `on_full: \"pause\"` cannot \
             be allowed secrets (output held in the terminal can be cut by the kernel, echo \
             of a secret included); use `on_full: \"evict\"` or run it on pipes"
        ));
    }
    let record = match f.get("record") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(format!(
                "`{base}.record`: must be true or false, got {}",
                type_name(other)
            ));
        }
    };
    f.finish()?;

    Ok(Profile {
        argv,
        env,
        allowed_env,
        mode,
        rows,
        cols,
        shell,
        on_full,
        description,
        idle_timeout_ms,
        allowed_secrets,
        record,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn root() -> PathBuf {
        std::env::temp_dir().canonicalize().unwrap()
    }

    fn with(overrides: Value) -> Value {
        let mut base = json!({
            "commands": {"echo": {"argv": ["/bin/echo", "hi"]}}
        });
        for (k, v) in overrides.as_object().unwrap() {
            base[k] = v.clone();
        }
        base
    }

    fn err(overrides: Value) -> String {
        parse_config(&with(overrides), &root()).unwrap_err()
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let c = parse_config(&with(json!({})), &root()).unwrap();
        assert_eq!(c.limits, Limits::default());
        assert_eq!(c.allowed_roots, vec![root()]);
        assert_eq!(c.default_cwd, root());
        assert_eq!(c.commands["echo"].mode, Mode::Pipe);
        assert_eq!((c.commands["echo"].rows, c.commands["echo"].cols), (24, 80));
    }

    #[test]
    fn default_cwd_is_the_first_allowed_root_wherever_the_server_starts() {
        let roots = tempfile::tempdir().unwrap();
        let first = roots.path().canonicalize().unwrap();
        let doc = with(json!({"allowed_roots": [first]}));
        // Started from a directory outside the roots, as an MCP client may start it.
        let c = parse_config(&doc, Path::new("/")).unwrap();
        assert_eq!(c.default_cwd, first);
    }

    #[test]
    fn unknown_fields_are_refused_at_every_level() {
        assert!(err(json!({"max_sesions": 3})).starts_with("`max_sesions`: unknown field"));
        let e = parse_config(
            &json!({"commands": {"x": {"argv": ["/bin/true"], "args": []}}}),
            &root(),
        )
        .unwrap_err();
        assert!(e.starts_with("`commands.x.args`: unknown field"), "{e}");
    }

    #[test]
    fn integers_are_strict_and_ranged() {
        for (field, bad) in [
            ("max_sessions", json!(0)),
            ("max_sessions", json!(65)),
            ("max_sessions", json!("8")),
            ("max_sessions", json!(8.0)),
            ("max_sessions", json!(true)),
            ("max_records", json!(1025)),
            ("buffer_bytes", json!(3)),
            ("buffer_records", json!(0)),
            ("default_timeout_ms", json!(99)),
            ("max_timeout_ms", json!(3_600_001)),
            ("retention_seconds", json!(86_401)),
            ("max_input_bytes", json!(0)),
            ("max_wait_ms", json!(50)),
        ] {
            let e = err(json!({ field: bad }));
            assert!(
                e.starts_with(&format!("`{field}`: must be an integer from")),
                "{e}"
            );
        }
    }

    #[test]
    fn cross_field_rules() {
        let e = err(json!({"max_sessions": 8, "max_records": 4}));
        assert!(e.contains("at least max_sessions"), "{e}");
        let e = err(json!({"default_timeout_ms": 5000, "max_timeout_ms": 1000}));
        assert!(e.contains("must not exceed max_timeout_ms"), "{e}");
    }

    #[test]
    fn terminal_sizes_fit_the_emulator_share() {
        let pty = |rows: u64, cols: u64| json!({"commands": {"t": {"argv": ["/bin/cat"], "mode": "pty", "rows": rows, "cols": cols}}});
        let e = err(pty(1000, 1000));
        assert!(
            e.starts_with("`commands.t.rows`: rows × cols must be at most 131072"),
            "{e}"
        );
        assert!(parse_config(&with(pty(256, 512)), &root()).is_ok());
        let mut many = pty(100, 100);
        many["max_records"] = json!(1024);
        many["buffer_bytes"] = json!(65_536);
        many["buffer_records"] = json!(2048);
        let e = err(many);
        assert!(e.contains("at most 4096 with max_records 1024"), "{e}");
        let mut pipe = pty(1000, 1000);
        pipe["commands"]["t"]["mode"] = json!("pipe");
        assert!(parse_config(&with(pipe), &root()).is_ok());
    }

    #[test]
    fn global_caps() {
        let e = err(json!({"max_records": 64, "buffer_records": 65_536}));
        assert!(e.contains("max_records × buffer_records"), "{e}");
        let e = err(json!({"max_records": 8, "buffer_bytes": 16_777_216}));
        assert!(e.contains("max_records × buffer_bytes"), "{e}");
        assert!(
            parse_config(
                &with(json!({"max_records": 32, "buffer_records": 65_536})),
                &root()
            )
            .is_ok()
        );
    }

    #[test]
    fn roots_must_be_absolute_existing_directories() {
        assert!(err(json!({"allowed_roots": []})).contains("at least one"));
        assert!(err(json!({"allowed_roots": ["relative"]})).contains("absolute path"));
        assert!(err(json!({"allowed_roots": ["/no/such/dir"]})).contains("does not exist"));
        assert!(err(json!({"allowed_roots": ["/etc/hostname"]})).contains("not a directory"));
        let e = err(json!({"allowed_roots": [root()], "default_cwd": "/"}));
        assert!(
            e.contains("`default_cwd`") && e.contains("not inside"),
            "{e}"
        );
    }

    #[test]
    fn roots_are_resolved_through_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let c = parse_config(
            &with(json!({"allowed_roots": [link], "default_cwd": link})),
            &root(),
        )
        .unwrap();
        assert_eq!(c.allowed_roots, vec![real.clone()]);
        assert_eq!(c.default_cwd, real);
    }

    #[test]
    fn only_options_before_the_first_operand_make_a_shell_interactive() {
        let argv = |args: &[&str]| args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
        for yes in [
            &["/bin/bash", "-i"][..],
            &["/bin/sh", "-li"],
            &["/bin/bash", "--norc", "-i"],
            &["/bin/bash", "-O", "extglob", "-i"],
            &["/bin/bash", "-o", "vi", "-i"],
            &["/bin/bash", "--rcfile", "/x", "-i"],
            &["/bin/bash", "+o", "history", "-i"],
            &["/usr/bin/env", "bash", "-i"],
            &[
                "/usr/bin/env",
                "-u",
                "X",
                "A=1",
                "bash",
                "-eo",
                "pipefail",
                "-i",
            ],
            &["/bin/bash", "-ox", "pipefail", "-i"],
            &["/bin/bash", "-Oo", "extglob", "vi", "-i"],
            &["/usr/bin/env", "-S", "bash -i"],
            &["/usr/bin/env", "-Sbash -i"],
            &["/usr/bin/env", "/usr/bin/env", "bash", "-i"],
        ] {
            assert!(interactive_flag(&argv(yes)), "{yes:?}");
        }
        for no in [
            &["/bin/bash"][..],
            &["/bin/bash", "--noprofile", "--norc"],
            &["/bin/sh", "script.sh", "-i"],
            &["/bin/sh", "--", "-i"],
            &["/bin/bash", "-c", "exec x -i"],
            &["/bin/sh", "-x"],
            &["/bin/bash", "-o", "pipefail"],
            &["/usr/bin/env", "-i", "A=1", "bash", "-o", "pipefail"],
        ] {
            assert!(!interactive_flag(&argv(no)), "{no:?}");
        }
    }

    #[test]
    fn profile_rules() {
        let cases = [
            (json!({"argv": []}), "`commands.p.argv`: must not be empty"),
            (json!({}), "`commands.p.argv`: is required"),
            (
                json!({"argv": ["echo"]}),
                "`commands.p.argv[0]`: must be an absolute path",
            ),
            (
                json!({"argv": ["/bin/echo", 3]}),
                "`commands.p.argv[1]`: must be a string",
            ),
            (
                json!({"argv": ["/bin/echo"], "mode": "tty"}),
                "`commands.p.mode`",
            ),
            (
                json!({"argv": ["/bin/echo"], "rows": 0}),
                "`commands.p.rows`",
            ),
            (
                json!({"argv": ["/bin/echo"], "cols": 1001}),
                "`commands.p.cols`",
            ),
            (
                json!({"argv": ["/bin/echo"], "shell": "bash"}),
                "`commands.p.shell`",
            ),
            (
                json!({"argv": ["/bin/echo"], "on_full": "drop"}),
                "`commands.p.on_full`",
            ),
            (
                json!({"argv": ["/bin/bash", "--norc", "-i"], "shell": "posix"}),
                "`commands.p`: a shell on pipes with `-i`",
            ),
            (
                json!({"argv": ["/bin/sh", "-il"], "shell": "posix", "mode": "pipe"}),
                "`commands.p`: a shell on pipes with `-i`",
            ),
            (
                json!({"argv": ["/bin/echo"], "env": {"A": 1}}),
                "`commands.p.env.A`",
            ),
            (
                json!({"argv": ["/bin/echo"], "env": {"A=B": "x"}}),
                "`commands.p.env`",
            ),
            (
                json!({"argv": ["/bin/echo"], "allowed_env": ["LD_PRELOAD"]}),
                "`commands.p.allowed_env[0]`: `LD_PRELOAD` starts with the denied prefix",
            ),
            (
                json!({"argv": ["/bin/echo"], "allowed_env": ["GITHUB_TOKEN"]}),
                "`commands.p.allowed_env[0]`: `GITHUB_TOKEN` contains the denied word",
            ),
        ];
        for (profile, expected) in cases {
            let e = err(json!({"commands": {"p": profile}}));
            assert!(e.starts_with(expected), "expected {expected:?}, got {e:?}");
        }
    }

    #[test]
    fn owner_env_may_set_any_name() {
        let c = parse_config(
            &with(json!({"commands": {"p": {"argv": ["/bin/env"], "env": {"HOME": "/x", "PATH": "/a:/b"}}}})),
            &root(),
        )
        .unwrap();
        assert_eq!(c.commands["p"].env["HOME"], "/x");
    }

    #[test]
    fn command_ids_are_checked() {
        assert!(
            err(json!({"commands": {"bad id": {"argv": ["/bin/true"]}}}))
                .contains("[A-Za-z0-9._-]")
        );
        let long = "a".repeat(129);
        assert!(err(json!({"commands": {long: {"argv": ["/bin/true"]}}})).contains("1–128"));
        let many: Map<String, Value> = (0..129)
            .map(|i| (format!("c{i}"), json!({"argv": ["/bin/true"]})))
            .collect();
        assert!(err(json!({"commands": many})).contains("at most 128 profiles"));
    }

    #[test]
    fn a_held_terminal_is_allowed_no_secrets() {
        let secrets = json!({"a": {"env": "PATH"}});
        let profile = |mode: &str| {
            json!({"secrets": secrets, "commands": {"p": {"argv": ["/bin/cat"], "mode": mode,
                "on_full": "pause", "allowed_secrets": ["a"]}}})
        };
        let error = parse_config(&with(profile("pty")), &root()).unwrap_err();
        assert!(
            error.starts_with(
                "`commands.p.allowed_secrets`: a terminal profile with `on_full: \"pause\"`"
            ),
            "{error}"
        );
        assert!(parse_config(&with(profile("pipe")), &root()).is_ok());
    }

    #[test]
    fn allowed_secrets_must_name_configured_secrets() {
        // SAFETY: tests touching this variable run in this test only.
        unsafe { std::env::set_var("MCP_TERMINAL_TEST_SECRET_A", "value-of-a") };
        let secrets = json!({"a": {"env": "MCP_TERMINAL_TEST_SECRET_A"}});
        let c = parse_config(
            &with(json!({"secrets": secrets, "commands": {"p": {"argv": ["/bin/sh"], "allowed_secrets": ["a", "a"]}}})),
            &root(),
        )
        .unwrap();
        assert_eq!(c.commands["p"].allowed_secrets, ["a"]);
        assert_eq!(c.secrets["a"].value.expose(), "value-of-a");
        assert!(!c.summary().contains("value-of-a"));
        assert!(!c.to_json().to_string().contains("value-of-a"));
        let e = err(
            json!({"secrets": secrets, "commands": {"p": {"argv": ["/bin/sh"], "allowed_secrets": ["a", "b"]}}}),
        );
        assert_eq!(
            e,
            "`commands.p.allowed_secrets[1]`: `b` is not in `secrets`"
        );
        let e = err(json!({"commands": {"p": {"argv": ["/bin/sh"], "record": "yes"}}}));
        assert!(
            e.starts_with("`commands.p.record`: must be true or false"),
            "{e}"
        );
    }

    #[test]
    fn web_listen_is_a_loopback_address() {
        let c = parse_config(&with(json!({"web_listen": "127.0.0.1:9000"})), &root()).unwrap();
        assert_eq!(c.web_listen, Some("127.0.0.1:9000".parse().unwrap()));
        assert!(err(json!({"web_listen": "0.0.0.0:9000"})).contains("not a loopback"));
        assert!(err(json!({"web_listen": "localhost"})).contains("IP:PORT"));
        let c = parse_config(&with(json!({"web_listen": "localhost:9001"})), &root()).unwrap();
        assert_eq!(c.web_listen, Some("127.0.0.1:9001".parse().unwrap()));
        assert!(err(json!({"web_listen": "localhost:x"})).contains("localhost:PORT"));
        assert!(err(json!({"web_listen": 8766})).contains("must be a string"));
    }

    #[test]
    fn audit_log_needs_an_existing_directory() {
        assert!(err(json!({"audit_log": "/no/such/dir/a.jsonl"})).contains("must exist"));
        assert!(err(json!({"audit_log": "relative.jsonl"})).contains("absolute"));
        let c = parse_config(&with(json!({"audit_log": root().join("a.jsonl")})), &root()).unwrap();
        assert_eq!(c.audit_log, Some(root().join("a.jsonl")));
    }
}
