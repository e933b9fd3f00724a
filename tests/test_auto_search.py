"""`--preset auto`'s search: the validation signal on hand-computed values, the choice rule, the epoch rule,
the search's rungs with fake trainers (what trains, what is kept, what is reused, what the budget cuts),
and a search that never sees a test file (it reads validation scores only)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipelines.auto import search as auto_search
from pipelines.auto.config import SearchConfig, candidates
from pipelines.auto.records import SearchPlan
from pipelines.auto.signal import Signal, break_tie, choose, paired, rank_values, tie_metric, two_way_se
from pipelines.core.config import TrainerOptions


# ---------------------------------------------------------------------------- the signal, exact
def test_rank_values_against_shared_and_own_negatives():
    got = rank_values(np.array([3.0, 1.0]), np.array([2.0, 1.0, 0.0]))
    # positive 3 beats all three: rank 1; positive 1 loses to 2, ties 1: rank 1 + 1 + 0.5 = 2.5
    assert np.allclose(got["mrr"], [1.0, 0.4]) and np.allclose(got["auc"], [1.0, 1 - 1.5 / 3])
    own = rank_values(np.array([0.5, 0.5]), np.array([[0.9, 0.1], [0.1, 0.2]]))
    assert np.allclose(own["mrr"], [0.5, 1.0]) and np.allclose(own["auc"], [0.5, 1.0])
    assert np.mean(got["auc"]) == pytest.approx(5 / 6 * 0.9)  # (3 + 1.5) / 6 of the pairs


def test_paired_difference_and_its_standard_error():
    diff, se = paired(np.array([1.0, 0.5, 0.0, 0.5]), np.array([0.5, 0.5, 0.5, 0.5]))
    d = np.array([0.5, 0.0, -0.5, 0.0])
    assert diff == pytest.approx(0.0) and se == pytest.approx(d.std(ddof=1) / 2)
    assert paired(np.array([1.0]), np.array([0.0]))[1] == float("inf")  # one positive: no noise estimate


@pytest.mark.parametrize(
    "alt, margin, chosen",
    [
        ([0.6, 0.6, 0.6, 0.6], 2.0, "alt"),  # better everywhere: SE 0, it wins
        ([0.9, 0.1, 0.9, 0.4], 2.0, "default"),  # ahead on the mean (0.575 > 0.5) but within 2 SE
        ([0.9, 0.1, 0.9, 0.4], 0.0, "alt"),  # the same with no margin: the mean decides
        ([0.5, 0.5, 0.5, 0.5], 2.0, "default"),  # a tie keeps the default
    ],
)
def test_an_alternative_replaces_the_default_only_beyond_the_margin(alt, margin, chosen):
    got = choose({"default": np.full(4, 0.5), "alt": np.array(alt)}, margin)
    assert got["choice"] == chosen and got["means"]["default"] == 0.5


class TwoMetrics(Signal):
    """Per-positive MRR (pos) and AUC (neg[:, 0]) as given; two_way_se redraws the positives (own negatives)."""

    def __init__(self, mrr, auc):
        super().__init__(np.asarray(mrr, dtype=float), np.asarray(auc, dtype=float)[:, None])

    def values(self, ip=None, iq=None):
        ip = np.arange(len(self.pos)) if ip is None else ip
        return {"mrr": self.pos[ip], "auc": self.neg[ip, 0]}


def decide(signals: dict, metric: str = "mrr", margin: float = 1.0) -> dict:
    """The search's decision: choose on `metric`, then break_tie."""
    values = {k: s.values()[metric] for k, s in signals.items()}
    first = choose(values, margin, lambda a, b: two_way_se(signals[a], signals[b], metric))
    return break_tie(first, signals, metric, margin)


@pytest.mark.parametrize(
    "alt_mrr, alt_auc, chosen",
    [
        ([0.2, 0.2, 0.2, 0.2], [0.8, 0.8, 0.8, 0.8], "alt"),  # MRR equal (SE 0), AUC +0.2 (SE 0): the AUC decides
        ([0.1, 0.3, 0.1, 0.3], [0.8, 0.8, 0.8, 0.8], "alt"),  # MRR +0 within its noise, AUC +0.2 everywhere
        ([0.1, 0.1, 0.1, 0.1], [0.9, 0.9, 0.9, 0.9], "default"),  # MRR -0.1 beyond its SE (0): no tie
        ([0.2, 0.2, 0.2, 0.2], [0.7, 0.5, 0.7, 0.5], "default"),  # a tie, but AUC +0 on average
        ([0.2, 0.2, 0.2, 0.2], [1.0, 0.4, 1.0, 0.4], "default"),  # a tie, AUC +0.1 within its SE (about 0.15)
    ],
)
def test_a_tie_on_the_lead_metric_is_broken_by_the_other_one(alt_mrr, alt_auc, chosen):
    default = TwoMetrics([0.2] * 4, [0.6] * 4)
    got = decide({"default": default, "alt": TwoMetrics(alt_mrr, alt_auc)})
    assert got["choice"] == chosen
    if chosen == "alt":
        assert got["tie_break"]["metric"] == "auc" and "ties with default on mrr" in got["reason"]
        assert got["tie_break"]["difference"] == pytest.approx(0.2)
        assert got["tie_break"]["mrr_difference"] == pytest.approx(0, abs=1e-12)  # the tie it broke


