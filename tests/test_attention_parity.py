"""Packed attention == padded attention (the BertLayer + SDPA + key padding mask), outputs and gradients.

The padded path calls the BertLayer module itself, so it is the reference for every packed kernel. CUDA
tests (marker gpu) check the flash kernels in bf16 against it, forward and backward, and skip cleanly
without CUDA.
"""

import numpy as np
import pytest
import torch

from tests.test_model import N_MAX, assert_grads_close, random_samples, small_model
from trainer.data.packing import pack_samples as pack  # hand-built sample dicts
from trainer.model.attention import (
    BUCKET_SLACK,
    DROPOUT_FREE,
    AttentionContext,
    bert_layer,
    bucket_plan,
    build_buckets,
    describe_backend,
    flash_attn_varlen,
    resolve_backend,
    torch_varlen_attn,
)

SIZES = [2, 12, 5, 9, 3, 12, 7]  # very unequal lengths: lots of padding in the (B, L) view


def _run(model, batch, backend):
    model.set_attention(backend)
    model.zero_grad(set_to_none=True)
    out = model(batch)
    # a loss that touches every output with a different weight, so gradients are not symmetric
    (out * torch.linspace(-1, 2, len(out), device=out.device)).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return out.detach(), grads


@pytest.mark.parametrize("backend", ["reference", "bucketed"])
@pytest.mark.parametrize("train_mode", [False, True])  # dropout is 0: train mode must agree too
def test_packed_equals_padded_hf_sdpa(train_mode, backend):
    model = small_model(hidden=32, heads=4, layers=3).train(train_mode)
    batch = pack(random_samples(SIZES, seed=11), N_MAX)
    out_pad, g_pad = _run(model, batch, "sdpa")
    out_ref, g_ref = _run(model, batch, backend)
    torch.testing.assert_close(out_ref, out_pad, atol=1e-5, rtol=1e-5)
    assert g_pad.keys() == g_ref.keys() and len(g_pad) == 3 * 18 + 2  # BertLayer 16 + P_k 2 per block, head 2
    for name in g_pad:
        torch.testing.assert_close(g_ref[name], g_pad[name], atol=1e-5, rtol=1e-4, msg=name)


def test_single_layer_packed_equals_hf_layer_per_sample():
    """bert_layer() on the flat stream == the BertLayer called on each sample alone (no mask at all)."""
    model = small_model(hidden=32, heads=4, layers=1).eval()
    layer = model.blocks[0].bert
    batch = pack(random_samples(SIZES, seed=12), N_MAX)
    h = torch.randn(batch.num_tokens, 32)
    cu = batch.cu_seqlens.tolist()
    want = []
    for s, e in zip(cu[:-1], cu[1:]):
        o = layer(h[None, s:e])
        want.append((o[0] if isinstance(o, tuple) else o)[0])
    want = torch.cat(want)
    for backend in ("reference", "sdpa", "bucketed"):
        got = bert_layer(layer, h, AttentionContext.build(backend, batch))
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=backend)


@pytest.mark.parametrize("backend", ["sdpa", "reference", "bucketed"])
def test_permuting_samples_permutes_outputs(backend):
    samples = random_samples(SIZES, seed=13)
    model = small_model(hidden=32, heads=4, attention=backend).eval()
    out = model(pack(samples, N_MAX))
    perm = np.random.default_rng(0).permutation(len(samples))
    out_p = model(pack([samples[i] for i in perm], N_MAX))
    torch.testing.assert_close(out_p, out[torch.as_tensor(perm)], atol=1e-5, rtol=1e-5)
    # and no sample sees another: alone, each gives the same logit
    alone = torch.cat([model(pack([s], N_MAX)) for s in samples])
    torch.testing.assert_close(alone, out, atol=1e-5, rtol=1e-5)


def test_backend_resolution_on_cpu():
    # bucketed is the CPU default by measurement (bench.trainer on citeseer (2,5): 1.5-2.2x padded SDPA)
    assert resolve_backend("auto", "cpu", 0.1) == "bucketed"
    assert resolve_backend("reference", "cpu") == "reference"
    for name in ("varlen", "flash_varlen", "flash_attn"):
        with pytest.raises(ValueError, match="CUDA"):
            resolve_backend(name, "cpu")
    with pytest.raises(ValueError, match="unknown backend"):
        resolve_backend("xformers", "cpu")
    m = small_model(attention="auto")
    m(pack(random_samples([3, 4]), N_MAX))  # a CPU batch: the CPU backend, whether or not CUDA exists
    assert m.attention_backend == "bucketed"


