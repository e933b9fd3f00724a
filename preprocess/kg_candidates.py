"""Candidates of a typed graph (knowledge graph, common/datasets/kg.py): each link is a triple, its relation carried
beside (src, dst) in `Candidates.rel` and in every shard block (format version 4).

Training: the training triples, plus `neg_ratio` negatives per positive, each a positive with its head or its tail
(a fair coin) replaced by a uniform random entity, the relation kept, never a self-loop nor a training triple
(filtered: a corruption that is true is no negative). Redrawn per view from the view's seeded rng.

With `hard_neg_fraction` (--hard-neg-fraction), that share of the corruptions is near: the new end is two hops
from the end it replaces in the training graph (a walk true end -> x -> w over the union of the training
triples; x is often the kept end, the positive being a training link), so the model also learns to tell a true
end from the nearby entities a full ranking's pool (PPR, common/retrieval.py) is made of, where uniform
corruptions alone teach it that a true end is near. Two hops keep a bipartite graph's kind. Drawn after the
uniform ones, so a fraction of 0 draws what every older view drew.

Evaluation ("kg" protocol): every positive against its own corruptions (P, K, 2), all with the positive's relation;
a (-1, -1) pair pads a short row and gets neg_cid -1 (never sampled nor ranked). Each distinct triple is sampled
and scored once.
"""

from __future__ import annotations

import logging

import numpy as np

from common.unique import unique_inverse
from preprocess.candidates import Candidates, two_hop_walks
from preprocess.config import CandidateConfig

log = logging.getLogger(__name__)


def triple_keys(t: np.ndarray, n: int, r: int) -> np.ndarray:
    """One int64 key per [head, relation, tail] row, ascending in (head, relation, tail)."""
    return (t[:, 0] * r + t[:, 1]) * n + t[:, 2]


def corrupt_triples(
    pos: np.ndarray, count: int, n: int, r: int, known: np.ndarray, rng, ends=None, sides=(0, 2)
) -> np.ndarray:
    """(count, 3) corruptions of random rows of `pos` [head, relation, tail]: head or tail replaced by a uniform
    entity, never a self-loop nor a key of `known` (sorted triple keys). Rejection, in rounds. With node kinds
    (`ends`, Relations.ends) the replaced end is one of `sides`, drawn among its relation's allowed ends."""
    out, have = np.zeros((count, 3), dtype=np.int64), 0
    for _ in range(1000):
        if have == count:
            return out
        need = count - have
        draw = pos[rng.integers(0, len(pos), size=2 * need + 16)].copy()
        if ends is None:
            side = np.where(rng.random(len(draw)) < 0.5, 0, 2)
            draw[np.arange(len(draw)), side] = rng.integers(0, n, size=len(draw))
        else:
            _replace_within_kinds(draw, ends, sides, rng)
        keys = triple_keys(draw, n, r)
        at = np.searchsorted(known, keys).clip(max=max(len(known) - 1, 0))
        ok = (draw[:, 0] != draw[:, 2]) & ~(known[at] == keys if len(known) else np.zeros(len(keys), bool))
        take = draw[ok][:need]
        out[have : have + len(take)] = take
        have += len(take)
    raise ValueError(f"cannot draw {count:,} training corruptions: almost every corruption is a true triple")


# Rejection rounds of near_corruptions before the rest are uniform corruptions (as preprocess.candidates.HARD_ROUNDS)
NEAR_ROUNDS = 16


def _two_hop_ends(graph, start: np.ndarray, rng) -> np.ndarray:
    """One walk start -> x -> w per row (preprocess.candidates.two_hop_walks); -1 where it could not take a step."""
    out = np.full(len(start), -1, dtype=np.int64)
    rows, w = two_hop_walks(graph, start, rng)
    out[rows] = w
    return out


def near_corruptions(
    pos: np.ndarray, count: int, graph, n: int, r: int, known: np.ndarray, rng, ends=None, sides=(0, 2)
) -> np.ndarray:
    """(count, 3) corruptions of random rows of `pos` whose new end (on one of `sides`) is two hops from the end it
    replaces in `graph`: never a self-loop, a key of `known`, nor (with node kinds, `ends`) outside the relation's kind.
    After NEAR_ROUNDS rejection rounds, or a round that accepts nothing, the rest are uniform (corrupt_triples)
    and one warning says how many."""
    out, have, rounds = np.zeros((count, 3), dtype=np.int64), 0, 0
    while have < count and rounds < NEAR_ROUNDS:
        need, rounds = count - have, rounds + 1
        draw = pos[rng.integers(0, len(pos), size=2 * need + 16)].copy()
        side = np.asarray(sides)[rng.integers(0, len(sides), size=len(draw))]
        rows = np.arange(len(draw))
        draw[rows, side] = _two_hop_ends(graph, draw[rows, side], rng)  # an entity near the true end
        ok = (draw[rows, side] >= 0) & (draw[:, 0] != draw[:, 2])
        if ends is not None:  # the new end must be of its relation's kind on that side
            for rel in np.unique(draw[ok, 1]):
                for s in sides:
                    at = np.flatnonzero(ok & (draw[:, 1] == rel) & (side == s))
                    ok[at] = np.isin(draw[at, s], np.asarray(ends[int(rel)][0 if s == 0 else 1]))
        keys = triple_keys(np.where(ok[:, None], draw, 0), n, r)
        at = np.searchsorted(known, keys).clip(max=max(len(known) - 1, 0))
        ok &= ~(known[at] == keys) if len(known) else True
        take = draw[ok][:need]
        if not len(take):
            break
        out[have : have + len(take)] = take
        have += len(take)
    if have < count:
        log.warning(
            "near corruptions: %s of %s are two hops from the end they replace (%d round(s)); the other %s are uniform",
            f"{have:,}",
            f"{count:,}",
            rounds,
            f"{count - have:,}",
        )
        out[have:] = corrupt_triples(pos, count - have, n, r, known, rng, ends, sides)
    return out


