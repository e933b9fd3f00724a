"""The cluster path's parts that need no cluster: what a trainer asks Ray for (one GPU where the cluster has GPUs,
else one CPU; the memory gate's estimate, capped at the largest node), the node's measurement feeding the gate,
and the one-line failures (a node lost with no retry left, no live node able to hold a trainer), never a hang.
The cluster itself is exercised end to end in tests/test_cluster_run.py (slow)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.core import memory_gate, ray_pool, trainers
from pipelines.core.memory_gate import GiB, default_gate
from pipelines.core.ray_pool import ClusterTrainer, TrainerProcess, fits, on_cluster, trainer_resources
from pipelines.core.trainers import TrainerRun

GPU_CLUSTER = {"CPU": 48.0, "GPU": 8.0, "memory": 120 * GiB}
GPU_NODES = [{"CPU": 16.0, "memory": 60 * GiB}, {"CPU": 16.0, "GPU": 4.0, "memory": 30 * GiB}]
CPU_NODES = [{"CPU": 8.0, "memory": 20 * GiB}, {"CPU": 4.0, "memory": 6 * GiB}]


def test_a_trainer_asks_one_gpu_where_the_cluster_has_gpus_else_one_cpu_as_a_local_slot():
    for device in ("auto", "cuda"):
        assert trainer_resources(device, GPU_CLUSTER, 2 * GiB, GPU_NODES) == {"num_gpus": 1, "memory": 2 * GiB}
    # --device cpu on a GPU cluster, and any device on a cluster without GPUs: one CPU, one core as locally
    assert trainer_resources("cpu", GPU_CLUSTER, 2 * GiB, GPU_NODES) == {"num_cpus": 1, "memory": 2 * GiB}
    assert trainer_resources("auto", {"CPU": 12.0}, 2 * GiB, CPU_NODES) == {"num_cpus": 1, "memory": 2 * GiB}


def test_the_memory_asked_is_capped_at_the_largest_node_that_could_run_the_trainer():
    # a GPU trainer fits only the GPU node (30 GiB), however much more the CPU-only node has
    assert trainer_resources("auto", GPU_CLUSTER, 50 * GiB, GPU_NODES)["memory"] == 30 * GiB
    assert trainer_resources("cpu", GPU_CLUSTER, 70 * GiB, GPU_NODES)["memory"] == 60 * GiB
    assert "memory" not in trainer_resources("cpu", {"CPU": 2.0}, 2 * GiB, [{"CPU": 2.0}])  # none reported
    assert fits({"num_gpus": 1, "memory": 30 * GiB}, GPU_NODES[1]) and not fits({"num_gpus": 1}, GPU_NODES[0])
    assert not fits({"num_cpus": 1, "memory": 7 * GiB}, CPU_NODES[1])


def test_the_cluster_gate_holds_nothing_here_and_learns_each_views_footprint_from_the_nodes(monkeypatch):
    monkeypatch.setattr(memory_gate, "_GATES", {})  # this test's own recipe
    g = default_gate(cluster=True)
    assert g is default_gate(cluster=True) and g is not default_gate()  # one per recipe, carried search to seeds
    views = {"a": "deep", "b": "deep"}
    assert g.allows("b", ["a"], views)  # this machine's memory says nothing of the nodes': Ray holds instead
    g.note("deep", 3 * GiB)
    g.note("deep", 2 * GiB)  # the largest stays
    assert g.expected("deep") == int(3.75 * GiB)  # what the next trainer of it asks Ray for


def test_the_node_measures_its_trainers_process_tree_at_the_gates_pace(tmp_path):
    """TrainerProcess.poll on the node: the trainer's exit code and its largest footprint so far."""
    proc = TrainerProcess()
    proc.proc = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(50 << 20); time.sleep(60)"])
    proc.peak, proc.measured = 0, float("-inf")
    try:
        deadline = time.time() + 30
        while proc.poll()[1] < 50 << 20 and time.time() < deadline:
            proc.measured = float("-inf")  # measure again now, not MEASURE_S later
            time.sleep(0.2)
        code, peak = proc.poll()
        assert code is None and peak >= 50 << 20
    finally:
        proc.signal(9)
        proc.proc.wait()
    assert proc.poll() == (-9, peak)


def lost_handle(tmp_path: Path) -> ClusterTrainer:
    """A handle whose node is gone and whose retries are spent (no Ray: _lost needs none then)."""
    handle = ClusterTrainer.__new__(ClusterTrainer)
    job = TrainerRun(run_dir=tmp_path / "seed1", shards="s", preset="tiny", seed=1, protocol="original")
    handle.key, handle.job, handle.returncode, handle.retries, handle.node = "seed 1", job, None, 0, "ab12"
    return handle


