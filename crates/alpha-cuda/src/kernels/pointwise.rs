//! One generic strided kernel for every elementwise and data-movement op of a plan.
//!
//! Why: a training step's graph is mostly cheap ops — unary functions, broadcasting binary
//! arithmetic, casts, broadcasts, reshapes, permutes, slices, concatenations, fills — and all of
//! them are the same loop: for each element of an iteration shape, read each input at a strided
//! offset, compute one value, write it at a strided offset. So one description, [`Pointwise`],
//! covers them all: an iteration shape, one output and up to two inputs each with its own
//! element strides over that shape (stride 0 along broadcast axes; permuted strides for a
//! permute; a base offset folded into the pointer for a slice or a concatenation part), and a
//! [`Body`]. Shapes and strides are baked into the PTX as immediates (so index arithmetic
//! divides by constants) and dimensions that are contiguous for every operand are merged first,
//! so a plain contiguous op has rank 1 and no division at all. Kernels of equal text are loaded
//! once by the backend, and a transformer repeats the same shapes in every block.
//!
//! How: a grid-stride loop over `n` elements; every value goes through f32 registers (bf16 is
//! widened exactly by a shift, i32 converted), and is stored in the output's dtype (bf16 rounds
//! to nearest even with `cvt.rn.bf16.f32`, as `half::bf16::from_f32` does). A same-dtype copy
//! moves raw bits. Arithmetic uses `.rn` forms (never contracted into FMAs), and the formulas
//! follow the CPU reference's order of operations (`alpha-cpu/src/kernels/elementwise.rs`), so
//! `+ − × ÷ √` agree bit for bit; `exp`, `log`, `tanh`, `sin`, `cos` and `pow` use the hardware
//! approximations (relative error near 2⁻²²).

use alpha_ir::{Binary, DType, Unary};
use anyhow::{bail, Result};

use crate::ptx::{addr, Kernel, Opnd, ParamTy, Reg, RegKind};

/// Threads per block.
pub const THREADS: u32 = 256;
/// Most blocks a grid-stride launch uses.
pub const MAX_BLOCKS: u32 = 4096;

/// What each element computes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Body {
    /// `out = in0` (with a dtype conversion when they differ).
    Copy,
    Unary(Unary),
    Binary(Binary),
    /// `out = value`.
    Fill(f32),
}

/// One operand: its dtype and its element strides over the iteration shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Operand {
    pub dtype: DType,
    pub strides: Vec<u64>,
}

impl Operand {
    /// A contiguous operand over `shape`.
    pub fn contiguous(dtype: DType, shape: &[usize]) -> Operand {
        Operand { dtype, strides: contiguous_strides(shape) }
    }
}

/// Row-major element strides of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1] as u64;
    }
    s
}

/// Strides of `shape` read as broadcast to `out` (numpy rules: leading axes added, size-1 axes
/// repeated with stride 0).
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<u64> {
    let lead = out.len() - shape.len();
    let own = contiguous_strides(shape);
    let mut s = vec![0u64; out.len()];
    for i in 0..shape.len() {
        s[lead + i] = if shape[i] == 1 && out[lead + i] != 1 { 0 } else { own[i] };
    }
    s
}

/// A strided elementwise kernel description.
#[derive(Clone, Debug, PartialEq)]
pub struct Pointwise {
    pub shape: Vec<usize>,
    pub out: Operand,
    pub ins: Vec<Operand>,
    pub body: Body,
}

impl Pointwise {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Drops size-1 axes and merges neighbours that are contiguous for every operand.
    fn collapsed(&self) -> (Vec<u64>, Vec<Vec<u64>>) {
        let ops: Vec<&Operand> = std::iter::once(&self.out).chain(&self.ins).collect();
        let mut shape: Vec<u64> = vec![];
        let mut strides: Vec<Vec<u64>> = vec![vec![]; ops.len()];
        for (d, &n) in self.shape.iter().enumerate() {
            if n == 1 {
                continue;
            }
            let n = n as u64;
            let merge = !shape.is_empty()
                && ops.iter().enumerate().all(|(k, o)| *strides[k].last().unwrap() == o.strides[d] * n);
            if merge {
                *shape.last_mut().unwrap() *= n;
                for (k, o) in ops.iter().enumerate() {
                    *strides[k].last_mut().unwrap() = o.strides[d];
                }
            } else {
                shape.push(n);
                for (k, o) in ops.iter().enumerate() {
                    strides[k].push(o.strides[d]);
                }
            }
        }
        (shape, strides)
    }

