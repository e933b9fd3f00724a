"""Knowledge-graph peers on WN18RR's given split: PyG's R-GCN link-prediction example and a PyKEEN ComplEx.

    python -m bench.kg_peers --data ../shared/data/kg/wn18rr --peer rgcn --minutes 20 --out rgcn.json
    python -m bench.kg_peers --data ../shared/data/kg/wn18rr --peer complex-lcwa --chunks 10 --every 2 --out c.json

Protocols (the same for PENCIL):
- sampled: each test triple against 50 corrupted heads and 50 corrupted tails (common.datasets.corruptions,
  filtered of every true triple of train, valid and test, seed fixed), one tie-averaged rank among the 101;
- full: the standard filtered ranking of the tail (h, r, ?) and of the head (?, r, t) against every entity.
MRR and Hits@1/3/10 per relation and overall. Selection (the epoch read) is on validation's sampled MRR only: the
training loop holds train and valid and their corruptions (filtered of train + valid), never test; the test is read
once, at the chosen state. Every run stops at its wall cap (`--minutes`) or after `--patience` checks without a
better validation MRR, whichever first; the history keeps (seconds, validation MRR) of each check.

R-GCN: the design of torch_geometric's examples/rgcn_link_pred.py: a learnt embedding per entity, two RGCNConv
layers with block decomposition over the relations and their inverses, a DistMult decoder, one head-or-tail
corruption per training triple, BCE plus 1e-2 L2, Adam 0.01, gradient clipping 1, full batch.
ComplEx: pykeen.models.ComplEx, trained by PyKEEN's own loop: `complex-lcwa` as the literature trains it on WN18RR
(reciprocal relations, 1-N softmax cross-entropy, small init; `--chunks` cuts each epoch into parts so validation
is checked every `--every` parts, and the history's `epoch` counts parts), `complex-slcwa` with PyKEEN's defaults
(the first run, at chance: see the report).
"""

from __future__ import annotations

import copy
import gzip
import os
import time
from pathlib import Path

import numpy as np
import torch

from common.cli import Parser, run_cli, summary
from common.datasets.corruptions import filtered_corruptions, filtered_ranks, known_partners
from common.metrics import rank_against_own, ranking_metrics

PER_SIDE = 50  # corruptions per side: 100 per triple
SEED = 0  # the corruptions' seed
KS = (1, 3, 10)
SPLITS = ("train", "valid", "test")


# ---------------------------------------------------------------------------- data
def read_kg(folder) -> dict:
    """{train, valid, test}.txt.gz (`head<TAB>relation<TAB>tail`, ids as text) -> int64 triples over one entity
    and one relation space, each sorted by name (so the mapping depends only on the sets)."""
    raw = {}
    for s in SPLITS:
        path = Path(folder) / f"{s}.txt.gz"
        if not path.exists():
            raise SystemExit(f"--data {folder}: {path.name} is missing; give a folder with train/valid/test.txt.gz")
        with gzip.open(path, "rt", encoding="utf-8") as f:
            rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
        if any(len(r) != 3 for r in rows):
            raise SystemExit(f"{path}: every line must be head<TAB>relation<TAB>tail")
        raw[s] = np.array(rows, dtype=str).reshape(-1, 3)
    allr = np.concatenate(list(raw.values()))
    entities = np.unique(np.concatenate([allr[:, 0], allr[:, 2]]))
    relations = np.unique(allr[:, 1])
    out = {
        s: np.stack(
            [
                np.searchsorted(entities, a[:, 0]),
                np.searchsorted(relations, a[:, 1]),
                np.searchsorted(entities, a[:, 2]),
            ],
            axis=1,
        ).astype(np.int64)
        for s, a in raw.items()
    }
    return {"triples": out, "entities": entities, "relations": relations}


def sampled_split(queries: np.ndarray, known: np.ndarray, n: int) -> dict:
    """A split's queries and their 50 + 50 filtered corruptions as (Q, 100, 3) candidate triples (-1 rows: none)."""
    heads, tails = filtered_corruptions(queries, known, n, PER_SIDE, SEED)
    cand = np.repeat(queries[:, None, :], 2 * PER_SIDE, axis=1).copy()
    cand[:, :PER_SIDE, 0], cand[:, PER_SIDE:, 2] = heads, tails
    cand[np.concatenate([heads, tails], axis=1) < 0] = -1
    return {"queries": queries, "cand": cand}


