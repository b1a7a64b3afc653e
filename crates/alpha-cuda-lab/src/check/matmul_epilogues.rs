//! The GEMM's fused epilogues: elementwise chains, the multiply, the gated pair, head-split
//! stores and the delta-heads store.

use super::*;

/// Chain epilogues ([`gemm::ChainEpilogue`]) against the plain product followed by the chain's
/// own kernel, bit for bit: the gated GELU's backward reading `gelu(gate)` (f32 outputs, three
/// other inputs, 128 × 128 tiles on the three-stage ring) and recomputing it (bf16 outputs, the
/// lowering's form, in 128 × 128 tiles through shared memory — [`alpha_cuda::kernels::gemm::tma::staged`]
/// — and in 128 × 64 tiles on the fragments), a ragged M; and a linear layer's bias read as a
/// row (GPT-2's: bias and GELU, stored f32 and bf16; bias and residual), both ways; and a
/// result stored twice, f32 and bf16.
pub(super) fn chain_epilogue_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::fused::{Broadcast, Chain, Src, Step};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    use alpha_ir::{Binary, Unary};
    let (m, n, k) = (1000u32, 1408u32, 512u32);
    let nc = (m * n) as usize;
    let read_act = Chain { bf16: vec![false, false], ..Chain::gated_gelu_backward(nc) };
    let recomputing = Chain::gated_gelu_backward_recomputing(nc);
    let bias_gelu = Chain {
        n: nc,
        inputs: 2,
        steps: vec![Step::Binary(Binary::Add, Src::Input(0), Src::Input(1)), Step::Unary(Unary::Gelu, Src::Step(0))],
        outputs: vec![0, 1],
        bf16: vec![false, true],
        broadcast: vec![Broadcast::None, Broadcast::Row(n)],
    };
    let bias_residual = Chain {
        n: nc,
        inputs: 3,
        steps: vec![
            Step::Binary(Binary::Add, Src::Input(0), Src::Input(1)),
            Step::Binary(Binary::Add, Src::Input(2), Src::Step(0)),
        ],
        outputs: vec![1],
        bf16: vec![false],
        broadcast: vec![Broadcast::None, Broadcast::Row(n), Broadcast::None],
    };
    // GPT-2's GELU backward storing its result twice, f32 for the bias gradient and bf16 for the
    // products (the cast's copy).
    let gelu_grad_copied = Chain {
        n: nc,
        inputs: 2,
        steps: vec![
            Step::Unary(Unary::GeluGrad, Src::Input(1)),
            Step::Binary(Binary::Mul, Src::Input(0), Src::Step(0)),
        ],
        outputs: vec![1, 1],
        bf16: vec![false, true],
        broadcast: vec![],
    };
    let mut rows = vec![];
    // (chain, tile, ring depth)
    let cases = [
        (gelu_grad_copied.clone(), Tile::T128x128, 3),
        (gelu_grad_copied, Tile::T128x64, 0),
        (read_act, Tile::T128x128, 3),
        (recomputing.clone(), Tile::T128x128, 3),
        (recomputing, Tile::T128x64, 0),
        (bias_gelu.clone(), Tile::T128x128, 3),
        (bias_gelu, Tile::T128x64, 0),
        (bias_residual.clone(), Tile::T128x128, 3),
        (bias_residual, Tile::T128x64, 0),
    ];
    for (chain, tile, stages) in cases {
        arena.reset();
        let plain = GemmSpec { tile, stages, ..GemmSpec::new(Layout::RowMajor, Layout::ColMajor, Input::Bf16).tma() };
        let epilogue = gemm::ChainEpilogue::new(&chain, 0).expect("the chain fits an epilogue");
        let fused = GemmSpec { chain: Some(epilogue), ..plain };
        let sh = GemmShape::packed(&plain, m, n, k);
        let GemmCase { ab, bb, cb, .. } = gemm_case(arena, rng, &plain, &sh)?;
        let maps = tma_maps(arena, &plain, &sh, ab.ptr, bb.ptr)?.expect("a TMA launch");
        let others: Vec<u64> = (1..chain.inputs)
            .map(|j| {
                let len = if chain.broadcast_of(j) == Broadcast::Row(n) { n as usize } else { nc };
                let b = arena.alloc_n::<f32>(len)?;
                arena.upload(b, &rng.vec(len, 2.0))?;
                Ok(b.ptr)
            })
            .collect::<Result<_>>()?;
        let bytes = |j: usize| if chain.bf16[j] { 2 } else { 4 };
        let outputs = |arena: &DeviceArena| -> Result<Vec<alpha_cuda::runtime::driver::Buf>> {
            (0..chain.outputs.len())
                .map(|j| {
                    let b = arena.alloc(nc * bytes(j))?;
                    arena.fill_u32(b, NAN_BITS)?;
                    Ok(b)
                })
                .collect()
        };
        // The plain product, then the chain's kernel on it.
        let f = gpu.load(&plain.kernel())?;
        let extras = Extras { maps: Some(maps), ..Extras::default() };
        gemm::launch_with(gpu, &f, &plain, &sh, [ab.ptr, bb.ptr, cb.ptr, cb.ptr], extras)?;
        let want = outputs(arena)?;
        let fc = gpu.load(&chain.kernel()?)?;
        let mut args: Vec<Arg> = want.iter().map(|b| Arg::U64(b.ptr)).collect();
        args.push(Arg::U64(cb.ptr));
        args.extend(others.iter().map(|&p| Arg::U64(p)));
        let (blocks, threads) = alpha_cuda::kernels::pointwise::grid_blocks(nc);
        gpu.launch(&fc, LaunchConfig::linear(blocks, threads), &args)?;
        // The product with the chain in its epilogue.
        let got = outputs(arena)?;
        let mut chain_ptrs = [None; 2 * gemm::CHAIN_PTRS + 1];
        for (slot, p) in chain_ptrs.iter_mut().zip(got.iter().map(|b| b.ptr).chain(others.iter().copied())) {
            *slot = Some(p);
        }
        let f = gpu.load(&fused.kernel())?;
        let extras = Extras { maps: Some(maps), chain: chain_ptrs, ..Extras::default() };
        gemm::launch_with(gpu, &f, &fused, &sh, [ab.ptr, bb.ptr, cb.ptr, cb.ptr], extras)?;
        let mut differ = 0;
        for (j, (&w, &g)) in want.iter().zip(&got).enumerate() {
            let words = nc * bytes(j) / 4;
            let (w, g): (Vec<u32>, Vec<u32>) = (arena.download(w, words)?, arena.download(g, words)?);
            differ += w.iter().zip(&g).filter(|(x, y)| x != y).count();
        }
        let words: usize = (0..chain.outputs.len()).map(|j| nc * bytes(j) / 4).sum();
        rows.push(exact_row("fusion", &fused.name(), &format!("m{m} n{n} k{k}"), differ, words));
    }
    Ok(rows)
}

