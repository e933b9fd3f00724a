#!/usr/bin/env bash
# GPU acceptance check: one command on a GPU machine with no network, one report.
#
#   bench/gpu_check.sh SHARDS [--bundle DIR] [--out DIR] [--seeds N] [--epochs E] [--budget-s S] [--concurrent-s S] [--ab-dropout] [--no-compile] [--skip-suite] [--with-slow] [--smoke]
#   --bundle: a folder made by bench/gpu_bundle.sh: installs its wheels offline first, and the tests read its
#     prebuilt shard sets (no Ray needed); SHARDS is then usually "$(cat DIR/shards.path)"
#   --out: where the logs, runs and gpu_check.md go (default ./gpu_check-<time>; on a lent device, under $OUT)
#   --concurrent-s: seconds of the budget the timings leave to the concurrent phase (seeds, tests); default 240
#   --ab-dropout: the same citeseer seeds with --attention varlen (no attention dropout, the fastest kernel),
#     run alongside the default ones (same contention, so their times compare): the dropout A/B
#   --no-compile: the step benches skip their torch.compile rows (X+compile: the trainer's --compile)
#   --smoke: tiny sizes and any device, to rehearse the script's plumbing on a CPU box (numbers meaningless)
#
# SHARDS is a prebuilt citeseer (2,20) shard set, the directory holding manifest.json, made elsewhere with
#   python -m preprocess --dataset citeseer --sampling 2,20 --views 20 --protocol original --out shards
# Everything fits one budget (default 480 s = 8 minutes on an H100; a device call may run 600 s). First,
# alone on the GPU, the timings:
#   1. step bench on the real shards      citeseer paper model 1024 x 2, budget 65,536: tokens/s and MFU, every
#                                         attention path, eager and compiled
#   2. step bench on collab-like lengths  512 x 8, budget 65,536 (padded baseline in capped chunks)
#   3. profiles of one step               python -m bench.step_profile: device time by kind of operator, busy / wall,
#                                         MFU and peak memory: collab-like 512 x 8 at 16,384 and 65,536 tokens,
#                                         citeseer 1024 x 2 at 65,536 (the profile behind each MFU number)
#   3b. host overhead                     python -m bench.overhead: operator calls and host ms per micro-step
#   4. loader vs model                    python -m bench.loader (loader tokens/s per process, graph-part form)
#   5. the training loop                  python -m trainer, default batching (~65,536-token micro-batches on a
#                                         GPU, the bench's budget), 40 steps: its tokens/s
#                                         against step 1's for the same kernel (goal >= 80 %)
# then, concurrently, the rest:
#   6. citeseer paper preset, N seeds in parallel on the one GPU (test MRR at the best validation epoch),
#      and with --ab-dropout the same seeds with --attention varlen
#   7. the tests, all markers: pytest -m gpu (varlen/flash/bucketed == padded in bf16 fwd+bwd, fp32 eval,
#      compiled == eager, ...), then the rest of the suite (--with-slow adds the slow tests). They are mostly
#      single-threaded CPU work, so step 6's wall time is an upper bound.
# The report (OUT/gpu_check.md, printed at the end) is rewritten after every step (bench/gpu_report.py), so a
# run cut off by a time limit still leaves everything finished so far.
#
# Python packages needed beyond the GPU image (which has torch, transformers, numba, pyarrow, numpy, scipy,
# pandas, tqdm, fsspec, matplotlib, torch-geometric, pytest, pytest-timeout, pyyaml): webdataset, braceexpand,
# ogb (+ outdated, littleutils). bench/gpu_bundle.sh downloads them as wheels. Ray (~80 MB wheel, over the
# device's carry limit), s3fs and moto stay behind: the tests of the Ray job and the S3 tests skip without them,
# and the tests that read shard sets find them in the bundle's test-shards cache.
set -u -o pipefail

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] && [ "$1" != -h ] && [ "$1" != --help ] || usage
SHARDS=$1; shift
BUNDLE=""; SEEDS=3; EPOCHS=""; OUT="gpu_check-$(date +%Y%m%d-%H%M%S)"; BUDGET=480; CONCURRENT=240; SUITE=1; SLOW=0; SMOKE=0; AB=0; COMPILE=1
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) BUNDLE=$2; shift 2 ;;
    --seeds) SEEDS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --budget-s) BUDGET=$2; shift 2 ;;
    --concurrent-s) CONCURRENT=$2; shift 2 ;;
    --skip-suite) SUITE=0; shift ;;
    --with-slow) SLOW=1; shift ;;
    --smoke) SMOKE=1; shift ;;
    --ab-dropout) AB=1; shift ;;
    --no-compile) COMPILE=0; shift ;;
    -h|--help) usage ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -f "$SHARDS/manifest.json" ] || { echo "gpu_check.sh: $SHARDS/manifest.json not found; pass a prebuilt shard set" >&2; exit 2; }
