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
//! Three engines share the specs, the launch interface and the epilogues (`store_tile`): this
//! module's `mma.sync` kernels ([`Engine::Mma`]), Hopper's `wgmma` on a `cp.async` ring
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

use anyhow::{bail, Result};

use alpha_ir::Unary;

use crate::kernels::fused::{Chain, Src, Step};
use crate::ptx::{addr, Kernel, Opnd, ParamTy, Reg, RegKind};
use crate::runtime::driver::{Arg, Function, Gpu, LaunchConfig};

pub mod simple;
pub mod tma;
pub mod wgmma;

/// The K step of the usual kernels (see [`GemmSpec::bk`]).
pub const BK: u32 = 32;
/// Threads per block.
pub const THREADS: u32 = 256;
/// Arguments every GEMM launch starts with, before its extras ([`Extras`]): A, B, C, R, the six
/// dimensions and the three batch strides (see [`launch_with`]).
pub const SHAPE_ARGS: usize = 13;
/// Shared-memory row pitch in bytes of a K-contiguous tile: `bk` bf16 padded by 16 bytes (80 at
/// a K step of 32), so the eight rows one `ldmatrix` reads fall in eight 16-byte bank groups.
const fn pitch_k(bk: u32) -> u32 {
    2 * bk + 16
}

/// Output tile of one block: rows (M) × columns (N).
///
/// Why several: at one 1,024-token context most of Coppelius's products are 1,024 × 512 to
/// 1,024 × 1,536, which 128 × 128 tiles cover with 32–96 blocks on a 132-SM GPU; smaller tiles
/// fill the machine (see [`GemmShape::tile`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tile {
    T128x128,
    T128x64,
    T64x128,
    T64x64,
}

impl Tile {
    pub const ALL: [Tile; 4] = [Tile::T128x128, Tile::T128x64, Tile::T64x128, Tile::T64x64];
    pub fn rows(self) -> u32 {
        match self {
            Tile::T128x128 | Tile::T128x64 => 128,
            Tile::T64x128 | Tile::T64x64 => 64,
        }
    }
    pub fn cols(self) -> u32 {
        match self {
            Tile::T128x128 | Tile::T64x128 => 128,
            Tile::T128x64 | Tile::T64x64 => 64,
        }
    }
}

/// Streaming multiprocessors of the H200; tiles are chosen to fill them.
pub const SMS: u32 = 132;

/// How an operand is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// A stored `[M][K]`, B stored `[K][N]` (the last dimension contiguous).
    RowMajor,
    /// A stored `[K][M]`, B stored `[N][K]` (the transpose of row-major).
    ColMajor,
}

impl Layout {
    fn letter(self) -> char {
        match self {
            Layout::RowMajor => 'r',
            Layout::ColMajor => 'c',
        }
    }
}

/// Element type of A and B in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// fp32, rounded to bf16 as it is staged into shared memory.
    F32,
    /// bf16 bits.
    Bf16,
}

impl Input {
    pub fn bytes(self) -> u32 {
        match self {
            Input::F32 => 4,
            Input::Bf16 => 2,
        }
    }
    /// Elements per 16-byte vector load.
    pub fn vec(self) -> u32 {
        16 / self.bytes()
    }
}

/// What is done with the fp32 accumulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epilogue {
    /// `C = A·B`.
    Store,
    /// `C = A·B + R` (R may be C itself: the residual stream's `x +=`).
    AddResidual,
    /// `C += A·B` (gradient accumulation).
    Accumulate,
    /// `C = A·B`, and `U = bf16(C · R)` (param `u`, bf16, C's layout; `C · act(R)` with an
    /// activation): the product of a gated unit's two halves, with its bf16 cast, written by
    /// the second half's product — the pointwise multiply's own f32 rounding, then
    /// round-to-nearest-even.
    StoreMul,
}

/// Which tensor-core instruction family a kernel is built on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Engine {
    /// `mma.sync` fed by `ldmatrix` from a two-stage shared tile (this module).
    Mma,
    /// Hopper's warpgroup `wgmma` on a four-stage `cp.async` ring ([`crate::kernels::gemm::wgmma`]).
    Wgmma,
    /// `wgmma` fed by the tensor memory accelerator from a producer warp ([`crate::kernels::gemm::tma`]);
    /// bf16 operands only; launched with two tensor maps ([`launch_with`]).
    Tma,
}

/// A product stored split into attention heads: C is `[B·T, S·H·D]` as computed (rows b·T + t,
/// columns (s·H + h)·D + d) and lands at `((s·B + b)·H + h)·T·D + t·D + d` — the contiguous
/// `[S, B, H, T, D]` that attention reads (S = 3 for the q/k/v projection, 1 for a head-split
/// gradient). Why: the permute copy after the projection then never runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Heads {
    pub batch: u32,
    pub t: u32,
    pub heads: u32,
    pub d: u32,
    /// Stored as bf16, the first two sections (q and k) turned by the rotary at each row's
    /// position on the way (param `rot_tab`, last: the table of [`crate::kernels::rotary::table`]), the
    /// third (v) as it is — what [`crate::kernels::attention::mma::forward_kernel_bf16`] reads. The same
    /// f32 arithmetic and rounding as the attention kernels turning f32 on load, so the same
    /// bits reach the tensor cores. Heads of 64 only, S = 3.
    pub bf16_turned: bool,
    /// Stored as bf16 (C: `[B, H, T, D]` bf16), with attention's backward delta beside it: R
    /// is the attention output O (f32, C's layout) and U gets `delta = Σ_d dO·O` per row
    /// (`[B·H·T]` f32) — what [`crate::kernels::attention::mma::backward_delta_kernel_bf16`] computes
    /// from the f32 product and O, in its order, so the same bits. The f32 product is never
    /// stored. Heads of 64, S = 1, TMA engine, 128 × 128 tiles whose ring holds the f32 tile
    /// (`gemm_tma::store_heads_delta`).
    pub delta: bool,
}

/// Steps a [`ChainEpilogue`] holds at most.
pub const CHAIN_STEPS: usize = 8;
/// Outputs, and inputs beside the product, a [`ChainEpilogue`] takes at most.
pub const CHAIN_PTRS: usize = 4;

/// An elementwise chain ([`crate::kernels::fused::Chain`]) the epilogue runs on the product instead of
/// storing it: the chain's input `product` is the accumulator, its other inputs are read at the
/// product's element (f32, the product's shape and row-major layout), and its outputs are stored
/// (f32, or bf16 where the chain stores bf16) where the chain's kernel would store them. The
/// steps are [`crate::kernels::fused::emit_steps`], so the bits are the chain kernel's. Why: a gated
/// unit's backward read the product (dh, 92 MB at sixteen contexts) back right after the product
/// wrote it. Unbatched products only. Fixed capacity keeps [`GemmSpec`] `Copy`.
///
/// Taken over deep grids only (`crate::lower::ChainEpilogues`). On the H200, with 8-byte
/// loads and stores a thread it was slower everywhere (sixteen contexts' step 26.53 →
/// 27.16 ms, one context's 3.740 → 3.79 ms); with the quad exchange's 16-byte ones it pays over
/// sixteen contexts' deep grid (24.24 → 24.11 ms) but not over one context's shallow one
/// (3.706 → 3.721 ms), where the epilogue's loads and GELU arithmetic, run while that block's
/// tensor cores idle, cost more than the traffic they save.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChainEpilogue {
    steps: [Option<Step>; CHAIN_STEPS],
    inputs: u8,
    product: u8,
    outputs: [Option<(u8, bool)>; CHAIN_PTRS],
}

impl ChainEpilogue {
    /// `chain` with its input `product` taken from the accumulator; None where it exceeds the
    /// capacity or is not a valid chain.
    pub fn new(chain: &Chain, product: usize) -> Option<ChainEpilogue> {
        let fits = chain.steps.len() <= CHAIN_STEPS
            && chain.outputs.len() <= CHAIN_PTRS
            && chain.inputs <= CHAIN_PTRS + 1
            && product < chain.inputs
            && chain.validate().is_ok();
        if !fits {
            return None;
        }
        let mut steps = [None; CHAIN_STEPS];
        for (slot, st) in steps.iter_mut().zip(&chain.steps) {
            *slot = Some(*st);
        }
        let mut outputs = [None; CHAIN_PTRS];
        for (j, (slot, &o)) in outputs.iter_mut().zip(&chain.outputs).enumerate() {
            *slot = Some((o as u8, chain.bf16.get(j).copied().unwrap_or(false)));
        }
        Some(ChainEpilogue { steps, inputs: chain.inputs as u8, product: product as u8, outputs })
    }

    pub fn steps(&self) -> Vec<Step> {
        self.steps.iter().flatten().copied().collect()
    }

    /// (step, stored as bf16) per output, in parameter order (`chain_out{j}`).
    pub fn outputs(&self) -> Vec<(usize, bool)> {
        self.outputs.iter().flatten().map(|&(s, b)| (s as usize, b)).collect()
    }

    /// The chain's inputs other than the product, in parameter order (`chain_in{j}`).
    pub fn others(&self) -> Vec<usize> {
        (0..self.inputs as usize).filter(|&j| j != self.product as usize).collect()
    }

    pub fn inputs(&self) -> usize {
        self.inputs as usize
    }

    pub fn product(&self) -> usize {
        self.product as usize
    }

    /// The name's suffix: every step with its sources, the outputs and the product, so that two
    /// different chains never share a kernel name.
    fn suffix(&self) -> String {
        let src = |s: Src| match s {
            Src::Input(j) => format!("i{j}"),
            Src::Step(j) => format!("s{j}"),
        };
        let mut out = String::from("_then");
        for st in self.steps() {
            let part = match st {
                Step::Unary(u, a) => format!("_{}{}", format!("{u:?}").to_lowercase(), src(a)),
                Step::Binary(b, x, y) => format!("_{}{}{}", format!("{b:?}").to_lowercase(), src(x), src(y)),
            };
            out.push_str(&part);
        }
        out.push_str("_out");
        for (s, bf16) in self.outputs() {
            out.push_str(&format!("{s}{}", if bf16 { "h" } else { "f" }));
        }
        out.push_str(&format!("_p{}", self.product));
        out
    }
}

/// One GEMM kernel variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmSpec {
    pub engine: Engine,
    pub a: Layout,
    pub b: Layout,
    /// Element types of A and B in memory: each operand chooses (an activation a producer wrote
    /// as bf16 beside an f32 weight converted on load).
    pub a_input: Input,
    pub b_input: Input,
    pub epilogue: Epilogue,
    /// With [`Epilogue::Store`]: the kernel also writes `u(acc)` to a second output (param `u`,
    /// after the others), computed by [`crate::kernels::pointwise::emit_unary`], the pointwise kernel's
    /// own instruction sequence, so it equals the separate `Unary` launch bit for bit. With
    /// [`Epilogue::StoreMul`]: the multiplier is `u(R)`, computed the same way (a gated unit's
    /// `gelu(gate)` from the gate, which then needs no stored copy).
    pub activation: Option<Unary>,
    pub tile: Tile,
    /// K consumed per pipeline step: [`BK`] on `mma.sync`, [`crate::kernels::gemm::wgmma::BK`] on `wgmma`.
    pub bk: u32,
    /// [`Engine::Wgmma`]: stages of the shared-memory ring (0: the engine's default for the
    /// tile, [`crate::kernels::gemm::wgmma::stages`]).
    pub stages: u32,
    /// Store split into heads ([`Heads`]); store epilogue, no activation, unbatched.
    pub heads: Option<Heads>,
    /// An elementwise chain run on the product instead of storing it ([`ChainEpilogue`]); store
    /// epilogue, no activation, no heads, unbatched.
    pub chain: Option<ChainEpilogue>,
    /// [`Epilogue::StoreMul`] with its multiplier's product computed in the same block: a
    /// second B (the gate's weight, the last tensor map) gives the tile's first 64 columns, B
    /// the other 64, both for the same 64 output columns; the gate is stored at R as it is
    /// computed, then the multiply runs on registers instead of reading it back
    /// ([`crate::kernels::gemm::tma`]). TMA engine, B row-major, 128 × 128 tile, unbatched.
    pub gated: bool,
    /// Split-K parts of whole K steps that may differ by one ([`GemmShape::split_uneven`]):
    /// the launch's K is the product's, and part z of the grid's Z takes K steps
    /// ⌊z·S/Z⌋ … ⌊(z+1)·S/Z⌋ (S of them in all). TMA engine.
    pub uneven_split: bool,
    /// A plain f32 store run through shared memory a row a warp ([`crate::kernels::gemm::tma::staged`]),
    /// where [`GemmTuning::staged_epilogues`] leaves it to the lowering (which asks for it over tall
    /// outputs, `crate::lower`). TMA engine, 128 × 128 tiles.
    pub staged_store: bool,
    /// Two products summed in one accumulator, `A₁·B₁ + A₂·B₂` over K₁ = K₂ = K/2: the first
    /// half of the K steps reads the maps of A₁ and B₁ (the last two tensor maps), the second
    /// those of A and B ([`crate::kernels::gemm::tma`]). Both operands K-major; TMA engine, unbatched.
    pub k_pair: bool,
    /// A timing probe, for measurement only (alpha-cuda-lab's `check::gemm_trace`): a plain
    /// store that also writes, for each tile, its SM and the global timer as its consumers
    /// start, see its first stage, finish its products and finish its epilogue
    /// ([`TRACE_WORDS`] u64s a tile at `r`). Never chosen by the lowering.
    pub trace: bool,
    /// Build choices from the configuration ([`GemmTuning`]).
    pub tuning: GemmTuning,
}

