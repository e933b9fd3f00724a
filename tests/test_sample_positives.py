"""pipelines.recommend --evaluate RUN --sample-positives N --sample-seed S: full ranking of a seeded uniform sample
of N positives per split. The sample is a function of (positives, N, seed); the metrics over it are exactly what
full_ranking gives on that subset passed explicitly (the filter keeps every known positive), for every retriever,
and --choose-prior picks its weight on the sampled valid positives."""

import json

import numpy as np
import pytest
import torch

from pipelines.recommend.engine import RecConfig, scorer_for
from pipelines.recommend.ranking import choose_weight, full_ranking, sample_positives
from trainer.model.pencil import ModelConfig, Pencil


def test_the_sample_is_a_seeded_uniform_subset_without_replacement():
    pos = np.stack([np.arange(50), np.arange(50) + 100], axis=1)
    got = sample_positives(pos, 10, 3)
    np.testing.assert_array_equal(got, pos[np.sort(np.random.default_rng(3).choice(50, 10, replace=False))])
    assert len(np.unique(got[:, 0])) == 10 and np.all(np.diff(got[:, 0]) > 0)  # distinct rows, original order
    np.testing.assert_array_equal(sample_positives(pos.copy(), 10, 3), got)
    assert not np.array_equal(sample_positives(pos, 10, 4), got)
    for n in (None, 50, 51):
        assert sample_positives(pos, n, 3) is pos  # all of them
    # uniform: over 2000 seeds each of the 50 rows is drawn 2000 * 10 / 50 = 400 times (sd 17.9)
    counts = np.bincount(np.concatenate([sample_positives(pos, 10, s)[:, 0] for s in range(2000)]), minlength=50)
    assert counts.sum() == 20000 and np.all(np.abs(counts - 400) < 5 * 17.9)


@pytest.fixture(scope="module")
def citeseer():
    from common.datasets import DatasetSpec, load_dataset

    return load_dataset(DatasetSpec("citeseer"))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Pencil(ModelConfig(n_max=12, hidden=16, layers=1, heads=2, ffn=32, dropout=0.0)).eval()


FIELDS = {"sampling": (1, 5), "n_max": 12}


def evaluate(monkeypatch, tmp_path, citeseer, model, *flags):
    """The CLI's --evaluate path on citeseer with a small untrained model standing in for a run's checkpoint."""
    import pipelines.recommend.evaluation as rec
    from pipelines.recommend.evaluation import evaluate_run

    monkeypatch.setattr(rec, "load_evaluated_run", lambda *a, **k: (model, citeseer, FIELDS, "fingerprint"))
    args = rec.build_parser().parse_args(["RUN", "--device", "cpu", "--out", str(tmp_path / "m.json"), *flags])
    assert evaluate_run(rec.EvaluateConfig.from_args(args)) == 0
    return json.loads((tmp_path / "m.json").read_text())


@pytest.mark.parametrize("retriever", ["ra", "ppr"])
def test_sampled_metrics_equal_full_ranking_on_the_subset(monkeypatch, tmp_path, citeseer, model, retriever):
    n, seed = 25, 7
    report = evaluate(
        monkeypatch,
        tmp_path,
        citeseer,
        model,
        "--pool",
        "10",
        "--retriever",
        retriever,
        "--sample-positives",
        str(n),
        "--sample-seed",
        str(seed),
        "--choose-prior",
    )
    known = np.concatenate([citeseer.splits[s].pos for s in ("valid", "test")])
    cfg = RecConfig(k=10, pool=10, retriever=retriever, **FIELDS)
    for split in ("valid", "test"):  # valid first: its sweep chooses the test blend's weight
        every = np.asarray(citeseer.splits[split].pos, dtype=np.int64)
        subset = every[np.sort(np.random.default_rng(seed).choice(len(every), n, replace=False))]
        graph = citeseer.graph_for(split)
        want = full_ranking(
            graph, subset, known, cfg, scorer_for(model, graph, cfg, torch.device("cpu")), sweep=split == "valid"
        )
        if split == "valid":
            cfg = RecConfig(
                k=10, pool=10, retriever=retriever, prior_weight=choose_weight(want["prior_sweep"]), **FIELDS
            )
            want["pencil_blend"] = {"prior_weight": cfg.prior_weight, **want["prior_sweep"][str(cfg.prior_weight)]}
        got = report["splits"][split]
        assert got.pop("sample") == {"sample_positives": n, "sample_seed": seed, "sampled": n, "of": len(every)}
        assert got["positives"] == n < len(every)
        assert json.dumps(got, sort_keys=True) == json.dumps(json.loads(json.dumps(want)), sort_keys=True)
    assert report["prior_weight_chosen_on_valid"] == cfg.prior_weight


def test_n_at_least_the_count_ranks_every_positive(monkeypatch, tmp_path, citeseer, model):
    flags = ["--pool", "5", "--splits", "valid", "--prior-weight", "0"]
    whole = evaluate(monkeypatch, tmp_path, citeseer, model, *flags)["splits"]["valid"]
    every = len(citeseer.splits["valid"].pos)
    sampled = evaluate(
        monkeypatch, tmp_path, citeseer, model, *flags, "--sample-positives", str(every + 1), "--sample-seed", "3"
    )["splits"]["valid"]
    assert sampled.pop("sample") == {"sample_positives": every + 1, "sample_seed": 3, "sampled": every, "of": every}
    assert json.dumps(sampled, sort_keys=True) == json.dumps(whole, sort_keys=True)


@pytest.mark.parametrize(
    "main_module, flags, message",
    [
        (
            "pipelines.recommend.evaluation",
            ["RUN", "--sample-positives", "0"],
            "--sample-positives: must be >= 1, got 0",
        ),
        (
            "pipelines.recommend.job",
            ["--checkpoint", "RUN", "--all-nodes", "--sample-positives", "5"],
            "unrecognized arguments: --sample-positives 5",
        ),
    ],
)
def test_bad_sample_flags_are_one_line_errors(main_module, flags, message, tmp_path, capsys):
    import importlib

    main = importlib.import_module(main_module).main
    with pytest.raises(SystemExit) as exit_:
        main([*flags, "--out", str(tmp_path / "m.json")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if "error" in line]) == 1
