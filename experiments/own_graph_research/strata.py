"""A stratified selection pool, studied and not adopted: does drawing validation's pool negatives by common
neighbours estimate the MRR at test's count of negatives better than the uniform pool (common/datasets/pool.py)?
Validation only; no model (CN / AA / RA / PA / Katz as the scores); docs/benchmarks/2026-12-03-own-graph-strata.md.

    python -m experiments.own_graph_research.strata --out runs/strata              # every suite graph
    python -m experiments.own_graph_research.strata --out runs/strata --graphs coauthor,grid --draws 10
    python -m experiments.own_graph_research.strata --out runs/strata --table      # every graph measured so far

On a sparse graph the negatives that decide MRR are the rare non-edges with a common neighbour ("near"; 0.3% of
coauthor's). The stratified pool draws them from an exact enumeration of the graph's wedges, the rest ("far")
by rejection, and weighs each stratum by its exact share of all non-edges; the protocol's own negatives join
their strata. Per graph and score: a reference from every near non-edge (a 200,000 sample where more) and
100,000 far ones, then over `--draws` pool draws each estimator's SD and RMSE against it.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.own_graph_suite import BENCHMARK_SHAPED, DEV, SYNTHETIC, graph_args
from common.cli import Parser, run_cli, summary
from common.datasets import DatasetSpec, load_dataset
from common.datasets.base import LinkDataset
from common.datasets.negatives import free_pairs, sample_non_edges
from common.datasets.pool import POOL_MAX, POOL_PROTOCOL, can_pool, pool_frame
from common.graph import Graph
from common.heuristics import adjacency, common_neighbors, ranking_scores
from common.metrics import MetricsError, expected_reciprocal_rank, rank_against_shared

NEAR_FRACTION = 0.5
WEDGE_MAX = 16_000_000  # A @ A of 9.2M wedges (arxiv-astroph): 1.6 s; above it one uniform stratum


def near_non_edges(graph: Graph, known: Graph, nodes: np.ndarray | None) -> np.ndarray | None:
    """Every pair (min, max) with a common neighbour in `graph` that is not an edge of `known`, among `nodes`
    (None: all), in key order; None when the graph has more than WEDGE_MAX wedges."""
    deg = graph.degree.astype(np.int64)
    if int((deg * (deg - 1) // 2).sum()) > WEDGE_MAX:
        return None
    two_hop = adjacency(graph) @ adjacency(graph)
    pairs = np.stack(two_hop.nonzero(), axis=1)
    pairs = pairs[pairs[:, 0] < pairs[:, 1]]
    if nodes is not None:
        inside = np.zeros(graph.num_nodes, dtype=bool)
        inside[nodes] = True
        pairs = pairs[inside[pairs[:, 0]] & inside[pairs[:, 1]]]
    pairs = pairs[~known.has_edge(pairs[:, 0], pairs[:, 1])]
    return pairs[np.argsort(pairs[:, 0] * graph.num_nodes + pairs[:, 1], kind="stable")].astype(np.int64)


def _without(pairs: np.ndarray, drop: np.ndarray, n: int) -> np.ndarray:
    return pairs[~np.isin(pairs[:, 0] * n + pairs[:, 1], drop[:, 0] * n + drop[:, 1])]


def attach_stratified_pool(
    ds: LinkDataset, per_negative: int, seed: int = 0, cap: int = POOL_MAX, near_fraction: float = NEAR_FRACTION
) -> LinkDataset:
    """common.datasets.pool.attach_valid_pool's pool, stratified: per_negative x as many far negatives (at most
    `cap` and half the pairs left) and near_fraction x as many near ones on top; valid_pool records the counts
    and the near share. 0, or no pair left: `ds` itself."""
    if not per_negative:
        return ds
    if not can_pool(ds):
        raise SystemExit(f"{ds.name}: no shared validation negatives under '{POOL_PROTOCOL}' to pool")
    valid, neg, rank_at, known, nodes = pool_frame(ds)
    free = free_pairs(known, nodes)
    # a graph nearly complete has few pairs left: the pool takes at most half of them (rejection sampling stays
    # quick), none when nothing is left, rather than failing the run
    count = min(per_negative * len(neg), cap, max(0, free - len(neg)) // 2)
    if not count:
        return ds
    graph = ds.graph_for("valid")
    far, near, share = _strata(graph, known, nodes, neg, (count, round(near_fraction * count)), free, seed, ds.name)
    # the protocol's negatives, far ones first (their order ranks nothing), join their strata in the estimate
    own_near = common_neighbors(graph, neg) > 0 if share else np.zeros(len(neg), dtype=bool)
    own = np.concatenate([neg[~own_near], neg[own_near]])
    pooled = replace(valid, neg={**valid.neg, POOL_PROTOCOL: np.concatenate([own, far, near])})
    info = {
        "protocol": POOL_PROTOCOL,
        "negatives": len(neg),
        "near_negatives": int(own_near.sum()),
        "pool": len(far) + len(near),
        "near": len(near),
        "near_share": share,
        "rank_at": rank_at,
    }
    return replace(ds, splits={**ds.splits, "valid": pooled}, valid_pool=info)


def _strata(graph: Graph, known: Graph, nodes, neg: np.ndarray, counts, free: int, seed: int, name: str):
    """(far pairs, near pairs, near share of every non-edge) of counts = (far wanted, near wanted on top): the near ones
    uniform without replacement among the near non-edges (all of them when fewer), the far ones by rejection;
    one uniform stratum (near share 0) when the wedges are not enumerated."""
    count, wanted = counts
    what = f"{name} validation pool"
    rng = np.random.default_rng([seed, 7])  # the split's streams are [seed, 1] and [seed, 2]
    near_all = near_non_edges(graph, known, nodes)
    if near_all is None:
        return sample_non_edges(known, count, rng, exclude=neg, what=what, nodes=nodes), neg[:0], 0.0
    share = len(near_all) / free if free else 0.0
    near_left = _without(near_all, neg, known.num_nodes)
    far_left = max(0, free - len(near_all) - len(neg))
    n_far = min(count, far_left // 2)  # the uniform pool's size (rejection stays quick), and the near on top
    n_near = min(wanted + count - n_far, len(near_left))
    near = near_left[np.sort(rng.choice(len(near_left), n_near, replace=False))] if n_near else neg[:0]
    is_far = lambda pairs: common_neighbors(graph, pairs) == 0
    far = sample_non_edges(known, n_far, rng, accept=is_far, exclude=neg, what=what, nodes=nodes)
    return far, near, share


def pool_weights(info: dict) -> np.ndarray:
    """Each shared negative's weight in a stratified pool laid out [protocol far | protocol near | pool far |
    pool near] (attach_stratified_pool): its stratum's share of every non-edge over the stratum's count; equal
    weights when nothing is near (a graph over the wedge cap)."""
    own, pool = int(info["negatives"]), int(info["pool"])
    own_near, near = int(info.get("near_negatives", 0)), int(info.get("near", 0))
    near_all, far_all = own_near + near, own + pool - own_near - near
    share = float(info.get("near_share", 0.0)) if near_all and far_all else float(bool(near_all))
    far_w, near_w = (1.0 - share) / max(far_all, 1), share / max(near_all, 1)
    parts = [(own - own_near, far_w), (own_near, near_w), (pool - near, far_w), (near, near_w)]
    return np.concatenate([np.full(n, w) for n, w in parts])


def weighted_share_above(pos: np.ndarray, neg: np.ndarray, weight) -> np.ndarray:
    """Per positive, the weight of the negatives above it plus half of the tied ones', over the total: the
    tie-averaged rank's share (rank_against_shared) with each negative counted `weight` times."""
    w = np.asarray(weight, dtype=np.float64)
    if w.shape != neg.shape or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise MetricsError(f"weight: one non-negative weight per negative, not all 0, got shape {w.shape}")
    order = np.argsort(neg, kind="stable")
    srt, below = neg[order], np.concatenate([[0.0], np.cumsum(w[order])])  # below[i]: weight of srt[:i]
    hi, lo = np.searchsorted(srt, pos, side="right"), np.searchsorted(srt, pos, side="left")
    total = below[-1]
    return ((total - below[hi]) + 0.5 * (below[hi] - below[lo])) / total


