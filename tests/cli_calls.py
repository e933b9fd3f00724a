"""A command's main(argv) called in the test's own process, as `python -m MODULE ARGV` would run it.

The one line on stderr and the exit status come from common.cli (run_cli, Parser.error) either way, so the
tables of bad inputs check the same line in-process; what an interpreter start adds (torch's import alone is
seconds of CPU per case) is checked once per command by a few real `python -m` runs in the same test modules:
exit status, no traceback, nothing else on stderr.
"""
from __future__ import annotations

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


def call_main(main: Callable, argv: Sequence[str], capsys, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """main(argv) run from `cwd` with stdout and stderr captured, as a CompletedProcess: returncode is what the
    process would exit with (SystemExit's code, or main's return value). The signal handlers a command installs
    are put back, and a call that leaves an embedded Ray running fails the test (bad input must stop before
    any work)."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    ray_before = _ray_running()
    capsys.readouterr()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors and `raise SystemExit(main())`
        code = exc.code
    finally:
        os.chdir(here)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    out, err = capsys.readouterr()
    if isinstance(code, str):  # the interpreter prints a string exit code and exits with status 1
        err, code = err + code + "\n", 1
    if not ray_before and _ray_running():
        import ray
        ray.shutdown()
        pytest.fail(f"{list(argv)} started Ray: bad input must be refused before any work")
    return subprocess.CompletedProcess(list(argv), int(code or 0), out, err)
