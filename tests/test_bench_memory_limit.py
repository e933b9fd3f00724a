"""bench/memory_limit.py's cgroup: a real child over its limit is killed by the kernel and counted; one under it
runs, and the group's peak covers what it touched. Needs root and a writable cgroup file system."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.memory_limit import Cgroup

TOUCH = "b = bytearray({mb} * 2**20); b[::4096] = b'x' * len(b[::4096]); print('done')"


def writable_cgroups() -> bool:
    """Whether a memory cgroup of our own can be made here: root, a writable cgroup fs, the memory controller
    on for a new group (v1: memory.limit_in_bytes in it; v2: memory.max)."""
    for root, limit in (
        (Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
        (Path("/sys/fs/cgroup"), "memory.max"),
    ):
        probe = root / f"pencil-probe-{os.getpid()}"
        try:
            probe.mkdir()
        except OSError:
            continue
        try:
            return (probe / limit).exists()
        finally:
            probe.rmdir()
    return False


def no_swap() -> bool:
    return len(Path("/proc/swaps").read_text().strip().splitlines()) <= 1


@pytest.mark.skipif(not writable_cgroups() or not no_swap(), reason="needs root, a writable cgroup fs and no swap")
def test_a_child_over_the_limit_is_killed_and_counted_one_under_it_runs():
    group = Cgroup(f"pencil-test-{os.getpid()}", 256 * 2**20)
    try:
        over = subprocess.run([sys.executable, "-c", TOUCH.format(mb=400)], preexec_fn=group.join, capture_output=True)
        assert over.returncode != 0 and group.oom_kills() >= 1
        kills = group.oom_kills()
        under = subprocess.run(
            [sys.executable, "-c", TOUCH.format(mb=100)], preexec_fn=group.join, capture_output=True, text=True
        )
        assert under.returncode == 0 and under.stdout.strip() == "done" and group.oom_kills() == kills
        assert group.peak() >= 100 * 2**20
    finally:
        group.remove()
    assert not group.path.exists()
