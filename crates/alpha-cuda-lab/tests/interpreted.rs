//! The delta rule's and the harmonic scan's GPU kernels, run by the PTX interpreter
//! (`alpha_cuda_lab::interp`, no GPU needed), equal the CPU backend's kernels bit for bit,
//! forward and backward, under both orders of a block's threads, at KickDelta's and
//! Diakosmos's widths over short windows and at odd shapes (a short last chunk, a short last
//! group of positions, rows that are not a whole number of warps). The simple matrix product,
//! its K whole or split into parts, gives its promised order of sums bit for bit.

use alpha_cuda::kernels::gemm::simple::Product;
use alpha_cuda::kernels::replay::{window_sum_arguments, window_sum_kernel};
use alpha_cuda::kernels::{delta_rule, harmonic_scan};
use alpha_cuda::ptx::Kernel;
use alpha_cuda_lab::check::{self, Rng};
use alpha_cuda_lab::interp::{Memory, Module, Schedule};
use alpha_ir::DType;

fn module(k: &Kernel) -> Module {
    Module::parse(&k.render(), k.dynamic_shared).unwrap_or_else(|e| panic!("{}: {e:#}", k.name))
}

/// Blocks a grid-stride launch of 256 a block needs for `n` elements.
fn blocks(n: usize) -> u32 {
    n.div_ceil(256) as u32
}

/// `got` equals `want` bit for bit (NaN where the kernel did not write fails).
fn assert_bits(name: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{name}");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert_eq!(a.to_bits(), b.to_bits(), "{name}[{i}]: GPU kernel {a} vs CPU {b}");
    }
    assert!(want.iter().any(|&x| x != 0.0), "{name}: all zeros checks nothing");
}

/// The delta rule's outputs, as the interpreter computes them: o, dq, dk, dv, dβ, dm0.
fn delta_rule_on_gpu(d: &delta_rule::Dims, ins: [&[f32]; 6], schedule: Schedule) -> Vec<Vec<f32>> {
    let mut mem = Memory::new();
    let [q, k, v, beta, m0, dout] = ins.map(|x| mem.upload(x));
    let (nk, nv, nb) = (d.b * d.t * d.k, d.b * d.t * d.v, d.b * d.t);
    let outs = [nv, nk, nk, nv, nb, d.v * d.k].map(|n| (mem.alloc(n), n));
    let [o, dq, dk, dv, db, dm0] = outs.map(|x| x.0);
    let (chunk_at, parts_at, total) = d.scratch_floats().unwrap();
    let scratch = mem.alloc(total);
    let at = |f: usize| scratch + 4 * f as u64;
    let fwd = module(&delta_rule::forward_kernel(d));
    fwd.launch(blocks(d.b * d.v), 256, &delta_rule::forward_arguments([o, q, k, v, beta, m0]), &mut mem, schedule)
        .unwrap();
    let bwd_kernel = delta_rule::backward_kernel(d).unwrap();
    let threads = bwd_kernel.block_threads().unwrap();
    let args = delta_rule::backward_arguments(
        [dq, dk, dv, db],
        [at(parts_at), at(0), at(chunk_at)],
        [q, k, v, beta, m0, dout],
    );
    module(&bwd_kernel).launch(d.b as u32, threads, &args, &mut mem, schedule).unwrap();
    let sum = module(&window_sum_kernel(d.v * d.k, d.b));
    sum.launch(blocks(d.v * d.k), 256, &window_sum_arguments([dm0, at(parts_at)]), &mut mem, schedule).unwrap();
    outs.iter().map(|&(a, n)| mem.read(a, n)).collect()
}

#[test]
fn the_delta_rule_kernels_give_the_cpus_bits() {
    for d in [
        delta_rule::Dims { b: 2, t: 13, k: 3, v: 37 },
        // Three replayed chunks, the last shorter.
        delta_rule::Dims { b: 1, t: 37, k: 3, v: 37 },
        delta_rule::Dims { b: 3, t: 7, k: 1, v: 5 },
        delta_rule::Dims { b: 1, t: 1, k: 4, v: 33 },
        // KickDelta's memory (two positions a group: its terms fill the shared memory).
        delta_rule::Dims { b: 2, t: 9, k: 15, v: 256 },
    ] {
        check_delta_rule(&d);
    }
}

/// At KickDelta's and Diakosmos's gate shapes, whole windows (half a minute in a release
/// build; run with `--ignored`).
#[test]
#[ignore]
fn the_kernels_give_the_cpus_bits_at_the_gates_shapes() {
    check_delta_rule(&delta_rule::Dims { b: 2, t: 512, k: 15, v: 256 });
    check_harmonic_scan(&harmonic_scan::Dims { b: 1, t: 2048, h: 7, l: 8, d: 190 });
}

/// The delta rule at `d` on random inputs shaped as KickDelta's.
fn check_delta_rule(d: &delta_rule::Dims) {
    let inputs = check::delta_rule_inputs(&mut Rng::new(17 + d.t as u64), d);
    let want = check::delta_rule_reference(d, &inputs);
    for schedule in [Schedule::Ascending, Schedule::Descending] {
        let got = delta_rule_on_gpu(d, inputs.each_ref().map(|x| &x[..]), schedule);
        for (i, name) in ["o", "dq", "dk", "dv", "dbeta", "dm0"].iter().enumerate() {
            assert_bits(&format!("{d:?} {schedule:?} {name}"), &got[i], &want[i]);
        }
    }
}

/// The harmonic scan's outputs, as the interpreter computes them: y, dr, dw, dv, dγ.
fn harmonic_scan_on_gpu(
    d: &harmonic_scan::Dims,
    ins: [&[f32]; 5],
    schedule: Schedule,
    blocks_per_sm: usize,
) -> Vec<Vec<f32>> {
    let mut mem = Memory::new();
    let [r, w, v, gamma, dy] = ins.map(|x| mem.upload(x));
    let (nl, nd) = (d.b * d.t * d.h * d.l, d.b * d.t * d.h * d.d);
    let outs = [nd, nl, nl, nd, d.h * d.l].map(|n| (mem.alloc(n), n));
    let [y, dr, dw, dv, dg] = outs.map(|x| x.0);
    let (chunk_at, parts_at, total) = d.scratch_floats().unwrap();
    let scratch = mem.alloc(total);
    let at = |f: usize| scratch + 4 * f as u64;
    let fwd = module(&harmonic_scan::forward_kernel(
        d,
        if blocks_per_sm > 1 { harmonic_scan::FORWARD_BLOCKS_PER_SM } else { 1 },
    ));
    fwd.launch(
        blocks(d.b * d.h * d.d),
        256,
        &harmonic_scan::forward_arguments([y, r, w, v, gamma]),
        &mut mem,
        schedule,
    )
    .unwrap();
    let bwd_kernel = harmonic_scan::backward_kernel(d, blocks_per_sm).unwrap();
    let threads = bwd_kernel.block_threads().unwrap();
    let args =
        harmonic_scan::backward_arguments([dr, dw, dv], [at(parts_at), at(0), at(chunk_at)], [r, w, v, gamma, dy]);
    module(&bwd_kernel).launch((d.b * d.h) as u32, threads, &args, &mut mem, schedule).unwrap();
    let sum = module(&window_sum_kernel(d.h * d.l, d.b));
    sum.launch(blocks(d.h * d.l), 256, &window_sum_arguments([dg, at(parts_at)]), &mut mem, schedule).unwrap();
    outs.iter().map(|&(a, n)| mem.read(a, n)).collect()
}

#[test]
fn the_harmonic_scan_kernels_give_the_cpus_bits() {
    for d in [
        harmonic_scan::Dims { b: 2, t: 13, h: 2, l: 3, d: 7 },
        harmonic_scan::Dims { b: 1, t: 30, h: 3, l: 2, d: 33 },
        harmonic_scan::Dims { b: 3, t: 2, h: 1, l: 1, d: 1 },
        // Diakosmos's heads, over three replayed chunks (the last shorter).
        harmonic_scan::Dims { b: 1, t: 40, h: 7, l: 8, d: 190 },
    ] {
        check_harmonic_scan(&d);
    }
}

/// The harmonic scan at `d` on random inputs shaped as Diakosmos's.
fn check_harmonic_scan(d: &harmonic_scan::Dims) {
    let inputs = check::harmonic_scan_inputs(&mut Rng::new(29 + d.t as u64), d);
    let want = check::harmonic_scan_reference(d, &inputs);
    // The backward written for two blocks an SM (three positions a group) and for one (four).
    for per_sm in [harmonic_scan::BACKWARD_BLOCKS_PER_SM, 1] {
        for schedule in [Schedule::Ascending, Schedule::Descending] {
            let got = harmonic_scan_on_gpu(d, inputs.each_ref().map(|x| &x[..]), schedule, per_sm);
            for (i, name) in ["y", "dr", "dw", "dv", "dgamma"].iter().enumerate() {
                assert_bits(&format!("{d:?} {schedule:?} {per_sm} blocks an SM {name}"), &got[i], &want[i]);
            }
        }
    }
}

/// The interpreter itself: the plain recurrence's kernel gives the CPU's bits, and a store past
/// the memory a launch was given is an error, not a silent write.
#[test]
fn the_interpreter_runs_the_plain_recurrence_and_refuses_stray_stores() {
    use alpha_cuda::kernels::recurrence;
    let (b, t, c) = (2, 9, 5);
    let mut rng = Rng::new(3);
    let u = rng.vec(b * t * c, 1.0);
    let gamma = rng.vec(c, 1.0);
    let mut want = vec![0.0f32; b * t * c];
    alpha_cpu::kernels::recurrence::recurrence(&u, &gamma, b, t, false, &mut want);
    let m = module(&recurrence::kernel(b, t, c, false));
    let mut mem = Memory::new();
    let (ua, ga) = (mem.upload(&u), mem.upload(&gamma));
    let out = mem.alloc(b * t * c);
    m.launch(1, 256, &recurrence::arguments([out, ua, ga]), &mut mem, Schedule::Ascending).unwrap();
    assert_bits("recurrence", &mem.read(out, b * t * c), &want);
    // An output placed at the memory's end, one window short.
    let mut short = Memory::new();
    let (ua, ga) = (short.upload(&u), short.upload(&gamma));
    let out = short.alloc(t * c);
    let e = m.launch(1, 256, &recurrence::arguments([out, ua, ga]), &mut short, Schedule::Ascending).unwrap_err();
    assert!(format!("{e:#}").contains("past the memory"), "{e:#}");
}

