"""The trainer pool's memory gate (pipelines/core/memory_gate.py): its rule on hand-computed values, the
measurement of a real process tree, and the pool holding a real child back until memory allows it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.core import trainers
from pipelines.core.memory_gate import GiB, MemoryGate, _children, _pss_bytes, tree_bytes
from pipelines.core.trainers import TrainerRun, run_trainers


def gate(free_gib: float, peaks: dict | None = None, **kw) -> MemoryGate:
    sizes = {view: int(gib * GiB) for view, gib in (peaks or {}).items()}
    return MemoryGate(available=lambda: int(free_gib * GiB), peaks=sizes, **kw)


ONE = {"a": "deep", "b": "deep", "c": "deep"}  # every trainer of one view


def test_the_rule_covers_each_running_trainers_growth_and_the_new_one():
    g = gate(free_gib=4.5, peaks={"deep": 3.0})  # expected: 3 x 1.25 = 3.75 GiB a trainer
    assert g.expected("deep") == int(3.75 * GiB)
    g.usage = {"a": 3 * GiB}  # a may grow 0.75 more; the new one 3.75: 4.5 needed
    assert g.allows("b", ["a"], ONE)
    g.available = lambda: int(4.4 * GiB)
    assert not g.allows("b", ["a"], ONE)
    assert g.allows("b", [], ONE)  # nothing running: one trainer always runs
    g.usage = {"a": 5 * GiB}  # above the expected footprint: it grows by nothing more
    g.available = lambda: int(3.75 * GiB)
    assert g.allows("b", ["a"], ONE)


def test_each_view_is_expected_at_its_own_largest_and_an_unseen_one_at_the_largest_of_any():
    g = gate(free_gib=6.0, peaks={"default": 1.6, "deep": 4.0}, headroom=1.0)
    views = {"d0": "default", "x": "deep", "new": "wide"}
    assert g.expected("default") == int(1.6 * GiB) and g.expected("wide") == 4 * GiB
    # the default just started (unmeasured: all of its 1.6 to come) beside deep's 4.0: 5.6 <= 6
    assert g.allows("x", ["d0"], views)
    # an unseen view beside deep: 4.0 + 4.0 > 6
    assert not g.allows("new", ["x"], views)


def test_before_any_measurement_the_floor_stands_and_an_unmeasured_trainer_counts_whole():
    g = gate(free_gib=2.4, floor=GiB, headroom=1.2)  # nothing seen: 1.2 GiB expected per trainer
    assert g.expected("deep") == int(1.2 * GiB)
    assert g.allows("b", ["a"], ONE)  # a unmeasured: 1.2 + 1.2 = 2.4 needed
    assert not g.allows("c", ["a", "b"], ONE)  # 3.6 needed
    g.available = lambda: None  # unknown free memory: cores decide, as without the gate
    assert g.allows("c", ["a", "b"], ONE)


def test_observe_keeps_each_views_largest_footprint_and_measures_at_its_pace():
    now = [0.0]
    sizes = {1: 2 * GiB, 2: 3 * GiB}
    g = MemoryGate(available=lambda: 0, measure=lambda pid: sizes[pid], clock=lambda: now[0], every_s=2.0)
    views = {"a": "default", "b": "deep"}
    g.observe({"a": 1, "b": 2}, views)
    assert g.peaks == {"default": 2 * GiB, "deep": 3 * GiB} and g.usage == {"a": 2 * GiB, "b": 3 * GiB}
    sizes[2] = GiB
    now[0] = 1.0
    g.observe({"a": 1, "b": 2}, views)  # within every_s: not measured again
    assert g.usage["b"] == 3 * GiB
    now[0] = 2.5
    g.observe({"a": 1, "b": 2}, views)
    assert g.usage["b"] == GiB and g.peaks["deep"] == 3 * GiB  # the peak stays


HOLD = """
import os, sys, time
block = bytearray({mb} * 2**20)
block[::4096] = b"x" * len(block[::4096])  # touch every page: resident
{spawn}
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="needs Linux /proc smaps_rollup")
def test_tree_bytes_counts_a_real_child_and_its_grandchild():
    grandchild = HOLD.format(mb=96, spawn="")
    spawn = f"import subprocess; kid = subprocess.Popen([sys.executable, '-c', {grandchild!r}], stdout=sys.stdout)"
    proc = subprocess.Popen([sys.executable, "-c", HOLD.format(mb=160, spawn=spawn)], stdout=subprocess.PIPE, text=True)
    try:
        ready = [proc.stdout.readline().strip() for _ in range(2)]  # the child's and the grandchild's
        assert ready == ["ready", "ready"]
        own, whole = _pss_bytes(proc.pid), tree_bytes(proc.pid)
        assert own >= 160 * 2**20, own
        assert whole >= own + 90 * 2**20, (own, whole)  # the grandchild's 96 MiB block, counted once
    finally:
        for kid in _children(proc.pid):
            os.kill(kid, signal.SIGKILL)
        proc.kill()
        proc.wait()
    assert tree_bytes(proc.pid) == 0  # gone: nothing to read


