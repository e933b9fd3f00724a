"""Relation types (knowledge graphs, docs/own-graph.md#knowledge-graphs-and-relation-types): reading a triple folder,
typed candidates and their filtered corruptions, typed adjacency rows, the relation-aware model, per-relation metrics,
and shard format version 4 end to end. Hand-made graphs with hand-computed values."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from common.datasets import DatasetError, DatasetSpec, load_dataset
from common.graph import Graph
from common.induce import Inducer
from common.metrics import evaluate, relation_metrics
from common.shards import load_queries, read_manifest, read_shard
from preprocess.kg_candidates import corrupt_triples, near_corruptions, triple_keys, typed_eval_candidates
from trainer.data.packing import LocalEdges, pack
from trainer.data.typed import relation_types, typed_dense
from trainer.model.pencil import ModelConfig, Pencil
from trainer.model.propagation import typed_embedding

ROOT = Path(__file__).resolve().parents[1]

# Entities are text (leading zeros kept); relations sort to ids: a_rel 0, b_rel 1, c_rel 2.
TRAIN = [
    ("007", "b_rel", "010"),
    ("010", "a_rel", "012"),
    ("012", "c_rel", "013"),
    ("013", "b_rel", "007"),
    ("007", "a_rel", "010"),  # the pair 007 -> 010 again, with another relation
    ("012", "a_rel", "007"),
    ("013", "c_rel", "010"),
    ("010", "b_rel", "013"),
]
VALID = [("007", "c_rel", "012"), ("010", "c_rel", "007")]
TEST = [("012", "b_rel", "010"), ("099", "a_rel", "007")]  # 099: in no training triple


def write_kg(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", TRAIN), ("valid", VALID), ("test", TEST)):
        (folder / f"{name}.txt").write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in rows))
    return folder


def test_a_triple_folder_reads_as_a_typed_directed_dataset(tmp_path):
    ds = load_dataset(DatasetSpec(str(write_kg(tmp_path / "kg"))))
    assert ds.relations.names == ("a_rel", "b_rel", "c_rel") and ds.typed and ds.directed
    # sorted text ids: 007 -> 0, 010 -> 1, 012 -> 2, 013 -> 3, 099 -> 4 (isolated in training)
    assert ds.node_ids.tolist() == ["007", "010", "012", "013", "099"] and ds.num_nodes == 5
    assert ds.splits["train"].pos[:5].tolist() == [[0, 1], [1, 2], [2, 3], [3, 0], [0, 1]]
    assert ds.relations.pos["train"].tolist() == [1, 0, 2, 1, 0, 0, 2, 1]
    assert ds.relations.pos["test"].tolist() == [1, 0] and ds.graph.degree[4] == 0
    neg = ds.splits["valid"].neg["kg"]
    assert neg.shape == (2, 100, 2)
    # valid (007, c_rel, 012): corruptions keep one end; 5 entities -> at most 4 per side, -1 pads the rest
    heads, tails = neg[0, :50], neg[0, 50:]
    # every other head and tail (a self-loop is a corruption too, as in full ranking), never the query itself
    assert {tuple(p) for p in heads.tolist() if p[0] >= 0} == {(1, 2), (2, 2), (3, 2), (4, 2)}
    assert {tuple(p) for p in tails.tolist() if p[0] >= 0} == {(0, 0), (0, 1), (0, 3), (0, 4)}
    assert (heads[:, 0] < 0).sum() == 46 and (heads < 0).all(axis=1).sum() == 46  # -1 pads both ends
    # test's filter holds every true triple: (012, b_rel, 010) never gets the tail... of a true b_rel triple
    test_neg = {tuple(p) for p in ds.splits["test"].neg["kg"][0] if p[0] >= 0}
    assert (2, 1) not in test_neg and all(p[0] == 2 or p[1] == 1 for p in test_neg)


def test_an_edge_list_with_a_relation_column_reads_as_a_knowledge_graph(tmp_path):
    path = tmp_path / "typed.csv"
    path.write_text(
        "src,dst,Relation,split\na,b,likes,train\nb,c,knows,train\nc,a,likes,train\na,c,knows,valid\nb,a,likes,test\n"
    )
    ds = load_dataset(DatasetSpec(str(path), relation="relation"))
    assert ds.relations.names == ("knows", "likes") and ds.relations.pos["train"].tolist() == [1, 0, 1]
    assert ds.splits["train"].pos.tolist() == [[0, 1], [1, 2], [2, 0]] and ds.node_ids.tolist() == ["a", "b", "c"]
    # test (b, likes, a): heads a (a self-loop, a corruption too) and c (c likes a is true: filtered); tails c and b
    neg = ds.splits["test"].neg["kg"][0]
    assert {tuple(p) for p in neg.tolist() if p[0] >= 0} == {(0, 0), (1, 2), (1, 1)}
    with pytest.raises(DatasetError, match="missing column.s. type .*; pass --relation with the name of its relation"):
        load_dataset(DatasetSpec(str(path), relation="type"))
    with pytest.raises(DatasetError, match="--relation type: a relation column applies to edge-list files only"):
        load_dataset(DatasetSpec("citeseer", relation="type"))
    assert "relation" not in DatasetSpec(str(path)).to_dict()  # an untyped set's config is as it always was
    assert DatasetSpec.from_dict(DatasetSpec(str(path), relation="r").to_dict()).relation == "r"


def test_the_fingerprint_of_an_untyped_dataset_is_unchanged_by_the_relations_field(tmp_path):
    ds = load_dataset(DatasetSpec(str(write_kg(tmp_path / "kg"))))
    typed = ds.fingerprint()
    ds.relations = None
    assert ds.fingerprint() != typed  # the relations are part of a typed set's key, and only of its key


def test_only_a_typed_block_carries_the_relation_column():
    import pyarrow as pa

    from common.shards import COLUMNS, Block, decode_block, encode_block

    plain = Block(np.arange(2), np.array([0, 2]), np.array([1, 3]), np.ones(2, np.float32), np.array([0, 2, 4]),
                  np.array([0, 1, 2, 3]))  # fmt: skip
    names = lambda data: pa.ipc.open_stream(pa.py_buffer(data)).schema.names  # noqa: E731
    assert names(encode_block(plain)) == list(COLUMNS) and decode_block(encode_block(plain)).rel is None
    typed = Block(*(getattr(plain, f) for f in ("cid", "src", "dst", "label", "node_ptr", "nodes")), np.array([4, 0]))
    assert names(encode_block(typed)) == [*COLUMNS, "rel"]
    back = decode_block(encode_block(typed))
    assert back.rel.tolist() == [4, 0] and back.take(np.array([1])).rel.tolist() == [0]
    assert Block.concat([back, back]).rel.tolist() == [4, 0, 4, 0]


def test_a_typed_packer_refuses_a_block_without_or_outside_its_relations():
    from common.shards import Block
    from trainer.data.packing import BatchPacker

    t = np.array([[0, 0, 1], [1, 1, 2]])  # triples 0 -r0-> 1, 1 -r1-> 2 of a 3-node graph
    indptr, tails, rels = np.array([0, 1, 2, 2]), t[:, 2], t[:, 1]
    und = np.array([0, 1, 3, 4]), np.array([1, 0, 2, 1])  # the undirected union's CSR
    packer = BatchPacker(*und, 6, min_density=2.0, rel_graph=(indptr, tails, rels), relations=2)  # the sparse form
    block = Block(np.arange(1), np.array([0]), np.array([2]), np.ones(1, np.float32), np.array([0, 3]),
                  np.array([0, 2, 1]), np.array([1]))  # fmt: skip
    batch = packer(block)
    assert batch.relation.tolist() == [1] and batch.edge_types == 4
    # local 0 -> 2 (r0) and 2 -> 1 (r1): types 0 / 1 and 2 / 3; the task tokens hear their endpoint's (0 and 3)
    assert sorted(batch.typed_kind.tolist()) == [0, 0, 1, 2, 3, 3]
    for rel in (None, np.array([2])):
        with pytest.raises(ValueError, match=r"no relation column or one outside \[0, 2\)"):
            packer(Block(*(getattr(block, f) for f in ("cid", "src", "dst", "label", "node_ptr", "nodes")), rel))


def test_training_corruptions_are_filtered_of_true_triples():
    pos = np.array([[0, 0, 1], [1, 1, 2]], dtype=np.int64)
    known = np.sort(triple_keys(np.array([[0, 0, 1], [1, 1, 2], [0, 0, 2], [2, 0, 1]]), 3, 2))
    neg = corrupt_triples(pos, 200, 3, 2, known, np.random.default_rng(0))
    # 3 entities: of (0, 0, 1) the corruptions are (2, 0, 1) true, (1, 0, 1) a loop, (0, 0, 0) a loop, (0, 0, 2) true;
    # of (1, 1, 2): (0, 1, 2) and (1, 1, 0) are the only ones left
    assert {tuple(t) for t in neg.tolist()} == {(0, 1, 2), (1, 1, 0)}


def test_near_corruptions_replace_an_end_by_one_two_hops_from_it():
    # the training graph is the path 0 - 1 - 2 - 3 (undirected); the positive (0, r0, 1)
    graph = Graph.from_edges(np.array([[0, 1], [1, 2], [2, 3]]), num_nodes=4)
    pos = np.array([[0, 0, 1]], dtype=np.int64)
    known = np.sort(triple_keys(pos, 4, 1))
    neg = near_corruptions(pos, 300, graph, 4, 1, known, np.random.default_rng(0))
    # tail 1: walks 1 -> 0 -> 1 (true) and 1 -> 2 -> {1, 3}: only (0, 0, 3); head 0: walks 0 -> 1 -> {0, 2}, and
    # (0, 0, 1) is true: only (2, 0, 1)
    assert {tuple(t) for t in neg.tolist()} == {(0, 0, 3), (2, 0, 1)}
    tails = near_corruptions(pos, 50, graph, 4, 1, known, np.random.default_rng(0), sides=(2,))
    assert {tuple(t) for t in tails.tolist()} == {(0, 0, 3)}


def test_near_corruptions_keep_node_kinds_and_fall_back_to_uniform_when_none_is_near(caplog):
    # users 0, 1 and items 2, 3, 4; (0 -> 2), (1 -> 2), (1 -> 3) train; item 4 has no edge
    graph = Graph.from_edges(np.array([[0, 2], [1, 2], [1, 3]]), num_nodes=5)
    pos = np.array([[0, 0, 2]], dtype=np.int64)
    known = np.sort(triple_keys(np.array([[0, 0, 2], [1, 0, 2], [1, 0, 3]]), 5, 1))
    ends = {0: (np.array([0, 1]), np.array([2, 3, 4]))}
    neg = near_corruptions(pos, 100, graph, 5, 1, known, np.random.default_rng(0), ends, sides=(2,))
    # two hops from item 2: 2 -> {0, 1} -> {2, 3}: only item 3 is near and not a true tail of user 0
    assert {tuple(t) for t in neg.tolist()} == {(0, 0, 3)}
    lone = np.array([[1, 0, 3]], dtype=np.int64)  # from item 3: 3 -> 1 -> {2, 3}; (1, 0, 2) is true: none is near
    with caplog.at_level("WARNING"):
        got = near_corruptions(lone, 20, graph, 5, 1, known, np.random.default_rng(0), ends, sides=(2,))
    assert {tuple(t) for t in got.tolist()} == {(1, 0, 4)} and "the other 20 are uniform" in caplog.text


def test_typed_eval_candidates_keep_relations_and_skip_padding():
    pos = np.array([[0, 1], [2, 3]])
    neg = np.array([[[4, 1], [0, 5], [-1, -1]], [[4, 1], [2, 5], [4, 1]]])
    c = typed_eval_candidates(pos, neg, np.array([0, 1]), 2)
    # distinct triples: (4, 0, 1), (0, 0, 5), (4, 1, 1) and (2, 1, 5): sorted by (head, relation, tail)
    triples = list(zip(c.src.tolist(), c.rel.tolist(), c.dst.tolist()))
    assert triples[:2] == [(0, 0, 1), (2, 1, 3)] and c.label.tolist() == [1, 1, 0, 0, 0, 0]
    assert triples[2:] == [(0, 0, 5), (2, 1, 5), (4, 0, 1), (4, 1, 1)]
    assert c.neg_cid.tolist() == [[4, 2, -1], [5, 3, 5]]


def test_typed_rows_of_a_four_node_subgraph():
    # triples (global): 10 -r0-> 11 (the target pair), 10 -r2-> 11, 11 -r1-> 10, 10 -r0-> 12, 12 -r1-> 13, 13 -r2-> 11
    t = np.array([[10, 0, 11], [10, 2, 11], [11, 1, 10], [10, 0, 12], [12, 1, 13], [13, 2, 11]])
    t = t[np.lexsort((t[:, 1], t[:, 2], t[:, 0]))]
    indptr = np.zeros(15, np.int64)
    np.cumsum(np.bincount(t[:, 0], minlength=14), out=indptr[1:])
    # the link u = 10, v = 11, context 13, 12: local 10 = 0, 11 = 1, 13 = 2, 12 = 3
    ptr, rows = Inducer(indptr, t[:, 2]).typed_edges(np.array([0, 4]), np.array([10, 11, 13, 12]), t[:, 1])
    assert ptr.tolist() == [0, 4]
    # 0 -> 1 hidden (both relations); 11 -r1-> 10 = 1 -> 0; 10 -r0-> 12 = 0 -> 3; 12 -r1-> 13 = 3 -> 2; 13 -r2-> 11
    assert sorted(map(tuple, rows.tolist())) == [(0, 3, 0), (1, 0, 1), (2, 1, 2), (3, 2, 1)]
    typed = relation_types(ptr, rows, 3)
    assert typed.types == 6 and typed.ptr.tolist() == [0, 8]
    got = sorted(map(tuple, typed.rows.tolist()))
    # (a, b, 2r): b is a's out-neighbour by r; (b, a, 2r + 1): a is b's in-neighbour by r
    assert got == sorted([(0, 3, 0), (3, 0, 1), (1, 0, 2), (0, 1, 3), (2, 1, 4), (1, 2, 5), (3, 2, 2), (2, 3, 3)])
    dense = typed_dense(1, 4, typed)
    assert dense.shape == (1, 6, 4, 4) and int(dense.sum()) == 8 and dense[0, 2, 1, 0] == 1 and dense[0, 3, 0, 1] == 1


N_MAX = 6
SAMPLE = {"nodes": [10, 11, 13, 12], "rows": [(0, 3, 0), (1, 0, 1), (2, 1, 2), (3, 2, 1)]}


def typed_batch(relations: list[int], dense: bool = False):
    B = len(relations)
    rows = np.concatenate([np.array(SAMPLE["rows"])] * B)
    ptr = np.arange(B + 1) * len(SAMPLE["rows"])
    node_ptr = np.arange(B + 1) * 4
    nodes = np.array(SAMPLE["nodes"] * B)
    und = np.array([[0, 3], [0, 1], [1, 2], [2, 3]])  # the union (0 - 1: the reverse 1 -> 0, visible)
    typed = relation_types(ptr, rows, 3)
    label, cid = np.ones(B), np.arange(B)
    if not dense:
        graph = LocalEdges(np.arange(B + 1) * 4, np.concatenate([und] * B))
        return pack(node_ptr, nodes, label, cid, N_MAX, graph, typed=typed, relation=np.array(relations))
    adj = np.zeros((B, 4, 4), np.uint8)
    adj[:, und[:, 0], und[:, 1]] = adj[:, und[:, 1], und[:, 0]] = 1
    return pack(node_ptr, nodes, label, cid, N_MAX, adj, typed=typed_dense(B, 4, typed), relation=np.array(relations))


def typed_model(relations: int) -> Pencil:
    torch.manual_seed(0)
    cfg = ModelConfig(
        N_MAX,
        16,
        2,
        2,
        32,
        dropout=0.0,
        attention="reference",
        edge_types=2 * max(relations, 1) if relations else 1,
        relations=relations,
    )
    return Pencil(cfg).double().eval()


def test_typed_embedding_sums_each_relation_and_direction_block():
    batch = typed_batch([0])
    w = torch.randn(6, N_MAX, 4, dtype=torch.float64)
    got = typed_embedding(batch, w)
    # token of local 0: out-neighbour 3 by r0 (type 0), in-neighbour 1 by r1 (type 3)
    assert torch.allclose(got[0], w[0, 3] + w[3, 1]) and torch.allclose(got[4], got[0])  # u-task copies local 0
    assert torch.allclose(got[2], w[4, 1] + w[3, 3])  # local 2: 2 -r2-> 1 (type 4), 3 -r1-> 2 (type 3)
    dense = typed_embedding(typed_batch([0], dense=True), w)
    assert torch.allclose(got, dense, rtol=0, atol=1e-12)


def test_the_target_relation_changes_the_score_and_both_forms_agree():
    m = typed_model(3)
    sparse = m(typed_batch([0, 1, 2]))
    assert len(set(sparse.tolist())) == 3  # the same subgraph asked for three relations: three scores
    assert torch.allclose(sparse, m(typed_batch([0, 1, 2], dense=True)), rtol=0, atol=1e-12)


def test_an_untyped_model_has_no_relation_parameter():
    torch.manual_seed(0)
    plain = Pencil(ModelConfig(N_MAX, 16, 2, 2, 32))
    assert plain.relation is None and plain.relation_pair is None
    typed = Pencil(ModelConfig(N_MAX, 16, 2, 2, 32, edge_types=6, relations=3))
    extra = set(typed.state_dict()) - set(plain.state_dict())
    assert extra == {"relation.weight", "relation_pair.weight"}
    with pytest.raises(ValueError, match="edge_types must be 2 x relations = 6"):
        ModelConfig(N_MAX, 16, 2, 2, 32, edge_types=2, relations=3)


def test_kg_metrics_ignore_padding_and_split_by_relation():
    pos = np.array([0.9, 0.5, 0.2])
    neg = np.array([[0.1, -np.inf, -np.inf], [0.7, 0.5, 0.1], [0.3, 0.4, -np.inf]])
    # ranks: 1; 1 + (1 + 2) / 2 = 2.5 (one above, one tied); 3
    got = evaluate("kg", pos, neg)
    assert got["mrr"] == pytest.approx((1 + 1 / 2.5 + 1 / 3) / 3) and got["hits@1"] == pytest.approx(1 / 3)
    per = relation_metrics(pos, neg, np.array([1, 1, 0]), ["r0", "r1", "r2"])
    assert per["mrr/r1"] == pytest.approx((1 + 1 / 2.5) / 2) and per["mrr/r0"] == pytest.approx(1 / 3)
    assert per["count/r1"] == 2 and per["hits@3/r0"] == 1.0 and "mrr/r2" not in per


@pytest.fixture(scope="module")
def typed_set(tmp_path_factory):
    """A typed set of a small random KG, built by the real preprocess (embedded Ray, one CPU)."""
    tmp = tmp_path_factory.mktemp("kg")
    rng = np.random.default_rng(0)
    rows = {(f"n{h:02d}", f"r{r}", f"n{t:02d}") for h, r, t in rng.integers(0, [30, 3, 30], size=(400, 3)) if h != t}
    rows = sorted(rows)
    folder = tmp / "small"
    folder.mkdir()
    for name, part in (("train", rows[:200]), ("valid", rows[200:220]), ("test", rows[220:240])):
        (folder / f"{name}.txt").write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in part))
    cmd = [sys.executable, "-m", "preprocess", "--dataset", str(folder), "--sampling", "1,10"]
    proc = subprocess.run(
        [*cmd, "--out", str(tmp / "shards"), "--num-cpus", "1", "-q"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return read_manifest(proc.stdout.strip().splitlines()[-1].split()[-1])


@pytest.mark.slow  # a preprocess run: Ray's start-up alone is 10-35 s on a shared 2-core machine
def test_a_typed_set_is_format_version_4_with_relations_everywhere(typed_set):
    m = typed_set
    body = json.loads((Path(m.root) / "manifest.json").read_text())
    assert body["version"] == 4 and body["relations"] == ["r0", "r1", "r2"] and body["directed"] is True
    assert m.graphs["train"]["rel"]["num_entries"] == 200  # the triple CSR holds every training triple
    block = next(read_shard(Path(m.root) / m.shards[0]["name"]))
    assert block.rel is not None and set(block.rel.tolist()) <= {0, 1, 2}
    pos_cid, neg_cid, pos_rel = load_queries(m.queries_path(m.eval["test/kg"]), relations=True)
    assert neg_cid.shape == (20, 100) and pos_rel.shape == (20,) and (neg_cid == -1).any()
    from common.manifest_schema import schema_problem

    no_rel = json.loads(json.dumps(body))
    del no_rel["graphs"]["train"]["rel"]
    assert schema_problem(no_rel) == "graphs.train.rel: missing or not an object"
    untyped = json.loads(json.dumps(body))
    del untyped["relations"]
    assert schema_problem(untyped) == "graphs.train.rel: an untyped set (no relations) ships no relation graph"


@pytest.mark.slow  # one trainer run
def test_the_trainer_reports_mrr_per_relation(typed_set, tmp_path):
    cmd = [sys.executable, "-m", "trainer", "--preset", "tiny", "--shards", typed_set.root, "--out", str(tmp_path)]
    cmd += ["--epochs", "1", "--device", "cpu", "--protocol", "kg"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    test = json.loads((tmp_path / "summary.json").read_text())["test"]
    assert 0 < test["mrr"] <= 1 and sum(test[f"count/r{r}"] for r in range(3) if f"count/r{r}" in test) == 20
    state = torch.load(tmp_path / "best.pt", weights_only=True)["model"]
    assert state["w0"].shape[0] == (1 + 6) * typed_set.n_max + 2 and state["relation.weight"].shape[0] == 3


def test_pencil_run_refuses_another_protocol_on_a_typed_graph_in_one_line(tmp_path):
    folder = write_kg(tmp_path / "kg")
    cmd = [sys.executable, "-m", "pipelines.run", "--dataset", str(folder), "--out", str(tmp_path / "out")]
    proc = subprocess.run([*cmd, "--protocol", "heart"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "is a typed graph, ranked under its own protocol kg" in proc.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def typed_run(tmp_path_factory):
    """A typed set whose entities a and b touch only each other (a -r1-> b, b -r0-> a), trained one epoch."""
    tmp = tmp_path_factory.mktemp("kgrun")
    rng = np.random.default_rng(1)
    rows = {(f"n{h:02d}", f"r{r}", f"n{t:02d}") for h, r, t in rng.integers(0, [20, 2, 20], size=(200, 3)) if h != t}
    rows = sorted(rows)
    folder = tmp / "pair"
    folder.mkdir()
    train = rows[:100] + [("a", "r1", "b"), ("b", "r0", "a")]
    for name, part in (("train", train), ("valid", rows[100:110]), ("test", rows[110:120])):
        (folder / f"{name}.txt").write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in part))
    cmd = [sys.executable, "-m", "preprocess", "--dataset", str(folder), "--sampling", "1,10", "--views", "1"]
    proc = subprocess.run([*cmd, "--out", str(tmp / "shards"), "-q"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shards = proc.stdout.strip().splitlines()[-1].split()[-1]
    cmd = [sys.executable, "-m", "trainer", "--preset", "tiny", "--shards", shards, "--out", str(tmp / "run")]
    # no --protocol: the trainer picks kg for a typed set by itself (trainer.config.set_protocol)
    proc = subprocess.run([*cmd, "--device", "cpu"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return tmp


@pytest.mark.slow  # a preprocess run and a trainer run
def test_score_takes_a_relation_column_and_refuses_an_unknown_relation(typed_run):
    import pyarrow.parquet as pq

    from pipelines.core.runs import load_checkpoint, load_model, run_manifest

    pairs = typed_run / "pairs.csv"
    pairs.write_text("src,dst,relation\na,b,r0\na,b,r1\na,b,r0\n")
    out = typed_run / "scores.parquet"
    cmd = [sys.executable, "-m", "pipelines.score", "--checkpoint", str(typed_run / "run"), "--pairs", str(pairs)]
    proc = subprocess.run([*cmd, "--out", str(out), "--device", "cpu"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = pq.read_table(out).to_pydict()
    assert got["relation"] == ["r0", "r1", "r0"] and got["logit"][0] == got["logit"][2] != got["logit"][1]
    # by hand: a and b have no other neighbour, so the subgraph is [a, b]; a -r1-> b is the pair itself (hidden),
    # b -r0-> a is visible: local 1 -> 0 of relation 0 (types 0 out, 1 in); no undirected edge (a - b is hidden)
    ckpt = load_checkpoint(typed_run / "run" / "best.pt")
    model = load_model(ckpt, run_manifest(ckpt, typed_run / "run" / "best.pt", None), torch.device("cpu"))
    ids = {n: i for i, n in enumerate(load_dataset(DatasetSpec(str(typed_run / "pair"))).node_ids.tolist())}
    typed = relation_types(np.array([0, 1, 2]), np.array([[1, 0, 0], [1, 0, 0]]), 2)
    nodes = np.array([ids["a"], ids["b"]] * 2)
    batch = pack(
        np.array([0, 2, 4]), nodes, np.zeros(2), np.arange(2), model.cfg.n_max,
        LocalEdges(np.zeros(3, np.int64), np.zeros((0, 2), np.int64)), typed=typed, relation=np.array([0, 1]),
    )  # fmt: skip
    with torch.no_grad():
        want = model.eval()(batch).tolist()
    assert got["logit"][:2] == pytest.approx(want, abs=1e-6)
    pairs.write_text("src,dst,relation\na,b,r0\na,b,likes\n")
    proc = subprocess.run([*cmd, "--out", str(out), "--overwrite"], cwd=ROOT, capture_output=True, text=True)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "unknown relation 'likes' in data row 2 (1 row(s)); the run knows r0, r1" in last
