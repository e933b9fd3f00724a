"""Negatives: node pairs that are not edges, drawn uniformly by vectorised rejection sampling, for every
split that needs them (random, temporal, synthetic). Pairs are (min, max): edges are undirected; given a
common.graph.DiGraph (a --directed dataset) they are ordered pairs u -> v that are not edges (the reverse may be)."""

from __future__ import annotations

import numpy as np

from common.datasets.base import DatasetError
from common.graph import DiGraph, Graph
from common.unique import unique_first, unique_sorted


def min_max(pairs: np.ndarray) -> np.ndarray:
    """(min, max) of every row of (M, 2) pairs: == np.sort(pairs, axis=1), without a sort per row."""
    out = np.empty(pairs.shape, dtype=pairs.dtype)
    np.minimum(pairs[:, 0], pairs[:, 1], out=out[:, 0])
    np.maximum(pairs[:, 0], pairs[:, 1], out=out[:, 1])
    return out


def sample_non_edges(
    graph: Graph,
    count: int,
    rng: np.random.Generator,
    accept=None,
    exclude: np.ndarray | None = None,
    what: str = "negatives",
    nodes: np.ndarray | tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """`count` distinct uniform node pairs (min, max) that are not edges of `graph` nor self-loops.

    accept: optional vectorised filter pairs -> bool mask (e.g. "far apart in latent space").
    exclude: (M, 2) pairs that must not be returned either (keeps valid and test negatives disjoint).
    nodes: draw only among these nodes (a temporal split's nodes that exist by the boundary); None = all; a pair
    (a, b) of disjoint node arrays: one end in each (a temporal split's old-and-new pairs, common/datasets/temporal.py).
    Rejection sampling in batches: sparse graphs accept almost every draw, so it is a few passes.
    """
    n, ordered = graph.num_nodes, isinstance(graph, DiGraph)
    if count <= 0:
        return np.zeros((0, 2), dtype=np.int64)
    taken = 0 if exclude is None else len(exclude)
    free = max(0, free_pairs(graph, nodes) - taken)
    if count > free:  # one negative per held-out edge: a graph this dense has too few non-edges for its split
        among = "" if nodes is None else f", among {_count(nodes)} nodes"
        raise DatasetError(
            f"{what}: needs {count} node pairs that are not edges, but the graph ({n} nodes, "
            f"{graph.num_edges} edges{f', {taken} pairs already drawn' if taken else ''}{among}) has "
            f"only {free} left; pass --split with smaller valid and test shares, or use a sparser graph"
        )
    taken = None
    if exclude is not None and len(exclude):
        ex = np.asarray(exclude, dtype=np.int64).reshape(-1, 2)
        ex = ex if ordered else min_max(ex)
        taken = unique_sorted(ex[:, 0] * n + ex[:, 1])
    keys = np.zeros(0, dtype=np.int64)
    for _ in range(200):
        need = count - len(keys)
        draw = _draw(rng, n, nodes, 2 * need + 64, ordered)
        draw = draw if ordered else min_max(draw)
        ok = draw[:, 0] != draw[:, 1]
        ok[ok] = ~graph.has_edge(draw[ok, 0], draw[ok, 1])
        if accept is not None and ok.any():
            ok[ok] = np.asarray(accept(draw[ok]), dtype=bool)
        new = draw[ok, 0] * n + draw[ok, 1]
        if taken is not None:
            new = new[~np.isin(new, taken)]
        keys = np.concatenate([keys, new])
        keys = keys[unique_first(keys)]  # dedup, keeping the random draw order
        if len(keys) >= count:
            keys = keys[:count]
            return np.stack([keys // n, keys % n], axis=1)
    raise DatasetError(
        f"{what}: found only {len(keys)} of {count} acceptable non-edges after 200 rounds; "
        "the graph is too dense or the filter too strict"
    )


def _draw(rng: np.random.Generator, n: int, nodes, size: int, ordered: bool = False) -> np.ndarray:
    """(size, 2) uniform node pairs: among all n nodes, among `nodes`, or one end in each of a pair of arrays
    (ordered: either end first, by a coin drawn only then, so undirected draws are unchanged)."""
    if nodes is None:
        return rng.integers(0, n, size=(size, 2), dtype=np.int64)
    if isinstance(nodes, tuple):
        a, b = nodes
        at = rng.integers(0, [len(a), len(b)], size=(size, 2), dtype=np.int64)
        out = np.stack([a[at[:, 0]], b[at[:, 1]]], axis=1)
        if ordered:
            flip = rng.random(size) < 0.5
            out[flip] = out[flip, ::-1]
        return out
    return nodes[rng.integers(0, len(nodes), size=(size, 2), dtype=np.int64)]


def _count(nodes) -> str:
    return " x ".join(f"{len(a):,}" for a in nodes) if isinstance(nodes, tuple) else f"{len(nodes):,}"


def free_pairs(graph: Graph, nodes) -> int:
    """Distinct non-edge pairs of `graph` among `nodes` (None: every node; a pair (a, b) of disjoint arrays: the
    pairs with one end in each); ordered pairs for a DiGraph (twice the unordered ones, less its ordered edges)."""
    per = 2 if isinstance(graph, DiGraph) else 1  # pairs per unordered pair of nodes
    if nodes is None:
        return per * (graph.num_nodes * (graph.num_nodes - 1) // 2) - graph.num_edges
    if isinstance(nodes, tuple):
        side = np.zeros(graph.num_nodes, dtype=np.int8)
        side[nodes[0]], side[nodes[1]] = 1, 2
        edges = graph.edge_array()
        across = np.count_nonzero(side[edges[:, 0]] * side[edges[:, 1]] == 2)
        return per * len(nodes[0]) * len(nodes[1]) - int(across)
    inside = np.zeros(graph.num_nodes, dtype=bool)
    inside[nodes] = True
    edges = graph.edge_array()
    k = int(inside.sum())
    return per * (k * (k - 1) // 2) - int(np.count_nonzero(inside[edges[:, 0]] & inside[edges[:, 1]]))
