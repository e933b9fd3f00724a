#!/usr/bin/env bash
# GPU acceptance check (issue 9): one command on a GPU machine with no network, one report.
#
#   bench/gpu_check.sh SHARDS [--bundle DIR] [--seeds N] [--epochs E] [--out DIR] [--budget-s S] [--skip-suite] [--with-slow] [--suite-after] [--smoke] [--ab-dropout] [--compile]
#   --bundle: a folder made by bench/gpu_bundle.sh: installs its wheels offline first, and the tests read its
#   prebuilt shard sets (no Ray needed); SHARDS is then usually "$(cat DIR/shards.path)"
#   --ab-dropout: after the rest (outside the 8-minute budget), the same citeseer seeds with --attention varlen
#   (no attention dropout, the fastest kernel) for the A/B of issue 9 item 2: MRR and time with vs without
#   --compile: after the rest (outside the budget, 2 minutes), python -m bench.compile at the collab and
#   citeseer model widths: does torch.compile(dynamic=True) pay for the blocks' dense part on this GPU?
#   --smoke: tiny sizes and any device, to rehearse the script's plumbing on a CPU box (numbers meaningless)
#
# SHARDS is a prebuilt citeseer (2,20) shard set, the directory holding manifest.json, made elsewhere with
#   python -m preprocess --dataset citeseer --sampling 2,20 --views 20 --protocol original --out shards
# Steps, in order, each under its own timeout inside a total budget (default 480 s = 8 minutes on an H100):
#   1. pytest -m gpu                      varlen/flash/bucketed == padded (bf16, fwd+bwd), fp32 eval, dropout
#   2. step bench on the real shards      citeseer paper model 1024 x 2, budget 65,536: tokens/s and MFU
#   3. step bench on collab-like lengths  512 x 8, budget 16,384 (padded baseline in capped chunks)
#   4. loader vs model                    python -m bench.loader (loader tokens/s per process, graph-part form),
#                                         else bench.trainer --sections loader
#   5. citeseer paper preset, N seeds in parallel on the one GPU (test MRR at the best validation epoch)
#   6. the whole suite (default markers plus gpu; --with-slow adds slow), run concurrently with step 5 with
#      the budget left (it is mostly single-threaded CPU work; 8 minutes do not fit both one after the other),
#      so step 5's wall time is an upper bound; --suite-after runs it alone afterwards
# It prints one report and writes it as Markdown to OUT/gpu_check.md (default OUT: ./gpu_check-<time>).
#
# Python packages needed beyond the GPU image (which has torch, transformers, numba, pyarrow, numpy, scipy,
# pandas, tqdm, fsspec, matplotlib, torch-geometric, pytest, pytest-timeout, pyyaml): webdataset, braceexpand,
# ogb (+ outdated, littleutils). bench/gpu_bundle.sh downloads them as wheels. Ray (~80 MB wheel, over the
# device's carry limit), s3fs and moto stay behind: the tests of the Ray job and the S3 tests skip without them,
# and the tests that read shard sets find them in the bundle's test-shards cache.
set -u -o pipefail

usage() { sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
SHARDS=$1; shift
BUNDLE=""; SEEDS=3; EPOCHS=""; OUT="gpu_check-$(date +%Y%m%d-%H%M%S)"; BUDGET=480; SUITE=1; SLOW=0; AFTER=0; SMOKE=0; AB=0; COMPILE=0
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) BUNDLE=$2; shift 2 ;;
    --seeds) SEEDS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --budget-s) BUDGET=$2; shift 2 ;;
    --skip-suite) SUITE=0; shift ;;
    --with-slow) SLOW=1; shift ;;
    --suite-after) AFTER=1; shift ;;
    --smoke) SMOKE=1; shift ;;
    --ab-dropout) AB=1; shift ;;
    --compile) COMPILE=1; shift ;;
    -h|--help) usage ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -f "$SHARDS/manifest.json" ] || { echo "gpu_check.sh: $SHARDS/manifest.json not found; pass a prebuilt shard set" >&2; exit 2; }
