"""`pencil run`'s view of an edge list's other inputs, without training: the flags become the run's DatasetSpec (and
every shard set's preprocess config), the bad combinations are refused in one line before any work, the report's
rows say which split and which checkpoints they come from, the variant runs (without features, on the user's pairs)
are the seed's run changed in what they name only; under a temporal split the retrievers and the full ranking
propose only nodes that exist by the boundary (hand-computed), and the served graph of a featured model takes a new
node only with its row."""

from __future__ import annotations

import numpy as np
import pytest

from common.graph import Graph
from pipelines.core.trainers import TrainerRun
from tests.conftest import run_config


def test_the_graph_inputs_reach_the_run_and_its_shard_sets(tmp_path):
    from pipelines.core.shard_sets import preprocess_config

    cfg = run_config(
        "--dataset",
        "e.csv",
        "--split",
        "temporal,80,10,10",
        "--node-features",
        "f.csv",
        "--fill-features",
        "mean",
        "--ignore-columns",
        "channel, note",
        "--eval-pairs",
        "p.csv",
        "--train-negatives",
        "n.csv",
        "--out",
        tmp_path / "r",
        "--shards",
        tmp_path / "s",
    )
    src = cfg.source
    assert (src.split_kind, src.split, src.node_features, src.fill_features) == (
        "temporal",
        (80.0, 10.0, 10.0),
        "f.csv",
        "mean",
    )
    assert (src.ignore_columns, src.eval_pairs, src.train_negatives) == (("channel", "note"), "p.csv", "n.csv")
    assert cfg.ships_features and not cfg.shards.features and not src.features
    pre = preprocess_config(src, cfg.shards, (1, 3), 1, 100.0, ["original", "pairs"])
    assert pre.data == src  # the spec reaches the shard set whole
    assert pre.ships_features
    plain = run_config("--dataset", "e.csv", "--split", "random", "--out", tmp_path / "r", "--shards", tmp_path / "s")
    assert (plain.source.split_kind, plain.source.split, plain.ships_features) == ("random", None, False)


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["--fill-features", "zero"],
            "--fill-features zero: fills the rows a --node-features file lacks; pass --node-features FILE",
        ),
        (
            ["--features", "--node-features", "f.csv"],
            "--features loads a paper dataset's node features, --node-features",
        ),
        (["--train-arg=--no-features"], "--train-arg --no-features: a run with node features trains both rows itself"),
        (["--protocol", "pairs"], "--protocol pairs: evaluates on your labelled pairs; pass --eval-pairs FILE"),
        (["--split", "sideways"], "--split: unknown kind 'sideways'; use random or temporal"),
    ],
)
def test_bad_combinations_are_one_line_before_any_work(tmp_path, capsys, argv, line):
    from pipelines.run import main

    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "--dataset",
                str(tmp_path / "missing.csv"),
                "--out",
                str(tmp_path / "r"),
                "--shards",
                str(tmp_path / "s"),
                *argv,
            ]
        )
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and line in err[0], err
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


# ---------------------------------------------------------------------------- the report's rows
def record(seed, model="PENCIL w/o features", protocol="original", fingerprint="a", mrr=0.5, **labels):
    return {
        "dataset": "msgs",
        "protocol": protocol,
        "model": model,
        "seed": seed,
        "own_graph": True,
        "dataset_fingerprint": fingerprint,
        "test": {"mrr": mrr},
        **labels,
    }


