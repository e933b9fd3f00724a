"""The run folder: one trainer per --out (a real
second process is refused while the first runs; a SIGKILLed holder blocks nothing), a folder holding a run is
refused without --resume / --overwrite, --overwrite clears only the run's files, --resume still resumes; the
checkpoint writer leaves no temp file on any failure and names the file; a damaged last.pt is one line; a
Ctrl-C at start-up is one line and exit 130, and a Ctrl-C a library swallowed still stops the run; killing
pipelines.run (SIGTERM, SIGKILL) stops its trainer processes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tests.conftest import mount_tmpfs
from tests.test_trainer_data import make_shard_set
from trainer import checkpoint
from trainer.config import config_for
from trainer.config_sections import ConfigError
from trainer.metrics_log import read_metrics
from trainer.train import run

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def sigint_default() -> None:
    """For a child that must see Ctrl-C: a test run started in the background (`cmd &` in a script, as a CI
    runner may) ignores SIGINT, and its children inherit that; the trainer rightly keeps it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    return make_shard_set(tmp_path_factory.mktemp("run-folder-shards"), shard_links=(32, 32, 16), eval_links=24)


def tiny(shards, out, **kw):
    kw = {
        "progress": False,
        "log_every": 1,
        "device": "cpu",
        "eval_splits": ("valid",),
        "threads": 1,
        "epochs": 5,
        **kw,
    }
    return config_for("tiny", str(shards), str(out), data={"num_workers": 0}, **kw)


def trainer_cmd(shards, out, *extra) -> list[str]:
    return [
        sys.executable,
        "-m",
        "trainer",
        "--shards",
        str(shards),
        "--preset",
        "tiny",
        "--out",
        str(out),
        "--device",
        "cpu",
        "--num-workers",
        "0",
        "--no-progress",
        "--threads",
        "1",
        *extra,
    ]


def folder_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file() and p.name != ".lock"}


