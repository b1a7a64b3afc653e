//! Check-and-bench harness: every kernel against its CPU reference, timed, on the GPU.
//!
//! `kernel_check [--ptx-dir DIR] [--ptx-only] [--quick] [--seed N] [--only FAMILY,...]`
//! Writes each kernel's PTX to DIR first (for `ptxas -arch=sm_90a -v`), then on a GPU runs the
//! checks and prints one row per kernel; exits 1 if any check fails. Without a GPU it prints
//! "skipped: no CUDA device" and exits 0. `--only gemm,gemm-bench` runs just those families.

use std::time::Instant;

use alpha_cuda::Gpu;
use alpha_cuda_lab::check::{self, Options, Rng, Row};
use anyhow::Result;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let value = |f: &str| args.iter().position(|a| a == f).and_then(|i| args.get(i + 1).cloned());
    if let Some(dir) = value("--ptx-dir") {
        std::fs::create_dir_all(&dir)?;
        for k in alpha_cuda::catalog() {
            k.check_budget()?;
            std::fs::write(format!("{dir}/{}.ptx", k.name), k.render())?;
        }
        println!("wrote {} PTX files to {dir}", alpha_cuda::catalog().len());
        if flag("--ptx-only") {
            return Ok(());
        }
    }
    let Some(gpu) = Gpu::open_or_skip() else {
        return Ok(());
    };
    println!("device: {}", gpu.info());
    let seed = value("--seed").and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    println!("seed: {seed}");
    let quick = flag("--quick");
    let opts = Options { seed, bench: !quick, ..Options::default() };
    let mut rng = Rng::new(seed);
    gpu.set_checked(true);
    let arena = gpu.arena(6 << 30)?;
    let mut rows: Vec<Row> = Vec::new();
    let only: Option<Vec<String>> = value("--only").map(|v| v.split(',').map(str::to_string).collect());
    let wanted = |name: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == name));
    let mut step = |name: &str, r: Result<Vec<Row>>| match r {
        Ok(v) => {
            for row in &v {
                println!("{row}");
            }
            rows.extend(v);
        }
        Err(e) => {
            println!("FAIL {name}: {e:#}");
            rows.push(Row {
                family: name.into(),
                name: "error".into(),
                shape: String::new(),
                max_abs: f64::INFINITY,
                rel: f64::INFINITY,
                tol: 0.0,
                pass: false,
                median_us: None,
                rate: format!("{e:#}").chars().take(120).collect(),
            });
        }
    };
    let t0 = Instant::now();
    if wanted("gemm") {
        step("gemm", check::gemm_variants(&gpu, &arena, &mut rng));
    }
    if wanted("gemm-narrow") {
        step("gemm-narrow", check::narrow_store_checks(&gpu, &arena, &mut rng));
    }
    if wanted("fusion") {
        step("fusion", check::fusion_checks(&gpu, &arena, &mut rng));
    }
    if wanted("tanh-exhaustive") {
        step("tanh-exhaustive", check::tanh_exhaustive(&gpu, &arena));
    }
    if wanted("gemm-pair") {
        step("gemm-pair", check::gemm_pair_checks(&gpu, &arena, &mut rng, &opts));
    }
    if wanted("simple") {
        // Diakosmos's thin f32 products: their coverings against the 16×16 tiles, bit for bit.
        step("simple", check::simple_product_checks(&gpu, &arena, &mut rng, &opts));
    }
    if wanted("gemm-kparts") {
        step("gemm-kparts", check::gemm_uneven_split_checks(&gpu, &arena, &mut rng, &opts));
    }
    if wanted("layernorm") {
        step("layernorm", check::layernorm_param_checks(&gpu, &arena, &mut rng, &opts));
    }
    if wanted("rmsnorm") {
        step("rmsnorm", check::rmsnorm_checks(&gpu, &arena, &mut rng, &opts));
    }
    if wanted("pointwise") {
        step("pointwise", check::pointwise_vector_checks(&gpu, &arena, &mut rng, &opts));
    }
    if wanted("concat-views") {
        step("concat-views", check::concat_view_checks(&gpu, &arena, &mut rng, &opts));
    }
    if wanted("attention-bf16") {
        step("attention-bf16", check::attention_bf16_checks(&gpu, &arena, &mut rng, &opts));
    }
    if wanted("attention") {
        step("attention", check::attention_checks(&gpu, &arena, &mut rng, &Options { bench: false, ..opts }));
    }
    if wanted("embedding") {
        step("embedding", check::embedding_checks(&gpu, &arena, &mut rng, (12288, 512, 1024), &opts));
        // Sixteen contexts' tokens (Coppelius at B = 16).
        step("embedding", check::embedding_checks(&gpu, &arena, &mut rng, (12288, 512, 16384), &opts));
        // GPT-2's padded vocabulary at sixteen contexts, and rows of a width off 128 columns.
        step("embedding", check::embedding_checks(&gpu, &arena, &mut rng, (50304, 768, 16384), &opts));
        step("embedding", check::embedding_checks(&gpu, &arena, &mut rng, (1000, 260, 333), &opts));
    }
    if wanted("reduce") {
        step("reduce", check::reduce_checks(&gpu, &arena, &mut rng, &opts));
    }
    if wanted("layernorm-cols") {
        step("layernorm-cols", check::layernorm_column_checks(&gpu, &arena, &mut rng, &opts));
    }
    if wanted("column-cast") {
        step("column-cast", check::column_cast_checks(&gpu, &arena, &mut rng, &opts));
    }
    if wanted("scans") {
        // KickDelta's delta rule and Diakosmos's harmonic scan against the CPU backend's kernels.
        step("scans", check::scan_checks(&gpu, &arena, &mut rng, &opts));
    }
    if wanted("cross_entropy") {
        step("cross_entropy", check::cross_entropy_checks(&gpu, &arena, &mut rng, (1024, 12288, 12288), &opts));
        // GPT-2's vocabulary in rows padded to 50,304.
        step("cross_entropy", check::cross_entropy_checks(&gpu, &arena, &mut rng, (64, 50257, 50304), &opts));
    }
    let n_opt = if quick { 1 << 20 } else { 57_705_472 };
    if wanted("adamw") {
        step("adamw", check::optimizer_checks(&gpu, &arena, &mut rng, n_opt, &opts));
    }
    if !quick {
        gpu.set_checked(false);
        if wanted("gemm-bench") {
            step("gemm-bench", check::gemm_bench(&gpu, &arena, &mut rng, &opts));
        }
        if wanted("gemm-trace") {
            step("gemm-trace", check::gemm_trace(&gpu, &arena, &mut rng, &opts));
        }
        if wanted("gemm-splitk") {
            step("gemm-splitk", check::gemm_split_checks(&gpu, &arena, &mut rng, &opts));
        }
        if wanted("graph") {
            step("graph", check::gemm_step_graph(&gpu, &arena, &mut rng, &opts).map(|r| vec![r]));
        }
        if wanted("attention-bench") {
            step("attention-bench", check::attention_checks(&gpu, &arena, &mut rng, &opts));
        }
    }
    let failed = rows.iter().filter(|r| !r.pass).count();
    println!("\n==== summary ({:.1} s) ====", t0.elapsed().as_secs_f64());
    for r in &rows {
        println!("{r}");
    }
    println!("{} passed, {} failed", rows.len() - failed, failed);
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}
