"""Node features of a typed graph (`--node-features` on a knowledge graph or a user-item file) -> one (N, F) table.

Two forms of the flag's value:
- `FILE`: one table keyed by the graph's node ids (common/datasets/node_features.py), for a graph whose ids name
  one node each (a knowledge graph's entities). A user-item file's users and items are two id spaces (user 1 and
  item 1 are different nodes), so there it is refused in one line naming the second form.
- `KIND=FILE[,KIND=FILE...]`: one table per node kind (a user-item file's `user` and `item`, or the kinds of a
  `--nodes` file's type column), each keyed by that kind's own ids. Kinds describe different things (a user's
  age, a film's genres), so each table gets its own columns: the result is block-diagonal, a node's row holding
  its kind's features in that kind's columns and zeros in the others'. A kind without a table has zeros only.

`--fill-features` fills the rows a kind's table lacks among that kind's nodes; nodes of other kinds are never
"missing" from it. The column span of each kind's table is kept (LinkDataset.feature_kinds, the set's manifest), so
that a node a served edit adds may come with its kind's row alone.
"""

from __future__ import annotations

import logging
import re

import numpy as np

from common.datasets.base import DatasetError

log = logging.getLogger(__name__)

_KIND_FILE = re.compile(r"^\s*([^=,\s]+)\s*=\s*(\S.*?)\s*$")  # kind=path


def kind_files(text: str) -> dict[str, str] | None:
    """{kind: path} of the `KIND=FILE,...` form, or None for a plain `FILE` (no `=` in any comma-separated part).
    A mix of both forms, or a kind named twice, is refused."""
    parts = [p for p in str(text).split(",") if p.strip()]
    matched = [_KIND_FILE.match(p) for p in parts]
    if not any(matched):
        return None
    if not all(matched):
        bad = parts[matched.index(None)].strip()
        raise DatasetError(
            f"--node-features {text}: '{bad}' names no kind; give every table as KIND=FILE (for example "
            "user=users.csv,item=items.csv)"
        )
    files: dict[str, str] = {}
    for m in matched:
        if m.group(1) in files:
            raise DatasetError(f"--node-features {text}: kind '{m.group(1)}' is given twice; give each kind one table")
        files[m.group(1)] = m.group(2)
    return files


def typed_features(
    text: str, node_ids: np.ndarray, kinds, fill: str | None, shared_ids: bool
) -> tuple[np.ndarray, dict[str, tuple[int, int]] | None]:
    """(the (N, F) float32 table of `--node-features text` on a typed graph, {kind: its columns [start, stop)} or
    None for one table by node id) (module docstring). node_ids: every node's id as the user wrote it; kinds: its
    common.datasets.kinds.NodeKinds, or None; shared_ids: the kinds share one id space (a user-item file), so a
    single table cannot name a node."""
    from common.datasets.node_features import load_node_features

    files = kind_files(text)
    if files is None:
        if shared_ids:
            names = ",".join(f"{k}=FILE" for k in kinds.names)
            raise DatasetError(
                f"--node-features {text}: a user-item file's {' and '.join(kinds.names)} ids are two id spaces (user 1 "
                f"and item 1 are different nodes), so one table cannot name them; give each kind its table: "
                f"--node-features {names}"
            )
        return load_node_features(text, node_ids, len(node_ids), fill), None
    if kinds is None:
        raise DatasetError(
            f"--node-features {text}: this graph has no node kinds; give one table (--node-features FILE), or name "
            "the kinds with --nodes FILE and a type column"
        )
    unknown = [k for k in files if k not in kinds.names]
    if unknown:
        raise DatasetError(
            f"--node-features {text}: no node kind '{unknown[0]}' in this graph (its kinds: {', '.join(kinds.names)});"
            " name one of those"
        )
    blocks, names = [], []
    for kind, path in files.items():
        nodes = kinds.nodes(kinds.names.index(kind))
        blocks.append((nodes, load_node_features(path, node_ids[nodes], len(nodes), fill)))
        names.append(f"{kind} {blocks[-1][1].shape[1]} ({path})")
    x = np.zeros((len(node_ids), sum(b.shape[1] for _, b in blocks)), np.float32)
    spans, at = {k: (0, 0) for k in kinds.names}, 0  # a kind without a table: no columns of its own
    for kind, (nodes, block) in zip(files, blocks):
        x[nodes, at : at + block.shape[1]] = block
        spans[kind] = (at, at + block.shape[1])
        at += block.shape[1]
    rest = [k for k in kinds.names if k not in files]
    log.info(
        "node features by kind, each in its own columns: %s%s",
        ", ".join(names),
        f"; {', '.join(rest)}: zeros" if rest else "",
    )
    return x, spans


def attach_typed_features(ds, node_features: str | None, fill: str | None, shared_ids: bool = False):
    """`ds` (a typed LinkDataset) with the table of `--node-features node_features` as its node features, on the
    training graph and, where it has one, the test graph; unchanged without the flag."""
    if node_features is None:
        return ds
    return ds.with_features(*typed_features(node_features, ds.node_ids, ds.relations.kinds, fill, shared_ids))
