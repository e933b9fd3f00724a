"""`--preset auto`'s heuristic blend: exact blends, one decision per run on hand-built validation values, the
margin that keeps the model alone, and a decision that reads validation files only."""

from __future__ import annotations

import numpy as np
import pytest

from common.eval_scores import write_scores
from pipelines.auto import blend
from pipelines.auto.signal import rank_values

POS, NEG = np.array([0, 1]), np.array([2, 3, 4])  # cids: two positives ranked against three shared negatives


def values_of(cid, scores):
    table = np.empty(cid.max() + 1)
    table[cid] = scores
    return rank_values(table[POS], table[NEG])


def test_blend_is_the_logit_plus_the_weighted_log_heuristic():
    logit, h = np.array([0.5, -1.0]), np.array([3.0, 0.0])
    assert np.allclose(blend.blend(logit, h, 2.0), [0.5 + 2 * np.log(4), -1.0])
    assert blend.blend(logit, None, 0.0) is logit  # the model alone, untouched


def test_one_decision_for_the_run_from_every_seed_and_it_must_clear_the_margin():
    cid = np.arange(5)
    flat = (cid, np.zeros(5, dtype=np.float32))  # a model that cannot tell: every pair ties
    ra = np.array([2.0, 3.0, 0.0, 1.0, 0.0])  # RA ranks both positives first
    heur = {"cn": np.zeros(5), "aa": np.zeros(5), "ra": ra}
    got = blend.decide({"0": flat, "1": flat}, heur, values_of, "mrr", 2.0)
    # alone: each positive ties the 3 negatives, rank 2.5, RR 0.4; with RA at any weight: RR 1 for both, every
    # seed alike, so the paired difference has no noise; the smallest weight of the ties wins
    assert (got.heuristic, got.weight) == ("ra", 0.25) and got.decision["means"]["none"] == pytest.approx(0.4)
    assert got.decision["difference"] == pytest.approx(0.6) and got.decision["se"] == 0.0
    good = (cid, np.array([3.0, 2.0, 1.0, 0.0, -1.0], dtype=np.float32))  # the model alone is already perfect
    kept = blend.decide({"0": good}, heur, values_of, "mrr", 2.0)
    assert (kept.heuristic, kept.weight) == ("none", 0.0)
    assert kept.row_name("PENCIL w/o features") == "PENCIL w/o features + prior (none chosen)"
    assert got.row_name("PENCIL w/o features") == "PENCIL w/o features + RA prior"


def test_a_gain_within_the_noise_keeps_the_model_alone():
    # RA lifts one positive of four from the bottom to the top: the mean gains 0.1875, its SE is as large
    pos, neg = np.array([0, 1, 2, 3]), np.array([4, 5, 6])

    def four(cid, scores):
        table = np.empty(cid.max() + 1)
        table[cid] = scores
        return rank_values(table[pos], table[neg])

    cid = np.arange(7)
    heur = {"cn": np.zeros(7), "aa": np.zeros(7), "ra": np.array([3.0, 0, 0, 0, 0, 0, 0])}
    seeds = {"0": (cid, np.array([0, 1, 1, 1, 0.5, 0.5, 0.5], dtype=np.float32))}
    got = blend.decide(seeds, heur, four, "mrr", 2.0)
    assert got.heuristic == "none" and got.decision["difference"] == pytest.approx(0.1875) == pytest.approx(
        got.decision["se"]
    )
    assert blend.decide(seeds, heur, four, "mrr", 0.0).key == "ra x 0.5"  # no margin: the mean decides


def test_the_decision_reads_the_validation_files_only(tmp_path):
    runs = {s: tmp_path / f"seed{s}" for s in (0, 1)}
    for s, d in runs.items():
        write_scores(d / "scores" / "valid-original.npz", np.arange(5), np.arange(5.0) + s, 3)
        (d / "scores" / "test-original.npz").write_bytes(b"not scores: a reader of test would fail")
    got = blend.valid_logits(runs, "original")
    assert sorted(got) == ["0", "1"] and np.array_equal(got["1"][1], np.arange(5.0) + 1)


def tie_values(mrr_ra, auc_ra) -> dict:
    half = np.full(4, 0.5)
    return {"mrr": {"none": half, "ra x 1": np.array(mrr_ra)}, "auc": {"none": half, "ra x 1": np.array(auc_ra)}}


