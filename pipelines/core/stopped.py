"""What a trainer run folder says about a run that was stopped before it finished (a time budget ended it):
the epochs it evaluated. A run with --save-scores saves its validation scores at every improvement, and its
metrics.jsonl holds every evaluation, so its best validation epoch so far and the metrics there (test too,
which the trainer scores whenever validation improves) are on disk even without a summary.json."""

from __future__ import annotations

import json
from pathlib import Path

from common.eval_scores import read_scores, scores_path
from trainer.run_summary import RunSummary

# what an eval record holds beside the metrics (trainer.train.Trainer._eval_split writes it)
BOOKKEEPING = ("event", "step", "epoch", "split", "protocol", "final", "seconds", "time")


def stopped_summary(run_dir: Path, protocol: str) -> RunSummary | None:
    """A summary of the stopped run in `run_dir` at its best evaluated epoch, or None when it evaluated none.
    It says `stopped: true`; a rerun resumes the run (it is never marked finished)."""
    try:
        _, _, best = read_scores(scores_path(Path(run_dir), "valid", protocol))
    except ValueError:
        return None  # no validation scores: no epoch evaluated (or no --save-scores)
    evals = [r for r in _records(Path(run_dir) / "metrics.jsonl") if r.get("event") == "eval"]
    at_best = {r.get("split"): r for r in evals if r.get("epoch") == best and r.get("protocol", protocol) == protocol}
    if "valid" not in at_best:
        return None
    metrics = lambda r: {k: v for k, v in r.items() if k not in BOOKKEEPING}
    return RunSummary(
        best_epoch=best,
        valid=metrics(at_best["valid"]),
        test=metrics(at_best["test"]) if "test" in at_best else {},
        epochs_completed=max(r["epoch"] for r in evals) + 1,
        converged=False,
        stopped=True,
    )


def _records(path: Path) -> list[dict]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line (the kill landed mid-write)
        if isinstance(rec, dict):
            out.append(rec)
    return out
