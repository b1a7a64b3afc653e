use super::*;

fn all(dims: &Dims) -> Vec<Kernel> {
    let mut v = vec![];
    for load in [[false, false], [true, false], [false, true], [true, true]] {
        v.push(forward_kernel_rotating(dims, load));
        for r in [false, true] {
            v.push(backward_dq_kernel_rotating(dims, r, load));
            v.push(backward_dkv_kernel_rotating(dims, r, load));
        }
        if dims.g == dims.h {
            for r in [[false, false], [true, true], [true, false], [false, true]] {
                v.push(backward_kernel_rotating(dims, r, load));
            }
        }
    }
    v.push(backward_delta_kernel(dims));
    v.push(backward_delta_kernel_bf16(dims));
    for r in [false, true] {
        v.push(backward_dq_kernel_bf16(dims, r));
        v.push(backward_dkv_kernel_bf16(dims, r));
    }
    if dims.g == dims.h {
        v.push(forward_kernel_bf16(dims));
        v.push(forward_kernel_bf16_copying(dims));
        for r in [[false, false], [true, true], [true, false], [false, true]] {
            v.push(backward_kernel_bf16(dims, r));
        }
        v.push(backward_kernel_bf16_merged(dims, [true, true]));
        v.push(backward_kernel_bf16_merged_f32(dims, [true, true]));
    }
    v
}

#[test]
fn kernels_fit_the_budget_and_use_the_tensor_cores() {
    let dims = Dims { b: 1, h: 8, g: 8, t: 1024, d: 64, scale: 0.125, softcap: None };
    assert!(applies(&dims));
    assert!(!applies(&Dims { d: 32, ..dims }));
    assert!(!applies(&Dims { g: 3, ..dims }));
    for d in [dims, Dims { h: 4, g: 2, t: 200, softcap: Some(30.0), ..dims }] {
        for k in all(&d) {
            k.check_budget().unwrap();
            assert!(k.static_shared_bytes() <= 4 * TILE + 5 * ROWS * 4, "{}", k.name);
            assert_eq!(k.dynamic_shared, 0, "{}", k.name);
            let text = k.render();
            assert!(text.contains(".reqntid 128, 1, 1"));
            let mmas = text.matches(MMA).count();
            // fwd: 32 (S) + 32 (PV); dq: 4 chunks × (8 + 8 + 8); dkv: 4 × (8 + 8 + 8 + 8).
            let name = k.name.replace("attention_mma_bf16", "attention_mma");
            let pass = |p: &str| name.starts_with(&format!("attention_mma_{p}"));
            // bf16 inputs are copied, never converted; f32 ones never copied.
            let bf16 = k.name.starts_with(BF16_FAMILY);
            assert_eq!(text.contains("cp.async.cg.shared.global"), bf16, "{}", k.name);
            let want = if pass("fwd") {
                64
            } else if pass("bwd_dq") {
                96
            } else if pass("bwd_dkv") {
                128
            } else if pass("bwd_delta") {
                0
            } else {
                96 + 128
            };
            assert_eq!(mmas, want, "{}", k.name);
        }
    }
}

#[test]
fn names_follow_the_fp32_kernels() {
    let dims = Dims { b: 1, h: 8, g: 8, t: 1024, d: 64, scale: 0.125, softcap: None };
    assert_eq!(forward_kernel(&dims).name, "attention_mma_fwd");
    assert_eq!(forward_kernel_rotating(&dims, [true, true]).name, "attention_mma_fwd_rotload");
    assert_eq!(backward_dq_kernel_rotating(&dims, true, [true, true]).name, "attention_mma_bwd_dq_rotload_rotary");
    assert_eq!(backward_dkv_kernel(&dims, false).name, "attention_mma_bwd_dkv");
    assert_eq!(forward_kernel_bf16(&dims).name, "attention_mma_bf16_fwd");
    assert_eq!(backward_kernel_bf16(&dims, [true, true]).name, "attention_mma_bf16_bwd_rotary");
    // The bf16 kernels take the plain kernels' parameters (no load tables), the one-launch
    // backward dO's bf16 copy too.
    assert_eq!(forward_kernel_bf16(&dims).params, forward_kernel(&dims).params);
    let mut want = backward_kernel_rotating(&dims, [true, false], [false, false]).params;
    want.insert(10, crate::ptx::Param { name: "do16".into(), ty: crate::ptx::ParamTy::U64 });
    assert_eq!(backward_kernel_bf16(&dims, [true, false]).params, want);
    // Same parameter lists as the fp32 kernels.
    for (a, b) in [
        (
            forward_kernel_rotating(&dims, [true, false]),
            crate::kernels::attention::forward_kernel_rotating(&dims, [true, false]),
        ),
        (
            backward_dq_kernel_rotating(&dims, true, [false, true]),
            crate::kernels::attention::backward_dq_kernel_rotating(&dims, true, [false, true]),
        ),
        (
            backward_dkv_kernel_rotating(&dims, true, [true, true]),
            crate::kernels::attention::backward_dkv_kernel_rotating(&dims, true, [true, true]),
        ),
    ] {
        assert_eq!(a.params, b.params);
    }
}
