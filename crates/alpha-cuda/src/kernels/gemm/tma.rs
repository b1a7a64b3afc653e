//! The Hopper GEMM engine fed by the tensor memory accelerator (TMA), warp-specialized.
//!
//! Why: the `cp.async` ring of [`crate::kernels::gemm::wgmma`] makes every thread issue eight 16-byte
//! copies, wait for them, fence the generic proxy against the tensor cores' async proxy and meet
//! a block-wide barrier each K-step; on the H200 it reached 500 TFLOP/s on 8192³ and 230–430 on
//! sixteen contexts' products. Here one thread of a producer warp issues each stage as one or
//! two bulk tensor copies (`cp.async.bulk.tensor`) that land already in the 128-byte-swizzled
//! layout `wgmma` reads, and the consumer warpgroups only wait on an `mbarrier`, multiply, and
//! give the stage back: no per-step barrier, no proxy fence, no copy issue in the math warps.
//!
//! How: the block is the `wgmma` engine's consumer warpgroups (64 rows of the tile each, every
//! column; the same descriptors, accumulators and `store_tile` epilogue) plus one producer
//! warp. Each ring stage has a *full* barrier (one arrival: the producer's `expect_tx` of the
//! stage's bytes, completed by the copies) and an *empty* barrier (one arrival per consumer
//! warp, after `wgmma.wait_group 1` shows the products reading the previous stage are done).
//! The producer waits on a stage's empty barrier before refilling it (parity trick: the first
//! round waits on the phase before the barrier's first, which counts as complete).
//!
//! Operands come through tensor maps (`CUtensorMap`, 128 bytes, encoded on the host by
//! [`encode`] from a [`MapSpec`] and stored in device memory; the
//! kernel takes their addresses as its last two parameters). A K-major operand (A row-major, B
//! column-major) is one box of 64 K × tile rows a stage; an MN-major operand is tile/64 boxes of
//! 64 rows × 64 K. Rows past the matrix edge arrive as zeros (the map's bounds), as with the
//! `cp.async` ring's zero fill, so the products and their rounding are the same bit for bit.
//!
//! Epilogues that read f32 tensors at every element (a chain's inputs, a residual, the old
//! output) run through shared memory (`store_staged`): the tile goes to the ring, then each
//! warp takes whole rows, with several rows' loads in flight.
//!
//! A gated block ([`GemmSpec::gated`]) changes the block's ends, not its main loop: it takes
//! its B tile's two 64-column halves from two maps — a gated unit's gate weight and its up
//! weight — so one launch computes both products for 64 output columns and multiplies them on
//! registers.
//!
//! Shape contract: as the `wgmma` engine's, bf16 operands only, and batch entries are the
//! K-slices of one product (split-K, [`GemmShape::split`]): entry z starts at K = z·k.

use anyhow::{bail, Result};

use crate::kernels::gemm::wgmma::{self as gemm_wgmma, BK};
use crate::kernels::gemm::{head, store_tile, store_tile_with, GemmShape, GemmSpec, Head, Input, Layout};
use crate::ptx::{addr, Kernel, Opnd, ParamTy, Reg, RegKind};

/// Bytes of one swizzled line: 64 bf16.
const LINE: u32 = 128;

/// Threads per block: the consumer warpgroups and one producer warp.
pub fn threads(spec: &GemmSpec) -> u32 {
    consumer_threads(spec) + 32
}

fn consumer_threads(spec: &GemmSpec) -> u32 {
    128 * spec.tile.rows() / 64
}

/// Bytes of one ring stage: A's tile then B's, each `rows × 64` bf16.
fn stage_bytes(spec: &GemmSpec) -> u32 {
    (spec.tile.rows() + spec.tile.cols()) * LINE
}

/// Dynamic shared memory: the ring plus slack to align it to 1,024 bytes (the swizzle is a
/// function of the address bits).
pub fn shared_bytes(spec: &GemmSpec) -> u32 {
    gemm_wgmma::stages(spec) * stage_bytes(spec) + 1024
}

/// A 2-D bf16 tensor map over one operand as stored: `inner` contiguous elements a line,
/// `outer` lines `stride_bytes` apart, read in boxes of `box_inner × box_outer`, 128-byte swizzle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MapSpec {
    pub inner: u64,
    pub outer: u64,
    pub stride_bytes: u64,
    pub box_inner: u32,
    pub box_outer: u32,
}

/// The maps of A and B for `shape` (for a split-K launch, the shape of one part: the maps
/// cover every part's K).
pub fn map_specs(spec: &GemmSpec, shape: &GemmShape) -> (MapSpec, MapSpec) {
    let k_total = if spec.uneven_split { shape.k as u64 } else { shape.k as u64 * shape.batch as u64 };
    let map = |k_major: bool, rows: u32, ld: u32, tile_rows: u32| {
        if k_major {
            // Lines are rows of the operand, K along them: one box of 64 K × the tile's rows.
            MapSpec {
                inner: k_total,
                outer: rows as u64,
                stride_bytes: ld as u64 * 2,
                box_inner: BK,
                box_outer: tile_rows,
            }
        } else {
            // Lines are one K's rows: boxes of 64 rows × 64 K.
            MapSpec { inner: rows as u64, outer: k_total, stride_bytes: ld as u64 * 2, box_inner: 64, box_outer: BK }
        }
    };
    (
        map(spec.a == Layout::RowMajor, shape.m, shape.lda, spec.tile.rows()),
        map(spec.b == Layout::ColMajor, shape.n, shape.ldb, spec.tile.cols()),
    )
}

