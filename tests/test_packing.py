"""pack() / to_padded() on hand-built samples, every array checked against values worked out by hand."""

import numpy as np
import pytest
import torch

from common.shards import Block
from trainer.data.packing import BatchPacker, LocalEdges, pack, pack_samples
from trainer.data.padded import from_padded, to_padded, token_sample


def _samples():
    # sample 0: u=10, v=11, w=12, x=13; edges u-w, v-w, w-x (u and v not adjacent: target edge removed)
    s0 = dict(
        cid=7, src=10, dst=11, label=1.0, nodes=np.array([10, 11, 12, 13]), edges=np.array([[0, 2], [2, 1], [2, 3]])
    )
    # sample 1: isolated pair, no edges
    s1 = dict(cid=8, src=20, dst=21, label=0.0, nodes=np.array([20, 21]), edges=np.zeros((0, 2), np.int64))
    # sample 2: u=30, v=31, y=32; edges v-u? no: u-y, y-v given as (1, 2) and (2, 0)
    s2 = dict(cid=9, src=30, dst=31, label=1.0, nodes=np.array([30, 31, 32]), edges=np.array([[1, 2], [2, 0]]))
    return [s0, s1, s2]


def test_pack_tokens_and_offsets():
    b = pack_samples(_samples(), n_max=6)
    # lengths 4+2, 2+2, 3+2 -> offsets 0, 6, 10, 15
    assert b.cu_seqlens.dtype == torch.int32
    assert b.cu_seqlens.tolist() == [0, 6, 10, 15]
    assert b.max_seqlen == 6 and b.num_tokens == 15 and b.num_samples == 3 and b.n_max == 6
    assert b.local_id.tolist() == [0, 1, 2, 3, 0, 1, 0, 1, 0, 1, 0, 1, 2, 0, 1]
    assert b.role.tolist() == [0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1]
    assert b.node.tolist() == [10, 11, 12, 13, 10, 11, 20, 21, 20, 21, 30, 31, 32, 30, 31]
    assert b.task_index.tolist() == [[4, 5], [8, 9], [13, 14]]
    assert b.label.tolist() == [1.0, 0.0, 1.0] and b.cid.tolist() == [7, 8, 9]
    assert token_sample(b).tolist() == [0] * 6 + [1] * 4 + [2] * 5


def test_pack_messages_exact():
    b = pack_samples(_samples(), n_max=6)
    # documented order: all edges a->b, all edges b->a, then task receivers (from a->b, then from b->a)
    # flat context tokens: sample 0 at 0..3, sample 2 at 10..12; task tokens 4, 5 and 13, 14
    fwd = [(0, 2), (2, 1), (2, 3), (11, 12), (12, 10)]
    rev = [(d, s) for s, d in fwd]
    # a->b with b in {0,1}: (2->1) in s0 -> v-task 5; (12->10) in s2 -> u-task 13
    # b->a with a in {0,1}: (2->0) in s0 -> u-task 4; (12->11) in s2 -> v-task 14
    task = [(2, 5), (12, 13), (2, 4), (12, 14)]
    want = fwd + rev + task
    assert b.adj_src.tolist() == [s for s, _ in want]
    assert b.adj_dst.tolist() == [d for _, d in want]
    # nothing sends from a task token
    assert not b.role[b.adj_src].any()


def test_task_tokens_hear_exactly_their_endpoints_neighbours():
    b = pack_samples(_samples(), n_max=6)
    src, dst = b.adj_src.tolist(), b.adj_dst.tolist()
    for bi in range(3):
        for k in range(2):
            t = int(b.task_index[bi, k])
            ctx = int(b.cu_seqlens[bi]) + k
            assert sorted(s for s, d in zip(src, dst) if d == t) == sorted(s for s, d in zip(src, dst) if d == ctx)


