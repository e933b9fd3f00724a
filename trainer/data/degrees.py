"""Each node's degree in the graph a shard set trains on, the model's degree input (ModelConfig.degrees,
trainer/model/degree.py): what lets a token say how popular its node is, which a sampled view of at most n
neighbours hides (a cold-start user's candidates are the same star for every item with n raters or more).

Only the set's "train" graph counts, for every split: a valid or test edge never does. An undirected set gives one
count per node; a directed or typed set two, out and in apart (a typed set counts triples). A training positive's
own edge is in that graph, so the model takes it off its two endpoints' counts (TrainDegrees.keys finds it), as the
sampler leaves it out of the subgraph: a positive would otherwise be told by its endpoints' extra edge.

Buckets: floor(S log2(1 + degree)) clipped to D (S = 1: 0 | 1 | 2-3 ... become 0 | 1 | 2 ...; S steps per
doubling split them finer); a directed node's row in the joint (out, in) table is bucket_out * (D + 1) + bucket_in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class TrainDegrees:
    """counts (N, k) int64, k = 1 (undirected) or 2 (out, in); keys: every training edge's key, sorted (edge_key);
    relations: R of a typed set (its keys name the relation), 0 otherwise."""

    counts: np.ndarray
    keys: np.ndarray
    relations: int = 0


def edge_key(src, dst, num_nodes: int, relation=None, relations: int = 0):
    """One int64 per edge src -> dst (of `relation` in a typed set): what TrainDegrees.keys holds, numpy or torch."""
    key = src * num_nodes + dst
    return key if not relations else key * relations + relation


def train_degrees(manifest, kinds: int) -> TrainDegrees:
    """The degrees and edge keys of a shard set's "train" graph; kinds = 2: out and in apart (a directed or typed
    set: its out-edge or triple CSR), 1: the undirected CSR."""
    from common.shards import load_graph, load_out_graph, load_rel_graph

    n, relations = manifest.num_nodes, len(manifest.relations or ())
    if kinds == 1:
        indptr, indices = load_graph(manifest, "train")
        rel = None
    elif relations:
        indptr, indices, rel = load_rel_graph(manifest, "train")
    else:
        indptr, indices = load_out_graph(manifest, "train")
        rel = None
    indptr, indices = np.asarray(indptr, dtype=np.int64), np.asarray(indices, dtype=np.int64)
    out = np.diff(indptr)
    counts = out[:, None] if kinds == 1 else np.stack([out, np.bincount(indices, minlength=n)], axis=1)
    src = np.repeat(np.arange(n, dtype=np.int64), out)
    keys = edge_key(src, indices, n, None if rel is None else np.asarray(rel, dtype=np.int64), relations)
    return TrainDegrees(np.ascontiguousarray(counts), np.sort(keys), relations)


def degree_bucket(counts: torch.Tensor, max_bucket: int, steps: int = 1) -> torch.Tensor:
    """floor(steps * log2(1 + count)) clipped to max_bucket; steps = 1 integer-exact (frexp: 1 + count = m * 2^e,
    m in [0.5, 1)); more steps per doubling split a doubling's counts finer (the epsilon keeps powers of 2 exact)."""
    if steps == 1:
        _, exponent = torch.frexp((counts + 1).double())
        return (exponent.long() - 1).clamp(max=max_bucket)
    return torch.floor(steps * torch.log2((counts + 1).double()) + 1e-9).long().clamp(max=max_bucket)