/// Build choices of a GEMM kernel that the lowering takes from its configuration
/// ([`crate::config::CudaConfig::gemm_tuning`]), so that the PTX is a function of the spec.
/// Every default is the measured choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmTuning {
    /// Epilogues store four consecutive values a thread after a quad exchange (16 bytes), not
    /// each fragment's two (8 bytes).
    pub wide_stores: bool,
    /// The TMA engine's three-stage kernels are held to two blocks' registers an SM
    /// (`.minnctapersm 2`).
    pub two_blocks: bool,
    /// Which TMA epilogues run through shared memory, a row a warp ([`crate::kernels::gemm::tma::staged`]).
    pub staged_epilogues: StagedEpilogues,
}

impl Default for GemmTuning {
    fn default() -> GemmTuning {
        GemmTuning { wide_stores: true, two_blocks: true, staged_epilogues: StagedEpilogues::Tall }
    }
}

/// Which TMA epilogues run through shared memory ([`GemmTuning::staged_epilogues`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StagedEpilogues {
    None,
    /// Chain epilogues only.
    Chains,
    /// Chains, and residual or accumulating adds.
    Adds,
    /// Those, and the plain f32 stores the lowering marks ([`GemmSpec::staged_store`]: tall
    /// outputs) (the default).
    Tall,
}

/// u64 words a traced tile writes ([`GemmSpec::trace`]).
pub const TRACE_WORDS: u32 = 8;

impl GemmSpec {
    /// The plain product: both operands of one element type, the store epilogue, the largest
    /// tile and the usual K step. Other variants override fields of it.
    pub fn new(a: Layout, b: Layout, input: Input) -> GemmSpec {
        GemmSpec {
            engine: Engine::Mma,
            a,
            b,
            a_input: input,
            b_input: input,
            epilogue: Epilogue::Store,
            activation: None,
            tile: Tile::T128x128,
            bk: BK,
            stages: 0,
            heads: None,
            chain: None,
            gated: false,
            uneven_split: false,
            staged_store: false,
            k_pair: false,
            trace: false,
            tuning: GemmTuning::default(),
        }
    }

    /// The same product on the `wgmma` engine (K step [`crate::kernels::gemm::wgmma::BK`]).
    pub fn wgmma(self) -> GemmSpec {
        GemmSpec { engine: Engine::Wgmma, bk: crate::kernels::gemm::wgmma::BK, ..self }
    }

    /// The same product on the TMA-fed `wgmma` engine (bf16 operands).
    pub fn tma(self) -> GemmSpec {
        GemmSpec { engine: Engine::Tma, bk: crate::kernels::gemm::wgmma::BK, ..self }
    }

    /// Whether the kernel takes a second output `u` ([`Extras::u`]): an activation's, a
    /// StoreMul's bf16 product, or a delta-heads store's delta ([`Heads::delta`]).
    pub fn takes_u(&self) -> bool {
        self.activation.is_some() || self.epilogue == Epilogue::StoreMul || self.heads.is_some_and(|h| h.delta)
    }

    /// Threads per block.
    pub fn threads(&self) -> u32 {
        match self.engine {
            Engine::Mma => THREADS,
            Engine::Wgmma => crate::kernels::gemm::wgmma::threads(self),
            Engine::Tma => crate::kernels::gemm::tma::threads(self),
        }
    }

    /// Entry name, e.g. `gemm_rc_f32_add`: A row-major, B column-major, fp32 inputs, residual;
    /// `gemm_rr_bf16f32_store`: A bf16, B fp32.
    pub fn name(&self) -> String {
        let act = match self.activation {
            Some(u) => format!("_{}", format!("{u:?}").to_lowercase()),
            None => String::new(),
        };
        let mut tile = match self.tile {
            Tile::T128x128 => String::new(),
            t => format!("_{}x{}", t.rows(), t.cols()),
        };
        if let Some(h) = self.heads {
            tile.push_str(&format!("_heads_b{}t{}h{}d{}", h.batch, h.t, h.heads, h.d));
            if h.bf16_turned {
                tile.push_str("_bf16rot");
            }
            if h.delta {
                tile.push_str("_delta");
            }
        }
        if let Some(c) = self.chain {
            tile.push_str(&c.suffix());
        }
        if self.engine != Engine::Mma {
            tile.push_str(if self.engine == Engine::Tma { "_tma" } else { "_wg" });
            if self.stages != 0 {
                tile.push_str(&format!("_s{}", self.stages));
            }
            if self.gated {
                tile.push_str("_gated");
            }
            if self.uneven_split {
                tile.push_str("_kparts");
            }
            if self.k_pair {
                tile.push_str("_kpair");
            }
            if self.staged_store {
                tile.push_str("_rows");
            }
            if self.trace {
                tile.push_str("_trace");
            }
        }
        format!(
            "gemm_{}{}_{}_{}{act}{tile}",
            self.a.letter(),
            self.b.letter(),
            {
                let t = |i: Input| if i == Input::F32 { "f32" } else { "bf16" };
                if self.a_input == self.b_input {
                    t(self.a_input).to_string()
                } else {
                    format!("{}{}", t(self.a_input), t(self.b_input))
                }
            },
            match self.epilogue {
                Epilogue::Store => "store",
                Epilogue::AddResidual => "add",
                Epilogue::Accumulate => "acc",
                Epilogue::StoreMul => "storemul",
            }
        )
    }

    /// All 4 layouts × 2 inputs × 3 epilogues at 128 × 128, and every layout and input at the
    /// smaller tiles (store epilogue).
    pub fn all() -> Vec<GemmSpec> {
        let mut v = Vec::new();
        for a in [Layout::RowMajor, Layout::ColMajor] {
            for b in [Layout::RowMajor, Layout::ColMajor] {
                for input in [Input::F32, Input::Bf16] {
                    for epilogue in [Epilogue::Store, Epilogue::AddResidual, Epilogue::Accumulate] {
                        let tile = Tile::T128x128;
                        v.push(GemmSpec { tile, epilogue, ..GemmSpec::new(a, b, input) });
                    }
                    for &tile in &Tile::ALL[1..] {
                        v.push(GemmSpec { tile, ..GemmSpec::new(a, b, input) });
                    }
                }
                // Mixed operands: a bf16 activation with an f32 weight, and the other way.
                for (a_input, b_input) in [(Input::Bf16, Input::F32), (Input::F32, Input::Bf16)] {
                    for tile in [Tile::T128x128, Tile::T64x64] {
                        v.push(GemmSpec { a_input, b_input, tile, ..GemmSpec::new(a, b, Input::F32) });
                    }
                }
                // The wgmma engine: every input pairing at every tile (store), and the residual
                // and accumulating epilogues at the largest.
                for (a_input, b_input) in [
                    (Input::Bf16, Input::Bf16),
                    (Input::Bf16, Input::F32),
                    (Input::F32, Input::Bf16),
                    (Input::F32, Input::F32),
                ] {
                    let base = GemmSpec { a_input, b_input, ..GemmSpec::new(a, b, Input::F32) }.wgmma();
                    for tile in Tile::ALL {
                        v.push(GemmSpec { tile, ..base });
                    }
                    if a_input == Input::Bf16 {
                        for epilogue in [Epilogue::AddResidual, Epilogue::Accumulate] {
                            v.push(GemmSpec { epilogue, ..base });
                        }
                    }
                    if (a_input, b_input) == (Input::Bf16, Input::Bf16) {
                        // The shallowest ring (bf16 operands only): two blocks of 128 × 128 an SM.
                        v.push(GemmSpec { stages: 3, ..base });
                        // The TMA-fed engine: every tile (store), both ring depths at the
                        // largest, and the other epilogues.
                        let tma = base.tma();
                        for tile in Tile::ALL {
                            v.push(GemmSpec { tile, ..tma });
                        }
                        v.push(GemmSpec { stages: 3, ..tma });
                        for epilogue in [Epilogue::AddResidual, Epilogue::Accumulate] {
                            v.push(GemmSpec { epilogue, ..tma });
                        }
                    }
                }
            }
        }
        v
    }

    /// The output's tiles across and down (of one batch entry), whatever blocks take them.
    pub fn tiles(&self, shape: &GemmShape) -> (u32, u32) {
        // A gated block computes two products' columns for half its tile's width of output.
        let cols = if self.gated { self.tile.cols() / 2 } else { self.tile.cols() };
        (shape.n.div_ceil(cols), shape.m.div_ceil(self.tile.rows()))
    }

    /// The launch grid for `shape`.
    pub fn grid(&self, shape: &GemmShape) -> (u32, u32, u32) {
        let (x, y) = self.tiles(shape);
        (x, y, shape.batch)
    }

    /// Builds the kernel description.
    pub fn kernel(&self) -> Kernel {
        match self.engine {
            Engine::Mma => build(self),
            Engine::Wgmma => crate::kernels::gemm::wgmma::build(self),
            Engine::Tma => crate::kernels::gemm::tma::build(self),
        }
    }
}

/// Problem shape. Leading dimensions and batch strides are in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmShape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub batch: u32,
    pub lda: u32,
    pub ldb: u32,
    pub ldc: u32,
    pub stride_a: u64,
    pub stride_b: u64,
    pub stride_c: u64,
}

impl GemmShape {
    /// A dense, unbatched problem with packed leading dimensions for `spec`'s layouts.
    pub fn packed(spec: &GemmSpec, m: u32, n: u32, k: u32) -> Self {
        let lda = if spec.a == Layout::RowMajor { k } else { m };
        let ldb = if spec.b == Layout::RowMajor { n } else { k };
        GemmShape {
            m,
            n,
            k,
            batch: 1,
            lda,
            ldb,
            ldc: n,
            stride_a: m as u64 * k as u64,
            stride_b: k as u64 * n as u64,
            stride_c: m as u64 * n as u64,
        }
    }

    /// The shape contract (see the module doc).
    pub fn check(&self, spec: &GemmSpec) -> Result<()> {
        let name = spec.name();
        if self.m == 0 || self.n == 0 || self.k == 0 || self.batch == 0 {
            bail!("{name}: empty problem {self:?}");
        }
        // A paired product's K is both products': each operand holds half of it.
        let (k, bk) = if spec.k_pair { (self.k / 2, 2 * spec.bk) } else { (self.k, spec.bk) };
        if !self.k.is_multiple_of(bk) {
            bail!("{name}: K = {} is not a multiple of {bk}", self.k);
        }
        if !self.m.is_multiple_of(8) || !self.n.is_multiple_of(8) {
            bail!("{name}: M = {} and N = {} must be multiples of 8", self.m, self.n);
        }
        if !self.lda.is_multiple_of(8) || !self.ldb.is_multiple_of(8) || !self.ldc.is_multiple_of(8) {
            bail!("{name}: leading dimensions must be multiples of 8: {self:?}");
        }
        let (a_rows, a_cols) = match spec.a {
            Layout::RowMajor => (self.m, k),
            Layout::ColMajor => (k, self.m),
        };
        let (b_rows, b_cols) = match spec.b {
            Layout::RowMajor => (k, self.n),
            Layout::ColMajor => (self.n, k),
        };
        if self.lda < a_cols || self.ldb < b_cols || self.ldc < self.n {
            bail!("{name}: a leading dimension is smaller than its row: {self:?}");
        }
        let _ = (a_rows, b_rows);
        Ok(())
    }

