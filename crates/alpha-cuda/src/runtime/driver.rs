//! The CUDA driver, loaded at run time, and the few things Alpha asks of it.
//!
//! Why: the product carries no CUDA toolkit. `libcuda` is opened with `dlopen` through cudarc's
//! driver bindings (its `dynamic-loading` feature), so the same binary builds and starts on a
//! machine without a GPU, where [`Gpu::probe`] answers `None` and tests print
//! "skipped: no CUDA device". Everything a training step touches lives in one [`DeviceArena`]
//! (one `cuMemAlloc`); plan lowering hands kernels raw `u64` device addresses (arena base plus
//! byte offset), so launches take [`Arg`]s, not typed buffers. The whole step is recorded once
//! with [`Gpu::capture`] and replayed with [`Graph::replay`]; values that change between steps
//! (learning rate, bias corrections) live in device scalars written before each replay.
//!
//! How: one primary context and one non-blocking stream per [`Gpu`]; every call makes the
//! context current first, so a `Gpu` may be used from any one thread at a time. Errors say what
//! was being done: which kernel failed to load (with the JIT log), which launch faulted, how
//! much memory was needed and how much was free.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::{c_void, CString};

use anyhow::{anyhow, bail, Context, Result};
use cudarc::driver::result;
use cudarc::driver::sys;

use crate::ptx::{Kernel, ParamTy};

/// What [`Gpu::probe`] reports about device 0.
#[derive(Clone, Debug)]
pub struct GpuInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: u32,
    pub total_memory: usize,
    pub free_memory: usize,
    /// Shared memory one block may use after opting in (bytes).
    pub max_shared_per_block_optin: u32,
    /// The driver's CUDA version, e.g. 13000.
    pub driver_version: i32,
}

impl std::fmt::Display for GpuInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (device {}, sm_{}{}, {} SMs, {:.1} GiB, {:.1} GiB free, driver CUDA {}.{})",
            self.name,
            self.ordinal,
            self.compute_capability.0,
            self.compute_capability.1,
            self.multiprocessors,
            gib(self.total_memory),
            gib(self.free_memory),
            self.driver_version / 1000,
            (self.driver_version % 1000) / 10
        )
    }
}

fn gib(bytes: usize) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// Loads libcuda and initialises it. `Ok(false)`: no driver or no device (with the reason).
fn init_driver() -> Result<std::result::Result<(), String>> {
    // SAFETY: only tries to dlopen the driver library.
    if !unsafe { sys::is_culib_present() } {
        return Ok(Err("no CUDA driver found: libcuda.so could not be loaded (no NVIDIA driver installed?)".into()));
    }
    if let Err(e) = result::init() {
        if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE {
            return Ok(Err(format!("no CUDA device: cuInit reports {e}")));
        }
        bail!("no CUDA driver found: cuInit failed: {e}");
    }
    let n = result::device::get_count().map_err(|e| anyhow!("cuDeviceGetCount: {e}"))?;
    if n == 0 {
        return Ok(Err("no CUDA device: the driver sees no GPU".into()));
    }
    Ok(Ok(()))
}

fn device_info(dev: sys::CUdevice, ordinal: usize) -> Result<GpuInfo> {
    use sys::CUdevice_attribute as A;
    // SAFETY: `dev` came from cuDeviceGet.
    let attr = |a| unsafe { result::device::get_attribute(dev, a) };
    let (free, total) = result::mem_get_info().map_err(|e| anyhow!("cuMemGetInfo: {e}"))?;
    let mut version = 0;
    // SAFETY: writes one int.
    unsafe { sys::cuDriverGetVersion(&mut version) }.result().map_err(|e| anyhow!("cuDriverGetVersion: {e}"))?;
    Ok(GpuInfo {
        ordinal,
        name: result::device::get_name(dev)?,
        compute_capability: (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        multiprocessors: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        total_memory: total,
        free_memory: free,
        max_shared_per_block_optin: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32,
        driver_version: version,
    })
}

/// One raw kernel argument. Pointers are plain `u64` device addresses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    U64(u64),
    U32(u32),
    I32(i32),
    F32(f32),
}

