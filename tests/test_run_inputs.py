"""What pipelines.score and pipelines.recommend read, checked: the graph they load is the one the run was
trained on (fingerprint and id mapping; a different graph only through --graph, mapped through the run's
ids), and no command writes over its inputs. One short run on a bipartite edge list of string ids (users
u*, items i*) serves every test; most run the command's main() in this process, a few the real CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import bipartite_rows, needs_ray, write_edges

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
pytestmark = needs_ray


@pytest.fixture(scope="module")
def run(shop_run):
    """A run of the tiny preset, 2 steps, on the bipartite graph; its folder, edge list and set (conftest)."""
    return shop_run


@pytest.fixture
def main_of(capsys, caplog):
    """main_of(module, argv): the command's main() in this process -> (exit status, its stderr and log)."""
    import importlib

    def call(module: str, argv: list) -> tuple[int, str]:
        caplog.clear()
        mod = importlib.import_module(module)
        try:
            code = mod.main([str(a) for a in argv])
        except SystemExit as exc:  # parser.error: exit 2
            code = exc.code
        return code, capsys.readouterr().err + caplog.text

    return call


def one_error(code: int, err: str) -> str:
    lines = [line for line in err.splitlines() if " error: " in line]
    assert code != 0 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


def pairs_file(path: Path, pairs) -> Path:
    path.write_text("src,dst\n" + "".join(f"{a},{b}\n" for a, b in pairs))
    return path


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------- the graph a run loads
def test_score_on_the_training_graph_notes_pairs_that_are_edges(run, tmp_path, main_of):
    from common.datasets import DatasetSpec, load_dataset

    ds = load_dataset(DatasetSpec(str(run["edges"])))
    first = tuple(ds.node_ids[ds.splits["train"].pos[0]])  # an edge of the training graph
    pairs = pairs_file(tmp_path / "p.csv", [first, ("u001", "i040")])
    code, err = main_of(
        "pipelines.score",
        ["--checkpoint", run["run"], "--pairs", pairs, "--out", tmp_path / "s.parquet", "--device", "cpu"],
    )
    assert code == 0, err[-2000:]
    assert f"1 of 2 pairs are already edges of the graph sampled on (first: {first[0]}, {first[1]})" in err
    assert pq.read_table(tmp_path / "s.parquet").column("src").to_pylist() == [first[0], "u001"]


