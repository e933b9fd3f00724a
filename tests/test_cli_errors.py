"""Every bad input (and the other flags of each CLI) ends in ONE line on stderr and a
non-zero exit, before any work is done; `--debug` brings the traceback back. The tables call each command's
main(argv) in this process (tests/cli_calls.py: the line and the exit status are common.cli's either way);
`test_a_real_process_fails_in_one_line` and the tests after the tables run `python -m ...` as a user would."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.cli_calls import call_main
from tests.conftest import needs_ray

ROOT = Path(__file__).resolve().parents[1]
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")  # logging lines (INFO/WARNING) are not errors


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Files the table refers to: a regular file where a folder is expected, tiny edge lists."""
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "afile").write_text("not a folder\n")
    (tmp / "one-edge.csv").write_text("src,dst\n0,1\n")
    # 36 of the 45 pairs of 10 nodes: 32 training edges, only 13 training non-edges to draw negatives from
    dense = [(a, b) for a in range(10) for b in range(a + 1, 10)][:36]
    (tmp / "dense.csv").write_text("src,dst\n" + "".join(f"{a},{b}\n" for a, b in dense))
    rng = np.random.default_rng(0)
    edges = {(int(a), int(b)) for a, b in rng.integers(0, 100, (400, 2)) if a != b}
    (tmp / "g100.csv").write_text("src,dst\n" + "\n".join(f"{a},{b}" for a, b in sorted(edges)) + "\n")
    (tmp / "cols.csv").write_text("a,b\n1,2\n")
    # 64 of the 66 pairs of 12 nodes: the test split's negatives (one per test edge) cannot all be non-edges
    full = [(a, b) for a in range(12) for b in range(a + 1, 12)][:64]
    (tmp / "full.csv").write_text("src,dst\n" + "".join(f"{a},{b}\n" for a, b in full))
    return tmp


def run(module: str, args: list[str], tmp: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    args = [a.replace("{tmp}", str(tmp)) for a in args]
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def call(module: str, args: list[str], tmp: Path, capsys) -> subprocess.CompletedProcess:
    """`python -m module args` in this process (tests/cli_calls.py)."""
    main = importlib.import_module("preprocess.__main__" if module == "preprocess" else module).main
    return call_main(main, [a.replace("{tmp}", str(tmp)) for a in args], capsys)


def assert_one_line_error(proc: subprocess.CompletedProcess, module: str, expect: str) -> str:
    assert proc.returncode != 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not LOG_LINE.match(line)]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"python -m {module}: error: "), lines[0]
    assert re.search(expect, lines[0]), (expect, lines[0])
    return lines[0]


