//! Any bytes as JSON-RPC lines after the handshake: the framing guard, the JSON-RPC
//! dispatch and every tool behind it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcp_terminal_fuzz::check(data));
