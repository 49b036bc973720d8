//! Who may reach the server over HTTP, shared by the MCP endpoint (`http`) and the live view
//! (`web`): the bearer token and its file (`token`), the browser rules and the bearer check
//! (`guard`), the accept loop that bounds connections (`listener`), the throttle on logging
//! refusals (`refusals`), and the random values both mint.

pub mod guard;
pub mod listener;
pub mod refusals;
pub mod token;

use std::path::PathBuf;

pub use guard::Access;
pub use token::Token;

use token::Loaded;

/// `bytes` random bytes as lowercase hex.
pub fn random_hex(bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

/// Load the token from `token_file` (default: beside the default config), creating it
/// when absent; only the file's path is printed.
pub fn load_token(token_file: Option<PathBuf>) -> Result<Token, String> {
    let path = match token_file {
        Some(path) => path,
        None => token::default_path()?,
    };
    let (token, loaded) = Token::load_or_create(&path)?;
    if let Loaded::Created = loaded {
        crate::say!(
            "mcp-terminal: created a new token in {} (mode 0600); clients send it as \
             `Authorization: Bearer <token>`",
            path.display()
        );
    }
    Ok(token)
}
