//! The owner's policy rules that both the config loader and the tools apply: which
//! environment variable names a client may ever set, and which working directories are
//! inside the allowed roots.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::errors::{ErrorCode, ToolError};
use crate::process::is_out_of_files;

/// Names a client may never set, whatever the profile allows (case-insensitive). Each one
/// makes a program, or the shell, or a library loaded by every program, run code or load it
/// from a place the variable names. The list is defence in depth, not a guarantee: the
/// owner approves `allowed_env` knowing the programs.
const DENIED_NAMES: &[&str] = &[
    // Where programs come from and how the shell starts.
    "PATH",
    "HOME",
    "SHELL",
    "ENV",
    "BASH_ENV",
    "IFS",
    "CDPATH",
    "SHELLOPTS",
    "BASHOPTS",
    "ZDOTDIR",
    // Expanded by an interactive shell at each prompt or command: command substitution runs.
    "PROMPT_COMMAND",
    "PS0",
    "PS1",
    "PS2",
    "PS4",
    // The C library and the interpreters' own load paths and options.
    "GLIBC_TUNABLES",
    "GCONV_PATH",
    "NODE_OPTIONS",
    "NODE_PATH",
    "RUBYOPT",
    "RUBYLIB",
    "LUA_INIT",
    "LUA_PATH",
    "LUA_CPATH",
    "PHPRC",
    "PHP_INI_SCAN_DIR",
    "TCLLIBPATH",
    "CLASSPATH",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    // Commands other programs run on the client's behalf.
    "VISUAL",
    "BROWSER",
    "LESSOPEN",
    "LESSCLOSE",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_EXEC_PATH",
    "GIT_EXTERNAL_DIFF",
    "GIT_PROXY_COMMAND",
    "GIT_TEMPLATE_DIR",
    // Where a program finds configuration that names commands or code to load: git's
    // hooks and config, an editor's startup commands, OpenSSL's engines and providers,
    // .NET's startup hooks, kubectl's and docker's credential helpers, a compiler wrapper;
    // and where bash writes its history (a file a later shell runs, say).
    "GIT_DIR",
    "GIT_COMMON_DIR",
    "XDG_CONFIG_HOME",
    "XDG_CONFIG_DIRS",
    "VIMINIT",
    "GVIMINIT",
    "EXINIT",
    "EMACSLOADPATH",
    "OPENSSL_CONF",
    "OPENSSL_MODULES",
    "OPENSSL_ENGINES",
    "DOTNET_STARTUP_HOOKS",
    "DOTNET_ADDITIONAL_DEPS",
    "KUBECONFIG",
    "DOCKER_CONFIG",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
    "MAKEFILES",
    "GOFLAGS",
    "VIMRUNTIME",
    "HISTFILE",
    TAG_VAR,
];
/// Prefixes: Python's, Perl's and Ruby's own variables, the dynamic loader's, exported bash
/// functions (`BASH_FUNC_name%%`, run as code by every bash that starts), and git's
/// configuration from the environment (which can set any command git runs).
const DENIED_PREFIXES: &[&str] = &[
    "PYTHON",
    "PERL",
    "RUBY",
    "LD_",
    "DYLD_",
    "BASH_FUNC_",
    "GIT_CONFIG",
    "LUA_INIT_",
    "NPM_CONFIG_",
];
/// Suffixes: the programs that page, edit or ask for a password for another (`PAGER`,
/// `GIT_PAGER`, `MANPAGER`, `EDITOR`, `GIT_EDITOR`, `SSH_ASKPASS`, `SUDO_ASKPASS`, …).
const DENIED_SUFFIXES: &[&str] = &["PAGER", "EDITOR", "ASKPASS"];
/// Words that name what a client must not be able to plant (a credential it then reads).
const DENIED_PARTS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "CREDENTIAL",
    "API_KEY",
    "PRIVATE_KEY",
];

/// The variable that tags every process of a session (see `process::guardian`); set by the
/// server last, so neither a profile nor a client can change it.
pub const TAG_VAR: &str = "MCP_TERMINAL_SESSION";

/// The environment every child starts from; the server's own is never inherited.
pub const BASE_ENV: &[(&str, &str)] = &[
    ("PATH", "/usr/bin:/bin"),
    ("LANG", "C.UTF-8"),
    ("LC_ALL", "C.UTF-8"),
];

/// Why a variable name is not a valid name at all, if it is not.
pub fn invalid_env_name(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.contains('=') {
        Some("contains `=`")
    } else if name.contains('\0') {
        Some("contains NUL")
    } else {
        None
    }
}

