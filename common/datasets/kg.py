"""Typed graphs: a knowledge graph's triples (head, relation, tail), read into a directed LinkDataset with relations.

Two inputs (docs/own-graph.md#knowledge-graphs-and-relation-types):
- a folder holding `{train,valid,test}.txt[.gz]`, one `head<TAB>relation<TAB>tail` triple a line, no header; its
  split is the files' (WN18RR, FB15k-237 and the like ship theirs);
- an edge list with a relation column (`--relation COLUMN`), src = head, dst = tail, split by its split column
  or at random by --split's shares and --seed.

Rules:
- entity and relation ids are kept as text (leading zeros matter) and mapped to 0..N-1 and 0..R-1 in sorted
  order, so the ids are stable: the same file gives the same ids, and a shard set's manifest stores the
  relation names in id order;
- a triple is a directed link head -> tail of its relation; the sampler walks the undirected union of the
  training triples, the model reads each link's relation and direction (`LinkDataset.relations`, K = 2R);
- an entity of valid / test that no training triple names is a node without training edges (no crash: its
  subgraph is itself);
- valid and test rank each triple against its own filtered corruptions (protocol "kg"): `per_side` heads and
  `per_side` tails (common/datasets/corruptions.py), never a true triple; valid's filter is the train and valid
  triples (what selection may see), test's every triple. -1 pads a row with fewer candidates.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from common.datasets.base import SPLITS, DatasetError, LinkDataset, Relations, Split
from common.datasets.typed_features import attach_typed_features
from common.graph import DiGraph, Graph

log = logging.getLogger("common.datasets.edgelist")

KG = "kg"  # the eval protocol of typed triples
PER_SIDE = 50  # corruptions of each side per valid / test triple (100 per triple): the sampled-negative standard
KG_SUFFIXES = (".txt", ".txt.gz")


def kg_files(folder: Path) -> dict[str, Path] | None:
    """{split: file} when `folder` holds a knowledge graph's train/valid/test triple files, else None."""
    found = {}
    for split in SPLITS:
        hits = [folder / f"{split}{suf}" for suf in KG_SUFFIXES if (folder / f"{split}{suf}").is_file()]
        if hits:
            found[split] = hits[0]
    if "train" not in found:
        return None
    if missing := [s for s in SPLITS if s not in found]:
        raise DatasetError(f"{folder}: a knowledge graph folder needs {', '.join(f'{s}.txt[.gz]' for s in missing)}")
    return found


