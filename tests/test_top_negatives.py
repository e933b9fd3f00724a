"""bench.top_negatives, the diagnosis of which shared negatives decide a run's MRR: reciprocal ranks on hand
values, and on a real SEAL run (bench.seal_baseline --scores) the MRR it reads back from the saved logits equals
the one SEAL's own evaluation reported."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.top_negatives import common_neighbours, reciprocal_ranks
from tests.conftest import bipartite_rows, write_edges


def test_reciprocal_ranks_against_shared_negatives_with_ties_halved():
    got = reciprocal_ranks(np.array([3.0, 1.0, -1.0]), np.array([2.0, 1.0, 0.0]))
    # 3 beats all: 1; 1 is below 2 and tied with 1: 1 / (1 + 1 + 0.5); -1 is below all three: 1 / 4
    assert np.allclose(got, [1.0, 0.4, 0.25])


def test_the_paired_difference_with_another_run_on_hand_values(tmp_path):
    from types import SimpleNamespace

    from bench.top_negatives import paired_rows, run_scores
    from common.eval_scores import write_scores

    c = SimpleNamespace(pos_cid=np.array([0, 1]), neg_cid=np.array([2, 3]))
    for run, pos in (("a", [3.0, 1.0]), ("b", [1.0, 1.0])):  # negatives 2 and 0 in both
        write_scores(tmp_path / run / "scores" / "test-original.npz", np.arange(4), np.array([*pos, 2.0, 0.0]), 0)
    # a: reciprocal ranks 1 and 1/2 (MRR 0.75), AUC 1 and 1/2; b: 1/2 and 1/2 (MRR 0.5), AUC 1/2 and 1/2
    (line,) = paired_rows(c, tmp_path / "a", tmp_path / "b", "test")
    assert "MRR +25.00 (SE " in line and "AUC +25.00 (SE " in line
    # b with a prior, as the report's "+ prior" row: logit + w * log1p(h); h = e - 1 on its second positive
    prior = (np.array([0.0, np.e - 1, 0.0, 0.0]), 2.0)
    pos, neg, _ = run_scores(c, tmp_path / "b", "test", prior)
    assert np.allclose(pos, [1.0, 3.0]) and np.allclose(neg, [2.0, 0.0])
    # and with the runner-up at weight 0.5 (the blend's "runner-up x 0.5 + h x 2"): + 0.5 * its score
    partner = (np.array([4.0, 0.0, -2.0, 2.0]), 0.5)
    pos, neg, _ = run_scores(c, tmp_path / "b", "test", prior, partner)
    assert np.allclose(pos, [3.0, 3.0]) and np.allclose(neg, [1.0, 1.0])


def test_common_neighbours_on_a_path_and_a_triangle():
    from common.graph import Graph

    # 0-1, 1-2, 0-2 (a triangle), 2-3: 0 and 1 share 2; 0 and 3 share 2; 2 and 3 share none
    g = Graph.from_edges(np.array([[0, 1], [1, 2], [0, 2], [2, 3]]), 4)
    assert common_neighbours(g, np.array([0, 0, 2]), np.array([1, 3, 3])).tolist() == [1, 1, 0]


def test_the_mrr_read_from_seal_scores_equals_seals_own(tmp_path, capsys):
    from bench import seal_baseline, top_negatives

    csv = write_edges(tmp_path / "shop.csv", bipartite_rows())
    scores = tmp_path / "run" / "seed0" / "scores"
    out = tmp_path / "seal.json"
    argv = ["--dataset", str(csv), "--seconds", "1", "--epochs", "1", "--out", str(out), "--scores", str(scores)]
    assert seal_baseline.main(argv) == 0
    reported = json.loads(out.read_text())
    assert top_negatives.main([str(tmp_path / "run"), "--dataset", str(csv), "--top", "2"]) == 0
    printed = capsys.readouterr().out
    for split in ("valid", "test"):
        line = next(x for x in printed.splitlines() if x.startswith(f"seed0 {split} "))
        assert float(line.rsplit("MRR ", 1)[1]) == pytest.approx(100 * reported[split]["mrr"], abs=0.006)
