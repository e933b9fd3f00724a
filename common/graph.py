"""Undirected CSR graph: the one graph structure the sampler, heuristics and loaders share.

Built once from an edge array: self-loops dropped, duplicates merged, both directions stored,
each neighbour list sorted (so `has_edge` is a binary search and the sampler can slice rows).

A directed dataset (--directed) keeps besides it a `DiGraph`: its ordered edges u -> v as an out-edge CSR (in-edges
are its transpose). Sampling and propagation stay on the undirected union; the DiGraph is what says which way an
edge points. `set_directed_graph` returns a shard set's DiGraph (None for an undirected set): the one way readers
(heuristics, recommend, serve, score) learn a run's direction.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from common.memory import check_allocation
from common.unique import unique_sorted_inplace

SORTED_QUERIES = 1 << 14  # has_edge sorts its queries above this many (see there)


class GraphError(ValueError):
    """Bad graph input; the message names the problem and the fix."""


def node_pairs(pairs, num_nodes: int, where: str, error: type[ValueError] = GraphError) -> np.ndarray:
    """(M, 2) int64 pairs of integer node ids in [0, num_nodes), or `error` in one line naming the problem (`where`:
    the graph, for the message)."""
    arr = np.asarray(pairs)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise error(f"pairs: expected shape (M, 2), got {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise error(f"pairs: node ids must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= num_nodes):
        raise error(f"pairs: node ids must lie in [0, {num_nodes}) for {where}")
    return arr


def as_edge_array(edges, what: str = "edges") -> np.ndarray:
    """Validate an (E, 2) array of integer node ids and return it as int64."""
    arr = np.asarray(edges)
    if arr.ndim == 1 and arr.size == 0:  # `[]` is the natural spelling of "no edges"
        arr = arr.reshape(0, 2)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise GraphError(f"{what}: expected shape (E, 2), got {arr.shape}; pass one (src, dst) pair per row")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise GraphError(f"{what}: node ids must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 0:
        raise GraphError(f"{what}: negative node id {int(arr.min())}; node ids must be 0-based non-negative integers")
    return arr


def _sorted_keys(e: np.ndarray, num_nodes: int) -> np.ndarray:
    """Distinct row * N + col keys of both directions of `e`, self-loops dropped, ascending. One key
    buffer, sorted in place (np.unique would hash and copy: 40 s on 30 M keys under numpy 2.x, see
    common/unique.py); self-loops (no link information) become -1, sort first and are cut off, so
    `e` is never copied."""
    m = e.shape[0]
    key = np.empty(2 * m, dtype=np.int64)
    np.multiply(e[:, 0], num_nodes, out=key[:m])
    key[:m] += e[:, 1]
    np.multiply(e[:, 1], num_nodes, out=key[m:])
    key[m:] += e[:, 0]
    loops = np.flatnonzero(e[:, 0] == e[:, 1])
    key[loops] = key[m + loops] = -1
    key = unique_sorted_inplace(key)
    return key[1:] if loops.size else key


def _member(sorted_keys: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Mask of the entries of `q` found in the sorted array `sorted_keys`."""
    if not sorted_keys.size:
        return np.zeros(q.shape, dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_keys, q), sorted_keys.size - 1)
    return sorted_keys[pos] == q


