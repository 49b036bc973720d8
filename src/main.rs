mod config;
mod errors;
mod limits;
mod output;
mod policy;
mod strict;

fn main() {}
