"""Recommendations of a typed run (relation types): one relation's missing tails (or heads, --direction in)
of each query, never a triple that exists; the one-line refusals; (slow) `recommend --relation` end to end, its
scores those of `score` for the same triples. Hand-made graphs with hand-computed answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from common import snapshot
from common.datasets import DatasetSpec, load_dataset
from common.retrieval import Allowed, retrieve
from pipelines.recommend.direction import known_links
from pipelines.recommend.relation import (
    RelationError,
    among,
    relation_kind,
    relation_links,
    resolve_relation,
    run_triples,
)
from tests.test_typed_kg import typed_run, write_kg  # noqa: F401 (typed_run: a fixture)
from tests.test_user_item_typed import write_ratings

ROOT = Path(__file__).resolve().parents[1]


def pools(ds, relation: str, direction: str, queries) -> dict[int, set[int]]:
    """Every candidate each query may get (a pool of every node): what the recommendation can propose, as
    pipelines.recommend.job restricts it (the relation's triples, and its node kind where the set has kinds)."""
    triples = run_triples(ds, snapshot.WHOLE)
    rel = ds.relations.names.index(relation)
    known = known_links(relation_links(triples, rel, ds.num_nodes), direction)
    allowed = Allowed(candidates=among(None, relation_kind(ds.relations, rel, direction)), known=known)
    pool = retrieve(snapshot.whole_graph(ds), queries, "ra", ds.num_nodes, allowed=allowed, fill=True)
    return {int(q): set(pool.cand[i][pool.cand[i] >= 0].tolist()) for i, q in enumerate(pool.queries)}


# the tiny KG of tests/test_typed_kg.py: 007 -> 0, 010 -> 1, 012 -> 2, 013 -> 3, 099 -> 4 (in test only)
@pytest.mark.parametrize(
    "relation, direction, want",
    [
        # b_rel: 007 -> 010, 013 -> 007, 010 -> 013 (train), 012 -> 010 (test). 007's b-tails: not 010 (there),
        # 013 is proposed (013 -> 007 is the other direction); 012's: not 010 (a test triple is a triple too)
        ("b_rel", "out", {0: {2, 3, 4}, 2: {0, 3, 4}}),
        # c_rel: 012 -> 013, 013 -> 010 (train), 007 -> 012, 010 -> 007 (valid). 010's c-tails: not 007; 012 (linked
        # by a_rel) and 013 (by b_rel, and c_rel the other way) are proposed
        ("c_rel", "out", {1: {2, 3, 4}, 2: {0, 1, 4}}),
        # in-links: the heads of a_rel into 007 are 012 (train) and 099 (test): 010 and 013 are left
        ("a_rel", "in", {0: {1, 3}, 1: {2, 3, 4}}),
    ],
)
def test_a_relation_never_repeats_its_own_triples(tmp_path, relation, direction, want):
    ds = load_dataset(DatasetSpec(str(write_kg(tmp_path / "kg"))))
    assert pools(ds, relation, direction, sorted(want)) == want


# users u1..u4 are nodes 0-3, items a..h 4-11 (tests/test_user_item_typed.py); u1 rated a-g (g in valid), u2 all
# but d (h in test), u4 only a (test); a was rated by every user, h by u2 alone
@pytest.mark.parametrize(
    "direction, want",
    [
        ("out", {0: {11}, 1: {7}, 3: set(range(5, 12))}),  # only items, never one the user rated, never a user
        ("in", {4: set(), 11: {0, 2, 3}}),  # an item's missing users: never an item
    ],
)
def test_node_kinds_keep_a_relation_between_its_kinds(tmp_path, direction, want):
    ds = load_dataset(DatasetSpec(str(write_ratings(tmp_path))))
    assert pools(ds, "user->item", direction, sorted(want)) == want


def test_a_typed_split_graph_excludes_the_training_triples_only(tmp_path):
    ds = load_dataset(DatasetSpec(str(write_kg(tmp_path / "kg"))))
    train = run_triples(ds, "train")
    assert len(train) == 8 and len(run_triples(ds, snapshot.WHOLE)) == 12
    b = relation_links(train, ds.relations.names.index("b_rel"), ds.num_nodes)
    assert not b.has_edge(np.array([2]), np.array([1]))[0]  # 012 -b-> 010 is a test triple: not in train's
    with pytest.raises(RelationError, match="--graph today.csv: a typed run recommends on its own triples for now"):
        run_triples(ds, "today.csv")


def test_relation_refusals_are_one_line():
    names = ("a_rel", "b_rel")
    assert resolve_relation("b_rel", names, "run r") == 1 and resolve_relation(None, (), "run r") is None
    with pytest.raises(RelationError, match=r"^--relation likes: unknown relation; run r knows a_rel, b_rel$"):
        resolve_relation("likes", names, "run r")
    with pytest.raises(RelationError, match=r"^--relation likes: run r is untyped \(its links have no relation\)"):
        resolve_relation("likes", (), "run r")
    with pytest.raises(RelationError, match="^--relation: run r is typed; recommend one relation at a time, one of a_"):
        resolve_relation(None, names, "run r")


def pencil(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines", *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow  # a preprocess run and a trainer run (the fixture), then recommend and score
def test_recommend_relation_ranks_by_the_models_triple_scores(typed_run, tmp_path):
    """a and b touch only each other: a -r1-> b, b -r0-> a. For a, r1 never proposes b (the triple is there), r0
    does (b -r0-> a is the other direction); with --direction in, r0 never proposes b as a head. With no rank prior
    and a pool of every entity, each score is the probability `score` gives the same triple."""
    run, n = typed_run / "run", len(load_dataset(DatasetSpec(str(typed_run / "pair"))).node_ids)
    config = json.loads((run / "config.json").read_text())
    assert config["protocol"] == "kg"  # picked by the trainer for a typed set: the fixture names no --protocol
    from trainer.config import config_from_args

    given = ["--preset", "tiny", "--shards", config["data"]["shards"], "--out", tmp_path / "r", "--protocol", "heart"]
    assert config_from_args(list(map(str, given))).protocol == "heart"  # a protocol named is kept (and checked)
    (tmp_path / "q.txt").write_text("a\n")

    def recs(relation, *extra):
        out = tmp_path / f"{relation}{len(extra)}.parquet"
        proc = pencil(
            "recommend", "--checkpoint", run, "--nodes", tmp_path / "q.txt", "--relation", relation, "--graph", "train",
            "--k", n, "--pool", n, "--prior-weight", 0, "--device", "cpu", "--no-progress", "--out", out, *extra,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        return pq.read_table(out).to_pydict()

    r1, r0, r0_in = recs("r1"), recs("r0"), recs("r0", "--direction", "in")
    assert "b" not in r1["candidate"] and len(r1["candidate"]) == n - 2  # every entity but a and b
    assert "b" in r0["candidate"] and len(r0["candidate"]) == n - 1
    assert "b" not in r0_in["candidate"]
    on_ray = recs("r0", "--direction", "in", "--ray", "--num-cpus", 2)  # Ray tasks and actors: the same triples
    assert on_ray["candidate"] == r0_in["candidate"] and on_ray["score"] == pytest.approx(r0_in["score"], abs=1e-6)
    assert r0["rank"] == list(range(1, n)) and r0["score"] == sorted(r0["score"], reverse=True)
    pairs = tmp_path / "pairs.csv"
    rows = [f"a,{c},r0\n" for c in r0["candidate"]] + [f"{c},a,r0\n" for c in r0_in["candidate"]]  # in: c -r0-> a
    pairs.write_text("src,dst,relation\n" + "".join(rows))
    out = tmp_path / "scores.parquet"
    proc = pencil(
        "score", "--checkpoint", run, "--pairs", pairs, "--graph", "train", "--device", "cpu", "--out", out
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert r0["score"] + r0_in["score"] == pytest.approx(pq.read_table(out).column("score").to_pylist(), abs=1e-6)
    # one-line refusals of the command itself
    for args, want in (
        (["--relation", "likes"], "--relation likes: unknown relation; run "),
        ([], "recommend one relation at a time, one of r0, r1"),
    ):
        proc = pencil("recommend", "--checkpoint", run, "--all-nodes", "--out", tmp_path / "x.parquet", *args)
        last = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode != 0 and want in last and "Traceback" not in proc.stderr, proc.stderr[-2000:]
