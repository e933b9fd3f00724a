"""trainer loop in one process: config/CLI, accumulation maths, eval == common.metrics, checkpoints and
their cadence, test-at-improvement, resume (also after SIGKILL: metrics and train time bookkeeping).

Runs use --device cpu: they check the loop's logic bit for bit, which CUDA's nondeterministic kernels
would blur; the CUDA runs are the gpu-marked tests at the end (tolerances stated there)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from common.metrics import evaluate as common_evaluate
from common.shards import load_queries, read_manifest
from tests.test_trainer_data import make_shard_set
from trainer import checkpoint, distributed
from trainer.config import config_for, config_from_args
from trainer.config_sections import ConfigError, DataConfig
from trainer.data.stream import view_stats as data_views
from trainer.evaluate import evaluate_split, scores_to_metrics
from trainer.metrics_log import read_metrics
from trainer.resolve import micro_batch_links, resolve
from trainer.train import Trainer, run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models on a shared 2-core box: intra-op threads only contend (10x slower), so use one."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    return make_shard_set(tmp_path_factory.mktemp("loop-shards"), shard_links=(96, 96, 40), eval_links=60)


def tiny(shards, out, **kw):
    kw.setdefault("progress", False)
    kw.setdefault("log_every", 1)
    kw.setdefault("device", "cpu")
    data = {"num_workers": 0, **kw.pop("data", {})}
    return config_for("tiny", str(shards), str(out), data=data, **kw)


# ---------------------------------------------------------------------------- config and CLI
def test_help_lists_the_common_flags_and_help_all_every_flag():
    def text(flag):
        return subprocess.run(
            [sys.executable, "-m", "trainer", flag], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout

    short, every = text("--help"), text("--help-all")
    common = (
        "--shards",
        "--preset",
        "--out",
        "--resume",
        "--epochs",
        "--lr",
        "--hidden",
        "--layers",
        "--seed",
        "--device",
        "--protocol",
    )
    advanced = ("--micro-batch", "--token-budget", "--eval-every", "--max-steps", "--num-workers", "--compile")
    assert all(f in short for f in common) and not any(f in short for f in advanced)
    assert all(f in every for f in common + advanced)


def test_cli_overrides_and_errors_name_the_flag():
    c = config_from_args(
        [
            "--shards",
            "s",
            "--preset",
            "citeseer-small",
            "--out",
            "o",
            "--lr",
            "0.01",
            "--hidden",
            "64",
            "--micro-batch",
            "8",
            "--max-steps",
            "3",
        ]
    )
    assert (c.optim.lr, c.model.hidden, c.data.max_samples, c.max_steps, c.optim.effective_batch) == (
        0.01,
        64,
        8,
        3,
        64,
    )
    assert c.epochs == 12 and c.protocol == "original"
    with pytest.raises(ConfigError, match="--lr"):
        config_from_args(["--shards", "s", "--preset", "tiny", "--out", "o", "--lr", "-1"])
    with pytest.raises(ConfigError, match="--micro-batch"):
        DataConfig(shards="s", max_samples=0)
    with pytest.raises(ConfigError, match="--preset"):
        config_for("nope", "s", "o")


def _resolved(argv=(), device="cpu", tokens_per_link=30.0, world=1, preset="citeseer", n_max=842):
    c = config_from_args(["--shards", "s", "--preset", preset, "--out", "o", *argv])
    d = resolve(c, n_max, world, device, tokens_per_link).data
    return d.max_samples, d.token_budget, d.eval_token_budget, d.micro_tokens


def test_default_micro_batches_are_sized_to_the_device():
    """Hand values, citeseer (N_max 842) at 30 tokens per link. CPU: the effective batch over ranks, <= 256 links.
    CUDA: about 65,536 tokens, the rank's share split into the fewest equal micro-batches. Budget: twice an
    average micro-batch's tokens, at most links x (N_max + 2); evaluation 4 x that."""
    assert _resolved() == (256, 2 * 256 * 30, 4 * 2 * 256 * 30, 0)  # effective batch 2048, 8 micro-steps
    assert _resolved(device="cuda") == (2048, 2 * 2048 * 30, 4 * 2 * 2048 * 30, 65536)  # 65536 // 30 = 2184 >= 2048
    # collab-like: 100 tokens per link, effective 8192 over 2 ranks = 4096: cap 655, 7 micro-steps of 586 links;
    # twice their average tokens (117,200) is more than 586 links of up to 154 tokens can hold
    assert _resolved(["--effective-batch", "8192"], "cuda", 100.0, world=2, n_max=152)[:2] == (586, 586 * 154)
    # LRP-3 feeds every link 3 times: 90 tokens per link, cap 728, 3 micro-steps of 683 links
    assert _resolved(["--lrp", "3"], "cuda")[:2] == (683, 2 * 683 * 90)
    assert _resolved(["--micro-tokens", "0"], "cuda")[:2] == (256, 2 * 256 * 30)  # off: the CPU rule
    # on CPU too when asked: cap 1000 // 30 = 33 links, ceil(2048 / 33) = 63 micro-batches of ceil(2048 / 63) = 33
    assert _resolved(["--micro-tokens", "1000"])[:2] == (33, 2 * 33 * 30)
    assert _resolved(["--micro-batch", "100"], "cuda")[:2] == (100, 2 * 100 * 30)  # an explicit --micro-batch wins
    assert _resolved(["--token-budget", "5000"], "cuda")[:2] == (2048, 5000)  # a budget bounds memory instead
    assert _resolved(["--micro-batch", "2"], tokens_per_link=100.0)[:2] == (2, 844)  # never below one largest link
    c = config_from_args(["--shards", "s", "--preset", "citeseer", "--out", "o"])
    assert resolve(c, 842, 1).data.token_budget == 256 * 844  # no shard statistics: the worst case
    with pytest.raises(ConfigError, match="--micro-tokens"):
        config_from_args(["--shards", "s", "--preset", "tiny", "--out", "o", "--micro-tokens", "-1"])
    assert micro_batch_links(8192, 100.0, 65536) * 13 >= 8192 > micro_batch_links(8192, 100.0, 65536) * 12


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_paper_citeseer_preset_fits_the_loader_memory_budget(device):
    """Regression: the worst-case default budget (256 x 844 tokens) asked 550 MB per batch in flight, over the
    1,024 MB a loader worker may use, so `python -m trainer --preset citeseer` stopped at start-up."""
    from trainer.data.loader_budget import eval_budget, prefetch_depth

    c = config_from_args(["--shards", "s", "--preset", "citeseer", "--out", "o"])
    d = resolve(c, 842, 1, device, 28.3).data  # citeseer (2,20): 28.3 tokens per link on average
    assert prefetch_depth(842, d.token_budget, d) >= 1 and eval_budget(842, d)[0] >= 844


