//! `alpha plan --fits SIZE`: the largest batch whose GPU training run fits in a device's memory,
//! found on the CPU from the arenas the CUDA backend would allocate (no GPU needed).
//!
//! A GPU training run holds three arenas at once: the training step's, the held-out
//! evaluator's (an inference program at `min(batch, held-out windows)` sequences) and, beside it,
//! the batch-1 program that samples text at each scored checkpoint. Each is the
//! CUDA lowering's whole arena (plan, constants and kernel scratch), which is what the backend
//! allocates in one `cuMemAlloc`. The CUDA context, its module images and graphs take memory
//! outside them; [`CONTEXT_RESERVE`] is set aside for that.

use alpha_learn::inference_program;
use alpha_systems::System;
use anyhow::{anyhow, bail, Result};

use crate::validate::human_bytes;

/// Device memory set aside for what a run holds outside its arenas: the CUDA context, loaded
/// modules, captured graphs and timing buffers.
pub const CONTEXT_RESERVE: u64 = 1 << 30;

/// Parses a memory size: bytes, or a number with KB/MB/GB/TB (10³ steps) or KiB/MiB/GiB/TiB
/// (2¹⁰ steps), e.g. `139GiB`, `80 GB`, `1.5TiB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(t.len());
    let (number, unit) = (t[..split].replace('_', ""), t[split..].trim());
    let scale: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024f64,
        "mib" => 1024f64.powi(2),
        "gib" => 1024f64.powi(3),
        "tib" => 1024f64.powi(4),
        _ => return Err(format!("unknown unit {unit:?}: give bytes, or KB/MB/GB/TB, or KiB/MiB/GiB/TiB")),
    };
    let value: f64 = number.parse().map_err(|_| format!("{s:?} is not a size (e.g. 139GiB or 80GB)"))?;
    let bytes = value * scale;
    if !(1.0..=1e18).contains(&bytes) {
        return Err(format!("{s:?} is out of range: give from 1 byte to 10^18 bytes"));
    }
    Ok(bytes.round() as u64)
}

/// Device bytes of a GPU training run of `system` at `batch`: the training step's arena and
/// the held-out evaluator's with its batch-1 sampler's (a scored checkpoint writes a sample by
/// default), as the CUDA backend lowers them. Where the backend refuses a
/// program (a tensor past its 32-bit indexing), the plan's own arena stands in and the refusal
/// is kept: such a batch does not run whatever the memory.
pub fn gpu_training_bytes(
    system: &dyn System,
    batch: usize,
    accumulate: usize,
    heldout_windows: usize,
) -> Result<Needs> {
    let config = alpha_run::session::cuda_config();
    let mut refused = None;
    let mut arena = |program: &alpha_ir::Program| -> Result<u64> {
        match alpha_cuda::lower::lower_program(program, &config) {
            Ok(lowered) => Ok(lowered.arena as u64),
            Err(e) => {
                refused.get_or_insert(format!("{e:#}"));
                Ok(alpha_plan::plan(program, alpha_plan::bytes, 256)?.arena as u64)
            }
        }
    };
    let mut learner = system.learner(system.default_steps());
    learner.accumulation = accumulate;
    let step = arena(&learner.training_program(system.model(batch)?)?)?;
    let evaluator = if heldout_windows > 0 {
        arena(&inference_program(system.model(batch.min(heldout_windows))?)?)?
            + arena(&inference_program(system.model(1)?)?)?
    } else {
        0
    };
    Ok(Needs { batch, step, evaluator, refused })
}

/// What a run at one batch takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Needs {
    pub batch: usize,
    /// The training step's arena.
    pub step: u64,
    /// The held-out evaluator's arena and its batch-1 sampler's.
    pub evaluator: u64,
    /// Why the CUDA backend would not compile this batch, if it would not.
    pub refused: Option<String>,
}

impl Needs {
    pub fn total(&self) -> u64 {
        self.step + self.evaluator + CONTEXT_RESERVE
    }

    /// Runs in `limit` bytes: compiled, and small enough.
    pub fn fits(&self, limit: u64) -> bool {
        self.refused.is_none() && self.total() <= limit
    }

    pub fn describe(&self) -> String {
        let mut s = format!(
            "batch {}: {} ({} bytes: step {}, held-out evaluator {}, context {})",
            self.batch,
            human_bytes(self.total()),
            self.total(),
            human_bytes(self.step),
            human_bytes(self.evaluator),
            human_bytes(CONTEXT_RESERVE)
        );
        if let Some(why) = &self.refused {
            s.push_str(&format!("; the CUDA backend refuses it ({why}), so its plan's arena is shown"));
        }
        s
    }
}

