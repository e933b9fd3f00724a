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

import functools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from common import snapshot
from common.atomic import write_parquet_atomic
from common.cli import Parser, command, exit_process, summary
from common.datasets import DatasetError
from common.datasets.ids import index_within, node_index
from common.datasets.tables import EDGE_LIST_SUFFIXES, read_columns, suffix_of
from common.flags import (
    MOVED_DATASET_HELP,
    FlagError,
    add_dataset_flags,
    add_device_flag,
    add_moved_shards_flag,
    add_overwrite_flag,
)
from common.node_ids import load_node_ids
from common.outputs import OutputError, check_output, check_replacement, stamp_metadata
from pipelines.core.config import MovedDataset
from pipelines.core.runs import (
    RunFolderError,
    check_node_features,
    load_checkpoint,
    load_model,
    reads_features,
    resolve_checkpoint,
    run_dataset,
    run_inputs,
    run_manifest,
)
from pipelines.recommend.direction import DirectionError, check_model_direction, run_digraph
from preprocess.sampler import Scratch, sample_subgraphs
from trainer.scoring import PairSampler, PairScorer, default_device, score_columns

if TYPE_CHECKING:
    from trainer.model.pencil import Pencil

log = logging.getLogger("pipelines.score")


class ScoreError(ValueError):
    """Bad scoring input; the message names the file, column or flag."""


PROG = "python -m pipelines.score"


def build_parser(prog: str = PROG) -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--checkpoint", required=True, help="a run folder (uses best.pt, else last.pt) or a .pt file")
    p.add_argument(
        "--pairs",
        required=True,
        help="Parquet, CSV or TSV file (optionally .gz) with columns src, dst: node ids as in the edge list",
    )
    p.add_argument("--out", required=True, help="output Parquet file (written atomically)")
    add_overwrite_flag(p)
    p.add_argument("--orderings", type=int, default=1, help="random canonicalisations averaged per pair (default 1)")
    p.add_argument(
        "--graph",
        default="test",
        help="whose graph to sample on: train/valid/test, the split's graph as in evaluation (default "
        "test), or today's graph as an edge list (.csv, .tsv, .parquet; src,dst in the run's ids)",
    )
    add_device_flag(p)
    p.add_argument(
        "--seed", type=int, default=0, advanced=True, help="seed of the sampled subgraphs and local orders (default 0)"
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=512,
        advanced=True,
        help="pairs per forward pass at most (default 512; batches are also cut by the token budget)",
    )
    add_dataset_flags(p, required=False, split=False, nodes=False, help=MOVED_DATASET_HELP)
    add_moved_shards_flag(p)
    return p


def read_pairs(
    path: str, num_nodes: int, node_ids: np.ndarray | None = None, loops: bool = True
) -> tuple[np.ndarray, np.ndarray]:
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
    for c in ("src", "dst"):  # an empty cell names no node: said as the loader says it, by its data row
        col = cols[c]
        empty = col.is_null().to_numpy(zero_copy_only=False)
        if pa.types.is_string(col.type):
            empty |= pc.equal(col, "").to_numpy(zero_copy_only=False)
        if empty.any():
            raise ScoreError(
                f"--pairs {p}: column '{c}' has an empty node id in data row {int(empty.argmax()) + 1}; "
                "fill it or drop the row"
            )
    idx, found = [], []
    for c in ("src", "dst"):
        if node_ids is None:
            i, ok = _own_ids(cols[c], c, p, num_nodes)
        else:
            i, ok = node_index(node_ids, cols[c])
        idx.append(i)
        found.append(ok)
    pairs = np.stack(idx, axis=1)
    shown = lambda r: f"({cols['src'][r].as_py()}, {cols['dst'][r].as_py()})"  # the user's own text
    bad = np.flatnonzero(~(found[0] & found[1]))
    if bad.size:
        where = (
            "the graph has nodes 0..%d" % (num_nodes - 1)
            if node_ids is None
            else "ids must be ones of the edge list (or of its --nodes file)"
        )
        raise ScoreError(
            f"--pairs {p}: {bad.size} row(s) name unknown node ids (first: data row {int(bad[0]) + 1}, "
            f"{shown(int(bad[0]))}); {where}"
        )
    user = pairs if node_ids is None else node_ids[pairs]
    return (refuse_loops(p, pairs, user) if loops else pairs), user


def refuse_loops(path, pairs: np.ndarray, user: np.ndarray) -> np.ndarray:
    """The pairs, unless one pairs a node with itself: no link to predict, and the model was never shown one."""
    loops = np.flatnonzero(pairs[:, 0] == pairs[:, 1])
    if loops.size:
        r = int(loops[0])
        raise ScoreError(
            f"--pairs {path}: {loops.size} row(s) pair a node with itself (first: data row {r + 1}, "
            f"({user[r, 0]}, {user[r, 1]})); self-loops are not scored, drop those rows"
        )
    return pairs


