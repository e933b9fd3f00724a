"""Two-process runs: gloo sharding and eval gather (fast, torch.multiprocessing), the torchrun CLI on
synthetic shards (fast), and on real citeseer shards built by preprocess (slow): training, loss going
down, metrics clearly above a random scorer's (computed on the same eval queries), and a SIGKILL'd run
resumed to the same trajectory.

Policy for machines with fewer GPUs than ranks (a one-GPU CI box included): these tests run gloo ranks
with --device cpu; the trainer refuses more NCCL ranks than GPUs in one line (tests/test_trainer_cli_errors.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from tests.conftest import cached_set
from tests.test_trainer_data import make_shard_set

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------- fast: 2 ranks in-process (spawn)
def cids_of(batch) -> list[int]:
    """Collate to candidate ids: a shard-format-v2 Block (columnar) or a list of sample dicts."""
    if hasattr(batch, "cid"):
        return [int(c) for c in batch.cid]
    return [s["cid"] for s in batch]


def random_baseline(shards: Path, split: str, protocol: str = "original", draws: int = 200) -> dict:
    """Mean and std over `draws` random scorings of each metric, on the shard set's own eval queries."""
    from common.metrics import evaluate
    from common.shards import load_queries

    pos, neg = load_queries(Path(shards) / f"{split}-{protocol}-queries.npz")
    rng = np.random.default_rng(0)
    size = int(max(pos.max(), neg.max())) + 1
    runs = [
        evaluate(protocol, *(lambda t: (t[pos], t[neg]))(rng.random(size).astype(np.float32))) for _ in range(draws)
    ]
    return {k: (float(np.mean([r[k] for r in runs])), float(np.std([r[k] for r in runs]))) for k in runs[0]}