/// Why a client may never set this name, if it may not.
pub fn denied_env_name(name: &str) -> Option<String> {
    let upper = name.to_ascii_uppercase();
    if DENIED_NAMES.contains(&upper.as_str()) {
        return Some(format!("`{name}` is on the deny list"));
    }
    if let Some(prefix) = DENIED_PREFIXES.iter().find(|p| upper.starts_with(*p)) {
        return Some(format!("`{name}` starts with the denied prefix {prefix}"));
    }
    if let Some(suffix) = DENIED_SUFFIXES.iter().find(|p| upper.ends_with(*p)) {
        return Some(format!("`{name}` ends with the denied word {suffix}"));
    }
    if let Some(part) = DENIED_PARTS.iter().find(|p| upper.contains(*p)) {
        return Some(format!("`{name}` contains the denied word {part}"));
    }
    None
}

/// A working directory that passed the policy, held open: the child changes into this very
/// directory (`fchdir`), so swapping a path component for a symlink after the check cannot
/// move it elsewhere.
pub struct Cwd {
    pub dir: OwnedFd,
    pub path: PathBuf,
}

/// Resolve a requested working directory: absolute, or relative to `default_cwd`;
/// canonicalised through symlinks; an existing directory inside one of `roots` (which are
/// canonical already). The directory is opened, and the path it was opened at is checked.
///
/// A refusal (`CWD_NOT_ALLOWED`) never tells what lies outside the roots: a path that
/// resolves outside them is "outside the allowed roots", whether it exists or what it is.
/// A server out of file descriptors says so (`INTERNAL`), not that the path is wrong.
pub fn resolve_cwd(
    requested: &str,
    default_cwd: &Path,
    roots: &[PathBuf],
) -> Result<Cwd, ToolError> {
    let refused = |why: String| {
        ToolError::new(
            ErrorCode::CwdNotAllowed,
            format!("cwd {why}; pick a directory inside the allowed roots"),
        )
    };
    let outside = || {
        let roots: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        refused(format!(
            "`{requested}` is outside the allowed roots ({})",
            roots.join(", ")
        ))
    };
    if requested.contains('\0') {
        return Err(refused("contains NUL".into()));
    }
    let joined = default_cwd.join(requested);
    let flags = OFlag::O_DIRECTORY | OFlag::O_PATH | OFlag::O_CLOEXEC;
    // The usual case, a directory inside the roots: opened as given, the kernel resolving
    // it, and judged by where the descriptor is. Anything else takes the longer way below,
    // which says what is wrong.
    if let Ok(dir) = nix::fcntl::open(&joined, flags, Mode::empty())
        && let Ok(opened) = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        && inside_roots(&opened, roots)
        && let Ok(true) = crate::process::can_enter(&dir)
    {
        return Ok(Cwd { dir, path: opened });
    }
    let canonical = match joined.canonicalize() {
        Ok(canonical) => canonical,
        Err(e) if e.raw_os_error().is_some_and(is_out_of_files) => {
            return Err(ToolError::out_of_files());
        }
        Err(_) if !inside_roots(&lexical(&joined), roots) => return Err(outside()),
        // Where resolving got to before something was missing: out through a symlink, it
        // would tell what does not exist there.
        Err(_) if resolved_part(&joined).is_some_and(|part| !inside_roots(&part, roots)) => {
            return Err(outside());
        }
        Err(_) => {
            return Err(refused(format!(
                "`{}` does not exist or cannot be resolved",
                joined.display()
            )));
        }
    };
    if !inside_roots(&canonical, roots) {
        return Err(outside());
    }
    let dir = match nix::fcntl::open(&canonical, flags, Mode::empty()) {
        Ok(dir) => dir,
        Err(e) if is_out_of_files(e as i32) => return Err(ToolError::out_of_files()),
        Err(_) => {
            return Err(refused(format!(
                "`{}` is not a directory",
                canonical.display()
            )));
        }
    };
    // What the descriptor really is, whatever happened to the path since.
    let opened = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        .map_err(|_| refused(format!("`{}` cannot be resolved", joined.display())))?;
    if !inside_roots(&opened, roots) {
        return Err(outside());
    }
    match crate::process::can_enter(&dir) {
        Ok(true) => {}
        Ok(false) => {
            return Err(refused(format!(
                "`{}` cannot be entered by the server (no search permission on the directory)",
                opened.display()
            )));
        }
        Err(_) => return Err(ToolError::out_of_files()),
    }
    Ok(Cwd { dir, path: opened })
}

/// The canonical location of the longest leading part of `path` that resolves (its
/// components taken in order through the file system, `..` after a symlink included),
/// on through a dangling symlink's target (as far as 40 links, as the kernel goes).
fn resolved_part(path: &Path) -> Option<PathBuf> {
    let mut path = path.to_path_buf();
    let mut resolved = None;
    'links: for _ in 0..40 {
        let mut part = PathBuf::new();
        let mut components = path.components();
        for component in components.by_ref() {
            part.push(component);
            match part.canonicalize() {
                Ok(canonical) => resolved = Some(canonical),
                Err(_) => match std::fs::read_link(&part) {
                    // A link that leads nowhere: go on where it points.
                    Ok(target) => {
                        let base = resolved.clone().unwrap_or_default();
                        path = base.join(target).join(components.as_path());
                        continue 'links;
                    }
                    Err(_) => break 'links,
                },
            }
        }
        break;
    }
    resolved
}