def test_a_tie_on_mrr_is_broken_by_auc_beyond_the_margin():
    chosen = {"choice": "none", "reason": "the default is the best", "means": {}}
    # the same MRR on every positive (difference 0, SE 0: a tie), AUC 0.4 better on each: SE 0, so it replaces
    got = blend.break_grid_tie(chosen, tie_values([0.5] * 4, [0.9] * 4), "mrr", 2.0)
    assert got["choice"] == "ra x 1" and got["tie_break"]["metric"] == "auc"
    assert got["tie_break"]["difference"] == pytest.approx(0.4) and "ties with none on mrr" in got["reason"]
    # AUC better on one positive of four: +0.1, SE std(0.4, 0, 0, 0) / 2 = 0.1, within 2 SE: the choice stays
    kept = blend.break_grid_tie(chosen, tie_values([0.5] * 4, [0.9, 0.5, 0.5, 0.5]), "mrr", 2.0)
    assert kept["choice"] == "none" and kept["tie_break"]["se"] == pytest.approx(0.1)
    # MRR 0.5 better with SE 0: not a tie, nothing to break
    assert blend.break_grid_tie(chosen, tie_values([1.0] * 4, [0.9] * 4), "mrr", 2.0) == chosen
    # deciding on AUC, MRR breaks the tie: the same rule with the metrics swapped
    swapped = tie_values([0.9] * 4, [0.5] * 4)
    assert blend.break_grid_tie(chosen, swapped, "auc", 2.0)["choice"] == "ra x 1"


def test_the_partner_is_one_more_column_of_the_grid_and_its_keys_and_rows_say_so():
    assert blend.grid(False) == [(0.0, h, w) for h, w in blend.GRID]
    assert len(blend.grid(True)) == (1 + len(blend.PARTNER_WEIGHTS)) * len(blend.GRID)
    assert blend.key("none", 0.0, 0.5) == "runner-up x 0.5" and blend.key("ra", 8.0, 1.0) == "runner-up x 1 + ra x 8"
    logit, partner = np.array([0.5, -1.0]), np.array([2.0, 4.0])
    assert np.allclose(blend.with_partner(logit, partner, 0.5), [1.5, 1.0])
    assert blend.with_partner(logit, None, 0.0) is logit
    both = blend.Blend("ra", 8.0, "mrr", {}, "deep-d2n10", 1.0)
    assert (
        both.row_name("PENCIL") == "PENCIL + runner-up deep-d2n10 + RA prior" and both.key == "runner-up x 1 + ra x 8"
    )
    assert blend.Blend("none", 0.0, "mrr", {}, "deep-d2n10", 0.25).row_name("PENCIL") == "PENCIL + runner-up deep-d2n10"
    unused = blend.Blend("ra", 1.0, "mrr", {}, "deep-d2n10", 0.0)  # a partner the decision did not take
    assert unused.row_name("PENCIL") == "PENCIL + RA prior" and unused.to_dict()["partner"] == ""


def test_a_partner_that_ranks_what_the_model_cannot_is_taken_at_its_smallest_weight():
    cid = np.arange(5)
    flat = (cid, np.zeros(5, dtype=np.float32))  # every pair ties: RR 0.4 for both positives
    heur = {h: np.zeros(5) for h in blend.HEURISTICS}  # no heuristic tells them apart either
    partner = blend.partner_table(cid[::-1], np.array([-1.0, 0.0, 1.0, 2.0, 3.0]))  # cid 0 scores 3, cid 4 -1
    got = blend.decide({"0": flat, "1": flat}, heur, values_of, "mrr", 2.0, ("deep-d2n10", partner))
    # with the partner at any weight both positives rank first, on every seed alike: difference 0.6, SE 0
    assert (got.partner, got.partner_weight, got.heuristic) == ("deep-d2n10", 0.25, "none")
    assert got.decision["difference"] == pytest.approx(0.6) and got.decision["means"]["none"] == pytest.approx(0.4)
    assert (
        got.key == "runner-up x 0.25"
        and got.row_name("PENCIL w/o features") == "PENCIL w/o features + runner-up deep-d2n10"
    )
    # without a partner the grid is the heuristics' alone, and nothing beats the model
    assert blend.decide({"0": flat}, heur, values_of, "mrr", 2.0).key == "none"


def test_a_partner_with_a_pair_missing_is_nan_there():
    table = blend.partner_table(np.array([0, 2]), np.array([1.0, 2.0]))
    assert table[0] == 1.0 and table[2] == 2.0 and np.isnan(table[1])