impl Arg {
    fn matches(self, ty: ParamTy) -> bool {
        matches!(
            (self, ty),
            (Arg::U64(_), ParamTy::U64)
                | (Arg::U32(_), ParamTy::U32)
                | (Arg::I32(_), ParamTy::S32)
                | (Arg::U32(_), ParamTy::S32)
                | (Arg::F32(_), ParamTy::F32)
        )
    }
}

/// Grid and block shape of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared_bytes: u32,
}

impl LaunchConfig {
    /// A 1-D launch.
    pub fn linear(blocks: u32, threads: u32) -> Self {
        LaunchConfig { grid: (blocks, 1, 1), block: (threads, 1, 1), shared_bytes: 0 }
    }
}

/// A loaded kernel (one module, one entry).
pub struct Function {
    name: String,
    module: sys::CUmodule,
    func: sys::CUfunction,
    params: Option<Vec<ParamTy>>,
    /// Dynamic shared memory every launch requests (the kernel's `dynamic_shared`).
    dynamic_shared: u32,
    ctx: sys::CUcontext,
}

impl Function {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Registers per thread and local (spill) bytes the driver's JIT gave this kernel.
    pub fn resources(&self) -> Result<(i32, i32)> {
        use sys::CUfunction_attribute as F;
        // SAFETY: valid function handle while `self` lives.
        unsafe {
            let regs = result::function::get_function_attribute(self.func, F::CU_FUNC_ATTRIBUTE_NUM_REGS)?;
            let local = result::function::get_function_attribute(self.func, F::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?;
            Ok((regs, local))
        }
    }
}

impl Drop for Function {
    fn drop(&mut self) {
        // SAFETY: the module is ours; errors on teardown are ignored.
        unsafe {
            let _ = result::ctx::set_current(self.ctx);
            let _ = result::module::unload(self.module);
        }
    }
}

/// How many recent launch names are kept to name a fault found at the next synchronisation.
const RECENT_LAUNCHES: usize = 8;

/// A GPU: its primary context and one stream.
pub struct Gpu {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    stream: sys::CUstream,
    info: GpuInfo,
    checked: Cell<bool>,
    capturing: Cell<bool>,
    /// Launch with programmatic stream serialization (each kernel scheduled while its
    /// predecessor finishes; kernels open with `griddepcontrol.wait`); on unless
    /// [`Gpu::set_dependent_launch`] turns it off
    /// ([`crate::config::CudaConfig::dependent_launch`]).
    dependent_launch: Cell<bool>,
    recent: RefCell<VecDeque<String>>,
    captured: RefCell<Vec<String>>,
}

impl Gpu {
    /// Whether a driver and a GPU are present, without opening the device (no context made).
    pub fn present() -> Result<bool> {
        Ok(init_driver()?.is_ok())
    }

    /// Device 0's description, or `None` where there is no driver or no GPU.
    pub fn probe() -> Result<Option<GpuInfo>> {
        match init_driver()? {
            Err(_) => Ok(None),
            Ok(()) => Ok(Some(Gpu::new(0)?.info.clone())),
        }
    }

    /// Opens device 0, or prints `skipped: no CUDA device (<reason>)` and returns `None`.
    /// Errors other than "no driver / no device" panic: a broken GPU must not pass as absent.
    pub fn open_or_skip() -> Option<Gpu> {
        match init_driver() {
            Ok(Err(reason)) => {
                println!("skipped: no CUDA device ({reason})");
                None
            }
            Ok(Ok(())) => Some(Gpu::new(0).expect("opening the CUDA device")),
            Err(e) => panic!("{e:#}"),
        }
    }