    /// Elements of A, B and C (with batch strides) the launch may touch.
    pub fn extents(&self, spec: &GemmSpec) -> (usize, usize, usize) {
        let a_rows = if spec.a == Layout::RowMajor { self.m } else { self.k } as u64;
        let b_rows = if spec.b == Layout::RowMajor { self.k } else { self.n } as u64;
        let last = (self.batch - 1) as u64;
        (
            (last * self.stride_a + a_rows * self.lda as u64) as usize,
            (last * self.stride_b + b_rows * self.ldb as u64) as usize,
            (last * self.stride_c + self.m as u64 * self.ldc as u64) as usize,
        )
    }

    /// How many parts to split K into (1: none). Why: a weight gradient `Xᵀ·dY` has a small
    /// output (512 × 1,408) and a long K (every token of the step), so its 128 × 128 tiles
    /// give a third of the SMs a block each and a long walk; smaller tiles fill the GPU but read
    /// the operands over and over. Splitting K keeps the large tile and multiplies the blocks:
    /// each part writes its partial product, and [`splitk_reduce_kernel`] sums the parts in a
    /// fixed order (so runs repeat bit for bit) and applies the epilogue. Only unbatched
    /// products whose 128 × 128 tiles leave SMs idle, with K at least 1,024; each part a
    /// multiple of the kernel's K step `bk`.
    pub fn split_k(&self, bk: u32) -> u32 {
        let blocks = self.m.div_ceil(128) * self.n.div_ceil(128);
        // Measured on the H200 (bench/results/2026-11-29-h200-coppelius-speed.md): one context's
        // step took 6.7 ms with its K = 1,024–1,536 products split and 8.0 ms without, though
        // each gains little alone; from K = 12,288 a split is 1.6–5× faster.
        if self.batch != 1 || blocks >= SMS || self.k < 1024 {
            return 1;
        }
        // The power of two up to 8 that minimises the cost, keeping parts of at least 256.
        let allowed = [2u32, 4, 8].into_iter().filter(|&s| self.k.is_multiple_of(bk * s) && self.k / s >= 256);
        self.cheapest_split(1, allowed)
    }

    /// Time goes as waves of blocks (one 128 × 128 block an SM) times K per part: the cost of
    /// `s` parts, ⌈blocks·s / SMs⌉ / s, which both split heuristics minimise.
    fn split_cost(&self, s: u32) -> f64 {
        let blocks = self.m.div_ceil(128) * self.n.div_ceil(128);
        (blocks * s).div_ceil(SMS) as f64 / s as f64
    }

    /// Of `start` and the part counts `allowed`, the one of least [`Self::split_cost`] (the
    /// earlier on a tie).
    fn cheapest_split(&self, start: u32, allowed: impl IntoIterator<Item = u32>) -> u32 {
        allowed.into_iter().fold(start, |best, s| if self.split_cost(s) < self.split_cost(best) { s } else { best })
    }

    /// [`GemmShape::split_k`] where the parts may differ by a K step ([`GemmSpec::uneven_split`],
    /// on the TMA engine): over a K of at least [`UNEVEN_MIN_K`], any count up to 8 that lowers
    /// the same cost further. Why: a weight gradient of 44 tiles took 8 parts in three waves of
    /// blocks (the last two thirds full); 3 parts fill one wave, with a third of the reduction's
    /// reads.
    pub fn split_k_uneven(&self, bk: u32) -> u32 {
        let even = self.split_k(bk);
        if even == 1 || self.k < UNEVEN_MIN_K || !self.k.is_multiple_of(bk) {
            return even;
        }
        self.cheapest_split(even, (2..=8u32).filter(|&s| self.k / s >= 256))
    }

    /// The shape of a split-K launch of `splits` parts of whole K steps that may differ by one
    /// ([`GemmSpec::uneven_split`]): the product's K, a batch of `splits` entries writing packed
    /// partial products `[splits][M][N]`; the kernel finds each part's K steps itself.
    pub fn split_uneven(&self, splits: u32) -> GemmShape {
        GemmShape {
            batch: splits,
            ldc: self.n,
            stride_a: 0,
            stride_b: 0,
            stride_c: self.m as u64 * self.n as u64,
            ..*self
        }
    }

    /// The shape of the split-K launch for `splits` parts: a batch of K-slices (`stride_a`,
    /// `stride_b` step one slice along K) writing packed partial products `[splits][M][N]`.
    pub fn split(&self, spec: &GemmSpec, splits: u32) -> GemmShape {
        let ks = self.k / splits;
        let along_k = |l: Layout, is_a: bool, ld: u32| -> u64 {
            // A row-major and B column-major have K contiguous; otherwise K steps whole rows.
            let k_contiguous = (l == Layout::RowMajor) == is_a;
            if k_contiguous {
                ks as u64
            } else {
                ks as u64 * ld as u64
            }
        };
        GemmShape {
            k: ks,
            batch: splits,
            ldc: self.n,
            stride_a: along_k(spec.a, true, self.lda),
            stride_b: along_k(spec.b, false, self.ldb),
            stride_c: self.m as u64 * self.n as u64,
            ..*self
        }
    }

    /// The largest tile that still gives every SM a block; the smallest when none does.
    pub fn tile(&self) -> Tile {
        let blocks = |t: Tile| self.m.div_ceil(t.rows()) * self.n.div_ceil(t.cols()) * self.batch;
        Tile::ALL.into_iter().find(|&t| blocks(t) >= SMS).unwrap_or(Tile::T64x64)
    }

    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64 * self.batch as f64
    }
}

/// The pointers a kernel of a spec takes after its shape: its second output `u` (an
/// activation's, or [`Epilogue::StoreMul`]'s bf16 product), the TMA engine's tensor maps of A
/// and B (encoded from [`crate::kernels::gemm::tma::map_specs`]), the turned heads' rotary table.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extras {
    pub u: Option<u64>,
    pub maps: Option<(u64, u64)>,
    pub rot_tab: Option<u64>,
    /// A chain epilogue's outputs, then its inputs beside the product ([`ChainEpilogue`]).
    pub chain: [Option<u64>; 2 * CHAIN_PTRS],
    /// A gated product's tensor map of the gate's B ([`GemmSpec::gated`]).
    pub gate_map: Option<u64>,
    /// A paired product's maps of the first product's A and B ([`GemmSpec::k_pair`]).
    pub first_maps: Option<(u64, u64)>,
}

/// Launches `f` (built from `spec`) on device addresses `a`, `b`, `c` and residual `r` (ignored
/// unless the epilogue is [`Epilogue::AddResidual`]; pass `c` for in-place `C += A·B` style).
#[allow(clippy::too_many_arguments)]
pub fn launch(
    gpu: &Gpu,
    f: &Function,
    spec: &GemmSpec,
    shape: &GemmShape,
    a: u64,
    b: u64,
    c: u64,
    r: u64,
) -> Result<()> {
    launch_with(gpu, f, spec, shape, [a, b, c, r], Extras::default())
}

/// [`launch`] with the pointers `spec`'s kernel takes beyond A, B, C and R: each of `extras`
/// given exactly where the kernel has its parameter.
pub fn launch_with(
    gpu: &Gpu,
    f: &Function,
    spec: &GemmSpec,
    shape: &GemmShape,
    [a, b, c, r]: [u64; 4],
    extras: Extras,
) -> Result<()> {
    let wants = (spec.takes_u(), spec.engine == Engine::Tma, spec.heads.is_some_and(|h| h.bf16_turned));
    if (extras.u.is_some(), extras.maps.is_some(), extras.rot_tab.is_some()) != wants {
        bail!("{}: takes (u, tensor maps, rotary table) {wants:?}, given {extras:?}", spec.name());
    }
    if extras.gate_map.is_some() != spec.gated {
        bail!("{}: a gate's tensor map goes with a gated product alone, given {extras:?}", spec.name());
    }
    if extras.first_maps.is_some() != spec.k_pair {
        bail!("{}: a first product's tensor maps go with a paired product alone, given {extras:?}", spec.name());
    }
    let chain_ptrs = spec.chain.map_or(0, |c| c.outputs().len() + c.others().len());
    if extras.chain.iter().flatten().count() != chain_ptrs || extras.chain[..chain_ptrs].iter().any(Option::is_none) {
        bail!("{}: takes {chain_ptrs} chain pointers, given {:?}", spec.name(), extras.chain);
    }
    if spec.chain.is_some() && shape.batch != 1 {
        bail!("{}: a chain epilogue takes an unbatched product, not {} entries", spec.name(), shape.batch);
    }
    if let Some(maps) = extras.maps {
        crate::kernels::gemm::tma::check_shape(spec, shape)?;
        for p in [maps.0, maps.1] {
            if p % 64 != 0 {
                bail!("{}: a tensor map at {p:#x} is not 64-byte aligned", spec.name());
            }
        }
    }
    shape.check(spec)?;
    for (what, p) in [("A", a), ("B", b), ("C", c)] {
        if p % 16 != 0 {
            bail!("{}: {what} at {p:#x} is not 16-byte aligned", spec.name());
        }
    }
    let grid = spec.grid(shape);
    let cfg = LaunchConfig { grid, block: (spec.threads(), 1, 1), shared_bytes: 0 };
    let mut args = vec![
        Arg::U64(a),
        Arg::U64(b),
        Arg::U64(c),
        Arg::U64(r),
        Arg::U32(shape.m),
        Arg::U32(shape.n),
        Arg::U32(shape.k),
        Arg::U32(shape.lda),
        Arg::U32(shape.ldb),
        Arg::U32(shape.ldc),
        Arg::U64(shape.stride_a),
        Arg::U64(shape.stride_b),
        Arg::U64(shape.stride_c),
    ];
    debug_assert_eq!(args.len(), SHAPE_ARGS);
    args.extend(extras.u.map(Arg::U64));
    args.extend(extras.chain.iter().flatten().map(|&p| Arg::U64(p)));
    args.extend(extras.maps.into_iter().flat_map(|(ma, mb)| [Arg::U64(ma), Arg::U64(mb)]));
    args.extend(extras.gate_map.map(Arg::U64));
    args.extend(extras.first_maps.into_iter().flat_map(|(ma, mb)| [Arg::U64(ma), Arg::U64(mb)]));
    args.extend(extras.rot_tab.map(Arg::U64));
    gpu.launch(f, cfg, &args)
}

/// The shortest K split into parts that may differ by a K step ([`GemmShape::split_k_uneven`]):
/// sixteen contexts' weight gradients (K = 16,384); one context's (K = 1,024) keep their
/// power-of-two parts.
pub const UNEVEN_MIN_K: u32 = 4096;

/// Launches the split-K reduction `f` ([`splitk_reduce_kernel`] over `mn` elements, `width` a
/// thread) on C, R and the partials, with its grid ([`splitk_reduce_blocks`]).
pub fn launch_splitk_reduce(gpu: &Gpu, f: &Function, mn: u32, width: u32, [c, r, partials]: [u64; 3]) -> Result<()> {
    let cfg =
        LaunchConfig { grid: (splitk_reduce_blocks(mn, width), 1, 1), block: (REDUCE_THREADS, 1, 1), shared_bytes: 0 };
    gpu.launch(f, cfg, &[Arg::U64(c), Arg::U64(r), Arg::U64(partials)])
}

/// Threads per block of the split-K reduction.
pub const REDUCE_THREADS: u32 = 256;

/// Elements a thread of the split-K reduction takes where `mn` allows ([`splitk_reduce_kernel`]).
const REDUCE_VECTOR: u32 = 4;

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