/// An elementwise chain reading a bias row (repeated over the rows, at each element's column)
/// and a broadcast scalar: `((y + b) + x)·s`, the CPU's f32 arithmetic in the same order, bit
/// for bit, over a length that is not a whole number of rows a block.
#[test]
fn a_chain_reads_its_bias_row_by_column_and_its_scalar_once() {
    use alpha_cuda::kernels::fused::{Broadcast, Chain, Src, Step};
    use alpha_ir::Binary;
    let (rows, cols) = (37, 96);
    let n = rows * cols;
    let chain = Chain {
        n,
        inputs: 4,
        steps: vec![
            Step::Binary(Binary::Add, Src::Input(0), Src::Input(1)),
            Step::Binary(Binary::Add, Src::Step(0), Src::Input(2)),
            Step::Binary(Binary::Mul, Src::Step(1), Src::Input(3)),
        ],
        outputs: vec![2],
        bf16: vec![false],
        broadcast: vec![Broadcast::None, Broadcast::Row(cols as u32), Broadcast::None, Broadcast::Scalar],
    };
    let mut rng = Rng::new(3);
    let (y, b, x) = (rng.vec(n, 1.0), rng.vec(cols, 1.0), rng.vec(n, 1.0));
    let s = [0.75f32];
    let want: Vec<f32> = (0..n).map(|i| ((y[i] + b[i % cols]) + x[i]) * s[0]).collect();
    for schedule in [Schedule::Ascending, Schedule::Descending] {
        let mut mem = Memory::new();
        let ins = [&y[..], &b[..], &x[..], &s[..]].map(|v| mem.upload(v));
        let out = mem.alloc(n);
        let args = [out, ins[0], ins[1], ins[2], ins[3]];
        let (blocks, threads) = (n.div_ceil(256) as u32, 256);
        module(&chain.kernel().unwrap()).launch(blocks, threads, &args, &mut mem, schedule).unwrap();
        assert_bits(&chain.name(), &mem.read(out, n), &want);
    }
}

/// The column sum's first pass that also stores its tensor's bf16 cast gives the host's sums in
/// the kernel's order ([`check::column_pass_reference`]) bit for bit, as the plain pass does, and
/// every element of the cast rounded to nearest even (the guard after it untouched; with the
/// cast's rows at a pitch, each row's tail past its columns untouched), under both
/// orders of a block's threads: one chunk (a Mean, finished by the pass), several chunks with a
/// ragged last tile and chunk, and columns that fill whole tiles.
#[test]
fn the_column_sum_storing_its_cast_gives_the_hosts_bits() {
    use alpha_cuda::kernels::reduce::{self, Reduction};
    use alpha_ir::Reduce;
    for (shape, kind) in [([5usize, 40usize], Reduce::Mean), ([1000, 70], Reduce::Sum), ([640, 96], Reduce::Sum)] {
        let r = Reduction::new(kind, &shape, &[0], DType::F32, DType::F32).unwrap();
        let n = shape[0] * shape[1];
        let x = Rng::new(n as u64).vec(n, 1.0);
        let want = check::column_pass_reference(&r, &x);
        let cast_want: Vec<u16> = x.iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect();
        let (grid, threads) = ([r.grid().0, r.grid().1, 1], [reduce::THREADS, 1, 1]);
        for schedule in [Schedule::Ascending, Schedule::Descending] {
            let name = format!("{shape:?} {kind:?} {schedule:?}");
            let mut mem = Memory::new();
            let xa = mem.upload(&x);
            // Each pass's outputs fresh (NaN until written).
            let fresh = |mem: &mut Memory| [mem.alloc(r.outputs()), mem.alloc(want.len())];
            let stored = |mem: &Memory, [out, partials]: [u64; 2]| match r.chunks() {
                1 => mem.read(out, r.outputs()),
                _ => mem.read(partials, want.len()),
            };
            let [out, partials] = fresh(&mut mem);
            // The cast's n bf16 values and a guard after them, in floats' room.
            let cast = mem.alloc((n + 2) / 2);
            let guard = mem.read_u16(cast + 2 * n as u64, 1)[0];
            let args = reduce::cast_arguments([out, xa, partials, cast]);
            module(&r.column_cast_kernel().unwrap()).launch_3d(grid, threads, &args, &mut mem, schedule).unwrap();
            assert_bits(&name, &stored(&mem, [out, partials]), &want);
            let copy = mem.read_u16(cast, n + 1);
            assert_eq!(&copy[..n], &cast_want[..], "{name}: the cast");
            assert_eq!(copy[n], guard, "{name}: the guard after the cast");
            let [out, partials] = fresh(&mut mem);
            let args = reduce::arguments([out, xa, partials]);
            module(&r.kernel()).launch_3d(grid, threads, &args, &mut mem, schedule).unwrap();
            assert_bits(&format!("{name} plain"), &stored(&mem, [out, partials]), &want);
            // The cast with its rows at a pitch of 128 bytes (`lower::padded`): each row's
            // values at row·pitch, its tail as it was.
            let (rows, cols) = (shape[0], shape[1]);
            let pitch = (cols + 1).div_ceil(64) * 64;
            let [out, partials] = fresh(&mut mem);
            let cast = mem.alloc(rows * pitch / 2);
            let before = mem.read_u16(cast, rows * pitch);
            let args = reduce::cast_arguments([out, xa, partials, cast]);
            let pitched = r.column_cast_kernel_pitched(pitch).unwrap();
            module(&pitched).launch_3d(grid, threads, &args, &mut mem, schedule).unwrap();
            assert_bits(&format!("{name} pitched"), &stored(&mem, [out, partials]), &want);
            let copy = mem.read_u16(cast, rows * pitch);
            for row in 0..rows {
                let (at, from) = (row * pitch, row * cols);
                assert_eq!(&copy[at..at + cols], &cast_want[from..from + cols], "{name}: pitched row {row}");
                assert_eq!(&copy[at + cols..at + pitch], &before[at + cols..at + pitch], "{name}: row {row}'s tail");
            }
            assert!(r.column_cast_kernel_pitched(cols - 1).is_err(), "a pitch narrower than the rows");
        }
        assert_eq!(r.chunks() > 1, shape[0] > 64, "{shape:?}: the chunks the case means to cover");
    }
}

/// A LayerNorm forward storing bf16 y with its rows at a pitch (a matrix the padded products
/// read in place, `lower::padded`) stores the unpitched kernel's values, row by row, and the
/// same means and reciprocal deviations, under both orders of a block's threads.
#[test]
fn a_layernorm_storing_bf16_at_a_pitch_gives_the_same_values() {
    use alpha_cuda::kernels::layernorm::{self, Norm};
    for (rows, cols, pitch) in [(5usize, 40usize, 48usize), (40, 70, 128), (40, 330, 384)] {
        let norm = Norm { rows, c: cols };
        let mut rng = Rng::new(cols as u64);
        let (xs, gain, bias) = (rng.vec(norm.rows * cols, 2.0), rng.vec(cols, 1.0), rng.vec(cols, 1.0));
        let mut mem = Memory::new();
        let ins = [&xs, &gain, &bias].map(|v| mem.upload(v));
        let run = |mem: &mut Memory, kernel: alpha_cuda::ptx::Kernel, width: usize, schedule| {
            let (y, mean, rstd) = (mem.alloc(norm.rows * width / 2), mem.alloc(norm.rows), mem.alloc(norm.rows));
            let args = layernorm::forward_arguments([y, mean, rstd, ins[0], ins[1], ins[2]]);
            let grid = [norm.rows as u32, 1, 1];
            module(&kernel).launch_3d(grid, [layernorm::THREADS, 1, 1], &args, mem, schedule).unwrap();
            (mem.read_u16(y, norm.rows * width), mem.read(mean, norm.rows), mem.read(rstd, norm.rows))
        };
        for schedule in [Schedule::Ascending, Schedule::Descending] {
            let plain = run(&mut mem, layernorm::forward_kernel_storing(norm, 1e-5, true), cols, schedule);
            let pitched = run(&mut mem, layernorm::forward_kernel_pitched(norm, 1e-5, pitch).unwrap(), pitch, schedule);
            let name = format!("layernorm [{}, {cols}] at pitch {pitch}, {schedule:?}", norm.rows);
            assert_bits(&format!("{name}: mean"), &pitched.1, &plain.1);
            assert_bits(&format!("{name}: rstd"), &pitched.2, &plain.2);
            for row in 0..norm.rows {
                assert_eq!(
                    &pitched.0[row * pitch..row * pitch + cols],
                    &plain.0[row * cols..(row + 1) * cols],
                    "{name}"
                );
            }
        }
    }
}

/// A column sum and a bf16 cast of the same tensor, lowered, run as one launch: the sum's pass
/// storing the cast into the cast's slot, the sum into the sum's (one chunk of rows: no
/// finishing launch). Run by the interpreter under both orders of a block's threads, the sum
/// gives the host's bits in the kernel's order and the cast round-to-nearest-even's.
#[test]
fn a_lowered_column_sum_stores_the_cast_of_its_tensor() {
    use alpha_cuda::kernels::reduce::Reduction;
    use alpha_ir::{Graph, Init, Reduce};
    let (rows, cols) = (48, 40);
    let mut g = Graph::new("column-cast");
    let x = g.param("x", &[rows, cols], Init::Zeros);
    let y = g.scale(x, 1.0);
    let sum = g.sum(y, &[0], false);
    let cast = g.cast(y, DType::BF16);
    let outputs = [("sum".to_string(), sum), ("cast".to_string(), cast)].into_iter().collect();
    let program = alpha_ir::Program::single(g.finish().unwrap(), "forward", outputs);
    let lowered = alpha_cuda::lower::lower_program(&program, &alpha_cuda::CudaConfig::default()).unwrap();
    let names: Vec<&str> = lowered.phases[0].iter().map(|l| lowered.kernels[l.kernel].name.as_str()).collect();
    assert_eq!(names[1..], ["reduce_sum_columns_cast"], "the scale, then the sum storing the cast");
    let xs = Rng::new(9).vec(rows * cols, 3.0);
    let ys: Vec<f32> = xs.iter().map(|&v| v * 1.0).collect();
    let r = Reduction::new(Reduce::Sum, &[rows, cols], &[0], DType::F32, DType::F32).unwrap();
    let want = check::column_pass_reference(&r, &ys);
    let want_cast: Vec<u16> = ys.iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect();
    for schedule in [Schedule::Ascending, Schedule::Descending] {
        let (mem, base) =
            alpha_cuda_lab::interp::run_lowered_with(&lowered, 0, &[("x", xs.clone())], schedule).unwrap();
        let at = |v: alpha_ir::Value| base + lowered.plan.slot(v).offset as u64;
        assert_bits(&format!("sum {schedule:?}"), &mem.read(at(sum), cols), &want);
        assert_eq!(mem.read_u16(at(cast), rows * cols), want_cast, "cast {schedule:?}");
    }
}

