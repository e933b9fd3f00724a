"""Sort-based unique for large 1-D arrays.

numpy 2.x's `np.unique` hashes: on 30 M distinct int64 keys it takes about 40 s where one sort plus
a neighbour-difference mask takes well under a second. Every large unique on the load,
split and candidate path goes through these helpers; results equal `np.unique`'s.
"""

from __future__ import annotations

import numpy as np


def _starts(s: np.ndarray) -> np.ndarray:
    """Mask of the first element of every run of equal values in sorted `s`."""
    keep = np.empty(s.shape[0], dtype=bool)
    if s.shape[0]:
        keep[0] = True
        np.not_equal(s[1:], s[:-1], out=keep[1:])
    return keep


def unique_sorted(a: np.ndarray) -> np.ndarray:
    """== np.unique(a) for a 1-D array: one sort, one mask."""
    s = np.sort(np.asarray(a).ravel())
    return s[_starts(s)]


COMPACT_CHUNK = 1 << 23


def unique_sorted_inplace(s: np.ndarray) -> np.ndarray:
    """Sort 1-D `s` in place and return its distinct values as a view of its head: no second
    full-size array (the driver's peak on a 30 M-edge graph is these keys)."""
    s.sort()
    n = 0
    for lo in range(0, s.shape[0], COMPACT_CHUNK):
        hi = min(lo + COMPACT_CHUNK, s.shape[0])
        keep = np.empty(hi - lo, dtype=bool)
        keep[0] = lo == 0 or s[lo] != s[lo - 1]  # s[lo - 1] is still unwritten: writes stay at or left of n <= lo
        np.not_equal(s[lo + 1 : hi], s[lo : hi - 1], out=keep[1:])
        part = s[lo:hi][keep]  # a copy of at most one chunk, then moved left
        s[n : n + part.shape[0]] = part
        n += part.shape[0]
    return s[:n]


def unique_inverse(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """== np.unique(a, return_inverse=True) for a 1-D array: (sorted distinct values, int64 index of each)."""
    a = np.asarray(a).ravel()
    order = np.argsort(a)
    s = a[order]
    del a  # freed here when the caller passed a temporary
    keep = _starts(s)
    uniq = s[keep]
    rank = s.view(np.int64) if s.dtype.itemsize == 8 and s.dtype.kind in "iu" else np.empty(len(s), np.int64)
    np.cumsum(keep, out=rank)  # the sorted copy's buffer is reused: one full-size array less at the peak
    rank -= 1
    inverse = np.empty(order.shape[0], dtype=np.int64)
    inverse[order] = rank
    return uniq, inverse


def unique_first(a: np.ndarray) -> np.ndarray:
    """Ascending positions of the first occurrence of every distinct value of 1-D `a`
    (== np.sort(np.unique(a, return_index=True)[1])): dedup that keeps the input order."""
    a = np.asarray(a).ravel()
    if a.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(a)  # unstable is fine: the minimum position per run is taken below
    starts = np.flatnonzero(_starts(a[order]))
    return np.sort(np.minimum.reduceat(order, starts)).astype(np.int64, copy=False)