def test_the_tie_break_leaves_a_clear_decision_alone_and_swaps_metrics_for_auc():
    clear = decide({"default": TwoMetrics([0.2] * 4, [0.6] * 4), "alt": TwoMetrics([0.5] * 4, [0.1] * 4)})
    assert clear["choice"] == "alt" and "tie_break" not in clear  # won on MRR: AUC is not asked
    assert (tie_metric("mrr"), tie_metric("hits@20"), tie_metric("auc")) == ("auc", "auc", "mrr")
    on_auc = decide({"default": TwoMetrics([0.2] * 4, [0.6] * 4), "alt": TwoMetrics([0.4] * 4, [0.6] * 4)}, "auc")
    assert on_auc["choice"] == "alt" and on_auc["tie_break"]["metric"] == "mrr"  # --metric auc: MRR breaks ties


def test_an_alternative_trails_only_beyond_the_margin_and_not_when_ahead_on_the_other_metric():
    from pipelines.auto.signal import trails

    base = TwoMetrics([0.5] * 4, [0.6] * 4)
    got = trails(TwoMetrics([0.3] * 4, [0.6] * 4), base, "mrr", 1.0)  # 0.2 behind at SE 0
    assert got["mrr_difference"] == pytest.approx(-0.2) and got["mrr_se"] == 0.0 and got["auc_difference"] == 0.0
    assert trails(TwoMetrics([0.3] * 4, [0.9] * 4), base, "mrr", 1.0) is None  # ahead on AUC: a tie-break may win
    assert trails(TwoMetrics([0.1, 0.9, 0.1, 0.5], [0.6] * 4), base, "mrr", 1.0) is None  # -0.1, within its SE
    assert trails(TwoMetrics([0.5] * 4, [0.3] * 4), base, "auc", 1.0)["auc_difference"] == pytest.approx(-0.3)


def test_two_way_se_against_a_loop_over_its_draws():
    """The bootstrap's SE equals a slow loop that redraws positives and shared negatives and ranks by hand."""
    rng = np.random.default_rng(3)
    a, b = Signal(rng.normal(size=30), rng.normal(size=40)), Signal(rng.normal(size=30), rng.normal(size=40))
    draws, reps = np.random.default_rng(0), []
    for _ in range(50):
        ip, iq = draws.integers(0, 30, 30), draws.integers(0, 40, 40)
        rr = [
            np.mean([1 / (1 + np.sum(s.neg[iq] > x) + 0.5 * np.sum(s.neg[iq] == x)) for x in s.pos[ip]]) for s in (a, b)
        ]
        reps.append(rr[0] - rr[1])
    assert two_way_se(a, b, "mrr", draws=50) == pytest.approx(np.std(reps, ddof=1))
    # own negatives travel with their positive: only positives are drawn
    own = Signal(np.array([1.0, 0.0, 2.0]), np.zeros((3, 2)))
    assert two_way_se(own, own, "mrr") == 0.0 and two_way_se(Signal(own.pos[:1], own.neg[:1]), own, "mrr") == np.inf


def test_the_two_way_se_sees_the_negatives_noise():
    """Two runs that differ only in how they rank the shared negatives: the closed form over the positives sees
    almost nothing, the bootstrap over the negatives too sees the spread."""
    rng = np.random.default_rng(1)
    pos = rng.normal(1.0, 1.0, 100)
    a, b = Signal(pos, rng.normal(size=20)), Signal(pos, rng.normal(size=20))
    closed = paired(a.values()["mrr"], b.values()["mrr"])[1]
    assert two_way_se(a, b, "mrr") > closed


def test_choose_takes_the_standard_error_it_is_given():
    values = {"default": np.full(4, 0.5), "alt": np.full(4, 0.6)}
    assert choose(values, 1.0)["choice"] == "alt"  # closed form: SE 0
    got = choose(values, 1.0, se_of=lambda best, default: 0.2)
    assert got["choice"] == "default" and got["se"] == 0.2


def test_hits_at_k_per_positive_count_a_tie_averaged_rank_at_most_k():
    got = rank_values(np.array([3.0, 1.0, 0.5]), np.array([2.0, 1.0, 0.0]))
    # ranks 1, 2.5 (one above, one tied), 3 (two above, 0.5 > 0): Hits@1 counts the first, Hits@3 all three
    assert np.allclose(got["hits@1"], [1, 0, 0]) and np.allclose(got["hits@3"], [1, 1, 1])
    assert np.allclose(got["mrr"], [1, 0.4, 1 / 3])


def test_a_run_gets_the_steps_it_needs_within_bounds():
    cfg = SearchConfig()
    assert cfg.epochs(18) == 60 and cfg.epochs(50) == 30 and cfg.epochs(125) == 12 and cfg.epochs(5000) == 12
    assert (cfg.grace_epochs(12), cfg.patience_epochs(12)) == (2, 3)
    assert (cfg.grace_epochs(60), cfg.patience_epochs(60)) == (10, 15)
    assert [c.name for c in candidates()] == ["default", "deep", "wide"]  # the default first: ties keep it
    deep = candidates()[1]
    assert deep.cid == "deep-d2n10" and deep.overrides()[-2:] == ("--distance-features", "4")
    assert "--distance-features" not in candidates()[0].overrides()


