"""A user's edge list and node list as an outside tester writes them: ids at the edges of 64 bits, floats,
Excel's byte-order mark, a node list without a header, ids from 0 with gaps, an edge in two splits of the
split column, a graph too small for the default split. Expected values are written out by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.datasets import DatasetError, DatasetSpec, load_dataset
from common.datasets.ids import _map_numbers
from common.datasets.tables import read_columns

ROOT = Path(__file__).resolve().parents[1]


def ring(n: int, ids=None) -> list[tuple]:
    ids = list(range(n)) if ids is None else ids
    return [(ids[i], ids[(i + 1) % n]) for i in range(n)]


def write_csv(path: Path, rows, header: str | None = "src,dst", bom: bool = False) -> Path:
    text = "\n".join(",".join(map(str, r)) for r in rows) + "\n"
    if header is not None:
        text = header + "\n" + text
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())
    return path


def cli(*argv: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The one error line of a refused command (its log lines aside): no traceback, exit status not 0."""
    errors = [line for line in proc.stderr.splitlines() if " error: " in line or line.startswith("error: ")]
    assert proc.returncode != 0 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return errors[0]


# ---------------------------------------------------------------------------- ids
def test_ids_with_leading_zeros_are_text_as_written(tmp_path, caplog):
    """Codes 000..149 come back with their zeros, and 001 is not 1: the column is read as text, and the log
    says which id made it so."""
    codes = [f"{i:03d}" for i in range(150)]
    ds = load_dataset(DatasetSpec(str(write_csv(tmp_path / "codes.csv", ring(150, codes)))))
    assert ds.node_ids.dtype == object and list(ds.node_ids[:3]) == ["000", "001", "002"]
    assert (
        "codes.csv: node ids read as text (sorted as text, written back as read): column 'src' holds '000' in "
        "data row 1, a leading zero an integer would drop" in caplog.text
    )
    both = load_dataset(DatasetSpec(str(write_csv(tmp_path / "both.csv", ring(150) + [("001", 7), ("1", 9)]))))
    assert {"001", "1"} <= set(both.node_ids) and both.num_nodes == 151


def test_one_odd_id_says_why_every_id_is_text(tmp_path, caplog):
    edges = write_csv(tmp_path / "big.csv", ring(150) + [(2**64, 3)])
    ds = load_dataset(DatasetSpec(str(edges)))
    assert ds.node_ids.dtype == object and str(2**64) in set(ds.node_ids)
    assert (
        f"big.csv: node ids read as text (sorted as text, written back as read): column 'src' holds {2**64} in "
        "data row 151, beyond 64-bit integers; so the integer ids of column(s) dst are text too" in caplog.text
    )
    caplog.clear()
    (tmp_path / "nodes.csv").write_text("node\n0\nabc\n")
    load_dataset(DatasetSpec(str(write_csv(tmp_path / "ints.csv", ring(150))), nodes=str(tmp_path / "nodes.csv")))
    assert (
        "ints.csv: node ids read as text (sorted as text, written back as read): nodes.csv: column 'node' holds "
        "'abc' in data row 2, not an integer; so the integer ids of column(s) src, dst are text too" in caplog.text
    )


def test_dropped_and_merged_rows_are_logged(tmp_path, caplog):
    """700 rows, 600 edges: the log says what became of the other 100 (self-loops, repeats, reversed pairs)."""
    import logging

    caplog.set_level(logging.INFO)
    rows = ring(600) + [(i, i) for i in range(40)] + ring(600)[:30] + [(b, a) for a, b in ring(600)[100:130]]
    load_dataset(DatasetSpec(str(write_csv(tmp_path / "e.csv", rows))))
    assert (
        "e.csv: the graph is undirected: (u, v) and (v, u) are one pair and repeated pairs count once (700 rows "
        "-> 600 distinct pairs; 40 self-loop row(s) dropped, 60 row(s) repeating a pair)" in caplog.text
    )


def test_uint64_ids_in_a_narrow_range_near_the_top(tmp_path):
    """2^64 - 1 - i: the direct-table path, whose offset once overflowed a C long."""
    top = 2**64 - 1
    ds = load_dataset(DatasetSpec(str(write_csv(tmp_path / "u64.csv", ring(120, [top - i for i in range(120)])))))
    assert ds.num_nodes == 120 and ds.node_ids.dtype == np.uint64
    assert int(ds.node_ids[0]) == top - 119 and int(ds.node_ids[-1]) == top
    # node i is the i-th smallest id: the edge (top, top - 1) is (119, 118)
    assert ds.graph.has_edge(np.array([119]), np.array([118])).all()


