"""PENCIL: a plain Transformer (BERT layers, trainer/model/bert.py) over adjacency-row tokens, plus a one-hop residual.

Shapes: T tokens in the packed batch (PackedBatch), B samples, d hidden, n = n_max, E' messages.

    H0 = X~ W0 (+ G(X))                  X~ never built: embedding gather + adjacency sum (trainer/model/propagation.py)
                                         (a directed set: typed rows, out- and in-neighbours in their own blocks)
    for k in 1..K:  Z = BertLayer_k(H)    attention only within each sample (trainer/model/attention.py)
                    H = Z + P_k(Â Z)      Â = D^-1 (A + I) over context tokens: scatter or bmm, by batch
    logit = Linear(2d, 1)(concat(H[u-task], H[v-task]))

See docs/design.md and the paper's Section 3 / Appendix A.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, fields, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from common.manifest_record import Manifest
from trainer.data.packing import PackedBatch
from trainer.data.typed import DIRECTED_TYPES
from trainer.model.attention import BACKENDS, AttentionContext, bert_layer, resolve_backend
from trainer.model.bert import BertLayer
from trainer.model.degree import DegreeInput
from trainer.model.propagation import Propagation, adjacency_embedding, typed_embedding  # noqa: F401
from trainer.model.time_input import TimeInput

TASKS = ("classification", "regression")
# Input-projection initialisations compared in the paper's appendix "Effects of Input Projection Matrix
# Initialization"; orthogonal is the model's default, the other two are ablations.
W0_INITS = ("orthogonal", "gaussian", "low_rank")
W0_GAUSSIAN_MEAN = 0.1  # the paper's mean-shifted Gaussian
W0_LOW_RANK = 5  # the paper's low-rank W0


@dataclass
class ModelConfig:
    n_max: int
    hidden: int
    layers: int
    heads: int
    ffn: int
    dropout: float = 0.1
    num_features: int = 0  # f > 0 adds G = Linear(f, d) + GELU on node features
    task: str = "classification"  # "regression" (heuristic estimation) uses MSE
    attention: str = "auto"
    # Ablation switches (paper appendix); the defaults are PENCIL as published.
    residual: bool = True  # multiplicative residual Z + P(Â Z); False = each block is the plain BertLayer
    w0_init: str = "orthogonal"  # one of W0_INITS
    w0_learnable: bool = False  # the paper freezes W0; True trains it like any other weight
    wpe: bool = False  # learnable word position embeddings (BERT-style, by position in the sequence)
    lrp: int = 1  # LRP-k: k labeled subgraphs per link, pooled DeepSets-style (1 = one subgraph, as published)
    # D > 0 adds to H0 a learned embedding of each token's hop distances to u and to v (trainer/data/distances.py),
    # each clipped to D, "no path" its own value: the structure SEAL's DRNL labels give. 0: PENCIL as published.
    distances: int = 0
    # on the attention probabilities; None: `dropout` (BERT's one value). On CPU the attention with it costs 1.8x
    # the one without at 40 tokens a sample, 4.3-5.1x at 220 (docs/benchmarks/2026-11-29-cpu-epoch.md)
    attention_dropout: float | None = None
    # K typed adjacency blocks of W0 (docs/own-graph.md#directed-graphs): 1 = the undirected adjacency row as published;
    # 2 = a directed set's out- and in-neighbours apart (model_for_shards sets it from the manifest)
    edge_types: int = 1
    # R relation types of a typed set (knowledge graph; docs/own-graph.md#knowledge-graphs-and-relation-types): each
    # link's target relation gets a learned vector on its task tokens and on the pair before the head; edge_types
    # is then 2R. 0 = untyped: no parameter, no change
    relations: int = 0
    # D > 0 adds to H0 a learned embedding of each token's node degree in the training graph, floor(log2(1 + deg))
    # clipped to D, out and in apart on a directed or typed set (trainer/model/degree.py). 0: PENCIL as published.
    degrees: int = 0
    degree_steps: int = 1  # buckets per doubling of 1 + degree: floor(S log2(1 + deg)) clipped to `degrees`
    # a temporal set's node activity just before each link is asked (trainer/model/time_input.py); False: none
    time_features: bool = False
    peer_features: bool = False  # with time_features: each token's lift among the head's peers (trainer/data/peers.py)

    @property
    def attn_dropout(self) -> float:
        """The dropout the attention probabilities get: attention_dropout, or dropout when it is None."""
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    def __post_init__(self):
        for name in ("n_max", "hidden", "layers", "heads", "ffn"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"ModelConfig.{name} must be a positive integer, got {v!r}")
        if self.n_max < 2:
            raise ValueError(f"ModelConfig.n_max must be >= 2 (u and v), got {self.n_max}")
        if self.hidden % self.heads:
            raise ValueError(f"ModelConfig.hidden ({self.hidden}) must be divisible by heads ({self.heads})")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"ModelConfig.dropout must be in [0, 1), got {self.dropout}")
        if self.attention_dropout is not None and not 0.0 <= self.attention_dropout < 1.0:
            raise ValueError(f"ModelConfig.attention_dropout must be in [0, 1) or None, got {self.attention_dropout}")
        if not isinstance(self.num_features, int) or self.num_features < 0:
            raise ValueError(f"ModelConfig.num_features must be an integer >= 0, got {self.num_features!r}")
        if self.task not in TASKS:
            raise ValueError(f"ModelConfig.task must be one of {TASKS}, got {self.task!r}")
        if self.attention not in BACKENDS:
            raise ValueError(f"ModelConfig.attention must be one of {BACKENDS}, got {self.attention!r}")
        if self.w0_init not in W0_INITS:
            raise ValueError(f"ModelConfig.w0_init must be one of {W0_INITS}, got {self.w0_init!r}")
        ints = (("lrp", 1), ("edge_types", 1), ("relations", 0), ("distances", 0), ("degrees", 0), ("degree_steps", 1))
        for name, low in ints:
            if not isinstance(v := getattr(self, name), int) or isinstance(v, bool) or v < low:
                raise ValueError(f"ModelConfig.{name} must be an integer >= {low}, got {v!r}")
        if self.relations and self.edge_types != 2 * self.relations:
            want = 2 * self.relations
            raise ValueError(f"ModelConfig.edge_types must be 2 x relations = {want}, got {self.edge_types}")
        for name in ("residual", "w0_learnable", "wpe", "time_features", "peer_features"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"ModelConfig.{name} must be a bool, got {getattr(self, name)!r}")
        if self.peer_features and not self.time_features:
            raise ValueError("ModelConfig.peer_features reads the time input's clock: set time_features too")

    @classmethod
    def from_preset(cls, preset, **overrides) -> "ModelConfig":
        """From a common.presets.Preset (or its name); keyword overrides win (e.g. num_features=…)."""
        if isinstance(preset, str):
            from common.presets import get_preset

            preset = get_preset(preset)
        base = dict(
            n_max=preset.n_max,
            hidden=preset.hidden,
            layers=preset.layers,
            heads=preset.heads,
            ffn=preset.ffn,
            dropout=preset.dropout,
        )
        known = {f.name for f in fields(cls)}
        if bad := sorted(set(overrides) - known):
            raise ValueError(f"ModelConfig.from_preset: unknown field(s) {bad}")
        return cls(**{**base, **overrides})

    def replace(self, **kw) -> "ModelConfig":
        return replace(self, **kw)


class EncoderLayer(nn.Module):
    """Z = BertLayer(H); H' = Z + P(Â Z). Without the residual (ablation) H' = Z: no P_k exists at all,
    so the block is exactly the plain BertLayer, parameters included."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.bert = BertLayer(cfg.hidden, cfg.heads, cfg.ffn, cfg.dropout, cfg.attn_dropout)
        self.prop = (
            nn.Sequential(nn.Linear(cfg.hidden, cfg.hidden), nn.GELU())  # P_k, row-wise
            if cfg.residual
            else None
        )

    def forward(self, h: torch.Tensor, ctx: AttentionContext, graph: "Propagation") -> torch.Tensor:
        z = bert_layer(self.bert, h, ctx)  # (T, d)
        return z if self.prop is None else z + self.prop(graph(z))


