"""Cost of top-k recommendations for every node (issue 19), measured on a sample, projected to the whole graph.

    python -m bench.recommend --nodes 4 --pool 50 --presets tiny,ogbl-collab

A collab-shaped graph (235,868 nodes, 967,632 edges: bench.scale's Chung-Lu power-law graph; the
latent-space generator of common/datasets/synthetic.py is O(N^2) in pairs, hours at this size) and, per
preset, a PENCIL model of the preset's size (random weights: the cost does not depend on them) with the
preset's (d, n). One process, torch on ONE thread, so every rate is per CPU core, from process CPU time
(it holds up on a shared machine):
- retrieval seconds per query node for each retriever (a block of --nodes queries);
- pairs scored per second per core (sampling, inducing, packing and the fp32 forward);
- projection to all nodes: retrieval + scoring core-hours, at --pool pairs per node;
- peak RSS of the process (the per-worker budget: one block of query nodes at a time).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from bench.scale import SHAPES, make_graph
from common.memory import peak_rss_mb
from common.presets import get_preset, n_max
from common.retrieval import RETRIEVERS, retrieve


def cpu() -> float:
    return time.process_time()


def retrieval_rows(graph, queries, pool: int) -> list[dict]:
    rows = []
    for method in RETRIEVERS:
        t = cpu()
        p = retrieve(graph, queries, method, pool)
        dt = cpu() - t
        rows.append({"retriever": method, "s_per_node": dt / len(queries), "mean_pool": float(p.count.mean()),
                     "core_h_all_nodes": dt / len(queries) * graph.num_nodes / 3600})
    return rows


def scoring_row(graph, queries, pool: int, preset_name: str, orderings: int) -> dict:
    from pipelines.recommend_core import RecConfig, run_block, sampler_for, scorer_for
    from trainer.model import ModelConfig, Pencil

    preset = get_preset(preset_name)
    nm = n_max(*preset.sampling)
    cfg_m = ModelConfig.from_preset(preset, n_max=nm)
    torch.manual_seed(0)
    model = Pencil(cfg_m).eval()
    cfg = RecConfig(k=min(20, pool), pool=pool, retriever="ra", orderings=orderings, sampling=tuple(preset.sampling),
                    n_max=nm, block_nodes=len(queries))
    sampler, scorer = sampler_for(graph, cfg), scorer_for(model, graph, cfg, torch.device("cpu"))
    run_block(0, queries[:1], graph, None, cfg, sampler, scorer)  # warm-up: numba compile, allocator
    t = cpu()
    _, pairs = run_block(0, queries, graph, None, cfg, sampler, scorer)
    dt = cpu() - t
    rate = pairs * orderings / dt
    return {"preset": preset_name, "sampling": list(preset.sampling), "hidden": cfg_m.hidden, "layers": cfg_m.layers,
            "pairs": pairs, "pairs_per_s_core": rate,
            "core_h_all_nodes": graph.num_nodes * pool * orderings / rate / 3600}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.recommend", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=4, help="sampled query nodes (default 4)")
    p.add_argument("--pool", type=int, default=50, help="candidates per node (default 50)")
    p.add_argument("--presets", default="tiny,ogbl-collab", help="model sizes to measure (default tiny,ogbl-collab)")
    p.add_argument("--orderings", type=int, default=1)
    p.add_argument("--scale", type=float, default=1.0, help="fraction of collab's nodes and edges (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    t = time.perf_counter()
    graph = make_graph(SHAPES["ogbl-collab"], args.scale, 2.5, args.seed)
    print(f"graph: {graph} built in {time.perf_counter() - t:.1f} s", flush=True)
    rng = np.random.default_rng(args.seed)
    queries = np.sort(rng.choice(np.flatnonzero(graph.degree > 0), size=args.nodes, replace=False))
    report = {"graph": repr(graph), "nodes_sampled": args.nodes, "pool": args.pool,
              "retrieval": retrieval_rows(graph, queries, args.pool), "scoring": []}
    for r in report["retrieval"]:
        print(f"retrieval {r['retriever']:>4}: {r['s_per_node'] * 1e3:8.1f} ms/node/core, mean pool "
              f"{r['mean_pool']:.1f}, all nodes {r['core_h_all_nodes']:.2f} core-h", flush=True)
    for name in args.presets.split(","):
        row = scoring_row(graph, queries, args.pool, name.strip(), args.orderings)
        report["scoring"].append(row)
        print(f"scoring {name}: {row['pairs_per_s_core']:.1f} pairs/s/core ({row['pairs']} pairs), all nodes "
              f"x pool {args.pool}: {row['core_h_all_nodes']:.1f} core-h", flush=True)
    report["peak_rss_mb"] = peak_rss_mb()
    print(f"peak RSS {report['peak_rss_mb']:.0f} MB")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
