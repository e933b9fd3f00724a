"""Which shared negatives decide a finished run's MRR: for each split, the highest-scored negatives with their
common neighbours and endpoint degrees (in the graph the split is scored on), the share of positives each one
outranks, and the MRR without the top k. A diagnosis of a report's numbers, run after the fact; nothing here
feeds a choice.

    python -m bench.top_negatives results/citeseer/auto/original --dataset citeseer
    python -m bench.top_negatives RUN_FOLDER --dataset cora --planetoid-dir ../shared/data/planetoid --top 5
    python -m bench.top_negatives RUN_FOLDER --dataset citeseer --against SEAL/seed0   # paired, with its SE

RUN_FOLDER holds seed<k>/scores/<split>-original.npz (every `pencil run` seed saves them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.cli import Parser, run_cli, summary
from common.datasets import DatasetSpec, load_dataset
from common.eval_scores import read_scores
from common.flags import add_dataset_flags
from common.heuristics import ranking_scores
from pipelines.auto.blend import NONE, mix, partner_table
from preprocess.candidates import protocol_candidates


def reciprocal_ranks(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """Each positive's 1 / (1 + negatives above it + half the tied ones), against all the shared negatives."""
    neg = np.sort(neg)
    above = len(neg) - np.searchsorted(neg, pos, side="right")
    ties = np.searchsorted(neg, pos, side="right") - np.searchsorted(neg, pos, side="left")
    return 1.0 / (1.0 + above + 0.5 * ties)


