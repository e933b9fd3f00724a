"""Time-aware baselines of a temporal split (common/datasets/temporal.py), beside CN / AA / RA.

- edgebank: EdgeBank (Poursafaei et al. 2022, unlimited memory), the memorisation baseline of temporal link
  prediction: 1 if the pair is an edge of the history a split is scored on (the graph before its boundary), else
  0; ties are averaged as every ranking here. Under this project's split a pair counts at its first appearance, so
  no evaluated pair is in its history: EdgeBank sits at the all-ties value by construction, a check that no
  positive is a repeat.
- rpa: preferential attachment by recent activity: a(u) * a(v), a(z) the number of edge rows (repeats count:
  messages, not pairs) naming z in the recent window before the split's boundary, a window as long as the split
  itself spans (recent_activity).
- recency (decayed_activity): each node's edge rows before the boundary, each weighted exp(-age / tau), tau a
  fraction (RECENCY_FRACTIONS) of the history's span; a typed graph's recent popularity reads it
  (common/heuristics_typed.py), tau chosen on validation.

Both take integer pairs (M, 2) checked by the caller (common.heuristics.score_pairs) and return (M,) float64.
"""

from __future__ import annotations

import numpy as np

from common.graph import Graph


def edgebank(graph: Graph, pairs: np.ndarray) -> np.ndarray:
    """1.0 for a pair that is an edge of `graph` (the history before the split's boundary), else 0.0."""
    return graph.has_edge(pairs[:, 0], pairs[:, 1]).astype(np.float64)


def recent_pa(graph: Graph, pairs: np.ndarray, activity: np.ndarray) -> np.ndarray:
    """a(u) * a(v), `activity` (N,) each node's edge rows in the recent window (LinkDataset.activity_for)."""
    activity = np.asarray(activity, dtype=np.float64)
    if activity.shape != (graph.num_nodes,):
        raise ValueError(f"activity: expected one count per node ({graph.num_nodes}), got {activity.shape}")
    return activity[pairs[:, 0]] * activity[pairs[:, 1]]


def recent_window(times: np.ndarray, start: int | float, end: int | float) -> np.ndarray:
    """Mask of the rows in the recent window before boundary `start` of a split that runs to `end` (its last
    time): [start - (end - start), start). A split of one time has no length: its window is the last time
    before `start`, so the row is never empty while history exists."""
    before = times < start
    span = end - start
    if span > 0:
        return before & (times >= start - span)
    return before & (times == times[before].max()) if before.any() else before


def recent_activity(pairs: np.ndarray, times: np.ndarray, num_nodes: int, start, end) -> np.ndarray:
    """(N,) float64: each node's edge rows (self-loops dropped, repeats counted) in recent_window."""
    rows = pairs[recent_window(times, start, end) & (pairs[:, 0] != pairs[:, 1])]
    return np.bincount(rows.ravel(), minlength=num_nodes).astype(np.float64)


# tau of the recency weight as fractions of the history's span (boundary - first time): from the last weeks of a
# half-year log (1/16) to a mild fade (1/2); the fraction is chosen on validation (common/heuristics_typed.py).
RECENCY_FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 1 / 2)


def decayed_activity(pairs: np.ndarray, times: np.ndarray, num_nodes: int, start, fractions=RECENCY_FRACTIONS):
    """(F, N) float64: row f holds each node's edge rows before boundary `start` (self-loops dropped, repeats
    counted), each weighted exp(-(start - t) / tau_f), tau_f = fractions[f] * (start - the first time)."""
    keep = (times < start) & (pairs[:, 0] != pairs[:, 1])
    rows, age = pairs[keep], (start - times[keep]).astype(np.float64)
    span = float(age.max(initial=0.0)) or 1.0
    out = np.zeros((len(fractions), num_nodes))
    for f, frac in enumerate(fractions):
        weight = np.exp(-age / (frac * span))
        out[f] = np.bincount(rows[:, 0], weight, num_nodes) + np.bincount(rows[:, 1], weight, num_nodes)
    return out
