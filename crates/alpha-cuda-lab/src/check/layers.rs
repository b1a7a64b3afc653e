//! The other families: embedding, cross-entropy, optimizer, multi-tensor cast, LayerNorm
//! passes, vectorised pointwise, fused elementwise chains, and `tanh` checked exhaustively.

use super::*;

/// Gather and deterministic scatter-add (bit-exact against the reference, and repeatable). The
/// scatter-add's ids: uniform, one id every 7th token (a frequent token's long chain), one
/// negative and one past the table, added to a random table (timed) and into a zeroed one (as
/// the lowering runs it); then, untimed, every token but two on one id (one chain of all N).
/// Its scratch region starts full of garbage.
pub fn embedding_checks(
    gpu: &Gpu,
    arena: &DeviceArena,
    rng: &mut Rng,
    (v, d, tokens): (u32, u32, u32),
    opts: &Options,
) -> Result<Vec<Row>> {
    arena.reset();
    let fg = gpu.load(&embedding::gather_kernel())?;
    let fs = embedding::load_scatter_add(gpu)?;
    let (vu, du, nu) = (v as usize, d as usize, tokens as usize);
    let table = rng.vec(vu * du, 1.0);
    let mut idx: Vec<i32> = (0..nu).map(|_| rng.below(v) as i32).collect();
    // Heavy repeats of one row, and ignored indices (negative, and past the table).
    for i in (0..nu).step_by(7) {
        idx[i] = 3.min(v as i32 - 1);
    }
    idx[nu / 2] = -1;
    idx[nu / 3] = v as i32;
    let tb = arena.alloc_n::<f32>(vu * du)?;
    let ib = arena.alloc_n::<i32>(nu)?;
    let ob = arena.alloc_n::<f32>(nu * du)?;
    arena.upload(tb, &table)?;
    arena.upload(ib, &idx)?;
    arena.fill_u32(ob, NAN_BITS)?;
    embedding::gather(gpu, &fg, ob.ptr, tb.ptr, ib.ptr, tokens, v, d)?;
    let got: Vec<f32> = arena.download(ob, nu * du)?;
    let want = embedding::gather_reference(&table, &idx, vu, du);
    let (ga, gr) = compare(&got, &want);
    let us = if opts.bench {
        Some(median(
            gpu.time(opts.warmup, opts.reps, || embedding::gather(gpu, &fg, ob.ptr, tb.ptr, ib.ptr, tokens, v, d))?,
        ))
    } else {
        None
    };
    let mut rows = vec![Row {
        family: "embedding".into(),
        name: "embedding_gather".into(),
        shape: format!("v{v} d{d} n{tokens}"),
        max_abs: ga,
        rel: gr,
        tol: 0.0,
        pass: ga == 0.0,
        median_us: us,
        rate: String::new(),
    }];
    // Scatter-add into a random gradient table, twice from the same start: bit-identical.
    let dout = rng.vec(nu * du, 1.0);
    let dtable0 = rng.vec(vu * du, 1.0);
    let gb = arena.alloc_n::<f32>(nu * du)?;
    let plan = embedding::ScatterAdd::new(v, d, tokens)?;
    let sb = arena.alloc(plan.scratch_bytes())?;
    arena.upload(gb, &dout)?;
    let scatter_row = |name: &str, (sa, sr): (f64, f64), repeat: bool, us: Option<f64>| Row {
        family: "embedding".into(),
        name: name.into(),
        shape: format!("v{v} d{d} n{tokens}"),
        max_abs: sa,
        rel: sr,
        tol: 0.0,
        pass: sa == 0.0 && repeat,
        median_us: us,
        rate: if repeat { "bitwise repeatable".into() } else { "NOT repeatable".into() },
    };
    let scatter = |ids: &[i32], name: &str, plan: &embedding::ScatterAdd, bench: bool| -> Result<Row> {
        arena.upload(ib, ids)?;
        let run = || embedding::scatter_add(gpu, &fs, plan, [tb.ptr, gb.ptr, ib.ptr], sb.ptr);
        arena.fill_u32(sb, 0xA5A5_A5A5)?;
        arena.upload(tb, &dtable0)?;
        run()?;
        let first: Vec<f32> = arena.download(tb, vu * du)?;
        arena.fill_u32(sb, 0x7FFF_FFFF)?;
        arena.upload(tb, &dtable0)?;
        run()?;
        let second: Vec<f32> = arena.download(tb, vu * du)?;
        let mut want = if plan.zero_table { vec![0.0; vu * du] } else { dtable0.clone() };
        embedding::scatter_add_reference(&mut want, &dout, ids, vu, du);
        let repeat = first.iter().zip(&second).all(|(a, b)| a.to_bits() == b.to_bits());
        let us = if bench { Some(median(gpu.time(opts.warmup, opts.reps, run)?)) } else { None };
        Ok(scatter_row(name, compare(&first, &want), repeat, us))
    };
    rows.push(scatter(&idx, "embedding_scatter_add", &plan, opts.bench)?);
    rows.push(scatter(&idx, "embedding_scatter_add_zeroing", &plan.zeroing_table(), opts.bench)?);
    let mut one_id = vec![1.min(v as i32 - 1); nu];
    one_id[nu / 2] = -1;
    one_id[nu / 3] = v as i32;
    rows.push(scatter(&one_id, "embedding_scatter_add_one_id", &plan, false)?);
    Ok(rows)
}

/// Cross-entropy forward (loss, lse) and backward against f64 references, over rows of `w`
/// logits whose first `v` are the classes (`w > v`: a padded vocabulary).
pub fn cross_entropy_checks(
    gpu: &Gpu,
    arena: &DeviceArena,
    rng: &mut Rng,
    (rows_n, v, w): (u32, u32, u32),
    opts: &Options,
) -> Result<Vec<Row>> {
    arena.reset();
    let ff = gpu.load(&cross_entropy::forward_kernel())?;
    let fb = gpu.load(&cross_entropy::backward_kernel())?;
    let (r, vu, wu) = (rows_n as usize, v as usize, w as usize);
    let logits = rng.vec(r * wu, 4.0);
    let mut targets: Vec<i32> = (0..r).map(|_| rng.below(v) as i32).collect();
    targets[r - 1] = -1;
    let dloss: Vec<f32> = (0..r).map(|_| 1.0 / r as f32 * (1.0 + rng.uniform())).collect();
    let lb = arena.alloc_n::<f32>(r * wu)?;
    let tb = arena.alloc_n::<i32>(r)?;
    let lossb = arena.alloc_n::<f32>(r)?;
    let lseb = arena.alloc_n::<f32>(r)?;
    let dlb = arena.alloc_n::<f32>(r)?;
    let gb = arena.alloc_n::<f32>(r * wu)?;
    arena.upload(lb, &logits)?;
    arena.upload(tb, &targets)?;
    arena.upload(dlb, &dloss)?;
    arena.fill_u32(lossb, NAN_BITS)?;
    arena.fill_u32(lseb, NAN_BITS)?;
    arena.fill_u32(gb, NAN_BITS)?;
    cross_entropy::forward(gpu, &ff, lossb.ptr, lseb.ptr, lb.ptr, tb.ptr, rows_n, (v, w))?;
    cross_entropy::backward(gpu, &fb, gb.ptr, lb.ptr, lseb.ptr, tb.ptr, dlb.ptr, rows_n, (v, w))?;
    let loss: Vec<f32> = arena.download(lossb, r)?;
    let lse: Vec<f32> = arena.download(lseb, r)?;
    let grad: Vec<f32> = arena.download(gb, r * wu)?;
    let (wl, wlse) = cross_entropy::forward_reference(&logits, &targets, (vu, wu));
    let wg = cross_entropy::backward_reference(&logits, &targets, &dloss, (vu, wu));
    let (la, lr) = compare(&loss, &wl);
    let (sa, sr) = compare(&lse, &wlse);
    let (ga, gr) = compare(&grad, &wg);
    let (tf, tb_) = if opts.bench {
        (
            Some(median(gpu.time(opts.warmup, opts.reps, || {
                cross_entropy::forward(gpu, &ff, lossb.ptr, lseb.ptr, lb.ptr, tb.ptr, rows_n, (v, w))
            })?)),
            Some(median(gpu.time(opts.warmup, opts.reps, || {
                cross_entropy::backward(gpu, &fb, gb.ptr, lb.ptr, lseb.ptr, tb.ptr, dlb.ptr, rows_n, (v, w))
            })?)),
        )
    } else {
        (None, None)
    };
    let bytes = 4.0 * (r * wu) as f64;
    // The bf16 store: the f32 gradient rounded, bit for bit.
    let fb16 = gpu.load(&cross_entropy::backward_kernel_bf16())?;
    let grad_bf16 = arena.alloc_n::<u16>(r * wu)?;
    arena.fill_u32(grad_bf16, NAN_BITS)?;
    cross_entropy::backward(gpu, &fb16, grad_bf16.ptr, lb.ptr, lseb.ptr, tb.ptr, dlb.ptr, rows_n, (v, w))?;
    let got16: Vec<u16> = arena.download(grad_bf16, r * wu)?;
    let differ = got16.iter().zip(&grad).filter(|(x, y)| **x != half::bf16::from_f32(**y).to_bits()).count();
    let t16 = if opts.bench {
        Some(median(gpu.time(opts.warmup, opts.reps, || {
            cross_entropy::backward(gpu, &fb16, grad_bf16.ptr, lb.ptr, lseb.ptr, tb.ptr, dlb.ptr, rows_n, (v, w))
        })?))
    } else {
        None
    };
    let mut bf16_row = exact_row(
        "cross_entropy",
        "cross_entropy_bwd_bf16 = f32 rounded",
        &format!("rows{rows_n} v{v} w{w}"),
        differ,
        r * wu,
    );
    bf16_row.median_us = t16;
    // The one-read forward for this vocabulary: the same loss and log-sum-exp, bit for bit.
    let held = cross_entropy::forward_kernel_for(Some(v));
    let fh = gpu.load(&held)?;
    let [loss2, lse2] = poisoned(arena, [r, r])?;
    cross_entropy::forward(gpu, &fh, loss2.ptr, lse2.ptr, lb.ptr, tb.ptr, rows_n, (v, w))?;
    let differ =
        mismatches(&arena.download::<f32>(loss2, r)?, &loss) + mismatches(&arena.download::<f32>(lse2, r)?, &lse);
    let mut held_row = exact_row(
        "cross_entropy",
        &format!("{} = cross_entropy_fwd", held.name),
        &format!("rows{rows_n} v{v} w{w}"),
        differ,
        2 * r,
    );
    if opts.bench {
        let t = median(gpu.time(opts.warmup, opts.reps, || {
            cross_entropy::forward(gpu, &fh, loss2.ptr, lse2.ptr, lb.ptr, tb.ptr, rows_n, (v, w))
        })?);
        held_row.median_us = Some(t);
        held_row.rate = format!("{:.2} TB/s (1 read)", bytes / t / 1e6);
    }
    let joint_row = joint_cross_entropy_row(gpu, arena, (&logits, &targets), [lb.ptr, tb.ptr], (rows_n, v, w), opts)?;
    let from_bf16 = bf16_logits_rows(gpu, arena, (&logits, [tb.ptr, dlb.ptr]), (rows_n, v, w))?;
    Ok(vec![
        bf16_row,
        held_row,
        joint_row,
        from_bf16,
        Row {
            family: "cross_entropy".into(),
            name: "cross_entropy_fwd".into(),
            shape: format!("rows{rows_n} v{v}"),
            max_abs: la.max(sa),
            rel: lr.max(sr),
            tol: 1e-5,
            pass: lr.max(sr) <= 1e-5,
            median_us: tf,
            rate: tf.map_or(String::new(), |t| format!("{:.2} TB/s (1 read)", bytes / t / 1e6)),
        },
        Row {
            family: "cross_entropy".into(),
            name: "cross_entropy_bwd".into(),
            shape: format!("rows{rows_n} v{v}"),
            max_abs: ga,
            rel: gr,
            tol: 1e-5,
            pass: gr <= 1e-5,
            median_us: tb_,
            rate: tb_.map_or(String::new(), |t| format!("{:.2} TB/s", 2.0 * bytes / t / 1e6)),
        },
    ])
}

