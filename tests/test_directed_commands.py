"""The commands on a directed run (docs/recommend.md#directed-runs, docs/serve.md#directed-runs): retrieval that
never repeats a link in the asked direction, serve's ordered edits, the one-line refusals, then (slow) recommend,
score and serve end to end on a tiny directed run, against sets worked out from the edge list itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest

from common.datasets import DatasetError
from common.graph import DiGraph
from common.retrieval import Allowed, retrieve
from pipelines.recommend.direction import (
    DirectionError,
    check_has_direction,
    check_model_direction,
    known_links,
    resolve_direction,
)
from pipelines.recommend.engine import RecConfig
from pipelines.serve.handlers import Limits, recommend_query
from pipelines.serve.state import GraphState, ServeError

ROOT = Path(__file__).resolve().parents[1]
# The hand-drawn graph of tests/test_heuristics_directed.py: out-neighbours 0 -> 1, 2; 1 -> 2, 3; 2 -> 1, 3; 3 -> 0;
# 4 -> 1, 3
EDGES = np.array([[0, 1], [0, 2], [1, 2], [1, 3], [2, 1], [2, 3], [3, 0], [4, 1], [4, 3]])
HAND = DiGraph.from_edges(EDGES, 5)


@pytest.mark.parametrize(
    "direction, want",
    [
        ("out", {0: {3, 4}, 1: {0, 4}, 3: {1, 2, 4}, 4: {0, 2}}),  # every node but itself and its out-neighbours
        ("in", {0: {1, 2, 4}, 1: {3}, 3: {0}, 4: {0, 1, 2, 3}}),  # ... and its in-neighbours
    ],
)
def test_retrieval_never_repeats_a_link_in_its_direction(direction, want):
    """A pool as large as the graph holds exactly the allowed nodes: a reverse-only neighbour is allowed (3 -> 0
    exists, so 0 may be proposed to 3 for out-links), a link in the asked direction never."""
    union = HAND.undirected()
    for method in ("ra", "ppr", "mix"):
        pool = retrieve(union, [0, 1, 3, 4], method, 5, allowed=Allowed(known=known_links(HAND, direction)), fill=True)
        got = {int(q): set(pool.cand[i][pool.cand[i] >= 0].tolist()) for i, q in enumerate(pool.queries)}
        assert got == want, method


def test_serve_edits_keep_their_direction():
    """u -> v added is not v -> u; removing u -> v drops the union's pair only where v -> u is no edge."""
    state = GraphState(HAND.undirected(), None, 10, HAND)
    assert not state.graph.has_edge(0, 4)
    state.apply([{"seq": 1, "add": [[0, 4]], "remove": [[0, 1], [1, 2]]}])
    g, u = state.digraph, state.graph
    assert g.has_edge(0, 4) and not g.has_edge(4, 0) and u.has_edge(0, 4) and u.has_edge(4, 0)
    assert not g.has_edge(0, 1) and not u.has_edge(0, 1)  # 1 -> 0 is no edge: the pair is gone
    assert not g.has_edge(1, 2) and g.has_edge(2, 1) and u.has_edge(1, 2)  # 2 -> 1 stays: so does the pair
    assert state.summary() == {"seq": 1, "nodes": 5, "edges": 8, "directed": True}
    assert state.base_fingerprint != GraphState(HAND.undirected(), None, 10).base_fingerprint  # logs are apart


def test_direction_refusals_are_one_line():
    with pytest.raises(DirectionError, match="--direction in: run r is undirected"):
        resolve_direction("in", None, "run r")
    assert resolve_direction(None, None, "run r") is None and resolve_direction(None, HAND, "run r") == "out"
    directed_model = SimpleNamespace(cfg=SimpleNamespace(edge_types=2))
    with pytest.raises(DirectionError, match="trained on a directed set .* undirected graph"):
        check_model_direction(directed_model, None, "ck")
    with pytest.raises(DirectionError, match="its set is directed but its model reads no directions"):
        check_model_direction(SimpleNamespace(cfg=SimpleNamespace(edge_types=1)), HAND, "ck")
    both = DiGraph.from_edges(np.concatenate([EDGES, EDGES[:, ::-1]]), 5)
    with pytest.raises(DatasetError, match="every edge appears in both directions, so the file has no direction"):
        check_has_direction("snap.csv", both, HAND)
    check_has_direction("snap.csv", HAND, HAND)  # a directed snapshot passes
    with pytest.raises(ServeError, match="direction='in': this service's run is undirected"):
        recommend_query("1", {"direction": "in"}, RecConfig(), Limits())
    with pytest.raises(ServeError, match="use out"):
        recommend_query("1", {"direction": "up"}, RecConfig(direction="out"), Limits())
    assert recommend_query("1", {"direction": "in"}, RecConfig(direction="out"), Limits()).cfg.direction == "in"


