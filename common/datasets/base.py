"""The one object every loader returns: training graph, features, splits and protocol negatives."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace

import numpy as np

from common.graph import DiGraph, Graph

SPLITS = ("train", "valid", "test")
# Evaluation protocols. The negatives array shape says how they are used:
#   (Q, 2)    shared negatives, every positive is ranked against all of them;
#   (P, K, 2) per-positive negatives, row i belongs to positive i.
# "pairs": the user's labelled pairs (--eval-pairs, common/datasets/pairs.py), shared negatives.
# "reverse": a directed dataset's positives u -> v whose reverse is no edge, each against v -> u (one per-positive
# negative; common/datasets/directed.py); its metric is reverse accuracy.
# "kg": a typed graph's (knowledge graph's) triples, each against its own filtered corruptions of head and tail
# (common/datasets/kg.py; (P, K, 2) negatives, -1 pads a row that has fewer); its relation is the positive's.
PROTOCOLS = ("original", "heart", "ogb", "pairs", "reverse", "kg")
# --fill-features: how nodes without a row in a --node-features file are filled (common/datasets/node_features.py)
FILL_CHOICES = ("zero", "mean")


class DatasetError(ValueError):
    """Bad dataset input; the message names the file or field and the fix."""


@dataclass
class Split:
    pos: np.ndarray  # (P, 2) int64
    neg: dict[str, np.ndarray] = field(default_factory=dict)  # protocol -> negatives
    # protocol -> its own positives where they are not `pos` (the user's labelled links under "pairs")
    protocol_pos: dict[str, np.ndarray] = field(default_factory=dict)

    def negatives(self, protocol: str) -> np.ndarray:
        if protocol not in self.neg:
            have = ", ".join(sorted(self.neg)) or "none"
            raise DatasetError(f"protocol '{protocol}' has no negatives here (available: {have})")
        return self.neg[protocol]

    def positives(self, protocol: str) -> np.ndarray:
        """The positives ranked under `protocol`: the split's own, unless the protocol brings its own."""
        return self.protocol_pos.get(protocol, self.pos)


@dataclass
class Relations:
    """A typed graph's relation types (common/datasets/kg.py): `names` in id order (sorted, so ids are stable), and
    `pos[split]` (P,) the relation id of each positive of splits[split].pos (a pair may repeat with another
    relation). The eval protocol "kg" keeps each positive's relation for its corruptions."""

    names: tuple[str, ...]
    pos: dict[str, np.ndarray]
    # node kinds (common/datasets/kinds.py: --nodes with a type column, a user-item file's users and items):
    # relation -> (its allowed heads, allowed tails), and the ends training corrupts (0 head, 2 tail); None: any
    # entity, both ends
    ends: dict[int, tuple[np.ndarray, np.ndarray]] | None = None
    sides: tuple[int, ...] = (0, 2)
    kinds: object | None = None  # the common.datasets.kinds.NodeKinds `ends` come from (not hashed: `ends` are)

    @property
    def count(self) -> int:
        return len(self.names)

    def triples(self, split: str, pairs: np.ndarray) -> np.ndarray:
        """(P, 3) [head, relation, tail] of `split`'s positives `pairs`."""
        return np.stack([pairs[:, 0], self.pos[split], pairs[:, 1]], axis=1).astype(np.int64)


