"""The Ray preprocessing job: end to end on citeseer, cache, resume after a kill, corrupt shards."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from common.datasets import DatasetError
from common.datasets.spec import DatasetSpec
from common.induce import Inducer
from common.shards import (
    MANIFEST,
    ShardError,
    cache_key,
    iter_tar_blocks,
    load_graph,
    load_queries,
    read_manifest,
    read_shard,
    shard_entries,
    verify_shard,
)
from preprocess.__main__ import main
from preprocess.config import CandidateConfig, ConfigError, PreprocessConfig, SamplingConfig
from preprocess.job import run_job
from preprocess.plan import candidate_sets
from tests.conftest import kill_driver_after, needs_ray


@pytest.fixture(scope="module")
def citeseer():
    from common.datasets import DatasetSpec, load_dataset

    return load_dataset(DatasetSpec("citeseer"))


def small_config(out, **kw) -> PreprocessConfig:
    kw.setdefault("candidates", CandidateConfig(views=2))
    kw.setdefault("num_cpus", 2)
    return PreprocessConfig(data=DatasetSpec("citeseer"), sampling=SamplingConfig(1, 5), out=str(out), **kw)


def blocks_of(path):
    with open(path, "rb") as f:
        return list(iter_tar_blocks(f, str(path)))


# ---------------------------------------------------------------------------- end to end
def test_citeseer_end_to_end_two_workers(ray_session, citeseer, tmp_path, capsys):
    config = small_config(tmp_path, links_per_shard=32768)
    result = run_job(config, citeseer)
    assert not result.cached and result.summary["shards_sampled"] == result.summary["shards"]
    m = read_manifest(result.path)
    assert result.path == tmp_path / "citeseer" / m.key
    assert m.n_max == 12 and m.num_nodes == citeseer.num_nodes and m.dataset == "citeseer"
    assert set(m.eval) == {"valid/original", "valid/heart", "test/original", "test/heart"}
    assert m.eval["valid/heart"]["kind"] == "per_positive" and m.eval["test/original"]["kind"] == "shared"
    assert m.eval["test/heart"]["metric"] == "mrr" and m.eval["test/heart"]["ogb"] is False
    assert m.config["sampling"] == {"d": 1, "n": 5, "n_max": 12}
    # The graph ships with the set, and it is the graph the links were sampled on.
    indptr, indices = load_graph(m, "train")
    assert np.array_equal(indptr, citeseer.graph.indptr) and np.array_equal(indices, citeseer.graph.indices)
    inducer = Inducer(indptr, indices)

    sets = {(cs.split, cs.protocol, cs.view): cs.cands for cs in candidate_sets(config, citeseer, m.protocols)}
    assert len([k for k in sets if k[0] == "train"]) == 2
    for (split, protocol, view), cands in sets.items():
        entries = shard_entries(m, split, protocol, view)
        assert entries and sum(e["links"] for e in entries) == len(cands)
        seen = np.zeros(len(cands), dtype=int)
        for e in entries:
            path = result.path / e["name"]
            verify_shard(path, e["sha256"])
            assert path.stat().st_size == e["bytes"]
            for b in blocks_of(path):
                seen[b.cid] += 1
                first = b.node_ptr[:-1]
                assert np.array_equal(b.nodes[first], b.src) and np.array_equal(b.nodes[first + 1], b.dst)
                assert np.array_equal(b.src, cands.src[b.cid]) and np.array_equal(b.label, cands.label[b.cid])
                _, edges = inducer.edges(b.node_ptr, b.nodes)
                assert not np.any((edges[:, 0] == 0) & (edges[:, 1] == 1))  # target edge removed
                assert np.diff(b.node_ptr).max() <= m.n_max
        assert np.all(seen == 1)
        if split != "train":
            pos_cid, neg_cid = load_queries(result.path / m.eval[f"{split}/{protocol}"]["queries"])
            assert np.array_equal(pos_cid, cands.pos_cid) and np.array_equal(neg_cid, cands.neg_cid)
    # Training views are independent draws.
    assert not np.array_equal(sets[("train", None, 0)].dst, sets[("train", None, 1)].dst)

    # The immediate rerun samples nothing, through the API and through the CLI.
    assert run_job(config, citeseer).cached
    rc = main(
        [
            "--dataset",
            "citeseer",
            "--sampling",
            "1,5",
            "--out",
            str(tmp_path),
            "--links-per-shard",
            "32768",
            "--num-cpus",
            "2",
            "-q",
        ]
    )
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and out[-1] == f"shards cached (nothing sampled): {result.path}"


# ---------------------------------------------------------------------------- resume and corruption
def resume_config(out):
    return small_config(out, links_per_shard=1024, candidates=CandidateConfig(views=2, protocols=("original",)))


@pytest.fixture(scope="module")
def reference_set(ray_session, citeseer, tmp_path_factory):
    """An uninterrupted run to compare resumed runs against."""
    return run_job(resume_config(tmp_path_factory.mktemp("ref")), citeseer)


def tar_bytes(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.glob("*.tar"))}


def test_resume_after_killed_run(reference_set, citeseer, tmp_path, monkeypatch):
    config = resume_config(tmp_path)
    total = reference_set.summary["shards"]
    assert total >= 10
    with monkeypatch.context() as m:
        kill_driver_after(m, 4)
        with pytest.raises(RuntimeError, match="simulated kill"):
            run_job(config, citeseer)
    out = tmp_path / "citeseer" / reference_set.path.name
    assert not (out / MANIFEST).exists()
    finished = len(list(out.glob("*.tar")))
    assert 4 <= finished < total

    result = run_job(config, citeseer)
    s = result.summary
    assert s["shards_reused"] >= 4 and s["shards_sampled"] == total - s["shards_reused"]
    assert s["shards_sampled"] > 0
    assert tar_bytes(result.path) == tar_bytes(reference_set.path)
    assert read_manifest(result.path).shards == read_manifest(reference_set.path).shards
    assert not list(result.path.glob(".*.tmp"))


def test_corrupt_shard_is_named_and_rebuilt(reference_set, citeseer, tmp_path):
    out = tmp_path / "citeseer"
    shutil.copytree(reference_set.path, out / reference_set.path.name)
    shard_dir = out / reference_set.path.name
    victim = shard_dir / "train-v000-00002.tar"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    with pytest.raises(ShardError, match="train-v000-00002.tar"):
        list(read_shard(victim))
    record = next(r for r in read_manifest(shard_dir).shards if r["name"] == victim.name)
    with pytest.raises(ShardError, match="train-v000-00002.tar"):
        verify_shard(victim, record["sha256"])

    # A rerun of an incomplete set re-samples the corrupt shard and keeps the good ones.
    (shard_dir / MANIFEST).unlink()
    result = run_job(resume_config(tmp_path), citeseer)
    assert result.summary["shards_sampled"] == 1
    assert victim.read_bytes() == data


def test_force_rebuilds(reference_set, citeseer, tmp_path):
    shutil.copytree(reference_set.path, tmp_path / "citeseer" / reference_set.path.name)
    result = run_job(replace(resume_config(tmp_path), force=True), citeseer)
    assert not result.cached and result.summary["shards_reused"] == 0
    assert tar_bytes(result.path) == tar_bytes(reference_set.path)


# ---------------------------------------------------------------------------- configuration
def test_cache_key_changes_with_every_input():
    base = small_config("out")
    parts = lambda c, fp="fp", protos=("original", "heart"): cache_key(c.key_parts(fp, list(protos)))
    key = parts(base)
    variants = [
        parts(base, fp="other"),
        parts(base, protos=("original",)),
        parts(replace(base, data=DatasetSpec("cora"))),
        parts(replace(base, sampling=SamplingConfig(2, 5))),
        parts(replace(base, sampling=SamplingConfig(1, 6))),
        parts(replace(base, data=DatasetSpec("citeseer", seed=1))),
        parts(replace(base, data=DatasetSpec("citeseer", features=True))),
        parts(replace(base, links_per_shard=4096)),
        parts(replace(base, links_per_block=128)),
        parts(replace(base, shard_mb=1.0)),
        parts(replace(base, candidates=CandidateConfig(views=3))),
        parts(replace(base, candidates=CandidateConfig(percent=50))),
        parts(replace(base, candidates=CandidateConfig(neg_ratio=2))),
        parts(replace(base, candidates=CandidateConfig(splits=("train",)))),
        parts(replace(base, data=DatasetSpec("citeseer", split=(70.0, 10.0, 20.0)))),
        parts(replace(base, data=DatasetSpec("citeseer", split=(80, 10, 10)))),
        parts(replace(base, data=DatasetSpec("citeseer", node_features="x.csv"))),  # whether it ships a table
    ]
    assert key not in variants and len(set(variants)) == len(variants)
    # How the work runs does not change what it produces.
    assert parts(replace(base, num_cpus=7, force=True, out="elsewhere", worker_memory_mb=9000)) == key
    # --split 85,5,10 is the default split: it finds the set built without the flag
    assert parts(replace(base, data=DatasetSpec("citeseer", split=(85, 5, 10)))) == key
    # The graph's other inputs act through the fingerprint (what they change in the data), not their paths.
    other_inputs = DatasetSpec(
        "citeseer",
        split_kind="random",
        eval_pairs="p.csv",
        train_negatives="n.csv",
        ignore_columns=("weight",),
        node_features="elsewhere/x.csv",
    )
    assert parts(replace(base, data=other_inputs)) == parts(
        replace(base, data=DatasetSpec("citeseer", node_features="x.csv"))
    )


def test_split_flag_gives_another_shard_set(tmp_path):
    """--split enters the key twice over: the flag itself and the split arrays the dataset fingerprint hashes."""
    from common.datasets import DatasetSpec, load_dataset

    rng = np.random.default_rng(0)
    edges = {(int(a), int(b)) for a, b in rng.integers(0, 60, (300, 2)) if a != b}
    path = tmp_path / "g.csv"
    path.write_text("src,dst\n" + "\n".join(f"{a},{b}" for a, b in sorted(edges)) + "\n")
    keys = {}
    for split in (None, (85, 5, 10), (70, 10, 20)):
        config = PreprocessConfig(
            data=DatasetSpec(str(path), split=split), sampling=SamplingConfig(1, 5), out=str(tmp_path)
        )
        ds = load_dataset(config.data)
        keys[split] = cache_key(config.key_parts(ds.fingerprint(), ["original"]))
    assert keys[None] == keys[(85, 5, 10)] != keys[(70, 10, 20)]


def test_shards_are_bounded_in_bytes_as_well_as_links():
    # (1,350): N_max 702; worst case per link 40 + 702 * 2 bytes (uint16 ids below 65,536 nodes)
    c = PreprocessConfig(
        data=DatasetSpec("x"), sampling=SamplingConfig(1, 350), links_per_shard=8192, links_per_block=64, shard_mb=1.0
    )
    assert c.shard_links(4267) == 2**20 // (40 + 702 * 2) == 726
    assert c.shard_links(10**6) == 2**20 // (40 + 702 * 4)
    assert replace(c, shard_mb=1e-3).shard_links(4267) == 64  # never below one block
    assert replace(c, shard_mb=64.0).shard_links(4267) == 8192


def test_worker_memory_budget_is_checked_before_any_work(citeseer, tmp_path):
    config = small_config(tmp_path, worker_memory_mb=100)
    with pytest.raises(ConfigError, match=r"--worker-memory-mb 100: one shard task needs about \d+ MB"):
        run_job(config, citeseer)
    assert not (tmp_path / "citeseer").exists() or not any((tmp_path / "citeseer").rglob("*.tar"))


@pytest.mark.parametrize(
    "kwargs, flag",
    [
        ({"sampling": "0,5"}, "--sampling"),
        ({"views": 0}, "--views"),
        ({"percent": 0}, "--percent"),
        ({"neg_ratio": -1}, "--neg-ratio"),
        ({"splits": ("train", "dev")}, "--splits"),
        ({"protocols": ("hart",)}, "--protocol"),
        ({"seed": -1}, "--seed"),
        ({"num_cpus": 0}, "--num-cpus"),
        ({"links_per_shard": 10}, "--links-per-shard"),
        ({"links_per_block": 0}, "--block-size"),
        ({"shard_mb": 0}, "--shard-mb"),
        ({"worker_memory_mb": 0}, "--worker-memory-mb"),
        ({"valid_pool": -1}, "--valid-pool"),
        ({"split": (90, 10, 0)}, "--split 90,10,0: valid and test must be above 0"),
        ({"split": (80, 10, 20)}, "--split 80,10,20: the percentages sum to 110"),
    ],
)
def test_config_errors_name_the_flag(kwargs, flag):
    of_the_data = bool(set(kwargs) & {"seed", "valid_pool", "split"})  # checked by the data's spec
    with pytest.raises(DatasetError if of_the_data else ConfigError, match=flag):
        if "sampling" in kwargs:
            SamplingConfig.parse(kwargs["sampling"])
        elif set(kwargs) & {"views", "percent", "neg_ratio", "splits", "protocols"}:
            CandidateConfig(**kwargs)
        elif of_the_data:
            DatasetSpec("citeseer", **kwargs)
        else:
            small_config("out", **kwargs)


def test_cli_help_lists_the_common_flags_and_help_all_every_flag(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    short = capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--help-all"])
    every = capsys.readouterr().out
    common = ("--dataset", "--sampling", "--views", "--protocol", "--out", "--force", "--split", "--nodes")
    advanced = (
        "--splits",
        "--seed",
        "--num-cpus",
        "--percent",
        "--neg-ratio",
        "--links-per-shard",
        "--block-size",
        "--data-dir",
        "--ogb-root",
        "--planetoid-dir",
        "--shard-mb",
        "--worker-memory-mb",
        "--debug",
    )
    assert all(f in short for f in common) and not any(f"{f} " in short for f in advanced)
    assert all(f in every for f in common + advanced)


# ---------------------------------------------------------------------------- ray job submit (slow)
@pytest.mark.slow
@needs_ray
def test_ray_job_submit_against_local_cluster(ray_head, tmp_path):
    """`ray job submit --working-dir . -- python -m preprocess ...` attaches to a `ray start --head` cluster
    (the ray_head fixture, bench/local_ray.py)."""
    out = tmp_path / "shards"
    job = (
        "python",
        "-m",
        "preprocess",
        "--dataset",
        "citeseer",
        "--sampling",
        "1,5",
        "--protocol",
        "original",
        "--out",
        str(out),
    )
    first = ray_head.submit(*job)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "attaching to the cluster" in first.stdout + first.stderr
    (shard_dir,) = list((out / "citeseer").iterdir())
    m = read_manifest(shard_dir)
    assert len(shard_entries(m, "train")) >= 2
    assert f"shards written: {shard_dir}" in first.stdout
    second = ray_head.submit(*job)
    assert second.returncode == 0 and f"shards cached (nothing sampled): {shard_dir}" in second.stdout
