//! Attention checks: the fp32, `mma.sync` and `wgmma` kernels against each other and the CPU
//! reference, rotaries fused on load and store, the bf16 forms, and their benchmarks.

use super::*;

/// The lowering's fusions against the launches they replace, bit for bit on the GPU:
/// * every tiled GEMM layout and input with the GELU epilogue: its second output against the
///   pointwise GELU kernel run on its first (and the first against the f64 reference);
/// * the attention backward with the inverse rotary fused into its dq and dk stores, writing
///   them (as Coppelius's plan does) exactly over o and k, against the unfused kernels followed
///   by two `rotary_inverse` launches (GQA, a partial tile);
/// * the attention forward and backward turning the pre-rotary q and k on load (dk stored
///   exactly over the pre-rotary k) against two `rotary` launches and the kernels reading the
///   rotated q and k: o, lse, dq, dk, dv.
pub fn fusion_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng) -> Result<Vec<Row>> {
    use alpha_cuda::kernels::pointwise::{Body, Operand, Pointwise};
    use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
    let mut rows = Vec::new();
    let launch = |f: &Function, grid: (u32, u32, u32), block: (u32, u32, u32), args: &[u64]| {
        let args: Vec<Arg> = args.iter().map(|&p| Arg::U64(p)).collect();
        gpu.launch(f, LaunchConfig { grid, block, shared_bytes: 0 }, &args)
    };
    for a in [Layout::RowMajor, Layout::ColMajor] {
        for b in [Layout::RowMajor, Layout::ColMajor] {
            for (input, wgmma) in [(Input::F32, false), (Input::Bf16, false), (Input::F32, true), (Input::Bf16, true)] {
                arena.reset();
                let spec = GemmSpec { activation: Some(alpha_ir::Unary::Gelu), ..GemmSpec::new(a, b, input) };
                let spec = if wgmma { spec.wgmma() } else { spec };
                let f = gpu.load(&spec.kernel())?;
                let mut sh = GemmShape::packed(&spec, 200, 136, 3 * spec.bk);
                sh.batch = 2;
                let (na, nb, nc) = sh.extents(&spec);
                let (av, bv) = (rng.vec(na, 1.0), rng.vec(nb, 1.0));
                let ab = upload_operand(arena, input, &av)?;
                let bb = upload_operand(arena, input, &bv)?;
                let cb = arena.alloc_n::<f32>(nc)?;
                let ub = arena.alloc_n::<f32>(nc)?;
                let pb = arena.alloc_n::<f32>(nc)?;
                for x in [cb, ub, pb] {
                    arena.fill_u32(x, NAN_BITS)?;
                }
                let ptrs = [ab.ptr, bb.ptr, cb.ptr, cb.ptr];
                gemm::launch_with(gpu, &f, &spec, &sh, ptrs, Extras { u: Some(ub.ptr), ..Extras::default() })?;
                let pw = Pointwise {
                    shape: vec![nc],
                    out: Operand::contiguous(alpha_ir::DType::F32, &[nc]),
                    ins: vec![Operand::contiguous(alpha_ir::DType::F32, &[nc])],
                    body: Body::Unary(alpha_ir::Unary::Gelu),
                };
                let (blocks, threads) = pw.grid();
                let fp = gpu.load(&pw.kernel()?)?;
                launch(&fp, (blocks, 1, 1), (threads, 1, 1), &[pb.ptr, cb.ptr])?;
                let c: Vec<f32> = arena.download(cb, nc)?;
                let u: Vec<f32> = arena.download(ub, nc)?;
                let p: Vec<f32> = arena.download(pb, nc)?;
                let mut want = vec![0.0f32; nc];
                gemm::reference(&GemmSpec { activation: None, ..spec }, &sh, &av, &bv, &[], &mut want);
                let (max_abs, rel) = compare(&c, &want);
                rows.push(Row {
                    family: "gemm".into(),
                    name: spec.name(),
                    shape: format!("b2 m200 n136 k{}", 3 * spec.bk),
                    max_abs,
                    rel,
                    tol: 1e-5,
                    pass: rel <= 1e-5,
                    median_us: None,
                    rate: String::new(),
                });
                rows.push(exact_row(
                    "fusion",
                    &format!("{} = pw_gelu", spec.name()),
                    &format!("b2 m200 n136 k{}", 3 * spec.bk),
                    mismatches(&u, &p),
                    nc,
                ));
            }
        }
    }

    // Attention backward with the inverse rotary fused into its stores.
    arena.reset();
    let dims = attention::Dims { b: 1, h: 4, g: 2, t: 200, d: 64, scale: 0.125, softcap: None };
    let (nq, nk, nl) = (dims.b * dims.h * dims.t * dims.d, dims.b * dims.g * dims.t * dims.d, dims.b * dims.h * dims.t);
    let up = |v: &[f32]| -> Result<alpha_cuda::runtime::driver::Buf> {
        let b = arena.alloc_n::<f32>(v.len())?;
        arena.upload(b, v)?;
        Ok(b)
    };
    let blank = |n: usize| -> Result<alpha_cuda::runtime::driver::Buf> {
        let b = arena.alloc_n::<f32>(n)?;
        arena.fill_u32(b, NAN_BITS)?;
        Ok(b)
    };
    let (qh, kh, vh, doh) = (rng.vec(nq, 1.0), rng.vec(nk, 1.0), rng.vec(nk, 1.0), rng.vec(nq, 1.0));
    let (q, k, v, dout) = (up(&qh)?, up(&kh)?, up(&vh)?, up(&doh)?);
    let tab = up(&rotary::table(dims.t, dims.d, 10000.0))?;
    let (o, lse) = (blank(nq)?, blank(nl)?);
    let block = (attention::ROWS, 1, 1);
    let ffwd = gpu.load(&attention::forward_kernel(&dims))?;
    launch(
        &ffwd,
        dims.grid_q(),
        block,
        &attention::forward_arguments([o.ptr, lse.ptr, q.ptr, k.ptr, v.ptr], vec![], None),
    )?;
    let oh: Vec<f32> = arena.download(o, nq)?;
    let delta = blank(nl)?;
    // Unfused: dQ, dK/dV, then the two inverse rotaries.
    let (dq, dk, dv, rq, rk) = (blank(nq)?, blank(nk)?, blank(nk)?, blank(nq)?, blank(nk)?);
    let fdq = gpu.load(&attention::backward_dq_kernel(&dims, false))?;
    let fdkv = gpu.load(&attention::backward_dkv_kernel(&dims, false))?;
    let dq_args = attention::dq_arguments([dq, delta, q, k, v, o, lse, dout].map(|b| b.ptr), None, vec![]);
    launch(&fdq, dims.grid_q(), block, &dq_args)?;
    let dkv_args = attention::dkv_arguments([dk, dv, q, k, v, lse, delta, dout].map(|b| b.ptr), None, vec![]);
    launch(&fdkv, dims.grid_kv(), block, &dkv_args)?;
    for (out, x, rows_) in [(rq, dq, nq / dims.d), (rk, dk, nk / dims.d)] {
        let fr = gpu.load(&rotary::kernel(rows_, dims.t, dims.d, true))?;
        let (blocks, threads) = alpha_cuda::kernels::pointwise::grid_blocks(rows_ * dims.d / 2);
        launch(&fr, (blocks, 1, 1), (threads, 1, 1), &rotary::arguments([out.ptr, x.ptr, tab.ptr]))?;
    }
    // Fused, dq written over (a copy of) o and dk over (a copy of) k, as in Coppelius's plan.
    let (o2, k2, dv2, delta2) = (up(&oh)?, up(&kh)?, blank(nk)?, blank(nl)?);
    let fdq_r = gpu.load(&attention::backward_dq_kernel(&dims, true))?;
    let fdkv_r = gpu.load(&attention::backward_dkv_kernel(&dims, true))?;
    let dq_args = attention::dq_arguments([o2, delta2, q, k2, v, o2, lse, dout].map(|b| b.ptr), Some(tab.ptr), vec![]);
    launch(&fdq_r, dims.grid_q(), block, &dq_args)?;
    let dkv_args =
        attention::dkv_arguments([k2, dv2, q, k2, v, lse, delta2, dout].map(|b| b.ptr), Some(tab.ptr), vec![]);
    launch(&fdkv_r, dims.grid_kv(), block, &dkv_args)?;
    let shape = "b1 h4 g2 t200 d64";
    let pairs = [("dq", rq, o2, nq), ("dk", rk, k2, nk), ("dv", dv, dv2, nk)];
    for (what, want, got, n) in pairs {
        let w: Vec<f32> = arena.download(want, n)?;
        let g: Vec<f32> = arena.download(got, n)?;
        let finite = w.iter().all(|x| x.is_finite());
        let mut row = exact_row("fusion", &format!("attention_bwd_rotary {what}"), shape, mismatches(&g, &w), n);
        row.pass &= finite;
        rows.push(row);
    }

    // The forward rotary turned on load: q and k above taken as the pre-rotary tensors.
    // Unfused: two `rotary` launches, the plain forward, then the backward (inverse rotaries
    // fused into its stores, as Coppelius runs it) on the rotated q and k.
    let (qr, kr) = (blank(nq)?, blank(nk)?);
    for (out, x, rows_) in [(qr, q, nq / dims.d), (kr, k, nk / dims.d)] {
        let fr = gpu.load(&rotary::kernel(rows_, dims.t, dims.d, false))?;
        let (blocks, threads) = alpha_cuda::kernels::pointwise::grid_blocks(rows_ * dims.d / 2);
        launch(&fr, (blocks, 1, 1), (threads, 1, 1), &rotary::arguments([out.ptr, x.ptr, tab.ptr]))?;
    }
    let (o_u, lse_u, dq_u, dk_u, dv_u, delta_u) =
        (blank(nq)?, blank(nl)?, blank(nq)?, blank(nk)?, blank(nk)?, blank(nl)?);
    let fwd_args = attention::forward_arguments([o_u, lse_u, qr, kr, v].map(|b| b.ptr), vec![], None);
    launch(&ffwd, dims.grid_q(), block, &fwd_args)?;
    let tensors = [dq_u, delta_u, qr, kr, v, o_u, lse_u, dout].map(|b| b.ptr);
    launch(&fdq_r, dims.grid_q(), block, &attention::dq_arguments(tensors, Some(tab.ptr), vec![]))?;
    let tensors = [dk_u, dv_u, qr, kr, v, lse_u, delta_u, dout].map(|b| b.ptr);
    launch(&fdkv_r, dims.grid_kv(), block, &attention::dkv_arguments(tensors, Some(tab.ptr), vec![]))?;
    // Fused: the rotating kernels read the pre-rotary q and k (dk stored exactly over a copy of
    // the pre-rotary k, as the plan allows).
    let (o_f, lse_f, dv_f, delta_f, k_f) = (blank(nq)?, blank(nl)?, blank(nk)?, blank(nl)?, up(&kh)?);
    let ffwd_l = gpu.load(&attention::forward_kernel_rotating(&dims, [true, true]))?;
    let fwd_args = attention::forward_arguments([o_f, lse_f, q, k_f, v].map(|b| b.ptr), vec![tab.ptr; 2], None);
    launch(&ffwd_l, dims.grid_q(), block, &fwd_args)?;
    let o_fh: Vec<f32> = arena.download(o_f, nq)?;
    let dq_f = blank(nq)?;
    let fdq_l = gpu.load(&attention::backward_dq_kernel_rotating(&dims, true, [true, true]))?;
    let fdkv_l = gpu.load(&attention::backward_dkv_kernel_rotating(&dims, true, [true, true]))?;
    let tensors = [dq_f, delta_f, q, k_f, v, o_f, lse_f, dout].map(|b| b.ptr);
    launch(&fdq_l, dims.grid_q(), block, &attention::dq_arguments(tensors, Some(tab.ptr), vec![tab.ptr; 2]))?;
    let tensors = [k_f, dv_f, q, k_f, v, lse_f, delta_f, dout].map(|b| b.ptr);
    launch(&fdkv_l, dims.grid_kv(), block, &attention::dkv_arguments(tensors, Some(tab.ptr), vec![tab.ptr; 2]))?;
    let o_uh: Vec<f32> = arena.download(o_u, nq)?;
    let mut row = exact_row("fusion", "attention_fwd_rotload o", shape, mismatches(&o_fh, &o_uh), nq);
    row.pass &= o_uh.iter().all(|x| x.is_finite());
    rows.push(row);
    let pairs = [("lse", lse_u, lse_f, nl), ("dq", dq_u, dq_f, nq), ("dk", dk_u, k_f, nk), ("dv", dv_u, dv_f, nk)];
    for (what, want, got, n) in pairs {
        let w: Vec<f32> = arena.download(want, n)?;
        let g: Vec<f32> = arena.download(got, n)?;
        let finite = w.iter().all(|x| x.is_finite());
        let name = if what == "lse" {
            "attention_fwd_rotload lse".to_string()
        } else {
            format!("attention_bwd_rotload {what}")
        };
        let mut row = exact_row("fusion", &name, shape, mismatches(&g, &w), n);
        row.pass &= finite;
        rows.push(row);
    }
    rows.extend(head_split_checks(gpu, arena, rng)?);
    rows.extend(delta_heads_checks(gpu, arena, rng)?);
    rows.extend(store_mul_checks(gpu, arena, rng)?);
    rows.extend(gated_checks(gpu, arena, rng)?);
    rows.extend(chain_epilogue_checks(gpu, arena, rng)?);
    rows.extend(chain_column_sum_checks(gpu, arena, rng)?);
    Ok(rows)
}