/// The split-K sum of each element: `parts` in order from the first, one f32 add at a time,
/// then `old` (the residual or the output accumulated into) where given. Every way of summing
/// the parts emits this, so they agree bit for bit.
fn sum_parts(k: &mut Kernel, parts: &[Vec<Reg>], old: Option<&[Reg]>) -> Vec<Reg> {
    (0..parts[0].len())
        .map(|e| {
            let acc = k.un("mov.f32", RegKind::F32, parts[0][e]);
            for p in &parts[1..] {
                k.op("add.rn.f32", [acc.into(), acc.into(), p[e].into()]);
            }
            match old {
                Some(o) => k.bin("add.rn.f32", RegKind::F32, acc, o[e]),
                None => acc,
            }
        })
        .collect()
}

/// Rounds to bf16 (round-to-nearest-even) and back: what the kernel multiplies.
pub fn bf16_round(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

/// CPU reference for one output element (batch `z`, row `i`, column `j`): operands rounded to
/// bf16, products summed in f64. Returns the accumulator and `Σ|a·b|` (for error bounds).
pub fn reference_at(
    spec: &GemmSpec,
    shape: &GemmShape,
    a: &[f32],
    b: &[f32],
    z: usize,
    i: usize,
    j: usize,
) -> (f64, f64) {
    let (mut acc, mut mag) = (0.0f64, 0.0f64);
    let a0 = z * shape.stride_a as usize;
    let b0 = z * shape.stride_b as usize;
    for kk in 0..shape.k as usize {
        let av = match spec.a {
            Layout::RowMajor => a[a0 + i * shape.lda as usize + kk],
            Layout::ColMajor => a[a0 + kk * shape.lda as usize + i],
        };
        let bv = match spec.b {
            Layout::RowMajor => b[b0 + kk * shape.ldb as usize + j],
            Layout::ColMajor => b[b0 + j * shape.ldb as usize + kk],
        };
        let p = bf16_round(av) as f64 * bf16_round(bv) as f64;
        acc += p;
        mag += p.abs();
    }
    (acc, mag)
}

/// Full CPU reference: `c` holds the output before the call (read by `Accumulate`), `r` the
/// residual. Writes every output element.
pub fn reference(spec: &GemmSpec, shape: &GemmShape, a: &[f32], b: &[f32], r: &[f32], c: &mut [f32]) {
    for z in 0..shape.batch as usize {
        for i in 0..shape.m as usize {
            for j in 0..shape.n as usize {
                let idx = z * shape.stride_c as usize + i * shape.ldc as usize + j;
                let (acc, _) = reference_at(spec, shape, a, b, z, i, j);
                c[idx] = match spec.epilogue {
                    Epilogue::Store => acc as f32,
                    Epilogue::AddResidual => (acc + r[idx] as f64) as f32,
                    Epilogue::Accumulate => (acc + c[idx] as f64) as f32,
                    Epilogue::StoreMul => acc as f32,
                };
            }
        }
    }
}

// ---- kernel construction ----------------------------------------------------------------------

/// Shared-memory pitch (bytes) of an operand staged as stored, `[k][rows]`: the rows padded by
/// 16 bytes so the eight k-rows one `ldmatrix.trans` reads fall in eight different bank groups.
fn trans_pitch(tile_rows: u32) -> u32 {
    2 * tile_rows + 16
}

/// Global→shared copy of one operand tile (`tile_rows` rows of the tile × 32 k), with two
/// register sets so the loads of the tile after next are in flight while this one is used.
struct Loader {
    /// One global pointer per pass, advanced by `step` each K-tile.
    ptrs: Vec<Reg>,
    valid: Vec<Reg>,
    step: Opnd,
    /// Registers holding one pass's vector, per register set.
    data: [Vec<Vec<Reg>>; 2],
    /// Shared byte offset of pass 0 (relative to the tile), per-pass increment.
    smem_off: Reg,
    pass_stride: u32,
    input: Input,
}

/// How a block's threads walk one operand tile (`tile_rows` × `bk`) in 16-byte global vectors:
/// along lines of memory — a row's K (`k_contiguous`) or one K's `tile_rows` — `lpp` lines a
/// pass, `passes` passes; this thread starts at line `line0`, element `elem` of the line.
pub(crate) struct Walk {
    pub line0: Reg,
    pub elem: Reg,
    pub lpp: u32,
    pub passes: u32,
}

pub(crate) fn walk(
    k: &mut Kernel,
    tid: Reg,
    threads: u32,
    k_contiguous: bool,
    input: Input,
    tile_rows: u32,
    bk: u32,
) -> Walk {
    let vw = input.vec();
    let line_len = if k_contiguous { bk } else { tile_rows };
    let vpl = line_len / vw;
    let lpp = threads / vpl;
    let passes = if k_contiguous { tile_rows / lpp } else { bk / lpp };
    let line0 = k.bin("div.u32", RegKind::B32, tid, vpl);
    let v = k.bin("rem.u32", RegKind::B32, tid, vpl);
    let elem = k.bin("mul.lo.u32", RegKind::B32, v, vw);
    Walk { line0, elem, lpp, passes }
}

/// `k_contiguous`: the operand's K index is the contiguous one in memory. K-contiguous tiles are
/// staged `[row][k]` (pitch [`pitch_k`]); the others as stored, `[k][row]` ([`trans_pitch`]).
#[allow(clippy::too_many_arguments)]
fn loader(
    k: &mut Kernel,
    base: Reg,
    ld: Reg,
    row0: Reg,
    rows: Reg,
    tid: Reg,
    k_contiguous: bool,
    input: Input,
    tile_rows: u32,
    bk: u32,
) -> Loader {
    let esz = input.bytes();
    let Walk { line0, elem: pos, lpp, passes } = walk(k, tid, THREADS, k_contiguous, input, tile_rows, bk);
    let mut ptrs = Vec::new();
    let mut valid = Vec::new();
    let dkind = if input == Input::F32 { RegKind::F32 } else { RegKind::B32 };
    let data = [0, 1].map(|_| (0..passes).map(|_| k.regs(dkind, 4)).collect::<Vec<_>>());
    let pb = k.bin("mul.lo.u32", RegKind::B32, pos, 2u32);
    if k_contiguous {
        // pass j: tile row = line0 + j*lpp, k = pos.
        for j in 0..passes {
            let r = k.bin("add.u32", RegKind::B32, line0, j * lpp);
            let grow = k.bin("add.u32", RegKind::B32, row0, r);
            valid.push(k.setp("lt.u32", grow, rows));
            let e = k.tri("mad.lo.u32", RegKind::B32, grow, ld, pos);
            ptrs.push(k.addr_of(base, e, esz));
        }
        let smem_off = k.tri("mad.lo.u32", RegKind::B32, line0, pitch_k(bk), pb);
        Loader { ptrs, valid, step: Opnd::I((bk * esz) as i64), data, smem_off, pass_stride: lpp * pitch_k(bk), input }
    } else {
        // pass j: k = line0 + j*lpp, tile row = pos..pos+vw.
        let grow = k.bin("add.u32", RegKind::B32, row0, pos);
        let v = k.setp("lt.u32", grow, rows);
        for j in 0..passes {
            let kk = k.bin("add.u32", RegKind::B32, line0, j * lpp);
            let e = k.tri("mad.lo.u32", RegKind::B32, kk, ld, grow);
            ptrs.push(k.addr_of(base, e, esz));
            valid.push(v);
        }
        let step = k.reg(RegKind::B64);
        k.op("mul.wide.u32", [step.into(), ld.into(), (bk * esz).into()]);
        let pitch = trans_pitch(tile_rows);
        let smem_off = k.tri("mad.lo.u32", RegKind::B32, line0, pitch, pb);
        Loader { ptrs, valid, step: step.into(), data, smem_off, pass_stride: lpp * pitch, input }
    }
}

impl Loader {
    /// Issues the global loads of the next tile into register set `set`; advances the pointers.
    fn load(&self, k: &mut Kernel, set: usize) {
        for (j, d) in self.data[set].iter().enumerate() {
            let ty = if self.input == Input::F32 { "f32" } else { "b32" };
            for &r in d {
                if self.input == Input::F32 {
                    k.op("mov.f32", [r.into(), 0.0f32.into()]);
                } else {
                    k.op("mov.b32", [r.into(), 0u32.into()]);
                }
            }
            k.op_if(
                self.valid[j],
                false,
                &format!("ld.global.nc.v4.{ty}"),
                [Opnd::V(d.clone()), addr(self.ptrs[j], 0)],
            );
            let p = self.ptrs[j];
            k.op("add.s64", [p.into(), p.into(), self.step.clone()]);
        }
    }

    /// Stores register set `set` (as bf16) at shared address `tile` (a u32 register). Either
    /// layout's 16-byte vector is contiguous in shared memory too: one store per vector.
    fn store(&self, k: &mut Kernel, tile: Reg, set: usize) {
        let base = k.bin("add.u32", RegKind::B32, tile, self.smem_off);
        for (j, d) in self.data[set].iter().enumerate() {
            let off = (j as u32 * self.pass_stride) as i64;
            match self.input {
                Input::F32 => {
                    let lo = k.reg(RegKind::B32);
                    let hi = k.reg(RegKind::B32);
                    k.op("cvt.rn.bf16x2.f32", [lo.into(), d[1].into(), d[0].into()]);
                    k.op("cvt.rn.bf16x2.f32", [hi.into(), d[3].into(), d[2].into()]);
                    k.op("st.shared.v2.b32", [addr(base, off), Opnd::V(vec![lo, hi])]);
                }
                Input::Bf16 => {
                    k.op("st.shared.v4.b32", [addr(base, off), Opnd::V(d.clone())]);
                }
            }
        }
    }
}

/// Per-lane `ldmatrix` address (relative to the operand's tile) and the byte steps between the
/// 16-row (A) or 16-column (B, two n8 tiles) fragment groups and between the two k16 halves.
struct Fragments {
    lane: Reg,
    group_step: i64,
    k16_step: i64,
    trans: bool,
}

/// A's fragments: warp rows `warp_row0 ..`, staged `[m][k]` (`k_contiguous`) or `[k][m]`.
/// Matrices of one `ldmatrix.x4`: (m 0–7, k 0–7), (m 8–15, k 0–7), (m 0–7, k 8–15),
/// (m 8–15, k 8–15) — the order of the A fragment's four registers.
fn a_fragments(k: &mut Kernel, lane: Reg, warp_row0: Reg, k_contiguous: bool, tile_rows: u32, bk: u32) -> Fragments {
    let l7 = k.bin("and.b32", RegKind::B32, lane, 7u32);
    let l8 = k.bin("and.b32", RegKind::B32, lane, 8u32);
    let l16 = k.bin("and.b32", RegKind::B32, lane, 16u32);
    if k_contiguous {
        let l15 = k.bin("or.b32", RegKind::B32, l7, l8);
        let row = k.bin("add.u32", RegKind::B32, warp_row0, l15);
        // k 8 → 16 bytes for lanes 16–31: lane & 16.
        let lane_addr = k.tri("mad.lo.u32", RegKind::B32, row, pitch_k(bk), l16);
        Fragments { lane: lane_addr, group_step: 16 * pitch_k(bk) as i64, k16_step: 32, trans: false }
    } else {
        let pitch = trans_pitch(tile_rows);
        let kh = k.bin("shr.u32", RegKind::B32, l16, 1u32); // 8 k-rows for lanes 16–31
        let krow = k.bin("add.u32", RegKind::B32, l7, kh);
        let row = k.bin("add.u32", RegKind::B32, warp_row0, l8);
        let rb = k.bin("mul.lo.u32", RegKind::B32, row, 2u32);
        let lane_addr = k.tri("mad.lo.u32", RegKind::B32, krow, pitch, rb);
        Fragments { lane: lane_addr, group_step: 32, k16_step: 16 * pitch as i64, trans: true }
    }
}

/// B's fragments for two n8 tiles per `ldmatrix.x4`: warp columns `warp_col0 ..`, staged
/// `[n][k]` (`k_contiguous`) or `[k][n]`. Matrices: (n 0–7, k 0–7), (n 0–7, k 8–15),
/// (n 8–15, k 0–7), (n 8–15, k 8–15) — two B fragments of two registers each.
fn b_fragments(k: &mut Kernel, lane: Reg, warp_col0: Reg, k_contiguous: bool, tile_rows: u32, bk: u32) -> Fragments {
    let l7 = k.bin("and.b32", RegKind::B32, lane, 7u32);
    let l8 = k.bin("and.b32", RegKind::B32, lane, 8u32);
    let l16 = k.bin("and.b32", RegKind::B32, lane, 16u32);
    let nh = k.bin("shr.u32", RegKind::B32, l16, 1u32); // 8 columns for lanes 16–31
    if k_contiguous {
        let c = k.bin("add.u32", RegKind::B32, l7, nh);
        let col = k.bin("add.u32", RegKind::B32, warp_col0, c);
        let kb = k.bin("shl.b32", RegKind::B32, l8, 1u32); // k 8 → 16 bytes
        let lane_addr = k.tri("mad.lo.u32", RegKind::B32, col, pitch_k(bk), kb);
        Fragments { lane: lane_addr, group_step: 16 * pitch_k(bk) as i64, k16_step: 32, trans: false }
    } else {
        let pitch = trans_pitch(tile_rows);
        let krow = k.bin("add.u32", RegKind::B32, l7, l8);
        let col = k.bin("add.u32", RegKind::B32, warp_col0, nh);
        let cb = k.bin("mul.lo.u32", RegKind::B32, col, 2u32);
        let lane_addr = k.tri("mad.lo.u32", RegKind::B32, krow, pitch, cb);
        Fragments { lane: lane_addr, group_step: 32, k16_step: 16 * pitch as i64, trans: true }
    }
}

impl Fragments {
    /// `ldmatrix.x4` of group `gi`, k16 half `ks`, from the operand tile at shared `tile_addr`
    /// (the tile base plus this lane's address).
    fn load(&self, k: &mut Kernel, tile_addr: Reg, gi: usize, ks: usize) -> Vec<Reg> {
        let r = k.regs(RegKind::B32, 4);
        let op = if self.trans {
            "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
        } else {
            "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
        };
        k.op(op, [Opnd::V(r.clone()), addr(tile_addr, gi as i64 * self.group_step + ks as i64 * self.k16_step)]);
        r
    }
}

/// Parameters and per-block bases every GEMM engine starts from.
#[derive(Clone, Copy)]
pub(crate) struct Head {
    pub tid: Reg,
    /// First output row and column of this block's tile.
    pub m0: Reg,
    pub n0: Reg,
    pub m: Reg,
    pub n: Reg,
    pub kdim: Reg,
    pub lda: Reg,
    pub ldb: Reg,
    pub ldc: Reg,
    /// A, B, C, R (and U) advanced to this block's batch entry.
    pub a_base: Reg,
    pub b_base: Reg,
    pub c_base: Reg,
    pub r_base: Reg,
    pub u_base: Option<Reg>,
    /// R as passed (entry 0).
    pub r_param: Reg,
    /// A chain epilogue's pointers: its outputs, then its inputs beside the product.
    pub chain: [Option<Reg>; 2 * CHAIN_PTRS],
}

/// Declares the GEMM parameters (see [`launch`]) and computes the block's tile origin and
/// batch-offset bases.
pub(crate) fn head(k: &mut Kernel, spec: &GemmSpec) -> Head {
    let (bm, bn) = (spec.tile.rows(), spec.tile.cols());
    let pa = k.param_reg("a", ParamTy::U64);
    let pb = k.param_reg("b", ParamTy::U64);
    let pc = k.param_reg("c", ParamTy::U64);
    let pr = k.param_reg("r", ParamTy::U64);
    let m = k.param_reg("m", ParamTy::U32);
    let n = k.param_reg("n", ParamTy::U32);
    let kdim = k.param_reg("k", ParamTy::U32);
    let lda = k.param_reg("lda", ParamTy::U32);
    let ldb = k.param_reg("ldb", ParamTy::U32);
    let ldc = k.param_reg("ldc", ParamTy::U32);
    let sa = k.param_reg("stride_a", ParamTy::U64);
    let sb = k.param_reg("stride_b", ParamTy::U64);
    let sc = k.param_reg("stride_c", ParamTy::U64);
    let pu = spec.takes_u().then(|| k.param_reg("u", ParamTy::U64));
    let mut chain = [None; 2 * CHAIN_PTRS];
    if let Some(c) = spec.chain {
        let names = (0..c.outputs().len()).map(|j| format!("chain_out{j}"));
        let names = names.chain((0..c.others().len()).map(|j| format!("chain_in{j}")));
        for (slot, name) in chain.iter_mut().zip(names) {
            *slot = Some(k.param_reg(&name, ParamTy::U64));
        }
    }

    let tid = k.sreg("%tid.x");
    let bx = k.sreg("%ctaid.x");
    let by = k.sreg("%ctaid.y");
    let bz = k.sreg("%ctaid.z");
    let n0 = k.bin("mul.lo.u32", RegKind::B32, bx, bn);
    let m0 = k.bin("mul.lo.u32", RegKind::B32, by, bm);

    // Batch offsets.
    let z64 = k.un("cvt.u64.u32", RegKind::B64, bz);
    let offset_by = |k: &mut Kernel, base: Reg, stride: Reg, bytes: u32| {
        let e = k.bin("mul.lo.u64", RegKind::B64, z64, stride);
        let b = k.bin("mul.lo.u64", RegKind::B64, e, bytes as i64);
        k.bin("add.s64", RegKind::B64, base, b)
    };
    let a_base = offset_by(k, pa, sa, spec.a_input.bytes());
    let b_base = offset_by(k, pb, sb, spec.b_input.bytes());
    let c_base = offset_by(k, pc, sc, 4);
    let r_base = offset_by(k, pr, sc, 4);
    let u_base = pu.map(|pu| offset_by(k, pu, sc, 4));
    Head { tid, m0, n0, m, n, kdim, lda, ldb, ldc, a_base, b_base, c_base, r_base, u_base, r_param: pr, chain }
}

fn build(spec: &GemmSpec) -> Kernel {
    let (bm, bn) = (spec.tile.rows(), spec.tile.cols());
    // 8 warps as 2 (M) × 4 (N); each warp owns a (bm/2) × (bn/4) block of mi × ni mma tiles.
    let (wm_rows, wn_cols) = (bm / 2, bn / 4);
    let (mi_n, ni_n) = ((wm_rows / 16) as usize, (wn_cols / 8) as usize);
    let bk = spec.bk;
    let a_tile = bm * pitch_k(bk);
    let stage_bytes = (bm + bn) * pitch_k(bk);
    let mut k = Kernel::new(&spec.name()).with_block(THREADS, 1, 1);
    let h = head(&mut k, spec);
    let smem = k.shared("gemm_smem", 2 * stage_bytes, 16);
    let Head { tid, m0, n0, m, n, kdim, lda, ldb, .. } = h;
    let (a_base, b_base) = (h.a_base, h.b_base);

    k.comment("operand loaders");
    let a_kc = spec.a == Layout::RowMajor;
    let b_kc = spec.b == Layout::ColMajor;
    let la = loader(&mut k, a_base, lda, m0, m, tid, a_kc, spec.a_input, bm, bk);
    let lb = loader(&mut k, b_base, ldb, n0, n, tid, b_kc, spec.b_input, bn, bk);

    // Warp geometry and ldmatrix lane addresses (relative to each operand's tile).
    let lane = k.bin("and.b32", RegKind::B32, tid, 31u32);
    let warp = k.bin("shr.u32", RegKind::B32, tid, 5u32);
    let wm = k.bin("shr.u32", RegKind::B32, warp, 2u32);
    let wn = k.bin("and.b32", RegKind::B32, warp, 3u32);
    let wrow = k.bin("mul.lo.u32", RegKind::B32, wm, wm_rows);
    let wcol = k.bin("mul.lo.u32", RegKind::B32, wn, wn_cols);
    let fa = a_fragments(&mut k, lane, wrow, a_kc, bm, bk);
    let fb = b_fragments(&mut k, lane, wcol, b_kc, bn, bk);

    let sbase = k.un("mov.u32", RegKind::B32, Opnd::S(smem));
    let stage_addr = |k: &mut Kernel, s: u32| k.bin("add.u32", RegKind::B32, sbase, s * stage_bytes);
    let stage = [stage_addr(&mut k, 0), stage_addr(&mut k, 1)];
    let stage_b = [0, 1].map(|s| k.bin("add.u32", RegKind::B32, stage[s], a_tile));
    let a_lane = [0, 1].map(|s| k.bin("add.u32", RegKind::B32, stage[s], fa.lane));
    let b_lane = [0, 1].map(|s| k.bin("add.u32", RegKind::B32, stage_b[s], fb.lane));

    // Accumulators acc[mi][ni][0..4].
    let acc: Vec<Vec<Vec<Reg>>> = (0..mi_n).map(|_| (0..ni_n).map(|_| k.regs(RegKind::F32, 4)).collect()).collect();
    for r in acc.iter().flatten().flatten() {
        k.op("mov.f32", [(*r).into(), 0.0f32.into()]);
    }

    // Pipeline: stage s holds tile kt (s = kt mod 2), register set s' = 1 − s holds tile kt + 1
    // (loaded one iteration ago); iteration kt issues the loads of tile kt + 2 into set s,
    // multiplies stage s, stores set s' into stage s', and meets one barrier. The loop is
    // unrolled by two so the register sets and stages are fixed in each half.
    let ktiles = k.bin("shr.u32", RegKind::B32, kdim, bk.trailing_zeros());
    k.comment("prologue: tile 0 to stage 0, tile 1 in flight");
    la.load(&mut k, 0);
    lb.load(&mut k, 0);
    la.store(&mut k, stage[0], 0);
    lb.store(&mut k, stage_b[0], 0);
    let one_more = k.setp("gt.u32", ktiles, 1u32);
    let no_second = k.label("no_second");
    k.bra_if(one_more, true, &no_second);
    la.load(&mut k, 1);
    lb.load(&mut k, 1);
    k.place(&no_second);
    k.barrier();
    let kt = k.imm_u32(0);
    let top = k.label("ktile");
    let done = k.label("kdone");
    k.place(&top);
    for s in 0..2usize {
        let o = 1 - s;
        let k2 = k.bin("add.u32", RegKind::B32, kt, 2u32);
        let far = k.setp("lt.u32", k2, ktiles);
        let skip_load = k.label("skip_load");
        k.bra_if(far, true, &skip_load);
        la.load(&mut k, s);
        lb.load(&mut k, s);
        k.place(&skip_load);

        k.comment("tensor cores on the current stage");
        for ks in 0..(bk / 16) as usize {
            let mut bfrag: Vec<[Reg; 2]> = Vec::new();
            for nj in 0..ni_n / 2 {
                let r = fb.load(&mut k, b_lane[s], nj, ks);
                bfrag.push([r[0], r[1]]);
                bfrag.push([r[2], r[3]]);
            }
            for (mi, acc_m) in acc.iter().enumerate() {
                let af = fa.load(&mut k, a_lane[s], mi, ks);
                for (ni, c) in acc_m.iter().enumerate() {
                    k.op(
                        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                        [Opnd::V(c.clone()), Opnd::V(af.clone()), Opnd::V(bfrag[ni].to_vec()), Opnd::V(c.clone())],
                    );
                }
            }
        }
        let k1 = k.bin("add.u32", RegKind::B32, kt, 1u32);
        let next = k.setp("lt.u32", k1, ktiles);
        let skip_store = k.label("skip_store");
        k.bra_if(next, true, &skip_store);
        la.store(&mut k, stage[o], o);
        lb.store(&mut k, stage_b[o], o);
        k.place(&skip_store);
        k.barrier();
        k.op("add.u32", [kt.into(), kt.into(), 1u32.into()]);
        if s == 0 {
            k.bra_if(next, true, &done);
        } else {
            k.bra_if(next, false, &top);
        }
    }
    k.place(&done);

    store_tile(&mut k, spec, &acc, lane, wrow, wcol, &h);
    k.ret();
    k
}

/// The epilogue: writes the accumulators `acc[mi][ni]` (mma `m16n8` fragments, as `mma.sync`
/// and `wgmma` both lay them out) of the warp whose tile starts at (`wrow`, `wcol`) within the
/// block's tile, applying `spec`'s epilogue and activation, predicated on the matrix edges.
pub(crate) fn store_tile(
    k: &mut Kernel,
    spec: &GemmSpec,
    acc: &[Vec<Vec<Reg>>],
    lane: Reg,
    wrow: Reg,
    wcol: Reg,
    h: &Head,
) {
    store_tile_with(k, spec, acc, None, lane, wrow, wcol, h)
}

/// [`store_tile`] where a StoreMul's multiplier comes from registers (`r_acc`, fragments laid
/// out as `acc`'s, for the same elements) instead of R in memory ([`GemmSpec::gated`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn store_tile_with(
    k: &mut Kernel,
    spec: &GemmSpec,
    acc: &[Vec<Vec<Reg>>],
    r_acc: Option<&[Vec<Vec<Reg>>]>,
    lane: Reg,
    wrow: Reg,
    wcol: Reg,
    h: &Head,
) {
    k.comment(if spec.heads.is_some() { "epilogue: store split into heads" } else { "epilogue" });
    // This lane's first fragment element: row g and column 2·t of the warp's tile (lane = 4g + t).
    let g = k.bin("shr.u32", RegKind::B32, lane, 2u32);
    let tq = k.bin("and.b32", RegKind::B32, lane, 3u32);
    let r0a = k.bin("add.u32", RegKind::B32, wrow, g);
    let row0 = k.bin("add.u32", RegKind::B32, h.m0, r0a);
    let c0a = k.bin("add.u32", RegKind::B32, wcol, h.n0);
    let col0 = k.tri("mad.lo.u32", RegKind::B32, tq, 2u32, c0a);
    if let Some(heads) = spec.heads {
        store_heads(k, spec, heads, acc, row0, col0, h);
        return;
    }
    if let Some(chain) = spec.chain {
        store_chain(k, spec, chain, acc, row0, (c0a, tq), h);
        return;
    }
    let Head { m, n, ldc, c_base, r_base, u_base, .. } = *h;
    let ni_n = acc[0].len();
    // Each thread stores W consecutive values a unit: the fragment's own two (W = 2, a unit a
    // column group), or four after a quad exchange (W = 4, a unit two column groups; see
    // `quad_exchange`), so that a warp's store covers 64 bytes of each of its eight rows instead
    // of 32. Measured on the H200: sixteen contexts' step 24.69 / 24.73 → 24.01 / 24.05
    // ms, one context's 3.775 / 3.767 → 3.722 / 3.719 ms.
    let su = StoreUnits::of(ni_n, spec.tuning.wide_stores);
    let col0 = if su.wide() { k.tri("mad.lo.u32", RegKind::B32, tq, 4u32, c0a) } else { col0 };
    let (width, units, unit_cols) = (su.width, su.units, su.cols());
    let e0 = k.tri("mad.lo.u32", RegKind::B32, row0, ldc, col0);
    let cptr = k.addr_of(c_base, e0, 4);
    // R is read for a residual, or for a StoreMul's multiplier unless it is in registers.
    let rptr = match spec.epilogue {
        Epilogue::AddResidual => Some(k.addr_of(r_base, e0, 4)),
        Epilogue::StoreMul if r_acc.is_none() => Some(k.addr_of(r_base, e0, 4)),
        _ => None,
    };
    // U is bf16 (half the row step) under StoreMul, f32 under an activation.
    let mul = spec.epilogue == Epilogue::StoreMul;
    let uptr = u_base.map(|ub| k.addr_of(ub, e0, if mul { 2 } else { 4 }));
    let row_step = k.reg(RegKind::B64);
    k.op("mul.wide.u32", [row_step.into(), ldc.into(), 32u32.into()]); // 8 rows × 4 bytes
    let u_step = if mul {
        let st = k.reg(RegKind::B64);
        k.op("mul.wide.u32", [st.into(), ldc.into(), 16u32.into()]); // 8 rows × 2 bytes
        st
    } else {
        row_step
    };
    let col_ok: Vec<Reg> = (0..units as u32)
        .map(|u| {
            let c = k.bin("add.u32", RegKind::B32, col0, u * unit_cols);
            k.setp("lt.u32", c, n)
        })
        .collect();
    let f32s = su.f32s();
    // Each row's residual (or old output) values are all loaded before any of its stores: a
    // load after a store to a possibly aliasing address cannot be moved ahead of it, so
    // interleaved load-add-store pairs would each wait out a full memory latency. One row (of
    // the fragment's two) at a time: both rows' values held with the accumulators took 141–144
    // registers, more than two blocks of the three-stage ring leave a thread.
    let src = match spec.epilogue {
        Epilogue::Store => None,
        Epilogue::StoreMul if r_acc.is_some() => None,
        Epilogue::AddResidual | Epilogue::Accumulate | Epilogue::StoreMul => Some(rptr.unwrap_or(cptr)),
    };
    let parity = su.wide().then(|| quad_parity(k, tq));
    for (mi, acc_m) in acc.iter().enumerate() {
        for h in 0..2usize {
            // Each unit's in-range predicate on row g (h = 0) or g + 8 of the group.
            let rr = k.bin("add.u32", RegKind::B32, row0, mi as u32 * 16 + h as u32 * 8);
            let row_ok = k.setp("lt.u32", rr, m);
            let oks: Vec<Reg> = col_ok.iter().map(|&c| k.bin("and.pred", RegKind::Pred, row_ok, c)).collect();
            // The values added to (or multiplied with) each unit's, loaded a chunk of units at a
            // time (the pointers have advanced to this row): the whole row, or 16 columns' worth
            // a thread where the multiplier's activation is computed here (its arithmetic beside
            // a whole row's values spilled registers).
            let chunk = if mul && spec.activation.is_some() { 16 / width } else { units };
            for first in (0..units).step_by(chunk) {
                let span = first..(first + chunk).min(units);
                let in_regs = r_acc.map(|r| span.clone().map(|u| su.values(k, &r[mi], u, h, parity)).collect());
                let olds: Option<Vec<Vec<Reg>>> = in_regs.or_else(|| {
                    src.map(|p| {
                        span.clone()
                            .map(|u| {
                                let at = addr(p, (u as u32 * unit_cols * 4) as i64);
                                k.load_f32s_if(oks[u], &format!("ld.global.{f32s}"), width, at)
                            })
                            .collect()
                    })
                });
                for u in span {
                    // This row's values of the unit: the fragment's pair, or four after the
                    // exchange (made here, unit by unit, to hold few registers).
                    let v = &su.values(k, acc_m, u, h, parity);
                    let ok = oks[u];
                    let old = olds.as_ref().map(|o| &o[u - first]);
                    let off = (u as u32 * unit_cols * 4) as i64;
                    let out: Vec<Reg> = match old {
                        None => v.clone(),
                        Some(_) if mul => v.clone(),
                        Some(old) => {
                            v.iter().zip(old).map(|(&x, &o)| k.bin("add.rn.f32", RegKind::F32, x, o)).collect()
                        }
                    };
                    if let (true, Some(old), Some(up)) = (mul, old, uptr) {
                        let r: Vec<Reg> = old
                            .iter()
                            .map(|&r| match spec.activation {
                                Some(f) => crate::kernels::pointwise::emit_unary(k, f, r),
                                None => r,
                            })
                            .collect();
                        let p: Vec<Reg> =
                            v.iter().zip(&r).map(|(&x, &y)| k.bin("mul.rn.f32", RegKind::F32, x, y)).collect();
                        su.store_bf16(k, ok, up, u, &p);
                    }
                    if let (Some(f), Some(up), false) = (spec.activation, uptr, mul) {
                        let act = out.iter().map(|&x| crate::kernels::pointwise::emit_unary(k, f, x)).collect();
                        k.op_if(ok, false, &format!("st.global.{f32s}"), [addr(up, off), Opnd::V(act)]);
                    }
                    k.op_if(ok, false, &format!("st.global.{f32s}"), [addr(cptr, off), Opnd::V(out)]);
                }
            }
            k.op("add.s64", [cptr.into(), cptr.into(), row_step.into()]);
            if let Some(up) = uptr {
                k.op("add.s64", [up.into(), up.into(), u_step.into()]);
            }
            if let Some(rp) = rptr {
                k.op("add.s64", [rp.into(), rp.into(), row_step.into()]);
            }
        }
    }
}

