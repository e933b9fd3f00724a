"""`--preset auto`, the whole recipe for one protocol: shard sets, the search, the final seeds, the blend.

    pencil run --dataset edges.csv --seeds 0,1,2 [--budget-minutes 30] [--objective recommend]

The search and the blend's decision get the dataset without its test split (LinkDataset.without_test);
test is read only to report the final seeds and to apply the chosen blend. Everything lands in
OUT/<protocol>/: search.json (the record), chosen.json, search/ (the candidates' runs) and seed<k>/.
"""
from __future__ import annotations

import logging
import math
import time
from pathlib import Path

from common.atomic import write_json_atomic
from common.graph_stats import graph_stats
from common.manifest import read_manifest
from common.presets import get_preset
from pipelines.auto import blend
from pipelines.auto.config import DEFAULT_PRESET, SearchConfig, candidates
from pipelines.auto.final import train_final_seeds
from pipelines.auto.search import Search
from pipelines.auto.signal import per_positive
from pipelines.core.shard_sets import (build_shard_set, preprocess_config, preset_views, shutdown_embedded_ray,
                                       view_percent)
from pipelines.core.trainers import device_kind, trainer_slots

log = logging.getLogger("pipelines.auto")
# --objective recommend: checkpoints that re-rank a retriever's pool of 2-hop candidates train on views whose
# negatives are half 2-hop non-edges (preprocess --hard-neg-fraction)
RECOMMEND_HARD_NEG_FRACTION = 0.5


def search_config(args) -> SearchConfig:
    cfg = SearchConfig()
    if args.budget_minutes:
        cfg = SearchConfig(**{**cfg.to_dict(), "budget_minutes": args.budget_minutes})
    return cfg


def run_epochs(args, cfg: SearchConfig, view_positives: int) -> int:
    """--epochs, else enough epochs for the config's optimiser steps (a view: its positives and as many
    negatives, in steps of the default's effective batch)."""
    if args.epochs:
        return max(2, math.ceil(args.epochs))
    return cfg.epochs(math.ceil(2 * view_positives / get_preset(DEFAULT_PRESET).effective_batch))


def training_negatives(args) -> float:
    if args.hard_neg_fraction is not None:
        return args.hard_neg_fraction
    return RECOMMEND_HARD_NEG_FRACTION if args.objective == "recommend" else 0.0


def shard_sets(args, dataset, protocol: str, epochs: int, percent: float) -> dict:
    """One shard set per candidate sampling, with the `general` preset's views for the run's epochs."""
    preset = get_preset(DEFAULT_PRESET, epochs=epochs)
    fraction = training_negatives(args)
    out = {}
    for sampling in dict.fromkeys(c.sampling for c in candidates()):
        cfg_ = preprocess_config(args, sampling, preset_views(args, preset), percent, [protocol], fraction)
        out[sampling] = build_shard_set(cfg_, dataset, keep_ray=True)
    shutdown_embedded_ray()  # free the embedded Ray's CPUs before training
    return out


def blend_stage(runs: dict[int, Path], blind, dataset, manifest: dict, protocol: str, metric: str,
                margin_se: float) -> tuple[dict, dict]:
    """The blend's decision on the final seeds' validation (the test-less dataset), then its test metrics."""
    values_of = lambda cid, s: per_positive(manifest, "valid", protocol, cid, s)[metric]  # noqa: E731
    decision = blend.decide(blend.valid_logits(runs, protocol), blend.eval_heuristics(blind, manifest, "valid", protocol),
                            values_of, metric, margin_se)
    test_heuristics = blend.eval_heuristics(dataset, manifest, "test", protocol)  # test, after the decision
    return decision, {"choice": decision,
                      "test": {s: blend.apply(d, decision, test_heuristics, manifest, protocol) for s, d in runs.items()}}


def search_and_train(args, dataset, protocol: str, out: Path, runs: dict[int, Path]) -> tuple[dict, dict, dict]:
    """({seed: summary}, the choice, the blend {"choice": ..., "test": {seed: metrics}}) of one protocol."""
    t0 = time.time()
    cfg, device = search_config(args), device_kind(args.device)
    deadline = t0 + 60.0 * cfg.budget_minutes
    blind = dataset.without_test()  # what selection sees
    record = {"config": cfg.to_dict(), "device": device, "stats": graph_stats(blind.graph),
              "objective": args.objective, "hard_neg_fraction": training_negatives(args)}
    log.info("graph: %d nodes, %d training edges, degree mean %.1f / median %.0f / p90 %.0f", record["stats"]["nodes"],
             record["stats"]["edges"], record["stats"]["mean_degree"], record["stats"]["median_degree"],
             record["stats"]["p90_degree"])
    train = len(blind.splits["train"].pos)
    percent = view_percent(get_preset(DEFAULT_PRESET), train, device, blind.graph)
    epochs = run_epochs(args, cfg, round(train * percent / 100))
    record["epochs"] = epochs
    shards = shard_sets(args, dataset, protocol, epochs, percent)
    manifests = {s: read_manifest(loc) for s, loc in shards.items()}
    slots = trainer_slots(args.device, args.parallel_seeds)
    search = Search(cfg, epochs, candidates(), shards, protocol, manifests, out / "search", args, slots,
                    stop_at=t0 + (deadline - t0) / 2)
    chosen = search.run(len(blind.splits["valid"].pos))
    record.update(chosen=chosen, search_seconds=round(time.time() - t0, 1))
    write_json_atomic(out / "search.json", record)
    write_json_atomic(out / "chosen.json", {k: chosen[k] for k in ("cid", "config", "epochs", "shards")})
    summaries = train_final_seeds(args, chosen, protocol, runs, epochs, stop_at=deadline)
    manifest = manifests[tuple(chosen["config"]["sampling"])]
    decision, blended = blend_stage(runs, blind, dataset, manifest, protocol, chosen["metric"], cfg.margin_se)
    record.update(blend=decision, total_seconds=round(time.time() - t0, 1),
                  budget_cut=bool(chosen["cut_short"]))
    write_json_atomic(out / "search.json", record)
    log.info("auto: %s for %d epochs, blend %s; %.0f s of the %.0f-minute budget", chosen["cid"], chosen["epochs"],
             blend.key(decision["heuristic"], decision["weight"]), record["total_seconds"], cfg.budget_minutes)
    return summaries, chosen, blended
