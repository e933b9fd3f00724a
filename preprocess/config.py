"""Validated configuration of one preprocessing run.

Every field that changes the shards' content goes into the cache key (`PreprocessConfig.key_parts`);
fields that only change *how* the work runs (num_cpus, force, out) do not, so a rerun with more
workers still finds its cache. Errors name the CLI flag to fix.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from common.datasets import load_dataset
from common.datasets.fractions import DEFAULT_SPLIT
from common.datasets.spec import DatasetSpec
from common.heuristic_targets import TARGETS as HEURISTIC_TARGETS
from common.presets import n_max as _n_max

SPLIT_NAMES = ("train", "valid", "test")
# Default memory budget of one shard task (a Ray worker): its imports (~300 MB), the graph it maps,
# a marker array over the nodes and one block in flight. Shard format v2 stores node ids only, so
# this holds at ogbl-ddi density (measured in bench/scale.py).
WORKER_MEMORY_MB = 1500
LINK_BYTES = 40  # cid, src, dst, label and a list offset per link in a block
PROTOCOL_NAMES = ("original", "heart", "ogb", "pairs", "reverse", "kg")


class ConfigError(ValueError):
    """Invalid preprocessing option; the message names the flag."""


@dataclass(frozen=True)
class SamplingConfig:
    """Link-centric ShaDowKHop: d hops, n neighbours per frontier entry; `closest` > 0 keeps at most that many
    context nodes per link, the structurally closest (preprocess/sampler.py; 0 = all, the default)."""

    d: int
    n: int
    closest: int = 0

    def __post_init__(self):
        if not (isinstance(self.d, int) and isinstance(self.n, int)) or self.d < 1 or self.n < 1:
            raise ConfigError(f"--sampling: d and n must be positive integers, got d={self.d!r}, n={self.n!r}")
        c = self.closest
        if isinstance(c, bool) or not isinstance(c, int) or (c != 0 and c < 3):
            raise ConfigError(f"--closest: must be 0 (off) or an integer of at least 3 (u, v and one more), got {c!r}")
        if self.n_max >= 2**31:
            raise ConfigError(f"--sampling {self.d},{self.n}: node budget N_max={self.n_max} is too large")

    @property
    def n_max(self) -> int:
        return _n_max(self.d, self.n)

    @classmethod
    def parse(cls, text: str) -> "SamplingConfig":
        try:
            d, n = (int(x) for x in str(text).replace(" ", "").strip("()").split(","))
        except ValueError:
            raise ConfigError(f"--sampling: expected 'd,n' such as 2,20, got {text!r}") from None
        return cls(d, n)


@dataclass(frozen=True)
class CandidateConfig:
    """Which links get sampled: training views and eval (split, protocol) sets."""

    views: int = 2
    percent: float = 100.0  # % of training positives per view (seeded subset; collab/citation2 use 50)
    neg_ratio: int = 1  # training negatives per positive
    splits: tuple[str, ...] = SPLIT_NAMES
    protocols: tuple[str, ...] | None = None  # None = every protocol the dataset has
    # share of each training view's negatives drawn as 2-hop non-edges of the training graph (HeaRT-style
    # hard negatives, preprocess/candidates.py); the rest stay uniform. 0 = the uniform draw of every older set.
    hard_neg_fraction: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "splits", tuple(self.splits))
        if self.protocols is not None:
            object.__setattr__(self, "protocols", tuple(self.protocols))
        if not isinstance(self.views, int) or self.views < 1:
            raise ConfigError(f"--views: must be a positive integer, got {self.views!r}")
        if not 0 < float(self.percent) <= 100:
            raise ConfigError(f"--percent: must be in (0, 100], got {self.percent!r}")
        if not isinstance(self.neg_ratio, int) or self.neg_ratio < 0:
            raise ConfigError(f"--neg-ratio: must be a non-negative integer, got {self.neg_ratio!r}")
        f = self.hard_neg_fraction
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f <= 1:  # NaN fails the range too
            raise ConfigError(
                f"--hard-neg-fraction: must be a number in [0, 1] (0 = uniform negatives only, "
                f"1 = only 2-hop non-edges), got {f!r}"
            )
        object.__setattr__(self, "hard_neg_fraction", float(f))
        bad = [s for s in self.splits if s not in SPLIT_NAMES]
        if bad or not self.splits or len(set(self.splits)) != len(self.splits):
            raise ConfigError(
                f"--splits: expected distinct names from {','.join(SPLIT_NAMES)}, got {','.join(self.splits)}"
            )
        if self.protocols is not None:
            bad = [p for p in self.protocols if p not in PROTOCOL_NAMES]
            if bad or not self.protocols:
                raise ConfigError(
                    f"--protocol: expected 'both'/'all' or names from {','.join(PROTOCOL_NAMES)}, "
                    f"got {','.join(self.protocols)}"
                )


@dataclass(frozen=True)
class PreprocessConfig:
    """One set: its data (a DatasetSpec, checked there), how it is sampled, which links, and how the job runs."""

    data: DatasetSpec
    sampling: SamplingConfig
    candidates: CandidateConfig = field(default_factory=CandidateConfig)
    out: str = "shards"
    targets: str | None = None  # heuristic-estimation labels (preprocess/targets.py); None = link labels 1 / 0
    num_cpus: int | None = None  # embedded Ray only; ignored when attaching to a cluster
    links_per_shard: int = 8192
    links_per_block: int = 256
    shard_mb: float = 64.0  # a shard also closes before its worst-case size passes this (bytes bound)
    worker_memory_mb: int = WORKER_MEMORY_MB  # per shard task: Ray schedules by it, the job checks it fits
    force: bool = False

    def __post_init__(self):
        if self.num_cpus is not None and (not isinstance(self.num_cpus, int) or self.num_cpus < 1):
            raise ConfigError(f"--num-cpus: must be a positive integer, got {self.num_cpus!r}")
        if not isinstance(self.links_per_block, int) or self.links_per_block < 1:
            raise ConfigError(f"--block-size: must be a positive integer, got {self.links_per_block!r}")
        if not isinstance(self.links_per_shard, int) or self.links_per_shard < self.links_per_block:
            raise ConfigError(
                f"--links-per-shard: must be an integer >= --block-size ({self.links_per_block}), "
                f"got {self.links_per_shard!r}"
            )
        if not str(self.out):
            raise ConfigError("--out: must name an output directory")
        if not self.shard_mb > 0:
            raise ConfigError(f"--shard-mb: must be > 0, got {self.shard_mb!r}")
        if not isinstance(self.worker_memory_mb, int) or self.worker_memory_mb < 1:
            raise ConfigError(f"--worker-memory-mb: must be a positive integer, got {self.worker_memory_mb!r}")
        if self.targets is not None and self.targets not in HEURISTIC_TARGETS:
            raise ConfigError(
                f"--targets: unknown heuristic '{self.targets}'; choose one of {', '.join(HEURISTIC_TARGETS)}"
            )

    @property
    def seed(self) -> int:
        """The one seed of the split (the data's) and of candidates, sampling and local orders."""
        return self.data.seed

    @property
    def ships_features(self) -> bool:
        """The set carries a node-feature table (--features or --node-features) and the model reads it."""
        return self.data.ships_features

    def load_dataset(self):
        """The dataset this configuration names, with every input that shapes it."""
        return load_dataset(self.data)

    def shard_links(self, num_nodes: int) -> int:
        """Links per shard: --links-per-shard, cut so that a shard's worst case (every link at N_max
        node ids of the narrowest type that holds num_nodes) stays under --shard-mb."""
        per_link = LINK_BYTES + self.sampling.n_max * (2 if num_nodes <= 2**16 else 4 if num_nodes <= 2**31 else 8)
        by_bytes = int(self.shard_mb * 2**20) // per_link
        return max(self.links_per_block, min(self.links_per_shard, by_bytes))

    def key_parts(self, dataset_fingerprint: str, protocols: list[str]) -> dict:
        """Everything that determines the shard bytes; hashed by common.shards.cache_key."""
        cand = asdict(self.candidates)
        cand["protocols"] = list(protocols)
        cand["splits"] = list(self.candidates.splits)
        cand["percent"] = float(self.candidates.percent)
        if not cand["hard_neg_fraction"]:
            del cand["hard_neg_fraction"]  # uniform negatives: the sets built before the option keep their keys
        return {
            "dataset": self.data.dataset,
            "fingerprint": dataset_fingerprint,
            "features": self.data.features,
            "sampling": [self.sampling.d, self.sampling.n],
            **({"closest": self.sampling.closest} if self.sampling.closest else {}),  # off: the keys sets always had
            "candidates": cand,
            "seed": self.seed,
            "links_per_shard": self.links_per_shard,
            "links_per_block": self.links_per_block,
            "shard_mb": float(self.shard_mb),
            "sampler": SAMPLER_VERSION,
            # only when set, so link-prediction sets keep the keys (and caches) they always had
            **({"targets": self.targets} if self.targets else {}),
            # only when not the default: a --split of 85,5,10 finds the set built without the flag
            **({"split": list(self.data.split)} if self.data.split not in (None, DEFAULT_SPLIT) else {}),
            # The split kind and the graph's other inputs reach the key through the fingerprint (the pairs of each
            # split, the times' boundaries, the feature table, the weights, the user's pairs are all hashed there);
            # --node-features also decides whether the set ships the table, so it is named (only when given).
            **({"node_features": True} if self.data.node_features else {}),
            # only when set (--directed): undirected sets keep their keys
            **({"directed": True} if self.data.directed else {}),
        }

    def to_dict(self) -> dict:
        """The manifest's `config`: every input file or folder absolute, so a run of the set finds them from any
        folder (the cache key keeps each path as given: key_parts)."""
        from common.datasets import given_by_path
        from common.storage import absolute_location

        out = asdict(self)
        out.update(self.data.to_dict())  # the spec's fields at the top level, where manifests have always kept them
        del out["data"]
        for name in PATH_FIELDS:
            if out[name] and (name != "dataset" or given_by_path(self.data.dataset, self.data.data_dir)):
                out[name] = absolute_location(out[name])
        out["sampling"] = {"d": self.sampling.d, "n": self.sampling.n, "n_max": self.sampling.n_max}
        if self.sampling.closest:
            out["sampling"]["closest"] = self.sampling.closest
        return out


# The fields that name a local file or folder (a remote URL stays as it is).
PATH_FIELDS = (
    "dataset",
    "out",
    "data_dir",
    "ogb_root",
    "planetoid_dir",
    "nodes",
    "node_features",
    "eval_pairs",
    "train_negatives",
)

# Bump when the sampler's output for a given seed changes, so old caches are not reused.
SAMPLER_VERSION = 1
