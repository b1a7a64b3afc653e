//! The CUDA backend's configuration: one value, built once and passed to the lowering
//! ([`crate::lower::lower_program`]), which hands the kernel-level choices to the kernel specs it
//! builds ([`crate::gemm::GemmTuning`]), and to the runtime ([`crate::CudaBackend::compile`]).
//! No kernel builder, renderer or lowering pass reads the environment: a kernel's PTX is a
//! function of its spec, and a test sets any switch by building the value it wants.
//!
//! Why switches at all: each one turns off (or forces) one measured choice, so that two variants
//! can be timed from the same binary on the same GPU. Every default is the measured choice
//! (`bench/results/`). [`CudaConfig::from_env`] reads them from `ALPHA_*` variables; only the
//! command line's backend constructor calls it.
//!
//! | variable | field | effect |
//! |---|---|---|
//! | `ALPHA_GEMM_ENGINE=mma\|wgmma\|tma` | [`CudaConfig::gemm_engine`] | matrix products on `mma.sync`, on `wgmma` fed by the `cp.async` ring only, or (default) bf16 products on the TMA-fed engine |
//! | `ALPHA_GEMM_STAGES=n` | [`CudaConfig::ring_stages`] | the `wgmma` ring's depth (3 for bf16 operands only, else ≥ 4) |
//! | `ALPHA_GEMM_SPLITK=off` | [`CudaConfig::split_k`] | no split-K |
//! | `ALPHA_FUSE_HEADS=on\|off` | [`CudaConfig::head_split`] | no head-split stores (the permutes after the q/k/v projection and the output gradient run) |
//! | `ALPHA_PDL=off` | [`CudaConfig::dependent_launch`] | plain launches instead of programmatic dependent launches |
//! | `ALPHA_PDL_TRIGGER=start\|epilogue` | [`CudaConfig::early_trigger`], [`crate::gemm::GemmTuning::epilogue_trigger`] | kernels let the next kernel launch as they start, or (TMA products) as each block's products are done and its epilogue begins, not as they exit (both measured slower; `epilogue`, g96: one context 3.74 against 3.67 ms, sixteen 22.24 against 22.07 ms) |
//! | `ALPHA_PW_VECTOR=off` | [`CudaConfig::pointwise_vector`] | pointwise kernels one element a thread |
//! | `ALPHA_LN_FOLD=beside\|separate` | [`CudaConfig::ln_fold`] | LayerNorm's band fold beside the input gradient's rows, or a launch of its own, at every size |
//! | `ALPHA_CAST_INTO_GEMM=on\|off` | [`CudaConfig::fold_casts_into_gemms`] | bf16 casts read only by GEMMs folded into their loads (the GEMMs then read f32 on the `cp.async` ring), or (default) launched (the GEMMs read bf16 on the TMA engine) |
//! | `ALPHA_ATTN_BF16=off` | [`CudaConfig::bf16_attention`] | attention reads f32 q, k, v and turns q and k on load, instead of bf16 ones the projection stores turned |
//! | `ALPHA_ATTN_MERGED=off` | [`CudaConfig::merged_gradients`] | the bf16 attention backward stores f32 dq, dk, dv (a permute then casts them together) instead of the permuted bf16 gradient itself |
//! | `ALPHA_MUL_EPILOGUE=off` | [`CudaConfig::mul_epilogue`] | a gated unit's multiply runs as its own launch, not in the second half's product epilogue |
//! | `ALPHA_LN_COPY=off` | [`CudaConfig::layernorm_copy`] | the residual gradient's bf16 cast after a LayerNorm backward runs as its own launch instead of being stored by the LayerNorm backward |
//! | `ALPHA_ATTN_OCOPY=off` | [`CudaConfig::output_copy`] | the attention output's permute-and-cast runs as its own launch instead of the bf16 attention forward storing the copy |
//! | `ALPHA_RECOMPUTE=off` | [`CudaConfig::recompute_unary`] | fused elementwise chains read a unary function of their inputs instead of recomputing it |
//! | `ALPHA_CHAIN_EPILOGUE=on\|off` | [`CudaConfig::chain_epilogues`] | a fused elementwise chain that alone reads a plain product runs in the product's epilogue at every grid, or at none (default: over deep grids) |
//! | `ALPHA_LN_PARTIALS=off` | [`CudaConfig::ln_partials`] | a LayerNorm backward over many bands runs its gain and bias pass 1 as a launch of its own instead of in the input gradient's launch |
//! | `ALPHA_TWO_BLOCKS=off` | [`crate::gemm::GemmTuning::two_blocks`] | the TMA engine's three-stage kernels without `.minnctapersm 2` (ptxas may then take more registers than two blocks an SM leave) |
//! | `ALPHA_RING_WAVES=n` | [`CudaConfig::ring_waves`] | bf16 products of at least n waves of blocks take the three-stage ring (default 3) |
//! | `ALPHA_MUL_RECOMPUTE=off` | [`CudaConfig::mul_recompute`] | a StoreMul epilogue reads the stored activation (`gelu(gate)`) instead of computing it from the gate, and that activation is stored |
//! | `ALPHA_WIDE_STORES=off` | [`crate::gemm::GemmTuning::wide_stores`] | GEMM epilogues store each fragment's two values (8 bytes a thread) instead of four consecutive ones after a quad exchange (16 bytes) |
//! | `ALPHA_LN_FOLD_TOGETHER=off` | [`CudaConfig::ln_fold_together`] | each LayerNorm backward over many bands runs its gain and bias pass 2 as its own launch, instead of one launch for all of them after the last |
//! | `ALPHA_CLUSTER_SPLITK=on\|shallow` | [`CudaConfig::cluster_split_waves`] | a thread-block cluster sums split-K parts in distributed shared memory at every grid (`shallow`: grids of one wave), instead of scratch and a reduction launch (measured slower, g56) |
//! | `ALPHA_SPLITK_FIXUP=on` | [`CudaConfig::split_fixup`] | split-K parts summed by the last part of each tile to finish ([`crate::gemm::GemmSpec::fixup_splits`]) instead of by a reduction launch after the parts (bit for bit the same; measured slower in the step, g73: one context's 3.665 → 4.00 ms with 145 launches fewer, sixteen contexts' 22.04 → 22.46 ms with 80 fewer) |
//! | `ALPHA_GATED=off` | [`CudaConfig::gated_products`] | a gated unit's gate and up products in two launches (the second reading the stored gate back) instead of one launch computing both ([`crate::gemm::GemmSpec::gated`]) |
//! | `ALPHA_SPLITK_UNEVEN=off` | [`CudaConfig::uneven_split`] | split-K over long K in power-of-two parts only, instead of any count up to 8 whose parts may differ by a K step (TMA engine) |
//! | `ALPHA_PAIRED=off` | [`CudaConfig::paired_products`] | a residual-adding product and the plain product whose output it adds in two launches, instead of one launch summing both in one accumulator |
//! | `ALPHA_STAGED_EPILOGUE=off\|chains\|adds\|all` | [`crate::gemm::GemmTuning::staged_epilogues`] | which TMA epilogues run through shared memory a row a warp ([`crate::gemm_tma::staged`]) instead of on the accumulator fragments: none, chains only, chains and residual or accumulating adds, or plain f32 stores too (default: chains, adds, and the plain stores of tall outputs, [`crate::gemm::GemmSpec::staged_store`]; every plain store measured 0.05–0.07 ms slower at one context, g69) |
//! | `ALPHA_DELTA_EPILOGUE=off` | [`CudaConfig::delta_epilogue`] | attention's delta (and its bf16 dO) computed by a launch of its own from the f32 dO, instead of by the epilogue of the product that computes dO ([`crate::gemm::Heads::delta`]) |
//! | `ALPHA_PERSISTENT=fragments\|rings` | [`CudaConfig::persistent`] | TMA products over more than one wave of blocks in persistent blocks walking the tiles ([`crate::gemm::GemmSpec::persistent`]) where the epilogue does not work in the ring, or (`rings`) at every epilogue, instead of a block a tile (measured slower, g83: sixteen contexts' step 21.96 / 22.16 / 21.89 ms a block a tile, 22.05 / 22.33 / 22.02 `fragments`, 22.60 / 22.59 / 22.50 `rings`) |
//! | `ALPHA_SYNC_RUN=on` | [`CudaConfig::sync_each_run`] | each run of a phase waits for the device before returning, instead of leaving the wait to the next read or copy |
//! | `ALPHA_PINGPONG=on` | [`CudaConfig::pingpong`] | persistent products (`ALPHA_PERSISTENT`) in blocks of two math groups taking turns at the products ([`crate::gemm::GemmSpec::pingpong`]), one block an SM |
//! | `ALPHA_ATTN_JOINT=off` | [`CudaConfig::joint_attention_backward`] | attention's dQ and dK/dV passes in two launches, one after the other |
//! | `ALPHA_CE_STATS=on` | [`CudaConfig::ce_stats`] | the logits' product also writes per-tile row statistics where it stores through shared memory ([`crate::gemm::GemmSpec::row_stats`]) and the cross-entropy forward combines them instead of re-reading the logits (g107, sixteen contexts: the forward 0.186 → 0.010 ms but the product 445 → 518 µs, the step 21.50 / 21.51 against 21.51 / 21.64 ms; the gradient gate, forced on at one context, 1.06e-2 against its 1e-2) |
//! | `ALPHA_SCATTER_SEGMENTS=n` | [`CudaConfig::scatter_segments`] | the embedding gradient's scatter-add over n segments of the tokens, added in turn ([`crate::embedding::scatter_add_kernel_segmented`]), instead of one pass (g105: sixteen contexts' scatter-add 0.212 → 0.150 ms with 4, within the step's noise) |
//! | `ALPHA_ATTN_ONEPASS=on` | [`CudaConfig::onepass_attention`] | the bf16 attention backward in one pass summing dQ in a fixed order ([`crate::attention_mma::backward_kernel_onepass`]) instead of the joint kernel (measured slower, g101: 273 against 256 µs alone at sixteen contexts) |
//! | `ALPHA_ATTN_WGMMA=off` | [`CudaConfig::wgmma_attention`] | the bf16 attention forward on `mma.sync` ([`crate::attention_mma::forward_kernel_bf16`]) instead of `wgmma` ([`crate::attention_wgmma`]; the same bits, g108: sixteen contexts' forward 103.2 → 77.2 µs alone, the step 21.75 / 21.75 → 21.54 / 21.28 ms) |
//! | `ALPHA_ATTN_WGMMA_BWD=off` | [`CudaConfig::wgmma_attention_backward`] | the bf16 joint attention backward on `mma.sync` ([`crate::attention_mma::backward_kernel_bf16`]) instead of `wgmma` ([`crate::attention_wgmma::backward_kernel`]; the same bits, g109: sixteen contexts' backward 253.9 → 193.8 µs alone, the step 21.27 / 21.97 → 20.43 / 20.49 ms) |
//! | `ALPHA_CUDA_PTX_DIR=dir` | [`CudaConfig::ptx_dir`] | every kernel's PTX written to `dir` at compile time (for `ptxas`) |
//! | `ALPHA_CUDA_CHECK_LAUNCHES=1` | [`CudaConfig::check_launches`] | phases run launch by launch with a synchronisation after each, so a fault names its launch |

