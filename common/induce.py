"""Recover the induced subgraph of sampled node sets from the CSR graph (shard format v2, docs/design.md).

A shard stores, per link, only its context nodes in local-id order (u = 0, v = 1). The edges a model
sees are a pure function of that node set and the graph it was sampled on: every graph edge between two
context nodes, except the target edge u-v (removed in every split, so positives cannot leak their
label). When u == v (a self-loop candidate), local 1 is a second copy of u and gets local 0's edges.

Two output forms, same edges:
  edges  (sum E_b, 2) int32 local pairs a < b, each undirected edge once, plus (B+1,) offsets: the
         sparse form, for the usual sparse subgraphs (citeseer (2,20): ~40 edges on ~40 nodes);
  dense  (B, L, L) uint8 symmetric 0/1 adjacency over local ids, for dense subgraphs (ogbl-ddi (1,350):
         ~64,000 edges on ~530 nodes, 46 % of all pairs), where an edge list costs more than the matrix.

A directed set (--directed) also ships its out-edge CSR; an Inducer over it gives each link's ordered edges
(`ordered_edges`: local a -> b, only the target edge u -> v hidden, its reverse v -> u kept: the reverse is another
edge) and their dense form (`dense(..., ordered=True)`: out[b, i, j] = 1 iff i -> j). The sampler and the
propagation keep reading the undirected union; these say which way each of its edges points.

A typed set (relation types, shard format 4) also ships its triple CSR: row h holds the tail of every triple
(h, r, t), sorted by (t, r), with a relation array aligned; `typed_edges` gives each link's typed edges (local
a -> b of relation r, rows (a, b, r)), every triple between two context nodes but those u -> v (the target pair's,
whatever their relation), as the ordered form hides u -> v.

Both kernels work on a whole block of links per call: one pass over each context node's CSR row with a
per-node marker array (global id -> local id, reset after each link), or a binary search for the few
context nodes when the row is much longer than the context (hubs). Rows must be sorted (common.graph).
"""

from __future__ import annotations

import numpy as np
from numba import njit


def _dense_shape(node_ptr: np.ndarray, width: int | None, who: str) -> tuple[np.ndarray, int, int]:
    """(node_ptr as contiguous int64, B links, L): the dense adjacency's side, width or the largest N_b."""
    node_ptr = np.ascontiguousarray(node_ptr, dtype=np.int64)
    sizes = np.diff(node_ptr)
    L = int(width if width is not None else (sizes.max() if sizes.size else 0))
    if sizes.size and sizes.max() > L:
        raise ValueError(f"{who}: width {L} < largest context {int(sizes.max())}")
    return node_ptr, len(sizes), L


