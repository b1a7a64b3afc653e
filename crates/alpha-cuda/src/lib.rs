//! alpha-cuda: Alpha's CUDA backend.
//!
//! Alpha writes its own PTX ([`ptx`]), loads it through the CUDA driver alone
//! ([`runtime::driver`]: no toolkit, NVRTC or vendor libraries), keeps every tensor of a step in
//! one device arena and replays the whole step as one CUDA graph.
//!
//! # Layers
//!
//! The crate reads top to bottom; a module imports only from the layers below it:
//!
//! 1. [`backend`]: [`CudaBackend`], `alpha_plan::Backend` over one GPU. It lowers a program and
//!    hands the result to the runtime: the only module that sees both ends.
//! 2. [`lower`]: plan → launches. The driver (`lower/mod.rs`: the arena, scratch and constant
//!    regions, kernel deduplication, the node loop) and one file per op family's lowering
//!    (`lower/matmul.rs`, `lower/attention.rs`, …), each choosing the kernel and building its
//!    launch from the kernel family's spec. [`config`] ([`CudaConfig`]) is the one value of
//!    switches and tunings the lowering is given.
//! 3. `fusion/` (crate-private): the fusion passes, one file per pass, each deciding from the
//!    plan's slots what a launch may fuse (an epilogue, heads, a rotary on load, …), and the
//!    tiled product spec a MatMul runs as, which the passes judge fusions against. The lowering
//!    reads their decisions; a pass never launches anything.
//! 4. [`kernels`]: one module per kernel family (GEMM and its engines, attention and its
//!    tensor-core forms, LayerNorm, pointwise, reductions, …), each with its spec, its PTX
//!    builder, a host launcher and a CPU reference for checking. Kernels know nothing of plans.
//! 5. [`runtime`]: the CUDA driver (module loading, the arena, launches, graph capture) and
//!    [`ptx`], the PTX builder and renderer every kernel is written with.
//!
//! Where things go: a new kernel (or a variant of one) goes into its family under
//! `kernels/`; a new op's lowering into `lower/<family>.rs`, dispatched from `lower_node`; a
//! new fusion into a pass file under `fusion/`, its decision recorded for the family's
//! lowering to read; a switch to measure it against its absence into [`CudaConfig`].

pub mod backend;
pub mod config;
mod fusion;
pub mod kernels;
pub mod lower;
pub mod ptx;
pub mod runtime;

pub use backend::CudaBackend;
pub use config::CudaConfig;
pub use runtime::driver::{self, Arg, Buf, DeviceArena, Function, Gpu, GpuInfo, Graph, LaunchConfig};

use kernels::{
    adamw, attention, cross_entropy, embedding, gemm, layernorm, multi, recurrence, reduce, rmsnorm, rotary,
};

/// Every kernel the crate can build, as the check harness and `ptxas` see them.
pub fn catalog() -> Vec<ptx::Kernel> {
    let mut v: Vec<ptx::Kernel> = gemm::GemmSpec::all().iter().map(|s| s.kernel()).collect();
    v.extend(embedding::kernels());
    v.extend(cross_entropy::kernels());
    v.extend(adamw::kernels());
    v.extend(multi::kernels());
    // Representative shapes of the plan-lowering families (Coppelius's where it has them).
    let norm = layernorm::Norm { rows: 1024, c: 512 };
    // GPT-2's at sixteen contexts: pass 1 in the rows, the residual added and copied, the
    // columns summed for the bias gradient after it.
    let gpt2 = layernorm::Norm { rows: 16384, c: 768 };
    v.push(layernorm::backward_dx_column_partials_kernel(gpt2, true, true));
    v.extend([
        layernorm::forward_kernel(norm, 1e-5),
        layernorm::backward_dx_kernel(norm),
        layernorm::backward_partials_kernel(norm),
        layernorm::backward_finish_kernel(norm),
        rotary::kernel(8 * 1024, 1024, 64, false),
        recurrence::kernel(2, 64, 96, false),
    ]);
    // Polf's RMSNorms: the stream's rows of 512 (a block a row), the heads' rows of 64 (a warp a
    // row), and the gain's two passes.
    for n in [layernorm::Norm { rows: 1024, c: 512 }, layernorm::Norm { rows: 8192, c: 64 }] {
        v.extend([rmsnorm::forward_kernel(n, f32::EPSILON), rmsnorm::backward_dx_kernel(n)]);
    }
    let head = layernorm::Norm { rows: 8192, c: 64 };
    v.extend([rmsnorm::backward_partials_kernel(head), rmsnorm::backward_finish_kernel(head)]);
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
    v.push(attention::mma::forward_kernel(&dims));
    v.push(attention::mma::forward_kernel_rotating(&dims, [true, true]));
    for r in [false, true] {
        v.extend([attention::mma::backward_dq_kernel(&dims, r), attention::mma::backward_dkv_kernel(&dims, r)]);
        v.extend([
            attention::mma::backward_dq_kernel_rotating(&dims, r, [true, true]),
            attention::mma::backward_dkv_kernel_rotating(&dims, r, [true, true]),
        ]);
    }
    // Both backward passes in one launch after delta alone (Coppelius's options).
    v.push(attention::mma::backward_delta_kernel(&dims));
    v.push(attention::mma::backward_kernel_rotating(&dims, [true, true], [true, true]));
    v.push(attention::mma::forward_kernel_bf16(&dims));
    v.push(attention::wgmma::forward_kernel(&dims, false));
    v.push(attention::wgmma::forward_kernel(&dims, true));
    v.push(attention::wgmma::backward_kernel(&dims, [true, true], attention::mma::Gradients::MergedBf16));
    v.push(attention::wgmma::backward_kernel(&dims, [true, true], attention::mma::Gradients::MergedF32));
    v.push(attention::mma::backward_delta_kernel_bf16(&dims));
    v.push(attention::mma::backward_kernel_bf16(&dims, [true, true]));
    // The q/k/v projection stored split into heads (Coppelius's shape at one context).
    let heads =
        gemm::Heads { batch: 1, t: 1024, heads: 8, d: 64, bf16_turned: false, bf16: false, bias: false, delta: false };
    v.push(
        gemm::GemmSpec {
            heads: Some(heads),
            tile: gemm::Tile::T128x64,
            ..gemm::GemmSpec::new(gemm::Layout::RowMajor, gemm::Layout::RowMajor, gemm::Input::Bf16).wgmma()
        }
        .kernel(),
    );
    // GPT-2's q/k/v projection: bf16 heads as they are, the bias added on the way.
    let biased = gemm::Heads { heads: 12, bf16: true, bias: true, ..heads };
    v.push(
        gemm::GemmSpec {
            heads: Some(biased),
            ..gemm::GemmSpec::new(gemm::Layout::RowMajor, gemm::Layout::RowMajor, gemm::Input::Bf16).tma()
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
