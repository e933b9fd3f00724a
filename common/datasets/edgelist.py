"""A user's own edge list (CSV/TSV, gzipped or not, or Parquet; columns src, dst[, split]) -> LinkDataset.

Also home of `random_split_dataset`, which every randomly split dataset shares (cora, edge lists, synthetic):
HeaRT's recipe, a seeded split of the undirected edges + as many random negatives as positives
(common/datasets/negatives.py draws them).

Conventions: node ids of any kind are mapped to 0..N-1 (common/datasets/ids.py); edges are undirected, so
(u, v) and (v, u) are one edge and pairs are stored as (min, max), unless read with --directed (ordered pairs,
common/datasets/directed.py); self-loops carry no link
information and are dropped. With a split column, the user's assignment is kept as given, and an edge
marked in two splits is refused (a test edge in the training graph leaks its label); without one, the
deduplicated edges are split at random with a seed.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from common.datasets.base import DatasetError, LinkDataset, Split, training_graph
from common.datasets.fractions import SplitSettings, shares_fix, split_fractions
from common.datasets.ids import map_node_ids, release_arrow_memory
from common.datasets.negatives import min_max, sample_non_edges
from common.datasets.spec import DatasetSpec
from common.datasets.tables import NODE_COLUMNS, NODE_ROWS, read_columns, stem_of
from common.graph import DiGraph, Graph, edge_weights
from common.memory import rss_gb
from common.unique import unique_first

log = logging.getLogger(__name__)
SPLIT_VALUES = ("train", "valid", "test")


# ---------------------------------------------------------------------------------- shared helpers
def eval_negatives(
    train: np.ndarray, valid: np.ndarray, full: Graph, num_nodes: int, n_test: int, seed: int, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """(valid, test) random negatives, as many as each split's positives. Validation's come from the training
    and validation edges alone, from their own seeded stream, so nothing about test reaches what selection
    sees; test's are non-edges of the whole graph and never a validation negative. A DiGraph `full` (--directed)
    makes them ordered non-edges."""
    known = type(full).from_edges(np.concatenate([train, valid]), num_nodes=num_nodes)
    valid_neg = sample_non_edges(known, len(valid), np.random.default_rng([seed, 1]), what=f"{where} valid negatives")
    test_neg = sample_non_edges(
        full, n_test, np.random.default_rng([seed, 2]), exclude=valid_neg, what=f"{where} test negatives"
    )
    return valid_neg, test_neg


def random_split_dataset(
    name: str,
    edges: np.ndarray | None,
    num_nodes: int,
    split: SplitSettings | None = None,
    x=None,
    full_graph: Graph | None = None,
) -> LinkDataset:
    """Seeded random train/valid/test split of undirected edges (E, 2) with random non-edge negatives.

    edges may be None when full_graph (the graph of all edges) is given; a DiGraph full_graph splits its ordered
    edges, each on its own (--directed). valid/test get floor(frac * E)
    edges each, train the rest; negatives are distinct non-edges of
    the full graph, disjoint between valid and test, as many as each split's positives ("original").
    """
    split = split or SplitSettings()  # None: HeaRT's 85/5/10, seed 0
    where, seed, val_frac, test_frac = split.where or name, split.seed, split.val_frac, split.test_frac
    if not (0 <= val_frac < 1 and 0 <= test_frac < 1 and val_frac + test_frac < 1):
        shown = ",".join(f"{100 * f:g}" for f in (1 - val_frac - test_frac, val_frac, test_frac))
        raise DatasetError(
            f"{where}: --split {shown}: the shares must be at least 0 and leave train above 0; e.g. --split 85,5,10"
        )
    t0 = time.perf_counter()
    full = full_graph if full_graph is not None else Graph.from_edges(edges, num_nodes=num_nodes)
    edges = full.edge_array()  # deduplicated, no self-loops, (min, max) (a DiGraph's: ordered)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(edges))
    n_valid, n_test = int(val_frac * len(edges)), int(test_frac * len(edges))
    if (split.valid_max or n_valid) < n_valid or (split.test_max or n_test) < n_test:
        capped = min(n_valid, split.valid_max or n_valid), min(n_test, split.test_max or n_test)
        log.info(
            "%s: the default split holds at most %s valid / %s test edges (of %s / %s at its shares); the rest train",
            where,
            *(f"{n:,}" for n in (*capped, n_valid, n_test)),
        )
        n_valid, n_test = capped
    edges = np.take(edges, perm, axis=0)  # row gather: 2x faster than edges[perm] on 30 M rows
    del perm
    empty = [s for s, n, frac in (("valid", n_valid, val_frac), ("test", n_test, test_frac)) if n == 0]
    if empty:  # the trainer selects on valid and reports test: refuse now, not after sampling
        raise DatasetError(
            f"{where}: {len(edges)} edges leave no {' and no '.join(empty)} edges at "
            f"{100 * val_frac:g}% valid / {100 * test_frac:g}% test; {shares_fix(len(edges), split.split_flag)}"
        )
    test, valid, train = np.split(edges, [n_test, n_test + n_valid])
    if len(train) == 0:
        raise DatasetError(
            f"{where}: no train edges left after the split ({len(edges)} edges in all); "
            "add edges or lower val_frac/test_frac"
        )
    valid_neg, test_neg = eval_negatives(train, valid, full, num_nodes, n_test, seed, where)
    full.release_edge_keys()  # the full graph is queried no more: its key array goes before the train graph's
    splits = {
        "train": Split(pos=train),
        "valid": Split(pos=valid, neg={"original": valid_neg}),
        "test": Split(pos=test, neg={"original": test_neg}),
    }
    log.info(
        "%s: split %s edges into %s train / %s valid / %s test, %s negatives in %.1f s (driver %.1f GiB)",
        where,
        f"{len(edges):,}",
        f"{len(train):,}",
        f"{len(valid):,}",
        f"{len(test):,}",
        f"{len(valid_neg) + len(test_neg):,}",
        time.perf_counter() - t0,
        rss_gb(),
    )
    t0 = time.perf_counter()
    graph = training_graph(train, num_nodes, x=x)
    log.info("%s: training graph built in %.1f s", where, time.perf_counter() - t0)
    return LinkDataset(name=name, graph=graph, splits=splits, metric={"original": "mrr"})


# ---------------------------------------------------------------------------------- edge-list files
def _canonical_unique(pairs: np.ndarray, num_nodes: int) -> np.ndarray:
    """(min, max) pairs, self-loops dropped, duplicates merged (first occurrence order kept)."""
    pairs = min_max(pairs)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    return pairs[unique_first(pairs[:, 0] * num_nodes + pairs[:, 1])]


def _split_masks(path: Path, col) -> dict[str, np.ndarray]:
    """Row masks of train/valid/test from the split column (whitespace and case forgiven), vectorised."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if col.null_count:
        raise DatasetError(f"{path}: column 'split' has empty values; use train, valid or test in every row")
    labels = pc.utf8_lower(pc.utf8_trim_whitespace(col.cast(pa.string())))
    masks = {s: pc.equal(labels, s).to_numpy(zero_copy_only=False) for s in SPLIT_VALUES}
    other = ~(masks["train"] | masks["valid"] | masks["test"])
    if other.any():
        unknown = sorted(set(labels.filter(pa.array(other)).to_pylist()[:10_000]))
        raise DatasetError(
            f"{path}: unknown split value(s) {', '.join(map(repr, unknown[:10]))} in column 'split'; "
            "use train, valid or test"
        )
    return masks


