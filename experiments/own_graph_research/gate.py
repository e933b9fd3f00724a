"""Should an alternative that trails the default after the grace period go on? The search sends the best
alternative to its second rung whatever its standing against the default, and that rung trains it to
convergence: on a dense graph a two-hop view's chain is most of the run.

    python -m experiments.own_graph_research.gate --out runs/research --variants d2n10-dist,d2n5-dist,hn25

For every graph with seed 0 of `base` (the default) and of a variant (the alternative), both trained through
their whole schedule (each its own: an alternative's may be shorter), the search's two rungs are replayed on
their saved validation scores:
- after the grace period (SearchConfig.grace_epochs), each run at its best epoch so far by MRR: the alternative's
  MRR lead over the default in SEs of the two-way bootstrap (z), and the same on AUC;
- at convergence (each run stopped by the search's patience, at its best epoch before the stop): would the search
  choose the alternative (pipelines.auto.signal.choose, then break_tie, as the search does)?
A gate at z < -k would stop the alternative after its grace period; the table says which choices that loses and
how many of the alternative's epochs it saves. Validation only; test is never read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from experiments.own_graph_research.scores import run_matrices
from experiments.own_graph_research.study import runs, stop_epoch, table, values
from pipelines.auto.config import SearchConfig
from pipelines.auto.signal import Signal, break_tie, choose, two_way_se

GATES = (1.0, 2.0, 3.0)


def best_before(curve: np.ndarray, last: int) -> int:
    return int(np.argmax(curve[: last + 1]))


def replay(default_dir: Path, other_dir: Path) -> dict:
    """The pair's grace-period standing, the search's final choice, and the alternative's second-rung epochs."""
    cfg = SearchConfig()
    mats = {"default": run_matrices(default_dir), "other": run_matrices(other_dir)}
    curves = {k: values(p)["mrr"].mean(1) for k, p in (("default", default_dir), ("other", other_dir))}
    # each run on its own schedule, as the search trains it (an alternative's may be shorter: candidate_epochs)
    grace = {k: cfg.grace_epochs(len(c)) for k, c in curves.items()}
    patience = {k: cfg.patience_epochs(len(c)) for k, c in curves.items()}

    def signals(epochs: dict) -> dict:
        return {k: Signal(mats[k][0][e], mats[k][1][e]) for k, e in epochs.items()}  # the default first

    at_grace = signals({k: best_before(c, grace[k] - 1) for k, c in curves.items()})
    z = {}
    for m in ("mrr", "auc"):
        diff = float(np.mean(at_grace["other"].values()[m] - at_grace["default"].values()[m]))
        z[m] = diff / two_way_se(at_grace["other"], at_grace["default"], m)
    stops = {k: stop_epoch(c, patience[k]) for k, c in curves.items()}
    final = signals({k: best_before(curves[k], stops[k]) for k in curves})
    decision = choose(
        {k: s.values()["mrr"] for k, s in final.items()},
        cfg.margin_se,
        lambda a, b: two_way_se(final[a], final[b], "mrr"),
    )
    decision = break_tie(decision, final, "mrr", cfg.margin_se)
    lead = float(np.mean(final["other"].values()["mrr"] - final["default"].values()["mrr"]))
    return {
        "epochs": len(curves["other"]),
        "grace": grace["other"],
        "z": z,
        "chosen": decision["choice"] == "other",
        "lead": lead,
        "chain": stops["other"] + 1 - grace["other"],  # the alternative's epochs after the grace period
    }


def gate_table(out: Path, variants: list[str], seed: int = 0) -> str:
    base = runs(out, "base")
    rows, got = [], []
    for v in variants:
        other = runs(out, v)
        for g in sorted(set(base) & set(other)):
            if seed not in base[g] or seed not in other[g]:
                continue
            r = replay(base[g][seed], other[g][seed])
            got.append(r)
            rows.append(
                [
                    g,
                    v,
                    f"{r['epochs']} / {r['grace']}",
                    f"{r['z']['mrr']:+.1f}",
                    f"{r['z']['auc']:+.1f}",
                    "yes" if r["chosen"] else "no",
                    f"{100 * r['lead']:+.2f}",
                    r["chain"],
                ]
            )
    header = [
        "graph",
        "alternative",
        "epochs / grace",
        "z MRR at grace",
        "z AUC at grace",
        "chosen at convergence",
        "its final MRR lead",
        "its epochs after grace",
    ]
    summary = []
    for k in GATES:
        stopped = [r for r in got if r["z"]["mrr"] < -k]
        lost = [r for r in stopped if r["chosen"]]
        leads = ", ".join(f"{100 * r['lead']:+.2f}" for r in lost)
        summary.append(
            [
                f"gate z < -{k:g}",
                f"{len(stopped)} of {len(got)} alternatives stopped",
                f"{len(lost)} choice(s) lost" + (f" (their final MRR leads: {leads})" if lost else ""),
                f"{sum(r['chain'] for r in stopped)} of {sum(r['chain'] for r in got)} second-rung epochs saved",
            ]
        )
    return table(header, rows) + "\n\n" + table(["gate", "stopped", "lost", "saved"], summary)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m experiments.own_graph_research.gate", description=__doc__.split("\n")[0]
    )
    p.add_argument("--out", required=True)
    p.add_argument("--variants", default="d2n10-dist,d2n5-dist")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(gate_table(Path(args.out).resolve(), args.variants.split(","), args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
