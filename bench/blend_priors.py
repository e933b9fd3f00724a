"""Which prior would a typed graph's blend add to a finished run, on validation, with and without the l3 prior (the
walks of length 3 between a pair's ends, common/heuristics_typed.py)? Validation only: test is never read.

    python -m bench.blend_priors --data ../shared/data/movielens-100k/ratings.tsv.gz --run RUN \\
        [--data FILE --run RUN ...]

Each --run is a trainer run folder of a typed shard set of --data (its config.json names the set; its saved
validation scores are the logits): the blend of pipelines/auto/blend.py decided on them, as `pencil run` decides
it (2 SE, model alone first, no runner-up), once over the priors before the l3 prior and once with it. The table
gives the share of validation pairs whose head has training links (known), validation MRR of the model alone and
of each decision, and the second minus the first per positive with its standard error, over all pairs and the
known heads' (where l3 can speak: a head without links has no walks).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from common.cli import Parser, run_cli, summary
from common.datasets import load_dataset
from common.datasets.spec import DatasetSpec
from common.eval_scores import read_scores, scores_path
from common.heuristics_typed import L3_PRIOR, prior_names, typed_scores
from common.manifest import read_manifest
from pipelines.auto import blend
from pipelines.auto.signal import paired, per_positive

MARGIN_SE = 2.0  # the blend's rule (SearchConfig.blend_margin_se)
HEAD = (
    "| graph | run | valid pairs (known heads) | model alone | blend without l3 | with l3 "
    "| with - without: all / known |"
)


def compare(view, manifest, logits: dict) -> dict:
    """The blend's decision over the priors before l3 and over all of them, on `view`'s validation with `logits` =
    {seed: (cid, logit)}, and each one's per-positive validation MRR (the model alone's too, averaged over seeds)."""
    every = prior_names(view)
    assert every[-1] == L3_PRIOR
    heuristics = blend.by_cid(view, manifest, "valid", "kg", typed_scores(view, "valid", every))
    values_of = lambda cid, s: per_positive(manifest, "valid", "kg", cid, blend.ranked(manifest, s))  # noqa: E731

    def mrr(d: blend.Blend) -> np.ndarray:
        return np.mean(
            [values_of(c, blend.mix(c, lg.astype(np.float64), 0.0, d.heuristic, d.weight, None, heuristics))["mrr"]
             for c, lg in logits.values()], axis=0,
        )  # fmt: skip

    before = blend.decide(logits, heuristics, values_of, "mrr", MARGIN_SE, names=every[:-1])
    after = blend.decide(logits, heuristics, values_of, "mrr", MARGIN_SE, names=every)
    alone = mrr(blend.Blend(blend.NONE, 0.0, "mrr", {}))
    return {"before": before, "after": after, "alone": alone, "first": mrr(before), "second": mrr(after)}


def decisions(data: str, run: Path) -> str:
    """One table row: the blend's two decisions on the run's validation logits."""
    view = load_dataset(DatasetSpec(data)).without_test()
    manifest = read_manifest(json.loads((run / "config.json").read_text())["data"]["shards"])
    c = compare(view, manifest, {"0": read_scores(scores_path(run, "valid", "kg"))[:2]})
    pos = view.splits["valid"].pos
    known = np.diff(view.graph_for("valid").indptr)[pos[:, 0]] > 0
    first, second = c["first"], c["second"]
    d_all, se_all = paired(second, first)
    d_known, se_known = paired(second[known], first[known]) if known.any() else (0.0, 0.0)
    return (
        f"| {Path(data).parent.name}/{Path(data).name} | {run.name} | {len(pos):,} ({100 * known.mean():.0f} %) | "
        f"{100 * c['alone'].mean():.2f} | {c['before'].key}: {100 * first.mean():.2f} | "
        f"{c['after'].key}: {100 * second.mean():.2f} | "
        f"{100 * d_all:+.2f} ± {100 * se_all:.2f} / {100 * d_known:+.2f} ± {100 * se_known:.2f} |"
    )


def build_parser(prog: str = "python -m bench.blend_priors") -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--data", action="append", required=True, help="a typed file or folder (repeat)")
    p.add_argument("--run", action="append", required=True, help="a trainer run folder on its shard set (repeat)")
    return p


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    if len(args.data) != len(args.run):
        raise SystemExit("python -m bench.blend_priors: give --data and --run in pairs, one --run per --data")
    print(HEAD)
    print("|" + "---|" * HEAD.count(" |"))
    for data, run in zip(args.data, args.run):
        print(decisions(data, Path(run)), flush=True)
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
