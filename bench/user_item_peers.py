"""User-item peers on a ratings file's temporal split: item popularity, the bipartite path heuristics, BPR.

    python -m bench.user_item_peers --data ../shared/data/movielens-100k/ratings.tsv.gz --out peers.json

The split is common.datasets.user_item's (the edge list's temporal split, 85/5/10). Each valid or test pair (user,
item) is ranked against 100 items the user never rated (common.datasets.corruptions with the node kinds: tails
among the items, seed fixed), filtered of the user's known items: train + valid for valid (selection never holds
test), every split for test. One tie-averaged rank per pair; MRR and Hits@1/3/10, with the MRR's standard error,
and the same for the returning users' pairs (a user with an edge before the split's boundary).

Scorers, each on the graph the split is scored on (valid: train; test: train + valid, the temporal rule):
- popularity: the item's degree;
- paths3: the number of 3-paths user - item - user - item, the common-neighbour count of a bipartite graph
  (A A A; user-CF and item-CF by raw co-occurrence both reduce to it);
- ra3 / aa3: the same paths weighted by 1/deg (1/log deg) of both middle nodes (common.retrieval.overlap_scores,
  the mass-diffusion recommender);
- user-cf / item-cf: cosine similarity of users (items) by their co-rated items (users), summed over the user's
  neighbours' items (the user's items' neighbours);
- bpr: matrix factorisation with item bias, trained with BPR (Rendle et al. 2009) on the training pairs against
  uniform items the user has not rated in training, the epoch chosen on validation MRR (early stopping).
"""

from __future__ import annotations

import copy
import time

import numpy as np
import scipy.sparse as sp
import torch

from common.cli import Parser, run_cli, summary
from common.datasets.corruptions import filtered_corruptions
from common.datasets.user_item import read_user_item, user_item_split
from common.heuristics import adjacency
from common.metrics import rank_against_own, ranking_metrics
from common.retrieval import overlap_scores

NEGATIVES = 100
SEED = 0
KS = (1, 3, 10)
HEURISTICS = ("popularity", "paths3", "ra3", "aa3", "user-cf", "item-cf")


def eval_split(pos: np.ndarray, known: np.ndarray, n: int, users, items, graph) -> dict:
    """The pairs and their 100 filtered item corruptions (Q, 100), -1 where a user has fewer unrated items;
    `returning`: the pairs whose user has an edge in the split's graph (a new user has only popularity to go by)."""
    q3 = np.stack([pos[:, 0], np.zeros(len(pos), np.int64), pos[:, 1]], axis=1)
    k3 = np.stack([known[:, 0], np.zeros(len(known), np.int64), known[:, 1]], axis=1)
    _, tails = filtered_corruptions(q3, k3, n, NEGATIVES, SEED, allowed={0: (users, items)})
    return {"pos": pos, "neg": tails, "returning": graph.degree[pos[:, 0]] > 0}


def metrics(score_pairs, split: dict) -> dict:
    """MRR (and its standard error), Hits@1/3/10 of the pairs against their corruptions."""
    pos, neg = split["pos"], split["neg"]
    ok = neg >= 0
    users = np.repeat(pos[:, 0:1], neg.shape[1], axis=1)
    ns = np.full(neg.shape, -np.inf)
    ns[ok] = score_pairs(users[ok], neg[ok])
    ranks = rank_against_own(score_pairs(pos[:, 0], pos[:, 1]), ns)
    out = {**ranking_metrics(ranks, KS), "mrr_se": float(np.std(1 / ranks) / np.sqrt(len(ranks)))}
    back = ranks[split["returning"]]
    if back.size:
        out.update({f"returning_{k}": v for k, v in ranking_metrics(back, KS).items()}, returning_count=back.size)
    return out


def heuristic_scorer(graph, method: str, users: np.ndarray):
    """score_pairs(u, i) of a heuristic on `graph` (dense over every user x node: the graphs are small)."""
    a = adjacency(graph).astype(np.float64)
    deg = np.asarray(a.sum(axis=1)).ravel()
    if method == "popularity":
        return lambda u, i: deg[i]
    if method == "paths3":
        s = (a[users] @ a @ a).toarray()
    elif method in ("ra3", "aa3"):
        s = overlap_scores(graph, users, method[:2], bipartite=True).toarray()
    else:
        inv = sp.diags(np.where(deg > 0, 1 / np.sqrt(np.maximum(deg, 1)), 0.0))
        if method == "user-cf":  # sim(u, u') = |N(u) & N(u')| / sqrt(d_u d_u'), then sum sim over u' -> i
            s = ((inv @ a @ a @ inv)[users] @ a).toarray()
        else:  # item-cf: sum over the user's items j of sim(j, i)
            s = (a[users] @ (inv @ a @ a @ inv)).toarray()
    row = np.full(graph.num_nodes, -1, dtype=np.int64)
    row[users] = np.arange(len(users))
    return lambda u, i: s[row[u], i]


