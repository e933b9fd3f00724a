"""The trainer pool's cluster path: with RAY_ADDRESS set (as `ray job submit` sets it), each trainer of the one
pool (pipelines.core.trainers) runs on the node Ray picks instead of as a local child.

A small actor per trainer (`TrainerProcess`) starts the same `python -m trainer` flags (TrainerRun.flags) as a
subprocess of its worker, one GPU each where the cluster has GPUs, else one CPU (a local slot), and the memory
the local gate would expect of it (pipelines.core.memory_gate: 1.25 x the largest footprint a trainer of its view
reached, 1 GiB before any) from the node's Ray `memory` resource, so Ray starts no more trainers on a node than its
memory holds. The actor measures its trainer's footprint on the node and the driver feeds it to the gate. The subprocess
dies with the actor's worker (common.parent_death): a cancelled task, a driver killed even by SIGKILL (Ray
kills the actors it owned) or a lost node leaves no trainer behind. `ClusterTrainer` is the driver's handle,
shaped like the subprocess.Popen the local path returns, so the pool's loop is one for both. Its run folder
must be on storage every node sees (a shared filesystem; on one machine, the same disk): the trainer writes
trainer.log and its checkpoints there, and the driver reads them as it would a local child's.

A trainer whose node is lost starts again on another node, resuming its last.pt (RETRIES times); then it fails in
one line, written to its trainer.log so the pool's message names it. So does a trainer that no live node can hold
for UNPLACEABLE_S (its only GPU node lost). Never a hang: the driver's polls never block.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

log = logging.getLogger("pipelines")
REPO = Path(__file__).resolve().parents[2]
RETRIES = 1  # a lost node's trainer restarts on another once from its last.pt; a second loss fails the run
STOP_TIMEOUT_S = 5.0
MEASURE_S = 2.0  # the node measures its trainer as often as the local gate does
UNPLACEABLE_S = 60.0  # a trainer no live node can hold fails after this long (an autoscaler may add one meanwhile)
LOST_WAIT_S = 60.0  # a lost node's trainer starts again once Ray marks the node dead, or after this long
_resources: dict | None = None


def on_cluster() -> bool:
    """Whether the pool runs its trainers on a Ray cluster: RAY_ADDRESS set (`ray job submit` sets it)."""
    return bool(os.environ.get("RAY_ADDRESS"))


def attach():
    """The attached Ray module (preprocess.cluster.init_ray: probed, bounded, one line on a dead address)."""
    import ray

    from preprocess.cluster import init_ray

    init_ray()
    return ray


def cluster_resources() -> dict:
    """The cluster's resources, read once per recipe (a node joining later is used by Ray but not counted)."""
    global _resources
    if _resources is None:
        _resources = dict(attach().cluster_resources())
    return _resources


def uses_gpus(device_flag: str, resources: dict | None = None) -> bool:
    res = cluster_resources() if resources is None else resources
    return device_flag != "cpu" and res.get("GPU", 0) >= 1


def live_nodes() -> list[dict]:
    """Each live node's total resources (read afresh: a node may have been lost since the last trainer)."""
    return [dict(n["Resources"]) for n in attach().nodes() if n.get("Alive")]


def trainer_resources(device_flag: str, resources: dict, memory: int, nodes: list[dict]) -> dict:
    """What one trainer asks Ray for: one GPU where the cluster has GPUs (unless --device cpu), else one CPU, as
    a local slot is one core; and `memory` bytes of a node's memory resource (the gate's estimate), capped at
    the largest a node that could run it has, so that one always fits: the gate never stops a recipe either."""
    gpu = uses_gpus(device_flag, resources)
    out = {"num_gpus": 1} if gpu else {"num_cpus": 1}
    largest = max((n.get("memory", 0) for n in nodes if not gpu or n.get("GPU", 0) >= 1), default=0)
    if memory > 0 and largest > 0:
        out["memory"] = int(min(memory, largest))
    return out


def node_alive(node_id: str) -> bool:
    return any(n["NodeID"] == node_id and n.get("Alive") for n in attach().nodes())


def fits(options: dict, node: dict) -> bool:
    """Whether a node's total resources can ever hold a trainer asking `options` (trainer_resources')."""
    names = {"num_gpus": "GPU", "num_cpus": "CPU", "memory": "memory"}
    return all(node.get(names[k], 0) >= v for k, v in options.items())


