//! `snapshot DIR`: writes the PTX of every kernel Alpha can build and every launch (kernel,
//! grid, block, arguments) and every load-time constant of Bob's, Coppelius's (one and 16
//! contexts) and GPT-2's training steps to DIR, without a GPU.
//!
//! Why: a refactor of a kernel family or of the lowering that should change nothing can then be
//! shown to change nothing: take a snapshot before and after, and `cmp` the files.

use alpha_systems::System;

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: snapshot DIR");
        std::process::exit(2);
    };
    std::fs::create_dir_all(&dir).expect("create the snapshot folder");
    let mut all = String::new();
    for k in alpha_cuda::catalog() {
        all += &k.render();
    }
    for s in alpha_cuda::gemm::GemmSpec::all() {
        all += &s.kernel().render();
    }
    std::fs::write(format!("{dir}/catalog.ptx"), all).expect("write catalog.ptx");
    let coppelius = alpha_systems::coppelius::Coppelius::default();
    let gpt2 = alpha_systems::gpt2::Gpt2::default();
    let systems: [(&str, &dyn System, usize); 4] = [
        ("coppelius", &coppelius, 1),
        ("coppelius-b16", &coppelius, 16),
        ("bob", &alpha_systems::bob::Bob, 4),
        ("gpt2", &gpt2, 1),
    ];
    for (name, sys, batch) in systems {
        let program = sys.learner(10).training_program(sys.model(batch).expect("model")).expect("program");
        let l = alpha_cuda::lower::lower_program(&program).expect("lowering");
        let mut t = String::new();
        for k in &l.kernels {
            t += &k.render();
        }
        for ph in &l.phases {
            for x in ph {
                t += &format!("{} {:?} {:?} {:?}\n", l.kernels[x.kernel].name, x.grid, x.block, x.args);
            }
        }
        // The constants written at load (chunk tables, rotary tables), by offset, length and an
        // FNV-1a digest of their bytes.
        for (offset, bytes) in &l.inits {
            let digest =
                bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
            t += &format!("init {offset} {} {digest:016x}\n", bytes.len());
        }
        for (at, operand, map) in &l.tensor_maps {
            t += &format!("tensor map {at} over {operand} {map:?}\n");
        }
        std::fs::write(format!("{dir}/{name}.txt"), t).expect("write the launches");
    }
}
