"""Candidate retrieval: the top-M non-neighbours of each query node by a cheap graph score.

`retrieve(graph, queries, method, pool)` works on a block of query nodes at once (sparse products
for RA/AA, a sparse (b, N) push for PPR), so a recommendation job holds one block's temporaries at a
time. It never proposes the query itself, an existing neighbour, or (with node kinds: `Kinds`) a node of a kind
the query's kind is not proposed. A bipartite graph's sides (`side`) are the two-kind case: each side proposed the
other; a typed run's relation proposes its tail kind to every query.

- ra / aa: resource allocation (sum of 1/deg w) / Adamic-Adar (sum of 1/log deg w) over the common
  neighbours w, i.e. paths u-w-v of 2 hops: row u of A W A. For a query proposed other kinds than its own (every
  query of a bipartite graph) the 2-hop nodes are mostly of u's own kind, so paths of 3 hops u-i-u'-v are used,
  with the weight 1/deg (or 1/log deg) of both middle nodes: row u of A W A W A (the mass-diffusion recommender).
- ppr: personalized PageRank from u, p = alpha e_u + (1 - alpha) A D^-1 p (alpha = teleport
  probability), approximated by a local forward push (Andersen, Chung & Lang 2006) run on a whole block
  of queries at once: a sparse (b, N) residual r starts at e_u; each round, every entry with r(v) >
  eps * deg(v) is pushed at once (p(v) += alpha r(v), each neighbour of v gets (1 - alpha) r(v) / deg(v),
  r(v) = 0) by one sparse product with D^-1 A, until no entry exceeds its threshold. Then
  0 <= exact(v) - p(v) <= eps * deg(v) for every v, and the work per query is below 1 / (alpha eps)
  neighbour updates whatever the graph's size (power iteration touched every edge each step). Rows
  never interact, so a node's pool never depends on its block. It reaches past 2 hops: on citeseer
  most test positives share no neighbour with their source.
- mix: reciprocal-rank fusion of the RA and PPR pools (each of size M):
  score(v) = 1 / (RRF_K + rank_ra(v)) + 1 / (RRF_K + rank_ppr(v)), a missing rank adding 0 (RRF_K = 60,
  Cormack et al. 2009); the top M of the union. RA's 2-hop candidates and PPR's farther ones then
  share the pool, and the scores need no common scale.

`candidates` (a mask over the nodes) restricts every pool, filled ones too, to some nodes: under a temporal split,
the nodes that exist by the split's boundary (LinkDataset.active_nodes), so nothing from the future is proposed.

Only nodes with a positive score are candidates (a node the score cannot reach is no better than a
random one), so a pool may hold fewer than M nodes; `Pool.count` says how many. With `fill`, a short pool
is topped up by popularity: the most connected nodes of the query's own connected component, then of the
whole graph (never the query, a neighbour, a node already pooled, or one of its own kind), scored 0, so a
node gets M candidates unless the graph has fewer. Ties are broken by
the smaller node id, after rounding scores to 12 significant digits so that sums taken in another
order (a slow reference, another block size) pick the same candidates.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from common.graph import Graph
from common.heuristics import adjacency
from common.retrieval_kinds import EVERY_NODE, Allowed, Kinds, RetrievalError, as_kinds
from common.retrieval_kinds import allowed_mask as _allowed

RETRIEVERS = ("ra", "aa", "ppr", "mix")
RRF_K = 60
PPR_ALPHA = 0.15
PPR_EPS = 1e-6  # push threshold per unit degree (the choice is measured in docs/benchmarks/)
BLOCK_BYTES = 256 << 20  # a PPR block's sparse arrays are capped at this many bytes


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


@dataclass(frozen=True)
class Tuning:
    """How retrieval computes: PPR's teleport `alpha` and push threshold `eps` (module docstring), and the query
    nodes per block (None: block_rows)."""

    alpha: float = PPR_ALPHA
    eps: float = PPR_EPS
    block: int | None = None

    def __post_init__(self):
        if not 0 < self.alpha < 1:
            raise RetrievalError(f"PPR alpha must lie in (0, 1), got {self.alpha}")
        if not 0 < self.eps < 1:
            raise RetrievalError(f"PPR push threshold eps must lie in (0, 1), got {self.eps}")


def _path_weights(graph: Graph, method: str) -> np.ndarray:
    deg = graph.degree.astype(np.float64)
    w = np.zeros_like(deg)
    if method == "ra":
        w[deg > 0] = 1.0 / deg[deg > 0]
    else:  # aa: a middle node of degree 1 cannot lie on a u-w-v path with u != v
        w[deg > 1] = 1.0 / np.log(deg[deg > 1])
    return w


def overlap_scores(
    graph: Graph, queries: np.ndarray, method: str, bipartite: bool = False, a: sp.csr_matrix | None = None
) -> sp.coo_matrix:
    """(Q, N) sparse RA/AA path scores of the queries: rows of A W A (A W A W A on a bipartite graph)."""
    a = adjacency(graph) if a is None else a
    w = sp.diags(_path_weights(graph, method))
    rows = a[queries] @ w
    scores = rows @ a
    if bipartite:
        scores = (scores @ w) @ a
    return scores.tocoo()


def _overlap_pool(graph, queries, method, pool, kinds, a, candidates=None, known=None):
    """RA/AA pools: paths of 3 hops for the queries proposed other kinds than their own, of 2 hops for the rest."""
    cross = np.zeros(len(queries), dtype=bool) if kinds is None else kinds.crosses(queries)
    if cross.all() or not cross.any():  # one kind of query (every bipartite block): one product, as always
        s = overlap_scores(graph, queries, method, bipartite=bool(cross.any()), a=a)
        row, col, val = s.row.astype(np.int64), s.col.astype(np.int64), s.data
    else:  # each row's sums are its own, so the two groups' rows are those of one product
        parts = []
        for group in (np.flatnonzero(~cross), np.flatnonzero(cross)):
            s = overlap_scores(graph, queries[group], method, bipartite=bool(cross[group[0]]), a=a)
            parts.append((group[s.row], s.col.astype(np.int64), s.data))
        row, col, val = (np.concatenate(x) for x in zip(*parts))
    ok = (val > 0) & _allowed(graph, queries, row, col, kinds, candidates, known)
    return top_per_row(row[ok], col[ok], val[ok], len(queries), pool)


def _rows_where(m: sp.csr_matrix, keep: np.ndarray, scale: np.ndarray | None = None) -> sp.csr_matrix:
    """The entries of CSR `m` where `keep` (a mask over m.data) holds, times scale (over m.indices), same order."""
    at = np.flatnonzero(keep)
    data = m.data[at] if scale is None else m.data[at] * scale[m.indices[at]]
    return sp.csr_matrix((data, m.indices[at], np.searchsorted(at, m.indptr)), shape=m.shape)


def transition(graph: Graph) -> sp.csr_matrix:
    """D^-1 A as CSR: row v gives 1 / deg(v) to each neighbour of v (a row vector times it is one walk step)."""
    deg = graph.degree.astype(np.float64)
    inv = np.zeros_like(deg)
    inv[deg > 0] = 1.0 / deg[deg > 0]
    n = graph.num_nodes
    return sp.csr_matrix((np.repeat(inv, graph.degree), graph.indices, graph.indptr), shape=(n, n))


def ppr_push(
    graph: Graph, queries: np.ndarray, alpha: float = PPR_ALPHA, eps: float = PPR_EPS, walk: sp.csr_matrix | None = None
) -> sp.csr_matrix:
    """(Q, N) sparse approximate personalized PageRank of each query (rows) by synchronous forward push:
    every round pushes all entries with residual > eps * deg at once (module docstring). An isolated seed
    keeps all its mass at itself (nothing else is reachable). `walk`: transition(graph), built once per job."""
    walk = transition(graph) if walk is None else walk
    n, q = graph.num_nodes, len(queries)
    deg = graph.degree.astype(np.float64)
    absorb = np.where(deg > 0, alpha, 1.0)  # share of a pushed residual that stays in p (all of it at a dangling seed)
    thr = eps * deg  # 0 at a dangling node: pushed as soon as it holds mass
    r = sp.csr_matrix((np.ones(q), queries, np.arange(q + 1)), shape=(q, n))
    p = sp.csr_matrix((q, n))
    while True:
        hot = r.data > thr[r.indices]
        if not hot.any():
            return p
        spread = _rows_where(r, hot) @ walk
        spread.sort_indices()  # canonical rows (sorted, unique), as r's: the sums below are linear merges
        p = p + _rows_where(r, hot, absorb)
        r = _rows_where(r, ~hot) + (1.0 - alpha) * spread


def neighbour_entries(graph: Graph, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of every (query position, neighbour) pair, gathered from the CSR rows in one go."""
    starts, lens = graph.indptr[queries], graph.degree[queries]
    row = np.repeat(np.arange(len(queries)), lens)
    offset = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
    return row, graph.indices[np.repeat(starts, lens) + offset].astype(np.int64)


