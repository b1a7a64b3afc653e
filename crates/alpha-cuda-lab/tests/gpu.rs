//! GPU checks of every kernel family against its CPU reference (quick sizes, no timing).
//! On a machine without a CUDA device each test prints "skipped: no CUDA device" and passes.

use alpha_cuda::Gpu;
use alpha_cuda_lab::check::{self, Options, Rng, Row};

fn quick() -> Options {
    Options { bench: false, ..Options::default() }
}

fn assert_all(rows: &[Row]) {
    for r in rows {
        println!("{r}");
    }
    assert!(rows.iter().all(|r| r.pass), "a check failed");
}

#[test]
fn gemm_all_variants_match_reference() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    let arena = gpu.arena(64 << 20).unwrap();
    assert_all(&check::gemm_variants(&gpu, &arena, &mut Rng::new(1)).unwrap());
}

/// The lowering's GELU epilogue and rotary-in-attention-backward fusions equal the launches they
/// replace, bit for bit (see `check::fusion_checks`).
#[test]
fn fusions_match_the_launches_they_replace_bit_for_bit() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    // Sixteen contexts' delta-heads product: operands, O, and two ways' outputs.
    let arena = gpu.arena(512 << 20).unwrap();
    assert_all(&check::fusion_checks(&gpu, &arena, &mut Rng::new(4)).unwrap());
}

/// The tensor-core attention kernels agree with the fp32 ones within bf16 bounds on every
/// option (GQA, partial tiles, soft-cap, rotary on load and on store) and repeat bit for bit
/// (see `check::attention_checks`).
#[test]
fn attention_tensor_core_kernels_match_fp32_kernels() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    let arena = gpu.arena(128 << 20).unwrap();
    assert_all(&check::attention_checks(&gpu, &arena, &mut Rng::new(5), &quick()).unwrap());
}

/// Split-K products (the parts, then the fixed-order reduction) against the reference, and
/// repeating bit for bit.
#[test]
fn split_k_products_match_reference_and_repeat() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    let arena = gpu.arena(1 << 30).unwrap();
    assert_all(&check::gemm_split_checks(&gpu, &arena, &mut Rng::new(6), &quick()).unwrap());
}

/// Split-K in parts that may differ by a K step matches the reference and repeats bit for bit.
#[test]
fn uneven_split_k_parts_match_reference_and_repeat() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    let arena = gpu.arena(1 << 30).unwrap();
    assert_all(&check::gemm_uneven_split_checks(&gpu, &arena, &mut Rng::new(19), &quick()).unwrap());
}

/// Two products summed in one accumulator match the reference of their sum and repeat.
#[test]
fn paired_products_match_reference_and_repeat() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    let arena = gpu.arena(1 << 30).unwrap();
    assert_all(&check::gemm_pair_checks(&gpu, &arena, &mut Rng::new(23), &quick()).unwrap());
}

/// tanh with its quotient inline equals tanh through `div.rn.f32` on every f32 input.
#[test]
fn tanh_fast_quotient_is_exact_on_every_input() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    let arena = gpu.arena(64 << 20).unwrap();
    assert_all(&check::tanh_exhaustive(&gpu, &arena).unwrap());
}

/// Column sums and means (bias gradients) equal the host's sums, and repeat bit for bit.
#[test]
fn column_reductions_match_the_host() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    let arena = gpu.arena(256 << 20).unwrap();
    assert_all(&check::reduce_checks(&gpu, &arena, &mut Rng::new(29), &quick()).unwrap());
}

/// A run of parameter casts in one launch rounds every element as the host does.
#[test]
fn multi_tensor_cast_rounds_like_the_host() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    let arena = gpu.arena(64 << 20).unwrap();
    assert_all(&check::cast_multi_checks(&gpu, &arena, &mut Rng::new(7)).unwrap());
}

/// LayerNorm's gain and bias gradients are the reference's sums, bit for bit, at 1,024 bands; the input
/// gradient with the fold beside it, with a residual and its bf16 copy, and with pass 1 in its
/// launch, equals the plain one.
#[test]
fn layernorm_parameter_gradients_sum_in_the_reference_order() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    // Sixteen contexts' rows: the inputs, and the sums and bf16 copies of every grid.
    let arena = gpu.arena(640 << 20).unwrap();
    assert_all(&check::layernorm_param_checks(&gpu, &arena, &mut Rng::new(11), &quick()).unwrap());
}

/// RMSNorm's forward (f32 and bf16 stores) and input gradient (alone and adding a residual)
/// equal the host in the kernels' order bit for bit, and the CPU reference's order within f32
/// rounding; the gain's gradient is the reference's sum bit for bit — at Polf's rows of 512 (a
/// block a row) and of 64 (a warp a row), and ragged shapes of each.
#[test]
fn rmsnorm_matches_the_host_in_both_orders() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    let arena = gpu.arena(256 << 20).unwrap();
    assert_all(&check::rmsnorm_checks(&gpu, &arena, &mut Rng::new(37), &quick()).unwrap());
}

