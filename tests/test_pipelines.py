"""End to end on a tiny preset: pipelines.run (preprocess → train → evaluate → report), then scoring."""

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tests.conftest import cached_set
from trainer.run_summary import RunSummary

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory, shard_cache):
    """Two seeds of the tiny preset, 60 steps each, on CPU (the thresholds below were measured there)."""
    tmp = tmp_path_factory.mktemp("e2e")
    cmd = [
        sys.executable,
        "-m",
        "pipelines.run",
        "--dataset",
        "citeseer",
        "--preset",
        "tiny",
        "--seeds",
        "0,1",
        "--out",
        str(tmp / "results"),
        "--shards",
        str(cached_set(shard_cache, "citeseer-tiny")),
        "--num-cpus",
        "2",
        "--views",
        "1",
        "--device",
        "cpu",
        "--train-arg=--max-steps=60",
        "--train-arg=--num-workers=0",
        "--train-arg=--no-progress",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (tmp / "run.stderr").write_text(proc.stderr)
    return tmp, proc.stdout


def adamic_adar_auc_ap() -> tuple[float, float]:
    """AA on citeseer's test pairs (training graph), from its definition: the sum over common neighbours w
    of 1 / log(deg w); AUC as the share of (positive, negative) pairs the positive wins (ties half), AP as
    the mean over positives, taken best first, of the precision at that positive's score (ties together)."""
    import scipy.sparse as sp

    from common.datasets import DatasetSpec, load_dataset

    ds = load_dataset(DatasetSpec("citeseer"))
    g, split = ds.graph_for("test"), ds.splits["test"]
    adj = sp.csr_matrix((np.ones(len(g.indices)), g.indices, g.indptr), shape=(g.num_nodes, g.num_nodes))
    deg = np.asarray(adj.sum(1)).ravel()
    weight = np.where(deg > 1, 1.0 / np.log(np.maximum(deg, 2)), 0.0)

    def aa(pairs):
        return np.asarray(adj[pairs[:, 0]].multiply(adj[pairs[:, 1]]) @ weight).ravel()

    pos, neg = aa(split.pos), aa(split.negatives("original"))
    auc = float(np.mean((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])))
    precision = [(np.sum(pos >= t) / (np.sum(pos >= t) + np.sum(neg >= t))) for t in pos]
    return auc, float(np.mean(precision))


def proc_log(tmp) -> str:
    return (tmp / "run.stderr").read_text()