/// The LayerNorm backward that also sums the columns of what it stores, run by the interpreter
/// under both orders of a block's threads (warp shuffles included): dx (with the residual added,
/// and its bf16 copy) and the gain and bias partials the plain kernel's bits, the column sums each
/// band's stored rows added in order, and the column sum's finishing pass over them the host's
/// bits in its order ([`check::finish_reference`]). A ragged shape: a short last band, columns
/// past the last whole 128.
#[test]
fn the_layernorm_backward_summing_its_columns_gives_the_hosts_bits() {
    use alpha_cuda::kernels::layernorm::{self, DxPasses, Norm, BAND};
    use alpha_cuda::kernels::reduce::{self, Reduction};
    use alpha_ir::Reduce;
    let n = Norm { rows: 40, c: 200 };
    let (rows, c, bands) = (n.rows, n.c, n.bands());
    let mut rng = Rng::new(21);
    let (x, gain, dy, r) = (rng.vec(rows * c, 2.0), rng.vec(c, 1.0), rng.vec(rows * c, 1.0), rng.vec(rows * c, 1.0));
    let mean = rng.vec(rows, 0.5);
    let rstd: Vec<f32> = rng.vec(rows, 1.0).iter().map(|v| 1.5 + v).collect();
    let sum = Reduction::new(Reduce::Sum, &[rows, c], &[0], DType::F32, DType::F32).unwrap();
    for (residual, copy) in [(true, true), (false, false)] {
        for schedule in [Schedule::Ascending, Schedule::Descending] {
            let name = format!("residual {residual}, copy {copy}, {schedule:?}");
            let mut mem = Memory::new();
            let ins = [&x, &gain, &mean, &rstd, &dy].map(|v| mem.upload(v));
            let ra = mem.upload(&r);
            let columns = mem.alloc(c * bands);
            // Each kernel's outputs: dx, its bf16 copy, pass 1's partials.
            let run = |mem: &mut Memory, kernel: alpha_cuda::ptx::Kernel, columns: Option<u64>| {
                let (dx, dx16, partials) =
                    (mem.alloc(rows * c), mem.alloc(rows * c / 2), mem.alloc(n.scratch_floats()));
                let passes = match columns {
                    Some(columns) => DxPasses::PartialsAndColumns { partials, columns },
                    None => DxPasses::Partials(partials),
                };
                let tensors = [dx, ins[0], ins[1], ins[2], ins[3], ins[4]];
                let args = layernorm::dx_arguments(tensors, residual.then_some(ra), copy.then_some(dx16), passes);
                let (grid, block) = layernorm::dx_partials_launch(n);
                module(&kernel).launch_3d([grid.0, 1, 1], [block.0, 1, 1], &args, mem, schedule).unwrap();
                let copied = if copy { mem.read_u16(dx16, rows * c) } else { vec![] };
                (mem.read(dx, rows * c), copied, mem.read(partials, n.scratch_floats()))
            };
            let plain = run(&mut mem, layernorm::backward_dx_partials_kernel(n, residual, copy), None);
            let summing =
                run(&mut mem, layernorm::backward_dx_column_partials_kernel(n, residual, copy), Some(columns));
            assert_bits(&format!("{name}: dx"), &summing.0, &plain.0);
            assert_eq!(summing.1, plain.1, "{name}: dx's bf16 copy");
            assert_bits(&format!("{name}: gain and bias partials"), &summing.2, &plain.2);
            let stored = &plain.0;
            let want: Vec<f32> = (0..c * bands)
                .map(|at| {
                    let (j, b) = (at / bands, at % bands);
                    (b * BAND..((b + 1) * BAND).min(rows)).fold(0.0f32, |acc, i| acc + stored[i * c + j])
                })
                .collect();
            assert_bits(&format!("{name}: column sums"), &mem.read(columns, c * bands), &want);
            let out = mem.alloc(c);
            let finish = sum.finish_kernel_over(bands as u32);
            let args = reduce::finish_arguments([out, columns]);
            module(&finish).launch_3d([c as u32, 1, 1], [reduce::THREADS, 1, 1], &args, &mut mem, schedule).unwrap();
            let finished = check::finish_reference_over(&sum, &want, bands);
            assert_bits(&format!("{name}: the finished sums"), &mem.read(out, c), &finished);
        }
    }
}

/// Output "out" of `program`'s forward phase on the CPU backend, after writing the named leaves.
fn cpu_forward_out(program: &alpha_ir::Program, leaves: &[(&str, Vec<f32>)]) -> Vec<f32> {
    use alpha_plan::Backend;
    let mut cpu = alpha_cpu::CpuBackend::compile(program).unwrap();
    for (name, v) in leaves {
        cpu.write(name, v).unwrap();
    }
    cpu.run("forward").unwrap();
    cpu.output("out").unwrap()
}

/// Runs the one-phase program with output "out" (`out`) on the CPU backend and, lowered for the
/// GPU, in the interpreter with the same leaves; asserts the same bits and returns the launches'
/// kernel names.
fn lowered_gives_the_cpus_bits(g: alpha_ir::Graph, out: alpha_ir::Value, leaves: &[(&str, Vec<f32>)]) -> Vec<String> {
    let outputs = [("out".to_string(), out)].into_iter().collect();
    let program = alpha_ir::Program::single(g.finish().unwrap(), "forward", outputs);
    let want = cpu_forward_out(&program, leaves);
    let lowered = alpha_cuda::lower::lower_program(&program, &alpha_cuda::CudaConfig::default()).unwrap();
    let (mem, base) = alpha_cuda_lab::interp::run_lowered(&lowered, 0, leaves).unwrap();
    assert_bits("out", &mem.read(base + lowered.plan.slot(out).offset as u64, want.len()), &want);
    lowered.phases[0].iter().map(|l| lowered.kernels[l.kernel].name.clone()).collect()
}

/// A fused elementwise chain whose later step reads a reshape of an earlier step's value (as
/// Diakosmos's turn reads `reshape(θ · 0.3)`) computes it in the chain: read from its slot it
/// would be that slot's contents before the launch stores it. The lowered program, run by the
/// interpreter, gives the CPU backend's bits.
#[test]
fn a_chain_reads_a_reshape_of_its_own_step_as_the_step() {
    use alpha_ir::{Graph, Init};
    let mut g = Graph::new("reshaped-step");
    let theta = g.param("theta", &[3, 8], Init::Zeros);
    let other = g.param("other", &[3, 1, 8], Init::Zeros);
    let scaled = g.scale(theta, 0.3);
    let angle = g.reshape(scaled, &[3, 1, 8]);
    let twice = g.mul(angle, other);
    let summed = g.add(twice, angle);
    let mut rng = Rng::new(11);
    let leaves = [("theta", rng.vec(24, 2.0)), ("other", rng.vec(24, 2.0))];
    let names = lowered_gives_the_cpus_bits(g, summed, &leaves);
    assert_eq!(names.iter().filter(|n| n.starts_with("ew_")).count(), 1, "the three nodes run as one chain: {names:?}");
}

/// A chain reads values held over the output's last axes (`[N, 3, 1]` and `[3, 1]` against
/// `[N, 3, 4]`: a unit vector's inverse norm, a per-group gain) at `(i / inner) mod count`,
/// and gives the CPU backend's bits.
#[test]
fn a_chain_reads_per_group_values_held_over_the_last_axes() {
    use alpha_ir::{Graph, Init};
    let mut g = Graph::new("held-values");
    let x = g.param("x", &[5, 3, 4], Init::Zeros);
    let inv = g.param("inv", &[5, 3, 1], Init::Zeros);
    let gain = g.param("gain", &[3, 1], Init::Zeros);
    let scaled = g.mul(x, inv);
    let gained = g.mul(scaled, gain);
    let out = g.sub(gained, x);
    let mut rng = Rng::new(5);
    let leaves = [("x", rng.vec(60, 2.0)), ("inv", rng.vec(15, 2.0)), ("gain", rng.vec(3, 2.0))];
    let names = lowered_gives_the_cpus_bits(g, out, &leaves);
    assert_eq!(names, ["ew_mul_mul_sub_g1x15b4_g2x3b4"], "one chain reading both held values");
}

/// A chain's nodes share their element count, not always their shape: a held value is read
/// against the shape of the node that reads it (`[1, 3, 1]` against a `[2, 3, 2]` view of the
/// `[2, 6]` step before), as Diakosmos's running mean divides `[B, T, W]` by the count `[1, T, 1]`
/// in a run that starts on `[B·T, G, D]`. Read against the first node's shape it was read as
/// twelve values of a three-value tensor.
#[test]
fn a_chain_reads_a_held_value_against_its_readers_shape() {
    use alpha_ir::{Graph, Init};
    let mut g = Graph::new("held-against-reader");
    let x = g.param("x", &[2, 6], Init::Zeros);
    let count = g.param("count", &[1, 3, 1], Init::Zeros);
    let e = g.square(x);
    let e3 = g.reshape(e, &[2, 3, 2]);
    let out = g.mul(e3, count);
    let mut rng = Rng::new(3);
    let leaves = [("x", rng.vec(12, 1.0)), ("count", rng.vec(3, 2.0))];
    let names = lowered_gives_the_cpus_bits(g, out, &leaves);
    assert_eq!(names, ["ew_square_mul_g1x3b2"], "one chain reading the count as held over the last axis");
}