def _refuse_shared_edges(path: Path, pos: dict[str, np.ndarray], num_nodes: int, node_ids: np.ndarray) -> None:
    """An edge in two splits of the split column: a valid or test positive would sit in the training graph
    (its label visible to the sampler and the heuristics), or be selected on and reported at once."""
    keys = {s: pos[s][:, 0] * num_nodes + pos[s][:, 1] for s in SPLIT_VALUES}
    for a, b in (("train", "test"), ("train", "valid"), ("valid", "test")):
        both = np.flatnonzero(np.isin(keys[a], keys[b]))
        if both.size:
            u, v = pos[a][both[0]]
            raise DatasetError(
                f"{path}: {both.size} edge(s) are marked both {a} and {b} in the split column (first: "
                f"{node_ids[u]},{node_ids[v]}); a held-out edge must not be in another split: "
                "keep each edge in one split"
            )


def load_edge_list(spec: DatasetSpec, split_flag: str | None = "--split") -> LinkDataset:
    """Edge-list file with columns src, dst[, split, time, weight] -> LinkDataset (protocol "original").

    Files: common/datasets/tables.py; node ids: common/datasets/ids.py (ids of any kind are mapped to 0..N-1;
    the dataset's `node_ids` holds the user's ids). nodes: an optional file listing node ids (column `node` or `id`), so
    isolated nodes exist and can be scored. split values must be train/valid/test, and valid and test
    must both have rows; without a split column the edges are split by their `time` column when the file has
    one (common/datasets/temporal.py), else at random (spec.split's shares, seeded; None = 85,5,10);
    spec.split_kind "random" or "temporal" (--split random|temporal) chooses. Given shares with a split column
    are refused: the column fixes the split. Negatives: seeded random non-edges of the
    whole graph, as many as each eval split's positives. weight: summed per pair onto each split's graph
    (LinkDataset.weights) for the weighted heuristics. node_features / fill_features: --node-features and
    --fill-features (common/datasets/node_features.py). Extra columns: common/datasets/columns.py. split_flag: the
    command's flag of the split's shares, named in the fix of a split too small (None: the command has none).
    """
    from common.datasets.columns import edge_columns, parse_time, parse_weight
    from common.datasets.node_features import load_node_features

    path, seed, nodes, split_kind = Path(spec.dataset), spec.seed, spec.nodes, spec.split_kind
    val_frac, test_frac = (None, None) if spec.split is None else split_fractions(spec.split)
    table = read_columns(path, ("src", "dst"), optional=edge_columns(path, spec.ignore_columns))
    masks = _split_masks(path, table.cols.pop("split")) if "split" in table.cols else None
    times = parse_time(path, table.cols.pop("time")) if "time" in table.cols else None
    weights = parse_weight(path, table.cols.pop("weight")) if "weight" in table.cols else None
    kind = _split_kind(path, split_kind, masks is not None, times is not None, val_frac, test_frac)
    cols, sources = table.cols, {}  # one dict: map_node_ids drops the Arrow columns from it once converted
    if nodes is not None:
        from common.datasets.kinds import refuse_untyped_kinds

        refuse_untyped_kinds(nodes)  # node kinds need relations to join
        listed = read_columns(Path(nodes), NODE_COLUMNS, any_of=True, hint="node", rows=NODE_ROWS)
        cols["node"] = listed.cols[NODE_COLUMNS[0]]
        sources["node"] = Path(nodes)
    mapped, node_ids = map_node_ids(path, cols, sources)
    del table, cols
    release_arrow_memory()
    pairs = np.empty((len(mapped["src"]), 2), dtype=np.int64)
    pairs[:, 0], pairs[:, 1] = mapped.pop("src"), mapped.pop("dst")
    num_nodes, name = len(node_ids), stem_of(path)
    x = None
    if spec.node_features is not None:
        x = load_node_features(spec.node_features, node_ids, num_nodes, spec.fill_features)
    if weights is not None:
        log.info(
            "%s: column 'weight' is summed per pair and read by the weighted heuristics (wcn, waa, wra); the "
            "model reads the unweighted graph",
            path.name,
        )
    split = SplitSettings(
        val_frac=0.05 if val_frac is None else val_frac,
        test_frac=0.10 if test_frac is None else test_frac,
        seed=seed,
        where=str(path),
        split_flag=split_flag,
        valid_max=spec.held_out_max[0] if spec.held_out_max else None,
        test_max=spec.held_out_max[1] if spec.held_out_max else None,
    )
    directed = spec.directed
    if kind == "temporal":
        from common.datasets.temporal import temporal_split

        ds = temporal_split(name, pairs, times, num_nodes, split, weights=weights, x=x, directed=directed)
        log_folded(path, pairs, sum(ds.split_info["pairs"].values()), directed)
    elif masks is None:
        full = _full_graph(path, pairs, num_nodes, directed)
        rows = pairs if weights is not None else None  # the rows are read again only for their weights
        del pairs
        ds = random_split_dataset(name, None, num_nodes, split, x=x, full_graph=full)
        if weights is not None:
            ds.weights = {"train": edge_weights(ds.graph, rows, weights)}
    else:
        ds = _given_split(path, pairs, masks, num_nodes, node_ids, seed, x, directed)
        if weights is not None:
            ds.weights = {"train": edge_weights(ds.graph, pairs, weights)}
    if ds.weights is not None and not all(np.isfinite(w).all() for w in ds.weights.values()):
        raise DatasetError(  # a pair's repeats summed past float64: no weighted heuristic could tell pairs apart
            f"{path}: column 'weight': the rows of one pair sum past the largest float (1.8e308); divide the "
            "column by a constant (WCN and WRA rank the same), or drop it with --ignore-columns weight"
        )
    ds.node_ids = node_ids
    if directed:
        from common.datasets.directed import attach_direction

        attach_direction(ds, str(path))
    return ds