/// How an epilogue stores a fragment row: W consecutive values a thread a unit — the
/// fragment's own two (a unit a column group), or four after [`quad_exchange`] (a unit two
/// column groups) where the wide stores are on and the groups pair up.
#[derive(Clone, Copy)]
struct StoreUnits {
    width: usize,
    units: usize,
}

impl StoreUnits {
    /// For a warp fragment of `groups` column groups of 8.
    fn of(groups: usize, wide_stores: bool) -> StoreUnits {
        let width = if wide_stores && groups.is_multiple_of(2) { 4 } else { 2 };
        StoreUnits { width, units: groups * 2 / width }
    }

    fn wide(&self) -> bool {
        self.width == 4
    }

    /// Columns a unit spans.
    fn cols(&self) -> u32 {
        4 * self.width as u32
    }

    /// The f32 vector type of a unit's loads and stores.
    fn f32s(&self) -> &'static str {
        if self.wide() {
            "v4.f32"
        } else {
            "v2.f32"
        }
    }

    /// Row `h`'s values of unit `u` of the fragments `acc_m`: the fragment's pair, or four after
    /// the exchange (`parity`: [`quad_parity`], where wide).
    fn values(&self, k: &mut Kernel, acc_m: &[Vec<Reg>], u: usize, h: usize, parity: Option<(Reg, Reg)>) -> Vec<Reg> {
        match parity {
            None => vec![acc_m[u][2 * h], acc_m[u][2 * h + 1]],
            Some(p) => quad_exchange(k, &acc_m[2 * u], &acc_m[2 * u + 1], h, p),
        }
    }

    /// Stores `vals` (a unit's) rounded to bf16 at unit `u` of the row at `p`, guarded by `ok`:
    /// pairs by round-to-nearest-even, 4 or 8 bytes.
    fn store_bf16(&self, k: &mut Kernel, ok: Reg, p: Reg, u: usize, vals: &[Reg]) {
        let pairs = bf16_pairs(k, vals);
        let (op, val) =
            if self.wide() { ("st.global.v2.b32", Opnd::V(pairs)) } else { ("st.global.b32", pairs[0].into()) };
        k.op_if(ok, false, op, [addr(p, (u as u32 * self.cols() * 2) as i64), val]);
    }
}

