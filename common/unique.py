"""Sort-based unique for large 1-D arrays.

numpy 2.x's `np.unique` hashes: on 30 M distinct int64 keys it takes about 40 s where one sort plus
a neighbour-difference mask takes well under a second (issue 21). Every large unique on the load,
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


def unique_sorted_inplace(s: np.ndarray) -> np.ndarray:
    """Sort `s` in place (it is clobbered) and return its distinct values: no second full-size copy."""
    s.sort()
    return s[_starts(s)]


def unique_inverse(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """== np.unique(a, return_inverse=True) for a 1-D array: (sorted distinct values, int64 index of each)."""
    a = np.asarray(a).ravel()
    order = np.argsort(a)
    s = a[order]
    keep = _starts(s)
    inverse = np.empty(a.shape[0], dtype=np.int64)
    inverse[order] = np.cumsum(keep) - 1
    return s[keep], inverse


def unique_first(a: np.ndarray) -> np.ndarray:
    """Ascending positions of the first occurrence of every distinct value of 1-D `a`
    (== np.sort(np.unique(a, return_index=True)[1])): dedup that keeps the input order."""
    a = np.asarray(a).ravel()
    if a.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(a)  # unstable is fine: the minimum position per run is taken below
    starts = np.flatnonzero(_starts(a[order]))
    return np.sort(np.minimum.reduceat(order, starts)).astype(np.int64, copy=False)
