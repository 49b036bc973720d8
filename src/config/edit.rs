//! The owner's side of the config file: where it lives by default, and approving or
//! withdrawing a profile without hand-editing JSON (`profile add/list/remove`).
//!
//! An edit changes only `commands.ID` in the JSON document (other fields and profiles keep
//! their text values), is validated exactly like `check-config`, and replaces the file
//! atomically (a temporary file beside it, then rename) with the file's mode kept. A config
//! reached through a symlink (a dotfiles checkout) is edited where it is, the link kept; and
//! the file is locked from its reading to its replacing, so edits made at once each see the
//! one before.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde_json::{Map, Value};

use super::{Config, EnvSecrets, parse_config_as};

/// `$XDG_CONFIG_HOME/mcp-terminal/config.json`, else `~/.config/mcp-terminal/config.json`.
pub fn default_config_path() -> Option<PathBuf> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let base =
        absolute("XDG_CONFIG_HOME").or_else(|| absolute("HOME").map(|h| h.join(".config")))?;
    Some(base.join("mcp-terminal").join("config.json"))
}

/// Where a command finds its config: `--config`, else the default path when that file
/// exists (`None`: the built-in defaults apply).
pub fn config_path(given: Option<&Path>) -> Option<PathBuf> {
    match given {
        Some(path) => Some(path.to_path_buf()),
        None => default_config_path().filter(|p| p.exists()),
    }
}

/// A config file read for editing.
pub struct ConfigFile {
    /// The file itself, through any symlinks.
    path: PathBuf,
    document: Map<String, Value>,
    /// The demo profiles the file approved by having no `commands`, now written out.
    demo_written: Option<usize>,
    /// Held until the edit is written (or dropped).
    _lock: Flock<File>,
}

/// `path` opened and locked, once the file locked is still the one at `path` (an edit
/// that held the lock meanwhile replaced it: then the new one is locked).
fn locked(path: &Path) -> std::io::Result<Flock<File>> {
    loop {
        let file = File::open(path)?;
        let held = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| e)?;
        let (now, locked) = (std::fs::metadata(path)?, held.metadata()?);
        if (now.dev(), now.ino()) == (locked.dev(), locked.ino()) {
            return Ok(held);
        }
    }
}

impl ConfigFile {
    pub fn open(path: &Path) -> Result<Self, String> {
        let cannot_read = |e: std::io::Error| {
            format!(
                "cannot read config `{}`: {e}; write one with `mcp-terminal make-config`",
                path.display()
            )
        };
        let target = std::fs::canonicalize(path).map_err(cannot_read)?;
        let mut lock = locked(&target).map_err(cannot_read)?;
        let mut text = String::new();
        lock.read_to_string(&mut text).map_err(cannot_read)?;
        match crate::strict::parse_unique(&text) {
            Ok(Value::Object(document)) => Ok(ConfigFile {
                path: target,
                document,
                demo_written: None,
                _lock: lock,
            }),
            Ok(_) => Err(format!("config `{}` is not a JSON object", path.display())),
            Err(e) => Err(format!(
                "config `{}` is not valid JSON: {e}",
                path.display()
            )),
        }
    }

    /// The config as `check-config` sees it (an `env` secret's variable belongs where the
    /// MCP client starts the server, not in the owner's shell).
    pub fn validate(&self) -> Result<Config, String> {
        let cwd = std::env::current_dir()
            .map_err(|e| format!("cannot read the current directory: {e}"))?;
        let document = Value::Object(self.document.clone());
        parse_config_as(&document, &cwd, EnvSecrets::Elsewhere)
    }

    fn commands(&mut self) -> Result<&mut Map<String, Value>, String> {
        let commands = self.document.entry("commands").or_insert(Value::Null);
        // Without `commands` (or with `null`) a config approves the demo profiles: an edit
        // writes them out, so that it changes only the profile it names.
        if commands.is_null() {
            let demo = super::defaults::demo_commands();
            self.demo_written = Some(demo.len());
            *commands = Value::Object(demo);
        }
        match commands {
            Value::Object(commands) => Ok(commands),
            _ => Err("`commands`: must be an object".into()),
        }
    }