/// One attention problem of [`attention_checks`]: the shape, q's magnitude (larger logits test
/// the softmax harder), which of q and k are turned by the rotary on load, and which of dq and
/// dk are stored turned back.
pub(super) struct AttnCase {
    dims: attention::Dims,
    q_scale: f32,
    load: [bool; 2],
    inverse: [bool; 2],
}

/// The tensor-core attention kernels ([`attention_mma`]) against the fp32 kernels
/// ([`attention`], trusted: they follow the CPU reference) on the same random inputs: forward o
/// and lse, then each family's backward on its own forward's outputs: delta, dq, dk, dv.
///
/// bf16 operands bound the agreement: o, delta, dq, dk, dv within max |Δ| / max |ref| ≤ 2e-2 and
/// cosine similarity ≥ 0.9999; lse within 1e-2, or, where logits are large enough that merely
/// rounding q and k to bf16 moves lse further, within twice that floor (the fp32 forward run on
/// bf16-rounded q and k: the error any bf16 attention has). A second run of the new kernels must
/// repeat every tensor bit for bit. Shapes: Coppelius's (T = 1024, 8 heads), GQA with T not a
/// multiple of 64, soft-caps, the rotary turned on load and stored back (both, and mixed), and a
/// T smaller than one mma row block. With `opts.bench`, both families are timed (µs per launch,
/// median of `opts.reps`) at B = 1 and B = 16, T = 1024, and with Coppelius's rotary options.
pub fn attention_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    use attention::Dims;
    let base = Dims { b: 1, h: 8, g: 8, t: 1024, d: 64, scale: 0.125, softcap: None };
    let (plain, both) = ([false, false], [true, true]);
    let case = |dims, q_scale, load, inverse| AttnCase { dims, q_scale, load, inverse };
    let cases = [
        case(base, 4.0, plain, plain),
        case(Dims { b: 2, h: 4, g: 2, t: 200, ..base }, 4.0, plain, plain),
        case(Dims { b: 1, h: 4, g: 1, t: 130, softcap: Some(30.0), ..base }, 16.0, plain, plain),
        case(Dims { b: 1, h: 4, g: 2, t: 200, ..base }, 4.0, both, both),
        case(Dims { b: 2, h: 2, g: 1, t: 77, softcap: Some(30.0), ..base }, 8.0, [true, false], [false, true]),
        case(Dims { b: 1, h: 2, g: 2, t: 3, ..base }, 4.0, plain, plain),
        // Grids that agree (no GQA): the one-launch backward too, with every option.
        case(base, 4.0, both, both),
        case(Dims { b: 2, h: 3, g: 3, t: 200, softcap: Some(30.0), ..base }, 8.0, [false, true], [true, false]),
    ];
    let mut rows = Vec::new();
    for c in &cases {
        rows.extend(attention_case(gpu, arena, rng, c)?);
    }
    if opts.bench {
        for c in [
            case(base, 4.0, plain, plain),
            case(base, 4.0, both, both),
            case(Dims { b: 16, ..base }, 4.0, plain, plain),
            case(Dims { b: 16, ..base }, 4.0, both, both),
        ] {
            rows.extend(attention_bench(gpu, arena, rng, &c, opts)?);
        }
    }
    Ok(rows)
}

