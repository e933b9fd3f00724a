"""trainer.data.stream: views per epoch, relabelling, deterministic shuffling, equal batch counts, budgets, resume,
persistent workers, induced graphs.

Shard sets here are hand-written v2 sets (common.shards; any shape we need: uneven shards, one shard,
several views) with their training graph shipped; the real citeseer set built by preprocess is exercised
in test_trainer_loop/ddp and bench/loader.py.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from common.shards import (
    Block,
    LocalStorage,
    encode_array,
    encode_queries,
    eval_shard_name,
    graph_entry,
    graph_names,
    pack_shard,
    queries_name,
    read_manifest,
    read_shard,
    shard_entries,
    train_shard_name,
    write_manifest,
)
from trainer.config_sections import ConfigError, DataConfig
from trainer.data import block_stream as blocks
from trainer.data import loader_budget, loaders
from trainer.data import stream as data


# ---------------------------------------------------------------------------- synthetic shard sets
def _plant(rng, u, v, label, n_max, num_nodes):
    """A link's context nodes and the graph edges planted for it: positives share common neighbours
    with u and v (learnable), negatives do not. The edges go into the shipped graph (global ids); the
    loader recovers them by induction, together with whatever other links planted among the same nodes."""
    n = int(rng.integers(2, n_max + 1))
    others = rng.choice(np.setdiff1d(np.arange(num_nodes), [u, v]), size=n - 2, replace=False)
    nodes = np.concatenate([[u, v], others]).astype(np.int64)
    edges = []
    for k in range(2, n):
        if label > 0 and rng.random() < 0.6:
            edges += [(u, nodes[k]), (v, nodes[k])]  # common neighbour
        else:
            edges.append((nodes[int(rng.integers(0, 2))], nodes[k]))
    return nodes, edges


def _block(rng, cids, n_max, num_nodes, planted, labels=None):
    nodes, node_ptr, src, dst, lab = [], [0], [], [], []
    for i, c in enumerate(cids):
        u, v = rng.choice(num_nodes, size=2, replace=False)
        label = float(labels[i]) if labels is not None else float(c % 2)
        ns, es = _plant(rng, int(u), int(v), label, n_max, num_nodes)
        planted += es
        nodes.append(ns)
        node_ptr.append(node_ptr[-1] + len(ns))
        src.append(u)
        dst.append(v)
        lab.append(label)
    return Block(
        cid=np.asarray(cids, np.int64),
        src=np.asarray(src, np.int64),
        dst=np.asarray(dst, np.int64),
        label=np.asarray(lab, np.float32),
        node_ptr=np.asarray(node_ptr, np.int64),
        nodes=np.concatenate(nodes),
    )


def csr(num_nodes: int, edges) -> tuple[np.ndarray, np.ndarray]:
    """Undirected, deduplicated CSR with sorted rows (what preprocess ships), from (a, b) pairs."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    e = e[e[:, 0] != e[:, 1]]
    both = np.unique(np.concatenate([e, e[:, ::-1]]), axis=0)
    indptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(np.bincount(both[:, 0], minlength=num_nodes), out=indptr[1:])
    return indptr, both[:, 1].astype(np.int32)


