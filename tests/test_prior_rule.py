"""bench/prior_rule.py: the validation-only check of the auto prior's rule. Exact values on a hand-built
2-seed example where the per-seed and run-wide picks differ; on a real shard set and run folder, half-B values
checked against the metrics computed directly, and no test file opened."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from bench import prior_rule
from bench.prior_rule import halvings, no_test_scores, score_rules, summarize
from common.metrics import evaluate
from pipelines.auto_prior import grid_values

# 4 positives (cids 0-3) against one shared negative (cid 4, score 0 whatever the blend): a positive ranks 1
# above 0, 2 below. CN (1 on cids 0 and 2) lifts a positive by w * log(2): a logit of -2 passes 0 at w = 4
# (2.77), not at w = 2 (1.39). AA and RA are 0 everywhere: every blend of them ties the model alone.
CN = np.array([1.0, 0.0, 1.0, 0.0, 0.0])
ZERO = np.zeros(5)
SEEDS = [np.array([1.0, 1.0, -2.0, 1.0, 0.0]), np.array([-2.0, 1.0, 1.0, -1.0, 0.0])]
HEUR = {"cn": CN, "aa": ZERO, "ra": ZERO}


def _mrr(rows):
    return lambda s: evaluate("original", np.asarray(s)[rows], np.asarray(s)[[4]])["mrr"]


def _halving(a, b, scored=None):
    grids = {k: [grid_values(_mrr(r), logit, HEUR) for logit in SEEDS] for k, r in (("a", a), ("b", b))}
    heur = {k: {h: _mrr(r)(HEUR[h]) for h in HEUR} for k, r in (("a", a), ("b", b))}
    return score_rules(grids["a"], grids["b"], heur["a"], heur["b"], scored)


def test_per_seed_and_run_wide_exact_on_a_hand_built_two_seed_example():
    # A = {0, 1}: seed 0 scores 1 everywhere (ties: none); seed 1 needs CN x 4 for cid 0 (0.75 -> 1). The run's
    # mean: none 0.875, CN x 4 1.0 -> CN x 4 for both. On B = {2, 3}: seed 0 at none 0.75, at CN x 4 1.0 (cid 2
    # passes 0); seed 1 0.75 either way. CN alone on A: cid 0 above, cid 1 tied (rank 1.5) -> 0.833, AA/RA 0.667.
    first = _halving([0, 1], [2, 3])
    assert first["picks"] == {"none": ["none"], "best heuristic": ["CN"], "per-seed": ["none", "CN x 4"],
                              "run-wide": ["CN x 4"]}
    assert first["none"] == 0.75 and first["per-seed"] == 0.75 and first["run-wide"] == 0.875
    assert first["best heuristic"] == pytest.approx(5 / 6, abs=1e-15)
    # swapped halves: seed 0 picks CN x 4 (0.75 -> 1 on {2, 3}), seed 1 none, the run CN x 4 (0.875 against
    # none's 0.75); on {0, 1}: per-seed (1 + 0.75) / 2, run-wide (1 + 1) / 2, none (1 + 0.75) / 2
    second = _halving([2, 3], [0, 1])
    assert second["picks"]["per-seed"] == ["CN x 4", "none"] and second["picks"]["run-wide"] == ["CN x 4"]
    assert (second["none"], second["per-seed"], second["run-wide"]) == (0.875, 0.875, 1.0)
    s = summarize([first, second])
    assert s["per-seed"][:2] == pytest.approx((0.8125, 0.125 / np.sqrt(2)), abs=1e-15)
    assert s["run-wide"] == (0.9375, pytest.approx(0.125 / np.sqrt(2), abs=1e-15), "CN x 4 (2/2)")
    assert s["per-seed"][2] == "none (2/4)" and s["run_wide_ge"] == 2 and s["halvings"] == 2


def test_scoring_a_subset_of_seeds_keeps_every_seed_in_the_run_wide_pick():
    # --skip-search-seed: only seed 1 is scored on B = {2, 3}, where it ranks 0.75 with or without CN x 4; the
    # run-wide pick is still CN x 4 (seed 0's half A counts), and per-seed lists seed 1's own pick only
    got = _halving([0, 1], [2, 3], scored=[1])
    assert got["picks"]["per-seed"] == ["CN x 4"] and got["picks"]["run-wide"] == ["CN x 4"]
    assert (got["none"], got["per-seed"], got["run-wide"]) == (0.75, 0.75, 0.75)


def test_halvings_are_seeded_disjoint_halves():
    got = halvings(11, 5, 3)
    assert len(got) == 5 and all(len(a) == 5 and len(b) == 6 for a, b in got)
    assert all(np.array_equal(np.sort(np.concatenate([a, b])), np.arange(11)) for a, b in got)
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(got, halvings(11, 5, 3)))
    assert not all(np.array_equal(x[0], y[0]) for x, y in zip(got, halvings(11, 5, 4)))


# ---------------------------------------------------------------------------- a real run folder
@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """A CSV edge list, its real shard set with valid/hard (selection on it, as the search does when validation
    is saturated), and a finished-run folder of 2 seeds: random valid/hard logits, garbage test scores."""
    pytest.importorskip("ray")
    from common.datasets import load_dataset
    from common.eval_scores import scores_path, write_scores
    from common.manifest import read_manifest
    from pipelines.auto_prior import PriorStage
    from pipelines.auto_search import attach_hard_negatives
    from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig
    from preprocess.job import run_job
    from tests.test_auto_search import _edge_csv
    from trainer.evaluate import eval_entry

    tmp = tmp_path_factory.mktemp("prior_rule")
    csv = _edge_csv(tmp / "geo_edges.csv")
    ds = load_dataset(str(csv))
    attach_hard_negatives(ds)
    cfg = PreprocessConfig(dataset=str(csv), sampling=SamplingConfig(1, 4), out=str(tmp / "shards"), num_cpus=1,
                           candidates=CandidateConfig(views=1, percent=100.0, protocols=("original", "hard")))
    manifest = read_manifest(run_job(cfg, ds).path)
    root = tmp / "results" / "geo_edges" / "auto" / "original"
    rng = np.random.default_rng(5)
    seeds = []
    for s in range(2):
        d = root / f"seed{s}"
        n = eval_entry(manifest, "valid", "hard")["candidates"]
        write_scores(scores_path(d, "valid", "hard"), rng.permutation(n), rng.normal(size=n).astype(np.float32), 0)
        scores_path(d, "test", "original").write_bytes(b"not an npz: reading it would fail")
        seeds.append(d)
    grids = PriorStage(ds, manifest, "hard", "original").choose_for(seeds)["seeds"]
    (root / "search.json").write_text(json.dumps({
        "selection": {"protocol": "hard"}, "chosen": {"shards": manifest["root"]},
        "prior": {str(s): {"grid": grids[d]["grid"]} for s, d in enumerate(seeds)}}))
    return root, manifest


@pytest.mark.slow  # a Ray preprocess job: ~15 s alone, more on a loaded machine
def test_real_run_folder_halves_exact_and_no_test_file_opened(run_folder, capsys):
    from common.eval_scores import read_scores
    from common.shards import load_queries
    from trainer.evaluate import eval_entry

    root, manifest = run_folder
    opened = []
    watching = [True]
    sys.addaudithook(lambda e, a: opened.append(str(a[0])) if watching[0] and e == "open" else None)
    try:
        assert prior_rule.main([str(root), "--halvings", "3"]) == 0
    finally:
        watching[0] = False
    names = [Path(p).name for p in opened]
    assert "valid-hard.npz" in names and not [n for n in names if n.startswith("test-")]
    out = capsys.readouterr()
    assert "| geo_edges | valid/hard MRR | run-wide |" in out.out and "within 0.0e+00" in out.err

    # half B of the first halving, from the files directly: each validation positive against its own 20 hard
    # negatives, rows of B only
    c = prior_rule.check_run(root, 3, 0)
    entry = eval_entry(manifest, "valid", "hard")
    pos_cid, neg_cid = load_queries(f"{manifest['root']}/{entry['queries']}")
    assert neg_cid.ndim == 2 and c["positives"] == len(pos_cid)
    a, b = halvings(len(pos_cid), 3, 0)[0]
    none = []
    for s in range(2):
        cid, logit, _ = read_scores(root / f"seed{s}" / "scores" / "valid-hard.npz")
        table = np.empty(len(cid), dtype=np.float32)
        table[cid] = logit
        none.append(evaluate("hard", table[pos_cid[b]], table[neg_cid[b]])["mrr"])
    assert c["results"][0]["none"] == pytest.approx(float(np.mean(none)), abs=1e-12)
    assert c["results"][0]["none"] != pytest.approx(float(np.mean(none[:1])), abs=1e-6)  # both seeds count


def test_the_guard_stops_a_test_file_read(tmp_path):
    from common.eval_scores import read_scores, scores_path, write_scores
    for split in ("valid", "test"):
        write_scores(scores_path(tmp_path, split, "original"), np.arange(3), np.zeros(3), 0)
    with no_test_scores():
        read_scores(scores_path(tmp_path, "valid", "original"))
        with pytest.raises(AssertionError, match="opened a test file"):
            read_scores(scores_path(tmp_path, "test", "original"))
    read_scores(scores_path(tmp_path, "test", "original"))  # outside it, nothing is stopped
