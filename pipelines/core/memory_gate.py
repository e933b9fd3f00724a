"""The trainer pool's memory gate: start another trainer only when memory allows every running one to grow to
the largest footprint a trainer of its view has reached in this recipe, and the new one too.

The pool's slots are cores (pipelines.core.trainers), and a CPU trainer's memory is not known before it runs:
it grows with the view's sequence length and the graph's density (a trainer of two hops of 10 on a dense graph
reaches 5 to 7 GB, two side by side 17.5 GB on a 24 GB machine: docs/benchmarks/2026-11-29-cpu-epoch.md). Cores
alone would run such trainers side by side on a machine that cannot hold them, and the kernel would kill one.
The gate measures each running trainer's process tree (PSS: the forked loader workers' shared pages counted
once) while it runs, keeps the largest per view (shard set), and holds a pending trainer back until what is
free covers it. One trainer always runs, so the gate can slow a recipe down but never stop it.

On a Ray cluster this machine's memory says nothing of the nodes', so the gate holds nothing back there
(`default_gate(cluster=True)`): each trainer instead asks Ray for `expected(view)` bytes of its `memory` resource
(pipelines.core.ray_pool), and Ray starts no more trainers on a node than its memory holds. The node measures its
trainer as this gate would (`tree_bytes`) and reports the footprint here (`note`), so later requests follow it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from common.memory import machine_available_bytes

log = logging.getLogger("pipelines")
GiB = 2**30


def _children(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(k) for k in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return kids


def _pss_bytes(pid: int) -> int:
    """The process's proportional set size (its RSS where the kernel has no smaps_rollup); 0 once it is gone."""
    for name, key in (("smaps_rollup", "Pss:"), ("status", "VmRSS:")):
        try:
            with open(f"/proc/{pid}/{name}") as f:
                for line in f:
                    if line.startswith(key):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError):
            continue
    return 0


def tree_bytes(pid: int) -> int:
    """The PSS of a process and all its descendants (Linux /proc; 0 where it cannot be read, and then the
    gate's floor stands for the footprint)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += _pss_bytes(p)
        todo += _children(p)
    return total


@dataclass
class MemoryGate:
    """Asked by the pool before it starts a trainer beside running ones (`allows`), told their process ids to
    measure (`observe`). A trainer's footprint follows its view (its shard set: sequence lengths, graph form),
    so the largest is kept per view, and a view not seen yet is expected at the largest of any. `floor`: a
    trainer's footprint before any was measured; `headroom`: the factor over the largest seen, since a
    trainer may still grow past it."""

    available: Callable[[], int | None] = machine_available_bytes
    measure: Callable[[int], int] = tree_bytes
    floor: int = 1 * GiB
    headroom: float = 1.25
    every_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    peaks: dict = field(default_factory=dict)  # {view: the largest footprint of a trainer of it}
    usage: dict = field(default_factory=dict)  # {key: its footprint at the last measurement}
    held: set = field(default_factory=set)  # keys already logged as held back
    _last: float = float("-inf")

    def expected(self, view: str | None = None) -> int:
        seen = self.peaks.get(view, max(self.peaks.values(), default=0))
        return int(max(seen, self.floor) * self.headroom)

    def observe(self, pids: dict, views: dict) -> None:
        """Measure the running trainers ({key: pid}; views: {key: its view}) at most every `every_s` seconds."""
        now = self.clock()
        if now - self._last < self.every_s:
            return
        self._last = now
        self.usage = {key: self.measure(pid) for key, pid in pids.items()}
        for key, used in self.usage.items():
            self.note(views[key], used)

    def note(self, view: str, used: int) -> None:
        """A trainer of `view` was measured at `used` bytes (here by `observe`, on a cluster by its node)."""
        self.peaks[view] = max(self.peaks.get(view, 0), used)

    def allows(self, key: str, running: list, views: dict) -> bool:
        """Whether trainer `key` may start beside the `running` keys: the memory free now covers what each of
        them may still grow by and the new one's whole expected footprint."""
        if not running:
            return True
        free = self.available()
        if free is None:
            return True
        expected = self.expected(views[key])
        need = expected + sum(max(0, self.expected(views[k]) - self.usage.get(k, 0)) for k in running)
        if free >= need:
            return True
        if key not in self.held:
            self.held.add(key)
            log.info(
                "trainer pool: %s waits for a running trainer to finish: %.1f GiB free, it needs %.1f GiB (the "
                "largest seen of its view, x %.2f) and the %d running may grow by %.1f GiB",
                key,
                free / GiB,
                expected / GiB,
                self.headroom,
                len(running),
                (need - expected) / GiB,
            )
        return False


def default_gate(cluster: bool = False) -> MemoryGate:
    """The recipe process's one gate: what its trainers reached carries from the search to the final seeds. On a
    cluster, one that never holds a trainer back here (Ray does, by the memory each asks) and measures no local
    process: its peaks come from the nodes."""
    if cluster not in _GATES:
        _GATES[cluster] = MemoryGate(available=lambda: None, measure=lambda pid: 0) if cluster else MemoryGate()
    return _GATES[cluster]


_GATES: dict[bool, MemoryGate] = {}
