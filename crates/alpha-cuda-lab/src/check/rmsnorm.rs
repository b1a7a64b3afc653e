//! RMSNorm's kernels (`alpha_cuda::kernels::rmsnorm`) against the host, at Polf's shapes.
//!
//! Two references a kernel: the host doing the same f32 operations in the kernel's order (each
//! lane's columns in order, the warp's butterflies, a block's warps in order), which the kernel
//! must equal bit for bit; and the host in the CPU reference's order (`alpha-cpu`'s `rms_norm`,
//! each row summed one column after another), which it must be within f32 rounding of. The
//! gain's gradient has one order, the reference's (bands of rows, then the bands), and must equal
//! it bit for bit.

use super::*;
use alpha_cuda::kernels::layernorm::{Norm, BAND};
use alpha_cuda::kernels::rmsnorm::{self, Layout};
use alpha_cuda::runtime::driver::{Arg, LaunchConfig};

/// ε of the checks: Polf's (f32's machine epsilon).
const EPS: f32 = f32::EPSILON;
/// ‖out − ref‖/‖ref‖ allowed against the CPU reference's order of summation: a row's sum of 512
/// terms in another order differs by a few units in the last place.
const ORDER_TOL: f64 = 1e-5;

/// The sum over a row's `c` columns of `term(j)` as a row kernel of `lanes` threads takes it:
/// each lane's columns `lane, lane + lanes, …` in order from +0, butterflies across each warp
/// (xor 16, 8, 4, 2, 1), then the warps' sums in order.
pub fn group_sum(c: usize, lanes: usize, term: impl Fn(usize) -> f32) -> f32 {
    let mut part = vec![0.0f32; lanes];
    for (lane, p) in part.iter_mut().enumerate() {
        for j in (lane..c).step_by(lanes) {
            *p += term(j);
        }
    }
    for warp in part.chunks_mut(32) {
        for off in [16, 8, 4, 2, 1] {
            let prev = warp.to_vec();
            for (l, v) in warp.iter_mut().enumerate() {
                *v = prev[l] + prev[l ^ off];
            }
        }
    }
    part.iter().step_by(32).skip(1).fold(part[0], |acc, &w| acc + w)
}

/// The sum over a row's `c` columns of `term(j)` in the CPU reference's order: one column after
/// another, as `Iterator::sum`.
pub fn reference_sum(c: usize, term: &dyn Fn(usize) -> f32) -> f32 {
    (0..c).map(term).sum()
}

/// Host forward in the kernel's order (`sum` = [`group_sum`]) or the reference's: (y, rstd).
fn forward_host(x: &[f32], gain: &[f32], sum: impl Fn(&dyn Fn(usize) -> f32) -> f32) -> (Vec<f32>, Vec<f32>) {
    let c = gain.len();
    let (mut y, mut rstd) = (vec![0.0f32; x.len()], vec![]);
    for (row, out) in x.chunks(c).zip(y.chunks_mut(c)) {
        let ms = sum(&|j| row[j] * row[j]) / c as f32;
        let r = 1.0 / (ms + EPS).sqrt();
        for j in 0..c {
            out[j] = row[j] * r * gain[j];
        }
        rstd.push(r);
    }
    (y, rstd)
}

/// Host input gradient in the kernel's order or the reference's.
fn dx_host(x: &[f32], gain: &[f32], rstd: &[f32], dy: &[f32], sum: impl Fn(&dyn Fn(usize) -> f32) -> f32) -> Vec<f32> {
    let c = gain.len();
    let mut dx = vec![0.0f32; x.len()];
    for (r, out) in dx.chunks_mut(c).enumerate() {
        let (x, dy, rs) = (&x[r * c..(r + 1) * c], &dy[r * c..(r + 1) * c], rstd[r]);
        let mean_gx = sum(&|j| dy[j] * gain[j] * x[j] * rs) / c as f32;
        for j in 0..c {
            out[j] = rs * (dy[j] * gain[j] - x[j] * rs * mean_gx);
        }
    }
    dx
}

/// Host gain gradient in the reference's order: each band's rows in order, then the bands.
fn dgain_host(x: &[f32], rstd: &[f32], dy: &[f32], c: usize) -> Vec<f32> {
    let mut total = vec![0.0f32; c];
    for band in 0..rstd.len().div_ceil(BAND) {
        let mut acc = vec![0.0f32; c];
        for r in band * BAND..((band + 1) * BAND).min(rstd.len()) {
            for j in 0..c {
                acc[j] += dy[r * c + j] * x[r * c + j] * rstd[r];
            }
        }
        for (t, a) in total.iter_mut().zip(acc) {
            *t += a;
        }
    }
    total
}

/// The row a tolerance check against the reference's order makes.
fn order_row(name: &str, shape: &str, got: &[f32], want: &[f32]) -> Row {
    let (max_abs, rel) = compare(got, want);
    Row {
        family: "rmsnorm".into(),
        name: name.into(),
        shape: shape.into(),
        max_abs,
        rel,
        tol: ORDER_TOL,
        pass: rel <= ORDER_TOL,
        median_us: None,
        rate: "against the CPU reference's order of summation".into(),
    }
}

