//! Measurement knobs: environment variables that each switch one lowering or launch choice, so
//! two variants can be timed from the same binary on the same GPU. Read once per process; every
//! default is the measured choice (see `bench/results/`).
//!
//! | variable | effect |
//! |---|---|
//! | `ALPHA_GEMM_ENGINE=mma\|wgmma` | matrix products on `mma.sync`, or on `wgmma` fed by the `cp.async` ring only (not the TMA-fed engine) |
//! | `ALPHA_GEMM_STAGES=n` | the `wgmma` ring's depth (3 for bf16 operands only, else ≥ 4) |
//! | `ALPHA_GEMM_SPLITK=off` | no split-K |
//! | `ALPHA_FUSE_HEADS=off` | no head-split stores (the permutes after the q/k/v projection and the output gradient run) |
//! | `ALPHA_PDL=off` | plain launches instead of programmatic dependent launches |
//! | `ALPHA_PDL_TRIGGER=start\|epilogue` | kernels let the next kernel launch as they start, or (TMA products) as each block's products are done and its epilogue begins, not as they exit (both measured slower; `epilogue`, g96: one context 3.74 against 3.67 ms, sixteen 22.24 against 22.07 ms) |
//! | `ALPHA_PW_VECTOR=off` | pointwise kernels one element a thread |
//! | `ALPHA_LN_FOLD=beside\|separate` | LayerNorm's band fold beside the input gradient's rows, or a launch of its own, at every size |
//! | `ALPHA_CAST_INTO_GEMM=on\|off` | bf16 casts read only by GEMMs folded into their loads (the GEMMs then read f32 on the `cp.async` ring), or launched (the GEMMs read bf16 on the TMA engine) |
//! | `ALPHA_ATTN_BF16=off` | attention reads f32 q, k, v and turns q and k on load, instead of bf16 ones the projection stores turned |
//! | `ALPHA_ATTN_MERGED=off` | the bf16 attention backward stores f32 dq, dk, dv (a permute then casts them together) instead of the permuted bf16 gradient itself |
//! | `ALPHA_MUL_EPILOGUE=off` | a gated unit's multiply runs as its own launch, not in the second half's product epilogue |
//! | `ALPHA_LN_COPY=off` | the residual gradient's bf16 cast after a LayerNorm backward runs as its own launch instead of being stored by the LayerNorm backward |
//! | `ALPHA_ATTN_OCOPY=off` | the attention output's permute-and-cast runs as its own launch instead of the bf16 attention forward storing the copy |
//! | `ALPHA_RECOMPUTE=off` | fused elementwise chains read a unary function of their inputs instead of recomputing it |
//! | `ALPHA_CHAIN_EPILOGUE=on\|off` | a fused elementwise chain that alone reads a plain product runs in the product's epilogue at every grid, or at none (default: over deep grids) |
//! | `ALPHA_LN_PARTIALS=off` | a LayerNorm backward over many bands runs its gain and bias pass 1 as a launch of its own instead of in the input gradient's launch |
//! | `ALPHA_TWO_BLOCKS=off` | the TMA engine's three-stage kernels without `.minnctapersm 2` (ptxas may then take more registers than two blocks an SM leave) |
//! | `ALPHA_RING_WAVES=n` | bf16 products of at least n waves of blocks take the three-stage ring (default 3) |
//! | `ALPHA_MUL_RECOMPUTE=off` | a StoreMul epilogue reads the stored activation (`gelu(gate)`) instead of computing it from the gate, and that activation is stored |
//! | `ALPHA_WIDE_STORES=off` | GEMM epilogues store each fragment's two values (8 bytes a thread) instead of four consecutive ones after a quad exchange (16 bytes) |
//! | `ALPHA_LN_FOLD_TOGETHER=off` | each LayerNorm backward over many bands runs its gain and bias pass 2 as its own launch, instead of one launch for all of them after the last |
//! | `ALPHA_CLUSTER_SPLITK=on\|shallow` | a thread-block cluster sums split-K parts in distributed shared memory at every grid (`shallow`: grids of one wave), instead of scratch and a reduction launch (measured slower, g56) |
//! | `ALPHA_SPLITK_FIXUP=on` | split-K parts summed by the last part of each tile to finish ([`crate::gemm::GemmSpec::fixup_splits`]) instead of by a reduction launch after the parts (bit for bit the same; measured slower in the step, g73: one context's 3.665 → 4.00 ms with 145 launches fewer, sixteen contexts' 22.04 → 22.46 ms with 80 fewer) |
//! | `ALPHA_GATED=off` | a gated unit's gate and up products in two launches (the second reading the stored gate back) instead of one launch computing both ([`crate::gemm::GemmSpec::gated`]) |
//! | `ALPHA_SPLITK_UNEVEN=off` | split-K over long K in power-of-two parts only, instead of any count up to 8 whose parts may differ by a K step (TMA engine) |
//! | `ALPHA_PAIRED=off` | a residual-adding product and the plain product whose output it adds in two launches, instead of one launch summing both in one accumulator |
//! | `ALPHA_STAGED_EPILOGUE=off\|chains\|adds\|all` | which TMA epilogues run through shared memory a row a warp ([`crate::gemm_tma::staged`]) instead of on the accumulator fragments: none, chains only, chains and residual or accumulating adds, or plain f32 stores too (default: chains, adds, and the plain stores of tall outputs, [`crate::gemm::GemmSpec::staged_store`]; every plain store measured 0.05–0.07 ms slower at one context, g69) |
//! | `ALPHA_DELTA_EPILOGUE=off` | attention's delta (and its bf16 dO) computed by a launch of its own from the f32 dO, instead of by the epilogue of the product that computes dO ([`crate::gemm::Heads::delta`]) |
//! | `ALPHA_PERSISTENT=fragments\|rings` | TMA products over more than one wave of blocks in persistent blocks walking the tiles ([`crate::gemm::GemmSpec::persistent`]) where the epilogue does not work in the ring, or (`rings`) at every epilogue, instead of a block a tile (measured slower, g83: sixteen contexts' step 21.96 / 22.16 / 21.89 ms a block a tile, 22.05 / 22.33 / 22.02 `fragments`, 22.60 / 22.59 / 22.50 `rings`) |
//! | `ALPHA_SYNC_RUN=on` | each run of a phase waits for the device before returning, instead of leaving the wait to the next read or copy |
//! | `ALPHA_PINGPONG=on` | persistent products (`ALPHA_PERSISTENT`) in blocks of two math groups taking turns at the products ([`crate::gemm::GemmSpec::pingpong`]), one block an SM |
//! | `ALPHA_ATTN_JOINT=off` | attention's dQ and dK/dV passes in two launches, one after the other |
//! | `ALPHA_CE_STATS=on` | the logits' product also writes per-tile row statistics where it stores through shared memory ([`crate::gemm::GemmSpec::row_stats`]) and the cross-entropy forward combines them instead of re-reading the logits (g107, sixteen contexts: the forward 0.186 → 0.010 ms but the product 445 → 518 µs, the step 21.50 / 21.51 against 21.51 / 21.64 ms; the gradient gate, forced on at one context, 1.06e-2 against its 1e-2) |
//! | `ALPHA_SCATTER_SEGMENTS=n` | the embedding gradient's scatter-add over n segments of the tokens, added in turn ([`crate::embedding::scatter_add_kernel_segmented`]), instead of one pass (g105: sixteen contexts' scatter-add 0.212 → 0.150 ms with 4, within the step's noise) |
//! | `ALPHA_ATTN_ONEPASS=on` | the bf16 attention backward in one pass summing dQ in a fixed order ([`crate::attention_mma::backward_kernel_onepass`]) instead of the joint kernel (measured slower, g101: 273 against 256 µs alone at sixteen contexts) |
//! | `ALPHA_ATTN_WGMMA=off` | the bf16 attention forward on `mma.sync` ([`crate::attention_mma::forward_kernel_bf16`]) instead of `wgmma` ([`crate::attention_wgmma`]; the same bits, g108: sixteen contexts' forward 103.2 → 77.2 µs alone, the step 21.75 / 21.75 → 21.54 / 21.28 ms) |
//! | `ALPHA_ATTN_WGMMA_BWD=off` | the bf16 joint attention backward on `mma.sync` ([`crate::attention_mma::backward_kernel_bf16`]) instead of `wgmma` ([`crate::attention_wgmma::backward_kernel`]; the same bits, g109: sixteen contexts' backward 253.9 → 193.8 µs alone, the step 21.27 / 21.97 → 20.43 / 20.49 ms) |