def wait_for(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# ---------------------------------------------------------------------------- lock: one trainer per folder
def test_second_trainer_is_refused_while_the_first_runs_and_a_killed_one_blocks_nothing(shards, tmp_path):
    out = tmp_path / "run"
    first = subprocess.Popen(
        trainer_cmd(shards, out, "--epochs", "1000"),
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        # the lock file names its holder once held (the trainer imports torch first)
        wait_for(
            lambda: (
                first.poll() is not None
                or (out / ".lock").is_file()
                and (out / ".lock").read_text().strip() == str(first.pid)
            ),
            300,
            "the first trainer's lock",
        )
        assert first.poll() is None, first.stderr.read()[-2000:]
        second = subprocess.run(
            trainer_cmd(shards, out, "--resume"), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300
        )
        lines = second.stderr.strip().splitlines()
        assert second.returncode == 1 and len(lines) == 1 and "Traceback" not in second.stderr, second.stderr
        assert str(out) in lines[0] and f"pid {first.pid}" in lines[0] and "another trainer" in lines[0], lines[0]
        assert first.poll() is None  # the refusal touched nothing of the running one
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    # the kernel dropped the dead holder's flock (its .lock file still names it): a rerun gets the folder
    from trainer import run_folder

    assert (out / ".lock").read_text().strip() == str(first.pid)
    with run_folder.claim(out, overwrite=True):
        assert (out / ".lock").read_text().strip() == str(os.getpid())


def test_the_lock_is_held_for_the_run_and_released_after(shards, tmp_path):
    from trainer import run_folder

    out = tmp_path / "run"
    with run_folder.claim(out):
        with pytest.raises(ConfigError, match=f"another trainer \\(pid {os.getpid()}\\)"):
            with run_folder.claim(out):
                pass
    with run_folder.claim(out):  # released at the end of the block
        pass


# ---------------------------------------------------------------------------- guard: --resume / --overwrite
def test_a_folder_holding_a_run_is_refused_without_resume_or_overwrite(shards, tmp_path):
    out = tmp_path / "run"
    run(tiny(shards, out, max_steps=2))
    before = folder_bytes(out)
    assert {"last.pt", "best.pt", "summary.json", "metrics.jsonl"} <= before.keys()
    with pytest.raises(ConfigError) as err:
        run(tiny(shards, out, max_steps=3, seed=4))
    message = str(err.value)
    assert str(out) in message and "--resume" in message and "--overwrite" in message, message
    assert folder_bytes(out) == before  # nothing replaced, nothing appended

    # the CLI: the same refusal as one line, exit 1
    res = subprocess.run(
        trainer_cmd(shards, out, "--max-steps", "3"), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300
    )
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert lines[0].startswith(f"python -m trainer: error: --out {out} already holds a run"), lines[0]
    assert "--resume" in lines[0] and "--overwrite" in lines[0]
    assert folder_bytes(out) == before


def test_each_run_file_alone_makes_a_folder_hold_a_run(tmp_path):
    from trainer.run_folder import check_contents

    for name in ("last.pt", "best.pt", "summary.json", "metrics.jsonl"):
        out = tmp_path / name.replace(".", "_")
        out.mkdir()
        (out / name).write_text("x")
        with pytest.raises(ConfigError, match="already holds a run"):
            check_contents(out, resume=False, overwrite=False)
    empty_metrics = tmp_path / "interrupted-start"  # a start cut short leaves an empty metrics.jsonl
    empty_metrics.mkdir()
    (empty_metrics / "metrics.jsonl").write_text("")
    (empty_metrics / "config.json").write_text("{}")
    check_contents(empty_metrics, resume=False, overwrite=False)


def test_overwrite_replaces_the_run_and_keeps_other_files(shards, tmp_path):
    out = tmp_path / "run"
    run(tiny(shards, out, max_steps=4, seed=1))
    (out / "notes.txt").write_text("mine")
    (out / ".last.pt.999999.tmp").write_bytes(b"left by a kill mid-write")
    old = read_metrics(out / "metrics.jsonl")
    summary = run(tiny(shards, out, max_steps=2, seed=2, overwrite=True))
    new = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in new if r["event"] == "train"] == [1, 2]  # the new run only, nothing appended
    assert new[0]["time"] > old[-1]["time"]
    assert checkpoint.load(out / "last.pt")["state"]["step"] == 2 == summary["steps"]
    assert json.loads((out / "summary.json").read_text())["config"]["seed"] == 2
    assert (out / "notes.txt").read_text() == "mine"  # only the run's own files are removed
    assert not (out / ".last.pt.999999.tmp").exists()


def test_resume_still_resumes_and_needs_a_last_pt(shards, tmp_path):
    out = tmp_path / "run"
    run(tiny(shards, out, max_steps=2))
    summary = run(tiny(shards, out, max_steps=4, resume=True))
    assert summary["steps"] == 4
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl", "train")] == [1, 2, 3, 4]
    (out / "last.pt").unlink()  # a folder with a run but nothing to continue from
    with pytest.raises(ConfigError, match="no last.pt to continue from.*--overwrite"):
        run(tiny(shards, out, max_steps=5, resume=True))
    with pytest.raises(ConfigError, match="--overwrite: cannot go with --resume"):
        tiny(shards, out, resume=True, overwrite=True)
    run(tiny(shards, tmp_path / "new", max_steps=1, resume=True))  # --resume on a new folder starts fresh


def test_resume_under_another_preset_or_schedule_is_refused_and_keeps_the_run(shards, tmp_path):
    """A finished tiny run resumed with --preset citeseer-small (12 epochs, another lr): refused in one line
    naming what differs, the run's files untouched; never retrained under the other schedule."""
    out = tmp_path / "run"
    run(tiny(shards, out, epochs=1))
    before = folder_bytes(out)
    cmd = [a if a != "tiny" else "citeseer-small" for a in trainer_cmd(shards, out, "--resume")]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.strip().splitlines() if " error: " in line]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"--resume: {out} was trained with preset 'tiny' (asked: 'citeseer-small')" in lines[0], lines[0]
    assert "--overwrite" in lines[0] and "--preset tiny" in lines[0]
    assert folder_bytes(out) == before
    with pytest.raises(ConfigError, match=r"was trained with optim.lr 0.001 \(asked: 0.5\)"):
        run(tiny(shards, out, epochs=1, resume=True, optim={"lr": 0.5}))
    assert run(tiny(shards, out, epochs=1, resume=True))["steps"] == json.loads(before["summary.json"])["steps"]


