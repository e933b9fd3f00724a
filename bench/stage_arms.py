"""The training-negatives stage's two arms of finished auto runs, read back from their validation files.

    python -m bench.stage_arms results/*/auto/original

For each run: the uniform and the hard arm's best blend on the selection protocol, and that blend's metric
and AUC on the reported protocol's validation (pipelines.auto_negatives.arm_values, exactly what the stage
decides on), the arm kept by the current rule, and the arm the run's search.json recorded. Runs made before
the stage recorded these numbers get them here. Reads validation files only.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def load_arms(run_root: Path) -> tuple[dict, dict]:
    """(search.json, {fraction: (PriorStage of that arm's shard set, the arm's stage run folder)}) of a finished
    auto run; the dataset is loaded once (both arms' shard sets hold the same one: only the training views
    differ), with valid/hard attached when selection ranks on it, as the search did."""
    from common.datasets import load_set_dataset
    from common.manifest import read_manifest
    from pipelines.auto_prior import PriorStage
    from pipelines.auto_search import HARD, attach_hard_negatives

    search = json.loads((run_root / "search.json").read_text())
    select, stage = search["selection"]["protocol"], search.get("training_negatives", {})
    if "runs" not in stage:
        raise SystemExit(f"{run_root}: its search.json records no training-negatives stage runs")
    arms, dataset = {}, None
    for fraction, run_dir in stage["runs"].items():
        run_dir = Path(run_dir)
        manifest = read_manifest(json.loads((run_dir / "config.json").read_text())["data"]["shards"])
        if dataset is None:
            dataset = load_set_dataset(manifest["config"])
            if select == HARD:
                attach_hard_negatives(dataset)
        arms[float(fraction)] = (PriorStage(dataset, manifest, select, run_root.name), run_dir)
    return search, arms


def stage_row(run_root: Path) -> dict:
    """{graph, selection, arms: {fraction: arm_values}, kept by the rule now, kept by the run}."""
    from pipelines.auto_negatives import arm_values, choose_fraction

    search, loaded = load_arms(run_root)
    arms = {f: arm_values(stage, run_dir) for f, (stage, run_dir) in loaded.items()}
    return {"graph": run_root.parents[1].name, "selection": f"valid/{search['selection']['protocol']}", "arms": arms,
            "rule": choose_fraction(arms), "recorded": search["training_negatives"].get("chosen")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.stage_arms", description=__doc__.splitlines()[0])
    p.add_argument("run_roots", nargs="+", help="finished `--preset auto` runs' protocol folders (search.json)")
    args = p.parse_args(argv)
    from pipelines.auto_negatives import HARD_NEG_FRACTION, UNIFORM

    print("| graph | selection | uniform / hard: best blend, selection | that blend, reported metric | that blend, "
          "reported AUC | kept by the rule | kept by the run |")
    print("|---|---|---|---|---|---|---|")
    for root in args.run_roots:
        if not (Path(root) / "search.json").is_file():
            p.error(f"{root}: no search.json; pass a finished `--preset auto` run's protocol folder")
        r = stage_row(Path(root))
        u, h = r["arms"][UNIFORM], r["arms"][HARD_NEG_FRACTION]
        cells = [f"{100 * u[k]:.2f} / {100 * h[k]:.2f}" for k in ("selection", "reported", "auc")]
        print(f"| {r['graph']} | {r['selection']} | {' | '.join(cells)} | {r['rule']:g} | {r['recorded']:g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
