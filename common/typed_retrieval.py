"""Candidate retrieval for one relation of a typed graph (a knowledge graph): the pool of (anchor, r, ?) queries.

The graph's own retriever (common.retrieval: RA, AA, PPR or their mix) ranks entities near the anchor on the
undirected union of every relation, ignoring the types; `allowed.known` then leaves out only the links the anchor
already has in relation r (a neighbour by another relation, or by r the other way, stays a candidate: WN18RR's
derivationally related forms come in reverse pairs).

With `ends` (frequent_ends: the entities that are relation r's tails, or heads, in training, most frequent first),
each pool is the reciprocal-rank fusion (common.retrieval's mix rule, RRF_K = 60) of the graph pool and the first
allowed entries of that list: a relation whose tails concentrate on a few entities (WordNet's hypernyms) reaches
them from any anchor. Short pools are topped up by popularity, as the graph's retriever does.
"""

from __future__ import annotations

import numpy as np

from common.graph import Graph
from common.retrieval import (
    EVERY_NODE,
    Allowed,
    Pool,
    _allowed,
    _fill_from,
    _fuse,
    fill_by_popularity,
    neighbour_entries,
    retrieve,
    top_per_row,
)


def frequent_ends(triples: np.ndarray, relation: int, end: int, num_nodes: int) -> np.ndarray:
    """The entities at column `end` (0: heads, 2: tails) of relation `relation`'s triples (T, 3), most frequent
    first, ties by smaller id; entities never there are left out."""
    t = np.asarray(triples, dtype=np.int64)
    count = np.bincount(t[t[:, 1] == relation, end], minlength=num_nodes)
    seen = np.flatnonzero(count)
    return seen[np.lexsort((seen, -count[seen]))]


def typed_retrieve(
    graph: Graph,
    queries,
    method: str,
    pool: int,
    *,
    allowed: Allowed = EVERY_NODE,
    ends: np.ndarray | None = None,
    neighbours: bool = False,
) -> Pool:
    """Top-`pool` candidates of each query (anchor) entity: `method`'s graph pool, fused with `ends` when given
    (module docstring), after the anchor's own neighbours with `neighbours`, topped up by popularity. `allowed`: as
    common.retrieval.retrieve."""
    base = retrieve(graph, queries, method, pool, allowed=allowed)
    mask = None
    if allowed.candidates is not None:
        mask = np.zeros(graph.num_nodes, dtype=bool)
        mask[np.asarray(allowed.candidates, dtype=np.int64)] = True
    if ends is not None and len(base.queries):
        listed = np.asarray(ends, dtype=np.int64)
        listed = listed if mask is None else listed[mask[listed]]
        top = Pool(
            base.queries, np.full(base.cand.shape, -1, np.int64), np.full(base.cand.shape, -np.inf), 0 * base.count
        )
        rows = np.arange(len(base.queries))
        spans = (np.zeros(len(rows), np.int64), np.full(len(rows), len(listed), np.int64))
        _fill_from(graph, top, rows, listed, spans, allowed.side, mask, allowed.known)
        fused = _fuse([(base.cand, base.score, base.count), (top.cand, top.score, top.count)], len(rows), pool)
        base = Pool(base.queries, *fused)
    if neighbours:
        base = neighbours_first(graph, base, allowed, mask)
    return fill_by_popularity(graph, base, allowed.side, mask, allowed.known)


def neighbours_first(graph: Graph, base: Pool, allowed: Allowed, mask) -> Pool:
    """The anchor's allowed neighbours (linked by another relation, or by r the other way), most connected first,
    then `base`'s entries in their order, cut to the pool size; an entry in both counts once, as a neighbour."""
    row, col = neighbour_entries(graph, base.queries)
    ok = _allowed(graph, base.queries, row, col, allowed.side, mask, allowed.known)
    r0, k0 = np.nonzero(base.cand >= 0)
    rows = np.concatenate([row[ok], r0])
    cols = np.concatenate([col[ok], base.cand[r0, k0]])
    vals = np.concatenate([2.0 + graph.degree[col[ok]], 1.0 / (1.0 + k0)])  # a neighbour above every pool entry
    order = np.lexsort((-vals, cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    first = np.ones(len(rows), dtype=bool)
    first[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
    return Pool(
        base.queries, *top_per_row(rows[first], cols[first], vals[first], len(base.queries), base.cand.shape[1])
    )


__all__ = ["frequent_ends", "typed_retrieve", "neighbours_first"]