def read_triples(path: Path) -> np.ndarray:
    """(T, 3) object array of text [head, relation, tail] from a tab-separated file without header."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    try:
        table = pcsv.read_csv(
            path,
            read_options=pcsv.ReadOptions(column_names=["head", "relation", "tail"]),
            parse_options=pcsv.ParseOptions(delimiter="\t", quote_char=False),
            convert_options=pcsv.ConvertOptions(column_types={c: pa.string() for c in ("head", "relation", "tail")}),
        )
    except (pa.ArrowInvalid, OSError) as err:
        first = str(err).splitlines()[0]
        fix = "write one head<TAB>relation<TAB>tail a line"
        raise DatasetError(f"{path}: not a triple file ({first}); {fix}") from None
    cols = [table.column(c).to_numpy(zero_copy_only=False).astype(object) for c in ("head", "relation", "tail")]
    if any(c.size and any(not v for v in c) for c in cols):
        raise DatasetError(f"{path}: a line has an empty field; write one head<TAB>relation<TAB>tail a line")
    return np.stack(cols, axis=1) if cols[0].size else np.zeros((0, 3), dtype=object)


def load_kg_folder(folder: Path, files: dict[str, Path], seed: int = 0, nodes: str | None = None, features=None,
                   fill: str | None = None) -> LinkDataset:  # fmt: skip
    """A knowledge-graph folder with its own split (module docstring); nodes: its --nodes file (node kinds);
    features / fill: its --node-features and --fill-features (common/datasets/typed_features.py)."""
    text = {s: read_triples(files[s]) for s in SPLITS}
    if not len(text["train"]):
        raise DatasetError(f"{files['train']}: no triples; a knowledge graph needs training triples")
    ds = typed_dataset(folder.name, text, seed, str(folder), nodes=nodes, files={s: str(files[s]) for s in SPLITS})
    return attach_typed_features(ds, features, fill)


def typed_dataset(
    name: str,
    text: dict[str, np.ndarray],
    seed: int,
    where: str,
    per_side: int = PER_SIDE,
    nodes: str | None = None,
    files: dict | None = None,
):
    """The LinkDataset of text triples per split: ids mapped in sorted order, directed graphs, relations, and the
    "kg" protocol's filtered corruptions of valid and test. where: the file or folder of the triples, files: each
    split's file where they differ; nodes: a --nodes file, its nodes entities too (isolated ones), its kind column
    the node kinds (common/datasets/kinds.py)."""
    from common.datasets.kinds import kinds_of, read_node_list, relation_ends

    files = files or dict.fromkeys(SPLITS, where)
    every = np.concatenate([text[s] for s in SPLITS])
    entities = np.unique(np.concatenate([every[:, 0], every[:, 2]]).astype(str)).astype(object)
    listed, kinds, col = read_node_list(nodes) if nodes is not None else (None, None, None)
    if listed is not None:  # the listed nodes are entities too, those in no triple as well
        entities = np.unique(np.concatenate([entities.astype(str), listed.astype(str)])).astype(object)
    names = tuple(np.unique(every[:, 1].astype(str)).tolist())
    triples = {}
    for s in SPLITS:
        t = text[s]
        h = np.searchsorted(entities.astype(str), t[:, 0].astype(str))
        r = np.searchsorted(np.asarray(names), t[:, 1].astype(str))
        tl = np.searchsorted(entities.astype(str), t[:, 2].astype(str))
        triples[s] = unique_triples(np.stack([h, r, tl], axis=1).astype(np.int64), len(entities), len(names))
    n = len(entities)
    node_kinds = ends = None
    if kinds is not None:  # every entity needs its kind: one of the triples' the list lacks is refused
        node_kinds = kinds_of(entities, listed, kinds, nodes, col, f"the triples of {where}")
        ends = relation_ends(node_kinds, triples, names, files, f"correct those nodes' {col} in {nodes}, ")
    ds = triples_dataset(name, triples, n, names, seed, per_side, ends=ends, kinds=node_kinds)
    ds.node_ids = entities
    unseen = np.unique(np.concatenate([triples[s][:, [0, 2]].ravel() for s in ("valid", "test")]))
    unseen = unseen[ds.graph.degree[unseen] == 0]
    log.info(
        "%s: knowledge graph: %s entities, %s relations, %s / %s / %s triples (train / valid / test); %s entities of "
        "valid / test are in no training triple%s",
        where,
        f"{n:,}",
        len(names),
        *(f"{len(triples[s]):,}" for s in SPLITS),
        f"{len(unseen):,}",
        "" if node_kinds is None else f"; node kinds {', '.join(node_kinds.names)} ({col} column of {nodes})",
    )
    return ds


def load_kg_edge_list(spec) -> LinkDataset:
    """An edge list with a relation column (spec.relation, --relation COLUMN): src = head, dst = tail; its split
    column's split, else a seeded random split of the distinct triples by spec.split's shares (85/5/10)."""
    from common.datasets.edgelist import _split_masks
    from common.datasets.fractions import DEFAULT_SPLIT, check_split
    from common.datasets.tables import read_columns, stem_of

    path, col = Path(spec.dataset), spec.relation.strip().lower()
    hint = f"src,dst,{col}[,split]"
    try:
        cols = read_columns(path, ("src", "dst", col), optional=("split",), hint=hint).cols
    except DatasetError as err:
        if f"missing column(s) {col} " not in str(err):
            raise
        raise DatasetError(f"{str(err).split(';')[0]}; pass --relation with the name of its relation column") from None
    text = np.stack([_text(cols[c], path, c) for c in ("src", col, "dst")], axis=1)
    if "split" in cols:
        masks = _split_masks(path, cols["split"])
        parts = {s: text[masks[s]] for s in SPLITS}
    else:
        _, valid, test = check_split(spec.split or DEFAULT_SPLIT)
        order = np.random.default_rng(spec.seed).permutation(len(text))
        n_valid, n_test = int(valid / 100 * len(text)), int(test / 100 * len(text))
        parts = {
            "valid": text[order[:n_valid]],
            "test": text[order[n_valid : n_valid + n_test]],
            "train": text[order[n_valid + n_test :]],
        }
    if not len(parts["train"]) or not len(parts["valid"]) or not len(parts["test"]):
        raise DatasetError(f"{path}: a typed split needs triples in train, valid and test; pass more rows or --split")
    ds = typed_dataset(stem_of(path), parts, spec.seed, str(path), nodes=spec.nodes)
    return attach_typed_features(ds, spec.node_features, spec.fill_features)


def _text(col, path: Path, name: str) -> np.ndarray:
    """A column as text ids (numbers too: one id space with the other end's), empty values refused."""
    import pyarrow as pa

    if col.null_count:
        raise DatasetError(f"{path}: column '{name}' has empty values; fill every row")
    return np.asarray(col.cast(pa.string()).to_pylist(), dtype=object)


def unique_triples(t: np.ndarray, n: int, r: int) -> np.ndarray:
    """Distinct triples in first-occurrence order (a repeated line counts once)."""
    from common.unique import unique_first

    return t[unique_first((t[:, 0] * r + t[:, 1]) * n + t[:, 2])]


def triples_dataset(
    name: str,
    triples: dict[str, np.ndarray],
    n: int,
    names: tuple,
    seed: int,
    per_side: int = PER_SIDE,
    ends: dict | None = None,
    kinds=None,
) -> LinkDataset:
    """A directed, typed LinkDataset from (T, 3) int64 [head, relation, tail] triples per split; with node kinds
    (`ends`, Relations.ends, and the `kinds` they come from) every corruption is of its relation's kind."""
    from common.datasets.corruptions import filtered_corruptions

    pos = {s: np.ascontiguousarray(triples[s][:, [0, 2]]) for s in SPLITS}
    splits = {s: Split(pos=pos[s]) for s in SPLITS}
    seen = np.concatenate([triples["train"], triples["valid"]])
    known = {"valid": seen, "test": np.concatenate([seen, triples["test"]])}
    for i, s in enumerate(("valid", "test")):
        heads, tails = filtered_corruptions(triples[s], known[s], n, per_side, int(seed) * 2 + i + 1, allowed=ends)
        splits[s].neg[KG] = corruption_pairs(triples[s], heads, tails)
    graph = Graph.from_edges(pos["train"], num_nodes=n)
    ds = LinkDataset(name=name, graph=graph, splits=splits, metric={KG: "mrr"}, own=True)
    ds.out_graphs = {"train": DiGraph.from_edges(pos["train"], n)}
    pos_rel = {s: np.ascontiguousarray(triples[s][:, 1]) for s in SPLITS}
    ds.relations = Relations(names=tuple(names), pos=pos_rel, ends=ends, kinds=kinds)
    return ds


def corruption_pairs(triples: np.ndarray, heads: np.ndarray, tails: np.ndarray) -> np.ndarray:
    """(P, 2K, 2) negative pairs of each triple: its corrupted heads (h', t), then its corrupted tails (h, t');
    a -1 corruption gives the pair (-1, -1) (padding, never sampled nor ranked)."""
    P, k = heads.shape
    out = np.full((P, heads.shape[1] + tails.shape[1], 2), -1, dtype=np.int64)
    out[:, :k, 0], out[:, :k, 1] = heads, triples[:, 2:3]
    out[:, k:, 0], out[:, k:, 1] = triples[:, 0:1], tails
    out[out.min(axis=2) < 0] = -1
    return out


def triple_csr(ds: LinkDataset, which: str = "train") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr (N+1,) int64, tails (E,) int64, relations (E,) int32) of the training triples, row h sorted by
    (tail, relation): what a typed shard set ships as graph `which`'s triple CSR (common/shards.py, version 4).
    A knowledge graph's splits are all sampled on the training triples; a set with a test graph (a user-item file's
    temporal split) samples test on the train + valid triples."""
    t = ds.relations.triples("train", ds.splits["train"].pos)
    if which == "test" and ds.test_graph is not None:
        t = np.concatenate([t, ds.relations.triples("valid", ds.splits["valid"].pos)])
    return triples_csr(t, ds.num_nodes)


def triples_csr(t: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The triple CSR (as triple_csr) of any (T, 3) [head, relation, tail] triples of an n-entity graph."""
    t = t[t[:, 0] != t[:, 2]]  # as the graphs: no self-loops
    t = t[np.lexsort((t[:, 1], t[:, 2], t[:, 0]))]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(t[:, 0], minlength=n), out=indptr[1:])
    return indptr, np.ascontiguousarray(t[:, 2]), t[:, 1].astype(np.int32)
