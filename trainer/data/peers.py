"""Each node's activity among the asking head's peers, the time input's second half (ModelConfig.peer_features,
trainer/model/time_input.py): on a temporal set with node attributes, how much more (or less) a node was chosen by
nodes that share the head's attributes than by all nodes of their kind, just before the link is asked.

Groups come from the set's feature table, one column at a time, within the column's node kind (a typed table's
column block, manifest features.kinds; an untyped table is one kind of every node; a node is of a kind where its
row is not all zero in that block). A column of 0s and 1s makes the group of its 1s, and of its 0s as well where
at least BOTH_SIDES of the kind are 1s (a one-hot block's "not a lawyer" is nearly everyone); any other column makes
BINS quantile bins of the kind's values.

For a token z and the head h of its link, per column c of h's kind with h in group g:
    lift_c(z) = log(A_g(z) / s_g + ALPHA) - log(A_K(z) + ALPHA)
A_g(z) sums z's edges to members of g strictly before the link is asked, decayed as the clock's (trainer/data/
clock.py: FRACTIONS, and the plain count); A_K(z) the same over every member of the kind; s_g the share of the
kind's edges on the graph that g's members hold. The token's input is the sum over the head's columns: naive Bayes
over the head's attributes, with ALPHA edges of the kind's average taste as the prior. Nodes outside the table (a
served edit's) have no group and no edges: their lift is 0, as is the head's own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from trainer.data.clock import WIDTH, ClockTable, EdgeClock, set_times

log = logging.getLogger(__name__)

ALPHA = 4.0  # the prior's weight, in (decayed) edges
BOTH_SIDES = 0.25  # a 0/1 column's 0s are a group too when at least this share of its kind are 1s
BINS = 4  # quantile bins of a column that is not 0/1


@dataclass(frozen=True)
class PeerGroups:
    """member_ptr / member_gid: each node's groups, CSR by node (its kind's group and one per column of its kind);
    head_gid (N, C): the group of each column a node asks with (-1: none); kind_gid (N,): its kind's group (-1:
    none); kind_of (G,): each group's kind group."""

    member_ptr: np.ndarray
    member_gid: np.ndarray
    head_gid: np.ndarray
    kind_gid: np.ndarray
    kind_of: np.ndarray

    @property
    def num_groups(self) -> int:
        return len(self.kind_of)


def column_groups(values: np.ndarray) -> tuple[np.ndarray, int]:
    """(each value's group 0.., -1 for none; the number of groups) of one column over its kind's members."""
    group = np.full(len(values), -1, dtype=np.int64)
    if not len(values):
        return group, 0
    if np.isin(values, (0.0, 1.0)).all():
        ones = values == 1.0
        group[ones] = 0
        both = bool(ones.mean() >= BOTH_SIDES)
        if both:
            group[~ones] = 1
        return group, 1 + both
    edges = np.unique(np.quantile(values, np.linspace(0, 1, BINS + 1)[1:-1]))
    used, group = np.unique(np.searchsorted(edges, values, side="right"), return_inverse=True)  # no empty bin
    return group.astype(np.int64), len(used)


def peer_groups(x: np.ndarray, spans: list[tuple[int, int]] | None = None) -> PeerGroups:
    """The groups of feature table x (N, F): one kind per column span [start, stop) of a typed table, or without
    spans one kind of every node."""
    n = len(x)
    blocks = [(a, b) for a, b in spans if b > a] if spans else [(0, x.shape[1])]  # a kind without a table: none
    head_gid = np.full((n, max((stop - start for start, stop in blocks), default=0)), -1, dtype=np.int64)
    kind_gid = np.full(n, -1, dtype=np.int64)
    kind_of: list[int] = []
    for start, stop in blocks:
        block = np.asarray(x[:, start:stop], dtype=np.float64)
        members = np.flatnonzero(np.any(block != 0, axis=1)) if spans else np.arange(n)
        kind = len(kind_of)
        kind_gid[members] = kind
        kind_of.append(kind)
        for j in range(stop - start):
            group, made = column_groups(block[members, j])
            head_gid[members, j] = np.where(group >= 0, group + len(kind_of), -1)
            kind_of += [kind] * made
    pairs = np.concatenate([np.stack([np.arange(n), g], 1) for g in (kind_gid, *head_gid.T)])
    pairs = pairs[pairs[:, 1] >= 0]
    pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(pairs[:, 0], minlength=n), out=ptr[1:])
    return PeerGroups(ptr, pairs[:, 1].copy(), head_gid, kind_gid, np.asarray(kind_of, dtype=np.int64))


