"""Pack a batch of link samples, given as arrays, into one flat token stream (cu_seqlens).

A sample b with N_b context nodes becomes N_b + 2 tokens: its context tokens in local-id order, then the
u-task and v-task tokens (copies of local ids 0 and 1 with role "task"). Samples are concatenated; no
padding anywhere, so a token budget buys real tokens.

The graph structure travels in one of two forms, picked per batch by edge density (BatchPacker):
- sparse: a flat message list over token indices (adj_src -> adj_dst): both directions of every context
  edge, plus each task token receiving from its endpoint's neighbours (the task token's adjacency row is
  a copy of the endpoint's, paper Appendix A). Nothing ever sends from a task token.
- dense: adj_dense (B, Lc, Lc) uint8, sample b's symmetric adjacency over local ids (Lc = max N_b, zero
  padded); the model applies the same task-token rule by reading the endpoint's row.
At ogbl-ddi density (~64,000 edges per ~530-node sample) the message list is 2 x 8 bytes per directed
entry against 1 byte per matrix entry, and the scatter moves one d-vector per message; the dense form
wins both in memory and in compute there (trainer/model/propagation.py).

A directed or typed set adds the typed adjacency the model's input reads (trainer/data/typed.py): K edge types, as
typed messages (typed_src -> typed_dst of type typed_kind, task tokens hearing their endpoint's) or, dense, as
adj_typed (B, K, Lc, Lc). Propagation keeps the undirected union above. Cold links (trainer/data/cold.py) are cut
before the induction and lose their edges at u after it.

Everything is vectorised numpy over the whole batch: pack() never loops over samples, tokens or edges,
because it runs in the loader's hot path. pack_samples() is a convenience for hand-built test samples.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np
import torch

from common.induce import BitMatrix, Inducer
from trainer.data.cold import cold_context, hide_head_dense, hide_head_edges
from trainer.data.distances import pair_distances
from trainer.data.messages import edge_messages, fail_sample
from trainer.data.typed import (
    TypedEdges,
    dense_of,
    directed_dense,
    directed_types,
    relation_types,
    typed_dense,
    typed_fields,
)

CONTEXT, TASK = 0, 1  # values of `role`
# Pick the dense form when the batch's bound on directed adjacency entries (Inducer.entry_bound, from
# degrees, before paying for either form) reaches this fraction of the dense matrix's B * Lc^2 entries.
# Measured on CPU (`python -m bench.loader --sections form`: induce + pack + adjacency embedding + two
# propagation layers, forward and backward, hidden 128, 40 links of 200 nodes on random graphs): the
# forms cost the same at a true edge density of ~2.5 %, where the bound reads 0.2-0.5 (it overestimates
# on such graphs: it caps each degree at N_b - 1); sparse/dense time was 0.82 at bound 0.20, 2.7 at 0.50,
# 18 at ogbl-ddi's density. On GPU, bmm is relatively cheaper than index_add, so the crossover is
# probably lower there: re-measure before tuning.
DENSE_MIN_DENSITY = 0.25


@dataclass
class PackedBatch:
    """A flat token stream of B samples, T tokens in all (see module docstring for the layout)."""

    local_id: torch.Tensor  # (T,) int64 local id; task tokens carry their endpoint's id (0 or 1)
    role: torch.Tensor  # (T,) int64 0 = context, 1 = task
    node: torch.Tensor  # (T,) int64 global node id (for optional node features)
    cu_seqlens: torch.Tensor  # (B+1,) int32 token offsets of each sample
    max_seqlen: int  # max_b (N_b + 2), a python int because attention kernels need it on the host
    adj_src: torch.Tensor  # (E',) int64 flat token index of the sending context token (sparse form)
    adj_dst: torch.Tensor  # (E',) int64 flat token index of the receiving token (context or task)
    task_index: torch.Tensor  # (B, 2) int64 flat positions of the u-task and v-task tokens
    label: torch.Tensor  # (B,) float32
    cid: torch.Tensor  # (B,) int64 candidate ids (scores are looked up by cid at evaluation)
    n_max: int = 0  # the budget pack() validated against (0 = unknown); lets the model check cheaply
    adj_dense: torch.Tensor | None = None  # (B, Lc, Lc) uint8 in the dense form (then adj_src/dst are empty)
    copies: int = 1  # labeled subgraphs per link (LRP-k): samples i*k .. i*k+k-1 are one link's k copies
    # (T, 2) int64 hop distances (du, dv) of each token's node to u and v (trainer/data/distances.py; task tokens:
    # their endpoint's), when the packer was asked for them (the model's --distance-features)
    dist: torch.Tensor | None = None
    # typed adjacency (a directed set's batches; None otherwise): messages of K edge types for the input embedding
    typed_src: torch.Tensor | None = None  # (E'',) int64 flat token index of the sender
    typed_dst: torch.Tensor | None = None  # (E'',) int64 flat token index of the receiver (context or task)
    typed_kind: torch.Tensor | None = None  # (E'',) int64 edge type k in [0, edge_types)
    adj_typed: torch.Tensor | None = None  # (B, K, Lc, Lc) uint8 in the dense form: [b, k, i, j] = j is i's type k
    edge_types: int = 1  # K: 1 = the undirected adjacency alone
    relation: torch.Tensor | None = None  # (B,) int64 each link's target relation (a typed set's); None: untyped
    cold: torch.Tensor | None = None  # (B,) bool the samples whose head is shown with no edges (trainer/data/cold.py)
    clock: str | None = None  # when its links are asked (trainer/data/clock.py): "arrival", a graph, None: newest

    @property
    def num_tokens(self) -> int:
        return int(self.local_id.shape[0])

    @property
    def num_samples(self) -> int:
        return int(self.label.shape[0])

    @property
    def num_links(self) -> int:
        return self.num_samples // self.copies

    @property
    def link_label(self) -> torch.Tensor:
        """(L,) one label per link (its copies share it)."""
        return self.label if self.copies == 1 else self.label[:: self.copies]

    @property
    def link_cid(self) -> torch.Tensor:
        return self.cid if self.copies == 1 else self.cid[:: self.copies]

    @property
    def num_messages(self) -> int:
        return int(self.adj_src.shape[0])

    @property
    def dense(self) -> bool:
        return self.adj_dense is not None

    def _map(self, fn) -> "PackedBatch":
        return PackedBatch(
            **{f.name: (fn(v) if isinstance(v := getattr(self, f.name), torch.Tensor) else v) for f in fields(self)}
        )

    def to(self, device, non_blocking: bool = False) -> "PackedBatch":
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> "PackedBatch":
        # DataLoader calls this on custom batch types when pin_memory=True; makes .to(non_blocking) async.
        return self._map(lambda t: t.pin_memory())


# A loader worker's batch reaches the training process pickled by value up to this size. As tensors it would go
# as one shared-memory handle per tensor, and torch passes each handle over a fresh socket connection with an
# authentication handshake (its file_descriptor strategy): ~4 ms for a PackedBatch's ten tensors on a loaded
# 2-core machine, 7.6 % of a short-sequence CPU run (experiments/own_graph_research/profile_split.py). A copy
# through the pipe costs less than that until batches are megabytes.
BY_VALUE_MAX_BYTES = 8 << 20


@dataclass
class WireBatch:
    """A PackedBatch with numpy arrays in place of its tensors, as a loader worker sends a small batch;
    `unwrap` gives the PackedBatch back without copying."""

    arrays: dict

    def unwrap(self) -> PackedBatch:
        return PackedBatch(
            **{k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in self.arrays.items()}
        )

    def pin_memory(self) -> PackedBatch:  # DataLoader's pin-memory thread calls this (CUDA runs)
        return self.unwrap().pin_memory()


def for_transfer(batch: PackedBatch) -> "WireBatch | PackedBatch":
    """What a loader worker sends: a small batch as numpy arrays (pickled by value), a large one as is."""
    arrays = {
        f.name: (v.numpy() if isinstance(v := getattr(batch, f.name), torch.Tensor) else v) for f in fields(batch)
    }
    size = sum(a.nbytes for a in arrays.values() if isinstance(a, np.ndarray))
    return WireBatch(arrays) if size <= BY_VALUE_MAX_BYTES else batch


@dataclass(frozen=True)
class LocalEdges:
    """A batch's graph as local edges: ptr (B+1,) offsets into pairs (E, 2), each undirected edge once, any
    orientation. strict=True makes pack() also reject duplicate edges (an O(E log E) sort, so off by default;
    the inducer emits each edge once)."""

    ptr: np.ndarray
    pairs: np.ndarray
    strict: bool = False


def pack(
    node_ptr: np.ndarray,
    nodes: np.ndarray,
    label: np.ndarray,
    cid: np.ndarray,
    n_max: int,
    graph: LocalEdges | np.ndarray,
    *,
    dist: np.ndarray | None = None,
    typed: TypedEdges | np.ndarray | None = None,
    relation: np.ndarray | None = None,
    cold: np.ndarray | None = None,
) -> PackedBatch:
    """Pack a batch given as arrays: node_ptr (B+1,) offsets into nodes (global ids, local-id order),
    label (B,), cid (B,), and its graph either as LocalEdges or as dense (B, Lc, Lc) 0/1 adjacency
    (Lc >= max N_b).

    Validates what would otherwise silently corrupt the model input: N_b in [2, n_max], every local id
    of an edge in [0, N_b) (hence < n_max), no self-loops (and duplicates with LocalEdges.strict).
    `dist`: (sum N_b, 2) per-node values (trainer.data.distances.pair_distances) spread to the tokens,
    task tokens taking their endpoint's. `typed`: the typed adjacency (a directed set's), in the graph's form:
    TypedEdges beside LocalEdges, a (B, K, Lc', Lc') array beside a dense one. `relation`: (B,) each link's target
    relation (a typed set's). `cold`: (B,) bool, the samples whose head u is shown with no edges (their edges at u
    already gone; the degree input reads it).
    """
    node_ptr = np.asarray(node_ptr, dtype=np.int64)
    cid = np.asarray(cid, dtype=np.int64)
    B = len(node_ptr) - 1
    if B < 1:
        raise ValueError("pack: empty batch")
    if n_max < 2:
        raise ValueError(f"pack: n_max must be >= 2 (u and v), got {n_max}")
    if graph is None:
        raise ValueError("pack: give the graph either as LocalEdges or as a dense (B, L, L) adjacency")
    n = np.diff(node_ptr)  # (B,) context tokens per sample
    if (bad := np.flatnonzero(n > n_max)).size:
        fail_sample("too many context nodes", cid, bad[0], f"N = {n[bad[0]]} > n_max = {n_max}")
    if (bad := np.flatnonzero(n < 2)).size:
        fail_sample("fewer than 2 context nodes (u and v must be local ids 0 and 1)", cid, bad[0], f"N = {n[bad[0]]}")

    # ---- tokens: per-sample offsets, then each token's position inside its sample
    seqlen = n + 2  # (B,)
    cu = np.zeros(B + 1, np.int64)
    np.cumsum(seqlen, out=cu[1:])
    T = int(cu[-1])
    seg = np.repeat(np.arange(B), seqlen)  # (T,) sample of each token
    pos = np.arange(T) - cu[seg]  # (T,) position inside the sample
    nseg = n[seg]
    is_task = pos >= nseg  # (T,) the last two positions of each sample
    local_id = np.where(is_task, pos - nseg, pos)  # (T,) task tokens -> 0 (u) / 1 (v)
    node = np.asarray(nodes, dtype=np.int64)[node_ptr[seg] + local_id]  # (T,) global id; task tokens copy u / v
    task_index = cu[:-1, None] + n[:, None] + np.arange(2)  # (B, 2)

    t = torch.from_numpy
    if not isinstance(graph, LocalEdges):
        dense = np.asarray(graph)
        Lc = int(n.max())
        if dense.ndim != 3 or dense.shape[0] != B or dense.shape[1] != dense.shape[2] or dense.shape[1] < Lc:
            raise ValueError(f"pack: dense adjacency must be (B = {B}, L, L) with L >= {Lc}, got {dense.shape}")
        adj_src = adj_dst = np.zeros(0, np.int64)
        adj_dense = t(np.ascontiguousarray(dense[:, :Lc, :Lc], dtype=np.uint8))
    else:
        edge_ptr = np.asarray(graph.ptr, dtype=np.int64)
        adj_src, adj_dst = edge_messages(edge_ptr, graph.pairs, n, cu, n_max, cid, graph.strict)
        adj_dense = None
    if dist is not None and np.shape(dist) != (len(nodes), 2):
        raise ValueError(f"pack: dist must be (sum N_b = {len(nodes)}, 2), got {np.shape(dist)}")
    typed_parts = {} if typed is None else typed_fields(typed, adj_dense, n, cu, n_max, cid)
    return PackedBatch(
        **typed_parts,
        local_id=t(local_id),
        role=t(is_task.astype(np.int64)),
        node=t(node),
        cu_seqlens=t(cu.astype(np.int32)),
        max_seqlen=int(seqlen.max()),
        adj_src=t(adj_src),
        adj_dst=t(adj_dst),
        task_index=t(task_index),
        label=t(np.asarray(label, dtype=np.float32).copy()),
        cid=t(cid.copy()),
        n_max=int(n_max),
        adj_dense=adj_dense,
        dist=None if dist is None else t(np.asarray(dist, dtype=np.int64)[node_ptr[seg] + local_id]),
        relation=None if relation is None else t(np.array(relation, dtype=np.int64).reshape(B)),
        cold=None if cold is None else t(np.array(cold, dtype=np.bool_).reshape(B)),
    )


def pack_samples(
    samples: list[dict], n_max: int, strict: bool = False, dense: bool = False, distances: bool = False
) -> PackedBatch:
    """Convenience for hand-built samples ({cid, label, nodes (N,), edges (E, 2)[, directed (E', 2)]}, tests and
    benches): concatenates them into arrays and calls pack(); dense=True gives the dense form of the same graph;
    distances=True adds each token's (du, dv) (trainer.data.distances). `directed`: the sample's ordered edges
    a -> b (local ids), given in every sample or none, packed as the typed adjacency."""
    if not samples:
        raise ValueError("pack: empty batch")
    sizes = [len(s["nodes"]) for s in samples]
    node_ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    edges_l = [np.asarray(s["edges"], dtype=np.int64).reshape(-1, 2) for s in samples]
    edge_ptr = np.concatenate([[0], np.cumsum([len(x) for x in edges_l])]).astype(np.int64)
    nodes = np.concatenate([np.asarray(s["nodes"], dtype=np.int64).reshape(-1) for s in samples])
    edges = np.concatenate(edges_l)
    label = np.array([float(s["label"]) for s in samples], dtype=np.float32)
    cid = np.array([int(s.get("cid", -1)) for s in samples], dtype=np.int64)
    dist = pair_distances(node_ptr, edge_ptr, edges) if distances else None
    ordered = None
    if "directed" in samples[0]:
        d_l = [np.asarray(s["directed"], dtype=np.int64).reshape(-1, 2) for s in samples]
        ordered = (np.concatenate([[0], np.cumsum([len(x) for x in d_l])]).astype(np.int64), np.concatenate(d_l))
    if not dense:
        typed = None if ordered is None else directed_types(*ordered)
        return pack(node_ptr, nodes, label, cid, n_max, LocalEdges(edge_ptr, edges, strict), dist=dist, typed=typed)
    L = max(sizes)
    adj, seg = dense_of(len(samples), L, edge_ptr, edges)
    adj[seg, edges[:, 1], edges[:, 0]] = 1
    typed = None
    if ordered is not None:
        out, _ = dense_of(len(samples), L, *ordered)
        typed = directed_dense(out)
    return pack(node_ptr, nodes, label, cid, n_max, adj, dist=dist, typed=typed)


class BatchPacker:
    """Induce a batch's edges from the graph (common.induce) in the form its density calls for, and pack.

    One per process and graph: the Inducer's marker array is per-process scratch."""

    def __init__(
        self,
        indptr: np.ndarray,
        indices: np.ndarray,
        n_max: int,
        min_density: float | None = None,
        distances: bool = False,
        out_graph: tuple[np.ndarray, np.ndarray] | None = None,
        rel_graph: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        relations: int = 0,
        depth: int = 1,
    ):
        """out_graph: a directed set's out-edge CSR (indptr, indices): batches then carry the typed adjacency.
        rel_graph: a typed set's triple CSR (indptr, indices, relation) of `relations` relation types: the typed
        adjacency is then per relation and direction (K = 2R), and each batch carries its links' relations.
        depth: the set's sampling depth d, how far a cold link's view reaches from v (trainer/data/cold.py)."""
        self.inducer = Inducer(indptr, indices)
        self.out_inducer = None if out_graph is None else Inducer(*out_graph)
        self.rel_inducer = None if rel_graph is None else Inducer(*rel_graph[:2])
        self.rel_of, self.relations = (None, 0) if rel_graph is None else (np.asarray(rel_graph[2]), int(relations))
        self.distances = bool(distances)  # also each token's hop distances to u and v (trainer.data.distances)
        self.graph = (indptr, indices)
        self.bits: BitMatrix | None = None  # built at the first dense batch (sparse-only sets never pay for it)
        self.n_max = int(n_max)
        self.min_density = DENSE_MIN_DENSITY if min_density is None else float(min_density)
        self.depth = int(depth)

    def use_dense(self, node_ptr: np.ndarray, nodes: np.ndarray) -> bool:
        sizes = np.diff(node_ptr)
        area = len(sizes) * int(sizes.max()) ** 2  # entries of the padded (B, Lc, Lc) matrix
        return float(self.inducer.entry_bound(node_ptr, nodes).sum()) >= self.min_density * area

    def dense(self, node_ptr: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """(B, Lc, Lc) adjacency; small graphs (ddi: 2.2 MB of bits) read it from a bit matrix, ~10x
        faster than scanning rows (common/induce.py)."""
        if self.bits is None and BitMatrix.fits(self.inducer.num_nodes):
            self.bits = BitMatrix(*self.graph)
        return (self.bits or self.inducer).dense(node_ptr, nodes)

    def __call__(self, block, cold: np.ndarray | None = None) -> PackedBatch:
        """block: common.shards.Block (cid, label, node_ptr from 0, nodes[, rel: a typed set's link relations]).
        cold: (B,) bool, the links shown with a head that has no edges (trainer/data/cold.py); None: none."""
        if cold is not None and cold.any():
            g = self.inducer
            ptr, nodes = cold_context(g.indptr, g.indices, block.node_ptr, block.nodes, cold, self.depth, g.mark)
            block = replace(block, node_ptr=ptr, nodes=nodes)
        else:
            cold = None
        ptr, nodes = block.node_ptr, block.nodes
        if self.use_dense(ptr, nodes):
            graph = self.dense(ptr, nodes) if cold is None else hide_head_dense(self.dense(ptr, nodes), cold)
            dist = pair_distances(ptr, dense=graph) if self.distances else None
            typed = self.typed(block, graph.shape[-1], cold)
        else:
            edge_ptr, edges = self.inducer.edges(ptr, nodes)
            if cold is not None:
                edge_ptr, edges = hide_head_edges(edge_ptr, edges, cold)
            dist = pair_distances(ptr, edge_ptr, edges) if self.distances else None
            graph, typed = LocalEdges(edge_ptr, edges), self.typed(block, cold=cold)
        return pack(ptr, nodes, block.label, block.cid, self.n_max, graph, dist=dist, typed=typed, relation=block.rel,
                    cold=cold)  # fmt: skip

    def typed(self, block, width: int | None = None, cold: np.ndarray | None = None):
        """The batch's typed adjacency: per relation and direction (a typed set), per direction (a directed one),
        None otherwise; dense at `width` when given; without a cold link's edges at u."""
        ptr, nodes, out = block.node_ptr, block.nodes, self.out_inducer
        if self.rel_inducer is not None:
            if block.rel is None or (len(block) and not 0 <= block.rel.min() <= block.rel.max() < self.relations):
                raise ValueError(
                    f"pack: a typed set's block has no relation column or one outside [0, {self.relations}) "
                    "(corrupt or from another set); rebuild the shard set"
                )
            rows = self.rel_inducer.typed_edges(ptr, nodes, self.rel_of)
            typed = relation_types(*(rows if cold is None else hide_head_edges(*rows, cold)), self.relations)
            return typed if width is None else typed_dense(len(block), width, typed)
        if out is None:
            return None
        if width is not None:
            adj = directed_dense(out.dense(ptr, nodes, width, ordered=True))
            return adj if cold is None else hide_head_dense(adj, cold)
        pairs = out.ordered_edges(ptr, nodes)
        return directed_types(*(pairs if cold is None else hide_head_edges(*pairs, cold)))

    @classmethod
    def for_set(cls, manifest, which: str, n_max: int, distances: bool = False) -> "BatchPacker":
        """The packer of a shard set's graph `which`: its sampling CSR, its out-edge CSR when it is directed, its
        triple CSR when it is typed."""
        from common.shards import load_graph, load_out_graph, load_rel_graph

        out = load_out_graph(manifest, which) if manifest.directed else None
        rel = load_rel_graph(manifest, which) if manifest.relations else None
        return cls(
            *load_graph(manifest, which),
            n_max,
            distances=distances,
            out_graph=out,
            rel_graph=rel,
            relations=len(manifest.relations),
            depth=int(manifest.sampling.get("d", 1)),
        )
