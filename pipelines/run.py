"""End-to-end recipe: preprocess (embedded Ray, cached) -> train (per seed) -> evaluate -> report.

    python -m pipelines.run --dataset citeseer [--protocol original|heart|both] [--preset NAME] [--seeds 0,1,2]

Per protocol it builds (or reuses) one shard set, trains one run per seed (pipelines.core.seeds), and
prints test MRR / Hits@K and AUC / AP (mean ± std over seeds, test at the best validation epoch) beside the
heuristics and the paper. A dataset without a paper preset gets --preset auto (pipelines.auto). Everything
lands in OUT/<dataset>/<preset>/: per-seed run folders with result.json, results.json, report.md, plots.
The run is configured by a RunConfig (pipelines.core.run_config), built once from the flags.
"""
from __future__ import annotations

import logging
import re
import signal
import threading
from pathlib import Path

from common.cli import command, latch_sigint
from common.flags import FlagError
from common.heuristics import split_scores
from common.metrics import evaluate
from common.presets import PRESETS, get_preset, preset_for_protocol
from pipelines.auto.blend import HEURISTICS
from pipelines.auto.config import DEFAULT_PRESET
from pipelines.auto.recipe import search_and_train
from pipelines.core import finished
from pipelines.core.children import exit_on_sigterm
from pipelines.core.plots import plot_runs
from pipelines.core.results import METRICS, SeedResult, aggregate, fmt, markdown, publish_results, table_json
from pipelines.core.run_config import PROG, SEARCH, RunConfig, build_parser
from pipelines.core.seeds import SeedFlagsError, check_trainer_flags, result_record, seed_run, train_seeds
from pipelines.core.shard_sets import preset_shard_set
from pipelines.core.trainers import cuda_devices, device_kind
from trainer.run_folder import locked

log = logging.getLogger("pipelines.run")


def pick_preset(run: RunConfig, dataset) -> str:
    """--preset, else the paper dataset's preset (a paper dataset is chosen by name: a user's file named
    citeseer.csv is not citeseer), else the search (SEARCH)."""
    if run.preset:
        if run.preset != SEARCH:
            try:
                get_preset(run.preset)  # unknown names fail here, before any work
            except ValueError as err:
                raise FlagError(f"--preset: {err}, or auto (a configuration searched on validation)") from None
        return run.preset
    if dataset.own:
        return SEARCH  # the user's graph: search a configuration on validation (pipelines.auto)
    small = f"{dataset.name}-small"
    paper = {name for name, p in PRESETS.items() if p.dataset == dataset.name}  # a file named tiny.csv is not 'tiny'
    if cuda_devices() == 0 and run.trainer.device != "cuda" and small in paper:
        return small
    if dataset.name in paper:
        return dataset.name
    return SEARCH


def check_budget(run: RunConfig, preset_name: str) -> None:
    """--budget-minutes bounds the auto search; under a fixed preset it would be ignored, so say so."""
    if run.budget_minutes is not None and preset_name != SEARCH:
        raise FlagError(f"--budget-minutes {run.budget_minutes:g}: bounds --preset auto's search; preset {preset_name} "
                        "trains its fixed configuration: drop --budget-minutes, or pass --preset auto")


def check_objective(run: RunConfig, preset_name: str) -> None:
    """--objective recommend acts through --preset auto's training views: with another preset it would change
    nothing, so say so before any work."""
    if run.objective == "link-prediction":
        return
    if preset_name != SEARCH:
        raise FlagError(f"--objective {run.objective}: sets --preset auto's training negatives; preset {preset_name} "
                        "has its own: add --preset auto, or drop --objective (--hard-neg-fraction sets them directly)")
    if run.shards.hard_neg_fraction is not None:
        raise FlagError(f"--objective {run.objective}: sets the training negatives, which --hard-neg-fraction "
                        f"{run.shards.hard_neg_fraction:g} fixes: pass one of the two")


def heuristic_rows(dataset, protocol: str, scores: dict) -> list[dict]:
    """CN / AA / RA on the test split as table rows (deterministic: std 0), from their scores."""
    own = {"own_graph": True} if dataset.own else {}
    rows = []
    for name, (pos, neg) in scores.items():
        metrics = evaluate(protocol, pos, neg)
        rows.append({"dataset": dataset.name, "protocol": protocol, "model": name.upper(), "seeds": [0], **own,
                     **{m: (100.0 * metrics[m], 0.0) for m in METRICS if m in metrics}})
    return rows


