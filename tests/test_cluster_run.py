"""`pencil run` on a Ray cluster (RAY_ADDRESS set): a real local cluster of two nodes on this machine
(bench/local_ray_cluster.py), the driver a real `python -m pipelines run` process. Its trainers land on both nodes, it
gives the local run's choice and numbers (CPU, same seeds), a rerun trains nothing, a killed driver leaves no
trainer behind, a node lost mid-search does not stop the run (its trainer resumes its last.pt on the other), and
a node whose memory holds one trainer runs one at a time."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.graph_families import geo_splits, write_splits
from common.parent_death import naming
from pipelines.core.memory_gate import GiB
from tests.conftest import needs_ray

pytestmark = [pytest.mark.slow, needs_ray]
ON_NODE = re.compile(r"trainer (.+?) runs on node ([0-9a-f]+)")
PLACED_OR_EXITED = re.compile(r"trainer (.+?) (runs on|on) node ([0-9a-f]+)(?: \(| exited)")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from bench.local_ray_cluster import local_cluster

    logs = tmp_path_factory.mktemp("cluster-logs")
    with local_cluster(logs, nodes=2, num_cpus=1) as c:
        yield c


@pytest.fixture(scope="module")
def geo(tmp_path_factory):
    root = tmp_path_factory.mktemp("geo")
    return write_splits(root / "geo.csv", geo_splits())


def argv(csv: Path, out: Path, *more: str, shards: str | None = None) -> list[str]:
    return [
        *(sys.executable, "-m", "pipelines", "run", "--dataset", str(csv), "--nodes", str(csv.with_name("nodes.csv"))),
        *("--seeds", "0,1,2", "--epochs", "3", "--device", "cpu", "--out", str(out)),
        *("--shards", shards or str(csv.parent / "shards"), "--num-cpus", "1"),
        *("--train-arg=--hidden=32", "--train-arg=--ffn=64", "--train-arg=--heads=2", *more),
    ]


def run(csv: Path, out: Path, env: dict) -> tuple[int, str]:
    done = subprocess.run(argv(csv, out), env=env, capture_output=True, text=True, timeout=900)
    return done.returncode, done.stdout + done.stderr


def local_env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}


def untimed(x):
    """results.json without its wall seconds, which follow the machine's load."""
    if isinstance(x, dict):
        return {k: untimed(v) for k, v in x.items() if not k.endswith("time_s")}
    return [untimed(v) for v in x] if isinstance(x, list) else x


def test_under_ray_job_submit_the_trainers_run_on_the_cluster(ray_head, geo, tmp_path):
    """First in this module: its own one-node head (the ray_head fixture), before the two-node cluster starts."""
    job = ray_head.submit("python", *argv(geo, tmp_path / "job")[1:], timeout=900)  # the job's own python
    log = job.stdout + job.stderr
    assert job.returncode == 0, log[-3000:]
    assert {"seed 0", "seed 1", "seed 2"} <= {key for key, _ in ON_NODE.findall(log)}, log[-3000:]
    assert (tmp_path / "job" / "geo" / "auto" / "results.json").is_file()


def most_at_once(log: str) -> dict:
    """{node id: the most trainers running on it at once}, from the driver's lines in their order: `trainer K runs
    on node N (...)` when it starts, `trainer K on node N exited ...` when it ends."""
    running, most = {}, {}
    for key, what, node in PLACED_OR_EXITED.findall(log):
        on = running.setdefault(node, set())
        on.add(key) if what == "runs on" else on.discard(key)
        most[node] = max(most.get(node, 0), len(on))
    return most


def test_a_node_whose_memory_holds_one_trainer_runs_its_trainers_one_at_a_time(geo, tmp_path):
    """Before the two-node cluster starts. One node of 2 CPUs whose Ray memory resource (1.75 GiB) holds one
    trainer's request (the memory gate's estimate, 1.25 GiB before any was measured) but not two: the pool has
    two slots (2 CPUs), and Ray starts the second trainer only when the first has ended."""
    from bench.local_ray_cluster import local_cluster

    with local_cluster(tmp_path, nodes=1, num_cpus=2, memory=int(1.75 * GiB)) as one:
        done = subprocess.run(argv(geo, tmp_path / "out"), env=one.env, capture_output=True, text=True, timeout=900)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert re.search(r"trainer seed 0 runs on node [0-9a-f]+ \(1 CPU, 1\.\d\d GiB memory;", log), log[-3000:]
    most = most_at_once(log)
    assert list(most.values()) == [1], f"most at once: {most}"  # never two at once on the one node


def test_shard_sets_in_an_object_store_serve_the_trainers_on_every_node(geo, tmp_path):
    """Before the two-node cluster starts. `--shards s3://` on moto's server, standing in for the store every node
    reads; each node (and the driver) has its endpoint and credentials, as each machine of a cluster has its own.
    The shard sets are built on the cluster into the store, and the trainers on both nodes read them there. A fixed
    preset: the seeds alone (the search's blend reads the store many times over, minutes on moto's server)."""
    from bench.local_ray_cluster import local_cluster
    from tests.s3_server import S3Server

    server = S3Server()
    try:
        bucket = server.make_bucket("pencil-cluster")
        with local_cluster(tmp_path, nodes=2, num_cpus=1, env_vars=server.env) as two:
            nodes = set(two.node_ids().values())
            cmd = argv(geo, tmp_path / "out", "--preset", "general", shards=f"{bucket}/shards")
            done = subprocess.run(cmd, env=two.env, capture_output=True, text=True, timeout=900)
    finally:
        server.stop()
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert {node for _, node in ON_NODE.findall(log)} == nodes, log[-3000:]
    seeds = tmp_path / "out" / "geo" / "general" / "original"
    for seed in (0, 1, 2):
        assert json.loads((seeds / f"seed{seed}" / "trainer_run.json").read_text())["shards"].startswith(bucket)