def test_pipeline_writes_results_table_and_plots(pipeline_run):
    tmp, stdout = pipeline_run
    out = tmp / "results" / "citeseer" / "tiny"  # results/<dataset>/<preset>
    results = json.loads((out / "results.json").read_text())
    assert sorted(r["seed"] for r in results["runs"]) == [0, 1]
    # A scorer that knows nothing ranks each test positive uniformly among the Q+1 places of citeseer's
    # original protocol (455 shared negatives): MRR = H(Q+1)/(Q+1) = 1.47 %, Hits@100 = 100/(Q+1) = 21.9 %.
    # 60 steps of the tiny model must beat that clearly (measured seed 0: 13.4 % MRR, 55.6 % Hits@100;
    # after 15 steps it was still at chance, so fewer steps would test nothing).
    q = 455
    random_mrr = sum(1 / r for r in range(1, q + 2)) / (q + 1)
    for r in results["runs"]:
        assert r["test"]["mrr"] > 3 * random_mrr, r["test"]
        assert r["test"]["hits@100"] > 1.5 * 100 / (q + 1), r["test"]
        assert r["best_epoch"] is not None
        # AUC / AP of the 455 test positives against the 455 shared negatives, at the best validation epoch:
        # above chance (AUC 1/2, AP 1/2 for a balanced split); measured seed 0: ~ 0.8 AUC.
        assert 0.6 < r["test"]["auc"] <= 1.0 and 0.55 < r["test"]["ap"] <= 1.0, r["test"]
        assert set(r["valid"]) >= {"mrr", "auc", "ap"}
        assert json.loads((out / "original" / f"seed{r['seed']}" / "result.json").read_text()) == r
    # The PENCIL row is the mean and sample std (in %) of the per-seed numbers.
    row = next(row for row in results["table"] if row["model"] == "PENCIL w/o features")
    values = [100 * r["test"]["mrr"] for r in results["runs"]]
    assert row["mrr"] == pytest.approx([np.mean(values), np.std(values, ddof=1)])
    for metric in ("auc", "ap"):
        values = [100 * r["test"][metric] for r in results["runs"]]
        assert row[metric] == pytest.approx([np.mean(values), np.std(values, ddof=1)])
    models = [row["model"] for row in results["table"]]
    assert models == ["PENCIL w/o features", "CN", "AA", "RA"]
    # The heuristics beside it are the exact paper numbers (same split, same protocol code).
    aa = next(row for row in results["table"] if row["model"] == "AA")
    assert round(aa["mrr"][0], 2) == 29.37
    # ... and their AUC / AP beside it, against Adamic-Adar, AUC and AP computed here from their definitions
    want = adamic_adar_auc_ap()
    assert aa["auc"] == pytest.approx([100 * want[0], 0.0]) and aa["ap"] == pytest.approx([100 * want[1], 0.0])
    assert 60 < aa["auc"][0] < 75  # ~35 % of the positives share a neighbour, almost no negative does
    header = next(line for line in stdout.splitlines() if line.startswith("| dataset |"))
    assert header.split("|")[-3:-1] == [" auc ", " ap "]
    pencil_line = next(line for line in stdout.splitlines() if "| PENCIL w/o features | 2 |" in line)
    assert pencil_line.split("|")[-3].strip() == f"{row['auc'][0]:.2f} ± {row['auc'][1]:.2f}"
    assert (out / "report.md").read_text() in stdout
    assert "| citeseer | original | PENCIL w/o features | 2 |" in stdout
    assert "PENCIL w/o features (paper) | – | 47.51 ± 3.09" in stdout
    for png in ("training_loss.png", "mrr_per_epoch.png"):
        assert (out / "original" / png).read_bytes()[:4] == b"\x89PNG"
    # per-epoch valid and test AUC / AP are logged (test whenever validation improved)
    evals = [
        json.loads(line)
        for line in (out / "original" / "seed0" / "metrics.jsonl").read_text().splitlines()
        if '"eval"' in line
    ]
    assert {e["split"] for e in evals} == {"valid", "test"} and all("auc" in e and "ap" in e for e in evals)
    # On a CPU machine with 2+ cores the two seeds train at once, each in its own trainer process.
    import os

    import torch

    if not torch.cuda.is_available() and len(os.sched_getaffinity(0)) >= 2:
        for seed in (0, 1):
            assert "training seed %d (log: " % seed in proc_log(tmp)
            assert (out / "original" / f"seed{seed}" / "trainer.log").exists()


