"""A run whose model reads node features (an edge list with --node-features), through every command on it: `pencil
score`, `recommend` and `evaluate` read the features from the run (the shard set ships them), a snapshot with a node
the run has no features for is refused in one line, and `pencil serve` answers /recommend for an old node and for a
new node added with its features, refuses a new node without them with a 400, and replays the added rows after a
restart. The service is the real command on 127.0.0.1, driven by a real HTTP client. Slow: a service start takes
about a minute on 2 shared cores."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from bench.serve import request, service
from pipelines.core.ray_head import free_ports
from tests.conftest import needs_ray, write_edges
from tests.test_run_commands import EVALUATE, RECOMMEND, SCORE, main_of  # noqa: F401  main_of: a fixture
from tests.test_run_inputs import one_error, pairs_file

pytestmark = [pytest.mark.slow, needs_ray]
TOKEN = "featured-token-81c2"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def call(port: int, method: str, path: str, body=None, headers=None) -> tuple[int, dict]:
    status, text = request(port, method, path, body, headers)
    assert "\n" not in text.strip(), text  # one line
    return status, json.loads(text)


def test_score_recommend_and_evaluate_read_the_runs_features(featured_shop_run, tmp_path, main_of):  # noqa: F811
    import torch

    from pipelines.core.runs import load_run
    from pipelines.score import Scoring, score_pairs

    run = featured_shop_run
    pairs = [("u001", "i003"), ("u010", "i020"), ("u042", "i007")]
    code, err = main_of(
        SCORE,
        [
            "--checkpoint",
            run["run"],
            "--pairs",
            pairs_file(tmp_path / "p.csv", pairs),
            "--out",
            tmp_path / "s.parquet",
            "--graph",
            "all",
            "--device",
            "cpu",
        ],
    )
    assert code == 0, err[-2000:]
    got = pq.read_table(tmp_path / "s.parquet").column("logit").to_numpy()
    model, ds, fields, _ = load_run(str(run["run"]), torch.device("cpu"))
    assert model.cfg.num_features == 4 and ds.x.shape == (ds.num_nodes, 4)
    from common.snapshot import whole_graph

    idx = np.searchsorted(ds.node_ids, np.array(pairs, dtype=object))
    model.attach_features(torch.zeros(ds.num_nodes, 4))  # the same model on other features scores otherwise
    how = Scoring(fields["sampling"], fields["n_max"], 0, 1, 512)
    other = score_pairs(model, whole_graph(ds), idx, how, torch.device("cpu"))[0]
    assert not np.allclose(got, other)

    # recommend (PENCIL alone: prior weight 0) gives each candidate pencil score's probability
    (tmp_path / "nodes.txt").write_text("u001\nu010\n")
    code, err = main_of(
        RECOMMEND,
        [
            "--checkpoint",
            run["run"],
            "--nodes",
            tmp_path / "nodes.txt",
            "--k",
            "5",
            "--out",
            tmp_path / "r.parquet",
            "--prior-weight",
            "0",
            "--device",
            "cpu",
            "--no-progress",
        ],
    )
    assert code == 0, err[-2000:]
    recs = pq.read_table(tmp_path / "r.parquet").to_pandas()
    assert len(recs) == 10
    code, err = main_of(
        SCORE,
        [
            "--checkpoint",
            run["run"],
            "--out",
            tmp_path / "rs.parquet",
            "--graph",
            "all",
            "--pairs",
            pairs_file(tmp_path / "rp.csv", zip(recs.node, recs.candidate, strict=True)),
            "--device",
            "cpu",
        ],
    )
    assert code == 0, err[-2000:]
    np.testing.assert_allclose(pq.read_table(tmp_path / "rs.parquet").column("score").to_numpy(), recs.score, rtol=1e-6)

    code, err = main_of(
        EVALUATE, [run["run"], "--out", tmp_path / "e.json", "--pool", "20", "--k", "10", "--device", "cpu"]
    )
    assert code == 0, err[-2000:]
    assert json.loads((tmp_path / "e.json").read_text())["splits"]["test"]["pencil_rerank"]["mrr"] > 0

    # a snapshot with a node the run has no features for: one line, the node and the fix; none new: scored
    rows = [line.split(",") for line in run["edges"].read_text().splitlines()[1:]]
    write_edges(tmp_path / "today.csv", [*rows, ("u999", "i001")])
    for module, extra in ((SCORE, ["--pairs", tmp_path / "p.csv"]), (RECOMMEND, ["--all-nodes", "--no-progress"])):
        line = one_error(
            *main_of(
                module,
                [
                    "--checkpoint",
                    run["run"],
                    *extra,
                    "--graph",
                    tmp_path / "today.csv",
                    "--out",
                    tmp_path / "x.parquet",
                    "--device",
                    "cpu",
                ],
            )
        )
        assert f"--graph {tmp_path / 'today.csv'}: 1 node(s) are new since training (first: u999)" in line, line
        assert "reads node features" in line and "POST /edges" in line
        assert not (tmp_path / "x.parquet").exists()
    write_edges(tmp_path / "same.csv", [*rows, ("u001", "i049")])
    code, err = main_of(
        SCORE,
        [
            "--checkpoint",
            run["run"],
            "--pairs",
            tmp_path / "p.csv",
            "--graph",
            tmp_path / "same.csv",
            "--out",
            tmp_path / "same.parquet",
            "--device",
            "cpu",
        ],
    )
    assert code == 0, err[-2000:]


def test_serve_takes_a_new_node_with_its_features_and_refuses_one_without(featured_shop_run, tmp_path):
    run = featured_shop_run
    port, state = free_ports(1)[0], tmp_path / "state"
    env = {"PENCIL_SERVE_TOKEN": TOKEN}
    row = [0.25, 0.5, 0.75, 1.0]
    with service(str(run["run"]), state, port, "--device", "cpu", env=env, log_path=tmp_path / "serve.log"):
        status, health = call(port, "GET", "/health")
        assert status == 200, health
        status, body = call(port, "GET", "/recommend/u001?k=5")
        assert status == 200 and len(body["recommendations"]) == 5, body
        edit = {"add": [["u500", "i001"], ["u500", "i002"]], "features": {"u500": row}}
        status, body = call(port, "POST", "/edges", edit, AUTH)
        assert status == 200 and body["nodes"] == health["nodes"] + 1, body
        status, body = call(port, "GET", "/recommend/u500?k=5")
        assert status == 200 and len(body["recommendations"]) == 5, body
        assert not {r["candidate"] for r in body["recommendations"]} & {"i001", "i002", "u500"}
        status, scored = call(port, "POST", "/score", {"pairs": [["u500", "i003"], ["u001", "i003"]]})
        assert status == 200, scored
        errors = [
            ({"add": [["u600", "i001"]]}, "node 'u600' is new and this model reads node features: send its row"),
            ({"add": [["u600", "i001"]], "features": {"u600": [1.0, 2.0]}}, "'features'['u600']: expected 4"),
            ({"add": [["u600", "i001"]], "features": {"u600": [1, 2, 3, "x"]}}, "expected 4 finite numbers"),
            ({"add": [["u001", "i004"]], "features": {"u001": row}}, "'features': node 'u001' is not created"),
        ]
        for body, line in errors + [  # what an earlier version acknowledged, and then answered with 500s
            ({"add": [["u001", "\ud800"]]}, "'add'[0]: node id '\\ud800' is not valid Unicode text"),
            ({"add": [["u600", "i001"]], "features": {"u600": [1e30, 0, 0, 0]}}, "'features'['u600']: a value beyond"),
            (b'{"add": [["u600", "i001"]], "add": [["u601", "i001"]]}', "key 'add' appears twice in one object"),
            (b"[" * 100_000, "nested deeper than 8 levels"),
        ]:
            status, answer = call(port, "POST", "/edges", body, AUTH)
            assert status == 400 and line in answer["error"], answer
        assert call(port, "GET", "/recommend/u600")[0] == 404  # never added: no features were invented for it
    log = state / "edits.jsonl"
    seq = json.loads(log.read_text().splitlines()[-1])["seq"]
    with open(log, "a") as f:  # a log an earlier version poisoned: a lone surrogate, a node with a row of 1e30
        poison = {"add": [["u001", "\ud800"], ["u700", "i001"]], "remove": [], "features": [["u700", [1e30, 0, 0, 0]]]}
        f.write(json.dumps({"seq": seq + 1, **poison}) + "\n")
    with service(str(run["run"]), state, port, "--device", "cpu", env=env, log_path=tmp_path / "serve2.log"):
        status, again = call(port, "POST", "/score", {"pairs": [["u500", "i003"], ["u001", "i003"]]})
        assert status == 200 and again == scored  # the replayed edit holds the new node's row
        assert call(port, "GET", "/neighbors/u001")[0] == 200 and call(port, "GET", "/recommend/u001")[0] == 200
        assert call(port, "POST", "/score", {"pairs": [["u700", "i003"]]})[0] == 404  # dropped at replay
        assert call(port, "GET", "/health")[1]["seq"] == seq + 1
    assert "3 entries dropped at replay" in (tmp_path / "serve2.log").read_text()