# ---------------------------------------------------------------------------- evaluation
@torch.no_grad()
def sampled_ranks(score_triples, split: dict, block: int = 256) -> np.ndarray:
    """Tie-averaged rank of each query among its 100 corruptions (a missing one: -inf) -> (Q,)."""
    q, cand = split["queries"], split["cand"]
    out = []
    for s in range(0, len(q), block):
        c = cand[s : s + block]
        ok = c[:, :, 0] >= 0
        neg = np.full(ok.shape, -np.inf)
        neg[ok] = score_triples(c[ok])
        out.append(rank_against_own(score_triples(q[s : s + block]), neg))
    return np.concatenate(out)


@torch.no_grad()
def full_ranks(score_all, queries: np.ndarray, known: np.ndarray, n: int, side: int, block: int = 256) -> np.ndarray:
    """Filtered rank of each query's entity on `side` (2: tail, 0: head) against every entity -> (Q,)."""
    out = []
    for s in range(0, len(queries), block):
        qb = queries[s : s + block]
        scores = score_all(qb, side)  # (B, N)
        rows, ents = known_partners(qb, known, n, side)
        mask = np.zeros(scores.shape, dtype=bool)
        mask[rows, ents] = True
        true = scores[np.arange(len(qb)), qb[:, side]]
        out.append(filtered_ranks(true, scores, mask))
    return np.concatenate(out)


def by_relation(ranks: np.ndarray, rel: np.ndarray, names) -> dict:
    """{'overall': metrics, relation name: metrics} (MRR, Hits@1/3/10, count; overall: the MRR's SE too)."""
    se = float(np.std(1 / ranks) / np.sqrt(len(ranks)))  # the MRR's standard error, for the 2-SE comparison
    res = {"overall": {**ranking_metrics(ranks, KS), "mrr_se": se, "count": len(ranks)}}
    for r in np.unique(rel):
        res[str(names[r])] = {**ranking_metrics(ranks[rel == r], KS), "count": int((rel == r).sum())}
    return res


def test_report(scorer, kg: dict, test_split: dict, full: bool) -> dict:
    """Every number of the test split at the chosen state: sampled, and full filtered (tail, head, both)."""
    t, names = kg["triples"]["test"], kg["relations"]
    known = np.concatenate([kg["triples"][s] for s in SPLITS])
    n = len(kg["entities"])
    rep = {"sampled": by_relation(sampled_ranks(scorer.score_triples, test_split), t[:, 1], names)}
    if full:
        tail = full_ranks(scorer.score_all, t, known, n, side=2)
        head = full_ranks(scorer.score_all, t, known, n, side=0)
        rep["full_tail"] = by_relation(tail, t[:, 1], names)
        rep["full_head"] = by_relation(head, t[:, 1], names)
        rep["full_both"] = by_relation(np.concatenate([tail, head]), np.concatenate([t[:, 1], t[:, 1]]), names)
    return rep


# ---------------------------------------------------------------------------- selection loop
def select(model, step, scorer, valid_split: dict, minutes: float, patience: int, every: int) -> dict:
    """Train with `step()` (one epoch), check validation's sampled MRR every `every` epochs, keep the best state;
    stop at the wall cap or after `patience` checks without improvement. Holds no test data."""
    t0, c0, best, best_state, history, since, epoch = time.perf_counter(), time.process_time(), -1.0, None, [], 0, 0
    while time.perf_counter() - t0 < 60 * minutes and since < patience:
        for _ in range(every):
            step()
            epoch += 1
        scorer.reset()
        mrr = ranking_metrics(sampled_ranks(scorer.score_triples, valid_split), KS)["mrr"]
        # cpu: this process's CPU seconds, a measure the other users' load does not inflate as much as the wall
        wall, cpu = round(time.perf_counter() - t0, 1), round(time.process_time() - c0, 1)
        history.append({"epoch": epoch, "seconds": wall, "cpu_seconds": cpu, "valid_mrr": mrr})
        print(f"epoch {epoch} {history[-1]['seconds']:.0f}s valid sampled MRR {100 * mrr:.2f}", flush=True)
        if mrr > best:
            best, best_state, since = mrr, copy.deepcopy(model.state_dict()), 0
        else:
            since += 1
    model.load_state_dict(best_state)
    scorer.reset()
    chosen = max(history, key=lambda h: h["valid_mrr"])
    stopped = "patience" if since >= patience else "wall cap"
    return {"chosen": chosen, "history": history, "seconds": time.perf_counter() - t0, "stopped": stopped}