    /// The kernel: params `out`, `in0`, `in1`… (device addresses).
    pub fn kernel(&self) -> Result<Kernel> {
        self.kernel_with(1)
    }

    /// The most consecutive elements, [`VECTOR`] or 2, that [`Pointwise::kernel_with`] may take
    /// a thread (1: one): the innermost merged axis a multiple of it and contiguous in every
    /// operand but inputs held along it (stride 0), every other stride of the contiguous ones a
    /// multiple of it, and every dtype f32 or bf16. The caller
    /// must also know every pointer 16-byte aligned. Why two: Diakosmos's rows of 1,330 and
    /// 190 are even but not multiples of four, and its copies (padding operands to the tiled
    /// products, permutes and concatenations of groups) ran a 2-byte or 4-byte access and an
    /// index computation an element, 113 ms of a 657 ms step at 64 windows.
    pub fn vector_width(&self) -> u32 {
        let (shape, strides) = self.collapsed();
        let dtypes_ok =
            std::iter::once(&self.out).chain(&self.ins).all(|o| matches!(o.dtype, DType::F32 | DType::BF16));
        let Some(&last) = shape.last() else { return 1 };
        // An input held along the innermost axis (stride 0: one value for the thread's
        // elements) fits any width; the output and every other input must be contiguous there.
        let fits = |v: u64| {
            last.is_multiple_of(v)
                && strides.iter().enumerate().all(|(k, s)| {
                    let r = s.len() - 1;
                    (k > 0 && s[r] == 0) || (s[r] == 1 && s[..r].iter().all(|x| x.is_multiple_of(v)))
                })
        };
        match () {
            _ if !dtypes_ok => 1,
            _ if fits(VECTOR as u64) => VECTOR,
            _ if fits(2) => 2,
            _ => 1,
        }
    }

    /// The kernel taking `width` consecutive elements a thread (1, 2 or [`VECTOR`], at most
    /// [`Pointwise::vector_width`]; pointers 16-byte aligned): one index computation and one
    /// vector access per operand for them all. Why: a permute's div/rem chain per element made
    /// the attention's permute-and-cast launches instruction-bound (73 µs for 150 MB at 16
    /// contexts). Each element's arithmetic is unchanged.
    pub fn kernel_with(&self, width: u32) -> Result<Kernel> {
        let arity = match self.body {
            Body::Copy | Body::Unary(_) => 1,
            Body::Binary(_) => 2,
            Body::Fill(_) => 0,
        };
        if self.ins.len() != arity {
            bail!("pointwise {:?}: {} inputs given, {arity} wanted", self.body, self.ins.len());
        }
        for o in std::iter::once(&self.out).chain(&self.ins) {
            if o.strides.len() != self.shape.len() {
                bail!("pointwise {:?}: operand of rank {} over shape {:?}", self.body, o.strides.len(), self.shape);
            }
            if matches!(o.dtype, DType::F64 | DType::U16 | DType::U8) {
                bail!("pointwise {:?}: dtype {} is not supported on the GPU", self.body, o.dtype);
            }
        }
        let n = self.numel();
        if n > u32::MAX as usize {
            bail!("pointwise {:?}: {n} elements exceed 32-bit indexing", self.body);
        }
        let (shape, strides) = self.collapsed();
        let most = self.vector_width();
        if !matches!(width, 1 | 2 | VECTOR) || width > most || !most.is_multiple_of(width) {
            bail!("pointwise {:?}: operands of shape {shape:?} cannot be read {width} at a time", self.body);
        }
        let name = match self.body {
            Body::Copy if self.ins[0].dtype == self.out.dtype => "pw_copy".to_string(),
            Body::Copy => format!("pw_cast_{}_{}", self.ins[0].dtype, self.out.dtype),
            Body::Unary(u) => format!("pw_{}", format!("{u:?}").to_lowercase()),
            Body::Binary(b) => format!("pw_{}", format!("{b:?}").to_lowercase()),
            Body::Fill(_) => "pw_fill".to_string(),
        };
        let name = if width > 1 { format!("{name}_v{width}") } else { name };
        let mut k = Kernel::new(&name).with_block(THREADS, 1, 1);
        let out = k.param_reg("out", ParamTy::U64);
        let ins: Vec<Reg> = (0..self.ins.len()).map(|j| k.param_reg(&format!("in{j}"), ParamTy::U64)).collect();
        self.body(&mut k, out, &ins, &shape, &strides, width);
        Ok(k)
    }

