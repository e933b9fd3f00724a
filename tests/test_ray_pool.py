"""The cluster path's one-line failure: a trainer whose node is lost with no retry left ends the run in one line
naming its log (pipelines.core.trainers reads the log's last line), never a hang. The cluster itself is
exercised end to end in tests/test_cluster_run.py (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.core import trainers
from pipelines.core.ray_pool import ClusterTrainer, on_cluster
from pipelines.core.trainers import TrainerRun


def lost_handle(tmp_path: Path) -> ClusterTrainer:
    """A handle whose node is gone and whose retries are spent (no Ray: _lost needs none then)."""
    handle = ClusterTrainer.__new__(ClusterTrainer)
    job = TrainerRun(run_dir=tmp_path / "seed1", shards="s", preset="tiny", seed=1, protocol="original")
    handle.key, handle.job, handle.returncode, handle.retries, handle.node = "seed 1", job, None, 0, "ab12"
    return handle


def test_a_lost_node_with_no_retry_left_fails_the_trainer_in_one_line(tmp_path, monkeypatch):
    handle = lost_handle(tmp_path)
    assert handle._lost(RuntimeError("The actor died\nbecause its node died")) == 1 and handle.poll() == 1
    monkeypatch.setattr(trainers, "_start", lambda key, job: handle)
    with pytest.raises(trainers.TrainerError) as err:
        trainers.run_trainers({"seed 1": handle.job}, 1)
    (line,) = str(err.value).splitlines()
    assert "the Ray node ab12 running this trainer was lost (The actor died because its node died)" in line
    assert str(handle.job.log) in line


def test_without_ray_address_the_pool_stays_local(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not on_cluster() and trainers.device_kind("cpu") == "cpu" and trainers.trainer_slots("cpu", 3) == 3


def test_the_driver_shows_each_validation_once_and_never_a_test_score(tmp_path, caplog):
    """Progress from the trainer's metrics.jsonl on shared storage: each validation record once, as it lands; a
    half-written line waits for the next poll; test records are not shown mid-run."""
    handle = lost_handle(tmp_path)
    handle.job.run_dir.mkdir()
    handle._read, path = 0, handle.job.run_dir / "metrics.jsonl"
    valid = '{"event": "eval", "epoch": 0, "split": "valid", "mrr": 0.2319}\n'
    test = '{"event": "eval", "epoch": 0, "split": "test", "mrr": 0.9}\n'
    path.write_text('{"event": "train", "epoch": 0, "loss": 0.6}\n' + valid + test + '{"event": "eval", "ep')
    caplog.set_level("INFO", logger="pipelines")
    handle._progress()
    assert [r.getMessage() for r in caplog.records] == ["trainer seed 1 on node ab12: epoch 0, valid mrr 23.19"]
    with open(path, "a") as f:
        f.write('och": 1, "split": "valid", "mrr": 0.25}\n')
    caplog.clear()
    handle._progress()
    handle._progress()
    assert [r.getMessage() for r in caplog.records] == ["trainer seed 1 on node ab12: epoch 1, valid mrr 25.00"]
