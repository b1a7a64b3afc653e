//! The CUDA backend: a lowered plan on one GPU, each phase captured once as a CUDA graph.
//!
//! Why: the run policy (train, score, predict, the gates) drives any device through
//! `alpha_plan::Backend`; this is that trait over [`crate::lower`]'s launches. Everything lives
//! in one device allocation of the lowered arena's size — parameters, optimizer state, inputs,
//! host scalars, constants, activations, scratch — so a launch's arguments are fixed addresses
//! and each phase is recorded once with stream capture and replayed as one graph per call.
//! Values that change between steps (token ids, learning rate, bias corrections) are written
//! into their arena slots before the replay, never baked into the graph.
//!
//! How: `compile` lowers the program (no GPU needed for that), opens device 0 (a clear error
//! without a driver or GPU), allocates the arena (a clear "too little device memory" error),
//! zeroes it, writes constants and rotary tables, loads each distinct kernel module once, and
//! captures one graph per phase. `run` replays and waits, so a fault is reported at the phase
//! that caused it; [`CudaBackend::set_checked`] instead runs the launches one by one with a
//! synchronisation after each, so a fault names its kernel and node. With
//! [`CudaConfig::ptx_dir`] set, every kernel's PTX is written there at compile time (for
//! `ptxas`).

use std::collections::HashMap;

use alpha_ir::{DType, Op, Program, Value};
use alpha_plan::{kernel_info, Backend, LaunchTime};
use anyhow::{anyhow, bail, Context, Result};

use crate::config::CudaConfig;
use crate::lower::{lower_program, LArg, Launch, Lowered};
use crate::runtime::driver::{Arg, DeviceArena, Event, Function, Gpu, GpuInfo, Graph, LaunchConfig};

/// Writes the device's nanosecond clock into `buf[i]`: the bracket of a profiled launch.
const STAMP_PTX: &str = ".version 8.0
.target sm_90a
.address_size 64
.visible .entry alpha_stamp(.param .u64 buf, .param .u32 i)
{
    .reg .u32 %r<2>;
    .reg .u64 %rd<6>;
    griddepcontrol.wait;
    griddepcontrol.launch_dependents;
    ld.param.u64 %rd1, [buf];
    ld.param.u32 %r1, [i];
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r1, 8;
    add.u64 %rd4, %rd2, %rd3;
    mov.u64 %rd5, %globaltimer;
    st.global.u64 [%rd4], %rd5;
    ret;
}
";

/// PTX carried by an executable built with `alpha build --device cuda`: for each program (by
/// its key), the text of every kernel in lowering order.
static CARRIED_PTX: std::sync::OnceLock<HashMap<String, Vec<String>>> = std::sync::OnceLock::new();

/// Load kernels from this PTX (carried by a built executable) instead of rendering them again.
pub fn use_carried_ptx(ptx: HashMap<String, Vec<String>>) {
    let _ = CARRIED_PTX.set(ptx);
}

/// The PTX of every kernel of `program` lowered with `config`, in lowering order (what a built
/// executable carries).
pub fn program_ptx(program: &Program, config: &CudaConfig) -> Result<Vec<String>> {
    Ok(lower_program(program, config)?.kernels.iter().map(|k| k.render()).collect())
}

/// A program compiled for the GPU.
pub struct CudaBackend {
    // Field order is drop order: everything that borrows `gpu` goes before it.
    graphs: Vec<Graph<'static>>,
    arena: DeviceArena<'static>,
    functions: Vec<Function>,
    lowered: Lowered,
    names: HashMap<String, Value>,
    checked: bool,
    /// Each run waits for the device before returning ([`CudaConfig::sync_each_run`]).
    sync_each_run: bool,
    /// The phase last launched and not yet waited for ([`Backend::run`] returns once the
    /// graph is launched; the next read or copy waits, and names it if it faulted).
    unsettled: Option<String>,
    /// Events recorded on the stream just before and after a run's launches: its device time,
    /// read once the run has settled.
    run_marks: (Event, Event),
    /// Whether `run_marks` bracket the last run (not so while a run is being launched, after
    /// a launch failed, or after a profile).
    marked: bool,
    gpu: Box<Gpu>,
}

