//! alpha-cuda: Alpha's CUDA backend foundation.
//!
//! Alpha writes its own PTX ([`ptx`]), loads it through the CUDA driver alone ([`driver`]: no
//! toolkit, NVRTC or vendor libraries), keeps every tensor of a step in one device arena and
//! replays the whole step as one CUDA graph. Each kernel family is one module that opens with
//! why it is built the way it is, and carries a host launcher taking raw device addresses plus a
//! CPU reference for checking.
//!
//! Whole programs: [`lower`] turns a plan into launches over one arena (no GPU needed, so PTX can
//! be checked anywhere) and [`CudaBackend`] runs them, one captured CUDA graph per phase, behind
//! `alpha_plan::Backend`. Matrix products go to [`gemm`], which builds them on `mma.sync`, on
//! Hopper's `wgmma` fed by a `cp.async` ring ([`gemm_wgmma`], wherever K allows), or on `wgmma`
//! fed by the tensor memory accelerator from a producer warp ([`gemm_tma`], where both operands
//! are bf16: what the lowering chooses for nearly every product). Every kernel
//! is launched as a programmatic dependent launch ([`driver`]). The generic families it adds — [`pointwise`], [`fused`] (runs of
//! elementwise ops as one kernel), [`reduce`], [`layernorm`], [`rotary`], [`attention`] (and its
//! tensor-core forms: [`attention_mma`] on `mma.sync`, and [`attention_wgmma`] on Hopper's
//! `wgmma` for bf16 q, k and v — the same bits), [`gemm_simple`], [`recurrence`] — follow the CPU
//! reference's order of operations so the two compare tightly.

pub mod driver;
pub mod ptx;

pub use driver::{Arg, Buf, DeviceArena, Function, Gpu, GpuInfo, Graph, LaunchConfig};
pub mod adamw;
pub mod attention;
pub mod attention_mma;
pub mod attention_wgmma;
pub mod backend;
pub mod config;
pub mod cross_entropy;
pub mod embedding;
pub mod fused;
pub mod gemm;
pub mod gemm_simple;
pub mod gemm_tma;
pub mod gemm_wgmma;
pub mod layernorm;
pub mod lower;
pub mod multi;
pub mod pointwise;
pub mod recurrence;
pub mod reduce;
pub mod rotary;

pub use backend::CudaBackend;
pub use config::CudaConfig;

/// Every kernel the crate can build, as the check harness and `ptxas` see them.
pub fn catalog() -> Vec<ptx::Kernel> {
    let mut v: Vec<ptx::Kernel> = gemm::GemmSpec::all().iter().map(|s| s.kernel()).collect();
    v.extend(embedding::kernels());
    v.extend(cross_entropy::kernels());
    v.extend(adamw::kernels());
    v.extend(multi::kernels());
    // Representative shapes of the plan-lowering families (Coppelius's where it has them).
    let norm = layernorm::Norm { rows: 1024, c: 512 };
    v.extend([
        layernorm::forward_kernel(norm, 1e-5),
        layernorm::backward_dx_kernel(norm),
        layernorm::backward_partials_kernel(norm),
        layernorm::backward_finish_kernel(norm),
        rotary::kernel(8 * 1024, 1024, 64, false),
        recurrence::kernel(2, 64, 96, false),
    ]);
    let dims = attention::Dims { b: 1, h: 8, g: 8, t: 1024, d: 64, scale: 0.125, softcap: None };
    v.push(attention::forward_kernel(&dims));
    v.push(attention::forward_kernel_rotating(&dims, [true, true]));
    for r in [false, true] {
        v.extend([attention::backward_dq_kernel(&dims, r), attention::backward_dkv_kernel(&dims, r)]);
        v.extend([
            attention::backward_dq_kernel_rotating(&dims, r, [true, true]),
            attention::backward_dkv_kernel_rotating(&dims, r, [true, true]),
        ]);
    }
    // Their tensor-core replacements for head dimension 64 (what the lowering uses there).
    v.push(attention_mma::forward_kernel(&dims));
    v.push(attention_mma::forward_kernel_rotating(&dims, [true, true]));
    for r in [false, true] {
        v.extend([attention_mma::backward_dq_kernel(&dims, r), attention_mma::backward_dkv_kernel(&dims, r)]);
        v.extend([
            attention_mma::backward_dq_kernel_rotating(&dims, r, [true, true]),
            attention_mma::backward_dkv_kernel_rotating(&dims, r, [true, true]),
        ]);
    }
    // Both backward passes in one launch after delta alone (Coppelius's options).
    v.push(attention_mma::backward_delta_kernel(&dims));
    v.push(attention_mma::backward_kernel_rotating(&dims, [true, true], [true, true]));
    v.push(attention_mma::forward_kernel_bf16(&dims));
    v.push(attention_wgmma::forward_kernel(&dims, false));
    v.push(attention_wgmma::forward_kernel(&dims, true));
    v.push(attention_wgmma::backward_kernel(&dims, [true, true], true));
    v.push(attention_mma::backward_delta_kernel_bf16(&dims));
    v.push(attention_mma::backward_kernel_bf16(&dims, [true, true]));
    // The q/k/v projection stored split into heads (Coppelius's shape at one context).
    let heads = gemm::Heads { batch: 1, t: 1024, heads: 8, d: 64, bf16_turned: false, delta: false };
    v.push(
        gemm::GemmSpec {
            heads: Some(heads),
            tile: gemm::Tile::T128x64,
            ..gemm::GemmSpec::new(gemm::Layout::RowMajor, gemm::Layout::RowMajor, gemm::Input::Bf16).wgmma()
        }
        .kernel(),
    );
    // The GEMM's activation epilogue (Coppelius's gated GELU).
    v.push(
        gemm::GemmSpec {
            activation: Some(alpha_ir::Unary::Gelu),
            tile: gemm::Tile::T128x64,
            ..gemm::GemmSpec::new(gemm::Layout::RowMajor, gemm::Layout::RowMajor, gemm::Input::F32)
        }
        .kernel(),
    );
    let r = reduce::Reduction::new(
        alpha_ir::Reduce::Sum,
        &[12288, 512],
        &[0, 1],
        alpha_ir::DType::F32,
        alpha_ir::DType::F32,
    )
    .expect("a valid reduction");
    v.extend([r.kernel(), r.finish_kernel()]);
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}
