"""What `--preset auto` searches and how: the candidates (the fixed general-purpose default and two or three
alternatives) and the search's knobs, in one dataclass.

The default is the `general` preset (common/presets.py): what a user would get with no search at all. The
alternatives change the view of the subgraph: `deep`, two hops of 10 with each token's hop distances to the two
targets (DRNL's structural signal, trainer --distance-features), for sparse graphs where one hop sees little
and for community or geometric graphs where the signal is in many short paths; two hops of 5 led the default
by +4.2 MRR and +5.1 AUC on validation of 9 graphs, and 10 instead of 5 gains +5.8 AUC on the block model and
latent space for 3x their epoch time, and 0.7 to 2.4 MRR on sparse graphs for 1.0 to 1.4x
(docs/benchmarks/2026-11-28-own-graph-research.md, sections 1 and 10). `wide`, one wider hop, for dense
graphs where 20 neighbours cut the common ones. `degree`, on a typed graph whose relation joins two node kinds only
(a user-item file): the default's view with each token's training degree (trainer --degree-features), and half its
training links shown as new users (trainer --cold-heads) where most validation users are new. The model and
optimiser stay the default's.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from common.presets import get_preset

DEFAULT_PRESET = "general"
COLD_HEADS = 0.5  # the `degree` candidate's --cold-heads where most validation heads are new


@dataclass(frozen=True)
class SearchConfig:
    # Each rule below was adopted on validation across graph families; the report named beside it holds the
    # measurements (docs/benchmarks/README.md indexes them).
    # A run's epochs: enough for min_steps optimiser steps, within [min_epochs, max_epochs] (its lr schedule spans
    # them).
    min_steps: int = 1500
    min_epochs: int = 12
    max_epochs: int = 60
    grace_period: float = 1 / 6  # of a run's epochs (2 at least, all but one at most) trained before any is cut
    reduction_factor: int = 3  # after the grace period, 1 in reduction_factor alternatives goes on
    # ... but not one behind the default by more than gate_se SE (two-way bootstrap) on the metric, unless it leads
    # on the other of MRR / AUC by as much; None: no gate (docs/benchmarks/2026-12-01-own-graph-time.md)
    gate_se: float | None = 1.0
    patience: float = 1 / 4  # of the run's epochs (at least 2) without a better validation score: converged
    # an alternative replaces the default only when better by more than margin_se SE (pipelines.auto.signal;
    # docs/benchmarks/2026-11-28-own-graph-research.md)
    margin_se: float = 1.0
    # a tie on the metric (within margin_se SE) is broken by the other of MRR / AUC at margin_se SE
    # (pipelines.auto.signal.break_tie; research report section 8)
    tie_break: bool = True
    blend_margin_se: float = 2.0  # the blend's rule, on the closed-form SE over the positives
    # the blend decides on validation's protocol negatives plus a pool valid_pool times as large, ranks estimated at
    # test's count of negatives (common/datasets/pool.py); the stop and the search stay on the protocol's
    # negatives; 0: no pool (docs/benchmarks/2026-12-02-own-graph-pool.md)
    valid_pool: int = 8
    # on a CPU an alternative trains for the default's compute (its tokens, or min_run_tokens if more), not for its
    # epochs: two hops on a dense graph hold several times the default's tokens a link
    # (docs/benchmarks/2026-12-01-own-graph-time.md)
    matched_compute: bool = True
    min_run_tokens: float = 1.5e6  # a run this cheap is not worth cutting
    # on a CPU the default's run trains at most this many tokens (its epochs cut, at least min_capped_epochs): on a
    # dense graph a link holds up to 42 tokens against 7-15 on a sparse one, so 1,500 steps cost up to 5x the
    # time; 2.0e6 binds above about 21 tokens a link. None (no cap) until a validation study across graph
    # families shows what it costs (docs/benchmarks/2026-12-05-dense-cost.md)
    max_run_tokens: float | None = None
    min_capped_epochs: int = 3  # a grace period of 2 epochs and one more
    # training negatives per positive (uniform random non-edges); a graph too dense for as many distinct non-edges
    # gets fewer, views with 2-hop negatives (the recommend objective) keep 1
    # (docs/benchmarks/2026-12-02-own-graph-negatives.md)
    neg_ratio: int = 3
    # an upper bound on the whole run: the search gets half of it, a third when the run has node features (the final
    # seeds then train twice, with and without them: pipelines/auto/recipe.py), the final seeds the rest
    budget_minutes: float = 30.0

    def epochs(self, steps_per_epoch: int) -> int:
        return min(self.max_epochs, max(self.min_epochs, math.ceil(self.min_steps / max(1, steps_per_epoch))))

    def link_epochs(self, epochs: int, neg_ratio: int) -> int:
        """Epochs of `neg_ratio` negatives per positive that train as many links as `epochs` of one."""
        return max(2, math.ceil(epochs * 2 / (1 + neg_ratio))) if neg_ratio > 1 else epochs

    def candidate_epochs(self, epochs: int, tokens: float, default_tokens: float) -> int:
        """The schedule of a candidate whose epoch trains `tokens` tokens, the default's `default_tokens`, both on the
        default's `epochs` (0: unknown, the default's epochs)."""
        budget = max(epochs * default_tokens, self.min_run_tokens)
        if not self.matched_compute or not tokens or not default_tokens or epochs * tokens <= budget:
            return epochs
        return max(2, round(budget / tokens))

    def capped_epochs(self, epochs: int, default_tokens: float) -> int:
        """The default's schedule of `epochs` whose epoch trains `default_tokens` tokens, cut to max_run_tokens (0:
        unknown, uncut); the alternatives' compute follows from it (candidate_epochs)."""
        if not self.max_run_tokens or not default_tokens or epochs * default_tokens <= self.max_run_tokens:
            return epochs
        return min(epochs, max(self.min_capped_epochs, math.floor(self.max_run_tokens / default_tokens)))

    def grace_epochs(self, epochs: int) -> int:
        # a grace period ends before its run does: a 2-epoch run (`deep` on a dense graph, whose one epoch holds
        # nearly the default's whole run) is judged after its first (docs/benchmarks/2026-12-05-matched-floor.md)
        return max(1, min(epochs - 1, max(2, int(epochs * self.grace_period))))

    def patience_epochs(self, epochs: int) -> int:
        return max(2, int(epochs * self.patience))

    def to_dict(self) -> dict:
        return asdict(self)