def make_shard_set(
    root: Path,
    shard_links=(40, 40, 13),
    views: int = 2,
    n_max: int = 12,
    block: int = 8,
    eval_links: int = 60,
    num_nodes: int = 1000,
    seed: int = 0,
) -> Path:
    """A complete v2 shard set: `views` training views with the given links per shard, valid/test
    original-protocol eval sets (positives ranked against shared negatives), and the training graph
    (the union of every link's planted edges) shipped as graph-train-*.npy."""
    rng = np.random.default_rng(seed)
    storage = LocalStorage(root)
    records, planted = [], []

    def write(name, split, protocol, view, cids, labels=None):
        blocks = [
            _block(
                rng, cids[i : i + block], n_max, num_nodes, planted, None if labels is None else labels[i : i + block]
            )
            for i in range(0, len(cids), block)
        ]
        payload, stats = pack_shard(blocks)
        storage.write_atomic(name, payload)
        records.append(
            {
                "name": name,
                "split": split,
                "protocol": protocol,
                "view": view,
                "links": stats["links"],
                "tokens": stats["tokens"],
                "blocks": stats["blocks"],
                "bytes": stats["bytes"],
                "sha256": stats["sha256"],
            }
        )

    for view in range(views):
        start = 0
        for i, k in enumerate(shard_links):
            write(train_shard_name(view, i), "train", None, view, list(range(start, start + k)))
            start += k
    evals = {}
    for split in ("valid", "test"):
        n_pos = eval_links // 3
        labels = np.r_[np.ones(n_pos), np.zeros(eval_links - n_pos)]
        cids = np.arange(eval_links)
        half = eval_links // 2
        write(eval_shard_name(split, "original", 0), split, "original", None, list(cids[:half]), labels[:half])
        write(eval_shard_name(split, "original", 1), split, "original", None, list(cids[half:]), labels[half:])
        storage.write_atomic(queries_name(split, "original"), encode_queries(cids[:n_pos], cids[n_pos:]))
        evals[f"{split}/original"] = {
            "queries": queries_name(split, "original"),
            "kind": "shared",
            "metric": "mrr",
            "ogb": False,
        }
    indptr, indices = csr(num_nodes, planted)
    for name, arr in zip(graph_names("train"), (indptr, indices)):
        storage.write_atomic(name, encode_array(arr))
    sets = [
        {
            "split": s,
            "protocol": p,
            "view": v,
            "graph": "train",
            "links": sum(r["links"] for r in records if (r["split"], r["protocol"], r["view"]) == (s, p, v)),
            "shards": sum(1 for r in records if (r["split"], r["protocol"], r["view"]) == (s, p, v)),
        }
        for s, p, v in sorted({(r["split"], r["protocol"], r["view"]) for r in records}, key=str)
    ]
    # key and fingerprint follow the seed, as a real set's follow its data (a run is bound to them)
    write_manifest(
        storage,
        {
            "key": f"synthetic-{seed}",
            "fingerprint": f"synthetic-data-{seed}",
            "dataset": "synthetic",
            "shards": records,
            "n_max": n_max,
            "num_nodes": num_nodes,
            "views": views,
            "eval": evals,
            "sets": sets,
            "graphs": {"train": graph_entry("train", indptr, indices)},
        },
    )
    return root


@pytest.fixture(scope="module")
def shard_set(tmp_path_factory) -> dict:
    return read_manifest(make_shard_set(tmp_path_factory.mktemp("shards")))


def cfg(**kw) -> DataConfig:
    base = dict(
        shards="unused",
        max_samples=8,
        token_budget=200,
        eval_token_budget=400,
        shuffle_buffer_mb=1,
        loader_memory_mb=64,
        num_workers=0,
        seed=0,
    )
    base.update(kw)
    return DataConfig(**base)


def identity(batch):
    return batch


def pid_and_batch(batch):
    return os.getpid(), batch


def rank_batches(manifest, epoch, rank, world, c, start=0, collate=identity):
    """The batches (Blocks) one rank's loader yields."""
    loader, plan = loaders.train_loader(
        manifest, epoch, loaders.LoaderSettings(c, rank, world, collate=collate), start=start
    )
    return list(loader), plan


def stored(manifest, split, view=None) -> dict:
    """cid -> node ids in stored order, straight from the shards."""
    out = {}
    for e in shard_entries(manifest, split, view=view):
        for b in read_shard(Path(manifest.root) / e["name"]):
            for i in range(len(b)):
                out[int(b.cid[i])] = tuple(b.nodes[b.node_ptr[i] : b.node_ptr[i + 1]])
    return out


def links(batches) -> dict:
    return {int(b.cid[i]): tuple(b.nodes[b.node_ptr[i] : b.node_ptr[i + 1]]) for b in batches for i in range(len(b))}


def cids(batches) -> list:
    return [int(c) for b in batches for c in b.cid]


# ---------------------------------------------------------------------------- pieces
def test_epoch_reads_view_e_mod_v(shard_set):
    for epoch in range(5):
        plan = data.plan_epoch(shard_set, epoch, 1, 0, cfg(token_budget=200, max_samples=8, seed=0))
        assert plan.view == epoch % 2
        assert {Path(u.url).name for u in plan.units} == {f"train-v{epoch % 2:03d}-{i:05d}.tar" for i in range(3)}


