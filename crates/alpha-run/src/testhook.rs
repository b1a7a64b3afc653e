//! Crash points for the robustness tests. `ALPHA_TEST_CRASH_AT=<point>:<step>` makes the
//! trainer fail at one chosen write, so a test reproduces a crash there instead of hoping a
//! timed kill lands in it. Unset (always, outside tests), nothing changes. The points:
//!
//! - `points-row:N` — half of step N's `points.jsonl` row written, then the process aborts;
//! - `lineage-row:N` — half of checkpoint N's `lineage.jsonl` row written, then it aborts;
//! - `checkpoint-tmp:N` — checkpoint N's temporary file written but not renamed, then it aborts;
//! - `checkpoint-full:N` — writing checkpoint N fails half way as on a full disk (an error, no
//!   abort);
//! - `after-step:N` — step N recorded, then it aborts (a `kill -9` between steps).
//! - `non-finite-loss:N` — step N's loss reads as NaN, as a diverging run's would (no abort: the
//!   trainer stops, keeping the last good checkpoint).
//!
//! Aborting skips every destructor and handler, as `kill -9` does.

use std::sync::OnceLock;

/// The variable naming the crash point.
pub const VAR: &str = "ALPHA_TEST_CRASH_AT";

fn chosen() -> Option<&'static (String, u64)> {
    static CHOSEN: OnceLock<Option<(String, u64)>> = OnceLock::new();
    CHOSEN
        .get_or_init(|| {
            let v = std::env::var(VAR).ok()?;
            let (point, step) = v.rsplit_once(':')?;
            Some((point.to_string(), step.parse().ok()?))
        })
        .as_ref()
}

/// Whether the test asked for a failure at `point` of `step`.
pub fn crash_at(point: &str, step: u64) -> bool {
    chosen().is_some_and(|(p, s)| p == point && *s == step)
}

/// End the process at once, as `kill -9` would.
pub fn crash() -> ! {
    eprintln!("{VAR}: crashing here as the test asked");
    std::process::abort()
}
