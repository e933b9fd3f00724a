"""bench.attribute_ratings (the family the peer input was measured on) and bench.peer_input's shuffled control."""

from __future__ import annotations

import csv
import io

import numpy as np

from bench.attribute_ratings import SEGMENTS, USERS, generate
from bench.peer_input import shuffled_tables


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_a_graph_is_seeded_and_its_users_rate_in_a_burst_after_arriving_with_one_segment_each():
    ratings, users = generate(3, 1.0)
    assert (ratings, users) == generate(3, 1.0) and ratings != generate(4, 1.0)[0]
    head, *pairs = _rows(ratings)
    assert head == ["user", "item", "time"]
    assert len({(u, i) for u, i, _ in pairs}) == len(pairs)  # no item twice for a user
    times: dict[str, list[int]] = {}
    for u, _, t in pairs:
        times.setdefault(u, []).append(int(t))
    spans = [max(t) - min(t) for t in times.values()]
    assert max(spans) <= 0.01 * 1e7  # each user's pairs lie within a burst of 1 % of the history
    head, *rows = _rows(users)
    assert head[1 : 1 + SEGMENTS] == [f"segment_{s}" for s in range(SEGMENTS)] and len(rows) == USERS
    assert all(sum(int(v) for v in r[1 : 1 + SEGMENTS]) == 1 for r in rows)
    age = np.array([float(r[-1]) for r in rows])
    assert abs(age.mean()) < 1e-3 and abs(age.std() - 1) < 1e-3


def test_the_shuffled_control_keeps_the_ids_and_permutes_the_rows(tmp_path):
    table = tmp_path / "users.csv"
    table.write_text("node,a,b\nu1,1,10\nu2,2,20\nu3,3,30\nu4,4,40\n")
    spec = shuffled_tables(f"user={table}", tmp_path)
    kind, path = spec.split("=", 1)
    head, *rows = _rows(open(path).read())
    assert kind == "user" and head == ["node", "a", "b"] and [r[0] for r in rows] == ["u1", "u2", "u3", "u4"]
    assert sorted(r[1:] for r in rows) == [["1", "10"], ["2", "20"], ["3", "30"], ["4", "40"]]
    assert [r[1:] for r in rows] != [["1", "10"], ["2", "20"], ["3", "30"], ["4", "40"]]  # seed 0 moves them
