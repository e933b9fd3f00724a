"""--preset auto: statistics, candidate proposal, successive halving, hard validation negatives, and an
end-to-end run that proves the search never opens a test shard or test query file."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from common.datasets import PROTOCOLS, LinkDataset, Split
from common.datasets.base import training_graph
from common.datasets.edgelist import random_split_dataset
from common.graph import Graph
from common.graph_stats import graph_stats, hard_negatives
from common.heuristics import resource_allocation
from pipelines.auto.blend import GRID
from pipelines.auto.candidates import (Candidate, fit_first_rung, propose, propose_samplings, round_cost, rungs,
                                       successive_halving)


def _dataset(edges, n, valid_pos, valid_neg) -> LinkDataset:
    edges = np.asarray(edges, dtype=np.int64)
    return LinkDataset("hand", training_graph(edges, n),
                       {"train": Split(edges), "valid": Split(np.asarray(valid_pos), {"original": np.asarray(valid_neg)}),
                        "test": Split(np.asarray(valid_pos), {"original": np.asarray(valid_neg)})})


def _ring(n: int, reach: int) -> list:
    return [(i, (i + r) % n) for i in range(n) for r in range(1, reach + 1)]


# ---------------------------------------------------------------------------- statistics and proposal
def test_graph_stats_exact_on_a_path():
    # path 0-1-2-3-4-5: degrees 1,2,2,2,2,1; negatives (0,2) share node 1, (0,5) and (1,4) share none
    ds = _dataset([(i, i + 1) for i in range(5)], 6, [(0, 1)], [(0, 2), (0, 5), (1, 4)])
    s = graph_stats(ds)
    assert (s.nodes, s.edges, s.mean_degree, s.median_degree) == (6, 5, 10 / 6, 2.0)
    assert s.p90_degree == 2.0 and s.density == 5 / 15
    assert s.valid_neg_cn_fraction == pytest.approx(1 / 3) and s.valid_negatives_per_ranking == 3
    assert s.valid_cn_negatives_per_ranking == pytest.approx(1.0) and s.easy_validation is False  # 1 per ranking
    assert s.valid_negatives == 3 and s.valid_positives == 1
    # the same path ranked against own lists of 2 (one with a common neighbour in three): 2/3 per ranking, easy
    own = _dataset([(i, i + 1) for i in range(5)], 6, [(0, 1), (2, 3), (3, 4)],
                   [[(0, 2), (0, 5)], [(1, 4), (0, 5)], [(1, 5), (0, 4)]])
    s = graph_stats(own)
    assert (s.valid_negatives, s.valid_negatives_per_ranking) == (6, 2) and s.valid_neg_cn_fraction == pytest.approx(1 / 6)
    assert s.valid_cn_negatives_per_ranking == pytest.approx(1 / 3) and s.easy_validation is True


def test_proposal_sparse_medium_dense_exact():
    path = graph_stats(_dataset([(i, i + 1) for i in range(9)], 10, [(0, 1)], [(0, 5)]))
    assert propose_samplings(path.mean_degree, path.median_degree, path.p90_degree) == [(3, 3), (2, 3)]
    ring = graph_stats(_dataset(_ring(40, 3), 40, [(0, 1)], [(0, 20)]))  # every degree 6
    assert (ring.mean_degree, ring.median_degree, ring.p90_degree) == (6.0, 6.0, 6.0)
    assert propose_samplings(6.0, 6.0, 6.0) == [(2, 6), (1, 10)]
    clique = graph_stats(_dataset([(i, j) for i in range(30) for j in range(i + 1, 30)], 30, [(0, 1)], [(0, 1)]))
    assert clique.mean_degree == 29.0
    cands = propose(clique, "cpu")
    assert [c.sampling for c in cands] == [(1, 29)] * 3  # dense: one hop; median and p90 agree, deduplicated
    assert [(c.hidden, c.layers, c.lr, c.lr_schedule) for c in cands] == [
        (128, 2, 5e-4, "cosine"), (64, 2, 1e-3, "constant"), (128, 3, 3e-4, "cosine")]
    assert propose_samplings(40.0, 30.0, 200.0, "cpu") == [(1, 100), (1, 30)]  # n capped at the CPU's 100
    assert propose_samplings(40.0, 30.0, 200.0, "cuda") == [(1, 150), (1, 30)]
    assert len(propose(ring, "cpu")) == 6 and {c.max_epochs for c in propose(ring, "cpu")} == {16}


def test_candidate_flags_and_rungs():
    c = Candidate((2, 5), 64, 2, 2, 128, 1e-3, "constant", 64, 16)
    assert c.cid == "d2n5-h64l2-lr0.001-constant"
    assert c.trainer_flags() == ["--hidden", "64", "--layers", "2", "--heads", "2", "--ffn", "128", "--lr", "0.001",
                                 "--lr-schedule", "constant", "--effective-batch", "64", "--epochs", "16"]
    assert rungs(2, 16) == [2, 4, 8, 16] and rungs(2, 12) == [2, 4, 8, 12] and rungs(4, 4) == [4]


# ---------------------------------------------------------------------------- successive halving
def _fake(quality: dict, calls: list):
    def train(cids, epochs):
        calls.append((tuple(cids), epochs))
        return {c: quality[c] * (1 - 1 / (epochs + 1)) for c in cids}
    return train


def test_successive_halving_exact_survivors():
    quality = {"a": 0.50, "b": 0.90, "c": 0.70, "d": 0.10, "e": 0.80, "f": 0.60}
    calls = []
    winner, history = successive_halving(list(quality), [1, 2, 4, 8], _fake(quality, calls))
    assert [h.survivors for h in history] == [["b", "e", "c"], ["b", "e"], ["b"], ["b"]]
    assert calls == [(("a", "b", "c", "d", "e", "f"), 1), (("b", "e", "c"), 2), (("b", "e"), 4), (("b",), 8)]
    assert winner == "b"


def test_successive_halving_ties_and_nan_and_budget():
    quality = {"a": 0.5, "b": 0.5, "c": float("nan"), "d": 0.2}
    calls = []
    seen = []

    def afford(cids, epochs, done):
        seen.append((tuple(cids), epochs, done))
        return epochs < 4  # the budget stops before the 4-epoch rung
    winner, history = successive_halving(list(quality), [1, 2, 4], _fake(quality, calls), afford)
    assert [h.survivors for h in history] == [["a", "b"], ["a"]]  # tie: earlier first; NaN never survives
    assert seen == [(("a", "b"), 2, 1), (("a",), 4, 2)]
    assert winner == "a" and history[-1].rung == 2 and math.isnan(history[0].scores["c"])


# ---------------------------------------------------------------------------- the budget (fake clock)
SPE = {"a": 10.0, "b": 20.0, "c": 60.0, "d": 120.0}  # seconds per epoch, as a speed probe would measure
SAMPLING = {"a": (1, 10), "b": (1, 10), "c": (1, 40), "d": (1, 40)}


def test_round_cost_exact():
    # 2 slots: the rung takes the longer of the packed (10 + 60) / 2 = 35 s and c's own 60 s per epoch; the
    # final 3 seeds take 2 rounds of the worst (60)
    assert round_cost(SPE, ["a", "c"], 2, 4, 2, 3) == 60 * 2 + 2 * 60 * 4
    assert round_cost(SPE, ["a", "b", "c"], 1, 1, 1, 3) == 90 + 3 * 60  # one slot: the candidates in turn
    # one candidate cannot use two slots: its rung takes its own time
    assert round_cost(SPE, ["b"], 3, 3, 2, 3) == 20 * 3 + 2 * 20 * 3


@pytest.mark.parametrize("left, kept, epochs, cuts", [
    (720.0, ["a", "b", "c", "d"], 2, []),  # 120 x 2 + 2 x 120 x 2 = 720: fits exactly
    (719.0, ["a", "b", "c"], 2, [("candidate", "d")]),  # 60 x 2 + 2 x 60 x 2 = 360
    # then b, not c: (1, 40) keeps one candidate while (1, 10) has two; then one epoch less (60 + 120 = 180)
    (200.0, ["a", "c"], 1, [("candidate", "d"), ("candidate", "b"), ("first rung epochs", 1)]),
    (100.0, ["a"], 1, [("candidate", "d"), ("candidate", "b"), ("first rung epochs", 1), ("candidate", "c")]),  # 30
    (20.0, ["a"], 1, [("candidate", "d"), ("candidate", "b"), ("first rung epochs", 1), ("candidate", "c"),
                      ("over budget", None)]),
])
def test_fit_first_rung_exact(left, kept, epochs, cuts):
    got_kept, got_epochs, got_cuts = fit_first_rung(list(SPE), SPE, SAMPLING, 2, left, 2, 3)
    assert (got_kept, got_epochs) == (kept, epochs)
    assert [(c["cut"], c.get("cid", c.get("epochs") if c["cut"] != "over budget" else None)) for c in got_cuts] == cuts
    if cuts and cuts[-1][0] == "over budget":
        assert got_cuts[-1] == {"cut": "over budget", "need_s": 30.0, "left_s": 20.0}


def _searcher(tmp_path, deadline: float, now: list):
    from argparse import Namespace

    from pipelines.auto.search import Search
    q = {"a": 0.5, "b": 0.9, "c": 0.7, "d": 0.1}
    cands = [Candidate(SAMPLING[k], 32 * (i + 1), 2, 2, 64, 1e-3, "constant", 64, 16) for i, k in enumerate(q)]
    searcher = Search(Namespace(device="cpu", train_arg=[]), cands, {(1, 10): "s10", (1, 40): "s40"}, "original",
                      tmp_path, 2, deadline, 3)
    searcher.clock = lambda: now[0]
    names = dict(zip((c.cid for c in cands), q))  # cid -> a, b, c, d
    return searcher, names, q


def test_search_budget_with_a_fake_clock_and_objective(tmp_path):
    """The first rung is planned from probe timings against the clock; each later rung, and the final seeds,
    fit what is left; a fake objective trains by advancing the fake clock. Exact times throughout."""
    now = [50.0]
    searcher, names, q = _searcher(tmp_path, 50.0 + 1300.0, now)
    cid = {v: k for k, v in names.items()}
    plan = searcher.plan_first_rung(2, {cid[k]: {"sec_per_epoch": v} for k, v in SPE.items()})
    assert plan["left_s"] == 1300.0 and plan["first_rung_epochs"] == 2 and plan["cuts"] == []
    assert plan["kept"] == list(cid.values()) and plan["estimated_s"] == 720.0
    done = {}

    def train(cids, epochs):  # concurrent trainers on 2 slots, as round_cost packs them
        secs = [SPE[names[c]] * (epochs - done.get(c, 0)) for c in cids]
        now[0] += max(sum(secs) / 2, max(secs))
        done.update({c: epochs for c in cids})
        return {c: q[names[c]] * epochs for c in cids}
    winner, history = successive_halving(plan["kept"], rungs(2, 16), train, searcher.can_afford)
    # rung 2: d's 240 s (t=290); rung 4 over b, c: c's 120 + final 480 <= 1060 (t=410); rung 8 over b:
    # 80 + 320 <= 940 (t=490); rung 16 over b: 160 + 640 = 800 <= 860 (t=650); final: 2 rounds x 20 x 16
    assert [h.rung for h in history] == [2, 4, 8, 16] and names[winner] == "b"
    assert now[0] == 650.0
    now[0] += 2 * SPE["b"] * 16
    assert now[0] == 1290.0 <= 50.0 + 1300.0  # search and final seeds within the budget
    # 70 s less budget: after rung 8 (t=490) the 16-epoch rung and the final seeds (800 s) no longer fit
    now2 = [490.0]
    searcher2, names2, _ = _searcher(tmp_path, 1280.0, now2)
    searcher2.sec_per_epoch = {c: SPE[names2[c]] for c in names2}
    assert searcher2.can_afford([cid["b"]], 16, 8) is False  # 790 s left
    now2[0] = 480.0
    assert searcher2.can_afford([cid["b"]], 16, 8) is True  # 800 s left: fits exactly
    # a rerun with no time left climbs every rung its candidates already finished, and no further
    now2[0] = 5000.0
    (searcher2.dirs[cid["b"]]).mkdir(parents=True, exist_ok=True)
    (searcher2.dirs[cid["b"]] / "summary.json").write_text(json.dumps({"epochs_completed": 16}))
    assert searcher2.can_afford([cid["b"]], 16, 8) is True
    assert searcher2.can_afford([cid["b"], cid["c"]], 16, 8) is False  # c has not: its rung costs time


def test_a_final_seed_of_another_choice_is_trained_afresh(tmp_path):
    from pipelines.auto.final import FINAL_MARK, final_key, trained_for_another_choice
    chosen = {"cid": "d1n10-h64l2", "epochs": 2, "shards": "/s/a"}
    seed = tmp_path / "seed1"
    seed.mkdir()
    assert not trained_for_another_choice(seed, chosen)  # no mark: an older folder, judged by its summary
    (seed / FINAL_MARK).write_text(json.dumps(final_key(chosen)))
    assert not trained_for_another_choice(seed, chosen)
    assert not trained_for_another_choice(seed, {**chosen, "epochs": 4})  # same candidate, resumed further
    assert trained_for_another_choice(seed, {**chosen, "cid": "d1n10-h128l2"})
    assert trained_for_another_choice(seed, {**chosen, "shards": "/s/b"})


def test_run_trainers_stops_at_the_deadline(tmp_path, monkeypatch):
    """Real child processes (each writes its pid, then sleeps 60 s as a trainer would train) and a fake clock
    that reaches stop_at once both running children have started: they are ended, the pending one never
    starts."""
    import psutil

    from pipelines.core import trainers as auto_runs
    code = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)"
    monkeypatch.setattr(auto_runs, "TRAINER", [sys.executable, "-c", code])
    pids = {k: tmp_path / f"{k}.pid" for k in "abc"}
    now = lambda: 100.0 if pids["a"].exists() and pids["b"].exists() else 0.0  # noqa: E731
    jobs = {k: auto_runs.Job([str(pids[k])], tmp_path / k) for k in "abc"}
    wall, stopped = auto_runs.run_trainers(jobs, 2, stop_at=10.0, clock=now)
    assert stopped == ["a", "b", "c"] and sorted(wall) == ["a", "b"]  # c never started
    for k in "ab":
        pid = int(pids[k].read_text())
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not pids["c"].exists() and not (tmp_path / "c").exists()
    assert auto_runs.run_trainers({}, 2, stop_at=10.0, clock=now) == ({}, [])


# ---------------------------------------------------------------------------- hard validation negatives
def _split_graph(seed=0):
    rng = np.random.default_rng(seed)
    n = 300
    pos = rng.random((n, 2))
    d = ((pos[:, None] - pos[None]) ** 2).sum(-1)
    iu = np.triu_indices(n, 1)
    keep = rng.random(len(iu[0])) < np.exp(-d[iu] / 0.005)
    edges = np.stack([iu[0][keep], iu[1][keep]], 1)
    return random_split_dataset("geo", edges, n, seed=seed)


def test_hard_negatives_exclude_every_known_pair_and_are_deterministic():
    ds = _split_graph()
    valid, test = ds.splits["valid"], ds.splits["test"]
    exclude = [valid.pos, test.pos, test.neg["original"]]
    pos, neg = hard_negatives(ds.graph, valid.pos, 10, exclude, seed=3)
    pos2, neg2 = hard_negatives(ds.graph, valid.pos, 10, exclude, seed=3)
    assert np.array_equal(pos, pos2) and np.array_equal(neg, neg2)
    assert neg.shape == (len(valid.pos), 10, 2) and np.array_equal(pos, valid.pos)
    flat = neg.reshape(-1, 2)
    n = ds.num_nodes
    key = flat[:, 0] * n + flat[:, 1]
    assert (flat[:, 0] < flat[:, 1]).all()  # canonical, no self-loops
    assert not ds.graph.has_edge(flat[:, 0], flat[:, 1]).any()  # no training edge
    for pairs in exclude:
        p = np.sort(pairs, axis=1)
        assert not np.isin(key, p[:, 0] * n + p[:, 1]).any()  # no valid/test positive, no test negative
    # each positive's u-side list is distinct and holds u; its first entry is u's top-RA non-neighbour
    u, x = pos[0, 0], np.where(neg[0, :5, 0] == pos[0, 0], neg[0, :5, 1], neg[0, :5, 0])
    assert len(set(x.tolist())) == 5 and (neg[0, :5] == u).any(axis=1).all()
    banned = {tuple(sorted(p)) for e in exclude for p in e.tolist()}
    others = [w for w in range(n) if w != u and not ds.graph.has_edge([u], [w])[0] and tuple(sorted((u, w))) not in banned]
    ra = resource_allocation(ds.graph, np.array([[u, w] for w in others]))
    if ra.max() > 0:
        assert x[0] == others[int(np.argmax(ra))]
    _, neg3 = hard_negatives(ds.graph, valid.pos, 10, exclude, seed=4)
    assert neg3.shape == neg.shape  # another seed may differ only in the random top-up


def test_hard_negatives_subset_of_positives():
    ds = _split_graph()
    pos, neg = hard_negatives(ds.graph, ds.splits["valid"].pos, 4, [], seed=0, max_positives=5)
    assert pos.shape == (5, 2) and neg.shape == (5, 4, 2)
    assert {tuple(p) for p in pos.tolist()} <= {tuple(p) for p in ds.splits["valid"].pos.tolist()}


def test_trainer_protocols_match_datasets():
    from trainer.config import PROTOCOLS as TRAINER_PROTOCOLS
    assert TRAINER_PROTOCOLS == PROTOCOLS


# ---------------------------------------------------------------------------- end to end (real preprocess, real trainers)
def _edge_csv(path: Path) -> Path:
    ds = _split_graph(2)  # none of its validation negatives shares a neighbour with its pair: saturated
    edges = np.concatenate([ds.splits[s].pos for s in ("train", "valid", "test")])
    path.write_text("src,dst\n" + "".join(f"{u},{v}\n" for u, v in edges.tolist()))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("force_hard", [False, True])
def test_auto_run_never_opens_test_before_the_choice_and_a_rerun_reuses_it(tmp_path, monkeypatch, force_hard):
    """force_hard: the stage runs with --objective recommend, its real judge (validation full ranking of both
    arms' best.pt) and a choice forced to the hard views (this tiny graph's validation keeps uniform), so the
    final seeds' switch to the hard shard set, seed 1's reuse of the stage's hard best.pt and seed 0's
    training on the hard views run for real."""
    from pipelines.auto import negatives as auto_negatives, ranking_judge as auto_ranking_judge, search as auto_search
    from pipelines.run import main

    csv = _edge_csv(tmp_path / "geo_edges.csv")
    real_search, real_shard_set, real_decide = auto_search.search, auto_search.shard_set, auto_search.decide
    # two candidates on one sampling keep the run short; the search machinery is the real one
    monkeypatch.setattr(auto_search, "propose", lambda stats, device: [
        Candidate((1, 8), 32, 1, 2, 64, 1e-3, "constant", 64, 2),
        Candidate((1, 8), 64, 2, 2, 128, 1e-3, "cosine", 64, 2)])
    monkeypatch.setattr(auto_search, "FIRST_RUNG", {"cpu": 1, "cuda": 1})  # rungs 1, 2: the survivor resumes
    events, moved = [], []

    def instrumented_shard_set(*a, **k):
        # Every test shard and test query file is overwritten with seeded random bytes of its own size once a
        # shard set is written (the search's, then the training-negatives stage's hard one), before any trainer
        # runs on it: the trainer's start-up check (a stat of every file) still passes, but a trainer that read
        # one would fail on it (a tar header or an npz that does not parse), and with it the run. The real
        # files come back after the choice: the search's and then the stage's.
        loc = real_shard_set(*a, **k)
        rng = np.random.default_rng(0)
        for f in Path(loc).iterdir():
            if f.name.startswith(("test-", "graph-test-")):
                data = f.read_bytes()
                f.write_bytes(rng.integers(0, 256, size=len(data), dtype=np.uint8).tobytes())
                moved.append((data, f))
        assert any(f.name == "test-original-queries.npz" for _, f in moved)
        shard_sets.append(loc)
        return loc

    def instrumented_search(searcher, rung_epochs, cids):
        chosen = real_search(searcher, rung_epochs, cids)
        events.append(dict(chosen))  # as the search chose it, before the stage
        return chosen

    def instrumented_decide(*a, **k):
        try:
            return real_decide(*a, **k)
        finally:
            for data, f in moved:
                f.write_bytes(data)
            moved.clear()

    shard_sets = []
    if force_hard:
        monkeypatch.setattr(auto_ranking_judge, "better", lambda hard, uniform: True)
    monkeypatch.setattr(auto_search, "shard_set", instrumented_shard_set)
    monkeypatch.setattr(auto_search, "search", instrumented_search)
    monkeypatch.setattr(auto_search, "decide", instrumented_decide)
    argv = ["--dataset", str(csv), "--seeds", "0,1", "--out", str(tmp_path / "results"),
            "--shards", str(tmp_path / "shards"), "--num-cpus", "1", "--parallel-seeds", "2",
            *(["--objective", "recommend"] if force_hard else [])]
    assert main(argv) == 0
    out = tmp_path / "results" / "geo_edges" / "auto" / "original"
    search = json.loads((out / "search.json").read_text())
    assert search["selection"]["protocol"] == "hard" and search["stats"]["easy_validation"]
    # the training-negatives stage: seed 1 of the winner (not the search's seed 0) trained on uniform and
    # 0.5-hard views, validation only, decided on the best blended valid/hard value (strictly higher to switch)
    # and that blend's valid/original MRR and AUC (no lower to switch)
    negatives = search["training_negatives"]
    assert sorted(negatives["fractions"]) == ["0", "0.5"] and negatives["by"] == "validation"
    assert negatives["seed"] == 1
    assert negatives["protocol"] == "valid/hard" and negatives["reported"] == "valid/original"
    arms = {float(f): v for f, v in negatives["fractions"].items()}
    assert all(sorted(v) == ["auc", "reported", "selection"] and all(0 <= x <= 1 for x in v.values())
               for v in arms.values())
    hard_won = force_hard or auto_negatives.choose_fraction(arms) == auto_negatives.HARD_NEG_FRACTION
    assert negatives["chosen"] == (0.5 if hard_won else 0.0)
    assert search["objective"] == ("recommend" if force_hard else "link-prediction")
    if force_hard:  # both arms ranked on validation full ranking by their real best.pt
        assert negatives["objective"] == "recommend" and sorted(negatives["ranking"]) == ["0", "0.5"]
        assert negatives["ranking_protocol"] == auto_ranking_judge.describe()
        assert negatives["link_prediction_choice"] == auto_negatives.choose_fraction(arms)
        for v in negatives["ranking"].values():
            assert 0 <= v["selection"] <= v[f"recall@{auto_ranking_judge.JUDGE_POOL}"] <= 1 and v["positives"] > 0
    else:
        assert "ranking" not in negatives
    assert len(shard_sets) == 2 and shard_sets[0] != shard_sets[1]  # the search's, then the stage's hard one
    for fraction, run_dir in negatives["runs"].items():  # both validation only: no test evaluation
        evals = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
        assert {r["split"] for r in evals if r["event"] == "eval"} == {"valid"}
        stage_config = json.loads((Path(run_dir) / "config.json").read_text())
        assert stage_config["data"]["shards"] == shard_sets[fraction == "0.5"] and stage_config["seed"] == 1
        assert "weights_from" not in json.loads((Path(run_dir) / "summary.json").read_text())  # trained
    assert search["rungs"] == [1, 2] and len(search["candidates"]) == 2
    plan = search["budget_plan"]  # the default 30 minutes fit both candidates; each was timed by a probe
    assert plan["cuts"] == [] and plan["first_rung_epochs"] == 1 and len(plan["kept"]) == 2
    assert all(p["sec_per_epoch"] > 0 and p["links_per_s"] > 0 for p in plan["probe"].values())
    chosen = search["chosen"]
    assert chosen == {**events[0], "shards": shard_sets[hard_won], "hard_neg_fraction": negatives["chosen"]}
    assert chosen == json.loads((out / "chosen.json").read_text())
    cands = search["candidates"]
    assert [sorted(c["rungs"]) for c in cands.values()].count(["1", "2"]) == 1  # one survivor of rung 1
    assert sorted(cands[chosen["cid"]]["rungs"]) == ["1", "2"] and chosen["rung"] == 2
    assert not any(r["reused"] for c in cands.values() for r in c["rungs"].values())
    # the survivor resumed from its rung-1 checkpoint (--stop-epoch): one evaluation per epoch, 0 then 1
    winner_dir = Path(cands[chosen["cid"]]["run_dir"])
    evals = [json.loads(x) for x in (winner_dir / "metrics.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in evals if e["event"] == "eval"] == [0, 1]
    assert "resuming from" in (winner_dir / "trainer.log").read_text()
    assert 1 <= chosen["epochs"] <= 2
    summary = json.loads((out / "seed0" / "summary.json").read_text())
    assert summary["test"]["mrr"] > 0 and summary["epochs_completed"] == chosen["epochs"]
    assert summary["config"]["model"]["hidden"] == chosen["config"]["hidden"]
    assert summary["config"]["data"]["shards"] == chosen["shards"]  # the final seed trains on the chosen views
    # seed 1 is the stage's seed: it evaluated the best.pt of the stage's run of the chosen views instead of
    # training the same weights again; seed 0, the search seed, the winner's best.pt when uniform was kept,
    # and it trained on the hard views when they were kept (its uniform weights do not apply)
    seed1 = json.loads((out / "seed1" / "summary.json").read_text())
    stage_weights = (Path(negatives["runs"][f"{negatives['chosen']:g}"]) / "best.pt").resolve()
    assert seed1["weights_from"] == str(stage_weights) and seed1["epochs_completed"] == chosen["epochs"]
    assert seed1["config"]["data"]["shards"] == chosen["shards"] and seed1["test"]["mrr"] > 0
    reused = {"1": str(stage_weights)}
    if hard_won:
        assert "weights_from" not in summary and (out / "seed0" / "last.pt").exists()
    else:
        assert summary["weights_from"] == str((winner_dir / "best.pt").resolve())
        assert not (out / "seed0" / "last.pt").exists()
        reused["0"] = summary["weights_from"]
    assert {s: str(Path(w).resolve()) for s, w in search["reused_weights"].items()} == reused
    result = json.loads((out / "seed0" / "result.json").read_text())
    assert result["preset"] == "auto" and result["auto"]["cid"] == chosen["cid"]
    assert result["auto"]["hard_neg_fraction"] == negatives["chosen"]
    # valid and test were each evaluated once, at the chosen epoch, and valid/hard for the prior
    evals = [json.loads(x) for x in (out / "seed0" / "metrics.jsonl").read_text().splitlines()]
    e = chosen["epochs"] - 1
    assert [(r["split"], r["protocol"], r["epoch"]) for r in evals if r["event"] == "eval"] == [
        ("valid", "original", e), ("test", "original", e), ("valid", "hard", e)]
    # the heuristic prior: chosen on valid/hard, both rows reported, the blend's row beside the model's
    prior = search["prior"]["0"]
    assert prior["protocol"] == "valid/hard" and prior["epoch"] == e and len(prior["grid"]) == len(GRID)
    assert result["auto"]["prior"]["heuristic"] == prior["heuristic"] and result["auto"]["prior"]["valid"] == prior["valid"]
    blend = json.loads((out / "seed0" / "prior" / "result.json").read_text())
    assert blend["test"] == prior["test"] and blend["model"].startswith("PENCIL w/o features + ")
    models = [r["model"] for r in json.loads((out.parent / "results.json").read_text())["table"]]
    assert models == ["PENCIL w/o features", blend["model"], "CN", "AA", "RA"]
    if prior["weight"] == 0:
        assert prior["test"] == summary["test"]

    # a rerun reuses the finished candidates and the final seed: no trainer starts
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")}
    events.clear()
    assert main(argv) == 0
    again = json.loads((out / "search.json").read_text())
    assert all(r["reused"] for c in again["candidates"].values() for r in c["rungs"].values())
    assert again["budget_plan"]["probe"] == plan["probe"]  # the probes too
    assert again["chosen"] == chosen
    assert {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")} == mtimes


def _fake_trainers(searcher, names, now, slow):
    """run_trainers stand-in: every job trains `slow` x its probe's seconds per epoch, 2 slots packed as
    round_cost packs them, advancing the fake clock; it writes what the trainer would (summary, evaluations)."""
    def run(jobs, slots, stop_at=None, clock=None, device_flag="cpu"):
        wall = {}
        for cid, run_dir in ((c, j.run_dir) for c, j in jobs.items()):
            done = (json.loads((run_dir / "summary.json").read_text())["epochs_completed"]
                    if (run_dir / "summary.json").exists() else 0)
            epochs = int(jobs[cid].flags[jobs[cid].flags.index("--stop-epoch") + 1])
            wall[cid] = slow * SPE[names[cid]] * (epochs - done)
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "summary.json").write_text(json.dumps({"epochs_completed": epochs, "selection_metric": "mrr"}))
            with open(run_dir / "metrics.jsonl", "a") as f:
                for e in range(done, epochs):
                    f.write(json.dumps({"event": "eval", "split": "valid", "protocol": "original", "epoch": e,
                                        "mrr": 0.1 * (e + 1)}) + "\n")
        now[0] += max(sum(wall.values()) / slots, max(wall.values()))
        return wall, []
    return run


@pytest.mark.parametrize("slow, afford", [(2.0, False), (1.0, True), (0.5, True)])
def test_a_rung_slower_than_predicted_inflates_every_later_estimate(tmp_path, monkeypatch, slow, afford):
    """Rung 2 over a, b runs `slow` x the probe's time (fake clock, fake trainers): at 2 x, measured / predicted
    = 2 inflates the estimates, and the 4-epoch rung over b with the final seeds (40 x 2 + 2 rounds x 40 x 4 =
    400 s) no longer fits the 300 s left, where the probe's estimate (20 x 2 + 2 x 20 x 4 = 200 s) would have
    allowed it. Faster than predicted never deflates them."""
    from pipelines.auto import search as auto_search
    now = [0.0]
    searcher, names, _ = _searcher(tmp_path, 40.0 * slow + 300.0, now)
    cid = {v: k for k, v in names.items()}
    searcher.plan_first_rung(2, {cid[k]: {"sec_per_epoch": v} for k, v in SPE.items()})
    monkeypatch.setattr(auto_search, "run_trainers", _fake_trainers(searcher, names, now, slow))
    searcher.train([cid["a"], cid["b"]], 2)
    assert now[0] == 40.0 * slow and searcher.deadline - now[0] == 300.0  # b: 2 epochs x 20 s x slow
    ratio = max(slow, 1.0)
    assert searcher.timing["slowdown"] == ratio
    assert searcher.timing["measured"][cid["b"]] == {"2": {"sec_per_epoch": 20.0 * slow, "ratio": slow}}
    assert searcher.sec_per_epoch == {c: SPE[names[c]] * ratio for c in names}  # every candidate, untrained too
    assert round_cost(SPE, ["b"], 2, 4, 2, 3) == 200.0  # the probe alone: fits the 300 s left
    assert searcher.can_afford([cid["b"]], 4, 2) is afford
    assert searcher.final_cost(cid["b"], 4) == 2 * 20.0 * ratio * 4  # the final seeds: 2 rounds at the slowdown
