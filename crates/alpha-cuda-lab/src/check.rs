//! Check-and-bench routines: every kernel against its CPU reference, then timed.
//!
//! Why: llm.c's `dev/cuda` keeps each kernel beside a CPU reference and a benchmark so that a
//! faster variant is shown equal before it replaces the old one. These routines are that
//! harness for Alpha's kernels; `examples/kernel_check.rs` runs them all on a GPU and prints a
//! table, and the GPU tests run the quick subset.
//!
//! How: fresh random inputs (a small splitmix generator, seeded per run), outputs poisoned with
//! NaN before each launch so unwritten elements fail, launches in checked mode (a fault names
//! its kernel), errors reported as max |out − ref| and ‖out − ref‖/‖ref‖ against each family's
//! threshold, times as the median of device-event timings after warm-up.

use anyhow::Result;

use alpha_cuda::kernels::adamw::{self, AdamwScalars, Segment};
use alpha_cuda::kernels::attention::{self, mma as attention_mma};
use alpha_cuda::kernels::cross_entropy;
use alpha_cuda::kernels::embedding;
use alpha_cuda::kernels::gemm::{self, Epilogue, Extras, GemmShape, GemmSpec, Input, Layout, Tile};
use alpha_cuda::kernels::rotary;
use alpha_cuda::runtime::driver::{DeviceArena, Function, Gpu};

/// One line of the report.
#[derive(Clone, Debug)]
pub struct Row {
    pub family: String,
    pub name: String,
    pub shape: String,
    pub max_abs: f64,
    pub rel: f64,
    pub tol: f64,
    pub pass: bool,
    pub median_us: Option<f64>,
    pub rate: String,
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<4} {:<14} {:<26} {:<28} max|d| {:>9.2e} rel {:>9.2e} tol {:>8.1e} {:>10} {}",
            if self.pass { "PASS" } else { "FAIL" },
            self.family,
            self.name,
            self.shape,
            self.max_abs,
            self.rel,
            self.tol,
            self.median_us.map_or("-".to_string(), |t| format!("{t:.1}us")),
            self.rate
        )
    }
}

/// splitmix64: small, seedable, good enough for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    pub fn below(&mut self, n: u32) -> u32 {
        (self.next_u64() % n as u64) as u32
    }
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform() * scale).collect()
    }
}

const NAN_BITS: u32 = 0x7FC0_0000;

/// f32 buffers of the given lengths, each filled with [`NAN_BITS`] (what a kernel under test
/// must overwrite).
fn poisoned<const N: usize>(arena: &DeviceArena, lens: [usize; N]) -> Result<[alpha_cuda::runtime::driver::Buf; N]> {
    let mut bufs = Vec::with_capacity(N);
    for len in lens {
        let b = arena.alloc_n::<f32>(len)?;
        arena.fill_u32(b, NAN_BITS)?;
        bufs.push(b);
    }
    Ok(bufs.try_into().unwrap_or_else(|_| unreachable!("one buffer a length")))
}

/// Max abs and relative L2 error; NaN anywhere in `out` gives infinite error.
pub fn compare(out: &[f32], reference: &[f32]) -> (f64, f64) {
    let (mut max_abs, mut num, mut den) = (0.0f64, 0.0f64, 0.0f64);
    for (&o, &r) in out.iter().zip(reference) {
        if !o.is_finite() && r.is_finite() {
            return (f64::INFINITY, f64::INFINITY);
        }
        let d = (o as f64 - r as f64).abs();
        max_abs = max_abs.max(d);
        num += d * d;
        den += r as f64 * r as f64;
    }
    (max_abs, (num / den.max(1e-300)).sqrt())
}

fn median(mut v: Vec<f32>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2] as f64 * 1e3
}

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub seed: u64,
    /// Time kernels (and run the large shapes).
    pub bench: bool,
    pub warmup: usize,
    pub reps: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { seed: 0x5EED, bench: true, warmup: 3, reps: 20 }
    }
}

fn bf16_bits(x: &[f32]) -> Vec<u16> {
    x.iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect()
}

fn upload_operand(arena: &DeviceArena, input: Input, x: &[f32]) -> Result<alpha_cuda::runtime::driver::Buf> {
    Ok(match input {
        Input::F32 => {
            let b = arena.alloc_n::<f32>(x.len())?;
            arena.upload(b, x)?;
            b
        }
        Input::Bf16 => {
            let b = arena.alloc_n::<u16>(x.len())?;
            arena.upload(b, &bf16_bits(x))?;
            b
        }
    })
}

/// A product's random operands and residual on the host and the device, and its output
/// allocated and poisoned (NaN) so that an element the kernel misses shows.
struct GemmCase {
    a: Vec<f32>,
    b: Vec<f32>,
    r: Vec<f32>,
    ab: alpha_cuda::runtime::driver::Buf,
    bb: alpha_cuda::runtime::driver::Buf,
    cb: alpha_cuda::runtime::driver::Buf,
    rb: alpha_cuda::runtime::driver::Buf,
    nc: usize,
}

fn gemm_case(arena: &DeviceArena, rng: &mut Rng, spec: &GemmSpec, sh: &GemmShape) -> Result<GemmCase> {
    let (na, nb, nc) = sh.extents(spec);
    let (a, b, r) = (rng.vec(na, 1.0), rng.vec(nb, 1.0), rng.vec(nc, 1.0));
    let ab = upload_operand(arena, spec.a_input, &a)?;
    let bb = upload_operand(arena, spec.b_input, &b)?;
    let cb = arena.alloc_n::<f32>(nc)?;
    let rb = arena.alloc_n::<f32>(nc)?;
    arena.upload(rb, &r)?;
    arena.fill_u32(cb, NAN_BITS)?;
    Ok(GemmCase { a, b, r, ab, bb, cb, rb, nc })
}

/// Device copies of the TMA engine's two tensor maps for a launch of `spec` on `sh` reading
/// operands at `a` and `b` (None on the other engines).
fn tma_maps(arena: &DeviceArena, spec: &GemmSpec, sh: &GemmShape, a: u64, b: u64) -> Result<Option<(u64, u64)>> {
    if spec.engine != gemm::Engine::Tma {
        return Ok(None);
    }
    let (ma, mb) = alpha_cuda::kernels::gemm::tma::map_specs(spec, sh);
    let buf = arena.alloc(256)?;
    let mut bytes = alpha_cuda::kernels::gemm::tma::encode(a, &ma)?.to_vec();
    bytes.extend(alpha_cuda::kernels::gemm::tma::encode(b, &mb)?);
    arena.upload(buf, &bytes)?;
    Ok(Some((buf.ptr, buf.ptr + 128)))
}

/// Every GEMM variant, fully checked on a small batched shape with partial tiles. The TMA
/// engine's batch is two K-slices of one product (split-K, what it is launched for), and its
/// output must equal the `cp.async` ring's on the same operands bit for bit.
pub fn gemm_variants(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for spec in GemmSpec::all() {
        arena.reset();
        let f = gpu.load(&spec.kernel())?;
        let tma = spec.engine == gemm::Engine::Tma;
        // K of 3 steps at either K step (a multiple of 64 at the wide one).
        let sh = if tma {
            GemmShape::packed(&spec, 200, 136, 6 * spec.bk).split(&spec, 2)
        } else {
            GemmShape { batch: 2, ..GemmShape::packed(&spec, 200, 136, 3 * spec.bk) }
        };
        let GemmCase { a, b, r, ab, bb, cb, rb, nc } = gemm_case(arena, rng, &spec, &sh)?;
        let c0 = rng.vec(nc, 1.0);
        if spec.epilogue == Epilogue::Accumulate {
            arena.upload(cb, &c0)?;
        }
        let maps = tma_maps(arena, &spec, &sh, ab.ptr, bb.ptr)?;
        gemm::launch_with(gpu, &f, &spec, &sh, [ab.ptr, bb.ptr, cb.ptr, rb.ptr], Extras { maps, ..Extras::default() })?;
        let out: Vec<f32> = arena.download(cb, nc)?;
        let mut want = c0.clone();
        gemm::reference(&spec, &sh, &a, &b, &r, &mut want);
        let (max_abs, rel) = compare(&out, &want);
        let tol = 1e-5;
        // The TMA engine against the cp.async ring of the same tile, depth and epilogue.
        let differ = if tma {
            let ring = GemmSpec { engine: gemm::Engine::Wgmma, ..spec };
            let fr = gpu.load(&ring.kernel())?;
            arena.upload(cb, &c0)?;
            gemm::launch(gpu, &fr, &ring, &sh, ab.ptr, bb.ptr, cb.ptr, rb.ptr)?;
            let theirs: Vec<f32> = arena.download(cb, nc)?;
            out.iter().zip(&theirs).filter(|(x, y)| x.to_bits() != y.to_bits()).count()
        } else {
            0
        };
        rows.push(Row {
            family: "gemm".into(),
            name: spec.name(),
            shape: format!("b2 m200 n136 k{}", sh.k),
            max_abs,
            rel,
            tol,
            pass: rel <= tol && differ == 0,
            median_us: None,
            rate: if tma { format!("{differ} outputs differ from the cp.async ring") } else { String::new() },
        });
    }
    Ok(rows)
}

/// Coppelius's GEMM shapes (SYSTEMS.md §2.5) plus a large square one: sampled check and TFLOP/s.
/// The seed's two-letter prefix is read as (A layout, B layout) in this crate's convention.
pub const COPPELIUS_SHAPES: &[(&str, u32, u32, u32, bool, u32)] = &[
    // (layouts, m, n, k, residual add, launches a step)
    ("cc", 1408, 512, 1024, false, 32),
    ("rr", 1024, 1408, 512, false, 32),
    ("rr", 1024, 1536, 512, false, 16),
    ("rc", 1024, 1408, 512, false, 16),
    ("rr", 1024, 512, 1408, true, 16),
    ("cc", 512, 1408, 1024, false, 16),
    ("cc", 1536, 512, 1024, false, 16),
    ("rc", 1024, 512, 1536, false, 16),
    ("rc", 1024, 512, 1408, true, 16),
    ("rc", 1024, 512, 1408, false, 16),
    ("rr", 1024, 512, 512, true, 16),
    ("cc", 512, 512, 1024, false, 16),
    ("rc", 1024, 512, 512, false, 16),
    ("rr", 1024, 12288, 512, false, 1),
    ("rc", 1024, 512, 12288, false, 1),
    ("cc", 12288, 512, 1024, false, 1),
];

/// The plain product of a seed-style layout name (`"rc"`: A as stored, B transposed).
fn spec_of(lay: &str, input: Input) -> GemmSpec {
    let layout = |c: char| if c == 'r' { Layout::RowMajor } else { Layout::ColMajor };
    let mut ch = lay.chars();
    GemmSpec::new(layout(ch.next().unwrap_or('r')), layout(ch.next().unwrap_or('r')), input)
}

/// Times one GEMM and checks 512 sampled outputs against the f64 reference.
#[allow(clippy::too_many_arguments)]
fn gemm_bench_one(
    gpu: &Gpu,
    arena: &DeviceArena,
    rng: &mut Rng,
    spec: GemmSpec,
    m: u32,
    n: u32,
    k: u32,
    opts: &Options,
    cache: &mut Vec<(GemmSpec, Function)>,
    tile: Option<Tile>,
) -> Result<Row> {
    arena.reset();
    // The tile asked for, or the one the lowering would choose for this shape.
    let spec = GemmSpec { tile: tile.unwrap_or_else(|| GemmShape::packed(&spec, m, n, k).tile()), ..spec };
    if !cache.iter().any(|(s, _)| *s == spec) {
        cache.push((spec, gpu.load(&spec.kernel())?));
    }
    let f = &cache.iter().find(|(s, _)| *s == spec).unwrap().1;
    let sh = GemmShape::packed(&spec, m, n, k);
    let GemmCase { a, b, r, ab, bb, cb, rb, nc } = gemm_case(arena, rng, &spec, &sh)?;
    let maps = tma_maps(arena, &spec, &sh, ab.ptr, bb.ptr)?;
    let ptrs = [ab.ptr, bb.ptr, cb.ptr, rb.ptr];
    gemm::launch_with(gpu, f, &spec, &sh, ptrs, Extras { maps, ..Extras::default() })?;
    let out: Vec<f32> = arena.download(cb, nc)?;
    let (mut max_abs, mut worst) = (0.0f64, 0.0f64);
    for _ in 0..512 {
        let i = rng.below(m) as usize;
        let j = rng.below(n) as usize;
        let (acc, mag) = gemm::reference_at(&spec, &sh, &a, &b, 0, i, j);
        let want = match spec.epilogue {
            Epilogue::AddResidual => acc + r[i * n as usize + j] as f64,
            _ => acc,
        };
        let got = out[i * n as usize + j] as f64;
        let d = if got.is_finite() { (got - want).abs() } else { f64::INFINITY };
        max_abs = max_abs.max(d);
        worst = worst.max(d / (mag + 1e-30));
    }
    // Error relative to Σ|a·b| (the scale f32 accumulation rounds at).
    let tol = 1e-5;
    let t = gpu.time(opts.warmup, opts.reps, || {
        gemm::launch_with(gpu, f, &spec, &sh, ptrs, Extras { maps, ..Extras::default() })
    })?;
    let us = median(t);
    Ok(Row {
        family: "gemm-bench".into(),
        name: spec.name(),
        shape: format!("m{m} n{n} k{k}"),
        max_abs,
        rel: worst,
        tol,
        pass: worst <= tol,
        median_us: Some(us),
        rate: format!("{:.1} TFLOP/s", sh.flops() / (us * 1e-6) / 1e12),
    })
}

/// The Coppelius shapes with bf16 inputs, a few with fp32 inputs, and 8192³.
pub fn gemm_bench(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut cache = Vec::new();
    for &(lay, m, n, k, add, _) in COPPELIUS_SHAPES {
        let spec = GemmSpec {
            epilogue: if add { Epilogue::AddResidual } else { Epilogue::Store },
            ..spec_of(lay, Input::Bf16)
        };
        rows.push(gemm_bench_one(gpu, arena, rng, spec, m, n, k, opts, &mut cache, None)?);
        // The wgmma engine on the same product, and with an f32 B as the training step reads
        // the weights.
        rows.push(gemm_bench_one(gpu, arena, rng, spec.wgmma(), m, n, k, opts, &mut cache, None)?);
        rows.push(gemm_bench_one(gpu, arena, rng, spec.tma(), m, n, k, opts, &mut cache, None)?);
        let f32_b = GemmSpec { b_input: Input::F32, ..spec }.wgmma();
        rows.push(gemm_bench_one(gpu, arena, rng, f32_b, m, n, k, opts, &mut cache, None)?);
    }
    for (lay, m, n, k) in [("rr", 1024, 12288, 512), ("rc", 1024, 1536, 512)] {
        let spec = spec_of(lay, Input::F32);
        rows.push(gemm_bench_one(gpu, arena, rng, spec, m, n, k, opts, &mut cache, None)?);
    }
    // Every tile of the wgmma engine on one and 16 contexts' products (bf16 operands, as the
    // step reads them with bf16 weights).
    for (lay, m, n, k) in [
        ("rr", 1024, 1408, 512),
        ("rc", 1024, 512, 1408),
        ("rc", 1024, 512, 512),
        ("rr", 16384, 1408, 512),
        ("rc", 16384, 512, 1408),
        ("rr", 16384, 512, 512),
        ("cc", 512, 1408, 2048),
    ] {
        for spec in [spec_of(lay, Input::Bf16).wgmma(), spec_of(lay, Input::Bf16).tma()] {
            for tile in Tile::ALL {
                rows.push(gemm_bench_one(gpu, arena, rng, spec, m, n, k, opts, &mut cache, Some(tile))?);
            }
            let s3 = GemmSpec { stages: 3, ..spec };
            rows.push(gemm_bench_one(gpu, arena, rng, s3, m, n, k, opts, &mut cache, Some(Tile::T128x128))?);
        }
    }
    for lay in ["rc", "rr"] {
        let spec = spec_of(lay, Input::Bf16);
        rows.push(gemm_bench_one(gpu, arena, rng, spec, 8192, 8192, 8192, opts, &mut cache, None)?);
        rows.push(gemm_bench_one(gpu, arena, rng, spec.wgmma(), 8192, 8192, 8192, opts, &mut cache, None)?);
        rows.push(gemm_bench_one(gpu, arena, rng, spec.tma(), 8192, 8192, 8192, opts, &mut cache, None)?);
    }
    Ok(rows)
}

/// Where the time of a short-K product goes, tile by tile: sixteen contexts' q/k/v projection
/// shape (16384 × 1536, bf16, row-major operands, the TMA engine's 128 × 128 tiles on the
/// lowering's ring), timed at K = 512 … 4096 a block a tile, and at K = 512 traced
/// ([`GemmSpec::trace`]). Each trace's rows (tile, SM, and the four stamps in ns from
/// the launch's first) go to `trace-<kernel>.csv` under `ALPHA_TRACE_DIR` when set; each row
/// here gives the mean phases.
pub fn gemm_trace(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let (m, n) = (16384u32, 1536u32);
    let plain = spec_of("rr", Input::Bf16).tma();
    let ring = |k: u32| {
        let (x, y) = plain.tiles(&GemmShape::packed(&plain, m, n, k));
        GemmSpec {
            stages: alpha_cuda::kernels::gemm::wgmma::stages_for(
                &plain,
                x * y,
                alpha_cuda::kernels::gemm::wgmma::SHALLOW_RING_WAVES,
            ),
            ..plain
        }
    };
    for k in [512u32, 1024, 2048, 4096] {
        let spec = ring(k);
        rows.push(gemm_bench_one(gpu, arena, rng, spec, m, n, k, opts, &mut Vec::new(), Some(Tile::T128x128))?);
    }
    let k = 512u32;
    {
        arena.reset();
        let spec = GemmSpec { trace: true, ..ring(k) };
        let f = gpu.load(&spec.kernel())?;
        let sh = GemmShape::packed(&spec, m, n, k);
        let GemmCase { ab, bb, cb, rb, .. } = gemm_case(arena, rng, &spec, &sh)?;
        let maps = tma_maps(arena, &spec, &sh, ab.ptr, bb.ptr)?;
        let run = || {
            gemm::launch_with(
                gpu,
                &f,
                &spec,
                &sh,
                [ab.ptr, bb.ptr, cb.ptr, rb.ptr],
                Extras { maps, ..Extras::default() },
            )
        };
        let us = median(gpu.time(opts.warmup, opts.reps, run)?);
        run()?;
        gpu.synchronize()?;
        let tiles = {
            let (x, y) = spec.tiles(&sh);
            (x * y) as usize
        };
        let words: Vec<u64> = arena.download(rb, tiles * gemm::TRACE_WORDS as usize)?;
        let w = |t: usize, i: usize| words[t * gemm::TRACE_WORDS as usize + i];
        let origin = (0..tiles).map(|t| w(t, 1)).min().unwrap_or(0);
        let mut csv = String::from("tile,sm,start,first_stage,products_done,epilogue_done\n");
        let mut sums = [0f64; 3];
        for t in 0..tiles {
            let st: Vec<u64> = (1..5).map(|i| w(t, i).saturating_sub(origin)).collect();
            csv += &format!("{},{},{},{},{},{}\n", w(t, 5), w(t, 0), st[0], st[1], st[2], st[3]);
            for (j, s) in sums.iter_mut().enumerate() {
                *s += st[j + 1].saturating_sub(st[j]) as f64;
            }
        }
        if let Ok(dir) = std::env::var("ALPHA_TRACE_DIR") {
            std::fs::write(format!("{dir}/trace-{}.csv", spec.name()), csv)?;
        }
        let mean = |j: usize| sums[j] / tiles as f64 / 1e3;
        rows.push(timing_row(
            "gemm-trace",
            &spec.name(),
            &format!("m{m} n{n} k{k}"),
            Some(us),
            format!(
                "{:.1} TFLOP/s; mean µs: to first stage {:.2}, products {:.2}, epilogue {:.2}",
                sh.flops() / (us * 1e-6) / 1e12,
                mean(0),
                mean(1),
                mean(2)
            ),
        ));
    }
    Ok(rows)
}

