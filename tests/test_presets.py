"""Paper presets (Tables 3 and 4) and their rules."""
import pytest

from common.presets import PRESETS, Preset, default_sampling, get_preset, n_max, preset_for_protocol


def test_node_budget_matches_design():
    assert (n_max(1, 20), n_max(2, 20), n_max(1, 75), n_max(2, 5)) == (42, 842, 152, 62)


def test_paper_rows():
    cs = get_preset("citeseer")
    assert (cs.sampling, cs.hidden, cs.layers, cs.heads, cs.ffn, cs.effective_batch, cs.epochs) == ((2, 20), 1024, 2, 8, 2048, 2048, 150)
    assert get_preset("citeseer-heart").epochs == 300
    assert get_preset("ogbl-collab").train_percent == 50.0 and get_preset("ogbl-collab").protocol == "ogb"
    assert default_sampling("ogbl-ppa") == (1, 150) and default_sampling("my-graph") == (2, 20)
    assert all(p.hidden % p.heads == 0 for p in PRESETS.values())


def test_protocol_twins():
    assert preset_for_protocol("citeseer", "heart") == "citeseer-heart"
    assert preset_for_protocol("citeseer-small", "heart") == "citeseer-heart-small"
    assert preset_for_protocol("citeseer-heart-small", "original") == "citeseer-small"
    assert preset_for_protocol("tiny", "heart") == "tiny"  # no twin: the same preset, another protocol


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown preset 'nope'; choose one of: auto, citeseer"):
        get_preset("nope")
    with pytest.raises(ValueError, match="not divisible by heads"):
        Preset("x", "citeseer", "original", (1, 5), hidden=30, layers=1, heads=4, ffn=8, effective_batch=8, epochs=1)
    with pytest.raises(ValueError, match=r"sampling \(d, n\) must be positive"):
        Preset("x", "citeseer", "original", (0, 5), hidden=32, layers=1, heads=4, ffn=8, effective_batch=8, epochs=1)
    with pytest.raises(ValueError, match="lr_schedule must be one of constant, cosine"):
        Preset("x", "citeseer", "original", (1, 5), hidden=32, layers=1, heads=4, ffn=8, effective_batch=8, epochs=1,
               lr_schedule="step")


def test_paper_presets_train_without_a_schedule():
    """DESIGN.md: the reference training is AdamW at a fixed lr; only CPU presets of ours may decay it."""
    for name in ("citeseer", "cora", "pubmed", "citeseer-heart", "ogbl-collab", "ogbl-ppa", "ogbl-ddi"):
        assert get_preset(name).lr_schedule == "constant"