def cluster_slots(device_flag: str, wanted: int = 0) -> int:
    """Trainers at once on the cluster: `wanted`, else one per GPU, else one per CPU (as the local slots)."""
    res = cluster_resources()
    return max(1, wanted or int(res.get("GPU", 0) if uses_gpus(device_flag) else res.get("CPU", 1)))


class TrainerProcess:
    """The actor on the node Ray picked: one trainer subprocess that dies with this worker."""

    def start(self, flags: list[str], log_path: str) -> str:
        import ray

        from pipelines.core.children import start_child

        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a") as f:
            # cwd: this checkout as the worker sees it (a job's working_dir, or the repository on PYTHONPATH)
            self.proc = start_child([sys.executable, "-m", "trainer", *flags], stdout=f, stderr=f, cwd=REPO)
        self.peak, self.measured = 0, float("-inf")
        return ray.get_runtime_context().get_node_id()

    def poll(self) -> tuple[int | None, int]:
        """(the trainer's exit code or None; the largest footprint measured on this node so far, bytes)."""
        from pipelines.core.memory_gate import tree_bytes

        code = self.proc.poll()
        if code is None and time.monotonic() - self.measured >= MEASURE_S:
            self.measured = time.monotonic()
            self.peak = max(self.peak, tree_bytes(self.proc.pid))
        return code, self.peak

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)


