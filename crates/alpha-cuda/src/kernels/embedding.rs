//! Embedding gather and its deterministic scatter-add gradient.
//!
//! Why: the forward is a row gather (`out[n] = table[idx[n]]`); the backward must add every
//! token's output gradient into its vocabulary row. The usual float `atomicAdd` makes the sum's
//! order — and so its last bits — depend on scheduling, and §9's gates ask runs to repeat bit
//! for bit. So the backward owns each output element in exactly one thread and sums in a fixed
//! order.
//!
//! How (backward): one block per [`ROWS`] vocabulary rows (128 threads, 4 columns each per pass
//! over D). The block scans the token indices 512 at a time: each thread tests four, each warp
//! turns its matches (an index among the block's rows) into 32-bit ballots, which go to shared
//! memory with each index's row, and then every thread walks the set bits in increasing token
//! order, adding that token's gradient to the four accumulators of its row (the gradients of
//! [`BATCH`] hits loaded before any is added: a frequent token's row waits out one load latency
//! per batch, not per hit). A round of indices that hits none of the block's rows — most rounds
//! of most blocks — ends at its barrier, which ORs the threads' hits (`bar.red.or.pred`): at
//! sixteen contexts the walk of empty slots took most of the 0.30 ms (0.21 ms without
//! it). Rows that no token uses are not touched. The result is
//! `dtable[v] += Σ_{n: idx[n]=v, n ascending} dout[n]`, the same sum in the same order as
//! [`scatter_add_reference`], so the two agree bit for bit. Cost:
//! every block reads the N indices (from L2: V·N·4/ROWS bytes), no atomics, no sort. Why eight
//! rows a block: one row a block scanned the indices 12,288 times, 232 µs at sixteen contexts.
//! Indices outside `[0, V)` contribute nothing (and gather writes zeros for them).

use anyhow::{bail, Result};

use crate::kernels::ScalarArg;
use crate::ptx::{addr, Kernel, Opnd, ParamTy, Reg, RegKind};
use crate::runtime::driver::{Arg, Function, Gpu, LaunchConfig};

/// Threads per block; each handles 4 consecutive columns, so 512 columns per pass.
pub const THREADS: u32 = 128;

/// Gather: params (out, table, idx, v, d).
pub fn gather_kernel() -> Kernel {
    let mut k = Kernel::new("embedding_gather").with_block(THREADS, 1, 1);
    let out = k.param_reg("out", ParamTy::U64);
    let table = k.param_reg("table", ParamTy::U64);
    let idx = k.param_reg("idx", ParamTy::U64);
    let vocab = k.param_reg("v", ParamTy::U32);
    let d = k.param_reg("d", ParamTy::U32);
    let tid = k.sreg("%tid.x");
    let row = k.sreg("%ctaid.x");
    let ia = k.addr_of(idx, row, 4);
    let t = k.reg(RegKind::B32);
    k.op("ld.global.nc.u32", [t.into(), addr(ia, 0)]);
    // Unsigned compare: negative indices are huge, so out of range too.
    let ok = k.setp("lt.u32", t, vocab);
    let src_row = k.bin("mul.lo.u32", RegKind::B32, t, d);
    let dst_row = k.bin("mul.lo.u32", RegKind::B32, row, d);
    let col = k.bin("mul.lo.u32", RegKind::B32, tid, 4u32);
    let top = k.label("col");
    let end = k.label("end");
    k.place(&top);
    let more = k.setp("lt.u32", col, d);
    k.bra_if(more, true, &end);
    let v = k.regs(RegKind::F32, 4);
    for &r in &v {
        k.op("mov.f32", [r.into(), 0.0f32.into()]);
    }
    let se = k.bin("add.u32", RegKind::B32, src_row, col);
    let sa = k.addr_of(table, se, 4);
    k.op_if(ok, false, "ld.global.nc.v4.f32", [Opnd::V(v.clone()), addr(sa, 0)]);
    let de = k.bin("add.u32", RegKind::B32, dst_row, col);
    let da = k.addr_of(out, de, 4);
    k.op("st.global.v4.f32", [addr(da, 0), Opnd::V(v)]);
    k.op("add.u32", [col.into(), col.into(), (4 * THREADS).into()]);
    k.bra(&top);
    k.place(&end);
    k.ret();
    k
}

