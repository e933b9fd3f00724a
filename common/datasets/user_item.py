"""A user-item interaction file (two id spaces: user 1 and item 1 are different nodes) -> one node space with a
kind per node, and its temporal split.

Nodes: the users first, then the items, each kind's ids kept as the text the file holds (leading zeros matter)
and sorted by their UTF-8 bytes, so the mapping depends only on the sets of ids. The split is the edge list's
temporal split (common/datasets/temporal.py): a user-item pair (u, i) is a pair (min, max) there, and since every
user node precedes every item node it stays (user, item).

Read by PENCIL (`load_user_item`, chosen for an edge-list file whose header names `user` and `item` columns and no
`src`/`dst`): a typed graph of one relation user -> item whose ends are node kinds, so that every candidate joins a
user to an item. Training corrupts the item among the items; valid and test rank each pair against `item_negatives`,
the 100 filtered items the peers draw (bench/user_item_peers.py), so the numbers compare pair by pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.datasets.base import SPLITS, DatasetError, LinkDataset, Relations
from common.datasets.columns import TimeColumn, parse_time, parse_weight
from common.datasets.fractions import SplitSettings
from common.datasets.tables import read_columns
from common.datasets.temporal import temporal_split
from common.datasets.typed_features import attach_typed_features

KINDS = ("user", "item")
RELATION = "user->item"  # the one relation of a user-item graph
NEGATIVES, SEED = 100, 0  # per valid / test pair, as bench.user_item_peers: the same draw


@dataclass
class UserItemGraph:
    """pairs (M, 2) int64 (user node, item node) in file order; node_ids (N,) the file's id of every node (str);
    kinds (N,) int8, an index into KINDS; time the rows' times; rating the rows' ratings (None without)."""

    name: str
    pairs: np.ndarray
    node_ids: np.ndarray
    kinds: np.ndarray
    time: TimeColumn
    rating: np.ndarray | None

    @property
    def num_nodes(self) -> int:
        return len(self.node_ids)

    def nodes_of(self, kind: str) -> np.ndarray:
        """The node ids (0..N-1) of one kind, ascending."""
        return np.flatnonzero(self.kinds == KINDS.index(kind))


def read_user_item(path, user: str = "user", item: str = "item", time: str = "time") -> UserItemGraph:
    """A CSV/TSV/Parquet file with user, item and time columns (rating optional) -> UserItemGraph."""
    path = Path(path)
    cols = read_columns(
        path, (user, item, time), optional=("rating",), hint=f"{user},{item},{time}[,rating]", rows="ratings"
    ).cols
    texts = {k: np.asarray(cols[k].to_pylist(), dtype=object) for k in (user, item)}
    for k, v in texts.items():
        empty = np.flatnonzero((v == "") | np.equal(v, None))
        if empty.size:
            raise DatasetError(f"{path}: column {k!r} is empty in data row {empty[0] + 1}; every row needs an id")
    users, u_idx = np.unique(texts[user].astype(str), return_inverse=True)
    items, i_idx = np.unique(texts[item].astype(str), return_inverse=True)
    pairs = np.stack([u_idx, len(users) + i_idx], axis=1).astype(np.int64)
    node_ids = np.concatenate([users, items]).astype(object)
    kinds = np.concatenate([np.zeros(len(users), np.int8), np.ones(len(items), np.int8)])
    rating = parse_weight(path, cols["rating"], "rating") if "rating" in cols else None
    return UserItemGraph(path.name, pairs, node_ids, kinds, parse_time(path, cols[time], time), rating)


def user_item_split(g: UserItemGraph, split: SplitSettings | None = None) -> LinkDataset:
    """The temporal split of the interactions (each pair at its first time; 85/5/10 by default), as a
    LinkDataset over the one node space; its node_ids are the file's ids."""
    ds = temporal_split(g.name, g.pairs, g.time, g.num_nodes, split, recency=True)
    ds.node_ids = g.node_ids
    return ds


def is_user_item(path) -> bool:
    """An edge-list file whose header names `user` and `item` columns and neither `src` nor `dst`."""
    from common.datasets.columns import header_names

    # an unreadable file is refused here with the edge list's own hint: most files are edge lists
    names = set(header_names(Path(path)))
    return {"user", "item"} <= names and not {"src", "dst"} & names