fn args_of(l: &Launch, base: u64) -> Vec<Arg> {
    l.args
        .iter()
        .map(|a| match *a {
            LArg::Ptr(o) => Arg::U64(base + o as u64),
            LArg::U32(x) => Arg::U32(x),
            LArg::U64(x) => Arg::U64(x),
        })
        .collect()
}

fn launch_one(gpu: &Gpu, functions: &[Function], lowered: &Lowered, base: u64, l: &Launch) -> Result<()> {
    let cfg = LaunchConfig { grid: l.grid, block: l.block, shared_bytes: 0 };
    gpu.launch(&functions[l.kernel], cfg, &args_of(l, base)).with_context(|| lowered.describe(l))
}

impl CudaBackend {
    /// Lowers `program` with `config`, opens the GPU, allocates and fills the arena, loads the
    /// kernels and captures one graph per phase.
    pub fn compile(program: &Program, config: &CudaConfig) -> Result<CudaBackend> {
        let lowered =
            lower_program(program, config).with_context(|| format!("compiling {} for CUDA", program.graph.system))?;
        if let Some(dir) = &config.ptx_dir {
            lowered.dump_ptx(dir)?;
        }
        let gpu = Box::new(
            Gpu::new(0)
                .context("the CUDA backend needs an NVIDIA GPU and its driver (use --device cpu without one)")?,
        );
        gpu.set_dependent_launch(config.dependent_launch);
        // SAFETY: the Gpu lives in a Box that this struct owns and never moves out of or
        // replaces; the arena and graphs borrowing it are fields declared (so dropped) before it.
        let g: &'static Gpu = unsafe { &*(gpu.as_ref() as *const Gpu) };
        let arena = g
            .arena(lowered.arena)
            .with_context(|| format!("allocating the {} arena of {} bytes", program.graph.system, lowered.arena))?;
        let all = arena.region(0, lowered.arena / 4 * 4)?;
        arena.fill_u32(all, 0)?;
        for (off, bytes) in &lowered.inits {
            arena.upload(arena.region(*off, bytes.len())?, bytes)?;
        }
        for (at, operand, map) in &lowered.tensor_maps {
            let bytes = crate::kernels::gemm::tma::encode(arena.base() + *operand as u64, map)?;
            arena.upload(arena.region(*at, bytes.len())?, &bytes)?;
        }
        let carried = CARRIED_PTX.get().and_then(|m| m.get(&program.key()));
        let mut functions = Vec::with_capacity(lowered.kernels.len());
        for (i, k) in lowered.kernels.iter().enumerate() {
            let f = match carried.and_then(|c| c.get(i)) {
                // The executable's own PTX; it must be what this lowering would write.
                Some(text) => {
                    if *text != k.render() {
                        bail!("kernel {} carried by this executable differs from its lowering", k.name);
                    }
                    g.load_ptx(&k.name, text).and_then(|f| g.adopt(f, k))
                }
                None => g.load(k),
            };
            functions.push(f.with_context(|| format!("loading kernel {}", k.name))?);
        }
        let base = arena.base();
        let mut graphs = vec![];
        for (i, ph) in lowered.phases.iter().enumerate() {
            let graph = g
                .capture(|| {
                    for l in ph {
                        launch_one(g, &functions, &lowered, base, l)?;
                    }
                    Ok(())
                })
                .with_context(|| format!("capturing phase '{}'", lowered.plan.phases[i].name))?;
            graphs.push(graph);
        }
        let mut names = HashMap::new();
        for (i, n) in lowered.plan.program.graph.nodes.iter().enumerate() {
            if let Op::Param { name, .. } | Op::State { name, .. } | Op::Input { name } | Op::HostScalar { name } =
                &n.op
            {
                names.insert(name.clone(), Value { node: i as u32, index: 0 });
            }
        }
        // Checked launches run one by one with a synchronisation after each, so a kernel fault
        // names its launch (a fault inside a replayed graph cannot).
        let checked = config.check_launches;
        let sync_each_run = config.sync_each_run;
        let run_marks = (gpu.event()?, gpu.event()?);
        Ok(CudaBackend {
            graphs,
            arena,
            functions,
            lowered,
            names,
            checked,
            sync_each_run,
            unsettled: None,
            run_marks,
            marked: false,
            gpu,
        })
    }

