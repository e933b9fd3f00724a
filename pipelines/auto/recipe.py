"""`--preset auto`, the whole recipe for one protocol: shard sets, the search, the final seeds, the blend, and
the records they leave.

    pencil run --dataset edges.csv --seeds 0,1,2 [--budget-minutes 30] [--objective recommend]

The search and the blend's decision get the dataset without its test split (LinkDataset.without_test);
test is read only to report the final seeds and to apply the chosen blend. Everything lands in
OUT/<protocol>/: search.json (the record), chosen.json, search/ (the candidates' runs) and seed<k>/.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from common.atomic import write_json_atomic
from common.datasets.pool import POOL_PROTOCOL, attach_valid_pool, can_pool
from common.eval_scores import read_scores, scores_path
from common.graph_stats import graph_stats
from common.heuristics import split_scores
from common.heuristics_typed import prior_names, typed_scores
from common.manifest import epoch_tokens, read_manifest
from common.manifest_record import Manifest
from common.presets import get_preset
from pipelines.auto import blend
from pipelines.auto.config import DEFAULT_PRESET, PEER_COLUMNS, SearchConfig, candidates
from pipelines.auto.final import evaluate_partner, final_runs, train_final_seeds
from pipelines.auto.records import Choice, SearchPlan
from pipelines.auto.search import AutoError, Search
from pipelines.auto.signal import per_positive
from pipelines.core.config import TrainerOptions
from pipelines.core.results import SeedResult
from pipelines.core.run_config import SEARCH, RunConfig
from pipelines.core.shard_sets import (
    build_shard_set,
    job_dataset,
    preprocess_config,
    preset_views,
    set_protocols,
    shutdown_embedded_ray,
    view_percent,
)
from pipelines.core.trainers import TrainerRun, device_kind, trainer_slots
from pipelines.core.variants import seed_results, train_without_features
from trainer.evaluate import eval_entry
from trainer.run_summary import RunSummary

log = logging.getLogger("pipelines.auto")
# --objective recommend: checkpoints that re-rank a retriever's pool of 2-hop candidates train on views whose
# negatives are half 2-hop non-edges (preprocess --hard-neg-fraction)
RECOMMEND_HARD_NEG_FRACTION = 0.5


def search_config(run: RunConfig) -> SearchConfig:
    cfg = SearchConfig()
    if run.budget_minutes:
        cfg = SearchConfig(**{**cfg.to_dict(), "budget_minutes": run.budget_minutes})
    return cfg


def run_epochs(run: RunConfig, cfg: SearchConfig, view_positives: int, neg_ratio: int = 1) -> int:
    """--epochs, else enough epochs for the config's optimiser steps at one negative per positive (the default's:
    Candidate.steps_per_epoch), on the same training links at `neg_ratio` (SearchConfig.link_epochs)."""
    if run.trainer.epochs:
        return max(2, math.ceil(run.trainer.epochs))
    return cfg.link_epochs(cfg.epochs(candidates()[0].steps_per_epoch(view_positives)), neg_ratio)


def negatives_per_positive(run: RunConfig, cfg: SearchConfig, graph, view_positives: int) -> int:
    """SearchConfig.neg_ratio, or as many as the training graph has distinct non-edges for (at least 1); 1 where
    the views draw 2-hop negatives (the recommend objective, --hard-neg-fraction): the ratio was measured on
    uniform ones."""
    from preprocess.candidates import distinct_non_edges

    if training_negatives(run):
        return 1
    return max(1, min(cfg.neg_ratio, distinct_non_edges(graph) // max(1, view_positives)))


def joins_two_kinds(dataset) -> bool:
    """A typed graph with node kinds whose training triples join one kind to another under some relation (a
    user-item file's users and items): where the search also offers the degree input (config.candidates)."""
    rel = dataset.relations
    if rel is None or rel.kinds is None:
        return False
    t = rel.triples("train", dataset.splits["train"].pos)
    return bool((rel.kinds.of[t[:, 0]] != rel.kinds.of[t[:, 2]]).any())


def mostly_new_heads(dataset) -> bool:
    """Do most validation pairs have a head with no training link (a temporal split's new users)? Where the search's
    `degree` candidate also trains on cold heads (config.candidates)."""
    pos = dataset.splits["valid"].pos
    if not len(pos):
        return False
    known = np.bincount(dataset.splits["train"].pos[:, 0], minlength=dataset.num_nodes)
    return bool((known[pos[:, 0]] == 0).mean() > 0.5)


def heads_have_attributes(dataset) -> bool:
    """Does the node-feature table give validation's heads attributes (a user table), in at most PEER_COLUMNS
    columns? Where the search's `time` candidate also reads the lift among each head's peers (config.candidates):
    each column makes a group of every node, and the peer tables hold an edge once per group of its end."""
    pos = dataset.splits["valid"].pos
    if dataset.x is None or not len(pos):
        return False
    used = np.any(dataset.x[np.unique(pos[:, 0])] != 0, axis=0).sum()
    return 0 < used <= PEER_COLUMNS


def candidate_tokens(run: RunConfig, manifests: dict, device: str, cands: list | None = None) -> dict | None:
    """{cid: tokens of an epoch} of each candidate's shard set (`cands`, None: candidates()), from which an
    alternative's schedule follows on a CPU (SearchConfig.candidate_epochs); None when --epochs fixes every run's,
    or on a GPU, where the longer sequences cost far less than their tokens (fused attention)."""
    if run.trainer.epochs or device != "cpu":
        return None
    return {c.cid: epoch_tokens(manifests[c.sampling]) for c in cands or candidates()}


def capped_epochs(cfg: SearchConfig, epochs: int, tokens: dict | None) -> int:
    """The default's schedule cut to the config's token budget (SearchConfig.capped_epochs), logged; as it was
    without token counts (--epochs, a GPU)."""
    default_tokens = (tokens or {}).get(candidates()[0].cid, 0)
    capped = cfg.capped_epochs(epochs, default_tokens)
    if capped < epochs:
        log.info(
            "search: the default's epoch trains %s tokens: %d epochs instead of %d, at most %s tokens a run",
            f"{default_tokens:,}",
            capped,
            epochs,
            f"{cfg.max_run_tokens:,.0f}",
        )
    return capped


def training_negatives(run: RunConfig) -> float:
    if run.shards.hard_neg_fraction is not None:
        return run.shards.hard_neg_fraction
    return RECOMMEND_HARD_NEG_FRACTION if run.objective == "recommend" else 0.0


def with_valid_pool(run: RunConfig, dataset, protocol: str, per_negative: int) -> tuple[RunConfig, object]:
    """The run and dataset with validation's selection pool for the blend (SearchConfig.valid_pool), where the
    protocol's validation negatives are shared random ones; else both unchanged. The shard sets' configs carry
    it (DatasetSpec.valid_pool), so the sets and every reload of their dataset hold the same pool."""
    if not per_negative or protocol != POOL_PROTOCOL or not can_pool(dataset):
        return run, dataset
    pooled = attach_valid_pool(dataset, per_negative, seed=0)  # the split's seed: a recipe's spec has seed 0
    info = pooled.valid_pool
    if info is None:  # no non-edge left to pool
        return run, dataset
    log.info(
        "blend: validation's %d negatives and a pool of %d more, ranks estimated at test's %d negatives",
        info["negatives"],
        info["pool"],
        info["rank_at"],
    )
    return replace(run, source=replace(run.source, valid_pool=per_negative)), pooled


def shard_sets(run: RunConfig, dataset, protocol: str, epochs: int, percent: float, neg_ratio: int = 1) -> dict:
    """One shard set per candidate sampling, with views for the run's epochs, `neg_ratio` negatives per positive."""
    views = preset_views(run.shards, run.trainer.epochs or epochs)
    out = {}
    try:
        for sampling in dict.fromkeys(c.sampling for c in candidates()):
            protocols = set_protocols(dataset, protocol)
            cfg = preprocess_config(
                run.source, run.shards, sampling, views, percent, protocols, (training_negatives(run), neg_ratio)
            )
            out[sampling] = build_shard_set(cfg, job_dataset(cfg, dataset), keep_ray=True)
    finally:
        shutdown_embedded_ray()  # free the embedded Ray's CPUs before training
    return out


@dataclass(frozen=True)
class StageData:
    """One protocol's data for the blend stage: the dataset, its test-less view `selection_view` (what selection sees),
    the chosen shard set's manifest, the protocol, and the test split's heuristic scores `test_scores`
    (common.heuristics.split_scores)."""

    dataset: object
    selection_view: object
    manifest: Manifest
    protocol: str
    test_scores: dict


def blend_stage(
    opts: TrainerOptions, choice: Choice, runs: dict[int, Path], data: StageData, margin_se: float, out: Path
) -> tuple[blend.Blend, dict]:
    """The blend's decision on the final seeds' validation (the test-less dataset) and the search run of the
    choice's partner, then each seed's test metrics under it (the partner evaluated on test in OUT/runner-up
    first, when the blend adds it). A typed graph's prior is scored here, on test only after the decision."""
    selection_view, dataset, manifest, protocol = data.selection_view, data.dataset, data.manifest, data.protocol
    names = prior_names(selection_view) if dataset.typed else blend.HEURISTICS
    logits = blend.valid_logits(runs, protocol)
    heuristics = blend.by_cid(
        selection_view, manifest, "valid", protocol, prior_scores(selection_view, "valid", protocol, names)
    )
    values_of = lambda cid, s: per_positive(manifest, "valid", protocol, cid, blend.ranked(manifest, s), pool=True)
    partner, partner_test = None, None
    every = lambda split: np.arange(eval_entry(manifest, split, protocol)["candidates"])
    try:
        if choice.partner is not None:
            valid = partner_scores(Path(choice.partner_dir), "valid", protocol, every("valid"))
            partner = (choice.partner.cid, valid)
        decision = blend.decide(logits, heuristics, values_of, choice.metric, margin_se, partner, names)
        if decision.partner_weight:
            evaluated = evaluate_partner(opts, choice, protocol, out / "runner-up")
            if evaluated is None:
                raise blend.BlendError(f"{choice.partner.cid}: its evaluation on test failed")
            partner_test = partner_scores(evaluated, "test", protocol, every("test"))
    except blend.BlendError as err:  # the runner-up is an extra: the run goes on without it
        log.warning("blend: %s; decided without the runner-up", err)
        decision = blend.decide(logits, heuristics, values_of, choice.metric, margin_se, names=names)
    test_scores = (
        prior_scores(dataset, "test", protocol, names) if dataset.typed else data.test_scores
    )  # after the decision
    test = blend.by_cid(dataset, manifest, "test", protocol, test_scores)
    return decision, {
        seed: blend.apply(d, decision, test, manifest, protocol, partner_test) for seed, d in runs.items()
    }


def prior_scores(dataset, split: str, protocol: str, names: tuple[str, ...]) -> dict:
    """{h: (positives', negatives' scores)} of `split` for the blend: a typed graph's on its corruptions
    (common.heuristics_typed), else `protocol`'s (common.heuristics.split_scores)."""
    if dataset.typed:
        return typed_scores(dataset, split, names)
    return split_scores(dataset, split, [protocol], list(names))[protocol]


def partner_scores(run_dir: Path, split: str, protocol: str, needed: np.ndarray) -> np.ndarray:
    """The partner's saved scores of `split` by cid; every pair in `needed` (the recipe: every candidate of the
    eval set, all of which the final seeds score) must have one."""
    cid, score, _ = read_scores(scores_path(run_dir, split, protocol))
    table = blend.partner_table(cid, score.astype(np.float64))
    if needed.max(initial=-1) >= len(table) or np.isnan(table[needed]).any():
        raise blend.BlendError(
            f"{run_dir}: its {split}/{protocol} scores miss pairs the final seeds scored; rerun the recipe"
        )
    return table


def search_and_train(
    run: RunConfig, dataset, protocol: str, out: Path, runs: dict[int, Path], test_scores: dict
) -> list[SeedResult]:
    """Every seed's record of one protocol: the model's, then the blend's (seed<k>/blend/result.json, so
    `pencil report` over the folder shows it too). `test_scores`: {h: (pos, neg)} of the test split."""
    t0 = time.time()
    cfg, device = search_config(run), device_kind(run.trainer.device)
    run, dataset = with_valid_pool(run, dataset, protocol, cfg.valid_pool)
    deadline = t0 + 60.0 * cfg.budget_minutes
    selection_view = dataset.without_test()  # what selection sees
    record = {
        "config": cfg.to_dict(),
        "device": device,
        "stats": graph_stats(selection_view.graph),
        "objective": run.objective,
        "hard_neg_fraction": training_negatives(run),
    }
    log.info(
        "graph: %d nodes, %d training edges, degree mean %.1f / median %.0f / p90 %.0f",
        record["stats"]["nodes"],
        record["stats"]["edges"],
        record["stats"]["mean_degree"],
        record["stats"]["median_degree"],
        record["stats"]["p90_degree"],
    )
    two_kinds = joins_two_kinds(selection_view)
    new_heads = two_kinds and mostly_new_heads(selection_view)
    timed = new_heads and selection_view.edge_times is not None
    peers = timed and heads_have_attributes(selection_view)
    if new_heads:
        log.info(
            "search: most validation pairs' heads are new: `%s` trains half its links as cold heads%s%s",
            "peers" if peers else "time" if timed else "degree",
            ", reading each node's recent activity (the split is temporal)" if timed else "",
            " and its lift among the nodes sharing the head's attributes" if peers else "",
        )
    cands = candidates(two_kinds, new_heads, timed, peers)
    record["candidates"] = [c.cid for c in cands]
    log.info("search: candidates %s", ", ".join(record["candidates"]))
    train = len(selection_view.splits["train"].pos)
    percent = view_percent(get_preset(DEFAULT_PRESET), train, device, selection_view.graph)
    view_positives = round(train * percent / 100)
    neg_ratio = negatives_per_positive(run, cfg, selection_view.graph, view_positives)
    epochs = run_epochs(run, cfg, view_positives, neg_ratio)
    shards = shard_sets(run, dataset, protocol, epochs, percent, neg_ratio)
    manifests = {s: read_manifest(loc) for s, loc in shards.items()}
    tokens = candidate_tokens(run, manifests, device, cands)
    epochs = capped_epochs(cfg, epochs, tokens)
    record.update(epochs=epochs, neg_ratio=neg_ratio)
    slots = trainer_slots(run.trainer.device, run.trainer.parallel)
    # the search's share of the budget: half, a third with node features (the final seeds train twice then)
    plan = SearchPlan(
        epochs,
        cands,
        shards,
        manifests,
        protocol,
        metric=run.metric,
        view_positives=view_positives,
        neg_ratio=neg_ratio,
        tokens=tokens,
    )
    stop_at = t0 + (deadline - t0) / (3 if run.ships_features else 2)
    search = Search(cfg, plan, out / "search", run.trainer, slots, stop_at=stop_at)
    record["candidate_epochs"] = search.run_epochs
    choice = search.run(len(selection_view.splits["valid"].pos))
    record.update(chosen=choice.to_dict(), search_seconds=round(time.time() - t0, 1))
    write_json_atomic(out / "search.json", record)
    write_json_atomic(out / "chosen.json", {k: record["chosen"][k] for k in ("cid", "config", "epochs", "shards")})
    summaries = train_final_seeds(run.trainer, choice, protocol, runs, stop_at=deadline)
    if not summaries:
        raise AutoError(
            f"{out}: the budget stopped every final seed before its first evaluation; raise "
            "--budget-minutes (a rerun reuses the search and resumes the seeds)"
        )
    left_out = sorted(set(runs) - set(summaries))  # stopped or failed before their first evaluation: logged
    runs = {seed: d for seed, d in runs.items() if seed in summaries}
    finals = final_runs(run.trainer, choice, protocol, runs)
    no_features = train_without_features(run, finals, stop_at=deadline, partial=True)  # in the budget, before the blend
    manifest = manifests[choice.candidate.sampling]
    data = StageData(dataset, selection_view, manifest, protocol, test_scores)
    decision, blended = blend_stage(run.trainer, choice, runs, data, cfg.blend_margin_se, out)
    stopped = sorted(seed for seed, s in summaries.items() if s.stopped)
    failed = {seed: s.failed for seed, s in sorted(summaries.items()) if s.failed}
    record.update(
        blend=decision.to_dict(),
        total_seconds=round(time.time() - t0, 1),
        budget_cut=bool(choice.cut_short or stopped or left_out),
        final_seeds={
            "reported": sorted(summaries),
            "stopped_by_budget": stopped,
            "failed": failed,
            "left_out": left_out,
        },
    )
    write_json_atomic(out / "search.json", record)
    log.info(
        "auto: %s for %d epochs, blend %s; %.0f s of the %.0f-minute budget",
        choice.cid,
        choice.epochs,
        decision.key,
        record["total_seconds"],
        cfg.budget_minutes,
    )
    return records(run, dataset, protocol, finals, summaries, choice, decision, blended, no_features)


def records(
    run: RunConfig,
    dataset,
    protocol: str,
    finals: dict[int, TrainerRun],
    summaries: dict[int, RunSummary],
    choice: Choice,
    decision: blend.Blend,
    blended: dict[int, dict],
    no_features: tuple[dict, dict] = ({}, {}),
) -> list[SeedResult]:
    """The model's record per seed, with the searched config and the blend, then the blend's row per seed
    (the model alone keeps its own row), then the seeds' rows without node features and on the user's pairs
    (pipelines.core.variants; the blend is the featured model's alone)."""
    auto = {"cid": choice.cid, "config": choice.candidate.to_dict(), "epochs": choice.epochs}
    auto["blend"] = {
        "heuristic": decision.heuristic,
        "weight": decision.weight,
        "partner": decision.partner if decision.partner_weight else "",
        "partner_weight": decision.partner_weight,
        "metric": decision.metric,
    }
    model = seed_results(run, dataset, protocol, SEARCH, finals, summaries, run.ships_features, auto=auto)
    rows = [
        SeedResult(
            result.path.parent / "blend" / "result.json",
            {**r, "model": decision.row_name(r["model"]), "test": blended[r["seed"]], "blend_of": r["model"]},
        )
        for result in model
        if (r := result.record)["protocol"] == protocol
    ]
    without = {k: v for k, v in auto.items() if k != "blend"}  # the blend is the featured model's
    return model + rows + seed_results(run, dataset, protocol, SEARCH, *no_features, False, auto=without)
