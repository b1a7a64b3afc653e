//! Lowering whole systems needs no GPU: Bob's and Coppelius's training and inference programs
//! lower to launches whose kernels fit the launch budget, whose every pointer lies inside the
//! arena, and whose modules are shared across Coppelius's 16 identical blocks.

use alpha_cuda::lower::{lower_program, LArg, Lowered};
use alpha_systems::System;

fn check_pointers(l: &Lowered) {
    for ph in &l.phases {
        for launch in ph {
            for a in &launch.args {
                if let LArg::Ptr(o) = a {
                    assert!(*o < l.arena, "{}: offset {o} outside the {}-byte arena", l.describe(launch), l.arena);
                }
            }
            let k = &l.kernels[launch.kernel];
            assert_eq!(k.params.len(), launch.args.len(), "{}", l.describe(launch));
            if let Some(t) = k.block_threads() {
                assert_eq!(t, launch.block.0 * launch.block.1 * launch.block.2, "{}", l.describe(launch));
            }
            assert!(launch.grid.0 > 0 && launch.grid.1 > 0 && launch.grid.2 > 0);
        }
    }
    for k in &l.kernels {
        k.check_budget().unwrap();
    }
}

#[test]
fn bob_and_coppelius_lower_within_the_arena_and_share_kernels() {
    let bob = alpha_systems::bob::Bob;
    let l = lower_program(&bob.learner(10).training_program(bob.model(4).unwrap()).unwrap()).unwrap();
    check_pointers(&l);
    assert_eq!(l.phases.len(), 1);

    let c = alpha_systems::coppelius::Coppelius::default();
    let l = lower_program(&c.learner(10).training_program(c.model(1).unwrap()).unwrap()).unwrap();
    check_pointers(&l);
    let launches = l.launch_count(0);
    assert!(launches > 1000, "{launches} launches");
    assert!(l.kernels.len() < 100, "{} distinct kernels: blocks should share modules", l.kernels.len());
    let names: Vec<&str> = l.kernels.iter().map(|k| k.name.as_str()).collect();
    for family in ["attention_fwd", "attention_bwd_dq", "attention_bwd_dkv", "layernorm_fwd", "rotary", "adamw_step"] {
        assert!(names.contains(&family), "no {family} kernel");
    }
    assert!(
        names.iter().any(|n| n.starts_with("gemm_") && n.ends_with("_bf16_store")),
        "bf16 products use the tiled GEMM"
    );

    let inf = alpha_learn::inference_program(c.model(1).unwrap()).unwrap();
    check_pointers(&lower_program(&inf).unwrap());
}

#[test]
fn accumulation_phases_lower_with_their_copies() {
    let bob = alpha_systems::bob::Bob;
    let mut learner = bob.learner(10);
    learner.accumulation = 2;
    let l = lower_program(&learner.training_program(bob.model(2).unwrap()).unwrap()).unwrap();
    assert_eq!(l.phases.len(), 2);
    check_pointers(&l);
    // The accumulate phase ends by copying the summed gradient into its accumulator.
    assert!(l.phases[0].iter().any(|x| x.node.is_none()), "no phase-end copy in 'accumulate'");
}
