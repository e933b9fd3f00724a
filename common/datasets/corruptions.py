"""Filtered corruptions of typed triples: the negatives of knowledge-graph evaluation.

A query (head, relation, tail) is corrupted on each side: its tail replaced by another entity (head side kept), and
its head replaced (tail kept). In the filtered setting a corruption that is itself a true triple (of train, valid or
test) is no negative, so it is never drawn; neither is the query. With node kinds (`allowed`), a relation's heads and
tails are drawn only among the kind it joins (a user-item graph: a user's corrupted item is another item).

Sampling is exact and vectorised: every candidate of a block of queries gets a uniform random key, excluded ones an
infinite key, and the `per_side` smallest keys are the draw (uniform, without repeats); a row with fewer candidates
is padded with -1. Known triples are int64 keys (anchor * R + relation) * N + entity, sorted once; the excluded
entities of a query are one searchsorted range of them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from common.datasets.base import DatasetError
from common.metrics import rank_against_own

# Candidate keys materialised per step (queries x candidates): bounds the temporary float32 matrix to ~32 MB.
_BLOCK_ELEMS = 1 << 23


def filtered_corruptions(
    queries, known, num_entities: int, per_side: int, seed: int, allowed: Mapping | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(heads, tails), each (Q, per_side) int64: per query, `per_side` corrupted heads and tails drawn uniformly
    without repeats among the candidates whose triple is neither known nor the query; -1 pads a short row.

    queries (Q, 3) and known (T, 3): [head, relation, tail] int64; known holds every true triple (filtered
    setting). allowed: relation -> (allowed heads, allowed tails) entity arrays (None: every entity; a relation
    missing from it: refused). Deterministic in seed for the same inputs."""
    q, kn = _triples(queries, "queries", num_entities), _triples(known, "known", num_entities)
    if per_side < 0:
        raise DatasetError(f"per_side={per_side}: the number of corruptions per side must be >= 0")
    num_rel = int(max(q[:, 1].max(initial=-1), kn[:, 1].max(initial=-1))) + 1
    heads = _corrupt_side(q, kn, num_entities, num_rel, per_side, seed, allowed, side=0)
    tails = _corrupt_side(q, kn, num_entities, num_rel, per_side, seed, allowed, side=2)
    return heads, tails


def known_partners(queries, known, num_entities: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, entities): every known triple that shares query `row`'s relation and its other end, `entities` its
    end on `side` (0: heads, 2: tails), the query's own entity included: the filter of full ranking."""
    q, kn = _triples(queries, "queries", num_entities), _triples(known, "known", num_entities)
    num_rel = int(max(q[:, 1].max(initial=-1), kn[:, 1].max(initial=-1))) + 1
    sorted_keys = np.sort(_keys(kn, num_entities, num_rel, side))
    rows, ents = _partners(q, sorted_keys, num_entities, num_rel, side)
    own = np.arange(len(q), dtype=np.int64)
    return np.concatenate([rows, own]), np.concatenate([ents, q[:, side]])


def filtered_ranks(scores_true, scores_all, filter_mask) -> np.ndarray:
    """Tie-averaged filtered rank of each true score among all entities' scores (Q, N), the entities where
    filter_mask (Q, N) is True (the other true triples and the query's own entity) left out -> (Q,) float64."""
    masked = np.where(np.asarray(filter_mask, dtype=bool), -np.inf, np.asarray(scores_all, dtype=np.float64))
    return rank_against_own(np.asarray(scores_true, dtype=np.float64), masked)


# ---------------------------------------------------------------------------- internals
def _triples(arr, what: str, num_entities: int) -> np.ndarray:
    a = np.asarray(arr, dtype=np.int64)
    if a.ndim != 2 or a.shape[1] != 3:
        raise DatasetError(f"{what}: expected (n, 3) [head, relation, tail] triples, got shape {a.shape}")
    if a.size and (a[:, [0, 2]].min() < 0 or a[:, [0, 2]].max() >= num_entities or a[:, 1].min() < 0):
        raise DatasetError(f"{what}: entity ids must lie in [0, {num_entities}) and relations be >= 0")
    return a