def fixed_preset(run: RunConfig, dataset, preset_name: str, protocol: str, runs: dict[int, Path]) -> list[SeedResult]:
    """Every seed's record of one protocol under a fixed preset."""
    preset_name = preset_for_protocol(preset_name, protocol)  # e.g. the paper's HeaRT config
    shards = preset_shard_set(run.source, run.shards, run.trainer.epochs, get_preset(preset_name), [protocol],
                              dataset, device_kind(run.trainer.device))
    seeds = {seed: seed_run(run.trainer, preset_name, shards, protocol, seed, d) for seed, d in runs.items()}
    summaries = train_seeds(run.trainer, seeds)
    return [SeedResult(d / "result.json", result_record(dataset.name, protocol, preset_name, seed, summaries[seed],
                                                        run.shards.features, dataset.own, run.shards.hard_neg_fraction))
            for seed, d in runs.items()]


def run_protocol(run: RunConfig, dataset, preset_name: str, protocol: str, out: Path, test_scores: dict) -> list[dict]:
    """Train one protocol's seeds (the search's, or a fixed preset's) and write their records."""
    runs = {seed: out / protocol / f"seed{seed}" for seed in run.seeds}
    if preset_name == SEARCH:
        results = search_and_train(run, dataset, protocol, out / protocol, runs, test_scores)
    else:
        results = fixed_preset(run, dataset, preset_name, protocol, runs)
    for result in results:
        finished.write_if_changed(result.path, result.record)
        r = result.record
        shown = ", ".join(f"{m} {100 * r['test'][m]:.2f}" for m in ("mrr", "hits@50", "auc") if m in r["test"])
        log.info("seed %d, %s: test %s (best epoch %s)", r["seed"], r["model"], shown or "–", r["best_epoch"])
    plot_runs(list(runs.values()), out / protocol)
    return [result.record for result in results]


def results_dir(root: str, dataset: str, preset: str) -> Path:
    """ROOT/<dataset>/<preset>: a user's graph gets its own folder, not one named after a borrowed preset.
    The dataset name is the loader's (a file's stem without .csv/.csv.gz/.parquet), made path-safe."""
    safe = re.sub(r"[^A-Za-z0-9_.+-]+", "_", dataset).strip("._") or "dataset"
    return Path(root) / safe / preset


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, exit_on_sigterm)
    return command(build_parser, run_all, argv, prog, config=RunConfig.from_args)


def run_all(run: RunConfig) -> int:
    """The whole run: every protocol's seeds, their heuristics on the same test split, one table."""
    dataset = run.source.load()
    available = dataset.protocols
    protocols = available if run.protocol == "both" else [run.protocol]
    missing = [p for p in protocols if p not in available]
    if missing:
        raise FlagError(f"--protocol {','.join(missing)}: {dataset.name} has only {', '.join(available)}")
    preset_name = pick_preset(run, dataset)
    check_objective(run, preset_name)
    check_budget(run, preset_name)
    out = results_dir(run.out, dataset.name, preset_name)
    try:
        check_trainer_flags(run.trainer, DEFAULT_PRESET if preset_name == SEARCH else preset_name, protocols, out)
    except SeedFlagsError as err:
        raise FlagError(str(err)) from None
    results, rows = [], []
    with locked(out, "pipelines.run", "--out"):  # a second run on this dataset and preset waits for none: refused
        for protocol in protocols:
            test_scores = split_scores(dataset, "test", [protocol], list(HEURISTICS))[protocol]  # once per run
            proto_results = run_protocol(run, dataset, preset_name, protocol, out, test_scores)
            results += proto_results
            rows += aggregate(proto_results) + heuristic_rows(dataset, protocol, test_scores)
        table = markdown(rows, lead=run.metric)
        publish_results(out, {"runs": results, "table": table_json(rows)}, table)
    second = "auc" if run.metric != "auc" else "mrr"  # the metric the user reads leads (--metric)
    shown = lambda r, m: fmt(*r[m]) if m in r else "–"  # noqa: E731
    for r in rows:
        if r["model"].startswith("PENCIL"):
            log.info("%s/%s %s: test %s %s, %s %s over %d seed(s); results in %s", r["dataset"], r["protocol"],
                     r["model"], run.metric.upper(), shown(r, run.metric), second.upper(), shown(r, second),
                     len(r["seeds"]), out)
    return 0


if __name__ == "__main__":
    latch_sigint()
    raise SystemExit(main())