/// The three kernels of one family for a case: (forward, dQ, dK/dV) and their block.
pub(super) struct AttnKernels {
    fwd: Function,
    dq: Function,
    dkv: Function,
    block: (u32, u32, u32),
}

/// One case's inputs on the device (q, k, v, dO and the rotary table) and its launches.
pub(super) struct AttnRun<'a> {
    gpu: &'a Gpu,
    case: &'a AttnCase,
    q: u64,
    k: u64,
    v: u64,
    dout: u64,
    tab: u64,
}

impl AttnRun<'_> {
    fn kernels(&self, mma: bool) -> Result<AttnKernels> {
        let (c, gpu) = (self.case, self.gpu);
        let d = &c.dims;
        Ok(if mma {
            AttnKernels {
                fwd: gpu.load(&attention_mma::forward_kernel_rotating(d, c.load))?,
                dq: gpu.load(&attention_mma::backward_dq_kernel_rotating(d, c.inverse[0], c.load))?,
                dkv: gpu.load(&attention_mma::backward_dkv_kernel_rotating(d, c.inverse[1], c.load))?,
                block: attention_mma::block(),
            }
        } else {
            AttnKernels {
                fwd: gpu.load(&attention::forward_kernel_rotating(d, c.load))?,
                dq: gpu.load(&attention::backward_dq_kernel_rotating(d, c.inverse[0], c.load))?,
                dkv: gpu.load(&attention::backward_dkv_kernel_rotating(d, c.inverse[1], c.load))?,
                block: (attention::ROWS, 1, 1),
            }
        })
    }

    fn launch(&self, f: &Function, grid: (u32, u32, u32), block: (u32, u32, u32), args: &[u64]) -> Result<()> {
        use alpha_cuda::runtime::driver::{Arg, LaunchConfig};
        let args: Vec<Arg> = args.iter().map(|&p| Arg::U64(p)).collect();
        self.gpu.launch(f, LaunchConfig { grid, block, shared_bytes: 0 }, &args)
    }

    /// `q_tab`, `k_tab` for those turned on load.
    fn tabs(&self) -> Vec<u64> {
        self.case.load.iter().filter(|&&x| x).map(|_| self.tab).collect()
    }

    /// Forward into `o`, `lse`.
    fn forward(&self, ks: &AttnKernels, o: u64, lse: u64) -> Result<()> {
        let args = attention::forward_arguments([o, lse, self.q, self.k, self.v], self.tabs(), None);
        self.launch(&ks.fwd, self.case.dims.grid_q(), ks.block, &args)
    }

    /// Backward from `o`, `lse`: dQ (and delta), then dK/dV; `out` = (delta, dq, dk, dv).
    fn backward(&self, ks: &AttnKernels, o: u64, lse: u64, [delta, dq, dk, dv]: [u64; 4]) -> Result<()> {
        let c = self.case;
        let tensors = [dq, delta, self.q, self.k, self.v, o, lse, self.dout];
        let args = attention::dq_arguments(tensors, c.inverse[0].then_some(self.tab), self.tabs());
        self.launch(&ks.dq, c.dims.grid_q(), ks.block, &args)?;
        let tensors = [dk, dv, self.q, self.k, self.v, lse, delta, self.dout];
        let args = attention::dkv_arguments(tensors, c.inverse[1].then_some(self.tab), self.tabs());
        self.launch(&ks.dkv, c.dims.grid_kv(), ks.block, &args)
    }

    /// The tensor-core backward as one launch after delta alone (the lowering's choice where the
    /// grids agree); `out` = (delta, dq, dk, dv), none of them over an input.
    fn backward_joint(&self, [fd, fb]: &[Function; 2], o: u64, lse: u64, [delta, dq, dk, dv]: [u64; 4]) -> Result<()> {
        let c = self.case;
        let d = &c.dims;
        self.launch(fd, d.grid_q(), attention_mma::block(), &attention::delta_arguments([delta, o, self.dout], None))?;
        let tensors = [dq, dk, dv, delta, self.q, self.k, self.v, o, lse, self.dout];
        let inverse_tables = c.inverse.iter().filter(|&&x| x).map(|_| self.tab).collect();
        let args = attention::backward_arguments(tensors, None, inverse_tables, self.tabs());
        self.launch(fb, d.grid_q(), attention_mma::block(), &args)
    }

    /// [`AttnRun::backward_joint`]'s kernels: delta, then both passes.
    fn joint_kernels(&self) -> Result<[Function; 2]> {
        let (c, gpu) = (self.case, self.gpu);
        Ok([
            gpu.load(&attention_mma::backward_delta_kernel(&c.dims))?,
            gpu.load(&attention_mma::backward_kernel_rotating(&c.dims, c.inverse, c.load))?,
        ])
    }
}

