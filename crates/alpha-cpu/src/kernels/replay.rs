//! Reverse-time passes over a recurrence whose states are too many to keep (the delta rule's
//! memory, the harmonic scan's bank). Stepping a recurrence backwards divides by its decay or
//! its write's contraction, unstable where those are small, and storing every state costs the
//! state's size at every position. So one forward pass keeps the state at the start of every
//! chunk of ⌈√T⌉ positions, then each chunk, last first, is stepped again from its checkpoint
//! with its states kept: about 2√T states a window for the price of a second forward pass, and
//! exactly the forward's states (same operations, same order).

use std::ops::Range;

use crate::real::Real;

/// One window's checkpoints, and the states of the chunk replayed last.
pub struct Replay<T> {
    t: usize,
    chunk: usize,
    size: usize,
    /// The state before each chunk's first position.
    starts: Vec<T>,
    /// states[j] is the state before the replayed chunk's j-th position; states[len] after it.
    states: Vec<T>,
}

impl<T: Real> Replay<T> {
    /// Step a window of `t` positions from `initial`, `step(s, state)` taking the state past
    /// position s, and keep each chunk's starting state.
    pub fn record(t: usize, initial: &[T], mut step: impl FnMut(usize, &mut [T])) -> Self {
        let size = initial.len();
        let chunk = (t as f64).sqrt().ceil().max(1.0) as usize;
        let mut starts = vec![T::zero(); t.div_ceil(chunk) * size];
        let mut state = initial.to_vec();
        for s in 0..t {
            if s % chunk == 0 {
                starts[(s / chunk) * size..][..size].copy_from_slice(&state);
            }
            step(s, &mut state);
        }
        Replay { t, chunk, size, starts, states: vec![T::zero(); (chunk + 1) * size] }
    }

    /// Positions a chunk (the last may have fewer).
    pub fn chunk_len(&self) -> usize {
        self.chunk
    }

    /// The chunks' positions, last chunk first.
    pub fn chunks_last_first(&self) -> impl Iterator<Item = Range<usize>> {
        let (t, chunk) = (self.t, self.chunk);
        (0..t.div_ceil(chunk)).rev().map(move |c| c * chunk..((c + 1) * chunk).min(t))
    }

    /// Step the chunk at `positions` again from its checkpoint, keeping every state;
    /// `step(s, j, state)` as in [`Replay::record`], with j = s − the chunk's first position.
    pub fn replay(&mut self, positions: Range<usize>, mut step: impl FnMut(usize, usize, &mut [T])) {
        let size = self.size;
        let c = positions.start / self.chunk;
        self.states[..size].copy_from_slice(&self.starts[c * size..][..size]);
        for s in positions.clone() {
            let j = s - positions.start;
            let (before, after) = self.states.split_at_mut((j + 1) * size);
            after[..size].copy_from_slice(&before[j * size..]);
            step(s, j, &mut after[..size]);
        }
    }

    /// The states before and after the replayed chunk's j-th position.
    pub fn around(&self, j: usize) -> (&[T], &[T]) {
        let size = self.size;
        (&self.states[j * size..][..size], &self.states[(j + 1) * size..][..size])
    }
}

/// `out` ← the sum of `parts` taken in order: each window's share of a gradient the windows
/// share, added window by window so the result repeats bit for bit.
pub fn sum_in_order<T: Real>(out: &mut [T], parts: &[Vec<T>]) {
    out.iter_mut().for_each(|x| *x = T::zero());
    for part in parts {
        for (a, &x) in out.iter_mut().zip(part) {
            *a = *a + x;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replayed chunks give back every state of the forward pass, at every window length
    /// (chunks that divide it and chunks that do not).
    #[test]
    fn replayed_states_are_the_forward_pass_states() {
        for t in [1, 2, 5, 9, 10, 17] {
            let step = |s: usize, x: &mut [f64]| {
                x[0] = 0.9 * x[0] + (s as f64).sin();
                x[1] = x[1] * x[0] + 1.0;
            };
            let mut forward = vec![vec![0.5, -1.0]];
            let mut state = vec![0.5, -1.0];
            for s in 0..t {
                step(s, &mut state);
                forward.push(state.clone());
            }
            let mut replay = Replay::record(t, &[0.5, -1.0], step);
            let mut seen = vec![];
            for chunk in replay.chunks_last_first().collect::<Vec<_>>() {
                replay.replay(chunk.clone(), |s, _, x| step(s, x));
                for s in chunk.clone().rev() {
                    let (before, after) = replay.around(s - chunk.start);
                    assert_eq!(before, &forward[s][..], "T {t}: before position {s}");
                    assert_eq!(after, &forward[s + 1][..], "T {t}: after position {s}");
                    seen.push(s);
                }
            }
            assert_eq!(seen, (0..t).rev().collect::<Vec<_>>(), "T {t}");
        }
    }
}
