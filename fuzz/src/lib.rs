//! The in-process server the fuzz targets drive: the same loopback the dispatch property
//! test uses (`tests/support/loopback.rs`), one per fuzzing process.

#[path = "../../tests/support/loopback.rs"]
mod loopback;

pub use loopback::{Loopback, call};

use std::sync::LazyLock;

pub static SERVER: LazyLock<Loopback> = LazyLock::new(Loopback::new);

/// Every tool's name, from the server's own tools/list.
pub static TOOLS: LazyLock<Vec<String>> =
    LazyLock::new(|| SERVER.tools().into_iter().map(|(name, _)| name).collect());

/// Serve `input`; a broken contract is a crash the fuzzer reports and minimises.
pub fn check(input: &[u8]) {
    if let Err(broken) = SERVER.exchange(input) {
        panic!("{broken}\ninput: {:?}", String::from_utf8_lossy(input));
    }
}
