"""Fault hooks for the kill tests, loaded by Python at start-up when this folder is on PYTHONPATH; the embedded
Ray hands the driver's PYTHONPATH to its workers (preprocess.job.init_ray).

With PENCIL_TEST_RECOMMEND_FAIL_AFTER=N, a `pipelines.recommend` process dies (an error, as a killed job would
stop) once it has written N part files (tests/test_recommend.py).

With PENCIL_TEST_TRAINER_DIE=TEXT, a `python -m trainer` whose --out contains TEXT exits (status 3) right after
its first evaluation: its metrics, best.pt and saved scores exist, its summary.json never does
(tests/test_auto_e2e.py, tests/test_seed_failures.py); with PENCIL_TEST_TRAINER_DIE_AT=start as well, it exits
at start-up, before any evaluation.

Preprocess (tests/test_faults.py):
In a Ray worker, and only when PENCIL_TEST_FAULT_DIR is set, it wraps preprocess.job._sample_into (build_shard
looks it up at call time) so that every attempt at a shard leaves a marker, FAULT_DIR/<shard>.attempt<k> holding
the worker's pid: a retry is then seen, not assumed. The first attempt at the shard PENCIL_TEST_FAULT_HOLD
writes part of the shard, flushes it to its temporary file, marks FAULT_DIR/<shard>.held and then waits for
the test to kill it (the worker or the driver) with SIGKILL: the kill lands mid-write, every time.
Without the variables, or outside a Ray worker, it does nothing."""

import os
import sys

FAULT_DIR = os.environ.get("PENCIL_TEST_FAULT_DIR")


def _mark(path: str, text: str) -> bool:
    """Create `path` holding `text`, whole (a hard link of a finished file); False if it exists already."""
    tmp = f"{path}.{os.getpid()}.part"
    with open(tmp, "w") as f:
        f.write(text)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


class _HoldingFile:
    """A shard file that takes its first write, flushes it to disk and then never returns."""

    def __init__(self, f, held: str):
        self._f, self._held = f, held

    def write(self, data):
        self._f.write(data)
        self._f.flush()
        os.fsync(self._f.fileno())
        _mark(self._held, str(os.getpid()))
        import time

        while True:  # until the test's SIGKILL
            time.sleep(60)

    def __getattr__(self, name):
        return getattr(self._f, name)


class _HoldingStorage:
    def __init__(self, storage, held: str):
        self._storage, self._held = storage, held

    def writer(self, name):
        import contextlib

        @contextlib.contextmanager
        def hold():
            with self._storage.writer(name) as f:
                yield _HoldingFile(f, self._held)

        return hold()

    def __getattr__(self, name):
        return getattr(self._storage, name)


def _install() -> None:
    import preprocess.job as job

    original = job._sample_into
    hold = os.environ.get("PENCIL_TEST_FAULT_HOLD", "")

    def _sample_into(storage, name, *args):
        attempt = 1
        while not _mark(os.path.join(FAULT_DIR, f"{name}.attempt{attempt}"), str(os.getpid())):
            attempt += 1
        if name == hold and attempt == 1:
            storage = _HoldingStorage(storage, os.path.join(FAULT_DIR, f"{name}.held"))
        return original(storage, name, *args)

    job._sample_into = _sample_into


def _install_recommend_kill(after: int) -> None:
    import pipelines.recommend.parts as parts

    original, written = parts.write_part, []

    def write_part(table, path):
        original(table, path)
        written.append(path)
        if len(written) >= after:
            raise RuntimeError(f"PENCIL_TEST_RECOMMEND_FAIL_AFTER={after}: stopping after {len(written)} part file(s)")

    parts.write_part = write_part


def _install_trainer_death() -> None:
    import trainer.train as train

    original = train.Trainer.run_eval

    def run_eval(self, final=False):
        original(self, final)
        sys.stdout.flush()
        os._exit(3)

    train.Trainer.run_eval = run_eval


def _trainer_out() -> str:
    argv = sys.argv
    return argv[argv.index("--out") + 1] if "--out" in argv[:-1] else ""


if FAULT_DIR and sys.argv and sys.argv[0].endswith("default_worker.py"):
    _install()
if os.environ.get("PENCIL_TEST_RECOMMEND_FAIL_AFTER"):
    _install_recommend_kill(int(os.environ["PENCIL_TEST_RECOMMEND_FAIL_AFTER"]))
if os.environ.get("PENCIL_TEST_TRAINER_DIE") and os.environ["PENCIL_TEST_TRAINER_DIE"] in _trainer_out():
    if os.environ.get("PENCIL_TEST_TRAINER_DIE_AT") == "start":
        os._exit(3)
    _install_trainer_death()
