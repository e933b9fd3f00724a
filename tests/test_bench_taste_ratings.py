"""bench.taste_ratings: the family the l3 prior was measured on, seeded, with its control."""

from __future__ import annotations

import csv
import io

import numpy as np

from bench.taste_ratings import GROUPS, ITEMS, RATED, USERS, draw, generate


def _pairs(text: str) -> np.ndarray:
    head, *rows = list(csv.reader(io.StringIO(text)))
    assert head == ["user", "item", "time"]
    return np.array([[int(u[1:]), int(i[1:]), int(t)] for u, i, t in rows])


def test_a_graph_is_seeded_each_user_rates_distinct_items_and_times_are_a_permutation():
    text = generate(3, 1.0)
    assert text == generate(3, 1.0) and text != generate(4, 1.0)
    p = _pairs(text)
    assert len(p) == USERS * RATED and p[:, 1].max() < ITEMS
    assert len({(u, i) for u, i, _ in p.tolist()}) == len(p)  # no item twice for a user
    assert sorted(p[:, 2].tolist()) == list(range(len(p)))


def test_at_beta_1_most_choices_share_the_users_taste_and_at_beta_0_about_one_in_groups_do():
    def same(beta: float) -> float:
        pairs, user_taste, item_taste = draw(0, beta)
        return float(np.mean(user_taste[pairs[:, 0]] == item_taste[pairs[:, 1]]))

    # e^2 = 7.4 times the weight on 1 of 8 groups: about 7.4 / (7.4 + 7) of the choices at beta 1
    assert same(1.0) > 0.4 and abs(same(0.0) - 1 / GROUPS) < 0.05
