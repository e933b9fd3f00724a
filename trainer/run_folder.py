"""The run folder (`--out`): one trainer at a time, and a finished run is never overwritten by accident.

- *Lock.* The launching process (rank 0) holds an exclusive `flock` on OUT/.lock for the run's lifetime and
  writes its pid there. A second trainer on the same folder is refused in one line naming the folder and the
  holder's pid. The kernel drops a flock when its holder dies (kill -9 included), so a killed run never
  leaves a stale lock behind; the `.lock` file itself stays (deleting it would race with a process that
  has just opened it). Forked children (DataLoader workers) close their copy of the descriptor at fork, so
  a worker outliving a killed trainer for a few seconds does not keep the lock.
- *Guard.* A folder that already holds a run (last.pt, best.pt, summary.json or a non-empty metrics.jsonl)
  is refused unless the command says what to do with it: `--resume` continues from last.pt, `--overwrite`
  clears the run's files first. `--resume` on such a folder without last.pt is refused too: nothing can be
  continued, and appending a fresh run's metrics to the old ones would mix two runs in one file.
- *Overwrite* removes only the files a run writes (never the folder, never a file it does not know), last.pt
  first: a clear cut short by a kill leaves a folder that is still refused without --overwrite, never one
  that `--resume` would half-continue.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
from pathlib import Path
from typing import Iterator

from common.manifest_record import Manifest
from common.storage import absolute_location
from trainer.config_sections import ConfigError

log = logging.getLogger("trainer")
LOCK = ".lock"
# What makes a folder hold a run (metrics.jsonl only when non-empty: an interrupted start creates it empty).
RUN_MARKERS = ("last.pt", "best.pt", "summary.json", "metrics.jsonl")
# What --overwrite removes, in this order (last.pt first, see the module docstring); result.json is what
# pipelines.run writes beside a seed's run; tensorboard/ is MetricsLog's event folder.
RUN_FILES = ("last.pt", "summary.json", "result.json", "best.pt", "metrics.jsonl", "config.json")
RUN_DIRS = ("tensorboard", "scores")  # scores/: --save-scores (common.eval_scores)
TEMP_GLOBS = (".last.pt.*.tmp", ".best.pt.*.tmp", ".metrics.jsonl.*.tmp")

_held: set[int] = set()  # lock descriptors of this process, closed in forked children


def _close_in_child() -> None:
    for fd in list(_held):
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()


os.register_at_fork(after_in_child=_close_in_child)


def run_files(out: Path) -> list[str]:
    """The run markers present in `out`, in RUN_MARKERS order."""
    found = []
    for name in RUN_MARKERS:
        p = out / name
        if p.is_file() and (name != "metrics.jsonl" or p.stat().st_size > 0):
            found.append(name)
    return found


def check_contents(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse a folder holding a run unless --resume (with a last.pt) or --overwrite says what to do."""
    found = run_files(out)
    if not found or overwrite:
        return
    held = ", ".join(found)
    if not resume:
        raise ConfigError(
            f"--out {out} already holds a run ({held}); pass --resume to continue it, or --overwrite "
            "to delete it and start afresh (or choose another --out)"
        )
    if "last.pt" not in found:
        raise ConfigError(
            f"--resume: {out} holds a run ({held}) but no last.pt to continue from; pass --overwrite "
            "to delete it and start afresh (or choose another --out)"
        )


def bound_data(manifest: Manifest) -> dict:
    """The DataConfig fields that bind a run to its data: the dataset's fingerprint and the set's cache key."""
    return {"dataset_fingerprint": manifest.fingerprint, "shard_set": manifest.key}


def same_data(saved: dict, manifest: Manifest, shards: str) -> bool:
    """Whether a run whose data config is `saved` was trained on the set of `manifest` (at `shards`). A run
    from before runs recorded their data is judged by its shard-set path."""
    if saved.get("dataset_fingerprint") is None and saved.get("shard_set") is None:
        return same_location(saved.get("shards", ""), shards)
    have = bound_data(manifest)
    return all(saved.get(k) == have[k] for k in have)


def same_location(a, b) -> bool:
    """Two shard-set paths name one folder (a run records it absolute; an older run as it was given)."""
    return absolute_location(str(a).rstrip("/")) == absolute_location(str(b).rstrip("/"))


def data_label(data: dict) -> str:
    """A run's data (a data config or bound_data's fields) as the error messages name it."""
    return f"dataset {data.get('dataset_fingerprint') or '?'}, shard set {data.get('shard_set') or data.get('shards')}"


def check_same_data(saved: dict, manifest: Manifest, shards: str, out) -> None:
    """--resume continues a run only on the data it was trained on. `saved`: the checkpoint's data config."""
    if not same_data(saved, manifest, shards):
        raise ConfigError(
            f"--resume: {out} was trained on other data ({data_label(saved)}) than --shards {shards} "
            f"({data_label(bound_data(manifest))}); pass --overwrite to start afresh on this data, "
            "or choose another --out"
        )


def clear(out: Path) -> list[str]:
    """Remove the run's files from `out` (see RUN_FILES); returns what was removed."""
    removed = []
    for name in RUN_FILES:
        with contextlib.suppress(FileNotFoundError):
            (out / name).unlink()
            removed.append(name)
    for name in RUN_DIRS:
        if (out / name).is_dir():
            shutil.rmtree(out / name)
            removed.append(name + "/")
    for pattern in TEMP_GLOBS:
        for p in out.glob(pattern):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
                removed.append(p.name)
    return removed


def _lock(out: Path, what: str = "trainer", flag: str = "--out") -> int:
    """The exclusive lock on OUT/.lock, as an open descriptor holding our pid; ConfigError if another holds it.
    `what` and `flag` name the holder and the folder's flag in that error."""
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        who = f"pid {holder}" if holder.isdigit() else "another process"
        raise ConfigError(
            f"{flag} {out}: another {what} ({who}) is running in this folder; wait for it to end, "
            f"or choose another {flag}"
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as err:  # a full disk: name the lock file, not just the errno
        os.close(fd)
        raise OSError(err.errno, err.strerror, str(out / LOCK)) from None
    return fd


@contextlib.contextmanager
def locked(folder: Path, what: str, flag: str) -> Iterator[None]:
    """Hold `folder`'s lock for the block (one `what` at a time, as one trainer per run folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = _lock(folder, what, flag)
    _held.add(fd)
    try:
        yield
    finally:
        _held.discard(fd)
        os.close(fd)


@contextlib.contextmanager
def claim(out: str | os.PathLike, resume: bool = False, overwrite: bool = False, owner: bool = True) -> Iterator[None]:
    """Hold the run folder for the block: lock it, check what it holds, clear it on --overwrite.

    Only the owner (rank 0, which writes every file) does anything; other ranks pass through. A refused
    rank 0 exits, and torchrun (or torch.multiprocessing.spawn) then stops the other ranks."""
    if not owner:
        yield
        return
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fd = _lock(out)
    _held.add(fd)
    try:
        check_contents(out, resume, overwrite)
        if overwrite and (removed := clear(out)):
            log.warning("--overwrite: removed %s from %s", ", ".join(removed), out)
        yield
    finally:
        _held.discard(fd)
        os.close(fd)  # closing the last descriptor of the open file releases the flock
