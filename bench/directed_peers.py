"""Directed peers on a directed PENCIL run's own split: the directed heuristics (CN / AA / RA over paths
u -> w -> v), the reverse-edge rule, the undirected CN / AA / RA beside them, and a directed GNN from PyG.

    python -m bench.directed_peers --shards SET [--seeds 3] [--epochs 200] [--out peers.json]

The split (positives and every protocol's negatives, `reverse` included) is the set's own: the dataset is
rebuilt from the set's manifest and checked against its fingerprint (pipelines.core.runs.run_dataset), and the
directed graphs are the set's out-edge CSRs (common.graph.set_directed_graph): "train" for valid, "test" for test.

The GNN is an R-GCN (Schlichtkrull et al. 2018) with "forward" and "backward" as its two relations. A node's
input is a learnt embedding (zero at start, so a node that never trains keeps 0) plus a linear map of its log in-
and out-degrees (these graphs have no features; a temporal split's new nodes have only their degrees). The decoder
is an MLP on [h_u, h_v, h_u * h_v], not symmetric, so (u, v) and (v, u) may score differently. It trains
full-batch on the training edges against as many negatives per epoch, half random ordered non-edges, half reverses
of training edges that are not edges themselves (a direction-blind negative set would leave it no reason to learn
the direction). The test is read at the validation epoch with the best MRR (protocol original), one model a seed.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from common.cli import Parser, run_cli, summary
from common.graph import DiGraph, set_directed_graph
from common.heuristics import score_split
from common.heuristics_directed import DIRECTED
from common.manifest import read_manifest
from common.metrics import evaluate
from pipelines.core.runs import run_dataset

HEURISTIC_ROWS = ("cn", "aa", "ra", *DIRECTED)
SELECT = ("original", "mrr")
KEYS = (
    "mrr",
    "auc",
    "hits@20",
    "reverse_acc",
)  # the table's columns  # the validation protocol and metric the GNN's epoch is chosen on


class DirectedGNN(torch.nn.Module):
    """Two R-GCN layers over (forward, backward) relations and an asymmetric MLP decoder."""

    def __init__(self, num_nodes: int, dim: int = 64):
        super().__init__()
        from torch_geometric.nn import RGCNConv

        self.emb = torch.nn.Embedding(num_nodes, dim)
        torch.nn.init.zeros_(self.emb.weight)  # a node unseen in training keeps 0: its degrees speak for it
        self.lin = torch.nn.Linear(3, dim)
        self.convs = torch.nn.ModuleList([RGCNConv(dim, dim, num_relations=2) for _ in range(2)])
        self.dec = torch.nn.Sequential(torch.nn.Linear(3 * dim, dim), torch.nn.ReLU(), torch.nn.Linear(dim, 1))

    def encode(self, edge_index: torch.Tensor, edge_type: torch.Tensor, degrees: torch.Tensor) -> torch.Tensor:
        h = self.emb.weight + self.lin(degrees)
        for i, conv in enumerate(self.convs):
            h = conv(h, edge_index, edge_type)
            h = torch.relu(h) if i < len(self.convs) - 1 else h
        return h

    def decode(self, h: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        hu, hv = h[pairs[:, 0]], h[pairs[:, 1]]
        return self.dec(torch.cat([hu, hv, hu * hv], dim=1)).squeeze(-1)


def relations(graph: DiGraph) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(edge_index, edge_type, degrees): each edge u -> v as a message u -> v of type 0 and v -> u of type 1, and
    every node's log(1 + in-degree), log(1 + out-degree) and a constant 1 as its input."""
    e = torch.from_numpy(graph.edge_array().T.copy())
    edge_index = torch.cat([e, e.flip(0)], dim=1)
    edge_type = torch.cat([torch.zeros(e.shape[1], dtype=torch.long), torch.ones(e.shape[1], dtype=torch.long)])
    deg = np.stack([np.log1p(graph.in_degree), np.log1p(graph.out_degree), np.ones(graph.num_nodes)], axis=1)
    return edge_index, edge_type, torch.from_numpy(deg.astype(np.float32))


