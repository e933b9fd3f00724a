"""GNN link-prediction baselines (the GCN / SAGE rows of the paper's Tables 1-2, and GAT of its latent-space
appendix): a PyG encoder over the FULL training graph plus a pair decoder, trained full-graph.

    H = Encoder(X, edge_index)            GCNConv | SAGEConv (mean) | GATConv, ReLU + dropout between layers
    logit(u, v) = <H_u, H_v>              "dot" decoder
                | MLP(H_u * H_v)           "mlp" decoder (HeaRT's LinkPredictor: Hadamard product, then an MLP)

X is the dataset's node features where it has them, else a constant column of ones (the paper's
"all-ones node inputs"): the model then sees structure only. Layers take a plain edge_index (no
SparseTensor), because pyg-lib / torch-sparse are not installable everywhere.

Training is the benchmark's usual full-graph regime, unlike PENCIL's per-link subgraph stream: every step
encodes the whole graph once and scores a mini-batch of training positives against as many uniform random
node pairs (fresh each step). Evaluation encodes each split's graph (`dataset.graph_for(split)`) once and
ranks every distinct candidate with `common.metrics.evaluate`, so numbers are comparable with PENCIL's;
the run keeps the epoch with the best validation metric and reports test there.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from common.datasets.base import LinkDataset
from common.graph import Graph
from common.metrics import evaluate, unique_pairs

log = logging.getLogger(__name__)
ENCODERS = ("gcn", "sage", "gat")
DECODERS = ("dot", "mlp")


class GNNConfigError(ValueError):
    """A bad GNN setting; the message names the field (the CLI flag of the same name) and the fix."""


@dataclass
class GNNConfig:
    encoder: str = "gcn"
    decoder: str = "mlp"
    hidden: int = 128
    layers: int = 2
    heads: int = 4  # GAT only: hidden is split over heads in all but the last layer
    dropout: float = 0.5
    decoder_layers: int = 3  # MLP decoder depth (HeaRT's num_layers_predictor)
    lr: float = 0.01
    weight_decay: float = 0.0
    epochs: int = 100
    batch_size: int = 1024  # training positives per step (and as many random negatives)
    eval_every: int = 5
    use_features: bool = True  # False: constant inputs even if the dataset has features

    def __post_init__(self):
        if self.encoder not in ENCODERS:
            raise GNNConfigError(f"encoder: must be one of {', '.join(ENCODERS)}, got '{self.encoder}'")
        if self.decoder not in DECODERS:
            raise GNNConfigError(f"decoder: must be one of {', '.join(DECODERS)}, got '{self.decoder}'")
        for name in ("hidden", "layers", "heads", "decoder_layers", "epochs", "batch_size", "eval_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise GNNConfigError(f"{name}: must be a positive integer, got {v!r}")
        if self.encoder == "gat" and self.hidden % self.heads:
            raise GNNConfigError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads}) for GAT")
        if not 0 <= self.dropout < 1:
            raise GNNConfigError(f"dropout: must be in [0, 1), got {self.dropout}")
        if self.lr <= 0 or self.weight_decay < 0:
            raise GNNConfigError(f"lr must be > 0 and weight_decay >= 0, got {self.lr}, {self.weight_decay}")

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------- model
def _conv(kind: str, d_in: int, d_out: int, heads: int, last: bool) -> nn.Module:
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv

    if kind == "gcn":
        return GCNConv(d_in, d_out, cached=False)  # symmetric normalisation with self-loops
    if kind == "sage":
        return SAGEConv(d_in, d_out, aggr="mean")
    # GAT: heads concatenated in hidden layers (d_out / heads each), one head at the output
    return GATConv(d_in, d_out, heads=1) if last else GATConv(d_in, d_out // heads, heads=heads)


class GNNLinkPredictor(nn.Module):
    def __init__(self, cfg: GNNConfig, in_features: int):
        super().__init__()
        self.cfg = cfg
        dims = [in_features] + [cfg.hidden] * cfg.layers
        self.convs = nn.ModuleList(
            _conv(cfg.encoder, a, b, cfg.heads, i == cfg.layers - 1)
            for i, (a, b) in enumerate(zip(dims[:-1], dims[1:]))
        )
        if cfg.decoder == "mlp":
            mlp: list[nn.Module] = []
            for _ in range(cfg.decoder_layers - 1):
                mlp += [nn.Linear(cfg.hidden, cfg.hidden), nn.ReLU(), nn.Dropout(cfg.dropout)]
            self.mlp = nn.Sequential(*mlp, nn.Linear(cfg.hidden, 1))
        else:
            self.mlp = None

    def encode(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """(N, F) inputs -> (N, hidden) node states."""
        h = x
        for i, conv in enumerate(self.convs):
            h = conv(h, edge_index)
            if i < len(self.convs) - 1:
                h = F.dropout(F.relu(h), self.cfg.dropout, self.training)
        return h

    def decode(self, h: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        """(M, 2) node pairs -> (M,) logits."""
        prod = h[pairs[:, 0]] * h[pairs[:, 1]]
        return prod.sum(-1) if self.mlp is None else self.mlp(prod).squeeze(-1)


# ---------------------------------------------------------------------------- data
def edge_index(graph: Graph, device) -> torch.Tensor:
    """(2, 2E) both directions of every undirected edge, straight from the CSR arrays."""
    src = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), graph.degree)
    return torch.from_numpy(np.stack([src, graph.indices.astype(np.int64)])).to(device)


def node_inputs(dataset: LinkDataset, use_features: bool, device) -> torch.Tensor:
    """The dataset's features, or a constant ones column (structure only)."""
    if use_features and dataset.x is not None:
        return torch.from_numpy(np.asarray(dataset.x, dtype=np.float32)).to(device)
    return torch.ones(dataset.num_nodes, 1, device=device)


