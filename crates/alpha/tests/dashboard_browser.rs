//! End to end: a real short CPU training run of Bob, `alpha serve` over its records, and a
//! headless Chromium reading the live page — the loss chart must hold every recorded step and
//! the lineage table every checkpoint of `lineage.jsonl`. Also the CLI's bad-input messages:
//! a missing runs folder and a port in use.
//!
//! Needs Debian's `chromium` and `chromium-driver`; without them the test says it was skipped.
//! Screenshots go to the test's temporary folder and, when `ALPHA_SCREENSHOT_DIR` is set, there.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use alpha_dash::webdriver::{Browser, CHROMEDRIVER, CHROMIUM};
use serde_json::Value;

const ALPHA: &str = env!("CARGO_BIN_EXE_alpha");

/// The workspace root: training runs there so the default corpus's cache is shared.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn jsonl(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `alpha serve`, ended (by its own handle) when dropped.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_serve(runs: &Path, port: u16) -> Serve {
    // From the folder training ran in, as a user would: checkpoints name their data relative to it.
    let child = Command::new(ALPHA)
        .current_dir(workspace())
        .args(["serve", "--runs"])
        .arg(runs)
        .args(["--port", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting alpha serve");
    let mut serve = Serve(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = serve.0.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(e) = serve.0.stderr.take() {
                for line in BufReader::new(e).lines().map_while(Result::ok) {
                    err += &line;
                }
            }
            panic!("alpha serve exited ({status}) before listening: {err}");
        }
        assert!(Instant::now() < deadline, "alpha serve did not listen on port {port} within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    serve
}

fn save(png: &[u8], name: &str, tmp: &Path) {
    assert!(png.starts_with(b"\x89PNG"), "{name} is not a PNG");
    std::fs::write(tmp.join(name), png).unwrap();
    if let Some(dir) = std::env::var_os("ALPHA_SCREENSHOT_DIR") {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(Path::new(&dir).join(name), png).unwrap();
    }
    eprintln!("screenshot {}", tmp.join(name).display());
}

#[test]
fn a_real_training_run_shows_in_a_real_browser() {
    if !Browser::available() {
        eprintln!("skipped: {CHROMIUM} or {CHROMEDRIVER} is missing (apt-get install -y chromium chromium-driver)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let run = runs.join("bob-e2e");

    // A real, short CPU run: 60 steps, a checkpoint every 20.
    let out = Command::new(ALPHA)
        .current_dir(workspace())
        .args([
            "train",
            "bob",
            "--steps",
            "60",
            "--checkpoint-every",
            "20",
            "--batch",
            "8",
            "--health-every",
            "20",
            "--quiet",
        ])
        .arg("--run-dir")
        .arg(&run)
        .output()
        .expect("running alpha");
    assert!(
        out.status.success(),
        "`alpha train bob` failed, so there is no run to show ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let points = jsonl(&run.join("points.jsonl"));
    let lineage = jsonl(&run.join("lineage.jsonl"));
    assert_eq!(points.len(), 60, "one point a step");
    assert!(lineage.len() >= 3, "a checkpoint every 20 steps: {lineage:?}");
    let info: Value = serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(info["state"], "finished");
    // Each scored checkpoint carries its standard error, its cost and a sample.
    for row in &lineage {
        assert!(row["heldout_bpb_se"].as_f64().is_some_and(|se| se > 0.0), "{row}");
        assert!(row["device_s"].as_f64().is_some_and(|s| s > 0.0), "{row}");
        assert!(row["sample"].as_str().is_some_and(|s| !s.is_empty()), "{row}");
    }
    // A baseline to overlay, and the CPU device's gates in the runs folder's ledger.
    let base = runs.join("bob-base");
    let quick = ["train", "bob", "--steps", "40", "--checkpoint-every", "20", "--batch", "4", "--seed", "2", "--quiet"];
    let out = Command::new(ALPHA).current_dir(workspace()).args(quick).arg("--run-dir").arg(&base).output().unwrap();
    assert!(out.status.success(), "the baseline run failed: {}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(ALPHA)
        .current_dir(workspace())
        .args(["check", "all", "bob", "--device", "cpu", "--runs"])
        .arg(&runs)
        .output()
        .unwrap();
    assert!(out.status.success(), "alpha check failed: {}", String::from_utf8_lossy(&out.stderr));

    let port = free_port();
    let _serve = start_serve(&runs, port);
    let url = format!("http://127.0.0.1:{port}");

    let profile = tmp.path().join("chromium-profile");
    let b = Browser::launch(&profile, 1280, 900).unwrap();

    // The runs page lists the run with its system, device, state and steps.
    b.goto(&format!("{url}/")).unwrap();
    let row = b
        .wait_for(
            "const r = document.querySelector('#runs-table tr[data-run=\"bob-e2e\"]'); \
             return r && [...r.cells].map(c => c.textContent.trim())",
            Duration::from_secs(20),
        )
        .unwrap();
    let cells: Vec<&str> = row.as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert_eq!(cells[0], "bob-e2e");
    assert_eq!(cells[1], "bob");
    assert_eq!(cells[2], "cpu");
    assert_eq!(cells[3], "finished");
    assert!(cells[4].starts_with("60"), "{cells:?}");

    // The run page: every recorded step in the loss chart, every checkpoint in the lineage.
    b.goto(&format!("{url}/runs/bob-e2e")).unwrap();
    b.wait_for("return document.body.dataset.loaded === '1'", Duration::from_secs(30)).unwrap();
    let drawn = b.execute("return +document.querySelector('#chart-loss svg').dataset.points", vec![]).unwrap();
    assert_eq!(drawn.as_u64(), Some(points.len() as u64), "loss chart points");
    let unseen = points.iter().filter(|p| p["unseen"] == true).count() as u64;
    let marked = b.execute("return +document.querySelector('#chart-loss svg').dataset.unseen", vec![]).unwrap();
    assert_eq!(marked.as_u64(), Some(unseen), "unseen steps");
    // Each step's device time (on the CPU, the host clock around its kernels) drawn beside its
    // wall time.
    assert!(points.iter().all(|p| p["device_ms"].as_f64().is_some_and(|d| d > 0.0)), "a device time a step");
    let device = b.execute("return +document.querySelector('#chart-ms svg').dataset.device", vec![]).unwrap();
    assert_eq!(device.as_u64(), Some(points.len() as u64), "step-time chart's device points");

    let table = b
        .execute(
            "return [...document.querySelectorAll('#lineage-table tbody tr')].map(r => [+r.dataset.step, r.dataset.sha])",
            vec![],
        )
        .unwrap();
    let shown: Vec<(u64, String)> = table
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].as_u64().unwrap(), r[1].as_str().unwrap().to_string()))
        .collect();
    let mut recorded: Vec<(u64, String)> =
        lineage.iter().map(|r| (r["step"].as_u64().unwrap(), r["sha256"].as_str().unwrap().to_string())).collect();
    recorded.reverse(); // the page shows the newest first
    assert_eq!(shown, recorded, "lineage table against lineage.jsonl");

    // Optimizer health: the latest health step's table, a row a tensor, and the heat map with a
    // column a health step.
    let health = jsonl(&run.join("health.jsonl"));
    assert_eq!(health.iter().map(|r| r["step"].as_u64().unwrap()).collect::<Vec<_>>(), vec![20, 40, 60]);
    let tensors = health[2]["tensors"].as_array().unwrap();
    let shown = b
        .wait_for(
            "const rs = [...document.querySelectorAll('#health-table tbody tr')];              return rs.length && rs.map(r => [r.cells[0].textContent, r.cells[r.cells.length - 1].textContent])",
            Duration::from_secs(20),
        )
        .unwrap();
    let shown = shown.as_array().unwrap();
    assert_eq!(shown.len(), tensors.len(), "a table row a tensor: {shown:?}");
    for (row, t) in shown.iter().zip(tensors) {
        assert_eq!(row[0], t["tensor"], "{shown:?}");
        assert_eq!(row[1], "0", "{}: non-finite values shown", t["tensor"]);
    }
    let columns = b.execute("return document.querySelectorAll('#health-heat-table thead th').length", vec![]).unwrap();
    assert_eq!(columns.as_u64(), Some(1 + health.len() as u64), "the heat map: the tensor column and a column a step");

    // Telemetry: a CPU run records the host; the page says there is no GPU.
    let telemetry = run.join("telemetry.jsonl");
    if telemetry.exists() {
        let host_points = b
            .wait_for(
                "const s = document.querySelector('#chart-host-rss svg'); return s && s.dataset.points",
                Duration::from_secs(10),
            )
            .unwrap();
        assert!(host_points.as_str().unwrap().parse::<u64>().unwrap() >= 1);
    }
    // The prompt probe runs the newest checkpoint through the CLI's probe.
    b.execute(
        "document.querySelector('#probe-prompt').value = 'The '; \
         document.querySelector('#probe-tokens').value = '16'; \
         document.querySelector('#probe-go').click(); return 1",
        vec![],
    )
    .unwrap();
    let answer = b
        .wait_for(
            "const e = document.querySelector('#probe-continuation, #probe-out .notice'); return e && (e.id || 'error')",
            Duration::from_secs(60),
        )
        .unwrap();
    let error =
        b.execute("const e = document.querySelector('#probe-out .notice'); return e && e.textContent", vec![]).unwrap();
    assert_eq!(answer, "probe-continuation", "the probe failed: {error}");
    let guesses = b.execute("return document.querySelectorAll('#probe-top tbody tr').length", vec![]).unwrap();
    assert!(guesses.as_u64().unwrap() >= 1, "no next-token guesses");

    // The gate ledger, in order, each record with its evidence; a CPU run needs none.
    let gates = b
        .wait_for(
            "const l = [...document.querySelectorAll('#gates-list li[data-gate]')]; \
             return l.length === 5 && l.map(e => [e.dataset.gate, e.dataset.passed, e.querySelectorAll('.figures tbody tr').length])",
            Duration::from_secs(20),
        )
        .unwrap();
    let gates: Vec<(String, String, u64)> = gates
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g[0].as_str().unwrap().into(), g[1].as_str().unwrap().into(), g[2].as_u64().unwrap()))
        .collect();
    let names: Vec<&str> = gates.iter().map(|g| g.0.as_str()).collect();
    assert_eq!(names, ["forward", "gradient", "update", "causality", "health"]);
    assert!(
        gates.iter().all(|g| g.1 == "true" && g.2 >= 2),
        "each passed, with figures for both weight sets: {gates:?}"
    );
    let verdict = b.execute("return document.querySelector('#gates-verdict').textContent", vec![]).unwrap();
    assert!(verdict.as_str().unwrap().contains("needs no gates"), "{verdict}");

    // The cost curve: a point a scored checkpoint; the baseline overlaid when ticked; each
    // checkpoint's text beside the baseline's at the nearest cost.
    let scored = lineage.iter().filter(|r| r["heldout_bpb"].is_number()).count() as u64;
    let curve = b.execute("return +document.querySelector('#chart-curve-time svg').dataset.points", vec![]).unwrap();
    assert_eq!(curve.as_u64(), Some(scored), "curve points");
    b.execute("document.querySelector('#curve-pick input[data-baseline=\"bob-base\"]').click(); return 1", vec![])
        .unwrap();
    b.wait_for(
        "const s = document.querySelector('#chart-curve-time svg'); return s && s.dataset.series.includes('bob-base')",
        Duration::from_secs(20),
    )
    .unwrap();
    let samples = b
        .wait_for(
            "const r = [...document.querySelectorAll('#samples-table tbody tr[data-step]')]; \
             return r.length && r[0].cells[4].textContent.includes('bob-base') && r.map(x => x.cells[3].textContent)",
            Duration::from_secs(20),
        )
        .unwrap();
    assert_eq!(samples.as_array().unwrap().len() as u64, scored);
    assert!(samples.as_array().unwrap().iter().all(|t| t.as_str().unwrap().starts_with("The ")), "{samples}");
    let energy = b.execute("return document.querySelector('#chart-curve-energy').textContent", vec![]).unwrap();
    assert!(energy.as_str().unwrap().contains("No energy recorded"), "{energy}");
    for (sel, name) in [
        ("#gates-card", "dashboard-gates.png"),
        ("#curve-card", "dashboard-curve.png"),
        ("#health-card", "dashboard-health.png"),
    ] {
        save(&b.element_png(sel).unwrap(), name, tmp.path());
    }

    let png = b.full_page_png(1280).unwrap();
    save(&png, "dashboard-run.png", tmp.path());

    // The catalogue lists Bob with this run.
    b.resize(1280, 900).unwrap();
    b.goto(&format!("{url}/systems")).unwrap();
    b.wait_for("return document.querySelector('.system[data-system=\"bob\" i] a')", Duration::from_secs(20)).unwrap();
    // Shown on the devices its records name: the CPU only (no GPU gate record, no GPU run).
    let devices = b
        .execute(
            "return [...document.querySelectorAll('.system[data-system=\"bob\" i] [data-device]')].map(e => e.dataset.device)",
            vec![],
        )
        .unwrap();
    assert_eq!(devices, serde_json::json!(["cpu"]));
    save(&b.screenshot_png().unwrap(), "dashboard-systems.png", tmp.path());

    // Bad input through the CLI: a port in use, a missing runs folder.
    let busy =
        Command::new(ALPHA).args(["serve", "--runs"]).arg(&runs).args(["--port", &port.to_string()]).output().unwrap();
    assert!(!busy.status.success());
    let msg = String::from_utf8_lossy(&busy.stderr);
    assert!(msg.contains(&format!("port {port} is in use")), "{msg}");
    let missing = tmp.path().join("no-runs-here");
    let gone = Command::new(ALPHA).args(["serve", "--runs"]).arg(&missing).args(["--port", "0"]).output().unwrap();
    assert!(!gone.status.success());
    let msg = String::from_utf8_lossy(&gone.stderr);
    assert!(msg.contains("no-runs-here") && msg.contains("does not exist"), "{msg}");
}
