"""A user's own edge list (CSV or Parquet with columns src, dst[, split]) -> LinkDataset.

Also home of the two helpers every randomly split dataset shares (cora, edge lists, synthetic):
`sample_non_edges` (vectorised rejection sampling of negatives) and `random_split_dataset`
(HeaRT's recipe: seeded split of the undirected edges + as many random negatives as positives).

Conventions: node ids are 0-based integers and num_nodes = max id + 1; edges are undirected, so
(u, v) and (v, u) are one edge and pairs are stored as (min, max); self-loops carry no link
information and are dropped. With a split column, the user's assignment is kept as given (an edge
repeated across splits stays in both, as in ogbl-collab); without one, the deduplicated edges are
split at random with a seed.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from common.datasets.base import DatasetError, LinkDataset, Split, training_graph
from common.graph import Graph

SPLIT_VALUES = ("train", "valid", "test")
CSV_SUFFIXES = (".csv", ".csv.gz")
PARQUET_SUFFIXES = (".parquet", ".pq")


# ---------------------------------------------------------------------------------- shared helpers
def sample_non_edges(graph: Graph, count: int, rng: np.random.Generator, accept=None,
                     exclude: np.ndarray | None = None, what: str = "negatives") -> np.ndarray:
    """`count` distinct uniform node pairs (min, max) that are not edges of `graph` nor self-loops.

    accept: optional vectorised filter pairs -> bool mask (e.g. "far apart in latent space").
    exclude: (M, 2) pairs that must not be returned either (keeps valid and test negatives disjoint).
    Rejection sampling in batches: sparse graphs accept almost every draw, so it is a few passes.
    """
    n = graph.num_nodes
    if count <= 0:
        return np.zeros((0, 2), dtype=np.int64)
    free = n * (n - 1) // 2 - graph.num_edges - (0 if exclude is None else len(exclude))
    if count > free:
        raise DatasetError(f"{what}: asked for {count} non-edges but the graph has only {free}; "
                           "use fewer evaluation edges or a sparser graph")
    taken = None
    if exclude is not None and len(exclude):
        ex = np.sort(np.asarray(exclude, dtype=np.int64).reshape(-1, 2), axis=1)
        taken = np.unique(ex[:, 0] * n + ex[:, 1])
    keys = np.zeros(0, dtype=np.int64)
    for _ in range(200):
        need = count - len(keys)
        draw = rng.integers(0, n, size=(2 * need + 64, 2), dtype=np.int64)
        draw = np.sort(draw, axis=1)
        ok = (draw[:, 0] != draw[:, 1])
        ok[ok] = ~graph.has_edge(draw[ok, 0], draw[ok, 1])
        if accept is not None and ok.any():
            ok[ok] = np.asarray(accept(draw[ok]), dtype=bool)
        new = draw[ok, 0] * n + draw[ok, 1]
        if taken is not None:
            new = new[~np.isin(new, taken)]
        keys = np.concatenate([keys, new])
        _, first = np.unique(keys, return_index=True)
        keys = keys[np.sort(first)]  # dedup, keeping the random draw order
        if len(keys) >= count:
            keys = keys[:count]
            return np.stack([keys // n, keys % n], axis=1)
    raise DatasetError(f"{what}: found only {len(keys)} of {count} acceptable non-edges after 200 rounds; "
                       "the graph is too dense or the filter too strict")


def random_split_dataset(name: str, edges: np.ndarray, num_nodes: int, seed: int = 0, val_frac: float = 0.05,
                         test_frac: float = 0.10, x=None, full_graph: Graph | None = None,
                         where: str = "") -> LinkDataset:
    """Seeded random train/valid/test split of undirected edges (E, 2) with random non-edge negatives.

    valid/test get floor(frac * E) edges each, train the rest; negatives are distinct non-edges of
    the full graph, disjoint between valid and test, as many as each split's positives ("original").
    """
    where = where or name
    if not (0 <= val_frac < 1 and 0 <= test_frac < 1 and val_frac + test_frac < 1):
        raise DatasetError(f"{where}: val_frac={val_frac}, test_frac={test_frac} must be >= 0 and sum below 1")
    full = full_graph if full_graph is not None else Graph.from_edges(edges, num_nodes=num_nodes)
    edges = full.edge_array()  # undirected, deduplicated, no self-loops, (min, max)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(edges))
    n_valid, n_test = int(val_frac * len(edges)), int(test_frac * len(edges))
    test, valid, train = np.split(edges[perm], [n_test, n_test + n_valid])
    if len(train) == 0:
        raise DatasetError(f"{where}: no train edges left after the split ({len(edges)} edges in all); "
                           "add edges or lower val_frac/test_frac")
    negs = sample_non_edges(full, n_valid + n_test, rng, what=f"{where} negatives")
    splits = {"train": Split(pos=train),
              "valid": Split(pos=valid, neg={"original": negs[:n_valid]}),
              "test": Split(pos=test, neg={"original": negs[n_valid:]})}
    return LinkDataset(name=name, graph=training_graph(train, num_nodes, x=x), splits=splits,
                       metric={"original": "mrr"})


# ---------------------------------------------------------------------------------- edge-list files
def _read_table(path: Path):
    import pandas as pd

    lower = path.name.lower()
    try:
        if lower.endswith(CSV_SUFFIXES):
            return pd.read_csv(path, skipinitialspace=True)
        if lower.endswith(PARQUET_SUFFIXES):
            return pd.read_parquet(path)
    except pd.errors.EmptyDataError:
        raise DatasetError(f"{path}: empty file; write a header 'src,dst[,split]' and one edge per row") from None
    except Exception as err:  # pyarrow / parser errors: one line naming the file
        raise DatasetError(f"{path}: could not read ({type(err).__name__}: {err})") from None
    raise DatasetError(f"{path}: unknown extension; use .csv, .csv.gz, .parquet or .pq")


def _id_column(df, col: str, path: Path) -> np.ndarray:
    import pandas as pd

    s = df[col]
    if pd.api.types.is_integer_dtype(s) and not pd.api.types.is_bool_dtype(s):
        vals = s.to_numpy(dtype=np.int64)
    elif pd.api.types.is_float_dtype(s):
        f = s.to_numpy(dtype=np.float64)
        if not (np.all(np.isfinite(f)) and np.all(f == np.round(f))):
            bad = f[~(np.isfinite(f) & (f == np.round(f)))][0]
            raise DatasetError(f"{path}: column '{col}' holds non-integer node id {bad}; ids must be integers")
        vals = f.astype(np.int64)
    else:
        raise DatasetError(f"{path}: column '{col}' must hold integer node ids, got dtype {s.dtype} "
                           f"(e.g. {s.iloc[0]!r}); map names to 0-based ids first")
    if vals.size and vals.min() < 0:
        raise DatasetError(f"{path}: column '{col}' holds negative node id {int(vals.min())}; ids must be >= 0")
    return vals


def _canonical_unique(pairs: np.ndarray, num_nodes: int) -> np.ndarray:
    """(min, max) pairs, self-loops dropped, duplicates merged (first occurrence order kept)."""
    pairs = np.sort(pairs, axis=1)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    _, first = np.unique(pairs[:, 0] * num_nodes + pairs[:, 1], return_index=True)
    return pairs[np.sort(first)]


def load_edge_list(path, seed: int = 0, val_frac: float | None = None, test_frac: float | None = None) -> LinkDataset:
    """CSV/Parquet edge list with columns src, dst[, split] -> LinkDataset (protocol "original").

    split values must be train/valid/test; without a split column the edges are split at random
    (val_frac / test_frac, seeded; None = 5% / 10%, --split 85,5,10). Given fractions with a split
    column are refused: the column fixes the split. Negatives: seeded random non-edges of the whole
    graph, as many as each eval split's positives.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: file not found; pass a .csv or .parquet edge list with columns src,dst[,split]")
    df = _read_table(path)
    df.columns = [str(c).strip().lower() for c in df.columns]
    missing = [c for c in ("src", "dst") if c not in df.columns]
    if missing:
        raise DatasetError(f"{path}: missing column(s) {', '.join(missing)} (found: {', '.join(df.columns) or 'none'}); "
                           "name the endpoint columns src and dst")
    if len(df) == 0:
        raise DatasetError(f"{path}: empty file (header only); add one edge per row")
    src, dst = _id_column(df, "src", path), _id_column(df, "dst", path)
    pairs = np.stack([src, dst], axis=1)
    num_nodes = int(pairs.max()) + 1
    name = next(path.name[: -len(suf)] for suf in CSV_SUFFIXES + PARQUET_SUFFIXES
                if path.name.lower().endswith(suf))

    if "split" not in df.columns:
        full = Graph.from_edges(pairs, num_nodes=num_nodes)
        if full.num_edges == 0:
            raise DatasetError(f"{path}: no train edges (every row is a self-loop); add edges between distinct nodes")
        return random_split_dataset(name, full.edge_array(), num_nodes, seed=seed,
                                    val_frac=0.05 if val_frac is None else val_frac,
                                    test_frac=0.10 if test_frac is None else test_frac, full_graph=full, where=str(path))
    if val_frac is not None or test_frac is not None:
        raise DatasetError(f"{path}: --split: the file's split column fixes the split; drop --split or the column")

    labels = df["split"].astype(str).str.strip().str.lower().to_numpy()
    unknown = sorted(set(labels.tolist()) - set(SPLIT_VALUES))
    if unknown:
        raise DatasetError(f"{path}: unknown split value(s) {', '.join(map(repr, unknown))} in column 'split'; "
                           "use train, valid or test")
    pos = {s: _canonical_unique(pairs[labels == s], num_nodes) for s in SPLIT_VALUES}
    if len(pos["train"]) == 0:
        raise DatasetError(f"{path}: no train edges (split column has no 'train' rows between distinct nodes); "
                           "mark some edges as train")
    full = Graph.from_edges(np.concatenate(list(pos.values())), num_nodes=num_nodes)
    rng = np.random.default_rng(seed)
    n_valid, n_test = len(pos["valid"]), len(pos["test"])
    negs = sample_non_edges(full, n_valid + n_test, rng, what=f"{path} negatives")
    splits = {"train": Split(pos=pos["train"]),
              "valid": Split(pos=pos["valid"], neg={"original": negs[:n_valid]}),
              "test": Split(pos=pos["test"], neg={"original": negs[n_valid:]})}
    return LinkDataset(name=name, graph=training_graph(pos["train"], num_nodes), splits=splits,
                       metric={"original": "mrr"})
