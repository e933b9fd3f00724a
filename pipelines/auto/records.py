"""The search's two records (pipelines/auto/search.py): what it is asked to decide (SearchPlan) and what it
decided, with how (Choice, search.json's "chosen"); the final seeds (pipelines/auto/final.py) and the recipe read
them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.auto.config import Candidate


@dataclass(frozen=True)
class Choice:
    """What the search chose, and the record of how (search.json's "chosen")."""

    candidate: Candidate
    epochs: int  # epochs the chosen run trained: the final seeds stop there
    best_epoch: int
    shards: str  # the chosen candidate's shard set
    run_dir: str  # its search run (seed pipelines.auto.search.SEARCH_SEED)
    metric: str  # the validation signal it was chosen on
    decision: dict  # pipelines.auto.signal.choose's record
    run_epochs: int  # the lr schedule's span
    grace_epochs: int
    patience: int
    rungs: dict = field(default_factory=dict)
    cut_short: tuple[str, ...] = ()  # candidates the budget stopped
    failed: dict = field(default_factory=dict)  # candidates whose trainer failed: {cid: its one line}
    skipped: dict = field(default_factory=dict)  # alternatives the pace check stopped: {cid: why}
    partner: Candidate | None = None  # the runner-up of the last rung, whose run the blend may add
    partner_dir: str = ""  # its search run
    partner_shards: str = ""  # and its shard set
    partner_run_epochs: int = 0  # and its lr schedule's span

    @property
    def cid(self) -> str:
        return self.candidate.cid

    def to_dict(self) -> dict:
        return {
            "cid": self.cid,
            "config": self.candidate.to_dict(),
            "epochs": self.epochs,
            "best_epoch": self.best_epoch,
            "shards": self.shards,
            "run_dir": self.run_dir,
            "metric": self.metric,
            "decision": self.decision,
            "run_epochs": self.run_epochs,
            "grace_epochs": self.grace_epochs,
            "patience": self.patience,
            "rungs": self.rungs,
            "cut_short": list(self.cut_short),
            "failed": self.failed,
            "skipped": self.skipped,
            "partner": {"cid": self.partner.cid, "run_dir": self.partner_dir, "run_epochs": self.partner_run_epochs}
            if self.partner
            else {},
        }


@dataclass(frozen=True)
class SearchPlan:
    """What the search trains, on what, and how it decides: `epochs`, the default's schedule; `cands`, the
    candidates (the default first); `shards` / `manifests`: each sampling's shard set and its manifest; `protocol`;
    `metric`, what it chooses and its runs stop on (pencil run --metric); `view_positives` / `neg_ratio`, a view's
    positives and negatives per positive (the pace check's input); `tokens`: {cid: tokens of an epoch} of each
    candidate's shard set, from which an alternative's schedule follows (SearchConfig.candidate_epochs; None:
    every candidate trains `epochs`)."""

    epochs: int
    cands: list[Candidate]
    shards: dict
    manifests: dict
    protocol: str
    metric: str = "mrr"
    view_positives: int = 0
    neg_ratio: int = 1
    tokens: dict | None = None
