//! Tiled bf16 tensor-core GEMM with fp32 accumulation and fused epilogues.
//!
//! Why: matrix products are 40% of a Coppelius step (SYSTEMS.md §2.5) and every one of them
//! takes bf16 operands. Training needs all four operand layouts without transposing copies —
//! `x·W` (A row-major, B row-major), `dY·Wᵀ` (B column-major), `Xᵀ·dY` (A column-major) — and
//! three ways to write the result: store it, add a residual (`out = acc + R`, the block's `x +=`),
//! or accumulate into the output (`out += acc`, gradient accumulation, llm.c's `+=` convention).
//!
//! How: `C[M,N] = A[M,K] · B[K,N]`, one output tile per block of 256 threads (8 warps as 2×4,
//! each warp a grid of `mma.sync.m16n8k16` tiles with fp32 accumulators). The tile is 128×128
//! down to 64×64, the largest that still gives each of the 132 SMs a block ([`GemmShape::tile`]):
//! one context's products are too small to fill the GPU with the largest. K advances 32 at a
//! time through two shared-memory stages fed from two register sets: while the tensor cores work
//! on one stage, the loads of the next two K-tiles are in flight, so global latency hides behind
//! two stages of work and each K-step meets one barrier. A K-contiguous operand (A row-major, B
//! column-major) is staged `[row][k]` with rows padded from 64 to 80 bytes and read with
//! `ldmatrix`; the other is staged as stored, `[k][row]` with rows padded by 16 bytes, and read
//! with `ldmatrix.trans` — either way each 16-byte global vector is one shared store and the
//! eight row addresses of each `ldmatrix` hit eight different 16-byte bank groups. Inputs are
//! fp32 (converted to bf16 with round-to-nearest-even as they are staged, so fp32 master weights
//! need no cast kernel) or bf16 (as written by `cast`); the accumulator is always fp32 and so is
//! the output.
//!
//! Three engines share the specs, the launch interface and the epilogues (`store_tile`): the
//! `mma.sync` kernels ([`Engine::Mma`], [`mma`]), Hopper's `wgmma` on a `cp.async` ring
//! ([`Engine::Wgmma`], [`crate::kernels::gemm::wgmma`]), which the lowering takes wherever K is a multiple
//! of 64 (about twice as fast on the H200), and the same `wgmma` fed by the tensor memory
//! accelerator from a producer warp ([`Engine::Tma`], [`crate::kernels::gemm::tma`]), taken where both
//! operands are bf16. Epilogue options beside the three above: an activation's second output,
//! a gated product's bf16 second output ([`Epilogue::StoreMul`]), and a store split into
//! attention heads ([`Heads`]), optionally bf16 with q and k turned by the rotary.
//!
//! Shape contract (checked on the host by [`GemmShape::check`]): K a multiple of 32; M and N
//! multiples of 8 (partial tiles are handled by predicated loads and stores); leading dimensions
//! multiples of 8 elements; base addresses 16-byte aligned. The batched variant walks
//! `blockIdx.z` over element strides.
//!
//! Files: the spec and shape (`spec.rs`), the launch's arguments and host launchers
//! (`launch.rs`), the epilogues every engine shares (`epilogues.rs`), each engine ([`mma`],
//! [`wgmma`], [`tma`], and [`simple`] for shapes the tiled kernels do not take), split-K's sum
//! (`splitk.rs`) and the CPU reference (`reference.rs`).

use anyhow::{bail, Result};

use alpha_ir::Unary;

use crate::kernels::fused::{Broadcast, Chain, Src, Step};
use crate::kernels::ScalarArg;
use crate::ptx::{addr, Kernel, Opnd, ParamTy, Reg, RegKind};
use crate::runtime::driver::{Arg, Function, Gpu, LaunchConfig};

mod epilogues;
mod launch;
pub mod mma;
mod reference;
pub mod simple;
mod spec;
mod splitk;
#[cfg(test)]
mod tests;
pub mod tma;
pub mod wgmma;

pub(crate) use epilogues::*;
pub use launch::*;
use mma::{build, walk, Walk};
pub use reference::*;
pub use spec::*;
pub use splitk::*;
