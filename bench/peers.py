"""The default against its peers on the same test positives and negatives: for each own-graph suite graph, the
reported row (the blend search.json names, per seed) minus SEAL's test MRR and AUC, and minus the best of CN / AA /
RA on each metric, with the standard error the suite's acceptance reads "within 2 SE" against; and the default's
wall time beside SEAL's 10 epochs, from the same suite run. Run after `python -m bench.own_graph_suite --methods
auto,seal`, which keeps both sides' logits; nothing here feeds a choice.

    python -m bench.peers --out suite --graphs grid,cora

The SE has two parts, added in variance: the test split's own noise, a paired bootstrap that draws the positives
and the shared negatives once for every seed and SEAL alike (the seeds' mean difference recomputed on each draw;
pipelines.auto.signal.Signal ranks them), and the default's seed-to-seed spread of that difference over the
seeds it ran (SEAL ran one seed, so its own spread is not in it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from bench.own_graph_suite import GRAPHS, graph_args
from bench.top_negatives import partner_scores, prior_scores, run_scores
from common.cli import Parser, run_cli, summary
from common.datasets import DatasetSpec, load_dataset
from common.eval_scores import read_scores
from common.flags import add_dataset_flags
from common.heuristics import ranking_scores
from pipelines.auto.signal import Signal
from preprocess.candidates import protocol_candidates

METRICS = ("mrr", "auc")
DRAWS = 1000


def paired_difference(runs: list[Signal], other: Signal, draws: int = DRAWS, seed: int = 0) -> dict:
    """{metric: (mean over `runs` of run - other, its SE)} on the same positives and shared negatives: the SE of a
    bootstrap that draws positives and negatives together for all of them, plus the runs' spread, in variance."""
    p, q = len(other.pos), len(other.neg)
    rng = np.random.default_rng(seed)
    reps = {m: np.empty(draws) for m in METRICS}
    for k in range(draws):
        ip, iq = rng.integers(0, p, p), rng.integers(0, q, q)
        ref = other.values(ip, iq)
        got = [r.values(ip, iq) for r in runs]
        for m in METRICS:
            reps[m][k] = np.mean([np.mean(g[m] - ref[m]) for g in got])
    out = {}
    for m in METRICS:
        each = np.array([np.mean(r.values()[m] - other.values()[m]) for r in runs])
        spread = each.std(ddof=1) ** 2 / len(each) if len(each) > 1 else 0.0
        out[m] = (float(each.mean()), math.sqrt(float(reps[m].std(ddof=1)) ** 2 + spread))
    return out


def blend_inputs(dataset, c, protocol_dir: Path, blend: dict):
    """(prior, partner) as top_negatives.run_scores takes them, for the blend search.json recorded."""
    h, w, p = blend.get("heuristic", "none"), blend.get("weight"), blend.get("partner_weight") or 0.0
    prior = prior_scores(dataset, c, "test", f"{h}:{w}" if h != "none" and w else None)
    return prior, (partner_scores(protocol_dir, "test", str(p)) if p else None)


def signal_of(c, table: np.ndarray) -> Signal:
    """A split's positives' and shared negatives' scores from scores indexed by cid."""
    return Signal(np.asarray(table)[c.pos_cid], np.asarray(table)[c.neg_cid.reshape(-1)])


