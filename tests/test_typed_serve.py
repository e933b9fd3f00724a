"""`serve` on a typed run (relation types): edits of triples [head, tail, relation], the query parameter
`relation`, their one-line 400s, a replay that gives the same triples; (slow) a real service driven over HTTP."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from common.datasets import DatasetSpec, load_dataset
from pipelines.recommend.engine import RecConfig
from pipelines.serve.handlers import Engine, Limits, RecQuery, recommend_query
from pipelines.serve.state import ServeError, serving_state
from tests.test_typed_kg import typed_run, write_kg  # noqa: F401 (typed_run: a fixture)

# the tiny KG of tests/test_typed_kg.py: 007 -> 0, 010 -> 1, 012 -> 2, 013 -> 3, 099 -> 4; a_rel 0, b_rel 1, c_rel 2


@pytest.fixture
def kg_state(tmp_path):
    ds = load_dataset(DatasetSpec(str(write_kg(tmp_path / "kg"))))
    return serving_state(ds, "all", 10)[0]


def edit(state, body):
    record = state.edit_record(body)
    state.apply([{**record, "seq": state.seq + 1}])
    return record


def has(state, h, r, t) -> bool:
    return (h, r, t) in {tuple(x) for x in state.typed.triples.tolist()}


def test_edits_carry_a_relation_and_the_union_follows_the_triples(tmp_path):
    ds = load_dataset(DatasetSpec(str(write_kg(tmp_path / "kg"))))
    s = serving_state(ds, "all", 10)[0]
    assert len(s.typed.triples) == 12 and s.summary()["relations"] == ["a_rel", "b_rel", "c_rel"]
    for i, body in enumerate(EDITS):
        s.apply([{**s.edit_record(body), "seq": i + 1}])
        if i == 0:
            assert has(s, 4, 2, 3) and s.digraph.has_edge(np.array([4]), np.array([3]))[0] and s.graph.has_edge(4, 3)
        if i == 1:  # 007 -> 010 holds by a_rel and b_rel, and 010 -c_rel-> 007 (valid): the pair stays until all go
            assert not has(s, 0, 1, 1) and has(s, 0, 0, 1) and s.graph.has_edge(0, 1)
        if i == 2:
            assert not s.digraph.has_edge(np.array([0]), np.array([1]))[0] and s.graph.has_edge(0, 1)  # 010 -> 007
    assert not s.graph.has_edge(0, 1) and s.summary()["triples"] == 10
    replayed = serving_state(ds, "all", 10)[0]  # a restarted service replaying the log: the same triples
    replayed.apply([{**s.edit_record(body), "seq": i + 1} for i, body in enumerate(EDITS)])
    assert {tuple(x) for x in replayed.typed.triples.tolist()} == {tuple(x) for x in s.typed.triples.tolist()}


EDITS = [
    {"add": [["099", "013", "c_rel"]]},
    {"remove": [["007", "010", "b_rel"]]},
    {"remove": [["007", "010", "a_rel"]]},
    {"remove": [["010", "007", "c_rel"]]},
]


@pytest.mark.parametrize(
    "body, want",
    [
        ({"add": [["007", "099", "likes"]]}, "'add'[0]: unknown relation 'likes'; the run knows a_rel, b_rel, c_rel"),
        ({"add": [["007", "099"]]}, "'add'[0]: expected a triple [head, tail, relation], got ['007', '099']"),
        ({"remove": [["007", "010", 3]]}, "'remove'[0]: unknown relation 3; the run knows a_rel, b_rel, c_rel"),
    ],
)
def test_a_bad_typed_edit_is_a_400_in_one_line(kg_state, body, want):
    with pytest.raises(ServeError) as err:
        kg_state.edit_record(body)
    assert err.value.status == 400 and err.value.message == want


def test_the_relation_parameter(kg_state):
    typed, cfg = kg_state.typed, RecConfig(direction="out")
    assert recommend_query("007", {"relation": "b_rel"}, cfg, Limits(), typed).cfg.relation == 1
    for params, want in (
        ({"relation": "likes"}, "relation='likes': unknown relation 'likes'; the run knows a_rel, b_rel, c_rel"),
        ({}, "a typed run recommends one relation at a time: add ?relation= one of a_rel, b_rel, c_rel"),
    ):
        with pytest.raises(ServeError) as err:
            recommend_query("007", params, cfg, Limits(), typed)
        assert err.value.status == 400 and err.value.message == want
    with pytest.raises(ServeError, match="relation='b_rel': this service's run is untyped"):
        recommend_query("1", {"relation": "b_rel"}, RecConfig(), Limits())


@pytest.mark.slow  # a preprocess run and a trainer run (the fixture), then a real service
def test_serve_answers_one_relation_and_takes_edits_with_a_relation(typed_run, tmp_path):
    from bench.serve import request, service
    from pipelines.core.ray_head import free_ports

    def call(method, path, body=None, headers=None):
        status, text = request(port, method, path, body, headers)
        return status, json.loads(text)

    n = len(load_dataset(DatasetSpec(str(typed_run / "pair"))).node_ids)
    recs = lambda q: {r["candidate"] for r in call("GET", f"/recommend/a?k={n}&pool={n}&{q}")[1]["recommendations"]}  # noqa: E731
    port, auth = free_ports(1)[0], {"Authorization": "Bearer t0k3n"}
    with service(typed_run / "run", tmp_path / "state", port, env={"PENCIL_SERVE_TOKEN": "t0k3n"},
                 log_path=tmp_path / "serve.log"):  # fmt: skip
        assert "b" not in recs("relation=r1") and {"b", "n00"} <= recs("relation=r0")  # a -r1-> b is there
        status, body = call("POST", "/edges", {"add": [["a", "n00", "r0"]]}, auth)
        assert status == 200 and body["relations"] == ["r0", "r1"], body
        assert "n00" not in recs("relation=r0") and "n00" in recs("relation=r1")  # only r0's answer changes
        assert "a" not in {
            r["candidate"]
            for r in call("GET", f"/recommend/n00?k={n}&pool={n}&relation=r0&direction=in")[1]["recommendations"]
        }  # noqa: E501
        status, body = call("GET", "/recommend/a?relation=likes")
        assert status == 400 and body == {"error": "relation='likes': unknown relation 'likes'; the run knows r0, r1"}
        status, body = call("POST", "/edges", {"add": [["a", "n01", "likes"]]}, auth)
        assert status == 400 and "unknown relation 'likes'" in body["error"]
        status, body = call("POST", "/score", {"pairs": [["a", "b", "r0"], ["a", "b", "r1"]]})
        assert status == 200 and [r["relation"] for r in body["scores"]] == ["r0", "r1"], body


def test_node_kinds_hold_in_edits_and_recommendations(tmp_path):
    """Node kinds (Relations.ends, as a user-item file gives them), set here by hand on the tiny KG: a_rel joins
    heads {007, 010, 012, 099} to tails {007, 010, 012}. A triple with a head of another kind is a 400, a node an
    edit creates joins the kind its triple gives it, and a recommendation of a_rel proposes only its tails."""
    ds = load_dataset(DatasetSpec(str(write_kg(tmp_path / "kg"))))
    ds.relations.ends = {0: (np.array([0, 1, 2, 4]), np.array([0, 1, 2]))}
    s = serving_state(ds, "all", 10)[0]
    assert s.typed.candidates(0, "out").tolist() == [0, 1, 2] and s.typed.candidates(0, "in").tolist() == [0, 1, 2, 4]
    assert s.typed.candidates(1, "out") is None  # b_rel: no kinds, any node
    with pytest.raises(ServeError) as err:
        s.edit_record({"add": [["013", "010", "a_rel"]]})
    assert err.value.status == 400 and err.value.message == (
        "'add'[0]: ['013', '010', 'a_rel']: its head is of another node kind than relation 'a_rel' takes as heads; "
        "swap head and tail, or use another relation"
    )
    s.edit_record({"add": [["013", "010", "b_rel"]], "remove": [["013", "010", "a_rel"]]})  # no kinds; removal
    s.apply([{**s.edit_record({"add": [["100", "010", "a_rel"]]}), "seq": 1}])
    new = s.ids.find("100")
    assert new == 5 and 5 in s.typed.candidates(0, "in") and 5 not in s.typed.candidates(0, "out")


def test_a_user_item_service_finds_its_nodes_and_keeps_their_kinds(tmp_path):
    """A user-item file's ids run per kind (users u1..u4 = 0-3, then items a..h = 4-11: not sorted as text); the
    service finds each, and an item as the head of user->item is a 400."""
    from tests.test_user_item_typed import write_ratings

    s = serving_state(load_dataset(DatasetSpec(str(write_ratings(tmp_path)))), "all", 10)[0]
    assert [s.ids.find(v) for v in ("u1", "u4", "a", "h", "zz")] == [0, 3, 4, 11, None]
    assert s.typed.candidates(0, "out").tolist() == list(range(4, 12))
    with pytest.raises(ServeError, match="its head is of another node kind than relation 'user->item' takes as heads"):
        s.edit_record({"add": [["a", "u1", "user->item"]]})


def write_numbered_ratings(tmp_path):
    """The ratings file of test_user_item_typed with numbers for names: users 1-4 (nodes 0-3), items 1-8 (a..h,
    nodes 4-11), so every user's id is also an item's."""
    from tests.test_user_item_typed import ROWS

    item = {name: str(k) for k, name in enumerate("abcdefgh", start=1)}
    path = tmp_path / "numbered.tsv"
    lines = ["user\titem\trating\ttime"] + [f"{u[1:]}\t{item[i]}\t4\t{t}" for t, (u, i) in enumerate(ROWS, start=1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_where_users_and_items_share_ids_each_end_is_of_its_relations_kind(tmp_path):
    s = serving_state(load_dataset(DatasetSpec(str(write_numbered_ratings(tmp_path)))), "all", 10)[0]
    assert s.ids.find("2") == 1  # the bare id: the user
    # user 2 is node 1, item 2 node 5, item 8 node 11; there is no user 8
    assert [s.at_end("2", 0, 0), s.at_end("2", 0, 1), s.at_end("8", 0, 1), s.at_end("8", 0, 0)] == [1, 5, 11, None]
    # user 4 rated item 1 (a) in test; user 4 -> item 2 (b) is new: a triple, not a 400 for a "user" tail
    edit(s, {"add": [["4", "2", "user->item"]]})
    assert has(s, 3, 0, 5) and not has(s, 3, 0, 1)
    edit(s, {"remove": [["1", "1", "user->item"]]})  # user 1 -> item 1 (a): two nodes, no self-loop
    assert not has(s, 0, 0, 4)


def test_where_users_and_items_share_ids_an_edit_creates_the_node_of_its_ends_kind(tmp_path):
    ds = load_dataset(DatasetSpec(str(write_numbered_ratings(tmp_path))))
    s, records = serving_state(ds, "all", 10)[0], []
    # no user 8 (item 8 is node 11): naming user 8 creates it, node 12, rating item 1 (node 4)
    records.append(edit(s, {"add": [["8", "1", "user->item"]]}))
    assert [s.at_end("8", 0, 0), s.at_end("8", 0, 1)] == [12, 11] and has(s, 12, 0, 4)
    # a new id at both ends is a new user 9 and a new item 9, two nodes and no self-loop; user 8 is found again
    records.append(edit(s, {"add": [["9", "9", "user->item"], ["8", "9", "user->item"]]}))
    assert [s.at_end("9", 0, 0), s.at_end("9", 0, 1)] == [13, 14] and has(s, 13, 0, 14) and has(s, 12, 0, 14)
    assert s.ids.users([12, 13, 14]) == ["8", "9", "9"] and s.summary()["nodes"] == 15
    with pytest.raises(ServeError, match="'remove': unknown node '5'"):  # item 5 exists, user 5 does not
        s.edit_record({"remove": [["5", "1", "user->item"]]})
    # a query or a scored pair naming a user the graph lacks (only item 5 exists): a 404, a 400
    engine = Engine.__new__(Engine)
    engine.state = s
    cfg = RecConfig(relation=0)
    with pytest.raises(ServeError, match="unknown node '5': no node that relation 'user->item' takes as heads"):
        engine._query_node(RecQuery("5", cfg))
    assert engine._query_node(RecQuery("5", replace(cfg, direction="in"))) == 8  # item 5, node 8
    with pytest.raises(ServeError, match=r"'pairs'\[0\]: \['5', '1', 'user->item'\]: its head is no node of the kind"):
        engine._pair_indices([["5", "1", "user->item"]])
    assert engine._pair_indices([["8", "5", "user->item"]]).tolist() == [[12, 8, 0]]
    # a restart replays the log to the same nodes and triples
    again = serving_state(ds, "all", 10)[0]
    again.apply([{**r, "seq": i} for i, r in enumerate(records, start=1)])
    assert again.typed.triples.tolist() == s.typed.triples.tolist() and again.ids.num_nodes == 15


def test_score_resolves_each_end_within_its_relations_kind_and_refuses_an_end_of_no_such_kind(tmp_path):
    from pipelines.score import ScoreError, refuse_loops, within_kinds

    ds = load_dataset(DatasetSpec(str(write_numbered_ratings(tmp_path))))
    node_ids = ds.node_ids
    user = np.array([["1", "2"], ["2", "8"], ["3", "3"]], dtype=object)
    found = np.array([[0, 1], [1, 11], [2, 2]])  # the bare ids' first nodes: users 1, 2, 3, and item 8
    got = within_kinds("p.csv", found, user, np.zeros(3, np.int64), ds.relations, node_ids)
    assert got.tolist() == [[0, 5], [1, 11], [2, 6]]  # tails: items 2, 8 and 3; user 3 -> item 3 is no loop
    assert refuse_loops("p.csv", got, user) is got
    with pytest.raises(ScoreError, match=r"data row 2 \(8, 1\): its src is no node of the kind relation 'user->item'"):
        within_kinds(
            "p.csv",
            np.array([[0, 4], [11, 4]]),
            np.array([["1", "1"], ["8", "1"]], dtype=object),
            np.zeros(2, np.int64),
            ds.relations,
            node_ids,
        )


def test_recommend_reads_a_query_id_two_kinds_share_as_one_of_the_query_kind(tmp_path):
    from pipelines.recommend.engine import read_nodes

    ds = load_dataset(DatasetSpec(str(write_numbered_ratings(tmp_path))))
    (tmp_path / "nodes.txt").write_text("1\n2\n8\n")
    users, items = ds.relations.ends[0]
    assert read_nodes(str(tmp_path / "nodes.txt"), ds.num_nodes, ds.node_ids).tolist() == [0, 1, 11]
    assert read_nodes(str(tmp_path / "nodes.txt"), ds.num_nodes, ds.node_ids, items).tolist() == [4, 5, 11]
    assert read_nodes(str(tmp_path / "nodes.txt"), ds.num_nodes, ds.node_ids, users).tolist() == [0, 1, 11]


def test_a_featured_user_item_service_gives_a_created_user_its_row_and_refuses_one_id_for_two_new_kinds(tmp_path):
    path = write_numbered_ratings(tmp_path)
    (tmp_path / "users.csv").write_text("node,age\n" + "".join(f"{u},{u / 10}\n" for u in range(1, 5)))
    (tmp_path / "items.csv").write_text("node,year\n" + "".join(f"{i},{i / 100}\n" for i in range(1, 9)))
    spec = DatasetSpec(str(path), node_features=f"user={tmp_path / 'users.csv'},item={tmp_path / 'items.csv'}")
    s = serving_state(load_dataset(spec), "all", 10, features=True)[0]
    assert s.graph.x.shape == (12, 2)  # user columns, then item columns
    # a new user 8 (item 8 exists) brings its kind's row alone; item 8 keeps its own
    edit(s, {"add": [["8", "1", "user->item"]], "features": {"8": [0.8]}})
    assert s.graph.x[12].tolist() == pytest.approx([0.8, 0.0]) and s.graph.x[11].tolist() == pytest.approx([0, 0.08])
    with pytest.raises(ServeError, match="node id '9' would be created for two node kinds at once"):
        s.edit_record({"add": [["9", "9", "user->item"]], "features": {"9": [0.9]}})
