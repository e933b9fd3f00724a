"""A table's node-id columns (an edge list's src and dst, a node list's node) -> 0..N-1, once.

Node ids may be integers of any size (negative, or up to 2^64 - 1) or strings (anything else in a text
file: user names, hashes, gene symbols, codes with a leading zero such as 007; an integer wider than 64 bits
is kept as its text). One such id makes every id of the file text, and the log says which id and why. They are
mapped to 0..N-1 in sorted order (numbers numerically, strings by their UTF-8 bytes), so the mapping
depends only on the set of ids, not on row order. `node_ids[i]` is the user's id of node i; it ships
with the shard set and every output translates back through it. A file whose ids already are 0..N-1
maps to itself.

The columns come from common/datasets/tables.py. Integer ids are mapped by a direct table when they span a
range no wider than a few times the row count, else by one hash pass whose small dictionary of distinct ids is
then sorted; string ids likewise (a hash pass, then a sort of the distinct strings).
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.datasets.base import DatasetError
from common.memory import rss_gb
from common.unique import unique_sorted

log = logging.getLogger(__name__)

# float64 holds every integer exactly only up to 2^53: above it, distinct ids may already be one float
FLOAT_EXACT = 2**53


# ---------------------------------------------------------------------------------- ids -> 0..N-1
def numeric_ids(col: pa.ChunkedArray, name: str, path: Path) -> tuple[np.ndarray | None, str | None]:
    """An id column as int64 or uint64 numbers, or (None, why) when it must be read as text: the first id that
    an integer would not keep as the user wrote it (a name, a leading zero, a number beyond 64 bits)."""
    if col.null_count:
        row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise DatasetError(
            f"{path}: column '{name}' has an empty node id in data row {row + 1}; fill it or drop the row"
        )
    t = col.type
    if pa.types.is_dictionary(t):
        col, t = col.cast(t.value_type), t.value_type
    if pa.types.is_integer(t):
        if pa.types.is_unsigned_integer(t) and t.bit_width == 64:
            return col.to_numpy(), None
        return col.cast(pa.int64()).to_numpy(), None
    if pa.types.is_floating(t):
        f = col.to_numpy()
        bad = ~(np.isfinite(f) & (f == np.round(f)))
        if bad.any():
            raise DatasetError(
                f"{path}: column '{name}' holds non-integer node id {f[bad][0]}; ids must be integers or strings"
            )
        wide = np.abs(f) > FLOAT_EXACT
        if wide.any():
            raise DatasetError(
                f"{path}: column '{name}' holds node id {f[wide][0]:.17g} as a float, beyond 2^53 "
                "where floats no longer tell neighbouring integers apart; store the ids as "
                "integers or strings"
            )
        return f.astype(np.int64), None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        # an empty id fails both casts: the strings path finds it in the few distinct ids (_check_empty)
        for target in (pa.int64(), pa.uint64()):
            try:
                nums = col.cast(target).to_numpy()
            except pa.ArrowInvalid:
                continue
            zero = leading_zeros(col)
            if zero.any():  # 007 is not 7: a code, read as text so that it comes back as written
                row = int(np.flatnonzero(zero)[0])
                return (
                    None,
                    f"column '{name}' holds {col[row].as_py()!r} in data row {row + 1}, a leading zero an "
                    "integer would drop",
                )
            return nums, None
        return None, _why_text(col, name)
    raise DatasetError(f"{path}: column '{name}' must hold integer or string node ids, got type {t}")


def leading_zeros(col) -> np.ndarray:
    """bool per id (text that casts to an integer): written with a leading zero (007, -01, 00)."""
    zero = pc.and_(pc.starts_with(col, "0"), pc.greater(pc.binary_length(col), 1))
    return pc.or_(zero, pc.starts_with(col, "-0")).to_numpy(zero_copy_only=False)


def _why_text(col: pa.ChunkedArray, name: str) -> str:
    """Why a text column that is not all 64-bit integers is read as names: its first id that is not one."""
    for part in (col.slice(0, 1000), col):  # names show in the first rows: the whole column only when they do not
        digits = pc.match_substring_regex(part, r"^-?[0-9]+$").to_numpy(zero_copy_only=False)
        if not digits.all():
            row = int(np.flatnonzero(~digits)[0])
            return f"column '{name}' holds {col[row].as_py()!r} in data row {row + 1}, not an integer"
    for row in np.flatnonzero(pc.greater_equal(pc.binary_length(col), 19).to_numpy(zero_copy_only=False)):
        value = int(col[int(row)].as_py())
        if not -(2**63) <= value < 2**64:
            return f"column '{name}' holds {value} in data row {int(row) + 1}, beyond 64-bit integers"
    return f"column '{name}' holds ids that no 64-bit integer type holds together"


def as_run_ids(col: pa.ChunkedArray, name: str, path: Path, dtype) -> np.ndarray:
    """A column of a file that names nodes in a run's ids (a --graph snapshot), read by the rules of the run's
    edge list and in its id kind (`dtype`: int64, uint64, or object for text); an id that does not fit is a
    DatasetError naming its row."""
    if np.dtype(dtype) == object:
        text = col.cast(pa.string()) if not pa.types.is_string(col.type) else col
        if text.null_count or pc.any(pc.equal(text, "")).as_py():
            empty = pc.or_(text.is_null(), pc.equal(text, "")).to_numpy(zero_copy_only=False)
            raise DatasetError(
                f"{path}: column '{name}' has an empty node id in data row "
                f"{int(np.flatnonzero(empty)[0]) + 1}; fill it or drop the row"
            )
        return np.asarray(text.to_numpy(zero_copy_only=False), dtype=object)
    nums, why = numeric_ids(col, name, path)
    kind = f"{np.dtype(dtype)} integers"
    if nums is None:
        raise DatasetError(f"{path}: {why}; the run's node ids are {kind}: name nodes as its edge list did")
    info = np.iinfo(dtype)
    out = (nums < 0) if info.min == 0 else (nums > np.uint64(info.max)) if nums.dtype == np.uint64 else None
    if out is not None and out.any():
        row = int(np.flatnonzero(out)[0])
        raise DatasetError(
            f"{path}: column '{name}' holds {int(nums[row])} in data row {row + 1}, which does not fit "
            f"the run's node ids ({kind}); name nodes as its edge list did"
        )
    return nums.astype(dtype, copy=False)


def map_node_ids(
    path: Path, cols: dict[str, pa.ChunkedArray], sources: dict[str, Path] | None = None
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every id column -> integer node indices 0..N-1 over the union of their ids, plus `node_ids` (N,):
    sorted int64, uint64 or str (object) values, node_ids[i] the user's id of node i.
    sources: the file a column came from when not `path` (a node list), for error messages."""
    t0 = time.perf_counter()
    files = {k: (sources or {}).get(k, path) for k in cols}
    read = {k: numeric_ids(c, k, files[k]) for k, c in cols.items()}
    nums, why = {k: a for k, (a, _) in read.items()}, {k: r for k, (_, r) in read.items()}
    del read
    big = [k for k, a in nums.items() if a is not None and a.dtype == np.uint64 and a.size and a.max() >= 2**63]
    neg = [k for k, a in nums.items() if a is not None and a.dtype == np.int64 and a.size and a.min() < 0]
    if any(a is None for a in nums.values()) or (big and neg):
        _say_text(path, nums, why, files, big, neg)
        del nums
        out, node_ids, how = _map_strings(cols, files)  # names, or numbers no 64-bit type holds together
    else:
        cols.clear()  # the caller's dict too: the Arrow columns go, the numbers (or views holding them) stay
        release_arrow_memory()
        dtype = np.uint64 if big else np.int64
        for k in nums:
            nums[k] = nums[k].astype(dtype, copy=False)
        out, node_ids, how = _map_numbers(nums)
    log.info(
        "%s: %s distinct node ids (%s) mapped to 0..%d in %.1f s (driver %.1f GiB)",
        path.name,
        f"{len(node_ids):,}",
        how,
        len(node_ids) - 1,
        time.perf_counter() - t0,
        rss_gb(),
    )
    return out, node_ids