use anyhow::{bail, Result};

use crate::gemm::{Engine, GemmTuning, StagedEpilogues};

/// Which products take a chain epilogue ([`CudaConfig::chain_epilogues`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainEpilogues {
    Never,
    /// Over deep grids only (at least [`crate::gemm_wgmma::DEEP_EPILOGUE_WAVES`] waves of
    /// blocks), the default. Measured on the H200 (g55, wide stores): sixteen contexts' step
    /// 24.24 / 24.25 → 24.11 / 24.13 ms with the gated GELU's backward in the dh product's
    /// epilogue; one context's (a shallow grid) 3.706 / 3.711 → 3.721 / 3.721 ms, so not there.
    DeepGrids,
    Everywhere,
}

/// Which products are persistent ([`CudaConfig::persistent`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistent {
    /// None (the default).
    None,
    /// Deep grids whose epilogue does not work in the ring.
    FragmentEpilogues,
    /// Deep grids, every epilogue.
    All,
}

/// The backend's choices, each defaulting to the measured one (the module's table).
#[derive(Clone, Debug, PartialEq)]
pub struct CudaConfig {
    /// The engine matrix products prefer: [`Engine::Tma`] (bf16 products on the TMA-fed
    /// `wgmma`, the rest on the `cp.async` ring wherever K allows), [`Engine::Wgmma`] (the
    /// `cp.async` ring only) or [`Engine::Mma`] (`mma.sync` only).
    pub gemm_engine: Engine,
    /// A forced `wgmma` ring depth (0: the lowering's choice).
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
    /// Pointwise kernels four elements a thread where they can.
    pub pointwise_vector: bool,
    /// A forced choice of LayerNorm's band fold in the input-gradient launch (None: by size).
    pub ln_fold: Option<bool>,
    /// Fold bf16 casts read only by GEMMs into the GEMMs' loads (f32 operands rounded by the
    /// `cp.async` ring) instead of launching them. Off by default: with the casts launched the
    /// GEMMs read bf16 on the TMA engine, and on the H200 the step was faster (g33: one context
    /// 4.19 → 4.07 ms, sixteen 32.3 → 30.5 ms) though the casts cost 34 launches.
    pub fold_casts_into_gemms: bool,
    /// Attention reads q, k and v as bf16, stored (q and k turned by the rotary) by the
    /// projection's head-split epilogue, where the plan allows.
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
    /// Segments of the scatter-add's tokens (1: the plain kernel).
    pub scatter_segments: u32,
    /// The logits' product writes per-row statistics for the cross-entropy where it can
    /// (opt-in).
    pub ce_stats: bool,
    /// The bf16 attention forward on `wgmma` ([`crate::attention_wgmma`]) where it applies.
    pub wgmma_attention: bool,
    /// The bf16 joint attention backward on `wgmma` ([`crate::attention_wgmma::backward_kernel`]).
    pub wgmma_attention_backward: bool,
    /// Where a fused chain that alone reads a plain product runs in the product's epilogue
    /// ([`crate::gemm::ChainEpilogue`]).
    pub chain_epilogues: ChainEpilogues,
    /// A LayerNorm backward over many bands runs pass 1 in its input gradient's launch.
    pub ln_partials: bool,
    /// A StoreMul epilogue computes its multiplier's activation from the earlier product, and
    /// an activation no launch then reads is not stored.
    pub mul_recompute: bool,
    /// The pass 2 folds of LayerNorm backwards over many bands run as one launch after the last.
    pub ln_fold_together: bool,
    /// Waves of blocks from which bf16 products take the three-stage ring
    /// ([`crate::gemm_wgmma::stages_for`]).
    pub ring_waves: u32,
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
    /// Which TMA products walk their tiles in persistent blocks.
    pub persistent: Persistent,
    /// Persistent products in blocks of two math groups taking turns.
    pub pingpong: bool,
    /// The build choices every GEMM kernel of the lowering takes.
    pub gemm_tuning: GemmTuning,
    /// Each run of a phase waits for the device before returning.
    pub sync_each_run: bool,
    /// Phases run launch by launch with a synchronisation after each (a fault names its launch).
    pub check_launches: bool,
    /// A folder to write every kernel's PTX to at compile time.
    pub ptx_dir: Option<std::path::PathBuf>,
}

