//! A product's launch: its argument list (A, B, C, R, the shape, then the extras its epilogue
//! and engine read) and the host launchers over raw device addresses.

use super::*;

/// The pointers a kernel of a spec takes after its shape: its second output `u` (an
/// activation's, or [`Epilogue::StoreMul`]'s bf16 product), the TMA engine's tensor maps of A
/// and B (encoded from [`crate::kernels::gemm::tma::map_specs`]), the turned heads' rotary table,
/// the heads' bias.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extras {
    pub u: Option<u64>,
    pub maps: Option<(u64, u64)>,
    pub rot_tab: Option<u64>,
    /// The bias a head-split store adds ([`Heads::bias`]).
    pub bias: Option<u64>,
    /// A chain epilogue's outputs, then its inputs beside the product, then its column sums'
    /// partials where it sums ([`ChainEpilogue::pointers`]).
    pub chain: [Option<u64>; 2 * CHAIN_PTRS + 1],
    /// A gated product's tensor map of the gate's B ([`GemmSpec::gated`]).
    pub gate_map: Option<u64>,
    /// A paired product's maps of the first product's A and B ([`GemmSpec::k_pair`]).
    pub first_maps: Option<(u64, u64)>,
}

/// The pointers of one product launch, each in whatever stands for a device address where the
/// arguments are built.
#[derive(Clone, Debug)]
pub struct Operands<T> {
    pub a: T,
    pub b: T,
    pub c: T,
    /// The residual (read by [`Epilogue::AddResidual`]; otherwise any pointer, C by custom).
    pub r: T,
    /// The second output ([`GemmSpec::takes_u`]): an activation's, [`Epilogue::StoreMul`]'s
    /// bf16 product, or a delta-heads store's delta.
    pub u: Option<T>,
    /// A chain epilogue's outputs, then its inputs beside the product ([`ChainEpilogue`]).
    pub chain: Vec<T>,
    /// The TMA engine's tensor maps of A and B.
    pub maps: Option<(T, T)>,
    /// A gated product's tensor map of the gate's B ([`GemmSpec::gated`]).
    pub gate_map: Option<T>,
    /// A paired product's maps of the first product's A and B ([`GemmSpec::k_pair`]).
    pub first_maps: Option<(T, T)>,
    /// The turned heads' rotary table.
    pub rot_tab: Option<T>,
    /// The bias a head-split store adds ([`Heads::bias`]).
    pub bias: Option<T>,
}

impl<T> Operands<T> {
    /// A, B, C and R with no extras.
    pub fn new([a, b, c, r]: [T; 4]) -> Self {
        Operands {
            a,
            b,
            c,
            r,
            u: None,
            chain: vec![],
            maps: None,
            gate_map: None,
            first_maps: None,
            rot_tab: None,
            bias: None,
        }
    }
}

/// Every argument of a product launch over `shape`, in its kernel's parameter order: A, B, C,
/// R, the six dimensions and three batch strides ([`SHAPE_ARGS`] in all), then each extra
/// present.
pub fn arguments<T: ScalarArg>(shape: &GemmShape, ops: Operands<T>) -> Vec<T> {
    let mut args = vec![ops.a, ops.b, ops.c, ops.r];
    args.extend([shape.m, shape.n, shape.k, shape.lda, shape.ldb, shape.ldc].map(T::u32));
    args.extend([shape.stride_a, shape.stride_b, shape.stride_c].map(T::u64));
    debug_assert_eq!(args.len(), SHAPE_ARGS);
    args.extend(ops.u);
    args.extend(ops.chain);
    args.extend(ops.maps.into_iter().flat_map(|(x, y)| [x, y]));
    args.extend(ops.gate_map);
    args.extend(ops.first_maps.into_iter().flat_map(|(x, y)| [x, y]));
    args.extend(ops.rot_tab);
    args.extend(ops.bias);
    args
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
    if extras.bias.is_some() != spec.takes_bias() {
        bail!(
            "{}: a bias row goes with a head-split or narrow store that adds one alone, given {extras:?}",
            spec.name()
        );
    }
    if extras.first_maps.is_some() != spec.k_pair {
        bail!("{}: a first product's tensor maps go with a paired product alone, given {extras:?}", spec.name());
    }
    let chain_ptrs = spec.chain.map_or(0, |c| c.pointers());
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
    let pair = |(x, y): (u64, u64)| (Arg::U64(x), Arg::U64(y));
    let ops = Operands {
        u: extras.u.map(Arg::U64),
        chain: extras.chain.iter().flatten().map(|&p| Arg::U64(p)).collect(),
        maps: extras.maps.map(pair),
        gate_map: extras.gate_map.map(Arg::U64),
        first_maps: extras.first_maps.map(pair),
        rot_tab: extras.rot_tab.map(Arg::U64),
        bias: extras.bias.map(Arg::U64),
        ..Operands::new([a, b, c, r].map(Arg::U64))
    };
    gpu.launch(f, cfg, &arguments(shape, ops))
}

/// The shortest K split into parts that may differ by a K step ([`GemmShape::split_k_uneven`]):
/// sixteen contexts' weight gradients (K = 16,384); one context's (K = 1,024) keep their
/// power-of-two parts.
pub const UNEVEN_MIN_K: u32 = 4096;

/// The K a part of a long product's split walks ([`GemmShape::split_k_long`]): sixteen
/// contexts' weight gradients, whose products keep their operand slices in L2.
pub const LONG_K_PART: u32 = 16384;

/// Launches the split-K reduction `f` ([`splitk_reduce_kernel`] over `mn` elements, `width` a
/// thread) on C, R and the partials, with its grid ([`splitk_reduce_blocks`]).
pub fn launch_splitk_reduce(gpu: &Gpu, f: &Function, mn: u32, width: u32, [c, r, partials]: [u64; 3]) -> Result<()> {
    let cfg =
        LaunchConfig { grid: (splitk_reduce_blocks(mn, width), 1, 1), block: (REDUCE_THREADS, 1, 1), shared_bytes: 0 };
    gpu.launch(f, cfg, &splitk_reduce_arguments([c, r, partials].map(Arg::U64), None))
}
