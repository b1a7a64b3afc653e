//! Serves a runs folder and saves a full-page PNG of one run's page through headless Chromium:
//! how the README's screenshot of a real run is made (records copied back from the GPU machine).
//!
//! `cargo run --release -p alpha-dash --example screenshot -- RUNS_DIR RUN OUT.png [WIDTH [BASELINE ...]]`
//!
//! Each BASELINE, another run in RUNS_DIR, is ticked on the cost curves before the picture.

use std::path::PathBuf;
use std::time::Duration;

use alpha_dash::webdriver::Browser;
use alpha_dash::{ServeOptions, Server};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [runs, run, out, rest @ ..] = args.as_slice() else {
        anyhow::bail!("usage: screenshot RUNS_DIR RUN OUT.png [WIDTH [BASELINE ...]]");
    };
    let width: u32 = rest.first().map_or(Ok(1280), |w| w.parse())?;
    let baselines = rest.get(1..).unwrap_or_default();
    anyhow::ensure!(Browser::available(), "needs /usr/bin/chromium and /usr/bin/chromedriver");
    let mut opts = ServeOptions::new(PathBuf::from(runs));
    opts.port = 0;
    let server = Server::bind(opts)?.spawn();
    let profile = tempfile::tempdir()?;
    let b = Browser::launch(profile.path(), width, 900)?;
    b.goto(&format!("{}/runs/{run}", server.url()))?;
    b.wait_for("return document.body.dataset.loaded === '1'", Duration::from_secs(30))?;
    for baseline in baselines {
        let pick =
            format!("document.querySelector('#curve-pick input[data-baseline={}]')", serde_json::to_string(baseline)?);
        b.wait_for(&format!("return !!{pick}"), Duration::from_secs(30))
            .map_err(|e| anyhow::anyhow!("no run {baseline} to tick as a baseline: {e}"))?;
        b.execute(&format!("{pick}.click(); return true"), vec![])?;
    }
    if !baselines.is_empty() {
        // The curves redraw with each baseline's points fetched.
        std::thread::sleep(Duration::from_secs(2));
    }
    std::fs::write(out, b.full_page_png(width)?)?;
    println!("wrote {out}");
    Ok(())
}