/// Gather and deterministic scatter-add (bit-exact against the reference, and repeatable).
pub fn embedding_checks(
    gpu: &Gpu,
    arena: &DeviceArena,
    rng: &mut Rng,
    (v, d, tokens): (u32, u32, u32),
    opts: &Options,
) -> Result<Vec<Row>> {
    arena.reset();
    let fg = gpu.load(&embedding::gather_kernel())?;
    let fs = gpu.load(&embedding::scatter_add_kernel())?;
    let (vu, du, nu) = (v as usize, d as usize, tokens as usize);
    let table = rng.vec(vu * du, 1.0);
    let mut idx: Vec<i32> = (0..nu).map(|_| rng.below(v) as i32).collect();
    // Heavy repeats of one row, and one ignored index.
    for i in (0..nu).step_by(7) {
        idx[i] = 3;
    }
    idx[nu / 2] = -1;
    let tb = arena.alloc_n::<f32>(vu * du)?;
    let ib = arena.alloc_n::<i32>(nu)?;
    let ob = arena.alloc_n::<f32>(nu * du)?;
    arena.upload(tb, &table)?;
    arena.upload(ib, &idx)?;
    arena.fill_u32(ob, NAN_BITS)?;
    embedding::gather(gpu, &fg, ob.ptr, tb.ptr, ib.ptr, tokens, v, d)?;
    let got: Vec<f32> = arena.download(ob, nu * du)?;
    let want = embedding::gather_reference(&table, &idx, vu, du);
    let (ga, gr) = compare(&got, &want);
    let us = if opts.bench {
        Some(median(
            gpu.time(opts.warmup, opts.reps, || embedding::gather(gpu, &fg, ob.ptr, tb.ptr, ib.ptr, tokens, v, d))?,
        ))
    } else {
        None
    };
    let mut rows = vec![Row {
        family: "embedding".into(),
        name: "embedding_gather".into(),
        shape: format!("v{v} d{d} n{tokens}"),
        max_abs: ga,
        rel: gr,
        tol: 0.0,
        pass: ga == 0.0,
        median_us: us,
        rate: String::new(),
    }];
    // Scatter-add into a random gradient table, twice from the same start: bit-identical.
    let dout = rng.vec(nu * du, 1.0);
    let dtable0 = rng.vec(vu * du, 1.0);
    let gb = arena.alloc_n::<f32>(nu * du)?;
    arena.upload(gb, &dout)?;
    arena.upload(tb, &dtable0)?;
    embedding::scatter_add(gpu, &fs, tb.ptr, gb.ptr, ib.ptr, tokens, v, d)?;
    let first: Vec<f32> = arena.download(tb, vu * du)?;
    arena.upload(tb, &dtable0)?;
    embedding::scatter_add(gpu, &fs, tb.ptr, gb.ptr, ib.ptr, tokens, v, d)?;
    let second: Vec<f32> = arena.download(tb, vu * du)?;
    let mut want = dtable0.clone();
    embedding::scatter_add_reference(&mut want, &dout, &idx, vu, du);
    let (sa, sr) = compare(&first, &want);
    let repeat = first.iter().zip(&second).all(|(a, b)| a.to_bits() == b.to_bits());
    let us =
        if opts.bench {
            Some(median(gpu.time(opts.warmup, opts.reps, || {
                embedding::scatter_add(gpu, &fs, tb.ptr, gb.ptr, ib.ptr, tokens, v, d)
            })?))
        } else {
            None
        };
    let scatter_row = |name: String, (sa, sr): (f64, f64), repeat: bool, us: Option<f64>| Row {
        family: "embedding".into(),
        name,
        shape: format!("v{v} d{d} n{tokens}"),
        max_abs: sa,
        rel: sr,
        tol: 0.0,
        pass: sa == 0.0 && repeat,
        median_us: us,
        rate: if repeat { "bitwise repeatable".into() } else { "NOT repeatable".into() },
    };
    rows.push(scatter_row("embedding_scatter_add".into(), (sa, sr), repeat, us));
    Ok(rows)
}

/// Cross-entropy forward (loss, lse) and backward against f64 references.
pub fn cross_entropy_checks(
    gpu: &Gpu,
    arena: &DeviceArena,
    rng: &mut Rng,
    (rows_n, v): (u32, u32),
    opts: &Options,
) -> Result<Vec<Row>> {
    arena.reset();
    let ff = gpu.load(&cross_entropy::forward_kernel())?;
    let fb = gpu.load(&cross_entropy::backward_kernel())?;
    let (r, vu) = (rows_n as usize, v as usize);
    let logits = rng.vec(r * vu, 4.0);
    let mut targets: Vec<i32> = (0..r).map(|_| rng.below(v) as i32).collect();
    targets[r - 1] = -1;
    let dloss: Vec<f32> = (0..r).map(|_| 1.0 / r as f32 * (1.0 + rng.uniform())).collect();
    let lb = arena.alloc_n::<f32>(r * vu)?;
    let tb = arena.alloc_n::<i32>(r)?;
    let lossb = arena.alloc_n::<f32>(r)?;
    let lseb = arena.alloc_n::<f32>(r)?;
    let dlb = arena.alloc_n::<f32>(r)?;
    let gb = arena.alloc_n::<f32>(r * vu)?;
    arena.upload(lb, &logits)?;
    arena.upload(tb, &targets)?;
    arena.upload(dlb, &dloss)?;
    arena.fill_u32(lossb, NAN_BITS)?;
    arena.fill_u32(lseb, NAN_BITS)?;
    arena.fill_u32(gb, NAN_BITS)?;
    cross_entropy::forward(gpu, &ff, lossb.ptr, lseb.ptr, lb.ptr, tb.ptr, rows_n, v)?;
    cross_entropy::backward(gpu, &fb, gb.ptr, lb.ptr, lseb.ptr, tb.ptr, dlb.ptr, rows_n, v)?;
    let loss: Vec<f32> = arena.download(lossb, r)?;
    let lse: Vec<f32> = arena.download(lseb, r)?;
    let grad: Vec<f32> = arena.download(gb, r * vu)?;
    let (wl, wlse) = cross_entropy::forward_reference(&logits, &targets, vu);
    let wg = cross_entropy::backward_reference(&logits, &targets, &dloss, vu);
    let (la, lr) = compare(&loss, &wl);
    let (sa, sr) = compare(&lse, &wlse);
    let (ga, gr) = compare(&grad, &wg);
    let (tf, tb_) = if opts.bench {
        (
            Some(median(gpu.time(opts.warmup, opts.reps, || {
                cross_entropy::forward(gpu, &ff, lossb.ptr, lseb.ptr, lb.ptr, tb.ptr, rows_n, v)
            })?)),
            Some(median(gpu.time(opts.warmup, opts.reps, || {
                cross_entropy::backward(gpu, &fb, gb.ptr, lb.ptr, lseb.ptr, tb.ptr, dlb.ptr, rows_n, v)
            })?)),
        )
    } else {
        (None, None)
    };
    let bytes = 4.0 * (r * vu) as f64;
    // The bf16 store: the f32 gradient rounded, bit for bit.
    let fb16 = gpu.load(&cross_entropy::backward_kernel_bf16())?;
    let g16 = arena.alloc_n::<u16>(r * vu)?;
    arena.fill_u32(g16, NAN_BITS)?;
    cross_entropy::backward(gpu, &fb16, g16.ptr, lb.ptr, lseb.ptr, tb.ptr, dlb.ptr, rows_n, v)?;
    let got16: Vec<u16> = arena.download(g16, r * vu)?;
    let differ = got16.iter().zip(&grad).filter(|(x, y)| **x != half::bf16::from_f32(**y).to_bits()).count();
    let t16 = if opts.bench {
        Some(median(gpu.time(opts.warmup, opts.reps, || {
            cross_entropy::backward(gpu, &fb16, g16.ptr, lb.ptr, lseb.ptr, tb.ptr, dlb.ptr, rows_n, v)
        })?))
    } else {
        None
    };
    let mut bf16_row = exact_row(
        "cross_entropy",
        "cross_entropy_bwd_bf16 = f32 rounded",
        &format!("rows{rows_n} v{v}"),
        differ,
        r * vu,
    );
    bf16_row.median_us = t16;
    // The one-read forward for this vocabulary: the same loss and log-sum-exp, bit for bit.
    let held = cross_entropy::forward_kernel_for(Some(v));
    let fh = gpu.load(&held)?;
    let [loss2, lse2] = poisoned(arena, [r, r])?;
    cross_entropy::forward(gpu, &fh, loss2.ptr, lse2.ptr, lb.ptr, tb.ptr, rows_n, v)?;
    let differ =
        mismatches(&arena.download::<f32>(loss2, r)?, &loss) + mismatches(&arena.download::<f32>(lse2, r)?, &lse);
    let mut held_row = exact_row(
        "cross_entropy",
        &format!("{} = cross_entropy_fwd", held.name),
        &format!("rows{rows_n} v{v}"),
        differ,
        2 * r,
    );
    if opts.bench {
        let t = median(gpu.time(opts.warmup, opts.reps, || {
            cross_entropy::forward(gpu, &fh, loss2.ptr, lse2.ptr, lb.ptr, tb.ptr, rows_n, v)
        })?);
        held_row.median_us = Some(t);
        held_row.rate = format!("{:.2} TB/s (1 read)", bytes / t / 1e6);
    }
    Ok(vec![
        bf16_row,
        held_row,
        Row {
            family: "cross_entropy".into(),
            name: "cross_entropy_fwd".into(),
            shape: format!("rows{rows_n} v{v}"),
            max_abs: la.max(sa),
            rel: lr.max(sr),
            tol: 1e-5,
            pass: lr.max(sr) <= 1e-5,
            median_us: tf,
            rate: tf.map_or(String::new(), |t| format!("{:.2} TB/s (1 read)", bytes / t / 1e6)),
        },
        Row {
            family: "cross_entropy".into(),
            name: "cross_entropy_bwd".into(),
            shape: format!("rows{rows_n} v{v}"),
            max_abs: ga,
            rel: gr,
            tol: 1e-5,
            pass: gr <= 1e-5,
            median_us: tb_,
            rate: tb_.map_or(String::new(), |t| format!("{:.2} TB/s", 2.0 * bytes / t / 1e6)),
        },
    ])
}

/// Sum of squares + clip scale, then AdamW using that scale; then the three launches captured
/// as a graph and replayed for steps 2..=4 with new scalars written before each replay.
pub fn optimizer_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, n: u32, opts: &Options) -> Result<Vec<Row>> {
    arena.reset();
    let fa = gpu.load(&adamw::adamw_kernel())?;
    let fp = gpu.load(&adamw::sumsq_partial_kernel())?;
    let ff = gpu.load(&adamw::sumsq_finish_kernel())?;
    let nu = n as usize;
    // Segments of assorted sizes, alternating decay.
    let mut segments = Vec::new();
    let mut off = 0u32;
    let mut i = 0;
    while off < n {
        let len = (1u32 << (9 + (i * 7) % 13)).min(n - off);
        segments.push(Segment { offset: off, len, decay: i % 2 == 0 });
        off += len;
        i += 1;
    }
    let table = adamw::segment_table(&segments, n)?;
    let mut p = rng.vec(nu, 1.0);
    let g = rng.vec(nu, 0.01);
    let mut m = rng.vec(nu, 0.001);
    let mut v: Vec<f32> = rng.vec(nu, 1e-5).iter().map(|x| x.abs()).collect();
    let [pb, gb, mb, vb] = [0; 4].map(|_| arena.alloc_n::<f32>(nu));
    let (pb, gb, mb, vb) = (pb?, gb?, mb?, vb?);
    let segb = arena.alloc_n::<u32>(table.len())?;
    let scb = arena.alloc_n::<f32>(8)?;
    let partb = arena.alloc_n::<f32>(adamw::SUMSQ_BLOCKS as usize)?;
    let outb = arena.alloc_n::<f32>(2)?;
    arena.upload(pb, &p)?;
    arena.upload(gb, &g)?;
    arena.upload(mb, &m)?;
    arena.upload(vb, &v)?;
    arena.upload(segb, &table)?;
    let hyper = |step| AdamwScalars { lr: 3e-4, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1, step };
    arena.upload(scb, &hyper(1).device())?;
    let max_norm = 1.0f32;
    let nseg = segments.len() as u32;
    let step = |gpu: &Gpu| -> Result<()> {
        adamw::sumsq_partial(gpu, &fp, partb.ptr, gb.ptr, n)?;
        adamw::sumsq_finish(gpu, &ff, outb.ptr, partb.ptr, max_norm)?;
        adamw::launch(gpu, &fa, pb.ptr, gb.ptr, mb.ptr, vb.ptr, n, segb.ptr, nseg, scb.ptr, outb.ptr + 4)
    };
    step(gpu)?;
    let ss: Vec<f32> = arena.download(outb, 2)?;
    let (want_s, want_scale) = adamw::sumsq_reference(&g, max_norm);
    let srel = ((ss[0] as f64 - want_s) / want_s).abs();
    let screl = ((ss[1] - want_scale) / want_scale).abs() as f64;
    let mut rows = vec![Row {
        family: "adamw".into(),
        name: "sumsq_partial+finish".into(),
        shape: format!("n{n}"),
        max_abs: (ss[0] as f64 - want_s).abs(),
        rel: srel.max(screl),
        tol: 1e-5,
        pass: srel.max(screl) <= 1e-5,
        median_us: None,
        rate: format!("scale {:.6} (ref {:.6})", ss[1], want_scale),
    }];
    // The reference uses the device's scale so the update can be compared bit for bit.
    adamw::reference(&mut p, &g, &mut m, &mut v, &segments, &hyper(1).device(), ss[1]);
    let got_p: Vec<f32> = arena.download(pb, nu)?;
    let got_m: Vec<f32> = arena.download(mb, nu)?;
    let got_v: Vec<f32> = arena.download(vb, nu)?;
    let (pa, pr) = compare(&got_p, &p);
    let (ma, _) = compare(&got_m, &m);
    let (va, _) = compare(&got_v, &v);
    let exact = pa == 0.0 && ma == 0.0 && va == 0.0;
    rows.push(Row {
        family: "adamw".into(),
        name: "adamw step 1".into(),
        shape: format!("n{n} segs{nseg}"),
        max_abs: pa.max(ma).max(va),
        rel: pr,
        tol: 1e-7,
        pass: pr <= 1e-7,
        median_us: None,
        rate: if exact { "bit-exact".into() } else { "not bit-exact".into() },
    });
    // Graph: capture once, replay steps 2..=4 with new scalars.
    let graph = gpu.capture(|| step(gpu))?;
    for t in 2..=4u32 {
        arena.upload(scb, &hyper(t).device())?;
        graph.replay()?;
        gpu.synchronize()?;
        let s: Vec<f32> = arena.download(outb, 2)?;
        adamw::reference(&mut p, &g, &mut m, &mut v, &segments, &hyper(t).device(), s[1]);
    }
    let got_p: Vec<f32> = arena.download(pb, nu)?;
    let (pa, pr) = compare(&got_p, &p);
    let us_graph = if opts.bench { Some(median(gpu.time(opts.warmup, opts.reps, || graph.replay())?)) } else { None };
    let us_adamw = if opts.bench {
        Some(median(gpu.time(opts.warmup, opts.reps, || {
            adamw::launch(gpu, &fa, pb.ptr, gb.ptr, mb.ptr, vb.ptr, n, segb.ptr, nseg, scb.ptr, outb.ptr + 4)
        })?))
    } else {
        None
    };
    let rate = us_adamw.map_or(String::new(), |t| format!("{:.2} TB/s", 28.0 * n as f64 / t / 1e6));
    rows.push(timing_row("adamw", "adamw alone", &format!("n{n}"), us_adamw, rate));
    rows.push(Row {
        family: "graph".into(),
        name: format!("graph[{}] steps 2-4", graph.launches().join(",")),
        shape: format!("n{n}"),
        max_abs: pa,
        rel: pr,
        tol: 1e-7,
        pass: pr <= 1e-7,
        median_us: us_graph,
        rate: if pa == 0.0 { "bit-exact replay".into() } else { String::new() },
    });
    Ok(rows)
}