/// The kernels over bf16 logits (a model that rounds them before its loss) against the f32
/// kernels over the same values held as f32, bit for bit: the forward's loss and log-sum-exp,
/// the bf16 backward's gradient, and the joint kernel's three.
fn bf16_logits_rows(
    gpu: &Gpu,
    arena: &DeviceArena,
    (logits, [tb, dlb]): (&[f32], [u64; 2]),
    (rows_n, v, w): (u32, u32, u32),
) -> Result<Row> {
    let (r, n) = (rows_n as usize, rows_n as usize * w as usize);
    let rounded: Vec<half::bf16> = logits.iter().map(|&x| half::bf16::from_f32(x)).collect();
    let wide: Vec<f32> = rounded.iter().map(|x| x.to_f32()).collect();
    let narrow: Vec<u16> = rounded.iter().map(|x| x.to_bits()).collect();
    let (l32, l16) = (arena.alloc_n::<f32>(n)?, arena.alloc_n::<u16>(n)?);
    arena.upload(l32, &wide)?;
    arena.upload(l16, &narrow)?;
    let mut differ = 0;
    let mut results = vec![];
    for (input, logits_ptr) in [(alpha_ir::DType::F32, l32.ptr), (alpha_ir::DType::BF16, l16.ptr)] {
        let [loss, lse, jloss, jlse] = poisoned(arena, [r, r, r, r])?;
        let (grad, jgrad) = (arena.alloc_n::<u16>(n)?, arena.alloc_n::<u16>(n)?);
        arena.fill_u32(grad, NAN_BITS)?;
        arena.fill_u32(jgrad, NAN_BITS)?;
        let ff = gpu.load(&cross_entropy::forward_kernel_of(None, input))?;
        let fb = gpu.load(&cross_entropy::backward_kernel_of(true, input))?;
        let fj = gpu.load(&cross_entropy::joint_kernel_of(w, input))?;
        cross_entropy::forward(gpu, &ff, loss.ptr, lse.ptr, logits_ptr, tb, rows_n, (v, w))?;
        cross_entropy::backward(gpu, &fb, grad.ptr, logits_ptr, lse.ptr, tb, dlb, rows_n, (v, w))?;
        let scale = 1.0 / r as f32;
        cross_entropy::joint(gpu, &fj, [jloss.ptr, jlse.ptr, jgrad.ptr, logits_ptr, tb], rows_n, (v, w), scale)?;
        let words: Vec<Vec<u32>> = vec![
            arena.download(loss, r)?,
            arena.download(lse, r)?,
            arena.download(jloss, r)?,
            arena.download(jlse, r)?,
            arena.download::<u16>(grad, n)?.into_iter().map(u32::from).collect(),
            arena.download::<u16>(jgrad, n)?.into_iter().map(u32::from).collect(),
        ];
        results.push(words);
    }
    for (a, b) in results[0].iter().zip(&results[1]) {
        differ += a.iter().zip(b).filter(|(x, y)| x != y).count();
    }
    let total = 4 * r + 2 * n;
    Ok(exact_row(
        "cross_entropy",
        "cross_entropy_{fwd,bwd_bf16,joint_bf16}_from_bf16 = f32 kernels over the rounded logits",
        &format!("rows{rows_n} v{v} w{w}"),
        differ,
        total,
    ))
}

/// The joint forward and bf16 backward (one read of the logits, every row's scale the mean's
/// `1/rows`) against the f64 references: loss and log-sum-exp within 1e-5, the gradient within
/// its bf16 rounding (relative 8e-3 of its largest), and the same bits on a second launch.
fn joint_cross_entropy_row(
    gpu: &Gpu,
    arena: &DeviceArena,
    (logits, targets): (&[f32], &[i32]),
    [lb, tb]: [u64; 2],
    (rows_n, v, w): (u32, u32, u32),
    opts: &Options,
) -> Result<Row> {
    let (r, vu, wu) = (rows_n as usize, v as usize, w as usize);
    let kernel = cross_entropy::joint_kernel_bf16(w);
    let f = gpu.load(&kernel)?;
    let scale = 1.0 / r as f32;
    let [loss, lse] = poisoned(arena, [r, r])?;
    let grad = arena.alloc_n::<u16>(r * wu)?;
    arena.fill_u32(grad, NAN_BITS)?;
    let run = || cross_entropy::joint(gpu, &f, [loss.ptr, lse.ptr, grad.ptr, lb, tb], rows_n, (v, w), scale);
    run()?;
    let first: Vec<u16> = arena.download(grad, r * wu)?;
    let (got_loss, got_lse): (Vec<f32>, Vec<f32>) = (arena.download(loss, r)?, arena.download(lse, r)?);
    run()?;
    let repeat = arena.download::<u16>(grad, r * wu)? == first
        && mismatches(&arena.download::<f32>(loss, r)?, &got_loss) == 0
        && mismatches(&arena.download::<f32>(lse, r)?, &got_lse) == 0;
    let (want_loss, want_lse) = cross_entropy::forward_reference(logits, targets, (vu, wu));
    let want_grad = cross_entropy::backward_reference(logits, targets, &vec![scale; r], (vu, wu));
    let got_grad: Vec<f32> = first.iter().map(|&b| half::bf16::from_bits(b).to_f32()).collect();
    let (la, lr) = compare(&got_loss, &want_loss);
    let (sa, sr) = compare(&got_lse, &want_lse);
    let (ga, gr) = compare(&got_grad, &want_grad);
    let pass = lr.max(sr) <= 1e-5 && gr <= 8e-3 && repeat;
    let us = if opts.bench { Some(median(gpu.time(opts.warmup, opts.reps, run)?)) } else { None };
    // One read of the f32 logits and one bf16 write of the gradient.
    let bytes = 6.0 * (r * wu) as f64;
    Ok(Row {
        family: "cross_entropy".into(),
        name: kernel.name.clone(),
        shape: format!("rows{rows_n} v{v} w{w}"),
        max_abs: la.max(sa).max(ga),
        rel: gr.max(lr).max(sr),
        tol: 8e-3,
        pass,
        median_us: us,
        rate: match (us, repeat) {
            (_, false) => "NOT repeatable".into(),
            (Some(t), true) => format!("{:.2} TB/s (1 read, bf16 write)", bytes / t / 1e6),
            (None, true) => "bitwise repeatable".into(),
        },
    })
}

