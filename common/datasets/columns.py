"""An edge list's columns beyond src and dst: which are read, which are ignored (each said in a log line), and
the `time` and `weight` columns parsed into numbers, every bad cell refused in one line naming its row.

Known columns: `split` (train / valid / test), `time` (integers, floats or ISO-8601 timestamps: the default
split becomes temporal, common/datasets/temporal.py) and `weight` (finite numbers > 0, summed per pair: the
weighted heuristics read them, the model reads the unweighted graph). Any other column is ignored with one
warning naming it; `--ignore-columns a,b` ignores known ones too (an info line each), e.g. a weight column
that is not a weight. Rows are "data rows", counted from 1 after the header, as in every other message.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.datasets.base import DatasetError
from common.datasets.tables import EDGE_ROWS, PARQUET_SUFFIXES, TEXT_SUFFIXES, parquet_header, suffix_of, text_header

log = logging.getLogger("common.datasets.edgelist")

ENDPOINTS = ("src", "dst")
OPTIONAL = ("split", "time", "weight")
TIME_TYPES = ("integer", "float", "timestamp")


def header_names(path: Path, hint: str = "src,dst[,split]", rows: str = EDGE_ROWS) -> list[str]:
    """The file's column names, stripped and lower-cased (what read_columns matches against); `hint` and `rows`:
    the header and what a row holds, for an empty file's message."""
    suf = suffix_of(path.name)
    if suf is None or not path.is_file():  # read_columns names the problem
        return []
    names = parquet_header(path) if suf in PARQUET_SUFFIXES else text_header(path, TEXT_SUFFIXES[suf], hint, rows)
    return [h.strip().lower() for h in names]


