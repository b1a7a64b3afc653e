//! A unary of a fused chain's input recomputed in the chain rather than read.

use super::*;

/// A chain's inputs that are a unary function of another of its inputs (a gated unit's
/// `gelu(gate)` beside `gate` in its backward) recomputed as a first step instead of read: one
/// tensor fewer from memory. The step is the pointwise kernel's own instruction sequence, which
/// wrote the value (as a launch or a GEMM's activation epilogue), so the same bits. Returns the
/// chain's inputs, steps and outputs renumbered.
pub(crate) fn recompute_unary_inputs(
    g: &alpha_ir::Graph,
    mut inputs: Vec<Value>,
    mut steps: Vec<fused::Step>,
    mut outputs: Vec<usize>,
) -> (Vec<Value>, Vec<fused::Step>, Vec<usize>) {
    use fused::{Src, Step};
    loop {
        // An input x = u(y) with y an input too.
        let found = inputs.iter().enumerate().find_map(|(ix, x)| {
            let Op::Unary(u) = g.nodes[x.node as usize].op else { return None };
            let iy = inputs.iter().position(|&y| y == g.nodes[x.node as usize].inputs[0])?;
            Some((ix, iy, u))
        });
        let Some((ix, iy, u)) = found else { return (inputs, steps, outputs) };
        // Step 0 computes x from y; the old steps move up one; input x goes.
        let at = |j: usize| if j > ix { j - 1 } else { j };
        let map = |src: Src| match src {
            Src::Step(k) => Src::Step(k + 1),
            Src::Input(j) if j == ix => Src::Step(0),
            Src::Input(j) => Src::Input(at(j)),
        };
        let mut next = vec![Step::Unary(u, Src::Input(at(iy)))];
        next.extend(steps.iter().map(|st| match *st {
            Step::Unary(f, a) => Step::Unary(f, map(a)),
            Step::Binary(b, x, y) => Step::Binary(b, map(x), map(y)),
        }));
        steps = next;
        outputs = outputs.iter().map(|&k| k + 1).collect();
        inputs.remove(ix);
    }
}
