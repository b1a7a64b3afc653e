//! Fused full-vocabulary cross-entropy, forward and backward.
//!
//! Why: the loss is exact softmax cross-entropy over every vocabulary entry (Bob's 256,
//! Coppelius's 12,288; SYSTEMS.md §1–2), and the logits row is the largest activation of a step.
//! Fusing max, sum of exponentials, log and the target pick into one kernel reads each row twice
//! from cache instead of materialising probabilities; the backward recomputes `softmax` from the
//! saved log-sum-exp and writes `dlogits = (softmax − onehot)·dloss_row` in one pass.
//!
//! How: one block of 256 threads per row. Each thread strides the row (fixed order), then
//! [`Kernel::block_reduce_f32`] combines warp butterflies and warp partials in a fixed order, so
//! the result does not depend on scheduling. Exponentials use `ex2.approx` on `(x − max)·log2 e`.
//! A negative target marks a row to ignore: its loss and gradient are 0.
//!
//! Rows are `w` logits apart and the softmax takes the first `v` of them (`v = w` but for a
//! padded vocabulary, GPT-2's 50,257 in rows of 50,304); the backward writes whole rows, zero
//! past `v`. Why: the padded columns then need neither a copy of the logits without them nor a
//! zero-filled copy of their gradient (5.3 ms of GPT-2's step at sixteen contexts).
//!
//! The logits may be stored bf16 (a model that rounds them before the loss, as GPT-2's does):
//! each kernel then reads two bytes a logit and widens it exactly, and every sum stays f32.

use alpha_ir::DType;
use anyhow::Result;

use crate::kernels::pointwise::{load_f32, widen_bf16, widen_bf16_words};
use crate::kernels::ScalarArg;
use crate::ptx::{addr, Kernel, Opnd, ParamTy, Reg, RegKind};
use crate::runtime::driver::{Arg, Function, Gpu, LaunchConfig};

pub const THREADS: u32 = 256;

/// Forward: params (loss, lse, logits, targets, v, w). Grid: one block per row.
pub fn forward_kernel() -> Kernel {
    forward_kernel_for(None)
}

/// Logits a thread holds at most in [`forward_kernel_for`]'s one-read form.
const HELD: u32 = 64;

/// [`forward_kernel`], for a vocabulary of `vocab` where it is given, a multiple of
/// [`THREADS`] and at most 64 logits a thread: then each thread loads its logits once,
/// all at the start, and both passes run over registers — the same values in the same order,
/// so the same bits. Why: the strided loop waited out one load latency a logit, twice (16
/// contexts' 805 MB of logits took 338 µs).
pub fn forward_kernel_for(vocab: Option<u32>) -> Kernel {
    forward_kernel_of(vocab, DType::F32)
}

