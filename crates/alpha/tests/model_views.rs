//! The run page's model views on real checkpoints: a KickDelta trained here for a few CPU steps
//! with two checkpoints, and a small-geometry Diakosmos checkpoint written by Alpha's own
//! checkpoint writer, each served by the dashboard and read back through its API.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;

use alpha_run::checkpoint;
use alpha_systems::diakosmos::Diakosmos;
use alpha_systems::views::Tensors;
use alpha_systems::System;
use serde_json::{json, Value};

fn http_json(addr: SocketAddr, path: &str) -> Value {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{}", &text[..text.len().min(400)]);
    let body = text.split_once("\r\n\r\n").unwrap().1;
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {}", &body[..body.len().min(400)]))
}

fn serve(runs: &Path) -> alpha_dash::RunningServer {
    let mut opts = alpha_dash::ServeOptions::new(runs);
    opts.port = 0;
    alpha_dash::Server::bind(opts).unwrap().spawn()
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}")).iter().map(|x| x.as_f64().unwrap()).collect()
}

fn close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "{what}[{i}]: {a} against {b}");
    }
}

/// Four CPU steps of KickDelta on tiny-shakespeare, a checkpoint every two: the page's views of
/// both checkpoints are the checkpoint's own tensors as the view computes them (the frequencies
/// the stored parameters ÷ 16, the write strengths' statistics over every byte pair).
/// Four CPU steps of KickDelta on tiny-shakespeare into `runs/kd`, a checkpoint every two; false
/// (with a note) where the corpus is absent.
fn train_kickdelta(dir: &Path, runs: &Path) -> bool {
    let Some(data) = common::prepared(dir) else { return false };
    let run = runs.join("kd");
    common::succeeds(&common::alpha(
        &[
            "train",
            "kickdelta",
            "--data",
            data.to_str().unwrap(),
            "--run-dir",
            run.to_str().unwrap(),
            "--steps",
            "4",
            "--checkpoint-every",
            "2",
            "--batch",
            "2",
            "--heldout-windows",
            "0",
            "--sample-tokens",
            "0",
            "--quiet",
        ],
        dir,
    ));
    true
}

