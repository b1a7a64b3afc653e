//! The Hopper GEMM engine fed by the tensor memory accelerator (TMA), warp-specialized.
//!
//! Why: the `cp.async` ring of [`crate::gemm_wgmma`] makes every thread issue eight 16-byte
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
//! Two variants change the block's ends, not its main loop. A gated block
//! ([`GemmSpec::gated`]) takes its B tile's two 64-column halves from two maps — a gated
//! unit's gate weight and its up weight — so one launch computes both products for 64 output
//! columns and multiplies them on registers. A cluster-summed split-K part
//! ([`GemmSpec::cluster_splits`]) leaves its partial tile in its ring and the cluster's blocks
//! sum their band of rows over every part through distributed shared memory.
//!
//! A persistent block ([`GemmSpec::persistent`], off by default: measured slower) wraps both
//! paths in a walk over tiles; the ring's cursors run on across tiles, and the consumers give
//! a tile's last stage back before its epilogue (after it, and through one more barrier the
//! producer waits on, where the epilogue works in the ring).
//!
//! A block of two math groups ([`GemmSpec::pingpong`], opt-in: measured no faster in the step)
//! is a persistent block whose two groups of consumer warpgroups take turns at the products,
//! tile by tile, through two turn barriers: one producer fills one ring of both groups' stages
//! in the order the groups use them, so the group at its turn has six stages ahead, and the
//! other group's epilogue runs meanwhile. Epilogues that work in the ring are excluded.
//!
//! Shape contract: as the `wgmma` engine's, bf16 operands only, and batch entries are the
//! K-slices of one product (split-K, [`GemmShape::split`]): entry z starts at K = z·k.

use anyhow::{bail, Result};

use crate::gemm::{head, store_tile, store_tile_with, GemmShape, GemmSpec, Head, Input, Layout};
use crate::gemm_wgmma::{self, BK};
use crate::ptx::{addr, Kernel, Opnd, ParamTy, Reg, RegKind};

/// Bytes of one swizzled line: 64 bf16.
const LINE: u32 = 128;

/// Threads per block: the consumer warpgroups and one producer warp.
pub fn threads(spec: &GemmSpec) -> u32 {
    groups(spec) * (consumer_threads(spec) + 32)
}

/// Math groups of a block: two taking turns ([`GemmSpec::pingpong`]), else one.
fn groups(spec: &GemmSpec) -> u32 {
    if spec.pingpong {
        2
    } else {
        1
    }
}

fn consumer_threads(spec: &GemmSpec) -> u32 {
    128 * spec.tile.rows() / 64
}

/// Bytes of one ring stage: A's tile then B's, each `rows × 64` bf16.
fn stage_bytes(spec: &GemmSpec) -> u32 {
    (spec.tile.rows() + spec.tile.cols()) * LINE
}

/// Dynamic shared memory: the ring plus slack to align it to 1,024 bytes (the swizzle is a
/// function of the address bits). A cluster-summed part's tile reuses the ring.
pub fn shared_bytes(spec: &GemmSpec) -> u32 {
    groups(spec) * gemm_wgmma::stages(spec) * stage_bytes(spec) + 1024
}

