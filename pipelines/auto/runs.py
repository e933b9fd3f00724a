"""What `--preset auto`'s trainer runs wrote (validation scores per epoch, the speed probe's timing), and
whether a run folder resumes; the runs themselves go through the one trainer pool (pipelines.core.trainers)."""
from __future__ import annotations

import json
import math
from pathlib import Path

PROBE_STEPS = 20  # optimiser steps of the speed probe (logged every PROBE_LOG_EVERY; the first window is warm-up)
PROBE_LOG_EVERY = 5
SEARCH_SEED = 0  # the seed the candidates train; the final seed of that number reuses the winner's weights


class AutoError(ValueError):
    """A failed search step; the message names it and where its log is."""


def entry_flag(run_dir: Path) -> str:
    """A survivor resumes from its last.pt; a folder without one (new, or killed before its first
    checkpoint) is cleared: the search owns its candidate and seed folders (trainer.run_folder)."""
    return "--resume" if (Path(run_dir) / "last.pt").is_file() else "--overwrite"


def _summary(run_dir: Path) -> dict | None:
    path = run_dir / "summary.json"
    return json.loads(path.read_text()) if path.exists() else None


def best_within(run_dir: Path, protocol: str, metric: str, epochs: int) -> tuple[float, int | None]:
    """Best validation score (higher is better) and its epoch among the evaluations of the first `epochs`
    epochs, from metrics.jsonl: a candidate that already trained further (an earlier run's later rung) is
    judged at this rung on exactly what it had then, so a rerun makes the same decisions."""
    best, at = -math.inf, None
    path = run_dir / "metrics.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line of a killed run
        if (rec.get("event") == "eval" and rec.get("split") == "valid" and rec.get("protocol") == protocol
                and rec.get("epoch", epochs) < epochs and rec.get(metric) is not None and rec[metric] > best):
            best, at = float(rec[metric]), int(rec["epoch"])
    return best, at


def probe_timing(run_dir: Path, train_links: int, wall_s: float) -> dict:
    """Seconds per epoch of a candidate from its speed probe: `train_links` at the training speed after the
    first logged window (warm-up), plus one validation pass, plus the trainer's start-up and warm-up (every
    rung starts a trainer, so counting them once per epoch errs on the safe side)."""
    recs = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            recs.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    train = [r for r in recs if r.get("event") == "train"]
    evals = [r for r in recs if r.get("event") == "eval"]
    if not train or not evals:
        raise AutoError(f"speed probe: no training or evaluation record in {run_dir / 'metrics.jsonl'}; "
                        f"see {run_dir / 'trainer.log'}")
    steady = train[1:] or train
    links_per_s = sum(r["samples_per_s"] for r in steady) / len(steady)
    steady_s = sum(r["time"] - p["time"] for p, r in zip(train, train[1:]))  # the windows after the first
    eval_s = float(evals[-1]["seconds"])
    startup = max(0.0, wall_s - eval_s - steady_s)  # process start, loading and the warm-up window
    sec = train_links / links_per_s + eval_s + startup
    return {"links_per_s": round(links_per_s, 1), "eval_s": round(eval_s, 2), "startup_s": round(startup, 2),
            "probe_wall_s": round(wall_s, 2), "sec_per_epoch": round(sec, 2)}