    /// Approve `profile` as `id`; an id already in use is refused.
    pub fn add(&mut self, id: &str, profile: Value) -> Result<(), String> {
        let commands = self.commands()?;
        if commands.contains_key(id) {
            return Err(format!(
                "profile `{id}` already exists; remove it first (`mcp-terminal profile remove {id}`)"
            ));
        }
        commands.insert(id.to_owned(), profile);
        Ok(())
    }

    /// Add `dir` (absolute, canonical) to `allowed_roots`, unless it is there.
    pub fn add_root(&mut self, dir: &Path) -> Result<(), String> {
        let roots = self
            .document
            .entry("allowed_roots")
            .or_insert_with(|| Value::Array(Vec::new()));
        let Value::Array(roots) = roots else {
            return Err("`allowed_roots`: must be an array".into());
        };
        let dir = Value::String(dir.display().to_string());
        if !roots.contains(&dir) {
            roots.push(dir);
        }
        Ok(())
    }

    pub fn remove(&mut self, id: &str) -> Result<(), String> {
        let commands = self.commands()?;
        if commands.remove(id).is_none() {
            let known: Vec<&str> = commands.keys().map(String::as_str).collect();
            return Err(format!(
                "no profile `{id}` in the config; it has: {}",
                known.join(", ")
            ));
        }
        Ok(())
    }

    /// How many demo profiles this edit wrote out, which the file approved by having no
    /// `commands`.
    pub fn demo_written(&self) -> Option<usize> {
        self.demo_written
    }

    /// Validate the edited config, then replace the file atomically, keeping its mode.
    pub fn save(&self) -> Result<Config, String> {
        let config = self.validate()?;
        let mut text = serde_json::to_string_pretty(&Value::Object(self.document.clone()))
            .map_err(|e| format!("cannot encode the config: {e}"))?;
        text.push('\n');
        let mode = std::fs::metadata(&self.path)
            .map(|m| m.permissions().mode() & 0o7777)
            .map_err(|e| format!("cannot read `{}`: {e}", self.path.display()))?;
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = self
            .path
            .with_file_name(format!(".{name}.{:016x}.tmp", rand::random::<u64>()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp)
            .and_then(|mut file| {
                // The mode given at creation is masked by the umask; set it exactly.
                file.set_permissions(std::fs::Permissions::from_mode(mode))?;
                file.write_all(text.as_bytes())?;
                file.sync_all()
            })
            .and_then(|()| std::fs::rename(&temp, &self.path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(format!("cannot write `{}`: {e}", self.path.display()));
        }
        Ok(config)
    }
}

/// `program` as an absolute path: one containing `/` is taken relative to the current
/// directory, a bare name is looked up in `path_var` (the owner's PATH) like a shell does.
pub fn resolve_program(program: &str, path_var: Option<&str>) -> Result<PathBuf, String> {
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path =
            std::path::absolute(program).map_err(|e| format!("cannot resolve `{program}`: {e}"))?;
        return if executable(&path) {
            Ok(path)
        } else {
            Err(format!("`{}` is not an executable file", path.display()))
        };
    }
    path_var
        .unwrap_or_default()
        .split(':')
        .filter(|dir| dir.starts_with('/'))
        .map(|dir| Path::new(dir).join(program))
        .find(|p| executable(p))
        .ok_or_else(|| {
            format!("`{program}` is not an executable in PATH; give its absolute path instead")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_resolve_through_path_or_as_paths() {
        assert_eq!(
            resolve_program("sh", Some("relative:/nonexistent:/bin")).unwrap(),
            PathBuf::from("/bin/sh")
        );
        assert!(resolve_program("no-such-program-here", Some("/bin")).is_err());
        assert!(resolve_program("sh", None).is_err());
        assert_eq!(
            resolve_program("/bin/sh", None).unwrap(),
            PathBuf::from("/bin/sh")
        );
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "not a program").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(resolve_program(plain.to_str().unwrap(), None).is_err());
    }
}