pub(super) fn attn_shape(case: &AttnCase) -> String {
    let d = &case.dims;
    let mut s = format!("b{} h{} g{} t{}", d.b, d.h, d.g, d.t);
    if let Some(c) = d.softcap {
        s += &format!(" cap{c}");
    }
    let bits = |x: [bool; 2]| format!("{}{}", u8::from(x[0]), u8::from(x[1]));
    if case.load != [false, false] {
        s += &format!(" load{}", bits(case.load));
    }
    if case.inverse != [false, false] {
        s += &format!(" inv{}", bits(case.inverse));
    }
    s
}

/// Random inputs of a case on the host: q, k, v, dO.
pub(super) fn attention_inputs(rng: &mut Rng, case: &AttnCase) -> [Vec<f32>; 4] {
    let d = &case.dims;
    let (nq, nk) = (d.b * d.h * d.t * d.d, d.b * d.g * d.t * d.d);
    [rng.vec(nq, case.q_scale), rng.vec(nk, 1.0), rng.vec(nk, 1.0), rng.vec(nq, 1.0)]
}

pub(super) fn attention_case(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, case: &AttnCase) -> Result<Vec<Row>> {
    arena.reset();
    let d = &case.dims;
    let (nq, nk, nl) = (d.b * d.h * d.t * d.d, d.b * d.g * d.t * d.d, d.b * d.h * d.t);
    let [qh, kh, vh, doh] = attention_inputs(rng, case);
    let tab = upload_f32(arena, &rotary::table(d.t, d.d, 10000.0))?;
    let (v, dout) = (upload_f32(arena, &vh)?, upload_f32(arena, &doh)?);
    let run = AttnRun { gpu, case, q: upload_f32(arena, &qh)?, k: upload_f32(arena, &kh)?, v, dout, tab };
    let blank = |n: usize| -> Result<alpha_cuda::runtime::driver::Buf> {
        let b = arena.alloc_n::<f32>(n)?;
        arena.fill_u32(b, NAN_BITS)?;
        Ok(b)
    };
    let sizes = [nq, nl, nl, nq, nk, nk];
    let names = ["o", "lse", "delta", "dq", "dk", "dv"];
    // Outputs (o, lse, delta, dq, dk, dv) of the fp32 kernels, then of two runs of the new ones.
    let mut outs: Vec<Vec<Vec<f32>>> = vec![];
    for mma in [false, true, true] {
        let ks = run.kernels(mma)?;
        let bufs: Vec<alpha_cuda::runtime::driver::Buf> = sizes.iter().map(|&n| blank(n)).collect::<Result<_>>()?;
        let p: Vec<u64> = bufs.iter().map(|b| b.ptr).collect();
        run.forward(&ks, p[0], p[1])?;
        run.backward(&ks, p[0], p[1], [p[2], p[3], p[4], p[5]])?;
        outs.push(bufs.iter().zip(sizes).map(|(b, n)| arena.download(*b, n)).collect::<Result<_>>()?);
    }
    // The lse floor: the fp32 forward on q and k rounded to bf16.
    let round = |x: &[f32]| x.iter().map(|&v| gemm::bf16_round(v)).collect::<Vec<f32>>();
    let floor = {
        let rounded = AttnRun { q: upload_f32(arena, &round(&qh))?, k: upload_f32(arena, &round(&kh))?, ..run };
        let (o, lse) = (blank(nq)?, blank(nl)?);
        rounded.forward(&rounded.kernels(false)?, o.ptr, lse.ptr)?;
        let l: Vec<f32> = arena.download(lse, nl)?;
        rel_and_cosine(&l, &outs[0][1]).0
    };
    let shape = attn_shape(case);
    let mut rows = vec![];
    for (i, name) in names.iter().enumerate() {
        let (max_abs, rel, cos) = rel_and_cosine(&outs[1][i], &outs[0][i]);
        let (err, tol, note) = if *name == "lse" {
            (max_abs, (2.0 * floor).max(1e-2), format!(", bf16 floor {floor:.2e}"))
        } else {
            (rel, 2e-2, String::new())
        };
        rows.push(Row {
            family: "attention-mma".into(),
            name: format!("{name} vs fp32"),
            shape: shape.clone(),
            max_abs,
            rel,
            tol,
            pass: err <= tol && cos >= 0.9999,
            median_us: None,
            rate: format!("cos {cos:.7}{note}"),
        });
    }
    let mism: usize = (0..names.len()).map(|i| mismatches(&outs[1][i], &outs[2][i])).sum();
    let total: usize = sizes.iter().sum();
    rows.push(exact_row("attention-mma", "second run bit for bit", &shape, mism, total));
    if d.g == d.h {
        // Both backward passes in one launch: the same bits as the two launches.
        let bufs: Vec<alpha_cuda::runtime::driver::Buf> = sizes.iter().map(|&n| blank(n)).collect::<Result<_>>()?;
        let p: Vec<u64> = bufs.iter().map(|b| b.ptr).collect();
        run.forward(&run.kernels(true)?, p[0], p[1])?;
        run.backward_joint(&run.joint_kernels()?, p[0], p[1], [p[2], p[3], p[4], p[5]])?;
        let joint: Vec<Vec<f32>> = bufs.iter().zip(sizes).map(|(b, n)| arena.download(*b, n)).collect::<Result<_>>()?;
        let mism: usize = (0..names.len()).map(|i| mismatches(&outs[1][i], &joint[i])).sum();
        rows.push(exact_row("attention-mma", "one-launch backward bit for bit", &shape, mism, total));
    }
    // What the driver's JIT made of them: registers, and no local memory (no spills).
    let ks = run.kernels(true)?;
    let res = [ks.fwd.resources()?, ks.dq.resources()?, ks.dkv.resources()?];
    let local: i32 = res.iter().map(|r| r.1).sum();
    rows.push(Row {
        rate: format!("registers fwd {} dq {} dkv {}", res[0].0, res[1].0, res[2].0),
        ..exact_row("attention-mma", "JIT spill bytes", &shape, local as usize, 1)
    });
    Ok(rows)
}

