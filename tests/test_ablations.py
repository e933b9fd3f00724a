"""Ablation options change exactly what they claim (paper appendix), and the ablation recipe runs end to end.

- no residual: each block IS the plain HF BertLayer (same output, no extra parameters);
- W0 init: orthogonal / mean-shifted Gaussian (mean 0.1) / low-rank (rank 5), frozen unless asked;
- WPE: learned BERT-style embeddings indexed by the token's position in its own sequence;
- the options travel CLI -> TrainConfig -> ModelConfig and are saved with the run's config.
"""
import pytest
import torch

from tests.test_model import N_MAX, dense_forward, random_samples, small_model
from trainer.config import ConfigError, ModelOverrides, config_from_args
from trainer.attention import AttentionContext
from trainer.model import ModelConfig, Propagation, token_positions
from trainer.packing import pack_samples as pack  # hand-built sample dicts


# ---------------------------------------------------------------------------- multiplicative residual
def _plain_bert(layer, h):
    out = layer(h[None])  # HF's own forward on one unpadded sequence
    return (out[0] if isinstance(out, tuple) else out)[0]


def test_no_residual_block_is_the_plain_bert_layer():
    batch = pack(random_samples([5, 12, 3, 9], seed=3), N_MAX)
    model = small_model(residual=False).double().eval()
    ctx, graph = AttentionContext.build("reference", batch), Propagation(batch)
    cu = batch.cu_seqlens.tolist()
    h = model.embed(batch)
    for block in model.blocks:
        assert block.prop is None  # no P_k parameters at all
        plain = torch.cat([_plain_bert(block.bert, h[a:b]) for a, b in zip(cu[:-1], cu[1:])])
        out = block(h, ctx, graph)
        torch.testing.assert_close(out, plain, rtol=0, atol=1e-10)
        h = out
    with_mr = small_model()
    extra = sum(p.numel() for b in with_mr.blocks for p in b.prop.parameters())
    assert with_mr.num_parameters() - model.num_parameters() == extra > 0


def test_residual_changes_the_output():
    batch = pack(random_samples([6, 10, 4]), N_MAX)
    on, off = small_model().double().eval(), small_model(residual=False).double().eval()
    off.load_state_dict({k: v for k, v in on.state_dict().items() if ".prop." not in k})
    assert not torch.allclose(on(batch), off(batch))
    torch.testing.assert_close(on(batch), dense_forward(on, random_samples([6, 10, 4])))


# ---------------------------------------------------------------------------- W0
def test_w0_low_rank_has_rank_5_and_is_frozen():
    for hidden in (16, 64):
        w0 = small_model(hidden=hidden, w0_init="low_rank").w0
        assert w0.shape == (2 * N_MAX + 2, hidden)
        sv = torch.linalg.svdvals(w0.detach())  # float32: the rest are rounding noise (~1e-7)
        assert int(torch.linalg.matrix_rank(w0)) == 5
        assert torch.all(sv[:5] > 0.5) and torch.all(sv[5:] < 1e-4)
        assert not w0.requires_grad


def test_w0_gaussian_is_mean_shifted():
    w0 = small_model(hidden=512, w0_init="gaussian").w0.double()  # 26 x 512 = 13k entries
    assert abs(w0.mean().item() - 0.1) < 0.005
    assert abs(w0.std().item() - 512 ** -0.5) < 0.005
    ortho = small_model(hidden=512).w0.double()
    assert abs(ortho.mean().item()) < 0.005
    torch.testing.assert_close(ortho @ ortho.T, torch.eye(2 * N_MAX + 2, dtype=torch.float64), rtol=0, atol=1e-5)


def test_w0_learnable_is_trained():
    batch = pack(random_samples([6, 10, 4, 8]), N_MAX)
    for learnable in (False, True):
        model = small_model(w0_learnable=learnable)
        before = model.w0.detach().clone()
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        model.loss(model(batch), batch.label).backward()
        opt.step()
        assert model.w0.requires_grad == learnable
        assert (not torch.equal(before, model.w0.detach())) == learnable
        assert "w0" in model.state_dict()  # saved either way


# ---------------------------------------------------------------------------- WPE
def test_token_positions_restart_per_sample():
    batch = pack(random_samples([3, 5, 2]), N_MAX)
    assert token_positions(batch).tolist() == [0, 1, 2, 3, 4] + list(range(7)) + [0, 1, 2, 3]


def test_wpe_adds_the_position_embedding_of_each_token():
    samples = random_samples([4, 12, 7])
    batch = pack(samples, N_MAX)
    plain, wpe = small_model().double(), small_model(wpe=True).double()
    assert wpe.wpe.weight.shape == (N_MAX + 2, 16) and wpe.wpe.weight.requires_grad
    wpe.load_state_dict({**plain.state_dict(), "wpe.weight": wpe.wpe.weight.detach()})
    captured = {}
    wpe.blocks[0].register_forward_pre_hook(lambda m, args: captured.update(h=args[0]))  # returns None
    wpe.eval()(batch)
    pos = token_positions(batch)
    torch.testing.assert_close(captured["h"], plain.embed(batch) + wpe.wpe.weight[pos], rtol=0, atol=1e-12)
    assert small_model().wpe is None


# ---------------------------------------------------------------------------- config plumbing
def test_cli_flags_reach_the_model_config():
    base = ["--shards", "s", "--preset", "tiny", "--out", "o"]
    cfg = config_from_args(base + ["--no-residual", "--w0-init", "low-rank", "--w0-learnable", "--wpe"])
    over = cfg.model.as_overrides()
    assert over["residual"] is False and over["w0_init"] == "low_rank" and over["w0_learnable"] and over["wpe"]
    mc = ModelConfig.from_preset("tiny", n_max=12, **over)
    assert (mc.residual, mc.w0_init, mc.w0_learnable, mc.wpe) == (False, "low_rank", True, True)
    default = ModelConfig.from_preset("tiny", n_max=12, **config_from_args(base).model.as_overrides())
    assert (default.residual, default.w0_init, default.w0_learnable, default.wpe) == (True, "orthogonal", False, False)
    # saved with the run: the JSON round trip keeps them
    from trainer.config import TrainConfig
    assert TrainConfig.from_dict(cfg.to_dict()).model == cfg.model


def test_bad_values_name_the_flag_or_field():
    with pytest.raises(ConfigError, match="--w0-init"):
        ModelOverrides(w0_init="uniform")
    with pytest.raises(ValueError, match="w0_init"):
        ModelConfig(n_max=4, hidden=8, layers=1, heads=2, ffn=8, w0_init="uniform")
    with pytest.raises(ValueError, match="residual"):
        ModelConfig(n_max=4, hidden=8, layers=1, heads=2, ffn=8, residual="no")
    with pytest.raises(SystemExit):
        config_from_args(["--shards", "s", "--preset", "tiny", "--out", "o", "--w0-init", "uniform"])
