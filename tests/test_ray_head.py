"""The guarded local Ray head of long-running commands (pipelines/core/ray_head.py) comes up whole or not at all.

free_ports releases its ports before Ray binds them, so another process on the machine can take one meanwhile.
Here a real socket holds one of the head's ports, as such a process would: the head notices, stops that try and
starts again on other ports; with no try left, one line names the port. Real `ray start` heads, real drivers.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile

import pytest

from tests.conftest import needs_ray

pytestmark = needs_ray

AGENT = 2  # the dashboard agent's port in free_ports' order: its head stays up without it, and never says so


@pytest.fixture
def taken_port(monkeypatch):
    """The first free_ports call of the head hands out a port that a listening socket of this test holds."""
    import pipelines.core.ray_head as ray_head

    holder = socket.socket()
    holder.bind(("0.0.0.0", 0))
    holder.listen()
    port = holder.getsockname()[1]
    real, calls = ray_head.free_ports, []

    def free_ports(n: int) -> list[int]:
        ports = real(n)
        if not calls:
            ports[AGENT] = port
        calls.append(ports)
        return ports

    monkeypatch.setattr(ray_head, "free_ports", free_ports)
    yield port, calls
    holder.close()


@pytest.fixture
def head_folders(monkeypatch):
    """The temp folders the heads of this test make (each try's log lies beside its folder)."""
    real, made = tempfile.mkdtemp, []

    def mkdtemp(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    return made


def left_behind(folders: list[str]) -> list[str]:
    return [p for f in folders for p in (f, f"{f}.log") if os.path.exists(p)]


def test_a_head_whose_port_is_taken_starts_again_on_other_ports_and_takes_a_driver(taken_port, head_folders):
    from pipelines.core.ray_head import local_head, session_members

    port, calls = taken_port
    with local_head(num_cpus=1) as (address, head, _metrics):
        assert len(calls) == 2 and address == f"127.0.0.1:{calls[1][0]}" and port not in calls[1]
        code = f"import ray; ray.init(address={address!r}); print(ray.get(ray.remote(lambda: 6 * 7).remote()))"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split()[-1] == "42"
    assert session_members(head.pid) == []
    assert len(head_folders) == 2 and left_behind(head_folders) == []


def test_a_head_with_no_try_left_fails_in_one_line_naming_the_port(taken_port, head_folders, monkeypatch):
    import pipelines.core.ray_head as ray_head

    monkeypatch.setattr(ray_head, "START_ATTEMPTS", 1)
    port, _ = taken_port
    with pytest.raises(ray_head.HeadError, match=f"port {port} was taken by another process"):
        with ray_head.local_head(num_cpus=1):
            pass
    assert len(head_folders) == 1 and left_behind(head_folders) == []
