"""trainer.data: views per epoch, relabelling, deterministic shuffling, equal batch counts, budgets, resume.

Shard sets here are hand-written with common.shards (fast, any shape we need: uneven shards, one shard,
several views); the real citeseer set built by preprocess is exercised in test_trainer_loop/ddp.
"""
from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest

from common.shards import (Block, LocalStorage, encode_array, encode_queries, eval_shard_name, graph_entry,
                           graph_names, pack_shard, queries_name, read_manifest, train_shard_name, write_manifest)
from trainer import data
from trainer.config import DataConfig


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
    return Block(cid=np.asarray(cids, np.int64), src=np.asarray(src, np.int64), dst=np.asarray(dst, np.int64),
                 label=np.asarray(lab, np.float32), node_ptr=np.asarray(node_ptr, np.int64),
                 nodes=np.concatenate(nodes))


def csr(num_nodes: int, edges) -> tuple[np.ndarray, np.ndarray]:
    """Undirected, deduplicated CSR with sorted rows (what preprocess ships), from (a, b) pairs."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    e = e[e[:, 0] != e[:, 1]]
    both = np.unique(np.concatenate([e, e[:, ::-1]]), axis=0)
    indptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(np.bincount(both[:, 0], minlength=num_nodes), out=indptr[1:])
    return indptr, both[:, 1].astype(np.int32)


def make_shard_set(root: Path, shard_links=(40, 40, 13), views: int = 2, n_max: int = 12, block: int = 8,
                   eval_links: int = 60, num_nodes: int = 1000, seed: int = 0) -> Path:
    """A complete v2 shard set: `views` training views with the given links per shard, valid/test
    original-protocol eval sets (positives ranked against shared negatives), and the training graph
    (the union of every link's planted edges) shipped as graph-train-*.npy."""
    rng = np.random.default_rng(seed)
    storage = LocalStorage(root)
    records, planted = [], []

    def write(name, split, protocol, view, cids, labels=None):
        blocks = [_block(rng, cids[i:i + block], n_max, num_nodes, planted,
                         None if labels is None else labels[i:i + block]) for i in range(0, len(cids), block)]
        payload, stats = pack_shard(blocks)
        storage.write_atomic(name, payload)
        records.append({"name": name, "split": split, "protocol": protocol, "view": view, "links": stats["links"],
                        "tokens": stats["tokens"], "bytes": stats["bytes"], "sha256": stats["sha256"]})

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
        evals[f"{split}/original"] = {"queries": queries_name(split, "original"), "kind": "shared",
                                      "metric": "mrr", "ogb": False}
    indptr, indices = csr(num_nodes, planted)
    for name, arr in zip(graph_names("train"), (indptr, indices)):
        storage.write_atomic(name, encode_array(arr))
    sets = [{"split": s, "protocol": p, "view": v, "graph": "train"}
            for s, p, v in {(r["split"], r["protocol"], r["view"]) for r in records}]
    write_manifest(storage, {"key": "synthetic", "dataset": "synthetic", "shards": records, "n_max": n_max,
                             "num_nodes": num_nodes, "views": views, "eval": evals, "sets": sets,
                             "graphs": {"train": graph_entry("train", indptr, indices)}})
    return root


@pytest.fixture(scope="module")
def shard_set(tmp_path_factory) -> dict:
    return read_manifest(make_shard_set(tmp_path_factory.mktemp("shards")))


def cfg(**kw) -> DataConfig:
    base = dict(shards="unused", max_samples=8, token_budget=200, eval_token_budget=400, shuffle_buffer=16,
                num_workers=0, seed=0)
    base.update(kw)
    return DataConfig(**base)


def identity(samples):
    return samples


def rank_batches(manifest, epoch, rank, world, c, start=0):
    """The batches one rank's loader yields (lists of sample dicts)."""
    loader, plan = data.train_loader(manifest, epoch, rank, world, c, start=start, collate=identity)
    return list(loader), plan


# ---------------------------------------------------------------------------- tests
def test_epoch_reads_view_e_mod_v(shard_set):
    for epoch in range(5):
        plan = data.plan_epoch(shard_set, epoch, 1, 0, 200, 8, seed=0)
        assert plan.view == epoch % 2
        assert {Path(u.url).name for u in plan.units} == {f"train-v{epoch % 2:03d}-{i:05d}.tar" for i in range(3)}


def test_relabel_keeps_endpoints_and_graph(shard_set):
    rng = np.random.default_rng(1)
    samples = [s for s in data.read_units(data.make_units(shard_set, [shard_set["shards"][0]], 1)) if len(s["nodes"]) > 4]
    assert samples
    for s in samples:
        r = data.relabel(s, rng)
        assert r["nodes"][0] == s["nodes"][0] and r["nodes"][1] == s["nodes"][1]  # u = 0, v = 1
        assert sorted(r["nodes"]) == sorted(s["nodes"])
        # same graph over global ids: the edge set maps consistently
        glob = lambda x: {frozenset((int(x["nodes"][a]), int(x["nodes"][b]))) for a, b in x["edges"]}
        assert glob(r) == glob(s)
    orders = {tuple(data.relabel(samples[0], rng)["nodes"]) for _ in range(20)}
    assert len(orders) > 1  # a fresh order per read


def test_training_relabels_every_epoch_but_eval_keeps_stored_order(shard_set):
    c = cfg()
    stored = {s["cid"]: tuple(s["nodes"]) for s in data.read_units(
        data.make_units(shard_set, [e for e in shard_set["shards"] if e["view"] == 0], 1))}
    first, _ = rank_batches(shard_set, 0, 0, 1, c)
    third, _ = rank_batches(shard_set, 2, 0, 1, c)
    a = {s["cid"]: tuple(s["nodes"]) for b in first for s in b}
    b = {s["cid"]: tuple(s["nodes"]) for b in third for s in b}
    common = [k for k in a if k in b and len(a[k]) > 4]
    assert any(a[k] != b[k] for k in common)  # same view, new order
    assert any(a[k] != stored[k] for k in common)
    loader = data.eval_loader(shard_set, "valid", "original", 0, 1, c, collate=identity)
    got = {s["cid"]: tuple(s["nodes"]) for batch in loader for s in batch}
    want = {s["cid"]: tuple(s["nodes"]) for s in data.read_units(data.make_units(
        shard_set, [e for e in shard_set["shards"] if e["split"] == "valid"], 1))}
    assert got == want and len(got) == 60


def test_shuffle_is_deterministic_per_seed_and_epoch(shard_set):
    c = cfg()
    cids = lambda bs: [s["cid"] for b in bs for s in b]
    a, _ = rank_batches(shard_set, 0, 0, 1, c)
    b, _ = rank_batches(shard_set, 0, 0, 1, c)
    other_epoch, _ = rank_batches(shard_set, 2, 0, 1, c)
    other_seed, _ = rank_batches(shard_set, 0, 0, 1, cfg(seed=5))
    assert cids(a) == cids(b)
    assert [tuple(s["nodes"]) for x in a for s in x] == [tuple(s["nodes"]) for x in b for s in x]
    assert cids(a) != cids(other_epoch) and cids(a) != cids(other_seed)


@pytest.mark.parametrize("world,workers", [(2, 0), (2, 2), (3, 1), (4, 2)])
def test_equal_batch_counts_with_uneven_shards(shard_set, world, workers):
    c = cfg(num_workers=workers, max_samples=4)
    counts, seen = [], collections.Counter()
    for rank in range(world):
        batches, plan = rank_batches(shard_set, 1, rank, world, c)
        counts.append(len(batches))
        assert all(b for b in batches)  # no empty batch: no worker sits empty
        seen.update(s["cid"] for b in batches for s in b)
    assert len(set(counts)) == 1 and counts[0] == plan.batches
    links = 40 + 40 + 13
    assert plan.batches == -(-max(links / 4, data.view_stats(shard_set, 1)[1] / 200) // world)
    # about one pass: nearly every link seen, none more than twice (cycling only tops up a short worker)
    assert len(seen) >= 0.9 * links and max(seen.values()) <= 2


def test_one_shard_feeds_every_worker(tmp_path):
    manifest = read_manifest(make_shard_set(tmp_path, shard_links=(30,), views=1))
    c = cfg(num_workers=2, max_samples=2, token_budget=1000)
    per_rank = [rank_batches(manifest, 0, r, 2, c)[0] for r in range(2)]
    assert len(per_rank[0]) == len(per_rank[1]) == 8  # ceil(30 / 2 / 2)
    cids = [s["cid"] for bs in per_rank for b in bs for s in b]
    assert len(set(cids)) == 30  # slices of one shard spread over 2 ranks x 2 workers, all read
    loader = [data.eval_loader(manifest, "valid", "original", r, 2, c, collate=identity) for r in range(2)]
    per_worker = [[s["cid"] for b in ld for s in b] for ld in loader]
    assert all(per_worker) and sorted(sum(per_worker, [])) == list(range(60))


def test_datasets_pickle_for_spawned_workers(shard_set):
    """forkserver/spawn start methods (Python 3.14's default) pickle the dataset into each worker."""
    import pickle

    loader, _ = data.train_loader(shard_set, 0, 0, 1, cfg(num_workers=2))
    clone = pickle.loads(pickle.dumps(loader.dataset))
    assert [b.cid.tolist() for b in clone.logical_worker(0, 1)] == [b.cid.tolist() for b in loader.dataset.logical_worker(0, 1)]
    pickle.dumps(data.eval_loader(shard_set, "valid", "original", 0, 1, cfg()).dataset)


def test_token_budget_and_cap(shard_set):
    for budget, cap in [(40, 100), (200, 3), (14, 8)]:
        batches, _ = rank_batches(shard_set, 0, 0, 1, cfg(token_budget=budget, max_samples=cap))
        for b in batches:
            assert len(b) <= cap
            assert sum(len(s["nodes"]) + 2 for s in b) <= budget


def test_packed_batches_carry_the_samples(shard_set):
    loader, plan = data.train_loader(shard_set, 0, 0, 1, cfg())
    batches = list(loader)
    assert len(batches) == plan.batches
    b = batches[0]
    assert b.num_samples <= 8 and b.num_tokens <= 200 and b.n_max == 12


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_position_replays_the_same_batches(shard_set, workers):
    c = cfg(num_workers=workers, max_samples=4)
    full, plan = rank_batches(shard_set, 3, 1, 2, c)
    for start in (1, 5, plan.batches - 1):
        rest, _ = rank_batches(shard_set, 3, 1, 2, c, start=start)
        assert [[s["cid"] for s in b] for b in rest] == [[s["cid"] for s in b] for b in full[start:]]
        assert all(np.array_equal(x["nodes"], y["nodes"]) for b1, b2 in zip(rest, full[start:]) for x, y in zip(b1, b2))


def test_eval_split_covers_every_candidate_once(shard_set):
    for world, workers in [(1, 0), (2, 2), (3, 0)]:
        c = cfg(num_workers=workers)
        cids = [s["cid"] for r in range(world) for b in data.eval_loader(shard_set, "test", "original", r, world, c,
                                                                        collate=identity) for s in b]
        assert sorted(cids) == list(range(60))


def test_missing_shard_names_the_file(tmp_path):
    root = make_shard_set(tmp_path, shard_links=(10,), views=1)
    (root / "train-v000-00000.tar").unlink()
    with pytest.raises(data.ShardError, match="train-v000-00000.tar"):
        rank_batches(read_manifest(root), 0, 0, 1, cfg())


@pytest.mark.parametrize("prefix", ["file://", "pipe:cat "])
def test_shards_open_through_url_openers(shard_set, prefix):
    """Shard paths go through webdataset's gopen, so URL schemes (file://, pipe:, http(s), ...) read the same."""
    remote = {**shard_set, "root": prefix + shard_set["root"]}
    entries = [e for e in shard_set["shards"] if e["split"] == "valid"]
    got = [s["cid"] for s in data.read_units(data.make_units(remote, entries, 1))]
    assert sorted(got) == list(range(60))