# ---------------------------------------------------------------------------- end to end (slow)
def follows(seed: int = 3) -> list[tuple[int, int]]:
    """40 people, each edge u -> v kept, its reverse added 40 % of the time."""
    rng = np.random.default_rng(seed)
    rows = set()
    for a, b in rng.integers(0, 40, (160, 2)):
        if a != b:
            rows.add((int(a), int(b)))
            if rng.random() < 0.4:
                rows.add((int(b), int(a)))
    return sorted(rows)


@pytest.fixture(scope="module")
def directed_run(tmp_path_factory):
    from tests.conftest import HAS_RAY, tiny_edge_list_run

    if not HAS_RAY:
        pytest.skip("ray is not installed (CI installs it; the GPU image lacks it)")
    rows = follows()
    run = tiny_edge_list_run(tmp_path_factory.mktemp("directed"), rows, name="follows.csv", directed=True)
    return {**run, "edges": set(rows), "nodes": sorted({n for r in rows for n in r})}


def pencil(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines", *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["out", "in"])
def test_recommend_proposes_exactly_the_links_not_there(directed_run, tmp_path, direction):
    """k = every node: each node's list is every node but itself and its out-neighbours (in-links: in-neighbours),
    worked out from the edge list; a reverse-only neighbour is proposed, never an existing link."""
    out, edges = tmp_path / "recs.parquet", directed_run["edges"]
    proc = pencil(
        "recommend", "--checkpoint", directed_run["run"], "--all-nodes", "--k", 40, "--pool", 40,
        "--direction", direction, "--out", out, "--no-progress", "--device", "cpu",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    t = pq.read_table(out).to_pandas()
    for u in directed_run["nodes"]:
        linked = {b for a, b in edges if a == u} if direction == "out" else {a for a, b in edges if b == u}
        assert set(t[t.node == u].candidate) == set(directed_run["nodes"]) - {u} - linked, u
    back = {(b, a) for a, b in edges if (b, a) not in edges}  # reverse-only pairs: proposed
    pairs = set(zip(t.node, t.candidate)) if direction == "out" else set(zip(t.candidate, t.node))
    assert back <= pairs and not pairs & edges


@pytest.mark.slow
@pytest.mark.parametrize("ray", [False, True])
def test_recommend_scores_are_those_of_score_in_the_pairs_order(directed_run, tmp_path, ray):
    """With no rank prior and a pool of every node, each recommendation's score is the probability `score` gives
    the ordered pair (query -> candidate; --direction in: candidate -> query). The query has the largest id, so
    every pair it makes is (larger, smaller): a sampler that draws pairs as (min, max) scores their reverses."""
    q, n = max(directed_run["nodes"]), len(directed_run["nodes"])
    (tmp_path / "q.txt").write_text(f"{q}\n")
    for direction in ("out", "in"):
        out = tmp_path / f"{direction}.parquet"
        proc = pencil(
            "recommend", "--checkpoint", directed_run["run"], "--nodes", tmp_path / "q.txt", "--k", n, "--pool", n,
            "--prior-weight", 0, "--direction", direction, "--graph", "all", "--device", "cpu", "--no-progress",
            "--out", out, *(["--ray", "--num-cpus", 2] if ray else []),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        recs = pq.read_table(out).to_pydict()
        pairs = [(q, c) if direction == "out" else (c, q) for c in recs["candidate"]]
        assert pairs and all(a != b for a, b in pairs)
        (tmp_path / "pairs.csv").write_text("src,dst\n" + "".join(f"{a},{b}\n" for a, b in pairs))
        proc = pencil(
            "score", "--checkpoint", directed_run["run"], "--pairs", tmp_path / "pairs.csv", "--out",
            tmp_path / "s.parquet", "--graph", "all", "--device", "cpu",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        scored = pq.read_table(tmp_path / "s.parquet").column("score").to_pylist()
        assert recs["score"] == pytest.approx(scored, abs=1e-6)


@pytest.mark.slow
def test_score_keeps_each_pair_in_its_order(directed_run, tmp_path):
    edges = directed_run["edges"]
    one_way = sorted((a, b) for a, b in edges if (b, a) not in edges)[:5]
    pairs = [p for a, b in one_way for p in ((a, b), (b, a))]
    (tmp_path / "pairs.csv").write_text("src,dst\n" + "".join(f"{a},{b}\n" for a, b in pairs))
    proc = pencil(
        "score", "--checkpoint", directed_run["run"], "--pairs", tmp_path / "pairs.csv", "--out",
        tmp_path / "s.parquet", "--graph", "all", "--device", "cpu",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = pq.read_table(tmp_path / "s.parquet").to_pydict()
    assert list(zip(got["src"], got["dst"])) == pairs
    assert "5 of 10 pairs are already edges" in proc.stderr  # the pairs u -> v, not their reverses
    logit = np.array(got["logit"])
    assert (logit[0::2] != logit[1::2]).any()  # the model reads direction: u -> v and v -> u differ

    # a snapshot written both ways has no direction: refused in one line
    both = sorted(edges | {(b, a) for a, b in edges})
    (tmp_path / "both.csv").write_text("src,dst\n" + "".join(f"{a},{b}\n" for a, b in both))
    proc = pencil(
        "score", "--checkpoint", directed_run["run"], "--pairs", tmp_path / "pairs.csv", "--out",
        tmp_path / "t.parquet", "--graph", tmp_path / "both.csv",
    )  # fmt: skip
    last = proc.stderr.strip().splitlines()[-1]  # logging before it; the refusal is one line, no traceback
    assert proc.returncode != 0 and "every edge appears in both directions" in last and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_serve_keeps_direction_in_edits_and_answers(directed_run, tmp_path):
    from bench.serve import request, service
    from pipelines.core.ray_head import free_ports

    def call(method, path, body=None, headers=None):
        status, text = request(port, method, path, body, headers)
        return status, json.loads(text)

    edges, nodes = directed_run["edges"], directed_run["nodes"]
    u, v = next((a, b) for a in nodes for b in nodes if a != b and (a, b) not in edges and (b, a) not in edges)
    port, auth = free_ports(1)[0], {"Authorization": "Bearer t0k3n"}
    env = {"PENCIL_SERVE_TOKEN": "t0k3n"}
    with service(directed_run["run"], tmp_path / "state", port, env=env, log_path=tmp_path / "serve.log"):
        status, body = call("POST", "/edges", {"add": [[u, v]]}, auth)
        assert status == 200 and body["directed"] and body["edges"] == len(edges) + 1, body
        status, body = call("GET", f"/neighbors/{u}")
        assert v in body["out"] and v not in body["in"] and v in body["neighbors"]
        recs = lambda node, q="": {r["candidate"] for r in call("GET", f"/recommend/{node}?k=40&pool=40{q}")[1][
            "recommendations"]}  # fmt: skip
        assert v not in recs(u) and u in recs(v)  # u -> v is there; v -> u is not
        assert u not in recs(v, "&direction=in") and v in recs(u, "&direction=in")
        status, body = call("POST", "/score", {"pairs": [[u, v], [v, u]]})
        assert status == 200 and [[r["src"], r["dst"]] for r in body["scores"]] == [[u, v], [v, u]]


@pytest.mark.slow
def test_evaluate_ranks_each_positive_among_its_out_links(directed_run, tmp_path):
    """With a pool of every node, every test positive u -> v is in u's pool, also where v -> u is a training
    edge (leaving out u's neighbours either way, as for an undirected run, would drop those targets)."""
    from common.datasets import DatasetSpec, load_dataset

    ds = load_dataset(DatasetSpec(str(directed_run["root"] / "follows.csv"), directed=True))
    pos, train = ds.splits["test"].pos, ds.out_graph_for("test")
    assert train.has_edge(pos[:, 1], pos[:, 0]).any()  # some target answers a link back: the case that matters
    out = tmp_path / "m.json"
    proc = pencil("evaluate", directed_run["run"], "--splits", "test", "--pool", 40, "--out", out, "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(out.read_text())["splits"]["test"]["recall@40"] == 1.0


def test_full_ranking_keeps_a_target_that_answers_a_link_back():
    """0 -> 3 is held out and 3 -> 0 is an edge: among 0's out-links 3 competes (recall 1 at a whole-graph pool);
    leaving out 0's neighbours either way, as an undirected run does, loses it."""
    from pipelines.recommend.ranking import full_ranking

    cfg, pos, union = RecConfig(k=1, pool=5, retriever="ra"), np.array([[0, 3]]), HAND.undirected()
    directed = full_ranking(union, pos, pos, cfg, allowed=Allowed(known=HAND))
    assert directed["recall@5"] == 1.0
    assert full_ranking(union, pos, pos, cfg)["recall@5"] == 0.0
