"""Remote storage against a real S3 server (moto's server mode, its own process on 127.0.0.1)."""

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from common.datasets.spec import DatasetSpec
from common.storage import FsspecStorage, StorageError, open_storage
from tests.conftest import kill_driver_after
from tests.s3_server import s3_server  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]


def test_s3_objects_appear_whole_or_not_at_all(s3_server):
    bucket = s3_server.make_bucket("pencil-objects")
    st = open_storage(f"{bucket}/sets/a")
    assert isinstance(st, FsspecStorage) and st.url == "s3://pencil-objects/sets/a"
    payload = bytes(range(256)) * 4096  # 1 MiB
    with st.writer("train-v000-00000.tar") as f:
        f.write(payload[:1000])
        assert not st.exists("train-v000-00000.tar")
        f.write(payload[1000:])
    assert st.size("train-v000-00000.tar") == len(payload)
    assert st.read("train-v000-00000.tar") == payload
    with st.open_read("train-v000-00000.tar") as f:
        assert f.read(10) == payload[:10]
    with pytest.raises(OSError):
        with st.writer("train-v000-00001.tar") as f:
            f.write(payload)
            raise OSError(28, "No space left on device")
    assert not st.exists("train-v000-00001.tar")
    st.write_atomic("manifest.json", b'{"a": 1}')
    assert open_storage(f"{bucket}/sets/a").read("manifest.json") == b'{"a": 1}'  # another client sees it at once


def test_s3_missing_bucket_is_one_line(s3_server):
    st = open_storage("s3://pencil-no-such-bucket/x")
    assert not st.exists("manifest.json")
    with pytest.raises(StorageError, match=r"s3://pencil-no-such-bucket/x/m.json: the bucket does not exist"):
        st.write_atomic("m.json", b"{}")
    with pytest.raises(StorageError, match="the bucket does not exist"):
        with st.writer("m.json") as f:
            f.write(b"{}")


def test_s3_wrong_endpoint_is_one_line(s3_server):
    # A client whose endpoint points nowhere gets one line naming the URL and what to check.
    code = "from common.storage import open_storage\nopen_storage('s3://pencil-objects/x').exists('manifest.json')\n"
    env = {
        **s3_server.client_env(),
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_MAX_ATTEMPTS": "1",
        "AWS_RETRY_MODE": "standard",
    }
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "s3://pencil-objects/x/manifest.json" in last and "AWS_ENDPOINT_URL" in last


# ---------------------------------------------------------------------------- end to end through S3
# preprocess --out s3://... (Ray workers write objects directly), cache, resume after a kill, corrupt
# objects caught and repaired, and the trainer streaming the set from the server.
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402

import numpy as np  # noqa: E402

from common.shards import MANIFEST, read_manifest  # noqa: E402
from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig  # noqa: E402
from preprocess.job import run_job  # noqa: E402

BUCKET = "pencil-e2e"


@pytest.fixture(scope="module")
def small_graph(tmp_path_factory):
    """A 300-node random graph as an edge list: a few hundred links per split, seconds to sample."""
    from common.datasets import DatasetSpec, load_dataset
    from tests.test_faults import write_small_graph_csv

    return load_dataset(DatasetSpec(str(write_small_graph_csv(tmp_path_factory.mktemp("graph")))))


@pytest.fixture(scope="module")
def s3_ray(s3_server):
    """An embedded Ray started after the S3 variables are set, so its workers reach the server."""
    import ray

    from preprocess.job import init_ray

    if os.environ.get("RAY_ADDRESS"):
        pytest.skip("RAY_ADDRESS is set; these tests start their own embedded Ray")
    if ray.is_initialized():
        ray.shutdown()  # a Ray started before the server's variables were set cannot reach it
    init_ray(num_cpus=2)
    s3_server.make_bucket(BUCKET)
    yield s3_server
    ray.shutdown()


def _config(out: str) -> PreprocessConfig:
    return PreprocessConfig(
        data=DatasetSpec("small"),
        sampling=SamplingConfig(1, 3),
        out=out,
        num_cpus=2,
        candidates=CandidateConfig(views=1),
        links_per_shard=256,
        links_per_block=64,
    )


def _objects(url: str) -> dict[str, bytes]:
    st = open_storage(url)
    return {path.rsplit("/", 1)[1]: st.read(path.rsplit("/", 1)[1]) for path in st.fs.find(st.root)}


@pytest.fixture(scope="module")
def s3_set(s3_ray, small_graph):
    return run_job(_config(f"s3://{BUCKET}/ref"), small_graph)


