"""A local Ray head as a child process that dies with the command that started it, even by SIGKILL.

`ray.init()` starts Ray's processes as children of the driver, and a driver killed by SIGKILL leaves some
of them running (the dashboard and runtime-env agents were still there a minute later). So a long-running
command (`pencil serve`) starts `ray start --head --block` as its child instead: in a session of its own and
with PR_SET_PDEATHSIG (pipelines/core/children.py). When the command dies, however it dies, the kernel
sends that child SIGKILL (it catches SIGTERM); its death wakes the reaper Ray starts beside a blocking head,
which kills the head's whole process group: every process of that cluster, and nothing else. A normal stop
does the same (`stop_head`). Every port is a free one, so the head never collides with another cluster
on the machine, and its temp folder is short: Ray's socket paths must fit in 107 bytes.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipelines.core.children import start_child

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 180


class HeadError(RuntimeError):
    """The local Ray head did not come up; the message holds the end of its log."""


def free_ports(n: int) -> list[int]:
    """n distinct free ports: every socket stays bound until all are picked (one at a time, the OS may hand
    the same port out twice; a Ray head then refuses to start: "port ... used by other components")."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def stop_head(proc: subprocess.Popen, wait_s: float = 15.0) -> None:
    """SIGKILL the head: Ray's reaper then ends its process group (SIGTERM, SIGKILL a second later); wait for
    the group to be gone, and SIGKILL what is left after `wait_s`. (`ray start --block` catches SIGTERM and
    keeps running, so SIGTERM alone would not stop it.)"""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + wait_s
    while group_alive(proc.pid) and time.time() < deadline:
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs. Zombies do not count: where PID 1 does not reap
    orphans (some containers), a dead group's zombies stay for good."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: ask the kernel, zombies included
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields: state, ppid, pgrp, ...
            return True
    return False


def ray_command() -> list[str]:
    ray_bin = Path(sys.executable).with_name("ray")
    return [str(ray_bin)] if ray_bin.exists() else [sys.executable, "-m", "ray.scripts.scripts"]


def head_env(token: str) -> dict:
    """The head's environment: this checkout first on PYTHONPATH (its workers import the project), no
    RAY_ADDRESS, and Ray's token authentication on with a fresh random token: Ray's own ports listen on every
    interface, and only holders of the token may use them."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


@contextlib.contextmanager
def local_head(num_cpus: int | None = None, num_gpus: int | None = None):
    """Start the head; yield its GCS address "127.0.0.1:PORT", the head process and the port of its Prometheus
    metrics; stop it at the end. Meanwhile this process's environment holds the head's auth token, so that
    ray.init(address=...) connects."""
    gcs, client, agent, agent_grpc, metrics = free_ports(5)
    tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")
    cmd = ray_command() + ["start", "--head", "--block", f"--port={gcs}", "--node-ip-address=127.0.0.1",
                           f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent}",
                           f"--dashboard-agent-grpc-port={agent_grpc}", f"--metrics-export-port={metrics}",
                           "--include-dashboard=false", f"--temp-dir={tmp}", "--disable-usage-stats"]
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    if num_gpus is not None:
        cmd.append(f"--num-gpus={num_gpus}")
    log_path = Path(tmp) / "head.log"
    token = secrets.token_hex(32)
    with open(log_path, "w") as log:
        head = start_child(cmd, death_signal=signal.SIGKILL, env=head_env(token), stdout=log,
                           stderr=subprocess.STDOUT, start_new_session=True)
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    try:
        address = f"127.0.0.1:{gcs}"
        deadline = time.time() + START_TIMEOUT_S
        while "Ray runtime started" not in log_path.read_text(errors="replace"):
            if head.poll() is not None or time.time() > deadline:
                tail = " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-5:])
                raise HeadError(f"the local Ray head did not start: {tail}")
            time.sleep(0.5)
        yield address, head, metrics
    finally:
        stop_head(head)
        shutil.rmtree(tmp, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
