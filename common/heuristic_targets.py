"""Regression targets of the pairwise heuristic estimation task (paper appendix "Pairwise Heuristic
Estimation"): raw heuristic scores on the FULL graph, then the paper's three-stage normalisation
(log transform, range mapping, robust clipping), because the raw scores are heavy-tailed.

    cn, aa, ra  t = min(log1p(s) / P99.99, 1)        min-max maps [0, P99.99] to [0, 1], clipped at 1
    katz        x = log(k + 1e-20); t = min((x - median) / (1.4826 MAD), z at P99)   (β = 0.005)
    spd         t = log(1 + d); disconnected pairs get log(1 + 1.5 d_max), d_max = largest component diameter
    pr          x = log(p_u p_v + 1e-20); t = min((x - mean) / std, z at P99)          (α = 0.85)

Katz: a *robust* z-score (median / MAD) and the paper's text a z-score clipped at
the upper 99th percentile; we do both (robust centre and scale, then the paper's clip). Without the robust
scale, the pairs with no walk at all (log 1e-20 = -46 against about -10 for two-hop pairs) would dominate
the standard deviation. `KATZ_SCALING = "standard"` gives the paper's plain mean / std instead.

Statistics (percentiles, centre, scale, d_max) are fitted once (`fit`) on a reference set, the
training candidates in the recipe, and applied unchanged to every split (`transform`), so the
evaluation targets never shape their own scale.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
from scipy.sparse import csgraph

from common import heuristics
from common.graph import Graph

TARGETS = ("cn", "aa", "ra", "katz", "spd", "pr")
LOCAL = ("cn", "aa", "ra")
EPS = 1e-20
LOCAL_PERCENTILE = 99.99
UPPER_CLIP_PERCENTILE = 99.0
SPD_DISCONNECTED_FACTOR = 1.5
MAD_TO_STD = 1.4826  # MAD of a normal distribution times this = its standard deviation
KATZ_BETA = 0.005
PAGERANK_ALPHA = 0.85
KATZ_SCALING = "robust"  # "robust" (issue: median / MAD) or "standard" (paper text: mean / std)


class TargetError(ValueError):
    """Bad heuristic-target input; the message names the argument and the fix."""


@dataclass(frozen=True)
class TargetStats:
    """Everything `transform` needs, fitted once; JSON-serialisable (saved beside the shard set / report)."""

    name: str
    params: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------- raw scores
def full_graph(num_nodes: int, *edge_sets: np.ndarray) -> Graph:
    """The full graph the targets are computed on: the union of every split's positive edges."""
    edges = np.concatenate([np.asarray(e, dtype=np.int64).reshape(-1, 2) for e in edge_sets])
    return Graph.from_edges(edges, num_nodes=num_nodes)


def raw_scores(name: str, graph: Graph, pairs) -> np.ndarray:
    """Raw heuristic of every pair (M, 2) on `graph` (float64; SPD is inf where disconnected)."""
    _check_name(name)
    kwargs = {"katz": {"beta": KATZ_BETA}, "pr": {"alpha": PAGERANK_ALPHA}}.get(name, {})
    return heuristics.score_pairs(name, graph, np.asarray(pairs, dtype=np.int64).reshape(-1, 2), **kwargs)


def max_component_diameter(graph: Graph, batch: int = 512) -> int:
    """Largest finite shortest-path distance in the graph (the diameter of its widest component).

    Exact: one BFS per node, in blocks of sources (O(N E); a few seconds for Planetoid-sized graphs)."""
    a = heuristics.adjacency(graph)
    best = 0
    for s in range(0, graph.num_nodes, batch):
        d = csgraph.shortest_path(
            a, unweighted=True, directed=True, indices=np.arange(s, min(s + batch, graph.num_nodes))
        )
        finite = d[np.isfinite(d)]
        if finite.size:
            best = max(best, int(finite.max()))
    return best


# ---------------------------------------------------------------------------- normalisation
def _log(name: str, raw: np.ndarray, d_max: int | None = None) -> np.ndarray:
    raw = np.asarray(raw, dtype=np.float64)
    if name in LOCAL:
        return np.log1p(raw)
    if name in ("katz", "pr"):
        return np.log(raw + EPS)
    # spd: disconnected -> the distinct penalty distance 1.5 d_max
    d = np.where(np.isfinite(raw), raw, SPD_DISCONNECTED_FACTOR * d_max)
    return np.log1p(d)


def _centre_scale(name: str, x: np.ndarray) -> tuple[float, float]:
    if name == "katz" and KATZ_SCALING == "robust":
        centre = float(np.median(x))
        scale = MAD_TO_STD * float(np.median(np.abs(x - centre)))
        if scale > 0:
            return centre, scale
    centre, scale = float(np.mean(x)), float(np.std(x))  # pr, or a degenerate MAD (over half the values equal)
    return centre, scale if scale > 0 else 1.0


def fit(name: str, raw, graph: Graph | None = None) -> TargetStats:
    """Fit the normalisation of heuristic `name` on reference raw scores (the training candidates)."""
    _check_name(name)
    raw = np.asarray(raw, dtype=np.float64).reshape(-1)
    if raw.size == 0:
        raise TargetError(f"fit({name}): no reference scores; pass the training candidates' raw scores")
    if name == "spd":
        if graph is None:
            raise TargetError("fit(spd): needs the full graph for the disconnected-pair penalty (d_max)")
        return TargetStats("spd", {"d_max": max_component_diameter(graph)})
    if name in LOCAL:
        return TargetStats(name, {"p_high": float(np.percentile(_log(name, raw), LOCAL_PERCENTILE))})
    x = _log(name, raw)
    centre, scale = _centre_scale(name, x)
    z_clip = float(np.percentile((x - centre) / scale, UPPER_CLIP_PERCENTILE))
    return TargetStats(name, {"centre": centre, "scale": scale, "z_clip": z_clip})


def transform(stats: TargetStats, raw) -> np.ndarray:
    """Normalised targets (float32) of raw scores with fitted statistics."""
    name, p = stats.name, stats.params
    x = _log(name, raw, p.get("d_max"))
    if name in LOCAL:
        # [0, P99.99] -> [0, 1]; an all-zero reference (no common neighbours anywhere) maps to 0.
        return np.minimum(x / p["p_high"], 1.0).astype(np.float32) if p["p_high"] > 0 else np.zeros_like(x, np.float32)
    if name == "spd":
        return x.astype(np.float32)  # no clipping for SPD
    return np.minimum((x - p["centre"]) / p["scale"], p["z_clip"]).astype(np.float32)


def heuristic_targets(name: str, graph: Graph, pairs, fit_pairs=None) -> tuple[np.ndarray, TargetStats]:
    """Targets of `pairs` on the full `graph`, normalised with statistics fitted on `fit_pairs`
    (default: `pairs` themselves). Returns (targets (M,) float32, stats)."""
    raw = raw_scores(name, graph, pairs)
    ref = raw if fit_pairs is None else raw_scores(name, graph, fit_pairs)
    stats = fit(name, ref, graph if name == "spd" else None)
    return transform(stats, raw), stats


def _check_name(name: str) -> None:
    if name not in TARGETS:
        raise TargetError(f"unknown heuristic target '{name}'; choose one of {', '.join(TARGETS)}")
