//! Handler, server and browser tests over run folders written here as the trainer writes them.

use super::*;
use axum::body::Body;
use axum::http::Request;
use std::io::{Read, Write};
use std::time::Duration;
use tower::ServiceExt;

const H200_TELEMETRY: &str = include_str!("testdata/h200-telemetry.jsonl");

/// Writes a realistic run: `steps` points with p10/p90 and an unseen step every 20, a
/// checkpoint every 20 steps, invocations, one profiled step, and `telemetry_rows` samples
/// (with a GPU when `gpu`).
pub(crate) fn write_run(dir: &Path, name: &str, steps: u64, state: &str, gpu: bool, telemetry_rows: usize) -> PathBuf {
    let run = dir.join(name);
    std::fs::create_dir_all(&run).unwrap();
    let info = json!({
        "name": name, "system": "bob", "device": if gpu { "cuda" } else { "cpu" }, "state": state,
        "steps_target": steps, "steps_done": steps, "started_at": "2026-05-01T10:00:00Z",
        "updated_at": "2026-05-01T10:01:00Z", "parameters": 65536, "tokens_per_step": 2048,
        "batch": 8, "context": 256, "vocab": 256, "seed": 1, "message": null,
        "summary": if state == "finished" { json!({"tokens_per_s": 512000.0, "ms_per_step": 4.0, "energy_j": 1200.0, "energy_per_token_j": 0.0012}) } else { Value::Null },
    });
    std::fs::write(run.join("run.json"), serde_json::to_string_pretty(&info).unwrap()).unwrap();
    let mut points = String::new();
    let mut lineage = String::new();
    let mut inv = String::new();
    let mut rng = 12345u64;
    let mut noise = || {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((rng >> 33) as f64 / (1u64 << 31) as f64) - 0.5
    };
    let mut parent: Option<String> = None;
    let mut first_loss = 0.0;
    for step in 1..=steps {
        let base = 2.45 + 3.1 * (-(step as f64) / 18.0).exp();
        let unseen = (step - 1) % 20 == 0;
        let loss = base + 0.06 * noise() + if unseen { 0.08 } else { 0.0 };
        if unseen {
            first_loss = loss;
        }
        let mut point = json!({"step": step, "loss": loss, "lr": 0.01 * (step as f64 / 10.0).min(1.0), "tokens": step * 2048,
                   "ms": 4.0 + noise(), "unseen": unseen, "p10": loss - 0.9, "p90": loss + 1.1, "grad_norm": 0.5 + 2.0 / step as f64});
        // A GPU run's rows carry the device's time; the CPU run's are written as rows were
        // before it was recorded.
        if gpu {
            point["device_ms"] = json!(3.0 + step as f64 / 1000.0);
        }
        points += &format!("{point}\n");
        if step % 20 == 0 {
            let mix =
                |k: u64| (step + k).wrapping_mul(0x9e3779b97f4a7c15).rotate_left(29).wrapping_mul(0xbf58476d1ce4e5b9);
            let sha = format!("{:016x}{:016x}{:016x}{:016x}", mix(1), mix(2), mix(3), mix(4));
            lineage += &format!(
                "{}\n",
                json!({"step": step, "path": format!("checkpoints/step-{step:06}.safetensors"), "sha256": sha,
                       "parent": parent, "train_loss": loss, "heldout_loss": base + 0.05, "heldout_bpb": (base + 0.05) / 2f64.ln(),
                       "wall_s": 0.2 * step as f64, "device_s": null, "time": "2026-05-01T10:00:30Z"})
            );
            inv += &format!(
                "{}\n",
                json!({"k": step / 20 - 1, "first_step": step - 19, "last_step": step, "unseen_loss": first_loss,
                       "last_loss": loss, "wall_s": 0.09, "device_s": null})
            );
            parent = Some(sha);
        }
    }
    std::fs::write(run.join("points.jsonl"), points).unwrap();
    std::fs::write(run.join("lineage.jsonl"), lineage).unwrap();
    std::fs::write(run.join("invocations.jsonl"), inv).unwrap();
    let mut profile = String::new();
    type Launch = (&'static str, &'static str, f64, Option<(&'static str, f64)>);
    let launches: &[Launch] = &[
        ("gather", "embedding-gather", 41.0, None),
        ("cross-entropy", "cross-entropy-forward", 180.0, None),
        ("cross-entropy", "cross-entropy-backward", 150.0, None),
        ("scatter-add", "table-gradient", 95.0, None),
        ("adamw", "adamw-arena", 60.0, None),
        ("gemm", "logits", 210.0, Some(("rr-m2048-n256-k256", 2.0 * 2048.0 * 256.0 * 256.0))),
        ("gemm", "logits-grad", 190.0, Some(("rc-m256-n256-k2048", 2.0 * 2048.0 * 256.0 * 256.0))),
    ];
    for (i, (family, name, us, gemm)) in launches.iter().enumerate() {
        profile += &format!(
            "{}\n",
            json!({"step": 10, "index": i, "family": family, "name": name, "us": us,
                   "flops": gemm.map(|g| g.1), "shape": gemm.map(|g| g.0)})
        );
    }
    std::fs::write(run.join("profile.jsonl"), profile).unwrap();
    // With a GPU: a real recording, 42 s of an H200 running kernel checks, sampled by
    // alpha-telemetry through NVML. Without: host rows as a CPU run writes them.
    let tele = if gpu {
        H200_TELEMETRY.to_string()
    } else {
        let mut tele = String::new();
        let t0 = alpha_telemetry::unix_now() - telemetry_rows as f64;
        for i in 0..telemetry_rows {
            let x = i as f64;
            let mut row = json!({"t": t0 + x, "gpu": null, "host": {"load1": 1.0 + 0.5 * noise(), "mem_available_mib": 20000.0 - 10.0 * x,
                "mem_total_mib": 24000.0, "rss_mib": 300.0 + x, "cpu_s": x, "cpu_pct": 95.0 + 5.0 * noise()}});
            if i == 0 {
                row["note"] = json!("no GPU telemetry: NVML did not load; recording the host only");
            }
            tele += &format!("{row}\n");
        }
        tele
    };
    std::fs::write(run.join("telemetry.jsonl"), tele).unwrap();
    run
}

fn app(dir: &Path, probe: Option<Arc<dyn Probe>>) -> Router {
    let mut opts = ServeOptions::new(dir);
    opts.probe = probe;
    opts.catalogue = vec![SystemInfo {
        name: "Bob".into(),
        description: "A next-byte predictor with one 256 × 256 logits table.".into(),
        parameters: 65536,
    }];
    router(opts)
}

async fn call(app: &Router, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(uri).header("host", format!("127.0.0.1:{DEFAULT_PORT}"));
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let req = req.body(body.map_or(Body::empty(), |b| Body::from(b.to_string()))).unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 64 << 20).await.unwrap();
    let v = serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, v)
}

async fn get(app: &Router, uri: &str) -> (StatusCode, Value) {
    call(app, "GET", uri, None).await
}

#[test]
fn a_missing_runs_folder_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-runs");
    let e = Server::bind(ServeOptions::new(&missing)).err().unwrap().to_string();
    assert!(e.contains("does not exist") && e.contains("no-such-runs"), "{e}");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let e = Server::bind(ServeOptions::new(&file)).err().unwrap().to_string();
    assert!(e.contains("is a file"), "{e}");
}

