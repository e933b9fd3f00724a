"""`--preset auto`'s heuristic prior (pipelines.auto.blend): exact blends and choice on a hand-built example,
the cid -> pair mapping against a real shard set's blocks, w = 0 giving back the trainer's own metrics,
and a choice that sees validation only (test scores perturbed or unreadable change nothing)."""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from common.eval_scores import read_scores, scores_path, write_scores
from common.heuristics import ranking_scores
from common.manifest import read_manifest, shard_entries
from common.metrics import evaluate
from common.shards import read_shard
from pipelines.auto import blend as auto_prior
from pipelines.auto.blend import GRID, PriorStage, blend, choose, eval_pairs, grid_values, prior_model_name
from tests.test_auto_search import _split_graph


# ---------------------------------------------------------------------------- hand-built, exact
def test_blend_and_choice_exact_on_a_hand_built_example():
    # 2 positives (cids 0, 1) against 3 shared negatives (cids 2, 3, 4)
    logit = np.array([0.0, 1.0, 2.0, 0.5, -1.0], dtype=np.float32)
    cn = np.array([3.0, 0.0, 0.0, 1.0, 0.0])
    ra = np.array([0.3, 0.0, 0.0, 0.1, 0.0])
    aa = np.zeros(5)
    assert blend(logit, cn, 0.0) is logit  # w = 0: the model's own logits, untouched
    got = blend(logit, cn, 2.0)
    assert got.dtype == np.float64
    assert got.tolist() == [2 * math.log(4), 1.0, 2.0, 0.5 + 2 * math.log(2), -1.0]
    mrr = lambda s: evaluate("original", s[:2], s[2:])["mrr"]
    # none: ranks 3 and 2 -> 5/12. CN at w <= 1 moves nothing useful (ranks {3, 2} or {2, 3}); at w = 2 the
    # first positive (2 log 4 = 2.77) passes 2.0 while the second stays third -> (1 + 1/3) / 2. RA needs
    # w = 8 for the same ranks: a tie, and the earlier grid entry (CN, 2) keeps it; AA (all 0) ties none.
    grid = grid_values(mrr, logit, {"cn": cn, "aa": aa, "ra": ra})
    chosen = choose([grid])
    assert (chosen["heuristic"], chosen["weight"]) == ("cn", 2.0)
    assert chosen["valid_mean"] == pytest.approx(2 / 3, abs=1e-15)
    table = {(h, w): v for h, w, v in grid}
    assert len(grid) == len(GRID) and table[("none", 0.0)] == pytest.approx(5 / 12, abs=1e-15)
    assert table[("cn", 1.0)] == pytest.approx(5 / 12, abs=1e-15) and table[("ra", 8.0)] == pytest.approx(2 / 3)
    # RA at w = 4: 4 log 1.3 = 1.05 passes only the 0.5 + 4 log 1.1 = 0.88 negative: ranks 2 and 2
    assert table[("ra", 4.0)] == pytest.approx(1 / 2) and all(table[("aa", w)] == table[("none", 0.0)] for w in
                                                               auto_prior.WEIGHTS)
    # a prior that helps nowhere leaves the model alone
    assert choose([grid_values(mrr, logit, {"cn": aa, "aa": aa, "ra": aa})])["heuristic"] == "none"


def test_choose_over_several_grids_takes_the_best_mean():
    # bench.prior_rule's run-wide rule: seed A alone would pick (cn, 0.25) (0.9), seed B alone none (0.5); the
    # means are none 0.5, cn 0.25: 0.5 (a tie, kept by the earlier entry: none), cn 0.5: 0.6, the best
    def grid(values):  # every other entry scores 0
        table = dict.fromkeys(GRID, 0.0)
        table.update(values)
        return [[h, w, table[(h, w)]] for h, w in GRID]
    a = grid({("none", 0.0): 0.5, ("cn", 0.25): 0.9, ("cn", 0.5): 0.7})
    b = grid({("none", 0.0): 0.5, ("cn", 0.25): 0.1, ("cn", 0.5): 0.5})
    chosen = choose([a, b])
    assert (chosen["heuristic"], chosen["weight"]) == ("cn", 0.5) and chosen["valid_mean"] == pytest.approx(0.6)
    assert (choose([a])["heuristic"], choose([a])["weight"]) == ("cn", 0.25)
    assert choose([b])["heuristic"] == "none"


def test_row_name_names_the_heuristic_or_says_none_was_chosen():
    base = "PENCIL w/o features"
    assert prior_model_name(base, [{"heuristic": "ra"}, {"heuristic": "ra"}]) == base + " + RA prior"
    assert prior_model_name(base, [{"heuristic": "ra"}, {"heuristic": "aa"}]) == base + " + heuristic prior"
    assert prior_model_name(base, [{"heuristic": "none"}, {"heuristic": "none"}]) == base + " + prior (none chosen)"


# ---------------------------------------------------------------------------- a real shard set and trainer run
@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """A small geometric graph with valid/hard attached (as the auto search does), its real shard set, and one
    tiny trainer run evaluated once with --save-scores (valid/original, valid/hard, test/original)."""
    pytest.importorskip("ray")
    from pipelines.auto.search import attach_hard_negatives
    from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig
    from preprocess.job import run_job
    from trainer.config import config_for
    from trainer.train import run

    tmp = tmp_path_factory.mktemp("prior")
    ds = _split_graph(1)
    attach_hard_negatives(ds)
    cfg = PreprocessConfig(dataset="geo", sampling=SamplingConfig(1, 8), out=str(tmp / "shards"), num_cpus=1,
                           candidates=CandidateConfig(views=1, percent=100.0, protocols=("original", "hard")))
    shards = run_job(cfg, ds).path
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        summary = run(config_for("tiny", str(shards), str(tmp / "run"), epochs=1, max_steps=3, progress=False,
                                 device="cpu", save_scores=True, score_protocols=("hard",), data={"num_workers": 0}))
    finally:
        torch.set_num_threads(threads)
    return ds, read_manifest(shards), tmp / "run", summary