/// The seed's per-step GEMM mix (243 launches) captured as one graph: time per replay.
pub fn gemm_step_graph(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Row> {
    arena.reset();
    let mut fns: Vec<(GemmSpec, Function)> = Vec::new();
    let mut launches = Vec::new();
    let mut flops = 0.0;
    for &(lay, m, n, k, add, count) in COPPELIUS_SHAPES {
        let spec = GemmSpec {
            epilogue: if add { Epilogue::AddResidual } else { Epilogue::Store },
            ..spec_of(lay, Input::Bf16)
        };
        let sh = GemmShape::packed(&spec, m, n, k);
        let spec = GemmSpec { tile: sh.tile(), ..spec };
        if !fns.iter().any(|(s, _)| *s == spec) {
            fns.push((spec, gpu.load(&spec.kernel())?));
        }
        let (na, nb, nc) = sh.extents(&spec);
        let ab = upload_operand(arena, Input::Bf16, &rng.vec(na, 1.0))?;
        let bb = upload_operand(arena, Input::Bf16, &rng.vec(nb, 1.0))?;
        let cb = arena.alloc_n::<f32>(nc)?;
        arena.fill_u32(cb, 0)?;
        for _ in 0..count {
            launches.push((spec, sh, ab.ptr, bb.ptr, cb.ptr));
            flops += sh.flops();
        }
    }
    let run = || -> Result<()> {
        for (spec, sh, a, b, c) in &launches {
            let f = &fns.iter().find(|(s, _)| s == spec).unwrap().1;
            gemm::launch(gpu, f, spec, sh, *a, *b, *c, *c)?;
        }
        Ok(())
    };
    let graph = gpu.capture(run)?;
    let t = median(gpu.time(opts.warmup, opts.reps.min(10), || graph.replay())?);
    let rate = format!("{:.1} TFLOP/s ({:.2} ms/step)", flops / (t * 1e-6) / 1e12, t / 1e3);
    Ok(timing_row("graph", &format!("coppelius gemm mix x{}", launches.len()), "seed §2.5 shapes", Some(t), rate))
}

/// A row that only reports a time (it checks nothing, so it passes).
fn timing_row(family: &str, name: &str, shape: &str, median_us: Option<f64>, rate: String) -> Row {
    Row {
        family: family.into(),
        name: name.into(),
        shape: shape.into(),
        max_abs: 0.0,
        rel: 0.0,
        tol: 0.0,
        pass: true,
        median_us,
        rate,
    }
}

/// A bit-for-bit comparison row: `mism` differing elements of `n`.
fn exact_row(family: &str, name: &str, shape: &str, mism: usize, n: usize) -> Row {
    Row {
        family: family.into(),
        name: name.into(),
        shape: shape.into(),
        max_abs: mism as f64,
        rel: mism as f64 / n.max(1) as f64,
        tol: 0.0,
        pass: mism == 0,
        median_us: None,
        rate: String::new(),
    }
}

fn mismatches(a: &[f32], b: &[f32]) -> usize {
    a.iter().zip(b).filter(|(x, y)| x.to_bits() != y.to_bits()).count() + a.len().abs_diff(b.len())
}

/// The lowering's fusions against the launches they replace, bit for bit on the GPU:
/// * every tiled GEMM layout and input with the GELU epilogue: its second output against the
///   pointwise GELU kernel run on its first (and the first against the f64 reference);
/// * the attention backward with the inverse rotary fused into its dq and dk stores, writing
///   them (as Coppelius's plan does) exactly over o and k, against the unfused kernels followed
///   by two `rotary_inverse` launches (GQA, a partial tile);
/// * the attention forward and backward turning the pre-rotary q and k on load (dk stored
///   exactly over the pre-rotary k) against two `rotary` launches and the kernels reading the
///   rotated q and k: o, lse, dq, dk, dv.
pub fn fusion_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::pointwise::{Body, Operand, Pointwise};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    let mut rows = Vec::new();
    let launch = |f: &Function, grid: (u32, u32, u32), block: (u32, u32, u32), args: &[u64]| {
        let args: Vec<Arg> = args.iter().map(|&p| Arg::U64(p)).collect();
        gpu.launch(f, LaunchConfig { grid, block, shared_bytes: 0 }, &args)
    };
    for a in [Layout::RowMajor, Layout::ColMajor] {
        for b in [Layout::RowMajor, Layout::ColMajor] {
            for (input, wgmma) in [(Input::F32, false), (Input::Bf16, false), (Input::F32, true), (Input::Bf16, true)] {
                arena.reset();
                let spec = GemmSpec { activation: Some(alpha_ir::Unary::Gelu), ..GemmSpec::new(a, b, input) };
                let spec = if wgmma { spec.wgmma() } else { spec };
                let f = gpu.load(&spec.kernel())?;
                let mut sh = GemmShape::packed(&spec, 200, 136, 3 * spec.bk);
                sh.batch = 2;
                let (na, nb, nc) = sh.extents(&spec);
                let (av, bv) = (rng.vec(na, 1.0), rng.vec(nb, 1.0));
                let ab = upload_operand(arena, input, &av)?;
                let bb = upload_operand(arena, input, &bv)?;
                let cb = arena.alloc_n::<f32>(nc)?;
                let ub = arena.alloc_n::<f32>(nc)?;
                let pb = arena.alloc_n::<f32>(nc)?;
                for x in [cb, ub, pb] {
                    arena.fill_u32(x, NAN_BITS)?;
                }
                let ptrs = [ab.ptr, bb.ptr, cb.ptr, cb.ptr];
                gemm::launch_with(gpu, &f, &spec, &sh, ptrs, Extras { u: Some(ub.ptr), ..Extras::default() })?;
                let pw = Pointwise {
                    shape: vec![nc],
                    out: Operand::contiguous(alpha_ir::DType::F32, &[nc]),
                    ins: vec![Operand::contiguous(alpha_ir::DType::F32, &[nc])],
                    body: Body::Unary(alpha_ir::Unary::Gelu),
                };
                let (blocks, threads) = pw.grid();
                let fp = gpu.load(&pw.kernel()?)?;
                launch(&fp, (blocks, 1, 1), (threads, 1, 1), &[pb.ptr, cb.ptr])?;
                let c: Vec<f32> = arena.download(cb, nc)?;
                let u: Vec<f32> = arena.download(ub, nc)?;
                let p: Vec<f32> = arena.download(pb, nc)?;
                let mut want = vec![0.0f32; nc];
                gemm::reference(&GemmSpec { activation: None, ..spec }, &sh, &av, &bv, &[], &mut want);
                let (max_abs, rel) = compare(&c, &want);
                rows.push(Row {
                    family: "gemm".into(),
                    name: spec.name(),
                    shape: format!("b2 m200 n136 k{}", 3 * spec.bk),
                    max_abs,
                    rel,
                    tol: 1e-5,
                    pass: rel <= 1e-5,
                    median_us: None,
                    rate: String::new(),
                });
                rows.push(exact_row(
                    "fusion",
                    &format!("{} = pw_gelu", spec.name()),
                    &format!("b2 m200 n136 k{}", 3 * spec.bk),
                    mismatches(&u, &p),
                    nc,
                ));
            }
        }
    }

    // Attention backward with the inverse rotary fused into its stores.
    arena.reset();
    let dims = attention::Dims { b: 1, h: 4, g: 2, t: 200, d: 64, scale: 0.125, softcap: None };
    let (nq, nk, nl) = (dims.b * dims.h * dims.t * dims.d, dims.b * dims.g * dims.t * dims.d, dims.b * dims.h * dims.t);
    let up = |v: &[f32]| -> Result<alpha_cuda::runtime::driver::Buf> {
        let b = arena.alloc_n::<f32>(v.len())?;
        arena.upload(b, v)?;
        Ok(b)
    };
    let blank = |n: usize| -> Result<alpha_cuda::runtime::driver::Buf> {
        let b = arena.alloc_n::<f32>(n)?;
        arena.fill_u32(b, NAN_BITS)?;
        Ok(b)
    };
    let (qh, kh, vh, doh) = (rng.vec(nq, 1.0), rng.vec(nk, 1.0), rng.vec(nk, 1.0), rng.vec(nq, 1.0));
    let (q, k, v, dout) = (up(&qh)?, up(&kh)?, up(&vh)?, up(&doh)?);
    let tab = up(&rotary::table(dims.t, dims.d, 10000.0))?;
    let (o, lse) = (blank(nq)?, blank(nl)?);
    let block = (attention::ROWS, 1, 1);
    let ffwd = gpu.load(&attention::forward_kernel(&dims))?;
    launch(
        &ffwd,
        dims.grid_q(),
        block,
        &attention::forward_arguments([o.ptr, lse.ptr, q.ptr, k.ptr, v.ptr], vec![], None),
    )?;
    let oh: Vec<f32> = arena.download(o, nq)?;
    let delta = blank(nl)?;
    // Unfused: dQ, dK/dV, then the two inverse rotaries.
    let (dq, dk, dv, rq, rk) = (blank(nq)?, blank(nk)?, blank(nk)?, blank(nq)?, blank(nk)?);
    let fdq = gpu.load(&attention::backward_dq_kernel(&dims, false))?;
    let fdkv = gpu.load(&attention::backward_dkv_kernel(&dims, false))?;
    let dq_args = attention::dq_arguments([dq, delta, q, k, v, o, lse, dout].map(|b| b.ptr), None, vec![]);
    launch(&fdq, dims.grid_q(), block, &dq_args)?;
    let dkv_args = attention::dkv_arguments([dk, dv, q, k, v, lse, delta, dout].map(|b| b.ptr), None, vec![]);
    launch(&fdkv, dims.grid_kv(), block, &dkv_args)?;
    for (out, x, rows_) in [(rq, dq, nq / dims.d), (rk, dk, nk / dims.d)] {
        let fr = gpu.load(&rotary::kernel(rows_, dims.t, dims.d, true))?;
        let (blocks, threads) = alpha_cuda::kernels::pointwise::grid_blocks(rows_ * dims.d / 2);
        launch(&fr, (blocks, 1, 1), (threads, 1, 1), &rotary::arguments([out.ptr, x.ptr, tab.ptr]))?;
    }
    // Fused, dq written over (a copy of) o and dk over (a copy of) k, as in Coppelius's plan.
    let (o2, k2, dv2, delta2) = (up(&oh)?, up(&kh)?, blank(nk)?, blank(nl)?);
    let fdq_r = gpu.load(&attention::backward_dq_kernel(&dims, true))?;
    let fdkv_r = gpu.load(&attention::backward_dkv_kernel(&dims, true))?;
    let dq_args = attention::dq_arguments([o2, delta2, q, k2, v, o2, lse, dout].map(|b| b.ptr), Some(tab.ptr), vec![]);
    launch(&fdq_r, dims.grid_q(), block, &dq_args)?;
    let dkv_args =
        attention::dkv_arguments([k2, dv2, q, k2, v, lse, delta2, dout].map(|b| b.ptr), Some(tab.ptr), vec![]);
    launch(&fdkv_r, dims.grid_kv(), block, &dkv_args)?;
    let shape = "b1 h4 g2 t200 d64";
    let pairs = [("dq", rq, o2, nq), ("dk", rk, k2, nk), ("dv", dv, dv2, nk)];
    for (what, want, got, n) in pairs {
        let w: Vec<f32> = arena.download(want, n)?;
        let g: Vec<f32> = arena.download(got, n)?;
        let finite = w.iter().all(|x| x.is_finite());
        let mut row = exact_row("fusion", &format!("attention_bwd_rotary {what}"), shape, mismatches(&g, &w), n);
        row.pass &= finite;
        rows.push(row);
    }

    // The forward rotary turned on load: q and k above taken as the pre-rotary tensors.
    // Unfused: two `rotary` launches, the plain forward, then the backward (inverse rotaries
    // fused into its stores, as Coppelius runs it) on the rotated q and k.
    let (qr, kr) = (blank(nq)?, blank(nk)?);
    for (out, x, rows_) in [(qr, q, nq / dims.d), (kr, k, nk / dims.d)] {
        let fr = gpu.load(&rotary::kernel(rows_, dims.t, dims.d, false))?;
        let (blocks, threads) = alpha_cuda::kernels::pointwise::grid_blocks(rows_ * dims.d / 2);
        launch(&fr, (blocks, 1, 1), (threads, 1, 1), &rotary::arguments([out.ptr, x.ptr, tab.ptr]))?;
    }
    let (o_u, lse_u, dq_u, dk_u, dv_u, delta_u) =
        (blank(nq)?, blank(nl)?, blank(nq)?, blank(nk)?, blank(nk)?, blank(nl)?);
    let fwd_args = attention::forward_arguments([o_u, lse_u, qr, kr, v].map(|b| b.ptr), vec![], None);
    launch(&ffwd, dims.grid_q(), block, &fwd_args)?;
    let tensors = [dq_u, delta_u, qr, kr, v, o_u, lse_u, dout].map(|b| b.ptr);
    launch(&fdq_r, dims.grid_q(), block, &attention::dq_arguments(tensors, Some(tab.ptr), vec![]))?;
    let tensors = [dk_u, dv_u, qr, kr, v, lse_u, delta_u, dout].map(|b| b.ptr);
    launch(&fdkv_r, dims.grid_kv(), block, &attention::dkv_arguments(tensors, Some(tab.ptr), vec![]))?;
    // Fused: the rotating kernels read the pre-rotary q and k (dk stored exactly over a copy of
    // the pre-rotary k, as the plan allows).
    let (o_f, lse_f, dv_f, delta_f, k_f) = (blank(nq)?, blank(nl)?, blank(nk)?, blank(nl)?, up(&kh)?);
    let ffwd_l = gpu.load(&attention::forward_kernel_rotating(&dims, [true, true]))?;
    let fwd_args = attention::forward_arguments([o_f, lse_f, q, k_f, v].map(|b| b.ptr), vec![tab.ptr; 2], None);
    launch(&ffwd_l, dims.grid_q(), block, &fwd_args)?;
    let o_fh: Vec<f32> = arena.download(o_f, nq)?;
    let dq_f = blank(nq)?;
    let fdq_l = gpu.load(&attention::backward_dq_kernel_rotating(&dims, true, [true, true]))?;
    let fdkv_l = gpu.load(&attention::backward_dkv_kernel_rotating(&dims, true, [true, true]))?;
    let tensors = [dq_f, delta_f, q, k_f, v, o_f, lse_f, dout].map(|b| b.ptr);
    launch(&fdq_l, dims.grid_q(), block, &attention::dq_arguments(tensors, Some(tab.ptr), vec![tab.ptr; 2]))?;
    let tensors = [k_f, dv_f, q, k_f, v, lse_f, delta_f, dout].map(|b| b.ptr);
    launch(&fdkv_l, dims.grid_kv(), block, &attention::dkv_arguments(tensors, Some(tab.ptr), vec![tab.ptr; 2]))?;
    let o_uh: Vec<f32> = arena.download(o_u, nq)?;
    let mut row = exact_row("fusion", "attention_fwd_rotload o", shape, mismatches(&o_fh, &o_uh), nq);
    row.pass &= o_uh.iter().all(|x| x.is_finite());
    rows.push(row);
    let pairs = [("lse", lse_u, lse_f, nl), ("dq", dq_u, dq_f, nq), ("dk", dk_u, k_f, nk), ("dv", dv_u, dv_f, nk)];
    for (what, want, got, n) in pairs {
        let w: Vec<f32> = arena.download(want, n)?;
        let g: Vec<f32> = arena.download(got, n)?;
        let finite = w.iter().all(|x| x.is_finite());
        let name = if what == "lse" {
            "attention_fwd_rotload lse".to_string()
        } else {
            format!("attention_bwd_rotload {what}")
        };
        let mut row = exact_row("fusion", &name, shape, mismatches(&g, &w), n);
        row.pass &= finite;
        rows.push(row);
    }
    rows.extend(head_split_checks(gpu, arena, rng)?);
    rows.extend(delta_heads_checks(gpu, arena, rng)?);
    rows.extend(store_mul_checks(gpu, arena, rng)?);
    rows.extend(gated_checks(gpu, arena, rng)?);
    rows.extend(chain_epilogue_checks(gpu, arena, rng)?);
    Ok(rows)
}

/// Chain epilogues ([`gemm::ChainEpilogue`]) against the plain product followed by the chain's
/// own kernel, bit for bit: the gated GELU's backward reading `gelu(gate)` (f32 outputs, three
/// other inputs, 128 × 128 tiles on the three-stage ring) and recomputing it (bf16 outputs, the
/// lowering's form, in 128 × 128 tiles through shared memory — [`alpha_cuda::kernels::gemm::tma::staged`]
/// — and in 128 × 64 tiles on the fragments), a ragged M.
fn chain_epilogue_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::fused::Chain;
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    let (m, n, k) = (1000u32, 1408u32, 512u32);
    let nc = (m * n) as usize;
    let read_act = Chain { bf16: vec![false, false], ..Chain::gated_gelu_backward(nc) };
    let recomputing = Chain::gated_gelu_backward_recomputing(nc);
    let mut rows = vec![];
    // (chain, tile, ring depth)
    let cases =
        [(read_act, Tile::T128x128, 3), (recomputing.clone(), Tile::T128x128, 3), (recomputing, Tile::T128x64, 0)];
    for (chain, tile, stages) in cases {
        arena.reset();
        let plain = GemmSpec { tile, stages, ..GemmSpec::new(Layout::RowMajor, Layout::ColMajor, Input::Bf16).tma() };
        let epilogue = gemm::ChainEpilogue::new(&chain, 0).expect("the chain fits an epilogue");
        let fused = GemmSpec { chain: Some(epilogue), ..plain };
        let sh = GemmShape::packed(&plain, m, n, k);
        let GemmCase { ab, bb, cb, .. } = gemm_case(arena, rng, &plain, &sh)?;
        let maps = tma_maps(arena, &plain, &sh, ab.ptr, bb.ptr)?.expect("a TMA launch");
        let others: Vec<u64> = (1..chain.inputs)
            .map(|_| {
                let b = arena.alloc_n::<f32>(nc)?;
                arena.upload(b, &rng.vec(nc, 2.0))?;
                Ok(b.ptr)
            })
            .collect::<Result<_>>()?;
        let bytes = |j: usize| if chain.bf16[j] { 2 } else { 4 };
        let outputs = |arena: &DeviceArena| -> Result<Vec<alpha_cuda::runtime::driver::Buf>> {
            (0..chain.outputs.len())
                .map(|j| {
                    let b = arena.alloc(nc * bytes(j))?;
                    arena.fill_u32(b, NAN_BITS)?;
                    Ok(b)
                })
                .collect()
        };
        // The plain product, then the chain's kernel on it.
        let f = gpu.load(&plain.kernel())?;
        let extras = Extras { maps: Some(maps), ..Extras::default() };
        gemm::launch_with(gpu, &f, &plain, &sh, [ab.ptr, bb.ptr, cb.ptr, cb.ptr], extras)?;
        let want = outputs(arena)?;
        let fc = gpu.load(&chain.kernel()?)?;
        let mut args: Vec<Arg> = want.iter().map(|b| Arg::U64(b.ptr)).collect();
        args.push(Arg::U64(cb.ptr));
        args.extend(others.iter().map(|&p| Arg::U64(p)));
        let (blocks, threads) = alpha_cuda::kernels::pointwise::grid_blocks(nc);
        gpu.launch(&fc, LaunchConfig::linear(blocks, threads), &args)?;
        // The product with the chain in its epilogue.
        let got = outputs(arena)?;
        let mut chain_ptrs = [None; 2 * gemm::CHAIN_PTRS];
        for (slot, p) in chain_ptrs.iter_mut().zip(got.iter().map(|b| b.ptr).chain(others.iter().copied())) {
            *slot = Some(p);
        }
        let f = gpu.load(&fused.kernel())?;
        let extras = Extras { maps: Some(maps), chain: chain_ptrs, ..Extras::default() };
        gemm::launch_with(gpu, &f, &fused, &sh, [ab.ptr, bb.ptr, cb.ptr, cb.ptr], extras)?;
        let mut differ = 0;
        for (j, (&w, &g)) in want.iter().zip(&got).enumerate() {
            let words = nc * bytes(j) / 4;
            let (w, g): (Vec<u32>, Vec<u32>) = (arena.download(w, words)?, arena.download(g, words)?);
            differ += w.iter().zip(&g).filter(|(x, y)| x != y).count();
        }
        let words: usize = (0..chain.outputs.len()).map(|j| nc * bytes(j) / 4).sum();
        rows.push(exact_row("fusion", &fused.name(), &format!("m{m} n{n} k{k}"), differ, words));
    }
    Ok(rows)
}

