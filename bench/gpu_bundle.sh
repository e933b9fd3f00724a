#!/usr/bin/env bash
# Prepare what bench/gpu_check.sh needs on a GPU machine that has no network and no Ray.
#
#   bench/gpu_bundle.sh [OUT]      (default OUT: .gpu-bundle, git-ignored; about 15 MB)
#
# Run it here, on a machine with the project installed (`make install`) and access to the package index.
# It writes:
#   OUT/wheels/        the packages the GPU image lacks (webdataset braceexpand ogb outdated littleutils), for
#                      CPython 3.12 on x86-64 Linux, at constraints.txt's versions. Not Ray: its wheel (~80 MB)
#                      is over the 64 MiB a device call can carry, so the tests *of* the Ray job skip there.
#   OUT/shards/        citeseer (2,20), 20 views, original protocol: the set the citeseer steps train on
#   OUT/shards.path    that set's folder, relative to the repository root
#   OUT/test-shards/   every shard set the test suite reads (tests/conftest.py: PENCIL_TEST_SHARD_CACHE),
#                      filled by running the suite once here (all markers but gpu), so it is also a
#                      pre-flight check: a failing suite stops the bundle before any device time is spent.
#                      The features set (49 MB) is dropped: its tests need shared/data/planetoid, which a
#                      device call does not carry, and skip there.
# Then, on the device (carry OUT):
#   bash bench/gpu_check.sh "$(cat OUT/shards.path)" --bundle OUT --ab-dropout --with-slow --budget-s 560 --out "$OUT/gpu_check"
#   (there $OUT is the device call's folder that comes back; give the call timeout_s 600)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.gpu-bundle}
PY=${PYTHON:-python}
case $OUT in
  /*|..*) echo "gpu_bundle.sh: OUT ($OUT) must be a relative path inside the repository: a device call carries only those" >&2
          exit 2 ;;
esac
mkdir -p "$OUT/wheels"

echo "## wheels -> $OUT/wheels"
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -c constraints.txt -d "$OUT/wheels" \
  webdataset braceexpand ogb outdated littleutils

echo "## citeseer (2,20) shards -> $OUT/shards"
set_dir=$($PY -m preprocess --dataset citeseer --sampling 2,20 --views 20 --protocol original --out "$OUT/shards" -q | tail -n 1)
set_dir=${set_dir##* }
echo "$set_dir" > "$OUT/shards.path"

echo "## test suite with PENCIL_TEST_SHARD_CACHE=$OUT/test-shards (all markers but gpu)"
PENCIL_TEST_SHARD_CACHE="$OUT/test-shards" $PY -m pytest -q -p no:cacheprovider -m "not gpu" tests
rm -rf "$OUT/test-shards/features"

du -sh "$OUT"
echo "bundle ready. On the device: bash bench/gpu_check.sh \"\$(cat $OUT/shards.path)\" --bundle $OUT --ab-dropout --with-slow --budget-s 560 --out \"\$OUT/gpu_check\""