def _say_text(path: Path, nums: dict, why: dict, files: dict, big: list, neg: list) -> None:
    """One log line when ids are read as text, and why: one odd id turns every id of the file into text."""
    reasons = [f"{files[k].name}: {r}" if files[k] != path else r for k, r in why.items() if nums[k] is None]
    if not reasons:
        reasons = [
            f"column '{big[0]}' holds ids of 2^63 or more and column '{neg[0]}' negative ones: no 64-bit "
            "integer type holds both"
        ]
    numbers = [k for k, a in nums.items() if a is not None]
    level = logging.WARNING if numbers or "not an integer" not in reasons[0] else logging.INFO
    log.log(
        level,
        "%s: node ids read as text (sorted as text, written back as read): %s%s",
        path.name,
        reasons[0],
        f"; so the integer ids of column(s) {', '.join(numbers)} are text too" if numbers else "",
    )


def _map_numbers(arrays: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray, str]:
    total = sum(a.size for a in arrays.values())
    lo = min(int(a.min()) for a in arrays.values())
    hi = max(int(a.max()) for a in arrays.values())
    span = hi - lo + 1
    if span <= max(4 * total, 1 << 20):
        # Ids in a range a few times the row count: a presence table and a rank table replace the sort.
        def offset(a):
            return a if lo == 0 else a - a.dtype.type(lo)

        present = np.zeros(span, dtype=bool)
        for a in arrays.values():
            present[offset(a)] = True
        dtype = next(iter(arrays.values())).dtype
        node_ids = np.flatnonzero(present).astype(dtype) + dtype.type(lo)  # in the ids' type: lo may pass 2^63
        if lo == 0 and len(node_ids) == span:
            return {k: a.astype(np.int64, copy=False) for k, a in arrays.items()}, node_ids, "already 0..N-1"
        # int32 ranks where they fit: half the table, so more of the random gathers below hit the cache
        rank = np.cumsum(present, dtype=np.int32 if span < 2**31 else np.int64)
        rank -= 1
        del present
        return {k: rank[offset(a)] for k, a in arrays.items()}, node_ids, "integers, table"
    out, node_ids = _map_hashed(arrays)
    return out, node_ids, "integers, hashed"