/// The StoreMul epilogue (a gated unit's `gelu(gate) · up` written by the `up` product, as bf16)
/// against the plain product and the multiply and rounding on the host, bit for bit: C and U,
/// a ragged M, both tile widths of the TMA engine.
fn store_mul_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::pointwise::{Body, Operand, Pointwise};
    let mut rows = vec![];
    let gelu = Some(alpha_ir::Unary::Gelu);
    for (tile, stages, activation) in [(Tile::T128x128, 3, None), (Tile::T128x64, 0, None), (Tile::T128x128, 3, gelu)] {
        arena.reset();
        let plain = GemmSpec { tile, stages, ..GemmSpec::new(Layout::RowMajor, Layout::RowMajor, Input::Bf16).tma() };
        let fused = GemmSpec { epilogue: Epilogue::StoreMul, activation, ..plain };
        let sh = GemmShape::packed(&plain, 1000, 1408, 512);
        let GemmCase { ab, bb, cb, rb, r, nc, .. } = gemm_case(arena, rng, &plain, &sh)?;
        let maps = tma_maps(arena, &plain, &sh, ab.ptr, bb.ptr)?.expect("a TMA launch");
        let f = gpu.load(&plain.kernel())?;
        gemm::launch_with(
            gpu,
            &f,
            &plain,
            &sh,
            [ab.ptr, bb.ptr, cb.ptr, cb.ptr],
            Extras { maps: Some(maps), ..Extras::default() },
        )?;
        let want_c: Vec<f32> = arena.download(cb, nc)?;
        let (c2, u) = (arena.alloc_n::<f32>(nc)?, arena.alloc_n::<u16>(nc)?);
        arena.fill_u32(c2, NAN_BITS)?;
        arena.fill_u32(u, NAN_BITS)?;
        let f = gpu.load(&fused.kernel())?;
        gemm::launch_with(
            gpu,
            &f,
            &fused,
            &sh,
            [ab.ptr, bb.ptr, c2.ptr, rb.ptr],
            Extras { u: Some(u.ptr), maps: Some(maps), ..Extras::default() },
        )?;
        let got_c: Vec<f32> = arena.download(c2, nc)?;
        let got_u: Vec<u16> = arena.download(u, nc)?;
        // The multiplier: R, or the pointwise kernel's activation of R.
        let r = match activation {
            None => r,
            Some(f) => {
                let pw = Pointwise {
                    shape: vec![nc],
                    out: Operand::contiguous(alpha_ir::DType::F32, &[nc]),
                    ins: vec![Operand::contiguous(alpha_ir::DType::F32, &[nc])],
                    body: Body::Unary(f),
                };
                let act = arena.alloc_n::<f32>(nc)?;
                let (blocks, threads) = pw.grid();
                let fp = gpu.load(&pw.kernel()?)?;
                let cfg = alpha_cuda::runtime::driver::LaunchConfig::linear(blocks, threads);
                gpu.launch(
                    &fp,
                    cfg,
                    &[alpha_cuda::runtime::driver::Arg::U64(act.ptr), alpha_cuda::runtime::driver::Arg::U64(rb.ptr)],
                )?;
                arena.download(act, nc)?
            }
        };
        let differ = got_c.iter().zip(&want_c).filter(|(x, y)| x.to_bits() != y.to_bits()).count()
            + got_u
                .iter()
                .zip(want_c.iter().zip(&r))
                .filter(|(x, (c, r))| **x != half::bf16::from_f32(**c * **r).to_bits())
                .count();
        let multiplier = if activation.is_some() { "act(R)" } else { "R" };
        rows.push(exact_row(
            "fusion",
            &format!("{} = product, product·{multiplier}", fused.name()),
            "m1000 n1408 k512",
            differ,
            2 * nc,
        ));
    }
    Ok(rows)
}

/// The gated product ([`GemmSpec::gated`]: gate and up from one A tile, the multiply on
/// registers) against its two launches — the gate product, then the up product's StoreMul
/// reading the stored gate — bit for bit: the gate, the up product and the bf16 product. Both
/// ring depths; ragged M and N (the last 64 columns partly past the edge).
fn gated_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    let mut rows = vec![];
    let gelu = Some(alpha_ir::Unary::Gelu);
    for (stages, (m, n, k)) in [(3, (1000, 1408, 512)), (0, (200, 136, 192))] {
        arena.reset();
        let plain = GemmSpec { stages, ..GemmSpec::new(Layout::RowMajor, Layout::RowMajor, Input::Bf16).tma() };
        let mul = GemmSpec { epilogue: Epilogue::StoreMul, activation: gelu, ..plain };
        let gated = GemmSpec { gated: true, ..mul };
        let sh = GemmShape::packed(&plain, m, n, k);
        let (na, nb, nc) = sh.extents(&plain);
        let (a, bg, bu) = (rng.vec(na, 1.0), rng.vec(nb, 1.0), rng.vec(nb, 1.0));
        let ab = upload_operand(arena, Input::Bf16, &a)?;
        let (bgb, bub) = (upload_operand(arena, Input::Bf16, &bg)?, upload_operand(arena, Input::Bf16, &bu)?);
        let map = |b: u64| tma_maps(arena, &plain, &sh, ab.ptr, b).map(|m| m.expect("a TMA launch"));
        let (gate_maps, up_maps) = (map(bgb.ptr)?, map(bub.ptr)?);
        // Two sets of outputs: (gate, up, bf16 product), poisoned.
        let mut outs = vec![];
        for _ in 0..2 {
            let (g, c, u) = (arena.alloc_n::<f32>(nc)?, arena.alloc_n::<f32>(nc)?, arena.alloc_n::<u16>(nc)?);
            for b in [g, c, u] {
                arena.fill_u32(b, NAN_BITS)?;
            }
            outs.push((g, c, u));
        }
        let (g, c, u) = outs[0];
        let f = gpu.load(&plain.kernel())?;
        let extras = Extras { maps: Some(gate_maps), ..Extras::default() };
        gemm::launch_with(gpu, &f, &plain, &sh, [ab.ptr, bgb.ptr, g.ptr, g.ptr], extras)?;
        let f = gpu.load(&mul.kernel())?;
        let extras = Extras { u: Some(u.ptr), maps: Some(up_maps), ..Extras::default() };
        gemm::launch_with(gpu, &f, &mul, &sh, [ab.ptr, bub.ptr, c.ptr, g.ptr], extras)?;
        let words = |b: alpha_cuda::runtime::driver::Buf, n: usize| arena.download::<u32>(b, n);
        // The gated block.
        for spec in [&gated] {
            let (g2, c2, u2) = outs[1];
            for b in [g2, c2, u2] {
                arena.fill_u32(b, NAN_BITS)?;
            }
            let f = gpu.load(&spec.kernel())?;
            let extras =
                Extras { u: Some(u2.ptr), maps: Some(up_maps), gate_map: Some(gate_maps.1), ..Extras::default() };
            gemm::launch_with(gpu, &f, spec, &sh, [ab.ptr, bub.ptr, c2.ptr, g2.ptr], extras)?;
            let mut differ = 0;
            for (w, got, n) in [(g, g2, nc), (c, c2, nc), (u, u2, nc / 2)] {
                let (w, got) = (words(w, n)?, words(got, n)?);
                differ += w.iter().zip(&got).filter(|(x, y)| x != y).count();
            }
            rows.push(exact_row(
                "fusion",
                &format!("{} = gate product, {}", spec.name(), mul.name()),
                &format!("m{m} n{n} k{k}"),
                differ,
                nc * 5 / 2,
            ));
        }
    }
    Ok(rows)
}

/// The products stored split into heads ([`gemm::Heads`]) against the plain product permuted on
/// the host, bit for bit: the q/k/v shape (S = 3) and a gradient's (S = 1), two contexts each,
/// partial tiles of neither kind (T a multiple of the tile) but both operand layouts of A.
fn head_split_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let (b, t, h, d) = (2u32, 256u32, 4u32, 64u32);
    for (s, a_layout, input) in [(3u32, Layout::RowMajor, Input::Bf16), (1, Layout::ColMajor, Input::F32)] {
        arena.reset();
        let plain = GemmSpec { tile: Tile::T128x64, ..GemmSpec::new(a_layout, Layout::RowMajor, input).wgmma() };
        let heads = gemm::Heads { batch: b, t, heads: h, d, bf16_turned: false, delta: false };
        let split = GemmSpec { heads: Some(heads), ..plain };
        let (m, n) = (b * t, s * h * d);
        let sh = GemmShape::packed(&plain, m, n, 128);
        let GemmCase { ab, bb, cb, nc, .. } = gemm_case(arena, rng, &plain, &sh)?;
        let hb = arena.alloc_n::<f32>(nc)?;
        arena.fill_u32(hb, NAN_BITS)?;
        for (spec, out) in [(plain, cb), (split, hb)] {
            let f = gpu.load(&spec.kernel())?;
            gemm::launch(gpu, &f, &spec, &sh, ab.ptr, bb.ptr, out.ptr, out.ptr)?;
        }
        let c: Vec<f32> = arena.download(cb, nc)?;
        let got: Vec<f32> = arena.download(hb, nc)?;
        // [B·T, S·H·D] → [S, B, H, T, D].
        let mut want = vec![0.0f32; nc];
        for row in 0..m {
            let (bi, ti) = (row / t, row % t);
            for col in 0..n {
                let (plane, di) = (col / d, col % d);
                let (si, hi) = (plane / h, plane % h);
                let at = (((si * b + bi) * h + hi) * t + ti) * d + di;
                want[at as usize] = c[(row * n + col) as usize];
            }
        }
        let shape = format!("b{b} t{t} s{s} h{h} d{d}");
        rows.push(exact_row(
            "fusion",
            &format!("{} = permuted product", split.name()),
            &shape,
            mismatches(&got, &want),
            nc,
        ));
        if s == 3 {
            // The same store as bf16 with q and k turned (TMA engine, both tile widths), against
            // the permuted product turned and rounded on the host as the attention kernels
            // would on load.
            let table = rotary::table(t as usize, d as usize, 10000.0);
            let tab = upload_f32(arena, &table)?;
            let plane = (b * h * t * d) as usize;
            let mut want16: Vec<u16> = rotated_bf16(&want[..2 * plane], &table, t as usize, d as usize);
            want16.extend(want[2 * plane..].iter().map(|&x| half::bf16::from_f32(x).to_bits()));
            for tile in [Tile::T128x64, Tile::T128x128] {
                let turned = gemm::Heads { bf16_turned: true, ..heads };
                let spec = GemmSpec { tile, heads: Some(turned), ..plain.tma() };
                let out = arena.alloc_n::<u16>(nc)?;
                arena.fill_u32(out, NAN_BITS)?;
                let f = gpu.load(&spec.kernel())?;
                let maps = tma_maps(arena, &spec, &sh, ab.ptr, bb.ptr)?.expect("a TMA launch");
                gemm::launch_with(
                    gpu,
                    &f,
                    &spec,
                    &sh,
                    [ab.ptr, bb.ptr, out.ptr, out.ptr],
                    Extras { maps: Some(maps), rot_tab: Some(tab), ..Extras::default() },
                )?;
                let got16: Vec<u16> = arena.download(out, nc)?;
                let differ = got16.iter().zip(&want16).filter(|(x, y)| x != y).count();
                rows.push(exact_row("fusion", &format!("{} = turned, rounded", spec.name()), &shape, differ, nc));
            }
        }
    }
    Ok(rows)
}

/// The delta-heads product ([`gemm::Heads::delta`]: dO stored as bf16 heads, with attention's
/// delta) against the f32 head-split product followed by attention's delta kernel
/// ([`attention_mma::backward_delta_kernel_bf16`]): delta and the bf16 dO bit for bit. The
/// output projection's input gradient at sixteen contexts, and two contexts of T = 200 (tiles
/// across a context's end, a partial last tile).
fn delta_heads_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    let mut rows = Vec::new();
    for (b, t) in [(16u32, 1024u32), (2, 200)] {
        arena.reset();
        let (h, d) = (8u32, 64u32);
        let dims = attention::Dims {
            b: b as usize,
            h: h as usize,
            g: h as usize,
            t: t as usize,
            d: d as usize,
            scale: 0.125,
            softcap: None,
        };
        let heads = gemm::Heads { batch: b, t, heads: h, d, bf16_turned: false, delta: false };
        let plain = GemmSpec { heads: Some(heads), ..spec_of("rc", Input::Bf16).tma() };
        let fused = GemmSpec { heads: Some(gemm::Heads { delta: true, ..heads }), ..plain };
        let (m, n) = (b * t, h * d);
        let sh = GemmShape::packed(&plain, m, n, 512);
        let GemmCase { ab, bb, cb, nc, .. } = gemm_case(arena, rng, &plain, &sh)?;
        let o = upload_f32(arena, &rng.vec(nc, 1.0))?;
        let rows_bh = (b * h * t) as usize;
        let [delta, delta2] = poisoned(arena, [rows_bh, rows_bh])?;
        let (do16, do16b) = (arena.alloc_n::<u16>(nc)?, arena.alloc_n::<u16>(nc)?);
        // The f32 product split into heads, then the delta kernel on it and O.
        let f = gpu.load(&plain.kernel())?;
        let maps = tma_maps(arena, &plain, &sh, ab.ptr, bb.ptr)?;
        gemm::launch_with(
            gpu,
            &f,
            &plain,
            &sh,
            [ab.ptr, bb.ptr, cb.ptr, cb.ptr],
            Extras { maps, ..Extras::default() },
        )?;
        let fd = gpu.load(&attention_mma::backward_delta_kernel_bf16(&dims))?;
        let cfg = LaunchConfig { grid: dims.grid_q(), block: attention_mma::block(), shared_bytes: 0 };
        gpu.launch(&fd, cfg, &[delta.ptr, o, cb.ptr, do16.ptr].map(Arg::U64))?;
        // The fused product.
        let ff = gpu.load(&fused.kernel())?;
        let maps = tma_maps(arena, &fused, &sh, ab.ptr, bb.ptr)?;
        let extras = Extras { maps, u: Some(delta2.ptr), ..Extras::default() };
        gemm::launch_with(gpu, &ff, &fused, &sh, [ab.ptr, bb.ptr, do16b.ptr, o], extras)?;
        let (w, g): (Vec<f32>, Vec<f32>) = (arena.download(delta, rows_bh)?, arena.download(delta2, rows_bh)?);
        let (w16, g16): (Vec<u16>, Vec<u16>) = (arena.download(do16, nc)?, arena.download(do16b, nc)?);
        let shape = format!("b{b} t{t} h{h} d{d}");
        let name = fused.name();
        let mut row =
            exact_row("fusion", &format!("{name} delta = gemm + delta kernel"), &shape, mismatches(&g, &w), rows_bh);
        row.pass &= g.iter().all(|x| x.is_finite());
        rows.push(row);
        let differ = g16.iter().zip(&w16).filter(|(x, y)| x != y).count();
        rows.push(exact_row("fusion", &format!("{name} dO bf16 = delta kernel's"), &shape, differ, nc));
    }
    Ok(rows)
}

/// One attention problem of [`attention_checks`]: the shape, q's magnitude (larger logits test
/// the softmax harder), which of q and k are turned by the rotary on load, and which of dq and
/// dk are stored turned back.
struct AttnCase {
    dims: attention::Dims,
    q_scale: f32,
    load: [bool; 2],
    inverse: [bool; 2],
}

/// Max |Δ|, max |Δ| / max |ref| and the cosine similarity of `out` against `reference` (NaN
/// anywhere gives infinite error and similarity 0).
fn rel_and_cosine(out: &[f32], reference: &[f32]) -> (f64, f64, f64) {
    let (mut max_abs, mut max_ref, mut dot, mut no, mut nr) = (0.0f64, 0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for (&o, &r) in out.iter().zip(reference) {
        if !o.is_finite() || !r.is_finite() {
            return (f64::INFINITY, f64::INFINITY, 0.0);
        }
        let (o, r) = (o as f64, r as f64);
        max_abs = max_abs.max((o - r).abs());
        max_ref = max_ref.max(r.abs());
        dot += o * r;
        no += o * o;
        nr += r * r;
    }
    let cos = if no == 0.0 && nr == 0.0 { 1.0 } else { dot / (no.sqrt() * nr.sqrt()).max(1e-300) };
    (max_abs, max_abs / max_ref.max(1e-30), cos)
}

/// The tensor-core attention kernels ([`attention_mma`]) against the fp32 kernels
/// ([`attention`], trusted: they follow the CPU reference) on the same random inputs: forward o
/// and lse, then each family's backward on its own forward's outputs: delta, dq, dk, dv.
///
/// bf16 operands bound the agreement: o, delta, dq, dk, dv within max |Δ| / max |ref| ≤ 2e-2 and
/// cosine similarity ≥ 0.9999; lse within 1e-2, or, where logits are large enough that merely
/// rounding q and k to bf16 moves lse further, within twice that floor (the fp32 forward run on
/// bf16-rounded q and k: the error any bf16 attention has). A second run of the new kernels must
/// repeat every tensor bit for bit. Shapes: Coppelius's (T = 1024, 8 heads), GQA with T not a
/// multiple of 64, soft-caps, the rotary turned on load and stored back (both, and mixed), and a
/// T smaller than one mma row block. With `opts.bench`, both families are timed (µs per launch,
/// median of `opts.reps`) at B = 1 and B = 16, T = 1024, and with Coppelius's rotary options.
pub fn attention_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    use attention::Dims;
    let base = Dims { b: 1, h: 8, g: 8, t: 1024, d: 64, scale: 0.125, softcap: None };
    let (plain, both) = ([false, false], [true, true]);
    let case = |dims, q_scale, load, inverse| AttnCase { dims, q_scale, load, inverse };
    let cases = [
        case(base, 4.0, plain, plain),
        case(Dims { b: 2, h: 4, g: 2, t: 200, ..base }, 4.0, plain, plain),
        case(Dims { b: 1, h: 4, g: 1, t: 130, softcap: Some(30.0), ..base }, 16.0, plain, plain),
        case(Dims { b: 1, h: 4, g: 2, t: 200, ..base }, 4.0, both, both),
        case(Dims { b: 2, h: 2, g: 1, t: 77, softcap: Some(30.0), ..base }, 8.0, [true, false], [false, true]),
        case(Dims { b: 1, h: 2, g: 2, t: 3, ..base }, 4.0, plain, plain),
        // Grids that agree (no GQA): the one-launch backward too, with every option.
        case(base, 4.0, both, both),
        case(Dims { b: 2, h: 3, g: 3, t: 200, softcap: Some(30.0), ..base }, 8.0, [false, true], [true, false]),
    ];
    let mut rows = Vec::new();
    for c in &cases {
        rows.extend(attention_case(gpu, arena, rng, c)?);
    }
    if opts.bench {
        for c in [
            case(base, 4.0, plain, plain),
            case(base, 4.0, both, both),
            case(Dims { b: 16, ..base }, 4.0, plain, plain),
            case(Dims { b: 16, ..base }, 4.0, both, both),
        ] {
            rows.extend(attention_bench(gpu, arena, rng, &c, opts)?);
        }
    }
    Ok(rows)
}

