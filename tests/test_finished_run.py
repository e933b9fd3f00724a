"""A finished `--preset auto` run is final: a rerun of the same command after the budget cut a final seed short
reports the same numbers (results.json and report.md byte for byte) and starts no trainer; the same command with
another flag is refused in one line naming --overwrite.

The budget cut is simulated by the mechanism the recipe uses (pipelines.core.trainers.run_trainers' `stop_at`
and `clock`): the final seed's clock reads past the deadline once the seed has evaluated its first epoch, so the
cut lands at the same place every time instead of at a wall-clock moment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.graph_families import geo_splits, write_splits
from tests.conftest import needs_ray
from tests.test_auto_search import FakeRuns, _search, rising


class CutInSecondRung(FakeRuns):
    """Fake trainers (tests/test_auto_search.py) where the budget cuts `cut` in the second rung before it trains
    a step: it keeps its grace period's run, as a real one cut there does."""

    def __init__(self, curves: dict, cut: tuple = ()):
        super().__init__(curves)
        self.cut = cut

    def trainers(self, jobs, slots, stop_at=None, clock=None, failed=None, watch=None):
        cut = [k for k, j in jobs.items() if "--patience" in j.flags() and self.name(Path(j.run_dir)) in self.cut]
        self.jobs += [jobs[k].flags() for k in cut]
        wall, _ = super().trainers({k: j for k, j in jobs.items() if k not in cut}, slots, stop_at, clock, failed)
        return wall, cut


def test_a_candidate_the_budget_cut_stays_judged_as_it_was_on_a_rerun(tmp_path, monkeypatch):
    """`deep` leads after its grace period, then the budget cuts it: the default is chosen. A rerun of the search
    trains nothing and chooses the same; resumed, `deep` would have won."""
    curves = {"default": rising(0.5, 5), "deep": rising(0.7, 6), "wide": rising(0.4, 5)}
    first = _search(tmp_path, monkeypatch, CutInSecondRung(curves, cut=("deep",))).run(1000).to_dict()
    assert first["cut_short"] == ["deep-d2n10"] and first["cid"] == "default-d1n20"
    again = FakeRuns(curves)
    assert _search(tmp_path, monkeypatch, again).run(1000).to_dict() == first
    assert again.jobs == []


def _argv(tmp_path: Path, csv: Path, *extra: str) -> list[str]:
    return [
        "--dataset",
        str(csv),
        "--nodes",
        str(csv.with_name("nodes.csv")),
        "--seeds",
        "1",
        "--epochs",
        "3",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "res"),
        "--shards",
        str(tmp_path / "shards"),
        "--num-cpus",
        "1",
        "--parallel-seeds",
        "1",
        "--train-arg=--hidden=32",
        "--train-arg=--ffn=64",
        "--train-arg=--heads=2",
        *extra,
    ]


def _cut_after_first_eval(monkeypatch) -> None:
    """The final seeds' pool: its clock passes the deadline once seed 1 has evaluated an epoch (its metrics line
    and its saved scores, which pipelines.core.stopped judges it on)."""
    from common.eval_scores import scores_path
    from pipelines.core import seeds

    real = seeds.run_trainers

    def evaluated(job) -> bool:
        metrics = Path(job.run_dir) / "metrics.jsonl"
        saved = scores_path(Path(job.run_dir), "valid", job.protocol).exists()
        return saved and metrics.exists() and '"split": "valid"' in metrics.read_text()

    def cut(jobs, slots, stop_at=None, clock=None, **kw):
        return real(jobs, slots, 1.0, lambda: 2.0 if any(map(evaluated, jobs.values())) else 0.0, **kw)

    monkeypatch.setattr(seeds, "run_trainers", cut)


@pytest.mark.slow
@needs_ray
def test_a_rerun_of_a_finished_run_cut_by_the_budget_changes_nothing(tmp_path, monkeypatch, capsys):
    from pipelines.core import trainers
    from pipelines.run import main

    csv = write_splits(tmp_path / "geo.csv", geo_splits())
    out = tmp_path / "res" / "geo" / "auto"
    with monkeypatch.context() as m:
        _cut_after_first_eval(m)
        assert main(_argv(tmp_path, csv)) == 0
    record = json.loads((out / "original" / "seed1" / "result.json").read_text())
    assert record.get("stopped_by_budget"), record  # the cut landed
    before = {name: (out / name).read_bytes() for name in ("results.json", "report.md")}
    assert b"seed 1 stopped by --budget-minutes, each reported at its best evaluated epoch" in before["report.md"]

    started = []
    real_start = trainers._start
    monkeypatch.setattr(trainers, "_start", lambda key, job: started.append(key) or real_start(key, job))
    assert main(_argv(tmp_path, csv)) == 0
    assert started == []
    assert {name: (out / name).read_bytes() for name in ("results.json", "report.md")} == before
    capsys.readouterr()

    # another flag would change the finished report: refused in one line, before any work
    assert main(_argv(tmp_path, csv, "--metric", "auc")) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "--overwrite" in errors[0] and str(out) in errors[0], errors
    assert started == [] and {name: (out / name).read_bytes() for name in ("results.json", "report.md")} == before
