//! What train, score and predict share: compiling a system for a device, putting a
//! checkpoint's tensors into a backend and taking them out, and the configuration hash that
//! says whether a checkpoint fits a system.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use alpha_ir::{Op, Program};
use alpha_systems::System;
use anyhow::{anyhow, bail, Result};
use sha2::{Digest, Sha256};

use crate::backend::{Backend, CpuBackend};
use crate::checkpoint::Checkpoint;

/// Where a program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda,
}

impl std::str::FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" | "gpu" => Ok(Device::Cuda),
            other => Err(format!("unknown device '{other}': use cpu or cuda")),
        }
    }
}

impl Device {
    /// The device asked for, or else the GPU where one is present and the CPU where not: what
    /// generation (`alpha predict`, `alpha chat`) runs on by default. Why: a decode program
    /// gives hundreds of tokens a second on the H200 against a few on two CPU cores. A GPU
    /// that is present but fails to open is an error when the backend opens it, not a reason to
    /// fall back silently.
    pub fn or_present(asked: Option<Device>) -> Result<Device> {
        match asked {
            Some(d) => Ok(d),
            None => Ok(if alpha_cuda::Gpu::present()? { Device::Cuda } else { Device::Cpu }),
        }
    }
}

/// Plans carried by a built executable, keyed by their program's hash.
static EMBEDDED: OnceLock<Vec<(String, alpha_plan::Plan)>> = OnceLock::new();

static CUDA_CONFIG: OnceLock<alpha_cuda::CudaConfig> = OnceLock::new();

/// The CUDA backend's configuration for this process (the command line reads it from its
/// environment once); without it, the measured defaults.
pub fn use_cuda_config(config: alpha_cuda::CudaConfig) {
    let _ = CUDA_CONFIG.set(config);
}

/// The configuration [`use_cuda_config`] set, or the defaults.
pub fn cuda_config() -> alpha_cuda::CudaConfig {
    CUDA_CONFIG.get().cloned().unwrap_or_default()
}

/// Use these plans instead of planning again when a program matches one of them.
pub fn use_embedded_plans(plans: Vec<alpha_plan::Plan>) {
    let _ = EMBEDDED.set(plans.into_iter().map(|p| (p.program.key(), p)).collect());
}

/// Compile `program` for `device` (or take its plan from the executable).
pub fn backend_for(device: Device, program: &Program) -> Result<Box<dyn Backend>> {
    if device == Device::Cpu {
        if let Some(plans) = EMBEDDED.get() {
            let key = program.key();
            if let Some((_, plan)) = plans.iter().find(|(k, _)| *k == key) {
                return Ok(Box::new(CpuBackend::from_plan(plan.clone())));
            }
        }
    }
    match device {
        Device::Cpu => Ok(Box::new(CpuBackend::compile(program)?)),
        Device::Cuda => Ok(Box::new(alpha_cuda::CudaBackend::compile(program, &cuda_config())?)),
    }
}

/// Persistent tensors of a program: (name, shape), parameters first then state, in build order.
pub fn persistent(program: &Program) -> Vec<(String, Vec<usize>, bool)> {
    program
        .graph
        .nodes
        .iter()
        .filter_map(|n| match &n.op {
            Op::Param { name, .. } => Some((name.clone(), n.outputs[0].shape.clone(), true)),
            Op::State { name, .. } => Some((name.clone(), n.outputs[0].shape.clone(), false)),
            _ => None,
        })
        .collect()
}

/// A hash of what a checkpoint must agree with: the system, its parameters' names and shapes,
/// and its vocabulary and context. Batch and schedule may change between invocations.
pub fn config_hash(system: &dyn System, program: &Program) -> String {
    let mut h = Sha256::new();
    h.update(system.name().as_bytes());
    h.update(system.vocab().to_le_bytes());
    h.update(system.context().to_le_bytes());
    for (name, shape, is_param) in persistent(program) {
        if is_param {
            h.update(name.as_bytes());
            for d in shape {
                h.update((d as u64).to_le_bytes());
            }
        }
    }
    hex::encode(h.finalize())[..16].to_string()
}

/// Check a checkpoint fits `system` and `program`, then write its tensors into `backend`.
/// Parameters must all be present; state absent from the checkpoint (say, a forward-only
/// program reading a training checkpoint needs none) is left as it is.
pub fn restore(ckpt: &Checkpoint, system: &dyn System, backend: &mut dyn Backend, path: &str) -> Result<()> {
    if ckpt.meta.system != system.name() {
        bail!("checkpoint {path} is of system '{}', not '{}'", ckpt.meta.system, system.name());
    }
    for (name, shape, is_param) in persistent(backend.program()) {
        match ckpt.tensors.get(&name) {
            Some((s, data)) => {
                if *s != shape {
                    bail!("checkpoint {path} holds {name} with shape {s:?}, but {} needs {shape:?}", system.name());
                }
                backend.write(&name, data)?;
            }
            None if is_param => bail!("checkpoint {path} lacks parameter {name} of {}", system.name()),
            None => {}
        }
    }
    let expected = config_hash(system, backend.program());
    if ckpt.meta.config_hash != expected {
        bail!(
            "checkpoint {path} was made for another configuration of {} (config {}, this build {expected})",
            system.name(),
            ckpt.meta.config_hash
        );
    }
    Ok(())
}

/// Read every persistent tensor out of a backend, for a checkpoint.
pub fn snapshot(backend: &mut dyn Backend) -> Result<crate::checkpoint::Tensors> {
    let mut out = BTreeMap::new();
    for (name, shape, _) in persistent(backend.program()) {
        let data = backend.read(&name)?;
        out.insert(name, (shape, data));
    }
    Ok(out)
}

/// Ids must fit the system's vocabulary.
pub fn check_ids(ids: &[u32], vocab: usize) -> Result<()> {
    if let Some(&bad) = ids.iter().find(|&&i| i as usize >= vocab) {
        return Err(anyhow!("token id {bad} is outside the system's vocabulary of {vocab}"));
    }
    Ok(())
}
