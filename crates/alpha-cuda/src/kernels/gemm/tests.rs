use super::*;

#[test]
fn every_variant_renders_within_budget() {
    let all = GemmSpec::all();
    assert_eq!(all.len(), 176);
    for spec in all {
        let k = spec.kernel();
        k.check_budget().unwrap();
        let (bm, bn) = (spec.tile.rows(), spec.tile.cols());
        let text = k.render();
        assert!(text.contains(&format!(".visible .entry {}(", spec.name())));
        assert!(text.contains(&format!(".reqntid {}, 1, 1", spec.threads())));
        if spec.engine == Engine::Tma {
            // The consumer warpgroups and one producer warp; per stage one bulk copy of a
            // K-major operand or tile/64 of an MN-major one; no cp.async, no proxy fence.
            assert_eq!(spec.threads(), 2 * bm + 32);
            assert_eq!(k.dynamic_shared, crate::kernels::gemm::tma::shared_bytes(&spec));
            let boxes = |k_major: bool, rows: u32| if k_major { 1 } else { rows / 64 };
            let copies = boxes(spec.a == Layout::RowMajor, bm) + boxes(spec.b == Layout::ColMajor, bn);
            assert_eq!(text.matches("cp.async.bulk.tensor.2d").count() as u32, copies, "{}", spec.name());
            assert_eq!(text.matches("wgmma.mma_async").count() as u32, spec.bk / 16);
            assert!(!text.contains("cp.async.cg") && !text.contains("fence.proxy.async"));
            continue;
        }
        if spec.engine == Engine::Wgmma {
            // One warpgroup per 64 rows, a 64 × bn × 16 product per 16 of K, the ring in
            // dynamic shared memory; operands stored as not K-contiguous are read transposed.
            assert_eq!(spec.threads(), 2 * bm);
            assert_eq!(k.static_shared_bytes(), 0);
            assert_eq!(k.dynamic_shared, crate::kernels::gemm::wgmma::shared_bytes(&spec));
            let wgmma: Vec<&str> = text.lines().filter(|l| l.contains("wgmma.mma_async")).collect();
            assert_eq!(wgmma.len() as u32, spec.bk / 16, "{}", spec.name());
            let trans = (u32::from(spec.a == Layout::ColMajor), u32::from(spec.b == Layout::RowMajor));
            for l in wgmma {
                assert!(l.contains(&format!("m64n{bn}k16.f32.bf16.bf16")), "{l}");
                assert!(l.trim_end().ends_with(&format!("1, 1, {}, {};", trans.0, trans.1)), "{l}");
            }
            let async_copies = text.contains("cp.async.cg.shared.global");
            assert_eq!(async_copies, spec.a_input == Input::Bf16 || spec.b_input == Input::Bf16);
            continue;
        }
        assert_eq!(k.static_shared_bytes(), 2 * (bm + bn) * pitch_k(spec.bk));
        assert_eq!(
            text.matches("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32").count() as u32,
            2 * (spec.bk / 16) * (bm / 32) * (bn / 32),
            "two halves of the unrolled loop, bk/16 k16 steps each, of the warp's mma tiles"
        );
        // Operands are read with ldmatrix, transposing exactly those not stored K-contiguous.
        let trans = text.contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16");
        assert_eq!(trans, spec.a == Layout::ColMajor || spec.b == Layout::RowMajor, "{}", spec.name());
    }
}

