"""trainer/model/bert.py's BertLayer against transformers' own (the layer the paper's code stacks), with SDPA
attention: the same parameters under the same seed, the same outputs and gradients, with and without a key
padding mask, and the same dropout masks in training."""

from __future__ import annotations

import pytest
import torch

from trainer.model.bert import BertLayer

transformers = pytest.importorskip("transformers")
from transformers.models.bert.modeling_bert import BertLayer as HFBertLayer  # noqa: E402

HIDDEN, HEADS, FFN = 32, 4, 48


def hf_layer(dropout: float) -> HFBertLayer:
    cfg = transformers.BertConfig(
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        hidden_act="gelu",
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        layer_norm_eps=1e-12,
        attn_implementation="sdpa",
    )
    cfg._attn_implementation = "sdpa"
    return HFBertLayer(cfg)


def both(dropout: float, seed: int = 0) -> tuple[BertLayer, HFBertLayer]:
    torch.manual_seed(seed)
    ours = BertLayer(HIDDEN, HEADS, FFN, dropout)
    torch.manual_seed(seed)
    return ours, hf_layer(dropout)


def run(layer, h, mask, seed: int):
    """Output (as a tensor) and input gradient of a weighted sum, with the RNG at `seed` for dropout."""
    h = h.clone().requires_grad_(True)
    torch.manual_seed(seed)
    out = layer(h, attention_mask=mask)
    out = out[0] if isinstance(out, tuple) else out  # transformers 4.x returns a tuple
    (out * torch.linspace(-1, 2, out.numel()).view_as(out)).sum().backward()
    return out.detach(), h.grad, {n: p.grad for n, p in layer.named_parameters()}


def test_same_parameters_under_the_same_seed():
    ours, ref = both(0.1)
    want = ref.state_dict()
    got = ours.state_dict()
    assert list(got) == list(want)  # the keys of BERT checkpoints, in order
    for name in want:
        assert torch.equal(got[name], want[name]), name


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("dropout, train", [(0.0, False), (0.1, False), (0.1, True)])
def test_same_outputs_and_gradients(masked, dropout, train):
    ours, ref = both(dropout)
    ours.train(train)
    ref.train(train)
    g = torch.Generator().manual_seed(1)
    h = torch.randn(3, 7, HIDDEN, generator=g)
    mask = None
    if masked:  # rows of 7, 4 and 2 real tokens; True = attend
        mask = (torch.arange(7)[None, :] < torch.tensor([7, 4, 2])[:, None])[:, None, None, :]
    out, dh, grads = run(ours, h, mask, seed=5)
    want, want_dh, want_grads = run(ref, h, mask, seed=5)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-6)
    torch.testing.assert_close(dh, want_dh, rtol=0, atol=1e-6)
    for name in want_grads:
        torch.testing.assert_close(grads[name], want_grads[name], rtol=0, atol=1e-6, msg=name)


def test_dropout_draws_differ_by_seed():
    """The training comparison above is not vacuous: with dropout on, another seed gives another output."""
    ours, _ = both(0.1)
    h = torch.randn(2, 5, HIDDEN)
    a, _, _ = run(ours.train(), h, None, seed=5)
    b, _, _ = run(ours.train(), h, None, seed=6)
    assert not torch.allclose(a, b)