    pub fn info(&self) -> &GpuInfo {
        self.gpu.info()
    }

    pub fn lowered(&self) -> &Lowered {
        &self.lowered
    }

    /// Runs launches one at a time with a synchronisation after each (a fault names its
    /// kernel and node) instead of replaying the graph.
    pub fn set_checked(&mut self, on: bool) {
        self.checked = on;
    }

    fn phase_index(&self, phase: &str) -> Result<usize> {
        self.lowered.plan.program.phase(phase).ok_or_else(|| anyhow!("the program has no phase '{phase}'"))
    }

    /// Launches in the graph of `phase`.
    pub fn launches(&self, phase: &str) -> Result<usize> {
        Ok(self.graphs[self.phase_index(phase)?].launches().len())
    }

    /// Device-event times of `reps` replays of `phase` after `warmup` (milliseconds each).
    pub fn time_phase(&self, phase: &str, warmup: usize, reps: usize) -> Result<Vec<f32>> {
        let g = &self.graphs[self.phase_index(phase)?];
        self.gpu.time(warmup, reps, || g.replay())
    }

    /// Runs `phase` launch by launch, each bracketed by device events, and returns each
    /// launch's kernel name, node and milliseconds (event overhead included; for tables by
    /// family, not for totals — the replayed graph is the step's time).
    pub fn profile_events(&self, phase: &str) -> Result<Vec<(String, Option<u32>, f32)>> {
        let i = self.phase_index(phase)?;
        let base = self.arena.base();
        let mut out = Vec::with_capacity(self.lowered.phases[i].len());
        for l in &self.lowered.phases[i] {
            let ms = self.gpu.time(0, 1, || launch_one(&self.gpu, &self.functions, &self.lowered, base, l))?;
            out.push((self.lowered.kernels[l.kernel].name.clone(), l.node, ms[0]));
        }
        Ok(out)
    }

    /// Runs `phase` launch by launch, each bracketed by a one-thread kernel that writes the
    /// device's `%globaltimer` (nanoseconds) into a stamp buffer read back at the end, so every
    /// launch's time comes from the GPU's own clock. A launch's time includes one stamp's
    /// start-up, about a microsecond; the replayed graph remains the step's true time.
    pub fn profile_stamps(&self, phase: &str) -> Result<Vec<LaunchTime>> {
        let i = self.phase_index(phase)?;
        let launches = &self.lowered.phases[i];
        let stamp = self.gpu.load_ptx("alpha_stamp", STAMP_PTX)?;
        let stamps = self.gpu.arena((launches.len() + 1) * 8)?;
        let buf = stamps.alloc((launches.len() + 1) * 8)?;
        let base = self.arena.base();
        let one = LaunchConfig { grid: (1, 1, 1), block: (1, 1, 1), shared_bytes: 0 };
        for (k, l) in launches.iter().enumerate() {
            self.gpu.launch(&stamp, one, &[Arg::U64(buf.ptr), Arg::U32(k as u32)])?;
            launch_one(&self.gpu, &self.functions, &self.lowered, base, l)?;
        }
        self.gpu.launch(&stamp, one, &[Arg::U64(buf.ptr), Arg::U32(launches.len() as u32)])?;
        self.gpu.synchronize().with_context(|| format!("profiling phase '{phase}'"))?;
        let words = stamps.download::<u32>(buf, 2 * (launches.len() + 1))?;
        let ns: Vec<u64> = words.chunks_exact(2).map(|w| w[0] as u64 | (w[1] as u64) << 32).collect();
        let program = &self.lowered.plan.program;
        Ok(launches
            .iter()
            .enumerate()
            .map(|(k, l)| {
                let us = ns[k + 1].saturating_sub(ns[k]) as f64 / 1e3;
                let kernel = Some(self.lowered.kernels[l.kernel].name.clone());
                match l.node {
                    Some(node) => {
                        let (family, name, mut flops, mut shape) = kernel_info(program, node);
                        // A node's later launches (a split-K GEMM's reduction) count in its
                        // family's time, not again in its shape's arithmetic.
                        if k > 0 && launches[k - 1].node == Some(node) {
                            (flops, shape) = (None, None);
                        }
                        LaunchTime { family, name, us, flops, shape, kernel }
                    }
                    None => {
                        let name = self.lowered.kernels[l.kernel].name.clone();
                        LaunchTime { family: "copy".into(), name, us, flops: None, shape: None, kernel }
                    }
                }
            })
            .collect())
    }

