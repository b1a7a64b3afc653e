//! The CPU reference as a [`Backend`]: f32 arena, plans with one slot an element.

use std::time::Instant;

use alpha_ir::{Program, Value};
use alpha_plan::{kernel_info, Backend, LaunchTime, Plan};
use anyhow::{anyhow, Result};

use crate::Cpu;

/// The CPU reference as a backend.
pub struct CpuBackend {
    cpu: Cpu<f32>,
    /// The host clock around the kernels of the last [`Backend::run`]: the CPU's device time.
    last_run_ms: Option<f64>,
}

impl CpuBackend {
    pub fn compile(program: &Program) -> Result<Self> {
        Ok(CpuBackend { cpu: Cpu::compile(program)?, last_run_ms: None })
    }
    /// From a plan made earlier (an executable built by `alpha build` carries its plans).
    pub fn from_plan(plan: Plan) -> Self {
        CpuBackend { cpu: Cpu::new(plan), last_run_ms: None }
    }
    fn leaf(&self, name: &str) -> Result<Value> {
        self.cpu.leaf(name).ok_or_else(|| anyhow!("the program has no tensor named '{name}'"))
    }
}

impl Backend for CpuBackend {
    fn device(&self) -> &'static str {
        "cpu"
    }
    fn program(&self) -> &Program {
        &self.cpu.plan.program
    }
    fn write(&mut self, name: &str, data: &[f32]) -> Result<()> {
        let v = self.leaf(name)?;
        let want = self.program().graph.ty(v).numel();
        if want != data.len() {
            return Err(anyhow!("'{name}' holds {want} values, got {}", data.len()));
        }
        self.cpu.write(v, data);
        Ok(())
    }
    fn write_ids(&mut self, name: &str, ids: &[u32]) -> Result<()> {
        let data: Vec<f32> = ids.iter().map(|&i| i as f32).collect();
        self.write(name, &data)
    }
    fn read(&mut self, name: &str) -> Result<Vec<f32>> {
        let v = self.leaf(name)?;
        Ok(self.cpu.read(v).to_vec())
    }
    fn output(&mut self, name: &str) -> Result<Vec<f32>> {
        let v = *self.program().outputs.get(name).ok_or_else(|| anyhow!("the program has no output '{name}'"))?;
        Ok(self.cpu.read(v).to_vec())
    }
    fn run(&mut self, phase: &str) -> Result<()> {
        let i = self.program().phase(phase).ok_or_else(|| anyhow!("the program has no phase '{phase}'"))?;
        self.last_run_ms = None;
        let t0 = Instant::now();
        self.cpu.run_phase(i);
        self.last_run_ms = Some(t0.elapsed().as_secs_f64() * 1e3);
        Ok(())
    }
    fn last_run_device_ms(&mut self) -> Result<Option<f64>> {
        Ok(self.last_run_ms)
    }
    fn profile(&mut self, phase: &str) -> Result<Vec<LaunchTime>> {
        let i = self.program().phase(phase).ok_or_else(|| anyhow!("the program has no phase '{phase}'"))?;
        self.last_run_ms = None;
        let times = self.cpu.run_phase_timed(i);
        Ok(times
            .into_iter()
            .map(|(node, us)| {
                let (family, name, flops, shape) = kernel_info(&self.cpu.plan.program, node);
                LaunchTime { family, name, us, flops, shape, kernel: None }
            })
            .collect())
    }
}
