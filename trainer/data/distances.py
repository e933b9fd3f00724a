"""Hop distances of every context node to the two targets, inside its link's sampled subgraph: the structure
that SEAL's DRNL labels encode (bench/seal.py), computed on arrays, a block of links at a time (numba).

For link b with local ids 0 (u) and 1 (v) and its induced edges (the target edge u-v is never among them:
common/induce.py leaves it out), every context node i gets (du, dv):

    du(i)   BFS distance from u to i that never enters v (DRNL's convention: a path through the other end
            says nothing new), -1 when no such path exists inside the subgraph;
    dv(i)   the same from v, never entering u;
    u, v    du(u) = dv(v) = 0, and dv(u) = du(v) = the u-v distance without the target edge (-1: none).

The subgraph comes as local edges (edge_ptr (B+1,), edges (E, 2), each undirected edge once) or as a dense
(B, Lc, Lc) 0/1 matrix, the two forms trainer/data/packing.py carries.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _bfs(start, skip, ptr, nbr, dist, queue):
    """Hop distances from `start` within one subgraph's local CSR, never entering node `skip` (-1: none)."""
    dist[:] = -1
    dist[start] = 0
    queue[0] = start
    head, tail = 0, 1
    while head < tail:
        x = queue[head]
        head += 1
        for j in range(ptr[x], ptr[x + 1]):
            y = nbr[j]
            if y != skip and dist[y] < 0:
                dist[y] = dist[x] + 1
                queue[tail] = y
                tail += 1


@njit(cache=True)
def _fill(base, n, ptr, nbr, out):
    """out[base + i] = (du, dv) of the n nodes of one subgraph given as local CSR (ptr, nbr)."""
    du = np.empty(n, dtype=np.int64)
    dv = np.empty(n, dtype=np.int64)
    queue = np.empty(n, dtype=np.int64)
    _bfs(0, 1, ptr, nbr, du, queue)
    _bfs(1, 0, ptr, nbr, dv, queue)
    for i in range(2, n):
        out[base + i, 0] = du[i]
        out[base + i, 1] = dv[i]
    _bfs(0, -1, ptr, nbr, du, queue)  # the u-v distance may pass through any node (the target edge is absent)
    out[base, 0] = 0
    out[base, 1] = du[1]
    out[base + 1, 0] = du[1]
    out[base + 1, 1] = 0


@njit(cache=True)
def _edges_kernel(node_ptr, edge_ptr, edges, out):
    for b in range(node_ptr.shape[0] - 1):
        n = node_ptr[b + 1] - node_ptr[b]
        e0, e1 = edge_ptr[b], edge_ptr[b + 1]
        deg = np.zeros(n + 1, dtype=np.int64)
        for e in range(e0, e1):
            deg[edges[e, 0] + 1] += 1
            deg[edges[e, 1] + 1] += 1
        ptr = np.cumsum(deg)
        fill = ptr[:-1].copy()
        nbr = np.empty(2 * (e1 - e0), dtype=np.int64)
        for e in range(e0, e1):
            a, c = edges[e, 0], edges[e, 1]
            nbr[fill[a]] = c
            fill[a] += 1
            nbr[fill[c]] = a
            fill[c] += 1
        _fill(node_ptr[b], n, ptr, nbr, out)


@njit(cache=True)
def _dense_kernel(node_ptr, adj, out):
    for b in range(node_ptr.shape[0] - 1):
        n = node_ptr[b + 1] - node_ptr[b]
        ptr = np.zeros(n + 1, dtype=np.int64)
        for i in range(n):
            ptr[i + 1] = ptr[i]
            for j in range(n):
                if adj[b, i, j] and not ((i == 0 and j == 1) or (i == 1 and j == 0)):
                    ptr[i + 1] += 1
        nbr = np.empty(ptr[n], dtype=np.int64)
        for i in range(n):
            k = ptr[i]
            for j in range(n):
                if adj[b, i, j] and not ((i == 0 and j == 1) or (i == 1 and j == 0)):
                    nbr[k] = j
                    k += 1
        _fill(node_ptr[b], n, ptr, nbr, out)


def pair_distances(
    node_ptr: np.ndarray,
    edge_ptr: np.ndarray | None = None,
    edges: np.ndarray | None = None,
    dense: np.ndarray | None = None,
) -> np.ndarray:
    """(sum N_b, 2) int64 (du, dv) of every node of every link (module docstring), from local edges
    (edge_ptr, edges) or a dense (B, Lc, Lc) adjacency (the target entry, if set, is ignored)."""
    node_ptr = np.ascontiguousarray(node_ptr, dtype=np.int64)
    if (edges is None) == (dense is None):
        raise ValueError("pair_distances: give the subgraphs either as edges (edge_ptr, edges) or as dense")
    sizes = np.diff(node_ptr)
    if len(sizes) and sizes.min() < 2:
        raise ValueError("pair_distances: every link needs at least its two targets (local ids 0 and 1)")
    out = np.zeros((int(node_ptr[-1]), 2), dtype=np.int64)
    if dense is not None:
        _dense_kernel(node_ptr, np.ascontiguousarray(dense, dtype=np.uint8), out)
    else:
        _edges_kernel(
            node_ptr,
            np.ascontiguousarray(edge_ptr, dtype=np.int64),
            np.ascontiguousarray(np.asarray(edges).reshape(-1, 2), dtype=np.int64),
            out,
        )
    return out
