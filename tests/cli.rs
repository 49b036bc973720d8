//! The command line contract: `make-config`, `check-config`, `stdio` with a bad config, help
//! and usage errors — exit codes, where messages go, and that stdout stays clean.

use std::path::Path;

use assert_cmd::Command;
use serde_json::{Value, json};

mod support;

use support::config::config_with;
use support::stderr::{stderr_of, stdout_of};

/// The binary with HOME and XDG_CONFIG_HOME in an empty temporary directory, so no test
/// reads or writes the owner's real config.
fn mcp_terminal() -> Command {
    static HOME: std::sync::LazyLock<tempfile::TempDir> =
        std::sync::LazyLock::new(|| tempfile::tempdir().unwrap());
    in_home(HOME.path())
}

/// The binary with HOME at `home` and no XDG_CONFIG_HOME.
fn in_home(home: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcp-terminal"));
    cmd.env("HOME", home).env_remove("XDG_CONFIG_HOME");
    cmd
}

/// `stdio` with `args` under `cmd` refuses to start: it exits 2 before it speaks, with
/// nothing on stdout. Its stderr.
fn stdio_refused(mut cmd: Command, args: &[&std::ffi::OsStr]) -> String {
    let out = cmd
        .arg("stdio")
        .args(args)
        .write_stdin("")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "", "nothing but protocol frames on stdout");
    stderr_of(&out)
}

/// `check-config --config PATH`, expected to pass; its summary.
fn checked_summary(path: &Path) -> String {
    let out = mcp_terminal()
        .args(["check-config", "--config"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    stdout_of(&out)
}

/// Set the value at a JSON pointer, creating the last key if needed.
fn set(config: &mut Value, pointer: &str, value: Value) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    config.pointer_mut(parent).unwrap()[key] = value;
}

#[test]
fn make_config_writes_every_field_with_absolute_paths_and_checks_clean() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let path = dir.path().join("nested/dir/config.json");
    let made = mcp_terminal()
        .args(["make-config", "--output"])
        .arg(&path)
        .arg("--root")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr_of(&made));
    assert_eq!(stdout_of(&made), "", "make-config prints nothing on stdout");
    let written = std::fs::read_to_string(&path).unwrap();
    // Made again on the same path: refused, the owner's file untouched.
    let again = mcp_terminal()
        .args(["make-config", "--shells", "--output"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2), "{}", stderr_of(&again));
    assert!(stderr_of(&again).contains("already exists and is not overwritten"));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), written);
    let config: Value = serde_json::from_str(&written).unwrap();
    assert_eq!(config["allowed_roots"], json!([root]));
    assert_eq!(config["default_cwd"], json!(root));
    for field in [
        "max_sessions",
        "max_records",
        "buffer_bytes",
        "buffer_records",
        "default_timeout_ms",
        "max_timeout_ms",
        "retention_seconds",
        "max_input_bytes",
        "max_wait_ms",
        "audit_log",
    ] {
        assert!(config.get(field).is_some(), "{field} is written");
    }
    let demo = Path::new(env!("CARGO_BIN_EXE_mcp-terminal")).with_file_name("demo-process");
    let demo = demo.canonicalize().unwrap();
    let commands = config["commands"].as_object().unwrap();
    assert_eq!(commands.len(), 15);
    for (id, profile) in commands {
        assert_eq!(
            profile["argv"][0],
            json!(demo),
            "{id} points at demo-process"
        );
    }
    assert_eq!(commands["pty-tui"]["mode"], "pty");

    let summary = checked_summary(&path);
    assert!(
        summary.contains(&format!("allowed_roots: {}", root.display())),
        "{summary}"
    );
    assert!(summary.contains("commands (15):"), "{summary}");
}

