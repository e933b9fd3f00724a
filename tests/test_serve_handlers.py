"""pencil serve's endpoints without HTTP: a batch of requests through `Engine` answers what `pencil recommend`'s
engine and `pencil score`'s scorer answer, an added edge leaves the recommendations, every bad request is its
status and one line, the token rules, and the settings as a Serve config file."""

import numpy as np
import pytest
import torch
import yaml

from pipelines.recommend.engine import RecConfig, run_block, sampler_for, scorer_for
from pipelines.score import Scoring, score_pairs
from pipelines.serve.handlers import (
    NO_TOKEN,
    Engine,
    Limits,
    RecQuery,
    check_token,
    edit_size,
    parse_json,
    read_token,
    recommend_query,
    score_body,
    token_digest,
)
from pipelines.serve.settings import Settings
from pipelines.serve.state import GraphState, ServeError
from trainer.model.pencil import ModelConfig, Pencil

CFG = RecConfig(k=5, pool=20, sampling=(1, 5), n_max=12)
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Pencil(ModelConfig(n_max=12, hidden=16, layers=1, heads=2, ffn=32, dropout=0.0)).eval()


@pytest.fixture(scope="module")
def graph():
    from common.datasets import DatasetSpec, load_dataset

    return load_dataset(DatasetSpec("citeseer")).graph_for("test")


@pytest.fixture
def engine(model, graph):
    return Engine(model, GraphState(graph, None, 100), CFG, CPU)


def status_of(fn, *args) -> tuple[int, str]:
    with pytest.raises(ServeError) as err:
        fn(*args)
    return err.value.status, err.value.message


def busy_nodes(graph, count: int) -> list[int]:
    return np.flatnonzero(graph.degree >= 3)[:count].tolist()


def test_a_batch_of_recommendations_is_pencil_recommends(engine, model, graph):
    nodes = busy_nodes(graph, 4)
    other = RecConfig(k=3, pool=10, retriever="ppr", sampling=(1, 5), n_max=12)
    queries = [RecQuery(str(n), CFG) for n in nodes] + [RecQuery(str(nodes[0]), other), RecQuery(str(nodes[1]), CFG)]
    answers, pairs = engine.recommend(queries)
    assert pairs > 0 and answers[5] == answers[1]  # a node asked twice in a batch: one answer
    for q, answer in zip(queries, answers):
        cfg = q.cfg
        table, _ = run_block(
            0, np.array([int(q.node)]), graph, cfg, sampler_for(graph, cfg), scorer_for(model, graph, cfg, CPU)
        )
        want = table.to_pydict()
        got = answer["recommendations"]
        assert answer["node"] == int(q.node) and len(got) == len(want["candidate"]) <= cfg.k
        assert [r["candidate"] for r in got] == want["candidate"] and [r["rank"] for r in got] == want["rank"]
        np.testing.assert_allclose([r["score"] for r in got], want["score"], rtol=1e-6)
        np.testing.assert_allclose([r["retriever_score"] for r in got], want["retriever_score"])
        assert not any(graph.has_edge(int(q.node), r["candidate"]) or r["candidate"] == int(q.node) for r in got)