def test_auto_on_cuda_picks_a_dropout_kernel_when_the_model_has_dropout(monkeypatch):
    """resolve_backend's CUDA table with each kernel's availability set by hand (so it runs on any machine):
    with attention dropout, never the dropout-free `varlen`; without, the fastest packed kernel."""
    import trainer.model.attention as attention

    kernels = {"varlen": lambda: object(), "flash-attn": lambda: None, "aten": lambda: None}
    monkeypatch.setattr(attention, "torch_varlen_attn", lambda: kernels["varlen"]())
    monkeypatch.setattr(attention, "flash_attn_varlen", lambda: kernels["flash-attn"]())
    monkeypatch.setattr(attention, "aten_flash_error", lambda: kernels["aten"]())
    assert resolve_backend("auto", "cuda", 0.1) == "flash_varlen"
    assert resolve_backend("auto", "cuda", 0.0) == "varlen"
    kernels["flash-attn"] = lambda: object()
    assert resolve_backend("auto", "cuda", 0.1) == "flash_attn"
    kernels["flash-attn"], kernels["aten"] = (lambda: None), (lambda: "probe failed")
    assert resolve_backend("auto", "cuda", 0.1) == "bucketed"  # varlen is there, but drops no attention
    assert resolve_backend("auto", "cuda", 0.0) == "varlen"


@pytest.mark.parametrize("backend", ["varlen", "flash_varlen", "flash_attn"])
def test_flash_backends_compute_fp32_attention_with_bucketed(monkeypatch, backend):
    """In fp32 (evaluation) a flash backend must not call its bf16 kernel: the layer's output is bucketed
    SDPA's exactly. The flash kernels are replaced by one that fails, so this runs without CUDA."""
    import trainer.model.attention as attention

    def bf16_only(*args, **kwargs):
        raise AssertionError(f"{backend}'s bf16 kernel called on fp32 inputs")

    monkeypatch.setitem(attention.KERNELS, backend, bf16_only)
    model = small_model(hidden=32, heads=4, layers=1).eval()
    layer = model.blocks[0].bert
    batch = pack(random_samples(SIZES, seed=18), N_MAX)
    h = torch.randn(batch.num_tokens, 32)
    want = bert_layer(layer, h, AttentionContext.build("bucketed", batch))
    torch.testing.assert_close(bert_layer(layer, h, AttentionContext.build(backend, batch)), want, atol=0, rtol=0)


def test_describe_backend_says_whether_attention_dropout_applies():
    assert "NOT applied" in describe_backend("varlen", "varlen", 0.1)
    assert "0.1 applied" in describe_backend("auto", "bucketed", 0.1)
    assert "dropout 0" in describe_backend("auto", "varlen", 0.0)
    assert "\n" not in describe_backend("auto", "bucketed", 0.1)


@pytest.mark.parametrize("lens", [[2], [5, 5, 5], [2, 12, 5, 9, 3, 12, 7], list(range(2, 40)) * 3, [2] * 20 + [300]])
def test_bucket_plan_covers_every_sample_once_with_bounded_padding(lens):
    lens = np.array(lens)
    groups = bucket_plan(lens)
    assert sorted(np.concatenate(groups).tolist()) == list(range(len(lens)))
    for g in groups:
        assert len(g) == 1 or len(g) * lens[g].max() <= BUCKET_SLACK * lens[g].sum()
    cu = np.concatenate([[0], np.cumsum(lens)])
    buckets, inverse = build_buckets(cu, torch.device("cpu"))
    flat = torch.cat([b.index.reshape(-1)[b.real] for b in buckets])
    assert torch.equal(flat[inverse], torch.arange(int(cu[-1])))  # inverse undoes the bucket order
    assert all((b.key_mask is None) == bool(b.real.all()) for b in buckets)


