"""Which links get sampled: training views and evaluation sets with their ranking queries.

Training (DESIGN.md §3): positives are the train edges (self-loops dropped: the training graph has
none), optionally a seeded `percent` subset per view; negatives are uniform node pairs that are
neither self-loops nor training edges, `neg_ratio` per positive; each view is an independent draw,
shuffled so every shard mixes positives and negatives.

Evaluation (DESIGN.md §5): a candidate list plus queries (pos_cid, neg_cid) that index into it.
  shared negatives (Q, 2)          candidates = positives ++ negatives; neg_cid (Q,)
  per-positive negatives (P, K, 2) every distinct pair once (HeaRT canonicalises to (min, max));
                                   neg_cid (P, K) via the inverse index
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from common.graph import Graph
from common.unique import unique_inverse

log = logging.getLogger(__name__)


@dataclass
class Candidates:
    """One candidate list: row i has cid i. `pos_cid`/`neg_cid` only for evaluation sets."""

    src: np.ndarray  # (C,) int64
    dst: np.ndarray  # (C,) int64
    label: np.ndarray  # (C,) float32
    pos_cid: np.ndarray | None = None
    neg_cid: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.src.shape[0])

    @property
    def kind(self) -> str | None:
        if self.neg_cid is None:
            return None
        return "shared" if self.neg_cid.ndim == 1 else "per_positive"


def training_positives(train_pos: np.ndarray) -> np.ndarray:
    """Train edges as given (direction and multiplicity kept), minus self-loops."""
    pos = np.asarray(train_pos, dtype=np.int64).reshape(-1, 2)
    loops = pos[:, 0] == pos[:, 1]
    if not loops.any():
        return pos  # no copy of a 30 M-edge array for nothing
    log.debug("dropping %d self-loop training positives (the training graph has no self-loops)", int(loops.sum()))
    return pos[~loops]


def sample_negatives(graph: Graph, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` uniform node pairs that are neither self-loops nor edges of `graph` (rejection)."""
    n = graph.num_nodes
    max_pairs = n * (n - 1) - 2 * graph.num_edges  # ordered non-edge pairs
    if count and max_pairs <= 0:
        raise ValueError(f"cannot draw negatives: the graph with {n} nodes has no non-edges")
    out = np.empty((0, 2), dtype=np.int64)
    while len(out) < count:
        # Oversample by the expected acceptance rate so one or two rounds usually suffice.
        need = count - len(out)
        accept = max(max_pairs / (n * n), 1e-3)
        draw = rng.integers(0, n, size=(int(need / accept * 1.1) + 16, 2), dtype=np.int64)
        ok = (draw[:, 0] != draw[:, 1]) & ~graph.has_edge(draw[:, 0], draw[:, 1])
        out = np.concatenate([out, draw[ok][:need]])
    return out


# Below this many positives per view a training view is too small to learn from: say so.
MIN_VIEW_POSITIVES = 100
# Drawing more than this fraction of all distinct non-edges repeats many of them: say so.
REPEAT_WARN_FRACTION = 0.1


