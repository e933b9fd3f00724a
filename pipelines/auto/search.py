"""`--preset auto`: search a configuration for a graph on validation, then train the final seeds with it.

    python -m pipelines.run --dataset edges.csv --seeds 0,1,2 [--budget-minutes 30]

Steps (each logged; the whole search lands in OUT/<protocol>/search.json):
1. Statistics of the training graph and of the validation negatives (common.graph_stats). When the
   split's validation is saturated (a positive is ranked against fewer than EASY_CN_NEGATIVES negatives
   that share a common neighbour with their pair), selection ranks each validation positive against
   HARD_K hard negatives drawn from the training graph (protocol "hard", valid only, written into the
   shard set by preprocess like HeaRT's); otherwise it uses the protocol's own validation set, which
   is then also what the test measures.
2. Candidates from the statistics and the device (pipelines.auto.candidates); one shard set per
   sampling (d, n), cached as any preprocess run.
3. Budget: every candidate trains PROBE_STEPS optimiser steps and one validation pass (a throw-away run
   under search/probe/); from its training speed and evaluation time, seconds per epoch. The first rung
   keeps the candidates and epochs that fit the budget with the final seeds reserved
   (auto_candidates.fit_first_rung); what was cut is in search.json's "budget_plan".
4. Successive halving: every kept candidate trains seed 0 to the first rung (validation only: the trainer
   runs with --eval-splits valid, so no test shard or test query file is opened), the best half resume
   to twice the epochs, and so on while the budget lasts (the final seeds' time reserved; a rung slower
   than the probe predicted inflates every later estimate by measured / predicted, Search.timing). The
   winner is the best at the last rung; its epoch count is its best validation epoch there.
4b. Training negatives (pipelines.auto.negatives): unless --hard-neg-fraction was given, seed 1 of the
   winner (a seed the search never selected on) is trained on the uniform views and on views with half
   their negatives hard (2-hop non-edges), validation only, and the hard views are kept only if their best
   prior blend (step 6's grid) is strictly better on validation and no worse on the reported protocol's
   validation metric and AUC.
5. The final seeds train the winner for exactly that many epochs (same lr schedule span) and are
   evaluated once, at that epoch, on valid and test, saving every candidate's logit (--save-scores).
   Seed 0 is the search's own seed: the winner's best.pt already holds its weights at that epoch, so it
   evaluates them (trainer --eval-weights) instead of training again (not when hard negatives were kept:
   then it trains); seed 1 likewise evaluates the stage's run of the chosen views (pipelines.auto.final:
   the final seeds' flags and folders).
6. Heuristic prior (pipelines.auto.blend): on the final seeds' validation logits of the selection
   protocol only, the blend logit + w * log1p(CN|AA|RA) (or none) with the best mean validation score
   over the seeds; then applied to each seed's test logits. The model alone and the blend are both reported.

Why successive halving by hand rather than Ray Tune's ASHA: a candidate is a `python -m trainer` process
over a shard set, and the trainer already checkpoints and resumes (--resume, and --stop-epoch keeps the
lr schedule of the full run), so promoting a survivor is one more trainer call; Tune would need the
trainer wrapped as a Tune trainable reporting through a Ray session, which the trainer must never import.
The synchronous rule is also deterministic (CPU training is deterministic per seed), so a rerun reuses
every finished candidate from its summary.json and reaches the same choice, where ASHA's asynchronous
promotions depend on which trial happened to report first.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from pathlib import Path

from common.graph_stats import GraphStats, graph_stats, hard_negatives
from common.atomic import write_json_atomic
from common.manifest import read_manifest
from pipelines.auto.candidates import (FIRST_RUNG, Candidate, fit_first_rung, propose, round_cost, rungs,
                                       successive_halving)
from pipelines.auto.final import train_final_seeds
from pipelines.auto.negatives import decide, reserved_trainings
from pipelines.auto.blend import PriorStage
from pipelines.auto.runs import (PROBE_LOG_EVERY, PROBE_STEPS, SEARCH_SEED, AutoError, _summary, best_within,
                                 entry_flag, probe_timing)
from pipelines.core.shard_sets import build_shard_set, load_run_dataset, preprocess_config
from pipelines.core.trainers import Job, device_kind as _device_kind, run_trainers, trainer_slots as _slots

log = logging.getLogger("pipelines.auto")

HARD = "hard"
HARD_K = 20  # hard negatives per validation positive (HeaRT uses 500; 20 keep CPU evaluation in seconds)
HARD_POSITIVES = 1000  # validation positives ranked against them (a seeded subset on large splits)
DEFAULT_BUDGET_MINUTES = 30.0
# CPU: a training view holds at most this many positives (a seeded subset per view, different per view),
# so an epoch of a 200k-edge graph stays around a minute on one core.
MAX_VIEW_POSITIVES = {"cpu": 8000, "cuda": None}
VIEWS = 8


def device_kind(args) -> str:
    return _device_kind(args.device)


def trainer_slots(args, device: str) -> int:
    """Trainer processes at once: one per CPU core (each takes one thread), one at a time on a GPU."""
    return _slots(args.device, args.parallel_seeds)


def selection_protocol(dataset, protocol: str) -> tuple[str, GraphStats]:
    """The validation protocol selection ranks on, and the statistics that decided it."""
    stats = graph_stats(dataset, protocol)
    return (HARD if stats.easy_validation else protocol), stats


def attach_hard_negatives(dataset, seed: int = SEARCH_SEED) -> dict:
    """Add valid/hard: hard negatives for the validation positives, from the training graph only; never a
    training, validation or test edge, nor any test negative (pairs known to the split are excluded)."""
    valid, test = dataset.splits["valid"], dataset.splits.get("test")
    exclude = [valid.pos] + ([test.pos, *test.neg.values()] if test is not None else [])
    pos, neg = hard_negatives(dataset.graph, valid.pos, HARD_K, exclude, seed=seed, max_positives=HARD_POSITIVES)
    valid.protocol_pos[HARD], valid.neg[HARD] = pos, neg  # a seeded subset of the positives on large splits
    dataset.metric.setdefault(HARD, "mrr")
    return {"k": HARD_K, "positives": int(len(pos)), "source": "top resource-allocation non-neighbours of each "
            "endpoint in the training graph, topped up with seeded random non-edges"}


def view_positives(train_positives: int, device: str) -> int:
    cap = MAX_VIEW_POSITIVES[device]
    return train_positives if not cap else min(cap, train_positives)


def shard_set(args, dataset, sampling: tuple[int, int], protocols: list[str], device: str,
              hard_neg_fraction: float | None = None) -> str:
    """One sampling's shard set (cached); `hard_neg_fraction`: its training views' (default: the flag's, 0
    when the flag was left to the recipe: the search compares candidates on uniform negatives)."""
    train = len(dataset.splits["train"].pos)
    cap = MAX_VIEW_POSITIVES[device]
    percent = 100.0 if view_positives(train, device) == train else round(100.0 * cap / train, 3)
    fraction = (args.hard_neg_fraction or 0.0) if hard_neg_fraction is None else hard_neg_fraction
    cfg = preprocess_config(args, sampling, args.views or VIEWS, percent, protocols, fraction)
    return build_shard_set(cfg, dataset)


def candidate_dir(root: Path, cand: Candidate, shards: str, protocol: str) -> Path:
    """One folder per (candidate, shard set, selection protocol): a rerun finds its finished rungs there."""
    key = hashlib.sha256(json.dumps([cand.to_dict(), shards, protocol], sort_keys=True).encode()).hexdigest()[:8]
    return root / f"{cand.cid}-{key}"


# ---------------------------------------------------------------------------- the search
class Search:
    """Successive halving over trainer runs of seed 0 (validation only), within a wall-time budget."""

    def __init__(self, args, cands: list[Candidate], shards: dict, protocol: str, root: Path, slots: int,
                 deadline: float, final_seeds: int):
        self.args, self.protocol, self.root, self.slots = args, protocol, root, slots
        self.cands = {c.cid: c for c in cands}
        self.shards = shards  # sampling -> shard location
        # trainer runs reserved after the search (the final seeds and the training-negatives stage), counted
        # as round_cost counts final seeds: ceil(final_seeds / slots) rounds
        self.deadline, self.final_seeds = deadline, final_seeds
        self.dirs = {c.cid: candidate_dir(root, c, shards[c.sampling], protocol) for c in cands}
        self.records = {c.cid: {"config": c.to_dict(), "shards": shards[c.sampling], "run_dir": str(self.dirs[c.cid]),
                                "rungs": {}} for c in cands}
        self.sec_per_epoch: dict[str, float] = {}  # the estimates: the probe's, times the slowdown
        self.predicted: dict[str, float] = {}  # the probe's seconds per epoch
        # measured / predicted seconds per epoch of the rungs trained, its max (>= 1) inflating every later
        # estimate, the final seeds' included (search.json "timing"): a machine that got slower than the probe
        # saw (wikipedia: 151 s per epoch against the probe's 100) would otherwise overrun the budget
        self.timing = {"slowdown": 1.0, "measured": {}}
        self.save = lambda: None  # writes search.json after every rung (set by the recipe)
        self.clock = time.time  # the budget's clock (tests pass a fake one)
        self.train_links = 0  # links per training epoch (a view: positives and as many negatives)

    def probe_flags(self, cid: str, run_dir: Path) -> list[str]:
        flags = self.flags(cid, 1)
        flags[flags.index("--out") + 1] = str(run_dir)
        flags[flags.index(entry_flag(self.dirs[cid]))] = "--overwrite"  # a throw-away run, always fresh
        return [*flags, "--max-steps", str(PROBE_STEPS), "--log-every", str(PROBE_LOG_EVERY)]

    def probe(self) -> dict[str, dict]:
        """Each candidate's timing from a short run under search/probe/ (a rerun reuses its probe.json)."""
        out, todo = {}, {}
        for cid in self.cands:
            run_dir = self.root / "probe" / self.dirs[cid].name
            if (run_dir / "probe.json").exists():
                out[cid] = json.loads((run_dir / "probe.json").read_text())
            else:
                todo[cid] = Job(self.probe_flags(cid, run_dir), run_dir)
        log.info("speed probe: %d candidate(s), %d steps each (%d reused)", len(self.cands), PROBE_STEPS,
                 len(self.cands) - len(todo))
        for cid, wall in run_trainers(todo, self.slots, device_flag=self.args.device)[0].items():
            out[cid] = probe_timing(todo[cid].run_dir, self.train_links, wall)
            write_json_atomic(todo[cid].run_dir / "probe.json", out[cid])
        for cid in self.cands:
            log.info("  %s: ~%.0f s per epoch (%.0f links/s, validation %.0f s)", cid, out[cid]["sec_per_epoch"],
                     out[cid]["links_per_s"], out[cid]["eval_s"])
        return out

    def plan_first_rung(self, first: int, probes: dict[str, dict]) -> dict:
        """The first rung's candidates and epochs within the budget left (auto_candidates.fit_first_rung).
        A rerun over the same candidates keeps the first run's plan (search/plan.json), so it reaches the
        same choice from the candidates it finished."""
        cids = list(self.cands)
        self.predicted = {c: float(probes[c]["sec_per_epoch"]) for c in cids}
        self.sec_per_epoch = dict(self.predicted)
        saved = self.root / "plan.json"
        if saved.exists() and json.loads(saved.read_text()).get("candidates") == cids:
            log.info("budget: the first run's plan is kept (%s)", saved)
            return json.loads(saved.read_text())
        left = self.deadline - self.clock()
        kept, epochs, cuts = fit_first_rung(cids, self.sec_per_epoch, {c: self.cands[c].sampling for c in cids},
                                            first, left, self.slots, self.final_seeds)
        need = round_cost(self.sec_per_epoch, kept, epochs, epochs, self.slots, self.final_seeds)
        for cut in cuts:
            log.info("budget: cut %s: %s", cut["cut"], ", ".join(f"{k} {v}" for k, v in cut.items() if k != "cut"))
        log.info("budget: first rung %d epoch(s) over %d of %d candidates, ~%.0f s with the final seeds, %.0f s "
                 "left", epochs, len(kept), len(cids), need, left)
        plan = {"candidates": cids, "left_s": round(left, 1), "first_rung_epochs": epochs, "kept": kept,
                "cuts": cuts, "estimated_s": round(need, 1), "probe": probes}
        self.root.mkdir(parents=True, exist_ok=True)
        write_json_atomic(saved, plan)
        return plan

    def flags(self, cid: str, epochs: int) -> list[str]:
        c = self.cands[cid]
        return ["--shards", self.shards[c.sampling], "--preset", "auto", "--out", str(self.dirs[cid]),
                "--seed", str(SEARCH_SEED), "--protocol", self.protocol, "--device", self.args.device,
                entry_flag(self.dirs[cid]), "--eval-splits", "valid", "--stop-epoch", str(epochs), *c.trainer_flags(),
                *[a for arg in self.args.train_arg for a in arg.split("=", 1)]]

    def train(self, cids: list[str], epochs: int) -> dict[str, float]:
        """Bring each candidate to `epochs` (a finished run is reused); {cid: best validation score so far}."""
        todo, before = {}, {}
        for cid in cids:
            s = _summary(self.dirs[cid])
            if not (s and s.get("epochs_completed", 0) >= epochs):
                todo[cid] = Job(self.flags(cid, epochs), self.dirs[cid])
                before[cid] = (s or {}).get("epochs_completed", 0)
        log.info("rung %d epochs: %d candidate(s), %d to train, %d reused", epochs, len(cids), len(todo),
                 len(cids) - len(todo))
        # the rung ends where the final seeds' time begins, whatever the probe predicted
        stop_at = self.deadline - math.ceil(self.final_seeds / self.slots) * epochs * max(
            self.sec_per_epoch[c] for c in cids)
        wall, stopped = run_trainers(todo, self.slots, stop_at, self.clock, self.args.device)
        if stopped:
            log.info("budget: the %d-epoch rung stopped (the final seeds' time begins): %s", epochs, ", ".join(stopped))
        scores = {}
        for cid in cids:
            s = _summary(self.dirs[cid]) or {}  # none for a candidate stopped before its run ended
            times = self._times(cid, epochs, wall.get(cid))
            metric = s.get("selection_metric") or "mrr"
            scores[cid], best_epoch = best_within(self.dirs[cid], self.protocol, metric, epochs)
            self.records[cid]["rungs"][str(epochs)] = {
                "score": scores[cid], "metric": metric, "best_epoch": best_epoch,
                "wall_s": round(times[str(epochs)], 2), "reused": cid not in todo, "stopped": cid in stopped}
            if cid in todo and cid not in stopped and s.get("epochs_completed", 0) > before[cid]:
                self._measured(cid, epochs, wall[cid] / (s["epochs_completed"] - before[cid]))
            log.info("  %s: valid/%s %s %.4f (best epoch %s)", cid, self.protocol, metric, scores[cid], best_epoch)
        self.sec_per_epoch = {c: p * self.timing["slowdown"] for c, p in self.predicted.items()}
        self.save()
        return scores

    def _measured(self, cid: str, epochs: int, sec: float) -> None:
        """A rung's measured seconds per epoch of a candidate trained in this run (not reused, not stopped)."""
        ratio = sec / self.predicted[cid]
        self.timing["measured"].setdefault(cid, {})[str(epochs)] = {"sec_per_epoch": round(sec, 2),
                                                                   "ratio": round(ratio, 3)}
        if ratio > self.timing["slowdown"]:
            self.timing["slowdown"] = ratio
        log.info("  %s: %.1f s per epoch measured at the %d-epoch rung, %.1f predicted (x %.2f); every later "
                 "estimate x %.2f", cid, sec, epochs, self.predicted[cid], ratio, self.timing["slowdown"])

    def final_cost(self, cid: str, epochs: int) -> float:
        """Estimated seconds of the final seeds training `cid` for `epochs` (the slowdown included)."""
        return round_cost(self.sec_per_epoch, [cid], 0, epochs, self.slots, self.final_seeds)

    def _times(self, cid: str, epochs: int, wall: float | None) -> dict:
        """Wall seconds per rung of a candidate, kept in its run folder so a rerun reports the first run's."""
        path = self.dirs[cid] / "auto_times.json"
        times = json.loads(path.read_text()) if path.exists() else {}
        if wall is not None:
            times[str(epochs)] = wall
            write_json_atomic(path, times)
        times.setdefault(str(epochs), 0.0)
        return times

    def can_afford(self, cids: list[str], epochs: int, done: int) -> bool:
        """Time of the next rung plus the final seeds at `epochs`, against what is left of the budget. A rung
        every candidate already finished costs nothing: a rerun (a new budget, maybe a smaller one) climbs the
        rungs the first run reached, so it picks the same winner and the finished seeds stay that winner's."""
        if all((_summary(self.dirs[c]) or {}).get("epochs_completed", 0) >= epochs for c in cids):
            return True
        cost = round_cost(self.sec_per_epoch, cids, epochs - done, epochs, self.slots, self.final_seeds)
        left = self.deadline - self.clock()
        if cost > left:
            log.info("budget: the %d-epoch rung and the final seeds (~%.0f s) need more than the %.0f s left; the "
                     "search stops here", epochs, cost, left)
            return False
        return True