    /// Opens a device: retains its primary context and creates a non-blocking stream.
    pub fn new(ordinal: usize) -> Result<Gpu> {
        if let Err(reason) = init_driver()? {
            bail!("{reason}");
        }
        let dev = result::device::get(ordinal as i32).map_err(|e| anyhow!("no CUDA device {ordinal}: {e}"))?;
        // SAFETY: `dev` is valid; the context is released in Drop.
        let ctx = unsafe { result::primary_ctx::retain(dev) }
            .map_err(|e| anyhow!("creating a context on device {ordinal}: {e}"))?;
        // SAFETY: ctx was just retained.
        unsafe { result::ctx::set_current(ctx) }?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| anyhow!("creating a stream: {e}"))?;
        let info = device_info(dev, ordinal)?;
        Ok(Gpu {
            dev,
            ctx,
            stream,
            info,
            checked: Cell::new(false),
            capturing: Cell::new(false),
            dependent_launch: Cell::new(true),
            recent: RefCell::new(VecDeque::new()),
            captured: RefCell::new(Vec::new()),
        })
    }

    pub fn info(&self) -> &GpuInfo {
        &self.info
    }

    /// Launch with programmatic stream serialization (the default), or plainly.
    pub fn set_dependent_launch(&self, on: bool) {
        self.dependent_launch.set(on);
    }

    /// In checked mode every launch outside a capture is followed by a synchronisation, so a
    /// fault is reported against the exact launch that caused it (slow; for debugging and gates).
    pub fn set_checked(&self, on: bool) {
        self.checked.set(on);
    }

    fn bind(&self) -> Result<()> {
        // SAFETY: ctx is retained for the lifetime of self.
        unsafe { result::ctx::set_current(self.ctx) }.map_err(|e| anyhow!("cuCtxSetCurrent: {e}"))
    }

    /// Free and total device memory now (bytes).
    pub fn memory(&self) -> Result<(usize, usize)> {
        self.bind()?;
        result::mem_get_info().map_err(|e| anyhow!("cuMemGetInfo: {e}"))
    }

