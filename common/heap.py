"""Give the C allocator's freed memory back to the OS during a CPU training run (glibc on Linux only).

A CPU trainer's tensors change size with every bucketed batch, and glibc keeps what they free inside its
heap, in pieces that rarely fit the next request: a `deep` trainer held 0.9 GB live in a 3.7 GB peak.
`malloc_trim(0)` returns every free page of every arena (madvise, in place), which glibc's own trim of the
heap's top cannot do. See docs/benchmarks/2026-12-05-trainer-memory.md for the policies measured.
Elsewhere (musl, macOS, Windows) and on CUDA (its caching allocator is not malloc) this is a no-op.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

MiB = 1 << 20
# Trim once the process has grown this much past its size a step after the last trim: a smaller step cuts more of
# the peak, but each trim's pages fault back in (docs/benchmarks/2026-12-05-trainer-memory.md). A run's peak is two
# trainers at the top of their swings, so the step counts twice (docs/benchmarks/2026-12-06-dense-memory.md).
GROWTH = 256 * MiB
# benches only, every trainer of a run inherits it: "off", "grow:MB", "every:K", "phase"
BENCH_SWITCH = "PENCIL_BENCH_HEAP_TRIM"


@functools.cache
def glibc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc (it has malloc_trim), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version"):  # glibc only: musl's malloc_trim is a stub (1.2.1+)
            return None
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def trim() -> bool:
    """malloc_trim(0): True if glibc returned any memory; False where there is no glibc."""
    libc = glibc()
    return bool(libc and libc.malloc_trim(0))


def trim_before_fork() -> None:
    """A loader about to fork its workers: trim first, or each worker keeps the heap's freed pages alive
    (copy-on-write shares them, and the trainer's next write copies them). The bench's "off" skips it."""
    if os.environ.get(BENCH_SWITCH) != "off":
        trim()


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


def heap_stats() -> dict | None:
    """glibc's mallinfo2 over all arenas (bytes): heap obtained, in use, free in the heap, mmapped blocks."""
    libc = glibc()
    if libc is None or not hasattr(libc, "mallinfo2"):  # mallinfo2: glibc 2.33+
        return None
    libc.mallinfo2.restype = _Mallinfo2
    m = libc.mallinfo2()
    return {"heap": m.arena, "in_use": m.uordblks, "free": m.fordblks, "mmapped": m.hblkhd, "top": m.keepcost}


def rss_bytes() -> int:
    """This process's resident set (/proc/self/statm: one short read, cheap enough for every step)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class HeapTrim:
    """A forward pre-hook (a step's start, when least is live): trim once the process has grown `growth` bytes
    past its size one forward after the last trim (the step's working set faulted back in, so the trims
    follow the heap's growth, not each step's swing). `every` > 0: every that many training forwards instead;
    `phase`: when training turns to evaluation and back. `log`: a file that gets a line per trim (the bench's).
    """

    def __init__(self, growth: int = GROWTH, every: int = 0, phase: bool = False, log: str | None = None):
        self.growth, self.every, self.phase, self.log = growth, every, phase, log
        self.floor, self.calls, self.trims, self.mode = None, 0, 0, None

    def __call__(self, module, _args) -> None:
        self.calls += 1
        if self.phase:
            due = self.mode is not None and module.training != self.mode
            self.mode = module.training
        elif self.every:
            due = module.training and self.calls % self.every == 0
        else:
            rss = rss_bytes()
            self.floor = rss if self.floor is None else self.floor
            due = rss > self.floor + self.growth
        if due:
            self._trim()

    def _trim(self) -> None:
        before = heap_stats() if self.log else None
        trim()
        self.trims += 1
        self.floor = None
        if self.log:
            with open(self.log, "a") as f:
                print(self.calls, rss_bytes() // MiB, before, file=f)


def policy(device_type: str, environ=os.environ) -> HeapTrim | None:
    """The trainer's policy: HeapTrim on a CPU run with glibc, else None. BENCH_SWITCH selects another."""
    if device_type != "cpu" or glibc() is None:
        return None
    spec = environ.get(BENCH_SWITCH, "")
    kind, _, arg = spec.partition(":")
    log = environ.get(BENCH_SWITCH + "_LOG")
    if kind == "off":
        return None
    if kind == "every":
        return HeapTrim(every=int(arg), log=log)
    if kind == "phase":
        return HeapTrim(phase=True, log=log)
    return HeapTrim(growth=int(arg) * MiB if kind == "grow" else GROWTH, log=log)
