"""Score arbitrary candidate pairs with a trained checkpoint.

    python -m pipelines.score --checkpoint RUN_DIR[/best.pt] --pairs pairs.parquet --out scores.parquet [--orderings k]

The pairs' subgraphs are sampled with the same sampler, (d, n) and seed policy as evaluation (a
fixed, seeded local order per pair), on the graph the run's test candidates used. With
`--orderings k` every pair is sampled k times with independent local orders (and neighbour draws)
and the probabilities are averaged: the paper's remark in Sec. 4.1 that PENCIL is permutation
invariant in distribution, so averaging canonicalisations reduces variance.
Output columns: src, dst, score (mean probability), logit (mean logit), score_std (over orderings).
Node ids are the user's: for a set built from an edge-list file, the ids of that file (the set ships the
mapping, node_ids.parquet); pairs of a node with itself are refused.
"""
from __future__ import annotations

import argparse
import functools
import logging
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from common import snapshot
from common.cli import add_debug_flag, one_line_errors, run_cli
from common.datasets import DatasetError, load_set_dataset
from common.datasets.ids import EDGE_LIST_SUFFIXES, node_index, read_columns, suffix_of
from common.node_ids import load_node_ids
from common.presets import get_preset
from common.shards import Block, read_manifest
from preprocess.sampler import Scratch, sample_subgraphs
from trainer import checkpoint
from trainer.config import TrainConfig
from trainer.model import Pencil, model_for_shards
from trainer.scoring import PairScorer

log = logging.getLogger("pipelines.score")


class ScoreError(ValueError):
    """Bad scoring input; the message names the file, column or flag."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipelines.score", description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="a run folder (uses best.pt, else last.pt) or a .pt file")
    p.add_argument("--pairs", required=True,
                   help="Parquet, CSV or TSV file (optionally .gz) with columns src, dst: node ids as in the edge list")
    p.add_argument("--out", required=True, help="output Parquet file (written atomically)")
    p.add_argument("--orderings", type=int, default=1, help="random canonicalisations averaged per pair (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled subgraphs and local orders (default 0)")
    p.add_argument("--graph", default="test",
                   help="whose graph to sample on: train/valid/test, the split's graph as in evaluation (default "
                        "test), or an edge-list file (.csv/.parquet, src,dst) of today's graph (common/snapshot.py)")
    p.add_argument("--batch-size", type=int, default=512, help="pairs per forward pass at most (default 512; "
                   "batches are also cut by the engine's token budget)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--dataset", default=None, help="override the dataset recorded with the shards")
    p.add_argument("--data-dir", default=None, help="HeaRT-format folder (with --dataset)")
    p.add_argument("--ogb-root", default=None, help="OGB root (with --dataset)")
    add_debug_flag(p)
    return one_line_errors(p)


def resolve_checkpoint(path: str, flag: str = "--checkpoint") -> Path:
    """A run folder's best.pt, else its last.pt (a run stopped early, e.g. a `--preset auto` final seed
    stopped by --stop-epoch, may have only that), or the .pt file given. A protocol folder
    (results/<dataset>/<preset>/<protocol>) is refused with the seed folders it holds."""
    p = Path(path)
    if p.is_dir():
        for name in (checkpoint.BEST, checkpoint.LAST):
            if (p / name).exists():
                return p / name
        seeds = sorted(d.name for d in p.glob("seed*")
                       if (d / checkpoint.BEST).exists() or (d / checkpoint.LAST).exists())
        hint = f"; it holds the runs {', '.join(seeds)}: pass one, e.g. {p / seeds[0]}" if seeds else ""
        raise ScoreError(f"{flag} {p}: no {checkpoint.BEST} or {checkpoint.LAST} in this run folder{hint}")
    if not p.exists():
        raise ScoreError(f"{flag} {p}: no such file")
    return p


def read_pairs(path: str, num_nodes: int, node_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The pairs file -> (P, 2) node indices and (P, 2) user ids (what the output shows).

    node_ids: the set's mapping of an edge list (index = node); the pairs then name the user's ids, of
    the same kind as in the edge list. Without one, ids are the dataset's own 0..num_nodes-1."""
    p = Path(path)
    if not p.exists():
        raise ScoreError(f"--pairs {p}: no such file")
    if suffix_of(p.name) is None:
        raise ScoreError(f"--pairs {p}: unknown extension '{p.suffix}'; use {', '.join(EDGE_LIST_SUFFIXES)}")
    try:
        cols = read_columns(p, ("src", "dst")).cols
    except DatasetError as err:
        raise ScoreError(f"--pairs {err}") from None
    idx, found = [], []
    for c in ("src", "dst"):
        if node_ids is None:
            i, ok = _own_ids(cols[c], c, p, num_nodes)
        else:
            i, ok = node_index(node_ids, cols[c])
        idx.append(i)
        found.append(ok)
    pairs = np.stack(idx, axis=1)
    shown = lambda r: f"({cols['src'][r].as_py()}, {cols['dst'][r].as_py()})"  # noqa: E731  the user's own text
    bad = np.flatnonzero(~(found[0] & found[1]))
    if bad.size:
        where = ("the graph has nodes 0..%d" % (num_nodes - 1) if node_ids is None
                 else "ids must be ones of the edge list (or of its --nodes file)")
        raise ScoreError(f"--pairs {p}: {bad.size} row(s) name unknown node ids (first: row {int(bad[0])}, "
                         f"{shown(int(bad[0]))}); {where}")
    loops = np.flatnonzero(pairs[:, 0] == pairs[:, 1])
    if loops.size:  # a node and itself: no link to predict, and the model was never shown one
        raise ScoreError(f"--pairs {p}: {loops.size} row(s) pair a node with itself (first: row {int(loops[0])}, "
                         f"{shown(int(loops[0]))}); self-loops are not scored, drop those rows")
    user = pairs if node_ids is None else node_ids[pairs]
    return pairs, user