def test_rerun_reuses_shards_and_finished_runs(pipeline_run, shard_cache):
    tmp, _ = pipeline_run
    seed_dir = tmp / "results" / "citeseer" / "tiny" / "original" / "seed0"
    before = _snapshot(seed_dir)
    assert {"best.pt", "last.pt", "summary.json", "metrics.jsonl"} <= set(before)
    cmd = [
        sys.executable,
        "-m",
        "pipelines.run",
        "--dataset",
        "citeseer",
        "--preset",
        "tiny",
        "--seeds",
        "0",
        "--out",
        str(tmp / "results"),
        "--shards",
        str(cached_set(shard_cache, "citeseer-tiny")),
        "--num-cpus",
        "2",
        "--views",
        "1",
        "--device",
        "cpu",
        "--train-arg=--max-steps=60",
        "--train-arg=--num-workers=0",
        "--train-arg=--no-progress",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "shards reused" in proc.stderr
    assert "sampling:" not in proc.stderr  # no progress bar: nothing was sampled again
    # The finished seed was not trained again: a retrained seed appends to its metrics log and rewrites its best
    # checkpoint, so both must be untouched, bytes and mtime (the whole folder: the strict xfail below).
    after = _snapshot(seed_dir)
    assert {k: after[k] for k in ("best.pt", "metrics.jsonl")} == {k: before[k] for k in ("best.pt", "metrics.jsonl")}


def test_rerun_leaves_a_finished_run_folder_untouched(pipeline_run, shard_cache):
    """A finished seed is reused as it is (pipelines.core.finished), not relaunched with --resume, which
    trained no step but rewrote last.pt, summary.json and config.json."""
    tmp, _ = pipeline_run
    seed_dir = tmp / "results" / "citeseer" / "tiny" / "original" / "seed1"
    before = _snapshot(seed_dir)
    cmd = [
        sys.executable,
        "-m",
        "pipelines.run",
        "--dataset",
        "citeseer",
        "--preset",
        "tiny",
        "--seeds",
        "1",
        "--out",
        str(tmp / "results"),
        "--shards",
        str(cached_set(shard_cache, "citeseer-tiny")),
        "--num-cpus",
        "2",
        "--views",
        "1",
        "--device",
        "cpu",
        "--train-arg=--max-steps=60",
        "--train-arg=--num-workers=0",
        "--train-arg=--no-progress",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert _snapshot(seed_dir) == before


def _snapshot(folder) -> dict:
    """name -> (mtime_ns, sha256) of every file under folder."""
    import hashlib

    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _score(tmp, pairs_file, out, *extra):
    """pipelines.score on the fixture's seed 0, on CPU: the equality checks below are bit for bit, which CUDA's
    scatter (index_add_ in trainer/model/propagation.py) does not promise."""
    cmd = [
        sys.executable,
        "-m",
        "pipelines.score",
        "--checkpoint",
        str(tmp / "results/citeseer/tiny/original/seed0"),
        "--pairs",
        str(pairs_file),
        "--out",
        str(out),
        "--device",
        "cpu",
        *extra,
    ]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_score_parquet_pairs_with_orderings(pipeline_run, tmp_path):
    tmp, _ = pipeline_run
    pairs = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"src": [137, 460, 0, 12], "dst": [1034, 1751, 1, 13]}), pairs)
    proc = _score(tmp, pairs, tmp_path / "scores.parquet", "--orderings", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = pq.read_table(tmp_path / "scores.parquet").to_pandas()
    assert list(table.columns) == ["src", "dst", "score", "logit", "score_std"]
    assert table[["src", "dst"]].values.tolist() == [[137, 1034], [460, 1751], [0, 1], [12, 13]]
    assert np.all((table.score > 0) & (table.score < 1)) and np.all(table.score_std >= 0)
    # Same seed, same subgraphs: scoring is deterministic.
    again = _score(tmp, pairs, tmp_path / "again.parquet", "--orderings", "3")
    assert again.returncode == 0
    assert np.array_equal(pq.read_table(tmp_path / "again.parquet").column("logit").to_numpy(), table.logit.to_numpy())


def test_score_rejects_unknown_node_ids(pipeline_run, tmp_path):
    tmp, _ = pipeline_run
    pairs = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"src": [1, 99999], "dst": [2, 3]}), pairs)
    proc = _score(tmp, pairs, tmp_path / "never.parquet")
    assert proc.returncode == 2
    assert "unknown node ids (first: data row 2, (99999, 3))" in proc.stderr
    assert not (tmp_path / "never.parquet").exists()


def test_score_refuses_self_loops(pipeline_run, tmp_path):
    """(5, 5) was once scored 0.966; a node paired with itself is no link to predict."""
    tmp, _ = pipeline_run
    pairs = tmp_path / "loops.csv"
    pairs.write_text("src,dst\n1,2\n5,5\n7,7\n")
    proc = _score(tmp, pairs, tmp_path / "never.parquet")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "2 row(s) pair a node with itself (first: data row 2, (5, 5)); self-loops are not scored" in proc.stderr
    assert not (tmp_path / "never.parquet").exists()


def test_score_rejects_missing_columns(pipeline_run, tmp_path):
    tmp, _ = pipeline_run
    pairs = tmp_path / "cols.csv"
    pairs.write_text("a,b\n1,2\n")
    proc = _score(tmp, pairs, tmp_path / "never.parquet")
    assert proc.returncode == 2 and "missing column(s) src, dst (found: a, b)" in proc.stderr