#[test]
fn a_port_in_use_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let mut opts = ServeOptions::new(dir.path());
    opts.port = port;
    let e = Server::bind(opts).err().unwrap().to_string();
    assert!(e.contains(&format!("port {port} is in use")), "{e}");
}

/// A run to a 10 s budget, 40 steps of 0.2 s in, warming down over its last 4 s: run.json as
/// its last checkpoint (at 6 s) left it, the points as the trainer writes them.
fn write_budgeted_run(dir: &Path, name: &str) {
    let run = write_run(dir, name, 40, "running", false, 0);
    let mut info: Value = serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
    info["budget_s"] = json!(10.0);
    info["elapsed_s"] = json!(6.0);
    std::fs::write(run.join("run.json"), info.to_string()).unwrap();
    let points: String = (1..=40)
        .map(|step| {
            let spent = 0.2 * step as f64;
            let factor = ((10.0 - (spent - 0.2)) / 4.0).min(1.0);
            format!("{}\n", json!({"step": step, "loss": 3.0, "ms": 200.0, "elapsed_s": spent, "lr_factor": factor}))
        })
        .collect();
    std::fs::write(run.join("points.jsonl"), points).unwrap();
}

#[tokio::test]
async fn a_budgeted_run_shows_its_budget_time_spent_and_factor() {
    let dir = tempfile::tempdir().unwrap();
    write_budgeted_run(dir.path(), "timed");
    let (_, r) = get(&app(dir.path(), None), "/api/runs/timed").await;
    let h = &r["headline"];
    assert_eq!(h["budget_s"], 10.0);
    assert_eq!(h["elapsed_s"], 8.0, "the newest point's time, not run.json's older one");
    assert!((h["lr_factor"].as_f64().unwrap() - 0.55).abs() < 1e-9, "{h}");
    // A run by steps has none.
    write_run(dir.path(), "plain", 10, "finished", false, 0);
    let (_, r) = get(&app(dir.path(), None), "/api/runs/plain").await;
    assert!(r["headline"]["budget_s"].is_null() && r["headline"]["lr_factor"].is_null());
}

#[tokio::test]
async fn the_api_answers_every_record() {
    let dir = tempfile::tempdir().unwrap();
    write_run(dir.path(), "bob-a", 60, "finished", false, 30);
    std::fs::create_dir(dir.path().join("not-a-run")).unwrap();
    let app = app(dir.path(), None);

    let (s, runs) = get(&app, "/api/runs").await;
    assert_eq!(s, StatusCode::OK);
    let list = runs["runs"].as_array().unwrap();
    assert_eq!(list.len(), 1, "a folder without records is not a run: {runs}");
    assert_eq!(list[0]["name"], "bob-a");
    assert_eq!(list[0]["system"], "bob");
    assert_eq!(list[0]["device"], "cpu");
    assert_eq!(list[0]["state"], "finished");
    assert_eq!(list[0]["steps_done"], 60);
    assert_eq!(list[0]["skipped_lines"], 0);

    let (_, run) = get(&app, "/api/runs/bob-a").await;
    let h = &run["headline"];
    assert_eq!(h["tokens_per_s"], 512000.0, "a finished run's summary wins");
    assert!(h["ms_per_step"].as_f64().unwrap() > 3.0);
    assert_eq!(h["steps_done"], 60);
    assert_eq!(h["checkpoints"], 3);
    assert_eq!(h["latest_heldout_step"], 60);
    assert!(h["best_heldout"].as_f64().unwrap() <= h["latest_heldout"].as_f64().unwrap());
    assert_eq!(h["energy_per_token_j"], 0.0012);
    assert_eq!(run["files"]["points"]["rows"], 60);

    let (_, p) = get(&app, "/api/runs/bob-a/points").await;
    assert_eq!(p["total"], 60);
    assert_eq!(p["step"].as_array().unwrap().len(), 60);
    assert_eq!(p["unseen"].as_array().unwrap().iter().filter(|u| u == &&json!(true)).count(), 3);
    let (_, p) = get(&app, "/api/runs/bob-a/points?since=55").await;
    assert_eq!(p["step"], json!([56, 57, 58, 59, 60]));
    let (_, p) = get(&app, "/api/runs/bob-a/points?since=600").await;
    assert_eq!(p["step"], json!([]));

    let (_, l) = get(&app, "/api/runs/bob-a/lineage").await;
    let steps: Vec<u64> = l["rows"].as_array().unwrap().iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [20, 40, 60]);
    let (_, i) = get(&app, "/api/runs/bob-a/invocations").await;
    assert_eq!(i["rows"].as_array().unwrap().len(), 3);
    // Rows written without a device time load, and have none.
    let (_, p) = get(&app, "/api/runs/bob-a/points").await;
    assert!(p["device_ms"].as_array().unwrap().iter().all(Value::is_null), "{}", p["device_ms"]);
    assert_eq!(h["device_ms_per_step"], Value::Null);

    let (_, pr) = get(&app, "/api/runs/bob-a/profile").await;
    assert_eq!(pr["step"], 10);
    assert_eq!(pr["launches"], 7);
    assert_eq!(pr["families"][0]["family"], "gemm");
    assert_eq!(pr["shapes"].as_array().unwrap().len(), 2);

    let (_, t) = get(&app, "/api/runs/bob-a/telemetry").await;
    assert_eq!(t["rows"], 30);
    assert_eq!(t["gpu_available"], false);
    assert!(t["note"].as_str().unwrap().contains("host only"));
    assert_eq!(t["series"]["host.load1"].as_array().unwrap().len(), 30);
    let (_, t) = get(&app, "/api/runs/bob-a/telemetry?max=10").await;
    assert_eq!(t["points"], 10);

    let (_, sys) = get(&app, "/api/systems").await;
    assert_eq!(sys["systems"][0]["name"], "Bob");
    assert_eq!(sys["systems"][0]["runs"][0]["name"], "bob-a");

    for bad in ["/api/runs/nope", "/api/runs/..", "/api/runs/not-a-run%2F..", "/api/runs/.hidden/points"] {
        let (s, v) = get(&app, bad).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{bad}: {v}");
        assert!(v["error"].is_string());
    }
}