def test_preprocess_writes_a_complete_set_to_s3(s3_set, small_graph):
    url = s3_set.location
    assert url.startswith(f"s3://{BUCKET}/ref/small/")
    manifest = read_manifest(url)
    assert manifest.root == url and len(manifest.shards) >= 10
    objects = _objects(url)
    listed = {r["name"] for r in manifest.shards}
    # Exactly the set's files: shards, the files the manifest lists with their sha256 (queries, graph arrays,
    # the node-id mapping of an edge list), the manifest; nothing temporary.
    assert set(objects) == listed | set(manifest.files) | {MANIFEST}, set(objects) ^ (listed | set(manifest.files))
    assert any(n.endswith("-queries.npz") for n in manifest.files) and "node_ids.parquet" in manifest.files
    for name, rec in manifest.files.items():
        assert len(objects[name]) == rec["bytes"] and hashlib.sha256(objects[name]).hexdigest() == rec["sha256"]
    for rec in manifest.shards:
        data = objects[rec["name"]]
        assert len(data) == rec["bytes"] and hashlib.sha256(data).hexdigest() == rec["sha256"]
    assert run_job(_config(f"s3://{BUCKET}/ref"), small_graph).cached


@pytest.mark.slow  # the repair test below already runs the resume path through S3; this adds a kill
def test_resume_after_a_killed_run_on_s3(s3_set, small_graph, monkeypatch):
    config = _config(f"s3://{BUCKET}/killed")
    with monkeypatch.context() as m:
        kill_driver_after(m, 3)
        with pytest.raises(RuntimeError, match="simulated kill"):
            run_job(config, small_graph)
    url = s3_set.location.replace("/ref/", "/killed/")
    partial = _objects(url)
    assert MANIFEST not in partial and 3 <= sum(n.endswith(".tar") for n in partial) < len(
        read_manifest(s3_set.location).shards
    )
    result = run_job(config, small_graph)
    assert result.summary["shards_reused"] >= 3 and result.summary["shards_sampled"] > 0
    assert _same_set(url, s3_set.location)  # byte-identical to the uninterrupted run


def _same_set(a: str, b: str) -> bool:
    """Every object byte-identical; manifests equal up to where the set lives (config.out)."""
    oa, ob = _objects(a), _objects(b)
    ma, mb = (json.loads(o.pop(MANIFEST)) for o in (oa, ob))
    return oa == ob and ma["shards"] == mb["shards"] and ma["graphs"] == mb["graphs"]


def _flip(st, name: str, at: float = 0.4) -> None:
    data = bytearray(st.read(name))
    i = int(len(data) * at)
    data[i : i + 64] = bytes(b ^ 0xFF for b in data[i : i + 64])
    st.write_atomic(name, bytes(data))


def _copy_set(src_url: str, dst_url: str) -> None:
    st = open_storage(dst_url)
    for name, data in _objects(src_url).items():
        st.write_atomic(name, data)


def test_corrupt_and_truncated_objects_are_caught_and_repaired(s3_set, small_graph, caplog):
    url = s3_set.location.replace("/ref/", "/corrupt/")
    _copy_set(s3_set.location, url)
    st = open_storage(url)
    _flip(st, "train-v000-00002.tar")
    st.write_atomic("train-v000-00005.tar", st.read("train-v000-00005.tar")[:5000])
    with caplog.at_level(logging.WARNING, logger="preprocess.job"):
        result = run_job(_config(f"s3://{BUCKET}/corrupt"), small_graph)
    assert not result.cached and result.summary["shards_sampled"] == 2
    notes = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"{url}/train-v000-00002.tar: checksum mismatch" in n for n in notes), notes
    assert any(f"{url}/train-v000-00005.tar: size 5000 bytes" in n for n in notes), notes
    assert _same_set(url, s3_set.location)


