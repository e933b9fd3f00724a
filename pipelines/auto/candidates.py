"""What `--preset auto` searches: candidate configurations proposed from graph statistics, and the
successive-halving schedule that prunes them (pure logic; pipelines.auto.search runs it on trainers).

Proposal rules (from common.graph_stats.GraphStats; exact, tested on hand-built graphs):
- sampling (d, n): a very sparse graph (mean degree < 4) has too few common neighbours for one hop to
  show anything, so 3 and 2 hops with a small fan-out; a mid-density graph (4-12) one 2-hop and one
  1-hop candidate; a dense graph (>= 12) 1 hop only, with n near the 90th-percentile degree (so most
  neighbourhoods fit whole: common neighbours are only seen where both ego nets are) and a cheaper n near
  the median degree. n is clipped to what the device can afford per link (CPU: 1-hop n <= 100); a
  candidate the budget cannot afford is cut before it starts (fit_first_rung).
- model: on CPU three shapes that train in minutes (128 x 2 at lr 5e-4 cosine, 64 x 2 at lr 1e-3
  constant, 128 x 3 at lr 3e-4 cosine); on a GPU wider ones.
- epochs: every candidate's lr schedule spans max_epochs; rungs stop it early.
- budget (fit_first_rung): from each candidate's measured seconds per epoch, the first rung keeps the
  candidates (and epochs) that fit, with the final seeds' time reserved.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Callable

SPARSE_MEAN_DEGREE = 4.0
DENSE_MEAN_DEGREE = 12.0
MAX_ONE_HOP_N = {"cpu": 100, "cuda": 150}
# (hidden, layers, heads, ffn, lr, lr_schedule, effective_batch)
MODELS = {
    "cpu": [(128, 2, 4, 256, 5e-4, "cosine", 64), (64, 2, 2, 128, 1e-3, "constant", 64),
            (128, 3, 4, 256, 3e-4, "cosine", 64)],
    "cuda": [(256, 2, 8, 512, 5e-4, "cosine", 256), (512, 4, 8, 1024, 2e-4, "cosine", 512),
             (256, 4, 8, 512, 1e-3, "constant", 256)],
}
MAX_EPOCHS = {"cpu": 16, "cuda": 40}
FIRST_RUNG = {"cpu": 2, "cuda": 4}
ETA = 2  # keep the best 1/ETA at each rung, ETA x the epochs at the next


@dataclass(frozen=True)
class Candidate:
    sampling: tuple[int, int]
    hidden: int
    layers: int
    heads: int
    ffn: int
    lr: float
    lr_schedule: str
    effective_batch: int
    max_epochs: int

    @property
    def cid(self) -> str:
        d, n = self.sampling
        return f"d{d}n{n}-h{self.hidden}l{self.layers}-lr{self.lr:g}-{self.lr_schedule}"

    def trainer_flags(self) -> list[str]:
        """The candidate as `python -m trainer --preset auto` overrides (sampling comes with its shards)."""
        return ["--hidden", str(self.hidden), "--layers", str(self.layers), "--heads", str(self.heads),
                "--ffn", str(self.ffn), "--lr", f"{self.lr:g}", "--lr-schedule", self.lr_schedule,
                "--effective-batch", str(self.effective_batch), "--epochs", str(self.max_epochs)]

    def to_dict(self) -> dict:
        return {"cid": self.cid, **asdict(self), "sampling": list(self.sampling)}


def _clip(x: float, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, round(x))))


def propose_samplings(mean_degree: float, median_degree: float, p90_degree: float, device: str = "cpu") -> list:
    cap = MAX_ONE_HOP_N[device]
    if mean_degree < SPARSE_MEAN_DEGREE:
        out = [(3, 3), (2, _clip(p90_degree, 3, 8))]
    elif mean_degree < DENSE_MEAN_DEGREE:
        out = [(2, _clip(median_degree, 3, 8)), (1, _clip(p90_degree, 10, cap))]
    else:
        out = [(1, _clip(p90_degree, 10, cap)), (1, _clip(median_degree, 10, cap))]
    return list(dict.fromkeys(out))  # a (1, n) pair twice when median and p90 clip alike


def propose(stats, device: str = "cpu") -> list[Candidate]:
    """Every sampling x every model shape of the device, in a fixed order (ties keep it)."""
    device = "cuda" if device == "cuda" else "cpu"
    samplings = propose_samplings(stats.mean_degree, stats.median_degree, stats.p90_degree, device)
    return [Candidate(s, *m, max_epochs=MAX_EPOCHS[device]) for s in samplings for m in MODELS[device]]


def rungs(first: int, max_epochs: int, eta: int = ETA) -> list[int]:
    """Epoch counts at which candidates are compared: first, first*eta, ..., max_epochs."""
    out, e = [], first
    while e < max_epochs:
        out.append(e)
        e *= eta
    return out + [max_epochs]


# ---------------------------------------------------------------------------- the budget
def round_cost(sec_per_epoch: dict, cids: list[str], epochs: float, final_epochs: float, slots: int,
               final_seeds: int) -> float:
    """Seconds of a rung of `epochs` more epochs over `cids` (`slots` trainers at once, one trainer per
    candidate) plus the final seeds trained for `final_epochs` with the most expensive of them (whichever
    wins)."""
    worst = max(sec_per_epoch[c] for c in cids)
    rung = max(sum(sec_per_epoch[c] for c in cids) / slots, worst) * epochs
    return rung + math.ceil(final_seeds / slots) * worst * final_epochs


def fit_first_rung(cids: list[str], sec_per_epoch: dict, samplings: dict, first: int, left_s: float, slots: int,
                   final_seeds: int, min_candidates: int = ETA) -> tuple[list[str], int, list[dict]]:
    """The candidates and epochs of the first rung that fit `left_s` seconds with the final seeds reserved:
    (kept cids in their order, epochs, cuts). Cuts, in this order, until it fits: the most expensive
    candidate (of a sampling that keeps another while one has two, so every sampling stays tried) down to
    `min_candidates`; then one epoch less, down to 1; then candidates down to one. If even that does not
    fit, the plan keeps the cheapest candidate at one epoch and its last cut says by how much it is over;
    the rung's deadline then stops it (pipelines.auto.search), with a one-line error if no epoch finished."""
    kept, epochs, cuts = list(cids), first, []

    def cost() -> float:
        return round_cost(sec_per_epoch, kept, epochs, epochs, slots, final_seeds)

    def drop(floor: int) -> bool:
        if len(kept) <= floor:
            return False
        count = Counter(samplings[k] for k in kept)
        pool = [c for c in kept if count[samplings[c]] > 1] or kept
        worst = max(pool, key=lambda c: (sec_per_epoch[c], kept.index(c)))  # ties: the later one
        kept.remove(worst)
        cuts.append({"cut": "candidate", "cid": worst, "sec_per_epoch": round(sec_per_epoch[worst], 2)})
        return True

    while cost() > left_s:
        if drop(max(1, min_candidates)):
            continue
        if epochs > 1:
            epochs -= 1
            cuts.append({"cut": "first rung epochs", "epochs": epochs})
            continue
        if drop(1):
            continue
        cuts.append({"cut": "over budget", "need_s": round(cost(), 1), "left_s": round(left_s, 1)})
        break
    return kept, epochs, cuts