/// Times the forward and the backward (dQ + dK/dV) of both families at one shape.
pub(super) fn attention_bench(
    gpu: &Gpu,
    arena: &DeviceArena,
    rng: &mut Rng,
    case: &AttnCase,
    opts: &Options,
) -> Result<Vec<Row>> {
    arena.reset();
    let d = &case.dims;
    let (nq, nk, nl) = (d.b * d.h * d.t * d.d, d.b * d.g * d.t * d.d, d.b * d.h * d.t);
    let [qh, kh, vh, doh] = attention_inputs(rng, case);
    let tab = upload_f32(arena, &rotary::table(d.t, d.d, 10000.0))?;
    let (q, k) = (upload_f32(arena, &qh)?, upload_f32(arena, &kh)?);
    let run = AttnRun { gpu, case, q, k, v: upload_f32(arena, &vh)?, dout: upload_f32(arena, &doh)?, tab };
    let p: Vec<u64> =
        [nq, nl, nl, nq, nk, nk].iter().map(|&n| arena.alloc_n::<f32>(n).map(|b| b.ptr)).collect::<Result<_>>()?;
    // Causal: half of the 4·B·H·T²·D flops of the forward's two products; the backward has 2.5×.
    let fwd_flop = 2.0 * d.b as f64 * d.h as f64 * (d.t as f64).powi(2) * d.d as f64;
    let mut times = vec![];
    for mma in [false, true] {
        let ks = run.kernels(mma)?;
        let f = median(gpu.time(opts.warmup, opts.reps, || run.forward(&ks, p[0], p[1]))?);
        let b = median(gpu.time(opts.warmup, opts.reps, || run.backward(&ks, p[0], p[1], [p[2], p[3], p[4], p[5]]))?);
        times.push([f, b]);
    }
    let shape = attn_shape(case);
    let mut rows = vec![];
    for (i, what) in ["fwd", "bwd (dq+dkv)"].iter().enumerate() {
        for (j, fam) in ["fp32", "mma"].iter().enumerate() {
            let t = times[j][i];
            let flop = if i == 0 { fwd_flop } else { 2.5 * fwd_flop };
            let speedup = if j == 1 { format!(", {:.1}x the fp32 kernels", times[0][i] / t) } else { String::new() };
            let rate = format!("{:.1} TFLOP/s{speedup}", flop / (t * 1e-6) / 1e12);
            rows.push(timing_row("attention-bench", &format!("{fam} {what}"), &shape, Some(t), rate));
        }
    }
    if d.g == d.h {
        let jk = run.joint_kernels()?;
        let t =
            median(gpu.time(opts.warmup, opts.reps, || run.backward_joint(&jk, p[0], p[1], [p[2], p[3], p[4], p[5]]))?);
        let rate =
            format!("{:.1} TFLOP/s, {:.2}x the two launches", 2.5 * fwd_flop / (t * 1e-6) / 1e12, times[1][1] / t);
        rows.push(timing_row("attention-bench", "mma bwd (delta; dq+dkv one launch)", &shape, Some(t), rate));
    }
    Ok(rows)
}

/// q or k turned by the rotary at every row's position (`rows` rows of `d`, positions cycling
/// with period `t`), with the attention kernels' own f32 arithmetic ([`attention::rotate_pairs`]:
/// separately rounded products, then the sum), then rounded to bf16.
pub(super) fn rotated_bf16(x: &[f32], tab: &[f32], t: usize, d: usize) -> Vec<u16> {
    let half = d / 2;
    let mut out = vec![0u16; x.len()];
    for (r, row) in x.chunks_exact(d).enumerate() {
        let pos = r % t;
        for i in 0..half {
            let (c, s) = (tab[pos * half + i], tab[t * half + pos * half + i]);
            let (x1, x2) = (row[i], row[i + half]);
            let o1 = x1 * c - x2 * s;
            let o2 = x1 * s + x2 * c;
            out[r * d + i] = half::bf16::from_f32(o1).to_bits();
            out[r * d + i + half] = half::bf16::from_f32(o2).to_bits();
        }
    }
    out
}