def negatives(graph: DiGraph, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` ordered non-edges: half reverses of edges whose reverse is no edge, the rest random."""
    e = graph.edge_array()
    rev = e[~graph.has_edge(e[:, 1], e[:, 0])][:, ::-1]
    take = rev[rng.integers(0, len(rev), min(count // 2, len(rev)))] if len(rev) else np.zeros((0, 2), np.int64)
    n = graph.num_nodes
    rand = rng.integers(0, n, (2 * (count - len(take)) + 16, 2))
    rand = rand[(rand[:, 0] != rand[:, 1]) & ~graph.has_edge(rand[:, 0], rand[:, 1])][: count - len(take)]
    return np.concatenate([take, rand]).astype(np.int64)


def gnn_scores(model: DirectedGNN, rel, pairs: np.ndarray) -> np.ndarray:
    """Logits of pairs of any shape (..., 2)."""
    model.eval()
    with torch.no_grad():
        h = model.encode(*rel)
        flat = torch.from_numpy(np.ascontiguousarray(pairs.reshape(-1, 2), dtype=np.int64))
        return model.decode(h, flat).numpy().reshape(pairs.shape[:-1])


def split_metrics(model, rel, data, protocols: list[str]) -> dict:
    return {
        p: evaluate(p, gnn_scores(model, rel, data.positives(p)), gnn_scores(model, rel, data.negatives(p)))
        for p in protocols
    }


def train_gnn(ds, graphs: dict[str, DiGraph], seed: int, epochs: int, every: int = 5) -> dict:
    """One seed: train on graphs['train'], select on valid, return test metrics at the best epoch."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    train = graphs["train"]
    model = DirectedGNN(train.num_nodes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    rel = {k: relations(g) for k, g in graphs.items()}
    pos = torch.from_numpy(train.edge_array())
    protos = {s: [p for p in ds.protocols if p in ds.splits[s].neg] for s in ("valid", "test")}
    best, best_state, best_epoch = -1.0, None, 0
    t0 = time.perf_counter()
    for epoch in range(1, epochs + 1):
        model.train()
        neg = torch.from_numpy(negatives(train, len(pos), rng))
        h = model.encode(*rel["train"])
        logits = torch.cat([model.decode(h, pos), model.decode(h, neg)])
        labels = torch.cat([torch.ones(len(pos)), torch.zeros(len(neg))])
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if epoch % every == 0:
            value = split_metrics(model, rel["train"], ds.splits["valid"], [SELECT[0]])[SELECT[0]][SELECT[1]]
            if value > best:
                best, best_epoch = value, epoch
                best_state = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    test = split_metrics(model, rel["test"], ds.splits["test"], protos["test"])
    return {
        "seed": seed,
        "best_epoch": best_epoch,
        "valid_mrr": best,
        "seconds": time.perf_counter() - t0,
        "test": test,
    }


def peers(shards: str, seeds: int, epochs: int) -> dict:
    manifest = read_manifest(shards)
    if not manifest.directed:
        raise SystemExit(f"--shards {shards}: an undirected set; build one with --directed")
    ds = run_dataset(manifest)
    protocols = [p for p in ds.protocols if p in ds.splits["test"].neg]
    graphs = {w: set_directed_graph(manifest, w) for w in ("train", "test")}
    heuristics = score_split(ds, "test", protocols, list(HEURISTIC_ROWS))
    runs = [train_gnn(ds, graphs, s, epochs) for s in range(seeds)]
    return {
        "dataset": ds.name,
        "set": str(Path(shards).resolve()),
        "protocols": protocols,
        "heuristics": heuristics,
        "gnn": runs,
    }


def table(result: dict) -> str:
    """Markdown rows: protocol, peer, test MRR, AUC, Hits@20, reverse accuracy (percent; the GNN's mean ± sd over
    seeds)."""
    from common.heuristics import label

    lines = ["| protocol | peer | MRR | AUC | Hits@20 | reverse accuracy |", "|---|---|---|---|---|---|"]
    for proto in result["protocols"]:
        for name, m in result["heuristics"][proto].items():
            cells = [f"{100 * m[k]:.2f}" if k in m else "–" for k in KEYS]
            lines.append(f"| {proto} | {label(name)} | " + " | ".join(cells) + " |")
        cells = []
        for key in KEYS:
            v = 100 * np.array([r["test"][proto].get(key, np.nan) for r in result["gnn"]])
            cells.append(f"{v.mean():.2f} ± {v.std():.2f}" if np.isfinite(v).all() else "–")
        lines.append(f"| {proto} | R-GCN ({len(result['gnn'])} seeds) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_parser(prog: str = "python -m bench.directed_peers") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--shards", required=True, help="the directed run's shard set (its manifest's folder)")
    p.add_argument("--seeds", type=int, default=3, help="GNN seeds (default 3)")
    p.add_argument("--epochs", type=int, default=200, help="GNN epochs (default 200)")
    p.add_argument("--out", default=None, help="JSON of every number (fractions)")
    return p


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    result = peers(args.shards, args.seeds, args.epochs)
    if args.out:
        from common.atomic import write_json_atomic

        write_json_atomic(args.out, result)
    print(table(result))
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.directed_peers")


if __name__ == "__main__":
    raise SystemExit(main())
