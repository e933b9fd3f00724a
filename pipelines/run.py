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

from common.cli import command, exit_process, latch_sigint
from common.datasets import load_dataset
from common.datasets.directed import REVERSE
from common.datasets.fractions import DEFAULT_SPLIT
from common.datasets.kg import KG
from common.flags import FlagError
from common.heuristics import DIRECTED, TEMPORAL, WEIGHTED, split_scores
from common.heuristics import label as heuristic_label
from common.heuristics_typed import typed_scores
from common.metrics import REVERSE_KEY, evaluate, ranking_note
from common.presets import PRESETS, get_preset, preset_for_protocol
from pipelines.auto.blend import HEURISTICS
from pipelines.auto.config import DEFAULT_PRESET
from pipelines.auto.recipe import search_and_train
from pipelines.core import finished
from pipelines.core.children import exit_on_sigterm
from pipelines.core.plots import plot_runs
from pipelines.core.results import (
    METRICS,
    SeedResult,
    TableRow,
    aggregate,
    fmt,
    markdown,
    protocol_label,
    publish_results,
    table_json,
)
from pipelines.core.run_config import PROG, SEARCH, RunConfig, build_parser
from pipelines.core.seeds import SeedFlagsError, check_trainer_flags, seed_notes, seed_run, train_seeds
from pipelines.core.shard_sets import preset_shard_set, set_protocols
from pipelines.core.trainers import cuda_devices, device_kind
from pipelines.core.variants import PAIRS, pairs_beside, seed_results, split_label, train_without_features
from pipelines.typed_report import relation_markdown, relation_rows
from pipelines.typed_rows import typed_heuristic_rows, typed_notes, typed_protocols
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
        raise FlagError(
            f"--budget-minutes {run.budget_minutes:g}: bounds --preset auto's search; preset {preset_name} "
            "trains its fixed configuration: drop --budget-minutes, or pass --preset auto"
        )


def check_objective(run: RunConfig, preset_name: str) -> None:
    """--objective recommend acts through --preset auto's training views: with another preset it would change
    nothing, so say so before any work."""
    if run.objective == "link-prediction":
        return
    if preset_name != SEARCH:
        raise FlagError(
            f"--objective {run.objective}: sets --preset auto's training negatives; preset {preset_name} "
            "has its own: add --preset auto, or drop --objective (--hard-neg-fraction sets them directly)"
        )
    if run.shards.hard_neg_fraction is not None:
        raise FlagError(
            f"--objective {run.objective}: sets the training negatives, which --hard-neg-fraction "
            f"{run.shards.hard_neg_fraction:g} fixes: pass one of the two"
        )


def heuristic_rows(run: RunConfig, dataset, protocol: str, scores: dict, reverse: dict | None = None) -> list[dict]:
    """CN / AA / RA (WCN / WAA / WRA on a weighted graph, EdgeBank and recent PA on a temporal split) on the test
    split as table rows (deterministic: std 0), from their scores; `reverse`: a directed run's scores of the reverse
    set, whose reverse accuracy joins each row as it joins the model's."""
    split = split_label(run, dataset) or None
    rows = []
    for name, (pos, neg) in scores.items():
        metrics = evaluate(protocol, pos, neg)
        percent = {m: (100.0 * metrics[m], 0.0) for m in METRICS if m in metrics}
        if reverse is not None:
            percent[REVERSE_KEY] = (100.0 * evaluate(REVERSE, *reverse[name])[REVERSE_KEY], 0.0)
        row = TableRow(
            dataset.name, protocol, heuristic_label(name), [0], percent, split=split, own_graph=bool(dataset.own)
        )
        rows.append(row.to_dict())
    return rows


def heuristic_names(dataset) -> list[str]:
    """The heuristics of the report: CN / AA / RA, their weighted twins when the graph has weights, and the
    time-aware baselines on a temporal split, the directed ones and the reverse-edge rule on a directed graph."""
    weighted = list(WEIGHTED) if dataset.weights is not None else []
    directed = list(DIRECTED) if dataset.directed else []
    return list(HEURISTICS) + weighted + (list(TEMPORAL) if dataset.temporal else []) + directed


