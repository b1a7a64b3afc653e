use super::*;
use alpha_ir::{Graph, Init, Program};
use std::collections::BTreeMap;

/// Lowers `g` as a one-phase forward program whose output "s" is `s`.
fn lower_forward(g: Graph, s: Value) -> Lowered {
    lower_forward_with(g, s, CudaConfig { fold_casts_into_gemms: false, ..CudaConfig::default() })
}

/// [`lower_forward`] folding casts into the GEMMs' loads.
fn lower_forward_folding(g: Graph, s: Value) -> Lowered {
    lower_forward_with(g, s, CudaConfig { fold_casts_into_gemms: true, ..CudaConfig::default() })
}

fn lower_forward_with(g: Graph, s: Value, config: CudaConfig) -> Lowered {
    let mut outs = BTreeMap::new();
    outs.insert("s".to_string(), s);
    lower_program(&Program::single(g.finish().unwrap(), "forward", outs), &config).unwrap()
}

/// x [64, 64] · w [64, n], both cast to bf16 first: (graph, [x, w, x16, w16, product]).
fn product_of_casts(n: usize) -> (Graph, [Value; 5]) {
    let mut g = Graph::new("t");
    let x = g.param("x", &[64, 64], Init::Zeros);
    let w = g.param("w", &[64, n], Init::Zeros);
    let x16 = g.cast(x, DType::BF16);
    let w16 = g.cast(w, DType::BF16);
    let y = g.matmul(x16, w16);
    (g, [x, w, x16, w16, y])
}

/// The kernel of each of phase 0's launches, in order.
fn launch_names(l: &Lowered) -> Vec<&str> {
    l.phases[0].iter().map(|x| l.kernels[x.kernel].name.as_str()).collect()
}

#[test]
fn a_small_program_lowers_with_shared_kernels_and_constants() {
    let mut g = Graph::new("t");
    let x = g.param("x", &[4, 8], Init::Zeros);
    let w = g.param("w", &[8, 4], Init::Zeros);
    let b = g.param("b", &[4], Init::Zeros);
    let x16 = g.cast(x, DType::BF16);
    let w16 = g.cast(w, DType::BF16);
    let y = g.matmul(x16, w16);
    let y = g.add(y, b);
    let two = g.constant(2.0, &[], DType::F32);
    let y = g.mul(y, two);
    let s = g.sum_all(y);
    let l = lower_forward(g, s);
    // The two casts (32 elements each) share one kernel, four elements a thread; K = 8 is
    // outside the tiled GEMM's contract → simple GEMM; the bias add (a row of 4 repeated over
    // the rows) and the multiply by a scalar run as one chain, which sums its result itself.
    let names = launch_names(&l);
    assert_eq!(names, ["pw_cast_f32_bf16_v4", "pw_cast_f32_bf16_v4", "gemm_simple", "ew_add_mul_s2_r1x4_red1"]);
    assert_eq!(l.phases[0][0].kernel, l.phases[0][1].kernel);
    assert_eq!(l.inits.len(), 1);
    assert_eq!(l.inits[0].1, 2.0f32.to_le_bytes());
    assert!(l.arena >= l.plan.arena);
    for launch in &l.phases[0] {
        for a in &launch.args {
            if let LArg::Ptr(o) = a {
                assert!(*o < l.arena);
            }
        }
    }
}

#[test]
fn casts_fold_into_gemm_loads_and_the_residual_add_into_its_epilogue() {
    let (mut g, [x, w, _, _, y]) = product_of_casts(64);
    let r = g.add(x, y);
    let s = g.sum_all(r);
    let l = lower_forward_folding(g, s);
    let names = launch_names(&l);
    assert_eq!(names, ["gemm_rr_f32_add_64x64_wg", "reduce_sum"]);
    // A = x's and B = w's f32 slots, C = the Add's slot, R = x.
    let args = &l.phases[0][0].args;
    let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
    assert_eq!(args[..4], [slot(x), slot(w), slot(r), slot(x)]);
}

/// By default the casts are launched and the product reads bf16 on the TMA engine: its
/// last two arguments point at tensor maps over the casts' slots, encoded at load.
#[test]
fn by_default_casts_launch_and_the_product_reads_bf16_through_tensor_maps() {
    let (mut g, [_, _, x16, w16, y]) = product_of_casts(64);
    let s = g.sum_all(y);
    let l = lower_forward(g, s);
    let names = launch_names(&l);
    assert_eq!(names, ["pw_cast_f32_bf16_v4", "pw_cast_f32_bf16_v4", "gemm_rr_bf16_store_64x64_tma", "reduce_sum"]);
    let args = &l.phases[0][2].args;
    let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
    assert_eq!(args[..2], [slot(x16), slot(w16)]);
    let maps: Vec<_> = args[args.len() - 2..].to_vec();
    let over: Vec<_> = l.tensor_maps.iter().map(|&(at, operand, _)| (LArg::Ptr(at), LArg::Ptr(operand))).collect();
    assert_eq!(over, [(maps[0], slot(x16)), (maps[1], slot(w16))]);
    for &(at, _, m) in &l.tensor_maps {
        assert!(at % 64 == 0 && at >= l.plan.arena && at + 128 <= l.arena);
        assert_eq!((m.box_inner, m.stride_bytes), (64, 128));
    }
}

/// A product batched over independent matrices (Muon's stacks: `X·Xᵀ` of each of four) runs on
/// the `cp.async` ring, which steps every operand by its batch stride, as one launch over the
/// batch; the TMA engine's maps would read the entries as K-slices of one product.
#[test]
fn a_batch_of_independent_products_runs_on_the_cp_async_ring() {
    let mut g = Graph::new("t");
    let x = g.param("x", &[4, 64, 128], Init::Zeros);
    let x16 = g.cast(x, DType::BF16);
    let a = g.matmul_t(x16, x16, false, true);
    let s = g.sum_all(a);
    let l = lower_forward(g, s);
    assert_eq!(
        launch_names(&l),
        ["pw_cast_f32_bf16_v4", "gemm_rc_bf16_store_64x64_wg", "reduce_sum", "reduce_sum_finish"]
    );
    let args = &l.phases[0][1].args;
    let batch_strides = &args[gemm::SHAPE_ARGS - 3..gemm::SHAPE_ARGS];
    assert_eq!(batch_strides, [LArg::U64(64 * 128), LArg::U64(64 * 128), LArg::U64(64 * 64)]);
    assert_eq!(l.phases[0][1].grid.2, 4);
    assert!(l.tensor_maps.is_empty());
}

