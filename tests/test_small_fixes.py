"""Small trust fixes: `pencil --help-all` says whose flag it is; the output guard's suggested path is
one it accepts; `pencil report` labels a seed from the run's own record, whichever of its files is named."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from common.outputs import OutputError, check_output

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("prefix", [[], ["paper"]])
def test_help_all_at_the_front_door_names_the_commands_flag(prefix):
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines", *prefix, "--help-all"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    prog = " ".join(["pencil", *prefix])
    assert line.startswith(f"{prog}: error: --help-all is each command's flag: {prog} COMMAND --help-all"), line
    hinted = re.search(r"\(e\.g\. (.*?)\)", line).group(1).split()[len(prefix) + 1 :]
    shown = subprocess.run([sys.executable, "-m", "pipelines", *prefix, *hinted], cwd=ROOT, capture_output=True)
    assert shown.returncode == 0 and b"--help-all" in shown.stdout  # the hinted command works


def suggestion(out, **kw) -> Path:
    with pytest.raises(OutputError) as err:
        check_output(out, **kw)
    return Path(str(err.value).split(", e.g. ")[1])


def test_the_guards_suggested_file_is_one_the_guard_accepts(tmp_path):
    results = tmp_path / "results" / "edges" / "tiny"
    seed = results / "original" / "seed0"
    seed.mkdir(parents=True)
    (results / "results.json").write_text("{}")
    (seed / "best.pt").write_bytes(b"")
    for folder in (seed, results, tmp_path):
        example = suggestion(folder)
        assert not example.exists() and check_output(example) == example, (folder, example)
    (tmp_path / "out.parquet").write_text("the user's file")  # taken: another name
    assert suggestion(tmp_path) == tmp_path / "out-1.parquet"
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    assert check_output(example := suggestion(inputs, folders={"--pairs-dir": inputs}), folders={"x": inputs})
    assert inputs not in example.parents


@pytest.fixture(scope="module")
def bare_seed(tmp_path_factory) -> Path:
    """A seed trained on a set without node features, with the result.json `pencil run` writes beside it."""
    import torch

    from pipelines.core.seeds import result_record
    from tests.test_trainer_data import make_shard_set
    from trainer.config import config_for
    from trainer.run_summary import RunSummary
    from trainer.train import run

    root = tmp_path_factory.mktemp("bare")
    shards = make_shard_set(root / "shards")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        summary = run(
            config_for(
                "tiny",
                str(shards),
                str(root / "seed0"),
                max_steps=2,
                device="cpu",
                progress=False,
                data={"num_workers": 0},
            )
        )
    finally:
        torch.set_num_threads(threads)
    record = result_record(
        summary["dataset"], summary["protocol"], "tiny", 0, RunSummary.from_dict(summary), features=False
    )
    (root / "seed0" / "result.json").write_text(json.dumps(record))
    return root / "seed0"


def test_report_labels_a_seed_alike_from_its_summary_or_its_result(bare_seed, tmp_path):
    from pipelines.core.results import load_results

    summary = json.loads((bare_seed / "summary.json").read_text())
    assert summary["node_features"] is False
    by_file = {name: load_results([bare_seed / name])[0]["model"] for name in ("summary.json", "result.json")}
    assert by_file == {"summary.json": "PENCIL w/o features", "result.json": "PENCIL w/o features"}
    from pipelines.report import main

    for name in ("summary.json", "result.json"):
        out = tmp_path / f"{name}.md"
        assert main([str(bare_seed / name), "--out", str(out), "--no-paper"]) == 0
        assert "| PENCIL w/o features |" in out.read_text()