def common_neighbours(graph, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    nb = lambda x: graph.indices[graph.indptr[x] : graph.indptr[x + 1]]
    return np.array([len(np.intersect1d(nb(a), nb(b))) for a, b in zip(u.tolist(), v.tolist())])


def run_scores(c, run: Path, split: str, prior=None, partner=None) -> tuple[np.ndarray, np.ndarray, int]:
    """(positives' scores, shared negatives' scores, epoch) of a seed folder's saved scores of `split`; `prior`:
    (the candidates' heuristic scores by cid, weight), `partner`: (the runner-up's scores by cid, weight),
    blended as the report's "+ prior" row is (pipelines.auto.blend.mix)."""
    cid, score, epoch = read_scores(run / "scores" / f"{split}-original.npz")
    if prior is not None or partner is not None:
        heuristic, w = prior or (None, 0.0)
        by_pair, p = partner or (None, 0.0)
        score = mix(cid, score, p, "h" if w else NONE, w, by_pair, {"h": heuristic})
    by_cid = dict(zip(cid.tolist(), score.tolist()))
    return np.array([by_cid[i] for i in c.pos_cid]), np.array([by_cid[i] for i in c.neg_cid.reshape(-1)]), epoch


def prior_scores(dataset, c, split: str, spec: str | None):
    """`--prior h:w` as (h's scores of the split's candidates by cid, w), h scored on the split's graph."""
    if not spec:
        return None
    name, weight = spec.split(":")
    pairs = np.stack([c.src, c.dst], 1)
    return ranking_scores(name, dataset.graph_for(split), pairs), float(weight)


def partner_scores(run: Path, split: str, spec: str | None):
    """`--runner-up P` as (the runner-up's scores of `split` by cid, P), from the run's runner-up/ folder (where
    `pencil run` evaluated it for the blend)."""
    if not spec:
        return None
    cid, score, _ = read_scores(run / "runner-up" / "scores" / f"{split}-original.npz")
    return partner_table(cid, score.astype(np.float64)), float(spec)


def paired_rows(c, run: Path, other: Path, split: str, prior=None, partner=None) -> list[str]:
    """The run's MRR and AUC minus the other run's, on the same positives and negatives, with the standard error
    of a bootstrap over both (pipelines.auto.signal.two_way_se): how far the split itself can tell them apart."""
    from pipelines.auto.signal import Signal, two_way_se

    a, b = Signal(*run_scores(c, run, split, prior, partner)[:2]), Signal(*run_scores(c, other, split)[:2])
    out = []
    for metric in ("mrr", "auc"):
        diff = 100 * (a.values()[metric].mean() - b.values()[metric].mean())
        se = 100 * two_way_se(a, b, metric, draws=1000)
        spread = f" (SE {se:.2f}, {diff / se:+.1f} SE)" if se else " (SE 0)"
        out.append(f"{metric.upper()} {diff:+.2f}{spread}")
    return [f"    against {other}: " + ", ".join(out)]


def split_rows(
    dataset,
    run: Path,
    split: str,
    top: int,
    against: Path | None = None,
    prior: str | None = None,
    runner_up: str | None = None,
) -> list[str]:
    c = protocol_candidates(dataset, split, "original")
    graph = dataset.graph_for(split)
    blended = prior_scores(dataset, c, split, prior)
    partner = partner_scores(run.parent, split, runner_up)
    pos, neg, epoch = run_scores(c, run, split, blended, partner)
    negs = c.neg_cid.reshape(-1)
    cn = common_neighbours(graph, c.src[negs], c.dst[negs])
    deg = np.diff(graph.indptr)
    order = np.argsort(-neg, kind="stable")
    lines = [
        f"{run.name} {split} (epoch {epoch}): {len(pos)} positives, {len(neg)} shared negatives, "
        f"{int((cn > 0).sum())} of them with a common neighbour; MRR {100 * reciprocal_ranks(pos, neg).mean():.2f}"
    ]
    for i in order[:top]:
        lines.append(
            f"    negative score {neg[i]:7.3f}  CN {cn[i]}  degrees {deg[c.src[negs[i]]]}/{deg[c.dst[negs[i]]]}  "
            f"above {100 * (pos < neg[i]).mean():5.1f} % of positives"
        )
    without = [f"top {k}: {100 * reciprocal_ranks(pos, np.delete(neg, order[:k])).mean():.2f}" for k in (1, 3, 5)]
    lines.append("    MRR without the " + ", ".join(without))
    return lines + (paired_rows(c, run, against, split, blended, partner) if against else [])


def build_parser(prog: str = "python -m bench.top_negatives") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("run", help="a protocol folder of a finished run: RESULTS/<dataset>/<preset>/original")
    add_dataset_flags(p, split_kinds=True)
    p.add_argument("--top", type=int, default=5, help="negatives listed per split (default 5)")
    p.add_argument(
        "--prior",
        default=None,
        metavar="H:W",
        help="read the run's scores blended with heuristic H at weight W, as its report's '+ prior' row "
        "(search.json's blend, e.g. ra:64)",
    )
    p.add_argument(
        "--runner-up",
        default=None,
        metavar="P",
        help="add the search's runner-up (RUN/runner-up) at weight P, as the blend does (search.json's blend, "
        "e.g. --runner-up 1 --prior ra:8 for 'runner-up x 1 + ra x 8')",
    )
    p.add_argument(
        "--against",
        default=None,
        metavar="SEED_FOLDER",
        help="another run's seed folder (e.g. bench.seal_baseline --scores DIR/seed0/scores): each seed's paired "
        "MRR and AUC difference with it, and the bootstrap SE over positives and negatives",
    )
    return p


def main(argv=None) -> int:
    return run_cli(_main, argv, prog="python -m bench.top_negatives")


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    ds = load_dataset(DatasetSpec.from_args(args))
    seeds = sorted(Path(args.run).glob("seed*/scores/valid-original.npz"))
    if not seeds:
        raise SystemExit(f"{args.run}: no seed<k>/scores/valid-original.npz; pass a finished run's protocol folder")
    for scores in seeds:
        for split in ("valid", "test"):
            against = Path(args.against) if args.against else None
            rows = split_rows(ds, scores.parent.parent, split, args.top, against, args.prior, args.runner_up)
            print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
