"""The steps of a recommendation job shared by the single-process and the Ray paths (pipelines.recommend).

Per block of query nodes: retrieve each node's pool (common.retrieval), sample every (node, candidate)
pair's subgraph (scoring engine's CPU half), score them (scoring engine), keep the top k per node. A
finished block becomes one Parquet part file; the job merges the parts at the end.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from common.flags import add_device_flag
from common.retrieval import EVERY_NODE, RETRIEVERS, Allowed, retrieve, rounded
from pipelines.recommend.direction import ordered
from pipelines.recommend.relation import relation_rows
from preprocess.sampler import Scratch, sample_subgraphs
from trainer.scoring import PairSampler, PairScorer

log = logging.getLogger("pipelines.recommend")
COLUMNS = ("node", "candidate", "rank", "score", "retriever_score")
# --prior-weight's default: the weight w of the retriever's rank prior added to PENCIL's logit (see
# `probabilities`), the best on VALIDATION full ranking over citeseer and cora, three retrievers, 3 seeds each
# (the sweep is in docs/benchmarks/).
DEFAULT_PRIOR_WEIGHT = 1.0


class RecommendError(ValueError):
    """Bad recommendation input; the message names the flag or file and the fix."""


@dataclass(frozen=True)
class RecConfig:
    k: int = 20
    pool: int = 100
    # the default retriever: the best validation full ranking (PENCIL + rank prior, Hits@20) over the
    # development graphs where it was measured (the comparison is in docs/benchmarks/)
    retriever: str = "ppr"
    orderings: int = 1
    seed: int = 0
    block_nodes: int = 256  # query nodes per block: bounds a worker's memory (pool x block pairs at a time)
    sampling: tuple = (1, 20)
    n_max: int = 42
    token_budget: int | None = None
    batch_size: int = 4096
    prior_weight: float = DEFAULT_PRIOR_WEIGHT
    direction: str | None = None  # a directed run's: "out" (node -> candidate) or "in"; None: undirected
    relation: int | None = None  # a typed run's relation id, every candidate scored as a triple of it; None: untyped

    @classmethod
    def from_args(cls, args, k: int | None = None) -> "RecConfig":
        """The engine's flags (add_engine_flags; --block-nodes where the command has it), before the run's
        sampling is known; `k` in place of --k. A bad value is a FlagError."""
        from common.flags import FlagError

        try:
            return cls(
                k=args.k if k is None else k,
                pool=args.pool,
                retriever=args.retriever,
                orderings=args.orderings,
                seed=args.seed,
                block_nodes=getattr(args, "block_nodes", cls.block_nodes),
                token_budget=args.token_budget,
                batch_size=args.batch_size,
                prior_weight=args.prior_weight,
            )
        except RecommendError as err:
            raise FlagError(str(err)) from None

    def __post_init__(self):
        if not (np.isfinite(self.prior_weight) and self.prior_weight >= 0):
            raise RecommendError(f"--prior-weight: must be a finite number >= 0, got {self.prior_weight}")
        for flag, value in (
            ("--k", self.k),
            ("--pool", self.pool),
            ("--orderings", self.orderings),
            ("--block-nodes", self.block_nodes),
            ("--batch-size", self.batch_size),
        ):
            if value < 1:
                raise RecommendError(f"{flag}: must be >= 1, got {value}")
        if self.retriever not in RETRIEVERS:
            raise RecommendError(f"--retriever: unknown '{self.retriever}'; use one of {', '.join(RETRIEVERS)}")
        if self.pool < self.k:
            raise RecommendError(
                f"--pool {self.pool} is smaller than --k {self.k}; the pool must hold at least k candidates to re-rank"
            )

    def fingerprint(self, *parts: str) -> str:
        """What a part file's content depends on (resuming with anything else changed is refused)."""
        # an undirected, untyped job's fingerprint is as before these fields existed
        fields = {k: v for k, v in asdict(self).items() if k not in ("direction", "relation") or v is not None}
        h = hashlib.sha256(json.dumps(fields, sort_keys=True, default=list).encode())
        for p in parts:
            h.update(p.encode())
        return h.hexdigest()[:16]


def add_engine_flags(p) -> None:
    """The engine's flags, shared by recommend, evaluate (and serve): one definition, one default each."""
    p.add_argument("--k", type=int, default=RecConfig.k, help=f"recommendations per node (default {RecConfig.k})")
    p.add_argument(
        "--pool",
        type=int,
        default=RecConfig.pool,
        help=f"candidates retrieved per node and re-ranked (default {RecConfig.pool})",
    )
    p.add_argument(
        "--retriever",
        default=RecConfig.retriever,
        choices=RETRIEVERS,
        help=f"candidate retriever (default {RecConfig.retriever})",
    )
    add_device_flag(p)
    p.add_argument(
        "--orderings", type=int, default=1, advanced=True, help="subgraph draws averaged per pair (default 1)"
    )
    p.add_argument("--seed", type=int, default=0, advanced=True, help="seed of the sampled subgraphs (default 0)")
    p.add_argument(
        "--prior-weight",
        type=float,
        default=DEFAULT_PRIOR_WEIGHT,
        advanced=True,
        help="rank by sigmoid(PENCIL logit + W * -log(retriever rank)); 0 = PENCIL alone "
        f"(default {DEFAULT_PRIOR_WEIGHT:g}, chosen on validation full ranking)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=RecConfig.batch_size,
        advanced=True,
        help=f"pairs per forward pass at most (default {RecConfig.batch_size})",
    )
    p.add_argument(
        "--token-budget", type=int, default=None, advanced=True, help="tokens per forward pass (default by device)"
    )


