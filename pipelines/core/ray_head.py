"""A local Ray head as a child process that dies with the command that started it, even by SIGKILL.

`ray.init()` starts Ray's processes as children of the driver, and a driver killed by SIGKILL leaves some
of them running (the dashboard and runtime-env agents were still there a minute later; they catch SIGTERM and
outlive the raylet too). So a long-running command (`pencil serve`) starts a guard as its child: this module
run as `python -m pipelines.core.ray_head TMP ray start --head --block ...`, in a session of its own and with
PR_SET_PDEATHSIG (pipelines/core/children.py). When the command dies, however it dies, the kernel sends the
guard SIGTERM, and the guard SIGKILLs every other process of its session: every process of that cluster, and
nothing else; then it removes the head's temp folder. So it does when the head exits by itself. A normal
stop does the same (`stop_head`). Every port is a free one, so the head never collides with another cluster
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
    """Stop the guard (it SIGKILLs every process of its head), then wait until no process of its session runs
    (at most `wait_s`), SIGKILLing any left."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    deadline = time.time() + wait_s
    while session_members(proc.pid) and time.time() < deadline:
        time.sleep(0.1)
    for pid in session_members(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def session_members(sid: int) -> list[int]:
    """The running processes of session `sid` (Linux /proc; elsewhere, none known). Zombies do not count:
    where PID 1 does not reap orphans (some containers), a dead session's zombies stay for good."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


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
    """Start the head under its guard; yield its GCS address "127.0.0.1:PORT", the guard process and the port of
    its Prometheus metrics; stop them at the end. Meanwhile this process's environment holds the head's auth
    token, so that ray.init(address=...) connects."""
    gcs, client, agent, agent_grpc, metrics = free_ports(5)
    tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")
    cmd = ray_command() + [
        "start",
        "--head",
        "--block",
        f"--port={gcs}",
        "--node-ip-address=127.0.0.1",
        f"--ray-client-server-port={client}",
        f"--dashboard-agent-listen-port={agent}",
        f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--metrics-export-port={metrics}",
        "--include-dashboard=false",
        f"--temp-dir={tmp}",
        "--disable-usage-stats",
    ]
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    if num_gpus is not None:
        cmd.append(f"--num-gpus={num_gpus}")
    log_path = Path(tmp) / "head.log"
    token = secrets.token_hex(32)
    with open(log_path, "w") as log:
        head = start_child(
            [sys.executable, "-m", "pipelines.core.ray_head", tmp, *cmd],
            env=head_env(token),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
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


def guard(tmp: str, cmd: list[str]) -> int:
    """Run `cmd` (the head); on SIGTERM or SIGINT (the kernel's signal when the command that started this guard
    dies), or once `cmd` exits, SIGKILL every other process of this guard's session (`ray start --block` moves
    the head to a process group of its own, not out of the session), then remove the head's folder `tmp`."""
    child = None

    def stop(*_):
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)  # where /proc is missing, this group at least
        for _ in range(50):  # until none is left: a raylet may have forked a worker meanwhile
            others = [pid for pid in session_members(os.getsid(0)) if pid != os.getpid()]
            if not others:
                break
            for pid in others:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        shutil.rmtree(tmp, ignore_errors=True)
        os._exit(1)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    child = subprocess.Popen(cmd)
    child.wait()
    stop()
    return 1


if __name__ == "__main__":
    raise SystemExit(guard(sys.argv[1], sys.argv[2:]))
