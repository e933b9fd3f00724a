"""bench.heads_paired: a run's seeds against a heuristic per positive, paired, split by known and new heads."""

from __future__ import annotations

import numpy as np
import pytest

from bench.heads_paired import compare, rows
from tests.test_bench_blend_priors import shop
from tests.test_typed_search import typed_set


def test_rows_give_each_segment_its_paired_difference_and_standard_error():
    model = {"mrr": np.array([1.0, 0.5, 0.25, 1.0]), "hits@10": np.ones(4)}
    heuristic = {"mrr": np.full(4, 0.5), "hits@10": np.array([1.0, 0.0, 1.0, 1.0])}
    known = np.array([True, True, False, False])
    got = rows("h", model, heuristic, known)
    # all: differences .5, 0, -.25, .5: mean .1875, SD .375, SE .375 / 2; known: .5, 0; new: -.25, .5
    assert got[0] == "| h | all (4) | 50.00 / 75.00 | 68.75 / 100.00 | +18.75 ± 18.75 | +25.00 ± 25.00 |"
    assert got[1] == "| h | known (2) | 50.00 / 50.00 | 75.00 / 100.00 | +25.00 ± 25.00 | +50.00 ± 50.00 |"
    assert got[2] == "| h | new (2) | 50.00 / 100.00 | 62.50 / 100.00 | +12.50 ± 37.50 | +0.00 ± 0.00 |"


def test_a_segment_without_pairs_has_no_row():
    one = {"mrr": np.array([1.0]), "hits@10": np.array([1.0])}
    assert [r.split(" | ")[1] for r in rows("h", one, one, np.array([False]))] == ["all (1)", "new (1)"]


def test_compare_ranks_the_seeds_and_the_heuristic_on_the_validation_set(tmp_path):
    view = shop().without_test()
    manifest = typed_set(shop(), tmp_path)
    flat = (np.arange(4), np.zeros(4, np.float32))  # each positive ties its corruption: RR 2/3 (ties averaged)
    sharp = (np.arange(4), np.array([5, 5, 0, 0], np.float32))  # cids 0, 1 the positives: each first, RR 1
    got = compare(view, manifest, "valid", [flat, sharp], ["l3"])
    # both users have training links: no new segment. l3 puts each positive first (2 walks against 0); the seeds
    # average to (2/3 + 1) / 2 per positive; Hits@10 is 1 everywhere (2 candidates)
    assert got == [
        "| l3 | all (2) | 100.00 / 100.00 | 83.33 / 100.00 | -16.67 ± 0.00 | +0.00 ± 0.00 |",
        "| l3 | known (2) | 100.00 / 100.00 | 83.33 / 100.00 | -16.67 ± 0.00 | +0.00 ± 0.00 |",
    ]


def test_a_runs_blend_prior_is_added_to_each_seed_before_the_comparison(tmp_path):
    view = shop().without_test()
    manifest = typed_set(shop(), tmp_path)
    flat = (np.arange(4), np.zeros(4, np.float32))
    # + 1 x log1p(walks): log1p(2) for each positive, 0 for its corruption: both first, level with l3 alone
    got = compare(view, manifest, "valid", [flat], ["l3"], prior=("l3 prior", 1.0))
    assert got[0] == "| l3 | all (2) | 100.00 / 100.00 | 100.00 / 100.00 | +0.00 ± 0.00 | +0.00 ± 0.00 |"


def test_a_run_folder_without_seeds_and_a_bad_prior_are_one_line_errors(tmp_path):
    from bench.heads_paired import main

    with pytest.raises(SystemExit, match=r"--run .*: no seed\*/scores/ folders there"):
        main(["--data", "x.csv", "--run", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"--prior 'x:w': give NAME:W"):
        main(["--data", "x.csv", "--run", str(tmp_path), "--prior", "x:w"])
