"""The typed records between the parts: a shard set's Manifest (common/manifest_record.py) and a trainer run's
RunSummary (trainer/run_summary.py) carry the same JSON on disk as the dicts they replaced."""

from __future__ import annotations

import dataclasses
import json

import pytest

from common.shards import Manifest, read_manifest
from tests.test_trainer_data import make_shard_set
from trainer.run_summary import RunSummary, read_summary, write_summary


def test_manifest_is_a_frozen_record_of_the_checked_json(tmp_path):
    root = make_shard_set(tmp_path / "set")
    m = read_manifest(root)
    body = json.loads((root / "manifest.json").read_text())
    assert isinstance(m, Manifest) and m.root == str(root)
    assert (m.n_max, m.num_nodes, m.key, m.fingerprint, m.checksum) == (
        body["n_max"],
        body["num_nodes"],
        body.get("key"),
        body.get("fingerprint"),
        body["checksum"],
    )
    assert m.shards == body["shards"] and m.graphs == body["graphs"] and m.eval == body["eval"]
    assert m.to_dict() == {**body, "root": str(root)}  # the JSON as read, for the places that pass it on whole
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.n_max = 3


# summary.json as trainer/train.py wrote it before RunSummary (a run on a user's graph, --eval-weights)
WRITTEN = {
    "preset": "tiny",
    "dataset": "edges",
    "own_graph": True,
    "protocol": "original",
    "selection_metric": "mrr",
    "best_epoch": 1,
    "best_step": 4,
    "valid": {"mrr": 0.5},
    "test": {"mrr": 0.4},
    "last_eval": {"step": 4},
    "steps": 4,
    "epochs_completed": 2,
    "converged": False,
    "train_time_s": 1.25,
    "attention_backend": "sdpa",
    "world_size": 1,
    "device": "cpu",
    "accumulation": 1,
    "num_parameters": 1000,
    "node_features": False,
    "config": {"seed": 0},
    "weights_from": "/runs/seed0/best.pt",
}


def test_run_summary_writes_the_bytes_the_trainer_wrote(tmp_path):
    before = json.dumps(WRITTEN, indent=1, default=float)
    summary = RunSummary.from_dict(WRITTEN)
    write_summary(tmp_path, summary)
    assert (tmp_path / "summary.json").read_text() == before  # same keys, same order
    assert read_summary(tmp_path) == read_summary(tmp_path / "summary.json") == summary
    # a paper dataset's trained run: no own_graph, no weights_from, as before
    plain = {k: v for k, v in WRITTEN.items() if k not in ("own_graph", "weights_from")}
    assert RunSummary.from_dict(plain).to_dict() == plain and list(RunSummary.from_dict(plain).to_dict()) == list(plain)


def test_read_summary_refuses_what_is_not_a_summary(tmp_path):
    with pytest.raises(OSError):
        read_summary(tmp_path)
    (tmp_path / "summary.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="summary.json: not a run summary"):
        read_summary(tmp_path)


def test_table_rows_keep_results_json_bytes():
    """aggregate's rows (pipelines.core.results.TableRow) serialise as the dicts they replaced: same keys, same
    order, labels only when set; a heuristic's row is the same record."""
    from pipelines.core.results import TableRow, aggregate, table_json

    def record(seed, mrr, **labels):
        return {
            "dataset": "edges",
            "protocol": "original",
            "model": "PENCIL",
            "seed": seed,
            "test": {"mrr": mrr, "auc": 0.9},
            **labels,
        }

    rows = aggregate(
        [record(1, 0.5, split="temporal", own_graph=True), record(0, 0.3, split="temporal", own_graph=True)]
    )
    before = {
        "dataset": "edges",
        "protocol": "original",
        "split": "temporal",
        "model": "PENCIL",
        "seeds": [0, 1],
        "own_graph": True,
        "mrr": (40.0, rows[0]["mrr"][1]),
        "auc": (90.0, 0.0),
    }
    assert json.dumps(table_json(rows)) == json.dumps(table_json([before]))
    plain = TableRow("cora", "heart", "CN", [0], {"auc": (1.0, 0.0), "mrr": (2.0, 0.0)}).to_dict()
    assert list(plain) == ["dataset", "protocol", "model", "seeds", "mrr", "auc"]  # METRICS order, no labels
