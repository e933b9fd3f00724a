"""Hard training negatives (--hard-neg-fraction): 2-hop non-edges of the training graph in training views
(preprocess/candidates.py sample_hard_negatives / training_view), their config, cache key and CLI."""

from __future__ import annotations

import logging
import os
from dataclasses import replace

import numpy as np
import pytest

from common.datasets.spec import DatasetSpec
from common.graph import Graph
from common.shards import cache_key, read_manifest, read_shard, shard_entries
from preprocess.candidates import sample_hard_negatives, sample_negatives, training_view
from preprocess.config import CandidateConfig, ConfigError, PreprocessConfig, SamplingConfig


def common_neighbours(graph: Graph, pairs: np.ndarray) -> np.ndarray:
    """CN count of each pair (reference, by Python sets on a small graph)."""
    return np.array([len(set(graph.neighbors(a).tolist()) & set(graph.neighbors(b).tolist())) for a, b in pairs])


def assert_non_edges(graph: Graph, pairs: np.ndarray) -> None:
    assert not np.any(pairs[:, 0] == pairs[:, 1])
    assert not np.any(graph.has_edge(pairs[:, 0], pairs[:, 1]))


# ---------------------------------------------------------------------------- the sampler on hand-built graphs
# path 0-1-2-3, triangle 4-5-6 with a pendant 6-7, node 8 isolated
SMALL = [(0, 1), (1, 2), (2, 3), (4, 5), (5, 6), (4, 6), (6, 7)]


def small_graph() -> Graph:
    return Graph.from_edges(SMALL, num_nodes=9)


@pytest.mark.parametrize(
    "pos, expected",
    [
        # every edge a positive: 0-1-2, 1-2-3, 4-6-7 and 5-6-7 (the triangle's own 2-hop pairs are edges)
        (SMALL, {(0, 2), (1, 3), (4, 7), (5, 7)}),
        # endpoints 0, 1 and 3 reach only the path's 2-hop pairs; 8 has no neighbour and is skipped
        ([(0, 1), (8, 3)], {(0, 2), (1, 3)}),
    ],
)
def test_hard_negatives_are_exactly_the_reachable_two_hop_non_edges(pos, expected):
    g = small_graph()
    hard = sample_hard_negatives(g, np.array(pos), 4000, np.random.default_rng(0))
    assert hard.shape == (4000, 2) and hard.dtype == np.int64
    assert_non_edges(g, hard)
    assert np.all(common_neighbours(g, np.unique(hard, axis=0)) >= 1)  # distance exactly 2
    ordered = {(a, b) for a, b in expected} | {(b, a) for a, b in expected}  # oriented at random
    assert set(map(tuple, hard.tolist())) == ordered


def test_no_two_hop_non_edge_falls_back_to_uniform_with_one_warning(caplog):
    # two disjoint 4-cliques plus isolated nodes: every 2-hop walk ends on a neighbour or back home
    cliques = [(a + o, b + o) for o in (0, 4) for a in range(4) for b in range(a + 1, 4)]
    g = Graph.from_edges(cliques, num_nodes=20)
    with caplog.at_level(logging.WARNING, logger="preprocess.candidates"):
        neg = sample_hard_negatives(g, np.array(cliques), 50, np.random.default_rng(0))
    assert neg.shape == (50, 2)
    assert_non_edges(g, neg)
    assert np.all(common_neighbours(g, neg) == 0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "only 0 of 50 drawn as 2-hop non-edges" in warnings[0]
    assert "the other 50 are uniform" in warnings[0]


def test_zero_count_draws_nothing_from_the_rng():
    rng = np.random.default_rng(3)
    assert sample_hard_negatives(small_graph(), np.array(SMALL), 0, rng).shape == (0, 2)
    assert rng.integers(0, 2**62) == np.random.default_rng(3).integers(0, 2**62)


# ---------------------------------------------------------------------------- training views
def paths_graph(paths=40, num_nodes=100_000) -> tuple[Graph, np.ndarray]:
    """`paths` paths a-b-c among many isolated nodes: the only pairs with a common neighbour are the (a, c),
    and a uniform pair hits one with probability ~1e-8, so CN >= 1 tells hard negatives from uniform ones."""
    a = 3 * np.arange(paths)
    pos = np.concatenate([np.stack([a, a + 1], 1), np.stack([a + 1, a + 2], 1)])
    return Graph.from_edges(pos, num_nodes=num_nodes), pos


@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.33, 0.5, 1.0])  # 0.33: 52.8 of 160 -> 53
def test_training_view_draws_round_count_times_fraction_hard_negatives(fraction):
    g, pos = paths_graph()
    view = training_view(
        pos, g, CandidateConfig(percent=100.0, neg_ratio=2, hard_neg_fraction=fraction), np.random.default_rng(7)
    )
    neg = np.stack([view.src, view.dst], 1)[view.label == 0]
    assert len(neg) == 2 * len(pos) and view.label.sum() == len(pos)
    assert_non_edges(g, neg)
    with_cn = neg[common_neighbours(g, neg) >= 1]
    assert len(with_cn) == round(len(neg) * fraction)
    assert np.all(np.abs(with_cn[:, 0] - with_cn[:, 1]) == 2) and np.all(with_cn.min(axis=1) % 3 == 0)  # the (a, c)


