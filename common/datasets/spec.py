"""`DatasetSpec`: what the data is, the one record every room passes whole.

Built once at a command line from common.flags' flags (`from_args`), loaded by common.datasets.load_dataset,
held whole by preprocess's PreprocessConfig and stored flat in a shard set's manifest `config` (`to_dict`, read
back with `from_dict`). Each field is checked here, once; adding an input option touches this record, its flag reader
and its documentation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from common.datasets.base import FILL_CHOICES, DatasetError
from common.datasets.fractions import DEFAULT_SPLIT, DEFAULT_TEST_MAX, DEFAULT_VALID_MAX, SPLIT_KINDS, check_split

# the flags of add_graph_input_flags and --nodes: fields read as they are given
GRAPH_INPUTS = ("nodes", "node_features", "fill_features", "eval_pairs", "train_negatives")


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset and every input that shapes it.

    dataset: a paper dataset's name (citeseer, cora, ogbl-*, synthetic), a HeaRT folder or an edge-list file;
    data_dir / ogb_root / planetoid_dir: where a paper dataset's files are; features: a paper dataset's node
    features (--features); seed: the seed of a split made here; split: (train, valid, test) percentages, None
    = 85/5/10; split_kind: random or temporal, None = temporal with a time column, else random; nodes: an edge
    list's node list; node_features / fill_features / ignore_columns: its feature file, how rows it lacks are
    filled, columns ignored on purpose; eval_pairs / train_negatives: the user's labelled pairs and known
    non-links; valid_pool: extra validation negatives per protocol negative (common/datasets/pool.py); directed:
    an edge list's rows are ordered pairs src -> dst (--directed; common/datasets/directed.py); relation: an edge
    list's relation column, its rows typed triples src -relation-> dst (--relation; common/datasets/kg.py); a
    typed graph's `nodes` file may give node kinds (a type column, common/datasets/kinds.py); held_out_max: the
    most validation and test edges of a random split (the rest train; `held_out_caps`), None for none (a set
    built before the caps, or shares given).
    """

    dataset: str
    data_dir: str | None = None
    ogb_root: str | None = None
    planetoid_dir: str | None = None
    features: bool = False
    seed: int = 0
    split: tuple[float, float, float] | None = None
    split_kind: str | None = None
    nodes: str | None = None
    node_features: str | None = None
    fill_features: str | None = None
    ignore_columns: tuple[str, ...] = ()
    eval_pairs: str | None = None
    train_negatives: str | None = None
    valid_pool: int = 0
    directed: bool = False
    relation: str | None = None
    held_out_max: tuple[int, int] | None = None

    def __post_init__(self):
        if not self.dataset:
            raise DatasetError("--dataset: required (citeseer, cora, ogbl-*, synthetic, a folder or an edge-list file)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise DatasetError(f"--seed: must be a non-negative integer, got {self.seed!r}")
        if self.split is not None:
            object.__setattr__(self, "split", check_split(self.split))
        object.__setattr__(self, "ignore_columns", tuple(self.ignore_columns))
        if self.held_out_max is not None:
            object.__setattr__(self, "held_out_max", tuple(int(v) for v in self.held_out_max))
        if self.split_kind is not None and self.split_kind not in SPLIT_KINDS:
            raise DatasetError(f"--split {self.split_kind}: unknown kind; use {' or '.join(SPLIT_KINDS)}")
        if self.fill_features is not None:
            if self.fill_features not in FILL_CHOICES:
                raise DatasetError(f"--fill-features {self.fill_features}: choose one of {', '.join(FILL_CHOICES)}")
            if self.node_features is None:
                raise DatasetError(
                    f"--fill-features {self.fill_features}: fills the rows a --node-features file lacks; pass "
                    "--node-features FILE, or drop --fill-features"
                )
        if self.features and self.node_features is not None:
            raise DatasetError(
                "--features loads a paper dataset's node features, --node-features an edge list's; pass one"
            )
        if isinstance(self.valid_pool, bool) or not isinstance(self.valid_pool, int) or self.valid_pool < 0:
            raise DatasetError(f"--valid-pool: must be a non-negative integer, got {self.valid_pool!r}")
        if not isinstance(self.directed, bool):
            raise DatasetError(f"--directed: must be true or false, got {self.directed!r}")
        if self.directed and (self.eval_pairs or self.train_negatives):
            flag = "--eval-pairs" if self.eval_pairs else "--train-negatives"
            raise DatasetError(f"{flag}: a pairs file is read as unordered pairs, not with --directed yet; drop one")
        if self.relation is not None and (not isinstance(self.relation, str) or not self.relation.strip()):
            raise DatasetError(f"--relation: the name of the edge list's relation column, got {self.relation!r}")
        if self.relation is not None and (self.eval_pairs or self.train_negatives):
            raise DatasetError(
                "--relation: a typed edge list takes no --eval-pairs or --train-negatives yet; drop them"
            )

    @property
    def ships_features(self) -> bool:
        """The data has a node-feature table (--features or --node-features)."""
        return self.features or self.node_features is not None

    @classmethod
    def from_args(cls, args, **fields) -> "DatasetSpec":
        """From common.flags.add_dataset_flags' flags and, where the command has them, add_graph_input_flags';
        `fields`: what the command decides itself (a paper preset's dataset, --features, the split's --seed;
        split=None where its --split is not the shares). A bad value is a FlagError naming its flag."""
        from common.datasets.fractions import parse_split_spec
        from common.flags import FlagError

        try:
            text = None if "split" in fields else getattr(args, "split", None)
            kind, split = (None, None) if text is None else parse_split_spec(text)
            ignore = tuple(c.strip() for c in (getattr(args, "ignore_columns", None) or "").split(",") if c.strip())
            read = {
                "dataset": args.dataset,
                "data_dir": args.data_dir,
                "ogb_root": args.ogb_root,
                "planetoid_dir": args.planetoid_dir,
                "split": split,
                "split_kind": kind,
                "ignore_columns": ignore,
                "directed": bool(getattr(args, "directed", False)),
                "relation": getattr(args, "relation", None),
                **{k: getattr(args, k, None) for k in GRAPH_INPUTS},
            }
            read["held_out_max"] = held_out_caps(args.dataset, fields.get("split", split))
            return cls(**{**read, **fields})
        except DatasetError as err:
            raise FlagError(str(err)) from None

    def to_dict(self) -> dict:
        """Plain JSON data: tuples as lists. A manifest's `config` holds these keys at its top level."""
        out = asdict(self)
        out["split"] = None if self.split is None else list(self.split)
        out["ignore_columns"] = list(self.ignore_columns)
        if not self.directed:  # only when set, so the manifests of undirected sets stay as they were
            del out["directed"]
        if self.relation is None:  # likewise: only a typed edge list's config names it
            del out["relation"]
        if self.held_out_max is None:  # a set built before the caps reloads without them (from_dict)
            del out["held_out_max"]
        else:
            out["held_out_max"] = list(self.held_out_max)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "DatasetSpec":
        """From `to_dict`'s keys, ignoring any other (a manifest's `config` holds the preprocess options beside
        them). A key an older manifest lacks (the set predates its option) takes its default; None stands for
        an empty list or 0 as older writers stored them."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if values.get("split") is not None:
            values["split"] = tuple(values["split"])
        values["ignore_columns"] = tuple(values.get("ignore_columns") or ())
        values["valid_pool"] = values.get("valid_pool") or 0
        values["features"] = bool(values.get("features"))
        values["seed"] = values.get("seed") or 0
        values["directed"] = bool(values.get("directed"))
        return cls(**values)


def held_out_caps(dataset: str, split) -> tuple[int, int] | None:
    """The default split's caps on held-out edges (common.datasets.fractions.DEFAULT_VALID_MAX) for an edge list
    split at the default shares (none given, or 85,5,10); None otherwise: shares given are taken as given."""
    from common.datasets.tables import suffix_of

    if suffix_of(dataset) is None or (split is not None and tuple(split) != DEFAULT_SPLIT):
        return None
    return DEFAULT_VALID_MAX, DEFAULT_TEST_MAX
