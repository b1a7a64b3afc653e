//! alpha-cuda-lab: the kernel checks and benchmarks of Alpha's CUDA backend, out of the product.
//!
//! Why a crate of its own: the product (`alpha`, through `alpha-run`) depends on `alpha-cuda`
//! alone; the harness that checks each kernel family against its CPU reference on a GPU and
//! times it ([`check`]), and the examples that run it (`kernel_check`, `backend_check`), are
//! tools for whoever changes a kernel. As in llm.c's `dev/cuda`, a variant is shown equal here
//! before it replaces the old one in the product. [`interp`] runs a kernel's PTX on the host
//! (the scalar instructions only), so the recurrence kernels are checked against the CPU bit for
//! bit where there is no GPU (`tests/interpreted.rs`).
//!
//! Run on a GPU: `cargo run --release -p alpha-cuda-lab --example kernel_check`,
//! `cargo run --release -p alpha-cuda-lab --example backend_check -- --system coppelius`, and
//! `cargo test --release -p alpha-cuda-lab` (each GPU test skips without a device).

pub mod check;
pub mod interp;