#[test]
fn kickdelta_frequencies_and_write_strengths_come_from_each_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let run = runs.join("kd");
    if !train_kickdelta(tmp.path(), &runs) {
        return;
    }
    let server = serve(&runs);
    let v = http_json(server.addr(), "/api/runs/kd/views");
    assert_eq!(v["system"], "kickdelta");
    let view = |id: &str| v["views"].as_array().unwrap().iter().find(|x| x["id"] == id).unwrap().clone();
    let (osc, beta) = (view("oscillators"), view("write-strengths"));
    let steps: Vec<u64> = osc["checkpoints"].as_array().unwrap().iter().map(|c| c["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [2, 4]);
    let mut seen = vec![];
    for (i, step) in steps.iter().enumerate() {
        let ckpt = checkpoint::load(&run.join(format!("checkpoints/step-{step:06}.safetensors"))).unwrap();
        let tensors: Tensors = ckpt.tensors.clone();
        let stored = &tensors["oscillators.frequency"].1;
        let want: Vec<f64> = stored.iter().map(|&p| f64::from(p) / 16.0).collect();
        let got = numbers(&osc["checkpoints"][i]["series"][0]["values"]);
        close(&got, &want, &format!("frequencies at step {step}"));
        let stats = alpha_systems::kickdelta::write_strength_statistics(&tensors).unwrap();
        close(&numbers(&beta["checkpoints"][i]["series"][0]["values"]), &stats.values, &format!("β at step {step}"));
        assert_eq!(osc["checkpoints"][i]["sha256"], json!(ckpt.sha256));
        seen.push(got);
    }
    assert_ne!(seen[0], seen[1], "training moved the frequencies between the checkpoints");
}

/// A small Diakosmos (2 blocks, 2 harmonics) with its decay parameters moved off their starts,
/// saved by Alpha's checkpoint writer as step 7 of `runs/dk`; returns its tensors.
fn small_diakosmos(runs: &Path) -> Tensors {
    let run = runs.join("dk");
    let system = Diakosmos { blocks: 2, phasors: 3, harmonics: 2, context: 16, bf16: true };
    let model = system.model(1).unwrap();
    let mut tensors: Tensors = alpha_learn::init::initial_leaves(&model.graph, 3)
        .into_iter()
        .map(|(name, v)| {
            let shape = model.graph.params().into_iter().find(|p| p.1 == name).map(|p| model.graph.shape(p.0).to_vec());
            (name.clone(), (shape.unwrap_or(vec![v.len()]), v))
        })
        .collect();
    for (name, (_, v)) in tensors.iter_mut() {
        if name.contains("_gate_logit") || name.contains("_harmonic_decay_offset") {
            for (i, x) in v.iter_mut().enumerate() {
                *x += 0.37 * (i as f32 + 1.0) * if name.contains("blocks.1") { -1.0 } else { 1.0 };
            }
        }
    }
    let meta = checkpoint::Meta {
        system: "diakosmos".into(),
        config_hash: "small".into(),
        step: 7,
        cursor: "{}".into(),
        seed: 3,
        schedule: "constant".into(),
        schedule_total: 7,
        peak: None,
        tokens: 0,
        parent: None,
        data: String::new(),
        budget: None,
    };
    let path = run.join("checkpoints/step-000007.safetensors");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let sha = checkpoint::save(&path, &meta, &tensors).unwrap();
    std::fs::write(
        run.join("run.json"),
        json!({"name": "dk", "system": "diakosmos", "device": "cpu", "state": "finished"}).to_string(),
    )
    .unwrap();
    std::fs::write(
        run.join("lineage.jsonl"),
        format!("{}\n", json!({"step": 7, "path": "checkpoints/step-000007.safetensors", "sha256": sha})),
    )
    .unwrap();

    tensors
}

/// A small Diakosmos (2 blocks, 2 harmonics) with its decay parameters moved off their starts,
/// saved as a checkpoint: the page's 2 × 7 × 2 half-lives are ln ½ / ln σ(g + o) of its tensors,
/// and its constellation is 7 × 4 panels of 4 points, each labelled with its 64 bytes.
#[test]
fn diakosmos_half_lives_and_constellation_come_from_its_checkpoint_and_wire() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let tensors = small_diakosmos(&runs);
    let server = serve(&runs);
    let v = http_json(server.addr(), "/api/runs/dk/views");
    let view = |id: &str| v["views"].as_array().unwrap().iter().find(|x| x["id"] == id).unwrap().clone();
    let lives = view("half-lives");
    let series = &lives["checkpoints"][0]["series"][0];
    let got = numbers(&series["values"]);
    let mut want = vec![];
    for b in 0..2 {
        let g = &tensors[&format!("blocks.{b}.attn._gate_logit")].1;
        let o = &tensors[&format!("blocks.{b}.attn._harmonic_decay_offset")].1;
        for &gj in g {
            for &ol in o {
                let gamma = 1.0 / (1.0 + (-(f64::from(gj) + f64::from(ol))).exp());
                want.push(0.5f64.ln() / gamma.ln());
            }
        }
    }
    assert_eq!(want.len(), 28);
    close(&got, &want, "half-lives");
    assert_eq!(series["labels"][27], "block 1 head 6 ℓ1");

    let wire = view("wire");
    let sets = wire["points"].as_array().unwrap();
    assert_eq!(sets.len(), 7 * 4);
    for set in sets {
        let points = set["points"].as_array().unwrap();
        assert_eq!(points.len(), 4, "{}", set["name"]);
        assert!(points.iter().all(|p| p["bytes"].as_array().unwrap().len() == 64), "{}", set["name"]);
    }
    let table = view("parameters");
    let totals: Vec<&Value> = table["table"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r[0].as_str().unwrap().starts_with("all "))
        .collect();
    let muon = totals.iter().find(|r| r[4] == "Muon").unwrap();
    assert_eq!(muon[3], "24764600", "the catalogue's Diakosmos: {muon}");
}