def _keys(triples: np.ndarray, n: int, num_rel: int, side: int) -> np.ndarray:
    """int64 key (anchor * R + relation) * N + entity, entity = the end on `side`, anchor = the other end."""
    if n * n * max(num_rel, 1) >= 2**63:
        raise DatasetError(f"{n} entities x {num_rel} relations: triple keys overflow int64")
    anchor = triples[:, 2 - side]
    return (anchor * num_rel + triples[:, 1]) * n + triples[:, side]


def _partners(q: np.ndarray, sorted_keys: np.ndarray, n: int, num_rel: int, side: int):
    """(rows, entities) of the known keys in each query's range (same anchor and relation), as flat arrays."""
    base = (q[:, 2 - side] * num_rel + q[:, 1]) * n
    lo = np.searchsorted(sorted_keys, base, side="left")
    hi = np.searchsorted(sorted_keys, base + n, side="left")
    counts = hi - lo
    rows = np.repeat(np.arange(len(q), dtype=np.int64), counts)
    # position of each element inside its range: a global arange less its row's start offset
    offsets = np.arange(counts.sum(), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    return rows, sorted_keys[np.repeat(lo, counts) + offsets] - np.repeat(base, counts)


def _corrupt_side(q, kn, n, num_rel, per_side, seed, allowed, side) -> np.ndarray:
    out = np.full((len(q), per_side), -1, dtype=np.int64)
    if per_side == 0 or len(q) == 0:
        return out
    sorted_keys = np.sort(_keys(kn, n, num_rel, side))
    rng = np.random.default_rng([seed, side])
    for rel in np.unique(q[:, 1]) if allowed is not None else [None]:
        idx = np.flatnonzero(q[:, 1] == rel) if rel is not None else np.arange(len(q))
        cands = _candidates(allowed, rel, side, n)
        step = max(1, _BLOCK_ELEMS // max(1, len(cands)))
        for s in range(0, len(idx), step):
            rows = idx[s : s + step]
            out[rows] = _draw_block(q[rows], cands, sorted_keys, n, num_rel, per_side, side, rng)
    return out


def _candidates(allowed, rel, side: int, n: int) -> np.ndarray:
    if allowed is None:
        return np.arange(n, dtype=np.int64)
    if int(rel) not in allowed:
        raise DatasetError(f"allowed: relation {int(rel)} has no (heads, tails) entry; give every queried relation")
    c = np.unique(np.asarray(allowed[int(rel)][0 if side == 0 else 1], dtype=np.int64))
    if c.size and (c[0] < 0 or c[-1] >= n):
        raise DatasetError(f"allowed: relation {int(rel)} lists entities outside [0, {n})")
    return c


def _draw_block(qb, cands, sorted_keys, n, num_rel, per_side, side, rng) -> np.ndarray:
    """The per_side smallest uniform keys of each row's non-excluded candidates (sorted by key), -1 padded."""
    res = np.full((len(qb), per_side), -1, dtype=np.int64)
    if len(cands) == 0:
        return res
    keys = rng.random((len(qb), len(cands)), dtype=np.float32)
    rows, ents = _partners(qb, sorted_keys, n, num_rel, side)
    rows = np.concatenate([rows, np.arange(len(qb), dtype=np.int64)])
    ents = np.concatenate([ents, qb[:, side]])  # the query itself, known or not
    pos = np.minimum(np.searchsorted(cands, ents), len(cands) - 1)
    hit = cands[pos] == ents  # excluded entities that are candidates at all
    keys[rows[hit], pos[hit]] = np.inf
    k = min(per_side, len(cands))
    pick = np.argpartition(keys, k - 1, axis=1)[:, :k] if k < len(cands) else np.tile(np.arange(k), (len(qb), 1))
    picked = np.take_along_axis(keys, pick, axis=1)
    order = np.argsort(picked, axis=1, kind="stable")
    pick, picked = np.take_along_axis(pick, order, axis=1), np.take_along_axis(picked, order, axis=1)
    res[:, :k] = np.where(np.isfinite(picked), cands[pick], -1)
    return res