def test_rows_say_which_split_and_which_checkpoints_they_come_from():
    from pipelines.core.results import aggregate, check_mixing, markdown

    results = [
        record(0, split="temporal", mrr=0.2),
        record(1, split="temporal", mrr=0.4),
        record(0, fingerprint="b", split="random", mrr=0.6),  # --split random: another graph's split
        record(0, protocol="pairs", split="temporal", selected_on="original", mrr=0.1),
        record(0, protocol="pairs", split="temporal", model="PENCIL", mrr=0.3),
    ]  # --protocol pairs
    check_mixing(results)  # each label its own row: nothing mixes
    rows = aggregate(results)
    table = markdown(rows)
    assert "| msgs | original, temporal split | PENCIL w/o features | 2 | 30.00 ± 14.14 |" in table
    assert "| msgs | original, random split | PENCIL w/o features | 1 | 60.00 ± 0.00 |" in table
    assert "| msgs | pairs, temporal split, selected on original | PENCIL w/o features | 1 | 10.00 ± 0.00 |" in table
    assert "| msgs | pairs, temporal split | PENCIL | 1 | 30.00 ± 0.00 |" in table
    paper = [
        {
            "dataset": "citeseer",
            "protocol": "original",
            "model": "PENCIL",
            "seed": 0,
            "test": {"mrr": 0.4},
            "selected_on": "heart",
        }
    ]
    assert "(paper)" not in markdown(aggregate(paper))  # the paper's rows are the protocol's own checkpoints
    assert "(paper)" in markdown(aggregate([{**paper[0], "selected_on": None}]))


# ---------------------------------------------------------------------------- the variant runs
def test_variant_runs_change_only_what_they_name(tmp_path):
    from pipelines.core.variants import pairs_runs, without_features
    from trainer.run_summary import RunSummary

    run = TrainerRun(
        tmp_path / "original" / "seed1",
        "shards/x",
        "tiny",
        1,
        "original",
        overrides=("--lr", "0.1"),
        eval_weights="search/best.pt",
        fresh=True,
        stop_epoch=3,
        save_scores=True,
    )
    no_features = without_features({1: run})[1]
    assert no_features.run_dir == tmp_path / "original" / "no-features" / "seed1"
    assert (
        no_features.overrides == ("--no-features", "--lr", "0.1")
        and no_features.eval_weights is None
        and not no_features.fresh
    )
    assert (no_features.shards, no_features.seed, no_features.stop_epoch, no_features.protocol) == (
        "shards/x",
        1,
        3,
        "original",
    )
    beside = pairs_runs({1: run, 2: run}, {1: RunSummary(weights_from="/abs/best.pt")})
    assert list(beside) == [1]  # a seed without a summary has no checkpoint to evaluate
    assert beside[1].run_dir == tmp_path / "original" / "pairs" / "seed1"
    assert (beside[1].protocol, beside[1].eval_weights, beside[1].stop_epoch) == ("pairs", "/abs/best.pt", None)
    again = pairs_runs({0: no_features}, {0: RunSummary()})[0]
    assert again.eval_weights == str(no_features.run_dir / "best.pt") and "--no-features" in again.flags()


# ---------------------------------------------------------------------------- nothing from the future
# 0-1, 1-2, 1-3, 1-4, 5-6. Node 4 does not exist yet (not a candidate).
TINY = Graph.from_edges([(0, 1), (1, 2), (1, 3), (1, 4), (5, 6)], num_nodes=7)
EXISTING = np.array([0, 1, 2, 3, 5, 6])


def test_retrievers_and_their_fill_propose_only_candidates():
    from common.retrieval import Allowed, retrieve

    for method in ("ra", "aa", "ppr", "mix"):
        pool = retrieve(TINY, [0], method, 3, fill=True, allowed=Allowed(candidates=EXISTING))
        assert 4 not in pool.cand and sorted(pool.cand[0].tolist()) == [2, 3, 5], (method, pool.cand)
    pool = retrieve(TINY, [0], "ra", 3, fill=True)
    assert pool.cand[0].tolist() == [2, 3, 4]


class IdScorer:
    """A stand-in model: logit = the candidate id."""

    def logits(self, pairs):
        return pairs[:, 1][None, :].astype(np.float32)


