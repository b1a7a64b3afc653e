//! The tiled product a MatMul node runs as (spec and shape), its engine, ring depth and store:
//! what the fusion passes judge a fusion against and the matmul lowering launches.

use super::*;

/// The tiled GEMM's spec (bf16 inputs, store epilogue) and shape for MatMul node `id`, when
/// its operands are bf16 and the shape meets the tiled kernel's contract.
pub(crate) fn tiled_gemm(cfg: &CudaConfig, g: &alpha_ir::Graph, id: u32) -> Option<(GemmSpec, GemmShape)> {
    let node = &g.nodes[id as usize];
    let Op::MatMul { ta, tb } = node.op else { return None };
    let (sa, sb) = (g.shape(node.inputs[0]), g.shape(node.inputs[1]));
    let os = &node.outputs[0].shape;
    let ra = sa.len();
    let (m, kd) = if ta { (sa[ra - 1], sa[ra - 2]) } else { (sa[ra - 2], sa[ra - 1]) };
    let nn = os[os.len() - 1];
    let batch: usize = sa[..ra - 2].iter().product();
    let b_batched = sb.len() > 2;
    let layout = |t: bool| if t { Layout::ColMajor } else { Layout::RowMajor };
    let spec = GemmSpec::new(layout(ta), layout(tb), Input::Bf16);
    let shape = GemmShape {
        m: m as u32,
        n: nn as u32,
        k: kd as u32,
        batch: batch as u32,
        lda: if ta { m } else { kd } as u32,
        ldb: if tb { kd } else { nn } as u32,
        ldc: nn as u32,
        stride_a: (m * kd) as u64,
        stride_b: if b_batched { (kd * nn) as u64 } else { 0 },
        stride_c: (m * nn) as u64,
    };
    let bf16 = g.dtype(node.inputs[0]) == DType::BF16 && g.dtype(node.inputs[1]) == DType::BF16;
    let spec = GemmSpec { tile: shape.tile(), tuning: cfg.gemm_tuning, ..spec };
    // The wgmma engine wherever K allows it.
    let wgmma = cfg.gemm_engine != gemm::Engine::Mma && shape.k.is_multiple_of(gemm_wgmma::BK);
    let spec = if wgmma { spec.wgmma() } else { spec };
    (bf16 && node.outputs[0].dtype == DType::F32 && shape.check(&spec).is_ok()).then_some((spec, shape))
}

/// The store of a product launched alone or paired (`spec`, on its engine and ring) over
/// `shape`: plain f32 stores of tall outputs through shared memory ([`tall_store`]).
pub(crate) fn settled(spec: GemmSpec, shape: &GemmShape) -> GemmSpec {
    GemmSpec { staged_store: tall_store(&spec, shape), ..spec }
}

/// Rows (tokens) from which a product's plain f32 store runs through shared memory
/// ([`GemmSpec::staged_store`]).
pub(crate) const TALL_ROWS: u32 = 8192;

/// Whether a plain f32 store of `spec` over `shape` runs through shared memory a row a warp
/// ([`GemmSpec::staged_store`]): unbatched products over at least [`TALL_ROWS`] rows of a
/// row-major A (rows are tokens: not a weight gradient's `Xᵀ·dY`) on the TMA engine, where
/// the configuration leaves it to the lowering. Why: whole 512-byte rows a warp write sixteen
/// contexts' large outputs (the logits' 805 MB, the 32 MB input gradients) faster than the
/// fragments' scattered 16-byte pieces (every plain store staged, sixteen contexts' step
/// 0.2 ms faster), while one context's outputs sit in L2 and the staging's barriers showed
/// (0.05–0.07 ms slower).
pub(crate) fn tall_store(spec: &GemmSpec, shape: &GemmShape) -> bool {
    spec.tuning.staged_epilogues == gemm::StagedEpilogues::Tall
        && spec.engine == gemm::Engine::Tma
        && spec.epilogue == Epilogue::Store
        && spec.activation.is_none()
        && spec.heads.is_none()
        && spec.chain.is_none()
        && spec.a == Layout::RowMajor
        && shape.batch == 1
        && shape.m >= TALL_ROWS
}

