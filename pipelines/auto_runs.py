"""The trainer processes of `--preset auto` (pipelines.auto_search, pipelines.auto_final): running them
against a deadline, whether a run folder resumes, and reading what they wrote (validation scores per epoch,
the speed probe's timing)."""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

TRAINER = [sys.executable, "-m", "trainer"]
PROBE_STEPS = 20  # optimiser steps of the speed probe (logged every PROBE_LOG_EVERY; the first window is warm-up)
PROBE_LOG_EVERY = 5
SEARCH_SEED = 0  # the seed the candidates train; the final seed of that number reuses the winner's weights


class AutoError(ValueError):
    """A failed search step; the message names it and where its log is."""


def run_trainers(jobs: dict[str, tuple[list[str], Path]], slots: int, stop_at: float | None = None,
                 clock=time.time) -> tuple[dict[str, float], list[str]]:
    """Run `python -m trainer FLAGS` per job, `slots` at a time, each logging to RUN_DIR/trainer.log;
    returns (each job's wall seconds, the jobs stopped at `stop_at` by `clock`: the running ones are ended,
    the pending ones never start). A failed job stops the others and raises naming its log."""
    from pipelines.children import start_child, stop_children  # children that die with the recipe, as its seeds do

    pending, running, wall, stopped = list(jobs), {}, {}, []
    try:
        while pending or running:
            if stop_at is not None and clock() >= stop_at:  # the budget: a slower machine than the probe saw
                stop_children([proc for proc, _ in running.values()])
                for key, (_, t) in running.items():
                    wall[key] = time.perf_counter() - t
                stopped += [*running, *pending]
                running, pending = {}, []
                break
            while pending and len(running) < slots:
                key = pending.pop(0)
                flags, run_dir = jobs[key]
                run_dir.mkdir(parents=True, exist_ok=True)
                with open(run_dir / "trainer.log", "a") as f:
                    proc = start_child([*TRAINER, *flags, "--no-progress"], stdout=f, stderr=f)
                running[key] = (proc, time.perf_counter())
            time.sleep(0.2)
            for key, (proc, t) in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[key]
                wall[key] = time.perf_counter() - t
                if proc.returncode != 0:
                    logfile = jobs[key][1] / "trainer.log"
                    tail = logfile.read_text().strip().splitlines()[-1:] or ["(no output)"]
                    raise AutoError(f"{key}: the trainer failed ({tail[0]}); full log: {logfile}")
    finally:  # a failed job, Ctrl-C or SIGTERM stops the others
        stop_children([proc for proc, _ in running.values()])
    return wall, stopped


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


