//! The CUDA backend's configuration: one value, built once and passed to the lowering
//! ([`crate::lower::lower_program`]), which hands the kernel-level choices to the kernel specs it
//! builds ([`crate::kernels::gemm::GemmTuning`]), and to the runtime ([`crate::CudaBackend::compile`]).
//! No kernel builder, renderer or lowering pass reads the environment: a kernel's PTX is a
//! function of its spec, and a test sets any switch by building the value it wants.
//!
//! Why switches at all: each one turns off (or forces) one measured choice, so that two variants
//! can be timed from the same binary on the same GPU. Every default is the measured choice
//! (`bench/results/`). [`CudaConfig::from_vars`] reads them from `ALPHA_*` variables handed in
//! by the caller; only the command line reads the process's environment. Paths measured slower were taken out of the
//! product (`bench/results/2026-12-01-retired-cuda-paths.md` names the commit where each last
//! lived); their variables are refused with that pointer ([`RETIRED`]).
//!
//! | variable | field | effect |
//! |---|---|---|
//! | `ALPHA_GEMM_ENGINE=mma\|wgmma\|tma` | [`CudaConfig::gemm_engine`] | matrix products on `mma.sync`, on `wgmma` fed by the `cp.async` ring only, or (default) bf16 products on the TMA-fed engine |
//! | `ALPHA_GEMM_STAGES=n` | [`CudaConfig::ring_stages`] | the `wgmma` ring's depth (3 for bf16 operands only, else ≥ 4) |
//! | `ALPHA_GEMM_SPLITK=off` | [`CudaConfig::split_k`] | no split-K |
//! | `ALPHA_FUSE_HEADS=on\|off` | [`CudaConfig::head_split`] | no head-split stores (the permutes after the q/k/v projection and the output gradient run) |
//! | `ALPHA_PDL=off` | [`CudaConfig::dependent_launch`] | plain launches instead of programmatic dependent launches |
//! | `ALPHA_PW_VECTOR=off` | [`CudaConfig::pointwise_vector`] | pointwise kernels one element a thread |
//! | `ALPHA_LN_FOLD=beside\|separate` | [`CudaConfig::ln_fold`] | LayerNorm's band fold beside the input gradient's rows, or a launch of its own, at every size |
//! | `ALPHA_CAST_INTO_GEMM=on\|off` | [`CudaConfig::fold_casts_into_gemms`] | bf16 casts read only by GEMMs folded into their loads (the GEMMs then read f32 on the `cp.async` ring), or (default) launched (the GEMMs read bf16 on the TMA engine) |
//! | `ALPHA_ATTN_BF16=off` | [`CudaConfig::bf16_attention`] | attention reads f32 q, k, v and turns q and k on load, instead of bf16 ones the projection stores turned |
//! | `ALPHA_ATTN_MERGED=off` | [`CudaConfig::merged_gradients`] | the bf16 attention backward stores f32 dq, dk, dv (a permute then casts them together) instead of the permuted bf16 gradient itself |
//! | `ALPHA_COLUMN_CAST=off` | [`CudaConfig::column_casts`] | a bias gradient's column sum and the bf16 cast of the same tensor run as two launches, each reading it, instead of the sum's first pass storing the cast |
//! | `ALPHA_LN_COLUMNS=off` | [`CudaConfig::norm_column_sums`] | a bias gradient's column sum of a LayerNorm backward's output reads that output back in a first pass, instead of finishing the band sums the LayerNorm backward wrote |
//! | `ALPHA_CONCAT_VIEWS=off` | [`CudaConfig::concat_views`] | a Concat's part that is a permute or slice of another tensor is copied twice (the view's launch, then the Concat's), instead of the Concat's copy reading through the view |
//! | `ALPHA_NESTED_CONCAT=off` | [`CudaConfig::nested_concats`] | a Concat read only by another Concat copies its parts into its own output, and the outer Concat copies that again, instead of the inner writing into its place in the outer |
//! | `ALPHA_SLICED_PERMUTE=off` | [`CudaConfig::sliced_permutes`] | a Permute of a slice (through a reshape) reads the slice's own copy, instead of the slice's source with the composed strides |
//! | `ALPHA_CHAIN_SLICES=off` | [`CudaConfig::chain_slices`] | a Unary or Binary (alone or in a fused chain) reading a slice reads the slice's copy, instead of the slice's source through its row stride and offset |
//! | `ALPHA_HELD_BROADCAST=off` | [`CudaConfig::held_broadcasts`] | a Broadcast that only binaries read is copied out to its full shape, instead of the binaries reading its source held |
//! | `ALPHA_CHAIN_COLSUMS=off` | [`CudaConfig::chain_column_sums`] | a reduction of a fused chain's output (a column sum: a per-channel scale's gradient, a bias's; a sum over each group or over everything) runs as its own launch over the stored output, instead of in the chain's launch or (a column sum) the product's whose epilogue runs the chain |
//! | `ALPHA_MULTI_COPY=off` | [`CudaConfig::multi_copies`] | a phase's copies into its state run as a launch each, instead of the 4-byte ones together in one |
//! | `ALPHA_PERMUTED_STORES=off` | [`CudaConfig::permuted_stores`] | a Permute that alone reads a plain elementwise op's output copies it, instead of the op storing into the permute's place |
//! | `ALPHA_PADDED_TMA=off` | [`CudaConfig::padded_tma`] | a product padded to the tiled sizes runs on the `cp.async` ring with K whole, instead of on the TMA engine with K split where its tiles leave SMs idle |
//! | `ALPHA_LONG_K=off` | [`CudaConfig::long_k_split`] | a product on the TMA engine over a long K (at least 65,536) runs whole where its tiles fill the SMs, instead of in parts of about 16,384 |
//! | `ALPHA_SCAN_TWO_BLOCKS=off` | [`CudaConfig::scan_two_blocks`] | the harmonic scan's backward runs one block an SM (four positions a group, loads eight positions ahead), not two (three, four) |
//! | `ALPHA_CHAIN_ROW_SUMS=off` | [`CudaConfig::chain_row_reductions`] | a reduction along rows (the warp and block paths) right after a fused chain runs in a launch of its own; only column sums run in the chain's launch |
//! | `ALPHA_SCAN_ONE_WAVE=off` | [`CudaConfig::scan_one_wave`] | the harmonic scan's forward runs one block an SM (loads eight positions ahead), not three (three) |
//! | `ALPHA_NARROW_STORE=off` | [`CudaConfig::narrow_stores`] | a tall product padded to the tiled sizes stores into its padded copy, then a copy moves the wanted columns out, instead of storing them in place |
//! | `ALPHA_PRODUCT_CONCAT=off` | [`CudaConfig::products_into_concats`] | a batched product that a Concat reads through a permute stores its own output, and the Concat copies it through the permute, instead of the product storing into its place in the Concat |
//! | `ALPHA_PADDED_BIAS=off` | [`CudaConfig::padded_biases`] | a padded product stored in place leaves the bias row to the Add after it, instead of adding it as it stores |
//! | `ALPHA_PITCHED=off` | [`CudaConfig::pitched_operands`] | a padded product's bf16 operand of a misaligned width is stored contiguous and copied into padded scratch, instead of written with its rows at an aligned pitch that the product's tensor maps read in place |
//! | `ALPHA_MUL_EPILOGUE=off` | [`CudaConfig::mul_epilogue`] | a gated unit's multiply runs as its own launch, not in the second half's product epilogue |
//! | `ALPHA_JOINT_CE=off` | [`CudaConfig::joint_cross_entropy`] | the cross-entropy's forward and its bf16 backward run as two launches, each reading the logits, instead of the forward launching the backward's work too |
//! | `ALPHA_LN_COPY=off` | [`CudaConfig::layernorm_copy`] | the residual gradient's bf16 cast after a LayerNorm backward runs as its own launch instead of being stored by the LayerNorm backward |
//! | `ALPHA_ATTN_OCOPY=off` | [`CudaConfig::output_copy`] | the attention output's permute-and-cast runs as its own launch instead of the bf16 attention forward storing the copy |
//! | `ALPHA_RECOMPUTE=off` | [`CudaConfig::recompute_unary`] | fused elementwise chains read a unary function of their inputs instead of recomputing it |
//! | `ALPHA_CHAIN_EPILOGUE=on\|off` | [`CudaConfig::chain_epilogues`] | a fused elementwise chain that alone reads a plain product runs in the product's epilogue at every grid, or at none (default: over deep grids) |
//! | `ALPHA_LN_PARTIALS=off` | [`CudaConfig::ln_partials`] | a LayerNorm backward over many bands runs its gain and bias pass 1 as a launch of its own instead of in the input gradient's launch |
//! | `ALPHA_TWO_BLOCKS=off` | [`crate::kernels::gemm::GemmTuning::two_blocks`] | the TMA engine's three-stage kernels without `.minnctapersm 2` (ptxas may then take more registers than two blocks an SM leave) |
//! | `ALPHA_RING_WAVES=n` | [`CudaConfig::ring_waves`] | bf16 products of at least n waves of blocks take the three-stage ring (default 3) |
//! | `ALPHA_MUL_RECOMPUTE=off` | [`CudaConfig::mul_recompute`] | a StoreMul epilogue reads the stored activation (`gelu(gate)`) instead of computing it from the gate, and that activation is stored |
//! | `ALPHA_WIDE_STORES=off` | [`crate::kernels::gemm::GemmTuning::wide_stores`] | GEMM epilogues store each fragment's two values (8 bytes a thread) instead of four consecutive ones after a quad exchange (16 bytes) |
//! | `ALPHA_LN_FOLD_TOGETHER=off` | [`CudaConfig::ln_fold_together`] | each LayerNorm backward over many bands runs its gain and bias pass 2 as its own launch, instead of one launch for all of them after the last |
//! | `ALPHA_GATED=off` | [`CudaConfig::gated_products`] | a gated unit's gate and up products in two launches (the second reading the stored gate back) instead of one launch computing both ([`crate::kernels::gemm::GemmSpec::gated`]) |
//! | `ALPHA_SPLITK_UNEVEN=off` | [`CudaConfig::uneven_split`] | split-K over long K in power-of-two parts only, instead of any count up to 8 whose parts may differ by a K step (TMA engine) |
//! | `ALPHA_ATTN_COLSUMS=off` | [`CudaConfig::attention_column_sums`] | an attention backward whose merged gradients a bias's column sum and its cast alone read stores them f32 for the sum to read back, instead of storing the cast and each warp's column sums ([`crate::kernels::attention::mma::Gradients::MergedBf16Summed`]) |
//! | `ALPHA_PRODUCT_CASTS=off` | [`CudaConfig::product_casts`] | a product whose f32 output only a bf16 cast reads stores the f32 output and the cast runs as a launch, instead of the product storing it rounded ([`crate::kernels::gemm::GemmSpec::store_bf16`]) |
//! | `ALPHA_RAGGED_SPLIT=off` | [`CudaConfig::ragged_split`] | a product of at least a wave of tiles whose last wave is ragged runs whole, instead of in up to four parts of K that even out the SMs' work ([`crate::kernels::gemm::GemmShape::split_ragged_waves`]) |
//! | `ALPHA_SIMPLE_SPLITK=off` | [`CudaConfig::simple_split_k`] | the simple product runs each element's chain over all of K, never in parts |
//! | `ALPHA_CHAIN_GROUPS=off` | [`CudaConfig::chain_groups`] | an elementwise op reading values held over trailing axes runs as a launch of its own, not in a fused chain |
//! | `ALPHA_PAIRED=off` | [`CudaConfig::paired_products`] | a residual-adding product and the plain product whose output it adds in two launches, instead of one launch summing both in one accumulator |
//! | `ALPHA_STAGED_EPILOGUE=off\|chains\|adds\|tall` | [`crate::kernels::gemm::GemmTuning::staged_epilogues`] | which TMA epilogues run through shared memory a row a warp ([`crate::kernels::gemm::tma::staged`]) instead of on the accumulator fragments: none, chains only, chains and residual or accumulating adds, or (default) those and the plain f32 stores of tall outputs ([`crate::kernels::gemm::GemmSpec::staged_store`]) |
//! | `ALPHA_DELTA_EPILOGUE=off` | [`CudaConfig::delta_epilogue`] | attention's delta (and its bf16 dO) computed by a launch of its own from the f32 dO, instead of by the epilogue of the product that computes dO ([`crate::kernels::gemm::Heads::delta`]) |
//! | `ALPHA_SYNC_RUN=on` | [`CudaConfig::sync_each_run`] | each run of a phase waits for the device before returning, instead of leaving the wait to the next read or copy |
//! | `ALPHA_ATTN_JOINT=off` | [`CudaConfig::joint_attention_backward`] | attention's dQ and dK/dV passes in two launches, one after the other |
//! | `ALPHA_ATTN_WGMMA=off` | [`CudaConfig::wgmma_attention`] | the bf16 attention forward on `mma.sync` ([`crate::kernels::attention::mma::forward_kernel_bf16`]) instead of `wgmma` ([`crate::kernels::attention::wgmma`]; the same bits; sixteen contexts' forward 103.2 → 77.2 µs alone, the step 21.75 / 21.75 → 21.54 / 21.28 ms) |
//! | `ALPHA_ATTN_WGMMA_BWD=off` | [`CudaConfig::wgmma_attention_backward`] | the bf16 joint attention backward on `mma.sync` ([`crate::kernels::attention::mma::backward_kernel_bf16`]) instead of `wgmma` ([`crate::kernels::attention::wgmma::backward_kernel`]; the same bits; sixteen contexts' backward 253.9 → 193.8 µs alone, the step 21.27 / 21.97 → 20.43 / 20.49 ms) |
//! | `ALPHA_CUDA_PTX_DIR=dir` | [`CudaConfig::ptx_dir`] | every kernel's PTX written to `dir` at compile time (for `ptxas`) |
//! | `ALPHA_CUDA_CHECK_LAUNCHES=1` | [`CudaConfig::check_launches`] | phases run launch by launch with a synchronisation after each, so a fault names its launch |

