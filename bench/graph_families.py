"""Seeded synthetic graph families for the own-graph suite and the research study: the shapes users bring.

    synthetic_edges(name, seed=0, n=None) -> (E, 2) int array of undirected edges (repeats and self-loops are
    dropped by the edge-list loader, as for a user's file)

The first families span textbook shapes at 2,000 nodes: preferential attachment, random regular,
Erdős–Rényi, a grid-like infrastructure network, latent-space graphs of mean degree 2.5 to 40, a block model
and a bipartite user-item graph. The later ones take the shapes of the small real networks that subgraph link
predictors are usually benchmarked on (their sizes and mean degrees, no data of theirs): a hub-dominated,
geographic transport network of a few hundred nodes (`airports`); a sparse co-authorship network made of small
cliques (`coauthor`); a sparse, tree-like router map with hubs (`router`); dense protein or neural networks
with a heavy tail and many triangles (`bio-300`, `bio-1800`); and a dense two-sided blog network with hubs
(`blogs`). numpy only; the same (name, seed, n) always gives the same edges.
"""

from __future__ import annotations

import math

import numpy as np

# nodes of each family unless the caller says; the textbook shapes share one size
NODES = {
    "pa": 2000,
    "regular": 2000,
    "er": 2000,
    "grid": 2000,
    "latent-2.5": 2000,
    "latent-5": 2000,
    "latent-10": 2000,
    "latent-20": 2000,
    "latent-40": 2000,
    "sbm": 2000,
    "bipartite": 2000,
    "airports": 332,
    "coauthor": 2400,
    "router": 5000,
    "bio-300": 300,
    "bio-1800": 1800,
    "blogs": 1200,
    "power": 2500,
}
BIPARTITE_USERS = 0.75  # the bipartite graph's share of users (the rest are items)


def _pairs(rng, n: int, count: int) -> np.ndarray:
    p = rng.integers(0, n, size=(count, 2))
    return p[p[:, 0] != p[:, 1]]


def synthetic_edges(name: str, seed: int = 0, n: int | None = None) -> np.ndarray:
    if name not in NODES:
        raise ValueError(f"unknown synthetic graph {name}")
    n = NODES[name] if n is None else n
    rng = np.random.default_rng(seed)
    if name.startswith("latent-"):
        from common.datasets.synthetic import sample_latent_space

        return sample_latent_space(n, float(name.split("-")[1]), seed)[2]
    if name.startswith("bio-"):  # heavy tail, many triangles: Holme-Kim, 7 edges a node (8 for the larger)
        return holme_kim(rng, n, 7 if n < 1000 else 8, 0.8)
    return GENERATORS[name](rng, n)


def _pa(rng, n: int) -> np.ndarray:  # Barabási–Albert, 3 edges per new node: hubs and a heavy tail
    targets, edges, ends = list(range(3)), [], []
    for v in range(3, n):
        for u in set(rng.choice(ends, 3).tolist() if ends else targets):
            edges.append((u, v))
        ends += [e for pair in edges[-3:] for e in pair]
    return np.array(edges)


def _regular(rng, n: int) -> np.ndarray:  # 4-regular by matching shuffled stubs; self-loops and repeats dropped
    stubs = rng.permutation(np.repeat(np.arange(n), 4)).reshape(-1, 2)
    return stubs[stubs[:, 0] != stubs[:, 1]]


def _er(rng, n: int) -> np.ndarray:  # mean degree 8
    return _pairs(rng, n, 4 * n)


def _grid(rng, n: int) -> np.ndarray:  # a street grid, a quarter of its links missing, 20 shortcuts: degree < 3
    side = int(math.isqrt(n))
    idx = np.arange(side * side).reshape(side, side)
    edges = np.concatenate(
        [np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1), np.stack([idx[:-1].ravel(), idx[1:].ravel()], 1)]
    )
    edges = edges[rng.random(len(edges)) > 0.25]
    return np.concatenate([edges, _pairs(rng, side * side, 20)])


