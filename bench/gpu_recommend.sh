#!/usr/bin/env bash
# The recommendation device check: recommendation scoring on a GPU against a CPU core, then the GPU tests.
#
#   bash bench/gpu_recommend.sh OUT [--bundle DIR] [--nodes N] [--budget-s S]
#
# One call on a lent GPU machine (no network, no Ray): everything it finds lands in OUT, step by step, so a
# call cut off by its limit still returns what finished. --bundle: a folder of bench/gpu_bundle.sh's
# wheels/ (installed offline into /tmp/site) and test-shards/ (the shard sets the tests read). In order:
#   1. python -m bench.recommend --device cuda: collab-sized graph, --nodes query nodes (default 512), pool 50,
#      models tiny, citeseer-small and ogbl-collab: sampling and packing pairs/s per core, forward and
#      pack + forward pairs/s on the GPU, GPU-hours for every node, GPU peak memory;
#   2. the same bench on one CPU core of that machine (8 nodes: the collab model scores ~30-60 pairs/s there),
#      so the GPU/core ratio is measured on one machine;
#   3. pytest -m gpu (CUDA parity, fp32 evaluation, no host sync, NCCL), then the rest of the default suite
#      in whatever budget is left (--budget-s, default 480, counted from the start).
set -u -o pipefail
[ $# -ge 1 ] || { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OUT=$1; shift
BUNDLE=""; NODES=512; BUDGET=480
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) BUNDLE=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --budget-s) BUDGET=$2; shift 2 ;;
    *) echo "gpu_recommend.sh: unknown argument $1 (see the header)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2
PY=${PYTHON:-python3}
START=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
if [ -n "$BUNDLE" ]; then
  [ -d "$BUNDLE/wheels" ] || { echo "gpu_recommend.sh: --bundle $BUNDLE has no wheels/; make it with bench/gpu_bundle.sh" >&2; exit 2; }
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$BUNDLE"/wheels/*.whl \
    || { echo "gpu_recommend.sh: installing $BUNDLE/wheels failed" >&2; exit 2; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  [ -d "$BUNDLE/test-shards" ] && export PENCIL_TEST_SHARD_CACHE=$(cd "$BUNDLE/test-shards" && pwd)
fi
export PYTHONUNBUFFERED=1

step() {  # step NAME LIMIT_S CMD...: under min(LIMIT, budget left), log to OUT/NAME.log
  local name=$1 limit=$2 rem; shift 2
  rem=$(left); [ "$limit" -gt "$rem" ] && limit=$rem
  if [ "$limit" -le 5 ]; then echo "## $name: skipped (budget spent)" | tee -a "$OUT/summary.txt"; return; fi
  local t0=$(date +%s) rc
  timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.log" 2>&1; rc=$?
  echo "## $name: rc $rc in $(( $(date +%s) - t0 )) s (limit $limit)" | tee -a "$OUT/summary.txt"
  tail -n 8 "$OUT/$name.log"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/summary.txt" 2>&1
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' >> "$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt"
step rec-cuda 180 "$PY" -m bench.recommend --nodes "$NODES" --pool 50 --presets tiny,citeseer-small,ogbl-collab \
  --device cuda --retrievers ra --out "$OUT/rec-cuda.json"
step rec-cpu 90 "$PY" -m bench.recommend --nodes 8 --pool 50 --presets tiny,citeseer-small,ogbl-collab \
  --device cpu --out "$OUT/rec-cpu.json"
step gpu-tests 180 "$PY" -m pytest -q -p no:cacheprovider -m gpu --timeout 150 tests
step suite 600 "$PY" -m pytest -q -p no:cacheprovider -m "not gpu and not slow" --timeout 120 tests
echo "done in $(( $(date +%s) - START )) s" | tee -a "$OUT/summary.txt"