/// A chain epilogue summing a step down each column ([`gemm::ChainEpilogue::with_column_sum`]),
/// GPT-2's GELU backward storing only its bf16 result: that result bit for bit against the plain
/// product and the chain's own kernel, and the tiles' partial sums, added in order on the host,
/// against the f64 column sums of the chain kernel's f32 result (a ragged M, so the last tile's
/// rows past M add nothing); and a second launch's partials bit for bit the first's.
pub(super) fn chain_column_sum_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::fused::{Chain, Src, Step};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    use alpha_ir::{Binary, Unary};
    let (m, n, k) = (1000u32, 1408u32, 512u32);
    let (mu, nu) = (m as usize, n as usize);
    let nc = mu * nu;
    let steps =
        vec![Step::Unary(Unary::GeluGrad, Src::Input(1)), Step::Binary(Binary::Mul, Src::Input(0), Src::Step(0))];
    let stored = Chain { n: nc, inputs: 2, steps, outputs: vec![1, 1], bf16: vec![false, true], broadcast: vec![] };
    let summed = Chain { outputs: vec![1], bf16: vec![true], ..stored.clone() };
    arena.reset();
    let plain = GemmSpec { stages: 3, ..GemmSpec::new(Layout::RowMajor, Layout::ColMajor, Input::Bf16).tma() };
    let epilogue = gemm::ChainEpilogue::new(&summed, 0).expect("the chain fits an epilogue").with_column_sum(1);
    let fused = GemmSpec { chain: Some(epilogue), ..plain };
    let sh = GemmShape::packed(&plain, m, n, k);
    let GemmCase { ab, bb, cb, .. } = gemm_case(arena, rng, &plain, &sh)?;
    let maps = tma_maps(arena, &plain, &sh, ab.ptr, bb.ptr)?.expect("a TMA launch");
    let pre = arena.alloc_n::<f32>(nc)?;
    arena.upload(pre, &rng.vec(nc, 2.0))?;
    // The plain product, then the chain's kernel on it: f32 and bf16 results.
    let f = gpu.load(&plain.kernel())?;
    let extras = Extras { maps: Some(maps), ..Extras::default() };
    gemm::launch_with(gpu, &f, &plain, &sh, [ab.ptr, bb.ptr, cb.ptr, cb.ptr], extras)?;
    let (want_f, want_h) = (arena.alloc_n::<f32>(nc)?, arena.alloc_n::<u16>(nc)?);
    let fc = gpu.load(&stored.kernel()?)?;
    let args = [want_f.ptr, want_h.ptr, cb.ptr, pre.ptr].map(Arg::U64);
    let (blocks, threads) = alpha_cuda::kernels::pointwise::grid_blocks(nc);
    gpu.launch(&fc, LaunchConfig::linear(blocks, threads), &args)?;
    // The product with the chain and the column sums in its epilogue, twice.
    let row_tiles = mu.div_ceil(128);
    let f = gpu.load(&fused.kernel())?;
    let mut runs = vec![];
    for _ in 0..2 {
        let got_h = arena.alloc_n::<u16>(nc)?;
        let partials = arena.alloc_n::<f32>(row_tiles * nu)?;
        arena.fill_u32(got_h, NAN_BITS)?;
        arena.fill_u32(partials, NAN_BITS)?;
        let mut chain = [None; 2 * gemm::CHAIN_PTRS + 1];
        chain[..3].copy_from_slice(&[Some(got_h.ptr), Some(pre.ptr), Some(partials.ptr)]);
        let extras = Extras { maps: Some(maps), chain, ..Extras::default() };
        gemm::launch_with(gpu, &f, &fused, &sh, [ab.ptr, bb.ptr, cb.ptr, cb.ptr], extras)?;
        let h: Vec<u16> = arena.download(got_h, nc)?;
        let p: Vec<f32> = arena.download(partials, row_tiles * nu)?;
        runs.push((h, p));
    }
    let want_h: Vec<u16> = arena.download(want_h, nc)?;
    let want_f: Vec<f32> = arena.download(want_f, nc)?;
    let differ = runs[0].0.iter().zip(&want_h).filter(|(x, y)| x != y).count();
    let mut rows = vec![exact_row("fusion", &fused.name(), &format!("m{m} n{n} k{k}"), differ, nc)];
    let want: Vec<f32> = (0..nu).map(|c| (0..mu).map(|r| want_f[r * nu + c] as f64).sum::<f64>() as f32).collect();
    let got: Vec<f32> = (0..nu).map(|c| runs[0].1[c * row_tiles..(c + 1) * row_tiles].iter().sum()).collect();
    let (max_abs, rel) = compare(&got, &want);
    let repeat = runs[0].1.iter().zip(&runs[1].1).all(|(a, b)| a.to_bits() == b.to_bits());
    rows.push(Row {
        family: "fusion".into(),
        name: format!("{} column sums", fused.name()),
        shape: format!("m{m} n{n} k{k}"),
        max_abs,
        rel,
        tol: 1e-5,
        pass: rel <= 1e-5 && repeat,
        median_us: None,
        rate: format!(
            "{} partials a column; two launches {}",
            row_tiles,
            if repeat { "bit-identical" } else { "DIFFER" }
        ),
    });
    Ok(rows)
}

