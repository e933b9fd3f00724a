"""`pencil run` on a typed graph (a knowledge graph, an edge list with --relation, a user-item file): which
protocol it ranks under, what stays refused, and the heuristics' rows on the SAME corruptions the model ranks.

Every test triple is ranked against its own filtered corruptions of head and tail (protocol "kg",
common/datasets/kg.py; a (-1, -1) pair pads a short row and scores -inf: never above nor tied with a positive).
The rows beside PENCIL:
- CN / AA / RA on the graph the split is scored on, relations ignored (its undirected union of triples);
- popularity: per relation, score(h, r, t) = out_r(h) + in_r(t), the head's and the tail's degree under r in the
  triples of that graph. A row's head corruptions share t and its tail corruptions share h, so the sum ranks
  every corruption exactly by the degree of the end it replaced (a user-item file's item popularity).
"""

from __future__ import annotations

import logging

import numpy as np

from common.datasets.kg import KG
from common.flags import FlagError
from common.heuristics import label as heuristic_label
from common.heuristics import ranking_scores
from common.metrics import evaluate, relation_metrics, unique_pairs
from pipelines.core.results import METRICS, TableRow
from pipelines.core.run_config import RunConfig

log = logging.getLogger("pipelines.run")
STRUCTURE = ("cn", "aa", "ra")  # read on the typed graph's undirected union, relations ignored
POPULARITY = "popularity"
TYPED_HEURISTICS = (*STRUCTURE, POPULARITY)
LABELS = {POPULARITY: "popularity (per relation)"}


def typed_protocols(run: RunConfig, dataset) -> list[str]:
    """["kg"]: a typed graph's only ranking (its default --protocol original and `both` mean it); what does not fit
    a typed graph yet is refused in one line before any work."""
    where = f"--dataset {run.source.dataset}"
    if run.protocol not in ("original", "both"):
        raise FlagError(
            f"--protocol {run.protocol}: {where} is a typed graph, ranked under its own protocol kg (each triple "
            "against its filtered corruptions); drop --protocol"
        )
    if run.objective != "link-prediction" or run.shards.hard_neg_fraction:
        what = f"--objective {run.objective}" if run.objective != "link-prediction" else "--hard-neg-fraction"
        raise FlagError(
            f"{what}: 2-hop training negatives are not drawn on a typed graph yet ({where} trains on corruptions of "
            "head or tail); drop it"
        )
    return [KG]


def relation_degrees(dataset, split: str) -> tuple[np.ndarray, np.ndarray, int]:
    """(sorted keys r * N + node, their counts as heads, as tails) of the triples on which `split` is scored:
    the training triples, and valid's too for test when the dataset has a test graph (a temporal split)."""
    rel = dataset.relations
    triples = rel.triples("train", dataset.splits["train"].pos)
    if split == "test" and dataset.test_graph is not None:
        triples = np.concatenate([triples, rel.triples("valid", dataset.splits["valid"].pos)])
    n = dataset.num_nodes
    heads, tails = triples[:, 1] * n + triples[:, 0], triples[:, 1] * n + triples[:, 2]
    return np.unique(heads, return_counts=True), np.unique(tails, return_counts=True), n


def _lookup(table: tuple[np.ndarray, np.ndarray], keys: np.ndarray) -> np.ndarray:
    """Counts of `keys` in (sorted keys, counts); 0 for a key absent."""
    known, counts = table
    if not len(known):
        return np.zeros(keys.shape, dtype=np.float64)
    at = np.searchsorted(known, keys).clip(max=len(known) - 1)
    return np.where(known[at] == keys, counts[at], 0).astype(np.float64)


def popularity(dataset, split: str, pairs: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """out_r(h) + in_r(t) of every [head, tail] pair of `pairs` (..., 2) with relations `rel` (its leading
    shape), float64 (module docstring)."""
    out_deg, in_deg, n = relation_degrees(dataset, split)
    return _lookup(out_deg, rel * n + pairs[..., 0]) + _lookup(in_deg, rel * n + pairs[..., 1])


def typed_scores(dataset, split: str, names=TYPED_HEURISTICS) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{heuristic: (positives' scores (P,), corruptions' scores (P, K), -inf where a row is padded)} of `split`'s
    triples, each scored on the graph `split` is scored on."""
    data = dataset.splits[split]
    pos, neg = data.pos, data.negatives(KG)
    real = neg[..., 0] >= 0
    rel = dataset.relations.pos[split]
    flat = np.concatenate([pos, neg[real]])
    uniq, inverse = unique_pairs(flat)
    graph = dataset.graph_for(split)
    out = {}
    for name in names:
        if name == POPULARITY:
            scores = popularity(
                dataset, split, flat, np.concatenate([rel, np.broadcast_to(rel[:, None], real.shape)[real]])
            )
        else:
            scores = ranking_scores(name, graph, uniq)[inverse]
        rows = np.full(real.shape, -np.inf)
        rows[real] = scores[len(pos) :]
        out[name] = (scores[: len(pos)].astype(np.float64), rows)
    return out


def row_label(name: str) -> str:
    return LABELS.get(name) or heuristic_label(name)


def typed_heuristic_rows(dataset, scores: dict, split_name: str | None) -> tuple[list[dict], list[dict]]:
    """The heuristics' table rows (std 0: deterministic) and their per-relation rows (typed_report), from
    typed_scores of the test split."""
    rows, per_relation = [], []
    names, rel = dataset.relations.names, dataset.relations.pos["test"]
    for name, (pos, neg) in scores.items():
        metrics = evaluate(KG, pos, neg)
        percent = {m: (100.0 * metrics[m], 0.0) for m in METRICS if m in metrics}
        label = row_label(name)
        rows.append(TableRow(dataset.name, KG, label, [0], percent, split=split_name, own_graph=True).to_dict())
        per_relation.append({"model": label, "seeds": [0], "test": relation_metrics(pos, neg, rel, names)})
    return rows, per_relation


def typed_notes(dataset) -> list[str]:
    """What the report's typed rows are, under its table."""
    k = dataset.splits["test"].negatives(KG).shape[1]
    ends = "head and tail" if 0 in dataset.relations.sides else "tail (the relation's kind)"
    return [
        f"protocol kg: each test triple against up to {k} filtered corruptions of its {ends} (a short row is "
        "padded; padding never counts), the same for PENCIL and every heuristic; per relation in the second table",
        "CN / AA / RA: on the graph's triples with relations ignored (undirected); popularity (per relation): a "
        "corruption ranked by the degree of the end it replaced under the triple's relation",
    ]