PREPROCESS = [
    # the known bad inputs
    (["--dataset", "nosuch"], r"unknown dataset 'nosuch'"),
    (["--dataset", "citeseer", "--out", "{tmp}/afile"], r"afile: is a file, not a directory"),
    (["--dataset", "citeseer", "--out", "{tmp}/afile/sub"], r"is below .*afile, which is a file"),
    (
        ["--dataset", "{tmp}/one-edge.csv", "--out", "{tmp}/o"],
        r"1 edges leave no valid and no test edges.*; add edges \(1 cannot make",
    ),
    # --neg-ratio is 1 already: the fix is a lower --percent, not "--neg-ratio <= 1"
    (
        ["--dataset", "{tmp}/dense.csv", "--out", "{tmp}/o"],
        r"--neg-ratio 1: 32 negatives per view but the graph has only 13 distinct non-edges, so most would repeat; "
        r"lower --percent to at most 40.62, or use a larger graph$",
    ),
    (
        ["--dataset", "{tmp}/g100.csv", "--neg-ratio", "1000", "--out", "{tmp}/o"],
        r"--neg-ratio 1000: [\d,]+ negatives per view but the graph "
        r"has only [\d,]+ distinct non-edges.*--neg-ratio <= \d+",
    ),
    # the other flags
    (["--dataset", "citeseer", "--sampling", "0,5"], r"--sampling"),
    (["--dataset", "citeseer", "--sampling", "two"], r"--sampling: expected 'd,n'"),
    (["--dataset", "citeseer", "--views", "0"], r"--views"),
    (["--dataset", "citeseer", "--views", "x"], r"--views: invalid int value"),
    (["--dataset", "citeseer", "--percent", "0"], r"--percent"),
    (["--dataset", "citeseer", "--percent", "150"], r"--percent"),
    (["--dataset", "citeseer", "--neg-ratio", "-1"], r"--neg-ratio"),
    (["--dataset", "citeseer", "--hard-neg-fraction", "-0.1"], r"--hard-neg-fraction: must be a number in \[0, 1\]"),
    (["--dataset", "citeseer", "--hard-neg-fraction", "1.5"], r"--hard-neg-fraction: must be a number in \[0, 1\]"),
    (["--dataset", "citeseer", "--closest", "2"], r"--closest: must be 0 \(off\) or an integer of at least 3"),
    (["--dataset", "citeseer", "--splits", "train,dev"], r"--splits"),
    (["--dataset", "citeseer", "--protocol", "hart"], r"--protocol"),
    (["--dataset", "citeseer", "--protocol", "ogb", "--out", "{tmp}/o"], r"--protocol: citeseer has no ogb"),
    (["--dataset", "citeseer", "--seed", "-1"], r"--seed"),
    (["--dataset", "citeseer", "--num-cpus", "0"], r"--num-cpus"),
    (["--dataset", "citeseer", "--links-per-shard", "10"], r"--links-per-shard"),
    (["--dataset", "citeseer", "--block-size", "0"], r"--block-size"),
    (["--dataset", "citeseer", "--worker-memory-mb", "10", "--out", "{tmp}/o"], r"--worker-memory-mb 10"),
    (
        ["--dataset", "{tmp}/g100.csv", "--features", "--out", "{tmp}/o"],
        r"--features: dataset g100 has no node features",
    ),
    (["--dataset", "cora", "--out", "{tmp}/o"], r"cora needs --planetoid-dir"),
    (["--dataset", "ogbl-collab", "--out", "{tmp}/o"], r"ogbl-collab needs --ogb-root"),
    (["--dataset", "citeseer", "--data-dir", "{tmp}/nowhere", "--out", "{tmp}/o"], r"nowhere"),
    (["--dataset", "{tmp}/missing.csv", "--out", "{tmp}/o"], r"missing.csv"),
    (["--dataset", "citeseer", "--bogus"], r"unrecognized arguments: --bogus"),
    (["--dataset", "{tmp}/g100.csv", "--split", "85,5"], r"--split: expected three percentages"),
    (["--dataset", "{tmp}/g100.csv", "--split", "90,10,0"], r"--split 90,10,0: valid and test must be above 0"),
    (["--dataset", "{tmp}/g100.csv", "--split", "0,50,50"], r"--split 0,50,50: train must be above 0"),
    (["--dataset", "{tmp}/g100.csv", "--split", "-10,55,55"], r"--split: expected three percentages .*got '-10,55,55'"),
    # never a negative count, and the fix is a flag this command has
    (
        ["--dataset", "{tmp}/full.csv", "--out", "{tmp}/o"],
        r"full.csv test negatives: needs 6 node pairs that are not edges, but the graph \(12 nodes, 64 edges, 3 pairs "
        r"already drawn\) has only 0 left; pass --split with smaller valid and test shares",
    ),
    (
        ["--dataset", "citeseer", "--split", "80,10,10", "--out", "{tmp}/o"],
        r"--split: citeseer comes with its own split",
    ),
]


@pytest.mark.parametrize("args, expect", PREPROCESS, ids=[" ".join(a[2:]) or a[1] for a, _ in PREPROCESS])
def test_preprocess_fails_in_one_line(args, expect, inputs, capsys):
    proc = call("preprocess", args, inputs, capsys)
    assert_one_line_error(proc, "preprocess", expect)
    assert not (inputs / "o").exists() or not any((inputs / "o").rglob("*.tar"))  # nothing sampled