def test_to_padded_round_trip():
    b = pack_samples(_samples(), n_max=6)
    p = to_padded(b)
    assert p.shape == (3, 6)
    assert p.mask.tolist() == [[True] * 6, [True] * 4 + [False] * 2, [True] * 5 + [False]]
    assert p.index.tolist() == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, -1, -1], [10, 11, 12, 13, 14, -1]]
    assert p.task_index.tolist() == [[4, 5], [2, 3], [3, 4]]
    assert p.local_id[1].tolist() == [0, 1, 0, 1, 0, 0]
    assert p.node[2].tolist() == [30, 31, 32, 30, 31, 0]
    # flat -> padded -> flat is the identity, for indices and for a float payload
    valid = p.index[p.mask]
    assert valid.tolist() == list(range(15))
    x = torch.randn(15, 3)
    xp = torch.zeros(3 * 6, 3)
    xp[p.pos] = x
    assert torch.equal(from_padded(xp.view(3, 6, 3), p), x)
    # messages map to the same (row, column) slots
    L = 6
    assert p.adj_src.tolist() == [int(p.pos[s]) for s in b.adj_src]
    assert all(p.index.view(-1)[p.adj_dst[i]] == b.adj_dst[i] for i in range(len(b.adj_dst)))
    assert (p.adj_src // L == p.adj_dst // L).all()


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _tensors(b):
    return {k: v for k, v in vars(b).items() if isinstance(v, torch.Tensor)}


def test_to_device_keeps_every_tensor_dtype_and_value():
    host = pack_samples(_samples(), n_max=6)
    moved = host.to(DEVICE)  # a real move to CUDA when there is a GPU
    assert _tensors(moved).keys() == _tensors(host).keys() and isinstance(moved.max_seqlen, int)
    for name, t in _tensors(moved).items():
        assert t.device.type == DEVICE, name
        assert t.dtype == _tensors(host)[name].dtype, name
        assert torch.equal(t.cpu(), _tensors(host)[name]), name
    assert moved.cu_seqlens.dtype == torch.int32 and moved.max_seqlen == host.max_seqlen
    assert moved.n_max == host.n_max == 6


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned host memory needs CUDA")
def test_pin_memory_then_non_blocking_copy_to_cuda():
    host = pack_samples(_samples(), n_max=6)
    pinned = host.pin_memory()
    assert all(t.is_pinned() for t in _tensors(pinned).values())
    moved = pinned.to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    for name, t in _tensors(moved).items():
        assert t.is_cuda and torch.equal(t.cpu(), _tensors(host)[name]), name


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(nodes=np.arange(3), edges=np.array([[0, 6]])), "n_max"),
        (dict(nodes=np.arange(3), edges=np.array([[0, 4]])), "not in the context"),
        (dict(nodes=np.arange(7), edges=np.zeros((0, 2))), "n_max = 6"),
        (dict(nodes=np.arange(1), edges=np.zeros((0, 2))), "fewer than 2"),
        (dict(nodes=np.arange(3), edges=np.array([[2, 2]])), "self-loop"),
        (dict(nodes=np.arange(3), edges=np.array([[-1, 2]])), "out of range"),
    ],
)
def test_pack_rejects_bad_samples(bad, match):
    s = dict(cid=42, src=0, dst=1, label=1.0, **bad)
    with pytest.raises(ValueError, match=match) as err:
        pack_samples(_samples() + [s], n_max=6)
    assert "sample 3 (cid 42)" in str(err.value)


def test_pack_strict_rejects_duplicates():
    s = dict(cid=1, src=0, dst=1, label=1.0, nodes=np.arange(3), edges=np.array([[0, 2], [2, 0]]))
    pack_samples([s], n_max=6)  # not checked by default
    with pytest.raises(ValueError, match="duplicate edge"):
        pack_samples([s], n_max=6, strict=True)


def test_pack_empty():
    with pytest.raises(ValueError, match="empty"):
        pack_samples([], n_max=6)
    with pytest.raises(ValueError, match="empty"):
        pack(np.zeros(1, np.int64), np.zeros(0, np.int64), [], [], 6, np.zeros((0, 2, 2)))


# ---------------------------------------------------------------------------- arrays in, both graph forms
def _arrays():
    """_samples() as the loader hands them over: one block of node ids plus local edges."""
    node_ptr = np.array([0, 4, 6, 9])
    nodes = np.array([10, 11, 12, 13, 20, 21, 30, 31, 32])
    edge_ptr = np.array([0, 3, 3, 5])
    edges = np.array([[0, 2], [2, 1], [2, 3], [1, 2], [2, 0]])
    return node_ptr, nodes, np.array([1.0, 0.0, 1.0]), np.array([7, 8, 9]), edge_ptr, edges