def test_an_alternative_of_longer_sequences_gets_the_defaults_compute_in_fewer_epochs():
    cfg = SearchConfig()
    # epochs of 0.32M tokens against the default's 0.09M (two hops of 10 on a small dense graph), 27 epochs: the
    # default's 2.43M tokens in round(7.6) epochs
    assert cfg.candidate_epochs(27, 0.32e6, 0.09e6) == 8
    # the default's run (12 x 0.14M = 1.68M) is above the floor: 1.68M / 0.77M -> 2 epochs, never fewer
    assert cfg.candidate_epochs(12, 0.77e6, 0.14e6) == 2 and cfg.candidate_epochs(12, 5e6, 0.14e6) == 2
    # the dense-cost report's epoch tokens: `deep` on blogs (6 x 0.585M = 3.51M over 2.879M) -> 2 epochs, bio-300
    # (2.38M / 0.745M) -> 3
    assert cfg.candidate_epochs(6, 2.879e6, 0.585e6) == 2 and cfg.candidate_epochs(14, 0.745e6, 0.170e6) == 3
    # a grace period ends before its run: a run of 2 epochs is judged after its first, 3 and more after 2 at least
    assert [cfg.grace_epochs(e) for e in (1, 2, 3, 13)] == [1, 1, 2, 2]
    # a run that cheap is not cut: 20 x 0.07M = 1.4M is below the floor of 1.5M; 13 x 0.18M = 2.34M is cut to 1.5M
    assert cfg.candidate_epochs(20, 0.07e6, 0.04e6) == 20 and cfg.candidate_epochs(13, 0.18e6, 0.08e6) == 8
    assert cfg.candidate_epochs(12, 0.1e6, 0.2e6) == 12  # fewer tokens than the default: never more epochs
    assert cfg.candidate_epochs(12, 1e6, 0.0) == 12 and cfg.candidate_epochs(12, 0.0, 0.1e6) == 12  # unknown
    assert SearchConfig(matched_compute=False).candidate_epochs(12, 0.77e6, 0.14e6) == 12


def test_the_defaults_run_is_cut_to_the_token_budget_and_the_alternatives_follow():
    assert SearchConfig().max_run_tokens is None  # off until validated: the schedule as it was
    cfg = SearchConfig(max_run_tokens=2.0e6)  # at most 2.0M tokens a run, at least 3 epochs
    # a dense graph's 6 epochs of 0.59M tokens (3.56M) -> floor(2.0 / 0.59) = 3; of 0.445M -> 4
    assert cfg.capped_epochs(6, 0.59e6) == 3 and cfg.capped_epochs(6, 0.445e6) == 4
    assert cfg.capped_epochs(6, 0.3e6) == 6 and cfg.capped_epochs(6, 2e6 / 6) == 6  # within the budget: as it was
    assert cfg.capped_epochs(6, 1.5e6) == 3 and cfg.capped_epochs(2, 5e6) == 2  # the floor, never more epochs
    assert cfg.capped_epochs(6, 0) == 6 and SearchConfig().capped_epochs(6, 0.59e6) == 6
    # the alternatives get the capped run's compute: 3 x 0.59M = 1.78M over `wide`'s 0.83M epochs -> 2
    assert cfg.candidate_epochs(cfg.capped_epochs(6, 0.59e6), 0.83e6, 0.59e6) == 2


def test_the_recipe_caps_the_defaults_schedule_from_its_shard_sets_tokens_only():
    from pipelines.auto.recipe import capped_epochs

    cfg = SearchConfig(max_run_tokens=2.0e6)
    assert capped_epochs(cfg, 6, {"default-d1n20": 0.59e6, "deep-d2n10": 2.9e6}) == 3
    assert capped_epochs(SearchConfig(), 6, {"default-d1n20": 0.59e6}) == 6  # the default config: no cap
    assert capped_epochs(cfg, 6, None) == 6  # --epochs or a GPU: no token counts, no cap
    assert capped_epochs(cfg, 14, {"default-d1n20": 0.1e6}) == 14


def test_more_negatives_per_positive_train_the_same_links_in_fewer_epochs():
    from types import SimpleNamespace

    from pipelines.auto.recipe import run_epochs

    cfg = SearchConfig()
    # 3 negatives per positive: 4 links a positive instead of 2, so half the epochs (rounded up, at least 2)
    assert [cfg.link_epochs(e, 3) for e in (12, 13, 27, 60, 3)] == [6, 7, 14, 30, 2]
    assert cfg.link_epochs(13, 1) == 13 and cfg.link_epochs(12, 2) == 8
    # 1,000 positives and 3,000 negatives in batches of 64; the default's own 1:1 view, 2,000 links
    assert candidates()[0].steps_per_epoch(1000, 3) == 63 and candidates()[0].steps_per_epoch(1000) == 32
    run = SimpleNamespace(trainer=SimpleNamespace(epochs=None))
    # 4,000 positives: 125 steps at 1:1 -> the floor of 12 epochs -> 6 at 1:3; a small graph's 50 steps -> 30 -> 15
    assert run_epochs(run, cfg, 4000, 3) == 6 and run_epochs(run, cfg, 1600, 3) == 15
    assert run_epochs(SimpleNamespace(trainer=SimpleNamespace(epochs=5)), cfg, 1600, 3) == 5  # --epochs is kept


def test_negatives_per_positive_fall_to_what_the_graph_holds_and_stay_one_for_hard_views():
    from types import SimpleNamespace

    from pipelines.auto.recipe import negatives_per_positive
    from tests.conftest import run_config

    cfg, run = SearchConfig(), run_config("--dataset", "citeseer")
    assert cfg.neg_ratio == 3
    sparse = SimpleNamespace(num_nodes=1000, num_edges=3000)  # 496,500 non-edges
    assert negatives_per_positive(run, cfg, sparse, 2500) == 3
    dense = SimpleNamespace(num_nodes=10, num_edges=30)  # 45 pairs, 15 non-edges
    assert negatives_per_positive(run, cfg, dense, 7) == 2 and negatives_per_positive(run, cfg, dense, 20) == 1
    for hard in (
        run_config("--dataset", "citeseer", "--objective", "recommend"),
        run_config("--dataset", "citeseer", "--hard-neg-fraction", "0.25"),
    ):
        assert negatives_per_positive(hard, cfg, sparse, 2500) == 1


