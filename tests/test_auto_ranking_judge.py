"""--objective recommend (pipelines.auto.ranking_judge): an arm's value is exactly the valid split's best prior
blend that `pipelines.recommend --evaluate RUN --choose-prior` reports with the judge's pool, retriever and
sample; it never reads test; the rule (Hits@20, then MRR, strictly); the stage decides on it while keeping the
link-prediction choice in its record; and the flag's documented errors."""
import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pipelines.auto import negatives as auto_negatives, ranking_judge as auto_ranking_judge
from pipelines.auto.negatives import HARD_NEG_FRACTION, decide
from pipelines.auto.blend import GRID
from pipelines.auto.ranking_judge import JUDGE_POOL, JUDGE_POSITIVES, JUDGE_RETRIEVER, JUDGE_SAMPLE_SEED, better
from tests.test_auto_negatives import _args, _chosen, _fake_trainers, _Prior, _winner
from tests.test_auto_search import SPE, _searcher
from tests.test_sample_positives import FIELDS, citeseer, model  # noqa: F401 - the fixtures: citeseer, a small untrained model

ROOT = Path(__file__).resolve().parents[1]


def _value(hits: float, mrr: float) -> dict:
    return {"selection": hits, "mrr": mrr}


@pytest.mark.parametrize("uniform, hard, won", [
    (_value(0.10, 0.05), _value(0.11, 0.04), True),  # Hits@20 decides
    (_value(0.10, 0.05), _value(0.10, 0.06), True),  # equal Hits@20: MRR decides
    (_value(0.10, 0.05), _value(0.10, 0.05), False),  # a tie keeps uniform
    (_value(0.11, 0.01), _value(0.10, 0.09), False),
])
def test_hard_views_only_when_they_rank_strictly_better(uniform, hard, won):
    assert better(hard, uniform) is won


def _without_test(dataset):
    blind = copy.copy(dataset)
    blind.splits = {s: v for s, v in dataset.splits.items() if s != "test"}
    blind.test_graph = None
    return blind


def test_an_arm_is_the_evaluate_commands_valid_blend_and_test_is_never_read(monkeypatch, tmp_path, citeseer, model):
    """An untrained model stands in for a stage run's best.pt. Without a test split in the dataset (nothing
    to read) the judge gives the same values as with it; and those are the valid split's chosen blend of
    `pipelines.recommend --evaluate --choose-prior` on that test-less dataset (whose filter then also holds
    only validation positives) with the judge's pool, retriever and sample."""
    import pipelines.recommend.evaluation as rec
    from pipelines.recommend.evaluation import evaluate_run
    monkeypatch.setattr(auto_ranking_judge, "load_run_model", lambda *a, **k: (model, {}, FIELDS, "digest"))
    cpu = torch.device("cpu")
    got = auto_ranking_judge.ranking_values(tmp_path, citeseer, cpu)
    blind = _without_test(citeseer)
    assert {k: v for k, v in auto_ranking_judge.ranking_values(tmp_path, blind, cpu).items() if k != "seconds"} == {
        k: v for k, v in got.items() if k != "seconds"}

    monkeypatch.setattr(rec, "load_run", lambda *a, **k: (model, blind, FIELDS, "digest"))
    args = rec.build_parser().parse_args([
        "RUN", "--device", "cpu", "--out", str(tmp_path / "m.json"), "--splits", "valid",
        "--pool", str(JUDGE_POOL), "--retriever", JUDGE_RETRIEVER, "--sample-positives", str(JUDGE_POSITIVES),
        "--sample-seed", str(JUDGE_SAMPLE_SEED), "--choose-prior"])
    assert evaluate_run(args) == 0
    report = json.loads((tmp_path / "m.json").read_text())
    valid = report["splits"]["valid"]
    assert got["prior_weight"] == report["prior_weight_chosen_on_valid"]
    assert got["selection"] == valid["pencil_blend"]["hits@20"] and got["mrr"] == valid["pencil_blend"]["mrr"]
    assert got["retriever_alone"] == valid["retriever_alone"]["hits@20"]
    assert got["positives"] == valid["positives"] == min(JUDGE_POSITIVES, len(citeseer.splits["valid"].pos))
    assert 0 < got["selection"] <= got[f"recall@{JUDGE_POOL}"] <= 1


@pytest.mark.parametrize("lp_hard, rank_hard", [(0.31, True), (0.29, True), (0.31, False)])
def test_the_stage_decides_on_the_judge_and_records_both(tmp_path, monkeypatch, lp_hard, rank_hard):
    """Fake trainers and a fake judge: the ranking decides (whatever the link-prediction rule would pick), the
    record keeps the link-prediction choice and both arms' ranking values, and the final seeds' weights follow
    the judge's choice."""
    searcher, names, _ = _searcher(tmp_path, 1e9, [0.0])
    searcher.sec_per_epoch = {c: SPE[names[c]] for c in names}
    chosen = _chosen(searcher, names, epochs=2)
    winner = _winner(tmp_path, 2, True)
    monkeypatch.setattr(auto_negatives, "run_trainers", _fake_trainers([], "original", 2))
    priors = {"s10": _Prior([0.30] * len(GRID)), "hard-s10": _Prior([lp_hard] * len(GRID))}
    values = {"0": {"selection": 0.10, "mrr": 0.05, "retriever_alone": 0.09},
              "0.5": {"selection": 0.12 if rank_hard else 0.08, "mrr": 0.05, "retriever_alone": 0.09}}
    judged = []

    def judge(run_dir):
        judged.append(Path(run_dir).name)
        return values["0.5" if Path(run_dir).name.startswith("negatives-f0.5-") else "0"]

    record, weights = decide(_args(["--objective", "recommend"]), searcher, [0, 1, 2], chosen, lambda f: "hard-s10",
                             priors.__getitem__, "original", "original", winner, judge)
    assert sorted(judged) == sorted(Path(d).name for d in record["runs"].values())
    assert record["objective"] == "recommend" and record["ranking"] == values
    assert record["link_prediction_choice"] == (HARD_NEG_FRACTION if lp_hard > 0.30 else 0.0)
    assert record["chosen"] == (HARD_NEG_FRACTION if rank_hard else 0.0)
    assert chosen["shards"] == ("hard-s10" if rank_hard else "s10")
    runs = {k: Path(v) for k, v in record["runs"].items()}
    assert weights == ({1: runs["0.5"] / "best.pt"} if rank_hard else {1: runs["0"] / "best.pt", 0: winner / "best.pt"})


@pytest.mark.parametrize("flags, message", [
    (["--preset", "tiny", "--objective", "recommend"],
     "--objective recommend: chooses --preset auto's training negatives on validation; preset tiny has no such "
     "choice: add --preset auto, or drop --objective"),
    (["--preset", "auto", "--objective", "recommend", "--hard-neg-fraction", "0.5"],
     "--objective recommend: chooses the training negatives, which --hard-neg-fraction 0.5 fixes: pass one of the two"),
])
def test_objective_errors_are_one_line_before_any_work(tmp_path, flags, message):
    edges = tmp_path / "edges.csv"
    edges.write_text("src,dst\n" + "".join(f"{i},{i + 1}\n" for i in range(30)))
    proc = subprocess.run([sys.executable, "-m", "pipelines.run", "--dataset", str(edges), "--out",
                           str(tmp_path / "results"), "--shards", str(tmp_path / "shards"), *flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert message in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "shards").exists() and not (tmp_path / "results").exists()
