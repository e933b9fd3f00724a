"""Sampler benchmark on the paper's synthetic graph (10,000 nodes, average degree 15; Appendix D, Table 9).

    python bench/sampler.py                # ~2-4 min on 2 shared cores
    python bench/sampler.py --skip-job     # only the single-core sampler tables

1. Time per extracted subgraph for (1,20), (1,30), (2,20), (2,30) on one core (the process is pinned to
   one CPU; process CPU time, best of --repeats, so other tenants' load counts less), our numba kernel
   side by side with a straightforward per-link baseline of the same semantics (numpy frontier sampling +
   torch_geometric.utils.subgraph for the induced subgraph), next to the paper's figures (0.109, 0.132,
   1.392, 4.155 ms). Target: >= 10x faster than the paper.
   "ours" is the whole extraction the paper times: the sampler's node sets plus the induced edges
   (common.induce), which shard format v2 recovers at load time instead of storing; the sampler alone
   (what preprocessing now pays per link) is reported beside it.
2. Bytes per link on disk (zstd Arrow blocks in a tar, format v2: node ids only) against the dense
   float32 token matrix the reference builds, (N+2) x (2*N_max+2) per link.
3. End-to-end Ray job throughput (links/s) with 1 and 2 workers, and a worker's peak RSS.
First, the CPU time to generate the graph itself (target < 30 s; flagged above it).

Links are training edges of the graph (the target edge is removed, as for positives). docs/design.md:
the machines are shared and noisy, so compare ratios measured within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from common.datasets.spec import DatasetSpec

if __package__ in (None, ""):  # `python bench/sampler.py` as well as `python -m bench.sampler`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from common.graph import Graph
from common.induce import Inducer
from common.presets import n_max
from common.shards import Block, pack_shard
from preprocess.sampler import Scratch, sample_subgraphs

CONFIGS = [(1, 20), (1, 30), (2, 20), (2, 30)]
PAPER_MS = {(1, 20): 0.109, (1, 30): 0.132, (2, 20): 1.392, (2, 30): 4.155}
# The latent-space generator (10,000 nodes, degree 15) takes ~2-4 s on a shared 2-core box; the benches and
# the latent-space pipeline build it at every run, so over 30 s of CPU is a regression worth a look.
GRAPH_TARGET_S = 30


def benchmark_graph(seed: int = 0) -> tuple[Graph, str]:
    try:
        from common.datasets.synthetic import latent_space_graph

        return latent_space_graph(num_nodes=10_000, avg_degree=15, seed=seed), "latent-space (Appendix D.4)"
    except ImportError:  # the generator lives in another module; keep the bench runnable without it
        rng = np.random.default_rng(seed)
        edges = rng.integers(0, 10_000, (75_000, 2))
        return Graph.from_edges(edges, num_nodes=10_000), "Erdos-Renyi fallback (latent-space generator missing)"


# ---------------------------------------------------------------------------- the sampler, in blocks as the job runs it
def ours(g: Graph, links: np.ndarray, d: int, n: int, block: int = 256):
    """Node sets of every link (what preprocessing computes and stores), in blocks as the job runs it."""
    scratch = Scratch(g.indptr)
    return [
        sample_subgraphs(
            g.indptr, g.indices, links[i : i + block, 0], links[i : i + block, 1], d, n, seed=i, scratch=scratch
        )
        for i in range(0, len(links), block)
    ]


def ours_with_edges(g: Graph, links: np.ndarray, d: int, n: int, block: int = 256):
    """The full extraction (node sets + induced edges, target removed): what the paper's figures time."""
    inducer = Inducer(g.indptr, g.indices)
    return [(s, inducer.edges(s.node_ptr, s.nodes)) for s in ours(g, links, d, n, block)]