/// The simple product `p` of f32 `a` and `b`, as the interpreter computes it: one launch where K
/// is whole; the parts into partials and the split-K sum where it is split.
fn simple_product_on_gpu(p: &Product, a: &[f32], b: &[f32], schedule: Schedule) -> Vec<f32> {
    use alpha_cuda::kernels::gemm::{self, GemmSpec, Input, Layout};
    let mut mem = Memory::new();
    // bf16 operands (already rounded to bf16) as their upper halves.
    let mut upload = |x: &[f32]| match p.dtype {
        DType::BF16 => {
            let at = mem.alloc_zeroed(x.len() * 2);
            let halves: Vec<u8> = x.iter().flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes()).collect();
            mem.write_bytes(at, &halves);
            at
        }
        _ => mem.upload(x),
    };
    let (aa, ba) = (upload(a), upload(b));
    let mn = p.batch * p.m * p.n;
    let c = mem.alloc(mn);
    let ((x, y, z), (bx, by, bz)) = (p.grid(), p.block());
    let product = module(&p.kernel());
    if p.splits == 1 {
        product.launch_3d([x, y, z], [bx, by, bz], &[c, aa, ba], &mut mem, schedule).unwrap();
        return mem.read(c, mn);
    }
    let partials = mem.alloc(mn * p.splits as usize);
    product.launch_3d([x, y, z], [bx, by, bz], &[partials, aa, ba], &mut mem, schedule).unwrap();
    let width = gemm::splitk_reduce_width(mn as u32, true);
    let store = GemmSpec::new(Layout::RowMajor, Layout::RowMajor, Input::F32);
    let sum = module(&gemm::splitk_reduce_kernel(&store, p.splits, mn as u32, width));
    let args = gemm::splitk_reduce_arguments([c, c, partials], None);
    sum.launch(gemm::splitk_reduce_blocks(mn as u32, width), gemm::REDUCE_THREADS, &args, &mut mem, schedule).unwrap();
    mem.read(c, mn)
}

/// Element (z, i, t) of `op(A)` and (z, t, j) of `op(B)` for `p`'s layouts.
fn operand_at(p: &Product, a: &[f32], b: &[f32], z: usize, i: usize, j: usize, t: usize) -> (f32, f32) {
    let (m, n, k) = (p.m, p.n, p.k);
    let av = if p.ta { a[z * k * m + t * m + i] } else { a[z * m * k + i * k + t] };
    let zb = if p.b_batched { z } else { 0 };
    let bv = if p.tb { b[zb * n * k + j * k + t] } else { b[zb * k * n + t * n + j] };
    (av, bv)
}

/// What the kernels promise, in f32: each part of K (⌈K/S⌉ long, the last shorter) one fused
/// multiply-add chain in order from zero, the parts then added in order.
fn chained_in_parts(p: &Product, a: &[f32], b: &[f32]) -> Vec<f32> {
    let part = p.k.div_ceil(p.splits as usize);
    let mut out = vec![];
    for z in 0..p.batch {
        for i in 0..p.m {
            for j in 0..p.n {
                let sums: Vec<f32> = (0..p.splits as usize)
                    .map(|s| {
                        (s * part..((s + 1) * part).min(p.k)).fold(0.0f32, |acc, t| {
                            let (x, y) = operand_at(p, a, b, z, i, j, t);
                            x.mul_add(y, acc)
                        })
                    })
                    .collect();
                out.push(sums[1..].iter().fold(sums[0], |acc, &x| acc + x));
            }
        }
    }
    out
}

/// Each element within f32 rounding of the f64 product: `|got − want| ≤ 1e-5 · Σ|a·b|`.
fn assert_near_f64(name: &str, p: &Product, a: &[f32], b: &[f32], got: &[f32]) {
    let mut e = 0;
    for z in 0..p.batch {
        for i in 0..p.m {
            for j in 0..p.n {
                let (mut want, mut mag) = (0.0f64, 0.0f64);
                for t in 0..p.k {
                    let (x, y) = operand_at(p, a, b, z, i, j, t);
                    want += x as f64 * y as f64;
                    mag += (x as f64 * y as f64).abs();
                }
                let d = (got[e] as f64 - want).abs();
                assert!(d <= 1e-5 * mag + 1e-30, "{name}[{z},{i},{j}]: {} vs {want} (Σ|a·b| {mag})", got[e]);
                e += 1;
            }
        }
    }
}

/// The simple product with K whole or split into parts (even and uneven, an empty last part),
/// every layout, B batched or shared, outputs a whole number of four elements (the sum's
/// 16-byte accesses) or not: each element is its parts' chains added in order, bit for bit,
/// under both orders of a block's threads, and within f32 rounding of the f64 product.
#[test]
fn the_simple_product_sums_its_parts_of_k_in_a_fixed_order() {
    let mut rng = Rng::new(5);
    for (batch, m, n, k, splits) in [
        (2, 5, 7, 50, 1),
        (2, 5, 7, 50, 3),
        (2, 4, 6, 64, 4),
        (1, 17, 3, 9, 4),
        (3, 2, 18, 40, 2),
        (2, 20, 33, 70, 1),
        (1, 20, 33, 70, 3),
    ] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            for b_batched in [true, false] {
                let p = Product { batch, m, n, k, ta, tb, b_batched, dtype: DType::F32, splits, c_view: None };
                let a = rng.vec(batch * m * k, 1.0);
                let b = rng.vec(if b_batched { batch } else { 1 } * k * n, 1.0);
                let want = chained_in_parts(&p, &a, &b);
                for schedule in [Schedule::Ascending, Schedule::Descending] {
                    let got = simple_product_on_gpu(&p, &a, &b, schedule);
                    let name = format!("{p:?} {schedule:?}");
                    assert_bits(&name, &got, &want);
                    assert_near_f64(&name, &p, &a, &b, &got);
                }
            }
        }
    }
}

/// bf16 operands, widened exactly on load, give the same chains over their f32 values.
#[test]
fn the_simple_product_widens_bf16_operands_exactly() {
    use alpha_cuda::kernels::gemm::bf16_round;
    let mut rng = Rng::new(6);
    for splits in [1, 3] {
        let p = Product {
            batch: 2,
            m: 5,
            n: 6,
            k: 30,
            ta: true,
            tb: true,
            b_batched: true,
            dtype: DType::BF16,
            splits,
            c_view: None,
        };
        let a: Vec<f32> = rng.vec(p.batch * p.m * p.k, 1.0).into_iter().map(bf16_round).collect();
        let b: Vec<f32> = rng.vec(p.batch * p.k * p.n, 1.0).into_iter().map(bf16_round).collect();
        let got = simple_product_on_gpu(&p, &a, &b, Schedule::Ascending);
        assert_bits(&format!("{p:?}"), &got, &chained_in_parts(&p, &a, &b));
    }
}

/// Splitting changes the rounding, not the meaning: the same product in one chain and in four
/// parts differ in some bits (so the check above tells the orders apart) but both are near.
#[test]
fn split_and_whole_products_differ_only_by_rounding() {
    let mut rng = Rng::new(8);
    let p = Product {
        batch: 1,
        m: 6,
        n: 8,
        k: 400,
        ta: true,
        tb: false,
        b_batched: true,
        dtype: DType::F32,
        splits: 1,
        c_view: None,
    };
    let (a, b) = (rng.vec(p.m * p.k, 1.0), rng.vec(p.k * p.n, 1.0));
    let whole = simple_product_on_gpu(&p, &a, &b, Schedule::Ascending);
    let split = Product { splits: 4, ..p };
    let parts = simple_product_on_gpu(&split, &a, &b, Schedule::Ascending);
    assert!(whole.iter().zip(&parts).any(|(x, y)| x.to_bits() != y.to_bits()));
    assert_near_f64("whole", &p, &a, &b, &whole);
    assert_near_f64("split", &split, &a, &b, &parts);
}

/// Long-K f32 products lowered whole (`xᵀ·y` batched, as Diakosmos's weight gradient, and
/// `x·wᵀ` with a shared 2-D weight), run launch by launch by the interpreter: the lowering
/// splits K, the result is the parts' chains added in order, bit for bit, and within f32
/// rounding of the CPU backend (which sums in another order).
#[test]
fn lowered_long_k_products_run_split_and_match_the_cpu() {
    use alpha_cuda::lower::lower_program;
    use alpha_cuda::CudaConfig;
    use alpha_ir::{Graph, Init, Program};

    // (batch, m, n, k, ta, tb, b batched): 4 and 1 blocks, K of 4,096 and 2,560; the first
    // on the tiles, the third (N = 40) on the deep kernel.
    for (batch, m, n, k, ta, tb, b_batched) in
        [(2, 8, 19, 4096, true, false, true), (1, 5, 6, 2560, false, true, false), (2, 8, 40, 4096, true, false, true)]
    {
        let mut g = Graph::new("long-k");
        let a_shape = if ta { [batch, k, m] } else { [batch, m, k] };
        let b_shape: Vec<usize> = match (b_batched, tb) {
            (true, false) => vec![batch, k, n],
            (true, true) => vec![batch, n, k],
            (false, false) => vec![k, n],
            (false, true) => vec![n, k],
        };
        let a = g.param("a", &a_shape, Init::Zeros);
        let b = g.param("b", &b_shape, Init::Zeros);
        let y = g.matmul_t(a, b, ta, tb);
        let outputs = [("out".to_string(), y)].into_iter().collect();
        let program = Program::single(g.finish().unwrap(), "forward", outputs);
        let mut rng = Rng::new(k as u64);
        let av = rng.vec(a_shape.iter().product(), 1.0);
        let bv = rng.vec(b_shape.iter().product(), 1.0);
        let leaves: Vec<(&str, Vec<f32>)> = vec![("a", av.clone()), ("b", bv.clone())];

        let want = cpu_forward_out(&program, &leaves);

        let lowered = lower_program(&program, &CudaConfig::default()).unwrap();
        let p = Product { batch, m, n, k, ta, tb, b_batched, dtype: DType::F32, splits: 1, c_view: None };
        let p = Product { splits: p.split_k(), ..p };
        assert!(p.splits > 1, "{p:?}");
        let names: Vec<&str> = lowered.phases[0].iter().map(|l| lowered.kernels[l.kernel].name.as_str()).collect();
        assert_eq!(names[0], p.kernel().name, "{names:?}");
        assert!(names[0].starts_with("gemm_simple") && names[0].ends_with(&format!("_split{}", p.splits)));
        assert!(names[1].starts_with(&format!("gemm_splitk{}_store", p.splits)), "{names:?}");
        let (mem, base) = alpha_cuda_lab::interp::run_lowered(&lowered, 0, &leaves).unwrap();
        let got = mem.read(base + lowered.plan.slot(y).offset as u64, batch * m * n);
        assert_bits("lowered", &got, &chained_in_parts(&p, &av, &bv));
        assert_near_f64("lowered", &p, &av, &bv, &got);
        // Operands in [-1, 1]: Σ|a·b| ≤ K bounds either order's rounding error.
        for (e, (x, w)) in got.iter().zip(&want).enumerate() {
            assert!((x - w).abs() <= 1e-5 * k as f32, "out[{e}]: interpreted {x} vs CPU {w}");
        }
    }
}