def _split_kind(path: Path, asked: str | None, has_column: bool, has_time: bool, val_frac, test_frac) -> str:
    """ "given" (the split column), "temporal" or "random"; a time column the split does not use is said so."""
    if has_column:
        if val_frac is not None or test_frac is not None or asked is not None:
            raise DatasetError(f"{path}: --split: the file's split column fixes the split; drop --split or the column")
        if has_time:
            log.info("%s: column 'time' is not used: the split column fixes the split", path.name)
        return "given"
    if asked == "temporal" and not has_time:
        raise DatasetError(
            f"{path}: --split temporal needs a column 'time' (integers, floats or ISO-8601 "
            "timestamps); add it, or drop 'temporal' from --split"
        )
    if asked == "random" and has_time:
        log.info("%s: column 'time' is not used: the split is random (--split random)", path.name)
    return "temporal" if has_time and asked != "random" else "random"


def log_folded(path: Path, pairs: np.ndarray, distinct: int, directed: bool = False) -> None:
    """Say that the graph is undirected and what became of the rows that are not pairs of their own: self-loops
    are dropped, and a row that repeats a pair (the same pair again, or reversed) counts once. Directed: a row
    repeats a pair only in the same direction (common/datasets/directed.py logs the rest)."""
    loops = int(np.count_nonzero(pairs[:, 0] == pairs[:, 1]))
    repeats = len(pairs) - loops - distinct
    if directed:
        log.info(
            "%s: read as directed (--directed): %s rows -> %s distinct ordered pairs; %s self-loop row(s) dropped, "
            "%s row(s) repeating a pair in the same direction",
            path.name,
            *(f"{c:,}" for c in (len(pairs), distinct, loops, repeats)),
        )
        return
    log.info(
        "%s: the graph is undirected: (u, v) and (v, u) are one pair and repeated pairs count once (%s rows -> "
        "%s distinct pairs; %s self-loop row(s) dropped, %s row(s) repeating a pair)",
        path.name,
        f"{len(pairs):,}",
        f"{distinct:,}",
        f"{loops:,}",
        f"{repeats:,}",
    )


