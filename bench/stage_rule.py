"""Validation-only check of the training-negatives stage's rule (pipelines/auto_negatives.choose_fraction): does
checking the reported protocol (and how strictly) pick the better arm on held-out validation queries?

    python -m bench.stage_rule RESULTS/*/auto/original [--halvings 20] [--seed 0] [--out table.md]

For each finished auto run whose search.json records the stage's two runs (seed 1 of the winner on uniform and
on 0.5-hard training views), R seeded random halvings of the reported protocol's validation positives. On
half A each arm gets what the stage decides on (auto_negatives.arm_values, restricted to A): its best blend on
the selection protocol, and that blend's reported metric and AUC. The selection protocol's rows follow their
positive (a valid/hard query goes to the half of its positive pair), so A and B never share a positive. Rules,
each picking an arm on A:
- uniform, hard: always that arm (reference);
- selection only: hard when its selection value is strictly higher (the rule before the reported check);
- current: choose_fraction (also no worse on the reported metric and AUC);
- tolerance k: as current, but the reported metric and AUC may be lower by up to k standard errors of their
  difference between the arms on A (per-positive reciprocal ranks and shares of negatives beaten, paired).
Each pick is scored on half B by the picked arm's A-chosen blend: the reported metric and AUC. The table gives,
per run and rule, the mean over the halvings and how often the rule picked hard. Only validation files are read
(every open of a test-*.npz fails while it runs: bench.prior_rule.no_test_scores).
"""
from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from bench.prior_rule import halving_parser, halvings, no_test_scores, parse_halving_args, publish

TOLERANCES = (1.0, 2.0)


def rules() -> tuple[str, ...]:
    return ("uniform", "hard", "selection only", "current", *(f"tolerance {k:g} SE" for k in TOLERANCES))


def blended(stage, run_dir: Path, chosen: dict) -> tuple[np.ndarray, np.ndarray]:
    """(cid, score) of a blend on the reported protocol's validation candidates."""
    from common.eval_scores import read_scores, scores_path
    from pipelines.auto_prior import NONE, blend

    cid, logit, _ = read_scores(scores_path(run_dir, "valid", stage.protocol))
    h = chosen["heuristic"]
    heur = stage.heuristics("valid", stage.protocol)[h][cid] if h != NONE else None
    return cid, blend(logit, heur, chosen["weight"])


def reported_on(stage, run_dir: Path, chosen: dict, rows: np.ndarray | None) -> dict:
    """Metrics of a blend on the reported protocol's validation queries `rows` (all when None)."""
    from trainer.evaluate import scores_to_metrics
    return scores_to_metrics(stage.manifest, "valid", stage.protocol, *blended(stage, run_dir, chosen), rows=rows)


def arm_on(stage, run_dir: Path, sel_rows, rep_rows) -> tuple[dict, dict]:
    """(arm_values on these rows, the blend chosen there)."""
    from pipelines.auto_prior import choose
    chosen = choose([stage.validation_grid(run_dir, sel_rows)["grid"]])
    rep = reported_on(stage, run_dir, chosen, rep_rows)
    return {"selection": chosen["valid_mean"], "reported": rep[stage.reported_metric], "auc": rep["auc"]}, chosen


def per_positive(stage, run_dir: Path, chosen: dict) -> tuple[np.ndarray, np.ndarray]:
    """Each reported-protocol validation positive's reciprocal rank and its share of the negatives it beats (ties
    half): their means are the MRR and, with shared negatives, the AUC (common.metrics' rank rule)."""
    from common.metrics import rank_against_own, rank_against_shared
    from common.shards import load_queries
    from trainer.evaluate import eval_entry

    cid, score = blended(stage, run_dir, chosen)
    entry = eval_entry(stage.manifest, "valid", stage.protocol)
    pos_cid, neg_cid = load_queries(f"{stage.manifest['root']}/{entry['queries']}")
    table = np.empty(int(max(cid.max(), pos_cid.max(), neg_cid.max())) + 1)
    table[cid] = score
    pos, neg = table[pos_cid], table[neg_cid]
    rank = rank_against_shared(pos, neg) if neg.ndim == 1 else rank_against_own(pos, neg)
    return 1.0 / rank, 1.0 - (rank - 1.0) / neg.shape[-1]


def paired_se(stages, runs, chosen, rows: np.ndarray) -> dict:
    """Standard error of (hard - uniform) on A, from per-positive differences: of the MRR and the AUC."""
    from pipelines.auto_negatives import HARD_NEG_FRACTION, UNIFORM
    if stages[UNIFORM].reported_metric != "mrr":
        raise SystemExit(f"the tolerance rules measure MRR; this run reports {stages[UNIFORM].reported_metric}")
    (rr_u, auc_u), (rr_h, auc_h) = (per_positive(stages[f], runs[f], chosen[f]) for f in (UNIFORM, HARD_NEG_FRACTION))
    n = max(len(rows), 2)
    return {"reported": float(np.std(rr_h[rows] - rr_u[rows], ddof=1) / np.sqrt(n)),
            "auc": float(np.std(auc_h[rows] - auc_u[rows], ddof=1) / np.sqrt(n))}