#[tokio::test]
async fn each_steps_device_time_is_served_beside_its_wall_time() {
    let dir = tempfile::tempdir().unwrap();
    write_run(dir.path(), "bob-gpu", 60, "finished", true, 0);
    let app = app(dir.path(), None);
    let (_, p) = get(&app, "/api/runs/bob-gpu/points?since=58").await;
    assert_eq!(p["step"], json!([59, 60]));
    let device: Vec<f64> = p["device_ms"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert!((device[0] - 3.059).abs() < 1e-12 && (device[1] - 3.060).abs() < 1e-12, "{device:?}");
    assert_eq!(p["ms"].as_array().unwrap().len(), 2);
    let (_, run) = get(&app, "/api/runs/bob-gpu").await;
    // The mean of the last 20 steps' device times: 3.041 … 3.060.
    let mean = run["headline"]["device_ms_per_step"].as_f64().unwrap();
    assert!((mean - 3.0505).abs() < 1e-9, "{mean}");
}

#[tokio::test]
async fn a_real_nvml_recording_is_charted() {
    let dir = tempfile::tempdir().unwrap();
    write_run(dir.path(), "h200", 20, "finished", true, 0);
    let (_, t) = get(&app(dir.path(), None), "/api/runs/h200/telemetry").await;
    assert_eq!(t["rows"], 42);
    assert_eq!(t["gpu_available"], true);
    assert_eq!(t["gpu_name"], "NVIDIA H200");
    let energy: Vec<f64> =
        t["series"]["gpu.energy_j"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert!(energy.windows(2).all(|w| w[1] >= w[0]), "NVML's energy counter only grows");
    assert!(energy[41] > 1000.0, "{}", energy[41]);
    let power = t["series"]["gpu.power_w"].as_array().unwrap();
    assert!(power.iter().all(|p| p.as_f64().unwrap() > 50.0 && p.as_f64().unwrap() < 700.0));
}

#[tokio::test]
async fn pages_and_assets_are_served_from_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(dir.path(), None);
    for (uri, needle) in [
        ("/", "data-page=\"runs\""),
        ("/systems", "data-page=\"systems\""),
        ("/runs/x%3Cy", "data-run=\"x&lt;y\""),
        ("/assets/app.js", "function chart("),
        ("/assets/style.css", ".card"),
    ] {
        let (s, body) = get(&app, uri).await;
        assert_eq!(s, StatusCode::OK, "{uri}");
        assert!(body.as_str().unwrap().contains(needle), "{uri} lacks {needle}");
    }
    // No page asks for anything off this server.
    let (_, html) = get(&app, "/").await;
    let (_, js) = get(&app, "/assets/app.js").await;
    for text in [html.as_str().unwrap(), js.as_str().unwrap()] {
        assert!(!text.contains("https://") && !text.contains("src=\"http"), "external reference");
    }
}

#[tokio::test]
async fn garbled_and_truncated_lines_are_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let run = write_run(dir.path(), "bob-bad", 40, "running", false, 3);
    let mut f = std::fs::OpenOptions::new().append(true).open(run.join("points.jsonl")).unwrap();
    f.write_all(b"{\"step\":41,\"loss\":2.\n{\"step\":42,\"loss\":2.5}\n{\"step\":43,\"lo").unwrap();
    drop(f);
    std::fs::write(run.join("lineage.jsonl"), "not json at all\n").unwrap();
    let app = app(dir.path(), None);

    let (_, r) = get(&app, "/api/runs/bob-bad").await;
    assert_eq!(r["files"]["points"]["rows"], 41);
    // While running, the unterminated last line is a write in progress, not an error.
    assert_eq!(r["files"]["points"]["skipped"], 1);
    assert_eq!(r["files"]["points"]["partial_tail"], true);
    assert_eq!(r["files"]["points"]["first_bad_lines"], json!([41]));
    assert_eq!(r["files"]["lineage"]["skipped"], 1);
    assert_eq!(r["skipped_lines"], 2);

    // Once the run has ended nothing will finish that line: it counts as skipped too.
    let mut info: Value = serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
    info["state"] = json!("failed");
    std::fs::write(run.join("run.json"), info.to_string()).unwrap();
    let (_, r) = get(&app, "/api/runs/bob-bad").await;
    assert_eq!(r["files"]["points"]["skipped"], 2);
    let (_, runs) = get(&app, "/api/runs").await;
    assert_eq!(runs["runs"][0]["skipped_lines"], 3);

    // A garbled run.json is shown, not fatal.
    std::fs::write(run.join("run.json"), "{\"name\": ").unwrap();
    let (s, r) = get(&app, "/api/runs/bob-bad").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(r["state"], "unknown");
    assert!(r["problem"].as_str().unwrap().contains("run.json does not parse"));
}

#[tokio::test]
async fn polling_returns_only_what_was_appended() {
    let dir = tempfile::tempdir().unwrap();
    let run = write_run(dir.path(), "live", 20, "running", false, 1);
    let app = app(dir.path(), None);
    let (_, p) = get(&app, "/api/runs/live/points?since=0").await;
    assert_eq!(p["total"], 20);
    let mut f = std::fs::OpenOptions::new().append(true).open(run.join("points.jsonl")).unwrap();
    for step in 21..=23 {
        writeln!(f, "{}", json!({"step": step, "loss": 2.0, "tokens": step * 2048, "ms": 4.0, "unseen": false}))
            .unwrap();
    }
    let (_, p) = get(&app, "/api/runs/live/points?since=20").await;
    assert_eq!(p["total"], 23);
    assert_eq!(p["step"], json!([21, 22, 23]));
    assert_eq!(p["p10"], json!([null, null, null]));
}

/// Echoes the prompt; "fail" fails. Counts its loads.
#[derive(Default)]
struct EchoProbe {
    loads: std::sync::atomic::AtomicUsize,
}

struct EchoModel;

impl Probe for EchoProbe {
    fn load(&self, run_dir: &Path, checkpoint: &Path) -> anyhow::Result<Arc<dyn LoadedModel>> {
        assert!(checkpoint.starts_with(run_dir));
        self.loads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Arc::new(EchoModel))
    }
}

impl LoadedModel for EchoModel {
    fn probe(&self, prompt: &str, tokens: usize) -> anyhow::Result<ProbeResult> {
        if prompt == "fail" {
            anyhow::bail!("the checkpoint does not load");
        }
        Ok(ProbeResult {
            continuation: format!("{} after {prompt:?}", "x".repeat(tokens)),
            top_next: vec![(" ".into(), 0.6), ("e".into(), 0.3)],
        })
    }
}

/// Writes an empty file at each checkpoint path of `run`'s lineage.
fn touch_checkpoints(run: &Path) {
    std::fs::create_dir_all(run.join("checkpoints")).unwrap();
    for line in std::fs::read_to_string(run.join("lineage.jsonl")).unwrap().lines() {
        let row: Value = serde_json::from_str(line).unwrap();
        std::fs::write(run.join(row["path"].as_str().unwrap()), "weights").unwrap();
    }
}

#[tokio::test]
async fn the_probe_runs_listed_checkpoints_only() {
    let dir = tempfile::tempdir().unwrap();
    let run = write_run(dir.path(), "bob-p", 40, "finished", false, 1);
    touch_checkpoints(&run);
    let body = |ckpt: &str, prompt: &str| Some(json!({"checkpoint": ckpt, "prompt": prompt, "tokens": 3}));
    let uri = "/api/runs/bob-p/probe";

    let (s, v) = call(&app(dir.path(), None), "POST", uri, body("checkpoints/step-000020.safetensors", "a")).await;
    assert_eq!(s, StatusCode::NOT_IMPLEMENTED, "{v}");

    let app = app(dir.path(), Some(Arc::new(EchoProbe::default())));
    let (s, v) = call(&app, "POST", uri, body("checkpoints/step-000040.safetensors", "The")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["continuation"], "xxx after \"The\"");
    assert_eq!(v["top_next"][0], json!([" ", 0.6]));
    let (s, _) = call(&app, "POST", uri, body("../../etc/passwd", "The")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, v) = call(&app, "POST", uri, body("checkpoints/step-000020.safetensors", "fail")).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(v["error"].as_str().unwrap().contains("does not load"));
}

/// One HTTP/1.1 GET over a plain socket, as a browser would send it.
fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    (status, out)
}

