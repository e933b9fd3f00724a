"""A run works from any folder. The run here is made as a user makes one: preprocess and the
trainer started in the run's root with relative paths (shop.csv, features.csv, shards/, run/). Then every command
on it runs from another folder, by the run's absolute path: the run records its shard set absolute, the set its
inputs absolute, the node features come from the set (features.npy), never from the user's file, a moved set is
found with --shards (checked to be the run's), and `serve --write-config` writes what `serve run` needs."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from common.datasets.spec import DatasetSpec
from tests.conftest import bipartite_rows, needs_ray, train_tiny_on_cpu, write_edges, write_features
from tests.test_run_commands import EVALUATE, RECOMMEND, SCORE, SERVE, main_of  # noqa: F401 (a fixture)
from tests.test_run_inputs import one_error, pairs_file

pytestmark = needs_ray


@contextlib.contextmanager
def working_in(folder: Path):
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def build_set(root: Path, views: int = 1) -> Path:
    """The shop's shard set with its feature table, built from `root` with relative paths; its absolute path."""
    from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig
    from preprocess.job import run_job

    with working_in(root):
        rel = run_job(
            PreprocessConfig(
                data=DatasetSpec("shop.csv", node_features="features.csv"),
                sampling=SamplingConfig(1, 3),
                out="shards",
                candidates=CandidateConfig(views=views),
                num_cpus=1,
            )
        ).path
    return root / rel


@pytest.fixture(scope="module")
def rel_run(tmp_path_factory):
    """A tiny featured run trained in its root with relative paths, and a folder elsewhere to call it from."""
    root, rows = tmp_path_factory.mktemp("portable"), bipartite_rows()
    write_edges(root / "shop.csv", rows)
    write_features(root / "features.csv", sorted({n for row in rows for n in row}))
    shards = build_set(root)
    with working_in(root):
        train_tiny_on_cpu(os.path.relpath(shards, root), "run", max_steps=2)
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "q.txt").write_text("u001\n")
    pairs_file(elsewhere / "pairs.csv", [("u001", "i040"), ("u002", "i007")])
    return {"root": root, "run": root / "run", "shards": shards, "elsewhere": elsewhere}


def commands(run: dict, out: Path) -> dict:
    """score, recommend and evaluate on the run by its absolute path, each writing into `out`."""
    where = run["elsewhere"]
    return {
        SCORE: ["--checkpoint", run["run"], "--pairs", where / "pairs.csv", "--out", out / "s.parquet"],
        RECOMMEND: ["--checkpoint", run["run"], "--nodes", where / "q.txt", "--k", "3", "--out", out / "r.parquet"],
        EVALUATE: [run["run"], "--pool", "5", "--out", out / "e.json"],
    }


def call_all(main_of, run: dict, out: Path, *extra) -> None:
    out.mkdir(exist_ok=True)
    for module, argv in commands(run, out).items():
        progress = ["--no-progress"] if module == RECOMMEND else []
        code, err = main_of(module, [*argv, *progress, "--device", "cpu", *extra])
        assert code == 0, (module, err[-2000:])


def test_a_relative_out_lands_in_the_drivers_folder_when_ray_started_in_another(tmp_path):
    # Ray's workers keep the folder Ray started in; a relative --out once reached them as is, so the shards landed
    # there while the manifest landed here (seen when an earlier test in the process had started Ray)
    import ray

    from common.manifest import read_manifest
    from preprocess.cluster import init_ray

    elsewhere, root = tmp_path / "elsewhere", tmp_path / "root"
    elsewhere.mkdir(), root.mkdir()
    rows = bipartite_rows()
    write_edges(root / "shop.csv", rows)
    write_features(root / "features.csv", sorted({n for row in rows for n in row}))
    with working_in(elsewhere):
        started = init_ray(1)
    try:
        shards = build_set(root)
        names = [s["name"] for s in read_manifest(shards).shards]
        assert names and all((shards / name).is_file() for name in names)
        assert not (elsewhere / "shards").exists() or not started
    finally:
        if started:
            ray.shutdown()