def _block_of(sizes, seed=0):
    rng = np.random.default_rng(seed)
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    nodes = rng.permutation(10_000)[: ptr[-1]].astype(np.int64)
    B = len(sizes)
    return Block(np.arange(B), nodes[ptr[:-1]], nodes[ptr[:-1] + 1], np.zeros(B, np.float32), ptr, nodes)


def test_relabel_permutes_each_link_keeping_endpoints():
    block = _block_of([2, 3, 5, 9, 4])
    out = blocks.relabel(block, np.random.default_rng(1))
    for i in range(len(block)):
        a = block.nodes[block.node_ptr[i] : block.node_ptr[i + 1]]
        b = out.nodes[out.node_ptr[i] : out.node_ptr[i + 1]]
        assert list(b[:2]) == list(a[:2]) and sorted(b) == sorted(a)  # u = 0, v = 1; same node set
    assert not np.array_equal(out.nodes, block.nodes) and block.nodes.base is None  # input untouched


def test_relabel_is_uniform_chi_square():
    """Every order of local ids 2..4 (3! = 6) equally likely, for two links of one block at once."""
    block = _block_of([5, 5])
    counts = [collections.Counter(), collections.Counter()]
    rng = np.random.default_rng(7)
    draws = 6000
    for _ in range(draws):
        out = blocks.relabel(block, rng)
        for i in range(2):
            counts[i][tuple(out.nodes[out.node_ptr[i] + 2 : out.node_ptr[i + 1]])] += 1
    for c in counts:
        assert len(c) == 6
        chi2 = sum((k - draws / 6) ** 2 / (draws / 6) for k in c.values())
        assert chi2 < 20.5  # chi-square, 5 degrees of freedom, p = 0.001


def test_greedy_cuts_match_a_hand_computed_split():
    tokens = np.array([5, 5, 5, 12, 3, 3, 3, 3, 1], np.int64)
    # budget 10, cap 3: [5,5] | [5] (5+12 > 10) | [12] alone (over budget) | [3,3,3] (cap) | [3,1]
    assert blocks._greedy_ends(tokens, 10, 3).tolist() == [2, 3, 4, 7, 9]
    block = _block_of([4, 4, 4, 12, 2, 2, 2, 2])  # tokens N + 2 = 6, 6, 6, 14, 4, 4, 4, 4; budget 12, cap 3
    got = list(blocks.token_batches(iter([blocks.block_slice(block, 0, 3), blocks.block_slice(block, 3, 8)]), 12, 3))
    assert [b.cid.tolist() for b in got] == [[0, 1], [2], [3], [4, 5, 6], [7]]  # carried over the block end
    assert all(np.array_equal(b.nodes, block.take(b.cid).nodes) for b in got)


def test_shuffle_pool_is_byte_sized_complete_and_seeded():
    src = [_block_of([4] * 10, seed=s) for s in range(6)]
    for b, s in zip(src, range(6)):
        b.cid[:] = np.arange(10) + 10 * s
    one = src[0].nbytes
    for pool in (1, 2 * one, 100 * one):
        out = list(blocks.shuffle_pool(iter(src), pool, np.random.default_rng(3)))
        assert sorted(c for b in out for c in b.cid.tolist()) == list(range(60))  # each link exactly once
        again = list(blocks.shuffle_pool(iter(src), pool, np.random.default_rng(3)))
        assert [b.cid.tolist() for b in out] == [b.cid.tolist() for b in again]
        for b in out:  # node lists travel with their link
            assert all(b.nodes[b.node_ptr[i]] == b.src[i] for i in range(len(b)))
    big = list(blocks.shuffle_pool(iter(src), 100 * one, np.random.default_rng(3)))
    assert len(big) == 1 and big[0].cid.tolist() != list(range(60))  # one pool: a full permutation
    first = next(blocks.shuffle_pool(iter(src), 2 * one, np.random.default_rng(3)))
    assert len(first) == 10 and set(first.cid.tolist()) <= set(range(20))  # half of the first two blocks