    fn leaf(&self, name: &str) -> Result<Value> {
        self.names.get(name).copied().ok_or_else(|| anyhow!("the program has no tensor named '{name}'"))
    }

    /// Waits for the phase last launched, naming it if a launch faulted.
    fn settle(&mut self) -> Result<()> {
        match self.unsettled.take() {
            Some(phase) => self.gpu.synchronize().with_context(|| {
                format!(
                    "running phase '{phase}' on {} (set ALPHA_CUDA_CHECK_LAUNCHES=1 to run launch by launch and name the one that faults)",
                    self.gpu.info().name
                )
            }),
            None => Ok(()),
        }
    }

    fn write_value(&mut self, v: Value, name: &str, data: &[f32]) -> Result<()> {
        let ty = self.lowered.plan.program.graph.ty(v).clone();
        if ty.numel() != data.len() {
            bail!("'{name}' holds {} values, got {}", ty.numel(), data.len());
        }
        let slot = self.lowered.plan.slot(v);
        let buf = self.arena.region(slot.offset, ty.bytes())?;
        // A scalar (a step's learning rate and counters) is set on the stream without waiting
        // for the step before; anything larger is copied once the device is idle.
        let word = match (data, ty.dtype) {
            (&[x], DType::F32) => Some(x.to_bits()),
            (&[x], DType::I32) => Some(x.round() as i32 as u32),
            _ => None,
        };
        if let Some(w) = word {
            return self.arena.set_word(buf, w).with_context(|| format!("writing '{name}'"));
        }
        self.settle()?;
        match ty.dtype {
            DType::F32 => self.arena.upload(buf, data),
            DType::BF16 => {
                let h: Vec<half::bf16> = data.iter().map(|&x| half::bf16::from_f32(x)).collect();
                self.arena.upload(buf, &h)
            }
            DType::I32 => {
                let h: Vec<i32> = data.iter().map(|&x| x.round() as i32).collect();
                self.arena.upload(buf, &h)
            }
            other => bail!("'{name}' is {other}, which the CUDA backend does not hold"),
        }
        .with_context(|| format!("writing '{name}'"))
    }

    /// Reads any value of the plan (as f32), once the phase last launched is done.
    pub fn read_value(&mut self, v: Value) -> Result<Vec<f32>> {
        self.settle()?;
        let ty = self.lowered.plan.program.graph.ty(v);
        let n = ty.numel();
        let slot = self.lowered.plan.slot(v);
        let buf = self.arena.region(slot.offset, ty.bytes())?;
        Ok(match ty.dtype {
            DType::F32 => self.arena.download::<f32>(buf, n)?,
            DType::BF16 => self.arena.download::<half::bf16>(buf, n)?.iter().map(|x| x.to_f32()).collect(),
            DType::I32 => self.arena.download::<i32>(buf, n)?.iter().map(|&x| x as f32).collect(),
            other => bail!("{v} is {other}, which the CUDA backend does not hold"),
        })
    }
}