# ---------------------------------------------------------------------------- the search with fake trainers
class FakeRuns:
    """Stands in for the trainer pool and the saved scores: each candidate's validation values per epoch come
    from `curves` ({name: [value at epoch 0, 1, ...]}); a job writes the summary a trainer would."""

    def __init__(self, curves: dict, spread: float = 0.0, stopped: tuple = (), dies: dict | None = None, pace=None):
        """stopped: candidates the budget stops before they start; dies: {name: epochs it evaluates, then its
        trainer fails without a summary}; pace: (clock, {name: optimiser steps per second}): a job of a watched
        run first writes train lines at that pace, each a tick of the clock, until the watcher stops it."""
        self.curves, self.spread, self.stopped, self.jobs, self.dies = curves, spread, stopped, [], dies or {}
        self.clock, self.steps_per_s = pace or (None, {})

    def name(self, run_dir: Path) -> str:
        return run_dir.name.split("-")[0]

    def trainers(self, jobs, slots, stop_at=None, clock=None, failed=None, watch=None):
        for key, job in jobs.items():
            flags = job.flags()
            self.jobs.append(flags)
            if watch is not None and self.paced(key, Path(job.run_dir), watch):
                continue  # stopped by the watcher before its first evaluation
            if self.name(Path(job.run_dir)) in self.dies:
                self.die(Path(job.run_dir), self.dies[self.name(Path(job.run_dir))])
                failed[key] = f"{key}: the trainer failed (killed); full log: {job.log}"
                continue
            stop = int(flags[flags.index("--stop-epoch") + 1])
            patience = int(flags[flags.index("--patience") + 1]) if "--patience" in flags else None
            run_dir = Path(job.run_dir)
            curve, epoch = self.curves[self.name(run_dir)], 0
            best = 0
            while epoch < stop:  # as trainer.train: evaluate every epoch, stop once `patience` passed the best
                best = max(range(epoch + 1), key=lambda e: (curve[min(e, len(curve) - 1)], -e))
                epoch += 1
                if patience and epoch - 1 - best >= patience:
                    break
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "summary.json").write_text(
                json.dumps(
                    {"epochs_completed": epoch, "best_epoch": best, "converged": bool(patience and epoch < stop)}
                )
            )
        return {k: 1.0 for k in jobs}, [k for k in jobs if k in self.stopped]

    def paced(self, key: str, run_dir: Path, watch) -> bool:
        """Write train lines 10 steps apart at the candidate's pace, asking the watcher after each; True when it
        stopped the run."""
        rate = self.steps_per_s.get(self.name(run_dir))
        if rate is None:
            return False
        run_dir.mkdir(parents=True, exist_ok=True)
        for step in range(10, 200, 10):
            with open(run_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps({"event": "train", "step": step, "epoch": 0}) + "\n")
            if watch(key):
                return True
            self.clock.now += 10 / rate
        return False

    def die(self, run_dir: Path, epochs: int) -> None:
        """What a trainer killed after `epochs` evaluations leaves: its metrics and best validation scores."""
        from common.eval_scores import write_scores

        run_dir.mkdir(parents=True, exist_ok=True)
        curve = self.curves[self.name(run_dir)][:epochs]
        if curve:
            best = max(range(len(curve)), key=lambda e: (curve[e], -e))
            write_scores(run_dir / "scores" / "valid-original.npz", np.arange(2), np.zeros(2), best)
        (run_dir / "metrics.jsonl").write_text(
            "".join(
                json.dumps({"event": "eval", "epoch": e, "split": "valid", "protocol": "original", "mrr": v}) + "\n"
                for e, v in enumerate(curve)
            )
            + '{"event": "eval", "ep'
        )  # and a torn last line

    def signal(self, run_dir, manifest, protocol):
        path = Path(run_dir) / "summary.json"
        if path.exists():
            s = json.loads(path.read_text())
        else:  # a trainer that died: its best epoch is its saved scores'
            from common.eval_scores import read_scores, scores_path

            s = {"best_epoch": read_scores(scores_path(Path(run_dir), "valid", protocol))[2]}
        curve = self.curves[self.name(Path(run_dir))]
        v = curve[min(s["best_epoch"], len(curve) - 1)]
        rng = np.random.default_rng(sum(map(ord, self.name(Path(run_dir)))))  # its own noise per candidate
        noise = rng.choice([-1.0, 1.0], size=100) * self.spread
        return FakeSignal(v + noise, np.empty((100, 0)))


class FakeSignal(Signal):
    """Per-positive values as they are: each positive's own (empty) negatives, so two_way_se draws positives."""

    def values(self, ip=None, iq=None):
        v = self.pos if ip is None else self.pos[ip]
        return {"mrr": v, "auc": v}


def _search(tmp_path, monkeypatch, fake: FakeRuns, epochs: int = 12, metric: str = "mrr", tokens=None):
    monkeypatch.setattr(auto_search, "run_trainers", fake.trainers)
    monkeypatch.setattr(auto_search, "run_signal", fake.signal)
    shards = {c.sampling: f"/shards/{c.name}" for c in candidates()}
    manifests = {c.sampling: {} for c in candidates()}
    plan = SearchPlan(epochs, candidates(), shards, manifests, "original", metric=metric, tokens=tokens)
    return auto_search.Search(SearchConfig(), plan, tmp_path / "search", TrainerOptions("cpu"), slots=2)


def rising(top: float, peak: int, length: int = 60) -> list:
    return [top * min(e, peak) / peak if peak else top for e in range(length)]