def compiler_missing() -> str | None:
    """Why torch.compile cannot build kernels here, or None: inductor compiles C++ on CPU and Triton compiles a
    C launcher on GPU, both with the system's compiler (a slim GPU image may have none)."""
    names = [os.environ.get("CXX"), os.environ.get("CC"), "g++", "gcc", "c++", "cc", "clang++", "clang"]
    if any(n and shutil.which(n) for n in names):
        return None
    return "torch.compile needs a C/C++ compiler and none is on PATH (tried $CXX, $CC, g++, gcc, c++, cc, clang)"


def compile_refusal() -> str | None:
    """The one-line error for --compile where it cannot work, or None (trainer start-up and compile_blocks)."""
    missing = compiler_missing()
    return None if missing is None else f"--compile: {missing}; install gcc (or clang), or run without --compile"


def init_w0(w0: torch.Tensor, kind: str) -> torch.Tensor:
    """Fill W0 (rows, d) in place with one of W0_INITS.

    The two ablations keep the orthogonal init's per-entry scale (std 1 / sqrt(max(rows, d))), so they
    differ from it only in what the paper varies: a common mean of 0.1 on every entry (embeddings no
    longer zero-mean, rows far from orthogonal), or rank 5 (U V^T with orthonormal U (rows, 5) and
    V (d, 5): at most 5 mutually orthogonal token directions).
    """
    rows, d = w0.shape
    with torch.no_grad():
        if kind == "orthogonal":
            nn.init.orthogonal_(w0, gain=1.0)
        elif kind == "gaussian":
            nn.init.normal_(w0, mean=W0_GAUSSIAN_MEAN, std=max(rows, d) ** -0.5)
        elif kind == "low_rank":
            r = min(W0_LOW_RANK, rows, d)
            u, v = torch.empty(rows, r), torch.empty(d, r)
            nn.init.orthogonal_(u)
            nn.init.orthogonal_(v)
            w0.copy_(u @ v.T)
        else:
            raise ValueError(f"w0_init must be one of {W0_INITS}, got {kind!r}")
    return w0


