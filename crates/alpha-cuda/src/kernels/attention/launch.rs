//! Every attention launch's argument list, in its kernel's parameter order: built here once for
//! the lowering (arena offsets) and the lab's checks (device addresses).
//!
//! Each takes the tensors every variant of its pass reads, then what a variant adds: the
//! rotary tables of q and k turned on load (`load_tables`, those turned, q's first), the
//! inverse rotary's table of a gradient stored turned back, dO's bf16 copy, the output's
//! permuted bf16 copy.

/// The forward: o, lse, q, k, v, then the load tables and the output's bf16 copy.
pub fn forward_arguments<T>([o, lse, q, k, v]: [T; 5], load_tables: Vec<T>, copy: Option<T>) -> Vec<T> {
    let mut args = vec![o, lse, q, k, v];
    args.extend(load_tables);
    args.extend(copy);
    args
}

/// The dQ pass: dq, delta, q, k, v, o, lse, dO, then dq's inverse table and the load tables.
pub fn dq_arguments<T>(tensors: [T; 8], inverse_table: Option<T>, load_tables: Vec<T>) -> Vec<T> {
    let mut args = Vec::from(tensors);
    args.extend(inverse_table);
    args.extend(load_tables);
    args
}

/// The dK/dV pass: dk, dv, q, k, v, lse, delta, dO, then dk's inverse table and the load tables.
pub fn dkv_arguments<T>(tensors: [T; 8], inverse_table: Option<T>, load_tables: Vec<T>) -> Vec<T> {
    dq_arguments(tensors, inverse_table, load_tables)
}

/// The delta launch before the one-launch backward: delta, o, dO, and dO's bf16 copy it writes.
pub fn delta_arguments<T>([delta, o, dout]: [T; 3], do16: Option<T>) -> Vec<T> {
    let mut args = vec![delta, o, dout];
    args.extend(do16);
    args
}

/// Both backward passes in one launch: dq, dk, dv (three times the merged gradient's cast where
/// the kernel stores that), delta, q, k, v, o, lse, dO, then dO's bf16 copy, the inverse tables
/// (dq's, then dk's, those stored turned back) and the load tables.
pub fn backward_arguments<T>(tensors: [T; 10], do16: Option<T>, inverse_tables: Vec<T>, load_tables: Vec<T>) -> Vec<T> {
    let mut args = Vec::from(tensors);
    args.extend(do16);
    args.extend(inverse_tables);
    args.extend(load_tables);
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::attention::{self as fp32, mma, wgmma, Dims};
    use crate::ptx::{Kernel, ParamTy};

    /// The builders give each kernel exactly its parameters (every one a pointer) for every
    /// variant the lowering launches: a table or copy too many or missing would not match.
    #[test]
    fn arguments_match_every_variants_parameters() {
        let d = Dims { b: 1, h: 4, g: 4, t: 128, d: 64, scale: 0.125, softcap: None };
        let p = |n: u64| -> Vec<u64> { (100..100 + n).collect() };
        let ten = [0u64; 10];
        let eight = [0u64; 8];
        let cases: Vec<(Kernel, Vec<u64>)> = vec![
            (fp32::forward_kernel_rotating(&d, [true, true]), forward_arguments([0; 5], p(2), None)),
            (mma::forward_kernel_rotating(&d, [true, false]), forward_arguments([0; 5], p(1), None)),
            (mma::forward_kernel_bf16(&d), forward_arguments([0; 5], vec![], None)),
            (mma::forward_kernel_bf16_copying(&d), forward_arguments([0; 5], vec![], Some(1))),
            (wgmma::forward_kernel(&d, true), forward_arguments([0; 5], vec![], Some(1))),
            (fp32::backward_dq_kernel_rotating(&d, true, [true, true]), dq_arguments(eight, Some(1), p(2))),
            (mma::backward_dq_kernel_rotating(&d, false, [true, true]), dq_arguments(eight, None, p(2))),
            (mma::backward_dkv_kernel_rotating(&d, true, [false, false]), dkv_arguments(eight, Some(1), vec![])),
            (mma::backward_delta_kernel(&d), delta_arguments([0; 3], None)),
            (mma::backward_delta_kernel_bf16(&d), delta_arguments([0; 3], Some(1))),
            (mma::backward_kernel_rotating(&d, [true, false], [true, true]), backward_arguments(ten, None, p(1), p(2))),
            (mma::backward_kernel_bf16(&d, [true, true]), backward_arguments(ten, Some(1), p(2), vec![])),
            (mma::backward_kernel_bf16_merged(&d, [false, true]), backward_arguments(ten, Some(1), p(1), vec![])),
            (
                wgmma::backward_kernel(&d, [true, true], mma::Gradients::MergedBf16),
                backward_arguments(ten, Some(1), p(2), vec![]),
            ),
            (mma::backward_kernel_bf16_merged_f32(&d, [true, true]), backward_arguments(ten, Some(1), p(2), vec![])),
        ];
        for (kernel, args) in cases {
            let params: Vec<ParamTy> = kernel.params.iter().map(|p| p.ty).collect();
            assert_eq!(params, vec![ParamTy::U64; args.len()], "{}", kernel.name);
        }
    }
}