def test_the_run_records_its_shard_set_and_inputs_absolute(rel_run):
    import json

    data = json.loads((rel_run["run"] / "config.json").read_text())["data"]
    assert data["shards"] == str(rel_run["shards"])
    pre = json.loads((rel_run["shards"] / "manifest.json").read_text())["config"]
    assert pre["dataset"] == str(rel_run["root"] / "shop.csv")
    assert pre["node_features"] == str(rel_run["root"] / "features.csv")
    assert pre["out"] == str(rel_run["root"] / "shards")


def test_score_recommend_and_evaluate_work_from_another_folder(rel_run, main_of, monkeypatch):
    monkeypatch.chdir(rel_run["elsewhere"])
    call_all(main_of, rel_run, rel_run["elsewhere"] / "from-elsewhere")


def test_the_features_come_from_the_shard_set_not_the_users_file(rel_run, main_of, monkeypatch, tmp_path):
    """The feature file moved, then another one in its place: the commands never read it, and score the same."""
    monkeypatch.chdir(rel_run["elsewhere"])
    features = rel_run["root"] / "features.csv"
    call_all(main_of, rel_run, tmp_path / "before")
    kept = features.rename(tmp_path / "features.csv")
    try:
        call_all(main_of, rel_run, tmp_path / "moved")
        write_features(features, [f"u{u:03d}" for u in range(90)], seed=5)  # edited: other rows, other values
        call_all(main_of, rel_run, tmp_path / "edited")
    finally:
        shutil.move(kept, features)
    scores = {name: pq.read_table(tmp_path / name / "s.parquet").to_pylist() for name in ("before", "moved", "edited")}
    assert scores["before"] == scores["moved"] == scores["edited"]


def test_a_moved_shard_set_is_found_with_shards_and_another_set_refused(rel_run, main_of, monkeypatch, tmp_path):
    """Each command names --shards for a set that moved, finds it there (the set's folder, or its shard root)
    with the same scores, and `serve --write-config` writes where it is now; another set is refused."""
    import yaml

    monkeypatch.chdir(rel_run["elsewhere"])
    shards, moved = rel_run["shards"], tmp_path / "moved-shards"
    call_all(main_of, rel_run, tmp_path / "in-place")
    shutil.copytree(rel_run["root"] / "shards", moved)
    shutil.move(shards, tmp_path / "away")
    try:
        for module, argv in commands(rel_run, tmp_path).items():
            line = one_error(*main_of(module, [*argv, "--device", "cpu"]))
            assert f"its shard set {shards}: not found (moved or deleted); pass --shards DIR" in line, line
        moved_set = moved / shards.relative_to(rel_run["root"] / "shards")
        call_all(main_of, rel_run, tmp_path / "by-set", "--shards", moved_set)
        call_all(main_of, rel_run, tmp_path / "by-root", "--shards", moved)  # the shard root: found by the run's key
        serve = ["--checkpoint", rel_run["run"], "--state", tmp_path / "state", "--shards", moved]
        assert main_of(SERVE, [*serve, "--write-config", tmp_path / "serve.yaml"])[0] == 0
        written = yaml.safe_load((tmp_path / "serve.yaml").read_text())["applications"]
        assert [app["args"]["shards"] for app in written] == [str(moved_set)] * 2
    finally:
        shutil.move(tmp_path / "away", shards)
    scores = [pq.read_table(tmp_path / name / "s.parquet").to_pylist() for name in ("in-place", "by-set", "by-root")]
    assert scores[0] == scores[1] == scores[2]
    other = build_set(rel_run["root"], views=2)  # the same graph, another set (its key)
    line = one_error(*main_of(SCORE, [*commands(rel_run, tmp_path)[SCORE], "--device", "cpu", "--shards", other]))
    assert "was trained on dataset " in line and f"but --shards {other} holds" in line, line