def sampler_for(graph, cfg: RecConfig, digraph=None, typed=None) -> PairSampler:
    """`digraph`: a directed run's ordered edges (common.graph.DiGraph), which its model reads; None: undirected.
    `typed`: a typed run's (triple CSR, relation count) (pipelines.recommend.relation.typed_inputs); None: untyped."""
    sample = functools.partial(sample_subgraphs, scratch=Scratch(graph.indptr))
    rel_graph, relations = typed if typed is not None else (None, 0)
    return PairSampler(
        graph.indptr, graph.indices, cfg.sampling, sample, cfg.seed, digraph, rel_graph=rel_graph, relations=relations
    )


def scorer_for(model, graph, cfg: RecConfig, device: torch.device, digraph=None, typed=None) -> PairScorer:
    return PairScorer(
        model,
        sampler_for(graph, cfg, digraph, typed),
        cfg.n_max,
        orderings=cfg.orderings,
        token_budget=cfg.token_budget,
        max_pairs=cfg.batch_size,
        device=device,
    )


@dataclass
class Prepared:
    """A block after the CPU stages: its pools as flat pairs and each ordering's sampled blocks."""

    block_id: int
    queries: np.ndarray
    node: np.ndarray  # (P,) query of each pair
    cand: np.ndarray  # (P,)
    retr: np.ndarray  # (P,) retriever score
    prior: np.ndarray  # (P,) the retriever's rank prior (rank_prior)
    sampled: list  # per ordering: list of common.shards.Block


def prepare_block(
    block_id: int, queries: np.ndarray, graph, allowed: Allowed, cfg: RecConfig, sampler: PairSampler
) -> Prepared:
    """`allowed`: the nodes that may be proposed and the links never repeated (common.retrieval.retrieve); a
    directed run's pairs are scored in cfg.direction's order (node -> candidate, or candidate -> node)."""
    pool = retrieve(graph, queries, cfg.retriever, cfg.pool, allowed=allowed, fill=True)
    node, cand, retr = pool.pairs()
    prior = rank_prior(pool.score)[pool.cand >= 0]  # row-major, as pairs()
    pairs = ordered(node, cand, cfg.direction)
    rel = relation_rows(cfg.relation, len(pairs))  # a typed run's: every pair a triple of cfg.relation
    sampled = [list(sampler.blocks(pairs, k, rel)) for k in range(cfg.orderings)]
    return Prepared(block_id, queries, node, cand, retr, prior, sampled)


def rank_prior(score: np.ndarray) -> np.ndarray:
    """(Q, M) -log(rank) of each pool entry by its retriever score, rank = 1 + #entries of the row with a
    strictly higher score (tied candidates share a rank, so ties the retriever cannot break stay PENCIL's
    to break). Rows are best first (common.retrieval.Pool); padding (-inf) gets -inf.

    Why a log-rank: the retrievers' scores have no common scale (RA sums, PPR mass, fused reciprocal
    ranks), their ranks do; a hit rate falling as rank^-w across the pool is log-odds -w log(rank)."""
    score = np.asarray(score, dtype=np.float64)
    if score.size == 0:
        return np.zeros(score.shape)
    ok = np.isfinite(score)
    key = np.where(ok, 0.0, -np.inf)
    key[ok] = rounded(score[ok])  # the retriever's own tie rule: equal to 12 significant digits
    pos = np.broadcast_to(np.arange(score.shape[1]), score.shape)
    first = np.ones(score.shape, dtype=bool)
    first[:, 1:] = key[:, 1:] != key[:, :-1]  # a new score value starts a new rank
    rank = np.maximum.accumulate(np.where(first, pos, 0), axis=1) + 1.0
    return np.where(ok, -np.log(rank), -np.inf)


def probabilities(logits: np.ndarray, prior: np.ndarray | None = None, weight: float = 0.0) -> np.ndarray:
    """Mean over orderings of sigmoid(logit + weight * prior), in float64: PENCIL's probability when the
    weight is 0 (or no prior), else PENCIL's log-odds shifted by the retriever's rank prior."""
    z = logits.astype(np.float64)
    if prior is not None and weight:
        z = z + weight * np.asarray(prior, dtype=np.float64)[None, :]
    return (1.0 / (1.0 + np.exp(-z))).mean(0)


