"""bench/negatives_count.py: MRR against random subsets of the shared negatives, on hand-computed values."""
from __future__ import annotations

import numpy as np
import pytest

from bench.negatives_count import mrr, subsampled_mrr


def test_mrr_against_shared_negatives_is_exact():
    # positive 1.0 against negatives (2, 0): rank 2; positive 3.0: rank 1; ties count half (0 vs 0: rank 1.5)
    assert mrr(np.array([1.0, 3.0]), np.array([2.0, 0.0])) == pytest.approx((1 / 2 + 1) / 2)
    assert mrr(np.array([0.0]), np.array([0.0])) == pytest.approx(1 / 1.5)


def test_subsets_of_every_negative_equal_the_full_ranking_and_halves_take_one_of_two_values():
    rng = np.random.default_rng(0)
    pos, neg = np.array([1.0]), np.array([2.0, 0.0])
    full = subsampled_mrr(pos, neg, 2, 3, rng)
    assert np.array_equal(full, np.full(3, mrr(pos, neg)))
    # a subset of one negative: rank 2 when it is the 2.0 (MRR 0.5), else rank 1 (MRR 1)
    halves = subsampled_mrr(pos, neg, 1, 200, rng)
    assert set(halves.tolist()) == {0.5, 1.0}
    again = np.random.default_rng(0)
    subsampled_mrr(pos, neg, 2, 3, again)
    assert np.array_equal(halves, subsampled_mrr(pos, neg, 1, 200, again))  # seeded: the same draws