def test_the_pool_holds_a_trainer_back_until_memory_allows_it(tmp_path, monkeypatch):
    """Real children that record when they ran: with memory for one, two jobs and two slots run one after the
    other; with memory for both, side by side."""

    def command(run):
        stamp = Path(run.run_dir) / "ran.json"
        code = (
            f"import json, time; t = time.time(); time.sleep(1.5); "
            f"open({str(stamp)!r}, 'w').write(json.dumps([t, time.time()]))"
        )
        return [sys.executable, "-c", code]

    monkeypatch.setattr(trainers, "trainer_command", command)

    def spans(free_gib: float, name: str) -> list:
        jobs = {k: TrainerRun(tmp_path / name / k, "shards", "general", 0, "original") for k in ("a", "b")}
        wall, stopped = run_trainers(jobs, 2, gate=gate(free_gib, floor=GiB, headroom=1.0))
        assert set(wall) == {"a", "b"} and stopped == []
        return sorted(json.loads((tmp_path / name / k / "ran.json").read_text()) for k in ("a", "b"))

    (a0, a1), (b0, _) = spans(1.5, "tight")  # 1 GiB each expected, 1.5 free: one at a time
    assert b0 >= a1
    (a0, a1), (b0, _) = spans(4.0, "roomy")
    assert b0 < a1


# ---------------------------------------------------------------------------- what the gate reads as free
def write(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("__", ".")).write_text(text)


def test_cgroup_v2_headroom_is_the_limit_minus_the_current_use(tmp_path):
    from common.memory import _cgroup_headroom

    write(tmp_path, memory__max="4294967296\n", memory__current="1073741824\n")
    assert _cgroup_headroom(str(tmp_path), "/nonexistent") == 3 * GiB
    write(tmp_path, memory__max="max\n")
    assert _cgroup_headroom(str(tmp_path), "/nonexistent") is None


def test_cgroup_v1_headroom_reads_the_processs_group_its_ancestors_limit_and_leaves_out_droppable_cache(tmp_path):
    """A Docker host with cgroup v1: /proc/self/cgroup names the memory group; its memory.stat carries the
    limit of the tightest ancestor; the inactive page cache is not counted as used."""
    from common.memory import _cgroup_headroom

    own = tmp_path / "cgroup"
    own.write_text("9:name=systemd:/\n4:memory:/docker/abc\n3:cpuset:/\n")
    group = tmp_path / "fs" / "memory" / "docker" / "abc"
    stat = f"cache 100\nhierarchical_memory_limit {6 * GiB}\ntotal_inactive_file {GiB}\n"
    write(group, memory__stat=stat, memory__limit_in_bytes=f"{2**63 - 4096}\n", memory__usage_in_bytes=f"{3 * GiB}\n")
    assert _cgroup_headroom(str(tmp_path / "fs"), str(own)) == 4 * GiB  # 6 - (3 - 1)
    # no limit anywhere: v1 writes the largest page-aligned int64
    write(group, memory__stat=f"hierarchical_memory_limit {2**63 - 4096}\n")
    assert _cgroup_headroom(str(tmp_path / "fs"), str(own)) is None
    # a namespaced mount: the process's own group is the mount's root
    write(tmp_path / "ns" / "memory", memory__stat=stat, memory__usage_in_bytes=f"{5 * GiB}\n")
    assert _cgroup_headroom(str(tmp_path / "ns"), str(own)) == 2 * GiB


def test_a_trainer_killed_by_the_kernel_is_named_so_with_the_fix(tmp_path, monkeypatch):
    """A real child that dies of SIGKILL (as the out-of-memory killer ends it, no traceback): the one line
    says so and names the flag that trains one run at a time, instead of a bare 'failed'."""

    def command(run):
        return [sys.executable, "-c", "import os, signal; print('training', flush=True); os.kill(os.getpid(), 9)"]

    monkeypatch.setattr(trainers, "trainer_command", command)
    jobs = {"seed 1": TrainerRun(tmp_path / "seed1", "shards", "general", 1, "original")}
    with pytest.raises(trainers.TrainerError) as got:
        run_trainers(jobs, 1)
    assert "seed 1: the trainer was killed (SIGKILL: most often the kernel's out-of-memory killer" in str(got.value)
    assert "--parallel-seeds 1" in str(got.value) and str(tmp_path / "seed1" / "trainer.log") in str(got.value)
    assert trainers.died(1) == "failed" and trainers.died(-15) == "was killed (SIGTERM)"
