"""The temporal split of an edge list with a `time` column: train on the past, evaluate on what came after.

Rules (docs/preprocess.md#time):
- a pair is undirected, (u, v) and (v, u) are one pair, and counts once, at its first appearance (its earliest
  time); later repeats add nothing but weight;
- the distinct pairs in order of first appearance: the earliest train, the next valid, the latest test, at the
  --split shares (85/5/10: valid and test get floor(share x pairs) each, as in the random split);
- a boundary is a time: valid holds the pairs first seen at or after the valid boundary, test those at or after
  the test boundary, train everything before. Pairs that share a time go to one split, so a boundary never cuts
  a tie, and the graph of every pair holds only edges strictly before its split's boundary;
- valid pairs are sampled and scored on the training graph (edges before the valid boundary), test pairs on
  train + valid (edges before the test boundary): the dataset's `test_graph`, which the heuristics use too;
- evaluation negatives match their positives in newness (NEGATIVES): a node is old once it appeared in an edge
  before the split's boundary, new when it first appears in the split's own pairs. Each negative has as many new
  ends (0, 1 or 2) as one of the positives, so the split's negatives hold exactly its positives' counts of
  old-old, old-new and new-new pairs: "this node has no history" tells a positive from a negative no better than
  chance. New ends are drawn among the split's new nodes, never from a later split; training views draw theirs
  among the training graph's nodes (LinkDataset.active_nodes).
"""

from __future__ import annotations

import logging

import numpy as np

from common.datasets.base import DatasetError, LinkDataset, Split, training_graph
from common.datasets.columns import TimeColumn
from common.datasets.fractions import SplitSettings, shares_fix
from common.datasets.negatives import free_pairs, min_max, sample_non_edges
from common.graph import DiGraph, Graph, edge_first_times, edge_weights
from common.heuristics_temporal import decayed_activity, recent_activity
from common.unique import unique_first

log = logging.getLogger("common.datasets.edgelist")

# The rule of the evaluation negatives (split_info["negatives"]; the report says it under its table).
NEGATIVES = "matched-newness"