/// [`forward_kernel_for`] over logits stored as `input` (f32 or bf16).
pub fn forward_kernel_of(vocab: Option<u32>, input: DType) -> Kernel {
    let held = vocab.filter(|&n| n.is_multiple_of(THREADS) && n / THREADS <= HELD);
    let name = match held {
        Some(n) => format!("cross_entropy_fwd_v{n}"),
        None => "cross_entropy_fwd".to_string(),
    };
    let mut k = Kernel::new(&format!("{name}{}", input_suffix(input))).with_block(THREADS, 1, 1);
    let loss = k.param_reg("loss", ParamTy::U64);
    let lse_out = k.param_reg("lse", ParamTy::U64);
    let logits = k.param_reg("logits", ParamTy::U64);
    let targets = k.param_reg("targets", ParamTy::U64);
    let v = k.param_reg("v", ParamTy::U32);
    let w = k.param_reg("w", ParamTy::U32);
    let scratch = k.shared("red", 128, 16);
    let tid = k.sreg("%tid.x");
    let row = k.sreg("%ctaid.x");
    let re = k.bin("mul.lo.u32", RegKind::B32, row, w);
    let base = k.addr_of(logits, re, input.size() as u32);

    // This thread's logits j = tid, tid + THREADS, …, loaded once (one-read form).
    let xs: Option<Vec<Reg>> = held.map(|n| {
        let es = input.size() as u32;
        let mine = k.addr_of(base, tid, es);
        (0..n / THREADS)
            .map(|i| {
                let x = k.reg(RegKind::F32);
                let at = addr(mine, (es * i * THREADS) as i64);
                if input == DType::BF16 {
                    let h = k.reg(RegKind::B32);
                    k.op("ld.global.u16", [h.into(), at]);
                    widen_bf16(&mut k, h, x);
                } else {
                    k.op("ld.global.f32", [x.into(), at]);
                }
                x
            })
            .collect()
    });
    // max
    let mx = k.imm_f32(f32::NEG_INFINITY);
    each_logit(&mut k, xs.as_deref(), (base, tid, v), input, |k, x| {
        k.op("max.f32", [mx.into(), mx.into(), x.into()]);
    });
    let mx = k.block_reduce_f32(mx, "max", &scratch, tid, THREADS);
    // sum of exp(x - max)
    let s = k.imm_f32(0.0);
    each_logit(&mut k, xs.as_deref(), (base, tid, v), input, |k, x| {
        let d = k.bin("sub.rn.f32", RegKind::F32, x, mx);
        let e = emit_exp(k, d);
        k.op("add.rn.f32", [s.into(), s.into(), e.into()]);
    });
    let s = k.block_reduce_f32(s, "add", &scratch, tid, THREADS);
    lse_and_loss(&mut k, (mx, s), tid, (base, input), (targets, row, v), (loss, lse_out));
    k.ret();
    k
}

/// Threads of the joint kernel: one block a row.
pub const JOINT_THREADS: u32 = 1024;

/// Bytes of the joint kernel's static scratch (its block reduction's 32 warp partials).
const JOINT_SCRATCH: u32 = 128;

/// The widest row the joint kernel holds in shared memory.
pub const JOINT_MAX_WIDTH: u32 = (crate::ptx::MAX_SHARED_PER_BLOCK - JOINT_SCRATCH) / 16 * 4;

/// The forward and the bf16 backward in one launch, for rows of `w` logits (`w` a multiple of 4,
/// at most [`JOINT_MAX_WIDTH`]) whose backward scales every row by the one value `dloss_scale`
/// (the mean's `1/rows`, known when the program is lowered): params (loss, lse, dlogits (bf16),
/// logits, targets, v, w, dloss_scale as its f32 bits). Grid: one block a row.
///
/// Why: the forward and the backward each read the whole logits tensor, and for GPT-2's
/// 50,304-wide rows at sixteen contexts that is 3.3 GB a read (1.46 ms and 1.17 ms of the
/// step). Here each row is copied once into shared memory (`cp.async`, all of a thread's
/// copies in flight at once) and max, sum of exponentials, loss and the gradient are all read
/// from there: one read of the logits and one bf16 write of the gradient. The block's 201 KB
/// of shared memory also keeps one row an SM, so the copies are what fills the bandwidth.
///
/// Each thread takes quads `tid, tid + 1024, …` and their four logits in order; max and sum
/// then combine in [`Kernel::block_reduce_f32`]'s fixed order, so the bits repeat (not the
/// separate kernels' bits: their threads take single logits in another order). The gradient's
/// arithmetic per logit is [`backward_kernel_bf16`]'s.
pub fn joint_kernel_bf16(w: u32) -> Kernel {
    joint_kernel_of(w, DType::F32)
}

