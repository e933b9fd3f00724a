"""--preset auto's training-negatives stage (pipelines.auto_negatives): the choice rule, the flag path, the
budget skip (fake clock), and the stage's trainer jobs (validation only) with fake trainers. The real run,
end to end, is tests/test_auto_search.py's slow test."""
from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import pytest

from common.eval_scores import scores_path
from pipelines import auto_negatives
from pipelines.auto_negatives import HARD_NEG_FRACTION, best_blend, choose_fraction, decide, stage_runs
from pipelines.auto_prior import GRID
from pipelines.run_args import build_parser, validate_args
from tests.test_auto_search import SPE, _searcher


@pytest.mark.parametrize("uniform, hard, chosen", [
    (0.30, 0.31, HARD_NEG_FRACTION),  # strictly higher: hard
    (0.30, 0.30, 0.0),  # a tie keeps uniform
    (0.31, 0.30, 0.0),
])
def test_choice_rule_strictly_higher(uniform, hard, chosen):
    assert choose_fraction({0.0: uniform, HARD_NEG_FRACTION: hard}) == chosen


class _Prior:
    """A PriorStage stand-in: a hand-built validation grid per shard set."""

    def __init__(self, values: list[float]):
        self.values = values

    def validation_grid(self, run_dir):
        return {"grid": [[h, w, v] for (h, w), v in zip(GRID, self.values)], "epoch": 0}


def test_best_blend_is_the_grid_maximum():
    values = [0.2] * len(GRID)
    values[5] = 0.4  # a blend beats the model alone (the first entry, none)
    assert best_blend(_Prior(values), Path("x")) == 0.4
    assert best_blend(_Prior([0.3] + [0.1] * (len(GRID) - 1)), Path("x")) == 0.3


def _args(flag: list[str]) -> Namespace:
    args = build_parser().parse_args(["--dataset", "x", *flag])
    validate_args(args)
    return Namespace(**{**vars(args), "device": "cpu"})


def _chosen(searcher, names, name="b", epochs=4) -> dict:
    cid = {v: k for k, v in names.items()}[name]
    return {"cid": cid, "config": searcher.cands[cid].to_dict(), "epochs": epochs, "shards": "s10"}


def _never(*a, **k):
    raise AssertionError("the stage must not run")


@pytest.mark.parametrize("flag, fraction", [(["--hard-neg-fraction", "0"], 0.0), (["--hard-neg-fraction", "0.5"], 0.5)])
def test_an_explicit_fraction_skips_the_stage(tmp_path, monkeypatch, flag, fraction):
    args = _args(flag)
    assert args.hard_neg_fraction == fraction and not stage_runs(args)
    assert stage_runs(_args([])) and _args([]).hard_neg_fraction is None  # the default: the stage decides
    searcher, names, _ = _searcher(tmp_path, 1000.0, [0.0])
    monkeypatch.setattr(auto_negatives, "run_trainers", _never)
    chosen = _chosen(searcher, names)
    record, weights_dir = decide(args, searcher, chosen, _never, _never, "original", "original", tmp_path / "w")
    assert record == {"chosen": fraction, "by": "flag"} and weights_dir == tmp_path / "w"
    assert chosen["shards"] == "s10" and chosen["hard_neg_fraction"] == fraction


def test_the_stage_is_skipped_when_the_budget_cannot_fit_it(tmp_path, monkeypatch):
    """b: 20 s per epoch, 4 epochs; 2 slots, 2 final seeds besides the stage (final_seeds 3 = 2 + the stage):
    the stage 80 s plus one round of final seeds 80 s = 160 s. 159 s left: skipped; 160 s: it runs."""
    now = [100.0]
    searcher, names, _ = _searcher(tmp_path, 259.0, now)
    searcher.sec_per_epoch = {c: SPE[names[c]] for c in names}
    monkeypatch.setattr(auto_negatives, "run_trainers", _never)
    chosen = _chosen(searcher, names)
    record, weights_dir = decide(_args([]), searcher, chosen, _never, _never, "original", "original", tmp_path / "w")
    assert record == {"chosen": 0.0, "by": "skipped: budget", "need_s": 160.0, "left_s": 159.0}
    assert weights_dir == tmp_path / "w" and chosen["shards"] == "s10" and chosen["hard_neg_fraction"] == 0.0
    now[0] = 99.0  # 160 s left: the stage starts (it builds the hard shard set first)

    class Started(Exception):
        pass

    def build(fraction):
        assert fraction == HARD_NEG_FRACTION
        raise Started
    with pytest.raises(Started):
        decide(_args([]), searcher, chosen, build, _never, "original", "original", tmp_path / "w")


