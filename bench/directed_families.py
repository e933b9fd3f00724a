"""Seeded directed graph families: does a rule for "which way does this edge point" pay beyond bitcoin-alpha?

    python -m bench.directed_families --out DIR [--seed 0]   # DIR/<family>.csv: src,dst[,time]

    directed_edges(name, seed=0, n=None) -> ((E, 2) ordered edges src -> dst, (E,) times or None)

Three shapes, numpy only; the same (name, seed, n) always gives the same edges:
- `hierarchy`: a status graph. Each node has a rank; links mostly point from lower to higher rank (10 % the other
  way), higher ranks attract more links, and 20 % of links are answered. Direction is readable from structure:
  a high-rank node is linked to more than it links.
- `pa-recip`: directed preferential attachment with times. Nodes arrive one by one and each links to 4 earlier
  nodes picked by in-degree + 1; 30 % of links are answered within a few steps. A `time` column (a temporal
  split, as bitcoin-alpha's), so the new node is the source: which node is new is the direction signal here.
- `coin`: the signal-free control. An undirected preferential-attachment graph, each edge's direction a coin
  flip, none answered: no rule can beat 50 % reverse accuracy on it, and one that does reads something the
  split leaks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.graph_families import holme_kim
from common.atomic import write_text_atomic
from common.cli import Parser, run_cli

NODES = {"hierarchy": 1500, "pa-recip": 1500, "coin": 1500}
FAMILIES = tuple(NODES)
HIERARCHY_LINKS, HIERARCHY_AGAINST, HIERARCHY_ANSWERED = 8, 0.1, 0.2  # links per node, share against rank, answered
PA_OUT, PA_ANSWERED = 4, 0.3  # out-links per arriving node, share answered


def directed_edges(name: str, seed: int = 0, n: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    if name not in NODES:
        raise ValueError(f"unknown directed family {name}; use one of {', '.join(FAMILIES)}")
    n = NODES[name] if n is None else n
    rng = np.random.default_rng(seed)
    return {"hierarchy": _hierarchy, "pa-recip": _pa_recip, "coin": _coin}[name](rng, n)


def _hierarchy(rng, n: int):
    rank = rng.permutation(n)  # node i's rank; 0 lowest
    pull = 1.0 + 4.0 * rank / n  # higher ranks attract more links, so in-degree reads rank
    m = HIERARCHY_LINKS * n
    a = rng.integers(0, n, size=m)
    b = rng.choice(n, size=m, p=pull / pull.sum())
    keep = a != b
    a, b = a[keep], b[keep]
    up = rank[a] < rank[b]
    against = rng.random(len(a)) < HIERARCHY_AGAINST
    src = np.where(up ^ against, a, b)
    dst = np.where(up ^ against, b, a)
    edges = np.stack([src, dst], axis=1)
    answered = edges[rng.random(len(edges)) < HIERARCHY_ANSWERED][:, ::-1]
    return np.concatenate([edges, answered]), None


def _pa_recip(rng, n: int):
    indeg = np.ones(n)
    rows, times = [], []
    for v in range(PA_OUT + 1, n):
        p = indeg[:v] / indeg[:v].sum()
        for u in rng.choice(v, size=PA_OUT, replace=False, p=p):
            rows.append((v, u))
            times.append(v)
            indeg[u] += 1
            if rng.random() < PA_ANSWERED:  # answered a few arrivals later
                rows.append((u, v))
                times.append(v + int(rng.integers(0, 5)))
    return np.asarray(rows, dtype=np.int64), np.asarray(times, dtype=np.int64)


def _coin(rng, n: int):
    edges = holme_kim(rng, n, 4, 0.3)
    flip = rng.random(len(edges)) < 0.5
    return np.where(flip[:, None], edges[:, ::-1], edges), None


def write_family(name: str, out: Path, seed: int = 0) -> Path:
    edges, times = directed_edges(name, seed)
    lines = ["src,dst" + (",time" if times is not None else "")]
    if times is None:
        lines += [f"{u},{v}" for u, v in edges.tolist()]
    else:
        lines += [f"{u},{v},{t}" for (u, v), t in zip(edges.tolist(), times.tolist())]
    path = Path(out) / f"{name}.csv"
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path


def main(argv=None) -> int:
    p = Parser(prog="python -m bench.directed_families", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for <family>.csv")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--families", default=",".join(FAMILIES), help="comma-separated, of " + ", ".join(FAMILIES))
    args = p.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for name in args.families.split(","):
        print(write_family(name, Path(args.out), args.seed))
    return 0


if __name__ == "__main__":
    run_cli(main)
