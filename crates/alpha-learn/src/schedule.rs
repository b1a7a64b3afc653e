//! Learning-rate schedules, computed in binary64 on the host and fed to the step as a scalar.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Schedule {
    Constant {
        lr: f64,
    },
    /// Linear warm-up to `peak` over `warmup` updates (update `warmup` is at peak), then a
    /// cosine to `floor`·peak at update `total`, and the floor after.
    WarmupCosine {
        peak: f64,
        warmup: u64,
        total: u64,
        floor: f64,
    },
}

impl Schedule {
    /// The rate of update `step`, counted from 1.
    pub fn lr(&self, step: u64) -> f64 {
        match *self {
            Schedule::Constant { lr } => lr,
            Schedule::WarmupCosine { peak, warmup, total, floor } => {
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
        }
    }

    /// A one-line description for records.
    pub fn describe(&self) -> String {
        match self {
            Schedule::Constant { lr } => format!("constant {lr}"),
            Schedule::WarmupCosine { peak, warmup, total, floor } => {
                format!("warm-up {warmup} to {peak}, cosine to {floor}×peak at {total}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_cosine_to_the_floor() {
        let s = Schedule::WarmupCosine { peak: 1e-3, warmup: 100, total: 1100, floor: 0.1 };
        assert_eq!(s.lr(50), 0.5e-3);
        assert_eq!(s.lr(100), 1e-3);
        assert!((s.lr(600) - 0.55e-3).abs() < 1e-12, "midpoint of the cosine is halfway: {}", s.lr(600));
        assert!((s.lr(1100) - 1e-4).abs() < 1e-15);
        assert!((s.lr(5000) - 1e-4).abs() < 1e-15);
        assert!(s.lr(101) < s.lr(100) && s.lr(99) < s.lr(100));
    }
}
