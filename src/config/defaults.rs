//! The built-in defaults: the demo profiles (the only commands a default config approves)
//! and a config rooted at one directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Config, Limits, Mode, Profile, Shell};
use crate::limits::SHELL_IDLE_TIMEOUT_MS;

/// Demo profiles on pipes: id (= `demo-process` mode), description.
const DEMO_PROFILES: &[(&str, &str)] = &[
    (
        "stream",
        "prints 5 numbered lines on stdout and on stderr, then exits 0",
    ),
    (
        "interactive",
        "prints `ready`, echoes each line as `echo: <line>`; on EOF prints `bye`, exits 0",
    ),
    ("long", "prints `running` and runs until it is terminated"),
    (
        "unicode",
        "prints multi-byte text (CJK, emoji, combining marks), then exits 0",
    ),
    (
        "flood",
        "prints 20000 lines of 100 bytes, then `flood total: 2000000 code points`",
    ),
    ("exit7", "prints `exiting with 7` and exits with code 7"),
    ("empty", "prints nothing and exits 0"),
    (
        "children",
        "starts same-group children, prints `child <pid>` each and `ready`; exits on EOF",
    ),
    (
        "closed-stdin",
        "closes its own stdin, prints `stdin closed`, keeps running",
    ),
    (
        "split-utf8",
        "writes multi-byte characters one byte per flushed write, then `done`",
    ),
    (
        "invalid-utf8",
        "writes invalid UTF-8 sequences and an incomplete one at EOF",
    ),
    ("eof", "reads stdin to EOF and prints `read <n> bytes`"),
    (
        "ignore-term",
        "prints `ignoring SIGTERM` and ignores it: only SIGKILL ends it",
    ),
    (
        "escape",
        "starts a setsid daemon that writes for 30 s (beyond process-group cleanup), prints \
         `daemon <pid>`, exits",
    ),
];

/// The demo profile on a terminal.
const PTY_TUI: (&str, &str) = (
    "pty-tui",
    "full-screen UI (alternate screen): size, key count, last key, a counter (+/-/Up/Down); \
     redraws on resize; q quits",
);

/// Where `demo-process` is: the sibling of this executable (both are installed together).
pub fn demo_process_path() -> PathBuf {
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .unwrap_or_else(|_| PathBuf::from("/usr/local/bin/mcp-terminal"));
    exe.with_file_name("demo-process")
}

fn demo_profiles() -> BTreeMap<String, Profile> {
    let demo = demo_process_path().display().to_string();
    let profile = |id: &str, description: &str| {
        let argv = vec![demo.clone(), id.to_owned()];
        (id.to_owned(), Profile::new(argv, description))
    };
    let mut profiles: BTreeMap<String, Profile> = DEMO_PROFILES
        .iter()
        .map(|(id, description)| profile(id, description))
        .collect();
    let (id, description) = PTY_TUI;
    let (id, mut tui) = profile(id, description);
    tui.mode = Mode::Pty;
    profiles.insert(id, tui);
    profiles
}

/// The shell profiles `make-config --shells` approves: `sh` on pipes, and `bash` on a
/// terminal when bash is installed. Both end after half an hour without a tool call, and
/// run in an environment where nothing waits for a person: the owner's `HOME`, `USER` and
/// `LOGNAME`, and `cat` as every pager (git, man), so a command never stops in `less`.
pub fn shell_profiles() -> BTreeMap<String, Profile> {
    let env = shell_env();
    let shell = |argv: Vec<&str>, mode: Mode, description: &str| {
        let mut profile = Profile::new(argv.into_iter().map(str::to_owned).collect(), description);
        profile.mode = mode;
        profile.shell = Some(Shell::Posix);
        profile.idle_timeout_ms = Some(SHELL_IDLE_TIMEOUT_MS);
        profile.env = env.clone();
        profile
    };
    let mut profiles = BTreeMap::new();
    profiles.insert(
        "sh".to_owned(),
        shell(
            vec!["/bin/sh"],
            Mode::Pipe,
            "POSIX shell on pipes, for terminal_exec",
        ),
    );
    if let Some(bash) = ["/bin/bash", "/usr/bin/bash"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
    {
        profiles.insert(
            "bash".to_owned(),
            shell(
                vec![bash, "--noprofile", "--norc", "-i"],
                Mode::Pty,
                "interactive bash on a terminal, for terminal_exec",
            ),
        );
    }
    profiles
}

/// The variables shell profiles set: who the owner is, and pagers that never wait.
fn shell_env() -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> =
        [("PAGER", "cat"), ("GIT_PAGER", "cat"), ("MANPAGER", "cat")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
    let user = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten();
    let home = std::env::var("HOME")
        .ok()
        .filter(|h| Path::new(h).is_absolute())
        .or_else(|| user.as_ref().map(|u| u.dir.display().to_string()));
    if let Some(home) = home {
        env.insert("HOME".into(), home);
    }
    if let Some(user) = user {
        env.insert("USER".into(), user.name.clone());
        env.insert("LOGNAME".into(), user.name);
    }
    env
}

/// The demo profiles as a config's `commands` writes them: what a config without
/// `commands` approves.
pub fn demo_commands() -> serde_json::Map<String, serde_json::Value> {
    demo_profiles()
        .iter()
        .map(|(id, p)| (id.clone(), p.to_json()))
        .collect()
}

/// The default config with `root` (canonical) as the only allowed root and default cwd.
pub fn default_config(root: &Path) -> Config {
    Config {
        allowed_roots: vec![root.to_path_buf()],
        default_cwd: root.to_path_buf(),
        commands: demo_profiles(),
        limits: Limits::default(),
        audit_log: None,
        secrets: BTreeMap::new(),
        recordings_dir: None,
        web_listen: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_round_trips_through_the_validator() {
        let root = std::env::temp_dir().canonicalize().unwrap();
        let config = default_config(&root);
        assert_eq!(config.commands.len(), 15);
        assert_eq!(config.commands["pty-tui"].mode, Mode::Pty);
        let parsed = super::super::parse_config(&config.to_json(), &root).unwrap();
        assert_eq!(parsed, config);
    }

    #[test]
    fn shell_profiles_round_trip_through_the_validator() {
        let root = std::env::temp_dir().canonicalize().unwrap();
        let mut config = default_config(&root);
        config.commands.extend(shell_profiles());
        assert_eq!(config.commands["sh"].shell, Some(Shell::Posix));
        assert_eq!(config.commands["sh"].idle_timeout_ms, Some(1_800_000));
        let env = &config.commands["sh"].env;
        for (name, value) in [("PAGER", "cat"), ("GIT_PAGER", "cat"), ("MANPAGER", "cat")] {
            assert_eq!(env[name], value);
        }
        assert!(env.contains_key("HOME") && env.contains_key("USER"));
        let parsed = super::super::parse_config(&config.to_json(), &root).unwrap();
        assert_eq!(parsed, config);
    }
}