def test_pack_from_arrays_equals_pack_samples():
    node_ptr, nodes, label, cid, edge_ptr, edges = _arrays()
    a = pack(node_ptr, nodes, label, cid, 6, LocalEdges(edge_ptr, edges))
    b = pack_samples(_samples(), n_max=6)
    for f in ("local_id", "role", "node", "cu_seqlens", "adj_src", "adj_dst", "task_index", "label", "cid"):
        assert torch.equal(getattr(a, f), getattr(b, f)), f
    assert a.max_seqlen == b.max_seqlen and a.adj_dense is None and not a.dense


def test_dense_form_hand_computed():
    node_ptr, nodes, label, cid, _, _ = _arrays()
    adj = np.zeros((3, 5, 5), np.uint8)  # wider than the largest context: pack trims it to Lc = 4
    for b, i, j in [(0, 0, 2), (0, 2, 1), (0, 2, 3), (2, 1, 2), (2, 2, 0)]:
        adj[b, i, j] = adj[b, j, i] = 1
    d = pack(node_ptr, nodes, label, cid, 6, adj)
    s = pack_samples(_samples(), n_max=6)
    assert d.dense and d.adj_dense.dtype == torch.uint8 and d.adj_dense.shape == (3, 4, 4)
    assert d.adj_dense[0].tolist() == [[0, 0, 1, 0], [0, 0, 1, 0], [1, 1, 0, 1], [0, 0, 1, 0]]
    assert d.adj_dense[1].sum() == 0
    assert d.adj_dense[2].tolist() == [[0, 0, 1, 0], [0, 0, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
    assert d.num_messages == 0
    for f in ("local_id", "role", "node", "cu_seqlens", "task_index"):  # tokens do not depend on the form
        assert torch.equal(getattr(d, f), getattr(s, f)), f
    assert torch.equal(pack_samples(_samples(), n_max=6, dense=True).adj_dense, d.adj_dense)
    p = to_padded(d)  # the padded view works on the dense form too (attention needs only the tokens)
    assert p.shape == (3, 6) and p.adj_src.numel() == 0
    with pytest.raises(ValueError, match="dense adjacency"):
        pack(node_ptr, nodes, label, cid, 6, adj[:, :3, :3])


def test_batch_packer_induces_from_the_graph_in_either_form():
    """BatchPacker = Inducer + pack: on a hand-made graph, the sample graphs of _samples() come back
    (target edge u-v removed), as messages or as the matrix depending on the density threshold."""
    graph = {10: [11, 12], 11: [10, 12], 12: [10, 11, 13], 13: [12], 30: [32], 31: [32], 32: [30, 31]}
    indptr = np.zeros(34, np.int64)
    np.cumsum([len(graph.get(i, [])) for i in range(33)], out=indptr[1:])
    indices = np.array([j for i in range(33) for j in sorted(graph.get(i, []))], np.int32)
    node_ptr, nodes, label, cid, _, _ = _arrays()
    block = Block(cid, nodes[node_ptr[:-1]], nodes[node_ptr[:-1] + 1], label.astype(np.float32), node_ptr, nodes)
    sparse = BatchPacker(indptr, indices, 6, min_density=2.0)(block)
    dense = BatchPacker(indptr, indices, 6, min_density=0.0)(block)
    ref = pack_samples(_samples(), n_max=6)
    assert not sparse.dense and dense.dense
    msgs = lambda b: sorted(zip(b.adj_src.tolist(), b.adj_dst.tolist()))
    assert msgs(sparse) == msgs(ref)  # the 10-11 edge of the graph is the target edge: never seen
    assert torch.equal(dense.adj_dense, pack_samples(_samples(), n_max=6, dense=True).adj_dense)
    # the default rule: entry bound 8 + 0 + 4 = 12 against 3 x 4 x 4 = 48 matrix entries
    from trainer.data.packing import DENSE_MIN_DENSITY

    assert BatchPacker(indptr, indices, 6).use_dense(node_ptr, nodes) == (12 >= DENSE_MIN_DENSITY * 48)
