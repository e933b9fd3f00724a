"""A run's config resolved for where it runs, and for a resume.

resolve(): the values that depend on the shard set (N_max, mean tokens per link), the world size and the
device, filled once the trainer has opened the set. merge_for_resume(): a resumed run's config, the
checkpoint's except the fields a resume may change (trainer.config.RESUME_OVERRIDABLE). load_last() and
config_for_run() are what the trainer calls: the checkpoint to resume from, and the config it trains under.
"""

from __future__ import annotations

import logging
import math
from dataclasses import fields, replace
from pathlib import Path

from common.manifest_record import Manifest
from trainer import checkpoint, run_folder
from trainer.config import RESUME_OVERRIDABLE, TrainConfig
from trainer.config_sections import CPU_MICRO_LINKS, GPU_MICRO_TOKENS, ConfigError, check

log = logging.getLogger("trainer")


def micro_batch_links(per_rank: int, tokens_per_link: float, target_tokens: int) -> int:
    """Links per micro-batch for about `target_tokens` tokens each: the rank's share of the effective batch
    split into the fewest equal micro-batches under the target, so accumulation x micro-batch meets the
    effective batch (exactly when it divides, else by less than one link per micro-step)."""
    cap = max(1, int(target_tokens // max(tokens_per_link, 1.0)))
    accum = math.ceil(per_rank / cap)
    return math.ceil(per_rank / accum)


def resolve(
    config: TrainConfig, n_max: int, world_size: int, device_type: str = "cpu", tokens_per_link: float | None = None
) -> TrainConfig:
    """Fill the values that depend on the shard set (N_max, mean tokens per link), the world size and the device.

    Default micro-batch (no --micro-batch): on a GPU, sized to the device: about --micro-tokens tokens
    (default GPU_MICRO_TOKENS), with the effective batch split into equal micro-batches; fewer, larger
    micro-steps keep the GPU busy where small ones leave it waiting on the host (a PENCIL layer is a few
    hundred operator calls per micro-step whatever its size: python -m bench.overhead). On CPU: the
    effective batch split over ranks, at most CPU_MICRO_LINKS links. Accumulation makes up the rest either
    way; the gradient is the same mean.
    Default token budget: twice the tokens of a micro-batch of average links (capped at max_samples x
    (N_max + 2), which every micro-batch fits), so the sample cap decides in practice and the effective
    batch is exact, while the loader's memory plan (trainer/data/loader_budget.py) is sized by a bound a batch
    can reach, not by N_max: citeseer (2,20)'s 256 x 844 tokens would ask for 550 MB per batch in flight
    where 256 average links hold 7,700 tokens. Without the shard set's mean (tokens_per_link None), the cap.
    A smaller --token-budget bounds memory instead.
    """
    data = config.data
    k = config.model.lrp or 1  # LRP-k: every link is fed k times, so it costs k x (N_b + 2) tokens
    per_rank = max(1, config.optim.effective_batch // world_size)
    target = data.micro_tokens if data.micro_tokens is not None else (GPU_MICRO_TOKENS if device_type == "cuda" else 0)
    sized = bool(target and tokens_per_link and not data.max_samples)
    if data.max_samples:
        max_samples = data.max_samples
    elif sized:
        max_samples = micro_batch_links(per_rank, k * tokens_per_link, target)
    else:
        max_samples = min(CPU_MICRO_LINKS, per_rank)
    one = k * (n_max + 2)
    cap = max_samples * one
    typical = math.ceil(2 * max_samples * k * tokens_per_link) if tokens_per_link else cap
    budget = data.token_budget or max(one, min(cap, typical))
    what = (
        f"one link of up to {k} x (N_max + 2) = {one} tokens"
        if k > 1
        else f"one sample of up to N_max + 2 = {one} tokens"
    )
    check(budget >= one, "--token-budget", f"{budget} cannot hold {what}")
    eval_budget = data.eval_token_budget or 4 * budget
    check(eval_budget >= one, "--eval-token-budget", f"{eval_budget} cannot hold {what}")
    data = replace(
        data,
        max_samples=max_samples,
        token_budget=budget,
        eval_token_budget=eval_budget,
        orderings=k,
        micro_tokens=target if sized else 0,  # what sized this run's micro-batches (0: not a target)
        distances=bool(config.model.distances),
    )
    return replace(config, data=data)


# DataConfig fields resolve() sets from the model's flags (--lrp, --distance-features), never from their own
DERIVED_DATA = ("orderings", "distances")


def merge_for_resume(saved: dict, current: TrainConfig) -> tuple[TrainConfig, list[str]]:
    """The config of a resumed run: the checkpoint's, except RESUME_OVERRIDABLE fields from the command
    line. Returns the merged config and the names of ignored differences (so the caller can warn)."""
    saved_cfg = TrainConfig.from_dict(saved)
    cur = current.to_dict()
    ignored = []
    for f in fields(TrainConfig):
        if f.name in RESUME_OVERRIDABLE:
            continue
        a, b = saved[f.name], cur[f.name]
        if isinstance(a, dict):
            # Component fields left None on the command line were resolved when the run started; those resolve()
            # derives from other fields (DERIVED_DATA) are compared through their sources.
            derived = DERIVED_DATA if f.name == "data" else ()
            ignored += [f"{f.name}.{k}" for k in a if k not in derived and b.get(k) is not None and b[k] != a[k]]
        elif a != b:
            ignored.append(f.name)
    overrides = {k: getattr(current, k) for k in RESUME_OVERRIDABLE}
    return replace(saved_cfg, **overrides), ignored


def load_last(config: TrainConfig) -> dict | None:
    """OUT/last.pt when --resume asks for it (None: a fresh run)."""
    path = Path(config.out) / checkpoint.LAST
    if not config.resume:
        return None
    if not path.exists():
        log.warning("--resume: no checkpoint at %s; starting a fresh run", path)
        return None
    ckpt = checkpoint.load(path, fix="restore it from a copy, or pass --overwrite instead of --resume to start afresh")
    log.info(
        "resuming from %s: step %d, epoch %d, batch %d",
        path,
        ckpt["state"]["step"],
        ckpt["state"]["epoch"],
        ckpt["state"]["batch"],
    )
    return ckpt


def config_for_run(
    config: TrainConfig, ckpt: dict | None, manifest: Manifest, view_stats: tuple, world_size: int, device_type: str
) -> TrainConfig:
    """The config the run trains under: resolved for the set and world, or the checkpoint's on a resume
    (a flag that would change its trajectory is an error naming it)."""
    if ckpt is None:
        links, tokens = view_stats
        config = replace(config, data=replace(config.data, **run_folder.bound_data(manifest)))
        return resolve(config, manifest.n_max, world_size, device_type, tokens / max(links, 1))
    run_folder.check_same_data(ckpt["config"]["data"], manifest, config.data.shards, config.out)
    merged, ignored = merge_for_resume(ckpt["config"], config)
    # the same data, perhaps at another path (a copied set): read it where it is now, recorded as bound
    merged = replace(merged, data=replace(merged.data, shards=config.data.shards, **run_folder.bound_data(manifest)))
    ignored = [name for name in ignored if name != "data.shards"]
    if ignored:  # resuming under other flags would continue, or retrain, the run under another schedule
        saved = ckpt["config"]
        shown = ", ".join(
            f"{name} {_field(saved, name)!r} (asked: {_field(config.to_dict(), name)!r})" for name in ignored[:3]
        )
        raise ConfigError(
            f"--resume: {config.out} was trained with {shown}{' ...' if len(ignored) > 3 else ''}; "
            f"resume with the flags it was trained with (--preset {saved['preset']}), or pass "
            "--overwrite to train afresh (or choose another --out)"
        )
    if ckpt["world_size"] != world_size:
        log.warning(
            "--resume: world size %d differs from the checkpoint's %d; the data order after "
            "the resume point differs from the uninterrupted run's",
            world_size,
            ckpt["world_size"],
        )
    return merged


def _field(config: dict, name: str):
    """A config field by its dotted name ("optim.lr")."""
    for part in name.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return config