def train_positives(dataset: LinkDataset) -> np.ndarray:
    """Training positives as the training graph has them: undirected, deduplicated, no self-loops."""
    return dataset.graph.edge_array()


# ---------------------------------------------------------------------------- training and evaluation
@torch.no_grad()
def evaluate_split(model: GNNLinkPredictor, dataset: LinkDataset, x: torch.Tensor, split: str, protocol: str) -> dict:
    """Rank the split's positives against its protocol negatives; every distinct pair is scored once."""
    model.eval()
    sp = dataset.splits[split]
    h = model.encode(x, edge_index(dataset.graph_for(split), x.device))
    pos, neg = sp.pos, sp.negatives(protocol)
    uniq, inverse = unique_pairs(np.concatenate([pos.reshape(-1, 2), neg.reshape(-1, 2)]))
    scores = model.decode(h, torch.from_numpy(uniq).to(x.device)).float().cpu().numpy()
    flat = scores[inverse]
    return evaluate(protocol, flat[: len(pos)], flat[len(pos) :].reshape(neg.shape[:-1]))


def fit(
    dataset: LinkDataset,
    cfg: GNNConfig,
    protocols: list[str],
    seed: int,
    device: str | None = None,
    keep_model: bool = False,
) -> dict:
    """Train one seed, evaluating every protocol on the same training run (they share the training set).

    Returns {protocol: {best_epoch, valid, test (at that protocol's best validation epoch), ...}} plus
    "history" and run facts; model selection is per protocol, on its own validation metric. keep_model:
    also "model" (at the first protocol's best validation epoch, eval mode) and "inputs_tensor" (its x).
    """
    device = torch.device(
        "cuda" if device == "cuda" or (device in (None, "auto") and torch.cuda.is_available()) else "cpu"
    )
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    x = node_inputs(dataset, cfg.use_features, device)
    ei = edge_index(dataset.graph, device)
    model = GNNLinkPredictor(cfg, x.shape[1]).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    pos_all = train_positives(dataset)
    best = {
        p: {"best_epoch": None, "valid": None, "test": None, "selection_metric": dataset.selection_metric(p)}
        for p in protocols
    }
    history, t0, kept = [], time.perf_counter(), None
    for epoch in range(1, cfg.epochs + 1):
        loss = _train_epoch(model, opt, (x, ei), pos_all, dataset.num_nodes, cfg.batch_size, rng)
        if epoch % cfg.eval_every and epoch != cfg.epochs:
            continue
        record = {"epoch": epoch, "loss": loss}
        for p in protocols:
            metric = best[p]["selection_metric"]
            valid = evaluate_split(model, dataset, x, "valid", p)
            record[p] = {"valid": valid}
            if best[p]["valid"] is None or valid[metric] > best[p]["valid"][metric]:
                test = evaluate_split(model, dataset, x, "test", p)  # test only where it can be reported
                best[p].update(best_epoch=epoch, valid=valid, test=test)
                record[p]["test"] = test
                if keep_model and p == protocols[0]:
                    kept = {k: t.detach().clone() for k, t in model.state_dict().items()}
            log.info(
                "%s seed %d epoch %d: loss %.4f %s valid %s %.2f",
                cfg.encoder,
                seed,
                epoch,
                loss,
                p,
                metric,
                100 * valid[metric],
            )
        history.append(record)
    out = {
        "protocols": best,
        "history": history,
        "train_time_s": time.perf_counter() - t0,
        "num_parameters": sum(q.numel() for q in model.parameters()),
        "config": cfg.to_dict(),
        "inputs": "features" if x.shape[1] > 1 else "constant",
    }
    if keep_model:
        model.load_state_dict(kept)
        out.update(model=model.eval(), inputs_tensor=x)
    return out


