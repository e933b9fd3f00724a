"""The edit log: an append-only file of graph edits, durable before any edit is acknowledged.

`STATE/edits.jsonl` holds one JSON object per line: a header naming the graph the edits apply to, then one
record per acknowledged edit ({"seq", "add", "remove"}, seq = 1, 2, ...). An append is written, flushed and
fsync'd before it returns; the first write of the file also fsyncs the folder, so the file's name survives
a crash too. A crash in the middle of an append leaves a last line without its newline: that edit was never
acknowledged, and opening the log cuts it off. Any other damage stops the service with the line it found.

One service owns a state folder: the log is locked (flock) while open, and a second owner is refused.
"""
from __future__ import annotations

import fcntl
import json
import os
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


class EditLog:
    """Open (and lock) the log of `folder` for the graph `graph` (a dict naming it: fingerprint, nodes, edges,
    source); `records` are the edits it holds, in order."""

    def __init__(self, folder, graph: dict):
        self.folder = Path(folder)
        self.path = self.folder / LOG_NAME
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise StateError(f"--state {self.folder}: is a file; pass a folder for the edit log") from None
        created = not self.path.exists()
        self.file = open(self.path, "a+b", buffering=0)  # unbuffered: what write() returned is in the file
        try:
            fcntl.flock(self.file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.close()
            raise StateError(f"--state {self.folder}: its edit log is in use by another running service; stop "
                             "that one or pass another --state") from None
        self.records = self._read(graph)
        if created or self.file.tell() == 0:
            self._write(json.dumps({"pencil_edit_log": FORMAT, "graph": graph}) + "\n")
            fsync_dir(self.folder)
        self.size = self.file.seek(0, os.SEEK_END)  # bytes durable: a reader on this machine compares st_size

    def _read(self, graph: dict) -> list:
        self.file.seek(0)
        data = self.file.read()
        lines = data.split(b"\n")
        if lines and lines[-1]:  # a torn last append: never acknowledged, cut off
            cut = len(data) - len(lines[-1])
            self.file.truncate(cut)
            os.fsync(self.file.fileno())
        self.file.seek(0, os.SEEK_END)
        lines = lines[:-1]
        if not lines:
            return []
        header = self._parse(lines[0], 1)
        if header.get("pencil_edit_log") != FORMAT:
            raise StateError(f"{self.path}: not a PENCIL edit log of format {FORMAT} (line 1); pass another --state")
        have = header.get("graph", {})
        if have.get("fingerprint") != graph["fingerprint"]:
            raise StateError(f"{self.path}: holds the edits of another graph ({have.get('source')}, "
                             f"{have.get('nodes')} nodes, {have.get('edges')} edges) than this service's "
                             f"({graph['source']}, {graph['nodes']} nodes, {graph['edges']} edges); "
                             "pass another --state")
        records = []
        for n, line in enumerate(lines[1:], start=2):
            rec = self._parse(line, n)
            if rec.get("seq") != len(records) + 1 or not all(isinstance(rec.get(k), list) for k in ("add", "remove")):
                raise StateError(f"{self.path}: line {n} is not edit {len(records) + 1}; the log is damaged "
                                 "(restore it from a backup or pass another --state)")
            records.append(rec)
        return records

    def _parse(self, line: bytes, n: int) -> dict:
        try:
            value = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            value = None
        if not isinstance(value, dict):
            raise StateError(f"{self.path}: line {n} is not a JSON object; the log is damaged (restore it from a "
                             "backup or pass another --state)")
        return value

    def _write(self, line: str) -> None:
        """Append one line durably; on failure the file is cut back to where it was, and the error raised."""
        start = self.file.seek(0, os.SEEK_END)
        data = memoryview(line.encode())
        try:
            while data:
                data = data[self.file.write(data):]
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
        self._write(json.dumps(record, separators=(",", ":")) + "\n")
        self.records.append(record)
        self.size = self.file.seek(0, os.SEEK_END)

    def close(self) -> None:
        self.file.close()  # releases the lock