def test_training_view_is_deterministic_per_seed():
    g, pos = paths_graph()
    views = [
        training_view(
            pos, g, CandidateConfig(percent=60.0, neg_ratio=3, hard_neg_fraction=0.5), np.random.default_rng(s)
        )
        for s in (1, 1, 2)
    ]
    as_bytes = [b"".join(a.tobytes() for a in (v.src, v.dst, v.label)) for v in views]
    assert as_bytes[0] == as_bytes[1] != as_bytes[2]


@pytest.mark.parametrize("percent, neg_ratio", [(100.0, 1), (40.0, 3)])
def test_fraction_zero_is_the_uniform_view_bit_for_bit(percent, neg_ratio):
    """The default path draws from the rng exactly what it drew before the option existed."""
    rng0 = np.random.default_rng(5)
    e = rng0.integers(0, 200, (600, 2))
    e = e[e[:, 0] != e[:, 1]]
    g = Graph.from_edges(e, num_nodes=200)
    default = training_view(e, g, CandidateConfig(percent=percent, neg_ratio=neg_ratio), np.random.default_rng(11))
    zero = training_view(
        e, g, CandidateConfig(percent=percent, neg_ratio=neg_ratio, hard_neg_fraction=0.0), np.random.default_rng(11)
    )
    # the uniform-only view, spelled out: subset, uniform negatives, one permutation, all from one rng
    rng = np.random.default_rng(11)
    p = e if percent == 100 else e[np.sort(rng.choice(len(e), size=int(round(len(e) * percent / 100)), replace=False))]
    pairs = np.concatenate([p, sample_negatives(g, len(p) * neg_ratio, rng)])
    order = rng.permutation(len(pairs))
    for v in (default, zero):
        assert np.array_equal(v.src, pairs[order, 0]) and np.array_equal(v.dst, pairs[order, 1])
        assert np.array_equal(v.label, (order < len(p)).astype(np.float32))


# ---------------------------------------------------------------------------- config and cache key
@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), True, "0.5"])
def test_bad_fraction_is_a_one_line_error_naming_the_flag(bad):
    with pytest.raises(ConfigError) as err:
        CandidateConfig(hard_neg_fraction=bad)
    assert str(err.value).startswith("--hard-neg-fraction: must be a number in [0, 1]") and "\n" not in str(err.value)


def test_default_cache_key_is_unchanged_and_a_fraction_changes_it():
    base = PreprocessConfig(data=DatasetSpec("citeseer"), sampling=SamplingConfig(1, 5))
    assert CandidateConfig(hard_neg_fraction=1).hard_neg_fraction == 1.0
    # key_parts of this config as written before --hard-neg-fraction existed: every cached set keeps its key
    before = {
        "dataset": "citeseer",
        "fingerprint": "fp",
        "features": False,
        "sampling": [1, 5],
        "candidates": {
            "views": 2,
            "percent": 100.0,
            "neg_ratio": 1,
            "splits": ["train", "valid", "test"],
            "protocols": ["original", "heart"],
        },
        "seed": 0,
        "links_per_shard": 8192,
        "links_per_block": 256,
        "shard_mb": 64.0,
        "sampler": 1,
    }
    parts = lambda c: c.key_parts("fp", ["original", "heart"])
    zero = replace(base, candidates=CandidateConfig(hard_neg_fraction=0.0))
    assert parts(base) == parts(zero) == before
    keys = {
        f: cache_key(parts(replace(base, candidates=CandidateConfig(hard_neg_fraction=f)))) for f in (0.0, 0.5, 1.0)
    }
    assert len(set(keys.values())) == 3