class BPR(torch.nn.Module):
    def __init__(self, n: int, dim: int):
        super().__init__()
        self.emb = torch.nn.Embedding(n, dim)
        self.bias = torch.nn.Embedding(n, 1)
        torch.nn.init.normal_(self.emb.weight, std=0.01)
        torch.nn.init.zeros_(self.bias.weight)

    def forward(self, u, i):
        return (self.emb(u) * self.emb(i)).sum(-1) + self.bias(i).squeeze(-1)


def train_bpr(train: np.ndarray, n: int, items: np.ndarray, valid: dict, args) -> tuple:
    """BPR with early stopping on validation MRR; returns (model at the best epoch, history). Holds no test."""
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model = BPR(n, args.dim)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    seen = np.sort(train[:, 0] * n + train[:, 1])
    t0, best, state, since, history = time.perf_counter(), -1.0, None, 0, []

    @torch.no_grad()
    def score(u, i):
        return model(torch.as_tensor(u), torch.as_tensor(i)).double().numpy()

    for epoch in range(1, args.epochs + 1):
        model.train()
        order = rng.permutation(len(train))
        for s in range(0, len(order), args.batch):
            b = train[order[s : s + args.batch]]
            j = items[rng.integers(0, len(items), len(b))]
            hit = np.isin(b[:, 0] * n + j, seen)  # a rated item is no negative: redraw those once
            j[hit] = items[rng.integers(0, len(items), int(hit.sum()))]
            u, i, j = (torch.as_tensor(x) for x in (b[:, 0], b[:, 1], j))
            diff = model(u, i) - model(u, j)
            reg = model.emb(u).pow(2).sum() + model.emb(i).pow(2).sum() + model.emb(j).pow(2).sum()
            loss = -torch.nn.functional.logsigmoid(diff).mean() + args.l2 * reg / len(b)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        mrr = metrics(score, valid)["mrr"]
        history.append({"epoch": epoch, "seconds": round(time.perf_counter() - t0, 1), "valid_mrr": mrr})
        if mrr > best:
            best, state, since = mrr, copy.deepcopy(model.state_dict()), 0
        else:
            since += 1
        if since >= args.patience or time.perf_counter() - t0 > 60 * args.minutes:
            break
    model.load_state_dict(state)
    return score, history


def peers(args) -> dict:
    g = read_user_item(args.data)
    ds = user_item_split(g)
    n, users, items = g.num_nodes, g.nodes_of("user"), g.nodes_of("item")
    tr, va, te = (ds.splits[s].pos for s in ("train", "valid", "test"))
    valid = eval_split(va, np.concatenate([tr, va]), n, users, items, ds.graph)
    out = {"dataset": g.name, "pairs": {"train": len(tr), "valid": len(va), "test": len(te)}, "valid": {}, "test": {}}
    for h in HEURISTICS:
        out["valid"][h] = metrics(heuristic_scorer(ds.graph, h, users), valid)
    score, history = train_bpr(tr, n, items, valid, args)
    out["bpr"] = {"history": history, "chosen": max(history, key=lambda e: e["valid_mrr"])}
    out["valid"]["bpr"] = metrics(score, valid)
    # the test is read once, after selection
    test = eval_split(te, np.concatenate([tr, va, te]), n, users, items, ds.test_graph)
    for h in HEURISTICS:
        out["test"][h] = metrics(heuristic_scorer(ds.test_graph, h, users), test)
    out["test"]["bpr"] = metrics(score, test)
    return out


def table(result: dict) -> str:
    keys = ("mrr", "mrr_se", "hits@1", "hits@3", "hits@10", "returning_mrr", "returning_hits@10")
    lines = [
        "| peer | valid MRR | test MRR | ± SE | Hits@1 | Hits@3 | Hits@10 | returning users: MRR | Hits@10 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in result["test"].items():
        cells = " | ".join(f"{100 * m[k]:.2f}" if k in m else "–" for k in keys)
        lines.append(f"| {name} | {100 * result['valid'][name]['mrr']:.2f} | {cells} |")
    return "\n".join(lines)


def build_parser(prog: str = "python -m bench.user_item_peers") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--data", required=True, help="ratings file with user, item, time columns (rating optional)")
    p.add_argument("--dim", type=int, default=64, help="BPR dimension (default 64)")
    p.add_argument("--lr", type=float, default=5e-3, help="BPR learning rate (default 5e-3)")
    p.add_argument("--l2", type=float, default=1e-4, help="BPR L2 weight per pair (default 1e-4)")
    p.add_argument("--batch", type=int, default=1024, help="BPR batch (default 1024)")
    p.add_argument("--epochs", type=int, default=200, help="BPR epoch limit (default 200)")
    p.add_argument("--patience", type=int, default=10, help="epochs without a better valid MRR (default 10)")
    p.add_argument("--minutes", type=float, default=10.0, help="BPR wall cap (default 10)")
    p.add_argument("--seed", type=int, default=0, help="BPR seed (default 0)")
    p.add_argument("--out", default=None, help="JSON of every number (fractions)")
    return p


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    result = peers(args)
    if args.out:
        from common.atomic import write_json_atomic

        write_json_atomic(args.out, result)
    print(f"BPR chosen {result['bpr']['chosen']}")
    print(table(result))
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.user_item_peers")


if __name__ == "__main__":
    raise SystemExit(main())