# ---------------------------------------------------------------------------- the recipe
def search(searcher: Search, rung_epochs: list[int], cids: list[str]) -> dict:
    """Run the successive halving over `cids`; the chosen candidate with its honest epoch count (best
    validation epoch at the last rung it reached, 1-based)."""
    winner, history = successive_halving(cids, rung_epochs, searcher.train, searcher.can_afford)
    last = history[-1]
    best_epoch = searcher.records[winner]["rungs"][str(last.rung)]["best_epoch"]
    if best_epoch is None:
        raise AutoError(f"the budget ran out before any candidate finished an epoch (search.json: "
                        f"{searcher.root.parent / 'search.json'}); raise --budget-minutes")
    return {"cid": winner, "config": searcher.cands[winner].to_dict(), "epochs": int(best_epoch) + 1,
            "rung": last.rung, "score": last.scores[winner], "shards": searcher.shards[searcher.cands[winner].sampling],
            "history": [{"epochs": h.rung, "scores": h.scores, "survivors": h.survivors} for h in history]}


def prepare(args, dataset, protocol: str, device: str) -> tuple[dict, GraphStats, str, list[Candidate], object, dict]:
    """Statistics, selection protocol, candidates, the dataset the shard sets are built from (with valid/hard
    attached when selection uses it) and the shard sets (cached)."""
    if args.features and dataset.x is None:
        dataset = load_run_dataset(args, features=True)
    select, stats = selection_protocol(dataset, protocol)
    info = {"stats": stats.to_dict(), "device": device, "selection": {"protocol": select}}
    log.info("graph: %d nodes, %d training edges, degree mean %.1f / median %.0f / p90 %.0f; %.1f%% of the "
             "validation negatives share a neighbour with their pair (~%.1f per ranking); selection on valid/%s",
             stats.nodes, stats.edges, stats.mean_degree, stats.median_degree, stats.p90_degree,
             100 * stats.valid_neg_cn_fraction, stats.valid_cn_negatives_per_ranking, select)
    protocols = [protocol]
    if select == HARD:
        info["selection"]["hard_negatives"] = attach_hard_negatives(dataset)
        protocols.append(HARD)
        log.info("selection ranks %d validation positives against %d hard negatives each (training graph only)",
                 info["selection"]["hard_negatives"]["positives"], HARD_K)
    cands = propose(stats, device)
    if args.epochs:
        cands = [Candidate(**{**c.__dict__, "max_epochs": max(1, math.ceil(args.epochs))}) for c in cands]
    shards = {s: shard_set(args, dataset, s, protocols, device) for s in dict.fromkeys(c.sampling for c in cands)}
    return info, stats, select, cands, dataset, shards