/// [`joint_kernel_bf16`] over logits stored as `input`: bf16 ones are held in shared memory
/// as they are (half the bytes: rows of a multiple of 8, 16 bytes a copy) and widened as read.
pub fn joint_kernel_of(w: u32, input: DType) -> Kernel {
    let es = input.size() as u32;
    assert!(
        w.is_multiple_of(16 / es) && w <= JOINT_MAX_WIDTH * 4 / es,
        "joint cross-entropy: rows of {w} logits of {input}"
    );
    let name = format!("cross_entropy_joint_bf16{}_w{w}", input_suffix(input));
    let mut k = Kernel::new(&name).with_block(JOINT_THREADS, 1, 1);
    let loss = k.param_reg("loss", ParamTy::U64);
    let lse_out = k.param_reg("lse", ParamTy::U64);
    let dlogits = k.param_reg("dlogits", ParamTy::U64);
    let logits = k.param_reg("logits", ParamTy::U64);
    let targets = k.param_reg("targets", ParamTy::U64);
    let v = k.param_reg("v", ParamTy::U32);
    let wp = k.param_reg("w", ParamTy::U32);
    let scale_bits = k.param_reg("dloss_scale", ParamTy::U32);
    let scratch = k.shared("red", JOINT_SCRATCH, 16);
    let rowbuf = k.dynamic_shared_array("row", es * w, 16);
    let tid = k.sreg("%tid.x");
    let row = k.sreg("%ctaid.x");
    let re = k.bin("mul.lo.u32", RegKind::B32, row, wp);
    let base = k.addr_of(logits, re, es);
    let obase = k.addr_of(dlogits, re, 2);
    let quads = k.bin("shr.u32", RegKind::B32, wp, 2u32);
    let sbase = k.un("mov.u32", RegKind::B32, Opnd::S(rowbuf));

    k.comment("the row into shared memory, every copy in flight at once");
    // 16-byte copies: a quad of f32 logits, or two of bf16 ones.
    let chunks = if input == DType::BF16 { k.bin("shr.u32", RegKind::B32, quads, 1u32) } else { quads };
    k.strided_loop(tid, chunks, JOINT_THREADS, ("copy", "copy_end"), |k, c| {
        let src = k.addr_of(base, c, 16);
        let dst = k.tri("mad.lo.u32", RegKind::B32, c, 16u32, sbase);
        k.op("cp.async.cg.shared.global", [addr(dst, 0), addr(src, 0), 16u32.into()]);
    });
    k.op("cp.async.wait_all", []);
    k.barrier();
    // Each of this thread's quads from shared memory, with the class mask of its four logits
    // (`j < v`).
    let each_quad = |k: &mut Kernel, labels: (&str, &str), body: &mut dyn FnMut(&mut Kernel, Reg, &[Reg])| {
        k.strided_loop(tid, quads, JOINT_THREADS, labels, |k, q| {
            let at = k.tri("mad.lo.u32", RegKind::B32, q, 4 * es, sbase);
            let x = load_quad(k, "shared", input, at);
            body(k, q, &x);
        });
    };
    // Logit `e` of quad `q`: its column, and whether it is a class (`j < v`).
    let column = |k: &mut Kernel, q: Reg, e: u32| {
        let j0 = k.bin("shl.b32", RegKind::B32, q, 2u32);
        k.bin("add.u32", RegKind::B32, j0, e)
    };
    let class_of = |k: &mut Kernel, q: Reg, e: u32| {
        let j = column(k, q, e);
        (j, k.setp("lt.u32", j, v))
    };
    let mx = k.imm_f32(f32::NEG_INFINITY);
    each_quad(&mut k, ("max", "max_end"), &mut |k, q, x| {
        for (e, &xe) in x.iter().enumerate() {
            let (_, class) = class_of(k, q, e as u32);
            let m = k.bin("max.f32", RegKind::F32, mx, xe);
            k.op("selp.f32", [mx.into(), m.into(), mx.into(), class.into()]);
        }
    });
    let mx = k.block_reduce_f32(mx, "max", &scratch, tid, JOINT_THREADS);
    let s = k.imm_f32(0.0);
    each_quad(&mut k, ("sum", "sum_end"), &mut |k, q, x| {
        for (e, &xe) in x.iter().enumerate() {
            let (_, class) = class_of(k, q, e as u32);
            let d = k.bin("sub.rn.f32", RegKind::F32, xe, mx);
            let p = emit_exp(k, d);
            let t = k.bin("add.rn.f32", RegKind::F32, s, p);
            k.op("selp.f32", [s.into(), t.into(), s.into(), class.into()]);
        }
    });
    let s = k.block_reduce_f32(s, "add", &scratch, tid, JOINT_THREADS);
    let lse = lse_and_loss(&mut k, (mx, s), tid, (base, input), (targets, row, v), (loss, lse_out));

    k.comment("the gradient, (softmax - onehot) * scale, stored bf16; zero past the classes");
    let t = k.reg(RegKind::B32);
    let ta = k.addr_of(targets, row, 4);
    k.op("ld.global.u32", [t.into(), addr(ta, 0)]);
    let ok = k.setp("lt.u32", t, v);
    let dl = k.un("mov.b32", RegKind::F32, scale_bits);
    let scale = k.tri("selp.f32", RegKind::F32, dl, 0.0f32, ok);
    each_quad(&mut k, ("grad", "grad_end"), &mut |k, q, x| {
        let g: Vec<Reg> = x
            .iter()
            .enumerate()
            .map(|(e, &xe)| logit_gradient(k, xe, &|k| column(k, q, e as u32), (lse, t, scale, v)))
            .collect();
        store_bf16_quad(k, obase, q, &g);
    });
    k.ret();
    k
}