/// Sum of squares + clip scale, then AdamW using that scale; then the three launches captured
/// as a graph and replayed for steps 2..=4 with new scalars written before each replay.
pub fn optimizer_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, n: u32, opts: &Options) -> Result<Vec<Row>> {
    arena.reset();
    let fa = gpu.load(&adamw::adamw_kernel())?;
    let fp = gpu.load(&adamw::sumsq_partial_kernel())?;
    let ff = gpu.load(&adamw::sumsq_finish_kernel())?;
    let nu = n as usize;
    // Segments of assorted sizes, alternating decay.
    let mut segments = Vec::new();
    let mut off = 0u32;
    let mut i = 0;
    while off < n {
        let len = (1u32 << (9 + (i * 7) % 13)).min(n - off);
        segments.push(Segment { offset: off, len, decay: i % 2 == 0 });
        off += len;
        i += 1;
    }
    let table = adamw::segment_table(&segments, n)?;
    let mut p = rng.vec(nu, 1.0);
    let g = rng.vec(nu, 0.01);
    let mut m = rng.vec(nu, 0.001);
    let mut v: Vec<f32> = rng.vec(nu, 1e-5).iter().map(|x| x.abs()).collect();
    let [pb, gb, mb, vb] = [0; 4].map(|_| arena.alloc_n::<f32>(nu));
    let (pb, gb, mb, vb) = (pb?, gb?, mb?, vb?);
    let segb = arena.alloc_n::<u32>(table.len())?;
    let scb = arena.alloc_n::<f32>(8)?;
    let partb = arena.alloc_n::<f32>(adamw::SUMSQ_BLOCKS as usize)?;
    let outb = arena.alloc_n::<f32>(2)?;
    arena.upload(pb, &p)?;
    arena.upload(gb, &g)?;
    arena.upload(mb, &m)?;
    arena.upload(vb, &v)?;
    arena.upload(segb, &table)?;
    let hyper = |step| AdamwScalars { lr: 3e-4, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1, step };
    arena.upload(scb, &hyper(1).device())?;
    let max_norm = 1.0f32;
    let nseg = segments.len() as u32;
    let step = |gpu: &Gpu| -> Result<()> {
        adamw::sumsq_partial(gpu, &fp, partb.ptr, gb.ptr, n)?;
        adamw::sumsq_finish(gpu, &ff, outb.ptr, partb.ptr, max_norm)?;
        adamw::launch(gpu, &fa, pb.ptr, gb.ptr, mb.ptr, vb.ptr, n, segb.ptr, nseg, scb.ptr, outb.ptr + 4)
    };
    step(gpu)?;
    let ss: Vec<f32> = arena.download(outb, 2)?;
    let (want_s, want_scale) = adamw::sumsq_reference(&g, max_norm);
    let srel = ((ss[0] as f64 - want_s) / want_s).abs();
    let screl = ((ss[1] - want_scale) / want_scale).abs() as f64;
    let mut rows = vec![Row {
        family: "adamw".into(),
        name: "sumsq_partial+finish".into(),
        shape: format!("n{n}"),
        max_abs: (ss[0] as f64 - want_s).abs(),
        rel: srel.max(screl),
        tol: 1e-5,
        pass: srel.max(screl) <= 1e-5,
        median_us: None,
        rate: format!("scale {:.6} (ref {:.6})", ss[1], want_scale),
    }];
    // The reference uses the device's scale so the update can be compared bit for bit.
    adamw::reference(&mut p, &g, &mut m, &mut v, &segments, &hyper(1).device(), ss[1]);
    let got_p: Vec<f32> = arena.download(pb, nu)?;
    let got_m: Vec<f32> = arena.download(mb, nu)?;
    let got_v: Vec<f32> = arena.download(vb, nu)?;
    let (pa, pr) = compare(&got_p, &p);
    let (ma, _) = compare(&got_m, &m);
    let (va, _) = compare(&got_v, &v);
    let exact = pa == 0.0 && ma == 0.0 && va == 0.0;
    rows.push(Row {
        family: "adamw".into(),
        name: "adamw step 1".into(),
        shape: format!("n{n} segs{nseg}"),
        max_abs: pa.max(ma).max(va),
        rel: pr,
        tol: 1e-7,
        pass: pr <= 1e-7,
        median_us: None,
        rate: if exact { "bit-exact".into() } else { "not bit-exact".into() },
    });
    // Graph: capture once, replay steps 2..=4 with new scalars.
    let graph = gpu.capture(|| step(gpu))?;
    for t in 2..=4u32 {
        arena.upload(scb, &hyper(t).device())?;
        graph.replay()?;
        gpu.synchronize()?;
        let s: Vec<f32> = arena.download(outb, 2)?;
        adamw::reference(&mut p, &g, &mut m, &mut v, &segments, &hyper(t).device(), s[1]);
    }
    let got_p: Vec<f32> = arena.download(pb, nu)?;
    let (pa, pr) = compare(&got_p, &p);
    let us_graph = if opts.bench { Some(median(gpu.time(opts.warmup, opts.reps, || graph.replay())?)) } else { None };
    let us_adamw = if opts.bench {
        Some(median(gpu.time(opts.warmup, opts.reps, || {
            adamw::launch(gpu, &fa, pb.ptr, gb.ptr, mb.ptr, vb.ptr, n, segb.ptr, nseg, scb.ptr, outb.ptr + 4)
        })?))
    } else {
        None
    };
    let rate = us_adamw.map_or(String::new(), |t| format!("{:.2} TB/s", 28.0 * n as f64 / t / 1e6));
    rows.push(timing_row("adamw", "adamw alone", &format!("n{n}"), us_adamw, rate));
    rows.push(Row {
        family: "graph".into(),
        name: format!("graph[{}] steps 2-4", graph.launches().join(",")),
        shape: format!("n{n}"),
        max_abs: pa,
        rel: pr,
        tol: 1e-7,
        pass: pr <= 1e-7,
        median_us: us_graph,
        rate: if pa == 0.0 { "bit-exact replay".into() } else { String::new() },
    });
    Ok(rows)
}

/// The gated GELU's backward as one [`alpha_cuda::kernels::fused::Chain`] against the four pointwise launches
/// it replaces (`dh·up`, `dh·act`, `gelu'(gate)`, their product): both outputs bit for bit.
pub fn fused_chain_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::fused::Chain;
    use alpha_cuda::kernels::pointwise::{Body, Operand, Pointwise};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    use alpha_ir::{Binary, Unary};
    arena.reset();
    let n = 1000 * 1408 + 3;
    let inputs: Vec<Vec<f32>> = (0..4).map(|_| rng.vec(n, 3.0)).collect();
    let bufs = inputs
        .iter()
        .map(|x| {
            let b = arena.alloc_n::<f32>(n)?;
            arena.upload(b, x)?;
            Ok(b)
        })
        .collect::<Result<Vec<_>>>()?;
    let outs = (0..6)
        .map(|_| {
            let b = arena.alloc_n::<f32>(n)?;
            arena.fill_u32(b, NAN_BITS)?;
            Ok(b)
        })
        .collect::<Result<Vec<_>>>()?;
    let (blocks, threads) = alpha_cuda::kernels::pointwise::grid_blocks(n);
    let cfg = LaunchConfig { grid: (blocks, 1, 1), block: (threads, 1, 1), shared_bytes: 0 };
    let chain = Chain::gated_gelu_backward(n);
    let f = gpu.load(&chain.kernel()?)?;
    let args: Vec<Arg> =
        [outs[0], outs[1], bufs[0], bufs[1], bufs[2], bufs[3]].iter().map(|b| Arg::U64(b.ptr)).collect();
    gpu.launch(&f, cfg, &args)?;
    // The separate launches: t0 = dh·up, out2 = dh·act, t1 = gelu'(gate), out3 = t0·t1.
    let one = |body: Body, out: u64, ins: &[u64]| -> Result<()> {
        let pw = Pointwise {
            shape: vec![n],
            out: Operand::contiguous(alpha_ir::DType::F32, &[n]),
            ins: ins.iter().map(|_| Operand::contiguous(alpha_ir::DType::F32, &[n])).collect(),
            body,
        };
        let f = gpu.load(&pw.kernel()?)?;
        let mut a = vec![Arg::U64(out)];
        a.extend(ins.iter().map(|&p| Arg::U64(p)));
        gpu.launch(&f, cfg, &a)
    };
    one(Body::Binary(Binary::Mul), outs[4].ptr, &[bufs[0].ptr, bufs[1].ptr])?;
    one(Body::Binary(Binary::Mul), outs[2].ptr, &[bufs[0].ptr, bufs[2].ptr])?;
    one(Body::Unary(Unary::GeluGrad), outs[5].ptr, &[bufs[3].ptr])?;
    one(Body::Binary(Binary::Mul), outs[3].ptr, &[outs[4].ptr, outs[5].ptr])?;
    // The same chain storing both outputs as bf16 (the casts that alone read them): each must
    // be the separate launches' f32 result rounded to nearest even.
    let chain16 = Chain { bf16: vec![true, true], ..chain.clone() };
    let f16 = gpu.load(&chain16.kernel()?)?;
    let halves = (0..2).map(|_| arena.alloc_n::<u16>(n)).collect::<Result<Vec<_>>>()?;
    let args16: Vec<Arg> =
        [halves[0], halves[1], bufs[0], bufs[1], bufs[2], bufs[3]].iter().map(|b| Arg::U64(b.ptr)).collect();
    gpu.launch(&f16, cfg, &args16)?;
    // One row per output: how many elements differ from what they must equal bit for bit.
    let row = |name: String, differ: usize, what: &str| Row {
        family: "fusion".into(),
        name,
        shape: format!("n{n}"),
        max_abs: differ as f64,
        rel: differ as f64,
        tol: 0.0,
        pass: differ == 0,
        median_us: None,
        rate: format!("elements differing from {what}"),
    };
    let mut rows = vec![];
    for (name, half, separate) in [("d_up as bf16", halves[0], outs[2]), ("d_gate as bf16", halves[1], outs[3])] {
        let got: Vec<u16> = arena.download(half, n)?;
        let want: Vec<f32> = arena.download(separate, n)?;
        let differ = got.iter().zip(&want).filter(|(g, w)| **g != half::bf16::from_f32(**w).to_bits()).count();
        rows.push(row(format!("{} {name}", chain16.name()), differ, "the launches' result rounded to bf16"));
    }
    for (name, fused, separate) in
        [("d_up = dh·act", outs[0], outs[2]), ("d_gate = dh·up·gelu'(gate)", outs[1], outs[3])]
    {
        let a: Vec<f32> = arena.download(fused, n)?;
        let b: Vec<f32> = arena.download(separate, n)?;
        let differ = a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
        rows.push(row(format!("{} {name}", chain.name()), differ, "the separate launches"));
    }
    Ok(rows)
}

