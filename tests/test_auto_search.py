"""--preset auto: statistics, candidate proposal, successive halving, hard validation negatives, and an
end-to-end run that proves the search never opens a test shard or test query file."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from common.datasets import PROTOCOLS, LinkDataset, Split
from common.datasets.base import training_graph
from common.datasets.edgelist import random_split_dataset
from common.graph import Graph
from common.graph_stats import graph_stats, hard_negatives
from common.heuristics import resource_allocation
from pipelines.auto_candidates import Candidate, propose, propose_samplings, rungs, successive_halving


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
    assert s.valid_neg_cn_fraction == pytest.approx(1 / 3) and s.easy_validation is False  # 1/3 >= 0.25
    assert s.valid_negatives == 3 and s.valid_positives == 1


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
    assert propose_samplings(40.0, 30.0, 200.0, "cpu") == [(1, 60), (1, 30)]  # n capped at the CPU's 60
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
    ds = _split_graph(1)
    edges = np.concatenate([ds.splits[s].pos for s in ("train", "valid", "test")])
    path.write_text("src,dst\n" + "".join(f"{u},{v}\n" for u, v in edges.tolist()))
    return path


@pytest.mark.slow
def test_auto_run_never_opens_test_before_the_choice_and_a_rerun_reuses_it(tmp_path, monkeypatch):
    from pipelines import auto_search
    from pipelines.run import main

    csv = _edge_csv(tmp_path / "geo_edges.csv")
    real_search = auto_search.search
    # two candidates on one sampling keep the run short; the search machinery is the real one
    monkeypatch.setattr(auto_search, "propose", lambda stats, device: [
        Candidate((1, 8), 32, 1, 2, 64, 1e-3, "constant", 64, 2),
        Candidate((1, 8), 64, 2, 2, 128, 1e-3, "cosine", 64, 2)])
    monkeypatch.setattr(auto_search, "FIRST_RUNG", {"cpu": 1, "cuda": 1})  # rungs 1, 2: the survivor resumes
    events = []

    def instrumented_search(searcher, rung_epochs):
        # Every test shard and test query file leaves the shard sets while the search runs: a trainer that
        # opened one would fail (FileNotFoundError), and with it the run. They come back after the choice.
        aside = tmp_path / "aside"
        moved = []
        for loc in searcher.shards.values():
            for f in Path(loc).iterdir():
                if f.name.startswith(("test-", "graph-test-")):
                    dest = aside / Path(loc).name / f.name
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(f, dest)
                    moved.append((dest, f))
        assert any(f.name == "test-original-queries.npz" for _, f in moved)
        try:
            chosen = real_search(searcher, rung_epochs)
        finally:
            for dest, f in moved:
                shutil.move(dest, f)
        events.append(chosen)
        return chosen

    monkeypatch.setattr(auto_search, "search", instrumented_search)
    argv = ["--dataset", str(csv), "--seeds", "0", "--out", str(tmp_path / "results"),
            "--shards", str(tmp_path / "shards"), "--num-cpus", "1", "--parallel-seeds", "2"]
    assert main(argv) == 0
    out = tmp_path / "results" / "auto" / "original"
    search = json.loads((out / "search.json").read_text())
    assert search["selection"]["protocol"] == "hard" and search["stats"]["easy_validation"]
    assert search["rungs"] == [1, 2] and len(search["candidates"]) == 2
    chosen = search["chosen"]
    assert chosen == events[0] and chosen == json.loads((out / "chosen.json").read_text())
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
    result = json.loads((out / "seed0" / "result.json").read_text())
    assert result["preset"] == "auto" and result["auto"]["cid"] == chosen["cid"]
    # valid and test were each evaluated once, at the chosen epoch
    evals = [json.loads(x) for x in (out / "seed0" / "metrics.jsonl").read_text().splitlines()]
    assert [(e["split"], e["epoch"]) for e in evals if e["event"] == "eval"] == [
        ("valid", chosen["epochs"] - 1), ("test", chosen["epochs"] - 1)]

    # a rerun reuses the finished candidates and the final seed: no trainer starts
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")}
    events.clear()
    assert main(argv) == 0
    again = json.loads((out / "search.json").read_text())
    assert all(r["reused"] for c in again["candidates"].values() for r in c["rungs"].values())
    assert again["chosen"] == chosen
    assert {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")} == mtimes
