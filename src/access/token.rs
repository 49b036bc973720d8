//! The bearer token of the HTTP transport: where its file lives, the rules it must pass (a
//! private file of the server's user, at least 32 characters), its creation when absent,
//! and the constant-time comparison. The token itself is never formatted into any message.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use subtle::ConstantTimeEq;

use super::random_hex;
use crate::limits::{TOKEN_MAX_BYTES, TOKEN_MIN_CHARS};
use crate::private_file::{self, Refusal};

/// The shared secret every request must present. `Debug` is deliberately not derived.
pub struct Token(String);

/// What loading the token file did, for the one stderr line about it.
pub enum Loaded {
    Existing,
    Created,
}

impl Token {
    /// Constant time in the length of the presented value, so a timing side channel gives
    /// away nothing but the token's length.
    pub fn matches(&self, presented: &str) -> bool {
        bool::from(self.0.as_bytes().ct_eq(presented.as_bytes()))
    }

    /// The `Authorization` header value that presents it (for `mcp-terminal web-url`, the
    /// one client of this server in this program; never printed).
    pub fn authorization(&self) -> String {
        format!("Bearer {}", self.0)
    }

    #[cfg(test)]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Read the token file, or create it with a fresh random token when it is absent. The
    /// file must be a regular file of the server's user that only that user can access (a
    /// symlink, a FIFO or another user's file is refused before anything is read).
    pub fn load_or_create(path: &Path) -> Result<(Token, Loaded), String> {
        match private_file::read(path, TOKEN_MAX_BYTES) {
            Ok(bytes) => Ok((Token::parse(path, bytes)?, Loaded::Existing)),
            Err(Refusal::Missing) => Ok((Token::create(path)?, Loaded::Created)),
            Err(Refusal::TooLarge { .. }) => Err(format!(
                "the token file `{}` is over {TOKEN_MAX_BYTES} bytes; it must hold one token",
                path.display()
            )),
            Err(refusal) => Err(format!("the token file {}", refusal.describe(path))),
        }
    }

    fn parse(path: &Path, bytes: Vec<u8>) -> Result<Token, String> {
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("the token file `{}` is not UTF-8 text", path.display()))?;
        let token = text.trim();
        if token.chars().count() < TOKEN_MIN_CHARS {
            return Err(format!(
                "the token in `{}` has {} characters; at least {TOKEN_MIN_CHARS} are needed \
                 (delete the file to have a random one created)",
                path.display(),
                token.chars().count()
            ));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "the token in `{}` holds characters other than printable ASCII without \
                 spaces, so it cannot be sent in an Authorization header",
                path.display()
            ));
        }
        Ok(Token(token.to_owned()))
    }

    fn create(path: &Path) -> Result<Token, String> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| format!("cannot create `{}`: {e}", parent.display()))?;
        }
        let token = random_hex(32);
        // create_new: never overwrite a file that appeared meanwhile; mode 0600 from birth.
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| format!("cannot create the token file `{}`: {e}", path.display()))?;
        file.write_all(format!("{token}\n").as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| format!("cannot write the token file `{}`: {e}", path.display()))?;
        Ok(Token(token))
    }
}

/// `token` beside the default config file: `$XDG_CONFIG_HOME/mcp-terminal/token`, else
/// `~/.config/mcp-terminal/token`.
pub fn default_path() -> Result<PathBuf, String> {
    crate::config::default_config_path()
        .map(|config| config.with_file_name("token"))
        .ok_or_else(|| "neither XDG_CONFIG_HOME nor HOME is set: pass --token-file PATH".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn an_absent_file_is_created_private_with_64_hex_digits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/token");
        let (token, loaded) = Token::load_or_create(&path).unwrap();
        assert!(matches!(loaded, Loaded::Created));
        assert_eq!(token.as_str().len(), 64);
        assert!(token.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let (again, loaded) = Token::load_or_create(&path).unwrap();
        assert!(matches!(loaded, Loaded::Existing));
        assert!(again.matches(token.as_str()));
    }

    #[test]
    fn whitespace_is_ignored_and_short_or_shared_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let write = |text: &str, mode: u32| {
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        let secret = "x".repeat(40);
        write(&format!("  {secret}\n\n"), 0o600);
        assert!(Token::load_or_create(&path).unwrap().0.matches(&secret));
        write(&"y".repeat(31), 0o600);
        let error = Token::load_or_create(&path).err().unwrap();
        assert!(error.contains("31 characters"), "{error}");
        assert!(!error.contains("yyyy"), "{error}");
        write(&secret, 0o640);
        let error = Token::load_or_create(&path).err().unwrap();
        assert!(error.contains("chmod 600"), "{error}");
        assert!(!error.contains(&secret), "{error}");
    }

    #[test]
    fn only_the_exact_token_matches() {
        let token = Token("a".repeat(32));
        assert!(token.matches(&"a".repeat(32)));
        assert!(!token.matches(&"a".repeat(31)));
        assert!(!token.matches(&"a".repeat(33)));
        assert!(!token.matches(""));
    }
}
