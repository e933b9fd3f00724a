"""Wall time of the same `pencil run` (search, 3 seeds, blend, report) on 1, 2 and 3 local Ray nodes of one CPU
each (bench/local_ray_cluster.py), with each node's trainer count, beside the plain local run.

    python -m bench.cluster_search [--nodes 1,2,3] [--out DIR]

The run: the 300-node geometric graph of tests/test_auto_e2e.py, `--epochs 3`, a small model, `--device cpu`.
Its shard set is built once by the local run first, so every cluster run reuses it and times training only.
Each trainer asks one CPU, so N nodes run N at once. Projected: the 1-node run's time outside its trainers plus
its trainers' summed seconds over N (no stage waits on another's stragglers, so a lower bound).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):  # `python bench/cluster_search.py` as well as `python -m bench.cluster_search`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.graph_families import geo_splits, write_splits
from bench.local_ray_cluster import local_cluster
from bench.workload import print_table

EXITED = re.compile(r"trainer (.+?) on node ([0-9a-f]+) exited -?\d+ after ([\d.]+) s")


def argv(csv: Path, out: Path) -> list[str]:
    return [
        *(sys.executable, "-m", "pipelines", "run", "--dataset", str(csv), "--nodes", str(csv.with_name("nodes.csv"))),
        *("--seeds", "0,1,2", "--epochs", "3", "--device", "cpu", "--out", str(out)),
        *("--shards", str(csv.parent / "shards"), "--num-cpus", "1"),
        *("--train-arg=--hidden=32", "--train-arg=--ffn=64", "--train-arg=--heads=2"),
    ]


def timed(csv: Path, out: Path, env: dict) -> tuple[float, str]:
    t = time.perf_counter()
    done = subprocess.run(argv(csv, out), env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"pencil run failed: {(done.stdout + done.stderr)[-3000:]}")
    return wall, done.stdout + done.stderr


def trainers(log: str, names: dict) -> tuple[Counter, float]:
    """(trainers per node, by the name of its custom resource; the trainers' summed wall seconds), from the
    driver's lines `trainer K on node ID exited C after S s` (pipelines.core.ray_pool)."""
    ended = EXITED.findall(log)
    return Counter(names.get(node, node[:8]) for _, node, _ in ended), sum(float(s) for _, _, s in ended)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="1,2,3")
    p.add_argument("--out", type=Path, default=None, help="work folder (default: a temporary one)")
    args = p.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="cluster-search-"))
    root.mkdir(parents=True, exist_ok=True)
    csv = write_splits(root / "geo.csv", geo_splits())
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    timed(csv, root / "warm", env)  # builds the shard set: no timed run pays for it
    wall, _ = timed(csv, root / "local", env)
    rows, serial = [["local (children)", f"{wall:.1f}", "-", "-", "-"]], None
    for n in [int(x) for x in args.nodes.split(",")]:
        with local_cluster(root, nodes=n, num_cpus=1) as cluster:
            names = {v: k for k, v in cluster.node_ids().items()}
            wall, log = timed(csv, root / f"nodes{n}", cluster.env)
        counts, busy = trainers(log, names)
        if serial is None:  # the 1-node run: what is not a trainer, and its trainers' seconds
            serial, one_busy = wall - busy, busy
        per_node = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        rows.append([n, f"{wall:.1f}", per_node, f"{busy:.1f}", f"{serial + one_busy / n:.1f}"])
    print_table(
        "pencil run (geo, 3 seeds, --epochs 3, CPU) on local Ray nodes of one CPU each",
        ["nodes", "wall s", "trainers per node", "trainer s (sum)", "projected s"],
        rows,
    )
    if serial is not None:
        print(f"\noutside the trainers (1 node): {serial:.1f} s; trainers: {one_busy:.1f} s summed")
        for n in (4, 8, 16):
            print(f"projected on {n} nodes of one GPU (or CPU) each: {serial + one_busy / n:.1f} s (a lower bound)")


if __name__ == "__main__":
    main()