def distance_rows(dist: torch.Tensor, max_distance: int) -> torch.Tensor:
    """(T,) row of the joint (du, dv) embedding for (T, 2) hop distances: each clipped to max_distance, "no
    path" (-1) the value max_distance + 1, row = du' * (max_distance + 2) + dv'; (max_distance + 2)^2 rows."""
    clipped = torch.where(dist < 0, max_distance + 1, dist.clamp(max=max_distance))
    return clipped[:, 0] * (max_distance + 2) + clipped[:, 1]


def token_positions(batch: PackedBatch) -> torch.Tensor:
    """(T,) position of every token within its own sequence: context tokens 0..N_b-1 (= local id),
    then the two task tokens N_b, N_b + 1; what BERT's word position embeddings index."""
    seqlens = (batch.cu_seqlens[1:] - batch.cu_seqlens[:-1]).long()
    # output_size: no device-to-host sync to size the result
    starts = torch.repeat_interleave(batch.cu_seqlens[:-1].long(), seqlens, output_size=batch.num_tokens)
    return torch.arange(batch.num_tokens, device=starts.device) - starts


class Pencil(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        n, d = cfg.n_max, cfg.hidden
        # W0 rows: [0, n) one-hot ids | [n, (1 + K) n) adjacency columns, one block of n per edge type (K = 1:
        # the undirected row, exactly the published 2n + 2 rows) | (1 + K) n + role. Orthogonal (gain 1) and frozen
        # as in the reference; a frozen Parameter (not a buffer) so it is saved with the model but DDP does
        # not re-broadcast it every step and optimisers skip it (no grad). Ablations: init and learnability.
        self.w0 = nn.Parameter(torch.empty((1 + cfg.edge_types) * n + 2, d), requires_grad=cfg.w0_learnable)
        init_w0(self.w0, cfg.w0_init)
        # WPE ablation: learnable absolute positions as in BERT's embeddings (N(0, 0.02) init), one per
        # position of the longest sequence, N_max context tokens + 2 task tokens.
        self.wpe = nn.Embedding(n + 2, d) if cfg.wpe else None
        if self.wpe is not None:
            nn.init.normal_(self.wpe.weight, std=0.02)
        self.features = nn.Sequential(nn.Linear(cfg.num_features, d), nn.GELU()) if cfg.num_features else None  # G
        # Hop distances to u and v, one learned vector per clipped (du, dv) pair, at W0's row scale (norm ~1)
        self.distance = nn.Embedding((cfg.distances + 2) ** 2, d) if cfg.distances else None
        if self.distance is not None:
            nn.init.normal_(self.distance.weight, std=d**-0.5)
        self.blocks = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.layers))
        # LRP-k (paper appendix "Effect of Multiple Labeled Subgraphs"): DeepSets over the k labeled subgraphs
        # of a link, rho(mean_j phi(pair_j)) with phi = Linear + GELU and rho = the head. Absent for k = 1.
        self.lrp_phi = nn.Sequential(nn.Linear(2 * d, 2 * d), nn.GELU()) if cfg.lrp > 1 else None
        self.head = nn.Linear(2 * d, 1)
        # a typed set's target relation: on the task tokens (the Transformer reads it) and on the pair (the head);
        # created only then, so an untyped model's parameters and random stream are as before
        self.relation = nn.Embedding(cfg.relations, d) if cfg.relations else None
        self.relation_pair = nn.Embedding(cfg.relations, 2 * d) if cfg.relations else None
        if self.relation is not None:
            nn.init.normal_(self.relation.weight, std=d**-0.5)
            nn.init.normal_(self.relation_pair.weight, std=0.02)
        # created last, and only then: a model without it has the parameters and random stream it always had
        kinds = 1 if cfg.edge_types == 1 else 2
        self.degree = DegreeInput(cfg.degrees, kinds, d, cfg.degree_steps) if cfg.degrees else None
        self.time = TimeInput(d, cfg.peer_features) if cfg.time_features else None
        # The dataset's feature table, attached by the trainer / scorer (not saved: it is data, and it
        # ships with the shard set). Used whenever forward() gets no explicit node_features.
        self.register_buffer("node_table", None, persistent=False)
        self._resolved: dict[str, str] = {}
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        self.attention_backend = self._backend(dev)  # what the trainer reports at start-up

    def attach_features(self, table: torch.Tensor) -> "Pencil":
        """Keep the (N, F) node-feature table on the model's device for every later forward."""
        if self.features is None:
            raise ValueError("attach_features: the model was built with num_features = 0")
        if table.ndim != 2 or table.shape[1] != self.cfg.num_features:
            raise ValueError(
                f"attach_features: expected an (N, {self.cfg.num_features}) table, got {tuple(table.shape)}"
            )
        self.node_table = table.to(self.w0.device, torch.float32)
        return self

    def set_attention(self, name: str) -> "Pencil":
        """Switch the attention backend (same weights); e.g. 'reference' vs 'sdpa' in parity tests."""
        self.cfg = self.cfg.replace(attention=name)
        self._resolved.clear()
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        self.attention_backend = self._backend(dev)
        return self

    def compile_blocks(self) -> "Pencil":
        """torch.compile(dynamic=True) of every block's dense per-token work (`--compile`): BERT's
        attention-output dense + dropout + LayerNorm(x + h), the feed-forward (dense + GELU, dense + dropout
        + LayerNorm), and P_k: memory-bound pointwise chains that a compiler fuses into fewer kernels and
        fewer host calls (bench.compile times them alone, bench.trainer --compile whole steps). The attention
        kernel and the graph scatter stay eager: custom kernels whose work depends on the batch's lengths.
        Each submodule is compiled in place (nn.Module.compile), so parameter names, state dicts and
        checkpoints are unchanged, and every layer of one kind shares one compiled graph per mode (train /
        eval, autocast or not); dynamic shapes, so a new token count does not recompile."""
        if refusal := compile_refusal():
            raise ValueError(refusal)
        for block in self.blocks:
            bert = block.bert
            for sub in (bert.attention.output, bert.intermediate, bert.output, block.prop):
                if sub is not None:
                    sub.compile(dynamic=True)
        return self

    def _backend(self, device_type: str) -> str:
        if device_type not in self._resolved:
            self._resolved[device_type] = resolve_backend(self.cfg.attention, device_type, self.cfg.attn_dropout)
        return self._resolved[device_type]

    # ------------------------------------------------------------------ pieces (public for tests)
    def embed(self, batch: PackedBatch, node_features: torch.Tensor | None = None) -> torch.Tensor:
        """H0 = X~ W0 (+ G(X)): (T, d), the dense product computed as gathers and one sparse sum."""
        n, w0 = self.cfg.n_max, self.w0
        if batch.n_max > n:
            raise ValueError(f"batch was packed for n_max = {batch.n_max} > model n_max = {n}")
        K = self.cfg.edge_types
        h = F.embedding(batch.local_id, w0) + F.embedding((1 + K) * n + batch.role, w0)  # one-hot id + role flag
        if K == 1:
            h = h + adjacency_embedding(batch, w0[n : 2 * n])  # adjacency row (sparse or dense form, by batch)
        else:  # typed rows: Σ_k Σ_{j ∈ N_k(i)} W0[n + k n + j] (direction: out- and in-neighbours)
            h = h + typed_embedding(batch, w0[n : (1 + K) * n].view(K, n, -1))
        if self.distance is not None:
            if batch.dist is None:
                raise ValueError(
                    "the model reads hop distances (distances > 0) but the batch carries none; "
                    "pack it with distances (BatchPacker(distances=True))"
                )
            h = h + self.distance(distance_rows(batch.dist, self.cfg.distances))
        if self.relation is not None:
            h = h + self.relation_tokens(batch)
        if self.degree is not None:
            h = h + self.degree(batch)
        if self.time is not None:
            h = h + self.time(batch)
        if node_features is None:
            node_features = self.node_table
        if self.features is not None:
            if node_features is None:
                raise ValueError(f"model has num_features = {self.cfg.num_features} but no node_features were given")
            if node_features.shape[-1] != self.cfg.num_features:
                raise ValueError(
                    f"node_features have {node_features.shape[-1]} columns, "
                    f"model expects num_features = {self.cfg.num_features}"
                )
            x = node_features[batch.node.to(node_features.device)].to(h.device)  # task tokens copy u / v
            h = h + self.features(x.to(self.features[0].weight.dtype))
        elif node_features is not None:
            raise ValueError("node_features given but the model was built with num_features = 0")
        return h

    def relation_tokens(self, batch: PackedBatch) -> torch.Tensor:
        """(T, d): each task token's link relation vector, zero on context tokens (a typed model)."""
        if batch.relation is None:
            raise ValueError("the model reads link relations (a typed set's) but the batch carries none")
        rel = torch.repeat_interleave(
            batch.relation, (batch.cu_seqlens[1:] - batch.cu_seqlens[:-1]).long(), output_size=batch.num_tokens
        )
        return self.relation(rel) * batch.role[:, None].to(self.relation.weight.dtype)

    def encode(self, batch: PackedBatch, node_features: torch.Tensor | None = None) -> torch.Tensor:
        """Final token states H^(K): (T, d)."""
        backend = self._backend(batch.local_id.device.type)
        self.attention_backend = backend
        ctx = AttentionContext.build(backend, batch)
        graph = Propagation(batch)
        h = self.embed(batch, node_features)
        if self.wpe is not None:  # ablation: sequence positions, which the default model omits
            h = h + self.wpe(token_positions(batch))
        for block in self.blocks:
            h = block(h, ctx, graph)
        return h

    def forward(self, batch: PackedBatch, node_features: torch.Tensor | None = None) -> torch.Tensor:
        """(L,) one output per link; L = B / k, the batch holding each link's k labeled subgraphs in a row."""
        k = self.cfg.lrp
        if batch.copies != k:
            raise ValueError(f"batch holds {batch.copies} labeled subgraph(s) per link, the model pools lrp = {k}")
        h = self.encode(batch, node_features)  # (T, d)
        pair = h[batch.task_index].flatten(1)  # (B, 2d): [u-task | v-task]
        if self.relation_pair is not None:
            pair = pair + self.relation_pair(batch.relation)
        if self.lrp_phi is not None:
            pair = self.lrp_phi(pair).view(-1, k, pair.shape[1]).mean(1)  # (B/k, 2d): a permutation-invariant set
        return self.head(pair).squeeze(-1)  # (L,)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        labels = labels.to(logits.dtype)
        if self.cfg.task == "regression":
            return F.mse_loss(logits.float(), labels.float())
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())

    def num_parameters(self, trainable_only: bool = True) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)