# the most attribute columns the heads may use for `peers`: each is a group of every node, in the peer tables
# an edge counts once per group of its end (a 300-dimensional embedding would hold each edge 300 times)
PEER_COLUMNS = 64


@dataclass(frozen=True)
class Candidate:
    name: str
    sampling: tuple[int, int]
    hidden: int
    layers: int
    heads: int
    ffn: int
    lr: float
    lr_schedule: str
    effective_batch: int
    distances: int = 0  # trainer --distance-features D (0: off)
    degrees: int = 0  # trainer --degree-features D (0: off)
    degree_steps: int = 1  # trainer --degree-steps S, with degrees
    cold_heads: float = 0.0  # trainer --cold-heads SHARE (0: off)
    time_features: bool = False  # trainer --time-features
    peer_features: bool = False  # trainer --peer-features (with the time features)

    @property
    def cid(self) -> str:
        d, n = self.sampling
        return f"{self.name}-d{d}n{n}"

    def steps_per_epoch(self, view_positives: int, neg_ratio: int = 1) -> int:
        """Optimiser steps in an epoch of a view: its positives and neg_ratio negatives each, in effective batches."""
        return math.ceil((1 + neg_ratio) * view_positives / self.effective_batch)

    def overrides(self) -> tuple[str, ...]:
        """The candidate as `python -m trainer --preset general` overrides (its sampling comes with its shards)."""
        return (
            "--hidden",
            str(self.hidden),
            "--layers",
            str(self.layers),
            "--heads",
            str(self.heads),
            "--ffn",
            str(self.ffn),
            "--lr",
            f"{self.lr:g}",
            "--lr-schedule",
            self.lr_schedule,
            "--effective-batch",
            str(self.effective_batch),
            *(("--distance-features", str(self.distances)) if self.distances else ()),
            *(
                ("--degree-features", str(self.degrees), "--degree-steps", str(self.degree_steps))
                if self.degrees
                else ()
            ),
            *(("--cold-heads", f"{self.cold_heads:g}") if self.cold_heads else ()),
            *(("--time-features",) if self.time_features else ()),
            *(("--peer-features",) if self.peer_features else ()),
        )

    def to_dict(self) -> dict:
        """Its record, and what its search folder's key hashes; the degree, cold, time and peer fields only when on,
        so a candidate without them keeps the record and folder it had before they existed."""
        fields = asdict(self)
        if not self.degrees:
            del fields["degrees"], fields["degree_steps"]
        if not self.cold_heads:
            del fields["cold_heads"]
        if not self.time_features:
            del fields["time_features"]
        if not self.peer_features:
            del fields["peer_features"]
        return {"cid": self.cid, **fields, "sampling": list(self.sampling)}

    @classmethod
    def from_dict(cls, d: dict) -> "Candidate":
        return cls(**{**{k: v for k, v in d.items() if k != "cid"}, "sampling": tuple(d["sampling"])})