@pytest.mark.parametrize("backend", ["reference", "bucketed"])
def test_attention_dropout_is_active_in_training(backend):
    model = small_model(dropout=0.5, attention=backend).train()
    batch = pack(random_samples(SIZES, seed=14), N_MAX)
    torch.manual_seed(1)
    a = model(batch)
    torch.manual_seed(2)
    assert not torch.allclose(a, model(batch))
    model.eval()
    torch.testing.assert_close(model(batch), model(batch))


# ---------------------------------------------------------------------------- CUDA
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _available_on_cuda(backend):
    try:
        resolved = resolve_backend(backend, "cuda")
    except ValueError as e:
        pytest.skip(str(e))
    if resolved != backend:
        pytest.skip(f"{backend} not available here (resolves to {resolved})")


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("backend", ["varlen", "flash_varlen", "flash_attn", "bucketed"])
def test_packed_equals_padded_bf16_on_cuda(backend):
    """Forward and backward under bf16 autocast. Tolerances: bf16 keeps 8 mantissa bits (relative
    rounding 2^-8 ~ 0.4 %) and the two paths round in different places (padded SDPA vs flash tiles),
    through 3 layers of LayerNorm'd residuals: outputs within 3e-2, gradients within 5 % of their scale."""
    _available_on_cuda(backend)
    model = small_model(hidden=64, heads=4, layers=3).cuda().train()  # dropout 0
    batch = pack(random_samples(SIZES * 4, seed=15), N_MAX).to("cuda")
    res = {}
    for b in ("sdpa", backend):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            res[b] = _run(model, batch, b)
        assert model.attention_backend == b
    (o_pad, g_pad), (o_var, g_var) = res["sdpa"], res[backend]
    torch.testing.assert_close(o_var.float(), o_pad.float(), atol=3e-2, rtol=3e-2)
    assert_grads_close(g_var, g_pad, 5e-2)  # relative to each gradient's scale: bf16 keeps ~3 significant digits


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("backend", ["varlen", "flash_varlen", "flash_attn", "bucketed"])
def test_fp32_eval_on_cuda_matches_padded_fp32(backend):
    """Without autocast (evaluation) the flash backends compute attention in fp32 (bucketed SDPA), so
    scores agree with the fp32 padded reference to fp32 accuracy, not bf16's."""
    _available_on_cuda(backend)
    model = small_model(hidden=64, heads=4, layers=3).cuda().eval()
    batch = pack(random_samples(SIZES * 4, seed=16), N_MAX).to("cuda")
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # no TF32 (an earlier in-process run may have enabled it)
    try:
        with torch.no_grad():
            want = model.set_attention("sdpa")(batch)
            got = model.set_attention(backend)(batch)
    finally:
        torch.set_float32_matmul_precision(precision)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("backend", ["flash_varlen", "flash_attn", "bucketed"])
def test_attention_dropout_is_active_on_cuda(backend):
    """The dropout-capable CUDA kernels drop attention probabilities in training (outputs depend on the
    seed, though hidden dropout is off) and not in eval."""
    _available_on_cuda(backend)
    model = small_model(hidden=64, heads=4, layers=2, dropout=0.0).cuda()
    for block in model.blocks:
        block.bert.attention.self.dropout.p = 0.5  # attention dropout only
    model.set_attention(backend)
    batch = pack(random_samples(SIZES * 4, seed=17), N_MAX).to("cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        model.train()
        torch.manual_seed(1)
        a = model(batch).float()
        torch.manual_seed(2)
        b = model(batch).float()
        model.eval()
        e1, e2 = model(batch).float(), model(batch).float()
    assert (a - b).abs().max() > 1e-2
    torch.testing.assert_close(e1, e2)


@pytest.mark.gpu
@cuda
def test_auto_on_cuda_applies_attention_dropout_when_the_model_has_it():
    m = small_model(attention="auto", dropout=0.1).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        m(pack(random_samples([3, 4]), N_MAX).to("cuda"))
    assert m.attention_backend not in DROPOUT_FREE and m.attention_backend != "sdpa"
    m0 = small_model(attention="auto", dropout=0.0).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        m0(pack(random_samples([3, 4]), N_MAX).to("cuda"))
    if torch_varlen_attn() is not None or flash_attn_varlen() is not None:
        assert m0.attention_backend in ("varlen", "flash_attn")