class Inducer:
    """The graph plus a marker scratch array: one per process (loader worker, shard task)."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray):
        # np.asarray drops the np.memmap subclass (numba types plain arrays) but keeps the mapping.
        self.indptr = np.asarray(indptr, dtype=np.int64)
        self.indices = np.asarray(indices)
        self.num_nodes = int(self.indptr.shape[0] - 1)
        self.degree = np.diff(self.indptr)
        self.mark = np.full(self.num_nodes, -1, dtype=np.int32)

    def edges(self, node_ptr: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(edge_ptr (B+1,) int64, edges (E, 2) int32): local induced edges a < b of every link."""
        node_ptr = np.ascontiguousarray(node_ptr, dtype=np.int64)
        edge_ptr, flat = _edges_kernel(self.indptr, self.indices, node_ptr, np.ascontiguousarray(nodes), self.mark)
        return edge_ptr, flat[: 2 * edge_ptr[-1]].reshape(-1, 2)

    def ordered_edges(self, node_ptr: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(edge_ptr (B+1,) int64, edges (E, 2) int32) of an out-edge CSR: local a -> b, every ordered edge between
        two context nodes but the target u -> v (local 0 -> 1)."""
        node_ptr = np.ascontiguousarray(node_ptr, dtype=np.int64)
        edge_ptr, flat = _ordered_kernel(self.indptr, self.indices, node_ptr, np.ascontiguousarray(nodes), self.mark)
        return edge_ptr, flat[: 2 * edge_ptr[-1]].reshape(-1, 2)

    def typed_edges(self, node_ptr: np.ndarray, nodes: np.ndarray, relation: np.ndarray) -> tuple[np.ndarray, ...]:
        """(edge_ptr (B+1,) int64, rows (E, 3) int64 (a, b, r)) of a triple CSR (this Inducer's arrays) and its
        `relation` array: every triple a -> b of relation r between context nodes but u -> v (local 0 -> 1)."""
        node_ptr = np.ascontiguousarray(node_ptr, dtype=np.int64)
        rel = np.asarray(relation)
        edge_ptr, flat = _typed_kernel(self.indptr, self.indices, rel, node_ptr, np.ascontiguousarray(nodes), self.mark)
        return edge_ptr, flat[: 3 * edge_ptr[-1]].reshape(-1, 3).astype(np.int64)

    def dense(
        self, node_ptr: np.ndarray, nodes: np.ndarray, width: int | None = None, ordered: bool = False
    ) -> np.ndarray:
        """(B, L, L) uint8 adjacency over local ids, L = width or the largest N_b; zero padding. ordered (an
        out-edge CSR): out[b, i, j] = 1 iff i -> j, and only the target u -> v is hidden."""
        node_ptr, B, L = _dense_shape(node_ptr, width, "Inducer.dense")
        out = np.zeros((B, L, L), dtype=np.uint8)
        _dense_kernel(self.indptr, self.indices, node_ptr, np.ascontiguousarray(nodes), self.mark, out, ordered)
        return out

    def entry_bound(self, node_ptr: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """(B,) upper bound on each link's directed adjacency entries, sum_i min(deg_i, N_b - 1), from
        degrees alone (no row scan): what decides sparse vs dense form before paying for either."""
        node_ptr = np.asarray(node_ptr, dtype=np.int64)
        sizes = np.diff(node_ptr)
        cap = np.repeat(np.maximum(sizes - 1, 0), sizes)
        per_node = np.minimum(self.degree[nodes[node_ptr[0] : node_ptr[-1]]], cap)
        out = np.zeros(len(sizes), dtype=np.int64)
        nz = sizes > 0
        out[nz] = np.add.reduceat(per_node, (node_ptr[:-1] - node_ptr[0])[nz]) if per_node.size else 0
        return out


# ---------------------------------------------------------------------------- kernels
@njit(cache=True)
def grow(arr, needed):
    """Double `arr` until it holds `needed` items (amortised O(1) appends)."""
    if needed <= arr.shape[0]:
        return arr
    size = max(arr.shape[0] * 2, 16)
    while size < needed:
        size *= 2
    out = np.empty(size, dtype=arr.dtype)
    out[: arr.shape[0]] = arr
    return out


@njit(cache=True)
def _row_has(indices, start, deg, w):
    """Is w in the sorted CSR row indices[start : start + deg]? (binary search)"""
    a, z = start, start + deg
    while a < z:
        mid = (a + z) >> 1
        if indices[mid] < w:
            a = mid + 1
        else:
            z = mid
    return a < start + deg and indices[a] == w


@njit(cache=True)
def _mark_context(nodes, lo, k, mark):
    """mark[global] = local for the link's context; with u == v local 1 is a copy (marker stays at 0)."""
    self_loop = nodes[lo] == nodes[lo + 1]
    for i in range(k):
        if not (self_loop and i == 1):
            mark[nodes[lo + i]] = i
    return self_loop


@njit(cache=True)
def _edges_kernel(indptr, indices, node_ptr, nodes, mark):
    B = node_ptr.shape[0] - 1
    edge_ptr = np.zeros(B + 1, dtype=np.int64)
    edges = np.empty(max(128, 4 * (node_ptr[-1] - node_ptr[0])), dtype=np.int32)  # flat (a0, b0, ...)
    e = 0
    for b in range(B):
        lo = node_ptr[b]
        k = node_ptr[b + 1] - lo
        self_loop = _mark_context(nodes, lo, k, mark)
        e0 = e
        for i in range(k):
            if self_loop and i == 1:
                continue  # local 1 mirrors local 0 below
            start = indptr[nodes[lo + i]]
            deg = indptr[nodes[lo + i] + 1] - start
            if deg > 8 * (k - i):
                # Hub row: binary-search the few remaining context nodes instead of scanning the row.
                edges = grow(edges, 2 * (e + k))
                for j in range(i + 1, k):
                    if (self_loop and j == 1) or (i == 0 and j == 1):
                        continue
                    if _row_has(indices, start, deg, nodes[lo + j]):
                        edges[2 * e] = i
                        edges[2 * e + 1] = j
                        e += 1
            else:
                edges = grow(edges, 2 * (e + deg))
                # Branch-free: "is this neighbour a later context node" is a coin flip the CPU cannot
                # predict, so always store and advance the cursor by the comparison. Outsiders have
                # mark -1 < i; for i == 0 the target edge (local 1) is excluded by requiring j > 1.
                low = 1 if i == 0 else i
                for p in range(start, start + deg):
                    j = mark[indices[p]]
                    edges[2 * e] = i
                    edges[2 * e + 1] = j
                    e += np.int64(j > low)
        if self_loop:  # mirror local 0's edges onto its copy at local 1
            edges = grow(edges, 2 * (2 * e - e0))
            for q in range(e0, e):
                if edges[2 * q] == 0:
                    edges[2 * e] = 1
                    edges[2 * e + 1] = edges[2 * q + 1]
                    e += 1
        for i in range(k):
            mark[nodes[lo + i]] = -1
        edge_ptr[b + 1] = e
    return edge_ptr, edges


@njit(cache=True)
def _ordered_kernel(indptr, indices, node_ptr, nodes, mark):
    """Every a -> b of the out-edge CSR between context nodes, but 0 -> 1 (u == v: local 1 copies local 0)."""
    B = node_ptr.shape[0] - 1
    edge_ptr = np.zeros(B + 1, dtype=np.int64)
    edges = np.empty(max(128, 4 * (node_ptr[-1] - node_ptr[0])), dtype=np.int32)
    e = 0
    for b in range(B):
        lo = node_ptr[b]
        k = node_ptr[b + 1] - lo
        self_loop = _mark_context(nodes, lo, k, mark)
        e0 = e
        for i in range(k):
            if self_loop and i == 1:
                continue
            start = indptr[nodes[lo + i]]
            deg = indptr[nodes[lo + i] + 1] - start
            edges = grow(edges, 2 * (e + max(deg, k)))
            if deg > 8 * k:  # hub row: binary-search the context nodes
                for j in range(k):
                    if j != i and not (self_loop and j == 1) and _row_has(indices, start, deg, nodes[lo + j]):
                        edges[2 * e] = i
                        edges[2 * e + 1] = j
                        e += 1
            else:
                for p in range(start, start + deg):
                    j = mark[indices[p]]
                    edges[2 * e] = i
                    edges[2 * e + 1] = j
                    e += np.int64(j >= 0 and j != i)  # an outsider (-1) or the row's own node: overwritten next
        if self_loop:  # local 1 is a copy of local 0: its out-edges and in-edges
            edges = grow(edges, 2 * (3 * e - 2 * e0))
            for q in range(e0, e):
                if edges[2 * q] == 0:
                    edges[2 * e], edges[2 * e + 1] = 1, edges[2 * q + 1]
                    e += 1
                elif edges[2 * q + 1] == 0:
                    edges[2 * e], edges[2 * e + 1] = edges[2 * q], 1
                    e += 1
        # the target edge u -> v is never visible: drop 0 -> 1 (its reverse 1 -> 0 is another edge, kept)
        w = e0
        for q in range(e0, e):
            if not (edges[2 * q] == 0 and edges[2 * q + 1] == 1):
                edges[2 * w], edges[2 * w + 1] = edges[2 * q], edges[2 * q + 1]
                w += 1
        e = w
        for i in range(k):
            mark[nodes[lo + i]] = -1
        edge_ptr[b + 1] = e
    return edge_ptr, edges


@njit(cache=True)
def _typed_kernel(indptr, indices, relation, node_ptr, nodes, mark):
    """Every triple a -> b (relation r) between context nodes, as flat (a, b, r), but those 0 -> 1; with u == v
    local 1 is a copy of local 0 (its out- and in-triples)."""
    B = node_ptr.shape[0] - 1
    edge_ptr = np.zeros(B + 1, dtype=np.int64)
    out = np.empty(max(192, 6 * (node_ptr[-1] - node_ptr[0])), dtype=np.int32)  # flat (a0, b0, r0, ...)
    e = 0
    for b in range(B):
        lo = node_ptr[b]
        k = node_ptr[b + 1] - lo
        self_loop = _mark_context(nodes, lo, k, mark)
        e0 = e
        for i in range(k):
            if self_loop and i == 1:
                continue
            start = indptr[nodes[lo + i]]
            deg = indptr[nodes[lo + i] + 1] - start
            if deg > 8 * k:  # hub row: binary-search each context node, then its run of relations
                for j in range(k):
                    if j == i or (self_loop and j == 1):
                        continue
                    w = nodes[lo + j]
                    a, z = start, start + deg
                    while a < z:
                        mid = (a + z) >> 1
                        if indices[mid] < w:
                            a = mid + 1
                        else:
                            z = mid
                    while a < start + deg and indices[a] == w:
                        out = grow(out, 3 * (e + 1))
                        out[3 * e], out[3 * e + 1], out[3 * e + 2] = i, j, relation[a]
                        e += 1
                        a += 1
            else:
                out = grow(out, 3 * (e + deg))
                for p in range(start, start + deg):
                    j = mark[indices[p]]
                    out[3 * e], out[3 * e + 1], out[3 * e + 2] = i, j, relation[p]
                    e += np.int64(j >= 0 and j != i)  # an outsider or the row's own node: overwritten next
        if self_loop:  # local 1 is a copy of local 0: its out- and in-triples
            out = grow(out, 3 * (3 * e - 2 * e0))
            for q in range(e0, e):
                if out[3 * q] == 0:
                    out[3 * e], out[3 * e + 1], out[3 * e + 2] = 1, out[3 * q + 1], out[3 * q + 2]
                    e += 1
                elif out[3 * q + 1] == 0:
                    out[3 * e], out[3 * e + 1], out[3 * e + 2] = out[3 * q], 1, out[3 * q + 2]
                    e += 1
        w = e0  # the target pair u -> v is never visible, whatever its relation
        for q in range(e0, e):
            if not (out[3 * q] == 0 and out[3 * q + 1] == 1):
                out[3 * w], out[3 * w + 1], out[3 * w + 2] = out[3 * q], out[3 * q + 1], out[3 * q + 2]
                w += 1
        e = w
        for i in range(k):
            mark[nodes[lo + i]] = -1
        edge_ptr[b + 1] = e
    return edge_ptr, out


@njit(cache=True)
def _dense_kernel(indptr, indices, node_ptr, nodes, mark, out, ordered=False):
    B = node_ptr.shape[0] - 1
    for b in range(B):
        lo = node_ptr[b]
        k = node_ptr[b + 1] - lo
        self_loop = _mark_context(nodes, lo, k, mark)
        for i in range(k):
            if self_loop and i == 1:
                continue
            start = indptr[nodes[lo + i]]
            deg = indptr[nodes[lo + i] + 1] - start
            row = out[b, i]
            if deg > 8 * k:  # hub row: binary-search every context node
                for j in range(k):
                    if _row_has(indices, start, deg, nodes[lo + j]):
                        row[j] = 1
            else:
                for p in range(start, start + deg):
                    j = mark[indices[p]]
                    if j >= 0:
                        row[j] = 1
        if self_loop:  # local 1 is a copy of local 0: same row and column
            for j in range(k):
                out[b, 1, j] = out[b, 0, j]
                out[b, j, 1] = out[b, j, 0]
            out[b, 1, 1] = 0
        out[b, 0, 1] = 0  # the target edge is never visible
        if not ordered:  # an ordered graph's 1 -> 0 is the reverse edge v -> u: another edge, visible
            out[b, 1, 0] = 0
        for i in range(k):
            mark[nodes[lo + i]] = -1


# ---------------------------------------------------------------------------- small graphs: a bit matrix
# A graph with up to this many bytes of adjacency bits (n^2 / 8: ogbl-ddi's 4,267 nodes take 2.2 MB)
# is kept as a bit matrix, and the dense form reads A[i, j] = bit(nodes[i], nodes[j]) with one
# branch-free pass over the (N_b x N_b) output: it stays in cache, so it does not depend on degrees.
# Measured (bench/loader.py, ddi-shaped (1,350) links, one core): 0.15 ms per link against 1.4 ms for
# the row-scan kernel above, which pays a mispredicted branch per row entry (~500 per context node).
BITMATRIX_MAX_BYTES = 32 << 20


class BitMatrix:
    """The graph as (n, ceil(n / 8)) uint8 rows of adjacency bits, little-endian within a byte."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray):
        indptr = np.asarray(indptr, dtype=np.int64)
        n = int(indptr.shape[0] - 1)
        self.bits = np.zeros((n, (n + 7) // 8), dtype=np.uint8)
        _fill_bits(indptr, np.asarray(indices), self.bits)

    @staticmethod
    def fits(num_nodes: int) -> bool:
        return num_nodes * ((num_nodes + 7) // 8) <= BITMATRIX_MAX_BYTES

    def dense(self, node_ptr: np.ndarray, nodes: np.ndarray, width: int | None = None) -> np.ndarray:
        """Same output as Inducer.dense: (B, L, L) uint8 over local ids, target edge and padding zero
        (u == v: local 1 has the same global id as local 0, so it gets local 0's row and column)."""
        node_ptr, B, L = _dense_shape(node_ptr, width, "BitMatrix.dense")
        out = np.empty((B, L, L), dtype=np.uint8)
        _bits_kernel(self.bits, node_ptr, np.ascontiguousarray(nodes, dtype=np.int64), out)
        return out


@njit(cache=True)
def _fill_bits(indptr, indices, bits):
    for a in range(indptr.shape[0] - 1):
        for p in range(indptr[a], indptr[a + 1]):
            b = indices[p]
            bits[a, b >> 3] |= np.uint8(1 << (b & 7))


@njit(cache=True)
def _bits_kernel(bits, node_ptr, nodes, out):
    B = out.shape[0]
    for b in range(B):
        lo = node_ptr[b]
        k = node_ptr[b + 1] - lo
        ids = nodes[lo : lo + k]
        byte = ids >> 3
        shift = (ids & 7).astype(np.uint8)
        for i in range(k):
            row, o = bits[ids[i]], out[b, i]
            for j in range(k):
                o[j] = (row[byte[j]] >> shift[j]) & 1
            o[k:] = 0
        out[b, k:] = 0
        if k >= 2:
            out[b, 0, 1] = 0  # the target edge is never visible
            out[b, 1, 0] = 0