[[ $SEEDS =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check.sh: --seeds must be a positive integer, got $SEEDS" >&2; exit 2; }
[[ $CONCURRENT =~ ^[0-9]+$ ]] && [ "$CONCURRENT" -lt "$BUDGET" ] || { echo "gpu_check.sh: --concurrent-s must be a whole number of seconds below --budget-s ($BUDGET), got $CONCURRENT" >&2; exit 2; }
if [ -n "$BUNDLE" ]; then
  [ -d "$BUNDLE/wheels" ] && [ -d "$BUNDLE/test-shards" ] || {
    echo "gpu_check.sh: --bundle $BUNDLE: no wheels/ and test-shards/ inside; make it with bench/gpu_bundle.sh" >&2; exit 2; }
  BUNDLE=$(cd "$BUNDLE" && pwd)
fi
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-python}
if [ -n "$BUNDLE" ]; then  # offline: the bundle's wheels only, their dependencies are in the image
  $PY -m pip install -q --no-index --no-deps "$BUNDLE"/wheels/*.whl \
    || { echo "gpu_check.sh: --bundle: installing $BUNDLE/wheels failed" >&2; exit 2; }
  export PENCIL_TEST_SHARD_CACHE=$BUNDLE/test-shards
fi
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
START=$(date +%s)
STATUS=()

left() { echo $(( BUDGET - ($(date +%s) - START) )); }
HOLD=0  # seconds `run` leaves unspent: during the timings, what the concurrent phase is promised
report() { $PY -m bench.gpu_report "$OUT" "$SEEDS" "$BUDGET" "${STATUS[@]}" || echo "gpu_check.sh: writing the report failed" >&2; }
status_of() {  # rc -> ok / timed out / failed
  case $1 in 0) echo ok ;; 124|137) echo "timed out" ;; *) echo "failed (rc $1)" ;; esac
}

# run NAME LIMIT_S CMD...: run a step under a timeout (capped by the budget left), keep its log, record status
run() {
  local name=$1 limit=$2; shift 2
  local rem; rem=$(( $(left) - HOLD ))
  [ "$limit" -gt "$rem" ] && limit=$rem
  if [ "$limit" -le 5 ]; then STATUS+=("| $name | skipped (budget spent) | 0 |"); echo "## $name: skipped (budget spent)"; return; fi
  echo "## $name (limit ${limit}s): $*"
  local t0 rc; t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1; rc=$?
  STATUS+=("| $name | $(status_of $rc) | $(( $(date +%s) - t0 )) |")
  tail -n 25 "$OUT/$name.log"
  report
}

# background NAME CMD...: like run, in the background under the budget left; `collect NAME` waits and records
background() {
  local name=$1; shift
  date +%s > "$OUT/$name.t0"
  ( timeout --kill-after=10 "$(left)" "$@" > "$OUT/$name.log" 2>&1; echo $? > "$OUT/$name.rc" ) &
  echo $! > "$OUT/$name.pid"
}
collect() {
  local name=$1
  wait "$(cat "$OUT/$name.pid")" 2>/dev/null
  STATUS+=("| $name (concurrent) | $(status_of "$(cat "$OUT/$name.rc" 2>/dev/null || echo 1)") | $(( $(date +%s) - $(cat "$OUT/$name.t0") )) |")
  rm -f "$OUT/$name.pid" "$OUT/$name.rc" "$OUT/$name.t0"
  echo "## $name"; tail -n 12 "$OUT/$name.log"
}

CITESEER_MODEL=(--hidden 1024 --layers 2 --heads 8 --ffn 2048 --budget 65536)
COLLAB_MODEL=(--hidden 512 --layers 8 --heads 8 --ffn 2048 --budget 65536)  # the trainer's default on a GPU
PROFILE_COLLAB=(--dist ogbl-collab --hidden 512 --layers 8 --heads 8 --ffn 2048 --budgets 16384,65536)
PROFILE_CITESEER=(--shards "$SHARDS" --hidden 1024 --layers 2 --heads 8 --ffn 2048 --budgets 65536 --samples 12000)
TIMING=(--batches 6 --repeats 3)
TRAIN=(--preset citeseer --device cuda)
# the real loop alone, default batching (on a GPU: micro-batches of ~65,536 tokens, the bench's budget; for
# citeseer one micro-step per optimiser step), dropout 0 as in the bench: its tokens/s against the bench's
LOOP=(--preset citeseer --device cuda --dropout 0 --max-steps 40 --log-every 5 --eval-every 1000 --eval-splits valid)
if [ "$SMOKE" = 1 ]; then
  CITESEER_MODEL=(--hidden 32 --layers 1 --heads 2 --ffn 64 --budget 2048 --samples 300)
  COLLAB_MODEL=(--hidden 32 --layers 1 --heads 2 --ffn 64 --budget 2048 --samples 100)
  PROFILE_COLLAB=(--dist ogbl-collab --hidden 32 --layers 1 --heads 2 --ffn 64 --budgets 1024,2048 --samples 100)
  PROFILE_CITESEER=(--shards "$SHARDS" --hidden 32 --layers 1 --heads 2 --ffn 64 --budgets 2048 --samples 300)
  TIMING=(--batches 1 --repeats 1)
  TRAIN=(--preset tiny --device auto --max-steps 3 --num-workers 0)
  LOOP=(--preset tiny --device auto --dropout 0 --max-steps 6 --log-every 2 --eval-every 1000 --eval-splits valid
        --num-workers 0)
fi
[ "$COMPILE" = 1 ] && TIMING+=(--compile)

# ------------------------------------------------------------------ 1-5: timings, alone on the GPU
HOLD=$CONCURRENT  # a slow timing step is cut (and reported so) before it eats the seeds' time
run step-citeseer 120 $PY -m bench.trainer --sections step --shards "$SHARDS" "${CITESEER_MODEL[@]}" "${TIMING[@]}"
run step-collab 120 $PY -m bench.trainer --sections step --dists ogbl-collab "${COLLAB_MODEL[@]}" "${TIMING[@]}"
run profile-collab 45 $PY -m bench.step_profile "${PROFILE_COLLAB[@]}"
run profile-citeseer 45 $PY -m bench.step_profile "${PROFILE_CITESEER[@]}"
run host-overhead 60 $PY -m bench.overhead $([ "$COMPILE" = 1 ] || echo --no-compile) $([ "$SMOKE" = 1 ] && echo --repeats 3)
# loader tokens/s per process (read against the model's tokens/s of step 1); form: sparse vs dense graph part
run loader-vs-model 75 $PY -m bench.loader --sections reads,form --citeseer "$SHARDS" --work "$OUT/loader-work" --seconds 3
run loop-citeseer 75 $PY -m trainer "${LOOP[@]}" --shards "$SHARDS" --out "$OUT/loop" --no-progress

# ------------------------------------------------------------------ 6-7: citeseer seeds and the tests, concurrently
HOLD=0
citeseer() {  # $1: run folder name (citeseer / citeseer-varlen), further args go to the trainer
  local pids=() s rc=0 name=${1:-citeseer}; shift || true
  for s in $(seq 0 $((SEEDS - 1))); do
    # shellcheck disable=SC2086  # TRAIN_ARGS is a word list by construction
    $PY -m trainer $TRAIN_ARGS --shards "$SHARDS" --out "$OUT/$name/seed$s" --seed "$s" --no-progress \
      ${EPOCHS:+--epochs "$EPOCHS"} "$@" > "$OUT/$name-seed$s.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}
export -f citeseer
TRAIN_ARGS="${TRAIN[*]}"
export PY SHARDS OUT SEEDS EPOCHS TRAIN_ARGS
MARKERS="not gpu and not slow"; [ "$SLOW" = 1 ] && MARKERS="not gpu"
tests_job() {  # the gpu-marked tests first (their own log), then the rest of the suite
  $PY -m pytest -q -p no:cacheprovider -m gpu tests > "$OUT/gpu-tests.log" 2>&1; local g=$?
  $PY -m pytest -q -p no:cacheprovider -m "$MARKERS" tests > "$OUT/suite.log" 2>&1; local s=$?
  echo "gpu tests rc $g, rest of the suite rc $s"
  [ $g = 0 ] && [ $s = 0 ]
}
export -f tests_job
export MARKERS
[ "$SUITE" = 1 ] && background tests bash -c tests_job
[ "$AB" = 1 ] && background citeseer-varlen-seeds bash -c 'citeseer citeseer-varlen --attention varlen'
run citeseer-seeds 420 bash -c 'citeseer citeseer'
[ "$AB" = 1 ] && collect citeseer-varlen-seeds
[ "$SUITE" = 1 ] && collect tests
report
echo
cat "$OUT/gpu_check.md"
echo "report: $OUT/gpu_check.md"