    /// Allocates the one device arena.
    pub fn arena(&self, bytes: usize) -> Result<DeviceArena<'_>> {
        self.bind()?;
        let (free, total) = self.memory()?;
        let too_little = || {
            anyhow!(
                "too little device memory: the arena needs {bytes} bytes ({:.2} GiB) but {:.2} GiB \
                 of {:.2} GiB are free on {}",
                gib(bytes),
                gib(free),
                gib(total),
                self.info.name
            )
        };
        if bytes > free {
            return Err(too_little());
        }
        // SAFETY: plain device allocation, freed in Drop.
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }.map_err(|e| {
            if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                too_little()
            } else {
                anyhow!("cuMemAlloc of {bytes} bytes: {e}")
            }
        })?;
        Ok(DeviceArena { gpu: self, base: ptr, bytes, next: Cell::new(0) })
    }

    /// Loads one kernel description (rendered to PTX) and checks its launch budget.
    pub fn load(&self, kernel: &Kernel) -> Result<Function> {
        kernel.check_budget()?;
        let f = self.load_ptx(&kernel.name, &kernel.render())?;
        self.adopt(f, kernel)
    }

    /// Gives `f` (loaded from `kernel`'s PTX) the kernel's parameter types, for argument checks,
    /// and its dynamic shared memory, opting in where it and the static memory pass 48 KB.
    pub fn adopt(&self, mut f: Function, kernel: &Kernel) -> Result<Function> {
        f.params = Some(kernel.params.iter().map(|p| p.ty).collect());
        // Static and dynamic shared memory together above 48 KB need the opt-in.
        if kernel.dynamic_shared + kernel.static_shared_bytes() > crate::ptx::MAX_STATIC_SHARED {
            self.set_max_dynamic_shared(&f, kernel.dynamic_shared)?;
        }
        f.dynamic_shared = kernel.dynamic_shared;
        Ok(f)
    }

    /// Loads PTX text through the driver's JIT and finds entry `name` in it.
    pub fn load_ptx(&self, name: &str, ptx: &str) -> Result<Function> {
        self.bind()?;
        let image = CString::new(ptx).with_context(|| format!("PTX of kernel {name} has a NUL"))?;
        const LOG: usize = 16 * 1024;
        let mut err_log = vec![0u8; LOG];
        let mut info_log = vec![0u8; LOG];
        let mut opts = [
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER,
            sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
        ];
        let mut vals: [*mut c_void; 4] = [
            err_log.as_mut_ptr() as *mut c_void,
            LOG as *mut c_void,
            info_log.as_mut_ptr() as *mut c_void,
            LOG as *mut c_void,
        ];
        let mut module = std::ptr::null_mut();
        // SAFETY: image is NUL-terminated PTX; the log buffers outlive the call.
        let r = unsafe {
            sys::cuModuleLoadDataEx(
                &mut module,
                image.as_ptr() as *const c_void,
                opts.len() as u32,
                opts.as_mut_ptr(),
                vals.as_mut_ptr(),
            )
        };
        if r != sys::CUresult::CUDA_SUCCESS {
            let log = String::from_utf8_lossy(&err_log);
            let log = log.trim_end_matches('\0').trim();
            bail!(
                "loading the PTX of kernel {name} failed: {:?}{}",
                result::DriverError(r),
                if log.is_empty() { String::new() } else { format!("\nJIT log:\n{log}") }
            );
        }
        let cname = CString::new(name)?;
        // SAFETY: module was just loaded.
        let func = match unsafe { result::module::get_function(module, cname) } {
            Ok(f) => f,
            Err(e) => {
                // SAFETY: unloading what we loaded.
                unsafe {
                    let _ = result::module::unload(module);
                }
                bail!("kernel {name}: no such entry in its PTX module: {e}");
            }
        };
        Ok(Function { name: name.to_string(), module, func, params: None, dynamic_shared: 0, ctx: self.ctx })
    }

    /// Lets `f` use up to `bytes` of dynamic shared memory (needed above 48 KB).
    pub fn set_max_dynamic_shared(&self, f: &Function, bytes: u32) -> Result<()> {
        self.bind()?;
        // SAFETY: valid function.
        unsafe {
            result::function::set_function_attribute(
                f.func,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
        }
        .map_err(|e| anyhow!("kernel {}: allowing {bytes} B of shared memory: {e}", f.name))
    }

    /// Enqueues one launch on the stream (or into the graph being captured).
    pub fn launch(&self, f: &Function, cfg: LaunchConfig, args: &[Arg]) -> Result<()> {
        self.bind()?;
        if let Some(tys) = &f.params {
            if tys.len() != args.len() {
                bail!("kernel {}: {} arguments given, its PTX takes {}", f.name, args.len(), tys.len());
            }
            for (i, (a, t)) in args.iter().zip(tys).enumerate() {
                if !a.matches(*t) {
                    bail!("kernel {}: argument {i} is {a:?}, its PTX wants {}", f.name, t.ptx());
                }
            }
        }
        let mut store: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                Arg::U64(v) => v,
                Arg::U32(v) => v as u64,
                Arg::I32(v) => v as u32 as u64,
                Arg::F32(v) => v.to_bits() as u64,
            })
            .collect();
        // Each parameter's bytes start at its slot; little-endian keeps 4-byte values in place.
        let mut ptrs: Vec<*mut c_void> = store.iter_mut().map(|v| v as *mut u64 as *mut c_void).collect();
        let shared = cfg.shared_bytes.max(f.dynamic_shared);
        let launched = if self.dependent_launch.get() {
            // SAFETY: a zeroed attribute value is valid; we set the one field the id names.
            let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
            attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attr.value.programmaticStreamSerializationAllowed = 1;
            let config = sys::CUlaunchConfig {
                gridDimX: cfg.grid.0,
                gridDimY: cfg.grid.1,
                gridDimZ: cfg.grid.2,
                blockDimX: cfg.block.0,
                blockDimY: cfg.block.1,
                blockDimZ: cfg.block.2,
                sharedMemBytes: shared,
                hStream: self.stream,
                attrs: &mut attr,
                numAttrs: 1,
            };
            // SAFETY: config and the argument slots live until cuLaunchKernelEx returns.
            unsafe { sys::cuLaunchKernelEx(&config, f.func, ptrs.as_mut_ptr(), std::ptr::null_mut()) }.result()
        } else {
            // SAFETY: the argument slots live until cuLaunchKernel returns (it copies them).
            unsafe { result::launch_kernel(f.func, cfg.grid, cfg.block, shared, self.stream, &mut ptrs) }
        };
        launched.map_err(|e| {
            anyhow!(
                "launching kernel {} (grid {:?}, block {:?}, {} B shared): {e}",
                f.name,
                cfg.grid,
                cfg.block,
                shared
            )
        })?;
        if self.capturing.get() {
            self.captured.borrow_mut().push(f.name.clone());
            return Ok(());
        }
        {
            let mut recent = self.recent.borrow_mut();
            if recent.len() == RECENT_LAUNCHES {
                recent.pop_front();
            }
            recent.push_back(f.name.clone());
        }
        if self.checked.get() {
            // SAFETY: our stream.
            unsafe { result::stream::synchronize(self.stream) }
                .map_err(|e| anyhow!("kernel {} faulted: {e}", f.name))?;
            self.recent.borrow_mut().clear();
        }
        Ok(())
    }

    /// Waits for the stream; a fault names the launches enqueued since the last wait.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: our stream.
        let r = unsafe { result::stream::synchronize(self.stream) };
        let recent: Vec<String> = self.recent.borrow_mut().drain(..).collect();
        r.map_err(|e| {
            anyhow!(
                "kernel fault: {e}; launches since the last synchronisation (most recent last, up \
                 to {RECENT_LAUNCHES}): {}",
                recent.join(", ")
            )
        })
    }

    /// Records the launches `f` makes into a CUDA graph instead of running them.
    pub fn capture<F: FnOnce() -> Result<()>>(&self, f: F) -> Result<Graph<'_>> {
        self.bind()?;
        self.synchronize()?;
        // SAFETY: our stream, not capturing yet.
        unsafe {
            result::stream::begin_capture(self.stream, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        }
        .map_err(|e| anyhow!("beginning graph capture: {e}"))?;
        self.capturing.set(true);
        self.captured.borrow_mut().clear();
        let body = f();
        self.capturing.set(false);
        // SAFETY: ends the capture begun above, whatever `f` did.
        let graph = unsafe { result::stream::end_capture(self.stream) };
        let names = std::mem::take(&mut *self.captured.borrow_mut());
        body.context("while capturing a graph")?;
        let graph = graph.map_err(|e| anyhow!("ending graph capture: {e}"))?;
        // SAFETY: graph was just captured.
        let exec = unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) }.map_err(|e| {
            // SAFETY: destroy what we own.
            unsafe {
                let _ = result::graph::destroy(graph);
            }
            anyhow!("instantiating the captured graph ({} launches): {e}", names.len())
        })?;
        Ok(Graph { gpu: self, graph, exec, launches: names })
    }

    /// A timing event of this GPU's context, for [`Gpu::record`] and [`Event::elapsed_ms`].
    pub fn event(&self) -> Result<Event> {
        self.bind()?;
        Event::new()
    }

    /// Enqueues `ev` on the stream: it completes, stamped by the device, once everything
    /// enqueued before it has.
    pub fn record(&self, ev: &Event) -> Result<()> {
        self.bind()?;
        ev.record(self.stream)
    }

    /// Times `f` (which enqueues work) with device events: `warmup` untimed runs, then `reps`
    /// timed ones; returns each timed run's milliseconds.
    pub fn time<F: FnMut() -> Result<()>>(&self, warmup: usize, reps: usize, mut f: F) -> Result<Vec<f32>> {
        self.bind()?;
        for _ in 0..warmup {
            f()?;
        }
        self.synchronize()?;
        let mut events = Vec::with_capacity(reps + 1);
        for _ in 0..=reps {
            events.push(Event::new()?);
        }
        events[0].record(self.stream)?;
        for ev in events.iter().skip(1) {
            f()?;
            ev.record(self.stream)?;
        }
        self.synchronize()?;
        let mut out = Vec::with_capacity(reps);
        for w in events.windows(2) {
            out.push(w[0].elapsed_ms(&w[1])?);
        }
        Ok(out)
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: tearing down what `new` made; errors ignored.
        unsafe {
            let _ = result::ctx::set_current(self.ctx);
            let _ = result::stream::synchronize(self.stream);
            let _ = result::stream::destroy(self.stream);
            let _ = result::primary_ctx::release(self.dev);
        }
    }
}