use std::sync::OnceLock;

/// The knobs of this process.
#[derive(Clone, Copy, Debug)]
pub struct Knobs {
    /// Products on the `mma.sync` engine.
    pub mma_engine: bool,
    /// bf16 products on `wgmma` fed by the tensor memory accelerator.
    pub tma_engine: bool,
    /// A forced ring depth (0: the lowering's choice).
    pub ring_stages: u32,
    /// Split-K allowed.
    pub split_k: bool,
    /// A forced head-split choice (None: by size).
    pub head_split: Option<bool>,
    /// Programmatic dependent launches.
    pub dependent_launch: bool,
    /// Kernels execute `griddepcontrol.launch_dependents` as they start (else the next kernel
    /// launches as their blocks exit).
    pub early_trigger: bool,
    /// TMA products let the next kernel launch as each block's epilogue begins.
    pub epilogue_trigger: bool,
    /// Pointwise kernels four elements a thread where they can.
    pub pointwise_vector: bool,
    /// A forced choice of LayerNorm's band fold in the input-gradient launch (None: by size).
    pub ln_fold: Option<bool>,
    /// A forced choice of folding bf16 casts into the loads of the GEMMs reading them (None: the
    /// lowering's choice).
    pub cast_into_gemm: Option<bool>,
    /// Attention reads bf16 q, k, v stored turned by the projection, where the plan allows.
    pub bf16_attention: bool,
    /// The bf16 attention backward stores the projection's permuted bf16 gradient itself.
    pub merged_gradients: bool,
    /// A multiply after a product fused into the product's epilogue where the plan allows.
    pub mul_epilogue: bool,
    /// A LayerNorm backward also stores the bf16 cast of the residual gradient it adds.
    pub layernorm_copy: bool,
    /// The bf16 attention forward stores its output's permuted bf16 copy.
    pub output_copy: bool,
    /// Fused chains recompute an input that is a unary function of another input.
    pub recompute_unary: bool,
    /// Attention's two backward passes in one launch where the plan allows.
    pub joint_attention_backward: bool,
    /// The one-pass attention backward (opt-in: measured slower).
    pub onepass_attention: bool,
    /// A forced count of the scatter-add's token segments (None: one, the plain kernel).
    pub scatter_segments: Option<u32>,
    /// The logits' product writes per-row statistics for the cross-entropy where it can
    /// (opt-in).
    pub ce_stats: bool,
    /// The bf16 attention forward on `wgmma` ([`crate::attention_wgmma`]) where it applies.
    pub wgmma_attention: bool,
    /// The bf16 joint attention backward on `wgmma` ([`crate::attention_wgmma::backward_kernel`]).
    pub wgmma_attention_backward: bool,
    /// A forced choice of running a chain that alone reads a plain product in the product's
    /// epilogue everywhere (`on`) or nowhere (`off`); None: over deep grids only.
    pub chain_epilogue: Option<bool>,
    /// A LayerNorm backward over many bands runs pass 1 in its input gradient's launch.
    pub ln_partials: bool,
    /// The TMA engine's three-stage kernels are held to two blocks' registers an SM.
    pub two_blocks: bool,
    /// A StoreMul epilogue computes its multiplier's activation from the earlier product, and
    /// an activation no launch then reads is not stored.
    pub mul_recompute: bool,
    /// GEMM epilogues store four consecutive values a thread after a quad exchange.
    pub wide_stores: bool,
    /// The pass 2 folds of LayerNorm backwards over many bands run as one launch after the last.
    pub ln_fold_together: bool,
    /// A forced threshold (waves of blocks) for the three-stage ring (None: the default).
    pub ring_waves: Option<u32>,
    /// Split-K parts summed in a thread-block cluster over grids of at most this many waves
    /// (None: nowhere).
    pub cluster_split_waves: Option<u32>,
    /// Attention's delta and bf16 dO stored by the product computing dO.
    pub delta_epilogue: bool,
    /// Split-K parts summed by each tile's last part to finish, not a reduction launch.
    pub split_fixup: bool,
    /// A gated unit's gate and up products in one launch where the plan allows.
    pub gated_products: bool,
    /// Split-K over long K in any count of parts up to 8 (parts may differ by a K step).
    pub uneven_split: bool,
    /// A residual-adding product and the product it adds in one launch where the plan allows.
    pub paired_products: bool,
    /// Which TMA epilogues run through shared memory, a row a warp.
    pub staged_epilogues: StagedEpilogues,
    /// Which TMA products walk their tiles in persistent blocks.
    pub persistent: Persistent,
    /// Persistent products in blocks of two math groups taking turns.
    pub pingpong: bool,
    /// Each run of a phase waits for the device before returning.
    pub sync_each_run: bool,
}

