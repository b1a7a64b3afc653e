//! The attention spec ([`Dims`]: batch, heads, groups, context, head size, scale, soft-cap) and
//! the kernels' interface shared by every family (fp32, `mma.sync`, `wgmma`): the entry names'
//! scheme and the parameter lists, declared once so the lowering launches any family with the
//! same arguments.

use super::*;

/// Query rows per block (forward, dQ) and key rows per block (dK/dV).
pub const ROWS: u32 = 64;
/// Key rows per shared-memory tile (forward, dQ).
pub const KTILE: u32 = 64;
/// Query rows per shared-memory tile (dK/dV).
pub const QTILE: u32 = 16;
/// Largest head dimension.
pub const MAX_D: usize = 64;

/// One attention problem.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dims {
    pub b: usize,
    pub h: usize,
    pub g: usize,
    pub t: usize,
    pub d: usize,
    pub scale: f32,
    pub softcap: Option<f32>,
}

impl Dims {
    pub fn check(&self) -> Result<()> {
        if self.d == 0 || self.d > MAX_D || !self.d.is_multiple_of(4) {
            bail!("attention: head dimension {} must be a multiple of 4 and at most {MAX_D}", self.d);
        }
        if self.g == 0 || !self.h.is_multiple_of(self.g) {
            bail!("attention: {} query heads are not a multiple of {} key/value heads", self.h, self.g);
        }
        if self.t == 0 || self.t >= (1 << 24) {
            bail!("attention: sequence length {} out of range", self.t);
        }
        Ok(())
    }
    /// Grid of the forward and dQ kernels.
    pub fn grid_q(&self) -> (u32, u32, u32) {
        ((self.t as u32).div_ceil(ROWS), (self.b * self.h) as u32, 1)
    }
    /// Grid of the dK/dV kernel.
    pub fn grid_kv(&self) -> (u32, u32, u32) {
        ((self.t as u32).div_ceil(ROWS), (self.b * self.g) as u32, 1)
    }
    /// f32 scratch the backward needs (delta per query row).
    pub fn scratch_floats(&self) -> usize {
        self.b * self.h * self.t
    }
}

/// Whether the backward kernels can store dq and dk turned back by the rotary (the inverse
/// Rotary fused into their stores, see [`backward_dq_kernel`]): the pair halves must be whole
/// 16-byte vectors of the rotary table, so `d` a multiple of 8.
pub fn rotary_fits(d: usize) -> bool {
    d.is_multiple_of(8)
}

/// Common prologue: (tid, row index i within the sequence, bh or bg, valid).
/// The key/value head read by the query-head block `bh` (b·H + h): b·G + h / (H/G).
pub(crate) fn kv_head(k: &mut Kernel, dims: &Dims, bh: Reg) -> Reg {
    let per = (dims.h / dims.g) as u32;
    let b = k.bin("div.u32", RegKind::B32, bh, dims.h as u32);
    let h = k.bin("rem.u32", RegKind::B32, bh, dims.h as u32);
    let gh = k.bin("div.u32", RegKind::B32, h, per);
    k.tri("mad.lo.u32", RegKind::B32, b, dims.g as u32, gh)
}

/// Entry name of pass `pass` (`fwd`, `bwd_dq`, `bwd_dkv`) of family `family` (`attention`,
/// `attention_mma`): `_rotload` when q or k is turned on load, `_rotary` when the gradient is
/// stored turned back.
pub(crate) fn kernel_name(family: &str, pass: &str, load: [bool; 2], inverse_rotary: bool) -> String {
    format!("{family}_{pass}{}{}", rotload(load), if inverse_rotary { "_rotary" } else { "" })
}

/// Declares pointer parameters `names`, then `tab` (the inverse rotary's table) when given,
/// then `q_tab` and `k_tab` for the q and k turned on load.
pub(crate) fn pointer_params<const N: usize>(
    k: &mut Kernel,
    names: [&str; N],
    tab: Option<&str>,
    load: [bool; 2],
) -> ([Reg; N], Option<Reg>, [Option<Reg>; 2]) {
    let regs = names.map(|n| k.param_reg(n, ParamTy::U64));
    let tab = tab.map(|n| k.param_reg(n, ParamTy::U64));
    let q_tab = load[0].then(|| k.param_reg("q_tab", ParamTy::U64));
    let k_tab = load[1].then(|| k.param_reg("k_tab", ParamTy::U64));
    (regs, tab, [q_tab, k_tab])
}

/// Forward: (o, lse, q, k, v), then `q_tab`, `k_tab` for those turned on load.
pub(crate) fn forward_params(k: &mut Kernel, load: [bool; 2]) -> ([Reg; 5], [Option<Reg>; 2]) {
    let (regs, _, tabs) = pointer_params(k, ["o", "lse", "q", "k", "v"], None, load);
    (regs, tabs)
}

/// dQ: (dq, delta, q, k, v, o, lse, do), then `dq_tab` with the inverse rotary, then the
/// load tables.
pub(crate) fn dq_params(
    k: &mut Kernel,
    inverse_rotary: bool,
    load: [bool; 2],
) -> ([Reg; 8], Option<Reg>, [Option<Reg>; 2]) {
    pointer_params(k, ["dq", "delta", "q", "k", "v", "o", "lse", "do"], inverse_rotary.then_some("dq_tab"), load)
}

/// dK/dV: (dk, dv, q, k, v, lse, delta, do), then `dk_tab` with the inverse rotary, then the
/// load tables.
pub(crate) fn dkv_params(
    k: &mut Kernel,
    inverse_rotary: bool,
    load: [bool; 2],
) -> ([Reg; 8], Option<Reg>, [Option<Reg>; 2]) {
    pointer_params(k, ["dk", "dv", "q", "k", "v", "lse", "delta", "do"], inverse_rotary.then_some("dk_tab"), load)
}
