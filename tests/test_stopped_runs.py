"""A run stopped before its summary (a budget, a crash) is judged on the epochs it evaluated: exact values
from a hand-written run folder."""

from __future__ import annotations

import json

import numpy as np

from common.eval_scores import write_scores
from pipelines.core.stopped import stopped_summary
from trainer.run_summary import RunSummary


def _eval(epoch, split, mrr, protocol="original"):
    return (
        json.dumps(
            {
                "event": "eval",
                "step": 10 * epoch,
                "epoch": epoch,
                "split": split,
                "protocol": protocol,
                "mrr": mrr,
                "auc": mrr + 0.5,
                "final": False,
                "seconds": 1.0,
                "time": 5.0,
            }
        )
        + "\n"
    )


def test_the_best_evaluated_epoch_and_its_metrics(tmp_path):
    lines = [
        _eval(0, "valid", 0.1),
        _eval(0, "test", 0.11),
        _eval(1, "valid", 0.3),
        _eval(1, "test", 0.29),
        _eval(2, "valid", 0.2),
        json.dumps({"event": "train", "step": 25, "epoch": 2}) + "\n",
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(lines) + '{"event": "eval", "epo')  # a torn last line
    write_scores(tmp_path / "scores" / "valid-original.npz", np.arange(3), np.zeros(3), 1)  # saved at epoch 1
    got = stopped_summary(tmp_path, "original")
    assert got == RunSummary(
        best_epoch=1,
        valid={"mrr": 0.3, "auc": 0.8},
        test={"mrr": 0.29, "auc": 0.79},
        epochs_completed=3,
        converged=False,
        stopped=True,
    )


def test_a_run_that_evaluated_nothing_has_no_result(tmp_path):
    assert stopped_summary(tmp_path, "original") is None
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"event": "train", "step": 5, "epoch": 0}) + "\n")
    assert stopped_summary(tmp_path, "original") is None
    # scores of an epoch whose records a resumed run dropped: nothing to read them against
    write_scores(tmp_path / "scores" / "valid-original.npz", np.arange(3), np.zeros(3), 4)
    assert stopped_summary(tmp_path, "original") is None
