//! Backends the run policy can use: the trait lives with the Plan; the CPU reference is
//! re-exported from its crate.

pub use alpha_cpu::CpuBackend;
pub use alpha_plan::Backend;
