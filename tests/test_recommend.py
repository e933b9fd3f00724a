"""pipelines.recommend end to end on a briefly trained citeseer run: valid recommendations, resume after a kill,
today's graph (--graph) agreeing with pipelines.score, full-ranking evaluation, and `ray job submit` (slow)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import needs_ray, tiny_citeseer_run

ROOT = Path(__file__).resolve().parents[1]
# Every test here runs the CLI in subprocesses against a run trained by the fixture (~2 min on 2 shared cores
# before the first test, 7 min for the module): slow. The fast checks of the same pieces are in
# tests/test_retrieval.py and tests/test_scoring.py.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, shard_cache):
    return tiny_citeseer_run(shard_cache, tmp_path_factory.mktemp("rec") / "run")


@pytest.fixture(scope="module")
def graph():
    """The graph recommend works on by default (--graph all): every split's edges."""
    from common.datasets import DatasetSpec, load_dataset
    from common.snapshot import whole_graph

    return whole_graph(load_dataset(DatasetSpec("citeseer")))


def recommend(run_dir, out, *extra, env=None):
    """On CPU: outputs are compared bit for bit (a resumed job) or to 1e-6 (pipelines.score), which CUDA's
    scatter (index_add_) does not promise."""
    cmd = [
        sys.executable,
        "-m",
        "pipelines.recommend",
        "--checkpoint",
        str(run_dir),
        "--out",
        str(out),
        "--no-progress",
        "--device",
        "cpu",
        *extra,
    ]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


def nodes_file(path, nodes):
    path.write_text("\n".join(map(str, nodes)) + "\n")
    return path


# 51 nodes; the last four are isolated in citeseer's whole graph (none of its edges touch them)
QUERIES = list(range(0, 3327, 71)) + [192, 223, 276, 358]


