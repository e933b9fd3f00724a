"""Candidate retrieval: the top-M non-neighbours of each query node by a cheap graph score.

`retrieve(graph, queries, method, pool)` works on a block of query nodes at once (sparse products
for RA/AA, a dense (b, N) power iteration for PPR), so a recommendation job holds one block's
temporaries at a time. It never proposes the query itself, an existing neighbour, or (with `side`)
a node of the query's own kind.

- ra / aa: resource allocation (sum of 1/deg w) / Adamic-Adar (sum of 1/log deg w) over the common
  neighbours w, i.e. paths u-w-v of 2 hops: row u of A W A. On a bipartite graph (`side` given) the
  2-hop nodes are of u's own kind, so paths of 3 hops u-i-u'-v are used, with the weight 1/deg (or
  1/log deg) of both middle nodes: row u of A W A W A (the mass-diffusion recommender).
- ppr: personalized PageRank from u, p = alpha e_u + (1 - alpha) A D^-1 p (alpha = teleport
  probability), by power iteration for a fixed number of steps T = ceil(log(tol) / log(1 - alpha)),
  so every remaining term is below tol and a node's pool never depends on its block. It reaches past
  2 hops: on citeseer most test positives share no neighbour with their source.
- mix: reciprocal-rank fusion of the RA and PPR pools (each of size M):
  score(v) = 1 / (RRF_K + rank_ra(v)) + 1 / (RRF_K + rank_ppr(v)), a missing rank adding 0 (RRF_K = 60,
  Cormack et al. 2009); the top M of the union. RA's 2-hop candidates and PPR's farther ones then
  share the pool, and the scores need no common scale.

Only nodes with a positive score are candidates (a node the score cannot reach is no better than a
random one), so a pool may hold fewer than M nodes; `Pool.count` says how many. Ties are broken by
the smaller node id, after rounding scores to 12 significant digits so that sums taken in another
order (a slow reference, another block size) pick the same candidates.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from common.graph import Graph
from common.heuristics import adjacency

RETRIEVERS = ("ra", "aa", "ppr", "mix")
RRF_K = 60
PPR_ALPHA = 0.15
PPR_TOL = 1e-6
BLOCK_BYTES = 256 << 20  # the dense (b, N) PPR block is capped at this many bytes


class RetrievalError(ValueError):
    """Bad retrieval input; the message names the flag or value and the fix."""


@dataclass
class Pool:
    """Candidates of a block of query nodes, best first; rows padded with -1 (cand) and -inf (score)."""

    queries: np.ndarray  # (Q,) int64
    cand: np.ndarray  # (Q, M) int64
    score: np.ndarray  # (Q, M) float64
    count: np.ndarray  # (Q,) int64 valid entries per row

    def pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(query, candidate, score) of every valid entry, row-major (best first within a query)."""
        keep = self.cand >= 0
        rows = np.broadcast_to(self.queries[:, None], self.cand.shape)
        return rows[keep], self.cand[keep], self.score[keep]


def check_queries(graph: Graph, queries) -> np.ndarray:
    q = np.asarray(queries)
    if q.ndim != 1 or (q.size and not np.issubdtype(q.dtype, np.integer)):
        raise RetrievalError(f"query nodes: expected a 1-D array of integer node ids, got {q.dtype} {q.shape}")
    q = q.astype(np.int64, copy=False)
    if q.size and (q.min() < 0 or q.max() >= graph.num_nodes):
        bad = int(q.min()) if q.min() < 0 else int(q.max())
        raise RetrievalError(f"query node {bad} is not in the graph (nodes 0..{graph.num_nodes - 1})")
    return q


def rounded(v: np.ndarray) -> np.ndarray:
    """Scores rounded to 12 significant digits (tie-breaking key only)."""
    out = np.zeros_like(v)
    nz = v != 0
    mag = np.floor(np.log10(np.abs(v[nz])))
    scale = 10.0 ** (11 - mag)
    out[nz] = np.round(v[nz] * scale) / scale
    return out