/// Forward (f32 and bf16 stores), input gradient (alone and adding a residual) and the gain's
/// two passes at Polf's shapes —
/// the stream's rows of 512 (a block a row) and the q heads' rows of 64 (a warp a row) at one
/// context, with `bench` also at 64 contexts — and two ragged ones (a partial last block of
/// warps, columns past a lane's or a thread's last).
pub fn rmsnorm_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    let mut shapes = vec![(1024usize, 512usize), (8192, 64), (1001, 100), (37, 600)];
    if opts.bench {
        shapes.extend([(65536, 512), (524288, 64)]);
    }
    let mut rows = vec![];
    for (r, c) in shapes {
        rows.extend(check_shape(gpu, arena, rng, opts, Norm { rows: r, c })?);
    }
    Ok(rows)
}

fn check_shape(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options, n: Norm) -> Result<Vec<Row>> {
    arena.reset();
    let (r, c) = (n.rows, n.c);
    let shape = format!("rows{r} c{c}");
    let lanes = Layout::of(n).lanes() as usize;
    let mut x = rng.vec(r * c, 2.0);
    // A row of zeros: its mean square is 0 and rstd 1/√ε.
    x[..c].fill(0.0);
    let gain: Vec<f32> = (0..c).map(|_| 1.0 + 0.5 * rng.uniform()).collect();
    let dy = rng.vec(r * c, 1.0);
    let [xb, gb, dyb] = [&x, &gain, &dy].map(|v| {
        let b = arena.alloc_n::<f32>(v.len()).expect("arena");
        arena.upload(b, v).expect("upload");
        b
    });
    let [y, rstd, dx, dgain, partials, sum] = poisoned(arena, [r * c, r, r * c, c, rmsnorm::scratch_floats(n), r * c])?;
    let residual = rng.vec(r * c, 1.0);
    let rb = arena.alloc_n::<f32>(r * c)?;
    arena.upload(rb, &residual)?;
    let y16 = arena.alloc_n::<u16>(r * c)?;
    arena.fill_u32(y16, NAN_BITS)?;
    let cfg = |(grid, block): ((u32, u32, u32), (u32, u32, u32))| LaunchConfig { grid, block, shared_bytes: 0 };
    let args = |bufs: &[alpha_cuda::runtime::driver::Buf]| bufs.iter().map(|b| Arg::U64(b.ptr)).collect::<Vec<_>>();
    let fwd = gpu.load(&rmsnorm::forward_kernel(n, EPS))?;
    let fwd16 = gpu.load(&rmsnorm::forward_kernel_storing(n, EPS, true))?;
    let bwd = gpu.load(&rmsnorm::backward_dx_kernel(n))?;
    let bwd_add = gpu.load(&rmsnorm::backward_dx_kernel_adding(n, true))?;
    let p1 = gpu.load(&rmsnorm::backward_partials_kernel(n))?;
    let p2 = gpu.load(&rmsnorm::backward_finish_kernel(n))?;
    let (a_fwd, a_fwd16) = (args(&rmsnorm::forward_arguments([y, rstd, xb, gb])), args(&[y16, rstd, xb, gb]));
    let a_dx = args(&rmsnorm::dx_arguments([dx, xb, gb, rstd, dyb], None));
    let a_add = args(&rmsnorm::dx_arguments([sum, xb, gb, rstd, dyb], Some(rb)));
    let a_p1 = args(&rmsnorm::partials_arguments([partials, xb, rstd, dyb]));
    let a_p2 = args(&rmsnorm::finish_arguments([dgain, partials]));
    let run_fwd = || gpu.launch(&fwd, cfg(rmsnorm::row_launch(n)), &a_fwd);
    let run_fwd16 = || gpu.launch(&fwd16, cfg(rmsnorm::row_launch(n)), &a_fwd16);
    let run_dx = || gpu.launch(&bwd, cfg(rmsnorm::row_launch(n)), &a_dx);
    let run_add = || gpu.launch(&bwd_add, cfg(rmsnorm::row_launch(n)), &a_add);
    let run_gain = || {
        gpu.launch(&p1, cfg(rmsnorm::partials_launch(n)), &a_p1)?;
        gpu.launch(&p2, cfg(rmsnorm::finish_launch(n)), &a_p2)
    };
    run_fwd()?;
    run_fwd16()?;
    // The backward reads the forward's rstd, as in a step.
    run_dx()?;
    run_add()?;
    run_gain()?;
    let got_y: Vec<f32> = arena.download(y, r * c)?;
    let got_rstd: Vec<f32> = arena.download(rstd, r)?;
    let got_y16: Vec<u16> = arena.download(y16, r * c)?;
    let got_dx: Vec<f32> = arena.download(dx, r * c)?;
    let got_sum: Vec<f32> = arena.download(sum, r * c)?;
    let got_dgain: Vec<f32> = arena.download(dgain, c)?;

    let kernel_order = |t: &dyn Fn(usize) -> f32| group_sum(c, lanes, t);
    let reference_order = |t: &dyn Fn(usize) -> f32| reference_sum(c, t);
    let (want_y, want_rstd) = forward_host(&x, &gain, kernel_order);
    let (ref_y, ref_rstd) = forward_host(&x, &gain, reference_order);
    let want_dx = dx_host(&x, &gain, &want_rstd, &dy, kernel_order);
    let ref_dx = dx_host(&x, &gain, &ref_rstd, &dy, reference_order);
    let want_dgain = dgain_host(&x, &want_rstd, &dy, c);
    // The residual's sum as the Add it replaces computes it: dx + r in f32.
    let want_sum: Vec<f32> = want_dx.iter().zip(&residual).map(|(d, r)| d + r).collect();

    let time = |f: &dyn Fn() -> Result<()>| -> Result<Option<f64>> {
        Ok(if opts.bench { Some(median(gpu.time(opts.warmup, opts.reps, f)?)) } else { None })
    };
    let suffix = if lanes == 32 { "_warp" } else { "" };
    let wrong16 = got_y16.iter().zip(&want_y).filter(|(h, v)| **h != half::bf16::from_f32(**v).to_bits()).count();
    let mut fwd_row = exact_row(
        "rmsnorm",
        &format!("rmsnorm_fwd{suffix}(+bf16)"),
        &shape,
        mismatches(&got_y, &want_y) + mismatches(&got_rstd, &want_rstd) + wrong16,
        2 * r * c + r,
    );
    fwd_row.median_us = time(&run_fwd)?;
    if let Some(t16) = time(&run_fwd16)? {
        fwd_row.rate = format!("bf16 store {t16:.1} µs");
    }
    let wrong_dx = mismatches(&got_dx, &want_dx) + mismatches(&got_sum, &want_sum);
    let mut dx_row = exact_row("rmsnorm", &format!("rmsnorm_bwd_dx{suffix}(+add)"), &shape, wrong_dx, 2 * r * c);
    dx_row.median_us = time(&run_dx)?;
    if let Some(t) = time(&run_add)? {
        dx_row.rate = format!("adding the residual {t:.1} µs");
    }
    let mut gain_row =
        exact_row("rmsnorm", "rmsnorm_bwd_params(+finish)", &shape, mismatches(&got_dgain, &want_dgain), c);
    gain_row.median_us = time(&run_gain)?;
    let order_y = order_row(&format!("rmsnorm_fwd{suffix}"), &shape, &got_y, &ref_y);
    let order_dx = order_row(&format!("rmsnorm_bwd_dx{suffix}"), &shape, &got_dx, &ref_dx);
    Ok(vec![fwd_row, order_y, dx_row, order_dx, gain_row])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's kernel-order sum is a sum of every term once: exact on small integers (where
    /// no order rounds), for a warp's lanes and a block's, columns short of the lanes included.
    #[test]
    fn group_sum_adds_every_column_once() {
        for (c, lanes) in [(64, 32), (100, 32), (20, 32), (512, 128), (600, 128)] {
            let want = (0..c).map(|j| j as f32).sum::<f32>();
            assert_eq!(group_sum(c, lanes, |j| j as f32), want, "c {c}, lanes {lanes}");
        }
    }

    /// The host in the reference's order is the CPU reference (`alpha-cpu`'s RMSNorm), bit for
    /// bit: forward, input gradient and the gain's gradient.
    #[test]
    fn the_reference_order_is_the_cpu_references() {
        let (r, c) = (37, 100);
        let mut rng = Rng::new(3);
        let (x, dy) = (rng.vec(r * c, 2.0), rng.vec(r * c, 1.0));
        let gain = rng.vec(c, 1.0);
        let (mut y, mut rstd, mut dx, mut dgain) = (vec![0.0; r * c], vec![0.0; r], vec![0.0; r * c], vec![0.0; c]);
        alpha_cpu::kernels::norms::rms_norm(&x, &gain, EPS as f64, &mut y, &mut rstd);
        alpha_cpu::kernels::norms::rms_norm_backward(&x, &gain, &rstd, &dy, &mut dx, &mut dgain);
        let order = |t: &dyn Fn(usize) -> f32| reference_sum(c, t);
        let (hy, hrstd) = forward_host(&x, &gain, order);
        assert_eq!((mismatches(&hy, &y), mismatches(&hrstd, &rstd)), (0, 0));
        assert_eq!(mismatches(&dx_host(&x, &gain, &rstd, &dy, order), &dx), 0);
        assert_eq!(mismatches(&dgain_host(&x, &rstd, &dy, c), &dgain), 0);
    }

    /// The gain's host gradient sums each band's rows, then the bands: equal to the plain sum
    /// on exact values.
    #[test]
    fn dgain_host_sums_every_row() {
        let (r, c) = (37, 3);
        let x: Vec<f32> = (0..r * c).map(|i| (i % 5) as f32).collect();
        let dy = vec![1.0f32; r * c];
        let rstd = vec![2.0f32; r];
        let got = dgain_host(&x, &rstd, &dy, c);
        for (j, g) in got.iter().enumerate() {
            let want: f32 = (0..r).map(|row| 2.0 * x[row * c + j]).sum();
            assert_eq!(*g, want);
        }
    }
}