def model_for_shards(preset, overrides: dict, manifest: Manifest) -> Pencil:
    """The model a shard set calls for: N_max from its manifest, its node features (if it was built
    with --features or --node-features, and unless overrides["features"] is False) attached, and its task
    (regression on a --targets set), so training and scoring build the same thing."""
    from common.shards import load_features
    from trainer.data.degrees import train_degrees

    overrides = dict(overrides)
    use_features = overrides.pop("features", None) is not False
    table = load_features(manifest) if use_features else None
    num_features = 0 if table is None else int(table.shape[1])
    task = "regression" if manifest.targets else "classification"
    # a directed set's model reads out- and in-neighbours apart; an undirected one is built exactly as before
    typed = {"edge_types": DIRECTED_TYPES} if manifest.directed else {}
    if manifest.relations:  # a typed set: out / in per relation, and the link's relation
        typed = {"edge_types": 2 * len(manifest.relations), "relations": len(manifest.relations)}
    cfg = ModelConfig.from_preset(
        preset, **{**overrides, "n_max": manifest.n_max, "num_features": num_features, "task": task, **typed}
    )
    model = Pencil(cfg)
    if table is not None:
        model.attach_features(torch.from_numpy(table))
    if model.degree is not None:  # the degrees of the set's training graph (trainer/data/degrees.py)
        model.degree.attach(train_degrees(manifest, model.degree.kinds))
    if model.time is not None:  # the clocks of the set's graphs (trainer/data/clock.py), and the peers' (peers.py)
        model.time.attach_set(manifest, table)
    return model