def params_sum(model: torch.nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def _worker(rank: int, world: int, port: int, shards: str, out: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    torch.set_num_threads(1)
    from common.shards import read_manifest
    from tests.test_trainer_loop import CidScorer
    from trainer import distributed
    from trainer.config import config_for
    from trainer.config_sections import DataConfig
    from trainer.data import loaders
    from trainer.evaluate import evaluate_split
    from trainer.train import Trainer

    info = distributed.init_distributed("cpu")
    manifest = read_manifest(shards)
    # In-process loading: loader workers of a spawned rank are spawned too and re-import torch (~10 s
    # each on a busy 2-core box); worker loading under DDP is covered by the torchrun tests (fork).
    c = DataConfig(shards=shards, max_samples=4, token_budget=200, eval_token_budget=100, num_workers=0)
    result = {"batches": [], "eval": {}, "t": [time.time()]}
    for epoch in range(3):  # uneven shards, both views
        loader, plan = loaders.train_loader(
            manifest, epoch, loaders.LoaderSettings(c, info.rank, info.world_size, collate=cids_of)
        )
        result["batches"].append(len(list(loader)))
        result["t"].append(time.time())
    result["eval"] = evaluate_split(CidScorer(), manifest, "valid", "original", c, info)
    gathered = distributed.all_gather_cat(torch.arange(rank * 3 + 1), info)  # lengths 1 and 4
    result["gathered"] = gathered.tolist()
    trainer = Trainer(
        config_for(
            "tiny",
            shards,
            out,
            epochs=2,
            log_every=1,
            progress=False,
            max_steps=6,
            device="cpu",
            data={"num_workers": 0, "max_samples": 4},
            optim={"effective_batch": 16},
        ),
        info,
    )
    result["param_sum_init"] = params_sum(trainer.core)
    summary = trainer.fit()
    result["t"].append(time.time())
    result["summary_steps"] = summary.steps
    result["accumulation"] = summary.accumulation
    result["param_sum"] = params_sum(trainer.core)  # this rank's live replica, not a file both read
    from trainer import checkpoint

    saved = checkpoint.load(Path(out) / "last.pt")["model"]
    result["saved_sum"] = float(sum(v.double().sum() for v in saved.values()))
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    distributed.cleanup()


def test_two_gloo_ranks_share_data_and_eval(tmp_path):
    shards = make_shard_set(tmp_path / "shards", shard_links=(50, 50, 17), eval_links=60)
    out = tmp_path / "run"
    out.mkdir()
    mp.spawn(_worker, args=(2, free_port(), str(shards), str(out)), nprocs=2, join=True)
    r0, r1 = (json.loads((out / f"rank{r}.json").read_text()) for r in range(2))
    assert r0["batches"] == r1["batches"] and min(r0["batches"]) > 0  # equal counts per epoch, no hang
    assert r0["gathered"] == r1["gathered"] == [0, 0, 1, 2, 3]
    # eval over two ranks == common.metrics on the full score table
    from common.metrics import evaluate
    from common.shards import load_queries

    pos, neg = load_queries(shards / "valid-original-queries.npz")
    f = lambda ids: np.sin(ids.astype(np.float64) * 1.7).astype(np.float32)
    assert r0["eval"] == r1["eval"] == evaluate("original", f(pos), f(neg))
    assert r0["summary_steps"] == 6 and r0["accumulation"] == 2  # 16 links = 4 x 2 micro x 2 ranks
    # each rank saw different links, so equal replicas after 6 steps means DDP averaged the gradients; and
    # they moved from the (identical) init; rank 0's checkpoint holds exactly those weights
    assert r0["param_sum_init"] == r1["param_sum_init"] and r0["param_sum"] == r1["param_sum"]
    assert r0["param_sum"] != r0["param_sum_init"] and r0["saved_sum"] == r0["param_sum"]
    assert (out / "summary.json").exists() and (out / "best.pt").exists()


# ---------------------------------------------------------------------------- torchrun CLI
def torchrun(shards, out, *extra, timeout=600) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "trainer",
        "--shards",
        str(shards),
        "--out",
        str(out),
        "--no-progress",
        "--log-every",
        "1",
        "--device",
        "cpu",
        *extra,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res


def losses(run_dir: Path) -> dict[int, float]:
    from trainer.metrics_log import read_metrics

    return {r["step"]: r["loss"] for r in read_metrics(run_dir / "metrics.jsonl", "train")}  # last write wins


def test_torchrun_cli_on_synthetic_shards(tmp_path):
    shards = make_shard_set(tmp_path / "shards", shard_links=(128, 128, 40), eval_links=60)
    res = torchrun(shards, tmp_path / "run", "--preset", "tiny", "--epochs", "3", "--num-workers", "1")
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert summary["world_size"] == 2 and summary["epochs_completed"] == 3
    mean, std = random_baseline(shards, "valid")["mrr"]
    assert summary["valid"]["mrr"] > mean + 4 * std, (summary["valid"], mean, std)  # learned, not luck
    assert "attention backend" in res.stderr and "world size 2" in res.stderr
    assert json.loads(res.stdout)["steps"] == summary["steps"]  # the CLI prints the summary
    ls = list(losses(tmp_path / "run").values())
    assert np.mean(ls[-3:]) < np.mean(ls[:3])


# ---------------------------------------------------------------------------- slow: real citeseer shards
@pytest.fixture(scope="module")
def citeseer_shards(shard_cache) -> Path:
    """citeseer, sampling (1, 5) (the `tiny` preset's N_max 12), 2 views, built once by preprocess (or found
    in the shard cache: tests/conftest.py)."""
    out = cached_set(shard_cache, "ddp")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "preprocess",
            "--dataset",
            "citeseer",
            "--sampling",
            "1,5",
            "--views",
            "2",
            "--protocol",
            "original",
            "--out",
            str(out),
            "--num-cpus",
            "2",
            "-q",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return Path(res.stdout.strip().splitlines()[-1].split()[-1])


@pytest.mark.slow
def test_torchrun_trains_on_citeseer(citeseer_shards, tmp_path):
    torchrun(citeseer_shards, tmp_path / "run", "--preset", "tiny", "--max-steps", "120", "--num-workers", "1")
    ls = list(losses(tmp_path / "run").values())
    assert len(ls) == 120 and np.mean(ls[-20:]) < np.mean(ls[:20]) - 0.05
    s = json.loads((tmp_path / "run/summary.json").read_text())
    base = random_baseline(citeseer_shards, "test")
    for metric in ("mrr", "hits@100"):  # test at the best validation epoch vs a random scorer on the same queries
        mean, std = base[metric]
        assert s["test"][metric] > mean + 4 * std, (metric, s["test"][metric], mean, std)


@pytest.mark.slow
def test_killed_torchrun_resumes_exactly(citeseer_shards, tmp_path):
    total = 120  # wide enough that a kill lands before the end on a fast machine with a busy neighbour
    args = [
        "--preset",
        "tiny",
        "--max-steps",
        str(total),
        "--num-workers",
        "1",
        "--checkpoint-every",
        "10",
        "--eval-splits",
        "valid",
        "--device",
        "cpu",
    ]
    torchrun(citeseer_shards, tmp_path / "full", *args)
    cut = tmp_path / "cut"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "trainer",
        "--shards",
        str(citeseer_shards),
        "--out",
        str(cut),
        "--no-progress",
        "--log-every",
        "1",
        *args,
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    from pipelines.auto.pace import last_step
    from trainer import checkpoint

    # step 21 logged means step 20's last.pt is on disk: the trainer saves right after logging a step. The log's
    # tail is a cheap poll (loading last.pt is not), so the kill lands within a step or two on a fast machine.
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and (last_step(cut) or 0) < 21:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole torchrun group, mid-training
    proc.wait()
    killed_at = checkpoint.load(cut / "last.pt")["state"]["step"]
    assert 20 <= killed_at < total, f"the kill came at step {killed_at} of {total}: nothing left to resume"
    torchrun(citeseer_shards, cut, *args, "--resume")
    a, b = losses(tmp_path / "full"), losses(cut)
    steps = range(killed_at + 1, total + 1)
    assert [a[s] for s in steps] == [b[s] for s in steps]
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (tmp_path / "full", cut))
    assert sa["last_eval"] == sb["last_eval"]


# ---------------------------------------------------------------------------- CUDA: NCCL
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_one_nccl_rank_trains_like_a_single_process(tmp_path):
    """torchrun with one rank on CUDA: a real NCCL process group (world size 1) and DDP around the model, through
    the trainer CLI. One rank's DDP all-reduce averages one gradient, so the run must follow the plain CUDA
    process's trajectory: the same losses to bf16-autocast / atomic-add rounding (1e-3 relative, as the CUDA
    resume test) and the same final weights."""
    shards = make_shard_set(tmp_path / "shards", shard_links=(128, 128, 40), eval_links=60)
    flags = [
        "-m",
        "trainer",
        "--shards",
        str(shards),
        "--preset",
        "tiny",
        "--max-steps",
        "8",
        "--num-workers",
        "0",
        "--no-progress",
        "--log-every",
        "1",
        "--device",
        "cuda",
        "--deterministic",
        "--eval-splits",
        "valid",
    ]
    runs = {
        "single": [sys.executable, *flags, "--out", str(tmp_path / "single")],
        "nccl": [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "1",
            *flags,
            "--out",
            str(tmp_path / "nccl"),
        ],
    }
    res = {}
    for name, cmd in runs.items():
        res[name] = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert res[name].returncode == 0, res[name].stdout[-3000:] + res[name].stderr[-3000:]
    assert "world size 1 (nccl)" in res["nccl"].stderr, res["nccl"].stderr[-3000:]
    assert "world size 1 (single process)" in res["single"].stderr
    summaries = {name: json.loads((tmp_path / name / "summary.json").read_text()) for name in runs}
    assert summaries["nccl"]["world_size"] == 1 and summaries["nccl"]["steps"] == summaries["single"]["steps"] == 8
    a, b = losses(tmp_path / "single"), losses(tmp_path / "nccl")
    assert sorted(a) == sorted(b) == list(range(1, 9))
    np.testing.assert_allclose([b[s] for s in sorted(b)], [a[s] for s in sorted(a)], rtol=1e-3)
    from trainer import checkpoint

    nccl, single = (checkpoint.load(tmp_path / name / "last.pt")["model"] for name in ("nccl", "single"))
    assert list(nccl) == list(single)  # DDP's "module." prefix never reaches the checkpoint
    for key in single:
        torch.testing.assert_close(nccl[key], single[key], rtol=1e-3, atol=1e-4)
