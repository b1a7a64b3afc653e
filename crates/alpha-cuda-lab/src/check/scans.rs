//! The recurrences with large states: the delta rule (KickDelta) and the harmonic scan
//! (Diakosmos), forward and backward, against the CPU backend's kernels on random inputs of the
//! systems' shapes.
//!
//! The GPU kernels do the CPU's operations in the CPU's order, so every output should equal
//! the CPU's bit for bit: each row reports the largest difference relative to the tensor's
//! largest entry (the figure the gate reads) and, beside it, how many elements differ in any
//! bit. A row passes within its tolerance and when a second run repeats the first bit for bit.

use alpha_cpu::kernels::{delta_rule as cpu_delta, harmonic_scan as cpu_scan};
use alpha_cuda::kernels::replay::{window_sum_arguments, window_sum_kernel};
use alpha_cuda::kernels::{delta_rule, harmonic_scan};
use alpha_cuda::runtime::driver::{Arg, Buf, LaunchConfig};

use super::*;

/// Forward outputs within this of the tensor's largest entry pass.
const FORWARD_TOL: f64 = 1e-5;
/// Gradients (longer chains of sums) within this.
const BACKWARD_TOL: f64 = 1e-4;

/// KickDelta's and Diakosmos's delta rule and harmonic scan, at the gate's batches (`quick`) or
/// the training defaults (32 windows; 2 windows).
pub fn scan_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    let kickdelta = delta_rule::Dims { b: if opts.bench { 32 } else { 2 }, t: 512, k: 15, v: 256 };
    let diakosmos = harmonic_scan::Dims { b: if opts.bench { 2 } else { 1 }, t: 2048, h: 7, l: 8, d: 190 };
    let mut rows = delta_rule_checks(gpu, arena, rng, &kickdelta, opts)?;
    rows.extend(harmonic_scan_checks(gpu, arena, rng, &diakosmos, opts)?);
    // Odd small shapes: a last chunk and a last group shorter than the rest, rows that are
    // not a whole number of warps, a key of one.
    let odd = delta_rule::Dims { b: 3, t: 37, k: 1, v: 45 };
    rows.extend(delta_rule_checks(gpu, arena, rng, &odd, &Options { bench: false, ..*opts })?);
    let odd = harmonic_scan::Dims { b: 2, t: 29, h: 3, l: 5, d: 33 };
    rows.extend(harmonic_scan_checks(gpu, arena, rng, &odd, &Options { bench: false, ..*opts })?);
    Ok(rows)
}

/// Uploads `x` into a fresh buffer.
fn upload(arena: &DeviceArena, x: &[f32]) -> Result<Buf> {
    let b = arena.alloc_n::<f32>(x.len())?;
    arena.upload(b, x)?;
    Ok(b)
}

/// A row comparing `got` (twice: `again` is a second run) with the CPU's `want`.
fn scan_row(family: &str, name: &str, shape: &str, (got, again): (&[f32], &[f32]), want: &[f32], tol: f64) -> Row {
    let (max_abs, rel, _) = rel_and_cosine(got, want);
    let differ = mismatches(got, want);
    let repeat = mismatches(got, again);
    Row {
        family: family.into(),
        name: name.into(),
        shape: shape.into(),
        max_abs,
        rel,
        tol,
        pass: rel <= tol && repeat == 0 && got.len() == want.len(),
        median_us: None,
        rate: format!(
            "{differ} of {} differ from the CPU in bits; {}",
            want.len(),
            if repeat == 0 { "repeats bit for bit".to_string() } else { format!("{repeat} differ between runs") }
        ),
    }
}

/// One row an output: the forward's first (within [`FORWARD_TOL`]), then the backward's.
fn scan_rows(
    family: &str,
    shape: &str,
    (first, second): (&[Vec<f32>], &[Vec<f32>]),
    wants: &[(&Vec<f32>, &str)],
) -> Vec<Row> {
    let mut rows = vec![];
    for (i, (want, name)) in wants.iter().enumerate() {
        let (tol, name) =
            if i == 0 { (FORWARD_TOL, name.to_string()) } else { (BACKWARD_TOL, format!("backward {name}")) };
        rows.push(scan_row(family, &name, shape, (&first[i], &second[i]), want, tol));
    }
    rows
}

/// Unit keys (as KickDelta's, which keep every update a contraction).
fn unit_rows(rng: &mut Rng, rows: usize, width: usize) -> Vec<f32> {
    let mut x = rng.vec(rows * width, 1.0);
    for r in x.chunks_mut(width) {
        let n = r.iter().map(|a| a * a).sum::<f32>().sqrt().max(1e-6);
        r.iter_mut().for_each(|a| *a /= n);
    }
    x
}