/// Checks that `shape`'s batch entries are consecutive K-slices of one product (what the
/// kernel assumes: entry z reads K from z·k).
pub fn check_shape(spec: &GemmSpec, shape: &GemmShape) -> Result<()> {
    if spec.a_input != Input::Bf16 || spec.b_input != Input::Bf16 {
        bail!("{}: the TMA engine takes bf16 operands only", spec.name());
    }
    if spec.uneven_split {
        if !shape.k.is_multiple_of(BK) || shape.k / BK < shape.batch {
            bail!("{}: {} parts need at least as many K steps of {BK}: {shape:?}", spec.name(), shape.batch);
        }
    } else if shape.batch > 1 {
        let whole = GemmShape { k: shape.k * shape.batch, batch: 1, ..*shape };
        let part = whole.split(spec, shape.batch);
        if (part.stride_a, part.stride_b) != (shape.stride_a, shape.stride_b) {
            bail!("{}: batch entries must be K-slices of one product (split-K): {shape:?}", spec.name());
        }
    }
    Ok(())
}

/// Waits until the phase of parity `parity` of the mbarrier at shared `bar` has completed.
fn wait(k: &mut Kernel, bar: Reg, parity: Reg) {
    let again = k.label("mbar_wait");
    k.place(&again);
    let done = k.reg(RegKind::Pred);
    k.op("mbarrier.try_wait.parity.shared::cta.b64", [done.into(), addr(bar, 0), parity.into()]);
    k.bra_if(done, true, &again);
}

