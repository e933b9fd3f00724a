"""Full-ranking evaluation of recommendations (pipelines.recommend --evaluate RUN).

For every positive (u, v) of a split, v's rank among ALL non-neighbours of u on the graph the split is
scored on (filtered: the split's other known positives of u, valid and test, are left out of u's list,
as OGB's full-ranking evaluations do). Two rankers share the retriever's pool of M candidates per u:

- the retriever alone ranks the pool by its own score;
- PENCIL re-ranks the same pool by its probability (the scoring engine, --orderings averaged).

A target inside the pool takes its place there (ties count half: rank = 1 + #higher + #tied / 2, the
paper's rule). A target outside the pool ranks after the whole pool for both rankers, at the expected
place of a uniformly random order of the rest: rank = M_u + (R_u - M_u + 1) / 2, with M_u the pool's
size and R_u the number of u's rankable non-neighbours. Neither ranker can do better than the pool,
so Hits@K <= recall@M for both, and the comparison is at the same pool.
Reported per split: recall@M (target in the pool), Hits@K and MRR of each ranker.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from common.retrieval import retrieve
from pipelines.recommend_core import RecConfig, RecommendError, probabilities, scorer_for

log = logging.getLogger("pipelines.recommend")
HITS_AT = (1, 10, 20, 50, 100)


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


def full_ranking(graph, positives: np.ndarray, known: np.ndarray, cfg: RecConfig, scorer=None, side=None) -> dict:
    """Metrics of the retriever alone and (with a scorer) of PENCIL re-ranking its pool."""
    u, v = positives[:, 0].astype(np.int64), positives[:, 1].astype(np.int64)
    queries = np.unique(u)
    pool = retrieve(graph, queries, cfg.retriever, cfg.pool, side=side)
    row = np.searchsorted(queries, u)
    cand = pool.cand[row]  # (P, M)
    n = graph.num_nodes
    # filtered: u's other known positives are not competitors
    known_keys = np.unique(np.concatenate([known[:, 0] * n + known[:, 1], known[:, 1] * n + known[:, 0]]))
    keys = u[:, None] * n + np.maximum(cand, 0)
    other = np.isin(keys, known_keys) & (cand != v[:, None])
    valid = (cand >= 0) & ~other
    hit = (cand == v[:, None]) & valid
    target = np.where(hit.any(1), hit.argmax(1), -1)
    # rankable non-neighbours of u: the nodes (of the other kind) minus u, its neighbours and its other positives
    partners = np.bincount(known.ravel(), minlength=n)[u] - 1  # v is one of u's known positives
    kind = n - 1 if side is None else np.where(side[u], (~side).sum(), side.sum())
    rankable = np.maximum(kind - graph.degree[u] - partners, 1)
    size = valid.sum(1)
    outside = size + (rankable - size + 1) / 2.0
    result = {"positives": int(len(u)), "pool": cfg.pool, "retriever": cfg.retriever,
              f"recall@{cfg.pool}": float(np.mean(target >= 0))}
    retr = np.where(valid, pool.score[row], -np.inf)
    ranks = np.where(target >= 0, pool_ranks(retr, valid, target), outside)
    result["retriever_alone"] = metrics(ranks, cfg.pool)
    if scorer is not None:
        node, cnd, _ = pool.pairs()
        prob = probabilities(scorer.logits(np.stack([node, cnd], axis=1)))
        table = np.full(pool.cand.shape, -np.inf)
        table[pool.cand >= 0] = prob  # pairs() is row-major over the valid entries
        pen = np.where(valid, table[row], -np.inf)
        result["pencil_rerank"] = metrics(np.where(target >= 0, pool_ranks(pen, valid, target), outside), cfg.pool)
        result["pairs_scored"] = int(len(node))
    return result


def evaluate_run(args) -> int:
    """--evaluate RUN: the full-ranking table of a trained run on its valid and test splits."""
    from pipelines.recommend import load_run
    from trainer.scoring import default_device
    device = default_device(args.device)
    model, dataset, fields, _ = load_run(args.evaluate, device)
    cfg = RecConfig(k=min(args.k, args.pool), pool=args.pool, retriever=args.retriever, orderings=args.orderings,
                    seed=args.seed, token_budget=args.token_budget, batch_size=args.batch_size, **fields)
    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    bad = [s for s in splits if s not in ("valid", "test") or s not in dataset.splits]
    if bad:
        raise RecommendError(f"--splits: no split {', '.join(bad)} to rank; use valid and/or test")
    known = np.concatenate([dataset.splits[s].pos for s in ("valid", "test") if s in dataset.splits])
    report = {"dataset": dataset.name, "run": args.evaluate, "splits": {}}
    for split in splits:
        graph = dataset.graph_for(split)
        scorer = scorer_for(model, graph, cfg, device)
        res = full_ranking(graph, np.asarray(dataset.splits[split].pos, dtype=np.int64), known, cfg, scorer)
        report["splits"][split] = res
        log.info("%s %s pool %d: recall@%d %.4f | retriever Hits@20 %.4f MRR %.4f | PENCIL Hits@20 %.4f MRR %.4f",
                 split, cfg.retriever, cfg.pool, cfg.pool, res[f"recall@{cfg.pool}"],
                 res["retriever_alone"].get("hits@20", float("nan")), res["retriever_alone"]["mrr"],
                 res["pencil_rerank"].get("hits@20", float("nan")), res["pencil_rerank"]["mrr"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(report, indent=2))
    tmp.replace(out)
    print(json.dumps(report, indent=2))
    return 0
