//! Learning-rate schedules and Muon's momentum ramp, computed in binary64 on the host and fed to
//! the step as scalars. A schedule is a shape: it gives the rate of update `t` for a group's peak,
//! so one schedule serves every optimizer group, each with its own peak. The schedules and the
//! momentum ramp are functions of the update count alone, so a checkpoint's step is all a resume
//! needs; [`TimeBudget`]'s factor is a function of measured time instead, which the checkpoint
//! carries beside the step.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Schedule {
    /// The peak at every update.
    Constant,
    /// Linear warm-up to the peak over `warmup` updates (update `warmup` is at peak), then a
    /// cosine to `floor`·peak at update `total`, and the floor after.
    WarmupCosine { warmup: u64, total: u64, floor: f64 },
    /// The peak, then a linear warmdown to zero over the last `warmdown` updates of `total`
    /// (Polf's iteration-based warmdown): update t ≥ total − warmdown + 1 runs at
    /// peak·(total − t + 1)/warmdown, so the last update is at peak/warmdown; past `total`, zero.
    LinearWarmdown { total: u64, warmdown: u64 },
}

impl Schedule {
    /// The rate of update `step` (counted from 1) for a group whose peak is `peak`.
    pub fn lr(&self, peak: f64, step: u64) -> f64 {
        match *self {
            Schedule::Constant => peak,
            Schedule::WarmupCosine { warmup, total, floor } => {
                let min = peak * floor;
                if step < warmup {
                    peak * step as f64 / warmup as f64
                } else if step >= total {
                    min
                } else {
                    let span = (total - warmup).max(1) as f64;
                    let progress = (step - warmup) as f64 / span;
                    min + 0.5 * (peak - min) * (1.0 + (std::f64::consts::PI * progress).cos())
                }
            }
            Schedule::LinearWarmdown { total, warmdown } => {
                let warmdown = warmdown.max(1);
                // Updates left, this one included.
                let left = (total + 1).saturating_sub(step);
                if left >= warmdown {
                    peak
                } else {
                    peak * left as f64 / warmdown as f64
                }
            }
        }
    }

    /// A one-line description for records, for a group whose peak is `peak`.
    pub fn describe(&self, peak: f64) -> String {
        match self {
            Schedule::Constant => format!("constant {peak}"),
            Schedule::WarmupCosine { warmup, total, floor } => {
                format!("warm-up {warmup} to {peak}, cosine to {floor}×peak at {total}")
            }
            Schedule::LinearWarmdown { total, warmdown } => {
                format!("constant {peak}, linear warmdown to 0 over the last {warmdown} of {total}")
            }
        }
    }
}

/// Muon's momentum ramp (Polf): the momentum rises linearly from `from` to the optimizer's
/// momentum over the first `updates` updates. Update t uses (1−f)·from + f·μ with
/// f = min((t − 1)/updates, 1): the fraction of the ramp done before it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MomentumRamp {
    pub from: f64,
    pub updates: u64,
}

impl MomentumRamp {
    pub fn momentum(&self, to: f64, step: u64) -> f64 {
        let done = step.saturating_sub(1) as f64 / self.updates.max(1) as f64;
        let f = done.min(1.0);
        (1.0 - f) * self.from + f * to
    }
}

/// Training to a wall-clock budget (Polf's rule, SYSTEMS.md §4.2): a factor on every group's
/// peak that is 1 until the time left falls below `warmdown_updates` × the mean step time, then
/// time left ÷ (`warmdown_updates` × mean step time), so the rate falls linearly to 0 as the
/// budget runs out. The warmdown is set in updates but measured in time because the number of
/// updates a budget holds is known only as the run goes; with a steady step time the factor
/// falls by 1/`warmdown_updates` an update over the last `warmdown_updates` updates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimeBudget {
    /// Seconds of training time the run may spend.
    pub seconds: f64,
    /// Updates' worth of time over which the rate falls to 0.
    pub warmdown_updates: u64,
}

/// Polf's warmdown: the last 1,200 updates' worth of time.
pub const DEFAULT_WARMDOWN_UPDATES: u64 = 1200;

