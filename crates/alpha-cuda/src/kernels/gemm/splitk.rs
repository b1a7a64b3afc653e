//! Split-K: the fixed-order sum of the K parts' partial products, with the product's epilogue.

use super::*;

/// The split-K sum's arguments: C, R, the partials, and the activation's second output where
/// the product has one.
pub fn splitk_reduce_arguments<T>([c, r, partials]: [T; 3], u: Option<T>) -> Vec<T> {
    let mut args = vec![c, r, partials];
    args.extend(u);
    args
}

/// Threads per block of the split-K reduction.
pub const REDUCE_THREADS: u32 = 256;

/// Elements a thread of the split-K reduction takes where `mn` allows ([`splitk_reduce_kernel`]).
pub(super) const REDUCE_VECTOR: u32 = 4;

/// Elements a thread of the split-K reduction takes: four (16-byte accesses) where `mn` is a
/// multiple of four and the caller knows every pointer 16-byte `aligned`, else one.
pub fn splitk_reduce_width(mn: u32, aligned: bool) -> u32 {
    if aligned && mn.is_multiple_of(REDUCE_VECTOR) {
        REDUCE_VECTOR
    } else {
        1
    }
}

/// Blocks of the split-K reduction over `mn` elements, `width` a thread.
pub fn splitk_reduce_blocks(mn: u32, width: u32) -> u32 {
    (mn / width).div_ceil(REDUCE_THREADS).min(crate::kernels::pointwise::MAX_BLOCKS)
}

/// Sums the `splits` partial products of a split-K GEMM (`partials[s·mn + i]`, in order of s)
/// and applies `spec`'s epilogue, writing `c` (and `u` with an activation): params (c, r,
/// partials, u?); grid [`splitk_reduce_blocks`]. Each element is one thread's fixed-order f32
/// sum; a thread takes `width` ([`splitk_reduce_width`]) consecutive elements. Why four: one
/// context's 145 reductions a step were each a few microseconds of one-element threads.
pub fn splitk_reduce_kernel(spec: &GemmSpec, splits: u32, mn: u32, width: u32) -> Kernel {
    let act = spec.activation.map(|u| format!("_{}", format!("{u:?}").to_lowercase())).unwrap_or_default();
    let ep = match spec.epilogue {
        Epilogue::Store => "store",
        Epilogue::AddResidual => "add",
        Epilogue::Accumulate => "acc",
        Epilogue::StoreMul => unreachable!("a split product's epilogue runs in its reduction: no StoreMul"),
    };
    assert!(width == 1 || (width == REDUCE_VECTOR && mn.is_multiple_of(width)), "split-K reduction width {width}");
    let vw = width;
    let suffix = if vw > 1 { format!("_v{vw}") } else { String::new() };
    let mut k = Kernel::new(&format!("gemm_splitk{splits}_{ep}{act}{suffix}")).with_block(REDUCE_THREADS, 1, 1);
    let c = k.param_reg("c", ParamTy::U64);
    let r = k.param_reg("r", ParamTy::U64);
    let partials = k.param_reg("partials", ParamTy::U64);
    let u = spec.activation.map(|_| k.param_reg("u", ParamTy::U64));
    let n = k.imm_u32(mn / vw);
    let (i, stride, top, end) = crate::kernels::pointwise::grid_stride_begin_with(&mut k, n, Some(REDUCE_THREADS));
    let bytes = 4 * vw;
    // Loads `vw` f32 at `base + i·bytes + off`.
    let load = |k: &mut Kernel, base: Reg, off: i64| -> Vec<Reg> {
        let a = k.addr_of(base, i, bytes);
        let v = k.regs(RegKind::F32, vw as usize);
        if vw == 1 {
            k.op("ld.global.f32", [v[0].into(), addr(a, off)]);
        } else {
            k.op("ld.global.v4.f32", [Opnd::V(v.clone()), addr(a, off)]);
        }
        v
    };
    let store = |k: &mut Kernel, base: Reg, v: Vec<Reg>| {
        let a = k.addr_of(base, i, bytes);
        if vw == 1 {
            k.op("st.global.f32", [addr(a, 0), v[0].into()]);
        } else {
            k.op("st.global.v4.f32", [addr(a, 0), Opnd::V(v)]);
        }
    };
    let parts: Vec<Vec<Reg>> = (0..splits).map(|s| load(&mut k, partials, s as i64 * mn as i64 * 4)).collect();
    let old = match spec.epilogue {
        Epilogue::Store => None,
        Epilogue::AddResidual => Some(load(&mut k, r, 0)),
        Epilogue::Accumulate => Some(load(&mut k, c, 0)),
        Epilogue::StoreMul => unreachable!("no StoreMul reductions"),
    };
    let out = sum_parts(&mut k, &parts, old.as_deref());
    if let (Some(f), Some(u)) = (spec.activation, u) {
        let y = out.iter().map(|&x| crate::kernels::pointwise::emit_unary(&mut k, f, x)).collect();
        store(&mut k, u, y);
    }
    store(&mut k, c, out);
    crate::kernels::pointwise::grid_stride_end(&mut k, i, stride, n, &top, &end);
    k
}
