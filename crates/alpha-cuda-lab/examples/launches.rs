//! Lists a system's lowered training step for the GPU, one launch a line: kernel, grid, and
//! the plan node it computes with its op and shape; with `--ptx DIR`, writes every distinct
//! kernel's PTX there too (for `ptxas`). No GPU needed; the `ALPHA_*` switches apply.
//!
//!   cargo run --release -p alpha-cuda-lab --example launches -- gpt2 16 [--ptx DIR]

use alpha_cuda::lower::lower_program;
use alpha_cuda::CudaConfig;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().map(String::as_str).unwrap_or("gpt2");
    let batch: usize = args.get(1).map(|b| b.parse()).transpose()?.unwrap_or(1);
    let sys = alpha_systems::find(name).map_err(anyhow::Error::msg)?;
    let program = sys.learner(10).training_program(sys.model(batch)?)?;
    let lowered = lower_program(&program, &CudaConfig::from_vars(|v| std::env::var(v).ok())?)?;
    if let Some(at) = args.iter().position(|a| a == "--ptx") {
        let dir = args.get(at + 1).ok_or_else(|| anyhow::anyhow!("--ptx needs a folder"))?;
        lowered.dump_ptx(std::path::Path::new(dir))?;
    }
    let g = &lowered.plan.program.graph;
    for (p, phase) in lowered.phases.iter().enumerate() {
        for (i, x) in phase.iter().enumerate() {
            let k = &lowered.kernels[x.kernel];
            let node = x.node.map_or("copy".to_string(), |n| {
                let nd = &g.nodes[n as usize];
                let shape = g.ty(alpha_ir::Value { node: n, index: 0 });
                format!("node {n} {:?} {:?}", nd.op, shape).chars().take(160).collect()
            });
            println!("{p}.{i} {} grid {:?} {node}", k.name, x.grid);
        }
    }
    Ok(())
}
