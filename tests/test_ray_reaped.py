"""An embedded Ray goes with its driver: after a SIGKILL of the driver (as during preprocessing, which starts
it through preprocess.cluster.init_ray), no process of its session is left (its raylet's agents used to linger
60 to 110 s). The driver is a real one, SIGKILLed once its Ray ran a task; the test waits for the session's
processes to go, and fails when they are still there at the end of its wait (longer than reaping takes, far
shorter than their linger)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.parent_death import naming
from tests.conftest import needs_ray

ROOT = Path(__file__).resolve().parents[1]
DRIVER = """
import time, ray
from preprocess.cluster import init_ray
init_ray(1)
ray.get(ray.remote(lambda: 1).remote())
print(ray._private.worker._global_node.get_session_dir_path(), flush=True)
time.sleep(600)
"""
WAIT_S = 30


@pytest.mark.slow
@needs_ray
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reaping reads /proc (Linux)")
def test_a_sigkilled_drivers_embedded_ray_goes_with_it():
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(ROOT)
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        session = driver.stdout.readline().strip()
        assert session.startswith("/") and naming(session), session  # its Ray runs
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    mine = lambda: [pid for pid in naming(session) if pid != os.getpid()]
    end = time.monotonic() + WAIT_S
    while mine() and time.monotonic() < end:
        time.sleep(0.5)
    left = mine()
    for pid in left:  # the test's own mess, by pid
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{len(left)} process(es) of {session} outlived the driver"
