"""Node kinds of a typed graph (docs/own-graph.md, node kinds): `--nodes` with a `type` (or `kind`) column gives each
entity its kind, each relation joins the kinds its training triples show, and training corruptions, valid / test
corruptions, recommendations and a service's answers stay within them; every documented one-line refusal; untyped
and kind-free inputs keep their fingerprints and shard-set keys. A hand-made graph of 3 kinds and 2 relations with
hand-computed answers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from common import snapshot
from common.datasets import DatasetError, DatasetSpec, load_dataset
from common.retrieval import Allowed, retrieve
from pipelines.recommend.direction import known_links
from pipelines.recommend.relation import among, relation_kind, relation_links, run_triples
from preprocess.config import CandidateConfig
from preprocess.kg_candidates import typed_training_view

ROOT = Path(__file__).resolve().parents[1]

# Sorted text ids: d1 0, d2 1, d3 2 (drugs), g1 3, g2 4 (genes), x1 5, x2 6, x3 7, x4 8 (diseases; x4 is listed in
# --nodes and in no triple). Kinds by name: disease 0, drug 1, gene 2. Relations: targets 0 (drug -> gene), treats 1
# (drug -> disease).
TRAIN = [
    ("d1", "treats", "x1"), ("d2", "treats", "x2"), ("d3", "treats", "x3"), ("d1", "treats", "x2"),
    ("d1", "targets", "g1"), ("d2", "targets", "g2"), ("d3", "targets", "g1"),
]  # fmt: skip
VALID = [("d2", "treats", "x1")]
TEST = [("d3", "targets", "g2")]
KINDS = {**dict.fromkeys(("d1", "d2", "d3"), "drug"), "g1": "gene", "g2": "gene"}
KINDS |= dict.fromkeys(("x1", "x2", "x3", "x4"), "disease")
DRUGS, GENES, DISEASES = [0, 1, 2], [3, 4], [5, 6, 7, 8]


def write_graph(tmp_path: Path, train=TRAIN, valid=VALID, kinds=KINDS, column: str = "type") -> tuple[Path, Path]:
    """The KG folder and its --nodes file."""
    folder = tmp_path / "kg"
    folder.mkdir(exist_ok=True)
    for name, rows in (("train", train), ("valid", valid), ("test", TEST)):
        (folder / f"{name}.txt").write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in rows))
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(f"node,{column}\n" + "".join(f"{n},{k}\n" for n, k in kinds.items()))
    return folder, nodes


def load(tmp_path, **kw):
    folder, nodes = write_graph(tmp_path, **kw)
    return load_dataset(DatasetSpec(str(folder), nodes=str(nodes)))


def pairs(a) -> set:
    return {tuple(p) for p in np.asarray(a).reshape(-1, 2).tolist() if p[0] >= 0}


def test_each_relation_joins_the_kinds_its_training_triples_show(tmp_path):
    ds = load(tmp_path)
    assert ds.node_ids.tolist() == ["d1", "d2", "d3", "g1", "g2", "x1", "x2", "x3", "x4"]
    rel = ds.relations
    assert rel.names == ("targets", "treats") and rel.kinds.names == ("disease", "drug", "gene")
    assert rel.kinds.of.tolist() == [1, 1, 1, 2, 2, 0, 0, 0, 0] and rel.sides == (0, 2)
    ends = {r: [e.tolist() for e in rel.ends[r]] for r in (0, 1)}
    assert ends == {0: [DRUGS, GENES], 1: [DRUGS, DISEASES]}
    # valid (d2, treats, x1), filtered by train + valid: heads among the drugs but d2 and d1 (d1 treats x1): d3;
    # tails among the diseases but x1 and x2 (d2 treats x2): x3 and the isolated x4. Never a gene.
    neg = ds.splits["valid"].neg["kg"][0]
    assert pairs(neg[:50]) == {(2, 5)} and pairs(neg[50:]) == {(1, 7), (1, 8)}
    # test (d3, targets, g2), filtered by every triple: heads d1 (d2 targets g2); tails none (g1 is d3's already)
    neg = ds.splits["test"].neg["kg"][0]
    assert pairs(neg[:50]) == {(0, 4)} and pairs(neg[50:]) == set()


def test_an_edge_list_with_a_relation_column_takes_kinds_from_a_kind_column(tmp_path):
    folder, nodes = write_graph(tmp_path, column="Kind")
    rows = [(*t, s) for s, part in (("train", TRAIN), ("valid", VALID), ("test", TEST)) for t in part]
    path = tmp_path / "facts.csv"
    path.write_text("src,relation,dst,split\n" + "".join(",".join(r) + "\n" for r in rows))
    ds = load_dataset(DatasetSpec(str(path), relation="relation", nodes=str(nodes)))
    kg = load_dataset(DatasetSpec(str(folder), nodes=str(nodes)))
    assert ds.relations.kinds.names == ("disease", "drug", "gene")
    assert all(np.array_equal(a, b) for r in (0, 1) for a, b in zip(ds.relations.ends[r], kg.relations.ends[r]))
    assert pairs(ds.splits["valid"].neg["kg"]) == pairs(kg.splits["valid"].neg["kg"])


def test_training_corruptions_stay_within_the_kinds(tmp_path):
    ds = load(tmp_path)
    view = typed_training_view(ds, CandidateConfig(neg_ratio=40), np.random.default_rng(0))
    neg = view.label == 0
    got = {(r, s, d) for r, s, d in zip(view.rel[neg].tolist(), view.src[neg].tolist(), view.dst[neg].tolist())}
    train = {(1, 0, 5), (1, 1, 6), (1, 2, 7), (1, 0, 6), (0, 0, 3), (0, 1, 4), (0, 2, 3)}
    # head or tail replaced within its kind: every drug-disease pair of treats but its 4 training triples, every
    # drug-gene pair of targets but its 3 (the valid triple d2 treats x1 is no training triple: a negative here)
    want = {(1, h, t) for h in DRUGS for t in DISEASES} | {(0, h, t) for h in DRUGS for t in GENES}
    assert got == want - train


def recommendable(ds, relation: str, direction: str, queries) -> dict[int, set[int]]:
    """Every candidate each query may get (a pool of every node), as pipelines.recommend.job restricts it."""
    triples = run_triples(ds, snapshot.WHOLE)
    rel = ds.relations.names.index(relation)
    known = known_links(relation_links(triples, rel, ds.num_nodes), direction)
    allowed = Allowed(candidates=among(None, relation_kind(ds.relations, rel, direction)), known=known)
    pool = retrieve(snapshot.whole_graph(ds), queries, "ra", ds.num_nodes, allowed=allowed, fill=True)
    return {int(q): set(pool.cand[i][pool.cand[i] >= 0].tolist()) for i, q in enumerate(pool.queries)}


@pytest.mark.parametrize(
    "relation, direction, want",
    [
        # a drug's missing diseases: d1 treats x1, x2; d2 x2 (train), x1 (valid); d3 x3: the isolated x4 too
        ("treats", "out", {0: {7, 8}, 1: {7, 8}, 2: {5, 6, 8}}),
        # a gene's missing drugs: g1 is targeted by d1, d3; g2 by d2 (train) and d3 (test)
        ("targets", "in", {3: {1}, 4: {0}}),
        ("targets", "out", {0: {4}, 1: {3}, 2: set()}),
    ],
)
def test_recommendations_propose_only_the_relations_kind(tmp_path, relation, direction, want):
    assert recommendable(load(tmp_path), relation, direction, sorted(want)) == want


def test_a_service_keeps_the_kinds_in_answers_and_edits(tmp_path):
    from pipelines.serve.state import ServeError, serving_state

    s = serving_state(load(tmp_path), "all", 10)[0]
    assert s.typed.candidates(1, "out").tolist() == DISEASES and s.typed.candidates(0, "in").tolist() == DRUGS
    with pytest.raises(ServeError) as err:
        s.edit_record({"add": [["g1", "x1", "treats"]]})  # a gene as the head of treats
    assert err.value.status == 400 and "its head is of another node kind than relation 'treats'" in err.value.message
    s.apply([{**s.edit_record({"add": [["d1", "x9", "treats"]]}), "seq": 1}])  # x9: a new disease
    assert s.typed.candidates(1, "out").tolist() == [*DISEASES, 9] and 9 not in s.typed.candidates(0, "out")


def test_a_relation_across_kinds_is_retrieved_by_three_hop_paths(tmp_path):
    """d1's missing diseases: its 2-hop nodes are drugs (d2 by x1, x2; d3 by g1), none proposable, so without the
    kinds the RA pool is empty; retrieved across kinds (as a bipartite graph's), the path d1-g1-d3-x3 gives x3 the
    score 1/deg(g1) * 1/deg(d3) = 1/2 * 1/3 on the whole graph (d3 - x3, g1, g2; g1 - d1, d3). x4 has no path."""
    from pipelines.recommend.relation import relation_kinds

    ds = load(tmp_path)
    triples = run_triples(ds, snapshot.WHOLE)
    known = known_links(relation_links(triples, 1, ds.num_nodes), "out")
    kinds = relation_kinds(ds.relations, 1, "out")
    assert kinds.to.tolist() == [[True, False, False]] * 3  # diseases proposed, whatever the query's kind
    graph, cand = snapshot.whole_graph(ds), relation_kind(ds.relations, 1, "out")
    across = retrieve(graph, [0], "ra", 3, allowed=Allowed(candidates=cand, known=known, kinds=kinds))
    assert across.cand.tolist() == [[7, -1, -1]] and across.score[0, 0] == pytest.approx(1 / 6)
    assert retrieve(graph, [0], "ra", 3, allowed=Allowed(candidates=cand, known=known)).count.tolist() == [0]
    # a disease as the query (its own kind proposed): 2-hop paths in the same block; x1 -> x2 by d1 and d2
    mixed = retrieve(graph, [0, 5], "ra", 3, allowed=Allowed(candidates=cand, known=known, kinds=kinds))
    assert mixed.cand.tolist() == [[7, -1, -1], [6, -1, -1]] and mixed.score[1, 0] == pytest.approx(1 / 3 + 1 / 3)
    assert relation_kinds(ds.relations, 0, "in").to[:, 1].all()  # targets, in-links: drugs


def test_bipartite_sides_are_the_two_kind_case():
    """--bipartite's side flags and the same two kinds given as Kinds retrieve the same pools (one path)."""
    from common.graph import Graph
    from common.retrieval import Kinds

    rng = np.random.default_rng(0)
    edges = {(int(u), int(30 + i)) for u, i in rng.integers(0, [30, 20], size=(120, 2))}
    g = Graph.from_edges(np.array(sorted(edges)), num_nodes=50)
    side = np.arange(50) < 30
    kinds = Kinds.sides(side)
    assert kinds.of.tolist() == [0] * 30 + [1] * 20 and kinds.to.tolist() == [[False, True], [True, False]]
    for method in ("ra", "aa", "ppr", "mix"):
        a = retrieve(g, np.arange(50), method, 8, allowed=Allowed(side=side), fill=True)
        b = retrieve(g, np.arange(50), method, 8, allowed=Allowed(kinds=kinds), fill=True)
        assert np.array_equal(a.cand, b.cand) and np.array_equal(a.score, b.score), method
        r, c, _ = a.pairs()
        assert (side[r] != side[c]).all()
    with pytest.raises(ValueError, match="side and kinds: the sides of a bipartite graph are two kinds; give one"):
        retrieve(g, [0], "ra", 3, allowed=Allowed(side=side, kinds=kinds))


def test_bipartite_on_a_typed_run_is_refused_its_kinds_come_from_its_set(tmp_path):
    from pipelines.recommend.engine import RecommendError
    from pipelines.recommend.job import RecommendConfig, bipartite_kinds

    cfg = RecommendConfig(checkpoint="run", out="recs.parquet", bipartite=True)
    with pytest.raises(RecommendError, match=r"--bipartite: a typed run's node kinds come from its set .*drop --bip"):
        bipartite_kinds(cfg, load(tmp_path), 9, "kg")


def test_a_service_retrieves_across_kinds_and_a_created_node_takes_its_kind(tmp_path):
    from pipelines.serve.state import serving_state

    s = serving_state(load(tmp_path), "all", 10)[0]
    k = s.typed.retrieval_kinds(1, "out", 9)
    assert k.of.tolist() == [1, 1, 1, 2, 2, 0, 0, 0, 0] and k.to[:, 0].all() and not k.to[:, 1:].any()
    s.apply([{**s.edit_record({"add": [["d9", "g1", "targets"]]}), "seq": 1}])  # d9: a new drug
    assert s.typed.retrieval_kinds(0, "in", 11).of.tolist()[9:] == [1, 3]  # node 10: none yet (an extra kind)


BAD = [
    # an empty kind
    (dict(kinds={**KINDS, "x2": ""}), r"nodes.csv: column 'type' is empty in data row 7; give every node its kind"),
    # a node of a triple the list lacks
    (
        dict(kinds={k: v for k, v in KINDS.items() if k != "x3"}),
        r"nodes.csv: node 'x3' of the triples of .*kg is not listed \(1 such\); with a 'type' column every node "
        r"needs a row: add it with its type",
    ),
    # a relation whose training triples join two pairs of kinds
    (
        dict(train=[*TRAIN, ("g2", "treats", "x3")]),
        r"train.txt: relation 'treats' joins two pairs of node kinds in its training triples: \(drug, disease\) as "
        r"in d1 -> x1, and \(gene, disease\) as in g2 -> x3; a relation joins one head kind to one tail kind: "
        r"correct those nodes' type in .*nodes.csv, or split the relation in two",
    ),
    # a valid triple across other kinds than its relation's training triples
    (
        dict(valid=[("d2", "treats", "g1")]),
        r"valid.txt: the valid triple d2 -> g1 of relation 'treats' joins \(drug, gene\), its training triples "
        r"\(drug, disease\); correct those nodes' type in .*nodes.csv, or correct the triple",
    ),
]


@pytest.mark.parametrize("kw, message", BAD)
def test_bad_kinds_are_refused_in_one_line(tmp_path, kw, message):
    with pytest.raises(DatasetError, match=message) as err:
        load(tmp_path, **kw)
    assert "\n" not in str(err.value)


def test_a_node_listed_with_two_kinds_is_refused(tmp_path):
    folder, nodes = write_graph(tmp_path)
    nodes.write_text(nodes.read_text() + "d1,gene\n")
    with pytest.raises(DatasetError, match=r"node 'd1' is listed with two kinds, drug and gene; give each node one"):
        load_dataset(DatasetSpec(str(folder), nodes=str(nodes)))


def test_kinds_of_an_untyped_graph_are_refused_saying_what_they_need(tmp_path):
    _, nodes = write_graph(tmp_path)
    edges = tmp_path / "edges.csv"
    edges.write_text("src,dst\nd1,x1\nd2,x2\nd3,x3\nd1,g1\nd2,g2\nd3,g1\nd1,x2\nd2,x1\nd3,g2\nd1,x3\n")
    with pytest.raises(DatasetError, match=r"nodes.csv: column 'type' gives node kinds, which only a typed graph reads"
                       r".*pass --relation COLUMN"):  # fmt: skip
        load_dataset(DatasetSpec(str(edges), nodes=str(nodes)))
    # through a command: one line, no traceback
    cmd = [sys.executable, "-m", "preprocess", "--dataset", str(edges), "--nodes", str(nodes), "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "column 'type' gives node kinds" in proc.stderr.strip().splitlines()[-1]


def test_a_node_list_without_kinds_adds_isolated_entities_only(tmp_path):
    folder, nodes = write_graph(tmp_path)
    nodes.write_text("node\n" + "".join(f"{n}\n" for n in KINDS))
    ds = load_dataset(DatasetSpec(str(folder), nodes=str(nodes)))
    assert ds.num_nodes == 9 and ds.relations.ends is None and ds.relations.kinds is None


# Measured on the code before node kinds (ffb3357): the fingerprint and the shard-set key of each input. The
# ratings file's changed once since, on purpose: a temporal split's set ships its edge times, which the fingerprint
# hashes so that no set built before them is reused without them (docs/shard-format.md#edge-times-any-version).
UNCHANGED = {
    "kg": ("81b90596cdaef77f", "05cb90dd50e92831"),
    "ratings.tsv": ("e6f08caa615c9157", "5c3c9da2acebd47d"),  # users and items: now the two-kind case of kinds
    "shop.csv": ("e17e1461e9377d8d", "2880e94686388f4d"),  # untyped, with a --nodes file
    "typed.csv": ("1611ca95ec257843", "0f2c3d4d24499fe1"),
}


@pytest.mark.parametrize("name", sorted(UNCHANGED))
def test_inputs_without_kinds_keep_their_fingerprints_and_keys(tmp_path, monkeypatch, name):
    from common.shards import cache_key
    from preprocess.config import PreprocessConfig, SamplingConfig
    from tests.conftest import bipartite_rows, write_edges
    from tests.test_typed_kg import write_kg
    from tests.test_user_item_typed import write_ratings

    monkeypatch.chdir(tmp_path)  # relative names: the key holds the dataset as given
    write_kg(Path("kg"))
    write_ratings(Path("."))
    write_edges(Path("shop.csv"), bipartite_rows())
    Path("nodes.csv").write_text("node\n" + "".join(f"{u}\n" for u, _ in bipartite_rows()) + "zz\n")
    Path("typed.csv").write_text(
        "src,dst,relation,split\na,b,likes,train\nb,c,knows,train\nc,a,likes,train\na,c,knows,valid\nb,a,likes,test\n"
    )
    spec = {
        "kg": DatasetSpec("kg"),
        "ratings.tsv": DatasetSpec("ratings.tsv"),
        "shop.csv": DatasetSpec("shop.csv", nodes="nodes.csv"),
        "typed.csv": DatasetSpec("typed.csv", relation="relation"),
    }[name]
    ds = load_dataset(spec)
    key = cache_key(PreprocessConfig(spec, SamplingConfig(1, 10)).key_parts(ds.fingerprint(), ds.protocols))
    assert (ds.fingerprint(), key) == UNCHANGED[name]


@pytest.mark.slow  # a preprocess run, a trainer run, a recommendation job and a real service
def test_recommend_and_serve_propose_only_the_relations_kind(tmp_path):
    import json

    import pyarrow.parquet as pq

    from bench.serve import request, service
    from pipelines.core.ray_head import free_ports

    folder, nodes = write_graph(tmp_path)
    cmd = [sys.executable, "-m", "preprocess", "--dataset", str(folder), "--nodes", str(nodes), "--sampling", "1,5"]
    proc = subprocess.run([*cmd, "--views", "1", "--out", str(tmp_path / "shards"), "-q"], cwd=ROOT,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    shards = proc.stdout.strip().splitlines()[-1].split()[-1]
    cmd = [sys.executable, "-m", "trainer", "--preset", "tiny", "--shards", shards, "--out", str(tmp_path / "run")]
    proc = subprocess.run([*cmd, "--device", "cpu"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = tmp_path / "recs.parquet"
    cmd = [sys.executable, "-m", "pipelines.recommend", "--checkpoint", str(tmp_path / "run"), "--all-nodes"]
    cmd += ["--relation", "treats", "--k", "9", "--pool", "9", "--out", str(out), "--device", "cpu", "--no-progress"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = {}
    for node, cand in zip(*(pq.read_table(out).column(c).to_pylist() for c in ("node", "candidate"))):
        got.setdefault(node, set()).add(cand)
    # only diseases, never a treats triple that exists (d1 treats x1, x2; d2 x2, x1 (valid); d3 x3)
    assert {n: got[n] for n in ("d1", "d2", "d3")} == {"d1": {"x3", "x4"}, "d2": {"x3", "x4"}, "d3": {"x1", "x2", "x4"}}
    assert set().union(*got.values()) <= {"x1", "x2", "x3", "x4"}
    port = free_ports(1)[0]
    with service(str(tmp_path / "run"), tmp_path / "state", port, log_path=tmp_path / "serve.log"):
        status, text = request(port, "GET", "/recommend/d1?k=9&pool=9&relation=treats")
        assert status == 200, text
        assert {r["candidate"] for r in json.loads(text)["recommendations"]} == {"x3", "x4"}
        status, text = request(port, "GET", "/recommend/g1?k=9&pool=9&relation=targets&direction=in")
        assert status == 200 and {r["candidate"] for r in json.loads(text)["recommendations"]} == {"d2"}, text
