"""A run's validation scores, every epoch, as positive and negative score matrices; and the per-positive values
(reciprocal rank, AUC share) every choice of the study is made on.

The original protocol ranks each validation positive against the split's shared random negatives, so one epoch
is pos (P,) and neg (Q,) scores; a run is pos (E, P) and neg (E, Q), cached next to the run (values.npz).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from common.eval_scores import epoch_scores_path, read_scores
from common.manifest import read_manifest
from common.manifest_record import Manifest
from common.metrics import rank_against_shared
from common.shards import load_queries
from trainer.evaluate import eval_entry


def queries(manifest: Manifest) -> tuple[np.ndarray, np.ndarray]:
    entry = eval_entry(manifest, "valid", "original")
    return load_queries(manifest.queries_path(entry), sha256=manifest.queries_sha256(entry))


def run_matrices(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """(pos (E, P), neg (E, Q)) float64 validation scores of every evaluated epoch of a run."""
    cache = run_dir / "values.npz"
    if cache.exists():
        with np.load(cache) as z:
            return z["pos"], z["neg"]
    manifest = read_manifest(json.loads((run_dir / "config.json").read_text())["data"]["shards"])
    pos_cid, neg_cid = queries(manifest)
    pos, neg = [], []
    files = (run_dir / "scores" / "epochs").glob("valid-original-e*.npz")
    epochs = sorted(int(p.stem.rsplit("-e", 1)[1]) for p in files)
    for e in epochs:
        cid, score, _ = read_scores(epoch_scores_path(run_dir, "valid", "original", e))
        table = np.full(int(max(cid.max(), pos_cid.max(), neg_cid.max())) + 1, np.nan)
        table[cid] = score
        pos.append(table[pos_cid])
        neg.append(table[neg_cid])
    pos, neg = np.array(pos), np.array(neg)
    if np.isnan(pos).any() or np.isnan(neg).any():
        raise ValueError(f"{run_dir}: some validation candidates were not scored")
    np.savez(cache, pos=pos, neg=neg)
    return pos, neg


def per_positive(pos: np.ndarray, neg: np.ndarray) -> dict[str, np.ndarray]:
    """{"mrr": RR, "auc": AUC share} per positive, shapes as pos; pos (..., P) against neg (..., Q) shared."""
    pos2, neg2 = pos.reshape(-1, pos.shape[-1]), neg.reshape(-1, neg.shape[-1])
    rank = np.array([rank_against_shared(p, n) for p, n in zip(pos2, neg2)]).reshape(pos.shape)
    return {"mrr": 1.0 / rank, "auc": 1.0 - (rank - 1.0) / neg.shape[-1]}
