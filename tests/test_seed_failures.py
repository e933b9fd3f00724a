"""A recipe's seeds when a trainer dies: real trainers (`python -m trainer`, children of the one pool) on a tiny
shard set, one of them ended by tests/fault_hook right after its first evaluation or at start-up. A recipe
that may report a seed at its evaluated epochs (`partial`, the auto recipe's final seeds) does so, leaves out
a seed that evaluated nothing, and fails only when no seed has a result; one that may not fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipelines.core.seeds import result_record, seed_notes, seed_run, train_seeds
from pipelines.core.trainers import TrainerError
from tests.conftest import cpu_trainer_options
from tests.test_trainer_data import make_shard_set

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return make_shard_set(tmp_path_factory.mktemp("set"), shard_links=(32, 16), eval_links=24, seed=0)


def _die(monkeypatch, where: str, at: str = "") -> None:
    """Trainers whose --out contains `where` die (after their first evaluation, or at `at`=start)."""
    monkeypatch.setenv("PENCIL_TEST_TRAINER_DIE", where)
    monkeypatch.setenv("PENCIL_TEST_TRAINER_DIE_AT", at)
    paths = [str(ROOT / "tests" / "fault_hook"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


def _train(tmp_path: Path, shards: Path, partial: bool) -> dict:
    opts = cpu_trainer_options(tmp_path, "--train-arg=--max-steps=2")
    runs = {
        seed: seed_run(
            opts, "tiny", str(shards), "original", seed, tmp_path / "results" / f"seed{seed}", save_scores=True
        )
        for seed in (0, 1)
    }
    return train_seeds(opts, runs, partial=partial)


def test_a_seed_whose_trainer_dies_after_an_evaluation_is_judged_on_it(shards, tmp_path, monkeypatch, caplog):
    _die(monkeypatch, f"{os.sep}seed1")
    got = _train(tmp_path, shards, partial=True)
    assert sorted(got) == [0, 1] and got[0].failed is None and got[0].steps == 2
    assert got[1].best_epoch == 0 and got[1].epochs_completed == 1 and not got[1].stopped
    assert got[1].failed.startswith("seed 1: the trainer failed (") and "seed1/trainer.log" in got[1].failed
    assert got[1].valid["mrr"] > 0 and got[1].test["mrr"] > 0  # what the trainer evaluated before it died
    assert "seed 1: the trainer failed (" in caplog.text and "judged on its best evaluated epoch, 0" in caplog.text
    record = result_record("citeseer", "original", "tiny", 1, got[1], features=False)
    assert record["trainer_failed"] == got[1].failed and "stopped_by_budget" not in record
    whole = result_record("citeseer", "original", "tiny", 0, got[0], features=False)
    assert seed_notes([0, 1], [whole, record]) == [
        f"PENCIL w/o features, protocol original: seed 1's trainer failed ({got[1].failed}); reported at its best "
        "evaluated epoch"
    ]


def test_without_partial_a_dying_seed_fails_the_recipe(shards, tmp_path, monkeypatch):
    _die(monkeypatch, f"{os.sep}seed1")
    with pytest.raises(TrainerError, match=r"^seed 1: the trainer failed \(.*full log: .*seed1/trainer.log$"):
        _train(tmp_path, shards, partial=False)


def test_a_seed_that_dies_before_any_evaluation_is_left_out(shards, tmp_path, monkeypatch, caplog):
    _die(monkeypatch, f"{os.sep}seed1", at="start")
    got = _train(tmp_path, shards, partial=True)
    assert sorted(got) == [0]
    assert "before its first evaluation; left out of the report (a rerun resumes it)" in caplog.text
    notes = seed_notes([0, 1], [result_record("citeseer", "original", "tiny", 0, got[0], features=False)])
    assert notes == [
        "PENCIL w/o features, protocol original: seed 1 left out, no evaluated epoch (stopped by --budget-minutes "
        "or a failed trainer: the log says which); a rerun resumes it"
    ]


def test_seed_notes_name_what_the_table_lacks_and_nothing_else():
    """Hand-built records: a whole run gives no line; a stopped seed and a missing one give one line each, per
    protocol and model row; a blend row (it repeats its model's seeds) is not counted."""

    def rec(seed, protocol="kg", model="PENCIL", **extra):
        return {"seed": seed, "protocol": protocol, "model": model, **extra}

    whole = [rec(0), rec(1), rec(2), rec(0, model="PENCIL + RA prior", blend_of="PENCIL")]
    assert seed_notes([0, 1, 2], whole) == []
    cut = [rec(1), rec(2, stopped_by_budget=True), rec(1, "original", "PENCIL w/o features")]
    assert seed_notes([0, 1, 2], cut) == [
        "PENCIL, protocol kg: seed 0 left out, no evaluated epoch (stopped by --budget-minutes or a failed trainer: "
        "the log says which); a rerun resumes it",
        "PENCIL, protocol kg: seed 2 stopped by --budget-minutes, each reported at its best evaluated epoch; a "
        "rerun with a larger --budget-minutes resumes it",
        "PENCIL w/o features, protocol original: seeds 0, 2 left out, no evaluated epoch (stopped by "
        "--budget-minutes or a failed trainer: the log says which); a rerun resumes them",
    ]


def test_when_no_seed_has_a_result_the_failure_is_the_error(shards, tmp_path, monkeypatch):
    _die(monkeypatch, f"{os.sep}seed", at="start")
    with pytest.raises(TrainerError, match=r"^seed \d: the trainer failed \((\(no output\)|.*)\); full log: "):
        _train(tmp_path, shards, partial=True)
