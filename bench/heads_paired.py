"""A typed run's seeds against typed heuristics on one split, per positive and paired, over every pair and split
by whether the pair's head has links in the graph the split is scored on (known) or none (new).

    python -m bench.heads_paired --data ../shared/data/movielens-100k/ratings.tsv.gz --run RUN/kg \\
        --split valid [--heuristics "recent popularity,popularity"] [--prior "recent popularity prior:1"]

RUN/kg is a typed `pencil run`'s protocol folder (or any folder of trainer runs seed*/ with saved scores on one
shard set). Each positive's reciprocal rank and Hits@10 are averaged over the seeds, then compared with each
heuristic's on the same positives: the mean difference and its standard error. `--split valid` never opens the
test split (the dataset is loaded without it); `--split test` is for reporting a finished run, after every
decision it made.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from common.cli import Parser, run_cli, summary
from common.datasets import load_dataset
from common.datasets.spec import DatasetSpec
from common.eval_scores import read_scores, scores_path
from common.heuristics_typed import prior_names, typed_heuristics, typed_scores
from common.manifest import read_manifest
from pipelines.auto import blend
from pipelines.auto.signal import paired, per_positive

METRICS = ("mrr", "hits@10")
HEAD = "| heuristic | heads (pairs) | heuristic MRR / Hits@10 | PENCIL | PENCIL − heuristic: MRR | Hits@10 |"


def rows(name: str, model: dict, heuristic: dict, known: np.ndarray) -> list[str]:
    """Table rows of one heuristic: every pair, the known heads' and the new heads'; `model` and `heuristic`:
    {metric: (P,) per-positive values}, `known`: (P,) bool."""
    out = []
    for label, m in (("all", np.ones(len(known), bool)), ("known", known), ("new", ~known)):
        if not m.any():
            continue
        cells = [f"{100 * heuristic[k][m].mean():.2f}" for k in METRICS]
        mine = [f"{100 * model[k][m].mean():.2f}" for k in METRICS]
        diffs = [paired(model[k][m], heuristic[k][m]) for k in METRICS]
        out.append(
            f"| {name} | {label} ({int(m.sum()):,}) | {' / '.join(cells)} | {' / '.join(mine)} | "
            + " | ".join(f"{100 * d:+.2f} ± {100 * se:.2f}" for d, se in diffs)
            + " |"
        )
    return out


def compare(dataset, manifest, split: str, logits: list, names: list[str], prior: tuple | None = None) -> list[str]:
    """The rows of every heuristic in `names` on `split` of `dataset` (its shard set's `manifest`), against the
    seeds' `logits` [(cid, logit), ...] averaged per positive; `prior` (name, w): each logit plus the blend's
    w * log1p(prior) first (a run's blend, pipelines/auto/blend.py)."""

    def values(cid, score):
        return per_positive(manifest, split, "kg", cid, blend.ranked(manifest, score))

    table = blend.by_cid(dataset, manifest, split, "kg", typed_scores(dataset, split, [*names, *(prior or ())[:1]]))
    name, w = prior or (blend.NONE, 0.0)
    runs = [values(cid, blend.mix(cid, logit.astype(np.float64), 0.0, name, w, None, table)) for cid, logit in logits]
    model = {k: np.mean([r[k] for r in runs], axis=0) for k in METRICS}
    cid = logits[0][0]
    pos = dataset.splits[split].pos
    known = dataset.graph_for(split).degree[pos[:, 0]] > 0
    out = []
    for name in names:  # the heuristic alone: log1p of it, the blend's form with weight 1 on a zero logit
        out += rows(name, model, values(cid, blend.mix(cid, np.zeros(len(cid)), 0.0, name, 1.0, None, table)), known)
    return out


def from_files(data: str, run: Path, split: str, names: list[str], prior: tuple | None = None) -> list[str]:
    """compare() on a folder of seed*/ runs of `data`'s typed shard set; --split valid never loads test."""
    seeds = sorted(p for p in Path(run).glob("seed*") if (p / "scores").is_dir())
    if not seeds:
        raise SystemExit(f"--run {run}: no seed*/scores/ folders there; pass a typed run's protocol folder")
    dataset = load_dataset(DatasetSpec(data))
    dataset = dataset if split == "test" else dataset.without_test()
    unknown = [n for n in names if n not in typed_heuristics(dataset)]
    if unknown:
        known_names = ", ".join(typed_heuristics(dataset))
        raise SystemExit(f"--heuristics: {unknown[0]!r} is not a heuristic of {data}; pick from {known_names}")
    manifest = read_manifest(json.loads((seeds[0] / "config.json").read_text())["data"]["shards"])
    logits = [read_scores(scores_path(s, split, "kg"))[:2] for s in seeds]
    if prior and prior[0] not in prior_names(dataset):
        raise SystemExit(f"--prior: {prior[0]!r} is not a prior of {data}; pick from {', '.join(prior_names(dataset))}")
    return compare(dataset, manifest, split, logits, names, prior)


def build_parser(prog: str = "python -m bench.heads_paired") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--data", required=True, help="the typed file or folder the run was made from")
    p.add_argument("--run", required=True, help="a folder of seed*/ trainer runs on one typed shard set")
    p.add_argument("--split", choices=("valid", "test"), default="valid")
    p.add_argument("--heuristics", default="recent popularity,popularity", help="typed heuristics, comma-separated")
    p.add_argument("--prior", help="the run's blend, NAME:W (e.g. 'recent popularity prior:1'), added to each seed")
    return p


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    print(HEAD)
    print("|" + "---|" * HEAD.count(" |"))
    names = [n.strip() for n in args.heuristics.split(",")]
    prior = None
    if args.prior:
        name, _, weight = args.prior.rpartition(":")
        try:
            prior = (name.strip(), float(weight))
        except ValueError:
            raise SystemExit(f"--prior {args.prior!r}: give NAME:W, e.g. 'recent popularity prior:1'") from None
    for line in from_files(args.data, Path(args.run), args.split, names, prior):
        print(line, flush=True)
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