/// Builds the kernel for `spec` (bf16 operands, K step [`BK`]).
pub fn build(spec: &GemmSpec) -> Kernel {
    let (bm, bn) = (spec.tile.rows(), spec.tile.cols());
    let stages = gemm_wgmma::stages(spec);
    let consumers = consumer_threads(spec);
    let consumer_warps = consumers / 32;
    let mut k = Kernel::new(&spec.name()).with_block(threads(spec), 1, 1);
    // The three-stage ring is chosen so that two blocks share an SM, each hiding the other's
    // epilogue ([`gemm_wgmma::stages_for`]): ptxas is held to two blocks' registers (96 for
    // nine warps), or an epilogue that reads a second tensor (144 registers) or turns heads
    // (106) leaves one. Measured on the H200: sixteen contexts' step 26.06 → 25.78 ms.
    if stages == 3 && spec.tuning.two_blocks {
        k.min_blocks_per_sm = Some(2);
    }
    let mut h = head(&mut k, spec);
    let map_a = k.param_reg("tmap_a", ParamTy::U64);
    let map_b = k.param_reg("tmap_b", ParamTy::U64);
    // A gated block: the gate's B (this map) fills the tile's first 64 columns, B the rest,
    // both for output columns n0 … n0 + 63.
    let map_gate = spec.gated.then(|| {
        assert!(
            spec.b == Layout::RowMajor
                && spec.tile == crate::kernels::gemm::Tile::T128x128
                && spec.epilogue == crate::kernels::gemm::Epilogue::StoreMul
                && spec.heads.is_none()
                && spec.chain.is_none(),
            "{}: a gated product is a StoreMul of a row-major B in 128 × 128 tiles",
            spec.name()
        );
        let bx = k.sreg("%ctaid.x");
        h.n0 = k.bin("mul.lo.u32", RegKind::B32, bx, bn / 2);
        k.param_reg("tmap_gate", ParamTy::U64)
    });
    // A paired block: the first half of its K steps from the first product's maps.
    let first_maps = spec.k_pair.then(|| {
        assert!(
            spec.a == Layout::RowMajor && spec.b == Layout::ColMajor && !spec.gated && !spec.uneven_split,
            "{}: a paired product reads two K-major operands, unsplit",
            spec.name()
        );
        (k.param_reg("tmap_a1", ParamTy::U64), k.param_reg("tmap_b1", ParamTy::U64))
    });
    let smem = k.dynamic_shared_array("gemm_ring", shared_bytes(spec), 1024);
    // Per stage: the full barrier at 8·s, the empty one at 8·(stages + s).
    let bars_sym = k.shared("gemm_bars", 16 * stages, 8);
    let stage = stage_bytes(spec);
    let b_off = bm * LINE;

    let ring = gemm_wgmma::ring_base(&mut k, smem);
    let bars = k.un("mov.u32", RegKind::B32, Opnd::S(bars_sym));
    let ktiles = k.bin("shr.u32", RegKind::B32, h.kdim, BK.trailing_zeros());
    // Parts that may differ by a K step: part z of Z takes steps ⌊z·S/Z⌋ … ⌊(z+1)·S/Z⌋.
    let part_steps = spec.uneven_split.then(|| {
        let (z, nz) = (k.sreg("%ctaid.z"), k.sreg("%nctaid.z"));
        let zs = k.bin("mul.lo.u32", RegKind::B32, z, ktiles);
        let first = k.bin("div.u32", RegKind::B32, zs, nz);
        let zs1 = k.bin("add.u32", RegKind::B32, zs, ktiles);
        let end = k.bin("div.u32", RegKind::B32, zs1, nz);
        (first, k.bin("sub.u32", RegKind::B32, end, first))
    });
    let ktiles = part_steps.map_or(ktiles, |p| p.1);
    let lane = k.bin("and.b32", RegKind::B32, h.tid, 31u32);
    let warp = k.bin("shr.u32", RegKind::B32, h.tid, 5u32);

    k.comment("barriers: full (one arrival + the stage's bytes), empty (one per consumer warp)");
    let not_first = k.setp("ne.u32", h.tid, 0u32);
    let inited = k.label("inited");
    k.bra_if(not_first, false, &inited);
    for s in 0..stages {
        k.op("mbarrier.init.shared::cta.b64", [addr(bars, 8 * s as i64), 1u32.into()]);
        k.op("mbarrier.init.shared::cta.b64", [addr(bars, 8 * (stages + s) as i64), consumer_warps.into()]);
    }
    k.op("fence.mbarrier_init.release.cluster", []);
    k.place(&inited);
    k.barrier();

    // Stage cursor: index, byte offset, and the parity of the round.
    let cursor = |k: &mut Kernel| (k.imm_u32(0), k.imm_u32(0), k.imm_u32(0));
    let advance = |k: &mut Kernel, (idx, off, parity): (Reg, Reg, Reg)| {
        k.op("add.u32", [idx.into(), idx.into(), 1u32.into()]);
        k.op("add.u32", [off.into(), off.into(), stage.into()]);
        let wrap = k.setp("eq.u32", idx, stages);
        k.op_if(wrap, false, "mov.u32", [idx.into(), 0u32.into()]);
        k.op_if(wrap, false, "mov.u32", [off.into(), 0u32.into()]);
        k.op_if(wrap, false, "xor.b32", [parity.into(), parity.into(), 1u32.into()]);
    };
    let full_bar = |k: &mut Kernel, idx: Reg| k.tri("mad.lo.u32", RegKind::B32, idx, 8u32, bars);
    let empty_bar = |k: &mut Kernel, idx: Reg| {
        let b = k.tri("mad.lo.u32", RegKind::B32, idx, 8u32, bars);
        k.bin("add.u32", RegKind::B32, b, 8 * stages)
    };
    // One arrival at `bar` from each thread where `who` holds (a consumer warp's lane 0).
    let arrive = |k: &mut Kernel, who: Reg, bar: Reg| {
        let token = k.reg(RegKind::B64);
        k.op_if(who, false, "mbarrier.arrive.shared::cta.b64", [token.into(), addr(bar, 0)]);
    };

    let consumer = k.setp("lt.u32", warp, consumer_warps);
    let math = k.label("consumer");
    k.bra_if(consumer, false, &math);

    k.comment("producer: lane 0 of the last warp fills the ring");
    let exit = k.label("exit");
    let idle = k.setp("ne.u32", lane, 0u32);
    k.bra_if(idle, false, &exit);
    k.op("prefetch.tensormap", [addr(map_a, 0)]);
    k.op("prefetch.tensormap", [addr(map_b, 0)]);
    if let Some(mg) = map_gate {
        k.op("prefetch.tensormap", [addr(mg, 0)]);
    }
    if let Some((a1, b1)) = first_maps {
        k.op("prefetch.tensormap", [addr(a1, 0)]);
        k.op("prefetch.tensormap", [addr(b1, 0)]);
    }
    // Paired: the first half of the K steps, and the K its second half starts back from.
    let half = first_maps.map(|_| {
        let half = k.bin("shr.u32", RegKind::B32, ktiles, 1u32);
        (half, k.bin("mul.lo.u32", RegKind::B32, half, BK))
    });
    // Split-K part z reads K from z·k (uneven parts: from its first step).
    let k0 = match part_steps {
        Some((first, _)) => k.bin("shl.b32", RegKind::B32, first, BK.trailing_zeros()),
        None => {
            let bz = k.sreg("%ctaid.z");
            k.bin("mul.lo.u32", RegKind::B32, bz, h.kdim)
        }
    };
    let pc = cursor(&mut k);
    let kt = k.reg(RegKind::B32);
    let token = k.reg(RegKind::B64);
    k.op("mov.u32", [kt.into(), 0u32.into()]);
    let fill = k.label("fill");
    k.place(&fill);
    let empty = empty_bar(&mut k, pc.0);
    let free_parity = k.bin("xor.b32", RegKind::B32, pc.2, 1u32);
    wait(&mut k, empty, free_parity);
    let full = full_bar(&mut k, pc.0);
    k.op("mbarrier.arrive.expect_tx.shared::cta.b64", [token.into(), addr(full, 0), stage.into()]);
    let kc = k.tri("mad.lo.u32", RegKind::B32, kt, BK, k0);
    // Paired: steps before the half read the first product's maps at K = kc, the rest A's and
    // B's at K = kc − K/2.
    let (map_a, map_b, kc) = match (first_maps, half) {
        (Some((a1, b1)), Some((half, back))) => {
            let second = k.setp("ge.u32", kt, half);
            let ma = k.reg(RegKind::B64);
            k.op("selp.b64", [ma.into(), map_a.into(), a1.into(), second.into()]);
            let mb = k.reg(RegKind::B64);
            k.op("selp.b64", [mb.into(), map_b.into(), b1.into(), second.into()]);
            let shift = k.reg(RegKind::B32);
            k.op("selp.b32", [shift.into(), back.into(), 0u32.into(), second.into()]);
            (ma, mb, k.bin("sub.u32", RegKind::B32, kc, shift))
        }
        _ => (map_a, map_b, kc),
    };
    let dst_a = k.bin("add.u32", RegKind::B32, ring, pc.1);
    let dst_b = k.bin("add.u32", RegKind::B32, dst_a, b_off);
    for (is_b, map, dst, k_major, row0, tile_rows) in [
        (false, map_a, dst_a, spec.a == Layout::RowMajor, h.m0, bm),
        (true, map_b, dst_b, spec.b == Layout::ColMajor, h.n0, bn),
    ] {
        // K-major: one box {K, rows}; MN-major: boxes {64 rows, K}, 64 lines (8 KB) apart
        // (gated: the gate's 64 columns, then B's same 64).
        let boxes: Vec<(Reg, Reg, Reg, u32)> = match map_gate {
            Some(mg) if is_b => vec![(mg, row0, kc, 0), (map, row0, kc, 64 * LINE)],
            _ if k_major => vec![(map, kc, row0, 0)],
            _ => (0..tile_rows / 64)
                .map(|j| {
                    let r = k.bin("add.u32", RegKind::B32, row0, 64 * j);
                    (map, r, kc, j * 64 * LINE)
                })
                .collect(),
        };
        for (map, c0, c1, off) in boxes {
            let d = if off == 0 { dst } else { k.bin("add.u32", RegKind::B32, dst, off) };
            k.op(
                "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
                [addr(d, 0), Opnd::S(format!("[{map}, {{{c0}, {c1}}}]")), addr(full, 0)],
            );
        }
    }
    advance(&mut k, pc);
    k.op("add.u32", [kt.into(), kt.into(), 1u32.into()]);
    let more = k.setp("lt.u32", kt, ktiles);
    k.bra_if(more, false, &fill);
    k.bra(&exit);

    k.place(&math);
    k.comment("consumers: wait for a stage, multiply it, give back the one before");
    let wg = k.bin("shr.u32", RegKind::B32, h.tid, 7u32);
    let a_wg = k.tri("mad.lo.u32", RegKind::B32, wg, 64 * LINE, ring);
    let (acc, products) = gemm_wgmma::Products::new(&mut k, spec);
    let lane0 = k.setp("eq.u32", lane, 0u32);
    let cc = cursor(&mut k);
    let prev = k.imm_u32(0);
    let kt = k.reg(RegKind::B32);
    let probe = spec.trace.then(|| Probe::start(&mut k, spec));
    k.op("mov.u32", [kt.into(), 0u32.into()]);
    let top = k.label("kstep");
    k.place(&top);
    let full = full_bar(&mut k, cc.0);
    wait(&mut k, full, cc.2);
    if let Some(p) = &probe {
        let first = k.setp("eq.u32", kt, 0u32);
        k.op_if(first, false, "mov.u64", [p.stamps[1].into(), Opnd::S("%globaltimer".into())]);
    }
    k.op("wgmma.fence.sync.aligned", []);
    products.issue(&mut k, &acc, a_wg, ring, cc.1);
    k.op("wgmma.commit_group.sync.aligned", []);
    k.op("wgmma.wait_group.sync.aligned", [1u32.into()]);
    // The products of the step before are done: its stage goes back to the producer.
    let started = k.setp("ne.u32", kt, 0u32);
    let release = k.bin("and.pred", RegKind::Pred, started, lane0);
    let back = empty_bar(&mut k, prev);
    arrive(&mut k, release, back);
    k.op("mov.u32", [prev.into(), cc.0.into()]);
    advance(&mut k, cc);
    k.op("add.u32", [kt.into(), kt.into(), 1u32.into()]);
    let more = k.setp("lt.u32", kt, ktiles);
    k.bra_if(more, false, &top);
    k.op("wgmma.wait_group.sync.aligned", [0u32.into()]);
    if let Some(p) = &probe {
        k.op("mov.u64", [p.stamps[2].into(), Opnd::S("%globaltimer".into())]);
    }
    // Warp w of warpgroup wg holds rows wg·64 + 16·w of the tile, every column.
    let wrow = k.bin("mul.lo.u32", RegKind::B32, warp, 16u32);
    let frags = acc.chunks(4).map(|c| c.to_vec()).collect::<Vec<_>>();
    if spec.gated {
        // The gate (the first 64 columns) stored at R as computed, then the multiply on it.
        let (gate, up) = frags.split_at(frags.len() / 2);
        let (gate, up) = ([gate.to_vec()], [up.to_vec()]);
        let wcol = k.imm_u32(0);
        let store =
            GemmSpec { epilogue: crate::kernels::gemm::Epilogue::Store, activation: None, gated: false, ..*spec };
        store_tile(&mut k, &store, &gate, lane, wrow, wcol, &Head { c_base: h.r_base, u_base: None, ..h });
        store_tile_with(&mut k, spec, &up, Some(&gate), lane, wrow, wcol, &h);
    } else if let Some(hs) = spec.heads.filter(|hs| hs.delta) {
        store_heads_delta(&mut k, spec, hs, &frags, lane, wrow, ring, &h, consumers);
    } else if let Some(work) = staged(spec) {
        store_staged(&mut k, spec, work, &frags, lane, wrow, ring, &h, consumers);
    } else {
        let wcol = k.imm_u32(0);
        store_tile(&mut k, spec, &[frags], lane, wrow, wcol, &h);
    }
    if let Some(p) = &probe {
        p.finish(&mut k, &h);
    }
    k.place(&exit);
    k.ret();
    k
}

