"""bench.directed_families: the seeded directed shapes that a direction rule must pay on beyond bitcoin-alpha, and
their signal-free control (docs/benchmarks/2026-12-05-directed.md)."""

from __future__ import annotations

import numpy as np

from bench.directed_families import FAMILIES, directed_edges, write_family
from common.datasets import DatasetSpec, load_dataset


def test_same_seed_same_edges_other_seed_other_edges():
    for name in FAMILIES:
        a, ta = directed_edges(name, seed=3, n=200)
        b, tb = directed_edges(name, seed=3, n=200)
        assert np.array_equal(a, b) and (ta is None) == (tb is None)
        assert not np.array_equal(a, directed_edges(name, seed=4, n=200)[0])


def test_coin_control_has_no_direction_to_read():
    """Each undirected edge once, its direction a coin flip: no pair both ways, and about half the edges point from
    the older (smaller id) node to the newer one."""
    edges, times = directed_edges("coin", seed=0)
    assert times is None
    ordered = set(map(tuple, edges.tolist()))
    assert not any((v, u) in ordered for u, v in ordered)
    assert 0.47 < float(np.mean(edges[:, 0] < edges[:, 1])) < 0.53


def test_pa_recip_links_point_from_the_newcomer_and_some_are_answered():
    edges, times = directed_edges("pa-recip", seed=0, n=300)
    forward = edges[edges[:, 0] == times]  # a link made on arrival: its time is its source's arrival
    assert (forward[:, 0] > forward[:, 1]).all()  # the newcomer links to earlier nodes
    answered = len(edges) - len(forward)
    assert 0.2 < answered / len(forward) < 0.4  # PA_ANSWERED = 0.3


def test_hierarchy_points_mostly_one_way():
    """Links go up in rank 90 % of the time: few pairs are reciprocated beyond the answered 20 %."""
    edges, _ = directed_edges("hierarchy", seed=0, n=400)
    ordered = set(map(tuple, edges.tolist()))
    both = sum((v, u) in ordered for u, v in ordered) / len(ordered)
    assert 0.2 < both < 0.45


def test_written_file_loads_as_a_directed_edge_list_with_its_reverse_protocol(tmp_path):
    path = write_family("pa-recip", tmp_path, seed=0)
    assert path.read_text().splitlines()[0] == "src,dst,time"
    ds = load_dataset(DatasetSpec(str(path), directed=True))
    assert "reverse" in ds.splits["valid"].protocol_pos
    assert len(ds.splits["valid"].protocol_pos["reverse"]) > 0