def _train_epoch(model, opt, inputs: tuple, pos_all: np.ndarray, num_nodes: int, batch_size: int, rng) -> float:
    """One pass over the training positives in shuffled mini-batches, one random negative each; `inputs`: the
    node inputs and the edge index the model encodes, (x, ei)."""
    x, ei = inputs
    model.train()
    order = rng.permutation(len(pos_all))
    total, steps = 0.0, 0
    for s in range(0, len(order), batch_size):
        pos = torch.from_numpy(pos_all[order[s : s + batch_size]]).to(x.device)
        neg = torch.randint(0, num_nodes, pos.shape, device=x.device)  # uniform pairs, as HeaRT trains
        h = model.encode(x, ei)  # full graph every step: dropout differs per step
        logits = model.decode(h, torch.cat([pos, neg]))
        labels = torch.cat([torch.ones(len(pos)), torch.zeros(len(neg))]).to(logits.device)
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total, steps = total + float(loss.detach()), steps + 1
    return total / max(1, steps)


def count_parameters(cfg: GNNConfig, in_features: int) -> int:
    return sum(p.numel() for p in GNNLinkPredictor(cfg, in_features).parameters())


__all__ = [
    "GNNConfig",
    "GNNConfigError",
    "GNNLinkPredictor",
    "fit",
    "evaluate_split",
    "edge_index",
    "node_inputs",
    "ENCODERS",
    "DECODERS",
    "count_parameters",
]


# ---------------------------------------------------------------------------- pairwise heuristic estimation
# The paper's "Pairwise Heuristic Estimation" baselines: the same GNN layers, run on each candidate's own
# sampled subgraph (the very subgraphs PENCIL reads) instead of the full graph, all-ones inputs, and a
# regression head on [h_u | h_v]. The ID-GNN variant (`mark_query`) appends two indicator columns that
# mark u and v, the "explicit markers for the query nodes" of identity-aware GNNs.
@dataclass
class SubgraphBatch:
    """B link subgraphs as one disjoint graph: nodes in local-id order per link (u first, v second)."""

    num_nodes: int  # sum N_b
    edge_index: torch.Tensor  # (2, 2E) both directions, global positions in the batch
    query: torch.Tensor  # (B, 2) positions of u and v
    target: torch.Tensor  # (B,) float32 regression targets