/// The largest batch in `1..=max_batch` whose needs fit in `limit` bytes, with its needs and
/// those of the next batch (None at `max_batch`); None if batch 1 does not fit. Needs grow with
/// the batch, so a doubling search finds a batch that does not fit and bisection the boundary:
/// about 2·log₂(batch) evaluations.
pub fn largest_batch(
    limit: u64,
    max_batch: usize,
    mut needs: impl FnMut(usize) -> Result<Needs>,
) -> Result<Option<(Needs, Option<Needs>)>> {
    if max_batch == 0 {
        bail!("the largest batch to try must be at least 1");
    }
    let first = needs(1)?;
    // A program the backend cannot lower at all (an op without a GPU kernel) is no question of
    // memory: say so rather than that batch 1 does not fit.
    if let Some(why) = &first.refused {
        bail!("the CUDA backend does not run it at any batch: {why}");
    }
    if !first.fits(limit) {
        return Ok(None);
    }
    let (mut fits, mut over) = (first, None::<Needs>);
    // Doubling: the first batch that does not fit, or max_batch fitting.
    while over.is_none() && fits.batch < max_batch {
        let next = needs((fits.batch * 2).min(max_batch))?;
        if next.fits(limit) {
            fits = next;
        } else {
            over = Some(next);
        }
    }
    let Some(mut over) = over else { return Ok(Some((fits, None))) };
    while over.batch - fits.batch > 1 {
        let mid = needs(fits.batch + (over.batch - fits.batch) / 2)?;
        if mid.fits(limit) {
            fits = mid;
        } else {
            over = mid;
        }
    }
    Ok(Some((fits, Some(over))))
}

/// The line `alpha plan --fits` prints.
pub fn report(system: &str, limit: u64, found: Option<(Needs, Option<Needs>)>) -> Result<String> {
    let size = human_bytes(limit);
    match found {
        None => Err(anyhow!(
            "{system} does not run in {size} ({limit} bytes) even at batch 1 (with {} set aside for the CUDA context)",
            human_bytes(CONTEXT_RESERVE)
        )),
        Some((fits, next)) => {
            let mut s = format!(
                "largest batch that fits in {size} ({limit} bytes): {} sequences\n  {}\n",
                fits.batch,
                fits.describe()
            );
            match next {
                Some(n) if n.refused.is_some() => s.push_str(&format!("  {}\n", n.describe())),
                Some(n) => s.push_str(&format!("  {} does not fit\n", n.describe())),
                None => s.push_str("  (the largest batch Alpha takes)\n"),
            }
            Ok(s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_decimal_and_binary_units() {
        assert_eq!(parse_size("139GiB"), Ok(139 * (1 << 30)));
        assert_eq!(parse_size("80 GB"), Ok(80_000_000_000));
        assert_eq!(parse_size("1.5TiB"), Ok(3 * (1u64 << 39)));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1_000 mib"), Ok(1000 << 20));
        assert!(parse_size("12 furlongs").unwrap_err().contains("unknown unit"));
        assert!(parse_size("GiB").unwrap_err().contains("not a size"));
        assert!(parse_size("0GiB").unwrap_err().contains("out of range"));
        assert!(parse_size("1.2.3GB").unwrap_err().contains("not a size"));
    }

    /// Needs of a made-up system: 3 GB fixed, 700 MB a sequence.
    fn linear(batch: usize) -> Result<Needs> {
        Ok(Needs { batch, step: 3_000_000_000 + 700_000_000 * batch as u64, evaluator: 0, refused: None })
    }

    #[test]
    fn the_boundary_batch_fits_and_the_next_does_not() {
        for limit in [5_000_000_000u64, 139 << 30, 80_000_000_000, 3_000_000_000 + CONTEXT_RESERVE + 700_000_000] {
            let (fits, next) = largest_batch(limit, 1 << 20, linear).unwrap().unwrap();
            let expected = (limit - CONTEXT_RESERVE - 3_000_000_000) / 700_000_000;
            assert_eq!(fits.batch as u64, expected, "limit {limit}");
            assert!(fits.total() <= limit);
            let next = next.unwrap();
            assert_eq!(next.batch, fits.batch + 1);
            assert!(next.total() > limit);
        }
    }

    #[test]
    fn too_small_a_device_and_the_batch_cap_are_reported() {
        assert_eq!(largest_batch(1_000, 1 << 20, linear).unwrap(), None);
        assert!(report("toy", 1_000, None).unwrap_err().to_string().contains("even at batch 1"));
        // A batch the backend refuses does not run, however much memory there is.
        let capped = |b: usize| -> Result<Needs> {
            let mut n = linear(b)?;
            n.refused = (b > 83).then(|| "a tensor exceeds 32-bit indexing".to_string());
            Ok(n)
        };
        let (fits, next) = largest_batch(u64::MAX / 2, 1 << 20, capped).unwrap().unwrap();
        assert_eq!((fits.batch, next.as_ref().map(|n| n.batch)), (83, Some(84)));
        assert!(report("toy", u64::MAX / 2, Some((fits, next))).unwrap().contains("refuses it (a tensor exceeds"));
        // A program refused at every batch is an error saying so, not "batch 1 does not fit".
        let never = |b: usize| -> Result<Needs> {
            let mut n = linear(b)?;
            n.refused = Some("RMSNorm has no GPU kernel yet".to_string());
            Ok(n)
        };
        let e = largest_batch(u64::MAX / 2, 1 << 20, never).unwrap_err().to_string();
        assert!(e.contains("does not run it at any batch") && e.contains("no GPU kernel"), "{e}");
        let (fits, next) = largest_batch(u64::MAX / 2, 100, linear).unwrap().unwrap();
        assert_eq!((fits.batch, next.clone()), (100, None));
        assert!(report("toy", u64::MAX / 2, Some((fits, next))).unwrap().contains("100 sequences"));
    }
}
