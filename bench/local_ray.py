"""A throwaway local Ray head for the `ray job submit` tests (the `ray_head` fixture in tests/conftest.py).

The head runs with --block as our child, in its own session, and is stopped by signalling that process
group, never with `ray stop` (which would kill every Ray instance on the machine, other users' included).
Every default port gets a free one, so it never collides with another cluster on the machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.core.ray_head import free_ports

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 120


@dataclass
class RayHead:
    """What a test needs to submit jobs: the `ray` command, the job server's address and the env to run it in."""

    cmd: str
    address: str
    env: dict = field(repr=False)

    def submit(self, *job: str, timeout: int = 600) -> subprocess.CompletedProcess:
        """`ray job submit --working-dir . -- JOB...` from the repository root."""
        return subprocess.run(
            [self.cmd, "job", "submit", "--address", self.address, "--working-dir", ".", "--", *job],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def stop_group(proc: subprocess.Popen) -> None:
    """SIGINT, then SIGTERM, then SIGKILL to the process group of a child we started in its own session.
    `ray start --block` shuts down at once on SIGINT (its Ctrl-C path: 2 s here) but takes about a minute on SIGTERM."""
    for sig, wait in ((2, 30), (15, 30), (9, 30)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue


ATTEMPTS = 3  # free_ports releases its ports before Ray binds them: another process may take one meanwhile
SETTLE_S = 5  # a Ray subprocess that fails to bind its port takes the head down within a second or two


@contextlib.contextmanager
def local_head(log_path: Path, num_cpus: int = 2):
    """Start `ray start --head --block`, wait for its job server to answer and the head to stay up, yield a
    RayHead, stop it. A head that dies while starting (a port taken between free_ports and Ray's bind) is
    started again on other ports, up to ATTEMPTS times; then RuntimeError with the head's log."""
    ray_bin = Path(sys.executable).with_name("ray")
    ray_cmd = str(ray_bin) if ray_bin.exists() else "ray"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_AUTH_MODE"] = "disabled"  # a throwaway localhost cluster; head and clients must agree
    # this checkout's code first: a git worktree's package may be installed (editable) from another clone
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    for attempt in range(1, ATTEMPTS + 1):
        ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's unix socket paths must fit 107 bytes
        head, address = _start(ray_cmd, env, log_path, num_cpus, ray_tmp)
        try:
            if _comes_up(head, ray_cmd, address, env, log_path, last=attempt == ATTEMPTS):
                yield RayHead(ray_cmd, address, env)
                return
        finally:
            stop_group(head)
            shutil.rmtree(ray_tmp, ignore_errors=True)


def _start(ray_cmd: str, env: dict, log_path: Path, num_cpus: int, ray_tmp: str) -> tuple[subprocess.Popen, str]:
    gcs, dash, client, agent = free_ports(4)
    with open(log_path, "w") as log:
        head = subprocess.Popen(
            [
                ray_cmd,
                "start",
                "--head",
                "--block",
                f"--port={gcs}",
                f"--dashboard-port={dash}",
                f"--num-cpus={num_cpus}",
                f"--ray-client-server-port={client}",
                f"--dashboard-agent-listen-port={agent}",
                "--include-dashboard=true",
                "--dashboard-host=127.0.0.1",
                f"--temp-dir={ray_tmp}",
                "--disable-usage-stats",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return head, f"http://127.0.0.1:{dash}"


def _comes_up(head: subprocess.Popen, ray_cmd: str, address: str, env: dict, log_path: Path, last: bool) -> bool:
    """Whether the head's job server answers and the head is still up SETTLE_S later; False when the head died
    (try again), RuntimeError when it did not come up in START_TIMEOUT_S or died on the `last` attempt."""
    deadline = time.time() + START_TIMEOUT_S
    while True:  # wait for the job server to answer
        probe = subprocess.run([ray_cmd, "job", "list", "--address", address], env=env, capture_output=True, text=True)
        if probe.returncode == 0:
            time.sleep(SETTLE_S)
            if head.poll() is None:
                return True
        if head.poll() is not None and not last:
            return False
        if time.time() > deadline or head.poll() is not None:
            raise RuntimeError(
                f"ray head did not come up: {probe.stderr[-1000:]}\nhead log: {log_path.read_text()[-3000:]}"
            )
        time.sleep(2)