/// A traced tile's stamps ([`GemmSpec::trace`]): the global timer as the consumers start the
/// tile, see its first stage, finish its products and finish its epilogue.
struct Probe {
    stamps: [Reg; 4],
    smid: Reg,
    tile: Reg,
}

impl Probe {
    fn start(k: &mut Kernel, spec: &GemmSpec) -> Probe {
        assert!(
            spec.epilogue == crate::kernels::gemm::Epilogue::Store
                && spec.chain.is_none()
                && spec.heads.is_none()
                && spec.activation.is_none()
                && !spec.gated
                && !spec.k_pair,
            "{}: a traced product is a plain store (its stamps go where a residual would be read)",
            spec.name()
        );
        let stamps = [0; 4].map(|_| k.reg(RegKind::B64));
        k.op("mov.u64", [stamps[0].into(), Opnd::S("%globaltimer".into())]);
        let smid = k.sreg("%smid");
        let tile = block_tile(k);
        Probe { stamps, smid, tile }
    }

    /// Thread 0 writes the tile's row: SM, the four stamps, the tile's index.
    fn finish(&self, k: &mut Kernel, h: &Head) {
        k.op("mov.u64", [self.stamps[3].into(), Opnd::S("%globaltimer".into())]);
        let skip = k.label("untraced");
        let not_first = k.setp("ne.u32", h.tid, 0u32);
        k.bra_if(not_first, false, &skip);
        let row = k.un("cvt.u64.u32", RegKind::B64, self.tile);
        let off = k.bin("mul.lo.u64", RegKind::B64, row, (crate::kernels::gemm::TRACE_WORDS * 8) as i64);
        let at = k.bin("add.s64", RegKind::B64, h.r_param, off);
        let sm = k.un("cvt.u64.u32", RegKind::B64, self.smid);
        let tile = k.un("cvt.u64.u32", RegKind::B64, self.tile);
        k.op("st.global.v2.u64", [addr(at, 0), Opnd::V(vec![sm, self.stamps[0]])]);
        k.op("st.global.v2.u64", [addr(at, 16), Opnd::V(vec![self.stamps[1], self.stamps[2]])]);
        k.op("st.global.v2.u64", [addr(at, 32), Opnd::V(vec![self.stamps[3], tile])]);
        k.place(&skip);
    }
}