#[test]
fn the_server_answers_over_tcp_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    write_run(dir.path(), "tcp", 20, "finished", false, 2);
    let mut opts = ServeOptions::new(dir.path());
    opts.port = 0;
    let mut server = Server::bind(opts).unwrap().spawn();
    let (status, body) = http_get(server.addr(), "/api/runs");
    assert_eq!(status, 200);
    assert!(body.contains("\"name\":\"tcp\""), "{body}");
    let (status, _) = http_get(server.addr(), "/nowhere");
    assert_eq!(status, 404);
    let addr = server.addr();
    server.stop();
    assert!(std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err());
}

/// Where test screenshots go: `ALPHA_SCREENSHOT_DIR` if set, else the target folder.
fn screenshot_dir() -> PathBuf {
    std::env::var_os("ALPHA_SCREENSHOT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/screenshots"))
}

#[test]
fn the_pages_draw_the_records_in_a_real_browser() {
    if !webdriver::Browser::available() {
        eprintln!(
            "skipped: {} or {} is missing (apt-get install chromium chromium-driver)",
            webdriver::CHROMIUM,
            webdriver::CHROMEDRIVER
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let gpu_run = write_run(&runs, "bob-gpu", 120, "finished", true, 240);
    write_run(&runs, "bob-cpu", 60, "running", false, 40);
    write_budgeted_run(&runs, "timed");
    // The GPU run started by --skip-gates with the update gate failed for its build.
    skip_gates(&gpu_run, &runs);
    let mut opts = ServeOptions::new(&runs);
    opts.port = 0;
    opts.catalogue = vec![SystemInfo {
        name: "Bob".into(),
        description: "The smallest system: a next-byte predictor with one 256 × 256 logits table.".into(),
        parameters: 65536,
    }];
    let server = Server::bind(opts).unwrap().spawn();
    let profile = dir.path().join("chromium-profile");
    let b = webdriver::Browser::launch(&profile, 1280, 900).unwrap();
    let shots = screenshot_dir();
    std::fs::create_dir_all(&shots).unwrap();

    b.goto(&format!("{}/runs/bob-gpu", server.url())).unwrap();
    b.wait_for("return document.body.dataset.loaded === '1'", Duration::from_secs(20)).unwrap();
    let n = b.execute("return +document.querySelector('#chart-loss svg').dataset.points", vec![]).unwrap();
    assert_eq!(n, 120);
    // The step-time chart draws the device's clock beside the host's, each named.
    let ms = b
        .execute(
            "const s = document.querySelector('#chart-ms svg'); return [+s.dataset.device, s.dataset.series]",
            vec![],
        )
        .unwrap();
    assert_eq!(ms[0], 120, "{ms}");
    assert_eq!(ms[1], "wall ms (host clock)|device ms (device clock)");
    let note = b.execute("return document.querySelector('#stat-ms .note').textContent", vec![]).unwrap();
    assert!(note.as_str().unwrap().contains("device 3.11 ms"), "{note}");
    let rows = b
        .execute("return [...document.querySelectorAll('#lineage-table tbody tr')].map(r => [+r.dataset.step, r.dataset.sha])", vec![])
        .unwrap();
    let steps: Vec<u64> = rows.as_array().unwrap().iter().map(|r| r[0].as_u64().unwrap()).collect();
    assert_eq!(steps, [120, 100, 80, 60, 40, 20], "newest first");
    let gpu = b.execute("return +document.querySelector('#chart-gpu-power svg').dataset.points", vec![]).unwrap();
    assert_eq!(gpu, H200_TELEMETRY.lines().count());
    let fam = b.execute("return document.querySelectorAll('#family-table tbody tr').length", vec![]).unwrap();
    assert_eq!(fam, 5);
    let gates = b.execute("return document.querySelectorAll('#gates-list li[data-gate]').length", vec![]).unwrap();
    assert_eq!(gates, 5, "the ledger's every record");
    let skipped = b.execute("return document.querySelector('#gates-skipped').textContent", vec![]).unwrap();
    assert!(skipped.as_str().unwrap().contains("update"), "{skipped}");
    for (sel, file) in [
        ("#gates-card", "card-gates"),
        ("#loss-card", "card-loss"),
        ("#profile-card", "card-profile"),
        ("#telemetry-card", "card-telemetry"),
        ("#lineage-card", "card-lineage"),
        ("#headline", "card-headline"),
    ] {
        std::fs::write(shots.join(format!("dash-{file}.png")), b.element_png(sel).unwrap()).unwrap();
    }
    std::fs::write(shots.join("dash-run-gpu.png"), b.full_page_png(1280).unwrap()).unwrap();

    b.resize(1280, 900).unwrap();
    b.goto(&format!("{}/", server.url())).unwrap();
    b.wait_for("return document.querySelectorAll('#runs-table tbody tr').length === 3", Duration::from_secs(10))
        .unwrap();
    std::fs::write(shots.join("dash-runs.png"), b.screenshot_png().unwrap()).unwrap();
    b.goto(&format!("{}/systems", server.url())).unwrap();
    b.wait_for("return document.querySelectorAll('.system').length === 1", Duration::from_secs(10)).unwrap();
    std::fs::write(shots.join("dash-systems.png"), b.screenshot_png().unwrap()).unwrap();
    b.goto(&format!("{}/runs/bob-cpu", server.url())).unwrap();
    b.wait_for("return document.body.dataset.loaded === '1'", Duration::from_secs(20)).unwrap();
    let note = b.execute("return document.querySelector('#gpu-sub').textContent", vec![]).unwrap();
    assert!(note.as_str().unwrap().contains("No GPU telemetry"), "{note}");
    let ms = b.execute("return document.querySelector('#chart-ms svg').dataset.series", vec![]).unwrap();
    assert_eq!(ms, "wall ms (host clock)", "rows without a device time draw the wall line alone");
    let budget = b.execute("return document.querySelector('#stat-budget') === null", vec![]).unwrap();
    assert_eq!(budget, true, "a run by steps shows no budget");
    std::fs::write(shots.join("dash-run-cpu.png"), b.full_page_png(1280).unwrap()).unwrap();
    b.goto(&format!("{}/runs/timed", server.url())).unwrap();
    b.wait_for("return document.body.dataset.loaded === '1'", Duration::from_secs(20)).unwrap();
    let stat = b.execute("return document.querySelector('#stat-budget').innerText", vec![]).unwrap();
    let stat = stat.as_str().unwrap();
    assert!(stat.contains("2.0 s") && stat.contains("of 10.0 s") && stat.contains("×0.550"), "{stat}");
    std::fs::write(shots.join("dash-card-headline-budget.png"), b.element_png("#headline").unwrap()).unwrap();
}

#[test]
fn hosts_other_than_this_server_are_refused() {
    let local = HostCheck { bound: IpAddr::V4(Ipv4Addr::LOCALHOST), port: 8080 };
    for ok in ["127.0.0.1:8080", "localhost:8080", "LOCALHOST.:8080", "[::1]:8080", "127.0.0.2:8080"] {
        assert!(local.allows(ok), "{ok}");
    }
    for bad in [
        "evil.example:8080",
        "evil.example",
        "127.0.0.1",
        "127.0.0.1:8081",
        "localhost:80",
        "192.168.1.5:8080",
        "::1",
        "[::1]",
        "",
        "127.0.0.1:8080:1",
        "localhost.evil.example:8080",
    ] {
        assert!(!local.allows(bad), "{bad}");
    }
    // Bound to a LAN address, or to every interface: IP addresses are names no page can rebind.
    let lan = HostCheck { bound: "192.168.1.5".parse().unwrap(), port: 80 };
    assert!(lan.allows("192.168.1.5") && lan.allows("192.168.1.5:80") && lan.allows("localhost"));
    assert!(!lan.allows("192.168.1.6") && !lan.allows("nas.local"));
    let any = HostCheck { bound: "0.0.0.0".parse().unwrap(), port: 8080 };
    assert!(any.allows("10.0.0.7:8080") && !any.allows("rebind.example:8080"));
}

async fn request(app: &Router, method: &str, uri: &str, headers: &[(&str, &str)], body: Option<Value>) -> Response {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    app.clone().oneshot(req.body(body.map_or(Body::empty(), |b| Body::from(b.to_string()))).unwrap()).await.unwrap()
}

async fn json_of(resp: Response) -> Value {
    serde_json::from_slice(&axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap()).unwrap()
}

#[tokio::test]
async fn a_foreign_host_or_origin_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let run = write_run(dir.path(), "bob", 20, "finished", false, 1);
    touch_checkpoints(&run);
    let probe = Arc::new(EchoProbe::default());
    let app = app(dir.path(), Some(probe.clone()));
    let own = format!("127.0.0.1:{DEFAULT_PORT}");

    for uri in ["/", "/api/runs", "/assets/app.js", "/nowhere"] {
        let resp = request(&app, "GET", uri, &[("host", "rebound.example:8080")], None).await;
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{uri}");
        let v = json_of(resp).await;
        assert!(v["error"].as_str().unwrap().contains("Host \"rebound.example:8080\""), "{v}");
    }
    let resp = request(&app, "GET", "/api/runs", &[], None).await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN, "no Host at all");
    let resp = request(&app, "GET", "/api/runs", &[("host", &own), ("origin", "http://evil.example")], None).await;
    assert_eq!(resp.status(), StatusCode::OK, "a cross-origin GET reads nothing: no CORS header lets it");

    let body = json!({"checkpoint": "checkpoints/step-000020.safetensors", "prompt": "a", "tokens": 2});
    for origin in ["http://evil.example", "null", "http://127.0.0.1:8081", "https://127.0.0.1:8080"] {
        let resp =
            request(&app, "POST", "/api/runs/bob/probe", &[("host", &own), ("origin", origin)], Some(body.clone()))
                .await;
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{origin}");
        assert!(json_of(resp).await["error"].as_str().unwrap().contains("Origin"));
    }
    assert_eq!(probe.loads.load(std::sync::atomic::Ordering::SeqCst), 0, "refused probes load nothing");
    let same = format!("http://{own}");
    let resp =
        request(&app, "POST", "/api/runs/bob/probe", &[("host", &own), ("origin", &same)], Some(body.clone())).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let resp = request(&app, "POST", "/api/runs/bob/probe", &[("host", &own)], Some(body)).await;
    assert_eq!(resp.status(), StatusCode::OK, "no Origin: not from a page, so not cross-site");
}