def test_scores_are_pencil_scores(engine, model, graph):
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, graph.num_nodes, (30, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    answers, scored = engine.score([pairs[:10].tolist(), pairs[10:].tolist()])
    got = answers[0]["scores"] + answers[1]["scores"]
    assert scored == len(pairs) and [[r["src"], r["dst"]] for r in got] == pairs.tolist()
    want = score_pairs(model, graph, pairs, Scoring((1, 5), 12, 0, 1, 512), CPU)[0]
    np.testing.assert_allclose([r["logit"] for r in got], want, atol=1e-5)
    np.testing.assert_allclose([r["score"] for r in got], 1 / (1 + np.exp(-want.astype(np.float64))), atol=1e-6)


def test_an_added_edge_leaves_the_recommendations(engine):
    node = busy_nodes(engine.state.graph, 1)[0]
    before = engine.recommend([RecQuery(str(node), CFG)])[0][0]["recommendations"]
    top = before[0]["candidate"]
    record = {"seq": 1, **engine.state.edit_record({"add": [[node, top], [node, "3400"]]})}
    engine.apply([record])
    after = engine.recommend([RecQuery(str(node), CFG)])[0][0]["recommendations"]
    assert top not in [r["candidate"] for r in after] and 3400 not in [r["candidate"] for r in after]
    assert {top, 3400} <= set(engine.neighbors(str(node))["neighbors"])
    assert engine.neighbors("3400") == {"node": 3400, "neighbors": [node]}


def test_bad_requests_are_their_status_and_one_line(engine):
    limits = Limits(max_pairs=3, max_edges=2, max_k=50, max_pool=100)
    assert status_of(recommend_query, "1", {"k": "0"}, CFG, limits) == (400, "k=0: out of range; use 1 to 50")
    assert status_of(recommend_query, "1", {"k": "x"}, CFG, limits)[0] == 400
    assert status_of(recommend_query, "1", {"pool": "101"}, CFG, limits)[0] == 400
    assert status_of(recommend_query, "1", {"k": "9", "pool": "8"}, CFG, limits)[0] == 400
    assert status_of(recommend_query, "1", {"retriever": "bm25"}, CFG, limits)[0] == 400
    assert status_of(recommend_query, "1", {"kk": "1"}, CFG, limits)[0] == 400
    from starlette.datastructures import QueryParams

    assert status_of(recommend_query, "1", QueryParams("k=3&k=4"), CFG, limits) == (
        400,
        "query parameter 'k' given 2 times; give it once",
    )
    assert recommend_query("1", QueryParams("k=3&pool=30"), CFG, limits).cfg.pool == 30
    assert recommend_query("7", {"k": "3"}, CFG, limits).cfg == RecConfig(k=3, pool=20, sampling=(1, 5), n_max=12)
    assert status_of(parse_json, b"{nope")[0] == 400
    assert status_of(score_body, {"pairs": [[1, 2]] * 4}, limits) == (
        413,
        "too many pairs: 4 in one request; the limit is 3",
    )
    assert status_of(score_body, {"pair": []}, limits)[0] == 400
    assert status_of(score_body, {"pairs": []}, limits)[0] == 400
    assert status_of(score_body, {"pairs": [[1, 2, 3]]}, limits)[0] == 400
    assert status_of(edit_size, {"add": [[1, 2]] * 2, "remove": [[3, 4]]}, limits)[0] == 413
    answers, scored = engine.score([[[1, 99999]], [[5, 5]], [[1, 2]]])
    assert (answers[0].status, answers[0].message) == (
        404,
        "unknown node 99999: not in the serving graph (add it with POST /edges)",
    )
    assert answers[1].status == 400 and "with itself" in answers[1].message
    assert scored == 1 and len(answers[2]["scores"]) == 1
    answers, _ = engine.recommend([RecQuery("99999", CFG)])
    assert answers[0].status == 404 and "99999" in answers[0].message


def test_tokens(tmp_path):
    digest = token_digest("s3cret")
    check_token("Bearer s3cret", digest)
    assert status_of(check_token, None, digest)[0] == 401
    assert status_of(check_token, "Bearer nope", digest) == (401, "wrong token")
    assert status_of(check_token, "Basic s3cret", digest)[0] == 401
    assert status_of(check_token, "Bearer s3cret", None) == (401, NO_TOKEN)
    f = tmp_path / "token"
    f.write_text("from-file\n")
    assert read_token(str(f), {"PENCIL_SERVE_TOKEN": "from-env"}) == "from-file"
    assert read_token(None, {"PENCIL_SERVE_TOKEN": "from-env"}) == "from-env" and read_token(None, {}) is None
    f.write_text("  \n")
    with pytest.raises(ValueError, match="the file is empty"):
        read_token(str(f), {})
    with pytest.raises(ValueError, match="cannot read it"):
        read_token(str(tmp_path / "missing"), {})


def test_settings_and_the_serve_config_file(tmp_path):
    from pipelines.serve.app import graph_app, service_app
    from pipelines.serve.command import write_config

    with pytest.raises(ValueError, match="unknown setting 'kk'"):
        Settings.from_dict({"kk": 1})
    with pytest.raises(ValueError, match="--max-k"):
        Settings.from_dict({"k": 50, "max_k": 10})
    with pytest.raises(ValueError, match="smaller than --k"):
        Settings.from_dict({"k": 50, "pool": 10})
    (tmp_path / "token").write_text("t0k3n")
    s = Settings.from_dict(
        {
            "checkpoint": "/runs/seed0/best.pt",
            "state": "/srv/state",
            "shards": "/shards/set",
            "replicas": "2",
            "k": 10,
            "token_file": str(tmp_path / "token"),
        }
    ).with_token({})
    assert s.replicas == 2 and s.token_sha256 == token_digest("t0k3n")
    assert "t0k3n" not in str(s.service_dict()) and "token_file" not in s.service_dict()
    write_config(str(tmp_path / "serve.yaml"), s, "127.0.0.1", 8000)
    config = yaml.safe_load((tmp_path / "serve.yaml").read_text())
    graph, service = config["applications"]
    assert config["http_options"] == {"host": "127.0.0.1", "port": 8000}
    assert graph["import_path"] == "pipelines.serve.app:graph_app" and graph["route_prefix"] is None
    assert graph["args"] == {"shards": "/shards/set", "graph": "all", "state": "/srv/state", "max_edges": 10000}
    assert service["args"] == {
        "checkpoint": "/runs/seed0/best.pt",
        "shards": "/shards/set",
        "replicas": 2,
        "k": 10,
        "token_file": str(tmp_path / "token"),
    }
    # the builders check the run before anything deploys (these paths name none; a real one builds:
    # tests/test_portable_runs.py)
    with pytest.raises(ValueError, match="^/shards/set: no manifest"):
        graph_app(graph["args"])
    with pytest.raises(ValueError, match="^setting 'checkpoint' /runs/seed0/best.pt: no such file"):
        service_app(service["args"])


def test_request_bodies_are_strict_json():
    """Python's json keeps the last of two keys and reads NaN; its parser recurses once per level: each is a 400."""
    for body, text in (
        (b'{"add": [[1, 50]], "add": [[2, 51]]}', "key 'add' appears twice in one object"),
        (b'{"add": [[1, 50]], "features": {"50": [1], "50": [2]}}', "key '50' appears twice in one object"),
        (b"[" * 100_000, "nested deeper than 8 levels"),
        (b"[" * 9 + b"]" * 9, "nested deeper than 8 levels"),
        (b'{"pairs": [[1, NaN]]}', "NaN is not a JSON number"),
        (b'{"pairs": [[1, -Infinity]]}', "-Infinity is not a JSON number"),
    ):
        code, message = status_of(parse_json, body)
        assert code == 400 and message.startswith("malformed JSON body: ") and text in message, (body[:40], message)
    assert parse_json(b'{"add": [["u", "v"]], "features": {"v": [1, 2]}}')["features"] == {"v": [1, 2]}
    assert parse_json(b"[" * 8 + b"]" * 8) == [[[[[[[[]]]]]]]]


def test_a_pair_without_a_finite_score_fails_alone(model):
    """A featured model fed a row far beyond its training (here in the run's own table, which no edit can put
    there now) scores NaN: that pair gets nulls and its error, the others their scores, and the answer is JSON."""
    import json

    from common.graph import Graph

    featured = Pencil(ModelConfig(n_max=12, hidden=16, layers=1, heads=2, ffn=32, dropout=0.0, num_features=2)).eval()
    x = np.ones((6, 2), np.float32)
    x[5] = 1e30
    g = Graph.from_edges([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [0, 2]], num_nodes=6, x=x)
    engine = Engine(featured, GraphState(g, None, 10), RecConfig(k=2, pool=4, sampling=(1, 5), n_max=12), CPU)
    (answer,), scored = engine.score([[[0, 1], [4, 5]]])
    good, bad = answer["scores"]
    assert scored == 2 and 0 < good["score"] < 1 and "error" not in good
    assert bad == {
        "src": 4,
        "dst": 5,
        "score": None,
        "logit": None,
        "score_std": None,
        "error": "the model gave this pair no finite score (NaN or infinite); the other pairs stand",
    }
    (recs,), _ = engine.recommend([RecQuery("4", engine.cfg)])
    json.dumps([answer, recs], allow_nan=False)  # what the HTTP layer does: no NaN reaches it


def test_an_id_that_is_not_valid_unicode_is_a_400_on_every_endpoint(engine):
    surrogate = "\ud800"
    answers, _ = engine.score([[[1, surrogate]]])
    assert answers[0].status == 400 and "is not valid Unicode text" in answers[0].message
    answers, _ = engine.recommend([RecQuery(surrogate, CFG)])
    assert answers[0].status == 400
    assert status_of(engine.neighbors, surrogate)[0] == 400