/// The run pages in a headless Chromium: KickDelta's shows its frequencies (a line a group) and
/// write strengths at both checkpoints and its parameter table; Diakosmos's its 28 constellation
/// panels of 4 points, its half-lives and its table by optimizer. Screenshots go to the test's
/// temporary folder and, where `ALPHA_SCREENSHOT_DIR` is set, there.
#[test]
fn the_run_pages_draw_the_model_views_in_a_real_browser() {
    use alpha_dash::webdriver::Browser;
    use std::time::Duration;
    if !Browser::available() {
        eprintln!("skipped: chromium or chromedriver is missing (apt-get install -y chromium chromium-driver)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    if !train_kickdelta(tmp.path(), &runs) {
        return;
    }
    small_diakosmos(&runs);
    let server = serve(&runs);
    let b = Browser::launch(&tmp.path().join("chromium-profile"), 1280, 900).unwrap();
    let shots: Vec<std::path::PathBuf> =
        [Some(tmp.path().to_path_buf()), std::env::var_os("ALPHA_SCREENSHOT_DIR").map(Into::into)]
            .into_iter()
            .flatten()
            .collect();
    let save = |png: Vec<u8>, name: &str| {
        for dir in &shots {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(name), &png).unwrap();
        }
    };

    b.goto(&format!("{}/runs/kd", server.url())).unwrap();
    b.wait_for(
        "return document.body.dataset.loaded === '1' && !document.querySelector('#model-card').hidden",
        Duration::from_secs(30),
    )
    .unwrap();
    let osc = b
        .execute(
            "const s = document.querySelector('#view-oscillators svg'); return [+s.dataset.checkpoints, s.dataset.series]",
            vec![],
        )
        .unwrap();
    assert_eq!(osc[0], 2, "{osc}");
    let lines = osc[1].as_str().unwrap();
    assert!((0..8).all(|g| lines.contains(&format!("group {g}"))), "{lines}");
    let beta = b
        .execute(
            "const s = document.querySelector('#view-write-strengths svg'); return [+s.dataset.checkpoints, s.dataset.series]",
            vec![],
        )
        .unwrap();
    assert_eq!(beta[0], 2, "{beta}");
    assert!(beta[1].as_str().unwrap().contains("median"), "{beta}");
    let rows = b.execute("return document.querySelectorAll('#view-parameters tbody tr').length", vec![]).unwrap();
    assert!(rows.as_u64().unwrap() >= 8, "{rows}");
    save(b.element_png("#model-card").unwrap(), "model-views-kickdelta.png");
    save(b.full_page_png(1280).unwrap(), "run-page-kickdelta.png");

    b.goto(&format!("{}/runs/dk", server.url())).unwrap();
    b.wait_for(
        "return document.body.dataset.loaded === '1' && !document.querySelector('#model-card').hidden",
        Duration::from_secs(30),
    )
    .unwrap();
    let panels = b
        .execute(
            "return [...document.querySelectorAll('#view-wire .panel')].map(p => [...p.querySelectorAll('circle.pt')].map(c => c.dataset.bytes.split(',').length))",
            vec![],
        )
        .unwrap();
    let panels = panels.as_array().unwrap();
    assert_eq!(panels.len(), 28);
    assert!(panels.iter().all(|p| p == &serde_json::json!([64, 64, 64, 64])), "{panels:?}");
    let lives = b.execute("return +document.querySelector('#view-half-lives svg').dataset.values", vec![]).unwrap();
    assert_eq!(lives, 28);
    let cells =
        b.execute("return +document.querySelector('#view-half-lives .heat svg').dataset.cells", vec![]).unwrap();
    assert_eq!(cells, 28, "the newest checkpoint's half-lives as a grid");
    let muon = b
        .execute(
            "return [...document.querySelectorAll('#view-parameters tbody tr.total')].map(r => r.cells[0].textContent)",
            vec![],
        )
        .unwrap();
    assert_eq!(muon, serde_json::json!(["all rotational AdamW", "all Muon", "all Adam"]));
    save(b.element_png("#model-card").unwrap(), "model-views-diakosmos.png");
    save(b.element_png("#view-half-lives").unwrap(), "model-views-half-lives.png");
    save(b.full_page_png(1280).unwrap(), "run-page-diakosmos.png");
}