/// Diakosmos's thin products scaled down (M not a multiple of any tile, batch 3), on the
/// coverings [`Product::tiling`] gives them, every layout of the short-K one and B batched or
/// shared: each element is its parts' chains over K in order, bit for bit, under both orders
/// of a block's threads. Short K takes the lanes (with a K of 20, runs of 8 and single steps),
/// N ≤ 16 with K ≥ 32 the rows, M ≤ 16 with a long K the deep kernel: whole, split by the
/// rule, or in 16 parts the last of which start past K.
#[test]
fn the_simple_product_on_thin_shapes_keeps_every_chain() {
    use alpha_cuda::kernels::gemm::simple::Tiling;
    let mut rng = Rng::new(12);
    // (m, n, k, ta, tb, b batched, parts: 0 for the split rule's).
    let mut cases = vec![];
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        cases.push((300, 190, 8, ta, tb, true, 0));
    }
    cases.extend([
        (300, 190, 8, false, false, false, 0),
        (37, 40, 20, false, false, true, 0),
        (300, 8, 190, false, true, true, 0),
        (700, 8, 190, false, true, false, 0),
        (700, 5, 70, true, false, true, 0),
        (8, 190, 4100, true, false, true, 0),
        (5, 40, 300, true, false, false, 0),
        (16, 33, 2100, true, false, true, 0),
        (1, 64, 100, true, false, true, 0),
        (3, 35, 33, true, false, true, 16),
    ]);
    for (m, n, k, ta, tb, b_batched, parts) in cases {
        let p = Product { batch: 3, m, n, k, ta, tb, b_batched, dtype: DType::F32, splits: 1, c_view: None };
        let p = Product { splits: if parts == 0 { p.split_k() } else { parts }, ..p };
        assert_ne!(p.tiling(), Tiling::Tiles, "{p:?}");
        let a = rng.vec(p.batch * m * k, 1.0);
        let b = rng.vec(if b_batched { p.batch } else { 1 } * k * n, 1.0);
        let want = chained_in_parts(&p, &a, &b);
        for schedule in [Schedule::Ascending, Schedule::Descending] {
            let name = format!("{p:?} {:?} {schedule:?}", p.tiling());
            assert_bits(&name, &simple_product_on_gpu(&p, &a, &b, schedule), &want);
        }
    }
}

/// Diakosmos's thin products whole (`x·w` with K = 8, `x·wᵀ` with N = 8, `xᵀ·y` with M = 8
/// and a K too short to split), lowered and run by the interpreter, give the CPU backend's
/// bits: each is one fused multiply-add chain over K in order from zero (K under the CPU
/// kernel's block of K).
#[test]
fn lowered_thin_products_give_the_cpus_bits() {
    use alpha_ir::{Graph, Init};
    for (m, n, k, ta, tb, kernel) in [
        (300, 190, 8, false, false, "gemm_simple_lanes4x6"),
        (300, 8, 190, false, true, "gemm_simple_rows"),
        (8, 190, 200, true, false, "gemm_simple_deep"),
    ] {
        let mut g = Graph::new("thin");
        let x = g.param("x", &if ta { [3, k, m] } else { [3, m, k] }, Init::Zeros);
        let w = g.param("w", &if tb { [3, n, k] } else { [3, k, n] }, Init::Zeros);
        let y = g.matmul_t(x, w, ta, tb);
        let mut rng = Rng::new(k as u64);
        let leaves = [("x", rng.vec(3 * m * k, 1.0)), ("w", rng.vec(3 * k * n, 1.0))];
        let names = lowered_gives_the_cpus_bits(g, y, &leaves);
        assert_eq!(names, [kernel]);
    }
}

/// Runs the one-phase `program` (output "out" at `out`) lowered with the rule `off` turns off
/// and without it, in the interpreter under both schedules, asserting the CPU backend's bits
/// each time; returns, with the rule and without, (the launches computing a node `counted`
/// matches, all launches).
fn with_and_without(
    program: &alpha_ir::Program,
    out: alpha_ir::Value,
    leaves: &[(&str, Vec<f32>)],
    off: fn(&mut alpha_cuda::CudaConfig),
    counted: fn(&alpha_ir::Op) -> bool,
) -> [(usize, usize); 2] {
    let want = cpu_forward_out(program, leaves);
    [true, false].map(|on| {
        let mut cfg = alpha_cuda::CudaConfig::default();
        if !on {
            off(&mut cfg);
        }
        let lowered = alpha_cuda::lower::lower_program(program, &cfg).unwrap();
        for schedule in [Schedule::Ascending, Schedule::Descending] {
            let (mem, base) = alpha_cuda_lab::interp::run_lowered_with(&lowered, 0, leaves, schedule).unwrap();
            let got = mem.read(base + lowered.plan.slot(out).offset as u64, want.len());
            assert_bits(&format!("rule on: {on}, {schedule:?}"), &got, &want);
        }
        let g = &lowered.plan.program.graph;
        let launches = &lowered.phases[0];
        let hits = launches.iter().filter(|l| l.node.is_some_and(|id| counted(&g.nodes[id as usize].op))).count();
        (hits, launches.len())
    })
}

/// A Concat along an axis with rows before it (so its parts are copied, not placed) whose parts
/// are a permute of a computed tensor (through a reshape) and a slice of another, beside a
/// computed part, as Diakosmos's q/k/v gradient and its spatial path's lone group: the Concat's
/// copies read through the permute and the slice, which do not launch, and the output is the
/// CPU backend's, under both orders of a block's threads (`concat_views`).
#[test]
fn a_concat_reads_its_permuted_and_sliced_parts_through_their_views() {
    use alpha_ir::{Graph, Init};
    let (n, groups, d) = (37, 3, 5);
    let mut g = Graph::new("concat-views");
    let a = g.param("a", &[groups, n, d], Init::Zeros);
    let b = g.param("b", &[groups, n, d], Init::Zeros);
    let z = g.param("z", &[n, 4, d], Init::Zeros);
    let by_head = g.mul(a, b);
    let turned = g.permute(by_head, &[1, 0, 2]);
    let flat = g.reshape(turned, &[n, groups * d]);
    let sq = g.square(z);
    let lone = g.slice(sq, 1, 2, 3);
    let lone = g.reshape(lone, &[n, d]);
    let other = g.slice(a, 0, 0, 1);
    let other = g.reshape(other, &[n, d]);
    let other = g.add(other, other);
    let out = g.concat(&[other, flat, lone], 1);
    let outputs = [("out".to_string(), out)].into_iter().collect();
    let program = alpha_ir::Program::single(g.finish().unwrap(), "forward", outputs);
    let mut rng = Rng::new(17);
    let leaves =
        [("a", rng.vec(groups * n * d, 2.0)), ("b", rng.vec(groups * n * d, 2.0)), ("z", rng.vec(n * 4 * d, 2.0))];
    let views = |op: &alpha_ir::Op| matches!(op, alpha_ir::Op::Permute { .. } | alpha_ir::Op::Slice { .. });
    // (Without the permute storing the product in its place either.)
    let off = |c: &mut alpha_cuda::CudaConfig| {
        c.concat_views = false;
        c.permuted_stores = false;
    };
    let [on, off] = with_and_without(&program, out, &leaves, off, views);
    assert_eq!((on.0, off.0), (0, 2), "the permute and the slice launch only without the fusion");
    assert_eq!(on.1 + 2, off.1);
}

/// A Concat whose parts are per-head products turned back by a permute `[1, 0, 2]` (through a
/// reshape), beside a computed part, as Diakosmos's q/k/v gradients: each product stores
/// straight into its place in the Concat (its kernel through C's row and head steps), neither
/// its permute nor its copy launches, and the output is the CPU backend's under both orders
/// of a block's threads, for each covering of C the simple kernel has here (short K on the
/// lanes, few columns on the rows, the tiles) (`products_into_concats`).
#[test]
fn products_store_into_their_place_in_a_concat() {
    use alpha_ir::{Graph, Init};
    let (n, heads) = (37, 3);
    // (K, N): the lanes (K ≤ 32, N ≥ 32), the rows (N ≤ 16, K ≥ 32, M ≥ 128), the tiles.
    for (kd, d, rows, covering) in [(8, 40, n, "lanes"), (40, 8, 130, "rows"), (40, 20, n, "gemm_simple_c")] {
        let mut g = Graph::new("products-into-concat");
        let a = g.param("a", &[heads, rows, kd], Init::Zeros);
        let w = g.param("w", &[heads, kd, d], Init::Zeros);
        let z = g.param("z", &[rows, 5], Init::Zeros);
        let a2 = g.square(a);
        let mut parts = vec![g.square(z)];
        for x in [a, a2] {
            let by_head = g.matmul(x, w);
            let turned = g.permute(by_head, &[1, 0, 2]);
            parts.push(g.reshape(turned, &[rows, heads * d]));
        }
        let out = g.concat(&parts, 1);
        let outputs = [("out".to_string(), out)].into_iter().collect();
        let program = alpha_ir::Program::single(g.finish().unwrap(), "forward", outputs);
        let mut rng = Rng::new(23);
        let leaves = [
            ("a", rng.vec(heads * rows * kd, 1.0)),
            ("w", rng.vec(heads * kd * d, 1.0)),
            ("z", rng.vec(rows * 5, 1.0)),
        ];
        let copies = |op: &alpha_ir::Op| matches!(op, alpha_ir::Op::Permute { .. } | alpha_ir::Op::Concat { .. });
        let off = |c: &mut alpha_cuda::CudaConfig| c.products_into_concats = false;
        let [on, off] = with_and_without(&program, out, &leaves, off, copies);
        assert_eq!((on.0, off.0), (1, 3), "K {kd}, N {d}: only the computed part's copy stays, from 3 Concat copies");
        assert_eq!(on.1 + 2, off.1);
        let lowered = alpha_cuda::lower::lower_program(&program, &alpha_cuda::CudaConfig::default()).unwrap();
        let names: Vec<&str> = lowered.phases[0].iter().map(|l| lowered.kernels[l.kernel].name.as_str()).collect();
        let into = format!("_c{}x{d}", 5 + 2 * heads * d);
        let stored = names.iter().filter(|x| x.contains(covering) && x.ends_with(&into)).count();
        assert_eq!(stored, 2, "both products on the {covering} covering store through the view: {names:?}");
    }
}