def test_a_lost_node_with_no_retry_left_fails_the_trainer_in_one_line(tmp_path, monkeypatch):
    handle = lost_handle(tmp_path)
    assert handle._lost(RuntimeError("The actor died\nbecause its node died")) == 1 and handle.poll() == 1
    monkeypatch.setattr(trainers, "_start", lambda key, job: handle)
    with pytest.raises(trainers.TrainerError) as err:
        trainers.run_trainers({"seed 1": handle.job}, 1)
    (line,) = str(err.value).splitlines()
    assert "the Ray node ab12 running this trainer was lost (The actor died because its node died)" in line
    assert str(handle.job.log) in line


def test_without_ray_address_the_pool_stays_local(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not on_cluster() and trainers.device_kind("cpu") == "cpu" and trainers.trainer_slots("cpu", 3) == 3


def test_the_driver_shows_each_validation_once_and_never_a_test_score(tmp_path, caplog):
    """Progress from the trainer's metrics.jsonl on shared storage: each validation record once, as it lands; a
    half-written line waits for the next poll; test records are not shown mid-run."""
    handle = lost_handle(tmp_path)
    handle.job.run_dir.mkdir()
    handle._read, path = 0, handle.job.run_dir / "metrics.jsonl"
    valid = '{"event": "eval", "epoch": 0, "split": "valid", "mrr": 0.2319}\n'
    test = '{"event": "eval", "epoch": 0, "split": "test", "mrr": 0.9}\n'
    path.write_text('{"event": "train", "epoch": 0, "loss": 0.6}\n' + valid + test + '{"event": "eval", "ep')
    caplog.set_level("INFO", logger="pipelines")
    handle._progress()
    assert [r.getMessage() for r in caplog.records] == ["trainer seed 1 on node ab12: epoch 0, valid mrr 23.19"]
    with open(path, "a") as f:
        f.write('och": 1, "split": "valid", "mrr": 0.25}\n')
    caplog.clear()
    handle._progress()
    handle._progress()
    assert [r.getMessage() for r in caplog.records] == ["trainer seed 1 on node ab12: epoch 1, valid mrr 25.00"]


def test_a_trainer_no_live_node_can_hold_fails_in_one_line_instead_of_waiting_for_ever(tmp_path, monkeypatch):
    """Its only GPU node lost: Ray would keep the actor pending for good; the driver gives up after UNPLACEABLE_S."""
    handle = lost_handle(tmp_path)
    handle.node, handle.options, handle.actor = None, {"num_gpus": 1, "memory": 2 * GiB}, None
    handle._checked, handle._unplaceable_since = float("-inf"), None
    monkeypatch.setattr(ray_pool, "live_nodes", lambda: [{"CPU": 4.0, "memory": 8 * GiB}])
    assert handle._unplaced() is None  # the first look starts the clock
    handle._checked, handle._unplaceable_since = float("-inf"), time.monotonic() - ray_pool.UNPLACEABLE_S
    assert handle._unplaced() == 1 and handle.poll() == 1
    (line,) = handle.job.log.read_text().splitlines()
    assert line.startswith("no live Ray node can hold this trainer (1 GPU, 2.00 GiB memory) for 60 s")
    monkeypatch.setattr(ray_pool, "live_nodes", lambda: GPU_NODES)  # a node with room: it waits, however long
    handle.returncode, handle._checked, handle._unplaceable_since = None, float("-inf"), 0.0
    assert handle._unplaced() is None and handle._unplaceable_since is None


def test_a_lost_nodes_trainer_starts_again_only_once_ray_has_marked_the_node_dead(tmp_path, monkeypatch):
    """Ray lists a killed node alive for some seconds; started again at once, SPREAD could place the trainer on
    it again and lose its one retry (seen on the two-node cluster). Stopped meanwhile, nothing starts."""
    handle = lost_handle(tmp_path)
    handle.retries, alive, launched = 1, [True], []
    monkeypatch.setattr(ray_pool, "node_alive", lambda node: node == "ab12" and alive[0])
    monkeypatch.setattr(handle, "_launch", lambda job: launched.append(job.fresh))
    assert handle._lost(RuntimeError("connection reset")) is None and handle.retries == 0
    assert handle.poll() is None and launched == []  # still listed alive: it waits
    alive[0] = False
    handle._checked = float("-inf")  # the next look (once a second)
    assert handle._relaunch_due() and launched == [False]  # marked dead: it starts again, resuming
    handle._relaunch, launched[:] = ("ab12", time.monotonic() - ray_pool.LOST_WAIT_S), []
    alive[0], handle._checked = True, float("-inf")
    assert handle._relaunch_due() and launched == [False]  # listed alive for LOST_WAIT_S: it starts again anyway
    handle._relaunch, handle.returncode = ("ab12", time.monotonic()), None
    handle.terminate()
    assert handle.returncode == -15 and handle.poll() == -15 and launched == [False]
