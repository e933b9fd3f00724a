"""The best epoch is the FIRST of equal best validation scores: the trainer's summary, its best.pt and the
test numbers reported beside it all come from that epoch. Validation and test metrics are scripted per
epoch, so the expected epoch is read off by hand."""

from __future__ import annotations

import pytest
import torch

from common.metrics import improves
from tests.test_trainer_data import make_shard_set
from trainer import checkpoint
from trainer import train as train_mod
from trainer.config import config_for

# epoch -> validation MRR: epochs 1 and 2 tie at the best value, epoch 3 is worse
VALID = [0.30, 0.50, 0.50, 0.40]
TEST = [0.10, 0.20, 0.90, 0.95]  # a later tie would report 0.90


def test_improves_is_strict_both_ways():
    assert not improves("mrr", 0.5, 0.5) and improves("mrr", 0.5000001, 0.5)
    assert not improves("rmse", 0.5, 0.5) and improves("rmse", 0.4999999, 0.5)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return make_shard_set(tmp_path_factory.mktemp("ties"), shard_links=(48,), eval_links=30)


def test_trainer_keeps_the_first_of_equal_best_epochs(shards, tmp_path, monkeypatch):
    calls = []

    def scripted(core, manifest, split, protocol, data_cfg, info, keep=None):
        epoch = sum(1 for s in calls if s == "valid") - (split == "test")
        calls.append(split)
        value = (VALID if split == "valid" else TEST)[epoch]
        return {"mrr": value, "auc": value, "ap": value}

    monkeypatch.setattr(train_mod, "evaluate_split", scripted)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        summary = train_mod.run(
            config_for(
                "tiny",
                str(shards),
                str(tmp_path / "run"),
                epochs=4,
                device="cpu",
                progress=False,
                data={"num_workers": 0},
            )
        )
    finally:
        torch.set_num_threads(threads)
    assert summary["best_epoch"] == 1
    assert summary["valid"]["mrr"] == 0.50 and summary["test"]["mrr"] == 0.20
    assert checkpoint.load(tmp_path / "run" / "best.pt")["state"]["best_epoch"] == 1
    assert calls.count("valid") == 4 and calls.count("test") == 2  # test scored at epochs 0 and 1 only