/// The block's tile in launch order, `ctaid.y · nctaid.x + ctaid.x` (a block a tile).
fn block_tile(k: &mut Kernel) -> Reg {
    let (bx, by, gx) = (k.sreg("%ctaid.x"), k.sreg("%ctaid.y"), k.sreg("%nctaid.x"));
    k.tri("mad.lo.u32", RegKind::B32, by, gx, bx)
}

/// f32 elements between rows of a tile put in shared memory ([`fragments_to_shared`]): 128
/// columns and 8 of padding, so the eight rows a warp's fragment store touches start 8 banks
/// apart (two wavefronts a 256-byte store, the least).
const PART_PITCH: u32 = 136;

/// Puts the warp's `m16n8` accumulator fragments (`frags`, every column; `wrow` the warp's
/// first row in the tile) at their places in the tile at shared address `tile`, rows
/// [`PART_PITCH`] f32 apart: lane 4g + t holds row g (and g + 8) at columns 2t, 2t + 1 of each
/// 8-column group.
fn fragments_to_shared(k: &mut Kernel, frags: &[Vec<Reg>], lane: Reg, wrow: Reg, tile: Reg) {
    let row_bytes = PART_PITCH * 4;
    let g = k.bin("shr.u32", RegKind::B32, lane, 2u32);
    let tq = k.bin("and.b32", RegKind::B32, lane, 3u32);
    let row = k.bin("add.u32", RegKind::B32, wrow, g);
    let at = k.tri("mad.lo.u32", RegKind::B32, row, row_bytes, tile);
    let at = k.tri("mad.lo.u32", RegKind::B32, tq, 8u32, at);
    for (j, f) in frags.iter().enumerate() {
        let col = 32 * j as i64;
        k.op("st.shared.v2.f32", [addr(at, col), Opnd::V(vec![f[0], f[1]])]);
        k.op("st.shared.v2.f32", [addr(at, col + 8 * row_bytes as i64), Opnd::V(vec![f[2], f[3]])]);
    }
}

/// A 128-row tile walked a row a warp: warp w takes the tile's rows w, w + warps, …, and lane l
/// its columns 4l … 4l + 3, so each warp's loads and stores are whole 512-byte rows. The
/// epilogues through shared memory walk the tile this way.
struct RowWalk {
    warps: u32,
    warp: Reg,
    /// The lane's first column of C, and whether its four columns lie inside C.
    col: Reg,
    col_ok: Reg,
}

/// One row of a [`RowWalk`]: the warp's `it`-th, row `r` of C, and whether it and the lane's
/// columns lie inside C.
#[derive(Clone, Copy)]
struct WalkRow {
    it: u32,
    r: Reg,
    ok: Reg,
}

impl RowWalk {
    fn new(k: &mut Kernel, h: &Head, lane: Reg, consumers: u32) -> RowWalk {
        let warp = k.bin("shr.u32", RegKind::B32, h.tid, 5u32);
        let col = k.tri("mad.lo.u32", RegKind::B32, lane, 4u32, h.n0);
        let col_ok = k.setp("lt.u32", col, h.n);
        RowWalk { warps: consumers / 32, warp, col, col_ok }
    }

    /// The shared address of the lane's four columns in the warp's first row of a tile staged
    /// at `tile` by [`stage_tile`].
    fn staged_row0(&self, k: &mut Kernel, lane: Reg, tile: Reg) -> Reg {
        let s_lane = k.tri("mad.lo.u32", RegKind::B32, lane, 16u32, tile);
        k.tri("mad.lo.u32", RegKind::B32, self.warp, PART_PITCH * 4, s_lane)
    }

    /// The lane's four product values of row `w` of a staged tile ([`Self::staged_row0`]).
    fn staged_row(&self, k: &mut Kernel, s_row0: Reg, w: WalkRow) -> Vec<Reg> {
        let v = k.regs(RegKind::F32, 4);
        let at = (w.it * self.warps * PART_PITCH * 4) as i64;
        k.op("ld.shared.v4.f32", [Opnd::V(v.clone()), addr(s_row0, at)]);
        v
    }

    /// Walks the warp's rows `batch` at a time: `load` on every row of a batch (its loads then
    /// all in flight), then `finish` on each with what its `load` gave.
    fn each<L>(
        &self,
        k: &mut Kernel,
        h: &Head,
        batch: u32,
        mut load: impl FnMut(&mut Kernel, WalkRow) -> L,
        mut finish: impl FnMut(&mut Kernel, WalkRow, L),
    ) {
        let row0 = k.bin("add.u32", RegKind::B32, h.m0, self.warp);
        let rows = 128 / self.warps;
        for first in (0..rows).step_by(batch as usize) {
            let loaded: Vec<(WalkRow, L)> = (first..(first + batch).min(rows))
                .map(|it| {
                    let r = k.bin("add.u32", RegKind::B32, row0, it * self.warps);
                    let in_m = k.setp("lt.u32", r, h.m);
                    let w = WalkRow { it, r, ok: k.bin("and.pred", RegKind::Pred, in_m, self.col_ok) };
                    (w, load(k, w))
                })
                .collect();
            for (w, l) in loaded {
                finish(k, w, l);
            }
        }
    }
}

/// Puts the product tile in the ring for a [`RowWalk`], rows [`PART_PITCH`] apart, once every
/// consumer's last products have read the ring; then the consumers meet.
fn stage_tile(k: &mut Kernel, frags: &[Vec<Reg>], lane: Reg, wrow: Reg, tile: Reg, consumers: u32) {
    k.op("bar.sync", [1u32.into(), consumers.into()]);
    fragments_to_shared(k, frags, lane, wrow, tile);
    k.op("bar.sync", [1u32.into(), consumers.into()]);
}

/// What an epilogue run through shared memory (`store_staged`) does with each element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Staged {
    /// The spec's chain ([`crate::kernels::gemm::ChainEpilogue`]): its other inputs read, its outputs
    /// stored.
    Chain,
    /// The product plus R ([`crate::kernels::gemm::Epilogue::AddResidual`]) or, `accumulate`, plus C's
    /// old value ([`crate::kernels::gemm::Epilogue::Accumulate`]), stored at C.
    Add { accumulate: bool },
    /// The product stored at C.
    Store,
}