def test_recommendations_are_new_links_of_known_nodes(run_dir, graph, tmp_path):
    proc = recommend(
        run_dir,
        tmp_path / "recs.parquet",
        "--nodes",
        str(nodes_file(tmp_path / "n.txt", QUERIES)),
        "--k",
        "5",
        "--pool",
        "20",
        "--retriever",
        "ppr",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    t = pq.read_table(tmp_path / "recs.parquet").to_pandas()
    assert list(t.columns) == ["node", "candidate", "rank", "score", "retriever_score"]
    u, c = t.node.to_numpy(), t.candidate.to_numpy()
    assert np.all(u != c) and not graph.has_edge(u, c).any()
    assert np.all((c >= 0) & (c < graph.num_nodes)) and set(u) <= set(QUERIES)
    for _, rows in t.groupby("node"):
        assert rows["rank"].tolist() == list(range(1, len(rows) + 1))
        assert np.all(np.diff(rows.score.to_numpy()) <= 0)
    # every query gets k: a pool that its component cannot fill (isolated nodes among QUERIES) is topped up by
    # popularity, first in the component, then in the whole graph
    counts = t.groupby("node").size()
    assert [counts.get(q, 0) for q in QUERIES] == [5] * len(QUERIES)
    assert "fewer than k" not in proc.stderr
    isolated = [q for q in QUERIES if graph.degree[q] == 0]  # their pool of 20: the 20 most popular nodes
    assert isolated and set(t[t.node.isin(isolated)].candidate) <= set(np.argsort(-graph.degree, kind="stable")[:20])
    assert not list(tmp_path.glob(".recs.parquet.parts"))


def test_a_resumed_job_gives_the_uninterrupted_output(run_dir, tmp_path):
    nodes = str(nodes_file(tmp_path / "n.txt", QUERIES))
    flags = [
        "--nodes",
        nodes,
        "--k",
        "4",
        "--pool",
        "12",
        "--retriever",
        "mix",
        "--block-nodes",
        "10",
        "--orderings",
        "2",
    ]
    whole = recommend(run_dir, tmp_path / "whole.parquet", *flags)
    assert whole.returncode == 0, whole.stderr[-3000:]
    hook = str(Path(__file__).parent / "fault_hook")  # its sitecustomize kills the job after 2 part files
    env = {
        **os.environ,
        "PENCIL_TEST_RECOMMEND_FAIL_AFTER": "2",
        "PYTHONPATH": os.pathsep.join(filter(None, [hook, str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    killed = recommend(run_dir, tmp_path / "resumed.parquet", *flags, env=env)
    assert killed.returncode != 0 and not (tmp_path / "resumed.parquet").exists()
    parts = sorted(p.name for p in (tmp_path / ".resumed.parquet.parts").iterdir())
    assert parts == [".lock", "job.json", "part-000000.parquet", "part-000001.parquet"]  # .lock: one job per --out
    resumed = recommend(run_dir, tmp_path / "resumed.parquet", *flags)
    assert resumed.returncode == 0 and "2 already done" in resumed.stderr
    assert pq.read_table(tmp_path / "resumed.parquet").equals(pq.read_table(tmp_path / "whole.parquet"))
    # other flags against the same part folder are refused, not mixed in
    recommend(run_dir, tmp_path / "other.parquet", *flags, env=env)
    other = recommend(run_dir, tmp_path / "other.parquet", *flags[:-1], "1")
    assert other.returncode == 2 and "holds the parts of another job" in other.stderr


def test_todays_graph_scores_equal_pipelines_score(run_dir, graph, tmp_path):
    """--graph EDGES: a snapshot with new edges and two new nodes; recommend's scores are pipelines.score's."""
    edges = graph.edge_array()
    n = graph.num_nodes
    new = np.array([[n, 17], [n, 3326], [n + 1, n], [5, 900], [71, 2000]])
    snap = tmp_path / "today.csv"
    import pyarrow.csv as pacsv

    pacsv.write_csv(pa.table({"src": np.r_[edges[:, 0], new[:, 0]], "dst": np.r_[edges[:, 1], new[:, 1]]}), snap)
    queries = [5, 71, n, n + 1]
    proc = recommend(
        run_dir,
        tmp_path / "recs.parquet",
        "--nodes",
        str(nodes_file(tmp_path / "n.txt", queries)),
        "--k",
        "6",
        "--pool",
        "10",
        "--retriever",
        "ppr",
        "--graph",
        str(snap),
        "--orderings",
        "2",
        "--prior-weight",
        "0",
    )  # no rank prior: score = PENCIL's probability, as pipelines.score
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = pq.read_table(tmp_path / "recs.parquet").to_pandas()
    assert set(recs.node) == set(queries)
    assert not {(5, 900), (71, 2000), (n, 17)} & set(zip(recs.node, recs.candidate))  # today's edges are not news
    pairs = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"src": recs.node.to_numpy(), "dst": recs.candidate.to_numpy()}), pairs)
    cmd = [
        sys.executable,
        "-m",
        "pipelines.score",
        "--checkpoint",
        str(run_dir),
        "--pairs",
        str(pairs),
        "--out",
        str(tmp_path / "scores.parquet"),
        "--graph",
        str(snap),
        "--orderings",
        "2",
        "--device",
        "cpu",
    ]
    score = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert score.returncode == 0, score.stderr[-3000:]
    scores = pq.read_table(tmp_path / "scores.parquet").to_pandas()
    np.testing.assert_allclose(scores.score.to_numpy(), recs.score.to_numpy(), atol=1e-6)


def test_full_ranking_evaluation(run_dir, tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "pipelines",
        "evaluate",
        str(run_dir),
        "--pool",
        "30",
        "--retriever",
        "ra",
        "--splits",
        "test",
        "--out",
        str(tmp_path / "m.json"),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((tmp_path / "m.json").read_text())["splits"]["test"]
    assert res["positives"] == 455
    # citeseer: 295 of 455 test positives share no neighbour with their source, so a
    # 2-hop RA pool can hold at most the other 160
    assert 0 < res["recall@30"] <= 160 / 455
    for ranker in ("retriever_alone", "pencil_rerank"):
        assert 0 < res[ranker]["hits@20"] <= res["recall@30"] and 0 < res[ranker]["mrr"] < 1


def test_an_auto_seed_folder_with_only_last_pt(run_dir, tmp_path):
    """A `--preset auto` seed folder (results/<dataset>/auto/original/seedS: the trainer with preset general and
    the winner's flags, stopped by --stop-epoch) may hold last.pt and no best.pt (stopped before a validation:
    here no valid evaluation at all, --eval-splits test): recommend and evaluate take the folder; its
    protocol folder is refused with the seed folders it holds."""
    shards = json.loads((run_dir / "config.json").read_text())["data"]["shards"]
    protocol_dir = tmp_path / "results" / "citeseer" / "auto" / "original"
    seed = protocol_dir / "seed0"
    train = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "--shards",
            shards,
            "--preset",
            "general",
            "--out",
            str(seed),
            "--seed",
            "0",
            "--protocol",
            "original",
            "--device",
            "cpu",
            "--eval-splits",
            "test",
            "--max-steps",
            "8",
            "--hidden",
            "32",
            "--layers",
            "1",
            "--heads",
            "2",
            "--ffn",
            "64",
            "--effective-batch",
            "32",
            "--threads",
            "1",
            "--num-workers",
            "0",
            "--no-progress",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    assert (seed / "last.pt").exists() and not (seed / "best.pt").exists()
    assert json.loads((seed / "config.json").read_text())["preset"] == "general"
    nodes = str(nodes_file(tmp_path / "n.txt", QUERIES[:10]))
    flags = ["--nodes", nodes, "--k", "5", "--pool", "20", "--retriever", "ppr"]
    by_folder = recommend(seed, tmp_path / "a.parquet", *flags)
    assert by_folder.returncode == 0, by_folder.stderr[-3000:]
    assert recommend(seed / "last.pt", tmp_path / "b.parquet", *flags).returncode == 0
    a, b = (pq.read_table(tmp_path / f).to_pandas() for f in ("a.parquet", "b.parquet"))
    assert len(a) > 0 and a.equals(b)
    ev = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines",
            "evaluate",
            str(seed),
            "--pool",
            "20",
            "--retriever",
            "ra",
            "--splits",
            "valid",
            "--out",
            str(tmp_path / "m.json"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ev.returncode == 0, ev.stderr[-3000:]
    res = json.loads((tmp_path / "m.json").read_text())["splits"]["valid"]
    from common.datasets import DatasetSpec, load_dataset

    assert res["positives"] == len(load_dataset(DatasetSpec("citeseer")).splits["valid"].pos) > 0
    assert 0 < res["pencil_rerank"]["mrr"] < 1
    for command, flag, extra in (
        ("recommend", "--checkpoint", ["--checkpoint", str(protocol_dir), "--all-nodes"]),
        ("evaluate", "RUN", [str(protocol_dir)]),
    ):
        cmd = [sys.executable, "-m", "pipelines", command, *extra, "--out", str(tmp_path / "x")]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert (
            proc.returncode == 2
            and f"{flag} {protocol_dir}: no best.pt or last.pt in this run folder; it holds "
            f"the runs seed0: pass one, e.g. {seed}"
            in proc.stderr
        ), proc.stderr
        assert "Traceback" not in proc.stderr


def test_bad_flags_are_one_line_errors(run_dir, tmp_path, capsys):
    """In this process (tests/cli_calls.py); the real process's exit and one line are checked by the first."""
    from pipelines.recommend.job import main
    from tests.cli_calls import call_main

    proc = recommend(run_dir, tmp_path / "r.parquet", "--all-nodes", "--k", "30", "--pool", "10")
    assert proc.returncode == 2 and "--pool 10 is smaller than --k 30" in proc.stderr
    assert "Traceback" not in proc.stderr
    base = ["--checkpoint", str(run_dir), "--out", str(tmp_path / "r.parquet"), "--no-progress", "--device", "cpu"]
    proc = call_main(main, [*base, "--nodes", str(nodes_file(tmp_path / "n.txt", [1, 99999]))], capsys)
    assert proc.returncode == 2 and "unknown node id(s) (first: 99999)" in proc.stderr
    proc = call_main(main, [*base, "--all-nodes", "--bipartite"], capsys)
    assert proc.returncode == 2 and "--bipartite: the node kinds come from an edge list" in proc.stderr


@needs_ray
def test_ray_job_submit_against_local_cluster(run_dir, ray_head, tmp_path):
    """`ray job submit -- python -m pipelines.recommend ...` runs unchanged on a `ray start --head` cluster (the
    ray_head fixture; tasks retrieve and sample, an actor scores) and writes what the single-process path writes."""
    nodes = str(nodes_file(tmp_path / "n.txt", QUERIES[:12]))
    flags = ["--nodes", nodes, "--k", "4", "--pool", "10", "--retriever", "ra", "--block-nodes", "4"]
    local = recommend(run_dir, tmp_path / "local.parquet", *flags)
    assert local.returncode == 0, local.stderr[-3000:]
    job = ray_head.submit(
        "python",
        "-m",
        "pipelines.recommend",
        "--checkpoint",
        str(run_dir),
        "--out",
        str(tmp_path / "ray.parquet"),
        "--no-progress",
        *flags,
    )
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    assert "attaching to the cluster" in job.stdout + job.stderr and "scoring actor" in job.stdout + job.stderr
    a, b = (pq.read_table(tmp_path / f).to_pandas() for f in ("local.parquet", "ray.parquet"))
    assert a[["node", "candidate", "rank"]].equals(b[["node", "candidate", "rank"]])
    np.testing.assert_allclose(a.score.to_numpy(), b.score.to_numpy(), atol=1e-6)
