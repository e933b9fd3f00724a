"""The one way a local file is written atomically: a temp file beside the target, fsynced, renamed onto it.

A reader never sees half a file, and a failure (full disk, Ctrl-C) removes the temp file, so nothing
half-written is left behind. Temp files are named `.<name>.<pid>.<random>.tmp`, so a cleaner that
globs `.<name>.*.tmp` finds those a SIGKILL left (remote stores have their own path: common/storage.py).
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

TMP_SUFFIX = ".tmp"


@contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb"):
    """`with atomic_file(path, "w") as f: ...` writes f to `path` only if the block finishes. An OS error
    of the write (ENOSPC, EIO) names `path`, not the hidden temp file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=TMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        if err.errno is None or err.filename not in (None, tmp):
            raise
        raise OSError(err.errno, err.strerror, str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_file(path, "w") as f:
        f.write(text)


def write_json_atomic(path: str | os.PathLike, payload) -> None:
    with atomic_file(path, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=False)
        f.write("\n")


def write_parquet_atomic(table, path: str | os.PathLike) -> None:
    """A pyarrow Table as one Parquet file, whole or not at all."""
    import pyarrow.parquet as pq

    with atomic_file(path, "wb") as f:
        pq.write_table(table, f)