@pytest.mark.parametrize("select", ["original", "hard"])
@pytest.mark.parametrize("uniform, hard", [(0.30, 0.35), (0.30, 0.30)])
@pytest.mark.parametrize("reusable", [True, False])
def test_the_stage_runs_validation_only_and_switches_shards_when_hard_wins(tmp_path, monkeypatch, select, uniform,
                                                                           hard, reusable):
    """Fake trainers: the stage's two jobs (the uniform winner's weights evaluated, or trained when the search
    kept none at the chosen epoch; the hard views trained), both validation only with their scores saved; then
    hard wins only when strictly higher. Seed 0 then evaluates the best.pt of the run of the chosen views. A
    rerun reuses both finished runs."""
    searcher, names, _ = _searcher(tmp_path, 1e9, [0.0])
    searcher.sec_per_epoch = {c: SPE[names[c]] for c in names}
    chosen = _chosen(searcher, names, epochs=2)
    winner = tmp_path / "winner"
    winner.mkdir()
    (winner / "summary.json").write_text(json.dumps({"best_epoch": 1, "epochs_completed": 2}))
    if reusable:
        (winner / "best.pt").write_bytes(b"w")
    seen = []

    def trainers(jobs, slots, stop_at=None, clock=None):
        for key, (flags, run_dir) in jobs.items():
            seen.append((key, flags))
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "summary.json").write_text(json.dumps({"epochs_completed": 2, "best_epoch": 1}))
            path = scores_path(run_dir, "valid", select)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"")
        return {k: 1.0 for k in jobs}, []
    monkeypatch.setattr(auto_negatives, "run_trainers", trainers)
    priors = {"s10": _Prior([uniform] * len(GRID)), "hard-s10": _Prior([hard] * len(GRID))}
    record, weights_dir = decide(_args([]), searcher, chosen, lambda f: "hard-s10", priors.__getitem__, "original",
                                 select, winner)
    flags = dict(seen)
    assert sorted(flags) == ["negatives f0", "negatives f0.5"]
    for key, shards in (("negatives f0", "s10"), ("negatives f0.5", "hard-s10")):
        f = flags[key]
        assert f[f.index("--shards") + 1] == shards and f[f.index("--eval-splits") + 1] == "valid"
        assert f[f.index("--seed") + 1] == "0" and f[f.index("--stop-epoch") + 1] == "2" and "--save-scores" in f
        assert ("--score-protocols" in f) == (select == "hard")
    if reusable:
        assert flags["negatives f0"][flags["negatives f0"].index("--eval-weights") + 1] == str(winner / "best.pt")
    else:
        assert "--eval-weights" not in flags["negatives f0"]
    assert "--eval-weights" not in flags["negatives f0.5"]  # the hard views are trained
    won = hard > uniform
    assert record["fractions"] == {"0": uniform, "0.5": hard} and record["by"] == "validation"
    assert record["chosen"] == (HARD_NEG_FRACTION if won else 0.0) and record["protocol"] == f"valid/{select}"
    runs = {k: Path(v) for k, v in record["runs"].items()}
    assert runs["0"].parent == runs["0.5"].parent == searcher.root and runs["0.5"].name.startswith("negatives-f0.5-")
    assert chosen["shards"] == ("hard-s10" if won else "s10")
    assert weights_dir == (runs["0.5"] if won else winner if reusable else runs["0"])
    # a rerun reuses both finished runs (no trainer job)
    seen.clear()
    again = dict(chosen, shards="s10", hard_neg_fraction=0.0)
    assert decide(_args([]), searcher, again, lambda f: "hard-s10", priors.__getitem__, "original", select,
                  winner)[0] == record
    assert seen == []
