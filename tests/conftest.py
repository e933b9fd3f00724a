"""What many test modules share: the Ray marker, the shard-set cache and a local Ray head (`ray_head`).

The GPU machines' image has no Ray, and its wheel is larger than what can be carried there, so the suite
separates the tests *of* the Ray job from the tests that only *read* shard sets:

- `needs_ray` skips the former where Ray is not installed (CI always installs it);
- the latter build their sets under the `shard_cache` folder. By default it is a fresh temporary folder
  (the Ray job runs). With PENCIL_TEST_SHARD_CACHE=<dir> it is that folder: the first run fills it, and a
  rerun finds every set there, a cache hit that never imports Ray. `bench/gpu_bundle.sh` fills one to carry.

Real data (Planetoid raw files, HeaRT folders) comes from `../shared/data`, beside the clone, and from nowhere
else (`shared_data`): absent, its tests skip on a laptop but FAIL under CI (CI=true), so a CI machine without
it cannot go green by skipping. PENCIL_SHARED=<dir> names another shared folder (a git worktree's ../ is not
the clone's).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from common.datasets.spec import DatasetSpec

try:
    import ray  # noqa: F401

    HAS_RAY = True
except ImportError:
    HAS_RAY = False

needs_ray = pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (CI installs it; the GPU image lacks it)")

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    """`gpu` tests run by default wherever CUDA exists; without it each one is skipped, with the reason.
    (torch is imported only when a gpu test was collected.)"""
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu:
        return
    import torch

    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="gpu test: needs CUDA (no CUDA device visible)")
        for item in gpu:
            item.add_marker(skip)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def shared_root() -> Path:
    """The shared folder: PENCIL_SHARED if set, else ../shared relative to the repository (never absolute)."""
    env = os.environ.get("PENCIL_SHARED")
    return Path(env).resolve() if env else REPO.parent / "shared"


def require_shared(*parts: str) -> Path:
    """shared_root()/data/<parts>, which must exist: missing, the test skips, or fails under CI (CI=true), with
    the path it looked at and how to provide it."""
    path = shared_root().joinpath("data", *parts)
    if path.exists():
        return path
    msg = (
        f"{path}: shared test data not found; put the shared folder beside the clone (../shared) "
        "or set PENCIL_SHARED=<dir>"
    )
    if in_ci():
        pytest.fail(f"{msg} (CI=true: missing data fails instead of skipping)", pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data with its Planetoid raw files (see require_shared)."""
    return require_shared("planetoid").parent


@pytest.fixture(scope="session")
def shard_cache(tmp_path_factory) -> Path:
    """Root of the shard sets that tests read, one subfolder per kind of set: consumers that need the same set
    (the pipelines and ablations recipes both read citeseer (1, 5), 1 view) share its folder, so it is built once."""
    env = os.environ.get("PENCIL_TEST_SHARD_CACHE")
    if env:
        path = Path(env).resolve()
        path.mkdir(parents=True, exist_ok=True)
        return path
    if not HAS_RAY:
        pytest.skip("building shard sets needs ray; set PENCIL_TEST_SHARD_CACHE to a prebuilt cache")
    return tmp_path_factory.mktemp("shard-cache")


def cached_set(shard_cache: Path, name: str) -> Path:
    """shard_cache / name: the folder a test builds its set in, or finds it in. Without Ray the set must be there
    already: a folder holding no finished set (manifest.json) skips the test rather than failing on the import
    of Ray (a cache filled by an older bench/gpu_bundle.sh lacks the sets of newer tests)."""
    folder = shard_cache / name
    if not HAS_RAY and not any(folder.rglob("manifest.json")):
        pytest.skip(
            f"shard set '{name}' is not in the test shard cache ({shard_cache}) and building it needs ray; "
            "refill the cache with bench/gpu_bundle.sh"
        )
    return folder


def run_config(*argv):
    """pencil run's configuration from its flags, as its command line builds it."""
    from pipelines.core.run_config import RunConfig, build_parser

    return RunConfig.from_args(build_parser().parse_args(list(map(str, argv))))


