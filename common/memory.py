"""Peak resident memory of this process, measured the way budgets mean it.

`getrusage(RUSAGE_SELF).ru_maxrss` is the wrong number for a child process on Linux: it is kept
across execve, so a child started by a large parent (a benchmark that built a 6 GB graph, a Ray raylet)
reports the parent's size at fork time. `VmHWM` in /proc/self/status is the high-water mark of the
process's own address space, which execve resets.
"""

from __future__ import annotations

import resource


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


def _cgroup_headroom() -> int | None:
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open("/sys/fs/cgroup/memory.current") as f:
            return max(0, int(limit) - int(f.read().strip()))
    except (OSError, ValueError):
        return None


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