def test_micro_tokens_set_the_runs_accumulation(shards, tmp_path):
    """The trainer resolves the micro-batch from the shard set's mean tokens per link and accumulates the rest."""
    links, tokens = data_views(read_manifest(shards), 0)
    mean = tokens / links
    per_micro = micro_batch_links(32, mean, int(4 * mean))  # tiny: effective batch 32
    summary = run(
        tiny(
            shards,
            tmp_path / "run",
            epochs=1,
            max_steps=2,
            eval_splits=("valid",),
            data={"micro_tokens": int(4 * mean)},
        )
    )
    assert 1 < per_micro < 32 and summary["config"]["data"]["max_samples"] == per_micro
    assert summary["accumulation"] == round(32 / per_micro)


# ---------------------------------------------------------------------------- eval == common.metrics
def test_scores_to_metrics_equals_common(shards):
    manifest = read_manifest(shards)
    rng = np.random.default_rng(0)
    score = rng.normal(size=60).astype(np.float32)
    perm = rng.permutation(60)  # gathered order is arbitrary; lookup is by cid
    got = scores_to_metrics(manifest, "valid", "original", perm, score[perm])
    pos, neg = load_queries(shards / "valid-original-queries.npz")
    assert got == common_evaluate("original", score[pos], score[neg])


