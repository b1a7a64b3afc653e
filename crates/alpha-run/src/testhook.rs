//! Crash points for the robustness tests. `ALPHA_TEST_CRASH_AT=<point>:<step>` (read by the
//! command line, which arms it here) makes the trainer fail at one chosen write, so a test reproduces a crash there instead of hoping a
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
//! - `non-finite-grad:N` — before update N, one element of the first parameter's gradient is
//!   made NaN (see `train::inject_non_finite_gradient`), so the health figures must count it;
//! - `health-row:N` — half of step N's `health.jsonl` row written, then it aborts.
//!
//! Aborting skips every destructor and handler, as `kill -9` does.

use std::sync::OnceLock;

/// The variable naming the crash point; the command line reads it and calls [`arm`].
pub const VAR: &str = "ALPHA_TEST_CRASH_AT";

static CHOSEN: OnceLock<(String, u64)> = OnceLock::new();

/// Arms the crash point `spec` (`<point>:<step>`); a spec without a step is an error.
pub fn arm(spec: &str) -> anyhow::Result<()> {
    let parsed = spec.rsplit_once(':').and_then(|(point, step)| Some((point.to_string(), step.parse().ok()?)));
    let Some(chosen) = parsed else { anyhow::bail!("{VAR}={spec}: expected <point>:<step>") };
    let _ = CHOSEN.set(chosen);
    Ok(())
}

fn chosen() -> Option<&'static (String, u64)> {
    CHOSEN.get()
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

/// A checkpoint's bytes with one metadata entry changed and nothing else: the header rewritten
/// and padded as safetensors wants, the tensor bytes as they were. For the tests that show an
/// edited checkpoint is refused.
pub fn with_metadata_entry(bytes: &[u8], key: &str, value: &str) -> Vec<u8> {
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("a safetensors file")) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).expect("its JSON header");
    header["__metadata__"][key] = serde_json::Value::String(value.into());
    let mut json = serde_json::to_vec(&header).expect("JSON");
    while !json.len().is_multiple_of(8) {
        json.push(b' ');
    }
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out.extend_from_slice(&bytes[8 + n..]);
    out
}
