"""Evaluation: score every candidate of an eval set once, gather, rank with common.metrics.

Each rank scores its share of the eval shards (loaders.eval_loader splits them like the training set),
then cid and score tensors are all-gathered so every rank holds the full table; the ranking
structure (queries.npz: pos_cid, neg_cid) maps cids to positives and their negatives, and
`common.metrics.evaluate(protocol, pos, neg)` computes MRR / Hits@K and AUC / AP (positives against
the pooled negatives). Every eval line of metrics.jsonl carries them all, for valid and test, and the
summary's test metrics are those at the best validation epoch. On a directed set the split's "reverse" set
(each edge against its own reverse, common/datasets/directed.py) is scored beside the protocol's, and its
`reverse_acc` joins the protocol's metrics. Every rank computes the same
metrics, so decisions that depend on them (best checkpoint) agree without another collective.
The forward runs on the unwrapped module: DDP's forward may broadcast buffers, a collective that
would hang when ranks hold different numbers of eval batches. Scores come from the one scoring engine
(trainer/scoring.py), in fp32, never under bf16 autocast: bf16 logits keep ~3 significant digits, so a
positive would tie with some of its 500 hard negatives (HeaRT) and the rank would depend on rounding.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from common.manifest_record import Manifest
from common.metrics import REVERSE_KEY, regression_metrics, relation_metrics
from common.metrics import evaluate as protocol_metrics
from common.shards import ShardError, load_queries
from trainer import distributed
from trainer.data.loaders import LoaderSettings, eval_loader
from trainer.scoring import forward_batches, fp32_inference, synchronize

log = logging.getLogger(__name__)
REVERSE = "reverse"  # a directed set's protocol of each edge against its reverse (common/datasets/directed.py)


def eval_entry(manifest: Manifest, split: str, protocol: str) -> dict:
    key = f"{split}/{protocol}"
    evals = manifest.eval
    if key not in evals:
        have = ", ".join(sorted(evals)) or "none"
        raise ShardError(
            f"{manifest.root}: no eval set '{key}' in the manifest (has: {have}); "
            "pick another --protocol / --eval-splits or rebuild the shards with it"
        )
    return evals[key]


def selection_metric(manifest: Manifest, protocol: str) -> str:
    """The dataset's model-selection metric (e.g. mrr, hits@50), recorded by preprocess."""
    return eval_entry(manifest, "valid", protocol).get("metric", "mrr")


def scores_to_metrics(
    manifest: Manifest, split: str, protocol: str, cid: np.ndarray, score: np.ndarray, label: np.ndarray | None = None
) -> dict:
    """Look scores up by cid through the eval set's queries and compute the protocol's metrics; on a
    regression set (preprocess --targets) RMSE / MAE of every candidate's score against its label."""
    entry = eval_entry(manifest, split, protocol)
    if manifest.targets:
        if label is None or len(cid) != entry["candidates"]:
            raise ShardError(
                f"{manifest.root}: eval set {split}/{protocol}: {len(cid)} of {entry['candidates']} "
                "candidates scored; the shard set is incomplete, rebuild it"
            )
        return regression_metrics(score, label)
    pos_cid, neg_cid, pos_rel = load_queries(
        manifest.queries_path(entry),  # root may be a URL
        sha256=manifest.queries_sha256(entry),
        relations=True,
    )
    size = int(max(cid.max(initial=-1), pos_cid.max(initial=-1), neg_cid.max(initial=-1))) + 2
    table = np.full(size, np.nan, dtype=score.dtype if score.dtype.kind == "f" else np.float64)
    scored = np.zeros(size, dtype=bool)
    table[cid] = score
    scored[cid] = True
    # a typed set's padded corruption (neg_cid -1) reads the last slot: -inf, never above a positive (common.metrics)
    table[-1], scored[-1] = -np.inf, True
    missing = int((~scored[pos_cid]).sum() + (~scored[neg_cid]).sum())
    if missing:
        raise ShardError(
            f"{manifest.root}: eval set {split}/{protocol}: {missing} query entries point at "
            "candidates no shard holds; the shard set is incomplete, rebuild it"
        )
    pos, neg = table[pos_cid], table[protocol_negatives(entry, neg_cid)]
    metrics = protocol_metrics(protocol, pos, neg)
    if pos_rel is not None and manifest.relations:  # a typed set: MRR and Hits@1/3/10 per relation beside
        metrics.update(relation_metrics(pos, neg, pos_rel, manifest.relations))
    return metrics


def protocol_negatives(entry: dict, neg_cid: np.ndarray) -> np.ndarray:
    """The protocol's own negatives of an eval set's shared ones: all but a selection pool after them
    (preprocess --valid-pool, common/datasets/pool.py), which only the blend reads."""
    pool = entry.get("valid_pool")
    return neg_cid[: int(pool["negatives"])] if pool and neg_cid.ndim == 1 else neg_cid


def score_eval_set(model: torch.nn.Module, loader, device: torch.device) -> tuple[torch.Tensor, ...]:
    """(cid, score, label) of every candidate this rank's loader yields, through the scoring engine
    (trainer/scoring.py: fp32 forward, logits on the CPU)."""
    cids, scores, labels = [], [], []
    with fp32_inference(model):
        for batch, logits in forward_batches(model, loader, device):
            cids.append(batch.link_cid)  # one score per link (LRP-k pools its k copies)
            labels.append(batch.link_label)
            scores.append(logits)
    if not cids:
        return torch.zeros(0, dtype=torch.int64), torch.zeros(0), torch.zeros(0)
    synchronize(device)  # the non-blocking copies have landed
    return torch.cat(cids), torch.cat(scores), torch.cat(labels)


def evaluate_split(
    model: torch.nn.Module,
    manifest: Manifest,
    split: str,
    protocol: str,
    data_cfg,
    info: distributed.DistInfo,
    keep: dict | None = None,
) -> dict:
    """Metrics of one (split, protocol) eval set; every rank must call it (it all-gathers). With `keep`,
    the gathered (cid, score) arrays also go to keep[(split, protocol)] (trainer --save-scores)."""
    loader = eval_loader(manifest, split, protocol, LoaderSettings.for_rank(data_cfg, info))
    cid, score, label = (distributed.all_gather_cat(t, info) for t in score_eval_set(model, loader, info.device))
    if keep is not None:
        keep[(split, protocol)] = (cid.numpy(), score.numpy())
    metrics = scores_to_metrics(manifest, split, protocol, cid.numpy(), score.numpy(), label.numpy())
    if protocol != REVERSE and manifest.eval.get(f"{split}/{REVERSE}", {}).get("positives"):
        rev = evaluate_split(model, manifest, split, REVERSE, data_cfg, info, keep)
        metrics[REVERSE_KEY] = rev[REVERSE_KEY]  # beside MRR / AUC: the share ranked above its own reverse
    return metrics
