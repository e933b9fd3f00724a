"""Direction for an edge list read with --directed: ordered pairs from the file to the split's protocols.

Rules (docs/own-graph.md#directed-graphs):
- a row src,dst is the edge src -> dst; `1,2` and `2,1` are two edges, each split on its own (random, temporal or
  by the split column), so an edge may be held out while its reverse trains: the reverse is another edge, and
  whether it exists is information the model and the heuristics may use. The log counts such pairs;
- negatives are ordered non-edges: u -> v is no edge (v -> u may be one);
- the dataset keeps each graph's ordered edges (`LinkDataset.out_graphs`, common.graph.DiGraph) beside the
  undirected union that the sampler walks;
- protocol "reverse": every valid / test positive u -> v whose reverse is no edge is ranked against v -> u, its
  one negative; the metric is reverse accuracy (common/metrics.py). Valid's reverses are checked against the
  train and valid edges (what selection may see), test's against every edge.
"""

from __future__ import annotations

import logging

import numpy as np

from common.datasets.base import LinkDataset
from common.graph import DiGraph

log = logging.getLogger("common.datasets.edgelist")

REVERSE = "reverse"


def ordered_unique(pairs: np.ndarray, num_nodes: int) -> np.ndarray:
    """Distinct ordered pairs (u, v), self-loops dropped, first occurrence order kept."""
    from common.unique import unique_first

    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    return pairs[unique_first(pairs[:, 0] * num_nodes + pairs[:, 1])]


def attach_direction(ds: LinkDataset, where: str) -> LinkDataset:
    """Give a dataset split into ordered pairs its out-edge graphs and the reverse protocol (module docstring)."""
    n, pos = ds.num_nodes, {s: ds.splits[s].pos for s in ds.splits}
    seen = np.concatenate([pos["train"], pos["valid"]])
    ds.out_graphs = {"train": DiGraph.from_edges(pos["train"], n)}
    if ds.test_graph is not None:  # test pairs are sampled on train + valid (temporal split)
        ds.out_graphs["test"] = DiGraph.from_edges(seen, n)
    known = {"valid": DiGraph.from_edges(seen, n), "test": DiGraph.from_edges(np.concatenate([seen, pos["test"]]), n)}
    counts = {}
    for split in ("valid", "test"):
        p = pos[split]
        keep = ~known[split].has_edge(p[:, 1], p[:, 0])
        ds.splits[split].protocol_pos[REVERSE] = p[keep]
        ds.splits[split].neg[REVERSE] = p[keep][:, ::-1].reshape(-1, 1, 2).copy()
        counts[split] = (int(keep.sum()), len(p))
    ds.metric[REVERSE] = "reverse_acc"
    log_direction(where, pos, known["test"], counts)
    return ds


def log_direction(where: str, pos: dict, full: DiGraph, counts: dict) -> None:
    """Say that the graph is directed, how many edges have their reverse, and how many of those pairs the split
    put apart (the reverse in another split)."""
    n = full.num_nodes
    recip = full.has_edge(full.edge_array()[:, 1], full.edge_array()[:, 0])
    split_of = {}
    for s, p in pos.items():
        split_of.update(dict.fromkeys((p[:, 0] * n + p[:, 1]).tolist(), s))
    edges = full.edge_array()[recip]
    apart = sum(1 for u, v in edges if u < v and split_of.get(u * n + v) != split_of.get(v * n + u))
    log.info(
        "%s: the graph is directed: u -> v and v -> u are two edges, split on their own (%s edges, %s pairs with "
        "both directions, %s of them with their two directions in different splits); negatives are ordered "
        "non-edges; protocol reverse ranks %s of %s valid and %s of %s test edges (those whose reverse is no edge) "
        "against their reverse",
        where,
        f"{full.num_edges:,}",
        f"{int(recip.sum()) // 2:,}",
        f"{apart:,}",
        *(f"{c:,}" for c in (*counts["valid"], *counts["test"])),
    )