#[test]
fn check_config_names_the_field_and_rule_and_exits_2() {
    let cases = [
        (
            "/commands/stream/allowed_env",
            json!(["LD_PRELOAD"]),
            "`commands.stream.allowed_env[0]`: `LD_PRELOAD` starts with the denied prefix",
        ),
        (
            "/commands/stream/allowed_env",
            json!(["GITHUB_TOKEN"]),
            "`commands.stream.allowed_env[0]`: `GITHUB_TOKEN` contains the denied word TOKEN",
        ),
        (
            "/max_sessions",
            json!(true),
            "`max_sessions`: must be an integer from 1 to 64, got a boolean true",
        ),
        (
            "/max_records",
            json!(4),
            "`max_records`: must be at least max_sessions (8), got 4",
        ),
        ("/surprise", json!(1), "`surprise`: unknown field"),
        (
            "/commands/long/argv",
            json!(["sleep", "1"]),
            "`commands.long.argv[0]`: must be an absolute path",
        ),
    ];
    for (pointer, value, message) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = config_with(dir.path(), false, |c| set(c, pointer, value));
        let out = mcp_terminal()
            .args(["check-config", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{message}");
        assert_eq!(stdout_of(&out), "");
        assert!(
            stderr_of(&out).contains(message),
            "expected {message:?} in {:?}",
            stderr_of(&out)
        );
    }
}

#[test]
fn stdio_with_a_bad_config_exits_2_before_speaking() {
    let dir = tempfile::tempdir().unwrap();
    let path = config_with(dir.path(), false, |c| set(c, "/buffer_bytes", json!(3)));
    let stderr = stdio_refused(mcp_terminal(), &["--config".as_ref(), path.as_os_str()]);
    assert!(stderr.contains("`buffer_bytes`: must be an integer from 4 to 16777216"));

    let missing = mcp_terminal()
        .args(["stdio", "--config", "/no/such/config.json"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(stdout_of(&missing), "");
}

#[test]
fn help_version_and_usage_errors() {
    let help = mcp_terminal().arg("--help").output().unwrap();
    assert!(help.status.success());
    for command in ["stdio", "make-config", "check-config"] {
        assert!(stdout_of(&help).contains(command), "--help lists {command}");
    }
    let version = mcp_terminal().arg("--version").output().unwrap();
    assert_eq!(
        stdout_of(&version).trim(),
        format!("mcp-terminal {}", env!("CARGO_PKG_VERSION"))
    );
    for args in [
        &["bogus"][..],
        &["make-config", "--bogus"],
        &["check-config"],
        &["profile", "add", "x"],
        &["stdio", "--nope"],
        // An origin that no browser sends could never match: refused, not kept.
        &["http", "--allow-origin", "app.example.com"],
        &["http", "--allow-origin", "https://app.example.com/path"],
        &["http", "--allow-origin", "https://app.example.com:99999"],
        &["http", "--allow-origin", "https://app.example.com:"],
        &["http", "--allow-origin", "ftp://app.example.com"],
    ] {
        let out = mcp_terminal().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(stdout_of(&out), "", "{args:?}");
    }
    let refused = mcp_terminal()
        .args(["http", "--allow-origin", "app.example.com"])
        .output()
        .unwrap();
    assert!(
        stderr_of(&refused).contains("is not an origin: give scheme://host[:port]"),
        "{}",
        stderr_of(&refused)
    );
}

/// A profile whose program is not here is no config error (the config may be for another
/// machine), but check-config says that starting it would fail.
#[test]
fn check_config_notes_a_program_that_is_not_here() {
    let dir = tempfile::tempdir().unwrap();
    let path = config_with(dir.path(), false, |c| {
        set(
            c,
            "/commands/gone",
            json!({"argv": ["/no/such/program", "x"]}),
        );
        set(c, "/commands/folder", json!({"argv": ["/tmp"]}));
    });
    let summary = checked_summary(&path);
    for (program, id) in [("/no/such/program", "gone"), ("/tmp", "folder")] {
        assert!(
            summary.contains(&format!(
                "note: `{program}` is not an executable file here; starting `{id}` fails"
            )),
            "{summary}"
        );
    }
    assert_eq!(summary.matches("note:").count(), 2, "{summary}");
}

/// Each of these makes a program or a shell run code of the client's choosing; a profile
/// that lets the client set one is refused.
#[test]
fn allowed_env_refuses_every_name_that_runs_code() {
    let names = [
        "PERL5LIB",
        "PERLLIB",
        "RUBYLIB",
        "NODE_OPTIONS",
        "NODE_PATH",
        "PROMPT_COMMAND",
        "PS1",
        "BASH_FUNC_ls%%",
        "GLIBC_TUNABLES",
        "GIT_SSH_COMMAND",
        "GIT_CONFIG_COUNT",
        "LESSOPEN",
        "PAGER",
        "GIT_PAGER",
        "EDITOR",
        "VISUAL",
        "SHELLOPTS",
        "SSH_ASKPASS",
    ];
    let dir = tempfile::tempdir().unwrap();
    for name in names {
        let path = config_with(dir.path(), false, |c| {
            set(c, "/commands/stream/allowed_env", json!(["GREETING", name]))
        });
        let out = mcp_terminal()
            .args(["check-config", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}");
        let message = stderr_of(&out);
        let expected = format!("`commands.stream.allowed_env[1]`: `{name}` ");
        assert!(
            message.contains(&expected) && message.contains("clients may never set it"),
            "{name}: {message}"
        );
    }
}

#[test]
fn check_config_shows_which_profiles_are_shells_and_every_option_has_help() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    mcp_terminal()
        .args(["make-config", "--shells", "--output"])
        .arg(&path)
        .arg("--root")
        .arg(dir.path())
        .assert()
        .success();
    let summary = checked_summary(&path);
    let line = |id: &str| {
        summary
            .lines()
            .find(|l| l.split_whitespace().next() == Some(id))
            .unwrap_or_else(|| panic!("no `{id}` in {summary}"))
            .to_owned()
    };
    assert!(line("sh").contains(" pipe shell "), "{summary}");
    assert!(!line("stream").contains("shell"), "{summary}");

    // Every option of these commands says what it is.
    for args in [
        &["profile", "add", "--help"][..],
        &["profile", "list", "--help"],
        &["profile", "remove", "--help"],
        &["check-config", "--help"],
    ] {
        let help = stdout_of(&mcp_terminal().args(args).output().unwrap());
        let config = help
            .lines()
            .find(|l| l.trim_start().starts_with("--config"))
            .unwrap_or_else(|| panic!("{args:?}: {help}"));
        assert!(
            config.contains("default config file"),
            "{args:?}: `{config}` has no help text"
        );
    }
}

#[test]
fn stdio_on_immediate_eof_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    mcp_terminal()
        .arg("stdio")
        .current_dir(dir.path())
        .write_stdin("")
        .assert()
        .code(0)
        .stdout("");
}

#[test]
fn check_config_names_a_bad_secret_and_never_prints_its_value() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let value = "Cli-Secret-Value-0042";
    let pass = dir.path().canonicalize().unwrap().join("deploy.pass");
    std::fs::write(&pass, format!("{value}\n")).unwrap();
    std::fs::set_permissions(&pass, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = config_with(dir.path(), false, |c| {
        set(
            c,
            "/secrets",
            json!({"deploy": {"file": pass}, "db": {"env": "MCPT_CLI_DB"}}),
        );
        set(
            c,
            "/commands/interactive/allowed_secrets",
            json!(["deploy", "db"]),
        );
    });
    let check = || {
        mcp_terminal()
            .args(["check-config", "--config"])
            .arg(&path)
            .env("MCPT_CLI_DB", value)
            .output()
            .unwrap()
    };
    let out = check();
    assert_eq!(out.status.code(), Some(2));
    let stderr = stderr_of(&out);
    assert!(
        stderr.contains("`secrets.deploy`:") && stderr.contains("chmod 600"),
        "{stderr}"
    );
    assert!(!stderr.contains(value) && !stdout_of(&out).contains(value));

    std::fs::set_permissions(&pass, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = check();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let summary = stdout_of(&out);
    assert!(
        summary.contains("secret deploy: from the file"),
        "{summary}"
    );
    assert!(summary.contains("secret db: from the environment variable MCPT_CLI_DB"));
    assert!(summary.contains("secrets:deploy,db"), "{summary}");
    assert!(!summary.contains(value) && !stderr_of(&out).contains(value));

    // The owner's shell usually lacks an `env` secret's variable, which belongs where the
    // MCP client starts the server: the owner's commands say so and go on...
    let out = mcp_terminal()
        .args(["check-config", "--config"])
        .arg(&path)
        .env_remove("MCPT_CLI_DB")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(
        stdout_of(&out).contains(
            "secret db: from the environment variable MCPT_CLI_DB (not set here: set it where \
             the MCP client starts the server)"
        ),
        "{}",
        stdout_of(&out)
    );
    for args in [
        &["list"][..],
        &["add", "echo2", "--", "/bin/echo"],
        &["remove", "echo2"],
    ] {
        let out = mcp_terminal()
            .arg("profile")
            .arg(args[0])
            .arg("--config")
            .arg(&path)
            .args(&args[1..])
            .env_remove("MCPT_CLI_DB")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr_of(&out));
    }
    // ...and the server, which needs the value, refuses to start without it.
    let mut server = mcp_terminal();
    server.env_remove("MCPT_CLI_DB");
    let stderr = stdio_refused(server, &["--config".as_ref(), path.as_os_str()]);
    assert!(
        stderr.contains("`secrets.db`: the server's environment has no variable MCPT_CLI_DB"),
        "{stderr}"
    );
}

#[test]
fn every_command_uses_the_default_config_path_when_config_is_absent() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().canonicalize().unwrap();
    let default = root.join(".config/mcp-terminal/config.json");
    let out = in_home(&root).args(["check-config"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_of(&out).contains("make-config"),
        "{}",
        stderr_of(&out)
    );

    in_home(&root)
        .args(["make-config", "--shells", "--root"])
        .arg(&root)
        .assert()
        .success();
    assert!(default.is_file());
    let again = in_home(&root)
        .args(["make-config", "--root"])
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(
        again.status.code(),
        Some(2),
        "the owner's file is never overwritten"
    );
    assert!(stderr_of(&again).contains("already exists"));

    let summary = in_home(&root).args(["check-config"]).output().unwrap();
    assert!(summary.status.success(), "{}", stderr_of(&summary));
    assert!(stdout_of(&summary).contains("/bin/sh"));

    in_home(&root)
        .args(["profile", "add", "hello", "--", "echo", "hi"])
        .assert()
        .success();
    let listed = in_home(&root).args(["profile", "list"]).output().unwrap();
    let listed = stdout_of(&listed);
    let hello = listed.lines().find(|l| l.starts_with("hello\t")).unwrap();
    assert!(
        hello.ends_with("/echo hi") && hello.contains("\t/"),
        "{hello}"
    );
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("sh\tpipe shell\t/bin/sh")),
        "{listed}"
    );

    // stdio reads the default file too: a broken one stops it before it speaks.
    std::fs::write(&default, "{\"max_sessions\": 0}").unwrap();
    let stderr = stdio_refused(in_home(&root), &[]);
    assert!(stderr.contains("max_sessions"), "{stderr}");

    // XDG_CONFIG_HOME wins over HOME.
    let xdg = root.join("xdg");
    let out = in_home(&root)
        .env("XDG_CONFIG_HOME", &xdg)
        .args(["make-config", "--root"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(xdg.join("mcp-terminal/config.json").is_file());
}

#[test]
fn profile_add_validates_and_rewrites_atomically_keeping_the_rest() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = config_with(dir.path(), false, |c| set(c, "/max_sessions", json!(3)));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let profile = |args: &[&str]| {
        mcp_terminal()
            .args(["profile", args[0], "--config"])
            .arg(&path)
            .args(&args[1..])
            .output()
            .unwrap()
    };

    let out = profile(&[
        "add",
        "bash",
        "--pty",
        "--rows",
        "30",
        "--cols",
        "100",
        "--shell",
        "--allow-env",
        "GREETING",
        "--description",
        "my shell",
        "--env",
        "PAGER=cat",
        "--env",
        "GREETING=a=b c",
        "--",
        "bash",
        "--norc",
        "-i",
    ]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(
        stdout_of(&out).contains("terminal_exec"),
        "a shell's meaning is spelled out"
    );
    assert!(
        stdout_of(&out).contains("a server already running keeps the profiles it started with"),
        "that a running server does not see it is said"
    );
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let bash = &after["commands"]["bash"];
    let argv0 = bash["argv"][0].as_str().unwrap();
    assert!(
        argv0.starts_with('/') && argv0.ends_with("/bash"),
        "{argv0}"
    );
    assert_eq!(
        bash["argv"].as_array().unwrap()[1..],
        [json!("--norc"), json!("-i")]
    );
    assert_eq!(bash["mode"], "pty");
    assert_eq!(
        (bash["rows"].clone(), bash["cols"].clone()),
        (json!(30), json!(100))
    );
    assert_eq!(bash["shell"], "posix");
    assert_eq!(bash["allowed_env"], json!(["GREETING"]));
    assert_eq!(bash["description"], "my shell");
    assert_eq!(bash["env"], json!({"PAGER": "cat", "GREETING": "a=b c"}));
    let mut rest = after.clone();
    rest["commands"].as_object_mut().unwrap().remove("bash");
    assert_eq!(rest, before, "other fields and profiles are untouched");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    mcp_terminal()
        .arg("check-config")
        .arg("--config")
        .arg(&path)
        .assert()
        .success();

    // Refusals leave the file as it was.
    let text = std::fs::read_to_string(&path).unwrap();
    for (args, message) in [
        (&["add", "bash", "--", "sh"][..], "already exists"),
        (
            &["add", "envy", "--allow-env", "PATH", "--", "sh"][..],
            "allowed_env",
        ),
        (
            &["add", "ghost", "--", "no-such-program-anywhere"][..],
            "not an executable",
        ),
        (&["add", "bad id", "--", "sh"][..], "[A-Za-z0-9._-]"),
        (
            &["add", "noeq", "--env", "NAME", "--", "sh"][..],
            "NAME=VALUE",
        ),
        (
            &["add", "lost", "--cwd-root", "/no/such/dir", "--", "sh"][..],
            "--cwd-root",
        ),
        (&["remove", "nope"][..], "no profile `nope`"),
    ] {
        let out = profile(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr_of(&out).contains(message),
            "{args:?}: {}",
            stderr_of(&out)
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "{args:?}");
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());

    let out = profile(&["remove", "bash"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let removed: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(removed, before);

    // A directory of its own, added to the allowed roots (once, canonical).
    let work = tempfile::tempdir().unwrap();
    let link = dir.path().join("work-link");
    std::os::unix::fs::symlink(work.path(), &link).unwrap();
    for _ in 0..2 {
        let out = profile(&[
            "add",
            "make",
            "--cwd-root",
            link.to_str().unwrap(),
            "--",
            "make",
            "-j2",
        ]);
        assert!(out.status.success(), "{}", stderr_of(&out));
        profile(&["remove", "make"]);
    }
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let canonical = std::fs::canonicalize(work.path()).unwrap();
    let roots = after["allowed_roots"].as_array().unwrap();
    assert_eq!(
        roots.len(),
        before["allowed_roots"].as_array().unwrap().len() + 1
    );
    assert_eq!(roots.last().unwrap(), &json!(canonical.to_str().unwrap()));
}

/// A config reached through a symlink (a dotfiles checkout) is edited where it lives, the
/// link kept; and edits made at once each see the one before: none is lost.
#[test]
fn profile_edits_keep_a_symlinked_config_and_lose_nothing_at_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("dotfiles")).unwrap();
    let real = config_with(&dir.path().join("dotfiles"), false, |_| {});
    let link = dir.path().join("config.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let adds: Vec<_> = (0..8)
        .map(|i| {
            std::process::Command::new(env!("CARGO_BIN_EXE_mcp-terminal"))
                .env("HOME", dir.path())
                .env_remove("XDG_CONFIG_HOME")
                .args(["profile", "add", &format!("p{i}"), "--config"])
                .arg(&link)
                .args(["--", "/bin/true"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut add in adds {
        assert!(add.wait().unwrap().success());
    }
    // The link is still a link, and the file it names has every edit.
    let edited = || {
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        serde_json::from_str::<Value>(&std::fs::read_to_string(&real).unwrap()).unwrap()
    };
    let config = edited();
    for i in 0..8 {
        assert!(
            config["commands"].get(format!("p{i}")).is_some(),
            "p{i}: {config}"
        );
    }
    let out = mcp_terminal()
        .args(["profile", "remove", "p3", "--config"])
        .arg(&link)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let config = edited();
    assert!(config["commands"].get("p3").is_none());
    assert!(config["commands"].get("p4").is_some());
}

/// A config that gives a key twice is refused, naming the key: serde_json would keep the
/// last, and the first `commands` would be lost without a word.
#[test]
fn a_config_giving_a_key_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    let root = dir.path().display();
    let twice = format!(
        r#"{{"allowed_roots": ["{root}"],
            "commands": {{"a": {{"argv": ["/bin/true"]}}}},
            "commands": {{"b": {{"argv": ["/bin/true"], "argv": ["/bin/false"]}}}}}}"#
    );
    std::fs::write(&path, twice).unwrap();
    for args in [
        &["check-config"][..],
        &["profile", "list"],
        &["profile", "remove", "b"],
    ] {
        let out = mcp_terminal()
            .args(args)
            .arg("--config")
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr_of(&out);
        assert!(err.contains("`commands` is given twice"), "{args:?}: {err}");
    }
    assert!(
        stdio_refused(mcp_terminal(), &["--config".as_ref(), path.as_os_str()])
            .contains("`commands` is given twice")
    );
}

/// A config without `commands` (or with `null`) approves the demo profiles. An edit writes
/// them out and changes only the profile it names, saying so; `profile list` and
/// `check-config` show each command line as a shell reads it back.
#[test]
fn profile_edits_of_a_config_without_commands_change_only_what_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    for commands in [None, Some(Value::Null)] {
        let path = dir.path().join("config.json");
        let mut config = json!({ "allowed_roots": [root] });
        if let Some(commands) = commands.clone() {
            config["commands"] = commands;
        }
        std::fs::write(&path, config.to_string()).unwrap();
        let demo = checked_summary(&path);
        assert!(demo.contains("commands (15)"), "{demo}");
        let run = |args: &[&str]| {
            let out = mcp_terminal()
                .args(["profile", args[0], "--config"])
                .arg(&path)
                .args(&args[1..])
                .output()
                .unwrap();
            assert!(out.status.success(), "{args:?}: {}", stderr_of(&out));
            stdout_of(&out)
        };
        let added = run(&["add", "two", "--", "/bin/echo", "a b", "it's"]);
        assert!(added.contains("approves the 15 demo profiles"), "{added}");
        assert!(added.contains(r#"/bin/echo 'a b' "it's""#), "{added}");
        let list = run(&["list"]);
        assert_eq!(list.lines().count(), 16, "{commands:?}: {list}");
        assert!(
            list.contains("two\tpipe\t/bin/echo 'a b' \"it's\"\n"),
            "{list}"
        );
        assert!(list.contains("\nflood\tpipe\t"), "{list}");
        assert!(checked_summary(&path).contains("commands (16)"));
        // Once written out, a later edit has nothing more to say about them.
        let removed = run(&["remove", "flood"]);
        assert!(!removed.contains("demo"), "{removed}");
        assert_eq!(run(&["list"]).lines().count(), 15);

        // Withdrawing a demo profile from a config without `commands` keeps the others.
        std::fs::write(&path, config.to_string()).unwrap();
        let removed = run(&["remove", "flood"]);
        assert!(
            removed.contains("the others are now written out"),
            "{removed}"
        );
        let list = run(&["list"]);
        assert_eq!(list.lines().count(), 14, "{list}");
        assert!(!list.contains("flood"), "{list}");
    }
}

/// The audit log is appended to only as a regular file of the server's user: not through a
/// symlink (whose target would get the lines), not a FIFO (whose open would block), and an
/// existing file that others could read is made private.
#[test]
fn an_audit_log_is_never_opened_through_a_symlink_and_is_kept_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let target = root.join("elsewhere.txt");
    std::fs::write(&target, "").unwrap();
    let link = root.join("audit-link.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let fifo = root.join("audit-fifo.jsonl");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let serve = |audit: &std::path::Path| {
        let config = config_with(dir.path(), false, |c| set(c, "/audit_log", json!(audit)));
        mcp_terminal()
            .arg("stdio")
            .arg("--config")
            .arg(&config)
            .write_stdin("")
            .timeout(std::time::Duration::from_secs(30))
            .output()
            .unwrap()
    };
    let check = |audit: &std::path::Path| {
        let config = config_with(dir.path(), false, |c| set(c, "/audit_log", json!(audit)));
        mcp_terminal()
            .args(["check-config", "--config"])
            .arg(&config)
            .timeout(std::time::Duration::from_secs(30))
            .output()
            .unwrap()
    };
    let directory = root.join("audit-dir.jsonl");
    std::fs::create_dir(&directory).unwrap();
    for (path, why) in [
        (&link, "is a symbolic link"),
        (&fifo, "is not a regular file"),
        (&directory, "cannot be opened"),
    ] {
        let out = serve(path);
        assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
        assert!(stderr_of(&out).contains(why), "{}", stderr_of(&out));
        assert!(out.stdout.is_empty());
        // check-config says the same, so an owner's check never passes what the server
        // then refuses.
        let checked = check(path);
        assert_eq!(checked.status.code(), Some(2), "{}", stderr_of(&checked));
        assert!(stderr_of(&checked).contains(why), "{}", stderr_of(&checked));
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
    // A log that does not exist yet passes, and is not made by the check.
    let fresh = root.join("fresh.jsonl");
    assert!(check(&fresh).status.success());
    assert!(!fresh.exists());

    let shared = root.join("audit.jsonl");
    std::fs::write(&shared, "").unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = serve(&shared);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let mode = std::fs::metadata(&shared).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

/// A `file` secret is read only from a private regular file of the server's user, and no
/// more than a value's length is ever read from it.
#[test]
fn file_secrets_come_only_from_a_private_file_and_are_never_read_past_their_cap() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let real = root.join("real.pass");
    std::fs::write(&real, "Cli-Secret-Value-0042\n").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = root.join("link.pass");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    // 64 GiB of nothing (a sparse file): reading it whole would exhaust the memory.
    let huge = root.join("huge.pass");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(64 << 30)
        .unwrap();
    std::fs::set_permissions(&huge, std::fs::Permissions::from_mode(0o600)).unwrap();
    for (path, why) in [
        (&link, "is a symbolic link"),
        (&huge, "must be 4 to 4096 bytes"),
    ] {
        let config = config_with(dir.path(), false, |c| {
            set(c, "/secrets", json!({"deploy": {"file": path}}))
        });
        let out = mcp_terminal()
            .args(["check-config", "--config"])
            .arg(&config)
            .timeout(std::time::Duration::from_secs(30))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
        let stderr = stderr_of(&out);
        assert!(
            stderr.contains("`secrets.deploy`: ") && stderr.contains(why),
            "{stderr}"
        );
        assert!(!stderr.contains("Cli-Secret"), "{stderr}");
    }
}

#[test]
fn an_audit_log_that_cannot_be_opened_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = config_with(dir.path(), false, |c| {
        set(c, "/audit_log", json!("/no/such/dir/audit.jsonl"))
    });
    let out = mcp_terminal()
        .arg("check-config")
        .arg("--config")
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr_of(&out).contains("`audit_log`"),
        "{}",
        stderr_of(&out)
    );

    // /proc takes no new files, whoever asks: a directory nothing can be created in.
    let unwritable = config_with(dir.path(), false, |c| {
        set(c, "/audit_log", json!("/proc/audit.jsonl"))
    });
    let stderr = stdio_refused(
        mcp_terminal(),
        &["--config".as_ref(), unwritable.as_os_str()],
    );
    assert!(stderr.contains("`audit_log`: cannot open"), "{stderr}");
}

/// The server's memory holds secret values and tokens: another process of its user (a
/// session's shell) cannot read it, as `/proc/PID/environ` and `/proc/PID/mem` need the
/// access a debugger needs, which a process that is not dumpable refuses its own user.
/// `MCP_TERMINAL_DUMPABLE=1` keeps it readable. Run as root, the server and the reader run
/// as an unprivileged user (65534); elsewhere the test is skipped.
#[test]
fn another_process_of_the_servers_user_cannot_read_its_memory() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: running the server as another user needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    for (keep, readable) in [("0", false), ("1", true)] {
        let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-terminal"))
            .arg("stdio")
            .current_dir(dir.path())
            .env("HOME", dir.path())
            .env_remove("XDG_CONFIG_HOME")
            .env("MCP_TERMINAL_DUMPABLE", keep)
            .uid(65534)
            .gid(65534)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Once it answers, it has set itself up. Its stdout stays open until it was read:
        // a server whose client closed it ends.
        let mut stdin = server.stdin.take().unwrap();
        writeln!(
            stdin,
            r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
        )
        .unwrap();
        let mut answer = String::new();
        let mut stdout = BufReader::new(server.stdout.take().unwrap());
        stdout.read_line(&mut answer).unwrap();
        assert!(answer.contains("\"result\""), "{answer}");
        let read = std::process::Command::new("/bin/cat")
            .arg(format!("/proc/{}/environ", server.id()))
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        drop((stdin, stdout));
        server.wait().unwrap();
        assert_eq!(
            read.status.success(),
            readable,
            "MCP_TERMINAL_DUMPABLE={keep}: {}",
            String::from_utf8_lossy(&read.stderr)
        );
        if !readable {
            assert!(String::from_utf8_lossy(&read.stderr).contains("Permission denied"));
        }
    }
}

/// A client that never reads the server's stderr lets its pipe fill; the server goes on
/// answering (its log lines are dropped and counted, never waited for), where a log write
/// on the serving thread once stopped every call after a few hundred sessions.
#[test]
fn a_client_that_never_reads_stderr_is_still_answered() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let config = config_with(dir.path(), false, |c| {
        c["commands"]["true"] = json!({"argv": ["/bin/true"], "description": "exit 0"});
    });
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-terminal"))
        .args(["stdio", "--config"])
        .arg(&config)
        .env("MCP_TERMINAL_LOG", "debug")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // Piped, and never read.
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let (answers, answered) = std::sync::mpsc::channel();
    let stdout = server.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if answers.send(line).is_err() {
                break;
            }
        }
    });
    let mut ask = |id: u64, method: &str, params: Value| -> Value {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{request}").unwrap();
        let line = answered
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no answer to request {id}"));
        serde_json::from_str(&line).unwrap()
    };
    ask(
        0,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "t", "version": "1"}}),
    );
    // Each run logs its session's start and end: far more than the pipe's 64 KiB.
    for id in 1..=600 {
        let run = ask(
            id,
            "tools/call",
            json!({"name": "terminal_run", "arguments": {"command_id": "true"}}),
        );
        let result = &run["result"]["structuredContent"];
        assert_eq!(result["exit_code"], json!(0), "{run}");
        let sid = result["session"]["session_id"].clone();
        ask(
            id + 10_000,
            "tools/call",
            json!({"name": "terminal_forget", "arguments": {"session_id": sid}}),
        );
    }
    drop(stdin);
    assert!(server.wait().unwrap().success());
}
