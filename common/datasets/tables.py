"""A user's table file (an edge list, a node list, a feature or pairs file) -> named columns, read once.

Files: CSV (.csv, .csv.gz), TSV (.tsv, .tsv.gz) and Parquet (.parquet, .pq). Columns are matched case- and
space-insensitively; every cell of a text file is read as a string (trimmed) so that ids keep the form the user
wrote (common/datasets/ids.py decides what they are). Memory is bounded before anything big is allocated: the
row count (Parquet metadata, or a text file's size over the length of its first lines, re-checked while it
streams in) times BYTES_PER_ROW must fit in the memory available to this process.
"""

from __future__ import annotations

import gzip
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from common.datasets.base import DatasetError
from common.memory import check_allocation, rss_gb

log = logging.getLogger(__name__)

TEXT_SUFFIXES = {".csv": ",", ".csv.gz": ",", ".tsv": "\t", ".tsv.gz": "\t"}
PARQUET_SUFFIXES = (".parquet", ".pq")
EDGE_LIST_SUFFIXES = tuple(TEXT_SUFFIXES) + PARQUET_SUFFIXES
# Driver bytes per edge row from reading through the split (measured by bench/big_load.py: the peak
# there is about 75 B/row on 30 M rows; the bound keeps a margin over it).
BYTES_PER_ROW = 100
TEXT_BLOCK = 32 << 20  # bytes per streamed CSV block: the unit of progress and of the running bound
NODE_COLUMNS = ("node", "id")
# what a row of each input holds, as an empty file's message tells the user to write them
EDGE_ROWS = "one edge per row"
NODE_ROWS = "one node id per row"
FEATURE_ROWS = "one row per node: its id, then its feature values"
PAIR_ROWS = "one labelled pair per row"
UTF8_BOM = b"\xef\xbb\xbf"


def suffix_of(name: str) -> str | None:
    """The edge-list suffix `name` ends with (case-insensitive, multi-part like .csv.gz), or None."""
    lower = str(name).lower()
    return next((s for s in sorted(EDGE_LIST_SUFFIXES, key=len, reverse=True) if lower.endswith(s)), None)


def stem_of(path: Path) -> str:
    suf = suffix_of(path.name)
    return path.name[: -len(suf)] if suf else path.stem


@dataclass
class Columns:
    """Named columns of one file, each a pyarrow ChunkedArray; `rows` their length."""

    cols: dict[str, pa.ChunkedArray]
    rows: int


# ---------------------------------------------------------------------------------- reading
def read_columns(
    path: Path,
    wanted: tuple[str, ...],
    optional: tuple[str, ...] = (),
    any_of: bool = False,
    hint: str = "src,dst[,split]",
    rows: str = EDGE_ROWS,
) -> Columns:
    """Read the `wanted` (and present `optional`) columns, matched case- and space-insensitively.
    any_of: the first of `wanted` that exists is enough (a node list's `node` or `id`). A one-column text
    file whose first line is none of them has no header: its first line is an id like the others. `hint`: the
    header and `rows`: what a row holds, as an empty file's message tells the user to write them."""
    suf = suffix_of(path.name)
    if suf is None:
        raise DatasetError(f"{path}: unknown extension; use {', '.join(EDGE_LIST_SUFFIXES)}")
    if not path.is_file():
        raise DatasetError(f"{path}: file not found; pass a {'/'.join(EDGE_LIST_SUFFIXES)} file with columns {hint}")
    header = parquet_header(path) if suf in PARQUET_SUFFIXES else text_header(path, TEXT_SUFFIXES[suf], hint, rows)
    by_name = {h.strip().lower(): h for h in header}
    headerless = any_of and len(header) == 1 and suf not in PARQUET_SUFFIXES and not any(c in by_name for c in wanted)
    if headerless:
        header = by_name = {wanted[0]: wanted[0]}
    if any_of:
        found = next((c for c in wanted if c in by_name), list(header)[0] if len(header) == 1 else None)
        if found is None:
            raise DatasetError(
                f"{path}: no column named {' or '.join(wanted)} (found: {_names(header)}); "
                f"name the column of node ids '{wanted[0]}'"
            )
        pick = {wanted[0]: by_name.get(found, found)}
    else:
        missing = [c for c in wanted if c not in by_name]
        if missing:
            raise DatasetError(
                f"{path}: missing column(s) {', '.join(missing)} (found: {_names(header)}); "
                "name the endpoint columns src and dst"
            )
        pick = {c: by_name[c] for c in wanted + optional if c in by_name}
    t0 = time.perf_counter()
    if suf in PARQUET_SUFFIXES:
        out = _read_parquet(path, pick, rows)
    else:
        out = _read_text(path, TEXT_SUFFIXES[suf], pick, list(header) if headerless else None, rows)
    log.info(
        "%s: read %s rows in %.1f s (driver %.1f GiB)", path.name, f"{out.rows:,}", time.perf_counter() - t0, rss_gb()
    )
    return out