def test_cid_pairs_are_the_shard_sets_pairs_exactly(scored):
    ds, manifest, _, _ = scored
    for split, protocol in (("valid", "original"), ("valid", "hard"), ("test", "original")):
        pairs = eval_pairs(ds, manifest, split, protocol)
        s = ds.splits[split]
        pos = s.positives(protocol)
        assert np.array_equal(pairs[:len(pos)], pos)  # positives first, in split order
        if protocol == "original":  # shared negatives follow in their own order
            assert np.array_equal(pairs[len(pos):], s.neg[protocol])
        else:  # per-positive: distinct canonical pairs, ascending
            neg = np.sort(s.neg[protocol].reshape(-1, 2), axis=1)
            assert np.array_equal(pairs[len(pos):], np.unique(neg, axis=0))
        # every cid's pair is the one the sampler sampled (the blocks of the eval shards carry src, dst)
        seen = np.full((len(pairs), 2), -1)
        for entry in shard_entries(manifest, split, protocol):
            for block in read_shard(Path(manifest["root"]) / entry["name"]):
                seen[block.cid] = np.stack([block.src, block.dst], axis=1)
        assert np.array_equal(seen, pairs)


def test_weight_zero_reproduces_the_model_alone_exactly(scored):
    ds, manifest, run_dir, summary = scored
    stage = PriorStage(ds, manifest, "hard", "original")
    assert stage.apply(run_dir, {"heuristic": "none", "weight": 0.0}) == summary["test"]
    # a chosen (h, w) is applied on the test graph: the blend of the saved logits with that heuristic
    cid, logit, _ = read_scores(scores_path(run_dir, "test", "original"))
    ra = ranking_scores("ra", ds.graph_for("test"), eval_pairs(ds, manifest, "test", "original"))
    from trainer.evaluate import scores_to_metrics
    want = scores_to_metrics(manifest, "test", "original", cid, logit + 4.0 * np.log1p(ra[cid]))
    assert stage.apply(run_dir, {"heuristic": "ra", "weight": 4.0}) == want


def test_choice_reads_validation_of_the_selection_protocol_only(scored, tmp_path, monkeypatch):
    ds, manifest, run_dir, _ = scored
    seed = tmp_path / "seed0"
    shutil.copytree(run_dir / "scores", seed / "scores")
    opened = []
    real = auto_prior.read_scores
    monkeypatch.setattr(auto_prior, "read_scores", lambda p: (opened.append(Path(p).name), real(p))[1])
    stage = PriorStage(ds, manifest, "hard", "original")
    first = stage.choose_for([seed])
    assert opened == ["valid-hard.npz"] and first["protocol"] == "valid/hard"
    # perturbed test scores never change the choice; unreadable ones are never opened by it
    test_file = scores_path(seed, "test", "original")
    cid, logit, epoch = read_scores(test_file)
    rng = np.random.default_rng(0)
    for _ in range(3):
        write_scores(test_file, cid, rng.normal(size=len(logit)).astype(np.float32) * 10, epoch)
        again = stage.choose_for([seed])
        assert (again["heuristic"], again["weight"], again["valid_mean"]) == (first["heuristic"], first["weight"],
                                                                              first["valid_mean"])
    test_file.write_bytes(b"not an npz")
    assert PriorStage(ds, manifest, "hard", "original").choose_for([seed])["grid_mean"] == first["grid_mean"]
    # the whole stage reads the test file only after the choice
    write_scores(test_file, cid, logit, epoch)
    opened.clear()
    result = stage.run({0: seed})[0]
    assert opened == ["valid-hard.npz", "test-original.npz"]
    assert result["test"] == stage.apply(seed, first)


def test_each_seed_picks_its_own_prior(scored, tmp_path):
    # seed 1's validation logits are the RA heuristic's negation: any RA weight that undoes it helps, so its
    # pick differs from seed 0's (the trained model), and each record carries its own pick and value
    ds, manifest, run_dir, _ = scored
    seeds = {s: tmp_path / f"seed{s}" for s in (0, 1)}
    for d in seeds.values():
        shutil.copytree(run_dir / "scores", d / "scores")
    stage = PriorStage(ds, manifest, "hard", "original")
    valid = scores_path(seeds[1], "valid", "hard")
    cid, logit, epoch = read_scores(valid)
    ra = stage.heuristics("valid", "hard")["ra"][cid]
    write_scores(valid, cid, (-np.log1p(ra)).astype(np.float32), epoch)
    out = stage.run(seeds)
    for s, d in seeds.items():
        own = stage.choose_for([d])
        assert (out[s]["heuristic"], out[s]["weight"], out[s]["valid"]) == (own["heuristic"], own["weight"],
                                                                            own["valid_mean"])
        assert out[s]["test"] == stage.apply(d, own)
    assert out[1]["heuristic"] != "none" and (out[0]["heuristic"], out[0]["weight"]) != (out[1]["heuristic"],
                                                                                         out[1]["weight"])
