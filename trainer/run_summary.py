"""A trainer run's summary.json as a typed record: the trainer writes a `RunSummary` (trainer/train.py,
trainer/eval_only.py) and the recipes read one back through `read_summary` (pipelines/core/seeds.py,
pipelines/auto/search.py, pipelines/core/finished.py). The recipes also build one for a run that did not
finish (pipelines/core/stopped.py: `stopped`; pipelines/core/seeds.py: `failed`).

`to_dict()` writes the JSON the trainer has always written: the same keys in the same order, `own_graph` and
`weights_from` only when set, so a summary.json's bytes do not change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

from common.atomic import write_text_atomic

SUMMARY = "summary.json"


@dataclass(frozen=True)
class RunSummary:
    preset: str | None = None
    dataset: str | None = None  # the data's name (a user's edges.csv is "edges")
    own_graph: bool = False  # the data is the user's, not a paper dataset
    protocol: str | None = None
    selection_metric: str = "mrr"
    best_epoch: int | None = None  # None: no epoch was evaluated
    best_step: int | None = None
    valid: dict | None = None  # metrics at the best epoch
    test: dict | None = None
    last_eval: dict | None = None
    steps: int = 0
    epochs_completed: int = 0
    converged: bool = False
    train_time_s: float | None = None
    attention_backend: str | None = None
    world_size: int | None = None
    device: str | None = None
    accumulation: int | None = None
    num_parameters: int | None = None
    node_features: bool | None = None  # the run read node features (the report's 'PENCIL', else 'w/o features')
    config: dict = field(default_factory=dict)  # the resolved TrainConfig
    weights_from: str | None = None  # --eval-weights: the best.pt evaluated, no training
    stopped: bool = False  # a recipe's record of a run the time budget stopped (never written by the trainer)
    failed: str | None = None  # a recipe's record of a run whose trainer failed after an evaluation

    @classmethod
    def from_dict(cls, d: dict) -> RunSummary:
        """The record of a summary.json object; keys it does not know are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def to_dict(self) -> dict:
        """summary.json's object: every trainer field in order, the optional ones only when set."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in OPTIONAL and value in (None, False):
                continue
            out[f.name] = value
        return out


# Fields written only when set: the summaries of paper datasets and of trained runs stay as they were.
OPTIONAL = ("own_graph", "weights_from", "stopped", "failed")


def summary_path(run: str | Path) -> Path:
    """A run folder's summary.json (given the folder, or the file itself)."""
    path = Path(run)
    return path if path.name == SUMMARY else path / SUMMARY


def read_summary(run: str | Path) -> RunSummary:
    """The summary of a run folder (or of the summary.json given). OSError when there is none, ValueError
    when it is not a summary (a torn or foreign file)."""
    path = summary_path(run)
    body = json.loads(path.read_text())
    if not isinstance(body, dict):
        raise ValueError(f"{path}: not a run summary (a JSON object)")
    return RunSummary.from_dict(body)


def write_summary(out: Path, summary: RunSummary) -> None:
    """OUT/summary.json, atomically (numpy scalars as floats)."""
    write_text_atomic(Path(out) / SUMMARY, json.dumps(summary.to_dict(), indent=1, default=float))