def test_preprocess_out_on_a_missing_bucket_is_one_line(inputs):
    from tests.s3_server import S3Server

    server = S3Server()
    try:
        proc = run("preprocess", ["--dataset", "citeseer", "--out", "s3://pencil-nobucket/x"], inputs, env=server.env)
    finally:
        server.stop()
    assert_one_line_error(proc, "preprocess", r"s3://pencil-nobucket/x: bucket 'pencil-nobucket' does not exist")


def test_debug_shows_the_traceback(inputs):
    proc = run("preprocess", ["--dataset", "nosuch", "--debug"], inputs)
    assert proc.returncode != 0 and "Traceback (most recent call last)" in proc.stderr
    assert "DatasetError: unknown dataset 'nosuch'" in proc.stderr


RUN = [
    (["--dataset", "nosuch"], r"unknown dataset 'nosuch'"),
    (["--dataset", "citeseer", "--seeds", "a,b"], r"--seeds: expected distinct non-negative integers.*'a,b'"),
    (["--dataset", "citeseer", "--seeds", "0,0"], r"--seeds"),
    (["--dataset", "citeseer", "--seeds", "-1"], r"--seeds"),
    (["--dataset", "citeseer", "--views", "0"], r"--views: must be a positive integer"),
    (["--dataset", "citeseer", "--epochs", "0"], r"--epochs: must be positive"),
    (["--dataset", "citeseer", "--hard-neg-fraction", "1.5"], r"--hard-neg-fraction: must be in \[0, 1\]"),
    (["--dataset", "citeseer", "--num-cpus", "0"], r"--num-cpus"),
    (["--dataset", "citeseer", "--split", "80,10,20"], r"--split 80,10,20: the percentages sum to 110, not 100"),
    (["--dataset", "citeseer", "--split", "80,10,10"], r"--split: citeseer comes with its own split"),
    (["--dataset", "citeseer", "--preset", "nosuch"], r"--preset: unknown preset 'nosuch'"),
    (["--dataset", "citeseer", "--protocol", "ogb"], r"--protocol ogb: citeseer has only original, heart"),
    (["--dataset", "citeseer", "--protocol", "nosuch"], r"--protocol: invalid choice"),
    (["--dataset", "citeseer", "--out", "{tmp}/afile"], r"--out .*afile is a file"),
    (["--dataset", "citeseer", "--shards", "{tmp}/afile/x"], r"--shards .*afile is a file"),
    (["--dataset", "citeseer", "--train-arg=--attention=bogus"], r"--train-arg --attention bogus: .*attention"),
    (["--dataset", "citeseer", "--train-arg=--nosuch=1"], r"--train-arg --nosuch 1: unrecognized arguments"),
    (["--dataset", "citeseer", "--train-arg=--micro-batch=0"], r"--micro-batch"),
    (["--dataset", "citeseer", "--train-arg=micro-batch"], r"--train-arg 'micro-batch': expected a trainer flag"),
    (["--dataset", "cora"], r"cora needs --planetoid-dir"),
    (["--dataset", "{tmp}/g100.csv", "--nodes", "{tmp}/nowhere.csv"], r"nowhere\.csv: file not found"),
    (["--dataset", "{tmp}/g100.csv", "--nodes", "{tmp}/cols.csv"], r"cols\.csv: no column named node or id"),
    (["--dataset", "citeseer", "--nodes", "{tmp}/g100.csv"], r"a node list applies to edge-list files only"),
    (["--dataset", "citeseer", "--bogus"], r"unrecognized arguments: --bogus"),
    (["--dataset", "{tmp}/g100.csv", "--budget-minutes", "0.1"], r"--budget-minutes 0.1: below the 2 minutes"),
    (["--dataset", "{tmp}/g100.csv", "--out", "s3://b/res"], r"--out s3://b/res: results are written to a filesystem"),
    (
        ["--dataset", "{tmp}/full.csv", "--split", "70,15,15"],
        r"full.csv test negatives: needs \d+ node pairs .* has "
        r"only 0 left; pass --split with smaller",
    ),
]