impl TimeBudget {
    /// The factor for the next update, `elapsed` seconds into the budget, at a mean step time of
    /// `mean_step` seconds; in [0, 1], and 0 once the budget is spent. Before the first update
    /// (no mean yet, `mean_step` 0) it is 1, as the reference's is.
    pub fn factor(&self, elapsed: f64, mean_step: f64) -> f64 {
        let remaining = (self.seconds - elapsed).max(0.0);
        let warmdown = self.warmdown_updates as f64 * mean_step.max(0.0);
        if remaining >= warmdown {
            1.0
        } else {
            // warmdown > remaining ≥ 0 here, so the quotient is finite and below 1.
            remaining / warmdown
        }
    }

    /// Whether `elapsed` seconds have spent the budget.
    pub fn spent(&self, elapsed: f64) -> bool {
        elapsed >= self.seconds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_budget_is_1_until_the_warmdown_then_falls_linearly_to_0() {
        // 600 s at 50 ms a step: the warmdown is the last 1,200 × 0.05 = 60 s.
        let b = TimeBudget { seconds: 600.0, warmdown_updates: 1200 };
        assert_eq!(b.factor(0.0, 0.0), 1.0, "before any step there is no mean: full rate");
        assert_eq!(b.factor(500.0, 0.05), 1.0);
        assert_eq!(b.factor(540.0, 0.05), 1.0, "60 s left: the warmdown starts at factor 1");
        assert!((b.factor(570.0, 0.05) - 0.5).abs() < 1e-12);
        assert!((b.factor(599.95, 0.05) - 1.0 / 1200.0).abs() < 1e-9, "the last update's worth");
        assert_eq!(b.factor(600.0, 0.05), 0.0);
        assert_eq!(b.factor(650.0, 0.05), 0.0, "past the budget: 0, never negative");
        // A slower step starts the warmdown earlier.
        assert!(b.factor(500.0, 0.1) < 1.0);
        let mut last = 1.0;
        for t in 0..=600 {
            let f = b.factor(t as f64, 0.05);
            assert!((0.0..=last).contains(&f), "at {t} s: {f} after {last}");
            last = f;
        }
        assert!(!b.spent(599.999) && b.spent(600.0));
    }

    #[test]
    fn warmup_then_cosine_to_the_floor() {
        let s = Schedule::WarmupCosine { warmup: 100, total: 1100, floor: 0.1 };
        let lr = |t| s.lr(1e-3, t);
        assert_eq!(lr(50), 0.5e-3);
        assert_eq!(lr(100), 1e-3);
        assert!((lr(600) - 0.55e-3).abs() < 1e-12, "midpoint of the cosine is halfway: {}", lr(600));
        assert!((lr(1100) - 1e-4).abs() < 1e-15);
        assert!((lr(5000) - 1e-4).abs() < 1e-15);
        assert!(lr(101) < lr(100) && lr(99) < lr(100));
    }

    #[test]
    fn constant_is_the_peak() {
        assert_eq!(Schedule::Constant.lr(0.04, 1), 0.04);
        assert_eq!(Schedule::Constant.lr(0.04, 1_000_000), 0.04);
    }

    #[test]
    fn linear_warmdown_over_the_last_updates() {
        // Polf without a wall-clock cap: 20,000 iterations, the last 1,200 warm down.
        let s = Schedule::LinearWarmdown { total: 20_000, warmdown: 1200 };
        assert_eq!(s.lr(0.04, 1), 0.04);
        assert_eq!(s.lr(0.04, 18_800), 0.04, "1,201 updates left: still at peak");
        assert_eq!(s.lr(0.04, 18_801), 0.04, "1,200 left: the factor is 1200/1200");
        assert_eq!(s.lr(1.0, 18_802), 1199.0 / 1200.0);
        assert_eq!(s.lr(1.0, 20_000), 1.0 / 1200.0, "the last update");
        assert_eq!(s.lr(1.0, 20_001), 0.0);
        assert!(s.lr(1.0, 19_400) < s.lr(1.0, 19_399));
    }

    #[test]
    fn momentum_ramp_from_0_85_to_0_95_over_500_updates() {
        let r = MomentumRamp { from: 0.85, updates: 500 };
        assert_eq!(r.momentum(0.95, 1), 0.85);
        assert!((r.momentum(0.95, 251) - 0.90).abs() < 1e-15);
        assert_eq!(r.momentum(0.95, 501), 0.95);
        assert_eq!(r.momentum(0.95, 10_000), 0.95);
    }
}