/// The multi-tensor cast ([`alpha_cuda::kernels::multi::cast_kernel`]) over tensors of awkward lengths at
/// scattered offsets: every element the host's round-to-nearest-even bf16, bit for bit, and
/// nothing outside the destinations written.
pub fn cast_multi_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::multi;
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    arena.reset();
    let lens = [1usize, 8191, 8192, 8193, 100_003, 512 * 1536];
    // Each tensor starts 16-byte aligned (as the planner places parameters); a destination is
    // followed by at least one poisoned guard element.
    let src_span = |l: usize| l.next_multiple_of(4);
    let dst_span = |l: usize| (l + 1).next_multiple_of(4);
    let total_src: usize = lens.iter().map(|&l| src_span(l)).sum();
    let src_host = rng.vec(total_src, 50.0);
    let src = arena.alloc_n::<f32>(total_src)?;
    arena.upload(src, &src_host)?;
    // Destinations with a guard element between them, poisoned.
    let total_dst: usize = lens.iter().map(|&l| dst_span(l)).sum();
    let dst = arena.alloc_n::<u16>(total_dst)?;
    arena.upload(dst, &vec![0x7FC1u16; total_dst])?;
    let base = arena.base();
    let (mut s_at, mut d_at) = (0usize, 0usize);
    let mut tensors = vec![];
    for &l in &lens {
        tensors.push(((src.ptr - base) as usize + s_at * 4, (dst.ptr - base) as usize + d_at * 2, l));
        s_at += src_span(l);
        d_at += dst_span(l);
    }
    let (table_bytes, chunks) = multi::cast_table(&tensors)?;
    let words: Vec<u32> = table_bytes.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
    let table = arena.alloc_n::<u32>(words.len())?;
    arena.upload(table, &words)?;
    let f = gpu.load(&multi::cast_kernel())?;
    let cfg = LaunchConfig { grid: (chunks as u32, 1, 1), block: (multi::THREADS, 1, 1), shared_bytes: 0 };
    gpu.launch(&f, cfg, &multi::cast_arguments([base, table.ptr].map(Arg::U64)))?;
    let got: Vec<u16> = arena.download(dst, total_dst)?;
    let (mut wrong, mut s_at, mut d_at) = (0usize, 0usize, 0usize);
    for &l in &lens {
        for j in 0..l {
            wrong += (got[d_at + j] != half::bf16::from_f32(src_host[s_at + j]).to_bits()) as usize;
        }
        wrong += got[d_at + l..d_at + dst_span(l)].iter().filter(|&&g| g != 0x7FC1).count();
        s_at += src_span(l);
        d_at += dst_span(l);
    }
    Ok(vec![Row {
        family: "cast-multi".into(),
        name: "cast_multi_f32_bf16".into(),
        shape: format!("{} tensors, {total_src} elements", lens.len()),
        max_abs: wrong as f64,
        rel: wrong as f64,
        tol: 0.0,
        pass: wrong == 0,
        median_us: None,
        rate: "elements differing from round-to-nearest-even, guards included".into(),
    }])
}

/// LayerNorm's parameter gradients (pass 1, the band partials; pass 2, the fold of the bands,
/// alone and run beside the input gradient's rows) against the host doing the same f32
/// operations in the CPU reference's order, bit for bit; and that input gradient equal to the
/// kernel's alone.
/// Shapes: 16 contexts of Coppelius (1,024 bands, sixteen rounds of pass 2), a ragged one (63
/// bands, a last band of 8 rows, 100 columns: partial blocks and warps), one band.
pub fn layernorm_param_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::layernorm::{self, Norm};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    let mut rows = vec![];
    for (r, c) in [(16384usize, 512usize), (1000, 100), (16, 512)] {
        arena.reset();
        let n = Norm { rows: r, c };
        let x = rng.vec(r * c, 2.0);
        let dy = rng.vec(r * c, 1.0);
        let mean = rng.vec(r, 0.5);
        let rstd: Vec<f32> = (0..r).map(|_| 0.5 + rng.uniform()).collect();
        let [xb, dyb, mb, rb] = [&x, &dy, &mean, &rstd].map(|v| {
            let b = arena.alloc_n::<f32>(v.len()).expect("arena");
            arena.upload(b, v).expect("upload");
            b
        });
        let partials = arena.alloc_n::<f32>(n.scratch_floats())?;
        let dg = arena.alloc_n::<f32>(c)?;
        let db = arena.alloc_n::<f32>(c)?;
        arena.fill_u32(dg, NAN_BITS)?;
        arena.fill_u32(db, NAN_BITS)?;
        let p1 = gpu.load(&layernorm::backward_partials_kernel(n))?;
        let p2 = gpu.load(&layernorm::backward_finish_kernel(n))?;
        let cfg1 = LaunchConfig {
            grid: ((c as u32).div_ceil(layernorm::THREADS), n.bands() as u32, 1),
            block: (layernorm::THREADS, 1, 1),
            shared_bytes: 0,
        };
        let (grid, block) = layernorm::finish_launch(n);
        let cfg2 = LaunchConfig { grid, block, shared_bytes: 0 };
        let a1 = layernorm::partials_arguments([partials, xb, mb, rb, dyb].map(|b| Arg::U64(b.ptr)));
        let a2 = layernorm::finish_arguments([dg, db, partials].map(|b| Arg::U64(b.ptr)));
        let run1 = || gpu.launch(&p1, cfg1, &a1);
        let run2 = || gpu.launch(&p2, cfg2, &a2);
        run1()?;
        run2()?;
        let got_g: Vec<f32> = arena.download(dg, c)?;
        let got_b: Vec<f32> = arena.download(db, c)?;
        // The reference order: each band's rows in order, then the bands in order from +0.
        let (mut want_g, mut want_b) = (vec![0.0f32; c], vec![0.0f32; c]);
        for band in 0..n.bands() {
            let (mut bg, mut bb) = (vec![0.0f32; c], vec![0.0f32; c]);
            for row in band * layernorm::BAND..((band + 1) * layernorm::BAND).min(r) {
                for j in 0..c {
                    let d = dy[row * c + j];
                    bg[j] += d * (x[row * c + j] - mean[row]) * rstd[row];
                    bb[j] += d;
                }
            }
            for j in 0..c {
                want_g[j] += bg[j];
                want_b[j] += bb[j];
            }
        }
        let mut wrong = mismatches(&got_g, &want_g) + mismatches(&got_b, &want_b);
        // The fold run beside the rows of the input gradient: the same gain and bias gradients,
        // and the same dx as the input-gradient kernel alone.
        let gain_h = rng.vec(c, 1.0);
        let gain = arena.alloc_n::<f32>(c)?;
        arena.upload(gain, &gain_h)?;
        let [dx_alone, dx_fold, dg2, db2] = poisoned(arena, [r * c, r * c, c, c])?;
        // The input gradient's arguments over these x, gain, mean, rstd and dy.
        let dx_args = |dx: u64, residual: Option<u64>, copy: Option<u64>, passes: layernorm::DxPasses<u64>| {
            let passes = passes.map(Arg::U64);
            let rows = [dx, xb.ptr, gain.ptr, mb.ptr, rb.ptr, dyb.ptr].map(Arg::U64);
            layernorm::dx_arguments(rows, residual.map(Arg::U64), copy.map(Arg::U64), passes)
        };
        let alone = gpu.load(&layernorm::backward_dx_kernel(n))?;
        let cfg = LaunchConfig { grid: (r as u32, 1, 1), block: (layernorm::THREADS, 1, 1), shared_bytes: 0 };
        gpu.launch(&alone, cfg, &dx_args(dx_alone.ptr, None, None, layernorm::DxPasses::Apart))?;
        let folding = gpu.load(&layernorm::backward_dx_kernel_folding(n, false))?;
        let (grid, block) = layernorm::dx_fold_launch(n);
        let fold = layernorm::DxPasses::Fold { dgain: dg2.ptr, dbias: db2.ptr, partials: partials.ptr };
        let cfg = LaunchConfig { grid, block, shared_bytes: 0 };
        gpu.launch(&folding, cfg, &dx_args(dx_fold.ptr, None, None, fold))?;
        let [a, b] = [dx_alone, dx_fold].map(|x| arena.download::<f32>(x, r * c).expect("download"));
        wrong += mismatches(&a, &b);
        // With a residual added and the sum's bf16 copy stored too (both grids): the sum as the
        // adding kernel stores it, and its copy rounded.
        let res = arena.alloc_n::<f32>(r * c)?;
        arena.upload(res, &rng.vec(r * c, 1.0))?;
        let want = arena.alloc_n::<f32>(r * c)?;
        let adding = gpu.load(&layernorm::backward_dx_kernel_adding(n, true))?;
        let cfg_rows = LaunchConfig { grid: (r as u32, 1, 1), block: (layernorm::THREADS, 1, 1), shared_bytes: 0 };
        gpu.launch(&adding, cfg_rows, &dx_args(want.ptr, Some(res.ptr), None, layernorm::DxPasses::Apart))?;
        let want_sum: Vec<f32> = arena.download(want, r * c)?;
        // The row kernel's time (with the residual and the copy), beside the fused one's below.
        let mut copying_us = None;
        for fold in [false, true] {
            let (sum, copy) = (arena.alloc_n::<f32>(r * c)?, arena.alloc_n::<u16>(r * c)?);
            arena.fill_u32(sum, NAN_BITS)?;
            arena.fill_u32(copy, NAN_BITS)?;
            let f = gpu.load(&layernorm::backward_dx_kernel_copying(n, true, fold))?;
            let (passes, cfg) = match fold {
                true => (layernorm::DxPasses::Fold { dgain: dg2.ptr, dbias: db2.ptr, partials: partials.ptr }, cfg),
                false => (layernorm::DxPasses::Apart, cfg_rows),
            };
            let args = dx_args(sum.ptr, Some(res.ptr), Some(copy.ptr), passes);
            gpu.launch(&f, cfg, &args)?;
            wrong += mismatches(&arena.download::<f32>(sum, r * c)?, &want_sum);
            let got: Vec<u16> = arena.download(copy, r * c)?;
            wrong += got.iter().zip(&want_sum).filter(|(h, x)| **h != half::bf16::from_f32(**x).to_bits()).count();
            if opts.bench && !fold {
                copying_us = Some(median(gpu.time(opts.warmup, opts.reps, || gpu.launch(&f, cfg, &args))?));
            }
        }
        wrong +=
            mismatches(&arena.download::<f32>(dg2, c)?, &want_g) + mismatches(&arena.download::<f32>(db2, c)?, &want_b);
        // Pass 2 of two LayerNorms in one launch (a table of device addresses from base 0):
        // the same gain and bias gradients for both.
        let multi = gpu.load(&layernorm::backward_finish_multi_kernel(n))?;
        let outs = poisoned(arena, [c; 4])?;
        let table: Vec<u64> = vec![outs[0].ptr, outs[1].ptr, partials.ptr, outs[2].ptr, outs[3].ptr, partials.ptr];
        let tb_ = arena.alloc_n::<u8>(table.len() * 8)?;
        let table_bytes: Vec<u8> = table.iter().flat_map(|p| p.to_le_bytes()).collect();
        arena.upload(tb_, &table_bytes)?;
        let (grid_m, block_m) = layernorm::finish_multi_launch(n, 2);
        let cfg_m = LaunchConfig { grid: grid_m, block: block_m, shared_bytes: 0 };
        gpu.launch(&multi, cfg_m, &[Arg::U64(0), Arg::U64(tb_.ptr)])?;
        for (o, want) in outs.iter().zip([&want_g, &want_b, &want_g, &want_b]) {
            wrong += mismatches(&arena.download::<f32>(*o, c)?, want);
        }
        // The input gradient and pass 1 in one launch (plain, and adding with the bf16 copy),
        // then pass 2: the same dx, sum, copy, gain and bias gradients.
        let (grid_p, block_p) = layernorm::dx_partials_launch(n);
        let cfg_p = LaunchConfig { grid: grid_p, block: block_p, shared_bytes: 0 };
        let mut fused_us = None;
        for (residual, copy16) in [(false, false), (true, true)] {
            let [out, parts, dg3, db3] = poisoned(arena, [r * c, n.scratch_floats(), c, c])?;
            let copy = arena.alloc_n::<u16>(r * c)?;
            arena.fill_u32(copy, NAN_BITS)?;
            let f = gpu.load(&layernorm::backward_dx_partials_kernel(n, residual, copy16))?;
            let passes = layernorm::DxPasses::Partials(parts.ptr);
            let args = dx_args(out.ptr, residual.then_some(res.ptr), copy16.then_some(copy.ptr), passes);
            let run = || gpu.launch(&f, cfg_p, &args);
            run()?;
            gpu.launch(&p2, cfg2, &layernorm::finish_arguments([dg3, db3, parts].map(|b| Arg::U64(b.ptr))))?;
            let got: Vec<f32> = arena.download(out, r * c)?;
            if residual {
                wrong += mismatches(&got, &want_sum);
                let got16: Vec<u16> = arena.download(copy, r * c)?;
                wrong +=
                    got16.iter().zip(&want_sum).filter(|(h, x)| **h != half::bf16::from_f32(**x).to_bits()).count();
                if opts.bench {
                    fused_us = Some(median(gpu.time(opts.warmup, opts.reps, run)?));
                }
            } else {
                wrong += mismatches(&got, &a);
            }
            wrong += mismatches(&arena.download::<f32>(dg3, c)?, &want_g)
                + mismatches(&arena.download::<f32>(db3, c)?, &want_b);
        }
        let times = if opts.bench {
            let t1 = median(gpu.time(opts.warmup, opts.reps, run1)?);
            let t2 = median(gpu.time(opts.warmup, opts.reps, run2)?);
            Some((t1, t2))
        } else {
            None
        };
        let what = "layernorm_bwd_params(+finish, +finish_multi, +dx_fold, +dx_add_bf16, +dx_partials)";
        let mut row = exact_row("layernorm", what, &format!("rows{r} c{c}"), wrong, 2 * c);
        if let Some((t1, t2)) = times {
            row.median_us = Some(t1 + t2);
            row.rate = format!("{row_rate}; pass 1 {t1:.1} µs, pass 2 {t2:.1} µs", row_rate = row.rate);
            if let (Some(tf), Some(td)) = (fused_us, copying_us) {
                row.rate = format!("{}; dx_add_bf16 {td:.1} µs + pass 1, fused {tf:.1} µs", row.rate);
            }
        }
        rows.push(row);
    }
    Ok(rows)
}

