"""`--preset auto`'s heuristic prior: PENCIL's logit plus a weighted CN, AA or RA, chosen on validation.

    score(u, v) = logit(u, v) + w * log1p(h(u, v)),   h in {cn, aa, ra},  w in WEIGHTS   (none: w = 0)

Why: on a CPU budget the search trains the winner for 1-2 epochs, too few for the model to rank the top
of a dense graph as sharply as exact low-degree common-neighbour counts do, while its AUC (the whole
ranking) already wins (BENCHMARKS.md, issue 21). The heuristic, on log scale like the logit, adds the
counts the model has not learnt yet; w = 0 leaves the model alone.

What the choice sees, per final seed: the seed's validation logits of the selection protocol (valid/original,
or valid/hard when the split's own validation is saturated: pipelines.auto_search.selection_protocol),
written by the trainer's --save-scores at the evaluated epoch, and the heuristics of the same pairs on the
graph that split is evaluated on (dataset.graph_for("valid"), as pipelines.heuristics scores its rows).
The (h, w) with the best validation selection metric wins; ties keep the earlier grid entry (none first,
then CN, AA, RA, each by increasing w), so a prior must strictly improve validation to be used. Only then
is the test file read, to apply it (test heuristics on dataset.graph_for("test"), as the CN/AA/RA rows).

cid -> pair: row i of preprocess.candidates.protocol_candidates(dataset, split, protocol) is cid i, the
list the shard set was sampled from; it is checked against the shard set (same dataset fingerprint, same
candidate count, same queries) before any score is looked up.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

import numpy as np

from common.eval_scores import read_scores, scores_path
from common.heuristics import ranking_scores
from common.shards import load_queries
from preprocess.candidates import protocol_candidates
from trainer.evaluate import eval_entry, scores_to_metrics, selection_metric

log = logging.getLogger("pipelines.auto")

HEURISTICS = ("cn", "aa", "ra")
# Doubling up to 1024: on cora every seed chose RA at 64, the old top, with validation still rising; at
# 1024 a log1p(h) step of 1e-3 outweighs any logit gap of the model, i.e. the heuristic ranks and the model
# breaks its ties, so the grid spans the model alone to the heuristic led by the model.
WEIGHTS = tuple(2.0 ** k for k in range(-2, 11))
NONE = "none"
GRID = [(NONE, 0.0)] + [(h, w) for h in HEURISTICS for w in WEIGHTS]


class PriorError(ValueError):
    """The shard set and the dataset disagree, or a scores file is missing; the message names it."""


def blend(logit: np.ndarray, heuristic: np.ndarray | None, weight: float) -> np.ndarray:
    """logit + weight * log1p(heuristic), in float64; weight 0 returns the logits untouched (so w = 0
    reproduces the model's own metrics bit for bit)."""
    if not weight:
        return logit
    return np.asarray(logit, dtype=np.float64) + weight * np.log1p(np.asarray(heuristic, dtype=np.float64))


def choose(metric_of: Callable[[np.ndarray], float], logit: np.ndarray, heuristics: dict[str, np.ndarray]) -> dict:
    """The grid entry with the best metric_of(blended validation scores), ties to the earlier entry.
    A function of the validation logits and heuristics only: nothing else reaches it."""
    best, table = None, []
    for h, w in GRID:
        value = float(metric_of(blend(logit, heuristics.get(h), w)))
        table.append([h, w, value])
        if best is None or value > best[2]:
            best = (h, w, value)
    return {"heuristic": best[0], "weight": best[1], "valid": best[2], "grid": table}


def eval_pairs(dataset, manifest: dict, split: str, protocol: str) -> np.ndarray:
    """(C, 2) node pairs of an eval set, row = cid, checked against the shard set that was scored."""
    if manifest.get("fingerprint") != dataset.fingerprint():
        raise PriorError(f"{manifest['root']}: built from another version of dataset {dataset.name} (fingerprint "
                         f"{manifest.get('fingerprint')} != {dataset.fingerprint()}); rerun the recipe to rebuild it")
    cands = protocol_candidates(dataset, split, protocol)
    entry = eval_entry(manifest, split, protocol)
    pos_cid, neg_cid = load_queries(f"{manifest['root']}/{entry['queries']}",
                                    sha256=manifest["files"][entry["queries"]]["sha256"])
    if (len(cands) != entry["candidates"] or not np.array_equal(pos_cid, cands.pos_cid)
            or not np.array_equal(neg_cid, cands.neg_cid)):
        raise PriorError(f"{manifest['root']}: eval set {split}/{protocol} does not match the dataset's candidates; "
                         "rerun the recipe to rebuild the shard set")
    return np.stack([cands.src, cands.dst], axis=1)


class PriorStage:
    """The prior for every final seed of one shard set; the heuristics of an eval set are computed once."""

    def __init__(self, dataset, manifest: dict, select: str, protocol: str):
        self.dataset, self.manifest, self.select, self.protocol = dataset, manifest, select, protocol
        self.metric = selection_metric(manifest, select)
        self._heuristics: dict[tuple[str, str], dict[str, np.ndarray]] = {}

    def heuristics(self, split: str, protocol: str) -> dict[str, np.ndarray]:
        """{name: (C,) scores by cid} on the graph `split` is evaluated on."""
        key = (split, protocol)
        if key not in self._heuristics:
            pairs = eval_pairs(self.dataset, self.manifest, split, protocol)
            graph = self.dataset.graph_for(split)
            self._heuristics[key] = {h: ranking_scores(h, graph, pairs) for h in HEURISTICS}
        return self._heuristics[key]

    def choose_for(self, run_dir: Path) -> dict:
        """The seed's (h, w), from its validation scores of the selection protocol only."""
        cid, logit, epoch = read_scores(scores_path(run_dir, "valid", self.select))
        heur = {h: s[cid] for h, s in self.heuristics("valid", self.select).items()}
        chosen = choose(lambda s: scores_to_metrics(self.manifest, "valid", self.select, cid, s)[self.metric],
                        logit, heur)
        return {**chosen, "protocol": f"valid/{self.select}", "metric": self.metric, "epoch": epoch}

    def apply(self, run_dir: Path, chosen: dict) -> dict:
        """Test metrics of the chosen blend (the test file is opened here, after the choice)."""
        cid, logit, _ = read_scores(scores_path(run_dir, "test", self.protocol))
        h = chosen["heuristic"]
        heur = self.heuristics("test", self.protocol)[h][cid] if h != NONE else None
        return scores_to_metrics(self.manifest, "test", self.protocol, cid, blend(logit, heur, chosen["weight"]))

    def run(self, run_dir: Path) -> dict:
        chosen = self.choose_for(run_dir)
        test = self.apply(run_dir, chosen)
        log.info("%s: prior %s x %g (valid/%s %s %.4f); test %s %.4f", run_dir.name, chosen["heuristic"],
                 chosen["weight"], self.select, self.metric, chosen["valid"], self.metric, test[self.metric])
        return {**chosen, "test": test}


def prior_model_name(base: str, priors: list[dict]) -> str:
    """The blend's row name: the heuristic when every seed chose the same one, else 'heuristic prior'."""
    chosen = {p["heuristic"] for p in priors}
    return f"{base} + {chosen.pop().upper()} prior" if len(chosen) == 1 and NONE not in chosen else \
        f"{base} + heuristic prior"