/// The StoreMul epilogue (a gated unit's `gelu(gate) · up` written by the `up` product, as bf16)
/// against the plain product and the multiply and rounding on the host, bit for bit: C and U,
/// a ragged M, both tile widths of the TMA engine.
pub(super) fn store_mul_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::pointwise::{Body, Operand, Pointwise};
    let mut rows = vec![];
    let gelu = Some(alpha_ir::Unary::Gelu);
    for (tile, stages, activation) in [(Tile::T128x128, 3, None), (Tile::T128x64, 0, None), (Tile::T128x128, 3, gelu)] {
        arena.reset();
        let plain = GemmSpec { tile, stages, ..GemmSpec::new(Layout::RowMajor, Layout::RowMajor, Input::Bf16).tma() };
        let fused = GemmSpec { epilogue: Epilogue::StoreMul, activation, ..plain };
        let sh = GemmShape::packed(&plain, 1000, 1408, 512);
        let GemmCase { ab, bb, cb, rb, r, nc, .. } = gemm_case(arena, rng, &plain, &sh)?;
        let maps = tma_maps(arena, &plain, &sh, ab.ptr, bb.ptr)?.expect("a TMA launch");
        let f = gpu.load(&plain.kernel())?;
        gemm::launch_with(
            gpu,
            &f,
            &plain,
            &sh,
            [ab.ptr, bb.ptr, cb.ptr, cb.ptr],
            Extras { maps: Some(maps), ..Extras::default() },
        )?;
        let want_c: Vec<f32> = arena.download(cb, nc)?;
        let (c2, u) = (arena.alloc_n::<f32>(nc)?, arena.alloc_n::<u16>(nc)?);
        arena.fill_u32(c2, NAN_BITS)?;
        arena.fill_u32(u, NAN_BITS)?;
        let f = gpu.load(&fused.kernel())?;
        gemm::launch_with(
            gpu,
            &f,
            &fused,
            &sh,
            [ab.ptr, bb.ptr, c2.ptr, rb.ptr],
            Extras { u: Some(u.ptr), maps: Some(maps), ..Extras::default() },
        )?;
        let got_c: Vec<f32> = arena.download(c2, nc)?;
        let got_u: Vec<u16> = arena.download(u, nc)?;
        // The multiplier: R, or the pointwise kernel's activation of R.
        let r = match activation {
            None => r,
            Some(f) => {
                let pw = Pointwise {
                    shape: vec![nc],
                    out: Operand::contiguous(alpha_ir::DType::F32, &[nc]),
                    ins: vec![Operand::contiguous(alpha_ir::DType::F32, &[nc])],
                    body: Body::Unary(f),
                };
                let act = arena.alloc_n::<f32>(nc)?;
                let (blocks, threads) = pw.grid();
                let fp = gpu.load(&pw.kernel()?)?;
                let cfg = alpha_cuda::runtime::driver::LaunchConfig::linear(blocks, threads);
                gpu.launch(
                    &fp,
                    cfg,
                    &[alpha_cuda::runtime::driver::Arg::U64(act.ptr), alpha_cuda::runtime::driver::Arg::U64(rb.ptr)],
                )?;
                arena.download(act, nc)?
            }
        };
        let differ = got_c.iter().zip(&want_c).filter(|(x, y)| x.to_bits() != y.to_bits()).count()
            + got_u
                .iter()
                .zip(want_c.iter().zip(&r))
                .filter(|(x, (c, r))| **x != half::bf16::from_f32(**c * **r).to_bits())
                .count();
        let multiplier = if activation.is_some() { "act(R)" } else { "R" };
        rows.push(exact_row(
            "fusion",
            &format!("{} = product, product·{multiplier}", fused.name()),
            "m1000 n1408 k512",
            differ,
            2 * nc,
        ));
    }
    Ok(rows)
}

