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
#[test]
fn kickdelta_frequencies_and_write_strengths_come_from_each_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = common::prepared(tmp.path()) else { return };
    let runs = tmp.path().join("runs");
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
        tmp.path(),
    ));
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
/// saved as a checkpoint: the page's 2 × 7 × 2 half-lives are ln ½ / ln σ(g + o) of its tensors,
/// and its constellation is 7 × 4 panels of 4 points, each labelled with its 64 bytes.
#[test]
fn diakosmos_half_lives_and_constellation_come_from_its_checkpoint_and_wire() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
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
