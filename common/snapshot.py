"""Today's graph: an edge-list snapshot to score and recommend on, other than the one trained on.

PENCIL has no node embeddings, so a trained model transfers to a snapshot with new edges and new
nodes. Ids are the training set's integer ids (0..N-1); nodes that appeared since training take the
ids after them (the node-id mapping of common/datasets/edgelist.py applies where the training set
came from named ids). `node_sides` reads the kinds of a bipartite edge list from its columns: every
src is one kind (users), every dst the other (items).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from common.datasets.base import DatasetError
from common.graph import Graph

SPLIT_NAMES = ("train", "valid", "test")


def read_edge_columns(path) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) int64 columns of a .csv/.parquet edge list, or a one-line error naming the file."""
    from common.datasets.edgelist import _id_column, _read_table

    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"--graph {p}: file not found; pass a .csv or .parquet edge list with columns src,dst")
    df = _read_table(p)
    df.columns = [str(c).strip().lower() for c in df.columns]
    missing = [c for c in ("src", "dst") if c not in df.columns]
    if missing:
        raise DatasetError(f"--graph {p}: missing column(s) {', '.join(missing)} (found: {', '.join(df.columns)}); "
                           "name the endpoint columns src and dst")
    return _id_column(df, "src", p), _id_column(df, "dst", p)


def read_snapshot(path, min_nodes: int) -> Graph:
    """The snapshot's undirected graph, with at least the training graph's nodes (ids kept)."""
    src, dst = read_edge_columns(path)
    top = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
    return Graph.from_edges(np.stack([src, dst], axis=1), num_nodes=max(min_nodes, top))


def graph_for(spec: str, dataset) -> Graph:
    """`--graph`: a split name (the graph its candidates were scored on) or an edge-list file."""
    if spec in SPLIT_NAMES:
        return dataset.graph_for(spec)
    return read_snapshot(spec, dataset.num_nodes)


def node_sides(path, num_nodes: int) -> np.ndarray:
    """(N,) bool: True for the src kind of a bipartite edge list; a node on both sides is an error.
    Nodes in no edge count as src kind (they have no edge to say otherwise)."""
    src, dst = read_edge_columns(path)
    both = np.intersect1d(src, dst)
    if both.size:
        raise DatasetError(f"--bipartite: {path}: node {int(both[0])} appears as both src and dst ({both.size} such "
                           "nodes); a bipartite edge list keeps one kind per column")
    side = np.ones(num_nodes, dtype=bool)
    side[dst] = False
    return side