# ---------------------------------------------------------------------------- straightforward per-link baseline
def baseline(g: Graph, edge_index, links: np.ndarray, d: int, n: int, rng: np.random.Generator):
    """Per link: per-root frontier loop with rng.choice, then PyG's induced subgraph, target removed."""
    import torch
    from torch_geometric.utils import subgraph

    out = []
    for u, v in links.tolist():
        nodes = {u: 0, v: 1}
        for root in (u, v):
            frontier = [root]
            for _ in range(d):
                nxt = []
                for f in frontier:
                    nb = g.indices[g.indptr[f] : g.indptr[f + 1]]
                    nxt.extend((nb if len(nb) <= n else rng.choice(nb, n, replace=False)).tolist())
                for x in nxt:
                    nodes.setdefault(x, len(nodes))
                frontier = nxt
        subset = torch.tensor(list(nodes), dtype=torch.long)
        ei, _ = subgraph(subset, edge_index, relabel_nodes=True, num_nodes=g.num_nodes)
        keep = (ei[0] < ei[1]) & ~((ei[0] == 0) & (ei[1] == 1))
        out.append((subset, ei[:, keep]))
    return out


def time_it(fn, repeats: int) -> float:
    """Best CPU time of this process over `repeats` runs: on a shared machine, wall time mostly
    measures the neighbours (both paths are single-threaded, so CPU time is their own time)."""
    times = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def sampler_table(g: Graph, links: np.ndarray, base_links: np.ndarray, repeats: int) -> list[dict]:
    import torch

    torch.set_num_threads(1)
    ei = torch.from_numpy(np.stack([np.repeat(np.arange(g.num_nodes), g.degree), g.indices.astype(np.int64)]))
    rows = []
    for d, n in CONFIGS:
        ours_with_edges(g, links[:64], d, n)  # compile / load the numba cache outside the timing
        baseline(g, ei, base_links[:3], d, n, np.random.default_rng(0))
        t_ours = time_it(lambda: ours_with_edges(g, links, d, n), repeats) / len(links)
        t_nodes = time_it(lambda: ours(g, links, d, n), repeats) / len(links)
        t_base = time_it(lambda: baseline(g, ei, base_links, d, n, np.random.default_rng(0)), 1) / len(base_links)
        full = ours_with_edges(g, links, d, n)
        subs = [s for s, _ in full]
        sizes = np.concatenate([np.diff(s.node_ptr) for s in subs])
        nedges = np.concatenate([np.diff(ep) for _, (ep, _) in full])
        rows.append(
            {
                "config": f"({d},{n})",
                "n_max": n_max(d, n),
                "ours_ms": t_ours * 1e3,
                "nodes_only_ms": t_nodes * 1e3,
                "baseline_ms": t_base * 1e3,
                "paper_ms": PAPER_MS[(d, n)],
                "vs_paper": PAPER_MS[(d, n)] / (t_ours * 1e3),
                "vs_baseline": t_base / t_ours,
                "mean_nodes": float(sizes.mean()),
                "mean_edges": float(nedges.mean()),
                **storage_row(links, subs, d, n),
            }
        )
    return rows


def storage_row(links: np.ndarray, subs, d: int, n: int) -> dict:
    """Bytes per link of the shard tar vs the dense float32 token matrix of the reference."""
    blocks, lo = [], 0
    for s in subs:
        hi = lo + len(s)
        blocks.append(
            Block(
                cid=np.arange(lo, hi),
                src=links[lo:hi, 0],
                dst=links[lo:hi, 1],
                label=np.ones(hi - lo, np.float32),
                node_ptr=s.node_ptr,
                nodes=s.nodes,
            )
        )
        lo = hi
    data, stats = pack_shard(blocks)
    sizes = np.concatenate([np.diff(s.node_ptr) for s in subs])
    dense = float(np.mean((sizes + 2) * (2 * n_max(d, n) + 2) * 4))
    return {
        "bytes_per_link": stats["bytes"] / stats["links"],
        "dense_bytes_per_link": dense,
        "dense_over_ours": dense / (stats["bytes"] / stats["links"]),
    }


# ---------------------------------------------------------------------------- Ray job throughput
def job_table(g: Graph, d: int, n: int, workers: list[int]) -> list[dict]:
    from common.datasets.base import LinkDataset, Split
    from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig
    from preprocess.job import run_job

    ds = LinkDataset(name="bench-synthetic", graph=g, splits={"train": Split(pos=g.edge_array())})
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-sampler-") as out:
        for w in workers:
            cfg = PreprocessConfig(
                data=DatasetSpec("bench-synthetic"),
                sampling=SamplingConfig(d, n),
                candidates=CandidateConfig(views=1, splits=("train",)),
                out=out,
                num_cpus=w,
                links_per_shard=4096,
                force=True,
            )
            t = time.perf_counter()
            s = run_job(cfg, ds).summary
            rows.append(
                {
                    "workers": w,
                    "links": s["links"],
                    "links_per_s_sampling": s["links_per_second"],
                    "links_per_s_with_ray_start": s["links"] / (time.perf_counter() - t),
                    "bytes_per_link": s["bytes"] / s["links"],
                    "worker_peak_rss_mb": s["worker_peak_rss_mb"],
                }
            )
    return rows