def graph_rows(out: Path, name: str) -> list[str]:
    """The graph's rows: the default against SEAL, and against the best heuristic on each metric."""
    gdir = out / name
    seal_npz = gdir / "seal-scores" / "test-original.npz"
    if not (gdir / "auto.json").exists() or not seal_npz.exists():
        return []
    p = Parser(prog="bench.peers")
    add_dataset_flags(p, split_kinds=True)
    p.add_argument("--node-features", default=None)
    dataset = load_dataset(DatasetSpec.from_args(p.parse_args(graph_args(name, out))))
    c = protocol_candidates(dataset, "test", "original")
    protocol_dir = sorted((out / "runs" / "auto").glob(f"{dataset.name}/auto/original"))[-1]
    blend = json.loads((protocol_dir / "search.json").read_text()).get("blend", {})
    prior, partner = blend_inputs(dataset, c, protocol_dir, blend)
    seeds = sorted(protocol_dir.glob("seed*/scores/test-original.npz"))
    runs = [Signal(*run_scores(c, s.parent.parent, "test", prior, partner)[:2]) for s in seeds]
    cid, score, _ = read_scores(seal_npz)
    table = np.full(len(c), np.nan)
    table[cid] = score
    pairs = np.stack([c.src, c.dst], 1)
    graph = dataset.graph_for("test")
    heuristics = {h.upper(): signal_of(c, ranking_scores(h, graph, pairs)) for h in ("cn", "aa", "ra")}
    head = f"| {name} | {len(runs)} | {len(c.pos_cid)} | {c.neg_cid.size} | "
    rows = [head + "SEAL | " + cells(runs, {m: ("", signal_of(c, table)) for m in METRICS}) + " |"]
    best = {m: max(heuristics.items(), key=lambda kv: kv[1].values()[m].mean()) for m in METRICS}
    return rows + [head + "best heuristic | " + cells(runs, {m: (f"{k} ", h) for m, (k, h) in best.items()}) + " |"]


def cells(runs: list[Signal], peer: dict[str, tuple[str, Signal]]) -> str:
    """Per metric: the default's mean, the peer's (named), their paired difference ± SE and its reading."""
    diffs = {label: paired_difference(runs, other) for label, other in peer.values()}  # one bootstrap a peer
    out = []
    for m in METRICS:
        label, other = peer[m]
        d, se = (100 * v for v in diffs[label][m])
        verdict = "ahead" if d > 2 * se else "behind" if d < -2 * se else "within 2 SE"
        own = 100 * np.mean([r.values()[m].mean() for r in runs])
        out.append(f"{own:.2f} | {label}{100 * other.values()[m].mean():.2f} | {d:+.2f} ± {se:.2f} ({verdict})")
    return " | ".join(out)


def times(gdir: Path) -> str:
    """The default's wall seconds, SEAL's process to the end of its 10th epoch (its whole process wall, less the
    training after that epoch: start, imports and preparation included, as in the default's), and their ratio;
    then the fixed preset's (`general`, the same seeds, no search) where the suite ran it, and its ratio: a floor
    under any search."""
    wall = json.loads((gdir / "auto.json").read_text())["wall_s"]
    fixed = json.loads((gdir / "general.json").read_text())["wall_s"] if (gdir / "general.json").exists() else None
    seal = json.loads((gdir / "seal-result.json").read_text())
    history = seal["history"]
    if len(history) < 10:
        return f"{wall:.0f} s | {len(history)} epochs only | – | – | –"
    ten = json.loads((gdir / "seal.json").read_text())["wall_s"] - (seal["seconds"] - history[9]["seconds"])
    floor = f"{fixed:.0f} s | {fixed / ten:.1f}x" if fixed else "– | –"
    return f"{wall:.0f} s | {ten:.0f} s | {wall / ten:.1f}x | {floor}"


def build_parser(prog: str = "python -m bench.peers") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--out", required=True, help="the own-graph suite's folder (bench.own_graph_suite --out)")
    p.add_argument("--graphs", default=",".join(GRAPHS), help="comma-separated suite graphs (default all)")
    return p


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.peers")


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out).resolve()
    names = [g for g in args.graphs.split(",") if g]
    rows = [r for g in names for r in graph_rows(out, g)]
    if not rows:
        raise SystemExit(f"--out {out}: no graph with both auto.json and seal-scores/; run bench.own_graph_suite")
    print(
        "| graph | seeds | test positives | shared negatives | peer | default MRR | peer MRR | MRR difference ± SE | "
        "default AUC | peer AUC | AUC difference ± SE |"
    )
    print("|" + "---|" * 11)
    print("\n".join(rows))
    print(
        "\n| graph | default wall | SEAL to its 10th epoch | ratio | fixed preset, no search | ratio |"
        "\n|---|---|---|---|---|---|"
    )
    print("\n".join(f"| {g} | {times(out / g)} |" for g in names if (out / g / "seal-result.json").exists()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