def _train(s3_server, tmp_path, shards: str, out: str) -> subprocess.CompletedProcess:
    env = {**s3_server.client_env(), "PENCIL_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [
        sys.executable,
        "-m",
        "trainer",
        "--shards",
        shards,
        "--preset",
        "tiny",
        "--out",
        str(tmp_path / out),
        "--max-steps",
        "4",
        "--num-workers",
        "1",
        "--no-progress",
        "--eval-splits",
        "valid",
        "--device",
        "cpu",
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_trainer_streams_from_s3(s3_set, s3_server, tmp_path):
    """A run streamed from S3 is the run on a local copy of the same set, metric for metric and weight for weight
    (4 steps on a random graph learn nothing measurable, so the reference is the local run, not chance)."""
    import torch

    proc = _train(s3_server, tmp_path, s3_set.location, "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 4
    # The graph arrays were fetched once into the local cache (memory-mapped from there).
    assert any(p.name.endswith("graph-train-indptr.npy") for p in (tmp_path / "cache").iterdir())
    _copy_set(s3_set.location, str(tmp_path / "local-set"))
    ref = _train(s3_server, tmp_path, str(tmp_path / "local-set"), "local-run")
    assert ref.returncode == 0, ref.stderr[-3000:]
    local = json.loads((tmp_path / "local-run" / "summary.json").read_text())
    assert summary["valid"] == local["valid"] and summary["valid"]["mrr"] > 0
    got, want = (torch.load(tmp_path / r / "last.pt", weights_only=True)["model"] for r in ("run", "local-run"))
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got)


@pytest.mark.slow  # tests/test_faults.py checks the same one line on a local set in the default run
def test_trainer_names_a_corrupt_s3_object_in_one_line(s3_set, s3_server, tmp_path):
    url = s3_set.location.replace("/ref/", "/badtrain/")
    _copy_set(s3_set.location, url)
    for name in sorted(n for n in _objects(url) if n.startswith("train-")):
        _flip(open_storage(url), name, at=0.03)  # inside the first block of every training shard
    proc = _train(s3_server, tmp_path, url, "badrun")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr and f"{url}/train-v000-" in last and "corrupt" in last, proc.stderr[-2000:]


@pytest.mark.slow
def test_pipelines_run_with_shards_on_s3(s3_ray, small_graph, tmp_path):
    """pipelines.run --shards s3://...: preprocess writes there, each seed trains from there."""
    csv = tmp_path / "small.csv"
    edges = small_graph.splits["train"].pos  # any graph will do; the run loads it by path
    csv.write_text("src,dst\n" + "\n".join(f"{a},{b}" for a, b in edges) + "\n")
    cmd = [
        sys.executable,
        "-m",
        "pipelines.run",
        "--dataset",
        str(csv),
        "--preset",
        "tiny",
        "--seeds",
        "0",
        "--out",
        str(tmp_path / "results"),
        "--shards",
        f"s3://{BUCKET}/pipeline",
        "--num-cpus",
        "2",
        "--views",
        "1",
        "--train-arg=--max-steps=5",
        "--train-arg=--num-workers=0",
        "--train-arg=--no-progress",
    ]
    env = {**s3_ray.client_env(), "PENCIL_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "results" / "small" / "tiny" / "results.json").read_text())
    assert [r["seed"] for r in results["runs"]] == [0]
    (key_dir,) = open_storage(f"s3://{BUCKET}/pipeline").fs.ls(f"{BUCKET}/pipeline/small")
    assert read_manifest(f"s3://{key_dir}").shards


@pytest.mark.slow
def test_driver_kill_then_rerun_on_s3_is_byte_identical(s3_set, s3_ray, small_graph, tmp_path):
    """kill -9 of a `python -m preprocess --out s3://...` driver mid-run, then the same command again."""
    import signal
    import tempfile
    import time

    from common.storage import SPOOL_PREFIX

    csv = tmp_path / "small.csv"
    edges = np.concatenate([small_graph.splits[s].pos for s in ("train", "valid", "test")])
    csv.write_text("src,dst\n" + "\n".join(f"{a},{b}" for a, b in edges) + "\n")
    out = f"s3://{BUCKET}/kill9"
    cmd = [
        sys.executable,
        "-m",
        "preprocess",
        "--dataset",
        str(csv),
        "--sampling",
        "1,3",
        "--views",
        "4",
        "--out",
        out,
        "--num-cpus",
        "2",
        "--links-per-shard",
        "256",
        "--block-size",
        "64",
    ]
    env = s3_ray.client_env()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    fs = open_storage(out).fs
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            found = (
                [p for p in fs.find(f"{BUCKET}/kill9") if p.endswith(".tar")] if fs.exists(f"{BUCKET}/kill9") else []
            )
            if len(found) >= 3:
                break
            time.sleep(0.2)
        else:
            pytest.fail("no shards appeared")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the killed driver's own Ray processes (its session group)
        except ProcessLookupError:
            pass
    objects = [p for p in fs.find(f"{BUCKET}/kill9")]
    assert not any(p.endswith(MANIFEST) for p in objects)
    rerun = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    location = rerun.stdout.strip().splitlines()[-1].split(": ", 1)[1]
    reference = subprocess.run(
        [*cmd[: cmd.index("--out") + 1], f"s3://{BUCKET}/kill9-ref", *cmd[cmd.index("--out") + 2 :]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert _same_set(location, reference.stdout.strip().splitlines()[-1].split(": ", 1)[1])
    from common.storage import _alive

    spools = Path(tempfile.gettempdir()).glob(f"{SPOOL_PREFIX}*")
    stale = [p for p in spools if not _alive(int(p.name[len(SPOOL_PREFIX) :].split("-", 1)[0]))]
    assert stale == []  # local spools of the killed workers were cleared by the rerun (or never left)
