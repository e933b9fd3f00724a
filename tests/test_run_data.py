"""A run is bound to its data: a trainer run records the dataset's fingerprint and the shard set's key; a
resume on another set is refused in one line naming --overwrite (the same set copied elsewhere resumes)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.test_trainer_data import make_shard_set
from trainer import checkpoint
from trainer.config import ConfigError, config_for
from trainer.train import run

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def two_sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("bound")
    return (make_shard_set(root / "a", shard_links=(32, 16), eval_links=24, seed=0),
            make_shard_set(root / "b", shard_links=(32, 16), eval_links=24, seed=1))


def tiny(shards, out, **kw):
    kw = {"progress": False, "log_every": 1, "device": "cpu", "eval_splits": ("valid",), "threads": 1, "epochs": 4,
          **kw}
    return config_for("tiny", str(shards), str(out), data={"num_workers": 0}, **kw)


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_a_run_records_its_data_everywhere(two_sets, tmp_path):
    a, _ = two_sets
    run(tiny(a, tmp_path / "run", max_steps=2))
    want = {"dataset_fingerprint": "synthetic-data-0", "shard_set": "synthetic-0"}
    for data in (json.loads((tmp_path / "run" / "config.json").read_text())["data"],
                 json.loads((tmp_path / "run" / "summary.json").read_text())["config"]["data"],
                 checkpoint.load(tmp_path / "run" / "last.pt")["config"]["data"],
                 checkpoint.load(tmp_path / "run" / "best.pt")["config"]["data"]):
        assert {k: data[k] for k in want} == want


def test_resume_on_another_shard_set_is_refused_in_one_line(two_sets, tmp_path):
    a, b = two_sets
    out = tmp_path / "run"
    run(tiny(a, out, max_steps=2))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".lock"}
    with pytest.raises(ConfigError, match=r"--resume: .* was trained on other data \(dataset synthetic-data-0, "
                                          r"shard set synthetic-0\) than --shards .* \(dataset synthetic-data-1, "
                                          r"shard set synthetic-1\); pass --overwrite"):
        run(tiny(b, out, max_steps=4, resume=True))
    proc = subprocess.run([sys.executable, "-m", "trainer", "--shards", str(b), "--preset", "tiny", "--out", str(out),
                           "--device", "cpu", "--num-workers", "0", "--no-progress", "--threads", "1", "--resume",
                           "--max-steps", "4"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert proc.returncode == 1 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert errors[0].startswith("python -m trainer: error: --resume:") and "--overwrite" in errors[0]
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".lock"} == before
    assert run(tiny(b, out, max_steps=1, overwrite=True))["config"]["data"]["shard_set"] == "synthetic-1"


def test_the_same_set_copied_elsewhere_resumes_from_there(two_sets, tmp_path):
    a, _ = two_sets
    out = tmp_path / "run"
    run(tiny(a, out, max_steps=2))
    moved = shutil.copytree(a, tmp_path / "moved")
    summary = run(tiny(moved, out, max_steps=4, resume=True))
    assert summary["steps"] == 4 and summary["config"]["data"]["shards"] == str(moved)
