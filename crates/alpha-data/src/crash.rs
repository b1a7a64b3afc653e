//! A test hook for crash safety: with `ALPHA_DATA_CRASH_AT=<point>` in its environment, the
//! process aborts (as a `kill -9` would leave it: nothing flushed, nothing cleaned up) when it
//! reaches that named point of a write. Tests use it to put a crash exactly where they mean to,
//! instead of relying on timing.
//!
//! Points: `manifest` (half of `manifest.json`'s temporary written), `tokenizer` (the same for
//! `tokenizer.json`), `shards` (every shard written, no manifest yet), `cache-install` (a cache
//! preparation complete in its staging folder, not yet renamed into place).

/// The environment variable naming the point to abort at; the command line reads it and calls
/// [`arm`].
pub const ENV: &str = "ALPHA_DATA_CRASH_AT";

static ARMED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Arms the crash point `name`.
pub fn arm(name: &str) {
    let _ = ARMED.set(name.to_string());
}

/// Aborts the process if [`arm`] named `name`.
pub fn point(name: &str) {
    if ARMED.get().is_some_and(|armed| armed == name) {
        eprintln!("{ENV}={name}: aborting here, as a crash would");
        std::process::abort();
    }
}