def test_a_better_alternative_wins_and_stops_where_it_converged(tmp_path, monkeypatch):
    fake = FakeRuns({"default": rising(0.5, 5), "deep": rising(0.7, 6), "wide": rising(0.4, 5)})
    got = _search(tmp_path, monkeypatch, fake).run(1000).to_dict()
    assert got["cid"] == "deep-d2n10" and got["metric"] == "mrr"
    assert got["best_epoch"] == 6 and got["epochs"] == 6 + 3 + 1  # 3 epochs after its best: patience 3 of 12
    grace = [f for f in fake.jobs if f[f.index("--stop-epoch") + 1] == "2"]
    assert len(grace) == 3 and all("--patience" not in f for f in grace)  # every candidate, its grace period
    second = [f for f in fake.jobs if f[f.index("--stop-epoch") + 1] == "12"]
    assert sorted(f[f.index("--out") + 1].split("/")[-1].split("-")[0] for f in second) == ["deep", "default"]
    assert all("--patience" in f for f in second)  # the default and the best alternative, to convergence
    for flags in fake.jobs:  # validation only, the lr schedule spanning the run's epochs
        assert flags[flags.index("--eval-splits") + 1] == "valid" and "test" not in flags
        assert flags[flags.index("--epochs") + 1] == "12"


def test_an_alternative_of_4x_the_tokens_trains_a_quarter_of_the_epochs_and_its_seeds_follow(tmp_path, monkeypatch):
    """`deep`'s epoch holds 4x the default's tokens, and the default's run is above the floor: its schedule is 3
    epochs of the default's 12 (its lr schedule spans them), its grace period 2 and its rung 3; chosen, its
    3-epoch schedule is what the final seeds train. `wide`, with fewer tokens than the default, keeps the 12."""
    fake = FakeRuns({"default": rising(0.5, 5), "deep": rising(0.9, 1), "wide": rising(0.4, 5)})
    tokens = {"default-d1n20": 0.25e6, "deep-d2n10": 1e6, "wide-d1n50": 0.2e6}
    search = _search(tmp_path, monkeypatch, fake, tokens=tokens)
    got = search.run(1000)
    assert search.run_epochs == {"default-d1n20": 12, "deep-d2n10": 3, "wide-d1n50": 12}
    deep = [f for f in fake.jobs if "deep-d2n10" in f[f.index("--out") + 1]]
    assert [(f[f.index("--epochs") + 1], f[f.index("--stop-epoch") + 1]) for f in deep] == [("3", "2"), ("3", "3")]
    assert got.cid == "deep-d2n10" and (got.run_epochs, got.epochs) == (3, 3)
    assert (got.partner.cid, got.partner_run_epochs) == ("default-d1n20", 12)
    from pipelines.auto.final import final_runs

    seeds = final_runs(TrainerOptions("cpu"), got, "original", {1: tmp_path / "seed1"})
    flags = seeds[1].flags()
    assert (flags[flags.index("--epochs") + 1], flags[flags.index("--stop-epoch") + 1]) == ("3", "3")
    # the same search without the token counts trains every candidate the default's 12 epochs, in other folders
    again = FakeRuns(fake.curves)
    plain = _search(tmp_path, monkeypatch, again)
    plain.run(1000)
    assert (
        plain.dirs["deep-d2n10"] != search.dirs["deep-d2n10"] and plain.dirs["wide-d1n50"] == search.dirs["wide-d1n50"]
    )
    assert {f[f.index("--epochs") + 1] for f in again.jobs if "deep-d2n10" in f[f.index("--out") + 1]} == {"12"}


@pytest.mark.parametrize("deep_top, goes_on", [(0.9, True), (0.1, False)])
def test_a_two_epoch_alternative_is_judged_after_its_first_and_trains_its_second_only_if_it_goes_on(
    tmp_path, monkeypatch, deep_top, goes_on
):
    """`deep`'s epoch holds 5x the default's tokens on a 6-epoch schedule: 2 epochs (its lr schedule spanning them),
    its grace period the first. Best after it, it goes on to its second in the convergence rung and is chosen
    there; behind, its second epoch is never trained."""
    fake = FakeRuns({"default": rising(0.5, 3), "deep": rising(deep_top, 0), "wide": rising(0.4, 3)})
    tokens = {"default-d1n20": 0.585e6, "deep-d2n10": 2.879e6, "wide-d1n50": 0.763e6}
    search = _search(tmp_path, monkeypatch, fake, epochs=6, tokens=tokens)
    got = search.run(1000)
    assert search.run_epochs == {"default-d1n20": 6, "deep-d2n10": 2, "wide-d1n50": 5}
    deep = [f for f in fake.jobs if "deep-d2n10" in f[f.index("--out") + 1]]
    stops = [(f[f.index("--epochs") + 1], f[f.index("--stop-epoch") + 1]) for f in deep]
    assert stops == ([("2", "1"), ("2", "2")] if goes_on else [("2", "1")])
    assert (got.cid == "deep-d2n10") == goes_on
    if goes_on:
        assert (got.run_epochs, got.epochs, got.grace_epochs) == (2, 2, 1)


def test_the_recipe_reads_each_candidates_tokens_from_its_shard_set_unless_epochs_are_fixed():
    from types import SimpleNamespace

    from common.manifest_record import Manifest
    from pipelines.auto.recipe import candidate_tokens

    def manifest(links, tokens):
        shard = {"name": "train-v000-00000.tar", "split": "train", "view": 0, "links": links, "tokens": tokens}
        return Manifest.from_dict({"shards": [shard]})

    manifests = {(1, 20): manifest(10, 250), (2, 10): manifest(10, 1100), (1, 50): manifest(5, 150)}
    run = SimpleNamespace(trainer=SimpleNamespace(epochs=None))
    assert candidate_tokens(run, manifests, "cpu") == {"default-d1n20": 250, "deep-d2n10": 1100, "wide-d1n50": 150}
    assert candidate_tokens(SimpleNamespace(trainer=SimpleNamespace(epochs=3)), manifests, "cpu") is None
    assert candidate_tokens(run, manifests, "cuda") is None  # on a GPU every candidate trains the whole schedule


