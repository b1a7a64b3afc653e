//! What a run needs of a device: write and read named leaves, read named outputs, run a phase.
//! The CPU reference and the CUDA backend implement it; the run policy and the gates use it.

use alpha_ir::Program;
use anyhow::{bail, Result};

use crate::profile::LaunchTime;

pub trait Backend {
    /// `cpu` or `cuda`.
    fn device(&self) -> &'static str;
    fn program(&self) -> &Program;
    /// Write a parameter, state tensor or host scalar.
    fn write(&mut self, name: &str, data: &[f32]) -> Result<()>;
    /// Write token ids into an integer input.
    fn write_ids(&mut self, name: &str, ids: &[u32]) -> Result<()>;
    /// Read a parameter or state tensor.
    fn read(&mut self, name: &str) -> Result<Vec<f32>>;
    /// Read a named program output (`loss`, `losses`, `logits`, `grad_norm`).
    fn output(&mut self, name: &str) -> Result<Vec<f32>>;
    /// Run a phase. A device backend may return once the phase is launched: its reads and
    /// writes wait for it, and report a fault in it.
    fn run(&mut self, phase: &str) -> Result<()>;
    /// Milliseconds the last [`Backend::run`] took on the device's own clock: what a step
    /// costs the device, apart from the host's work around it (a wall clock counts both). A
    /// backend that returns from `run` before the device is done waits for it here, so read
    /// it where the caller waits anyway (after reading an output). None where the backend
    /// does not measure it, or the last run was a [`Backend::profile`] (launch by launch, not
    /// the phase as it runs).
    fn last_run_device_ms(&mut self) -> Result<Option<f64>> {
        Ok(None)
    }

    /// Launches one run of `phase` makes on the device, where that differs from the plan's
    /// kernel count (a backend that fuses kernels says so here).
    fn launches(&self, phase: &str) -> Option<usize> {
        let _ = phase;
        None
    }

    /// Run a phase once with every launch timed (on the device's own clock where it has one).
    fn profile(&mut self, phase: &str) -> Result<Vec<LaunchTime>> {
        let _ = phase;
        bail!("the {} backend cannot time its launches", self.device())
    }
}
