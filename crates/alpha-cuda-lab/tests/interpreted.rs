//! The delta rule's and the harmonic scan's GPU kernels, run by the PTX interpreter
//! (`alpha_cuda_lab::interp`, no GPU needed), equal the CPU backend's kernels bit for bit,
//! forward and backward, under both orders of a block's threads, at KickDelta's and
//! Diakosmos's widths over short windows and at odd shapes (a short last chunk, a short last
//! group of positions, rows that are not a whole number of warps).

use alpha_cuda::kernels::replay::{window_sum_arguments, window_sum_kernel};
use alpha_cuda::kernels::{delta_rule, harmonic_scan};
use alpha_cuda::ptx::Kernel;
use alpha_cuda_lab::check::{self, Rng};
use alpha_cuda_lab::interp::{Memory, Module, Schedule};

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
fn harmonic_scan_on_gpu(d: &harmonic_scan::Dims, ins: [&[f32]; 5], schedule: Schedule) -> Vec<Vec<f32>> {
    let mut mem = Memory::new();
    let [r, w, v, gamma, dy] = ins.map(|x| mem.upload(x));
    let (nl, nd) = (d.b * d.t * d.h * d.l, d.b * d.t * d.h * d.d);
    let outs = [nd, nl, nl, nd, d.h * d.l].map(|n| (mem.alloc(n), n));
    let [y, dr, dw, dv, dg] = outs.map(|x| x.0);
    let (chunk_at, parts_at, total) = d.scratch_floats().unwrap();
    let scratch = mem.alloc(total);
    let at = |f: usize| scratch + 4 * f as u64;
    let fwd = module(&harmonic_scan::forward_kernel(d));
    fwd.launch(
        blocks(d.b * d.h * d.d),
        256,
        &harmonic_scan::forward_arguments([y, r, w, v, gamma]),
        &mut mem,
        schedule,
    )
    .unwrap();
    let bwd_kernel = harmonic_scan::backward_kernel(d).unwrap();
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
        // Diakosmos's heads.
        harmonic_scan::Dims { b: 1, t: 10, h: 7, l: 8, d: 190 },
    ] {
        check_harmonic_scan(&d);
    }
}

/// The harmonic scan at `d` on random inputs shaped as Diakosmos's.
fn check_harmonic_scan(d: &harmonic_scan::Dims) {
    let inputs = check::harmonic_scan_inputs(&mut Rng::new(29 + d.t as u64), d);
    let want = check::harmonic_scan_reference(d, &inputs);
    for schedule in [Schedule::Ascending, Schedule::Descending] {
        let got = harmonic_scan_on_gpu(d, inputs.each_ref().map(|x| &x[..]), schedule);
        for (i, name) in ["y", "dr", "dw", "dv", "dgamma"].iter().enumerate() {
            assert_bits(&format!("{d:?} {schedule:?} {name}"), &got[i], &want[i]);
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

/// Runs the one-phase program with output "out" (`out`) on the CPU backend and, lowered for the
/// GPU, in the interpreter with the same leaves; asserts the same bits and returns the launches'
/// kernel names.
fn lowered_gives_the_cpus_bits(g: alpha_ir::Graph, out: alpha_ir::Value, leaves: &[(&str, Vec<f32>)]) -> Vec<String> {
    use alpha_plan::Backend;
    let outputs = [("out".to_string(), out)].into_iter().collect();
    let program = alpha_ir::Program::single(g.finish().unwrap(), "forward", outputs);
    let mut cpu = alpha_cpu::CpuBackend::compile(&program).unwrap();
    for (name, v) in leaves {
        cpu.write(name, v).unwrap();
    }
    cpu.run("forward").unwrap();
    let want = cpu.output("out").unwrap();
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
