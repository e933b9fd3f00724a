"""The rules of a full ranking, shared by an untyped run's (pipelines/recommend/evaluation.py) and a typed run's
(pipelines/recommend/typed_ranking.py): each positive's rank by the retriever's pool alone and by PENCIL re-ranking
it, a target outside the pool at the expected place of the rest, filtered of the other known positives. The
module docstring of evaluation.py states the protocol.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

import numpy as np

from common.retrieval import EVERY_NODE, Allowed, retrieve
from pipelines.recommend.engine import RecConfig, probabilities, rank_prior

log = logging.getLogger("pipelines.recommend")

HITS_AT = (1, 10, 20, 50, 100)
PRIOR_GRID = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


def pool_ranks(scores: np.ndarray, valid: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Rank of column target[i] within row i's valid entries (ties count half); target[i] < 0 -> nan."""
    rows = np.flatnonzero(target >= 0)
    out = np.full(len(target), np.nan)
    s_t = scores[rows, target[rows]]
    s, ok = scores[rows], valid[rows]
    higher = ((s > s_t[:, None]) & ok).sum(1)
    tied = ((s == s_t[:, None]) & ok).sum(1) - 1
    out[rows] = 1.0 + higher + tied / 2.0
    return out


def metrics(ranks: np.ndarray, pool: int) -> dict:
    out = {"mrr": float(np.mean(1.0 / ranks)) if len(ranks) else 0.0}
    for k in HITS_AT:
        if k <= pool:
            out[f"hits@{k}"] = float(np.mean(ranks <= k)) if len(ranks) else 0.0
    return out


@dataclass(frozen=True)
class RankedPositives:
    """Per positive of a full ranking: whether its target is in the pool, and its rank by the retriever alone and by
    PENCIL at each prior weight asked (none without a scorer)."""

    in_pool: np.ndarray  # (P,) bool
    retriever: np.ndarray  # (P,) float64 ranks
    pencil: dict = field(default_factory=dict)  # prior weight -> (P,) ranks
    pairs_scored: int = 0
    probability: dict | None = None


def full_ranking(
    graph,
    positives: np.ndarray,
    known: np.ndarray,
    cfg: RecConfig,
    scorer=None,
    allowed: Allowed = EVERY_NODE,
    sweep: bool = False,
) -> dict:
    """Metrics of the retriever alone and (with a scorer) of PENCIL re-ranking its pool (ranked_positives)."""
    weights = (0.0, cfg.prior_weight, *(PRIOR_GRID if sweep else ())) if scorer is not None else ()
    ranked = ranked_positives(graph, positives, known, cfg, scorer, allowed, weights)
    result = {
        "positives": int(len(positives)),
        "pool": cfg.pool,
        "retriever": cfg.retriever,
        f"recall@{cfg.pool}": float(np.mean(ranked.in_pool)),
        "retriever_alone": metrics(ranked.retriever, cfg.pool),
    }
    if scorer is not None:
        result["pencil_rerank"] = metrics(ranked.pencil[0.0], cfg.pool)
        result["pencil_blend"] = {
            "prior_weight": cfg.prior_weight,
            **metrics(ranked.pencil[cfg.prior_weight], cfg.pool),
        }
        if sweep:
            result["prior_sweep"] = {str(w): metrics(ranked.pencil[w], cfg.pool) for w in PRIOR_GRID}
        result["pairs_scored"] = ranked.pairs_scored
        result["probability"] = ranked.probability
    return result


