"""PENCIL's row beside the user-item peers: a trained run's saved scores ranked exactly as bench.user_item_peers
ranks its peers (the same pairs, the same 100 filtered items each, the same metrics and returning-users columns).

    python -m trainer ... --protocol kg --save-scores --out RUN     # on a ratings file's shard set
    python -m bench.user_item_pencil --data ../shared/data/movielens-100k/ratings.tsv.gz --shards SET --run RUN

Each candidate's score is looked up by its (user, item) pair, so bench.user_item_peers.metrics ranks it as it ranks
popularity. --decimals D also ranks the scores rounded to D decimals: structurally identical subgraphs scored in
different batches differ only by float noise, and rounded they tie (tie-averaged), as they should. Popularity is
scored beside, a check that the pairs and negatives are the peers'.
"""

from __future__ import annotations

import numpy as np

from bench.user_item_peers import eval_split, heuristic_scorer, metrics
from common.cli import Parser, run_cli, summary
from common.datasets.user_item import read_user_item, user_item_split
from common.eval_scores import read_scores
from common.shards import load_queries, read_manifest
from pipelines.auto.blend import WEIGHTS


def pair_scores(ds, manifest, run: str, split: str) -> dict:
    """{user * N + item: score} of one eval set's candidates (positives then their negatives, as the set's
    queries order them: common/datasets/user_item.py's negatives, -1 padded)."""
    pos_cid, neg_cid = load_queries(manifest.queries_path(manifest.eval[f"{split}/kg"]))[:2]
    cid, score, _ = read_scores(f"{run}/scores/{split}-kg.npz")
    by_cid = dict(zip(cid.tolist(), score.tolist()))
    pairs, neg, n = ds.splits[split].pos, ds.splits[split].neg["kg"], ds.num_nodes
    keys = np.concatenate([pairs[:, 0] * n + pairs[:, 1], (neg[..., 0] * n + neg[..., 1])[neg_cid >= 0]])
    cids = np.concatenate([pos_cid, neg_cid[neg_cid >= 0]])
    return {int(k): by_cid[int(c)] for k, c in zip(keys, cids)}


def rows(args) -> dict:
    from common.datasets import DatasetSpec, load_dataset

    ds, manifest = load_dataset(DatasetSpec(args.data)), read_manifest(args.shards)
    g = read_user_item(args.data)
    peer = user_item_split(g)
    n, users, items = g.num_nodes, g.nodes_of("user"), g.nodes_of("item")
    tr, va, te = (peer.splits[s].pos for s in ("train", "valid", "test"))
    known = {"valid": np.concatenate([tr, va]), "test": np.concatenate([tr, va, te])}
    out = {}
    for split in ("valid", "test"):
        graph = peer.graph_for(split)
        ev = eval_split(peer.splits[split].pos, known[split], n, users, items, graph)
        table = pair_scores(ds, manifest, args.run, split)
        scorers = {"pencil": lambda u, i, t=table: np.array([t[int(a) * n + int(b)] for a, b in zip(u, i)])}
        if args.decimals is not None:
            scorers[f"pencil rounded to {args.decimals} decimals"] = lambda u, i, f=scorers["pencil"]: np.round(
                f(u, i), args.decimals
            )
        scorers["popularity"] = heuristic_scorer(graph, "popularity", users)
        out[split] = {name: metrics(f, ev) for name, f in scorers.items()}
        if args.blend:
            grid = (0.0, *WEIGHTS) if split == "valid" else (chosen_weight(out["valid"]),)
            for w in grid:
                out[split][blend_name(w)] = metrics(popularity_blend(scorers["pencil"], scorers["popularity"], w), ev)
    if args.blend:  # the test row is the valid-chosen weight's; the other weights' valid rows are not shown
        w = chosen_weight(out["valid"])
        out["valid"] = {k: v for k, v in out["valid"].items() if not k.startswith(BLEND) or k == blend_name(w)}
    return out


BLEND = "pencil + w log1p(popularity)"


def blend_name(w: float) -> str:
    return f"{BLEND}, w {w:g} (valid-chosen)"


def chosen_weight(valid: dict) -> float:
    """The grid weight of the best validation MRR (the first of equals: the smaller weight)."""
    return max((0.0, *WEIGHTS), key=lambda w: (valid[blend_name(w)]["mrr"], -w))


def popularity_blend(logit, popularity, w: float):
    """score_pairs(u, i) = logit + w * log1p(popularity), in float64."""
    return lambda u, i: np.asarray(logit(u, i), np.float64) + w * np.log1p(np.asarray(popularity(u, i), np.float64))


def build_parser(prog: str = "python -m bench.user_item_pencil") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--data", required=True, help="the ratings file the shard set was built from")
    p.add_argument("--shards", required=True, help="the shard set (folder with manifest.json)")
    p.add_argument("--run", required=True, help="the trainer's run folder, trained with --save-scores")
    p.add_argument("--decimals", type=int, default=None, help="also rank the scores rounded to this many decimals")
    p.add_argument("--blend", action="store_true", help="also rank logit + w log1p(popularity), w chosen on valid")
    return p


def _main(argv) -> int:
    result = rows(build_parser().parse_args(argv))
    keys = ("mrr", "mrr_se", "hits@1", "hits@3", "hits@10", "returning_mrr", "returning_hits@10")
    print("| scorer | valid MRR | test MRR | ± SE | Hits@1 | Hits@3 | Hits@10 | returning users: MRR | Hits@10 |")
    for name, m in result["test"].items():
        cells = " | ".join(f"{100 * m[k]:.2f}" for k in keys)
        print(f"| {name} | {100 * result['valid'][name]['mrr']:.2f} | {cells} |")
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.user_item_pencil")


if __name__ == "__main__":
    raise SystemExit(main())