# ---------------------------------------------------------------------------- training reads
def test_training_relabels_every_epoch_but_eval_keeps_stored_order(shard_set):
    c = cfg()
    want = stored(shard_set, "train", view=0)
    a, _ = rank_batches(shard_set, 0, 0, 1, c)
    b, _ = rank_batches(shard_set, 2, 0, 1, c)
    a, b = links(a), links(b)
    common = [k for k in a if k in b and len(a[k]) > 4]
    assert any(a[k] != b[k] for k in common)  # same view, new order
    assert any(a[k] != want[k] for k in common)
    assert all(sorted(a[k]) == sorted(want[k]) and a[k][:2] == want[k][:2] for k in a)
    loader = loaders.eval_loader(shard_set, "valid", "original", loaders.LoaderSettings(c, collate=identity))
    got = links(loader)
    assert got == stored(shard_set, "valid") and len(got) == 60


def test_shuffle_is_deterministic_per_seed_and_epoch(shard_set):
    c = cfg()
    a, _ = rank_batches(shard_set, 0, 0, 1, c)
    b, _ = rank_batches(shard_set, 0, 0, 1, c)
    other_epoch, _ = rank_batches(shard_set, 2, 0, 1, c)
    other_seed, _ = rank_batches(shard_set, 0, 0, 1, cfg(seed=5))
    assert cids(a) == cids(b)
    assert [x.nodes.tolist() for x in a] == [x.nodes.tolist() for x in b]
    assert cids(a) != cids(other_epoch) and cids(a) != cids(other_seed)


