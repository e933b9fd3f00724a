"""Loader workers die with their trainer (common/parent_death.py, trainer/data/loaders.py): a trainer process killed by
SIGKILL, as the out-of-memory killer ends one, used to leave persistent loader workers alive, holding memory.
Real processes: a child builds the trainer's own DataLoader, starts its workers and is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

CHILD = """
import os, sys, time
from torch.utils.data import IterableDataset
from trainer.data.loaders import _dataloader

class Pids(IterableDataset):
    def warm(self):
        pass
    def __iter__(self):
        # endless, as a training stream is mid-epoch, and pickled through the pipe (not shared memory), as the
        # trainer's packed batches are: the workers' queue feeders block on a full pipe
        while True:
            yield (os.getpid(), bytes(1 << 20))

batches = iter(_dataloader(Pids(), num_workers=2, pin=False, prefetch=2))
pids = sorted({next(batches)[0] for _ in range(8)})
print(" ".join(map(str, pids)), flush=True)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"  # a zombie is dead, only not reaped yet
    except FileNotFoundError:
        return False


def test_a_trainers_loader_workers_die_when_it_is_killed():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(p) for p in proc.stdout.readline().split()]
        assert len(workers) == 2 and proc.pid not in workers and all(alive(w) for w in workers)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.time() + 10
        while any(alive(w) for w in workers) and time.time() < deadline:
            time.sleep(0.1)
        assert not any(alive(w) for w in workers), "loader workers outlived their trainer"
    finally:
        proc.kill()
