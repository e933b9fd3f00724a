"""The one guard every command's output path goes through: nothing is written where it would destroy or mix.

An output path is refused in one line, before any work, naming the flag and the fix, when it
- is an existing directory (a file output), or one of the command's input files (by path or by inode: a hard
  link), or lies inside one of its input folders: the atomic rename would replace the input without a trace;
- lies inside a folder that belongs to a run: a trainer run folder (best.pt, last.pt, metrics.jsonl, ...),
  a recipe's results tree (results.json) or a shard set (manifest.json). A file written there replaces the
  run's own files, or mixes into what the run folder, the report or the set's manifest describes;
- already holds a file that is not this command's result on the same data. Every result records the command
  that wrote it and the fingerprint of its data (a "stamp": a JSON key, Parquet metadata or a comment line),
  so a rerun on the same data replaces its own previous result, and anything else (the user's file, a
  result of other data) needs --overwrite.

Folder outputs (`pencil run --out`, `preprocess --out`, `train --out`) are refused inside a run folder or a
shard set the same way, so no results tree, shard set or run is ever nested inside another.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

STAMP_KEY = "pencil_output"
# What makes a folder belong to a run (markers of a kind, at its top level)
RUN_MARKERS = ("best.pt", "last.pt", "metrics.jsonl", "trainer_flags.json", "result.json")
KINDS = {
    "run": ("the run folder", RUN_MARKERS),
    "results": ("the results of a run", ("results.json",)),
    "set": ("the shard set", ("manifest.json",)),
}
_STAMP_LINE = re.compile(rf"{STAMP_KEY}: (\S+) (\S+)")
_TEXT_PEEK = 4096  # a text stamp is in the first or the last 4 KB


class OutputError(ValueError):
    """An output path that would overwrite an input or a run's files; the message names it and the fix."""


def _same(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): not the same file
        return False


def _remote(path) -> bool:
    return "://" in str(path)


def folder_kind(folder: Path) -> tuple[str, str] | None:
    """(kind, marker) when `folder` belongs to a run ("run"), a results tree ("results") or a shard set ("set")."""
    for kind, (_, markers) in KINDS.items():
        for name in markers:
            if (folder / name).is_file():
                return kind, name
    return None


def owner_of(path: Path, skip: tuple[str, ...] = ()) -> tuple[str, Path, str] | None:
    """The nearest folder at or above `path` that belongs to a run, a results tree or a shard set, as
    (kind, folder, marker); kinds in `skip` are passed over."""
    for folder in (path, *path.parents):
        if folder.is_dir() and (found := folder_kind(folder)) and found[0] not in skip:
            return found[0], folder, found[1]
    return None


def _owned(flag: str, p: Path, owner: tuple[str, Path, str]) -> OutputError:
    kind, folder, marker = owner
    what = KINDS[kind][0]
    return OutputError(
        f"{flag} {p}: is inside {what} {folder} (it holds {marker}): a file written there would replace "
        "or mix with that run's own files; write the output outside it"
    )


def check_output(out, flag: str = "--out", files: dict | None = None, folders: dict | None = None) -> Path:
    """`out` (a file to write) as a Path, refused when it is a directory, one of `files`, inside one of `folders`
    or inside a folder that belongs to a run (see the module docstring).

    files / folders: {what the user passed it as ("--pairs", "the edge list of the run"): path or None}."""
    p = Path(out)
    if _remote(p):
        return p
    if p.is_dir():
        example = _example(p, files, folders)
        raise OutputError(
            f"{flag} {p}: is a directory; name a file to write" + (f", e.g. {example}" if example else "")
        )
    for what, path in (files or {}).items():
        if path is not None and not _remote(path) and _same(p, Path(path)):
            raise OutputError(
                f"{flag} {p}: is {what} ({path}), an input of this command; write the output to another file"
            )
    target = p.resolve()
    for what, folder in (folders or {}).items():
        if folder is None or _remote(folder):
            continue
        root = Path(folder).resolve()
        if target == root or root in target.parents:
            raise OutputError(
                f"{flag} {p}: is inside {what} ({folder}), an input of this command; write the output outside it"
            )
    if owner := owner_of(target.parent):
        raise _owned(flag, p, owner)
    return p