def _ids(cases, start=2):
    out = []
    for case in cases:
        values = case.values if hasattr(case, "values") else case
        args = next(v for v in values if isinstance(v, list))
        module = [v for v in values if isinstance(v, str) and v.startswith("pipelines")]
        out.append(" ".join(module + (args[start:] if start else args)) or args[1])
    return out


@pytest.mark.parametrize("args, expect", RUN, ids=_ids(RUN))
def test_pipelines_run_fails_before_any_work(args, expect, inputs, tmp_path, capsys):
    proc = call(
        "pipelines.run",
        args + ["--out", str(tmp_path / "results"), "--shards", str(tmp_path / "shards")]
        if "--out" not in args and "--shards" not in args
        else args,
        inputs,
        capsys,
    )
    assert_one_line_error(proc, "pipelines.run", expect)
    assert not (tmp_path / "shards").exists() and not (tmp_path / "results").exists()  # no work was done


OTHERS = [
    ("pipelines.report", ["{tmp}/nowhere"], r"no such run folder"),
    ("pipelines.report", ["{tmp}"], r"no result.json found"),
    ("pipelines.heuristics", ["--dataset", "nosuch"], r"unknown dataset 'nosuch'"),
    ("pipelines.heuristics", ["--dataset", "citeseer", "--heuristics", "cn", "--out", "{tmp}/afile/h.json"], r"afile"),
    (
        "pipelines.score",
        ["--checkpoint", "{tmp}/nowhere", "--pairs", "{tmp}/cols.csv", "--out", "{tmp}/s.parquet"],
        r"--checkpoint .*nowhere: no such file",
    ),
    (
        "pipelines.score",
        ["--checkpoint", "{tmp}", "--pairs", "{tmp}/cols.csv", "--out", "{tmp}/s.parquet", "--orderings", "0"],
        r"--orderings must be >= 1",
    ),
    ("pipelines.heuristics", ["--dataset", "citeseer", "--heuristics", "nosuch"], r"nosuch"),
]


@pytest.mark.parametrize("module, args, expect", OTHERS, ids=_ids(OTHERS, start=0))
def test_other_pipelines_fail_in_one_line(module, args, expect, inputs, capsys):
    assert_one_line_error(call(module, args, inputs, capsys), module, expect)


# One case of each command's table as a real process: the interpreter's start-up, the imports' warnings and log
# lines, and the exit status as the shell sees it. An error found by the work (preprocess: the dataset's split;
# score: a missing checkpoint) and a flag refused only once the trainer is imported (run).
PROCESSES = [
    (
        "preprocess",
        ["--dataset", "{tmp}/one-edge.csv", "--out", "{tmp}/o"],
        r"1 edges leave no valid and no test edges.*; add edges",
    ),
    (
        "pipelines.run",
        ["--dataset", "citeseer", "--train-arg=--attention=bogus", "--out", "{tmp}/r", "--shards", "{tmp}/s"],
        r"--train-arg --attention bogus: .*attention",
    ),
    (
        "pipelines.score",
        ["--checkpoint", "{tmp}/nowhere", "--pairs", "{tmp}/cols.csv", "--out", "{tmp}/s.parquet"],
        r"--checkpoint .*nowhere: no such file",
    ),
]


@pytest.mark.parametrize("module, args, expect", PROCESSES, ids=_ids(PROCESSES, start=0))
def test_a_real_process_fails_in_one_line(module, args, expect, inputs):
    assert_one_line_error(run(module, args, inputs), module, expect)
    assert not (inputs / "r").exists() and not (inputs / "s").exists()


