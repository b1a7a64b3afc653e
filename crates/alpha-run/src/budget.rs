//! Training to a wall-clock budget: the clock a run spends, the warmdown factor it gives
//! ([`alpha_learn::TimeBudget`]), and what a checkpoint carries so a resume spends the rest.
//!
//! The budget counts **training time**: each update's pass through the step loop — writing the
//! host scalars, filling the batch, the device's step, reading the loss back, the point's record
//! and the progress line. It leaves out what does not train and whose cost depends on things
//! other than the system and device: start-up (reading the checkpoint, opening and hashing the
//! data), compilation (planning, PTX, CUDA-graph capture, all done before the first update),
//! held-out evaluation at checkpoints, and checkpoint writes (disk speed). The reference recipe
//! draws the same line: its timer stops for validation and excludes compilation.
//!
//! A resumed run cannot repeat an uninterrupted one bit for bit: the factor of each update
//! depends on measured times, which differ from run to run (and the process restarting has its
//! own first-step costs). What a resume does keep is the budget's state: the time already spent
//! and the step-time mean it was measured over come from the checkpoint, so the run goes on
//! spending the same budget, and the factor continues from where it was instead of restarting
//! at 1.

use std::time::Duration;

use alpha_learn::TimeBudget;

/// A budget and how much of it is spent: what a checkpoint records.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetState {
    pub budget: TimeBudget,
    /// Training time spent, seconds.
    pub elapsed: f64,
    /// Updates that time was spent on: the mean step time is `elapsed / timed_steps`.
    pub timed_steps: u64,
}

impl BudgetState {
    pub fn new(budget: TimeBudget) -> Self {
        BudgetState { budget, elapsed: 0.0, timed_steps: 0 }
    }

    /// Mean training time an update, seconds (0 before the first).
    pub fn mean_step(&self) -> f64 {
        if self.timed_steps == 0 {
            0.0
        } else {
            self.elapsed / self.timed_steps as f64
        }
    }

    /// The factor on every peak for the next update.
    pub fn factor(&self) -> f64 {
        self.budget.factor(self.elapsed, self.mean_step())
    }

    /// Count one update's training time.
    pub fn add(&mut self, step: Duration) {
        self.elapsed += step.as_secs_f64();
        self.timed_steps += 1;
    }

    /// Seconds of the budget left (0 once spent).
    pub fn left(&self) -> f64 {
        (self.budget.seconds - self.elapsed).max(0.0)
    }

    pub fn spent(&self) -> bool {
        self.budget.spent(self.elapsed)
    }

    /// Updates the rest of the budget holds at the mean step time so far (None before the first).
    pub fn updates_left(&self) -> Option<u64> {
        let mean = self.mean_step();
        (mean > 0.0).then(|| (self.left() / mean).ceil() as u64)
    }
}

/// Seconds as a person reads a time left: `42.0 s`, `9m 05s`, `1h 02m`.
pub fn human_seconds(s: f64) -> String {
    let s = s.max(0.0);
    if s < 60.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        let whole = s.round() as u64;
        format!("{}m {:02}s", whole / 60, whole % 60)
    } else {
        let minutes = (s / 60.0).round() as u64;
        format!("{}h {:02}m", minutes / 60, minutes % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_spends_time_and_gives_the_factor_from_its_mean() {
        let mut s = BudgetState::new(TimeBudget { seconds: 10.0, warmdown_updates: 4 });
        assert_eq!((s.factor(), s.mean_step(), s.updates_left()), (1.0, 0.0, None));
        for _ in 0..8 {
            s.add(Duration::from_millis(1000));
        }
        // 2 s left, a mean of 1 s: the warmdown (4 s) has begun, half way down.
        assert!((s.mean_step() - 1.0).abs() < 1e-12);
        assert!((s.factor() - 0.5).abs() < 1e-12);
        assert_eq!(s.updates_left(), Some(2));
        assert!(!s.spent());
        s.add(Duration::from_millis(2500));
        assert!(s.spent() && s.left() == 0.0 && s.factor() == 0.0);
    }

    #[test]
    fn times_left_read_in_seconds_minutes_or_hours() {
        assert_eq!(human_seconds(4.04), "4.0 s");
        assert_eq!(human_seconds(545.0), "9m 05s");
        assert_eq!(human_seconds(3720.0), "1h 02m");
        assert_eq!(human_seconds(-3.0), "0.0 s");
    }
}
