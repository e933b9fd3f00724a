"""A big edge list before sampling starts : load, split and candidates of an
ogbl-citation2-sized Parquet edge list, timed, with the driver's peak memory.

    python -m bench.big_load                          # 30 M edges, 2.9 M nodes (an OGB-scale shape)
    python -m bench.big_load --edges 3000000 --nodes 290000
    python -m bench.big_load --ids sparse             # ids spread over 63 bits (the hashed mapping path)
    python -m bench.big_load --ids string             # ids as strings ("n<k>")

1. A heavy-tailed edge list is generated, vectorised: endpoint k drawn with P(k) ~ k^(-2/3) (inverse
   CDF of u^3), labels shuffled so hubs are spread, then written as Parquet (src, dst).
2. In a fresh child process (its own peak RSS, VmHWM), `python -m preprocess`'s job runs the way the
   issue ran it (--sampling 1,40 --views 1 --percent 2) up to the moment Ray would start sampling:
   load + id mapping + graph + split + negatives + fingerprint + candidate sets + the queries, graph
   and node-id files written. The child's log lines are the progress a user sees.
Targets: <= 30 s and <= 3 GB driver peak on 2 cores. On a shared machine, wall time
follows the load average (printed); the child's CPU seconds (all its threads, imports included) do not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common.datasets.spec import DatasetSpec

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def generate(path: Path, edges: int, nodes: int, ids: str, seed: int = 0) -> dict:
    """Write a heavy-tailed edge list; returns its facts. About 2 s per 10 M edges (numpy + Arrow)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    label = rng.permutation(nodes)  # hubs get random ids, not the smallest ones
    cols = {}
    for name in ("src", "dst"):
        k = (nodes * rng.random(edges) ** 3).astype(np.int64)  # P(k) ~ k^(-2/3): heavy-tailed degrees
        cols[name] = label[k]
    if ids == "sparse":  # a fixed odd multiplier is a bijection mod 2^63: distinct ids spread over 63 bits
        cols = {k: (v * 0x5851F42D4C957F2D) & 0x7FFFFFFFFFFFFFFF for k, v in cols.items()}
    table = pa.table(
        {k: (pa.array(v) if ids != "string" else pa.array(np.char.add("n", v.astype(str)))) for k, v in cols.items()}
    )
    pq.write_table(table, path, row_group_size=4 << 20)
    return {"seconds": round(time.perf_counter() - t0, 1), "bytes": path.stat().st_size}


def before_sampling(path: str, out: str) -> dict:
    """In the child: run_job until Ray would start sampling; wall time per step and peak RSS."""
    import logging

    import common.datasets as datasets
    import preprocess.job as job
    from common.memory import peak_rss_mb
    from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    marks = {}
    real_load = datasets.load_dataset

    def timed_load(*a, **k):
        t = time.perf_counter()
        ds = real_load(*a, **k)
        marks["load"] = time.perf_counter() - t
        marks["nodes"], marks["edges"] = ds.num_nodes, ds.graph.num_edges
        return ds

    class Stop(Exception):
        pass

    def stop(*a, **k):
        raise Stop

    datasets.load_dataset, job.execute_plan = timed_load, stop
    config = PreprocessConfig(
        data=DatasetSpec(path),
        sampling=SamplingConfig(1, 40),
        out=out,
        candidates=CandidateConfig(views=1, percent=2.0),
        num_cpus=2,
    )
    t0 = time.perf_counter()
    try:
        job.run_job(config)
    except Stop:
        pass
    import resource

    use = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "seconds": time.perf_counter() - t0,
        "load_seconds": marks["load"],
        "nodes": marks["nodes"],
        "cpu_seconds": use.ru_utime + use.ru_stime,
        "load_average": os.getloadavg()[0],
        "train_edges": marks["edges"],
        "peak_rss_mb": peak_rss_mb(),
    }


def measure(path: Path, out: Path) -> dict:
    code = (
        f"import json,sys; sys.path.insert(0, {str(ROOT)!r}); from bench.big_load import before_sampling; "
        f"print(json.dumps(before_sampling({str(path)!r}, {str(out)!r})))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)  # logs pass through
    if res.returncode != 0:
        raise SystemExit(f"bench.big_load: the child failed (rc {res.returncode})")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.big_load", description=__doc__.splitlines()[0])
    p.add_argument("--edges", type=int, default=30_000_000)
    p.add_argument("--nodes", type=int, default=2_900_000)
    p.add_argument(
        "--ids",
        choices=("dense", "sparse", "string"),
        default="dense",
        help="dense 0..N-1 ids (like OGB), 63-bit sparse ids, or strings",
    )
    p.add_argument("--dir", default=None, help="work folder (default: a temporary one, removed)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "big.parquet"
        gen = generate(path, args.edges, args.nodes, args.ids)
        print(
            f"generated {args.edges:,} edges over {args.nodes:,} node labels ({args.ids} ids) in {gen['seconds']} s, "
            f"{gen['bytes'] / 2**20:.0f} MiB Parquet",
            file=sys.stderr,
        )
        m = measure(path, Path(tmp) / "shards")
    edge_arrays_gb = args.edges * 16 / 1e9
    print(
        "| edges | nodes | ids | load + split s | before sampling s | CPU s (process) | load avg | "
        "driver peak RSS | x edge arrays | targets |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.edges:,} | {m['nodes']:,} | {args.ids} | {m['load_seconds']:.1f} | {m['seconds']:.1f} | "
        f"{m['cpu_seconds']:.1f} | {m['load_average']:.1f} | "
        f"{m['peak_rss_mb'] / 1024:.2f} GiB | {m['peak_rss_mb'] * 2**20 / 1e9 / edge_arrays_gb:.1f} | "
        "<= 30 s, <= 3 GB |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
