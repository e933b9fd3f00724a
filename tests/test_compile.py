"""--compile (trainer.model.pencil.Pencil.compile_blocks): the compiled blocks compute what the eager ones do,
outputs and gradients, on every attention path that calls them (packed and padded), at changing token
counts; dropout still applies in training; parameter names and checkpoints are unchanged; the trainer
runs with it end to end. CPU tests compare in fp32 (inductor may reorder a reduction: 1e-5); the CUDA
test compares under bf16 autocast."""

from __future__ import annotations

import json

import pytest
import torch
from torch._dynamo.utils import counters

from tests.test_model import N_MAX, random_samples, small_model
from tests.test_trainer_loop import shards, tiny  # noqa: F401  (module-scoped shard set fixture)
from trainer import checkpoint
from trainer.config import config_from_args
from trainer.config_sections import ConfigError
from trainer.data.packing import pack_samples as pack
from trainer.metrics_log import read_metrics
from trainer.model.pencil import compiler_missing
from trainer.setup import check_run
from trainer.train import run

# inductor builds C++ on CPU and Triton a C launcher on GPU: without a compiler these skip (and --compile is refused)
needs_compiler = pytest.mark.skipif(compiler_missing() is not None, reason=str(compiler_missing()))


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from a clean cache and counts its own graphs: no test depends on another's."""
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def compiled_graphs() -> int:
    """Graphs dynamo has compiled since the test began (0 means nothing ran compiled)."""
    return counters["stats"]["unique_graphs"]


def _step(model, batch):
    model.zero_grad()
    out = model(batch)
    model.loss(out, batch.label).backward()
    return out.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad}


@needs_compiler
@pytest.mark.parametrize("attention", ["bucketed", "sdpa"])
def test_compiled_blocks_equal_eager_outputs_and_gradients(attention):
    batches = [
        pack(random_samples(sizes, p=0.5, seed=s), N_MAX)
        for s, sizes in enumerate(([3, 12, 7, 2, 9], [11, 4, 12, 6, 8, 10, 2]))
    ]  # two token counts: dynamic shapes
    eager = small_model(attention=attention, layers=3).train()
    compiled = small_model(attention=attention, layers=3).train().compile_blocks()  # same init (seeded)
    for batch in batches:
        out_e, grad_e = _step(eager, batch)
        out_c, grad_c = _step(compiled, batch)
        torch.testing.assert_close(out_c, out_e, rtol=1e-4, atol=1e-5)
        assert grad_c.keys() == grad_e.keys()
        for k in grad_e:
            torch.testing.assert_close(grad_c[k], grad_e[k], rtol=1e-4, atol=1e-5, msg=k)
    # one graph per kind of submodule (attention output, intermediate, output, P_k), shared by the 3 layers and
    # both token counts; more would mean a recompile per layer or per batch
    assert compiled_graphs() == 4
    with torch.no_grad():  # evaluation mode compiles its own graph (no dropout branch)
        torch.testing.assert_close(compiled.eval()(batches[0]), eager.eval()(batches[0]), rtol=1e-4, atol=1e-5)


@needs_compiler
def test_compiled_blocks_still_apply_dropout_in_training_only():
    """The compiled submodules themselves (not the eager attention kernel's dropout): fresh masks per call in
    training, none in evaluation, where they equal the eager model."""
    batch = pack(random_samples([3, 12, 7, 2, 9], seed=3), N_MAX)
    model = small_model(attention="bucketed", dropout=0.3).compile_blocks()
    h = torch.randn(50, 16)
    bert = model.blocks[0].bert
    with torch.no_grad():
        for sub, x in ((bert.attention.output, torch.randn(50, 16)), (bert.output, torch.randn(50, 32))):  # FFN 32
            sub.train()
            a, b = sub(x, h), sub(x, h)
            assert not torch.equal(a, b)
            sub.eval()
            torch.testing.assert_close(sub(x, h), sub(x, h), rtol=0, atol=0)
        eager = small_model(attention="bucketed", dropout=0.3).eval()
        torch.testing.assert_close(model.eval()(batch), eager(batch), rtol=1e-4, atol=1e-5)
    assert compiled_graphs() >= 4


@needs_compiler
def test_compiled_model_keeps_parameter_names_and_loads_eager_checkpoints():
    eager = small_model()
    compiled = small_model().compile_blocks()
    assert list(compiled.state_dict()) == list(eager.state_dict())
    compiled.load_state_dict(eager.state_dict())  # strict: both ways
    eager.load_state_dict(compiled.state_dict())


@needs_compiler
def test_trainer_compile_flag_runs_end_to_end_like_eager(shards, tmp_path):  # noqa: F811
    """`--compile` parses into the config, is recorded with the run, and trains the same trajectory as eager
    (dropout 0, so the loss curves agree to fp32 rounding), with checkpoints an eager model loads."""
    cli = config_from_args(["--shards", str(shards), "--preset", "tiny", "--out", "o", "--compile"])
    assert cli.compile and not config_from_args(["--shards", "s", "--preset", "tiny", "--out", "o"]).compile
    kw = dict(epochs=1, max_steps=4, model={"dropout": 0.0})
    run(tiny(shards, tmp_path / "eager", **kw))
    assert compiled_graphs() == 0
    summary = run(tiny(shards, tmp_path / "compiled", compile=True, **kw))
    assert json.loads((tmp_path / "compiled/config.json").read_text())["compile"] is True and compiled_graphs() >= 4
    a = [r["loss"] for r in read_metrics(tmp_path / "eager/metrics.jsonl", "train")]
    b = [r["loss"] for r in read_metrics(tmp_path / "compiled/metrics.jsonl", "train")]
    assert len(a) == len(b) == summary["steps"] == 4
    torch.testing.assert_close(torch.tensor(b), torch.tensor(a), rtol=1e-4, atol=1e-6)
    ckpt = checkpoint.load(tmp_path / "compiled/best.pt")
    assert ckpt["model"].keys() == checkpoint.load(tmp_path / "eager/best.pt")["model"].keys()


@needs_compiler
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_compiled_blocks_agree_with_eager_on_cuda_bf16():
    """The GPU configuration --compile is for: bf16 autocast, the default packed kernel. Both sides round
    to bf16 but fuse differently, so outputs agree within 3e-2 and gradients within 5 % of their scale."""
    batch = pack(random_samples([3, 12, 7, 2, 9, 11] * 8, p=0.5, seed=4), N_MAX).to("cuda")
    res = []
    for model in (
        small_model(attention="auto").cuda().train(),
        small_model(attention="auto").cuda().train().compile_blocks(),
    ):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(batch)
        model.loss(out, batch.label).backward()
        res.append((out.float(), {k: p.grad for k, p in model.named_parameters() if p.requires_grad}))
    torch.testing.assert_close(res[1][0], res[0][0], atol=3e-2, rtol=3e-2)
    for k, g in res[0][1].items():
        assert (res[1][1][k] - g).abs().max() / g.abs().max().clamp_min(1e-6) < 5e-2, k


def test_compile_without_a_compiler_is_refused_in_one_line(shards, tmp_path, monkeypatch):  # noqa: F811
    import trainer.model.pencil

    monkeypatch.setattr(
        trainer.model.pencil, "compiler_missing", lambda: "torch.compile needs a C/C++ compiler and none is on PATH"
    )
    with pytest.raises(ConfigError, match="^--compile: torch.compile needs a C/C.. compiler .*run without --compile$"):
        check_run(tiny(shards, tmp_path / "run", compile=True))
    with pytest.raises(ValueError, match="--compile"):
        small_model().compile_blocks()
    assert not (tmp_path / "run").exists()