    /// The grid-stride loop, `width` consecutive elements a thread (one index computation and
    /// one access per operand for them all).
    fn body(&self, k: &mut Kernel, out: Reg, ins: &[Reg], shape: &[u64], strides: &[Vec<u64>], width: u32) {
        let nreg = k.imm_u32((self.numel() / width as usize) as u32);
        let (i, stride, top, end) = grid_stride_begin(k, nreg);
        // Element offsets of every operand for the thread's first element.
        let first = if width == 1 { i } else { k.bin("shl.b32", RegKind::B32, i, width.trailing_zeros()) };
        let offs = element_offsets(k, first, shape, strides);
        // An input held along the innermost axis: one load for the thread's elements.
        let held = |j: usize| strides[j + 1].last() == Some(&0);
        let raw = matches!(self.body, Body::Copy) && self.ins[0].dtype == self.out.dtype && !held(0);
        if raw {
            let bytes = self.out.dtype.size() as u32;
            let src = k.addr_of(ins[0], offs[1], bytes);
            let dst = k.addr_of(out, offs[0], bytes);
            copy_bits(k, src, dst, width * bytes);
        } else {
            let vals: Vec<Vec<Reg>> = self
                .ins
                .iter()
                .enumerate()
                .map(|(j, o)| match held(j) {
                    true => vec![load_f32(k, o.dtype, ins[j], offs[j + 1]); width as usize],
                    false => load_f32s(k, o.dtype, ins[j], offs[j + 1], width),
                })
                .collect();
            let r: Vec<Reg> = (0..width as usize)
                .map(|e| match self.body {
                    Body::Copy => vals[0][e],
                    Body::Unary(u) => emit_unary(k, u, vals[0][e]),
                    Body::Binary(b) => emit_binary(k, b, vals[0][e], vals[1][e]),
                    Body::Fill(v) => k.imm_f32(v),
                })
                .collect();
            store_f32s(k, self.out.dtype, out, offs[0], &r);
        }
        grid_stride_end(k, i, stride, nreg, &top, &end);
    }

    /// Grid and block for `n` elements.
    pub fn grid(&self) -> (u32, u32) {
        grid_blocks(self.numel())
    }

    /// Grid and block of [`Pointwise::kernel_with`] at `width` elements a thread.
    pub fn grid_with(&self, width: u32) -> (u32, u32) {
        grid_blocks(self.numel() / width as usize)
    }
}

/// Elements a thread takes in a vectorized pointwise kernel.
pub const VECTOR: u32 = 4;

/// Moves `bytes` (2, 4, 8 or 16, aligned) from `src` to `dst` unchanged.
fn copy_bits(k: &mut Kernel, src: Reg, dst: Reg, bytes: u32) {
    if bytes <= 4 {
        let (kind, ld, st) = if bytes == 2 {
            (RegKind::B16, "ld.global.b16", "st.global.b16")
        } else {
            (RegKind::B32, "ld.global.b32", "st.global.b32")
        };
        let v = k.reg(kind);
        k.op(ld, [v.into(), addr(src, 0)]);
        k.op(st, [addr(dst, 0), v.into()]);
    } else {
        let words = (bytes / 4) as usize;
        let v = k.regs(RegKind::B32, words);
        let suffix = if words == 4 { "v4" } else { "v2" };
        k.op(&format!("ld.global.{suffix}.b32"), [Opnd::V(v.clone()), addr(src, 0)]);
        k.op(&format!("st.global.{suffix}.b32"), [addr(dst, 0), Opnd::V(v)]);
    }
}

