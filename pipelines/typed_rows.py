"""`pencil run` on a typed graph (a knowledge graph, an edge list with --relation, a user-item file): which
protocol it ranks under, what stays refused, and the heuristics' rows on the SAME corruptions the model ranks.

Every test triple is ranked against its own filtered corruptions of head and tail (protocol "kg",
common/datasets/kg.py; a (-1, -1) pair pads a short row and scores -inf: never above nor tied with a positive).
The rows beside PENCIL are common/heuristics_typed.py's: CN / AA / RA and L3 with relations ignored, and the
per-relation popularity (a user-item file's item popularity), and on a temporal split the recent popularity (each
edge weighted by its recency).
"""

from __future__ import annotations

import logging

from common.datasets.kg import KG
from common.flags import FlagError
from common.heuristics import label as heuristic_label
from common.heuristics_temporal import RECENCY_FRACTIONS
from common.heuristics_typed import L3, POPULARITY, RECENT, recency_choice
from common.metrics import evaluate, relation_metrics
from pipelines.core.results import METRICS, TableRow
from pipelines.core.run_config import RunConfig

log = logging.getLogger("pipelines.run")
LABELS = {POPULARITY: "popularity (per relation)", RECENT: "recent popularity", L3: "L3 (walks of length 3)"}


def typed_protocols(run: RunConfig, dataset) -> list[str]:
    """["kg"]: a typed graph's only ranking (its default --protocol original and `both` mean it); what does not fit
    a typed graph yet is refused in one line before any work."""
    where = f"--dataset {run.source.dataset}"
    if run.protocol not in ("original", "both"):
        raise FlagError(
            f"--protocol {run.protocol}: {where} is a typed graph, ranked under its own protocol kg (each triple "
            "against its filtered corruptions); drop --protocol"
        )
    if run.objective != "link-prediction":
        raise FlagError(
            f"--objective {run.objective}: its training negatives are not drawn on a typed graph yet ({where} trains "
            "on corruptions of head or tail; --hard-neg-fraction sets how many are near the true end); drop it"
        )
    return [KG]


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
        "CN / AA / RA and L3 (walks of length 3, the users who chose what a user chose choosing the item): on the "
        "graph's triples with relations ignored (undirected); popularity (per relation): a corruption ranked by the "
        "degree of the end it replaced under the triple's relation",
        "the search's blend (--preset auto), beside the model alone: + popularity prior, the logit plus w times "
        "log1p of each end's popularity under the relation (or + recent popularity prior, of its recent "
        "popularity; + l3 prior, of the walks of length 3), the prior, w (and the runner-up) chosen on "
        "validation; + prior (none chosen) where validation kept the model alone",
    ] + ([recency_note(dataset)] if dataset.recency is not None else [])


def recency_note(dataset) -> str:
    frac = RECENCY_FRACTIONS[recency_choice(dataset)]
    return (
        "recent popularity: a corruption ranked by the recency-weighted degree of the end it replaced, each edge "
        f"before the split's boundary weighted exp(-age / tau), tau = 1/{round(1 / frac)} of the history's span "
        f"(of {', '.join(f'1/{round(1 / f)}' for f in RECENCY_FRACTIONS)}: the best on validation)"
    )
