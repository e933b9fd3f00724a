"""A throwaway local Ray cluster of several nodes on this machine: a `ray start --head --block` and more
`ray start --address … --block` raylets, each our child in its own session, with `--num-cpus` each (and, if
given, `--memory`: the node's Ray memory resource, what a trainer's memory request is placed against) and a custom
resource naming it ({"node2": 1}, ...). Every port is a free one; nodes are stopped (or killed, to lose one)
by signalling their process group (bench.local_ray.stop_group), never with `ray stop`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.local_ray import ATTEMPTS, REPO, stop_group
from pipelines.core.ray_head import free_ports

START_TIMEOUT_S = 120


@dataclass
class LocalCluster:
    address: str  # the GCS's host:port, what RAY_ADDRESS names
    env: dict = field(repr=False)  # a driver's environment: RAY_ADDRESS, this checkout first on PYTHONPATH
    nodes: list = field(repr=False)  # the `ray start` processes, head first

    def node_ids(self) -> dict:
        """{custom resource naming the node ("head", "node2", ...): its Ray node id}, of the live nodes."""
        probe = (
            "import json, ray; ray.init(logging_level='ERROR'); "
            "print(json.dumps([[n['NodeID'], n['Resources']] for n in ray.nodes() if n['Alive']]))"
        )
        out = subprocess.run([sys.executable, "-c", probe], env=self.env, capture_output=True, text=True, timeout=120)
        named = {}
        for node_id, res in json.loads(out.stdout.strip().splitlines()[-1]):
            name = next((r for r in res if r == "head" or re.fullmatch(r"node\d+", r)), None)
            named[name] = node_id
        return named

    def kill_node(self, index: int) -> None:
        """Lose node `index` (not the head) at once: SIGKILL to its raylet's process group."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.nodes[index].pid, signal.SIGKILL)
        self.nodes[index].wait()


def _ray_cmd() -> str:
    ray_bin = Path(sys.executable).with_name("ray")
    return str(ray_bin) if ray_bin.exists() else "ray"


def _node(args: list, env: dict, log: Path) -> subprocess.Popen:
    ports = free_ports(7)
    names = (
        "node-manager-port",
        "object-manager-port",
        "metrics-export-port",
        "dashboard-agent-listen-port",
        "dashboard-agent-grpc-port",
        "runtime-env-agent-port",
        "ray-client-server-port",
    )
    flags = [f"--{n}={p}" for n, p in zip(names, ports, strict=True)]
    with open(log, "w") as f:
        return subprocess.Popen(
            [_ray_cmd(), "start", "--block", "--disable-usage-stats", *flags, *args],
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@contextlib.contextmanager
def local_cluster(
    logs: Path, nodes: int = 2, num_cpus: int = 1, memory: int | None = None, env_vars: dict | None = None
):
    """A head and `nodes - 1` more raylets of `num_cpus` each (and `memory` bytes of Ray's memory resource each,
    else what Ray detects); yields a LocalCluster once all have joined. `env_vars`: more variables for every node
    and the driver (a shared store's endpoint and credentials, as each machine of a real cluster has its own).
    A start that fails is stopped and tried again on fresh ports, up to ATTEMPTS times: on a loaded machine
    `ray start` gives a raylet 30 s to register (not configurable) and a port picked free can be taken."""
    env = {k: v for k, v in {**os.environ, **(env_vars or {})}.items() if k != "RAY_ADDRESS"}
    env["RAY_AUTH_MODE"] = "disabled"  # a throwaway localhost cluster; nodes and clients must agree
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    for attempt in range(1, ATTEMPTS + 1):
        ray_tmp = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Ray's unix socket paths must fit 107 bytes
        procs = []
        try:
            cluster = _start(procs, env, ray_tmp, logs, nodes, num_cpus, memory)
        except BaseException as err:  # whatever stopped the start, its processes go; only a failed start is retried
            _stop(procs, ray_tmp)
            if not isinstance(err, RuntimeError) or attempt == ATTEMPTS:
                raise
            continue
        try:
            yield cluster
        finally:
            _stop(procs, ray_tmp)
        return


def _start(procs: list, env: dict, ray_tmp: str, logs: Path, nodes: int, num_cpus: int, memory) -> LocalCluster:
    """Start the nodes into `procs` (head first) and wait until all have joined."""
    (gcs,) = free_ports(1)
    address = f"127.0.0.1:{gcs}"
    sized = [f"--num-cpus={num_cpus}"] + ([f"--memory={memory}"] if memory else [])
    head = ["--head", f"--port={gcs}", "--include-dashboard=false", f"--temp-dir={ray_tmp}"]
    procs.append(_node([*head, *sized, '--resources={"head": 1}'], env, logs / "node1.log"))
    for i in range(2, nodes + 1):
        time.sleep(3)  # the head's GCS first
        more = [f"--address={address}", *sized, f'--resources={{"node{i}": 1}}']
        procs.append(_node(more, env, logs / f"node{i}.log"))
    cluster = LocalCluster(address, {**env, "RAY_ADDRESS": address}, procs)
    _wait_for(cluster, nodes, logs)
    return cluster


def _stop(procs: list, ray_tmp: str) -> None:
    for p in reversed(procs):
        stop_group(p)
    shutil.rmtree(ray_tmp, ignore_errors=True)


def _wait_for(cluster: LocalCluster, nodes: int, logs: Path) -> None:
    deadline = time.time() + START_TIMEOUT_S
    while True:
        dead = [i for i, p in enumerate(cluster.nodes, 1) if p.poll() is not None]
        if dead:
            raise RuntimeError(f"ray node {dead[0]} died: {(logs / f'node{dead[0]}.log').read_text()[-2000:]}")
        with contextlib.suppress(subprocess.SubprocessError, ValueError, IndexError):
            if len(cluster.node_ids()) == nodes:
                return
        if time.time() > deadline:
            raise RuntimeError(f"the cluster did not reach {nodes} nodes: {(logs / 'node1.log').read_text()[-2000:]}")
        time.sleep(2)