/// The attention kernels taking q, k, v as bf16 (turned beforehand) against the tensor-core
/// kernels turning the f32 tensors on load, Coppelius's options (every turn fused): forward
/// (o, lse) and the one-launch backward (delta, dq, dk, dv; dO copied as bf16 by the delta
/// kernel) bit for bit, at one context and a ragged T; with `opts.bench`, both timed at one and
/// 16 contexts.
pub fn attention_bf16_checks(gpu: &Gpu, arena: &DeviceArena, rng: &mut Rng, opts: &Options) -> Result<Vec<Row>> {
    use attention::Dims;
    let base = Dims { b: 1, h: 8, g: 8, t: 1024, d: 64, scale: 0.125, softcap: None };
    let mut cases = vec![(base, false), (Dims { b: 2, h: 3, g: 3, t: 200, ..base }, false)];
    if opts.bench {
        cases.push((base, true));
        cases.push((Dims { b: 16, ..base }, true));
    }
    let mut rows = vec![];
    for (dims, bench) in cases {
        arena.reset();
        let case = AttnCase { dims, q_scale: 4.0, load: [true, true], inverse: [true, true] };
        let d = &dims;
        let (nq, nk, nl) = (d.b * d.h * d.t * d.d, d.b * d.g * d.t * d.d, d.b * d.h * d.t);
        let [qh, kh, vh, doh] = attention_inputs(rng, &case);
        let table = rotary::table(d.t, d.d, 10000.0);
        let tab = upload_f32(arena, &table)?;
        let (v, dout) = (upload_f32(arena, &vh)?, upload_f32(arena, &doh)?);
        let run = AttnRun { gpu, case: &case, q: upload_f32(arena, &qh)?, k: upload_f32(arena, &kh)?, v, dout, tab };
        let upload_u16 = |x: &[u16]| -> Result<u64> {
            let b = arena.alloc_n::<u16>(x.len())?;
            arena.upload(b, x)?;
            Ok(b.ptr)
        };
        let qb = upload_u16(&rotated_bf16(&qh, &table, d.t, d.d))?;
        let kb = upload_u16(&rotated_bf16(&kh, &table, d.t, d.d))?;
        let vb = upload_u16(&vh.iter().map(|&x| half::bf16::from_f32(x).to_bits()).collect::<Vec<_>>())?;
        let bcase = AttnCase { load: [false, false], ..case };
        let bf = AttnRun { gpu, case: &bcase, q: qb, k: kb, v: vb, dout, tab };
        // Outputs: (o, lse, delta, dq, dk, dv), once per way.
        let sizes = [nq, nl, nl, nq, nk, nk];
        let bufs = |arena: &DeviceArena| -> Result<Vec<alpha_cuda::runtime::driver::Buf>> {
            sizes
                .iter()
                .map(|&n| {
                    let b = arena.alloc_n::<f32>(n)?;
                    arena.fill_u32(b, NAN_BITS)?;
                    Ok(b)
                })
                .collect()
        };
        let (mine, theirs) = (bufs(arena)?, bufs(arena)?);
        let fwd_f32 = gpu.load(&attention_mma::forward_kernel_rotating(d, [true, true]))?;
        let fwd_bf16 = gpu.load(&attention_mma::forward_kernel_bf16(d))?;
        let joint_f32 = run.joint_kernels()?;
        let joint_bf16 = [
            gpu.load(&attention_mma::backward_delta_kernel_bf16(d))?,
            gpu.load(&attention_mma::backward_kernel_bf16(d, [true, true]))?,
        ];
        // dO as bf16, written by the delta kernel for the passes.
        let do16 = arena.alloc_n::<u16>(nq)?.ptr;
        // The bf16 way: delta (and dO's copy), then both passes.
        let backward_bf16 = |o: u64, lse: u64, [delta, dq, dk, dv]: [u64; 4]| -> Result<()> {
            let r = &bf;
            let args = attention::delta_arguments([delta, o, r.dout], Some(do16));
            r.launch(&joint_bf16[0], d.grid_q(), attention_mma::block(), &args)?;
            let tensors = [dq, dk, dv, delta, r.q, r.k, r.v, o, lse, r.dout];
            let args = attention::backward_arguments(tensors, Some(do16), vec![r.tab, r.tab], vec![]);
            r.launch(&joint_bf16[1], d.grid_q(), attention_mma::block(), &args)
        };
        let forward = |r: &AttnRun, fwd: &Function, b: &[alpha_cuda::runtime::driver::Buf]| -> Result<()> {
            let a = attention::forward_arguments([b[0].ptr, b[1].ptr, r.q, r.k, r.v], r.tabs(), None);
            r.launch(fwd, d.grid_q(), attention_mma::block(), &a)
        };
        let outs = |b: &[alpha_cuda::runtime::driver::Buf]| [b[2].ptr, b[3].ptr, b[4].ptr, b[5].ptr];
        forward(&run, &fwd_f32, &theirs)?;
        run.backward_joint(&joint_f32, theirs[0].ptr, theirs[1].ptr, outs(&theirs))?;
        forward(&bf, &fwd_bf16, &mine)?;
        backward_bf16(mine[0].ptr, mine[1].ptr, outs(&mine))?;
        let mut differ = 0usize;
        for (a, b) in mine.iter().zip(&theirs) {
            let x: Vec<f32> = arena.download(*a, a.bytes / 4)?;
            let y: Vec<f32> = arena.download(*b, b.bytes / 4)?;
            differ += x.iter().zip(&y).filter(|(p, q)| p.to_bits() != q.to_bits()).count();
        }
        // The merged backwards: dq, dk, dv as one [B, T, 3, H, 64], bf16 or f32, against the
        // f32 gradients permuted (and rounded) on the host.
        let merging = |kernel: &alpha_cuda::ptx::Kernel, m: u64| -> Result<()> {
            let (r, f) = (&bf, gpu.load(kernel)?);
            let (o, lse, delta) = (mine[0].ptr, mine[1].ptr, mine[2].ptr);
            let args = attention::delta_arguments([delta, o, r.dout], Some(do16));
            r.launch(&joint_bf16[0], d.grid_q(), attention_mma::block(), &args)?;
            let tensors = [m, m, m, delta, r.q, r.k, r.v, o, lse, r.dout];
            let args = attention::backward_arguments(tensors, Some(do16), vec![r.tab, r.tab], vec![]);
            r.launch(&f, d.grid_q(), attention_mma::block(), &args)
        };
        let merged = arena.alloc_n::<u16>(3 * nq)?;
        let merged_f32 = arena.alloc_n::<f32>(3 * nq)?;
        for b in [merged, merged_f32] {
            arena.fill_u32(b, NAN_BITS)?;
        }
        merging(&attention_mma::backward_kernel_bf16_merged(d, [true, true]), merged.ptr)?;
        merging(&attention_mma::backward_kernel_bf16_merged_f32(d, [true, true]), merged_f32.ptr)?;
        let got: Vec<u16> = arena.download(merged, 3 * nq)?;
        let got_f32: Vec<f32> = arena.download(merged_f32, 3 * nq)?;
        let grads: Vec<Vec<f32>> = theirs[3..].iter().map(|b| arena.download(*b, nq)).collect::<Result<_>>()?;
        let (mut merged_differ, mut f32_differ) = (0usize, 0usize);
        for (sec, gr) in grads.iter().enumerate() {
            for (i, &x) in gr.iter().enumerate() {
                let at = merged_index(d, sec, i);
                merged_differ += usize::from(got[at] != half::bf16::from_f32(x).to_bits());
                f32_differ += usize::from(got_f32[at].to_bits() != x.to_bits());
            }
        }
        let shape = attn_shape(&case);
        rows.push(exact_row(
            "attention-bf16",
            "merged bf16 dq|dk|dv = f32 permuted, rounded",
            &shape,
            merged_differ,
            3 * nq,
        ));
        rows.push(exact_row("attention-bf16", "merged f32 dq|dk|dv = f32 permuted", &shape, f32_differ, 3 * nq));
        if alpha_cuda::kernels::attention::wgmma::applies(d) {
            let stats = [mine[0].ptr, mine[1].ptr, mine[2].ptr, do16];
            let grads = [mine[3], mine[4], mine[5]];
            rows.extend(wgmma_backward_checks(arena, &bf, &joint_bf16[1], stats, grads, &got, &shape, bench, opts)?);
        }
        // The forward storing o's permuted bf16 copy too: o and lse as before, the copy as o
        // permuted to [B, T, H, 64] and rounded on the host.
        let copying = gpu.load(&attention_mma::forward_kernel_bf16_copying(d))?;
        let (o2, lse2, o16) = (arena.alloc_n::<f32>(nq)?, arena.alloc_n::<f32>(nl)?, arena.alloc_n::<u16>(nq)?);
        for b in [o2, lse2] {
            arena.fill_u32(b, NAN_BITS)?;
        }
        arena.fill_u32(o16, NAN_BITS)?;
        bf.launch(&copying, d.grid_q(), attention_mma::block(), &[o2.ptr, lse2.ptr, bf.q, bf.k, bf.v, o16.ptr])?;
        let o_f32: Vec<f32> = arena.download(theirs[0], nq)?;
        let mut copy_differ = mismatches(&arena.download::<f32>(o2, nq)?, &o_f32)
            + mismatches(&arena.download::<f32>(lse2, nl)?, &arena.download::<f32>(theirs[1], nl)?);
        let got16: Vec<u16> = arena.download(o16, nq)?;
        let (h, t, dd) = (d.h, d.t, d.d);
        for (i, &x) in o_f32.iter().enumerate() {
            let (bh, rest) = (i / (t * dd), i % (t * dd));
            let (b, hh, tt, e) = (bh / h, bh % h, rest / dd, rest % dd);
            let at = ((b * t + tt) * h + hh) * dd + e;
            copy_differ += usize::from(got16[at] != half::bf16::from_f32(x).to_bits());
        }
        rows.push(exact_row(
            "attention-bf16",
            "fwd o, lse, o16 = f32, permuted, rounded",
            &shape,
            copy_differ,
            2 * nq + nl,
        ));
        if alpha_cuda::kernels::attention::wgmma::applies(d) {
            rows.push(wgmma_forward_check(arena, &bf, [o2, lse2, o16], &copying, &shape, bench, opts)?);
        }
        let mut rate = format!("{differ} outputs differ from the f32 kernels turning on load");
        let mut median_us = None;
        if bench {
            let fwd_flop = 2.0 * d.b as f64 * d.h as f64 * (d.t as f64).powi(2) * d.d as f64;
            let f0 = median(gpu.time(opts.warmup, opts.reps, || forward(&run, &fwd_f32, &theirs))?);
            let b0 = median(gpu.time(opts.warmup, opts.reps, || {
                run.backward_joint(&joint_f32, theirs[0].ptr, theirs[1].ptr, outs(&theirs))
            })?);
            let f1 = median(gpu.time(opts.warmup, opts.reps, || forward(&bf, &fwd_bf16, &mine))?);
            let b1 = median(gpu.time(opts.warmup, opts.reps, || backward_bf16(mine[0].ptr, mine[1].ptr, outs(&mine)))?);
            median_us = Some(f1 + b1);
            rate = format!(
                "fwd {f1:.1} us ({:.0} TFLOP/s) vs {f0:.1}; bwd {b1:.1} us ({:.0} TFLOP/s) vs {b0:.1}; {rate}",
                fwd_flop / (f1 * 1e-6) / 1e12,
                2.5 * fwd_flop / (b1 * 1e-6) / 1e12
            );
        }
        rows.push(Row {
            family: "attention-bf16".into(),
            name: "bf16 q/k/v vs f32 turned on load".into(),
            shape,
            max_abs: differ as f64,
            rel: differ as f64,
            tol: 0.0,
            pass: differ == 0,
            median_us,
            rate,
        });
    }
    Ok(rows)
}

