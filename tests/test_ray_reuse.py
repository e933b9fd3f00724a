"""Several shard sets in one recipe share one embedded Ray (build_shard_set(keep_ray=True)); a failed job still
shuts down the Ray it started. Real embedded Ray, real citeseer shard sets."""

from __future__ import annotations

import os

import pytest

from common.datasets.spec import DatasetSpec
from pipelines.core.shard_sets import build_shard_set, shutdown_embedded_ray
from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig
from preprocess.job import run_job
from tests.conftest import HAS_RAY, kill_driver_after

pytestmark = [
    pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (CI installs it; the GPU image lacks it)"),
    pytest.mark.skipif(bool(os.environ.get("RAY_ADDRESS")), reason="these tests start their own embedded Ray"),
]


@pytest.fixture
def ray_starts(monkeypatch):
    """No Ray up at the start (another module's may still be), and a count of every ray.init after it."""
    import ray

    shutdown_embedded_ray()
    calls, real_init = [], ray.init

    def counting_init(*args, **kwargs):
        calls.append(1)
        return real_init(*args, **kwargs)

    monkeypatch.setattr(ray, "init", counting_init)
    yield calls
    shutdown_embedded_ray()


def config(out, n: int) -> PreprocessConfig:
    return PreprocessConfig(
        data=DatasetSpec("citeseer"),
        sampling=SamplingConfig(1, n),
        out=str(out),
        candidates=CandidateConfig(views=1, percent=20.0, protocols=("original",)),
        num_cpus=1,
    )


def test_sets_built_to_keep_ray_start_it_once(ray_starts, tmp_path):
    import ray

    first = build_shard_set(config(tmp_path, 3), keep_ray=True)
    assert ray.is_initialized()  # kept for the next set
    second = build_shard_set(config(tmp_path, 4), keep_ray=True)
    assert first != second and len(ray_starts) == 1
    shutdown_embedded_ray()
    assert not ray.is_initialized()
    build_shard_set(config(tmp_path, 5))  # the plain call shuts down what it started
    assert len(ray_starts) == 2 and not ray.is_initialized()


def test_a_failed_job_shuts_down_the_ray_it_started_even_when_asked_to_keep_it(ray_starts, tmp_path, monkeypatch):
    import ray

    kill_driver_after(monkeypatch, 0)
    with pytest.raises(RuntimeError, match="simulated kill"):
        run_job(config(tmp_path, 3), keep_ray=True)
    assert len(ray_starts) == 1 and not ray.is_initialized()