def fixed_preset(run: RunConfig, dataset, preset_name: str, protocol: str, runs: dict[int, Path]) -> list[SeedResult]:
    """Every seed's record of one protocol under a fixed preset (with node features, also without them; with
    the user's pairs, also evaluated on them: pipelines.core.variants)."""
    preset_name = preset_for_protocol(preset_name, protocol)  # e.g. the paper's HeaRT config
    shards = preset_shard_set(
        run.source,
        run.shards,
        run.trainer.epochs,
        get_preset(preset_name),
        set_protocols(dataset, protocol),
        dataset,
        device_kind(run.trainer.device),
    )
    select_on = run.select_on_for(dataset.selection_metric(protocol))  # --metric picks each seed's best epoch
    seeds = {
        seed: seed_run(run.trainer, preset_name, shards, protocol, seed, d, select_on=select_on)
        for seed, d in runs.items()
    }
    summaries = train_seeds(run.trainer, seeds)
    no_features, no_features_summaries = train_without_features(run, seeds)
    return seed_results(run, dataset, protocol, preset_name, seeds, summaries, run.ships_features) + seed_results(
        run, dataset, protocol, preset_name, no_features, no_features_summaries, False
    )


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
        log.info(
            "seed %d, %s, %s: test %s (best epoch %s)",
            r["seed"],
            protocol_label(r),
            r["model"],
            shown or "–",
            r["best_epoch"],
        )
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
    dataset = load_dataset(run.source)
    protocols = typed_protocols(run, dataset) if dataset.typed else untyped_protocols(run, dataset)
    preset_name = pick_preset(run, dataset)
    check_objective(run, preset_name)
    check_budget(run, preset_name)
    out = results_dir(run.out, dataset.name, preset_name)
    try:
        check_trainer_flags(run.trainer, DEFAULT_PRESET if preset_name == SEARCH else preset_name, protocols, out)
    except SeedFlagsError as err:
        raise FlagError(str(err)) from None
    notes = run_notes(run, dataset, protocols) + (typed_notes(dataset) if dataset.typed else [])
    for line in notes:
        log.info("%s", line)
    results, rows, relations = [], [], []
    # --preset auto's report is final: its budget cuts would make a rerun's numbers another run's (core.finished)
    identity = finished.run_identity(run.to_dict(), dataset.fingerprint()) if preset_name == SEARCH else None
    with locked(out, "pipelines.run", "--out"):  # a second run on this dataset and preset waits for none: refused
        if identity and (report := finished.final_report(out, identity, run.trainer.overwrite)) is not None:
            finished.reuse_report(out, report)
            return 0
        for protocol in protocols:
            if dataset.typed:  # its own rows: heuristics on the same corruptions, a table per relation
                proto_results, beside_rows, relations = typed_protocol(run, dataset, preset_name, out)
                results, rows = results + proto_results, rows + beside_rows
                continue
            ranked = [protocol, PAIRS] if pairs_beside(dataset, protocol) and PAIRS not in protocols else [protocol]
            beside = [REVERSE] if REVERSE in dataset.splits["test"].neg and REVERSE not in ranked else []
            test_scores = split_scores(dataset, "test", ranked + beside, heuristic_names(dataset))  # once per run
            searched = {h: v for h, v in test_scores[protocol].items() if h in HEURISTICS}  # what the blend reads
            proto_results = run_protocol(run, dataset, preset_name, protocol, out, searched)
            results += proto_results
            rows += aggregate(proto_results)
            reverse = test_scores[REVERSE] if beside else None  # a directed run: each row's reverse accuracy
            rows += [r for p in ranked for r in heuristic_rows(run, dataset, p, test_scores[p], reverse)]
        notes = notes + seed_notes(run.seeds, results)  # the log said each when its seed was cut (core.seeds)
        table = markdown(rows, lead=run.metric)
        table += ("\n" + relation_markdown(relations)) if relations else ""
        table += ("\n" + "\n".join(f"- {line}" for line in notes) + "\n") if notes else ""
        payload = {"runs": results, "table": table_json(rows), "notes": notes}
        publish_results(out, {**payload, "relations": relations} if relations else payload, table)
        if identity:
            finished.mark_report(out, identity)
    second = "auc" if run.metric != "auc" else "mrr"  # the metric the user reads leads (--metric)
    shown = lambda r, m: fmt(*r[m]) if m in r else "–"
    for r in rows:
        if r["model"].startswith("PENCIL"):
            log.info(
                "%s/%s %s: test %s %s, %s %s over %d seed(s); results in %s",
                r["dataset"],
                protocol_label(r),
                r["model"],
                run.metric.upper(),
                shown(r, run.metric),
                second.upper(),
                shown(r, second),
                len(r["seeds"]),
                out,
            )
    return 0


def untyped_protocols(run: RunConfig, dataset) -> list[str]:
    """The protocols --protocol names (both: every one the dataset has), each one the dataset must have."""
    available = dataset.protocols
    protocols = available if run.protocol == "both" else [run.protocol]
    missing = [p for p in protocols if p not in available]
    if missing:
        raise FlagError(f"--protocol {','.join(missing)}: {dataset.name} has only {', '.join(available)}")
    return protocols


