"""Which links get sampled: training views and evaluation sets with their ranking queries.

Training: positives are the train edges (self-loops dropped: the training graph has
none), optionally a seeded `percent` subset per view; `neg_ratio` negatives per positive, never a
self-loop nor a training edge. Up to half of them are the user's known non-links (--train-negatives),
when given. Of the rest, round(rest * hard_neg_fraction) are hard: 2-hop non-edges of
the training graph, reached by a random walk u -> x -> w from a random positive's endpoint u, so they
share at least the neighbour x with their pair and their endpoint degrees follow the positives'
(HeaRT-style: uniform pairs rarely share a neighbour, so a model trained on them alone learns
"common neighbours => link" and cannot separate positives from 2-hop non-edges). The rest are uniform
node pairs. The default fraction 0 draws uniform negatives only, bit for bit as before the option. A directed
view (--directed) also takes up to half its negatives as its positives turned round (REVERSE_NEG_SHARE).
Each view is an independent draw, shuffled so every shard mixes positives and negatives.

Evaluation: a candidate list plus queries (pos_cid, neg_cid) that index into it.
  shared negatives (Q, 2)          candidates = positives ++ negatives; neg_cid (Q,)
  per-positive negatives (P, K, 2) every distinct pair once (HeaRT canonicalises to (min, max));
                                   neg_cid (P, K) via the inverse index
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from common.graph import DiGraph, Graph
from common.unique import unique_inverse
from preprocess.config import CandidateConfig

log = logging.getLogger(__name__)


@dataclass
class Candidates:
    """One candidate list: row i has cid i. `pos_cid`/`neg_cid` only for evaluation sets."""

    src: np.ndarray  # (C,) int64
    dst: np.ndarray  # (C,) int64
    label: np.ndarray  # (C,) float32
    pos_cid: np.ndarray | None = None
    neg_cid: np.ndarray | None = None
    rel: np.ndarray | None = None  # (C,) int64 relation id of each link: a typed graph's (preprocess/kg_candidates.py)

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


def sample_negatives(graph: Graph, count: int, rng: np.random.Generator, nodes: np.ndarray | None = None) -> np.ndarray:
    """`count` uniform node pairs that are neither self-loops nor edges of `graph` (rejection); with `nodes`,
    pairs among those nodes only (a temporal split's training nodes: no node from the future). A DiGraph
    (--directed): ordered pairs u -> v that are no edge (v -> u may be one)."""
    n = graph.num_nodes if nodes is None else len(nodes)
    inside = graph.num_edges  # every edge of a temporal training graph joins two of its active nodes
    if nodes is not None:
        mask = np.zeros(graph.num_nodes, dtype=bool)
        mask[nodes] = True
        edges = graph.edge_array()
        inside = int(np.count_nonzero(mask[edges[:, 0]] & mask[edges[:, 1]]))
    per = 1 if isinstance(graph, DiGraph) else 2  # ordered pairs per edge
    max_pairs = n * (n - 1) - per * inside  # ordered non-edge pairs
    if count and max_pairs <= 0:
        raise ValueError(f"cannot draw negatives: the graph with {n} nodes has no non-edges")
    out = np.empty((0, 2), dtype=np.int64)
    while len(out) < count:
        # Oversample by the expected acceptance rate so one or two rounds usually suffice.
        need = count - len(out)
        accept = max(max_pairs / (n * n), 1e-3)
        draw = rng.integers(0, n, size=(int(need / accept * 1.1) + 16, 2), dtype=np.int64)
        if nodes is not None:
            draw = nodes[draw]
        ok = (draw[:, 0] != draw[:, 1]) & ~graph.has_edge(draw[:, 0], draw[:, 1])
        out = np.concatenate([out, draw[ok][:need]])
    return out


# Rejection rounds of sample_hard_negatives before the rest is filled uniformly; each round draws for
# what is missing at the last round's acceptance rate (floored, so one round's arrays stay a few times
# the count), so a graph with any reasonable share of 2-hop non-edges finishes in two or three.
HARD_ROUNDS = 16
HARD_MIN_ACCEPT = 0.2


def two_hop_walks(graph: Graph, start: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One walk u -> x -> w from each node of `start`: x a random neighbour of u, w a random neighbour of x (CSR
    row slices, no per-walk Python). Returns (rows, w): the rows of `start` whose walk could take both steps."""
    deg = graph.degree
    rows = np.flatnonzero(deg[start] > 0)
    u = start[rows]
    x = graph.indices[graph.indptr[u] + rng.integers(0, deg[u])].astype(np.int64)
    keep = deg[x] > 0  # always so undirected (x is u's neighbour); a DiGraph's x may have no out-edge
    rows, x = rows[keep], x[keep]
    return rows, graph.indices[graph.indptr[x] + rng.integers(0, deg[x])].astype(np.int64)


def _two_hop_walks(graph: Graph, pos: np.ndarray, m: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """`m` walks u -> x -> w (two_hop_walks), u a random endpoint of a random positive."""
    u = pos[rng.integers(0, len(pos), size=m), rng.integers(0, 2, size=m)]
    rows, w = two_hop_walks(graph, u, rng)
    return u[rows], w


def sample_hard_negatives(graph: Graph, pos: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` 2-hop non-edges (u, w) of `graph`, each oriented at random: w != u, not an edge, and sharing a
    neighbour with u, which is an endpoint of one of the positives `pos` (E, 2). Rejection rounds; when a
    round accepts nothing (no 2-hop non-edge is reachable, e.g. every component is a clique) or after
    HARD_ROUNDS, the rest are uniform non-edges (sample_negatives) and one warning gives the numbers.
    Draws nothing from `rng` when count is 0."""
    out = np.empty((0, 2), dtype=np.int64)
    pos = np.asarray(pos, dtype=np.int64).reshape(-1, 2)
    if count <= 0:
        return out
    accept, rounds, walks = 1.0, 0, 0
    while len(out) < count and rounds < HARD_ROUNDS and len(pos):
        need = count - len(out)
        u, w = _two_hop_walks(graph, pos, int(need / max(accept, HARD_MIN_ACCEPT) * 1.1) + 16, rng)
        flip = rng.integers(0, 2, size=len(u)).astype(bool)  # the walk's start is not always the source
        pairs = np.stack([np.where(flip, w, u), np.where(flip, u, w)], axis=1)
        ok = w != u  # checked as oriented: a DiGraph's edge may point the other way (an undirected one: the same)
        ok[ok] = ~graph.has_edge(pairs[ok, 0], pairs[ok, 1])
        pairs = pairs[ok]
        rounds, walks, accept = rounds + 1, walks + len(u), len(pairs) / max(len(u), 1)
        if not len(pairs):
            break
        out = np.concatenate([out, pairs[:need]])
    if len(out) < count:
        rest = count - len(out)
        log.warning(
            "hard negatives: only %s of %s drawn as 2-hop non-edges (%s walks in %d round(s), last acceptance "
            "%.1f%%); the other %s are uniform non-edges",
            f"{len(out):,}",
            f"{count:,}",
            f"{walks:,}",
            rounds,
            100 * accept,
            f"{rest:,}",
        )
        out = np.concatenate([out, sample_negatives(graph, rest, rng)])
    return out


# Below this many positives per view a training view is too small to learn from: say so.
MIN_VIEW_POSITIVES = 100
# Drawing more than this fraction of all distinct non-edges repeats many of them: say so.
REPEAT_WARN_FRACTION = 0.1


def distinct_non_edges(graph: Graph) -> int:
    """Unordered node pairs {u, v}, u != v, that are not edges of `graph` (what negatives are drawn from);
    ordered ones u -> v for a DiGraph."""
    n = graph.num_nodes
    per = 2 if isinstance(graph, DiGraph) else 1
    return max(0, per * (n * (n - 1) // 2) - graph.num_edges)


def max_percent(non_edges: int, num_pos: int) -> float:
    """The largest --percent (two decimals, rounded down) whose view of `num_pos` positives has one distinct
    non-edge per positive among `non_edges`."""
    return math.floor(10_000 * non_edges / max(num_pos, 1)) / 100


def hint_percent(keep: int, num_pos: int) -> float:
    """A --percent above 0 (4 significant digits, rounded down) whose view of `num_pos` positives keeps at most
    `keep` of them: what a refusal suggests, so that the suggestion is accepted (max_percent's two decimals can
    round to 0)."""
    exact = 100.0 * keep / max(num_pos, 1)
    step = 10.0 ** (math.floor(math.log10(exact)) - 3)
    return float(f"{math.floor(exact / step) * step:.4g}")


def check_view_size(num_pos: int, percent: float, neg_ratio: int, graph: Graph) -> None:
    """Refuse views whose negatives cannot be drawn without repetition; warn on degenerate sizes.

    Called before anything is sampled or written, with the numbers the user needs to pick better flags."""
    from preprocess.config import ConfigError

    if num_pos == 0:
        raise ConfigError(
            "--splits train: the dataset has no training edges (self-loops dropped); "
            "use a graph with at least one edge or drop train from --splits"
        )
    keep = max(1, int(round(num_pos * percent / 100))) if percent < 100 else num_pos
    count, available = keep * neg_ratio, distinct_non_edges(graph)
    if count and available == 0:
        raise ConfigError(
            f"--neg-ratio {neg_ratio}: the training graph ({graph.num_nodes} nodes, {graph.num_edges} "
            "edges) has no non-edges, so no negatives can be drawn; use a larger graph"
        )
    if count > available:
        top, per = available // keep, available // neg_ratio  # per: the positives a view may keep at this ratio
        if top:
            fix = f"use --neg-ratio <= {top}"
        elif per:
            fix = f"lower --percent to at most {hint_percent(per, num_pos):g}, or use a larger graph"
        else:
            fix = f"pass --neg-ratio 1 --percent {hint_percent(available, num_pos):g}, or use a larger graph"
        raise ConfigError(
            f"--neg-ratio {neg_ratio}: {count:,} negatives per view but the graph has only "
            f"{available:,} distinct non-edges, so most would repeat; {fix}"
        )
    if count > REPEAT_WARN_FRACTION * available:
        distinct = available * (1 - np.exp(-count / available))
        log.warning(
            "--neg-ratio %d: %s negatives per view from %s distinct non-edges: about %.0f%% are repeats",
            neg_ratio,
            f"{count:,}",
            f"{available:,}",
            100 * (1 - distinct / count),
        )
    if neg_ratio == 0:
        log.warning(
            "--neg-ratio 0: training views hold only positives (every label is 1); "
            "a link classifier needs negatives, use --neg-ratio >= 1"
        )
    if keep < MIN_VIEW_POSITIVES:
        log.warning(
            "--percent %g: %d training positive(s) per view (of %d); a view this small is barely a training set",
            percent,
            keep,
            num_pos,
        )


# Known non-links (--train-negatives) make at most this share of a view's negatives: the rest stay random, so
# the model still sees the pairs the random-negative evaluation ranks.
KNOWN_NEG_SHARE = 0.5


# A directed view (its graph a DiGraph) takes up to this share of its negatives as its own positives turned round,
# v -> u for a positive u -> v whose reverse is no training edge: random pairs almost never are the reverse of an
# edge, so without them nothing in training asks which way an edge points (the reverse protocol asks exactly that).
REVERSE_NEG_SHARE = 0.5


def reverse_negatives(graph: Graph, pos: np.ndarray) -> np.ndarray:
    """(R, 2) the reverses v -> u of the positives u -> v whose reverse is no edge of a DiGraph; none otherwise."""
    if not isinstance(graph, DiGraph) or not len(pos):
        return np.zeros((0, 2), dtype=np.int64)
    return np.ascontiguousarray(pos[~graph.has_edge(pos[:, 1], pos[:, 0])][:, ::-1])


def training_view(
    train_pos: np.ndarray,
    graph: Graph,
    cand: CandidateConfig,
    rng: np.random.Generator,
    nodes: np.ndarray | None = None,
    known: np.ndarray | None = None,
) -> Candidates:
    """One view: (a seeded subset of) the positives plus fresh negatives, in a seeded random order. Of the
    negatives, up to KNOWN_NEG_SHARE are the user's known non-links `known` (a seeded subset per view, each
    in a random direction); of the rest round(rest * hard_neg_fraction) are 2-hop non-edges of `graph` (the
    training graph) and the others uniform, among `nodes` when given (LinkDataset.active_nodes). All from
    `rng`; without known non-links and at fraction 0 it draws exactly what the uniform-only view always drew.
    `cand`: the view's percent of the positives, negatives per positive and hard_neg_fraction."""
    percent, neg_ratio, hard_neg_fraction = cand.percent, cand.neg_ratio, cand.hard_neg_fraction
    pos = training_positives(train_pos)
    if percent < 100:
        keep = max(1, int(round(len(pos) * percent / 100)))
        pos = pos[np.sort(rng.choice(len(pos), size=keep, replace=False))]
    count = len(pos) * neg_ratio
    n_known = 0 if known is None else min(len(known), int(count * KNOWN_NEG_SHARE))
    rev = reverse_negatives(graph, pos)  # a directed view's positives turned round: none on an undirected graph
    n_rev = min(len(rev), int((count - n_known) * REVERSE_NEG_SHARE))
    hard = int(round((count - n_known - n_rev) * hard_neg_fraction))
    neg = sample_negatives(graph, count - n_known - n_rev - hard, rng, nodes)
    if hard:  # after the uniform draw, so a fraction of 0 leaves the rng stream (and the bytes) unchanged
        neg = np.concatenate([sample_hard_negatives(graph, pos, hard, rng), neg])
    if n_known:  # last, for the same reason
        pick = known if n_known == len(known) else known[np.sort(rng.choice(len(known), n_known, replace=False))]
        flip = rng.integers(0, 2, size=n_known).astype(bool)  # no direction cue: the file's pairs are (min, max)
        neg = np.concatenate([np.where(flip[:, None], pick[:, ::-1], pick), neg])
    if n_rev:  # last, so an undirected view's draws are unchanged
        neg = np.concatenate([rev[np.sort(rng.choice(len(rev), n_rev, replace=False))], neg])
    log.info(
        "training view: %s positives, %s negatives (%s of them 2-hop non-edges, %s known non-links%s)",
        f"{len(pos):,}",
        f"{len(neg):,}",
        f"{hard:,}",
        f"{n_known:,}",
        f", {n_rev:,} reversed positives" if n_rev else "",
    )
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
    return Candidates(
        src=pairs[:, 0].copy(),
        dst=pairs[:, 1].copy(),
        label=label,
        pos_cid=np.arange(p, dtype=np.int64),
        neg_cid=neg_cid,
    )


def protocol_candidates(dataset, split: str, protocol: str) -> Candidates:
    """Eval candidates of `split` under `protocol` (original, heart, ogb or pairs: the user's labelled pairs,
    whose positives may be the file's links rather than the split's; reverse: a directed set's positives each
    against its own reverse, never canonicalised)."""
    s = dataset.splits[split]
    return eval_candidates(s.positives(protocol), s.negatives(protocol), canonical=(protocol == "heart"))
