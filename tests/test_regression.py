"""Heuristic estimation through the project's own path: `preprocess --targets` labels every link with its
normalised heuristic on the full graph, and the trainer regresses it (MSE), reports RMSE and selects the
lowest validation RMSE."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from common.datasets.spec import DatasetSpec
from common.heuristic_targets import full_graph, raw_scores
from common.metrics import SMALLER_IS_BETTER, improves, regression_metrics
from common.shards import read_manifest, read_shard, shard_entries
from preprocess.config import CandidateConfig, ConfigError, PreprocessConfig, SamplingConfig
from preprocess.job import run_job
from preprocess.plan import candidate_sets
from tests.conftest import REPO, cached_set
from tests.test_preprocess_job import citeseer  # noqa: F401  (fixture)


def target_config(out, targets: str | None, **kw) -> PreprocessConfig:
    kw.setdefault("candidates", CandidateConfig(views=2, protocols=("original",)))
    return PreprocessConfig(
        data=DatasetSpec("citeseer"), sampling=SamplingConfig(1, 5), out=str(out), num_cpus=2, targets=targets, **kw
    )


def labels_by_cid(manifest: dict, split: str, protocol=None, view=None) -> np.ndarray:
    out = {}
    for e in shard_entries(manifest, split, protocol, view):
        for b in read_shard(f"{manifest.root}/{e['name']}"):
            out.update(zip(b.cid.tolist(), b.label.tolist()))
    return np.array([out[i] for i in range(len(out))], dtype=np.float32)


@pytest.fixture(scope="module")
def cn_set(shard_cache, citeseer):  # noqa: F811
    return run_job(target_config(cached_set(shard_cache, "regression"), "cn"), citeseer).path


# ---------------------------------------------------------------------------- metrics
def test_regression_metrics_and_selection_direction():
    got = regression_metrics(np.array([1.0, 2.0, 4.0]), np.array([1.0, 0.0, 1.0]))
    assert got["rmse"] == pytest.approx(np.sqrt((0 + 4 + 9) / 3)) and got["mae"] == pytest.approx(5 / 3)
    assert "rmse" in SMALLER_IS_BETTER
    assert improves("rmse", 0.5, 0.6) and not improves("rmse", 0.7, 0.6) and improves("rmse", 9.0, -np.inf)
    assert improves("mrr", 0.7, 0.6) and not improves("mrr", 0.5, 0.6) and improves("mrr", 0.0, None)


# ---------------------------------------------------------------------------- preprocess --targets
def test_targets_label_every_set_with_the_normalised_heuristic(cn_set, citeseer):  # noqa: F811
    m = read_manifest(cn_set)
    assert m.targets["name"] == "cn" and set(m.eval) == {"valid/original", "test/original"}
    assert all(e["metric"] == "rmse" for e in m.eval.values())
    # Independent recomputation: CN on the union of every split's positives, log1p, divided by the 99.99th
    # percentile of the training candidates of both views, clipped at 1.
    full = full_graph(citeseer.num_nodes, *(citeseer.splits[s].pos for s in ("train", "valid", "test")))
    sets = candidate_sets(target_config("x", "cn"), citeseer, ["original"])
    pairs = {(cs.split, cs.view): np.stack([cs.cands.src, cs.cands.dst], 1) for cs in sets}
    train_raw = np.concatenate([raw_scores("cn", full, p) for (s, _), p in pairs.items() if s == "train"])
    p_high = np.percentile(np.log1p(train_raw), 99.99)
    assert m.targets["stats"]["p_high"] == pytest.approx(p_high)
    for (split, view), p in pairs.items():
        got = labels_by_cid(m, split, None if split == "train" else "original", view)
        want = np.minimum(np.log1p(raw_scores("cn", full, p)) / p_high, 1.0)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    # By hand for one training positive: common neighbours counted from the full graph's neighbour lists.
    u, v = pairs[("train", 0)][0]
    nbrs = lambda x: set(full.indices[full.indptr[x] : full.indptr[x + 1]].tolist())
    assert labels_by_cid(m, "train", None, 0)[0] == pytest.approx(min(np.log1p(len(nbrs(u) & nbrs(v))) / p_high, 1.0))


def test_targets_are_part_of_the_cache_key(cn_set, citeseer):  # noqa: F811
    from common.shards import cache_key

    fp = citeseer.fingerprint()
    keys = {t: cache_key(target_config("x", t).key_parts(fp, ["original"])) for t in (None, "cn", "aa")}
    assert len(set(keys.values())) == 3 and read_manifest(cn_set).key == keys["cn"]
    # a link-prediction set keeps the key it had before --targets existed (no "targets" entry at all)
    assert "targets" not in target_config("x", None).key_parts(fp, ["original"])


def test_bad_targets_are_one_line_errors(tmp_path, citeseer):  # noqa: F811
    with pytest.raises(ConfigError, match="--targets: unknown heuristic 'jaccard'"):
        target_config(tmp_path, "jaccard")
    with pytest.raises(ConfigError, match="--targets: .*include train in --splits"):
        run_job(
            target_config(
                tmp_path, "cn", candidates=CandidateConfig(splits=("valid", "test"), protocols=("original",))
            ),
            citeseer,
        )
    r = subprocess.run(
        [sys.executable, "-m", "preprocess", "--dataset", "citeseer", "--targets", "jaccard", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "--targets: unknown heuristic 'jaccard'; choose one of cn, aa, ra, katz, spd, pr" in lines[0]


# ---------------------------------------------------------------------------- trainer on a regression set
def test_trainer_regresses_and_selects_the_lowest_validation_rmse(cn_set, tmp_path):
    from trainer.config import config_for
    from trainer.metrics_log import read_metrics
    from trainer.model.pencil import model_for_shards
    from trainer.train import run

    torch.set_num_threads(1)
    cfg = config_for(
        "tiny",
        str(cn_set),
        str(tmp_path / "run"),
        epochs=3,
        device="cpu",
        progress=False,
        test_every_eval=True,
        data=dict(num_workers=0),
        optim=dict(effective_batch=256),
    )
    summary = run(cfg)
    assert summary["selection_metric"] == "rmse" and set(summary["valid"]) == {"rmse", "mae"}
    evals = [e for e in read_metrics(tmp_path / "run" / "metrics.jsonl") if e.get("event") == "eval"]
    valid = {e["epoch"]: e["rmse"] for e in evals if e["split"] == "valid"}
    test = {e["epoch"]: e["rmse"] for e in evals if e["split"] == "test"}
    best = min(valid, key=valid.get)  # the LOWEST validation RMSE, and test at that epoch
    assert summary["best_epoch"] == best and summary["test"]["rmse"] == pytest.approx(test[best])
    # The run regressed the targets: better than predicting the training mean for every validation link.
    m = read_manifest(cn_set)
    mean = labels_by_cid(m, "train", None, 0).mean()
    y = labels_by_cid(m, "valid", "original")
    assert summary["valid"]["rmse"] < np.sqrt(np.mean((y - mean) ** 2))
    assert model_for_shards("tiny", {}, m).cfg.task == "regression"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["valid"]["rmse"] == summary["valid"]["rmse"]