/// The joint kernel's arguments: loss, lse, dlogits, logits, targets, then the classes v, the
/// row width w and the backward's scale (its f32 bits).
pub fn joint_arguments<T: ScalarArg>(tensors: [T; 5], (v, w): (u32, u32), dloss_scale: f32) -> Vec<T> {
    let mut args = Vec::from(tensors);
    args.extend([T::u32(v), T::u32(w), T::u32(dloss_scale.to_bits())]);
    args
}

/// The joint forward and backward over `rows` rows (see [`joint_kernel_bf16`]).
#[allow(clippy::too_many_arguments)]
pub fn joint(
    gpu: &Gpu,
    f: &Function,
    [loss, lse, dlogits, logits, targets]: [u64; 5],
    rows: u32,
    vw: (u32, u32),
    dloss_scale: f32,
) -> Result<()> {
    gpu.launch(
        f,
        LaunchConfig::linear(rows, JOINT_THREADS),
        &joint_arguments([loss, lse, dlogits, logits, targets].map(Arg::U64), vw, dloss_scale),
    )
}

/// The end of a forward row: `lse = max + ln s` (`s` the sum of `exp(x − max)`), then, in the
/// thread whose `writer` id is 0, the loss `lse − x[target]` (0 for a target out of range,
/// the logit read from the row at `row_base`) and lse, stored at `row`.
fn lse_and_loss(
    k: &mut Kernel,
    (mx, s): (Reg, Reg),
    writer: Reg,
    (row_base, input): (Reg, DType),
    (targets, row, v): (Reg, Reg, Reg),
    (loss, lse_out): (Reg, Reg),
) -> Reg {
    let l2 = k.un("lg2.approx.ftz.f32", RegKind::F32, s);
    let ln = k.bin("mul.rn.f32", RegKind::F32, l2, std::f32::consts::LN_2);
    let lse = k.bin("add.rn.f32", RegKind::F32, mx, ln);
    let end = k.label("end");
    let not0 = k.setp("ne.u32", writer, 0u32);
    k.bra_if(not0, false, &end);
    let ta = k.addr_of(targets, row, 4);
    let t = k.reg(RegKind::B32);
    k.op("ld.global.u32", [t.into(), addr(ta, 0)]);
    let ok = k.setp("lt.u32", t, v);
    let xt = k.imm_f32(0.0);
    let xa = k.addr_of(row_base, t, input.size() as u32);
    if input == DType::BF16 {
        let h = k.imm_u32(0);
        k.op_if(ok, false, "ld.global.u16", [h.into(), addr(xa, 0)]);
        widen_bf16(k, h, xt);
    } else {
        k.op_if(ok, false, "ld.global.f32", [xt.into(), addr(xa, 0)]);
    }
    let l = k.bin("sub.rn.f32", RegKind::F32, lse, xt);
    let zero = k.imm_f32(0.0);
    let l = k.tri("selp.f32", RegKind::F32, l, zero, ok);
    let la = k.addr_of(loss, row, 4);
    k.op("st.global.f32", [addr(la, 0), l.into()]);
    let sa = k.addr_of(lse_out, row, 4);
    k.op("st.global.f32", [addr(sa, 0), lse.into()]);
    k.place(&end);
    lse
}

