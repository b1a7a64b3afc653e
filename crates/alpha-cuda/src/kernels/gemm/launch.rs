//! A product's launch: its argument list (A, B, C, R, the shape, then the extras its epilogue
//! and engine read) and the host launchers over raw device addresses.

use super::*;

/// The pointers a kernel of a spec takes after its shape: its second output `u` (an
/// activation's, or [`Epilogue::StoreMul`]'s bf16 product), the TMA engine's tensor maps of A
/// and B (encoded from [`crate::kernels::gemm::tma::map_specs`]), the turned heads' rotary table.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extras {
    pub u: Option<u64>,
    pub maps: Option<(u64, u64)>,
    pub rot_tab: Option<u64>,
    /// A chain epilogue's outputs, then its inputs beside the product ([`ChainEpilogue`]).
    pub chain: [Option<u64>; 2 * CHAIN_PTRS],
    /// A gated product's tensor map of the gate's B ([`GemmSpec::gated`]).
    pub gate_map: Option<u64>,
    /// A paired product's maps of the first product's A and B ([`GemmSpec::k_pair`]).
    pub first_maps: Option<(u64, u64)>,
}

/// Launches `f` (built from `spec`) on device addresses `a`, `b`, `c` and residual `r` (ignored
/// unless the epilogue is [`Epilogue::AddResidual`]; pass `c` for in-place `C += A·B` style).
#[allow(clippy::too_many_arguments)]
pub fn launch(
    gpu: &Gpu,
    f: &Function,
    spec: &GemmSpec,
    shape: &GemmShape,
    a: u64,
    b: u64,
    c: u64,
    r: u64,
) -> Result<()> {
    launch_with(gpu, f, spec, shape, [a, b, c, r], Extras::default())
}

/// [`launch`] with the pointers `spec`'s kernel takes beyond A, B, C and R: each of `extras`
/// given exactly where the kernel has its parameter.
pub fn launch_with(
    gpu: &Gpu,
    f: &Function,
    spec: &GemmSpec,
    shape: &GemmShape,
    [a, b, c, r]: [u64; 4],
    extras: Extras,
) -> Result<()> {
    let wants = (spec.takes_u(), spec.engine == Engine::Tma, spec.heads.is_some_and(|h| h.bf16_turned));
    if (extras.u.is_some(), extras.maps.is_some(), extras.rot_tab.is_some()) != wants {
        bail!("{}: takes (u, tensor maps, rotary table) {wants:?}, given {extras:?}", spec.name());
    }
    if extras.gate_map.is_some() != spec.gated {
        bail!("{}: a gate's tensor map goes with a gated product alone, given {extras:?}", spec.name());
    }
    if extras.first_maps.is_some() != spec.k_pair {
        bail!("{}: a first product's tensor maps go with a paired product alone, given {extras:?}", spec.name());
    }
    let chain_ptrs = spec.chain.map_or(0, |c| c.outputs().len() + c.others().len());
    if extras.chain.iter().flatten().count() != chain_ptrs || extras.chain[..chain_ptrs].iter().any(Option::is_none) {
        bail!("{}: takes {chain_ptrs} chain pointers, given {:?}", spec.name(), extras.chain);
    }
    if spec.chain.is_some() && shape.batch != 1 {
        bail!("{}: a chain epilogue takes an unbatched product, not {} entries", spec.name(), shape.batch);
    }
    if let Some(maps) = extras.maps {
        crate::kernels::gemm::tma::check_shape(spec, shape)?;
        for p in [maps.0, maps.1] {
            if p % 64 != 0 {
                bail!("{}: a tensor map at {p:#x} is not 64-byte aligned", spec.name());
            }
        }
    }
    shape.check(spec)?;
    for (what, p) in [("A", a), ("B", b), ("C", c)] {
        if p % 16 != 0 {
            bail!("{}: {what} at {p:#x} is not 16-byte aligned", spec.name());
        }
    }
    let grid = spec.grid(shape);
    let cfg = LaunchConfig { grid, block: (spec.threads(), 1, 1), shared_bytes: 0 };
    let mut args = vec![
        Arg::U64(a),
        Arg::U64(b),
        Arg::U64(c),
        Arg::U64(r),
        Arg::U32(shape.m),
        Arg::U32(shape.n),
        Arg::U32(shape.k),
        Arg::U32(shape.lda),
        Arg::U32(shape.ldb),
        Arg::U32(shape.ldc),
        Arg::U64(shape.stride_a),
        Arg::U64(shape.stride_b),
        Arg::U64(shape.stride_c),
    ];
    debug_assert_eq!(args.len(), SHAPE_ARGS);
    args.extend(extras.u.map(Arg::U64));
    args.extend(extras.chain.iter().flatten().map(|&p| Arg::U64(p)));
    args.extend(extras.maps.into_iter().flat_map(|(ma, mb)| [Arg::U64(ma), Arg::U64(mb)]));
    args.extend(extras.gate_map.map(Arg::U64));
    args.extend(extras.first_maps.into_iter().flat_map(|(ma, mb)| [Arg::U64(ma), Arg::U64(mb)]));
    args.extend(extras.rot_tab.map(Arg::U64));
    gpu.launch(f, cfg, &args)
}

/// The shortest K split into parts that may differ by a K step ([`GemmShape::split_k_uneven`]):
/// sixteen contexts' weight gradients (K = 16,384); one context's (K = 1,024) keep their
/// power-of-two parts.
pub const UNEVEN_MIN_K: u32 = 4096;

/// Launches the split-K reduction `f` ([`splitk_reduce_kernel`] over `mn` elements, `width` a
/// thread) on C, R and the partials, with its grid ([`splitk_reduce_blocks`]).
pub fn launch_splitk_reduce(gpu: &Gpu, f: &Function, mn: u32, width: u32, [c, r, partials]: [u64; 3]) -> Result<()> {
    let cfg =
        LaunchConfig { grid: (splitk_reduce_blocks(mn, width), 1, 1), block: (REDUCE_THREADS, 1, 1), shared_bytes: 0 };
    gpu.launch(f, cfg, &[Arg::U64(c), Arg::U64(r), Arg::U64(partials)])
}
