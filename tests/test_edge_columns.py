"""An edge list's columns beyond src and dst: a weight column summed per pair (before the boundary under a
temporal split) and read by the weighted heuristics, bad weights refused in one line, and every other column
ignored with a log line naming it. Expected values are computed by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from common.datasets import DatasetError, DatasetSpec, load_dataset
from common.graph import Graph, edge_weights
from common.heuristics import HeuristicError, ranking_scores, score_pairs, score_split
from tests.test_temporal import ROWS

A, B, C, D, E, F = range(6)
WEIGHTED = [(A, C, 1), (C, A, 1), (B, C, 3), (A, D, 1), (B, D, 4), (C, D, 5), (C, E, 1)]  # a-c twice: 2 in all


def write(path: Path, rows, header) -> str:
    path.write_text(header + "\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")
    return str(path)


def weighted_graph():
    rows = np.array(WEIGHTED)
    g = Graph.from_edges(rows[:, :2], num_nodes=6)
    return g, edge_weights(g, rows[:, :2], rows[:, 2])


def test_edge_weights_sum_repeats_and_skip_what_is_no_edge():
    g, w = weighted_graph()
    pos, found = g.edge_positions([A, C, B, E], [C, A, D, F])
    assert found.tolist() == [True, True, True, False]
    assert w[pos[:3]].tolist() == [2, 2, 4]
    assert edge_weights(g, np.array([[A, C], [A, A], [E, F]]), np.array([1.0, 9, 9]))[pos[0]] == 1


def test_weighted_heuristics_by_hand():
    """(a, b): common neighbours c (w 2 + 3, strength 2 + 3 + 5 + 1 = 11) and d (w 1 + 4, strength 10)."""
    g, w = weighted_graph()
    pair = np.array([[A, B]])
    assert score_pairs("wcn", g, pair, weight=w)[0] == 10
    assert score_pairs("wra", g, pair, weight=w)[0] == pytest.approx(5 / 11 + 5 / 10)
    assert score_pairs("waa", g, pair, weight=w)[0] == pytest.approx(5 / math.log(12) + 5 / math.log(11))
    ones = np.ones_like(w)  # unit weights: WCN = 2 CN and WRA = 2 RA, pair by pair
    pairs = np.array([[A, B], [A, E], [D, E], [B, F]])
    assert np.allclose(ranking_scores("wcn", g, pairs, weight=ones), 2 * ranking_scores("cn", g, pairs))
    assert np.allclose(ranking_scores("wra", g, pairs, weight=ones), 2 * ranking_scores("ra", g, pairs))
    with pytest.raises(HeuristicError, match="heuristic waa needs edge weights .* use aa on an unweighted graph"):
        score_pairs("waa", g, pair)


def test_weight_column_is_summed_per_pair_onto_the_training_graph(tmp_path, caplog):
    caplog.set_level("INFO")
    rows = [(*r, "train") for r in WEIGHTED] + [(E, F, 2, "valid"), (F, A, 7, "test")]
    ds = load_dataset(DatasetSpec(write(tmp_path / "w.csv", rows, "src,dst,weight,split")))
    w = ds.weight_for("valid")
    pos, found = ds.graph.edge_positions([A, B, E], [C, D, F])
    assert found.tolist() == [True, True, False] and w[pos[:2]].tolist() == [2, 4]
    assert ds.weight_for("test") is w  # no test graph: test pairs are scored on the training graph
    assert score_pairs("wra", ds.graph, np.array([[A, B]]), weight=w)[0] == pytest.approx(5 / 11 + 5 / 10)
    assert "column 'weight' is summed per pair and read by the weighted heuristics" in caplog.text
    assert "the model reads the unweighted graph" in caplog.text
    scored = score_split(ds, "test", ["original"], ["cn", "waa", "wra"])["original"]
    assert set(scored) == {"cn", "waa", "wra"}
    plain = load_dataset(
        DatasetSpec(write(tmp_path / "w.csv", rows, "src,dst,weight,split"), ignore_columns=("weight",))
    )
    assert plain.weights is None and plain.fingerprint() != ds.fingerprint()


def test_temporal_weights_count_only_rows_before_each_boundary(tmp_path):
    """(1, 2): 1 at t=10 and 2 at t=15 -> 3; (2, 3): 1 at t=20, its repeat at t=210 comes after both boundaries;
    (1, 13): valid, 1 at t=130 in the test graph, its repeat at t=175 is after the test boundary."""
    weight = {(2, 1, 15): 2, (3, 2, 210): 100, (1, 13, 175): 5}
    rows = [(u, v, t, weight.get((u, v, t), 1)) for u, v, t in ROWS]
    ds = load_dataset(DatasetSpec(write(tmp_path / "tw.csv", rows, "src,dst,time,weight"), split=(60, 20, 20)))
    index = {int(u): i for i, u in enumerate(ds.node_ids)}

    def weight_of(split, u, v):
        pos, found = ds.graph_for(split).edge_positions([index[u]], [index[v]])
        return float(ds.weight_for(split)[pos[0]]) if found[0] else None

    assert [weight_of("valid", 1, 2), weight_of("valid", 2, 3), weight_of("valid", 1, 13)] == [3, 1, None]
    assert [weight_of("test", 2, 1), weight_of("test", 3, 2), weight_of("test", 13, 1)] == [3, 1, 1]
    assert "test" not in ds.without_test().weights


@pytest.mark.parametrize(
    "cell, match",
    [
        ("0", r"column 'weight' holds 0 in data row 3; weights must be finite and > 0"),
        ("-2", r"column 'weight' holds -2 in data row 3; weights must be finite and > 0"),
        ("inf", r"column 'weight' holds inf in data row 3"),
        ("heavy", r"column 'weight' holds 'heavy' in data row 3, not a number"),
        ("", r"column 'weight' is empty in data row 3"),
    ],
)
def test_bad_weights_are_refused_naming_the_option_that_drops_them(tmp_path, cell, match):
    rows = [(i, (i + 1) % 30, 1) for i in range(30)]
    rows[2] = (2, 3, cell)
    with pytest.raises(DatasetError, match=match) as err:
        load_dataset(DatasetSpec(write(tmp_path / "w.csv", rows, "src,dst,weight")))
    assert str(err.value).endswith("fix the row, or drop the column with --ignore-columns weight")


def test_other_columns_are_ignored_with_a_log_line_each(tmp_path, caplog):
    caplog.set_level("INFO")
    rows = [(i, (i + 1) % 30, "x", 1.5, 1) for i in range(30)]
    path = write(tmp_path / "c.csv", rows, "src,dst,kind,score,weight")
    ds = load_dataset(DatasetSpec(path, ignore_columns=("weight",)))
    assert ds.weights is None
    assert (
        "c.csv: column(s) 'kind', 'score' ignored: an edge list reads src, dst and optionally split, time, weight"
        in caplog.text
    )
    assert "c.csv: column 'weight' ignored (--ignore-columns)" in caplog.text
    with pytest.raises(
        DatasetError,
        match=r"--ignore-columns wieght: .*c.csv has no column 'wieght' \(columns: src, "
        r"dst, kind, score, weight\)",
    ):
        load_dataset(DatasetSpec(path, ignore_columns=("wieght",)))
    with pytest.raises(DatasetError, match=r"--ignore-columns dst: dst is an endpoint column and cannot be ignored"):
        load_dataset(DatasetSpec(path, ignore_columns=("dst",)))


def test_the_undirected_graph_is_said_so(tmp_path, caplog):
    caplog.set_level("INFO")
    rows = [(i, (i + 1) % 30) for i in range(30)] + [(1, 0), (5, 5)]
    load_dataset(DatasetSpec(write(tmp_path / "u.csv", rows, "src,dst")))
    assert (
        "u.csv: the graph is undirected: (u, v) and (v, u) are one pair and repeated pairs count once (32 rows -> "
        "30 distinct pairs; 1 self-loop row(s) dropped, 1 row(s) repeating a pair)"
    ) in caplog.text