def test_an_alternative_ahead_within_the_noise_leaves_the_default(tmp_path, monkeypatch):
    fake = FakeRuns({"default": rising(0.50, 5), "deep": rising(0.52, 5), "wide": rising(0.1, 5)}, spread=0.3)
    got = _search(tmp_path, monkeypatch, fake).run(1000).to_dict()
    assert got["cid"] == "default-d1n20" and "within 1 SE" in got["decision"]["reason"]
    assert got["epochs"] == 5 + 3 + 1  # its own converged run, not trained on


@pytest.mark.parametrize("tie_break", [True, False])
def test_the_search_breaks_a_tie_on_mrr_with_auc_unless_told_not_to(tmp_path, monkeypatch, tie_break):
    """The default and `deep` converge to the same validation MRR; `deep` is far better on AUC."""
    from dataclasses import replace

    fake = FakeRuns({"default": rising(0.5, 5), "deep": rising(0.5, 5), "wide": rising(0.1, 5)})
    search = _search(tmp_path, monkeypatch, fake)
    search.cfg = replace(search.cfg, tie_break=tie_break)
    auc = {"default": 0.6, "deep": 0.8, "wide": 0.5}
    monkeypatch.setattr(
        auto_search, "run_signal", lambda d, m, p: TwoMetrics([0.2] * 50, [auc[fake.name(Path(d))]] * 50)
    )
    got = search.run(1000).to_dict()
    assert got["cid"] == ("deep-d2n10" if tie_break else "default-d1n20")
    assert ("tie_break" in got["decision"]) == tie_break


def test_after_the_grace_period_a_tie_between_alternatives_is_broken_too(tmp_path, monkeypatch):
    """`wide` leads `deep` on MRR after the grace period by 0.01, within its SE (about 0.03); `deep` is far better
    on AUC: `deep` goes on instead, and (tied with the default on MRR, better on AUC) is chosen. A rerun keeps it."""
    fake = FakeRuns({"default": rising(0.5, 5), "deep": rising(0.5, 5), "wide": rising(0.5, 5)})
    values = {
        "default": ([0.2] * 50, [0.6] * 50),
        "deep": ([0.0, 0.4] * 25, [0.8] * 50),
        "wide": ([0.21] * 50, [0.6] * 50),
    }
    search = _search(tmp_path, monkeypatch, fake)
    monkeypatch.setattr(auto_search, "run_signal", lambda d, m, p: TwoMetrics(*values[fake.name(Path(d))]))
    got = search.run(1000).to_dict()
    assert got["rungs"]["grace"]["deep-d2n10"]["tie_break"]["over"] == "wide-d1n50"
    assert sorted(got["rungs"]["converged"]) == ["deep-d2n10", "default-d1n20"] and got["cid"] == "deep-d2n10"
    again = _search(tmp_path, monkeypatch, FakeRuns(fake.curves))
    values["deep"] = ([0.0] * 50, [0.8] * 50)  # its run trained on since: the grace period's record decides
    monkeypatch.setattr(auto_search, "run_signal", lambda d, m, p: TwoMetrics(*values[fake.name(Path(d))]))
    assert again.run(1000).to_dict()["rungs"]["grace"] == got["rungs"]["grace"]


def _gate_search(tmp_path, monkeypatch, values: dict, gate_se=1.0):
    """A search whose candidates' validation values are fixed (TwoMetrics: per-positive MRR and AUC)."""
    from dataclasses import replace

    fake = FakeRuns({"default": rising(0.5, 5), "deep": rising(0.5, 5), "wide": rising(0.5, 5)})
    search = _search(tmp_path, monkeypatch, fake)
    search.cfg = replace(search.cfg, gate_se=gate_se)
    monkeypatch.setattr(auto_search, "run_signal", lambda d, m, p: TwoMetrics(*values[fake.name(Path(d))]))
    return search, fake


def test_an_alternative_behind_the_default_after_its_grace_period_does_not_go_on(tmp_path, monkeypatch):
    """`deep` leads `wide` (0.31 against 0.29) but trails the default by 0.19 MRR at an SE near 0.006, and is not
    ahead on AUC: it stops after its grace period, and `wide`, as far behind but within its noise (SE about 0.2),
    goes on instead. A rerun keeps the record."""
    values = {
        "default": ([0.5] * 4, [0.6] * 4),
        "deep": ([0.3, 0.32] * 2, [0.6] * 4),
        "wide": ([0.0, 1.0, 0.0, 0.16], [0.6] * 4),
    }
    search, fake = _gate_search(tmp_path, monkeypatch, values)
    got = search.run(1000).to_dict()
    gated = got["rungs"]["grace"]["deep-d2n10"]["gated"]
    assert gated["mrr_difference"] == pytest.approx(-0.19) and gated["mrr_se"] < 0.01
    assert "gated" not in got["rungs"]["grace"]["wide-d1n50"]
    assert sorted(got["rungs"]["converged"]) == ["default-d1n20", "wide-d1n50"]
    assert not [f for f in fake.jobs if "deep-d2n10" in f[f.index("--out") + 1] and "--patience" in f]
    again = _search(tmp_path, monkeypatch, FakeRuns(fake.curves))
    assert again.run(1000).to_dict()["rungs"]["grace"] == got["rungs"]["grace"]  # grace.json decides a rerun
    ungated, _ = _gate_search(tmp_path / "b", monkeypatch, values, gate_se=None)
    assert sorted(ungated.run(1000).to_dict()["rungs"]["converged"]) == ["deep-d2n10", "default-d1n20"]


