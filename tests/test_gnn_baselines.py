"""GNN baselines (pipelines/paper/gnn.py, pipelines/gnn_baselines.py): model pieces against hand formulas, evaluation
identical to common.metrics, selection at the best validation epoch, learning on an easy graph, and a tiny
end-to-end run of the recipe on the shipped citeseer split."""

import json

import numpy as np
import pytest
import torch

from common.datasets.base import LinkDataset, Split, training_graph
from common.graph import Graph
from common.metrics import evaluate
from pipelines.paper import gnn_baselines
from pipelines.paper.gnn import (
    GNNConfig,
    GNNConfigError,
    GNNLinkPredictor,
    edge_index,
    evaluate_split,
    fit,
    node_inputs,
)


def community_dataset(seed=0, n=16):
    """Two dense communities; features = community one-hot + noise. Eval positives are held-out intra edges,
    negatives are inter-community pairs, so a working GNN must rank well above chance."""
    rng = np.random.default_rng(seed)
    comm = np.repeat([0, 1], n)
    pairs = np.array([(a, b) for a in range(2 * n) for b in range(a + 1, 2 * n) if comm[a] == comm[b]])
    pairs = pairs[rng.random(len(pairs)) < 0.5]
    pairs = pairs[rng.permutation(len(pairs))]
    valid, test, train = pairs[:10], pairs[10:20], pairs[20:]
    inter = np.array([(a, b) for a in range(n) for b in range(n, 2 * n)])
    neg = inter[rng.choice(len(inter), 40, replace=False)]
    x = np.eye(2)[comm] + 0.1 * rng.standard_normal((2 * n, 2))
    return LinkDataset(
        "communities",
        training_graph(train, 2 * n, x=x.astype(np.float32)),
        {
            "train": Split(train),
            "valid": Split(valid, {"original": neg[:20]}),
            "test": Split(test, {"original": neg[20:]}),
        },
        metric={"original": "mrr"},
    )


def test_config_errors_name_the_field():
    for kw, field in [
        (dict(encoder="gin"), "encoder"),
        (dict(decoder="bilinear"), "decoder"),
        (dict(hidden=0), "hidden"),
        (dict(encoder="gat", hidden=30, heads=4), "heads"),
        (dict(dropout=1.0), "dropout"),
    ]:
        with pytest.raises(GNNConfigError, match=field):
            GNNConfig(**kw)


def test_encoders_are_the_pyg_layers():
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv

    for enc, cls in (("gcn", GCNConv), ("sage", SAGEConv), ("gat", GATConv)):
        m = GNNLinkPredictor(GNNConfig(encoder=enc, hidden=8, layers=3, heads=2), in_features=5)
        assert [type(c) for c in m.convs] == [cls] * 3
    gat = GNNLinkPredictor(GNNConfig(encoder="gat", hidden=8, layers=2, heads=2), in_features=5)
    h = gat.encode(torch.randn(4, 5), torch.tensor([[0, 1, 2], [1, 2, 3]]))
    assert h.shape == (4, 8)  # heads concatenated inside, one head at the output


def test_gcn_layer_is_the_normalised_propagation_and_decoders():
    # path 0-1-2; one GCN layer: H = D^-1/2 (A + I) D^-1/2 X W + b
    g = Graph.from_edges(np.array([[0, 1], [1, 2]]), num_nodes=3)
    ei = edge_index(g, "cpu")
    assert sorted(map(tuple, ei.T.tolist())) == [(0, 1), (1, 0), (1, 2), (2, 1)]
    m = GNNLinkPredictor(GNNConfig(encoder="gcn", hidden=4, layers=1, decoder="dot", dropout=0.0), 3).double().eval()
    x = torch.randn(3, 3, dtype=torch.float64)
    a = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 1, 1]], dtype=torch.float64)
    dinv = a.sum(1) ** -0.5
    conv = m.convs[0]
    expect = (dinv[:, None] * a * dinv[None]) @ x @ conv.lin.weight.T + conv.bias
    h = m.encode(x, ei)
    torch.testing.assert_close(h, expect)
    pairs = torch.tensor([[0, 2], [1, 1]])
    torch.testing.assert_close(m.decode(h, pairs), (h[[0, 1]] * h[[2, 1]]).sum(-1))
    mlp = (
        GNNLinkPredictor(GNNConfig(hidden=4, layers=1, decoder="mlp", decoder_layers=2, dropout=0.0), 3).double().eval()
    )
    torch.testing.assert_close(mlp.decode(h, pairs), mlp.mlp(h[[0, 1]] * h[[2, 1]]).squeeze(-1))


def test_constant_inputs_without_features():
    ds = community_dataset()
    assert node_inputs(ds, True, "cpu").shape == (32, 2)
    ones = node_inputs(ds, False, "cpu")
    assert ones.shape == (32, 1) and bool((ones == 1).all())


