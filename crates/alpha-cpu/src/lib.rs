//! The CPU backend: Alpha's reference. It executes a Plan over one arena, multithreaded with
//! rayon, with fixed-order reductions so runs repeat bit for bit, and matrix products from
//! `matrixmultiply`. Generic over the float type: f32 for training, f64 for gradient checks.

pub mod backend;
pub mod exec;
pub mod kernels;
pub mod real;

pub use backend::CpuBackend;
pub use exec::Cpu;
pub use real::Real;
