"""Trainer configuration: per-component dataclasses whose fields declare their own flags, the CLI generated
from them, and the JSON round trip.

A run is described by a preset (common.presets: model shape, optimiser, epochs, protocol) plus overrides:
a field whose flag says `preset=` takes the preset's value unless given. Values that need the shard set or
the world size (micro-batch cap, token budget) stay None here and are resolved once (trainer/resolve.py); the
resolved config is what checkpoints, `config.json` and `summary.json` record, so a resumed or reported run
never depends on defaults changing later. Every validation error names the CLI flag to change.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Sequence

from common.config_flags import add_flags, flag, given, preset_defaults
from common.flags import DEVICE_HELP, DEVICES
from common.presets import LR_SCHEDULES, PRESETS, get_preset

SPLITS = ("valid", "test")
# common.datasets.PROTOCOLS, kept literal (config stays light); a test checks they agree.
PROTOCOLS = ("original", "heart", "ogb", "pairs")
# --w0-init spellings -> trainer.model.W0_INITS (kept literal: config must not import the model / torch)
W0_INIT_FLAGS = {"orthogonal": "orthogonal", "gaussian": "gaussian", "low-rank": "low_rank"}
# Fields a resumed run may change without breaking "continue exactly where it stopped": they control
# when the run stops, logs and saves, not the trajectory of parameters or data.
RESUME_OVERRIDABLE = (
    "epochs",
    "stop_epoch",
    "patience",
    "max_steps",
    "eval_every",
    "checkpoint_every",
    "checkpoint_seconds",
    "log_every",
    "progress",
    "resume",
    "out",
    "device",
    "test_every_eval",
    "deterministic",
    "threads",
    "verify",
    "compile",
    "overwrite",
    "save_scores",
    "save_epoch_scores",
    "eval_weights",
)
# Default micro-batch size: on CUDA about this many tokens (trainer.resolve.resolve); on CPU at most this many links.
GPU_MICRO_TOKENS = 65_536
CPU_MICRO_LINKS = 256
# common.metrics.METRIC_KEYS, kept literal (config stays light); a test checks they agree.
SELECTION_METRICS = ("mrr", "hits@1", "hits@3", "hits@10", "hits@20", "hits@50", "hits@100", "auc", "ap")
# trainer.attention.BACKENDS, kept literal (config must not import torch); a test checks they agree.
ATTENTION_BACKENDS = ("auto", "sdpa", "bucketed", "varlen", "flash_varlen", "flash_attn", "reference")

# --help sections, in order (None: the parser's own options)
REQUIRED = "required"
OVERRIDES = "overrides (default: the preset's value)"
ABLATIONS = "ablations (paper appendix; default: PENCIL as published)"
CONTROL = "data and run control"
GROUPS = (REQUIRED, None, OVERRIDES, ABLATIONS, CONTROL)


class ConfigError(ValueError):
    """A bad flag value; the message names the flag."""


def _check(ok: bool, flag_name: str, msg: str) -> None:
    if not ok:
        raise ConfigError(f"{flag_name}: {msg}")


def _comma_splits(text: str) -> tuple[str, ...]:
    return tuple(s for s in text.split(",") if s)


@dataclass
class DataConfig:
    # OUT/<dataset>/<cache key> as written by preprocess (the directory holding manifest.json)
    shards: str = field(metadata=flag("a shard set: the folder holding manifest.json", group=REQUIRED, required=True))
    max_samples: int | None = field(
        default=None,
        metadata=flag(  # None = resolved
            "max links per micro-batch (default: sized by --micro-tokens "
            "on a GPU, else effective batch / world, <= 256)",
            name="micro-batch",
            group=CONTROL,
            advanced=True,
        ),
    )
    token_budget: int | None = field(
        default=None,
        metadata=flag(  # sum over a micro-batch of (N_b + 2); None = resolved
            "max tokens (sum of N_b + 2) per micro-batch", group=CONTROL, advanced=True
        ),
    )
    # tokens a default-sized micro-batch aims at; None = the device's (GPU_MICRO_TOKENS on CUDA, 0 on CPU), 0 = no
    # target (at most CPU_MICRO_LINKS links per micro-batch). An explicit --micro-batch wins.
    micro_tokens: int | None = field(
        default=None,
        metadata=flag(
            f"tokens a default micro-batch aims at (default {GPU_MICRO_TOKENS} on CUDA, 0 = off on CPU)",
            metavar="TOKENS",
            group=CONTROL,
            advanced=True,
        ),
    )
    eval_token_budget: int | None = field(
        default=None,
        metadata=flag(  # None = 4 x token_budget (no activations)
            "max tokens per evaluation batch (default 4 x token budget)", group=CONTROL, advanced=True
        ),
    )
    # bytes of decoded links each loader worker's shuffle pool holds (trainer/data.py)
    shuffle_buffer_mb: int = field(
        default=64,
        metadata=flag(
            "MB of decoded links in each loader worker's shuffle pool (default 64)", group=CONTROL, advanced=True
        ),
    )
    loader_memory_mb: int = field(
        default=1024,
        metadata=flag(  # shuffle pool (3 x its size at peak) + batches
            "memory budget per loader worker: 3 x the shuffle pool + batches in flight (default 1024)",
            group=CONTROL,
            advanced=True,
        ),
    )
    num_workers: int = field(
        default=2, metadata=flag("DataLoader workers per rank (0 = in process)", group=CONTROL, advanced=True)
    )
    seed: int = 0  # the run's --seed (set with it)
    orderings: int = 1  # labeled subgraphs fed per link: the model's --lrp k, set by resolve() (not a flag)
    distances: bool = False  # batches carry hop distances to u and v: the model's --distance-features (resolve())
    # the data the run is bound to, from the set's manifest at start (not flags; trainer.run_folder.same_data)
    dataset_fingerprint: str | None = None
    shard_set: str | None = None

    def __post_init__(self):
        _check(bool(self.shards), "--shards", "a shard directory is required")
        _check(
            self.max_samples is None or self.max_samples >= 1, "--micro-batch", f"must be >= 1, got {self.max_samples}"
        )
        _check(
            self.token_budget is None or self.token_budget >= 4,
            "--token-budget",
            f"must be >= 4, got {self.token_budget}",
        )
        _check(
            self.micro_tokens is None or self.micro_tokens >= 0,
            "--micro-tokens",
            f"must be >= 0, got {self.micro_tokens}",
        )
        _check(
            self.eval_token_budget is None or self.eval_token_budget >= 4,
            "--eval-token-budget",
            f"must be >= 4, got {self.eval_token_budget}",
        )
        _check(self.shuffle_buffer_mb >= 1, "--shuffle-buffer-mb", f"must be >= 1, got {self.shuffle_buffer_mb}")
        _check(self.loader_memory_mb >= 1, "--loader-memory-mb", f"must be >= 1, got {self.loader_memory_mb}")
        _check(self.num_workers >= 0, "--num-workers", f"must be >= 0, got {self.num_workers}")
        _check(self.orderings >= 1, "--lrp", f"must be >= 1, got {self.orderings}")


@dataclass
class OptimConfig:
    lr: float = field(default=1e-4, metadata=flag("", group=OVERRIDES, preset="lr"))
    weight_decay: float = field(default=0.01, metadata=flag("", group=OVERRIDES, advanced=True, preset="weight_decay"))
    # links per optimiser step, summed over ranks (micro x accumulation x world)
    effective_batch: int = field(
        default=2048,
        metadata=flag(
            "links per optimiser step summed over ranks", group=OVERRIDES, advanced=True, preset="effective_batch"
        ),
    )
    lr_schedule: str = field(
        default="constant",
        metadata=flag(
            "constant (the paper's) or cosine decay to 0 over the run",
            choices=LR_SCHEDULES,
            group=OVERRIDES,
            advanced=True,
            preset="lr_schedule",
        ),
    )

    def __post_init__(self):
        _check(self.lr > 0, "--lr", f"must be > 0, got {self.lr}")
        _check(
            self.lr_schedule in LR_SCHEDULES,
            "--lr-schedule",
            f"must be one of {', '.join(LR_SCHEDULES)}, got {self.lr_schedule!r}",
        )
        _check(self.weight_decay >= 0, "--weight-decay", f"must be >= 0, got {self.weight_decay}")
        _check(self.effective_batch >= 1, "--effective-batch", f"must be >= 1, got {self.effective_batch}")

    def lr_at(self, progress: float) -> float:
        """The learning rate at `progress` in [0, 1] of the run (epochs done / epochs)."""
        if self.lr_schedule == "cosine":
            return self.lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, max(0.0, progress))))
        return self.lr


@dataclass
class ModelOverrides:
    """Model shape; None keeps the preset's value (trainer.model.ModelConfig.from_preset applies them)."""

    hidden: int | None = field(default=None, metadata=flag("", group=OVERRIDES))
    layers: int | None = field(default=None, metadata=flag("", group=OVERRIDES))
    heads: int | None = field(default=None, metadata=flag("", group=OVERRIDES, advanced=True))
    ffn: int | None = field(default=None, metadata=flag("", group=OVERRIDES, advanced=True))
    dropout: float | None = field(default=None, metadata=flag("", group=OVERRIDES, advanced=True))
    attention: str = field(
        default="auto",
        metadata=flag(
            f"attention kernel: {', '.join(ATTENTION_BACKENDS)} (auto: the fastest that applies the model's attention "
            "dropout; varlen is faster on CUDA but has none)",
            metavar="BACKEND",
            group=CONTROL,
            advanced=True,
        ),
    )
    # Ablations (paper appendix); None keeps PENCIL's default (residual on, orthogonal frozen W0, no WPE).
    residual: bool | None = field(
        default=None,
        metadata=flag(
            "drop the multiplicative residual: every block is the plain BertLayer",
            name="no-residual",
            store=False,
            group=ABLATIONS,
            advanced=True,
        ),
    )
    w0_init: str | None = field(
        default=None,
        metadata=flag(
            "input projection init: orthogonal (default), gaussian (mean 0.1), low-rank (rank 5)",
            choices=tuple(W0_INIT_FLAGS),
            parse=W0_INIT_FLAGS.get,
            group=ABLATIONS,
            advanced=True,
        ),
    )
    w0_learnable: bool | None = field(
        default=None, metadata=flag("train W0 (default: frozen)", store=True, group=ABLATIONS, advanced=True)
    )
    wpe: bool | None = field(
        default=None,
        metadata=flag("add learnable word position embeddings", store=True, group=ABLATIONS, advanced=True),
    )
    # k labeled subgraphs per link with DeepSets pooling (None / 1: PENCIL as published)
    lrp: int | None = field(
        default=None,
        metadata=flag(
            "LRP-k: K labeled subgraphs (independent local orders) per link, DeepSets-pooled (default 1)",
            metavar="K",
            group=ABLATIONS,
            advanced=True,
        ),
    )
    # D > 0: embed each token's hop distances to u and v, clipped to D (None / 0: off)
    distances: int | None = field(
        default=None,
        metadata=flag(
            "add to every token an embedding of its node's hop "
            "distances to u and to v inside the subgraph (target edge "
            "removed), each clipped to D (default 0: off)",
            name="distance-features",
            metavar="D",
            group=ABLATIONS,
            advanced=True,
        ),
    )
    # None: the set's node features feed the model when it ships them (early fusion); False: structure only,
    # "PENCIL w/o features" on a featured set, so one set serves both rows (trainer.model.model_for_shards)
    features: bool | None = field(
        default=None,
        metadata=flag(
            "ignore the shard set's node features: structure only ('PENCIL w/o features')",
            name="no-features",
            store=False,
            group=ABLATIONS,
            advanced=True,
        ),
    )

    def __post_init__(self):
        for name in ("hidden", "layers", "heads", "ffn", "lrp"):
            v = getattr(self, name)
            _check(v is None or v >= 1, f"--{name}", f"must be >= 1, got {v}")
        _check(
            self.distances is None or self.distances >= 0, "--distance-features", f"must be >= 0, got {self.distances}"
        )
        _check(self.dropout is None or 0 <= self.dropout < 1, "--dropout", f"must be in [0, 1), got {self.dropout}")
        _check(
            self.attention in ATTENTION_BACKENDS,
            "--attention",
            f"unknown backend '{self.attention}'; choose one of {', '.join(ATTENTION_BACKENDS)}",
        )
        _check(
            self.w0_init in (None, *W0_INIT_FLAGS.values()),
            "--w0-init",
            f"must be one of {', '.join(W0_INIT_FLAGS)}, got {self.w0_init!r}",
        )

    def as_overrides(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class TrainConfig:
    preset: str = field(
        metadata=flag("a preset of common/presets.py: citeseer, ogbl-collab, tiny, ...", group=REQUIRED, required=True)
    )
    out: str = field(
        metadata=flag("run directory: checkpoints, metrics.jsonl, summary.json", group=REQUIRED, required=True)
    )
    data: DataConfig
    optim: OptimConfig = field(default_factory=OptimConfig)
    model: ModelOverrides = field(default_factory=ModelOverrides)
    resume: bool = field(default=False, metadata=flag("continue from OUT/last.pt", store=True))
    # clear the run folder's files first (trainer.run_folder)
    overwrite: bool = field(default=False, metadata=flag("delete the run already in OUT and start afresh", store=True))
    seed: int = field(default=0, metadata=flag(""))
    device: str = field(default="auto", metadata=flag(DEVICE_HELP, choices=DEVICES))  # auto | cpu | cuda
    # may be fractional (citation2 runs half a pass): the last epoch is cut short
    epochs: float = field(default=1.0, metadata=flag("", group=OVERRIDES, preset="epochs"))
    protocol: str = field(
        default="original",
        metadata=flag(
            "evaluation protocol: original, heart, ogb or pairs (the user's labelled pairs)",
            choices=PROTOCOLS,
            metavar="PROTOCOL",
            group=OVERRIDES,
            preset="protocol",
        ),
    )
    # the validation metric that picks the best epoch and stops early (None: the dataset's, e.g. mrr or hits@50)
    select_on: str | None = field(
        default=None,
        metadata=flag(
            "validation metric that picks the best epoch and stops early (default: the dataset's)",
            metavar="METRIC",
            choices=SELECTION_METRICS,
            group=OVERRIDES,
            advanced=True,
        ),
    )
    # evaluate every k epochs (and after the last)
    eval_every: int = field(
        default=1, metadata=flag("evaluate every k epochs", group=OVERRIDES, advanced=True, preset="eval_every")
    )
    eval_splits: tuple[str, ...] = field(
        default=SPLITS,
        metadata=flag(
            "comma-separated subset of valid,test (default valid,test)",
            parse=_comma_splits,
            group=CONTROL,
            advanced=True,
        ),
    )
    verify: bool = field(
        default=False,
        metadata=flag(  # check every shard's sha256, graphs and query files first
            "check the whole shard set against its manifest (sha256 of every shard, graph, queries and features file) "
            "before training",
            store=True,
            group=CONTROL,
            advanced=True,
        ),
    )
    # torch.compile the blocks' dense per-token work (trainer.model.Pencil.compile_blocks). Off by default: it
    # does not pay on CPU (docs/benchmarks/); bench/gpu_check.sh times it on the GPU.
    # Like --deterministic, a resumed run may switch it (same model and data; only rounding and dropout masks).
    compile: bool = field(
        default=False,
        metadata=flag(
            "torch.compile the blocks' dense part (LayerNorm, GELU, dropout chains); needs a C compiler",
            store=True,
            group=CONTROL,
            advanced=True,
        ),
    )
    progress: bool = field(
        default=True, metadata=flag("no progress bar", name="no-progress", store=False, group=CONTROL, advanced=True)
    )
    # rank 0 writes every eval set's per-candidate logits of the summary's evaluation (common.eval_scores)
    save_scores: bool = field(
        default=False,
        metadata=flag(
            "write each eval set's per-candidate logits at the "
            "summary's evaluation to OUT/scores/<split>-<protocol>.npz",
            store=True,
            group=CONTROL,
            advanced=True,
        ),
    )
    # also keep every evaluation's scores (common.eval_scores.epoch_scores_path): studies of curves and selection
    save_epoch_scores: bool = field(
        default=False,
        metadata=flag(
            "also keep every evaluation's per-candidate logits, OUT/scores/epochs/ (selection studies)",
            store=True,
            group=CONTROL,
            advanced=True,
        ),
    )
    # evaluate these saved weights (a best.pt) once instead of training (trainer.eval_only)
    eval_weights: str | None = field(
        default=None,
        metadata=flag(
            "no training: evaluate these weights once, at their epoch", metavar="BEST_PT", group=CONTROL, advanced=True
        ),
    )
    # stop after this many optimiser steps in all (tests, smoke runs)
    max_steps: int | None = field(
        default=None, metadata=flag("stop after this many optimiser steps", group=CONTROL, advanced=True)
    )
    # stop (evaluate, save last.pt) after this many epochs while the lr schedule still spans `epochs`: the
    # auto search's rungs (pipelines.auto.search) resume a survivor with a later stop on the same trajectory
    stop_epoch: int | None = field(
        default=None,
        metadata=flag(
            "stop after E epochs; the lr schedule still spans --epochs (resume later with a larger E)",
            metavar="E",
            group=CONTROL,
            advanced=True,
        ),
    )
    # early stopping: stop once this many evaluations in a row have not improved validation (None: never)
    patience: int | None = field(
        default=None,
        metadata=flag(
            "stop early once P evaluations in a row have not improved validation (default: never)",
            metavar="P",
            group=CONTROL,
            advanced=True,
        ),
    )
    checkpoint_every: int = field(
        default=0,
        metadata=flag(  # also write last.pt every N steps (0: by time only)
            "also save last.pt every N optimiser steps", group=CONTROL, advanced=True
        ),
    )
    # last.pt at most once per this many seconds (checked at epoch ends and log steps), plus always when the run
    # ends or stops: a big checkpoint after every short epoch would dominate the run. 0 = every epoch.
    checkpoint_seconds: float = field(
        default=60.0,
        metadata=flag(
            "save last.pt at most once per this many seconds (and at the end); 0 = every epoch",
            group=CONTROL,
            advanced=True,
        ),
    )
    test_every_eval: bool = field(
        default=False,
        metadata=flag(  # score test at every eval, not only on improvement
            "score the test split at every evaluation (default: only when validation improves)",
            store=True,
            group=CONTROL,
            advanced=True,
        ),
    )
    threads: int = field(
        default=0,
        metadata=flag(  # 0 = half the cores per rank (trainer.setup.cpu_threads)
            "torch threads per rank on CPU (default 0: half the cores per rank, at least 1)",
            group=CONTROL,
            advanced=True,
        ),
    )
    deterministic: bool = field(
        default=False,
        metadata=flag(  # CUDA: bit-identical reruns, slower
            "deterministic kernels (torch.use_deterministic_algorithms): bit-identical CUDA reruns",
            store=True,
            group=CONTROL,
            advanced=True,
        ),
    )
    log_every: int = field(
        default=10, metadata=flag("optimiser steps between metric lines", group=CONTROL, advanced=True)
    )

    def __post_init__(self):
        _check(
            self.preset in PRESETS,
            "--preset",
            f"unknown preset '{self.preset}'; choose one of: {', '.join(sorted(PRESETS))}",
        )
        _check(bool(self.out), "--out", "a run directory is required")
        _check(self.epochs > 0, "--epochs", f"must be > 0, got {self.epochs}")
        _check(self.eval_every >= 1, "--eval-every", f"must be >= 1, got {self.eval_every}")
        self.eval_splits = tuple(self.eval_splits)
        for s in self.eval_splits:
            _check(s in SPLITS, "--eval-splits", f"unknown split '{s}'; use a subset of {','.join(SPLITS)}")
        _check(self.protocol in PROTOCOLS, "--protocol", f"unknown protocol '{self.protocol}'")
        _check(self.device in DEVICES, "--device", f"must be auto, cpu or cuda, got '{self.device}'")
        _check(self.stop_epoch is None or self.stop_epoch >= 1, "--stop-epoch", f"must be >= 1, got {self.stop_epoch}")
        _check(self.patience is None or self.patience >= 1, "--patience", f"must be >= 1, got {self.patience}")
        _check(self.max_steps is None or self.max_steps >= 1, "--max-steps", f"must be >= 1, got {self.max_steps}")
        _check(self.checkpoint_every >= 0, "--checkpoint-every", f"must be >= 0, got {self.checkpoint_every}")
        _check(self.checkpoint_seconds >= 0, "--checkpoint-seconds", f"must be >= 0, got {self.checkpoint_seconds}")
        _check(self.threads >= 0, "--threads", f"must be >= 0, got {self.threads}")
        _check(self.log_every >= 1, "--log-every", f"must be >= 1, got {self.log_every}")
        _check(not (self.resume and self.overwrite), "--overwrite", "cannot go with --resume; pass one of them")

    # ------------------------------------------------------------------ JSON round trip
    def to_dict(self) -> dict:
        d = asdict(self)
        d["eval_splits"] = list(self.eval_splits)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        d = dict(d)
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in known}  # a field this build no longer has: ignore
        d["preset"] = {"auto": "general"}.get(d["preset"], d["preset"])  # runs saved before the preset's rename
        return cls(
            data=DataConfig(**d.pop("data")),
            optim=OptimConfig(**d.pop("optim")),
            model=ModelOverrides(**d.pop("model")),
            **d,
        )