/// The vectorized pointwise kernels (four or two elements a thread) against the scalar ones,
/// bit for bit, on Coppelius's shapes: the q/k/v permute, the attention output's
/// permute-and-cast, the q/k/v gradients' permute-and-cast back, a bf16 → f32 permute, and the
/// gated product stored as bf16; and on Diakosmos's, two a thread: a bf16 operand of 1,330
/// columns copied into rows of 1,336 (a padded product's), k's columns of the q/k/v projection
/// turned to `[7, N, 190]`, a bf16 cast of rows of 190, and a product with a value held along
/// each group's 190. Inputs include a rounding tie and the largest finite f32. Timed with
/// `bench`.
pub fn pointwise_vector_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::pointwise::{contiguous_strides, Body, Operand, Pointwise};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    use alpha_ir::{Binary, DType};
    let (b, t) = if opts.bench { (16usize, 1024usize) } else { (2, 64) };
    let (h, d) = (8usize, 64usize);
    let permute = |shape: &[usize], perm: &[usize], from: DType, to: DType| {
        let xs = contiguous_strides(shape);
        let os: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        Pointwise {
            out: Operand::contiguous(to, &os),
            ins: vec![Operand { dtype: from, strides: perm.iter().map(|&p| xs[p]).collect() }],
            shape: os,
            body: Body::Copy,
        }
    };
    let gated = [b * t, 1408];
    let tokens = b * t;
    let cases = [
        ("qkv permute", permute(&[b, t, 3, h, d], &[2, 0, 3, 1, 4], DType::F32, DType::F32)),
        ("o permute+cast", permute(&[b, h, t, d], &[0, 2, 1, 3], DType::F32, DType::BF16)),
        ("dqkv permute+cast", permute(&[3, b, h, t, d], &[1, 3, 0, 2, 4], DType::F32, DType::BF16)),
        ("bf16 → f32 permute", permute(&[b, h, t, d], &[0, 2, 1, 3], DType::BF16, DType::F32)),
        (
            "gated mul → bf16",
            Pointwise {
                out: Operand::contiguous(DType::BF16, &gated),
                ins: vec![Operand::contiguous(DType::F32, &gated); 2],
                shape: gated.to_vec(),
                body: Body::Binary(Binary::Mul),
            },
        ),
        (
            "bf16 rows of 1,330 padded to 1,336",
            Pointwise {
                out: Operand { dtype: DType::BF16, strides: vec![1336, 1] },
                ins: vec![Operand::contiguous(DType::BF16, &[tokens, 1330])],
                shape: vec![tokens, 1330],
                body: Body::Copy,
            },
        ),
        (
            "k of [N, 3990] turned to [7, N, 190]",
            Pointwise {
                out: Operand::contiguous(DType::F32, &[7, tokens, 190]),
                ins: vec![Operand { dtype: DType::F32, strides: vec![190, 3990, 1] }],
                shape: vec![7, tokens, 190],
                body: Body::Copy,
            },
        ),
        ("[7, N, 190] permute+cast", permute(&[tokens, 7, 190], &[1, 0, 2], DType::F32, DType::BF16)),
        (
            "[N, 7, 190] times a held [N, 7, 1]",
            Pointwise {
                out: Operand::contiguous(DType::F32, &[tokens, 7, 190]),
                ins: vec![
                    Operand::contiguous(DType::F32, &[tokens, 7, 190]),
                    Operand { dtype: DType::F32, strides: vec![7, 1, 0] },
                ],
                shape: vec![tokens, 7, 190],
                body: Body::Binary(Binary::Mul),
            },
        ),
    ];
    let mut rows = vec![];
    for (what, pw) in cases {
        arena.reset();
        let width = pw.vector_width();
        if width == 1 {
            rows.push(exact_row("pointwise", what, "not vectorizable", 1, 1));
            continue;
        }
        // Each operand's elements from its first to its last at its strides (a padded or
        // strided one spans more than the shape's count).
        let extent =
            |o: &Operand| 1 + pw.shape.iter().zip(&o.strides).map(|(&d, &st)| (d - 1) * st as usize).sum::<usize>();
        let words = |o: &Operand| (extent(o) * o.dtype.size()).div_ceil(4);
        let ins: Vec<alpha_cuda::runtime::driver::Buf> = pw
            .ins
            .iter()
            .map(|o| {
                let mut bits: Vec<u32> = rng.vec(words(o), 3.0).iter().map(|x| x.to_bits()).collect();
                bits[0] = (1.0f32 + 1.0 / 256.0).to_bits();
                bits[1] = f32::MAX.to_bits();
                let buf = arena.alloc_n::<u32>(bits.len())?;
                arena.upload(buf, &bits)?;
                Ok(buf)
            })
            .collect::<Result<_>>()?;
        let out_words = words(&pw.out);
        let outs = [arena.alloc_n::<u32>(out_words)?, arena.alloc_n::<u32>(out_words)?];
        let mut got = vec![];
        let mut times = vec![];
        for (w, out) in [1, width].into_iter().zip(outs) {
            arena.fill_u32(out, NAN_BITS)?;
            let f = gpu.load(&pw.kernel_with(w)?)?;
            let (blocks, threads) = pw.grid_with(w);
            let cfg = LaunchConfig { grid: (blocks, 1, 1), block: (threads, 1, 1), shared_bytes: 0 };
            let args: Vec<Arg> = std::iter::once(out.ptr).chain(ins.iter().map(|x| x.ptr)).map(Arg::U64).collect();
            gpu.launch(&f, cfg, &args)?;
            got.push(arena.download::<u32>(out, out_words)?);
            if opts.bench {
                times.push(median(gpu.time(opts.warmup, opts.reps, || gpu.launch(&f, cfg, &args))?));
            }
        }
        let wrong = got[0].iter().zip(&got[1]).filter(|(x, y)| x != y).count();
        let mut row = exact_row("pointwise", what, &format!("{:?}", pw.shape), wrong, out_words);
        if let [scalar, vector] = times[..] {
            row.median_us = Some(vector);
            row.rate = format!("scalar {scalar:.1} µs → {width} a thread {vector:.1} µs");
        }
        rows.push(row);
    }
    Ok(rows)
}

