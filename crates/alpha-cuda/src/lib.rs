//! alpha-cuda: Alpha's CUDA backend foundation.
//!
//! Alpha writes its own PTX ([`ptx`]), loads it through the CUDA driver alone ([`driver`]: no
//! toolkit, NVRTC or vendor libraries), keeps every tensor of a step in one device arena and
//! replays the whole step as one CUDA graph. Each kernel family is one module that opens with
//! why it is built the way it is, and carries a host launcher taking raw device addresses plus a
//! CPU reference for checking.

pub mod driver;
pub mod ptx;

pub use driver::{Arg, Buf, DeviceArena, Function, Gpu, GpuInfo, Graph, LaunchConfig};
pub mod adamw;
pub mod attention;
pub mod backend;
pub mod check;
pub mod cross_entropy;
pub mod elementwise;
pub mod embedding;
pub mod gemm;
pub mod gemm_simple;
pub mod layernorm;
pub mod lower;
pub mod pointwise;
pub mod recurrence;
pub mod reduce;
pub mod rotary;

pub use backend::CudaBackend;

/// Every kernel the crate can build, as the check harness and `ptxas` see them.
pub fn catalog() -> Vec<ptx::Kernel> {
    let mut v: Vec<ptx::Kernel> = gemm::GemmSpec::all().iter().map(|s| s.kernel()).collect();
    v.extend(elementwise::kernels());
    v.extend(embedding::kernels());
    v.extend(cross_entropy::kernels());
    v.extend(adamw::kernels());
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}
