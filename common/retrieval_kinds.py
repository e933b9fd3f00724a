"""Which nodes a retrieval pool may hold (common/retrieval.py): node kinds, a bipartite graph's sides as their
two-kind case, the candidates a split allows, and the links never proposed again."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.graph import Graph


class RetrievalError(ValueError):
    """Bad retrieval input; the message names the flag or value and the fix."""


@dataclass(frozen=True, eq=False)
class Kinds:
    """Node kinds in retrieval: `of` (N,) each node's kind, `to` (K, K) bool: a query of kind a may be proposed the
    nodes of kind b where to[a, b]. A query whose own kind is not proposed is retrieved by paths of 3 hops
    (common/retrieval.py). A bipartite graph's two sides are the two-kind case (`sides`), a typed run's relation
    one kind proposed to every query (`toward`)."""

    of: np.ndarray
    to: np.ndarray

    @classmethod
    def sides(cls, side) -> "Kinds":
        """--bipartite: `side` True (the src kind) is kind 0, False kind 1, each proposed the other."""
        return cls(np.where(np.asarray(side, dtype=bool), 0, 1).astype(np.int32), ~np.eye(2, dtype=bool))

    @classmethod
    def toward(cls, of, count: int, kind: int) -> "Kinds":
        """Only nodes of `kind` (one of `count` kinds) proposed, whatever the query's kind."""
        to = np.zeros((count, count), dtype=bool)
        to[:, kind] = True
        return cls(np.asarray(of, dtype=np.int32), to)

    def allows(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self.to[self.of[u], self.of[v]]

    def crosses(self, queries: np.ndarray) -> np.ndarray:
        """(Q,) bool: the query's own kind is not proposed to it (its 2-hop nodes would mostly be of that kind)."""
        k = self.of[queries]
        return ~self.to[k, k]


@dataclass(frozen=True)
class Allowed:
    """Which nodes a query's pool may hold: `side`, one flag per node (a bipartite graph's other side is proposed:
    the two-kind case of `kinds`), `kinds` (Kinds: which kinds each query's kind is proposed), and `candidates`, the
    node ids that may be proposed (None: every node)."""

    side: np.ndarray | None = None
    candidates: np.ndarray | None = None
    # the links that may not be proposed, query -> candidate, as an object with has_edge(u, v) (a directed run's
    # out-edges, or in-edges for in-links: common.graph.DiGraph); None: the retrieval graph's own edges
    known: object | None = None
    kinds: Kinds | None = None

    def rule(self) -> Kinds | None:
        """The node kinds every pool keeps to: `kinds`, or the bipartite sides as two kinds (None: any kind)."""
        if self.side is not None and self.kinds is not None:
            raise RetrievalError("side and kinds: the sides of a bipartite graph are two kinds; give one of them")
        return as_kinds(self.side) if self.kinds is None else self.kinds


EVERY_NODE = Allowed()  # no restriction: every node may be proposed


def as_kinds(side) -> Kinds | None:
    """A bipartite graph's side flags (or Kinds already, or None) as Kinds: one rule for both."""
    return side if side is None or isinstance(side, Kinds) else Kinds.sides(side)


def allowed_mask(
    graph: Graph, queries: np.ndarray, row: np.ndarray, col: np.ndarray, kinds, candidates=None, known=None
) -> np.ndarray:
    """Mask of entries (queries[row], col) that may be proposed: not the query, not a neighbour (an edge of `known`),
    of a kind the query's kind is proposed (`kinds`: Kinds, or a bipartite graph's side flags), among `candidates`
    when given, and a positive score (checked by the caller)."""
    u = queries[row]
    ok = (col != u) & ~(graph if known is None else known).has_edge(u, col)
    if (kinds := as_kinds(kinds)) is not None:
        ok &= kinds.allows(u, col)
    if candidates is not None:
        ok &= candidates[col]
    return ok