def test_an_edited_edge_list_is_refused_by_score_and_recommend(run, tmp_path, main_of):
    """The file the run was trained on, half its edges replaced: its fingerprint no longer matches."""
    original = run["edges"].read_bytes()
    rows = bipartite_rows()
    write_edges(run["edges"], rows[: len(rows) // 2] + bipartite_rows(seed=9)[len(rows) // 2 :])
    try:
        pairs = pairs_file(tmp_path / "p.csv", [("u001", "i040")])
        code, err = main_of(
            "pipelines.score",
            ["--checkpoint", run["run"], "--pairs", pairs, "--out", tmp_path / "s.parquet", "--device", "cpu"],
        )
        line = one_error(code, err)
        assert f"{run['edges']}: not the graph this run was trained on" in line and "--graph FILE" in line, line
        (tmp_path / "q.txt").write_text("u001\n")
        code, err = main_of(
            "pipelines.recommend.job",
            [
                "--checkpoint",
                run["run"],
                "--nodes",
                tmp_path / "q.txt",
                "--out",
                tmp_path / "r.parquet",
                "--device",
                "cpu",
            ],
        )
        assert "not the graph this run was trained on" in one_error(code, err)
        assert not list(tmp_path.glob("*.parquet")) and not list(tmp_path.glob(".*"))
    finally:
        run["edges"].write_bytes(original)


def test_score_dataset_flag_takes_the_same_graph_anywhere_but_no_other(run, tmp_path, main_of):
    pairs = pairs_file(tmp_path / "p.csv", [("u001", "i040")])
    base = ["--checkpoint", run["run"], "--pairs", pairs, "--device", "cpu"]
    moved = shutil.copy(run["edges"], tmp_path / "renamed.csv")  # the same edges under another name
    code, err = main_of("pipelines.score", [*base, "--dataset", moved, "--out", tmp_path / "a.parquet"])
    assert code == 0, err[-2000:]
    other = write_edges(tmp_path / "other.csv", [(f"n{i}", f"n{(i + 1) % 200}") for i in range(200)])
    code, err = main_of("pipelines.score", [*base, "--dataset", other, "--out", tmp_path / "b.parquet"])
    assert f"--dataset {other}: not the graph this run was trained on" in one_error(code, err)
    assert not (tmp_path / "b.parquet").exists()


@pytest.mark.parametrize(
    "spec, expect",
    [
        ("bogus", "--graph bogus: neither a graph (train, valid, test, all) nor an edge-list file"),
        ("missing.csv", "--graph missing.csv: file not found"),
    ],
)
def test_graph_flag_names_itself(run, tmp_path, main_of, spec, expect):
    pairs = pairs_file(tmp_path / "p.csv", [("u001", "i040")])
    code, err = main_of(
        "pipelines.score",
        [
            "--checkpoint",
            run["run"],
            "--pairs",
            pairs,
            "--graph",
            spec,
            "--out",
            tmp_path / "s.parquet",
            "--device",
            "cpu",
        ],
    )
    assert expect in one_error(code, err)


def test_a_snapshot_of_another_graph_is_refused(run, tmp_path, main_of):
    """Ids n0..n199 against a run whose nodes are u*/i*: every node would be 'new', no edge shared."""
    other = write_edges(tmp_path / "today.csv", [(f"n{i}", f"n{(i + 1) % 200}") for i in range(200)])
    pairs = pairs_file(tmp_path / "p.csv", [("n1", "n5")])
    code, err = main_of(
        "pipelines.score",
        [
            "--checkpoint",
            run["run"],
            "--pairs",
            pairs,
            "--graph",
            other,
            "--out",
            tmp_path / "s.parquet",
            "--device",
            "cpu",
        ],
    )
    assert f"--graph {other}: shares none of" in one_error(code, err)
    today = write_edges(tmp_path / "grown.csv", bipartite_rows() + [("u999", "i001")])  # a real snapshot
    pairs = pairs_file(tmp_path / "p2.csv", [("u999", "i040")])
    code, err = main_of(
        "pipelines.score",
        [
            "--checkpoint",
            run["run"],
            "--pairs",
            pairs,
            "--graph",
            today,
            "--out",
            tmp_path / "s.parquet",
            "--device",
            "cpu",
        ],
    )
    assert code == 0, err[-2000:]


# ---------------------------------------------------------------------------- outputs never overwrite inputs
def test_score_out_never_overwrites_an_input(run, tmp_path, main_of):
    pairs = pairs_file(tmp_path / "pp.csv", [("u001", "i040")])
    (tmp_path / "dir.parquet").mkdir()
    before = {"run": files_of(run["run"]), "pairs": pairs.read_bytes(), "edges": run["edges"].read_bytes()}
    for out, expect in (
        (pairs, "is --pairs"),
        (run["run"] / "best.pt", "is --checkpoint"),
        (run["run"] / "scores.parquet", "is inside the run folder"),
        (run["edges"], "is the run's edge list"),
        (run["shards"] / "x.parquet", "is inside the run's shard set"),
        (tmp_path / "dir.parquet", "is a directory"),
    ):
        code, err = main_of(
            "pipelines.score", ["--checkpoint", run["run"], "--pairs", pairs, "--out", out, "--device", "cpu"]
        )
        assert f"--out {out}: {expect}" in one_error(code, err), (out, err[-1000:])
    assert before == {"run": files_of(run["run"]), "pairs": pairs.read_bytes(), "edges": run["edges"].read_bytes()}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.parquet", "pp.csv"]  # no temp file anywhere


def test_recommend_out_never_overwrites_an_input_cli(run, tmp_path):
    """The real CLI, as in the report: --out the checkpoint, --out the query list."""
    (tmp_path / "q.txt").write_text("u001\nu002\n")
    before = (files_of(run["run"]), (tmp_path / "q.txt").read_bytes())
    for out, expect in ((run["run"] / "best.pt", "is --checkpoint"), (tmp_path / "q.txt", "is --nodes")):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipelines.recommend",
                "--checkpoint",
                str(run["run"]),
                "--nodes",
                str(tmp_path / "q.txt"),
                "--k",
                "3",
                "--out",
                str(out),
                "--device",
                "cpu",
            ],
            cwd=ROOT,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert f"--out {out}: {expect}" in one_error(proc.returncode, proc.stderr)
    assert before == (files_of(run["run"]), (tmp_path / "q.txt").read_bytes())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.txt"]


def test_evaluate_out_never_overwrites_an_input(run, tmp_path, main_of):
    before = files_of(run["run"])
    for out, expect in ((run["run"] / "best.pt", "is RUN"), (run["run"] / "m.json", "is inside the run folder")):
        code, err = main_of("pipelines.recommend.evaluation", [run["run"], "--out", out, "--device", "cpu"])
        assert f"--out {out}: {expect}" in one_error(code, err)
    assert files_of(run["run"]) == before


def test_report_and_heuristics_refuse_an_input_as_out(run, tmp_path, main_of):
    code, err = main_of("pipelines.heuristics", ["--dataset", run["edges"], "--out", run["edges"]])
    assert f"--out {run['edges']}: is --dataset" in one_error(code, err)
    (tmp_path / "bad.json").write_text('{"not": "a result"}')
    code, err = main_of("pipelines.report", [tmp_path / "bad.json"])
    assert f"{tmp_path / 'bad.json'}: not a seed's result (no dataset, protocol, test)" in one_error(code, err)


# ---------------------------------------------------------------------------- recommend's own inputs
def test_recommend_bipartite_from_the_runs_edge_list_and_user_ids(run, tmp_path, main_of):
    """--bipartite without --graph reads the kinds from the edge list the run was trained on; a node list
    without a header keeps its first id; a short list is named by the user's id."""
    (tmp_path / "q.csv").write_text("u001\nu002\nu003\n")
    code, err = main_of(
        "pipelines.recommend.job",
        [
            "--checkpoint",
            run["run"],
            "--nodes",
            tmp_path / "q.csv",
            "--k",
            "60",
            "--pool",
            "60",
            "--bipartite",
            "--out",
            tmp_path / "r.parquet",
            "--device",
            "cpu",
            "--no-progress",
        ],
    )
    assert code == 0, err[-2000:]
    recs = pq.read_table(tmp_path / "r.parquet").to_pandas()
    assert sorted(set(recs.node)) == ["u001", "u002", "u003"] and recs.candidate.str.startswith("i").all()
    assert "fewer than k=60 recommendations" in err and "node u001:" in err  # 50 items: never 60 candidates


def test_recommend_refuses_a_second_job_on_the_same_out(run, tmp_path):
    """While one job holds --out's part folder, a second one is refused at once, naming the holder."""
    from pipelines.recommend.parts import parts_dir
    from trainer.run_folder import locked

    (tmp_path / "q.txt").write_text("u001\n")
    out = tmp_path / "recs.parquet"
    with locked(parts_dir(out), "recommendation job", "--out"):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipelines.recommend",
                "--checkpoint",
                str(run["run"]),
                "--nodes",
                str(tmp_path / "q.txt"),
                "--out",
                str(out),
                "--device",
                "cpu",
            ],
            cwd=ROOT,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert f"another recommendation job (pid {os.getpid()}) is running" in one_error(proc.returncode, proc.stderr)
    assert not out.exists()


