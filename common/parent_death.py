"""Child processes that die with their parent, even when the parent is killed by SIGKILL (Linux
PR_SET_PDEATHSIG). The recipe's trainer children (pipelines.core.children) and a trainer's loader workers
(trainer.data.loaders) use it: a trainer the out-of-memory killer ends must not leave its workers holding memory.

An embedded Ray (preprocess.cluster) is not a child one can set it on: the raylet's agents outlive a driver
killed by SIGKILL by one to two minutes, holding memory. `reap_on_death` starts a watchdog child instead, run
as `python -m common.parent_death MARKER PARENT`: when the driver dies the kernel sends it SIGTERM, and it SIGKILLs
every process whose command line or open files name MARKER (that Ray's session folder), and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
REAP_ROUNDS = 50  # a raylet may fork a worker while the others are killed: look again, 0.1 s apart


def _lookup():
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the parent's own cleanup is all there is
        return None


# Looked up at import, in the parent: dlopen in a forked child of a threaded process can deadlock.
PRCTL = _lookup()


def die_with_parent(sig: int, parent: int) -> None:
    """Call in a child: the kernel sends it `sig` when its parent dies; a parent already gone (the child was
    forked just before it died) means exit now."""
    if PRCTL is not None:
        PRCTL(PR_SET_PDEATHSIG, sig)
    if os.getppid() != parent:
        os._exit(1)


def reap_on_death(marker: str) -> subprocess.Popen | None:
    """Start the watchdog of this process for the processes naming `marker`; None where there is no
    PR_SET_PDEATHSIG or /proc (not Linux)."""
    if PRCTL is None or not Path("/proc/self/fd").is_dir() or not marker:
        return None
    parent = os.getpid()
    return subprocess.Popen(
        [sys.executable, "-m", "common.parent_death", marker, str(parent)],
        cwd=Path(__file__).resolve().parents[1],  # the repository, whence -m finds this module
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: die_with_parent(signal.SIGTERM, parent),
    )


def naming(marker: str) -> list[int]:
    """The processes (of those this user may read) whose command line or an open file names `marker`."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if marker.encode() in (proc / "cmdline").read_bytes() or any(
                marker in _link(fd) for fd in (proc / "fd").iterdir()
            ):
                found.append(int(proc.name))
    return found


def _link(fd: Path) -> str:
    try:
        return os.readlink(fd)
    except OSError:
        return ""


def _watch(marker: str, parent: int) -> None:
    """The watchdog: wait for the parent's death (SIGTERM), then SIGKILL what names `marker` until none is left.
    Never the parent itself: a live one (that stops its watchdog) holds files of the session it shut down."""

    def reap(*_):
        for _ in range(REAP_ROUNDS):
            pids = [pid for pid in naming(marker) if pid not in (os.getpid(), parent)]
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        os._exit(0)

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; its death then reaps
    signal.signal(signal.SIGTERM, reap)
    while True:
        signal.pause()


if __name__ == "__main__":
    _watch(sys.argv[1], int(sys.argv[2]))