use anyhow::{bail, Result};

use crate::kernels::gemm::{Engine, GemmTuning, StagedEpilogues};

/// Which products take a chain epilogue ([`CudaConfig::chain_epilogues`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainEpilogues {
    Never,
    /// Over deep grids only (at least [`crate::kernels::gemm::wgmma::DEEP_EPILOGUE_WAVES`] waves of
    /// blocks), the default. Measured on the H200 (wide stores): sixteen contexts' step
    /// 24.24 / 24.25 → 24.11 / 24.13 ms with the gated GELU's backward in the dh product's
    /// epilogue; one context's (a shallow grid) 3.706 / 3.711 → 3.721 / 3.721 ms, so not there.
    DeepGrids,
    Everywhere,
}

/// Variables of paths taken out of the product because they measured slower.
pub const RETIRED: [&str; 9] = [
    "ALPHA_PDL_TRIGGER",
    "ALPHA_CLUSTER_SPLITK",
    "ALPHA_SPLITK_FIXUP",
    "ALPHA_PERSISTENT",
    "ALPHA_PINGPONG",
    "ALPHA_CE_STATS",
    "ALPHA_SCATTER_SEGMENTS",
    "ALPHA_ATTN_ONEPASS",
    "ALPHA_SPLIT_WAVES",
];

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
    /// Pointwise kernels four elements a thread where they can.
    pub pointwise_vector: bool,
    /// A forced choice of LayerNorm's band fold in the input-gradient launch (None: by size).
    pub ln_fold: Option<bool>,
    /// Fold bf16 casts read only by GEMMs into the GEMMs' loads (f32 operands rounded by the
    /// `cp.async` ring) instead of launching them. Off by default: with the casts launched the
    /// GEMMs read bf16 on the TMA engine, and on the H200 the step was faster (one context
    /// 4.19 → 4.07 ms, sixteen 32.3 → 30.5 ms) though the casts cost 34 launches.
    pub fold_casts_into_gemms: bool,
    /// Attention reads q, k and v as bf16, stored (q and k turned by the rotary) by the
    /// projection's head-split epilogue, where the plan allows.
    pub bf16_attention: bool,
    /// The bf16 attention backward stores the projection's permuted bf16 gradient itself.
    pub merged_gradients: bool,
    /// A column sum's first pass stores the bf16 cast of the tensor it sums where the plan allows.
    pub column_casts: bool,
    /// A LayerNorm backward writes the band sums of its output's columns for the column sum
    /// after it.
    pub norm_column_sums: bool,
    /// A Concat's copy of a part that is a permute or slice reads the tensor under the view,
    /// and the view does not run.
    pub concat_views: bool,
    /// A Concat read only by another Concat copies its parts straight into its place there.
    pub nested_concats: bool,
    /// A Permute of a slice reads the slice's source, and the slice does not run.
    pub sliced_permutes: bool,
    /// A Unary or Binary (alone or in a fused chain) that alone reads an f32 slice reads the
    /// slice's source, and the slice does not run.
    pub chain_slices: bool,
    /// Binaries read a Broadcast's source held instead of its copy, which does not launch.
    pub held_broadcasts: bool,
    /// A multiply after a product fused into the product's epilogue where the plan allows.
    pub mul_epilogue: bool,
    /// A product padded to the tiled sizes (`lower/padded.rs`) runs as an aligned one does: on
    /// the TMA engine (tensor maps over its scratch operands) and with K split where its tiles
    /// leave SMs idle.
    pub padded_tma: bool,
    /// A plain elementwise op whose output a Permute alone reads stores into the permute's place.
    pub permuted_stores: bool,
    /// A phase's 4-byte copies into its state run as one multi-tensor launch.
    pub multi_copies: bool,
    /// A reduction right after a fused chain, of one of its outputs, runs in the chain's
    /// launch (`Lowerer::chain_reduction`), or a column sum in the product's whose epilogue runs
    /// the chain (`Lowerer::product_column_sum`).
    pub chain_column_sums: bool,
    /// A product on the TMA engine over a long K splits it in parts of about 16,384 even where
    /// its tiles fill the SMs ([`crate::kernels::gemm::GemmShape::split_k_long`]).
    pub long_k_split: bool,
    /// The harmonic scan's backward is written to run two blocks an SM
    /// ([`crate::kernels::harmonic_scan::BACKWARD_BLOCKS_PER_SM`]).
    pub scan_two_blocks: bool,
    /// The harmonic scan's forward is written to run three blocks an SM
    /// ([`crate::kernels::harmonic_scan::FORWARD_BLOCKS_PER_SM`]).
    pub scan_one_wave: bool,
    /// A reduction along rows (the warp and block paths) right after a fused chain runs in the
    /// chain's launch, as column sums do ([`CudaConfig::chain_column_sums`] on).
    pub chain_row_reductions: bool,
    /// A tall padded product stores its output in place with 8-byte stores
    /// ([`crate::kernels::gemm::GemmSpec::narrow_store`]), not through a padded copy.
    pub narrow_stores: bool,
    /// A batched product on the simple kernel that a Concat reads through a permute stores
    /// straight into its place there (`crate::fusion::products_into_concats`).
    pub products_into_concats: bool,
    /// A padded product stored in place adds the bias row of the Add after it as it stores
    /// (`crate::lower::padded::padded_biases`).
    pub padded_biases: bool,
    /// A bf16 cast that only padded products read, of a width whose rows are not 16 bytes
    /// apart, is written with its rows at an aligned pitch, which the products' tensor maps read
    /// in place (`crate::lower::padded::pitched_candidates`).
    pub pitched_operands: bool,
    /// A cross-entropy whose backward scales every row alike runs its bf16 backward in its own
    /// launch, reading the logits once ([`crate::kernels::cross_entropy::joint_kernel_bf16`]).
    pub joint_cross_entropy: bool,
    /// A LayerNorm backward also stores the bf16 cast of the residual gradient it adds.
    pub layernorm_copy: bool,
    /// The bf16 attention forward stores its output's permuted bf16 copy.
    pub output_copy: bool,
    /// Fused chains recompute an input that is a unary function of another input.
    pub recompute_unary: bool,
    /// Attention's two backward passes in one launch where the plan allows.
    pub joint_attention_backward: bool,
    /// The bf16 attention forward on `wgmma` ([`crate::kernels::attention::wgmma`]) where it applies.
    pub wgmma_attention: bool,
    /// The bf16 joint attention backward on `wgmma` ([`crate::kernels::attention::wgmma::backward_kernel`]).
    pub wgmma_attention_backward: bool,
    /// Where a fused chain that alone reads a plain product runs in the product's epilogue
    /// ([`crate::kernels::gemm::ChainEpilogue`]).
    pub chain_epilogues: ChainEpilogues,
    /// A LayerNorm backward over many bands runs pass 1 in its input gradient's launch.
    pub ln_partials: bool,
    /// A StoreMul epilogue computes its multiplier's activation from the earlier product, and
    /// an activation no launch then reads is not stored.
    pub mul_recompute: bool,
    /// The pass 2 folds of LayerNorm backwards over many bands run as one launch after the last.
    pub ln_fold_together: bool,
    /// Waves of blocks from which bf16 products take the three-stage ring
    /// ([`crate::kernels::gemm::wgmma::stages_for`]).
    pub ring_waves: u32,
    /// Attention's delta and bf16 dO stored by the product computing dO.
    pub delta_epilogue: bool,
    /// A gated unit's gate and up products in one launch where the plan allows.
    pub gated_products: bool,
    /// Split-K over long K in any count of parts up to 8 (parts may differ by a K step).
    pub uneven_split: bool,
    /// A product of at least a wave of tiles, over a long K, whose SMs would hold unequal
    /// numbers of tiles runs in parts of K ([`crate::kernels::gemm::GemmShape::split_ragged_waves`]).
    pub ragged_split: bool,
    /// A product whose f32 output only a bf16 cast reads stores it rounded into the cast's
    /// slot ([`crate::fusion::casts_into_products`]).
    pub product_casts: bool,
    /// An attention backward stores its merged gradients bf16 with their column sums' partials
    /// where a bias's column sum and its cast alone read them
    /// ([`crate::kernels::attention::mma::Gradients::MergedBf16Summed`]).
    pub attention_column_sums: bool,
    /// The simple product's long K in parts ([`crate::kernels::gemm::simple::Product::split_k`]).
    pub simple_split_k: bool,
    /// Fused chains read values held over trailing axes
    /// ([`crate::kernels::fused::Broadcast::Group`]).
    pub chain_groups: bool,
    /// A residual-adding product and the product it adds in one launch where the plan allows.
    pub paired_products: bool,
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
            pointwise_vector: true,
            ln_fold: None,
            fold_casts_into_gemms: false,
            bf16_attention: true,
            merged_gradients: true,
            column_casts: true,
            norm_column_sums: true,
            concat_views: true,
            nested_concats: true,
            sliced_permutes: true,
            chain_slices: true,
            held_broadcasts: true,
            mul_epilogue: true,
            padded_tma: true,
            permuted_stores: true,
            multi_copies: true,
            chain_column_sums: true,
            long_k_split: true,
            scan_two_blocks: true,
            scan_one_wave: true,
            chain_row_reductions: true,
            narrow_stores: true,
            products_into_concats: true,
            padded_biases: true,
            pitched_operands: true,
            joint_cross_entropy: true,
            layernorm_copy: true,
            output_copy: true,
            recompute_unary: true,
            joint_attention_backward: true,
            wgmma_attention: true,
            wgmma_attention_backward: true,
            chain_epilogues: ChainEpilogues::DeepGrids,
            ln_partials: true,
            mul_recompute: true,
            ln_fold_together: true,
            ring_waves: crate::kernels::gemm::wgmma::SHALLOW_RING_WAVES,
            delta_epilogue: true,
            gated_products: true,
            uneven_split: true,
            ragged_split: true,
            product_casts: true,
            attention_column_sums: true,
            simple_split_k: true,
            chain_groups: true,
            paired_products: true,
            gemm_tuning: GemmTuning::default(),
            sync_each_run: false,
            check_launches: false,
            ptx_dir: None,
        }
    }
}

