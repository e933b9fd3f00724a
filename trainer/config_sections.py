"""The sections of a trainer configuration: data (the shard set and the loader), optimiser, and model
overrides, each a dataclass whose fields declare their own flags (common.config_flags), plus the error every
validation raises. trainer/config.py assembles them into TrainConfig and the CLI.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from common.config_flags import flag
from common.presets import LR_SCHEDULES

# --w0-init spellings -> trainer.model.pencil.W0_INITS (kept literal: config must not import the model / torch)
W0_INIT_FLAGS = {"orthogonal": "orthogonal", "gaussian": "gaussian", "low-rank": "low_rank"}
# Default micro-batch size: on CUDA about this many tokens (trainer.resolve.resolve); on CPU at most this many links.
GPU_MICRO_TOKENS = 65_536
CPU_MICRO_LINKS = 256
# trainer.model.attention.BACKENDS, kept literal (config must not import torch); a test checks they agree.
ATTENTION_BACKENDS = ("auto", "sdpa", "bucketed", "varlen", "flash_varlen", "flash_attn", "reference")

# --help sections, in order (None: the parser's own options)
REQUIRED = "required"
OVERRIDES = "overrides (default: the preset's value)"
ABLATIONS = "ablations (paper appendix; default: PENCIL as published)"
CONTROL = "data and run control"
GROUPS = (REQUIRED, None, OVERRIDES, ABLATIONS, CONTROL)


class ConfigError(ValueError):
    """A bad flag value; the message names the flag."""


def check(ok: bool, flag_name: str, msg: str) -> None:
    if not ok:
        raise ConfigError(f"{flag_name}: {msg}")


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
    # bytes of decoded links each loader worker's shuffle pool holds (trainer/data/stream.py)
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
    # a share of the training links shown with a head that has no edges: the new users of a temporal split
    cold_heads: float | None = field(
        default=None,
        metadata=flag(
            "share of training links shown as if their head had no history: its edges hidden, its degree 0, its "
            "features kept (a temporal split's new users; default 0: off)",
            metavar="SHARE",
            group=ABLATIONS,
            advanced=True,
        ),
    )
    seed: int = 0  # the run's --seed (set with it)
    orderings: int = 1  # labeled subgraphs fed per link: the model's --lrp k, set by resolve() (not a flag)
    distances: bool = False  # batches carry hop distances to u and v: the model's --distance-features (resolve())
    # the data the run is bound to, from the set's manifest at start (not flags; trainer.run_folder.same_data)
    dataset_fingerprint: str | None = None
    shard_set: str | None = None

    def __post_init__(self):
        check(bool(self.shards), "--shards", "a shard directory is required")
        check(
            self.max_samples is None or self.max_samples >= 1, "--micro-batch", f"must be >= 1, got {self.max_samples}"
        )
        check(
            self.token_budget is None or self.token_budget >= 4,
            "--token-budget",
            f"must be >= 4, got {self.token_budget}",
        )
        check(
            self.micro_tokens is None or self.micro_tokens >= 0,
            "--micro-tokens",
            f"must be >= 0, got {self.micro_tokens}",
        )
        check(
            self.eval_token_budget is None or self.eval_token_budget >= 4,
            "--eval-token-budget",
            f"must be >= 4, got {self.eval_token_budget}",
        )
        check(self.shuffle_buffer_mb >= 1, "--shuffle-buffer-mb", f"must be >= 1, got {self.shuffle_buffer_mb}")
        check(self.loader_memory_mb >= 1, "--loader-memory-mb", f"must be >= 1, got {self.loader_memory_mb}")
        check(self.num_workers >= 0, "--num-workers", f"must be >= 0, got {self.num_workers}")
        check(
            self.cold_heads is None or 0 <= self.cold_heads <= 1,
            "--cold-heads",
            f"must be in [0, 1], got {self.cold_heads}",
        )
        check(self.orderings >= 1, "--lrp", f"must be >= 1, got {self.orderings}")


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
        check(self.lr > 0, "--lr", f"must be > 0, got {self.lr}")
        check(
            self.lr_schedule in LR_SCHEDULES,
            "--lr-schedule",
            f"must be one of {', '.join(LR_SCHEDULES)}, got {self.lr_schedule!r}",
        )
        check(self.weight_decay >= 0, "--weight-decay", f"must be >= 0, got {self.weight_decay}")
        check(self.effective_batch >= 1, "--effective-batch", f"must be >= 1, got {self.effective_batch}")

    def lr_at(self, progress: float) -> float:
        """The learning rate at `progress` in [0, 1] of the run (epochs done / epochs)."""
        if self.lr_schedule == "cosine":
            return self.lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, max(0.0, progress))))
        return self.lr


@dataclass
class ModelOverrides:
    """Model shape; None keeps the preset's value (trainer.model.pencil.ModelConfig.from_preset applies them)."""

    hidden: int | None = field(default=None, metadata=flag("", group=OVERRIDES))
    layers: int | None = field(default=None, metadata=flag("", group=OVERRIDES))
    heads: int | None = field(default=None, metadata=flag("", group=OVERRIDES, advanced=True))
    ffn: int | None = field(default=None, metadata=flag("", group=OVERRIDES, advanced=True))
    dropout: float | None = field(default=None, metadata=flag("", group=OVERRIDES, advanced=True))
    attention_dropout: float | None = field(
        default=None,
        metadata=flag(
            "dropout on the attention probabilities (default: --dropout's value, as in BERT)",
            metavar="P",
            group=OVERRIDES,
            advanced=True,
        ),
    )
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
    # D > 0: embed each token's node degree in the training graph, log2-bucketed and clipped to D (None / 0: off)
    degrees: int | None = field(
        default=None,
        metadata=flag(
            "add to every token an embedding of its node's degree in the training graph, floor(log2(1 + degree)) "
            "clipped to D, out and in apart on a directed or typed set (default 0: off)",
            name="degree-features",
            metavar="D",
            group=ABLATIONS,
            advanced=True,
        ),
    )
    degree_steps: int | None = field(
        default=None,
        metadata=flag(
            "--degree-features' buckets per doubling of 1 + degree: floor(S log2(1 + degree)) (default 1)",
            name="degree-steps",
            metavar="S",
            group=ABLATIONS,
            advanced=True,
        ),
    )
    # a temporal set's node activity just before each link is asked (trainer/data/clock.py); None / False: off
    time_features: bool | None = field(
        default=None,
        metadata=flag(
            "add to every token its node's recent activity, decayed edge counts just before the link is asked "
            "(training: when its head arrived); needs a set built from a file with a time column",
            store=True,
            group=ABLATIONS,
            advanced=True,
        ),
    )
    # with it, each token's lift among the nodes sharing the head's attributes (trainer/data/peers.py)
    peer_features: bool | None = field(
        default=None,
        metadata=flag(
            "with --time-features: add to every token how much more the nodes sharing the head's attributes chose "
            "its node than all did, just before the link is asked; needs a set with node features",
            store=True,
            group=ABLATIONS,
            advanced=True,
        ),
    )
    # None: the set's node features feed the model when it ships them (early fusion); False: structure only,
    # "PENCIL w/o features" on a featured set, so one set serves both rows (trainer.model.pencil.model_for_shards)
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
        for name in ("hidden", "layers", "heads", "ffn", "lrp", "degree_steps"):
            v = getattr(self, name)
            check(v is None or v >= 1, f"--{name.replace('_', '-')}", f"must be >= 1, got {v}")
        check(
            self.distances is None or self.distances >= 0, "--distance-features", f"must be >= 0, got {self.distances}"
        )
        check(self.degrees is None or self.degrees >= 0, "--degree-features", f"must be >= 0, got {self.degrees}")
        check(self.dropout is None or 0 <= self.dropout < 1, "--dropout", f"must be in [0, 1), got {self.dropout}")
        check(not self.peer_features or self.time_features, "--peer-features", "reads the clock: add --time-features")
        check(
            self.attention_dropout is None or 0 <= self.attention_dropout < 1,
            "--attention-dropout",
            f"must be in [0, 1), got {self.attention_dropout}",
        )
        check(
            self.attention in ATTENTION_BACKENDS,
            "--attention",
            f"unknown backend '{self.attention}'; choose one of {', '.join(ATTENTION_BACKENDS)}",
        )
        check(
            self.w0_init in (None, *W0_INIT_FLAGS.values()),
            "--w0-init",
            f"must be one of {', '.join(W0_INIT_FLAGS)}, got {self.w0_init!r}",
        )

    def as_overrides(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}
