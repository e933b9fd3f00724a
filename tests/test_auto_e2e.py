"""`--preset auto` end to end on a small geometric graph: selection is blind to test by construction (the same
choices when the test split's pairs are replaced by random ones), the search never opens a test shard or test
query file, and a rerun reuses every run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.graph_families import geo_splits, write_splits
from common.manifest import read_manifest
from tests.conftest import needs_ray


def _random_test(splits: dict, seed: int) -> dict:
    """The same train and valid rows; the test rows replaced by random pairs of the same nodes."""
    rng = np.random.default_rng(seed)
    n = int(max(p.max() for p in splits.values())) + 1
    known = {tuple(sorted(p)) for s in ("train", "valid") for p in splits[s].tolist()}
    test = []
    while len(test) < len(splits["test"]):
        u, v = sorted(rng.integers(0, n, 2).tolist())
        if u != v and (u, v) not in known:
            test.append((u, v))
            known.add((u, v))
    return {**splits, "test": np.array(test)}


def _run(tmp_path: Path, csv: Path, name: str, monkeypatch) -> dict:
    """pencil run on `csv` with every test file scrambled on disk from the moment its shard set is written
    until the search has chosen (the final seeds then read the real ones)."""
    from pipelines.auto import recipe
    from pipelines.run import main

    real_sets, real_final, moved = recipe.shard_sets, recipe.train_final_seeds, []

    def scrambled_sets(*a, **k):
        out = real_sets(*a, **k)
        rng = np.random.default_rng(0)
        for loc in out.values():
            for f in Path(loc).iterdir():
                if f.name.startswith(("test-", "graph-test-")):
                    data = f.read_bytes()  # same size: the trainer's start-up check (sizes) still passes
                    f.write_bytes(rng.integers(0, 256, size=len(data), dtype=np.uint8).tobytes())
                    moved.append((data, f))
        assert any(f.name == "test-original-queries.npz" for _, f in moved)
        return out

    def restored_final(*a, **k):
        for data, f in moved:
            f.write_bytes(data)
        return real_final(*a, **k)

    monkeypatch.setattr(recipe, "shard_sets", scrambled_sets)
    monkeypatch.setattr(recipe, "train_final_seeds", restored_final)
    argv = [
        "--dataset",
        str(csv),
        "--nodes",
        str(csv.with_name("nodes.csv")),
        "--seeds",
        "0,1",
        "--epochs",
        "3",
        "--out",
        str(tmp_path / name),
        "--shards",
        str(tmp_path / "shards"),
        "--num-cpus",
        "1",
        "--parallel-seeds",
        "2",
        "--train-arg=--hidden=32",
        "--train-arg=--ffn=64",
        "--train-arg=--heads=2",
    ]
    assert main(argv) == 0
    return json.loads((tmp_path / name / "geo" / "auto" / "original" / "search.json").read_text())


@pytest.mark.slow
@needs_ray
def test_selection_is_blind_to_test_and_a_rerun_reuses_every_run(tmp_path, monkeypatch):
    splits = geo_splits()
    real = _run(tmp_path, write_splits(tmp_path / "geo.csv", splits), "real", monkeypatch)
    (tmp_path / "shuffled").mkdir()
    fake = _run(tmp_path, write_splits(tmp_path / "shuffled" / "geo.csv", _random_test(splits, 1)), "fake", monkeypatch)
    for key in ("cid", "epochs", "best_epoch", "metric", "decision"):
        assert real["chosen"][key] == fake["chosen"][key], key

    def untimed(rungs):  # the rungs' values and epochs; their wall seconds depend on the machine's load
        return {
            r: {c: {k: v for k, v in x.items() if k != "train_time_s"} for c, x in cs.items()}
            for r, cs in rungs.items()
        }

    assert untimed(real["chosen"]["rungs"]) == untimed(fake["chosen"]["rungs"])
    assert real["blend"] == fake["blend"] and real["epochs"] == fake["epochs"] == 3
    # the blend decided on validation's pool (drawn from the training and validation edges: the same either way)
    pool = read_manifest(real["chosen"]["shards"]).eval["valid/original"]["valid_pool"]
    assert real["config"]["valid_pool"] == 8 and pool["pool"] == 8 * pool["negatives"]
    # the views hold three uniform negatives per positive (SearchConfig.neg_ratio; --epochs fixes the schedule)
    views = read_manifest(real["chosen"]["shards"]).config["candidates"]
    assert real["neg_ratio"] == views["neg_ratio"] == 3 and views["hard_neg_fraction"] == 0.0
    out = tmp_path / "real" / "geo" / "auto" / "original"
    for run in (out / "search").glob("*-*"):  # every candidate evaluated validation only
        evals = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"eval"' in x]
        assert evals and {e["split"] for e in evals} == {"valid"}
    seed0 = json.loads((out / "seed0" / "summary.json").read_text())
    assert seed0["weights_from"].startswith(str(out / "search")) and seed0["test"]["mrr"] > 0
    # a rerun: every run is reused (no trainer log grows) and the record is the same
    logs = {p: p.stat().st_size for p in out.rglob("trainer.log")}
    again = _run(tmp_path, tmp_path / "geo.csv", "real", monkeypatch)
    assert again["chosen"] == real["chosen"] and again["blend"] == real["blend"]
    assert {p: p.stat().st_size for p in out.rglob("trainer.log")} == logs


@pytest.mark.slow
@needs_ray
def test_a_candidate_whose_trainer_dies_before_its_summary_leaves_a_run_that_completes(tmp_path):
    """The `deep` candidate's trainer exits right after its first evaluation, every time it starts (a real
    trainer, stopped by tests/fault_hook): the run still completes, with a choice, and search.json says what
    happened to it."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    csv = write_splits(tmp_path / "geo.csv", geo_splits())
    env = {
        **os.environ,
        "PENCIL_TEST_TRAINER_DIE": "deep-d2n10",
        "PYTHONPATH": os.pathsep.join(
            [str(root / "tests" / "fault_hook"), str(root), os.environ.get("PYTHONPATH", "")]
        ),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.run",
            "--dataset",
            str(csv),
            "--nodes",
            str(csv.with_name("nodes.csv")),
            "--seeds",
            "0",
            "--epochs",
            "2",
            "--out",
            str(tmp_path / "r"),
            "--shards",
            str(tmp_path / "shards"),
            "--num-cpus",
            "1",
            "--train-arg=--hidden=32",
            "--train-arg=--ffn=64",
            "--train-arg=--heads=2",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((tmp_path / "r" / "geo" / "auto" / "original" / "search.json").read_text())
    deep = record["chosen"]["rungs"]["grace"]["deep-d2n10"]
    assert "deep-d2n10" in record["chosen"]["failed"] and deep["best_epoch"] == 0 and deep["stopped"]
    assert record["chosen"]["cid"] in ("default-d1n20", "deep-d2n10", "wide-d1n50")
    assert "the trainer failed" in proc.stderr
    assert (tmp_path / "r" / "geo" / "auto" / "report.md").exists()
