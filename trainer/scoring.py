"""The one scoring engine: packed batches -> logits in true fp32, and candidate pairs -> logits.

Evaluation (trainer/evaluate.py: batches read from eval shards), `pipelines.score` (pairs from a file)
and `pipelines.recommend` (pairs proposed by a retriever) all score through `forward_batches`; the two
pipelines also share `PairScorer`, which samples every pair's subgraph with the evaluation sampler
and seed policy, cuts token-budget batches and runs the model (GPU when the device says so).

Seed policy: a pair's subgraph, local order and LRP copies depend only on (seed, ordering, src, dst),
never on the other pairs of its batch or on the batch size, so the same pair scores the same in
`pipelines.score` and in `pipelines.recommend` (up to float rounding of the padded attention).
The sampler is passed in (`sample`): trainer never imports preprocess; the recipes
hand it `preprocess.sampler.sample_subgraphs`.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

import numpy as np
import torch

from common.datasets.negatives import min_max
from common.shards import Block
from trainer.config_sections import GPU_MICRO_TOKENS
from trainer.data.block_stream import replicate, seeded_orders, token_batches
from trainer.data.packing import BatchPacker

# Defaults of the pair path: a CPU batch of ~16k tokens keeps the padded attention's (B, L, L) scores
# small; a GPU takes 4x a training micro-batch (no activations are kept at inference).
CPU_TOKEN_BUDGET = 16_384
SAMPLE_CHUNK = 4096  # pairs sampled at once: bounds the node arrays held between sampling and packing


@contextmanager
def fp32_inference(model: torch.nn.Module):
    """eval mode, no autograd, matmuls in true fp32 (no TF32): bf16/TF32 logits would tie a positive with
    some of its hard negatives and ranks would depend on rounding. Restores the model's mode and precision."""
    was_training = model.training
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)
        torch.set_float32_matmul_precision(precision)


