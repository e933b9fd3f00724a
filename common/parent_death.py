"""Child processes that die with their parent, even when the parent is killed by SIGKILL (Linux
PR_SET_PDEATHSIG). The recipe's trainer children (pipelines.core.children) and a trainer's loader workers
(trainer.loaders) use it: a trainer the out-of-memory killer ends must not leave its workers holding memory.
"""

from __future__ import annotations

import os

PR_SET_PDEATHSIG = 1


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