/// The three kernels of one family for a case: (forward, dQ, dK/dV) and their block.
struct AttnKernels {
    fwd: Function,
    dq: Function,
    dkv: Function,
    block: (u32, u32, u32),
}

/// One case's inputs on the device (q, k, v, dO and the rotary table) and its launches.
struct AttnRun<'a> {
    gpu: &'a Gpu,
    case: &'a AttnCase,
    q: u64,
    k: u64,
    v: u64,
    dout: u64,
    tab: u64,
}

impl AttnRun<'_> {
    fn kernels(&self, mma: bool) -> Result<AttnKernels> {
        let (c, gpu) = (self.case, self.gpu);
        let d = &c.dims;
        Ok(if mma {
            AttnKernels {
                fwd: gpu.load(&attention_mma::forward_kernel_rotating(d, c.load))?,
                dq: gpu.load(&attention_mma::backward_dq_kernel_rotating(d, c.inverse[0], c.load))?,
                dkv: gpu.load(&attention_mma::backward_dkv_kernel_rotating(d, c.inverse[1], c.load))?,
                block: attention_mma::block(),
            }
        } else {
            AttnKernels {
                fwd: gpu.load(&attention::forward_kernel_rotating(d, c.load))?,
                dq: gpu.load(&attention::backward_dq_kernel_rotating(d, c.inverse[0], c.load))?,
                dkv: gpu.load(&attention::backward_dkv_kernel_rotating(d, c.inverse[1], c.load))?,
                block: (attention::ROWS, 1, 1),
            }
        })
    }

    fn launch(&self, f: &Function, grid: (u32, u32, u32), block: (u32, u32, u32), args: &[u64]) -> Result<()> {
        use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
        let args: Vec<Arg> = args.iter().map(|&p| Arg::U64(p)).collect();
        self.gpu.launch(f, LaunchConfig { grid, block, shared_bytes: 0 }, &args)
    }

    /// `q_tab`, `k_tab` for those turned on load.
    fn tabs(&self) -> Vec<u64> {
        self.case.load.iter().filter(|&&x| x).map(|_| self.tab).collect()
    }

    /// Forward into `o`, `lse`.
    fn forward(&self, ks: &AttnKernels, o: u64, lse: u64) -> Result<()> {
        let args = attention::forward_arguments([o, lse, self.q, self.k, self.v], self.tabs(), None);
        self.launch(&ks.fwd, self.case.dims.grid_q(), ks.block, &args)
    }

    /// Backward from `o`, `lse`: dQ (and delta), then dK/dV; `out` = (delta, dq, dk, dv).
    fn backward(&self, ks: &AttnKernels, o: u64, lse: u64, [delta, dq, dk, dv]: [u64; 4]) -> Result<()> {
        let c = self.case;
        let tensors = [dq, delta, self.q, self.k, self.v, o, lse, self.dout];
        let args = attention::dq_arguments(tensors, c.inverse[0].then_some(self.tab), self.tabs());
        self.launch(&ks.dq, c.dims.grid_q(), ks.block, &args)?;
        let tensors = [dk, dv, self.q, self.k, self.v, lse, delta, self.dout];
        let args = attention::dkv_arguments(tensors, c.inverse[1].then_some(self.tab), self.tabs());
        self.launch(&ks.dkv, c.dims.grid_kv(), ks.block, &args)
    }

    /// The tensor-core backward as one launch after delta alone (the lowering's choice where the
    /// grids agree); `out` = (delta, dq, dk, dv), none of them over an input.
    fn backward_joint(&self, [fd, fb]: &[Function; 2], o: u64, lse: u64, [delta, dq, dk, dv]: [u64; 4]) -> Result<()> {
        let c = self.case;
        let d = &c.dims;
        self.launch(fd, d.grid_q(), attention_mma::block(), &attention::delta_arguments([delta, o, self.dout], None))?;
        let tensors = [dq, dk, dv, delta, self.q, self.k, self.v, o, lse, self.dout];
        let inverse_tables = c.inverse.iter().filter(|&&x| x).map(|_| self.tab).collect();
        let args = attention::backward_arguments(tensors, None, inverse_tables, self.tabs());
        self.launch(fb, d.grid_q(), attention_mma::block(), &args)
    }

    /// [`AttnRun::backward_joint`]'s kernels: delta, then both passes.
    fn joint_kernels(&self) -> Result<[Function; 2]> {
        let (c, gpu) = (self.case, self.gpu);
        Ok([
            gpu.load(&attention_mma::backward_delta_kernel(&c.dims))?,
            gpu.load(&attention_mma::backward_kernel_rotating(&c.dims, c.inverse, c.load))?,
        ])
    }
}

fn attn_shape(case: &AttnCase) -> String {
    let d = &case.dims;
    let mut s = format!("b{} h{} g{} t{}", d.b, d.h, d.g, d.t);
    if let Some(c) = d.softcap {
        s += &format!(" cap{c}");
    }
    let bits = |x: [bool; 2]| format!("{}{}", u8::from(x[0]), u8::from(x[1]));
    if case.load != [false, false] {
        s += &format!(" load{}", bits(case.load));
    }
    if case.inverse != [false, false] {
        s += &format!(" inv{}", bits(case.inverse));
    }
    s
}

/// Random inputs of a case on the host: q, k, v, dO.
fn attention_inputs(rng: &mut Rng, case: &AttnCase) -> [Vec<f32>; 4] {
    let d = &case.dims;
    let (nq, nk) = (d.b * d.h * d.t * d.d, d.b * d.g * d.t * d.d);
    [rng.vec(nq, case.q_scale), rng.vec(nk, 1.0), rng.vec(nk, 1.0), rng.vec(nq, 1.0)]
}

/// Uploads `x` (and returns its device address).
fn upload_f32(arena: &DeviceArena, x: &[f32]) -> Result<u64> {
    let b = arena.alloc_n::<f32>(x.len())?;
    arena.upload(b, x)?;
    Ok(b.ptr)
}

fn attention_case(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, case: &AttnCase) -> Result<Vec<Row>> {
    arena.reset();
    let d = &case.dims;
    let (nq, nk, nl) = (d.b * d.h * d.t * d.d, d.b * d.g * d.t * d.d, d.b * d.h * d.t);
    let [qh, kh, vh, doh] = attention_inputs(rng, case);
    let tab = upload_f32(arena, &rotary::table(d.t, d.d, 10000.0))?;
    let (v, dout) = (upload_f32(arena, &vh)?, upload_f32(arena, &doh)?);
    let run = AttnRun { gpu, case, q: upload_f32(arena, &qh)?, k: upload_f32(arena, &kh)?, v, dout, tab };
    let blank = |n: usize| -> Result<alpha_cuda::runtime::driver::Buf> {
        let b = arena.alloc_n::<f32>(n)?;
        arena.fill_u32(b, NAN_BITS)?;
        Ok(b)
    };
    let sizes = [nq, nl, nl, nq, nk, nk];
    let names = ["o", "lse", "delta", "dq", "dk", "dv"];
    // Outputs (o, lse, delta, dq, dk, dv) of the fp32 kernels, then of two runs of the new ones.
    let mut outs: Vec<Vec<Vec<f32>>> = vec![];
    for mma in [false, true, true] {
        let ks = run.kernels(mma)?;
        let bufs: Vec<alpha_cuda::runtime::driver::Buf> = sizes.iter().map(|&n| blank(n)).collect::<Result<_>>()?;
        let p: Vec<u64> = bufs.iter().map(|b| b.ptr).collect();
        run.forward(&ks, p[0], p[1])?;
        run.backward(&ks, p[0], p[1], [p[2], p[3], p[4], p[5]])?;
        outs.push(bufs.iter().zip(sizes).map(|(b, n)| arena.download(*b, n)).collect::<Result<_>>()?);
    }
    // The lse floor: the fp32 forward on q and k rounded to bf16.
    let round = |x: &[f32]| x.iter().map(|&v| gemm::bf16_round(v)).collect::<Vec<f32>>();
    let floor = {
        let rounded = AttnRun { q: upload_f32(arena, &round(&qh))?, k: upload_f32(arena, &round(&kh))?, ..run };
        let (o, lse) = (blank(nq)?, blank(nl)?);
        rounded.forward(&rounded.kernels(false)?, o.ptr, lse.ptr)?;
        let l: Vec<f32> = arena.download(lse, nl)?;
        rel_and_cosine(&l, &outs[0][1]).0
    };
    let shape = attn_shape(case);
    let mut rows = vec![];
    for (i, name) in names.iter().enumerate() {
        let (max_abs, rel, cos) = rel_and_cosine(&outs[1][i], &outs[0][i]);
        let (err, tol, note) = if *name == "lse" {
            (max_abs, (2.0 * floor).max(1e-2), format!(", bf16 floor {floor:.2e}"))
        } else {
            (rel, 2e-2, String::new())
        };
        rows.push(Row {
            family: "attention-mma".into(),
            name: format!("{name} vs fp32"),
            shape: shape.clone(),
            max_abs,
            rel,
            tol,
            pass: err <= tol && cos >= 0.9999,
            median_us: None,
            rate: format!("cos {cos:.7}{note}"),
        });
    }
    let mism: usize = (0..names.len()).map(|i| mismatches(&outs[1][i], &outs[2][i])).sum();
    let total: usize = sizes.iter().sum();
    rows.push(exact_row("attention-mma", "second run bit for bit", &shape, mism, total));
    if d.g == d.h {
        // Both backward passes in one launch: the same bits as the two launches.
        let bufs: Vec<alpha_cuda::runtime::driver::Buf> = sizes.iter().map(|&n| blank(n)).collect::<Result<_>>()?;
        let p: Vec<u64> = bufs.iter().map(|b| b.ptr).collect();
        run.forward(&run.kernels(true)?, p[0], p[1])?;
        run.backward_joint(&run.joint_kernels()?, p[0], p[1], [p[2], p[3], p[4], p[5]])?;
        let joint: Vec<Vec<f32>> = bufs.iter().zip(sizes).map(|(b, n)| arena.download(*b, n)).collect::<Result<_>>()?;
        let mism: usize = (0..names.len()).map(|i| mismatches(&outs[1][i], &joint[i])).sum();
        rows.push(exact_row("attention-mma", "one-launch backward bit for bit", &shape, mism, total));
    }
    // What the driver's JIT made of them: registers, and no local memory (no spills).
    let ks = run.kernels(true)?;
    let res = [ks.fwd.resources()?, ks.dq.resources()?, ks.dkv.resources()?];
    let local: i32 = res.iter().map(|r| r.1).sum();
    rows.push(Row {
        rate: format!("registers fwd {} dq {} dkv {}", res[0].0, res[1].0, res[2].0),
        ..exact_row("attention-mma", "JIT spill bytes", &shape, local as usize, 1)
    });
    Ok(rows)
}

/// Times the forward and the backward (dQ + dK/dV) of both families at one shape.
fn attention_bench(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, case: &AttnCase, opts: &Options) -> Result<Vec<Row>> {
    arena.reset();
    let d = &case.dims;
    let (nq, nk, nl) = (d.b * d.h * d.t * d.d, d.b * d.g * d.t * d.d, d.b * d.h * d.t);
    let [qh, kh, vh, doh] = attention_inputs(rng, case);
    let tab = upload_f32(arena, &rotary::table(d.t, d.d, 10000.0))?;
    let (q, k) = (upload_f32(arena, &qh)?, upload_f32(arena, &kh)?);
    let run = AttnRun { gpu, case, q, k, v: upload_f32(arena, &vh)?, dout: upload_f32(arena, &doh)?, tab };
    let p: Vec<u64> =
        [nq, nl, nl, nq, nk, nk].iter().map(|&n| arena.alloc_n::<f32>(n).map(|b| b.ptr)).collect::<Result<_>>()?;
    // Causal: half of the 4·B·H·T²·D flops of the forward's two products; the backward has 2.5×.
    let fwd_flop = 2.0 * d.b as f64 * d.h as f64 * (d.t as f64).powi(2) * d.d as f64;
    let mut times = vec![];
    for mma in [false, true] {
        let ks = run.kernels(mma)?;
        let f = median(gpu.time(opts.warmup, opts.reps, || run.forward(&ks, p[0], p[1]))?);
        let b = median(gpu.time(opts.warmup, opts.reps, || run.backward(&ks, p[0], p[1], [p[2], p[3], p[4], p[5]]))?);
        times.push([f, b]);
    }
    let shape = attn_shape(case);
    let mut rows = vec![];
    for (i, what) in ["fwd", "bwd (dq+dkv)"].iter().enumerate() {
        for (j, fam) in ["fp32", "mma"].iter().enumerate() {
            let t = times[j][i];
            let flop = if i == 0 { fwd_flop } else { 2.5 * fwd_flop };
            let speedup = if j == 1 { format!(", {:.1}x the fp32 kernels", times[0][i] / t) } else { String::new() };
            let rate = format!("{:.1} TFLOP/s{speedup}", flop / (t * 1e-6) / 1e12);
            rows.push(timing_row("attention-bench", &format!("{fam} {what}"), &shape, Some(t), rate));
        }
    }
    if d.g == d.h {
        let jk = run.joint_kernels()?;
        let t =
            median(gpu.time(opts.warmup, opts.reps, || run.backward_joint(&jk, p[0], p[1], [p[2], p[3], p[4], p[5]]))?);
        let rate =
            format!("{:.1} TFLOP/s, {:.2}x the two launches", 2.5 * fwd_flop / (t * 1e-6) / 1e12, times[1][1] / t);
        rows.push(timing_row("attention-bench", "mma bwd (delta; dq+dkv one launch)", &shape, Some(t), rate));
    }
    Ok(rows)
}

/// The gated GELU's backward as one [`alpha_cuda::kernels::fused::Chain`] against the four pointwise launches
/// it replaces (`dh·up`, `dh·act`, `gelu'(gate)`, their product): both outputs bit for bit.
pub fn fused_chain_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::fused::Chain;
    use alpha_cuda::kernels::pointwise::{Body, Operand, Pointwise};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    use alpha_ir::{Binary, Unary};
    arena.reset();
    let n = 1000 * 1408 + 3;
    let inputs: Vec<Vec<f32>> = (0..4).map(|_| rng.vec(n, 3.0)).collect();
    let bufs = inputs
        .iter()
        .map(|x| {
            let b = arena.alloc_n::<f32>(n)?;
            arena.upload(b, x)?;
            Ok(b)
        })
        .collect::<Result<Vec<_>>>()?;
    let outs = (0..6)
        .map(|_| {
            let b = arena.alloc_n::<f32>(n)?;
            arena.fill_u32(b, NAN_BITS)?;
            Ok(b)
        })
        .collect::<Result<Vec<_>>>()?;
    let (blocks, threads) = alpha_cuda::kernels::pointwise::grid_blocks(n);
    let cfg = LaunchConfig { grid: (blocks, 1, 1), block: (threads, 1, 1), shared_bytes: 0 };
    let chain = Chain::gated_gelu_backward(n);
    let f = gpu.load(&chain.kernel()?)?;
    let args: Vec<Arg> =
        [outs[0], outs[1], bufs[0], bufs[1], bufs[2], bufs[3]].iter().map(|b| Arg::U64(b.ptr)).collect();
    gpu.launch(&f, cfg, &args)?;
    // The separate launches: t0 = dh·up, out2 = dh·act, t1 = gelu'(gate), out3 = t0·t1.
    let one = |body: Body, out: u64, ins: &[u64]| -> Result<()> {
        let pw = Pointwise {
            shape: vec![n],
            out: Operand::contiguous(alpha_ir::DType::F32, &[n]),
            ins: ins.iter().map(|_| Operand::contiguous(alpha_ir::DType::F32, &[n])).collect(),
            body,
        };
        let f = gpu.load(&pw.kernel()?)?;
        let mut a = vec![Arg::U64(out)];
        a.extend(ins.iter().map(|&p| Arg::U64(p)));
        gpu.launch(&f, cfg, &a)
    };
    one(Body::Binary(Binary::Mul), outs[4].ptr, &[bufs[0].ptr, bufs[1].ptr])?;
    one(Body::Binary(Binary::Mul), outs[2].ptr, &[bufs[0].ptr, bufs[2].ptr])?;
    one(Body::Unary(Unary::GeluGrad), outs[5].ptr, &[bufs[3].ptr])?;
    one(Body::Binary(Binary::Mul), outs[3].ptr, &[outs[4].ptr, outs[5].ptr])?;
    // The same chain storing both outputs as bf16 (the casts that alone read them): each must
    // be the separate launches' f32 result rounded to nearest even.
    let chain16 = Chain { bf16: vec![true, true], ..chain.clone() };
    let f16 = gpu.load(&chain16.kernel()?)?;
    let halves = (0..2).map(|_| arena.alloc_n::<u16>(n)).collect::<Result<Vec<_>>>()?;
    let args16: Vec<Arg> =
        [halves[0], halves[1], bufs[0], bufs[1], bufs[2], bufs[3]].iter().map(|b| Arg::U64(b.ptr)).collect();
    gpu.launch(&f16, cfg, &args16)?;
    // One row per output: how many elements differ from what they must equal bit for bit.
    let row = |name: String, differ: usize, what: &str| Row {
        family: "fusion".into(),
        name,
        shape: format!("n{n}"),
        max_abs: differ as f64,
        rel: differ as f64,
        tol: 0.0,
        pass: differ == 0,
        median_us: None,
        rate: format!("elements differing from {what}"),
    };
    let mut rows = vec![];
    for (name, half, separate) in [("d_up as bf16", halves[0], outs[2]), ("d_gate as bf16", halves[1], outs[3])] {
        let got: Vec<u16> = arena.download(half, n)?;
        let want: Vec<f32> = arena.download(separate, n)?;
        let differ = got.iter().zip(&want).filter(|(g, w)| **g != half::bf16::from_f32(**w).to_bits()).count();
        rows.push(row(format!("{} {name}", chain16.name()), differ, "the launches' result rounded to bf16"));
    }
    for (name, fused, separate) in
        [("d_up = dh·act", outs[0], outs[2]), ("d_gate = dh·up·gelu'(gate)", outs[1], outs[3])]
    {
        let a: Vec<f32> = arena.download(fused, n)?;
        let b: Vec<f32> = arena.download(separate, n)?;
        let differ = a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
        rows.push(row(format!("{} {name}", chain.name()), differ, "the separate launches"));
    }
    Ok(rows)
}

