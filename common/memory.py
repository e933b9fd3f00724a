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
