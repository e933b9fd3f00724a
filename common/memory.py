"""Peak resident memory of this process, measured the way budgets mean it.

`getrusage(RUSAGE_SELF).ru_maxrss` is the wrong number for a child process on Linux: it is kept
across execve, so a child started by a large parent (a benchmark that built a 6 GB graph, a Ray raylet)
reports the parent's size at fork time. `VmHWM` in /proc/self/status is the high-water mark of the
process's own address space, which execve resets.
"""

from __future__ import annotations

import resource
from pathlib import Path


def peak_rss_mb() -> float:
    """High-water resident set size of this process in MiB (VmHWM; ru_maxrss where /proc is absent)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def rss_gb() -> float:
    """Current resident set size of this process in GiB (VmRSS), for progress lines."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


class MemoryBudgetError(ValueError):
    """An input would need more memory than this process can get; the message names the value and the fix."""


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _cgroup_headroom(root: str = "/sys/fs/cgroup", own: str = "/proc/self/cgroup") -> int | None:
    """The memory limit of this process's cgroup minus what it uses: v2 (memory.max) or v1 (a Docker host
    without cgroup v2: memory.limit_in_bytes, its ancestors' included); None without a limit."""
    try:
        if Path(root, "memory.max").exists():  # v2, seen from inside the container
            limit = Path(root, "memory.max").read_text().strip()
            return None if limit == "max" else max(0, int(limit) - int(Path(root, "memory.current").read_text()))
        return _cgroup_v1_headroom(Path(root, "memory"), _v1_memory_path(own))
    except (OSError, ValueError):
        return None


def _v1_memory_path(own: str) -> str:
    for line in Path(own).read_text().splitlines():  # "4:memory:/docker/abc"
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path
    return "/"


def _cgroup_v1_headroom(mount: Path, path: str) -> int | None:
    folder = mount / path.lstrip("/")
    if not (folder / "memory.stat").exists():  # a namespaced mount shows the process's own group at its root
        folder = mount
    stat = dict(line.split() for line in (folder / "memory.stat").read_text().splitlines())
    limit = int(stat.get("hierarchical_memory_limit") or (folder / "memory.limit_in_bytes").read_text())
    if limit >= 2**62:  # v1's "no limit" is the largest page-aligned int64
        return None
    # the page cache it may drop does not count against it (the working set, as the kernel's reclaim sees it)
    used = int((folder / "memory.usage_in_bytes").read_text()) - int(stat.get("total_inactive_file", 0))
    return max(0, limit - used)


def _address_space_headroom() -> int | None:
    """RLIMIT_AS minus the address space already mapped (ulimit -v, or a test's setrlimit)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return max(0, soft - int(line.split()[1]) * 1024)
    except OSError:
        pass
    return soft


def machine_available_bytes() -> int | None:
    """Memory that new processes can still get: the tighter of free RAM and this cgroup's (None: unknown)."""
    known = [b for b in (_meminfo_available(), _cgroup_headroom()) if b is not None]
    return min(known) if known else None


def available_bytes() -> int | None:
    """Memory this process can still allocate: the tightest of free RAM, its cgroup and RLIMIT_AS (None: unknown)."""
    known = [b for b in (machine_available_bytes(), _address_space_headroom()) if b is not None]
    return min(known) if known else None


def check_allocation(nbytes: float, what: str, fix: str) -> None:
    """Refuse, before allocating, work that needs `nbytes` when less is available. `what` names the
    value that drives the size (e.g. "big.csv: 2,000,000,000 rows"), `fix` what the user can do."""
    free = available_bytes()
    if free is not None and nbytes > free:
        raise MemoryBudgetError(
            f"{what}: about {nbytes / 2**30:.1f} GiB of memory needed, only {free / 2**30:.1f} GiB available; {fix}"
        )