/// Elementwise ops with a broadcast scalar (a momentum step: `b·μ + g·s`, then `g·s + b'·μ`)
/// run as one chain that loads each scalar once a thread, not as a launch an op.
#[test]
fn elementwise_ops_with_broadcast_scalars_run_as_one_chain() {
    let mut g = Graph::new("t");
    let grad = g.param("grad", &[64, 64], Init::Zeros);
    let buf = g.param("buf", &[64, 64], Init::Zeros);
    let mu = g.host_scalar("mu", DType::F32);
    let scale = g.host_scalar("scale", DType::F32);
    let gr = g.mul(grad, scale);
    let kept = g.mul(buf, mu);
    let buf2 = g.add(kept, gr);
    let ahead = g.mul(buf2, mu);
    let u = g.add(gr, ahead);
    let s = g.sum_all(u);
    let l = lower_forward(g, s);
    // (Summed in the chain's own launch: `Lowerer::chain_reduction`.)
    assert_eq!(launch_names(&l), ["ew_mul_mul_add_mul_add_s13_red4"]);
    let text = l.kernels[l.phases[0][0].kernel].render();
    // Two scalar loads before the loop, two element loads in it.
    assert_eq!(text.matches("ld.global.f32").count(), 4, "{text}");
}

/// A linear layer's bias (a row repeated over the tokens) joins the GELU after it in one chain,
/// read at each element's column; the bias add and a residual add likewise.
#[test]
fn a_bias_add_joins_the_activation_or_residual_after_it() {
    let mut g = Graph::new("t");
    let y = g.param("y", &[64, 96], Init::Zeros);
    let x = g.param("x", &[64, 96], Init::Zeros);
    let b = g.param("b", &[96], Init::Zeros);
    let h = g.add(y, b);
    let a = g.gelu(h);
    let r = g.add(x, a);
    let s = g.sum_all(r);
    let l = lower_forward(g, s);
    let names = launch_names(&l);
    assert_eq!(names, ["ew_add_gelu_add_r1x96_red2"], "summed in the chain's launch: {names:?}");
    let text = l.kernels[l.phases[0][0].kernel].render();
    // The bias at the element's column: i mod 96.
    assert!(text.contains("rem.u32") && text.contains(", 96;"), "{text}");
}

/// A chain input that is a unary function of another input is recomputed as step 0: the
/// inputs lose it, every step and output moves up one, and its readers read step 0.
#[test]
fn a_unary_of_an_input_is_recomputed_not_read() {
    use crate::kernels::fused::{Src, Step};
    use alpha_ir::{Binary, Unary};
    let mut g = Graph::new("t");
    let gate = g.param("gate", &[4, 8], Init::Zeros);
    let dh = g.param("dh", &[4, 8], Init::Zeros);
    let act = g.gelu(gate);
    let g = g.finish().unwrap();
    // Inputs (dh, act, gate): dh·act, gelu'(gate), their product; outputs steps 0 and 2.
    let steps = vec![
        Step::Binary(Binary::Mul, Src::Input(0), Src::Input(1)),
        Step::Unary(Unary::GeluGrad, Src::Input(2)),
        Step::Binary(Binary::Mul, Src::Step(0), Src::Step(1)),
    ];
    let (inputs, steps, outputs) = recompute_unary_inputs(&g, vec![dh, act, gate], steps, vec![0, 2]);
    assert_eq!(inputs, vec![dh, gate]);
    assert_eq!(
        steps,
        vec![
            Step::Unary(Unary::Gelu, Src::Input(1)),
            Step::Binary(Binary::Mul, Src::Input(0), Src::Step(0)),
            Step::Unary(Unary::GeluGrad, Src::Input(1)),
            Step::Binary(Binary::Mul, Src::Step(1), Src::Step(2)),
        ]
    );
    assert_eq!(outputs, vec![1, 3]);
}

/// Instruction mnemonics of a rendered kernel (guards, registers and labels dropped).
fn mnemonics(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//") && !l.starts_with('.') && !l.ends_with(':'))
        .filter(|l| !l.starts_with('{') && !l.starts_with('}') && !l.starts_with(')') && !l.starts_with('('))
        .map(|l| {
            let l = if l.starts_with('@') { l.split_once(' ').map_or(l, |x| x.1) } else { l };
            l.split_whitespace().next().unwrap_or("").trim_end_matches(';').to_string()
        })
        .collect()
}

