"""Full ranking by a model that scores every node (a GNN's dot products), under the rules of `pencil evaluate`:
the same filter and tie rule as the pooled rankers (pipelines/recommend/evaluation.py), without a pool."""

from __future__ import annotations

import numpy as np

from common.graph import Graph
from common.retrieval import neighbour_entries
from pipelines.recommend.ranking import metrics, pool_ranks


def native_full_ranking(
    graph, positives: np.ndarray, known: np.ndarray, score_rows, side=None, block: int = 512
) -> dict:
    """A model that scores every node (a GNN's dot products): v's rank among ALL of u's rankable
    non-neighbours, the same filter (not u, not a neighbour, not another known positive of u; the other
    kind on a bipartite graph) and tie rule as the pooled rankers. score_rows(queries) -> (Q, N) scores."""
    u, v = positives[:, 0].astype(np.int64), positives[:, 1].astype(np.int64)
    n = graph.num_nodes
    partners = Graph.from_edges(known.astype(np.int64), num_nodes=n)  # u's known positives as CSR rows
    ranks = np.empty(len(u))
    for lo in range(0, len(u), block):  # (block, N) scores at a time
        uu, vv = u[lo : lo + block], v[lo : lo + block]
        queries, inverse = np.unique(uu, return_inverse=True)
        scores = np.asarray(score_rows(queries), dtype=np.float64)[inverse]
        valid = np.ones(scores.shape, dtype=bool)
        valid[neighbour_entries(graph, uu)] = False
        valid[neighbour_entries(partners, uu)] = False
        if side is not None:
            valid &= side[None, :] != side[uu][:, None]
        r = np.arange(len(uu))
        valid[r, uu] = False
        valid[r, vv] = True
        ranks[lo : lo + block] = pool_ranks(scores, valid, vv)
    return {"positives": int(len(u)), **metrics(ranks, n)}