# ---------------------------------------------------------------------------- CLI
PROG = "python -m trainer"
# the config's sections, as add_flags and config_for name them ("" = TrainConfig's own fields)
SECTIONS = {"": TrainConfig, "data": DataConfig, "optim": OptimConfig, "model": ModelOverrides}


def build_parser(prog: str = PROG):
    from common.cli import Parser

    p = Parser(
        prog=prog,
        description="Train PENCIL on a shard set written by `python -m preprocess`. "
        "Under `torchrun --nproc-per-node N`\nit trains with DDP (gloo on CPU, NCCL on GPU); "
        "without torchrun, in one process.",
    )
    add_flags(p, SECTIONS, GROUPS)
    return p


def config_from_args(argv: Sequence[str] | None = None, prog: str = PROG) -> TrainConfig:
    values = given(build_parser(prog).parse_args(argv), SECTIONS)
    top = values.pop("")
    return config_for(top.pop("preset"), values["data"].pop("shards"), top.pop("out"), **top, **values)


def config_for(preset: str, shards: str, out: str, **overrides) -> TrainConfig:
    """A preset's config with overrides: the one place a preset's values and the overrides meet (the CLI comes
    here too). Top-level TrainConfig fields go as keywords; component fields as `data=dict(...)`,
    `optim=dict(...)`, `model=dict(...)`. A field not overridden takes the preset's value when its flag
    declares one (`preset=`), else its default."""
    try:
        p = get_preset(preset)
    except ValueError as err:
        raise ConfigError(f"--preset: {err}") from None
    data = {"shards": shards, **overrides.pop("data", {})}
    data.setdefault("seed", overrides.get("seed", 0))  # the loader's seed is the run's
    optim = {**preset_defaults(OptimConfig, p), **overrides.pop("optim", {})}
    model = overrides.pop("model", {})
    top = {**preset_defaults(TrainConfig, p), **overrides}
    return TrainConfig(
        preset=preset,
        out=out,
        data=DataConfig(**data),
        optim=OptimConfig(**optim),
        model=ModelOverrides(**model),
        **top,
    )