def item_negatives(pos, known, g: UserItemGraph, seed: int = SEED, count: int = NEGATIVES) -> np.ndarray:
    """(P, count) items per (user, item) pair: uniform among the items the user has in no pair of `known`, the
    pair's own item excluded, -1 padded (common/datasets/corruptions.py with the kinds; bench.user_item_peers)."""
    from common.datasets.corruptions import filtered_corruptions

    q3 = np.stack([pos[:, 0], np.zeros(len(pos), np.int64), pos[:, 1]], axis=1)
    k3 = np.stack([known[:, 0], np.zeros(len(known), np.int64), known[:, 1]], axis=1)
    return filtered_corruptions(q3, k3, g.num_nodes, count, seed, allowed=user_item_ends(g))[1]


def node_kinds(g: UserItemGraph):
    """Users and items as the node kinds of any typed graph (common/datasets/kinds.py)."""
    from common.datasets.kinds import NodeKinds

    return NodeKinds(KINDS, g.kinds.astype(np.int32), g.node_ids, own_ids=True)


def user_item_ends(g: UserItemGraph) -> dict:
    """Relations.ends of the one relation: users -> items, as the kinds of any typed graph give them."""
    from common.datasets.kinds import relation_ends

    every = np.stack([g.pairs[:, 0], np.zeros(len(g.pairs), np.int64), g.pairs[:, 1]], axis=1)
    return relation_ends(node_kinds(g), dict.fromkeys(SPLITS, every), (RELATION,), dict.fromkeys(SPLITS, g.name))


def load_user_item(spec) -> LinkDataset:
    """A ratings file (spec.dataset) -> the typed LinkDataset of its temporal split (module docstring): relation
    user -> item, protocol "kg" with `item_negatives` (valid filtered by train + valid, test by every pair), test
    sampled on train + valid (the temporal rule, as the peers score it)."""
    from common.datasets.fractions import SplitSettings, split_fractions
    from common.datasets.kg import KG, corruption_pairs
    from common.datasets.tables import stem_of
    from common.graph import DiGraph

    given = [f for f, v in (("--nodes", spec.nodes), ("--eval-pairs", spec.eval_pairs),
             ("--train-negatives", spec.train_negatives), ("--directed", spec.directed)) if v]  # fmt: skip
    if given:
        raise DatasetError(f"{spec.dataset}: a user-item file takes no {', '.join(given)} yet; drop them")
    if spec.split_kind == "random":
        raise DatasetError(f"{spec.dataset}: a user-item file is split by its time column; drop --split random")
    g = read_user_item(spec.dataset)
    shares = {} if spec.split is None else dict(zip(("val_frac", "test_frac"), split_fractions(spec.split)))
    ds = user_item_split(g, SplitSettings(seed=spec.seed, where=str(spec.dataset), **shares))
    pos = {s: ds.splits[s].pos for s in SPLITS}
    seen = np.concatenate([pos["train"], pos["valid"]])
    for s, known in (("valid", seen), ("test", np.concatenate([seen, pos["test"]]))):
        tails = item_negatives(pos[s], known, g)
        triples = np.stack([pos[s][:, 0], np.zeros(len(pos[s]), np.int64), pos[s][:, 1]], axis=1)
        ds.splits[s].neg = {KG: corruption_pairs(triples, np.zeros((len(pos[s]), 0), np.int64), tails)}
    ds.name, ds.metric, ds.own = stem_of(Path(spec.dataset)), {KG: "mrr"}, True
    ds.out_graphs = {
        "train": DiGraph.from_edges(pos["train"], g.num_nodes),
        "test": DiGraph.from_edges(seen, g.num_nodes),
    }
    ds.relations = Relations(
        names=(RELATION,),
        pos={s: np.zeros(len(pos[s]), np.int64) for s in SPLITS},
        ends=user_item_ends(g),
        sides=(2,),
        kinds=node_kinds(g),
    )
    return attach_typed_features(ds, spec.node_features, spec.fill_features, shared_ids=True)