def edge_columns(path: Path, ignore: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The optional columns (split, time, weight) to read from edge list `path`; every other column, and every
    one named in `ignore` (--ignore-columns), is logged as ignored. Naming a column the file lacks, or an
    endpoint, is refused (a typo would otherwise ignore nothing and say nothing)."""
    header = header_names(path)
    ignore = tuple(dict.fromkeys(c.strip().lower() for c in ignore if c.strip()))
    if bad := [c for c in ignore if c in ENDPOINTS]:
        raise DatasetError(
            f"--ignore-columns {','.join(ignore)}: {bad[0]} is an endpoint column and cannot be "
            "ignored; name only columns besides src and dst"
        )
    if header and (missing := [c for c in ignore if c not in header]):
        raise DatasetError(
            f"--ignore-columns {','.join(ignore)}: {path} has no column {missing[0]!r} "
            f"(columns: {', '.join(header)}); name columns the file has"
        )
    for name in ignore:
        log.info("%s: column %r ignored (--ignore-columns)", path.name, name)
    unknown = [c for c in header if c not in ENDPOINTS + OPTIONAL and c not in ignore]
    if unknown:
        log.warning(
            "%s: column(s) %s ignored: an edge list reads src, dst and optionally %s (--ignore-columns "
            "says so without this warning)",
            path.name,
            ", ".join(map(repr, unknown)),
            ", ".join(OPTIONAL),
        )
    return tuple(c for c in OPTIONAL if c in header and c not in ignore)


# ---------------------------------------------------------------------------------- cells -> numbers
def _refuse_nulls(path: Path, name: str, col: pa.ChunkedArray, fix: str) -> None:
    if col.null_count:
        row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise DatasetError(f"{path}: column {name!r} is empty in data row {row + 1}; {fix}")


def _casts(arr: pa.Array, target: pa.DataType) -> bool:
    try:
        pc.cast(arr, target)
        return True
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False


def first_failure(col: pa.ChunkedArray, target: pa.DataType) -> int:
    """The first row of `col` that does not cast to `target` (there is one): the failing chunk is bisected,
    a few casts of slices, never a Python loop over the rows."""
    offset = 0
    for chunk in col.chunks:
        if not _casts(chunk, target):
            lo, hi = 0, len(chunk)  # invariant: chunk[lo:hi] holds a failure
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if not _casts(chunk.slice(lo, mid - lo), target) else (mid, hi)
            return offset + lo
        offset += len(chunk)
    raise ValueError("first_failure: every row casts")


def _text(path: Path, name: str, col: pa.ChunkedArray, fix: str) -> pa.ChunkedArray:
    """A text column trimmed; an empty cell (a text file's missing value) is refused with its row."""
    text = pc.utf8_trim_whitespace(col.cast(pa.string()))
    empty = pc.equal(pc.utf8_length(text), 0).to_numpy(zero_copy_only=False)
    if empty.any():
        raise DatasetError(f"{path}: column {name!r} is empty in data row {int(np.flatnonzero(empty)[0]) + 1}; {fix}")
    return text


@dataclass
class TimeColumn:
    """Times as numbers that order like the cells: int64 (integers; timestamps as ns since the epoch, UTC for
    zoned ones) or float64; `kind` is one of TIME_TYPES."""

    values: np.ndarray
    kind: str

    def show(self, value) -> str:
        """A time as the user wrote it: the number, or the ISO-8601 timestamp."""
        if self.kind == "timestamp":
            return str(np.datetime64(int(value), "ns")).removesuffix(".000000000")
        return f"{value:g}" if self.kind == "float" else str(int(value))


def parse_time(path: Path, col: pa.ChunkedArray, name: str = "time") -> TimeColumn:
    """A time column: every cell an integer, every cell a number, or every cell an ISO-8601 timestamp (all with
    a zone offset or all without). Empty, unparsable, NaN and infinite cells are refused naming the row."""
    fix = f"fix the row, or drop the column with --ignore-columns {name} (the split is then random)"
    _refuse_nulls(path, name, col, fix)
    t = col.type
    if pa.types.is_dictionary(t):
        col, t = col.cast(t.value_type), t.value_type
    if pa.types.is_integer(t):
        return TimeColumn(col.cast(pa.int64()).to_numpy(), "integer")
    if pa.types.is_floating(t):
        return _finite_times(path, name, col.cast(pa.float64()).to_numpy(), fix)
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return TimeColumn(col.cast(pa.timestamp("ns")).cast(pa.int64()).to_numpy(), "timestamp")
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise DatasetError(
            f"{path}: column {name!r} has type {t}; times are integers, floats or ISO-8601 timestamps; {fix}"
        )
    text = _text(path, name, col, fix)
    for target, kind in (
        (pa.int64(), "integer"),
        (pa.float64(), "float"),
        (pa.timestamp("ns"), "timestamp"),
        (pa.timestamp("ns", tz="UTC"), "timestamp"),
    ):
        try:
            out = text.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
        if kind == "float":
            return _finite_times(path, name, out.to_numpy(), fix)
        return TimeColumn(out.cast(pa.int64()).to_numpy() if kind == "timestamp" else out.to_numpy(), kind)
    first = text.chunk(0)[0].as_py() if text.num_chunks and len(text.chunk(0)) else ""
    target = (
        pa.float64()
        if _casts(pa.array([first]), pa.float64())
        else pa.timestamp("ns")
        if _casts(pa.array([first]), pa.timestamp("ns"))
        else pa.timestamp("ns", tz="UTC")
    )
    if not _casts(pa.array([first]), target):
        raise DatasetError(
            f"{path}: column {name!r} holds {first!r} in data row 1, not an integer, a float or an "
            f"ISO-8601 timestamp (e.g. 2004-04-15T10:00:00); {fix}"
        )
    row = first_failure(text, target)
    cell = pc.take(text, [row])[0].as_py()
    what = (
        "a number"
        if pa.types.is_floating(target)
        else "an ISO-8601 timestamp"
        + (" with a zone offset" if getattr(target, "tz", None) else " without a zone offset")
    )
    raise DatasetError(
        f"{path}: column {name!r} holds {cell!r} in data row {row + 1}, not {what} like data row 1 "
        f"({first!r}); one column holds one kind of time; {fix}"
    )


def _finite_times(path: Path, name: str, values: np.ndarray, fix: str) -> TimeColumn:
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DatasetError(
            f"{path}: column {name!r} holds {values[row]} in data row {row + 1}; times must be finite; {fix}"
        )
    return TimeColumn(values, "float")


def parse_weight(path: Path, col: pa.ChunkedArray, name: str = "weight") -> np.ndarray:
    """A weight column as float64: every cell a finite number > 0 (a weight of 0 or below is no interaction,
    so such a row is refused rather than kept as an edge)."""
    fix = f"fix the row, or drop the column with --ignore-columns {name}"
    _refuse_nulls(path, name, col, fix)
    t = col.type
    if pa.types.is_dictionary(t):
        col, t = col.cast(t.value_type), t.value_type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        values = col.cast(pa.float64()).to_numpy()
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        text = _text(path, name, col, fix)
        try:
            values = text.cast(pa.float64()).to_numpy()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            row = first_failure(text, pa.float64())
            raise DatasetError(
                f"{path}: column {name!r} holds {pc.take(text, [row])[0].as_py()!r} in data row "
                f"{row + 1}, not a number; {fix}"
            ) from None
    else:
        raise DatasetError(f"{path}: column {name!r} has type {t}; weights are numbers; {fix}")
    bad = ~(np.isfinite(values) & (values > 0))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DatasetError(
            f"{path}: column {name!r} holds {values[row]:g} in data row {row + 1}; weights must be "
            f"finite and > 0; {fix}"
        )
    return values