def candidates(
    two_kinds: bool = False, new_heads: bool = False, timed: bool = False, peers: bool = False
) -> list[Candidate]:
    """The default first (ties keep it), then the alternatives; `two_kinds` (a typed graph with a relation that joins
    two node kinds, pipelines.auto.recipe.joins_two_kinds): `degree` too, second, so it trains beside the default
    first on a CPU's two slots; `new_heads` (most validation pairs' heads have no training link,
    pipelines.auto.recipe.mostly_new_heads): `degree` trains half its links as cold heads; and `timed` as well (the
    split is temporal, so the set ships its clock): `time` takes its place, recent activity for training degree; and
    `peers` as well (the heads have attributes, pipelines.auto.recipe.heads_have_attributes): `peers` in its place,
    with each token's lift among the nodes sharing the head's attributes."""
    p = get_preset(DEFAULT_PRESET)
    default = Candidate(
        "default", p.sampling, p.hidden, p.layers, p.heads, p.ffn, p.lr, p.lr_schedule, p.effective_batch
    )
    # the default's view plus each token's bucketed training degree (trainer --degree-features 40 --degree-steps 4):
    # only where a relation joins two kinds, as a user's items, whose cold-start candidates are the same star for
    # every item with n raters or more; it took movielens-100k's test MRR from 7.68 to 21.02
    # (docs/benchmarks/2026-12-05-user-item-degree.md), and is unmeasured on one-kind graphs, where it would cost
    # every search a candidate
    degree = [replace(default, name="degree", degrees=40, degree_steps=4)] if two_kinds else []
    # a temporal split whose users are mostly new asks about users training never shows without history: half the
    # training links shown with the head's edges hidden (trainer --cold-heads 0.5) gave +1.3 to +3.2 validation
    # MRR on three generated graphs of arriving users and movielens-100k (docs/benchmarks/2026-12-06-cold-heads.md)
    if new_heads:
        degree = [replace(d, cold_heads=COLD_HEADS) for d in degree]
    # where those new users arrive in time, what is active when they arrive tells more than what was over the whole
    # history: each node's recent activity (trainer --time-features) in place of its training degree gave +0.6 to
    # +6.3 validation MRR on six generated graphs of arriving users and movielens-100k
    # (docs/benchmarks/2026-12-06-time-input.md)
    if new_heads and timed:
        degree = [replace(d, name="time", degrees=0, degree_steps=1, time_features=True) for d in degree]
    # where they bring attributes, what the nodes sharing them chose lately (trainer --peer-features): +3.5 to +12.5
    # validation MRR on six generated graphs whose users' attributes set their taste, +1.3 on movielens-100k, -0.2
    # to +0.7 where the attributes are noise (docs/benchmarks/2026-12-06-peer-input.md)
    if new_heads and timed and peers:
        degree = [replace(d, name="peers", peer_features=True) for d in degree]
    return [
        default,
        *degree,
        replace(default, name="deep", sampling=(2, 10), distances=4),
        replace(default, name="wide", sampling=(1, 50)),
    ]
