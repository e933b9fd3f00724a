"""Ranking metrics: hand-computed ranks with ties, protocol dispatch, parity with ogb's Evaluator;
AUC / AP: hand-computed values, a slow pairwise reference and sklearn."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from common.metrics import (
    F32_TIE_RTOL,
    METRIC_KEYS,
    RANK_KEYS,
    MetricsError,
    as_percent,
    classification_metrics,
    evaluate,
    format_table,
    ogb_hits,
    rank_against_own,
    rank_against_shared,
    ranking_metrics,
    relation_metrics,
    unique_pairs,
)


# ---------------------------------------------------------------------------- ranks
def test_tie_averaged_rank_hand_example():
    negs = np.array([0.9, 0.5, 0.5, 0.1])
    # one neg strictly above, three at least equal -> 1 + (1 + 3) / 2
    assert rank_against_shared(np.array([0.5]), negs).tolist() == [3.0]
    assert rank_against_own(np.array([0.5]), negs[None, :]).tolist() == [3.0]


def test_shared_ranks_several_positives():
    negs = np.array([0.9, 0.5, 0.5, 0.1])
    ranks = rank_against_shared(np.array([1.0, 0.5, 0.0, 0.9]), negs)
    # 1.0 beats all; 0.0 loses to all; 0.9 ties the top negative -> 1 + (0 + 1) / 2
    assert ranks.tolist() == [1.0, 3.0, 5.0, 1.5]
    assert ranks.dtype == np.float64


def test_own_equals_shared_when_rows_repeat_the_shared_negatives():
    rng = np.random.default_rng(0)
    pos = rng.integers(0, 10, 200).astype(float)  # small integer range -> many ties
    neg = rng.integers(0, 10, 50).astype(float)
    own = rank_against_own(pos, np.tile(neg, (len(pos), 1)))
    np.testing.assert_array_equal(own, rank_against_shared(pos, neg))


def test_own_ranks_use_each_positives_row():
    pos = np.array([0.5, 0.5])
    neg = np.array([[0.1, 0.2], [0.7, 0.5]])
    assert rank_against_own(pos, neg).tolist() == [1.0, 2.5]


def test_ranking_metrics_values():
    m = ranking_metrics(np.array([1.0, 2.0, 4.0, 20.0]))
    assert set(m) == set(RANK_KEYS)
    assert m["mrr"] == pytest.approx((1 + 0.5 + 0.25 + 0.05) / 4)
    assert (m["hits@1"], m["hits@3"], m["hits@10"], m["hits@20"], m["hits@100"]) == (0.25, 0.5, 0.75, 1.0, 1.0)


def test_bad_inputs_raise():
    with pytest.raises(MetricsError, match="NaN"):
        rank_against_shared(np.array([np.nan]), np.array([1.0]))
    with pytest.raises(MetricsError, match=r"\(3, K\)"):
        rank_against_own(np.zeros(3), np.zeros((2, 4)))
    with pytest.raises(MetricsError, match="unknown protocol"):
        evaluate("planetoid", np.zeros(2), np.zeros(3))


# ---------------------------------------------------------------------------- OGB semantics
@pytest.fixture(scope="module")
def Evaluator():
    """ogb's Evaluator class, loaded from its file: `import ogb.linkproppred` also imports
    torch_geometric and the dataset classes, which costs many seconds and is not under test."""
    pytest.importorskip("torch")
    spec = importlib.util.find_spec("ogb")
    if spec is None:
        pytest.skip("ogb is not installed")
    path = Path(spec.origin).parent / "linkproppred" / "evaluate.py"
    mod_spec = importlib.util.spec_from_file_location("_ogb_link_evaluate", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module.Evaluator


def test_ogb_hits_is_strict_and_handles_few_negatives():
    neg = np.array([5.0, 4.0, 3.0, 2.0, 1.0])
    # K=2: 2nd best negative is 4.0; a positive equal to it does not count
    assert ogb_hits(np.array([4.0, 4.5, 6.0]), neg, 2) == pytest.approx(2 / 3)
    assert ogb_hits(np.array([0.0]), neg, 10) == 1.0  # fewer than K negatives: ogb returns 1.0


def test_ogb_hits_with_exactly_k_negatives_ranks_against_the_worst():
    """Q == K: the K-th best negative is the lowest one (1.0), not the "fewer than K" shortcut of 1.0.
    By hand: 0.5 and 1.0 are not strictly above 1.0, 1.5 and 4.0 are: 2 of 4."""
    neg = np.array([3.0, 1.0, 2.0])
    assert ogb_hits(np.array([0.5, 1.0, 1.5, 4.0]), neg, 3) == 0.5
    assert ogb_hits(np.array([0.5, 1.0, 1.5, 4.0]), neg, 4) == 1.0  # one fewer negative than K


def test_evaluate_against_hand_computed_ranks():
    # Shared negatives, no ties except 0.7: ranks by hand (1 + #neg above + #neg tied / 2 ... tie-averaged):
    # 0.95 -> 1; 0.6 -> 3 (0.9, 0.7 above); 0.7 -> 1 + (1 + 2) / 2 = 2.5; 0.05 -> 6 (all five above)
    neg = np.array([0.9, 0.7, 0.5, 0.3, 0.1])
    pos = np.array([0.95, 0.6, 0.7, 0.05])
    mrr = (1 + 1 / 3 + 1 / 2.5 + 1 / 6) / 4  # = 0.475
    # AUC: pairs won 5 + 3 + 3.5 (0.7 ties 0.7) + 0 of 20. AP, thresholds down: 0.95 (tp 1, fp 0), 0.7 (2, 2),
    # 0.6 (3, 2), 0.05 (4, 5), each adding 1/4 recall at its precision.
    ap = (1 + 2 / 4 + 3 / 5 + 4 / 9) / 4
    want = {
        "mrr": mrr,
        "hits@1": 0.25,
        "hits@3": 0.75,
        "hits@10": 1.0,
        "hits@20": 1.0,
        "hits@50": 1.0,
        "hits@100": 1.0,
        "auc": 11.5 / 20,
        "ap": ap,
    }
    out = evaluate("original", pos, neg)
    assert tuple(out) == METRIC_KEYS and all(isinstance(v, float) for v in out.values())
    assert out == pytest.approx(want) and out["mrr"] == pytest.approx(0.475)
    # ogb rule, shared negatives: Hits@K = share of positives strictly above the K-th best negative
    # (K=1: above 0.9 -> 1 of 4; K=3: above 0.5 -> 3 of 4; K >= 10 > Q=5 negatives -> 1.0); MRR from ranks.
    assert evaluate("ogb", pos, neg) == pytest.approx(want)
    # Per-positive negatives (HeaRT, citation2): positive 0.5 against [0.1, 0.2] -> rank 1,
    # against [0.7, 0.5] -> 1 + (1 + 2) / 2 = 2.5; MRR (1 + 0.4) / 2 = 0.7. AUC/AP pool the four negatives:
    # each 0.5 beats 0.1 and 0.2 and ties 0.5 -> 5 of 8; one threshold 0.5 holds both positives, tp 2, fp 2.
    own = {
        "mrr": 0.7,
        "hits@1": 0.5,
        "hits@3": 1.0,
        "hits@10": 1.0,
        "hits@20": 1.0,
        "hits@50": 1.0,
        "hits@100": 1.0,
        "auc": 5 / 8,
        "ap": 0.5,
    }
    for protocol in ("heart", "ogb"):
        assert evaluate(protocol, np.array([0.5, 0.5]), np.array([[0.1, 0.2], [0.7, 0.5]])) == pytest.approx(own)


def test_evaluate_random_scores_give_the_random_baseline():
    # A scorer that knows nothing ranks each positive uniformly among Q+1 places: MRR = H(Q+1) / (Q+1).
    rng = np.random.default_rng(1)
    q = 99
    neg = np.arange(1, q + 1) / (q + 1)  # evenly spaced: a uniform positive falls in each of Q+1 gaps equally
    out = evaluate("original", rng.random(50_000), neg)
    harmonic = sum(1 / r for r in range(1, q + 2)) / (q + 1)
    assert out["mrr"] == pytest.approx(harmonic, rel=0.05)
    assert out["hits@10"] == pytest.approx(10 / (q + 1), abs=0.01)


def test_evaluate_hits_differ_between_rank_rule_and_ogb_rule_on_ties():
    pos, neg = np.array([1.0]), np.array([1.0, 0.0])
    assert evaluate("original", pos, neg)["hits@1"] == 0.0  # rank 1.5
    assert evaluate("ogb", pos, neg)["hits@1"] == 0.0  # not strictly above the best negative
    assert evaluate("ogb", pos, neg)["hits@3"] == 1.0  # fewer than 3 negatives


@pytest.mark.parametrize("name", ["ogbl-collab", "ogbl-ppa", "ogbl-ddi"])
def test_hits_match_ogb_evaluator(name, Evaluator):
    import torch

    ev = Evaluator(name)
    rng = np.random.default_rng(2)
    pos = np.round(rng.random(1000), 2)  # rounding creates ties with the negatives
    neg = np.round(rng.random(3000), 2)
    want = ev.eval({"y_pred_pos": torch.from_numpy(pos), "y_pred_neg": torch.from_numpy(neg)})[f"hits@{ev.K}"]
    assert evaluate("ogb", torch.from_numpy(pos), torch.from_numpy(neg))[f"hits@{ev.K}"] == pytest.approx(want)


def test_mrr_matches_ogb_evaluator_citation2(Evaluator):
    import torch

    rng = np.random.default_rng(3)
    pos = np.round(rng.random(500), 2)
    neg = np.round(rng.random((500, 1000)), 2)
    res = Evaluator("ogbl-citation2").eval({"y_pred_pos": torch.from_numpy(pos), "y_pred_neg": torch.from_numpy(neg)})
    ours = evaluate("ogb", pos, neg)
    assert ours["mrr"] == pytest.approx(float(res["mrr_list"].mean()), rel=1e-6)
    for k in (1, 3, 10):
        assert ours[f"hits@{k}"] == pytest.approx(float(res[f"hits@{k}_list"].mean()))


def test_torch_bf16_scores_accepted():
    torch = pytest.importorskip("torch")
    pos = torch.tensor([0.5, 0.25], dtype=torch.bfloat16)
    neg = torch.tensor([0.75, 0.5, 0.125], dtype=torch.bfloat16)
    assert rank_against_shared(pos, neg).tolist() == [2.5, 3.0]


def test_citation2_sized_input_completes():
    rng = np.random.default_rng(4)
    pos = rng.random(86_000, dtype=np.float32)
    neg = rng.random((86_000, 1000), dtype=np.float32)
    out = evaluate("ogb", pos, neg)
    assert out["auc"] == pytest.approx(0.5, abs=0.01)  # random scores: pooled AUC at chance
    # Exact: the tie-averaged ranks written out, float32 scores within F32_TIE_RTOL (here < 1: 1e-5) tying, in 8 chunks.
    tol = F32_TIE_RTOL
    ranks = np.concatenate(
        [
            1 + (n > p[:, None] + tol).sum(1) + 0.5 * (abs(n - p[:, None]) <= tol).sum(1)
            for p, n in zip(np.array_split(pos.astype(np.float64), 8), np.array_split(neg, 8))
        ]
    )
    assert out["mrr"] == pytest.approx(np.mean(1 / ranks), rel=1e-9)
    assert out["hits@10"] == pytest.approx(np.mean(ranks <= 10), abs=1e-12)
    # Random scores: the rank is uniform on 1..1001, so MRR = H(1001) / 1001 within 5 standard errors.
    from tests.chance import expected_random_mrr

    rr = 1 / np.arange(1, 1002)
    assert abs(out["mrr"] - expected_random_mrr(1000)) < 5 * rr.std() / np.sqrt(len(pos))
    shared_neg = neg[:100].ravel()  # 100k shared negatives: OGB's strict rule against the 50th best
    shared = evaluate("ogb", pos, shared_neg)
    assert (
        shared["hits@50"] == np.mean(pos.astype(np.float64) - tol > np.sort(shared_neg)[-50]) and shared["hits@50"] > 0
    )


# ---------------------------------------------------------------------------- AUC and AP
def slow_auc_ap(pos, neg):
    """O(P * Q) reference from the definitions: AUC = share of (pos, neg) pairs won, ties 1/2; AP = sum over
    distinct thresholds t (descending) of recall gained at t times precision of everything scored >= t."""
    pos, neg = [float(v) for v in np.ravel(pos)], [float(v) for v in np.ravel(neg)]
    won = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    ap, seen = 0.0, 0
    for t in sorted(set(pos) | set(neg), reverse=True):
        tp = sum(p >= t for p in pos)
        fp = sum(n >= t for n in neg)
        ap += (tp - seen) / len(pos) * tp / (tp + fp)
        seen = tp
    return won / (len(pos) * len(neg)), ap


@pytest.mark.parametrize(
    "pos, neg, auc, ap",
    [
        # 0.9 beats all 3; 0.5 ties 0.5 and beats 0.3, 0.1 -> 5.5 of 6. Thresholds 0.9 (tp 1, fp 0), 0.5 (2, 1).
        ([0.9, 0.5], [0.5, 0.1, 0.3], 11 / 12, 0.5 * 1 + 0.5 * 2 / 3),
        # all scores equal: AUC 1/2, AP = the positive share 2/5 (one threshold holds everything)
        ([1.0, 1.0], [1.0, 1.0, 1.0], 0.5, 0.4),
        # a single positive: beats 0.1 and 0.0, ties 0.4 -> 2.5 of 4; at 0.4 tp 1, fp 2 -> AP 1/3
        ([0.4], [0.9, 0.4, 0.1, 0.0], 0.625, 1 / 3),
        ([3.0, 2.0], [1.0, 0.0], 1.0, 1.0),  # perfect separation
        ([0.0], [1.0, 2.0], 0.0, 1 / 3),  # every negative above: AP = 1 / (all items)
    ],
)
def test_auc_ap_hand_computed(pos, neg, auc, ap):
    out = classification_metrics(np.array(pos), np.array(neg))
    assert out == pytest.approx({"auc": auc, "ap": ap}, abs=1e-15)
    assert slow_auc_ap(pos, neg) == pytest.approx((auc, ap), abs=1e-15)  # the reference agrees by hand too


def test_auc_ap_pool_per_positive_negatives():
    # HeaRT shape (P, K): the pool is all four negatives [0.1, 0.6, 0.3, 0.2]. AUC: 0.5 beats 3, 0.2 beats 0.1
    # and ties 0.2 -> 4.5 of 8. AP: 0.5 (tp 1, fp 1) -> 1/2 * 1/2; 0.2 (tp 2, fp 3) -> 1/2 * 2/5.
    out = evaluate("heart", np.array([0.5, 0.2]), np.array([[0.1, 0.6], [0.3, 0.2]]))
    assert (out["auc"], out["ap"]) == pytest.approx((4.5 / 8, 0.25 + 0.2), abs=1e-15)


@pytest.mark.parametrize("seed", range(6))
def test_auc_ap_match_slow_reference_and_sklearn(seed):
    rng = np.random.default_rng(seed)
    p, q = int(rng.integers(1, 40)), int(rng.integers(1, 60))
    levels = [3, 20, 10**9][seed % 3]  # few levels -> many ties (incl. pos/neg ties); 10**9 -> almost none
    pos = rng.integers(0, levels, p) / levels
    neg = rng.integers(0, levels, q) / levels
    out = classification_metrics(pos, neg)
    assert (out["auc"], out["ap"]) == pytest.approx(slow_auc_ap(pos, neg), rel=1e-12)
    sk = pytest.importorskip("sklearn.metrics")
    y, s = np.r_[np.ones(p), np.zeros(q)], np.r_[pos, neg]
    assert out["auc"] == pytest.approx(sk.roc_auc_score(y, s), rel=1e-12)
    assert out["ap"] == pytest.approx(sk.average_precision_score(y, s), rel=1e-12)


def test_auc_ap_mixed_dtypes_and_torch():
    # integer heuristic counts vs float scores compare in one dtype; bf16 tensors are accepted
    assert classification_metrics(np.array([2, 1]), np.array([1.5, 0.5])) == {"auc": 0.75, "ap": pytest.approx(5 / 6)}
    torch = pytest.importorskip("torch")
    out = classification_metrics(torch.tensor([0.5], dtype=torch.bfloat16), torch.tensor([0.25, 0.75]))
    assert out == {"auc": 0.5, "ap": 0.5}


def test_auc_ap_bad_inputs():
    with pytest.raises(MetricsError, match="at least one negative"):
        classification_metrics(np.array([1.0]), np.zeros(0))
    with pytest.raises(MetricsError, match="NaN"):
        classification_metrics(np.array([1.0]), np.array([np.nan]))
    with pytest.raises(MetricsError, match="empty"):
        classification_metrics(np.zeros(0), np.array([1.0]))


# ---------------------------------------------------------------------------- dedup + formatting
def test_unique_pairs_canonicalises_and_inverts():
    pairs = np.array([[[3, 1], [1, 3]], [[2, 2], [0, 5]]])
    uniq, inv = unique_pairs(pairs)
    assert uniq.tolist() == [[0, 5], [1, 3], [2, 2]]
    assert inv.shape == (2, 2)
    np.testing.assert_array_equal(uniq[inv], np.sort(pairs, axis=-1))


def test_unique_pairs_beyond_three_billion_node_ids():
    """Ids past 3e9: lo * n + hi would overflow int64 (2^32 * 2^33 = 2^65), so pairs are deduplicated as rows.
    Expected by hand: three distinct pairs in sorted order, each input row pointing at its own."""
    a, b = 2**32, 2**33
    pairs = np.array([[b + 1, a], [a, b + 1], [5, b], [b, b], [b, 5]])
    uniq, inv = unique_pairs(pairs)
    assert uniq.tolist() == [[5, b], [a, b + 1], [b, b]]
    assert inv.tolist() == [1, 1, 0, 2, 0]


def test_unique_pairs_scatter_back_random():
    rng = np.random.default_rng(5)
    pairs = rng.integers(0, 20, (7, 30, 2))
    uniq, inv = unique_pairs(pairs)
    assert len(np.unique(uniq, axis=0)) == len(uniq)
    assert np.all(uniq[:, 0] <= uniq[:, 1])
    score = uniq[:, 0] * 100 + uniq[:, 1]  # any symmetric function of the pair
    expect = pairs.min(-1) * 100 + pairs.max(-1)
    np.testing.assert_array_equal(score[inv], expect)


def test_as_percent_and_format_table():
    assert as_percent({"mrr": 0.2834}) == {"mrr": pytest.approx(28.34)}
    rows = [{"name": "CN", "mrr": 28.3417}, {"name": "AA-long", "mrr": 9.5}]
    text = format_table(rows, ["name", "mrr"], headers=["heuristic", "MRR"])
    lines = text.splitlines()
    assert lines[0].split() == ["heuristic", "MRR"]
    assert lines[2].endswith("28.34") and lines[3].endswith(" 9.50")
    assert len({len(line) for line in lines}) == 1  # aligned: numbers right-justified to one width


def test_float32_noise_on_identical_subgraphs_ties_like_an_exact_tie():
    # The same subgraph scored in another batch moves by float noise: a positive 1.0 + 2 ulp against three negatives
    # at 1.0 (and one below) must rank as the exact tie does, under every protocol; float64 scores stay exact.
    exact, noisy = (
        np.float32(1.0),
        np.nextafter(np.nextafter(np.float32(1.0), 2, dtype=np.float32), 2, dtype=np.float32),
    )
    neg_row = np.array([1.0, 1.0, 1.0, 0.5], dtype=np.float32)
    for protocol, neg in (("kg", neg_row[None]), ("heart", neg_row[None]), ("original", neg_row), ("ogb", neg_row)):
        tied = evaluate(protocol, np.array([exact]), neg)
        assert evaluate(protocol, np.array([noisy]), neg) == tied, protocol
        assert tied["mrr"] == pytest.approx(1 / 2.5) and tied["auc"] == pytest.approx(0.625)
    assert rank_against_own(np.array([noisy, exact]), np.stack([neg_row, neg_row])).tolist() == [2.5, 2.5]
    assert evaluate("reverse", np.array([noisy]), np.array([[exact]]))["reverse_acc"] == 0.5
    rel = relation_metrics(np.array([noisy]), neg_row[None], np.array([0]), ["r"])
    assert rel["mrr/r"] == pytest.approx(1 / 2.5)
    # float64 (the heuristics' scores) is not float noise: 1 + 1e-12 is above 1.0
    assert evaluate("kg", np.array([1.0 + 1e-12]), neg_row[None].astype(np.float64))["mrr"] == 1.0