/// Diakosmos's spatial path in small, over `n` positions of 7 groups of `d`: params `u`
/// `[n, 7, d]` and `c` `[3, 1, d]`, `sq = u²`, and the two halves (`[n, 3, 1, d]` each) of its
/// first six groups paired.
struct Spatial {
    u: alpha_ir::Value,
    c: alpha_ir::Value,
    sq: alpha_ir::Value,
    first: alpha_ir::Value,
    second: alpha_ir::Value,
}

fn spatial_halves(g: &mut alpha_ir::Graph, n: usize, d: usize) -> Spatial {
    use alpha_ir::Init;
    let u = g.param("u", &[n, 7, d], Init::Zeros);
    let c = g.param("c", &[3, 1, d], Init::Zeros);
    let sq = g.square(u);
    let paired = g.slice(sq, 1, 0, 6);
    let paired = g.reshape(paired, &[n, 3, 2, d]);
    let first = g.slice(paired, 2, 0, 1);
    let second = g.slice(paired, 2, 1, 2);
    Spatial { u, c, sq, first, second }
}

/// A Concat read only by another Concat (through a reshape), as Diakosmos's spatial path joins
/// its turned halves `[N, 3, 1, D]` into `[N, 3, 2, D]` and those, as `[N, 6, D]`, with the lone
/// group sliced from `[N, 7, D]`: the inner Concat copies its parts straight into the outer's
/// output, which copies only the lone group (`nested_concats`); the output is the CPU
/// backend's under both orders of a block's threads, with the fusion on and off.
#[test]
fn a_concat_read_by_a_concat_writes_its_parts_into_the_outer() {
    use alpha_ir::Graph;
    let (n, d) = (29, 6);
    let mut g = Graph::new("nested-concat");
    let Spatial { u, c, sq, first, second } = spatial_halves(&mut g, n, d);
    let a = g.mul(first, c);
    let b = g.mul(second, c);
    let a = g.sub(a, b);
    let b = g.add(b, first);
    let turned = g.concat(&[a, b], 2);
    let turned = g.reshape(turned, &[n, 6, d]);
    let lone = g.slice(sq, 1, 6, 7);
    let all = g.concat(&[turned, lone], 1);
    let out = g.mul(all, u);
    let outputs = [("out".to_string(), out)].into_iter().collect();
    let program = alpha_ir::Program::single(g.finish().unwrap(), "forward", outputs);
    let mut rng = Rng::new(23);
    let leaves = [("u", rng.vec(n * 7 * d, 2.0)), ("c", rng.vec(3 * d, 2.0))];
    let concat = |op: &alpha_ir::Op| matches!(op, alpha_ir::Op::Concat { .. });
    let [on, off] = with_and_without(&program, out, &leaves, |c| c.nested_concats = false, concat);
    assert_eq!((on.0 + 1, on.1 + 1), (off.0, off.1), "the outer Concat copies the turned groups no more");
}

/// A Permute of a slice through a reshape, as Diakosmos turns q and k (column blocks of the
/// q/k/v projection `[N, 3·G·D]`, as `[N, G, D]`) to `[G, N, D]`: the Permute reads the
/// projection itself with the slice's offset and the composed strides, the slice does not
/// launch (`sliced_permutes`), and the output is the CPU backend's under both orders of a
/// block's threads, with the fusion on and off.
#[test]
fn a_permute_of_a_slice_reads_the_slices_source() {
    use alpha_ir::{Graph, Init};
    let (n, groups, d) = (31, 3, 5);
    let w = groups * d;
    let mut g = Graph::new("sliced-permute");
    let x = g.param("x", &[n, 3 * w], Init::Zeros);
    let y = g.param("y", &[groups, n, d], Init::Zeros);
    let qkv = g.square(x);
    let k = g.slice(qkv, 1, w, 2 * w);
    let k = g.reshape(k, &[n, groups, d]);
    let by_head = g.permute(k, &[1, 0, 2]);
    let out = g.mul(by_head, y);
    let outputs = [("out".to_string(), out)].into_iter().collect();
    let program = alpha_ir::Program::single(g.finish().unwrap(), "forward", outputs);
    let mut rng = Rng::new(29);
    let leaves = [("x", rng.vec(n * 3 * w, 2.0)), ("y", rng.vec(n * w, 2.0))];
    let slice = |op: &alpha_ir::Op| matches!(op, alpha_ir::Op::Slice { .. });
    let [on, off] = with_and_without(&program, out, &leaves, |c| c.sliced_permutes = false, slice);
    assert_eq!((on.0, off.0), (0, 1), "the slice launches only without the fusion");
}

/// Slices read only by elementwise nodes, as Diakosmos's spatial path slices 6 of its 7
/// groups (`[N, 7, D]` to `[N, 6, D]`), pairs them (`[N, 3, 2, D]`) and slices each half into a
/// rotation's arithmetic, here beside a slice along the last axis and a lone binary reading a
/// slice along a middle axis: the chain (or the binary) reads the tensor under the slices in
/// place through the composed strides, the slices do not launch (`chain_slices`), and the
/// outputs are the CPU backend's under both orders of a block's threads, with the rule on and
/// off.
#[test]
fn elementwise_nodes_read_their_slices_in_place() {
    use alpha_ir::{Graph, Init};
    let (n, d) = (29, 6);
    let mut g = Graph::new("chain-slices");
    let Spatial { c, first, second, .. } = spatial_halves(&mut g, n, d);
    let w = g.param("w", &[n, 3, 1, 2 * d], Init::Zeros);
    let ww = g.square(w);
    let last = g.slice(ww, 3, d, 2 * d);
    let a = g.mul(first, c);
    let b = g.mul(second, c);
    let a = g.sub(a, b);
    let b = g.add(b, first);
    let a = g.mul(a, last);
    let out = g.add(a, b);
    let outputs = [("out".to_string(), out)].into_iter().collect();
    let program = alpha_ir::Program::single(g.finish().unwrap(), "forward", outputs);
    let mut rng = Rng::new(31);
    let leaves = [("u", rng.vec(n * 7 * d, 2.0)), ("c", rng.vec(3 * d, 2.0)), ("w", rng.vec(n * 3 * 2 * d, 2.0))];
    let slice = |op: &alpha_ir::Op| matches!(op, alpha_ir::Op::Slice { .. });
    let [on, off] = with_and_without(&program, out, &leaves, |c| c.chain_slices = false, slice);
    assert_eq!((on.0, off.0), (0, 4), "the slices launch only without the rule");
    assert_eq!(on.1 + 4, off.1);

    // A unary and a binary alone (their neighbours of other lengths, or no elementwise nodes)
    // reading a last-axis and a middle-axis slice.
    let mut g = Graph::new("lone-slices");
    let x = g.param("x", &[n, 4, d], Init::Zeros);
    let y = g.param("y", &[n, 1, d], Init::Zeros);
    let sq = g.square(x);
    let mid = g.slice(sq, 1, 2, 3);
    let pair = g.slice(sq, 2, 1, 3);
    let sq2 = g.square(pair);
    let prod = g.mul(mid, y);
    let sq2 = g.reshape(sq2, &[n, 8]);
    let prod = g.reshape(prod, &[n, d]);
    let out = g.concat(&[sq2, prod], 1);
    let outputs = [("out".to_string(), out)].into_iter().collect();
    let program = alpha_ir::Program::single(g.finish().unwrap(), "forward", outputs);
    let leaves = [("x", rng.vec(n * 4 * d, 2.0)), ("y", rng.vec(n * d, 2.0))];
    let [on, off] = with_and_without(&program, out, &leaves, |c| c.chain_slices = false, slice);
    assert_eq!((on.0, off.0), (0, 2), "the slices launch only without the rule");
}

/// Binaries reading a Broadcast (`[N, 3, 1]` spread over `[N, 3, 4]`, as Diakosmos's head
/// spreads a sum's gradient over each group) read its source held instead, alone or in a
/// fused chain, and the Broadcast does not launch (`read_broadcast_sources`); the outputs are
/// the CPU backend's under both orders of a block's threads, with the rule on and off.
#[test]
fn binaries_read_a_broadcasts_source_held() {
    use alpha_ir::{Graph, Init};
    let n = 23;
    let mut g = Graph::new("held-broadcast");
    let s = g.param("s", &[n, 3, 1], Init::Zeros);
    let x = g.param("x", &[n, 3, 4], Init::Zeros);
    let spread = g.broadcast(s, &[n, 3, 4]);
    let a = g.mul(x, spread);
    let b = g.add(a, x);
    let c = g.sub(spread, b);
    let out = g.mul(c, x);
    let outputs = [("out".to_string(), out)].into_iter().collect();
    let program = alpha_ir::Program::single(g.finish().unwrap(), "forward", outputs);
    let mut rng = Rng::new(31);
    let leaves = [("s", rng.vec(n * 3, 2.0)), ("x", rng.vec(n * 12, 2.0))];
    let spread = |op: &alpha_ir::Op| matches!(op, alpha_ir::Op::Broadcast { .. });
    let [on, off] = with_and_without(&program, out, &leaves, |c| c.held_broadcasts = false, spread);
    assert_eq!((on.0, off.0), (0, 1), "the Broadcast launches only without the rule");
}