/// Loads elements `idx .. idx + width` (width 1, or 2 or 4 from an f32 or bf16 array aligned
/// to the whole access) as f32.
fn load_f32s(k: &mut Kernel, dtype: DType, base: Reg, idx: Reg, width: u32) -> Vec<Reg> {
    if width == 1 {
        return vec![load_f32(k, dtype, base, idx)];
    }
    let a = k.addr_of(base, idx, dtype.size() as u32);
    let f = k.regs(RegKind::F32, width as usize);
    if dtype == DType::BF16 {
        let w = k.regs(RegKind::B32, width as usize / 2);
        if width == 2 {
            k.op("ld.global.b32", [w[0].into(), addr(a, 0)]);
        } else {
            k.op("ld.global.v2.b32", [Opnd::V(w.clone()), addr(a, 0)]);
        }
        widen_bf16_words(k, &w, &f);
    } else {
        k.op(&format!("ld.global.v{width}.f32"), [Opnd::V(f.clone()), addr(a, 0)]);
    }
    f
}

/// The bf16 pairs in `words` (element 2j the low half of word j) as f32 into `f`, widened
/// exactly by a shift (or a mask).
pub(crate) fn widen_bf16_words(k: &mut Kernel, words: &[Reg], f: &[Reg]) {
    for (e, &x) in f.iter().enumerate() {
        let bits = if e % 2 == 0 {
            k.bin("shl.b32", RegKind::B32, words[e / 2], 16u32)
        } else {
            k.bin("and.b32", RegKind::B32, words[e / 2], 0xFFFF_0000u32)
        };
        k.op("mov.b32", [x.into(), bits.into()]);
    }
}

/// The bf16 value in the low half of `half` (loaded as u16) as f32 into `f`, widened exactly.
pub(crate) fn widen_bf16(k: &mut Kernel, half: Reg, f: Reg) {
    let bits = k.bin("shl.b32", RegKind::B32, half, 16u32);
    k.op("mov.b32", [f.into(), bits.into()]);
}

/// Stores f32 `v` (one value, two or four) as elements `idx ..` of a `dtype` array (rounded to
/// nearest even for bf16, as [`store_f32`]).
fn store_f32s(k: &mut Kernel, dtype: DType, base: Reg, idx: Reg, v: &[Reg]) {
    if let [x] = v {
        return store_f32(k, dtype, base, idx, *x);
    }
    let a = k.addr_of(base, idx, dtype.size() as u32);
    if dtype == DType::BF16 {
        // cvt.rn.bf16x2.f32 d, hi, lo: the first source goes to the upper half.
        let words: Vec<Reg> = v
            .chunks(2)
            .map(|p| {
                let w = k.reg(RegKind::B32);
                k.op("cvt.rn.bf16x2.f32", [w.into(), p[1].into(), p[0].into()]);
                w
            })
            .collect();
        match words[..] {
            [w] => k.op("st.global.b32", [addr(a, 0), w.into()]),
            _ => k.op(&format!("st.global.v{}.b32", words.len()), [addr(a, 0), Opnd::V(words)]),
        }
    } else {
        k.op(&format!("st.global.v{}.f32", v.len()), [addr(a, 0), Opnd::V(v.to_vec())]);
    }
}

/// Blocks and threads of a grid-stride launch over `n` elements (independent of the GPU, so a
/// plan lowers the same everywhere).
pub fn grid_blocks(n: usize) -> (u32, u32) {
    ((n.div_ceil(THREADS as usize)).clamp(1, MAX_BLOCKS as usize) as u32, THREADS)
}

/// Opens `for (i = global id; i < n; i += grid size)`: returns (i, stride, top label, end label).
pub fn grid_stride_begin(k: &mut Kernel, n: Reg) -> (Reg, Reg, String, String) {
    grid_stride_begin_with(k, n, None)
}

