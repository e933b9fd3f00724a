"""The user's node ids of a serving graph that gains nodes (pipelines/serve/state.py), and the one-line error of a
request the service refuses."""

from __future__ import annotations

import re

import numpy as np

INTEGER = re.compile(r"-?[0-9]+")
LEADING_ZERO = re.compile(r"-?0[0-9]")


class ServeError(Exception):
    """A request the service refuses: an HTTP status and a one-line message naming the culprit."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = int(status), " ".join(str(message).split())

    def body(self) -> dict:
        return {"error": self.message}


def shown(value) -> str:
    """A user's value as it appears in an error message (short)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class LiveIds:
    """The user's id <-> node index of a graph that gains nodes.

    base: the set's mapping (sorted int64, uint64 or str objects), or None for a graph named 0..N-1."""

    def __init__(self, base: np.ndarray | None, num_nodes: int):
        self.base = base
        self.text = base is not None and base.dtype == object
        # a user-item set's ids run per kind (users, then items): searched through their sorted order
        unsorted = base is not None and len(base) > 1 and not (base[1:] >= base[:-1]).all()
        self.order = np.argsort(base, kind="stable") if unsorted else None
        self.keys = base if self.order is None else base[self.order]
        self.num_nodes = int(num_nodes)
        self.new: dict = {}  # id -> index, for ids of a mapped graph that edits introduced
        self.new_ids: list = []
        self.new_of_kind: dict = {}  # (id, kind) -> index, where each kind is its own id space (a user-item graph)

    @property
    def mapped(self) -> bool:
        return self.base is not None

    def normalise(self, value, where: str):
        """A JSON value as an id of this graph's kind, by the rules the edge-list loaders apply to a file's ids:
        surrounding spaces trimmed, no empty id, text digits and integers interchangeable but an integer never
        written with a leading zero (007 is a code, not 7), integers within the graph's id type. Anything
        else is a 400 naming `where`."""
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            kind = "a text or integer" if self.text else "an integer"
            raise ServeError(400, f"{where}: node id {shown(value)} must be {kind} id")
        if isinstance(value, str):
            value = value.strip()
            if not value:
                raise ServeError(400, f"{where}: an empty node id; name a node")
            try:  # JSON's "\\ud800" is a lone surrogate: no UTF-8 for it, so no answer could name it
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ServeError(
                    400, f"{where}: node id {shown(value)} is not valid Unicode text (a lone surrogate); use UTF-8"
                ) from None
        if self.text:
            return value if isinstance(value, str) else str(value)
        if isinstance(value, str):
            if not INTEGER.fullmatch(value):
                raise ServeError(400, f"{where}: node id {shown(value)} must be an integer id")
            if LEADING_ZERO.match(value):
                raise ServeError(
                    400,
                    f"{where}: node id {shown(value)} has a leading zero; this graph's ids are "
                    "integers, written without one",
                )
            value = int(value)
        lo, hi = self.bounds
        if not lo <= value <= hi:
            raise ServeError(
                400, f"{where}: node id {value} does not fit this graph's ids (integers from {lo} to {hi})"
            )
        return value

    @property
    def bounds(self) -> tuple[int, int]:
        info = np.iinfo(self.base.dtype if self.base is not None else np.int64)
        return int(info.min), int(info.max)

    def find(self, value) -> int | None:
        """The index of a normalised id, or None."""
        if self.base is None:
            return value if 0 <= value < self.num_nodes else None
        if value in self.new:
            return self.new[value]
        if not self.text and not (np.iinfo(self.base.dtype).min <= value <= np.iinfo(self.base.dtype).max):
            return None
        pos = int(np.searchsorted(self.keys, np.asarray(value, dtype=self.base.dtype)))
        if pos >= len(self.keys) or self.keys[pos] != value:
            return None
        return pos if self.order is None else int(self.order[pos])

    def find_within(self, value, members: np.ndarray, kind: int | None = None) -> int | None:
        """find, among the nodes `members` (one kind, sorted) where kinds share an id (a user-item graph's user 50
        and item 50); with none of them, find's answer (another kind's node, or None). `kind`: that kind's id where
        each kind is its own id space, so the answer is its node of that id or None, never another kind's."""
        if kind is not None:  # each kind its own id space: the set's node of that kind, else one an edit made
            return self.new_of_kind.get((value, kind), self._set_node_within(value, members))
        idx = self.find(value)
        if idx is None or self.base is None or np.isin(idx, members):
            return idx
        mine = self._set_node_within(value, members)
        return idx if mine is None else mine

    def _set_node_within(self, value, members: np.ndarray) -> int | None:
        """The set's node of id `value` among `members` (sorted), or None: every node of that id, then the first
        of them that is a member."""
        if self.base is None or (not self.text and not self.bounds[0] <= value <= self.bounds[1]):
            return None
        key = np.asarray(value, dtype=self.base.dtype)
        lo, hi = np.searchsorted(self.keys, key, side="left"), np.searchsorted(self.keys, key, side="right")
        same = np.arange(lo, hi) if self.order is None else self.order[lo:hi]
        mine = same[np.isin(same, members)]
        return int(mine[0]) if len(mine) else None

    def assign_of_kind(self, value, kind: int) -> int:
        """A new node of `kind` for a normalised id that kind lacks (each kind its own id space)."""
        idx = self.num_nodes
        self.new_of_kind[(value, kind)] = idx
        self.new.setdefault(value, idx)
        self.new_ids.append(value)
        self.num_nodes += 1
        return idx

    def valid(self, value) -> bool:
        """Whether a logged id is one this version accepts (logs of earlier versions may hold others)."""
        try:
            return self.normalise(value, "") == value
        except ServeError:
            return False

    def index(self, value, where: str = "node") -> int:
        """The index of a JSON id; an unknown one is a 404 naming it."""
        value = self.normalise(value, where)
        idx = self.find(value)
        if idx is None:
            raise ServeError(404, f"unknown node {shown(value)}: not in the serving graph (add it with POST /edges)")
        return idx

    def assign(self, value) -> int:
        """The index of a normalised id, giving a new id the next index (or, unmapped, its own id)."""
        idx = self.find(value)
        if idx is not None:
            return idx
        if self.base is None:
            self.num_nodes = value + 1
            return value
        idx = self.num_nodes
        self.new[value] = idx
        self.new_ids.append(value)
        self.num_nodes += 1
        return idx

    def user(self, idx) -> object:
        """The user's id of node `idx` as a JSON value."""
        idx = int(idx)
        if self.base is None:
            return idx
        value = self.base[idx] if idx < len(self.base) else self.new_ids[idx - len(self.base)]
        return value if self.text else int(value)

    def users(self, idx: np.ndarray) -> list:
        if self.base is None:
            return np.asarray(idx, dtype=np.int64).tolist()
        return [self.user(i) for i in np.asarray(idx).ravel()]
