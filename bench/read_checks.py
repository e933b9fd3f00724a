"""The cost of the checks that run on every read: eval shards hashed (sha256) as they stream, the shipped graph
arrays hashed when a loader loads them, against the same reads unchecked.

    python -m bench.read_checks --shards /tmp/shards/citeseer/<key> [--repeat 5]

Build a set first, e.g. `python -m preprocess --dataset citeseer --sampling 2,20 --views 1 --out /tmp/shards`.
Times are process CPU time (time.process_time: it holds on a shared machine), best of --repeat, in one
process. A read here is what a loader worker does before batching: open, untar, decode and check every
block (trainer.data.block_stream.read_blocks); the model's work comes on top of it in a real evaluation.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # `python bench/read_checks.py` as well as `python -m bench.read_checks`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sampler import time_it  # noqa: E402
from common.manifest_record import Manifest  # noqa: E402
from common.metrics import format_table  # noqa: E402
from common.shards import load_graph, read_manifest, shard_entries  # noqa: E402
from trainer.data.block_stream import read_blocks  # noqa: E402
from trainer.data.stream import eval_sets, make_units  # noqa: E402


def read_all(manifest: Manifest, entries: list[dict], checksums: bool) -> int:
    units = make_units(manifest, entries, 1, checksums=checksums)
    return sum(len(b) for b in read_blocks(units, manifest.num_nodes, manifest.n_max))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", required=True, help="a shard set (the folder holding manifest.json)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    manifest = read_manifest(args.shards)
    rows = []
    for split, protocol in eval_sets(manifest):
        entries = shard_entries(manifest, split, protocol=protocol)
        plain = time_it(lambda: read_all(manifest, entries, False), args.repeat)
        hashed = time_it(lambda: read_all(manifest, entries, True), args.repeat)
        rows.append(
            {
                "read": f"eval {split}/{protocol}",
                "MB": sum(e["bytes"] for e in entries) / 1e6,
                "unchecked s": plain,
                "checked s": hashed,
                "overhead %": 100 * (hashed - plain) / plain,
            }
        )
    train = shard_entries(manifest, "train", view=0)
    plain = time_it(lambda: read_all(manifest, train, False), args.repeat)
    rows.append(
        {
            "read": "training view 0 (unchecked, for scale)",
            "MB": sum(e["bytes"] for e in train) / 1e6,
            "unchecked s": plain,
        }
    )
    for which in manifest.graphs:
        size = sum(manifest.files[manifest.graphs[which][p]]["bytes"] for p in ("indptr", "indices"))

        def load(verify):
            indptr, indices = load_graph(manifest, which, verify=verify)
            return int(indices[-1]) + int(indptr[-1])  # touch both maps

        plain = time_it(lambda: load(False), args.repeat)
        hashed = time_it(lambda: load(True), args.repeat)
        rows.append(
            {
                "read": f"graph {which} (once per loader worker)",
                "MB": size / 1e6,
                "unchecked s": plain,
                "checked s": hashed,
                "added ms": 1000 * (hashed - plain),
            }
        )
    print(format_table(rows, ["read", "MB", "unchecked s", "checked s", "overhead %", "added ms"], floatfmt="{:.3f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