def search_and_train(args, dataset, protocol: str, out: Path, runs: dict[int, Path]) -> tuple[dict, dict, dict]:
    """The whole `--preset auto` recipe for one protocol: ({seed: summary}, chosen config, {seed: prior}).
    Writes OUT/search.json (after every rung and at the end) and OUT/chosen.json."""
    t0 = time.time()
    budget = 60.0 * (args.budget_minutes or DEFAULT_BUDGET_MINUTES)
    device = device_kind(args)
    slots = trainer_slots(args, device)
    info, stats, select, cands, dataset, shards = prepare(args, dataset, protocol, device)
    log.info("%d candidates over %d shard set(s); budget %.0f min (%.1f min used so far)", len(cands), len(shards),
             budget / 60, (time.time() - t0) / 60)
    # the budget reserves time for the runs after the search: the final seeds that train (seed 0 reuses the
    # winner's weights) and the training-negatives stage's two runs, its worst case (reserved_trainings)
    searcher = Search(args, cands, shards, select, out / "search", slots, t0 + budget,
                      reserved_trainings(args, runs, slots))
    searcher.train_links = 2 * view_positives(len(dataset.splits["train"].pos), device)
    max_epochs = max(c.max_epochs for c in cands)
    plan = searcher.plan_first_rung(min(FIRST_RUNG[device], max_epochs), searcher.probe())
    rung_epochs = rungs(plan["first_rung_epochs"], max_epochs)
    record = {**info, "budget_minutes": budget / 60, "budget_plan": plan, "rungs": rung_epochs,
              "candidates": searcher.records, "timing": searcher.timing}
    searcher.save = lambda: write_json_atomic(out / "search.json", record)
    searcher.save()
    chosen = search(searcher, rung_epochs, plan["kept"])
    record.update(chosen=chosen, search_seconds=round(time.time() - t0, 1))
    write_json_atomic(out / "search.json", record)
    log.info("chosen: %s, %d epochs (valid/%s %.4f at rung %d)", chosen["cid"], chosen["epochs"], select,
             chosen["score"], chosen["rung"])
    sampling = tuple(chosen["config"]["sampling"])
    protocols = [protocol] + ([HARD] if select == HARD else [])
    stages: dict[str, PriorStage] = {}  # one per shard set: the stage's and the final prior share the chosen one

    def prior_stage(location: str) -> PriorStage:
        if location not in stages:
            stages[location] = PriorStage(dataset, read_manifest(location), select, protocol)
        return stages[location]

    judge = None
    if args.objective == "recommend":  # the stage's arms are judged by validation full ranking
        from pipelines.auto.ranking_judge import ranking_judge
        from trainer.scoring import default_device
        judge = ranking_judge(dataset, default_device(device))
    record["objective"] = args.objective
    record["training_negatives"], weights = decide(
        args, searcher, list(runs), chosen, lambda f: shard_set(args, dataset, sampling, protocols, device, f),
        prior_stage, protocol, select, searcher.dirs[chosen["cid"]], judge)
    searcher.final_seeds = sum(s not in weights for s in runs)  # the seeds left to train (the stage is done)
    write_json_atomic(out / "search.json", record)
    write_json_atomic(out / "chosen.json", chosen)
    searcher.timing["final_estimate_s"] = round(searcher.final_cost(chosen["cid"], chosen["epochs"]), 1)
    log.info("budget: the final seeds ~%.0f s (slowdown x %.2f), %.0f s left", searcher.timing["final_estimate_s"],
             searcher.timing["slowdown"], t0 + budget - time.time())
    used = train_final_seeds(args, chosen, protocol, select, runs, weights, slots)
    record["reused_weights"] = {str(s): str(w) for s, w in sorted(used.items())}
    summaries = {s: _summary(d) for s, d in runs.items()}
    priors = prior_stage(chosen["shards"]).run(runs)
    record["prior"] = {str(s): p for s, p in priors.items()}
    record["total_seconds"] = round(time.time() - t0, 1)
    write_json_atomic(out / "search.json", record)
    return summaries, chosen, priors
