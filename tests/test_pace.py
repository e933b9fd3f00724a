"""The search's pace check (pipelines.auto.pace): the last step read from a live metrics.jsonl, the projection
on hand-computed values, the watcher's rule, and the trainer pool stopping a real child when told to."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pipelines.auto.pace import MIN_STEPS, GracePace, last_step, projected_end
from pipelines.core import trainers
from pipelines.core.trainers import TrainerRun, run_trainers


def write_lines(run_dir: Path, *records: dict, torn: str = "") -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records) + torn)


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_last_step_is_the_last_train_line_past_evals_and_a_torn_line(tmp_path):
    assert last_step(tmp_path) is None  # no file yet
    write_lines(tmp_path, {"event": "eval", "step": 0, "epoch": 0, "split": "valid"})
    assert last_step(tmp_path) is None  # no train line yet
    write_lines(
        tmp_path,
        {"event": "train", "step": 10, "epoch": 0, "loss": 0.6},
        {"event": "train", "step": 20, "epoch": 0, "loss": 0.5},
        {"event": "eval", "step": 20, "epoch": 0, "split": "valid"},
        torn='{"event": "train", "step": 3',
    )
    assert last_step(tmp_path) == 20


def test_projected_end_on_hand_computed_values():
    # 40 steps in 20 s: 2 steps/s; 100 steps left from step 50 take 50 s more, from t=30
    assert projected_end((10.0, 10), (30.0, 50), 150) == pytest.approx(80.0)
    assert projected_end((10.0, 10), (30.0, 50), 40) == pytest.approx(30.0)  # already past the target
    assert projected_end((10.0, 10), (30.0, 10 + MIN_STEPS - 1), 150) is None  # too few steps to tell
    assert projected_end((10.0, 10), (10.0, 50), 150) is None  # no time passed


def test_the_watcher_stops_a_slow_alternative_and_never_the_default(tmp_path):
    clock = Clock()
    pace = GracePace({"deep": (tmp_path / "deep", 200)}, deadline=clock.now + 60, clock=clock)
    write_lines(tmp_path / "deep", {"event": "train", "step": 10})
    assert pace("deep") is None and pace.first["deep"] == (1000.0, 10)  # timed from the first line seen
    clock.now += 10
    write_lines(tmp_path / "deep", {"event": "train", "step": 20})
    assert pace("deep") is None  # 10 steps: too few to tell
    clock.now += 10  # 20 steps in 20 s: step 200 at 1020 + 170 s, past the deadline (1060)
    write_lines(tmp_path / "deep", {"event": "train", "step": 30})
    why = pace("deep")
    assert why and why.startswith("deep: at 1.0 steps/s its grace period (step 200) would end 130 s after")
    assert pace.skipped == {"deep": why}
    assert pace("default") is None  # not a target: the default always trains


def test_a_fast_enough_alternative_is_left_alone(tmp_path):
    clock = Clock()
    pace = GracePace({"wide": (tmp_path / "wide", 100)}, deadline=clock.now + 60, clock=clock)
    for step in range(10, 100, 10):  # 10 steps/s: step 100 long before the deadline
        write_lines(tmp_path / "wide", {"event": "train", "step": step})
        assert pace("wide") is None
        clock.now += 1
    assert pace.skipped == {}


def test_the_pool_stops_a_running_child_its_watcher_names(tmp_path, monkeypatch):
    """Real children: the watched one sleeps a minute and is stopped at once; the other finishes; neither counts
    as failed or as stopped by the budget."""

    def command(run):  # sleeps (a minute when slow), then leaves a file saying it finished
        done = Path(run.run_dir) / "done"
        nap = 60 if Path(run.run_dir).name == "slow" else 0
        return [sys.executable, "-c", f"import time, pathlib; time.sleep({nap}); pathlib.Path({str(done)!r}).touch()"]

    monkeypatch.setattr(trainers, "trainer_command", command)
    jobs = {k: TrainerRun(tmp_path / k, "shards", "general", 0, "original") for k in ("slow", "quick")}
    asked = []

    def watch(key):
        asked.append(key)
        return "too slow" if key == "slow" else None

    failed: dict = {}
    wall, stopped = run_trainers(jobs, 2, failed=failed, watch=watch)
    assert set(wall) == {"slow", "quick"} and stopped == [] and failed == {} and "slow" in asked
    assert (tmp_path / "quick" / "done").exists() and not (tmp_path / "slow" / "done").exists()