/// Vocabulary rows of one scatter-add block.
pub const ROWS: u32 = 8;
/// Token indices a scatter-add block tests a round: four a thread.
const CHUNK: u32 = 4 * THREADS;
/// Hits whose gradients a scatter-add thread loads before adding them (a batch stops at the
/// first slot without a hit). 16 against 8: sixteen contexts' scatter-add 0.212 against 0.250
/// ms; 32 took 239 registers and was slower.
const BATCH: usize = 16;

/// Blocks of the scatter-add over a vocabulary of `v` rows.
pub fn scatter_add_blocks(v: u32) -> u32 {
    v.div_ceil(ROWS)
}

/// Scatter-add: params (dtable, dout, idx, n, v, d); grid [`scatter_add_blocks`].
pub fn scatter_add_kernel() -> Kernel {
    let name = "embedding_scatter_add";
    let mut k = Kernel::new(name).with_block(THREADS, 1, 1);
    let dtable = k.param_reg("dtable", ParamTy::U64);
    let dout = k.param_reg("dout", ParamTy::U64);
    let idx = k.param_reg("idx", ParamTy::U64);
    let n = k.param_reg("n", ParamTy::U32);
    let vocab = k.param_reg("v", ParamTy::U32);
    let d = k.param_reg("d", ParamTy::U32);
    // Per round: a ballot per (index group j, warp w), j-major, and each index's row in the
    // block (or ROWS where it is none of the block's).
    let groups = CHUNK / 32;
    let masks = k.shared("ballots", 4 * groups, 16);
    let rels = k.shared("rows_of", 4 * CHUNK, 16);
    let tid = k.sreg("%tid.x");
    let block = k.sreg("%ctaid.x");
    let v0 = k.bin("mul.lo.u32", RegKind::B32, block, ROWS);
    let lane = k.bin("and.b32", RegKind::B32, tid, 31u32);
    let warp = k.bin("shr.u32", RegKind::B32, tid, 5u32);
    let mbase = k.un("mov.u32", RegKind::B32, Opnd::S(masks));
    let rbase = k.un("mov.u32", RegKind::B32, Opnd::S(rels));
    let first = k.setp("eq.u32", lane, 0u32);

    let col = k.bin("mul.lo.u32", RegKind::B32, tid, 4u32);
    let dtop = k.label("dpass");
    let dend = k.label("dend");
    k.place(&dtop);
    // Block-uniform: passes over D start at 0, 512, ...; col - tid*4 is the pass base.
    let tid4 = k.bin("mul.lo.u32", RegKind::B32, tid, 4u32);
    let pass_base = k.bin("sub.u32", RegKind::B32, col, tid4);
    let pass_live = k.setp("lt.u32", pass_base, d);
    k.bra_if(pass_live, true, &dend);
    let col_ok = k.setp("lt.u32", col, d);
    // Four accumulators for each of the block's rows.
    let acc: Vec<Vec<_>> = (0..ROWS).map(|_| k.regs(RegKind::F32, 4)).collect();
    for r in acc.iter().flatten() {
        k.op("mov.f32", [(*r).into(), 0.0f32.into()]);
    }
    // Bit r: some token hit row v0 + r (block-uniform: every thread walks the same ballots).
    let used = k.imm_u32(0);
    let one = k.imm_u32(1);
    let chunk = k.imm_u32(0);
    let ctop = k.label("chunk");
    let cend = k.label("chunk_end");
    k.place(&ctop);
    let cl = k.setp("lt.u32", chunk, n);
    k.bra_if(cl, true, &cend);
    // Whether any of this thread's indices hits the block's rows (the barrier ORs them).
    let mine_hit = k.setp("ne.u32", chunk, chunk);
    for j in 0..CHUNK / THREADS {
        let at = k.bin("add.u32", RegKind::B32, tid, j * THREADS);
        let t = k.bin("add.u32", RegKind::B32, chunk, at);
        let tin = k.setp("lt.u32", t, n);
        let iv = k.imm_u32(u32::MAX);
        let ia = k.addr_of(idx, t, 4);
        k.op_if(tin, false, "ld.global.nc.u32", [iv.into(), addr(ia, 0)]);
        // Unsigned: indices below v0 (or negative) wrap past ROWS; rows past V never hit.
        let rel = k.bin("sub.u32", RegKind::B32, iv, v0);
        let near = k.setp("lt.u32", rel, ROWS);
        let real = k.setp("lt.u32", iv, vocab);
        let hit = k.bin("and.pred", RegKind::Pred, near, real);
        k.op("or.pred", [mine_hit.into(), mine_hit.into(), hit.into()]);
        let ra = k.tri("mad.lo.u32", RegKind::B32, at, 4u32, rbase);
        k.op("st.shared.u32", [addr(ra, 0), rel.into()]);
        let ballot = k.reg(RegKind::B32);
        k.op("vote.sync.ballot.b32", [ballot.into(), hit.into(), Opnd::S("-1".into())]);
        let slot = k.bin("add.u32", RegKind::B32, warp, j * (THREADS / 32));
        let ma = k.tri("mad.lo.u32", RegKind::B32, slot, 4u32, mbase);
        k.op_if(first, false, "st.shared.u32", [addr(ma, 0), ballot.into()]);
    }
    // A round that hits none of the block's rows (most rounds of most blocks) ends here: no
    // thread reads what the round staged, so the next round needs no second barrier.
    let any_hit = k.reg(RegKind::Pred);
    k.op("bar.red.or.pred", [any_hit.into(), Opnd::I(0), mine_hit.into()]);
    let next_round = k.label("next_round");
    k.bra_if(any_hit, true, &next_round);
    // Every hit in increasing token order: group g covers tokens chunk + 32·g + bit. Up to
    // BATCH hits at a time, across groups: their gradients are all loaded, then added in order
    // (a frequent token's row, with a hit in most groups, would otherwise wait out one load
    // latency a hit or a group). The walk is block-uniform: every thread reads the same masks.
    let g = k.imm_u32(0);
    let m = k.reg(RegKind::B32);
    k.op("ld.shared.u32", [m.into(), addr(mbase, 0)]);
    let btop = k.label("batch");
    let bend = k.label("batch_end");
    k.place(&btop);
    // Hit rows of the batch's slots: ROWS (none) until a slot finds a hit. The first slot
    // without one ends the loads, and the adds stop there too (hits are found in order).
    let rels: Vec<Reg> = (0..BATCH).map(|_| k.imm_u32(ROWS)).collect();
    let adds = k.label("adds");
    let batch: Vec<(Reg, Vec<Reg>)> = rels
        .iter()
        .map(|&rel| {
            // The next group with a hit left (g = groups when none).
            let seek = k.label("seek");
            let found = k.label("found");
            k.place(&seek);
            let some = k.setp("ne.u32", m, 0u32);
            k.bra_if(some, false, &found);
            k.op("add.u32", [g.into(), g.into(), 1u32.into()]);
            let more = k.setp("lt.u32", g, groups);
            k.bra_if(more, true, &found);
            let ma = k.tri("mad.lo.u32", RegKind::B32, g, 4u32, mbase);
            k.op("ld.shared.u32", [m.into(), addr(ma, 0)]);
            k.bra(&seek);
            k.place(&found);
            let has = k.setp("ne.u32", m, 0u32);
            k.bra_if(has, true, &adds);
            // lowest set bit position = popc((m & -m) - 1)
            let neg = k.un("neg.s32", RegKind::B32, m);
            let low = k.bin("and.b32", RegKind::B32, m, neg);
            let lm1 = k.bin("sub.u32", RegKind::B32, low, 1u32);
            let pos = k.un("popc.b32", RegKind::B32, lm1);
            k.op("xor.b32", [m.into(), m.into(), low.into()]);
            let at = k.tri("mad.lo.u32", RegKind::B32, g, 32u32, pos);
            let ra = k.tri("mad.lo.u32", RegKind::B32, at, 4u32, rbase);
            k.op("ld.shared.u32", [rel.into(), addr(ra, 0)]);
            let tok = k.bin("add.u32", RegKind::B32, chunk, at);
            let e = k.tri("mad.lo.u32", RegKind::B32, tok, d, col);
            let ga = k.addr_of(dout, e, 4);
            (rel, k.load_f32s_if(col_ok, "ld.global.nc.v4.f32", 4, addr(ga, 0)))
        })
        .collect();
    k.place(&adds);
    let added = k.label("added");
    for (rel, gv) in &batch {
        let none = k.setp("eq.u32", *rel, ROWS);
        k.bra_if(none, false, &added);
        let bit = k.bin("shl.b32", RegKind::B32, one, *rel);
        k.op("or.b32", [used.into(), used.into(), bit.into()]);
        for (r, acc_r) in acc.iter().enumerate() {
            let mine = k.setp("eq.u32", *rel, r as u32);
            for (a, gr) in acc_r.iter().zip(gv) {
                k.op_if(mine, false, "add.rn.f32", [(*a).into(), (*a).into(), (*gr).into()]);
            }
        }
    }
    k.place(&added);
    // Another batch while groups remain (the last slot's seek ran out of them otherwise).
    let left = k.setp("lt.u32", g, groups);
    k.bra_if(left, false, &btop);
    k.place(&bend);
    k.barrier();
    k.place(&next_round);
    k.op("add.u32", [chunk.into(), chunk.into(), CHUNK.into()]);
    k.bra(&ctop);
    k.place(&cend);
    // Write back only rows some token used.
    let load = "ld.global.v4.f32";
    for (r, acc_r) in acc.iter().enumerate() {
        let bit = k.bin("and.b32", RegKind::B32, used, 1u32 << r);
        let hit = k.setp("ne.u32", bit, 0u32);
        let write = k.bin("and.pred", RegKind::Pred, hit, col_ok);
        let skip = k.label("skip_write");
        k.bra_if(write, true, &skip);
        let row = k.bin("add.u32", RegKind::B32, v0, r as u32);
        let e = k.tri("mad.lo.u32", RegKind::B32, row, d, col);
        let da = k.addr_of(dtable, e, 4);
        let old = k.regs(RegKind::F32, 4);
        k.op(load, [Opnd::V(old.clone()), addr(da, 0)]);
        let new: Vec<_> = old.iter().zip(acc_r).map(|(o, a)| k.bin("add.rn.f32", RegKind::F32, *o, *a)).collect();
        k.op("st.global.v4.f32", [addr(da, 0), Opnd::V(new)]);
        k.place(&skip);
    }
    k.op("add.u32", [col.into(), col.into(), (4 * THREADS).into()]);
    k.bra(&dtop);
    k.place(&dend);
    k.ret();
    k
}