/// A CUDA event with timing: recorded on the stream, it takes the device's time when the work
/// before it is done. Dropped before the [`Gpu`] whose context made it.
pub struct Event(sys::CUevent);

impl Event {
    /// Milliseconds on the device's clock from this event to `end`, both recorded and complete
    /// (after a synchronisation that followed them); the driver refuses an event not yet done.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        // SAFETY: both are valid events; the driver checks that they were recorded and are done.
        unsafe { result::event::elapsed(self.0, end.0) }.map_err(|e| anyhow!("cuEventElapsedTime: {e}"))
    }
    fn new() -> Result<Event> {
        Ok(Event(
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(|e| anyhow!("cuEventCreate: {e}"))?,
        ))
    }
    fn record(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: valid event and stream.
        unsafe { result::event::record(self.0, stream) }.map_err(|e| anyhow!("cuEventRecord: {e}"))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: ours.
        unsafe {
            let _ = result::event::destroy(self.0);
        }
    }
}

/// A captured, instantiated sequence of launches.
pub struct Graph<'g> {
    gpu: &'g Gpu,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    launches: Vec<String>,
}

impl Graph<'_> {
    /// Enqueues one replay of the whole graph on the GPU's stream.
    pub fn replay(&self) -> Result<()> {
        self.gpu.bind()?;
        // SAFETY: exec is valid while self lives; the stream is the GPU's.
        unsafe { result::graph::launch(self.exec, self.gpu.stream) }
            .map_err(|e| anyhow!("replaying a graph of {} launches: {e}", self.launches.len()))?;
        let mut recent = self.gpu.recent.borrow_mut();
        recent.push_back(format!("graph[{}]", self.launches.join(" ")));
        while recent.len() > RECENT_LAUNCHES {
            recent.pop_front();
        }
        Ok(())
    }

    /// The kernels captured, in order.
    pub fn launches(&self) -> &[String] {
        &self.launches
    }
}