/// A per-channel scale's backward (`da = dy · s`, `ds = Σ_rows dy · x`): the chain making both
/// runs the column sum of `dy · x` in its own launch, which never stores `dy · x`. Run by the
/// interpreter under both orders of a block's threads, `da` and `ds` are the bits of the chain
/// and the separate column sum (`ALPHA_CHAIN_COLSUMS=off`), over one chunk of rows and over
/// several (the finishing pass after).
#[test]
fn a_column_sum_run_in_the_chain_before_it_gives_the_separate_launches_bits() {
    use alpha_ir::{Graph, Init};
    for (rows, cols) in [(48usize, 40usize), (1000, 70)] {
        let mut g = Graph::new("scale-backward");
        let x = g.param("x", &[rows, cols], Init::Zeros);
        let dy = g.param("dy", &[rows, cols], Init::Zeros);
        let s = g.param("s", &[cols], Init::Zeros);
        let da = g.mul(dy, s);
        let prod = g.mul(dy, x);
        let ds = g.sum(prod, &[0], false);
        let outputs = [("da".to_string(), da), ("ds".to_string(), ds)].into_iter().collect();
        let program = alpha_ir::Program::single(g.finish().unwrap(), "forward", outputs);
        let mut rng = Rng::new(rows as u64);
        let leaves = [("x", rng.vec(rows * cols, 2.0)), ("dy", rng.vec(rows * cols, 2.0)), ("s", rng.vec(cols, 2.0))];
        let run = |on: bool, schedule: Schedule| {
            let (names, [da, ds]) = run_chained(&program, &leaves, on, schedule, [(da, rows * cols), (ds, cols)]);
            (names, da, ds)
        };
        let (names, _, _) = run(true, Schedule::Ascending);
        assert!(names[0].ends_with("_cols1"), "{names:?}");
        assert!(!names.iter().any(|n| n == "reduce_sum_columns"), "{names:?}");
        let (apart, want_da, want_ds) = run(false, Schedule::Ascending);
        assert!(apart.iter().any(|n| n == "reduce_sum_columns"), "{apart:?}");
        let host: Vec<f32> = (0..rows * cols).map(|i| leaves[1].1[i] * leaves[2].1[i % cols]).collect();
        assert_bits("da, the separate launches", &want_da, &host);
        for schedule in [Schedule::Ascending, Schedule::Descending] {
            let (_, got_da, got_ds) = run(true, schedule);
            assert_bits(&format!("da {rows}x{cols} {schedule:?}"), &got_da, &want_da);
            assert_bits(&format!("ds {rows}x{cols} {schedule:?}"), &got_ds, &want_ds);
        }
    }
}

/// `program` lowered with the reductions after chains in the chains' launches (`on`) or
/// apart, run by the interpreter: its launches' kernels and the values read back, `len` floats
/// each.
fn run_chained<const N: usize>(
    program: &alpha_ir::Program,
    leaves: &[(&str, Vec<f32>)],
    on: bool,
    schedule: Schedule,
    values: [(alpha_ir::Value, usize); N],
) -> (Vec<String>, [Vec<f32>; N]) {
    let config = alpha_cuda::CudaConfig { chain_column_sums: on, ..alpha_cuda::CudaConfig::default() };
    let lowered = alpha_cuda::lower::lower_program(program, &config).unwrap();
    let names: Vec<String> = lowered.phases[0].iter().map(|l| lowered.kernels[l.kernel].name.clone()).collect();
    let (mem, base) = alpha_cuda_lab::interp::run_lowered_with(&lowered, 0, leaves, schedule).unwrap();
    let read = values.map(|(v, len)| mem.read(base + lowered.plan.slot(v).offset as u64, len));
    (names, read)
}

/// A gate's or a norm's backward in small (Diakosmos's `[N, 7, 190]` products summed over each
/// group's values, or over everything but the groups): the chain making `dy · g` and `dy · x`
/// sums `dy · x` in its own launch on the reduction's path (a warp an output, or blocks over
/// chunks with a finishing pass), never storing it. Run by the interpreter under both orders of
/// a block's threads, both outputs are the bits of the chain and the separate reduction
/// (`ALPHA_CHAIN_COLSUMS=off`).
#[test]
fn a_reduction_run_in_the_chain_before_it_gives_the_separate_launches_bits() {
    use alpha_ir::{Graph, Init};
    for (rows, axes, path) in [(48usize, vec![2usize], "_warps1"), (1600, vec![0, 2], "_red1")] {
        let mut g = Graph::new("gate-backward");
        let x = g.param("x", &[rows, 7, 19], Init::Zeros);
        let dy = g.param("dy", &[rows, 7, 19], Init::Zeros);
        let gate = g.param("gate", &[7, 1], Init::Zeros);
        let da = g.mul(dy, gate);
        let prod = g.mul(dy, x);
        let dg = g.sum(prod, &axes, false);
        let outputs = [("da".to_string(), da), ("dg".to_string(), dg)].into_iter().collect();
        let program = alpha_ir::Program::single(g.finish().unwrap(), "forward", outputs);
        let n = rows * 7 * 19;
        let summed = program.graph.ty(dg).numel();
        let mut rng = Rng::new(rows as u64 + 7);
        let leaves = [("x", rng.vec(n, 2.0)), ("dy", rng.vec(n, 2.0)), ("gate", rng.vec(7, 2.0))];
        let run = |on: bool, schedule: Schedule| {
            let (names, [da, dg]) = run_chained(&program, &leaves, on, schedule, [(da, n), (dg, summed)]);
            (names, da, dg)
        };
        let (names, _, _) = run(true, Schedule::Ascending);
        assert!(names[0].ends_with(path), "{names:?}");
        assert!(!names.iter().any(|n| n.starts_with("reduce_sum") && !n.ends_with("_finish")), "{names:?}");
        let (apart, want_da, want_dg) = run(false, Schedule::Ascending);
        assert!(apart.iter().any(|n| n.starts_with("reduce_sum")), "{apart:?}");
        for schedule in [Schedule::Ascending, Schedule::Descending] {
            let (_, got_da, got_dg) = run(true, schedule);
            assert_bits(&format!("da {rows} {axes:?} {schedule:?}"), &got_da, &want_da);
            assert_bits(&format!("dg {rows} {axes:?} {schedule:?}"), &got_dg, &want_dg);
        }
    }
}

/// A lone elementwise node whose output only the reduction after it reads runs as a chain of
/// one with the reduction in its launch (Diakosmos's squares before each group's sum, a
/// weight's squares before its rows' sums): the sums are the separate launches' bits under both
/// orders of a block's threads, on the warp path and the block path, and nothing else launches.
#[test]
fn a_lone_square_summed_after_it_runs_in_the_sums_launch_with_its_bits() {
    use alpha_ir::{Graph, Init};
    for (shape, path) in [(vec![48usize, 7, 19], "ew_square_warps0"), (vec![40, 1330], "ew_square_red0")] {
        let mut g = Graph::new("norms");
        let x = g.param("x", &shape, Init::Zeros);
        let sq = g.square(x);
        let last = shape.len() - 1;
        let ss = g.sum(sq, &[last], true);
        let outputs = [("ss".to_string(), ss)].into_iter().collect();
        let program = alpha_ir::Program::single(g.finish().unwrap(), "forward", outputs);
        let n: usize = shape.iter().product();
        let leaves = [("x", Rng::new(n as u64).vec(n, 2.0))];
        let outputs = n / shape[last];
        let (names, [want]) = run_chained(&program, &leaves, false, Schedule::Ascending, [(ss, outputs)]);
        assert!(names.iter().any(|k| k.starts_with("pw_square")), "{names:?}");
        for schedule in [Schedule::Ascending, Schedule::Descending] {
            let (names, [got]) = run_chained(&program, &leaves, true, schedule, [(ss, outputs)]);
            assert_eq!(names, [path], "{shape:?}");
            assert_bits(&format!("{shape:?} {schedule:?}"), &got, &want);
        }
    }
}

/// A phase's copies into its state as one launch: three tensors (one over a chunk, one not a
/// whole number of quads) moved bit for bit, NaN payloads included, and nothing written between
/// or after them.
#[test]
fn the_multi_tensor_copy_moves_every_tensor_bit_for_bit() {
    use alpha_cuda::kernels::multi;
    let lens = [5usize, multi::COPY_CHUNK + 3, 17];
    // Sources then destinations in one region, each 16-byte aligned, a gap of 4 floats after each.
    let mut at = 0;
    let mut place = |n: usize| {
        let here = at;
        at += (n + 4).div_ceil(4) * 16;
        here
    };
    let srcs: Vec<usize> = lens.iter().map(|&n| place(n)).collect();
    let dsts: Vec<usize> = lens.iter().map(|&n| place(n)).collect();
    let mut mem = Memory::new();
    let base = mem.alloc(at / 4);
    let mut rng = Rng::new(3);
    let mut values = vec![];
    for (&s, &n) in srcs.iter().zip(&lens) {
        let mut v = rng.vec(n, 5.0);
        v[n / 2] = f32::from_bits(0x7fc0_1234);
        mem.write_bytes(base + s as u64, &v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect::<Vec<u8>>());
        values.push(v);
    }
    let tensors: Vec<(usize, usize, usize)> = (0..3).map(|i| (srcs[i], dsts[i], lens[i])).collect();
    let (table, chunks) = multi::copy_table(&tensors).unwrap();
    assert_eq!(chunks, 4, "the long tensor in two chunks");
    let t = mem.alloc(table.len().div_ceil(4));
    mem.write_bytes(t, &table);
    for schedule in [Schedule::Ascending, Schedule::Descending] {
        module(&multi::copy_kernel())
            .launch(chunks as u32, multi::THREADS, &multi::copy_arguments([base, t]), &mut mem, schedule)
            .unwrap();
        for (i, &d) in dsts.iter().enumerate() {
            let got = mem.read(base + d as u64, lens[i] + 1);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
            assert_eq!(bits(&got[..lens[i]]), bits(&values[i]), "tensor {i} {schedule:?}");
            assert!(got[lens[i]].is_nan(), "tensor {i}: the float after it written");
        }
    }
}

/// A plain elementwise op whose output a Permute alone reads (Polf's q gain, then the heads'
/// layout) stores each element where the permute would move it: one launch, and the CPU
/// backend's bits. A unary too (a negation: the interpreter takes no `ex2`).
#[test]
fn an_elementwise_op_stores_into_the_place_of_the_permute_after_it() {
    use alpha_ir::{Graph, Init};
    let mut g = Graph::new("permuted-store");
    let x = g.param("x", &[2, 5, 3, 4], Init::Zeros);
    let gain = g.param("gain", &[1, 1, 3, 1], Init::Zeros);
    let scaled = g.mul(x, gain);
    let heads = g.permute(scaled, &[0, 2, 1, 3]);
    let mut rng = Rng::new(8);
    let leaves = [("x", rng.vec(120, 2.0)), ("gain", rng.vec(3, 2.0))];
    let names = lowered_gives_the_cpus_bits(g, heads, &leaves);
    // (Four elements a thread: the gain is one value along the innermost axis.)
    assert_eq!(names, ["pw_mul_v4"], "the product stored permuted, no copy: {names:?}");
    let mut g = Graph::new("permuted-unary");
    let x = g.param("x", &[4, 6, 5], Init::Zeros);
    let t = g.neg(x);
    let moved = g.permute(t, &[2, 0, 1]);
    let leaves = [("x", Rng::new(9).vec(120, 2.0))];
    let names = lowered_gives_the_cpus_bits(g, moved, &leaves);
    assert_eq!(names.len(), 1, "{names:?}");
}