/// The gated product ([`GemmSpec::gated`]: gate and up from one A tile, the multiply on
/// registers) against its two launches — the gate product, then the up product's StoreMul
/// reading the stored gate — bit for bit: the gate, the up product and the bf16 product. Both
/// ring depths; ragged M and N (the last 64 columns partly past the edge).
pub(super) fn gated_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    let mut rows = vec![];
    let gelu = Some(alpha_ir::Unary::Gelu);
    for (stages, (m, n, k)) in [(3, (1000, 1408, 512)), (0, (200, 136, 192))] {
        arena.reset();
        let plain = GemmSpec { stages, ..GemmSpec::new(Layout::RowMajor, Layout::RowMajor, Input::Bf16).tma() };
        let mul = GemmSpec { epilogue: Epilogue::StoreMul, activation: gelu, ..plain };
        let gated = GemmSpec { gated: true, ..mul };
        let sh = GemmShape::packed(&plain, m, n, k);
        let (na, nb, nc) = sh.extents(&plain);
        let (a, bg, bu) = (rng.vec(na, 1.0), rng.vec(nb, 1.0), rng.vec(nb, 1.0));
        let ab = upload_operand(arena, Input::Bf16, &a)?;
        let (bgb, bub) = (upload_operand(arena, Input::Bf16, &bg)?, upload_operand(arena, Input::Bf16, &bu)?);
        let map = |b: u64| tma_maps(arena, &plain, &sh, ab.ptr, b).map(|m| m.expect("a TMA launch"));
        let (gate_maps, up_maps) = (map(bgb.ptr)?, map(bub.ptr)?);
        // Two sets of outputs: (gate, up, bf16 product), poisoned.
        let mut outs = vec![];
        for _ in 0..2 {
            let (g, c, u) = (arena.alloc_n::<f32>(nc)?, arena.alloc_n::<f32>(nc)?, arena.alloc_n::<u16>(nc)?);
            for b in [g, c, u] {
                arena.fill_u32(b, NAN_BITS)?;
            }
            outs.push((g, c, u));
        }
        let (g, c, u) = outs[0];
        let f = gpu.load(&plain.kernel())?;
        let extras = Extras { maps: Some(gate_maps), ..Extras::default() };
        gemm::launch_with(gpu, &f, &plain, &sh, [ab.ptr, bgb.ptr, g.ptr, g.ptr], extras)?;
        let f = gpu.load(&mul.kernel())?;
        let extras = Extras { u: Some(u.ptr), maps: Some(up_maps), ..Extras::default() };
        gemm::launch_with(gpu, &f, &mul, &sh, [ab.ptr, bub.ptr, c.ptr, g.ptr], extras)?;
        let words = |b: alpha_cuda::runtime::driver::Buf, n: usize| arena.download::<u32>(b, n);
        // The gated block.
        for spec in [&gated] {
            let (g2, c2, u2) = outs[1];
            for b in [g2, c2, u2] {
                arena.fill_u32(b, NAN_BITS)?;
            }
            let f = gpu.load(&spec.kernel())?;
            let extras =
                Extras { u: Some(u2.ptr), maps: Some(up_maps), gate_map: Some(gate_maps.1), ..Extras::default() };
            gemm::launch_with(gpu, &f, spec, &sh, [ab.ptr, bub.ptr, c2.ptr, g2.ptr], extras)?;
            let mut differ = 0;
            for (w, got, n) in [(g, g2, nc), (c, c2, nc), (u, u2, nc / 2)] {
                let (w, got) = (words(w, n)?, words(got, n)?);
                differ += w.iter().zip(&got).filter(|(x, y)| x != y).count();
            }
            rows.push(exact_row(
                "fusion",
                &format!("{} = gate product, {}", spec.name(), mul.name()),
                &format!("m{m} n{n} k{k}"),
                differ,
                nc * 5 / 2,
            ));
        }
    }
    Ok(rows)
}