def _own_ids(col, name: str, p: Path, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    try:
        vals = col.cast(pa.int64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise ScoreError(f"--pairs {p}: column '{name}' must hold integer node ids, got {col.type}") from None
    return vals, (vals >= 0) & (vals < num_nodes)


def load_model(ckpt: dict, manifest: dict, device: torch.device) -> Pencil:
    config = TrainConfig.from_dict(ckpt["config"])
    model = model_for_shards(get_preset(config.preset), config.model.as_overrides(), manifest)
    model.load_state_dict(ckpt["model"])
    return model.to(device).eval()


def pair_scorer(model: Pencil, graph, sampling: tuple[int, int], n_max: int, seed: int, orderings: int,
                batch_size: int, device: torch.device, token_budget: int | None = None) -> PairScorer:
    """The scoring engine (trainer/scoring.py) on `graph`, sampling with the evaluation sampler."""
    sample = functools.partial(sample_subgraphs, scratch=Scratch(graph.indptr))  # work arrays allocated once
    return PairScorer(model, graph.indptr, graph.indices, sampling, n_max, sample, seed=seed, orderings=orderings,
                      token_budget=token_budget, max_pairs=batch_size, device=device)


def score_pairs(model: Pencil, graph, pairs: np.ndarray, sampling: tuple[int, int], n_max: int, seed: int,
                orderings: int, batch_size: int, device: torch.device) -> np.ndarray:
    """(orderings, P) logits: each ordering samples every pair's subgraph afresh with its own seed."""
    return pair_scorer(model, graph, sampling, n_max, seed, orderings, batch_size, device).logits(pairs)


def write_scores(path: str, user: np.ndarray, logits: np.ndarray) -> None:
    """user: (P, 2) the pairs as the user names them (ints, or str objects)."""
    probs = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    kind = pa.string() if user.dtype == object else None
    table = pa.table({"src": pa.array(user[:, 0], kind), "dst": pa.array(user[:, 1], kind), "score": probs.mean(0),
                      "logit": logits.mean(0).astype(np.float64), "score_std": probs.std(0)})
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, out)


def main(argv: list[str] | None = None) -> int:
    return run_cli(_main, argv, prog="python -m pipelines.score")


def _main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.orderings < 1:
        parser.error(f"--orderings must be >= 1, got {args.orderings}")
    if args.batch_size < 1:
        parser.error(f"--batch-size must be >= 1, got {args.batch_size}")
    try:
        ckpt = checkpoint.load(resolve_checkpoint(args.checkpoint))
        manifest = read_manifest(ckpt["config"]["data"]["shards"])
        pre = manifest["config"]
        dataset = load_set_dataset(pre, name=args.dataset, data_dir=args.data_dir, ogb_root=args.ogb_root)
        graph, node_ids = snapshot.graph_for(args.graph, dataset)  # a snapshot's new nodes extend the ids
        pairs, user = read_pairs(args.pairs, graph.num_nodes, node_ids if args.graph not in snapshot.SPLIT_NAMES
                                 else load_node_ids(manifest))
    except (ScoreError, DatasetError) as err:
        parser.error(str(err))
    device = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
                          else "cpu")
    n_max = int(manifest["n_max"])
    model = load_model(ckpt, manifest, device)
    sampling = (pre["sampling"]["d"], pre["sampling"]["n"])
    log.info("scoring %d pairs of %s with sampling %s, %d ordering(s), on %s", len(pairs), dataset.name,
             sampling, args.orderings, device)
    logits = score_pairs(model, graph, pairs, sampling, n_max, args.seed, args.orderings, args.batch_size, device)
    write_scores(args.out, user, logits)
    log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
