"""Regression labels for pairwise heuristic estimation (`python -m preprocess --targets NAME`).

The paper's heuristic-estimation task (appendix "Pairwise Heuristic Estimation") trains PENCIL to
regress a pairwise heuristic of the candidate link, computed on the FULL graph (every split's
positives), while the model sees only the link's sampled subgraph on the training graph. With
`--targets NAME` the candidate sets are the usual ones (training views with their negatives, eval
sets with the protocol's negatives) and each link's `label` becomes its normalised target
(common.heuristic_targets). The normalisation statistics are fitted once on the training candidates of
every view and applied unchanged to every set, so the evaluation targets never shape their own scale.

The manifest then records `targets` (name and statistics), and every eval set's selection metric
becomes `rmse`: the trainer trains with MSE and selects the lowest validation RMSE.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from common.heuristic_targets import fit, full_graph, raw_scores, transform
from preprocess.config import ConfigError

REGRESSION_METRIC = "rmse"


def label_with_targets(name: str, dataset, sets: list) -> tuple[list, dict]:
    """The candidate sets with their labels replaced by normalised `name` targets, and the manifest's
    `targets` entry {name, stats}."""
    train = [i for i, cs in enumerate(sets) if cs.split == "train"]
    if not train:
        raise ConfigError(
            "--targets: the target statistics are fitted on the training candidates; include train in --splits"
        )
    full = full_graph(
        dataset.num_nodes, *(dataset.splits[s].pos for s in ("train", "valid", "test") if s in dataset.splits)
    )
    raw = [raw_scores(name, full, np.stack([cs.cands.src, cs.cands.dst], axis=1)) for cs in sets]
    stats = fit(name, np.concatenate([raw[i] for i in train]), full if name == "spd" else None)
    labelled = [replace(cs, cands=replace(cs.cands, label=transform(stats, r))) for cs, r in zip(sets, raw)]
    return labelled, {"name": name, "stats": stats.params}


def regression_eval_info(eval_info: dict) -> dict:
    """Eval entries of a regression set: ranking queries stay (they are harmless), selection is RMSE."""
    return {key: {**entry, "metric": REGRESSION_METRIC} for key, entry in eval_info.items()}