/// [`grid_stride_begin`] for kernels whose block size is fixed at `threads` (an immediate
/// instead of a read of `%ntid.x`).
pub fn grid_stride_begin_with(k: &mut Kernel, n: Reg, threads: Option<u32>) -> (Reg, Reg, String, String) {
    let tid = k.sreg("%tid.x");
    let bid = k.sreg("%ctaid.x");
    let nb = k.sreg("%nctaid.x");
    let block: Opnd = match threads {
        Some(t) => t.into(),
        None => k.sreg("%ntid.x").into(),
    };
    let i = k.tri("mad.lo.u32", RegKind::B32, bid, block.clone(), tid);
    let stride = k.bin("mul.lo.u32", RegKind::B32, nb, block);
    let top = k.label("loop");
    let end = k.label("end");
    let out = k.setp("ge.u32", i, n);
    k.bra_if(out, false, &end);
    k.place(&top);
    (i, stride, top, end)
}

/// Closes the loop opened by [`grid_stride_begin`].
pub fn grid_stride_end(k: &mut Kernel, i: Reg, stride: Reg, n: Reg, top: &str, end: &str) {
    k.op("add.u32", [i.into(), i.into(), stride.into()]);
    let more = k.setp("lt.u32", i, n);
    k.bra_if(more, false, top);
    k.place(end);
    k.ret();
}

/// Element offsets (u32) of each operand for linear index `i` over `shape` (row-major), given
/// each operand's strides.
pub fn element_offsets(k: &mut Kernel, i: Reg, shape: &[u64], strides: &[Vec<u64>]) -> Vec<Reg> {
    let offs: Vec<Reg> = strides.iter().map(|_| k.imm_u32(0)).collect();
    let rank = shape.len();
    if rank == 0 {
        return offs;
    }
    let mut rem = i;
    for d in (0..rank).rev() {
        let coord = if d == 0 {
            rem
        } else {
            let c = k.bin("rem.u32", RegKind::B32, rem, shape[d] as u32);
            rem = k.bin("div.u32", RegKind::B32, rem, shape[d] as u32);
            c
        };
        for (o, s) in offs.iter().zip(strides) {
            if s[d] != 0 {
                k.op("mad.lo.u32", [(*o).into(), coord.into(), (s[d] as u32).into(), (*o).into()]);
            }
        }
    }
    offs
}

/// Loads element `idx` of a `dtype` array at `base` as f32.
pub fn load_f32(k: &mut Kernel, dtype: DType, base: Reg, idx: Reg) -> Reg {
    let a = k.addr_of(base, idx, dtype.size() as u32);
    let f = k.reg(RegKind::F32);
    match dtype {
        DType::BF16 => {
            let r = k.reg(RegKind::B32);
            k.op("ld.global.u16", [r.into(), addr(a, 0)]);
            widen_bf16(k, r, f);
        }
        DType::I32 => {
            let r = k.reg(RegKind::B32);
            k.op("ld.global.s32", [r.into(), addr(a, 0)]);
            k.op("cvt.rn.f32.s32", [f.into(), r.into()]);
        }
        _ => k.op("ld.global.f32", [f.into(), addr(a, 0)]),
    }
    f
}

/// Stores f32 `v` as element `idx` of a `dtype` array at `base`.
pub fn store_f32(k: &mut Kernel, dtype: DType, base: Reg, idx: Reg, v: Reg) {
    let a = k.addr_of(base, idx, dtype.size() as u32);
    match dtype {
        DType::BF16 => {
            let h = k.un("cvt.rn.bf16.f32", RegKind::B16, v);
            k.op("st.global.b16", [addr(a, 0), h.into()]);
        }
        DType::I32 => {
            let r = k.un("cvt.rni.s32.f32", RegKind::B32, v);
            k.op("st.global.s32", [addr(a, 0), r.into()]);
        }
        _ => k.op("st.global.f32", [addr(a, 0), v.into()]),
    }
}

