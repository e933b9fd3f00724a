"""A recommendation job's output in parts (pipelines/recommend/job.py): each finished block of query nodes is one
Parquet file in a folder beside --out, so a killed job resumes at its first missing block; the folder is keyed by
the job's fingerprint (a folder of another job is refused), and the parts become --out in one atomic write at the end.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common.atomic import write_json_atomic, write_parquet_atomic
from pipelines.recommend.engine import COLUMNS, RecommendError

JOB_FILE = "job.json"


def parts_dir(out: Path) -> Path:
    return out.with_name(f".{out.name}.parts")


def open_parts(out: Path, fingerprint: str) -> Path:
    """The part folder of this job; a folder of another job (other flags, checkpoint or graph) is refused."""
    folder = parts_dir(out)
    job = folder / JOB_FILE
    if job.exists():
        have = json.loads(job.read_text()).get("fingerprint")
        if have != fingerprint:
            raise RecommendError(
                f"{folder}: holds the parts of another job (other flags, checkpoint, nodes or graph); "
                "delete it or choose another --out"
            )
        return folder
    write_json_atomic(job, {"fingerprint": fingerprint})
    return folder


def part_path(folder: Path, block_id: int) -> Path:
    return folder / f"part-{block_id:06d}.parquet"


def write_part(table: pa.Table, path: Path) -> None:
    """One finished block (a test's fault hook wraps this to kill a job between parts)."""
    write_parquet_atomic(table, path)


def merge_parts(
    folder: Path, num_blocks: int, out: Path, node_ids: np.ndarray | None = None, metadata: dict | None = None
) -> pa.Table:
    """The part files as one table in node indices (returned), written to `out` in the user's ids, with
    `metadata` (the output's stamp, common.outputs)."""
    tables = [pq.read_table(part_path(folder, b)) for b in range(num_blocks)]
    schema = pa.schema(
        [
            ("node", pa.int64()),
            ("candidate", pa.int64()),
            ("rank", pa.int32()),
            ("score", pa.float64()),
            ("retriever_score", pa.float64()),
        ]
    )
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    out.parent.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(in_user_ids(table.select(list(COLUMNS)), node_ids).replace_schema_metadata(metadata), out)
    shutil.rmtree(folder)
    return table


def in_user_ids(table: pa.Table, node_ids: np.ndarray | None) -> pa.Table:
    """node and candidate as the edge list named them (a set without a mapping keeps 0..N-1)."""
    if node_ids is None:
        return table
    kind = pa.string() if node_ids.dtype == object else None
    for col in ("node", "candidate"):
        user = pa.array(node_ids[table.column(col).to_numpy()], kind)
        table = table.set_column(table.schema.get_field_index(col), col, user)
    return table
