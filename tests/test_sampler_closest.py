"""The sampler's closest-first view (`closest`): which context nodes a link keeps, in what order, and that the
option off is the old view bit for bit."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from common.datasets.spec import DatasetSpec
from common.graph import Graph
from preprocess.sampler import sample_subgraphs

# u = 0, v = 1 (no edge between them); 2 is their common neighbour, 3 and 4 neighbours of one end with links
# into the context, 5 and 7 two hops away (5 with two links inside, 7 with one), 6 three hops away
HAND = Graph.from_edges([[0, 2], [1, 2], [0, 3], [1, 4], [3, 4], [3, 5], [4, 5], [5, 6], [2, 7]], num_nodes=8)


def context(closest: int, g: Graph = HAND, shuffle: bool = False, seed: int = 0) -> list[int]:
    sub = sample_subgraphs(g.indptr, g.indices, np.array([0]), np.array([1]), 2, 10, seed, shuffle, closest=closest)
    return sub.nodes.tolist()


def test_the_hand_graphs_context_in_discovery_order():
    # u's hop 1 (2, 3), its hop 2 (7 via 2; 4, 5 via 3); v adds nothing new
    assert context(0) == [0, 1, 2, 3, 7, 4, 5]


@pytest.mark.parametrize(
    "closest, kept",
    [
        (3, [0, 1, 2]),  # the common neighbour first
        (4, [0, 1, 2, 3]),  # 3 and 4 tie (one end, 3 links inside): the local order decides
        (5, [0, 1, 2, 3, 4]),
        (6, [0, 1, 2, 3, 4, 5]),  # 5 (2 links inside) before 7 (1); the kept keep their local order: 5 after 4
        (7, [0, 1, 2, 3, 7, 4, 5]),  # the budget does not bind: the whole view, unchanged
        (50, [0, 1, 2, 3, 7, 4, 5]),
    ],
)
def test_closest_keeps_the_nearest_nodes_in_their_local_order(closest, kept):
    assert context(closest) == kept


def test_closest_on_a_shuffled_view_keeps_the_same_set_and_the_shuffled_order():
    for seed in range(20):
        full = context(0, shuffle=True, seed=seed)
        got = context(5, shuffle=True, seed=seed)
        assert sorted(got) == [0, 1, 2, 3, 4] and got[:2] == [0, 1]
        assert got == [w for w in full if w in got]  # the shuffled order, restricted to the kept


def random_csr(n=300, pairs=3000, seed=7):
    rng = np.random.default_rng(seed)
    e = np.unique(np.sort(rng.integers(0, n, (pairs, 2)), axis=1), axis=0)
    e = e[e[:, 0] != e[:, 1]]
    both = np.concatenate([e, e[:, ::-1]])
    both = both[np.lexsort((both[:, 1], both[:, 0]))]
    indptr = np.searchsorted(both[:, 0], np.arange(n + 1)).astype(np.int64)
    return indptr, both[:, 1].astype(np.int64), rng.integers(0, n, 500), rng.integers(0, n, 500)


def digest(closest: int) -> str:
    indptr, indices, src, dst = random_csr()
    h = hashlib.sha256()
    for d, n, shuffle in ((1, 20, True), (2, 10, True), (2, 5, False), (3, 3, True)):
        s = sample_subgraphs(indptr, indices, src, dst, d, n, 11, shuffle=shuffle, closest=closest)
        h.update(s.node_ptr.tobytes() + s.nodes.tobytes())
        s = sample_subgraphs(indptr, indices, src, dst, d, n, 11, link_seeds=np.arange(500, dtype=np.uint64))
        h.update(s.node_ptr.tobytes() + s.nodes.tobytes())
    return h.hexdigest()


def test_off_is_the_old_view_bit_for_bit():
    # the digest of the kernel before the option existed (4bf201a), on the same inputs
    assert digest(0) == "981e84fea612f6c4e3f6bede65d91b71d0c640df3a01c86f8b6854ca520f158f"


def test_closest_is_deterministic_and_caps_every_link():
    indptr, indices, src, dst = random_csr()
    a = sample_subgraphs(indptr, indices, src, dst, 2, 10, 3, closest=24)
    b = sample_subgraphs(indptr, indices, src, dst, 2, 10, 3, closest=24)
    np.testing.assert_array_equal(a.node_ptr, b.node_ptr)
    np.testing.assert_array_equal(a.nodes, b.nodes)
    full = sample_subgraphs(indptr, indices, src, dst, 2, 10, 3)
    sizes, full_sizes = np.diff(a.node_ptr), np.diff(full.node_ptr)
    np.testing.assert_array_equal(sizes, np.minimum(full_sizes, 24))
    for i in range(len(src)):  # a subset of the link's whole view, u and v first, each node once
        kept, whole = a.link(i), full.link(i)
        assert kept[0] == src[i] and kept[1] == dst[i] and set(kept[2:]) <= set(whole[2:])
        assert len(set(kept[2:].tolist())) == len(kept) - 2


def test_a_closest_below_three_is_refused():
    with pytest.raises(ValueError, match="closest must be 0"):
        context(2)


def test_a_closest_set_is_built_keyed_and_recorded(tmp_path):
    from common.manifest import read_manifest
    from common.shards import read_shard
    from preprocess.config import CandidateConfig, ConfigError, PreprocessConfig, SamplingConfig
    from preprocess.job import run_job
    from tests.conftest import write_edges

    rng = np.random.default_rng(0)
    pairs = {(int(a), int(b)) for a, b in rng.integers(0, 60, (500, 2)) if a != b}  # dense: mean degree ~16
    edges = write_edges(tmp_path / "g.csv", sorted(pairs))

    def built(sampling):
        cfg = PreprocessConfig(
            data=DatasetSpec(str(edges)),
            sampling=sampling,
            out=str(tmp_path / "shards"),
            candidates=CandidateConfig(views=1),
            num_cpus=1,
        )
        m = read_manifest(str(run_job(cfg).path))
        sizes = [np.diff(b.node_ptr) for e in m.shards for b in read_shard(f"{m.root}/{e['name']}")]
        return cfg, m, np.concatenate(sizes)

    full_cfg, full, full_sizes = built(SamplingConfig(2, 5))
    cfg, capped, sizes = built(SamplingConfig(2, 5, closest=8))
    assert "closest" not in full_cfg.key_parts("f", ["original"]) and cfg.key_parts("f", ["original"])["closest"] == 8
    assert capped.root != full.root and capped.config["sampling"]["closest"] == 8
    assert "closest" not in full.config["sampling"]
    assert len(sizes) == len(full_sizes) and sizes.max() == 8 < full_sizes.max()
    np.testing.assert_array_equal(sizes, np.minimum(full_sizes, 8))  # the same links, each view cut to 8
    with pytest.raises(ConfigError, match="--closest"):
        SamplingConfig(2, 5, closest=1)