def test_pipelines_run_passes_the_fraction_to_every_shard_set(tmp_path):
    from common.flags import FlagError
    from pipelines.core.shard_sets import preprocess_config
    from tests.conftest import run_config

    base = ["--dataset", "citeseer", "--out", tmp_path / "r", "--shards", tmp_path / "s"]
    run = run_config(*base, "--hard-neg-fraction", "0.25")
    assert (
        preprocess_config(run.source, run.shards, (1, 3), 1, 100.0, ["original"]).candidates.hard_neg_fraction == 0.25
    )
    plain = run_config(*base)
    assert (
        preprocess_config(plain.source, plain.shards, (1, 3), 1, 100.0, ["original"]).candidates.hard_neg_fraction == 0
    )
    assert plain.shards.hard_neg_fraction is None  # left to the recipe: 0 here, the auto recipe may pick 0.5
    half = preprocess_config(plain.source, plain.shards, (1, 3), 1, 100.0, ["original"], (0.5, 1))
    assert half.candidates.hard_neg_fraction == 0.5
    with pytest.raises(FlagError, match=r"^--hard-neg-fraction: must be in \[0, 1\]"):
        run_config(*base, "--hard-neg-fraction", "1.5")


# ---------------------------------------------------------------------------- end to end on citeseer


def test_preprocess_cli_writes_a_set_with_hard_negatives(ray_session, tmp_path, capsys):
    from common.datasets import DatasetSpec, load_dataset
    from preprocess.__main__ import build_parser, config_from_args, main
    from preprocess.plan import candidate_sets

    argv = [
        "--dataset",
        "citeseer",
        "--sampling",
        "1,5",
        "--views",
        "1",
        "--splits",
        "train",
        "--hard-neg-fraction",
        "0.5",
        "--out",
        str(tmp_path),
        "--num-cpus",
        "2",
        "-q",
    ]
    assert main(argv) == 0
    location = capsys.readouterr().out.strip().splitlines()[-1]
    assert location.startswith("shards written: ")
    m = read_manifest(location.removeprefix("shards written: "))
    assert m.config["candidates"]["hard_neg_fraction"] == 0.5
    config = config_from_args(build_parser().parse_args(argv))
    uniform = replace(config, candidates=replace(config.candidates, hard_neg_fraction=0.0))
    assert cache_key(config.key_parts(m.fingerprint, m.protocols)) == m.key
    assert cache_key(uniform.key_parts(m.fingerprint, m.protocols)) != m.key

    # The shards hold the planned view, and half its negatives share a neighbour with their pair.
    citeseer = load_dataset(DatasetSpec("citeseer"))
    (view,) = [cs.cands for cs in candidate_sets(config, citeseer, m.protocols)]
    got = {}
    for e in shard_entries(m, "train", None, 0):
        for b in read_shard(os.path.join(location.removeprefix("shards written: "), e["name"])):
            got.update({int(c): (int(s), int(d), float(y)) for c, s, d, y in zip(b.cid, b.src, b.dst, b.label)})
    assert len(got) == len(view)
    assert [got[c] for c in range(len(view))] == list(zip(view.src.tolist(), view.dst.tolist(), view.label.tolist()))
    neg = np.stack([view.src, view.dst], 1)[view.label == 0]
    assert_non_edges(citeseer.graph, neg)
    with_cn = int(np.count_nonzero(common_neighbours(citeseer.graph, neg) >= 1))
    hard = round(len(neg) * 0.5)
    assert hard <= with_cn <= hard + len(neg) // 100  # uniform pairs on citeseer almost never share a neighbour