/// Random inputs shaped as KickDelta's: q, k (unit rows, as its keys, which keep every update a
/// contraction), v, β in (0.05, 0.95), m0, do.
pub fn delta_rule_inputs(rng: &mut Rng, d: &delta_rule::Dims) -> [Vec<f32>; 6] {
    let (nk, nv, nb) = (d.b * d.t * d.k, d.b * d.t * d.v, d.b * d.t);
    let q = rng.vec(nk, 1.0);
    let k = unit_rows(rng, nb, d.k);
    let v = rng.vec(nv, 2.0);
    let beta: Vec<f32> = (0..nb).map(|_| 0.5 + 0.45 * rng.uniform()).collect();
    [q, k, v, beta, rng.vec(d.v * d.k, 0.5), rng.vec(nv, 1.0)]
}

/// The CPU backend's delta rule on `inputs`: o, then dq, dk, dv, dβ, dm0.
pub fn delta_rule_reference(d: &delta_rule::Dims, inputs: &[Vec<f32>; 6]) -> [Vec<f32>; 6] {
    let [q, k, v, beta, m0, dout] = inputs;
    let (nk, nv, nb) = (d.b * d.t * d.k, d.b * d.t * d.v, d.b * d.t);
    let cd = cpu_delta::Dims { b: d.b, t: d.t, k: d.k, v: d.v };
    let mut out = [nv, nk, nk, nv, nb, d.v * d.k].map(|n| vec![0.0f32; n]);
    let [o, dq, dk, dv, dbeta, dm0] = &mut out;
    cpu_delta::forward(q, k, v, beta, m0, &cd, o);
    cpu_delta::backward(q, k, v, beta, m0, dout, &cd, cpu_delta::Grads { dq, dk, dv, dbeta, dm0 });
    out
}

/// Random inputs shaped as Diakosmos's: r, w, v, γ from 0.8 to 0.999 (its σ(g + o) start at
/// 0.88 to 0.95), dy.
pub fn harmonic_scan_inputs(rng: &mut Rng, d: &harmonic_scan::Dims) -> [Vec<f32>; 5] {
    let (nl, nd) = (d.b * d.t * d.h * d.l, d.b * d.t * d.h * d.d);
    let (r, w, v) = (rng.vec(nl, 1.0), rng.vec(nl, 1.0), rng.vec(nd, 1.0));
    let gamma: Vec<f32> = (0..d.h * d.l).map(|_| 0.8995 + 0.0995 * rng.uniform()).collect();
    [r, w, v, gamma, rng.vec(nd, 1.0)]
}

/// The CPU backend's harmonic scan on `inputs`: y, then dr, dw, dv, dγ.
pub fn harmonic_scan_reference(d: &harmonic_scan::Dims, inputs: &[Vec<f32>; 5]) -> [Vec<f32>; 5] {
    let [r, w, v, gamma, dy] = inputs;
    let (nl, nd) = (d.b * d.t * d.h * d.l, d.b * d.t * d.h * d.d);
    let cd = cpu_scan::Dims { b: d.b, t: d.t, h: d.h, l: d.l, d: d.d };
    let mut out = [nd, nl, nl, nd, d.h * d.l].map(|n| vec![0.0f32; n]);
    let [y, dr, dw, dv, dgamma] = &mut out;
    cpu_scan::forward(r, w, v, gamma, &cd, y);
    cpu_scan::backward(r, w, v, gamma, dy, &cd, cpu_scan::Grads { dr, dw, dv, dgamma });
    out
}

/// The delta rule at `d`: forward (o) and backward (dq, dk, dv, dβ, dm0).
pub fn delta_rule_checks(
    gpu: &Gpu,
    arena: &DeviceArena,
    rng: &mut Rng,
    d: &delta_rule::Dims,
    opts: &Options,
) -> Result<Vec<Row>> {
    arena.reset();
    let (nk, nv, nb) = (d.b * d.t * d.k, d.b * d.t * d.v, d.b * d.t);
    let inputs = delta_rule_inputs(rng, d);
    let ff = gpu.load(&delta_rule::forward_kernel(d))?;
    let fb = gpu.load(&delta_rule::backward_kernel(d)?)?;
    let fs = gpu.load(&window_sum_kernel(d.v * d.k, d.b))?;
    let [qb, kb, vb, bb, mb, db] = inputs.each_ref().map(|x| upload(arena, x));
    let (qb, kb, vb, bb, mb, db) = (qb?, kb?, vb?, bb?, mb?, db?);
    let [ob, dqb, dkb, dvb, dbb, dmb] = poisoned(arena, [nv, nk, nk, nv, nb, d.v * d.k])?;
    let (chunk_at, parts_at, total) = d.scratch_floats()?;
    let scratch = arena.alloc_n::<f32>(total)?;
    let at = |floats: usize| Arg::U64(scratch.ptr + 4 * floats as u64);
    let p = |b: Buf| Arg::U64(b.ptr);
    let lay = d.layout()?;
    let forward = || {
        let args = delta_rule::forward_arguments([ob, qb, kb, vb, bb, mb].map(p));
        gpu.launch(&ff, LaunchConfig::linear((d.b * d.v).div_ceil(256) as u32, 256), &args)
    };
    let backward = || -> Result<()> {
        let scratch = [at(parts_at), at(0), at(chunk_at)];
        let args =
            delta_rule::backward_arguments([dqb, dkb, dvb, dbb].map(p), scratch, [qb, kb, vb, bb, mb, db].map(p));
        gpu.launch(&fb, LaunchConfig::linear(d.b as u32, lay.threads() as u32), &args)?;
        let sum = window_sum_arguments([p(dmb), at(parts_at)]);
        gpu.launch(&fs, LaunchConfig::linear((d.v * d.k).div_ceil(256) as u32, 256), &sum)
    };
    let outs = [(ob, nv), (dqb, nk), (dkb, nk), (dvb, nv), (dbb, nb), (dmb, d.v * d.k)];
    let run = || -> Result<Vec<Vec<f32>>> {
        forward()?;
        backward()?;
        outs.iter().map(|&(b, n)| arena.download(b, n)).collect()
    };
    let first = run()?;
    let second = run()?;
    let [o, dq, dk, dv, dbeta, dm0] = delta_rule_reference(d, &inputs);
    let shape = format!("b{} t{} k{} v{}", d.b, d.t, d.k, d.v);
    let wants = [(&o, "forward o"), (&dq, "dq"), (&dk, "dk"), (&dv, "dv"), (&dbeta, "dbeta"), (&dm0, "dm0")];
    let mut rows = scan_rows("delta-rule", &shape, (&first, &second), &wants);
    if opts.bench {
        rows[0].median_us = Some(median(gpu.time(opts.warmup, opts.reps, forward)?));
        rows[1].median_us = Some(median(gpu.time(opts.warmup, opts.reps, backward)?));
    }
    Ok(rows)
}

