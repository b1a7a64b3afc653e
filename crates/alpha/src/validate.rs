//! Argument checks that run before any data is read or memory is taken: every number a flag
//! takes has a stated range (clap value parsers, so the error names the flag and the value and
//! exits 2), every argument must be UTF-8, and a step whose arena would not fit in this
//! machine's memory is refused with its size instead of aborting in the allocator.

use std::ffi::OsString;
use std::fmt::Display;
use std::str::FromStr;

use alpha_learn::inference_program;
use alpha_systems::System;
use anyhow::{anyhow, bail, Result};

/// Most updates one invocation may run. A billion is a thousand times the longest schedules
/// trained anywhere (around a million updates) — more is a typo — and it keeps the step
/// counters (a resumed step plus these) and the token count far inside 64 bits.
pub const MAX_STEPS: u64 = 1_000_000_000;

/// Most sequences a step. More does not fit any device's memory even for Bob (about half a
/// megabyte of arena a sequence), and it keeps every tensor's size, in bytes, far inside 64 bits
/// when the planner multiplies shapes.
pub const MAX_BATCH: usize = 1 << 20;

/// Most micro-batches one update accumulates.
pub const MAX_ACCUMULATE: usize = 1 << 16;

/// Most tokens one prediction (or a training run's closing sample) generates: each is a whole
/// forward pass, and a million is already hours of text for the smallest system.
pub const MAX_TOKENS: usize = 1_000_000;

/// Highest peak learning rate accepted. AdamW's useful peaks are around 1e-5..1e-1; above 10
/// every system here diverges within steps.
pub const MAX_LR: f64 = 10.0;

/// Most warm-up or timed steps of a benchmark.
pub const MAX_BENCH_STEPS: u64 = 1_000_000;

/// Longest wall-clock budget one invocation may train to: a week. Longer training goes in legs,
/// each a `--resume` with a larger `--budget`, so a typo (`10h` for `10m`) cannot hold a
/// machine for months.
pub const MAX_BUDGET_S: f64 = 7.0 * 24.0 * 3600.0;

/// Shortest budget: a second. Less holds no more than a few updates of any system here, and a
/// budget is timed with the host's clock to far better than that.
pub const MIN_BUDGET_S: f64 = 1.0;

/// Parses a whole number; a failure says why and then `range` (what to give instead).
fn parse_whole<T: FromStr>(s: &str, range: &str) -> Result<T, String> {
    let t = s.trim();
    if t.len() > 1 && t.starts_with('-') && t[1..].chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("must not be negative: {range}"));
    }
    t.parse().map_err(|_| {
        if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()) {
            format!("is too large: {range}")
        } else {
            format!("is not a whole number: {range}")
        }
    })
}

/// Parses a whole number in `min..=max`; the message says the range and what it counts.
fn whole<T>(s: &str, min: T, max: T, what: &str) -> Result<T, String>
where
    T: FromStr + PartialOrd + Display + Copy,
{
    let range = format!("give {what} from {} to {}", group(min), group(max));
    let v: T = parse_whole(s, &range)?;
    if v < min || v > max {
        return Err(format!("is out of range: {range}"));
    }
    Ok(v)
}

/// Parses a whole number of at least `min`, with no upper bound but the type's.
fn at_least<T>(s: &str, min: T, what: &str) -> Result<T, String>
where
    T: FromStr + PartialOrd + Display + Copy,
{
    let range = format!("give {what}: at least {}", group(min));
    let v: T = parse_whole(s, &range)?;
    if v < min {
        return Err(format!("is out of range: {range}"));
    }
    Ok(v)
}

/// A number with thousands separators, for messages.
fn group<T: Display>(n: T) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Parses a finite number; `NaN`, `inf` and anything unparsable are refused.
fn finite(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| "is not a number".to_string())?;
    if !v.is_finite() {
        return Err("must be a finite number".into());
    }
    Ok(v)
}

pub fn train_steps(s: &str) -> Result<u64, String> {
    whole(s, 1, MAX_STEPS, "the number of updates")
}

pub fn schedule_steps(s: &str) -> Result<u64, String> {
    whole(s, 1, MAX_STEPS, "the schedule's horizon in updates")
}

pub fn checkpoint_every(s: &str) -> Result<u64, String> {
    whole(s, 1, MAX_STEPS, "updates between checkpoints (leave the flag out to checkpoint only at the end)")
}

pub fn batch(s: &str) -> Result<usize, String> {
    whole(s, 1, MAX_BATCH, "sequences a step")
}

pub fn accumulate(s: &str) -> Result<usize, String> {
    whole(s, 1, MAX_ACCUMULATE, "micro-batches an update")
}

pub fn tokens(s: &str) -> Result<usize, String> {
    whole(s, 0, MAX_TOKENS, "tokens to generate")
}

pub fn windows(s: &str) -> Result<usize, String> {
    at_least(s, 1, "held-out windows")
}

pub fn byte_window(s: &str) -> Result<usize, String> {
    whole(s, 1, 1 << 20, "bytes a held-out window predicts")
}

