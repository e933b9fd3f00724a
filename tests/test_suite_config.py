"""The suite's own configuration: CUDA tests are part of the default run where CUDA exists, and skip
cleanly (reported, not deselected) where it does not."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_default_markers_do_not_deselect_gpu_tests():
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "-m 'not slow'" in addopts and "gpu" not in addopts


def test_a_gpu_test_is_collected_and_skipped_without_cuda():
    """CUDA hidden: the default run collects the gpu test and reports it skipped with its reason."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "tests/test_model.py::test_sparse_and_dense_forms_agree_on_cuda",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "2 skipped" in proc.stdout and "deselected" not in proc.stdout, proc.stdout[-2000:]