def subgraph_batch(
    node_ptr: np.ndarray, edge_ptr: np.ndarray, edges: np.ndarray, target: np.ndarray, device
) -> SubgraphBatch:
    """From a block's (node_ptr (B+1,), edge_ptr (B+1,), local edges (E, 2), targets (B,)): offsets each
    link's local ids by its first node's position, vectorised over the block."""
    node_ptr = np.asarray(node_ptr, dtype=np.int64)
    offset = np.repeat(node_ptr[:-1] - node_ptr[0], np.diff(np.asarray(edge_ptr, dtype=np.int64)))
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2) + offset[:, None]
    ei = np.concatenate([e, e[:, ::-1]]).T
    start = node_ptr[:-1] - node_ptr[0]
    return SubgraphBatch(
        int(node_ptr[-1] - node_ptr[0]),
        torch.from_numpy(np.ascontiguousarray(ei)).to(device),
        torch.from_numpy(np.stack([start, start + 1], axis=1)).to(device),
        torch.as_tensor(target, dtype=torch.float32).to(device),
    )


class SubgraphRegressor(nn.Module):
    """GNN on sampled subgraphs -> scalar per link: Linear(2 hidden, 1) on [h_u | h_v] (as PENCIL's head)."""

    def __init__(self, cfg: GNNConfig, mark_query: bool):
        super().__init__()
        self.mark_query = mark_query
        self.gnn = GNNLinkPredictor(replace(cfg, decoder="dot"), 3 if mark_query else 1)
        self.head = nn.Linear(2 * cfg.hidden, 1)

    def inputs(self, b: SubgraphBatch) -> torch.Tensor:
        x = torch.ones(b.num_nodes, 3 if self.mark_query else 1, device=b.target.device)
        if self.mark_query:
            x[:, 1:] = 0
            x[b.query[:, 0], 1] = 1  # u marker
            x[b.query[:, 1], 2] = 1  # v marker
        return x

    def forward(self, b: SubgraphBatch) -> torch.Tensor:
        h = self.gnn.encode(self.inputs(b), b.edge_index)
        return self.head(torch.cat([h[b.query[:, 0]], h[b.query[:, 1]]], dim=1)).squeeze(-1)


def fit_regression(
    cfg: GNNConfig,
    mark_query: bool,
    train: list[SubgraphBatch],
    valid: list[SubgraphBatch],
    test: list[SubgraphBatch],
    seed: int,
) -> dict:
    """MSE training over pre-built batches (shuffled per epoch); RMSE on valid every eval_every epochs,
    test RMSE at the best (lowest) validation RMSE."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    device = train[0].target.device
    model = SubgraphRegressor(cfg, mark_query).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    best = {"best_epoch": None, "valid_rmse": float("inf"), "test_rmse": None}
    history = []
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        for i in rng.permutation(len(train)):
            loss = F.mse_loss(model(train[i]), train[i].target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if epoch % cfg.eval_every and epoch != cfg.epochs:
            continue
        v = rmse(model, valid)
        history.append({"epoch": epoch, "valid_rmse": v})
        if v < best["valid_rmse"]:
            best = {"best_epoch": epoch, "valid_rmse": v, "test_rmse": rmse(model, test)}
    return {**best, "history": history, "num_parameters": sum(p.numel() for p in model.parameters())}


@torch.no_grad()
def rmse(model: SubgraphRegressor, batches: list[SubgraphBatch]) -> float:
    model.eval()
    se = sum(float(((model(b) - b.target) ** 2).sum()) for b in batches)
    return float(np.sqrt(se / max(1, sum(len(b.target) for b in batches))))