@pytest.mark.parametrize("protocol_shape", ["shared", "per_positive"])
def test_evaluation_equals_common_metrics(protocol_shape):
    ds = community_dataset()
    if protocol_shape == "per_positive":  # heart-like: (P, K, 2), with repeated pairs
        neg = np.stack([ds.splits["valid"].neg["original"][:5]] * 10)
        ds.splits["valid"] = Split(ds.splits["valid"].pos, {"heart": neg})
    proto = "heart" if protocol_shape == "per_positive" else "original"
    m = GNNLinkPredictor(GNNConfig(hidden=8, layers=2, dropout=0.0), 2).eval()
    x = node_inputs(ds, True, "cpu")
    got = evaluate_split(m, ds, x, "valid", proto)
    with torch.no_grad():
        h = m.encode(x, edge_index(ds.graph, "cpu"))
        pos = m.decode(h, torch.from_numpy(ds.splits["valid"].pos)).numpy()
        negp = ds.splits["valid"].negatives(proto)
        neg = m.decode(h, torch.from_numpy(negp.reshape(-1, 2))).numpy().reshape(negp.shape[:-1])
    want = evaluate(proto, pos, neg)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], abs=1e-6)


def test_fit_learns_and_reports_test_at_the_best_validation_epoch():
    ds = community_dataset()
    run = fit(
        ds,
        GNNConfig(encoder="gcn", hidden=16, layers=2, epochs=40, eval_every=2, lr=0.02, dropout=0.0, batch_size=32),
        ["original"],
        seed=0,
        device="cpu",
    )
    best = run["protocols"]["original"]
    valids = [r["original"]["valid"]["mrr"] for r in run["history"]]
    assert best["valid"]["mrr"] == max(valids)
    first_best = next(r for r in run["history"] if r["original"]["valid"]["mrr"] == max(valids))
    assert best["best_epoch"] == first_best["epoch"] and best["test"] == first_best["original"]["test"]
    # 10 positives vs 20 shared inter-community negatives: chance MRR is about 0.1
    assert best["test"]["mrr"] > 0.5, best["test"]
    assert run["inputs"] == "features"


def test_recipe_end_to_end_tiny(tmp_path, capsys):
    assert (
        gnn_baselines.main(
            [
                "--preset",
                "tiny",
                "--inputs",
                "constant",
                "--models",
                "gcn",
                "--seeds",
                "0",
                "--out",
                str(tmp_path),
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    out = tmp_path / "gnn_baselines" / "tiny"
    recs = {}
    for proto in ("original", "heart"):
        rec = recs[proto] = json.loads((out / proto / "gcn-constant" / "seed0" / "result.json").read_text())
        assert rec["model"] == "GCN (constant)" and rec["protocol"] == proto
        assert rec["config"]["use_features"] is False and rec["best_epoch"] in (1, 2)
    # Original protocol: 455 test positives against 455 shared random negatives. Random scores stay below ~0.03
    # (99.9 %), a constant score ties everywhere (2 / 457); the run gets ~0.07 (seeds 0-2).
    from common.datasets import DatasetSpec, load_dataset
    from tests.chance import chance_mrr

    test = load_dataset(DatasetSpec("citeseer")).splits["test"]
    p, q = len(test.pos), len(test.neg["original"])
    assert recs["original"]["test"]["mrr"] > chance_mrr(np.arange(p), p + np.arange(q))
    # HeaRT's negatives are hard by construction (the pairs structure-only heuristics rank high): a 2-epoch
    # constant-input GCN lands *below* random there (~0.009 vs 0.0136), so only "it ranked, with real scores"
    # (a constant score would give every positive the tie rank 251) is checked; learning itself is
    # test_fit_learns_and_reports_test_at_the_best_validation_epoch's (above chance by far on communities).
    assert recs["heart"]["test"]["mrr"] > 1.5 / 251
    report = (out / "report.md").read_text()
    assert "GCN (paper, from HeaRT) | – | 50.01 ± 6.04" in report and "21.09 ± 0.88" in report
    assert "below the paper's" in report  # a 2-epoch constant-input GCN gets an honest note
    assert (out / "gnn_baselines.png").stat().st_size > 0
    table = json.loads((out / "results.json").read_text())["table"]
    assert {r["protocol"] for r in table} == {"original", "heart"}
    assert "GCN (constant)" in capsys.readouterr().out


def test_recipe_bad_flags_are_one_line(capsys):
    with pytest.raises(SystemExit) as err:
        gnn_baselines.main(["--preset", "nope"])
    assert err.value.code == 2
    msg = capsys.readouterr().err.strip()
    assert len(msg.splitlines()) == 1 and "--preset" in msg and "citeseer-small" in msg
    with pytest.raises(SystemExit):
        gnn_baselines.main(["--preset", "tiny", "--models", "gcn,gin"])
    assert "--models" in capsys.readouterr().err
