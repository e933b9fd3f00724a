"""Node kinds of a typed graph (docs/own-graph.md, node kinds): which entities a relation's heads and tails may be.

Two sources give the same records: `--nodes FILE` with a `type` (or `kind`) column beside its node ids, for a
knowledge-graph folder or an edge list with `--relation COLUMN` (common/datasets/kg.py); and the two id spaces of a
user-item file (common/datasets/user_item.py: users and items). Kinds are numbered in sorted order of their names
(a user-item file's are user, item).

Each relation joins the one (head kind, tail kind) pair its training triples show; `relation_ends` turns that into
`Relations.ends` (relation -> every node of its head kind, every node of its tail kind), which training corruptions,
valid / test corruptions, `recommend --relation` and `serve ?relation=` read. A relation without training triples
has no kinds (any entity). A relation whose training triples join two pairs, or whose valid / test triple joins
another pair than its training triples, is refused in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.datasets.base import SPLITS, DatasetError

KIND_COLUMNS = ("type", "kind")  # the column of a --nodes file that gives each node's kind


@dataclass(frozen=True, eq=False)
class NodeKinds:
    """names: the kinds, in id order; of: (N,) each node's kind id (an index into names); ids: each node's id as
    the user wrote it, for messages (None: the numbers); own_ids: each kind's ids are its own id space (a user-item
    file's user 1 and item 1 are two nodes), else one id is one node whatever its kind."""

    names: tuple[str, ...]
    of: np.ndarray
    ids: np.ndarray | None = None
    own_ids: bool = False

    def nodes(self, kind: int) -> np.ndarray:
        """The nodes (0..N-1) of one kind, ascending."""
        return np.flatnonzero(self.of == kind)

    def pair(self, head: int, tail: int) -> str:
        return f"({self.names[self.of[head]]}, {self.names[self.of[tail]]})"

    def link(self, triple) -> str:
        """A triple's head -> tail as the user named them."""
        name = (lambda v: v) if self.ids is None else (lambda v: self.ids[v])  # noqa: E731
        return f"{name(triple[0])} -> {name(triple[2])}"


def kind_column(path: Path) -> str | None:
    """The kind column (`type` or `kind`) of a node list with more than one column, else None."""
    from common.datasets.columns import header_names
    from common.datasets.tables import NODE_ROWS

    header = header_names(Path(path), hint="node,type", rows=NODE_ROWS)
    return next((c for c in KIND_COLUMNS if c in header), None) if len(header) > 1 else None


def refuse_untyped_kinds(nodes: str | None) -> None:
    """An untyped graph's --nodes file with a kind column: kinds mean something only to a graph with relations."""
    if nodes is not None and (col := kind_column(Path(nodes))) is not None:
        raise DatasetError(
            f"{nodes}: column '{col}' gives node kinds, which only a typed graph reads (each of its relations joins "
            "one kind to one kind): pass --relation COLUMN naming the edge list's relation column (or give a "
            f"head/relation/tail folder), or drop the '{col}' column"
        )


def read_node_list(path) -> tuple[np.ndarray, np.ndarray | None, str | None]:
    """(ids, kinds, kind column) of a --nodes file, ids and kinds as text; kinds None without a kind column."""
    from common.datasets.tables import NODE_COLUMNS, NODE_ROWS, read_columns

    path, col = Path(path), kind_column(Path(path))
    if col is None:
        listed = read_columns(path, NODE_COLUMNS, any_of=True, hint="node", rows=NODE_ROWS)
        return _text(listed.cols[NODE_COLUMNS[0]], path, "node", "fill it or drop the row"), None, None
    from common.datasets.columns import header_names

    node = next((c for c in NODE_COLUMNS if c in header_names(path)), None)
    if node is None:
        raise DatasetError(f"{path}: no column named node or id beside '{col}'; name the column of node ids 'node'")
    cols = read_columns(path, (node, col), hint=f"node,{col}", rows=NODE_ROWS).cols
    ids = _text(cols[node], path, node, "fill it or drop the row")
    kinds = _text(cols[col], path, col, "give every node its kind (e.g. drug, disease)")
    return ids, kinds, col