/// Whether `spec`'s ring holds its f32 product tile at `PART_PITCH` (what the epilogues
/// through shared memory need): 128 × 128 tiles.
pub fn ring_holds_tile(spec: &GemmSpec) -> bool {
    spec.tile == crate::kernels::gemm::Tile::T128x128
        && gemm_wgmma::stages(spec) * stage_bytes(spec) >= spec.tile.rows() * PART_PITCH * 4
}

/// Whether `spec`'s epilogue works in the ring (a staged epilogue, the delta-heads store).
pub fn epilogue_in_ring(spec: &GemmSpec) -> bool {
    staged(spec).is_some() || spec.heads.is_some_and(|hs| hs.delta)
}

/// Four f32 values stored as bf16 (two pairs, 8 bytes) at element `e` of the bf16 tensor at
/// `base`, where `ok` holds.
fn store_bf16x4_if(k: &mut Kernel, ok: Reg, base: Reg, e: Reg, vals: &[Reg]) {
    let p = k.addr_of(base, e, 2);
    let pairs = crate::kernels::gemm::bf16_pairs(k, vals);
    k.op_if(ok, false, "st.global.v2.b32", [addr(p, 0), Opnd::V(pairs)]);
}

/// The epilogue of a delta-heads product ([`crate::kernels::gemm::Heads::delta`]): the output gradient of
/// attention dO (the product) goes to the ring, and then, a row a warp, lane l takes columns
/// 4l … 4l + 3 — sixteen lanes a head of 64, as attention's delta kernel lays a row out — reads
/// O's four values at the same place, and forms `dO·O` as that kernel does (a multiply, three
/// fused multiply-adds, then a butterfly over the sixteen lanes); the head's first lane stores
/// delta, and every lane its four dO values rounded to bf16. C is the bf16 dO `[B, H, T, 64]`,
/// R the f32 O in the same layout, U delta `[B·H·T]`. Why: sixteen contexts stored dO as f32
/// (34 MB) for a launch of its own that read it back with O to write the same two things.
#[allow(clippy::too_many_arguments)]
pub(crate) fn store_heads_delta(
    k: &mut Kernel,
    spec: &GemmSpec,
    hs: crate::kernels::gemm::Heads,
    frags: &[Vec<Reg>],
    lane: Reg,
    wrow: Reg,
    tile: Reg,
    h: &Head,
    consumers: u32,
) {
    assert!(
        hs.d == 64
            && !hs.bf16_turned
            && !hs.bf16
            && !hs.bias
            && ring_holds_tile(spec)
            && spec.epilogue == crate::kernels::gemm::Epilogue::Store
            && spec.activation.is_none()
            && spec.chain.is_none()
            && !spec.gated,
        "{}: a delta-heads store is a plain store of heads of 64 in 128 × 128 tiles",
        spec.name()
    );
    k.comment("epilogue: dO to shared memory, then a row a warp: dO as bf16 heads and delta = dO . O");
    let u_base = h.u_base.expect("a delta-heads store's delta pointer");
    stage_tile(k, frags, lane, wrow, tile, consumers);
    let walk = RowWalk::new(k, h, lane, consumers);
    // Lane l: columns 4l …, of head (n0 + 4l) / 64 at d = 4·(l mod 16) (tiles start on a head).
    let head = k.bin("shr.u32", RegKind::B32, walk.col, 6u32);
    let d = k.bin("and.b32", RegKind::B32, walk.col, 63u32);
    let first_lane = k.setp("eq.u32", d, 0u32);
    let s_row0 = walk.staged_row0(k, lane, tile);
    walk.each(
        k,
        h,
        STAGED_BATCH,
        |k, w| {
            // The row's delta index (b·H + head)·T + t, its element in the heads, O's four values.
            let b = k.bin("div.u32", RegKind::B32, w.r, hs.t);
            let t = k.bin("rem.u32", RegKind::B32, w.r, hs.t);
            let plane = k.tri("mad.lo.u32", RegKind::B32, b, hs.heads, head);
            let row = k.tri("mad.lo.u32", RegKind::B32, plane, hs.t, t);
            let e = k.tri("mad.lo.u32", RegKind::B32, row, 64u32, d);
            let p = k.addr_of(h.r_base, e, 4);
            (row, e, k.load_f32s_if(w.ok, "ld.global.v4.f32", 4, addr(p, 0)))
        },
        |k, w, (row, e, o)| {
            let dout = walk.staged_row(k, s_row0, w);
            let mut s = k.bin("mul.rn.f32", RegKind::F32, dout[0], o[0]);
            for c in 1..4 {
                s = k.tri("fma.rn.f32", RegKind::F32, dout[c], o[c], s);
            }
            for mask in [1u32, 2, 4, 8] {
                let other = k.reg(RegKind::F32);
                k.op("shfl.sync.bfly.b32", [other.into(), s.into(), mask.into(), 0x1fu32.into(), Opnd::S("-1".into())]);
                s = k.bin("add.rn.f32", RegKind::F32, s, other);
            }
            let writer = k.bin("and.pred", RegKind::Pred, w.ok, first_lane);
            let pd = k.addr_of(u_base, row, 4);
            k.op_if(writer, false, "st.global.f32", [addr(pd, 0), s.into()]);
            store_bf16x4_if(k, w.ok, h.c_base, e, &dout);
        },
    );
}