@dataclass
class LinkDataset:
    """A link-prediction dataset in canonical form.

    graph: the training graph (train positives, undirected, no self-loops) used for sampling
           and heuristics of train and valid candidates.
    test_graph: the graph test candidates are sampled/scored on (ogbl-collab: train + valid);
           None means `graph`.
    metric: model-selection metric per protocol, e.g. {"original": "mrr", "ogb": "hits@50"}.
    node_ids: the user's id of every node (sorted; int64, uint64 or str objects) when the file's ids were
           mapped to 0..N-1 (edge lists); None where the ids are the dataset's own 0-based ones.
    own:   given by path (an edge-list file, a HeaRT folder): the user's graph, never a paper dataset, whatever
           its file is called (presets and the paper's numbers go by dataset name, so they check this first).
    split_info: how the split was made when it is not the usual one: {"kind": "temporal", ...} for a split by
           an edge list's time column (common/datasets/temporal.py); None otherwise.
    weights: an edge list's `weight` column summed per pair, aligned with the CSR `indices` of the graph each
           split is scored on: {"train": (2E,), "test": (2E',)} ("test" only with a test_graph); None without one.
    train_negatives: the user's known non-links (--train-negatives), (K, 2) (min, max), part of every training
           view (preprocess/candidates.py); None without them.
    valid_pool: the selection pool's counts (--valid-pool, common/datasets/pool.py); None without one.
    out_graphs: a directed dataset's (--directed) ordered edges, {"train": DiGraph[, "test": DiGraph]} beside
           graph / test_graph (which hold their undirected union, what the sampler reads); None when undirected.
    activity: a temporal split's recent activity per evaluated split, {"valid": (N,), "test": (N,)}: each node's
           edge rows in the recent window before the split's boundary (common/heuristics_temporal.py, the rpa
           heuristic); None for other splits.
    recency: a temporal split's decayed activity per evaluated split, {"valid": (F, N), "test": (F, N)}: each
           node's edge rows before the boundary weighted exp(-age / tau) for F taus (common/heuristics_temporal.py,
           a typed graph's recent popularity); None without a time.
    edge_times: a temporal split's clock per shipped graph, {"train": (times, end), "test": (times, end)}: each
           edge's first time aligned with that graph's CSR `indices`, and the boundary the graph ends at (the
           valid boundary for "train", the test boundary for "test"); the model's time input reads them
           (trainer/data/clock.py). None without a time.
    feature_kinds: a typed graph's node features given one table per node kind: {kind: its columns (start,
           stop)} (common/datasets/typed_features.py); None otherwise.
    """

    name: str
    graph: Graph
    splits: dict[str, Split]
    test_graph: Graph | None = None
    metric: dict[str, str] = field(default_factory=dict)
    node_ids: np.ndarray | None = None
    own: bool = False
    split_info: dict | None = None
    weights: dict[str, np.ndarray] | None = None
    train_negatives: np.ndarray | None = None
    # --valid-pool (common/datasets/pool.py): {"protocol", "negatives": the protocol's own, "pool": the extra ones
    # after them, "rank_at": test's count, at which validation's ranks are estimated}; None without a pool
    valid_pool: dict | None = None
    activity: dict[str, np.ndarray] | None = None
    recency: dict[str, np.ndarray] | None = None
    edge_times: dict[str, tuple[np.ndarray, float]] | None = None
    feature_kinds: dict[str, tuple[int, int]] | None = None
    out_graphs: dict[str, DiGraph] | None = None
    relations: Relations | None = None  # a typed graph's relation types (knowledge graph); None: untyped

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def x(self) -> np.ndarray | None:
        return self.graph.x

    @property
    def protocols(self) -> list[str]:
        found = set()
        for name in ("valid", "test"):
            if name in self.splits:
                found.update(self.splits[name].neg)
        return [p for p in PROTOCOLS if p in found]

    def graph_for(self, split: str) -> Graph:
        """Graph on which candidates of `split` are sampled and scored."""
        if split == "test" and self.test_graph is not None:
            return self.test_graph
        return self.graph

    @property
    def temporal(self) -> bool:
        return bool(self.split_info and self.split_info.get("kind") == "temporal")

    @property
    def typed(self) -> bool:
        return self.relations is not None

    @property
    def directed(self) -> bool:
        return self.out_graphs is not None

    def out_graph_for(self, split: str) -> DiGraph | None:
        """The ordered edges of graph_for(split), or None for an undirected dataset."""
        if self.out_graphs is None:
            return None
        return self.out_graphs["test" if split == "test" and self.test_graph is not None else "train"]

    def pair_graph(self, split: str) -> Graph | DiGraph:
        """What says whether a pair is an edge for `split`'s candidates: the ordered edges when directed (u -> v
        only), else the graph (either way round)."""
        return self.out_graph_for(split) if self.directed else self.graph_for(split)

    def weight_for(self, split: str) -> np.ndarray | None:
        """Edge weights aligned with graph_for(split).indices, or None for an unweighted graph."""
        if self.weights is None:
            return None
        return self.weights["test" if split == "test" and self.test_graph is not None else "train"]

    def activity_for(self, split: str) -> np.ndarray | None:
        """Each node's recent activity before `split`'s boundary (the rpa heuristic), or None without a time."""
        return None if self.activity is None else self.activity.get(split)

    def active_nodes(self, split: str) -> np.ndarray | None:
        """Nodes that exist when `split`'s pairs are asked (negatives are drawn among them), or None for every
        node. Under a temporal split a node exists once it has appeared in an edge before the split's
        boundary: a node of graph_for(split) with a neighbour (training views: split "train")."""
        if not self.temporal:
            return None
        return np.flatnonzero(self.graph_for(split).degree > 0)

    def without_test(self) -> "LinkDataset":
        """The dataset as selection may see it: the training graph and validation, no test split nor test graph."""
        weights = None if self.weights is None else {"train": self.weights["train"]}
        activity = None if self.activity is None else {k: v for k, v in self.activity.items() if k != "test"}
        recency = None if self.recency is None else {k: v for k, v in self.recency.items() if k != "test"}
        times = None if self.edge_times is None else {"train": self.edge_times["train"]}
        out_graphs = None if self.out_graphs is None else {"train": self.out_graphs["train"]}
        rel = self.relations
        rel = None if rel is None else replace(rel, pos={k: v for k, v in rel.pos.items() if k != "test"})
        return replace(
            self,
            splits={k: v for k, v in self.splits.items() if k != "test"},
            test_graph=None,
            out_graphs=out_graphs,
            relations=rel,
            weights=weights,
            activity=activity,
            recency=recency,
            edge_times=times,
        )

    def with_features(self, x: np.ndarray, kinds: dict | None = None) -> "LinkDataset":
        """The dataset with node-feature table `x` on its graphs (the fingerprint hashes it there) and, for a typed
        graph's table per node kind, each kind's columns (`feature_kinds`)."""
        test = self.test_graph
        return replace(
            self,
            graph=replace(self.graph, x=x),
            test_graph=None if test is None else replace(test, x=x),
            feature_kinds=None if kinds is None else {k: tuple(v) for k, v in kinds.items()},
        )

    def selection_metric(self, protocol: str) -> str:
        return self.metric.get(protocol, "mrr")

    def fingerprint(self) -> str:
        """Content hash of everything a cache key depends on (graph, features, splits)."""
        h = hashlib.sha256(self.name.encode())
        h.update(self.graph.fingerprint().encode())
        if self.test_graph is not None:
            h.update(self.test_graph.fingerprint().encode())
        for name in sorted(self.splits):
            split = self.splits[name]
            h.update(name.encode())
            h.update(np.ascontiguousarray(split.pos, dtype=np.int64))  # the buffer itself: no bytes copy
            for proto in sorted(split.neg):
                h.update(proto.encode())
                h.update(np.ascontiguousarray(split.neg[proto], dtype=np.int64))
            for proto in sorted(split.protocol_pos):  # none for every dataset built before --eval-pairs
                h.update(f"pos:{proto}".encode())
                h.update(np.ascontiguousarray(split.protocol_pos[proto], dtype=np.int64))
        if self.node_ids is not None:  # only then, so datasets without a mapping keep their cache keys
            h.update(b"node_ids")
            h.update(node_ids_digest(self.node_ids).encode())
        # Each of these only when present, for the same reason.
        if self.split_info is not None:
            h.update(json.dumps(self.split_info, sort_keys=True).encode())
        for which in sorted(self.weights or {}):
            h.update(f"weights:{which}".encode())
            h.update(np.ascontiguousarray(self.weights[which], dtype=np.float64))
        for which in sorted(self.edge_times or {}):  # a temporal split's clock, which the set ships
            times, end = self.edge_times[which]
            h.update(f"times:{which}:{end!r}".encode())
            h.update(np.ascontiguousarray(times, dtype=np.float64))
        if self.directed:  # the splits hold ordered pairs; marked only then, so undirected keys stay
            h.update(b"directed")
        if self.relations is not None:  # only then, so untyped keys stay
            h.update(("relations:" + "\0".join(self.relations.names)).encode())
            for name in sorted(self.relations.pos):
                h.update(np.ascontiguousarray(self.relations.pos[name], dtype=np.int64))
            for r, ends in sorted((self.relations.ends or {}).items()):  # node kinds: only then, keys stay
                h.update(f"ends:{r}:{self.relations.sides}".encode())
                for e in ends:
                    h.update(np.ascontiguousarray(e, dtype=np.int64))
        if self.train_negatives is not None:
            h.update(b"train_negatives")
            h.update(np.ascontiguousarray(self.train_negatives, dtype=np.int64))
        return h.hexdigest()[:16]

    def summary(self) -> str:
        parts = [f"{self.name}: {self.num_nodes} nodes, {self.graph.num_edges} training edges"]
        if self.temporal:
            parts.append(f"temporal split by column {self.split_info['column']}")
        for name in SPLITS:
            if name in self.splits:
                s = self.splits[name]
                negs = ", ".join(f"{p} {tuple(a.shape)}" for p, a in s.neg.items())
                parts.append(f"{name}: {len(s.pos)} pos" + (f" (neg: {negs})" if negs else ""))
        return "; ".join(parts)


