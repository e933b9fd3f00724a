"""The recipe's blend stage again on a finished `pencil run` folder, training nothing.

    python -m experiments.own_graph_research.redecide suite/runs/auto/arxiv-astroph/auto/original --out A.json

A rerun of `pencil run` into its folder decides the blend again on the trained runs, but a search the budget cut
goes on training there first. This takes the search's record as it stands (search.json: the chosen candidate and
the last rung, whose other member is the blend's runner-up) and calls `pipelines.auto.recipe.blend_stage`
itself: the decision on validation, then each seed's test metrics (the runner-up evaluated on test in
RUN/runner-up/ when the blend takes it). The JSON holds the decision and the seeds' test metrics.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from common.heuristics import split_scores
from common.manifest import read_manifest
from pipelines.auto import blend
from pipelines.auto.config import candidates
from pipelines.auto.recipe import StageData, blend_stage
from pipelines.core.config import TrainerOptions
from pipelines.core.runs import run_dataset

PROTOCOL = "original"


def recorded_choice(run: Path) -> SimpleNamespace:
    """What blend_stage reads of the search's Choice, from search.json and the search's folders."""
    chosen = json.loads((run / "search.json").read_text())["chosen"]
    last = chosen["rungs"]["converged"]
    others = [c for c in last if c != chosen["cid"] and last[c].get("valid") is not None]
    partner = max(others, key=lambda c: last[c]["valid"]) if others else None
    folder = next((run / "search").glob(f"{partner}-*")) if partner else None
    return SimpleNamespace(
        partner={c.cid: c for c in candidates()}[partner] if partner else None,
        partner_dir=str(folder or ""),
        partner_shards=json.loads((folder / "config.json").read_text())["data"]["shards"] if folder else "",
        run_epochs=chosen["run_epochs"],
        partner_run_epochs=chosen["partner"].get("run_epochs", 0),
        metric=chosen["metric"],
        shards=chosen["shards"],
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.own_graph_research.redecide")
    p.add_argument("run", type=Path, help="a finished run's OUT/<dataset>/auto/original folder")
    p.add_argument("--out", type=Path, required=True, help="the JSON to write")
    p.add_argument("--margin", type=float, default=2.0, help="the blend's margin in SEs (SearchConfig's)")
    args = p.parse_args(argv)
    choice = recorded_choice(args.run)
    manifest = read_manifest(choice.shards)
    dataset = run_dataset(manifest)
    test = split_scores(dataset, "test", [PROTOCOL], list(blend.HEURISTICS))[PROTOCOL]
    runs = {int(d.name[4:]): d for d in sorted(args.run.glob("seed*")) if (d / "scores").is_dir()}
    opts = TrainerOptions("cpu")
    data = StageData(dataset, dataset.without_test(), manifest, PROTOCOL, test)
    decision, blended = blend_stage(opts, choice, runs, data, args.margin, args.run)
    summary = {m: [100 * float(np.mean(v)), 100 * float(np.std(v, ddof=1))] for m in ("mrr", "auc") for v in
               [[b[m] for b in blended.values()]]}  # fmt: skip
    args.out.write_text(json.dumps({"blend": decision.to_dict(), "seeds": blended, **summary}, indent=1, default=float))
    print(f"{args.run}: blend {decision.key}; test MRR {summary['mrr'][0]:.2f} ± {summary['mrr'][1]:.2f}, "
          f"AUC {summary['auc'][0]:.2f} ± {summary['auc'][1]:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