def cpu_trainer_options(root: Path, *argv):
    """The trainer options of `pencil run` on CPU with results and shards under `root`, no loader workers, and
    more flags (`--train-arg=--max-steps=2`, ...): what a recipe's seeds train with."""
    flags = ["--dataset", "citeseer", "--out", root / "results", "--shards", root / "shards", "--device", "cpu"]
    return run_config(*flags, "--train-arg=--num-workers=0", *argv).trainer


def train_tiny_on_cpu(shards, out, max_steps: int) -> None:
    """Train the tiny preset in this process on one CPU thread, the shard job's embedded Ray shut down first
    (its workers would take the cores)."""
    import torch

    from pipelines.core.shard_sets import shutdown_embedded_ray
    from trainer.config import config_for
    from trainer.train import run

    shutdown_embedded_ray()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run(
            config_for(
                "tiny",
                str(shards),
                str(out),
                max_steps=max_steps,
                device="cpu",
                progress=False,
                data={"num_workers": 0},
            )
        )
    finally:
        torch.set_num_threads(threads)


def tiny_citeseer_run(shard_cache: Path, out: Path) -> Path:
    """A tiny-preset run on citeseer (1, 5), trained 20 steps into `out` (~2 min on 2 shared cores); its shard
    set is the one test_pipelines reads."""
    from common.presets import get_preset
    from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig
    from preprocess.job import run_job

    preset = get_preset("tiny")
    cfg = PreprocessConfig(
        data=DatasetSpec("citeseer"),
        sampling=SamplingConfig(*preset.sampling),
        num_cpus=2,
        candidates=CandidateConfig(views=1, percent=preset.train_percent, protocols=("original",)),
        out=str(cached_set(shard_cache, "citeseer-tiny")),
    )
    shards = run_job(cfg).path
    train_tiny_on_cpu(shards, out, max_steps=20)
    return out


def bipartite_rows(users: int = 90, items: int = 50, per_user: int = 4, seed: int = 0) -> list[tuple[str, str]]:
    """A shop's purchases: users u000.., items i000.., each user with per_user items."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = {(f"u{u:03d}", f"i{(u + k * 7) % items:03d}") for u in range(users) for k in range(2)}
    while len(rows) < users * per_user:
        rows.add((f"u{int(rng.integers(users)):03d}", f"i{int(rng.integers(items)):03d}"))
    return sorted(rows)


def write_edges(path: Path, rows) -> Path:
    path.write_text("src,dst\n" + "".join(f"{a},{b}\n" for a, b in rows))
    return path


def tiny_edge_list_run(
    root: Path, rows, node_features: Path | None = None, name: str = "shop.csv", directed: bool = False
) -> dict:
    """A run of the tiny preset, 2 steps on CPU, on the edge list `rows` (root/<name>), with the feature table
    `node_features` when given, read as directed edges with `directed`: its folder, edge list and shard set."""
    from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig
    from preprocess.job import run_job

    edges = write_edges(root / name, rows)
    features = None if node_features is None else str(node_features)
    shards = run_job(
        PreprocessConfig(
            data=DatasetSpec(str(edges), node_features=features, directed=directed),
            sampling=SamplingConfig(1, 3),
            out=str(root / "shards"),
            candidates=CandidateConfig(views=1),
            num_cpus=1,
        )
    ).path
    train_tiny_on_cpu(shards, root / "run", max_steps=2)
    return {"root": root, "run": root / "run", "edges": edges, "shards": Path(shards)}


@pytest.fixture(scope="session")
def shop_run(tmp_path_factory):
    """A tiny run on a bipartite edge list of string ids (users u*, items i*), shared by the modules that
    check the commands on a run (test_run_inputs, test_run_commands)."""
    if not HAS_RAY:
        pytest.skip("ray is not installed (CI installs it; the GPU image lacks it)")
    return tiny_edge_list_run(tmp_path_factory.mktemp("shop"), bipartite_rows())


def write_features(path: Path, nodes, width: int = 4, seed: int = 0) -> Path:
    """A feature table node,f0..f{width-1} of seeded values, one row per node."""
    import numpy as np

    values = np.random.default_rng(seed).random((len(nodes), width)).round(4)
    path.write_text(
        "node,"
        + ",".join(f"f{j}" for j in range(width))
        + "\n"
        + "".join(f"{n}," + ",".join(map(str, row)) + "\n" for n, row in zip(nodes, values.tolist(), strict=True))
    )
    return path


@pytest.fixture(scope="session")
def featured_shop_run(tmp_path_factory):
    """The shop's tiny run (shop_run's graph) with a feature table of 4 columns: the model reads node features."""
    if not HAS_RAY:
        pytest.skip("ray is not installed (CI installs it; the GPU image lacks it)")
    root, rows = tmp_path_factory.mktemp("featured-shop"), bipartite_rows()
    features = write_features(root / "features.csv", sorted({n for row in rows for n in row}))
    return {**tiny_edge_list_run(root, rows, node_features=features), "features": features}


@pytest.fixture(scope="session")
def int_run(tmp_path_factory):
    """A tiny run on an edge list of integer ids 1000..1299 (mapped, not 0..N-1)."""
    if not HAS_RAY:
        pytest.skip("ray is not installed (CI installs it; the GPU image lacks it)")
    import numpy as np

    rng = np.random.default_rng(1)
    rows = sorted({(1000 + int(a), 1000 + int(b)) for a, b in rng.integers(0, 300, (900, 2)) if a != b})
    return tiny_edge_list_run(tmp_path_factory.mktemp("ints"), rows)


@pytest.fixture
def ray_head(tmp_path):
    """A local `ray start --head` cluster of 2 CPUs for one test's `ray job submit` (bench/local_ray.py),
    stopped after it; its log is tmp_path/head.log."""
    if not HAS_RAY:
        pytest.skip("ray is not installed (CI installs it; the GPU image lacks it)")
    from bench.local_ray import local_head

    with local_head(tmp_path / "head.log") as head:
        yield head


@pytest.fixture(scope="session", autouse=True)
def no_embedded_ray_at_exit():
    """Shut down an embedded Ray that an in-process test left running, before the interpreter exits:
    Ray's threads torn down by interpreter exit instead can crash the process after the test summary."""
    yield
    if HAS_RAY:
        import ray

        if ray.is_initialized():
            ray.shutdown()


