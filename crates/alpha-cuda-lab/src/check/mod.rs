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
//!
//! Files: the report's rows, the generator and the shared helpers (here); GEMM (`matmul.rs`) and
//! its fused epilogues (`matmul_epilogues.rs`), attention (`attention_kernels.rs`), RMSNorm
//! (`rmsnorm.rs`), the recurrences with large states (`scans.rs`: the delta rule, the harmonic
//! scan), and the other families (`layers.rs`).

use alpha_cuda::kernels::adamw::{self, AdamwScalars, Segment};
use alpha_cuda::kernels::attention::{self, mma as attention_mma};
use alpha_cuda::kernels::cross_entropy;
use alpha_cuda::kernels::embedding;
use alpha_cuda::kernels::gemm::{self, Epilogue, Extras, GemmShape, GemmSpec, Input, Layout, Tile};
use alpha_cuda::kernels::rotary;
use alpha_cuda::runtime::driver::{DeviceArena, Function, Gpu};
use anyhow::Result;

mod attention_kernels;
mod layers;
mod matmul;
mod matmul_epilogues;
mod rmsnorm;
mod scans;

pub use attention_kernels::*;
pub use layers::*;
pub use matmul::*;
use matmul_epilogues::*;
pub use rmsnorm::*;
pub use scans::*;

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

/// Uploads `x` (and returns its device address).
fn upload_f32(arena: &DeviceArena, x: &[f32]) -> Result<u64> {
    let b = arena.alloc_n::<f32>(x.len())?;
    arena.upload(b, x)?;
    Ok(b.ptr)
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