[[ $SEEDS =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check.sh: --seeds must be a positive integer, got $SEEDS" >&2; exit 2; }
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
REPORT=$OUT/gpu_check.md
START=$(date +%s)
STATUS=()

left() { echo $(( BUDGET - ($(date +%s) - START) )); }

# run NAME LIMIT_S CMD...: run a step under a timeout (capped by the budget left), keep its log, record status
run() {
  local name=$1 limit=$2; shift 2
  local rem; rem=$(left)
  [ "$limit" -gt "$rem" ] && limit=$rem
  if [ "$limit" -le 5 ]; then STATUS+=("| $name | skipped (budget spent) | 0 |"); echo "## $name: skipped (budget spent)"; return; fi
  echo "## $name (limit ${limit}s): $*"
  local t0 rc; t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1; rc=$?
  local dt=$(( $(date +%s) - t0 ))
  local st=ok; [ $rc -eq 124 ] && st="timed out"; [ $rc -ne 0 ] && [ $rc -ne 124 ] && st="failed (rc $rc)"
  STATUS+=("| $name | $st | $dt |")
  tail -n 25 "$OUT/$name.log"
}

CITESEER_MODEL=(--hidden 1024 --layers 2 --heads 8 --ffn 2048 --budget 65536)
COLLAB_MODEL=(--hidden 512 --layers 8 --heads 8 --ffn 2048 --budget 16384)
TIMING=(--batches 6 --repeats 3)
TRAIN=(--preset citeseer --device cuda)
if [ "$SMOKE" = 1 ]; then
  CITESEER_MODEL=(--hidden 32 --layers 1 --heads 2 --ffn 64 --budget 2048 --samples 300)
  COLLAB_MODEL=(--hidden 32 --layers 1 --heads 2 --ffn 64 --budget 2048 --samples 100)
  TIMING=(--batches 1 --repeats 1)
  TRAIN=(--preset tiny --device auto --max-steps 3 --num-workers 0)
fi

# ------------------------------------------------------------------ 1-4: tests and benches
run gpu-tests 150 $PY -m pytest -q -p no:cacheprovider -m gpu tests
run step-citeseer 90 $PY -m bench.trainer --sections step --shards "$SHARDS" "${CITESEER_MODEL[@]}" "${TIMING[@]}"
run step-collab 90 $PY -m bench.trainer --sections step --dists ogbl-collab "${COLLAB_MODEL[@]}" "${TIMING[@]}"
if [ -f bench/loader.py ]; then
  # loader tokens/s per process (read against the model's tokens/s of step 2); form: sparse vs dense graph part
  run loader-vs-model 90 $PY -m bench.loader --sections reads,form --citeseer "$SHARDS" --work "$OUT/loader-work" --seconds 5
else
  run loader-vs-model 60 $PY -m bench.trainer --sections loader --shards "$SHARDS" "${CITESEER_MODEL[@]}" "${TIMING[@]}"
fi

# ------------------------------------------------------------------ 5: citeseer, N seeds in parallel on one GPU
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
MARKERS="not slow"; [ "$SLOW" = 1 ] && MARKERS=""
SUITE_CMD=($PY -m pytest -q -p no:cacheprovider -m "$MARKERS" tests)
if [ "$SUITE" = 1 ] && [ "$AFTER" = 0 ]; then
  # 6, concurrently: its own timeout (the budget left now); its status is recorded when it is waited for
  SUITE_T0=$(date +%s)
  ( timeout --kill-after=10 "$(left)" "${SUITE_CMD[@]}" > "$OUT/suite.log" 2>&1; echo $? > "$OUT/suite.rc" ) &
  SUITE_PID=$!
fi
run citeseer-seeds 330 bash -c 'citeseer citeseer'

# ------------------------------------------------------------------ 6: the whole suite
if [ "$SUITE" = 1 ] && [ "$AFTER" = 0 ]; then
  wait "$SUITE_PID"
  rc=$(cat "$OUT/suite.rc" 2>/dev/null || echo 1)
  st=ok; [ "$rc" = 124 ] && st="timed out"; [ "$rc" != 0 ] && [ "$rc" != 124 ] && st="failed (rc $rc)"
  STATUS+=("| suite (concurrent with citeseer-seeds) | $st | $(( $(date +%s) - SUITE_T0 )) |")
  echo "## suite"; tail -n 12 "$OUT/suite.log"
elif [ "$SUITE" = 1 ]; then
  run suite 600 "${SUITE_CMD[@]}"
fi

TOTAL=$(( $(date +%s) - START ))
if [ "$AB" = 1 ]; then  # outside the budget: its own 10-minute limit
  BUDGET0=$BUDGET; BUDGET=$(( $(date +%s) - START + 600 ))
  run citeseer-varlen-seeds 600 bash -c 'citeseer citeseer-varlen --attention varlen'
fi
if [ "$COMPILE" = 1 ]; then  # outside the budget: its own 2-minute limit
  BUDGET0=${BUDGET0:-$BUDGET}; BUDGET=$(( $(date +%s) - START + 120 ))
  COMPILE_SIZES=(--hidden 512 --heads 8 --ffn 2048 --tokens 16384,65536 --repeats 10)
  [ "$SMOKE" = 1 ] && COMPILE_SIZES=(--hidden 32 --heads 2 --ffn 64 --tokens 512 --repeats 2)
  run compile 120 $PY -m bench.compile "${COMPILE_SIZES[@]}"
fi

# ------------------------------------------------------------------ report
$PY - "$OUT" "$SEEDS" "$TOTAL" "${BUDGET0:-$BUDGET}" "${STATUS[@]}" > "$REPORT" <<'EOF'
import json, re, sys
from pathlib import Path

out, seeds, total, budget, *status = sys.argv[1:]
out = Path(out)


def log(name):
    p = out / f"{name}.log"
    return p.read_text(errors="replace") if p.exists() else "(not run)"


def tail_tables(text):
    """The bench's printed tables (title line + header + rows), without the progress noise."""
    keep, on = [], False
    for line in text.splitlines():
        if line.startswith(("step time", "loader vs model", "reads", "form", "#", "|")) or (on and line.strip()):
            keep.append(line)
            on = True
        elif on and not line.strip():
            on = False
            keep.append("")
    return "\n".join(keep).strip() or text[-3000:]


try:
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA"
    env = f"torch {torch.__version__}, CUDA {torch.version.cuda}"
except Exception as err:  # the report is still written
    gpu, env = "unknown", f"torch not importable: {err}"
lines = [f"# GPU check: {gpu}", "", f"{env}; {total} s for the budgeted steps (budget {budget} s; an --ab-dropout "
         "run comes after).", "",
         "| step | status | seconds |", "|---|---|---|", *status, ""]

gpu_tests = log("gpu-tests").strip().splitlines()
lines += ["## GPU tests (pytest -m gpu)", "", "```", *(gpu_tests[-15:] or ["(no output)"]), "```", ""]
for name, what in (("step-citeseer", "Step bench, real citeseer shards, paper model 1024 x 2"),
                   ("step-collab", "Step bench, collab-like lengths, 512 x 8"),
                   ("loader-vs-model", "Loader vs model"), ("compile", "torch.compile of the blocks' dense part")):
    if name == "compile" and not (out / "compile.log").exists():
        continue
    lines += [f"## {what}", "", "```", tail_tables(log(name)), "```", ""]

import statistics

for name, title in (("citeseer", "Citeseer, paper preset, seeds in parallel on one GPU"),
                    ("citeseer-varlen", "A/B: the same seeds with --attention varlen (no attention dropout)")):
    if not (out / name).exists():
        continue
    rows, mrrs = [], []
    for s in range(int(seeds)):
        p = out / name / f"seed{s}" / "summary.json"
        if p.exists():
            sm = json.loads(p.read_text())
            mrr = 100 * (sm.get("test") or {}).get("mrr", float("nan"))
            mrrs.append(mrr)
            rows.append(f"| {s} | {sm.get('best_epoch')} | {100 * (sm.get('valid') or {}).get('mrr', float('nan')):.2f} | "
                        f"{mrr:.2f} | {sm.get('train_time_s')} | {sm.get('attention_backend')} |")
        else:
            rows.append(f"| {s} | - | - | - | - | see {name}-seed{s}.log |")
    lines += [f"## {title}", "", "| seed | best epoch | valid MRR | test MRR (at best valid) | train s | attention |",
              "|---|---|---|---|---|---|", *rows, ""]
    if mrrs:
        sd = statistics.stdev(mrrs) if len(mrrs) > 1 else 0.0
        lines += [f"Test MRR {statistics.mean(mrrs):.2f} ± {sd:.2f} over {len(mrrs)} seed(s); the paper: 47.51 ± 3.09.", ""]
suite = log("suite").strip().splitlines()
lines += ["## Whole suite", "", "```", *(suite[-12:] or ["(not run)"]), "```", ""]
print("\n".join(lines))
EOF
echo
cat "$REPORT"
echo "report: $REPORT"
