"""The study's graphs: the own-graph suite's synthetic families at several seeds, sizes and degrees, cora and
citeseer, and snowball samples of the development edge lists (their full size takes hours per method here).

Every graph is an edge list written once under OUT/graphs/<name>.csv and split by the edge-list loader as
`pencil run` splits it (seeded 85/5/10), so the numbers are validation numbers of the same protocol.
"""

from __future__ import annotations

import gzip
from collections import deque
from pathlib import Path

import numpy as np

from bench.graph_families import synthetic_edges
from bench.own_graph_suite import SHARED
from common.atomic import write_text_atomic

# name -> (family, generator seed, nodes); the suite's own graphs (seed 0, 2,000 nodes) keep their names
SYNTHETIC = {
    "pa": ("pa", 0, 2000),
    "pa-s1": ("pa", 1, 1200),
    "regular": ("regular", 0, 2000),
    "regular-s1": ("regular", 1, 1200),
    "er": ("er", 0, 2000),
    "grid": ("grid", 0, 2000),
    "grid-s1": ("grid", 1, 1600),
    "latent-2.5": ("latent-2.5", 0, 2000),
    "latent-5": ("latent-5", 1, 1500),
    "latent-10": ("latent-10", 0, 2000),
    "latent-10-s1": ("latent-10", 1, 1200),
    "latent-20": ("latent-20", 2, 1500),
    "sbm": ("sbm", 0, 2000),
    "sbm-s1": ("sbm", 1, 1200),
    "bipartite": ("bipartite", 0, 2000),
    # shaped like the small real benchmark networks (bench/graph_families.py), at their own sizes
    "airports": ("airports", 0, 332),
    "airports-s1": ("airports", 1, 332),
    "coauthor": ("coauthor", 0, 2400),
    "router": ("router", 0, 5000),
    "bio-300": ("bio-300", 0, 300),
    "bio-300-s1": ("bio-300", 1, 300),
    "bio-1800": ("bio-1800", 0, 1800),
    "blogs": ("blogs", 0, 1200),
}
# development edge lists, snowball-sampled to about this many nodes (the induced subgraph of a BFS ball)
SAMPLED = {"facebook": 1500, "ppi": 1500, "wikipedia": 1500, "arxiv-astroph": 2000, "blogcatalog": 1000}
PLANETOID = ("cora", "citeseer")
ALL = (*SYNTHETIC, *PLANETOID, *(f"{g}-{n}" for g, n in SAMPLED.items()))


def snowball(edges: np.ndarray, nodes: int, seed: int) -> np.ndarray:
    """The induced subgraph on the first `nodes` nodes a BFS from a seeded random start visits (restarting from
    another random node when the component ends), relabelled 0..nodes-1."""
    n = int(edges.max()) + 1
    order = np.argsort(edges[:, 0], kind="stable")
    both = np.concatenate([edges, edges[:, ::-1]])
    order = np.argsort(both[:, 0], kind="stable")
    ptr = np.searchsorted(both[order, 0], np.arange(n + 1))
    nbr = both[order, 1]
    rng = np.random.default_rng(seed)
    seen = np.full(n, -1, dtype=np.int64)
    k, queue = 0, deque()
    while k < nodes:
        if not queue:
            start = int(rng.integers(n))
            if seen[start] >= 0:
                continue
            seen[start], k = k, k + 1
            queue.append(start)
        x = queue.popleft()
        for y in nbr[ptr[x] : ptr[x + 1]]:
            if seen[y] < 0 and k < nodes:
                seen[y], k = k, k + 1
                queue.append(int(y))
    keep = (seen[edges[:, 0]] >= 0) & (seen[edges[:, 1]] >= 0)
    return seen[edges[keep]]


def edges_of(name: str) -> np.ndarray:
    if name in SYNTHETIC:
        family, seed, n = SYNTHETIC[name]
        return synthetic_edges(family, seed, n)
    base, _, size = name.rpartition("-")
    with gzip.open(SHARED / "data" / "graphs" / f"{base}.csv.gz", "rt") as f:
        e = np.loadtxt(f, delimiter=",", skiprows=1, dtype=np.int64)
    return snowball(e, int(size), seed=0)


def dataset_args(name: str, out: Path) -> list[str]:
    """`--dataset ...` flags of a study graph (an edge list is written first)."""
    if name == "citeseer":
        return ["--dataset", "citeseer"]
    if name == "cora":
        return ["--dataset", "cora", "--planetoid-dir", str(SHARED / "data" / "planetoid")]
    path = out / "graphs" / f"{name}.csv"
    if not path.exists():
        e = edges_of(name)
        write_text_atomic(path, "src,dst\n" + "".join(f"{u},{v}\n" for u, v in e.tolist()))
    return ["--dataset", str(path)]