/// Backward: params (dlogits, logits, lse, targets, dloss, v, w). Grid: one block per row.
pub fn backward_kernel() -> Kernel {
    backward_kernel_of(false, DType::F32)
}

/// [`backward_kernel`] storing dlogits rounded to bf16 (the cast that alone reads them, done
/// here: half the bytes written, and no cast launch), four logits a thread a round (16-byte
/// loads, 8-byte stores): params as [`backward_kernel`]'s; `w` a multiple of 4. The same f32
/// arithmetic per logit, then round-to-nearest-even, so the same bits as the cast.
pub fn backward_kernel_bf16() -> Kernel {
    backward_kernel_of(true, DType::F32)
}

/// [`backward_kernel`] (or, `bf16`, [`backward_kernel_bf16`]) over logits stored as `input`.
pub fn backward_kernel_of(bf16: bool, input: DType) -> Kernel {
    let name = if bf16 { "cross_entropy_bwd_bf16" } else { "cross_entropy_bwd" };
    let mut k = Kernel::new(&format!("{name}{}", input_suffix(input))).with_block(THREADS, 1, 1);
    let dlogits = k.param_reg("dlogits", ParamTy::U64);
    let logits = k.param_reg("logits", ParamTy::U64);
    let lse_in = k.param_reg("lse", ParamTy::U64);
    let targets = k.param_reg("targets", ParamTy::U64);
    let dloss = k.param_reg("dloss", ParamTy::U64);
    let v = k.param_reg("v", ParamTy::U32);
    let w = k.param_reg("w", ParamTy::U32);
    let tid = k.sreg("%tid.x");
    let row = k.sreg("%ctaid.x");
    let re = k.bin("mul.lo.u32", RegKind::B32, row, w);
    let base = k.addr_of(logits, re, input.size() as u32);
    let obase = k.addr_of(dlogits, re, if bf16 { 2 } else { 4 });
    let lse = k.reg(RegKind::F32);
    let a = k.addr_of(lse_in, row, 4);
    k.op("ld.global.f32", [lse.into(), addr(a, 0)]);
    let dl = k.reg(RegKind::F32);
    let a = k.addr_of(dloss, row, 4);
    k.op("ld.global.f32", [dl.into(), addr(a, 0)]);
    let t = k.reg(RegKind::B32);
    let a = k.addr_of(targets, row, 4);
    k.op("ld.global.u32", [t.into(), addr(a, 0)]);
    let ok = k.setp("lt.u32", t, v);
    let zero = k.imm_f32(0.0);
    let scale = k.tri("selp.f32", RegKind::F32, dl, zero, ok);
    // (softmax − onehot)·scale of the logit whose value is `x` and index `index()`; 0 for a
    // column past the classes.
    let grad =
        |k: &mut Kernel, x: Reg, index: &dyn Fn(&mut Kernel) -> Reg| logit_gradient(k, x, index, (lse, t, scale, v));
    if !bf16 {
        strided(&mut k, tid, w, |k, j| {
            let x = load_f32(k, input, base, j);
            let g = grad(k, x, &|_| j);
            let o = k.addr_of(obase, j, 4);
            k.op("st.global.f32", [addr(o, 0), g.into()]);
        });
        k.ret();
        return k;
    }
    let quads = k.bin("shr.u32", RegKind::B32, w, 2u32);
    strided(&mut k, tid, quads, |k, q| {
        let a = k.addr_of(base, q, 4 * input.size() as u32);
        let x = load_quad(k, "global", input, a);
        let j0 = k.bin("shl.b32", RegKind::B32, q, 2u32);
        let g: Vec<Reg> = x
            .iter()
            .enumerate()
            .map(|(e, &xe)| grad(k, xe, &|k| k.bin("add.u32", RegKind::B32, j0, e as u32)))
            .collect();
        store_bf16_quad(k, obase, q, &g);
    });
    k.ret();
    k
}