impl CudaConfig {
    /// The defaults with what `var` (a variable's value by name, None when unset) sets.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<CudaConfig> {
        let mut c = CudaConfig::default();
        // An empty variable counts as unset.
        let var = |name: &str| var(name).filter(|v| !v.is_empty());
        if let Some(name) = RETIRED.iter().find(|n| var(n).is_some()) {
            bail!(
                "{name} switched a path that measured slower and was taken out of the CUDA backend \
                 (bench/results/2026-12-01-retired-cuda-paths.md names the commit where it last lived)"
            );
        }
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
        c.pointwise_vector = switch("ALPHA_PW_VECTOR", c.pointwise_vector)?;
        c.ln_fold = forced("ALPHA_LN_FOLD", "beside", "separate")?;
        c.fold_casts_into_gemms = forced("ALPHA_CAST_INTO_GEMM", "on", "off")?.unwrap_or(c.fold_casts_into_gemms);
        c.bf16_attention = switch("ALPHA_ATTN_BF16", c.bf16_attention)?;
        c.merged_gradients = switch("ALPHA_ATTN_MERGED", c.merged_gradients)?;
        c.column_casts = switch("ALPHA_COLUMN_CAST", c.column_casts)?;
        c.norm_column_sums = switch("ALPHA_LN_COLUMNS", c.norm_column_sums)?;
        c.concat_views = switch("ALPHA_CONCAT_VIEWS", c.concat_views)?;
        c.nested_concats = switch("ALPHA_NESTED_CONCAT", c.nested_concats)?;
        c.sliced_permutes = switch("ALPHA_SLICED_PERMUTE", c.sliced_permutes)?;
        c.chain_slices = switch("ALPHA_CHAIN_SLICES", c.chain_slices)?;
        c.held_broadcasts = switch("ALPHA_HELD_BROADCAST", c.held_broadcasts)?;
        c.mul_epilogue = switch("ALPHA_MUL_EPILOGUE", c.mul_epilogue)?;
        c.padded_tma = switch("ALPHA_PADDED_TMA", c.padded_tma)?;
        c.permuted_stores = switch("ALPHA_PERMUTED_STORES", c.permuted_stores)?;
        c.multi_copies = switch("ALPHA_MULTI_COPY", c.multi_copies)?;
        c.chain_column_sums = switch("ALPHA_CHAIN_COLSUMS", c.chain_column_sums)?;
        c.long_k_split = switch("ALPHA_LONG_K", c.long_k_split)?;
        c.scan_two_blocks = switch("ALPHA_SCAN_TWO_BLOCKS", c.scan_two_blocks)?;
        c.scan_one_wave = switch("ALPHA_SCAN_ONE_WAVE", c.scan_one_wave)?;
        c.chain_row_reductions = switch("ALPHA_CHAIN_ROW_SUMS", c.chain_row_reductions)?;
        c.narrow_stores = switch("ALPHA_NARROW_STORE", c.narrow_stores)?;
        c.products_into_concats = switch("ALPHA_PRODUCT_CONCAT", c.products_into_concats)?;
        c.padded_biases = switch("ALPHA_PADDED_BIAS", c.padded_biases)?;
        c.pitched_operands = switch("ALPHA_PITCHED", c.pitched_operands)?;
        c.joint_cross_entropy = switch("ALPHA_JOINT_CE", c.joint_cross_entropy)?;
        c.layernorm_copy = switch("ALPHA_LN_COPY", c.layernorm_copy)?;
        c.output_copy = switch("ALPHA_ATTN_OCOPY", c.output_copy)?;
        c.recompute_unary = switch("ALPHA_RECOMPUTE", c.recompute_unary)?;
        c.joint_attention_backward = switch("ALPHA_ATTN_JOINT", c.joint_attention_backward)?;
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
        c.delta_epilogue = switch("ALPHA_DELTA_EPILOGUE", c.delta_epilogue)?;
        c.gated_products = switch("ALPHA_GATED", c.gated_products)?;
        c.uneven_split = switch("ALPHA_SPLITK_UNEVEN", c.uneven_split)?;
        c.ragged_split = switch("ALPHA_RAGGED_SPLIT", c.ragged_split)?;
        c.product_casts = switch("ALPHA_PRODUCT_CASTS", c.product_casts)?;
        c.attention_column_sums = switch("ALPHA_ATTN_COLSUMS", c.attention_column_sums)?;
        c.simple_split_k = switch("ALPHA_SIMPLE_SPLITK", c.simple_split_k)?;
        c.chain_groups = switch("ALPHA_CHAIN_GROUPS", c.chain_groups)?;
        c.paired_products = switch("ALPHA_PAIRED", c.paired_products)?;
        c.sync_each_run = switch("ALPHA_SYNC_RUN", c.sync_each_run)?;
        if let Some(i) = pick("ALPHA_STAGED_EPILOGUE", &["off", "chains", "adds", "tall"])? {
            c.gemm_tuning.staged_epilogues =
                [StagedEpilogues::None, StagedEpilogues::Chains, StagedEpilogues::Adds, StagedEpilogues::Tall][i];
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

    #[test]
    fn a_retired_variable_is_refused_with_where_it_went() {
        let e = from(&[("ALPHA_PERSISTENT", "rings")]).unwrap_err().to_string();
        assert!(e.contains("ALPHA_PERSISTENT") && e.contains("retired-cuda-paths"), "{e}");
        assert!(from(&[("ALPHA_PERSISTENT", "")]).is_ok(), "an empty variable is unset");
    }
}
