"""The clock of a temporal shard set, the model's time input (ModelConfig.time_features, trainer/model/time_input.py):
how active each node was just before the time a link is asked, which a subgraph without times cannot say.

A temporal set ships each graph's edge times (common/set_arrays.py: load_edge_times) and the time the graph ends at:
the valid boundary for "train", the test boundary for "test". A node z's activity at time `now` counts its edges
strictly before `now`, each weighted exp(-(now - t) / tau) for the taus of FRACTIONS (fractions of the training
history's span, the same lengths on every graph), plus their plain count: F + 1 numbers, read as log1p.

When is a link asked:
- an evaluation or scoring link: at its graph's end (everything the graph holds is before it);
- a training link: when its head arrived, its first edge (`arrival`). The head's own edges are never before it,
  so the link's own edge never counts, and a positive and the negatives drawn for the same head are asked at the
  same time: the model learns what was active when a user arrived, which is what a new user at the boundary asks.
  (At the training graph's end, every training positive would be told by the future popularity of its tail.)
The head's own activity is left out (zero) everywhere: at its arrival it has none, and a scoring head's would
shift its whole row of candidates alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numba import njit

# tau of each decayed sum, as fractions of the training history's span: from weeks of a half-year log to all of it.
# A 1/64 (days) sum as well scored 0.2 below on movielens' validation: the pairs asked come days after the boundary
FRACTIONS = (1 / 16, 1 / 4, 1.0)
WIDTH = len(FRACTIONS) + 1  # the decayed sums and the plain count
ARRIVAL = "arrival"  # PackedBatch.clock of a training batch: each link at its head's arrival on the training graph


@dataclass(frozen=True)
class EdgeClock:
    """One graph's edges in time order per node: row z's times are times[indptr[z]:indptr[z + 1]], ascending, in
    units of the training span from the training history's first time; `end` in the same units."""

    indptr: np.ndarray
    times: np.ndarray
    end: float

    @staticmethod
    def build(indptr, times, end: float, origin: float, span: float) -> "EdgeClock":
        """From a CSR's row pointers and its entries' times (any order within a row) in the file's units."""
        indptr = np.asarray(indptr, dtype=np.int64)
        rows = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
        t = (np.asarray(times, dtype=np.float64) - origin) / span
        return EdgeClock(indptr, t[np.lexsort((t, rows))], (float(end) - origin) / span)

    @property
    def arrival(self) -> np.ndarray:
        """(N,) each node's first time (+inf for a node with no edge)."""
        first = np.full(len(self.indptr) - 1, np.inf)
        has = np.diff(self.indptr) > 0
        first[has] = self.times[self.indptr[:-1][has]]
        return first


def set_times(manifest) -> tuple[dict[str, tuple[np.ndarray, float]], float, float]:
    """({graph: (its entries' times, its end)} of every graph a temporal set ships, in the file's units; the
    training history's first time and span, the clock's origin and unit)."""
    from common.shards import load_edge_times

    raw = {which: load_edge_times(manifest, which) for which in manifest.graphs}
    train_times, train_end = raw["train"]
    origin = float(np.min(train_times)) if len(train_times) else train_end
    return raw, origin, (train_end - origin) or 1.0


def edge_clocks(manifest, times: tuple | None = None) -> dict[str, EdgeClock]:
    """{graph: EdgeClock} of every graph a temporal set ships, in the units of its training history's span
    (`times`: its set_times, when already read)."""
    from common.shards import load_graph

    raw, origin, span = times or set_times(manifest)
    return {
        which: EdgeClock.build(load_graph(manifest, which, verify=False)[0], times, end, origin, span)
        for which, (times, end) in raw.items()
    }


class ClockTable:
    """An EdgeClock as tensors on one device, for the forward pass: one sortable key per entry (row, then time) and
    each tau's running sums within a row."""

    def __init__(self, clock: EdgeClock, device=None):
        n = len(clock.indptr) - 1
        self.num_nodes, self.end = n, clock.end
        self.scale = float(np.floor(max(clock.end, float(clock.times.max(initial=0.0)))) + 2.0)  # > every time
        rows = np.repeat(np.arange(n, dtype=np.float64), np.diff(clock.indptr))
        t = lambda x, dt=torch.float64: torch.as_tensor(np.array(x), dtype=dt, device=device)  # noqa: E731
        self.indptr = t(clock.indptr, torch.int64)
        self.keys = t(rows * self.scale + clock.times)  # ascending: row-major, time within a row
        weights = np.exp((clock.times[None, :] - clock.end) / np.asarray(FRACTIONS)[:, None])  # (F, E) <= 1
        self.running = t(_row_cumsum(clock.indptr, weights))  # per row, so an old row's tiny sums stay exact
        self.arrival = t(clock.arrival)

    def to(self, device) -> "ClockTable":
        """The same table on `device` (its tensors moved, kept float64)."""
        for name in ("indptr", "keys", "running", "arrival"):
            setattr(self, name, getattr(self, name).to(device))
        return self

    def activity(self, node: torch.Tensor, now: torch.Tensor) -> torch.Tensor:
        """(T, WIDTH) float64 log1p of each node's decayed sums and count of edges strictly before `now` (T,)
        (times in the clock's units, now <= end); nodes outside the table have none."""
        return torch.log1p(self.sums(node, now))

    def sums(self, node: torch.Tensor, now: torch.Tensor) -> torch.Tensor:
        """(T, WIDTH) float64: activity's decayed sums and count themselves."""
        known = node < self.num_nodes
        z = node.clamp(max=self.num_nodes - 1)
        lo = self.indptr[z]
        at = torch.searchsorted(self.keys, z.double() * self.scale + now)  # entries of row z before `now`
        tau = torch.tensor(FRACTIONS, dtype=torch.float64, device=node.device)
        decay = torch.exp((self.end - now)[None, :] / tau[:, None])  # (F, T): from weights at `end` to at `now`
        last = (at - 1).clamp(min=0).expand(len(tau), -1)  # the row's running sum at its last entry before `now`
        sums = self.running.gather(1, last) * (at > lo)
        cols = torch.cat([(sums * decay).clamp(min=0), (at - lo).double()[None, :]], dim=0).T
        return cols * known[:, None]


@njit(cache=True)
def _row_cumsum(indptr, weights):
    """(F, E) running sums of `weights` within each CSR row, restarting at every row: no cancellation against
    the rows before it, which a global cumsum minus its row start would suffer."""
    out = np.empty_like(weights)
    for f in range(weights.shape[0]):
        for z in range(indptr.shape[0] - 1):
            acc = 0.0
            for i in range(indptr[z], indptr[z + 1]):
                acc += weights[f, i]
                out[f, i] = acc
    return out