def distinct_non_edges(graph: Graph) -> int:
    """Unordered node pairs {u, v}, u != v, that are not edges of `graph` (what negatives are drawn from)."""
    n = graph.num_nodes
    return max(0, n * (n - 1) // 2 - graph.num_edges)


def check_view_size(num_pos: int, percent: float, neg_ratio: int, graph: Graph) -> None:
    """Refuse views whose negatives cannot be drawn without repetition; warn on degenerate sizes.

    Called before anything is sampled or written, with the numbers the user needs to pick better flags."""
    from preprocess.config import ConfigError
    if num_pos == 0:
        raise ConfigError("--splits train: the dataset has no training edges (self-loops dropped); "
                          "use a graph with at least one edge or drop train from --splits")
    keep = max(1, int(round(num_pos * percent / 100))) if percent < 100 else num_pos
    count, available = keep * neg_ratio, distinct_non_edges(graph)
    if count and available == 0:
        raise ConfigError(f"--neg-ratio {neg_ratio}: the training graph ({graph.num_nodes} nodes, {graph.num_edges} "
                          "edges) has no non-edges, so no negatives can be drawn; use a larger graph")
    if count > available:
        top = available // keep
        raise ConfigError(f"--neg-ratio {neg_ratio}: {count:,} negatives per view but the graph has only "
                          f"{available:,} distinct non-edges, so most would repeat; use --neg-ratio <= {max(top, 1)}"
                          + ("" if top else " with a lower --percent"))
    if count > REPEAT_WARN_FRACTION * available:
        distinct = available * (1 - np.exp(-count / available))
        log.warning("--neg-ratio %d: %s negatives per view from %s distinct non-edges: about %.0f%% are repeats",
                    neg_ratio, f"{count:,}", f"{available:,}", 100 * (1 - distinct / count))
    if neg_ratio == 0:
        log.warning("--neg-ratio 0: training views hold only positives (every label is 1); "
                    "a link classifier needs negatives, use --neg-ratio >= 1")
    if keep < MIN_VIEW_POSITIVES:
        log.warning("--percent %g: %d training positive(s) per view (of %d); a view this small is "
                    "barely a training set", percent, keep, num_pos)


def training_view(train_pos: np.ndarray, graph: Graph, percent: float, neg_ratio: int,
                  rng: np.random.Generator) -> Candidates:
    """One view: (a seeded subset of) the positives plus fresh negatives, in a seeded random order."""
    pos = training_positives(train_pos)
    if percent < 100:
        keep = max(1, int(round(len(pos) * percent / 100)))
        pos = pos[np.sort(rng.choice(len(pos), size=keep, replace=False))]
    neg = sample_negatives(graph, len(pos) * neg_ratio, rng)
    log.info("training view: %s positives, %s negatives", f"{len(pos):,}", f"{len(neg):,}")
    pairs = np.concatenate([pos, neg])
    label = np.concatenate([np.ones(len(pos), np.float32), np.zeros(len(neg), np.float32)])
    order = rng.permutation(len(pairs))
    return Candidates(src=pairs[order, 0], dst=pairs[order, 1], label=label[order])


def eval_candidates(pos: np.ndarray, neg: np.ndarray, canonical: bool) -> Candidates:
    """Candidates and queries of one (split, protocol).

    `neg` of shape (Q, 2) is shared by all positives; (P, K, 2) holds K negatives per positive,
    deduplicated so a pair that several queries share is sampled and scored once. With `canonical`
    (HeaRT) the pair (v, u) is the same candidate as (u, v)."""
    pos = np.asarray(pos, dtype=np.int64).reshape(-1, 2)
    neg = np.asarray(neg, dtype=np.int64)
    p = len(pos)
    if neg.ndim == 2:
        pairs = np.concatenate([pos, neg.reshape(-1, 2)])
        neg_cid = p + np.arange(len(neg), dtype=np.int64)
    elif neg.ndim == 3 and neg.shape[0] == p and neg.shape[2] == 2:
        flat = neg.reshape(-1, 2)
        if canonical:
            flat = np.sort(flat, axis=1)
        # Row-unique via one int64 key per pair (np.unique(axis=0) sorts a structured view and hashes
        # nothing, but is several times slower; common/unique.py). Ascending keys = lexicographic rows.
        n = int(flat.max()) + 1 if flat.size else 1
        keys, inverse = unique_inverse(flat[:, 0] * n + flat[:, 1])
        uniq = np.stack([keys // n, keys % n], axis=1)
        pairs = np.concatenate([pos, uniq])
        neg_cid = p + inverse.reshape(p, neg.shape[1]).astype(np.int64)
    else:
        raise ValueError(f"negatives must have shape (Q, 2) or ({p}, K, 2), got {neg.shape}")
    label = np.zeros(len(pairs), dtype=np.float32)
    label[:p] = 1.0
    return Candidates(src=pairs[:, 0].copy(), dst=pairs[:, 1].copy(), label=label,
                      pos_cid=np.arange(p, dtype=np.int64), neg_cid=neg_cid)


def protocol_candidates(dataset, split: str, protocol: str) -> Candidates:
    """Eval candidates of `split` under `protocol` (original, heart or ogb)."""
    s = dataset.splits[split]
    return eval_candidates(s.positives(protocol), s.negatives(protocol), canonical=(protocol in ("heart", "hard")))
