//! The one place `alpha` reads its `ALPHA_*` environment: the CUDA backend's measurement
//! switches (`alpha_cuda::config`'s table) and the robustness tests' crash points. Libraries take
//! what is read here as values, so their results never depend on the caller's shell.

use anyhow::Result;

/// Reads the variables and hands each library its part.
pub fn apply() -> Result<()> {
    let var = |name: &str| std::env::var(name).ok();
    alpha_run::session::use_cuda_config(alpha_cuda::CudaConfig::from_vars(var)?);
    if let Some(spec) = var(alpha_run::testhook::VAR).filter(|v| !v.is_empty()) {
        alpha_run::testhook::arm(&spec)?;
    }
    if let Some(point) = var(alpha_data::crash::ENV).filter(|v| !v.is_empty()) {
        alpha_data::crash::arm(&point);
    }
    Ok(())
}
