//! GEMM checks: every spec against the CPU reference, split K (even and uneven), paired
//! products, the Coppelius shapes benchmarked, the step graph and the engines' traces, and the
//! simple f32 product's thin shapes against its 16×16 tiles.

use super::*;

/// A product's random operands and residual on the host and the device, and its output
/// allocated and poisoned (NaN) so that an element the kernel misses shows.
pub(super) struct GemmCase {
    pub(super) a: Vec<f32>,
    pub(super) b: Vec<f32>,
    pub(super) r: Vec<f32>,
    pub(super) ab: alpha_cuda::runtime::driver::Buf,
    pub(super) bb: alpha_cuda::runtime::driver::Buf,
    pub(super) cb: alpha_cuda::runtime::driver::Buf,
    pub(super) rb: alpha_cuda::runtime::driver::Buf,
    pub(super) nc: usize,
}

pub(super) fn gemm_case(arena: &DeviceArena, rng: &mut Rng, spec: &GemmSpec, sh: &GemmShape) -> Result<GemmCase> {
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
pub(super) fn tma_maps(
    arena: &DeviceArena,
    spec: &GemmSpec,
    sh: &GemmShape,
    a: u64,
    b: u64,
) -> Result<Option<(u64, u64)>> {
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

/// The narrow store ([`GemmSpec::narrow_store`]) of a padded product's output in place: rr and
/// rc over 8,200 rows (a partial tile), N = 262 (a partial 128 and a partial lane group),
/// C's rows 262 floats, B's padded to 264, against the reference, and rc adding a bias row as
/// it stores ([`GemmSpec::narrow_bias`]); nothing written past C (a guard of 64 floats after it
/// stays NaN).
pub fn narrow_store_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let cases = [(gemm::Layout::RowMajor, false), (gemm::Layout::ColMajor, false), (gemm::Layout::ColMajor, true)];
    for (b_layout, narrow_bias) in cases {
        arena.reset();
        let spec = GemmSpec {
            staged_store: true,
            narrow_store: true,
            narrow_bias,
            ..GemmSpec::new(gemm::Layout::RowMajor, b_layout, gemm::Input::Bf16).tma()
        };
        let padded = GemmShape::packed(&spec, 8200, 264, 384);
        let sh = GemmShape { n: 262, ldc: 262, ..padded };
        sh.check(&spec)?;
        let f = gpu.load(&spec.kernel())?;
        let GemmCase { a, b, r, ab, bb, .. } = gemm_case(arena, rng, &spec, &padded)?;
        let nc = (sh.m * sh.ldc) as usize;
        let cb = arena.alloc_n::<f32>(nc + 64)?;
        arena.fill_u32(cb, NAN_BITS)?;
        let maps = tma_maps(arena, &spec, &sh, ab.ptr, bb.ptr)?;
        // A bias row of 262 (NaN past it).
        let row = rng.vec(sh.n as usize, 1.0);
        let rb = arena.alloc_n::<f32>(row.len() + 64)?;
        arena.fill_u32(rb, NAN_BITS)?;
        arena.upload(rb, &row)?;
        let bias = narrow_bias.then_some(rb.ptr);
        gemm::launch_with(
            gpu,
            &f,
            &spec,
            &sh,
            [ab.ptr, bb.ptr, cb.ptr, cb.ptr],
            Extras { maps, bias, ..Extras::default() },
        )?;
        let out: Vec<f32> = arena.download(cb, nc + 64)?;
        let plain = GemmSpec { narrow_bias: false, ..spec };
        let mut want = vec![0.0; nc];
        gemm::reference(&plain, &sh, &a, &b, &r, &mut want);
        if narrow_bias {
            for (i, x) in want.iter_mut().enumerate() {
                *x += row[i % sh.n as usize];
            }
        }
        let (max_abs, rel) = compare(&out[..nc], &want);
        let past = out[nc..].iter().filter(|x| x.to_bits() != NAN_BITS).count();
        rows.push(Row {
            family: "gemm-narrow".into(),
            name: spec.name(),
            shape: format!("m{} n{} k{} ldc{}", sh.m, sh.n, sh.k, sh.ldc),
            max_abs,
            rel,
            tol: 1e-5,
            pass: rel <= 1e-5 && past == 0,
            median_us: None,
            rate: format!("{past} floats written past C"),
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
pub(super) fn spec_of(lay: &str, input: Input) -> GemmSpec {
    let layout = |c: char| if c == 'r' { Layout::RowMajor } else { Layout::ColMajor };
    let mut ch = lay.chars();
    GemmSpec::new(layout(ch.next().unwrap_or('r')), layout(ch.next().unwrap_or('r')), input)
}

/// Times one GEMM and checks 512 sampled outputs against the f64 reference.
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm_bench_one(
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

/// The simple f32 product at Diakosmos's three thin shapes (64 windows: batch 7): the covering
/// [`Product::tiling`] gives each against the 16×16 tiles it replaces, bit for bit (both run
/// every element's chain over K, or the same parts' chains added in order, in order), and two
/// runs bit for bit; with `opts.bench`, µs of each (the split-K sum included where K is split)
/// and the new launch's GB/s over its operands and result.
pub fn simple_product_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::gemm::simple::{Product, Tiling};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    let mut rows = Vec::new();
    for (lay, m, n, k) in [("rr", 131_072, 190, 8), ("rc", 131_072, 8, 190), ("cr", 8, 190, 131_072)] {
        arena.reset();
        let (ta, tb) = (lay.starts_with('c'), lay.ends_with('c'));
        let p = Product {
            batch: 7,
            m,
            n,
            k,
            ta,
            tb,
            b_batched: true,
            dtype: alpha_ir::DType::F32,
            splits: 1,
            c_view: None,
        };
        let p = Product { splits: p.split_k(), ..p };
        let nc = p.batch * m * n;
        let a = upload_f32(arena, &rng.vec(p.batch * m * k, 1.0))?;
        let b = upload_f32(arena, &rng.vec(p.batch * k * n, 1.0))?;
        let [c_new, c_tiles] = poisoned(arena, [nc, nc])?;
        let partials = arena.alloc_n::<f32>(if p.splits > 1 { nc * p.splits as usize } else { 1 })?;
        let mn = nc as u32;
        let width = gemm::splitk_reduce_width(mn, true);
        let store = GemmSpec::new(Layout::RowMajor, Layout::RowMajor, Input::F32);
        let sum = gpu.load(&gemm::splitk_reduce_kernel(&store, p.splits, mn, width))?;
        let tiling = p.tiling();
        let f_new = gpu.load(&p.kernel())?;
        let f_tiles = gpu.load(&p.kernel_for(Tiling::Tiles))?;
        // One product into `c`: the launch of `tiling`, then the parts' sum where K is split.
        let run = |f: &Function, tiling: Tiling, c: u64| -> Result<()> {
            let cfg = LaunchConfig { grid: p.grid_for(tiling), block: p.block_for(tiling), shared_bytes: 0 };
            let out = if p.splits == 1 { c } else { partials.ptr };
            gpu.launch(f, cfg, &[Arg::U64(out), Arg::U64(a), Arg::U64(b)])?;
            if p.splits > 1 {
                gemm::launch_splitk_reduce(gpu, &sum, mn, width, [c, c, partials.ptr])?;
            }
            Ok(())
        };
        run(&f_tiles, Tiling::Tiles, c_tiles.ptr)?;
        let want = arena.download(c_tiles, nc)?;
        let mut outs: Vec<Vec<f32>> = Vec::new();
        for _ in 0..2 {
            arena.fill_u32(c_new, NAN_BITS)?;
            run(&f_new, tiling, c_new.ptr)?;
            outs.push(arena.download(c_new, nc)?);
        }
        let name = format!("{} ({:?})", p.kernel().name, tiling);
        let shape = format!("{lay}-m{m}-n{n}-k{k}-b7");
        let mut row = exact_row("simple", &name, &shape, mismatches(&outs[0], &want), nc);
        let repeat = mismatches(&outs[0], &outs[1]);
        row.pass &= repeat == 0;
        row.rate = format!("{repeat} differ between runs");
        if opts.bench {
            let t_new = median(gpu.time(opts.warmup, opts.reps, || run(&f_new, tiling, c_new.ptr))?);
            let t_tiles = median(gpu.time(opts.warmup, opts.reps, || run(&f_tiles, Tiling::Tiles, c_tiles.ptr))?);
            let bytes = 4.0 * (p.batch * (m * k + k * n + m * n)) as f64;
            row.median_us = Some(t_new);
            row.rate = format!("{:.0} GB/s; tiles {t_tiles:.1}us; {}", bytes / t_new / 1e3, row.rate);
        }
        rows.push(row);
    }
    Ok(rows)
}
