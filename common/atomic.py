"""One local file written atomically: a temp file beside the target, fsynced, then renamed onto it.

A reader never sees half a file, and a failure (full disk, Ctrl-C) removes the temp file, so nothing
half-written is left behind (remote stores have their own path: common/storage.py).
"""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb"):
    """`with atomic_file(path, "w") as f: ...` writes f to `path` only if the block finishes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