def typed_protocol(run: RunConfig, dataset, preset_name: str, out: Path) -> tuple[list[dict], list[dict], list[dict]]:
    """A typed graph's seeds (protocol kg; the search's without the blend), its rows beside them on the same
    corruptions (pipelines.typed_rows) and its per-relation rows (pipelines.typed_report)."""
    scores = typed_scores(dataset, "test")  # before training: a bad input fails before any work
    results = run_protocol(run, dataset, preset_name, KG, out, {})
    heuristics, per_relation = typed_heuristic_rows(dataset, scores, split_label(run, dataset) or None)
    return results, aggregate(results) + heuristics, relation_rows(results, per_relation, dataset.relations.names)


def temporal_negatives_note(info: dict) -> str:
    """What a temporal split's negatives are (common/datasets/temporal.py) and what its two time-aware rows are."""
    _, one, two = info.get("new_ends", {}).get("test", (0, 0, 0))
    total = info["pairs"]["test"]
    return (
        f"temporal negatives: matched in newness; {one + two} of {total} test pairs name a node with no edge "
        f"before the boundary ({one} one such node, {two} two), and the negatives hold as many of each, so a "
        "node's lack of history tells a link from a non-link no better than chance. EdgeBank: 1 for a pair seen "
        "before the boundary (none is: each pair counts once, at its first appearance, so it ties everywhere); "
        "recent PA: product of the two nodes' edge rows in a window before the boundary as long as the split"
    )


def run_notes(run: RunConfig, dataset, protocols: list[str]) -> list[str]:
    """What the log says before any work and the report says under its table: the split the numbers come from,
    what the user's pairs are evaluated as, what the weighted heuristics and the two PENCIL rows are."""
    notes = []
    info, shares = dataset.split_info or {}, "/".join(f"{v:g}" for v in (run.source.split or DEFAULT_SPLIT))
    if dataset.temporal:
        notes.append(
            f"split: temporal, by column '{info['column']}' ({shares}): train on the pairs first seen before "
            f"{info['valid_from']}, valid from {info['valid_from']}, test from {info['test_from']}; each "
            "split's pairs are scored, by PENCIL and the heuristics, on the graph before its boundary"
        )
        notes += [] if dataset.typed else [temporal_negatives_note(info)]  # a typed graph's: typed_notes
    elif split_label(run, dataset) == "random":
        notes.append(f"split: random ({shares}, seeded); a time column, if any, is not used")
    notes += held_out_note(run, dataset)
    if PAIRS in dataset.protocols:
        source = f"your pairs ({run.source.eval_pairs})"
        if PAIRS in protocols:
            notes.append(f"protocol pairs: PENCIL selected and tested on {source} instead of random negatives")
        beside = [p for p in protocols if p != PAIRS]
        if beside:
            notes.append(
                f"protocol pairs, selected on {', '.join(beside)}: the checkpoints of that protocol, "
                f"tested on {source} beside it"
            )
    if dataset.weights is not None:
        notes.append(
            "WCN / WAA / WRA: common neighbours, Adamic-Adar and resource allocation on the weight column "
            "(summed per pair); PENCIL reads the unweighted graph"
        )
    if run.ships_features:
        what = run.source.node_features or "the dataset's own, --features"
        notes.append(
            f"PENCIL reads the node features ({what}); PENCIL w/o features: the same seeds trained "
            "without them (trainer --no-features) on the same shard set"
        )
    return notes + scale_notes(dataset, protocols)


def held_out_note(run: RunConfig, dataset) -> list[str]:
    """The default split's caps on a large graph (DatasetSpec.held_out_max), named when they held."""
    caps, n = run.source.held_out_max, {s: len(split.pos) for s, split in dataset.splits.items()}
    if not caps or dataset.temporal or (n.get("valid"), n.get("test")) != caps:
        return []
    counts = " / ".join(f"{n[s]:,}" for s in ("train", "valid", "test"))
    most = f"at most {caps[0]:,} valid and {caps[1]:,} test edges (the default split's)"
    return [f"held out: {most}; train / valid / test: {counts}"]


def scale_notes(dataset, protocols: list[str]) -> list[str]:
    """The ranking a large graph's test gets under "original" (common.metrics.shared_rank_at), named."""
    test = dataset.splits.get("test")
    shared = {p: test.neg.get(p) for p in protocols} if test is not None else {}
    return [n for p, neg in shared.items() if neg is not None and neg.ndim == 2 and (n := ranking_note(p, len(neg)))]


if __name__ == "__main__":
    latch_sigint()
    exit_process(main)