GRAPHS = DEV + SYNTHETIC + BENCHMARK_SHAPED
# CN / AA / RA rank near pairs first, as models of clustered graphs do; PA (degree product) ranks hub pairs
# first at any distance, Katz far pairs by their paths: the scores a pool must serve where near pairs don't lead
HEURISTICS = ("cn", "aa", "ra", "pa", "katz")
PER_NEGATIVE = 8  # SearchConfig.valid_pool
NEAR_REFERENCE, FAR_REFERENCE = 200_000, 100_000


def dataset(name: str, out: Path):
    args = graph_args(name, out)
    kw = dict(zip(args[0::2], args[1::2]))
    return load_dataset(DatasetSpec(kw["--dataset"], planetoid_dir=kw.get("--planetoid-dir"), seed=0))


KATZ_MAX_EDGES = 20_000  # Katz of 300,000 reference pairs on a denser graph takes longer than the whole bench


def scores(h: str, graph: Graph, pairs: np.ndarray) -> np.ndarray:
    if h == "katz" and graph.num_edges > KATZ_MAX_EDGES:
        return np.zeros(len(pairs))  # every estimate then 1 / (at + 1) / 2-ish and equal: its cells are skipped
    if h == "pa":
        deg = graph.degree.astype(np.float64)
        return deg[pairs[:, 0]] * deg[pairs[:, 1]]
    return ranking_scores(h, graph, pairs)