def _replace_within_kinds(draw: np.ndarray, ends: dict, sides: tuple, rng) -> None:
    """Replace one of `sides` of each row by a uniform entity among its relation's allowed ends (in place)."""
    side = np.asarray(sides)[rng.integers(0, len(sides), size=len(draw))]
    for rel in np.unique(draw[:, 1]):
        for s in sides:
            rows = np.flatnonzero((draw[:, 1] == rel) & (side == s))
            pool = np.asarray(ends[int(rel)][0 if s == 0 else 1], dtype=np.int64)
            draw[rows, s] = pool[rng.integers(0, len(pool), size=len(rows))]


def typed_training_view(dataset, cand: CandidateConfig, rng: np.random.Generator) -> Candidates:
    """One view of a typed graph (module docstring): (a seeded subset of) the training triples and their
    corruptions, shuffled."""
    rel, n = dataset.relations, dataset.num_nodes
    pos = rel.triples("train", dataset.splits["train"].pos)
    pos = pos[pos[:, 0] != pos[:, 2]]  # as training_positives: the training graph has no self-loops
    known = np.sort(triple_keys(pos, n, rel.count))
    if cand.percent < 100:
        keep = max(1, int(round(len(pos) * cand.percent / 100)))
        pos = pos[np.sort(rng.choice(len(pos), size=keep, replace=False))]
    count = len(pos) * cand.neg_ratio
    near = int(round(count * cand.hard_neg_fraction))
    neg = corrupt_triples(pos, count - near, n, rel.count, known, rng, rel.ends, rel.sides)
    if near:  # after the uniform draw, so a fraction of 0 leaves the rng stream (and the bytes) unchanged
        neg = np.concatenate(
            [near_corruptions(pos, near, dataset.graph, n, rel.count, known, rng, rel.ends, rel.sides), neg]
        )
    log.info(
        "training view: %s triples, %s corruptions of head or tail (%s of them near the true end)",
        f"{len(pos):,}",
        f"{len(neg):,}",
        f"{near:,}",
    )
    every = np.concatenate([pos, neg])
    label = np.concatenate([np.ones(len(pos), np.float32), np.zeros(len(neg), np.float32)])
    order = rng.permutation(len(every))
    every, label = every[order], label[order]
    return Candidates(src=every[:, 0].copy(), dst=every[:, 2].copy(), label=label, rel=every[:, 1].copy())


def typed_eval_candidates(pos: np.ndarray, neg: np.ndarray, rel: np.ndarray, num_rel: int) -> Candidates:
    """Candidates and queries of one typed eval set: positives (P, 2) of relations rel (P,), negatives (P, K, 2)
    with the positive's relation, (-1, -1) padding -> neg_cid -1. Distinct triples once."""
    pos, neg, rel = (np.asarray(a, dtype=np.int64) for a in (pos, neg, rel))
    p, k = neg.shape[0], neg.shape[1]
    if neg.shape != (len(pos), k, 2) or rel.shape != (len(pos),):
        raise ValueError(f"typed negatives must be ({len(pos)}, K, 2) with ({len(pos)},) relations, got {neg.shape}")
    flat = neg.reshape(-1, 2)
    real = flat[:, 0] >= 0
    trip = np.stack([flat[:, 0], np.repeat(rel, k), flat[:, 1]], axis=1)[real]
    n = int(max(pos.max(initial=0), flat.max(initial=0))) + 1
    keys, inverse = unique_inverse(triple_keys(trip, n, num_rel))
    uniq = np.stack([keys // (num_rel * n), (keys // n) % num_rel, keys % n], axis=1)
    neg_cid = np.full(p * k, -1, dtype=np.int64)
    neg_cid[real] = p + inverse.astype(np.int64)
    label = np.zeros(p + len(uniq), dtype=np.float32)
    label[:p] = 1.0
    return Candidates(
        src=np.concatenate([pos[:, 0], uniq[:, 0]]),
        dst=np.concatenate([pos[:, 1], uniq[:, 2]]),
        label=label,
        pos_cid=np.arange(p, dtype=np.int64),
        neg_cid=neg_cid.reshape(p, k),
        rel=np.concatenate([rel, uniq[:, 1]]),
    )


def typed_protocol_candidates(dataset, split: str) -> Candidates:
    """The "kg" eval set of `split` (common/datasets/kg.py)."""
    s, rel = dataset.splits[split], dataset.relations
    return typed_eval_candidates(s.pos, s.negatives("kg"), rel.pos[split], rel.count)