/// `(softmax − onehot)·scale` of the logit `x` whose column `index()` gives (made after its
/// exponential, as the kernels have always ordered it), 0 for a column past the classes `v`:
/// `exp(x − lse)`, minus 1 at the target `t`, times the row's `scale`.
fn logit_gradient(
    k: &mut Kernel,
    x: Reg,
    index: &dyn Fn(&mut Kernel) -> Reg,
    (lse, t, scale, v): (Reg, Reg, Reg, Reg),
) -> Reg {
    let d = k.bin("sub.rn.f32", RegKind::F32, x, lse);
    let p = emit_exp(k, d);
    let j = index(k);
    let is_t = k.setp("eq.u32", j, t);
    let one = k.imm_f32(1.0);
    let oh = k.tri("selp.f32", RegKind::F32, one, 0.0f32, is_t);
    let g = k.bin("sub.rn.f32", RegKind::F32, p, oh);
    let g = k.bin("mul.rn.f32", RegKind::F32, g, scale);
    let class = k.setp("lt.u32", j, v);
    k.tri("selp.f32", RegKind::F32, g, 0.0f32, class)
}

/// The four gradients `g` of quad `q`, rounded to bf16 (round-to-nearest-even), stored at the
/// bf16 row `obase` (8 bytes).
fn store_bf16_quad(k: &mut Kernel, obase: Reg, q: Reg, g: &[Reg]) {
    let lo = k.reg(RegKind::B32);
    let hi = k.reg(RegKind::B32);
    k.op("cvt.rn.bf16x2.f32", [lo.into(), g[1].into(), g[0].into()]);
    k.op("cvt.rn.bf16x2.f32", [hi.into(), g[3].into(), g[2].into()]);
    let o = k.addr_of(obase, q, 8);
    k.op("st.global.v2.b32", [addr(o, 0), Opnd::V(vec![lo, hi])]);
}

/// Runs `body` on each of this thread's logits of the row at `base` (columns tid, tid +
/// THREADS, …, in order): from `held` where the thread holds them in registers, else loaded a
/// column at a time.
fn each_logit(
    k: &mut Kernel,
    held: Option<&[Reg]>,
    (base, tid, v): (Reg, Reg, Reg),
    input: DType,
    body: impl Fn(&mut Kernel, Reg),
) {
    match held {
        Some(xs) => {
            for &x in xs {
                body(k, x);
            }
        }
        None => strided(k, tid, v, |k, j| {
            let x = load_f32(k, input, base, j);
            body(k, x);
        }),
    }
}

/// The kernel name's mark of logits stored as `input`: none for f32.
fn input_suffix(input: DType) -> &'static str {
    if input == DType::BF16 {
        "_from_bf16"
    } else {
        ""
    }
}

/// The four logits at `at` in `space` (global or shared), stored as `input`, as f32: one
/// 16-byte load of f32 ones, or one 8-byte load of bf16 ones widened exactly.
fn load_quad(k: &mut Kernel, space: &str, input: DType, at: Reg) -> Vec<Reg> {
    let x = k.regs(RegKind::F32, 4);
    if input == DType::BF16 {
        let words = k.regs(RegKind::B32, 2);
        k.op(&format!("ld.{space}.v2.b32"), [Opnd::V(words.clone()), addr(at, 0)]);
        widen_bf16_words(k, &words, &x);
    } else {
        k.op(&format!("ld.{space}.v4.f32"), [Opnd::V(x.clone()), addr(at, 0)]);
    }
    x
}

/// `for (j = tid; j < v; j += THREADS) body(j)`.
fn strided(k: &mut Kernel, tid: Reg, v: Reg, body: impl FnOnce(&mut Kernel, Reg)) {
    k.strided_loop(tid, v, THREADS, ("row", "row_end"), body);
}

