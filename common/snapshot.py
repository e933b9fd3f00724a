"""Today's graph: an edge-list snapshot to score and recommend on, other than the one trained on.

PENCIL has no node embeddings, so a trained model transfers to a snapshot with new edges and new
nodes. A snapshot names nodes as the training set did: the user's ids when the set was built from an
edge-list file (its node-id mapping, common/node_ids.py), else the set's integer ids 0..N-1. Known
nodes keep their training index; nodes that appeared since training take the indices after them
(in sorted order of their ids), and the returned node ids (the training ones, then the new ones) turn
indices back into the user's ids. `node_sides` reads the kinds of a bipartite edge list from its
columns: every src is one kind (users), every dst the other (items).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.datasets.base import DatasetError
from common.datasets.ids import as_run_ids, node_index
from common.datasets.tables import EDGE_LIST_SUFFIXES, read_columns, suffix_of
from common.graph import Graph

SPLIT_NAMES = ("train", "valid", "test")
WHOLE = "all"  # the whole graph: every edge the user has, in every split
GRAPH_NAMES = (*SPLIT_NAMES, WHOLE)
SHARED_SAMPLE = 10_000  # training edges looked up in a snapshot: a snapshot of the graph holds most of them


def read_edge_indices(
    path, num_nodes: int, node_ids: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(src, dst) node indices of an edge list named in the training set's ids, and the node ids extended
    by the snapshot's new nodes (None for a set without a mapping, whose new nodes are ids >= num_nodes).
    Its ids are read by the rules of the run's edge list, in the run's id kind: one that does not fit is refused."""
    p = Path(path)
    cols = read_columns(p, ("src", "dst")).cols
    if node_ids is None:  # integer ids 0..N-1 as the set has them
        src, dst = (as_run_ids(cols[k], k, p, np.int64) for k in ("src", "dst"))
        if (src < 0).any() or (dst < 0).any():
            raise DatasetError(
                f"--graph {p}: negative node id {int(min(src.min(), dst.min()))}; the training set's "
                "ids are 0..N-1 (new nodes take the ids after them)"
            )
        return src, dst, None
    n = len(cols["src"])
    values = np.concatenate([as_run_ids(cols[k], k, p, node_ids.dtype) for k in ("src", "dst")])
    idx, found = node_index(node_ids, values)
    if not found.all():  # new since training: indices after the training nodes, in sorted id order
        new_ids, inverse = np.unique(values[~found], return_inverse=True)
        idx[~found] = num_nodes + inverse
        node_ids = np.concatenate([node_ids, new_ids.astype(node_ids.dtype)])
    return idx[:n], idx[n:], node_ids


def read_snapshot(path, num_nodes: int, node_ids: np.ndarray | None = None) -> tuple[Graph, np.ndarray | None]:
    """The snapshot's undirected graph, with at least the training graph's nodes (indices kept)."""
    src, dst, ids = read_edge_indices(path, num_nodes, node_ids)
    top = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
    size = max(num_nodes, top) if ids is None else len(ids)
    return Graph.from_edges(np.stack([src, dst], axis=1), num_nodes=size), ids


def whole_graph(dataset) -> Graph:
    """Every edge the user has: the training graph with every split's positives (and the test graph's edges).
    What recommendations start from: a held-out edge is an edge the user already has, never a new link."""
    parts = [dataset.graph.edge_array(), *(s.pos.reshape(-1, 2) for s in dataset.splits.values())]
    if dataset.test_graph is not None:
        parts.append(dataset.test_graph.edge_array())
    return Graph.from_edges(
        np.concatenate(parts).astype(np.int64, copy=False), num_nodes=dataset.num_nodes, x=dataset.x
    )


def graph_for(spec: str, dataset) -> tuple[Graph, np.ndarray | None]:
    """`--graph`: `all` (every split's edges), a split name (the graph its candidates were scored on) or an
    edge-list file; with the node ids that name its nodes (None: the set's integer ids). A file that shares no
    edge with the training graph is not a snapshot of it (another graph, or ids named otherwise): refused."""
    if spec == WHOLE:
        return whole_graph(dataset), dataset.node_ids
    if spec in SPLIT_NAMES:
        return dataset.graph_for(spec), dataset.node_ids
    if suffix_of(spec) is None:
        raise DatasetError(
            f"--graph {spec}: neither a graph ({', '.join(GRAPH_NAMES)}) nor an edge-list file "
            f"({', '.join(EDGE_LIST_SUFFIXES)})"
        )
    if not Path(spec).is_file():
        raise DatasetError(
            f"--graph {spec}: file not found; pass today's edge list, or a graph ({', '.join(GRAPH_NAMES)})"
        )
    try:
        graph, ids = read_snapshot(spec, dataset.num_nodes, dataset.node_ids)
    except DatasetError as err:
        raise DatasetError(str(err) if str(err).startswith("--graph") else f"--graph {err}") from None
    train = dataset.graph.edge_array()
    sample = train[np.random.default_rng(0).permutation(len(train))[:SHARED_SAMPLE]]
    if len(sample) and not graph.has_edge(sample[:, 0], sample[:, 1]).any():
        raise DatasetError(
            f"--graph {spec}: shares none of {len(sample)} edges of the graph the run was trained "
            "on: not a snapshot of it (another graph, or nodes named otherwise); name nodes as "
            "the training edge list did"
        )
    return graph, ids


def node_sides(path, num_nodes: int, node_ids: np.ndarray | None = None) -> np.ndarray:
    """(N,) bool: True for the src kind of a bipartite edge list; a node on both sides is an error.
    Nodes in no edge count as src kind (they have no edge to say otherwise)."""
    src, dst, _ = read_edge_indices(path, num_nodes, node_ids)
    both = np.intersect1d(src, dst)
    if both.size:
        name = both[0] if node_ids is None or both[0] >= len(node_ids) else node_ids[both[0]]
        raise DatasetError(
            f"--bipartite: {path}: node {name} appears as both src and dst ({both.size} such "
            "nodes); a bipartite edge list keeps one kind per column"
        )
    side = np.ones(num_nodes, dtype=bool)
    side[dst[dst < num_nodes]] = False
    return side
