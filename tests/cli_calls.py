"""A command's main(argv) called in the test's own process, as `python -m MODULE ARGV` would run it.

The one line on stderr and the exit status come from common.cli (run_cli, Parser.error) either way, so the
tables of bad inputs check the same line in-process; what an interpreter start adds (torch's import alone is
seconds of CPU per case) is checked once per command by a few real `python -m` runs in the same test modules:
exit status, no traceback, nothing else on stderr.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ray_running() -> bool:
    ray = sys.modules.get("ray")  # never import Ray here: a test without it must not pay for it
    return ray is not None and ray.is_initialized()


@contextlib.contextmanager
def _log_lines(into: io.StringIO):
    """INFO and above, formatted as the commands' logging.basicConfig formats them (under pytest the root logger
    already has handlers, so a command's own basicConfig adds none)."""
    from common.cli import LOG_FORMAT

    root = logging.getLogger()
    handler = logging.StreamHandler(into)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def call_main(
    main: Callable, argv: Sequence[str], capture, cwd: Path = ROOT, logs: bool = False
) -> subprocess.CompletedProcess:
    """main(argv) run from `cwd` with stdout and stderr captured (`capture`: pytest's capsys, or capfd where forked
    workers write too), as a CompletedProcess: returncode is what the process would exit with (SystemExit's
    code, or main's return value). `logs`: stderr also holds the log lines at INFO and above, after what was
    printed. The signal handlers a command installs are put back, and a call that leaves an embedded Ray running
    fails the test (bad input must stop before any work)."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    ray_before = _ray_running()
    capture.readouterr()
    here, logged = os.getcwd(), io.StringIO()
    os.chdir(cwd)
    try:
        with _log_lines(logged) if logs else contextlib.nullcontext():
            code = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors and `raise SystemExit(main())`
        code = exc.code
    finally:
        os.chdir(here)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    out, err = capture.readouterr()
    err += logged.getvalue()
    if isinstance(code, str):  # the interpreter prints a string exit code and exits with status 1
        err, code = err + code + "\n", 1
    if not ray_before and _ray_running():
        import ray

        ray.shutdown()
        pytest.fail(f"{list(argv)} started Ray: bad input must be refused before any work")
    return subprocess.CompletedProcess(list(argv), int(code or 0), out, err)