# ---------------------------------------------------------------------------- checkpoint writes and reads
@pytest.mark.parametrize("failure", ["enospc", "exception", "keyboard-interrupt"])
def test_save_atomic_leaves_no_temp_file_and_names_the_file(tmp_path, monkeypatch, failure):
    target = tmp_path / "last.pt"
    checkpoint.save_atomic({"model": {"w": torch.ones(3)}, "state": {}, "config": {}}, target)
    before = target.read_bytes()
    real_save = torch.save

    def failing_save(obj, f):
        f.write(b"half a checkpoint")  # some bytes reach the temp file first
        if failure == "keyboard-interrupt":
            raise KeyboardInterrupt
        try:
            f.write(b"the rest")
        except OSError:
            pass  # torch's writer drops the OSError (and its errno) ...
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")  # ... for this

    class FullFile:  # a file that fails like a full disk on the second write
        def __init__(self, f):
            self.f, self.n = f, 0

        def write(self, b):
            self.n += 1
            if self.n > 1:
                raise OSError(28, "No space left on device")
            return self.f.write(b)

        def flush(self):
            self.f.flush()

    monkeypatch.setattr(torch, "save", failing_save)
    if failure == "enospc":
        real_writes = checkpoint._Writes
        monkeypatch.setattr(checkpoint, "_Writes", lambda f: real_writes(FullFile(f)))
    expected = {"enospc": OSError, "exception": checkpoint.CheckpointError, "keyboard-interrupt": KeyboardInterrupt}
    with pytest.raises(expected[failure]) as err:
        checkpoint.save_atomic({"model": {}}, target)
    monkeypatch.setattr(torch, "save", real_save)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]  # no .last.pt.<pid>.tmp
    assert target.read_bytes() == before  # the old checkpoint is intact
    if failure != "keyboard-interrupt":
        from common.cli import describe

        line = describe(err.value)
        assert line.startswith(f"{target}: ") and "\n" not in line, line
        if failure == "enospc":
            assert line == f"{target}: no space left on device; free space or write somewhere else"


def test_save_atomic_on_a_really_full_disk(tmp_path):
    disk = tmp_path / "disk"
    if not mount_tmpfs(disk, "64k"):
        pytest.skip("cannot mount a tmpfs here (not root or no mount); the injected ENOSPC case covers the writer")
    try:
        with pytest.raises(OSError) as err:
            checkpoint.save_atomic({"model": {"w": torch.zeros(100_000)}}, disk / "last.pt")
        left = sorted(p.name for p in disk.iterdir())
    finally:
        subprocess.run(["umount", str(disk)], check=False)
    assert err.value.errno == 28 and err.value.filename == str(disk / "last.pt")
    assert left == []


def test_any_garbage_is_a_checkpoint_error(shards, tmp_path):
    # random bytes reach torch's unpickler, which trips on them in many ways (os.urandom once gave an
    # IndexError that escaped as a traceback): every one of 200 seeded garbage files, and a real checkpoint
    # with seeded bytes overwritten, must be the one-line CheckpointError
    out = tmp_path / "run"
    run(tiny(shards, out, max_steps=1))
    good = (out / "last.pt").read_bytes()
    bad = tmp_path / "bad.pt"
    for seed in range(200):
        rng = random.Random(seed)
        if seed % 2:
            data = rng.randbytes(rng.randrange(1, 8192))
        else:
            at = rng.randrange(len(good) - 64)
            data = good[:at] + rng.randbytes(64) + good[at + 64 :]
        bad.write_bytes(data)
        try:
            checkpoint.load(bad, fix="pass --overwrite")
        except checkpoint.CheckpointError as err:
            assert str(bad) in str(err) and "pass --overwrite" in str(err)


