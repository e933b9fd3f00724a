"""Fault injection as an outside tester would do it: kill -9 of the preprocess driver and of a Ray worker,
corrupt and truncated shards (on a cache hit, on resume, and under the trainer), a full disk. Every test
asserts on bytes (the repaired set equals an uninterrupted one, nothing temporary is left) and on what
the user sees (one line, exit status). The kills and the full disk run `python -m preprocess` as a process;
the repairs and the trainer's refusals call the command's main(argv) in this process (tests/cli_calls.py), the
repairs on one embedded Ray for the module, so each is a job and not a Ray start."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.cli_calls import call_main
from tests.conftest import mount_tmpfs, needs_ray

pytestmark = needs_ray  # every test here runs the Ray job (the trainer's one reads a set it wrote)

ROOT = Path(__file__).resolve().parents[1]
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")


# ---------------------------------------------------------------------------- helpers
def write_small_graph_csv(folder: Path) -> Path:
    """A 300-node random graph as an edge list (folder/small.csv): a few thousand links, seconds to sample."""
    rng = np.random.default_rng(0)
    edges = set()
    while len(edges) < 1500:
        a, b = (int(x) for x in rng.integers(0, 300, 2))
        if a != b:
            edges.add((min(a, b), max(a, b)))
    path = folder / "small.csv"
    path.write_text("src,dst\n" + "\n".join(f"{a},{b}" for a, b in sorted(edges)) + "\n")
    return path


@pytest.fixture(scope="module")
def graph_csv(tmp_path_factory) -> Path:
    return write_small_graph_csv(tmp_path_factory.mktemp("graph"))


def preprocess_cmd(dataset: str | Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "preprocess",
        "--dataset",
        str(dataset),
        "--sampling",
        "1,3",
        "--views",
        "2",
        "--out",
        str(out),
        "--num-cpus",
        "2",
        "--links-per-shard",
        "256",
        "--block-size",
        "64",
        *extra,
    ]


def preprocess(dataset, out: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        preprocess_cmd(dataset, out, *extra),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def preprocess_here(dataset, out: Path, *extra: str, capture) -> subprocess.CompletedProcess:
    """preprocess(...) by the command's main(argv) in this process, on the module's embedded Ray (ray_session),
    its log lines in stderr as the command prints them."""
    from preprocess.__main__ import main

    return call_main(main, preprocess_cmd(dataset, out, *extra)[3:], capture, logs=True)


def trainer_here(argv: list[str], capture) -> subprocess.CompletedProcess:
    """`python -m trainer ARGV` by the trainer's main(argv) in this process."""
    from trainer.train import main

    return call_main(main, argv, capture)


def user_lines(stderr: str) -> list[str]:
    """What the user reads besides log lines and the progress bar."""
    out = []
    for line in stderr.replace("\r", "\n").splitlines():
        if line.strip() and not LOG_LINE.match(line) and not line.startswith("sampling:"):
            out.append(line)
    return out


def set_dir(out: Path) -> Path:
    (found,) = [p for p in out.glob("*/*") if p.is_dir()]
    return found


def files(path: Path, finished_only: bool = False) -> dict[str, bytes]:
    """Every file of a shard set except the manifest (its config records where the set lives). finished_only: also
    without a killed writer's temporary (`.NAME.tmp`), which a dying worker may unlink while we list."""
    names = [p for p in sorted(path.iterdir()) if p.name != "manifest.json"]
    return {p.name: p.read_bytes() for p in names if not (finished_only and is_temporary(p.name))}