impl Drop for Graph<'_> {
    fn drop(&mut self) {
        // SAFETY: ours.
        unsafe {
            let _ = result::ctx::set_current(self.gpu.ctx);
            let _ = result::graph::exec_destroy(self.exec);
            let _ = result::graph::destroy(self.graph);
        }
    }
}

/// Element types that travel between host slices and the arena.
pub trait Elem: Copy + Default + 'static {}
impl Elem for f32 {}
impl Elem for u8 {}
impl Elem for u16 {}
impl Elem for i32 {}
impl Elem for u32 {}
impl Elem for u64 {}
impl Elem for half::bf16 {}

/// A byte range of the arena with its device address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buf {
    pub offset: usize,
    pub bytes: usize,
    /// Device address of the first byte (arena base + offset).
    pub ptr: u64,
}

impl Buf {
    /// Device address `bytes` into the buffer.
    pub fn at(&self, bytes: usize) -> u64 {
        assert!(bytes <= self.bytes, "offset {bytes} past a {}-byte buffer", self.bytes);
        self.ptr + bytes as u64
    }
}

/// Alignment of buffers handed out by [`DeviceArena::alloc`].
pub const ARENA_ALIGN: usize = 256;

/// One device allocation; sub-buffers are byte ranges of it.
pub struct DeviceArena<'g> {
    gpu: &'g Gpu,
    base: sys::CUdeviceptr,
    bytes: usize,
    next: Cell<usize>,
}