/// The forward's arguments: loss, lse, logits, targets, then the classes v and the row width w.
pub fn forward_arguments<T: ScalarArg>([loss, lse, logits, targets]: [T; 4], (v, w): (u32, u32)) -> Vec<T> {
    vec![loss, lse, logits, targets, T::u32(v), T::u32(w)]
}

/// The backward's arguments: dlogits, logits, lse, targets, dloss, then the classes v and the
/// row width w.
pub fn backward_arguments<T: ScalarArg>(tensors: [T; 5], (v, w): (u32, u32)) -> Vec<T> {
    let mut args = Vec::from(tensors);
    args.extend([T::u32(v), T::u32(w)]);
    args
}

/// Forward over `rows` rows of `w` logits, the first `v` of each: writes per-row loss and
/// log-sum-exp.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    gpu: &Gpu,
    f: &Function,
    loss: u64,
    lse: u64,
    logits: u64,
    targets: u64,
    rows: u32,
    vw: (u32, u32),
) -> Result<()> {
    gpu.launch(
        f,
        LaunchConfig::linear(rows, THREADS),
        &forward_arguments([loss, lse, logits, targets].map(Arg::U64), vw),
    )
}

/// Backward: `dlogits = (softmax(logits) − onehot(target))·dloss[row]` (written, not added).
#[allow(clippy::too_many_arguments)]
pub fn backward(
    gpu: &Gpu,
    f: &Function,
    dlogits: u64,
    logits: u64,
    lse: u64,
    targets: u64,
    dloss: u64,
    rows: u32,
    vw: (u32, u32),
) -> Result<()> {
    gpu.launch(
        f,
        LaunchConfig::linear(rows, THREADS),
        &backward_arguments([dlogits, logits, lse, targets, dloss].map(Arg::U64), vw),
    )
}

/// CPU reference (f64 inside) over rows of `w` logits, the first `v` of each: returns (loss,
/// lse) per row.
pub fn forward_reference(logits: &[f32], targets: &[i32], (v, w): (usize, usize)) -> (Vec<f32>, Vec<f32>) {
    let mut loss = Vec::new();
    let mut lse = Vec::new();
    for (r, &t) in targets.iter().enumerate() {
        let x = &logits[r * w..r * w + v];
        let mx = x.iter().fold(f64::NEG_INFINITY, |m, &a| m.max(a as f64));
        let s: f64 = x.iter().map(|&a| (a as f64 - mx).exp()).sum();
        let l = mx + s.ln();
        lse.push(l as f32);
        loss.push(if t >= 0 && (t as usize) < v { (l - x[t as usize] as f64) as f32 } else { 0.0 });
    }
    (loss, lse)
}

/// CPU reference of the backward (f64 inside): rows of `w`, zero past `v`.
pub fn backward_reference(logits: &[f32], targets: &[i32], dloss: &[f32], (v, w): (usize, usize)) -> Vec<f32> {
    let (_, lse) = forward_reference(logits, targets, (v, w));
    let mut out = vec![0.0; logits.len()];
    for (r, &t) in targets.iter().enumerate() {
        let ok = t >= 0 && (t as usize) < v;
        for j in 0..v {
            let p = (logits[r * w + j] as f64 - lse[r] as f64).exp();
            let oh = if ok && j == t as usize { 1.0 } else { 0.0 };
            out[r * w + j] = if ok { ((p - oh) * dloss[r] as f64) as f32 } else { 0.0 };
        }
    }
    out
}

pub fn kernels() -> Vec<Kernel> {
    vec![forward_kernel(), backward_kernel()]
}

/// `e^x` as `2^(x·log2 e)` (`ex2.approx`, relative error about 2⁻²²).
pub(crate) fn emit_exp(k: &mut Kernel, x: Reg) -> Reg {
    let t = k.bin("mul.rn.f32", RegKind::F32, x, std::f32::consts::LOG2_E);
    k.un("ex2.approx.ftz.f32", RegKind::F32, t)
}

