"""End-to-end recipe: preprocess (embedded Ray, cached) -> train (per seed) -> evaluate -> report.

    python -m pipelines.run --dataset citeseer [--protocol original|heart|both] [--preset NAME] [--seeds 0,1,2]

Per protocol it builds (or reuses) one shard set, trains one run per seed (pipelines.core.seeds), and
prints test MRR / Hits@K and AUC / AP (mean ± std over seeds, test at the best validation epoch) beside the
heuristics and the paper. A dataset without a paper preset gets --preset auto (pipelines.auto). Everything
lands in OUT/<dataset>/<preset>/: per-seed run folders with result.json, results.json, report.md, plots.
"""
from __future__ import annotations

import logging
import re
import signal
import threading
from pathlib import Path

from common.cli import latch_sigint, run_cli
from common.heuristics import score_split
from common.presets import PRESETS, get_preset, preset_for_protocol
from pipelines.auto import blend
from pipelines.auto.recipe import search_and_train
from pipelines.core import finished
from pipelines.core.children import exit_on_sigterm
from pipelines.core.plots import plot_runs
from pipelines.core.results import METRICS, aggregate, fmt, markdown, publish_results, table_json
from pipelines.core.seeds import SeedFlagsError, check_trainer_flags, result_record, train_seeds
from pipelines.core.shard_sets import load_run_dataset, preset_shard_set
from pipelines.core.trainers import cuda_devices, device_kind
from pipelines.core.run_args import PROG, RunError, build_parser, validate_args
from trainer.run_folder import locked

log = logging.getLogger("pipelines.run")
AUTO = "auto"  # the searched preset (pipelines.auto.search); the paper's presets keep their own rule


def pick_preset(args, dataset) -> str:
    """--preset, else the paper dataset's preset (a paper dataset is chosen by name: a user's file named
    citeseer.csv is not citeseer), else auto."""
    if args.preset:
        try:
            get_preset(args.preset)  # unknown names fail here, before any work
        except ValueError as err:
            raise RunError(f"--preset: {err}") from None
        return args.preset
    if dataset.own:
        return AUTO  # the user's graph: search a configuration on validation (pipelines.auto.search)
    small = f"{dataset.name}-small"
    paper = {name for name, p in PRESETS.items() if p.dataset == dataset.name}  # a file named tiny.csv is not 'tiny'
    if cuda_devices() == 0 and args.device != "cuda" and small in paper:
        return small
    if dataset.name in paper:
        return dataset.name
    return AUTO


def check_budget(args, preset_name: str) -> None:
    """--budget-minutes bounds the auto search; under a fixed preset it would be ignored, so say so."""
    if args.budget_minutes is not None and preset_name != AUTO:
        raise RunError(f"--budget-minutes {args.budget_minutes:g}: bounds --preset auto's search; preset {preset_name} "
                       "trains its fixed configuration: drop --budget-minutes, or pass --preset auto")


def check_objective(args, preset_name: str) -> None:
    """--objective recommend acts through --preset auto's training views: with another preset it would change
    nothing, so say so before any work."""
    if args.objective == "link-prediction":
        return
    if preset_name != AUTO:
        raise RunError(f"--objective {args.objective}: sets --preset auto's training negatives; preset {preset_name} "
                       "has its own: add --preset auto, or drop --objective (--hard-neg-fraction sets them directly)")
    if args.hard_neg_fraction is not None:
        raise RunError(f"--objective {args.objective}: sets the training negatives, which --hard-neg-fraction "
                       f"{args.hard_neg_fraction:g} fixes: pass one of the two")


def heuristic_rows(dataset_obj, protocol: str) -> list[dict]:
    """CN / AA / RA on the same test split, as table rows (deterministic: std 0)."""
    scored = score_split(dataset_obj, "test", [protocol], ["cn", "aa", "ra"])[protocol]
    own = {"own_graph": True} if dataset_obj.own else {}
    return [{"dataset": dataset_obj.name, "protocol": protocol, "model": name.upper(), "seeds": [0], **own,
             **{m: (100.0 * metrics[m], 0.0) for m in METRICS if m in metrics}}
            for name, metrics in scored.items()]


