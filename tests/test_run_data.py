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
from trainer.config import config_for
from trainer.config_sections import ConfigError
from trainer.train import run

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def two_sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("bound")
    return (
        make_shard_set(root / "a", shard_links=(32, 16), eval_links=24, seed=0),
        make_shard_set(root / "b", shard_links=(32, 16), eval_links=24, seed=1),
    )


def tiny(shards, out, **kw):
    kw = {
        "progress": False,
        "log_every": 1,
        "device": "cpu",
        "eval_splits": ("valid",),
        "threads": 1,
        "epochs": 4,
        **kw,
    }
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
    for data in (
        json.loads((tmp_path / "run" / "config.json").read_text())["data"],
        json.loads((tmp_path / "run" / "summary.json").read_text())["config"]["data"],
        checkpoint.load(tmp_path / "run" / "last.pt")["config"]["data"],
        checkpoint.load(tmp_path / "run" / "best.pt")["config"]["data"],
    ):
        assert {k: data[k] for k in want} == want


def test_resume_on_another_shard_set_is_refused_in_one_line(two_sets, tmp_path):
    a, b = two_sets
    out = tmp_path / "run"
    run(tiny(a, out, max_steps=2))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".lock"}
    with pytest.raises(
        ConfigError,
        match=r"--resume: .* was trained on other data \(dataset synthetic-data-0, "
        r"shard set synthetic-0\) than --shards .* \(dataset synthetic-data-1, "
        r"shard set synthetic-1\); pass --overwrite",
    ):
        run(tiny(b, out, max_steps=4, resume=True))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "--shards",
            str(b),
            "--preset",
            "tiny",
            "--out",
            str(out),
            "--device",
            "cpu",
            "--num-workers",
            "0",
            "--no-progress",
            "--threads",
            "1",
            "--resume",
            "--max-steps",
            "4",
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
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


# ---------------------------------------------------------------------------- a recipe's seed folders
def train_on(tmp_path, shards, runs, *argv):
    """pencil run's seeds (its trainer options, as its flags give them) on the set at `shards`."""
    from pipelines.core.seeds import seed_run, train_seeds
    from tests.conftest import cpu_trainer_options

    opts = cpu_trainer_options(tmp_path, "--train-arg=--max-steps=2", *argv)
    return train_seeds(
        opts, {seed: seed_run(opts, "tiny", str(shards), "original", seed, d) for seed, d in runs.items()}
    )


def test_a_seed_folder_on_other_data_is_refused_then_retrained_with_overwrite(two_sets, tmp_path):
    from pipelines.core.seed_data import SeedDataError

    a, b = two_sets
    runs = {0: tmp_path / "results" / "seed0"}
    first = train_on(tmp_path, a, runs)
    assert first[0].config["data"]["shard_set"] == "synthetic-0"
    again = train_on(tmp_path, a, runs)  # same data: reused untouched
    assert again == first
    with pytest.raises(
        SeedDataError,
        match=r"seed0: holds a run trained on other data \(dataset synthetic-data-0, "
        r"shard set synthetic-0; this run's: dataset synthetic-data-1, shard set "
        r"synthetic-1\); pass --overwrite to retrain it on this data",
    ):
        train_on(tmp_path, b, runs)
    redone = train_on(tmp_path, b, runs, "--overwrite")
    assert redone[0].config["data"]["shard_set"] == "synthetic-1" and redone[0].steps == 2


def _edges(path: Path, n: int, chords: int, seed: int) -> Path:
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = {(i, (i + 1) % n) for i in range(n)}
    while len(rows) < n + chords:
        u, v = (int(x) for x in rng.integers(0, n, 2))
        if u != v and (v, u) not in rows:
            rows.add((u, v))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("src,dst\n" + "".join(f"{u},{v}\n" for u, v in sorted(rows)))
    return path


@pytest.mark.slow  # two preprocessing jobs (embedded Ray) and two short trainings: about a minute
def test_pipelines_run_on_a_changed_edge_list_refuses_the_old_seed(tmp_path):
    """The same file name in two folders, two graphs: the second run once printed the first run's test numbers."""
    from tests.conftest import HAS_RAY

    if not HAS_RAY:
        pytest.skip("ray is not installed")

    def pipeline(dataset, *extra):
        cmd = [
            sys.executable,
            "-m",
            "pipelines.run",
            "--dataset",
            str(dataset),
            "--preset",
            "tiny",
            "--seeds",
            "0",
            "--out",
            str(tmp_path / "res"),
            "--shards",
            str(tmp_path / "shards"),
            "--num-cpus",
            "1",
            "--device",
            "cpu",
            "--train-arg=--max-steps=3",
            "--train-arg=--num-workers=0",
            *extra,
        ]
        return subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)

    y1 = _edges(tmp_path / "y1" / "edges.csv", 120, 200, seed=1)
    y2 = _edges(tmp_path / "y2" / "edges.csv", 40, 40, seed=2)
    assert (first := pipeline(y1)).returncode == 0, first.stderr[-3000:]
    seed_dir = tmp_path / "res" / "edges" / "tiny" / "original" / "seed0"
    before = {p.name: p.read_bytes() for p in seed_dir.iterdir() if p.is_file() and p.name != ".lock"}
    second = pipeline(y2)
    errors = [line for line in second.stderr.splitlines() if "error:" in line]
    assert second.returncode == 1 and len(errors) == 1 and "Traceback" not in second.stderr, second.stderr[-3000:]
    assert f"{seed_dir}: holds a run trained on other data" in errors[0] and "pass --overwrite" in errors[0]
    assert {p.name: p.read_bytes() for p in seed_dir.iterdir() if p.is_file() and p.name != ".lock"} == before
    assert (third := pipeline(y2, "--overwrite")).returncode == 0, third.stderr[-3000:]
    old, new = json.loads(before["config.json"]), json.loads((seed_dir / "config.json").read_text())
    assert new["data"]["dataset_fingerprint"] != old["data"]["dataset_fingerprint"]
