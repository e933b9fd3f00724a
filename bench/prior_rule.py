"""Validation-only check of `--preset auto`'s prior rule (pipelines/auto_prior.py): one (h, w) per seed, or one
for the run (the best mean over the seeds)? Decided on validation halves, never on test.

    python -m bench.prior_rule RESULTS/*/auto/original [--halvings 20] [--seed 0] [--out table.md]

For each finished auto run folder (search.json, seed0..seedK/scores/valid-<selection protocol>.npz written by
the trainer's --save-scores) it repeats R seeded random halvings of the validation queries (the positives:
shared negatives stay with both halves, per-positive ones (hard, heart) go with their positive). On half A:
- per-seed: each seed's own best blend (auto_prior.choose over that seed's grid alone, the old rule);
- run-wide: one blend, the best mean over the seeds (auto_prior.choose over all grids, the current rule);
- the best heuristic alone (CN, AA or RA, ties to the earlier), and none (the model alone) for reference.
Each is scored on half B with the selection metric (mean over the seeds) and the table gives the mean over the
halvings, the std over them (ddof 1), the most frequent pick, and how often run-wide >= per-seed on B.

The grids are PriorStage.validation_grid's (the same GRID, blend, tie rules, heuristics on the validation
graph, and cid -> pair checks against the shard set); the full-validation grids are checked against the run's
search.json. Only validation score files are read: every open of a test-*.npz while it runs fails
(`no_test_scores`, an audit hook), so a bug that read test stops the bench instead of informing it.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from pipelines.auto_prior import GRID, HEURISTICS, NONE, choose
from pipelines.auto_runs import SEARCH_SEED

RULES = ("none", "best heuristic", "per-seed", "run-wide")
_guard = {"on": False}


def _audit(event: str, args) -> None:
    if _guard["on"] and event == "open" and isinstance(args[0], (str, bytes, Path)):
        name = Path(args[0] if not isinstance(args[0], bytes) else args[0].decode()).name
        if name.startswith("test-") and name.endswith(".npz"):
            raise AssertionError(f"bench.prior_rule opened a test file ({args[0]}); it must read validation only")


@contextlib.contextmanager
def no_test_scores():
    """While inside, opening any test-*.npz (a test score or query file) raises. One process-wide audit hook,
    installed once (hooks cannot be removed), active only inside the block."""
    if not _guard.get("installed"):
        sys.addaudithook(_audit)
        _guard["installed"] = True
    _guard["on"] = True
    try:
        yield
    finally:
        _guard["on"] = False


def halvings(n: int, repeats: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """`repeats` seeded random (A, B) halves of n query rows, each sorted; A gets n // 2."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(repeats):
        perm = rng.permutation(n)
        out.append((np.sort(perm[: n // 2]), np.sort(perm[n // 2:])))
    return out


def _at(grid: list[list], pick: dict) -> float:
    return grid[GRID.index((pick["heuristic"], pick["weight"]))][2]


def score_rules(grids_a: list[list], grids_b: list[list], heur_a: dict, heur_b: dict,
                scored: list[int] | None = None) -> dict:
    """One halving: each rule chosen on A's grids (one per seed), scored on B's (mean over the seeds listed in
    `scored`, indices into the grids; default all). heur_a / heur_b: {heuristic: metric of the heuristic alone}
    on A and B."""
    own = [choose([g]) for g in grids_a]
    run = choose(grids_a)  # the run-wide pick sees every seed's half A, as the recipe does
    keep = range(len(grids_b)) if scored is None else scored
    grids_b, own = [grids_b[i] for i in keep], [own[i] for i in keep]
    best = max(HEURISTICS, key=lambda h: (heur_a[h], -HEURISTICS.index(h)))  # ties: the earlier
    none = {"heuristic": NONE, "weight": 0.0}
    return {"none": float(np.mean([_at(g, none) for g in grids_b])),
            "best heuristic": float(heur_b[best]),
            "per-seed": float(np.mean([_at(g, p) for g, p in zip(grids_b, own)])),
            "run-wide": float(np.mean([_at(g, run) for g in grids_b])),
            "picks": {"none": ["none"], "best heuristic": [best.upper()],
                      "per-seed": [_name(p) for p in own], "run-wide": [_name(run)]}}


def _name(pick: dict) -> str:
    return "none" if pick["heuristic"] == NONE else f"{pick['heuristic'].upper()} x {pick['weight']:g}"


def summarize(results: list[dict]) -> dict:
    """{rule: (mean, std, most frequent pick with its count / all picks)}, and how often run-wide >= per-seed."""
    out = {}
    for rule in RULES:
        vals = np.array([r[rule] for r in results])
        picks = Counter(p for r in results for p in r["picks"][rule])
        top, count = picks.most_common(1)[0]
        out[rule] = (float(vals.mean()), float(vals.std(ddof=1)) if len(vals) > 1 else 0.0,
                     f"{top} ({count}/{sum(picks.values())})")
    out["run_wide_ge"] = sum(r["run-wide"] >= r["per-seed"] for r in results)
    out["halvings"] = len(results)
    return out


# ---------------------------------------------------------------------------- one run folder
def load_stage(run_root: Path):
    """(PriorStage, seed folders, search.json) of a finished auto run: the shard set the final seeds used and
    the dataset it was built from (with valid/hard attached when selection ranked on it, as the search did)."""
    from common.datasets import load_set_dataset
    from common.manifest import read_manifest
    from pipelines.auto_prior import PriorStage
    from pipelines.auto_search import HARD, attach_hard_negatives

    search = json.loads((run_root / "search.json").read_text())
    select = search["selection"]["protocol"]
    manifest = read_manifest(search["chosen"]["shards"])
    dataset = load_set_dataset(manifest["config"])
    if select == HARD:
        attach_hard_negatives(dataset)
    seeds = sorted((d for d in run_root.glob("seed*") if d.name[4:].isdigit()), key=lambda d: int(d.name[4:]))
    return PriorStage(dataset, manifest, select, run_root.name), seeds, search


def check_run(run_root: Path, repeats: int, seed: int, skip_search_seed: bool = False) -> dict:
    """Every halving's result for one run, and how far the full-validation grids are from search.json's."""
    from trainer.evaluate import scores_to_metrics

    stage, seeds, search = load_stage(run_root)
    heur = stage.heuristics("valid", stage.select)
    cids = np.arange(len(next(iter(heur.values()))))
    n = len(stage.dataset.splits["valid"].positives(stage.select))

    def heuristic_alone(rows):
        return {h: scores_to_metrics(stage.manifest, "valid", stage.select, cids, heur[h], rows=rows)[stage.metric]
                for h in HEURISTICS}

    drift = max(abs(a[2] - b[2]) for d in seeds
                for a, b in zip(stage.validation_grid(d)["grid"], search["prior"][d.name[4:]]["grid"]))
    # seed 0's validation (both halves) also chose the search's winner, so its B half is optimistic for the
    # model alone; --skip-search-seed scores only the other seeds (every seed's A half still informs the picks)
    scored = [i for i, d in enumerate(seeds) if d.name != f"seed{SEARCH_SEED}"] if skip_search_seed else None
    results = []
    for a, b in halvings(n, repeats, seed):
        grids_a = [stage.validation_grid(d, a)["grid"] for d in seeds]
        grids_b = [stage.validation_grid(d, b)["grid"] for d in seeds]
        results.append(score_rules(grids_a, grids_b, heuristic_alone(a), heuristic_alone(b), scored))
    return {"graph": run_root.parents[1].name, "selection": f"valid/{stage.select}", "metric": stage.metric,
            "seeds": len(seeds) if scored is None else len(scored), "positives": n, "grid_drift": drift, "results": results}


# ---------------------------------------------------------------------------- the table
def table(checks: list[dict]) -> str:
    lines = ["| graph | selection | rule | half-B metric (mean ± std) | most frequent pick on A | run-wide >= per-seed |",
             "|---|---|---|---|---|---|"]
    for c in checks:
        s = summarize(c["results"])
        for rule in RULES:
            mean, std, pick = s[rule]
            ge = f"{s['run_wide_ge']}/{s['halvings']}" if rule == "run-wide" else ""
            lines.append(f"| {c['graph']} | {c['selection']} {c['metric'].upper()} | {rule} | "
                         f"{100 * mean:.2f} ± {100 * std:.2f} | {pick} | {ge} |")
    return "\n".join(lines)


def verdict(checks: list[dict]) -> str:
    diffs = [summarize(c["results"]) for c in checks]
    d = [s["run-wide"][0] - s["per-seed"][0] for s in diffs]
    wins = sum(x >= 0 for x in d)
    halves = sum(s["run_wide_ge"] for s in diffs), sum(s["halvings"] for s in diffs)
    each = ", ".join(f"{c['graph']} {100 * x:+.2f}" for c, x in zip(checks, d))
    return (f"run-wide - per-seed, mean half-B metric: {each}; "
            f"run-wide >= per-seed on {wins} of {len(d)} graphs (mean {100 * float(np.mean(d)) if d else 0:+.2f} points) "
            f"and on {halves[0]} of {halves[1]} halvings")


def halving_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The flags every validation-halves bench shares (this one and bench.stage_rule)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("runs", nargs="+", type=Path, help="finished auto run folders (RESULTS/<graph>/auto/<protocol>)")
    p.add_argument("--halvings", type=int, default=20, help="random halvings of the validation queries")
    p.add_argument("--seed", type=int, default=0, help="seed of the halvings")
    p.add_argument("--out", type=Path, help="also write the table (markdown) here")
    return p


def parse_halving_args(p: argparse.ArgumentParser, argv) -> argparse.Namespace:
    args = p.parse_args(argv)
    if args.halvings < 1:
        p.error(f"--halvings: {args.halvings}; pass at least 1")
    return args


def publish(text: str, out: Path | None) -> int:
    print(text)
    if out:
        out.write_text(text)
    return 0


def main(argv=None) -> int:
    p = halving_parser("python -m bench.prior_rule", __doc__.split("\n\n")[0])
    p.add_argument("--skip-search-seed", action="store_true",
                   help="score half B on the seeds other than the search's seed 0 (whose validation also chose the "
                        "search winner); the picks still see every seed's half A")
    args = parse_halving_args(p, argv)
    checks = []
    with no_test_scores():
        for run_root in args.runs:
            try:
                c = check_run(run_root, args.halvings, args.seed, args.skip_search_seed)
            except Exception as err:  # noqa: BLE001 - one graph that cannot be loaded must not stop the others
                if isinstance(err, AssertionError):
                    raise
                print(f"skipped {run_root}: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
                continue
            print(f"{c['graph']}: {c['seeds']} seeds, {c['positives']} validation queries, grids reproduce "
                  f"search.json's within {c['grid_drift']:.1e}", file=sys.stderr, flush=True)
            checks.append(c)
    return publish(table(checks) + "\n\n" + verdict(checks) + "\n", args.out)


if __name__ == "__main__":
    sys.exit(main())