@dataclass(frozen=True, eq=False)
class Graph:
    """Undirected graph in CSR form.

    indptr: (N+1,) int64; indices: (2E,) int32 or int64, sorted within each row;
    x: optional (N, F) float32 node features.
    """

    indptr: np.ndarray
    indices: np.ndarray
    x: np.ndarray | None = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_edges(cls, edges, num_nodes: int | None = None, x=None) -> "Graph":
        e = as_edge_array(edges)
        if num_nodes is None:
            if x is not None:
                num_nodes = int(np.asarray(x).shape[0])
            elif e.size:
                num_nodes = int(e.max()) + 1
            else:
                raise GraphError("empty graph: no edges and no num_nodes; pass num_nodes= or at least one edge")
        if num_nodes <= 0:
            raise GraphError(f"empty graph: num_nodes={num_nodes}; a graph needs at least one node")
        if e.size and e.max() >= num_nodes:
            raise GraphError(f"edges: node id {int(e.max())} is out of range for num_nodes={num_nodes}")
        # Bound first: CSR arrays per node plus the sort keys per edge (an id of 2^31 in a
        # 0-based file once allocated 24 GB and died without a word).
        check_allocation(
            16.0 * num_nodes + 40.0 * len(e),
            f"a graph of {num_nodes:,} nodes and {len(e):,} edges",
            "node ids must be 0-based and dense here; an edge-list file (.csv/.parquet) maps ids of any size to 0..N-1",
        )
        key = _sorted_keys(e, num_nodes)  # both directions, sorted, deduplicated, no self-loops: row * N + col
        feats = None
        if x is not None:
            feats = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
            if feats.ndim != 2 or feats.shape[0] != num_nodes:
                raise GraphError(f"node features: expected {num_nodes} rows (one per node), got shape {feats.shape}")
        return cls._from_keys(key, num_nodes, feats)

    @classmethod
    def _from_keys(cls, key: np.ndarray, num_nodes: int, x=None) -> "Graph":
        """CSR straight from sorted distinct keys row * N + col (`key` is reused as the column ids)."""
        # row r starts where keys reach r * N (sorted needles: cheap)
        indptr = np.searchsorted(key, np.arange(num_nodes + 1, dtype=np.int64) * num_nodes).astype(np.int64)
        np.remainder(key, num_nodes, out=key)  # in place: keys become column ids
        idx_dtype = np.int32 if num_nodes < 2**31 else np.int64
        return cls(indptr=indptr, indices=key.astype(idx_dtype), x=x)

    def edited(self, add=(), remove=(), num_nodes: int | None = None, new_x=None) -> "Graph":
        """This graph with edges added and removed (both directions; removing an absent edge does nothing),
        on `num_nodes` >= num_nodes nodes (the new ones isolated unless an added edge names them). Equal to
        `from_edges` of the edited edge list, in O(E) merges of sorted keys instead of a sort of all edges
        (a live graph takes small edits often). An edge both added and removed is removed. A graph with node
        features takes new nodes only with their rows, `new_x` (num_nodes - self.num_nodes, F): a node's
        features are never invented."""
        n_old, n = self.num_nodes, self.num_nodes if num_nodes is None else int(num_nodes)
        if n < n_old:
            raise GraphError(f"edited: num_nodes={n} is below the graph's {n_old}; nodes are never removed")
        x = self.x
        if x is not None and n != n_old:
            rows = None if new_x is None else np.asarray(new_x, dtype=np.float32)
            if rows is None or rows.shape != (n - n_old, x.shape[1]):
                got = "none" if rows is None else f"shape {rows.shape}"
                raise GraphError(
                    f"edited: {n - n_old} new node(s) need their features, ({n - n_old}, {x.shape[1]}) rows; got {got}"
                )
            if not np.isfinite(rows).all():
                raise GraphError("edited: the new nodes' features hold NaN or infinite values")
            x = np.concatenate([x, rows])
        elif new_x is not None and len(new_x):
            raise GraphError("edited: feature rows given for no new node (or for a graph without features)")
        add, remove = as_edge_array(add, "added edges"), as_edge_array(remove, "removed edges")
        top = int(max(add.max(initial=-1), remove.max(initial=-1)))
        if top >= n:
            raise GraphError(f"edited: node id {top} is out of range for num_nodes={n}")
        key = self._edge_keys.copy()
        if n != n_old:  # re-encode row * n_old + col as row * n + col: the order is unchanged (col < n_old <= n)
            row = key // n_old
            key -= row * n_old
            key += row * n
        new = _sorted_keys(add, n)
        new = new[~_member(key, new)]
        if new.size:  # two sorted runs: a stable sort merges them in linear time
            key = np.sort(np.concatenate([key, new]), kind="stable")
        gone = _sorted_keys(remove, n)
        if gone.size and key.size:
            key = key[~_member(gone, key)]
        return Graph._from_keys(key, n, x)

    # ------------------------------------------------------------------ basic facts
    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        """Number of undirected edges (each stored twice)."""
        return int(self.indices.shape[0] // 2)

    @property
    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    def neighbors(self, node: int) -> np.ndarray:
        return self.indices[self.indptr[node] : self.indptr[node + 1]]

    def edge_array(self) -> np.ndarray:
        """(E, 2) int64, each undirected edge once with src < dst (row ids in the indices' narrow type)."""
        src = np.repeat(np.arange(self.num_nodes, dtype=self.indices.dtype), self.degree)
        keep = src < self.indices
        out = np.empty((int(np.count_nonzero(keep)), 2), dtype=np.int64)
        out[:, 0] = src[keep]
        del src
        out[:, 1] = self.indices[keep]
        return out

    def with_edges(self, extra_edges) -> "Graph":
        """A new graph with extra edges added (e.g. collab test: train + valid)."""
        e = np.concatenate([self.edge_array(), as_edge_array(extra_edges, "extra edges")])
        return Graph.from_edges(e, num_nodes=self.num_nodes, x=self.x)

    # ------------------------------------------------------------------ queries
    def has_edge(self, u, v) -> np.ndarray:
        """Vectorised membership test for many (u, v) pairs; returns a bool array."""
        u = np.asarray(u, dtype=np.int64)
        v = np.asarray(v, dtype=np.int64)
        n = self.num_nodes
        if u.size and (u.min() < 0 or v.min() < 0 or u.max() >= n or v.max() >= n):
            raise GraphError(f"has_edge: node ids must lie in [0, {n})")
        keys = self._edge_keys
        q = (u * n + v).ravel()
        if not len(keys):
            return np.zeros(u.shape, dtype=bool)
        if q.shape[0] > SORTED_QUERIES:
            # Random needles make every binary search a chain of cache misses; sorted ones share their
            # path's prefix (9x faster for 1 M queries into 6 M keys). The answer is put back in order.
            order = np.argsort(q)
            found = np.empty(q.shape[0], dtype=bool)
            qs = q[order]
            found[order] = keys[np.minimum(np.searchsorted(keys, qs), len(keys) - 1)] == qs
            return found.reshape(u.shape)
        pos = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
        return (keys[pos] == q).reshape(u.shape)

    def edge_positions(self, u, v) -> tuple[np.ndarray, np.ndarray]:
        """(position in `indices` of the entry v in row u, found) for many pairs: where per-edge values that are
        aligned with the CSR arrays (an edge list's weights) are read and written."""
        u = np.asarray(u, dtype=np.int64).ravel()
        v = np.asarray(v, dtype=np.int64).ravel()
        keys = self._edge_keys
        if not len(keys):
            return np.zeros(u.shape, np.int64), np.zeros(u.shape, bool)
        q = u * self.num_nodes + v
        pos = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
        return pos, keys[pos] == q

    @cached_property
    def _edge_keys(self) -> np.ndarray:
        # Sorted rows with sorted neighbour lists make row * N + col a sorted flat array.
        keys = np.repeat(np.arange(self.num_nodes, dtype=np.int64) * self.num_nodes, self.degree)
        keys += self.indices  # in place: one int64 array, no temporaries of its size
        return keys

    def release_edge_keys(self) -> None:
        """Drop has_edge's cached key array (8 bytes per stored edge) once no more queries will come."""
        self.__dict__.pop("_edge_keys", None)

    def fingerprint(self) -> str:
        """Content hash, part of every cache key that depends on this graph."""
        return _csr_fingerprint(self.indptr, self.indices, self.x)

    def __repr__(self) -> str:
        feats = "none" if self.x is None else f"{self.x.shape[1]}"
        return f"Graph(nodes={self.num_nodes}, edges={self.num_edges}, features={feats})"


@dataclass(frozen=True, eq=False)
class DiGraph:
    """Directed graph as an out-edge CSR: row u holds every v with u -> v, sorted; self-loops dropped,
    repeated ordered pairs merged. (u, v) and (v, u) are two edges."""

    indptr: np.ndarray
    indices: np.ndarray

    @classmethod
    def from_edges(cls, edges, num_nodes: int) -> "DiGraph":
        e = as_edge_array(edges)
        if e.size and e.max() >= num_nodes:
            raise GraphError(f"edges: node id {int(e.max())} is out of range for num_nodes={num_nodes}")
        check_allocation(16.0 * num_nodes + 24.0 * len(e), f"a directed graph of {len(e):,} edges", "")
        key = e[:, 0] * num_nodes + e[:, 1]
        key[e[:, 0] == e[:, 1]] = -1  # self-loops carry no link information
        key = unique_sorted_inplace(key)
        key = key[key >= 0]
        g = Graph._from_keys(key, num_nodes)
        return cls(indptr=g.indptr, indices=g.indices)

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        """Ordered edges (u -> v and v -> u count twice)."""
        return int(self.indices.shape[0])

    @property
    def out_degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    @property
    def in_degree(self) -> np.ndarray:
        return np.bincount(self.indices, minlength=self.num_nodes)

    def edge_array(self) -> np.ndarray:
        """(E, 2) int64 ordered pairs (u, v), u -> v, sorted by u then v."""
        src = np.repeat(np.arange(self.num_nodes, dtype=np.int64), self.out_degree)
        return np.stack([src, self.indices.astype(np.int64)], axis=1)

    def transpose(self) -> "DiGraph":
        """The in-edge CSR: row v holds every u with u -> v."""
        return DiGraph.from_edges(self.edge_array()[:, ::-1], self.num_nodes)

    def undirected(self, x=None) -> Graph:
        """The union of both directions: the graph the sampler and the propagation read."""
        return Graph.from_edges(self.edge_array(), num_nodes=self.num_nodes, x=x)

    def has_edge(self, u, v) -> np.ndarray:
        """Is u -> v an edge, for many ordered pairs (a bool array; the reverse is not looked at)."""
        return Graph.has_edge(self, u, v)

    @cached_property
    def _edge_keys(self) -> np.ndarray:
        return Graph._edge_keys.func(self)

    @property
    def degree(self) -> np.ndarray:  # Graph._edge_keys reads out-degrees under this name
        return self.out_degree

    def release_edge_keys(self) -> None:
        self.__dict__.pop("_edge_keys", None)

    def fingerprint(self) -> str:
        return _csr_fingerprint(self.indptr, self.indices, None)

    def __repr__(self) -> str:
        return f"DiGraph(nodes={self.num_nodes}, edges={self.num_edges})"


def _csr_fingerprint(indptr: np.ndarray, indices: np.ndarray, x) -> str:
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(indptr, dtype=np.int64))
    for lo in range(0, indices.shape[0], 1 << 23):  # int64 bytes as always, a chunk at a time
        h.update(np.ascontiguousarray(indices[lo : lo + (1 << 23)], dtype=np.int64))
    if x is not None:
        h.update(np.ascontiguousarray(x).tobytes())
    return h.hexdigest()[:16]


