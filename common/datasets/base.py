"""The one object every loader returns: training graph, features, splits and protocol negatives."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

import numpy as np

from common.graph import Graph

SPLITS = ("train", "valid", "test")
# Evaluation protocols. The negatives array shape says how they are used:
#   (Q, 2)    shared negatives, every positive is ranked against all of them;
#   (P, K, 2) per-positive negatives, row i belongs to positive i.
PROTOCOLS = ("original", "heart", "ogb")


class DatasetError(ValueError):
    """Bad dataset input; the message names the file or field and the fix."""


@dataclass
class Split:
    pos: np.ndarray  # (P, 2) int64
    neg: dict[str, np.ndarray] = field(default_factory=dict)  # protocol -> negatives

    def negatives(self, protocol: str) -> np.ndarray:
        if protocol not in self.neg:
            have = ", ".join(sorted(self.neg)) or "none"
            raise DatasetError(f"protocol '{protocol}' has no negatives here (available: {have})")
        return self.neg[protocol]


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
    """

    name: str
    graph: Graph
    splits: dict[str, Split]
    test_graph: Graph | None = None
    metric: dict[str, str] = field(default_factory=dict)
    node_ids: np.ndarray | None = None
    own: bool = False

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

    def without_test(self) -> "LinkDataset":
        """The dataset as selection may see it: the training graph and validation, no test split nor test graph."""
        return replace(self, splits={k: v for k, v in self.splits.items() if k != "test"}, test_graph=None)

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
        if self.node_ids is not None:  # only then, so datasets without a mapping keep their cache keys
            h.update(b"node_ids")
            h.update(node_ids_digest(self.node_ids).encode())
        return h.hexdigest()[:16]

    def summary(self) -> str:
        parts = [f"{self.name}: {self.num_nodes} nodes, {self.graph.num_edges} training edges"]
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
            h.update("\0".join(node_ids[chunk:chunk + (1 << 16)]).encode() + b"\0")
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
