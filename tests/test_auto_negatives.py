"""--preset auto's training-negatives stage (pipelines.auto.negatives): the choice rule, the flag path, the
budget (the search's reservation and the skip, fake clock), the stage's trainer jobs (seed 1, validation
only) and which weights each final seed then evaluates, with fake trainers. The real run, end to end, is
tests/test_auto_search.py's slow test."""
from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import pytest

from common.eval_scores import scores_path
from pipelines.auto import final as auto_final, negatives as auto_negatives
from pipelines.auto.candidates import round_cost
from pipelines.auto.final import FINAL_MARK, train_final_seeds
from pipelines.auto.negatives import (HARD_NEG_FRACTION, STAGE_SEED, arm_values, choose_fraction, decide,
                                      reserved_trainings, stage_runs)
from pipelines.auto.blend import GRID
from pipelines.core.run_args import build_parser, validate_args
from tests.test_auto_search import SPE, _searcher


def _arm(selection: float, reported: float = 0.5, auc: float = 0.9) -> dict:
    return {"selection": selection, "reported": reported, "auc": auc}


@pytest.mark.parametrize("uniform, hard, chosen", [
    (_arm(0.30), _arm(0.31), HARD_NEG_FRACTION),  # strictly higher, the reported protocol no worse: hard
    (_arm(0.30), _arm(0.30), 0.0),  # a tie keeps uniform
    (_arm(0.31), _arm(0.30), 0.0),
    (_arm(0.30, 0.63, 0.894), _arm(0.47, 0.36, 0.860), 0.0),  # citeseer's trade: selection up, reported down
    (_arm(0.20, 0.20, 0.930), _arm(0.22, 0.22, 0.919), 0.0),  # wikipedia's: MRR up, AUC down
    (_arm(0.20, 0.20, 0.930), _arm(0.22, 0.22, 0.930), HARD_NEG_FRACTION),  # AUC equal: no loss
])
def test_choice_rule_strictly_higher_and_no_loss_on_the_reported_protocol(uniform, hard, chosen):
    assert choose_fraction({0.0: uniform, HARD_NEG_FRACTION: hard}) == chosen


class _Prior:
    """A PriorStage stand-in: a hand-built selection grid per shard set, and the blend's reported-protocol
    validation metrics."""

    reported_metric = "mrr"

    def __init__(self, values: list[float], reported: float = 0.5, auc: float = 0.9):
        self.values, self.reported, self.auc = values, reported, auc
        self.blended_calls = []

    def choose_for(self, run_dirs):
        best = max(range(len(GRID)), key=lambda i: self.values[i])
        return {"heuristic": GRID[best][0], "weight": GRID[best][1], "valid_mean": self.values[best]}

    def blended(self, run_dir, split, chosen):
        self.blended_calls.append((split, chosen["heuristic"], chosen["weight"]))
        return {"mrr": self.reported, "auc": self.auc, "hits@20": 0.0}


def test_an_arm_is_its_best_selection_blend_and_that_blend_on_the_reported_protocol():
    values = [0.2] * len(GRID)
    values[5] = 0.4  # a blend beats the model alone (the first entry, none)
    prior = _Prior(values, reported=0.33, auc=0.81)
    assert arm_values(prior, Path("x")) == {"selection": 0.4, "reported": 0.33, "auc": 0.81}
    assert prior.blended_calls == [("valid", *GRID[5])]  # validation of the reported protocol, that blend
    assert arm_values(_Prior([0.3] + [0.1] * (len(GRID) - 1)), Path("x"))["selection"] == 0.3


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
@pytest.mark.parametrize("reusable", [True, False])
def test_an_explicit_fraction_skips_the_stage(tmp_path, monkeypatch, flag, fraction, reusable):
    """The search ran on the flag's views: seed 0 evaluates the winner's best.pt (when it holds the chosen epoch)."""
    args = _args(flag)
    assert args.hard_neg_fraction == fraction and not stage_runs(args)
    assert stage_runs(_args([])) and _args([]).hard_neg_fraction is None  # the default: the stage decides
    searcher, names, _ = _searcher(tmp_path, 1000.0, [0.0])
    monkeypatch.setattr(auto_negatives, "run_trainers", _never)
    chosen = _chosen(searcher, names)
    winner = _winner(tmp_path, 4, reusable)
    record, weights = decide(args, searcher, [0, 1, 2], chosen, _never, _never, "original", "original", winner)
    assert record == {"chosen": fraction, "by": "flag"}
    assert weights == ({0: winner / "best.pt"} if reusable else {})
    assert chosen["shards"] == "s10" and chosen["hard_neg_fraction"] == fraction