def _sbm(rng, n: int) -> np.ndarray:  # 4 communities, mean degree ~ 11
    block = np.repeat(np.arange(4), n // 4)
    p = _pairs(rng, n, 40 * n)
    same = block[p[:, 0]] == block[p[:, 1]]
    keep = np.where(same, rng.random(len(p)) < 0.36, rng.random(len(p)) < 0.012)
    return p[keep]


def _bipartite(rng, n: int) -> np.ndarray:  # users x items, a few popular items
    users, items = int(n * BIPARTITE_USERS), n - int(n * BIPARTITE_USERS)
    pop = rng.pareto(1.5, items) + 1
    item = rng.choice(items, size=4 * users, p=pop / pop.sum())
    return np.stack([np.repeat(np.arange(users), 4), users + item], 1)


def _airports(rng, n: int, mean_degree: float = 12.8) -> np.ndarray:
    """A gravity model: cities on the unit square with heavy-tailed sizes; a route (i, j) with probability
    1 - exp(-c s_i s_j exp(-d_ij / 0.08)), c set by bisection for the mean degree: hubs linked to each other
    and to their region, spokes to the nearest hubs."""
    xy, size = rng.random((n, 2)), rng.pareto(1.2, n) + 1.0
    i, j = np.triu_indices(n, 1)
    w = size[i] * size[j] * np.exp(-np.linalg.norm(xy[i] - xy[j], axis=1) / 0.08)
    lo, hi = 1e-9, 1e3
    for _ in range(60):  # expected edges 2/n * sum p = mean degree
        c = math.sqrt(lo * hi)
        lo, hi = (c, hi) if 2 * (-np.expm1(-c * w)).sum() / n < mean_degree else (lo, c)
    keep = rng.random(len(w)) < -np.expm1(-math.sqrt(lo * hi) * w)
    return np.stack([i[keep], j[keep]], 1)


def _coauthor(rng, n: int) -> np.ndarray:
    """Papers as cliques of 2-4 authors: each paper is written in one of n/20 groups (10 % with a guest from
    another group), its authors drawn by heavy-tailed productivity; authors of no paper are left out."""
    groups = max(1, n // 20)
    group = rng.integers(0, groups, n)
    weight = rng.pareto(1.5, n) + 1.0
    members = [np.flatnonzero(group == g) for g in range(groups)]
    edges = []
    for _ in range(int(0.55 * n)):
        team = members[int(rng.integers(groups))]
        if len(team) < 2:
            continue
        size = min(len(team), int(rng.choice([2, 3, 4], p=[0.5, 0.3, 0.2])))
        authors = rng.choice(team, size=size, replace=False, p=weight[team] / weight[team].sum()).tolist()
        if rng.random() < 0.1:
            authors[-1] = int(rng.integers(n))
        edges += [(a, b) for k, a in enumerate(authors) for b in authors[k + 1 :]]
    return np.array(edges)


def _router(rng, n: int) -> np.ndarray:
    """A preferential-attachment tree (one link per new node) plus a quarter as many links again, each from a
    random node to a node drawn by degree: mean degree about 2.5, long chains and a few hubs."""
    ends = [0, 1]
    edges = [(0, 1)]
    for v in range(2, n):
        u = ends[int(rng.integers(len(ends)))]
        edges.append((u, v))
        ends += [u, v]
    ends = np.array(ends)
    extra = np.stack([rng.integers(0, n, n // 4), ends[rng.integers(0, len(ends), n // 4)]], 1)
    return np.concatenate([np.array(edges), extra[extra[:, 0] != extra[:, 1]]])


def holme_kim(rng, n: int, m: int, triad: float) -> np.ndarray:
    """Holme and Kim's growth model: each new node links to m others, the first by degree, each next one with
    probability `triad` to a neighbour of the previous pick (closing a triangle), else by degree."""
    nbrs: list[set] = [set() for _ in range(n)]
    ends: list[int] = []
    edges = []
    for v in range(m, n):
        picked: list[int] = []
        while len(picked) < m:
            last = picked[-1] if picked else None
            if last is not None and rng.random() < triad and nbrs[last] - set(picked) - {v}:
                u = int(rng.choice(sorted(nbrs[last] - set(picked) - {v})))
            else:
                u = int(ends[int(rng.integers(len(ends)))]) if ends else int(rng.integers(v))
            if u not in picked:
                picked.append(u)
        for u in picked:
            nbrs[u].add(v)
            nbrs[v].add(u)
            edges.append((u, v))
            ends += [u, v]
    return np.array(edges)


def _blogs(rng, n: int, mean_degree: float = 27.0) -> np.ndarray:
    """Two camps with heavy-tailed activity: each link picks an endpoint by activity and a partner by activity,
    in the same camp 9 times in 10 (a degree-corrected block model); mean degree about 27."""
    camp = rng.integers(0, 2, n)
    theta = rng.pareto(2.0, n) + 1.0
    by_camp = [np.flatnonzero(camp == c) for c in (0, 1)]
    count = int(mean_degree * n / 2 * 1.1)  # repeats are dropped later
    u = rng.choice(n, size=count, p=theta / theta.sum())
    side = np.where(rng.random(count) < 0.9, camp[u], 1 - camp[u])
    v = np.empty(count, dtype=np.int64)
    for c in (0, 1):
        at = side == c
        pool = by_camp[c]
        v[at] = rng.choice(pool, size=int(at.sum()), p=theta[pool] / theta[pool].sum())
    e = np.stack([u, v], 1)
    return e[e[:, 0] != e[:, 1]]


def _power(rng, n: int, mean_degree: float = 2.7, loads: float = 0.25, near: int = 8) -> np.ndarray:
    """A power-grid-like network on the unit square: a `loads` share of the nodes are leaves, each on a line to
    its nearest substation; the substations are joined by the Euclidean minimum spanning tree of their `near`
    nearest neighbours (short lines, long paths) plus local loops: other pairs among those neighbours, drawn
    uniformly until the mean degree, skipping pairs that close a triangle over the tree (so loops are short but
    few are triangles). The western US grid it imitates: mean degree 2.7, a quarter leaves, transitivity 0.1."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import minimum_spanning_tree
    from scipy.spatial import cKDTree

    xy = rng.random((n, 2))
    hub = rng.random(n) >= loads
    sub, leaf = np.flatnonzero(hub), np.flatnonzero(~hub)
    k = len(sub)
    tree_of = cKDTree(xy[sub])
    lines = np.stack([leaf, sub[tree_of.query(xy[leaf])[1]]], 1)  # each load to its nearest substation
    dist, nbr = tree_of.query(xy[sub], near + 1)  # column 0 is the point itself
    src, dst, w = np.repeat(np.arange(k), near), nbr[:, 1:].ravel(), dist[:, 1:].ravel()
    tree = minimum_spanning_tree(coo_matrix((w, (src, dst)), shape=(k, k)).tocsr()).tocoo()
    t = np.sort(np.stack([tree.row, tree.col], 1), 1)
    adj = coo_matrix((np.ones(len(t)), (t[:, 0], t[:, 1])), shape=(k, k)).tocsr()
    adj = adj + adj.T
    pairs = np.unique(np.sort(np.stack([src, dst], 1), 1), axis=0)
    pairs = pairs[~np.isin(pairs[:, 0] * k + pairs[:, 1], t[:, 0] * k + t[:, 1])]
    common = np.asarray(adj[pairs[:, 0]].multiply(adj[pairs[:, 1]]).sum(1)).ravel()
    pairs = pairs[common == 0]  # no triangle over the tree
    extra = max(0, int(round(mean_degree * n / 2)) - len(t) - len(lines))
    loops = pairs[rng.permutation(len(pairs))[:extra]]
    return np.concatenate([lines, sub[t], sub[loops]])


GENERATORS = {
    "pa": _pa,
    "regular": _regular,
    "er": _er,
    "grid": _grid,
    "sbm": _sbm,
    "bipartite": _bipartite,
    "airports": _airports,
    "coauthor": _coauthor,
    "router": _router,
    "blogs": _blogs,
    "power": _power,
}


# ------------------------------------------------------------------ a small split graph for end-to-end runs
def geo_splits(seed: int = 2, n: int = 300) -> dict:
    """A 300-node random geometric graph (links between close points of the unit square), split 85/5/10 at random
    by the product's own splitter: {"train", "valid", "test"} -> (E, 2) pairs. The end-to-end tests and the
    cluster bench run `pencil run` on it."""
    from common.datasets.edgelist import random_split_dataset
    from common.datasets.fractions import SplitSettings

    rng = np.random.default_rng(seed)
    pos = rng.random((n, 2))
    d = ((pos[:, None] - pos[None]) ** 2).sum(-1)
    iu = np.triu_indices(n, 1)
    keep = rng.random(len(iu[0])) < np.exp(-d[iu] / 0.005)
    ds = random_split_dataset("geo", np.stack([iu[0][keep], iu[1][keep]], 1), n, SplitSettings(seed=seed))
    return {s: ds.splits[s].pos for s in ("train", "valid", "test")}


def write_splits(path, splits: dict, n: int = 300):
    """An edge list with a split column, and nodes.csv beside it declaring all n nodes (so the id mapping is the
    same whichever nodes the rows name). Returns the edge list's path."""
    from pathlib import Path

    path = Path(path)
    rows = [f"{u},{v},{s}\n" for s, pairs in splits.items() for u, v in pairs.tolist()]
    path.write_text("src,dst,split\n" + "".join(rows))
    path.with_name("nodes.csv").write_text("node\n" + "".join(f"{i}\n" for i in range(n)))
    return path
