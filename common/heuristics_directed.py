"""Directed link heuristics: the ordered pair (u, v) asks "will u -> v appear?", so (v, u) may score otherwise.

Every scorer takes `out`, the out-edge CSR of a directed graph (anything with `indptr` (N+1,) and `indices`:
row u lists the heads v of u's edges u -> v), and integer pairs (M, 2) in their order; it returns (M,)
float64. Pairs are processed a block at a time, as in common/heuristics.py.

- dcn / daa / dra: the directed paths u -> w -> v, i.e. w among the out-neighbours of u and the
  in-neighbours of v: row u of A times column v of A (row v of A^T), then a weighted row sum.
  CN counts them; AA weighs each w by 1 / log(deg w), RA by 1 / deg w.
- reverse: 1 if the reverse edge v -> u exists, else 0 (reciprocity as a baseline).

deg w is w's total degree, in + out arcs: it is at least 2 on every path u -> w -> v (one arc in, one out), so
AA never takes log 1 (an out-degree of 1 is common in a directed graph), and on a symmetric graph it is twice the
undirected degree, so RA then ranks exactly as the undirected RA.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from common.graph import node_pairs

DEFAULT_BATCH = 100_000


class DirectedHeuristicError(ValueError):
    """Bad directed-heuristic input; the message names the problem and the fix."""


def out_adjacency(out) -> sp.csr_matrix:
    """(N, N) CSR A with A[u, v] = 1 for every edge u -> v of `out` (duplicates counted once)."""
    indptr = np.asarray(out.indptr, dtype=np.int64)
    n = indptr.shape[0] - 1
    a = sp.csr_matrix((np.ones(len(out.indices)), np.asarray(out.indices), indptr), shape=(n, n))
    a.sum_duplicates()
    a.data[:] = 1.0
    return a


def total_degree(a: sp.csr_matrix) -> np.ndarray:
    """in + out arcs of every node of the out-adjacency `a`."""
    return np.asarray(a.sum(axis=1)).ravel() + np.asarray(a.sum(axis=0)).ravel()


def check_pairs(out, pairs) -> np.ndarray:
    """(M, 2) int64 pairs whose ids lie in the graph, or one line naming the problem."""
    return node_pairs(pairs, len(out.indptr) - 1, "the directed graph", DirectedHeuristicError)


def _path_overlap(out, pairs, node_weight: Callable[[sp.csr_matrix], np.ndarray], batch: int) -> np.ndarray:
    """sum over w with u -> w -> v of node_weight(A)[w], batched over pairs."""
    p = check_pairs(out, pairs)
    a = out_adjacency(out)
    w = node_weight(a)
    # A^T with each column w scaled by w's weight: row v of it holds v's in-neighbours, weighted
    awt = sp.csr_matrix(a.multiply(w[:, None]).T)
    res = np.empty(p.shape[0], dtype=np.float64)
    for s in range(0, p.shape[0], batch):
        u, v = p[s : s + batch, 0], p[s : s + batch, 1]
        res[s : s + batch] = np.asarray(a[u].multiply(awt[v]).sum(axis=1)).ravel()
    return res


def _ones(a: sp.csr_matrix) -> np.ndarray:
    return np.ones(a.shape[0])


def _inv_log_degree(a: sp.csr_matrix) -> np.ndarray:
    deg = total_degree(a)
    w = np.zeros_like(deg)
    w[deg > 1] = 1.0 / np.log(deg[deg > 1])  # deg >= 2 on every path; deg <= 1 has no path through it
    return w


def _inv_degree(a: sp.csr_matrix) -> np.ndarray:
    deg = total_degree(a)
    w = np.zeros_like(deg)
    w[deg > 0] = 1.0 / deg[deg > 0]
    return w


def directed_common_neighbors(graph, pairs, out, batch: int = DEFAULT_BATCH) -> np.ndarray:
    """dCN(u, v) = |N_out(u) ∩ N_in(v)|: the number of paths u -> w -> v. `graph` (the undirected one) is unused."""
    return _path_overlap(out, pairs, _ones, batch)


def directed_adamic_adar(graph, pairs, out, batch: int = DEFAULT_BATCH) -> np.ndarray:
    """dAA(u, v) = sum over paths u -> w -> v of 1 / log(in(w) + out(w))."""
    return _path_overlap(out, pairs, _inv_log_degree, batch)


def directed_resource_allocation(graph, pairs, out, batch: int = DEFAULT_BATCH) -> np.ndarray:
    """dRA(u, v) = sum over paths u -> w -> v of 1 / (in(w) + out(w))."""
    return _path_overlap(out, pairs, _inv_degree, batch)


def reverse_edge(graph, pairs, out, batch: int = DEFAULT_BATCH) -> np.ndarray:
    """1.0 where v -> u is an edge of `out`, else 0.0: the reciprocity rule."""
    p = check_pairs(out, pairs)
    a = out_adjacency(out)  # canonical: sorted rows, no duplicates
    n = a.shape[0]
    keys = np.repeat(np.arange(n, dtype=np.int64) * n, np.diff(a.indptr)) + a.indices
    if not keys.size:
        return np.zeros(p.shape[0])
    q = p[:, 1] * n + p[:, 0]
    pos = np.minimum(np.searchsorted(keys, q), keys.size - 1)
    return (keys[pos] == q).astype(np.float64)


def unique_ordered(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct ordered pairs (U, 2), inverse (M,)): common.metrics.unique_pairs keeps (u, v) and (v, u) as one,
    which a directed score must not."""
    flat = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    n = int(flat.max()) + 1 if flat.size else 1
    keys, inverse = np.unique(flat[:, 0] * n + flat[:, 1], return_inverse=True)
    return np.stack([keys // n, keys % n], axis=1), inverse.ravel()


# Heuristics of a directed run; each takes `out=` (the split's out-edge CSR) beside graph and pairs.
DIRECTED: dict[str, Callable[..., np.ndarray]] = {
    "dcn": directed_common_neighbors,
    "daa": directed_adamic_adar,
    "dra": directed_resource_allocation,
    "reverse": reverse_edge,
}
LABELS = {"dcn": "CN (directed)", "daa": "AA (directed)", "dra": "RA (directed)", "reverse": "reverse edge"}
