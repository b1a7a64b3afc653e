//! Learning-rate schedules and Muon's momentum ramp, computed in binary64 on the host and fed to
//! the step as scalars. A schedule is a shape: it gives the rate of update `t` for a group's peak,
//! so one schedule serves every optimizer group, each with its own peak. Everything here is a
//! function of the update count alone, so a checkpoint's step is all a resume needs.

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

#[cfg(test)]
mod tests {
    use super::*;

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