/// `path` with `.` and `..` taken away by their names alone, not through the file system:
/// where a path that does not resolve would be.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

pub fn inside_roots(path: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|root| path.starts_with(root))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_rules_are_case_insensitive() {
        for name in [
            "PATH",
            "path",
            "Home",
            "LD_PRELOAD",
            "ld_library_path",
            "PYTHONPATH",
            "DYLD_INSERT_LIBRARIES",
            "GITHUB_TOKEN",
            "my_secret_value",
            "DB_PASSWORD",
            "AWS_CREDENTIALS",
            "OPENAI_API_KEY",
            "SSH_PRIVATE_KEY",
            "_JAVA_OPTIONS",
            "bash_env",
            "mcp_terminal_session",
            "PERL5LIB",
            "PERLLIB",
            "RUBYLIB",
            "NODE_PATH",
            "PROMPT_COMMAND",
            "BASH_FUNC_ls%%",
            "GLIBC_TUNABLES",
            "GIT_SSH_COMMAND",
            "GIT_CONFIG_COUNT",
            "GIT_CONFIG_VALUE_0",
            "LESSOPEN",
            "PAGER",
            "GIT_PAGER",
            "MANPAGER",
            "EDITOR",
            "VISUAL",
            "SHELLOPTS",
            "SSH_ASKPASS",
            "SUDO_ASKPASS",
            "PS1",
            "LUA_INIT_5_4",
            "VIMINIT",
            "exinit",
            "XDG_CONFIG_HOME",
            "OPENSSL_CONF",
            "OPENSSL_MODULES",
            "DOTNET_STARTUP_HOOKS",
            "KUBECONFIG",
            "GIT_DIR",
            "HISTFILE",
            "npm_config_script_shell",
            "GIT_COMMON_DIR",
            "CARGO_BUILD_RUSTC_WRAPPER",
            "GOFLAGS",
        ] {
            assert!(denied_env_name(name).is_some(), "{name} should be denied");
        }
        for name in [
            "GREETING",
            "LANGUAGE",
            "MY_VAR",
            "GIT_AUTHOR_NAME",
            "NODE_ENV",
            "TERM",
        ] {
            assert!(denied_env_name(name).is_none(), "{name} should be allowed");
        }
    }

    #[test]
    fn names_with_equals_or_nul_are_invalid() {
        assert!(invalid_env_name("A=B").is_some());
        assert!(invalid_env_name("").is_some());
        assert!(invalid_env_name("A\0").is_some());
        assert!(invalid_env_name("A").is_none());
    }

    #[test]
    fn cwd_must_stay_inside_roots_even_through_symlinks() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("escape")).unwrap();
        let roots = vec![root.clone()];
        assert_eq!(
            resolve_cwd("sub", &root, &roots).unwrap().path,
            root.join("sub")
        );
        assert_eq!(resolve_cwd(".", &root, &roots).unwrap().path, root);
        assert!(resolve_cwd("..", &root, &roots).is_err());
        // Opened as given, judged by where the directory is: through a link inside the
        // roots, its real path; out through one (then `..` from there), refused as outside.
        std::os::unix::fs::symlink("sub", root.join("inner")).unwrap();
        assert_eq!(
            resolve_cwd("inner", &root, &roots).unwrap().path,
            root.join("sub")
        );
        assert_eq!(resolve_cwd("inner/..", &root, &roots).unwrap().path, root);
        for out in ["escape", "escape/..", "/"] {
            let refused = resolve_cwd(out, &root, &roots).err().unwrap();
            assert!(
                refused.message.contains("outside the allowed roots"),
                "{out}: {refused:?}"
            );
        }
        assert!(resolve_cwd("missing", &root, &roots).is_err());
        // Missing beyond the link: outside, as what exists there is, never "does not exist".
        std::os::unix::fs::symlink(outside.path().join("gone"), root.join("dangling")).unwrap();
        std::os::unix::fs::symlink("sub/gone", root.join("dangling-in")).unwrap();
        for beyond in [
            "escape/missing",
            "escape/../missing",
            "sub/../escape/missing",
            "dangling",
            "dangling/missing",
        ] {
            let refused = resolve_cwd(beyond, &root, &roots).err().unwrap();
            assert!(
                refused.message.contains("outside the allowed roots"),
                "{beyond}: {refused:?}"
            );
        }
        for missing in ["sub/missing", "dangling-in"] {
            let refused = resolve_cwd(missing, &root, &roots).err().unwrap();
            assert!(
                refused.message.contains("does not exist"),
                "{missing}: {refused:?}"
            );
        }
        std::fs::write(root.join("file"), "").unwrap();
        assert!(resolve_cwd("file", &root, &roots).is_err());
    }
}