/// `e^x` as `2^(x·log2 e)`.
pub fn exp(k: &mut Kernel, x: Reg) -> Reg {
    let t = k.bin("mul.rn.f32", RegKind::F32, x, std::f32::consts::LOG2_E);
    k.un("ex2.approx.f32", RegKind::F32, t)
}

/// `ln x` as `log2(x)·ln 2`.
pub fn ln(k: &mut Kernel, x: Reg) -> Reg {
    let t = k.un("lg2.approx.f32", RegKind::F32, x);
    k.bin("mul.rn.f32", RegKind::F32, t, std::f32::consts::LN_2)
}

/// `tanh x` as `1 − 2/(e^{2x} + 1)` (saturates correctly at ±∞), the quotient correctly
/// rounded (`two_over`): the same bits as [`tanh_dividing`] for every f32 input
/// (alpha-cuda-lab's `check::tanh_exhaustive`).
pub fn tanh(k: &mut Kernel, x: Reg) -> Reg {
    tanh_with(k, x, two_over)
}

/// [`tanh`] with the quotient from `div.rn.f32`: the definition its bits are checked against.
pub fn tanh_dividing(k: &mut Kernel, x: Reg) -> Reg {
    tanh_with(k, x, |k, e1| k.bin("div.rn.f32", RegKind::F32, 2.0f32, e1))
}

/// `1 − 2/(e^{2x} + 1)` with the quotient `2/y` from `two_over_y`.
fn tanh_with(k: &mut Kernel, x: Reg, two_over_y: impl FnOnce(&mut Kernel, Reg) -> Reg) -> Reg {
    let two_x = k.bin("add.rn.f32", RegKind::F32, x, x);
    let e = exp(k, two_x);
    let e1 = k.bin("add.rn.f32", RegKind::F32, e, 1.0f32);
    let q = two_over_y(k, e1);
    k.bin("sub.rn.f32", RegKind::F32, 1.0f32, q)
}

/// `2/y` for `y ≥ 1` (or NaN), as [`tanh`] needs it: `div.rn.f32`'s own fast path — the
/// reciprocal, one Newton step, the quotient and one correction by its residual — without the
/// check that sends rare operands to a called slow path. Why: that call made ptxas save and
/// restore every live predicate around each division, so a gated GELU's backward in a product's
/// epilogue ran about twice the instructions. Where `y ≥ 2²⁶` (∞ included) the quotient is at
/// most 2⁻²⁵ and `1 − q` rounds to 1 whatever it is, so 0 is taken (the fast path would give NaN
/// at ∞); below, operands and quotient are normal, where the fast path is the correctly rounded
/// quotient. Use only as `1 − two_over(y)`.
fn two_over(k: &mut Kernel, y: Reg) -> Reg {
    let r = k.un("rcp.approx.ftz.f32", RegKind::F32, y);
    let ny = k.un("neg.f32", RegKind::F32, y);
    let err = k.tri("fma.rn.f32", RegKind::F32, ny, r, 1.0f32);
    let r1 = k.tri("fma.rn.f32", RegKind::F32, r, err, r);
    let q0 = k.bin("mul.rn.f32", RegKind::F32, r1, 2.0f32);
    let rem = k.tri("fma.rn.f32", RegKind::F32, ny, q0, 2.0f32);
    let q = k.tri("fma.rn.f32", RegKind::F32, r1, rem, q0);
    let big = k.setp("ge.f32", y, 67_108_864.0f32);
    k.tri("selp.f32", RegKind::F32, 0.0f32, q, big)
}

fn mul(k: &mut Kernel, a: impl Into<crate::ptx::Opnd>, b: impl Into<crate::ptx::Opnd>) -> Reg {
    k.bin("mul.rn.f32", RegKind::F32, a, b)
}
fn add(k: &mut Kernel, a: impl Into<crate::ptx::Opnd>, b: impl Into<crate::ptx::Opnd>) -> Reg {
    k.bin("add.rn.f32", RegKind::F32, a, b)
}

