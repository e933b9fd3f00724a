"""Paper presets (Tables 3 and 4) and their rules."""

import pytest

from common.presets import PRESETS, Preset, default_sampling, get_preset, n_max, preset_for_protocol


def test_node_budget_matches_design():
    assert (n_max(1, 20), n_max(2, 20), n_max(1, 75), n_max(2, 5)) == (42, 842, 152, 62)


# docs/design.md (the paper's Tables 3 and 4), transcribed row by row: name -> (dataset, protocol, (d, n), hidden,
# layers, heads, FFN, effective batch, epochs in full passes over the positives). A preset's `epochs` counts
# passes over its views, each of train_percent % of the positives: collab's 10 epochs are 20 half-passes.
PAPER_TABLE = {
    "cora": ("cora", "original", (2, 20), 512, 8, 8, 2048, 2048, 150),
    "cora-heart": ("cora", "heart", (2, 20), 512, 4, 8, 2048, 2048, 150),
    "citeseer": ("citeseer", "original", (2, 20), 1024, 2, 8, 2048, 2048, 150),
    "citeseer-heart": ("citeseer", "heart", (2, 20), 1024, 2, 8, 2048, 2048, 300),
    "pubmed": ("pubmed", "original", (2, 16), 512, 8, 8, 2048, 4096, 80),
    "pubmed-heart": ("pubmed", "heart", (2, 20), 512, 4, 8, 2048, 2048, 250),
    "ogbl-collab": ("ogbl-collab", "ogb", (1, 75), 512, 8, 8, 2048, 8192, 10),
    "ogbl-ppa": ("ogbl-ppa", "ogb", (1, 150), 512, 4, 8, 2048, 16384, 15),
    "ogbl-citation2": ("ogbl-citation2", "ogb", (1, 40), 512, 3, 8, 2048, 65536, 0.5),
    "ogbl-ddi": ("ogbl-ddi", "ogb", (1, 350), 512, 8, 8, 2048, 4096, 8),
}
HALF_OF_THE_POSITIVES = {"ogbl-collab", "ogbl-citation2"}  # docs/design.md: "each over a seeded half of the positives"


@pytest.mark.parametrize("name", sorted(PAPER_TABLE))
def test_paper_rows(name):
    p = get_preset(name)
    row = (
        p.dataset,
        p.protocol,
        p.sampling,
        p.hidden,
        p.layers,
        p.heads,
        p.ffn,
        p.effective_batch,
        p.epochs * p.train_percent / 100,
    )
    assert row == PAPER_TABLE[name]
    assert p.train_percent == (50.0 if name in HALF_OF_THE_POSITIVES else 100.0)
    assert (p.dropout, p.lr, p.weight_decay, p.features) == (0.1, 1e-4, 0.01, False)


def test_every_paper_preset_is_in_the_table():
    """A paper preset added without its row here would go unpinned: every preset with heads 8 and FFN 2048
    (the paper's model shape) is a row of the table."""
    paper = {n for n, p in PRESETS.items() if (p.heads, p.ffn) == (8, 2048)}
    assert paper == set(PAPER_TABLE)


def test_preset_rules():
    assert default_sampling("ogbl-ppa") == (1, 150) and default_sampling("my-graph") == (2, 20)
    assert all(p.hidden % p.heads == 0 for p in PRESETS.values())


def test_protocol_twins():
    assert preset_for_protocol("citeseer", "heart") == "citeseer-heart"
    assert preset_for_protocol("citeseer-small", "heart") == "citeseer-heart-small"
    assert preset_for_protocol("citeseer-heart-small", "original") == "citeseer-small"
    assert preset_for_protocol("tiny", "heart") == "tiny"  # no twin: the same preset, another protocol


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown preset 'nope'; choose one of: citeseer, citeseer-ablate-small"):
        get_preset("nope")
    with pytest.raises(ValueError, match="not divisible by heads"):
        Preset("x", "citeseer", "original", (1, 5), hidden=30, layers=1, heads=4, ffn=8, effective_batch=8, epochs=1)
    with pytest.raises(ValueError, match=r"sampling \(d, n\) must be positive"):
        Preset("x", "citeseer", "original", (0, 5), hidden=32, layers=1, heads=4, ffn=8, effective_batch=8, epochs=1)
    with pytest.raises(ValueError, match="lr_schedule must be one of constant, cosine"):
        Preset(
            "x",
            "citeseer",
            "original",
            (1, 5),
            hidden=32,
            layers=1,
            heads=4,
            ffn=8,
            effective_batch=8,
            epochs=1,
            lr_schedule="step",
        )


def test_paper_presets_train_without_a_schedule():
    """docs/design.md: the reference training is AdamW at a fixed lr; only CPU presets of ours may decay it."""
    for name in ("citeseer", "cora", "pubmed", "citeseer-heart", "ogbl-collab", "ogbl-ppa", "ogbl-ddi"):
        assert get_preset(name).lr_schedule == "constant"


def test_the_estimation_presets_name_the_heuristic_targets_there_are():
    from common.heuristic_targets import TARGETS
    from common.presets import EXPERIMENT_PRESETS, HEURISTIC_TARGETS

    assert HEURISTIC_TARGETS == TARGETS
    for spec in EXPERIMENT_PRESETS["heuristic_estimation"].values():
        assert set(spec["heuristics"]) <= set(TARGETS)


def test_auto_is_not_a_preset_but_runs_saved_under_that_old_name_still_load():
    """ "auto" means one thing, the search of `pencil run --preset auto`; a run config saved when the general
    preset was also called auto loads as general."""
    from common.presets import get_preset
    from trainer.config import TrainConfig, config_for

    with pytest.raises(ValueError, match="unknown preset 'auto'"):
        get_preset("auto")
    saved = config_for("general", "S", "O").to_dict() | {"preset": "auto"}
    assert TrainConfig.from_dict(saved) == config_for("general", "S", "O")
    assert get_preset("general").cpu_view_positives == 4000 and get_preset("citeseer-small").cpu_view_positives is None


def test_the_general_preset_caps_a_cpu_view_at_4000_positives():
    from common.presets import get_preset
    from pipelines.core.shard_sets import view_percent

    general = get_preset("general")
    assert view_percent(general, 3000, "cpu") == 100.0 and view_percent(general, 3000, "cuda") == 100.0
    assert view_percent(general, 8000, "cpu") == 50.0 and view_percent(general, 8000, "cuda") == 100.0
    assert view_percent(get_preset("ogbl-collab"), 10**6, "cpu") == 50.0  # a preset's own share stays
