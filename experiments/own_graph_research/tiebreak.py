"""Would a second metric break the search's ties? The search replaces the default by an alternative only when it
is better on the lead metric (MRR) by more than 1 SE of the two-way bootstrap. Where MRR is at chance (the block
model, latent spaces), every alternative ties on it, and an alternative much better on AUC is never taken.

    python -m experiments.own_graph_research.tiebreak --out runs/research --against base --variant d2n5-dist

Two rules, each chosen on half A of the validation positives and scored on half B (the study's honest halves;
each run's epoch is also chosen on A, by MRR):
- "mrr": the alternative if its MRR beats the default's by more than 1 SE (pipelines.auto.signal.choose);
- "tie-break": as "mrr", and also the alternative if its MRR is within 1 SE of the default's (either way) and its
  AUC is better by more than 1 SE (pipelines.auto.signal.break_tie, which the search now applies).
Validation only; test is never read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from experiments.own_graph_research.scores import run_matrices
from experiments.own_graph_research.study import chosen, halves, runs, table, values
from pipelines.auto.config import SearchConfig
from pipelines.auto.signal import Signal, break_tie, choose, two_way_se


def rule_choices(sig: dict[str, Signal]) -> dict[str, bool]:
    """Whether each rule takes the alternative ("other"): the search's own choose and break_tie, on MRR with the
    search's margin and two-way SE."""
    margin = SearchConfig().margin_se
    first = choose(
        {k: s.values()["mrr"] for k, s in sig.items()}, margin, lambda a, b: two_way_se(sig[a], sig[b], "mrr")
    )
    tied = break_tie(first, sig, "mrr", margin)
    return {"mrr": first["choice"] == "other", "tie-break": tied["choice"] == "other"}


def graph_rows(default_dir: Path, other_dir: Path) -> dict:
    """Per rule: mean over halvings of half B's (MRR, AUC) of the rule's choice, and how often it took the other."""
    mats = {k: run_matrices(p) for k, p in (("default", default_dir), ("other", other_dir))}
    vals = {k: values(p) for k, p in (("default", default_dir), ("other", other_dir))}
    got = {r: {"mrr": [], "auc": [], "took": []} for r in ("mrr", "tie-break")}
    for a, b in halves(vals["default"]["mrr"].shape[1]):
        epochs = {k: chosen(v, a, "mrr") for k, v in vals.items()}
        sig = {k: Signal(mats[k][0][epochs[k], a], mats[k][1][epochs[k]]) for k in mats}  # the default first
        for rule, took in rule_choices(sig).items():
            k = "other" if took else "default"
            got[rule]["took"].append(took)
            for m in ("mrr", "auc"):
                got[rule][m].append(float(vals[k][m][epochs[k], b].mean()))
    return {r: {m: float(np.mean(x)) for m, x in v.items()} for r, v in got.items()}


def tiebreak_table(out: Path, against: str, variant: str, seed: int = 0) -> str:
    base, other = runs(out, against), runs(out, variant)
    rows, diffs = [], {"mrr": [], "auc": []}
    for g in sorted(set(base) & set(other)):
        if seed not in base[g] or seed not in other[g]:
            continue
        r = graph_rows(base[g][seed], other[g][seed])
        dm, da = (100 * (r["tie-break"][m] - r["mrr"][m]) for m in ("mrr", "auc"))
        diffs["mrr"].append(dm)
        diffs["auc"].append(da)
        rows.append(
            [
                g,
                f"{100 * r['mrr']['mrr']:.2f} / {100 * r['mrr']['auc']:.2f} ({100 * r['mrr']['took']:.0f} %)",
                f"{100 * r['tie-break']['mrr']:.2f} / {100 * r['tie-break']['auc']:.2f} "
                f"({100 * r['tie-break']['took']:.0f} %)",
                f"{dm:+.2f}",
                f"{da:+.2f}",
            ]
        )
    n = len(diffs["mrr"])
    rows.append(["**mean**", "", "", *(f"**{np.mean(diffs[m]):+.2f}** ({n})" if n else "–" for m in ("mrr", "auc"))])
    header = [
        "graph",
        f"rule mrr: half-B MRR / AUC (took {variant})",
        "rule tie-break: the same",
        "tie-break minus mrr, MRR",
        "AUC",
    ]
    return table(header, rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m experiments.own_graph_research.tiebreak", description=__doc__.split("\n")[0]
    )
    p.add_argument("--out", required=True)
    p.add_argument("--against", default="base", help="the default's variant (default base)")
    p.add_argument("--variant", default="d2n5-dist", help="the alternative's variant (default d2n5-dist)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(tiebreak_table(Path(args.out).resolve(), args.against, args.variant, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