def test_trainers_land_on_both_nodes_with_the_local_runs_choice_and_numbers_and_a_rerun_trains_nothing(
    cluster, geo, tmp_path
):
    rc, local_log = run(geo, tmp_path / "local", local_env())
    assert rc == 0, local_log[-3000:]
    assert not ON_NODE.search(local_log)  # no cluster: the local children, as before
    rc, log = run(geo, tmp_path / "cluster", cluster.env)
    assert rc == 0, log[-3000:]
    placed = ON_NODE.findall(log)
    assert {node for _, node in placed} == set(cluster.node_ids().values()), placed  # both nodes trained
    assert {"seed 0", "seed 1", "seed 2"} <= {key for key, _ in placed}
    local, remote = tmp_path / "local" / "geo" / "auto", tmp_path / "cluster" / "geo" / "auto"
    assert (local / "original" / "chosen.json").read_text() == (remote / "original" / "chosen.json").read_text()
    assert untimed(json.loads((local / "results.json").read_text())) == untimed(
        json.loads((remote / "results.json").read_text())
    )

    before = (remote / "results.json").read_bytes()
    rc, again = run(geo, tmp_path / "cluster", cluster.env)
    assert rc == 0, again[-3000:]
    assert not ON_NODE.search(again) and (remote / "results.json").read_bytes() == before  # nothing trained


def start(csv: Path, out: Path, env: dict, log: Path) -> subprocess.Popen:
    with open(log, "w") as f:
        return subprocess.Popen(argv(csv, out), env=env, stdout=f, stderr=subprocess.STDOUT)


def wait_for(log: Path, pattern: str, driver: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not re.search(pattern, log.read_text()):
        assert driver.poll() is None, log.read_text()[-3000:]
        assert time.time() < deadline, log.read_text()[-3000:]
        time.sleep(0.5)


def trainers_of(out: Path) -> list[int]:
    """The live processes naming the run's folder (its trainers), other than this test's."""
    return [pid for pid in naming(str(out)) if pid != os.getpid()]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_driver_leaves_no_trainer_on_the_cluster(cluster, geo, tmp_path, sig):
    out, log = tmp_path / "killed", tmp_path / "driver.log"
    driver = start(geo, out, cluster.env, log)
    try:
        wait_for(log, ON_NODE.pattern, driver)
        assert trainers_of(out)  # a trainer runs on a node
        driver.send_signal(sig)
        driver.wait(timeout=60)
        deadline = time.time() + 30
        while trainers_of(out) and time.time() < deadline:
            time.sleep(1)
        assert trainers_of(out) == []
    finally:
        driver.kill()
        driver.wait()


def checkpointed_candidate(log: Path, node: str, driver: subprocess.Popen, timeout: float = 300) -> str:
    """The first search candidate running on `node` whose run folder holds a last.pt (its key)."""
    placed = re.compile(rf"trainer (.+?) runs on node {node} \(.*?; log: (.+/search/.+)\)")
    deadline = time.time() + timeout
    while True:
        text = log.read_text()
        for key, path in placed.findall(text):
            # a candidate promoted to the next rung runs again under its key: its latest start, not yet ended
            running = text.rfind(f"trainer {key} runs on node {node}") > text.rfind(
                f"trainer {key} on node {node} exited"
            )
            if running and (Path(path).parent / "last.pt").is_file():
                return key
        assert driver.poll() is None and time.time() < deadline, text[-3000:]
        time.sleep(0.05)


def test_a_node_lost_mid_search_restarts_its_trainer_from_its_last_pt_on_another(cluster, geo, tmp_path):
    """Last in this module: it kills the cluster's second node mid-search, while a candidate trains there that has
    written a last.pt (every step here). The trainer the node's death takes (that one, or, when it ends in the
    seconds Ray needs to mark the node dead, the next one placed there) starts again on the head, from its
    last.pt when it has one; the run completes with a choice."""
    node2 = cluster.node_ids()["node2"]
    out, log = tmp_path / "lost", tmp_path / "driver.log"
    with open(log, "w") as f:
        driver = subprocess.Popen(
            argv(geo, out, "--train-arg=--checkpoint-every=1"), env=cluster.env, stdout=f, stderr=f
        )
    try:
        checkpointed_candidate(log, node2, driver)
        cluster.kill_node(1)
        assert driver.wait(timeout=600) == 0, log.read_text()[-3000:]
    finally:
        driver.kill()
        driver.wait()
    text = log.read_text()
    lost = re.search(
        rf"trainer (\S+): (?:node {node2}|its node) was lost .*starts again on another node from "
        r"(its last\.pt|the start \(no last\.pt yet\))",
        text,
    )
    assert lost, text[-3000:]
    key = lost.group(1)
    assert re.search(rf"trainer {re.escape(key)} on node (?!{node2})[0-9a-f]+ exited 0", text), text[-3000:]
    assert (out / "geo" / "auto" / "original" / "chosen.json").is_file()