@pytest.fixture(scope="module")
def ray_session():
    """One embedded 2-CPU Ray for a whole test module (starting Ray costs seconds)."""
    if not HAS_RAY:
        pytest.skip("ray is not installed (CI installs it; the GPU image lacks it)")
    if os.environ.get("RAY_ADDRESS"):
        pytest.skip("RAY_ADDRESS is set; these tests start their own embedded Ray")
    import ray

    from preprocess.job import init_ray

    started = init_ray(num_cpus=2)
    yield
    if started:
        ray.shutdown()


def mount_tmpfs(path: Path, size: str) -> bool:
    """A real small disk at `path` (a tmpfs of `size`) for the full-disk tests; False where it cannot be
    mounted (not root, no mount), and those tests skip."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    path.mkdir(parents=True, exist_ok=True)
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )


def kill_driver_after(monkeypatch, shards: int) -> None:
    """Make an in-process `run_job` die as a killed driver would once `shards` shards have finished: the next
    result it collects (ray.get) raises. The shards already written stay, as after a real kill."""
    import ray

    real_get, seen = ray.get, []

    def get(*args, **kwargs):
        if len(seen) >= shards:
            raise RuntimeError(f"simulated kill after {len(seen)} shards")
        seen.append(1)
        return real_get(*args, **kwargs)

    monkeypatch.setattr(ray, "get", get)


@pytest.fixture(scope="session")
def cora_pair(tmp_path_factory):
    """(the paper path's cora with features, the folder of cora written as an edge list with the paper path's split
    column, cora-edges.csv, and its feature table, cora-features.csv: bench.own_graph_suite.write_cora_edge_list)."""
    from bench.own_graph_suite import write_cora_edge_list
    from common.datasets import DatasetSpec, load_dataset

    planetoid = require_shared("planetoid", "ind.cora.x").parent
    folder = tmp_path_factory.mktemp("cora-edges")
    write_cora_edge_list(planetoid, folder)
    return load_dataset(DatasetSpec("cora", planetoid_dir=str(planetoid), features=True)), folder