def test_full_ranking_ranks_among_the_nodes_that_exist():
    from common.retrieval import Allowed
    from pipelines.recommend.engine import RecConfig
    from pipelines.recommend.ranking import full_ranking

    pos = np.array([[0, 3], [0, 6]])
    cfg = RecConfig(k=1, pool=3, retriever="ra", n_max=12, sampling=(1, 5))
    res = full_ranking(TINY, pos, pos, cfg, IdScorer(), allowed=Allowed(candidates=EXISTING))
    # pool of 0: RA {2, 3} (1/4 each), filled with 5 (4 does not exist). (0, 3): tied with 2 -> 1.5 for the
    # retriever; PENCIL by id: 5, then 3 -> 2. (0, 6): outside the pool of {2, 5} (3 is the other positive);
    # rankable {2, 5, 6}: 2 + (3 - 2 + 1) / 2 = 3 for both.
    assert res["retriever_alone"]["mrr"] == pytest.approx((1 / 1.5 + 1 / 3) / 2)
    assert res["pencil_rerank"]["mrr"] == pytest.approx((1 / 2 + 1 / 3) / 2)
    every = full_ranking(TINY, pos, pos, cfg, IdScorer())  # 4 competes: pool {2, 3, 4}, rankable {2, 4, 5, 6}
    assert every["retriever_alone"]["mrr"] == pytest.approx((1 / 2 + 1 / 3.5) / 2)


def test_a_recommendation_on_a_temporal_splits_graph_proposes_existing_nodes(tmp_path):
    from common.datasets import DatasetSpec, load_dataset
    from pipelines.recommend.job import split_candidates

    rows = [
        (f"n{u}", f"n{v}", t)
        for t, (u, v) in enumerate(
            [
                (0, 1),
                (1, 2),
                (2, 3),
                (0, 2),
                (3, 4),
                (1, 3),
                (4, 5),
                (2, 4),
                (5, 6),
                (6, 7),
                (0, 7),
                (7, 8),
                (8, 9),
                (1, 9),
                (9, 10),
                (2, 10),
                (10, 11),
                (3, 11),
                (11, 12),
                (12, 13),
            ]
        )
    ]
    path = tmp_path / "t.csv"
    path.write_text("src,dst,time\n" + "".join(f"{a},{b},{t}\n" for a, b, t in rows))
    ds = load_dataset(DatasetSpec(str(path), split=(70.0, 15.0, 15.0)))
    assert ds.temporal
    for graph in ("train", "valid", "test"):
        nodes = split_candidates(ds, graph)
        assert np.array_equal(nodes, np.flatnonzero(ds.graph_for(graph).degree > 0))
    assert len(split_candidates(ds, "train")) < ds.num_nodes
    assert (
        split_candidates(ds, "all") is None
        and split_candidates(load_dataset(DatasetSpec(str(path), split_kind="random")), "test") is None
    )


# ---------------------------------------------------------------------------- a featured model's served graph
def featured(names=None):
    from pipelines.serve.state import GraphState

    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    return GraphState(Graph.from_edges([[0, 1], [1, 2], [2, 3]], num_nodes=5, x=x), names, 10)


def refused(state, body) -> str:
    from pipelines.serve.state import ServeError

    with pytest.raises(ServeError) as err:
        state.edit_record(body)
    assert err.value.status == 400
    return err.value.message


def test_a_new_node_comes_with_its_row_and_replays_with_it():
    names = np.array(["a", "b", "c", "d", "e"], dtype=object)
    s = featured(names)
    assert "node 'zz' is new and this model reads node features: send its row" in refused(s, {"add": [["e", "zz"]]})
    assert "expected 2 finite numbers" in refused(s, {"add": [["e", "zz"]], "features": {"zz": [1.0]}})
    assert "expected 2 finite numbers" in refused(s, {"add": [["e", "zz"]], "features": {"zz": [1.0, float("nan")]}})
    assert "expected 2 finite numbers" in refused(s, {"add": [["e", "zz"]], "features": {"zz": [True, 1.0]}})
    assert "a value beyond 900 (100 times the largest |value|" in refused(
        s, {"add": [["e", "zz"]], "features": {"zz": [1e300, 1.0]}}
    )
    assert "'features': node 'a' is not created" in refused(
        s, {"add": [["e", "zz"]], "features": {"a": [1, 2], "zz": [1, 2]}}
    )
    record = {"seq": 1, **s.edit_record({"add": [["e", "zz"], ["zz", "yy"]], "features": {"yy": [7, 8], "zz": [5, 6]}})}
    assert record["features"] == [["yy", [7.0, 8.0]], ["zz", [5.0, 6.0]]]
    s.apply([record])
    assert s.graph.x[[s.ids.index("zz"), s.ids.index("yy")]].tolist() == [[5, 6], [7, 8]]
    replayed = featured(names)
    replayed.apply([record])
    assert replayed.graph.fingerprint() == s.graph.fingerprint()