def run_protocol(args, dataset_obj, preset_name: str, protocol: str, out: Path) -> list[dict]:
    runs = {seed: out / protocol / f"seed{seed}" for seed in args.seed_list}
    chosen, blended = None, None
    if preset_name == AUTO:
        summaries, chosen, blended = search_and_train(args, dataset_obj, protocol, out / protocol, runs)
    else:
        preset_name = preset_for_protocol(preset_name, protocol)  # e.g. the paper's HeaRT config
        shards = preset_shard_set(args, get_preset(preset_name), [protocol], dataset_obj, device_kind(args.device))
        summaries = train_seeds(args, preset_name, shards, protocol, runs)
    results = []
    for seed, run_dir in runs.items():
        summary = summaries[seed]
        record = result_record(dataset_obj.name, protocol, preset_name, seed, summary, args.features)
        if dataset_obj.own:  # only then, so the records of paper datasets stay as they were
            record["own_graph"] = True
        if args.hard_neg_fraction:  # only when set, so the records of uniform-negative runs stay as they were
            record["hard_neg_fraction"] = args.hard_neg_fraction
        if chosen:  # the searched config and its blend, with the run
            record["auto"] = {"cid": chosen["cid"], "config": chosen["config"], "epochs": chosen["epochs"],
                              "blend": {k: blended["choice"][k] for k in ("heuristic", "weight", "metric")}}
        finished.write_if_changed(run_dir / "result.json", record)
        results.append(record)
        log.info("seed %d: test %s = %.2f (best epoch %s)", seed, summary.get("selection_metric", "mrr"),
                 100 * record["test"].get(summary.get("selection_metric", "mrr"), float("nan")), record["best_epoch"])
    if blended:
        results += blend_records(results, blended, runs)
    plot_runs([out / protocol / f"seed{r['seed']}" for r in results if "blend_of" not in r], out / protocol)
    return results


def blend_records(results: list[dict], blended: dict, runs: dict[int, Path]) -> list[dict]:
    """The `--preset auto` blend row, one record per seed in seed<k>/blend/result.json, so `pencil report` over
    the folder shows it too; the model alone keeps its own row."""
    name = blend.row_name(results[0]["model"], blended["choice"])
    out = []
    for record in results:
        seed = record["seed"]
        row = {**record, "model": name, "test": blended["test"][seed], "blend_of": record["model"]}
        finished.write_if_changed(runs[seed] / "blend" / "result.json", row)
        out.append(row)
    return out


def results_dir(root: str, dataset: str, preset: str) -> Path:
    """ROOT/<dataset>/<preset>: a user's graph gets its own folder, not one named after a borrowed preset.
    The dataset name is the loader's (a file's stem without .csv/.csv.gz/.parquet), made path-safe."""
    safe = re.sub(r"[^A-Za-z0-9_.+-]+", "_", dataset).strip("._") or "dataset"
    return Path(root) / safe / preset


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, exit_on_sigterm)
    return run_cli(lambda a: _main(a, prog), argv, prog=prog)


def _main(argv: list[str] | None, prog: str) -> int:
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    validate_args(args)
    dataset_obj = load_run_dataset(args)
    available = dataset_obj.protocols
    protocols = available if args.protocol == "both" else [args.protocol]
    missing = [p for p in protocols if p not in available]
    if missing:
        raise RunError(f"--protocol {','.join(missing)}: {dataset_obj.name} has only {', '.join(available)}")
    preset_name = pick_preset(args, dataset_obj)
    check_objective(args, preset_name)
    check_budget(args, preset_name)
    out = results_dir(args.out, dataset_obj.name, preset_name)
    try:
        check_trainer_flags(args, preset_name, protocols, out)
    except SeedFlagsError as err:
        raise RunError(str(err)) from None
    results, rows = [], []
    with locked(out, "pipelines.run", "--out"):  # a second run on this dataset and preset waits for none: refused
        for protocol in protocols:
            proto_results = run_protocol(args, dataset_obj, preset_name, protocol, out)
            results += proto_results
            rows += aggregate(proto_results) + heuristic_rows(dataset_obj, protocol)
        table = markdown(rows)
        publish_results(out, {"runs": results, "table": table_json(rows)}, table)
    for r in rows:
        if r["model"].startswith("PENCIL"):
            log.info("%s/%s %s: test MRR %s, AUC %s over %d seed(s); results in %s", r["dataset"], r["protocol"],
                     r["model"], fmt(*r["mrr"]), fmt(*r["auc"]) if "auc" in r else "–", len(r["seeds"]), out)
    return 0


if __name__ == "__main__":
    latch_sigint()
    raise SystemExit(main())