/// The `wgmma` forward ([`alpha_cuda::kernels::attention::wgmma::forward_kernel`], copying form) against the
/// `mma.sync` one's outputs `[o, lse, o16]` on the same bf16 inputs: the same bits. With
/// `bench`, both timed.
pub(super) fn wgmma_forward_check(
    arena: &DeviceArena,
    bf: &AttnRun,
    [o, lse, o16]: [alpha_cuda::runtime::driver::Buf; 3],
    mma_copying: &Function,
    shape: &str,
    bench: bool,
    opts: &Options,
) -> Result<Row> {
    let d = &bf.case.dims;
    let (nq, nl) = (d.b * d.h * d.t * d.d, d.b * d.h * d.t);
    let kernel = bf.gpu.load(&alpha_cuda::kernels::attention::wgmma::forward_kernel(d, true))?;
    let (o2, lse2, o16b) = (arena.alloc_n::<f32>(nq)?, arena.alloc_n::<f32>(nl)?, arena.alloc_n::<u16>(nq)?);
    for b in [o2, lse2, o16b] {
        arena.fill_u32(b, NAN_BITS)?;
    }
    let run = |f: &Function, [a, b, c]: [u64; 3]| {
        bf.launch(f, d.grid_q(), attention_mma::block(), &[a, b, bf.q, bf.k, bf.v, c])
    };
    run(&kernel, [o2.ptr, lse2.ptr, o16b.ptr])?;
    let differ = mismatches(&arena.download::<f32>(o2, nq)?, &arena.download::<f32>(o, nq)?)
        + mismatches(&arena.download::<f32>(lse2, nl)?, &arena.download::<f32>(lse, nl)?)
        + arena
            .download::<u16>(o16b, nq)?
            .iter()
            .zip(arena.download::<u16>(o16, nq)?)
            .filter(|(a, b)| **a != *b)
            .count();
    let mut row = exact_row("attention-bf16", "wgmma fwd o, lse, o16 = mma.sync fwd", shape, differ, 2 * nq + nl);
    if bench {
        let fwd_flop = 2.0 * d.b as f64 * d.h as f64 * (d.t as f64).powi(2) * d.d as f64;
        let f0 = median(bf.gpu.time(opts.warmup, opts.reps, || run(mma_copying, [o.ptr, lse.ptr, o16.ptr]))?);
        let f1 = median(bf.gpu.time(opts.warmup, opts.reps, || run(&kernel, [o2.ptr, lse2.ptr, o16b.ptr]))?);
        row.median_us = Some(f1);
        row.rate = format!(
            "fwd {f1:.1} us ({:.0} TFLOP/s) vs mma.sync {f0:.1} us ({:.0}); {}",
            fwd_flop / (f1 * 1e-6) / 1e12,
            fwd_flop / (f0 * 1e-6) / 1e12,
            row.rate
        );
    }
    Ok(row)
}

/// Where element `i` of gradient `section` (0 dq, 1 dk, 2 dv; `[B, H, T, D]`) lies in the merged
/// `[B, T, 3, H, D]` tensor.
fn merged_index(d: &attention::Dims, section: usize, i: usize) -> usize {
    let (h, t, dd) = (d.h, d.t, d.d);
    let (bh, rest) = (i / (t * dd), i % (t * dd));
    let (b, hh, tt, e) = (bh / h, bh % h, rest / dd, rest % dd);
    (((b * t + tt) * 3 + section) * h + hh) * dd + e
}