/// Split-K against the tile heuristic alone, on Coppelius's products whose K is long (one and
/// 16 contexts a step, f32 operands as the training step reads them): 512 sampled outputs of
/// the split launch pair against the f64 reference, the two runs bit for bit, and (with
/// `opts.bench`) µs of each way.
pub fn gemm_split_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let shapes: &[(&str, u32, u32, u32)] = &[
        ("rr", 1024, 512, 12288),
        ("cr", 512, 1408, 4096),
        ("cr", 512, 1408, 16384),
        ("cr", 512, 512, 16384),
        ("cr", 1408, 512, 16384),
        ("cr", 512, 1536, 16384),
    ];
    for (&(lay, m, n, k), wgmma) in shapes.iter().flat_map(|s| [(s, false), (s, true)]) {
        arena.reset();
        let base = if wgmma { spec_of(lay, Input::F32).wgmma() } else { spec_of(lay, Input::F32) };
        let sh = GemmShape::packed(&base, m, n, k);
        let (na, nb, nc) = sh.extents(&base);
        let (a, b) = (rng.vec(na, 1.0), rng.vec(nb, 1.0));
        let (ab, bb) = (upload_operand(arena, Input::F32, &a)?, upload_operand(arena, Input::F32, &b)?);
        let cb = arena.alloc_n::<f32>(nc)?;
        let partials = arena.alloc_n::<f32>(nc * 8)?;
        let tiled = GemmSpec { tile: sh.tile(), ..base };
        let f_tiled = gpu.load(&tiled.kernel())?;
        let f_part = gpu.load(&base.kernel())?;
        let t_tiled = if opts.bench {
            Some(median(gpu.time(opts.warmup, opts.reps, || {
                gemm::launch(gpu, &f_tiled, &tiled, &sh, ab.ptr, bb.ptr, cb.ptr, cb.ptr)
            })?))
        } else {
            None
        };
        // The heuristic's split, and with `bench` the other powers of two for comparison.
        let chosen = sh.split_k(base.bk);
        let mut candidates = vec![chosen];
        if opts.bench {
            candidates.extend([2u32, 4, 8].into_iter().filter(|&s| s != chosen && k.is_multiple_of(base.bk * s)));
        }
        for splits in candidates {
            // Arena buffers are 16-byte aligned.
            let width = gemm::splitk_reduce_width(m * n, true);
            let f_reduce = gpu.load(&gemm::splitk_reduce_kernel(&base, splits, m * n, width))?;
            let part = sh.split(&base, splits);
            let split_run = || -> Result<()> {
                gemm::launch(gpu, &f_part, &base, &part, ab.ptr, bb.ptr, partials.ptr, partials.ptr)?;
                gemm::launch_splitk_reduce(gpu, &f_reduce, m * n, width, [cb.ptr, cb.ptr, partials.ptr])
            };
            arena.fill_u32(cb, NAN_BITS)?;
            split_run()?;
            let out: Vec<f32> = arena.download(cb, nc)?;
            split_run()?;
            let again: Vec<f32> = arena.download(cb, nc)?;
            let repeat = out.iter().zip(&again).all(|(x, y)| x.to_bits() == y.to_bits());
            let (mut worst, mut max_abs) = (0.0f64, 0.0f64);
            for _ in 0..512 {
                let (i, j) = (rng.below(m) as usize, rng.below(n) as usize);
                let (acc, mag) = gemm::reference_at(&base, &sh, &a, &b, 0, i, j);
                let got = out[i * n as usize + j] as f64;
                let d = if got.is_finite() { (got - acc).abs() } else { f64::INFINITY };
                max_abs = max_abs.max(d);
                worst = worst.max(d / (mag + 1e-30));
            }
            let t_split = if opts.bench { Some(median(gpu.time(opts.warmup, opts.reps, split_run)?)) } else { None };
            let tflops = |us: f64| sh.flops() / (us * 1e-6) / 1e12;
            let mark = if splits == chosen { " (chosen)" } else { "" };
            rows.push(Row {
                family: "gemm-splitk".into(),
                name: format!("{} split {splits}{mark} vs {:?}", base.name(), sh.tile()),
                shape: format!("m{m} n{n} k{k}"),
                max_abs,
                rel: worst,
                tol: 1e-5,
                pass: worst <= 1e-5 && repeat,
                median_us: t_split,
                rate: match (t_split, t_tiled) {
                    (Some(s), Some(t)) => {
                        format!("{:.1} TFLOP/s split, tiles alone {t:.1}us {:.1} TFLOP/s", tflops(s), tflops(t))
                    }
                    _ if repeat => "repeats bit for bit".into(),
                    _ => "RUNS DIFFER".into(),
                },
            });
        }
    }
    Ok(rows)
}

/// The largest error of `got` (an m × n row-major product) at 256 sampled outputs against
/// `want(i, j)` = (the f64 reference, Σ|a·b| its error is relative to); a non-finite output
/// counts as infinite.
fn worst_sampled(rng: &mut Rng, m: u32, n: u32, got: &[f32], want: impl Fn(usize, usize) -> (f64, f64)) -> f64 {
    let mut worst = 0.0f64;
    for _ in 0..256 {
        let (i, j) = (rng.below(m) as usize, rng.below(n) as usize);
        let (acc, mag) = want(i, j);
        let x = got[i * n as usize + j] as f64;
        worst = worst.max(if x.is_finite() { (x - acc).abs() / (mag + 1e-30) } else { f64::INFINITY });
    }
    worst
}

/// A row for a product checked against the f64 reference at sampled outputs (`worst`, relative
/// to Σ|a·b|, within 1e-5) and run twice (`repeat` outputs differing), with its µs and what it
/// was timed against where benched.
fn sampled_row(
    family: &str,
    name: String,
    shape: String,
    worst: f64,
    repeat: usize,
    timing: Option<(f64, String)>,
) -> Row {
    Row {
        family: family.into(),
        name,
        shape,
        max_abs: repeat as f64,
        rel: worst,
        tol: 1e-5,
        pass: repeat == 0 && worst <= 1e-5,
        median_us: timing.as_ref().map(|t| t.0),
        rate: match timing {
            Some((_, t)) => t,
            None => format!("{repeat} differ between runs"),
        },
    }
}

/// Split-K in parts that may differ by a K step ([`GemmSpec::uneven_split`], the TMA engine),
/// summed by the reduction launch: 256 sampled outputs against the f64 reference, two runs bit
/// for bit. Sixteen contexts' weight gradients of 44 tiles (3 parts, where equal parts took 8)
/// and ragged shapes whose K steps do not divide evenly. With `opts.bench`, µs against the
/// equal parts [`GemmShape::split_k`] chooses.
pub fn gemm_uneven_split_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let cases: &[(&str, u32, u32, u32, u32)] = &[
        ("cr", 512, 1408, 16384, 3),
        ("cr", 1408, 512, 16384, 3),
        ("cr", 200, 136, 19 * 64, 3),
        ("rr", 136, 200, 13 * 64, 5),
        ("rc", 264, 72, 23 * 64, 7),
    ];
    for &(lay, m, n, k, splits) in cases {
        arena.reset();
        let base = spec_of(lay, Input::Bf16).tma();
        let parts = GemmSpec { uneven_split: true, ..base };
        let sh = GemmShape::packed(&base, m, n, k);
        let part = sh.split_uneven(splits);
        let (na, nb, nc) = sh.extents(&base);
        let (a, b) = (rng.vec(na, 1.0), rng.vec(nb, 1.0));
        let (ab, bb) = (upload_operand(arena, Input::Bf16, &a)?, upload_operand(arena, Input::Bf16, &b)?);
        let cb = arena.alloc_n::<f32>(nc)?;
        let partials = arena.alloc_n::<f32>(nc * 8)?;
        let width = gemm::splitk_reduce_width(m * n, true);
        let f_parts = gpu.load(&parts.kernel())?;
        let extras = Extras { maps: tma_maps(arena, &parts, &part, ab.ptr, bb.ptr)?, ..Extras::default() };
        let f_reduce = gpu.load(&gemm::splitk_reduce_kernel(&base, splits, m * n, width))?;
        let run = || -> Result<()> {
            gemm::launch_with(gpu, &f_parts, &parts, &part, [ab.ptr, bb.ptr, partials.ptr, partials.ptr], extras)?;
            gemm::launch_splitk_reduce(gpu, &f_reduce, m * n, width, [cb.ptr, cb.ptr, partials.ptr])
        };
        let mut outs: Vec<Vec<f32>> = Vec::new();
        for _ in 0..2 {
            arena.fill_u32(cb, NAN_BITS)?;
            run()?;
            outs.push(arena.download(cb, nc)?);
        }
        let repeat = mismatches(&outs[0], &outs[1]);
        let worst = worst_sampled(rng, m, n, &outs[0], |i, j| gemm::reference_at(&base, &sh, &a, &b, 0, i, j));
        let timing = if opts.bench {
            let t = median(gpu.time(opts.warmup, opts.reps, run)?);
            // The equal parts the power-of-two heuristic takes, on the same engine.
            let even = sh.split_k(base.bk);
            let epart = sh.split(&base, even);
            let f_even = gpu.load(&base.kernel())?;
            let emaps = Extras { maps: tma_maps(arena, &base, &epart, ab.ptr, bb.ptr)?, ..Extras::default() };
            let f_ered = gpu.load(&gemm::splitk_reduce_kernel(&base, even, m * n, width))?;
            let t_even = median(gpu.time(opts.warmup, opts.reps, || {
                gemm::launch_with(gpu, &f_even, &base, &epart, [ab.ptr, bb.ptr, partials.ptr, partials.ptr], emaps)?;
                gemm::launch_splitk_reduce(gpu, &f_ered, m * n, width, [cb.ptr, cb.ptr, partials.ptr])
            })?);
            Some((t, format!("{even} equal parts {t_even:.1}us")))
        } else {
            None
        };
        rows.push(sampled_row(
            "gemm-kparts",
            format!("{} {splits} parts + reduction", parts.name()),
            format!("m{m} n{n} k{k}"),
            worst,
            repeat,
            timing,
        ));
    }
    Ok(rows)
}

/// The paired product ([`GemmSpec::k_pair`]: `A₁·B₁ + A₂·B₂` in one accumulator over both K)
/// against the f64 reference of the sum, 256 sampled outputs, and two runs bit for bit; with
/// `opts.bench`, µs against the two launches it replaces (the plain product, then the second
/// adding it as its residual). A gated unit's input gradient at sixteen contexts, and a ragged
/// shape.
pub fn gemm_pair_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (stages, (m, n, k)) in [(3, (16384, 512, 1408)), (0, (200, 136, 192))] {
        arena.reset();
        let plain = GemmSpec { stages, ..GemmSpec::new(Layout::RowMajor, Layout::ColMajor, Input::Bf16).tma() };
        let add = GemmSpec { epilogue: Epilogue::AddResidual, ..plain };
        let paired = GemmSpec { k_pair: true, ..plain };
        let sh = GemmShape::packed(&plain, m, n, k);
        let (na, nb, nc) = sh.extents(&plain);
        let [a1, b1, a2, b2] = [na, nb, na, nb].map(|len| rng.vec(len, 1.0));
        let up = |x: &[f32]| upload_operand(arena, Input::Bf16, x);
        let (a1b, b1b, a2b, b2b) = (up(&a1)?, up(&b1)?, up(&a2)?, up(&b2)?);
        let maps1 = tma_maps(arena, &plain, &sh, a1b.ptr, b1b.ptr)?.expect("a TMA launch");
        let maps2 = tma_maps(arena, &plain, &sh, a2b.ptr, b2b.ptr)?.expect("a TMA launch");
        let (c1, c) = (arena.alloc_n::<f32>(nc)?, arena.alloc_n::<f32>(nc)?);
        let f = gpu.load(&paired.kernel())?;
        let whole = GemmShape { k: 2 * k, ..sh };
        let extras = Extras { maps: Some(maps2), first_maps: Some(maps1), ..Extras::default() };
        let run = || gemm::launch_with(gpu, &f, &paired, &whole, [a2b.ptr, b2b.ptr, c.ptr, c.ptr], extras);
        let mut outs: Vec<Vec<f32>> = Vec::new();
        for _ in 0..2 {
            arena.fill_u32(c, NAN_BITS)?;
            run()?;
            outs.push(arena.download(c, nc)?);
        }
        let repeat = mismatches(&outs[0], &outs[1]);
        let worst = worst_sampled(rng, m, n, &outs[0], |i, j| {
            let (s1, m1) = gemm::reference_at(&plain, &sh, &a1, &b1, 0, i, j);
            let (s2, m2) = gemm::reference_at(&plain, &sh, &a2, &b2, 0, i, j);
            (s1 + s2, m1 + m2)
        });
        let timing = if opts.bench {
            let (fp, fa) = (gpu.load(&plain.kernel())?, gpu.load(&add.kernel())?);
            let two = median(gpu.time(opts.warmup, opts.reps, || {
                let e1 = Extras { maps: Some(maps1), ..Extras::default() };
                gemm::launch_with(gpu, &fp, &plain, &sh, [a1b.ptr, b1b.ptr, c1.ptr, c1.ptr], e1)?;
                let e2 = Extras { maps: Some(maps2), ..Extras::default() };
                gemm::launch_with(gpu, &fa, &add, &sh, [a2b.ptr, b2b.ptr, c.ptr, c1.ptr], e2)
            })?);
            Some((median(gpu.time(opts.warmup, opts.reps, run)?), format!("two launches {two:.1}us")))
        } else {
            None
        };
        rows.push(sampled_row(
            "gemm-pair",
            format!("{} = A1·B1 + A2·B2", paired.name()),
            format!("m{m} n{n} k{k}+{k}"),
            worst,
            repeat,
            timing,
        ));
    }
    Ok(rows)
}

/// The multi-tensor cast ([`alpha_cuda::kernels::multi::cast_kernel`]) over tensors of awkward lengths at
/// scattered offsets: every element the host's round-to-nearest-even bf16, bit for bit, and
/// nothing outside the destinations written.
pub fn cast_multi_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::multi;
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    arena.reset();
    let lens = [1usize, 8191, 8192, 8193, 100_003, 512 * 1536];
    // Each tensor starts 16-byte aligned (as the planner places parameters); a destination is
    // followed by at least one poisoned guard element.
    let src_span = |l: usize| l.next_multiple_of(4);
    let dst_span = |l: usize| (l + 1).next_multiple_of(4);
    let total_src: usize = lens.iter().map(|&l| src_span(l)).sum();
    let src_host = rng.vec(total_src, 50.0);
    let src = arena.alloc_n::<f32>(total_src)?;
    arena.upload(src, &src_host)?;
    // Destinations with a guard element between them, poisoned.
    let total_dst: usize = lens.iter().map(|&l| dst_span(l)).sum();
    let dst = arena.alloc_n::<u16>(total_dst)?;
    arena.upload(dst, &vec![0x7FC1u16; total_dst])?;
    let base = arena.base();
    let (mut s_at, mut d_at) = (0usize, 0usize);
    let mut tensors = vec![];
    for &l in &lens {
        tensors.push(((src.ptr - base) as usize + s_at * 4, (dst.ptr - base) as usize + d_at * 2, l));
        s_at += src_span(l);
        d_at += dst_span(l);
    }
    let (table_bytes, chunks) = multi::cast_table(&tensors)?;
    let words: Vec<u32> = table_bytes.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
    let table = arena.alloc_n::<u32>(words.len())?;
    arena.upload(table, &words)?;
    let f = gpu.load(&multi::cast_kernel())?;
    let cfg = LaunchConfig { grid: (chunks as u32, 1, 1), block: (multi::THREADS, 1, 1), shared_bytes: 0 };
    gpu.launch(&f, cfg, &multi::cast_arguments([base, table.ptr].map(Arg::U64)))?;
    let got: Vec<u16> = arena.download(dst, total_dst)?;
    let (mut wrong, mut s_at, mut d_at) = (0usize, 0usize, 0usize);
    for &l in &lens {
        for j in 0..l {
            wrong += (got[d_at + j] != half::bf16::from_f32(src_host[s_at + j]).to_bits()) as usize;
        }
        wrong += got[d_at + l..d_at + dst_span(l)].iter().filter(|&&g| g != 0x7FC1).count();
        s_at += src_span(l);
        d_at += dst_span(l);
    }
    Ok(vec![Row {
        family: "cast-multi".into(),
        name: "cast_multi_f32_bf16".into(),
        shape: format!("{} tensors, {total_src} elements", lens.len()),
        max_abs: wrong as f64,
        rel: wrong as f64,
        tol: 0.0,
        pass: wrong == 0,
        median_us: None,
        rate: "elements differing from round-to-nearest-even, guards included".into(),
    }])
}