def pick(rule: str, a: dict, se: dict | None) -> float:
    from pipelines.auto_negatives import HARD_NEG_FRACTION, UNIFORM, choose_fraction
    u, h = a[UNIFORM], a[HARD_NEG_FRACTION]
    if rule in ("uniform", "hard"):
        return UNIFORM if rule == "uniform" else HARD_NEG_FRACTION
    if rule == "selection only":
        return HARD_NEG_FRACTION if h["selection"] > u["selection"] else UNIFORM
    if rule == "current":
        return choose_fraction(a)
    k = float(rule.split()[1])
    ok = h["selection"] > u["selection"] and all(h[m] >= u[m] - k * se[m] for m in ("reported", "auc"))
    return HARD_NEG_FRACTION if ok else UNIFORM


def check_run(run_root: Path, repeats: int, seed: int) -> dict:
    from bench.stage_arms import load_arms

    search, arms = load_arms(run_root)
    stages = {f: s for f, (s, _) in arms.items()}
    runs = {f: d for f, (_, d) in arms.items()}
    any_stage = stages[0.0]
    valid = any_stage.dataset.splits["valid"]
    rep_pos = np.asarray(valid.positives(any_stage.protocol), dtype=np.int64)
    sel_pos = np.asarray(valid.positives(any_stage.select), dtype=np.int64)
    width = any_stage.dataset.graph.num_nodes
    rep_key, sel_key = rep_pos[:, 0] * width + rep_pos[:, 1], sel_pos[:, 0] * width + sel_pos[:, 1]
    full, drift = {}, 0.0
    for f in stages:  # the per-positive numbers the tolerance uses must average to the reported MRR and AUC
        full[f], chosen = arm_on(stages[f], runs[f], None, None)
        rr, beaten = per_positive(stages[f], runs[f], chosen)
        drift = max(drift, abs(rr.mean() - full[f]["reported"]), abs(beaten.mean() - full[f]["auc"]))
    results = []
    for a_rows, b_rows in halvings(len(rep_pos), repeats, seed):
        sel_a = np.flatnonzero(np.isin(sel_key, rep_key[a_rows]))  # a hard query goes with its positive
        on_a = {f: arm_on(stages[f], runs[f], sel_a, a_rows) for f in stages}
        values_a = {f: v for f, (v, _) in on_a.items()}
        chosen = {f: c for f, (_, c) in on_a.items()}
        se = paired_se(stages, runs, chosen, a_rows)
        on_b = {f: reported_on(stages[f], runs[f], chosen[f], b_rows) for f in stages}
        row = {}
        for rule in rules():
            f = pick(rule, values_a, se)
            row[rule] = {"hard": f > 0, "reported": on_b[f][stages[f].reported_metric], "auc": on_b[f]["auc"]}
        results.append(row)
    return {"graph": run_root.parents[1].name, "selection": f"valid/{any_stage.select}", "full": full, "drift": drift,
            "recorded": search["training_negatives"].get("chosen"), "positives": len(rep_pos), "results": results}


def table(checks: list[dict]) -> str:
    lines = ["| graph | selection | rule | picks hard (halvings) | half-B reported metric | half-B AUC |",
             "|---|---|---|---|---|---|"]
    for c in checks:
        for rule in rules():
            rs = [r[rule] for r in c["results"]]
            rep = 100 * np.array([r["reported"] for r in rs])
            auc = 100 * np.array([r["auc"] for r in rs])
            lines.append(f"| {c['graph']} | {c['selection']} | {rule} | {sum(r['hard'] for r in rs)}/{len(rs)} | "
                         f"{rep.mean():.2f} | {auc.mean():.2f} |")
    return "\n".join(lines)


def verdict(checks: list[dict]) -> str:
    """Mean over the graphs of each rule's half-B numbers, minus always-uniform's."""
    out = ["| rule | half-B reported metric - uniform (mean over graphs) | half-B AUC - uniform |", "|---|---|---|"]
    for rule in rules():
        d_rep = [np.mean([r[rule]["reported"] - r["uniform"]["reported"] for r in c["results"]]) for c in checks]
        d_auc = [np.mean([r[rule]["auc"] - r["uniform"]["auc"] for r in c["results"]]) for c in checks]
        out.append(f"| {rule} | {100 * np.mean(d_rep):+.2f} | {100 * np.mean(d_auc):+.2f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = halving_parser("python -m bench.stage_rule", __doc__.split("\n\n")[0])
    args = parse_halving_args(p, argv)
    checks = []
    with no_test_scores():
        for run_root in args.runs:
            if not (run_root / "search.json").is_file():
                p.error(f"{run_root}: no search.json; pass a finished `--preset auto` run's protocol folder")
            c = check_run(run_root, args.halvings, args.seed)
            print(f"{c['graph']}: {c['positives']} validation positives, kept by the run: {c['recorded']:g}; per-positive "
                  f"means reproduce the reported MRR and AUC within {c['drift']:.1e}",
                  file=sys.stderr, flush=True)
            checks.append(c)
    return publish(table(checks) + "\n\n" + verdict(checks) + "\n", args.out)


if __name__ == "__main__":
    sys.exit(main())