/// The harmonic scan at `d`: forward (y) and backward (dr, dw, dv, dγ).
pub fn harmonic_scan_checks(
    gpu: &Gpu,
    arena: &DeviceArena,
    rng: &mut Rng,
    d: &harmonic_scan::Dims,
    opts: &Options,
) -> Result<Vec<Row>> {
    arena.reset();
    let (nl, nd) = (d.b * d.t * d.h * d.l, d.b * d.t * d.h * d.d);
    let inputs = harmonic_scan_inputs(rng, d);
    let ff = gpu.load(&harmonic_scan::forward_kernel(d, harmonic_scan::FORWARD_BLOCKS_PER_SM))?;
    let fb = gpu.load(&harmonic_scan::backward_kernel(d, harmonic_scan::BACKWARD_BLOCKS_PER_SM)?)?;
    let fs = gpu.load(&window_sum_kernel(d.h * d.l, d.b))?;
    let [rb, wb, vb, gb, dyb] = inputs.each_ref().map(|x| upload(arena, x));
    let (rb, wb, vb, gb, dyb) = (rb?, wb?, vb?, gb?, dyb?);
    let [yb, drb, dwb, dvb, dgb] = poisoned(arena, [nd, nl, nl, nd, d.h * d.l])?;
    let (chunk_at, parts_at, total) = d.scratch_floats()?;
    let scratch = arena.alloc_n::<f32>(total)?;
    let at = |floats: usize| Arg::U64(scratch.ptr + 4 * floats as u64);
    let p = |b: Buf| Arg::U64(b.ptr);
    let lay = d.layout()?;
    let forward = || {
        let args = harmonic_scan::forward_arguments([yb, rb, wb, vb, gb].map(p));
        gpu.launch(&ff, LaunchConfig::linear((d.b * d.h * d.d).div_ceil(256) as u32, 256), &args)
    };
    let backward = || -> Result<()> {
        let scratch = [at(parts_at), at(0), at(chunk_at)];
        let args = harmonic_scan::backward_arguments([drb, dwb, dvb].map(p), scratch, [rb, wb, vb, gb, dyb].map(p));
        gpu.launch(&fb, LaunchConfig::linear((d.b * d.h) as u32, lay.threads() as u32), &args)?;
        let sum = window_sum_arguments([p(dgb), at(parts_at)]);
        gpu.launch(&fs, LaunchConfig::linear((d.h * d.l).div_ceil(256) as u32, 256), &sum)
    };
    let outs = [(yb, nd), (drb, nl), (dwb, nl), (dvb, nd), (dgb, d.h * d.l)];
    let run = || -> Result<Vec<Vec<f32>>> {
        forward()?;
        backward()?;
        outs.iter().map(|&(b, n)| arena.download(b, n)).collect()
    };
    let first = run()?;
    let second = run()?;
    let [y, dr, dw, dv, dg] = harmonic_scan_reference(d, &inputs);
    let shape = format!("b{} t{} h{} l{} d{}", d.b, d.t, d.h, d.l, d.d);
    let wants = [(&y, "forward y"), (&dr, "dr"), (&dw, "dw"), (&dv, "dv"), (&dg, "dgamma")];
    let mut rows = scan_rows("harmonic-scan", &shape, (&first, &second), &wants);
    if opts.bench {
        rows[0].median_us = Some(median(gpu.time(opts.warmup, opts.reps, forward)?));
        rows[1].median_us = Some(median(gpu.time(opts.warmup, opts.reps, backward)?));
    }
    Ok(rows)
}