impl Default for CudaConfig {
    fn default() -> CudaConfig {
        CudaConfig {
            gemm_engine: Engine::Tma,
            ring_stages: 0,
            split_k: true,
            head_split: None,
            dependent_launch: true,
            early_trigger: false,
            pointwise_vector: true,
            ln_fold: None,
            fold_casts_into_gemms: false,
            bf16_attention: true,
            merged_gradients: true,
            mul_epilogue: true,
            layernorm_copy: true,
            output_copy: true,
            recompute_unary: true,
            joint_attention_backward: true,
            onepass_attention: false,
            scatter_segments: 1,
            ce_stats: false,
            wgmma_attention: true,
            wgmma_attention_backward: true,
            chain_epilogues: ChainEpilogues::DeepGrids,
            ln_partials: true,
            mul_recompute: true,
            ln_fold_together: true,
            ring_waves: crate::gemm_wgmma::SHALLOW_RING_WAVES,
            cluster_split_waves: None,
            delta_epilogue: true,
            split_fixup: false,
            gated_products: true,
            uneven_split: true,
            paired_products: true,
            persistent: Persistent::None,
            pingpong: false,
            gemm_tuning: GemmTuning::default(),
            sync_each_run: false,
            check_launches: false,
            ptx_dir: None,
        }
    }
}