def run_peer(
    kg: dict,
    peer: str,
    minutes: float,
    patience: int,
    every: int,
    full: bool,
    seed: int,
    dim: int | None = None,
    lr: float | None = None,
    chunks: int = 1,
) -> dict:
    tr = kg["triples"]
    load_start = os.getloadavg()
    n, num_rel = len(kg["entities"]), len(kg["relations"])
    torch.manual_seed(seed)
    # validation's corruptions are filtered of train + valid only: selection never holds a test triple
    valid_split = sampled_split(tr["valid"], np.concatenate([tr["train"], tr["valid"]]), n)
    if peer == "rgcn":
        from bench.kg_peers_models import rgcn_peer

        model, step, scorer = rgcn_peer(tr["train"], n, num_rel, **({"hidden": dim} if dim else {}))
    else:
        from bench.kg_peers_models import complex_peer

        kw = {"dim": dim} if dim else {}
        loop = peer.split("-")[-1]
        model, step, scorer = complex_peer(tr["train"], n, num_rel, loop=loop, seed=seed, lr=lr, chunks=chunks, **kw)
    sel = select(model, step, scorer, valid_split, minutes, patience, every)
    model.eval()
    test_split = sampled_split(tr["test"], np.concatenate([tr[s] for s in SPLITS]), n)
    return {
        "peer": peer,
        "seed": seed,
        "threads": torch.get_num_threads(),
        "settings": {"dim": dim, "lr": lr, "chunks": chunks, "every": every, "patience": patience, "minutes": minutes},
        **sel,
        "test": test_report(scorer, kg, test_split, full),
        "load": {"start": load_start, "end": os.getloadavg()},  # 1/5/15-minute load averages of the machine
    }


# ---------------------------------------------------------------------------- report
def table(result: dict) -> str:
    """Markdown rows: protocol, relation, count, MRR, Hits@1/3/10 (percent)."""
    lines = ["| protocol | relation | count | MRR | Hits@1 | Hits@3 | Hits@10 |", "|---|---|---|---|---|---|---|"]
    for proto, rels in result["test"].items():
        for rel, m in rels.items():
            cells = " | ".join(f"{100 * m[k]:.2f}" for k in ("mrr", "hits@1", "hits@3", "hits@10"))
            lines.append(f"| {proto} | {rel} | {m['count']} | {cells} |")
    return "\n".join(lines)


def build_parser(prog: str = "python -m bench.kg_peers") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--data", required=True, help="folder of train/valid/test.txt.gz (head<TAB>relation<TAB>tail)")
    p.add_argument("--peer", choices=("rgcn", "complex-slcwa", "complex-lcwa"), default="rgcn", help="which peer")
    p.add_argument("--minutes", type=float, default=20.0, help="wall cap of training (default 20)")
    p.add_argument("--patience", type=int, default=5, help="checks without a better validation MRR (default 5)")
    p.add_argument("--every", type=int, default=5, help="epochs between validation checks (default 5)")
    p.add_argument("--no-full", action="store_true", help="skip the full filtered ranking of the test")
    p.add_argument("--seed", type=int, default=0, help="model seed (default 0)")
    p.add_argument("--dim", type=int, default=None, help="R-GCN hidden size / ComplEx dimension (default 100)")
    p.add_argument("--lr", type=float, default=None, help="ComplEx's Adam learning rate (default 1e-2)")
    p.add_argument("--chunks", type=int, default=1, help="complex-lcwa: parts of an epoch per step (default 1)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--out", default=None, help="JSON of every number (fractions)")
    return p


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.chunks < 1:
        raise SystemExit(f"--chunks {args.chunks}: give a positive number of parts per epoch")
    kg = read_kg(args.data)
    result = run_peer(
        kg,
        args.peer,
        args.minutes,
        args.patience,
        args.every,
        not args.no_full,
        args.seed,
        args.dim,
        args.lr,
        args.chunks,
    )
    if args.out:
        from common.atomic import write_json_atomic

        write_json_atomic(args.out, result)
    print(f"chosen {result['chosen']}, stopped by {result['stopped']} after {result['seconds']:.0f}s")
    print(table(result))
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.kg_peers")


if __name__ == "__main__":
    raise SystemExit(main())