/// The `wgmma` backward ([`alpha_cuda::kernels::attention::wgmma::backward_kernel`]) against the `mma.sync`
/// joint kernel's outputs on the same o, lse, delta and dO copy (`[o, lse, delta, do16]`): dq,
/// dk and dv (f32, `grads`) and the merged bf16 gradient (`merged`) the same bits, and its merged
/// f32 gradient the f32 ones permuted. With `bench`, both kernels timed (delta not included).
#[allow(clippy::too_many_arguments)]
pub(super) fn wgmma_backward_checks(
    arena: &DeviceArena,
    bf: &AttnRun,
    mma_joint: &Function,
    [o, lse, delta, do16]: [u64; 4],
    grads: [alpha_cuda::runtime::driver::Buf; 3],
    merged: &[u16],
    shape: &str,
    bench: bool,
    opts: &Options,
) -> Result<Vec<Row>> {
    let d = &bf.case.dims;
    let nq = d.b * d.h * d.t * d.d;
    use alpha_cuda::kernels::attention::{mma::Gradients, wgmma};
    let plain = bf.gpu.load(&wgmma::backward_kernel(d, [true, true], Gradients::Apart))?;
    let mine: Vec<alpha_cuda::runtime::driver::Buf> =
        (0..3).map(|_| arena.alloc_n::<f32>(nq)).collect::<Result<_>>()?;
    for b in &mine {
        arena.fill_u32(*b, NAN_BITS)?;
    }
    let run = |f: &Function, [dq, dk, dv]: [u64; 3]| {
        let args = [dq, dk, dv, delta, bf.q, bf.k, bf.v, o, lse, bf.dout, do16, bf.tab, bf.tab];
        bf.launch(f, d.grid_q(), attention_mma::block(), &args)
    };
    run(&plain, [mine[0].ptr, mine[1].ptr, mine[2].ptr])?;
    let mut differ = 0;
    for (a, b) in mine.iter().zip(&grads) {
        differ += mismatches(&arena.download::<f32>(*a, nq)?, &arena.download::<f32>(*b, nq)?);
    }
    let mut row = exact_row("attention-bf16", "wgmma bwd dq, dk, dv = mma.sync joint", shape, differ, 3 * nq);
    if bench {
        let flop = 2.5 * 2.0 * d.b as f64 * d.h as f64 * (d.t as f64).powi(2) * d.d as f64;
        let theirs = [grads[0].ptr, grads[1].ptr, grads[2].ptr];
        let b0 = median(bf.gpu.time(opts.warmup, opts.reps, || run(mma_joint, theirs))?);
        let b1 = median(bf.gpu.time(opts.warmup, opts.reps, || run(&plain, [mine[0].ptr, mine[1].ptr, mine[2].ptr]))?);
        row.median_us = Some(b1);
        row.rate = format!(
            "bwd {b1:.1} us ({:.0} TFLOP/s) vs mma.sync {b0:.1} us ({:.0})",
            flop / (b1 * 1e-6) / 1e12,
            flop / (b0 * 1e-6) / 1e12
        );
    }
    let merged_kernel = bf.gpu.load(&wgmma::backward_kernel(d, [true, true], Gradients::MergedBf16))?;
    let out = arena.alloc_n::<u16>(3 * nq)?;
    arena.fill_u32(out, NAN_BITS)?;
    run(&merged_kernel, [out.ptr; 3])?;
    let got: Vec<u16> = arena.download(out, 3 * nq)?;
    let merged_differ = got.iter().zip(merged).filter(|(a, b)| a != b).count();
    let merged_row = exact_row("attention-bf16", "wgmma bwd merged = mma.sync merged", shape, merged_differ, 3 * nq);
    // Merged f32: the plain kernel's gradients, permuted.
    let f32_kernel = bf.gpu.load(&wgmma::backward_kernel(d, [true, true], Gradients::MergedF32))?;
    let out = arena.alloc_n::<f32>(3 * nq)?;
    arena.fill_u32(out, NAN_BITS)?;
    run(&f32_kernel, [out.ptr; 3])?;
    let got: Vec<f32> = arena.download(out, 3 * nq)?;
    let mut f32_differ = 0usize;
    for (sec, b) in mine.iter().enumerate() {
        for (i, x) in arena.download::<f32>(*b, nq)?.into_iter().enumerate() {
            f32_differ += usize::from(got[merged_index(d, sec, i)].to_bits() != x.to_bits());
        }
    }
    let f32_row =
        exact_row("attention-bf16", "wgmma bwd merged f32 = its dq, dk, dv permuted", shape, f32_differ, 3 * nq);
    let mut rows = vec![row, merged_row, f32_row];
    // Merged bf16 with each warp's column sums: the bf16 tensor the merged kernel's, and the
    // partials, added on the host, the f64 column sums of the merged f32 tensor (rows of
    // sixteen: T a multiple of 16).
    if d.t.is_multiple_of(16) {
        let summed = bf.gpu.load(&wgmma::backward_kernel(d, [true, true], Gradients::MergedBf16Summed))?;
        let (cols, chunks) = (3 * d.h * d.d, d.b * d.t / 16);
        let out = arena.alloc_n::<u16>(3 * nq)?;
        let sums = arena.alloc_n::<f32>(cols * chunks)?;
        arena.fill_u32(out, NAN_BITS)?;
        arena.fill_u32(sums, NAN_BITS)?;
        let args =
            [out.ptr, out.ptr, out.ptr, delta, bf.q, bf.k, bf.v, o, lse, bf.dout, do16, bf.tab, bf.tab, sums.ptr];
        bf.launch(&summed, d.grid_q(), attention_mma::block(), &args)?;
        let got16: Vec<u16> = arena.download(out, 3 * nq)?;
        let bf16_differ = got16.iter().zip(merged).filter(|(a, b)| a != b).count();
        rows.push(exact_row("attention-bf16", "wgmma bwd merged sums: bf16 = merged", shape, bf16_differ, 3 * nq));
        let partials: Vec<f32> = arena.download(sums, cols * chunks)?;
        let want: Vec<f32> =
            (0..cols).map(|c| (0..d.b * d.t).map(|r| got[r * cols + c] as f64).sum::<f64>() as f32).collect();
        // A chunk's partials a row.
        let have: Vec<f32> =
            (0..cols).map(|c| (0..chunks).map(|k| partials[k * cols + c] as f64).sum::<f64>() as f32).collect();
        let (max_abs, rel) = compare(&have, &want);
        rows.push(Row {
            family: "attention-bf16".into(),
            name: "wgmma bwd merged sums: column sums = f32 tensor's".into(),
            shape: shape.to_string(),
            max_abs,
            rel,
            tol: 1e-5,
            pass: rel <= 1e-5,
            median_us: None,
            rate: format!("{chunks} partials a column"),
        });
    }
    Ok(rows)
}