def is_temporary(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")


def manifest_shards(path: Path) -> list[dict]:
    return json.loads((path / "manifest.json").read_text())["shards"]


def flip(path: Path, at: float) -> None:
    data = bytearray(path.read_bytes())
    i = int(len(data) * at)
    data[i : i + 64] = bytes(b ^ 0xFF for b in data[i : i + 64])
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def reference(graph_csv, tmp_path_factory) -> Path:
    """An uninterrupted run: what every repaired or resumed set must equal byte for byte (a real process, so the
    sets repaired in this one are compared with one that was not)."""
    out = tmp_path_factory.mktemp("reference")
    proc = preprocess(graph_csv, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return set_dir(out)


def copy_set(reference: Path, out: Path) -> Path:
    dst = out / reference.parent.name / reference.name
    shutil.copytree(reference, dst)
    return dst


# ---------------------------------------------------------------------------- corrupt and truncated shards
def test_cache_hit_catches_corrupt_and_truncated_shards_and_repairs_them(
    reference, graph_csv, tmp_path, ray_session, capfd
):
    shards = copy_set(reference, tmp_path)
    flip(shards / "train-v000-00002.tar", 0.5)
    data = (shards / "train-v001-00004.tar").read_bytes()
    (shards / "train-v001-00004.tar").write_bytes(data[: len(data) // 2])
    flip(shards / "graph-train-indices.npy", 0.6)  # same shape, other content: only the fingerprint sees it
    (shards / "valid-original-queries.npz").write_bytes(b"garbage")
    proc = preprocess_here(graph_csv, tmp_path, capture=capfd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = [line for line in proc.stderr.splitlines() if "WARNING preprocess.job" in line]
    assert len(notes) == 4, proc.stderr[-3000:]
    assert any(re.search(r"graph-train-indices\.npy: checksum mismatch .*; writing it again$", n) for n in notes)
    assert any(
        re.search(r"valid-original-queries\.npz: size 7 bytes, the manifest says \d+ .*; writing it again$", n)
        for n in notes
    )
    assert any(
        re.search(
            r"train-v000-00002\.tar: checksum mismatch \(manifest [0-9a-f]{12}…, file [0-9a-f]{12}…\); "
            r"sampling it again$",
            n,
        )
        for n in notes
    ), notes
    assert any(re.search(r"train-v001-00004\.tar: size \d+ bytes, the manifest says \d+", n) for n in notes)
    assert files(shards) == files(reference) and manifest_shards(shards) == manifest_shards(reference)
    assert not list(shards.glob(".*.tmp"))


@pytest.mark.slow
def test_cache_hit_with_no_verify_checks_sizes_only(reference, graph_csv, tmp_path):
    shards = copy_set(reference, tmp_path)
    flip(shards / "train-v000-00002.tar", 0.5)  # same size: only the checksum pass sees it
    proc = preprocess(graph_csv, tmp_path, "--no-verify")
    assert proc.returncode == 0 and "cached (nothing sampled)" in proc.stdout
    proc = preprocess(graph_csv, tmp_path)
    assert proc.returncode == 0 and "train-v000-00002.tar: checksum mismatch" in proc.stderr
    assert files(shards) == files(reference)


def test_resume_catches_a_corrupt_shard_without_a_manifest(reference, graph_csv, tmp_path, ray_session, capfd):
    # The resume path: no manifest (a killed run), so there is no recorded checksum to compare with.
    shards = copy_set(reference, tmp_path)
    (shards / "manifest.json").unlink()
    flip(shards / "train-v000-00001.tar", 0.3)  # inside a block: decodes to out-of-range ids or fails zstd
    flip(shards / "valid-original-00000.tar", 0.97)  # in the tar's end padding: only re-encoding notices
    proc = preprocess_here(graph_csv, tmp_path, capture=capfd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = [line for line in proc.stderr.replace("\r", "\n").splitlines() if "WARNING preprocess.job" in line]
    assert sorted(re.search(r"/([a-z0-9-]+\.tar)", n).group(1) for n in notes) == [
        "train-v000-00001.tar",
        "valid-original-00000.tar",
    ], proc.stderr[-3000:]
    assert all(n.endswith("; sampled it again") for n in notes)
    assert files(shards) == files(reference) and manifest_shards(shards) == manifest_shards(reference)


def test_trainer_fails_on_the_first_bad_block_in_one_line(reference, tmp_path, capfd):
    shards = copy_set(reference, tmp_path)
    for tar in shards.glob("train-*.tar"):
        flip(tar, 0.03)  # inside the first block of every training shard
    argv = [
        "--shards",
        str(shards),
        "--preset",
        "tiny",
        "--out",
        str(tmp_path / "run"),
        "--max-steps",
        "5",
        "--num-workers",
        "1",
        "--no-progress",
        "--device",
        "cpu",
    ]
    proc = trainer_here(argv, capfd)  # capfd: what the DataLoader worker (a forked process) writes counts too
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = [x for x in user_lines(proc.stderr)]
    assert re.match(
        rf"python -m trainer: error: {re.escape(str(shards))}/train-v00\d-\d{{5}}\.tar:\d{{6}}(\.arrow)?: "
        "corrupt",
        line,
    ), line


# ---------------------------------------------------------------------------- tampering
def edit_manifest(shards: Path) -> str:
    """A hand edit that keeps the manifest well formed: only its checksum can tell."""
    body = json.loads((shards / "manifest.json").read_text())
    body["shards"][0]["tokens"] += 1
    body["totals"]["tokens"] += 1
    (shards / "manifest.json").write_text(json.dumps(body, indent=1, sort_keys=True))
    return "manifest.json"


def swap_queries(shards: Path) -> str:
    """The outside tester's edit: pos_cid[:k] swapped with neg_cid[:k]; same shapes, same file size."""
    path = shards / "valid-original-queries.npz"
    with np.load(path) as z:
        pos, neg = z["pos_cid"].copy(), z["neg_cid"].copy()
    k = min(len(pos), len(neg), 100)
    pos[:k], neg[:k] = neg[:k].copy(), pos[:k].copy()
    size = path.stat().st_size
    np.savez(path.with_suffix(".tmp.npz"), pos_cid=pos, neg_cid=neg)
    path.with_suffix(".tmp.npz").replace(path)
    assert path.stat().st_size == size
    return path.name


def rename_shard(shards: Path) -> str:
    (shards / "train-v000-00003.tar").rename(shards / "train-v000-00003-renamed.tar")
    return "train-v000-00003.tar"


def manifest_body(path: Path) -> dict:
    body = json.loads((path / "manifest.json").read_text())
    body.pop("config"), body.pop("checksum")  # config records where the set lives (and the checksum covers it)
    return body


def test_cache_hit_names_and_repairs_an_edited_manifest(reference, graph_csv, tmp_path, ray_session, capfd):
    shards = copy_set(reference, tmp_path)
    edit_manifest(shards)
    proc = preprocess_here(graph_csv, tmp_path, capture=capfd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = [line for line in proc.stderr.splitlines() if "WARNING preprocess.job" in line]
    assert len(notes) == 1 and re.search(
        rf"{re.escape(str(shards))}/manifest\.json: checksum mismatch .*: the manifest "
        r"was edited or is corrupt; rebuilding the manifest$",
        notes[0],
    ), notes
    assert files(shards) == files(reference) and manifest_body(shards) == manifest_body(reference)


def test_cache_hit_names_and_repairs_swapped_queries_and_a_renamed_shard(
    reference, graph_csv, tmp_path, ray_session, capfd
):
    shards = copy_set(reference, tmp_path)
    swap_queries(shards)
    rename_shard(shards)
    proc = preprocess_here(graph_csv, tmp_path, capture=capfd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = sorted(
        line.split(" preprocess.job: ")[1] for line in proc.stderr.splitlines() if "WARNING preprocess.job" in line
    )
    assert len(notes) == 3, notes
    assert re.fullmatch(
        rf"{re.escape(str(shards))}/train-v000-00003-renamed\.tar: not a file of this set; removed", notes[0]
    ), notes
    assert re.fullmatch(rf"{re.escape(str(shards))}/train-v000-00003\.tar: missing; sampling it again", notes[1]), notes
    assert re.fullmatch(
        rf"{re.escape(str(shards))}/valid-original-queries\.npz: checksum mismatch \(manifest "
        r"[0-9a-f]{12}…, file [0-9a-f]{12}…\); writing it again",
        notes[2],
    ), notes
    assert files(shards) == files(reference) and manifest_body(shards) == manifest_body(reference)


def swap_node_ids(shards: Path) -> str:
    """The user's ids of nodes 0 and 1 exchanged: every output would name the wrong nodes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = shards / "node_ids.parquet"
    ids = pq.read_table(path).column("id").to_numpy(zero_copy_only=False).copy()
    ids[[0, 1]] = ids[[1, 0]]
    pq.write_table(pa.table({"id": pa.array(ids)}), path)
    return path.name


def test_cache_hit_names_and_repairs_swapped_node_ids(reference, graph_csv, tmp_path, ray_session, capfd):
    shards = copy_set(reference, tmp_path)
    swap_node_ids(shards)
    proc = preprocess_here(graph_csv, tmp_path, capture=capfd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = [
        line.split(" preprocess.job: ")[1] for line in proc.stderr.splitlines() if "WARNING preprocess.job" in line
    ]
    assert len(notes) == 1 and re.fullmatch(
        rf"{re.escape(str(shards))}/node_ids\.parquet: (checksum|size) mismatch "
        r"\(manifest .*\); writing it again",
        notes[0],
    ), notes
    assert files(shards) == files(reference) and manifest_body(shards) == manifest_body(reference)


@pytest.mark.parametrize("verify", [True, False], ids=["verify", "plain"])
@pytest.mark.parametrize(
    "tamper,text",
    [
        (edit_manifest, r"manifest\.json: checksum mismatch \(recorded [0-9a-f]{12}…, contents [0-9a-f]{12}…\)"),
        (
            swap_queries,
            r"valid-original-queries\.npz: checksum mismatch \(manifest [0-9a-f]{12}…, file [0-9a-f]{12}…\)",
        ),
        (rename_shard, r"train-v000-00003\.tar: missing"),
    ],
    ids=["manifest", "queries", "renamed-shard"],
)
def test_trainer_names_a_tampered_file_in_one_line(reference, tmp_path, tamper, text, verify, capfd):
    shards = copy_set(reference, tmp_path)
    tamper(shards)
    argv = [
        "--shards",
        str(shards),
        "--preset",
        "tiny",
        "--out",
        str(tmp_path / "run"),
        "--max-steps",
        "2",
        "--num-workers",
        "0",
        "--no-progress",
        "--device",
        "cpu",
        *(["--verify"] if verify else []),
    ]
    proc = trainer_here(argv, capfd)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = user_lines(proc.stderr)
    flag = "--verify: " if verify and tamper is not edit_manifest else ""
    assert re.match(rf"python -m trainer: error: {flag}{re.escape(str(shards))}/{text}", line), line


# ---------------------------------------------------------------------------- full disk
def test_full_disk_leaves_no_temp_files_and_one_line(graph_csv, tmp_path):
    disk = tmp_path / "disk"
    if not mount_tmpfs(disk, "160k"):
        pytest.skip("cannot mount a tmpfs here (not root or no mount); the injected ENOSPC test covers the writer")
    try:
        proc = preprocess(graph_csv, disk)
        leftovers = [p for p in disk.rglob("*") if p.name.endswith(".tmp")]
        written = sorted(p.name for p in disk.rglob("*.tar"))
    finally:
        subprocess.run(["umount", str(disk)], check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Errno 28" not in proc.stderr, proc.stderr[-3000:]
    lines = user_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr[-3000:]
    (line,) = lines
    assert re.match(
        rf"python -m preprocess: error: {re.escape(str(disk))}/small/[0-9a-f]{{16}}/\S+: "
        "no space left on device; free space or write somewhere else$",
        line,
    ), line
    assert leftovers == []
    assert "manifest.json" not in written


def test_injected_enospc_in_a_shard_task_is_reported_not_retried(tmp_path, monkeypatch):
    """Without a tmpfs: a storage whose writes fail with ENOSPC half way through a shard."""
    from common.storage import LocalStorage
    from preprocess import job

    class FullDisk(LocalStorage):
        def writer(self, name):
            inner = super().writer(name)

            class Ctx:
                def __enter__(self_):
                    f = inner.__enter__()

                    class Limited:
                        written = 0

                        def write(self, data):
                            Limited.written += len(data)
                            if Limited.written > 2000:
                                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                            return f.write(data)

                    return Limited()

                def __exit__(self_, *exc):
                    return inner.__exit__(*exc)

            return Ctx()

    monkeypatch.setattr(job, "open_storage", lambda url: FullDisk(url))
    rng = np.random.default_rng(0)
    from common.graph import Graph

    g = Graph.from_edges(rng.integers(0, 200, (800, 2)), num_nodes=200)
    src, dst = rng.integers(0, 200, 300), rng.integers(0, 200, 300)
    task = job.ShardTask(0, 300, 1, 3, 7, 64, str(tmp_path), "train-v000-00000.tar", False, 8)
    out = job.build_shard(g.indptr, g.indices, src, dst, np.ones(300, np.float32), task)
    assert out["fatal"][0] == errno.ENOSPC and out["fatal"][2] == str(tmp_path / "train-v000-00000.tar")
    assert list(tmp_path.iterdir()) == []  # neither the shard nor its temporary file
    from common.cli import describe

    assert (
        describe(OSError(*out["fatal"]))
        == f"{tmp_path}/train-v000-00000.tar: no space left on device; free space or write somewhere else"
    )


# ---------------------------------------------------------------------------- kill -9
# tests/fault_hook/sitecustomize.py, on the job's PYTHONPATH, pins the moment of the kill: every attempt at a
# shard leaves FAULT_DIR/<shard>.attempt<k> (the worker's pid), and the first attempt at the HOLD shard
# writes part of it, flushes, marks <shard>.held and waits there for the SIGKILL. --num-cpus 1: one task
# at a time, so the shards planned before HOLD are finished and the ones after it are not started.
FAULT_HOOK = ROOT / "tests" / "fault_hook"
HOLD = "train-v000-00003.tar"


def hooked_env(fault_dir: Path, hold: str = HOLD) -> dict:
    path = [str(FAULT_HOOK), str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path),
        "PENCIL_TEST_FAULT_DIR": str(fault_dir),
        "PENCIL_TEST_FAULT_HOLD": hold,
    }


def attempts(fault_dir: Path) -> dict[str, list[int]]:
    """{shard: [pid of attempt 1, pid of attempt 2, ...]} from the hook's markers."""
    found: dict[str, dict[int, int]] = {}
    for p in fault_dir.iterdir():
        m = re.fullmatch(r"(.+\.tar)\.attempt(\d+)", p.name)
        if m:
            found.setdefault(m.group(1), {})[int(m.group(2))] = int(p.read_text())
    return {name: [by[k] for k in sorted(by)] for name, by in sorted(found.items())}


def session_processes(sid: int) -> list:
    """Live processes of the session a Popen(start_new_session=True) child leads: it and what it started."""
    import psutil

    out = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def _kill_tree_leftovers(proc: subprocess.Popen) -> None:
    """Ray processes of a killed driver live in the session group we created for it; end that group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _held(fault_dir: Path, proc: subprocess.Popen) -> int:
    """Wait until the HOLD shard's first attempt is parked mid-write; its worker's pid."""

    def ready():
        if proc.poll() is not None:
            pytest.fail(f"preprocess exited ({proc.returncode}) before the hook held {HOLD}")
        return (fault_dir / f"{HOLD}.held").exists()

    _wait_for(ready, 300, f"the first attempt at {HOLD} to be held mid-write")
    return int((fault_dir / f"{HOLD}.held").read_text())


def test_driver_sigkill_mid_job_then_rerun_is_byte_identical(reference, graph_csv, tmp_path):
    """kill -9 of `python -m preprocess` (the driver, embedded Ray) while one shard is half written, some are
    finished and the rest not started; whatever Ray processes survive it must not touch the set; the same
    command again gives the uninterrupted set, byte for byte."""
    import psutil

    out, faults = tmp_path / "out", tmp_path / "faults"
    faults.mkdir()
    proc = subprocess.Popen(
        preprocess_cmd(graph_csv, out, "--num-cpus", "1"),
        cwd=ROOT,
        env=hooked_env(faults),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        writer = _held(faults, proc)
        os.kill(proc.pid, signal.SIGKILL)  # the driver only: Ray's processes are left to react on their own
        proc.wait(30)
        # The processes that did the job (GCS, raylet, the worker parked mid-write) die with the driver; what
        # Ray leaves running (its agents) must hold no file of the set. Then the group goes, as a user's would.
        shards = set_dir(out)
        _wait_for(lambda: not _alive(writer), 60, f"the worker writing {HOLD} (pid {writer}) to die with the driver")
        survivors = [p.name() for p in session_processes(proc.pid) if _alive(p.pid)]
        assert not [n for n in survivors if n in ("raylet", "gcs_server") or "build_shard" in n], survivors
        for p in session_processes(proc.pid):
            try:
                assert not [f.path for f in p.open_files() if f.path.startswith(str(out))], p.name()
            except psutil.Error:
                continue
    finally:
        _kill_tree_leftovers(proc)
    # The interrupted set: exactly the shards finished before HOLD, HOLD half written, no manifest.
    started = attempts(faults)
    finished = sorted(n for n in started if n != HOLD)
    assert started[HOLD] == [writer] and finished, started
    assert not (shards / "manifest.json").exists()
    assert sorted(shards.glob("*.tar")) == [shards / n for n in finished]
    # HOLD's temporary file stays when its worker died by the signal, and is gone when the worker unwound
    # (its writer removes it on the way out); either way no other temporary file, and HOLD is not finished.
    assert [p.name for p in shards.glob(".*.tmp")] == [p.name for p in shards.glob(f".{HOLD}.{writer}.*.tmp")]
    assert len(finished) < sum(n.endswith(".tar") for n in files(reference))

    rerun = preprocess(graph_csv, out, "--num-cpus", "1")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert re.search(rf"\(\d+ sampled, {len(finished)} shards reused of \d+\)", rerun.stderr), rerun.stderr[-3000:]
    assert files(shards) == files(reference) and manifest_shards(shards) == manifest_shards(reference)
    assert manifest_body(shards) == manifest_body(reference)  # files (every other file's sha256) and totals too


@pytest.mark.slow
def test_driver_kill_then_rerun_is_byte_identical(reference, graph_csv, tmp_path):
    """Unpinned twin of the test above: 2 CPUs, several tasks in flight, the kill wherever it lands."""
    out = tmp_path / "out"
    proc = subprocess.Popen(
        preprocess_cmd(graph_csv, out),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for(lambda: len(list(out.glob("*/*/train-*.tar"))) >= 3, 120, "three finished shards")
        os.kill(proc.pid, signal.SIGKILL)  # the driver only, mid-run
        proc.wait(30)
    finally:
        _kill_tree_leftovers(proc)
    shards = set_dir(out)
    assert not (shards / "manifest.json").exists()
    done = files(shards, finished_only=True)  # the kill's moment: workers may still be unwinding
    assert 3 <= sum(n.endswith(".tar") for n in done) < sum(n.endswith(".tar") for n in files(reference))
    rerun = preprocess(graph_csv, out)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert re.search(r"\d+ shards reused", rerun.stderr)
    assert files(shards) == files(reference) and manifest_shards(shards) == manifest_shards(reference)
    assert not list(shards.glob(".*.tmp"))


@pytest.mark.slow
def test_worker_kill_is_retried_and_byte_identical(reference, graph_csv, tmp_path):
    """kill -9 of the Ray worker half way through writing a shard: Ray runs the task again (a second attempt,
    in another worker, is observed: with max_retries=0 the job fails instead) and the set is the
    uninterrupted one, byte for byte, with no temporary file of the dead worker left in it."""
    out, faults = tmp_path / "out", tmp_path / "faults"
    faults.mkdir()
    proc = subprocess.Popen(
        preprocess_cmd(graph_csv, out, "--num-cpus", "1"),
        cwd=ROOT,
        env=hooked_env(faults),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        victim = _held(faults, proc)
        os.kill(victim, signal.SIGKILL)  # one worker, mid-write; the driver lives on
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        _kill_tree_leftovers(proc)
    assert proc.returncode == 0, stderr[-3000:]
    assert stdout.strip().splitlines()[-1].startswith("shards written: ")
    tries = attempts(faults)
    assert len(tries[HOLD]) == 2 and tries[HOLD][0] == victim != tries[HOLD][1], tries
    assert all(len(pids) == 1 for name, pids in tries.items() if name != HOLD), tries  # nothing else ran twice
    assert sorted(tries) == sorted(n for n in files(reference) if n.endswith(".tar"))
    shards = set_dir(out)
    assert files(shards) == files(reference) and manifest_shards(shards) == manifest_shards(reference)