def set_directed_graph(manifest, which: str = "train") -> DiGraph | None:
    """The directed graph a shard set's links of graph `which` ("train" / "test", common.manifest.set_graph) were
    sampled on: its out-edge CSR, memory-mapped and checked against the manifest; None for an undirected set
    (a manifest without `directed`, every set built before version 3, is undirected)."""
    if not manifest.directed:
        return None
    from common.shards import load_out_graph

    return DiGraph(*load_out_graph(manifest, which))


def edge_weights(graph: Graph, pairs: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per-row weights of (M, 2) pairs summed onto the edges of `graph`, aligned with `graph.indices` (both
    directions of an edge carry its sum). Rows that are not an edge of `graph` (self-loops, pairs of another
    split or after a temporal boundary) add nothing. One searchsorted and one bincount, no Python loop."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    weights = np.asarray(weights, dtype=np.float64).ravel()
    out = np.zeros(graph.indices.shape[0], dtype=np.float64)
    for a, b in ((0, 1), (1, 0)):
        pos, found = graph.edge_positions(pairs[:, a], pairs[:, b])
        found &= pairs[:, 0] != pairs[:, 1]
        with np.errstate(over="ignore"):  # a sum past float64 is inf, which the edge-list loader refuses in one line
            out += np.bincount(pos[found], weights=weights[found], minlength=out.shape[0])
    return out


def edge_first_times(graph: Graph, pairs: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Each edge's earliest row time, aligned with `graph.indices` (both directions of an edge carry it): when the
    pair first appeared. Rows that are not an edge of `graph` add nothing; an edge no row names gets +inf."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    times = np.asarray(times, dtype=np.float64).ravel()
    out = np.full(graph.indices.shape[0], np.inf)
    for a, b in ((0, 1), (1, 0)):
        pos, found = graph.edge_positions(pairs[:, a], pairs[:, b])
        np.minimum.at(out, pos[found], times[found])
    return out