def _names(header: list[str]) -> str:
    text = ", ".join(h.strip() for h in header) or "none"
    return text if len(text) <= 80 else text[:77] + "..."


def _check_rows(path: Path, rows: float, how: str) -> None:
    check_allocation(
        rows * BYTES_PER_ROW,
        f"{path}: {rows:,.0f} rows{how}",
        "split the edge list or run on a machine with more memory",
    )


def text_header(path: Path, delimiter: str, hint: str, rows: str = EDGE_ROWS) -> list[str]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            head = f.read(1 << 20)
    except (OSError, EOFError) as err:  # a bad gzip stream
        raise DatasetError(f"{path}: could not read ({type(err).__name__}: {' '.join(str(err).split())})") from None
    head = head.removeprefix(UTF8_BOM)  # Excel writes one; Arrow's reader skips it too
    if not head.strip():
        raise DatasetError(f"{path}: empty file; write a header '{hint}' and {rows}")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(head) - 4:  # not merely a character cut at the 1 MB boundary
            raise DatasetError(
                f"{path}: not a text edge list (byte {head[err.start]:#04x} at offset {err.start} "
                f"is not UTF-8); write a header '{hint}' and {rows}"
            ) from None
        text = head[: err.start].decode("utf-8")
    lines = text.splitlines()
    if not path.name.lower().endswith(".gz") and len(lines) > 2:
        # Rows of the whole file estimated from the mean length of the lines read: bound before reading.
        per_line = len(head[: head.rfind(b"\n") + 1]) / max(1, len(lines) - 1)
        _check_rows(path, path.stat().st_size / max(per_line, 1.0), " (estimated from its size)")
    return [h.strip().strip('"') for h in lines[0].split(delimiter)]


def _read_text(
    path: Path, delimiter: str, pick: dict[str, str], names: list[str] | None = None, what: str = EDGE_ROWS
) -> Columns:
    """names: the column names of a file without a header line."""
    import pyarrow.csv as pacsv

    try:
        reader = pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(block_size=TEXT_BLOCK, column_names=names),
            parse_options=pacsv.ParseOptions(delimiter=delimiter),
            convert_options=pacsv.ConvertOptions(
                include_columns=list(pick.values()), column_types={c: pa.string() for c in pick.values()}
            ),
        )
        chunks = {k: [] for k in pick}
        rows, last = 0, time.perf_counter()
        for batch in reader:
            rows += batch.num_rows
            _check_rows(path, rows, " read so far")  # a gzip's size is unknown up front: bound as it streams
            for k, c in pick.items():
                chunks[k].append(pc.utf8_trim_whitespace(batch.column(c)))
            if time.perf_counter() - last > 5:
                log.info("%s: %s rows read", path.name, f"{rows:,}")
                last = time.perf_counter()
    except (pa.ArrowException, OSError, EOFError, UnicodeDecodeError) as err:
        raise DatasetError(
            f"{path}: could not read as a {'TSV' if delimiter == chr(9) else 'CSV'} edge list "
            f"({' '.join(str(err).split())[:200]})"
        ) from None
    if rows == 0:
        raise DatasetError(f"{path}: empty file (header only); add {what}")
    return Columns({k: pa.chunked_array(v, pa.string()) for k, v in chunks.items()}, rows)


def parquet_header(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).metadata
    except (pa.ArrowException, OSError) as err:
        raise DatasetError(f"{path}: could not read ({type(err).__name__}: {' '.join(str(err).split())})") from None
    _check_rows(path, meta.num_rows, " (Parquet metadata)")
    return list(meta.schema.to_arrow_schema().names)


def _read_parquet(path: Path, pick: dict[str, str], what: str = EDGE_ROWS) -> Columns:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=list(pick.values()))
    except (pa.ArrowException, OSError) as err:
        raise DatasetError(f"{path}: could not read ({type(err).__name__}: {' '.join(str(err).split())})") from None
    if table.num_rows == 0:
        raise DatasetError(f"{path}: empty file (no rows); add {what}")
    return Columns({k: table.column(c) for k, c in pick.items()}, table.num_rows)
