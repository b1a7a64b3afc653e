//! Kernel families: each module builds one family's PTX from its spec, and carries a host
//! launcher taking raw device addresses and a CPU reference for checking.
//!
//! Why this layer knows nothing of plans: a kernel's PTX is a function of its spec alone, so
//! the lowering, the snapshot test and the lab's checks all build the same kernel from the same
//! value. The generic families follow the CPU reference's order of operations so the two
//! compare tightly.
//!
//! Matrix products: [`gemm`] on `mma.sync`, [`gemm::wgmma`] (Hopper's `wgmma` fed by a
//! `cp.async` ring, wherever K allows) and [`gemm::tma`] (`wgmma` fed by the tensor memory
//! accelerator from a producer warp, where both operands are bf16: what the lowering chooses
//! for nearly every product), [`gemm::simple`] for shapes the tiled kernels do not take.
//! Attention: [`attention`] in fp32, [`attention::mma`] on `mma.sync` and [`attention::wgmma`]
//! on `wgmma` for bf16 q, k and v (the same bits). The rest: [`pointwise`], [`fused`] (runs of
//! elementwise ops as one kernel), [`reduce`], [`layernorm`] and its sibling [`rmsnorm`],
//! [`rotary`], [`recurrence`] and the recurrences with large states, [`delta_rule`] and
//! [`harmonic_scan`] (their reverse passes built on [`replay`]), [`embedding`],
//! [`cross_entropy`], [`adamw`] and [`multi`] (multi-tensor optimizer kernels).

use crate::runtime::driver::Arg;

/// A launch argument as a family's argument builder makes it: pointers come in as the caller
/// has them (device addresses on a GPU, arena offsets in the lowering), and scalars are made
/// here. Why: each family builds its argument list in one function, in its kernel's parameter
/// order, which both the lowering and the host launchers (and so the lab's checks) call.
pub trait ScalarArg: Copy {
    fn u32(x: u32) -> Self;
    fn u64(x: u64) -> Self;
}

impl ScalarArg for Arg {
    fn u32(x: u32) -> Self {
        Arg::U32(x)
    }

    fn u64(x: u64) -> Self {
        Arg::U64(x)
    }
}

/// The parameter types a list of device arguments fills: what a test compares with a
/// kernel's parameters to check an argument builder.
#[cfg(test)]
pub(crate) fn arg_types(args: &[Arg]) -> Vec<crate::ptx::ParamTy> {
    use crate::ptx::ParamTy;
    args.iter()
        .map(|a| match a {
            Arg::U64(_) => ParamTy::U64,
            Arg::U32(_) => ParamTy::U32,
            Arg::I32(_) => ParamTy::S32,
            Arg::F32(_) => ParamTy::F32,
        })
        .collect()
}

pub mod adamw;
pub mod attention;
pub mod cross_entropy;
pub mod delta_rule;
pub mod embedding;
pub mod fused;
pub mod gemm;
pub mod harmonic_scan;
pub mod layernorm;
pub mod multi;
pub mod pointwise;
pub mod recurrence;
pub mod reduce;
pub mod replay;
pub mod rmsnorm;
pub mod rotary;