def test_heuristics_cli_loads_uint64_ids(tmp_path):
    top = 2**64 - 1
    edges = write_csv(tmp_path / "u64.csv", ring(200, [top - 3 * i for i in range(200)]) + [(top, top - 30)])
    proc = cli("-m", "pipelines.heuristics", "--dataset", str(edges), "--out", str(tmp_path / "h.json"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "OverflowError" not in proc.stderr


def test_zero_based_ids_with_gaps_are_mapped(tmp_path):
    """Ids 0, 3, 7, 300: they start at 0 but are not 0..N-1, so they are mapped (0, 1, 2, 3), not kept."""
    out, node_ids, how = _map_numbers({"src": np.array([0, 7, 3]), "dst": np.array([3, 300, 0])})
    assert node_ids.tolist() == [0, 3, 7, 300] and how == "integers, table"
    assert out["src"].tolist() == [0, 2, 1] and out["dst"].tolist() == [1, 3, 0]
    ds = load_dataset(
        DatasetSpec(str(write_csv(tmp_path / "gaps.csv", ring(151, [2 * i for i in range(150)] + [300]))))
    )
    assert ds.num_nodes == 151 and ds.node_ids.tolist() == [2 * i for i in range(150)] + [300]
    out, node_ids, how = _map_numbers({"src": np.array([0, 1]), "dst": np.array([2, 1])})
    assert how == "already 0..N-1" and out["src"].tolist() == [0, 1] and node_ids.tolist() == [0, 1, 2]


def test_float_ids_beyond_2_53_are_refused(tmp_path):
    """1e20 and 2^63 as float64 were both cast to the int64 minimum: two nodes merged without a word."""
    src = np.arange(120, dtype=np.float64)
    dst = np.r_[np.arange(1, 118, dtype=np.float64), 1e20, 2.0**63, 0.0]
    pq.write_table(pa.table({"src": src, "dst": dst}), tmp_path / "f.parquet")
    with pytest.raises(DatasetError, match=r"f.parquet: column 'dst' holds node id 1e\+20 as a float, beyond 2\^53"):
        load_dataset(DatasetSpec(str(tmp_path / "f.parquet")))
    pq.write_table(pa.table({"src": src, "dst": np.r_[src[1:], 0.0]}), tmp_path / "ok.parquet")
    assert load_dataset(DatasetSpec(str(tmp_path / "ok.parquet"))).num_nodes == 120  # integral floats below 2^53 load


def test_csv_with_a_byte_order_mark(tmp_path):
    """Excel writes UTF-8 CSV with a BOM; the header is src,dst all the same."""
    ds = load_dataset(DatasetSpec(str(write_csv(tmp_path / "excel.csv", ring(60), bom=True))))
    assert ds.num_nodes == 60 and ds.node_ids is not None and ds.node_ids.tolist() == list(range(60))


# ---------------------------------------------------------------------------- node lists
@pytest.mark.parametrize(
    "name, text, ids",
    [
        ("n.csv", "500\n501\n5\n", ["500", "501", "5"]),  # no header: every line an id
        ("n.csv", "node\n500\n501\n5\n", ["500", "501", "5"]),  # a header named node
        ("n.tsv", "id\n7\n", ["7"]),  # ... or id
        ("n.csv", "\ufeffnode\n5\n", ["5"]),  # with a BOM
    ],
)
def test_one_column_node_list_header_rule(tmp_path, name, text, ids):
    (tmp_path / name).write_text(text)
    cols = read_columns(tmp_path / name, ("node", "id"), any_of=True, hint="node").cols
    assert cols["node"].to_pylist() == ids


def test_headerless_node_list_keeps_its_first_node(tmp_path):
    edges = write_csv(tmp_path / "e.csv", ring(40, list(range(500, 540))))
    (tmp_path / "nodes.csv").write_text("7\n8\n9\n")  # three isolated nodes, the first line among them
    ds = load_dataset(DatasetSpec(str(edges), nodes=str(tmp_path / "nodes.csv")))
    assert ds.num_nodes == 43 and ds.node_ids.tolist() == [7, 8, 9] + list(range(500, 540))


# ---------------------------------------------------------------------------- splits
def test_an_edge_in_train_and_test_is_refused(tmp_path):
    rows = [(i, (i + 1) % 30, "train") for i in range(30)] + [(0, 5, "valid"), (0, 6, "test"), (1, 0, "test")]
    path = tmp_path / "leak.csv"
    path.write_text("src,dst,split\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")
    with pytest.raises(
        DatasetError,
        match=r"leak.csv: 1 edge\(s\) are marked both train and test in the split "
        r"column \(first: 0,1\).*keep each edge in one split",
    ):
        load_dataset(DatasetSpec(str(path)))
    proc = cli("-m", "preprocess", "--dataset", str(path), "--out", str(tmp_path / "shards"))
    assert "both train and test" in error_line(proc)
    assert not (tmp_path / "shards").exists() or not list((tmp_path / "shards").rglob("manifest.json"))


def test_valid_and_test_sharing_an_edge_is_refused(tmp_path):
    rows = [(i, (i + 1) % 30, "train") for i in range(30)] + [(0, 5, "valid"), (5, 0, "test"), (0, 7, "test")]
    path = tmp_path / "twice.csv"
    path.write_text("src,dst,split\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")
    with pytest.raises(DatasetError, match=r"marked both valid and test .*first: 0,5"):
        load_dataset(DatasetSpec(str(path)))


def test_a_graph_too_small_for_a_validation_edge_names_split(tmp_path):
    """19 edges at 5 % valid: int(0.95) = 0 validation edges, which once failed later as 'no shards for valid'."""
    path = write_csv(tmp_path / "e_19.csv", [(i, i + 1) for i in range(19)])
    with pytest.raises(
        DatasetError,
        match=r"19 edges leave no valid edges at 5% valid / 10% test; pass --split 70,15,15, or add edges$",
    ):
        load_dataset(DatasetSpec(str(path)))
    ds = load_dataset(DatasetSpec(str(path), split=(70.0, 15.0, 15.0)))
    assert (len(ds.splits["train"].pos), len(ds.splits["valid"].pos), len(ds.splits["test"].pos)) == (15, 2, 2)
    proc = cli("-m", "preprocess", "--dataset", str(path), "--out", str(tmp_path / "shards"))
    assert "--split" in error_line(proc)
