//! The GEMM's spec (tile, layouts, inputs, epilogue, engine, heads, chain, tuning) and shape:
//! what a product kernel is built from and launched over. A kernel's PTX is a function of its
//! spec alone.

use super::*;

/// The K step of the usual kernels (see [`GemmSpec::bk`]).
pub const BK: u32 = 32;
/// Threads per block.
pub const THREADS: u32 = 256;
/// Arguments every GEMM launch starts with, before its extras ([`Extras`]): A, B, C, R, the six
/// dimensions and the three batch strides (see [`launch_with`]).
pub const SHAPE_ARGS: usize = 13;
/// Shared-memory row pitch in bytes of a K-contiguous tile: `bk` bf16 padded by 16 bytes (80 at
/// a K step of 32), so the eight rows one `ldmatrix` reads fall in eight 16-byte bank groups.
pub(super) const fn pitch_k(bk: u32) -> u32 {
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
/// The H200's measured bf16 tensor rate (FLOP/s) and DRAM bandwidth (bytes/s): what the split
/// rules weigh a product's tiles against its partials' traffic with.
pub const PEAK_FLOPS: f64 = 790e12;
pub const DRAM_BYTES: f64 = 3.0e12;

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
    /// Stored as bf16 as they are, no section turned: q, k and v of an attention without a
    /// rotary (GPT-2's learned positions), which the bf16 attention kernels copy as they are.
    /// Heads of 64, on a `wgmma` engine, as [`Heads::bf16_turned`].
    pub bf16: bool,
    /// A row added to the product before the store (param `bias`, after the others: f32, one
    /// value a column of the product): a linear layer's bias, whose Add then needs no launch.
    pub bias: bool,
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
/// product's element (f32, the product's shape and row-major layout) or, for a row input, at
/// its column (f32, one value a column of the product: a linear layer's bias, so that the bias
/// add joins its product with the GELU or residual add after it), and its outputs are stored
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
    /// Bit j set: input j is a row, read at the product's column.
    rows: u8,
    /// A step whose values are also summed down each column of the tile ([`Self::column_sum`]).
    column_sum: Option<u8>,
}

impl ChainEpilogue {
    /// `chain` with its input `product` taken from the accumulator; None where it exceeds the
    /// capacity, is not a valid chain, or reads an input other than at its element or as a row
    /// (the caller checks that a row is as long as the product's rows).
    pub fn new(chain: &Chain, product: usize) -> Option<ChainEpilogue> {
        let fits = chain.steps.len() <= CHAIN_STEPS
            && chain.outputs.len() <= CHAIN_PTRS
            && chain.inputs <= CHAIN_PTRS + 1
            && product < chain.inputs
            && chain.validate().is_ok();
        if !fits {
            return None;
        }
        let mut rows = 0u8;
        for j in 0..chain.inputs {
            match chain.broadcast_of(j) {
                Broadcast::None => {}
                Broadcast::Row(_) if j != product => rows |= 1 << j,
                _ => return None,
            }
        }
        let mut steps = [None; CHAIN_STEPS];
        for (slot, st) in steps.iter_mut().zip(&chain.steps) {
            *slot = Some(*st);
        }
        let mut outputs = [None; CHAIN_PTRS];
        for (j, (slot, &o)) in outputs.iter_mut().zip(&chain.outputs).enumerate() {
            *slot = Some((o as u8, chain.bf16.get(j).copied().unwrap_or(false)));
        }
        Some(ChainEpilogue {
            steps,
            inputs: chain.inputs as u8,
            product: product as u8,
            outputs,
            rows,
            column_sum: None,
        })
    }

    /// The chain whose step `step` is also summed down each column of every tile, in the staged
    /// epilogue alone ([`crate::kernels::gemm::tma::staged`]): the block adds its rows in a fixed
    /// order and stores its tile's sums at `chain_sums[col · row_tiles + tile_row]` (param
    /// `chain_sums`, after the chain's other pointers; `row_tiles` = ⌈M / 128⌉), the partials a
    /// column sum's finishing pass ([`crate::kernels::reduce::Reduction::finish_kernel_over`])
    /// adds in order. Why: a bias gradient is the column sum of a product's chain output (GPT-2's
    /// first MLP bias: dH, 201 MB of f32 at sixteen contexts) that was stored only for a launch of
    /// its own to read it back.
    pub fn with_column_sum(self, step: usize) -> ChainEpilogue {
        ChainEpilogue { column_sum: Some(step as u8), ..self }
    }