def forward_batches(model: torch.nn.Module, batches: Iterable, device: torch.device) -> Iterator[tuple]:
    """(batch, fp32 logits on the CPU) for every packed batch, one logit per link; call inside fp32_inference.
    The device-to-host copies are non-blocking: the caller synchronises once (`synchronize`) before reading."""
    for batch in batches:
        logits = model(batch.to(device, non_blocking=True))
        yield batch, logits.float().to("cpu", non_blocking=True)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def default_device(name: str = "auto") -> torch.device:
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def default_token_budget(device: torch.device) -> int:
    return 4 * GPU_MICRO_TOKENS if device.type == "cuda" else CPU_TOKEN_BUDGET


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser over a uint64 array (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def pair_seeds(seed: int, ordering: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """(P,) uint64: a seed per pair from (seed, ordering, src, dst) alone."""
    with np.errstate(over="ignore"):
        h = _mix64(np.full(len(src), (seed * 0x9E3779B97F4A7C15 + ordering) & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64))
        h = _mix64(h + src.astype(np.uint64))
        return _mix64(h + dst.astype(np.uint64) * np.uint64(0xD1B54A32D192ED03))


Sampler = Callable[..., object]  # preprocess.sampler.sample_subgraphs's signature


class PairSampler:
    """The CPU half of pair scoring: every pair's subgraph, per ordering, as blocks of links (no model).
    A Ray task runs this alone and ships the blocks to an actor that holds the model (pipelines.recommend)."""

    def __init__(
        self,
        indptr: np.ndarray,
        indices: np.ndarray,
        sampling: tuple[int, int],
        sample: Sampler,
        seed: int = 0,
        out_graph=None,
        rel_graph: tuple | None = None,
        relations: int = 0,
    ):
        """out_graph: a directed run's ordered edges (common.graph.DiGraph, or its (indptr, indices)), which its
        model reads beside the undirected CSR the subgraphs are sampled on; None for an undirected run.
        rel_graph: a typed run's triple CSR (indptr, indices, relation) of `relations` relation types: its model
        reads the relation of every triple, and every pair is scored with a relation (blocks' `rel`)."""
        self.indptr, self.indices, self.sampling = indptr, indices, tuple(sampling)
        self.sample, self.seed = sample, int(seed)
        if out_graph is not None and not isinstance(out_graph, tuple):
            out_graph = (out_graph.indptr, out_graph.indices)
        self.out_graph, self.rel_graph, self.relations = out_graph, rel_graph, int(relations)

    def blocks(self, pairs: np.ndarray, ordering: int, rel: np.ndarray | None = None) -> Iterator[Block]:
        """rel: (P,) each pair's relation, a typed run's (required then, refused otherwise)."""
        if (rel is None) != (self.rel_graph is None):
            raise ValueError("score: a typed run scores pairs with a relation each, an untyped one without")
        pairs = np.ascontiguousarray(pairs, dtype=np.int64).reshape(-1, 2)
        if self.out_graph is None:  # undirected: (u, v) and (v, u) are one link, drawn and scored as (min, max),
            pairs = min_max(pairs)  # the order its shards hold it in, so both orders get one score
        d, n = self.sampling
        for lo in range(0, len(pairs), SAMPLE_CHUNK):
            chunk = pairs[lo : lo + SAMPLE_CHUNK]
            src, dst = chunk[:, 0], chunk[:, 1]
            sub = self.sample(
                self.indptr,
                self.indices,
                src,
                dst,
                d,
                n,
                self.seed,
                shuffle=True,
                link_seeds=pair_seeds(self.seed, ordering, src, dst),
            )
            # cid = the pair's position: it only places the outputs; LRP copies are keyed by the pair (PairScorer)
            yield Block(
                np.arange(lo, lo + len(chunk), dtype=np.int64),
                src,
                dst,
                np.zeros(len(chunk), np.float32),
                sub.node_ptr,
                sub.nodes,
                None if rel is None else np.asarray(rel[lo : lo + SAMPLE_CHUNK], dtype=np.int64),
            )


class PairScorer:
    """Score (P, 2) candidate pairs on one graph with a trained model; `logits(pairs)` -> (orderings, P).

    orderings: independent subgraph draws averaged by the caller (paper Sec. 4.1); token_budget: sum of
    copies x (N_b + 2) per forward pass; max_pairs: links per forward pass at most."""

    def __init__(
        self,
        model: torch.nn.Module,
        sampler: PairSampler,
        n_max: int,
        *,
        orderings: int = 1,
        token_budget: int | None = None,
        max_pairs: int = SAMPLE_CHUNK,
        device: torch.device | None = None,
    ):
        """`sampler`: the graph, sampling and seed the pairs' subgraphs are drawn with."""
        if orderings < 1 or max_pairs < 1:
            raise ValueError(f"orderings and max_pairs must be >= 1, got {orderings} and {max_pairs}")
        self.model, self.n_max, self.sampler = model, int(n_max), sampler
        indptr, indices = sampler.indptr, sampler.indices
        self.num_nodes = int(indptr.shape[0] - 1)
        self.seed, self.orderings = sampler.seed, int(orderings)
        self.device = device or next(model.parameters()).device
        self.copies = int(getattr(model.cfg, "lrp", 1))  # an LRP-k model reads k labeled subgraphs of every pair
        self.token_budget = max(int(token_budget or default_token_budget(self.device)), self.copies * (self.n_max + 2))
        self.max_pairs = int(max_pairs)
        self.packer = BatchPacker(
            indptr,
            indices,
            self.n_max,
            distances=bool(getattr(model.cfg, "distances", 0)),
            out_graph=getattr(sampler, "out_graph", None),  # a directed run's: the model reads edge directions
            rel_graph=getattr(sampler, "rel_graph", None),  # a typed run's: the model reads relations
            relations=getattr(sampler, "relations", 0),
        )

    def packed(self, blocks: Iterable[Block], ordering: int) -> Iterator:
        """Token-budget batches of one ordering's sampled blocks, packed for the model (CPU work); each batch's
        `position` places its logits among the pairs."""
        for batch in token_batches(iter(blocks), self.token_budget, self.max_pairs, self.copies):
            key = batch.src * self.num_nodes + batch.dst
            keyed = Block(key, batch.src, batch.dst, batch.label, batch.node_ptr, batch.nodes, batch.rel)
            packed = self.packer(seeded_orders(replicate(keyed, self.copies), self.copies, self.seed + ordering))
            packed.copies = self.copies
            packed.position = torch.from_numpy(np.array(batch.cid, dtype=np.int64))  # a copy: Ray blocks are read-only
            yield packed

    def score_blocks(self, per_ordering: list, num_pairs: int) -> np.ndarray:
        """(orderings, P) float32 logits from sampled blocks: per_ordering[k] = the blocks of ordering k."""
        out = torch.zeros((len(per_ordering), num_pairs), dtype=torch.float32)
        with fp32_inference(self.model):
            for k, blocks in enumerate(per_ordering):
                done = list(forward_batches(self.model, self.packed(blocks, k), self.device))
                synchronize(self.device)  # the non-blocking copies have landed
                for batch, logits in done:
                    out[k, batch.position] = logits
        return out.numpy()

    def logits(self, pairs: np.ndarray, rel: np.ndarray | None = None) -> np.ndarray:
        """(orderings, P) float32 logits of every pair (a typed run's: of every (pair, relation rel[i]))."""
        pairs = np.ascontiguousarray(pairs, dtype=np.int64).reshape(-1, 2)
        blocks = [self.sampler.blocks(pairs, k, rel) for k in range(self.orderings)]
        return self.score_blocks(blocks, len(pairs))


def score_columns(logits: np.ndarray) -> dict[str, np.ndarray]:
    """(orderings, P) logits -> the columns a user reads per pair: score (mean probability), logit (mean logit),
    score_std (of the probability over orderings). `pencil score` writes them, `pencil serve`'s /score answers
    with them."""
    probs = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    return {"score": probs.mean(0), "logit": logits.mean(0).astype(np.float64), "score_std": probs.std(0)}