def _winner(tmp_path, epochs: int, reusable: bool) -> Path:
    """The search winner's folder: best.pt at the chosen epoch when `reusable`."""
    winner = tmp_path / "winner"
    winner.mkdir(exist_ok=True)
    (winner / "summary.json").write_text(json.dumps({"best_epoch": epochs - 1, "epochs_completed": epochs}))
    if reusable:
        (winner / "best.pt").write_bytes(b"w")
    return winner


@pytest.mark.parametrize("slots, seeds, need", [
    (2, [0, 1, 2], 160.0),  # the two stage runs at once (80 s), then seeds 0 and 2 at once (hard kept: 80 s)
    (1, [0, 1, 2], 320.0),  # one after another: 2 x 80 s, then 2 x 80 s
    (2, [0], 160.0),  # --seeds 0: the stage's runs (seed 1) are its own; seed 0 may train after them
])
def test_the_stage_is_skipped_when_the_budget_cannot_fit_it(tmp_path, monkeypatch, slots, seeds, need):
    """b: 20 s per epoch, 4 epochs. The skip check needs the stage's two runs in the trainer slots plus the
    final seeds in the worst case (hard kept: every seed but 1 trains); the search reserved exactly that
    (reserved_trainings in round_cost's unit). 1 s short: skipped; enough: it runs."""
    now = [101.0]
    searcher, names, _ = _searcher(tmp_path, 100.0 + need, now)
    searcher.slots = slots
    searcher.sec_per_epoch = {c: SPE[names[c]] for c in names}
    monkeypatch.setattr(auto_negatives, "run_trainers", _never)
    chosen = _chosen(searcher, names)
    cid = chosen["cid"]
    assert round_cost(searcher.sec_per_epoch, [cid], 0, 4, slots, reserved_trainings(_args([]), seeds, slots)) == need
    winner = _winner(tmp_path, 4, True)
    record, weights = decide(_args([]), searcher, seeds, chosen, _never, _never, "original", "original", winner)
    assert record == {"chosen": 0.0, "by": "skipped: budget", "need_s": need, "left_s": need - 1}
    assert weights == {0: winner / "best.pt"} and chosen["shards"] == "s10" and chosen["hard_neg_fraction"] == 0.0
    now[0] = 100.0  # exactly enough: the stage starts (it builds the hard shard set first)

    class Started(Exception):
        pass

    def build(fraction):
        assert fraction == HARD_NEG_FRACTION
        raise Started
    with pytest.raises(Started):
        decide(_args([]), searcher, seeds, chosen, build, _never, "original", "original", winner)


def test_reserved_trainings():
    """Without the stage: every seed but 0. With it: its two runs padded to whole rounds of slots, then every
    seed but 1 (hard kept)."""
    assert reserved_trainings(_args(["--hard-neg-fraction", "0"]), [0, 1, 2], 2) == 2
    assert reserved_trainings(_args([]), [0, 1, 2], 2) == 2 + 2
    assert reserved_trainings(_args([]), [0, 1, 2], 4) == 4 + 2  # one round of 4 slots, then one more
    assert reserved_trainings(_args([]), [0], 1) == 2 + 1
    assert reserved_trainings(_args([]), [1, 2], 3) == 3 + 1


def _fake_trainers(seen: list, select: str, epochs: int):
    """run_trainers stand-in: records each job's flags and writes a finished run (summary, best.pt at the last
    epoch, the validation scores the prior reads)."""
    def trainers(jobs, slots, stop_at=None, clock=None, device_flag="cpu"):
        for key, (flags, run_dir) in ((k, (j.flags, j.run_dir)) for k, j in jobs.items()):
            seen.append((key, flags))
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "summary.json").write_text(json.dumps({"epochs_completed": epochs, "best_epoch": epochs - 1}))
            (run_dir / "best.pt").write_bytes(b"w")
            for protocol in {"original", select}:  # the reported protocol's and the selection's
                path = scores_path(run_dir, "valid", protocol)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(b"")
        return {k: 1.0 for k in jobs}, []
    return trainers


def _value(flags: list[str], flag: str) -> str | None:
    return flags[flags.index(flag) + 1] if flag in flags else None