/// LayerNorm's parameter gradients (pass 1, the band partials; pass 2, the fold of the bands,
/// alone and run beside the input gradient's rows) against the host doing the same f32
/// operations in the CPU reference's order, bit for bit; and that input gradient equal to the
/// kernel's alone.
/// Shapes: 16 contexts of Coppelius (1,024 bands, sixteen rounds of pass 2), a ragged one (63
/// bands, a last band of 8 rows, 100 columns: partial blocks and warps), one band.
pub fn layernorm_param_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::layernorm::{self, Norm};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    let mut rows = vec![];
    for (r, c) in [(16384usize, 512usize), (1000, 100), (16, 512)] {
        arena.reset();
        let n = Norm { rows: r, c };
        let x = rng.vec(r * c, 2.0);
        let dy = rng.vec(r * c, 1.0);
        let mean = rng.vec(r, 0.5);
        let rstd: Vec<f32> = (0..r).map(|_| 0.5 + rng.uniform()).collect();
        let [xb, dyb, mb, rb] = [&x, &dy, &mean, &rstd].map(|v| {
            let b = arena.alloc_n::<f32>(v.len()).expect("arena");
            arena.upload(b, v).expect("upload");
            b
        });
        let partials = arena.alloc_n::<f32>(n.scratch_floats())?;
        let dg = arena.alloc_n::<f32>(c)?;
        let db = arena.alloc_n::<f32>(c)?;
        arena.fill_u32(dg, NAN_BITS)?;
        arena.fill_u32(db, NAN_BITS)?;
        let p1 = gpu.load(&layernorm::backward_partials_kernel(n))?;
        let p2 = gpu.load(&layernorm::backward_finish_kernel(n))?;
        let cfg1 = LaunchConfig {
            grid: ((c as u32).div_ceil(layernorm::THREADS), n.bands() as u32, 1),
            block: (layernorm::THREADS, 1, 1),
            shared_bytes: 0,
        };
        let (grid, block) = layernorm::finish_launch(n);
        let cfg2 = LaunchConfig { grid, block, shared_bytes: 0 };
        let a1 = layernorm::partials_arguments([partials, xb, mb, rb, dyb].map(|b| Arg::U64(b.ptr)));
        let a2 = layernorm::finish_arguments([dg, db, partials].map(|b| Arg::U64(b.ptr)));
        let run1 = || gpu.launch(&p1, cfg1, &a1);
        let run2 = || gpu.launch(&p2, cfg2, &a2);
        run1()?;
        run2()?;
        let got_g: Vec<f32> = arena.download(dg, c)?;
        let got_b: Vec<f32> = arena.download(db, c)?;
        // The reference order: each band's rows in order, then the bands in order from +0.
        let (mut want_g, mut want_b) = (vec![0.0f32; c], vec![0.0f32; c]);
        for band in 0..n.bands() {
            let (mut bg, mut bb) = (vec![0.0f32; c], vec![0.0f32; c]);
            for row in band * layernorm::BAND..((band + 1) * layernorm::BAND).min(r) {
                for j in 0..c {
                    let d = dy[row * c + j];
                    bg[j] += d * (x[row * c + j] - mean[row]) * rstd[row];
                    bb[j] += d;
                }
            }
            for j in 0..c {
                want_g[j] += bg[j];
                want_b[j] += bb[j];
            }
        }
        let mut wrong = mismatches(&got_g, &want_g) + mismatches(&got_b, &want_b);
        // The fold run beside the rows of the input gradient: the same gain and bias gradients,
        // and the same dx as the input-gradient kernel alone.
        let gain_h = rng.vec(c, 1.0);
        let gain = arena.alloc_n::<f32>(c)?;
        arena.upload(gain, &gain_h)?;
        let [dx_alone, dx_fold, dg2, db2] = poisoned(arena, [r * c, r * c, c, c])?;
        // The input gradient's arguments over these x, gain, mean, rstd and dy.
        let dx_args = |dx: u64, residual: Option<u64>, copy: Option<u64>, passes: layernorm::DxPasses<u64>| {
            let passes = passes.map(Arg::U64);
            let rows = [dx, xb.ptr, gain.ptr, mb.ptr, rb.ptr, dyb.ptr].map(Arg::U64);
            layernorm::dx_arguments(rows, residual.map(Arg::U64), copy.map(Arg::U64), passes)
        };
        let alone = gpu.load(&layernorm::backward_dx_kernel(n))?;
        let cfg = LaunchConfig { grid: (r as u32, 1, 1), block: (layernorm::THREADS, 1, 1), shared_bytes: 0 };
        gpu.launch(&alone, cfg, &dx_args(dx_alone.ptr, None, None, layernorm::DxPasses::Apart))?;
        let folding = gpu.load(&layernorm::backward_dx_kernel_folding(n, false))?;
        let (grid, block) = layernorm::dx_fold_launch(n);
        let fold = layernorm::DxPasses::Fold { dgain: dg2.ptr, dbias: db2.ptr, partials: partials.ptr };
        let cfg = LaunchConfig { grid, block, shared_bytes: 0 };
        gpu.launch(&folding, cfg, &dx_args(dx_fold.ptr, None, None, fold))?;
        let [a, b] = [dx_alone, dx_fold].map(|x| arena.download::<f32>(x, r * c).expect("download"));
        wrong += mismatches(&a, &b);
        // With a residual added and the sum's bf16 copy stored too (both grids): the sum as the
        // adding kernel stores it, and its copy rounded.
        let res = arena.alloc_n::<f32>(r * c)?;
        arena.upload(res, &rng.vec(r * c, 1.0))?;
        let want = arena.alloc_n::<f32>(r * c)?;
        let adding = gpu.load(&layernorm::backward_dx_kernel_adding(n, true))?;
        let cfg_rows = LaunchConfig { grid: (r as u32, 1, 1), block: (layernorm::THREADS, 1, 1), shared_bytes: 0 };
        gpu.launch(&adding, cfg_rows, &dx_args(want.ptr, Some(res.ptr), None, layernorm::DxPasses::Apart))?;
        let want_sum: Vec<f32> = arena.download(want, r * c)?;
        // The row kernel's time (with the residual and the copy), beside the fused one's below.
        let mut copying_us = None;
        for fold in [false, true] {
            let (sum, copy) = (arena.alloc_n::<f32>(r * c)?, arena.alloc_n::<u16>(r * c)?);
            arena.fill_u32(sum, NAN_BITS)?;
            arena.fill_u32(copy, NAN_BITS)?;
            let f = gpu.load(&layernorm::backward_dx_kernel_copying(n, true, fold))?;
            let (passes, cfg) = match fold {
                true => (layernorm::DxPasses::Fold { dgain: dg2.ptr, dbias: db2.ptr, partials: partials.ptr }, cfg),
                false => (layernorm::DxPasses::Apart, cfg_rows),
            };
            let args = dx_args(sum.ptr, Some(res.ptr), Some(copy.ptr), passes);
            gpu.launch(&f, cfg, &args)?;
            wrong += mismatches(&arena.download::<f32>(sum, r * c)?, &want_sum);
            let got: Vec<u16> = arena.download(copy, r * c)?;
            wrong += got.iter().zip(&want_sum).filter(|(h, x)| **h != half::bf16::from_f32(**x).to_bits()).count();
            if opts.bench && !fold {
                copying_us = Some(median(gpu.time(opts.warmup, opts.reps, || gpu.launch(&f, cfg, &args))?));
            }
        }
        wrong +=
            mismatches(&arena.download::<f32>(dg2, c)?, &want_g) + mismatches(&arena.download::<f32>(db2, c)?, &want_b);
        // Pass 2 of two LayerNorms in one launch (a table of device addresses from base 0):
        // the same gain and bias gradients for both.
        let multi = gpu.load(&layernorm::backward_finish_multi_kernel(n))?;
        let outs = poisoned(arena, [c; 4])?;
        let table: Vec<u64> = vec![outs[0].ptr, outs[1].ptr, partials.ptr, outs[2].ptr, outs[3].ptr, partials.ptr];
        let tb_ = arena.alloc_n::<u8>(table.len() * 8)?;
        let table_bytes: Vec<u8> = table.iter().flat_map(|p| p.to_le_bytes()).collect();
        arena.upload(tb_, &table_bytes)?;
        let (grid_m, block_m) = layernorm::finish_multi_launch(n, 2);
        let cfg_m = LaunchConfig { grid: grid_m, block: block_m, shared_bytes: 0 };
        gpu.launch(&multi, cfg_m, &[Arg::U64(0), Arg::U64(tb_.ptr)])?;
        for (o, want) in outs.iter().zip([&want_g, &want_b, &want_g, &want_b]) {
            wrong += mismatches(&arena.download::<f32>(*o, c)?, want);
        }
        // The input gradient and pass 1 in one launch (plain, and adding with the bf16 copy),
        // then pass 2: the same dx, sum, copy, gain and bias gradients.
        let (grid_p, block_p) = layernorm::dx_partials_launch(n);
        let cfg_p = LaunchConfig { grid: grid_p, block: block_p, shared_bytes: 0 };
        let mut fused_us = None;
        for (residual, copy16) in [(false, false), (true, true)] {
            let [out, parts, dg3, db3] = poisoned(arena, [r * c, n.scratch_floats(), c, c])?;
            let copy = arena.alloc_n::<u16>(r * c)?;
            arena.fill_u32(copy, NAN_BITS)?;
            let f = gpu.load(&layernorm::backward_dx_partials_kernel(n, residual, copy16))?;
            let passes = layernorm::DxPasses::Partials(parts.ptr);
            let args = dx_args(out.ptr, residual.then_some(res.ptr), copy16.then_some(copy.ptr), passes);
            let run = || gpu.launch(&f, cfg_p, &args);
            run()?;
            gpu.launch(&p2, cfg2, &layernorm::finish_arguments([dg3, db3, parts].map(|b| Arg::U64(b.ptr))))?;
            let got: Vec<f32> = arena.download(out, r * c)?;
            if residual {
                wrong += mismatches(&got, &want_sum);
                let got16: Vec<u16> = arena.download(copy, r * c)?;
                wrong +=
                    got16.iter().zip(&want_sum).filter(|(h, x)| **h != half::bf16::from_f32(**x).to_bits()).count();
                if opts.bench {
                    fused_us = Some(median(gpu.time(opts.warmup, opts.reps, run)?));
                }
            } else {
                wrong += mismatches(&got, &a);
            }
            wrong += mismatches(&arena.download::<f32>(dg3, c)?, &want_g)
                + mismatches(&arena.download::<f32>(db3, c)?, &want_b);
        }
        let times = if opts.bench {
            let t1 = median(gpu.time(opts.warmup, opts.reps, run1)?);
            let t2 = median(gpu.time(opts.warmup, opts.reps, run2)?);
            Some((t1, t2))
        } else {
            None
        };
        let what = "layernorm_bwd_params(+finish, +finish_multi, +dx_fold, +dx_add_bf16, +dx_partials)";
        let mut row = exact_row("layernorm", what, &format!("rows{r} c{c}"), wrong, 2 * c);
        if let Some((t1, t2)) = times {
            row.median_us = Some(t1 + t2);
            row.rate = format!("{row_rate}; pass 1 {t1:.1} µs, pass 2 {t2:.1} µs", row_rate = row.rate);
            if let (Some(tf), Some(td)) = (fused_us, copying_us) {
                row.rate = format!("{}; dx_add_bf16 {td:.1} µs + pass 1, fused {tf:.1} µs", row.rate);
            }
        }
        rows.push(row);
    }
    Ok(rows)
}

/// The vectorized pointwise kernels (four elements a thread) against the scalar ones, bit for
/// bit, on Coppelius's shapes: the q/k/v permute, the attention output's permute-and-cast,
/// the q/k/v gradients' permute-and-cast back, a bf16 → f32 permute, and the gated product
/// stored as bf16. Inputs include a rounding tie and the largest finite f32. Timed with `bench`.
pub fn pointwise_vector_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::pointwise::{contiguous_strides, Body, Operand, Pointwise};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    use alpha_ir::{Binary, DType};
    let (b, t) = if opts.bench { (16usize, 1024usize) } else { (2, 64) };
    let (h, d) = (8usize, 64usize);
    let permute = |shape: &[usize], perm: &[usize], from: DType, to: DType| {
        let xs = contiguous_strides(shape);
        let os: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        Pointwise {
            out: Operand::contiguous(to, &os),
            ins: vec![Operand { dtype: from, strides: perm.iter().map(|&p| xs[p]).collect() }],
            shape: os,
            body: Body::Copy,
        }
    };
    let gated = [b * t, 1408];
    let cases = [
        ("qkv permute", permute(&[b, t, 3, h, d], &[2, 0, 3, 1, 4], DType::F32, DType::F32)),
        ("o permute+cast", permute(&[b, h, t, d], &[0, 2, 1, 3], DType::F32, DType::BF16)),
        ("dqkv permute+cast", permute(&[3, b, h, t, d], &[1, 3, 0, 2, 4], DType::F32, DType::BF16)),
        ("bf16 → f32 permute", permute(&[b, h, t, d], &[0, 2, 1, 3], DType::BF16, DType::F32)),
        (
            "gated mul → bf16",
            Pointwise {
                out: Operand::contiguous(DType::BF16, &gated),
                ins: vec![Operand::contiguous(DType::F32, &gated); 2],
                shape: gated.to_vec(),
                body: Body::Binary(Binary::Mul),
            },
        ),
    ];
    let mut rows = vec![];
    for (what, pw) in cases {
        arena.reset();
        if !pw.vectorizable() {
            rows.push(exact_row("pointwise", what, "not vectorizable", 1, 1));
            continue;
        }
        let n = pw.numel();
        let words = |dt: DType| (n * dt.size()).div_ceil(4);
        let ins: Vec<alpha_cuda::runtime::driver::Buf> = pw
            .ins
            .iter()
            .map(|o| {
                let mut bits: Vec<u32> = rng.vec(words(o.dtype), 3.0).iter().map(|x| x.to_bits()).collect();
                bits[0] = (1.0f32 + 1.0 / 256.0).to_bits();
                bits[1] = f32::MAX.to_bits();
                let buf = arena.alloc_n::<u32>(bits.len())?;
                arena.upload(buf, &bits)?;
                Ok(buf)
            })
            .collect::<Result<_>>()?;
        let out_words = words(pw.out.dtype);
        let outs = [arena.alloc_n::<u32>(out_words)?, arena.alloc_n::<u32>(out_words)?];
        let mut got = vec![];
        let mut times = vec![];
        for (vector, out) in [false, true].into_iter().zip(outs) {
            arena.fill_u32(out, NAN_BITS)?;
            let f = gpu.load(&pw.kernel_with(vector)?)?;
            let (blocks, threads) = pw.grid_with(vector);
            let cfg = LaunchConfig { grid: (blocks, 1, 1), block: (threads, 1, 1), shared_bytes: 0 };
            let args: Vec<Arg> = std::iter::once(out.ptr).chain(ins.iter().map(|x| x.ptr)).map(Arg::U64).collect();
            gpu.launch(&f, cfg, &args)?;
            got.push(arena.download::<u32>(out, out_words)?);
            if opts.bench {
                times.push(median(gpu.time(opts.warmup, opts.reps, || gpu.launch(&f, cfg, &args))?));
            }
        }
        let wrong = got[0].iter().zip(&got[1]).filter(|(x, y)| x != y).count();
        let mut row = exact_row("pointwise", what, &format!("{:?}", pw.shape), wrong, out_words);
        if let [scalar, vector] = times[..] {
            row.median_us = Some(vector);
            row.rate = format!("scalar {scalar:.1} µs → four a thread {vector:.1} µs");
        }
        rows.push(row);
    }
    Ok(rows)
}

/// q or k turned by the rotary at every row's position (`rows` rows of `d`, positions cycling
/// with period `t`), with the attention kernels' own f32 arithmetic ([`attention::rotate_pairs`]:
/// separately rounded products, then the sum), then rounded to bf16.
fn rotated_bf16(x: &[f32], tab: &[f32], t: usize, d: usize) -> Vec<u16> {
    let half = d / 2;
    let mut out = vec![0u16; x.len()];
    for (r, row) in x.chunks_exact(d).enumerate() {
        let pos = r % t;
        for i in 0..half {
            let (c, s) = (tab[pos * half + i], tab[t * half + pos * half + i]);
            let (x1, x2) = (row[i], row[i + half]);
            let o1 = x1 * c - x2 * s;
            let o2 = x1 * s + x2 * c;
            out[r * d + i] = half::bf16::from_f32(o1).to_bits();
            out[r * d + i + half] = half::bf16::from_f32(o2).to_bits();
        }
    }
    out
}

