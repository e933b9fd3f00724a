"""The search of `--preset auto`: the candidates train seed SEARCH_SEED on validation only, in two rungs,
and the validation signal (pipelines.auto.signal) decides.

1. Every candidate trains its grace period (its lr schedule spanning its epochs: the run's, SearchConfig.epochs,
   for the default; for an alternative the same compute, fewer epochs of its longer token sequences,
   SearchConfig.candidate_epochs); an alternative whose first steps' pace cannot finish it inside the
   search's share of the budget is stopped then (pipelines.auto.pace), so the default's slot is not shared
   with what cannot finish.
2. The default and the best 1 in `reduction_factor` alternatives go on, each until `patience` epochs pass
   without a better validation score, or its epochs (best: on the metric, a tie there broken as in 3). An
   alternative behind the default by more than `gate_se` SE on the metric (and not ahead on the other) does
   not go on.
3. The best of them replaces the default only by more than `margin_se` standard errors; an alternative that
   ties with the default on the metric (within `margin_se` SE, either way) and beats it by more than that on
   the other of MRR / AUC replaces it too (`tie_break`). The chosen run stopped where it converged. When every
   candidate peaked at its first epoch, validation says nothing: the default is kept and trains its whole
   schedule, as the fixed preset would.

The other survivor of the last rung, if any, is the choice's `partner`: its run is already trained, and the
blend (pipelines/auto/blend.py) may add its scores to the chosen model's.

A candidate that `--budget-minutes` stopped, or whose trainer failed, is judged on the epochs it evaluated
(pipelines.core.stopped); one without any is left out, with a log line and its place in search.json. Only a
default without any validation result stops the run. What the budget cut (and what the pace check stopped) is
recorded (search/cut.json, and search.json's cut_short / skipped) and final: a rerun judges it as it was instead
of resuming it, so it makes the same choice; `--overwrite` forgets the record and resumes them.

The search holds no test split: its trainers evaluate validation only (--eval-splits valid), and it reads
nothing but their validation scores. Training on CPU is deterministic per seed, so the same input gives the
same choice whatever the machine's load; only `--budget-minutes` can cut it short, and search.json says so.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from pathlib import Path

from common.atomic import write_json_atomic
from pipelines.auto.config import DEFAULT_PRESET, Candidate, SearchConfig
from pipelines.auto.pace import Cuts, GracePace
from pipelines.auto.records import Choice, SearchPlan
from pipelines.auto.signal import break_tie, choose, run_signal, trails, two_way_se
from pipelines.core.config import TrainerOptions
from pipelines.core.seeds import seed_run
from pipelines.core.stopped import stopped_summary
from pipelines.core.trainers import TrainerRun, run_trainers
from trainer.run_summary import RunSummary, read_summary, summary_path

log = logging.getLogger("pipelines.auto")
SEARCH_SEED = 0  # the seed the candidates train; the final seed of that number reuses the chosen run
CUT_FILE = "cut.json"  # in the search's folder: what the budget cut and the pace check stopped


class AutoError(ValueError):
    """A search step that cannot go on; the message names it and where its log is."""


def summary(run_dir: Path) -> RunSummary | None:
    """The run's summary.json, or None before it has one."""
    path = summary_path(run_dir)
    return read_summary(path) if path.exists() else None