def _full_graph(path: Path, pairs: np.ndarray, num_nodes: int, directed: bool = False) -> Graph | DiGraph:
    t0 = time.perf_counter()
    full = DiGraph.from_edges(pairs, num_nodes) if directed else Graph.from_edges(pairs, num_nodes=num_nodes)
    log.info(
        "%s: graph of %s nodes, %s edges built in %.1f s (driver %.1f GiB)",
        path.name,
        f"{num_nodes:,}",
        f"{full.num_edges:,}",
        time.perf_counter() - t0,
        rss_gb(),
    )
    log_folded(path, pairs, full.num_edges, directed)
    if full.num_edges == 0:
        raise DatasetError(f"{path}: no train edges (every row is a self-loop); add edges between distinct nodes")
    return full


def _given_split(
    path: Path, pairs: np.ndarray, masks: dict, num_nodes: int, node_ids: np.ndarray, seed: int, x, directed: bool
) -> LinkDataset:
    """The split the file's split column gives; the dataset is named after the file (directed: ordered pairs, so
    1,2 train and 2,1 test are two edges in two splits)."""
    from common.datasets.directed import ordered_unique

    name, unique = stem_of(path), ordered_unique if directed else _canonical_unique
    pos = {s: unique(pairs[masks[s]], num_nodes) for s in SPLIT_VALUES}
    log_folded(path, pairs, sum(len(p) for p in pos.values()), directed)
    _refuse_shared_edges(path, pos, num_nodes, node_ids)
    if len(pos["train"]) == 0:
        raise DatasetError(
            f"{path}: no train edges (split column has no 'train' rows between distinct nodes); "
            "mark some edges as train"
        )
    empty = [s for s in ("valid", "test") if len(pos[s]) == 0]
    if empty:  # the trainer selects on valid and reports test: refuse now, not after sampling
        counts = ", ".join(f"{s} {len(pos[s])}" for s in SPLIT_VALUES)
        raise DatasetError(
            f"{path}: the split column has no {' and no '.join(empty)} edges ({counts}); "
            "mark some rows valid and test, or drop the split column for a seeded random split"
        )
    full = (DiGraph if directed else Graph).from_edges(np.concatenate(list(pos.values())), num_nodes=num_nodes)
    valid_neg, test_neg = eval_negatives(pos["train"], pos["valid"], full, num_nodes, len(pos["test"]), seed, str(path))
    splits = {
        "train": Split(pos=pos["train"]),
        "valid": Split(pos=pos["valid"], neg={"original": valid_neg}),
        "test": Split(pos=pos["test"], neg={"original": test_neg}),
    }
    return LinkDataset(
        name=name,
        graph=training_graph(pos["train"], num_nodes, x=x),
        splits=splits,
        metric={"original": "mrr"},
        node_ids=node_ids,
    )