def top_per_row(row: np.ndarray, col: np.ndarray, val: np.ndarray, num_rows: int, pool: int) -> tuple:
    """(cand, score, count) (num_rows, pool): the `pool` largest values of each row, ties by smaller col."""
    order = np.lexsort((col, -rounded(val), row))
    row, col, val = row[order], col[order], val[order]
    start = np.searchsorted(row, np.arange(num_rows))
    rank = np.arange(len(row)) - start[row]
    keep = rank < pool
    cand = np.full((num_rows, pool), -1, dtype=np.int64)
    score = np.full((num_rows, pool), -np.inf)
    cand[row[keep], rank[keep]] = col[keep]
    score[row[keep], rank[keep]] = val[keep]
    return cand, score, np.bincount(row[keep], minlength=num_rows)


def _allowed(graph: Graph, queries: np.ndarray, row: np.ndarray, col: np.ndarray, side) -> np.ndarray:
    """Mask of entries (queries[row], col) that may be proposed: not the query, not a neighbour,
    across the sides on a bipartite graph, and a positive score (checked by the caller)."""
    u = queries[row]
    ok = (col != u) & ~graph.has_edge(u, col)
    if side is not None:
        ok &= side[col] != side[u]
    return ok


def _path_weights(graph: Graph, method: str) -> np.ndarray:
    deg = graph.degree.astype(np.float64)
    w = np.zeros_like(deg)
    if method == "ra":
        w[deg > 0] = 1.0 / deg[deg > 0]
    else:  # aa: a middle node of degree 1 cannot lie on a u-w-v path with u != v
        w[deg > 1] = 1.0 / np.log(deg[deg > 1])
    return w


def overlap_scores(graph: Graph, queries: np.ndarray, method: str, bipartite: bool = False,
                   a: sp.csr_matrix | None = None) -> sp.coo_matrix:
    """(Q, N) sparse RA/AA path scores of the queries: rows of A W A (A W A W A on a bipartite graph)."""
    a = adjacency(graph) if a is None else a
    w = sp.diags(_path_weights(graph, method))
    rows = a[queries] @ w
    scores = rows @ a
    if bipartite:
        scores = (scores @ w) @ a
    return scores.tocoo()


def _overlap_pool(graph, queries, method, pool, side, a):
    s = overlap_scores(graph, queries, method, bipartite=side is not None, a=a)
    row, col, val = s.row.astype(np.int64), s.col.astype(np.int64), s.data
    ok = (val > 0) & _allowed(graph, queries, row, col, side)
    return top_per_row(row[ok], col[ok], val[ok], len(queries), pool)


def ppr_steps(alpha: float, tol: float) -> int:
    return max(1, math.ceil(math.log(tol) / math.log(1.0 - alpha)))


def ppr_scores(graph: Graph, queries: np.ndarray, alpha: float = PPR_ALPHA, tol: float = PPR_TOL,
               a: sp.csr_matrix | None = None) -> np.ndarray:
    """(Q, N) dense personalized PageRank of each query (rows), a fixed number of power steps.
    An isolated seed keeps all its mass at itself (nothing else is reachable)."""
    a = adjacency(graph) if a is None else a
    deg = graph.degree.astype(np.float64)
    inv = np.zeros_like(deg)
    inv[deg > 0] = 1.0 / deg[deg > 0]
    n, q = graph.num_nodes, len(queries)
    e = np.zeros((n, q))
    e[queries, np.arange(q)] = 1.0
    p = e.copy()
    for _ in range(ppr_steps(alpha, tol)):
        # p_{t+1} = alpha e + (1 - alpha) A D^-1 p_t; a dangling seed's mass stays where it is
        spread = a @ (p * inv[:, None])
        spread[queries, np.arange(q)] += (deg[queries] == 0) * p[queries, np.arange(q)]
        p = alpha * e + (1.0 - alpha) * spread
    return p.T


