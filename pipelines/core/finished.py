"""Finished seeds of a recipe: reused as they are, never relaunched.

A seed folder whose trainer ended with exactly the flags this run would pass is finished: its
summary.json is the result. Relaunching it with --resume would train no step, yet rewrite last.pt,
summary.json and config.json, so a rerun of a finished recipe would not be a no-op. The
flags of the run that wrote the folder are kept beside its files (FLAGS_FILE), written only after the
trainer exited 0, and removed before any trainer starts there, so a killed run never looks finished.
"""
from __future__ import annotations

import json
from pathlib import Path

from common.atomic import write_json_atomic, write_text_atomic

FLAGS_FILE = "trainer_flags.json"
# Flags that say how to enter the folder or how to print, not what the run is.
_ENTRY_FLAGS = ("--resume", "--overwrite", "--no-progress")


def canonical(flags: list[str]) -> list[str]:
    return [f for f in flags if f not in _ENTRY_FLAGS]


def finished_summary(run_dir: Path, flags: list[str]) -> dict | None:
    """The seed's summary when its folder holds a run finished with these flags, else None."""
    try:
        recorded = json.loads((run_dir / FLAGS_FILE).read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    whole = (run_dir / "last.pt").is_file() or summary.get("weights_from")  # --eval-weights writes no last.pt
    return summary if recorded == canonical(flags) and whole else None


def forget(run_dir: Path) -> None:
    """Before a trainer starts in the folder: until it exits 0, the folder is not finished."""
    (run_dir / FLAGS_FILE).unlink(missing_ok=True)


def mark_finished(run_dir: Path, flags: list[str]) -> None:
    write_text_atomic(run_dir / FLAGS_FILE, json.dumps(canonical(flags)))


def write_if_changed(path: Path, payload: dict) -> None:
    """Write the JSON unless the file already holds exactly that (a rerun leaves it untouched)."""
    try:
        if json.loads(path.read_text()) == json.loads(json.dumps(payload, default=float)):
            return
    except (OSError, ValueError):
        pass
    write_json_atomic(path, payload)