impl DeviceArena<'_> {
    /// Device address of byte 0.
    pub fn base(&self) -> u64 {
        self.base
    }

    pub fn len(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The buffer at a fixed byte range (as a plan lays it out).
    pub fn region(&self, offset: usize, bytes: usize) -> Result<Buf> {
        if offset.checked_add(bytes).is_none_or(|end| end > self.bytes) {
            bail!("arena range {offset}..{} is outside the {}-byte arena", offset.saturating_add(bytes), self.bytes);
        }
        Ok(Buf { offset, bytes, ptr: self.base + offset as u64 })
    }

    /// Hands out the next `bytes`, aligned to [`ARENA_ALIGN`] (a bump allocator for tools).
    pub fn alloc(&self, bytes: usize) -> Result<Buf> {
        let off = self.next.get().div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        let buf = self.region(off, bytes)?;
        self.next.set(off + bytes);
        Ok(buf)
    }

    /// `alloc` for `n` elements of `T`.
    pub fn alloc_n<T: Elem>(&self, n: usize) -> Result<Buf> {
        self.alloc(n * std::mem::size_of::<T>())
    }

    /// Forgets every `alloc` (the memory stays).
    pub fn reset(&self) {
        self.next.set(0);
    }

    fn check(&self, buf: Buf, bytes: usize) -> Result<()> {
        if bytes > buf.bytes {
            bail!("{bytes} bytes do not fit a {}-byte buffer", buf.bytes);
        }
        self.region(buf.offset, bytes).map(|_| ())
    }

    /// Copies `data` to the start of `buf` and waits for it.
    pub fn upload<T: Elem>(&self, buf: Buf, data: &[T]) -> Result<()> {
        self.check(buf, std::mem::size_of_val(data))?;
        self.gpu.bind()?;
        // SAFETY: the range was checked; the copy is ordered on our stream and waited for.
        unsafe { result::memcpy_htod_async(buf.ptr, data, self.gpu.stream) }
            .map_err(|e| anyhow!("upload of {} bytes: {e}", std::mem::size_of_val(data)))?;
        self.gpu.synchronize()
    }

    /// Sets the first 32-bit word of `buf`, ordered on the stream and not waited for: no host
    /// memory is read later, so the host need not wait for the device (a step's scalars
    /// written while the step before still runs).
    pub fn set_word(&self, buf: Buf, word: u32) -> Result<()> {
        self.check(buf, 4)?;
        self.gpu.bind()?;
        // SAFETY: the range was checked; a memset reads no host memory.
        unsafe { sys::cuMemsetD32Async(buf.ptr, word, 1, self.gpu.stream) }
            .result()
            .map_err(|e| anyhow!("setting a word at {:#x}: {e}", buf.ptr))
    }

    /// Copies `n` elements from the start of `buf` once the stream's work is done.
    pub fn download<T: Elem>(&self, buf: Buf, n: usize) -> Result<Vec<T>> {
        let mut out = vec![T::default(); n];
        self.check(buf, std::mem::size_of_val(out.as_slice()))?;
        self.gpu.bind()?;
        // SAFETY: the range was checked; waited for below.
        unsafe { result::memcpy_dtoh_async(&mut out, buf.ptr, self.gpu.stream) }
            .map_err(|e| anyhow!("download of {n} elements: {e}"))?;
        self.gpu.synchronize()?;
        Ok(out)
    }

    /// Fills `buf` with a 32-bit pattern (e.g. NaN bits to poison outputs), ordered on the stream.
    pub fn fill_u32(&self, buf: Buf, pattern: u32) -> Result<()> {
        self.check(buf, buf.bytes)?;
        self.gpu.bind()?;
        // SAFETY: the range was checked.
        unsafe { sys::cuMemsetD32Async(buf.ptr, pattern, buf.bytes / 4, self.gpu.stream) }
            .result()
            .map_err(|e| anyhow!("memset of {} bytes: {e}", buf.bytes))
    }
}