class ClusterTrainer:
    """The driver's handle on one trainer on the cluster, with the Popen methods the pool uses (poll, terminate,
    kill, wait, returncode, pid); every call returns at once but `wait`."""

    pid = None  # no local process: the node measures the trainer and reports its footprint (poll)
    _relaunch = None  # (the lost node's id or None, since when): lost, to start again (_relaunch_due)

    def __init__(self, key: str, job, device_flag: str, gate=None):
        from pipelines.core.memory_gate import default_gate

        self.key, self.job, self.returncode, self.retries = key, job, None, RETRIES
        self.device_flag, self.gate, self.view = device_flag, gate or default_gate(cluster=True), str(job.shards)
        self._launch(job)

    def _launch(self, job) -> None:
        ray = attach()
        env = ray.get_runtime_context().runtime_env or {}
        extra = {} if env.get("working_dir") else {"runtime_env": {"env_vars": {"PYTHONPATH": python_path()}}}
        memory = self.gate.expected(self.view)  # asked when it starts: what the recipe's trainers reached so far
        self.options = trainer_resources(self.device_flag, cluster_resources(), memory, live_nodes())
        self.actor = _actor_class(ray).options(scheduling_strategy="SPREAD", **self.options, **extra).remote()
        self.node, self._poll, self.t0, self._read = None, None, time.monotonic(), 0
        self._checked, self._unplaceable_since, self._relaunch = self.t0, None, None
        self._started = self.actor.start.remote([*job.flags(), "--no-progress"], str(job.log))

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if self._relaunch is not None and not self._relaunch_due():
            return None
        import ray

        try:
            if self.node is None:
                if not _ready(ray, self._started):
                    return self._unplaced()  # waiting for a node with the resources
                self.node = ray.get(self._started)
                log.info("trainer %s runs on node %s (%s; log: %s)", self.key, self.node, self.asks(), self.job.log)
            self._progress()
            if self._poll is None:
                self._poll = self.actor.poll.remote()
            if not _ready(ray, self._poll):
                return None
            (code, peak), self._poll = ray.get(self._poll), None
        except ray.exceptions.RayError as err:
            return self._lost(err)
        if peak:
            self.gate.note(self.view, peak)
        if code is not None:
            self.returncode = code
            took = time.monotonic() - self.t0
            log.info("trainer %s on node %s exited %d after %.1f s", self.key, self.node, code, took)
            ray.kill(self.actor)  # frees its CPU or GPU for the next trainer
        return code

    def _progress(self) -> None:
        """One line per validation the trainer logged since the last poll (its metrics.jsonl, on shared storage)."""
        metric = self.job.select_on or "mrr"
        scale = 1 if metric in ("rmse", "mae") else 100  # errors as they are, ranking metrics in percent
        for rec in new_validations(Path(self.job.run_dir) / "metrics.jsonl", self):
            value = rec.get(metric)
            shown = f"{scale * value:.2f}" if isinstance(value, (int, float)) else "-"
            epoch = rec.get("epoch")
            log.info("trainer %s on node %s: epoch %s, valid %s %s", self.key, self.node, epoch, metric, shown)

    def asks(self) -> str:
        """What the trainer asked Ray for, for the driver's log."""
        gib = self.options.get("memory", 0) / 2**30
        return ("1 GPU" if "num_gpus" in self.options else "1 CPU") + (f", {gib:.2f} GiB memory" if gib else "")

    def _unplaced(self) -> int | None:
        """None while some live node could hold the trainer (it waits for room); after UNPLACEABLE_S with none
        (a lost node was the only one with a GPU, or the memory asked), the trainer fails in one line."""
        now = time.monotonic()
        if now - self._checked < 5.0:  # one look at the nodes every 5 s, not every poll
            return None
        self._checked = now
        if any(fits(self.options, n) for n in live_nodes()):
            self._unplaceable_since = None
            return None
        self._unplaceable_since = self._unplaceable_since or now
        if now - self._unplaceable_since < UNPLACEABLE_S:
            return None
        import ray

        with contextlib.suppress(Exception):  # the actor is pending: nothing runs on any node yet
            ray.kill(self.actor)
        return self._fail(
            f"no live Ray node can hold this trainer ({self.asks()}) for {UNPLACEABLE_S:.0f} s; add such a node "
            "and rerun the command (it resumes from last.pt)"
        )

    def _lost(self, err) -> int | None:
        why = " ".join(str(err).split())[:200]
        where = f"node {self.node}" if self.node else "its node"
        if self.retries > 0:
            self.retries -= 1
            resumes = (Path(self.job.run_dir) / "last.pt").is_file()
            how = "from its last.pt" if resumes else "from the start (no last.pt yet)"
            log.warning("trainer %s: %s was lost (%s); it starts again on another node %s", self.key, where, why, how)
            self._relaunch, self._checked = (self.node, time.monotonic()), float("-inf")  # the next poll looks
            return None
        node = f"node {self.node}" if self.node else "node"
        return self._fail(
            f"the Ray {node} running this trainer was lost ({why}); rerun the command to resume from last.pt"
        )

    def _relaunch_due(self) -> bool:
        """Start a lost trainer again (flags(): --resume where last.pt exists) once Ray has marked its node dead, or
        after LOST_WAIT_S: until then Ray still lists the node alive, and SPREAD may place the trainer there again."""
        node, since = self._relaunch
        now = time.monotonic()
        if now - self._checked < 1.0:  # one look at the nodes a second, not every poll
            return False
        self._checked = now
        if node is not None and now - since < LOST_WAIT_S and node_alive(node):
            return False
        self._launch(replace(self.job, fresh=False))
        return True

    def _fail(self, line: str) -> int:
        """The trainer fails with `line`, written to its trainer.log so the pool's one-line message shows it."""
        with contextlib.suppress(OSError):  # a node lost before the trainer made its folder: the line still lands
            Path(self.job.log).parent.mkdir(parents=True, exist_ok=True)
            with open(self.job.log, "a") as f:
                f.write(line + "\n")
        self.returncode = 1
        return 1

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        import ray

        if self.returncode is not None:
            return
        if self._relaunch is not None:  # lost and not started again: nothing runs
            self.returncode = -sig
            return
        if self.node is not None and sig == signal.SIGTERM:
            self.actor.signal.remote(sig)  # the trainer's grace: wait() sees it end
            return
        if self.node is not None:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.get(self.actor.signal.remote(sig), timeout=STOP_TIMEOUT_S)
        ray.kill(self.actor)  # not started yet, or no grace left; its worker's death ends a trainer (PDEATHSIG)
        self.returncode = -sig

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"trainer {self.key}", timeout)
            time.sleep(0.2)
        return self.returncode


def _actor_class(ray):
    global _actor
    if _actor is None:
        _actor = ray.remote(max_restarts=0)(TrainerProcess)
    return _actor


_actor = None


def new_validations(path: Path, handle) -> list[dict]:
    """The validation records appended to a metrics.jsonl since handle._read (a byte offset it advances); a line
    still being written waits for the next poll. Test records are never shown mid-run."""
    try:
        with open(path, "rb") as f:
            f.seek(handle._read)
            data = f.read()
    except OSError:
        return []
    whole = data[: data.rfind(b"\n") + 1]
    handle._read += len(whole)
    out = []
    for line in whole.splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if rec.get("event") == "eval" and rec.get("split") == "valid":
                out.append(rec)
    return out


def _ready(ray, ref) -> bool:
    return bool(ray.wait([ref], timeout=0)[0])


def python_path() -> str:
    """The workers' PYTHONPATH: this checkout first, as preprocess.cluster gives the embedded Ray's workers."""
    return os.pathsep.join([str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