/// The tanh-GELU's inner `tanh(k·(x + c·x³))`, in the CPU reference's order.
fn gelu_t(k: &mut Kernel, x: Reg) -> Reg {
    let cx = mul(k, 0.044715f32, x);
    let cxx = mul(k, cx, x);
    let cxxx = mul(k, cxx, x);
    let s = add(k, x, cxxx);
    let kk = ((2.0 / std::f64::consts::PI).sqrt()) as f32;
    let inner = mul(k, kk, s);
    tanh(k, inner)
}

/// One unary function of f32 `x`, following `alpha_cpu::kernels::elementwise::apply_unary`.
pub fn emit_unary(k: &mut Kernel, u: Unary, x: Reg) -> Reg {
    emit_unary_sharing(k, u, x, &mut SharedTerms::default())
}

/// Terms two unary functions of one input compute alike, computed once per input: the
/// tanh-GELU's inner `tanh` (its exponential and its correctly rounded division), which a gated
/// unit's backward needs for both `gelu(x)` and `gelu'(x)`. Reusing the register changes no bit:
/// the instructions it replaces are the same ones on the same input.
#[derive(Default)]
pub struct SharedTerms {
    gelu_t: Vec<(Reg, Reg)>,
}

impl SharedTerms {
    fn gelu_t(&mut self, k: &mut Kernel, x: Reg) -> Reg {
        if let Some(&(_, t)) = self.gelu_t.iter().find(|(input, _)| *input == x) {
            return t;
        }
        let t = gelu_t(k, x);
        self.gelu_t.push((x, t));
        t
    }
}

/// [`emit_unary`], reusing the terms in `shared` computed for the same input.
pub fn emit_unary_sharing(k: &mut Kernel, u: Unary, x: Reg, shared: &mut SharedTerms) -> Reg {
    match u {
        Unary::Neg => k.un("neg.f32", RegKind::F32, x),
        Unary::Exp => exp(k, x),
        Unary::Log => ln(k, x),
        Unary::Tanh => tanh(k, x),
        Unary::Sigmoid => {
            let nx = k.un("neg.f32", RegKind::F32, x);
            let e = exp(k, nx);
            let d = add(k, 1.0f32, e);
            k.bin("div.rn.f32", RegKind::F32, 1.0f32, d)
        }
        Unary::Gelu => {
            let t = shared.gelu_t(k, x);
            let hx = mul(k, 0.5f32, x);
            let one_t = add(k, 1.0f32, t);
            mul(k, hx, one_t)
        }
        Unary::GeluGrad => {
            // half(1+t) + half·x·(1−t²)·k·(1 + 3c·x²)
            let t = shared.gelu_t(k, x);
            let one_t = add(k, 1.0f32, t);
            let a = mul(k, 0.5f32, one_t);
            let hx = mul(k, 0.5f32, x);
            let tt = mul(k, t, t);
            let omt = k.bin("sub.rn.f32", RegKind::F32, 1.0f32, tt);
            let b1 = mul(k, hx, omt);
            let kk = ((2.0 / std::f64::consts::PI).sqrt()) as f32;
            let b2 = mul(k, b1, kk);
            let c3 = 3.0f32 * 0.044715f32;
            let c3x = mul(k, c3, x);
            let c3xx = mul(k, c3x, x);
            let f = add(k, 1.0f32, c3xx);
            let b = mul(k, b2, f);
            add(k, a, b)
        }
        Unary::Relu => k.bin("max.f32", RegKind::F32, x, 0.0f32),
        Unary::Step => {
            let p = k.setp("gt.f32", x, 0.0f32);
            k.tri("selp.f32", RegKind::F32, 1.0f32, 0.0f32, p)
        }
        Unary::Sin => k.un("sin.approx.f32", RegKind::F32, x),
        Unary::Cos => k.un("cos.approx.f32", RegKind::F32, x),
        Unary::Rsqrt => {
            let s = k.un("sqrt.rn.f32", RegKind::F32, x);
            k.bin("div.rn.f32", RegKind::F32, 1.0f32, s)
        }
        Unary::Sqrt => k.un("sqrt.rn.f32", RegKind::F32, x),
        Unary::Square => mul(k, x, x),
        Unary::Recip => k.bin("div.rn.f32", RegKind::F32, 1.0f32, x),
        Unary::Abs => k.un("abs.f32", RegKind::F32, x),
        Unary::Sign => {
            let pos = k.setp("gt.f32", x, 0.0f32);
            let neg = k.setp("lt.f32", x, 0.0f32);
            let s = k.tri("selp.f32", RegKind::F32, -1.0f32, 0.0f32, neg);
            k.tri("selp.f32", RegKind::F32, 1.0f32, s, pos)
        }
    }
}

