"""Weighted heuristics: reachable by name from `pencil heuristics`, shown there by default on
a weighted edge list as in the run report, and safe from overflow (weights near 1e308 made every score inf, one
value for all, AUC 50.00, without a word)."""

from __future__ import annotations

import json
import math
from decimal import Decimal, getcontext
from pathlib import Path

import numpy as np
import pytest

from common.datasets import DatasetError, DatasetSpec, load_dataset
from common.graph import Graph, edge_weights
from common.heuristics import score_pairs
from pipelines.heuristics import main

# a 6-cycle with two chords: pairs with common neighbours of different weights and strengths
EDGES = np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [5, 0], [0, 3], [1, 4]])
RAW = np.array([0.9, 0.5, 0.7, 0.6, 0.95, 0.55, 0.8, 0.65])
PAIRS = np.array([[0, 2], [0, 4], [1, 3], [1, 5], [2, 4], [2, 5], [3, 5]])


def graph_and_weights(scale: float):
    g = Graph.from_edges(EDGES, num_nodes=6)
    return g, edge_weights(g, EDGES, RAW * scale)


def reference_waa(scale: float) -> list[float]:
    """WAA in 60-digit decimals: no float overflows there."""
    getcontext().prec = 60
    w = {}
    for (a, b), x in zip(EDGES.tolist(), RAW.tolist(), strict=True):
        w[a, b] = w[b, a] = Decimal(x) * Decimal(scale)
    nbrs = {v: {b for (a, b) in w if a == v} for v in range(6)}
    s = {v: sum(w[v, z] for z in nbrs[v]) for v in range(6)}
    return [float(sum((w[u, z] + w[v, z]) / (1 + s[z]).ln() for z in nbrs[u] & nbrs[v])) for u, v in PAIRS.tolist()]


def test_weights_near_the_largest_float_keep_every_ranking():
    huge, small = 2.0**1023, 2.0**-20  # weights of 4.5e307 to 8.5e307: a node's three sum past float64
    g, big = graph_and_weights(huge)
    _, tiny = graph_and_weights(small)
    for name in ("wcn", "wra"):
        scores = score_pairs(name, g, PAIRS, weight=big)
        assert np.isfinite(scores).all() and len(np.unique(scores)) > 1
        # a power of two moves exponent bits only: the same order, the same ties, as far smaller weights
        assert np.array_equal(
            np.argsort(scores, kind="stable"), np.argsort(score_pairs(name, g, PAIRS, weight=tiny), kind="stable")
        )
    waa = score_pairs("waa", g, PAIRS, weight=big)
    ref = reference_waa(huge)  # WAA is not scale-free: its values are the exact ones over one power of two
    assert np.allclose(waa / waa.max(), np.array(ref) / max(ref), rtol=1e-12, atol=0)
    # weights that do not overflow are computed as they always were: the values themselves, bit for bit
    _, ordinary = graph_and_weights(1.0)
    assert score_pairs("waa", g, PAIRS, weight=ordinary).tolist() == pytest.approx(reference_waa(1.0), rel=1e-12)
    assert math.isfinite(score_pairs("wcn", g, PAIRS, weight=ordinary).max())


def test_a_pair_whose_repeats_sum_past_the_largest_float_is_refused_in_one_line(tmp_path):
    csv = tmp_path / "w.csv"
    csv.write_text(
        "src,dst,weight\n"
        + "".join(f"{a},{b},1e308\n" for a, b in [(0, 1), (1, 0), (1, 2)] + [(i, i + 1) for i in range(2, 40)])
    )
    with pytest.raises(DatasetError, match=r"column 'weight': the rows of one pair sum past the largest float"):
        load_dataset(DatasetSpec(str(csv)))


def _edges(path: Path, header: str, rows) -> str:
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return str(path)


def _ring(n: int = 40):
    rng = np.random.default_rng(0)
    return [(i, (i + k) % n) for i in range(n) for k in (1, 2, 5)], rng.uniform(1, 9, 3 * n).round(2)


def test_pencil_heuristics_shows_the_weighted_rows_and_takes_them_by_name(tmp_path, capsys):
    pairs, w = _ring()
    weighted = _edges(tmp_path / "w.csv", "src,dst,weight", [(a, b, x) for (a, b), x in zip(pairs, w, strict=True)])
    assert main(["--dataset", weighted, "--out", str(tmp_path / "a.json")]) == 0
    table = capsys.readouterr().out
    assert [line.split()[1] for line in table.splitlines()[2:]] == ["CN", "AA", "RA", "WCN", "WAA", "WRA"]
    assert main(["--dataset", weighted, "--heuristics", "wcn,wra", "--out", str(tmp_path / "b.json")]) == 0
    res = json.loads((tmp_path / "b.json").read_text())["results"]["original"]
    assert (
        list(res) == ["wcn", "wra"]
        and res["wcn"] == json.loads((tmp_path / "a.json").read_text())["results"]["original"]["wcn"]
    )


@pytest.mark.parametrize(
    "name, why", [("wcn", "has no weight column; use cn, or add a column 'weight'"), ("rpa", "needs a temporal split")]
)
def test_a_heuristic_the_graph_cannot_feed_is_refused_in_one_line(tmp_path, capsys, name, why):
    plain = _edges(tmp_path / "p.csv", "src,dst", _ring()[0])
    with pytest.raises(SystemExit) as exc:
        main(["--dataset", plain, "--heuristics", f"cn,{name}", "--out", str(tmp_path / "x.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and f"--heuristics {name}: " in err[0] and why in err[0]
    assert not (tmp_path / "x.json").exists()


def test_all_on_a_temporal_split_adds_edgebank_and_recent_pa(tmp_path):
    rows = [(a, b, t) for t, (a, b) in enumerate(_ring()[0])]
    temporal = _edges(tmp_path / "t.csv", "src,dst,time", rows)
    assert main(["--dataset", temporal, "--heuristics", "all", "--out", str(tmp_path / "t.json")]) == 0
    res = json.loads((tmp_path / "t.json").read_text())["results"]["original"]
    assert list(res) == ["cn", "aa", "ra", "katz", "spd", "pr", "edgebank", "rpa"]