pub fn heldout_windows(s: &str) -> Result<usize, String> {
    at_least(s, 0, "held-out windows a checkpoint (0: none)")
}

pub fn seed(s: &str) -> Result<u64, String> {
    at_least(s, 0, "a seed")
}

pub fn bench_steps(s: &str) -> Result<u64, String> {
    whole(s, 1, MAX_BENCH_STEPS, "timed steps")
}

pub fn bench_warmup(s: &str) -> Result<u64, String> {
    whole(s, 0, MAX_BENCH_STEPS, "warm-up steps")
}

/// A wall-clock budget of training time with its unit — `90s`, `10m`, `1.5h` — in seconds,
/// from [`MIN_BUDGET_S`] to [`MAX_BUDGET_S`]. A bare number is refused: seconds and minutes
/// are both plausible, and a budget read in the wrong one is a run sixty times too short or long.
pub fn budget(s: &str) -> Result<f64, String> {
    let range = "give a time from 1s to 168h with its unit, s, m or h (e.g. 90s, 10m, 1.5h)";
    let t = s.trim();
    let (number, scale) = match t.char_indices().last() {
        Some((i, 's')) => (&t[..i], 1.0),
        Some((i, 'm')) => (&t[..i], 60.0),
        Some((i, 'h')) => (&t[..i], 3600.0),
        _ if finite(t).is_ok() => return Err(format!("has no unit: {range}")),
        _ => return Err(format!("is not a time: {range}")),
    };
    let v = finite(number.trim()).map_err(|_| format!("is not a time: {range}"))? * scale;
    if !(MIN_BUDGET_S..=MAX_BUDGET_S).contains(&v) {
        return Err(format!("is out of range: {range}"));
    }
    Ok(v)
}

pub fn size_limit(s: &str) -> Result<u64, String> {
    at_least(s, 1, "a size in bytes")
}

pub fn warmdown_updates(s: &str) -> Result<u64, String> {
    whole(s, 1, MAX_STEPS, "the updates' worth of time the budget's warmdown takes")
}

/// A peak learning rate: finite, above 0, at most [`MAX_LR`].
pub fn learning_rate(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if v <= 0.0 || v > MAX_LR {
        return Err(format!("must be above 0 and at most {MAX_LR} (AdamW's useful peaks are around 1e-5 to 1e-1)"));
    }
    Ok(v)
}

/// A sampling temperature: finite and not negative (0 takes the most likely token).
pub fn temperature(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if v < 0.0 {
        return Err("must not be negative: 0 takes the most likely token, higher samples more freely".into());
    }
    Ok(v)
}

/// Every argument as UTF-8, or a message naming the first one that is not. Text (prompts,
/// names) must be UTF-8 to be tokenized, and paths are written into checkpoints and records
/// as UTF-8 text, so a non-UTF-8 path would be recorded as some other path.
pub fn utf8_args(args: Vec<OsString>) -> Result<Vec<String>, String> {
    let mut out = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        match a.to_str() {
            Some(s) => out.push(s.to_string()),
            None => {
                let lossy = a.to_string_lossy();
                let which = match (lossy.split_once('='), out.last()) {
                    (Some((flag, _)), _) if flag.starts_with("--") => format!("the value of {flag}"),
                    (_, Some(prev)) if i > 1 && prev.starts_with('-') => format!("argument {i} (after {prev})"),
                    _ => format!("argument {i}"),
                };
                return Err(format!(
                    "{which} is not valid UTF-8 ({a:?}): alpha takes text and paths as UTF-8 (they are tokenized and written into records)"
                ));
            }
        }
    }
    Ok(out)
}

/// Bytes this machine can give a new allocation now: `MemAvailable` in `/proc/meminfo`, lowered
/// to the cgroup's remaining limit where one is set. Where neither can be read, 1 TiB: no larger
/// arena is plausible on a host, and a refusal beats an abort in the allocator.
pub fn available_memory() -> (u64, &'static str) {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib.saturating_mul(1024))
    });
    let read = |p: &str| std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse::<u64>().ok());
    let cgroup = match (read("/sys/fs/cgroup/memory.max"), read("/sys/fs/cgroup/memory.current")) {
        (Some(max), Some(cur)) => Some(max.saturating_sub(cur)),
        _ => None,
    };
    match (meminfo, cgroup) {
        (Some(m), Some(c)) if c < m => (c, "the cgroup's memory.max less memory.current"),
        (Some(m), _) => (m, "MemAvailable in /proc/meminfo"),
        (None, Some(c)) => (c, "the cgroup's memory.max less memory.current"),
        (None, None) => (1 << 40, "an assumed 1 TiB: /proc/meminfo could not be read"),
    }
}

/// Bytes, in the largest binary unit that keeps a number above 1.
pub fn human_bytes(n: u64) -> String {
    let units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} bytes")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// Bytes of the CPU reference's arena for `program` (f32, planned as the backend plans it).
