"""Which relation a typed run recommends, for recommend and serve (docs/own-graph.md, relation types).

A typed run (a set of head-relation-tail triples) scores a candidate as a triple: a recommendation is one relation's
missing tails of a query head (`--relation R`; with `--direction in`, its missing heads of a query tail). The
triples a run knows come from its set's manifest (the dataset pipelines.core.runs.run_dataset rebuilds): `--graph
all` (the default) holds every split's triples, a split's name the training triples (every split of a typed set is
sampled on them); an edge-list snapshot is not read for a typed run yet. A triple of relation R that exists is never
proposed; a pair linked by another relation is.
"""

from __future__ import annotations

import numpy as np

from common import snapshot
from common.datasets.kg import triples_csr
from common.graph import DiGraph
from common.retrieval_kinds import Kinds


class RelationError(ValueError):
    """A relation the run cannot give; the message names the flag and the fix."""


def add_relation_flag(p) -> None:
    """--relation, of recommend: one definition."""
    p.add_argument("--relation", default=None, help="a typed run: this relation's missing tails")


def resolve_relation(asked: str | None, names: tuple, where: str, flag: str = "--relation") -> int | None:
    """The relation id to recommend: None for an untyped run (a relation asked of one is refused); a typed run needs
    one of its relations (`names`, in id order)."""
    if not names:
        if asked is not None:
            raise RelationError(
                f"{flag} {asked}: {where} is untyped (its links have no relation); drop {flag}, or build the set from "
                "triples (a head/relation/tail folder, or an edge list with --relation COLUMN)"
            )
        return None
    if asked is None:
        raise RelationError(f"{flag}: {where} is typed; recommend one relation at a time, one of {', '.join(names)}")
    if asked not in names:
        raise RelationError(f"{flag} {asked}: unknown relation; {where} knows {', '.join(names)}")
    return names.index(asked)


def run_triples(dataset, spec: str) -> np.ndarray:
    """(T, 3) [head, relation, tail] of `--graph spec` for a typed run's dataset: every split's for `all`, the
    triples of a split's graph for its name (what its candidates are sampled on: the training triples, and the
    valid ones too for test where the set has a test graph)."""
    rel = dataset.relations
    if spec == snapshot.WHOLE:  # a triple held in two splits counts once
        return np.unique(np.concatenate([rel.triples(s, dataset.splits[s].pos) for s in snapshot.SPLIT_NAMES]), axis=0)
    if spec in snapshot.SPLIT_NAMES:  # a test graph of its own (a user-item file's) holds the valid triples too
        parts = ("train", "valid") if spec == "test" and dataset.test_graph is not None else ("train",)
        return np.concatenate([rel.triples(s, dataset.splits[s].pos) for s in parts])
    raise RelationError(f"--graph {spec}: a typed run recommends on its own triples for now; pass --graph all or train")


def typed_inputs(triples: np.ndarray, num_nodes: int, relations: int) -> tuple:
    """What the scoring engine takes for a typed run (trainer.scoring.PairSampler): (triple CSR, relation count)."""
    return triples_csr(triples, num_nodes), relations


def relation_links(triples: np.ndarray, relation: int, num_nodes: int) -> DiGraph:
    """The triples of one relation as head -> tail links: the ones a recommendation of that relation never repeats
    (pipelines.recommend.direction.known_links turns them for in-links)."""
    t = triples[triples[:, 1] == relation]
    return DiGraph.from_edges(np.ascontiguousarray(t[:, [0, 2]]), num_nodes)


def relation_rows(relation: int | None, count: int) -> np.ndarray | None:
    """Each scored pair's relation (a typed run's), None for an untyped run."""
    return None if relation is None else np.full(count, relation, dtype=np.int64)


def relation_kind(relations, relation: int | None, direction: str | None) -> np.ndarray | None:
    """The entities a recommendation of `relation` may propose where the set knows its node kinds
    (common.datasets.base.Relations.ends: a user-item file's items for its users): its tails, or its heads for
    in-links; None where any entity may be."""
    ends = getattr(relations, "ends", None) or {}
    if relation is None or relation not in ends:
        return None
    heads, tails = ends[relation]
    return np.asarray(heads if direction == "in" else tails, dtype=np.int64)


def relation_kinds(relations, relation: int | None, direction: str | None) -> Kinds | None:
    """Retrieval's node kinds (common.retrieval_kinds.Kinds) for a recommendation of `relation` where the set knows
    the kinds its relations join (Relations.kinds): its tail kind proposed (its head kind for in-links) to every
    query, so a query of another kind is retrieved across kinds as a bipartite graph's are; None where any entity
    may be (no kinds, or a relation without training triples)."""
    kinds = getattr(relations, "kinds", None)
    end = relation_kind(relations, relation, direction)
    if kinds is None or end is None or len(np.unique(kinds.of[end])) != 1:
        return None
    return Kinds.toward(kinds.of, len(kinds.names), int(kinds.of[end[0]]))


def among(candidates: np.ndarray | None, kind: np.ndarray | None) -> np.ndarray | None:
    """Both restrictions on the proposed nodes (None: no restriction)."""
    if candidates is None or kind is None:
        return kind if candidates is None else candidates
    return np.intersect1d(candidates, kind)
