"""Cost of top-k recommendations for every node, measured on a sample, projected to the whole graph.

    python -m bench.recommend --nodes 4 --pool 50 --presets tiny,ogbl-collab
    python -m bench.recommend --nodes 256 --pool 50 --presets tiny,ogbl-collab --device cuda --retrievers ra

A collab-shaped graph (235,868 nodes, 967,632 edges: bench.scale's Chung-Lu power-law graph; the
latent-space generator of common/datasets/synthetic.py is O(N^2) in pairs, hours at this size) and, per
preset, a PENCIL model of the preset's size (random weights: the cost does not depend on them) with the
preset's (d, n). One process, torch on ONE thread, so every CPU rate is per core, from process CPU time
(it holds up on a shared machine):
- retrieval seconds per query node for each retriever (a block of --nodes queries);
- per scoring stage, pairs per second: sampling (CPU, per core), packing (CPU, per core), the model's fp32
  forward passes, and pack + forward as the scoring actor runs them (PairScorer.score_blocks);
- projection to all nodes at --pool pairs per node: core-hours on CPU; with --device cuda, GPU-hours
  (wall clock, one GPU) plus the sampling core-hours and the cores it takes to keep the GPU fed;
- peak RSS of the process (the per-worker budget: one block of query nodes at a time), and GPU peak memory.
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


def device_clock(device: torch.device):
    """Seconds on the scoring device's clock: process CPU time on the CPU (per core, robust to a shared
    machine), wall time after a synchronise on a GPU (what a GPU-hour buys)."""
    if device.type == "cpu":
        return cpu

    def clock() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()

    return clock


def retrieval_rows(graph, queries, pool: int, methods) -> list[dict]:
    rows = []
    for method in methods:
        t = cpu()
        p = retrieve(graph, queries, method, pool)
        dt = cpu() - t
        rows.append(
            {
                "retriever": method,
                "s_per_node": dt / len(queries),
                "mean_pool": float(p.count.mean()),
                "core_h_all_nodes": dt / len(queries) * graph.num_nodes / 3600,
            }
        )
    return rows


def scoring_row(graph, queries, pool: int, preset_name: str, orderings: int, device: torch.device) -> dict:
    """Time each stage of scoring a block's pools: sampling and packing (CPU, per core), the model's forward
    passes on `device`, and pack + forward as the scoring actor runs them (PairScorer.score_blocks)."""
    from pipelines.recommend.engine import RecConfig, sampler_for, scorer_for
    from trainer.model.pencil import ModelConfig, Pencil
    from trainer.scoring import forward_batches, fp32_inference

    preset = get_preset(preset_name)
    nm = n_max(*preset.sampling)
    cfg_m = ModelConfig.from_preset(preset, n_max=nm)
    torch.manual_seed(0)
    model = Pencil(cfg_m).eval().to(device)
    cfg = RecConfig(
        k=min(20, pool),
        pool=pool,
        retriever="ra",
        orderings=orderings,
        sampling=tuple(preset.sampling),
        n_max=nm,
        block_nodes=len(queries),
    )
    sampler, scorer = sampler_for(graph, cfg), scorer_for(model, graph, cfg, device)
    node, cand, _ = retrieve(graph, queries, "ra", pool).pairs()
    pairs = np.stack([node, cand], axis=1)
    warm = pairs[: min(len(pairs), 2 * pool)]  # numba compile, allocator, cuBLAS handles
    scorer.score_blocks([list(sampler.blocks(warm, k)) for k in range(orderings)], len(warm))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    t = cpu()
    sampled = [list(sampler.blocks(pairs, k)) for k in range(orderings)]
    t_sample = cpu() - t
    t = cpu()
    packed = [b for k, blocks in enumerate(sampled) for b in scorer.packed(blocks, k)]
    t_pack = cpu() - t
    clock = device_clock(device)
    with fp32_inference(model):
        t = clock()
        for _ in forward_batches(model, packed, device):
            pass
        t_forward = clock() - t
    t = clock()
    scorer.score_blocks(sampled, len(pairs))  # pack + forward + copies back, as the scoring actor does
    t_actor = clock() - t

    n = len(pairs) * orderings
    row = {
        "preset": preset_name,
        "device": str(device),
        "sampling": list(preset.sampling),
        "hidden": cfg_m.hidden,
        "layers": cfg_m.layers,
        "pairs": n,
        "batches": len(packed),
        "sample_pairs_per_s_core": n / t_sample,
        "pack_pairs_per_s_core": n / t_pack,
        "forward_pairs_per_s": n / t_forward,
        "actor_pairs_per_s": n / t_actor,
    }
    total = graph.num_nodes * pool * orderings
    if device.type == "cpu":  # every stage on cores: one core-hour figure
        row["core_h_all_nodes"] = total * (t_sample + t_actor) / n / 3600
    else:  # sampling on CPU workers, pack + forward on the GPU's actor: GPU-hours, and the cores that feed it
        row["gpu_h_all_nodes"] = total / row["actor_pairs_per_s"] / 3600
        row["sampling_core_h_all_nodes"] = total / row["sample_pairs_per_s_core"] / 3600
        row["cores_to_feed_gpu"] = row["actor_pairs_per_s"] / row["sample_pairs_per_s_core"]
        row["gpu_peak_mem_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return row


def print_scoring(row: dict, pool: int) -> None:
    head = (
        f"scoring {row['preset']} on {row['device']} ({row['pairs']} pairs, {row['batches']} batches): sample "
        f"{row['sample_pairs_per_s_core']:.0f} and pack {row['pack_pairs_per_s_core']:.0f} pairs/s/core, forward "
        f"{row['forward_pairs_per_s']:.0f} pairs/s, pack + forward {row['actor_pairs_per_s']:.0f} pairs/s"
    )
    if "core_h_all_nodes" in row:
        print(f"{head}; all nodes x pool {pool}: {row['core_h_all_nodes']:.1f} core-h", flush=True)
    else:
        print(
            f"{head}; all nodes x pool {pool}: {row['gpu_h_all_nodes']:.2f} "
            f"GPU-h + {row['sampling_core_h_all_nodes']:.1f}"
            f" sampling core-h ({row['cores_to_feed_gpu']:.1f} cores keep the GPU fed), GPU peak "
            f"{row['gpu_peak_mem_mb']:.0f} MB",
            flush=True,
        )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.recommend", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=4, help="sampled query nodes (default 4)")
    p.add_argument("--pool", type=int, default=50, help="candidates per node (default 50)")
    p.add_argument("--presets", default="tiny,ogbl-collab", help="model sizes to measure (default tiny,ogbl-collab)")
    p.add_argument("--orderings", type=int, default=1)
    p.add_argument("--scale", type=float, default=1.0, help="fraction of collab's nodes and edges (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="where the model scores (default cpu); cuda times the forward passes by wall clock",
    )
    p.add_argument("--retrievers", default=",".join(RETRIEVERS), help="retrievers to time (default all)")
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is visible; run on a GPU machine or use --device cpu")
    methods = [m.strip() for m in args.retrievers.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(RETRIEVERS))
    if unknown:
        p.error(f"--retrievers: unknown {', '.join(unknown)}; use some of {', '.join(RETRIEVERS)}")
    torch.set_num_threads(1)
    t = time.perf_counter()
    graph = make_graph(SHAPES["ogbl-collab"], args.scale, 2.5, args.seed)
    print(f"graph: {graph} built in {time.perf_counter() - t:.1f} s", flush=True)
    rng = np.random.default_rng(args.seed)
    queries = np.sort(rng.choice(np.flatnonzero(graph.degree > 0), size=args.nodes, replace=False))
    report = {
        "graph": repr(graph),
        "nodes_sampled": args.nodes,
        "pool": args.pool,
        "retrieval": retrieval_rows(graph, queries, args.pool, methods),
        "scoring": [],
    }
    for r in report["retrieval"]:
        print(
            f"retrieval {r['retriever']:>4}: {r['s_per_node'] * 1e3:8.1f} ms/node/core, mean pool "
            f"{r['mean_pool']:.1f}, all nodes {r['core_h_all_nodes']:.2f} core-h",
            flush=True,
        )
    for name in args.presets.split(","):
        row = scoring_row(graph, queries, args.pool, name.strip(), args.orderings, device)
        report["scoring"].append(row)
        print_scoring(row, args.pool)
    report["peak_rss_mb"] = peak_rss_mb()
    print(f"peak RSS {report['peak_rss_mb']:.0f} MB")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