#[test]
fn shape_contract() {
    let s = GemmSpec::new(Layout::RowMajor, Layout::ColMajor, Input::F32);
    GemmShape::packed(&s, 1024, 12288, 512).check(&s).unwrap();
    GemmShape::packed(&s, 1024, 1408, 512).check(&s).unwrap();
    assert!(GemmShape::packed(&s, 1024, 1408, 500).check(&s).is_err());
    assert!(GemmShape::packed(&s, 1020, 1408, 512).check(&s).is_err());
    // Tiles fill the 132 SMs: one context's products take smaller tiles, 16 contexts' the
    // largest.
    assert_eq!(GemmShape::packed(&s, 1024, 512, 512).tile(), Tile::T64x64);
    assert_eq!(GemmShape::packed(&s, 1024, 1536, 512).tile(), Tile::T128x64);
    assert_eq!(GemmShape::packed(&s, 16384, 512, 512).tile(), Tile::T128x128);
    assert_eq!(GemmShape::packed(&s, 1024, 12288, 512).tile(), Tile::T128x128);
    // Weight gradients split K: 44 blocks → 352 (3 waves of 1/8 the K) at B = 16; 16 → 128;
    // none with a full grid or a short K.
    let wgrad = GemmSpec { a: Layout::ColMajor, b: Layout::RowMajor, ..s };
    assert_eq!(GemmShape::packed(&wgrad, 512, 1408, 16384).split_k(BK), 8);
    assert_eq!(GemmShape::packed(&wgrad, 512, 512, 16384).split_k(BK), 8);
    assert_eq!(GemmShape::packed(&wgrad, 512, 512, 1024).split_k(BK), 4);
    assert_eq!(GemmShape::packed(&wgrad, 512, 1408, 1024).split_k(BK), 2);
    assert_eq!(GemmShape::packed(&s, 1024, 512, 12288).split_k(BK), 4);
    assert_eq!(GemmShape::packed(&wgrad, 12288, 512, 16384).split_k(BK), 1);
    assert_eq!(GemmShape::packed(&wgrad, 1024, 512, 512).split_k(BK), 1);
    // Parts that may differ by a K step: 44 tiles take 3 (one wave), 48 and 16 keep 8, and
    // one context's K keeps its power of two.
    assert_eq!(GemmShape::packed(&wgrad, 512, 1408, 16384).split_k_uneven(BK), 3);
    assert_eq!(GemmShape::packed(&wgrad, 1408, 512, 16384).split_k_uneven(BK), 3);
    assert_eq!(GemmShape::packed(&wgrad, 512, 1536, 16384).split_k_uneven(BK), 8);
    assert_eq!(GemmShape::packed(&wgrad, 512, 512, 16384).split_k_uneven(BK), 8);
    assert_eq!(GemmShape::packed(&wgrad, 512, 1408, 1024).split_k_uneven(BK), 2);
    assert_eq!(GemmShape::packed(&wgrad, 12288, 512, 16384).split_k_uneven(BK), 1);
    // 144 tiles: twelve SMs would take two; four parts leave the most loaded 1.25 tiles' work.
    assert_eq!(GemmShape::packed(&wgrad, 768, 3072, 16384).split_ragged_waves(BK), 4);
    assert_eq!(GemmShape::packed(&wgrad, 3072, 768, 16384).split_ragged_waves(BK), 4);
    // Three full waves (396 tiles) stay whole; so does a short K.
    assert_eq!(GemmShape::packed(&wgrad, 1408, 4608, 16384).split_ragged_waves(BK), 1);
    assert_eq!(GemmShape::packed(&wgrad, 768, 3072, 2048).split_ragged_waves(BK), 1);
    // A long K in parts of about 16,384: Diakosmos's weight gradients over 64 windows (352 and
    // 121 tiles) in 8, as many as a part below one wave would take anyway; GPT-2's input
    // gradient through the vocabulary (K = 50,304) and a batch stay whole.
    assert_eq!(GemmShape::packed(&wgrad, 3990, 1330, 131072).split_k_long(BK), 8);
    assert_eq!(GemmShape::packed(&wgrad, 1330, 1330, 131072).split_k_long(BK), 8);
    assert_eq!(GemmShape::packed(&wgrad, 768, 3072, 112640).split_k_long(BK), 7);
    assert_eq!(GemmShape::packed(&wgrad, 512, 1408, 16384).split_k_long(BK), 3);
    let s_rr = GemmSpec::new(Layout::RowMajor, Layout::RowMajor, Input::Bf16);
    assert_eq!(GemmShape::packed(&s_rr, 16384, 768, 50304).split_k_long(BK), 1);
    let batched = GemmShape { batch: 7, ..GemmShape::packed(&wgrad, 3990, 1330, 131072) };
    assert_eq!(batched.split_k_long(BK), 1);
    // A slice of K: rows of the column-major A, elements of the row-major... B here.
    let sh = GemmShape::packed(&wgrad, 512, 1408, 16384);
    let part = sh.split(&wgrad, 8);
    assert_eq!((part.k, part.batch, part.stride_a, part.stride_b), (2048, 8, 2048 * 512, 2048 * 1408));
    let sh = GemmShape::packed(&s, 1024, 512, 1408);
    assert_eq!((sh.split(&s, 4).stride_a, sh.split(&s, 4).stride_b), (352, 352));
}