@dataclass(frozen=True)
class PeerClock:
    """One graph's edges per (group, node) row in time order: rows (R,) the sorted keys gid * N + z of the rows
    with edges, clock their EdgeClock (its row r is rows[r]); share (G,) each group's s_g."""

    rows: np.ndarray
    clock: EdgeClock
    share: np.ndarray

    @staticmethod
    def build(groups: PeerGroups, indptr, indices, times, end: float, origin: float, span: float) -> "PeerClock":
        """From a graph's CSR and its entries' times (the file's units): entry z -> w counts once per group of w."""
        indptr, indices = np.asarray(indptr, dtype=np.int64), np.asarray(indices, dtype=np.int64)
        n = len(groups.kind_gid)  # the table's nodes: PeerTable's keys use the same N
        per = np.diff(groups.member_ptr)[indices]  # how many groups each entry's neighbour is in
        entry = np.repeat(np.arange(len(indices), dtype=np.int64), per)
        within = np.arange(len(entry)) - np.repeat(np.cumsum(per) - per, per)
        gid = groups.member_gid[groups.member_ptr[indices[entry]] + within]
        key = gid * n + np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))[entry]
        order = np.argsort(key, kind="stable")
        rows, counts = np.unique(key[order], return_counts=True)
        ptr = np.concatenate([[0], np.cumsum(counts)])
        edges = np.bincount(gid, minlength=groups.num_groups).astype(np.float64)
        share = edges / np.maximum(edges[groups.kind_of], 1.0)
        clock = EdgeClock.build(ptr, np.asarray(times, dtype=np.float64)[entry[order]], end, origin, span)
        return PeerClock(rows, clock, share)


class PeerTable:
    """A PeerClock on one device, with its groups: each token's lift (module docstring)."""

    def __init__(self, peers: PeerClock, groups: PeerGroups, device=None):
        t = lambda a, dt: torch.as_tensor(np.asarray(a), dtype=dt, device=device)  # noqa: E731
        self.table = ClockTable(peers.clock, device)
        self.rows, self.share = t(peers.rows, torch.int64), t(peers.share, torch.float64)
        self.head_gid, self.kind_gid = t(groups.head_gid, torch.int64), t(groups.kind_gid, torch.int64)
        self.num_nodes = len(groups.kind_gid)

    def to(self, device) -> "PeerTable":
        """The same table on `device`."""
        self.table.to(device)
        for name in ("rows", "share", "head_gid", "kind_gid"):
            setattr(self, name, getattr(self, name).to(device))
        return self

    def _sums(self, gid: torch.Tensor, node: torch.Tensor, now: torch.Tensor) -> torch.Tensor:
        """(Q, WIDTH) decayed sums and count of node's edges to the members of gid before now (0: no such row)."""
        known = (gid >= 0) & (node < self.num_nodes)
        key = gid.clamp(min=0) * self.num_nodes + node.clamp(max=self.num_nodes - 1)
        r = torch.searchsorted(self.rows, key).clamp(max=max(len(self.rows) - 1, 0))
        found = known & (self.rows[r] == key) if len(self.rows) else torch.zeros_like(known)
        outside = torch.full_like(r, self.table.num_nodes)  # ClockTable: a row outside it has no edges
        return self.table.sums(torch.where(found, r, outside), now)

    def lift(self, head: torch.Tensor, node: torch.Tensor, now: torch.Tensor) -> torch.Tensor:
        """(T, WIDTH) float64: per token, the sum over its head's columns of lift_c(node) (head, node, now: (T,))."""
        if not len(self.rows):  # no group has an edge: every lift is 0
            return torch.zeros(len(node), WIDTH, dtype=torch.float64, device=node.device)
        inside = head < self.num_nodes
        h = head.clamp(max=self.num_nodes - 1)
        kind = torch.where(inside, self.kind_gid[h], -1)
        whole = torch.log(self._sums(kind, node, now) + ALPHA)  # (T, WIDTH)
        gid = torch.where(inside[:, None], self.head_gid[h], -1)  # (T, C)
        cols = gid.shape[1]
        sums = self._sums(gid.reshape(-1), node.repeat_interleave(cols), now.repeat_interleave(cols))
        share = self.share[gid.clamp(min=0)].reshape(-1, 1).clamp(min=1e-12)  # a group without edges has none
        part = torch.log(sums / share + ALPHA).view(-1, cols, WIDTH) - whole[:, None, :]
        return (part * (gid >= 0)[:, :, None]).sum(dim=1) * (kind >= 0)[:, None]


def peer_tables(manifest, x: np.ndarray | None, times: tuple | None = None) -> dict[str, PeerTable]:
    """{graph: PeerTable} of every graph of a temporal set whose node-feature table is x, in its clock's units
    (`times`: the set's trainer.data.clock.set_times, when already read)."""
    from common.shards import ShardError, load_graph

    if x is None:
        raise ShardError(
            f"{manifest.root}: --peer-features reads the set's node features, and it ships none (or --no-features "
            "hides them); build the set with --node-features, or drop --peer-features"
        )
    kinds = (manifest.features or {}).get("kinds")
    groups = peer_groups(np.asarray(x), [tuple(v) for v in kinds.values()] if kinds else None)
    raw, origin, span = times or set_times(manifest)
    out = {}
    for which, (times, end) in raw.items():
        indptr, indices = load_graph(manifest, which, verify=False)
        peers = PeerClock.build(groups, indptr, indices, times, end, origin, span)
        log.info(
            "peer input: %d groups, %s (group, node) entries on graph %s",
            groups.num_groups,
            f"{len(peers.clock.times):,}",
            which,
        )
        out[which] = PeerTable(peers, groups)
    return out
