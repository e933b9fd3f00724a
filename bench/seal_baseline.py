"""SEAL (DRNL labels, DGCNN from PyG's layers) on a dataset, for a given wall time: the peer the own-graph suite
sets `--preset auto` against at equal time (bench/own_graph_suite.py).

    python -m bench.seal_baseline --dataset EDGES --seconds 300 --out seal.json [--hops 2 --per-hop 10]
    python -m bench.seal_baseline --dataset EDGES --seconds 3600 --epochs 10 --eval-splits valid --out seal.json

The same split and the same original protocol as `pencil run` (the dataset loader's seeded 85/5/10 split, or the
temporal split of an edge list with a time column, --split random|temporal as there; each positive ranked against
the split's shared random negatives), test at the best validation MRR. SEAL reads the structure only. Enclosing
subgraphs come from the project's sampler: --hops hops of at most --per-hop neighbours per frontier node (SEAL
on large graphs caps the nodes per hop the same way), the target edge removed; fresh negatives every epoch.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bench import seal
from common.atomic import write_json_atomic
from common.cli import Parser, run_cli, summary
from common.datasets import DatasetSpec, load_dataset
from common.eval_scores import write_scores
from common.flags import add_dataset_flags
from common.induce import Inducer
from common.memory import peak_rss_mb
from preprocess.candidates import protocol_candidates, training_view
from preprocess.config import CandidateConfig
from preprocess.sampler import derive_seed, sample_subgraphs

log = logging.getLogger("bench.seal_baseline")
BLOCK = 64  # subgraphs per optimiser step


def blocks(graph, inducer: Inducer, src, dst, label, hops: int, per_hop: int, seed: int) -> list:
    out = []
    for lo in range(0, len(src), BLOCK):
        sub = sample_subgraphs(
            graph.indptr, graph.indices, src[lo : lo + BLOCK], dst[lo : lo + BLOCK], hops, per_hop, seed + lo
        )
        edge_ptr, edges = inducer.edges(sub.node_ptr, sub.nodes)
        out.append(
            (sub.node_ptr, edge_ptr, edges, seal.drnl_labels(sub.node_ptr, edge_ptr, edges), label[lo : lo + BLOCK])
        )
    return out


def eval_set(dataset, split: str, hops: int, per_hop: int, seed: int):
    """The split's eval set as seal.fit reads it, and the candidate ids in its blocks' order."""
    graph = dataset.graph_for(split)
    c = protocol_candidates(dataset, split, "original")
    order = np.concatenate([c.pos_cid, c.neg_cid.reshape(-1)])
    bl = blocks(
        graph, Inducer(graph.indptr, graph.indices), c.src[order], c.dst[order], c.label[order], hops, per_hop, seed
    )
    return (bl, "original", len(c.pos_cid), c.neg_cid.shape), order


def build_parser(prog: str = "python -m bench.seal_baseline") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    add_dataset_flags(p, split_kinds=True)
    p.add_argument("--seconds", type=float, required=True, help="wall time for training (whole epochs, at least one)")
    p.add_argument("--out", required=True, help="result .json")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hops", type=int, default=2)
    p.add_argument("--per-hop", type=int, default=10, help="neighbours per frontier node and hop (default 10)")
    p.add_argument(
        "--train-positives",
        type=int,
        default=4000,
        help="training positives per epoch, a seeded subset (default 4000, as the general preset on CPU)",
    )
    p.add_argument("--epochs", type=int, default=1000, help="stop after this many epochs at most (default 1000)")
    p.add_argument(
        "--scores",
        default=None,
        metavar="DIR",
        help="also save the best epoch's logits as DIR/<split>-original.npz (for bench.top_negatives)",
    )
    p.add_argument(
        "--eval-splits",
        default="valid,test",
        choices=("valid,test", "valid"),
        help="valid: validation only, test is never sampled or scored (studies that choose on it)",
    )
    return p


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.seal_baseline")


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    ds = load_dataset(DatasetSpec.from_args(args))
    inducer = Inducer(ds.graph.indptr, ds.graph.indices)
    train = ds.splits["train"].pos
    percent = min(100.0, 100.0 * args.train_positives / max(1, len(train)))

    def train_epoch(epoch: int) -> list:
        rng = np.random.default_rng(derive_seed(args.seed, "seal", epoch))
        v = training_view(
            train, ds.graph, CandidateConfig(percent=percent, neg_ratio=1), rng, nodes=ds.active_nodes("train")
        )
        return blocks(ds.graph, inducer, v.src, v.dst, v.label, args.hops, args.per_hop, derive_seed(args.seed, epoch))

    sets = {s: eval_set(ds, s, args.hops, args.per_hop, args.seed) for s in ("valid", "test") if s in args.eval_splits}
    k = seal.sort_pool_k(np.concatenate([np.diff(b[0]) for b in train_epoch(0)]))
    prep = time.perf_counter() - t0
    result = seal.fit(
        train_epoch,
        sets["valid"][0],
        sets["test"][0] if "test" in sets else None,
        max(1.0, args.seconds - prep),
        seed=args.seed,
        k=k,
        max_epochs=args.epochs,
    )
    logits = result.pop("logits")
    if args.scores:  # the best epoch's logits per candidate id, as a PENCIL seed saves them (bench.top_negatives)
        for split, (_, order) in sets.items():
            write_scores(Path(args.scores) / f"{split}-original.npz", order, logits[split], result["epoch"])
    result.update(
        dataset=ds.name,
        hops=args.hops,
        per_hop=args.per_hop,
        k=k,
        prepare_seconds=round(prep, 1),
        wall_seconds=round(time.perf_counter() - t0, 1),
        peak_rss_mb=round(peak_rss_mb(), 1),
    )
    write_json_atomic(args.out, result)
    shown = result["test"] or result["valid"]
    log.info(
        "SEAL on %s: %d epochs in %.0f s, %s MRR %.4f AUC %.4f (best epoch %d)",
        ds.name,
        result["epochs"],
        result["wall_seconds"],
        "test" if result["test"] else "valid",
        shown["mrr"],
        shown["auc"],
        result["epoch"],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