fn check_d(d: u32) -> Result<()> {
    if d == 0 || !d.is_multiple_of(4) {
        bail!("embedding: row width {d} must be a positive multiple of 4");
    }
    Ok(())
}

/// The gather's arguments: out, the table `[v, d]`, the ids, then v and d.
pub fn gather_arguments<T: ScalarArg>([out, table, idx]: [T; 3], v: u32, d: u32) -> Vec<T> {
    vec![out, table, idx, T::u32(v), T::u32(d)]
}

/// The scatter-add's arguments: the table's gradient, dout, the ids, then tokens, v and d.
pub fn scatter_add_arguments<T: ScalarArg>([dtable, dout, idx]: [T; 3], tokens: u32, v: u32, d: u32) -> Vec<T> {
    vec![dtable, dout, idx, T::u32(tokens), T::u32(v), T::u32(d)]
}

/// `out[n] = table[idx[n]]` for `n < tokens`; table `[v, d]` f32, idx i32.
#[allow(clippy::too_many_arguments)]
pub fn gather(gpu: &Gpu, f: &Function, out: u64, table: u64, idx: u64, tokens: u32, v: u32, d: u32) -> Result<()> {
    check_d(d)?;
    gpu.launch(f, LaunchConfig::linear(tokens, THREADS), &gather_arguments([out, table, idx].map(Arg::U64), v, d))
}