#[test]
fn reference_matches_naive_on_bf16_exact_values() {
    // Small integers are exact in bf16, so the reference equals the naive product.
    let s =
        GemmSpec { epilogue: Epilogue::Accumulate, ..GemmSpec::new(Layout::ColMajor, Layout::RowMajor, Input::F32) };
    let sh = GemmShape::packed(&s, 8, 8, 32);
    let a: Vec<f32> = (0..256).map(|i| (i % 7) as f32 - 3.0).collect();
    let b: Vec<f32> = (0..256).map(|i| (i % 5) as f32 - 2.0).collect();
    let mut c = vec![1.0f32; 64];
    reference(&s, &sh, &a, &b, &[], &mut c);
    for i in 0..8 {
        for j in 0..8 {
            let mut want = 1.0;
            for kk in 0..32 {
                want += a[kk * 8 + i] * b[kk * 8 + j];
            }
            assert_eq!(c[i * 8 + j], want);
        }
    }
}

/// Whatever a spec's kernel takes, `arguments` (the one list both the lowering and the host
/// launchers build) gives exactly its parameters, in order and of their types; with one extra
/// too many or too few it would not.
#[test]
fn arguments_match_every_kernels_parameters() {
    let shape = GemmShape {
        m: 128,
        n: 256,
        k: 64,
        batch: 1,
        lda: 64,
        ldb: 256,
        ldc: 256,
        stride_a: 0,
        stride_b: 0,
        stride_c: 0,
    };
    let mut specs = GemmSpec::all();
    let heads = Heads { batch: 1, t: 128, heads: 2, d: 64, bf16_turned: true, bf16: false, bias: false, delta: false };
    let base = GemmSpec::new(Layout::RowMajor, Layout::RowMajor, Input::Bf16).wgmma().tma();
    specs.push(GemmSpec { heads: Some(heads), tile: Tile::T128x64, ..base });
    specs.push(GemmSpec { gated: true, epilogue: Epilogue::StoreMul, activation: Some(Unary::Gelu), ..base });
    let k_major = GemmSpec::new(Layout::RowMajor, Layout::ColMajor, Input::Bf16).wgmma().tma();
    specs.push(GemmSpec { k_pair: true, ..k_major });
    let mut kinds_seen = std::collections::HashSet::new();
    for spec in specs {
        let kernel = spec.kernel();
        let p = |x: u64| Arg::U64(x);
        let chain = spec.chain.map_or(0, |c| c.outputs().len() + c.others().len());
        let ops = Operands {
            u: spec.takes_u().then_some(p(1)),
            chain: (0..chain as u64).map(p).collect(),
            maps: (spec.engine == Engine::Tma).then_some((p(2), p(3))),
            gate_map: spec.gated.then_some(p(4)),
            first_maps: spec.k_pair.then_some((p(5), p(6))),
            rot_tab: spec.heads.is_some_and(|h| h.bf16_turned).then_some(p(7)),
            ..Operands::new([p(8), p(9), p(10), p(11)])
        };
        let args = arguments(&shape, ops);
        let kinds: Vec<ParamTy> = args
            .iter()
            .map(|a| match a {
                Arg::U64(_) => ParamTy::U64,
                Arg::U32(_) => ParamTy::U32,
                Arg::I32(_) => ParamTy::S32,
                Arg::F32(_) => ParamTy::F32,
            })
            .collect();
        let params: Vec<ParamTy> = kernel.params.iter().map(|p| p.ty).collect();
        assert_eq!(kinds, params, "{}", spec.name());
        kinds_seen.insert(args.len());
    }
    // The extras were exercised: lists of several lengths beyond the thirteen every launch has.
    assert!(kinds_seen.len() >= 4, "{kinds_seen:?}");
}