pub fn cpu_arena_bytes(program: &alpha_ir::Program) -> Result<u64> {
    let plan = alpha_plan::plan(program, alpha_plan::elements, 16)?;
    (plan.arena as u64).checked_mul(4).ok_or_else(|| anyhow!("the arena's size overflows 64 bits"))
}

/// Host memory a CPU training run takes: the step's arena, the held-out evaluator's arena, the
/// batch-1 arena that samples text (at scored checkpoints, and at the end), and the step's
/// token and loss buffers.
pub fn training_bytes(
    system: &dyn System,
    batch: usize,
    accumulate: usize,
    heldout_windows: usize,
    sample: bool,
) -> Result<u64> {
    let mut learner = system.learner(system.default_steps());
    learner.accumulation = accumulate;
    let mut total = cpu_arena_bytes(&learner.training_program(system.model(batch)?)?)?;
    if heldout_windows > 0 {
        total += cpu_arena_bytes(&inference_program(system.model(batch.min(heldout_windows))?)?)?;
    }
    if sample {
        total += cpu_arena_bytes(&inference_program(system.model(1)?)?)?;
    }
    let tokens = (batch as u64) * system.context() as u64;
    // inputs, targets, and the losses of every micro-batch (u32 and f32: 4 bytes each)
    total += tokens * 4 * (2 + accumulate as u64);
    Ok(total)
}

/// Refuses `needed` bytes when this machine has fewer available, naming the flag to lower.
pub fn ensure_fits(what: &str, needed: u64, lower: &str) -> Result<()> {
    let (available, source) = available_memory();
    if needed > available {
        bail!(
            "{what} needs about {} of memory ({needed} bytes, from its plan's arena), but this machine has {} available ({source}); lower {lower}",
            human_bytes(needed),
            human_bytes(available)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_are_held_to_their_range_with_the_reason() {
        assert_eq!(batch("16"), Ok(16));
        assert!(batch("0").unwrap_err().contains("from 1 to 1,048,576"));
        assert!(batch("-3").unwrap_err().contains("must not be negative"));
        assert!(batch("99999999999999999999999").unwrap_err().contains("too large"));
        assert!(batch("2x").unwrap_err().contains("not a whole number"));
        assert_eq!(train_steps("1000000000"), Ok(MAX_STEPS));
        assert!(train_steps("1000000001").unwrap_err().contains("out of range"));
        assert_eq!(tokens("0"), Ok(0));
        assert_eq!(windows("0").unwrap_err(), "is out of range: give held-out windows: at least 1");
        assert!(seed("18446744073709551616").unwrap_err().contains("too large"));
        assert_eq!(seed("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn budgets_take_a_unit_and_a_range() {
        assert_eq!(budget("10m"), Ok(600.0));
        assert_eq!(budget("90s"), Ok(90.0));
        assert_eq!(budget(" 1.5h "), Ok(5400.0));
        assert_eq!(budget("168h"), Ok(MAX_BUDGET_S));
        assert!(budget("600").unwrap_err().starts_with("has no unit"), "{:?}", budget("600"));
        for bad in ["0s", "0.5s", "169h", "-3m", "1e9h"] {
            assert!(budget(bad).unwrap_err().starts_with("is out of range"), "{bad}: {:?}", budget(bad));
        }
        for bad in ["", "m", "tens", "10 minutes", "nanh", "infs", "10d"] {
            assert!(budget(bad).is_err(), "{bad}");
        }
        assert_eq!(warmdown_updates("1200"), Ok(1200));
        assert!(warmdown_updates("0").unwrap_err().contains("out of range"));
    }

    #[test]
    fn rates_and_temperatures_must_be_finite_and_in_range() {
        assert_eq!(learning_rate("3e-4"), Ok(3e-4));
        for bad in ["-1", "0", "1e30", "nan", "inf", "x"] {
            assert!(learning_rate(bad).is_err(), "{bad}");
        }
        assert_eq!(temperature("0"), Ok(0.0));
        for bad in ["nan", "-0.5", "inf", "-inf"] {
            assert!(temperature(bad).is_err(), "{bad}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_non_utf8_argument_is_named() {
        use std::os::unix::ffi::OsStringExt;
        let args = |v: Vec<&[u8]>| v.into_iter().map(|b| OsString::from_vec(b.to_vec())).collect::<Vec<_>>();
        let e = utf8_args(args(vec![b"alpha", b"predict", b"bob", b"--prompt", b"\xff"])).unwrap_err();
        assert!(e.contains("argument 4 (after --prompt)"), "{e}");
        let e = utf8_args(args(vec![b"alpha", b"predict", b"--prompt=\xffab"])).unwrap_err();
        assert!(e.contains("the value of --prompt"), "{e}");
        let e = utf8_args(args(vec![b"alpha", b"train", b"\xfe"])).unwrap_err();
        assert!(e.contains("argument 2"), "{e}");
        assert_eq!(utf8_args(args(vec![b"alpha", b"systems"])).unwrap(), vec!["alpha", "systems"]);
    }

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(human_bytes(512), "512 bytes");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
        assert_eq!(group(1048576usize), "1,048,576");
    }
}