impl Drop for DeviceArena<'_> {
    fn drop(&mut self) {
        // SAFETY: ours; wait for users first.
        unsafe {
            let _ = result::ctx::set_current(self.gpu.ctx);
            let _ = result::stream::synchronize(self.gpu.stream);
            let _ = result::free_sync(self.base);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptx::{addr, RegKind};

    #[test]
    fn probe_answers_without_panicking() {
        match Gpu::probe().unwrap() {
            None => println!("skipped: no CUDA device"),
            Some(info) => println!("{info}"),
        }
    }

    fn scale_kernel() -> Kernel {
        let mut k = Kernel::new("test_scale").with_block(128, 1, 1);
        let x = k.param_reg("x", ParamTy::U64);
        let n = k.param_reg("n", ParamTy::U32);
        let s = k.param_reg("s", ParamTy::F32);
        let tid = k.sreg("%tid.x");
        let bid = k.sreg("%ctaid.x");
        let i = k.tri("mad.lo.u32", RegKind::B32, bid, 128u32, tid);
        let p = k.setp("ge.u32", i, n);
        let end = k.label("end");
        k.bra_if(p, false, &end);
        let a = k.addr_of(x, i, 4);
        let v = k.reg(RegKind::F32);
        k.op("ld.global.f32", [v.into(), addr(a, 0)]);
        let w = k.bin("mul.rn.f32", RegKind::F32, v, s);
        k.op("st.global.f32", [addr(a, 0), w.into()]);
        k.place(&end);
        k.ret();
        k
    }

    #[test]
    fn arena_launch_graph_roundtrip() {
        let Some(gpu) = Gpu::open_or_skip() else {
            return;
        };
        let arena = gpu.arena(1 << 20).unwrap();
        let buf = arena.alloc_n::<f32>(1000).unwrap();
        assert_eq!(buf.offset % ARENA_ALIGN, 0);
        let data: Vec<f32> = (0..1000).map(|i| i as f32).collect();
        arena.upload(buf, &data).unwrap();
        let f = gpu.load(&scale_kernel()).unwrap();
        let cfg = LaunchConfig::linear(8, 128);
        let args = [Arg::U64(buf.ptr), Arg::U32(1000), Arg::F32(2.0)];
        gpu.launch(&f, cfg, &args).unwrap();
        let out: Vec<f32> = arena.download(buf, 1000).unwrap();
        assert!(out.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32));
        // Two launches captured, replayed three times: x * 2 * 4^3.
        let g = gpu
            .capture(|| {
                gpu.launch(&f, cfg, &[Arg::U64(buf.ptr), Arg::U32(1000), Arg::F32(2.0)])?;
                gpu.launch(&f, cfg, &[Arg::U64(buf.ptr), Arg::U32(1000), Arg::F32(2.0)])
            })
            .unwrap();
        assert_eq!(g.launches(), &["test_scale", "test_scale"]);
        for _ in 0..3 {
            g.replay().unwrap();
        }
        let out: Vec<f32> = arena.download(buf, 1000).unwrap();
        assert!(out.iter().enumerate().all(|(i, &v)| v == 128.0 * i as f32));
        // Wrong arguments are refused with the kernel's name.
        let e = gpu.launch(&f, cfg, &args[..2]).unwrap_err().to_string();
        assert!(e.contains("test_scale"), "{e}");
        // A PTX error names the kernel and carries the JIT log.
        let bad = gpu
            .load_ptx("broken", ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry broken() { bogus; }")
            .err()
            .unwrap()
            .to_string();
        assert!(bad.contains("broken"), "{bad}");
        // Asking for more than the card has says how much is free.
        let e = gpu.arena(1 << 50).err().unwrap().to_string();
        assert!(e.contains("too little device memory") && e.contains("free"), "{e}");
    }
}
