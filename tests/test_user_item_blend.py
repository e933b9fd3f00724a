"""bench.user_item_pencil --blend: logit + w log1p(popularity) by hand, and the weight chosen on validation only."""

import numpy as np

from bench.user_item_pencil import BLEND, blend_name, chosen_weight, popularity_blend
from pipelines.auto.blend import WEIGHTS


def test_popularity_blend_adds_the_weighted_log_degree():
    logit = lambda u, i: np.array([0.5, -1.0], np.float32)  # noqa: E731
    popularity = lambda u, i: np.array([0.0, 3.0])  # noqa: E731
    got = popularity_blend(logit, popularity, 2.0)(None, None)
    np.testing.assert_allclose(got, [0.5, -1.0 + 2.0 * np.log(4.0)])
    assert got.dtype == np.float64


def test_the_weight_is_the_best_valid_mrr_and_the_smaller_of_equals():
    valid = {blend_name(w): {"mrr": 0.1} for w in (0.0, *WEIGHTS)}
    valid[blend_name(8.0)] = valid[blend_name(32.0)] = {"mrr": 0.3}
    assert chosen_weight(valid) == 8.0
    valid[blend_name(0.0)] = {"mrr": 0.4}
    assert chosen_weight(valid) == 0.0
    assert blend_name(32.0).startswith(BLEND)
