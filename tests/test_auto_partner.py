"""The blend's partner evaluated on test: the search run's best.pt, evaluated by a real trainer
(--eval-weights), gives back exactly the validation scores that run saved (the same weights), adds the test
split's, and a second call reuses the folder; the recipe's reader refuses a partner that missed a pair."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from common.eval_scores import read_scores, scores_path
from pipelines.auto.blend import BlendError
from pipelines.auto.config import DEFAULT_PRESET
from pipelines.auto.final import evaluate_partner
from pipelines.auto.recipe import partner_scores
from pipelines.core.seeds import seed_run, train_seeds
from tests.conftest import cpu_trainer_options
from tests.test_trainer_data import make_shard_set

SMALL = ("--hidden=16", "--ffn=32", "--heads=2", "--layers=1")


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A search-like run of the default preset on a tiny set: validation only, its scores saved."""
    root = tmp_path_factory.mktemp("partner")
    shards = make_shard_set(root / "set", shard_links=(32, 16), eval_links=24, seed=0)
    opts = cpu_trainer_options(root, "--train-arg=--max-steps=4")
    run = seed_run(
        opts, DEFAULT_PRESET, str(shards), "original", 0, root / "search" / "wide", epochs=2, overrides=SMALL,
        eval_splits=("valid",), save_scores=True,
    )  # fmt: skip
    train_seeds(opts, {0: run})
    return opts, shards, root


def _choice(shards: Path, run_dir: Path):
    partner = SimpleNamespace(cid="wide-d1n50", overrides=lambda: SMALL)
    return SimpleNamespace(
        partner=partner, partner_dir=str(run_dir), partner_shards=str(shards), run_epochs=2, partner_run_epochs=2
    )


def test_the_partner_evaluated_on_test_gives_back_its_validation_scores_and_is_reused(searched, tmp_path):
    opts, shards, root = searched
    choice = _choice(shards, root / "search" / "wide")
    got = evaluate_partner(opts, choice, "original", tmp_path / "runner-up")
    assert got == tmp_path / "runner-up" and not (root / "search" / "wide" / "scores" / "test-original.npz").exists()
    saved = read_scores(scores_path(root / "search" / "wide", "valid", "original"))
    again = read_scores(scores_path(got, "valid", "original"))
    assert np.array_equal(saved[0], again[0]) and np.allclose(saved[1], again[1], atol=1e-6)
    test_cid, test_score, _ = read_scores(scores_path(got, "test", "original"))
    table = partner_scores(got, "test", "original", test_cid)
    assert np.allclose(table[test_cid], test_score)
    size = (got / "trainer.log").stat().st_size
    assert evaluate_partner(opts, choice, "original", got) == got and (got / "trainer.log").stat().st_size == size
    with pytest.raises(BlendError, match=r"runner-up: its test/original scores miss pairs the final seeds scored"):
        partner_scores(got, "test", "original", np.array([test_cid.max() + 1]))


def test_a_partner_whose_evaluation_fails_is_dropped(searched, tmp_path, caplog):
    opts, shards, root = searched
    choice = _choice(shards, tmp_path / "no-such-run")  # no best.pt there: the trainer refuses it
    assert evaluate_partner(opts, choice, "original", tmp_path / "runner-up") is None
    assert "blend: wide-d1n50: the trainer failed (" in caplog.text