/// A copy reading through the permute or slice that made its input (the lowering's
/// `concat_views` and `sliced_permutes`), at Diakosmos's geometry: dq permuted back from
/// `[7, N, 190]` into its columns of the `[N, 3990]` q/k/v gradient; the lone group
/// `[N, 1, 190]` sliced from `[N, 7, 190]` into the last columns of `[N, 7, 190]`; k, columns
/// 1330..2660 of the `[N, 3990]` projection, turned to `[7, N, 190]`. Each against the host's
/// copy, bit for bit (what lies around the part must keep the NaN fill); with `--bench`, the
/// one launch's time beside the two it replaces (the view's copy, then the reader's).
pub fn concat_view_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::pointwise::{contiguous_strides, Body, Operand, Pointwise};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    use alpha_ir::DType;
    let n = if opts.bench { 131_072usize } else { 2048 };
    let (groups, d) = (7usize, 190usize);
    let w = groups * d;
    // (what, source shape, the copy's shape, its strides in the source, the source offset, its
    // strides in the output, the output's length, the part's offset in it; in elements).
    type Case = (&'static str, Vec<usize>, Vec<usize>, Vec<u64>, u64, Vec<u64>, usize, usize);
    let xs = contiguous_strides(&[groups, n, d]);
    let ys = contiguous_strides(&[n, groups, d]);
    let (qkv_row, wire_row) = (3 * w as u64, w as u64);
    let cases: [Case; 3] = [
        (
            "dq permuted into the q/k/v gradient",
            vec![groups, n, d],
            vec![n, groups, d],
            vec![xs[1], xs[0], xs[2]],
            0,
            vec![qkv_row, d as u64, 1],
            n * 3 * w,
            0,
        ),
        (
            "lone group sliced into the turned groups",
            vec![n, groups, d],
            vec![n, 1, d],
            ys.clone(),
            6 * ys[1],
            vec![wire_row, d as u64, 1],
            n * w,
            6 * d,
        ),
        (
            "k sliced from the projection and turned",
            vec![n, 3 * w],
            vec![groups, n, d],
            vec![d as u64, qkv_row, 1],
            w as u64,
            contiguous_strides(&[groups, n, d]),
            n * w,
            0,
        ),
    ];
    let mut rows = vec![];
    for (what, src_shape, shape, ins, offset, outs, out_len, at) in cases {
        arena.reset();
        let src_n: usize = src_shape.iter().product();
        let x = rng.vec(src_n, 3.0);
        let src = arena.alloc_n::<f32>(src_n)?;
        arena.upload(src, &x)?;
        let out = arena.alloc_n::<f32>(out_len)?;
        arena.fill_u32(out, NAN_BITS)?;
        let pw = Pointwise {
            out: Operand { dtype: DType::F32, strides: outs.clone() },
            ins: vec![Operand { dtype: DType::F32, strides: ins.clone() }],
            shape: shape.clone(),
            body: Body::Copy,
        };
        let width = pw.vector_width();
        let f = gpu.load(&pw.kernel_with(width)?)?;
        let (blocks, threads) = pw.grid_with(width);
        let cfg = LaunchConfig { grid: (blocks, 1, 1), block: (threads, 1, 1), shared_bytes: 0 };
        let args = [Arg::U64(out.ptr + 4 * at as u64), Arg::U64(src.ptr + 4 * offset)];
        gpu.launch(&f, cfg, &args)?;
        let got: Vec<u32> = arena.download(out, out_len)?;
        // The host's copy: element (a, b, c) of the copy's shape from the source at the input
        // strides, to the output at the output strides; NaN elsewhere.
        let mut want = vec![NAN_BITS; out_len];
        for a in 0..shape[0] {
            for b in 0..shape[1] {
                for c in 0..shape[2] {
                    let at3 = |st: &[u64]| a * st[0] as usize + b * st[1] as usize + c * st[2] as usize;
                    want[at + at3(&outs)] = x[offset as usize + at3(&ins)].to_bits();
                }
            }
        }
        let wrong = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        let mut row = exact_row("concat-views", what, &format!("{shape:?}"), wrong, out_len);
        if opts.bench {
            let one = median(gpu.time(opts.warmup, opts.reps, || gpu.launch(&f, cfg, &args))?);
            // The two launches it replaces: the view's copy into a tensor of its own, then the
            // reader's copy of that tensor.
            let part: usize = shape.iter().product();
            let tmp = arena.alloc_n::<f32>(part)?;
            let view = Pointwise { out: Operand::contiguous(DType::F32, &shape), ..pw.clone() };
            let reader = Pointwise { ins: vec![Operand::contiguous(DType::F32, &shape)], ..pw.clone() };
            let fv = gpu.load(&view.kernel_with(view.vector_width())?)?;
            let fr = gpu.load(&reader.kernel_with(reader.vector_width())?)?;
            let (bv, tv) = view.grid_with(view.vector_width());
            let (br, tr) = reader.grid_with(reader.vector_width());
            let cv = LaunchConfig { grid: (bv, 1, 1), block: (tv, 1, 1), shared_bytes: 0 };
            let cr = LaunchConfig { grid: (br, 1, 1), block: (tr, 1, 1), shared_bytes: 0 };
            let two = median(gpu.time(opts.warmup, opts.reps, || {
                gpu.launch(&fv, cv, &[Arg::U64(tmp.ptr), Arg::U64(src.ptr + 4 * offset)])?;
                gpu.launch(&fr, cr, &[Arg::U64(out.ptr + 4 * at as u64), Arg::U64(tmp.ptr)])
            })?);
            row.median_us = Some(one);
            row.rate = format!("two launches {two:.1} us -> one {one:.1} us");
        }
        rows.push(row);
    }
    Ok(rows)
}

/// [`alpha_cuda::kernels::pointwise::tanh`] against [`alpha_cuda::kernels::pointwise::tanh_dividing`] (the quotient from
/// `div.rn.f32`) on every one of the 2³² f32 bit patterns: each thread of 2¹⁸ counts the inputs
/// on which the two differ (bits; two NaNs agree) and keeps the last, and the host sums. The
/// claim that replacing the division changed no bit anywhere, checked rather than argued.
pub fn tanh_exhaustive(gpu: &Gpu, arena: &DeviceArena) -> Result<Vec<Row>> {
    use alpha_cuda::ptx::{addr, Kernel, ParamTy, RegKind};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    const BLOCKS: u32 = 1024;
    const THREADS: u32 = 256;
    let threads = (BLOCKS * THREADS) as usize;
    let mut k = Kernel::new("tanh_exhaustive").with_block(THREADS, 1, 1);
    let counts = k.param_reg("counts", ParamTy::U64);
    let last = k.param_reg("last", ParamTy::U64);
    let (tid, bid) = (k.sreg("%tid.x"), k.sreg("%ctaid.x"));
    let gid = k.tri("mad.lo.u32", RegKind::B32, bid, THREADS, tid);
    let (it, wrong, seen) = (k.imm_u32(0), k.imm_u32(0), k.imm_u32(0));
    let top = k.label("every_input");
    k.place(&top);
    let bits = k.tri("mad.lo.u32", RegKind::B32, it, BLOCKS * THREADS, gid);
    let x = k.un("mov.b32", RegKind::F32, bits);
    let (a, b) =
        (alpha_cuda::kernels::pointwise::tanh(&mut k, x), alpha_cuda::kernels::pointwise::tanh_dividing(&mut k, x));
    let (ab, bb) = (k.un("mov.b32", RegKind::B32, a), k.un("mov.b32", RegKind::B32, b));
    let same_bits = k.setp("eq.u32", ab, bb);
    let (a_nan, b_nan) = (k.setp("nan.f32", a, a), k.setp("nan.f32", b, b));
    let both_nan = k.bin("and.pred", RegKind::Pred, a_nan, b_nan);
    let agree = k.bin("or.pred", RegKind::Pred, same_bits, both_nan);
    k.op_if(agree, true, "add.u32", [wrong.into(), wrong.into(), 1u32.into()]);
    k.op_if(agree, true, "mov.u32", [seen.into(), bits.into()]);
    k.op("add.u32", [it.into(), it.into(), 1u32.into()]);
    let more = k.setp("lt.u32", it, ((1u64 << 32) / (BLOCKS * THREADS) as u64) as u32);
    k.bra_if(more, false, &top);
    let at = k.addr_of(counts, gid, 4);
    k.op("st.global.u32", [addr(at, 0), wrong.into()]);
    let at = k.addr_of(last, gid, 4);
    k.op("st.global.u32", [addr(at, 0), seen.into()]);
    k.ret();
    arena.reset();
    let (c, l) = (arena.alloc_n::<u32>(threads)?, arena.alloc_n::<u32>(threads)?);
    let f = gpu.load(&k)?;
    let t0 = std::time::Instant::now();
    gpu.launch(&f, LaunchConfig::linear(BLOCKS, THREADS), &[Arg::U64(c.ptr), Arg::U64(l.ptr)])?;
    let counts: Vec<u32> = arena.download(c, threads)?;
    let lasts: Vec<u32> = arena.download(l, threads)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let wrong: u64 = counts.iter().map(|&n| n as u64).sum();
    let example = counts.iter().zip(&lasts).find(|(&n, _)| n > 0).map(|(_, &x)| x);
    Ok(vec![Row {
        family: "tanh-exhaustive".into(),
        name: "tanh (fast quotient) = tanh (div.rn)".into(),
        shape: "all 2^32 f32 inputs".into(),
        max_abs: wrong as f64,
        rel: wrong as f64,
        tol: 0.0,
        pass: wrong == 0,
        median_us: None,
        rate: match example {
            Some(x) => format!("{wrong} inputs differ, e.g. bits {x:#010x} ({})", f32::from_bits(x)),
            None => format!("no input differs ({ms:.0} ms)"),
        },
    }])
}