def read_relations(path: str, names: tuple) -> np.ndarray:
    """A typed run's pairs file -> (P,) relation ids of its `relation` column, named as the run's relations."""
    p = Path(path)
    try:
        col = read_columns(p, ("relation",), hint="src,dst,relation").cols["relation"]
    except DatasetError:
        raise ScoreError(
            f"--pairs {p}: a typed run scores each pair with a relation; add a column relation (one of "
            f"{', '.join(names)})"
        ) from None
    given = np.asarray(col.cast(pa.string()).to_pylist(), dtype=object)
    index = {name: i for i, name in enumerate(names)}
    rel = np.array([index.get(v, -1) for v in given], dtype=np.int64)
    if (bad := np.flatnonzero(rel < 0)).size:
        raise ScoreError(
            f"--pairs {p}: unknown relation {given[bad[0]]!r} in data row {int(bad[0]) + 1} ({bad.size} row(s)); "
            f"the run knows {', '.join(names)}"
        )
    return rel


def _own_ids(col, name: str, p: Path, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    try:
        vals = col.cast(pa.int64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise ScoreError(f"--pairs {p}: column '{name}' must hold integer node ids, got {col.type}") from None
    return vals, (vals >= 0) & (vals < num_nodes)


@dataclass(frozen=True)
class Scoring:
    """How pairs are scored: the shard set's sampling (d, n) and node budget `n_max`, the seed, the orderings
    averaged, the pairs of a forward pass at most (`batch_size`) and its token budget (None: the device's)."""

    sampling: tuple[int, int]
    n_max: int
    seed: int = 0
    orderings: int = 1
    batch_size: int = 512
    token_budget: int | None = None


def pair_scorer(model: Pencil, graph, how: Scoring, device: torch.device, digraph=None, typed=None) -> PairScorer:
    """The scoring engine (trainer/scoring.py) on `graph`, sampling with the evaluation sampler; `digraph`: a
    directed run's ordered edges, which its model reads (None: undirected); `typed`: a typed run's (triple CSR,
    relation count)."""
    sample = functools.partial(sample_subgraphs, scratch=Scratch(graph.indptr))  # work arrays allocated once
    rel_graph, relations = typed if typed is not None else (None, 0)
    return PairScorer(
        model,
        PairSampler(
            graph.indptr,
            graph.indices,
            how.sampling,
            sample,
            how.seed,
            digraph,
            rel_graph=rel_graph,
            relations=relations,
        ),
        how.n_max,
        orderings=how.orderings,
        token_budget=how.token_budget,
        max_pairs=how.batch_size,
        device=device,
    )


def score_pairs(
    model: Pencil, graph, pairs: np.ndarray, how: Scoring, device: torch.device, digraph=None, typed=None, rel=None
) -> np.ndarray:
    """(orderings, P) logits: each ordering samples every pair's subgraph afresh with its own seed. A directed
    run's pair (u, v) is scored as u -> v: (v, u) is another pair; a typed run's as u -rel-> v."""
    return pair_scorer(model, graph, how, device, digraph, typed).logits(pairs, rel)


def note_known_edges(graph, pairs: np.ndarray, user: np.ndarray) -> int:
    """Say how many pairs are edges of the graph sampled on (a directed run's: edges in the pair's own direction,
    `graph` its DiGraph): the edge itself is hidden from the model, but each endpoint sits in the other's sampled
    neighbourhood, so such a score is not that of a new link."""
    known = np.flatnonzero(graph.has_edge(pairs[:, 0], pairs[:, 1])) if len(pairs) else np.zeros(0, np.int64)
    if known.size:
        log.warning(
            "%d of %d pairs are already edges of the graph sampled on (first: %s, %s); each is scored with "
            "its endpoints in each other's sampled neighbourhood, not as a new link (to score them as new, "
            "pass --graph with a snapshot without them)",
            known.size,
            len(pairs),
            user[known[0], 0],
            user[known[0], 1],
        )
    return int(known.size)


def write_scores(path: str, user: np.ndarray, logits: np.ndarray, metadata: dict | None = None, relation=None) -> None:
    """user: (P, 2) the pairs as the user names them (ints, or str objects); metadata: the output's stamp;
    relation: a typed run's relation name of each pair (a column after dst)."""
    kind = pa.string() if user.dtype == object else None
    ends = {"src": pa.array(user[:, 0], kind), "dst": pa.array(user[:, 1], kind)}
    if relation is not None:
        ends["relation"] = pa.array(list(relation), pa.string())
    table = pa.table({**ends, **score_columns(logits)})
    write_parquet_atomic(table.replace_schema_metadata(metadata), path)


@dataclass(frozen=True)
class ScoreConfig:
    checkpoint: str  # a run folder or a .pt file
    pairs: str
    out: str
    overwrite: bool = False
    orderings: int = 1
    graph: str = "test"  # a split's graph, or an edge-list file of today's graph
    device: str = "auto"
    seed: int = 0
    batch_size: int = 512
    moved: MovedDataset = field(default_factory=MovedDataset)  # the run's edge list and shard set where they are now

    @classmethod
    def from_args(cls, args) -> "ScoreConfig":
        if args.orderings < 1:
            raise FlagError(f"--orderings must be >= 1, got {args.orderings}")
        if args.batch_size < 1:
            raise FlagError(f"--batch-size must be >= 1, got {args.batch_size}")
        return cls(
            args.checkpoint,
            args.pairs,
            args.out,
            args.overwrite,
            args.orderings,
            args.graph,
            args.device,
            args.seed,
            args.batch_size,
            MovedDataset.from_args(args),
        )


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return command(build_parser, score_file, argv, prog, config=ScoreConfig.from_args)


def score_file(cfg: ScoreConfig) -> int:
    try:
        path = resolve_checkpoint(cfg.checkpoint)
        ckpt = load_checkpoint(path)
        manifest = run_manifest(ckpt, path, cfg.moved.shards)
        pre = manifest.config
        files, folders = run_inputs(cfg.checkpoint, manifest)
        on_file = cfg.graph not in snapshot.GRAPH_NAMES
        check_output(
            cfg.out,
            files={
                **files,
                "--pairs": cfg.pairs,
                "--dataset": cfg.moved.dataset,
                "--graph": cfg.graph if on_file else None,
            },
            folders=folders,
        )
        check_replacement(cfg.out, "score", manifest.fingerprint, cfg.overwrite, what="score file")
        dataset = run_dataset(manifest, *cfg.moved.fields())
        graph, node_ids = snapshot.graph_for(cfg.graph, dataset)  # a snapshot's new nodes extend the ids
        check_node_features(reads_features(ckpt, manifest), manifest.num_nodes, graph, node_ids, f"--graph {cfg.graph}")
        typed, rel = typed_inputs(cfg, manifest, dataset, on_file)
        ids = node_ids if on_file else load_node_ids(manifest)
        pairs, user = read_pairs(cfg.pairs, graph.num_nodes, ids, loops=rel is None)  # typed: once kinds resolve
        if rel is not None:
            pairs = refuse_loops(cfg.pairs, within_kinds(cfg.pairs, pairs, user, rel, dataset.relations, ids), user)
        digraph = run_digraph(dataset, cfg.graph, graph)  # a directed run's (its set's manifest says): u -> v
    except (ScoreError, RunFolderError, DatasetError, OutputError) as err:
        raise FlagError(str(err)) from None
    device = default_device(cfg.device)
    n_max = manifest.n_max
    model = load_model(ckpt, manifest, device)
    try:
        check_model_direction(model, digraph, f"--checkpoint {cfg.checkpoint}")
    except DirectionError as err:
        raise FlagError(str(err)) from None
    sampling = (pre["sampling"]["d"], pre["sampling"]["n"])
    log.info(
        "scoring %d pairs of %s with sampling %s, %d ordering(s), on %s",
        len(pairs),
        dataset.name,
        sampling,
        cfg.orderings,
        device,
    )
    note_known_edges(graph if digraph is None else digraph, pairs, user)
    how = Scoring(sampling, n_max, cfg.seed, cfg.orderings, cfg.batch_size)
    logits = score_pairs(model, graph, pairs, how, device, digraph, typed, rel)
    names = None if rel is None else np.asarray(manifest.relations, dtype=object)[rel]
    write_scores(cfg.out, user, logits, stamp_metadata("score", manifest.fingerprint), names)
    log.info("wrote %s", cfg.out)
    return 0


def within_kinds(path: str, pairs: np.ndarray, user: np.ndarray, rel: np.ndarray, relations, node_ids) -> np.ndarray:
    """A typed run with node kinds: each pair's src among its relation's heads and dst among its tails, by id (a
    user-item file's user 50 and item 50 share one); an id with no node of that kind is refused in one line."""
    pairs = pairs.copy()
    for r, allowed in (relations.ends or {}).items():
        for end, what in ((0, "heads"), (1, "tails")):
            rows = np.flatnonzero((rel == r) & ~np.isin(pairs[:, end], allowed[end]))
            if not rows.size:
                continue
            if node_ids is not None:
                idx, found = index_within(node_ids, allowed[end], user[rows, end])
                pairs[rows[found], end] = idx[found]
                rows = rows[~found]
            if rows.size:
                col = ("src", "dst")[end]
                raise ScoreError(
                    f"--pairs {path}: data row {int(rows[0]) + 1} ({user[rows[0], 0]}, {user[rows[0], 1]}): its {col} "
                    f"is no node of the kind relation {relations.names[r]!r} takes as {what} ({rows.size} row(s)); "
                    f"swap {col} with the other end, or use another relation"
                )
    return pairs


def typed_inputs(cfg: ScoreConfig, manifest, dataset, on_file: bool) -> tuple:
    """A typed run's ((triple CSR, relation count), (P,) relation ids of the pairs); (None, None) otherwise."""
    if not manifest.relations:
        return None, None
    if on_file:
        raise ScoreError(f"--graph {cfg.graph}: a typed run scores on its own training triples (--graph train) for now")
    from common.datasets.kg import triple_csr

    return (triple_csr(dataset), len(manifest.relations)), read_relations(cfg.pairs, manifest.relations)


if __name__ == "__main__":
    exit_process(main)
