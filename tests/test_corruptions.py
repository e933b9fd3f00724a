"""Filtered corruptions on a hand-made knowledge graph: which candidates are excluded, padding, determinism,
node kinds; checked against a plain loop on a random graph; the full-ranking filter and filtered ranks."""

from __future__ import annotations

import numpy as np
import pytest

from common.datasets.base import DatasetError
from common.datasets.corruptions import filtered_corruptions, filtered_ranks, known_partners

# 6 entities, 2 relations
KNOWN = np.array([[0, 0, 1], [0, 0, 2], [3, 0, 1], [1, 1, 4]], dtype=np.int64)


def _row(a):
    return sorted(int(x) for x in a if x >= 0), int(np.sum(a < 0))


def test_known_triples_and_the_query_are_never_drawn():
    heads, tails = filtered_corruptions(np.array([[0, 0, 1]]), KNOWN, 6, per_side=6, seed=0)
    # tails of (0, 0, ?): 1 is the query, 2 is known -> {0, 3, 4, 5}, padded with two -1
    assert _row(tails[0]) == ([0, 3, 4, 5], 2)
    assert (tails[0, 4:] == -1).all()  # padding is at the end
    # heads of (?, 0, 1): 0 is the query, 3 is known -> {1, 2, 4, 5}
    assert _row(heads[0]) == ([1, 2, 4, 5], 2)
    assert heads.dtype == np.int64 and heads.shape == (1, 6)


def test_a_query_outside_known_is_excluded_itself():
    heads, tails = filtered_corruptions(np.array([[5, 1, 4]]), KNOWN, 6, per_side=5, seed=3)
    assert _row(tails[0]) == ([0, 1, 2, 3, 5], 0)  # only the query's own tail 4 is left out
    assert _row(heads[0]) == ([0, 2, 3, 4], 1)  # (1, 1, 4) is known, 5 is the query


def test_fewer_per_side_draws_without_repeats_and_is_deterministic():
    q = np.array([[0, 0, 1], [5, 1, 4]])
    h1, t1 = filtered_corruptions(q, KNOWN, 6, per_side=3, seed=7)
    h2, t2 = filtered_corruptions(q, KNOWN, 6, per_side=3, seed=7)
    np.testing.assert_array_equal(h1, h2)
    np.testing.assert_array_equal(t1, t2)
    assert set(t1[0]) <= {0, 3, 4, 5} and len(set(t1[0])) == 3
    assert set(h1[1]) <= {0, 2, 3, 4} and len(set(h1[1])) == 3
    draws = {tuple(filtered_corruptions(q, KNOWN, 6, per_side=3, seed=s)[1][0]) for s in range(20)}
    assert len(draws) > 1  # the seed matters


def test_allowed_kinds_restrict_candidates():
    allowed = {0: (np.array([0, 3]), np.array([1, 2, 4])), 1: (np.array([1, 5]), np.array([4]))}
    q = np.array([[0, 0, 1], [5, 1, 4]])
    heads, tails = filtered_corruptions(q, KNOWN, 6, per_side=3, seed=0, allowed=allowed)
    assert _row(tails[0]) == ([4], 2)  # items {1, 2, 4} less the query's 1 and the known 2
    assert _row(heads[0]) == ([], 3)  # heads {0, 3} are both true
    assert _row(tails[1]) == ([], 3)  # the only tail is the query's
    assert _row(heads[1]) == ([], 3)  # 1 is known, 5 the query
    with pytest.raises(DatasetError, match="relation 1 has no"):
        filtered_corruptions(q, KNOWN, 6, per_side=3, seed=0, allowed={0: allowed[0]})


def test_matches_a_plain_loop_on_a_random_graph():
    rng = np.random.default_rng(0)
    n, r = 30, 3
    known = np.unique(rng.integers(0, [n, r, n], size=(300, 3)), axis=0)
    q = known[rng.choice(len(known), 40, replace=False)]
    heads, tails = filtered_corruptions(q, known, n, per_side=25, seed=1)
    truth = {tuple(t) for t in known.tolist()}
    for i, (h, rel, t) in enumerate(q.tolist()):
        free_t = {e for e in range(n) if (h, rel, e) not in truth}
        free_h = {e for e in range(n) if (e, rel, t) not in truth}
        for got, free in ((tails[i], free_t), (heads[i], free_h)):
            drawn = got[got >= 0]
            assert len(set(drawn)) == len(drawn) == min(25, len(free))
            assert set(drawn) <= free
            assert (got[len(drawn) :] == -1).all()


def test_bad_input_is_refused_in_one_line():
    with pytest.raises(DatasetError, match="entity ids must lie in"):
        filtered_corruptions(np.array([[0, 0, 9]]), KNOWN, 6, per_side=2, seed=0)
    with pytest.raises(DatasetError, match="expected \\(n, 3\\)"):
        filtered_corruptions(np.array([[0, 0]]), KNOWN, 6, per_side=2, seed=0)


def test_known_partners_and_filtered_ranks():
    q = np.array([[0, 0, 1]])
    rows, ents = known_partners(q, KNOWN, 6, side=2)
    assert sorted(zip(rows.tolist(), ents.tolist(), strict=True)) == [(0, 1), (0, 1), (0, 2)]
    mask = np.zeros((1, 6), dtype=bool)
    mask[rows, ents] = True
    scores = np.array([[0.5, 0.7, 0.9, 0.1, 0.7, 0.6]])
    # true tail 1 scores 0.7; 2 (0.9, known) is filtered; 4 ties at 0.7 (half), 0 and 5 and 3 are below
    np.testing.assert_allclose(filtered_ranks(scores[:, 1], scores, mask), [1.5])
    own = np.zeros_like(mask)
    own[0, 1] = True  # the raw rank: only the query's own entity is left out, 2 counts above
    np.testing.assert_allclose(filtered_ranks(scores[:, 1], scores, own), [2.5])