def first_appearances(
    pairs: np.ndarray, times: np.ndarray, num_nodes: int, ordered: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(distinct (min, max) pairs, their first time), in order of first appearance (ties: file order);
    self-loops dropped. ordered (--directed): distinct ordered pairs, u -> v and v -> u each at its own first time."""
    canon = np.asarray(pairs, dtype=np.int64) if ordered else min_max(np.asarray(pairs, dtype=np.int64))
    keep = canon[:, 0] != canon[:, 1]
    keys = canon[keep, 0] * num_nodes + canon[keep, 1]
    t = times[keep]
    order = np.argsort(t, kind="stable")
    keys, t = keys[order], t[order]
    first = unique_first(keys)  # ascending positions in time order: the result stays sorted by time
    keys = keys[first]
    return np.stack([keys // num_nodes, keys % num_nodes], axis=1), t[first]


def boundaries(
    first_time: np.ndarray, val_frac: float, test_frac: float, where: str, show, split_flag: str | None = "--split"
) -> tuple:
    """(valid boundary, test boundary): the first times of the first valid and the first test pair at the
    shares; refused in one line when a split would be empty (too few pairs, or a tie spanning it). split_flag:
    the command's shares flag for the hint (None: it has none)."""
    total = len(first_time)
    n_valid, n_test = int(val_frac * total), int(test_frac * total)
    if n_valid == 0 or n_test == 0:
        raise DatasetError(
            f"{where}: {total} distinct pairs leave no valid or no test pairs at {100 * val_frac:g}% "
            f"valid / {100 * test_frac:g}% test; {shares_fix(total, split_flag)}"
        )
    t_valid, t_test = first_time[total - n_valid - n_test], first_time[total - n_test]
    if t_valid == t_test or not (first_time < t_valid).any():
        empty = "valid" if t_valid == t_test else "train"
        tied = int(np.count_nonzero(first_time == (t_test if empty == "valid" else t_valid)))
        raise DatasetError(
            f"{where}: {tied} pairs first appear at time {show(t_valid)}, so a temporal split at these "
            f"shares leaves {empty} empty (pairs that share a time stay in one split); pass --split "
            "with other shares, or --split random"
        )
    return t_valid, t_test


def temporal_split(
    name: str,
    pairs: np.ndarray,
    time: TimeColumn,
    num_nodes: int,
    split: SplitSettings | None = None,
    weights: np.ndarray | None = None,
    x=None,
    directed: bool = False,
    recency: bool = False,
) -> LinkDataset:
    """Edge rows (M, 2) with their times (the edge list's `time` column) -> LinkDataset split by time (module
    docstring). `weights`: per-row weights; each graph's are the sums over the rows before its boundary.
    directed: the pairs are ordered and the negatives ordered non-edges (common/datasets/directed.py).
    recency: also each node's recency-weighted activity (LinkDataset.recency; a user-item file's recent popularity)."""
    split = split or SplitSettings()  # None: HeaRT's 85/5/10, seed 0
    where, seed, val_frac, test_frac = split.where or name, split.seed, split.val_frac, split.test_frac
    if not (0 <= val_frac < 1 and 0 <= test_frac < 1 and val_frac + test_frac < 1):
        raise DatasetError(f"{where}: val_frac={val_frac}, test_frac={test_frac} must be >= 0 and sum below 1")
    distinct, first_time = first_appearances(pairs, time.values, num_nodes, ordered=directed)
    t_valid, t_test = boundaries(first_time, val_frac, test_frac, where, time.show, split.split_flag)
    in_train, in_test = first_time < t_valid, first_time >= t_test
    pos = {"train": distinct[in_train], "valid": distinct[~in_train & ~in_test], "test": distinct[in_test]}
    graph = training_graph(pos["train"], num_nodes, x=x)
    test_graph = training_graph(np.concatenate([pos["train"], pos["valid"]]), num_nodes, x=x)
    pair_graph = DiGraph if directed else Graph  # what decides "is an edge" for a negative
    full = pair_graph.from_edges(distinct, num_nodes=num_nodes)
    seen = test_graph if not directed else DiGraph.from_edges(np.concatenate([pos["train"], pos["valid"]]), num_nodes)
    exists = {"valid": np.flatnonzero(graph.degree > 0), "test": np.flatnonzero(test_graph.degree > 0)}
    valid_neg = matched_negatives(
        seen, pos["valid"], exists["valid"], np.random.default_rng([seed, 1]), what=f"{where} valid negatives"
    )
    test_neg = matched_negatives(
        full,
        pos["test"],
        exists["test"],
        np.random.default_rng([seed, 2]),
        exclude=valid_neg,
        what=f"{where} test negatives",
    )
    info = {
        "kind": "temporal",
        "column": "time",
        "time_type": time.kind,
        "valid_from": time.show(t_valid),
        "test_from": time.show(t_test),
        "pairs": {s: int(len(p)) for s, p in pos.items()},
        "negatives": NEGATIVES,
        # per evaluated split, its pairs with 0, 1 and 2 new ends (its negatives hold the same counts)
        "new_ends": {s: [int(c) for c in np.bincount(new_ends(pos[s], exists[s]), minlength=3)] for s in exists},
    }
    _log_split(where, info, pos, exists)
    ds = LinkDataset(
        name=name,
        graph=graph,
        test_graph=test_graph,
        metric={"original": "mrr"},
        split_info=info,
        splits={
            "train": Split(pos=pos["train"]),
            "valid": Split(pos=pos["valid"], neg={"original": valid_neg}),
            "test": Split(pos=pos["test"], neg={"original": test_neg}),
        },
    )
    t = time.values
    ds.activity = {  # the rpa heuristic's counts: each split's window is as long as the split itself
        "valid": recent_activity(pairs, t, num_nodes, t_valid, t_test),
        "test": recent_activity(pairs, t, num_nodes, t_test, t.max()),
    }
    first = first_time.astype(np.float64)
    ds.edge_times = {  # each graph's edges at their first time, and the boundary the graph ends at
        "train": (edge_first_times(graph, distinct[in_train], first[in_train]), float(t_valid)),
        "test": (edge_first_times(test_graph, distinct[~in_test], first[~in_test]), float(t_test)),
    }
    if recency:  # (F, N) floats per split: only the typed graphs that read them pay for them
        ds.recency = {s: decayed_activity(pairs, t, num_nodes, at) for s, at in (("valid", t_valid), ("test", t_test))}
    if weights is not None:
        ds.weights = {
            "train": edge_weights(graph, pairs[t < t_valid], weights[t < t_valid]),
            "test": edge_weights(test_graph, pairs[t < t_test], weights[t < t_test]),
        }
    return ds


def _log_split(where: str, info: dict, pos: dict, exists: dict) -> None:
    total = sum(len(p) for p in pos.values())
    log.info(
        "%s: the split is temporal (column %s): each pair counts at its first appearance; train %s pairs before "
        "%s, valid %s from %s, test %s from %s (%.1f/%.1f/%.1f %%); valid pairs are scored on the graph before "
        "%s, test pairs on the graph before %s",
        where,
        info["column"],
        f"{len(pos['train']):,}",
        info["valid_from"],
        f"{len(pos['valid']):,}",
        info["valid_from"],
        f"{len(pos['test']):,}",
        info["test_from"],
        *(100 * len(pos[s]) / total for s in ("train", "valid", "test")),
        info["valid_from"],
        info["test_from"],
    )
    for split in ("valid", "test"):
        old_old, old_new, new_new = info["new_ends"][split]
        if old_new or new_new:
            log.info(
                "%s: %s of %s %s pairs name a node first seen in them (%s with one new end, %s with two); their "
                "negatives hold as many of each, so newness tells nothing",
                where,
                f"{old_new + new_new:,}",
                f"{len(pos[split]):,}",
                split,
                f"{old_new:,}",
                f"{new_new:,}",
            )


def new_ends(pairs: np.ndarray, old: np.ndarray) -> np.ndarray:
    """(M,) how many ends (0, 1, 2) of each pair are not among the `old` nodes."""
    known = np.zeros(int(max(old.max(initial=-1), pairs.max(initial=-1))) + 1, dtype=bool)
    known[old] = True
    return (~known[pairs[:, 0]]).astype(np.int64) + ~known[pairs[:, 1]]


def matched_negatives(
    known: Graph,
    pos: np.ndarray,
    old: np.ndarray,
    rng: np.random.Generator,
    exclude: np.ndarray | None = None,
    what: str = "negatives",
    pool: int | None = None,
) -> np.ndarray:
    """len(pos) non-edges of `known` with the positives' shares of 0, 1 and 2 new ends (module docstring): old
    ends among `old`, new ones among the positives' nodes outside it. Without new ends this is the plain draw
    among `old`, so a split whose pairs all name old nodes keeps its negatives. pool: instead up to this many
    for a selection pool's extra negatives, each kind taking at most half the pairs left of it, never failing
    for want."""
    ends = new_ends(pos, old)
    new = np.setdiff1d(np.unique(pos), old)
    at_most_half = pool is not None
    counts = shares(np.bincount(ends, minlength=3), len(pos) if pool is None else pool)
    exclude = np.zeros((0, 2), dtype=np.int64) if exclude is None else np.asarray(exclude, np.int64).reshape(-1, 2)
    inside = np.isin(exclude, np.concatenate([old, new])).all(axis=1)
    exclude_ends = new_ends(exclude, old)
    kinds = ((0, old), (1, (old, new)), (2, new))
    # only excluded pairs of a kind can collide with its draw, and only they may count against its room
    taken = [exclude[inside & (exclude_ends == k)] for k, _ in kinds]
    room = [free_pairs(known, among) - len(taken[k]) for k, among in kinds]
    if not at_most_half:
        counts = fit_to_room(counts, room, what)
    parts = []
    for k, among in kinds:
        if counts[k]:
            want = min(counts[k], room[k] // 2) if at_most_half else counts[k]
            parts.append(sample_non_edges(known, want, rng, exclude=taken[k], nodes=among, what=what + _KIND[k]))
    return np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)


def fit_to_room(counts: np.ndarray, room: list[int], what: str) -> np.ndarray:
    """Counts per kind (0, 1, 2 new ends) that the graph can hold: a kind without room enough (two newcomers whose
    only pair is the positive itself) passes its shortfall to the kind with one new end fewer, and the log says
    so; the draw then fails only where no kind has room."""
    counts = counts.copy()
    for k in (2, 1):
        short = max(0, int(counts[k]) - max(0, room[k]))
        if short:
            counts[k] -= short
            counts[k - 1] += short
            log.warning(
                "%s: %d pair(s) with %d new node(s) have no non-edge of their kind left; drawn with %d",
                what,
                short,
                k,
                k - 1,
            )
    return counts


_KIND = (" (old-old pairs)", " (pairs of an old and a new node)", " (new-new pairs)")


def shares(counts: np.ndarray, total: int) -> np.ndarray:
    """`counts` scaled to sum to `total` (largest remainders; ties to the smaller kind): the positives' own counts
    when total is their number."""
    exact = counts * total / max(1, counts.sum())
    out = np.floor(exact).astype(np.int64)
    out[np.argsort(out - exact, kind="stable")[: total - out.sum()]] += 1
    return out