class CidScorer(torch.nn.Module):
    """A 'model' whose score is a fixed function of the candidate id."""

    def forward(self, batch):
        return torch.sin(batch.cid.double() * 1.7).float()


def test_evaluate_split_equals_common(shards):
    manifest = read_manifest(shards)
    info = distributed.init_distributed("cpu")
    c = DataConfig(shards=str(shards), max_samples=8, token_budget=100, eval_token_budget=100, num_workers=0)
    assert info.device.type == "cpu"
    got = evaluate_split(CidScorer(), manifest, "test", "original", c, info)
    pos, neg = load_queries(shards / "test-original-queries.npz")
    f = lambda ids: np.sin(ids.astype(np.float64) * 1.7).astype(np.float32)
    assert got == common_evaluate("original", f(pos), f(neg))


# ---------------------------------------------------------------------------- optimisation maths
def test_accumulation_gives_the_full_batch_mean_gradient(shards, tmp_path):
    """Micro-batches of unequal size, accumulated, give exactly the gradient of the mean over all links."""
    cfg = tiny(
        shards,
        tmp_path / "r",
        model={"dropout": 0.0},
        optim={"effective_batch": 24},
        data={"max_samples": 8, "token_budget": 60},
    )
    trainer = Trainer(cfg, distributed.init_distributed("cpu"))
    from trainer.data import loaders

    loader, _ = loaders.train_loader(trainer.manifest, 0, loaders.LoaderSettings(trainer.config.data))
    micro = [b for b, _ in zip(loader, range(4))]
    assert len({b.num_samples for b in micro}) > 1  # the token budget makes them uneven
    trainer.optimizer.step = lambda: None  # keep the accumulated gradients for inspection
    trainer.optimizer.zero_grad = lambda set_to_none=True: None
    loss, samples, _ = trainer.train_step(micro)
    grads = [p.grad.clone() for p in trainer.core.parameters() if p.requires_grad]

    from trainer.data.packing import pack_samples as pack  # the same links as one batch

    for p in trainer.core.parameters():
        p.grad = None
    samples_all = [s for b in micro for s in _unpack(b, trainer)]
    full = pack(samples_all, trainer.n_max)
    ref = trainer.core.loss(trainer.core(full), full.label)
    ref.backward()
    ref = ref.detach()
    assert float(samples) == full.num_samples
    assert float(loss) / float(samples) == pytest.approx(float(ref), rel=1e-5)
    for g, p in zip(grads, [p for p in trainer.core.parameters() if p.requires_grad]):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)


def _unpack(batch, trainer):
    """PackedBatch -> sample dicts (context nodes and edges back in local ids)."""
    out = []
    cu = batch.cu_seqlens.tolist()
    src, dst = batch.adj_src.numpy(), batch.adj_dst.numpy()
    for b in range(batch.num_samples):
        lo, hi = cu[b], cu[b + 1] - 2
        nodes = batch.node[lo:hi].numpy()
        keep = (src >= lo) & (src < hi) & (dst >= lo) & (dst < hi) & (src < dst)
        edges = np.stack([src[keep] - lo, dst[keep] - lo], 1)
        if batch.dense:  # dense form (trainer.data.packing): the upper triangle of the sample's matrix
            edges = np.stack(np.nonzero(np.triu(batch.adj_dense[b, : hi - lo, : hi - lo].numpy())), 1)
        out.append({"cid": int(batch.cid[b]), "label": float(batch.label[b]), "nodes": nodes, "edges": edges})
    return out