@pytest.mark.parametrize(
    "deep_auc, gate_se, goes_on",
    [
        ([0.6] * 50, None, True),  # no gate: the best alternative goes on whatever its standing
        ([0.9] * 50, 1.0, True),  # behind on MRR, far ahead on AUC: a tie-break could still choose it
        ([0.6] * 50, 1.0, False),
    ],
)
def test_the_gate_spares_an_alternative_ahead_on_the_other_metric(tmp_path, monkeypatch, deep_auc, gate_se, goes_on):
    values = {
        "default": ([0.5] * 50, [0.6] * 50),
        "deep": ([0.3, 0.32] * 25, deep_auc),
        "wide": ([0.1, 0.2] * 25, [0.6] * 50),
    }
    search, _ = _gate_search(tmp_path, monkeypatch, values, gate_se)
    got = search.run(1000).to_dict()
    assert ("deep-d2n10" in got["rungs"]["converged"]) == goes_on
    assert ("gated" in got["rungs"]["grace"]["deep-d2n10"]) == (not goes_on)


def test_a_signal_that_peaks_at_the_first_epoch_keeps_the_default_for_its_whole_schedule(tmp_path, monkeypatch):
    fake = FakeRuns({"default": [0.5] + [0.4] * 59, "deep": [0.9] + [0.1] * 59, "wide": [0.3] + [0.1] * 59})
    got = _search(tmp_path, monkeypatch, fake).run(1000).to_dict()
    assert got["cid"] == "default-d1n20" and "peaked at its first epoch" in got["decision"]["reason"]
    assert got["epochs"] == 12 and "--patience" not in fake.jobs[-1]


def test_a_rerun_reuses_every_run_and_makes_the_same_choice(tmp_path, monkeypatch):
    curves = {"default": rising(0.5, 5), "deep": rising(0.7, 6), "wide": rising(0.4, 5)}
    first = _search(tmp_path, monkeypatch, FakeRuns(curves)).run(1000).to_dict()
    again = FakeRuns(curves)
    second = _search(tmp_path, monkeypatch, again).run(1000).to_dict()
    assert again.jobs == [] and second == first


def test_a_candidate_whose_trainer_dies_after_its_first_evaluation_is_judged_on_it(tmp_path, monkeypatch):
    """Its trainer failed before any summary; the search goes on, judging it on the epoch it evaluated."""
    fake = FakeRuns({"default": rising(0.5, 5), "deep": rising(0.9, 1), "wide": rising(0.4, 5)}, dies={"deep": 1})
    got = _search(tmp_path, monkeypatch, fake).run(1000).to_dict()
    assert got["rungs"]["grace"]["deep-d2n10"]["best_epoch"] == 0 and got["rungs"]["grace"]["deep-d2n10"]["stopped"]
    assert "deep-d2n10" in got["failed"] and got["cid"] in ("default-d1n20", "deep-d2n10")


def test_a_candidate_that_evaluated_nothing_is_left_out_but_a_default_without_a_result_stops_the_run(
    tmp_path, monkeypatch
):
    fake = FakeRuns({"default": rising(0.5, 5), "deep": rising(0.9, 5), "wide": rising(0.4, 5)}, dies={"deep": 0})
    got = _search(tmp_path, monkeypatch, fake).run(1000).to_dict()
    assert got["rungs"]["grace"]["deep-d2n10"]["valid"] is None and got["cid"] == "default-d1n20"
    assert "deep-d2n10" not in got["rungs"]["converged"]  # never a survivor
    fake = FakeRuns({"default": rising(0.5, 5), "deep": rising(0.9, 5), "wide": rising(0.4, 5)}, dies={"default": 0})
    with pytest.raises(auto_search.AutoError, match="default-d1n20: the trainer failed"):
        _search(tmp_path / "b", monkeypatch, fake).run(1000)