/// Whether a launch of `spec` on `shape` spans [`gemm_wgmma::DEEP_EPILOGUE_WAVES`] waves of
/// blocks a tile: deep enough for a fused epilogue's extra
/// work to pay.
pub(crate) fn deep_epilogue_grid(spec: &GemmSpec, shape: &GemmShape) -> bool {
    let (gx, gy) = spec.tiles(shape);
    gx * gy * shape.batch >= gemm_wgmma::DEEP_EPILOGUE_WAVES * gemm::SMS
}

/// `spec` on the TMA-fed engine where it runs on `wgmma` with bf16 operands (unless the
/// configuration keeps the `cp.async` ring). A batch of independent products over `shape`
/// (Muon's stacks of same-shaped matrices) stays on the `cp.async` ring, which steps each
/// operand by its batch stride: the TMA engine's two-dimensional maps take only the K-slices
/// of one product ([`gemm_tma::check_shape`]).
pub(crate) fn on_tma(cfg: &CudaConfig, spec: GemmSpec, shape: &GemmShape) -> GemmSpec {
    let bf16 = spec.a_input == Input::Bf16 && spec.b_input == Input::Bf16;
    if spec.engine == gemm::Engine::Wgmma && bf16 && cfg.gemm_engine == gemm::Engine::Tma {
        let tma = spec.tma();
        if gemm_tma::check_shape(&tma, shape).is_ok() {
            return tma;
        }
    }
    spec
}

/// How a product of `spec` over `shape` splits K: the parts and their launch's shape (a batch of
/// the parts), or None to run whole. Parts of whole K steps that may differ by one where the
/// parts run on the TMA engine ([`GemmShape::split_k_uneven`], and over a long K
/// [`GemmShape::split_k_long`] with [`CudaConfig::long_k_split`]); else equal parts
/// ([`GemmShape::split_k`]).
pub(crate) fn k_parts(cfg: &CudaConfig, spec: &GemmSpec, shape: &GemmShape) -> Option<(u32, GemmShape)> {
    let uneven_ok = cfg.uneven_split && on_tma(cfg, *spec, shape).engine == gemm::Engine::Tma;
    let splits = match (cfg.split_k, uneven_ok) {
        (false, _) => 1,
        (true, true) if cfg.long_k_split => shape.split_k_long(spec.bk),
        (true, true) => shape.split_k_uneven(spec.bk),
        (true, false) => shape.split_k(spec.bk),
    };
    // A ragged last wave evened out ([`GemmShape::split_ragged_waves`]).
    let splits = if splits == 1 && uneven_ok && cfg.split_k && cfg.ragged_split {
        shape.split_ragged_waves(spec.bk)
    } else {
        splits
    };
    let uneven = !shape.k.is_multiple_of(spec.bk * splits);
    (splits > 1).then(|| (splits, if uneven { shape.split_uneven(splits) } else { shape.split(spec, splits) }))
}

/// `spec` (inputs, tile and epilogue settled) with the `wgmma` ring depth for a launch of
/// `shape`: [`gemm_wgmma::stages_for`] its grid, or the forced depth where it is allowed.
pub(crate) fn with_ring(cfg: &CudaConfig, spec: GemmSpec, shape: &GemmShape) -> GemmSpec {
    if spec.engine == gemm::Engine::Mma {
        return spec;
    }
    let f32_operand = spec.a_input == Input::F32 || spec.b_input == Input::F32;
    let (gx, gy, gz) = spec.grid(shape);
    let stages = match cfg.ring_stages {
        n if n >= 4 || (n == 3 && !f32_operand) => n,
        _ => gemm_wgmma::stages_for(&spec, gx * gy * gz, cfg.ring_waves),
    };
    GemmSpec { stages, ..spec }
}