def top_k(queries: np.ndarray, node, cand, score, retr, k: int) -> pa.Table:
    """The k best candidates of every query by PENCIL score (ties: higher retriever score, then smaller id)."""
    row = np.searchsorted(queries, node) if len(node) else node
    order = np.lexsort((cand, -retr, -score, row))
    row_s = row[order]
    start = np.searchsorted(row_s, np.arange(len(queries)))
    rank = np.arange(len(order)) - start[row_s] if len(order) else np.zeros(0, np.int64)
    keep = order[rank < k]
    return pa.table(
        {
            "node": node[keep].astype(np.int64),
            "candidate": cand[keep].astype(np.int64),
            "rank": (rank[rank < k] + 1).astype(np.int32),
            "score": score[keep].astype(np.float64),
            "retriever_score": retr[keep].astype(np.float64),
        }
    )


def finish_block(prep: Prepared, logits: np.ndarray, cfg: RecConfig) -> pa.Table:
    score = probabilities(logits, prep.prior, cfg.prior_weight)
    return top_k(prep.queries, prep.node, prep.cand, score, prep.retr, cfg.k)


def run_block(block_id, queries, graph, cfg, sampler, scorer, allowed: Allowed = EVERY_NODE) -> tuple[pa.Table, int]:
    """Single-process path: one block end to end; returns (top-k table, pairs scored). `allowed`: which nodes may
    be proposed."""
    prep = prepare_block(block_id, np.sort(queries), graph, allowed, cfg, sampler)
    logits = scorer.score_blocks(prep.sampled, len(prep.node))
    return finish_block(prep, logits, cfg), len(prep.node)


def log_short_lists(table: pa.Table, queries: np.ndarray, k: int, node_ids: np.ndarray | None = None) -> int:
    """Log the nodes that got fewer than k recommendations and why, named by the user's ids (`node_ids`, None:
    the set's own 0..N-1); returns how many."""
    counts = np.bincount(np.searchsorted(queries, table.column("node").to_numpy()), minlength=len(queries))
    short = np.flatnonzero(counts < k)
    if short.size:
        ex = short[:5]
        log.warning(
            "%d of %d nodes got fewer than k=%d recommendations: the graph has fewer nodes they are not "
            "already linked to; e.g. %s",
            short.size,
            len(queries),
            k,
            ", ".join(f"node {queries[i] if node_ids is None else node_ids[queries[i]]}: {int(counts[i])}" for i in ex),
        )
    return int(short.size)


def read_nodes(
    path: str, num_nodes: int, node_ids: np.ndarray | None = None, kind: np.ndarray | None = None
) -> np.ndarray:
    """--nodes FILE -> node indices, distinct and sorted: an edge-list-like file (.csv/.tsv/.parquet, plain
    or gzipped) with a column 'node' (or 'id'), or plain text with one id per line. Ids are the user's
    (the set's mapping of an edge list), or 0..N-1 for a set without one; `kind` (sorted nodes: a typed query's
    node kind) decides an id two kinds share (a ratings file's user 1 and item 1)."""
    from common.datasets import DatasetError
    from common.datasets.ids import index_within, node_index
    from common.datasets.tables import read_columns, suffix_of

    p = Path(path)
    if not p.is_file():
        raise RecommendError(f"--nodes {p}: file not found; pass one node id per line or a column 'node'")
    try:
        if suffix_of(p.name) is not None:
            raw = read_columns(p, ("node", "id"), any_of=True, hint="node").cols["node"]
        else:
            raw = pa.array([line.strip() for line in p.read_text().splitlines() if line.strip()])
    except (DatasetError, UnicodeDecodeError) as err:
        raise RecommendError(f"--nodes {err}") from None
    if node_ids is not None:
        idx, found = node_index(node_ids, raw)
        other = np.flatnonzero(found & ~np.isin(idx, kind)) if kind is not None else np.zeros(0, np.int64)
        if other.size:  # found first in another kind: the query kind's node of that id, where there is one
            mine, ok = index_within(node_ids, kind, raw.take(pa.array(other)))
            idx[other[ok]] = mine[ok]
    else:
        idx, found = node_index(np.arange(num_nodes, dtype=np.int64), raw)
    if not found.all():
        first = raw[int(np.flatnonzero(~found)[0])]
        first = first.as_py() if hasattr(first, "as_py") else first
        where = (
            f"the graph has nodes 0..{num_nodes - 1}"
            if node_ids is None
            else "ids must be ones of the edge list (or of its --nodes file)"
        )
        raise RecommendError(f"--nodes {p}: {int((~found).sum())} unknown node id(s) (first: {first}); {where}")
    nodes = np.unique(idx)
    if not nodes.size:
        raise RecommendError(f"--nodes {p}: no node ids in the file")
    return nodes
