//! Causal grouped-query attention, forward and backward, flash-style: the T×T score matrix is
//! never written to global memory.
//!
//! Why: attention is a fifth of the seed's Coppelius step (forward, "query" and "key" kernels,
//! SYSTEMS.md §2.5) and at T = 1024 a materialised score matrix would be 4 MB per head per
//! pass. Keeping scores in registers and shared memory bounds memory by the inputs and outputs,
//! and the forward saves only the per-row log-sum-exp, from which the backward recomputes every
//! probability exactly. Each output element is owned by one thread that sums in a fixed order,
//! so results repeat bit for bit (no atomics). This first version favours being plainly right
//! over speed: fp32 CUDA-core arithmetic, one thread per query row (forward, dQ) or per key row
//! (dK, dV); tensor-core tiles are the next step.
//!
//! How:
//! - forward, grid (⌈T/64⌉, B·H), 64 threads: a thread holds its query row and output
//!   accumulator in registers and walks the key/value tiles (64 rows, staged in shared memory,
//!   read as broadcasts) up to its diagonal, with the running-max softmax (rescaling only when the
//!   maximum grows). Writes o and lse = m + ln l.
//! - dQ, same grid: `delta_i = do_i·o_i` (saved to a scratch row for the next kernel), then for
//!   every key j ≤ i: `p = exp(s − lse_i)`, `ds = p(do_i·v_j − delta_i)·scale`, `dq += ds·k_j`.
//!   The query row sits transposed in shared memory (bank-conflict-free), dO and dQ in registers.
//! - dK/dV, grid (⌈T/64⌉, B·G), 64 threads, a thread per key row: for every query head of the
//!   group and every query tile (16 rows of q, dO, lse, delta in shared memory) from the diagonal
//!   down: `dv += p·do_i`, `dk += ds·q_i`, in the CPU reference's order (heads, then queries).
//!
//! With a soft-cap c the logits are `c·tanh(s/c)` and ds gains the factor `1 − (s/c)²`.
//! Head dimension: a multiple of 4, at most 64 (registers hold whole rows).
//!
//! Files: the spec and the interface every family shares (`spec.rs`), the fp32 kernels
//! (`fp32.rs`), each launch's argument list (`launch.rs`), the tensor-core families ([`mma`],
//! [`wgmma`]).

use anyhow::{bail, Result};

use crate::kernels::pointwise::tanh;
use crate::ptx::{addr, Kernel, Opnd, ParamTy, Reg, RegKind};

mod fp32;
mod launch;
pub mod mma;
mod spec;
pub mod wgmma;

pub use fp32::*;
pub use launch::*;
pub use spec::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_fit_the_static_shared_budget() {
        let dims = Dims { b: 1, h: 8, g: 8, t: 1024, d: 64, scale: 0.125, softcap: None };
        dims.check().unwrap();
        for r in [false, true] {
            for load in [[false, false], [true, false], [false, true], [true, true]] {
                for k in [
                    forward_kernel_rotating(&dims, load),
                    backward_dq_kernel_rotating(&dims, r, load),
                    backward_dkv_kernel_rotating(&dims, r, load),
                ] {
                    k.check_budget().unwrap();
                }
            }
        }
        let capped = Dims { softcap: Some(30.0), h: 4, g: 2, d: 16, t: 70, ..dims };
        assert!(backward_dkv_kernel(&capped, false).render().contains("attention_bwd_dkv"));
        assert!(Dims { d: 128, ..dims }.check().is_err());
        assert!(Dims { g: 3, ..dims }.check().is_err());
    }
}