def _text(col, path: Path, name: str, fix: str) -> np.ndarray:
    """A column as text (numbers as written), an empty cell refused naming its data row."""
    import pyarrow as pa

    text = np.asarray(col.cast(pa.string()).to_pylist(), dtype=object)
    empty = np.flatnonzero(np.equal(text, None) | (text == ""))
    if empty.size:
        raise DatasetError(f"{path}: column '{name}' is empty in data row {empty[0] + 1}; {fix}")
    return text


def kinds_of(entities: np.ndarray, ids: np.ndarray, kinds: np.ndarray, nodes: str, col: str, where: str) -> NodeKinds:
    """Each entity's kind (entities: the graph's sorted text ids) from a node list's ids and kinds; an entity the
    list lacks, or a node listed with two kinds, is refused."""
    names = tuple(np.unique(kinds.astype(str)).tolist())
    ids, code = ids.astype(str), np.searchsorted(np.asarray(names), kinds.astype(str))
    order = np.lexsort((code, ids))
    ids, code = ids[order], code[order]
    twice = np.flatnonzero((ids[1:] == ids[:-1]) & (code[1:] != code[:-1]))
    if twice.size:
        i = twice[0]
        raise DatasetError(
            f"{nodes}: node {str(ids[i])!r} is listed with two kinds, {names[code[i]]} and {names[code[i + 1]]}; "
            f"give each node one {col}"
        )
    text = entities.astype(str)
    at = np.minimum(np.searchsorted(ids, text), max(len(ids) - 1, 0))
    missing = np.flatnonzero(ids[at] != text) if len(ids) else np.arange(len(text))
    if missing.size:
        raise DatasetError(
            f"{nodes}: node {str(text[missing[0]])!r} of {where} is not listed ({missing.size} such); with a '{col}' "
            f"column every node needs a row: add it with its {col}"
        )
    return NodeKinds(names, code[at].astype(np.int32), entities)


def relation_ends(kinds: NodeKinds, triples: dict, names: tuple, where: dict, fix: str = "") -> dict[int, tuple]:
    """Relations.ends from node kinds: relation r -> (every node of its head kind, every node of its tail kind), the
    kinds its training triples (triples["train"], (T, 3) [head, relation, tail]) join; a relation without training
    triples -> every node, both ends. `where[split]`: the file each split's triples came from and `fix` where the
    kinds are corrected (errors name them)."""
    train, n, ends, pair_of = triples["train"], len(kinds.of), {}, {}
    for r, name in enumerate(names):
        t = train[train[:, 1] == r]
        if not len(t):
            ends[r] = (np.arange(n, dtype=np.int64), np.arange(n, dtype=np.int64))
            continue
        code = kinds.of[t[:, 0]].astype(np.int64) * len(kinds.names) + kinds.of[t[:, 2]]
        first = np.unique(code, return_index=True)[1]
        if len(first) > 1:
            a, b = t[np.sort(first)[:2]]
            raise DatasetError(
                f"{where['train']}: relation {name!r} joins two pairs of node kinds in its training triples: "
                f"{kinds.pair(a[0], a[2])} as in {kinds.link(a)}, and {kinds.pair(b[0], b[2])} as in "
                f"{kinds.link(b)}; a relation joins one head kind to one tail kind: {fix}or split the relation in two"
            )
        pair_of[r] = (int(kinds.of[t[0, 0]]), int(kinds.of[t[0, 2]]))
        ends[r] = (kinds.nodes(pair_of[r][0]), kinds.nodes(pair_of[r][1]))
    for split in SPLITS[1:]:
        for r, (h, k) in pair_of.items():  # else the true end of such a triple is never a candidate
            mine = triples[split][triples[split][:, 1] == r]
            bad = mine[(kinds.of[mine[:, 0]] != h) | (kinds.of[mine[:, 2]] != k)]
            if len(bad):
                raise DatasetError(
                    f"{where[split]}: the {split} triple {kinds.link(bad[0])} of relation {names[r]!r} joins "
                    f"{kinds.pair(bad[0, 0], bad[0, 2])}, its training triples ({kinds.names[h]}, {kinds.names[k]}); "
                    f"{fix}or correct the triple"
                )
    return ends
