"""Node features of a user's graph (`--node-features FILE`) -> an (N, F) float32 table in node-index order.

Files:
- `.csv`, `.tsv` (gzipped too), `.parquet`: an id column `node` or `id` holding the edge list's own ids (looked up
  through the graph's id mapping, common/datasets/ids.py), plus either numeric columns (one feature each, in file
  order) or one list column (Parquet lists, or text cells of numbers separated by spaces, commas or semicolons,
  optionally in brackets: "[0.5, 1, 2]");
- `.npy`: an (N, F) array whose row i is node i; only for a graph whose ids are exactly 0..N-1.

Refused, each in one line naming the file and the row: an empty cell, a cell that is not a number, NaN or an
infinite value (or one beyond float32), a value beyond +-FEATURE_BOUND, rows of unequal length, an id given twice,
an id that is not a node of the graph (declare such nodes with --nodes, which makes them isolated nodes of the
graph), and a node without a row, unless `fill` ("zero" or "mean", --fill-features) fills it, with a log line
saying how many were filled.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.datasets.base import FILL_CHOICES, DatasetError
from common.datasets.columns import first_failure, header_names
from common.datasets.ids import node_index
from common.datasets.tables import FEATURE_ROWS, NODE_COLUMNS, PARQUET_SUFFIXES, TEXT_SUFFIXES, suffix_of
from common.memory import check_allocation

log = logging.getLogger(__name__)

FEATURE_SUFFIXES = tuple(TEXT_SUFFIXES) + PARQUET_SUFFIXES + (".npy",)
_LIST_TEXT = re.compile(r"^\s*\[|\S[\s,;]+\S")  # a bracket, or two numbers with a separator between them
NO_ROW_FIX = "add the rows, or pass --fill-features zero|mean to fill them (the log says how many)"
# The model reads features as they are (Linear + GELU, no scaling): a 1e30 overflows float32 in the first layers and
# training ends in NaN; 1e18 still trained. 1e12 holds any count, amount or ms timestamp with 6 orders to spare.
FEATURE_BOUND = 1e12
# Beyond this a column swamps the others: on a tiny run, one column scaled to 1e3 took test AUC from 62.6 to 45.4
SCALE_WARNING = 1e3
SCALE_FIX = "standardise the column, or take log1p of counts"


def load_node_features(path, node_ids: np.ndarray | None, num_nodes: int, fill: str | None = None) -> np.ndarray:
    """The feature table of `num_nodes` nodes named by `node_ids` (the user's id of every node; None: the ids
    are 0..N-1 already). See the module docstring for what is read and what is refused."""
    path = Path(path)
    if fill is not None and fill not in FILL_CHOICES:
        raise DatasetError(f"--fill-features {fill}: choose one of {', '.join(FILL_CHOICES)}")
    lower = path.name.lower()
    if not any(lower.endswith(s) for s in FEATURE_SUFFIXES):
        raise DatasetError(f"--node-features {path}: unknown extension; use {', '.join(FEATURE_SUFFIXES)}")
    if not path.is_file():
        raise DatasetError(f"--node-features {path}: file not found")
    if lower.endswith(".npy"):
        rows, index = _read_npy(path, node_ids, num_nodes)
    else:
        ids, rows = _read_table(path)
        index = _node_rows(path, node_ids, num_nodes, ids)
    return _assemble(path, rows, index, num_nodes, fill, node_ids)


# ---------------------------------------------------------------------------------- .npy
def _read_npy(path: Path, node_ids: np.ndarray | None, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    if node_ids is not None and not (
        node_ids.dtype != object and len(node_ids) == num_nodes and np.array_equal(node_ids, np.arange(num_nodes))
    ):
        raise DatasetError(
            f"--node-features {path}: a .npy table's row i is node i, which needs the graph's ids to "
            f"be exactly 0..{num_nodes - 1}; write a .csv or .parquet with a column node instead"
        )
    try:
        x = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as err:
        raise DatasetError(f"--node-features {path}: not a readable .npy array ({err})") from None
    if x.ndim != 2 or not (np.issubdtype(x.dtype, np.number) or x.dtype == bool) or np.iscomplexobj(x):
        raise DatasetError(
            f"--node-features {path}: expected a 2-D numeric array (one row per node), got shape {x.shape} of {x.dtype}"
        )
    if x.shape[0] > num_nodes:
        raise DatasetError(
            f"--node-features {path}: {x.shape[0]} rows for a graph of {num_nodes} nodes: rows "
            f"{num_nodes} to {x.shape[0] - 1} are not nodes of the graph; declare them with --nodes "
            "(isolated nodes), or drop the rows"
        )
    rows = _float32(path, np.asarray(x, dtype=np.float64), lambda r: f"row {r} (node {r})")
    return rows, np.arange(len(rows), dtype=np.int64)


# ---------------------------------------------------------------------------------- tables
def _read_table(path: Path) -> tuple[pa.ChunkedArray, np.ndarray]:
    """(the id column, the (R, F) feature rows) of a .csv/.tsv/.parquet feature file."""
    header = header_names(path, hint="node,f1,f2,...", rows=FEATURE_ROWS)
    id_col = next((c for c in NODE_COLUMNS if c in header), None)
    if id_col is None:
        raise DatasetError(
            f"--node-features {path}: no column named {' or '.join(NODE_COLUMNS)} (found: "
            f"{', '.join(header[:8]) or 'none'}{', ...' if len(header) > 8 else ''}); name the column "
            "of node ids 'node'"
        )
    features = [c for c in header if c != id_col]
    if not features:
        raise DatasetError(
            f"--node-features {path}: no feature column besides {id_col}; add numeric columns or one list column"
        )
    check_allocation(8.0 * path.stat().st_size, f"--node-features {path}", "use a smaller feature file")
    table = _read_all(path, header)
    names = [n.strip().lower() for n in table.column_names]
    ids = table.column(names.index(id_col))
    if ids.null_count:
        row = int(np.flatnonzero(ids.is_null().to_numpy(zero_copy_only=False))[0])
        raise DatasetError(
            f"--node-features {path}: column {id_col!r} is empty in data row {row + 1}; fill it or drop the row"
        )
    cols = [table.column(i) for i, n in enumerate(names) if n != id_col]
    is_list = [
        pa.types.is_list(c.type)
        or pa.types.is_large_list(c.type)
        or pa.types.is_fixed_size_list(c.type)
        or _looks_like_list(c)
        for c in cols
    ]
    if len(cols) == 1 and is_list[0]:
        return ids, _list_rows(path, features[0], cols[0])
    if any(is_list):
        bad = features[is_list.index(True)]
        raise DatasetError(
            f"--node-features {path}: column {bad!r} holds lists beside other feature columns; use "
            "either numeric columns or one list column"
        )
    return ids, np.stack([_numbers(path, name, col) for name, col in zip(features, cols)], axis=1)


def _read_all(path: Path, header: list[str]) -> pa.Table:
    """Every column; text cells as strings (numbers are parsed here, so a bad cell names its row)."""
    try:
        if path.name.lower().endswith(PARQUET_SUFFIXES):
            import pyarrow.parquet as pq

            return pq.read_table(path)
        import pyarrow.csv as pacsv

        names = [f"c{i}" for i in range(len(header))]  # the header's names, by position: every cell read as text
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(skip_rows=1, column_names=names),
            parse_options=pacsv.ParseOptions(delimiter=TEXT_SUFFIXES[suffix_of(path.name)]),
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(names, pa.string()), strings_can_be_null=False
            ),
        )
        return table.rename_columns(header)
    except (pa.ArrowException, OSError, EOFError, UnicodeDecodeError) as err:
        raise DatasetError(f"--node-features {path}: could not read ({' '.join(str(err).split())[:200]})") from None


def _looks_like_list(col: pa.ChunkedArray) -> bool:
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)) or not len(col):
        return False
    first = col.chunk(0)[0].as_py() if len(col.chunk(0)) else pc.drop_null(col)[0].as_py()
    return bool(first and _LIST_TEXT.search(first))


def _numbers(path: Path, name: str, col: pa.ChunkedArray, width: int = 1) -> np.ndarray:
    """One numeric column as float64; an empty or non-numeric cell is refused with its row (`width`: values per
    row, for a list column's flattened values)."""
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = pc.utf8_trim_whitespace(col)
        empty = pc.equal(pc.utf8_length(col), 0).to_numpy(zero_copy_only=False)
        if empty.any():
            raise DatasetError(
                f"--node-features {path}: column {name!r} is empty in data row "
                f"{int(np.flatnonzero(empty)[0]) // width + 1}; fill the cell"
            )
        try:
            return col.cast(pa.float64()).to_numpy()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            at = first_failure(col, pa.float64())
            raise DatasetError(
                f"--node-features {path}: column {name!r} holds {pc.take(col, [at])[0].as_py()!r} in "
                f"data row {at // width + 1}, not a number; features are numbers"
            ) from None
    if col.null_count:
        at = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise DatasetError(
            f"--node-features {path}: column {name!r} is empty in data row {at // width + 1}; fill the cell"
        )
    try:
        return col.cast(pa.float64()).to_numpy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise DatasetError(
            f"--node-features {path}: column {name!r} has type {col.type}; features are numbers"
        ) from None


def _list_rows(path: Path, name: str, col: pa.ChunkedArray) -> np.ndarray:
    """One list column -> (R, F): every row the same length, every element a number."""
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        text = pc.replace_substring_regex(pc.utf8_trim_whitespace(col), r"^\[|\]$", "")
        col = pc.split_pattern_regex(pc.utf8_trim_whitespace(text), r"[\s,;]+")
    col = col.cast(pa.list_(col.type.value_type)) if pa.types.is_fixed_size_list(col.type) else col
    if col.null_count:
        row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise DatasetError(f"--node-features {path}: column {name!r} is empty in data row {row + 1}; fill the cell")
    lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
    if len(lengths) and (lengths != lengths[0]).any():
        row = int(np.flatnonzero(lengths != lengths[0])[0])
        raise DatasetError(
            f"--node-features {path}: data row {row + 1} holds {lengths[row]} values in column "
            f"{name!r}, data row 1 holds {lengths[0]}; every row needs the same number of features"
        )
    if not len(lengths) or lengths[0] == 0:
        raise DatasetError(f"--node-features {path}: column {name!r} holds empty lists; give every node its features")
    width = int(lengths[0])
    return _numbers(path, name, pc.list_flatten(col), width).reshape(len(lengths), width)


# ---------------------------------------------------------------------------------- ids -> node rows
def _node_rows(path: Path, node_ids: np.ndarray | None, num_nodes: int, ids: pa.ChunkedArray) -> np.ndarray:
    """The node index of every file row; an id not in the graph or given twice is refused naming its row."""
    if node_ids is None:  # a dataset with ids 0..N-1 of its own
        try:
            idx = pc.utf8_trim_whitespace(ids.cast(pa.string())).cast(pa.int64()).to_numpy()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise DatasetError(
                f"--node-features {path}: this dataset's node ids are 0..{num_nodes - 1}; the id "
                "column must hold those integers"
            ) from None
        found = (idx >= 0) & (idx < num_nodes)
        idx = np.where(found, idx, 0)
    else:
        idx, found = node_index(node_ids, ids)
    if not found.all():
        row = int(np.flatnonzero(~found)[0])
        raise DatasetError(
            f"--node-features {path}: data row {row + 1}: node id {pc.take(ids, [row])[0].as_py()!r} is "
            f"not a node of the graph ({int((~found).sum())} such rows); declare such nodes with "
            "--nodes (isolated nodes), or drop the rows"
        )
    order = np.argsort(idx, kind="stable")
    twice = np.flatnonzero(idx[order][1:] == idx[order][:-1])
    if twice.size:
        a, b = sorted(order[twice[0] : twice[0] + 2])
        raise DatasetError(
            f"--node-features {path}: node id {pc.take(ids, [int(a)])[0].as_py()!r} has two rows (data "
            f"rows {a + 1} and {b + 1}); keep one row per node"
        )
    return idx.astype(np.int64)


def _float32(path: Path, rows: np.ndarray, name_row) -> np.ndarray:
    """float64 rows -> float32, refusing NaN, infinities and values beyond float32 with the first bad row."""
    with np.errstate(over="ignore"):
        out = rows.astype(np.float32)
    bad = ~np.isfinite(out)
    if bad.any():
        r, c = (int(v[0]) for v in np.nonzero(bad))
        value = rows[r, c]
        why = "is not finite" if not np.isfinite(value) else "is beyond float32's range"
        raise DatasetError(
            f"--node-features {path}: {name_row(r)}, feature {c + 1} holds {value} and {why}; features "
            "must be finite numbers"
        )
    # column extremes first: no table-sized temporary unless a value is out of bounds
    if out.size and (out.max() > FEATURE_BOUND or out.min() < -FEATURE_BOUND):
        r, c = (int(v[0]) for v in np.nonzero((out > FEATURE_BOUND) | (out < -FEATURE_BOUND)))
        raise DatasetError(
            f"--node-features {path}: {name_row(r)}, feature {c + 1} holds {float(rows[r, c]):g}, beyond the "
            f"bound of +-{FEATURE_BOUND:g} on a feature value (the model reads values as they are); {SCALE_FIX}"
        )
    return out


def _warn_scale(path: Path, rows: np.ndarray) -> None:
    """One log line when a column's values reach far beyond unit scale: the model trains, but worse."""
    if not rows.size:
        return
    peak = np.maximum(rows.max(axis=0), -rows.min(axis=0))  # max |value| per column, without a copy of the table
    wide = np.flatnonzero(peak > SCALE_WARNING)
    if wide.size:
        log.warning(
            "%s: %d feature column(s) reach beyond +-%g (feature %d: %g); the model reads features as they are, "
            "and such a column swamps the others: %s",
            path.name,
            wide.size,
            SCALE_WARNING,
            int(wide[0]) + 1,
            float(peak[wide[0]]),
            SCALE_FIX,
        )


def _assemble(
    path: Path, rows: np.ndarray, index: np.ndarray, num_nodes: int, fill: str | None, node_ids: np.ndarray | None
) -> np.ndarray:
    if rows.dtype != np.float32:
        rows = _float32(path, rows, lambda r: f"data row {r + 1}")
    _warn_scale(path, rows)
    check_allocation(
        4.0 * num_nodes * rows.shape[1],
        f"--node-features {path}: {num_nodes:,} x {rows.shape[1]:,}",
        "use fewer features",
    )
    x = np.zeros((num_nodes, rows.shape[1]), dtype=np.float32)
    x[index] = rows
    missing = num_nodes - len(index)
    if missing:
        have = np.zeros(num_nodes, dtype=bool)
        have[index] = True
        if fill is None:
            first = int(np.flatnonzero(~have)[0])
            raise DatasetError(
                f"--node-features {path}: {missing} of {num_nodes} nodes have no row (first: node "
                f"{first if node_ids is None else node_ids[first : first + 1].tolist()[0]!r}); {NO_ROW_FIX}"
            )
        if fill == "mean":
            x[~have] = rows.mean(axis=0, dtype=np.float64).astype(np.float32)
        log.info(
            "%s: %s of %s nodes had no feature row: filled with the %s (--fill-features %s)",
            path.name,
            f"{missing:,}",
            f"{num_nodes:,}",
            "column means" if fill == "mean" else "zeros",
            fill,
        )
    log.info("%s: node features %s x %s", path.name, f"{num_nodes:,}", rows.shape[1])
    return x
