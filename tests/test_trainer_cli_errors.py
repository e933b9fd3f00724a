"""`python -m trainer` with bad input: ONE line on stderr naming the flag or file, a non-zero exit, and
nothing started (no run directory written); `--debug` brings the traceback back. The table calls the trainer's
main(argv) in this process (tests/cli_calls.py: the line and the exit status are common.cli's either way);
`test_a_real_process_fails_in_one_line` and the --debug test run `python -m trainer` as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.cli_calls import call_main
from tests.test_trainer_data import make_shard_set

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    return make_shard_set(tmp_path_factory.mktemp("cli-shards"), shard_links=(16, 16, 8), eval_links=12)


def _bad_manifest(tmp: Path, shards: Path, version) -> Path:
    d = tmp / f"v{version}"
    d.mkdir()
    m = json.loads((shards / "manifest.json").read_text())
    m["version"] = version
    (d / "manifest.json").write_text(json.dumps(m))
    return d


def _file(tmp: Path) -> Path:
    f = tmp / "a-file"
    f.write_text("not a folder")
    return f


# (id, argv builder (shards, tmp) -> extra args replacing the defaults, text the line must contain)
CASES = [
    ("no-manifest", lambda s, t: {"--shards": str(t)}, "no manifest"),
    ("version-99", lambda s, t: {"--shards": str(_bad_manifest(t, s, 99))}, "version 99"),
    ("attention-bogus", lambda s, t: {"--attention": "bogus"}, "--attention"),
    ("protocol-missing", lambda s, t: {"--protocol": "ogb"}, "--protocol ogb"),
    ("out-is-a-file", lambda s, t: {"--out": str(_file(t))}, "--out"),
    ("out-under-a-file", lambda s, t: {"--out": str(_file(t) / "run")}, "--out"),
    ("lr-negative", lambda s, t: {"--lr": "-1"}, "--lr"),
    ("attention-dropout-one", lambda s, t: {"--attention-dropout": "1"}, "--attention-dropout"),
    ("preset-unknown", lambda s, t: {"--preset": "nope"}, "--preset"),
    ("epochs-not-a-number", lambda s, t: {"--epochs": "many"}, "--epochs"),
    ("unknown-flag", lambda s, t: {"--bogus-flag": "1"}, "--bogus-flag"),
    ("eval-splits", lambda s, t: {"--eval-splits": "valid,train"}, "--eval-splits"),
    ("threads-negative", lambda s, t: {"--threads": "-1"}, "--threads"),
    ("checkpoint-seconds-negative", lambda s, t: {"--checkpoint-seconds": "-5"}, "--checkpoint-seconds"),
    pytest.param(
        "device-cuda-without-cuda",
        lambda s, t: {"--device": "cuda"},
        "--device",
        marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here"),
    ),
]


def trainer_cli(args: dict, *extra) -> subprocess.CompletedProcess:
    argv = [a for kv in args.items() for a in kv]
    return subprocess.run(
        [sys.executable, "-m", "trainer", *argv, "--no-progress", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def trainer_call(capsys, args: dict, *extra) -> subprocess.CompletedProcess:
    """trainer_cli's command, run by the trainer's main(argv) in this process."""
    from trainer.train import main

    return call_main(main, [*(a for kv in args.items() for a in kv), "--no-progress", *extra], capsys)


def check_refused(res: subprocess.CompletedProcess, needle: str, out: Path) -> None:
    lines = res.stderr.strip().splitlines()
    assert res.returncode != 0 and res.stdout == ""
    assert len(lines) == 1, res.stderr
    assert needle in lines[0] and "Traceback" not in res.stderr, lines[0]
    assert not (out / "last.pt").exists() and not (out / "metrics.jsonl").exists()  # failed before any work


def case_args(shards: Path, tmp_path: Path, override) -> dict:
    return {
        "--shards": str(shards),
        "--preset": "tiny",
        "--out": str(tmp_path / "run"),
        "--device": "cpu",
        **override(shards, tmp_path),
    }


@pytest.mark.parametrize("name,override,needle", CASES)
def test_bad_input_gives_one_line_and_a_nonzero_exit(shards, tmp_path, name, override, needle, capsys):
    check_refused(trainer_call(capsys, case_args(shards, tmp_path, override)), needle, tmp_path / "run")


# Two cases as real processes: a flag refused by the parser (exit 2) and a shard set refused once the trainer
# reads it (exit 1), with the imports' warnings and log lines, and the status the shell sees.
@pytest.mark.parametrize("name,override,needle,status", [(*CASES[0], 1), (*CASES[2], 2)])
def test_a_real_process_fails_in_one_line(shards, tmp_path, name, override, needle, status):
    res = trainer_cli(case_args(shards, tmp_path, override))
    check_refused(res, needle, tmp_path / "run")
    assert res.returncode == status


def test_debug_shows_the_traceback(shards, tmp_path):
    res = trainer_cli({"--shards": str(tmp_path), "--preset": "tiny", "--out": str(tmp_path / "run")}, "--debug")
    assert res.returncode != 0 and "Traceback (most recent call last)" in res.stderr and "no manifest" in res.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_more_nccl_ranks_than_gpus_is_refused_in_one_line(shards, tmp_path):
    """The policy for two ranks on a one-GPU machine: refused up front (each rank prints the same line);
    gloo ranks (--device cpu) are the way to run them, as tests/test_trainer_ddp.py does."""
    n = torch.cuda.device_count() + 1
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={n}",
            "-m",
            "trainer",
            "--shards",
            str(shards),
            "--preset",
            "tiny",
            "--out",
            str(tmp_path / "r"),
            "--device",
            "cuda",
            "--no-progress",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode != 0
    refusals = [line for line in res.stderr.splitlines() if "--nproc-per-node" in line and "GPU" in line]
    # (torchrun's own launcher prints a ChildFailedError traceback after; the ranks print one line each)
    assert refusals and len(set(refusals)) == 1, res.stderr[-3000:]
    assert all(line.startswith("python -m trainer: error: --nproc-per-node") for line in refusals)


def test_verify_checks_the_whole_set_up_front(shards, tmp_path, capsys):
    import shutil

    bad = tmp_path / "set"
    shutil.copytree(shards, bad)
    victim = sorted(bad.glob("train-*.tar"))[-1]  # a later shard: without --verify it is read only later
    data = bytearray(victim.read_bytes())
    data[700:708] = b"\x00" * 8  # same size, other bytes: only the checksum can tell
    victim.write_bytes(bytes(data))
    args = {
        "--shards": str(bad),
        "--preset": "tiny",
        "--out": str(tmp_path / "run"),
        "--device": "cpu",
        "--max-steps": "1",
    }
    res = trainer_call(capsys, args, "--verify")
    lines = res.stderr.strip().splitlines()
    assert res.returncode != 0 and len(lines) == 1, res.stderr
    assert "--verify" in lines[0] and victim.name in lines[0] and "checksum mismatch" in lines[0], lines[0]
    assert not (tmp_path / "run" / "last.pt").exists()
    good = trainer_call(capsys, {**args, "--shards": str(shards), "--out": str(tmp_path / "ok")}, "--verify")
    assert good.returncode == 0, good.stderr[-2000:]