@pytest.mark.parametrize("world,workers", [(2, 0), (2, 2), (3, 1), (4, 2)])
def test_equal_batch_counts_with_uneven_shards(shard_set, world, workers):
    c = cfg(num_workers=workers, max_samples=4)
    counts, seen = [], collections.Counter()
    for rank in range(world):
        batches, plan = rank_batches(shard_set, 1, rank, world, c)
        counts.append(len(batches))
        assert all(len(b) for b in batches)  # no empty batch: no worker sits empty
        seen.update(cids(batches))
    assert len(set(counts)) == 1 and counts[0] == plan.batches
    n_links = 40 + 40 + 13
    assert plan.batches == -(-max(n_links / 4, data.view_stats(shard_set, 1)[1] / 200) // world)
    # about one pass: nearly every link seen, none more than twice (cycling only tops up a short worker)
    assert len(seen) >= 0.9 * n_links and max(seen.values()) <= 2


def test_one_shard_feeds_every_worker(tmp_path):
    manifest = read_manifest(make_shard_set(tmp_path, shard_links=(30,), views=1))
    c = cfg(num_workers=2, max_samples=2, token_budget=1000)
    per_rank = [rank_batches(manifest, 0, r, 2, c)[0] for r in range(2)]
    assert len(per_rank[0]) == len(per_rank[1]) == 8  # ceil(30 / 2 / 2)
    assert len(set(cids(per_rank[0] + per_rank[1]))) == 30  # slices of one shard over 2 ranks x 2 workers
    per_worker = [
        cids(loaders.eval_loader(manifest, "valid", "original", loaders.LoaderSettings(c, r, 2, collate=identity)))
        for r in range(2)
    ]
    assert all(per_worker) and sorted(sum(per_worker, [])) == list(range(60))


def test_workers_persist_across_epochs_and_evaluations(shard_set):
    """One loader per role: the same worker processes serve every epoch; the sequence equals a fresh loader's."""
    c = cfg(num_workers=2, max_samples=4)
    pids, seqs = set(), []
    for epoch in range(3):
        out, plan = rank_batches(shard_set, epoch, 0, 1, c, collate=pid_and_batch)
        pids |= {p for p, _ in out}
        seqs.append(cids([b for _, b in out]))
        ev = list(loaders.eval_loader(shard_set, "valid", "original", loaders.LoaderSettings(c, collate=pid_and_batch)))
        pids_eval = {p for p, _ in ev}
        if epoch == 0:
            first_eval = pids_eval
        assert pids_eval == first_eval and len(pids_eval) == 2
    assert len(pids) == 2 and os.getpid() not in pids  # two train workers, forked once
    loaders.close_loaders()
    for epoch in range(3):  # fresh loaders (fresh workers) give the same batches
        out, _ = rank_batches(shard_set, epoch, 0, 1, c, collate=pid_and_batch)
        assert cids([b for _, b in out]) == seqs[epoch]
    loaders.close_loaders()


def test_datasets_pickle_for_spawned_workers(shard_set):
    """forkserver/spawn start methods (Python 3.14's default) pickle the dataset into each worker."""
    import pickle

    loader, plan = loaders.train_loader(shard_set, 0, loaders.LoaderSettings(cfg(num_workers=2)))
    clone = pickle.loads(pickle.dumps(loader.dataset))
    args = (0, 1, 0, 0, plan.batches)
    assert [b.cid.tolist() for b in clone.logical_worker(*args)] == [
        b.cid.tolist() for b in loader.dataset.logical_worker(*args)
    ]
    pickle.dumps(loaders.eval_loader(shard_set, "valid", "original", loaders.LoaderSettings(cfg())).dataset)
    loaders.close_loaders()


def test_token_budget_and_cap(shard_set):
    for budget, cap in [(40, 100), (200, 3), (14, 8)]:
        batches, _ = rank_batches(shard_set, 0, 0, 1, cfg(token_budget=budget, max_samples=cap))
        for b in batches:
            assert len(b) <= cap and (b.tokens <= budget or len(b) == 1)


@pytest.mark.parametrize("min_density", [0.0, 2.0])  # always the dense form / always the sparse form
def test_packed_batches_carry_the_induced_graph(shard_set, min_density, monkeypatch):
    """The default collate relabels, induces from the shipped graph and packs: each packed link's
    adjacency is exactly the graph's edges among its (relabelled) nodes, target edge excluded."""
    from common.shards import load_graph
    from trainer.data import packing

    monkeypatch.setattr(packing, "DENSE_MIN_DENSITY", min_density)
    loaders.close_loaders()  # packers are built per loader
    loader, plan = loaders.train_loader(shard_set, 0, loaders.LoaderSettings(cfg()))
    batches = list(loader)
    loaders.close_loaders()
    assert len(batches) == plan.batches
    indptr, indices = load_graph(shard_set)
    adj = {(a, int(b)) for a in range(len(indptr) - 1) for b in indices[indptr[a] : indptr[a + 1]]}
    forms = set()
    for batch in batches:
        assert batch.num_samples <= 8 and batch.num_tokens <= 200 and batch.n_max == 12
        forms.add(batch.dense)
        cu, node = batch.cu_seqlens.tolist(), batch.node.tolist()
        msgs = set(zip(batch.adj_src.tolist(), batch.adj_dst.tolist()))
        for b in range(batch.num_samples):
            N = cu[b + 1] - cu[b] - 2
            ids = node[cu[b] : cu[b] + N]
            want = {(i, j) for i in range(N) for j in range(N) if (ids[i], ids[j]) in adj and {i, j} != {0, 1}}
            if batch.dense:
                a = batch.adj_dense[b].numpy()
                got = {(i, j) for i, j in zip(*np.nonzero(a))}
                assert not a[N:].any() and not a[:, N:].any()  # padding stays empty
            else:
                got = {(s - cu[b], d - cu[b]) for s, d in msgs if cu[b] <= d < cu[b] + N}
            assert got == want
    assert forms == {min_density == 0.0}


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_position_replays_the_same_batches(shard_set, workers):
    c = cfg(num_workers=workers, max_samples=4)
    full, plan = rank_batches(shard_set, 3, 1, 2, c)
    for start in (1, 5, plan.batches - 1):
        rest, _ = rank_batches(shard_set, 3, 1, 2, c, start=start)
        assert [b.cid.tolist() for b in rest] == [b.cid.tolist() for b in full[start:]]
        assert all(np.array_equal(x.nodes, y.nodes) for x, y in zip(rest, full[start:]))  # same relabelling
    loaders.close_loaders()


def test_eval_split_covers_every_candidate_once(shard_set):
    for world, workers in [(1, 0), (2, 2), (3, 0)]:
        c = cfg(num_workers=workers)
        got = [
            cid
            for r in range(world)
            for cid in cids(
                loaders.eval_loader(
                    shard_set, "test", "original", loaders.LoaderSettings(c, r, world, collate=identity)
                )
            )
        ]
        assert sorted(got) == list(range(60))
    loaders.close_loaders()


def test_missing_shard_names_the_file(tmp_path):
    root = make_shard_set(tmp_path, shard_links=(10,), views=1)
    (root / "train-v000-00000.tar").unlink()
    with pytest.raises(data.ShardError, match="train-v000-00000.tar"):
        rank_batches(read_manifest(root), 0, 0, 1, cfg())


@pytest.mark.parametrize("workers", [0, 2])
def test_corrupt_block_names_shard_and_member(tmp_path, workers):
    """A block whose node ids leave the graph fails on first read with one line naming shard and member
    , also when a loader worker process hits it."""
    root = make_shard_set(tmp_path, shard_links=(16,), views=1, block=8)
    manifest = read_manifest(root)
    good = list(read_shard(root / "train-v000-00000.tar"))
    good[1].nodes[good[1].node_ptr[1] + 2 :] = 10**6 if good[1].sizes[1] > 2 else good[1].nodes[2:]
    good[1].nodes[-1] = 10**6
    payload, _ = pack_shard(good)
    (root / "train-v000-00000.tar").write_bytes(payload)
    with pytest.raises(data.ShardError, match=r"train-v000-00000.tar:000001.arrow.*outside") as err:
        rank_batches(manifest, 0, 0, 1, cfg(num_workers=workers))
    assert "\n" not in str(err.value) and str(err.value).startswith(str(root))
    loaders.close_loaders()


def test_memory_budget_too_small_names_the_flag(shard_set):
    with pytest.raises(ConfigError, match="--loader-memory-mb 4: .*raise --loader-memory-mb"):
        loaders.train_loader(
            shard_set, 0, loaders.LoaderSettings(cfg(loader_memory_mb=4, shuffle_buffer_mb=1, token_budget=5000))
        )
    assert loader_budget.prefetch_depth(12, 200, cfg()) == loader_budget.MAX_PREFETCH


def test_eval_batches_are_capped_by_the_memory_budget(shard_set):
    """Eval: no shuffle pool, and a too-large eval budget is lowered (scores do not depend on grouping)."""
    per_token = loader_budget.batch_bytes(12, 1)
    c = cfg(loader_memory_mb=1, eval_token_budget=10**6)
    budget, prefetch = loader_budget.eval_budget(12, c)
    assert budget == 2**20 // (2 * per_token) and prefetch == 1
    loader = loaders.eval_loader(shard_set, "valid", "original", loaders.LoaderSettings(c, collate=identity))
    batches = list(loader)
    assert max(b.tokens for b in batches) <= budget and sorted(cids(batches)) == list(range(60))
    with pytest.raises(ConfigError, match="--loader-memory-mb 1: too small for evaluation batches"):
        loader_budget.eval_budget(10_000, c)
    loaders.close_loaders()


def test_units_of_one_shard_are_read_in_one_pass(shard_set, monkeypatch):
    """A reader holding slices 0 and 2 of 4 gets exactly the links i % 4 in {0, 2}, decoding the shard once."""
    entry = [e for e in shard_set.shards if e["split"] == "valid"][:1]
    units = data.make_units(shard_set, entry, 4)  # 4 x 4 consumers / 1 shard -> 16 slices
    assert units[0].parts == 16
    everything = [int(c) for b in blocks.read_blocks(units, 1000, 12) for c in b.cid]
    opened = []
    monkeypatch.setattr(blocks, "open_url", lambda url: opened.append(url) or open(url.removeprefix("file://"), "rb"))
    mine = [units[0], units[2], units[5]]
    got = [int(c) for b in blocks.read_blocks(mine, 1000, 12) for c in b.cid]
    assert got == [c for i, c in enumerate(everything) if i % 16 in (0, 2, 5)] and len(opened) == 1


@pytest.mark.parametrize("prefix", ["file://", "pipe:cat "])
def test_shards_open_through_url_openers(shard_set, prefix):
    """Shard paths go through webdataset's gopen, so URL schemes (file://, pipe:, http(s), ...) read the same."""
    remote = dataclasses.replace(shard_set, root=prefix + shard_set.root)
    entries = [e for e in shard_set.shards if e["split"] == "valid"]
    got = [int(c) for b in blocks.read_blocks(data.make_units(remote, entries, 1), 1000, 12) for c in b.cid]
    assert sorted(got) == list(range(60))