/// The predicates [`quad_exchange`] chooses by: lane t of its quad odd, and t ≥ 2.
fn quad_parity(k: &mut Kernel, tq: Reg) -> (Reg, Reg) {
    let odd = k.bin("and.b32", RegKind::B32, tq, 1u32);
    let high = k.bin("and.b32", RegKind::B32, tq, 2u32);
    (k.setp("ne.u32", odd, 0u32), k.setp("ne.u32", high, 0u32))
}

/// Row `h`'s values of two adjacent column groups (`left`, `right`: this lane's fragments,
/// columns 2t, 2t + 1 and 8 + 2t, 8 + 2t + 1 of the sixteen), exchanged within the quad so that
/// lane t holds columns 4t … 4t + 3: two butterfly rounds, with `odd` (t odd) and `high`
/// (t ≥ 2) choosing what each lane sends and keeps. Lane t holds [a, b, c, d] (its pairs of
/// the two groups); after the round with lane t ^ 2, the low lanes hold their own and their
/// partner's left pairs and the high lanes both right pairs; after the round with lane t ^ 1,
/// each lane holds its four consecutive columns.
fn quad_exchange(k: &mut Kernel, left: &[Reg], right: &[Reg], h: usize, (odd, high): (Reg, Reg)) -> Vec<Reg> {
    let (a, b, c, d) = (left[2 * h], left[2 * h + 1], right[2 * h], right[2 * h + 1]);
    let swap = |k: &mut Kernel, x: Reg, mask: u32| {
        let r = k.reg(RegKind::F32);
        k.op("shfl.sync.bfly.b32", [r.into(), x.into(), mask.into(), 0x1fu32.into(), Opnd::S("-1".into())]);
        r
    };
    let sel = |k: &mut Kernel, p: Reg, yes: Reg, no: Reg| k.tri("selp.f32", RegKind::F32, yes, no, p);
    // Round 1 (t ^ 2): low lanes send their right pair, high lanes their left.
    let (sx, sy) = (sel(k, high, a, c), sel(k, high, b, d));
    let (rx, ry) = (swap(k, sx, 2), swap(k, sy, 2));
    let s = [sel(k, high, rx, a), sel(k, high, ry, b), sel(k, high, c, rx), sel(k, high, d, ry)];
    // Round 2 (t ^ 1): even lanes send their upper pair, odd lanes their lower.
    let (sx, sy) = (sel(k, odd, s[0], s[2]), sel(k, odd, s[1], s[3]));
    let (rx, ry) = (swap(k, sx, 1), swap(k, sy, 1));
    vec![sel(k, odd, rx, s[0]), sel(k, odd, ry, s[1]), sel(k, odd, s[2], rx), sel(k, odd, s[3], ry)]
}