# ---------------------------------------------------------------------------- successive halving
@dataclass
class RungResult:
    rung: int  # epochs trained so far
    scores: dict  # cid -> validation score (higher is better)
    survivors: list  # cids promoted to the next rung


def successive_halving(cids: list[str], rung_epochs: list[int], train: Callable[[list[str], int], dict],
                       can_afford: Callable[[list[str], int, int], bool] = lambda c, e, done: True,
                       eta: int = ETA) -> tuple[str, list[RungResult]]:
    """Synchronous successive halving. `train(cids, epochs)` brings every listed candidate to `epochs`
    (resuming it) and returns {cid: score}; after each rung the best ceil(n / eta) move on (ties: the
    earlier in `cids`). Before a rung, `can_afford(cids, epochs, done_epochs)` may stop the search; the
    first rung always runs. Returns the winner (best at the last rung run) and every rung's result."""
    alive, history, done = list(cids), [], 0
    for i, epochs in enumerate(rung_epochs):
        if i and not can_afford(alive, epochs, done):
            break
        scores = train(alive, epochs)
        order = sorted(alive, key=lambda c: (-_finite(scores[c]), cids.index(c)))
        keep = order[: max(1, math.ceil(len(alive) / eta))]
        history.append(RungResult(epochs, {c: scores[c] for c in alive}, keep))
        # a lone survivor still climbs the rungs: its best validation epoch within them is the pick
        alive, done = keep, epochs
    winner = max(history[-1].scores, key=lambda c: (_finite(history[-1].scores[c]), -cids.index(c)))
    return winner, history


def _finite(x) -> float:
    return x if x is not None and math.isfinite(x) else -math.inf