/// The products stored split into heads ([`gemm::Heads`]) against the plain product permuted on
/// the host, bit for bit: the q/k/v shape (S = 3) and a gradient's (S = 1), two contexts each,
/// partial tiles of neither kind (T a multiple of the tile) but both operand layouts of A.
pub(super) fn head_split_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let (b, t, h, d) = (2u32, 256u32, 4u32, 64u32);
    for (s, a_layout, input) in [(3u32, Layout::RowMajor, Input::Bf16), (1, Layout::ColMajor, Input::F32)] {
        arena.reset();
        let plain = GemmSpec { tile: Tile::T128x64, ..GemmSpec::new(a_layout, Layout::RowMajor, input).wgmma() };
        let heads =
            gemm::Heads { batch: b, t, heads: h, d, bf16_turned: false, bf16: false, bias: false, delta: false };
        let split = GemmSpec { heads: Some(heads), ..plain };
        let (m, n) = (b * t, s * h * d);
        let sh = GemmShape::packed(&plain, m, n, 128);
        let GemmCase { ab, bb, cb, nc, .. } = gemm_case(arena, rng, &plain, &sh)?;
        let hb = arena.alloc_n::<f32>(nc)?;
        arena.fill_u32(hb, NAN_BITS)?;
        for (spec, out) in [(plain, cb), (split, hb)] {
            let f = gpu.load(&spec.kernel())?;
            gemm::launch(gpu, &f, &spec, &sh, ab.ptr, bb.ptr, out.ptr, out.ptr)?;
        }
        let c: Vec<f32> = arena.download(cb, nc)?;
        let got: Vec<f32> = arena.download(hb, nc)?;
        // [B·T, S·H·D] → [S, B, H, T, D], each element `value(row, col)`.
        let permuted = |value: &dyn Fn(u32, u32) -> f32| {
            let mut out = vec![0.0f32; nc];
            for row in 0..m {
                let (bi, ti) = (row / t, row % t);
                for col in 0..n {
                    let (plane, di) = (col / d, col % d);
                    let (si, hi) = (plane / h, plane % h);
                    out[((((si * b + bi) * h + hi) * t + ti) * d + di) as usize] = value(row, col);
                }
            }
            out
        };
        let want = permuted(&|row, col| c[(row * n + col) as usize]);
        let shape = format!("b{b} t{t} s{s} h{h} d{d}");
        rows.push(exact_row(
            "fusion",
            &format!("{} = permuted product", split.name()),
            &shape,
            mismatches(&got, &want),
            nc,
        ));
        if s == 3 {
            // The same store as bf16 with q and k turned (TMA engine, both tile widths), against
            // the permuted product turned and rounded on the host as the attention kernels
            // would on load.
            let table = rotary::table(t as usize, d as usize, 10000.0);
            let tab = upload_f32(arena, &table)?;
            let plane = (b * h * t * d) as usize;
            let mut want16: Vec<u16> = rotated_bf16(&want[..2 * plane], &table, t as usize, d as usize);
            want16.extend(want[2 * plane..].iter().map(|&x| half::bf16::from_f32(x).to_bits()));
            for tile in [Tile::T128x64, Tile::T128x128] {
                let turned = gemm::Heads { bf16_turned: true, ..heads };
                let spec = GemmSpec { tile, heads: Some(turned), ..plain.tma() };
                let out = arena.alloc_n::<u16>(nc)?;
                arena.fill_u32(out, NAN_BITS)?;
                let f = gpu.load(&spec.kernel())?;
                let maps = tma_maps(arena, &spec, &sh, ab.ptr, bb.ptr)?.expect("a TMA launch");
                gemm::launch_with(
                    gpu,
                    &f,
                    &spec,
                    &sh,
                    [ab.ptr, bb.ptr, out.ptr, out.ptr],
                    Extras { maps: Some(maps), rot_tab: Some(tab), ..Extras::default() },
                )?;
                let got16: Vec<u16> = arena.download(out, nc)?;
                let differ = got16.iter().zip(&want16).filter(|(x, y)| x != y).count();
                rows.push(exact_row("fusion", &format!("{} = turned, rounded", spec.name()), &shape, differ, nc));
            }
            // A bias added on the way (a linear layer's, GPT-2's q/k/v projection): stored f32,
            // and as bf16 unturned (TMA engine, both tile widths), against the permuted
            // product plus the bias on the host (the one f32 add the Add node does), rounded.
            let bias: Vec<f32> = rng.vec(n as usize, 1.0);
            let bb_bias = upload_f32(arena, &bias)?;
            let with_bias = permuted(&|row, col| c[(row * n + col) as usize] + bias[col as usize]);
            let biased = gemm::Heads { bias: true, ..heads };
            let spec = GemmSpec { heads: Some(biased), ..plain };
            let out = arena.alloc_n::<f32>(nc)?;
            arena.fill_u32(out, NAN_BITS)?;
            let f = gpu.load(&spec.kernel())?;
            let extras = Extras { bias: Some(bb_bias), ..Extras::default() };
            gemm::launch_with(gpu, &f, &spec, &sh, [ab.ptr, bb.ptr, out.ptr, out.ptr], extras)?;
            let got: Vec<f32> = arena.download(out, nc)?;
            let name = format!("{} = permuted product + bias", spec.name());
            rows.push(exact_row("fusion", &name, &shape, mismatches(&got, &with_bias), nc));
            let want16: Vec<u16> = with_bias.iter().map(|&x| half::bf16::from_f32(x).to_bits()).collect();
            for tile in [Tile::T128x64, Tile::T128x128] {
                let spec = GemmSpec { tile, heads: Some(gemm::Heads { bf16: true, ..biased }), ..plain.tma() };
                let out = arena.alloc_n::<u16>(nc)?;
                arena.fill_u32(out, NAN_BITS)?;
                let f = gpu.load(&spec.kernel())?;
                let maps = tma_maps(arena, &spec, &sh, ab.ptr, bb.ptr)?.expect("a TMA launch");
                let extras = Extras { maps: Some(maps), bias: Some(bb_bias), ..Extras::default() };
                gemm::launch_with(gpu, &f, &spec, &sh, [ab.ptr, bb.ptr, out.ptr, out.ptr], extras)?;
                let got16: Vec<u16> = arena.download(out, nc)?;
                let differ = got16.iter().zip(&want16).filter(|(x, y)| x != y).count();
                rows.push(exact_row("fusion", &format!("{} = biased, rounded", spec.name()), &shape, differ, nc));
            }
        }
    }
    Ok(rows)
}