impl Backend for CudaBackend {
    fn device(&self) -> &'static str {
        "cuda"
    }
    fn program(&self) -> &Program {
        &self.lowered.plan.program
    }
    fn write(&mut self, name: &str, data: &[f32]) -> Result<()> {
        let v = self.leaf(name)?;
        self.write_value(v, name, data)
    }
    fn write_ids(&mut self, name: &str, ids: &[u32]) -> Result<()> {
        let v = self.leaf(name)?;
        let ty = self.lowered.plan.program.graph.ty(v);
        if ty.dtype != DType::I32 {
            let data: Vec<f32> = ids.iter().map(|&i| i as f32).collect();
            return self.write_value(v, name, &data);
        }
        if ty.numel() != ids.len() {
            bail!("'{name}' holds {} ids, got {}", ty.numel(), ids.len());
        }
        let slot = self.lowered.plan.slot(v);
        self.settle()?;
        self.arena
            .upload(self.arena.region(slot.offset, ids.len() * 4)?, ids)
            .with_context(|| format!("writing '{name}'"))
    }
    fn read(&mut self, name: &str) -> Result<Vec<f32>> {
        let v = self.leaf(name)?;
        self.read_value(v)
    }
    fn output(&mut self, name: &str) -> Result<Vec<f32>> {
        let v = *self.program().outputs.get(name).ok_or_else(|| anyhow!("the program has no output '{name}'"))?;
        self.read_value(v)
    }
    fn profile(&mut self, phase: &str) -> Result<Vec<LaunchTime>> {
        self.settle()?;
        self.marked = false;
        self.profile_stamps(phase)
    }
    fn last_run_device_ms(&mut self) -> Result<Option<f64>> {
        self.settle()?;
        if !self.marked {
            return Ok(None);
        }
        let ms = self.run_marks.0.elapsed_ms(&self.run_marks.1).context("reading a run's device time")?;
        Ok(Some(ms as f64))
    }
    fn launches(&self, phase: &str) -> Option<usize> {
        CudaBackend::launches(self, phase).ok()
    }
    fn run(&mut self, phase: &str) -> Result<()> {
        let i = self.phase_index(phase)?;
        self.marked = false;
        if self.checked {
            self.gpu.set_checked(true);
            let base = self.arena.base();
            let r = self.gpu.record(&self.run_marks.0).and_then(|()| {
                self.lowered.phases[i]
                    .iter()
                    .try_for_each(|l| launch_one(&self.gpu, &self.functions, &self.lowered, base, l))
            });
            self.gpu.set_checked(false);
            r?;
            self.gpu.record(&self.run_marks.1)?;
            self.gpu.synchronize().with_context(|| format!("running phase '{phase}' launch by launch"))?;
            self.marked = true;
            return Ok(());
        }
        // The graph runs on while the host goes on (as a training loop's next step's scalars
        // are set): the next read, copy or profile waits for it. An earlier fault shows here.
        // The events around it are on the same stream, so they time the graph alone.
        if let Err(e) = self.gpu.record(&self.run_marks.0).and_then(|()| self.graphs[i].replay()) {
            // A fault in the phase launched before shows here first: name that one.
            return Err(match self.settle() {
                Err(earlier) => earlier,
                Ok(()) => e.context(format!("launching phase '{phase}'")),
            });
        }
        self.unsettled = Some(phase.to_string());
        self.gpu.record(&self.run_marks.1)?;
        self.marked = true;
        if self.sync_each_run {
            return self.settle();
        }
        Ok(())
    }
}
