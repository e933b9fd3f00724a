"""A user-item file -> one node space with kinds (users then items, ids as text), and its temporal split, on a
tiny hand-made file whose every number is worked out below."""

from __future__ import annotations

import pytest

from common.datasets.base import DatasetError
from common.datasets.fractions import SplitSettings
from common.datasets.user_item import read_user_item, user_item_split

ROWS = [  # user, item, rating, time
    ("b", "7", 5, 1),
    ("a", "7", 3, 2),
    ("a", "08", 4, 3),
    ("b", "9", 1, 4),
    ("c", "7", 2, 5),
    ("c", "08", 5, 6),
    ("a", "9", 2, 7),
    ("b", "08", 3, 8),
    ("c", "9", 4, 9),
    ("d", "7", 1, 10),
]


@pytest.fixture
def ratings(tmp_path):
    path = tmp_path / "ratings.tsv"
    path.write_text("user\titem\trating\ttime\n" + "".join("\t".join(map(str, r)) + "\n" for r in ROWS))
    return path


def test_two_id_spaces_become_one_node_space_with_kinds(ratings):
    g = read_user_item(ratings)
    # users a b c d -> 0..3; items sorted as text "08" "7" "9" -> 4..6 (the leading zero is kept)
    assert g.node_ids.tolist() == ["a", "b", "c", "d", "08", "7", "9"]
    assert g.kinds.tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert g.nodes_of("item").tolist() == [4, 5, 6]
    want = [[1, 5], [0, 5], [0, 4], [1, 6], [2, 5], [2, 4], [0, 6], [1, 4], [2, 6], [3, 5]]
    assert g.pairs.tolist() == want
    assert g.rating.tolist() == [5, 3, 4, 1, 2, 5, 2, 3, 4, 1]
    assert g.time.values.tolist() == list(range(1, 11))


def test_the_split_is_the_temporal_one_and_keeps_user_item_order(ratings):
    ds = user_item_split(read_user_item(ratings), SplitSettings(val_frac=0.2, test_frac=0.2))
    # 10 pairs in time order: the first 6 train, times 7 and 8 valid, 9 and 10 test
    assert ds.splits["train"].pos.tolist() == [[1, 5], [0, 5], [0, 4], [1, 6], [2, 5], [2, 4]]
    assert ds.splits["valid"].pos.tolist() == [[0, 6], [1, 4]]
    assert ds.splits["test"].pos.tolist() == [[2, 6], [3, 5]]
    assert ds.split_info["valid_from"] == "7" and ds.split_info["test_from"] == "9"
    assert ds.node_ids.tolist()[4] == "08"
    assert ds.test_graph.num_edges == 8 and ds.graph.num_edges == 6


def test_a_missing_column_is_refused_in_one_line(tmp_path):
    path = tmp_path / "r.tsv"
    path.write_text("user\titem\trating\n1\t2\t3\n")
    with pytest.raises(DatasetError, match="missing column\\(s\\) time"):
        read_user_item(path)