impl CudaConfig {
    /// The defaults with what the `ALPHA_*` variables of this process set (the module's
    /// table); a value a variable does not take is an error naming it.
    pub fn from_env() -> Result<CudaConfig> {
        CudaConfig::from_vars(|name| std::env::var(name).ok())
    }

    /// The defaults with what `var` (a variable's value by name, None when unset) sets.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<CudaConfig> {
        let mut c = CudaConfig::default();
        // An empty variable counts as unset.
        let var = |name: &str| var(name).filter(|v| !v.is_empty());
        // One of `choices` (by name) or unset.
        let pick = |name: &str, choices: &[&str]| -> Result<Option<usize>> {
            match var(name) {
                None => Ok(None),
                Some(v) => match choices.iter().position(|c| *c == v) {
                    Some(i) => Ok(Some(i)),
                    None => bail!("{name}={v}: expected one of {}", choices.join(", ")),
                },
            }
        };
        let switch = |name: &str, default: bool| -> Result<bool> {
            Ok(pick(name, &["off", "on", "0", "1"])?.map_or(default, |i| i % 2 == 1))
        };
        let forced =
            |name: &str, yes: &str, no: &str| -> Result<Option<bool>> { Ok(pick(name, &[yes, no])?.map(|i| i == 0)) };
        let count = |name: &str| -> Result<Option<u32>> {
            match var(name) {
                None => Ok(None),
                Some(v) => match v.parse::<u32>() {
                    Ok(n) => Ok(Some(n)),
                    Err(_) => bail!("{name}={v}: expected a whole number"),
                },
            }
        };
        if let Some(i) = pick("ALPHA_GEMM_ENGINE", &["mma", "wgmma", "tma"])? {
            c.gemm_engine = [Engine::Mma, Engine::Wgmma, Engine::Tma][i];
        }
        c.ring_stages = count("ALPHA_GEMM_STAGES")?.unwrap_or(c.ring_stages);
        c.split_k = switch("ALPHA_GEMM_SPLITK", c.split_k)?;
        c.head_split = forced("ALPHA_FUSE_HEADS", "on", "off")?;
        c.dependent_launch = switch("ALPHA_PDL", c.dependent_launch)?;
        match pick("ALPHA_PDL_TRIGGER", &["exit", "start", "epilogue"])? {
            Some(1) => c.early_trigger = true,
            Some(2) => c.gemm_tuning.epilogue_trigger = true,
            _ => {}
        }
        c.pointwise_vector = switch("ALPHA_PW_VECTOR", c.pointwise_vector)?;
        c.ln_fold = forced("ALPHA_LN_FOLD", "beside", "separate")?;
        c.fold_casts_into_gemms = forced("ALPHA_CAST_INTO_GEMM", "on", "off")?.unwrap_or(c.fold_casts_into_gemms);
        c.bf16_attention = switch("ALPHA_ATTN_BF16", c.bf16_attention)?;
        c.merged_gradients = switch("ALPHA_ATTN_MERGED", c.merged_gradients)?;
        c.mul_epilogue = switch("ALPHA_MUL_EPILOGUE", c.mul_epilogue)?;
        c.layernorm_copy = switch("ALPHA_LN_COPY", c.layernorm_copy)?;
        c.output_copy = switch("ALPHA_ATTN_OCOPY", c.output_copy)?;
        c.recompute_unary = switch("ALPHA_RECOMPUTE", c.recompute_unary)?;
        c.joint_attention_backward = switch("ALPHA_ATTN_JOINT", c.joint_attention_backward)?;
        c.onepass_attention = switch("ALPHA_ATTN_ONEPASS", c.onepass_attention)?;
        c.scatter_segments = count("ALPHA_SCATTER_SEGMENTS")?.unwrap_or(c.scatter_segments);
        c.ce_stats = switch("ALPHA_CE_STATS", c.ce_stats)?;
        c.wgmma_attention = switch("ALPHA_ATTN_WGMMA", c.wgmma_attention)?;
        c.wgmma_attention_backward = switch("ALPHA_ATTN_WGMMA_BWD", c.wgmma_attention_backward)?;
        if let Some(i) = pick("ALPHA_CHAIN_EPILOGUE", &["on", "off", "deep"])? {
            c.chain_epilogues = [ChainEpilogues::Everywhere, ChainEpilogues::Never, ChainEpilogues::DeepGrids][i];
        }
        c.ln_partials = switch("ALPHA_LN_PARTIALS", c.ln_partials)?;
        c.gemm_tuning.two_blocks = switch("ALPHA_TWO_BLOCKS", c.gemm_tuning.two_blocks)?;
        c.mul_recompute = switch("ALPHA_MUL_RECOMPUTE", c.mul_recompute)?;
        c.gemm_tuning.wide_stores = switch("ALPHA_WIDE_STORES", c.gemm_tuning.wide_stores)?;
        c.ln_fold_together = switch("ALPHA_LN_FOLD_TOGETHER", c.ln_fold_together)?;
        c.ring_waves = count("ALPHA_RING_WAVES")?.unwrap_or(c.ring_waves);
        match pick("ALPHA_CLUSTER_SPLITK", &["off", "on", "shallow"])? {
            Some(1) => c.cluster_split_waves = Some(u32::MAX),
            Some(2) => c.cluster_split_waves = Some(1),
            _ => {}
        }
        c.delta_epilogue = switch("ALPHA_DELTA_EPILOGUE", c.delta_epilogue)?;
        c.split_fixup = switch("ALPHA_SPLITK_FIXUP", c.split_fixup)?;
        c.gated_products = switch("ALPHA_GATED", c.gated_products)?;
        c.uneven_split = switch("ALPHA_SPLITK_UNEVEN", c.uneven_split)?;
        c.paired_products = switch("ALPHA_PAIRED", c.paired_products)?;
        if let Some(i) = pick("ALPHA_PERSISTENT", &["off", "fragments", "rings"])? {
            c.persistent = [Persistent::None, Persistent::FragmentEpilogues, Persistent::All][i];
        }
        c.pingpong = switch("ALPHA_PINGPONG", c.pingpong)?;
        c.sync_each_run = switch("ALPHA_SYNC_RUN", c.sync_each_run)?;
        if let Some(i) = pick("ALPHA_STAGED_EPILOGUE", &["off", "chains", "adds", "tall", "all"])? {
            c.gemm_tuning.staged_epilogues = [
                StagedEpilogues::None,
                StagedEpilogues::Chains,
                StagedEpilogues::Adds,
                StagedEpilogues::Tall,
                StagedEpilogues::All,
            ][i];
        }
        c.check_launches = switch("ALPHA_CUDA_CHECK_LAUNCHES", c.check_launches)?;
        c.ptx_dir = var("ALPHA_CUDA_PTX_DIR").map(std::path::PathBuf::from);
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Result<CudaConfig> {
        CudaConfig::from_vars(|name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn no_variables_give_the_defaults() {
        assert_eq!(from(&[]).unwrap(), CudaConfig::default());
    }

    #[test]
    fn variables_set_their_fields() {
        let c = from(&[
            ("ALPHA_PDL", "off"),
            ("ALPHA_GEMM_ENGINE", "mma"),
            ("ALPHA_STAGED_EPILOGUE", "chains"),
            ("ALPHA_RING_WAVES", "8"),
            ("ALPHA_FUSE_HEADS", "off"),
            ("ALPHA_CUDA_CHECK_LAUNCHES", "1"),
        ])
        .unwrap();
        assert!(!c.dependent_launch);
        assert_eq!(c.gemm_engine, Engine::Mma);
        assert_eq!(c.gemm_tuning.staged_epilogues, StagedEpilogues::Chains);
        assert_eq!(c.ring_waves, 8);
        assert_eq!(c.head_split, Some(false));
        assert!(c.check_launches);
        assert!(c.split_k, "an unset switch keeps its default");
    }

    #[test]
    fn a_value_a_variable_does_not_take_is_an_error_naming_it() {
        let e = from(&[("ALPHA_PDL", "of")]).unwrap_err().to_string();
        assert!(e.contains("ALPHA_PDL=of") && e.contains("off, on, 0, 1"), "{e}");
        let e = from(&[("ALPHA_RING_WAVES", "three")]).unwrap_err().to_string();
        assert!(e.contains("ALPHA_RING_WAVES=three"), "{e}");
    }
}
