"""The one shard-set builder of every recipe: the preprocess config of a set, and the job that builds it (or
finds it cached) on an embedded Ray or the cluster of RAY_ADDRESS.

The dataset's spec (common.datasets.DatasetSpec) reaches both the recipe's loaded dataset and
`preprocess_config` unchanged, so the shards hold the graph the recipe loaded.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import replace

from common.datasets import DatasetSpec
from pipelines.core.config import ShardOptions

log = logging.getLogger("pipelines")


def preprocess_config(
    source: DatasetSpec,
    opts: ShardOptions,
    sampling: tuple[int, int],
    views: int,
    percent: float,
    protocols: list[str],
    negatives: tuple[float | None, int] = (None, 1),
):
    """One set's job. The training negatives, `negatives` = (hard_neg_fraction, neg_ratio): `neg_ratio` per
    positive, of which `hard_neg_fraction` when given, else the options' (None: 0), are 2-hop non-edges."""
    hard_neg_fraction, neg_ratio = negatives
    from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig

    fraction = (opts.hard_neg_fraction or 0.0) if hard_neg_fraction is None else hard_neg_fraction
    return PreprocessConfig(
        sampling=SamplingConfig(*sampling),
        candidates=CandidateConfig(
            views=views, percent=percent, neg_ratio=neg_ratio, protocols=tuple(protocols), hard_neg_fraction=fraction
        ),
        out=opts.root,
        num_cpus=opts.num_cpus,
        data=replace(source, features=opts.features),
    )


def preset_views(opts: ShardOptions, epochs: float) -> int:
    """Training views of a shard set for `epochs`: --views, else one per epoch, at most 20."""
    return opts.views or max(1, min(20, int(round(epochs))))


def view_percent(preset, train_positives: int, device: str, graph=None) -> float:
    """% of the training positives in each view: the preset's, capped on CPU by its cpu_view_positives, and on a
    graph too dense for one distinct non-edge per positive (`graph`: the training graph) by its non-edges."""
    cap = preset.cpu_view_positives if device == "cpu" else None
    percent = preset.train_percent
    if cap and train_positives > cap:
        percent = min(percent, round(100.0 * cap / train_positives, 3))
    if graph is not None:
        from preprocess.candidates import distinct_non_edges, max_percent

        dense = max_percent(distinct_non_edges(graph), train_positives)
        if 0 < dense < percent:
            log.info(
                "the training graph has %s non-edges for %s training positives: each view takes %g%% of them, "
                "one distinct negative each",
                f"{distinct_non_edges(graph):,}",
                f"{train_positives:,}",
                dense,
            )
            percent = dense
    return percent


def preset_shard_set(
    source: DatasetSpec, opts: ShardOptions, epochs: float | None, preset, protocols: list[str], dataset, device: str
) -> str:
    """Build or reuse a preset's shard set (its sampling, views and training percent) for the loaded dataset;
    `epochs`: the run's, None for the preset's."""
    percent = view_percent(preset, len(dataset.splits["train"].pos), device, dataset.graph)
    cfg = preprocess_config(
        source, opts, preset.sampling, preset_views(opts, epochs or preset.epochs), percent, protocols
    )
    return build_shard_set(cfg, job_dataset(cfg, dataset))


def job_dataset(cfg, dataset):
    """The loaded dataset for the job of `cfg`, unless the set ships node features the recipe loaded without
    (a paper dataset's --features): the job then loads it with them itself."""
    return None if cfg.ships_features and dataset.x is None else dataset


def set_protocols(dataset, protocol: str) -> list[str]:
    """The protocols a set of `protocol` evaluates: `protocol`, and the user's pairs beside it when the dataset
    has them (--eval-pairs), so the same checkpoints are also evaluated on them (trainer --eval-weights)."""
    return [protocol, "pairs"] if "pairs" in dataset.protocols and protocol != "pairs" else [protocol]


def build_shard_set(cfg, dataset=None, keep_ray: bool = False) -> str:
    """Build or reuse the set of `cfg` (a complete cache returns at once); its location, a URL staying a URL.
    `dataset`: the loaded dataset, when the caller holds it (else the job loads it from cfg). `keep_ray`:
    more sets follow, so the embedded Ray stays up (the caller shuts it down before training): one Ray start
    for all of them instead of one each (about 4 s each on 2 cores)."""
    from preprocess.job import run_job

    result = run_job(cfg, dataset, keep_ray=keep_ray)
    if not keep_ray:
        shutdown_embedded_ray()
    location = result.location or str(result.path)
    log.info("shards %s: %s", "reused" if result.cached else "written", location)
    return location


def shutdown_embedded_ray() -> None:
    # Free the embedded Ray's CPUs before training in this process. A cache hit never imports Ray, so a
    # node without it (a trainer image) can run the recipes on prebuilt shards.
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