/// Sums and means over the rows of [rows, width] f32 tensors (bias gradients: the column path
/// of [`alpha_cuda::kernels::reduce`]) against the host's f64 sums, and a second launch
/// bit-identical to the first. Shapes: GPT-2's at sixteen contexts ([16384, 768], 32 row
/// chunks and a finishing pass), a ragged one ([1000, 300]: a partial last tile and chunk), a
/// small one ([5, 40]: one chunk, most row groups idle); plus row reductions over axis 1: short
/// rows on the warp path ([300, 1000]; Diakosmos's groups of 190, summed and maxed) and long
/// ones on the strided path ([300, 3000]). Timed with `bench`.
pub fn reduce_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::reduce::{self, Reduction};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    use alpha_ir::{DType, Reduce};
    let cases = [
        ([16384usize, 768usize], 0usize, Reduce::Sum, true),
        ([16384, 768], 0, Reduce::Mean, true),
        ([1000, 300], 0, Reduce::Sum, true),
        ([5, 40], 0, Reduce::Sum, true),
        ([300, 1000], 1, Reduce::Sum, false),
        ([14336, 190], 1, Reduce::Sum, false),
        ([14336, 190], 1, Reduce::Max, false),
        ([300, 3000], 1, Reduce::Sum, false),
    ];
    let mut rows = vec![];
    for (shape, axis, kind, columns) in cases {
        arena.reset();
        let r = Reduction::new(kind, &shape, &[axis], DType::F32, DType::F32)?;
        let name = format!("reduce_{kind:?}_axis{axis}").to_lowercase();
        let label = format!("{shape:?}");
        if r.columns != columns {
            rows.push(exact_row(
                "reduce",
                &name,
                &format!("{label}: column path {} (expected {columns})", r.columns),
                1,
                1,
            ));
            continue;
        }
        let [rows_n, width] = shape;
        let x = rng.vec(rows_n * width, 1.0);
        let outputs = r.outputs();
        let want: Vec<f32> = (0..outputs)
            .map(|o| {
                if kind == Reduce::Max {
                    return x[o * width..(o + 1) * width].iter().copied().fold(f32::NEG_INFINITY, f32::max);
                }
                let s: f64 = if axis == 0 {
                    (0..rows_n).map(|i| x[i * width + o] as f64).sum()
                } else {
                    x[o * width..(o + 1) * width].iter().map(|&v| v as f64).sum()
                };
                (if kind == Reduce::Mean { s / r.count() as f64 } else { s }) as f32
            })
            .collect();
        let xb = arena.alloc_n::<f32>(x.len())?;
        arena.upload(xb, &x)?;
        let [ob, pb] = poisoned(arena, [outputs, outputs * r.chunks()])?;
        let f1 = gpu.load(&r.kernel())?;
        let f2 = if r.chunks() > 1 { Some(gpu.load(&r.finish_kernel())?) } else { None };
        let cfg1 = LaunchConfig { grid: r.grid(), block: (reduce::THREADS, 1, 1), shared_bytes: 0 };
        let cfg2 = LaunchConfig { grid: (outputs as u32, 1, 1), block: (reduce::THREADS, 1, 1), shared_bytes: 0 };
        let args1 = reduce::arguments([ob.ptr, xb.ptr, pb.ptr].map(Arg::U64));
        let args2 = reduce::finish_arguments([ob.ptr, pb.ptr].map(Arg::U64));
        let run = || -> Result<()> {
            gpu.launch(&f1, cfg1, &args1)?;
            if let Some(f2) = &f2 {
                gpu.launch(f2, cfg2, &args2)?;
            }
            Ok(())
        };
        run()?;
        let got: Vec<f32> = arena.download(ob, outputs)?;
        arena.fill_u32(ob, NAN_BITS)?;
        run()?;
        let again: Vec<f32> = arena.download(ob, outputs)?;
        let differing = got.iter().zip(&again).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        let (max_abs, rel) = compare(&got, &want);
        let tol = 1e-5;
        rows.push(Row {
            family: "reduce".into(),
            name,
            shape: label,
            max_abs,
            rel,
            tol,
            pass: rel <= tol && differing == 0,
            median_us: if opts.bench { Some(median(gpu.time(opts.warmup, opts.reps, run)?)) } else { None },
            rate: format!(
                "{} path, {} chunk(s); {differing} outputs differing between two launches",
                if r.columns { "column" } else { "strided" },
                r.chunks()
            ),
        });
    }
    Ok(rows)
}

/// The column path's first pass on the host in the kernel's order
/// ([`alpha_cuda::kernels::reduce::Reduction::kernel`]): for each column and chunk of rows, row
/// group `g` sums the rows `g, g + 8, …` of the chunk in order from +0, then the eight groups'
/// sums are added in pairs, then pairs of pairs. Returns what the pass stores: with one chunk the
/// finished values (a Mean divided by the count), else the partials at `[column·chunks + chunk]`.
pub fn column_pass_reference(r: &alpha_cuda::kernels::reduce::Reduction, x: &[f32]) -> Vec<f32> {
    use alpha_cuda::kernels::reduce::ROW_GROUPS;
    let (width, rows, chunks, chunk_rows) = (r.outputs(), r.count(), r.chunks(), r.column_chunk_rows());
    let mut out = vec![0.0f32; width * chunks];
    for col in 0..width {
        for c in 0..chunks {
            let (start, stop) = (c * chunk_rows, ((c + 1) * chunk_rows).min(rows));
            let mut level: Vec<f32> = (0..ROW_GROUPS as usize)
                .map(|g| (start + g..stop).step_by(ROW_GROUPS as usize).fold(0.0f32, |acc, i| acc + x[i * width + col]))
                .collect();
            while level.len() > 1 {
                level = level.chunks(2).map(|p| if p.len() == 2 { p[0] + p[1] } else { p[0] }).collect();
            }
            out[col * chunks + c] = level[0];
        }
    }
    if chunks == 1 {
        finished(r, &mut out);
    }
    out
}

/// The finishing pass on the host in the kernel's order
/// ([`alpha_cuda::kernels::reduce::Reduction::finish_kernel`]): thread `t` sums the partials `t,
/// t + 256, …` of its output from +0; each warp combines its threads' sums by butterflies (xor
/// 16, 8, 4, 2, 1), and the warps' sums are added in order.
pub fn finish_reference(r: &alpha_cuda::kernels::reduce::Reduction, partials: &[f32]) -> Vec<f32> {
    finish_reference_over(r, partials, r.chunks())
}

/// [`finish_reference`] over `chunks` partials an output
/// ([`alpha_cuda::kernels::reduce::Reduction::finish_kernel_over`]).
pub fn finish_reference_over(r: &alpha_cuda::kernels::reduce::Reduction, partials: &[f32], chunks: usize) -> Vec<f32> {
    use alpha_cuda::kernels::reduce::THREADS;
    let mut out: Vec<f32> = (0..r.outputs())
        .map(|o| {
            let row = &partials[o * chunks..(o + 1) * chunks];
            let mut t: Vec<f32> = (0..THREADS as usize)
                .map(|t| (t..chunks).step_by(THREADS as usize).fold(0.0f32, |acc, j| acc + row[j]))
                .collect();
            for off in [16, 8, 4, 2, 1] {
                t = (0..t.len()).map(|l| t[l] + t[l ^ off]).collect();
            }
            t.iter().step_by(32).skip(1).fold(t[0], |acc, &w| acc + w)
        })
        .collect();
    finished(r, &mut out);
    out
}

/// A Mean's sums divided by the count (`div.rn.f32`), as the kernels finish them.
fn finished(r: &alpha_cuda::kernels::reduce::Reduction, v: &mut [f32]) {
    if r.kind == alpha_ir::Reduce::Mean {
        v.iter_mut().for_each(|x| *x /= r.count() as f32);
    }
}

