"""Two `pencil run` outputs of the same graphs (before / after a change to the search), compared on validation only:
each arm's choice, the chosen search run's validation MRR and AUC, their paired difference with the search's own
two-way bootstrap SE, and the blend's decision with its validation value.

    python -m experiments.own_graph_research.matched_floor --before runs/before-{g} --after runs/after-{g} \
        --graphs blogs-s1,bio-1800-s1,collegemsg,bitcoin-alpha

`{g}` in a path is the graph's name; the run folder under it is `<g>/auto/original` (protocol original).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common.manifest import read_manifest
from pipelines.auto.signal import paired, run_signal, two_way_se

METRICS = ("mrr", "auc")


def arm(path: Path) -> dict:
    """The run's choice, its blend, and the chosen search run's validation signal."""
    search = json.loads((path / "search.json").read_text())
    chosen = search["chosen"]
    signal = run_signal(Path(chosen["run_dir"]), read_manifest(Path(chosen["shards"])), "original")
    blend = search.get("blend") or {}
    return {
        "cid": chosen["cid"],
        "epochs": chosen["epochs"],
        "run": Path(chosen["run_dir"]).name,  # the candidate and all it depends on (its schedule too)
        "signal": signal,
        "values": {m: float(signal.values()[m].mean()) for m in METRICS},
        "blend": blend.get("choice", "-"),
        "blend_valid": blend.get("means", {}).get(blend.get("choice"), float("nan")),
        "candidate_epochs": search.get("candidate_epochs", {}),
    }


def row(graph: str, before: dict, after: dict) -> str:
    cells = [graph, f"{before['cid']} ({before['epochs']}) -> {after['cid']} ({after['epochs']})"]
    for m in METRICS:
        diff, _ = paired(after["signal"].values()[m], before["signal"].values()[m])
        se = two_way_se(after["signal"], before["signal"], m) if after["run"] != before["run"] else 0.0
        cells.append(
            f"{100 * before['values'][m]:.2f} -> {100 * after['values'][m]:.2f} ({100 * diff:+.2f} ± {100 * se:.2f})"
        )
    cells.append(
        f"{before['blend']} ({100 * before['blend_valid']:.2f}) -> {after['blend']} ({100 * after['blend_valid']:.2f})"
    )
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True)
    p.add_argument("--after", required=True)
    p.add_argument("--graphs", required=True)
    a = p.parse_args()
    print("| graph | choice (epochs) | valid MRR (after − before ± SE) | valid AUC | blend (its valid MRR) |")
    print("|---|---|---|---|---|")
    for g in a.graphs.split(","):
        runs = [Path(x.format(g=g)) / g / "auto" / "original" for x in (a.before, a.after)]
        if not all((r / "search.json").exists() for r in runs):
            print(f"| {g} | not finished | | | |")
            continue
        print(row(g, arm(runs[0]), arm(runs[1])))


if __name__ == "__main__":
    main()