# ---------------------------------------------------------------------------- a whole run, checkpoints, resume
def test_run_writes_metrics_checkpoints_and_summary(shards, tmp_path):
    out = tmp_path / "run"
    summary = run(tiny(shards, out, epochs=2, eval_every=1))
    assert {"config.json", "metrics.jsonl", "summary.json", "last.pt", "best.pt"} <= {p.name for p in out.iterdir()}
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporaries
    assert json.loads((out / "summary.json").read_text())["steps"] == summary["steps"]
    train = read_metrics(out / "metrics.jsonl", "train")
    assert {"loss", "lr", "samples_per_s", "tokens_per_s"} <= set(train[0])
    evals = read_metrics(out / "metrics.jsonl", "eval")
    assert {(e["epoch"], e["split"]) for e in evals if e["split"] == "valid"} == {(0, "valid"), (1, "valid")}
    # test is reported at the best validation epoch
    best = max((e for e in evals if e["split"] == "valid"), key=lambda e: e["mrr"])
    test_at_best = next(e for e in evals if e["split"] == "test" and e["step"] == best["step"])
    assert summary["best_epoch"] == best["epoch"] and summary["test"]["mrr"] == test_at_best["mrr"]
    assert summary["attention_backend"] and summary["world_size"] == 1
    ckpt = checkpoint.load(out / "last.pt")  # weights_only=True
    assert {"model", "optimizer", "state", "config", "rng"} <= set(ckpt)
    assert ckpt["state"]["epoch"] == 2 and ckpt["state"]["batch"] == 0 and ckpt["config"]["data"]["token_budget"]
    assert (
        ckpt["state"]["train_time_s"] == summary["train_time_s"]
        or abs(ckpt["state"]["train_time_s"] - summary["train_time_s"]) < 1e-3
    )
    best_ckpt = checkpoint.load(out / "best.pt")  # weights and what scoring needs, no optimiser / RNG
    assert set(best_ckpt) == {"model", "config", "state"} and best_ckpt["state"]["best_step"] == best["step"]
    assert best_ckpt["model"].keys() == ckpt["model"].keys()
    assert train[-1]["loss"] < train[0]["loss"]


@pytest.mark.parametrize("every", [False, True])
def test_test_split_is_scored_only_when_validation_improves(shards, tmp_path, every):
    summary = run(tiny(shards, tmp_path / "r", epochs=5, test_every_eval=every, optim={"lr": 3e-3}))
    evals = read_metrics(tmp_path / "r/metrics.jsonl", "eval")
    valid = [e for e in evals if e["split"] == "valid"]
    tested = {e["step"] for e in evals if e["split"] == "test"}
    best, improved = -1.0, set()
    for e in valid:
        if e["mrr"] > best:
            best, improved = e["mrr"], improved | {e["step"]}
    assert len(valid) == 5
    assert tested == ({e["step"] for e in valid} if every else improved)
    assert summary["test"] == next(
        {k: v for k, v in e.items() if k in summary["test"]}
        for e in evals
        if e["split"] == "test" and e["step"] == summary["best_step"]
    )


def _count_saves(monkeypatch) -> list[str]:
    saved = []
    real = checkpoint.save_atomic
    monkeypatch.setattr(checkpoint, "save_atomic", lambda obj, path: (saved.append(Path(path).name), real(obj, path)))
    return saved


def test_last_checkpoint_follows_wall_time_not_every_epoch(shards, tmp_path, monkeypatch):
    """Default cadence: at most one last.pt per --checkpoint-seconds plus the end; 0 restores every epoch.
    (No timing threshold: 1e9 s never comes due, 0 s always does.)"""
    saved = _count_saves(monkeypatch)
    run(tiny(shards, tmp_path / "slow", epochs=3, eval_splits=("valid",), checkpoint_seconds=1e9))
    assert saved.count("last.pt") == 1  # only the end of the run
    saved.clear()
    run(tiny(shards, tmp_path / "fast", epochs=3, eval_splits=("valid",), checkpoint_seconds=0))
    assert saved.count("last.pt") == 3  # after epochs 0 and 1, and the end
    saved.clear()
    run(
        tiny(
            shards,
            tmp_path / "steps",
            epochs=1,
            max_steps=7,
            eval_splits=("valid",),
            checkpoint_seconds=1e9,
            checkpoint_every=3,
        )
    )
    assert saved.count("last.pt") == 3  # steps 3 and 6, and the stop at 7


