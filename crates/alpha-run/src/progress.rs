//! Progress lines for a training run whose stderr is not a terminal (a log file, a pipe, CI),
//! where the progress bar does not draw: a line for the first step, each tenth of the run, and
//! at least every [`LINE_EVERY`], so a long run is never silent. Under a wall-clock budget a
//! tenth is a tenth of the budget's time, and the line says the time left and the rate's factor.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use crate::budget::{human_seconds, BudgetState};

/// The longest a run without a progress bar goes without a line.
pub const LINE_EVERY: Duration = Duration::from_secs(10);

/// Decides when a step's line is printed.
pub struct StepLines {
    /// Off when progress is not wanted (`--quiet`) or the bar shows it (stderr is a terminal).
    on: bool,
    tenth: u64,
    last: Instant,
    /// Under a budget: the training time (seconds) of the next tenth's line, and a tenth.
    next_mark: f64,
    time_tenth: f64,
}

impl StepLines {
    /// For an invocation of `steps` updates, or under `budget` the rest of its time;
    /// `progress`: progress is wanted at all.
    pub fn new(progress: bool, steps: u64, budget: Option<&BudgetState>) -> Self {
        let mut lines = Self::lines(progress && !std::io::stderr().is_terminal(), steps);
        if let Some(b) = budget {
            lines.time_tenth = b.budget.seconds / 10.0;
            lines.next_mark = b.elapsed + lines.time_tenth;
        }
        lines
    }

    fn lines(on: bool, steps: u64) -> Self {
        StepLines { on, tenth: (steps / 10).max(1), last: Instant::now(), next_mark: f64::INFINITY, time_tenth: 0.0 }
    }

    /// Whether the line after `done` updates of this invocation, `elapsed` seconds into a
    /// budget, is due at `now`.
    fn due_by_time(&mut self, done: u64, elapsed: f64, now: Instant) -> bool {
        if !self.on {
            return false;
        }
        let mark = elapsed >= self.next_mark;
        while elapsed >= self.next_mark {
            self.next_mark += self.time_tenth;
        }
        let due = done == 1 || mark || now.duration_since(self.last) >= LINE_EVERY;
        if due {
            self.last = now;
        }
        due
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

    /// Print the line for `step` (the `done`-th of this invocation) of a budgeted run, `b`
    /// counting its time, if it is due.
    pub fn budgeted(&mut self, step: u64, done: u64, loss: f64, tokens_per_s: f64, b: &BudgetState, factor: f64) {
        if self.due_by_time(done, b.elapsed, Instant::now()) {
            let line = format!(
                "step {step}  loss {loss:.4}  {tokens_per_s:.0} tok/s  lr ×{factor:.4}  {} of {} left\n",
                human_seconds(b.left()),
                human_seconds(b.budget.seconds)
            );
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

    #[test]
    fn a_budgeted_run_prints_each_tenth_of_its_time() {
        let budget = alpha_learn::TimeBudget { seconds: 10.0, warmdown_updates: 5 };
        let mut lines = StepLines::lines(true, u64::MAX);
        lines.time_tenth = 1.0;
        lines.next_mark = 1.0;
        let t0 = lines.last;
        // 0.25 s a step for 40 steps: a line at the first step and at each whole second.
        let mut b = BudgetState::new(budget);
        let mut shown = vec![];
        for done in 1..=40 {
            b.add(Duration::from_millis(250));
            if lines.due_by_time(done, b.elapsed, t0) {
                shown.push(done);
            }
        }
        assert_eq!(shown, vec![1, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40]);
    }
}