@pytest.mark.parametrize("select", ["original", "hard"])
@pytest.mark.parametrize("uniform, hard", [(0.30, 0.35), (0.30, 0.30)])
@pytest.mark.parametrize("reusable", [True, False])
def test_the_stage_trains_seed_1_on_both_views_and_the_final_seeds_reuse_the_chosen_run(
        tmp_path, monkeypatch, select, uniform, hard, reusable):
    """Fake trainers: the stage's two jobs, seed 1 trained on the uniform and on the hard views (neither
    evaluates saved weights), both validation only with their scores saved; hard wins only when strictly
    higher. Then the final seeds 0, 1, 2: seed 1 evaluates the best.pt of the stage's run of the chosen views;
    seed 0 the search winner's when uniform is kept (it trains when that holds no weights at the chosen epoch,
    and always when hard is kept); seed 2 trains; all on the chosen views, their marks naming them. A rerun of
    the stage reuses both finished runs."""
    searcher, names, _ = _searcher(tmp_path, 1e9, [0.0])
    searcher.sec_per_epoch = {c: SPE[names[c]] for c in names}
    chosen = _chosen(searcher, names, epochs=2)
    winner = _winner(tmp_path, 2, reusable)
    seen = []
    monkeypatch.setattr(auto_negatives, "run_trainers", _fake_trainers(seen, select, 2))
    priors = {"s10": _Prior([uniform] * len(GRID)), "hard-s10": _Prior([hard] * len(GRID))}
    record, weights = decide(_args([]), searcher, [0, 1, 2], chosen, lambda f: "hard-s10", priors.__getitem__,
                             "original", select, winner)
    flags = dict(seen)
    assert sorted(flags) == ["negatives f0", "negatives f0.5"]
    for key, shards in (("negatives f0", "s10"), ("negatives f0.5", "hard-s10")):
        f = flags[key]
        assert _value(f, "--shards") == shards and _value(f, "--eval-splits") == "valid"
        assert _value(f, "--seed") == str(STAGE_SEED) == "1" and _value(f, "--stop-epoch") == "2"
        assert "--save-scores" in f and "--eval-weights" not in f and "--overwrite" in f
        assert ("--score-protocols" in f) == (select == "hard")
    won = hard > uniform
    assert record["fractions"] == {"0": _arm(uniform), "0.5": _arm(hard)} and record["by"] == "validation"
    assert record["reported"] == "valid/original"
    assert record["seed"] == 1 and record["protocol"] == f"valid/{select}"
    assert record["chosen"] == (HARD_NEG_FRACTION if won else 0.0)
    runs = {k: Path(v) for k, v in record["runs"].items()}
    assert runs["0"].parent == runs["0.5"].parent == searcher.root
    assert runs["0"].name.startswith("negatives-f0-") and runs["0.5"].name.startswith("negatives-f0.5-")
    assert chosen["shards"] == ("hard-s10" if won else "s10")
    if won:  # seed 0's uniform weights do not apply to the hard views: it trains
        assert weights == {1: runs["0.5"] / "best.pt"}
    else:
        assert weights == {1: runs["0"] / "best.pt", **({0: winner / "best.pt"} if reusable else {})}

    # the final seeds with these weights
    final = []
    monkeypatch.setattr(auto_final, "run_trainers", _fake_trainers(final, select, 2))
    seeds = {s: tmp_path / f"seed{s}" for s in (0, 1, 2)}
    used = train_final_seeds(_args([]), chosen, "original", select, seeds, weights, 2)
    assert used == weights
    jobs = dict(final)
    assert sorted(jobs) == ["seed 0", "seed 1", "seed 2"]
    evaluated = {s: _value(jobs[f"seed {s}"], "--eval-weights") for s in seeds}
    assert evaluated == {0: str(winner / "best.pt") if reusable and not won else None,
                         1: str(runs["0.5" if won else "0"] / "best.pt"), 2: None}
    for s, d in seeds.items():
        f = jobs[f"seed {s}"]
        assert _value(f, "--shards") == chosen["shards"] and _value(f, "--seed") == str(s)
        assert _value(f, "--eval-splits") == "valid,test"
        assert json.loads((d / FINAL_MARK).read_text()) == {"cid": chosen["cid"], "shards": chosen["shards"]}
    # --seeds 0: the stage's runs serve the decision only; seed 0 as above
    final.clear()
    only0 = {0: tmp_path / "only0"}
    assert train_final_seeds(_args([]), chosen, "original", select, only0, weights, 2) == (
        {0: winner / "best.pt"} if reusable and not won else {})

    # a rerun of the stage reuses both finished runs (no trainer job) and returns the same weights
    seen.clear()
    again = dict(chosen, shards="s10", hard_neg_fraction=0.0)
    assert decide(_args([]), searcher, [0, 1, 2], again, lambda f: "hard-s10", priors.__getitem__, "original",
                  select, winner) == (record, weights)
    assert seen == []


def test_a_stage_run_is_finished_only_with_the_validation_scores_of_both_protocols(tmp_path):
    """The choice reads the selection protocol's and the reported protocol's validation scores: a run from
    before the reported-protocol check (selection scores only) is trained again, not reused."""
    run = tmp_path / "negatives-f0-x"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"epochs_completed": 2}))
    for protocol in ("hard", "original"):
        assert not auto_negatives.finished(run, 2, "original", "hard")
        path = scores_path(run, "valid", protocol)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    assert auto_negatives.finished(run, 2, "original", "hard")
    assert not auto_negatives.finished(run, 3, "original", "hard")  # fewer epochs than the choice's
    assert auto_negatives.finished(run, 2, "original", "original")