/// A probe whose runs wait until `open` is set, counting those waiting.
#[derive(Default)]
struct GatedProbe {
    open: std::sync::atomic::AtomicBool,
    waiting: std::sync::atomic::AtomicUsize,
}

impl Probe for Arc<GatedProbe> {
    fn load(&self, _run_dir: &Path, _checkpoint: &Path) -> anyhow::Result<Arc<dyn LoadedModel>> {
        Ok(Arc::new(self.clone()))
    }
}

impl LoadedModel for Arc<GatedProbe> {
    fn probe(&self, _prompt: &str, _tokens: usize) -> anyhow::Result<ProbeResult> {
        use std::sync::atomic::Ordering::SeqCst;
        self.waiting.fetch_add(1, SeqCst);
        while !self.open.load(SeqCst) {
            std::thread::sleep(Duration::from_millis(2));
        }
        self.waiting.fetch_sub(1, SeqCst);
        Ok(ProbeResult::default())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_beyond_the_limit_are_told_to_retry() {
    use std::sync::atomic::Ordering::SeqCst;
    let dir = tempfile::tempdir().unwrap();
    let run = write_run(dir.path(), "bob", 20, "finished", false, 1);
    touch_checkpoints(&run);
    let gate = Arc::new(GatedProbe::default());
    let app = app(dir.path(), Some(Arc::new(gate.clone())));
    let body = Some(json!({"checkpoint": "checkpoints/step-000020.safetensors", "prompt": "a", "tokens": 2}));
    let running: Vec<_> = (0..MAX_PROBES_IN_FLIGHT)
        .map(|_| {
            let (app, body) = (app.clone(), body.clone());
            tokio::spawn(async move { call(&app, "POST", "/api/runs/bob/probe", body).await })
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while gate.waiting.load(SeqCst) < MAX_PROBES_IN_FLIGHT {
        assert!(std::time::Instant::now() < deadline, "the first probes never started");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for _ in 0..5 {
        let resp = request(&app, "POST", "/api/runs/bob/probe", &[("host", "localhost:8080")], body.clone()).await;
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        assert!(json_of(resp).await["error"].as_str().unwrap().contains("probes are already running"));
    }
    assert_eq!(gate.waiting.load(SeqCst), MAX_PROBES_IN_FLIGHT, "the refused ones never ran");
    gate.open.store(true, SeqCst);
    for r in running {
        assert_eq!(r.await.unwrap().0, StatusCode::OK);
    }
    // The permits came back.
    assert_eq!(call(&app, "POST", "/api/runs/bob/probe", body).await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_probed_checkpoint_is_loaded_once_until_it_changes() {
    use std::sync::atomic::Ordering::SeqCst;
    let dir = tempfile::tempdir().unwrap();
    let run = write_run(dir.path(), "bob", 60, "finished", false, 1);
    touch_checkpoints(&run);
    let probe = Arc::new(EchoProbe::default());
    let app = app(dir.path(), Some(probe.clone()));
    let ask = |step: u64| {
        let app = app.clone();
        async move {
            let body =
                json!({"checkpoint": format!("checkpoints/step-{step:06}.safetensors"), "prompt": "a", "tokens": 2});
            let (s, v) = call(&app, "POST", "/api/runs/bob/probe", Some(body)).await;
            assert_eq!(s, StatusCode::OK, "{v}");
        }
    };
    for _ in 0..5 {
        ask(20).await;
    }
    assert_eq!(probe.loads.load(SeqCst), 1, "repeated probes reuse the loaded checkpoint");
    ask(40).await;
    ask(20).await;
    assert_eq!(probe.loads.load(SeqCst), 2, "two checkpoints fit");
    ask(60).await; // drops 40, the least recently used
    ask(20).await;
    assert_eq!(probe.loads.load(SeqCst), 3);
    ask(40).await;
    assert_eq!(probe.loads.load(SeqCst), 4, "an evicted checkpoint is loaded again");
    // Rewritten in place: loaded again.
    std::fs::write(run.join("checkpoints/step-000040.safetensors"), "other weights, longer").unwrap();
    ask(40).await;
    assert_eq!(probe.loads.load(SeqCst), 5);
}

#[tokio::test]
async fn lineage_paths_and_run_links_outside_the_runs_folder_are_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let run = write_run(&runs, "bob", 20, "finished", false, 1);
    let outside = dir.path().join("outside");
    write_run(&outside, "secret", 20, "finished", false, 1);
    std::fs::write(outside.join("weights.safetensors"), "secret").unwrap();
    let mut lineage = std::fs::OpenOptions::new().append(true).open(run.join("lineage.jsonl")).unwrap();
    for path in ["/etc/passwd", "../../outside/weights.safetensors", "../bob/../../outside/weights.safetensors"] {
        writeln!(lineage, "{}", json!({"step": 99, "path": path, "sha256": "00"})).unwrap();
    }
    std::os::unix::fs::symlink(outside.join("secret"), runs.join("escape")).unwrap();
    std::os::unix::fs::symlink(&run, runs.join("latest")).unwrap();
    let probe = Arc::new(EchoProbe::default());
    let app = app(&runs, Some(probe.clone()));

    for path in ["/etc/passwd", "../../outside/weights.safetensors", "../bob/../../outside/weights.safetensors"] {
        let body = json!({"checkpoint": path, "prompt": "a", "tokens": 2});
        let (s, v) = call(&app, "POST", "/api/runs/bob/probe", Some(body)).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{path}: {v}");
        assert!(v["error"].as_str().unwrap().contains("outside the runs folder"), "{v}");
    }
    assert_eq!(probe.loads.load(std::sync::atomic::Ordering::SeqCst), 0);
    let body = json!({"checkpoint": "checkpoints/step-000020.safetensors", "prompt": "a", "tokens": 2});
    let (s, v) = call(&app, "POST", "/api/runs/bob/probe", Some(body)).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "a listed checkpoint whose file is gone: {v}");

    let (_, list) = get(&app, "/api/runs").await;
    let names: Vec<&str> = list["runs"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"bob") && names.contains(&"latest"), "a link inside the runs folder is a run: {names:?}");
    assert_eq!(list["skipped"][0]["name"], "escape");
    assert!(list["skipped"][0]["reason"].as_str().unwrap().contains("outside the runs folder"));
    for uri in ["/api/runs/escape", "/api/runs/escape/points", "/api/runs/escape/lineage"] {
        assert_eq!(get(&app, uri).await.0, StatusCode::NOT_FOUND, "{uri}");
    }
    let (_, sys) = get(&app, "/api/systems").await;
    assert_eq!(sys["systems"][0]["runs"].as_array().unwrap().len(), 2, "{sys}");

    // A record file that links out is not read either, and the run says why.
    std::fs::remove_file(run.join("points.jsonl")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret/points.jsonl"), run.join("points.jsonl")).unwrap();
    let (_, r) = get(&app, "/api/runs/bob").await;
    assert_eq!(r["files"]["points"]["rows"], 0);
    assert!(r["files"]["points"]["problem"].as_str().unwrap().contains("outside the runs folder"), "{r}");
}

#[tokio::test]
async fn a_running_run_whose_process_is_gone_shows_as_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let run = write_run(dir.path(), "bob", 40, "running", false, 1);
    let app = app(dir.path(), None);
    let set_pid = |pid: u32| {
        let mut info: Value = serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
        info["pid"] = json!(pid);
        info["last_checkpoint"] = json!("checkpoints/step-000040.safetensors");
        std::fs::write(run.join("run.json"), info.to_string()).unwrap();
    };
    set_pid(std::process::id());
    let (_, r) = get(&app, "/api/runs/bob").await;
    assert_eq!(r["state"], "running", "its process (this test) is alive");

    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    set_pid(pid);
    let (_, r) = get(&app, "/api/runs/bob").await;
    assert_eq!(r["state"], "interrupted", "{r}");
    let message = r["run"]["message"].as_str().unwrap();
    assert!(message.contains("step-000040") && message.contains(&pid.to_string()), "{message}");
    let (_, runs) = get(&app, "/api/runs").await;
    assert_eq!(runs["runs"][0]["state"], "interrupted");
}

#[test]
fn a_branch_is_drawn_apart_from_the_line_it_left() {
    if !webdriver::Browser::available() {
        eprintln!("skipped: {} or {} is missing", webdriver::CHROMIUM, webdriver::CHROMEDRIVER);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // 60 steps on the main line, then a resume from step 20's checkpoint: branch 1, steps 21-45,
    // its checkpoint at 40 in checkpoints/branch-1/.
    let run = write_run(dir.path(), "bob", 60, "finished", false, 2);
    let mut points = std::fs::OpenOptions::new().append(true).open(run.join("points.jsonl")).unwrap();
    for step in 21..=45u64 {
        let row = json!({"step": step, "loss": 2.3 + 3.1 * (-(step as f64) / 12.0).exp(), "unseen": step == 21, "invocation": 2, "branch": 1});
        writeln!(points, "{row}").unwrap();
    }
    let mut lineage = std::fs::OpenOptions::new().append(true).open(run.join("lineage.jsonl")).unwrap();
    let row = json!({"step": 40, "path": "checkpoints/branch-1/step-000040.safetensors", "sha256": "b1".repeat(32),
                     "heldout_loss": 2.4, "branch": 1});
    writeln!(lineage, "{row}").unwrap();
    let mut opts = ServeOptions::new(dir.path());
    opts.port = 0;
    let server = Server::bind(opts).unwrap().spawn();
    let b = webdriver::Browser::launch(&dir.path().join("chromium-profile"), 1280, 900).unwrap();
    b.goto(&format!("{}/runs/bob", server.url())).unwrap();
    b.wait_for("return document.body.dataset.loaded === '1'", Duration::from_secs(20)).unwrap();
    let chart = b
        .execute(
            "const s = document.querySelector('#chart-loss svg'); return [+s.dataset.points, +s.dataset.left, +s.dataset.unseen]",
            vec![],
        )
        .unwrap();
    assert_eq!(chart, json!([45, 40, 2]), "steps 1-20 and the branch's 21-45 drawn; the main line's 21-60 apart");
    let badges = b
        .execute(
            "return [...document.querySelectorAll('#lineage-table tbody tr')].map(r => r.cells[0].textContent.trim())",
            vec![],
        )
        .unwrap();
    assert_eq!(badges, json!(["40 branch 1", "60", "40", "20"]));
    let sub = b.execute("return document.querySelector('#loss-sub').textContent", vec![]).unwrap();
    assert!(sub.as_str().unwrap().contains("45 steps"), "{sub}");
    let shots = screenshot_dir();
    std::fs::create_dir_all(&shots).unwrap();
    std::fs::write(shots.join("dash-run-branch.png"), b.full_page_png(1280).unwrap()).unwrap();
}

/// A gate ledger row for `system`: `gate` on `device`, judged on `build`.
fn gate_row(system: &str, gate: &str, device: &str, build: &str, passed: bool) -> String {
    let case = |w: &str| {
        json!({"weights": w, "passed": passed, "evidence": [format!("{gate} on {w} weights")],
               "figures": [{"name": "lowest cosine", "value": if passed { 0.99999 } else { 0.9 }, "threshold": "≥ 0.9999", "holds": passed}]})
    };
    let gpu = (device == "cuda").then_some("NVIDIA H200");
    let row = json!({"gate": gate, "system": system, "device": device, "gpu": gpu, "batch": 2, "seed": 1, "passed": passed,
                     "build": build, "commit": null, "time": "2026-05-01T09:00:00Z", "cases": [case("initial"), case("perturbed")]});
    format!("{row}\n")
}

/// Marks `run` as started on cuda by --skip-gates, its build having passed every gate but
/// update, and writes Bob's ledger under `runs`: one record of another build, then the four.
fn skip_gates(run: &Path, runs: &Path) {
    let build = "ab".repeat(32);
    let mut info: Value = serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
    info["gates"] = json!({"build": build, "device": "cuda", "skipped": true, "passed": ["forward", "gradient", "causality"],
                           "missing": ["update"], "ledger": "runs/.gates/bob.jsonl"});
    std::fs::write(run.join("run.json"), info.to_string()).unwrap();
    let mut ledger = String::new();
    ledger += &gate_row("bob", "forward", "cuda", &"cd".repeat(32), true); // another build's
    for (gate, passed) in [("forward", true), ("gradient", true), ("update", false), ("causality", true)] {
        ledger += &gate_row("bob", gate, "cuda", &build, passed);
    }
    std::fs::create_dir_all(runs.join(".gates")).unwrap();
    std::fs::write(runs.join(".gates/bob.jsonl"), ledger).unwrap();
}

#[tokio::test]
async fn the_gate_ledger_the_cost_curve_and_the_catalogue_come_from_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let run = write_run(dir.path(), "bob-gpu", 60, "finished", true, 0);
    skip_gates(&run, dir.path());
    // Checkpoints scored with their error, cost and a sample.
    let lineage: String = (1..=3u64)
        .map(|k| {
            let row = json!({"step": 20 * k, "path": format!("checkpoints/step-{:06}.safetensors", 20 * k), "sha256": format!("{k:064}"),
                             "heldout_loss": 2.0 / k as f64, "heldout_bpb": 3.0 / k as f64, "heldout_bpb_se": 0.01, "heldout_loss_se": 0.007,
                             "device_s": 1.5 * k as f64, "energy_j": 400.0 * k as f64, "sample_prompt": "The ", "sample": format!("king {k}")});
            format!("{row}\n")
        })
        .collect();
    std::fs::write(run.join("lineage.jsonl"), lineage).unwrap();
    let app = app(dir.path(), None);

    let (s, g) = get(&app, "/api/runs/bob-gpu/gates").await;
    assert_eq!(s, StatusCode::OK);
    let gates: Vec<&str> = g["records"].as_array().unwrap().iter().map(|r| r["gate"].as_str().unwrap()).collect();
    assert_eq!(gates, ["forward", "forward", "gradient", "update", "causality"], "the ledger in its order");
    let mine: Vec<bool> =
        g["records"].as_array().unwrap().iter().map(|r| r["for_this_run"].as_bool().unwrap()).collect();
    assert_eq!(mine, [false, true, true, true, true], "only records of the run's build count for it");
    assert_eq!(g["records"][3]["cases"][0]["figures"][0]["holds"], false, "a failure keeps its evidence");
    assert!(
        g["note"].as_str().unwrap().contains("--skip-gates") && g["note"].as_str().unwrap().contains("update"),
        "{g}"
    );

    let (_, runs) = get(&app, "/api/runs").await;
    assert_eq!(runs["runs"][0]["gates_skipped"], true, "the runs list says the gates were skipped");

    let (_, c) = get(&app, "/api/runs/bob-gpu/curve").await;
    let pts = c["points"].as_array().unwrap();
    assert_eq!(pts.len(), 3);
    assert_eq!(
        (pts[2]["bpb"].as_f64(), pts[2]["bpb_se"].as_f64(), pts[2]["device_s"].as_f64()),
        (Some(1.0), Some(0.01), Some(4.5))
    );
    assert_eq!((pts[2]["energy_j"].as_f64(), pts[2]["sample"].as_str()), (Some(1200.0), Some("king 3")));
    assert!(c["heldout"].is_null(), "scored on its own held-out windows: {c}");
    // A run scored on another preparation's bytes says so beside its curve.
    let mut info: Value = serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
    info["heldout"] = json!("64 windows of 2,048 bytes from data/gutenberg-bytes");
    std::fs::write(run.join("run.json"), info.to_string()).unwrap();
    let (_, c) = get(&app, "/api/runs/bob-gpu/curve").await;
    assert_eq!(c["heldout"], "64 windows of 2,048 bytes from data/gutenberg-bytes");
    // The headline's energy is the run's, from its first step (the newest checkpoint's), while
    // run.json's summary holds only the last invocation's.
    let info = std::fs::read_to_string(run.join("run.json")).unwrap();
    let last_invocation = info.replace("\"energy_j\":1200.0", "\"energy_j\":300.0");
    assert_ne!(info, last_invocation, "{info}");
    std::fs::write(run.join("run.json"), last_invocation).unwrap();
    let (_, r) = get(&app, "/api/runs/bob-gpu").await;
    assert_eq!(r["headline"]["energy_j"], 1200.0, "{}", r["headline"]);

    // The catalogue: Bob on cuda from its ledger (update missing), with the run's best score.
    let (_, sys) = get(&app, "/api/systems").await;
    let devices = sys["systems"][0]["devices"].as_array().unwrap();
    let names: Vec<&str> = devices.iter().map(|d| d["device"].as_str().unwrap()).collect();
    assert_eq!(names, ["cpu", "cuda"]);
    assert_eq!(devices[1]["gates_missing"], json!(["update"]));
    assert!(
        devices[1]["state"].as_str().unwrap().starts_with("NVIDIA H200: gates passed 3 of 4 (not update)"),
        "{}",
        devices[1]
    );
    assert_eq!(devices[1]["ungated_runs"], 1);
    assert_eq!(devices[1]["best_bpb"].as_f64(), Some(1.0));
}

#[tokio::test]
async fn a_system_without_gate_records_or_runs_is_shown_on_the_cpu_only() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(dir.path(), None);
    let (_, sys) = get(&app, "/api/systems").await;
    let devices = sys["systems"][0]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1, "{devices:?}");
    assert_eq!(devices[0]["device"], "cpu");
    let (_, g) = get(&app, "/api/runs/none/gates").await;
    assert!(g["error"].as_str().unwrap().contains("no run named"), "{g}");
}

/// A safetensors file of f32 tensors, written as the format lays it out: 8 bytes of header
/// length, the JSON header, then each tensor's bytes.
fn write_safetensors(path: &Path, tensors: &[(&str, Vec<usize>, Vec<f32>)]) {
    let mut header = serde_json::Map::new();
    let mut data = vec![];
    for (name, shape, values) in tensors {
        let start = data.len();
        data.extend(values.iter().flat_map(|x| x.to_le_bytes()));
        header.insert(name.to_string(), json!({"dtype": "F32", "shape": shape, "data_offsets": [start, data.len()]}));
    }
    header.insert("__metadata__".into(), json!({"format": "alpha-checkpoint-2"}));
    let mut h = serde_json::to_vec(&header).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend(h);
    bytes.extend(data);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// A KickDelta-named run whose lineage lists three checkpoints, one of them deleted: the views
/// answer the two kept ones, each checkpoint is read once however often the page asks, and only
/// the tensors a view names are read (a decoy tensor with a damaged byte range is never touched).
#[tokio::test]
async fn tracked_views_read_each_kept_checkpoint_once() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let run = write_run(&runs, "kd", 40, "finished", false, 2);
    let mut info: Value = serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
    info["system"] = json!("kickdelta");
    std::fs::write(run.join("run.json"), info.to_string()).unwrap();
    let mut lineage = String::new();
    for step in [10u64, 20, 30] {
        let path = format!("checkpoints/step-{step:06}.safetensors");
        lineage += &format!("{}\n", json!({"step": step, "path": path, "sha256": format!("{step:064}")}));
        if step == 20 {
            continue; // listed, but gone
        }
        let freq: Vec<f32> = (0..8).map(|g| 16.0 * (17.0 + 2.0 * g as f32) + step as f32).collect();
        write_safetensors(
            &run.join(&path),
            &[
                ("oscillators.frequency", vec![8], freq),
                ("oscillators.phase", vec![8, 6], vec![0.0; 48]),
                ("keys.write_strength.weight", vec![192, 1], vec![0.0; 192]),
                ("keys.write_strength.bias", vec![1], vec![step as f32 / 10.0]),
                ("memory.initial", vec![256, 15], vec![1.0; 3840]),
            ],
        );
    }
    std::fs::write(run.join("lineage.jsonl"), lineage).unwrap();
    // The decoy: marked I32, so reading it would fail the view.
    for step in [10, 30] {
        let path = run.join(format!("checkpoints/step-{step:06}.safetensors"));
        let mut bytes = std::fs::read(&path).unwrap();
        let entry = br#""dtype":"F32","shape":[256,15]"#;
        let at = bytes.windows(entry.len()).position(|w| w == entry).expect("the decoy's header entry");
        bytes[at + 9] = b'I';
        std::fs::write(&path, bytes).unwrap();
    }
    let opts = ServeOptions::new(&runs);
    let state_app = router(opts);
    let (status, v) = get(&state_app, "/api/runs/kd/views").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["system"], "kickdelta");
    let ids: Vec<&str> = v["views"].as_array().unwrap().iter().map(|x| x["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["oscillators", "write-strengths", "parameters"]);
    let osc = &v["views"][0]["checkpoints"];
    let steps: Vec<u64> = osc.as_array().unwrap().iter().map(|c| c["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [10, 30], "the deleted checkpoint is not kept");
    for (i, step) in [10.0, 30.0].into_iter().enumerate() {
        let f = &osc[i]["series"][0]["values"];
        assert!(osc[i]["error"].is_null(), "{}", osc[i]);
        assert_eq!(f[0].as_f64().unwrap(), 17.0 + step / 16.0, "{f}");
        assert_eq!(f[7].as_f64().unwrap(), 31.0 + step / 16.0, "{f}");
        // Zero weights: every pair's β is σ(b).
        let beta = &v["views"][1]["checkpoints"][i]["series"][0]["values"];
        let want = 1.0 / (1.0 + (-(step as f32 / 10.0) as f64).exp());
        assert!(beta.as_array().unwrap().iter().all(|b| (b.as_f64().unwrap() - want).abs() < 1e-12), "{beta}");
    }
    assert_eq!(v["views"][2]["kind"], "table");
    // Asked again: answered from the cache. The file is changed in place to other numbers of
    // the same size and its modification time put back, so only a re-read would see them.
    let first = run.join("checkpoints/step-000010.safetensors");
    let modified = std::fs::metadata(&first).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&first).unwrap();
    let n = bytes.len();
    bytes[n - 4..].copy_from_slice(&9.0f32.to_le_bytes());
    std::fs::write(&first, &bytes).unwrap();
    std::fs::File::options().write(true).open(&first).unwrap().set_modified(modified).unwrap();
    let (_, again) = get(&state_app, "/api/runs/kd/views").await;
    assert_eq!(again, v);
    // A rewritten checkpoint is read again: its size or time changed.
    write_safetensors(
        &run.join("checkpoints/step-000030.safetensors"),
        &[
            ("oscillators.frequency", vec![8], vec![320.0; 8]),
            ("oscillators.phase", vec![8, 6], vec![0.0; 48]),
            ("keys.write_strength.weight", vec![192, 1], vec![0.0; 192]),
            ("keys.write_strength.bias", vec![1], vec![0.0]),
        ],
    );
    let (_, changed) = get(&state_app, "/api/runs/kd/views").await;
    assert_eq!(changed["views"][0]["checkpoints"][1]["series"][0]["values"][3], 20.0);
}

#[test]
fn a_view_reads_only_the_tensors_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.safetensors");
    write_safetensors(
        &path,
        &[("a.g", vec![2], vec![1.5, -2.0]), ("b", vec![3], vec![7.0; 3]), ("a.h", vec![1], vec![0.25])],
    );
    let index = views::read_index(&path).unwrap();
    assert_eq!(index.len(), 3);
    assert_eq!(index["b"].shape, [3]);
    let t = views::read_tensors(&path, |n| n.starts_with("a.")).unwrap();
    assert_eq!(t.keys().collect::<Vec<_>>(), ["a.g", "a.h"]);
    assert_eq!(t["a.g"], (vec![2], vec![1.5, -2.0]));
    // A header claiming more bytes than the file holds is refused, not followed.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(bytes.len() - 8);
    std::fs::write(&path, bytes).unwrap();
    let e = views::read_index(&path).unwrap_err();
    assert!(e.to_string().contains("past the file's end"), "{e}");
}

/// `health.jsonl` rows come back whole from `/api/runs/{name}/health`, a torn last line skipped
/// and counted, and the run's file list counts them.
#[tokio::test]
async fn the_api_returns_the_health_rows() {
    let dir = tempfile::tempdir().unwrap();
    let run = write_run(dir.path(), "healthy", 4, "running", false, 0);
    let row = |step: u64, bad: u64| {
        json!({"step": step, "invocation": 1, "branch": 0, "tensors": [
            {"tensor": "embed.weight", "numel": 8, "norms": {"grad": 0.5, "param": 2.0, "update": 0.01, "adam_m": 0.05, "adam_v": 0.001},
             "nonfinite": {"grad": bad, "param": 0, "update": 0, "adam_m": 0, "adam_v": 0}},
            {"tensor": "blocks.0.attn.out.weight", "numel": 4, "norms": {"grad": null, "param": 1.0, "update": 0.02, "muon_momentum": 0.3},
             "nonfinite": {"grad": 4, "param": 0, "update": 0, "muon_momentum": 0}}]})
    };
    std::fs::write(run.join("health.jsonl"), format!("{}\n{}\n{{\"step\": 6, \"tens", row(2, 0), row(4, 1))).unwrap();
    let app = app(dir.path(), None);
    let (status, h) = get(&app, "/api/runs/healthy/health").await;
    assert_eq!(status, StatusCode::OK);
    let rows = h["rows"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["step"].as_u64().unwrap()).collect::<Vec<_>>(), vec![2, 4]);
    assert_eq!(rows[1]["tensors"][0]["nonfinite"]["grad"], 1);
    assert!(rows[1]["tensors"][1]["norms"]["grad"].is_null(), "a non-finite norm stays null");
    assert_eq!(rows[0]["tensors"][1]["norms"]["muon_momentum"], 0.3);
    assert_eq!(h["file"]["rows"], 2);
    let (_, r) = get(&app, "/api/runs/healthy").await;
    assert_eq!(r["files"]["health"]["rows"], 2, "{}", r["files"]);
}