/// [`store_tile`] for a chain epilogue ([`ChainEpilogue`]), from the lane's first fragment row
/// `row0` and the warp tile's first column `c0a`: per fragment row, in units of W values a
/// thread as `store_tile`'s (four after a quad exchange), eight values a thread of each other
/// input are loaded at a time (more held too many beside the accumulators for two blocks'
/// registers), the steps run on each element, and the outputs stored (f32 as 8 or 16 bytes,
/// bf16 as 4 or 8). An output may share its slot exactly with an input, as in the chain's
/// kernel: each element is loaded before it is stored, by one thread.
fn store_chain(
    k: &mut Kernel,
    spec: &GemmSpec,
    chain: ChainEpilogue,
    acc: &[Vec<Vec<Reg>>],
    row0: Reg,
    (c0a, tq): (Reg, Reg),
    h: &Head,
) {
    assert!(
        spec.epilogue == Epilogue::Store && spec.activation.is_none() && spec.heads.is_none(),
        "{}: a chain epilogue replaces a plain store",
        spec.name()
    );
    let Head { m, n, ldc, .. } = *h;
    let steps = chain.steps();
    let outputs = chain.outputs();
    let others = chain.others();
    let ptr = |j: usize| h.chain[j].expect("a chain pointer per output and input");
    // Units of W consecutive values a thread, as in `store_tile`.
    let su = StoreUnits::of(acc[0].len(), spec.tuning.wide_stores);
    let (width, units, unit_cols) = (su.width, su.units, su.cols());
    let col0 = k.tri("mad.lo.u32", RegKind::B32, tq, width as u32, c0a);
    let parity = su.wide().then(|| quad_parity(k, tq));
    let f32s = su.f32s();
    let e0 = k.tri("mad.lo.u32", RegKind::B32, row0, ldc, col0);
    // Current row's pointers: outputs (2 or 4 bytes an element), then the other inputs.
    let out_ptrs: Vec<(Reg, bool)> = outputs
        .iter()
        .enumerate()
        .map(|(j, &(_, bf16))| (k.addr_of(ptr(j), e0, if bf16 { 2 } else { 4 }), bf16))
        .collect();
    let in_ptrs: Vec<Reg> = (0..others.len()).map(|j| k.addr_of(ptr(outputs.len() + j), e0, 4)).collect();
    let step_of = |k: &mut Kernel, bytes: u32| {
        let st = k.reg(RegKind::B64);
        k.op("mul.wide.u32", [st.into(), ldc.into(), (8 * bytes).into()]); // 8 rows
        st
    };
    let step4 = step_of(k, 4);
    let step2 = step_of(k, 2);
    let col_ok: Vec<Reg> = (0..units as u32)
        .map(|u| {
            let c = k.bin("add.u32", RegKind::B32, col0, u * unit_cols);
            k.setp("lt.u32", c, n)
        })
        .collect();
    // Eight values a thread of each other input at a time.
    let chunk = 8 / width;
    for (mi, acc_m) in acc.iter().enumerate() {
        for half in 0..2usize {
            let rr = k.bin("add.u32", RegKind::B32, row0, mi as u32 * 16 + half as u32 * 8);
            let row_ok = k.setp("lt.u32", rr, m);
            let oks: Vec<Reg> = col_ok.iter().map(|&c| k.bin("and.pred", RegKind::Pred, row_ok, c)).collect();
            for first in (0..units).step_by(chunk) {
                let span = first..(first + chunk).min(units);
                // The other inputs' values at each unit, all loaded first.
                let loaded: Vec<Vec<Vec<Reg>>> = span
                    .clone()
                    .map(|u| {
                        in_ptrs
                            .iter()
                            .map(|&p| {
                                let at = addr(p, (u as u32 * unit_cols * 4) as i64);
                                k.load_f32s_if(oks[u], &format!("ld.global.{f32s}"), width, at)
                            })
                            .collect()
                    })
                    .collect();
                for (u, vals_in) in span.zip(&loaded) {
                    let product = su.values(k, acc_m, u, half, parity);
                    let results = chain_results(k, &chain, &steps, &product, vals_in);
                    for (&(step, _), &(p, bf16)) in outputs.iter().zip(&out_ptrs) {
                        let vs: Vec<Reg> = results.iter().map(|r| r[step]).collect();
                        if bf16 {
                            su.store_bf16(k, oks[u], p, u, &vs);
                        } else {
                            let at = addr(p, (u as u32 * unit_cols * 4) as i64);
                            k.op_if(oks[u], false, &format!("st.global.{f32s}"), [at, Opnd::V(vs)]);
                        }
                    }
                }
            }
            for &(p, bf16) in &out_ptrs {
                let st = if bf16 { step2 } else { step4 };
                k.op("add.s64", [p.into(), p.into(), st.into()]);
            }
            for &p in &in_ptrs {
                k.op("add.s64", [p.into(), p.into(), step4.into()]);
            }
        }
    }
}

/// A chain epilogue's steps on each of a unit's elements: the product's value from `product`,
/// the other inputs' from `others` (one vector an input, an element each), in the chain's input
/// order. Per element, every step's register.
pub(crate) fn chain_results(
    k: &mut Kernel,
    chain: &ChainEpilogue,
    steps: &[Step],
    product: &[Reg],
    others: &[Vec<Reg>],
) -> Vec<Vec<Reg>> {
    (0..product.len())
        .map(|e| {
            let mut others_e = others.iter().map(|v| v[e]);
            let vals: Vec<Reg> = (0..chain.inputs())
                .map(|j| {
                    if j == chain.product() {
                        product[e]
                    } else {
                        others_e.next().expect("one value per other input")
                    }
                })
                .collect();
            crate::kernels::fused::emit_steps(k, steps, &vals)
        })
        .collect()
}

/// f32 values as bf16 pairs (round-to-nearest-even), the first of each pair in the low half.
pub(crate) fn bf16_pairs(k: &mut Kernel, vals: &[Reg]) -> Vec<Reg> {
    vals.chunks(2)
        .map(|q| {
            let pair = k.reg(RegKind::B32);
            k.op("cvt.rn.bf16x2.f32", [pair.into(), q[1].into(), q[0].into()]);
            pair
        })
        .collect()
}

/// [`store_tile`] for a product split into heads ([`Heads`]), from the lane's first fragment
/// element (`row0`, `col0`): each accumulator pair (two adjacent columns, inside one head as D
/// is a multiple of 8) goes to its place in `[S, B, H, T, D]`.
fn store_heads(k: &mut Kernel, spec: &GemmSpec, hs: Heads, acc: &[Vec<Vec<Reg>>], row0: Reg, col0: Reg, h: &Head) {
    assert!(
        spec.epilogue == Epilogue::Store && spec.activation.is_none() && hs.d.is_multiple_of(8),
        "{}: a head-split store is a plain store of heads of a multiple of 8",
        spec.name()
    );
    let Head { m, n, c_base, .. } = *h;
    let head_elems = hs.t * hs.d;
    // Column group ni: (s·B·H + h)·T·D + d for column col0 + 8·ni = (s·H + h)·D + d.
    let col_part: Vec<(Reg, Reg)> = (0..acc[0].len() as u32)
        .map(|ni| {
            let c = k.bin("add.u32", RegKind::B32, col0, ni * 8);
            let ok = k.setp("lt.u32", c, n);
            let sh = k.bin("div.u32", RegKind::B32, c, hs.d);
            let d = k.bin("rem.u32", RegKind::B32, c, hs.d);
            let s = k.bin("div.u32", RegKind::B32, sh, hs.heads);
            let hh = k.bin("rem.u32", RegKind::B32, sh, hs.heads);
            let plane = k.tri("mad.lo.u32", RegKind::B32, s, hs.batch * hs.heads, hh);
            (k.tri("mad.lo.u32", RegKind::B32, plane, head_elems, d), ok)
        })
        .collect();
    let turned = hs.bf16_turned.then(|| {
        // A thread holds every column of its rows only on the wgmma engines.
        assert!(
            hs.d == 64 && spec.tile.cols().is_multiple_of(64) && spec.engine != Engine::Mma,
            "{}: turned heads are 64 wide, on a wgmma engine",
            spec.name()
        );
        // q and k (sections 0 and 1) are turned; v is not. A tile lies within one section.
        let tab = k.param_reg("rot_tab", ParamTy::U64);
        let s = k.bin("div.u32", RegKind::B32, col0, hs.heads * hs.d);
        (tab, k.setp("lt.u32", s, 2u32))
    });
    // bf16 stores in whole 32-byte sectors: each quad of lanes holds a row's 16 columns of two
    // column groups as four bf16 pairs a lane; after four shuffles, lane t stores columns
    // 4·(t mod 2) .. +4 of the group 2j + t / 2 (8 bytes).
    let quad = turned.map(|_| {
        let lane = k.bin("and.b32", RegKind::B32, h.tid, 31u32);
        let tq = k.bin("and.b32", RegKind::B32, lane, 3u32);
        let base = k.bin("and.b32", RegKind::B32, lane, !3u32);
        let odd = k.bin("and.b32", RegKind::B32, tq, 1u32);
        let src0 = k.tri("mad.lo.u32", RegKind::B32, odd, 2u32, base);
        let src1 = k.bin("add.u32", RegKind::B32, src0, 1u32);
        let upper = k.setp("ge.u32", tq, 2u32);
        // Element offset from the column group's own column (col0 + 8g = 8g + 2t) to this
        // lane's: 4·(t mod 2) − 2t.
        let a = k.bin("shl.b32", RegKind::B32, odd, 2u32);
        let b = k.bin("shl.b32", RegKind::B32, tq, 1u32);
        let shift = k.bin("sub.s32", RegKind::B32, a, b);
        (src0, src1, upper, shift)
    });
    for (mi, acc_m) in acc.iter().enumerate() {
        for half in 0..2usize {
            // Row b·T + t: b·H·T·D + t·D.
            let r = k.bin("add.u32", RegKind::B32, row0, (mi * 16 + half * 8) as u32);
            let row_ok = k.setp("lt.u32", r, m);
            let b = k.bin("div.u32", RegKind::B32, r, hs.t);
            let t = k.bin("rem.u32", RegKind::B32, r, hs.t);
            let td = k.bin("mul.lo.u32", RegKind::B32, t, hs.d);
            let row_part = k.tri("mad.lo.u32", RegKind::B32, b, hs.heads * head_elems, td);
            let mut vals: Vec<[Reg; 2]> = acc_m.iter().map(|c| [c[2 * half], c[2 * half + 1]]).collect();
            if let Some((tab, rotate)) = turned {
                vals = turn_pairs(k, &vals, tab, t, hs.t, col0, rotate);
            }
            if let Some((src0, src1, upper, shift)) = quad {
                let packed: Vec<Reg> = vals
                    .iter()
                    .map(|v| {
                        let pair = k.reg(RegKind::B32);
                        k.op("cvt.rn.bf16x2.f32", [pair.into(), v[1].into(), v[0].into()]);
                        pair
                    })
                    .collect();
                for j in 0..packed.len() / 2 {
                    let (x, y) = (packed[2 * j], packed[2 * j + 1]);
                    let get = |k: &mut Kernel, v: Reg, src: Reg| {
                        let d = k.reg(RegKind::B32);
                        k.op(
                            "shfl.sync.idx.b32",
                            [d.into(), v.into(), src.into(), 31u32.into(), 0xffff_ffffu32.into()],
                        );
                        d
                    };
                    let (x0, x1, y0, y1) = (get(k, x, src0), get(k, x, src1), get(k, y, src0), get(k, y, src1));
                    let p0 = k.tri("selp.b32", RegKind::B32, y0, x0, upper);
                    let p1 = k.tri("selp.b32", RegKind::B32, y1, x1, upper);
                    let (c_lo, ok_lo) = col_part[2 * j];
                    let (c_hi, ok_hi) = col_part[2 * j + 1];
                    let col = k.tri("selp.b32", RegKind::B32, c_hi, c_lo, upper);
                    let hi_ok = k.bin("and.pred", RegKind::Pred, upper, ok_hi);
                    let lower = k.un("not.pred", RegKind::Pred, upper);
                    let lo_ok = k.bin("and.pred", RegKind::Pred, lower, ok_lo);
                    let col_ok = k.bin("or.pred", RegKind::Pred, hi_ok, lo_ok);
                    let ok = k.bin("and.pred", RegKind::Pred, row_ok, col_ok);
                    let e0 = k.bin("add.u32", RegKind::B32, row_part, col);
                    let e = k.bin("add.s32", RegKind::B32, e0, shift);
                    let a = k.addr_of(c_base, e, 2);
                    k.op_if(ok, false, "st.global.v2.b32", [addr(a, 0), Opnd::V(vec![p0, p1])]);
                }
                continue;
            }
            for (v, &(col, col_ok)) in vals.iter().zip(&col_part) {
                let ok = k.bin("and.pred", RegKind::Pred, row_ok, col_ok);
                let e = k.bin("add.u32", RegKind::B32, row_part, col);
                let a = k.addr_of(c_base, e, 4);
                k.op_if(ok, false, "st.global.v2.f32", [addr(a, 0), Opnd::V(v.to_vec())]);
            }
        }
    }
}

