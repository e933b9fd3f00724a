"""The search's grace rung (pipelines.auto.search, steps 1 and 2): every candidate trains its grace period, the
gate and the tie-break decide who goes on, and those that go on start in the same trainer pool the moment they
may: the default as soon as its own grace period is done (it always goes on), the others as soon as every grace
period is. The default's results at the end of its grace period are copied aside first (GRACE_COPY), since its
run folder moves on while the gate still compares the alternatives with it there.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from pathlib import Path

from common.atomic import write_json_atomic
from common.eval_scores import scores_path
from pipelines.auto.signal import break_tie, trails
from pipelines.core.trainers import TrainerRun
from trainer.run_summary import summary_path

log = logging.getLogger("pipelines.auto")
GRACE_COPY = "grace"  # in the search's folder: a run's results as its grace period left them, once it went on


class GraceRung:
    """The grace rung's part of pipelines.auto.search.Search (its folders, runs and signals)."""

    def grace_dir(self, cid: str) -> Path:
        """Where a candidate's grace-period results are: its copy (keep_grace) once it went on, else its run."""
        copy = self.root / GRACE_COPY / self.dirs[cid].name
        return copy if copy.is_dir() else self.dirs[cid]

    def keep_grace(self, cid: str) -> None:
        """Copy what the grace rung reads of the run (summary, metrics, validation scores) before it trains on;
        the copy appears whole (a renamed folder), and an earlier one is of the same deterministic run."""
        src, dst = self.dirs[cid], self.root / GRACE_COPY / self.dirs[cid].name
        if dst.is_dir():
            return
        tmp = dst.with_name(dst.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        for path in (summary_path(src), src / "metrics.jsonl", scores_path(src, "valid", self.protocol)):
            if path.is_file():
                (tmp / path.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, tmp / path.relative_to(src))
        tmp.mkdir(parents=True, exist_ok=True)
        tmp.rename(dst)

    def grace_rung(self, cids: list[str], metric: str) -> dict:
        """Every candidate at the end of its grace period; recorded (grace.json), so a rerun, whose runs have
        trained further since, keeps the same survivors. Those that go on start in the same pool (module doc)."""
        saved = self.root / "grace.json"
        if saved.exists() and sorted(json.loads(saved.read_text())) == sorted(cids):
            log.info("search: the grace period's results are kept (%s)", saved)
            return json.loads(saved.read_text())
        default, decided, grace_left = cids[0], {}, None
        grace = {cid: (self.cfg.grace_epochs(self.run_epochs[cid]), None) for cid in cids}

        def more(cid: str, todo: dict) -> dict:
            nonlocal grace_left
            grace_left = set(todo) if grace_left is None else grace_left
            if cid not in grace_left:
                return {}  # a run that went on has ended
            grace_left.discard(cid)
            going = [default] if cid == default and self.done(default, *grace[default]) else []
            if not grace_left:
                first = decided["first"] = self.decide_grace(cids, metric)
                going += self.survivors(first, cids)[1:] if first[default]["valid"] is not None else []
            return {c: run for c in going if (run := self.go_on(c))}

        self.train(grace, paced=True, more=more)
        return decided.get("first") or self.decide_grace(cids, metric)

    def decide_grace(self, cids: list[str], metric: str) -> dict:
        """The grace rung's values, the gate and the tie-break, on what each grace period left; saved."""
        first = self.rung(cids, metric, grace=True)
        self.gate_grace(first, cids[0], cids[1:], metric)
        if self.cfg.tie_break:
            self.break_grace_tie(first, [c for c in cids[1:] if "gated" not in first[c]], metric)
        write_json_atomic(self.root / "grace.json", first)
        return first

    def go_on(self, cid: str) -> TrainerRun | None:
        """The candidate's run to its convergence, its grace results kept first; None when there is nothing to
        train (finished, or the budget's cut of an earlier try is final)."""
        stop, patience = self.run_epochs[cid], self.cfg.patience_epochs(self.run_epochs[cid])
        if self.dirs[cid].name in self.cuts.budget or self.done(cid, stop, patience):
            return None
        self.keep_grace(cid)
        return self.trainer_run(cid, stop, patience)

    def survivors(self, first: dict, cids: list[str]) -> list[str]:
        """The default and the best 1 in `reduction_factor` alternatives with a result: the gated never go on,
        and one that won a tie-break goes first."""
        default, others = cids[0], [c for c in cids[1:] if first[c]["valid"] is not None]
        going = math.ceil(len(others) / self.cfg.reduction_factor)
        keep = sorted(
            (c for c in others if "gated" not in first[c]),
            key=lambda c: ("tie_break" not in first[c], -first[c]["valid"], others.index(c)),
        )[:going]
        return [default, *[c for c in others if c in keep]]

    def gate_grace(self, first: dict, default: str, others: list[str], metric: str) -> None:
        """Mark `gated` in `first` each alternative that trails the default after its grace period (signal.trails):
        it does not go on."""
        if self.cfg.gate_se is None or first[default]["valid"] is None:
            return
        base = self.signal(default, grace=True)
        for c in (c for c in others if first[c]["valid"] is not None):
            if (record := trails(self.signal(c, grace=True), base, metric, self.cfg.gate_se)) is not None:
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
        signals = {c: self.signal(c, grace=True) for c in ready}
        got = break_tie({"choice": ready[0]}, signals, metric, self.cfg.margin_se)
        if got["choice"] != ready[0]:
            first[got["choice"]]["tie_break"] = {"over": ready[0], **got["tie_break"]}
            log.info("search: %s goes on instead (%s)", got["choice"], got["reason"])
