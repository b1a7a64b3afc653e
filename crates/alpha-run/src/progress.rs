//! Progress lines for a training run whose stderr is not a terminal (a log file, a pipe, CI),
//! where the progress bar does not draw: a line for the first step, each tenth of the run, and
//! at least every [`LINE_EVERY`], so a long run is never silent.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// The longest a run without a progress bar goes without a line.
pub const LINE_EVERY: Duration = Duration::from_secs(10);

/// Decides when a step's line is printed.
pub struct StepLines {
    /// Off when progress is not wanted (`--quiet`) or the bar shows it (stderr is a terminal).
    on: bool,
    tenth: u64,
    last: Instant,
}

impl StepLines {
    /// For an invocation of `steps` updates; `progress`: progress is wanted at all.
    pub fn new(progress: bool, steps: u64) -> Self {
        Self::lines(progress && !std::io::stderr().is_terminal(), steps)
    }

    fn lines(on: bool, steps: u64) -> Self {
        StepLines { on, tenth: (steps / 10).max(1), last: Instant::now() }
    }

    /// Whether the line for the `done`-th step of this invocation is due at `now`.
    fn due(&mut self, done: u64, now: Instant) -> bool {
        if !self.on {
            return false;
        }
        let due = done == 1 || done.is_multiple_of(self.tenth) || now.duration_since(self.last) >= LINE_EVERY;
        if due {
            self.last = now;
        }
        due
    }

    /// Print the line for `step` (the `done`-th of this invocation) if it is due. A stderr that
    /// cannot be written (its reader gone) loses the line, not the run.
    pub fn step(&mut self, step: u64, done: u64, last_step: u64, loss: f64, tokens_per_s: f64) {
        if self.due(done, Instant::now()) {
            let line = format!("step {step}/{last_step}  loss {loss:.4}  {tokens_per_s:.0} tok/s\n");
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_run_prints_a_line_at_least_every_ten_seconds() {
        let mut lines = StepLines::lines(true, 1_000_000_000);
        let t0 = lines.last;
        assert!(lines.due(1, t0), "the first step shows the run has started");
        assert!(!lines.due(2, t0 + Duration::from_secs(9)));
        assert!(lines.due(3, t0 + Duration::from_secs(11)));
        assert!(!lines.due(4, t0 + Duration::from_secs(20)));
        assert!(lines.due(5, t0 + Duration::from_secs(22)));
    }

    #[test]
    fn a_short_run_prints_each_tenth_and_none_when_off() {
        let mut lines = StepLines::lines(true, 100);
        let t0 = lines.last;
        let shown: Vec<u64> = (1..=100).filter(|&d| lines.due(d, t0)).collect();
        assert_eq!(shown, vec![1, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]);
        let mut off = StepLines::lines(false, 100);
        assert!(!(1..=100).any(|d| off.due(d, t0 + Duration::from_secs(60))));
    }
}
