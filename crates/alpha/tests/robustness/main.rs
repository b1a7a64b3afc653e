//! Bad input, crashes and concurrent use, end to end through the CLI: each case a clear error
//! (nonzero exit, the problem named, no panic) or correct behaviour, and no data lost.
//!
//! One module a concern: run directories and records, data and caches, arguments, the dashboard.

#[path = "../common/mod.rs"]
mod common;

mod arguments;
mod dashboard;
mod data;
mod runs;