/// The pointwise kernels taking two elements a thread (rows of Diakosmos's widths, even but not
/// multiples of four) store what the one-element kernels store, bit for bit, gaps left as
/// they were: a bf16 operand of 1,330 columns copied into rows of 1,336, zeros filling the
/// last six, k's columns of a `[N, 3990]` projection turned to `[7, N, 190]`, and a
/// permute-and-cast to bf16 (a rounding tie among the values), and an input held along the
/// innermost axis (a group's value for its 190 phasors), multiplied and copied.
#[test]
fn pointwise_kernels_two_elements_a_thread_store_the_one_element_bits() {
    use alpha_cuda::kernels::pointwise::{contiguous_strides, Body, Operand, Pointwise};
    let rows = 37usize;
    let bf16 = |strides: Vec<u64>| Operand { dtype: DType::BF16, strides };
    let f32s = |strides: Vec<u64>| Operand { dtype: DType::F32, strides };
    let cases = [
        (
            "pad copy",
            Pointwise {
                shape: vec![rows, 1330],
                out: bf16(vec![1336, 1]),
                ins: vec![bf16(contiguous_strides(&[rows, 1330]))],
                body: Body::Copy,
            },
        ),
        ("pad fill", Pointwise { shape: vec![rows, 6], out: bf16(vec![1336, 1]), ins: vec![], body: Body::Fill(0.0) }),
        (
            "k turned",
            Pointwise {
                shape: vec![7, rows, 190],
                out: f32s(contiguous_strides(&[7, rows, 190])),
                ins: vec![f32s(vec![190, 3990, 1])],
                body: Body::Copy,
            },
        ),
        (
            "permute+cast",
            Pointwise {
                shape: vec![7, rows, 190],
                out: bf16(contiguous_strides(&[7, rows, 190])),
                ins: vec![f32s(vec![190, 1330, 1])],
                body: Body::Copy,
            },
        ),
        // A group's scale held along its 190 phasors (one value for a thread's two).
        (
            "held scale",
            Pointwise {
                shape: vec![rows, 7, 190],
                out: f32s(contiguous_strides(&[rows, 7, 190])),
                ins: vec![f32s(contiguous_strides(&[rows, 7, 190])), f32s(vec![7, 1, 0])],
                body: Body::Binary(alpha_ir::Binary::Mul),
            },
        ),
        (
            "held copy",
            Pointwise {
                shape: vec![rows, 7, 190],
                out: bf16(contiguous_strides(&[rows, 7, 190])),
                ins: vec![bf16(vec![7, 1, 0])],
                body: Body::Copy,
            },
        ),
    ];
    for (what, pw) in cases {
        assert_eq!(pw.vector_width(), 2, "{what}");
        // Bytes each operand spans: its last element's offset, plus one.
        let span = |o: &Operand| {
            let last: u64 = pw.shape.iter().zip(&o.strides).map(|(&d, &st)| (d as u64 - 1) * st).sum();
            (last as usize + 1) * o.dtype.size()
        };
        let mut rng = Rng::new(7);
        let inputs: Vec<Vec<u8>> = pw
            .ins
            .iter()
            .map(|o| {
                let mut x = rng.vec(span(o).div_ceil(4), 3.0);
                x[0] = 1.0 + 1.0 / 256.0;
                x.iter().flat_map(|v| v.to_le_bytes()).take(span(o)).collect()
            })
            .collect();
        let out_bytes = span(&pw.out).next_multiple_of(4);
        let results: Vec<Vec<f32>> = [1u32, 2]
            .into_iter()
            .map(|width| {
                let mut mem = Memory::new();
                let out = mem.alloc(out_bytes / 4);
                mem.write_bytes(out, &vec![0xA5u8; out_bytes]);
                let ins: Vec<u64> = inputs
                    .iter()
                    .map(|b| {
                        let at = mem.alloc(b.len().div_ceil(4));
                        mem.write_bytes(at, b);
                        at
                    })
                    .collect();
                let k = pw.kernel_with(width).unwrap();
                assert!(width == 1 || k.name.ends_with("_v2"), "{}", k.name);
                let (blocks, threads) = pw.grid_with(width);
                let args: Vec<u64> = std::iter::once(out).chain(ins).collect();
                module(&k).launch(blocks, threads, &args, &mut mem, Schedule::Ascending).unwrap();
                mem.read(out, out_bytes / 4)
            })
            .collect();
        let differ = results[0].iter().zip(&results[1]).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differ, 0, "{what}: {differ} words differ");
    }
}

/// A short reduction's warp path (a warp an output, each lane standing for eight of the block
/// path's threads) gives the block path's bits, under both orders of a block's threads: sums
/// and maxima over rows of 190 (Diakosmos's groups) with a ragged last block of outputs, a mean
/// over rows of 33 (one lane with two elements), a sum over rows of 1,000 (lanes with four
/// elements, some with three) and a sum over a strided axis (at least 64 outputs each: fewer
/// keep a block an output).
#[test]
fn a_short_reduction_a_warp_an_output_gives_the_block_paths_bits() {
    use alpha_cuda::kernels::reduce::{self, Reduction};
    use alpha_ir::Reduce;
    let cases: [(&[usize], usize, Reduce); 5] = [
        (&[70, 190], 1, Reduce::Sum),
        (&[70, 190], 1, Reduce::Max),
        (&[80, 33], 1, Reduce::Mean),
        (&[64, 1000], 1, Reduce::Sum),
        (&[8, 50, 9], 1, Reduce::Sum),
    ];
    for (shape, axis, kind) in cases {
        let r = Reduction::new(kind, shape, &[axis], DType::F32, DType::F32).unwrap();
        assert!(r.warp_rows(), "{shape:?}");
        let n: usize = shape.iter().product();
        let x = Rng::new(n as u64).vec(n, 1.0);
        let outputs = n / shape[axis];
        let want = {
            let mut mem = Memory::new();
            let xa = mem.upload(&x);
            let (out, partials) = (mem.alloc(outputs), mem.alloc(1));
            let args = reduce::arguments([out, xa, partials]);
            let grid = [outputs as u32, 1, 1];
            module(&r.block_kernel())
                .launch_3d(grid, [reduce::THREADS, 1, 1], &args, &mut mem, Schedule::Ascending)
                .unwrap();
            mem.read(out, outputs)
        };
        for schedule in [Schedule::Ascending, Schedule::Descending] {
            let mut mem = Memory::new();
            let xa = mem.upload(&x);
            let (out, partials) = (mem.alloc(outputs), mem.alloc(1));
            let (g, _, _) = r.grid();
            let args = reduce::arguments([out, xa, partials]);
            module(&r.kernel()).launch_3d([g, 1, 1], [reduce::THREADS, 1, 1], &args, &mut mem, schedule).unwrap();
            assert_bits(&format!("{shape:?} {kind:?} {schedule:?}"), &mem.read(out, outputs), &want);
        }
    }
}

/// A product summed in the chain's launch (Diakosmos's `[N, 7, 190]` terms of a per-group
/// gradient, its squares summed over each group), over one chunk and several, on each
/// reduction path: the bits of the chain and the sum launched apart, in either thread order.
#[test]
fn a_chain_summed_in_its_launch_gives_the_separate_launches_bits() {
    use alpha_cuda_lab::interp::{run_lowered_with, Schedule};
    use alpha_ir::{Graph, Init};
    let apart = alpha_cuda::CudaConfig { chain_column_sums: false, ..Default::default() };
    let fused = alpha_cuda::CudaConfig { chain_row_reductions: true, ..Default::default() };
    let cases = [(300usize, vec![0usize, 2]), (300, vec![0]), (40, vec![2]), (64, vec![0, 1, 2])];
    // Read from a parameter, and from a permute's output that dies in the chain (the plan may
    // place the sum's output there: its launch must not store over what its blocks still read).
    for ((n, axes), permuted) in cases.into_iter().flat_map(|c| [(c.clone(), false), (c, true)]) {
        let mut g = Graph::new("chain-sum");
        let x = if permuted {
            let xt = g.param("x", &[7, n, 190], Init::Zeros);
            g.permute(xt, &[1, 0, 2])
        } else {
            g.param("x", &[n, 7, 190], Init::Zeros)
        };
        let y = g.param("y", &[n, 7, 190], Init::Zeros);
        let p = g.mul(x, y);
        let q = g.mul(p, y);
        let s = g.sum(q, &axes, false);
        let outputs = [("out".to_string(), s)].into_iter().collect();
        let program = alpha_ir::Program::single(g.finish().unwrap(), "forward", outputs);
        let mut rng = Rng::new(5);
        let leaves = [("x", rng.vec(n * 7 * 190, 2.0)), ("y", rng.vec(n * 7 * 190, 2.0))];
        let len: usize = program.graph.shape(s).iter().product();
        let run = |config: &alpha_cuda::CudaConfig, schedule: Schedule| {
            let lowered = alpha_cuda::lower::lower_program(&program, config).unwrap();
            let (mem, base) = run_lowered_with(&lowered, 0, &leaves, schedule).unwrap();
            let names: Vec<String> = lowered.phases[0].iter().map(|l| lowered.kernels[l.kernel].name.clone()).collect();
            (mem.read(base + lowered.plan.slot(s).offset as u64, len), names)
        };
        let (want, separate) = run(&apart, Schedule::Ascending);
        for schedule in [Schedule::Ascending, Schedule::Descending] {
            let (got, names) = run(&fused, schedule);
            assert!(names.len() < separate.len(), "{axes:?}: {names:?} against {separate:?}");
            assert_bits(&format!("{n} {axes:?} {schedule:?} permuted {permuted}"), &got, &want);
        }
    }
}