def _example(p: Path, files: dict | None, folders: dict | None, name: str = "out.parquet") -> Path | None:
    """A file this guard accepts, for the message refusing the directory `p`: in it, or beside the run folder,
    results tree, shard set or input folder that holds it (a file inside one would be refused in turn), under a
    name no file has yet; None when none is found."""
    folder, inputs = p.resolve(), [Path(f).resolve() for f in (folders or {}).values() if f and not _remote(f)]
    for _ in folder.parts:  # up, at most to the root
        owner = owner_of(folder)
        inside = [r for r in inputs if r == folder or r in folder.parents]
        if not owner and not inside:
            break
        folder = owner[1].parent if owner else inside[0].parent
    stem, suffix = name.rsplit(".", 1)
    for i in range(100):
        candidate = folder / (name if i == 0 else f"{stem}-{i}.{suffix}")
        if not candidate.exists() and not candidate.is_symlink():
            try:
                check_output(candidate, files=files, folders=folders)
            except OutputError:
                continue
            return p / name if candidate == p.resolve() / name else candidate
    return None


def check_output_folder(
    out, flag: str = "--out", files: dict | None = None, itself: str | None = None, within: tuple[str, ...] = ()
) -> Path:
    """`out` (a folder a command fills) as a Path, refused when it is one of `files` or when it, or a folder
    above it, belongs to a run. itself: the kind `out` may be (a trainer's own run folder: "run");
    within: kinds allowed above it (a recipe's seed folders lie in its results tree: "results")."""
    p = Path(str(out).removeprefix("file://"))
    if _remote(p):
        return p
    for what, path in (files or {}).items():
        if path is not None and not _remote(path) and _same(p, Path(path)):
            raise OutputError(f"{flag} {p}: is {what} ({path}), an input of this command; choose another folder")
    target = p.resolve()
    here = folder_kind(target) if target.is_dir() else None
    if here and here[0] != itself:
        raise _nested(flag, p, (here[0], target, here[1]))
    if owner := owner_of(target.parent, skip=within):
        raise _nested(flag, p, owner)
    return p


def _nested(flag: str, p: Path, owner: tuple[str, Path, str]) -> OutputError:
    kind, folder, marker = owner
    return OutputError(
        f"{flag} {p}: {'is' if folder == p.resolve() else 'is inside'} {KINDS[kind][0]} {folder} (it "
        f"holds {marker}); what this command writes would be nested in it and mixed with its files: "
        "choose a folder outside it"
    )


# ---------------------------------------------------------------------------------- stamps
def stamp(command: str, data: str) -> dict:
    """The JSON record of a result: which command wrote it, on which data (a fingerprint)."""
    return {STAMP_KEY: {"command": command, "data": data}}


def stamp_metadata(command: str, data: str) -> dict[bytes, bytes]:
    """The same record as Parquet schema metadata."""
    return {STAMP_KEY.encode(): json.dumps(stamp(command, data)[STAMP_KEY]).encode()}


def stamp_line(command: str, data: str) -> str:
    """The same record as text, for a comment line of a text output (YAML, Markdown)."""
    return f"{STAMP_KEY}: {command} {data}"


def read_stamp(path: Path) -> tuple[str, str] | None:
    """(command, data) of the result at `path`, or None when it holds no stamp (not a result of this project)."""
    name = path.name.lower()
    try:
        if name.endswith(".json"):
            value = json.loads(path.read_text()).get(STAMP_KEY)
        elif name.endswith((".parquet", ".pq")):
            import pyarrow.parquet as pq

            meta = pq.read_schema(path).metadata or {}
            value = json.loads(meta[STAMP_KEY.encode()]) if STAMP_KEY.encode() in meta else None
        else:
            with open(path, "rb") as f:
                head = f.read(_TEXT_PEEK)
                f.seek(max(0, f.seek(0, os.SEEK_END) - _TEXT_PEEK))
                tail = f.read()
            found = _STAMP_LINE.search(head.decode(errors="replace")) or _STAMP_LINE.search(
                tail.decode(errors="replace")
            )
            return (found.group(1), found.group(2)) if found else None
        return (value["command"], value["data"]) if isinstance(value, dict) else None
    except Exception:  # noqa: BLE001 - a file that cannot be read as its kind (pyarrow's own errors too) has none
        return None


def check_replacement(out, command: str, data: str, overwrite: bool, flag: str = "--out", what: str = "result") -> None:
    """An existing `out` is replaced only when it is this command's result on the same data (its stamp), or
    with --overwrite; else refused in one line naming both."""
    p = Path(out)
    if overwrite or _remote(p) or not p.is_file():
        return
    found = read_stamp(p)
    if found is None:
        raise OutputError(
            f"{flag} {p}: already exists and is not a {what} of this command; pass --overwrite to "
            f"replace it, or choose another {flag}"
        )
    if found[0] != command:
        raise OutputError(
            f"{flag} {p}: already holds the output of another command ({found[0]}); pass --overwrite "
            f"to replace it, or choose another {flag}"
        )
    if found[1] != data:
        raise OutputError(
            f"{flag} {p}: already holds a {what} of other data (data {found[1]}, this one's {data}); "
            f"pass --overwrite to replace it, or choose another {flag}"
        )
