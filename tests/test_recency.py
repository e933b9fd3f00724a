"""Recent popularity on a temporal typed graph (common/heuristics_temporal.py decayed_activity,
common/heuristics_typed.py): hand-computed weights on a hand-made ratings file, tau chosen on validation only, and
the blend's prior offered beside popularity's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from common.datasets import DatasetSpec, load_dataset
from common.heuristics_temporal import RECENCY_FRACTIONS, decayed_activity
from common.heuristics_typed import (
    L3_PRIOR,
    POPULARITY_PRIOR,
    RECENT,
    RECENT_PRIOR,
    prior_names,
    recency_choice,
    typed_scores,
)
from pipelines.typed_rows import typed_notes
from tests.test_user_item_typed import write_ratings


def test_decayed_activity_weights_each_row_by_its_age_by_hand():
    pairs = np.array([[0, 1], [1, 2], [0, 2], [2, 2], [0, 1]])  # a self-loop drops; the repeat counts
    times = np.array([0.0, 6.0, 8.0, 9.0, 10.0])  # the last row is at the boundary: not before it
    out = decayed_activity(pairs, times, 3, start=10, fractions=(0.5,))  # span 10, tau 5
    w = [math.exp(-10 / 5), math.exp(-4 / 5), math.exp(-2 / 5)]  # rows at ages 10, 4, 2
    np.testing.assert_allclose(out[0], [w[0] + w[2], w[0] + w[1], w[1] + w[2]])


def test_recent_popularity_ranks_by_the_replaced_items_recent_weight_by_hand(tmp_path):
    ds = load_dataset(DatasetSpec(str(write_ratings(tmp_path))))
    # the file's times are 1..20: train 1..17, valid from 18, test from 19; test's history is train + valid
    start, span = 19, 18
    # valid (u1, g) against h alone: h has no row before 18, g two, so every tau ranks it first: the first tau
    assert recency_choice(ds) == 0
    tau = RECENCY_FRACTIONS[0] * span
    weight = lambda *times: sum(math.exp(-(start - t) / tau) for t in times)  # noqa: E731
    # test (u4, a): u4 new (0); a's rows at times 1, 3, 9; its corruptions b..h: b 2, 7; ... h none
    pos, rows = typed_scores(ds, "test", (RECENT,))[RECENT]
    item_times = {"a": (1, 3, 9), "b": (2, 7), "c": (4, 6), "d": (5, 10), "e": (8, 11, 13), "f": (12, 14, 16),
                  "g": (15, 17, 18), "h": ()}  # fmt: skip
    assert pos[0] == pytest.approx(weight(*item_times["a"]))
    item_of = dict(enumerate("abcdefgh", start=4))  # node -> item
    neg = ds.splits["test"].negatives("kg")[0]
    expected = [weight(*item_times[item_of[int(t)]]) for t in neg[:7, 1]]
    np.testing.assert_allclose(rows[0, :7], expected)
    assert np.isneginf(rows[0, 7:]).all()  # padding


def test_selection_sees_validations_recency_only_and_the_blend_gets_both_priors(tmp_path):
    ds = load_dataset(DatasetSpec(str(write_ratings(tmp_path))))
    assert set(ds.recency) == {"valid", "test"} and ds.recency["valid"].shape == (len(RECENCY_FRACTIONS), 12)
    view = ds.without_test()
    assert set(view.recency) == {"valid"} and recency_choice(view) == recency_choice(ds)
    assert prior_names(view) == (POPULARITY_PRIOR, RECENT_PRIOR, L3_PRIOR)
    pos, rows = typed_scores(view, "valid", (RECENT_PRIOR,))[RECENT_PRIOR]
    head, tail = ds.recency["valid"][0][[0, 10]]  # u1 and g
    assert pos[0] == pytest.approx((1 + head) * (1 + tail) - 1)
    assert "tau = 1/16 of the history's span" in typed_notes(ds)[-1]


def test_a_graph_without_time_has_no_recent_popularity(tmp_path):
    folder = tmp_path / "kg"
    folder.mkdir()
    for split, rows in (("train", ["a\tr\tb", "b\tr\tc", "c\tr\ta"]), ("valid", ["a\tr\tc"]), ("test", ["b\tr\ta"])):
        (folder / f"{split}.txt").write_text("\n".join(rows) + "\n")
    ds = load_dataset(DatasetSpec(str(folder)))
    assert ds.recency is None and prior_names(ds) == (POPULARITY_PRIOR, L3_PRIOR)
    assert RECENT not in typed_scores(ds, "test")
