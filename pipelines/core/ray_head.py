"""A local Ray head as a child process that dies with the command that started it, even by SIGKILL.

`ray.init()` starts Ray's processes as children of the driver, and a driver killed by SIGKILL leaves some
of them running (the dashboard and runtime-env agents were still there a minute later; they catch SIGTERM and
outlive the raylet too). So a long-running command (`pencil serve`) starts a guard as its child: this module
run as `python -m pipelines.core.ray_head TMP ray start --head --block ...`, in a session of its own and with
PR_SET_PDEATHSIG (pipelines/core/children.py). When the command dies, however it dies, the kernel sends the
guard SIGTERM, and the guard SIGKILLs every other process of its session: every process of that cluster, and
nothing else; then it removes the head's temp folder. So it does when the head exits by itself. A normal
stop does the same (`stop_head`). Every port is a free one, so the head never collides with another cluster
on the machine, and its temp folder is short: Ray's socket paths must fit in 107 bytes. The head counts as
started once it listens on every port it was given and a throwaway driver has connected: a port taken by
another process between free_ports and Ray's bind used to leave a head that failed the command's own driver.
Such a try is stopped and the head started again on new ports.
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
# A port picked free can be taken by another process before the head binds it; that try then never comes up whole
START_ATTEMPTS = 3


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
    token = secrets.token_hex(32)
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            head, tmp, address, metrics = start_head(num_cpus, num_gpus, token)
            break
        except HeadError:
            if attempt == START_ATTEMPTS:
                raise
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    try:
        yield address, head, metrics
    finally:
        remove_head(head, tmp)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def start_head(num_cpus: int | None, num_gpus: int | None, token: str):
    """One try: the guard and its head on fresh ports, returned once the head has started, listens on every port
    it was given and took a throwaway driver; otherwise (a port taken meanwhile) stopped, HeadError raised."""
    ports = free_ports(6)
    gcs, client, agent, agent_grpc, metrics, runtime_env = ports
    tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")
    log_path = Path(f"{tmp}.log")  # beside the folder, which the guard removes when the head exits
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
        f"--runtime-env-agent-port={runtime_env}",
        "--include-dashboard=false",
        f"--temp-dir={tmp}",
        "--disable-usage-stats",
    ]
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    if num_gpus is not None:
        cmd.append(f"--num-gpus={num_gpus}")
    with open(log_path, "w") as log:
        head = start_child(
            [sys.executable, "-m", "pipelines.core.ray_head", tmp, *cmd],
            env=head_env(token),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.time() + START_TIMEOUT_S
    waiting = list(ports)
    problem = None
    while not problem and (waiting or "Ray runtime started" not in log_path.read_text(errors="replace")):
        table = listeners()  # before the sockets: a listener of the head's then has its inode among them
        mine = session_sockets(head.pid) if table is not None else None  # the guard leads the head's session
        if mine is None:  # whose sockets they are is not known: any listener will do
            waiting = [p for p in waiting if table is not None and p not in table]
        else:
            waiting = [p for p in waiting if not table.get(p, set()) & mine]
        taken = [p for p in waiting if mine is not None and table.get(p)]  # the head will never bind it
        if head.poll() is not None or time.time() > deadline or taken:
            tail = " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-5:])
            problem = f"port {taken[0]} was taken by another process" if taken else f"it did not start: {tail}"
        time.sleep(0.5)
    address = f"127.0.0.1:{gcs}"
    problem = problem or probe_driver(address, token, max(deadline - time.time(), 10.0))
    if problem:
        remove_head(head, tmp)
        raise HeadError(f"the local Ray head failed: {problem}")
    return head, tmp, address, metrics


def remove_head(head: subprocess.Popen, tmp: str) -> None:
    """Stop the head and remove its folder and the log beside it."""
    stop_head(head)
    shutil.rmtree(tmp, ignore_errors=True)
    Path(f"{tmp}.log").unlink(missing_ok=True)


def probe_driver(address: str, token: str, timeout_s: float) -> str | None:
    """Connect a throwaway driver, in a child: a driver that fails to register with the raylet exits its process
    (Ray's C++ core, no exception), so the command's own driver must not be the first. None, or why it failed."""
    code = f"import ray; ray.init(address={address!r}, log_to_driver=False); ray.shutdown()"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], env=head_env(token), capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return f"no connection in {timeout_s:.0f} s"
    if done.returncode == 0:
        return None
    tail = " | ".join(done.stderr.strip().splitlines()[-3:]) or f"exit code {done.returncode}"
    return f"it took no driver: {tail}"


def listeners() -> dict[int, set[str]] | None:
    """Each TCP port in the LISTEN state, on any address, with its sockets' inodes (Linux /proc; elsewhere None:
    not known). Ray binds some ports to the host's address, so a connect to localhost would not tell."""
    table: dict[int, set[str]] = {}
    known = False
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(path).read_text().splitlines()[1:]
        except OSError:
            continue
        known = True
        for fields in map(str.split, rows):
            if len(fields) > 9 and fields[3] == "0A":  # TCP_LISTEN
                table.setdefault(int(fields[1].rsplit(":", 1)[1], 16), set()).add(fields[9])
    return table if known else None


def session_sockets(sid: int) -> set[str] | None:
    """The socket inodes open in processes of session `sid`; None where no member's open files can be read."""
    inodes, readable = set(), False
    for pid in session_members(sid):
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                readable = True
                with contextlib.suppress(OSError):
                    link = os.readlink(fd)
                    if link.startswith("socket:["):
                        inodes.add(link[8:-1])
    return inodes if readable else None


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