/// The attention kernels taking q, k, v as bf16 (turned beforehand) against the tensor-core
/// kernels turning the f32 tensors on load, Coppelius's options (every turn fused): forward
/// (o, lse) and the one-launch backward (delta, dq, dk, dv; dO copied as bf16 by the delta
/// kernel) bit for bit, at one context and a ragged T; with `opts.bench`, both timed at one and
/// 16 contexts.
pub fn attention_bf16_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    use attention::Dims;
    let base = Dims { b: 1, h: 8, g: 8, t: 1024, d: 64, scale: 0.125, softcap: None };
    let mut cases = vec![(base, false), (Dims { b: 2, h: 3, g: 3, t: 200, ..base }, false)];
    if opts.bench {
        cases.push((base, true));
        cases.push((Dims { b: 16, ..base }, true));
    }
    let mut rows = vec![];
    for (dims, bench) in cases {
        arena.reset();
        let case = AttnCase { dims, q_scale: 4.0, load: [true, true], inverse: [true, true] };
        let d = &dims;
        let (nq, nk, nl) = (d.b * d.h * d.t * d.d, d.b * d.g * d.t * d.d, d.b * d.h * d.t);
        let [qh, kh, vh, doh] = attention_inputs(rng, &case);
        let table = rotary::table(d.t, d.d, 10000.0);
        let tab = upload_f32(arena, &table)?;
        let (v, dout) = (upload_f32(arena, &vh)?, upload_f32(arena, &doh)?);
        let run = AttnRun { gpu, case: &case, q: upload_f32(arena, &qh)?, k: upload_f32(arena, &kh)?, v, dout, tab };
        let upload_u16 = |x: &[u16]| -> Result<u64> {
            let b = arena.alloc_n::<u16>(x.len())?;
            arena.upload(b, x)?;
            Ok(b.ptr)
        };
        let qb = upload_u16(&rotated_bf16(&qh, &table, d.t, d.d))?;
        let kb = upload_u16(&rotated_bf16(&kh, &table, d.t, d.d))?;
        let vb = upload_u16(&vh.iter().map(|&x| half::bf16::from_f32(x).to_bits()).collect::<Vec<_>>())?;
        let bcase = AttnCase { load: [false, false], ..case };
        let bf = AttnRun { gpu, case: &bcase, q: qb, k: kb, v: vb, dout, tab };
        // Outputs: (o, lse, delta, dq, dk, dv), once per way.
        let sizes = [nq, nl, nl, nq, nk, nk];
        let bufs = |arena: &DeviceArena| -> Result<Vec<alpha_cuda::runtime::driver::Buf>> {
            sizes
                .iter()
                .map(|&n| {
                    let b = arena.alloc_n::<f32>(n)?;
                    arena.fill_u32(b, NAN_BITS)?;
                    Ok(b)
                })
                .collect()
        };
        let (mine, theirs) = (bufs(arena)?, bufs(arena)?);
        let fwd_f32 = gpu.load(&attention_mma::forward_kernel_rotating(d, [true, true]))?;
        let fwd_bf16 = gpu.load(&attention_mma::forward_kernel_bf16(d))?;
        let joint_f32 = run.joint_kernels()?;
        let joint_bf16 = [
            gpu.load(&attention_mma::backward_delta_kernel_bf16(d))?,
            gpu.load(&attention_mma::backward_kernel_bf16(d, [true, true]))?,
        ];
        // dO as bf16, written by the delta kernel for the passes.
        let do16 = arena.alloc_n::<u16>(nq)?.ptr;
        // The bf16 way: delta (and dO's copy), then both passes.
        let backward_bf16 = |o: u64, lse: u64, [delta, dq, dk, dv]: [u64; 4]| -> Result<()> {
            let r = &bf;
            let args = attention::delta_arguments([delta, o, r.dout], Some(do16));
            r.launch(&joint_bf16[0], d.grid_q(), attention_mma::block(), &args)?;
            let tensors = [dq, dk, dv, delta, r.q, r.k, r.v, o, lse, r.dout];
            let args = attention::backward_arguments(tensors, Some(do16), vec![r.tab, r.tab], vec![]);
            r.launch(&joint_bf16[1], d.grid_q(), attention_mma::block(), &args)
        };
        let forward = |r: &AttnRun, fwd: &Function, b: &[alpha_cuda::runtime::driver::Buf]| -> Result<()> {
            let a = attention::forward_arguments([b[0].ptr, b[1].ptr, r.q, r.k, r.v], r.tabs(), None);
            r.launch(fwd, d.grid_q(), attention_mma::block(), &a)
        };
        let outs = |b: &[alpha_cuda::runtime::driver::Buf]| [b[2].ptr, b[3].ptr, b[4].ptr, b[5].ptr];
        forward(&run, &fwd_f32, &theirs)?;
        run.backward_joint(&joint_f32, theirs[0].ptr, theirs[1].ptr, outs(&theirs))?;
        forward(&bf, &fwd_bf16, &mine)?;
        backward_bf16(mine[0].ptr, mine[1].ptr, outs(&mine))?;
        let mut differ = 0usize;
        for (a, b) in mine.iter().zip(&theirs) {
            let x: Vec<f32> = arena.download(*a, a.bytes / 4)?;
            let y: Vec<f32> = arena.download(*b, b.bytes / 4)?;
            differ += x.iter().zip(&y).filter(|(p, q)| p.to_bits() != q.to_bits()).count();
        }
        // The merged backward: dq, dk, dv as one bf16 [B, T, 3, H, 64], against the f32
        // gradients permuted and rounded on the host.
        let merged_kernel = gpu.load(&attention_mma::backward_kernel_bf16_merged(d, [true, true]))?;
        let merged = arena.alloc_n::<u16>(3 * nq)?;
        arena.fill_u32(merged, NAN_BITS)?;
        {
            let r = &bf;
            let (o, lse, delta) = (mine[0].ptr, mine[1].ptr, mine[2].ptr);
            let args = attention::delta_arguments([delta, o, r.dout], Some(do16));
            r.launch(&joint_bf16[0], d.grid_q(), attention_mma::block(), &args)?;
            let m = merged.ptr;
            let tensors = [m, m, m, delta, r.q, r.k, r.v, o, lse, r.dout];
            let args = attention::backward_arguments(tensors, Some(do16), vec![r.tab, r.tab], vec![]);
            r.launch(&merged_kernel, d.grid_q(), attention_mma::block(), &args)?;
        }
        let got: Vec<u16> = arena.download(merged, 3 * nq)?;
        let grads: Vec<Vec<f32>> = theirs[3..].iter().map(|b| arena.download(*b, nq)).collect::<Result<_>>()?;
        let (h, t, dd) = (d.h, d.t, d.d);
        let mut merged_differ = 0usize;
        for (sec, gr) in grads.iter().enumerate() {
            for (i, &x) in gr.iter().enumerate() {
                let (bh, rest) = (i / (t * dd), i % (t * dd));
                let (b, hh, tt, e) = (bh / h, bh % h, rest / dd, rest % dd);
                let at = (((b * t + tt) * 3 + sec) * h + hh) * dd + e;
                merged_differ += usize::from(got[at] != half::bf16::from_f32(x).to_bits());
            }
        }
        let shape = attn_shape(&case);
        rows.push(exact_row(
            "attention-bf16",
            "merged bf16 dq|dk|dv = f32 permuted, rounded",
            &shape,
            merged_differ,
            3 * nq,
        ));
        if alpha_cuda::kernels::attention::wgmma::applies(d) {
            let stats = [mine[0].ptr, mine[1].ptr, mine[2].ptr, do16];
            let grads = [mine[3], mine[4], mine[5]];
            rows.extend(wgmma_backward_checks(arena, &bf, &joint_bf16[1], stats, grads, &got, &shape, bench, opts)?);
        }
        // The forward storing o's permuted bf16 copy too: o and lse as before, the copy as o
        // permuted to [B, T, H, 64] and rounded on the host.
        let copying = gpu.load(&attention_mma::forward_kernel_bf16_copying(d))?;
        let (o2, lse2, o16) = (arena.alloc_n::<f32>(nq)?, arena.alloc_n::<f32>(nl)?, arena.alloc_n::<u16>(nq)?);
        for b in [o2, lse2] {
            arena.fill_u32(b, NAN_BITS)?;
        }
        arena.fill_u32(o16, NAN_BITS)?;
        bf.launch(&copying, d.grid_q(), attention_mma::block(), &[o2.ptr, lse2.ptr, bf.q, bf.k, bf.v, o16.ptr])?;
        let o_f32: Vec<f32> = arena.download(theirs[0], nq)?;
        let mut copy_differ = mismatches(&arena.download::<f32>(o2, nq)?, &o_f32)
            + mismatches(&arena.download::<f32>(lse2, nl)?, &arena.download::<f32>(theirs[1], nl)?);
        let got16: Vec<u16> = arena.download(o16, nq)?;
        for (i, &x) in o_f32.iter().enumerate() {
            let (bh, rest) = (i / (t * dd), i % (t * dd));
            let (b, hh, tt, e) = (bh / h, bh % h, rest / dd, rest % dd);
            let at = ((b * t + tt) * h + hh) * dd + e;
            copy_differ += usize::from(got16[at] != half::bf16::from_f32(x).to_bits());
        }
        rows.push(exact_row(
            "attention-bf16",
            "fwd o, lse, o16 = f32, permuted, rounded",
            &shape,
            copy_differ,
            2 * nq + nl,
        ));
        if alpha_cuda::kernels::attention::wgmma::applies(d) {
            rows.push(wgmma_forward_check(arena, &bf, [o2, lse2, o16], &copying, &shape, bench, opts)?);
        }
        let mut rate = format!("{differ} outputs differ from the f32 kernels turning on load");
        let mut median_us = None;
        if bench {
            let fwd_flop = 2.0 * d.b as f64 * d.h as f64 * (d.t as f64).powi(2) * d.d as f64;
            let f0 = median(gpu.time(opts.warmup, opts.reps, || forward(&run, &fwd_f32, &theirs))?);
            let b0 = median(gpu.time(opts.warmup, opts.reps, || {
                run.backward_joint(&joint_f32, theirs[0].ptr, theirs[1].ptr, outs(&theirs))
            })?);
            let f1 = median(gpu.time(opts.warmup, opts.reps, || forward(&bf, &fwd_bf16, &mine))?);
            let b1 = median(gpu.time(opts.warmup, opts.reps, || backward_bf16(mine[0].ptr, mine[1].ptr, outs(&mine)))?);
            median_us = Some(f1 + b1);
            rate = format!(
                "fwd {f1:.1} us ({:.0} TFLOP/s) vs {f0:.1}; bwd {b1:.1} us ({:.0} TFLOP/s) vs {b0:.1}; {rate}",
                fwd_flop / (f1 * 1e-6) / 1e12,
                2.5 * fwd_flop / (b1 * 1e-6) / 1e12
            );
        }
        rows.push(Row {
            family: "attention-bf16".into(),
            name: "bf16 q/k/v vs f32 turned on load".into(),
            shape,
            max_abs: differ as f64,
            rel: differ as f64,
            tol: 0.0,
            pass: differ == 0,
            median_us,
            rate,
        });
    }
    Ok(rows)
}

/// The `wgmma` forward ([`alpha_cuda::kernels::attention::wgmma::forward_kernel`], copying form) against the
/// `mma.sync` one's outputs `[o, lse, o16]` on the same bf16 inputs: the same bits. With
/// `bench`, both timed.
fn wgmma_forward_check(
    arena: &DeviceArena,
    bf: &AttnRun,
    [o, lse, o16]: [alpha_cuda::runtime::driver::Buf; 3],
    mma_copying: &Function,
    shape: &str,
    bench: bool,
    opts: &Options,
) -> Result<Row> {
    let d = &bf.case.dims;
    let (nq, nl) = (d.b * d.h * d.t * d.d, d.b * d.h * d.t);
    let kernel = bf.gpu.load(&alpha_cuda::kernels::attention::wgmma::forward_kernel(d, true))?;
    let (o2, lse2, o16b) = (arena.alloc_n::<f32>(nq)?, arena.alloc_n::<f32>(nl)?, arena.alloc_n::<u16>(nq)?);
    for b in [o2, lse2, o16b] {
        arena.fill_u32(b, NAN_BITS)?;
    }
    let run = |f: &Function, [a, b, c]: [u64; 3]| {
        bf.launch(f, d.grid_q(), attention_mma::block(), &[a, b, bf.q, bf.k, bf.v, c])
    };
    run(&kernel, [o2.ptr, lse2.ptr, o16b.ptr])?;
    let differ = mismatches(&arena.download::<f32>(o2, nq)?, &arena.download::<f32>(o, nq)?)
        + mismatches(&arena.download::<f32>(lse2, nl)?, &arena.download::<f32>(lse, nl)?)
        + arena
            .download::<u16>(o16b, nq)?
            .iter()
            .zip(arena.download::<u16>(o16, nq)?)
            .filter(|(a, b)| **a != *b)
            .count();
    let mut row = exact_row("attention-bf16", "wgmma fwd o, lse, o16 = mma.sync fwd", shape, differ, 2 * nq + nl);
    if bench {
        let fwd_flop = 2.0 * d.b as f64 * d.h as f64 * (d.t as f64).powi(2) * d.d as f64;
        let f0 = median(bf.gpu.time(opts.warmup, opts.reps, || run(mma_copying, [o.ptr, lse.ptr, o16.ptr]))?);
        let f1 = median(bf.gpu.time(opts.warmup, opts.reps, || run(&kernel, [o2.ptr, lse2.ptr, o16b.ptr]))?);
        row.median_us = Some(f1);
        row.rate = format!(
            "fwd {f1:.1} us ({:.0} TFLOP/s) vs mma.sync {f0:.1} us ({:.0}); {}",
            fwd_flop / (f1 * 1e-6) / 1e12,
            fwd_flop / (f0 * 1e-6) / 1e12,
            row.rate
        );
    }
    Ok(row)
}

/// The `wgmma` backward ([`alpha_cuda::kernels::attention::wgmma::backward_kernel`]) against the `mma.sync`
/// joint kernel's outputs on the same o, lse, delta and dO copy (`[o, lse, delta, do16]`): dq,
/// dk and dv (f32, `grads`) and the merged bf16 gradient (`merged`) the same bits. With
/// `bench`, both kernels timed (delta not included).
#[allow(clippy::too_many_arguments)]
fn wgmma_backward_checks(
    arena: &DeviceArena,
    bf: &AttnRun,
    mma_joint: &Function,
    [o, lse, delta, do16]: [u64; 4],
    grads: [alpha_cuda::runtime::driver::Buf; 3],
    merged: &[u16],
    shape: &str,
    bench: bool,
    opts: &Options,
) -> Result<Vec<Row>> {
    let d = &bf.case.dims;
    let nq = d.b * d.h * d.t * d.d;
    let plain = bf.gpu.load(&alpha_cuda::kernels::attention::wgmma::backward_kernel(d, [true, true], false))?;
    let mine: Vec<alpha_cuda::runtime::driver::Buf> =
        (0..3).map(|_| arena.alloc_n::<f32>(nq)).collect::<Result<_>>()?;
    for b in &mine {
        arena.fill_u32(*b, NAN_BITS)?;
    }
    let run = |f: &Function, [dq, dk, dv]: [u64; 3]| {
        let args = [dq, dk, dv, delta, bf.q, bf.k, bf.v, o, lse, bf.dout, do16, bf.tab, bf.tab];
        bf.launch(f, d.grid_q(), attention_mma::block(), &args)
    };
    run(&plain, [mine[0].ptr, mine[1].ptr, mine[2].ptr])?;
    let mut differ = 0;
    for (a, b) in mine.iter().zip(&grads) {
        differ += mismatches(&arena.download::<f32>(*a, nq)?, &arena.download::<f32>(*b, nq)?);
    }
    let mut row = exact_row("attention-bf16", "wgmma bwd dq, dk, dv = mma.sync joint", shape, differ, 3 * nq);
    if bench {
        let flop = 2.5 * 2.0 * d.b as f64 * d.h as f64 * (d.t as f64).powi(2) * d.d as f64;
        let theirs = [grads[0].ptr, grads[1].ptr, grads[2].ptr];
        let b0 = median(bf.gpu.time(opts.warmup, opts.reps, || run(mma_joint, theirs))?);
        let b1 = median(bf.gpu.time(opts.warmup, opts.reps, || run(&plain, [mine[0].ptr, mine[1].ptr, mine[2].ptr]))?);
        row.median_us = Some(b1);
        row.rate = format!(
            "bwd {b1:.1} us ({:.0} TFLOP/s) vs mma.sync {b0:.1} us ({:.0})",
            flop / (b1 * 1e-6) / 1e12,
            flop / (b0 * 1e-6) / 1e12
        );
    }
    let merged_kernel = bf.gpu.load(&alpha_cuda::kernels::attention::wgmma::backward_kernel(d, [true, true], true))?;
    let out = arena.alloc_n::<u16>(3 * nq)?;
    arena.fill_u32(out, NAN_BITS)?;
    run(&merged_kernel, [out.ptr; 3])?;
    let got: Vec<u16> = arena.download(out, 3 * nq)?;
    let merged_differ = got.iter().zip(merged).filter(|(a, b)| a != b).count();
    let merged_row = exact_row("attention-bf16", "wgmma bwd merged = mma.sync merged", shape, merged_differ, 3 * nq);
    Ok(vec![row, merged_row])
}

/// [`alpha_cuda::kernels::pointwise::tanh`] against [`alpha_cuda::kernels::pointwise::tanh_dividing`] (the quotient from
/// `div.rn.f32`) on every one of the 2³² f32 bit patterns: each thread of 2¹⁸ counts the inputs
/// on which the two differ (bits; two NaNs agree) and keeps the last, and the host sums. The
/// claim that replacing the division changed no bit anywhere, checked rather than argued.
pub fn tanh_exhaustive(gpu: &Gpu, arena: &DeviceArena) -> Result<Vec<Row>> {
    use alpha_cuda::ptx::{addr, Kernel, ParamTy, RegKind};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    const BLOCKS: u32 = 1024;
    const THREADS: u32 = 256;
    let threads = (BLOCKS * THREADS) as usize;
    let mut k = Kernel::new("tanh_exhaustive").with_block(THREADS, 1, 1);
    let counts = k.param_reg("counts", ParamTy::U64);
    let last = k.param_reg("last", ParamTy::U64);
    let (tid, bid) = (k.sreg("%tid.x"), k.sreg("%ctaid.x"));
    let gid = k.tri("mad.lo.u32", RegKind::B32, bid, THREADS, tid);
    let (it, wrong, seen) = (k.imm_u32(0), k.imm_u32(0), k.imm_u32(0));
    let top = k.label("every_input");
    k.place(&top);
    let bits = k.tri("mad.lo.u32", RegKind::B32, it, BLOCKS * THREADS, gid);
    let x = k.un("mov.b32", RegKind::F32, bits);
    let (a, b) =
        (alpha_cuda::kernels::pointwise::tanh(&mut k, x), alpha_cuda::kernels::pointwise::tanh_dividing(&mut k, x));
    let (ab, bb) = (k.un("mov.b32", RegKind::B32, a), k.un("mov.b32", RegKind::B32, b));
    let same_bits = k.setp("eq.u32", ab, bb);
    let (a_nan, b_nan) = (k.setp("nan.f32", a, a), k.setp("nan.f32", b, b));
    let both_nan = k.bin("and.pred", RegKind::Pred, a_nan, b_nan);
    let agree = k.bin("or.pred", RegKind::Pred, same_bits, both_nan);
    k.op_if(agree, true, "add.u32", [wrong.into(), wrong.into(), 1u32.into()]);
    k.op_if(agree, true, "mov.u32", [seen.into(), bits.into()]);
    k.op("add.u32", [it.into(), it.into(), 1u32.into()]);
    let more = k.setp("lt.u32", it, ((1u64 << 32) / (BLOCKS * THREADS) as u64) as u32);
    k.bra_if(more, false, &top);
    let at = k.addr_of(counts, gid, 4);
    k.op("st.global.u32", [addr(at, 0), wrong.into()]);
    let at = k.addr_of(last, gid, 4);
    k.op("st.global.u32", [addr(at, 0), seen.into()]);
    k.ret();
    arena.reset();
    let (c, l) = (arena.alloc_n::<u32>(threads)?, arena.alloc_n::<u32>(threads)?);
    let f = gpu.load(&k)?;
    let t0 = std::time::Instant::now();
    gpu.launch(&f, LaunchConfig::linear(BLOCKS, THREADS), &[Arg::U64(c.ptr), Arg::U64(l.ptr)])?;
    let counts: Vec<u32> = arena.download(c, threads)?;
    let lasts: Vec<u32> = arena.download(l, threads)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let wrong: u64 = counts.iter().map(|&n| n as u64).sum();
    let example = counts.iter().zip(&lasts).find(|(&n, _)| n > 0).map(|(_, &x)| x);
    Ok(vec![Row {
        family: "tanh-exhaustive".into(),
        name: "tanh (fast quotient) = tanh (div.rn)".into(),
        shape: "all 2^32 f32 inputs".into(),
        max_abs: wrong as f64,
        rel: wrong as f64,
        tol: 0.0,
        pass: wrong == 0,
        median_us: None,
        rate: match example {
            Some(x) => format!("{wrong} inputs differ, e.g. bits {x:#010x} ({})", f32::from_bits(x)),
            None => format!("no input differs ({ms:.0} ms)"),
        },
    }])
}