def ranked_positives(
    graph,
    positives: np.ndarray,
    known: np.ndarray,
    cfg: RecConfig,
    scorer=None,
    allowed: Allowed = EVERY_NODE,
    weights=(),
    pool_of=None,
) -> RankedPositives:
    """Each positive's rank by the retriever alone and (with a scorer) by PENCIL at each prior weight in `weights`.
    `allowed.candidates`: the nodes that compete with a target (None: every node; under a temporal split, those that
    exist by the boundary); `allowed.known`: a directed run's out-edges (u's out-links are excluded, its in-links
    compete, and only u's own known positives u -> x are filtered). `pool_of(queries)`: the pool of each query node
    (common.retrieval.Pool; default: cfg.retriever's, topped up by popularity)."""
    side, candidates, directed = allowed.side, allowed.candidates, allowed.known
    u, v = positives[:, 0].astype(np.int64), positives[:, 1].astype(np.int64)
    queries = np.unique(u)
    if pool_of is None:
        pool = retrieve(graph, queries, cfg.retriever, cfg.pool, allowed=Allowed(side, candidates, directed), fill=True)
    else:
        pool = pool_of(queries)
    row = np.searchsorted(queries, u)
    cand = pool.cand[row]  # (P, M)
    n = graph.num_nodes
    # filtered: u's other known positives are not competitors
    both = known if directed is not None else np.concatenate([known, known[:, ::-1]])  # directed: u -> x only
    known_keys = np.unique(both[:, 0] * n + both[:, 1])
    keys = u[:, None] * n + np.maximum(cand, 0)
    other = np.isin(keys, known_keys) & (cand != v[:, None])
    valid = (cand >= 0) & ~other
    hit = (cand == v[:, None]) & valid
    target = np.where(hit.any(1), hit.argmax(1), -1)
    # rankable non-neighbours of u: the nodes (of the other kind, among the candidates) minus u, its neighbours
    # and its other positives (u's known positives that are not already its neighbours on this graph: valid
    # positives are edges of the test graph, counted once, as neighbours), plus v itself
    exists = np.ones(n, dtype=bool)
    if candidates is not None:
        exists[:] = False
        exists[candidates] = True
    linked = graph if directed is None else directed  # the links u already has (directed: its out-links)
    pk = np.unique(both.astype(np.int64), axis=0)
    pk = pk[~linked.has_edge(pk[:, 0], pk[:, 1]) & exists[pk[:, 1]]]
    partners = np.bincount(pk[:, 0], minlength=n)[u]
    if side is None:
        kind = exists.sum() - exists[u]
    else:
        kind = np.where(side[u], (~side & exists).sum(), (side & exists).sum())
    rankable = np.maximum(kind - linked.degree[u] - partners + 1, 1)
    size = valid.sum(1)
    outside = size + (rankable - size + 1) / 2.0
    retr = np.where(valid, pool.score[row], -np.inf)
    ranked = RankedPositives(target >= 0, np.where(target >= 0, pool_ranks(retr, valid, target), outside))
    if scorer is None:
        return ranked
    node, cnd, _ = pool.pairs()
    logits = scorer.logits(np.stack([node, cnd], axis=1))
    prior = rank_prior(pool.score)[pool.cand >= 0]  # pairs() is row-major over the valid entries
    pencil = {}
    for weight in weights:
        table = np.full(pool.cand.shape, -np.inf)
        table[pool.cand >= 0] = probabilities(logits, prior, weight)
        pen = np.where(valid, table[row], -np.inf)
        pencil[weight] = np.where(target >= 0, pool_ranks(pen, valid, target), outside)
    probability = probability_summary(logits, pool, row, valid, target)
    return replace(ranked, pencil=pencil, pairs_scored=int(len(node)), probability=probability)


def probability_summary(logits: np.ndarray, pool, row: np.ndarray, valid: np.ndarray, target: np.ndarray) -> dict:
    """Mean PENCIL probability of the in-pool targets and of the other pool candidates (a diagnosis: a model
    that gives the pool's hard candidates the targets' probability cannot re-rank them)."""
    table = np.full(pool.cand.shape, np.nan)
    table[pool.cand >= 0] = probabilities(logits)
    prob = table[row]
    inside = np.flatnonzero(target >= 0)
    is_target = np.zeros(valid.shape, dtype=bool)
    is_target[inside, target[inside]] = True
    others = prob[valid & ~is_target]
    return {
        "targets": float(np.mean(prob[is_target])) if inside.size else float("nan"),
        "other_candidates": float(np.mean(others)) if others.size else float("nan"),
    }


def choose_weight(sweep: dict, at: int = 20) -> float:
    """The prior weight of a valid sweep with the best Hits@at, then the best MRR; a tie keeps the smaller weight."""

    def key(w):
        m = sweep[w]
        return m.get(f"hits@{at}", 0.0), m["mrr"], -float(w)

    return float(max(sweep, key=key))


def sample_positives(positives: np.ndarray, n: int | None, seed: int) -> np.ndarray:
    """A uniform sample of n positives without replacement (all of them when n is None or >= their count),
    in their original order. A function of (positives, n, seed) only: every retriever, pool and prior
    weight ranked with the same n and seed sees the same positives."""
    if n is None or n >= len(positives):
        return positives
    rows = np.random.default_rng(seed).choice(len(positives), size=n, replace=False)
    return positives[np.sort(rows)]


def log_split(split: str, res: dict, cfg: RecConfig, total: int) -> None:
    log.info("%s", ranking_line(f"{split} ({res['positives']} of {total} positives)", res, cfg, 20))


def ranking_line(head: str, res: dict, cfg: RecConfig, at: int) -> str:
    """recall@M, then Hits@at and MRR of each ranker of a split's result, for the log."""
    rankers = (
        ("retriever", "retriever_alone"),
        ("PENCIL", "pencil_rerank"),
        (f"blend w={cfg.prior_weight:g}", "pencil_blend"),
    )
    reach = f"{head} {cfg.retriever} pool {cfg.pool}: recall@{cfg.pool} {res[f'recall@{cfg.pool}']:.4f}"
    at_k = f"hits@{at}"
    return " | ".join(
        [reach, *(f"{n} Hits@{at} {res[k].get(at_k, np.nan):.4f} MRR {res[k]['mrr']:.4f}" for n, k in rankers)]
    )


def sample_record(run, sampled: int, of: int) -> dict:
    """What --sample-positives ranked, for the JSON."""
    return {"sample_positives": run.sample_positives, "sample_seed": run.sample_seed, "sampled": sampled, "of": of}
