//! Helpers shared by the integration tests. Each test crate uses part of them.
#![allow(dead_code)]

pub mod config;
pub mod extras;
pub mod http_server;
pub mod stderr;
pub mod view;