/// Pointwise kernels taking four elements a thread equal the scalar ones, bit for bit.
#[test]
fn vectorized_pointwise_kernels_match_the_scalar_ones() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    let arena = gpu.arena(256 << 20).unwrap();
    assert_all(&check::pointwise_vector_checks(&gpu, &arena, &mut Rng::new(13), &quick()).unwrap());
}

/// A run of elementwise ops as one kernel equals the launches it replaces, bit for bit.
#[test]
fn fused_elementwise_chain_matches_its_launches_bit_for_bit() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    let arena = gpu.arena(256 << 20).unwrap();
    assert_all(&check::fused_chain_checks(&gpu, &arena, &mut Rng::new(5)).unwrap());
}

/// The delta rule and the harmonic scan, forward and backward, at KickDelta's and Diakosmos's
/// gate shapes and odd small ones, against the CPU backend's kernels, and repeating bit for bit
/// (see `check::scan_checks`).
#[test]
fn delta_rule_and_harmonic_scan_match_the_cpu_kernels() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    let arena = gpu.arena(256 << 20).unwrap();
    assert_all(&check::scan_checks(&gpu, &arena, &mut Rng::new(31), &quick()).unwrap());
}

#[test]
fn embedding_and_cross_entropy_match_reference() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    let arena = gpu.arena(256 << 20).unwrap();
    let mut rng = Rng::new(2);
    let o = quick();
    assert_all(&check::embedding_checks(&gpu, &arena, &mut rng, (300, 68, 700), &o).unwrap());
    assert_all(&check::cross_entropy_checks(&gpu, &arena, &mut rng, (37, 256, 256), &o).unwrap());
    // Classes short of the row: the padded columns take no part and get a zero gradient.
    assert_all(&check::cross_entropy_checks(&gpu, &arena, &mut rng, (37, 250, 256), &o).unwrap());
}

#[test]
fn optimizer_and_graph_replay_match_reference() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    let arena = gpu.arena(64 << 20).unwrap();
    assert_all(&check::optimizer_checks(&gpu, &arena, &mut Rng::new(3), 1_000_003, &quick()).unwrap());
}

/// Bob's training step (batch 2) on the GPU backend against the CPU reference: loss, the
/// updated table, and a second GPU run repeating bit for bit. Without a GPU, compiling must fail
/// with an error that says a GPU is needed.
#[test]
fn backend_runs_bobs_step_like_the_cpu_reference() {
    use alpha_cpu::CpuBackend;
    use alpha_cuda::CudaBackend;
    use alpha_plan::Backend;
    use alpha_systems::System;

    let bob = alpha_systems::bob::Bob;
    let program = bob.learner(10).training_program(bob.model(2).unwrap()).unwrap();
    if Gpu::probe().unwrap().is_none() {
        let e = CudaBackend::compile(&program, &alpha_cuda::CudaConfig::default())
            .err()
            .expect("no GPU: compile must fail");
        assert!(format!("{e:#}").contains("needs an NVIDIA GPU"), "{e:#}");
        println!("skipped: no CUDA device");
        return;
    }
    let mut rng = Rng::new(11);
    let table: Vec<f32> = (0..256 * 256).map(|_| rng.uniform()).collect();
    let ids: Vec<u32> = (0..2 * 256 + 1).map(|_| rng.below(256)).collect();
    let step = |b: &mut dyn Backend| {
        b.write("logits", &table).unwrap();
        b.write("logits.adam_m", &vec![0.0; 65536]).unwrap();
        b.write("logits.adam_v", &vec![0.0; 65536]).unwrap();
        b.write_ids("tokens", &ids[..512]).unwrap();
        b.write_ids("targets", &ids[1..]).unwrap();
        for (name, v) in bob.learner(10).scalars(1) {
            b.write(name, &[v as f32]).unwrap();
        }
        b.run("step").unwrap();
        (b.output("loss").unwrap()[0], b.read("logits").unwrap())
    };
    let mut cpu = CpuBackend::compile(&program).unwrap();
    let mut gpu = CudaBackend::compile(&program, &alpha_cuda::CudaConfig::default()).unwrap();
    let (lc, pc) = step(&mut cpu);
    let (lg, pg) = step(&mut gpu);
    assert!(((lg - lc) / lc).abs() < 1e-5, "loss gpu {lg} cpu {lc}");
    let dmax = pg.iter().zip(&pc).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(dmax < 1e-5, "table after the update differs by {dmax}");
    let (lg2, pg2) = step(&mut gpu);
    assert_eq!(lg.to_bits(), lg2.to_bits());
    assert!(pg.iter().zip(&pg2).all(|(a, b)| a.to_bits() == b.to_bits()), "two GPU runs differ");
    // The runtime's switches change how the launches run, not what they compute: plain launches,
    // one by one with a synchronisation after each, waiting at the end of every run.
    let config = alpha_cuda::CudaConfig {
        dependent_launch: false,
        check_launches: true,
        sync_each_run: true,
        ..alpha_cuda::CudaConfig::default()
    };
    let mut plain = CudaBackend::compile(&program, &config).unwrap();
    let (lp, pp) = step(&mut plain);
    assert_eq!(lp.to_bits(), lg.to_bits(), "plain, checked launches change the loss");
    assert!(pp.iter().zip(&pg).all(|(a, b)| a.to_bits() == b.to_bits()), "plain, checked launches change the table");
}