class Search:
    def __init__(
        self,
        cfg: SearchConfig,
        plan: SearchPlan,
        root: Path,
        opts: TrainerOptions,
        slots: int,
        stop_at: float | None = None,
        clock=time.time,
    ):
        """`root`: the search's folder; `opts`, `slots`: how its trainers run; `stop_at`: its deadline."""
        cands, tokens = plan.cands, plan.tokens or {}
        self.cfg, self.cands, self.shards = cfg, {c.cid: c for c in cands}, plan.shards
        default = cands[0].cid
        self.run_epochs = {
            c.cid: cfg.candidate_epochs(plan.epochs, tokens.get(c.cid, 0), tokens.get(default, 0)) for c in cands
        }
        self.metric, self.protocol = plan.metric, plan.protocol
        self.manifests, self.root, self.opts, self.slots = plan.manifests, root, opts, slots
        self.stop_at, self.clock, self.cut_short, self.failed = stop_at, clock, [], {}
        # the pace check's input (a view's positives, its negatives per positive), and whom it stopped
        self.view_positives, self.neg_ratio, self.skipped = plan.view_positives, plan.neg_ratio, {}
        self.dirs = {c.cid: root / f"{c.cid}-{self._key(c)}" for c in cands}
        # an earlier try's cuts, final; by folder name, which holds all a candidate's run depends on
        self.cuts = Cuts.load(root / CUT_FILE, forget=opts.overwrite)
        self.skipped.update({cid: why for cid, d in self.dirs.items() if (why := self.cuts.pace.get(d.name))})

    def _key(self, c: Candidate) -> str:
        """A candidate's folder is keyed by all it depends on, so a rerun finds its own runs only."""
        what = [
            c.to_dict(),
            self.shards[c.sampling],
            self.protocol,
            self.run_epochs[c.cid],
            list(self.opts.train_args),
            self.metric,
        ]
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:8]

    def trainer_run(self, cid: str, stop_epoch: int, patience: int | None) -> TrainerRun:
        """The candidate's search run, validation only, up to `stop_epoch` of its schedule."""
        c = self.cands[cid]
        return seed_run(
            self.opts,
            DEFAULT_PRESET,
            self.shards[c.sampling],
            self.protocol,
            SEARCH_SEED,
            self.dirs[cid],
            epochs=self.run_epochs[cid],
            overrides=c.overrides(),
            eval_splits=("valid",),
            save_scores=True,
            stop_epoch=stop_epoch,
            patience=patience or None,
            select_on=self.metric,
        )

    def done(self, cid: str, stop_epoch: int, patience: int | None) -> bool:
        """Trained to `stop_epoch`, or (when the rung stops at convergence) converged before it."""
        s = summary(self.dirs[cid]) or RunSummary()
        return s.epochs_completed >= stop_epoch or bool(patience and s.converged)

    def pace(self, stops: dict[str, int]) -> GracePace | None:
        """The grace rung's pace check (pipelines.auto.pace) over the alternatives, each to its stop epoch in
        `stops`; None without a budget."""
        if self.stop_at is None or not self.view_positives:
            return None
        default = next(iter(self.cands))
        targets = {
            cid: (self.dirs[cid], stop * self.cands[cid].steps_per_epoch(self.view_positives, self.neg_ratio))
            for cid, stop in stops.items()
            if cid != default
        }
        return GracePace(targets, self.stop_at, self.clock)

    def train(self, rung: dict[str, tuple[int, int | None]], paced: bool = False) -> None:
        """Bring each candidate of `rung` = {cid: (stop epoch, patience or None)} to its stop epoch (or its
        convergence); a finished one is reused. `paced`: stop an alternative whose pace cannot reach its stop
        epoch within the search's share of the budget."""
        cut = [cid for cid in rung if self.dirs[cid].name in self.cuts.budget]  # judged as the budget left them: final
        if cut:
            log.info("search: %s cut short by --budget-minutes in this search; judged as then", ", ".join(cut))
            self.cut_short += [cid for cid in cut if cid not in self.cut_short]
        todo = {
            cid: self.trainer_run(cid, *got) for cid, got in rung.items() if cid not in cut and not self.done(cid, *got)
        }
        log.info(
            "search: %d candidate(s) to epoch %s%s, %d to train, %d reused",
            len(rung),
            " / ".join(f"{stop} of {self.run_epochs[cid]}" for cid, (stop, _) in rung.items()),
            " or convergence (patience %s)" % " / ".join(str(p) for _, p in rung.values())
            if any(p for _, p in rung.values())
            else "",
            len(todo),
            len(rung) - len(todo),
        )
        failed: dict[str, str] = {}
        watch = self.pace({cid: rung[cid][0] for cid in todo}) if paced else None
        _, stopped = run_trainers(todo, self.slots, self.stop_at, self.clock, failed, watch)
        if watch is not None:
            self.skipped.update(watch.skipped)
        if stopped:
            self.cut_short += [cid for cid in stopped if cid not in self.cut_short]
            log.warning(
                "search: --budget-minutes cut %s short; each is judged on the epochs it finished", ", ".join(stopped)
            )
        if stopped or (watch is not None and watch.skipped):
            self.cuts.record(
                [self.dirs[c].name for c in self.cut_short], {self.dirs[c].name: w for c, w in self.skipped.items()}
            )
        for cid, message in failed.items():  # a candidate that failed is judged like one the budget stopped
            self.failed[cid] = message
            log.warning("search: %s; judged on the epochs it evaluated", message)

    def state(self, cid: str) -> RunSummary:
        """The candidate's summary; for a run the budget stopped, its best evaluated epoch so far (none: an empty
        summary, best_epoch None). A run
        stopped after it was resumed past its grace period still holds the grace run's summary.json: the epochs
        it evaluated since (metrics.jsonl, and the scores of its best so far) are what it is judged on."""
        done, stopped = summary(self.dirs[cid]), stopped_summary(self.dirs[cid], self.protocol)
        if stopped and stopped.epochs_completed > (done.epochs_completed if done else 0):
            return stopped
        return done or stopped or RunSummary()

    def signal(self, cid: str):
        return run_signal(self.dirs[cid], self.manifests[self.cands[cid].sampling], self.protocol)

    def values(self, cid: str) -> dict:
        return self.signal(cid).values()

    def rung(self, cids: list[str], metric: str) -> dict:
        """Each candidate's validation value at its best epoch; None for one that evaluated no epoch."""
        out = {}
        for cid in cids:
            s = self.state(cid)
            if s.best_epoch is None:
                why = (
                    self.failed.get(cid)
                    or self.skipped.get(cid)
                    or "stopped by --budget-minutes before its first evaluation"
                )
                out[cid] = {"valid": None, "reason": why}
                log.warning(
                    "  %s: no validation epoch (%s); left out (log: %s)", cid, why, self.dirs[cid] / "trainer.log"
                )
                continue
            out[cid] = {
                "valid": float(self.values(cid)[metric].mean()),
                "best_epoch": s.best_epoch,
                "epochs": s.epochs_completed,
                "converged": bool(s.converged),
                "stopped": bool(s.stopped),
                "train_time_s": s.train_time_s,
            }
            log.info(
                "  %s: valid %s %.4f (best epoch %s of %s%s)",
                cid,
                metric,
                out[cid]["valid"],
                out[cid]["best_epoch"],
                out[cid]["epochs"],
                ", stopped by the budget" if s.stopped else "",
            )
        return out

    def grace_rung(self, cids: list[str], metric: str) -> dict:
        """Every candidate at the end of its grace period; recorded (grace.json), so a rerun, whose runs have
        trained further since, keeps the same survivors."""
        saved = self.root / "grace.json"
        if saved.exists() and sorted(json.loads(saved.read_text())) == sorted(cids):
            log.info("search: the grace period's results are kept (%s)", saved)
            return json.loads(saved.read_text())
        self.train({cid: (self.cfg.grace_epochs(self.run_epochs[cid]), None) for cid in cids}, paced=True)
        first = self.rung(cids, metric)
        self.gate_grace(first, cids[0], cids[1:], metric)
        if self.cfg.tie_break:
            self.break_grace_tie(first, [c for c in cids[1:] if "gated" not in first[c]], metric)
        write_json_atomic(saved, first)
        return first

    def gate_grace(self, first: dict, default: str, others: list[str], metric: str) -> None:
        """Mark `gated` in `first` each alternative that trails the default after its grace period (signal.trails):
        it does not go on."""
        if self.cfg.gate_se is None or first[default]["valid"] is None:
            return
        base = self.signal(default)
        for c in (c for c in others if first[c]["valid"] is not None):
            if (record := trails(self.signal(c), base, metric, self.cfg.gate_se)) is not None:
                first[c]["gated"] = record
                log.info(
                    "search: %s does not go on: behind %s by %.4f %s after its grace period, beyond %g SE (SE %.4f)",
                    c,
                    default,
                    -record[f"{metric}_difference"],
                    metric,
                    self.cfg.gate_se,
                    record[f"{metric}_se"],
                )

    def break_grace_tie(self, first: dict, others: list[str], metric: str) -> None:
        """The alternative that goes on is the best on `metric` after the grace period, unless another ties with
        it there and beats it on the other metric (signal.break_tie): that one is marked to go on instead."""
        ready = sorted((c for c in others if first[c]["valid"] is not None), key=lambda c: -first[c]["valid"])
        if len(ready) < 2:
            return
        signals = {c: self.signal(c) for c in ready}
        got = break_tie({"choice": ready[0]}, signals, metric, self.cfg.margin_se)
        if got["choice"] != ready[0]:
            first[got["choice"]]["tie_break"] = {"over": ready[0], **got["tie_break"]}
            log.info("search: %s goes on instead (%s)", got["choice"], got["reason"])

    def require_default(self, first: dict, default: str) -> None:
        """The default is what a user gets without a search: without its validation result there is nothing to
        fall back on, so the run stops here, naming the fix."""
        if first[default]["valid"] is None:
            if default in self.failed:
                raise AutoError(self.failed[default])
            raise AutoError(
                f"{default}: the budget stopped it before its first validation epoch (log: "
                f"{self.dirs[default] / 'trainer.log'}); raise --budget-minutes"
            )

    def run(self, valid_positives: int) -> Choice:
        cfg, cids, metric = self.cfg, list(self.cands), self.metric
        default, others = cids[0], cids[1:]
        log.info(
            "search: %d candidates, signal valid/%s %s (%d positives)",
            len(cids),
            self.protocol,
            metric,
            valid_positives,
        )
        first = self.grace_rung(cids, metric)
        self.require_default(first, default)
        others = [c for c in others if first[c]["valid"] is not None]
        going = math.ceil(len(others) / cfg.reduction_factor)  # of those with a result; the gated never go on
        keep = sorted(
            (c for c in others if "gated" not in first[c]),
            key=lambda c: ("tie_break" not in first[c], -first[c]["valid"], others.index(c)),
        )[:going]
        survivors = [default, *[c for c in others if c in keep]]
        self.train({c: (self.run_epochs[c], cfg.patience_epochs(self.run_epochs[c])) for c in survivors})
        second = self.rung(survivors, metric)
        survivors = [c for c in survivors if second[c]["valid"] is not None]
        signals = {c: self.signal(c) for c in survivors}
        decision = choose(
            {c: s.values()[metric] for c, s in signals.items()},
            cfg.margin_se,
            lambda a, b: two_way_se(signals[a], signals[b], metric),
        )
        if cfg.tie_break:
            decision = break_tie(decision, signals, metric, cfg.margin_se)
        if all(second[c]["best_epoch"] == 0 for c in survivors):
            # validation says nothing: the default, trained through its whole schedule as the fixed preset is
            decision = {
                **decision,
                "choice": default,
                "reason": "every candidate peaked at its first epoch: "
                "validation cannot tell them apart, the default trains its whole schedule",
            }
            self.train({default: (self.run_epochs[default], None)})
        chosen = decision["choice"]
        log.info("search: %s (%s)", chosen, decision["reason"])
        s, c = self.state(chosen), self.cands[chosen]
        partner = max((x for x in survivors if x != chosen), key=lambda x: second[x]["valid"], default=None)
        return Choice(
            c,
            int(s.epochs_completed),
            s.best_epoch,
            self.shards[c.sampling],
            str(self.dirs[chosen]),
            metric,
            decision,
            self.run_epochs[chosen],
            cfg.grace_epochs(self.run_epochs[chosen]),
            cfg.patience_epochs(self.run_epochs[chosen]),
            {"grace": first, "converged": second},
            tuple(self.cut_short),
            dict(self.failed),
            dict(self.skipped),
            self.cands[partner] if partner else None,
            str(self.dirs[partner]) if partner else "",
            self.shards[self.cands[partner].sampling] if partner else "",
            self.run_epochs[partner] if partner else 0,
        )
