"""A user-item interaction file (two id spaces: user 1 and item 1 are different nodes) -> one node space with a
kind per node, and its temporal split.

Nodes: the users first, then the items, each kind's ids kept as the text the file holds (leading zeros matter)
and sorted by their UTF-8 bytes, so the mapping depends only on the sets of ids. The split is the edge list's
temporal split (common/datasets/temporal.py): a user-item pair (u, i) is a pair (min, max) there, and since every
user node precedes every item node it stays (user, item).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.datasets.base import DatasetError, LinkDataset
from common.datasets.columns import TimeColumn, parse_time, parse_weight
from common.datasets.fractions import SplitSettings
from common.datasets.tables import read_columns
from common.datasets.temporal import temporal_split

KINDS = ("user", "item")


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
    ds = temporal_split(g.name, g.pairs, g.time, g.num_nodes, split)
    ds.node_ids = g.node_ids
    return ds