/// `dtable[v] += Σ dout[n]` over tokens with `idx[n] = v`, deterministically.
#[allow(clippy::too_many_arguments)]
pub fn scatter_add(
    gpu: &Gpu,
    f: &Function,
    dtable: u64,
    dout: u64,
    idx: u64,
    tokens: u32,
    v: u32,
    d: u32,
) -> Result<()> {
    check_d(d)?;
    gpu.launch(
        f,
        LaunchConfig::linear(scatter_add_blocks(v), THREADS),
        &scatter_add_arguments([dtable, dout, idx].map(Arg::U64), tokens, v, d),
    )
}

/// CPU reference of the gather.
pub fn gather_reference(table: &[f32], idx: &[i32], v: usize, d: usize) -> Vec<f32> {
    let mut out = vec![0.0; idx.len() * d];
    for (n, &t) in idx.iter().enumerate() {
        if t >= 0 && (t as usize) < v {
            out[n * d..(n + 1) * d].copy_from_slice(&table[t as usize * d..(t as usize + 1) * d]);
        }
    }
    out
}

/// CPU reference of the scatter-add: same order of additions as the kernel.
/// Each row's sum is formed over its tokens in order, then added to the row once.
pub fn scatter_add_reference(dtable: &mut [f32], dout: &[f32], idx: &[i32], v: usize, d: usize) {
    let mut acc = vec![0.0f32; v * d];
    let mut used = vec![false; v];
    for (n, &t) in idx.iter().enumerate() {
        if t >= 0 && (t as usize) < v {
            let t = t as usize;
            used[t] = true;
            for j in 0..d {
                acc[t * d + j] += dout[n * d + j];
            }
        }
    }
    for r in 0..v {
        if used[r] {
            for j in 0..d {
                dtable[r * d + j] += acc[r * d + j];
            }
        }
    }
}

