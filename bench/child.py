"""Run one benchmark function in a fresh interpreter pinned to one core, and return its JSON result.

A fresh process measures its own peak memory (VmHWM, common.memory) and its own CPU time, free of what
the parent built (a 6 GB synthetic graph, a warmed numba cache); pinning keeps rates per core.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_child(module: str, fn: str, *args) -> dict:
    """`<module>.<fn>(*args)` in a child interpreter on one core; its (JSON-serialisable) return value."""
    code = (
        f"import json,sys; sys.path.insert(0, {str(ROOT)!r}); "
        f"from {module} import {fn}; print(json.dumps({fn}(*{args!r})))"
    )
    cmd = [sys.executable, "-c", code]
    if hasattr(os, "sched_getaffinity"):
        cmd = ["taskset", "-c", str(max(os.sched_getaffinity(0)))] + cmd
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{module}.{fn} failed: {res.stderr.strip()[-2000:] or res.returncode}")
    return json.loads(res.stdout.strip().splitlines()[-1])
