"""The settings of a service: one record for the command's flags, a Serve config file's `args`, and what the
two applications' replicas are built with (pipelines/serve/app.py)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields, replace

from pipelines.recommend.engine import RecConfig
from pipelines.serve.handlers import Limits, read_token, token_digest

OWNER_KEYS = ("shards", "graph", "state", "max_edges", "dataset", "features")


@dataclass(frozen=True)
class Settings:
    checkpoint: str = ""  # the run folder or .pt file the replicas load
    state: str = ""  # the folder of the edit log (the graph owner's)
    shards: str = ""  # the run's shard set: the graph owner loads the graph from it, never the model
    graph: str = "all"  # every edge of every split (common.snapshot): no recommendation is an edge the user has
    dataset: str | None = None  # the run's edge list where it is now, when it moved (--dataset)
    features: bool = False  # the model reads node features: the graph holds the run's, a new node comes with its row
    graph_app: str = "pencil-graph"
    replicas: int = 1
    replica_cpus: float = 1.0
    device: str = "auto"
    k: int = RecConfig.k
    pool: int = RecConfig.pool
    retriever: str = RecConfig.retriever
    orderings: int = RecConfig.orderings
    seed: int = RecConfig.seed
    prior_weight: float = RecConfig.prior_weight
    batch_size: int = RecConfig.batch_size
    token_budget: int | None = None
    max_pairs: int = Limits.max_pairs
    max_edges: int = Limits.max_edges
    max_k: int = Limits.max_k
    max_pool: int = Limits.max_pool
    max_body_bytes: int = Limits.max_body_bytes
    max_batch: int = 32  # requests batched into one forward pass
    batch_wait_ms: float = 2.0  # how long a batch waits for more requests after its first
    token_file: str | None = None
    token_sha256: str | None = None

    @property
    def max_new_nodes(self) -> int:
        """How far one edit may grow a graph named 0..N-1: as many new nodes as its pairs could name."""
        return 2 * self.max_edges

    @classmethod
    def from_dict(cls, config: dict) -> "Settings":
        """Settings from a config file's `args` (or the command's flags); a bad one is a ValueError naming it."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(config) - set(known))
        if unknown:
            raise ValueError(f"unknown setting '{unknown[0]}'; the settings are {', '.join(known)}")
        values = {}
        for name, value in config.items():
            default = getattr(cls, name)
            if value is None or default is None or isinstance(default, str):
                values[name] = value
                continue
            try:
                values[name] = type(default)(value)
            except (TypeError, ValueError):
                raise ValueError(f"setting '{name}': expected a {type(default).__name__}, got {value!r}") from None
        s = cls(**values)
        s.validate()
        return s

    def validate(self) -> None:
        RecConfig(
            k=self.k,
            pool=self.pool,
            retriever=self.retriever,
            orderings=self.orderings,
            batch_size=self.batch_size,
            prior_weight=self.prior_weight,
        )  # its checks, its messages
        for name in ("replicas", "max_pairs", "max_edges", "max_k", "max_pool", "max_body_bytes", "max_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(self, name)}")
        if self.replica_cpus <= 0 or self.batch_wait_ms < 0:
            raise ValueError("--replica-cpus must be > 0 and --batch-wait-ms >= 0")
        if self.k > self.max_k or self.pool > self.max_pool:
            raise ValueError(
                f"--k {self.k} / --pool {self.pool}: above --max-k {self.max_k} / --max-pool {self.max_pool}"
            )

    def with_token(self, environ=os.environ) -> "Settings":
        """The token's digest from --token-file or PENCIL_SERVE_TOKEN (read here, in the process that builds
        the application); the token itself goes no further."""
        if self.token_sha256 is not None:
            return self
        token = read_token(self.token_file, environ)
        return replace(self, token_sha256=None if token is None else token_digest(token))

    def owner_dict(self) -> dict:
        """The graph owner's settings; `features` only when the model reads them."""
        return {k: getattr(self, k) for k in OWNER_KEYS if getattr(self, k) not in (None, False)}

    def service_dict(self) -> dict:
        """The replicas' settings; `shards` among them: a replica loads its run from that set (moved or not)."""
        return {k: v for k, v in asdict(self).items() if k not in ("state", "token_file")}

    def check_run(self) -> None:
        """The run as the applications will load it, checked where `serve run` / `serve deploy` builds them,
        before anything is deployed: the checkpoint, its shard set (the run's data) and the edge list where the
        settings say. Serve retries a replica whose constructor fails; a builder that raises fails the
        application once, with this one line."""
        from common.shards import ShardError, read_manifest
        from pipelines.core.runs import load_checkpoint, resolve_checkpoint, run_edge_list_problem, run_manifest

        try:
            if self.checkpoint:  # the replicas'
                path = resolve_checkpoint(self.checkpoint, "setting 'checkpoint'")
                manifest = run_manifest(load_checkpoint(path, "setting 'checkpoint'"), path, self.shards or None)
            else:  # the graph owner's: the set only
                manifest = read_manifest(self.shards)
        except ShardError as err:
            raise ValueError(str(err)) from None
        if problem := run_edge_list_problem(manifest, self.dataset, "setting 'dataset'"):
            raise ValueError(problem)
