//! Any JSON text as the `arguments` of a tools/call to one tool (the first byte picks it),
//! so the fuzzer spends its time in argument decoding and the tools rather than in framing.
#![no_main]

use mcp_terminal_fuzz::{TOOLS, call, check};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((first, rest)) = data.split_first() else {
        return;
    };
    let Ok(arguments) = serde_json::from_slice::<serde_json::Value>(rest) else {
        return;
    };
    let tool = &TOOLS[usize::from(*first) % TOOLS.len()];
    check(call(1, tool, arguments).as_bytes());
});
