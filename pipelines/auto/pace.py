"""The search's pace check: do not keep training what cannot finish. A candidate whose grace period, at the
pace of its first steps, would end after the search's share of the budget is stopped then and left out
(search.json's "skipped" names why), instead of holding a trainer slot, which the default shares, until the
budget ends it.

The pace is read from the run's metrics.jsonl (a train line every --log-every optimiser steps) and timed from
the first line this check sees, so process start and data loading do not count against it. Evaluation
between epochs is not counted either: the projection is, if anything, early, and only a clear case is cut.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from common.atomic import write_json_atomic

log = logging.getLogger("pipelines.auto")
MIN_STEPS = 20  # optimiser steps seen before a projection is made: two train lines at --log-every 10
TAIL_BYTES = 8192  # the last train line is within the file's last few lines


def last_step(run_dir: Path) -> int | None:
    """The optimiser step of the last train line in run_dir/metrics.jsonl; None before the first one."""
    try:
        with open(Path(run_dir) / "metrics.jsonl", "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            lines = f.read().decode(errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        if '"train"' not in line:
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # a line being written, or the tail's cut first line
            continue
        if rec.get("event") == "train" and isinstance(rec.get("step"), int):
            return rec["step"]
    return None


def projected_end(first: tuple[float, int], last: tuple[float, int], target: int) -> float | None:
    """When step `target` is reached at the pace from `first` to `last` ((time, step) each); None until at
    least MIN_STEPS steps lie between them."""
    (t0, s0), (t1, s1) = first, last
    if s1 - s0 < MIN_STEPS or t1 <= t0:
        return None
    return t1 + max(0, target - s1) * (t1 - t0) / (s1 - s0)


@dataclass
class GracePace:
    """Watches running candidates (pipelines.core.trainers.run_trainers' `watch`): called with a candidate's
    key, returns why it should stop, or None. `targets`: {key: (run folder, step its grace period ends at)};
    candidates not in it (the default) are never stopped."""

    targets: dict
    deadline: float
    clock: object
    first: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)

    def __call__(self, key: str) -> str | None:
        if key not in self.targets:
            return None
        run_dir, target = self.targets[key]
        step = last_step(run_dir)
        if step is None:
            return None
        now = self.clock()
        first = self.first.setdefault(key, (now, step))
        end = projected_end(first, (now, step), target)
        if end is None or end <= self.deadline:
            return None
        pace = (step - first[1]) / (now - first[0])
        self.skipped[key] = (
            f"{key}: at {pace:.1f} steps/s its grace period (step {target}) would end {end - self.deadline:.0f} s "
            "after the search's share of --budget-minutes; stopped at step "
            f"{step} and judged on the epochs it evaluated"
        )
        log.warning("search: %s", self.skipped[key])
        return self.skipped[key]


@dataclass
class Cuts:
    """What the budget cut and the pace check stopped in a search (its folder's cut.json). A finished search's cuts
    are final: a rerun judges those candidates as they were left (pipelines.auto.search.Search.train)."""

    path: Path
    budget: list = field(default_factory=list)  # the run folders' names of those --budget-minutes cut short
    pace: dict = field(default_factory=dict)  # {run folder's name: why} of those the pace check stopped

    @classmethod
    def load(cls, path: Path, forget: bool = False) -> "Cuts":
        """The record at `path`, or none; `forget` (--overwrite) removes it: the run resumes what was cut."""
        if forget:
            path.unlink(missing_ok=True)
            return cls(path)
        try:
            recorded = json.loads(path.read_text())
        except (OSError, ValueError):
            return cls(path)
        return cls(path, list(recorded.get("budget", [])), dict(recorded.get("pace", {})))

    def record(self, budget: list, pace: dict) -> None:
        self.budget = sorted(set(self.budget) | set(budget))
        self.pace = {**self.pace, **pace}
        write_json_atomic(self.path, {"budget": self.budget, "pace": self.pace})
