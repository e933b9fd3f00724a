"""A file path never decides a dataset's identity: an edge list saved as citeseer.csv is the user's graph
(preset auto, no paper rows in its report); paper datasets are chosen by name only. And pipelines.run's
own refusals: --budget-minutes under a fixed preset, a second run on the same results folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from common.datasets import DatasetSpec, load_dataset
from pipelines.core.results import aggregate, markdown

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def random_graph(path: Path, n: int = 120, m: int = 400, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    rows = {(int(a), int(b)) for a, b in rng.integers(0, n, (m, 2)) if a != b}
    path.write_text("src,dst\n" + "".join(f"{a},{b}\n" for a, b in sorted(rows)))
    return path


def args_for(tmp_path, dataset, *extra):
    from tests.conftest import run_config

    return run_config(
        "--dataset", dataset, "--out", tmp_path / "r", "--shards", tmp_path / "s", "--device", "cpu", *extra
    )


def test_a_file_named_like_a_paper_dataset_is_the_users_graph(tmp_path):
    from pipelines.run import pick_preset

    own = load_dataset(DatasetSpec(str(random_graph(tmp_path / "citeseer.csv"))))
    assert own.name == "citeseer" and own.own and own.num_nodes <= 120
    assert pick_preset(args_for(tmp_path, tmp_path / "citeseer.csv"), own) == "auto"
    paper = load_dataset(DatasetSpec("citeseer"))  # by name: the shipped paper dataset and its CPU preset
    assert not paper.own and paper.num_nodes == 3327
    assert pick_preset(args_for(tmp_path, "citeseer"), paper) == "citeseer-small"


def test_a_heart_folder_given_by_path_is_the_users_graph(tmp_path):
    folder = tmp_path / "cora"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for name, k in (("train_pos", 60), ("valid_pos", 6), ("valid_neg", 6), ("test_pos", 6), ("test_neg", 6)):
        np.savetxt(folder / f"{name}.txt", rng.integers(0, 40, (k, 2)), fmt="%d")
    ds = load_dataset(DatasetSpec(str(folder)))
    assert ds.name == "cora" and ds.own


def _record(dataset: str, own: bool, mrr: float) -> dict:
    record = {
        "dataset": dataset,
        "protocol": "original",
        "model": "PENCIL w/o features",
        "seed": 0,
        "test": {"mrr": mrr},
    }
    return {**record, "own_graph": True} if own else record


def test_the_report_shows_the_papers_rows_beside_the_paper_dataset_only():
    rows = aggregate([_record("citeseer", True, 0.10), _record("citeseer", False, 0.40)])
    assert [(r["dataset"], r.get("own_graph", False), round(r["mrr"][0], 2)) for r in rows] == [
        ("citeseer", False, 40.0),
        ("citeseer", True, 10.0),
    ]  # two rows, never one mean of both
    table = markdown(rows)
    assert table.count("(paper)") == 5  # PENCIL, PENCIL w/o features, CN, AA, RA, once: beside the paper's citeseer
    paper_rows = [i for i, line in enumerate(table.splitlines()) if "(paper)" in line]
    own_row = next(i for i, line in enumerate(table.splitlines()) if "| 10.00 ± 0.00" in line)
    assert own_row > max(paper_rows)  # the user's citeseer comes after them, with none of its own
    own_only = markdown(aggregate([_record("citeseer", True, 0.10)]))
    assert "(paper)" not in own_only and "| citeseer | original | PENCIL w/o features | 1 | 10.00 ± 0.00" in own_only


def _run(tmp_path, *argv) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "pipelines.run",
        "--out",
        str(tmp_path / "res"),
        "--shards",
        str(tmp_path / "sh"),
        "--device",
        "cpu",
        "--num-cpus",
        "1",
        *argv,
    ]
    return subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)


def _error(proc) -> str:
    errors = [line for line in proc.stderr.splitlines() if " error: " in line]
    assert proc.returncode != 0 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return errors[0]


def test_budget_minutes_under_a_fixed_preset_is_refused(tmp_path):
    proc = _run(tmp_path, "--dataset", "citeseer", "--budget-minutes", "5")
    assert (
        "--budget-minutes 5: bounds --preset auto's search; preset citeseer-small trains its fixed configuration"
    ) in _error(proc)
    assert not (tmp_path / "sh").exists()  # refused before any preprocessing


def test_a_second_run_on_the_same_results_folder_is_refused(tmp_path):
    from trainer.run_folder import locked

    with locked(tmp_path / "res" / "citeseer" / "tiny", "pipelines.run", "--out"):
        proc = _run(tmp_path, "--dataset", "citeseer", "--preset", "tiny")
    assert f"another pipelines.run (pid {os.getpid()}) is running in this folder" in _error(proc)
    assert not (tmp_path / "sh").exists()


def test_a_checkpoint_that_is_not_one_names_the_flag_not_a_deletion(tmp_path):
    edges = random_graph(tmp_path / "edges.csv")
    (tmp_path / "p.csv").write_text("src,dst\n1,2\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.score",
            "--checkpoint",
            str(edges),
            "--pairs",
            str(tmp_path / "p.csv"),
            "--out",
            str(tmp_path / "s.parquet"),
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = _error(proc)
    assert (
        f"{edges}: not a readable checkpoint" in line
        and "pass a run folder, or its best.pt or last.pt, as --checkpoint" in line
        and "delete" not in line
    ), line
    assert edges.exists()


def test_a_file_that_is_no_checkpoint_is_said_plainly(tmp_path):
    """A file torch refuses under weights_only (a pickle of other objects): one plain line, no internal note of
    PyTorch's, nothing cut mid-word."""
    import pickle

    bad = tmp_path / "best.pt"
    bad.write_bytes(pickle.dumps({"model": object}))
    (tmp_path / "p.csv").write_text("src,dst\n1,2\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.score",
            "--checkpoint",
            str(bad),
            "--pairs",
            str(tmp_path / "p.csv"),
            "--out",
            str(tmp_path / "s.parquet"),
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = _error(proc)
    assert f"{bad}: not a readable checkpoint: it holds objects other than tensors and plain data" in line, line
    assert "PyTorch 2.6" not in line and "weights_only` argument" not in line
    assert line.endswith("pass a run folder, or its best.pt or last.pt, as --checkpoint"), line


def test_a_graph_too_dense_for_its_views_takes_fewer_positives_per_view():
    """pencil run has no --percent: on a graph with fewer training non-edges than training positives, each view
    takes as many positives as there are distinct non-edges to pair them with (check_view_size then passes)."""
    from common.graph import Graph
    from common.presets import get_preset
    from pipelines.core.shard_sets import view_percent
    from preprocess.candidates import check_view_size

    train = np.array([(a, b) for a in range(10) for b in range(a + 1, 10)][:32])  # 13 non-edges left
    graph = Graph.from_edges(train, num_nodes=10)
    percent = view_percent(get_preset("general"), len(train), "cuda", graph)
    assert percent == 40.62
    check_view_size(len(train), percent, 1, graph)
    sparse = Graph.from_edges(train[:5], num_nodes=10)
    assert view_percent(get_preset("general"), 5, "cuda", sparse) == get_preset("general").train_percent