def neighbour_entries(graph: Graph, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of every (query position, neighbour) pair, gathered from the CSR rows in one go."""
    starts, lens = graph.indptr[queries], graph.degree[queries]
    row = np.repeat(np.arange(len(queries)), lens)
    offset = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
    return row, graph.indices[np.repeat(starts, lens) + offset].astype(np.int64)


def _ppr_pool(graph, queries, pool, side, a, alpha, tol):
    s = ppr_scores(graph, queries, alpha, tol, a)
    r = np.arange(len(queries))
    s[r, queries] = 0.0  # zero = never proposed: the query, its neighbours, its own side
    s[neighbour_entries(graph, queries)] = 0.0
    if side is not None:
        s[side[None, :] == side[queries][:, None]] = 0.0
    # Only each row's top `pool` values (and ties at the threshold) go to the exact sort; the small margin
    # keeps values that round to the threshold's 12 digits.
    k = min(pool, graph.num_nodes)
    thr = np.partition(s, graph.num_nodes - k, axis=1)[:, graph.num_nodes - k]
    row, col = np.nonzero((s > 0) & (s >= thr[:, None] * (1 - 1e-10)))
    return top_per_row(row, col, s[row, col], len(queries), pool)


def _fuse(pools: list[tuple], num_rows: int, pool: int) -> tuple:
    """Reciprocal-rank fusion of several (cand, score, count) pools of the same rows."""
    rows, cols, vals = [], [], []
    for cand, _, _ in pools:
        r, k = np.nonzero(cand >= 0)
        rows.append(r)
        cols.append(cand[r, k])
        vals.append(1.0 / (RRF_K + k + 1.0))
    row, col, val = (np.concatenate(x) for x in (rows, cols, vals))
    n = int(col.max()) + 1 if col.size else 1
    key, inverse = np.unique(row * n + col, return_inverse=True)
    fused = np.bincount(inverse, weights=val)
    return top_per_row(key // n, key % n, fused, num_rows, pool)


def block_rows(num_nodes: int, method: str) -> int:
    """Query nodes per block: PPR holds (b, N) float64 twice; RA/AA rows are sparse."""
    if method in ("ppr", "mix"):
        return max(1, min(1024, BLOCK_BYTES // (16 * max(1, num_nodes))))
    return 1024


def retrieve(graph: Graph, queries, method: str, pool: int, *, side: np.ndarray | None = None,
             alpha: float = PPR_ALPHA, tol: float = PPR_TOL, block: int | None = None) -> Pool:
    """Top-`pool` candidates of every query node by `method` (see the module docstring)."""
    if method not in RETRIEVERS:
        raise RetrievalError(f"--retriever: unknown retriever '{method}'; use one of {', '.join(RETRIEVERS)}")
    if pool < 1:
        raise RetrievalError(f"--pool: must be >= 1, got {pool}")
    if not 0 < alpha < 1:
        raise RetrievalError(f"PPR alpha must lie in (0, 1), got {alpha}")
    q = check_queries(graph, queries)
    if side is not None:
        side = np.asarray(side, dtype=bool)
        if side.shape != (graph.num_nodes,):
            raise RetrievalError(f"side: expected one flag per node ({graph.num_nodes}), got shape {side.shape}")
    a = adjacency(graph)
    step = block or block_rows(graph.num_nodes, method)
    parts = []
    for lo in range(0, len(q), step):
        b = q[lo:lo + step]
        if method in ("ra", "aa"):
            parts.append(_overlap_pool(graph, b, method, pool, side, a))
        elif method == "ppr":
            parts.append(_ppr_pool(graph, b, pool, side, a, alpha, tol))
        else:
            parts.append(_fuse([_overlap_pool(graph, b, "ra", pool, side, a),
                                _ppr_pool(graph, b, pool, side, a, alpha, tol)], len(b), pool))
    if not parts:
        return Pool(q, np.zeros((0, pool), np.int64), np.zeros((0, pool)), np.zeros(0, np.int64))
    cand, score, count = (np.concatenate(x) for x in zip(*parts))
    return Pool(q, cand, score, count)


__all__ = ["RETRIEVERS", "RRF_K", "Pool", "RetrievalError", "retrieve", "overlap_scores", "ppr_scores", "ppr_steps",
           "top_per_row", "check_queries", "block_rows", "rounded"]