/// The staged epilogue `spec` takes, if any: 128 × 128 tiles whose ring holds the padded f32
/// tile, a chain, a residual or accumulation, or a plain f32 store (no activation, heads,
/// multiply or gate), as far as [`crate::kernels::gemm::GemmTuning::staged_epilogues`] allows.
pub fn staged(spec: &GemmSpec) -> Option<Staged> {
    use crate::kernels::gemm::Epilogue;
    use crate::kernels::gemm::StagedEpilogues as Allow;
    let allow = spec.tuning.staged_epilogues;
    let fits = ring_holds_tile(spec) && spec.activation.is_none() && spec.heads.is_none() && !spec.gated;
    if !fits || allow == Allow::None {
        return None;
    }
    match (spec.chain, spec.epilogue) {
        (Some(_), _) => Some(Staged::Chain),
        (None, e @ (Epilogue::AddResidual | Epilogue::Accumulate)) if allow != Allow::Chains => {
            Some(Staged::Add { accumulate: e == Epilogue::Accumulate })
        }
        (None, Epilogue::Store) if allow == Allow::Tall && spec.staged_store => Some(Staged::Store),
        _ => None,
    }
}

/// Iterations of [`store_staged`] whose loads are issued together.
const STAGED_BATCH: u32 = 8;

/// An epilogue through shared memory ([`staged`]): the consumers put the product tile in the
/// ring (free once every consumer's last products are done, rows [`PART_PITCH`] apart), meet,
/// and then take it a row a warp at a time, four columns a lane — each warp's loads of the
/// epilogue's f32 inputs and its stores whole 512-byte rows — with the loads of
/// [`STAGED_BATCH`] rows issued before any is used. Why: run on the fragments, the epilogue
/// held the accumulators beside its loads and could keep only two 16-byte loads an input in
/// flight a thread; at sixteen contexts the gated GELU's backward (two f32 inputs, 184 MB)
/// then read at under 2 TB/s while the tensor cores waited (that product 165 → 115 µs).
/// Each element's arithmetic is the fragment epilogue's on the same values, so the bits are
/// the same. Needs n a multiple of 4 (each lane's four columns in or out together), as the
/// fragment epilogue's 16-byte units do.
#[allow(clippy::too_many_arguments)]
fn store_staged(
    k: &mut Kernel,
    spec: &GemmSpec,
    work: Staged,
    frags: &[Vec<Reg>],
    lane: Reg,
    wrow: Reg,
    tile: Reg,
    h: &Head,
    consumers: u32,
) {
    k.comment("epilogue: the product to shared memory, then a row a warp");
    let chain = || spec.chain.expect("a staged chain epilogue's chain");
    stage_tile(k, frags, lane, wrow, tile, consumers);
    // The f32 tensors read at each element, those stored (bf16 or not), and a chain's steps.
    // Each read is (base, a row read at the column alone); each write (base, stored as bf16).
    type Bases = Vec<(Reg, bool)>;
    let (reads, writes, steps): (Bases, Bases, _) = match work {
        Staged::Chain => {
            let c = chain();
            let ptr = |j: usize| h.chain[j].expect("a chain pointer per output and input");
            let outs = c.outputs();
            let writes = outs.iter().enumerate().map(|(j, &(_, bf16))| (ptr(j), bf16)).collect();
            let reads =
                c.others().iter().enumerate().map(|(j, &input)| (ptr(outs.len() + j), c.is_row(input))).collect();
            (reads, writes, c.steps())
        }
        Staged::Add { accumulate } => {
            (vec![(if accumulate { h.c_base } else { h.r_base }, false)], vec![(h.c_base, false)], vec![])
        }
        Staged::Store => (vec![], vec![(h.c_base, spec.store_bf16)], vec![]),
    };
    let walk = RowWalk::new(k, h, lane, consumers);
    let s_row0 = walk.staged_row0(k, lane, tile);
    // Whether the second half of the lane's columns lies inside C (a narrow store's).
    let in_n2 = spec.narrow_store.then(|| {
        let col2 = k.bin("add.u32", RegKind::B32, walk.col, 2u32);
        k.setp("lt.u32", col2, h.n)
    });
    // A narrow store's bias row: the lane's four columns, in two 8-byte halves each loaded
    // only inside C (param `bias`, last).
    let bias: Option<Vec<Reg>> = in_n2.filter(|_| spec.narrow_bias).map(|in_n2| {
        let pb = k.param_reg("bias", ParamTy::U64);
        let at = k.addr_of(pb, walk.col, 4);
        let lo = k.load_f32s_if(walk.col_ok, "ld.global.v2.f32", 2, addr(at, 0));
        let hi = k.load_f32s_if(in_n2, "ld.global.v2.f32", 2, addr(at, 8));
        lo.into_iter().chain(hi).collect()
    });
    // A chain's column sums: the lane's four columns, over the warp's rows in order.
    let column_sum = match work {
        Staged::Chain => chain().column_sum(),
        _ => None,
    };
    if column_sum.is_some() {
        let needed = 128 * PART_PITCH * 4 + consumers / 32 * 512;
        assert!(
            gemm_wgmma::stages(spec) * stage_bytes(spec) >= needed,
            "{}: the ring holds the staged tile and each warp's column sums",
            spec.name()
        );
    }
    let sums: Option<Vec<Reg>> = column_sum.map(|_| {
        let acc = k.regs(RegKind::F32, 4);
        for &r in &acc {
            k.op("mov.f32", [r.into(), 0.0f32.into()]);
        }
        acc
    });
    walk.each(
        k,
        h,
        STAGED_BATCH,
        |k, w| {
            // The element offset, and the other inputs' four values.
            let e = k.tri("mad.lo.u32", RegKind::B32, w.r, h.ldc, walk.col);
            let vals: Vec<Vec<Reg>> = reads
                .iter()
                .map(|&(base, row)| {
                    let p = k.addr_of(base, if row { walk.col } else { e }, 4);
                    k.load_f32s_if(w.ok, "ld.global.v4.f32", 4, addr(p, 0))
                })
                .collect();
            (e, vals)
        },
        |k, w, (e, vals_in)| {
            let product = walk.staged_row(k, s_row0, w);
            // Per output, its four values.
            let values: Vec<Vec<Reg>> = match work {
                Staged::Chain => {
                    let c = chain();
                    let results = crate::kernels::gemm::chain_results(k, &c, &steps, &product, &vals_in);
                    if let (Some(step), Some(acc)) = (column_sum, &sums) {
                        for (a, r) in acc.iter().zip(&results) {
                            k.op_if(w.ok, false, "add.rn.f32", [(*a).into(), (*a).into(), r[step].into()]);
                        }
                    }
                    c.outputs().iter().map(|&(step, _)| results.iter().map(|r| r[step]).collect()).collect()
                }
                // The fragment epilogue's addition: the product's value plus the old one.
                Staged::Add { .. } => vec![product
                    .iter()
                    .zip(&vals_in[0])
                    .map(|(&x, &o)| k.bin("add.rn.f32", RegKind::F32, x, o))
                    .collect()],
                Staged::Store => vec![match &bias {
                    Some(row) => {
                        product.iter().zip(row).map(|(&x, &b)| k.bin("add.rn.f32", RegKind::F32, x, b)).collect()
                    }
                    None => product.clone(),
                }],
            };
            for (&(base, bf16), vs) in writes.iter().zip(values) {
                if bf16 {
                    store_bf16x4_if(k, w.ok, base, e, &vs);
                } else if let Some(in_n2) = in_n2 {
                    // Two 8-byte halves (C's rows are 8-byte aligned): the second only where
                    // its columns lie inside C too.
                    let p = k.addr_of(base, e, 4);
                    k.op_if(w.ok, false, "st.global.v2.f32", [addr(p, 0), Opnd::V(vs[..2].to_vec())]);
                    let ok2 = k.bin("and.pred", RegKind::Pred, w.ok, in_n2);
                    k.op_if(ok2, false, "st.global.v2.f32", [addr(p, 8), Opnd::V(vs[2..].to_vec())]);
                } else {
                    let p = k.addr_of(base, e, 4);
                    k.op_if(w.ok, false, "st.global.v4.f32", [addr(p, 0), Opnd::V(vs)]);
                }
            }
        },
    );
    if let Some(acc) = sums {
        store_column_sums(k, h, &walk, lane, tile, consumers, &acc);
    }
}