/// A run's device time comes from the events around its graph: none before a run or after a
/// profile, and after a run more than nothing, within the host's wall time around it, and not
/// under half the fastest of the phase's event-timed replays; launch by launch too.
#[test]
fn a_runs_device_time_is_read_from_events_around_its_launches() {
    use alpha_cuda::{CudaBackend, CudaConfig};
    use alpha_plan::Backend;
    use alpha_systems::System;

    let Some(_) = Gpu::probe().unwrap() else {
        println!("skipped: no CUDA device");
        return;
    };
    let bob = alpha_systems::bob::Bob;
    let program = bob.learner(10).training_program(bob.model(2).unwrap()).unwrap();
    let mut rng = Rng::new(5);
    let ids: Vec<u32> = (0..2 * 256 + 1).map(|_| rng.below(256)).collect();
    let timed_step = |b: &mut CudaBackend| {
        b.write_ids("tokens", &ids[..512]).unwrap();
        b.write_ids("targets", &ids[1..]).unwrap();
        let t0 = std::time::Instant::now();
        b.run("step").unwrap();
        let device = b.last_run_device_ms().unwrap();
        (device, t0.elapsed().as_secs_f64() * 1e3)
    };
    let mut gpu = CudaBackend::compile(&program, &CudaConfig::default()).unwrap();
    gpu.write("logits", &vec![0.0; 256 * 256]).unwrap();
    for (name, v) in bob.learner(10).scalars(1) {
        gpu.write(name, &[v as f32]).unwrap();
    }
    assert_eq!(gpu.last_run_device_ms().unwrap(), None, "nothing has run");
    for _ in 0..3 {
        timed_step(&mut gpu);
    }
    let (device, wall) = timed_step(&mut gpu);
    let device = device.expect("a run is timed");
    let fastest = gpu.time_phase("step", 1, 5).unwrap().into_iter().fold(f32::INFINITY, f32::min) as f64;
    println!("device {device:.4} ms, wall {wall:.4} ms, fastest replay {fastest:.4} ms");
    assert!(device > 0.0 && device <= wall, "device {device} ms, wall {wall} ms");
    assert!(device >= 0.5 * fastest, "device {device} ms, fastest replay {fastest} ms");
    gpu.profile("step").unwrap();
    assert_eq!(gpu.last_run_device_ms().unwrap(), None, "a profile is not a run");

    let checked = CudaConfig { check_launches: true, ..CudaConfig::default() };
    let mut one_by_one = CudaBackend::compile(&program, &checked).unwrap();
    let (device, wall) = timed_step(&mut one_by_one);
    assert!(device.is_some_and(|d| d > 0.0 && d <= wall), "launch by launch: {device:?} ms, wall {wall} ms");
}

/// With a PTX folder configured, compiling writes every kernel of the lowering there (before
/// the GPU is opened, so also where there is none).
#[test]
fn compile_writes_every_kernels_ptx_to_the_configured_folder() {
    use alpha_cuda::lower::lower_program;
    use alpha_cuda::{CudaBackend, CudaConfig};
    use alpha_systems::System;

    let bob = alpha_systems::bob::Bob;
    let program = bob.learner(10).training_program(bob.model(2).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = CudaConfig { ptx_dir: Some(dir.path().to_path_buf()), ..CudaConfig::default() };
    if let Err(e) = CudaBackend::compile(&program, &config) {
        assert!(format!("{e:#}").contains("needs an NVIDIA GPU"), "{e:#}");
    }
    let kernels = lower_program(&program, &config).unwrap().kernels;
    let mut written: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap()).collect();
    let mut want: Vec<String> = kernels.iter().map(|k| k.render()).collect();
    written.sort();
    want.sort();
    assert_eq!(written, want);
}
