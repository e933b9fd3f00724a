"""Scale models of the paper's OGB presets : synthetic graphs of each dataset's shape,
the preset's (d, n), measured per core, then projected to the whole preset.

    python -m bench.scale                          # all four shapes at full size (~10 min on 2 cores)
    python -m bench.scale --datasets ogbl-ddi --links 4000
    python -m bench.scale --scale 0.25             # every graph at a quarter of its nodes and edges

Per dataset:
1. A synthetic graph with the dataset's node and (training) edge count: Chung-Lu with power-law
   weights (exponent --gamma, heavy-tailed degrees) for collab/ppa/citation2, and a near-uniform dense
   Chung-Lu graph with log-normal weights for ddi. Real OGB data cannot be downloaded here.
2. A shard task of --links candidate links (half training edges, half uniform non-edges), run the way a
   Ray worker runs it (preprocess.job.build_shard: sample, encode, stream to a tar) in a fresh child
   process that memory-maps the graph, as a worker maps it from Ray's object store. Measured there:
   process CPU seconds (holds up on a shared machine), links/s per core, bytes per link, peak RSS
   (the child's VmHWM, common.memory; a Ray worker adds its own imports: --ray-job measures that too).
3. The loader's training reads of that shard (decode, relabel, induce edges, pack), in another child,
   through bench.loader's measurement: tokens/s per loader process (CPU time) and its peak RSS.
4. Projection of the whole paper preset (every view plus every eval candidate of the OGB protocol;
   split sizes below are OGB's): disk, core-hours of preprocessing, and loader processes per GPU at the
   1.85 M tokens/s an H200 consumed with the paper's citeseer model.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common.datasets.spec import DatasetSpec

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from bench.child import run_child
from common.graph import Graph
from common.memory import peak_rss_mb
from common.presets import get_preset

GPU_TOKENS_PER_S = 1.85e6  # the paper's citeseer model's step on an H200


@dataclass(frozen=True)
class Shape:
    name: str
    nodes: int
    edges: int  # training edges of the real split (the graph links are sampled on)
    train_pos: int  # training positives (= edges)
    eval_links: int  # valid + test candidates of the OGB protocol, after deduplication by pair
    dense: bool = False


# OGB's split statistics (ogb.stanford.edu/docs/linkprop). Eval candidates: collab 60,084 + 46,329
# positives, 100,000 shared negatives per split; ppa 21,231 + 42,463 positives, 3,000,000 negatives per
# split; citation2 86,596 sources per split, each with 1 positive and 1,000 negatives; ddi 133,489 +
# 133,488 positives, 101,882 + 95,599 negatives.
SHAPES = {
    s.name: s
    for s in [
        Shape("ogbl-collab", 235_868, 967_632, 1_179_052, 60_084 + 46_329 + 2 * 100_000),
        Shape("ogbl-ppa", 576_289, 21_231_931, 21_231_931, 21_231 + 42_463 + 2 * 3_000_000),
        Shape("ogbl-citation2", 2_927_963, 30_387_995, 30_387_995, 2 * 86_596 * 1_001),
        Shape("ogbl-ddi", 4_267, 1_067_911, 1_067_911, 133_489 + 133_488 + 101_882 + 95_599, dense=True),
    ]
}


# ---------------------------------------------------------------------------- graphs
def chung_lu(nodes: int, edges: int, weights: np.ndarray, rng: np.random.Generator) -> Graph:
    """Edges drawn with P(endpoint = i) proportional to weights[i]; duplicates and self-loops are
    dropped, so draw a little more than asked and trim to the target count."""
    p = weights / weights.sum()
    want = edges
    e = np.empty((0, 2), np.int64)
    for _ in range(6):
        extra = int((want - len(e)) * 1.15) + 1024
        draw = rng.choice(nodes, size=(extra, 2), p=p)
        draw = draw[draw[:, 0] != draw[:, 1]]
        key = np.unique(np.concatenate([e, np.sort(draw, 1)]) @ np.array([nodes, 1]))
        e = np.stack([key // nodes, key % nodes], 1)
        if len(e) >= want:
            break
    e = e[rng.permutation(len(e))[:want]]
    return Graph.from_edges(e, num_nodes=nodes)


def dense_graph(nodes: int, edges: int, rng: np.random.Generator) -> Graph:
    """Near-uniform dense graph (ddi-like): p_ij = min(1, c w_i w_j), log-normal weights (sigma 0.5)."""
    w = rng.lognormal(0.0, 0.5, nodes)
    a, b = np.triu_indices(nodes, 1)
    prod = w[a] * w[b]
    c = edges / prod.sum()
    keep = rng.random(len(a)) < np.minimum(1.0, c * prod)
    return Graph.from_edges(np.stack([a[keep], b[keep]], 1), num_nodes=nodes)


def make_graph(shape: Shape, scale: float, gamma: float, seed: int) -> Graph:
    rng = np.random.default_rng(seed)
    nodes, edges = max(64, int(shape.nodes * scale)), max(256, int(shape.edges * scale))
    if shape.dense:
        return dense_graph(nodes, edges, rng)
    w = (np.arange(nodes) + 1.0) ** (-1.0 / (gamma - 1.0))  # power-law degrees
    w = np.minimum(w / w.mean() * (2 * edges / nodes), math.sqrt(2 * edges))  # cap hubs at sqrt(2E)
    return chung_lu(nodes, edges, w, rng)


# ---------------------------------------------------------------------------- measurements (child processes)
def shard_task_child(graph_dir: str, out: str, d: int, n: int, block: int) -> dict:
    """Runs in a fresh process: map the graph, build one shard like a Ray worker, report CPU and memory."""
    from preprocess.job import ShardTask, build_shard

    indptr = np.load(f"{graph_dir}/indptr.npy", mmap_mode="r")
    indices = np.load(f"{graph_dir}/indices.npy", mmap_mode="r")
    links = np.load(f"{graph_dir}/links.npy")
    label = (np.arange(len(links)) % 2 == 0).astype(np.float32)
    warm = ShardTask(0, 64, d, n, 1, block, out + "/warm", "warm.tar", True)
    build_shard(indptr, indices, links[:64, 0], links[:64, 1], label[:64], warm)  # load the numba cache untimed
    t, w = time.process_time(), time.perf_counter()
    task = ShardTask(0, len(links), d, n, 7, block, out, "train-v000-00000.tar", True)
    stats = build_shard(indptr, indices, links[:, 0], links[:, 1], label, task)
    cpu, wall = time.process_time() - t, time.perf_counter() - w
    return {
        "links": stats["links"],
        "tokens": stats["tokens"],
        "bytes": stats["bytes"],
        "blocks": stats["blocks"],
        "sha256": stats["sha256"],
        "cpu_s": cpu,
        "wall_s": wall,
        "peak_rss_mb": peak_rss_mb(),
    }


def write_manifest_for(tmp: Path, shape: Shape, d: int, n: int, stats: dict) -> None:
    """Make the single-shard folder a readable v2 shard set, so the loader bench can read it."""
    from common.shards import graph_entry, open_storage, write_manifest

    indptr = np.load(tmp / "graph" / "indptr.npy", mmap_mode="r")
    indices = np.load(tmp / "graph" / "indices.npy", mmap_mode="r")
    storage = open_storage(tmp / "set")
    for name, src in (("graph-train-indptr.npy", "indptr.npy"), ("graph-train-indices.npy", "indices.npy")):
        (tmp / "set" / name).write_bytes((tmp / "graph" / src).read_bytes())
    from common.presets import n_max

    write_manifest(
        storage,
        {
            "dataset": f"{shape.name}-shaped",
            "key": "bench",
            "num_nodes": int(indptr.shape[0] - 1),
            "n_max": n_max(d, n),
            "sampling": {"d": d, "n": n},
            "protocols": [],
            "views": 1,
            "features": None,
            "graphs": {"train": graph_entry("train", indptr, indices)},
            "fingerprint": "bench",
            "config": {},
            "sets": [
                {"split": "train", "protocol": None, "view": 0, "graph": "train", "links": stats["links"], "shards": 1}
            ],
            "shards": [
                {
                    "name": "train-v000-00000.tar",
                    "split": "train",
                    "protocol": None,
                    "view": 0,
                    "links": stats["links"],
                    "tokens": stats["tokens"],
                    "blocks": stats["blocks"],
                    "bytes": stats["bytes"],
                    "sha256": stats["sha256"],
                }
            ],
            "eval": {},
            "totals": {"links": stats["links"], "tokens": stats["tokens"], "bytes": stats["bytes"]},
        },
    )


def ray_job_row(g: Graph, shape: Shape, d: int, n: int, links: int, out: str) -> dict:
    """The real preprocessing job on one embedded Ray worker: its links/s and the worker's peak RSS
    (Ray's own footprint included), for a training view of about `links` links."""
    from common.datasets.base import LinkDataset, Split
    from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig
    from preprocess.job import run_job

    ds = LinkDataset(name=f"{shape.name}-shaped", graph=g, splits={"train": Split(pos=g.edge_array())})
    percent = min(100.0, 100.0 * links / 2 / g.num_edges)
    cfg = PreprocessConfig(
        data=DatasetSpec(ds.name),
        sampling=SamplingConfig(d, n),
        out=out,
        num_cpus=1,
        force=True,
        candidates=CandidateConfig(views=1, splits=("train",), percent=percent),
    )
    s = run_job(cfg, ds).summary
    return {
        "ray_links": s["links"],
        "ray_links_per_s": s["links_per_second"],
        "ray_worker_peak_rss_mb": s["worker_peak_rss_mb"],
    }


def loader_row(shard_set: str, seconds: float) -> dict | None:
    """Training-read throughput of one loader process on the set, via bench.loader (when present)."""
    try:
        return run_child("bench.loader", "measure_training_reads", shard_set, seconds)
    except RuntimeError as err:
        print(f"  loader measurement unavailable: {err}", file=sys.stderr)
        return None


def measure(
    shape: Shape, scale: float, links: int, gamma: float, block: int, loader_seconds: float, ray_job: bool
) -> dict:
    preset = get_preset(shape.name)
    d, n = preset.sampling
    t = time.perf_counter()
    g = make_graph(shape, scale, gamma, seed=0)
    gen_s = time.perf_counter() - t
    rng = np.random.default_rng(1)
    cand = np.empty((links, 2), np.int64)  # alternating training edges and uniform random pairs
    cand[0::2] = g.edge_array()[rng.integers(0, g.num_edges, (links + 1) // 2)]
    cand[1::2] = rng.integers(0, g.num_nodes, (links // 2, 2))
    with tempfile.TemporaryDirectory(prefix=f"scale-{shape.name}-") as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "graph").mkdir()
        np.save(tmp / "graph" / "indptr.npy", g.indptr)
        np.save(tmp / "graph" / "indices.npy", g.indices)
        np.save(tmp / "graph" / "links.npy", cand)
        graph_desc = {
            "nodes": g.num_nodes,
            "edges": g.num_edges,
            "mean_degree": float(g.degree.mean()),
            "max_degree": int(g.degree.max()),
            "generate_s": round(gen_s, 1),
        }
        if ray_job:
            graph_desc.update(ray_job_row(g, shape, d, n, links, str(tmp / "ray")))
        del g
        task = run_child("bench.scale", "shard_task_child", str(tmp / "graph"), str(tmp / "set"), d, n, block)
        write_manifest_for(tmp, shape, d, n, task)
        loader = loader_row(str(tmp / "set"), loader_seconds)
    row = {
        "dataset": shape.name,
        "sampling": f"({d},{n})",
        "scale": scale,
        **graph_desc,
        "links": task["links"],
        "tokens_per_link": task["tokens"] / task["links"],
        "bytes_per_link": task["bytes"] / task["links"],
        "links_per_s_core": task["links"] / task["cpu_s"],
        "task_peak_rss_mb": task["peak_rss_mb"],
    }
    if loader:
        row.update(loader_tokens_per_s=loader["tokens_per_s"], loader_peak_rss_mb=loader["peak_rss_mb"])
    row.update(project(shape, preset, row))
    return row


def project(shape: Shape, preset, row: dict) -> dict:
    """The whole paper preset: views x training links per view + eval candidates, at the measured rates."""
    views = max(1, min(20, int(round(preset.epochs))))  # pipelines.run's default number of views
    train = views * shape.train_pos * preset.train_percent / 100 * 2  # one negative per positive
    total = train + shape.eval_links
    out = {
        "views": views,
        "total_links": total,
        "disk_gb": total * row["bytes_per_link"] / 1e9,
        "core_hours": total / row["links_per_s_core"] / 3600,
    }
    if "loader_tokens_per_s" in row:
        out["loaders_per_gpu"] = GPU_TOKENS_PER_S / row["loader_tokens_per_s"]
    return out


# ---------------------------------------------------------------------------- report
COLS = [
    ("dataset", "dataset", "s"),
    ("sampling", "(d,n)", "s"),
    ("nodes", "nodes", ","),
    ("edges", "edges", ","),
    ("mean_degree", "mean deg", ".0f"),
    ("max_degree", "max deg", ","),
    ("tokens_per_link", "tokens/link", ".0f"),
    ("bytes_per_link", "bytes/link", ".0f"),
    ("links_per_s_core", "links/s/core", ",.0f"),
    ("task_peak_rss_mb", "task peak RSS MB", ".0f"),
    ("loader_tokens_per_s", "loader tokens/s", ",.0f"),
    ("loader_peak_rss_mb", "loader RSS MB", ".0f"),
]
RAY = [
    ("dataset", "dataset", "s"),
    ("ray_links", "links", ","),
    ("ray_links_per_s", "links/s (1 worker)", ",.0f"),
    ("ray_worker_peak_rss_mb", "worker peak RSS MB (incl. Ray)", ".0f"),
]
PROJ = [
    ("dataset", "dataset", "s"),
    ("views", "views", "d"),
    ("total_links", "links (all views + eval)", ",.0f"),
    ("disk_gb", "disk GB", ".1f"),
    ("core_hours", "core-hours", ".1f"),
    ("loaders_per_gpu", "loaders per GPU", ".2f"),
]


def markdown(rows: list[dict], cols) -> str:
    head = "| " + " | ".join(c[1] for c in cols) + " |"
    sep = "|" + "|".join("---" for _ in cols) + "|"
    body = ["| " + " | ".join(format(r[c[0]], c[2]) if c[0] in r else "n/a" for c in cols) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default=",".join(SHAPES), help="comma list of " + ", ".join(SHAPES))
    p.add_argument("--scale", type=float, default=1.0, help="fraction of each graph's nodes and edges (default 1)")
    p.add_argument("--links", type=int, default=4096, help="links sampled per dataset (default 4096)")
    p.add_argument("--gamma", type=float, default=2.2, help="power-law degree exponent (default 2.2)")
    p.add_argument("--block-size", type=int, default=256, help="links per Arrow block (default 256)")
    p.add_argument("--loader-seconds", type=float, default=10.0, help="CPU seconds of loader reads per dataset")
    p.add_argument(
        "--ray-job",
        action="store_true",
        help="also run the real Ray preprocessing job on one worker (worker peak RSS incl. Ray)",
    )
    p.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = p.parse_args(argv)
    names = [s for s in args.datasets.split(",") if s]
    if bad := [s for s in names if s not in SHAPES]:
        p.error(f"--datasets: unknown {', '.join(bad)}; choose from {', '.join(SHAPES)}")
    if not 0 < args.scale <= 1:
        p.error(f"--scale: must be in (0, 1], got {args.scale}")
    rows = []
    for name in names:
        print(f"{name}: building the graph and measuring ...", file=sys.stderr, flush=True)
        rows.append(
            measure(
                SHAPES[name], args.scale, args.links, args.gamma, args.block_size, args.loader_seconds, args.ray_job
            )
        )
    print("### Measured per core (one shard task, one loader process)\n")
    print(markdown(rows, COLS))
    print("\n### Projected whole paper preset\n")
    print(markdown(rows, PROJ))
    if args.ray_job:
        print("\n### The Ray preprocessing job, one worker\n")
        print(markdown(rows, RAY))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    from common.cli import run_cli  # one-line errors; --debug for the traceback

    sys.exit(run_cli(main, prog="python bench/scale.py", strip_debug=True))