def expected_mrr(pos: np.ndarray, neg: np.ndarray, at: int, weight=None) -> float:
    """common.metrics.expected_rank_values' MRR, each negative counted by `weight` (None: equally)."""
    p = (rank_against_shared(pos, neg) - 1.0) / len(neg) if weight is None else weighted_share_above(pos, neg, weight)
    return float(expected_reciprocal_rank(p, at).mean())


def reference(ds, graph: Graph, known: Graph, at: int, rng) -> tuple[dict, float]:
    """{h: the reference MRR}, near share: every near non-edge (or a sample) and a large far sample."""
    nodes, free = ds.active_nodes("valid"), free_pairs(known, ds.active_nodes("valid"))
    near = near_non_edges(graph, known, nodes)
    if near is None:
        return {}, float("nan")
    share = len(near) / free
    if len(near) > NEAR_REFERENCE:
        near = near[rng.choice(len(near), NEAR_REFERENCE, replace=False)]
    far_count = min(FAR_REFERENCE, (free - len(near)) // 2)
    far = sample_non_edges(known, far_count, rng, accept=lambda p: common_neighbors(graph, p) == 0, nodes=nodes)
    pairs = np.concatenate([far, near])
    weight = np.r_[np.full(len(far), (1 - share) / max(len(far), 1)), np.full(len(near), share / max(len(near), 1))]
    pos = ds.splits["valid"].pos
    skip = {"katz"} if graph.num_edges > KATZ_MAX_EDGES else set()
    return {
        h: expected_mrr(scores(h, graph, pos), scores(h, graph, pairs), at, weight) for h in HEURISTICS if h not in skip
    }, share


# near pairs drawn on top of today's uniform pool size, against uniform pools of today's size and of the same total
FRACTIONS = (0.5,)
KINDS = ["uniform today", "uniform", *(f"near {f:g}" for f in FRACTIONS)]
FIRST_SEED = 100  # pool seeds FIRST_SEED.. : fresh draws for the second rule (RULE in the report)


def measure(name: str, out: Path, draws: int) -> dict:
    ds = dataset(name, out)
    valid, graph = ds.splits["valid"], ds.graph_for("valid")
    neg = np.asarray(valid.neg[POOL_PROTOCOL], dtype=np.int64)
    known = Graph.from_edges(np.concatenate([ds.splits["train"].pos, valid.pos]), num_nodes=ds.num_nodes)
    ref, share = reference(ds, graph, known, len(ds.splits["test"].neg[POOL_PROTOCOL]), np.random.default_rng(99))
    pos = {h: scores(h, graph, valid.pos) for h in HEURISTICS}
    kinds = KINDS
    est = {(k, h): [] for k in kinds for h in HEURISTICS}
    seconds, peak = dict.fromkeys(kinds, 0.0), 0
    for seed in range(FIRST_SEED, FIRST_SEED + draws):
        for f, kind in zip(FRACTIONS, kinds[2:]):
            tracemalloc.start()
            t0 = time.perf_counter()
            pooled = attach_stratified_pool(ds, PER_NEGATIVE, seed=seed, near_fraction=f)
            seconds[kind] += time.perf_counter() - t0
            peak = max(peak, tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
            info = pooled.valid_pool
            at, strata = info["rank_at"], pooled.splits["valid"].neg[POOL_PROTOCOL]  # the protocol's too
            for h in HEURISTICS:
                est[kind, h].append(expected_mrr(pos[h], scores(h, graph, strata), at, pool_weights(info)))
        for kind, size in (("uniform", info["pool"]), ("uniform today", info["pool"] - info["near"])):
            t0 = time.perf_counter()
            uniform = sample_non_edges(
                known, size, np.random.default_rng([seed, 7]), exclude=neg, nodes=ds.active_nodes("valid")
            )
            seconds[kind] += time.perf_counter() - t0
            for h in HEURISTICS:
                est[kind, h].append(expected_mrr(pos[h], scores(h, graph, np.concatenate([neg, uniform])), at))
    row = {
        "graph": name,
        "positives": len(valid.pos),
        "pool": info["pool"],
        "near_share": share,
        "seconds": {k: v / draws for k, v in seconds.items()},
        "peak_mb": peak / 2**20,
        "reference": {h: 100 * v for h, v in ref.items()},
    }
    skip = {"katz"} if graph.num_edges > KATZ_MAX_EDGES else set()
    for (kind, h), values in ((k, v) for k, v in est.items() if k[1] not in skip):
        v = 100 * np.asarray(values)
        err = float(np.sqrt(np.mean((v - row["reference"][h]) ** 2))) if ref else float("nan")
        row.setdefault(h, {})[kind] = {"mean": float(v.mean()), "sd": float(v.std(ddof=1)), "rmse": err}
    return row


def table(rows: list[dict]) -> str:
    kinds = KINDS
    head = "| graph | pool | near share | score | reference MRR | " + " | ".join(f"RMSE {k}" for k in kinds)
    lines = [head + " | " + " | ".join(f"SD {k}" for k in kinds) + " |", "|" + "---|" * (5 + 2 * len(kinds))]
    for r in rows:
        for h in (h for h in HEURISTICS if h in r):
            cells = [r["graph"], str(r["pool"]), f"{100 * r['near_share']:.2f} %", h.upper()]
            cells += [f"{r['reference'].get(h, float('nan')):.2f}"]
            cells += [f"{r[h][k]['rmse']:.2f}" for k in kinds] + [f"{r[h][k]['sd']:.2f}" for k in kinds]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def costs(rows: list[dict]) -> str:
    lines = ["| graph | pool seconds: " + " / ".join(rows[0]["seconds"]) + " | peak MB (traced) |", "|---|---|---|"]
    for r in rows:
        took = " / ".join(f"{v:.3f}" for v in r["seconds"].values())
        lines.append(f"| {r['graph']} | {took} | {r['peak_mb']:.0f} |")
    return "\n".join(lines)


def medians(rows: list[dict]) -> str:
    """Per score and near fraction: the median over graphs of RMSE / the uniform pool's, and the cells above 1."""
    out = []
    for f in FRACTIONS:
        kind = f"near {f:g}"
        for h in HEURISTICS:
            ratio = [
                r[h][kind]["rmse"] / r[h]["uniform"]["rmse"] for r in rows if h in r and r[h]["uniform"]["rmse"] > 0.01
            ]
            if ratio:
                out.append(
                    f"{kind}, {h.upper()}: RMSE / uniform median {np.median(ratio):.2f}, worst {max(ratio):.2f}, "
                    f"{sum(x > 1 for x in ratio)} of {len(ratio)} graphs worse"
                )
    return "\n".join(out)


def build_parser(prog: str = "python -m experiments.own_graph_research.strata") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--out", required=True, help="a folder for the synthetic graphs' edge lists")
    p.add_argument("--graphs", default=",".join(GRAPHS), help="comma-separated suite graphs (default all)")
    p.add_argument("--draws", type=int, default=20, help="pool draws per graph (default 20)")
    p.add_argument("--table", action="store_true", help="only print the table of OUT/rows.jsonl")
    return p


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m experiments.own_graph_research.strata")


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    (out / "graphs").mkdir(parents=True, exist_ok=True)
    names = [g for g in args.graphs.split(",") if g]
    if bad := [g for g in names if g not in GRAPHS]:
        raise SystemExit(f"--graphs: unknown {', '.join(bad)}; choose from {', '.join(GRAPHS)}")
    if args.table:
        rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
        print(table(rows), costs(rows), medians(rows), sep="\n")
        return 0
    rows = []
    for name in names:
        deg = dataset(name, out).graph_for("valid").degree.astype(np.int64)
        if (wedges := int((deg * (deg - 1) // 2).sum())) > WEDGE_MAX:
            print(f"{name}: {wedges:,} wedges, over WEDGE_MAX: one uniform stratum, the pool as before", flush=True)
            continue
        rows.append(measure(name, out, args.draws))
        with open(out / "rows.jsonl", "a") as f:  # one line per graph: --table merges runs side by side
            f.write(json.dumps(rows[-1]) + "\n")
        print("\n".join(table(rows[-1:]).splitlines()[2:]), flush=True)
    print(table(rows))
    print(costs(rows))
    print(medians(rows))
    print(f"pool: {PER_NEGATIVE} per validation negative, at most {POOL_MAX}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