#[cfg(test)]
mod tests {
    /// Each builder fills exactly its kernels' parameters, in order and of their types.
    #[test]
    fn arguments_match_the_kernels_parameters() {
        use crate::kernels::arg_types;
        let types = |k: Kernel| k.params.iter().map(|p| p.ty).collect::<Vec<_>>();
        let fwd = arg_types(&forward_arguments([Arg::U64(0); 4], (64, 64)));
        assert_eq!(fwd, types(forward_kernel()));
        assert_eq!(fwd, types(forward_kernel_for(Some(64))));
        let bwd = arg_types(&backward_arguments([Arg::U64(0); 5], (64, 64)));
        assert_eq!(bwd, types(backward_kernel()));
        assert_eq!(bwd, types(backward_kernel_bf16()));
        let joint = arg_types(&joint_arguments([Arg::U64(0); 5], (64, 64), 0.5));
        assert_eq!(joint, types(joint_kernel_bf16(64)));
    }

    /// The joint kernel fits its launch limits at the widest row it takes, copies the row with
    /// `cp.async`, and keeps the padded columns out.
    #[test]
    fn the_joint_kernel_holds_the_widest_row_and_masks_the_padding() {
        let k = joint_kernel_bf16(JOINT_MAX_WIDTH);
        k.check_budget().unwrap();
        assert_eq!(k.dynamic_shared, 4 * JOINT_MAX_WIDTH);
        let t = joint_kernel_bf16(50304).render();
        assert!(t.contains("cp.async.cg.shared.global") && t.contains("cp.async.wait_all"));
        assert!(t.matches("setp.lt.u32").count() >= 12, "the class mask of every logit in all three passes");
    }

    use super::*;

    #[test]
    fn kernels_render() {
        let t = forward_kernel().render();
        assert!(t.contains(".entry cross_entropy_fwd("));
        assert!(t.contains("shfl.sync.bfly.b32"));
        assert!(t.contains(".shared .align 16 .b8 red[128];"));
        for k in kernels() {
            k.check_budget().unwrap();
        }
    }

    #[test]
    fn reference_on_uniform_logits_is_ln_v() {
        let v = 256;
        let logits = vec![0.5f32; 2 * v];
        let (loss, _) = forward_reference(&logits, &[3, -1], (v, v));
        assert!((loss[0] - (v as f32).ln()).abs() < 1e-5);
        assert_eq!(loss[1], 0.0);
        let g = backward_reference(&logits, &[3, -1], &[1.0, 1.0], (v, v));
        let row: f32 = g[..v].iter().sum();
        assert!(row.abs() < 1e-5, "softmax − onehot sums to 0");
        assert!(g[v..].iter().all(|&x| x == 0.0));
    }

    /// Over the first 250 of rows of 256: ln 250 however large the padded columns are, and
    /// their gradient zero.
    #[test]
    fn reference_over_fewer_classes_than_the_row_leaves_the_rest_out() {
        let (v, w) = (250, 256);
        let logits: Vec<f32> = (0..w).map(|j| if j < v { 0.5 } else { 30.0 }).collect();
        let (loss, _) = forward_reference(&logits, &[3], (v, w));
        assert!((loss[0] - (v as f32).ln()).abs() < 1e-5, "{}", loss[0]);
        let g = backward_reference(&logits, &[3], &[1.0], (v, w));
        assert!(g[..v].iter().sum::<f32>().abs() < 1e-5);
        assert!(g[v..].iter().all(|&x| x == 0.0));
    }

    /// The backward zeroes the columns past the classes in both stores.
    #[test]
    fn the_backward_zeroes_columns_past_the_classes() {
        for k in [backward_kernel(), backward_kernel_bf16()] {
            let t = k.render();
            assert!(t.contains("setp.lt.u32"), "{}", k.name);
            assert!(t.matches("selp.f32").count() >= 3, "{}", k.name);
        }
    }
}
