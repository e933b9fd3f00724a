"""Trainer (or torchrun) child processes of a recipe that never outlive it.

`start_child` makes the kernel send a child SIGTERM when the recipe dies, even by SIGKILL (Linux
PR_SET_PDEATHSIG); `stop_children` ends those still running (SIGTERM, then SIGKILL after a grace time);
`exit_on_sigterm`, installed as the recipe's SIGTERM handler, unwinds through the `finally` blocks that
call it. pipelines.run and pipelines.auto.search start every trainer this way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

from common.parent_death import die_with_parent


def _die_with_parent(parent: int):
    """preexec_fn of a trainer child: the kernel sends it SIGTERM when this process dies, even by SIGKILL
    (common.parent_death); a parent already gone before the call means exit at once."""

    def preexec() -> None:
        # Until exec this child has the parent's Python signal handlers: a SIGTERM landing after this function
        # returns (no bytecode runs before exec) would only set their flag and be lost, and the trainer live.
        with contextlib.suppress(ValueError):  # (ValueError: Popen from a thread other than the main one)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        die_with_parent(signal.SIGTERM, parent)

    return preexec


def start_child(cmd: list[str], **kwargs) -> subprocess.Popen:
    """A trainer (or torchrun) child process that dies with this one."""
    return subprocess.Popen(cmd, preexec_fn=_die_with_parent(os.getpid()), **kwargs)


def stop_children(procs: list[subprocess.Popen], grace_s: float = 30.0) -> None:
    """SIGTERM the children still running, then SIGKILL any that are not gone after `grace_s`."""
    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        p.terminate()
    for p in alive:
        try:
            p.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def exit_on_sigterm(signum, frame):
    # SystemExit unwinds through the `finally` blocks that stop the trainer children (default SIGTERM would not)
    raise SystemExit(128 + signum)