@pytest.mark.parametrize("damage", ["truncated", "random-bytes", "empty", "not-a-checkpoint"])
def test_a_damaged_last_pt_is_one_line_naming_the_file_and_the_fix(shards, tmp_path, damage):
    out = tmp_path / "run"
    run(tiny(shards, out, max_steps=1))
    last = out / "last.pt"
    data = last.read_bytes()
    last.write_bytes(
        {
            "truncated": data[: len(data) // 2],
            "random-bytes": random.Random(0).randbytes(4096),
            "empty": b"",
            "not-a-checkpoint": b"",
        }[damage]
    )
    if damage == "not-a-checkpoint":
        torch.save({"weights": torch.ones(2)}, last)
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.load(last, fix="pass --overwrite")
    assert str(last) in str(err.value) and "pass --overwrite" in str(err.value)
    if damage != "random-bytes":
        return
    res = subprocess.run(
        trainer_cmd(shards, out, "--resume", "--max-steps", "2"),
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert lines[0].startswith(f"python -m trainer: error: {last}: not a readable checkpoint"), lines[0]
    assert "--overwrite" in lines[0]


# ---------------------------------------------------------------------------- Ctrl-C at start-up
def test_ctrl_c_while_importing_is_one_line_and_exit_130(shards, tmp_path):
    """-X importtime prints a line per finished import: a line naming torch means the trainer is in the
    middle of its imports (before common.cli.run_cli runs), where a Ctrl-C printed a traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", *trainer_cmd(shards, tmp_path / "run")[1:]],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )
    lines: list[str] = []
    seen = threading.Event()

    def read():
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if "torch" in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert seen.wait(300), "\n".join(lines[-20:])
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(10)
    user = [line for line in lines if not line.startswith("import time:")]
    assert proc.returncode == 130 and user == ["python -m trainer: interrupted"], "\n".join(user[-30:])
    assert not (tmp_path / "run").exists()


def test_a_ctrl_c_lost_in_a_fork_is_latched_and_raised_again():
    """A swallowed Ctrl-C: a SIGINT handled inside an at-fork callback (logging registers one; the
    DataLoader forks its workers) is only printed by CPython as "Exception ignored", and the program goes
    on. Here the SIGINT arrives in the parent's at-fork callback, deterministically; the latch raises it at
    the next check, and the ignored exception is not printed."""
    code = textwrap.dedent("""
        import os, signal, sys
        from common.cli import latch_sigint, raise_if_interrupted, run_cli
        latch_sigint()
        os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), signal.SIGINT))
        def main(argv):
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            print("the fork swallowed it", flush=True)
            raise_if_interrupted()
            print("went on")
        sys.exit(run_cli(main, [], prog="demo"))
    """)
    res = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=sigint_default,
    )
    assert res.stdout == "the fork swallowed it\n", res
    assert res.returncode == 130 and res.stderr == "demo: interrupted\n", res


def test_the_training_loop_stops_on_a_latched_ctrl_c(shards, tmp_path, monkeypatch):
    import common.cli

    monkeypatch.setattr(common.cli, "_sigint_seen", True)
    with pytest.raises(KeyboardInterrupt):
        run(tiny(shards, tmp_path / "run", max_steps=2))
    assert not (tmp_path / "run" / "summary.json").exists()


# ---------------------------------------------------------------------------- pipelines.run and its trainers
def test_pipelines_resume_a_seed_with_a_last_pt_and_clear_one_without(tmp_path):
    from pipelines.core.trainers import TrainerRun

    seed = tmp_path / "seed0"
    seed.mkdir()
    run = TrainerRun(seed, "S", "tiny", 0, "original", "cpu")
    assert "--overwrite" in run.flags() and "--resume" not in run.flags()
    (seed / "last.pt").write_bytes(b"")
    assert "--resume" in run.flags() and "--overwrite" not in run.flags()
    assert "--overwrite" in replace(run, fresh=True).flags()  # a folder the recipe clears


DRIVER = textwrap.dedent("""
    import signal, sys
    from pathlib import Path
    from pipelines.core import children, seeds
    from pipelines.core.config import TrainerOptions
    signal.signal(signal.SIGTERM, children.exit_on_sigterm)  # as run.main installs it
    opts = TrainerOptions("cpu", 1000.0, ("--num-workers", "0", "--threads", "1"), parallel=2)
    out = Path(sys.argv[2])
    runs = {s: seeds.seed_run(opts, "tiny", sys.argv[1], "original", s, out / f"seed{s}") for s in (0, 1)}
    seeds.train_seeds(opts, runs)
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGINT])
def test_killing_pipelines_run_stops_its_trainers(shards, tmp_path, sig):
    psutil = pytest.importorskip("psutil")  # installed with ray; the GPU image may lack it
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(shards), str(tmp_path)],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        parent = psutil.Process(driver.pid)

        # both children forked *and* exec'd into the trainer (between the two, a child still shows the driver's
        # command line; cmdline() of a child that is gone raises, hence the guard)
        def exec_d(kids):
            try:
                return len(kids) == 2 and all("trainer" in " ".join(k.cmdline()) for k in kids)
            except psutil.Error:
                return False

        trainers = wait_for(lambda: kids if exec_d(kids := parent.children()) else None, 120, "two trainers")
        driver.send_signal(sig)
        driver.wait(timeout=120)
        gone, alive = psutil.wait_procs(trainers, timeout=60)
        assert alive == [], [p.pid for p in alive]
    finally:
        for p in psutil.Process(os.getpid()).children(recursive=True):
            p.kill()
    if sig == signal.SIGTERM:  # the handler pipelines.run installs: SystemExit(143) through the finally blocks
        assert driver.returncode == 143, driver.stderr.read()[-2000:]