/// One row's column-group pairs (`vals[ni]` at head element d = (col0 + 8·ni) mod 64 and the
/// next) turned by the rotary at position `pos` where `rotate` holds: each d < 32 with its partner
/// d + 32, four column groups on, in the same thread. The cosines and sines of the row's
/// position come from `tab` (`t` positions, cosines then sines, 32 a position); the arithmetic
/// is [`crate::kernels::attention::rotate_pairs`]'s, the attention kernels' own.
fn turn_pairs(k: &mut Kernel, vals: &[[Reg; 2]], tab: Reg, pos: Reg, t: u32, col0: Reg, rotate: Reg) -> Vec<[Reg; 2]> {
    let d0 = k.bin("and.b32", RegKind::B32, col0, 63u32);
    let row = k.tri("mad.lo.u32", RegKind::B32, pos, 32u32, d0);
    let ca = k.addr_of(tab, row, 4);
    let mut out = vals.to_vec();
    // Column group ni holds d0 + 8·(ni mod 8) of head ni / 8 of the tile; d0 < 8.
    let lows: Vec<usize> = (0..vals.len()).filter(|ni| ni % 8 < 4).collect();
    let mut table: Vec<Option<(Vec<Reg>, Vec<Reg>)>> = vec![None; 4];
    for ni in lows {
        let j = ni % 8;
        if table[j].is_none() {
            let c = k.regs(RegKind::F32, 2);
            let s = k.regs(RegKind::F32, 2);
            k.op("ld.global.nc.v2.f32", [Opnd::V(c.clone()), addr(ca, (8 * j * 4) as i64)]);
            k.op("ld.global.nc.v2.f32", [Opnd::V(s.clone()), addr(ca, (t * 32 * 4 + 8 * j as u32 * 4) as i64)]);
            table[j] = Some((c, s));
        }
        let (c, s) = table[j].clone().expect("loaded above");
        let (o1, o2) = crate::kernels::attention::rotate_pairs(k, &vals[ni], &vals[ni + 4], &c, &s, false);
        for e in 0..2 {
            out[ni][e] = k.tri("selp.f32", RegKind::F32, o1[e], vals[ni][e], rotate);
            out[ni + 4][e] = k.tri("selp.f32", RegKind::F32, o2[e], vals[ni + 4][e], rotate);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_renders_within_budget() {
        let all = GemmSpec::all();
        assert_eq!(all.len(), 176);
        for spec in all {
            let k = spec.kernel();
            k.check_budget().unwrap();
            let (bm, bn) = (spec.tile.rows(), spec.tile.cols());
            let text = k.render();
            assert!(text.contains(&format!(".visible .entry {}(", spec.name())));
            assert!(text.contains(&format!(".reqntid {}, 1, 1", spec.threads())));
            if spec.engine == Engine::Tma {
                // The consumer warpgroups and one producer warp; per stage one bulk copy of a
                // K-major operand or tile/64 of an MN-major one; no cp.async, no proxy fence.
                assert_eq!(spec.threads(), 2 * bm + 32);
                assert_eq!(k.dynamic_shared, crate::kernels::gemm::tma::shared_bytes(&spec));
                let boxes = |k_major: bool, rows: u32| if k_major { 1 } else { rows / 64 };
                let copies = boxes(spec.a == Layout::RowMajor, bm) + boxes(spec.b == Layout::ColMajor, bn);
                assert_eq!(text.matches("cp.async.bulk.tensor.2d").count() as u32, copies, "{}", spec.name());
                assert_eq!(text.matches("wgmma.mma_async").count() as u32, spec.bk / 16);
                assert!(!text.contains("cp.async.cg") && !text.contains("fence.proxy.async"));
                continue;
            }
            if spec.engine == Engine::Wgmma {
                // One warpgroup per 64 rows, a 64 × bn × 16 product per 16 of K, the ring in
                // dynamic shared memory; operands stored as not K-contiguous are read transposed.
                assert_eq!(spec.threads(), 2 * bm);
                assert_eq!(k.static_shared_bytes(), 0);
                assert_eq!(k.dynamic_shared, crate::kernels::gemm::wgmma::shared_bytes(&spec));
                let wgmma: Vec<&str> = text.lines().filter(|l| l.contains("wgmma.mma_async")).collect();
                assert_eq!(wgmma.len() as u32, spec.bk / 16, "{}", spec.name());
                let trans = (u32::from(spec.a == Layout::ColMajor), u32::from(spec.b == Layout::RowMajor));
                for l in wgmma {
                    assert!(l.contains(&format!("m64n{bn}k16.f32.bf16.bf16")), "{l}");
                    assert!(l.trim_end().ends_with(&format!("1, 1, {}, {};", trans.0, trans.1)), "{l}");
                }
                let async_copies = text.contains("cp.async.cg.shared.global");
                assert_eq!(async_copies, spec.a_input == Input::Bf16 || spec.b_input == Input::Bf16);
                continue;
            }
            assert_eq!(k.static_shared_bytes(), 2 * (bm + bn) * pitch_k(spec.bk));
            assert_eq!(
                text.matches("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32").count() as u32,
                2 * (spec.bk / 16) * (bm / 32) * (bn / 32),
                "two halves of the unrolled loop, bk/16 k16 steps each, of the warp's mma tiles"
            );
            // Operands are read with ldmatrix, transposing exactly those not stored K-contiguous.
            let trans = text.contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16");
            assert_eq!(trans, spec.a == Layout::ColMajor || spec.b == Layout::RowMajor, "{}", spec.name());
        }
    }

    #[test]
    fn shape_contract() {
        let s = GemmSpec::new(Layout::RowMajor, Layout::ColMajor, Input::F32);
        GemmShape::packed(&s, 1024, 12288, 512).check(&s).unwrap();
        GemmShape::packed(&s, 1024, 1408, 512).check(&s).unwrap();
        assert!(GemmShape::packed(&s, 1024, 1408, 500).check(&s).is_err());
        assert!(GemmShape::packed(&s, 1020, 1408, 512).check(&s).is_err());
        // Tiles fill the 132 SMs: one context's products take smaller tiles, 16 contexts' the
        // largest.
        assert_eq!(GemmShape::packed(&s, 1024, 512, 512).tile(), Tile::T64x64);
        assert_eq!(GemmShape::packed(&s, 1024, 1536, 512).tile(), Tile::T128x64);
        assert_eq!(GemmShape::packed(&s, 16384, 512, 512).tile(), Tile::T128x128);
        assert_eq!(GemmShape::packed(&s, 1024, 12288, 512).tile(), Tile::T128x128);
        // Weight gradients split K: 44 blocks → 352 (3 waves of 1/8 the K) at B = 16; 16 → 128;
        // none with a full grid or a short K.
        let wgrad = GemmSpec { a: Layout::ColMajor, b: Layout::RowMajor, ..s };
        assert_eq!(GemmShape::packed(&wgrad, 512, 1408, 16384).split_k(BK), 8);
        assert_eq!(GemmShape::packed(&wgrad, 512, 512, 16384).split_k(BK), 8);
        assert_eq!(GemmShape::packed(&wgrad, 512, 512, 1024).split_k(BK), 4);
        assert_eq!(GemmShape::packed(&wgrad, 512, 1408, 1024).split_k(BK), 2);
        assert_eq!(GemmShape::packed(&s, 1024, 512, 12288).split_k(BK), 4);
        assert_eq!(GemmShape::packed(&wgrad, 12288, 512, 16384).split_k(BK), 1);
        assert_eq!(GemmShape::packed(&wgrad, 1024, 512, 512).split_k(BK), 1);
        // Parts that may differ by a K step: 44 tiles take 3 (one wave), 48 and 16 keep 8, and
        // one context's K keeps its power of two.
        assert_eq!(GemmShape::packed(&wgrad, 512, 1408, 16384).split_k_uneven(BK), 3);
        assert_eq!(GemmShape::packed(&wgrad, 1408, 512, 16384).split_k_uneven(BK), 3);
        assert_eq!(GemmShape::packed(&wgrad, 512, 1536, 16384).split_k_uneven(BK), 8);
        assert_eq!(GemmShape::packed(&wgrad, 512, 512, 16384).split_k_uneven(BK), 8);
        assert_eq!(GemmShape::packed(&wgrad, 512, 1408, 1024).split_k_uneven(BK), 2);
        assert_eq!(GemmShape::packed(&wgrad, 12288, 512, 16384).split_k_uneven(BK), 1);
        // A slice of K: rows of the column-major A, elements of the row-major... B here.
        let sh = GemmShape::packed(&wgrad, 512, 1408, 16384);
        let part = sh.split(&wgrad, 8);
        assert_eq!((part.k, part.batch, part.stride_a, part.stride_b), (2048, 8, 2048 * 512, 2048 * 1408));
        let sh = GemmShape::packed(&s, 1024, 512, 1408);
        assert_eq!((sh.split(&s, 4).stride_a, sh.split(&s, 4).stride_b), (352, 352));
    }

    #[test]
    fn reference_matches_naive_on_bf16_exact_values() {
        // Small integers are exact in bf16, so the reference equals the naive product.
        let s = GemmSpec {
            epilogue: Epilogue::Accumulate,
            ..GemmSpec::new(Layout::ColMajor, Layout::RowMajor, Input::F32)
        };
        let sh = GemmShape::packed(&s, 8, 8, 32);
        let a: Vec<f32> = (0..256).map(|i| (i % 7) as f32 - 3.0).collect();
        let b: Vec<f32> = (0..256).map(|i| (i % 5) as f32 - 2.0).collect();
        let mut c = vec![1.0f32; 64];
        reference(&s, &sh, &a, &b, &[], &mut c);
        for i in 0..8 {
            for j in 0..8 {
                let mut want = 1.0;
                for kk in 0..32 {
                    want += a[kk * 8 + i] * b[kk * 8 + j];
                }
                assert_eq!(c[i * 8 + j], want);
            }
        }
    }
}
