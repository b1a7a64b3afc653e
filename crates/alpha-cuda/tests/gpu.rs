//! GPU checks of every kernel family against its CPU reference (quick sizes, no timing).
//! On a machine without a CUDA device each test prints "skipped: no CUDA device" and passes.

use alpha_cuda::check::{self, Options, Rng, Row};
use alpha_cuda::Gpu;

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

#[test]
fn elementwise_embedding_cross_entropy_match_reference() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    let arena = gpu.arena(256 << 20).unwrap();
    let mut rng = Rng::new(2);
    let o = quick();
    assert_all(&check::elementwise_checks(&gpu, &arena, &mut rng, 100_003, &o).unwrap());
    assert_all(&check::embedding_checks(&gpu, &arena, &mut rng, (300, 68, 700), &o).unwrap());
    assert_all(&check::cross_entropy_checks(&gpu, &arena, &mut rng, (37, 256), &o).unwrap());
}

#[test]
fn optimizer_and_graph_replay_match_reference() {
    let Some(gpu) = Gpu::open_or_skip() else { return };
    gpu.set_checked(true);
    let arena = gpu.arena(64 << 20).unwrap();
    assert_all(&check::optimizer_checks(&gpu, &arena, &mut Rng::new(3), 1_000_003, &quick()).unwrap());
}