def _ppr_pool(graph, queries, pool, walk, tuning: Tuning, kinds, candidates=None, known=None):
    p = ppr_push(graph, queries, tuning.alpha, tuning.eps, walk).tocoo()
    row, col, val = p.row.astype(np.int64), p.col.astype(np.int64), p.data
    ok = (val > 0) & _allowed(graph, queries, row, col, kinds, candidates, known)
    return top_per_row(row[ok], col[ok], val[ok], len(queries), pool)


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


_POPULARITY: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # per graph object: one job computes it once


def popularity(graph: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(component of each node, nodes ordered by (component, degree desc, id), each component's start)."""
    if graph not in _POPULARITY:
        from scipy.sparse.csgraph import connected_components

        _, comp = connected_components(adjacency(graph), directed=False)
        order = np.lexsort((np.arange(graph.num_nodes), -graph.degree, comp))
        _POPULARITY[graph] = comp, order, np.searchsorted(comp[order], np.arange(comp.max(initial=-1) + 2))
    return _POPULARITY[graph]


def _fill_from(
    graph: Graph, pool: Pool, rows: np.ndarray, lists: np.ndarray, spans: tuple, side, candidates=None, known=None
) -> None:
    """Append to each row in `rows` the first allowed nodes of lists[starts[i]:ends[i]], up to the pool;
    `spans`: (starts, ends); `side`: Kinds or a bipartite graph's side flags (None: any kind)."""
    starts, ends = spans
    need = pool.cand.shape[1] - pool.count[rows]
    span = np.minimum(ends - starts, need + graph.degree[pool.queries[rows]] + pool.count[rows] + 1)
    row = np.repeat(rows, span)
    col = lists[np.repeat(starts, span) + np.arange(span.sum()) - np.repeat(np.cumsum(span) - span, span)]
    ok = _allowed(graph, pool.queries, row, col, side, candidates, known)
    n = graph.num_nodes
    taken = np.flatnonzero(pool.cand.ravel() >= 0)
    ok &= ~np.isin(row * n + col, (taken // pool.cand.shape[1]) * n + pool.cand.ravel()[taken])
    row, col = row[ok], col[ok]
    rank = np.arange(len(row)) - np.searchsorted(row, row)  # rows stay sorted by construction
    keep = rank < (pool.cand.shape[1] - pool.count[row])
    row, col, rank = row[keep], col[keep], rank[keep]
    slot = pool.count[row] + rank
    pool.cand[row, slot], pool.score[row, slot] = col, 0.0
    pool.count += np.bincount(row, minlength=len(pool.count))


def fill_by_popularity(graph: Graph, pool: Pool, side=None, candidates=None, known=None) -> Pool:
    """Top up short rows of `pool` in place: the query's component by popularity, then the whole graph; only
    `candidates` (a node mask) when given, only kinds `side` allows (Kinds, or a bipartite graph's side flags)."""
    comp, order, start = popularity(graph)
    if candidates is not None:  # the lists hold only candidates, so each row's span stays as short as without
        order = order[candidates[order]]
        start = np.searchsorted(comp[order], np.arange(comp.max(initial=-1) + 2))
    for local in (True, False):
        rows = np.flatnonzero(pool.count < pool.cand.shape[1])
        if not rows.size:
            break
        if local:
            c = comp[pool.queries[rows]]
            _fill_from(graph, pool, rows, order, (start[c], start[c + 1]), side, candidates, known)
        else:
            glob = np.argsort(-graph.degree, kind="stable")
            glob = glob if candidates is None else glob[candidates[glob]]
            spans = (np.zeros(len(rows), np.int64), np.full(len(rows), len(glob)))
            _fill_from(graph, pool, rows, glob, spans, side, candidates, known)
    return pool


def block_rows(num_nodes: int, method: str, alpha: float = PPR_ALPHA, eps: float = PPR_EPS) -> int:
    """Query nodes per block. A PPR row holds at most min(N, 1 / (alpha eps)) entries in each of p, r and
    the pushed part (module docstring), ~16 bytes each with its column; RA/AA rows are 2-hop sparse."""
    if method in ("ppr", "mix"):
        width = min(max(1, num_nodes), math.ceil(1.0 / (alpha * eps)))
        return max(1, min(1024, BLOCK_BYTES // (4 * 16 * width)))
    return 1024


def retrieve(
    graph: Graph,
    queries,
    method: str,
    pool: int,
    *,
    allowed: Allowed = EVERY_NODE,
    fill: bool = False,
    tuning: Tuning = Tuning(),
) -> Pool:
    """Top-`pool` candidates of every query node by `method` (see the module docstring); `allowed`: which nodes
    may be proposed; `fill`: short pools topped up by popularity; `tuning`: PPR's parameters and the block size."""
    if method not in RETRIEVERS:
        raise RetrievalError(f"--retriever: unknown retriever '{method}'; use one of {', '.join(RETRIEVERS)}")
    if pool < 1:
        raise RetrievalError(f"--pool: must be >= 1, got {pool}")
    candidates, known = allowed.candidates, allowed.known
    q = check_queries(graph, queries)
    if allowed.side is not None and np.shape(allowed.side) != (graph.num_nodes,):
        raise RetrievalError(
            f"side: expected one flag per node ({graph.num_nodes}), got shape {np.shape(allowed.side)}"
        )
    kinds = allowed.rule()
    if kinds is not None and kinds.of.shape != (graph.num_nodes,):
        raise RetrievalError(f"kinds: expected one kind per node ({graph.num_nodes}), got shape {kinds.of.shape}")
    if candidates is not None:
        mask = np.zeros(graph.num_nodes, dtype=bool)
        mask[np.asarray(candidates, dtype=np.int64)] = True
        candidates = mask
    a = adjacency(graph) if method != "ppr" else None
    walk = transition(graph) if method in ("ppr", "mix") else None
    step = tuning.block or block_rows(graph.num_nodes, method, tuning.alpha, tuning.eps)
    parts = []
    for lo in range(0, len(q), step):
        b = q[lo : lo + step]
        if method in ("ra", "aa"):
            parts.append(_overlap_pool(graph, b, method, pool, kinds, a, candidates, known))
        elif method == "ppr":
            parts.append(_ppr_pool(graph, b, pool, walk, tuning, kinds, candidates, known))
        else:
            parts.append(
                _fuse(
                    [
                        _overlap_pool(graph, b, "ra", pool, kinds, a, candidates, known),
                        _ppr_pool(graph, b, pool, walk, tuning, kinds, candidates, known),
                    ],
                    len(b),
                    pool,
                )
            )
    if not parts:
        return Pool(q, np.zeros((0, pool), np.int64), np.zeros((0, pool)), np.zeros(0, np.int64))
    cand, score, count = (np.concatenate(x) for x in zip(*parts))
    out = Pool(q, cand, score, count)
    return fill_by_popularity(graph, out, kinds, candidates, known) if fill else out


__all__ = [
    "RETRIEVERS",
    "RRF_K",
    "Pool",
    "RetrievalError",
    "retrieve",
    "Allowed",
    "Kinds",
    "as_kinds",
    "EVERY_NODE",
    "Tuning",
    "overlap_scores",
    "ppr_push",
    "transition",
    "top_per_row",
    "check_queries",
    "block_rows",
    "rounded",
    "popularity",
    "fill_by_popularity",
]