def node_ids_digest(node_ids: np.ndarray) -> str:
    """Content hash of a node-id mapping (numbers by their bytes, names by their UTF-8 text)."""
    h = hashlib.sha256(str(node_ids.dtype).encode())
    if node_ids.dtype == object:
        for chunk in range(0, len(node_ids), 1 << 16):
            h.update("\0".join(node_ids[chunk : chunk + (1 << 16)]).encode() + b"\0")
    else:
        h.update(np.ascontiguousarray(node_ids).tobytes())
    return h.hexdigest()


def check_pairs(arr, num_nodes: int, where: str) -> np.ndarray:
    """Validate node-pair arrays (..., 2) against the node count; return int64."""
    a = np.asarray(arr)
    if a.ndim < 2 or a.shape[-1] != 2:
        raise DatasetError(f"{where}: expected pairs of shape (..., 2), got {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        if np.issubdtype(a.dtype, np.floating) and np.all(a == np.round(a)):
            a = a.astype(np.int64)
        else:
            raise DatasetError(f"{where}: node ids must be integers, got dtype {a.dtype}")
    a = a.astype(np.int64, copy=False)
    if a.size and (a.min() < 0 or a.max() >= num_nodes):
        bad = int(a.min()) if a.min() < 0 else int(a.max())
        raise DatasetError(f"{where}: node id {bad} is outside [0, {num_nodes}); check the file or the node count")
    return a


def training_graph(train_pos: np.ndarray, num_nodes: int, x=None) -> Graph:
    """Train positives -> undirected, deduplicated training graph without self-loops."""
    return Graph.from_edges(train_pos, num_nodes=num_nodes, x=x)