/// Split-K part counts a cluster can sum ([`GemmSpec::cluster_splits`]): powers of two up to
/// the portable cluster size of 8, so each block takes an equal band of the tile's 128 rows.
pub const CLUSTER_SPLITS: [u32; 3] = [2, 4, 8];

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
    // Two math groups share one ring of both groups' stages ([`GemmSpec::pingpong`]).
    let stages = groups(spec) * gemm_wgmma::stages(spec);
    let consumers = consumer_threads(spec);
    let consumer_warps = consumers / 32;
    let mut k = Kernel::new(&spec.name()).with_block(threads(spec), 1, 1);
    // The three-stage ring is chosen so that two blocks share an SM, each hiding the other's
    // epilogue ([`gemm_wgmma::stages_for`]): ptxas is held to two blocks' registers (96 for
    // nine warps), or an epilogue that reads a second tensor (144 registers) or turns heads
    // (106) leaves one. Measured on the H200 (g50): sixteen contexts' step 26.06 → 25.78 ms.
    if spec.pingpong {
        // Two groups of nine warps, one block an SM: the same registers a thread.
        assert!(
            spec.persistent && gemm_wgmma::stages(spec) == 3 && !epilogue_in_ring(spec),
            "{}: two math groups walk tiles on a six-stage ring, their epilogues out of it",
            spec.name()
        );
        k.min_blocks_per_sm = Some(1);
    } else if stages == 3 && spec.tuning.two_blocks {
        k.min_blocks_per_sm = Some(2);
    }
    let splits = spec.cluster_splits;
    if splits > 1 {
        assert!(
            CLUSTER_SPLITS.contains(&splits)
                && spec.tile == crate::gemm::Tile::T128x128
                && stages * stage_bytes(spec) >= bm * PART_PITCH * 4,
            "{}: a cluster sums 2, 4 or 8 parts of 128 × 128 tiles, each part held in the ring",
            spec.name()
        );
        assert!(
            spec.activation.is_none() && spec.heads.is_none() && spec.chain.is_none(),
            "{}: a cluster-summed product stores, adds or accumulates only",
            spec.name()
        );
        k.cluster = Some((1, 1, splits));
    }
    let mut h = head(&mut k, spec);
    let tid_in_block = h.tid;
    // Two math groups: both groups' consumers first (warpgroups must start at a warp rank
    // that is a multiple of four), then group 0's producer warp and group 1's. Everything
    // below works on the thread's index within its group (consumers, then the producer).
    let group = spec.pingpong.then(|| {
        let producers = k.setp("ge.u32", h.tid, 2 * consumers);
        let g_consumer = k.bin("div.u32", RegKind::B32, h.tid, consumers);
        let past = k.bin("sub.u32", RegKind::B32, h.tid, 2 * consumers);
        let g_producer = k.bin("shr.u32", RegKind::B32, past, 5u32);
        let g = k.reg(RegKind::B32);
        k.op("selp.u32", [g.into(), g_producer.into(), g_consumer.into(), producers.into()]);
        let consumer_local = k.bin("rem.u32", RegKind::B32, h.tid, consumers);
        let lane = k.bin("and.b32", RegKind::B32, past, 31u32);
        let producer_local = k.bin("add.u32", RegKind::B32, lane, consumers);
        let local = k.reg(RegKind::B32);
        k.op("selp.u32", [local.into(), producer_local.into(), consumer_local.into(), producers.into()]);
        h.tid = local;
        g
    });
    let map_a = k.param_reg("tmap_a", ParamTy::U64);
    let map_b = k.param_reg("tmap_b", ParamTy::U64);
    // A gated block: the gate's B (this map) fills the tile's first 64 columns, B the rest,
    // both for output columns n0 … n0 + 63.
    let map_gate = spec.gated.then(|| {
        assert!(
            spec.b == Layout::RowMajor
                && spec.tile == crate::gemm::Tile::T128x128
                && spec.epilogue == crate::gemm::Epilogue::StoreMul
                && spec.heads.is_none()
                && spec.chain.is_none()
                && spec.cluster_splits == 0,
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
            spec.a == Layout::RowMajor
                && spec.b == Layout::ColMajor
                && !spec.gated
                && !spec.uneven_split
                && spec.cluster_splits == 0,
            "{}: a paired product reads two K-major operands, unsplit",
            spec.name()
        );
        (k.param_reg("tmap_a1", ParamTy::U64), k.param_reg("tmap_b1", ParamTy::U64))
    });
    // A last-part-sums split: the product's own output and the tiles' counters.
    let fixup = (spec.fixup_splits > 1).then(|| {
        use crate::gemm::Epilogue;
        assert!(
            spec.tile == crate::gemm::Tile::T128x128
                && spec.activation.is_none()
                && spec.heads.is_none()
                && spec.chain.is_none()
                && !spec.gated
                && !spec.k_pair
                && spec.cluster_splits == 0
                && matches!(spec.epilogue, Epilogue::Store | Epilogue::Accumulate | Epilogue::AddResidual),
            "{}: the last part sums 128 × 128 tiles that store, add or accumulate",
            spec.name()
        );
        (k.param_reg("out", ParamTy::U64), k.param_reg("counters", ParamTy::U64))
    });
    let smem = k.dynamic_shared_array("gemm_ring", shared_bytes(spec), 1024);
    // Per stage: the full barrier at 8·s, the empty one at 8·(stages + s).
    // A persistent block's tiles ([`GemmSpec::persistent`]): an epilogue that works in the
    // ring lets the producer refill it through one more barrier (one arrival per consumer warp,
    // after the epilogue), at 16·stages.
    let ring_epilogue = epilogue_in_ring(spec);
    let persistent = spec.persistent;
    assert!(
        !persistent || (splits <= 1 && fixup.is_none()),
        "{}: a persistent block walks whole tiles of one part, no cluster or last-part sums",
        spec.name()
    );
    let epi_wait = persistent && ring_epilogue;
    // Two math groups' turn barriers (one arrival per consumer warp of the other group), group
    // g's at 16·stages + 8·g.
    let turn_off = 16 * stages + if epi_wait { 8 } else { 0 };
    let bars_sym = k.shared("gemm_bars", turn_off + if spec.pingpong { 16 } else { 0 }, 8);
    let stage = stage_bytes(spec);
    let b_off = bm * LINE;

    let ring = gemm_wgmma::ring_base(&mut k, smem);
    let bars = k.un("mov.u32", RegKind::B32, Opnd::S(bars_sym));
    // A group's own turn barrier and the other group's.
    let turn_bars = group.map(|g| {
        let own = k.tri("mad.lo.u32", RegKind::B32, g, 8u32, bars);
        let other = k.bin("xor.b32", RegKind::B32, g, 1u32);
        let theirs = k.tri("mad.lo.u32", RegKind::B32, other, 8u32, bars);
        (k.bin("add.u32", RegKind::B32, own, turn_off), k.bin("add.u32", RegKind::B32, theirs, turn_off))
    });
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
    // (Group 0's first thread where a block has two math groups.)
    let not_first = k.setp("ne.u32", tid_in_block, 0u32);
    let inited = k.label("inited");
    k.bra_if(not_first, false, &inited);
    for s in 0..stages {
        k.op("mbarrier.init.shared::cta.b64", [addr(bars, 8 * s as i64), 1u32.into()]);
        k.op("mbarrier.init.shared::cta.b64", [addr(bars, 8 * (stages + s) as i64), consumer_warps.into()]);
    }
    if epi_wait {
        k.op("mbarrier.init.shared::cta.b64", [addr(bars, 16 * stages as i64), consumer_warps.into()]);
    }
    if group.is_some() {
        for g in 0..2 {
            k.op("mbarrier.init.shared::cta.b64", [addr(bars, (turn_off + 8 * g) as i64), consumer_warps.into()]);
        }
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
    // Moves a cursor on by `n` stages (two math groups: past the other group's tile).
    let skip_stages = |k: &mut Kernel, (idx, off, parity): (Reg, Reg, Reg), n: Reg| {
        let total = k.bin("add.u32", RegKind::B32, idx, n);
        let wraps = k.bin("div.u32", RegKind::B32, total, stages);
        k.op("rem.u32", [idx.into(), total.into(), stages.into()]);
        k.op("mul.lo.u32", [off.into(), idx.into(), stage.into()]);
        let flip = k.bin("and.b32", RegKind::B32, wraps, 1u32);
        k.op("xor.b32", [parity.into(), parity.into(), flip.into()]);
    };
    let full_bar = |k: &mut Kernel, idx: Reg| k.tri("mad.lo.u32", RegKind::B32, idx, 8u32, bars);
    let empty_bar = |k: &mut Kernel, idx: Reg| {
        let b = k.tri("mad.lo.u32", RegKind::B32, idx, 8u32, bars);
        k.bin("add.u32", RegKind::B32, b, 8 * stages)
    };
    // A persistent block's epilogue-done barrier (`epi_wait`).
    let epi_bar = |k: &mut Kernel| k.bin("add.u32", RegKind::B32, bars, 16 * stages);
    // One arrival at `bar` from each thread where `who` holds (a consumer warp's lane 0).
    let arrive = |k: &mut Kernel, who: Reg, bar: Reg| {
        let token = k.reg(RegKind::B64);
        k.op_if(who, false, "mbarrier.arrive.shared::cta.b64", [token.into(), addr(bar, 0)]);
    };

    // A persistent block takes tiles ctaid.x, + nctaid.x, … of the grid's tiles in order
    // (columns fastest, as the blocks of a plain launch are numbered), each path with its own
    // counter; `h.m0` and `h.n0` are set for each.
    let cols = if spec.gated { bn / 2 } else { bn };
    let tiles = persistent.then(|| {
        let tx = k.bin("add.u32", RegKind::B32, h.n, cols - 1);
        let tiles_x = k.bin("div.u32", RegKind::B32, tx, cols);
        let ty = k.bin("add.u32", RegKind::B32, h.m, bm - 1);
        let tiles_y = k.bin("div.u32", RegKind::B32, ty, bm);
        let total = k.bin("mul.lo.u32", RegKind::B32, tiles_x, tiles_y);
        (tiles_x, total)
    });
    // Opens a path's tile loop: the counter, the loop's top (leaving for `exit` past the last
    // tile) and the tile's origin. Returns (counter, top label). Two math groups: group g
    // takes tiles 2·ctaid.x + g, then on by twice the blocks; the one producer both groups'
    // tiles in turn (`both`).
    let open_tiles = |k: &mut Kernel, h: &Head, exit: &str, both: bool| -> Option<(Reg, String)> {
        let (tiles_x, total) = tiles?;
        let tile = k.sreg("%ctaid.x");
        let tile = match group {
            Some(_) if both => k.bin("shl.b32", RegKind::B32, tile, 1u32),
            Some(g) => k.tri("mad.lo.u32", RegKind::B32, tile, 2u32, g),
            None => k.un("mov.u32", RegKind::B32, tile),
        };
        let top = k.label("tile");
        k.place(&top);
        let past = k.setp("ge.u32", tile, total);
        k.bra_if(past, false, exit);
        let tx = k.bin("rem.u32", RegKind::B32, tile, tiles_x);
        let ty = k.bin("div.u32", RegKind::B32, tile, tiles_x);
        k.op("mul.lo.u32", [h.n0.into(), tx.into(), cols.into()]);
        k.op("mul.lo.u32", [h.m0.into(), ty.into(), bm.into()]);
        Some((tile, top))
    };
    let next_tile = |k: &mut Kernel, (tile, top): &(Reg, String), both: bool| {
        let step = k.sreg("%nctaid.x");
        let step = if group.is_some() { k.bin("shl.b32", RegKind::B32, step, 1u32) } else { step };
        if both {
            // Group 0's tile (even), then group 1's (odd, + 1), then group 0's next.
            let odd = k.bin("and.b32", RegKind::B32, *tile, 1u32);
            let to_next = k.bin("sub.u32", RegKind::B32, step, 1u32);
            let even = k.setp("eq.u32", odd, 0u32);
            let by = k.reg(RegKind::B32);
            k.op("selp.u32", [by.into(), 1u32.into(), to_next.into(), even.into()]);
            k.op("add.u32", [(*tile).into(), (*tile).into(), by.into()]);
        } else {
            k.op("add.u32", [(*tile).into(), (*tile).into(), step.into()]);
        }
        k.bra(top);
    };

    let consumer = k.setp("lt.u32", warp, consumer_warps);
    let math = k.label("consumer");
    k.bra_if(consumer, false, &math);

    k.comment("producer: lane 0 of the last warp fills the ring");
    let exit = k.label("exit");
    let idle = k.setp("ne.u32", lane, 0u32);
    k.bra_if(idle, false, &exit);
    if let Some(g) = group {
        // Group 0's producer fills the one ring for both groups.
        let second = k.setp("ne.u32", g, 0u32);
        k.bra_if(second, false, &exit);
    }
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
    let done_tiles = persistent.then(|| k.imm_u32(0));
    // (A persistent block's tile loop starts here: the K step counts from 0 each tile.)
    let walk = open_tiles(&mut k, &h, &exit, group.is_some());
    k.op("mov.u32", [kt.into(), 0u32.into()]);
    if let (true, Some(done_tiles)) = (epi_wait, done_tiles) {
        // After the first tile: the ring is free once the last tile's epilogue is done.
        let later = k.setp("ne.u32", done_tiles, 0u32);
        let go = k.label("ring_free");
        k.bra_if(later, true, &go);
        let before = k.bin("sub.u32", RegKind::B32, done_tiles, 1u32);
        let parity = k.bin("and.b32", RegKind::B32, before, 1u32);
        let epi = epi_bar(&mut k);
        wait(&mut k, epi, parity);
        k.place(&go);
    }
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
    if let (Some(w), Some(done_tiles)) = (&walk, done_tiles) {
        k.op("add.u32", [done_tiles.into(), done_tiles.into(), 1u32.into()]);
        next_tile(&mut k, w, group.is_some());
    }
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
    // A math group's tiles so far (its turn's phase).
    let turn_count = group.map(|_| k.imm_u32(0));
    if let Some(g) = group {
        // Group 1's first stages come after group 0's first tile's.
        let skip = k.bin("mul.lo.u32", RegKind::B32, g, ktiles);
        skip_stages(&mut k, cc, skip);
    }
    let walk = open_tiles(&mut k, &h, &exit, false);
    let probe = spec.trace.then(|| Probe::start(&mut k, spec, walk.as_ref().map(|w| w.0)));
    // Two groups take turns at the products: group 0's j-th tile after group 1's (j − 1)-th,
    // group 1's j-th after group 0's j-th: the turn barrier's phase j − 1 or j, so parity
    // (j mod 2) xor (1 − g) (the phase before a barrier's first counts as complete).
    let turns = group.zip(turn_count).zip(turn_bars).map(|((g, j), (own_turn, _))| {
        let first_other = k.bin("xor.b32", RegKind::B32, g, 1u32);
        let odd = k.bin("and.b32", RegKind::B32, j, 1u32);
        let parity = k.bin("xor.b32", RegKind::B32, odd, first_other);
        wait(&mut k, own_turn, parity);
        j
    });
    k.op("mov.u32", [kt.into(), 0u32.into()]);
    if walk.is_some() {
        // Each tile's products start from zero (`Products::new` zeroed them for the first).
        for &r in &acc {
            k.op("mov.f32", [r.into(), 0.0f32.into()]);
        }
    }
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
    if let (Some(j), Some((_, theirs))) = (turns, turn_bars) {
        // Every product of the tile is issued: the other group's turn; its tile's stages
        // come next in the ring.
        arrive(&mut k, lane0, theirs);
        k.op("add.u32", [j.into(), j.into(), 1u32.into()]);
        skip_stages(&mut k, cc, ktiles);
    }
    k.op("wgmma.wait_group.sync.aligned", [0u32.into()]);
    if let Some(p) = &probe {
        k.op("mov.u64", [p.stamps[2].into(), Opnd::S("%globaltimer".into())]);
    }
    if spec.tuning.epilogue_trigger && !persistent {
        // The next kernel may launch once every block is at its epilogue (it still waits for
        // this one's memory in its `griddepcontrol.wait`).
        k.op("griddepcontrol.launch_dependents", []);
    }

    // A persistent block gives the tile's last stage back now, or (an epilogue working in
    // the ring) after the epilogue.
    let give_back = |k: &mut Kernel| {
        let back = empty_bar(k, prev);
        arrive(k, lane0, back);
    };
    if persistent && !ring_epilogue {
        give_back(&mut k);
    }
    // Warp w of warpgroup wg holds rows wg·64 + 16·w of the tile, every column.
    let wrow = k.bin("mul.lo.u32", RegKind::B32, warp, 16u32);
    let frags = acc.chunks(4).map(|c| c.to_vec()).collect::<Vec<_>>();
    if splits > 1 {
        // The part goes into the ring, free once both warpgroups' last products are done.
        k.op("bar.sync", [1u32.into(), consumers.into()]);
        sum_in_cluster(&mut k, spec, &frags, lane, wrow, ring, &h);
    } else if let Some((out, counters)) = fixup {
        // The part to scratch as any split part stores it, then the tile's last part sums.
        let part = GemmSpec { epilogue: crate::gemm::Epilogue::Store, fixup_splits: 0, ..*spec };
        let wcol = k.imm_u32(0);
        store_tile(&mut k, &part, &[frags], lane, wrow, wcol, &h);
        sum_in_last_part(&mut k, spec, &h, [out, counters], consumers, &exit);
    } else if spec.gated {
        // The gate (the first 64 columns) stored at R as computed, then the multiply on it.
        let (gate, up) = frags.split_at(frags.len() / 2);
        let (gate, up) = ([gate.to_vec()], [up.to_vec()]);
        let wcol = k.imm_u32(0);
        let store = GemmSpec { epilogue: crate::gemm::Epilogue::Store, activation: None, gated: false, ..*spec };
        store_tile(&mut k, &store, &gate, lane, wrow, wcol, &Head { c_base: h.r_base, u_base: None, ..h });
        store_tile_with(&mut k, spec, &up, Some(&gate), lane, wrow, wcol, &h);
    } else if let Some(hs) = spec.heads.filter(|hs| hs.delta) {
        store_heads_delta(&mut k, spec, hs, &frags, lane, wrow, ring, &h, consumers);
    } else if let Some(work) = staged(spec) {
        assert!(!spec.row_stats || work == Staged::Store, "{}: row statistics need a staged plain store", spec.name());
        store_staged(&mut k, spec, work, &frags, lane, wrow, ring, &h, consumers);
    } else {
        assert!(!spec.row_stats, "{}: row statistics need a staged plain store", spec.name());
        let wcol = k.imm_u32(0);
        store_tile(&mut k, spec, &[frags], lane, wrow, wcol, &h);
    }
    if let Some(p) = &probe {
        p.finish(&mut k, &h);
    }
    if let Some(w) = &walk {
        if epi_wait {
            give_back(&mut k);
            let epi = epi_bar(&mut k);
            arrive(&mut k, lane0, epi);
        }
        next_tile(&mut k, w, false);
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
    fn start(k: &mut Kernel, spec: &GemmSpec, walk_tile: Option<Reg>) -> Probe {
        assert!(
            spec.epilogue == crate::gemm::Epilogue::Store
                && spec.chain.is_none()
                && spec.heads.is_none()
                && spec.activation.is_none()
                && !spec.gated
                && !spec.k_pair
                && spec.cluster_splits == 0
                && spec.fixup_splits <= 1,
            "{}: a traced product is a plain store (its stamps go where a residual would be read)",
            spec.name()
        );
        let stamps = [0; 4].map(|_| k.reg(RegKind::B64));
        k.op("mov.u64", [stamps[0].into(), Opnd::S("%globaltimer".into())]);
        let smid = k.sreg("%smid");
        let tile = walk_tile.unwrap_or_else(|| block_tile(k));
        Probe { stamps, smid, tile }
    }

    /// Thread 0 writes the tile's row: SM, the four stamps, the tile's index.
    fn finish(&self, k: &mut Kernel, h: &Head) {
        k.op("mov.u64", [self.stamps[3].into(), Opnd::S("%globaltimer".into())]);
        let skip = k.label("untraced");
        let not_first = k.setp("ne.u32", h.tid, 0u32);
        k.bra_if(not_first, false, &skip);
        let row = k.un("cvt.u64.u32", RegKind::B64, self.tile);
        let off = k.bin("mul.lo.u64", RegKind::B64, row, (crate::gemm::TRACE_WORDS * 8) as i64);
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
/// epilogues through shared memory and the last part's split-K sum walk the tile this way.
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

/// The epilogue of a cluster-summed split-K part ([`GemmSpec::cluster_splits`]): each block
/// puts its part of the tile in its shared memory (`part`, rows [`PART_PITCH`] apart), the
/// cluster meets, and the block of rank r sums band r of the tile's rows over every block's part
/// through distributed shared memory, in rank order from the first (the split-K reduction's
/// order, so the sums are the same bit for bit), adds the old output or the residual where the
/// epilogue says, and stores 16 bytes a thread. The cluster meets again before any block exits,
/// so no part is read after its block has gone. `frags`: the warp's `m16n8` fragments, every
/// column; `wrow`: the warp's first row in the tile.
fn sum_in_cluster(k: &mut Kernel, spec: &GemmSpec, frags: &[Vec<Reg>], lane: Reg, wrow: Reg, part: Reg, h: &Head) {
    use crate::gemm::Epilogue;
    k.comment("epilogue: the part to shared memory, summed over the cluster");
    let splits = spec.cluster_splits;
    let row_bytes = PART_PITCH * 4;
    fragments_to_shared(k, frags, lane, wrow, part);
    k.op("barrier.cluster.arrive.release", []);
    k.op("barrier.cluster.wait.acquire", []);

    // Rank r sums rows r·band … of the tile: thread i takes columns 4·(i mod 32) of rows
    // i/32 + 8·j.
    let band = spec.tile.rows() / splits;
    let rank = k.sreg("%cluster_ctarank");
    let warp = k.bin("shr.u32", RegKind::B32, h.tid, 5u32);
    let first = k.tri("mad.lo.u32", RegKind::B32, rank, band, warp);
    let local = k.tri("mad.lo.u32", RegKind::B32, first, row_bytes, part);
    let local = k.tri("mad.lo.u32", RegKind::B32, lane, 16u32, local);
    let grow = k.bin("add.u32", RegKind::B32, h.m0, first);
    let gcol = k.tri("mad.lo.u32", RegKind::B32, lane, 4u32, h.n0);
    let col_in = k.setp("lt.u32", gcol, h.n);
    for j in 0..band / 8 {
        let sums: Vec<Vec<Reg>> = (0..splits)
            .map(|s| {
                let mine = k.bin("add.u32", RegKind::B32, local, 8 * j * row_bytes);
                let theirs = k.bin("mapa.shared::cluster.u32", RegKind::B32, mine, s);
                let v = k.regs(RegKind::F32, 4);
                k.op("ld.shared::cluster.v4.f32", [Opnd::V(v.clone()), addr(theirs, 0)]);
                v
            })
            .collect();
        let r = k.bin("add.u32", RegKind::B32, grow, 8 * j);
        let row_in = k.setp("lt.u32", r, h.m);
        let inside = k.bin("and.pred", RegKind::Pred, row_in, col_in);
        let skip = k.label("part_outside");
        k.bra_if(inside, true, &skip);
        let e = k.tri("mad.lo.u32", RegKind::B32, r, h.ldc, gcol);
        let cptr = k.addr_of(h.c_base, e, 4);
        let old = match spec.epilogue {
            Epilogue::Store => None,
            Epilogue::Accumulate => Some(cptr),
            Epilogue::AddResidual => Some(k.addr_of(h.r_base, e, 4)),
            Epilogue::StoreMul => unreachable!("no StoreMul cluster sums"),
        }
        .map(|p| {
            let o = k.regs(RegKind::F32, 4);
            k.op("ld.global.v4.f32", [Opnd::V(o.clone()), addr(p, 0)]);
            o
        });
        let out = crate::gemm::sum_parts(k, &sums, old.as_deref());
        k.op("st.global.v4.f32", [addr(cptr, 0), Opnd::V(out)]);
        k.place(&skip);
    }
    k.op("barrier.cluster.arrive.release", []);
    k.op("barrier.cluster.wait.acquire", []);
}

/// The split-K sum of a last-part-sums split ([`GemmSpec::fixup_splits`]), after this part's
/// tile is stored: every consumer thread fences its stores, the consumers meet, one thread counts
/// the part in at the tile's counter (`atom.acq_rel.gpu`), and only the part that makes the count
/// whole goes on: it fences again, sets the counter back to zero for the next launch, and sums
/// the tile a row a warp (four columns a lane, [`FIXUP_ROWS`] rows' loads in flight) over every
/// part's partial in order from the first ([`crate::gemm::sum_parts`], as the reduction launch
/// does, so the bits are its bits), adds the old output or the residual, and stores at `out`.
/// The partials are read through L2 (`.cg`): other SMs wrote them during this launch. Why: one
/// context's step ran 145 reduction launches and sixteen contexts' 80, each a few microseconds
/// plus a launch; which part finishes last does not change the order of the sum.
fn sum_in_last_part(k: &mut Kernel, spec: &GemmSpec, h: &Head, [out, counters]: [Reg; 2], consumers: u32, exit: &str) {
    use crate::gemm::Epilogue;
    k.comment("epilogue: the tile's last part to finish sums every part");
    let splits = spec.fixup_splits;
    let flag = k.shared("fixup_last", 4, 4);
    let flag = k.un("mov.u32", RegKind::B32, Opnd::S(flag));
    k.op("fence.acq_rel.gpu", []);
    k.op("bar.sync", [1u32.into(), consumers.into()]);
    let tile = block_tile(k);
    let counter = k.addr_of(counters, tile, 4);
    let leader = k.setp("eq.u32", h.tid, 0u32);
    let counted = k.label("fixup_counted");
    k.bra_if(leader, true, &counted);
    let before = k.reg(RegKind::B32);
    k.op("atom.acq_rel.gpu.global.add.u32", [before.into(), addr(counter, 0), 1u32.into()]);
    let last = k.setp("eq.u32", before, splits - 1);
    let word = k.reg(RegKind::B32);
    k.op("selp.u32", [word.into(), 1u32.into(), 0u32.into(), last.into()]);
    k.op("st.shared.u32", [addr(flag, 0), word.into()]);
    // Every part has counted in: no other block touches this counter in this launch.
    k.op_if(last, false, "st.relaxed.gpu.global.u32", [addr(counter, 0), 0u32.into()]);
    k.place(&counted);
    k.op("bar.sync", [1u32.into(), consumers.into()]);
    let word = k.reg(RegKind::B32);
    k.op("ld.shared.u32", [word.into(), addr(flag, 0)]);
    let not_last = k.setp("eq.u32", word, 0u32);
    k.bra_if(not_last, false, exit);
    k.op("fence.acq_rel.gpu", []);

    // Part s's tile at c + s·stride_c; warp w sums rows w, w + warps, …; lane l columns 4l ….
    let step = k.bin("shl.b64", RegKind::B64, h.stride_c, 2u32);
    let mut part = h.c_param;
    let bases: Vec<Reg> = (0..splits)
        .map(|s| {
            if s > 0 {
                part = k.bin("add.s64", RegKind::B64, part, step);
            }
            part
        })
        .collect();
    let lane = k.bin("and.b32", RegKind::B32, h.tid, 31u32);
    let walk = RowWalk::new(k, h, lane, consumers);
    let old = match spec.epilogue {
        Epilogue::Store => None,
        Epilogue::Accumulate => Some(out),
        Epilogue::AddResidual => Some(h.r_param),
        Epilogue::StoreMul => unreachable!("no StoreMul split"),
    };
    walk.each(
        k,
        h,
        (FIXUP_ROWS / splits).max(1),
        |k, w| {
            // Every part's four values, and the old four.
            let e = k.tri("mad.lo.u32", RegKind::B32, w.r, h.ldc, walk.col);
            let ld = |k: &mut Kernel, base: Reg, op: &str| {
                let p = k.addr_of(base, e, 4);
                k.load_f32s_if(w.ok, op, 4, addr(p, 0))
            };
            let parts: Vec<Vec<Reg>> = bases.iter().map(|&base| ld(k, base, "ld.global.cg.v4.f32")).collect();
            (e, parts, old.map(|base| ld(k, base, "ld.global.v4.f32")))
        },
        |k, w, (e, parts, old)| {
            let sum = crate::gemm::sum_parts(k, &parts, old.as_deref());
            let p = k.addr_of(out, e, 4);
            k.op_if(w.ok, false, "st.global.v4.f32", [addr(p, 0), Opnd::V(sum)]);
        },
    );
}

/// Partial tiles' rows (over all parts) whose loads [`sum_in_last_part`] keeps in flight a lane.
const FIXUP_ROWS: u32 = 8;

/// What an epilogue run through shared memory (`store_staged`) does with each element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Staged {
    /// The spec's chain ([`crate::gemm::ChainEpilogue`]): its other inputs read, its outputs
    /// stored.
    Chain,
    /// The product plus R ([`crate::gemm::Epilogue::AddResidual`]) or, `accumulate`, plus C's
    /// old value ([`crate::gemm::Epilogue::Accumulate`]), stored at C.
    Add { accumulate: bool },
    /// The product stored at C.
    Store,
}

/// Whether `spec`'s ring holds its f32 product tile at `PART_PITCH` (what the epilogues
/// through shared memory need): 128 × 128 tiles.
pub fn ring_holds_tile(spec: &GemmSpec) -> bool {
    spec.tile == crate::gemm::Tile::T128x128
        && gemm_wgmma::stages(spec) * stage_bytes(spec) >= spec.tile.rows() * PART_PITCH * 4
}

/// Whether `spec`'s epilogue works in the ring (a staged epilogue, the delta-heads store):
/// a persistent block's producer then waits for it before refilling the ring.
pub fn epilogue_in_ring(spec: &GemmSpec) -> bool {
    staged(spec).is_some() || spec.heads.is_some_and(|hs| hs.delta)
}

/// Four f32 values stored as bf16 (two pairs, 8 bytes) at element `e` of the bf16 tensor at
/// `base`, where `ok` holds.
fn store_bf16x4_if(k: &mut Kernel, ok: Reg, base: Reg, e: Reg, vals: &[Reg]) {
    let p = k.addr_of(base, e, 2);
    let pairs = crate::gemm::bf16_pairs(k, vals);
    k.op_if(ok, false, "st.global.v2.b32", [addr(p, 0), Opnd::V(pairs)]);
}

/// The epilogue of a delta-heads product ([`crate::gemm::Heads::delta`]): the output gradient of
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
    hs: crate::gemm::Heads,
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
            && ring_holds_tile(spec)
            && spec.epilogue == crate::gemm::Epilogue::Store
            && spec.activation.is_none()
            && spec.chain.is_none()
            && !spec.gated
            && spec.cluster_splits == 0
            && spec.fixup_splits == 0,
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
/// multiply, gate or cluster), as far as [`crate::gemm::GemmTuning::staged_epilogues`] allows.
pub fn staged(spec: &GemmSpec) -> Option<Staged> {
    use crate::gemm::Epilogue;
    use crate::gemm::StagedEpilogues as Allow;
    let allow = spec.tuning.staged_epilogues;
    let fits = ring_holds_tile(spec)
        && spec.activation.is_none()
        && spec.heads.is_none()
        && !spec.gated
        && spec.cluster_splits == 0;
    if !fits || allow == Allow::None {
        return None;
    }
    match (spec.chain, spec.epilogue) {
        (Some(_), _) => Some(Staged::Chain),
        (None, e @ (Epilogue::AddResidual | Epilogue::Accumulate)) if allow != Allow::Chains => {
            Some(Staged::Add { accumulate: e == Epilogue::Accumulate })
        }
        (None, Epilogue::Store) if allow == Allow::All || (allow == Allow::Tall && spec.staged_store) => {
            Some(Staged::Store)
        }
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
/// then read at under 2 TB/s while the tensor cores waited (g68: that product 165 → 115 µs).
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
    let (reads, writes, steps): (Vec<Reg>, Vec<(Reg, bool)>, _) = match work {
        Staged::Chain => {
            let c = chain();
            let ptr = |j: usize| h.chain[j].expect("a chain pointer per output and input");
            let outs = c.outputs();
            let writes = outs.iter().enumerate().map(|(j, &(_, bf16))| (ptr(j), bf16)).collect();
            ((0..c.others().len()).map(|j| ptr(outs.len() + j)).collect(), writes, c.steps())
        }
        Staged::Add { accumulate } => {
            (vec![if accumulate { h.c_base } else { h.r_base }], vec![(h.c_base, false)], vec![])
        }
        Staged::Store => (vec![], vec![(h.c_base, false)], vec![]),
    };
    let walk = RowWalk::new(k, h, lane, consumers);
    let s_row0 = walk.staged_row0(k, lane, tile);
    let stats = spec.row_stats.then(|| RowStats::new(k, spec, h, lane));
    walk.each(
        k,
        h,
        STAGED_BATCH,
        |k, w| {
            // The element offset, and the other inputs' four values.
            let e = k.tri("mad.lo.u32", RegKind::B32, w.r, h.ldc, walk.col);
            let vals: Vec<Vec<Reg>> = reads
                .iter()
                .map(|&base| {
                    let p = k.addr_of(base, e, 4);
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
                    let results = crate::gemm::chain_results(k, &c, &steps, &product, &vals_in);
                    c.outputs().iter().map(|&(step, _)| results.iter().map(|r| r[step]).collect()).collect()
                }
                // The fragment epilogue's addition: the product's value plus the old one.
                Staged::Add { .. } => vec![product
                    .iter()
                    .zip(&vals_in[0])
                    .map(|(&x, &o)| k.bin("add.rn.f32", RegKind::F32, x, o))
                    .collect()],
                Staged::Store => vec![product.clone()],
            };
            if let Some(st) = &stats {
                st.row(k, &walk, w, &product);
            }
            for (&(base, bf16), vs) in writes.iter().zip(values) {
                if bf16 {
                    store_bf16x4_if(k, w.ok, base, e, &vs);
                } else {
                    let p = k.addr_of(base, e, 4);
                    k.op_if(w.ok, false, "st.global.v4.f32", [addr(p, 0), Opnd::V(vs)]);
                }
            }
        },
    );
}

/// The per-row statistics a staged plain store also writes ([`GemmSpec::row_stats`]).
struct RowStats {
    /// Where this tile's pair of row 0 would go: `u + 8·tile column`.
    at0: Reg,
    /// Bytes from one row's pair to the next: 8·⌈N/128⌉.
    row_bytes: Reg,
    lane0: Reg,
}

impl RowStats {
    fn new(k: &mut Kernel, spec: &GemmSpec, h: &Head, lane: Reg) -> RowStats {
        debug_assert_eq!(spec.tile.cols(), 128, "one pair a 128-column tile");
        let u = h.u_base.expect("row statistics go to u");
        let tcol = k.bin("shr.u32", RegKind::B32, h.n0, 7u32);
        let at0 = k.addr_of(u, tcol, 8);
        let n127 = k.bin("add.u32", RegKind::B32, h.n, 127u32);
        let tiles = k.bin("shr.u32", RegKind::B32, n127, 7u32);
        let row_bytes = k.bin("shl.b32", RegKind::B32, tiles, 3u32);
        let lane0 = k.setp("eq.u32", lane, 0u32);
        RowStats { at0, row_bytes, lane0 }
    }

    /// Row `w`'s maximum over the tile's columns and its sum of `exp(x − max)` (`ex2.approx` of
    /// `(x − max)·log2 e`, as the cross-entropy kernels take exponentials): each lane its four
    /// columns in order, then butterflies over the warp, a fixed order. Columns past N count as
    /// −∞ and 0. Lane 0 stores the pair (rows past M store nothing).
    fn row(&self, k: &mut Kernel, walk: &RowWalk, w: WalkRow, v: &[Reg]) {
        let m01 = k.bin("max.f32", RegKind::F32, v[0], v[1]);
        let m23 = k.bin("max.f32", RegKind::F32, v[2], v[3]);
        let m = k.bin("max.f32", RegKind::F32, m01, m23);
        let m = k.tri("selp.f32", RegKind::F32, m, f32::NEG_INFINITY, walk.col_ok);
        let m = k.warp_reduce_f32(m, "max.f32");
        let mut sum = k.imm_f32(0.0);
        for &x in v {
            let d = k.bin("sub.rn.f32", RegKind::F32, x, m);
            let e = crate::elementwise::emit_exp(k, d);
            sum = k.bin("add.rn.f32", RegKind::F32, sum, e);
        }
        let sum = k.tri("selp.f32", RegKind::F32, sum, 0.0f32, walk.col_ok);
        let sum = k.warp_reduce_f32(sum, "add.rn.f32");
        // w.ok holds the lane's columns too; lane 0's columns are inside N on every tile.
        let store = k.bin("and.pred", RegKind::Pred, w.ok, self.lane0);
        let off = k.reg(RegKind::B64);
        k.op("mul.wide.u32", [off.into(), w.r.into(), self.row_bytes.into()]);
        let at = k.bin("add.s64", RegKind::B64, self.at0, off);
        k.op_if(store, false, "st.global.v2.f32", [addr(at, 0), Opnd::V(vec![m, sum])]);
    }
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