def test_recommend_with_a_dead_ray_address_fails_in_seconds(run, tmp_path):
    (tmp_path / "q.txt").write_text("u001\n")
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.recommend",
            "--checkpoint",
            str(run["run"]),
            "--nodes",
            str(tmp_path / "q.txt"),
            "--out",
            str(tmp_path / "r.parquet"),
            "--device",
            "cpu",
        ],
        cwd=ROOT,
        env={**ENV, "RAY_ADDRESS": "127.0.0.1:1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "RAY_ADDRESS=127.0.0.1:1: no Ray cluster answers there" in one_error(proc.returncode, proc.stderr)
    assert time.monotonic() - start < 60 and not list(tmp_path.glob(".*"))


def test_a_full_disk_names_the_output_and_leaves_no_temp_file(run, tmp_path, main_of):
    """score, heuristics and recommend on a 64 KB disk: one line naming the file they were writing; no temp
    file left; recommend keeps its part folder (what a rerun resumes from), nothing else."""
    from tests.conftest import mount_tmpfs

    disk = tmp_path / "disk"
    if not mount_tmpfs(disk, "64k"):
        pytest.skip("cannot mount a small tmpfs here (needs root and mount)")
    try:
        (disk / "fill").write_bytes(b"\0" * 65_000)  # every page of the disk taken
        pairs = pairs_file(tmp_path / "p.csv", [("u001", f"i{i:03d}") for i in range(50)] * 40)
        code, err = main_of(
            "pipelines.score",
            ["--checkpoint", run["run"], "--pairs", pairs, "--out", disk / "s.parquet", "--device", "cpu"],
        )
        assert f"{disk / 's.parquet'}: no space left on device" in one_error(code, err)
        code, err = main_of("pipelines.heuristics", ["--dataset", run["edges"], "--out", disk / "h.json"])
        assert f"{disk / 'h.json'}: no space left on device" in one_error(code, err)
        (tmp_path / "q.txt").write_text("".join(f"u{u:03d}\n" for u in range(90)))
        code, err = main_of(
            "pipelines.recommend.job",
            [
                "--checkpoint",
                run["run"],
                "--nodes",
                tmp_path / "q.txt",
                "--k",
                "50",
                "--pool",
                "50",
                "--out",
                disk / "r.parquet",
                "--device",
                "cpu",
                "--no-progress",
            ],
        )
        assert "no space left on device" in one_error(code, err) and str(disk) in one_error(code, err)
        left = sorted(str(p.relative_to(disk)) for p in disk.rglob("*"))
        assert not [name for name in left if name.endswith(".tmp")], left
        assert set(left) <= {"fill", ".r.parquet.parts", ".r.parquet.parts/.lock", ".r.parquet.parts/job.json"} | {
            f".r.parquet.parts/part-{b:06d}.parquet" for b in range(4)
        }, left
    finally:
        subprocess.run(["umount", str(disk)], check=False)