fn contains_run(hay: &[String], needle: &[String]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn gelu_of_a_product_becomes_the_gemm_epilogue_with_the_pointwise_instructions() {
    let (mut g, [x, w, _, _, y]) = product_of_casts(96);
    let a = g.gelu(y);
    // The pre-activation has another reader (as GeluGrad would), so it is still stored. (The
    // product the program's output: a sum right after the multiply would run in a chain that
    // recomputes the GELU instead, `Lowerer::chain_reduction`.)
    let h = g.mul(a, y);
    let l = lower_forward_folding(g, h);
    let names = launch_names(&l);
    assert_eq!(names, ["gemm_rr_f32_store_gelu_64x64_wg", "pw_mul_v4"]);
    let args = &l.phases[0][0].args;
    let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
    // A, B = the f32 sources, C = R = the product, then (after the strides) u = gelu's slot.
    assert_eq!(args[..4], [slot(x), slot(w), slot(y), slot(y)]);
    assert_eq!(args.len(), 14);
    assert_eq!(args[13], slot(a));
    assert_eq!(l.kernels[l.phases[0][0].kernel].params.last().unwrap().name, "u");
    // The same GELU instruction sequence as the pointwise kernel's.
    let mut k = Kernel::new("probe");
    let r = k.reg(crate::ptx::RegKind::F32);
    crate::kernels::pointwise::emit_unary(&mut k, alpha_ir::Unary::Gelu, r);
    let body = mnemonics(&k.render());
    let body: Vec<String> = body.into_iter().filter(|m| m != "ret" && !m.starts_with("griddepcontrol")).collect();
    assert!(body.len() > 10, "{body:?}");
    let gemm = mnemonics(&l.kernels[l.phases[0][0].kernel].render());
    let pw = Pointwise {
        shape: vec![8],
        out: Operand::contiguous(DType::F32, &[8]),
        ins: vec![Operand::contiguous(DType::F32, &[8])],
        body: Body::Unary(alpha_ir::Unary::Gelu),
    };
    let pw = mnemonics(&pw.kernel().unwrap().render());
    assert!(contains_run(&pw, &body) && contains_run(&gemm, &body));
    // A 64×64 tile on one warpgroup: 64 · 64 / 128 = 32 accumulators per thread.
    assert_eq!(gemm.iter().filter(|m| *m == "ex2.approx.f32").count(), 32, "one GELU per accumulator");
}

/// `h = relu(y)·y` of the product `y = bf16(Σ x) · bf16(w)`, summed: (graph, [y0 = Σ x,
/// relu(y), h, the sum]).
fn relu_times_product() -> (Graph, [Value; 4]) {
    relu_times_product_ordered(false)
}

/// [`relu_times_product`] with the multiply's operands `(a, y)`, or `(y, a)` when `product_first`:
/// the plan then puts h exactly on the first of them (both die there), on the product's slot
/// rather than on relu's (which the plan put on y0, the product's operand).
fn relu_times_product_ordered(product_first: bool) -> (Graph, [Value; 4]) {
    let mut g = Graph::new("t");
    let x = g.param("x", &[64, 64, 2], Init::Zeros);
    let w = g.param("w", &[64, 64], Init::Zeros);
    let y0 = g.sum(x, &[2], false);
    let y16 = g.cast(y0, DType::BF16);
    let w16 = g.cast(w, DType::BF16);
    let y = g.matmul(y16, w16);
    let a = g.relu(y);
    let h = if product_first { g.mul(y, a) } else { g.mul(a, y) };
    let s = g.sum_all(h);
    (g, [y0, a, h, s])
}

#[test]
fn a_unary_whose_slot_the_plan_gives_an_operand_is_not_fused() {
    // y0 (a reduction: it cannot store bf16 itself) dies when the GEMM (reading it as its
    // f32 A) is done, so the plan puts relu's output exactly on it: writing relu from the
    // GEMM's epilogue would clobber A for the blocks still reading it. The Unary stays a
    // launch.
    let (g, [y0, a, _, s]) = relu_times_product();
    let l = lower_forward_folding(g, s);
    let names = launch_names(&l);
    assert_eq!(l.plan.slot(a).offset, l.plan.slot(y0).offset, "the premise: relu's slot is y0's");
    assert_eq!(names, ["reduce_sum_warps", "gemm_rr_f32_store_64x64_wg", "ew_relu_mul_red1"]);
}

/// A gated unit over a deep grid (16,384 rows), its gate read again at the end (`gate_late`,
/// as its backward reads it) and its GELU by a sum too where `extra_reader`.
fn gated_unit(gate_late: bool, extra_reader: bool) -> Vec<String> {
    let mut g = Graph::new("t");
    let x = g.param("x", &[16384, 512], Init::Zeros);
    let [wg, wu] = ["wg", "wu"].map(|n| g.param(n, &[512, 1408], Init::Zeros));
    let wd = g.param("wd", &[1408, 512], Init::Zeros);
    let [x16, wg16, wu16, wd16] = [x, wg, wu, wd].map(|v| g.cast(v, DType::BF16));
    let gate = g.matmul(x16, wg16);
    let act = g.gelu(gate);
    let up = g.matmul(x16, wu16);
    let h = g.mul(act, up);
    let h16 = g.cast(h, DType::BF16);
    let y = g.matmul(h16, wd16);
    let mut s = g.sum_all(y);
    for (read, v) in [(gate_late, gate), (extra_reader, act)] {
        if read {
            let t = g.sum_all(v);
            s = g.add(s, t);
        }
    }
    let l = lower_forward_with(g, s, CudaConfig::default());
    launch_names(&l).into_iter().map(String::from).collect()
}

/// The gate and up products' kernels in [`gated_unit`]'s lowering.
fn gate_and_up(gate_late: bool, extra_reader: bool) -> (String, String) {
    let names = gated_unit(gate_late, extra_reader);
    assert!(!names.iter().any(|n| n.contains("pw_gelu") || n.contains("pw_mul")), "{names:?}");
    let mut gemms = names.into_iter().filter(|n| n.starts_with("gemm_"));
    (gemms.next().unwrap(), gemms.next().unwrap())
}

#[test]
fn an_activation_nothing_reads_is_not_stored() {
    // The StoreMul computes gelu(gate) from the gate product, so its GELU output is unread,
    // the gate product is a plain store, and the two run as one gated launch.
    let (gated, down) = gate_and_up(true, false);
    assert_eq!(
        (gated.as_str(), down.as_str()),
        ("gemm_rr_bf16_storemul_gelu_tma_s3_gated", "gemm_rr_bf16_store_tma_s3_rows")
    );
    // Read by a sum too: the gate product stores it (so it is no plain gate to merge), and the
    // StoreMul still computes its own.
    let (gate, up) = gate_and_up(true, true);
    assert_eq!((gate.as_str(), up.as_str()), ("gemm_rr_bf16_store_gelu_tma_s3", "gemm_rr_bf16_storemul_gelu_tma_s3"));
    // A forward alone: the gate's slot may be reused before the up product, so the StoreMul
    // reads the stored GELU output.
    let (gate, up) = gate_and_up(false, false);
    assert_eq!((gate.as_str(), up.as_str()), ("gemm_rr_bf16_store_gelu_tma_s3", "gemm_rr_bf16_storemul_tma_s3"));
}

/// Two LayerNorm backwards over 16,384 rows; the first's gain gradient feeds the second's
/// dy, so it is read before the last of them: its pass 2 runs at once, and only the second's
/// waits for the launch that folds the deferred ones.
#[test]
fn a_fold_read_before_the_last_layernorm_backward_runs_at_once() {
    let mut g = Graph::new("t");
    let (rows, c) = (16384, 512);
    let backward = |g: &mut Graph, name: &str, dy: Option<Value>| {
        let x = g.param(&format!("{name}.x"), &[rows, c], Init::Zeros);
        let gain = g.param(&format!("{name}.gain"), &[c], Init::Zeros);
        let bias = g.param(&format!("{name}.bias"), &[c], Init::Zeros);
        let y = g.layer_norm(x, gain, bias, 1e-5);
        let (mean, rstd) = (Value { node: y.node, index: 1 }, Value { node: y.node, index: 2 });
        let dy = dy.unwrap_or_else(|| g.param(&format!("{name}.dy"), &[rows, c], Init::Zeros));
        g.push(Op::LayerNormBackward, &[x, gain, mean, rstd, dy])
    };
    let first = backward(&mut g, "a", None);
    let dy2 = g.add(first[0], first[1]);
    let second = backward(&mut g, "b", Some(dy2));
    let mut s = g.sum_all(second[0]);
    for v in [first[2], second[1], second[2]] {
        let t = g.sum_all(v);
        s = g.add(s, t);
    }
    let l = lower_forward_with(g, s, CudaConfig::default());
    let names = launch_names(&l);
    let at = |name: &str| names.iter().position(|n| *n == name);
    let (partials, finish, multi) = (
        names.iter().filter(|n| n.starts_with("layernorm_bwd_dx") && n.contains("_partials")).count(),
        at("layernorm_bwd_params_finish"),
        at("layernorm_bwd_params_finish_multi"),
    );
    assert_eq!(partials, 2, "{names:?}");
    let (finish, multi) = (finish.expect("the first's own fold"), multi.expect("the second's, deferred"));
    let second_rows = names.iter().rposition(|n| n.starts_with("layernorm_bwd_dx")).unwrap();
    assert!(finish < second_rows && second_rows < multi, "{names:?}");
    let fold = &l.phases[0][multi];
    assert_eq!(fold.grid.0, 2 * 512 / 32, "one LayerNorm's fold blocks");
}

/// An RMSNorm and its backward over 48 rows: the gain's two passes run (pass 1 into scratch,
/// the fold from there into the gain gradient's slot) only where the gain's gradient is read,
/// before the input gradient; rows of 64 take the warp-a-row kernels, rows of 512 the block's.
#[test]
fn an_rmsnorm_runs_its_gain_passes_only_where_the_gains_gradient_is_read() {
    for (c, read) in [(64usize, true), (64, false), (512, true)] {
        let mut g = Graph::new("t");
        let x = g.param("x", &[48, c], Init::Zeros);
        let gain = g.param("gain", &[c], Init::Ones);
        let y = g.rms_norm(x, gain, 1e-6);
        let rstd = Value { node: y.node, index: 1 };
        let dy = g.param("dy", &[48, c], Init::Zeros);
        let back = g.push(Op::RmsNormBackward, &[x, gain, rstd, dy]);
        let mut s = g.sum_all(back[0]);
        for v in [y].into_iter().chain(read.then_some(back[1])) {
            let t = g.sum_all(v);
            s = g.add(s, t);
        }
        let l = lower_forward_with(g, s, CudaConfig::default());
        let launches: Vec<(&str, &Launch)> = l.phases[0]
            .iter()
            .map(|x| (l.kernels[x.kernel].name.as_str(), x))
            .filter(|(n, _)| n.starts_with("rmsnorm"))
            .collect();
        let names: Vec<&str> = launches.iter().map(|x| x.0).collect();
        let w = if c == 64 { "_warp" } else { "" };
        let (fwd, dx) = (format!("rmsnorm_fwd{w}"), format!("rmsnorm_bwd_dx{w}"));
        let want: Vec<&str> = match read {
            true => vec![&fwd, "rmsnorm_bwd_params", "rmsnorm_bwd_params_finish", &dx],
            false => vec![&fwd, &dx],
        };
        assert_eq!(names, want, "c {c}");
        if read {
            let (p1, p2) = (launches[1].1, launches[2].1);
            let LArg::Ptr(partials) = p1.args[0] else { panic!("pass 1 writes a pointer") };
            assert!(partials >= l.plan.arena, "the partials lie in the scratch region");
            assert_eq!(p2.args, [LArg::Ptr(l.plan.slot(back[1]).offset), p1.args[0]]);
        }
        let dx_launch = launches.last().unwrap().1;
        assert_eq!(dx_launch.args[0], LArg::Ptr(l.plan.slot(back[0]).offset));
        assert_eq!(dx_launch.grid.0 as usize, if c == 64 { 12 } else { 48 }, "four rows a block, or one");
    }
}

/// With chain epilogues on, the chain y·relu(y), which alone reads y, runs in the product's
/// epilogue: y is never stored, only h, whose slot is clear of the GEMM's A.
#[test]
fn a_chain_read_alone_runs_in_the_products_epilogue() {
    let (g, [y0, _, h, s]) = relu_times_product_ordered(true);
    let config = CudaConfig {
        fold_casts_into_gemms: true,
        chain_epilogues: ChainEpilogues::Everywhere,
        ..CudaConfig::default()
    };
    let l = lower_forward_with(g, s, config);
    let names = launch_names(&l);
    assert_eq!(names, ["reduce_sum_warps", "gemm_rr_f32_store_64x64_then_relui0_muli0s0_out1f_p0_wg", "reduce_sum"]);
    let (hs, ys) = (l.plan.slot(h), l.plan.slot(y0));
    assert!(hs.offset + hs.len <= ys.offset || ys.offset + ys.len <= hs.offset, "h clear of y0");
    // The product's pointers, then h's.
    let gemm = &l.phases[0][1];
    assert_eq!(gemm.args[13], LArg::Ptr(hs.offset));
    assert_eq!(l.kernels[gemm.kernel].params[13].name, "chain_out0");
}

/// A product's operand that only a cast reads is stored as bf16 by its producer, straight
/// into the cast's slot: the GEMM reads bf16 there, the f32 value is never written, and
/// the cast is no launch.
#[test]
fn a_cast_read_alone_is_stored_by_its_producer() {
    let mut g = Graph::new("t");
    let x = g.param("x", &[64, 64], Init::Zeros);
    let w = g.param("w", &[64, 64], Init::Zeros);
    let y0 = g.mul(x, x);
    let y16 = g.cast(y0, DType::BF16);
    let w16 = g.cast(w, DType::BF16);
    let y = g.matmul(y16, w16);
    let s = g.sum_all(y);
    let l = lower_forward_folding(g, s);
    let names = launch_names(&l);
    assert_eq!(names, ["pw_mul_v4", "gemm_rr_bf16f32_store_64x64_wg", "reduce_sum"]);
    let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
    // The multiply writes the cast's slot; the GEMM reads it and w's f32 slot.
    assert_eq!(l.phases[0][0].args[0], slot(y16));
    assert_eq!(l.phases[0][1].args[..2], [slot(y16), slot(w)]);
    let text = l.kernels[l.phases[0][0].kernel].render();
    assert!(text.contains("cvt.rn.bf16x2.f32") && text.contains("st.global.v2.b32"));
}

/// q, k, v [1, 2, 64, 8]; the backward's dq and dk each turned back by an inverse Rotary.
fn attention_backward_program(dq_also_output: bool, keep_lse: bool) -> (Program, [Value; 5]) {
    let mut g = Graph::new("t");
    let sh = [1, 2, 64, 8];
    let q = g.param("q", &sh, Init::Zeros);
    let k = g.param("k", &sh, Init::Zeros);
    let v = g.param("v", &sh, Init::Zeros);
    let dout = g.param("do", &sh, Init::Zeros);
    let fwd = g.push(Op::Attention { scale: 0.25, softcap: None, bf16: false }, &[q, k, v]);
    let b = g.push(Op::AttentionBackward { scale: 0.25, softcap: None, bf16: false }, &[q, k, v, fwd[0], fwd[1], dout]);
    let rq = g.push(Op::Rotary { base: 10000.0, inverse: true }, &[b[0]])[0];
    let rk = g.push(Op::Rotary { base: 10000.0, inverse: true }, &[b[1]])[0];
    let mut outs = BTreeMap::new();
    outs.insert("dq".to_string(), rq);
    outs.insert("dk".to_string(), rk);
    outs.insert("dv".to_string(), b[2]);
    if dq_also_output {
        outs.insert("dq_raw".to_string(), b[0]);
    }
    if keep_lse {
        outs.insert("lse".to_string(), fwd[1]);
    }
    (Program::single(g.finish().unwrap(), "backward", outs), [rq, rk, b[2], b[0], b[1]])
}

#[test]
fn inverse_rotaries_of_dq_and_dk_fold_into_the_attention_backward_stores() {
    // lse kept alive (an output), so the plan puts neither turned-back gradient on it.
    let (p, [rq, rk, dv, _, _]) = attention_backward_program(false, true);
    let l = lower_program(&p, &CudaConfig::default()).unwrap();
    let names = launch_names(&l);
    assert_eq!(names, ["attention_fwd", "attention_bwd_dq_rotary", "attention_bwd_dkv_rotary"]);
    let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
    let (dq, dkv) = (&l.phases[0][1].args, &l.phases[0][2].args);
    assert_eq!(dq.len(), 9);
    assert_eq!(dkv.len(), 9);
    assert_eq!(dq[0], slot(rq), "dq goes straight to the inverse Rotary's slot");
    assert_eq!((dkv[0], dkv[1]), (slot(rk), slot(dv)));
    // Both read the host-computed table, the one the rotary kernel would read.
    assert_eq!(dq[8], dkv[8]);
    let LArg::Ptr(tab) = dq[8] else { panic!("table pointer") };
    assert!(tab >= l.plan.arena);
    let want: Vec<u8> = rotary::table(64, 8, 10000.0).iter().flat_map(|x| x.to_le_bytes()).collect();
    assert!(l.inits.iter().any(|(o, b)| *o == tab && *b == want));
    // The rotation is the rotary kernel's instruction sequence (inverse: the sine negated).
    let pair: Vec<String> =
        ["neg.f32", "mul.rn.f32", "mul.rn.f32", "sub.rn.f32", "mul.rn.f32", "mul.rn.f32", "add.rn.f32"]
            .map(String::from)
            .to_vec();
    assert!(contains_run(&mnemonics(&rotary::kernel(128, 64, 8, true).render()), &pair[1..]));
    for launch in &l.phases[0][1..] {
        let m = mnemonics(&l.kernels[launch.kernel].render());
        assert!(contains_run(&m, &pair));
        assert_eq!(m.iter().filter(|x| *x == "neg.f32").count(), 4, "one per pair of the row");
    }
}

#[test]
fn a_turned_back_gradient_planned_over_lse_keeps_its_rotary_and_one_exactly_on_o_fuses() {
    // Without lse as an output the plan puts dk's inverse Rotary on lse and dq (both dead
    // after the backward): writing it from the dK/dV kernel would clobber lse while it is
    // read. dq's lies exactly on o, which only the dQ kernel's own thread reads: allowed.
    let (p, [rq, rk, _, _, _]) = attention_backward_program(false, false);
    let l = lower_program(&p, &CudaConfig::default()).unwrap();
    let g = &l.plan.program.graph;
    let attn = (0..g.nodes.len() as u32).find(|&i| matches!(g.nodes[i as usize].op, Op::Attention { .. })).unwrap();
    let (o, lse) = (Value { node: attn, index: 0 }, Value { node: attn, index: 1 });
    assert_eq!(l.plan.slot(rq).offset, l.plan.slot(o).offset, "the premise: dq's Rotary on o");
    assert_eq!(l.plan.slot(rk).offset, l.plan.slot(lse).offset, "the premise: dk's Rotary on lse");
    let names = launch_names(&l);
    assert_eq!(names, ["attention_fwd", "attention_bwd_dq_rotary", "attention_bwd_dkv", "rotary_inverse"]);
    let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
    assert_eq!(l.phases[0][1].args[0], slot(rq));
    assert_eq!(l.phases[0][3].args[0], slot(rk));
}

/// q, k computed [1, 2, 64, 8], turned by forward Rotaries, then attention, its backward and
/// the inverse Rotaries of dq and dk, as in Coppelius; with `rq_output` the rotated q is
/// also a program output.
fn rotary_attention_program(rq_output: bool) -> (Program, [Value; 4]) {
    let mut g = Graph::new("t");
    let sh = [1, 2, 64, 8];
    let (q0, k0) = (g.param("q", &sh, Init::Zeros), g.param("k", &sh, Init::Zeros));
    let v = g.param("v", &sh, Init::Zeros);
    let dout = g.param("do", &sh, Init::Zeros);
    let (q, k) = (g.mul(q0, q0), g.mul(k0, k0));
    let rq = g.push(Op::Rotary { base: 10000.0, inverse: false }, &[q])[0];
    let rk = g.push(Op::Rotary { base: 10000.0, inverse: false }, &[k])[0];
    let fwd = g.push(Op::Attention { scale: 0.25, softcap: None, bf16: false }, &[rq, rk, v]);
    let b =
        g.push(Op::AttentionBackward { scale: 0.25, softcap: None, bf16: false }, &[rq, rk, v, fwd[0], fwd[1], dout]);
    let dq = g.push(Op::Rotary { base: 10000.0, inverse: true }, &[b[0]])[0];
    let dk = g.push(Op::Rotary { base: 10000.0, inverse: true }, &[b[1]])[0];
    let mut outs = BTreeMap::new();
    outs.insert("o".to_string(), fwd[0]);
    outs.insert("dq".to_string(), dq);
    outs.insert("dk".to_string(), dk);
    outs.insert("dv".to_string(), b[2]);
    if rq_output {
        outs.insert("rq".to_string(), rq);
    }
    (Program::single(g.finish().unwrap(), "step", outs), [q, k, rq, rk])
}

#[test]
fn forward_rotaries_are_turned_on_load_by_the_attention_kernels() {
    let (p, [q, k, _, _]) = rotary_attention_program(false);
    let l = lower_program(&p, &CudaConfig::default()).unwrap();
    let names = launch_names(&l);
    assert_eq!(
        names,
        ["ew_mul_mul", "attention_fwd_rotload", "attention_bwd_dq_rotload_rotary", "attention_bwd_dkv_rotload_rotary"]
    );
    let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
    let tab = l.phases[0][2].args[8];
    for (launch, at) in [(1, 5), (2, 9), (3, 9)] {
        let args = &l.phases[0][launch].args;
        assert_eq!((args[2], args[3]), (slot(q), slot(k)), "the pre-rotary q and k");
        assert_eq!((args[at], args[at + 1]), (tab, tab), "the rotary table for q and k");
    }
    let want: Vec<u8> = rotary::table(64, 8, 10000.0).iter().flat_map(|x| x.to_le_bytes()).collect();
    assert!(l.inits.iter().any(|(o, b)| LArg::Ptr(*o) == tab && *b == want));
    // On load, the rotary kernel's instruction sequence (no negated sine).
    let pair: Vec<String> =
        ["mul.rn.f32", "mul.rn.f32", "sub.rn.f32", "mul.rn.f32", "mul.rn.f32", "add.rn.f32"].map(String::from).to_vec();
    assert!(contains_run(&mnemonics(&rotary::kernel(128, 64, 8, false).render()), &pair));
    assert!(contains_run(&mnemonics(&l.kernels[l.phases[0][1].kernel].render()), &pair));
}

#[test]
fn a_rotated_tensor_read_elsewhere_keeps_its_rotary() {
    let (p, [q, k, rq, _]) = rotary_attention_program(true);
    let l = lower_program(&p, &CudaConfig::default()).unwrap();
    let names = launch_names(&l);
    assert_eq!(
        names,
        [
            "ew_mul_mul",
            "rotary",
            "attention_fwd_rotload",
            "attention_bwd_dq_rotload_rotary",
            "attention_bwd_dkv_rotload",
            "rotary_inverse"
        ]
    );
    // dk's inverse Rotary lies over lse (dead after the backward), which the dK/dV kernel
    // reads: it stays a launch.
    let g = &l.plan.program.graph;
    let attn = (0..g.nodes.len() as u32).find(|&i| matches!(g.nodes[i as usize].op, Op::Attention { .. })).unwrap();
    let lse = (l.plan.slot(Value { node: attn, index: 1 }).offset, g.ty(Value { node: attn, index: 1 }).numel() * 4);
    let LArg::Ptr(dk) = l.phases[0][5].args[0] else { panic!("dk pointer") };
    assert!(dk < lse.0 + lse.1 && lse.0 < dk + 64 * 2 * 8 * 4, "the premise: dk's Rotary over lse");
    let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
    for launch in &l.phases[0][2..5] {
        assert_eq!((launch.args[2], launch.args[3]), (slot(rq), slot(k)), "rotated q, pre-rotary k");
    }
    assert_eq!(l.phases[0][1].args[1], slot(q));
}

#[test]
fn a_gradient_read_elsewhere_keeps_its_inverse_rotary() {
    let (p, [_, rk, _, dq, _]) = attention_backward_program(true, true);
    let l = lower_program(&p, &CudaConfig::default()).unwrap();
    let names = launch_names(&l);
    assert_eq!(names, ["attention_fwd", "attention_bwd_dq", "attention_bwd_dkv_rotary", "rotary_inverse"]);
    let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
    assert_eq!(l.phases[0][1].args[0], slot(dq));
    assert_eq!(l.phases[0][1].args.len(), 8);
    assert_eq!(l.phases[0][2].args[0], slot(rk));
}

#[test]
fn a_bf16_product_off_the_tiled_sizes_by_alignment_runs_padded_on_the_tiled_kernel() {
    // Diakosmos's shape in small: K = 330 (not a multiple of 64), N = 262 (not of 8); its
    // casts written contiguous (`ALPHA_PITCHED=off`).
    let (g, [_, s]) = bf16_product_summed(&[514, 330], &[330, 262]);
    let unpitched = CudaConfig { fold_casts_into_gemms: false, pitched_operands: false, ..CudaConfig::default() };
    let l = lower_forward_with(g, s, unpitched);
    let names = launch_names(&l);
    let gemm = names.iter().position(|n| n.starts_with("gemm_")).expect("a product launch");
    assert!(names[gemm].contains("_tma"), "on the TMA engine: {names:?}");
    assert!(!names.contains(&"gemm_simple"), "{names:?}");
    // Its two tensor maps read the padded operands in the scratch region, after the plan's
    // values and the constants.
    let scratch = l.arena - scratch_bytes(&l);
    assert_eq!(l.tensor_maps.len(), 2);
    assert!(
        l.tensor_maps.iter().all(|&(_, operand, _)| operand >= scratch && operand < l.arena),
        "{:?}",
        l.tensor_maps
    );
    // Each operand copied and both its margins zeroed (514 → 520 rows and 330 → 384 columns;
    // 330 → 384 rows and 262 → 264 columns) before the product; the product copied out after.
    let before = &names[..gemm];
    assert_eq!(before.iter().filter(|n| n.starts_with("pw_copy")).count(), 2, "{names:?}");
    assert_eq!(before.iter().filter(|n| n.starts_with("pw_fill")).count(), 4, "{names:?}");
    assert!(names[gemm + 1].starts_with("pw_copy"), "{names:?}");
    // A tiny product keeps the simple kernel's one launch.
    let (g, [_, s]) = bf16_product_summed(&[4, 8], &[8, 4]);
    assert!(launch_names(&lower_forward(g, s)).contains(&"gemm_simple"));
}

/// A padded product's bf16 operands that only it reads are written by their casts with rows at
/// a pitch of 128 bytes (330 → 384 and 262 → 320 elements), and its tensor maps read them in place
/// over their true sizes (the map's bounds give the zeros the padded copies held): no copy, no
/// fill before the product; the weight gradient's operands alike, K split in parts.
#[test]
fn a_padded_products_casts_are_written_pitched_and_read_in_place() {
    let (g, [_, s]) = bf16_product_summed(&[514, 330], &[330, 262]);
    let l = lower_forward(g, s);
    let names = launch_names(&l);
    let gemm = names.iter().position(|n| n.starts_with("gemm_")).expect("a product launch");
    assert!(names[gemm].contains("_tma"), "on the TMA engine: {names:?}");
    assert!(!names[..gemm].iter().any(|n| n.starts_with("pw_fill")), "no margins to fill: {names:?}");
    assert_eq!(names[..gemm].iter().filter(|n| n.starts_with("pw_cast")).count(), 2, "{names:?}");
    assert_eq!(names[..gemm].len(), 2, "the two casts alone: {names:?}");
    // Maps over the casts' own slots (each given the room of its pitched rows), rows at the
    // pitch, extents the true sizes.
    let slots: Vec<usize> = l.phases[0][..2]
        .iter()
        .map(|launch| match launch.args[0] {
            LArg::Ptr(p) => p,
            _ => panic!("a cast stores into the arena"),
        })
        .collect();
    let g = &l.plan.program.graph;
    for (i, n) in g.nodes.iter().enumerate() {
        if let Op::Cast { .. } = n.op {
            let slot = l.plan.slot(Value { node: i as u32, index: 0 });
            let (rows, cols) = (n.outputs[0].shape[0], n.outputs[0].shape[1]);
            assert!(slot.len >= rows * cols.div_ceil(64) * 64 * 2, "room for {rows} pitched rows of {cols}");
        }
    }
    let mut maps: Vec<(usize, gemm_tma::MapSpec)> = l.tensor_maps.iter().map(|&(_, at, m)| (at, m)).collect();
    maps.sort_by_key(|m| m.0);
    assert_eq!(maps.len(), 2);
    let x16 = maps.iter().find(|m| slots.contains(&m.0) && m.1.inner == 330).expect("x16's map in place");
    assert_eq!((x16.1.outer, x16.1.stride_bytes), (514, 384 * 2), "{maps:?}");
    let w16 = maps.iter().find(|m| slots.contains(&m.0) && m.1.inner == 262).expect("w16's map in place");
    assert_eq!((w16.1.outer, w16.1.stride_bytes), (330, 320 * 2), "{maps:?}");
    // The weight gradient's two casts too, K split in parts.
    let l = padded_weight_gradient(CudaConfig { fold_casts_into_gemms: false, ..CudaConfig::default() });
    let names = launch_names(&l);
    let gemm = names.iter().position(|n| n.starts_with("gemm_")).expect("a product launch");
    assert_eq!(names[..gemm].len(), 2, "the two casts alone: {names:?}");
    assert_eq!(l.phases[0][gemm].grid.2, 8, "eight parts of K: {names:?}");
    assert!(l.tensor_maps.iter().all(|&(_, _, m)| m.inner == 330 && m.stride_bytes == 384 * 2), "{:?}", l.tensor_maps);
}

/// A tall padded product whose only reader is the Add of a bias row right after it adds the
/// row as it stores, into the Add's output, and the Add does not launch
/// (`padded_biases`); with `ALPHA_PADDED_BIAS=off` the Add launches.
#[test]
fn a_tall_padded_product_adds_the_bias_row_as_it_stores() {
    let lowered = |config: CudaConfig| {
        let mut g = Graph::new("t");
        let x = g.param("x", &[16384, 330], Init::Zeros);
        let w = g.param("w", &[330, 262], Init::Zeros);
        let bias = g.param("bias", &[262], Init::Zeros);
        let (x16, w16) = (g.cast(x, DType::BF16), g.cast(w, DType::BF16));
        let y = g.matmul(x16, w16);
        let z = g.add(y, bias);
        let s = g.sum_all(z);
        (lower_forward_with(g, s, config), z, bias)
    };
    let config = CudaConfig { fold_casts_into_gemms: false, ..CudaConfig::default() };
    let (l, z, bias) = lowered(config.clone());
    let names = launch_names(&l);
    let gemm = names.iter().position(|n| n.starts_with("gemm_")).expect("a product launch");
    assert_eq!(names[gemm], "gemm_rr_bf16_store_tma_rows_narrow_bias", "{names:?}");
    assert!(!names.iter().any(|n| n.contains("add")), "no Add launches: {names:?}");
    let launch = &l.phases[0][gemm];
    assert!(launch.args.contains(&LArg::Ptr(l.plan.slot(z).offset)), "C is the Add's output: {:?}", launch.args);
    assert_eq!(launch.args.last(), Some(&LArg::Ptr(l.plan.slot(bias).offset)), "the bias row last");
    let (off, _, _) = lowered(CudaConfig { padded_biases: false, ..config });
    let names = launch_names(&off);
    let gemm = names.iter().position(|n| n.starts_with("gemm_")).expect("a product launch");
    assert_eq!(names[gemm], "gemm_rr_bf16_store_tma_rows_narrow");
    assert!(names[gemm + 1].contains("add"), "the Add after it: {names:?}");
}

/// `x · w` of two f32 parameters cast to bf16, and its sum: (graph, [product, sum]).
fn bf16_product_summed(x: &[usize], w: &[usize]) -> (Graph, [Value; 2]) {
    let mut g = Graph::new("t");
    let x = g.param("x", x, Init::Zeros);
    let w = g.param("w", w, Init::Zeros);
    let (x16, w16) = (g.cast(x, DType::BF16), g.cast(w, DType::BF16));
    let y = g.matmul(x16, w16);
    let s = g.sum_all(y);
    (g, [y, s])
}

/// A tall padded product (Diakosmos's `[rows, 1,330]` outputs in small: 16,384 rows, N = 262,
/// K = 330) stores its 262 columns in place, 8 bytes at a time, over C's own rows: no copy out
/// of a padded product after it. With `ALPHA_NARROW_STORE=off` the copy comes back.
#[test]
fn a_tall_padded_product_stores_its_columns_in_place() {
    let lowered = |config: CudaConfig| {
        let (g, [y, s]) = bf16_product_summed(&[16384, 330], &[330, 262]);
        (lower_forward_with(g, s, config), y)
    };
    let config = CudaConfig { fold_casts_into_gemms: false, ..CudaConfig::default() };
    let (l, y) = lowered(config.clone());
    let names = launch_names(&l);
    let gemm = names.iter().position(|n| n.starts_with("gemm_")).expect("a product launch");
    assert_eq!(names[gemm], "gemm_rr_bf16_store_tma_rows_narrow", "{names:?}");
    assert!(!names[gemm + 1].starts_with("pw_copy"), "nothing copied out: {names:?}");
    // C is the product's own slot, 262 columns a row.
    let launch = &l.phases[0][gemm];
    assert!(launch.args.contains(&LArg::Ptr(l.plan.slot(y).offset)), "{:?}", launch.args);
    let (off, _) = lowered(CudaConfig { narrow_stores: false, ..config });
    let names = launch_names(&off);
    let gemm = names.iter().position(|n| n.starts_with("gemm_")).expect("a product launch");
    assert_eq!(names[gemm], "gemm_rr_bf16_store_tma_rows");
    assert!(names[gemm + 1].starts_with("pw_copy"), "copied out: {names:?}");
    // The shape contract: a narrow store takes an even N and row of C, nothing odd, and only
    // as a staged plain store on the TMA engine.
    let spec = GemmSpec {
        staged_store: true,
        narrow_store: true,
        ..GemmSpec::new(Layout::RowMajor, Layout::RowMajor, Input::Bf16).tma()
    };
    let shape = GemmShape { n: 262, ldc: 262, ..GemmShape::packed(&spec, 16384, 264, 384) };
    shape.check(&spec).unwrap();
    assert!(GemmShape { n: 261, ldc: 261, ..shape }.check(&spec).is_err());
    assert!(shape.check(&GemmSpec { narrow_store: false, ..spec }).is_err());
    assert!(shape.check(&GemmSpec { staged_store: false, ..spec }).is_err());
}

/// The scratch region's bytes: the arena after the constants (the tensor maps lie there).
fn scratch_bytes(l: &Lowered) -> usize {
    let consts_end = l.tensor_maps.iter().map(|&(at, _, _)| at + 128).max().unwrap_or(0);
    l.arena - consts_end.div_ceil(256) * 256
}

/// `xᵀ·dy` of two bf16 `[16384, 330]` tensors (a 330 × 330 weight gradient, padded: 330 is no
/// multiple of 8) summed, lowered with `config`.
fn padded_weight_gradient(config: CudaConfig) -> Lowered {
    let mut g = Graph::new("t");
    let x = g.param("x", &[16384, 330], Init::Zeros);
    let dy = g.param("dy", &[16384, 330], Init::Zeros);
    let (x16, dy16) = (g.cast(x, DType::BF16), g.cast(dy, DType::BF16));
    let y = g.matmul_t(x16, dy16, true, false);
    let s = g.sum_all(y);
    lower_forward_with(g, s, config)
}

/// A padded weight gradient whose few tiles leave SMs idle (330 × 330 over 16,384 positions,
/// 9 tiles) splits K as an aligned one does: its parts on the TMA engine, their fixed-order sum
/// into the padded output, then the wanted rows and columns copied out.
#[test]
fn a_padded_weight_gradient_with_few_tiles_splits_k() {
    let config = CudaConfig { fold_casts_into_gemms: false, pitched_operands: false, ..CudaConfig::default() };
    let l = padded_weight_gradient(config);
    let names = launch_names(&l);
    let gemm = names.iter().position(|n| n.starts_with("gemm_")).expect("a product launch");
    assert!(names[gemm].contains("_tma"), "on the TMA engine: {names:?}");
    assert_eq!(l.phases[0][gemm].grid.2, 8, "eight parts of K: {names:?}");
    assert_eq!(names[gemm + 1], "gemm_splitk8_store_v4", "the parts summed: {names:?}");
    assert!(names[gemm + 2].starts_with("pw_copy"), "copied out: {names:?}");
}

/// With `ALPHA_PADDED_TMA=off` a padded product keeps the `cp.async` ring and K whole.
#[test]
fn padded_products_off_the_aligned_paths_keep_the_ring() {
    let l =
        padded_weight_gradient(CudaConfig { fold_casts_into_gemms: false, padded_tma: false, ..CudaConfig::default() });
    let names = launch_names(&l);
    let gemm = names.iter().position(|n| n.starts_with("gemm_")).expect("a product launch");
    assert!(names[gemm].ends_with("_wg") || names[gemm].contains("_wg_"), "on the wgmma ring: {names:?}");
    assert!(names[gemm + 1].starts_with("pw_copy"), "K whole, copied out: {names:?}");
    assert!(l.tensor_maps.is_empty());
}

/// `a [batch, k, m]ᵀ · b [batch, k, n]` in f32 (Diakosmos's weight gradient), lowered.
fn long_k_product(batch: usize, k: usize, m: usize, n: usize) -> (Lowered, Value) {
    let mut g = Graph::new("t");
    let a = g.param("a", &[batch, k, m], Init::Zeros);
    let b = g.param("b", &[batch, k, n], Init::Zeros);
    let y = g.matmul_t(a, b, true, false);
    let s = g.sum_all(y);
    (lower_forward(g, s), y)
}

#[test]
fn a_long_k_f32_product_with_few_outputs_runs_split_into_scratch_then_summed() {
    // Diakosmos at 64 windows: 12 × 1 × 7 = 84 blocks, K = 131,072 → ⌊1,056 / 84⌋ = 12 parts.
    let (l, y) = long_k_product(7, 131_072, 8, 190);
    let names = launch_names(&l);
    assert_eq!(names[..2], ["gemm_simple_deep_split12", "gemm_splitk12_store_v4"], "{names:?}");
    let (parts, sum) = (&l.phases[0][0], &l.phases[0][1]);
    // The deep kernel: lanes on 32 of the 190 columns a block, a warp on every 2 of the 8 rows.
    assert_eq!(parts.grid, (6, 1, 7 * 12));
    assert_eq!(parts.block, (32, 4, 1));
    // The partials lie in the scratch region past everything else, sized for 12 parts of
    // 7 × 8 × 190 f32 (to the region's alignment).
    let LArg::Ptr(scratch) = parts.args[0] else { panic!("partials are a pointer") };
    assert!(scratch >= l.plan.arena);
    let bytes = 12 * 7 * 8 * 190 * 4;
    assert!(l.arena - scratch >= bytes && l.arena - scratch < bytes + ALIGN, "{} B", l.arena - scratch);
    // A and B read in place; the sum reads the partials and writes the product's slot.
    let slot = |v| LArg::Ptr(l.plan.slot(v).offset);
    let (a, b) = (Value { node: 0, index: 0 }, Value { node: 1, index: 0 });
    assert_eq!(parts.args[1..], [slot(a), slot(b)]);
    assert_eq!(sum.args, [slot(y), slot(y), LArg::Ptr(scratch)]);
    assert_eq!(sum.block, (256, 1, 1));
}

#[test]
fn short_k_or_many_outputs_keep_the_simple_products_one_launch() {
    // K of 2,047 is under two parts of 1,024.
    let (l, _) = long_k_product(7, 2047, 8, 190);
    assert_eq!(launch_names(&l)[0], "gemm_simple_deep");
    assert!(!launch_names(&l)[1].starts_with("gemm_splitk"));
    assert_eq!(l.phases[0][0].grid, (6, 1, 7));
    // 20 × 20 × 1 = 400 blocks already fill two an SM: no split however long K is.
    let (l, _) = long_k_product(1, 65_536, 320, 320);
    assert_eq!(launch_names(&l)[0], "gemm_simple");
    // Two parts as soon as K holds two of 1,024.
    let (l, _) = long_k_product(7, 2048, 8, 190);
    assert_eq!(launch_names(&l)[..2], ["gemm_simple_deep_split2", "gemm_splitk2_store_v4"]);
}