def test_killed_run_resumes_with_clean_metrics_and_accumulated_time(shards, tmp_path):
    """SIGKILL a CLI run mid-training, resume it: metrics.jsonl holds every step once (the lines written
    after the checkpoint are dropped, then rewritten identically), and train_time_s includes the time
    before the kill (the checkpoint's) plus the resumed part."""
    args = [
        sys.executable,
        "-m",
        "trainer",
        "--shards",
        str(shards),
        "--preset",
        "tiny",
        "--device",
        "cpu",
        "--num-workers",
        "0",
        "--no-progress",
        "--log-every",
        "1",
        "--eval-splits",
        "valid",
        "--checkpoint-every",
        "6",
        "--checkpoint-seconds",
        "1e9",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cut = tmp_path / "cut"
    proc = subprocess.Popen(
        [*args, "--out", str(cut), "--epochs", "100"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline, ckpt_step, last_line = time.time() + 300, 0, 0
    try:
        while time.time() < deadline and proc.poll() is None:
            time.sleep(0.02)
            try:
                ckpt_step = checkpoint.load(cut / "last.pt")["state"]["step"]
                last_line = max(r["step"] for r in read_metrics(cut / "metrics.jsonl", "train"))
            except Exception:
                continue  # not written yet, or caught mid-rename
            if ckpt_step >= 6 and last_line % 6 in (1, 2):  # lines past the checkpoint, the next 4+ steps away
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    ckpt = checkpoint.load(cut / "last.pt")["state"]
    before = read_metrics(cut / "metrics.jsonl", "train")
    assert ckpt["step"] >= 6 and max(r["step"] for r in before) > ckpt["step"], (
        "killed without lines past the checkpoint"
    )
    stop = ckpt["step"] + 5
    subprocess.run(
        [*args, "--out", str(cut), "--epochs", "100", "--max-steps", str(stop), "--resume"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [*args, "--out", str(tmp_path / "full"), "--epochs", "100", "--max-steps", str(stop)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    train = read_metrics(cut / "metrics.jsonl", "train")
    assert [r["step"] for r in train] == list(range(1, stop + 1))  # each step once, in order
    full = read_metrics(tmp_path / "full/metrics.jsonl", "train")
    assert [r["loss"] for r in train] == [r["loss"] for r in full]
    evals = [(r["step"], r["split"]) for r in read_metrics(cut / "metrics.jsonl", "eval")]
    assert len(evals) == len(set(evals))
    summary = json.loads((cut / "summary.json").read_text())
    assert summary["train_time_s"] > ckpt["train_time_s"] > 0


@pytest.mark.parametrize("workers", [0, 2])
def test_stop_and_resume_continues_exactly(shards, tmp_path, workers):
    steps = 12  # epochs hold 8 steps here: the resume lands mid-epoch 0 and the run crosses an epoch end
    full = run(tiny(shards, tmp_path / "full", epochs=3, max_steps=steps, data={"num_workers": workers}))
    run(tiny(shards, tmp_path / "cut", epochs=3, max_steps=5, data={"num_workers": workers}))
    resumed = run(tiny(shards, tmp_path / "cut", epochs=3, max_steps=steps, resume=True, data={"num_workers": workers}))
    a = {r["step"]: r["loss"] for r in read_metrics(tmp_path / "full/metrics.jsonl", "train")}
    b = {r["step"]: r["loss"] for r in read_metrics(tmp_path / "cut/metrics.jsonl", "train")}
    assert len(a) == steps and a == b  # bit-identical fp32 losses after the resume point
    assert resumed["last_eval"] == full["last_eval"]
    sd_a, sd_b = (checkpoint.load(tmp_path / d / "last.pt")["model"] for d in ("full", "cut"))
    assert all(torch.equal(sd_a[k], sd_b[k]) for k in sd_a)


def test_a_run_with_distance_features_resumes_where_it_stopped(shards, tmp_path):
    """data.distances is derived from --distance-features when a run starts: a resume under the same flags is
    the same run (pencil run's search resumes its candidates after their grace period)."""
    run(tiny(shards, tmp_path / "cut", epochs=2, max_steps=3, model={"distances": 2}))
    resumed = run(tiny(shards, tmp_path / "cut", epochs=2, max_steps=6, resume=True, model={"distances": 2}))
    steps = [r["step"] for r in read_metrics(tmp_path / "cut/metrics.jsonl", "train")]
    assert steps == list(range(1, 7)) and resumed["config"]["data"]["distances"] is True


def test_lr_schedules_by_hand():
    from trainer.config_sections import OptimConfig

    cos = OptimConfig(lr=0.2, lr_schedule="cosine")
    assert [cos.lr_at(p) for p in (0.0, 0.5, 1.0, 1.5)] == pytest.approx([0.2, 0.1, 0.0, 0.0], abs=1e-12)
    assert cos.lr_at(0.25) == pytest.approx(0.1 * (1 + 2**-0.5))  # lr (1 + cos(pi/4)) / 2
    assert OptimConfig(lr=0.2).lr_at(0.9) == 0.2  # constant: the paper's
    with pytest.raises(ConfigError, match="--lr-schedule"):
        OptimConfig(lr_schedule="linear")
    with pytest.raises(ConfigError, match="--weight-decay"):  # the other optimiser fields are still checked
        OptimConfig(weight_decay=-0.1)
    with pytest.raises(ConfigError, match="--effective-batch"):
        OptimConfig(effective_batch=0)


def test_cosine_schedule_follows_progress_and_resumes_on_the_same_curve(shards, tmp_path):
    kw = dict(epochs=2, eval_splits=("valid",), optim={"lr": 1e-3, "lr_schedule": "cosine"})
    summary = run(tiny(shards, tmp_path / "full", **kw))
    run(tiny(shards, tmp_path / "cut", max_steps=5, **kw))
    run(tiny(shards, tmp_path / "cut", resume=True, **kw))
    full = read_metrics(tmp_path / "full/metrics.jsonl", "train")
    cut = read_metrics(tmp_path / "cut/metrics.jsonl", "train")
    assert [(r["step"], r["lr"], r["loss"]) for r in full] == [(r["step"], r["lr"], r["loss"]) for r in cut]
    # one batch per step and equal epochs here, so step k (from 1) ran at progress (k - 1) / steps
    n = summary["steps"]
    expected = [1e-3 * 0.5 * (1 + np.cos(np.pi * (r["step"] - 1) / n)) for r in full]
    assert [r["lr"] for r in full] == pytest.approx(expected, rel=1e-9) and len(full) == n


def test_fractional_epochs_cut_the_last_epoch(shards, tmp_path):
    s1 = run(tiny(shards, tmp_path / "one", epochs=1, eval_splits=("valid",)))
    s2 = run(tiny(shards, tmp_path / "half", epochs=1.5, eval_splits=("valid",)))
    assert s2["steps"] == s1["steps"] + -(-s1["steps"] // 2) and s2["epochs_completed"] == 2


# ---------------------------------------------------------------------------- config <-> model agreement
def test_cpu_threads_leave_cores_for_the_loader():
    from trainer.setup import cpu_threads

    cores = len(os.sched_getaffinity(0))
    assert cpu_threads(3, 1) == 3  # --threads wins
    assert cpu_threads(0, 1) == max(1, cores // 2) and cpu_threads(0, 2 * cores) == 1


def test_config_attention_choices_match_the_kernels():
    from trainer.config_sections import ATTENTION_BACKENDS
    from trainer.model.attention import BACKENDS

    assert ATTENTION_BACKENDS == BACKENDS


def test_selection_metrics_are_the_evaluators_keys():
    """--select-on's choices are the keys evaluation returns; pencil run's --metric is among them."""
    from common.metrics import METRIC_KEYS
    from pipelines.core.run_config import METRICS
    from trainer.config import SELECTION_METRICS

    assert tuple(SELECTION_METRICS) == tuple(METRIC_KEYS) and set(METRICS) <= set(METRIC_KEYS)


# ---------------------------------------------------------------------------- CUDA
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@cuda
def test_fused_adamw_step_equals_the_reference_step():
    """The trainer's fused AdamW (CUDA) takes the same step as torch's reference implementation; fused
    reorders float ops, so equal to fp32 rounding (1e-6 relative), not bit for bit."""
    torch.manual_seed(0)
    ps = [torch.randn(64, 32, device="cuda", requires_grad=True) for _ in range(3)]
    qs = [p.detach().clone().requires_grad_() for p in ps]
    a = torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01, fused=True)
    b = torch.optim.AdamW(qs, lr=1e-3, weight_decay=0.01, foreach=False)
    for _ in range(3):
        g = [torch.randn_like(p) for p in ps]
        for p, q, gg in zip(ps, qs, g):
            p.grad, q.grad = gg.clone(), gg.clone()
        a.step()
        b.step()
    for p, q in zip(ps, qs):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


@pytest.mark.gpu
@cuda
def test_resume_on_cuda_continues_the_trajectory(shards, tmp_path):
    """--deterministic on CUDA: index_add and friends take deterministic kernels, but the flash backward
    accumulates dQ with atomics, so losses agree to bf16-autocast rounding (1e-3 relative), not bits."""
    kw = dict(epochs=3, device="cuda", deterministic=True, data={"num_workers": 0})
    run(tiny(shards, tmp_path / "full", max_steps=12, **kw))
    run(tiny(shards, tmp_path / "cut", max_steps=5, **kw))
    resumed = run(tiny(shards, tmp_path / "cut", max_steps=12, resume=True, **kw))
    a = [r["loss"] for r in read_metrics(tmp_path / "full/metrics.jsonl", "train")]
    b = [r["loss"] for r in read_metrics(tmp_path / "cut/metrics.jsonl", "train")]
    assert len(a) == len(b) == 12 and resumed["device"].startswith("cuda")
    np.testing.assert_allclose(b, a, rtol=1e-3)


@pytest.mark.gpu
@cuda
def test_a_cuda_training_step_never_synchronises_the_host(shards, tmp_path):
    """trainer/train.py's claim that a step issues no host synchronisation on CUDA, so the host queues work
    ahead of the GPU: under torch's sync debug mode any synchronising call (.item(), a blocking copy,
    nonzero, a boolean mask, ...) raises. Steps on pinned loader batches, as the trainer takes them."""
    trainer = Trainer(tiny(shards, tmp_path / "r", device="cuda"), distributed.init_distributed("cuda"))
    from trainer.data import loaders

    loader, _ = loaders.train_loader(trainer.manifest, 0, loaders.LoaderSettings(trainer.config.data, pin=True))
    micro = [b for b, _ in zip(loader, range(6))]
    trainer.train_step(micro[:2])  # warm-up: cuBLAS handles, the allocator, kernel choice
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        results = [trainer.train_step(micro[i : i + 2]) for i in (2, 4)]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert all(torch.isfinite(loss).item() for loss, _, _ in results)


def _model_from(ckpt: dict, manifest: dict, device: str) -> torch.nn.Module:
    """The checkpoint's model on `device`, built as the trainer builds it (trainer.model.pencil.model_for_shards)."""
    from common.presets import get_preset
    from trainer.config import TrainConfig
    from trainer.model.pencil import model_for_shards

    config = TrainConfig.from_dict(ckpt["config"])
    model = model_for_shards(get_preset(config.preset), config.model.as_overrides(), manifest)
    model.load_state_dict(ckpt["model"])
    return model.to(device)


@pytest.mark.gpu
@cuda
def test_cuda_evaluation_is_fp32_and_matches_the_cpu(shards, tmp_path):
    """trainer/evaluate.py on CUDA scores in fp32 (no bf16 autocast, no TF32): the same checkpoint's scores agree
    with the CPU's to fp32 rounding (1e-4; bf16 logits would be off by ~1e-2), and the metrics, rank statistics
    of those scores, are equal wherever no two scores are closer than the devices' difference."""
    from trainer.data.loaders import LoaderSettings, eval_loader
    from trainer.evaluate import score_eval_set

    run(tiny(shards, tmp_path / "r", max_steps=6, eval_splits=("valid",)))  # trained weights, not the init
    ckpt = checkpoint.load(tmp_path / "r" / checkpoint.LAST)
    manifest = read_manifest(shards)
    c = DataConfig(shards=str(shards), max_samples=8, token_budget=100, eval_token_budget=100, num_workers=0)
    scores, metrics = {}, {}
    for device in ("cpu", "cuda"):
        model, info = _model_from(ckpt, manifest, device), distributed.init_distributed(device)
        assert info.device.type == device
        loader = eval_loader(manifest, "test", "original", LoaderSettings(c, pin=device == "cuda"))
        cid, score, _ = score_eval_set(model, loader, info.device)
        assert score.dtype == torch.float32 and score.device.type == "cpu"
        scores[device] = dict(zip(cid.tolist(), score.tolist()))
        metrics[device] = evaluate_split(model, manifest, "test", "original", c, info)
    assert sorted(scores["cuda"]) == sorted(scores["cpu"])
    cpu = np.array([scores["cpu"][k] for k in sorted(scores["cpu"])])
    gpu = np.array([scores["cuda"][k] for k in sorted(scores["cpu"])])
    assert np.ptp(cpu) > 1e-2  # the model separates candidates: a 1e-4 agreement means something
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-5)
    gap = np.diff(np.sort(cpu)).min()
    if gap > 2 * np.abs(gpu - cpu).max():
        assert metrics["cuda"] == metrics["cpu"]
    else:  # a near-tie may swap one pair's order: one rank in ~60 candidates
        for k, v in metrics["cpu"].items():
            assert abs(metrics["cuda"][k] - v) <= 0.05, (k, metrics)


def test_save_scores_writes_the_summary_evaluation_exactly(shards, tmp_path):
    """--save-scores: one file per evaluated (split, protocol), of the evaluation the summary reports (the best
    validation epoch), whose logits give back the summary's metrics bit for bit; --overwrite clears them."""
    from common.eval_scores import read_scores, scores_path

    out = tmp_path / "r"
    summary = run(tiny(shards, out, epochs=4, optim={"lr": 3e-3}, save_scores=True))
    manifest = read_manifest(shards)
    assert sorted(p.name for p in (out / "scores").iterdir()) == ["test-original.npz", "valid-original.npz"]
    for split in ("valid", "test"):
        cid, score, epoch = read_scores(scores_path(out, split, "original"))
        assert score.dtype == np.float32 and cid.dtype == np.int64 and sorted(cid.tolist()) == list(range(60))
        assert epoch == summary["best_epoch"]
        assert scores_to_metrics(manifest, split, "original", cid, score) == summary[split]
    run(tiny(shards, out, epochs=1, max_steps=1, eval_splits=("valid",), overwrite=True))
    assert not (out / "scores").exists()


def test_eval_weights_equals_retraining_to_the_best_epoch(shards, tmp_path):
    """--eval-weights: the best.pt of a valid-only run (an auto-search candidate) evaluated once gives exactly
    what a fresh run stopped at that epoch reports (same summary metrics, same saved scores), and no last.pt."""
    from common.eval_scores import read_scores, scores_path

    kw = dict(epochs=4, optim={"lr": 3e-3}, model={"dropout": 0.1})
    cand = run(tiny(shards, tmp_path / "cand", stop_epoch=3, eval_splits=("valid",), **kw))
    e = cand["best_epoch"] + 1
    assert e >= 2  # the candidate evaluated between its epochs; the retrained run does not
    final = dict(stop_epoch=e, eval_every=e, save_scores=True, **kw)
    again = run(tiny(shards, tmp_path / "again", **final))
    reused = run(tiny(shards, tmp_path / "reused", eval_weights=str(tmp_path / "cand" / "best.pt"), **final))
    assert again["best_epoch"] == reused["best_epoch"] == e - 1 and reused["epochs_completed"] == e
    assert again["valid"] == reused["valid"] == cand["valid"] and again["test"] == reused["test"]
    for split in ("valid", "test"):
        a, b = (
            read_scores(scores_path(tmp_path / "again", split, "original")),
            read_scores(scores_path(tmp_path / "reused", split, "original")),
        )
        order_a, order_b = np.argsort(a[0]), np.argsort(b[0])
        assert np.array_equal(a[1][order_a], b[1][order_b]) and a[2] == b[2] == e - 1
    assert not (tmp_path / "reused" / "last.pt").exists()