def test_results_folder_is_named_after_the_dataset(tmp_path):
    """results/<dataset>/<preset>: a file's dataset is its stem without .csv/.csv.gz/.parquet."""
    import gzip

    from common.datasets import DatasetSpec, load_dataset
    from pipelines.run import results_dir

    path = tmp_path / "my_edges.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("src,dst\n" + "\n".join(f"{i},{(i + 1) % 30}" for i in range(30)) + "\n")
    from common.datasets import DatasetSpec
    from common.datasets.edgelist import load_edge_list

    assert results_dir("results", load_edge_list(DatasetSpec(str(path))).name, "tiny") == Path("results/my_edges/tiny")
    pq.write_table(
        pa.table({"src": list(range(30)), "dst": [(i + 1) % 30 for i in range(30)]}), tmp_path / "graph.v2.parquet"
    )  # 30 edges: enough for a validation and a test edge
    assert results_dir("r", load_dataset(DatasetSpec(str(tmp_path / "graph.v2.parquet"))).name, "p") == Path(
        "r/graph.v2/p"
    )
    assert results_dir("r", "citeseer", "citeseer-small") == Path("r/citeseer/citeseer-small")
    assert results_dir("r", "my graph/../x", "p") == Path("r/my_graph_.._x/p")  # one path component, always


# ---------------------------------------------------------------------------- one process or torchrun
def _run_args(tmp_path, *argv):
    from tests.conftest import run_config

    return run_config("--dataset", "citeseer", "--out", tmp_path / "results", "--shards", tmp_path / "shards", *argv)


@pytest.mark.parametrize("overwrite, expected", [(False, "--resume"), (True, "--overwrite")])
def test_overwrite_retrains_a_finished_seed_of_other_flags(tmp_path, monkeypatch, overwrite, expected):
    """A seed folder finished under another --train-arg: a rerun resumes it (the trainer then refuses, naming
    the flags), and with --overwrite it is retrained afresh."""
    from pipelines.core import finished, seeds, trainers

    launched, run_dir = [], tmp_path / "results" / "seed0"

    def fake_start_child(cmd, **kw):
        launched.append(cmd)
        (run_dir / "summary.json").write_text('{"steps": 5}')
        return subprocess.Popen([sys.executable, "-c", "pass"])

    monkeypatch.setattr(trainers, "start_child", fake_start_child)
    monkeypatch.setattr(seeds, "stale_seeds", lambda opts, runs, shards: set())  # same data: only flags differ
    before = _run_args(tmp_path, "--device", "cpu", "--train-arg=--max-steps=5").trainer
    run_dir.mkdir(parents=True)
    (run_dir / "last.pt").write_bytes(b"x")
    (run_dir / "summary.json").write_text('{"steps": 5}')
    finished.mark_finished(seeds.seed_run(before, "tiny", "/data/set", "original", 0, run_dir))
    argv = ["--device", "cpu", "--train-arg=--max-steps=7", *(["--overwrite"] if overwrite else [])]
    now = _run_args(tmp_path, *argv).trainer
    seeds.train_seeds(now, {0: seeds.seed_run(now, "tiny", "/data/set", "original", 0, run_dir)})
    assert len(launched) == 1 and expected in launched[0] and "--max-steps 7" in " ".join(launched[0])


