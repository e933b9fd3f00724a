"""Trainer configuration: TrainConfig (run control, over the sections of trainer/config_sections.py), whose fields
declare their own flags, the CLI generated from them, and the JSON round trip.

A run is described by a preset (common.presets: model shape, optimiser, epochs, protocol) plus overrides:
a field whose flag says `preset=` takes the preset's value unless given. Values that need the shard set or
the world size (micro-batch cap, token budget) stay None here and are resolved once (trainer/resolve.py); the
resolved config is what checkpoints, `config.json` and `summary.json` record, so a resumed or reported run
never depends on defaults changing later. Every validation error names the CLI flag to change.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Sequence

from common.config_flags import add_flags, flag, given, preset_defaults
from common.flags import DEVICE_HELP, DEVICES
from common.presets import PRESETS, get_preset
from common.storage import absolute_location
from trainer.config_sections import (
    CONTROL,
    GROUPS,
    OVERRIDES,
    REQUIRED,
    ConfigError,
    DataConfig,
    ModelOverrides,
    OptimConfig,
    check,
)

SPLITS = ("valid", "test")
# common.datasets.PROTOCOLS, kept literal (config stays light); a test checks they agree.
PROTOCOLS = ("original", "heart", "ogb", "pairs", "reverse", "kg")
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
# common.metrics.METRIC_KEYS, kept literal (config stays light); a test checks they agree.
SELECTION_METRICS = ("mrr", "hits@1", "hits@3", "hits@10", "hits@20", "hits@50", "hits@100", "auc", "ap")


def _comma_splits(text: str) -> tuple[str, ...]:
    return tuple(s for s in text.split(",") if s)


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
            "evaluation protocol: original, heart, ogb, pairs (the user's labelled pairs) or kg (typed triples)",
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
    # torch.compile the blocks' dense per-token work (trainer.model.pencil.Pencil.compile_blocks). Off by default: it
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
        check(
            self.preset in PRESETS,
            "--preset",
            f"unknown preset '{self.preset}'; choose one of: {', '.join(sorted(PRESETS))}",
        )
        check(bool(self.out), "--out", "a run directory is required")
        check(self.epochs > 0, "--epochs", f"must be > 0, got {self.epochs}")
        check(self.eval_every >= 1, "--eval-every", f"must be >= 1, got {self.eval_every}")
        self.eval_splits = tuple(self.eval_splits)
        for s in self.eval_splits:
            check(s in SPLITS, "--eval-splits", f"unknown split '{s}'; use a subset of {','.join(SPLITS)}")
        check(self.protocol in PROTOCOLS, "--protocol", f"unknown protocol '{self.protocol}'")
        check(self.device in DEVICES, "--device", f"must be auto, cpu or cuda, got '{self.device}'")
        check(self.stop_epoch is None or self.stop_epoch >= 1, "--stop-epoch", f"must be >= 1, got {self.stop_epoch}")
        check(self.patience is None or self.patience >= 1, "--patience", f"must be >= 1, got {self.patience}")
        check(self.max_steps is None or self.max_steps >= 1, "--max-steps", f"must be >= 1, got {self.max_steps}")
        check(self.checkpoint_every >= 0, "--checkpoint-every", f"must be >= 0, got {self.checkpoint_every}")
        check(self.checkpoint_seconds >= 0, "--checkpoint-seconds", f"must be >= 0, got {self.checkpoint_seconds}")
        check(self.threads >= 0, "--threads", f"must be >= 0, got {self.threads}")
        check(self.log_every >= 1, "--log-every", f"must be >= 1, got {self.log_every}")
        check(not (self.resume and self.overwrite), "--overwrite", "cannot go with --resume; pass one of them")

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
    shards = values["data"].pop("shards")
    if "protocol" not in top and (implied := set_protocol(shards)):  # a typed set's only eval sets are kg's
        top["protocol"] = implied
    return config_for(top.pop("preset"), shards, top.pop("out"), **top, **values)


def set_protocol(shards: str | None) -> str | None:
    """The protocol a shard set implies: "kg" for a typed set (relation types), else None (the preset's). A set that
    cannot be read says None here: check_run reports it in one line."""
    from common.manifest import ShardError, read_manifest

    try:
        return "kg" if shards and read_manifest(shards).relations else None
    except (ShardError, OSError, ValueError):
        return None


def config_for(preset: str, shards: str, out: str, **overrides) -> TrainConfig:
    """A preset's config with overrides: the one place a preset's values and the overrides meet (the CLI comes
    here too). Top-level TrainConfig fields go as keywords; component fields as `data=dict(...)`,
    `optim=dict(...)`, `model=dict(...)`. A field not overridden takes the preset's value when its flag
    declares one (`preset=`), else its default."""
    try:
        p = get_preset(preset)
    except ValueError as err:
        raise ConfigError(f"--preset: {err}") from None
    # absolute: the run's config.json and checkpoints name the set wherever a later command runs from
    data = {"shards": absolute_location(shards) if shards else shards, **overrides.pop("data", {})}
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