def test_an_old_run_with_a_relative_shard_path(rel_run, main_of, monkeypatch, tmp_path):
    """A run from before runs recorded absolute paths: it works from the folder it was made in, and elsewhere
    it is refused in one line naming that folder and --shards."""
    import torch

    ckpt = torch.load(rel_run["run"] / "best.pt", weights_only=True)
    ckpt["config"]["data"]["shards"] = os.path.relpath(rel_run["shards"], rel_run["root"])
    old = rel_run["root"] / "old-run"
    old.mkdir(exist_ok=True)
    torch.save(ckpt, old / "best.pt")
    argv = ["--checkpoint", old, "--pairs", rel_run["elsewhere"] / "pairs.csv", "--device", "cpu", "--out"]
    monkeypatch.chdir(rel_run["root"])
    assert main_of(SCORE, [*argv, tmp_path / "here.parquet"])[0] == 0
    monkeypatch.chdir(rel_run["elsewhere"])
    line = one_error(*main_of(SCORE, [*argv, tmp_path / "there.parquet"]))
    assert "relative to the folder the run was started in" in line and "pass --shards DIR" in line, line
    assert main_of(SCORE, [*argv, tmp_path / "there.parquet", "--shards", rel_run["shards"]])[0] == 0


def test_write_config_holds_everything_serve_run_needs(rel_run, main_of, monkeypatch, tmp_path):
    import yaml

    monkeypatch.chdir(rel_run["root"])
    argv = ["--checkpoint", "run", "--state", "state", "--device", "cpu", "--write-config", tmp_path / "serve.yaml"]
    code, err = main_of(SERVE, argv)
    assert code == 0, err[-2000:]
    graph_app, service_app = (a["args"] for a in yaml.safe_load((tmp_path / "serve.yaml").read_text())["applications"])
    for args in (graph_app, service_app):
        assert args["shards"] == str(rel_run["shards"]) and args["dataset"] == str(rel_run["root"] / "shop.csv")
    assert service_app["checkpoint"] == str(rel_run["run"] / "best.pt")
    assert graph_app["state"] == str(rel_run["root"] / "state")


def test_an_application_that_cannot_load_its_run_fails_where_it_is_built(rel_run, tmp_path):
    """The builders `serve run` calls check the run first: a bad setting fails the application once, in one line,
    instead of replicas that Serve starts and retries."""
    from pipelines.serve.app import graph_app, service_app

    good = {"shards": str(rel_run["shards"]), "dataset": str(rel_run["root"] / "shop.csv"), "features": True}
    assert graph_app({**good, "state": str(tmp_path / "state")}) is not None  # builds
    assert service_app({**good, "checkpoint": str(rel_run["run"]), "device": "cpu"}) is not None  # no cluster: no GPU
    for builder, config, expect in (
        (graph_app, {**good, "dataset": str(tmp_path / "no.csv")}, f"setting 'dataset' {tmp_path / 'no.csv'}: file"),
        (graph_app, {**good, "shards": "shards/shop/x"}, "shards/shop/x: no manifest"),
        (service_app, {**good, "checkpoint": str(tmp_path / "none")}, "setting 'checkpoint'"),
        (service_app, {**good, "checkpoint": str(rel_run["run"]), "shards": str(tmp_path)}, "no manifest"),
    ):
        with pytest.raises(ValueError) as err:
            builder(config)
        assert expect in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.slow
def test_serve_run_of_a_written_config_starts_from_another_folder(rel_run, main_of, monkeypatch, tmp_path):
    """`serve --write-config` in the run's root with relative flags, then Ray's own `serve run CONFIG` in another
    folder: the service answers /health (about 1 min on 2 shared cores)."""
    import json
    import signal
    import subprocess
    import sys
    import time

    from bench.serve import request
    from pipelines.core.ray_head import free_ports

    port = free_ports(1)[0]
    monkeypatch.chdir(rel_run["root"])
    config = tmp_path / "serve.yaml"
    argv = ["--checkpoint", "run", "--state", "state-run", "--port", port, "--device", "cpu", "--write-config", config]
    assert main_of(SERVE, argv)[0] == 0
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("serve")), "run", str(config)],
        cwd=rel_run["elsewhere"],
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline, health = time.time() + 420, None
        while health is None and time.time() < deadline and proc.poll() is None:
            with contextlib.suppress(OSError):
                status, text = request(port, "GET", "/health", timeout=10)
                health = json.loads(text) if status == 200 else None
            time.sleep(1)
        assert health is not None, "serve run did not come up"
        assert health["nodes"] == 140 and health["seq"] == 0, health
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # serve run's own shutdown, which stops the Ray it started
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