def test_a_graph_named_by_index_needs_a_row_for_every_node_it_grows_by():
    s = featured()
    assert "node 5 is new" in refused(s, {"add": [[4, 7]], "features": {"7": [1, 1]}})  # 5 and 6 are created too
    record = {"seq": 1, **s.edit_record({"add": [[4, 7]], "features": {"5": [1, 1], "6": [2, 2], 7: [3, 3]}})}
    s.apply([record])
    assert s.graph.num_nodes == 8 and s.graph.x[5:].tolist() == [[1, 1], [2, 2], [3, 3]]


def test_a_model_without_features_takes_no_rows_and_says_why():
    from pipelines.serve.state import GraphState, serving_state

    plain = GraphState(Graph.from_edges([[0, 1]], num_nodes=3), None, 10)
    assert "this model reads no node features" in refused(plain, {"add": [[0, 5]], "features": {"5": [1, 2]}})

    class Featured:  # the run's dataset, as pipelines.core.runs.run_dataset loads it
        name, node_ids, x, num_nodes, test_graph, splits = "g", None, np.ones((3, 2), np.float32), 3, None, {}
        graph = Graph.from_edges([[0, 1]], num_nodes=3, x=np.ones((3, 2), np.float32))

        def graph_for(self, split):
            return self.graph

    state, _ = serving_state(Featured(), "train", 10)
    assert state.graph.x is None  # structure only: a new node then needs no row
    state, _ = serving_state(Featured(), "train", 10, features=True)
    assert state.graph.x.shape == (3, 2)


def test_a_snapshot_with_new_nodes_is_refused_for_a_featured_model():
    from pipelines.core.runs import RunFolderError, check_node_features

    graph = Graph.from_edges([[0, 1], [1, 5]], num_nodes=6)
    check_node_features(False, 4, graph, None, "--graph x")  # structure only: new nodes are fine
    check_node_features(True, 6, graph, None, "--graph x")
    with pytest.raises(RunFolderError, match=r"--graph x: 2 node\(s\) are new since training \(first: d\)"):
        check_node_features(True, 4, graph, np.array(["a", "b", "c", "x", "d", "e"], dtype=object), "--graph x")


# ---------------------------------------------------------------------------- the own-graph suite's new graphs
def test_the_suite_gives_its_new_graphs_their_inputs(tmp_path):
    from bench.own_graph_suite import GRAPHS, graph_args, structure_only
    from tests.conftest import require_shared

    require_shared("planetoid", "ind.cora.x")
    require_shared("graphs", "collegemsg.csv.gz")
    assert {"cora-features", "collegemsg", "collegemsg-random"} <= set(GRAPHS)
    cora = graph_args("cora-features", tmp_path)
    assert cora == [
        "--dataset",
        str(tmp_path / "graphs" / "cora-edges.csv"),
        "--node-features",
        str(tmp_path / "graphs" / "cora-features.csv"),
    ]
    assert (tmp_path / "graphs" / "cora-features.csv").read_text().count("\n") == 2708 + 1
    assert structure_only(cora) == cora[:2]  # SEAL reads the structure only
    temporal, random = graph_args("collegemsg", tmp_path), graph_args("collegemsg-random", tmp_path)
    assert temporal[1].endswith("collegemsg.csv.gz") and random == [*temporal, "--split", "random"]
