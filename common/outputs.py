"""No command writes over its own inputs: an `--out` file is checked against everything the command reads.

A Parquet file written over a checkpoint, a query list or an edge list destroys the input without a trace
(the atomic rename succeeds), and a file written into a run folder or a shard set mixes outputs into what
the run folder and the set's manifest describe. So an output that is an input file (by path or by the
same inode: a hard link), lies inside an input folder, or is an existing directory is refused in one line
before any work, naming both flags.
"""
from __future__ import annotations

import os
from pathlib import Path


class OutputError(ValueError):
    """An --out that would overwrite an input; the message names both and the fix."""


def _same(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): not the same file
        return False


def check_output(out, flag: str = "--out", files: dict | None = None, folders: dict | None = None) -> Path:
    """`out` as a Path, refused when it is a directory, one of `files` or inside one of `folders`.

    files / folders: {what the user passed it as ("--pairs", "the edge list of the run"): path or None}."""
    p = Path(out)
    if p.is_dir():
        raise OutputError(f"{flag} {p}: is a directory; name a file to write, e.g. {p / 'out.parquet'}")
    for what, path in (files or {}).items():
        if path is not None and "://" not in str(path) and _same(p, Path(path)):
            raise OutputError(f"{flag} {p}: is {what} ({path}), an input of this command; write the output "
                              "to another file")
    target = p.resolve()
    for what, folder in (folders or {}).items():
        if folder is None or "://" in str(folder):
            continue
        root = Path(folder).resolve()
        if target == root or root in target.parents:
            raise OutputError(f"{flag} {p}: is inside {what} ({folder}), an input of this command; write the "
                              "output outside it")
    return p
