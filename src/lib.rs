//! The server as a library: the modules the `mcp-terminal` binary (`src/main.rs`) is built
//! from, layered config → process → output → session → tools, one way. The binary holds
//! only the command line and the serving loops; the fuzz targets (`fuzz/`) and the
//! in-process tests drive the same framing and dispatch the binary serves with.

/// `eprintln!` that cannot panic: a server whose stderr reader has gone (the pipe broken)
/// serves on stdout regardless, where `eprintln!` would end it.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod access;
pub mod audit;
pub mod config;
pub mod dumpable;
mod errors;
pub mod framing;
pub mod hangup;
pub mod heap;
pub mod http;
mod json;
pub mod limits;
pub mod log_lines;
mod output;
mod policy;
mod private_file;
pub mod process;
pub mod session;
pub mod stdio;
mod strict;
pub mod tools;
pub mod web;