/// One binary function of f32 `x`, `y`, following `apply_binary`.
pub fn emit_binary(k: &mut Kernel, b: Binary, x: Reg, y: Reg) -> Reg {
    match b {
        Binary::Add => add(k, x, y),
        Binary::Sub => k.bin("sub.rn.f32", RegKind::F32, x, y),
        Binary::Mul => mul(k, x, y),
        Binary::Div => k.bin("div.rn.f32", RegKind::F32, x, y),
        Binary::Max => k.bin("max.f32", RegKind::F32, x, y),
        Binary::Min => k.bin("min.f32", RegKind::F32, x, y),
        Binary::Ge => {
            let p = k.setp("ge.f32", x, y);
            k.tri("selp.f32", RegKind::F32, 1.0f32, 0.0f32, p)
        }
        Binary::Pow => {
            let l = k.un("lg2.approx.f32", RegKind::F32, x);
            let t = mul(k, y, l);
            k.un("ex2.approx.f32", RegKind::F32, t)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_ops_collapse_to_rank_one_without_division() {
        let shape = vec![4, 8, 16];
        let p = Pointwise {
            shape: shape.clone(),
            out: Operand::contiguous(DType::F32, &shape),
            ins: vec![Operand::contiguous(DType::F32, &shape), Operand::contiguous(DType::F32, &shape)],
            body: Body::Binary(Binary::Add),
        };
        let (s, st) = p.collapsed();
        assert_eq!(s, vec![512]);
        assert_eq!(st, vec![vec![1], vec![1], vec![1]]);
        let text = p.kernel().unwrap().render();
        assert!(!text.contains("div.u32") && text.contains("add.rn.f32"));
    }

    #[test]
    fn broadcast_and_permute_keep_their_strides() {
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
        assert_eq!(broadcast_strides(&[4], &[2, 3, 4]), vec![0, 0, 1]);
        // A bias row broadcast over rows: [rows, C] + [C] keeps two axes.
        let out = Operand::contiguous(DType::F32, &[6, 5]);
        let p = Pointwise {
            shape: vec![6, 5],
            out,
            ins: vec![
                Operand::contiguous(DType::F32, &[6, 5]),
                Operand { dtype: DType::F32, strides: broadcast_strides(&[5], &[6, 5]) },
            ],
            body: Body::Binary(Binary::Mul),
        };
        let (s, st) = p.collapsed();
        assert_eq!(s, vec![6, 5]);
        assert_eq!(st[2], vec![0, 1]);
        let text = p.kernel().unwrap().render();
        assert!(text.contains("rem.u32") && text.contains("div.u32"));
    }

    #[test]
    fn casts_round_bf16_and_copies_move_bits() {
        let s = [10usize];
        let cast = Pointwise {
            shape: s.to_vec(),
            out: Operand::contiguous(DType::BF16, &s),
            ins: vec![Operand::contiguous(DType::F32, &s)],
            body: Body::Copy,
        };
        let t = cast.kernel().unwrap().render();
        assert!(t.contains("cvt.rn.bf16.f32") && t.contains("st.global.b16"));
        let copy = Pointwise { body: Body::Copy, ins: vec![Operand::contiguous(DType::I32, &s)], ..cast.clone() };
        let copy = Pointwise { out: Operand::contiguous(DType::I32, &s), ..copy };
        let t = copy.kernel().unwrap().render();
        assert!(t.contains("ld.global.b32") && !t.contains("cvt"));
        let bad = Pointwise { ins: vec![], ..cast };
        assert!(bad.kernel().is_err());
    }
}