# ---------------------------------------------------------------------------- report
def markdown(title: str, rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    head = "| " + " | ".join(c[1] for c in cols) + " |"
    sep = "|" + "|".join("---" for _ in cols) + "|"
    body = ["| " + " | ".join(format(r[c[0]], c[2]) for c in cols) + " |" for r in rows]
    return "\n".join([f"### {title}", "", head, sep, *body, ""])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--links", type=int, default=20_000, help="links timed per configuration (ours)")
    p.add_argument("--baseline-links", type=int, default=300, help="links timed per configuration (baseline)")
    p.add_argument("--repeats", type=int, default=5, help="timing repeats for ours (best CPU time)")
    p.add_argument("--job-sampling", default="2,20", help="(d,n) of the Ray job throughput run")
    p.add_argument("--skip-job", action="store_true", help="skip the Ray job throughput section")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = p.parse_args(argv)

    t = time.process_time()
    g, kind = benchmark_graph()
    graph_s = time.process_time() - t
    rng = np.random.default_rng(0)
    edges = g.edge_array()
    links = edges[rng.integers(0, len(edges), args.links)]
    base_links = links[: args.baseline_links]
    print(f"graph: {kind}: {g}, mean degree {g.degree.mean():.2f}, max {g.degree.max()}")
    flag = "" if graph_s < GRAPH_TARGET_S else f"  (!) over the {GRAPH_TARGET_S} s target"
    print(f"graph generation: {graph_s:.1f} s of CPU (target < {GRAPH_TARGET_S} s){flag}")

    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(affinity)})  # one core for the per-subgraph timings
    try:
        rows = sampler_table(g, links, base_links, args.repeats)
    finally:
        os.sched_setaffinity(0, affinity)
    print(
        markdown(
            "Time per extracted subgraph, one core (ms)",
            rows,
            [
                ("config", "(d,n)", "s"),
                ("n_max", "N_max", "d"),
                ("mean_nodes", "mean nodes", ".1f"),
                ("mean_edges", "mean edges", ".1f"),
                ("paper_ms", "paper", ".3f"),
                ("baseline_ms", "per-link baseline", ".3f"),
                ("ours_ms", "ours (nodes + edges)", ".4f"),
                ("nodes_only_ms", "ours (nodes only)", ".4f"),
                ("vs_paper", "paper / ours", ".1f"),
                ("vs_baseline", "baseline / ours", ".1f"),
            ],
        )
    )
    print(
        markdown(
            "Bytes per link on disk",
            rows,
            [
                ("config", "(d,n)", "s"),
                ("bytes_per_link", "shard bytes/link", ".1f"),
                ("dense_bytes_per_link", "dense float32 tokens bytes/link", ".0f"),
                ("dense_over_ours", "dense / shard", ".0f"),
            ],
        )
    )
    result = {"graph": kind, "graph_cpu_s": graph_s, "sampler": rows}
    if not args.skip_job:
        d, n = (int(x) for x in args.job_sampling.split(","))
        jobs = job_table(g, d, n, [1, 2])
        print(
            markdown(
                f"Ray job end to end, ({d},{n}), {jobs[0]['links']} training links",
                jobs,
                [
                    ("workers", "workers", "d"),
                    ("links_per_s_sampling", "links/s (sampling phase)", ".0f"),
                    ("links_per_s_with_ray_start", "links/s (incl. Ray start)", ".0f"),
                    ("bytes_per_link", "bytes/link", ".1f"),
                    ("worker_peak_rss_mb", "worker peak RSS (MB)", ".0f"),
                ],
            )
        )
        result["job"] = jobs
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    from common.cli import run_cli  # one-line errors; --debug for the traceback

    sys.exit(run_cli(main, prog="python bench/sampler.py", strip_debug=True))
