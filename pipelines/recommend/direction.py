"""Which way a run's links point, for the commands on a run (score, recommend, evaluate, serve).

A directed run (a set built with --directed) scores the ordered pair (u, v) as "u -> v"; its direction comes from
the set's manifest (the dataset it records, rebuilt by pipelines.core.runs.run_dataset), never from a flag.
`run_digraph` returns the directed graph of a command's `--graph` (a split's, every split's, or an edge-list
snapshot's, read as ordered pairs) beside the undirected union the sampler walks (common.snapshot.graph_for); None
for an undirected run. recommend and serve propose out-links of a node (node -> candidate, the default) or in-links
(candidate -> node), never a link that exists in that direction.
"""

from __future__ import annotations

import numpy as np

from common import snapshot
from common.datasets import DatasetError
from common.graph import DiGraph

DIRECTIONS = ("out", "in")


class DirectionError(ValueError):
    """A direction the run cannot give; the message names the flag or file and the fix."""


def run_digraph(dataset, spec: str, graph) -> DiGraph | None:
    """The directed graph of `--graph spec` for a directed run's dataset (None for an undirected one), on the nodes
    of `graph` (the undirected union of the same spec, common.snapshot.graph_for). The dataset is the one the run's
    manifest records (pipelines.core.runs.run_dataset), so its direction is the set's."""
    if not getattr(dataset, "directed", False):  # a dataset that says nothing of direction is undirected
        return None
    if spec in snapshot.SPLIT_NAMES:
        return dataset.out_graph_for(spec)
    if spec == snapshot.WHOLE:  # every edge the user has, each in its own direction (as snapshot.whole_graph)
        parts = [g.edge_array() for g in dataset.out_graphs.values()]
        parts += [s.pos.reshape(-1, 2) for s in dataset.splits.values()]
        return DiGraph.from_edges(np.concatenate(parts).astype(np.int64), graph.num_nodes)
    src, dst, _ = snapshot.read_edge_indices(spec, dataset.num_nodes, dataset.node_ids)
    digraph = DiGraph.from_edges(np.stack([src, dst], axis=1), graph.num_nodes)
    check_has_direction(spec, digraph, dataset.out_graph_for("train"))
    return digraph


def check_has_direction(spec: str, snap: DiGraph, trained: DiGraph) -> None:
    """A snapshot whose every edge also appears reversed, of a run trained on a graph whose edges do not, is an
    undirected export (each pair written both ways), not the directed graph: refused in one line."""
    if not snap.num_edges or reciprocity(snap) < 1.0 or reciprocity(trained) == 1.0:
        return
    raise DatasetError(
        f"--graph {spec}: every edge appears in both directions, so the file has no direction, and the run is "
        f"directed ({100 * (1 - reciprocity(trained)):.0f} % of its training edges have no reverse); pass the "
        "edge list with one row per edge src -> dst as it happened"
    )


def reciprocity(g: DiGraph) -> float:
    """Share of the edges u -> v whose reverse v -> u is an edge too (1.0 for an empty graph)."""
    e = g.edge_array()
    return float(g.has_edge(e[:, 1], e[:, 0]).mean()) if len(e) else 1.0


def check_model_direction(model, digraph: DiGraph | None, where: str) -> None:
    """A model trained on a directed set reads edge directions (model.cfg.edge_types > 1); scored on a graph
    without them, or an undirected model on a directed graph, it would read another input than it learnt on."""
    reads = int(getattr(model.cfg, "edge_types", 1)) > 1
    if reads and digraph is None:
        raise DirectionError(
            f"{where}: its model was trained on a directed set (--directed) but is asked to score an undirected "
            "graph; score it with the set it was trained on (--shards), whose manifest says directed"
        )
    if digraph is not None and not reads:
        raise DirectionError(
            f"{where}: its set is directed but its model reads no directions (trained on an undirected set); "
            "score it with its own undirected set (--shards), or train on the directed set"
        )


def add_direction_flag(p) -> None:
    """--direction, shared by recommend and evaluate: one definition, one default."""
    p.add_argument(
        "--direction", default=None, choices=DIRECTIONS, help="a directed run: out-links (default) or in-links"
    )


def resolve_direction(asked: str | None, digraph: DiGraph | None, where: str, flag: str = "--direction") -> str | None:
    """The direction to recommend in: None for an undirected run (a direction asked of one is refused), else the
    one asked, "out" by default."""
    if asked is not None and asked not in DIRECTIONS:
        raise DirectionError(f"{flag} {asked}: use out (node -> candidate) or in (candidate -> node)")
    if digraph is None:
        if asked is not None:
            raise DirectionError(
                f"{flag} {asked}: {where} is undirected (its links have no direction); drop {flag}, or build the "
                "set with --directed"
            )
        return None
    return asked or "out"


def known_links(digraph: DiGraph | None, direction: str | None) -> DiGraph | None:
    """The links a recommendation may not repeat, query -> candidate: the out-edges for out-links, the in-edges
    (the transpose) for in-links; None for an undirected run (the graph's own edges, either way)."""
    if digraph is None:
        return None
    return digraph if direction == "out" else digraph.transpose()


def ordered(node: np.ndarray, cand: np.ndarray, direction: str | None) -> np.ndarray:
    """(P, 2) pairs to score: (node, candidate), or (candidate, node) for in-links."""
    return np.stack([cand, node], axis=1) if direction == "in" else np.stack([node, cand], axis=1)
