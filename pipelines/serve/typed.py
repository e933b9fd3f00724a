"""A typed run's serving graph (relation types, docs/own-graph.md): its triples, edits that carry a relation, and
the query parameter `relation`.

An edit of a typed service names triples [head, tail, relation] (the relation by name, one the run knows) in
"add" and "remove"; an untyped service's pairs [u, v] are unchanged. The triples are what the model reads and what
a recommendation of relation R never repeats; their head -> tail links are the directed graph, and the union of
those the graph the sampler walks (a pair leaves it only when no triple joins it either way).
"""

from __future__ import annotations

import hashlib

import numpy as np

from common.graph import DiGraph
from common.retrieval_kinds import Kinds
from pipelines.recommend.relation import run_triples, typed_inputs


class TypedEdges:
    """The triples (T, 3) [head, relation, tail] of a typed serving graph and its relation names, in id order."""

    def __init__(self, triples: np.ndarray, names: tuple, ends: dict | None = None, kinds=None):
        self.triples, self.names = np.asarray(triples, dtype=np.int64).reshape(-1, 3), tuple(names)
        # node kinds (common.datasets.base.Relations.ends): relation -> (its heads, its tails), sorted; a node an
        # edit adds as a head or tail of such a relation joins that kind
        sort = lambda e: np.unique(np.asarray(e, dtype=np.int64))  # noqa: E731
        self.ends = {int(r): (sort(heads), sort(tails)) for r, (heads, tails) in (ends or {}).items()}
        # the kinds they come from (common.datasets.kinds.NodeKinds): each node's, and each relation's (head, tail)
        # kinds, so that retrieval crosses kinds as recommend's does; a node an edit creates takes its triple's
        self.kind_of = None if kinds is None else np.asarray(kinds.of, dtype=np.int32)
        self.kind_count, self.pairs = (0 if kinds is None else len(kinds.names)), {}
        # each kind its own id space (a user-item file): an id names the node of the kind a triple's end asks for
        self.own_ids = bool(getattr(kinds, "own_ids", False))
        for r, (heads, tails) in self.ends.items() if kinds is not None else ():
            h, t = np.unique(self.kind_of[heads]), np.unique(self.kind_of[tails])
            if len(h) == 1 and len(t) == 1:
                self.pairs[r] = (int(h[0]), int(t[0]))

    @classmethod
    def of(cls, dataset, spec: str) -> "TypedEdges | None":
        """The triples of `--graph spec` of a typed run's dataset (pipelines.recommend.relation.run_triples)."""
        if getattr(dataset, "relations", None) is None:
            return None
        rel = dataset.relations
        return cls(run_triples(dataset, spec), rel.names, rel.ends, rel.kinds)

    def fingerprint(self) -> str:
        """What an edit log's header checks the service's starting triples by."""
        return hashlib.sha256(np.ascontiguousarray(self.triples).tobytes()).hexdigest()[:16]

    def relation(self, name, where: str, error) -> int:
        """A relation's id by name; an unknown one is error(400, ...) naming `where` and the known relations."""
        if not isinstance(name, str) or name not in self.names:
            raise error(400, f"{where}: unknown relation {name!r}; the run knows {', '.join(self.names)}")
        return self.names.index(name)

    def kind_problem(self, head: int | None, tail: int | None, relation: int) -> str | None:
        """Why a new triple joins nodes of kinds its relation does not (a user-item graph's item as a head), or
        None; `head`/`tail` None: a node the edit creates (it takes the relation's kind)."""
        if relation not in self.ends:
            return None
        for node, end, what in ((head, 0, "head"), (tail, 1, "tail")):
            if node is not None and not np.isin(node, self.ends[relation][end]):
                return (
                    f"its {what} is of another node kind than relation {self.names[relation]!r} takes as {what}s; "
                    "swap head and tail, or use another relation"
                )
        return None

    def candidates(self, relation: int, direction: str | None) -> np.ndarray | None:
        """The nodes a recommendation of `relation` may propose: its tails (heads for in-links) where the graph
        has node kinds, else None (any node)."""
        if relation not in self.ends:
            return None
        return self.ends[relation][0 if direction == "in" else 1]

    def retrieval_kinds(self, relation: int, direction: str | None, num_nodes: int) -> Kinds | None:
        """Retrieval's node kinds for a recommendation of `relation` (pipelines.recommend.relation.relation_kinds):
        its tail kind (head kind for in-links) proposed to every query; None without kinds. A node of no known
        kind (an extra kind id) is never proposed."""
        if relation not in self.pairs:
            return None
        of = np.full(num_nodes, self.kind_count, dtype=np.int32)
        of[: len(self.kind_of)] = self.kind_of[:num_nodes]
        return Kinds.toward(of, self.kind_count + 1, self.pairs[relation][0 if direction == "in" else 1])

    def end_kind(self, relation: int, end: int) -> int | None:
        """The kind id of end 0 (head) or 1 (tail) of a relation joining one kind to one kind, else None."""
        ends = self.pairs.get(relation)
        return None if ends is None else ends[end]

    def key(self, a: int, b: int, name: str) -> tuple:
        return (a, self.names.index(name), b)

    def edit(self, final: dict, num_nodes: int) -> tuple[DiGraph, np.ndarray, np.ndarray]:
        """Apply {(head, relation, tail): present} to the triples; return the new directed graph and the union's
        (add, remove) pairs: a pair leaves the union only when no triple joins it either way afterwards."""
        add = np.array([k for k, on in final.items() if on], dtype=np.int64).reshape(-1, 3)
        remove = np.array([k for k, on in final.items() if not on], dtype=np.int64).reshape(-1, 3)
        t, base = self.triples, max(num_nodes, 1)
        r = max(len(self.names), 1)
        code = lambda x: (x[:, 0] * r + x[:, 1]) * base + x[:, 2]  # noqa: E731
        if len(remove):
            t = t[~np.isin(code(t), code(remove))]
        t = np.concatenate([t, add])
        self.triples = t[np.unique(code(t), return_index=True)[1]] if len(t) else t
        for r, (heads, tails) in list(self.ends.items()):  # an added node takes its relation's kind
            mine = add[add[:, 1] == r]
            self.ends[r] = (np.union1d(heads, mine[:, 0]), np.union1d(tails, mine[:, 2]))
        self._new_kinds(add, num_nodes)
        digraph = DiGraph.from_edges(self.triples[:, [0, 2]], num_nodes)
        gone = remove[:, [0, 2]]
        gone = gone[~digraph.has_edge(gone[:, 0], gone[:, 1]) & ~digraph.has_edge(gone[:, 1], gone[:, 0])]
        return digraph, add[:, [0, 2]], gone

    def _new_kinds(self, add: np.ndarray, num_nodes: int) -> None:
        """The nodes the added triples create take their relation's head and tail kinds (no kind: the extra id)."""
        if self.kind_of is None or num_nodes <= len(self.kind_of):
            return
        old = len(self.kind_of)
        self.kind_of = np.concatenate([self.kind_of, np.full(num_nodes - old, self.kind_count, np.int32)])
        for r, (h, t) in self.pairs.items():
            mine = add[add[:, 1] == r]
            for col, kind in ((0, h), (2, t)):
                new = mine[mine[:, col] >= old, col]
                self.kind_of[new] = kind

    def scoring(self, num_nodes: int) -> tuple:
        """What the scoring engine takes (pipelines.recommend.relation.typed_inputs)."""
        return typed_inputs(self.triples, num_nodes, len(self.names))


def relation_param(params, typed: TypedEdges | None, error) -> int | None:
    """?relation=R: required of a typed service (a recommendation is one relation's), refused by an untyped one."""
    raw = params.get("relation")
    if typed is None:
        if raw is not None:
            raise error(400, f"relation={raw!r}: this service's run is untyped (its links have no relation)")
        return None
    if raw is None:
        names = ", ".join(typed.names)
        raise error(400, f"a typed run recommends one relation at a time: add ?relation= one of {names}")
    return typed.relation(raw, f"relation={raw!r}", error)


def kind_columns(dataset) -> dict[int, tuple[int, int]] | None:
    """A typed run's feature columns per node kind id (LinkDataset.feature_kinds by name), or None."""
    spans, rel = getattr(dataset, "feature_kinds", None), getattr(dataset, "relations", None)
    if spans is None or rel is None or rel.kinds is None:
        return None
    return {rel.kinds.names.index(k): tuple(v) for k, v in spans.items() if k in rel.kinds.names}
