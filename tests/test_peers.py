"""bench.peers, the default against SEAL on the same test split: the paired difference and its SE on hand
values, where the bootstrap's draws cannot move the difference and the SE is the seeds' spread alone."""

from __future__ import annotations

import numpy as np

from bench.peers import paired_difference
from pipelines.auto.signal import Signal

NEG = np.array([0.0, 1.0, 2.0])


def test_identical_runs_differ_by_zero_with_zero_se():
    a = Signal(np.array([3.0, 0.5]), NEG)
    got = paired_difference([a, a], a, draws=50)
    assert got == {"mrr": (0.0, 0.0), "auc": (0.0, 0.0)}


def test_the_se_is_the_seeds_spread_when_every_draw_gives_the_same_difference():
    top = Signal(np.array([5.0, 6.0]), NEG)  # above every negative: reciprocal rank 1, AUC 1, on any draw
    bottom = Signal(np.array([-5.0, -6.0]), NEG)  # below all 3 drawn negatives: 1 / 4, AUC 0, on any draw
    got = paired_difference([top, bottom], bottom, draws=50)
    # seed differences 3/4 and 0: mean 3/8; spread var([3/4, 0], ddof=1) / 2 = (9/32) / 2, SE = 3/8
    assert np.allclose(got["mrr"], (0.375, 0.375))
    # AUC: 1 and 0: mean 1/2, SE 1/2
    assert np.allclose(got["auc"], (0.5, 0.5))


def test_one_run_against_another_has_the_bootstrap_se_only():
    a = Signal(np.array([1.5, 0.5, 2.5, -1.0]), NEG)
    b = Signal(np.array([0.5, 1.5, -1.0, 2.5]), NEG)
    (d, se) = paired_difference([a], b, draws=400)["mrr"]
    # the same ranks, swapped between positives: no mean difference, but the draws move it
    assert abs(d) < 1e-12 and se > 0.0
