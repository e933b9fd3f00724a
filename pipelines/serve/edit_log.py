"""The edit log: an append-only file of graph edits, durable before any edit is acknowledged.

`STATE/edits.jsonl` holds one JSON object per line: a header naming the graph the edits apply to, then one
record per acknowledged edit ({"seq", "add", "remove"}, seq = 1, 2, ...). The header is written with the first
edit, so a service that never acknowledged one leaves the folder bound to no graph. An append is written,
flushed and fsync'd before it returns; the first write of the file also fsyncs the folder, so the file's name
survives a crash too. A crash in the middle of an append leaves a last line without its newline: that edit was
never acknowledged, and opening the log cuts it off (how many bytes: `torn`). Any other damage stops the service
with the line it found, and a file that is not a log of this graph is refused before anything of it is cut.

One service owns a state folder: the log is locked (flock) while open, and a second owner is refused.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path

LOG_NAME = "edits.jsonl"
FORMAT = 1


class StateError(ValueError):
    """A state folder that cannot be used; the message names it and the fix."""


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def parse_log(data: bytes, path: Path, graph: dict) -> tuple[list, int]:
    """(the edits a log's bytes hold, the byte count of a torn last line) for the graph `graph`, or a StateError:
    a file that is no edit log, or one of another graph, is refused before anything of it is cut."""
    lines = data.split(b"\n")
    torn, lines = len(lines[-1]), lines[:-1]
    if not lines:  # empty, or only a header cut short by a crash
        if torn and not data.startswith(b'{"pencil_edit_log"'):
            raise StateError(f"{path}: not a PENCIL edit log (line 1); pass another --state")
        return [], torn
    try:
        header = _parse(path, lines[0], 1)
    except StateError:
        header = {}
    if header.get("pencil_edit_log") != FORMAT:
        raise StateError(f"{path}: not a PENCIL edit log of format {FORMAT} (line 1); pass another --state")
    have = header.get("graph", {})
    if have.get("fingerprint") != graph["fingerprint"]:
        raise StateError(
            f"{path}: holds the edits of another graph ({have.get('source')}, {have.get('nodes')} nodes, "
            f"{have.get('edges')} edges) than this service's ({graph['source']}, {graph['nodes']} nodes, "
            f"{graph['edges']} edges): a log belongs to the graph it started from; pass a new --state "
            "for this graph (a snapshot taken after the edits holds them), or serve the log's graph"
        )
    records = []
    for n, line in enumerate(lines[1:], start=2):
        rec = _parse(path, line, n)
        if rec.get("seq") != len(records) + 1 or not all(isinstance(rec.get(k), list) for k in ("add", "remove")):
            raise StateError(
                f"{path}: line {n} is not edit {len(records) + 1}; the log is damaged "
                "(restore it from a backup or pass another --state)"
            )
        records.append(rec)
    return records, torn


def _parse(path: Path, line: bytes, n: int) -> dict:
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        value = None
    if not isinstance(value, dict):
        raise StateError(
            f"{path}: line {n} is not a JSON object; the log is damaged (restore it from a "
            "backup or pass another --state)"
        )
    return value


def check_state_folder(folder) -> Path:
    """`folder` as a Path: a folder, or one that can be created (no file at it or above it)."""
    folder = Path(folder)
    for p in (folder, *folder.parents):
        if p.exists():
            if not p.is_dir():
                raise StateError(
                    f"--state {folder}: {'is' if p == folder else f'{p} is'} a file; pass a folder for the edit log"
                )
            break
    return folder


def check_state_writable(folder) -> None:
    """A StateError unless the service can write its log in `folder`: a file is made and removed in the folder (or
    in the nearest folder above it that exists, where it would be created), and an existing log is opened for
    writing. A real attempt, not permission bits: root ignores those, a read-only mount does not."""
    folder = Path(folder)
    where = next((p for p in (folder, *folder.parents) if p.exists()), folder)
    log_file = folder / LOG_NAME
    try:
        fd, probe = tempfile.mkstemp(dir=where, prefix=".pencil-write-check-")
        os.close(fd)
        os.unlink(probe)
        if log_file.is_file():
            open(log_file, "r+b").close()  # neither created nor cut
    except OSError as err:
        raise StateError(
            f"--state {folder}: the service cannot write its edit log there ({err.strerror}); "
            "pass a folder it can write"
        ) from None


def inspect_log(folder, graph: dict) -> tuple[list, int]:
    """(the edits to replay, bytes of a torn last line to drop) of the log in `folder` for `graph`, read without
    changing it; a StateError for a folder or a log the service would refuse (pencil serve checks before Ray)."""
    folder = check_state_folder(folder)
    path = folder / LOG_NAME
    if not path.is_file():
        return [], 0
    return parse_log(path.read_bytes(), path, graph)


class EditLog:
    """Open (and lock) the log of `folder` for the graph `graph` (a dict naming it: fingerprint, nodes, edges,
    source); `records` are the edits it holds, in order. The header is written with the first edit, so a service
    that fails to start leaves the folder unbound."""

    def __init__(self, folder, graph: dict):
        self.folder = Path(folder)
        self.path = self.folder / LOG_NAME
        self.graph = graph
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.file = open(self.path, "a+b", buffering=0)  # unbuffered: what write() returned is in the file
        except (FileExistsError, NotADirectoryError):
            raise StateError(f"--state {self.folder}: is a file; pass a folder for the edit log") from None
        except OSError as err:  # a read-only folder: `serve run` meets it here (the command checks before Ray)
            raise StateError(
                f"--state {self.folder}: the service cannot write its edit log there ({err.strerror}); "
                "pass a folder it can write"
            ) from None
        try:
            fcntl.flock(self.file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.close()
            raise StateError(
                f"--state {self.folder}: its edit log is in use by another running service; stop "
                "that one or pass another --state"
            ) from None
        self.file.seek(0)
        data = self.file.read()
        try:
            self.records, self.torn = parse_log(data, self.path, graph)
        except StateError:
            self.file.close()
            raise
        if self.torn:  # a torn last append: never acknowledged, cut off
            self.file.truncate(len(data) - self.torn)
            os.fsync(self.file.fileno())
        self.size = self.file.seek(0, os.SEEK_END)  # bytes durable: a reader on this machine compares st_size

    def _write(self, line: str) -> None:
        """Append durably; on failure the file is cut back to where it was, and the error raised."""
        start = self.file.seek(0, os.SEEK_END)
        data = memoryview(line.encode())
        try:
            while data:
                data = data[self.file.write(data) :]
            os.fsync(self.file.fileno())
        except OSError:
            try:
                self.file.truncate(start)
                self.file.seek(start)
            except OSError:
                pass
            raise

    def append(self, record: dict) -> None:
        """Make `record` (the next seq) durable; it is acknowledged only after this returns."""
        if record["seq"] != len(self.records) + 1:
            raise RuntimeError(f"edit {record['seq']} appended after edit {len(self.records)}")
        first = self.file.seek(0, os.SEEK_END) == 0
        header = json.dumps({"pencil_edit_log": FORMAT, "graph": self.graph}) + "\n" if first else ""
        self._write(header + json.dumps(record, separators=(",", ":")) + "\n")
        if first:
            fsync_dir(self.folder)  # the file's name survives a crash too
        self.records.append(record)
        self.size = self.file.seek(0, os.SEEK_END)

    def close(self) -> None:
        self.file.close()  # releases the lock