def test_pencil_without_a_command_is_an_error_with_its_usage():
    proc = subprocess.run([sys.executable, "-m", "pipelines"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "usage: pencil COMMAND" in proc.stderr and not proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == "pencil: error: a command is required (see --help)"
    helped = subprocess.run(
        [sys.executable, "-m", "pipelines", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert helped.returncode == 0 and "usage: pencil COMMAND" in helped.stdout


@needs_ray
def test_preprocess_quiet_prints_no_progress_bar(inputs, tmp_path):
    """-q: only warnings and the final path, also when stderr is no terminal (a pipe, a log file)."""
    proc = run(
        "preprocess",
        [
            "--dataset",
            "{tmp}/g100.csv",
            "--sampling",
            "1,3",
            "--views",
            "1",
            "--num-cpus",
            "1",
            "--out",
            str(tmp_path / "o"),
            "-q",
        ],
        inputs,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "sampling:" not in proc.stderr and "link/s" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stdout.startswith("shards written: ")


# ---------------------------------------------------------------------------- common.cli itself
@needs_ray
def test_describe_unwraps_ray_task_errors_and_names_os_errors():
    import errno

    from ray.exceptions import RayTaskError

    from common.cli import describe
    from preprocess.config import ConfigError

    cause = ConfigError("--neg-ratio 9: too many")
    wrapped = RayTaskError("build_shard", "Traceback (most recent call last):\n  ...\nConfigError: x", cause)
    assert describe(wrapped.as_instanceof_cause()) == "--neg-ratio 9: too many"  # what ray.get raises
    assert describe(wrapped) == "--neg-ratio 9: too many"
    assert (
        describe(OSError(errno.EACCES, "Permission denied", "/x/y"))
        == "/x/y: permission denied; choose a path you can write/read"
    )
    assert (
        describe(NotADirectoryError(errno.ENOTDIR, "Not a directory", "/f/sub"))
        == "/f/sub: a component of this path is a file, not a directory"
    )
    assert (
        describe(FileNotFoundError(errno.ENOENT, "No such file or directory", "/nowhere.csv"))
        == "/nowhere.csv: no such file or directory"
    )
    assert describe(ValueError("unexpected\nsecond line")) == "ValueError: unexpected second line"
    # A DataLoader worker's error arrives with the worker's traceback in its text; keep its last line.
    text = (
        "Caught ShardError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
        '  File "x.py", line 1\ncommon.shards.ShardError: s.tar:000001.arrow: corrupt block (bad)'
    )
    from common.shards import ShardError

    assert describe(ShardError(text)) == "s.tar:000001.arrow: corrupt block (bad)"  # torch re-raises the same class


def test_run_cli_exit_statuses(capsys):
    from common.cli import run_cli

    def boom(argv):
        raise OSError(28, "No space left on device", "/disk/a.tar")

    assert run_cli(boom, [], prog="tool") == 1
    assert (
        capsys.readouterr().err
        == "tool: error: /disk/a.tar: no space left on device; free space or write somewhere else\n"
    )
    with pytest.raises(OSError):
        run_cli(boom, ["--debug"], prog="tool")
    assert run_cli(lambda argv: 0, [], prog="tool") == 0


EXIT_SCRIPT = """
import atexit, sys, threading, time
from common.cli import exit_process

def late():
    time.sleep(0.3)
    print("thread done", flush=False)

def main():
    atexit.register(lambda: open(sys.argv[1], "w").write("atexit ran"))
    threading.Thread(target=late).start()  # non-daemon: the interpreter would wait for it, and so must we
    print("buffered line", end="")  # no newline: stays in stdout's buffer until the flush
    return {code}

exit_process(main)
"""


@pytest.mark.parametrize(
    "code, status, stderr",
    [("0", 0, ""), ("3", 3, ""), ("None", 0, ""), ("sys.exit(2)", 2, ""), ('sys.exit("bad input")', 1, "bad input")],
)
def test_exit_process_keeps_pythons_exit_steps(code, status, stderr, tmp_path):
    """common.cli.exit_process ends with os._exit, past the interpreter's finalization; the status main()
    gives, its non-daemon threads, atexit handlers and buffered output must survive that, as sys.exit's do."""
    script = EXIT_SCRIPT.format(code=code)  # `return sys.exit(...)` raises before it returns
    marker = tmp_path / "atexit.txt"
    got = subprocess.run(
        [sys.executable, "-c", script, str(marker)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert got.returncode == status, got.stderr
    assert got.stdout == "buffered linethread done\n"
    assert got.stderr.strip() == stderr
    assert marker.read_text() == "atexit ran"