/// The staged chain's column sums ([`crate::kernels::gemm::ChainEpilogue::column_sum`]): each
/// warp's four sums a lane (its rows, in order) go to shared memory after the staged tile; the
/// consumers meet; then thread t < 128 adds column t's warps in order and stores the tile's sum
/// at `chain_sums[col · row_tiles + tile_row]`, `row_tiles` = ⌈M / 128⌉. A fixed order
/// throughout, so runs repeat bit for bit.
fn store_column_sums(k: &mut Kernel, h: &Head, walk: &RowWalk, lane: Reg, tile: Reg, consumers: u32, acc: &[Reg]) {
    k.comment("epilogue: the tile's column sums, the warps' in order");
    let base = k.bin("add.u32", RegKind::B32, tile, 128 * PART_PITCH * 4);
    let mine = k.tri("mad.lo.u32", RegKind::B32, walk.warp, 512u32, base);
    let mine = k.tri("mad.lo.u32", RegKind::B32, lane, 16u32, mine);
    k.op("st.shared.v4.f32", [addr(mine, 0), Opnd::V(acc.to_vec())]);
    k.op("bar.sync", [1u32.into(), consumers.into()]);
    let col_in_tile = k.setp("lt.u32", h.tid, 128u32);
    let col = k.bin("add.u32", RegKind::B32, h.n0, h.tid);
    let in_n = k.setp("lt.u32", col, h.n);
    let writer = k.bin("and.pred", RegKind::Pred, col_in_tile, in_n);
    let done = k.label("column_sums_done");
    k.bra_if(writer, true, &done);
    let at = k.tri("mad.lo.u32", RegKind::B32, h.tid, 4u32, base);
    let total = k.reg(RegKind::F32);
    k.op("ld.shared.f32", [total.into(), addr(at, 0)]);
    for w in 1..walk.warps {
        let v = k.reg(RegKind::F32);
        k.op("ld.shared.f32", [v.into(), addr(at, (w * 512) as i64)]);
        k.op("add.rn.f32", [total.into(), total.into(), v.into()]);
    }
    let m_up = k.bin("add.u32", RegKind::B32, h.m, 127u32);
    let row_tiles = k.bin("shr.u32", RegKind::B32, m_up, 7u32);
    let tile_row = k.bin("shr.u32", RegKind::B32, h.m0, 7u32);
    let e = k.tri("mad.lo.u32", RegKind::B32, col, row_tiles, tile_row);
    let sums = h.chain_sums.expect("a column-summing chain's partials pointer");
    let p = k.addr_of(sums, e, 4);
    k.op("st.global.f32", [addr(p, 0), total.into()]);
    k.place(&done);
}

/// Encodes `map` over the operand at device address `base` (bf16, 128-byte swizzle, rows past
/// the edge read as zeros): the 128 bytes the kernel's tensor-map parameter points at.
pub fn encode(base: u64, map: &MapSpec) -> Result<[u8; 128]> {
    use cudarc::driver::sys;
    if !base.is_multiple_of(16) || !map.stride_bytes.is_multiple_of(16) {
        bail!(
            "tensor map over {base:#x}: the base and the line stride ({} B) must be 16-byte aligned",
            map.stride_bytes
        );
    }
    let dims = [map.inner, map.outer];
    let strides = [map.stride_bytes];
    let boxes = [map.box_inner, map.box_outer];
    let unit = [1u32, 1];
    // SAFETY: a zeroed tensor map is valid storage for the encoder to fill.
    let mut out: sys::CUtensorMap = unsafe { std::mem::zeroed() };
    // SAFETY: every array lives across the call and has the rank's length.
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut out,
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            2,
            base as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            unit.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    r.result().map_err(|e| anyhow::anyhow!("encoding the tensor map {map:?} over {base:#x}: {e}"))?;
    let mut bytes = [0u8; 128];
    for (i, w) in out.opaque.iter().enumerate() {
        bytes[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
    }
    Ok(bytes)
}
