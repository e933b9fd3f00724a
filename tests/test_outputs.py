"""The one output guard (common/outputs.py) on every command that writes, without a trained model: a file
inside a run folder, a results tree or a shard set is refused, a folder output is never nested in one, an
existing output is replaced only when it is the same command's result on the same data (its stamp), and
`pencil report` refuses a seed counted twice or two graphs in one row. Each case runs the command's main()."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def seed_folder(root: Path, seed: int, fingerprint: str, dataset: str = "edges", mrr: float = 0.5) -> Path:
    """A recipe's seed folder as pipelines.run leaves it: result.json, and the trainer's config.json."""
    d = root / "original" / f"seed{seed}"
    d.mkdir(parents=True)
    (d / "result.json").write_text(
        json.dumps(
            {
                "dataset": dataset,
                "protocol": "original",
                "model": "PENCIL",
                "seed": seed,
                "own_graph": True,
                "test": {"mrr": mrr},
            }
        )
    )
    (d / "config.json").write_text(json.dumps({"data": {"dataset_fingerprint": fingerprint}}))
    (d / "best.pt").write_bytes(b"weights")
    return d


@pytest.fixture
def results(tmp_path) -> Path:
    """A results tree of two seeds (results.json at its root, as publish_results writes it)."""
    root = tmp_path / "results" / "edges" / "auto"
    for seed in (0, 1):
        seed_folder(root, seed, "f" * 16, mrr=0.4 + 0.1 * seed)
    (root / "results.json").write_text("{}")
    return root


def error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if " error: " in line]
    assert len(lines) == 1, lines
    return lines[0]


def main_fails(main, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in argv])
    assert exit_.value.code == 2
    return error_line(capsys)


# ---------------------------------------------------------------------------- the guard itself
def test_a_file_inside_a_run_a_results_tree_or_a_shard_set_is_refused(results, tmp_path):
    from common.outputs import OutputError, check_output

    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "manifest.json").write_text("{}")
    for out, what in (
        (results / "original" / "seed0" / "result.json", "the run folder"),
        (results / "original" / "seed0" / "blend" / "new.json", "the run folder"),
        (results / "results.json", "the results of a run"),
        (results / "report.md", "the results of a run"),
        (tmp_path / "set" / "x.parquet", "the shard set"),
    ):
        with pytest.raises(OutputError, match=f"--out {out}: is inside {what} "):
            check_output(out)
    assert check_output(tmp_path / "elsewhere.md") == tmp_path / "elsewhere.md"


def test_folder_outputs_are_never_nested_in_a_run_or_a_set(results, tmp_path):
    from common.outputs import OutputError, check_output_folder

    seed0 = results / "original" / "seed0"
    with pytest.raises(OutputError, match=f"--out {seed0}: is the run folder"):
        check_output_folder(seed0, "--out")  # pipelines.run --out RUN/original/seed0
    with pytest.raises(OutputError, match=f"--out {seed0 / 'x'}: is inside the run folder"):
        check_output_folder(seed0 / "x", "--out")
    # a trainer's own folder may hold its run, and a recipe's seed folders lie in its results tree
    assert check_output_folder(seed0, "--out", itself="run", within=("results",)) == seed0
    with pytest.raises(OutputError, match="is the results of a run"):
        check_output_folder(results, "--out")
    assert check_output_folder(tmp_path / "results", "--out") == tmp_path / "results"  # a results root: fine


def test_stamps_replace_the_same_result_and_refuse_anything_else(tmp_path):
    from common.outputs import OutputError, check_replacement, read_stamp, stamp, stamp_line, stamp_metadata

    out = tmp_path / "h.json"
    check_replacement(out, "heuristics", "aaa", overwrite=False)  # nothing there yet
    out.write_text(json.dumps({"results": {}, **stamp("heuristics", "aaa")}))
    check_replacement(out, "heuristics", "aaa", overwrite=False)  # a rerun on the same data
    with pytest.raises(
        OutputError,
        match=r"already holds a heuristics result of other data \(data aaa, this one's "
        r"bbb\); pass --overwrite",
    ):
        check_replacement(out, "heuristics", "bbb", overwrite=False, what="heuristics result")
    check_replacement(out, "heuristics", "bbb", overwrite=True)
    with pytest.raises(OutputError, match="another command"):
        check_replacement(out, "evaluate", "aaa", overwrite=False)
    (tmp_path / "mine.txt").write_text("the user's own notes")
    with pytest.raises(OutputError, match="already exists and is not a result of this command; pass --overwrite"):
        check_replacement(tmp_path / "mine.txt", "report", "aaa", overwrite=False)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1]}).replace_schema_metadata(stamp_metadata("score", "ccc")), tmp_path / "s.pq")
    (tmp_path / "c.yaml").write_text(f"# {stamp_line('serve-config', 'ddd')}\napplications: []\n")
    assert read_stamp(tmp_path / "s.pq") == ("score", "ccc") and read_stamp(tmp_path / "c.yaml") == (
        "serve-config",
        "ddd",
    )


# ---------------------------------------------------------------------------- pencil report
def test_report_never_writes_into_a_run(results, capsys):
    from pipelines import report

    before = {p: p.read_bytes() for p in results.rglob("*") if p.is_file()}
    for out in (
        results / "original" / "seed0" / "result.json",
        results / "results.json",
        results / "original" / "seed0" / "summary.json",
    ):
        line = main_fails(report.main, [results, "--out", out], capsys)
        assert f"--out {out}: is inside the" in line, line
    assert before == {p: p.read_bytes() for p in results.rglob("*") if p.is_file()}
    assert report.main([str(results)]) == 0  # and the report itself still reads


def test_report_refuses_a_seed_listed_twice_and_two_graphs_in_one_row(results, tmp_path, capsys):
    from pipelines import report

    seed0 = results / "original" / "seed0"
    line = main_fails(report.main, [results, seed0], capsys)
    assert f"{seed0 / 'result.json'}: reached twice (through {results} and {seed0})" in line, line
    other = tmp_path / "other" / "edges" / "auto"  # another graph whose file is also called edges.csv
    seed_folder(other, 2, "0" * 16)
    line = main_fails(report.main, [results, other], capsys)
    assert "edges/original/PENCIL: runs of different data in one row" in line and "report them separately" in line
    copy = tmp_path / "copy" / "edges" / "auto"  # the same seed of the same data, twice
    seed_folder(copy, 0, "f" * 16)
    line = main_fails(report.main, [results, copy], capsys)
    assert "edges/original/PENCIL: seed 0 twice" in line, line
    assert report.main([str(results)]) == 0 and "| edges | original | PENCIL | 2 |" in capsys.readouterr().out


def test_report_out_is_replaced_only_by_a_report_of_the_same_data(results, tmp_path, capsys):
    from pipelines import report

    out = tmp_path / "table.md"
    assert report.main([str(results), "--out", str(out)]) == 0
    assert report.main([str(results), "--out", str(out)]) == 0  # the same runs again: replaced
    other = tmp_path / "other" / "cora2" / "auto"
    seed_folder(other, 0, "1" * 16, dataset="cora2")
    line = main_fails(report.main, [other, "--out", out], capsys)
    assert f"--out {out}: already holds a report of other data" in line and "--overwrite" in line
    assert report.main([str(other), "--out", str(out), "--overwrite"]) == 0
    (tmp_path / "notes.md").write_text("my notes")
    line = main_fails(report.main, [results, "--out", tmp_path / "notes.md"], capsys)
    assert "already exists and is not a report of this command" in line
    assert (tmp_path / "notes.md").read_text() == "my notes"


# ---------------------------------------------------------------------------- the folder commands
def test_run_preprocess_and_train_refuse_a_folder_inside_a_run_or_a_set(results, tmp_path, capsys):
    from common.flags import FlagError
    from tests.conftest import run_config

    seed0 = results / "original" / "seed0"
    with pytest.raises(FlagError, match=f"--out {seed0}: is the run folder"):
        run_config("--dataset", "citeseer", "--out", seed0, "--shards", tmp_path / "s")  # before any work

    import preprocess.__main__ as pre

    line = main_fails(pre.main, ["--dataset", "citeseer", "--out", seed0, "-q"], capsys)
    assert f"--out {seed0}: is the run folder" in line

    from tests.test_trainer_data import make_shard_set
    from trainer.config import config_for
    from trainer.config_sections import ConfigError
    from trainer.train import run

    shards = make_shard_set(tmp_path / "set", shard_links=(16,), eval_links=12)
    for out in (shards, shards / "run"):  # train --out its own shard set, or a folder inside it
        with pytest.raises(ConfigError, match=f"--out {out}: is (inside )?the shard set {shards}"):
            run(config_for("tiny", str(shards), str(out), device="cpu", max_steps=1))
    assert sorted(p.name for p in shards.iterdir() if p.is_dir()) == []  # nothing written into the set


def test_heuristics_never_replace_another_graphs_result(tmp_path, monkeypatch, capsys):
    """The paper's citeseer and a user's citeseer.csv share the default file name: the second is refused."""
    from pipelines import heuristics
    from tests.test_dataset_identity import random_graph

    monkeypatch.chdir(tmp_path)
    assert heuristics.main(["--dataset", "citeseer", "--protocol", "original"]) == 0
    paper = (tmp_path / "results" / "heuristics-citeseer.json").read_text()
    line = main_fails(heuristics.main, ["--dataset", random_graph(tmp_path / "citeseer.csv")], capsys)
    assert "--out results/heuristics-citeseer.json: already holds a heuristics result of other data" in line, line
    assert (tmp_path / "results" / "heuristics-citeseer.json").read_text() == paper
    assert heuristics.main(["--dataset", "citeseer", "--protocol", "original"]) == 0  # the same data: rerun
