"""The manifest as readers see it: a typed, frozen `Manifest` built from a manifest.json that
common/manifest_schema.py has validated (common/manifest.py builds it in `parse_manifest`, so a record only
exists for a manifest that passed the schema and its checksum).

Top-level fields are attributes; the per-file records (graphs, shards, sets, eval entries, features, node
ids) stay the JSON objects the schema checked. The resolved preprocess config stays its dict (`config`).
`to_dict()` gives back the JSON as read, `root` included, for the few places that pass it on whole.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Manifest:
    root: str  # the set's directory or URL (added by the reader, not stored)
    num_nodes: int = 0
    n_max: int = 0
    views: int = 1  # training views (0: no train split)
    graphs: dict = field(default_factory=dict)  # "train" / "test" -> {indptr, indices, num_nodes, num_entries}
    files: dict = field(default_factory=dict)  # non-shard file name -> {bytes, sha256}
    shards: list = field(default_factory=list)  # shard records: {name, split, protocol | view, links, tokens, ...}
    sets: list = field(default_factory=list)  # candidate sets: {split, protocol, view, graph, links, shards}
    eval: dict = field(default_factory=dict)  # "split/protocol" -> {queries, kind, metric, positives, ...}
    checksum: str = ""
    dataset: str | None = None
    key: str | None = None  # the cache key (the set's folder name)
    fingerprint: str | None = None  # the dataset's identity: every split array hashed
    config: dict = field(default_factory=dict)  # the resolved preprocess config, as written
    sampling: dict = field(default_factory=dict)  # {d, n}
    protocols: list = field(default_factory=list)  # the eval protocols the set was built for
    features: dict | None = None  # {file, dim[, kinds: {kind: [start, stop]}]}
    node_ids: dict | None = None  # {file, count, dtype}: an edge list's user ids
    targets: dict | None = None  # heuristic estimation: the target's name and normalisation
    split: dict | None = None  # a temporal split: how it was made
    totals: dict | None = None
    # ordered edges (--directed, shard format 3): graphs carry an out-edge CSR; absent (every older set) = False
    directed: bool = False
    # relation names in id order (a typed set, shard format 4); () for every other set
    relations: tuple = ()
    _raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, body: dict, root: str | None = None) -> Manifest:
        """The record of a manifest dict (`root` overrides one recorded in it). Readers get one from
        common.manifest.parse_manifest, which has checked the schema; a partial dict (a test's) takes the
        defaults."""
        raw = {**body, "root": root if root is not None else body.get("root", "")}
        return cls(
            root=raw["root"],
            num_nodes=int(raw.get("num_nodes", 0)),
            n_max=int(raw.get("n_max", 0)),
            views=1 if raw.get("views") is None else int(raw["views"]),
            graphs=raw.get("graphs") or {},
            files=raw.get("files") or {},
            shards=raw.get("shards") or [],
            sets=raw.get("sets") or [],
            eval=raw.get("eval") or {},
            checksum=raw.get("checksum", ""),
            dataset=raw.get("dataset"),
            key=raw.get("key"),
            fingerprint=raw.get("fingerprint"),
            config=raw.get("config") or {},
            sampling=raw.get("sampling") or {},
            protocols=raw.get("protocols") or [],
            features=raw.get("features"),
            node_ids=raw.get("node_ids"),
            targets=raw.get("targets"),
            split=raw.get("split"),
            totals=raw.get("totals"),
            directed=bool(raw.get("directed", False)),
            relations=tuple(raw.get("relations") or ()),
            _raw=raw,
        )

    def to_dict(self) -> dict:
        """The manifest's JSON as read (a copy), with this record's `root`."""
        return {**copy.deepcopy(self._raw), "root": self.root}

    def queries_sha256(self, entry: dict) -> str:
        """The recorded sha256 of an eval entry's queries file (the schema guarantees one)."""
        return self.files[entry["queries"]]["sha256"]

    def queries_path(self, entry: dict) -> str:
        return f"{self.root}/{entry['queries']}"
