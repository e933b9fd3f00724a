"""Ablation options change exactly what they claim (paper appendix), and the ablation recipe runs end to end.

- no residual: each block IS the plain BertLayer (same output, no extra parameters);
- W0 init: orthogonal / mean-shifted Gaussian (mean 0.1) / low-rank (rank 5), frozen unless asked;
- WPE: learned BERT-style embeddings indexed by the token's position in its own sequence;
- the options travel CLI -> TrainConfig -> ModelConfig and are saved with the run's config.
"""

import pytest
import torch

from tests.conftest import cached_set
from tests.test_model import N_MAX, dense_forward, random_samples, small_model
from trainer.config import config_from_args
from trainer.config_sections import ConfigError, ModelOverrides
from trainer.data.packing import pack_samples as pack  # hand-built sample dicts
from trainer.model.attention import AttentionContext
from trainer.model.pencil import ModelConfig, Propagation, token_positions


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
    assert abs(w0.std().item() - 512**-0.5) < 0.005
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


# ---------------------------------------------------------------------------- the recipe
def test_variants_per_suite_share_the_plain_run():
    from pipelines.paper.ablations import variants

    names = [v.slug for v in variants(["mr", "w0", "wpe", "depth", "lrp"], 2, [1, 2, 4])]
    assert names == [
        "pencil",
        "no-mr",
        "w0-gaussian",
        "w0-low-rank",
        "w0-learnable",
        "wpe",
        "lrp3",
        "layers1",
        "layers4",
    ]
    assert variants(["lrp"], 2, [2])[1].flags == ("--lrp", "3")
    depth = {v.slug: (v.flags, v.layers) for v in variants(["depth"], 2, [1, 2, 4])}
    assert depth == {"pencil": ((), 2), "layers1": (("--layers", "1"), 1), "layers4": (("--layers", "4"), 4)}
    from pipelines.paper.ablations import AblationConfig, Variant, build_parser, variant_options

    cfg = AblationConfig.from_args(build_parser().parse_args(["--preset", "tiny", "--train-arg=--num-workers=0"]))
    v = Variant("x", "x", ("--w0-init", "low-rank", "--wpe"), 2)
    # the user's trainer flags, then the variant's, one token each
    assert variant_options(cfg, v).train_args == ("--num-workers", "0", "--w0-init", "low-rank", "--wpe")


def test_table_prints_measured_rows_beside_the_paper():
    from pipelines.paper.ablations import table

    runs = [
        {
            "dataset": "cora",
            "protocol": "original",
            "model": m,
            "seed": s,
            "variant": m,
            "layers": 2,
            "flags": [],
            "test": {"mrr": v, "hits@3": v, "hits@20": v},
        }
        for m, vals in (("PENCIL", (0.40, 0.42)), ("PENCIL \\ MR", (0.30, 0.36)))
        for s, v in enumerate(vals)
    ]
    rows, md = table(runs, "cora", ["mr"])
    assert [r["model"] for r in rows] == ["PENCIL", "PENCIL \\ MR"]
    assert rows[0]["mrr"][0] == pytest.approx(41.0) and rows[1]["mrr"][1] == pytest.approx(4.2426, abs=1e-3)
    assert "| PENCIL \\ MR | 2 | 33.00 ± 4.24 |" in md and "MRR 34.64 ± 1.99; HITS@3 35.98 ± 3.97" in md
    assert "PENCIL + LRP-3 (paper only)" in md and "MRR 39.18" in md


@pytest.mark.slow  # the recipe end to end (a minute); its pieces are tested in this module's default tests
def test_ablation_recipe_end_to_end_tiny(tmp_path, capsys, shard_cache):
    """Preprocess once, train PENCIL, PENCIL \\ MR and LRP-3 on a fifth of an epoch, and write all three outputs."""
    import json

    from pipelines.paper import ablations

    rc = ablations.main(
        [
            "--preset",
            "tiny",
            "--suite",
            "mr,lrp",
            "--seeds",
            "0",
            "--epochs",
            "0.2",
            "--num-cpus",
            "1",
            "--out",
            str(tmp_path / "res"),
            "--shards",
            str(cached_set(shard_cache, "citeseer-tiny")),
            "--device",
            "cpu",
            "--train-arg=--num-workers=0",
            "--train-arg=--no-progress",
        ]
    )
    assert rc == 0
    out = tmp_path / "res" / "ablations" / "tiny"
    plain = json.loads((out / "pencil" / "seed0" / "result.json").read_text())
    no_mr = json.loads((out / "no-mr" / "seed0" / "result.json").read_text())
    assert plain["model"] == "PENCIL" and no_mr["model"] == "PENCIL \\ MR" and no_mr["flags"] == ["--no-residual"]
    # the variant's option reached the trained model's saved config
    saved = json.loads((out / "no-mr" / "seed0" / "summary.json").read_text())["config"]["model"]
    assert saved["residual"] is False
    assert json.loads((out / "pencil" / "seed0" / "summary.json").read_text())["config"]["model"]["residual"] is None
    results = json.loads((out / "results.json").read_text())
    assert [r["model"] for r in results["table"]] == ["PENCIL", "PENCIL \\ MR", "PENCIL + LRP-3"]
    lrp = json.loads((out / "lrp3" / "seed0" / "summary.json").read_text())["config"]
    assert lrp["model"]["lrp"] == 3 and lrp["data"]["orderings"] == 3
    assert "| PENCIL \\ MR | 1 |" in (out / "report.md").read_text()
    assert (out / "ablations.png").stat().st_size > 0
    assert "PENCIL \\ MR" in capsys.readouterr().out


def test_ablation_bad_flags_fail_before_any_work(tmp_path, capsys):
    from pipelines.paper import ablations

    for argv, needle in (
        (["--preset", "nope"], "--preset"),
        (["--preset", "tiny", "--suite", "mr,lrp4"], "--suite"),
        (["--preset", "tiny", "--train-arg=--w0-init=uniform"], "--w0-init"),
    ):
        try:
            rc = ablations.main(argv + ["--out", str(tmp_path / "o"), "--shards", str(tmp_path / "s")])
        except SystemExit as usage:  # a bad flag value is a usage error, exit 2
            rc = usage.code
        assert rc != 0
        msg = capsys.readouterr().err.strip()
        assert len(msg.splitlines()) == 1 and needle in msg, msg
    assert not (tmp_path / "s").exists()