@pytest.mark.parametrize(
    "gpus, device, launcher",
    [
        (2, "auto", "torchrun"),
        (4, "cuda", "torchrun"),
        (2, "cpu", "trainer"),
        (1, "auto", "trainer"),
        (0, "auto", "trainer"),
    ],
)
def test_a_seed_runs_under_torchrun_when_several_gpus_are_visible(tmp_path, monkeypatch, gpus, device, launcher):
    """The seed's child process with the visible-GPU count injected: more than one GPU (and not --device cpu)
    runs `torchrun --nproc-per-node <gpus>` over the trainer, this exact command line; otherwise one trainer
    with the same flags. GPU runs train one seed at a time (it fills the GPUs); CPU runs one per core."""
    from pipelines.core import seeds, trainers

    launched = []
    run_dir = tmp_path / "results" / "seed3"

    def fake_start_child(cmd, **kw):  # the child the pool would start, finished at once
        launched.append(cmd)
        (run_dir / "summary.json").write_text('{"steps": 5, "world_size": %d}' % gpus)
        return subprocess.Popen([sys.executable, "-c", "pass"])

    monkeypatch.setattr(trainers, "cuda_devices", lambda: gpus)
    monkeypatch.setattr(trainers, "start_child", fake_start_child)
    opts = _run_args(
        tmp_path, "--device", device, "--epochs", "2", "--train-arg=--max-steps=5", "--train-arg=--num-workers=0"
    ).trainer
    summaries = seeds.train_seeds(opts, {3: seeds.seed_run(opts, "tiny", "/data/set", "original", 3, run_dir)})
    flags = [
        "--shards",
        "/data/set",
        "--preset",
        "tiny",
        "--out",
        str(run_dir),
        "--seed",
        "3",
        "--protocol",
        "original",
        "--device",
        device,
        "--overwrite",
        "--epochs",
        "2.0",
        "--max-steps",
        "5",
        "--num-workers",
        "0",
    ]
    if launcher == "torchrun":
        assert launched == [
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={gpus}",
                "-m",
                "trainer",
                *flags,
                "--no-progress",
            ]
        ]
    else:
        assert launched == [[sys.executable, "-m", "trainer", *flags, "--no-progress"]]
    assert summaries == {3: RunSummary(steps=5, world_size=gpus)}
    assert (trainers.trainer_slots(device) == 1) == (gpus > 0 and device != "cpu")
    assert trainers.trainer_slots("cpu", 5) == 5


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 or more GPUs")
def test_pipeline_trains_with_torchrun_on_every_visible_gpu(tmp_path, shard_cache):
    gpus = torch.cuda.device_count()
    cmd = [
        sys.executable,
        "-m",
        "pipelines.run",
        "--dataset",
        "citeseer",
        "--preset",
        "tiny",
        "--seeds",
        "0",
        "--out",
        str(tmp_path / "results"),
        "--shards",
        str(cached_set(shard_cache, "citeseer-tiny")),
        "--num-cpus",
        "2",
        "--views",
        "1",
        "--train-arg=--max-steps=20",
        "--train-arg=--num-workers=0",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert re.search(
        rf"training seed 0 on {gpus} GPUs: \S+ -m torch\.distributed\.run --standalone "
        rf"--nproc-per-node={gpus} -m trainer ",
        proc.stderr,
    ), proc.stderr[-4000:]
    summary = json.loads(
        (tmp_path / "results" / "citeseer" / "tiny" / "original" / "seed0" / "summary.json").read_text()
    )
    assert summary["world_size"] == gpus and summary["steps"] == 20 and summary["device"].startswith("cuda"), summary


def test_an_evaluation_seed_starts_before_the_seeds_that_train(tmp_path, monkeypatch):
    """--preset auto's seed 0 only evaluates the search's run (--eval-weights): the pool gets it first, so a budget
    that cuts the phase cuts a training seed (judged on its evaluated epochs), never the evaluation whole; the
    summaries still come back in seed order."""
    from pipelines.core import seeds

    order = []

    def fake_pool(jobs, slots, stop_at=None, failed=None):
        for key, run in jobs.items():
            order.append(key)
            Path(run.run_dir).mkdir(parents=True, exist_ok=True)
            (Path(run.run_dir) / "summary.json").write_text('{"steps": 1}')
        return {}, []

    monkeypatch.setattr(seeds, "run_trainers", fake_pool)
    monkeypatch.setattr(seeds, "stale_seeds", lambda opts, runs, shards: set())
    opts = _run_args(tmp_path, "--device", "cpu").trainer
    runs = {s: seeds.seed_run(opts, "tiny", "/data/set", "original", s, tmp_path / f"seed{s}") for s in (0, 1, 2)}
    runs[2] = replace(runs[2], eval_weights=str(tmp_path / "search" / "best.pt"))  # any seed number: the last here
    summaries = seeds.train_seeds(opts, runs)
    assert order == ["seed 2", "seed 0", "seed 1"]
    assert list(summaries) == [0, 1, 2]