    /// The step summed down the columns ([`Self::with_column_sum`]).
    pub fn column_sum(&self) -> Option<usize> {
        self.column_sum.map(usize::from)
    }

    /// The pointers the kernel takes for the chain: its outputs, its other inputs, and the
    /// column sums' partials where it sums.
    pub fn pointers(&self) -> usize {
        self.outputs().len() + self.others().len() + usize::from(self.column_sum.is_some())
    }

    /// Whether chain input `j` is a row, read at the product's column.
    pub fn is_row(&self, j: usize) -> bool {
        self.rows & (1 << j) != 0
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
        for j in (0..self.inputs as usize).filter(|&j| self.is_row(j)) {
            out.push_str(&format!("_row{j}"));
        }
        if let Some(s) = self.column_sum {
            out.push_str(&format!("_colsum{s}"));
        }
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
    /// A [`Self::staged_store`] into a C whose row (`ldc`) and width (`n`) need only be even,
    /// not multiples of 8: each lane's four columns go as two 8-byte stores, each inside C or
    /// not. Why: a product padded to the tiled sizes (Diakosmos's 1,330- and 3,990-wide
    /// tensors, whose bf16 rows are not 16-byte aligned for the tensor maps) then stores its
    /// output in place, where a whole copy out of the padded product followed (a read and a
    /// write of 0.7–2.1 GB a product at 64 windows).
    pub narrow_store: bool,
    /// With [`Self::narrow_store`], a row added to the product before the store (param `bias`,
    /// last: f32, one value a column): the linear layer's bias whose Add then needs no launch
    /// (Diakosmos's q/k/v projection, a read and a write of 2.1 GB at 64 windows).
    pub narrow_bias: bool,
    /// A [`Self::staged_store`] of C rounded to bf16 (C then a bf16 tensor, `ldc` in its
    /// elements): the cast that alone reads the product, stored by it. Why: GPT-2's logits,
    /// which its loss reads rounded (3.3 GB of f32 at sixteen contexts, where bf16 is 1.6 GB).
    pub store_bf16: bool,
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
            narrow_store: false,
            narrow_bias: false,
            store_bf16: false,
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

    /// Whether the kernel takes a bias row ([`Extras::bias`]): a head-split store's
    /// ([`Heads::bias`]) or a narrow store's ([`Self::narrow_bias`]).
    pub fn takes_bias(&self) -> bool {
        self.heads.is_some_and(|h| h.bias) || self.narrow_bias
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
            if h.bf16 {
                tile.push_str("_bf16");
            }
            if h.bias {
                tile.push_str("_bias");
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
            if self.narrow_store {
                tile.push_str("_narrow");
            }
            if self.narrow_bias {
                tile.push_str("_bias");
            }
            if self.store_bf16 {
                tile.push_str("_h");
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
        assert!(
            !self.store_bf16
                || (self.engine == Engine::Tma
                    && !self.narrow_store
                    && crate::kernels::gemm::tma::staged(self) == Some(crate::kernels::gemm::tma::Staged::Store)),
            "{}: a bf16 C is stored by the staged plain store of the TMA engine alone",
            self.name()
        );
        let sums = self.chain.is_some_and(|c| c.column_sum().is_some());
        assert!(
            !sums
                || (self.engine == Engine::Tma
                    && crate::kernels::gemm::tma::staged(self) == Some(crate::kernels::gemm::tma::Staged::Chain)),
            "{}: a chain's column sums are taken in the staged epilogue of the TMA engine alone",
            self.name()
        );
        match self.engine {
            Engine::Mma => build(self),
            Engine::Wgmma => crate::kernels::gemm::wgmma::build(self),
            Engine::Tma => crate::kernels::gemm::tma::build(self),
        }
    }
}

/// Of `start` and the part counts `allowed`, the one of least `cost` (the earlier on a tie).
fn cheapest_by(start: u32, allowed: impl IntoIterator<Item = u32>, cost: impl Fn(u32) -> f64) -> u32 {
    allowed.into_iter().fold(start, |best, s| if cost(s) < cost(best) { s } else { best })
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
        // A narrow store takes any even N and row of C ([`GemmSpec::narrow_store`]).
        let c_unit = if spec.narrow_store { 2 } else { 8 };
        if !self.m.is_multiple_of(8) || !self.n.is_multiple_of(c_unit) {
            bail!("{name}: M = {} must be a multiple of 8 and N = {} of {c_unit}", self.m, self.n);
        }
        if !self.lda.is_multiple_of(8) || !self.ldb.is_multiple_of(8) || !self.ldc.is_multiple_of(c_unit) {
            bail!("{name}: leading dimensions must be multiples of 8 (C's of {c_unit}): {self:?}");
        }
        if spec.narrow_store && !(spec.staged_store && spec.engine == Engine::Tma && spec.epilogue == Epilogue::Store) {
            bail!("{name}: a narrow store is a staged plain store on the TMA engine");
        }
        if spec.narrow_bias && !spec.narrow_store {
            bail!("{name}: a bias row is added by a narrow store only");
        }
        if spec.store_bf16
            && !(spec.staged_store && !spec.narrow_store && spec.engine == Engine::Tma && self.batch == 1)
        {
            bail!("{name}: a bf16 C is stored by an unbatched staged plain store on the TMA engine");
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
        cheapest_by(start, allowed, |s| self.split_cost(s))
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

    /// Parts (up to 4, whole K steps that may differ by one) for an unbatched grid over a K of at
    /// least [`UNEVEN_MIN_K`], of at least a wave, whose SMs would hold unequal
    /// numbers of tiles, where splitting K evens them out by more than the partials' reduction
    /// costs: the tiles' products at the SM's full rate ([`PEAK_FLOPS`]) on the most loaded SM,
    /// plus the parts written and read back at [`DRAM_BYTES`] a second, at least a tenth below
    /// the whole product's. Why: GPT-2's MLP weight gradients (768 × 3,072 over K = 16,384) are
    /// 144 tiles, so 12 SMs take two while 120 take one, and the launch ran as long as two tiles
    /// (444 TFLOP/s); in three or four parts the most loaded SM holds 1.3 tiles' work.
    pub fn split_ragged_waves(&self, bk: u32) -> u32 {
        let blocks = self.m.div_ceil(128) * self.n.div_ceil(128);
        if self.batch != 1 || blocks < SMS || self.k < UNEVEN_MIN_K || !self.k.is_multiple_of(bk) {
            return 1;
        }
        let tile_s = 2.0 * 128.0 * 128.0 * self.k as f64 / (PEAK_FLOPS / SMS as f64);
        let partials = self.m as f64 * self.n as f64 * 4.0;
        let cost = |s: u32| {
            let reduce = if s == 1 { 0.0 } else { (2 * s + 1) as f64 * partials / DRAM_BYTES };
            self.split_cost(s) * tile_s + reduce
        };
        let best = cheapest_by(1, (2..=4u32).filter(|&s| self.k / s >= 256), cost);
        if cost(best) < 0.9 * cost(1) {
            best
        } else {
            1
        }
    }

    /// [`GemmShape::split_k_uneven`], or over a K of at least four [`LONG_K_PART`]s, parts of
    /// about one (up to 8), whichever is more. Why: an unbatched product's blocks walk K in near
    /// step at first, sharing each K step's operand slices in L2, then drift apart over a long
    /// K (and a later wave starts where the last left off), until their slices no longer fit
    /// L2: on the H200 Diakosmos's weight gradient `cr` 3,990 × 1,330 over K = 131,072 found
    /// 60% of its reads in L2 and ran L2-bound at 228 TFLOP/s (1,330 × 1,330: 150), where
    /// products over K = 16,384 reach 495–658, and a 256 × 1,344 one over the same K split in
    /// parts 612. GPT-2's input gradient through the vocabulary (K = 50,304) runs at 647 whole,
    /// so the rule starts above it.
    pub fn split_k_long(&self, bk: u32) -> u32 {
        let split = self.split_k_uneven(bk);
        if self.batch != 1 || self.k < 4 * LONG_K_PART || !self.k.is_multiple_of(bk) {
            return split;
        }
        split.max(self.k.div_ceil(LONG_K_PART).min(8))
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