def test_a_run_stopped_after_its_grace_period_is_judged_on_the_epochs_it_evaluated_since(tmp_path, monkeypatch):
    """The grace run wrote summary.json (4 epochs, best 3); resumed for its rung, the budget stopped it after
    epoch 8, its best so far epoch 7 (its saved scores): the search reads epochs 9 and best 7, not the grace's."""
    from common.eval_scores import write_scores

    search = _search(tmp_path, monkeypatch, FakeRuns({}))
    run_dir = search.dirs["deep-d2n10"]
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps({"epochs_completed": 4, "best_epoch": 3, "converged": False}))
    mrr = [0.1, 0.2, 0.2, 0.3, 0.3, 0.3, 0.35, 0.4, 0.38]
    rows = [
        {"event": "eval", "epoch": e, "split": "valid", "protocol": "original", "mrr": v} for e, v in enumerate(mrr)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_scores(run_dir / "scores" / "valid-original.npz", np.arange(2), np.zeros(2), 7)
    got = search.state("deep-d2n10")
    assert (got.epochs_completed, got.best_epoch, got.stopped) == (9, 7, True)
    assert got.valid["mrr"] == 0.4
    assert search.state("wide-d1n50").best_epoch is None  # nothing evaluated
    (search.dirs["wide-d1n50"]).mkdir()
    (search.dirs["wide-d1n50"] / "summary.json").write_text(json.dumps({"epochs_completed": 12, "best_epoch": 5}))
    assert search.state("wide-d1n50").best_epoch == 5  # a finished run's own summary


def test_a_budget_cut_is_recorded(tmp_path, monkeypatch):
    fake = FakeRuns(
        {"default": rising(0.5, 3), "deep": rising(0.4, 3), "wide": rising(0.3, 3)}, stopped=("default-d1n20",)
    )
    got = _search(tmp_path, monkeypatch, fake, metric="auc").run(100).to_dict()
    assert "default-d1n20" in got["cut_short"] and got["metric"] == "auc"
    assert all(f[f.index("--select-on") + 1] == "auc" for f in fake.jobs)  # its runs stop and pick on it too


def test_an_alternative_too_slow_for_its_grace_period_is_stopped_and_the_run_goes_on(tmp_path, monkeypatch):
    """At 0.5 steps/s, `deep` would need 128 s for its grace period (2 epochs of 32 steps at 1,000 positives)
    where the search has 60: stopped after its first steps and left out with the reason; the default is
    chosen. `wide`, at 10 steps/s, trains."""
    from tests.test_pace import Clock

    clock = Clock()
    fake = FakeRuns(
        {"default": rising(0.5, 5), "deep": rising(0.9, 5), "wide": rising(0.4, 5)},
        pace=(clock, {"deep": 0.5, "wide": 10.0}),
    )
    monkeypatch.setattr(auto_search, "run_trainers", fake.trainers)
    monkeypatch.setattr(auto_search, "run_signal", fake.signal)
    shards, manifests = {c.sampling: f"/shards/{c.name}" for c in candidates()}, {c.sampling: {} for c in candidates()}
    search = auto_search.Search(
        SearchConfig(),
        SearchPlan(12, candidates(), shards, manifests, "original", view_positives=1000),
        tmp_path / "search",
        TrainerOptions("cpu"),
        slots=2,
        stop_at=clock.now + 60,
        clock=clock,
    )
    # the grace period's last step: 2 epochs of ceil(2 x 1,000 / 64) steps, and of ceil(4 x 1,000 / 64) at 1:3
    assert search.pace({"deep-d2n10": 2}).targets["deep-d2n10"][1] == 64
    search.neg_ratio = 3
    assert search.pace({"deep-d2n10": 2}).targets["deep-d2n10"][1] == 126
    search.neg_ratio = 1
    got = search.run(1000).to_dict()
    assert list(got["skipped"]) == ["deep-d2n10"] and "would end" in got["skipped"]["deep-d2n10"]
    assert got["rungs"]["grace"]["deep-d2n10"] == {"valid": None, "reason": got["skipped"]["deep-d2n10"]}
    assert got["rungs"]["grace"]["wide-d1n50"]["valid"] == pytest.approx(0.4 * 1 / 5)  # its best of epochs 0, 1
    assert got["cid"] == "default-d1n20" and "deep-d2n10" not in got["rungs"]["converged"]


def test_the_search_reads_validation_scores_only(tmp_path, monkeypatch):
    """The real reader of a run's values (signal.run_signal) on folders that hold validation scores alone: a
    search reaching for test would fail here."""
    from common.eval_scores import write_scores
    from pipelines.auto import signal

    fake = FakeRuns({"default": rising(0.5, 5), "deep": rising(0.4, 5), "wide": rising(0.3, 5)})
    monkeypatch.setattr(auto_search, "run_trainers", fake.trainers)
    read = []

    def eval_signal(manifest, split, protocol, cid, score):
        read.append((split, protocol))
        return Signal(score[:2], score[2:])

    monkeypatch.setattr(signal, "eval_signal", eval_signal)
    real_trainers = fake.trainers

    def trainers(jobs, *a, **k):
        out = real_trainers(jobs, *a, **k)
        for job in jobs.values():
            write_scores(Path(job.run_dir) / "scores" / "valid-original.npz", np.arange(4), np.array([3, 1, 2, 0.0]), 0)
        return out

    monkeypatch.setattr(auto_search, "run_trainers", trainers)
    shards = {c.sampling: f"/shards/{c.name}" for c in candidates()}
    plan = SearchPlan(12, candidates(), shards, {c.sampling: {} for c in candidates()}, "original")
    search = auto_search.Search(SearchConfig(), plan, tmp_path / "s", TrainerOptions("cpu"), 2)
    search.run(1000)
    assert read and set(read) == {("valid", "original")}


# ---------------------------------------------------------------------------- the recipe's flags
@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--preset", "citeseer-small", "--objective", "recommend"],
            "--objective recommend: sets --preset auto's training negatives; preset citeseer-small has its own",
        ),
        (
            ["--preset", "auto", "--objective", "recommend", "--hard-neg-fraction", "0.5"],
            "--objective recommend: sets the training negatives, which --hard-neg-fraction 0.5 fixes",
        ),
    ],
)
def test_objective_errors_are_one_line_before_any_work(tmp_path, flags, message):
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.run",
            "--dataset",
            "citeseer",
            *flags,
            "--out",
            str(tmp_path / "r"),
            "--shards",
            str(tmp_path / "s"),
        ],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "s").exists()


def test_recommend_objective_trains_on_hard_views_and_a_fraction_overrides():
    from pipelines.auto.recipe import RECOMMEND_HARD_NEG_FRACTION, training_negatives
    from tests.conftest import run_config

    def args(objective, fraction=None):
        return run_config(
            "--dataset",
            "citeseer",
            "--objective",
            objective,
            *(["--hard-neg-fraction", fraction] if fraction is not None else []),
        )

    assert training_negatives(args("link-prediction")) == 0.0
    assert training_negatives(args("recommend")) == RECOMMEND_HARD_NEG_FRACTION == 0.5
    assert training_negatives(args("link-prediction", 0.25)) == 0.25