/// The column sum that also stores its tensor's bf16 cast
/// ([`alpha_cuda::kernels::reduce::Reduction::column_cast_kernel`]) with the finishing pass: the
/// sums bit for bit those of the plain column sum and of the host in the kernels' order
/// ([`column_pass_reference`], [`finish_reference`]), the cast bit for bit round-to-nearest-even
/// with a poisoned guard after it untouched, and a second launch bit-identical. Shapes: GPT-2's
/// at sixteen contexts (the q/k/v bias, [16384, 2304], and the 768-wide ones), a ragged one
/// ([1000, 300]: a partial last tile and chunk), a small Mean ([5, 40]: one chunk, the mean
/// stored by the first pass). Timed with `bench` (the fused pair; the plain pair and a cast read
/// the tensor twice).
pub fn column_cast_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::reduce::{self, Reduction};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    use alpha_ir::{DType, Reduce};
    const GUARD: u16 = 0x7FC1;
    let cases = [
        ([16384usize, 2304usize], Reduce::Sum),
        ([16384, 768], Reduce::Sum),
        ([1000, 300], Reduce::Sum),
        ([5, 40], Reduce::Mean),
    ];
    let mut rows = vec![];
    for (shape, kind) in cases {
        arena.reset();
        let r = Reduction::new(kind, &shape, &[0], DType::F32, DType::F32)?;
        let n = shape[0] * shape[1];
        let x = rng.vec(n, 1.0);
        let first = column_pass_reference(&r, &x);
        let want = if r.chunks() > 1 { finish_reference(&r, &first) } else { first };
        let xb = arena.alloc_n::<f32>(n)?;
        arena.upload(xb, &x)?;
        let outputs = r.outputs();
        let [plain, ob, pb] = poisoned(arena, [outputs, outputs, outputs * r.chunks()])?;
        let cast = arena.alloc_n::<u16>(n + 1)?;
        arena.upload(cast, &vec![GUARD; n + 1])?;
        let (f1, fc) = (gpu.load(&r.kernel())?, gpu.load(&r.column_cast_kernel()?)?);
        let f2 = if r.chunks() > 1 { Some(gpu.load(&r.finish_kernel())?) } else { None };
        let cfg1 = LaunchConfig { grid: r.grid(), block: (reduce::THREADS, 1, 1), shared_bytes: 0 };
        let cfg2 = LaunchConfig { grid: (outputs as u32, 1, 1), block: (reduce::THREADS, 1, 1), shared_bytes: 0 };
        let run = |fused: bool, out: u64| -> Result<()> {
            if fused {
                gpu.launch(&fc, cfg1, &reduce::cast_arguments([out, xb.ptr, pb.ptr, cast.ptr].map(Arg::U64)))?;
            } else {
                gpu.launch(&f1, cfg1, &reduce::arguments([out, xb.ptr, pb.ptr].map(Arg::U64)))?;
            }
            if let Some(f2) = &f2 {
                gpu.launch(f2, cfg2, &reduce::finish_arguments([out, pb.ptr].map(Arg::U64)))?;
            }
            Ok(())
        };
        run(false, plain.ptr)?;
        run(true, ob.ptr)?;
        let (alone, got): (Vec<f32>, Vec<f32>) = (arena.download(plain, outputs)?, arena.download(ob, outputs)?);
        let copy: Vec<u16> = arena.download(cast, n + 1)?;
        arena.fill_u32(ob, NAN_BITS)?;
        run(true, ob.ptr)?;
        let again: Vec<f32> = arena.download(ob, outputs)?;
        let sums_wrong = mismatches(&got, &want) + mismatches(&got, &alone) + mismatches(&got, &again);
        let cast_wrong =
            (0..n).filter(|&i| copy[i] != half::bf16::from_f32(x[i]).to_bits()).count() + (copy[n] != GUARD) as usize;
        let wrong = sums_wrong + cast_wrong;
        rows.push(Row {
            family: "column-cast".into(),
            name: format!("reduce_{kind:?}_columns_cast").to_lowercase(),
            shape: format!("{shape:?}"),
            max_abs: wrong as f64,
            rel: wrong as f64 / (n + outputs) as f64,
            tol: 0.0,
            pass: wrong == 0,
            median_us: if opts.bench { Some(median(gpu.time(opts.warmup, opts.reps, || run(true, ob.ptr))?)) } else { None },
            rate: format!(
                "{} chunk(s); {sums_wrong} sums differing (host order, plain sum, second launch), {cast_wrong} cast elements",
                r.chunks()
            ),
        });
    }
    Ok(rows)
}

/// The LayerNorm backward that also sums the columns of what it stores
/// ([`alpha_cuda::kernels::layernorm::backward_dx_column_partials_kernel`], adding the residual
/// and storing the bf16 copy, as GPT-2's run) against the plain kernel: dx, its copy and the gain
/// and bias partials bit for bit, the column sums the host's sums of each band's stored rows in
/// order, and the column sum's finishing pass over them ([`finish_reference_over`]) bit for bit.
/// Shapes: GPT-2's at sixteen contexts ([16384, 768], 1,024 bands) and a ragged one ([1000, 200]:
/// a short last band, columns past the last whole 128). Timed with `bench` (the plain kernel and
/// this one).
pub fn layernorm_column_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::layernorm::{self, DxPasses, Norm, BAND};
    use alpha_cuda::kernels::reduce::{self, Reduction};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    use alpha_ir::{DType, Reduce};
    let mut rows_out = vec![];
    for n in [Norm { rows: 16384, c: 768 }, Norm { rows: 1000, c: 200 }] {
        arena.reset();
        let (rows, c, bands) = (n.rows, n.c, n.bands());
        let mut host = [rows * c, c, rows, rows, rows * c, rows * c].map(|len| rng.vec(len, 1.0));
        // rstd positive, as a forward's.
        host[3].iter_mut().for_each(|v| *v += 1.5);
        let mut bufs = vec![];
        for h in &host {
            let b = arena.alloc_n::<f32>(h.len())?;
            arena.upload(b, h)?;
            bufs.push(b);
        }
        let [x, gain, mean, rstd, dy, r] = [0, 1, 2, 3, 4, 5].map(|i| bufs[i]);
        let [dx_a, dx_b, parts_a, parts_b, columns, out] =
            poisoned(arena, [rows * c, rows * c, n.scratch_floats(), n.scratch_floats(), c * bands, c])?;
        let (copy_a, copy_b) = (arena.alloc_n::<u16>(rows * c)?, arena.alloc_n::<u16>(rows * c)?);
        let (grid, block) = layernorm::dx_partials_launch(n);
        let cfg = LaunchConfig { grid, block, shared_bytes: 0 };
        let plain = gpu.load(&layernorm::backward_dx_partials_kernel(n, true, true))?;
        let summing = gpu.load(&layernorm::backward_dx_column_partials_kernel(n, true, true))?;
        let sum = Reduction::new(Reduce::Sum, &[rows, c], &[0], DType::F32, DType::F32)?;
        let finish = gpu.load(&sum.finish_kernel_over(bands as u32))?;
        let args = |dx: u64, copy: u64, passes: DxPasses<u64>| {
            let tensors = [dx, x.ptr, gain.ptr, mean.ptr, rstd.ptr, dy.ptr];
            layernorm::dx_arguments(tensors, Some(r.ptr), Some(copy), passes)
                .into_iter()
                .map(Arg::U64)
                .collect::<Vec<_>>()
        };
        let args_a = args(dx_a.ptr, copy_a.ptr, DxPasses::Partials(parts_a.ptr));
        let both = DxPasses::PartialsAndColumns { partials: parts_b.ptr, columns: columns.ptr };
        let args_b = args(dx_b.ptr, copy_b.ptr, both);
        let cfg2 = LaunchConfig { grid: (c as u32, 1, 1), block: (reduce::THREADS, 1, 1), shared_bytes: 0 };
        let args2: Vec<Arg> = reduce::finish_arguments([out.ptr, columns.ptr]).into_iter().map(Arg::U64).collect();
        gpu.launch(&plain, cfg, &args_a)?;
        gpu.launch(&summing, cfg, &args_b)?;
        gpu.launch(&finish, cfg2, &args2)?;
        let stored: Vec<f32> = arena.download(dx_a, rows * c)?;
        let same = mismatches(&arena.download::<f32>(dx_b, rows * c)?, &stored)
            + mismatches(
                &arena.download::<f32>(parts_b, n.scratch_floats())?,
                &arena.download::<f32>(parts_a, n.scratch_floats())?,
            )
            + arena
                .download::<u16>(copy_a, rows * c)?
                .iter()
                .zip(arena.download::<u16>(copy_b, rows * c)?)
                .filter(|(a, b)| **a != *b)
                .count();
        let want: Vec<f32> = (0..c * bands)
            .map(|at| {
                let (j, b) = (at / bands, at % bands);
                (b * BAND..((b + 1) * BAND).min(rows)).fold(0.0f32, |acc, i| acc + stored[i * c + j])
            })
            .collect();
        let sums_wrong = mismatches(&arena.download::<f32>(columns, c * bands)?, &want);
        let finished_wrong = mismatches(&arena.download::<f32>(out, c)?, &finish_reference_over(&sum, &want, bands));
        let wrong = same + sums_wrong + finished_wrong;
        let mut row = exact_row(
            "layernorm-cols",
            "layernorm_bwd_dx_add_partials_bf16_cols",
            &format!("{n:?}"),
            wrong,
            2 * rows * c,
        );
        row.rate =
            format!("{same} differ from the plain kernel, {sums_wrong} column sums, {finished_wrong} finished sums");
        if opts.bench {
            let t0 = median(gpu.time(opts.warmup, opts.reps, || gpu.launch(&plain, cfg, &args_a))?);
            let t1 = median(gpu.time(opts.warmup, opts.reps, || gpu.launch(&summing, cfg, &args_b))?);
            row.median_us = Some(t1);
            row.rate = format!("{t1:.1} us against the plain kernel's {t0:.1} us; {}", row.rate);
        }
        rows_out.push(row);
    }
    Ok(rows_out)
}
