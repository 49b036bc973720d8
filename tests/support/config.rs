//! A config as `make-config` writes it, changed for a test.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Write `DIR/config.json` with `make-config` (root: `dir`; with `--shells` if asked), apply
/// `change` to it, and return its path.
pub fn config_with(dir: &Path, shells: bool, change: impl FnOnce(&mut Value)) -> PathBuf {
    let root = dir.canonicalize().unwrap();
    let path = root.join("config.json");
    // make-config never overwrites a config: one written before is written afresh.
    let _ = std::fs::remove_file(&path);
    let mut make = Command::new(super::http_server::BIN);
    make.arg("make-config");
    if shells {
        make.arg("--shells");
    }
    let made = make
        .arg("--output")
        .arg(&path)
        .arg("--root")
        .arg(&root)
        .env("HOME", &root)
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    change(&mut config);
    std::fs::write(&path, config.to_string()).unwrap();
    path
}