pub fn kernels() -> Vec<Kernel> {
    vec![gather_kernel(), scatter_add_kernel()]
}

#[cfg(test)]
mod tests {
    /// Each builder fills exactly its kernel's parameters, in order and of their types.
    #[test]
    fn arguments_match_the_kernels_parameters() {
        use crate::kernels::arg_types;
        let types = |k: Kernel| k.params.iter().map(|p| p.ty).collect::<Vec<_>>();
        assert_eq!(arg_types(&gather_arguments([Arg::U64(0); 3], 8, 4)), types(gather_kernel()));
        assert_eq!(arg_types(&scatter_add_arguments([Arg::U64(0); 3], 2, 8, 4)), types(scatter_add_kernel()));
    }

    use super::*;

    #[test]
    fn kernels_render() {
        let t = scatter_add_kernel().render();
        assert!(t.contains(".entry embedding_scatter_add("));
        assert!(t.contains("vote.sync.ballot.b32"));
        // A ballot per warp and index group of a round, and each index's row in the block.
        assert!(t.contains(".shared .align 16 .b8 ballots[64];"));
        assert!(t.contains(".shared .align 16 .b8 rows_of[2048];"));
        assert!(!t.contains("atom."), "no atomics");
        for k in kernels() {
            k.check_budget().unwrap();
        }
    }

    #[test]
    fn scatter_reference_sums_repeated_rows() {
        let mut dt = vec![1.0f32; 3 * 4];
        let dout: Vec<f32> = (0..16).map(|i| i as f32).collect();
        scatter_add_reference(&mut dt, &dout, &[2, 0, 2, 7], 3, 4);
        assert_eq!(&dt[0..4], &[5.0, 6.0, 7.0, 8.0]);
        assert_eq!(&dt[4..8], &[1.0; 4]);
        assert_eq!(&dt[8..12], &[1.0 + 0.0 + 8.0, 1.0 + 1.0 + 9.0, 1.0 + 2.0 + 10.0, 1.0 + 3.0 + 11.0]);
    }
}