def _map_hashed(arrays: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Ids anywhere in 64 bits -> ranks among the distinct ids, without sorting the rows.

    One hash pass (Arrow's dictionary_encode) gives the N distinct ids and each row's index into them;
    only those are sorted. 60 M ids over 2.9 M nodes: 4.8 s, against 16.6 s for an argsort of all rows.
    """
    keys = list(arrays)
    enc = pc.dictionary_encode(pa.chunked_array([pa.array(arrays.pop(k)) for k in keys]))  # inputs go with it
    # Arrow gives every chunk the final, shared dictionary; were they ever different, each gets its own table
    dicts: list[pa.Array] = []
    which = []
    for c in enc.chunks:
        j = next((i for i, d in enumerate(dicts) if d.equals(c.dictionary)), None)
        if j is None:
            dicts.append(c.dictionary)
            j = len(dicts) - 1
        which.append(j)
    values = [d.to_numpy() for d in dicts]
    node_ids = unique_sorted(np.concatenate(values))
    rank_dtype = np.int32 if len(node_ids) < 2**31 else np.int64
    ranks = []
    for v in values:
        order = np.argsort(v)
        ranks.append(np.empty(len(v), dtype=rank_dtype))
        ranks[-1][order] = np.searchsorted(node_ids, v[order])  # sorted queries: a cache-friendly walk
    out = {k: ranks[w][c.indices.to_numpy()] for k, w, c in zip(keys, which, enc.chunks)}
    return out, node_ids


def _map_strings(
    cols: dict[str, pa.ChunkedArray], files: dict[str, Path]
) -> tuple[dict[str, np.ndarray], np.ndarray, str]:
    """String ids -> ranks among the distinct strings in UTF-8 byte order (= code point order). As for
    hashed integers, a hash pass finds the distinct strings and only those are sorted. The hash pass is the
    cost (30 M strings in ~4.6 s on one thread), so each column is encoded on its own thread (Arrow's
    kernels release the GIL) and the columns' dictionaries are merged afterwards. `files`: for errors."""
    keys = list(cols)

    def encode(key: str) -> tuple[pa.Array, np.ndarray]:
        col = cols[key]
        if not pa.types.is_string(col.type):
            col = col.cast(pa.large_string())  # numbers among names (a node list), or already large
        chunks = pc.dictionary_encode(col).chunks
        if not chunks:
            return pa.array([], pa.large_string()), np.zeros(0, dtype=np.int32)
        # the memo table only grows: any chunk's dictionary is a prefix of the last one
        assert all(len(c.dictionary) <= len(chunks[-1].dictionary) for c in chunks)
        return chunks[-1].dictionary.cast(pa.large_string()), np.concatenate([c.indices.to_numpy() for c in chunks])

    with ThreadPoolExecutor(max(1, min(len(keys), os.cpu_count() or 1))) as pool:
        encoded = dict(zip(keys, pool.map(encode, keys)))
    cols.clear()  # the caller's dict too: the columns' text goes once encoded
    _check_empty(encoded, files)
    merged = pc.dictionary_encode(pa.concat_arrays([encoded[k][0] for k in keys]))
    order = pc.sort_indices(merged.dictionary).to_numpy()
    rank = np.empty(len(order), dtype=np.int32 if len(order) < 2**31 else np.int64)
    rank[order] = np.arange(len(order))
    to_merged, at, out = merged.indices.to_numpy(), 0, {}
    for k in keys:
        dictionary, indices = encoded.pop(k)
        out[k] = rank[to_merged[at : at + len(dictionary)]][indices]  # row -> column's dictionary -> rank
        at += len(dictionary)
    node_ids = merged.dictionary.take(pa.array(order)).to_numpy(zero_copy_only=False).astype(object)
    return out, node_ids, "strings, hashed"


def _check_empty(encoded: dict[str, tuple[pa.Array, np.ndarray]], files: dict[str, Path]) -> None:
    """An empty id is refused with its column and first data row; looked up in the distinct ids, the rows
    only when one is there."""
    for key, (dictionary, indices) in encoded.items():
        empty = np.flatnonzero(pc.equal(pc.binary_length(dictionary), 0).to_numpy(zero_copy_only=False))
        if empty.size:
            row = int(np.flatnonzero(indices == empty[0])[0])
            raise DatasetError(
                f"{files[key]}: column '{key}' has an empty node id in data row {row + 1}; fill it or drop the row"
            )


def release_arrow_memory() -> None:
    """Hand the Arrow pool's freed pages (the file's columns, once mapped) back to the OS: the pool keeps
    them otherwise, and the graph built next would sit on top of them."""
    pa.default_memory_pool().release_unused()


# ---------------------------------------------------------------------------------- user ids -> node index
def node_index(node_ids: np.ndarray, values) -> tuple[np.ndarray, np.ndarray]:
    """(index, found) of the user's ids `values` in sorted `node_ids`; values of another type (text
    digits against integer ids, or the reverse) are compared after converting them."""
    vals = _like(node_ids, values)
    if vals is None:
        return np.zeros(len(values), np.int64), np.zeros(len(values), bool)
    found = np.zeros(len(vals), dtype=bool)
    idx = np.zeros(len(vals), dtype=np.int64)
    ok = np.ones(len(vals), dtype=bool) if vals.dtype != object else np.array([v is not None for v in vals], bool)
    if len(node_ids) and ok.any():
        q = vals[ok] if node_ids.dtype == object else vals[ok].astype(node_ids.dtype)
        # a set's mapping is sorted; a snapshot's (common/snapshot.py) is sorted in two runs: training ids, new ids
        order = None if _is_sorted(node_ids) else np.argsort(node_ids, kind="stable")
        keys = node_ids if order is None else node_ids[order]
        pos_c = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
        found[ok] = keys[pos_c] == q
        idx[ok] = pos_c if order is None else order[pos_c]
    return idx, found


def index_within(node_ids: np.ndarray, members: np.ndarray, values) -> tuple[np.ndarray, np.ndarray]:
    """node_index among the nodes `members` (sorted indices, one node kind) only: where two kinds share an id (a
    user-item file's user 1 and item 1), the one of this kind."""
    idx, found = node_index(node_ids[members], values)
    return np.asarray(members, dtype=np.int64)[idx] if len(members) else idx, found & (len(members) > 0)


def _is_sorted(a: np.ndarray) -> bool:
    return bool(len(a) < 2 or (a[1:] >= a[:-1]).all())


def _like(node_ids: np.ndarray, values) -> np.ndarray | None:
    arr = pa.array(values) if not isinstance(values, (pa.Array, pa.ChunkedArray)) else values
    if node_ids.dtype == object:  # names: compare as text (an integer column's ids as their decimal text)
        return np.asarray(arr.cast(pa.string()).to_numpy(zero_copy_only=False), dtype=object)
    target = pa.int64() if node_ids.dtype == np.int64 else pa.uint64()
    padded = None
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        arr = pc.utf8_trim_whitespace(arr)
        padded = leading_zeros(pc.if_else(arr.is_null(), "", arr))  # 007 names no integer node, as in the loader
    try:
        if padded is not None and padded.any():
            raise pa.ArrowInvalid("leading zeros")
        return arr.cast(target).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        # not all convertible: look them up one by one (a handful of pairs, not the graph)
        out = []
        for i, v in enumerate(arr.to_pylist()):
            if padded is not None and padded[i]:
                out.append(None)
                continue
            try:
                iv = int(v)
                out.append(iv if (0 <= iv < 2**64 if target == pa.uint64() else -(2**63) <= iv < 2**63) else None)
            except (TypeError, ValueError):
                out.append(None)
        return np.asarray(out, dtype=object) if any(v is None for v in out) else np.asarray(out, node_ids.dtype)
