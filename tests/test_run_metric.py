"""`pencil run --metric` decides each seed's best epoch under a fixed preset too: on a tiny
run where validation MRR and AUC peak at different epochs, `--metric auc` keeps the epoch of the best AUC and
`summary.json` says `selection_metric: auc`; a seed trained under another choice of epoch is never reused as if
chosen on this one (refused in one line, retrained with --overwrite), while `--metric mrr`, the data's own, reuses
a seed trained without the flag. Slow: each run preprocesses (once) and trains 4 epochs on CPU (~15 s)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import bipartite_rows, needs_ray, run_config, write_edges

EPOCHS = 4  # on this graph and seed, validation MRR peaks at epoch 3 and AUC at epoch 2 (checked below)


def test_the_metric_given_is_the_trainers_selection_unless_it_is_the_datas_own():
    base = ["--dataset", "citeseer"]
    assert run_config(*base).select_on_for("mrr") is None and run_config(*base).metric == "mrr"
    assert run_config(*base, "--metric", "auc").select_on_for("mrr") == "auc"
    assert run_config(*base, "--metric", "mrr").select_on_for("mrr") is None  # the data's own: no flag
    assert run_config(*base, "--metric", "mrr").select_on_for("hits@50") == "mrr"  # an OGB set's, overridden


def pencil_run(root: Path, *flags) -> int:
    from pipelines.run import main

    edges = root / "shop.csv"
    if not edges.exists():
        write_edges(edges, bipartite_rows())
    common = ["--preset", "tiny", "--seeds", "0", "--device", "cpu", "--num-cpus", "1", "--epochs", EPOCHS]
    return main(
        [
            *map(str, ["--dataset", edges, "--out", root / "results", "--shards", root / "shards", *common, *flags]),
            "--train-arg=--num-workers=0",
        ]
    )


def seed_folder(root: Path) -> Path:
    return root / "results" / "shop" / "tiny" / "original" / "seed0"


def valid_peaks(folder: Path) -> dict[str, int]:
    """{metric: the epoch of its best validation value} from the run's metrics.jsonl (first epoch on a tie)."""
    from trainer.metrics_log import read_metrics

    valid = [e for e in read_metrics(folder / "metrics.jsonl", "eval") if e["split"] == "valid"]
    return {m: max(valid, key=lambda e: (e[m], -e["epoch"]))["epoch"] for m in ("mrr", "auc")}


@pytest.mark.slow
@needs_ray
def test_metric_auc_picks_the_epoch_of_the_best_validation_auc(tmp_path, capsys):
    assert pencil_run(tmp_path, "--metric", "auc") == 0
    folder = seed_folder(tmp_path)
    peaks = valid_peaks(folder)
    assert peaks["mrr"] != peaks["auc"], f"the run must tell the metrics apart: {peaks}"
    summary = json.loads((folder / "summary.json").read_text())
    record = json.loads((folder / "result.json").read_text())
    assert summary["selection_metric"] == "auc" and summary["best_epoch"] == peaks["auc"] == record["best_epoch"]

    # the same folder without --metric: the data's MRR; the seed chosen on AUC is retrained, never reused
    assert pencil_run(tmp_path, "--overwrite") == 0
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["selection_metric"] == "mrr" and summary["best_epoch"] == valid_peaks(folder)["mrr"]

    stamp = (folder / "summary.json").stat().st_mtime_ns
    assert pencil_run(tmp_path, "--metric", "mrr") == 0  # the data's own metric: the same choice, reused untouched
    assert (folder / "summary.json").stat().st_mtime_ns == stamp

    capsys.readouterr()
    assert pencil_run(tmp_path, "--metric", "auc") != 0  # a seed chosen on MRR is refused, in one line
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "select_on 'mrr'" not in err[0] and "select_on" in err[0], err
    assert "--overwrite" in err[0] and json.loads((folder / "summary.json").read_text())["selection_metric"] == "mrr"

    # the --overwrite that refusal names retrains it, though the refused rerun had already set its record aside
    assert pencil_run(tmp_path, "--metric", "auc", "--overwrite") == 0
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["selection_metric"] == "auc" and summary["best_epoch"] == peaks["auc"]