/// Which products are persistent ([`Knobs::persistent`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistent {
    /// None (the default).
    None,
    /// Deep grids whose epilogue does not work in the ring.
    FragmentEpilogues,
    /// Deep grids, every epilogue.
    All,
}

/// Which TMA epilogues run through shared memory ([`Knobs::staged_epilogues`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StagedEpilogues {
    None,
    /// Chain epilogues only.
    Chains,
    /// Chains, and residual or accumulating adds.
    Adds,
    /// Those, and the plain f32 stores the lowering marks ([`crate::gemm::GemmSpec::staged_store`]:
    /// tall outputs) (the default).
    Tall,
    /// Those, and every plain f32 store (measured slower at one context, g69).
    All,
}

/// The knobs, read from the environment on first use.
pub fn knobs() -> &'static Knobs {
    static KNOBS: OnceLock<Knobs> = OnceLock::new();
    KNOBS.get_or_init(|| {
        let var = |name: &str| std::env::var(name).ok();
        // A choice forced either way (`yes` or `no`), or left to the lowering.
        let forced = |name: &str, yes: &str, no: &str| match var(name).as_deref() {
            Some(v) if v == yes => Some(true),
            Some(v) if v == no => Some(false),
            _ => None,
        };
        // On unless set to `off`.
        let on = |name: &str| var(name).as_deref() != Some("off");
        Knobs {
            mma_engine: var("ALPHA_GEMM_ENGINE").as_deref() == Some("mma"),
            tma_engine: !matches!(var("ALPHA_GEMM_ENGINE").as_deref(), Some("mma" | "wgmma")),
            ring_stages: var("ALPHA_GEMM_STAGES").and_then(|s| s.parse().ok()).unwrap_or(0),
            split_k: on("ALPHA_GEMM_SPLITK"),
            head_split: forced("ALPHA_FUSE_HEADS", "on", "off"),
            dependent_launch: on("ALPHA_PDL"),
            early_trigger: var("ALPHA_PDL_TRIGGER").as_deref() == Some("start"),
            epilogue_trigger: var("ALPHA_PDL_TRIGGER").as_deref() == Some("epilogue"),
            pointwise_vector: on("ALPHA_PW_VECTOR"),
            bf16_attention: on("ALPHA_ATTN_BF16"),
            merged_gradients: on("ALPHA_ATTN_MERGED"),
            mul_epilogue: on("ALPHA_MUL_EPILOGUE"),
            layernorm_copy: on("ALPHA_LN_COPY"),
            output_copy: on("ALPHA_ATTN_OCOPY"),
            recompute_unary: on("ALPHA_RECOMPUTE"),
            cast_into_gemm: forced("ALPHA_CAST_INTO_GEMM", "on", "off"),
            ln_fold: forced("ALPHA_LN_FOLD", "beside", "separate"),
            joint_attention_backward: on("ALPHA_ATTN_JOINT"),
            onepass_attention: var("ALPHA_ATTN_ONEPASS").as_deref() == Some("on"),
            scatter_segments: var("ALPHA_SCATTER_SEGMENTS").and_then(|s| s.parse().ok()),
            ce_stats: var("ALPHA_CE_STATS").as_deref() == Some("on"),
            wgmma_attention: var("ALPHA_ATTN_WGMMA").as_deref() != Some("off"),
            wgmma_attention_backward: var("ALPHA_ATTN_WGMMA_BWD").as_deref() != Some("off"),
            chain_epilogue: forced("ALPHA_CHAIN_EPILOGUE", "on", "off"),
            ln_partials: on("ALPHA_LN_PARTIALS"),
            two_blocks: on("ALPHA_TWO_BLOCKS"),
            mul_recompute: on("ALPHA_MUL_RECOMPUTE"),
            wide_stores: on("ALPHA_WIDE_STORES"),
            ln_fold_together: on("ALPHA_LN_FOLD_TOGETHER"),
            ring_waves: var("ALPHA_RING_WAVES").and_then(|s| s.parse().ok()),
            cluster_split_waves: match var("ALPHA_CLUSTER_SPLITK").as_deref() {
                Some("on") => Some(u32::MAX),
                Some("shallow") => Some(1),
                _ => None,
            },
            delta_epilogue: on("ALPHA_DELTA_EPILOGUE"),
            split_fixup: var("ALPHA_SPLITK_FIXUP").as_deref() == Some("on"),
            gated_products: on("ALPHA_GATED"),
            uneven_split: on("ALPHA_SPLITK_UNEVEN"),
            paired_products: on("ALPHA_PAIRED"),
            persistent: match var("ALPHA_PERSISTENT").as_deref() {
                Some("fragments") => Persistent::FragmentEpilogues,
                Some("rings") => Persistent::All,
                _ => Persistent::None,
            },
            pingpong: var("ALPHA_PINGPONG").as_deref() == Some("on"),
            sync_each_run: var("ALPHA_SYNC_RUN").as_deref() == Some("on"),
            staged_epilogues: match var("ALPHA_STAGED_EPILOGUE").as_deref() {
                Some("off") => StagedEpilogues::None,
                Some("chains") => StagedEpilogues::Chains,
                Some("adds") => StagedEpilogues::Adds,
                Some("all") => StagedEpilogues::All,
                _ => StagedEpilogues::Tall,
            },
        }
    })
}