/// The delta-heads product ([`gemm::Heads::delta`]: dO stored as bf16 heads, with attention's
/// delta) against the f32 head-split product followed by attention's delta kernel
/// ([`attention_mma::backward_delta_kernel_bf16`]): delta and the bf16 dO bit for bit. The
/// output projection's input gradient at sixteen contexts, and two contexts of T = 200 (tiles
/// across a context's end, a partial last tile).
pub(super) fn delta_heads_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    let mut rows = Vec::new();
    for (b, t) in [(16u32, 1024u32), (2, 200)] {
        arena.reset();
        let (h, d) = (8u32, 64u32);
        let dims = attention::Dims {
            b: b as usize,
            h: h as usize,
            g: h as usize,
            t: t as usize,
            d: d as usize,
            scale: 0.125,
            softcap: None,
        };
        let heads =
            gemm::Heads { batch: b, t, heads: h, d, bf16_turned: false, bf16: false, bias: false, delta: false };
        let plain = GemmSpec { heads: Some(heads), ..spec_of("rc", Input::Bf16).tma() };
        let fused = GemmSpec { heads: Some(gemm::Heads { delta: true, ..heads }), ..plain };
        let (m, n) = (b * t, h * d);
        let sh = GemmShape::packed(&plain, m, n, 512);
        let GemmCase { ab, bb, cb, nc, .. } = gemm_case(arena, rng, &plain, &sh)?;
        let o = upload_f32(arena, &rng.vec(nc, 1.0))?;
        let rows_bh = (b * h * t) as usize;
        let [delta, delta2] = poisoned(arena, [rows_bh, rows_bh])?;
        let (do16, do16b) = (arena.alloc_n::<u16>(nc)?, arena.alloc_n::<u16>(nc)?);
        // The f32 product split into heads, then the delta kernel on it and O.
        let f = gpu.load(&plain.kernel())?;
        let maps = tma_maps(arena, &plain, &sh, ab.ptr, bb.ptr)?;
        gemm::launch_with(
            gpu,
            &f,
            &plain,
            &sh,
            [ab.ptr, bb.ptr, cb.ptr, cb.ptr],
            Extras { maps, ..Extras::default() },
        )?;
        let fd = gpu.load(&attention_mma::backward_delta_kernel_bf16(&dims))?;
        let cfg = LaunchConfig { grid: dims.grid_q(), block: attention_mma::block(), shared_bytes: 0 };
        gpu.launch(&fd, cfg, &[delta.ptr, o, cb.ptr, do16.ptr].map(Arg::U64))?;
        // The fused product.
        let ff = gpu.load(&fused.kernel())?;
        let maps = tma_maps(arena, &fused, &sh, ab.ptr, bb.ptr)?;
        let extras = Extras { maps, u: Some(delta2.ptr), ..Extras::default() };
        gemm::launch_with(gpu, &ff, &fused, &sh, [ab.ptr, bb.ptr, do16b.ptr, o], extras)?;
        let (w, g): (Vec<f32>, Vec<f32>) = (arena.download(delta, rows_bh)?, arena.download(delta2, rows_bh)?);
        let (want_do_bf16, got_do_bf16): (Vec<u16>, Vec<u16>) = (arena.download(do16, nc)?, arena.download(do16b, nc)?);
        let shape = format!("b{b} t{t} h{h} d{d}");
        let name = fused.name();
        let mut row =
            exact_row("fusion", &format!("{name} delta = gemm + delta kernel"), &shape, mismatches(&g, &w), rows_bh);
        row.pass &= g.iter().all(|x| x.is_finite());
        rows.push(row);
        let differ = got_do_bf16.iter().zip(&want_do_bf16).filter(|(x, y)| x != y).count();
        rows.push(exact_row("fusion", &format!("{name} dO bf16 = delta kernel's"), &shape, differ, nc));
    }
    Ok(rows)
}
